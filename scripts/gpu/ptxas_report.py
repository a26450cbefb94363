#!/usr/bin/env python3
"""Registers and spills of kiln's CUDA kernels, per model (no GPU needed).

For each model: `kiln compile MODEL --emit cuda` writes model.cu; NVRTC
(loaded with ctypes from $KILN_NVRTC, e.g. the pip wheel
nvidia-cuda-nvrtc-cu12) compiles it to PTX for compute_90; `ptxas -v
-arch=sm_90` ($KILN_PTXAS, from nvidia-cuda-nvcc-cu12) assembles it and
reports each function's registers and spill stores/loads. Prints one line
per model (functions, most registers, functions that spill) and every
spilling function.

Usage:
    KILN_NVRTC=.../libnvrtc.so.12 KILN_PTXAS=.../ptxas \\
        python3 scripts/gpu/ptxas_report.py --kiln target/release/kiln models/*/model.onnx
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def nvrtc_ptx(lib, source: bytes, arch: str) -> bytes:
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source, b"model.cu", 0, None, None):
        raise RuntimeError("nvrtcCreateProgram failed")
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    if rc:
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(log.value.decode(errors="replace")[-2000:])
    n = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
    ptx = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetPTX(prog, ptx)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value


def report(ptxas: str, ptx: bytes) -> list[tuple[str, int, int, int]]:
    """(function, registers, spill store bytes, spill load bytes) per function."""
    with tempfile.NamedTemporaryFile(suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        out = subprocess.run([ptxas, "-v", "-arch=sm_90", f.name, "-o", os.devnull],
                             capture_output=True, text=True, check=True).stderr
    rows, name = [], None
    spills = (0, 0)
    for line in out.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            name = m.group(1)
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            spills = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            rows.append((name, int(m.group(1)), *spills))
            name, spills = None, (0, 0)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="target/release/kiln")
    ap.add_argument("--tf32", action="store_true",
                    help="f32 products on TF32 tensor cores (kiln compile --tf32)")
    ap.add_argument("--all", action="store_true", help="print every function's registers")
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    lib = ctypes.CDLL(os.environ["KILN_NVRTC"])
    ptxas = os.environ.get("KILN_PTXAS", "ptxas")
    for model in args.models:
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([args.kiln, "compile", model, "--emit", "cuda", "-o", d] + (["--tf32"] if args.tf32 else []),
                           check=True, capture_output=True)
            rows = report(ptxas, nvrtc_ptx(lib, Path(d, "model.cu").read_bytes(), "compute_90"))
        spilling = [r for r in rows if r[2] or r[3]]
        most = max(rows, key=lambda r: r[1])
        print(f"{model}: {len(rows)} functions, most registers {most[1]} ({most[0]}), "
              f"{len(spilling)} spill")
        for name, regs, st, ld in rows if args.all else spilling:
            print(f"  {name}: {regs} registers, {st} bytes spill stores, {ld} bytes spill loads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
