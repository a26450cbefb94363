"""Small ONNX models for the Winograd measurements (issue 19, session 25; not run in CI).

Writes into DIR (default /tmp/wg):
- c2_N_HW_C.onnx: a 1x1 convolution and ReLU (so the 3x3 convolution reads a
  channels-last value, as inside a network), then a 3x3 stride-1 convolution
  with bias, pads 1, C -> C channels, and ReLU, over [N, C, HW, HW];
- bmm_T_C.onnx: a batched MatMul [16, T, C] x [16, C, C] (constant right
  operand), the product Winograd makes of such a convolution.

Usage: python scripts/bench/winograd_models.py [DIR]
then e.g. `kiln bench DIR/c2_1_56_64.onnx --runs 30 [--no-winograd]`.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

CONVS = [(1, 56, 64), (1, 28, 128), (1, 14, 256), (1, 7, 512), (8, 7, 512), (8, 56, 64)]
PRODUCTS = [(256, 512), (784, 256)]


def save(graph, path):
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)


def conv_pair(n, hw, c, rng):
    w0 = nh.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.1, "w0")
    w = nh.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.05, "w")
    b = nh.from_array(rng.standard_normal((c,)).astype(np.float32), "b")
    nodes = [
        h.make_node("Conv", ["x", "w0"], ["a"]),
        h.make_node("Relu", ["a"], ["r"]),
        h.make_node("Conv", ["r", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c"], ["y"]),
    ]
    shape = [n, c, hw, hw]
    return h.make_graph(
        nodes,
        "conv_pair",
        [h.make_tensor_value_info("x", T.FLOAT, shape)],
        [h.make_tensor_value_info("y", T.FLOAT, shape)],
        [w0, w, b],
    )


def batched_product(t, c, rng):
    u = nh.from_array(rng.standard_normal((16, c, c)).astype(np.float32) * 0.05, "u")
    return h.make_graph(
        [h.make_node("MatMul", ["v", "u"], ["y"])],
        "batched_product",
        [h.make_tensor_value_info("v", T.FLOAT, [16, t, c])],
        [h.make_tensor_value_info("y", T.FLOAT, [16, t, c])],
        [u],
    )


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wg"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    for n, hw, c in CONVS:
        save(conv_pair(n, hw, c, rng), os.path.join(out, f"c2_{n}_{hw}_{c}.onnx"))
    for t, c in PRODUCTS:
        save(batched_product(t, c, rng), os.path.join(out, f"bmm_{t}_{c}.onnx"))
    print(f"wrote {len(CONVS) + len(PRODUCTS)} models to {out}")


if __name__ == "__main__":
    main()
