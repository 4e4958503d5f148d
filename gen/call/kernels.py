"""Ready-to-call kernels: the tuned variant of any family, run on the caller's arrays (PyTorch,
CuPy, Numba, JAX, PyCUDA or NumPy: gen.call.arrays), in the caller's current CUDA context, on the
caller's stream, with no copy of device arrays and no synchronisation. The driver API launches them
(gen.gpu.runtime.native); NumPy arrays are copied through pycuda (gen.gpu.runtime.launch).

    kernel = gen.kernel("reduce", "4096x8192")     # the tuned variant for this GPU and shape
    kernel(data=rows, sums=out)                    # arrays by argument name (or in order)
    softmax = gen.kernel("softmax")                # no sizes: each call's shape picks its variant
    print(softmax.explain(x, y))                   # which variant for these arrays, and why
"""

from __future__ import annotations

import functools
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from .arrays import (DeviceArray, caller_stream, describe, from_dlpack, layout_key, library_streams, stream_handle,
                     stream_source)
from ..compiling.compiler import CompileOptions, compile_variant
from ..core.errors import UsageError
from ..families import get_family
from ..families.family import Family, refused
from ..families.problem import Scalar, Workspace, element_type_of, numpy_dtype
from ..families.variant import Variant
from ..gpu.runtime.regions import spans
from .lookup import shape_text, tuned_with_reason

VECTOR_BYTES = 16  # vector loads (float4) need every array to start on a 16-byte boundary
LAUNCHES_KEPT = 8  # prepared launches kept per kernel (by the arrays' addresses: they keep no array alive)
PROBE = (1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049)  # distinct dimensions, to see where each one goes


class Prepared:
    """A launch on fixed arrays: call it (with a stream, else the arrays' own) to run the kernel again."""

    def __init__(self, launch: Any, arrays: dict[str, DeviceArray], variant: Variant):
        self.launch, self.variant = launch, variant  # launch: a gen.gpu.runtime.native.DriverLaunch
        self.arrays = arrays  # they keep the caller's arrays alive while the launch may run
        self._stream: Any = None  # what gives the arrays' stream, found at the first call given none

    def __call__(self, stream: Any = None) -> None:
        if stream is not None:
            self.launch(stream_handle(stream))
            return
        if self._stream is None:
            self._stream = stream_source(self.arrays)  # arrays that name different streams are refused here
        self.launch(self._stream())

    def by_address(self) -> "Prepared":
        """The same launch, keeping only the arrays' addresses (Kernel's cache: arrays at the same
        addresses launch it again; the caller's memory must not be kept alive by it)."""
        return Prepared(self.launch, {name: replace(array, owner=None) for name, array in self.arrays.items()},
                        self.variant)


