"""kiln's public Python API: compile, Model (run, call, explain, bench,
random_inputs), export_c, the progress reports and the exceptions.

Every result is checked against numpy computed independently.
"""

from __future__ import annotations

import ctypes
import logging
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import kiln
from conftest import make_model, mlp_model, mlp_reference, model_bytes, two_output_model

RTOL = 1e-5
ATOL = 1e-5


def assert_close(got, want, rtol=RTOL, atol=ATOL):
    """``got`` is a numpy array of ``want``'s shape, close to it."""
    assert isinstance(got, np.ndarray)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def mlp_x():
    """An input for the MLP fixture (float32[2, 4]) whose output has both
    positive and clipped (zero) entries."""
    x = np.random.default_rng(7).standard_normal((2, 4)).astype(np.float32)
    return x


def test_mlp_fixture_is_not_trivial(mlp, mlp_x):
    """The MLP test data exercises both sides of the Relu (guards the other
    tests against comparing all-zero outputs)."""
    _, w, b = mlp
    ref = mlp_reference(mlp_x, w, b)
    assert (ref > 0).any() and (ref == 0).any()


# --------------------------------------------------------------------------
# Compiling from the different sources
# --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["str", "pathlib", "bytes", "bytearray", "memoryview", "modelproto"])
def test_compile_sources(kind, mlp, mlp_x, tmp_path):
    """A model given as a str path, a pathlib.Path, bytes (and bytearray,
    memoryview) or an onnx.ModelProto compiles to the same computation."""
    model, w, b = mlp
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    source = {
        "str": str(path),
        "pathlib": path,
        "bytes": model_bytes(model),
        "bytearray": bytearray(model_bytes(model)),
        "memoryview": memoryview(model_bytes(model)),
        "modelproto": model,
    }[kind]
    m = kiln.compile(source)
    assert isinstance(m, kiln.Model)
    assert m.backend == "cpu" and m.fusion == "apollo"
    assert_close(m(mlp_x), mlp_reference(mlp_x, w, b))


def test_signature(mlp_compiled):
    """``inputs``/``outputs`` are TensorInfo(name, dtype, shape) in graph order."""
    assert mlp_compiled.inputs == [kiln.TensorInfo("x", "float32", (2, 4))]
    assert mlp_compiled.outputs == [kiln.TensorInfo("y", "float32", (2, 3))]
    info = mlp_compiled.inputs[0]
    assert isinstance(info, kiln.TensorInfo)
    assert (info.name, info.dtype, info.shape) == ("x", "float32", (2, 4))
    # the lists are copies: changing one does not change the model
    mlp_compiled.inputs.clear()
    assert len(mlp_compiled.inputs) == 1


def test_two_output_signature_and_repr():
    """A two-input, two-output model lists both, in order; repr names the inputs."""
    m = kiln.compile(two_output_model((2, 3)))
    assert [i.name for i in m.inputs] == ["a", "b"]
    assert m.outputs == [
        kiln.TensorInfo("sum", "float32", (2, 3)),
        kiln.TensorInfo("prod", "float32", (2, 3)),
    ]
    r = repr(m)
    assert "a: float32[2, 3]" in r and "b: float32[2, 3]" in r and "backend=cpu" in r
    assert isinstance(m.summary, str) and m.summary.startswith("cpu")


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------


def test_run_list_dict_and_call(mlp, mlp_compiled, mlp_x):
    """run(list), run(dict) and model(x) give the same, correct result;
    run returns a list even for one output, model(x) the array itself."""
    _, w, b = mlp
    ref = mlp_reference(mlp_x, w, b)
    by_list = mlp_compiled.run([mlp_x])
    by_dict = mlp_compiled.run({"x": mlp_x})
    by_call = mlp_compiled(mlp_x)
    assert isinstance(by_list, list) and len(by_list) == 1
    assert isinstance(by_dict, list) and len(by_dict) == 1
    assert isinstance(by_call, np.ndarray)
    for got in (by_list[0], by_dict[0], by_call):
        assert got.dtype == np.float32
        assert_close(got, ref)


def test_run_accepts_a_tuple(mlp, mlp_compiled, mlp_x):
    """Inputs in order may be any sequence, e.g. a tuple."""
    _, w, b = mlp
    assert_close(mlp_compiled.run((mlp_x,))[0], mlp_reference(mlp_x, w, b))


def test_two_outputs(rng):
    """A two-output model returns a tuple from model(a, b) and a list from run."""
    m = kiln.compile(two_output_model((2, 3)))
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((2, 3)).astype(np.float32)
    out = m(a, b)
    assert isinstance(out, tuple) and len(out) == 2
    assert_close(out[0], a.astype(np.float64) + b)
    assert_close(out[1], a.astype(np.float64) * b)
    s, p = m.run({"b": b, "a": a})  # dict order does not matter
    assert_close(s, a.astype(np.float64) + b)
    assert_close(p, a.astype(np.float64) * b)


def test_bigger_mlp_against_numpy(rng):
    """A larger MatMul+Add+Relu (several tiles per dimension) matches numpy."""
    model, w, b = mlp_model(m=33, k=70, n=45, seed=3)
    m = kiln.compile(model)
    x = rng.standard_normal((33, 70)).astype(np.float32)
    assert_close(m(x), mlp_reference(x, w, b), rtol=1e-4, atol=1e-4)


def test_inputs_are_not_modified(mlp_compiled, mlp_x):
    """Inputs are read in place but never written."""
    x = mlp_x.copy()
    mlp_compiled(x)
    np.testing.assert_array_equal(x, mlp_x)


