#!/usr/bin/env python3
"""kiln's CUDA backend against PyTorch on one GPU (not run in CI).

Each case is an ONNX graph built here with onnx.helper and the same
computation written in PyTorch. For each case, in one run on the same
GPU, kiln's outputs (`kiln run --backend cuda`) are first checked against
PyTorch's computed in full f32 (TF32 off): the largest error must be at
most 1e-3 of the largest reference magnitude. Then each engine is timed:

    kiln           KILN bench CASE.onnx --backend cuda --json (device time of
                   the kernels by CUDA events, inputs already on the device)
    torch          PyTorch eager, CUDA events around each call
    torch_compile  torch.compile (Inductor, default mode), the same timing

median milliseconds of --runs runs after --warmup, and kiln / peer ratios
(< 1: kiln is faster). Cases: PANAMERA (Table 2's 12 sub-graphs and
single reductions in its three canonical forms, and Figures 9-10's sum, max and
and over f32, f16, int32 and bool), Softmax and LayerNorm rows,
and models (torchvision resnet50 / mobilenet_v2 exported here with
torch.onnx at opset 17, static shapes, random weights).

Usage (on the GPU machine, see scripts/gpu/check.sh):
    python3 scripts/bench/gpu.py --kiln .gpu/kiln --out $OUT/gpu_bench.json
    python3 scripts/bench/gpu.py --only sum_all_8M,softmax --no-compile
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

F = TensorProto.FLOAT
H = TensorProto.FLOAT16


def graph(name, inputs, outputs, nodes, inits=()):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def vi(name, shape, ty=F):
    return helper.make_tensor_value_info(name, ty, shape)


def axes(name, values):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def reduce_case(shape, ax, keep=0):
    """x -> ReduceSum(axes)"""
    out_shape = [d for i, d in enumerate(shape) if i not in ax] if not keep else [
        1 if i in ax else d for i, d in enumerate(shape)]
    m = graph("r", [vi("x", shape)], [vi("y", out_shape)],
              [helper.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=keep)],
              [axes("ax", ax)])
    return m, lambda t: t["x"].sum(dim=tuple(ax), keepdim=bool(keep)), {"x": shape}


ONNX_TYPE = {"f32": F, "f16": H, "i32": TensorProto.INT32, "bool": TensorProto.BOOL}


def single_case(op, ty, shape, ax):
    """PANAMERA Figures 9-10: one reduce_sum / reduce_max / reduce_and of
    type `ty` (opset 17 has no ReduceAnd or boolean ReduceMin: `and` is
    bool -> Cast int32 -> ReduceMin -> Cast bool)."""
    out_shape = [d for i, d in enumerate(shape) if i not in ax]
    onnx_op = {"sum": "ReduceSum", "max": "ReduceMax", "and": "ReduceMin"}[op]
    reduced_in = "xi" if op == "and" else "x"
    reduced_out = "yi" if op == "and" else "y"
    if op == "sum":
        reduce = helper.make_node(onnx_op, [reduced_in, "ax"], [reduced_out], keepdims=0)
        inits = [axes("ax", ax)]
    else:
        reduce = helper.make_node(onnx_op, [reduced_in], [reduced_out], axes=ax, keepdims=0)
        inits = []
    nodes = [reduce]
    if op == "and":
        nodes = [helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT32), reduce,
                 helper.make_node("Cast", ["yi"], ["y"], to=TensorProto.BOOL)]
    t = ONNX_TYPE[ty]
    m = graph(f"{op}_{ty}", [vi("x", shape, t)], [vi("y", out_shape, t)], nodes, inits)

    def torch_fn(v):
        x = v["x"]
        if op == "sum":
            return x.sum(dim=tuple(ax), dtype=x.dtype)
        if op == "max":
            return x.amax(dim=tuple(ax))
        return x.all(dim=ax[0]) if len(ax) == 1 else x.all()
    return m, torch_fn, {"x": shape}


def figure_9_10_cases():
    """Sum and max over f32, f16, int32 and `and` over bool, each as an
    all-, x- and y-reduce of 4M elements (the figures' shape labels are
    lost in the text: these shapes give every canonical form, and the
    f32 cases read 16 MB)."""
    forms = {"all": ([4194304], [0]), "x": ([4096, 1024], [1]), "y": ([1024, 4096], [0])}
    c = {}
    for op, types in (("sum", ["f32", "f16", "i32"]), ("max", ["f32", "f16", "i32"]),
                      ("and", ["bool"])):
        for ty in types:
            for form, (shape, ax) in forms.items():
                c[f"fig_{op}_{ty}_{form}"] = single_case(op, ty, shape, ax)
    return c


def chain_case(shape, ops, ax):
    """x -> elementwise ops (with constants 0.5/1.5) -> ReduceSum(ax)"""
    nodes, cur, inits = [], "x", []
    for i, op in enumerate(ops):
        out = f"t{i}"
        if op == "neg":
            nodes.append(helper.make_node("Neg", [cur], [out]))
        else:
            c = f"c{i}"
            inits.append(helper.make_tensor(c, F, [], [1.5 if op == "mul" else 0.5]))
            nodes.append(helper.make_node({"mul": "Mul", "add": "Add"}[op], [cur, c], [out]))
        cur = out
    out_shape = [d for i, d in enumerate(shape) if i not in ax]
    nodes.append(helper.make_node("ReduceSum", [cur, "ax"], ["y"], keepdims=0))
    inits.append(axes("ax", ax))
    m = graph("c", [vi("x", shape)], [vi("y", out_shape)], nodes, inits)

    def torch_fn(t):
        v = t["x"]
        for op in ops:
            v = -v if op == "neg" else (v * 1.5 if op == "mul" else v + 0.5)
        return v.sum(dim=tuple(ax))
    return m, torch_fn, {"x": shape}


def cast_chain_case(shape, ty, ops, ax, reshape=None):
    """x (of ONNX type ty) -> Reshape(reshape) -> Casts ("cast16" to f16,
    "cast32" to f32) -> ReduceSum(ax): PANAMERA's mixed-precision sub-graphs."""
    nodes, cur, inits = [], "x", []
    shape_in, torch_ops = list(shape), []
    if reshape:
        inits.append(helper.make_tensor("shape", TensorProto.INT64, [len(reshape)], reshape))
        nodes.append(helper.make_node("Reshape", ["x", "shape"], ["xr"]))
        cur, shape = "xr", list(reshape)
    out_ty = ty
    for i, op in enumerate(ops):
        out_ty = H if op == "cast16" else F
        nodes.append(helper.make_node("Cast", [cur], [f"t{i}"], to=out_ty))
        cur = f"t{i}"
    out_shape = [d for i, d in enumerate(shape) if i not in ax]
    nodes.append(helper.make_node("ReduceSum", [cur, "ax"], ["y"], keepdims=0))
    inits.append(axes("ax", ax))
    m = graph("h", [vi("x", shape_in, ty)], [vi("y", out_shape, out_ty)], nodes, inits)

    def torch_fn(t):
        import torch
        v = t["x"].reshape(shape) if reshape else t["x"]
        for op in ops:
            v = v.half() if op == "cast16" else v.float()
        return v.sum(dim=tuple(ax))
    return m, torch_fn, {"x": shape_in}


