"""Loading and launching kernels, and device memory, in the current context: the GPU worker's
modules, launches and arrays, and the ready-to-call kernels of gen.call.kernels in the caller's own
process and context (the caller's arrays, copies to and from NumPy). Importing this module makes no
context."""

from __future__ import annotations

import atexit
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pycuda.driver as cuda
import pycuda.gpuarray as gpuarray

from ...core.cubin import kernel_symbol
from ...core.errors import RunFailed, UsageError
from ...core.limits import CACHE_CONFIGS, MAX_STATIC_SHARED_BYTES
from ...families.family import Launch
from ...families.problem import Problem
from .device import synchronize  # noqa: F401  (gen.call.kernels waits through this module)
from .regions import spans

CudaError, OutOfMemory = cuda.Error, cuda.MemoryError  # what a failed launch, copy or allocation raises


class CubinModule:
    """A cubin file, loaded into the current context when a kernel of it is first asked for: through
    pycuda once, and each kernel that takes a structure by value through the driver API
    (gen.gpu.runtime.native) once, never through both: a variant's checks and timing launch one copy."""

    def __init__(self, path: str):
        self.cubin, self._module, self._functions = Path(path).read_bytes(), None, {}
        self._natives: dict[str, Any] = {}  # the driver API's kernels
        self._preferences: dict[str, str] = {}  # each pycuda kernel's cache preference as set now

    def _pycuda_module(self) -> Any:
        if self._module is None:
            self._module = cuda.module_from_buffer(self.cubin)
        return self._module

    def function(self, name: str, cache_config: str, dynamic_shared_bytes: int) -> Any:
        """pycuda's kernel `name` (its own symbol, else its one C++-mangled one in the cubin's symbol
        table), opted in once for > 48 KiB dynamic shared, with the cache preference and the matching
        shared-memory carveout of this launch: set again whenever a job asks for another (the kernel
        is one function of the module, whatever preference its jobs ask for)."""
        if name not in self._functions:
            function = self._pycuda_module().get_function(kernel_symbol(self.cubin, name) or name)
            if dynamic_shared_bytes > MAX_STATIC_SHARED_BYTES:  # past it, a kernel must opt in
                function.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic_shared_bytes)
            self._functions[name] = function
            self._preferences[name] = "none"
        function = self._functions[name]
        if self._preferences[name] != cache_config:
            function.set_cache_config(getattr(cuda.func_cache, "PREFER_" + cache_config.upper()))
            function.set_attribute(cuda.function_attribute.PREFERRED_SHARED_MEMORY_CARVEOUT, CACHE_CONFIGS[cache_config])
            self._preferences[name] = cache_config
        return function

    def native_function(self, name: str, dynamic_shared_bytes: int) -> Any:
        """The driver API's kernel `name`, for a launch pycuda cannot make (no cache preference)."""
        if name not in self._natives:
            from . import native

            self._natives[name] = native.load(self.cubin, name, dynamic_shared_bytes)
        return self._natives[name]

    def fill_constants(self, constants: Mapping[str, np.ndarray]) -> None:
        """Copy each array into pycuda's module's `__constant__` symbol of its name; UsageError when the
        module has no such symbol or the array does not fit it."""
        for name, array in constants.items():
            try:
                address, size = self._pycuda_module().get_global(name)
            except cuda.LogicError:
                raise UsageError(f"the kernel has no __constant__ symbol {name!r} to fill; declare it (or give "
                                 f"the constant the symbol's name)") from None
            data = np.ascontiguousarray(array)
            if data.nbytes > size:
                raise UsageError(f"__constant__ {name} holds {size} bytes; the array given for it has {data.nbytes}")
            cuda.memcpy_htod(address, data)


