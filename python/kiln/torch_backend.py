"""``torch.compile(module, backend="kiln")``.

kiln registers itself as the Dynamo backend ``"kiln"`` through the
``torch_dynamo_backends`` entry point, so after ``pip install`` this works::

    model = torchvision.models.resnet18().eval()
    fast = torch.compile(model, backend="kiln")
    with torch.no_grad():
        y = fast(x)

How it works. Dynamo hands over an FX graph; for every new combination of
input shapes and dtypes kiln exports the graph to ONNX (opset 17, the
TorchScript exporter), folding the module's parameters and buffers in as
constants, and compiles it with :func:`kiln.compile`. Tensors cross
without copies where their layout allows (contiguous CPU tensors in,
numpy-backed tensors out).

- **Inference only.** With autograd recording (inputs or parameters that
  require grad, outside ``torch.no_grad()``/``torch.inference_mode()``) the
  graph runs eagerly, so gradients stay right.
- **Partitioning.** When kiln cannot take the whole graph (an op it does
  not implement, an op the exporter cannot export), the graph is split:
  the nodes kiln supports are grouped into sub-graphs it compiles, and the
  rest run eagerly in PyTorch. Nothing fails because of one op.
- **Parameters are constants.** They are baked in at compile time; if one
  changes in place afterwards (its version counter moves) the graph is
  compiled again.
- **New shapes.** Dynamo guards on shapes and recompiles; a graph it marks
  dynamic is compiled once per concrete shape seen.
- **Disk cache.** The exported ONNX (keyed by the graph's code, input
  types and a hash of the constants) and kiln's compiled code are cached
  under the kiln cache directory, so a second process starts fast.
- Tensors on other devices than the CPU, dtypes numpy lacks (bfloat16,
  complex), graphs that write into their inputs and graphs that use
  ``torch.vmap`` (as transformers' GPT-2 mask does) run eagerly.

Options (``torch.compile(m, backend="kiln", options={...})`` or
:func:`make_backend`): ``fusion``, ``threads`` (default
``torch.get_num_threads()``), ``cache_dir`` as for :func:`kiln.compile`.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.fx

import kiln
from ._torch_decompose import decomposed
from ._torch_support import OPSET, cpu_tensor, export_onnx, mutates_input, uses_vmap
from .errors import KilnError

__all__ = ["kiln_backend", "make_backend"]

_log = logging.getLogger("kiln.torch")


def make_backend(
    fusion: str = "apollo",
    threads: Optional[int] = None,
    cache_dir: Optional[str] = None,
) -> Callable[[torch.fx.GraphModule, List[Any]], Callable[..., Any]]:
    """A Dynamo backend with these options (``torch.compile(m, backend=make_backend(fusion="dp"))``)."""

    def backend(gm: torch.fx.GraphModule, example_inputs: List[Any]) -> Callable[..., Any]:
        return kiln_backend(gm, example_inputs, fusion=fusion, threads=threads, cache_dir=cache_dir)

    return backend


def kiln_backend(
    gm: torch.fx.GraphModule,
    example_inputs: List[Any],
    options: Optional[Dict[str, Any]] = None,
    mode: Optional[str] = None,
    **kwargs: Any,
) -> Callable[..., Any]:
    """The Dynamo backend: returns a callable that runs ``gm`` through kiln.

    ``options`` is what ``torch.compile(..., options=...)`` passes; keyword
    arguments are the same options given directly. ``mode`` has no
    meaning for kiln and is ignored.
    """
    if mode not in (None, "default"):
        _log.info("kiln ignores torch.compile mode %r", mode)
    options = {**(options or {}), **kwargs}
    unknown = set(options) - {"fusion", "threads", "cache_dir"}
    if unknown:
        raise ValueError(f"unknown kiln backend options: {', '.join(sorted(unknown))}")
    return _KilnGraph(gm, _Options(**options))


class _Options:
    def __init__(self, fusion: str = "apollo", threads: Optional[int] = None,
                 cache_dir: Optional[str] = None) -> None:
        self.fusion = fusion
        # kiln and PyTorch share the OpenMP runtime and kiln sets the team
        # size of the calling thread each run: by default, PyTorch's.
        self.threads = threads or torch.get_num_threads()
        self.cache_dir = Path(cache_dir) if cache_dir else _default_cache_dir()

    def compile(self, onnx_path: Path) -> kiln.Model:
        return kiln.compile(
            onnx_path, fusion=self.fusion, threads=self.threads,
            cache_dir=self.cache_dir, progress=_debug_progress,
        )


def _debug_progress(stage: str, message: str) -> None:
    _log.debug("%s: %s", stage, message)


def _default_cache_dir() -> Path:
    """kiln's cache directory (the same rule as the compiled code's)."""
    return Path(kiln._kiln.default_cache_dir())


def _is_constant(arg: Any) -> bool:
    """Parameters and buffers Dynamo passes as graph inputs."""
    return isinstance(arg, torch.nn.Parameter) or getattr(arg, "_dynamo_static_input_type", None) is not None


class _Frozen(torch.nn.Module):
    """``gm`` with its constant inputs baked in: ``forward`` takes only the
    tensor inputs that vary, in order (what the ONNX model's inputs are)."""

    def __init__(self, gm: torch.fx.GraphModule, template: List[Tuple[str, Any]]) -> None:
        super().__init__()
        self.gm = gm
        self.template = template
        for kind, value in template:
            if kind == "const":
                name, tensor = value
                self.register_buffer(name, tensor.detach(), persistent=False)

    def forward(self, *inputs: torch.Tensor) -> Any:
        args = []
        k = 0
        for kind, value in self.template:
            if kind == "input":
                args.append(inputs[k])
                k += 1
            elif kind == "const":
                args.append(getattr(self, value[0]))
            else:
                args.append(value)
        return self.gm(*args)


class _Unsupported(Exception):
    """kiln cannot run this graph for these inputs; run it eagerly."""


class _Specialization:
    """``gm`` compiled by kiln for one signature of its inputs."""

    def __init__(self, gm: torch.fx.GraphModule, args: Sequence[Any], opts: _Options) -> None:
        template: List[Tuple[str, Any]] = []
        self.input_positions: List[int] = []
        self.constants: List[Tuple[torch.Tensor, int]] = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                if not cpu_tensor(a):
                    raise _Unsupported(f"input {i} is a {a.dtype} tensor on {a.device}")
                if _is_constant(a):
                    template.append(("const", (f"c{i}", a)))
                    self.constants.append((a, a._version))
                else:
                    template.append(("input", None))
                    self.input_positions.append(i)
            elif isinstance(a, (int, float, bool)) or a is None:
                template.append(("value", a))
            else:
                raise _Unsupported(f"input {i} is a {type(a).__name__}")
        # Parameters the graph holds itself (older Dynamo) are baked in too.
        self.constants += [(t, t._version) for t in list(gm.parameters()) + list(gm.buffers())]
        frozen = _Frozen(gm, template)
        inputs = [args[i] for i in self.input_positions]
        path = _exported(frozen, gm, inputs, opts)
        self.model = opts.compile(path)

    def stale(self) -> bool:
        """Whether a baked-in parameter changed since compilation."""
        return any(t._version != v for t, v in self.constants)

    def __call__(self, args: Sequence[Any]) -> List[torch.Tensor]:
        arrays = [_to_numpy(args[i]) for i in self.input_positions]
        return [torch.from_numpy(a) for a in self.model.run(arrays)]


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def _exported(frozen: _Frozen, gm: torch.fx.GraphModule, inputs: List[torch.Tensor],
              opts: _Options) -> Path:
    """The ONNX file of ``frozen`` on ``inputs``' types, from the disk cache
    when the same graph, input types and constants were exported before."""
    key = _export_key(frozen, gm, inputs)
    path = opts.cache_dir / "torch" / f"{key}.onnx"
    if path.is_file():
        _log.debug("ONNX from the disk cache: %s", path)
        return path
    names = [f"input_{i}" for i in range(len(inputs))]
    try:
        onnx_bytes = export_onnx(frozen, tuple(inputs), input_names=names, do_constant_folding=True)
    except Exception as e:  # the exporter raises many kinds
        raise _Unsupported(f"torch.onnx.export failed: {type(e).__name__}: {e}") from e
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(onnx_bytes)
    os.replace(tmp, path)
    return path


def _export_key(frozen: _Frozen, gm: torch.fx.GraphModule, inputs: List[torch.Tensor]) -> str:
    h = hashlib.sha256()
    h.update(f"kiln {kiln.__version__} torch {torch.__version__} opset {OPSET}\n".encode())
    h.update(gm.code.encode())
    for name, t in list(gm.named_parameters()) + list(gm.named_buffers()) + list(frozen.named_buffers()):
        h.update(f"{name} {t.dtype} {tuple(t.shape)}\n".encode())
        h.update(_to_numpy(t).tobytes())
    for kind, value in frozen.template:
        if kind == "value":
            h.update(repr(value).encode())
    for t in inputs:
        h.update(f"input {t.dtype} {tuple(t.shape)}\n".encode())
    return h.hexdigest()[:32]


def _signature(args: Sequence[Any]) -> Tuple[Any, ...]:
    """What a specialization depends on: each input's type and shape, or value."""
    sig = []
    for a in args:
        if isinstance(a, torch.Tensor):
            sig.append((tuple(a.shape), a.dtype, a.device.type, _is_constant(a) and id(a)))
        else:
            sig.append(("value", a))
    return tuple(sig)


def _recording_grad(args: Sequence[Any]) -> bool:
    return torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args
    )