def test_read_only_input(mlp, mlp_compiled, mlp_x):
    """A read-only array is a valid input (kiln only reads it)."""
    _, w, b = mlp
    x = mlp_x.copy()
    x.flags.writeable = False
    assert_close(mlp_compiled(x), mlp_reference(x, w, b))


def test_outputs_are_fresh_writable_arrays(mlp, mlp_compiled, mlp_x):
    """Each call returns new, writable arrays sharing memory with nothing:
    writing one changes neither a later result nor the input."""
    _, w, b = mlp
    ref = mlp_reference(mlp_x, w, b)
    first = mlp_compiled(mlp_x)
    second = mlp_compiled(mlp_x)
    assert first.flags.writeable and second.flags.writeable
    assert not np.shares_memory(first, second)
    assert not np.shares_memory(first, mlp_x)
    first[...] = 123.0
    assert_close(second, ref)
    assert_close(mlp_compiled(mlp_x), ref)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_outputs_never_alias_inputs_or_weights(backend):
    """An output that is an input (Identity) or a weight is copied: writing
    it changes neither the caller's input nor the next call's result."""
    model = make_model(
        [
            helper.make_node("Identity", ["a"], ["same"], name="id_input"),
            helper.make_node("Identity", ["w"], ["weight"], name="id_weight"),
        ],
        [("a", np.float32, [3])],
        [("same", np.float32, [3]), ("weight", np.float32, [3])],
        {"w": np.array([1.0, 2.0, 3.0], np.float32)},
    )
    m = kiln.compile(model, backend=backend)
    a = np.array([4.0, 5.0, 6.0], np.float32)
    same, weight = m(a)
    np.testing.assert_array_equal(same, a)
    np.testing.assert_array_equal(weight, [1.0, 2.0, 3.0])
    assert not np.shares_memory(same, a)
    same[...] = -1
    weight[...] = -1
    np.testing.assert_array_equal(a, [4.0, 5.0, 6.0])
    same2, weight2 = m(a)
    np.testing.assert_array_equal(same2, [4.0, 5.0, 6.0])
    np.testing.assert_array_equal(weight2, [1.0, 2.0, 3.0])


def test_outputs_outlive_the_model(mlp, mlp_x):
    """An output array stays valid after its model is gone."""
    model, w, b = mlp
    m = kiln.compile(model)
    out = m(mlp_x)
    del m
    import gc

    gc.collect()
    assert_close(out, mlp_reference(mlp_x, w, b))


# --------------------------------------------------------------------------
# Backends, fusion planners, threads
# --------------------------------------------------------------------------


def _conv_model():
    """Conv (3x3, pad 1) + Relu + global average pool on float32[1, 3, 8, 8]:
    several ops the planners fuse differently."""
    rng = np.random.default_rng(11)
    wt = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    model = make_model(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("Sigmoid", ["r"], ["s"], name="sig"),
            helper.make_node("Mul", ["r", "s"], ["m"], name="mul"),
            helper.make_node("GlobalAveragePool", ["m"], ["y"], name="gap"),
        ],
        [("x", np.float32, [1, 3, 8, 8])],
        [("y", np.float32, [1, 4, 1, 1])],
        {"w": wt, "b": bias},
    )
    return model, wt, bias


def _conv_reference(x, wt, bias):
    """numpy's version of :func:`_conv_model` in float64."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, ci, h, w_ = x.shape
    co = wt.shape[0]
    c = np.zeros((n, co, h, w_))
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i:i + h, j:j + w_]  # n, ci, h, w
            c += np.einsum("nchw,oc->nohw", patch, wt[:, :, i, j].astype(np.float64))
    c += bias[None, :, None, None]
    r = np.maximum(c, 0)
    m = r / (1 + np.exp(-r))
    return m.mean(axis=(2, 3), keepdims=True)


@pytest.fixture(scope="module")
def conv():
    return _conv_model()


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_backends_agree_with_numpy(backend, conv):
    """The CPU backend and the reference interpreter both compute the model
    numpy computes."""
    model, wt, bias = conv
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)
    m = kiln.compile(model, backend=backend)
    assert m.backend == backend
    assert_close(m(x), _conv_reference(x, wt, bias), rtol=1e-4, atol=1e-5)


def test_reference_equals_cpu(mlp, mlp_x):
    """backend="reference" gives the CPU backend's result."""
    model, _, _ = mlp
    cpu = kiln.compile(model, backend="cpu")(mlp_x)
    ref = kiln.compile(model, backend="reference")(mlp_x)
    assert_close(cpu, ref)


@pytest.mark.parametrize("fusion", ["none", "tvm", "apollo", "dp"])
def test_fusion_planners(fusion, conv):
    """Every fusion planner gives the numpy result (and the model reports it)."""
    model, wt, bias = conv
    x = np.random.default_rng(6).standard_normal((1, 3, 8, 8)).astype(np.float32)
    m = kiln.compile(model, fusion=fusion)
    assert m.fusion == fusion
    assert_close(m(x), _conv_reference(x, wt, bias), rtol=1e-4, atol=1e-5)


