#!/usr/bin/env bash
# Create (or update) the model-suite virtualenv at <repo>/.venv-models.
#
# Idempotent: re-running only installs what is missing. A stamp file records
# the requirement set that was last installed successfully so a no-op re-run
# does not even start pip.
#
# Note: PyPI's default Linux torch wheel pulls the CUDA runtime wheels
# (several GB in total). Only the CPU is used by these scripts.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VENV:-$REPO/.venv-models}"
PYTHON="${PYTHON:-python3}"

# Pinned to versions that still ship the legacy TorchScript ONNX exporter
# (torch.onnx.export(..., dynamo=False)) and whose transformers models trace
# cleanly with it.
REQS=(
  "torch==2.8.0"
  "torchvision==0.23.0"
  "transformers>=4.45,<5"
  "onnx>=1.16"
  "onnxruntime>=1.18"
  "numpy>=1.26"
)

STAMP="$VENV/.kiln-models-reqs"
WANT="$(printf '%s\n' "${REQS[@]}")"

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "[setup] creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] \
   && "$VENV/bin/python" -c "import torch, torchvision, transformers, onnx, onnxruntime, numpy" 2>/dev/null; then
  echo "[setup] $VENV is up to date"
else
  echo "[setup] installing: ${REQS[*]}"
  "$VENV/bin/python" -m pip install --progress-bar off "${REQS[@]}"
  printf '%s\n' "$WANT" > "$STAMP"
fi

"$VENV/bin/python" - <<'PY'
import numpy, onnx, onnxruntime, torch, torchvision, transformers
print(f"[setup] torch {torch.__version__}, torchvision {torchvision.__version__}, "
      f"transformers {transformers.__version__}, onnx {onnx.__version__}, "
      f"onnxruntime {onnxruntime.__version__}, numpy {numpy.__version__}")
PY
echo "[setup] activate with: source $VENV/bin/activate"
