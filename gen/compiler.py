"""Source -> cubin with nvcc, resources read from ptxas, results cached, many variants at once.

Needs no GPU. The cache key is a hash of the source, the options and the nvcc version, so a
repeated run compiles nothing. A compile error is a result (`Compiled.ok` is False, with the
log), not an exception. Variants of families that allow it (`Family.compile_together`) are
compiled several to one nvcc run, each in a namespace of its own, which halves nvcc's cost per
variant; a batch that fails is compiled again one by one, so each error lands on its variant.
A compile stopped by an interrupt raises Interrupted and leaves nothing in the cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from . import __version__
from .errors import ToolMissing, UsageError
from .families import get_family
from .family import Family
from .paths import cache_dir
from .processes import ProcessGroup
from .render import render, template_hash
from .results import Row, Status
from .variant import Variant

DEFAULT_ARCH = "sm_90"
DEFAULT_FLAGS = ("-lineinfo",)
MAX_BATCH = 8  # variants per nvcc run: enough to halve the per-variant cost, few enough to keep cores busy
_ARCH_PATTERN = re.compile(r"^sm_\d{2,3}[af]?$")
_ENTRY = re.compile(r"^ptxas info\s*: Compiling entry function '(\w+)'", re.M)


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
    cache: Path = field(default_factory=lambda: cache_dir() / "cubins")
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)

    @classmethod
    def local(cls, arch: str | None = None, jobs: int | None = None) -> "CompileOptions":
        """Options for this machine: the given architecture or the local GPU's, `jobs` or one per core."""
        chosen = cls(arch=arch or local_arch())
        return replace(chosen, jobs=jobs) if jobs else chosen

    def __post_init__(self) -> None:
        if not isinstance(self.arch, str) or not _ARCH_PATTERN.match(self.arch):
            raise UsageError(f"--arch {self.arch!r} is not a GPU architecture like sm_90 or sm_90a")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise UsageError(f"--jobs must be a whole number of parallel compiles, at least 1; got {self.jobs!r}")


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
            children.kill_all()  # Ctrl-C: no nvcc run goes on behind our back
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
    """Render the variants, take what the cache has, and compile the rest: together in one nvcc
    run where their family allows it, else one by one. Results in the order of `variants`."""
    sources = {v: render(v) for v in variants}
    results: dict[Variant, Compiled] = {}
    for variant, source in sources.items():
        record_path = options.cache / f"{cache_key(source, options)}.json"
        if record_path.exists():
            results[variant] = _from_record(variant, options, json.loads(record_path.read_text()), cached=True)
    missing = [v for v in variants if v not in results]
    together = [v for v in missing if get_family(v.family).compile_together]
    if len(together) > 1:
        results.update(_compile_together(together, sources, options, children))
    for variant in (v for v in missing if v not in results):
        results[variant] = _compile_alone(variant, sources[variant], options, children)
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
    text = "\0".join([source, options.arch, *options.flags, nvcc_version()])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


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


# ---- nvcc ----------------------------------------------------------------------------------------

@functools.cache
def nvcc_path() -> str | None:
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


@functools.cache
def nvcc_version() -> str:
    """'13.0.88' from `nvcc --version`."""
    output = subprocess.run([require_nvcc(), "--version"], capture_output=True, text=True).stdout
    match = re.search(r"release [\d.]+, V([\d.]+)", output)
    return match.group(1) if match else output.strip().splitlines()[-1]


@functools.cache
def local_arch() -> str:
    """The architecture of the first local GPU (via nvidia-smi), else sm_90."""
    try:
        output = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout
        major, minor = output.splitlines()[0].strip().split(".")
        return f"sm_{int(major)}{int(minor)}"
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return DEFAULT_ARCH


def _compile_alone(variant: Variant, source: str, options: CompileOptions, children: ProcessGroup) -> Compiled:
    key = cache_key(source, options)
    done = _run_nvcc(source, variant.name, options, children)
    entry = {"seconds": done.seconds, "log": done.log, "ok": done.ok, "cubin": f"{key}.cubin"}
    if done.ok:
        entry["resources"] = asdict(parse_ptxas(done.log))
    _store(options, key, entry, done.cubin)
    return _from_record(variant, options, entry, cached=False)


