"""NVRTC, the CUDA runtime compiler library, through cuda-python's bindings (`cuda.bindings.nvrtc`,
the extra `nvrtc`): one program compiled straight to a cubin for a real architecture (never PTX,
so the driver never compiles anything), with ptxas's report (`--ptxas-options=-v`) in its log.

Used in whatever process compiles: a compile worker (nvrtc_process) or, for measurements, the
caller's own threads (the bindings release the GIL while NVRTC works)."""

from __future__ import annotations

import functools
import importlib.metadata
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

PACKAGE = "nvidia-cuda-nvrtc"  # the wheel that ships the library, when it comes from PyPI
# Where a driver is installed, NVRTC takes a cubin it has made before from the driver's compute cache
# (~/.nv/ComputeCache) without running ptxas, so its log lacks ptxas's report, which tilegen reads
# the resources from (github.com/NVIDIA/cuda-python/issues/1124). tilegen keeps its own cache.
NO_DRIVER_CACHE = {"CUDA_CACHE_DISABLE": "1"}


@dataclass(frozen=True)
class Program:
    """What one compile gave: NVRTC's result code (0: success), its log, the cubin on success."""

    result: int
    log: str
    cubin: bytes | None
    seconds: float


def available() -> bool:
    """Whether the bindings import and the library loads."""
    try:
        library_version()
    except Exception:  # noqa: BLE001 - an ImportError, or the library not found: either way, none here
        return False
    return True


def compile_program(name: str, source: str, options: Sequence[str]) -> Program:
    """`source` (named NAME.cu in diagnostics) compiled with these NVRTC options."""
    nvrtc = _bindings()
    started = time.perf_counter()
    program = _checked(nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []))
    try:
        encoded = [option.encode() for option in options]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        log = _log(nvrtc, program)
        cubin = _cubin(nvrtc, program) if result == nvrtc.nvrtcResult.NVRTC_SUCCESS else None
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return Program(int(result), log, cubin, time.perf_counter() - started)


@functools.cache
def library_version() -> str:
    """'13.0.88' where the wheel or the library's file name says it, else NVRTC's own '13.0'."""
    major, minor = _checked(_bindings().nvrtcVersion())
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        pass
    found = re.search(r"\.so\.(\d+\.\d+\.\d+)$", str(_library_file()))
    return found.group(1) if found else f"{major}.{minor}"


@functools.cache
def supported_archs() -> tuple[str, ...]:
    """The real architectures NVRTC compiles cubins for: ('sm_75', ..., 'sm_90', ...)."""
    nvrtc = _bindings()
    count = _checked(nvrtc.nvrtcGetNumSupportedArchs())
    archs = _checked(nvrtc.nvrtcGetSupportedArchs())
    return tuple(f"sm_{arch}" for arch in list(archs)[:count])


def _bindings() -> Any:
    from cuda.bindings import nvrtc

    return nvrtc


def _checked(answer: Any) -> Any:
    """The value of a binding's (result, value...) answer; RuntimeError when NVRTC refused."""
    result, *values = answer if isinstance(answer, tuple) else (answer,)
    if int(result) != 0:
        raise RuntimeError(f"NVRTC: {_bindings().nvrtcGetErrorString(result)[1].decode()}")
    return values[0] if len(values) == 1 else tuple(values)


def _log(nvrtc: Any, program: Any) -> str:
    size = _checked(nvrtc.nvrtcGetProgramLogSize(program))
    buffer = bytearray(size)  # NVRTC writes into it: never an immutable bytes object Python may share
    _checked(nvrtc.nvrtcGetProgramLog(program, buffer))
    # NVRTC's log may hold two C strings (ptxas's error after its report): NUL-separated, not line-separated
    return bytes(buffer).rstrip(b"\0").replace(b"\0", b"\n").decode(errors="replace")


def _cubin(nvrtc: Any, program: Any) -> bytes:
    size = _checked(nvrtc.nvrtcGetCUBINSize(program))
    buffer = bytearray(size)
    _checked(nvrtc.nvrtcGetCUBIN(program, buffer))
    return bytes(buffer)


def _library_file() -> Path | None:
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        return Path(load_nvidia_dynamic_lib("nvrtc").abs_path).resolve()
    except Exception:  # noqa: BLE001 - an older cuda-python without pathfinder: the version says enough
        return None
