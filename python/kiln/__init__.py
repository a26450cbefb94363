"""kiln: a deep-learning compiler for ONNX models and PyTorch modules.

Three ways in:

- :func:`compile` an ONNX model (a path, bytes or an ``onnx.ModelProto``)
  into a :class:`Model` and run it on numpy arrays;
- ``torch.compile(module, backend="kiln")`` (see :mod:`kiln.torch_backend`);
- :func:`export_c` a model as a standalone C library.

Compilation reports its progress through the ``logging`` logger ``"kiln"``
(level INFO) or a ``progress(stage, message)`` callback.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _kiln
from ._model import BenchResult, Model, TensorInfo
from .errors import (
    BackendUnavailableError,
    CompileError,
    InputError,
    InputTypeError,
    KilnError,
    ModelError,
    RunError,
    UnsupportedError,
)

__version__: str = _kiln.__version__

__all__ = [
    "compile",
    "export_c",
    "Model",
    "TensorInfo",
    "BenchResult",
    "KilnError",
    "ModelError",
    "UnsupportedError",
    "CompileError",
    "RunError",
    "BackendUnavailableError",
    "InputError",
    "InputTypeError",
    "BACKENDS",
    "FUSION_PLANNERS",
]

BACKENDS: Tuple[str, ...] = ("cpu", "cuda", "reference")
"""``cpu``: generated C, compiled and cached; ``cuda``: NVIDIA GPUs through
NVRTC; ``reference``: kiln's interpreter (slow, needs no compiler)."""

FUSION_PLANNERS: Tuple[str, ...] = ("apollo", "dp", "tvm", "none")
"""``apollo`` (default): APOLLO's partition-based fusion; ``dp``: the
mapping-rules DP search; ``tvm``: TVM-style greedy fusion; ``none``: one
kernel per op."""

ModelSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Any]
Progress = Callable[[str, str], None]

_log = logging.getLogger("kiln")


def _log_progress(stage: str, message: str) -> None:
    _log.info("%s: %s", stage, message)


def _source(model: ModelSource) -> Tuple[Optional[str], Optional[bytes]]:
    """(path, bytes) of a model given as a path, bytes or an onnx.ModelProto."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model), None
    if isinstance(model, (bytes, bytearray, memoryview)):
        return None, bytes(model)
    serialize = getattr(model, "SerializeToString", None)
    if callable(serialize):
        return None, serialize()
    raise TypeError(
        f"model must be a path, bytes or an onnx.ModelProto, got {type(model).__name__}"
    )


def _shapes(input_shapes: Optional[Mapping[str, Sequence[int]]]) -> Dict[str, List[int]]:
    if input_shapes is None:
        return {}
    if not isinstance(input_shapes, Mapping):
        raise TypeError("input_shapes must be a dict: input name -> shape")
    out = {}
    for name, shape in input_shapes.items():
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims):
            raise ValueError(f"input_shapes['{name}'] has a negative dimension: {dims}")
        out[str(name)] = dims
    return out


def _check_threads(threads: Optional[int]) -> None:
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer, got {threads!r}")


def _choice(value: str, allowed: Tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {what} '{value}' (expected one of: {', '.join(allowed)})")
    return value


def compile(
    model: ModelSource,
    *,
    backend: str = "cpu",
    fusion: str = "apollo",
    threads: Optional[int] = None,
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    cache_dir: Union[str, "os.PathLike[str]", None] = None,
    progress: Optional[Progress] = None,
    tf32: bool = False,
) -> Model:
    """Compiles an ONNX model.

    Args:
        model: a path to a ``.onnx`` file, the serialized model as bytes, or
            an ``onnx.ModelProto``.
        backend: one of :data:`BACKENDS`.
        fusion: the fusion planner, one of :data:`FUSION_PLANNERS`.
        threads: threads the model runs on (default: all the machine's).
        input_shapes: shapes for inputs by name, overriding the declared
            ones: how inputs with symbolic dimensions get concrete shapes
            (kiln compiles for static shapes). A name that is not an input
            is a :class:`ModelError`.
        cache_dir: where compiled code is cached (default ``$KILN_CACHE_DIR``,
            else ``~/.cache/kiln``); a second compile of the same model
            loads it from there.
        progress: ``progress(stage, message)`` called as each stage ends;
            by default the stages are logged to the ``"kiln"`` logger.
        tf32: with ``backend="cuda"``, f32 matrix products and convolutions
            run on tensor cores with their factors rounded to TF32 (10
            mantissa bits, sums in f32; as PyTorch's ``allow_tf32``). Other
            backends refuse it with ``ValueError``.

    Raises:
        ModelError: the model is malformed or invalid.
        UnsupportedError: the model uses an op or type kiln does not implement.
        CompileError: code generation or the C compiler failed.
        BackendUnavailableError: ``backend="cuda"`` without a GPU or driver.
    """
    path, data = _source(model)
    _choice(backend, BACKENDS, "backend")
    _choice(fusion, FUSION_PLANNERS, "fusion planner")
    _check_threads(threads)
    if tf32 and backend != "cuda":
        raise ValueError(f"tf32 applies to backend='cuda' only (not '{backend}')")
    compiled = _kiln.compile(
        path,
        data,
        backend,
        fusion,
        threads,
        _shapes(input_shapes),
        None if cache_dir is None else os.fspath(cache_dir),
        progress if progress is not None else _log_progress,
        bool(tf32),
    )
    return Model(compiled)


def export_c(
    model: ModelSource,
    out_dir: Union[str, "os.PathLike[str]"],
    *,
    name: Optional[str] = None,
    fusion: str = "apollo",
    threads: Optional[int] = None,
    openmp: bool = True,
    weights: str = "file",
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
) -> List[Path]:
    """Writes the model as a standalone C library into ``out_dir`` (what
    ``kiln compile --emit aot`` writes: kernels, a header, the weights, an
    example ``main.c`` and a Makefile), for this machine's CPU.

    Args:
        name: prefix of every C symbol and file (default: the model file's
            stem, or ``model``).
        threads: threads the library's workspace holds (default: all).
        openmp: parallelise with OpenMP (else single-threaded C).
        weights: ``"file"`` (a weights file beside the library) or
            ``"embed"`` (compiled into it).

    Returns the files written. A ``name`` that is not a C identifier is a
    ``ValueError``.
    """
    path, data = _source(model)
    _choice(fusion, FUSION_PLANNERS, "fusion planner")
    _choice(weights, ("file", "embed"), "weights mode")
    _check_threads(threads)
    files = _kiln.export_c(
        path, data, os.fspath(out_dir), name, fusion, threads, openmp, weights, _shapes(input_shapes)
    )
    return [Path(f) for f in files]
