#!/usr/bin/env python3
"""Regenerates the ONNX backend node-test data (the layout kiln's conformance
harness reads) from the installed `onnx` package:

    pip install onnx==1.23.2
    python scripts/gen_node_tests.py OUTDIR
    KILN_ONNX_NODE_TESTS=OUTDIR cargo test -p kiln-conformance

Each case is written as OUTDIR/<name>/model.onnx and
OUTDIR/<name>/test_data_set_<k>/{input,output}_<j>.pb. Inputs/outputs that are
not tensors (sequences, maps, optionals) are skipped, as in ../shared.
"""
import os
import sys

import onnx
from onnx import numpy_helper
from onnx.backend.test.case.node import collect_testcases


def write_case(case, out):
    d = os.path.join(out, case.name)
    os.makedirs(d, exist_ok=True)
    onnx.save(case.model, os.path.join(d, "model.onnx"))
    for k, (inputs, outputs) in enumerate(case.data_sets):
        ds = os.path.join(d, f"test_data_set_{k}")
        os.makedirs(ds, exist_ok=True)
        graph = case.model.graph
        for prefix, values, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
            for j, v in enumerate(values):
                name = infos[j].name if j < len(infos) else ""
                if j >= len(infos) or not infos[j].type.HasField("tensor_type"):
                    continue  # sequences, maps and optionals are not written
                # cases with exotic element types already carry TensorProtos
                t = v if isinstance(v, onnx.TensorProto) else numpy_helper.from_array(v, name)
                with open(os.path.join(ds, f"{prefix}_{j}.pb"), "wb") as f:
                    f.write(t.SerializeToString())


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_node_tests.py OUTDIR")
    cases = collect_testcases()
    for c in cases:
        write_case(c, sys.argv[1])
    print(f"wrote {len(cases)} cases to {sys.argv[1]}")


if __name__ == "__main__":
    main()