class Kernel:
    """A family's kernel for the caller's arrays: one variant for one shape, or (built with no
    variant) the variant of each call's shape: this GPU's tuned winner, the nearest tuned shape's,
    an adaptation of it, or the family's default (see explain)."""

    def __init__(self, family: Family, variant: Variant | None = None, shape: Any = None, dtype: str | None = None,
                 reason: str = "the variant given"):
        if (variant is None) != (shape is None):
            raise UsageError("a Kernel takes a variant and its shape, or neither (then each call's shape chooses)")
        self.family, self.variant, self.shape, self.reason = family, variant, shape, reason
        self.dtype = variant.dtype if variant is not None else dtype
        problem = family.problem if variant is None else get_family(variant.family).problem_of(variant)
        self.arrays = [a.name for a in problem.arguments if not isinstance(a, (Scalar, Workspace))]  # a fused epilogue's too
        self.output = problem.output.name
        self._output_index = self.arrays.index(self.output)
        self._launches: dict[tuple[Any, ...], Prepared] = {}

    def __call__(self, *positional: Any, **named: Any) -> Any:
        """Launch on these arrays (in argument order, or by name) on `stream=` (default: the arrays'
        own, see gen.call.arrays.caller_stream; for a family with an array named `stream`, that array:
        choose the stream through prepared()); returns the output array. NumPy arrays are copied to
        the device and back (the call then waits for the copy), and a NumPy output is filled in place.
        `scalars=` gives scalar arguments the caller chooses by name (a fused epilogue's alpha and beta;
        left out, the values the family checks with)."""
        stream = named.pop("stream", None) if "stream" not in self.arrays else None
        scalars = named.pop("scalars", {}) if named and "scalars" not in self.arrays else {}
        arrays = positional if not named and len(positional) == len(self.arrays) else \
            tuple(self._named(positional, named).values())
        key = tuple(map(layout_key, arrays))  # the layout: what a kept launch is found by
        if scalars:
            key += (tuple(scalars.items()),)
        prepared = self._launches.get(key)
        if prepared is None:
            given = self._named(arrays, {})
            described = self._described(given, stream)
            if any(array.on_host for array in described.values()):
                return self._through_device(given, described, stream, scalars)
            prepared = self._prepare(described, scalars)
            if None not in key:
                remember(self._launches, key, prepared.by_address(), LAUNCHES_KEPT)
        prepared(stream)
        return arrays[self._output_index]

    def prepared(self, *positional: Any, **named: Any) -> Prepared:
        """The launch on these device arrays with its arguments packed once: `prepared()` runs it
        on the arrays' stream, `prepared(stream)` on another, at the least host cost per call.
        `stream=` here settles arrays that name different streams (as in a call); `scalars=` gives
        scalar arguments the caller chooses (a fused epilogue's alpha and beta) by name."""
        stream = named.pop("stream", None) if "stream" not in self.arrays else None
        scalars = named.pop("scalars", {}) if "scalars" not in self.arrays else {}
        return self._prepare(self._described(self._named(positional, named), stream), scalars)

    def explain(self, *positional: Any, **named: Any) -> str:
        """Which variant runs these arrays (or a shape written like '4096x4096'), and why."""
        if len(positional) == 1 and isinstance(positional[0], str) and not named:
            shape = self.family.parse_shape(positional[0])
            dtype = self.family.check_dtype(self.dtype)
        else:
            described = self._described(self._named(positional, named), None)
            shape, dtype = self._shape_of(described), self._dtype_of(described)
        variant, reason = (self.variant, self.reason) if self.variant is not None else _choice(
            self.family.name, str(shape), dtype)
        return f"{self.family.name} {dtype} at {shape}: {variant.name}, from {reason}"

    def _prepare(self, described: dict[str, DeviceArray],
                 scalars: Mapping[str, float] = MappingProxyType({})) -> Prepared:
        variant, shape = self._validated(described)
        native = driver_api()
        _check_scalars(variant, shape, scalars)
        context, device = native.current_context(next(iter(described.values())).device)
        for name, array in described.items():
            where = array.device if array.device is not None else native.pointer_device(array.pointer)
            if where != device:
                raise UsageError(f"{name} is {'not in GPU memory' if where is None else f'on GPU {where}'}, but the "
                                 f"current CUDA context is GPU {device}'s: make that GPU current, or move {name}")
        family = get_family(variant.family)  # the fallback's, where this family does not run here (Family.fallback)
        launch = family.launch(variant, shape)
        problem, output = family.problem_of(variant), described[self.output]
        # a workspace (stream-K's sums) is the stream's, set at each launch (native.DriverLaunch)
        workspace = next(((i, a) for i, a in enumerate(problem.arguments) if isinstance(a, Workspace)), None)
        arguments = problem.kernel_arguments(shape, {**{name: array.pointer for name, array in described.items()},
                                                     **({workspace[1].name: 0} if workspace else {}), **scalars})
        clears = spans(output.pointer, output.strides, output.dtype.itemsize,
                       problem.output_region(shape)) if launch.clears_output else ()
        function = loaded(variant, context)
        return Prepared(native.DriverLaunch(function, launch.grid, launch.block, launch.dynamic_shared_bytes, arguments,
                                            clears, workspace=workspace and (workspace[0], 4 * workspace[1].words, context)),
                        described, variant)

    def _validated(self, described: dict[str, DeviceArray]) -> tuple[Variant, Any]:
        """The variant and shape for these arrays, each array checked: element type, dimensions,
        strides (dense, row-major) and a writable output; UsageError where the variant cannot run the shape."""
        if self.variant is not None:
            variant, shape = self.variant, self.shape
        else:
            shape = self._shape_of(described)
            variant = _choice(self.family.name, str(shape), self._dtype_of(described))[0]
        problem = get_family(variant.family).problem_of(variant)
        expected = problem.arrays(shape)
        for name, array in described.items():
            dtype = numpy_dtype(problem.element_type(name, variant.dtype, variant.output_dtype))
            if array.dtype != dtype:
                raise UsageError(f"{name} is {array.dtype}, but {variant.name} takes {dtype} for {name}")
            if array.shape != expected[name]:
                raise UsageError(f"{name} of {self.family.name} at {shape} must be {expected[name]}, got {array.shape}")
            if not array.row_major():
                raise UsageError(f"{name} must be contiguous and row-major, got strides {array.strides} (bytes)")
        output = described[self.output]
        if output.readonly or (output.kind == "numpy" and not output.owner.flags.writeable):
            raise UsageError(f"{self.output} is read-only; give an array the result can be written into")
        if any(array.pointer % VECTOR_BYTES for array in described.values()):
            variant = _aligned(get_family(variant.family), variant, shape)
        return _refusing(variant, shape), shape

    def _shape_of(self, described: dict[str, DeviceArray]) -> Any:
        if self.shape is not None:
            return self.shape
        return shape_from_dims(self.family, {name: array.shape for name, array in described.items()})

    def _dtype_of(self, described: dict[str, DeviceArray]) -> str:
        """The element type of the first input; one of the family's (or the kernel's, if it has one)."""
        first = described[self.arrays[0]].dtype
        found = element_type_of(first)
        if found is None or found not in self.family.dtypes or self.dtype not in (None, found):
            allowed = [str(numpy_dtype(d)) for d in ([self.dtype] if self.dtype else self.family.dtypes)]
            raise UsageError(f"{self.arrays[0]} is {first}; {self.family.name} runs {', '.join(allowed)} here")
        return found

    def _described(self, given: dict[str, Any], stream: Any) -> dict[str, DeviceArray]:
        """Every array described; DLPack producers last, asked for the stream the others chose."""
        described = {name: array if isinstance(array, DeviceArray) else describe(array, name)
                     for name, array in given.items() if not _dlpack_only(array)}
        rest = [name for name in given if name not in described]
        chosen = caller_stream(described, stream)  # arrays that name different streams are refused here
        if rest:
            described.update({name: from_dlpack(given[name], name, chosen) for name in rest})
        return {name: described[name] for name in given}

    def _through_device(self, given: dict[str, Any], described: dict[str, DeviceArray], stream: Any,
                        scalars: Mapping[str, float]) -> Any:
        """NumPy arrays copied to the device, the kernel run there on the stream the device arrays
        (or `stream`) choose, a NumPy output copied back. The GPU is waited for after the copies
        (a copy from pageable memory may return before its data lands) and after the kernel
        (which may run on a stream the copies do not wait for, and reads the copies)."""
        self._validated(described)
        gpu = _gpu()
        if any(map(driver_api().capturing, {caller_stream(described, stream), *library_streams()})):
            raise UsageError("NumPy arrays are copied to the GPU and back, which a CUDA graph cannot capture: give "
                             "a call you capture arrays already on the GPU")
        on_device = {name: gpu.to_device(given[name]) if array.on_host else given[name]
                     for name, array in described.items()}
        device = {name: describe(on_device[name], name) if array.on_host else array
                  for name, array in described.items()}
        gpu.synchronize()
        self._prepare(device, scalars)(caller_stream(device, stream))
        gpu.synchronize()
        if not described[self.output].on_host:
            return on_device[self.output]
        return gpu.to_host(on_device[self.output], given[self.output])

    def _named(self, positional: tuple[Any, ...], named: dict[str, Any]) -> dict[str, Any]:
        """The arrays by argument name, each given once."""
        if len(positional) > len(self.arrays):
            raise UsageError(f"{self.family.name} takes {len(self.arrays)} arrays ({', '.join(self.arrays)}), "
                             f"got {len(positional)}")
        given = dict(zip(self.arrays, positional))
        for name, array in named.items():
            if name not in self.arrays or name in given:
                raise UsageError(f"{self.family.name} takes the arrays {', '.join(self.arrays)}; {name!r} is "
                                 f"{'given twice' if name in given else 'not one of them'}")
            given[name] = array
        missing = [n for n in self.arrays if n not in given]
        if missing:
            raise UsageError(f"{self.family.name} needs the arrays {', '.join(missing)} too")
        return {name: given[name] for name in self.arrays}


