"""Shared helpers for kiln's Python test suite.

- :func:`node_tests_dir` / :func:`reference_cases` / :func:`load_case`: the
  ONNX backend node tests (``$KILN_ONNX_NODE_TESTS``, else
  ``<repo>/../shared/onnx-node-tests``) and the cases kiln's reference
  interpreter passes (``crates/kiln-conformance/expected/reference.txt``).
- :func:`make_model` / :func:`model_bytes`: small ONNX models built with
  ``onnx.helper`` at opset 17.
- :func:`assert_outputs_close`: ONNX's runner comparison (rtol 1e-3,
  atol 1e-7 for floats, NaN equal to NaN; exact for integers and bools).

Compiled code goes to kiln's default cache (``$KILN_CACHE_DIR`` or
``~/.cache/kiln``) on purpose, so that CI reuses it between runs.

Test modules import these helpers with ``from conftest import ...`` (pytest's
default ``prepend`` import mode puts this directory on ``sys.path``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

TESTS_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = TESTS_DIR.parent  # python/: the package's source tree
REPO_DIR = PACKAGE_DIR.parent


REFERENCE_LIST = REPO_DIR / "crates" / "kiln-conformance" / "expected" / "reference.txt"

OPSET = 17
IR_VERSION = 8  # the IR version that goes with opset 17

RTOL = 1e-3
ATOL = 1e-7

# The element types kiln exchanges with numpy (python/src/buffer.rs).
KILN_NUMPY_DTYPES = frozenset(
    [
        "float32", "float64", "float16", "bfloat16",
        "int8", "int16", "int32", "int64",
        "uint8", "uint16", "uint32", "uint64",
        "bool",
    ]
)


# --------------------------------------------------------------------------
# ONNX node tests
# --------------------------------------------------------------------------


def node_tests_dir() -> Path:
    """Where the ONNX node tests live: ``$KILN_ONNX_NODE_TESTS``, else
    ``../shared/onnx-node-tests`` beside the repository."""
    env = os.environ.get("KILN_ONNX_NODE_TESTS")
    if env:
        return Path(env)
    return (TESTS_DIR / ".." / ".." / ".." / "shared" / "onnx-node-tests").resolve()


def reference_cases() -> List[str]:
    """The node-test cases kiln's reference interpreter passes, in file order."""
    lines = REFERENCE_LIST.read_text(encoding="utf-8").splitlines()
    return [l.strip() for l in lines if l.strip() and not l.lstrip().startswith("#")]


class NotTensorCase(Exception):
    """A node-test case with an input or output kiln's numpy API cannot
    carry (strings, sequences, optionals, maps, float8, ...)."""


# onnx elem_type -> numpy dtype name, for the types kiln exchanges.
_ELEM_TYPES: Dict[int, str] = {
    TensorProto.FLOAT: "float32",
    TensorProto.DOUBLE: "float64",
    TensorProto.FLOAT16: "float16",
    TensorProto.BFLOAT16: "bfloat16",
    TensorProto.INT8: "int8",
    TensorProto.INT16: "int16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.UINT8: "uint8",
    TensorProto.UINT16: "uint16",
    TensorProto.UINT32: "uint32",
    TensorProto.UINT64: "uint64",
    TensorProto.BOOL: "bool",
}


def _check_value_info(vi: onnx.ValueInfoProto, what: str) -> None:
    """Raises NotTensorCase unless ``vi`` is a tensor of a type kiln exchanges."""
    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        raise NotTensorCase(f"{what} '{vi.name}' is a {kind}, not a tensor")
    elem = vi.type.tensor_type.elem_type
    if elem not in _ELEM_TYPES:
        raise NotTensorCase(
            f"{what} '{vi.name}' has element type {TensorProto.DataType.Name(elem)}, "
            "which kiln's Python API does not exchange with numpy"
        )


