#!/usr/bin/env python3
"""Cross-checks `kiln sim`'s DRAM traffic on one convolution layer against
SCALE-Sim (PyPI `scalesim`) with the same buffer sizes. Outside CI: needs
a Python with `scalesim` and `onnx` (e.g. a venv under /tmp).

    python scripts/dsa/scalesim_check.py [--kiln target/release/kiln] [--work /tmp/scalesim-check]
        [--ifmap 16x16x128] [--filter 3x3x128] [--sram-kb 64,64,32] [--array 32x32]

The layer (no padding, stride 1, 8-bit words as SCALE-Sim counts them)
becomes an ONNX model and a one-core DSA description whose LB is the
three SRAMs together, without GB, with `float_bytes = 1`; `kiln sim
--schedule per-layer` and SCALE-Sim (output-stationary, ifmap / filter /
ofmap SRAMs) each report DRAM reads and writes.
"""

import argparse
import csv
import json
import subprocess
from pathlib import Path

DESC = """name = "scalesim-like"
clusters = 1
cores_per_cluster = 1
clock_ghz = 1.0
float_bytes = 1

[[units]]
name = "array"
kind = "matrix"
gflops = {gflops}

[local_buffer]
bytes = {lb}
gbps = 1024.0
latency_ns = 1.0

[ddr]
bytes = 17179869184
gbps = 16.0
latency_ns = 100.0

[dma]
engines_per_cluster = 1
initial_buffer_elems = 64
setup_ns = 0.0
"""

CONFIG = """[general]
run_name = kiln_check

[architecture_presets]
ArrayHeight = {rows}
ArrayWidth = {cols}
IfmapSramSzkB = {ifmap_kb}
FilterSramSzkB = {filter_kb}
OfmapSramSzkB = {ofmap_kb}
IfmapOffset = 0
FilterOffset = 10000000
OfmapOffset = 20000000
Dataflow = {dataflow}
Bandwidth = 10
ReadRequestBuffer = 32
WriteRequestBuffer = 32

[layout]
IfmapCustomLayout = False
IfmapSRAMBankBandwidth = 10
IfmapSRAMBankNum = 10
IfmapSRAMBankPort = 2
FilterCustomLayout = False
FilterSRAMBankBandwidth = 10
FilterSRAMBankNum = 10
FilterSRAMBankPort = 2

[sparsity]
SparsitySupport = false
SparseRep = ellpack_block
OptimizedMapping = false
BlockSize = 8
RandomNumberGeneratorSeed = 40

[run_presets]
InterfaceBandwidth = CALC
UseRamulatorTrace = False
"""


def conv_model(path, h, w, c, fh, fw, k):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, k, h - fh + 1, w - fw + 1])
    weight = numpy_helper.from_array(np.zeros((k, c, fh, fw), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    graph = helper.make_graph([node], "conv", [x], [y], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)


def kiln_dram(args, work, dims, lb):
    h, w, c, fh, fw, k = dims
    conv_model(str(work / "conv.onnx"), h, w, c, fh, fw, k)
    (work / "desc.toml").write_text(DESC.format(gflops=2.0 * args.rows * args.cols, lb=lb))
    out = subprocess.run(
        [args.kiln, "sim", str(work / "conv.onnx"), "--backend", f"dsa:{work / 'desc.toml'}",
         "--schedule", "per-layer", "--json"],
        capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    t = r["traffic"]
    kernel = r["per_kernel"][0]
    return t["ddr_to_lb"], t["lb_to_ddr"], kernel["rereads"]


def scalesim_dram(args, work, dims):
    from scalesim.scale_sim import scalesim

    h, w, c, fh, fw, k = dims
    header = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"
    row = f"conv, {h}, {w}, {fh}, {fw}, {c}, {k}, 1,\n"
    (work / "topo.csv").write_text(header + row)
    (work / "layout.csv").write_text(header + row)
    ifmap_kb, filter_kb, ofmap_kb = args.sram
    (work / "scale.cfg").write_text(CONFIG.format(
        rows=args.rows, cols=args.cols, ifmap_kb=ifmap_kb, filter_kb=filter_kb,
        ofmap_kb=ofmap_kb, dataflow=args.dataflow))
    sim = scalesim(save_disk_space=True, verbose=False, config=str(work / "scale.cfg"),
                   topology=str(work / "topo.csv"), layout=str(work / "layout.csv"))
    sim.run_scale(top_path=str(work / "out"))
    report = next((work / "out").rglob("DETAILED_ACCESS_REPORT.csv"))
    with open(report) as f:
        rows = list(csv.reader(f))
    cols = [c.strip() for c in rows[0]]
    vals = [v.strip() for v in rows[1]]
    get = lambda name: int(float(vals[cols.index(name)]))
    return get("DRAM IFMAP Reads"), get("DRAM Filter Reads"), get("DRAM OFMAP Writes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="target/release/kiln")
    ap.add_argument("--work", default="/tmp/scalesim-check")
    ap.add_argument("--ifmap", default="16x16x128", help="HxWxC")
    ap.add_argument("--filter", default="3x3x128", help="HxWxK (K filters)")
    ap.add_argument("--sram-kb", default="64,64,32", help="ifmap,filter,ofmap")
    ap.add_argument("--array", default="32x32")
    ap.add_argument("--dataflow", default="os")
    args = ap.parse_args()
    h, w, c = map(int, args.ifmap.split("x"))
    fh, fw, k = map(int, args.filter.split("x"))
    args.sram = [int(x) for x in args.sram_kb.split(",")]
    args.rows, args.cols = map(int, args.array.split("x"))
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    dims = (h, w, c, fh, fw, k)
    lb = 1024 * sum(args.sram)
    reads, writes, rereads = kiln_dram(args, work, dims, lb)
    s_ifmap, s_filter, s_ofmap = scalesim_dram(args, work, dims)
    ifmap, weights, ofmap = h * w * c, fh * fw * c * k, (h - fh + 1) * (w - fw + 1) * k
    print(f"layer: ifmap {h}x{w}x{c} ({ifmap} B), {k} filters {fh}x{fw} ({weights} B), ofmap {ofmap} B; "
          f"SRAM ifmap/filter/ofmap {args.sram_kb} KB, array {args.array}, dataflow {args.dataflow}")
    print("| | DRAM reads B | DRAM writes B |")
    print("|---|---:|---:|")
    print(f"| kiln sim (LB {lb // 1024} KB; re-reads {rereads or 'none'}) | {reads} | {writes} |")
    print(f"| SCALE-Sim (ifmap {s_ifmap} + filter {s_filter}) | {s_ifmap + s_filter} | {s_ofmap} |")
    print(f"| kiln / SCALE-Sim | {reads / max(1, s_ifmap + s_filter):.3f} | {writes / max(1, s_ofmap):.3f} |")


if __name__ == "__main__":
    main()