def test_fusion_planner_constants():
    """The documented backend and planner names."""
    assert set(kiln.BACKENDS) == {"cpu", "cuda", "reference"}
    assert set(kiln.FUSION_PLANNERS) == {"apollo", "dp", "tvm", "none"}


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts(threads):
    """threads=1 (and 2) compile and compute the right result."""
    model, w, b = mlp_model(m=64, k=32, n=48, seed=2)
    x = np.random.default_rng(9).standard_normal((64, 32)).astype(np.float32)
    m = kiln.compile(model, threads=threads)
    assert_close(m(x), mlp_reference(x, w, b), rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------
# Symbolic dimensions
# --------------------------------------------------------------------------


def _symbolic_model():
    """y = relu(x @ w) with x: float32['N', 4]."""
    w = np.random.default_rng(4).standard_normal((4, 3)).astype(np.float32)
    model = make_model(
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
            helper.make_node("Relu", ["xw"], ["y"], name="relu"),
        ],
        [("x", np.float32, ["N", 4])],
        [("y", np.float32, ["N", 3])],
        {"w": w},
    )
    return model, w


@pytest.mark.parametrize("n", [1, 5])
def test_input_shapes_binds_a_symbolic_dimension(n):
    """input_shapes fixes the symbolic dimension N; the signature and the
    result follow it."""
    model, w = _symbolic_model()
    m = kiln.compile(model, input_shapes={"x": (n, 4)})
    assert m.inputs == [kiln.TensorInfo("x", "float32", (n, 4))]
    assert m.outputs == [kiln.TensorInfo("y", "float32", (n, 3))]
    x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
    assert_close(m(x), np.maximum(x.astype(np.float64) @ w, 0))


def test_symbolic_dimension_without_input_shapes():
    """Without input_shapes a symbolic dimension is a ModelError (a KilnError
    and a ValueError) naming the input and the dimension."""
    model, _ = _symbolic_model()
    with pytest.raises(kiln.ModelError) as info:
        kiln.compile(model)
    e = info.value
    assert isinstance(e, kiln.KilnError) and isinstance(e, ValueError)
    assert "'x'" in str(e) and "'N'" in str(e)
    assert e.file == "<model bytes>"


def test_input_shapes_negative_dimension():
    """A negative dimension in input_shapes is a ValueError."""
    model, _ = _symbolic_model()
    with pytest.raises(ValueError, match="negative"):
        kiln.compile(model, input_shapes={"x": [-1, 4]})


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_tf32_is_refused_off_cuda(backend):
    """tf32 (TF32 tensor cores) applies to the CUDA backend only: elsewhere
    a ValueError naming the backend, before anything compiles."""
    model, _ = _symbolic_model()
    with pytest.raises(ValueError, match=f"tf32 applies to backend='cuda' only \\(not '{backend}'\\)"):
        kiln.compile(model, backend=backend, tf32=True, input_shapes={"x": [2, 4]})


def test_input_shapes_must_be_a_dict():
    """input_shapes given as a bare shape is a TypeError."""
    model, _ = _symbolic_model()
    with pytest.raises(TypeError, match="dict"):
        kiln.compile(model, input_shapes=[2, 4])


# --------------------------------------------------------------------------
# Bad inputs
# --------------------------------------------------------------------------

_X = np.zeros((2, 4), np.float32)
NAME = "image_in"  # distinctive, so that a message naming it is not an accident

BAD_INPUTS = {
    # name: (inputs, exception class, its built-in base, text the message holds)
    "float64": ([_X.astype(np.float64)], kiln.InputTypeError, TypeError, "float64"),
    "int32-in-dict": ({NAME: _X.astype(np.int32)}, kiln.InputTypeError, TypeError, "int32"),
    "big-endian": ([_X.astype(">f4")], kiln.InputTypeError, TypeError, "float32"),
    "wrong-shape": ([np.zeros((3, 4), np.float32)], kiln.InputError, ValueError, "[3, 4]"),
    "wrong-rank": ([np.zeros((8,), np.float32)], kiln.InputError, ValueError, "[2, 4]"),
    "unknown-name": ({NAME: _X, "q": _X}, kiln.InputError, ValueError, "'q'"),
    "missing-name": ({}, kiln.InputError, ValueError, "missing"),
    "too-many": ([_X, _X], kiln.InputError, ValueError, "2 were given"),
    "too-few": ([], kiln.InputError, ValueError, "0 were given"),
    "transposed-view": ([np.zeros((4, 2), np.float32).T], kiln.InputError, ValueError, "contiguous"),
    "strided-slice": ([np.zeros((4, 4), np.float32)[::2]], kiln.InputError, ValueError, "contiguous"),
    "misaligned": (
        [np.zeros(33, np.uint8)[1:].view(np.float32).reshape(2, 4)],
        kiln.InputError, ValueError, "aligned",
    ),
    "string": (["hello"], kiln.InputTypeError, TypeError, "float32"),
    "object": ([object()], kiln.InputTypeError, TypeError, "object"),
    "none-value": ([None], kiln.InputTypeError, TypeError, "NoneType"),
}


@pytest.fixture(scope="module")
def relu_model_bytes():
    """``out = relu(image_in)`` with image_in: float32[2, 4], serialized."""
    return make_model(
        [helper.make_node("Relu", [NAME], ["out"], name="relu")],
        [(NAME, np.float32, [2, 4])],
        [("out", np.float32, [2, 4])],
    ).SerializeToString()


@pytest.fixture(scope="module")
def relu_model(relu_model_bytes):
    """The compiled ``relu_model_bytes``."""
    return kiln.compile(relu_model_bytes)


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_inputs(case, relu_model):
    """Each bad input raises the documented exception, which is a KilnError
    and the matching built-in exception, and names the input."""
    inputs, cls, builtin, text = BAD_INPUTS[case]
    with pytest.raises(cls) as info:
        relu_model.run(inputs)
    e = info.value
    assert type(e) is cls
    assert isinstance(e, kiln.KilnError)
    assert isinstance(e, kiln.InputError)  # InputTypeError is an InputError too
    assert isinstance(e, builtin)
    assert NAME in str(e), f"the message does not name the input: {e}"
    assert text in str(e), f"{text!r} not in {str(e)!r}"