def _load_tensor_file(path: Path) -> np.ndarray:
    """The array in a TensorProto ``.pb`` file; NotTensorCase when it is not
    a tensor of a type kiln exchanges with numpy."""
    try:
        t = onnx.load_tensor(str(path))
    except Exception as e:  # a SequenceProto/OptionalProto does not parse as one
        raise NotTensorCase(f"{path.name} is not a TensorProto ({e})") from e
    if t.data_type not in _ELEM_TYPES:
        name = TensorProto.DataType.Name(t.data_type) if t.data_type else "UNDEFINED"
        raise NotTensorCase(f"{path.name} holds {name} elements")
    arr = numpy_helper.to_array(t)
    want = _ELEM_TYPES[t.data_type]
    if want == "bfloat16":
        import ml_dtypes  # needed by onnx itself for bfloat16

        if arr.dtype != np.dtype(ml_dtypes.bfloat16):
            arr = arr.view(ml_dtypes.bfloat16) if arr.dtype.itemsize == 2 else arr.astype(ml_dtypes.bfloat16)
    elif arr.dtype != np.dtype(want):
        raise NotTensorCase(f"{path.name}: onnx gave {arr.dtype} for {want}")
    # (np.ascontiguousarray would turn a 0-d array into a 1-d one)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


class DataSet:
    """One ``test_data_set_<k>``: input arrays and expected output arrays."""

    def __init__(self, inputs: List[np.ndarray], outputs: List[np.ndarray]) -> None:
        self.inputs = inputs
        self.outputs = outputs


class Case:
    """One node-test case: its model and data sets."""

    def __init__(self, dir: Path, model: onnx.ModelProto, input_names: List[str],
                 data_sets: List[DataSet]) -> None:
        self.dir = dir
        self.model_path = dir / "model.onnx"
        self.model = model
        self.input_names = input_names
        self.data_sets = data_sets


def graph_input_names(model: onnx.ModelProto) -> List[str]:
    """The graph inputs a caller feeds: graph.input less the initializers
    (old IR versions list initializers as graph inputs too)."""
    inits = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def load_case(case_dir: Path) -> Case:
    """Loads a node-test case; raises NotTensorCase for one kiln's numpy API
    cannot run (a non-tensor or non-numeric input or output)."""
    model = onnx.load(str(case_dir / "model.onnx"))
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name not in inits:
            _check_value_info(vi, "input")
    for vi in model.graph.output:
        _check_value_info(vi, "output")
    names = graph_input_names(model)
    n_out = len(model.graph.output)
    sets = []
    k = 0
    while (case_dir / f"test_data_set_{k}").is_dir():
        d = case_dir / f"test_data_set_{k}"
        ins = []
        while (d / f"input_{len(ins)}.pb").exists():
            ins.append(_load_tensor_file(d / f"input_{len(ins)}.pb"))
        outs = []
        while (d / f"output_{len(outs)}.pb").exists():
            outs.append(_load_tensor_file(d / f"output_{len(outs)}.pb"))
        # Non-tensor values are not written at all (see the data's README).
        if len(ins) != len(names):
            raise NotTensorCase(
                f"{d.name}: {len(ins)} input files for {len(names)} graph inputs "
                "(a non-tensor input is not written)"
            )
        if len(outs) != n_out:
            raise NotTensorCase(
                f"{d.name}: {len(outs)} output files for {n_out} graph outputs "
                "(a non-tensor output is not written)"
            )
        sets.append(DataSet(ins, outs))
        k += 1
    if not sets:
        raise AssertionError(f"{case_dir}: no test data sets")
    return Case(case_dir, model, names, sets)


def outputs_mismatch(got: np.ndarray, want: np.ndarray) -> Optional[str]:
    """Why ``got`` differs from ``want`` under ONNX's runner tolerances, or
    None when they match: same dtype and shape; floats within
    ``ATOL + RTOL * |want|`` (NaN equals NaN, infinities equal themselves);
    integers and bools exactly."""
    if not isinstance(got, np.ndarray):
        return f"got a {type(got).__name__}, not a numpy array"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape} != expected {want.shape}"
    if got.size == 0:
        return None
    is_float = want.dtype.kind == "f" or want.dtype.name == "bfloat16"
    if is_float:
        g = got.astype(np.float64)
        w = want.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            ok = (np.isnan(g) & np.isnan(w)) | (g == w) | (np.abs(g - w) <= ATOL + RTOL * np.abs(w))
    else:
        ok = got == want
    if ok.all():
        return None
    bad = np.argwhere(~ok)
    i = tuple(int(x) for x in bad[0])
    return (f"{len(bad)} of {got.size} elements differ; first at {list(i)}: "
            f"{got[i]!r} != expected {want[i]!r}")