class _KilnGraph:
    """The callable Dynamo gets: ``gm`` through kiln, one compiled
    specialization per input signature, eager where kiln cannot go."""

    def __init__(self, gm: torch.fx.GraphModule, opts: _Options, partition: bool = True) -> None:
        self.gm = gm
        # What is exported: the same graph with PyTorch's fused inference
        # calls written as ops the exporter knows.
        self.plain = decomposed(gm)
        self.opts = opts
        # A partition's sub-graph is not split again: eager when refused.
        self.partition = partition
        self.specs: Dict[Tuple[Any, ...], Any] = {}
        self.single_output = not _returns_sequence(gm)

    def __call__(self, *args: Any) -> Any:
        if _recording_grad(args):
            _log.debug("autograd is recording: running the graph eagerly")
            return self.gm(*args)
        runner = self._runner(args)
        return runner(*args)

    def _runner(self, args: Sequence[Any]) -> Callable[..., Any]:
        sig = _signature(args)
        runner = self.specs.get(sig)
        if runner is None or (isinstance(runner, _WholeGraph) and runner.spec.stale()):
            runner = self._build(args)
            self.specs[sig] = runner
        return runner

    def _build(self, args: Sequence[Any]) -> Callable[..., Any]:
        if mutates_input(self.gm):
            # kiln's outputs are fresh tensors: a write into an input
            # would be lost.
            _log.info("the graph writes into one of its inputs: it runs eagerly")
            return self.gm
        if uses_vmap(self.gm):
            # Partitions may move the vmap nesting calls (side effects
            # without data edges) away from the batched ops between them.
            _log.info("the graph uses torch.vmap: it runs eagerly")
            return self.gm
        try:
            return _WholeGraph(_Specialization(self.plain, args, self.opts), self.single_output)
        except (_Unsupported, KilnError) as e:
            if not self.partition:
                _log.info("kiln runs a sub-graph eagerly (%s)", _first_line(e))
                return self.gm
            _log.info("kiln cannot compile the whole graph (%s); partitioning it", _first_line(e))
        try:
            return _partitioned(self.plain, args, self.opts)
        except Exception as e:  # partitioning is best effort: eager is always right
            _log.warning("kiln runs this graph eagerly: partitioning failed (%s)", _first_line(e))
            return self.gm