@pytest.mark.parametrize("inputs", [_X, "x", None, 3.0], ids=["bare-array", "str", "None", "float"])
def test_inputs_not_a_list_or_dict(inputs, relu_model):
    """Inputs given as something other than a list or dict (e.g. a bare
    array) raise InputTypeError (a TypeError and a KilnError)."""
    with pytest.raises(kiln.InputTypeError) as info:
        relu_model.run(inputs)
    assert isinstance(info.value, TypeError) and isinstance(info.value, kiln.KilnError)
    assert "dict" in str(info.value) and "list" in str(info.value)


def test_call_with_wrong_count(relu_model):
    """model() with no argument is an InputError naming the input."""
    with pytest.raises(kiln.InputError, match=NAME):
        relu_model()


def test_model_still_works_after_bad_inputs(relu_model):
    """A rejected call leaves the model usable."""
    for inputs, cls, _, _ in BAD_INPUTS.values():
        with pytest.raises(cls):
            relu_model.run(inputs)
    x = np.array([[-1, 2, -3, 4], [5, -6, 7, -8]], np.float32)
    np.testing.assert_array_equal(relu_model(x), np.maximum(x, 0))


# --------------------------------------------------------------------------
# Bad models and arguments
# --------------------------------------------------------------------------


def test_garbage_bytes():
    """Bytes that are not an ONNX protobuf: ModelError with file "<model bytes>"."""
    with pytest.raises(kiln.ModelError) as info:
        kiln.compile(b"garbage")
    e = info.value
    assert isinstance(e, kiln.KilnError) and isinstance(e, ValueError)
    assert e.file == "<model bytes>"


def test_empty_bytes():
    """Empty bytes: ModelError with file "<model bytes>"."""
    with pytest.raises(kiln.ModelError) as info:
        kiln.compile(b"")
    assert info.value.file == "<model bytes>"


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_truncated_model_bytes(fraction, mlp):
    """A real model cut short: ModelError with file "<model bytes>"."""
    data = model_bytes(mlp[0])
    with pytest.raises(kiln.ModelError) as info:
        kiln.compile(data[: int(len(data) * fraction)])
    assert info.value.file == "<model bytes>"


def test_corrupt_model_file(tmp_path):
    """A file that is not an ONNX model: ModelError whose file is the path."""
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x00\x01 this is not a protobuf \xff\xfe")
    with pytest.raises(kiln.ModelError) as info:
        kiln.compile(path)
    assert info.value.file == str(path)


def test_missing_file(tmp_path):
    """A path to no file: ModelError whose file is the path, named in the message."""
    path = tmp_path / "does_not_exist.onnx"
    with pytest.raises(kiln.ModelError) as info:
        kiln.compile(str(path))
    e = info.value
    assert isinstance(e, ValueError) and isinstance(e, kiln.KilnError)
    assert e.file == str(path)
    assert str(path) in str(e)


def _frobnicate_model(node_name: str, opset: int = 17):
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="first"),
            helper.make_node("Frobnicate", ["r"], ["y"], name=node_name),
        ],
        [("x", np.float32, [2])],
        [("y", np.float32, [2])],
        opset=opset,
        check=False,
    )
    return model


@pytest.mark.parametrize("opset", [13, 17])
def test_unknown_op(opset):
    """An op that does not exist: UnsupportedError (a NotImplementedError)
    with op, opset and node set."""
    with pytest.raises(kiln.UnsupportedError) as info:
        kiln.compile(_frobnicate_model("frob_node", opset))
    e = info.value
    assert isinstance(e, kiln.KilnError) and isinstance(e, NotImplementedError)
    assert e.op == "Frobnicate"
    assert e.opset == opset
    assert e.node == "frob_node"
    assert e.file == "<model bytes>"
    assert "Frobnicate" in str(e)


def test_unknown_op_in_unnamed_node():
    """An unnamed node with an unknown op: UnsupportedError with op and opset
    (the node has no name to report)."""
    with pytest.raises(kiln.UnsupportedError) as info:
        kiln.compile(_frobnicate_model(""))
    e = info.value
    assert e.op == "Frobnicate" and e.opset == 17
    assert e.node is None


def test_unknown_op_from_file(tmp_path):
    """The same from a file: .file is its path."""
    path = tmp_path / "frob.onnx"
    onnx.save(_frobnicate_model("frob_node"), str(path))
    with pytest.raises(kiln.UnsupportedError) as info:
        kiln.compile(path)
    assert info.value.file == str(path)
    assert info.value.node == "frob_node"


def test_inconsistent_shapes():
    """Add of [2, 3] and [4, 5]: ModelError naming the node, with node, op
    and opset set."""
    model = make_model(
        [helper.make_node("Add", ["a", "b"], ["c"], name="bad_add")],
        [("a", np.float32, [2, 3]), ("b", np.float32, [4, 5])],
        [("c", np.float32, [2, 3])],
        check=False,
    )
    with pytest.raises(kiln.ModelError) as info:
        kiln.compile(model)
    e = info.value
    assert isinstance(e, kiln.KilnError) and isinstance(e, ValueError)
    assert e.node == "bad_add"
    assert e.op == "Add"
    assert e.opset == 17
    assert "bad_add" in str(e)


def test_bad_reshape():
    """A Reshape to a shape of another element count: ModelError naming the node."""
    model = make_model(
        [helper.make_node("Reshape", ["d", "s"], ["o"], name="the_reshape")],
        [("d", np.float32, [6])],
        [("o", np.float32, [4, 2])],
        {"s": np.array([4, 2], np.int64)},
        check=False,
    )
    with pytest.raises(kiln.ModelError) as info:
        kiln.compile(model)
    assert info.value.node == "the_reshape"
    assert "the_reshape" in str(info.value)


