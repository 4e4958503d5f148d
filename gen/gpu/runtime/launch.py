"""Loading and launching kernels in the current context: the GPU worker's launches, and the
ready-to-call kernels of gen.call.kernels in the caller's own process and context (the caller's arrays,
copies to and from NumPy). Importing this module makes no context."""

from __future__ import annotations

import atexit
from typing import Any, Callable, Mapping

import numpy as np
import pycuda.driver as cuda
import pycuda.gpuarray as gpuarray

from ...core.cubin import kernel_symbol
from ...core.errors import RunFailed, UsageError
from ...core.limits import CACHE_CONFIGS, MAX_STATIC_SHARED_BYTES
from ...families.family import Launch
from ...families.problem import Problem
from .regions import spans

def launcher(function: Any, launch: Launch, problem: Problem, shape: Any, arrays: Mapping[str, Any],
             load_native: Callable[[], Any] | None = None) -> Callable[[], None]:
    """A prepared launch of `function` on these device arrays (GPUArrays, views included): little
    host work per call. An output the launch clears is zeroed first, in the same stream. A kernel
    that takes a structure by value (np.void: a TMA tensor map) runs as `load_native()` (the same
    kernel loaded through the driver API, gen.gpu.runtime.native) instead: the driver does not deliver such
    a parameter from the one packed buffer pycuda launches with (on an H100 and an H200 with driver
    580, the kernel saw no tensor map), but does from cuLaunchKernel's array of parameters. That
    copy of the kernel gets no cache preference and no constants (refused)."""
    arguments = problem.kernel_arguments(shape, {name: array.gpudata for name, array in arrays.items()})
    output = arrays[problem.output.name]
    clear = region_clearer(output, problem.output_region(shape)) if launch.clears_output else None
    if any(a.dtype.kind == "V" for a in arguments):
        if load_native is None:
            raise UsageError(f"{problem.__class__.__name__} passes a structure by value: launch it with load_native")
        if problem.constants(shape):  # they would fill pycuda's copy of the module, not the one launched
            raise UsageError(f"{problem.__class__.__name__} passes a structure by value and fills __constant__ "
                             f"arrays: tilegen launches such kernels from a second copy of the module, which it "
                             f"does not fill yet; pass the constants as an input array instead")
        from . import native

        run = native.DriverLaunch(load_native(), launch.grid, launch.block, launch.dynamic_shared_bytes, arguments)

        def start() -> None:
            try:
                run(0)  # stream 0: pycuda's default stream
            except RunFailed as error:  # refused at launch (its resources, say): pycuda's kind of error
                raise cuda.LaunchError(str(error)) from None
    else:
        function.prepare("".join(a.dtype.char for a in arguments))
        start = lambda: function.prepared_async_call(launch.grid, launch.block, None, *arguments,  # noqa: E731
                                                     shared_size=launch.dynamic_shared_bytes)

    def call() -> None:
        if clear:
            clear()
        start()

    call.arrays = dict(arrays)  # the arguments are bare addresses: keep their memory alive with the launch
    return call


def region_clearer(array: Any, region: tuple[slice, ...]) -> Callable[[], None]:
    """Zeroes `region` of a device array (its padding left alone), in 2-D memsets (gen.gpu.runtime.regions)."""
    blocks = spans(int(array.gpudata), array.strides, array.dtype.itemsize, region)

    def clear() -> None:
        for address, pitch, width, height in blocks:
            cuda.memset_d2d8_async(address, pitch, 0, width, height, None)

    return clear


def function_named(module: Any, cubin: bytes, name: str) -> Any:
    """The kernel `name` of a loaded module: its own symbol (extern "C"), else its one C++-mangled
    symbol in the cubin's symbol table."""
    symbol = kernel_symbol(cubin, name)
    return module.get_function(symbol or name)  # no symbol: the driver's own "not found"


def fill_constants(module: Any, constants: Mapping[str, np.ndarray]) -> None:
    """Copy each array into the module's `__constant__` symbol of its name; UsageError when the
    module has no such symbol or the array does not fit it."""
    for name, array in constants.items():
        try:
            address, size = module.get_global(name)
        except cuda.LogicError:
            raise UsageError(f"the kernel has no __constant__ symbol {name!r} to fill; declare it (or give "
                             f"the constant the symbol's name)") from None
        data = np.ascontiguousarray(array)
        if data.nbytes > size:
            raise UsageError(f"__constant__ {name} holds {size} bytes; the array given for it has {data.nbytes}")
        cuda.memcpy_htod(address, data)


def configure(function: Any, cache_config: str, dynamic_shared_bytes: int) -> None:
    """Cache preference, the matching shared-memory carveout, and the opt-in for > 48 KiB dynamic shared."""
    if cache_config != "none":
        function.set_cache_config(getattr(cuda.func_cache, "PREFER_" + cache_config.upper()))
        function.set_attribute(cuda.function_attribute.PREFERRED_SHARED_MEMORY_CARVEOUT, CACHE_CONFIGS[cache_config])
    if dynamic_shared_bytes > MAX_STATIC_SHARED_BYTES:  # past it, a kernel must opt in
        function.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic_shared_bytes)


# ---- ready-to-call kernels in the caller's context (gen.call.kernels) -------------------------------------

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


def synchronize() -> None:
    """Wait for all work of the current context, on every stream."""
    cuda.Context.synchronize()


def to_host(array: Any, into: np.ndarray) -> np.ndarray:
    """A device array copied into the NumPy array `into`, which is returned."""
    return array.get(ary=into)
