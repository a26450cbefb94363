#!/usr/bin/env python3
"""The model suite through ahead-of-time exports (outside CI).

For each model under models/ (scripts/models/export.py and reference.py make
them), this:
  1. exports it:  kiln compile models/M/model.onnx --emit aot -o OUT/M --name M --threads T
  2. builds it:   make -C OUT/M -j2
  3. runs it:     OUT/M/M_main --runs R models/M/input_0.npy ... OUT/M/out
     and checks every output against onnxruntime's (models/M/ort_output_k.npy,
     max|aot - ort| <= 1e-3 * max|ort| + 1e-5, the model-suite criterion);
  4. times the JIT on the same inputs in the same run:
     kiln bench models/M/model.onnx -i ... --runs R --threads T --json
     and reports AOT median / JIT median;
  5. measures the AOT program's peak resident memory (getrusage of the child,
     one run) against weights + arena + workspace from the export's header;
  6. reports the arena against its lower bound (the most bytes live at once).

With --sanitize the programs are built with AddressSanitizer and
UndefinedBehaviorSanitizer (-O1 -g, no recovery) and run once: any report
fails; only the comparison with onnxruntime is printed.

Usage:
    python scripts/bench/aot.py [--kiln target/release/kiln] [--threads 2] [--runs 30] [models...]
    python scripts/bench/aot.py --sanitize [models...]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def inputs_of(d: Path) -> list[Path]:
    files, k = [], 0
    while (d / f"input_{k}.npy").exists():
        files.append(d / f"input_{k}.npy")
        k += 1
    return files


def header_value(header: str, key: str) -> int:
    m = re.search(rf"#define \w+_{key} (\d+)", header)
    return int(m.group(1)) if m else 0


def run_child(cmd: list[str], env: dict) -> tuple[str, int]:
    """stderr of `cmd` and its own peak resident set in KiB (wait4's rusage)."""
    with tempfile.TemporaryFile(mode="w+") as err:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {text}")
    return text, usage.ru_maxrss


def worst_error(mdir: Path, out: Path) -> float:
    """The largest max|aot - ort| / (1e-3 max|ort| + 1e-5) over the outputs."""
    worst, k = 0.0, 0
    while (mdir / f"ort_output_{k}.npy").exists():
        want = np.load(mdir / f"ort_output_{k}.npy")
        got = np.load(out / "out" / f"output_{k}.npy")
        err_k = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        worst = max(worst, err_k / (1e-3 * scale + 1e-5))
        k += 1
    return worst


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=str(REPO / "target/release/kiln"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default="/tmp/kiln-aot-suite")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    names = a.models or sorted(p.name for p in (REPO / "models").iterdir() if (p / "model.onnx").exists())
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    rows, ok = [], True
    for name in names:
        mdir, out = REPO / "models" / name, Path(a.out) / name
        ins = inputs_of(mdir)
        subprocess.run([a.kiln, "compile", str(mdir / "model.onnx"), "--emit", "aot", "-o", str(out),
                        "--name", name, "--threads", str(a.threads)], check=True, capture_output=True)
        make = ["make", "-s", "-C", str(out), "-j2"]
        if a.sanitize:
            san = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
            subprocess.run(make[:-1] + ["clean"], check=True)
            make += [f"CFLAGS=-O1 -g -march=native -std=c11 {san}", f"LDFLAGS={san}"]
        subprocess.run(make, check=True)
        (out / "out").mkdir(exist_ok=True)
        if a.sanitize:
            run_child([str(out / f"{name}_main"), *map(str, ins), str(out / "out")], env)
            worst = worst_error(mdir, out)
            print(f"{name}: clean under ASan+UBSan, err/tol {worst:.3f}")
            ok &= worst <= 1.0
            continue
        # One run alone for the resident-memory figure, then the timed runs.
        _, rss_kib = run_child([str(out / f"{name}_main"), *map(str, ins), str(out / "out")], env)
        err, _ = run_child([str(out / f"{name}_main"), "--runs", str(a.runs), *map(str, ins), str(out / "out")], env)
        aot_ms = float(re.search(r"median ([0-9.]+) ms", err).group(1))
        worst = worst_error(mdir, out)
        bench = subprocess.run([a.kiln, "bench", str(mdir / "model.onnx"), *sum((["-i", str(i)] for i in ins), []),
                                "--runs", str(a.runs), "--threads", str(a.threads), "--json"],
                               check=True, capture_output=True, text=True)
        jit = json.loads(bench.stdout.strip().splitlines()[-1])
        header = (out / f"{name}.h").read_text()
        weights, arena = header_value(header, "WEIGHTS_BYTES"), header_value(header, "ARENA_BYTES")
        bound, ws = header_value(header, "ARENA_BOUND_BYTES"), header_value(header, "WORKSPACE_BYTES")
        planned_mib = (weights + arena + ws) / 2**20
        rows.append((name, aot_ms, jit["median_ms"], aot_ms / jit["median_ms"], worst <= 1.0, worst,
                     arena / 2**20, bound / 2**20, arena / max(bound, 1), weights / 2**20, ws / 2**20,
                     rss_kib / 1024, rss_kib / 1024 / planned_mib))
        ok &= worst <= 1.0
    if a.sanitize:
        return 0 if ok else 1
    print(f"| model | AOT ms | JIT ms | AOT/JIT | matches ort | err/tol | arena MiB | bound MiB | arena/bound "
          f"| weights MiB | workspace MiB | AOT max RSS MiB | RSS/(w+a+ws) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.3f} | {'yes' if r[4] else 'NO'} | {r[5]:.3f} "
              f"| {r[6]:.2f} | {r[7]:.2f} | {r[8]:.3f} | {r[9]:.1f} | {r[10]:.2f} | {r[11]:.1f} | {r[12]:.3f} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
