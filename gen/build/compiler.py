"""Source -> cubin with nvcc, resources read from ptxas, results cached, many variants at once.

Needs no GPU. The cache key is a hash of the source, the options and the nvcc version, so a
repeated run compiles nothing. Variants of families that allow it (`Family.compile_together`) are
compiled several to one nvcc run, each in a namespace of its own, which halves nvcc's cost per
variant; a batch that fails is compiled again one by one, so each error lands on its variant.

Each compiler run is judged before anything of it is kept (`judge`, which knows a compiler only by
the `Attempt` it fills in, so that an in-process compiler can share it):
- a usable cubin and ptxas's report of each kernel: compiled, and cached;
- a diagnostic of the source (`kernel.cu(12): error ...`, `ptxas error ...`): a compile error, which
  is a result (`Compiled.ok` is False, with the log), not an exception; cached;
- past its deadline ($TILEGEN_COMPILE_TIMEOUT): its whole session is killed, and the variant is a
  compile error that says so; not cached;
- anything else (a compiler killed, short of memory or disk, crashed, or successful without a
  usable cubin) says nothing about the source: never cached; compiled once more, and a second such
  failure stops the run (RunFailed) naming the variant, the cause and the fix.
The cache proves an entry before trusting it (`CompileCache`); one that fails the proof is removed,
with a note on stderr, and compiled again. A compile stopped by an interrupt raises Interrupted and
leaves nothing in the cache. Every nvcc run has a deadline, its queries (--version, the
architectures it supports) included.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Callable, Iterable, NoReturn, Sequence

from ..core.version import __version__
from ..core.errors import RunFailed, ToolMissing, UsageError
from ..families import get_family
from ..families.family import Family
from ..core.paths import cache_dir
from ..core.processes import ProcessGroup
from ..core import nvidia_smi
from .render import render, template_hash
from ..core.results import Row, Status
from ..families.variant import Variant

DEFAULT_ARCH = "sm_90"
DEFAULT_FLAGS = ("-lineinfo",)
MAX_BATCH = 8  # variants per nvcc run: enough to halve the per-variant cost, few enough to keep cores busy
TIMEOUT_ENV = "TILEGEN_COMPILE_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0  # the largest sgemm variants compile in seconds: ten minutes is a hang
QUERY_TIMEOUT_S = 30.0  # `nvcc --version` answers at once; at most the compile deadline
CACHE_FORMAT = 2  # part of every cache key: records of another format are never read as entries
_ARCH_PATTERN = re.compile(r"^sm_\d{2,3}[af]?$")
_ENTRY = re.compile(r"^ptxas info\s*: Compiling entry function '(\w+)'", re.M)
_ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel."""

    registers: int
    static_shared_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


@dataclass(frozen=True)
class CompileOptions:
    arch: str = DEFAULT_ARCH
    flags: tuple[str, ...] = DEFAULT_FLAGS
    cache: Path = field(default_factory=lambda: cubin_cache())
    jobs: int = field(default_factory=lambda: usable_cores())  # capped at usable_cores(): more would only wait
    timeout_s: float | None = None  # one compile's deadline; None: $TILEGEN_COMPILE_TIMEOUT, else DEFAULT_TIMEOUT_S

    @classmethod
    def local(cls, arch: str | None = None, jobs: int | None = None) -> "CompileOptions":
        """Options for this machine: the given architecture or the local GPU's, refused unless the
        installed nvcc compiles for it; `jobs` or one per core."""
        chosen = cls(arch=arch or local_arch())
        check_arch(chosen.arch)
        return replace(chosen, jobs=jobs) if jobs else chosen

    def __post_init__(self) -> None:
        if not isinstance(self.arch, str) or not _ARCH_PATTERN.match(self.arch):
            raise UsageError(f"--arch {self.arch!r} is not a GPU architecture like sm_90 or sm_90a")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise UsageError(f"--jobs must be a whole number of parallel compiles, at least 1; got {self.jobs!r}")
        object.__setattr__(self, "jobs", min(self.jobs, usable_cores()))
        object.__setattr__(self, "timeout_s", compile_timeout() if self.timeout_s is None
                           else _seconds(self.timeout_s, "timeout_s"))