def input_dtypes(model):
    """numpy dtype of each graph input of an ONNX model."""
    return {i.name: helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
            for i in model.graph.input}


def two_reductions_case(shape, ax):
    """Sub-graph 8: two independent add-mul-sum branches of one input."""
    m1, _, _ = chain_case(shape, ["add", "mul"], ax)
    nodes = list(m1.graph.node)
    extra = [helper.make_node("Add", ["x", "c0"], ["u0"]),
             helper.make_node("Mul", ["u0", "c1"], ["u1"]),
             helper.make_node("Mul", ["u1", "c1"], ["u2"]),
             helper.make_node("ReduceSum", ["u2", "ax"], ["z"], keepdims=0)]
    out_shape = [d for i, d in enumerate(shape) if i not in ax]
    m = graph("two", [vi("x", shape)], [vi("y", out_shape), vi("z", out_shape)],
              nodes + extra, list(m1.graph.initializer))

    def torch_fn(t):
        v = (t["x"] + 0.5) * 1.5
        return v.sum(dim=tuple(ax)), (v * 1.5).sum(dim=tuple(ax))
    return m, torch_fn, {"x": shape}


def softmax_case(shape, axis=-1):
    m = graph("s", [vi("x", shape)], [vi("y", shape)],
              [helper.make_node("Softmax", ["x"], ["y"], axis=axis)])
    import torch
    return m, lambda t: torch.softmax(t["x"], dim=axis), {"x": shape}


