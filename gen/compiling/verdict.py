"""What a compiler run says about the source, for any compiler: the compiler fills in an `Attempt`
(its log, its cubin, how it ended) and `judge` gives the verdict, before anything of it is kept:
- a usable cubin (an ELF file) and ptxas's report of each kernel: compiled;
- a diagnostic of the source (`kernel.cu(12): error ...`, `ptxas error ...`): a compile error, which
  is a result, not an exception;
- past its deadline ($TILEGEN_COMPILE_TIMEOUT): a compile error that says so;
- a crash of the compiler (SIGSEGV, SIGABRT, ...) twice on one source: a compile error that says so,
  never cached;
- anything else (a compiler killed, short of memory or disk, or successful without a usable cubin)
  says nothing about the source: a tool fault. `judged` runs a compile once more
  after one, and a second one stops the run (RunFailed) naming the variant, the cause and the fix.
"""

from __future__ import annotations

import os
import re
import signal
import tempfile
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable, Sequence

from ..core.errors import RunFailed
from ..core.progress import note
from .deadlines import TIMEOUT_ENV
from .ptxas import kernel_logs

_ELF_MAGIC = b"\x7fELF"


class Outcome(StrEnum):
    COMPILED = "compiled"  # a usable cubin and ptxas's report of each kernel: cached
    SOURCE_ERROR = "source error"  # the compiler's diagnostic of the source: a compile error, cached
    TIMED_OUT = "timed out"  # killed at its deadline: a compile error that says so, never cached
    CRASHED = "crashed"  # the compiler crashed (twice) on this source: a compile error that says so, never cached
    TOOL_FAULT = "tool fault"  # anything else, which says nothing about the source: never cached


@dataclass(frozen=True)
class Attempt:
    """What one compiler run gave back, before any judgement: each compiler fills one in."""

    compiler: str  # its name, for messages
    log: str  # everything it said, ptxas's report included
    seconds: float
    cubin: bytes | None = None  # None: it wrote none
    exit_code: int = 0  # negative: killed by that signal
    deadline_s: float | None = None  # set when it ran past this deadline and was killed
    problem: str | None = None  # what kept it from running at all (a temporary folder it could not write)


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reason: str = ""  # what happened, for a timeout or a fault
    fix: str = ""  # what the user can do about it
    reports: dict[str, str] = field(default_factory=dict)  # compiled: each kernel's lines of ptxas's report


# Lines of a compiler's log that diagnose the source: the front end (nvcc's and NVRTC's), the
# preprocessor, ptxas. Only these make a failed compile a verdict on the source.
_DIAGNOSTIC = re.compile(
    r"^[^\s(][^\n(]*\(\d+\): (?:catastrophic )?error\b"  # kernel.cu(12): error: identifier "x" is undefined
    r"|^[^\s:]+:\d+:\d+: (?:fatal )?error:"  # kernel.cu:1:10: fatal error: missing.h: No such file or directory
    r"|^ptxas\b[^\n]*\berror\s*:"  # ptxas error : Entry function 'k' uses too much shared data
    r"|^ptxas fatal\s*: Unresolved extern function", re.M)
# Lines that say a resource ran out or a stage died: whatever else the log says, no verdict on the source.
_MEMORY_FAULT = re.compile(r"^Killed$|Killed signal terminated program|died due to signal|out of memory|"
                           r"cannot allocate memory|bad_alloc|resource temporarily unavailable", re.I)
