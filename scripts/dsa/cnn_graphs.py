#!/usr/bin/env python3
"""ONNX graphs shaped like torchvision's exports of ResNet-50, MobileNetV2
and DenseNet-121 (opset 17, BatchNorm folded into the convolutions that
precede it), with seeded random weights, built with the `onnx` package
alone (no PyTorch): for `kiln sim`, which reads shapes, not values, on a
machine without `models/`.

    python scripts/dsa/cnn_graphs.py OUT_DIR

writes OUT_DIR/{resnet50,mobilenet_v2,densenet121,densenet121_b8}/model.onnx
(input "input" f32 [1,3,224,224]; densenet121_b8 at batch 8). Checked
against `models/` (BENCHMARKS.md, session 21): ResNet-50 and MobileNetV2
give the same `kiln sim` numbers to the digit; DenseNet-121 the same
kernel counts but a compulsory traffic 0.2 MB higher at batch 8 (the
export's BatchNorm parameters are not rebuilt exactly).
"""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)


class Builder:
    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, prefix):
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, array):
        name = self.name("w")
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def weight(self, shape):
        return self.const(RNG.standard_normal(shape) * 0.05)

    def op(self, kind, inputs, **attrs):
        out = self.name(kind.lower())
        self.nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, group=1, relu=True, bias=True):
        inputs = [x, self.weight([cout, cin // group, k, k])]
        if bias:
            inputs.append(self.weight([cout]))
        y = self.op("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                    pads=[k // 2] * 4, group=group)
        return self.op("Relu", [y]) if relu else y

    def clip6(self, x):
        return self.op("Clip", [x, self.const(np.array(0.0)), self.const(np.array(6.0))])

    def batchnorm(self, x, channels):
        params = [RNG.uniform(0.5, 1.5, channels), RNG.uniform(-0.1, 0.1, channels),
                  RNG.uniform(-0.1, 0.1, channels), RNG.uniform(0.5, 1.5, channels)]
        return self.op("BatchNormalization", [x] + [self.const(p) for p in params],
                       epsilon=1e-5)

    def classifier(self, x, channels):
        x = self.op("Flatten", [self.op("GlobalAveragePool", [x])], axis=1)
        return self.op("Gemm", [x, self.weight([1000, channels]), self.weight([1000])], transB=1)

    def save(self, x, batch, path):
        self.nodes.append(helper.make_node("Identity", [x], ["logits"], name="logits"))
        graph = helper.make_graph(
            self.nodes, "g",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 224, 224])],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
            self.inits)
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def resnet50(b):
    x = b.op("MaxPool", [b.conv("input", 3, 64, 7, 2)], kernel_shape=[3, 3],
             strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = b.conv(b.conv(b.conv(x, cin, width, 1), width, width, 3, s),
                       width, width * 4, 1, relu=False)
            shortcut = b.conv(x, cin, width * 4, 1, s, relu=False) if i == 0 else x
            x = b.op("Relu", [b.op("Add", [y, shortcut])])
            cin = width * 4
    return b.classifier(x, 2048)


def mobilenet_v2(b):
    x, cin = b.clip6(b.conv("input", 3, 32, 3, 2, relu=False)), 32
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride, hidden, y = (s if i == 0 else 1), cin * t, x
            if t != 1:
                y = b.clip6(b.conv(y, cin, hidden, 1, relu=False))
            y = b.clip6(b.conv(y, hidden, hidden, 3, stride, hidden, relu=False))
            y = b.conv(y, hidden, c, 1, relu=False)
            x = b.op("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    return b.classifier(b.clip6(b.conv(x, cin, 1280, 1, relu=False)), 1280)


def densenet121(b):
    x = b.op("MaxPool", [b.conv("input", 3, 64, 7, 2)], kernel_shape=[3, 3],
             strides=[2, 2], pads=[1, 1, 1, 1])
    c = 64
    for i, layers in enumerate([6, 12, 24, 16]):
        features = [x]
        for j in range(layers):
            cat = features[0] if len(features) == 1 else b.op("Concat", features, axis=1)
            y = b.op("Relu", [b.batchnorm(cat, c + 32 * j)])
            y = b.conv(b.conv(y, c + 32 * j, 128, 1), 128, 32, 3, relu=False, bias=False)
            features.append(y)
        x, c = b.op("Concat", features, axis=1), c + 32 * layers
        if i < 3:
            x = b.conv(b.op("Relu", [b.batchnorm(x, c)]), c, c // 2, 1, relu=False, bias=False)
            x, c = b.op("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2]), c // 2
    return b.classifier(b.op("Relu", [b.batchnorm(x, c)]), c)


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "models")
    for name, build, batch in [("resnet50", resnet50, 1), ("mobilenet_v2", mobilenet_v2, 1),
                               ("densenet121", densenet121, 1),
                               ("densenet121_b8", densenet121, 8)]:
        b = Builder()
        b.save(build(b), batch, out / name / "model.onnx")
        print(f"wrote {out / name / 'model.onnx'}")


if __name__ == "__main__":
    main()
