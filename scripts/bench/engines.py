#!/usr/bin/env python3
"""One peer engine on one model, in its own process (called by run.py).

    python scripts/bench/engines.py ENGINE MODEL_DIR --threads 2 --runs N --warmup W

ENGINE is one of ort, openvino, torch, torch_compile. MODEL_DIR holds
model.onnx and input_<k>.npy (graph-input order, from
scripts/models/reference.py). The last stdout line is the result:

    @@RESULT {"median_ms": .., "min_ms": .., "runs": N, "compile_s": .., "version": ..}

or {"error": "..."}. Each engine runs W untimed warm-up inferences, then N
inferences each timed with time.perf_counter(); the median and the minimum of
those N are reported. compile_s is the engine's preparation time: session
creation (onnxruntime), compile_model (OpenVINO), the first call, i.e. the
compilation, of torch.compile (it is also the first warm-up run); none for
eager PyTorch. cpu_other is the CPU time other processes used during the timed
runs, in cores (0.0 = the machine was otherwise idle).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULT_TAG = "@@RESULT "


def load_inputs(model_dir: Path) -> list:
    import numpy as np

    arrays = []
    while (model_dir / f"input_{len(arrays)}.npy").exists():
        arrays.append(np.load(model_dir / f"input_{len(arrays)}.npy"))
    if not arrays:
        raise RuntimeError(f"no input_0.npy in {model_dir} (run scripts/models/reference.py)")
    return arrays


class CpuMeter:
    """CPU time used by other processes while a block runs, from /proc/stat.

    Machine-wide busy time minus our own CPU time (this process's threads, or
    with children=True the waited-for child processes'), divided by wall time:
    how many cores something else kept busy.
    """

    def __init__(self, children: bool = False):
        self.children = children
        self.cores = 0.0

    def __enter__(self):
        self.t0, self.busy0, self.own0 = time.perf_counter(), _machine_busy_s(), self._own()
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.t0
        other = (_machine_busy_s() - self.busy0) - (self._own() - self.own0)
        self.cores = max(0.0, other / wall) if wall > 0 else 0.0
        return False

    def _own(self) -> float:
        t = os.times()
        return t.children_user + t.children_system if self.children else t.user + t.system


def _machine_busy_s() -> float:
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def time_runs(infer, runs: int, warmup: int) -> dict:
    """W warm-up calls (the first one timed separately), then N timed calls."""
    first_s = None
    for i in range(warmup):
        t0 = time.perf_counter()
        infer()
        if i == 0:
            first_s = time.perf_counter() - t0
    times = []
    with CpuMeter() as meter:
        for _ in range(runs):
            t0 = time.perf_counter()
            infer()
            times.append(time.perf_counter() - t0)
    return {
        "median_ms": statistics.median(times) * 1e3,
        "min_ms": min(times) * 1e3,
        "runs": runs,
        "first_call_s": first_s,
        "cpu_other": round(meter.cores, 3),
    }


def bench_ort(model_dir: Path, args) -> dict:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    t0 = time.perf_counter()
    sess = ort.InferenceSession(str(model_dir / "model.onnx"), so,
                                providers=["CPUExecutionProvider"])
    compile_s = time.perf_counter() - t0
    feed = {i.name: a for i, a in zip(sess.get_inputs(), load_inputs(model_dir))}
    result = time_runs(lambda: sess.run(None, feed), args.runs, args.warmup)
    return {**result, "compile_s": compile_s, "version": ort.__version__}


# OpenVINO's CPU plugin defaults to bf16 inference on CPUs with AVX512_BF16 or
# AMX (Zen 4 included) and pins its threads; force fp32 so every engine does
# the same arithmetic, and pin nothing, like the other engines.
def openvino_config(threads: int) -> dict:
    return {
        "INFERENCE_NUM_THREADS": threads,
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "f32",
        "ENABLE_CPU_PINNING": False,
    }


def bench_openvino(model_dir: Path, args) -> dict:
    import openvino as ov

    core = ov.Core()
    t0 = time.perf_counter()
    compiled = core.compile_model(str(model_dir / "model.onnx"), "CPU",
                                  openvino_config(args.threads))
    compile_s = time.perf_counter() - t0
    request = compiled.create_infer_request()
    feed = {i: a for i, a in enumerate(load_inputs(model_dir))}
    result = time_runs(lambda: request.infer(feed), args.runs, args.warmup)
    used = {k: _ov_value(compiled.get_property(k)) for k in openvino_config(args.threads)}
    return {**result, "compile_s": compile_s, "version": ov.get_version(), "config": used}


def _ov_value(value) -> str:
    """OpenVINO property as plain text (element types print as <Type: ...>)."""
    name = getattr(value, "get_type_name", None)
    return name() if callable(name) else str(value)


def torch_module(model_name: str):
    """The module export.py exports for MODEL_NAME (random weights, eval mode)
    and the inputs as tensors from input_<k>.npy."""
    import torch

    sys.path.insert(0, str(HERE.parent / "models"))
    import export  # scripts/models/export.py

    if model_name not in export.MODELS:
        raise RuntimeError(f"export.py has no builder for {model_name!r}")
    torch.manual_seed(0)
    # The first module is exactly what export.py traced (for GPT-2, without the
    # redundant vmap-built causal mask; export.py checks outputs are unchanged).
    module = export.MODELS[model_name]()[0].eval()
    if hasattr(torch.backends, "mha"):
        torch.backends.mha.set_fastpath_enabled(False)  # same path as the export
    return module


def bench_torch(model_dir: Path, args, compiled: bool) -> dict:
    if compiled:
        # A fresh inductor cache, so compile_s is a cold compile every time
        # (the default cache in /tmp would make later runs look faster).
        cache = tempfile.mkdtemp(prefix="kiln-bench-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        try:
            return _bench_torch(model_dir, args, compiled)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    return _bench_torch(model_dir, args, compiled)


def _bench_torch(model_dir: Path, args, compiled: bool) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    module = torch_module(args.model_name or model_dir.name)
    inputs = [torch.from_numpy(a) for a in load_inputs(model_dir)]
    if compiled:
        module = torch.compile(module)  # inductor, default mode

    def infer():
        with torch.inference_mode():
            return module(*inputs)

    result = time_runs(infer, args.runs, max(args.warmup, 1 if compiled else 0))
    compile_s = result["first_call_s"] if compiled else None
    return {**result, "compile_s": compile_s, "version": torch.__version__,
            "torch_threads": torch.get_num_threads()}


ENGINES = {
    "ort": bench_ort,
    "openvino": bench_openvino,
    "torch": lambda d, a: bench_torch(d, a, compiled=False),
    "torch_compile": lambda d, a: bench_torch(d, a, compiled=True),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("engine", choices=sorted(ENGINES))
    p.add_argument("model_dir", type=Path)
    p.add_argument("--model-name", default="",
                   help="export.py builder name (default: the model directory's name)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args(argv)
    if args.runs < 1 or args.warmup < 0 or args.threads < 1:
        p.error("need --runs >= 1, --warmup >= 0, --threads >= 1")
    try:
        result = ENGINES[args.engine](args.model_dir, args)
    except Exception as e:  # reported to run.py as this engine's "n/a" reason
        traceback.print_exc(file=sys.stderr)
        first = (str(e).strip().splitlines() or [""])[0]
        result = {"error": f"{type(e).__name__}: {first}"[:300]}
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
