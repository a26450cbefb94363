#!/usr/bin/env python3
"""Produce fixed inputs and onnxruntime reference outputs for exported models.

For each <models>/<name>/model.onnx this writes, in graph-input order,
    input_<k>.npy       fixed inputs (numpy default_rng(0)):
                          float inputs    -> standard normal
                          input_ids       -> uniform ints in [0, vocab)
                          attention_mask  -> all ones
                          token_type_ids  -> zeros
                          other int input -> zeros
and, in graph-output order,
    ort_output_<k>.npy  onnxruntime outputs (CPUExecutionProvider, 2 threads)
plus io.txt, a short human-readable description of both.

Usage:
    python scripts/models/reference.py                  # every model found
    python scripts/models/reference.py resnet50 bert
    python scripts/models/reference.py --models-dir /tmp/models vit
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
ORT_THREADS = 2

# Fallback vocabulary sizes if the embedding table cannot be found in the graph.
VOCAB = {"bert": 30522, "gpt2": 50257}

ORT_TO_NP = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def infer_vocab(model_path: Path, input_name: str) -> int | None:
    """Rows of the embedding table gathered by `input_name`, if it is obvious."""
    import onnx

    m = onnx.load(str(model_path), load_external_data=False)
    inits = {t.name: t for t in m.graph.initializer}
    for node in m.graph.node:
        if node.op_type == "Gather" and len(node.input) >= 2 and node.input[1] == input_name:
            t = inits.get(node.input[0])
            if t is not None and len(t.dims) == 2:
                return int(t.dims[0])
    return None


def make_inputs(name: str, model_path: Path, sess) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = []
    for inp in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in inp.shape]
        dtype = ORT_TO_NP.get(inp.type)
        if dtype is None:
            raise RuntimeError(f"{name}: unsupported input type {inp.type} for {inp.name}")
        lname = inp.name.lower()
        if np.issubdtype(dtype, np.floating):
            a = rng.standard_normal(shape).astype(dtype)
        elif "input_ids" in lname:
            vocab = infer_vocab(model_path, inp.name) or VOCAB.get(name) or VOCAB.get(name.split("_")[0])
            if vocab is None:
                raise RuntimeError(f"{name}: cannot determine vocab size for {inp.name}")
            a = rng.integers(0, vocab, size=shape).astype(dtype)
        elif "attention_mask" in lname or dtype == np.bool_:
            a = np.ones(shape, dtype=dtype)
        else:
            a = np.zeros(shape, dtype=dtype)
        arrays.append(a)
    return arrays


def run_one(name: str, models_dir: Path) -> None:
    import onnxruntime as ort

    d = models_dir / name
    model_path = d / "model.onnx"
    if not model_path.exists():
        raise FileNotFoundError(f"{model_path} missing; run export.py first")

    so = ort.SessionOptions()
    so.intra_op_num_threads = ORT_THREADS
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])

    for stale in list(d.glob("input_*.npy")) + list(d.glob("ort_output_*.npy")):
        stale.unlink()

    inputs = make_inputs(name, model_path, sess)
    lines = [f"model: {model_path.name}"]
    for k, (meta, a) in enumerate(zip(sess.get_inputs(), inputs)):
        np.save(d / f"input_{k}.npy", a)
        lines.append(f"input_{k}.npy: {meta.name} {a.dtype} {list(a.shape)}")

    feed = {meta.name: a for meta, a in zip(sess.get_inputs(), inputs)}
    t0 = time.perf_counter()
    outs = sess.run(None, feed)
    dt = time.perf_counter() - t0
    for k, (meta, o) in enumerate(zip(sess.get_outputs(), outs)):
        o = np.asarray(o)
        np.save(d / f"ort_output_{k}.npy", o)
        lines.append(f"ort_output_{k}.npy: {meta.name} {o.dtype} {list(o.shape)} "
                     f"max|x|={float(np.max(np.abs(o))):.4g}")
    lines.append(f"onnxruntime {ort.__version__}, {ORT_THREADS} threads, {dt * 1e3:.1f} ms")
    (d / "io.txt").write_text("\n".join(lines) + "\n")
    print(f"[reference] {name}:")
    for line in lines[1:]:
        print(f"[reference]   {line}")
    sys.stdout.flush()


def discover(models_dir: Path) -> list[str]:
    return sorted(p.parent.name for p in models_dir.glob("*/model.onnx"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help="model names (default: all under --models-dir)")
    p.add_argument("--models-dir", default=str(REPO / "models"))
    args = p.parse_args(argv)
    models_dir = Path(args.models_dir)
    names = args.models or discover(models_dir)
    if not names:
        print(f"[reference] no models under {models_dir}; run export.py first", file=sys.stderr)
        return 1
    for name in names:
        run_one(name, models_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