def launcher(module: CubinModule, name: str, cache_config: str, launch: Launch, problem: Problem, shape: Any,
             arrays: Mapping[str, Any]) -> Callable[[], None]:
    """A prepared launch of kernel `name` on these device arrays (GPUArrays, views included), the
    problem's constants filled first: little host work per call. An output the launch clears is
    zeroed first (its padding left alone: gen.gpu.runtime.regions), in the same stream. A kernel
    that takes a structure by value (np.void: a TMA tensor map) is launched through the driver API:
    the driver does not deliver such a parameter from the one packed buffer pycuda launches with (on
    an H100 and an H200 with driver 580, the kernel saw no tensor map), but does from cuLaunchKernel's
    array of parameters; it gets no cache preference and no constants (refused)."""
    arguments = problem.kernel_arguments(shape, {key: array.gpudata for key, array in arrays.items()})
    output = arrays[problem.output.name]
    clears = spans(int(output.gpudata), output.strides, output.dtype.itemsize, problem.output_region(shape)) \
        if launch.clears_output else []
    if any(a.dtype.kind == "V" for a in arguments):
        if problem.constants(shape):  # the driver API's module is not filled
            raise UsageError(f"{problem.__class__.__name__} passes a structure by value and fills __constant__ "
                             f"arrays: tilegen launches such kernels through the driver API, which it does not "
                             f"fill yet; pass the constants as an input array instead")
        from . import native

        run = native.DriverLaunch(module.native_function(name, launch.dynamic_shared_bytes), launch.grid,
                                  launch.block, launch.dynamic_shared_bytes, arguments, clears)

        def call() -> None:
            try:
                run(0)  # stream 0: pycuda's default stream
            except RunFailed as error:  # refused at launch (its resources, say): pycuda's kind of error
                raise cuda.LaunchError(str(error)) from None
    else:
        module.fill_constants(problem.constants(shape))
        function = module.function(name, cache_config, launch.dynamic_shared_bytes)
        function.prepare("".join(a.dtype.char for a in arguments))

        def call() -> None:
            for address, pitch, width, height in clears:
                cuda.memset_d2d8_async(address, pitch, 0, width, height, None)
            function.prepared_async_call(launch.grid, launch.block, None, *arguments,
                                         shared_size=launch.dynamic_shared_bytes)

    call.arrays = dict(arrays)  # the arguments are bare addresses: keep their memory alive with the launch
    return call


def source_module(source: str) -> Any:
    """CUDA C++ source (its kernels extern "C") compiled by pycuda (with nvcc) and loaded into the
    current context: the GPU worker's own kernels (gen.gpu.process.checker's compare)."""
    from pycuda.compiler import SourceModule

    return SourceModule(source, no_extern_c=True)


# ---- device memory in the current context: the GPU worker's arrays, and gen.call.kernels' copies -----------

def copy(target: Any, source: Any) -> None:
    """Copy a device array into another of its size, on the default stream."""
    cuda.memcpy_dtod_async(target.gpudata, source.gpudata, source.nbytes)


def fill(array: Any, value: Any) -> None:
    """Fill a device array with `value` of its element type, on the default stream: by the value's
    bits where the driver has a memset of the element's size (pycuda has no fill for 16-bit floats)."""
    memset = {1: cuda.memset_d8_async, 2: cuda.memset_d16_async, 4: cuda.memset_d32_async}.get(array.dtype.itemsize)
    if memset is None:
        array.fill(value)
    else:
        memset(array.gpudata, int(np.asarray(value, array.dtype).view(f"uint{array.dtype.itemsize * 8}")), array.size)


def empty(dims: tuple[int, ...], dtype: Any) -> Any:
    return gpuarray.empty(dims, dtype=dtype)


def to_device(array: np.ndarray) -> Any:
    """A NumPy array copied into a new device array (in the current context)."""
    _require_context()
    return gpuarray.to_gpu(array)


def _require_context() -> None:
    """pycuda's copies work in its own stack of contexts, which knows nothing of the context PyTorch
    or CuPy made current: where that is the device's primary context, pycuda joins it (once per thread,
    left at exit as pycuda.autoprimaryctx leaves it)."""
    if cuda.Context.get_current() is not None:
        return
    from . import native

    handle, device = native.current_context(None)  # refuses in one line where no context is current
    primary = cuda.Device(device).retain_primary_context()
    if primary.handle != handle:
        raise UsageError("the current CUDA context is not its device's primary one, which tilegen copies NumPy "
                         "arrays through: make it current with pycuda, or pass device arrays")
    primary.push()
    atexit.register(primary.pop)


def to_host(array: Any, into: np.ndarray) -> np.ndarray:
    """A device array copied into the NumPy array `into`, which is returned."""
    return array.get(ary=into)
