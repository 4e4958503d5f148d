"""Source -> cubin with nvcc, resources read from ptxas, results cached, many variants at once.

Needs no GPU. The cache key is a hash of the source, the options and the nvcc version, so a
repeated run compiles nothing. A compile error is a result (`Compiled.ok` is False, with the
log), not an exception.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

from .errors import ToolMissing, UsageError
from .paths import cache_dir
from . import __version__
from .render import render, template_hash
from .variant import Variant

DEFAULT_ARCH = "sm_90"
DEFAULT_FLAGS = ("-lineinfo",)
_ARCH_PATTERN = re.compile(r"^sm_\d{2,3}[af]?$")


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
        if not _ARCH_PATTERN.match(self.arch):
            raise UsageError(f"--arch {self.arch!r} is not a GPU architecture like sm_90 or sm_90a")


@dataclass(frozen=True)
class Compiled:
    """The outcome of compiling one variant."""

    variant: Variant
    arch: str
    cubin: Path | None  # None when the compile failed
    resources: Resources | None
    seconds: float  # nvcc's wall time when it ran (kept in the cache, so also for cached results)
    log: str
    cached: bool

    @property
    def ok(self) -> bool:
        return self.cubin is not None


def compile_variants(variants: Iterable[Variant], options: CompileOptions,
                     on_done: Callable[[Compiled], None] | None = None) -> list[Compiled]:
    """Compile every variant, `options.jobs` at a time; results in the order of `variants`."""
    variants = list(variants)
    require_nvcc()
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        futures = [pool.submit(compile_variant, v, options) for v in variants]
        results = []
        for future in futures:
            result = future.result()
            if on_done:
                on_done(result)
            results.append(result)
    return results


def compile_variant(variant: Variant, options: CompileOptions) -> Compiled:
    """Render and compile one variant, or take it from the cache."""
    source = render(variant)
    key = cache_key(source, options)
    cubin, record = options.cache / f"{key}.cubin", options.cache / f"{key}.json"
    if record.exists():
        return _from_record(variant, options.arch, cubin, json.loads(record.read_text()), cached=True)
    entry, cubin_bytes = _run_nvcc(source, variant.name, options)
    options.cache.mkdir(parents=True, exist_ok=True)
    if cubin_bytes is not None:
        _write_atomically(cubin, cubin_bytes)
    # The record goes last: its presence is what marks a cache entry complete.
    _write_atomically(record, json.dumps(entry).encode())
    return _from_record(variant, options.arch, cubin, entry, cached=False)


def provenance(options: CompileOptions, template: str) -> dict[str, str]:
    """What made a compiled row: architecture, nvcc, the template's hash and tilegen's version."""
    return {"arch": options.arch, "nvcc": nvcc_version(), "template_hash": template_hash(template),
            "tilegen": __version__}


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
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return DEFAULT_ARCH


def _run_nvcc(source: str, name: str, options: CompileOptions) -> tuple[dict, bytes | None]:
    """nvcc's outcome as a cache record, and the cubin's bytes when it compiled."""
    with tempfile.TemporaryDirectory(prefix="tilegen-") as work:
        source_path, cubin_path = Path(work) / f"{name}.cu", Path(work) / f"{name}.cubin"
        source_path.write_text(source)
        command = [require_nvcc(), "-cubin", f"-arch={options.arch}", "-Xptxas", "-v", *options.flags,
                   "-o", str(cubin_path), str(source_path)]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        log = (done.stdout + done.stderr).replace(work + "/", "")
        entry: dict = {"seconds": round(seconds, 3), "log": log, "ok": done.returncode == 0}
        if done.returncode != 0:
            return entry, None
        entry["resources"] = asdict(parse_ptxas(log))
        return entry, cubin_path.read_bytes()


def _from_record(variant: Variant, arch: str, cubin: Path, record: dict, cached: bool) -> Compiled:
    ok = record["ok"] and cubin.exists()
    resources = Resources(**record["resources"]) if ok else None
    return Compiled(variant, arch, cubin if ok else None, resources, record["seconds"], record["log"], cached)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so a reader never sees half a file."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.replace(temporary, path)
