"""Type stubs of kiln's compiled extension module (used by kiln's Python layer)."""

from typing import Callable, Dict, List, Optional, Tuple

__version__: str

Signature = List[Tuple[str, str, List[int]]]

class Buffer:
    """One output tensor; ``numpy.asarray(buffer)`` views it without a copy."""

    @property
    def __array_interface__(self) -> dict: ...
    @property
    def dtype(self) -> str: ...

class Model:
    @property
    def inputs(self) -> Signature: ...
    @property
    def outputs(self) -> Signature: ...
    @property
    def backend(self) -> str: ...
    @property
    def fusion(self) -> str: ...
    @property
    def summary(self) -> str: ...
    def run(self, addresses: List[int]) -> List[Buffer]: ...
    def explain_html(self) -> str: ...

def compile(
    path: Optional[str],
    data: Optional[bytes],
    backend: str,
    fusion: str,
    threads: Optional[int],
    input_shapes: Dict[str, List[int]],
    cache_dir: Optional[str],
    progress: Optional[Callable[[str, str], None]],
    tf32: bool,
) -> Model: ...
def export_c(
    path: Optional[str],
    data: Optional[bytes],
    out_dir: str,
    name: Optional[str],
    fusion: str,
    threads: Optional[int],
    openmp: bool,
    weights: str,
    input_shapes: Dict[str, List[int]],
) -> List[str]: ...
def default_cache_dir() -> str: ...
