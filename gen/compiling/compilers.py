"""What tilegen needs of a compiler (`Compiler`), and the one it uses unless told otherwise.

A compiler only compiles: rendering, the cache, the verdict on what it gave back (verdict.judge) and
the retry after a tool fault are the same for every compiler (compiler.compile_batch). There are
two: NVRTC (nvrtc.Nvrtc, in process, the default where cuda-python's bindings are installed) and
nvcc (nvcc.Nvcc).
"""

from __future__ import annotations

import os
from typing import Mapping, Protocol, Sequence, runtime_checkable

from ..core.errors import UsageError
from ..core.processes import ProcessGroup
from . import nvrtc_library
from .nvcc import Nvcc
from .nvrtc import Nvrtc
from .verdict import Attempt


@runtime_checkable
class Compiler(Protocol):
    @property
    def name(self) -> str:
        """'nvcc': in messages, in the cache key and in provenance."""

    @property
    def batches(self) -> bool:
        """Whether one run compiles several variants (each kernel named as alone) as well as one,
        and for less per variant: the compile pool gives a compiler that does not one variant a run."""

    @property
    def runs_per_thread(self) -> int:
        """How many runs of what waits each compile thread should have, where the compiler batches:
        the pool's batches hold at most 1/(threads x this) of it. 1 for a compiler whose run costs a
        start-up (nvcc: batches as large as can be); more for one whose run costs little beyond its
        variants (NVRTC: smaller batches, so that the threads finish together)."""

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


COMPILER_ENV = "TILEGEN_COMPILER"  # nvrtc or nvcc: the default compiler of every command that does not say
_BY_NAME: dict[str, type] = {"nvrtc": Nvrtc, "nvcc": Nvcc}
COMPILERS = tuple(_BY_NAME)


def default_compiler() -> Compiler:
    """The compiler tilegen uses unless told otherwise: $TILEGEN_COMPILER, else NVRTC where it is
    installed (no process to start per compile: as fast as nvcc on SGEMM, where ptxas's time
    dominates both, faster on small kernels; docs/results/h200-compilers.md), else nvcc."""
    named = os.environ.get(COMPILER_ENV, "").strip()
    if named:
        return compiler_named(named, f"${COMPILER_ENV}")
    return Nvrtc() if nvrtc_library.available() else Nvcc()


def compiler_named(name: str, what: str = "--compiler") -> Compiler:
    """The compiler called `name` (nvrtc, nvcc); UsageError for another name."""
    if name in _BY_NAME:
        return _BY_NAME[name]()
    raise UsageError(f"{what} {name!r} is not a compiler tilegen has; use one of: {', '.join(COMPILERS)}")