def layernorm_case(shape):
    n = shape[-1]
    rng = np.random.default_rng(0)
    scale = rng.standard_normal(n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    m = graph("ln", [vi("x", shape)], [vi("y", shape)],
              [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5)],
              [helper.make_tensor("s", F, [n], scale), helper.make_tensor("b", F, [n], bias)])
    import torch
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    s, b = torch.tensor(scale).to(dev), torch.tensor(bias).to(dev)
    return m, lambda t: torch.nn.functional.layer_norm(t["x"], (n,), s, b, 1e-5), {"x": shape}


def arg_case(op, shape, axis):
    """x -> ArgMax/ArgMin(axis), keepdims 0 (int64 indices)."""
    out_shape = [d for i, d in enumerate(shape) if i != axis]
    m = graph("a", [vi("x", shape)], [vi("y", out_shape, TensorProto.INT64)],
              [helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=0)])

    def torch_fn(t):
        import torch
        return (torch.argmax if op == "ArgMax" else torch.argmin)(t["x"], dim=axis)
    return m, torch_fn, {"x": shape}


def other_shape_cases():
    """Shapes the paper does not name (issue 20: no cliff on reductions it
    does not list): arg-reductions in the three forms, Softmax and LayerNorm
    over short rows, Softmax over a middle axis, a global pooling sum, a sum
    over the channels of NCHW images."""
    return {
        "argmax_x_2000x1000": arg_case("ArgMax", [2000, 1000], 1),
        "argmax_y_1000x2000": arg_case("ArgMax", [1000, 2000], 0),
        "argmin_mid_100x500x100": arg_case("ArgMin", [100, 500, 100], 1),
        "softmax_100000x20": softmax_case([100000, 20]),
        "softmax_31250x64": softmax_case([31250, 64]),
        "layernorm_31250x64": layernorm_case([31250, 64]),
        "softmax_mid_8x384x12x64": softmax_case([8, 384, 12, 64], axis=1),
        "sum_hw_8x256x56x56": reduce_case([8, 256, 56, 56], [2, 3], keep=1),
        "sum_c_8x256x56x56": reduce_case([8, 256, 56, 56], [1], keep=1),
    }


def cases():
    c = {
        # PANAMERA Table 2. Its underlined reduced axes are lost in the text;
        # the axes chosen make every canonical form appear: x-reduce (last
        # axis) in 1, 3, 7, 8, 11; y-reduce (first axis) in 2, 4, 10;
        # all-reduce in 5, 6, 9, 12.
        "sg1_cast_sum_64x2": cast_chain_case([64, 2], F, ["cast16", "cast32", "cast16"], [1]),
        "sg2_cast16_sum_1280x21128": cast_chain_case([1280, 21128], F, ["cast16"], [0]),
        "sg3_f16_cast32_sum_64x768": cast_chain_case([64, 768], H, ["cast32"], [1]),
        "sg4_mul_sum_1280x21128": chain_case([1280, 21128], ["mul"], [0]),
        "sg5_neg_mul_sum_1280": chain_case([1280], ["neg", "mul"], [0]),
        "sg6_mul_mul_sum_3072": chain_case([3072], ["mul", "mul"], [0]),
        "sg7_add_mul_sum_64x128x768": chain_case([64, 128, 768], ["add", "mul"], [2]),
        "sg8_two_sums_64x128x768": two_reductions_case([64, 128, 768], [2]),
        "sg9_sum_8192x768": reduce_case([8192, 768], [0, 1]),
        "sg10_f16_reshape_cast32_sum_64x128x12x64": cast_chain_case(
            [64, 128, 12, 64], H, ["cast32"], [0], reshape=[8192, 768]),
        "sg11_f16_reshape_cast32_sum_64x128x768": cast_chain_case(
            [64, 128, 768], H, ["cast32"], [1], reshape=[8192, 768]),
        "sg12_f16_reshape_sum_64x20": cast_chain_case([64, 20], H, [], [0], reshape=[1280]),
        # Single reductions in the three canonical forms.
        "sum_all_8M": reduce_case([8388608], [0]),
        "sum_x_1024x1024": reduce_case([1024, 1024], [1]),
        "sum_y_1024x1024": reduce_case([1024, 1024], [0]),
        # Rows.
        "softmax_1x16x384x384": softmax_case([1, 16, 384, 384]),
        "layernorm_8x512x768": layernorm_case([8, 512, 768]),
        "layernorm_1x32768": layernorm_case([1, 32768]),
        "layernorm_8x1048576": layernorm_case([8, 1048576]),
        "softmax_1x1048576": softmax_case([1, 1048576]),
    }
    c.update(figure_9_10_cases())
    c.update(other_shape_cases())
    return c


