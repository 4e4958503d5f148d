"""What tilegen needs of a compiler (`Compiler`), and the one it uses unless told otherwise.

A compiler only compiles: rendering, the cache, the verdict on what it gave back (verdict.judge) and
the retry after a tool fault are the same for every compiler (compiler.compile_batch). nvcc
(nvcc.Nvcc) is one; another (an in-process NVRTC) is one module beside it.
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence, runtime_checkable

from ..core.processes import ProcessGroup
from .nvcc import Nvcc
from .verdict import Attempt


@runtime_checkable
class Compiler(Protocol):
    @property
    def name(self) -> str:
        """'nvcc': in messages, in the cache key and in provenance."""

    @property
    def batches(self) -> bool:
        """Whether one run compiles several variants (each kernel named as alone) as well as one."""

    def version(self) -> str:
        """Its version ('13.0.88'), for the cache key and provenance: ToolMissing where it is not
        installed, RunFailed where it does not answer."""

    def archs(self) -> tuple[str, ...]:
        """The architectures it compiles for ('sm_90', ...)."""

    def compile(self, sources: Mapping[str, str], arch: str, flags: Sequence[str], deadline_s: float,
                children: ProcessGroup) -> Attempt:
        """One run: the sources (kernel name -> source; more than one only where `batches`) to one
        cubin, with ptxas's report of each kernel in the log. A run past `deadline_s` is stopped
        (Attempt.deadline_s); Interrupted once `children` was killed."""


def default_compiler() -> Compiler:
    """The compiler tilegen uses unless told otherwise."""
    return Nvcc()
