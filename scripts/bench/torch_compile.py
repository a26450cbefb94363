#!/usr/bin/env python3
"""torch.compile(backend="kiln") against inductor and eager PyTorch (not run in CI).

For each model, in one invocation, each measurement in its own subprocess
with the same thread count (torch.set_num_threads(T); kiln threads=T):

    eager      the module under torch.inference_mode()
    inductor   torch.compile(module) (inductor, default mode)
    kiln       torch.compile(module, backend="kiln")

For the two compilers, a cold process (empty compile caches: a fresh
TORCHINDUCTOR_CACHE_DIR / KILN_CACHE_DIR) and then a warm one (a second
process reusing those caches): compile time is the first call's time
minus one eager call. Latency is the median of --runs calls after
--warmup. Every compiled output is compared with eager within the
model-comparison tolerance (max|got - eager| <= 1e-3 * max|eager| + 1e-5).

Models: the five of the suite (scripts/models/export.py) and five more
torchvision/transformers modules, plus `fallback` (linear layers around an
FFT and a Bernoulli, which kiln cannot take: the graph is partitioned).

Usage (inside the model venv with kiln installed: pip install ./python):
    python scripts/bench/torch_compile.py
    python scripts/bench/torch_compile.py --models resnet50,bert --runs 20 --markdown

It also measures the per-call overhead of kiln.Model.run against `kiln
bench` on the embedded default model (--overhead-only for just that).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TAG = "RESULT "

SUITE = ["resnet50", "mobilenet_v2", "bert", "gpt2", "vit"]
MORE = ["resnet18", "efficientnet_b0", "densenet121", "mobilenet_v3_large", "distilbert"]
ALL = SUITE + MORE + ["fallback"]


def build(name: str):
    """(module, inputs) for ``name``, random weights, eval mode."""
    import torch

    torch.manual_seed(0)
    if name in SUITE:
        sys.path.insert(0, str(HERE.parent / "models"))
        import export  # scripts/models/export.py

        built = export.MODELS[name]()
        # export.py's last element for GPT-2 is the module without the tracing patch.
        module = built[4] if len(built) > 4 else built[0]
        return module.eval(), tuple(built[1])
    if name == "distilbert":
        from transformers import DistilBertConfig, DistilBertModel

        cfg = DistilBertConfig()
        cfg._attn_implementation = "eager"
        model = DistilBertModel(cfg).eval()

        class Wrapped(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, ids, mask):
                return self.inner(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state

        ids = torch.randint(0, cfg.vocab_size, (1, 128))
        return Wrapped(model).eval(), (ids, torch.ones(1, 128, dtype=torch.int64))
    if name == "fallback":
        class Fallback(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.l1 = torch.nn.Linear(256, 256)
                self.l2 = torch.nn.Linear(256, 256)

            def forward(self, x):
                h = torch.relu(self.l1(x))
                mask = torch.bernoulli((h > 0).float())
                return self.l2(h * mask) + torch.fft.rfft(h).abs().sum(-1, keepdim=True)

        return Fallback().eval(), (torch.randn(8, 256),)
    import torchvision

    model = getattr(torchvision.models, name)(weights=None).eval()
    return model, (torch.randn(1, 3, 224, 224),)


def measure(args) -> dict:
    """Runs in the subprocess: one engine on one model."""
    import torch

    torch.set_num_threads(args.threads)
    module, inputs = build(args.model)
    with torch.inference_mode():
        start = time.perf_counter()
        want = module(*inputs)
        eager_call = time.perf_counter() - start
    if args.engine == "eager":
        fn = module
    elif args.engine == "inductor":
        fn = torch.compile(module)
    else:
        from kiln.torch_backend import make_backend

        fn = torch.compile(module, backend=make_backend(threads=args.threads))
    with torch.inference_mode():
        start = time.perf_counter()
        got = fn(*inputs)
        first = time.perf_counter() - start
        for _ in range(args.warmup):
            fn(*inputs)
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            fn(*inputs)
            times.append((time.perf_counter() - start) * 1e3)
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    diffs = [(g - w).abs().max().item() for g, w in zip(got, want)]
    bounds = [1e-3 * w.abs().max().item() + 1e-5 for w in want]
    return {
        "median_ms": statistics.median(times),
        "compile_s": max(first - eager_call, 0.0) if args.engine != "eager" else None,
        "max_diff": max(diffs),
        "within_tolerance": all(d <= b for d, b in zip(diffs, bounds)),
        "torch": torch.__version__,
    }


def run_child(model: str, engine: str, args, env: dict) -> dict:
    cmd = [sys.executable, __file__, "--child", "--model", model, "--engine", engine,
           "--threads", str(args.threads), "--runs", str(args.runs), "--warmup", str(args.warmup)]
    try:
        p = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True,
                           timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    for line in p.stdout.splitlines():
        if line.startswith(TAG):
            return json.loads(line[len(TAG):])
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": tail[:200]}


def bench_model(model: str, args) -> dict:
    row = {"eager": run_child(model, "eager", args, {})}
    for engine, var in (("inductor", "TORCHINDUCTOR_CACHE_DIR"), ("kiln", "KILN_CACHE_DIR")):
        cache = tempfile.mkdtemp(prefix=f"kiln-bench-{engine}-")
        try:
            row[engine] = run_child(model, engine, args, {var: cache})
            row[engine + "_warm"] = run_child(model, engine, args, {var: cache})
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    return row


def overhead(args) -> dict:
    """kiln.Model.run against `kiln bench` on the embedded default model:
    medians of both, alternated for --overhead-rounds rounds; the overhead
    is the median of the rounds' ratios."""
    import kiln

    model = kiln.compile(REPO / "crates" / "kiln-cli" / "assets" / "default.onnx", threads=args.threads)
    python_ms, cli_ms = [], []
    for _ in range(args.overhead_rounds):
        python_ms.append(model.bench(runs=args.overhead_runs, warmup=20).median_ms)
        out = subprocess.run(
            [str(args.kiln), "bench", "--threads", str(args.threads), "--runs", str(args.overhead_runs),
             "--warmup", "20", "--json"],
            capture_output=True, text=True, check=True,
        ).stdout
        cli_ms.append(json.loads(out)["median_ms"])
    ratios = [p / c for p, c in zip(python_ms, cli_ms)]
    return {"python_ms": python_ms, "cli_ms": cli_ms, "overhead": statistics.median(ratios) - 1}


