#!/usr/bin/env python3
"""Build the small default model embedded in kiln-cli.

Writes, under crates/kiln-cli/assets/ (or --out):
    default.onnx         torchvision mobilenet_v2(width_mult=0.35, num_classes=10),
                         random weights (torch.manual_seed(0)), eval mode,
                         input "input" float32 [1,3,96,96], output "logits" [1,10];
                         opset 17, static shapes, legacy TorchScript exporter,
                         single file, must be <= 2 MB.
    default_input.npy    fixed float32 input (numpy default_rng(0), standard normal)
    default_output.npy   onnxruntime output for it (float32, CPUExecutionProvider)

Usage:
    python scripts/models/make_default_model.py [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export import calibrate_batchnorm  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MAX_BYTES = 2 * 1000 * 1000  # 2 MB
INPUT_SHAPE = (1, 3, 96, 96)


def build_model():
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(weights=None, width_mult=0.35, num_classes=10)
    # torchvision initialises BatchNorm to the identity (gamma 1, beta 0,
    # mean 0, var 1), which with random conv weights lets activations vanish.
    # Give gamma/beta seeded random values, then set the running statistics
    # from seeded random batches (see export.calibrate_batchnorm), so the
    # folded Conv+BN weights are non-trivial and activations stay unit-scale.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
        # Classifier: std 0.1 instead of torchvision's 0.01, for O(1) logits.
        torch.nn.init.normal_(model.classifier[-1].weight, std=0.1)
    calibrate_batchnorm(model, INPUT_SHAPE)
    return model.eval()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(REPO / "crates" / "kiln-cli" / "assets"))
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import onnx
    import onnxruntime as ort
    import torch

    torch.set_num_threads(2)
    model = build_model()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[default] mobilenet_v2(width_mult=0.35, num_classes=10): {n_params} params")

    path = out / "default.onnx"
    tmp = out / "default.onnx.tmp"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.zeros(INPUT_SHAPE),),
            str(tmp),
            dynamo=False,
            export_params=True,
            opset_version=17,
            do_constant_folding=True,
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes=None,
        )
    # Drop the producer's doc strings / stack traces if any, keep it compact.
    m = onnx.load(str(tmp))
    for node in m.graph.node:
        node.doc_string = ""
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(tmp))
    os.replace(tmp, path)
    size = path.stat().st_size
    print(f"[default] wrote {path}: {size} bytes, opset "
          f"{[(o.domain or 'ai.onnx', o.version) for o in m.opset_import]}, "
          f"{len(m.graph.node)} nodes")
    if size > MAX_BYTES:
        print(f"[default] ERROR: {size} bytes > {MAX_BYTES}", file=sys.stderr)
        return 1

    rng = np.random.default_rng(0)
    x = rng.standard_normal(INPUT_SHAPE).astype(np.float32)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"input": x})
    y = np.asarray(y, dtype=np.float32)
    np.save(out / "default_input.npy", x)
    np.save(out / "default_output.npy", y)

    with torch.no_grad():
        y_torch = model(torch.from_numpy(x)).numpy()
    diff = float(np.max(np.abs(y_torch - y)))
    print(f"[default] output {list(y.shape)}: {np.array2string(y.ravel(), precision=4)}")
    print(f"[default] max|torch - ort| = {diff:.3e}, max|ort| = {float(np.max(np.abs(y))):.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