def model_cases(batches, names):
    """(module, input factory) per model and batch: torchvision's
    resnet50, mobilenet_v2 and vit_b_16 on f32[b,3,224,224], and
    transformers' bert-base (eager attention) on i64 token ids [b,128]."""
    import torch
    out = {}
    for name in names:
        for b in batches:
            torch.manual_seed(0)
            if name == "bert":
                import transformers

                class Bert(torch.nn.Module):
                    def __init__(self):
                        super().__init__()
                        cfg = transformers.BertConfig(attn_implementation="eager")
                        self.bert = transformers.BertModel(cfg)

                    def forward(self, ids):
                        return self.bert(input_ids=ids).last_hidden_state

                mod = Bert().eval().cuda()
                make = lambda b=b: torch.randint(0, 30522, (b, 128), device="cuda")
            else:
                import torchvision
                mod = getattr(torchvision.models, name)().eval().cuda()
                make = lambda b=b: torch.randn(b, 3, 224, 224, device="cuda")
            out[f"{name}_b{b}"] = (mod, make)
    return out


def export_module(mod, x, path):
    import torch
    kw = dict(input_names=["x"], output_names=["y"], opset_version=17)
    try:
        torch.onnx.export(mod, (x,), str(path), dynamo=False, **kw)
    except Exception as e:  # the legacy exporter may be gone: try dynamo
        print(f"  legacy export failed ({str(e)[:200]}); trying dynamo", flush=True)
        torch.onnx.export(mod, (x,), str(path), dynamo=True, external_data=False, **kw)


def time_torch(fn, inputs, runs, warmup):
    import torch
    with torch.inference_mode():
        for _ in range(warmup):
            fn(inputs)
        torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            fn(inputs)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    return statistics.median(times)


def time_kiln(kiln, path, runs, warmup, tf32=False):
    r = subprocess.run([kiln, "bench", str(path), "--backend", "cuda", "--json",
                        "--runs", str(runs), "--warmup", str(warmup)] + (["--tf32"] if tf32 else []),
                       capture_output=True, text=True, timeout=300)
    line = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not line:
        raise RuntimeError((r.stderr or r.stdout).strip().splitlines()[-1:])
    return json.loads(line[-1])