def fmt(r: dict, key: str, digits: int = 2) -> str:
    if "error" in r:
        return "n/a"
    v = r.get(key)
    return "-" if v is None else f"{v:.{digits}f}"


def table(results: dict) -> str:
    lines = [
        "| model | eager ms | inductor ms | kiln ms | kiln/inductor | kiln/eager | inductor compile s (cold / warm) | kiln compile s (cold / warm) | kiln matches eager |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for model, row in results.items():
        e, i, k = row["eager"], row["inductor"], row["kiln"]

        def ratio(a, b):
            if "error" in a or "error" in b:
                return "n/a"
            return f"{a['median_ms'] / b['median_ms']:.2f}"

        match = "n/a" if "error" in k else ("yes" if k["within_tolerance"] else "NO") + f" ({k['max_diff']:.1e})"
        lines.append(
            f"| {model} | {fmt(e, 'median_ms')} | {fmt(i, 'median_ms')} | {fmt(k, 'median_ms')} | "
            f"{ratio(k, i)} | {ratio(k, e)} | {fmt(i, 'compile_s', 1)} / {fmt(row['inductor_warm'], 'compile_s', 1)} | "
            f"{fmt(k, 'compile_s', 1)} / {fmt(row['kiln_warm'], 'compile_s', 1)} | {match} |"
        )
    errors = [f"{m} {eng}: {r['error']}" for m, row in results.items() for eng, r in row.items() if "error" in r]
    return "\n".join(lines + ([""] + errors if errors else []))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(ALL))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--timeout", type=int, default=1800)
    p.add_argument("--kiln", type=Path, default=REPO / "target" / "release" / "kiln")
    p.add_argument("--overhead-runs", type=int, default=1000)
    p.add_argument("--overhead-rounds", type=int, default=7)
    p.add_argument("--overhead-only", action="store_true")
    p.add_argument("--json", type=Path)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--engine", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(TAG + json.dumps(measure(args)), flush=True)
        return 0
    report = {"threads": args.threads, "overhead": overhead(args)}
    o = report["overhead"]
    print(f"default model: Model.run {statistics.median(o['python_ms']):.4f} ms, kiln bench "
          f"{statistics.median(o['cli_ms']):.4f} ms (medians of {len(o['cli_ms'])} alternated rounds), "
          f"overhead {o['overhead'] * 100:+.1f}% (median of the rounds' ratios)", flush=True)
    if not args.overhead_only:
        results = {}
        for model in args.models.split(","):
            results[model] = bench_model(model, args)
            print(f"{model}: {json.dumps(results[model])}", file=sys.stderr, flush=True)
        report["models"] = results
        print(table(results))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
