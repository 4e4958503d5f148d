"""Compile levels: how hard the compilers optimise, as one table (level name -> NVRTC's options and
nvcc's). `full` is what tilegen has always compiled with (each compiler's own default optimisation);
the others trade a kernel's speed for compile time: a tune may screen its candidates at one and
confirm its finalists at `full` (gen.commands.tune), and scripts/bench_cold.py measures how well
each ranks variants against `full`.

Measured with NVRTC 13 on one sgemm variant (H100 host): `ofc-max` compiles in 0.18 s against 1.96 s
at `full`, but with 51 registers and 1048 bytes of stack where `full` gives 227 registers: its
timings may rank variants otherwise. The 180-point sgemm space of docs/results/h100-vs-kernel-tuner.md,
cold, NVRTC 13.5 on 2 shared cores: full 41.2 s, ptxas-o1 34.2 s, ofc-mid 9.6 s, ofc-max 8.8 s;
ofc-mid and ofc-max hold 30-44 registers and up to 944 bytes of stack, the ptxas levels about
full's registers and no stack, and ofc-min compiles slower than full (1.0 s against 0.29 s a
variant). scripts/bench_cold.py measures how each ranks variants on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import UsageError
from ..core.results import FULL_LEVEL as FULL  # rows made before levels read as full


@dataclass(frozen=True)
class Level:
    nvrtc: tuple[str, ...]  # NVRTC's own options
    nvcc: tuple[str, ...]  # nvcc's
    what: str  # for help texts and messages


LEVELS: dict[str, Level] = {
    FULL: Level((), (), "the compilers' default optimisation"),
    "ptxas-o2": Level(("--ptxas-options=-O2",), ("-Xptxas", "-O2"), "ptxas at -O2 (NVVM as in full)"),
    "ptxas-o1": Level(("--ptxas-options=-O1",), ("-Xptxas", "-O1"), "ptxas at -O1 (NVVM as in full)"),
    "ofc-min": Level(("--Ofast-compile=min",), ("--Ofast-compile=min",), "fast compile, least loss"),
    "ofc-mid": Level(("--Ofast-compile=mid",), ("--Ofast-compile=mid",), "fast compile, expensive optimisations off"),
    "ofc-max": Level(("--Ofast-compile=max",), ("--Ofast-compile=max",), "fastest compile, most optimisations off"),
}
COMPILE_LEVELS = tuple(LEVELS)


def check_level(level: object, what: str = "compile level") -> str:
    """`level` if it names a level; UsageError otherwise."""
    if not isinstance(level, str) or level not in LEVELS:
        raise UsageError(f"{what} {level!r} is not a compile level; use one of: {', '.join(COMPILE_LEVELS)}")
    return level


def level_flags(level: str, compiler: str) -> tuple[str, ...]:
    """The options that make `level` for the compiler named `compiler` (nvrtc or nvcc), in its own
    spelling; none for `full`. UsageError for a compiler the table has no column for."""
    options = LEVELS[check_level(level)]
    if level == FULL:
        return ()
    if compiler not in ("nvrtc", "nvcc"):
        raise UsageError(f"compile level {level!r}: tilegen knows its options for nvrtc and nvcc, not {compiler!r}; "
                         f"compile at {FULL}")
    return getattr(options, compiler)
