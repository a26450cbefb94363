#!/usr/bin/env python3
"""kiln's CPU backend against onnxruntime on the reduction cases of
scripts/bench/gpu.py (PANAMERA's f32 sub-graphs, single reductions in the
three canonical forms, Softmax and LayerNorm rows), in one run, both on
--threads threads (not run in CI).

For each case: `KILN bench CASE.onnx --threads T --json` (median of --runs
runs after --warmup) and an onnxruntime session with intra_op_num_threads
T timed the same way on the same random input; kiln / onnxruntime ratio
(< 1: kiln is faster). --kiln may name several binaries (comma-separated)
to compare builds in the same run.

Usage (in the model venv, scripts/bench/setup.sh):
    python scripts/bench/reductions_cpu.py --kiln target/release/kiln
    python scripts/bench/reductions_cpu.py --kiln old/kiln,target/release/kiln --only sum_all
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx


def gpu_bench():
    spec = importlib.util.spec_from_file_location("gpu_bench", Path(__file__).with_name("gpu.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def time_ort(path, shapes, dtypes, threads, runs, warmup):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feed = {k: np.random.rand(*v).astype(dtypes[k]) for k, v in shapes.items()}
    for _ in range(warmup):
        s.run(None, feed)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        s.run(None, feed)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def time_kiln(kiln, path, threads, runs, warmup):
    r = subprocess.run([kiln, "bench", str(path), "--threads", str(threads), "--json",
                        "--runs", str(runs), "--warmup", str(warmup)],
                       capture_output=True, text=True, timeout=600)
    line = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not line:
        raise RuntimeError((r.stderr or r.stdout).strip().splitlines()[-1:])
    return json.loads(line[-1])["median_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="target/release/kiln")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    kilns = args.kiln.split(",")
    only = [s for s in args.only.split(",") if s]
    tmp = Path(tempfile.mkdtemp())
    heads = " | ".join(f"kiln ms ({k})" for k in kilns)
    print(f"| case | {heads} | onnxruntime ms | kiln / ort (last build) |")
    print("|---|" + "---:|" * (len(kilns) + 2))
    cases = gpu_bench()
    for name, (model, _, shapes) in cases.cases().items():
        if only and not any(o in name for o in only):
            continue
        path = tmp / f"{name}.onnx"
        onnx.save(model, path)
        try:
            ks = [time_kiln(k, path, args.threads, args.runs, args.warmup) for k in kilns]
            o = time_ort(path, shapes, cases.input_dtypes(model), args.threads, args.runs,
                         args.warmup)
            cells = " | ".join(f"{k:.3f}" for k in ks)
            print(f"| {name} | {cells} | {o:.3f} | {ks[-1] / o:.2f} |", flush=True)
        except Exception as e:  # one broken case must not hide the others
            print(f"| {name} | error: {str(e)[:120]} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
