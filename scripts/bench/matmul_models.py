#!/usr/bin/env python3
"""Writes one-MatMul ONNX models for timing a gemm and its epilogue with `kiln bench`.

    python scripts/bench/matmul_models.py OUT_DIR [--m 128 --k 768 --n 3072]

OUT_DIR/plain.onnx is x[M,K] @ W[K,N] with W a random initializer (so kiln
prepacks it, as it does a model's weights); OUT_DIR/gelu.onnx adds BERT's
decomposed GELU after it (x * (erf(x / sqrt 2) + 1) * 0.5). Then, e.g.:

    kiln bench OUT_DIR/plain.onnx --threads 2 --runs 200
    kiln bench OUT_DIR/gelu.onnx --threads 2 --runs 200

Needs the `onnx` and `numpy` packages (the .venv-models of setup.sh).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def matmul_model(m: int, k: int, n: int, gelu: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = (rng.standard_normal((k, n)) * 0.03).astype(np.float32)
    inits = [numpy_helper.from_array(weights, "W")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
    if gelu:
        for name, value in [("inv_sqrt2", 0.70710677), ("one", 1.0), ("half", 0.5)]:
            inits.append(numpy_helper.from_array(np.array(value, np.float32), name))
        nodes = [
            helper.make_node("MatMul", ["x", "W"], ["m"]),
            helper.make_node("Mul", ["m", "inv_sqrt2"], ["s"]),
            helper.make_node("Erf", ["s"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["f"]),
            helper.make_node("Mul", ["m", "f"], ["g"]),
            helper.make_node("Mul", ["g", "half"], ["y"]),
        ]
    graph = helper.make_graph(
        nodes,
        "gelu" if gelu else "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--m", type=int, default=128)
    parser.add_argument("--k", type=int, default=768)
    parser.add_argument("--n", type=int, default=3072)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for gelu in (False, True):
        path = args.out_dir / ("gelu.onnx" if gelu else "plain.onnx")
        onnx.save(matmul_model(args.m, args.k, args.n, gelu), path)
        print(path)


if __name__ == "__main__":
    main()