@pytest.mark.parametrize(
    "kwargs, exc, text",
    [
        ({"backend": "tpu"}, ValueError, "tpu"),
        ({"fusion": "magic"}, ValueError, "magic"),
        ({"threads": 0}, ValueError, "threads"),
        ({"threads": -2}, ValueError, "threads"),
        ({"threads": 1.5}, ValueError, "threads"),
    ],
)
def test_bad_arguments(kwargs, exc, text, mlp):
    """Unknown backend or planner, non-positive thread count: ValueError."""
    with pytest.raises(exc, match=text):
        kiln.compile(mlp[0], **kwargs)


@pytest.mark.parametrize("source", [123, None, 4.5, ["model.onnx"]], ids=["int", "None", "float", "list"])
def test_model_of_wrong_type(source):
    """A model that is not a path, bytes or ModelProto: TypeError."""
    with pytest.raises(TypeError, match="model must be"):
        kiln.compile(source)


def _cuda_driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_cuda_driver_present(), reason="a CUDA driver is present")
def test_cuda_without_a_driver(mlp):
    """backend="cuda" without a CUDA driver: BackendUnavailableError (a
    RuntimeError and a KilnError) that says what is missing."""
    with pytest.raises(kiln.BackendUnavailableError) as info:
        kiln.compile(mlp[0], backend="cuda")
    e = info.value
    assert isinstance(e, kiln.KilnError) and isinstance(e, RuntimeError)
    assert "libcuda" in str(e)


def test_run_error_on_out_of_range_index():
    """A Gather index read from data out of range: RunError naming the node,
    on both backends; a valid call still works afterwards."""
    model = make_model(
        [helper.make_node("Gather", ["d", "i"], ["o"], name="the_gather", axis=0)],
        [("d", np.float32, [5]), ("i", np.int64, [2])],
        [("o", np.float32, [2])],
    )
    d = np.arange(5, dtype=np.float32) * 10
    for backend in ("cpu", "reference"):
        m = kiln.compile(model, backend=backend)
        np.testing.assert_array_equal(m(d, np.array([1, -1])), [10.0, 40.0])
        for bad in ([1, 7], [-9, 0]):
            with pytest.raises(kiln.RunError) as info:
                m(d, np.array(bad))
            e = info.value
            assert isinstance(e, RuntimeError) and isinstance(e, kiln.KilnError)
            assert e.node == "the_gather" and e.op == "Gather"
        np.testing.assert_array_equal(m(d, np.array([4, 0])), [40.0, 0.0])


def test_error_classes():
    """The documented hierarchy: every error is a KilnError and the matching
    built-in exception."""
    assert issubclass(kiln.ModelError, (kiln.KilnError, ValueError))
    assert issubclass(kiln.ModelError, ValueError)
    assert issubclass(kiln.UnsupportedError, NotImplementedError)
    assert issubclass(kiln.CompileError, RuntimeError)
    assert issubclass(kiln.RunError, RuntimeError)
    assert issubclass(kiln.BackendUnavailableError, RuntimeError)
    assert issubclass(kiln.InputError, ValueError)
    assert issubclass(kiln.InputTypeError, TypeError) and issubclass(kiln.InputTypeError, kiln.InputError)
    for cls in (kiln.ModelError, kiln.UnsupportedError, kiln.CompileError, kiln.RunError,
                kiln.BackendUnavailableError, kiln.InputError, kiln.InputTypeError):
        assert issubclass(cls, kiln.KilnError)
    e = kiln.ModelError("msg", file="f.onnx", node="n", op="Add", opset=17)
    assert (e.message, e.file, e.node, e.op, e.opset) == ("msg", "f.onnx", "n", "Add", 17)
    assert str(e) == "msg"


# --------------------------------------------------------------------------
# No panic reaches Python
# --------------------------------------------------------------------------


def _compile_and_run_or_kiln_error(data: bytes) -> str:
    """Compiles ``data`` on the reference backend and runs it on random
    inputs; returns "ok" or the KilnError class name. Anything else (a
    pyo3 PanicException is a BaseException) propagates and fails the test."""
    try:
        m = kiln.compile(data, backend="reference")
        m.run(m.random_inputs())
        return "ok"
    except kiln.KilnError as e:
        return type(e).__name__


def test_no_panic_on_every_truncation(mlp):
    """Every prefix of a real model compiles or raises a KilnError (mostly
    ModelError), never a panic."""
    data = model_bytes(mlp[0])
    outcomes = [_compile_and_run_or_kiln_error(data[:n]) for n in range(len(data))]
    assert outcomes[0] == "ModelError"  # empty
    assert outcomes.count("ModelError") > len(data) * 0.9


def test_no_panic_on_corrupted_bytes(mlp):
    """300 copies of a real model with 3 random bytes changed (fixed seed)
    each compile and run, or raise a KilnError: never a panic."""
    data = model_bytes(mlp[0])
    rng = np.random.default_rng(2024)
    outcomes = []
    for _ in range(300):
        b = bytearray(data)
        for _ in range(3):
            b[int(rng.integers(len(b)))] = int(rng.integers(256))
        outcomes.append(_compile_and_run_or_kiln_error(bytes(b)))
    assert set(outcomes) <= {"ok", "ModelError", "UnsupportedError", "InputTypeError", "RunError"}
    assert "ModelError" in outcomes