def _compile_together(variants: list[Variant], sources: dict[Variant, str], options: CompileOptions,
                      children: ProcessGroup) -> dict[Variant, Compiled]:
    """One nvcc run for several variants, each in its own namespace (extern "C" keeps its symbol).
    Empty when the batch fails: the caller compiles them one by one to say whose error it is."""
    source = "".join(f"namespace tilegen_variant_{i} {{\n{sources[v]}\n}}  // namespace\n\n"
                     for i, v in enumerate(variants))
    batch_key = hashlib.sha256("\0".join(cache_key(sources[v], options) for v in variants).encode()).hexdigest()[:32]
    done = _run_nvcc(source, f"batch_{batch_key[:8]}", options, children)
    logs = kernel_logs(done.log)
    if not done.ok or any(v.name not in logs for v in variants):
        return {}
    cubin_name = f"batch-{batch_key}.cubin"
    results = {}
    for i, variant in enumerate(variants):
        entry = {"seconds": round(done.seconds / len(variants), 3), "log": logs[variant.name], "ok": True,
                 "cubin": cubin_name, "resources": asdict(parse_ptxas(logs[variant.name]))}
        _store(options, cache_key(sources[variant], options), entry, done.cubin if i == 0 else None)
        results[variant] = _from_record(variant, options, entry, cached=False)
    return results


@dataclass(frozen=True)
class _NvccRun:
    ok: bool
    log: str
    seconds: float
    cubin: bytes | None


def _run_nvcc(source: str, name: str, options: CompileOptions, children: ProcessGroup) -> _NvccRun:
    """One nvcc run to a cubin with ptxas's report; Interrupted if its group was killed."""
    with tempfile.TemporaryDirectory(prefix="tilegen-") as work:
        source_path, cubin_path = Path(work) / f"{name}.cu", Path(work) / f"{name}.cubin"
        source_path.write_text(source)
        command = [require_nvcc(), "-cubin", f"-arch={options.arch}", "-Xptxas", "-v", *options.flags,
                   "-o", str(cubin_path), str(source_path)]
        start = time.perf_counter()
        done = children.run(command)
        seconds = round(time.perf_counter() - start, 3)
        log = (done.stdout + done.stderr).replace(work + "/", "")
        ok = done.returncode == 0
        return _NvccRun(ok, log, seconds, cubin_path.read_bytes() if ok else None)


def _store(options: CompileOptions, key: str, entry: dict, cubin: bytes | None) -> None:
    """Write a cache entry: the cubin first, the record last (its presence marks the entry complete)."""
    try:
        options.cache.mkdir(parents=True, exist_ok=True)
        if cubin is not None:
            _write_atomically(options.cache / entry["cubin"], cubin)
        _write_atomically(options.cache / f"{key}.json", json.dumps(entry).encode())
    except OSError as error:
        raise UsageError(f"cannot write the compile cache {options.cache} ({error.strerror}); set $TILEGEN_CACHE "
                         f"to a writable folder") from None


def _from_record(variant: Variant, options: CompileOptions, record: dict, cached: bool) -> Compiled:
    cubin = options.cache / record.get("cubin", "")
    ok = record["ok"] and cubin.is_file()
    resources = Resources(**record["resources"]) if ok else None
    return Compiled(variant, options.arch, cubin if ok else None, resources, record["seconds"], record["log"], cached)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so a reader never sees half a file."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


# ---- the cache, for `tilegen cache` -----------------------------------------------------------------

@dataclass(frozen=True)
class CacheSummary:
    folder: Path
    entries: int
    failed: int
    bytes: int


def cache_summary(folder: Path) -> CacheSummary:
    records = list(folder.glob("*.json")) if folder.is_dir() else []
    failed = sum(not _record_ok(r) for r in records)
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) if folder.is_dir() else 0
    return CacheSummary(folder, len(records), failed, size)


def purge_failed(folder: Path) -> int:
    """Remove the cached compile errors (the next run compiles those variants again)."""
    failed = [r for r in folder.glob("*.json") if not _record_ok(r)] if folder.is_dir() else []
    for record in failed:
        record.unlink()
    return len(failed)


def clear_cache(folder: Path) -> int:
    """Remove every cached compile; returns how many entries there were."""
    count = cache_summary(folder).entries
    if folder.is_dir():
        for path in folder.iterdir():
            if path.is_file() and (path.suffix in (".json", ".cubin") or ".cubin." in path.name):
                path.unlink()
    return count


def _record_ok(path: Path) -> bool:
    try:
        return bool(json.loads(path.read_text()).get("ok"))
    except (OSError, ValueError, AttributeError):
        return False
