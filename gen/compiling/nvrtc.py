"""NVRTC as a compiler (`Nvrtc`, see compilers.Compiler): the CUDA runtime compiler library, called in
process through cuda-python's bindings, straight to a cubin for the target architecture (never PTX:
the driver compiles nothing), with the same ptxas report nvcc gives (`--ptxas-options=-v`).

Each compile thread keeps one worker process (nvrtc_process) for the whole run, with the driver's
compute cache off (nvrtc_library.NO_DRIVER_CACHE), so the library is
loaded once per thread, not per variant, and a crash or a hang of NVRTC ends that worker, never
tilegen: a worker past its deadline is killed and the next compile starts another; a crash is an
Attempt killed by its signal, which the verdict makes a row. Killing the compile pool's process
group kills the workers: a compile cut short that way is Interrupted, never a result.

With `isolated=False`, NVRTC runs in the compile threads themselves (the bindings release the GIL
while it works): no worker to start, but no deadline and no protection from a crash, so it is
there for measurements, not the default.

NVRTC takes fewer options than nvcc. The nvcc flags it has an equivalent of are translated; any
other is refused in one line that says to use nvcc.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import ClassVar, Mapping, Sequence

from ..core.errors import Interrupted, ToolMissing, UsageError
from ..core.processes import Child, ProcessGroup
from .nvrtc_library import NO_DRIVER_CACHE, Program, compile_program, library_version, supported_archs
from .programs import one_program
from .verdict import Attempt

INSTALL = "pip install 'tilegen[nvrtc]' (cuda-python's bindings and the NVRTC library), or use --compiler nvcc"
# nvcc flags NVRTC takes as they are, and those it spells otherwise.
_SAME = re.compile(r"-lineinfo|-G|--use_fast_math|-[DUI]\S+|-std=\S+|--(maxrregcount|ftz|fmad|prec-div|prec-sqrt)=\S+|"
                   r"--ptxas-options=\S+|--pre-include=\S+|--Ofast-compile=(0|min|mid|max)")
# What the options with a value take: NVRTC refuses another value as an invalid option, which says nothing.
_VALUES = {"--maxrregcount": ("[0-9]+", "a whole number of registers"),
           **{option: ("true|false", "true or false") for option in ("--ftz", "--fmad", "--prec-div", "--prec-sqrt")}}
_RENAMED = {"-use_fast_math": "--use_fast_math", "-maxrregcount": "--maxrregcount", "-ftz": "--ftz",
            "-fmad": "--fmad", "-prec-div": "--prec-div", "-prec-sqrt": "--prec-sqrt"}


@dataclass(frozen=True)
class Nvrtc:
    name: ClassVar[str] = "nvrtc"
    batches: ClassVar[bool] = True  # several variants to one program, each in a namespace of its own
    # A program costs NVRTC little beyond its variants (6 ms: no process to start), so batches stay small:
    # the threads finish together (docs/results/compile-batching.md), and a tune's proposal waits for a
    # thread only as long as a run of one or two variants (a wgmma space's 472 speculative compiles in
    # runs of 8 kept a cold tune's last proposals waiting 1.6-3.3 s on a lent H200).
    runs_per_thread: ClassVar[int] = 64
    isolated: bool = True  # a worker process per compile thread; False: NVRTC in the threads themselves
    worker: str = "gen.compiling.nvrtc_process"  # the module each worker process runs (a test may name a stand-in)

    def __post_init__(self) -> None:
        if not self.isolated:  # NVRTC in this process reads it as it compiles: set once, before any compile
            os.environ.update(NO_DRIVER_CACHE)

    def version(self) -> str:
        try:
            return library_version()
        except Exception as error:  # noqa: BLE001 - the bindings or the library missing, or refusing
            raise ToolMissing(f"NVRTC cannot be used here ({type(error).__name__}: {error}); {INSTALL}") from None

    def archs(self) -> tuple[str, ...]:
        self.version()
        return supported_archs()

    def compile(self, sources: Mapping[str, str], arch: str, flags: Sequence[str], deadline_s: float,
                children: ProcessGroup) -> Attempt:
        """One program of these kernels (name -> source) to one cubin."""
        name, source = one_program(sources)
        options = nvrtc_options(arch, flags)
        if not self.isolated:
            return attempt_of(compile_program(name, source, options))
        return _worker(children, self.worker).compile(name, source, options, deadline_s)


def nvrtc_options(arch: str, flags: Sequence[str]) -> list[str]:
    """NVRTC's options for a cubin of `arch` with ptxas's report, and `flags` (nvcc's) translated;
    UsageError for a flag NVRTC has no equivalent of."""
    options = [f"--gpu-architecture={arch}", "--ptxas-options=-v"]
    remaining = list(flags)
    while remaining:
        flag = remaining.pop(0)
        if flag in ("-Xptxas", "--ptxas-options") and remaining:
            options.append(f"--ptxas-options={remaining.pop(0)}")
            continue
        head, equals, value = flag.partition("=")
        translated = f"{_RENAMED[head]}{equals}{value}" if head in _RENAMED else flag
        if not _SAME.fullmatch(translated):
            raise UsageError(f"the nvcc flag {flag!r} has no NVRTC equivalent; compile with --compiler nvcc")
        pattern, takes = _VALUES.get(_RENAMED.get(head, head), (".*", ""))
        if not re.fullmatch(pattern, value):
            raise UsageError(f"the flag {flag!r}: {head} takes {takes}, like {head}={'64' if 'reg' in head else 'true'}")
        options.append(translated)
    return options


def attempt_of(program: Program) -> Attempt:
    """What a compile gave, as every compiler reports it (a result code other than 0 is an exit code)."""
    return Attempt("nvrtc", program.log, round(program.seconds, 3), program.cubin, exit_code=program.result)


# ---- the worker processes ----------------------------------------------------------------------------

_workers = threading.local()  # each compile thread's workers, by the process group they belong to


def _worker(children: ProcessGroup, module: str) -> "_Worker":
    """This thread's worker running `module` in `children` (started on first use, again after one ended)."""
    held: dict[tuple[int, str], _Worker] = getattr(_workers, "held", {})
    _workers.held = held
    for key in [key for key, worker in held.items() if worker.children.stopped]:
        del held[key]
    worker = held.get((id(children), module))
    if worker is None or not worker.alive:
        worker = held[(id(children), module)] = _Worker(children, module)
    return worker


class _Worker:
    """One `python -m MODULE FD` (gen.compiling.nvrtc_process) over a socket, in `children`."""

    def __init__(self, children: ProcessGroup, module: str):
        self.children = children
        environment = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **NO_DRIVER_CACHE)
        self.child = Child(lambda fd: [sys.executable, "-m", module, str(fd)], environment, children)

    @property
    def alive(self) -> bool:
        return self.child.alive

    def compile(self, name: str, source: str, options: list[str], deadline_s: float) -> Attempt:
        started = time.perf_counter()
        try:
            self.child.connection.send((name, source, options))
            if not self.child.connection.poll(deadline_s):
                self.child.end()
                return Attempt("nvrtc", "", round(time.perf_counter() - started, 3), deadline_s=deadline_s)
            return attempt_of(self.child.connection.recv())
        except (EOFError, OSError):  # the worker ended (killed with its group, or crashed): reap it
            code = self.child.end(grace_s=10.0)
            if self.children.stopped:
                raise Interrupted("stopped while compiling") from None
            return Attempt("nvrtc", self.child.stderr_text()[-2000:], round(time.perf_counter() - started, 3),
                           exit_code=code if code is not None else -9)
