"""Which FX nodes kiln can take (for ``kiln.torch_backend``'s partitioning).

A node is supported when its value is one tensor of a type numpy has, on
the CPU, and the node alone exports to ONNX and imports into kiln (graph
passes included). Answers are cached by the node's target and input types,
so a repeated layer is checked once.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import warnings
from typing import Any, Dict, Iterator, Mapping, Sequence, Tuple

import torch
import torch.fx
from torch.fx.passes.operator_support import OperatorSupportBase

import kiln

VALUE = "kiln_value"
OPSET = 17

# dtypes numpy (hence kiln's Python API) exchanges without a copy.
NUMPY_DTYPES = {
    torch.float32, torch.float64, torch.float16,
    torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint8, torch.bool,
}

_log = logging.getLogger("kiln.torch")


@contextlib.contextmanager
def _stdout_to_log() -> Iterator[None]:
    """Sends what C++ code prints on file descriptor 1 to the debug log
    (the TorchScript exporter prints whole graphs when it fails)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            printed = tmp.read().decode(errors="replace").strip()
            if printed:
                _log.debug("the ONNX exporter printed:\n%s", printed)


def export_onnx(module: torch.nn.Module, inputs: Tuple[torch.Tensor, ...], **kwargs: Any) -> bytes:
    """``module`` on ``inputs`` as ONNX (opset 17, the TorchScript exporter),
    quietly: warnings and printouts go to the debug log."""
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings(), _stdout_to_log():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, inputs, buf, opset_version=OPSET, dynamo=False, **kwargs)
    return buf.getvalue()


# Ops that return a view of their first argument (writes through the view
# reach it).
_VIEWS = {
    "view", "reshape", "transpose", "permute", "t", "flatten", "squeeze", "unsqueeze",
    "expand", "narrow", "select", "split", "chunk", "unbind", "contiguous", "view_as",
    "as_strided", "diagonal", "unflatten", "movedim", "swapaxes", "getitem",
}


def _name(node: torch.fx.Node) -> str:
    t = node.target
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


def _writes_first_arg(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """In-place ops (``x.add_(y)``, ``torch.relu_``, ``inplace=True``,
    ``x[i] = y``, ``out=``)."""
    if node.op == "call_module":
        return bool(getattr(gm.get_submodule(str(node.target)), "inplace", False))
    if node.op not in ("call_function", "call_method"):
        return False
    name = _name(node)
    if name in ("setitem", "__setitem__") or (name.startswith("i") and name[1:] in ("add", "sub", "mul", "truediv")):
        return True
    in_place = name.endswith("_") and not name.startswith("_")
    return in_place or node.kwargs.get("inplace") is True or "out" in node.kwargs


def _base(node: Any) -> Any:
    """The value ``node`` is a view of (itself if it is not a view)."""
    while isinstance(node, torch.fx.Node) and node.op in ("call_function", "call_method") \
            and _name(node).lstrip("_").rstrip("_") in _VIEWS and node.args:
        node = node.args[0]
    return node


def uses_vmap(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph enters a ``torch.vmap`` region (Dynamo inlines
    vmap as nesting calls around batched tensors: the ONNX exporter cannot
    trace them, a failed trace leaves the nesting level behind, and
    partitioning may reorder them)."""
    return any(
        node.op == "call_function" and _name(node) in ("_vmap_increment_nesting", "_add_batch_dim")
        for node in gm.graph.nodes
    )


def mutates_input(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph writes into one of its inputs (or a view of one)."""
    for node in gm.graph.nodes:
        if _writes_first_arg(gm, node) and node.args:
            base = _base(node.args[0])
            if isinstance(base, torch.fx.Node) and base.op == "placeholder":
                return True
    return False


def propagate_examples(gm: torch.fx.GraphModule, args: Sequence[Any]) -> None:
    """Runs ``gm`` once on ``args``, keeping each node's value in its meta."""

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            value = super().run_node(n)
            n.meta[VALUE] = value
            return value

    with torch.no_grad():
        Recorder(gm).run(*args)


def cpu_tensor(v: Any) -> bool:
    """A CPU tensor of a type kiln exchanges with numpy."""
    return isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dtype in NUMPY_DTYPES


class KilnSupport(OperatorSupportBase):
    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__()
        self.gm = gm
        self.cache: Dict[Tuple[Any, ...], bool] = {}

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        if node.op not in ("call_function", "call_method", "call_module"):
            return False
        if not cpu_tensor(node.meta.get(VALUE)):
            return False
        inputs = [a for a in node.all_input_nodes]
        if not all(cpu_tensor(a.meta.get(VALUE)) for a in inputs):
            return False
        key = _key(self.gm, node, inputs)
        if key not in self.cache:
            self.cache[key] = _exports_and_imports(self.gm, node, inputs)
        return self.cache[key]


def _key(gm: torch.fx.GraphModule, node: torch.fx.Node, inputs: Sequence[torch.fx.Node]) -> Tuple[Any, ...]:
    target = node.target
    if node.op == "call_module":
        target = repr(gm.get_submodule(str(node.target)))
    types = tuple((tuple(a.meta[VALUE].shape), a.meta[VALUE].dtype) for a in inputs)
    consts = tuple(repr(a) for a in node.args if not isinstance(a, torch.fx.Node))
    kw = tuple(sorted((k, repr(v)) for k, v in node.kwargs.items() if not isinstance(v, torch.fx.Node)))
    return (node.op, str(target), types, consts, kw)


def _exports_and_imports(gm: torch.fx.GraphModule, node: torch.fx.Node, inputs: Sequence[torch.fx.Node]) -> bool:
    """Whether ``node`` alone exports to ONNX and kiln imports the result."""
    g = torch.fx.Graph()
    mapping = {a: g.placeholder(f"x{i}") for i, a in enumerate(inputs)}
    g.output(g.node_copy(node, lambda n: mapping[n]))
    one = torch.fx.GraphModule(gm, g)
    examples = tuple(a.meta[VALUE] for a in inputs)
    try:
        onnx_bytes = export_onnx(one, examples)
        kiln.compile(onnx_bytes, backend="reference", progress=lambda stage, message: None)
    except Exception as e:  # kiln's errors, and the exporter's of many kinds
        _log.debug("kiln does not take %s (%s): %s", node.name, node.target, str(e).splitlines()[:1])
        return False
    return True
