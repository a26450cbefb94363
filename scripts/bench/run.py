#!/usr/bin/env python3
"""Benchmark kiln against its peers on the model suite (not run in CI).

For each model, every selected engine runs in the same invocation, each in its
own subprocess with the same thread count:

    kiln           KILN bench models/<m>/model.onnx --threads T --json --runs N --warmup W
                   (default fusion planner, apollo)
    kiln_none      the same with --fusion none (one kernel per op), for the
                   fusion speed-up in the same run
    ort            onnxruntime InferenceSession (scripts/bench/engines.py)
    openvino       OpenVINO compile_model(..., "CPU") (engines.py)
    torch          PyTorch eager, the module export.py builds (engines.py)
    torch_compile  torch.compile of that module, inductor default mode (engines.py)

and prints one table row per model: median ms per engine, kiln/peer ratios
(kiln time / peer time, < 1 means kiln is faster), achieved GFLOP/s of kiln
and of the best peer and their fraction of the fp32 FMA peak (measured by
`KILN peak --threads T --json`, or scripts/bench/fma_peak.c when kiln has no
such command). FLOPs (2 x MACs of Conv/MatMul/Gemm, scripts/models/flops.py)
are cached in scripts/bench/flops.json.

Usage (inside the model venv, see scripts/bench/setup.sh):
    python scripts/bench/run.py
    python scripts/bench/run.py --models resnet50,bert --runs 50 --warmup 5
    python scripts/bench/run.py --engines ort,openvino,torch,torch_compile --markdown
    python scripts/bench/run.py --kiln target/release/kiln --json out/bench.json
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from engines import RESULT_TAG, CpuMeter  # noqa: E402

MODELS = ["resnet50", "mobilenet_v2", "bert", "gpt2", "vit"]


def wide_models(probe: bool = False) -> list:
    """The wider set of scripts/models/export.py --wide (issue 19), or with
    `probe` its --probe set."""
    sys.path.insert(0, str(REPO / "scripts" / "models"))
    import export
    return list(export.PROBE if probe else export.WIDE)
ENGINES = ["kiln", "kiln_none", "ort", "openvino", "torch", "torch_compile"]
PEERS = [e for e in ENGINES if e != "kiln"]
# kiln engines and their fusion planner.
KILN_ENGINES = {"kiln": "apollo", "kiln_none": "none"}
PEER_PACKAGES = ["onnxruntime", "openvino", "torch", "torchvision", "transformers", "numpy"]
FLOPS_CACHE = HERE / "flops.json"


# ---------------------------------------------------------------- machine ---

def cpu_description() -> str:
    """Model name plus family/model and the vector ISA that matters here."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine()
    flags = set(info.get("flags", "").split())
    isa = [f for f in ("avx512f", "avx512_bf16", "amx_tile", "avx2", "fma") if f in flags]
    return (f"{info.get('model name', '?')} (family {info.get('cpu family', '?')}, "
            f"model {info.get('model', '?')}; {' '.join(isa) or 'no AVX'}; "
            f"{os.cpu_count()} logical CPUs)")


def load_average() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def busy_cores(seconds: float = 5.0) -> float:
    """Cores kept busy by other processes, sampled while this one sleeps.

    Unlike the load average this is not inflated by the engines we just ran.
    """
    with CpuMeter() as meter:
        time.sleep(seconds)
    return meter.cores


def wait_for_quiet(max_busy: float, deadline: float) -> float:
    """Polls every 60 s until other processes use at most max_busy cores, or
    until the monotonic deadline (the whole run's waiting budget) passes."""
    while True:
        busy = busy_cores()
        if busy <= max_busy:
            return busy
        if time.monotonic() >= deadline:
            log(f"{busy:.2f} cores busy elsewhere, waiting budget spent; measuring anyway")
            return busy
        pause = min(60.0, max(0.0, deadline - time.monotonic()))
        log(f"{busy:.2f} cores busy elsewhere (load {load_average()}) > {max_busy}; "
            f"waiting {pause:.0f} s")
        time.sleep(pause)