class _WholeGraph:
    def __init__(self, spec: _Specialization, single_output: bool) -> None:
        self.spec = spec
        self.single_output = single_output

    def __call__(self, *args: Any) -> Any:
        outs = self.spec(args)
        return outs[0] if self.single_output else tuple(outs)


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _returns_sequence(gm: torch.fx.GraphModule) -> bool:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return isinstance(out.args[0], (tuple, list))


# --- partitioning -----------------------------------------------------------


def _partitioned(gm: torch.fx.GraphModule, args: Sequence[Any], opts: _Options) -> torch.fx.GraphModule:
    """``gm`` split into sub-graphs of nodes kiln supports (compiled by kiln
    when first called) and the rest (eager)."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

    from ._torch_support import KilnSupport, propagate_examples

    propagate_examples(gm, args)
    partitioner = CapabilityBasedPartitioner(
        gm, KilnSupport(gm), allows_single_node_partition=True
    )
    fused = partitioner.partition_and_fuse()
    kiln_parts = 0
    for name, sub in list(fused.named_children()):
        if name.startswith("fused_") and isinstance(sub, torch.fx.GraphModule):
            setattr(fused, name, _KilnSubgraph(sub, opts))
            kiln_parts += 1
    _log.info("kiln compiles %d sub-graph(s); the rest runs eagerly", kiln_parts)
    return fused


class _KilnSubgraph(torch.nn.Module):
    """A partition's sub-graph: through kiln, or eagerly if kiln refuses it."""

    def __init__(self, sub: torch.fx.GraphModule, opts: _Options) -> None:
        super().__init__()
        self.sub = sub
        self.graph = _KilnGraph(sub, opts, partition=False)

    def forward(self, *args: Any) -> Any:
        return self.graph(*args)
