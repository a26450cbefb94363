#!/usr/bin/env python3
"""Count FLOPs of exported ONNX models: 2 x MACs of Conv, MatMul and Gemm.

Shapes come from onnx shape inference, falling back to one onnxruntime run
for tensors it cannot resolve. Elementwise ops, softmax, norms etc. are ignored.

Usage:
    python scripts/models/flops.py [NAME ...] [--models-dir DIR]
    python scripts/models/flops.py --file path/to/model.onnx
"""
from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def count_flops(path: Path) -> tuple[int, Counter]:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    m = onnx.shape_inference.infer_shapes(m)
    shapes = {}
    for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    for t in m.graph.initializer:
        shapes[t.name] = list(t.dims)

    wanted = [x for n in m.graph.node if n.op_type in ("Conv", "MatMul", "Gemm")
              for x in (n.input[0], n.input[1], n.output[0])]
    unknown = sorted({x for x in wanted
                      if shapes.get(x) is None or any(d is None for d in shapes[x])})
    if unknown:
        # onnx shape inference does not propagate through every exported
        # pattern (e.g. Expand fed by a ConstantOfShape/Equal/Where chain);
        # get the remaining shapes by running the graph once in onnxruntime.
        shapes.update(_runtime_shapes(path, unknown))

    def shp(name):
        s = shapes.get(name)
        if s is None or any(d is None for d in s):
            raise RuntimeError(f"{path}: unknown shape for {name}")
        return s

    per_op = Counter()
    for n in m.graph.node:
        if n.op_type == "Conv":
            w = shp(n.input[1])  # [M, C/group, kh, kw]
            y = shp(n.output[0])  # [N, M, oh, ow]
            macs = math.prod(y) * math.prod(w[1:])
        elif n.op_type == "MatMul":
            a, y = shp(n.input[0]), shp(n.output[0])
            macs = math.prod(y) * a[-1]
        elif n.op_type == "Gemm":
            a, y = shp(n.input[0]), shp(n.output[0])
            trans_a = any(at.name == "transA" and at.i for at in n.attribute)
            macs = math.prod(y) * (a[0] if trans_a else a[1])
        else:
            continue
        per_op[n.op_type] += 2 * macs
    return sum(per_op.values()), per_op


def _runtime_shapes(path: Path, names: list[str]) -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort

    m = onnx.load(str(path))
    existing = {o.name for o in m.graph.output}
    for n in names:
        if n not in existing:
            m.graph.output.append(onnx.helper.ValueInfoProto(name=n))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feed = {}
    for i, inp in enumerate(sess.get_inputs()):
        saved = path.parent / f"input_{i}.npy"
        shape = [d if isinstance(d, int) else 1 for d in inp.shape]
        if saved.exists():
            feed[inp.name] = np.load(saved)
        elif inp.type == "tensor(float)":
            feed[inp.name] = np.zeros(shape, np.float32)
        elif "mask" in inp.name:
            feed[inp.name] = np.ones(shape, np.int64)
        else:
            feed[inp.name] = np.zeros(shape, np.int64)
    outs = sess.run(names, feed)
    return {n: list(o.shape) for n, o in zip(names, outs)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*")
    p.add_argument("--models-dir", default=str(REPO / "models"))
    p.add_argument("--file", action="append", default=[])
    args = p.parse_args(argv)
    d = Path(args.models_dir)
    paths = [Path(f) for f in args.file]
    names = args.models or ([] if paths else sorted(x.parent.name for x in d.glob("*/model.onnx")))
    paths += [d / n / "model.onnx" for n in names]
    for path in paths:
        total, per_op = count_flops(path)
        detail = ", ".join(f"{k} {v / 1e9:.3f}" for k, v in sorted(per_op.items()))
        print(f"{str(path):40s} {total / 1e9:8.3f} GFLOP  ({detail})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