def kernel(family: str, *dims: int | str, dtype: str | None = None, epilogue: str = "") -> Kernel:
    """The tuned variant of `family` for this shape on the current GPU, ready to call; with no
    dimensions, a kernel that chooses the variant for each call's shape. `epilogue`: what the kernel
    computes after the product, as the family's parameters ('bias=col,act=gelu-tanh'; gen.tuned);
    its arrays follow the output, in the order of the family's problem."""
    chosen = get_family(family)
    if not dims:
        if epilogue:
            raise UsageError("a kernel with an epilogue takes its shape: gen.kernel(family, M, N, K, epilogue=...)")
        return Kernel(chosen, dtype=None if dtype is None else chosen.check_dtype(dtype))
    shape = chosen.parse_shape(shape_text(dims))
    variant, reason = _choice(chosen.name, str(shape), chosen.check_dtype(dtype), epilogue)
    return Kernel(chosen, _refusing(variant, shape), shape, reason=reason)  # the variant may be the fallback's


def shape_from_dims(family: Family, dims: dict[str, tuple[int, ...]]) -> Any:
    """The family's shape whose arrays have these dimensions: where each dimension goes is seen by
    giving each a distinct probe value; the shape found must give back exactly these arrays."""
    count = len(family.parse_shape(family.default_sizes[0]).dims)
    refusal = (f"{family.name} cannot tell its shape from the arrays' dimensions "
               f"({', '.join(f'{name} {d}' for name, d in dims.items())}): give it, gen.kernel({family.name!r}, "
               f"'{family.shape_format}')")
    try:
        expected = family.problem.arrays(family.parse_shape("x".join(str(p) for p in PROBE[:count])))
    except UsageError:
        raise UsageError(refusal) from None
    places = [next(((name, axis) for name, extents in expected.items() for axis, extent in enumerate(extents)
                    if extent == probe), None) for probe in PROBE[:count]]
    if None in places or any(len(dims[name]) <= axis for name, axis in places):
        raise UsageError(refusal)
    shape = family.parse_shape("x".join(str(dims[name][axis]) for name, axis in places))
    if family.problem.arrays(shape) != dims:
        raise UsageError(refusal)
    return shape


