#!/usr/bin/env python3
"""Single-matmul efficiency: kiln's generated matmul against the FMA peak.

Builds an ONNX model with one f32 MatMul (default 1024x1024x1024, both
operands graph inputs so nothing is folded), runs `kiln bench` on it and
`kiln peak` before and after, all with the same thread count, and prints
GFLOP/s and the fraction of the peak (median run / best peak). Exits
non-zero below --min-fraction (default 0.8).

Usage:
    python scripts/bench/matmul_peak.py [--kiln target/release/kiln] [--size M N K] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def make_model(path: Path, m: int, n: int, k: int) -> None:
    import onnx
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [k, n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    graph = helper.make_graph([node], "matmul", [a, b], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))


def kiln_json(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", default=str(REPO / "target" / "release" / "kiln"))
    p.add_argument("--size", type=int, nargs=3, default=[1024, 1024, 1024], metavar=("M", "N", "K"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--min-fraction", type=float, default=0.8)
    args = p.parse_args()
    m, n, k = args.size
    with tempfile.TemporaryDirectory() as d:
        model = Path(d) / "matmul.onnx"
        make_model(model, m, n, k)
        peak_before = kiln_json([args.kiln, "peak", "--threads", str(args.threads), "--json"])["gflops"]
        bench = kiln_json([args.kiln, "bench", str(model), "--threads", str(args.threads),
                           "--runs", str(args.runs), "--warmup", "5", "--json"])
        peak_after = kiln_json([args.kiln, "peak", "--threads", str(args.threads), "--json"])["gflops"]
    peak = max(peak_before, peak_after)
    flop = 2.0 * m * n * k
    best = flop / (bench["min_ms"] * 1e-3) / 1e9
    median = flop / (bench["median_ms"] * 1e-3) / 1e9
    frac = median / peak
    print(f"matmul {m}x{n}x{k} f32, {args.threads} threads: median {bench['median_ms']:.2f} ms "
          f"({median:.1f} GFLOP/s), best {bench['min_ms']:.2f} ms ({best:.1f} GFLOP/s)")
    print(f"fp32 FMA peak, {args.threads} threads: {peak:.1f} GFLOP/s "
          f"(before {peak_before:.1f}, after {peak_after:.1f})")
    verdict = "PASS" if frac >= args.min_fraction else "FAIL"
    print(f"fraction of peak (median run): {frac:.1%}  [{verdict}: target >= {args.min_fraction:.0%}]")
    return 0 if frac >= args.min_fraction else 1


if __name__ == "__main__":
    sys.exit(main())
