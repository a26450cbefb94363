"""kiln's exceptions.

Every error kiln raises is a :class:`KilnError`. Its subclasses say what
failed, and each also derives from the built-in exception a Python user
would catch for it (``ValueError`` for a bad model or input, ``TypeError``
for an input of the wrong type, ``NotImplementedError`` for what kiln does
not support, ``RuntimeError`` for failures while compiling or running).

Each carries where the error happened, as far as kiln knows:
``file`` (the model file), ``node`` (the node's name), ``op`` (its op type,
``domain.Op`` outside the default domain) and ``opset``; ``None`` where
unknown.
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "KilnError",
    "ModelError",
    "UnsupportedError",
    "CompileError",
    "RunError",
    "BackendUnavailableError",
    "InputError",
    "InputTypeError",
]


class KilnError(Exception):
    """Base class of kiln's errors (also raised for internal errors)."""

    def __init__(
        self,
        message: str,
        file: Optional[str] = None,
        node: Optional[str] = None,
        op: Optional[str] = None,
        opset: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.node = node
        self.op = op
        self.opset = opset


class ModelError(KilnError, ValueError):
    """The model is malformed or invalid (bad protobuf, wrong shapes, ...)."""


class UnsupportedError(KilnError, NotImplementedError):
    """The model is valid but uses something kiln does not implement."""


class CompileError(KilnError, RuntimeError):
    """Generating or compiling code failed (e.g. the C compiler is missing)."""


class RunError(KilnError, RuntimeError):
    """Running a compiled model failed (e.g. an index read from data is out of range)."""


class BackendUnavailableError(KilnError, RuntimeError):
    """The backend cannot run on this machine (no GPU, no CUDA driver)."""


class InputError(KilnError, ValueError):
    """An input is missing, unknown, or of the wrong shape or memory layout."""


class InputTypeError(InputError, TypeError):
    """An input is not an array, or not of the element type the model declares."""