@dataclass(frozen=True)
class Compiled:
    """The outcome of compiling one variant."""

    variant: Variant
    arch: str
    cubin: Path | None  # None when the compile failed; a batch's cubin holds its other kernels too
    resources: Resources | None
    seconds: float  # nvcc's wall time for this variant (its share of a batch), kept in the cache
    log: str
    cached: bool

    @property
    def ok(self) -> bool:
        return self.cubin is not None


def compile_variants(variants: Iterable[Variant], options: CompileOptions,
                     on_done: Callable[[Compiled], None] | None = None) -> list[Compiled]:
    """Compile every variant, `options.jobs` nvcc runs at a time; results in the order of `variants`.
    `on_done` is called as each batch finishes (from this thread)."""
    variants = list(variants)
    unique = list(dict.fromkeys(variants))
    require_nvcc()
    check_arch(options.arch)
    children = ProcessGroup()
    size = batch_size(len(unique), options.jobs)
    batches = [unique[i:i + size] for i in range(0, len(unique), size)]
    results: dict[Variant, Compiled] = {}
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        futures = [pool.submit(compile_batch, batch, options, children) for batch in batches]
        try:
            for future in futures:
                for compiled in future.result():
                    results[compiled.variant] = compiled
                    if on_done:
                        on_done(compiled)
        except BaseException:
            children.kill_all()  # Ctrl-C, or a run that cannot go on: no nvcc run goes on behind our back
            for future in futures:
                future.cancel()
            raise
    return [results[v] for v in variants]


def batch_size(waiting: int, jobs: int) -> int:
    """Variants per nvcc run: one while there are no more than cores, up to MAX_BATCH beyond."""
    return max(1, min(MAX_BATCH, math.ceil(waiting / max(1, jobs))))


def compile_variant(variant: Variant, options: CompileOptions) -> Compiled:
    """Render and compile one variant, or take it from the cache."""
    return compile_batch([variant], options, ProcessGroup())[0]


def compile_batch(variants: Sequence[Variant], options: CompileOptions, children: ProcessGroup) -> list[Compiled]:
    """Render the variants, take what the cache proves, and compile the rest: together in one nvcc
    run where their family allows it, else one by one. Results in the order of `variants`."""
    check_arch(options.arch)
    cache = CompileCache(options.cache)
    sources = {v: render(v) for v in variants}
    keys = {v: cache_key(source, options) for v, source in sources.items()}
    results: dict[Variant, Compiled] = {}
    for variant in sources:
        entry = cache.load(keys[variant], variant.name)
        if entry is not None:
            results[variant] = _compiled(variant, options, cache, entry, cached=True)
    missing = [v for v in sources if v not in results]
    together = [v for v in missing if get_family(v.family).compile_together]
    if len(together) > 1:
        results.update(_compile_together(together, sources, keys, options, cache, children))
    for variant in (v for v in missing if v not in results):
        results[variant] = _compile_alone(variant, sources[variant], keys[variant], options, cache, children)
    return [results[v] for v in variants]


def provenance(options: CompileOptions, family: Family) -> dict[str, str]:
    """What made a compiled row: architecture, nvcc, the template's hash and tilegen's version."""
    return {"arch": options.arch, "nvcc": nvcc_version(), "template_hash": template_hash(family),
            "tilegen": __version__}


def compiled_row(compiled: Compiled, shape: str = "", **extra: object) -> Row:
    """A row with the compile outcome and resources; later stages fill in the rest."""
    variant = compiled.variant
    row = Row(variant.name, variant.family, variant.params(),
              Status.COMPILED if compiled.ok else Status.COMPILE_ERROR, shape=shape,
              message="" if compiled.ok else compiled.log.strip(), compile_seconds=compiled.seconds,
              dynamic_shared_bytes=variant.dynamic_shared_bytes, **extra)
    if compiled.resources:
        row.registers = compiled.resources.registers
        row.static_shared_bytes = compiled.resources.static_shared_bytes
        row.spill_bytes = compiled.resources.spill_bytes
        row.stack_bytes = compiled.resources.stack_bytes
    return row


def cache_key(source: str, options: CompileOptions) -> str:
    text = "\0".join([source, options.arch, *options.flags, nvcc_version(), f"cache format {CACHE_FORMAT}"])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def cubin_cache() -> Path:
    """The compile cache's folder: cubins/ in tilegen's cache folder."""
    return cache_dir() / "cubins"


