#!/usr/bin/env python3
"""GraphTurbo's Table 3, Fig. 14 speedups and Fig. 15 breakdown in kind,
from `kiln sim` (the DSA traffic and cycle simulator), as Markdown tables.

    python scripts/dsa/sim_table.py [--kiln target/release/kiln] [--backend dsa:stcp920] \\
        MODEL.onnx[:BATCH] ...

Each model is simulated under six schedules (one `kiln sim --json` each):
per-layer (TVM), layers-in-gb (Fig. 15's "outputs kept in GB"),
layers-in-lb (Fig. 15's "in LB"), astitch-like (§5.2's AStitch: outputs
kept in LB, else DDR), graphturbo without across-layer scheduling (Fig.
15's "plus instances") and graphturbo (Fig. 15's "plus across-layer
scheduling"). A model is named by its directory (`models/NAME/model.onnx`).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

FLOAT_BYTES = None

RUNS = [
    ("per-layer", ["--schedule", "per-layer"]),
    ("layers-in-gb", ["--schedule", "layers-in-gb"]),
    ("layers-in-lb", ["--schedule", "layers-in-lb"]),
    ("astitch-like", ["--schedule", "astitch-like"]),
    ("graphturbo-serial", ["--schedule", "graphturbo", "--across-layer", "off"]),
    ("graphturbo", ["--schedule", "graphturbo"]),
]


def simulate(kiln, backend, path, batch, extra):
    cmd = [kiln, "sim", str(path), "--backend", backend, "--json", *extra]
    if FLOAT_BYTES:
        cmd += ["--float-bytes", FLOAT_BYTES]
    if batch:
        cmd += ["--batch", batch]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: {out.stderr.strip()}")
    report = json.loads(out.stdout)
    kernels = report.pop("per_kernel", [])
    ddr = lambda t: t["ddr_to_lb"] + t["ddr_to_gb"] + t["lb_to_ddr"]
    report["ddr_split"] = {
        "weights": sum(ddr(k["weights"]) + ddr(k["late_weights"]) for k in kernels),
        "inputs": sum(ddr(k["inputs"]) for k in kernels),
        "outputs": sum(ddr(k["outputs"]) for k in kernels),
    }
    return report


def scopes(r):
    return f"{r['outputs_in_ddr']} / {r['outputs_in_gb']} / {r['outputs_in_lb']}"


def speedup(base, new):
    return f"{base['cycles'] / new['cycles']:.2f}×"


def mb(n):
    return f"{n / 1e6:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="target/release/kiln")
    ap.add_argument("--backend", default="dsa:stcp920")
    ap.add_argument("--float-bytes", help="kiln sim --float-bytes (2: FP16)")
    ap.add_argument("models", nargs="+", help="MODEL.onnx[:BATCH]")
    args = ap.parse_args()
    global FLOAT_BYTES
    FLOAT_BYTES = args.float_bytes
    rows = []
    for spec in args.models:
        path, _, batch = spec.partition(":")
        name = Path(path).parent.name
        runs = {k: simulate(args.kiln, args.backend, path, batch, extra) for k, extra in RUNS}
        rows.append((name, batch or "own", runs))
        print(f"simulated {name}", file=sys.stderr)

    print("| model | batch | kernels per-layer / graphturbo | per-layer DDR / GB / LB | astitch-like DDR / GB / LB | graphturbo DDR / GB / LB |")
    print("|---|---|---|---|---|---|")
    for name, batch, r in rows:
        print(f"| {name} | {batch} | {r['per-layer']['kernels']} / {r['graphturbo']['kernels']} | "
              f"{scopes(r['per-layer'])} | {scopes(r['astitch-like'])} | {scopes(r['graphturbo'])} |")
    print()
    print("| model | per-layer Mcycles | astitch-like Mcycles | graphturbo Mcycles | graphturbo over per-layer | graphturbo over astitch-like |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, _, r in rows:
        p, a, g = r["per-layer"], r["astitch-like"], r["graphturbo"]
        print(f"| {name} | {p['cycles'] / 1e6:.2f} | {a['cycles'] / 1e6:.2f} | {g['cycles'] / 1e6:.2f} | "
              f"{speedup(p, g)} | {speedup(a, g)} |")
    print()
    print("| model | outputs in GB | in LB | plus instances | plus across-layer scheduling |")
    print("|---|---:|---:|---:|---:|")
    for name, _, r in rows:
        p = r["per-layer"]
        steps = ["layers-in-gb", "layers-in-lb", "graphturbo-serial", "graphturbo"]
        print(f"| {name} | " + " | ".join(speedup(p, r[s]) for s in steps) + " |")
    print()
    print("| model | compulsory MB | per-layer MB | astitch-like MB | graphturbo MB | graphturbo / compulsory | graphturbo weights / activations in / outputs out MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, _, r in rows:
        g = r["graphturbo"]
        floor = g["compulsory_ddr_bytes"]
        split = g["ddr_split"]
        print(f"| {name} | {mb(floor)} | {mb(r['per-layer']['ddr_bytes'])} | {mb(r['astitch-like']['ddr_bytes'])} | "
              f"{mb(g['ddr_bytes'])} | {g['ddr_bytes'] / floor:.2f}× | "
              f"{mb(split['weights'])} / {mb(split['inputs'])} / {mb(split['outputs'])} |")


if __name__ == "__main__":
    main()