@functools.cache
def _choice(family: str, shape: str, dtype: str, epilogue: str = "") -> tuple[Variant, str]:
    """The tuned variant for a shape and why, looked up once per process (not per call)."""
    variant, reason = tuned_with_reason(family, shape, dtype=dtype, epilogue=epilogue)
    if variant.dtype != dtype:
        raise UsageError(f"the tuned {family} variant {variant.name} is not {dtype}; check the tuning database")
    return variant, reason


def _refusing(variant: Variant, shape: Any) -> Variant:
    """The variant, where it can run the shape; else UsageError with the family's reason (never a launch
    that leaves the output half written)."""
    if reason := refused(get_family(variant.family), variant, shape):
        raise UsageError(f"{variant.name} cannot run {shape}: {reason}")
    return variant


def _check_scalars(variant: Variant, shape: Any, scalars: Mapping[str, float]) -> None:
    """The scalars a caller gives: only those the shape does not set (a fused epilogue's alpha and beta)."""
    problem = get_family(variant.family).problem_of(variant)
    chosen = [a.name for a in problem.arguments if isinstance(a, Scalar) and not hasattr(shape, a.attribute)]
    if unknown := sorted(set(scalars) - set(chosen)):
        raise UsageError(f"{variant.name} takes no scalar {', '.join(unknown)} from the caller; it takes "
                         f"{', '.join(chosen) or 'none'}")


def _aligned(family: Family, variant: Variant, shape: Any) -> Variant:
    """A variant that runs arrays off a 16-byte boundary (sub-matrix views): the family's relative
    without vector loads, else its safe default."""
    relative = family.unaligned(variant)
    if relative is None:
        return variant
    return family.runnable(relative, shape) or family.safe_variant(shape, variant.dtype)


@functools.cache
def loaded(variant: Variant, context: int) -> Any:
    """The variant's kernel, compiled (or from the cache) and loaded into a context, once each."""
    native = driver_api()
    compiled = compile_variant(variant, CompileOptions.local())
    if not compiled.ok:
        raise UsageError(f"{variant.name} does not compile: {compiled.log.strip().splitlines()[-1]}")
    return native.load(compiled.cubin.read_bytes(), variant.name, variant.dynamic_shared_bytes)


def _gpu() -> Any:
    """gen.gpu.runtime.launch, the kernels' way to pycuda (NumPy copies); UsageError where pycuda is missing."""
    try:
        from ..gpu.runtime import launch
    except ImportError as error:
        raise UsageError(f"NumPy arrays are copied to the GPU through pycuda ({error}): pip install "
                         f"'tilegen[cuda]' on a machine with an NVIDIA GPU, or pass arrays already on the GPU, "
                         f"or pass device arrays") from None
    return launch


def driver_api() -> Any:
    """gen.gpu.runtime.native, the driver API's launches; UsageError where cuda.bindings is missing."""
    try:
        from ..gpu.runtime import native
    except ImportError as error:
        raise UsageError(f"running a kernel needs cuda-bindings ({error}): pip install 'tilegen[cuda]'") from None
    return native


def remember(cache: dict[Any, Any], key: Any, value: Any, kept: int) -> None:
    """`value` kept under `key`, the oldest entry let go past `kept` entries."""
    if len(cache) >= kept:
        del cache[next(iter(cache))]
    cache[key] = value


def _dlpack_only(array: Any) -> bool:
    # PyTorch's and CuPy's first: PyTorch's __cuda_array_interface__ raises KeyError for FP8 tensors
    return (not type(array).__module__.startswith(("torch", "cupy")) and hasattr(array, "__dlpack__")
            and not hasattr(array, "__cuda_array_interface__") and not isinstance(array, np.ndarray))