_DISK_FAULT = re.compile(r"no space left on device|file too large|file size limit exceeded|disk quota exceeded", re.I)
# Signals of a crash (not of a kill): a compiler that crashes twice on one source is a row, not the end of the run.
_CRASHES = {getattr(signal, name) for name in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGABRT", "SIGFPE")}
_MEMORY_FIX = "free memory or lower --jobs (the system may have run out of memory), then run again"


def judge(attempt: Attempt, kernels: Sequence[str]) -> Verdict:
    """What a compiler run says about the source that defines `kernels` (see the module's docstring)."""
    tool = attempt.compiler
    if attempt.deadline_s is not None:
        return Verdict(Outcome.TIMED_OUT, f"{tool} did not finish within {attempt.deadline_s:g} s and was killed",
                       f"raise ${TIMEOUT_ENV} if it is only slow")
    if attempt.problem is not None:
        return Verdict(Outcome.TOOL_FAULT, attempt.problem, _fix_for(
            attempt.problem, tool, "set $TMPDIR to a folder that exists and has room, then run again"))
    if -attempt.exit_code in _CRASHES:
        return Verdict(Outcome.CRASHED, f"{tool} crashed ({_signal_name(-attempt.exit_code)}) compiling it",
                       "compile it with the other compiler (--compiler), or report it to NVIDIA")
    if attempt.exit_code < 0:
        return Verdict(Outcome.TOOL_FAULT, f"{tool} was killed by {_signal_name(-attempt.exit_code)}", _MEMORY_FIX)
    if attempt.exit_code == 0:
        return _judge_success(attempt, kernels)
    if (line := fault_line(attempt.log)) is not None:
        return Verdict(Outcome.TOOL_FAULT, f"{tool} said {line!r}", _fix_for(line, tool))
    if has_diagnostic(attempt.log):
        return Verdict(Outcome.SOURCE_ERROR)
    said = next((line.strip()[:200] for line in attempt.log.splitlines() if line.strip()), "nothing")
    return Verdict(Outcome.TOOL_FAULT, f"{tool} exited with code {attempt.exit_code} and no diagnostic of the "
                                       f"source (it said {said!r})", _install_fix(tool))


def judged(run: Callable[[], Attempt], kernels: Sequence[str], what: str) -> tuple[Attempt, Verdict]:
    """`run` once, and once more after a tool fault (that says nothing about the source); RunFailed
    naming `what`, the cause and the fix when the second run fails that way too."""
    attempt = run()
    verdict = judge(attempt, kernels)
    if verdict.outcome in (Outcome.TOOL_FAULT, Outcome.CRASHED):
        note(f"compiling {what}: {verdict.reason}; that says nothing sure about its source: compiling it once more")
        attempt = run()
        verdict = judge(attempt, kernels)
        if verdict.outcome is Outcome.TOOL_FAULT:
            raise RunFailed(f"cannot compile {what}: {verdict.reason} (twice; nothing was cached); {verdict.fix}")
    return attempt, verdict


def has_diagnostic(log: str) -> bool:
    """Whether a compiler's log diagnoses the source (an error at a line of it, or ptxas's)."""
    return _DIAGNOSTIC.search(log) is not None


def fault_line(log: str) -> str | None:
    """The first line of a compiler's own (unindented, not a diagnostic) that says memory or disk ran
    out or a stage died, if any."""
    for line in log.splitlines():
        if line[:1].strip() and not _DIAGNOSTIC.match(line) and (
                _MEMORY_FAULT.search(line.strip()) or _DISK_FAULT.search(line)):
            return line.strip()
    return None


def _judge_success(attempt: Attempt, kernels: Sequence[str]) -> Verdict:
    """An exit code of 0 counts only with a cubin that is an ELF file and ptxas's report of each kernel."""
    tool, cubin = attempt.compiler, attempt.cubin
    if not cubin:
        return Verdict(Outcome.TOOL_FAULT, f"{tool} exited 0 but wrote {'no' if cubin is None else 'an empty'} "
                                           f"cubin", _install_fix(tool))
    if not cubin.startswith(_ELF_MAGIC):
        return Verdict(Outcome.TOOL_FAULT, f"{tool} exited 0 but wrote a cubin that is not an ELF file",
                       _install_fix(tool))
    reports = kernel_logs(attempt.log)
    missing = [kernel for kernel in kernels if kernel not in reports]
    if missing:
        said = f"it reported {', '.join(reports)}" if reports else f"its log began {attempt.log[:200]!r}"
        return Verdict(Outcome.TOOL_FAULT, f"{tool} exited 0 but ptxas reported no kernel {missing[0]} ({said})",
                       f"keep ptxas's report (-Xptxas -v) in the flags and name the template's kernel "
                       f"{{{{ name }}}}; else {_install_fix(tool)}")
    return Verdict(Outcome.COMPILED, reports=reports)


def _fix_for(said: str, tool: str, otherwise: str | None = None) -> str:
    """The fix that a fault's words point to: free disk, free memory, or `otherwise` (the installation)."""
    if _DISK_FAULT.search(said):
        return (f"free space in the temporary folder ({temporary_folder()}) or point $TMPDIR at a folder with room, "
                f"then run again")
    if _MEMORY_FAULT.search(said):
        return _MEMORY_FIX
    return otherwise or _install_fix(tool)


def _install_fix(tool: str) -> str:
    return f"check the CUDA installation ({tool} --version, and which {tool} comes first on PATH), then run again"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def temporary_folder() -> str:
    """Where a compiler writes its intermediate files, for messages about it."""
    try:
        return tempfile.gettempdir()
    except OSError:  # none usable
        return os.environ.get("TMPDIR", "/tmp")
