#!/usr/bin/env python3
"""kiln's CPU backend against onnxruntime on the reduction cases of
scripts/bench/gpu.py (PANAMERA's f32 sub-graphs, single reductions in the
three canonical forms, Softmax and LayerNorm rows), in one run, both on
--threads threads (not run in CI).

For each case: `KILN bench CASE.onnx --threads T --json` (median of --runs
runs after --warmup) and an onnxruntime session with intra_op_num_threads
T timed the same way on the same random input; kiln / onnxruntime ratio
(< 1: kiln is faster). --kiln may name several binaries (comma-separated)
to compare builds in the same run. --torch adds PyTorch eager and
torch.compile (Inductor) on the CPU, set to the same threads. Each row also
gives the bytes the case must move (inputs and outputs) and kiln's rate as a
fraction of the memory bandwidth `kiln peak` measures (STREAM triad).

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


def time_torch(fn, shapes, dtypes, threads, runs, warmup, compiled):
    """Median ms of PyTorch on the CPU, eager or torch.compile (Inductor)."""
    import torch
    torch.set_num_threads(threads)
    # Cases built by one function share its code object: without a reset,
    # Dynamo's recompile limit would leave later cases uncompiled.
    torch._dynamo.reset()
    f = torch.compile(fn) if compiled else fn
    t = {k: torch.from_numpy(np.random.rand(*v).astype(dtypes[k])) for k, v in shapes.items()}
    times = []
    with torch.no_grad():
        for _ in range(warmup):
            f(t)
        for _ in range(runs):
            s = time.perf_counter()
            f(t)
            times.append((time.perf_counter() - s) * 1e3)
    return statistics.median(times)


def peer_or_none(measure):
    """A PyTorch peer's time, or None where it fails on this case (torch.compile
    has failed to build some integer reductions): the others still count."""
    try:
        return measure()
    except Exception as e:  # noqa: BLE001 - any failure of the peer itself
        print(f"  (peer failed: {str(e).splitlines()[0][:100]})", file=sys.stderr)
        return None


def triad_gbps(kiln, threads):
    """The machine's memory bandwidth (STREAM triad) as `kiln peak` measures it."""
    r = subprocess.run([kiln, "peak", "--json", "--threads", str(threads)],
                       capture_output=True, text=True, timeout=600)
    line = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not line:
        raise RuntimeError((r.stderr or r.stdout).strip().splitlines()[-1:])
    return json.loads(line[-1])["triad_gbps"]


def bytes_moved(model, shapes, dtypes):
    """Bytes a case must read and write at least: its inputs and outputs."""
    inputs = sum(int(np.prod(s)) * np.dtype(dtypes[k]).itemsize for k, s in shapes.items())
    outputs = 0
    for o in model.graph.output:
        t = o.type.tensor_type
        size = elem_size(t.elem_type)
        outputs += int(np.prod([d.dim_value for d in t.shape.dim])) * size
    return inputs + outputs


def elem_size(elem_type):
    """Bytes of one element of ONNX type `elem_type`."""
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize


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
    ap.add_argument("--torch", action="store_true",
                    help="also PyTorch eager and torch.compile (Inductor) on the CPU")
    args = ap.parse_args()
    kilns = args.kiln.split(",")
    only = [s for s in args.only.split(",") if s]
    tmp = Path(tempfile.mkdtemp())
    heads = " | ".join(f"kiln ms ({k})" for k in kilns)
    peers = ["onnxruntime"] + (["torch eager", "torch.compile"] if args.torch else [])
    peer_heads = " | ".join(f"{p} ms" for p in peers)
    gbps = triad_gbps(kilns[-1], args.threads)
    print(f"memory bandwidth (kiln peak, STREAM triad): {gbps:.1f} GB/s on {args.threads} threads\n")
    print(f"| case | {heads} | {peer_heads} | kiln / fastest peer (last build) "
          "| MB moved | kiln GB/s (of triad) |")
    print("|---|" + "---:|" * (len(kilns) + len(peers) + 3))
    cases = gpu_bench()
    for name, (model, torch_fn, shapes) in cases.cases().items():
        if only and not any(o in name for o in only):
            continue
        path = tmp / f"{name}.onnx"
        onnx.save(model, path)
        try:
            ks = [time_kiln(k, path, args.threads, args.runs, args.warmup) for k in kilns]
            dtypes = cases.input_dtypes(model)
            ps = [time_ort(path, shapes, dtypes, args.threads, args.runs, args.warmup)]
            if args.torch:
                ps += [peer_or_none(lambda: time_torch(torch_fn, shapes, dtypes, args.threads,
                                                       args.runs, args.warmup, compiled))
                       for compiled in (False, True)]
            cells = " | ".join("failed" if v is None else f"{v:.3f}" for v in ks + ps)
            moved = bytes_moved(model, shapes, dtypes)
            rate = moved / (ks[-1] * 1e-3) * 1e-9
            fastest = min(v for v in ps if v is not None)
            print(f"| {name} | {cells} | {ks[-1] / fastest:.2f} | {moved / 1e6:.1f} "
                  f"| {rate:.1f} ({rate / gbps:.0%}) |", flush=True)
        except Exception as e:  # one broken case must not hide the others
            print(f"| {name} | error: {str(e)[:120]} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
