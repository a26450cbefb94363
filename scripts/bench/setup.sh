#!/usr/bin/env bash
# Extend the model-suite virtualenv (<repo>/.venv-models) with the extra
# engines the benchmark harness compares against (OpenVINO).
#
# Idempotent: creates the base venv through scripts/models/setup.sh when it is
# missing, and only runs pip when an engine does not import.
#   VENV=/path/to/venv scripts/bench/setup.sh      # another venv
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VENV:-$REPO/.venv-models}"
export VENV

# onnxruntime, torch, torchvision, transformers come from the model suite.
if ! "$VENV/bin/python" -c "import torch, torchvision, transformers, onnx, onnxruntime" 2>/dev/null; then
  "$REPO/scripts/models/setup.sh"
fi

BENCH_REQS=(
  "openvino>=2024.4"
)

if "$VENV/bin/python" -c "import openvino" 2>/dev/null; then
  echo "[bench-setup] benchmark engines already installed in $VENV"
else
  echo "[bench-setup] installing: ${BENCH_REQS[*]}"
  "$VENV/bin/python" -m pip install --progress-bar off "${BENCH_REQS[@]}"
fi

"$VENV/bin/python" - <<'PY'
import onnxruntime, openvino, torch
print(f"[bench-setup] onnxruntime {onnxruntime.__version__}, "
      f"openvino {openvino.get_version()}, torch {torch.__version__}")
PY
