#!/usr/bin/env bash
# The CUDA backend's checks on a machine with an NVIDIA GPU (not CI: CI has
# no GPU). Needs what `scripts/gpu/pack.sh` put in .gpu/ (the kiln binary,
# the node-test binary, the node tests); writes logs to $OUT (or out/gpu).
#   1. the embedded default model on --backend cuda against the interpreter;
#   2. the gemm template's product cases, f32 and TF32, against their
#      error bounds (kiln-conformance/tests/cuda_products.rs), and large
#      reductions against the interpreter (kiln-cuda/tests/reductions.rs);
#   3. every ONNX node test the interpreter passes, on --backend cuda;
#   4. random graphs under every fusion planner against the interpreter
#      (beside step 3);
#   5. the default model's device time (kiln bench --backend cuda);
#   6. scripts/bench/gpu.py (kiln against PyTorch).
# KILN_GPU_NODE_TESTS=0 skips step 3, KILN_GPU_BENCH=0 step 6.
set -u
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
G=.gpu
nvidia-smi -L || true
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())' || true

echo "== default model"
$G/kiln run --backend reference -o /tmp/ref >"$OUT/default_ref.log" 2>&1
$G/kiln run --backend cuda -o /tmp/cuda 2>&1 | tee "$OUT/default_cuda.log"
python3 - <<'PY'
import numpy as np, glob
for f in sorted(glob.glob("/tmp/ref/output_*.npy")):
    a = np.load(f); b = np.load(f.replace("/tmp/ref", "/tmp/cuda"))
    err = float(np.max(np.abs(a.astype(np.float64) - b)))
    bound = 1e-3 * float(np.max(np.abs(a))) + 1e-5
    print(f"default model {f[-12:]}: max |cuda - reference| = {err:.3g} (bound {bound:.3g}):", "OK" if err <= bound else "MISMATCH")
PY

echo "== gemm template products, f32 and tf32"
KILN_CUDA_TESTS=1 timeout 120 $G/cuda_products --nocapture 2>&1 | tee "$OUT/cuda_products.log" | grep -E "error / bound|test result|panicked" -A2 | head -30

# The random graphs run beside the node tests (both mostly compile on the
# CPU; neither is timed), and are reported after them.
KILN_RANDOM_GRAPHS=${KILN_RANDOM_GRAPHS:-8} KILN_CUDA_TESTS=1 timeout ${KILN_GPU_RANDOM_TIMEOUT:-200} \
  $G/random_graphs --nocapture >"$OUT/random_graphs.log" 2>&1 &
RANDOM_GRAPHS=$!

echo "== reductions in every GPU form against the interpreter"
KILN_CUDA_TESTS=1 timeout 120 $G/cuda_reductions --nocapture 2>&1 | grep -E "launches|test result|panicked" -A2 | head -20

if [ "${KILN_GPU_NODE_TESTS:-1}" = 1 ]; then
  echo "== node tests"
  mkdir -p /tmp/nt && tar xzf $G/node-tests.tar.gz -C /tmp/nt
  KILN_CUDA_TESTS=1 KILN_ONNX_NODE_TESTS=/tmp/nt/onnx-node-tests timeout ${KILN_GPU_NODE_TIMEOUT:-300} \
    $G/node_tests onnx_node_tests_cuda --nocapture >"$OUT/node_tests.log" 2>&1
  echo "node tests exit $?"
  grep -E "node tests pass|listed cases regressed" "$OUT/node_tests.log"
  grep -A40 "listed cases regressed" "$OUT/node_tests.log" | cut -c1-300 | head -60
fi

echo "== random graphs, every planner"
wait $RANDOM_GRAPHS
echo "random graphs exit $?"
grep -E "test result|panicked" -A3 "$OUT/random_graphs.log" | head -20

echo "== bench default model"
$G/kiln bench --backend cuda --runs 50 2>&1 | tail -3

if [ "${KILN_GPU_BENCH:-1}" = 1 ]; then
  echo "== benchmarks (scripts/bench/gpu.py)"
  PYTHONUNBUFFERED=1 timeout ${KILN_GPU_BENCH_TIMEOUT:-300} python3 scripts/bench/gpu.py --kiln $G/kiln \
    --runs 50 --warmup 5 ${KILN_GPU_BENCH_ARGS:-} --out "$OUT/gpu_bench.json" 2>&1 | tee "$OUT/gpu_bench.log" | grep -v '^{'
fi
