#!/usr/bin/env python3
"""Per-node times of onnxruntime on one model, to set beside `kiln bench --profile`.

Runs the model with onnxruntime's profiler (all graph optimizations, the given
thread count), takes each node's median over the profiled runs and prints the
slowest nodes and the totals per op type. Inputs are `input_<k>.npy` next to the
model when they exist (the model suite's), else random values.

Usage (needs onnxruntime and numpy, e.g. the model venv of scripts/models):
    python scripts/bench/ort_profile.py models/resnet50/model.onnx [--threads 2]
        [--runs 20] [--warmup 5] [--top 15]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort


def model_inputs(session: ort.InferenceSession, model: Path) -> dict[str, np.ndarray]:
    """The suite's saved inputs when present, else random ones of the declared shapes."""
    feeds = {}
    rng = np.random.default_rng(0)
    for k, info in enumerate(session.get_inputs()):
        saved = model.parent / f"input_{k}.npy"
        if saved.exists():
            feeds[info.name] = np.load(saved)
            continue
        shape = [d if isinstance(d, int) else 1 for d in info.shape]
        if "int64" in info.type:
            feeds[info.name] = rng.integers(0, 100, size=shape, dtype=np.int64)
        else:
            feeds[info.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def node_times(trace: list[dict]) -> dict[str, tuple[str, list[float]]]:
    """Node name -> (op type, durations in ms of each run)."""
    times: dict[str, tuple[str, list[float]]] = {}
    for event in trace:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        name = event["name"][: -len("_kernel_time")]
        op = event.get("args", {}).get("op_name", "?")
        times.setdefault(name, (op, []))[1].append(event["dur"] / 1000.0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    plain = ort.InferenceSession(str(args.model), options, providers=["CPUExecutionProvider"])
    feeds = model_inputs(plain, args.model)
    for _ in range(args.warmup):
        plain.run(None, feeds)
    del plain

    with tempfile.TemporaryDirectory() as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(str(args.model), options, providers=["CPUExecutionProvider"])
        for _ in range(args.warmup + args.runs):
            session.run(None, feeds)
        trace = json.loads(Path(session.end_profiling()).read_text())

    times = node_times(trace)
    # The profiled runs only: drop each node's warm-up runs.
    medians = {
        name: (op, statistics.median(runs[args.warmup:] or runs))
        for name, (op, runs) in times.items()
    }
    total = sum(ms for _, ms in medians.values())
    print(f"model: {args.model}")
    print(f"onnxruntime {ort.__version__}, {args.threads} threads, "
          f"per-node median of {args.runs} runs, {total:.3f} ms in {len(medians)} nodes")
    by_op: dict[str, list[float]] = collections.defaultdict(list)
    for op, ms in medians.values():
        by_op[op].append(ms)
    print(f"{'ms':>10} {'%':>6} {'nodes':>6}  op")
    for op, values in sorted(by_op.items(), key=lambda item: -sum(item[1])):
        print(f"{sum(values):10.3f} {100 * sum(values) / total:6.1f} {len(values):6d}  {op}")
    print("slowest nodes:")
    slowest = sorted(medians.items(), key=lambda item: -item[1][1])[: args.top]
    for name, (op, ms) in slowest:
        print(f"{ms:10.3f} {100 * ms / total:6.1f}  {op} {name}")


if __name__ == "__main__":
    main()
