"""Kernels loaded and launched through the CUDA driver API (cuda.bindings), in the caller's current
context and on any stream handle: PyTorch's, CuPy's, a DLPack producer's or pycuda's. pycuda's
prepared calls take only pycuda streams; cuLaunchKernel takes a handle, with the arguments packed
once per launch (an array of pointers to their values). Importing this module makes no context.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Iterator, Sequence

import numpy as np
from cuda.bindings import driver

from ...core.cubin import kernel_symbol
from ...core.errors import RunFailed, UsageError
from ...core.limits import MAX_STATIC_SHARED_BYTES
from ...core.nvidia_smi import driver_version
from ...core.results import DeviceInfo

SUCCESS = driver.CUresult.CUDA_SUCCESS
_streams: dict[tuple[Any, int], Any] = {}  # handles as cuda.bindings objects, made once each


def _checked(result: tuple[Any, ...], what: str) -> Any:
    error, *values = result
    if error != SUCCESS:
        name = driver.cuGetErrorName(error)[1]
        raise RunFailed(f"{what} failed: {name.decode() if isinstance(name, bytes) else error}")
    return values[0] if len(values) == 1 else values


def current_context(device: int | None) -> tuple[int, int]:
    """The current context and its device; with none current, `device`'s primary context is made
    current (as the CUDA runtime does for PyTorch and CuPy)."""
    try:
        _checked(driver.cuInit(0), "cuInit")
    except (OSError, RuntimeError, RunFailed) as error:  # no driver library, no GPU
        raise UsageError(f"running a kernel needs an NVIDIA GPU and its driver: {str(error).splitlines()[0]}") from None
    context = _checked(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if int(context) == 0:
        if device is None:
            raise UsageError("no current CUDA context on this thread: import pycuda.autoprimaryctx, or use the GPU "
                             "from PyTorch or CuPy first")
        context = _checked(driver.cuDevicePrimaryCtxRetain(_checked(driver.cuDeviceGet(device), "cuDeviceGet")),
                           "cuDevicePrimaryCtxRetain")
        _checked(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    return int(context), int(_checked(driver.cuCtxGetDevice(), "cuCtxGetDevice"))


def current_device_info() -> DeviceInfo | None:
    """The GPU of the caller's current context (PyTorch's, CuPy's: any), or None when none is current."""
    try:
        _checked(driver.cuInit(0), "cuInit")
        if int(_checked(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")) == 0:
            return None
        device = _checked(driver.cuCtxGetDevice(), "cuCtxGetDevice")
    except (OSError, RuntimeError, RunFailed):
        return None
    name, index = _checked(driver.cuDeviceGetName(256, device), "cuDeviceGetName"), int(device)
    return DeviceInfo(name=name.split(b"\0")[0].decode(), sm_count=_attribute(device, "MULTIPROCESSOR_COUNT"),
                      cc=compute_capability(index), l2_bytes=_attribute(device, "L2_CACHE_SIZE"),
                      memory_bytes=int(_checked(driver.cuDeviceTotalMem(device), "cuDeviceTotalMem")), index=index,
                      driver=driver_version(index, lambda: _checked(driver.cuDriverGetVersion(), "cuDriverGetVersion")))


@functools.cache
def compute_capability(device: int) -> str:
    """'9.0': GPU `device`'s compute capability, asked of the driver once."""
    handle = _checked(driver.cuDeviceGet(device), "cuDeviceGet")
    return f"{_attribute(handle, 'COMPUTE_CAPABILITY_MAJOR')}.{_attribute(handle, 'COMPUTE_CAPABILITY_MINOR')}"


def _attribute(device: Any, name: str) -> int:
    """CU_DEVICE_ATTRIBUTE_<name> of a device handle."""
    return _checked(driver.cuDeviceGetAttribute(getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"),
                                                device), name)


def pointer_device(pointer: int) -> int | None:
    """The GPU whose memory `pointer` is in; None for memory CUDA does not know (the host's)."""
    attribute = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    error, value = driver.cuPointerGetAttribute(attribute, pointer)
    return int(value) if error == SUCCESS else None


def load(cubin: bytes, name: str, dynamic_shared_bytes: int) -> Any:
    """The kernel `name` of a cubin (its own symbol, or its C++-mangled one), loaded into the current
    context (the module stays loaded). Loading is allowed while a CUDA graph is being captured (as
    PyTorch loads its own compiled kernels): it enqueues nothing, so a first call may be captured."""
    image = np.frombuffer(cubin, dtype=np.uint8)  # passed by address: kept alive through the call
    with _capture_relaxed():
        module = _checked(driver.cuModuleLoadData(image.ctypes.data), f"loading {name}")
    symbol = kernel_symbol(cubin, name) or name
    function = _checked(driver.cuModuleGetFunction(module, symbol.encode()), f"finding {name}")
    if dynamic_shared_bytes > MAX_STATIC_SHARED_BYTES:  # past it, a kernel must opt in
        attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _checked(driver.cuFuncSetAttribute(function, attribute, dynamic_shared_bytes), f"configuring {name}")
    return function


class Zeroed:
    """`size` bytes of device memory in the current context, zeroed on a stream of its own (which no
    captured stream waits for, so that a first call may be captured), freed with the object."""

    def __init__(self, size: int):
        self.address = 0
        with _capture_relaxed():
            self.address = int(_checked(driver.cuMemAlloc(size), f"allocating {size} bytes of workspace"))
            stream = _checked(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING), "making a stream")
            try:
                _checked(driver.cuMemsetD8Async(self.address, 0, size, stream), "zeroing the workspace")
                _checked(driver.cuStreamSynchronize(stream), "zeroing the workspace")
            finally:
                driver.cuStreamDestroy(stream)

    def __del__(self) -> None:
        if self.address:  # at exit the context may be gone: nothing is left to free then
            driver.cuMemFree(self.address)


_workspaces: dict[tuple[int, int, int, int], Zeroed] = {}  # DriverLaunch's (see _workspace)
_workspaces_lock = threading.Lock()
PER_THREAD_STREAM = 2  # CU_STREAM_PER_THREAD: one handle, each thread's own stream


def _workspace(context: int, stream: int, size: int) -> Zeroed:
    """The workspace of launches on `stream` (per thread for the per-thread default stream), made at
    its first launch and kept while the process runs (17 MB each for stream-K): launches on one
    stream run one after another, so they never mix their partial sums. A CUDA graph keeps the
    workspace of the stream it was captured on: graphs captured on one stream must not be replayed at
    once on two (PyTorch captures every graph on one side stream), nor a stream destroyed with launches
    still queued have its handle taken by a new stream at once."""
    key = (context, stream, threading.get_ident() if stream == PER_THREAD_STREAM else 0, size)
    if key not in _workspaces:
        if int(_checked(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")) != context:
            raise UsageError("the launch's CUDA context is not the current one: make its GPU current before the call")
        _workspaces[key] = Zeroed(size)
    return _workspaces[key]


@contextlib.contextmanager
def _capture_relaxed() -> Iterator[None]:
    """Calls allowed while a stream captures a CUDA graph: those that enqueue nothing on it."""
    relaxed = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    mode = _checked(driver.cuThreadExchangeStreamCaptureMode(relaxed), "setting the capture mode")
    try:
        yield
    finally:
        _checked(driver.cuThreadExchangeStreamCaptureMode(mode), "setting the capture mode back")


def capturing(stream: int) -> bool:
    """Whether work enqueued on `stream` now would go into a CUDA graph being captured, or break one
    (the legacy default stream while another stream captures)."""
    error, status = driver.cuStreamIsCapturing(driver.CUstream(stream))
    if error == driver.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
        return True
    if error == driver.CUresult.CUDA_ERROR_NOT_INITIALIZED:  # no CUDA work yet in this process: nothing captured
        return False
    return _checked((error, status), "asking whether the stream is captured") != \
        driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


class DriverLaunch:
    """One kernel on fixed arguments: call it with a stream handle to launch (no host work but the
    call). `clears` are (address, pitch, width, height) regions zeroed first, on the same stream.
    `workspace` (index, size, context): argument `index` is `size` bytes of device memory that the
    kernel leaves as it found it, zeroed once: one per stream of the context (_workspace)."""

    def __init__(self, function: Any, grid: Sequence[int], block: Sequence[int], shared_bytes: int,
                 arguments: Sequence[Any], clears: Sequence[tuple[int, int, int, int]] = (), keep: Any = None,
                 workspace: tuple[int, int, int] | None = None):
        self.function, self.shared_bytes, self.clears, self.keep = function, shared_bytes, list(clears), keep
        self.workspace = workspace
        self.grid, self.block = (tuple(int(g) for g in grid) + (1, 1))[:3], (tuple(int(b) for b in block) + (1, 1))[:3]
        self.values = [np.array([a], dtype=np.asarray(a).dtype) for a in arguments]  # each value's own memory
        self.pointers = np.array([v.ctypes.data for v in self.values], dtype=np.uint64)
        self.address = self.pointers.ctypes.data

    def __call__(self, stream: int) -> None:
        handle = _streams.get((driver, stream))
        if handle is None:
            handle = _streams.setdefault((driver, stream), driver.CUstream(stream))
        for address, pitch, width, height in self.clears:
            _checked(driver.cuMemsetD2D8Async(address, pitch, 0, width, height, handle), "clearing the output")
        if self.workspace is None:
            self._launch(handle)
            return
        index, size, context = self.workspace
        with _workspaces_lock:  # another thread's stream may not set its workspace between these two
            self.values[index][0] = _workspace(context, stream, size).address
            self._launch(handle)

    def _launch(self, handle: Any) -> None:
        (gx, gy, gz), (bx, by, bz) = self.grid, self.block
        error, = driver.cuLaunchKernel(self.function, gx, gy, gz, bx, by, bz, self.shared_bytes, handle,
                                       self.address, 0)
        if error != SUCCESS:
            _checked((error,), "launching the kernel")