def profile_kiln(kiln, path, out, tf32=False):
    """`kiln bench --profile` (device time per kernel, with --tf32 when
    `tf32`) into the file `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([kiln, "bench", str(path), "--backend", "cuda", "--profile", "--runs", "5"]
                       + (["--tf32"] if tf32 else []), capture_output=True, text=True, timeout=300,
                       env={**os.environ, "KILN_PROFILE_TOP": "40"})
    out.write_text(r.stdout + r.stderr)


def check_kiln(kiln, path, fn, inputs, tmp, tf32=False):
    """kiln run --backend cuda (--tf32 when `tf32`) on `inputs` against
    PyTorch in full f32 (TF32 off); returns the largest error relative to
    the reference's largest magnitude, over all outputs."""
    import torch
    names = list(inputs)
    args = [kiln, "run", str(path), "--backend", "cuda", "-o", str(tmp / "out")] + (["--tf32"] if tf32 else [])
    for k in names:
        np.save(tmp / f"{k}.npy", inputs[k].cpu().numpy())
        args += ["-i", str(tmp / f"{k}.npy")]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError((r.stderr or r.stdout).strip().splitlines()[-1:])
    tf32 = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    with torch.inference_mode():
        want = fn(inputs)
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    want = want if isinstance(want, tuple) else (want,)
    worst = 0.0
    for k, w in enumerate(want):
        got = np.load(tmp / "out" / f"output_{k}.npy").astype(np.float64)
        ref = w.double().cpu().numpy()
        scale = max(float(np.max(np.abs(ref))), 1e-30)
        worst = max(worst, float(np.max(np.abs(got - ref))) / scale)
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="target/release/kiln")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--only", default="")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--compile-models", action="store_true",
                    help="also torch.compile the model cases (about a minute each)")
    ap.add_argument("--models", default="1,8", help="batch sizes of the model cases ('' for none)")
    ap.add_argument("--model-names", default="resnet50,mobilenet_v2",
                    help="of resnet50, mobilenet_v2, vit_b_16, bert")
    ap.add_argument("--tf32", action="store_true",
                    help="also time kiln --tf32 (TF32 tensor cores; error bound 1e-2), "
                         "and time PyTorch with TF32 allowed for matmuls and convolutions")
    ap.add_argument("--profile", default="",
                    help="directory: also write each case's `kiln bench --profile` (time per kernel) there")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    import torch
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    only = [s for s in args.only.split(",") if s]
    tmp = Path(tempfile.mkdtemp())
    rows = []
    todo = list(cases().items())
    batches = [int(b) for b in args.models.split(",") if b]
    if batches:
        todo += list(model_cases(batches, args.model_names.split(",")).items())
    for name, case in todo:
        if only and not any(o in name for o in only):
            continue
        path = tmp / f"{name}.onnx"
        try:
            if isinstance(case[0], onnx.ModelProto):
                model, torch_fn, shapes = case
                onnx.save(model, path)
                types = input_dtypes(model)
                inputs = {k: torch.from_numpy(np.random.randn(*s).astype(types[k])).cuda()
                          for k, s in shapes.items()}
            else:
                mod, make = case
                inputs = {"x": make()}
                with torch.no_grad():
                    export_module(mod, inputs["x"], path)
                torch_fn = lambda t, mod=mod: mod(t["x"])
            row = {"case": name}
            if args.profile:
                profile_kiln(args.kiln, path, Path(args.profile) / f"{name}.txt", args.tf32)
            k = time_kiln(args.kiln, path, args.runs, args.warmup)
            row["kiln_ms"] = k["median_ms"]
            row["max_rel_err"] = check_kiln(args.kiln, path, torch_fn, inputs, tmp)
            row["correct"] = row["max_rel_err"] <= 1e-3
            row["kiln_launches"] = k["launches"]
            if args.tf32:
                row["kiln_tf32_ms"] = time_kiln(args.kiln, path, args.runs, args.warmup, True)["median_ms"]
                row["tf32_max_rel_err"] = check_kiln(args.kiln, path, torch_fn, inputs, tmp, True)
                row["tf32_correct"] = row["tf32_max_rel_err"] <= 1e-2
            row["kiln_interpreted"] = k["interpreted"]
            row["torch_ms"] = time_torch(torch_fn, inputs, args.runs, args.warmup)
            is_model = not isinstance(case[0], onnx.ModelProto)
            if not args.no_compile and (args.compile_models or not is_model):
                t0 = time.time()
                torch._dynamo.reset()  # cases sharing a code object would hit the recompile limit
                compiled = torch.compile(torch_fn)
                row["torch_compile_ms"] = time_torch(compiled, inputs, args.runs, args.warmup)
                row["torch_compile_s"] = round(time.time() - t0, 1)
            best = min(v for key, v in row.items() if key in ("torch_ms", "torch_compile_ms"))
            row["kiln_over_best_torch"] = row["kiln_ms"] / best
            if args.tf32:
                row["kiln_tf32_over_best_torch"] = row["kiln_tf32_ms"] / best
        except Exception as e:
            row = {"case": name, "error": str(e)[-300:]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print_table(rows, args.tf32)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


def print_table(rows, tf32):
    """The rows as a Markdown table; with `tf32`, kiln --tf32's columns too."""
    extra = " kiln tf32 ms | kiln tf32 / best torch | tf32 error |" if tf32 else ""
    print(f"\n| case | kiln ms | torch eager ms | torch.compile ms | kiln / best torch | max error / max |reference| |{extra}")
    print("|---|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if tf32 else ""))
    for r in rows:
        if "error" in r:
            print(f"| {r['case']} | error: {r['error'][:80]} | | | |")
            continue
        tc = r.get("torch_compile_ms")
        line = (f"| {r['case']} | {r['kiln_ms']:.4f} | {r['torch_ms']:.4f} | "
                f"{'' if tc is None else f'{tc:.4f}'} | {r['kiln_over_best_torch']:.2f} | "
                f"{r['max_rel_err']:.1e}{'' if r['correct'] else ' WRONG'} |")
        if tf32:
            line += (f" {r['kiln_tf32_ms']:.4f} | {r['kiln_tf32_over_best_torch']:.2f} | "
                     f"{r['tf32_max_rel_err']:.1e}{'' if r['tf32_correct'] else ' WRONG'} |")
        print(line)


if __name__ == "__main__":
    sys.exit(main())