def usable_cores() -> int:
    """The cores this process may run on: the most nvcc runs that can make progress at once."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity masks on this system
        return os.cpu_count() or 1


def compile_timeout() -> float:
    """The deadline of one compile: $TILEGEN_COMPILE_TIMEOUT seconds, else DEFAULT_TIMEOUT_S."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    return _seconds(text, f"${TIMEOUT_ENV}") if text else DEFAULT_TIMEOUT_S


def parse_ptxas(log: str) -> Resources:
    """Registers, shared bytes, spills and stack from `-Xptxas -v` output (one kernel)."""
    def number(pattern: str) -> int:
        match = re.search(pattern, log)
        return int(match.group(1)) if match else 0

    return Resources(
        registers=number(r"Used (\d+) registers"),
        static_shared_bytes=number(r"(\d+) bytes smem"),
        spill_store_bytes=number(r"(\d+) bytes spill stores"),
        spill_load_bytes=number(r"(\d+) bytes spill loads"),
        stack_bytes=number(r"(\d+) bytes stack frame"),
    )


def kernel_logs(log: str) -> dict[str, str]:
    """ptxas's report of a multi-kernel compile, split by kernel: name -> its lines."""
    starts = list(_ENTRY.finditer(log))
    return {m.group(1): log[m.start(): starts[i + 1].start() if i + 1 < len(starts) else len(log)]
            for i, m in enumerate(starts)}


# ---- verdicts: what a compiler run says about the source, for any compiler -----------------------------

class Outcome(StrEnum):
    COMPILED = "compiled"  # a usable cubin and ptxas's report of each kernel: cached
    SOURCE_ERROR = "source error"  # the compiler's diagnostic of the source: a compile error, cached
    TIMED_OUT = "timed out"  # killed at its deadline: a compile error that says so, never cached
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
    if verdict.outcome is Outcome.TOOL_FAULT:
        _note(f"compiling {what}: {verdict.reason}; that says nothing about its source: compiling it once more")
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
        return Verdict(Outcome.TOOL_FAULT, f"{tool} exited 0 but ptxas reported no kernel {missing[0]}",
                       f"keep ptxas's report (-Xptxas -v) in the flags and name the template's kernel "
                       f"{{{{ name }}}}; else {_install_fix(tool)}")
    return Verdict(Outcome.COMPILED, reports=reports)


