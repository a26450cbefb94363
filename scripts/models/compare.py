#!/usr/bin/env python3
"""Run kiln on the model suite and compare against onnxruntime references.

For each model this runs
    KILN run models/<name>/model.onnx -i input_0.npy [-i input_1.npy ...] \
         -o OUTDIR --backend reference
and compares every OUTDIR/output_<k>.npy with models/<name>/ort_output_<k>.npy.

Pass criterion, per output:
    max|kiln - ort| <= 1e-3 * max|ort| + 1e-5
(shapes must match exactly; any NaN/Inf mismatch fails).

Prints a table and exits non-zero if any model/output fails (or kiln errors).

Usage:
    python scripts/models/compare.py                          # all models found
    python scripts/models/compare.py resnet50 bert
    python scripts/models/compare.py --kiln target/release/kiln --backend reference vit
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
RTOL = 1e-3
ATOL = 1e-5


def numbered(d: Path, prefix: str) -> list[Path]:
    files = []
    k = 0
    while (d / f"{prefix}{k}.npy").exists():
        files.append(d / f"{prefix}{k}.npy")
        k += 1
    return files


def compare_arrays(got: np.ndarray, want: np.ndarray):
    """Returns (ok, max_abs_err, bound, note)."""
    want64 = want.astype(np.float64)
    bound = RTOL * float(np.max(np.abs(want64))) if want.size else 0.0
    bound += ATOL
    if got.shape != want.shape:
        return False, float("nan"), bound, f"shape {list(got.shape)} != {list(want.shape)}"
    if got.size == 0:
        return True, 0.0, bound, ""
    got64 = got.astype(np.float64)
    if not np.array_equal(np.isfinite(got64), np.isfinite(want64)):
        return False, float("nan"), bound, "non-finite mismatch"
    fin = np.isfinite(want64)
    err = float(np.max(np.abs(got64[fin] - want64[fin]))) if fin.any() else 0.0
    note = "" if got.dtype == want.dtype else f"dtype {got.dtype} vs {want.dtype}"
    return err <= bound, err, bound, note


def run_model(kiln: str, name: str, models_dir: Path, out_root: Path, backend: str,
              timeout: float, extra: list[str]):
    d = models_dir / name
    model = d / "model.onnx"
    inputs = numbered(d, "input_")
    refs = numbered(d, "ort_output_")
    rows = []
    if not model.exists() or not refs:
        rows.append((name, "-", "-", float("nan"), float("nan"), "FAIL",
                     None, "missing model.onnx or ort_output_*.npy (run export/reference)"))
        return rows

    out_dir = out_root / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    cmd = [kiln, "run", str(model)]
    for f in inputs:
        cmd += ["-i", str(f)]
    cmd += ["-o", str(out_dir), "--backend", backend] + extra

    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, err_text = proc.returncode, (proc.stderr or proc.stdout).strip()
    except subprocess.TimeoutExpired:
        rc, err_text = -1, f"timed out after {timeout:.0f}s"
    except OSError as e:
        rc, err_text = -1, str(e)
    elapsed = time.perf_counter() - t0

    if rc != 0:
        last = err_text.splitlines()[-1] if err_text else ""
        rows.append((name, "-", "-", float("nan"), float("nan"), "FAIL", elapsed,
                     f"kiln exited {rc}: {last[:200]}"))
        return rows

    for k, ref_path in enumerate(refs):
        want = np.load(ref_path)
        got_path = out_dir / f"output_{k}.npy"
        if not got_path.exists():
            rows.append((name, f"output_{k}", str(list(want.shape)), float("nan"),
                         float("nan"), "FAIL", elapsed, f"{got_path.name} not written"))
            continue
        got = np.load(got_path)
        ok, err, bound, note = compare_arrays(got, want)
        rows.append((name, f"output_{k}", str(list(want.shape)), err, bound,
                     "PASS" if ok else "FAIL", elapsed, note))
    extra_outs = numbered(out_dir, "output_")[len(refs):]
    if extra_outs:
        rows.append((name, "-", "-", float("nan"), float("nan"), "FAIL", elapsed,
                     f"kiln wrote {len(extra_outs)} extra output(s)"))
    return rows


def print_table(rows) -> None:
    header = ("model", "output", "shape", "max abs err", "bound", "result", "kiln time")
    fmt_rows = []
    for name, out, shape, err, bound, res, t, note in rows:
        fmt_rows.append((
            name, out, shape,
            "-" if err != err else f"{err:.3e}",
            "-" if bound != bound else f"{bound:.3e}",
            res + (f" ({note})" if note else ""),
            "-" if t is None else f"{t:.2f}s",
        ))
    widths = [max(len(h), *(len(r[i]) for r in fmt_rows)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line)
    print("-" * len(line))
    for r in fmt_rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help="model names (default: all under --models-dir)")
    p.add_argument("--kiln", default=str(REPO / "target" / "release" / "kiln"),
                   help="kiln binary (default: <repo>/target/release/kiln)")
    p.add_argument("--models-dir", default=str(REPO / "models"))
    p.add_argument("--out", default=str(REPO / "out" / "compare"),
                   help="where kiln writes its outputs (default: <repo>/out/compare)")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per model")
    p.add_argument("--kiln-arg", action="append", default=[],
                   help="extra argument passed to `kiln run` (repeatable)")
    args = p.parse_args(argv)

    kiln = args.kiln
    if not Path(kiln).exists() and shutil.which(kiln) is None:
        print(f"[compare] kiln binary not found: {kiln} (build with cargo build --release)",
              file=sys.stderr)
        return 2
    models_dir = Path(args.models_dir)
    names = args.models or sorted(p.parent.name for p in models_dir.glob("*/model.onnx"))
    if not names:
        print(f"[compare] no models under {models_dir}", file=sys.stderr)
        return 2

    rows = []
    for name in names:
        print(f"[compare] {name} ...", file=sys.stderr, flush=True)
        rows += run_model(kiln, name, models_dir, Path(args.out), args.backend,
                          args.timeout, args.kiln_arg)
    print_table(rows)
    failed = sum(r[5] != "PASS" for r in rows)
    print(f"\n{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