def test_errors_are_kiln_errors_not_panics(mlp, mlp_compiled, tmp_path):
    """The errors of the cases above, together: each is a KilnError (a
    PanicException would be a BaseException and escape pytest.raises)."""
    model = mlp[0]
    bad_op = _frobnicate_model("f")
    calls = [
        lambda: kiln.compile(b"garbage"),
        lambda: kiln.compile(model_bytes(model)[:50]),
        lambda: kiln.compile(tmp_path / "missing.onnx"),
        lambda: kiln.compile(bad_op),
        lambda: kiln.compile(bad_op, backend="reference"),
        lambda: mlp_compiled.run([np.zeros((2, 4))]),
        lambda: mlp_compiled.run([np.zeros((1, 4), np.float32)]),
        lambda: mlp_compiled.run({"nope": 1}),
        lambda: mlp_compiled.run(np.zeros((2, 4), np.float32)),
    ]
    if not _cuda_driver_present():
        calls.append(lambda: kiln.compile(model, backend="cuda"))
    for call in calls:
        with pytest.raises(kiln.KilnError):
            call()


# --------------------------------------------------------------------------
# explain, bench, random_inputs
# --------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_explain(backend, mlp, tmp_path):
    """explain() returns an HTML page describing the 3 nodes; with a path
    it also writes the page there."""
    m = kiln.compile(mlp[0], backend=backend, fusion="none")
    html = m.explain()
    assert isinstance(html, str)
    assert "<html" in html.lower() and "</html>" in html.lower()
    assert "3 primitive nodes" in html and "3 kernels" in html  # fusion none: one kernel each
    for node in ("matmul (MatMul)", "add (Add)", "relu (Relu)"):
        assert node in html
    out = tmp_path / "report.html"
    assert m.explain(out) == html
    assert out.read_text(encoding="utf-8") == html
    out2 = tmp_path / "report2.html"
    m.explain(str(out2))
    assert out2.read_text(encoding="utf-8") == html


def test_explain_fused(mlp):
    """With apollo the three MLP nodes are fewer kernels than nodes."""
    html = kiln.compile(mlp[0], fusion="apollo").explain()
    assert "3 primitive nodes" in html
    assert "3 kernels" not in html


def test_bench(mlp_compiled):
    """bench(runs=5, warmup=1) times 5 runs: 0 < min <= median <= max and
    min <= mean <= max."""
    r = mlp_compiled.bench(runs=5, warmup=1)
    assert isinstance(r, kiln.BenchResult)
    assert r.runs == 5
    assert 0 < r.min_ms <= r.median_ms <= r.max_ms
    assert r.min_ms <= r.mean_ms <= r.max_ms


def test_bench_with_inputs(mlp_compiled, mlp_x):
    """bench on given inputs; bad counts are a ValueError; bad inputs the
    input errors."""
    r = mlp_compiled.bench(runs=2, warmup=0, inputs=[mlp_x])
    assert r.runs == 2 and r.min_ms > 0
    with pytest.raises(ValueError):
        mlp_compiled.bench(runs=0)
    with pytest.raises(ValueError):
        mlp_compiled.bench(runs=1, warmup=-1)
    with pytest.raises(kiln.InputTypeError):
        mlp_compiled.bench(runs=1, warmup=0, inputs=[mlp_x.astype(np.float64)])


def _mixed_model():
    """Inputs f: float32[2, 3], i: int64[4], c: bool[5], h: float16[2];
    outputs their Identity."""
    return make_model(
        [helper.make_node("Identity", [n], [n + "_out"]) for n in "fich"],
        [("f", np.float32, [2, 3]), ("i", np.int64, [4]), ("c", np.bool_, [5]), ("h", np.float16, [2])],
        [("f_out", np.float32, [2, 3]), ("i_out", np.int64, [4]), ("c_out", np.bool_, [5]),
         ("h_out", np.float16, [2])],
    )


def test_random_inputs():
    """random_inputs() has the declared dtypes and shapes, values in the
    documented ranges, is C-contiguous, and is reproducible by seed."""
    m = kiln.compile(_mixed_model())
    ins = m.random_inputs()
    assert [(a.dtype.name, a.shape) for a in ins] == [(i.dtype, i.shape) for i in m.inputs]
    assert [a.dtype.name for a in ins] == ["float32", "int64", "bool", "float16"]
    f, i, c, h = ins
    assert ((f >= -1) & (f < 1)).all() and ((h >= -1) & (h <= 1)).all()
    assert ((i >= 0) & (i < 10)).all()
    assert all(a.flags.c_contiguous for a in ins)
    for a, b in zip(ins, m.random_inputs()):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(ins[0], m.random_inputs(seed=1)[0])
    # and they run: identity returns them
    for a, out in zip(ins, m.run(ins)):
        np.testing.assert_array_equal(out, a)
        assert out.dtype == a.dtype


# --------------------------------------------------------------------------
# Progress reports
# --------------------------------------------------------------------------


def test_progress_callback(mlp):
    """progress=cb receives (stage, message) string pairs, "import" then
    "compile"; the message of "import" counts the nodes."""
    events = []
    m = kiln.compile(mlp[0], progress=lambda stage, message: events.append((stage, message)))
    assert all(isinstance(s, str) and isinstance(msg, str) for s, msg in events)
    stages = [s for s, _ in events]
    assert "import" in stages and "compile" in stages
    assert stages.index("import") < stages.index("compile")
    assert "3 nodes" in dict(events)["import"]
    x = np.ones((2, 4), np.float32)
    assert_close(m(x), mlp_reference(x, mlp[1], mlp[2]))


