"""kiln.Model: a compiled model that runs on numpy arrays."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _kiln
from .errors import InputError, InputTypeError

__all__ = ["Model", "TensorInfo", "BenchResult"]

Inputs = Union[Mapping[str, Any], Sequence[Any]]


class TensorInfo(NamedTuple):
    """Name, numpy element type name (``"float32"``, ...) and shape of a model input or output."""

    name: str
    dtype: str
    shape: Tuple[int, ...]


@dataclass(frozen=True)
class BenchResult:
    """Wall-clock times of ``Model.run`` in milliseconds over ``runs`` calls."""

    runs: int
    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float


def _numpy_dtype(name: str) -> np.dtype:
    """numpy's dtype for kiln's name of it (bfloat16 needs ``ml_dtypes``)."""
    if name == "bfloat16":
        try:
            import ml_dtypes  # type: ignore[import-not-found]
        except ImportError as e:
            raise InputTypeError(
                "bfloat16 tensors need the ml_dtypes package (pip install ml_dtypes)"
            ) from e
        return np.dtype(ml_dtypes.bfloat16)
    try:
        return np.dtype(name)
    except TypeError as e:
        raise InputTypeError(f"kiln cannot exchange {name} tensors with numpy") from e


class Model:
    """A model compiled by :func:`kiln.compile`.

    Call :meth:`run` (or the model itself) with numpy arrays. A C-contiguous
    input array of the declared element type is read where it lies, without
    a copy; outputs are new arrays that share memory with nothing else.
    Runs release the GIL, and a model may be called from several threads
    at once (runs of one model take turns; separate models run in
    parallel).
    """

    def __init__(self, compiled: _kiln.Model) -> None:
        self._compiled = compiled
        self._inputs = [TensorInfo(n, d, tuple(s)) for n, d, s in compiled.inputs]
        self._outputs = [TensorInfo(n, d, tuple(s)) for n, d, s in compiled.outputs]
        self._bfloat16_outputs = any(o.dtype == "bfloat16" for o in self._outputs)

    @property
    def inputs(self) -> List[TensorInfo]:
        """The graph inputs, in order."""
        return list(self._inputs)

    @property
    def outputs(self) -> List[TensorInfo]:
        """The graph outputs, in order."""
        return list(self._outputs)

    @property
    def backend(self) -> str:
        """``"cpu"``, ``"cuda"`` or ``"reference"``."""
        return self._compiled.backend

    @property
    def fusion(self) -> str:
        """The fusion planner the model was compiled with."""
        return self._compiled.fusion

    @property
    def summary(self) -> str:
        """One line on how the model was compiled."""
        return self._compiled.summary

    def __repr__(self) -> str:
        ins = ", ".join(f"{i.name}: {i.dtype}{list(i.shape)}" for i in self._inputs)
        return f"<kiln.Model ({ins}) backend={self.backend} fusion={self.fusion}>"

    def run(self, inputs: Inputs) -> List[np.ndarray]:
        """Runs the model.

        ``inputs`` is a dict by input name or a list in input order of
        numpy arrays (Python numbers and nested lists are converted to the
        declared element type; other objects go through ``numpy.asarray``
        and must already have it). Raises
        :class:`kiln.InputTypeError` (a ``TypeError``) for a value of the
        wrong element type and :class:`kiln.InputError` (a ``ValueError``)
        for a missing, unknown, wrongly shaped or non-contiguous one; both
        name the input. Returns the outputs in order.
        """
        # `arrays` holds every input for the call: kiln reads them in place.
        arrays = self._arrays(inputs)
        buffers = self._compiled.run([a.__array_interface__["data"][0] for a in arrays])
        if self._bfloat16_outputs:
            return [_output_array(b) for b in buffers]
        return [np.asarray(b) for b in buffers]

    def __call__(self, *arrays: Any) -> Union[np.ndarray, Tuple[np.ndarray, ...]]:
        """``model(x, y)``: the inputs in order; the output itself when
        there is one, else a tuple of them."""
        outs = self.run(list(arrays))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _arrays(self, inputs: Inputs) -> List[np.ndarray]:
        if isinstance(inputs, Mapping):
            return self._arrays_by_name(inputs)
        if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence) or isinstance(inputs, (str, bytes)):
            raise InputTypeError(
                f"inputs must be a dict by name or a list in order, got {type(inputs).__name__}"
            )
        if len(inputs) != len(self._inputs):
            names = ", ".join(i.name for i in self._inputs)
            raise InputError(
                f"the model has {len(self._inputs)} inputs ({names}) but {len(inputs)} were given"
            )
        return [_checked(v, info) for v, info in zip(inputs, self._inputs)]

    def _arrays_by_name(self, inputs: Mapping[str, Any]) -> List[np.ndarray]:
        known = {i.name for i in self._inputs}
        unknown = [k for k in inputs if k not in known]
        if unknown:
            raise InputError(
                f"unknown input '{unknown[0]}' (the model's inputs: {', '.join(sorted(known))})"
            )
        missing = [i.name for i in self._inputs if i.name not in inputs]
        if missing:
            raise InputError(f"missing input '{missing[0]}'")
        return [_checked(inputs[i.name], i) for i in self._inputs]

    def explain(self, path: Union[str, "Path", None] = None) -> str:
        """The fusion report as HTML (which nodes became which kernel and
        why); also written to ``path`` when given."""
        html = self._compiled.explain_html()
        if path is not None:
            Path(path).write_text(html, encoding="utf-8")
        return html

    def bench(self, runs: int = 100, warmup: int = 10, inputs: Optional[Inputs] = None) -> BenchResult:
        """Times ``runs`` calls of :meth:`run` after ``warmup`` calls, on
        ``inputs`` or on random inputs of the declared types."""
        if runs < 1 or warmup < 0:
            raise ValueError("runs must be at least 1 and warmup at least 0")
        if inputs is None:
            inputs = self.random_inputs()
        for _ in range(warmup):
            self.run(inputs)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            self.run(inputs)
            times.append((time.perf_counter() - start) * 1e3)
        return BenchResult(runs, statistics.median(times), statistics.fmean(times), min(times), max(times))

    def random_inputs(self, seed: int = 0) -> List[np.ndarray]:
        """Random inputs of the declared types and shapes (floats in
        [-1, 1), integers in [0, 10), booleans)."""
        rng = np.random.default_rng(seed)
        out = []
        for info in self._inputs:
            dtype = _numpy_dtype(info.dtype)
            if dtype.kind == "f" or info.dtype == "bfloat16":
                a = rng.uniform(-1, 1, info.shape).astype(dtype)
            elif dtype.kind in "iu":
                a = rng.integers(0, 10, info.shape).astype(dtype)
            elif dtype.kind == "b":
                a = rng.integers(0, 2, info.shape).astype(bool)
            else:
                raise InputTypeError(f"input '{info.name}': cannot make random {info.dtype} tensors")
            # np.array, not np.ascontiguousarray: that makes 0-d arrays 1-d.
            out.append(np.array(a, dtype=dtype, order="C"))
        return out


def _checked(value: Any, info: TensorInfo) -> np.ndarray:
    """``value`` as the array the model reads, or the error naming ``info``."""
    name = info.name
    want = _numpy_dtype(info.dtype)
    if isinstance(value, np.ndarray):
        arr = value
    else:
        # Python numbers and nested lists take the declared type; other
        # objects (tensors of other libraries) keep their own and are
        # checked like arrays.
        plain = isinstance(value, (int, float, bool, list, tuple))
        try:
            arr = np.asarray(value, dtype=want if plain else None)
        except Exception as e:
            raise InputTypeError(
                f"input '{name}': expected a numpy array, got {type(value).__name__}"
            ) from e
        if arr.dtype == object:
            raise InputTypeError(f"input '{name}': expected a numpy array, got {type(value).__name__}")
    if arr.dtype != want:
        raise InputTypeError(
            f"input '{name}' must be {info.dtype} but got {arr.dtype} (convert with .astype(numpy.{info.dtype}))"
        )
    if tuple(arr.shape) != info.shape:
        raise InputError(f"input '{name}' must have shape {list(info.shape)} but got {list(arr.shape)}")
    if not arr.flags.c_contiguous:
        raise InputError(
            f"input '{name}' is not C-contiguous (pass numpy.ascontiguousarray(x))"
        )
    if not arr.flags.aligned:
        raise InputError(f"input '{name}' is not aligned for {info.dtype} (pass a copy)")
    return arr


def _output_array(buffer: _kiln.Buffer) -> np.ndarray:
    arr = np.asarray(buffer)
    if buffer.dtype == "bfloat16":
        arr = arr.view(_numpy_dtype("bfloat16"))
    return arr
