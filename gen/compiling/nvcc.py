"""nvcc as a compiler (`Nvcc`, see compilers.Compiler): source to cubin with ptxas's report
(`-Xptxas -v`), one run a process of its own with a deadline, its questions (--version, the
architectures it compiles for) too. Several variants compile in one run, each in a namespace of its
own (extern "C" keeps each kernel's symbol), which halves nvcc's cost per variant.

Each run has a temporary folder of its own that is nvcc's $TMPDIR too, so its intermediate files
go with the folder whatever stops it. A run stopped by an interrupt raises Interrupted.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping, NoReturn, Sequence

from ..core.errors import RunFailed, ToolMissing
from ..core.processes import ProcessGroup
from .deadlines import query_timeout
from .programs import one_program
from .verdict import Attempt, temporary_folder


@dataclass(frozen=True)
class Nvcc:
    """The nvcc found on PATH (else under $CUDA_HOME, $CUDA_PATH or /usr/local/cuda), looked up at
    each use."""

    name: ClassVar[str] = "nvcc"
    batches: ClassVar[bool] = True  # several variants to one run, each in a namespace of its own
    runs_per_thread: ClassVar[int] = 1  # a run's start-up costs ~0.4 s: batches as large as can be

    def version(self) -> str:
        return nvcc_version()

    def archs(self) -> tuple[str, ...]:
        return supported_archs()

    def compile(self, sources: Mapping[str, str], arch: str, flags: Sequence[str], deadline_s: float,
                children: ProcessGroup) -> Attempt:
        """One nvcc run for these kernels (name -> source), several in namespaces of their own."""
        name, source = one_program(sources)
        command = ["-cubin", f"-arch={arch}", "-Xptxas", "-v", *flags]
        return _run(source, name, command, deadline_s, children)


def nvcc_path() -> str | None:
    """The nvcc on PATH, else under $CUDA_HOME, $CUDA_PATH or /usr/local/cuda: looked up again
    whenever one of them changes (a search of PATH costs more than a cache hit)."""
    return _nvcc_under(os.environ.get("PATH"), os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"))


@functools.lru_cache(maxsize=16)
def _nvcc_under(path: str | None, cuda_home: str | None, cuda_path: str | None) -> str | None:
    found = shutil.which("nvcc", path=path)
    if found:
        return found
    for root in (cuda_home, cuda_path, "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").exists():
            return str(Path(root) / "bin" / "nvcc")
    return None


def require_nvcc() -> str:
    path = nvcc_path()
    if path is None:
        raise ToolMissing("nvcc not found: install the CUDA toolkit and put its bin/ on PATH (or set CUDA_HOME)")
    return path


def nvcc_version() -> str:
    """'13.0.88' from `nvcc --version` (asked once per nvcc, with a deadline)."""
    return _version_of(require_nvcc())


def supported_archs() -> tuple[str, ...]:
    """The architectures the installed nvcc compiles for (`nvcc --list-gpu-code`, asked once per nvcc)."""
    return _archs_of(require_nvcc())


@functools.cache
def _version_of(nvcc: str) -> str:
    output = _ask(nvcc, "--version")
    match = re.search(r"release [\d.]+, V([\d.]+)", output)
    return match.group(1) if match else output.strip().splitlines()[-1]


@functools.cache
def _archs_of(nvcc: str) -> tuple[str, ...]:
    archs = tuple(dict.fromkeys(re.findall(r"\bsm_\d+[af]?\b", _ask(nvcc, "--list-gpu-code"))))
    if not archs:
        _refuse_tool(nvcc, "--list-gpu-code", "named no sm_ architecture")
    return archs


def _ask(nvcc: str, option: str) -> str:
    """What `nvcc OPTION` prints, within its deadline; RunFailed when it does not answer. It too
    writes temporary files: in a folder of tilegen's own, as a compile does."""
    deadline = query_timeout()
    try:
        with tempfile.TemporaryDirectory(prefix="tilegen-") as scratch:
            done = ProcessGroup().run([nvcc, option], timeout=deadline, env=dict(os.environ, TMPDIR=scratch))
    except subprocess.TimeoutExpired:
        _refuse_tool(nvcc, option, f"did not answer within {deadline:g} s and was killed")
    except OSError as error:
        _refuse_tool(nvcc, option, f"could not be run ({error.strerror or error})")
    if done.returncode != 0 or not done.stdout.strip():
        said = next((line.strip() for line in done.stderr.splitlines() if line.strip()), "")
        _refuse_tool(nvcc, option, f"printed {'nothing' if not done.stdout.strip() else 'an error'} (exit code "
                                   f"{done.returncode}{f', {said!r}' if said else ''})")
    return done.stdout


def _refuse_tool(nvcc: str, option: str, what: str) -> NoReturn:
    raise RunFailed(f"`nvcc {option}` ({nvcc}) {what}; check the CUDA installation, or put a working nvcc first "
                    f"on PATH") from None


def _run(source: str, name: str, options: list[str], deadline_s: float, children: ProcessGroup) -> Attempt:
    """One nvcc run with these options on `source` (written as NAME.cu), to NAME.cubin, in a
    temporary folder of its own that is nvcc's $TMPDIR too (so a $TMPDIR that does not exist is no
    matter). Interrupted if its group was killed."""
    nvcc = require_nvcc()
    started = time.perf_counter()

    def attempt(**outcome: Any) -> Attempt:
        return Attempt("nvcc", seconds=round(time.perf_counter() - started, 3), **outcome)

    try:
        work = tempfile.mkdtemp(prefix="tilegen-")
    except OSError as error:
        return attempt(log="", problem=f"no temporary folder could be made in {temporary_folder()} "
                                       f"({error.strerror or error})")
    try:
        source_path, cubin_path = Path(work) / f"{name}.cu", Path(work) / f"{name}.cubin"
        try:
            source_path.write_text(source)
        except OSError as error:
            return attempt(log="", problem=f"the source could not be written in {work} ({error.strerror})")
        command = [nvcc, *options, "-o", str(cubin_path), str(source_path)]
        try:
            done = children.run(command, timeout=deadline_s, env=dict(os.environ, TMPDIR=work))
        except subprocess.TimeoutExpired:
            return attempt(log="", deadline_s=deadline_s)
        except OSError as error:
            return attempt(log="", problem=f"{nvcc} could not be run ({error.strerror})")
        log = (done.stdout + done.stderr).replace(work + "/", "")
        return attempt(log=log, cubin=_read_if_there(cubin_path), exit_code=done.returncode)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _read_if_there(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