def test_progress_callback_reference_backend(mlp):
    """The reference backend reports the same stages."""
    events = []
    kiln.compile(mlp[0], backend="reference", progress=lambda s, msg: events.append(s))
    assert events == ["import", "compile"]


def test_progress_logging(mlp, caplog):
    """Without a callback the stages go to the "kiln" logger at INFO."""
    with caplog.at_level(logging.INFO, logger="kiln"):
        kiln.compile(mlp[0])
    records = [r for r in caplog.records if r.name == "kiln"]
    assert all(r.levelno == logging.INFO for r in records)
    messages = [r.getMessage() for r in records]
    assert any(msg.startswith("import:") for msg in messages), messages
    assert any(msg.startswith("compile:") for msg in messages), messages


def test_progress_callback_replaces_logging(mlp, caplog):
    """With a callback nothing goes to the logger."""
    with caplog.at_level(logging.INFO, logger="kiln"):
        kiln.compile(mlp[0], progress=lambda s, m: None)
    assert [r for r in caplog.records if r.name == "kiln"] == []


def test_raising_progress_callback(mlp, monkeypatch):
    """A callback that raises does not break compilation: its exception is
    reported as unraisable and the model works."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))

    def boom(stage, message):
        raise RuntimeError(f"boom in {stage}")

    m = kiln.compile(mlp[0], progress=boom)
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    assert_close(m(x), mlp_reference(x, mlp[1], mlp[2]))
    assert [str(e) for e in seen] == ["boom in import", "boom in compile"]


# --------------------------------------------------------------------------
# export_c
# --------------------------------------------------------------------------


def _have_c_toolchain() -> bool:
    return shutil.which("make") is not None and shutil.which("cc") is not None


def test_export_c_files(mlp, tmp_path):
    """export_c returns the files it wrote, all existing, with a header, the
    example main.c and a Makefile, named after ``name``."""
    out = tmp_path / "out"
    files = kiln.export_c(mlp[0], out, name="m")
    assert files and all(isinstance(f, pathlib.Path) for f in files)
    assert all(f.is_file() for f in files)
    names = {f.name for f in files}
    assert {"m.h", "m.c", "main.c", "Makefile", "m.weights.bin"} <= names
    header = (out / "m.h").read_text()
    assert "m_run" in header and '#define M_INPUT_0_NAME "x"' in header
    assert "#define M_INPUT_0_SHAPE {2, 4}" in header and "#define M_OUTPUT_0_SHAPE {2, 3}" in header


def test_export_c_bad_arguments(mlp, tmp_path):
    """Unknown planner or weights mode: ValueError; a bad model: ModelError."""
    with pytest.raises(ValueError):
        kiln.export_c(mlp[0], tmp_path / "a", fusion="magic")
    with pytest.raises(ValueError):
        kiln.export_c(mlp[0], tmp_path / "b", weights="nowhere")
    with pytest.raises(kiln.ModelError):
        kiln.export_c(b"garbage", tmp_path / "c")


def _read_npy(path: pathlib.Path) -> np.ndarray:
    return np.load(path, allow_pickle=False)


@pytest.mark.skipif(not _have_c_toolchain(), reason="needs make and cc")
@pytest.mark.parametrize("weights, openmp", [("file", True), ("embed", False)])
def test_export_c_builds_and_runs(weights, openmp, tmp_path):
    """The exported library builds with its Makefile, and its example
    program computes numpy's result on an .npy input."""
    model, w, b = mlp_model(m=3, k=5, n=4, seed=8)
    out = tmp_path / "out"
    kiln.export_c(model, out, name="m", weights=weights, openmp=openmp, threads=1)
    env = dict(os.environ)
    if not openmp:
        env["OPENMP"] = ""
    build = subprocess.run(["make", "-C", str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert build.returncode == 0, build.stdout + build.stderr
    exe = out / "m_main"
    assert exe.is_file()
    x = np.random.default_rng(12).standard_normal((3, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    results = tmp_path / "results"
    results.mkdir()
    run = subprocess.run([str(exe), str(tmp_path / "x.npy"), str(results)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    y = _read_npy(results / "output_0.npy")
    assert y.dtype == np.float32
    assert_close(y, mlp_reference(x, w, b))


# --------------------------------------------------------------------------
# Element types, scalars, empty tensors
# --------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_bool_and_int64_round_trip(backend, rng):
    """bool and int64 inputs and outputs: Where, Not, Cast to float32 and
    from float32 to int64."""
    model = make_model(
        [
            helper.make_node("Where", ["c", "x", "y"], ["z"]),
            helper.make_node("Not", ["c"], ["nc"]),
            helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["f"], ["fi"], to=TensorProto.INT64),
            helper.make_node("Greater", ["f", "zero"], ["pos"]),
        ],
        [("c", np.bool_, [6]), ("x", np.int64, [6]), ("y", np.int64, [6]), ("f", np.float32, [6])],
        [("z", np.int64, [6]), ("nc", np.bool_, [6]), ("xf", np.float32, [6]),
         ("fi", np.int64, [6]), ("pos", np.bool_, [6])],
        {"zero": np.array(0, np.float32)},
    )
    m = kiln.compile(model, backend=backend)
    assert [o.dtype for o in m.outputs] == ["int64", "bool", "float32", "int64", "bool"]
    c = np.array([True, False, True, False, False, True])
    x = np.array([1, 2**40, -3, 4, 5, -(2**62)], np.int64)
    y = np.array([-1, -2, 3, -4, 2**50, 6], np.int64)
    f = np.array([1.5, -2.5, 0.0, 7.9, -0.2, 100.0], np.float32)
    z, nc, xf, fi, pos = m(c, x, y, f)
    for got, want in [(z, np.where(c, x, y)), (nc, ~c), (xf, x.astype(np.float32)),
                      (fi, f.astype(np.int64)), (pos, f > 0)]:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "int16", "int32",
                                   "uint8", "uint16", "uint32", "uint64"])
def test_other_element_types(dtype):
    """Add round-trips the other numpy element types kiln exchanges."""
    model = make_model([helper.make_node("Add", ["a", "b"], ["c"])],
                       [("a", dtype, [5]), ("b", dtype, [5])], [("c", dtype, [5])])
    m = kiln.compile(model)
    assert m.inputs[0].dtype == dtype and m.outputs[0].dtype == dtype
    a = np.array([0, 1, 2, 3, 4]).astype(dtype)
    b = np.array([5, 6, 7, 8, 9]).astype(dtype)
    out = m(a, b)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, a + b)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_scalar_input(backend):
    """A 0-d input (float32[]) broadcasts against a vector; a 0-d output
    comes back as a 0-d array."""
    model = make_model(
        [
            helper.make_node("Mul", ["s", "v"], ["sv"]),
            helper.make_node("ReduceSum", ["sv"], ["total"], keepdims=0),
        ],
        [("s", np.float32, []), ("v", np.float32, [4])],
        [("sv", np.float32, [4]), ("total", np.float32, [])],
    )
    m = kiln.compile(model, backend=backend)
    assert m.inputs[0] == kiln.TensorInfo("s", "float32", ())
    assert m.outputs[1] == kiln.TensorInfo("total", "float32", ())
    s = np.array(2.5, np.float32)
    v = np.array([1.0, -2.0, 3.0, 4.0], np.float32)
    sv, total = m(s, v)
    assert sv.shape == (4,) and total.shape == ()
    np.testing.assert_allclose(sv, 2.5 * v)
    np.testing.assert_allclose(total, (2.5 * v).sum())
    # a 1-element array is not a scalar
    with pytest.raises(kiln.InputError, match="'s'"):
        m(np.array([2.5], np.float32), v)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_empty_input(backend):
    """A 0-sized input (float32[0, 3]) runs: Relu gives a [0, 3] output and
    ReduceSum over it gives 0."""
    model = make_model(
        [
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("ReduceSum", ["a"], ["s"], keepdims=0),
        ],
        [("a", np.float32, [0, 3])],
        [("r", np.float32, [0, 3]), ("s", np.float32, [])],
    )
    m = kiln.compile(model, backend=backend)
    r, s = m(np.zeros((0, 3), np.float32))
    assert r.shape == (0, 3) and r.dtype == np.float32
    assert s.shape == () and float(s) == 0.0


def test_empty_input_bound_by_input_shapes():
    """A symbolic batch bound to 0 through input_shapes runs too."""
    model, w = _symbolic_model()
    m = kiln.compile(model, input_shapes={"x": [0, 4]})
    y = m(np.zeros((0, 4), np.float32))
    assert y.shape == (0, 3)


def test_version():
    """kiln exposes a version string."""
    assert isinstance(kiln.__version__, str) and kiln.__version__.count(".") >= 1


def test_python_lists_take_the_declared_type(relu_model):
    """Nested lists and numbers are converted to the declared element type."""
    x = [[-1.0, 2.0, -3.0, 4.0], [5.0, -6.0, 7.0, -8.0]]
    (y,) = relu_model.run([x])
    np.testing.assert_array_equal(y, np.maximum(np.array(x, np.float32), 0))


def test_random_inputs_and_bench_keep_scalar_inputs():
    """0-d inputs stay 0-d in random_inputs(), so bench() runs."""
    model = make_model(
        [helper.make_node("Mul", ["s", "v"], ["sv"])],
        [("s", np.float32, []), ("v", np.float32, [4])],
        [("sv", np.float32, [4])],
    )
    m = kiln.compile(model)
    assert [a.shape for a in m.random_inputs()] == [(), (4,)]
    assert m.bench(runs=2, warmup=0).runs == 2


def test_input_shapes_must_name_inputs(relu_model_bytes):
    with pytest.raises(kiln.ModelError) as info:
        kiln.compile(relu_model_bytes, input_shapes={"nope": [2, 4]})
    assert "'nope'" in str(info.value) and NAME in str(info.value)


def test_symbolic_dimension_error_says_how_to_bind_it_in_python():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [("x", np.float32, ["N", 4])],
        [("y", np.float32, ["N", 4])],
    )
    with pytest.raises(kiln.ModelError) as info:
        kiln.compile(model)
    assert "input_shapes={'x'" in str(info.value)


@pytest.mark.parametrize("threads", [0, -1, True, 1.5])
def test_bad_thread_counts(relu_model_bytes, threads, tmp_path):
    with pytest.raises(ValueError):
        kiln.compile(relu_model_bytes, threads=threads)
    with pytest.raises(ValueError):
        kiln.export_c(relu_model_bytes, tmp_path, threads=threads)


@pytest.mark.parametrize("name", ["my-model", "1abc", "main", ""])
def test_bad_export_names(relu_model_bytes, name, tmp_path):
    with pytest.raises(ValueError) as info:
        kiln.export_c(relu_model_bytes, tmp_path, name=name)
    assert not isinstance(info.value, kiln.KilnError)


def test_a_directory_is_not_a_model(tmp_path):
    with pytest.raises(kiln.ModelError) as info:
        kiln.compile(tmp_path)
    assert "directory" in str(info.value) and info.value.file == str(tmp_path)
