#!/usr/bin/env python3
"""Per-convolution-shape time and fraction of the FMA peak of a kiln build.

Runs `KILN bench MODEL --profile` (per-node medians of 11 runs), matches each
kernel to the ONNX Conv it computes by node name, sums the kernels of each
convolution shape and divides the shape's FLOPs by that time. Kernels that are
no convolution are listed by their op names.

Usage (needs the `onnx` package, e.g. the model venv of scripts/models):
    python scripts/bench/conv_efficiency.py models/resnet50/model.onnx \\
        [--kiln target/release/kiln] [--peak GFLOPS] [-- extra kiln bench args]
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
from pathlib import Path

import onnx
from onnx import shape_inference

REPO = Path(__file__).resolve().parents[2]


def conv_shapes(model_path: str) -> dict[str, tuple[str, int]]:
    """ONNX Conv node name -> (shape description, FLOPs)."""
    model = shape_inference.infer_shapes(onnx.load(model_path))
    g = model.graph
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(g.value_info) + list(g.input) + list(g.output)}
    weights = {i.name: list(i.dims) for i in g.initializer}
    shapes = {}
    for n in g.node:
        if n.op_type != "Conv":
            continue
        x, w, y = dims[n.input[0]], weights[n.input[1]], dims[n.output[0]]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        stride = attrs.get("strides", [1])[0]
        group = attrs.get("group", 1)
        desc = (f"{w[2]}x{w[3]}/{stride} {x[1]}@{x[2]}x{x[3]} -> {y[1]}@{y[2]}x{y[3]}"
                + (f" g{group}" if group > 1 else ""))
        shapes[n.name] = (desc, 2 * y[1] * y[2] * y[3] * w[1] * w[2] * w[3])
    return shapes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--kiln", default=str(REPO / "target" / "release" / "kiln"))
    p.add_argument("--peak", type=float, default=None,
                   help="GFLOP/s (default: `kiln peak --threads 2`)")
    p.add_argument("extra", nargs="*", help="more `kiln bench` arguments")
    args = p.parse_args()
    peak = args.peak
    if peak is None:
        out = subprocess.run([args.kiln, "peak", "--threads", "2"], capture_output=True,
                             text=True, check=True).stdout
        peak = float(re.findall(r"([\d.]+) GFLOP/s", out)[-1])
    shapes = conv_shapes(args.model)
    env = dict(os.environ, KILN_PROFILE_TOP="100000")
    out = subprocess.run([args.kiln, "bench", args.model, "--threads", "2", "--runs", "5",
                          "--profile", *args.extra], capture_output=True, text=True,
                         env=env, check=True).stdout
    groups: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0])
    counted: set[str] = set()
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)\s+[\d.]+\s+(\S+) (\S+) \(", line)
        if not m:
            continue
        ms, op, node = float(m.group(1)), m.group(2), m.group(3)
        matches = [name for name in shapes if name in node]
        conv = max(matches, key=len) if matches else None
        desc, flops = shapes[conv] if conv else (op, 0)
        group = groups[desc]
        group[1] += ms
        # A convolution's epilogue may run in a later kernel named after it:
        # its time counts, its FLOPs and the convolution itself once.
        if conv not in counted:
            group[0] += 1
            group[2] += flops
            counted.add(conv)
    total = sum(g[1] for g in groups.values())
    print(f"{total:.2f} ms in kernels; peak {peak:.1f} GFLOP/s")
    print(f"{'ms':>8}  {'n':>3}  {'% peak':>6}  shape")
    for desc, (count, ms, flops) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        share = f"{flops / ms / 1e6 / peak * 100:6.1f}" if flops else "     -"
        print(f"{ms:8.3f}  {count:3d}  {share}  {desc}")


if __name__ == "__main__":
    main()