def _fix_for(said: str, tool: str, otherwise: str | None = None) -> str:
    """The fix that a fault's words point to: free disk, free memory, or `otherwise` (the installation)."""
    if _DISK_FAULT.search(said):
        return (f"free space in the temporary folder ({_temporary_folder()}) or point $TMPDIR at a folder with room, "
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


def _temporary_folder() -> str:
    try:
        return tempfile.gettempdir()
    except OSError:  # none usable
        return os.environ.get("TMPDIR", "/tmp")


# ---- the cache: every entry proven before it is trusted, for any compiler ------------------------------

_RECORD_NAME = re.compile(r"^[0-9a-f]{32}\.json$")
_CUBIN_NAME = re.compile(r"^[0-9a-f]{32}\.cubin$")
# Every name tilegen gives a file in the cache: records, cubins, older tilegens' batch cubins, and
# the temporaries of writes cut short. Nothing else there is tilegen's to remove.
_OWN_NAME = re.compile(r"^(?:batch-)?[0-9a-f]{32}\.(?:json|cubin)(?:\.[a-z0-9_]{8})?$")


@dataclass(frozen=True)
class CubinFile:
    """A cubin in the cache, named after its content's sha256: a batch's variants share one."""

    name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class CacheEntry:
    """One variant's compile as the cache keeps it: a cubin and its resources, or a compile error."""

    log: str
    seconds: float
    cubin: CubinFile | None = None  # None: a compile error, whose log diagnoses the source
    resources: Resources | None = None


class DamagedEntry(Exception):
    """A cache record that fails its proof; the message says how. `cubin`: a cubin it names that is
    not what was compiled, and no entry can use."""

    def __init__(self, problem: str, cubin: Path | None = None):
        super().__init__(problem)
        self.cubin = cubin


@dataclass(frozen=True)
class CacheSummary:
    folder: Path
    entries: int  # proven entries
    failed: int  # of them, compile errors
    damaged: int  # records that fail their proof, and stray files: cubins no entry names, cut-short writes
    bytes: int  # of every file tilegen wrote there


class CompileCache:
    """A folder of entries. An entry is a record, `<key>.json`, that names its cubin with the cubin's
    sha256 and size; the cubin is written first and the record last, each atomically, so a record
    whose cubin matches it is a whole entry. `load` proves an entry before it returns it."""

    def __init__(self, folder: Path):
        self.folder = folder

    def load(self, key: str, what: str) -> CacheEntry | None:
        """The proven entry under `key`, else None. A damaged one is removed, with a note naming `what`."""
        record = self.folder / f"{key}.json"
        try:
            return self._proven(record, key)
        except FileNotFoundError:
            return None
        except DamagedEntry as damage:
            _note(f"the compile cache's entry for {what} was damaged ({damage}): removed, compiling it again")
            record.unlink(missing_ok=True)
            if damage.cubin is not None:
                damage.cubin.unlink(missing_ok=True)
            return None

    def put_cubin(self, cubin: bytes) -> CubinFile:
        digest = hashlib.sha256(cubin).hexdigest()
        named = CubinFile(f"{digest[:32]}.cubin", digest, len(cubin))
        self._write(self.folder / named.name, cubin)
        return named

    def put(self, key: str, entry: CacheEntry) -> None:
        """Record an entry; its cubin must be in the cache already (`put_cubin`)."""
        record = {"format": CACHE_FORMAT, "key": key, "seconds": entry.seconds, "log": entry.log,
                  "cubin": asdict(entry.cubin) if entry.cubin else None,
                  "resources": asdict(entry.resources) if entry.resources else None}
        self._write(self.folder / f"{key}.json", json.dumps(record).encode())

    def summary(self) -> CacheSummary:
        proven, failed, damaged, own, _ = self._survey()
        return CacheSummary(self.folder, len(proven), len(failed), len(damaged), sum(_size(p) for p in own))

    def purge_failed(self) -> tuple[int, int]:
        """Remove the compile errors and the damaged entries (and stray files); their counts."""
        _, failed, damaged, _, _ = self._survey()
        for path in failed + damaged:
            path.unlink(missing_ok=True)
        return len(failed), len(damaged)

    def clear(self) -> tuple[int, int]:
        """Remove every file tilegen wrote here, and nothing else: how many entries it held, and
        how many other files stay."""
        _, _, _, own, others = self._survey()
        for path in own:
            path.unlink(missing_ok=True)
        return sum(bool(_RECORD_NAME.match(p.name)) for p in own), len(others)

    def _survey(self) -> tuple[list[Path], list[Path], list[Path], list[Path], list[Path]]:
        """The files here: proven entries' records, compile errors among them, damaged records and
        stray files, every file tilegen named, and the files it did not."""
        proven: list[Path] = []
        failed: list[Path] = []
        damaged: list[Path] = []
        own: list[Path] = []
        others: list[Path] = []
        used: set[str] = set()
        files = sorted(p for p in self.folder.iterdir() if p.is_file()) if self.folder.is_dir() else []
        for path in files:
            (own if _OWN_NAME.match(path.name) else others).append(path)
        for record in (p for p in own if _RECORD_NAME.match(p.name)):
            try:
                entry = self._proven(record, record.stem)
            except (DamagedEntry, FileNotFoundError):
                damaged.append(record)
                continue
            proven.append(record)
            if entry.cubin is None:
                failed.append(record)
            else:
                used.add(entry.cubin.name)
        damaged += [p for p in own if not _RECORD_NAME.match(p.name) and p.name not in used]
        return proven, failed, damaged, own, others

    def _proven(self, record: Path, key: str) -> CacheEntry:
        """The entry `record` holds, if it proves whole: DamagedEntry says why not."""
        try:
            text = record.read_bytes()
        except FileNotFoundError:
            raise
        except OSError as error:
            raise DamagedEntry(f"cannot be read: {error.strerror}") from None
        try:
            fields_ = json.loads(text)
        except ValueError:
            raise DamagedEntry("empty" if not text.strip() else "not JSON") from None
        if not isinstance(fields_, dict):
            raise DamagedEntry(f"a JSON {type(fields_).__name__}, not a record")
        if fields_.get("format") != CACHE_FORMAT or fields_.get("key") != key:
            raise DamagedEntry("not a record of this tilegen's for this entry")
        log, seconds = _field(fields_, "log", str), _field(fields_, "seconds", (int, float))
        if fields_.get("cubin") is None:
            if not has_diagnostic(log):
                raise DamagedEntry("a compile error without the compiler's diagnostic")
            return CacheEntry(log, seconds)
        cubin = _cubin_file(_field(fields_, "cubin", dict))
        resources = _resources(_field(fields_, "resources", dict))
        self._prove_cubin(cubin)
        return CacheEntry(log, seconds, cubin, resources)

    def _prove_cubin(self, cubin: CubinFile) -> None:
        path = self.folder / cubin.name
        try:
            found = path.stat()
        except FileNotFoundError:
            raise DamagedEntry(f"its cubin {cubin.name} is missing") from None
        if found.st_size != cubin.size:
            raise DamagedEntry(f"its cubin {cubin.name} has {found.st_size} bytes, not {cubin.size}", path)
        if _sha256_of(path, found.st_size, found.st_mtime_ns, found.st_ino) != cubin.sha256:
            raise DamagedEntry(f"its cubin {cubin.name} has other contents than were compiled", path)

    def _write(self, path: Path, data: bytes) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, data)
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise RunFailed(f"cannot write the compile cache {self.folder} ({error.strerror}); free space there "
                                f"(or set $TILEGEN_CACHE to a folder with room), then run again") from None
            raise UsageError(f"cannot write the compile cache {self.folder} ({error.strerror}); set $TILEGEN_CACHE "
                             f"to a writable folder") from None