def assert_outputs_close(got: Sequence[np.ndarray], want: Sequence[np.ndarray], where: str = "") -> None:
    """Asserts every output matches (see :func:`outputs_mismatch`)."""
    assert len(got) == len(want), f"{where}{len(got)} outputs, expected {len(want)}"
    for j, (g, w) in enumerate(zip(got, want)):
        why = outputs_mismatch(g, w)
        assert why is None, f"{where}output {j}: {why}"


# --------------------------------------------------------------------------
# Small ONNX models
# --------------------------------------------------------------------------

Dim = Union[int, str]
ValueSpec = Tuple[str, Union[int, str, np.dtype, type], Sequence[Dim]]


def _elem_type(dtype: Union[int, str, np.dtype, type]) -> int:
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return dtype
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def value_info(name: str, dtype: Union[int, str, np.dtype, type], shape: Sequence[Dim]) -> onnx.ValueInfoProto:
    """A tensor ValueInfoProto; ``dtype`` is a numpy dtype (or name) or an
    onnx TensorProto element type; ``shape`` may hold symbolic names."""
    return helper.make_tensor_value_info(name, _elem_type(dtype), list(shape))


def make_model(
    nodes: Iterable[onnx.NodeProto],
    inputs: Iterable[ValueSpec],
    outputs: Iterable[ValueSpec],
    initializers: Optional[Mapping[str, np.ndarray]] = None,
    opset: int = OPSET,
    check: bool = True,
) -> onnx.ModelProto:
    """An ONNX model (opset ``opset``, IR version 8) of ``nodes``.

    ``inputs``/``outputs`` are ``(name, dtype, shape)`` triples;
    ``initializers`` maps names to numpy arrays (constant weights).
    The model is run through ``onnx.checker`` unless ``check`` is False
    (for deliberately broken models)."""
    inits = [numpy_helper.from_array(np.asarray(v), name=k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(
        list(nodes),
        "test_graph",
        [value_info(*i) for i in inputs],
        [value_info(*o) for o in outputs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="kiln-tests")
    model.ir_version = IR_VERSION
    if check:
        onnx.checker.check_model(model)
    return model


def model_bytes(model: onnx.ModelProto) -> bytes:
    """The serialized model."""
    return model.SerializeToString()


def mlp_model(m: int = 2, k: int = 4, n: int = 3, seed: int = 0) -> Tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    """``relu(x @ w + b)`` with x: float32[m, k] (input "x"), and the
    weights ``w`` (k x n) and ``b`` (n) it holds as initializers."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, n).astype(np.float32)
    model = make_model(
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
            helper.make_node("Add", ["xw", "b"], ["xwb"], name="add"),
            helper.make_node("Relu", ["xwb"], ["y"], name="relu"),
        ],
        [("x", np.float32, [m, k])],
        [("y", np.float32, [m, n])],
        {"w": w, "b": b},
    )
    return model, w, b


def mlp_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's ``relu(x @ w + b)`` in float64, for comparison."""
    return np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b, 0.0)


def two_output_model(shape: Sequence[int] = (2, 3)) -> onnx.ModelProto:
    """Inputs a, b (float32, ``shape``); outputs ``sum = a + b`` and
    ``prod = a * b``."""
    return make_model(
        [
            helper.make_node("Add", ["a", "b"], ["sum"], name="add"),
            helper.make_node("Mul", ["a", "b"], ["prod"], name="mul"),
        ],
        [("a", np.float32, shape), ("b", np.float32, shape)],
        [("sum", np.float32, shape), ("prod", np.float32, shape)],
    )


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mlp():
    """(model, w, b) of :func:`mlp_model` with x: float32[2, 4]."""
    return mlp_model()


@pytest.fixture(scope="session")
def mlp_compiled(mlp):
    """The MLP compiled for the CPU backend (once per session)."""
    import kiln

    return kiln.compile(mlp[0])


@pytest.fixture
def rng():
    """A seeded numpy random generator (deterministic tests)."""
    return np.random.default_rng(1234)
