"""What a compile is asked for (`CompileOptions`): the architecture, the flags, the cache, how many
compiles at once, each one's deadline, and the compiler; each field checked when made."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..core import nvidia_smi
from ..core.checks import text_seconds
from ..core.errors import UsageError
from ..core.paths import as_path
from ..families.family import ARCH_PATTERN, arch_base
from .cache import cubin_cache
from .compilers import Compiler, compiler_named, default_compiler
from .deadlines import compile_timeout
from .levels import FULL, check_level

DEFAULT_ARCH = "sm_90"
DEFAULT_FLAGS = ("-lineinfo",)


@dataclass(frozen=True)
class CompileOptions:
    arch: str = DEFAULT_ARCH
    flags: tuple[str, ...] = DEFAULT_FLAGS
    cache: Path = field(default_factory=lambda: cubin_cache())
    jobs: int = field(default_factory=lambda: usable_cores())  # capped at usable_cores(): more would only wait
    timeout_s: float | None = None  # one compile's deadline; None: $TILEGEN_COMPILE_TIMEOUT, else DEFAULT_TIMEOUT_S
    compiler: Compiler = field(default_factory=default_compiler)
    level: str = FULL  # how hard the compiler optimises (gen.compiling.levels)

    @classmethod
    def local(cls, arch: str | None = None, jobs: int | None = None, compiler: str | None = None,
              level: str = FULL) -> "CompileOptions":
        """Options for this machine: the given architecture or the local GPU's, refused unless the
        compiler (named, else the default one) compiles for it; `jobs` or one per core."""
        chosen = cls(arch=arch or local_arch(), compiler=compiler_named(compiler) if compiler else default_compiler(),
                     level=level)
        check_arch(chosen.arch, chosen.compiler)
        return replace(chosen, jobs=jobs) if jobs else chosen

    def __post_init__(self) -> None:
        if not isinstance(self.arch, str) or not ARCH_PATTERN.fullmatch(self.arch):
            raise UsageError(f"--arch {self.arch!r} is not a GPU architecture like sm_90 or sm_90a")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise UsageError(f"--jobs must be a whole number of parallel compiles, at least 1; got {self.jobs!r}")
        if isinstance(self.flags, (str, bytes)) or not all(isinstance(f, str) for f in _items(self.flags)):
            raise UsageError(f"flags must be a sequence of strings, like ('-lineinfo', '-O3'); got {self.flags!r}")
        cache = as_path(self.cache, "cache")
        if cache.exists() and not cache.is_dir():
            raise UsageError(f"cache {cache} is a file, not a folder; give the compile cache's folder")
        if not isinstance(self.compiler, Compiler):
            raise UsageError(f"compiler must be a gen.compiling.compilers.Compiler, like gen.compiling.nvcc.Nvcc(); got "
                             f"{self.compiler!r}")
        check_level(self.level)
        object.__setattr__(self, "flags", tuple(self.flags))
        object.__setattr__(self, "cache", cache)
        object.__setattr__(self, "jobs", min(self.jobs, usable_cores()))
        object.__setattr__(self, "timeout_s", compile_timeout() if self.timeout_s is None
                           else text_seconds(self.timeout_s, "timeout_s"))


def _items(value: object) -> list:
    """The items of a sequence, or [value] where it is none (so that it is refused)."""
    try:
        return list(value)  # type: ignore[call-overload]
    except TypeError:
        return [value]


def check_arch(arch: str, compiler: Compiler) -> None:
    """UsageError unless `compiler` compiles for `arch` (sm_90a and sm_100f by their base)."""
    archs = compiler.archs()
    base = arch_base(arch)
    if arch not in archs and base not in archs:
        raise UsageError(f"--arch {arch}: {compiler.name} {compiler.version()} does not compile for it; it compiles "
                         f"for {', '.join(archs)}")


def usable_cores() -> int:
    """The cores this process may run on: the most compiles that can make progress at once."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity masks on this system
        return os.cpu_count() or 1


@functools.cache
def local_arch() -> str:
    """The architecture of the first local GPU (via nvidia-smi), else sm_90."""
    try:
        major, minor = nvidia_smi.query(["compute_cap"])[0].split(".")
        return f"sm_{int(major)}{int(minor)}"
    except (ValueError, IndexError):
        return DEFAULT_ARCH