def cache_summary(folder: Path) -> CacheSummary:
    return CompileCache(folder).summary()


def purge_failed(folder: Path) -> tuple[int, int]:
    """Remove the cached compile errors and damaged entries (the next run compiles those variants
    again): how many of each."""
    return CompileCache(folder).purge_failed()


def clear_cache(folder: Path) -> tuple[int, int]:
    """Remove every cached compile, and only tilegen's files: how many entries, and how many other files kept."""
    return CompileCache(folder).clear()


def _field(record: dict, name: str, kind: type | tuple[type, ...]) -> Any:
    value = record.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DamagedEntry(f"its field {name!r} is {'missing' if value is None else 'malformed'}")
    return value


def _cubin_file(fields_: dict) -> CubinFile:
    name, sha256, size = fields_.get("name"), fields_.get("sha256"), fields_.get("size")
    if not (isinstance(name, str) and _CUBIN_NAME.match(name) and isinstance(sha256, str)
            and isinstance(size, int) and not isinstance(size, bool)):
        raise DamagedEntry("its field 'cubin' is malformed")
    return CubinFile(name, sha256, size)


def _resources(fields_: dict) -> Resources:
    names = [f.name for f in fields(Resources)]
    if sorted(fields_) != sorted(names) or not all(type(fields_[n]) is int and fields_[n] >= 0 for n in names):
        raise DamagedEntry("its field 'resources' is malformed")
    return Resources(**fields_)


@functools.lru_cache(maxsize=4096)
def _sha256_of(path: Path, size: int, mtime_ns: int, inode: int) -> str:
    """A file's sha256, kept while its size, time and inode stay (a batch's cubin proves 8 entries)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _write_atomically(path: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so a reader never sees half a file."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# ---- nvcc ----------------------------------------------------------------------------------------

def nvcc_path() -> str | None:
    """The nvcc on PATH, else under $CUDA_HOME, $CUDA_PATH or /usr/local/cuda: looked up each time,
    as PATH may change."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
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


def check_arch(arch: str) -> None:
    """UsageError unless the installed nvcc compiles for `arch` (sm_90a and sm_100f by their base)."""
    archs = supported_archs()
    base = re.sub(r"[af]$", "", arch)
    if arch not in archs and base not in archs:
        raise UsageError(f"--arch {arch}: nvcc {nvcc_version()} does not compile for it; it compiles for "
                         f"{', '.join(archs)}")


@functools.cache
def local_arch() -> str:
    """The architecture of the first local GPU (via nvidia-smi), else sm_90."""
    try:
        major, minor = nvidia_smi.query(["compute_cap"])[0].split(".")
        return f"sm_{int(major)}{int(minor)}"
    except (ValueError, IndexError):
        return DEFAULT_ARCH


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
    deadline = min(QUERY_TIMEOUT_S, compile_timeout())
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


