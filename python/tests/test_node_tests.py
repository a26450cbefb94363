"""The ONNX backend node tests through kiln's Python API on the CPU backend.

Parametrized over the cases kiln's reference interpreter passes
(``crates/kiln-conformance/expected/reference.txt``): each must pass through
``kiln.compile(..., backend="cpu")`` too, since the CPU backend leaves the
nodes it cannot compile to the interpreter. An ``UnsupportedError`` is
therefore a failure, not a skip.

Cases whose inputs or outputs kiln's numpy API cannot carry (strings,
sequences, optionals, maps, float8/int4 elements) are skipped with the
reason.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import pytest

import kiln
from conftest import NotTensorCase, load_case, node_tests_dir, outputs_mismatch, reference_cases

NODE_TESTS = node_tests_dir()
CASES = reference_cases()


@pytest.mark.skipif(not NODE_TESTS.is_dir(), reason=f"ONNX node tests not found at {NODE_TESTS}")
@pytest.mark.parametrize("case", CASES)
def test_node_case_cpu(case: str) -> None:
    """Every data set of ``case`` run on the CPU backend (one thread) matches
    the expected outputs within ONNX's runner tolerances."""
    case_dir = NODE_TESTS / case
    assert (case_dir / "model.onnx").is_file(), f"{case}: listed in reference.txt but missing"
    try:
        c = load_case(case_dir)
    except NotTensorCase as e:
        pytest.skip(f"not a numeric-tensor case: {e}")

    # kiln compiles for static shapes: one compile per distinct set of input
    # shapes among the data sets (the same compile for all, in practice).
    compiled: Dict[Tuple[Tuple[int, ...], ...], kiln.Model] = {}
    for k, ds in enumerate(c.data_sets):
        key = tuple(a.shape for a in ds.inputs)
        if key not in compiled:
            shapes = {n: list(a.shape) for n, a in zip(c.input_names, ds.inputs)}
            compiled[key] = kiln.compile(c.model_path, backend="cpu", threads=1, input_shapes=shapes)
        model = compiled[key]
        names = [i.name for i in model.inputs]
        assert len(names) == len(ds.inputs), (
            f"data set {k}: kiln expects {len(names)} inputs {names}, the data set has {len(ds.inputs)}"
        )
        got = model.run(dict(zip(names, ds.inputs)))
        assert len(got) == len(ds.outputs), (
            f"data set {k}: {len(got)} outputs, expected {len(ds.outputs)}"
        )
        for j, (g, w) in enumerate(zip(got, ds.outputs)):
            why = outputs_mismatch(g, w)
            assert why is None, f"data set {k}, output {j} ({model.outputs[j].name}): {why}"