def package_versions() -> dict:
    versions = {}
    for pkg in PEER_PACKAGES:
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = "not installed"
    return versions


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def command_version(cmd: list) -> str:
    try:
        proc = subprocess.run(cmd + ["--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"n/a ({first_line(str(e))})"
    return first_line(proc.stdout or proc.stderr) or f"n/a (exit {proc.returncode})"


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------- peak ---

def measure_peak(kiln: str, threads: int, quiet, deadline: float) -> dict:
    """fp32 FMA peak in GFLOP/s: `kiln peak`, else the bundled C program."""
    if quiet is not None:
        wait_for_quiet(quiet, deadline)
    with CpuMeter(children=True) as meter:
        peak = kiln_peak(kiln, threads) or fma_peak_fallback(threads)
    return {**peak, "cpu_other": round(meter.cores, 3)}


def kiln_peak(kiln: str, threads: int):
    try:
        proc = subprocess.run([kiln, "peak", "--threads", str(threads), "--json"],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode == 0:
            return {**last_json(proc.stdout), "source": f"{kiln} peak --threads {threads}"}
        why = first_line(proc.stderr or proc.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        why = first_line(str(e))
    log(f"kiln peak unavailable ({why}); using scripts/bench/fma_peak.c")
    return None


def fma_peak_fallback(threads: int) -> dict:
    cc = os.environ.get("CC", "cc")
    march = os.environ.get("KILN_MARCH", "native")
    flags = ["-O3", f"-march={march}", "-ffp-contract=fast", "-fopenmp"]
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "fma_peak"
        build = [cc, *flags, str(HERE / "fma_peak.c"), "-o", str(exe)]
        try:
            subprocess.run(build, check=True, capture_output=True, text=True)
            proc = subprocess.run([str(exe)], check=True, capture_output=True, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": str(threads)},
                                  timeout=300)
            peak = last_json(proc.stdout)
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            detail = getattr(e, "stderr", "") or str(e)
            return {"gflops": None, "source": f"fma_peak.c failed: {first_line(detail)}"}
    return {**peak, "source": f"scripts/bench/fma_peak.c ({shlex.join([cc, *flags])}, "
                              f"{command_version([cc])})"}


def last_json(stdout: str) -> dict:
    """The last stdout line that is a JSON object."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON object in output: " + first_line(stdout))


# ------------------------------------------------------------------ flops ---

def model_flops(models: list, models_dir: Path) -> dict:
    """GFLOP per model, from flops.json when it matches the model file size."""
    try:
        cache = json.loads(FLOPS_CACHE.read_text())
    except (OSError, ValueError):
        cache = {}
    changed = False
    out = {}
    for m in models:
        path = models_dir / m / "model.onnx"
        if not path.exists():
            out[m] = cache.get(m, {}).get("gflop")
            continue
        entry = cache.get(m)
        if not entry or entry.get("model_bytes") != path.stat().st_size:
            log(f"{m}: counting FLOPs (scripts/models/flops.py)")
            sys.path.insert(0, str(REPO / "scripts" / "models"))
            import flops  # scripts/models/flops.py

            total, _ = flops.count_flops(path)
            entry = {"gflop": round(total / 1e9, 4), "model_bytes": path.stat().st_size}
            cache[m] = entry
            changed = True
        out[m] = entry["gflop"]
    if changed:
        FLOPS_CACHE.write_text(json.dumps(cache, indent=2, sort_keys=True) + "\n")
    return out


# ---------------------------------------------------------------- engines ---

def run_engine(engine: str, model: str, args) -> dict:
    model_dir = args.models_dir / model
    if not (model_dir / "model.onnx").exists():
        return {"error": f"missing {model_dir / 'model.onnx'} (run scripts/models/export.py)"}
    if engine in KILN_ENGINES:
        cmd = [args.kiln, "bench", str(model_dir / "model.onnx"), "--threads", str(args.threads),
               "--json", "--runs", str(args.runs), "--warmup", str(args.warmup),
               "--fusion", KILN_ENGINES[engine]]
    else:
        cmd = [args.python, str(HERE / "engines.py"), engine, str(model_dir),
               "--model-name", model, "--threads", str(args.threads),
               "--runs", str(args.runs), "--warmup", str(args.warmup)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    t0 = time.perf_counter()
    try:
        with CpuMeter(children=True) as meter:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                  timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    except OSError as e:
        return {"error": first_line(str(e))}
    wall = time.perf_counter() - t0
    result = parse_result(engine, proc)
    result.setdefault("cpu_other", round(meter.cores, 3))
    result["wall_s"] = round(wall, 2)
    return result


def parse_result(engine: str, proc: subprocess.CompletedProcess) -> dict:
    if engine in KILN_ENGINES:
        if proc.returncode != 0:
            return {"error": first_line(proc.stderr or proc.stdout) or f"exit {proc.returncode}"}
        try:
            return last_json(proc.stdout)
        except ValueError as e:
            return {"error": first_line(str(e))}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    if proc.returncode < 0:  # e.g. SIGKILL from the out-of-memory killer
        return {"error": f"killed by signal {-proc.returncode}"}
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    return {"error": first_line(last) or f"exit {proc.returncode}, no result"}


def measure(engine: str, model: str, args) -> dict:
    """One engine on one model; with --quiet, waits for an idle machine first
    and measures again (up to --retries times) when something else used more
    than that many cores during the timed runs. Keeps the cleanest result."""
    best = None
    for attempt in range(1 + (args.retries if args.quiet is not None else 0)):
        if attempt and time.monotonic() >= args.wait_deadline:
            break  # no waiting budget left: another try would be as disturbed
        if args.quiet is not None:
            wait_for_quiet(args.quiet, args.wait_deadline)
        log(f"{model} {engine} (load {load_average()}) ...")
        r = run_engine(engine, model, args)
        log(f"{model} {engine}: " + (f"n/a: {r['error']}" if "error" in r else
                                     f"median {r['median_ms']:.2f} ms, min {r['min_ms']:.2f} ms, "
                                     f"other CPU {r['cpu_other']:.2f} cores"))
        if best is None or r.get("cpu_other", 0) < best.get("cpu_other", 0):
            best = r
        if "error" in r or args.quiet is None or r.get("cpu_other", 0) <= args.quiet:
            break
        if attempt < args.retries and time.monotonic() < args.wait_deadline:
            log(f"{model} {engine}: disturbed by other processes; measuring again")
    return best


def combine_rounds(results: list) -> dict:
    """One engine's rounds on one model as one result: the round with the
    median of the per-round medians (its fields, e.g. compile time), the
    minimum over all rounds, and every round's median. Interleaving the
    engines round by round and taking the median round keeps a slow spell
    of the (shared, virtual) machine from landing on one engine only."""
    ok = sorted((r for r in results if "error" not in r), key=lambda r: r["median_ms"])
    if not ok:
        return results[0]
    combined = dict(ok[(len(ok) - 1) // 2])
    combined["min_ms"] = min(r["min_ms"] for r in ok)
    combined["round_medians_ms"] = [round(r["median_ms"], 3) for r in results if "error" not in r]
    return combined


# ------------------------------------------------------------------ table ---

def fmt_ms(result: dict | None) -> str:
    if not result or "error" in result:
        return "n/a"
    ms = result["median_ms"]
    return f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def gflops_cell(gflop, result, peak) -> str:
    if not gflop or not result or "error" in result:
        return "n/a"
    rate = gflop / (result["median_ms"] / 1e3)
    frac = f" ({rate / peak:.0%})" if peak else ""
    return f"{rate:.0f}{frac}"


def summary_rows(report: dict) -> tuple:
    engines, peers = report["engines"], [e for e in report["engines"] if e != "kiln"]
    peak = report["peak"].get("gflops")
    header = ["model", "GFLOP"] + [f"{e} ms" for e in engines]
    if "kiln" in engines:
        header += [f"kiln/{p}" for p in peers] + ["kiln GFLOP/s (peak)"]
    header += ["best peer GFLOP/s (peak)"]
    rows = []
    for model, results in report["results"].items():
        gflop = report["flops"].get(model)
        row = [model, f"{gflop:.2f}" if gflop else "?"] + [fmt_ms(results.get(e)) for e in engines]
        kiln = results.get("kiln")
        ok = {p: results[p] for p in peers if "error" not in results.get(p, {"error": 1})}
        if "kiln" in engines:
            for p in peers:
                ratio = (kiln["median_ms"] / ok[p]["median_ms"]
                         if p in ok and kiln and "error" not in kiln else None)
                row.append(f"{ratio:.2f}" if ratio else "n/a")
            row.append(gflops_cell(gflop, kiln, peak))
        best = min(ok, key=lambda p: ok[p]["median_ms"]) if ok else None
        row.append(f"{best}: {gflops_cell(gflop, ok[best], peak)}" if best else "n/a")
        rows.append(row)
    return header, rows


def paired_rows(report: dict) -> tuple:
    """Per model and peer, kiln's time over the peer's round by round (each round runs the
    engines back to back, so a round's engines mostly share the machine's state): the median
    of those ratios, and in how many rounds kiln was faster. On this VM, whose slow spells
    last seconds to minutes, this is steadier than comparing each engine's median round."""
    peers = [e for e in report["engines"] if e != "kiln"]
    header = ["model"] + [f"kiln/{p} per round" for p in peers]
    rows = []
    for model, results in report["results"].items():
        kiln = results.get("kiln", {}).get("round_medians_ms")
        row = [model]
        for p in peers:
            theirs = results.get(p, {}).get("round_medians_ms")
            if not kiln or not theirs or len(kiln) != len(theirs):
                row.append("n/a")
                continue
            ratios = sorted(k / t for k, t in zip(kiln, theirs))
            faster = sum(k < t for k, t in zip(kiln, theirs))
            row.append(f"{statistics.median(ratios):.2f} ({faster} of {len(ratios)} faster)")
        rows.append(row)
    return header, rows


def detail_rows(report: dict) -> tuple:
    header = ["model", "engine", "median ms", "min ms", "runs", "compile s", "other CPU", "note"]
    rows = []
    for model, results in report["results"].items():
        for engine, r in results.items():
            if "error" in r:
                rows.append([model, engine, "n/a", "n/a", "", "", "", r["error"]])
                continue
            compile_s = r.get("compile_s")
            rows.append([model, engine, fmt_ms(r), f"{r['min_ms']:.2f}", str(r.get("runs", "")),
                         f"{compile_s:.2f}" if compile_s is not None else "-",
                         f"{r.get('cpu_other', 0):.2f}", ""])
    return header, rows


def numeric_column(title: str) -> bool:
    return title not in ("model", "engine", "note")


def render(header: list, rows: list, markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |",
                 "|" + "|".join("---:" if numeric_column(h) else "---" for h in header) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def header_lines(report: dict) -> list:
    h = report["header"]
    peak = report["peak"]
    peak_text = (f"{peak['gflops']:.1f} GFLOP/s fp32 on {report['threads']} threads "
                 f"({peak['source']}; other CPU {peak['cpu_other']:.2f} cores)"
                 if peak.get("gflops") else f"n/a ({peak['source']})")
    versions = ", ".join(f"{k} {v}" for k, v in h["versions"].items())
    return [
        f"date: {h['date']}",
        f"CPU: {h['cpu']}",
        f"threads: {report['threads']} per engine; warm-up {report['warmup']}, "
        f"timed runs {report['runs']} (median and min of per-run time.perf_counter)"
        + (f"; {report['rounds']} interleaved rounds, the median round reported"
           if report.get("rounds", 1) > 1 else ""),
        f"command: `{h['command']}`",
        f"versions: {versions}",
        f"fp32 FMA peak: {peak_text}",
        f"load average at start: {h['load_start']}; at end: {h.get('load_end', '?')}; "
        f"{worst_disturbance(report)}",
    ]


def worst_disturbance(report: dict) -> str:
    """The most CPU other processes took during any measurement."""
    seen = [(r["cpu_other"], f"{m} {e}") for m, rs in report["results"].items()
            for e, r in rs.items() if "cpu_other" in r]
    if not seen:
        return "no measurements"
    cores, where = max(seen)
    return f"other processes used at most {cores:.2f} cores during a measurement ({where})"


def print_report(report: dict, markdown: bool) -> None:
    lines = header_lines(report)
    if markdown:
        print("\n".join(f"- {line}" for line in lines))
    else:
        print("\n".join(lines))
    print()
    print(render(*summary_rows(report), markdown))
    print()
    if report.get("rounds", 1) > 1 and "kiln" in report["engines"]:
        print(render(*paired_rows(report), markdown))
        print()
    print(render(*detail_rows(report), markdown))


# ------------------------------------------------------------------- main ---

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=None,
                   help="comma-separated subset of: " + ",".join(MODELS)
                   + " or of the wider set (scripts/models/export.py --wide);"
                   + " default: the five, or the whole wider set with --wide")
    p.add_argument("--wide", action="store_true",
                   help="measure the wider set instead (exported by export.py --wide);"
                        " --models picks from it")
    p.add_argument("--probe", action="store_true",
                   help="measure the probe set instead (other model families, exported by"
                        " export.py --probe)")
    p.add_argument("--models-dir", type=Path, default=REPO / "models")
    p.add_argument("--engines", default=",".join(ENGINES),
                   help="comma-separated subset of: " + ",".join(ENGINES))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=20, help="timed runs per engine and model")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs first")
    p.add_argument("--kiln", default=str(REPO / "target" / "release" / "kiln"))
    p.add_argument("--python", default=sys.executable,
                   help="interpreter for the peer engines (default: this one)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per engine and model")
    p.add_argument("--quiet", type=float, default=None, metavar="CORES",
                   help="before each measurement wait (polling every 60 s) until other "
                        "processes use at most CORES cores, and measure again if they "
                        "used more during the timed runs")
    p.add_argument("--wait-max", type=float, default=1200,
                   help="seconds of waiting for --quiet in the whole run")
    p.add_argument("--retries", type=int, default=2, help="re-measurements with --quiet")
    p.add_argument("--rounds", type=int, default=1,
                   help="measure every engine this many times per model, interleaved round by "
                        "round; report the median round (see combine_rounds)")
    p.add_argument("--json", type=Path, default=None, help="also write all results here")
    p.add_argument("--markdown", action="store_true", help="print tables as BENCHMARKS.md does")
    args = p.parse_args(argv)
    if args.models is None:
        args.models = wide_models(args.probe) if args.wide or args.probe else list(MODELS)
    else:
        args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in args.engines if e not in ENGINES]
    if bad:
        p.error(f"unknown engine(s) {', '.join(bad)}; known: {', '.join(ENGINES)}")
    if args.runs < 1 or args.warmup < 0 or args.threads < 1 or args.rounds < 1:
        p.error("need --runs >= 1, --warmup >= 0, --threads >= 1, --rounds >= 1")
    if os.sep in args.kiln or not shutil.which(args.kiln):
        args.kiln = str(Path(args.kiln).resolve())
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    args.wait_deadline = time.monotonic() + args.wait_max
    kiln_version = command_version([args.kiln]).removeprefix("kiln ")
    versions = {"kiln": kiln_version if "kiln" in args.engines else "not run"}
    versions.update(package_versions())
    report = {
        "header": {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": cpu_description(),
            "command": shlex.join([Path(sys.executable).name, *sys.argv]),
            "versions": versions,
            "load_start": load_average(),
        },
        "threads": args.threads, "runs": args.runs, "warmup": args.warmup,
        "rounds": args.rounds,
        "engines": args.engines,
        "peak": measure_peak(args.kiln, args.threads, args.quiet, args.wait_deadline),
        "flops": model_flops(args.models, args.models_dir),
        "results": {},
    }
    for index, model in enumerate(args.models):
        rounds = {engine: [] for engine in args.engines}
        for round_index in range(args.rounds):
            for engine in rotated(args.engines, index + round_index):
                rounds[engine].append(measure(engine, model, args))
        report["results"][model] = {
            engine: combine_rounds(results) for engine, results in rounds.items()
        }
    report["header"]["load_end"] = load_average()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print_report(report, args.markdown)
    return 0


def rotated(engines: list, k: int) -> list:
    """`engines` starting at position k (mod their count): each model and
    round starts with another engine, since the first engine to run a model
    measured slower on small models (BENCHMARKS.md, session 17)."""
    k %= max(len(engines), 1)
    return engines[k:] + engines[:k]


if __name__ == "__main__":
    sys.exit(main())
