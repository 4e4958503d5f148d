"""How points are evaluated: the options sweep, tune, compile and revalidate share, and the GPUs
they run on (this host's isolated workers, or a Dask cluster)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Sequence

# COMPILERS, COMPILER_ENV, COMPILE_LEVELS, FULL, check_level, usable_cores and sanitizer_path: for commands/ and cli/, which reach them here
from ..compiling.compilers import COMPILER_ENV, COMPILERS, compiler_named
from ..compiling.levels import COMPILE_LEVELS, FULL, check_level
from ..compiling.options import CompileOptions, local_arch, usable_cores
from ..core import checks
from ..core.errors import UsageError
from ..core.timing import TimingOptions, checked_timing
from ..gpu.executor import Executor
from ..gpu.local import LocalExecutor
from ..gpu.sanitize import sanitizer_path
from . import early


@dataclass(frozen=True)
class RunOptions:
    """How points are evaluated: the options sweep, tune, compile and revalidate share."""

    arch: str | None = None  # None: the local GPU's, else sm_90
    compile_jobs: int | None = None  # parallel compiles; None: one per core
    gpus: Sequence[int] = (0,)
    timing: TimingOptions = field(default_factory=TimingOptions)
    silence_s: float = 30.0  # a worker silent this long is hung: killed, and the row is a timeout
    seed: int | None = None  # of the random inputs; None: fresh ones every run
    sanitize: bool = False  # compute-sanitizer on each variant (at a small size) before it is timed
    cluster: str | None = None  # a Dask cluster: 'local' or a scheduler's address (gen.gpu.dask)
    compiler: str | None = None  # nvrtc or nvcc; None: $TILEGEN_COMPILER, else NVRTC where installed, else nvcc
    compile_level: str = FULL  # how hard the compiler optimises (gen.compiling.levels)

    def __post_init__(self) -> None:
        """Options from Python are refused as the command line would refuse them (gen.core.checks).
        Numbers are kept as Python's own (numpy's are accepted, but JSON, SQLite and random take
        only Python's)."""
        checks.instance(self.timing, TimingOptions, "timing")
        checks.flag(self.sanitize, "sanitize")
        if self.cluster is not None and not isinstance(self.cluster, str):
            raise UsageError(f"cluster must be 'local' or a scheduler's address like 'tcp://HOST:8786', got "
                             f"{self.cluster!r}")
        checks.keep(self, "timing", checked_timing(self.timing))
        checks.keep(self, "silence_s", checks.seconds(self.silence_s, "the worker timeout (silence_s)"))
        if self.compile_jobs is not None:
            checks.keep(self, "compile_jobs", checks.whole(self.compile_jobs, "compile_jobs", 1))
        if self.seed is not None:
            checks.keep(self, "seed", checks.whole(self.seed, "seed"))
        checks.keep(self, "gpus", _gpu_indices(self.gpus))
        if self.compiler is not None:
            compiler_named(self.compiler, "compiler")
        check_level(self.compile_level, "compile_level")

    def compile_options(self) -> CompileOptions:
        """How the points' variants compile: for --arch, else the local GPU's."""
        return CompileOptions.local(self.arch, self.compile_jobs, self.compiler, self.compile_level)

    @property
    def compile_arch(self) -> str:
        """The architecture the points' variants compile for: --arch, else the local GPU's."""
        return self.arch or local_arch()


def _gpu_indices(gpus: object) -> tuple[int, ...]:
    listed = list(gpus) if isinstance(gpus, Iterable) and not isinstance(gpus, str) else None
    if not listed or any(isinstance(g, str) or checks.whole_problem(g) for g in listed) or \
            len(set(listed)) != len(listed):
        raise UsageError(f"gpus must list distinct GPU indices like [0, 1], got {gpus!r}")
    return tuple(int(g) for g in listed)


def _local(options: RunOptions) -> Executor:
    """This host's GPU workers: those started before the command line was read (gen.evaluate.early), else new."""
    return early.take(options.gpus, options.silence_s) or LocalExecutor(options.gpus, options.silence_s)


def _dask(options: RunOptions) -> Executor:
    from ..gpu.dask import DaskExecutor  # distributed is imported only for a cluster

    return DaskExecutor(options.cluster, options.gpus, options.silence_s)  # type: ignore[arg-type]


EXECUTORS: dict[str, Callable[[RunOptions], Executor]] = {  # "cluster" where RunOptions.cluster names one
    "local": _local, "cluster": _dask}


def make_executor(options: RunOptions) -> Executor:
    """The GPUs that run the jobs: isolated workers on this host, or the Dask cluster named."""
    return EXECUTORS["cluster" if options.cluster else "local"](options)