def _compile_alone(variant: Variant, source: str, key: str, options: CompileOptions, cache: CompileCache,
                   children: ProcessGroup) -> Compiled:
    attempt, verdict = judged(lambda: _run_nvcc(source, variant.name, options, children), [variant.name],
                              variant.name)
    if verdict.outcome is Outcome.TIMED_OUT:
        return Compiled(variant, options.arch, None, None, attempt.seconds,
                        f"{verdict.reason}; not cached ({verdict.fix})", cached=False)
    if verdict.outcome is Outcome.SOURCE_ERROR:
        entry = CacheEntry(attempt.log, attempt.seconds)
    else:
        entry = CacheEntry(attempt.log, attempt.seconds, cache.put_cubin(attempt.cubin),
                           parse_ptxas(verdict.reports[variant.name]))
    cache.put(key, entry)
    return _compiled(variant, options, cache, entry, cached=False)


def _compile_together(variants: list[Variant], sources: dict[Variant, str], keys: dict[Variant, str],
                      options: CompileOptions, cache: CompileCache, children: ProcessGroup) -> dict[Variant, Compiled]:
    """One nvcc run for several variants, each in its own namespace (extern "C" keeps its symbol).
    Empty unless the batch compiled: the caller compiles them one by one, to say whose error it is."""
    source = "".join(f"namespace tilegen_variant_{i} {{\n{sources[v]}\n}}  // namespace\n\n"
                     for i, v in enumerate(variants))
    batch = hashlib.sha256("\0".join(keys[v] for v in variants).encode()).hexdigest()[:8]
    attempt = _run_nvcc(source, f"batch_{batch}", options, children)
    verdict = judge(attempt, [v.name for v in variants])
    if verdict.outcome is not Outcome.COMPILED:
        return {}
    cubin = cache.put_cubin(attempt.cubin)
    results = {}
    for variant in variants:
        report = verdict.reports[variant.name]
        entry = CacheEntry(report, round(attempt.seconds / len(variants), 3), cubin, parse_ptxas(report))
        cache.put(keys[variant], entry)
        results[variant] = _compiled(variant, options, cache, entry, cached=False)
    return results


def _run_nvcc(source: str, name: str, options: CompileOptions, children: ProcessGroup) -> Attempt:
    """One nvcc run to a cubin with ptxas's report, in a temporary folder of its own that is nvcc's
    $TMPDIR too, so its intermediate files go with the folder whatever stops it (and a $TMPDIR that
    does not exist is no matter). Interrupted if its group was killed."""
    nvcc = require_nvcc()
    started = time.perf_counter()

    def attempt(**outcome: Any) -> Attempt:
        return Attempt("nvcc", seconds=round(time.perf_counter() - started, 3), **outcome)

    try:
        work = tempfile.mkdtemp(prefix="tilegen-")
    except OSError as error:
        return attempt(log="", problem=f"no temporary folder could be made in {_temporary_folder()} "
                                       f"({error.strerror or error})")
    try:
        source_path, cubin_path = Path(work) / f"{name}.cu", Path(work) / f"{name}.cubin"
        try:
            source_path.write_text(source)
        except OSError as error:
            return attempt(log="", problem=f"the source could not be written in {work} ({error.strerror})")
        command = [nvcc, "-cubin", f"-arch={options.arch}", "-Xptxas", "-v", *options.flags,
                   "-o", str(cubin_path), str(source_path)]
        try:
            done = children.run(command, timeout=options.timeout_s, env=dict(os.environ, TMPDIR=work))
        except subprocess.TimeoutExpired:
            return attempt(log="", deadline_s=options.timeout_s)
        except OSError as error:
            return attempt(log="", problem=f"{nvcc} could not be run ({error.strerror})")
        log = (done.stdout + done.stderr).replace(work + "/", "")
        return attempt(log=log, cubin=_read_if_there(cubin_path), exit_code=done.returncode)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compiled(variant: Variant, options: CompileOptions, cache: CompileCache, entry: CacheEntry,
              cached: bool) -> Compiled:
    cubin = cache.folder / entry.cubin.name if entry.cubin else None
    return Compiled(variant, options.arch, cubin, entry.resources, entry.seconds, entry.log, cached)


def _read_if_there(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


# ---- helpers ---------------------------------------------------------------------------------------

def _seconds(value: Any, what: str) -> float:
    """A positive, finite number of seconds, from a number or its text; UsageError otherwise."""
    try:
        seconds = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{what} must be a positive, finite number of seconds, got {value!r}")
    return seconds


def _note(text: str) -> None:
    """One line on stderr that the user should know, while the run goes on."""
    try:
        sys.stderr.write(f"tilegen: note: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # no terminal left to say it on
        pass
