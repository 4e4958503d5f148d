"""The caller's arrays as a kernel sees them: a device pointer, dimensions, strides in bytes, an
element type, the device and the stream the producer named. Any array with `__cuda_array_interface__`
(CuPy, Numba, PyTorch) or `__dlpack__` (JAX, PyTorch), a PyCUDA GPUArray, or a NumPy array (on the
host). CuPy and PyTorch are never imported here: an array of theirs means they already are, and
their fast accessors are used instead of building the interface's dict on every call.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from ..core.errors import UsageError

LEGACY_STREAM = 1  # CUDA's legacy default stream, as the array interface and DLPack write it
ADDRESSES = 2**64  # device pointers and stream handles are below it
INTERFACE_VERSIONS = range(4)  # the __cuda_array_interface__ versions tilegen reads
KINDS = "a PyTorch tensor, a CuPy, Numba or JAX array (__cuda_array_interface__ or __dlpack__), a pycuda " \
        "GPUArray or a NumPy array"


@dataclass(frozen=True)
class DeviceArray:
    """One of the caller's arrays. `device` is None on the host (NumPy) or where the array does
    not say (its pointer is asked, gen.gpu.runtime.native.pointer_device); `stream` is the stream its
    interface names (None: none)."""

    pointer: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in bytes
    dtype: np.dtype
    kind: str  # torch, cupy, pycuda, numpy, cai (any other __cuda_array_interface__), dlpack
    owner: Any  # the caller's object (and, for DLPack, the capsule that keeps the memory alive)
    device: int | None = None
    stream: int | None = None
    readonly: bool = False

    @property
    def on_host(self) -> bool:
        return self.kind == "numpy"

    def row_major(self) -> bool:
        """Dense, in C order (a dimension of extent 1 may have any stride)."""
        expected = self.dtype.itemsize
        for extent, stride in zip(reversed(self.shape), reversed(self.strides)):
            if extent != 1 and stride != expected:
                return False
            expected *= extent
        return True

    def by_columns(self) -> bool:
        """Dense, in Fortran order (a matrix's transpose is row-major)."""
        return replace(self, shape=self.shape[::-1], strides=self.strides[::-1]).row_major()


def describe(array: Any, name: str, dlpack_stream: int = LEGACY_STREAM) -> DeviceArray:
    """The array `name` as a DeviceArray; one line naming it when it is none of KINDS.
    `dlpack_stream` is the stream a DLPack producer is asked to make its data ready on."""
    module = type(array).__module__.split(".")[0]
    if isinstance(array, np.ndarray):
        return DeviceArray(array.ctypes.data, array.shape, array.strides, array.dtype, "numpy", array)
    if module == "torch" and hasattr(array, "data_ptr"):
        return _torch(array, name)
    if module == "cupy" and hasattr(array, "data"):
        return DeviceArray(array.data.ptr, array.shape, array.strides, array.dtype, "cupy", array, array.device.id)
    if hasattr(array, "gpudata"):
        return DeviceArray(int(array.gpudata), tuple(array.shape), tuple(array.strides), np.dtype(array.dtype),
                           "pycuda", array)
    if hasattr(array, "__cuda_array_interface__"):
        return from_interface(array.__cuda_array_interface__, name, array)
    if hasattr(array, "__dlpack__"):
        return from_dlpack(array, name, dlpack_stream)
    raise UsageError(f"{name} must be {KINDS}; got {type(array).__name__}")


def from_interface(interface: dict[str, Any], name: str, owner: Any) -> DeviceArray:
    """An array from its __cuda_array_interface__ (versions 0 to 3: strides None is C order;
    version 3's `stream` is where the producer works). Each field is checked here, once per layout
    (a kernel keeps what it read per layout): a field tilegen cannot read is one line naming it."""
    try:
        version, dtype = int(interface.get("version", 3)), np.dtype(interface["typestr"])
        shape = tuple(int(d) for d in interface["shape"])
        pointer, readonly = int(interface["data"][0] or 0), bool(interface["data"][1])
        strides = interface.get("strides")
        strides = tuple(int(s) for s in strides) if strides is not None else _c_strides(shape, dtype.itemsize)
        stream = interface.get("stream")
        stream = None if stream is None else _handle(stream)
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise UsageError(f"{name}'s __cuda_array_interface__ is not one tilegen can read ({error})") from None
    if version not in INTERFACE_VERSIONS:
        raise UsageError(f"{name}'s __cuda_array_interface__ is version {version}; tilegen reads versions 0 to 3")
    if not 0 <= pointer < ADDRESSES or len(strides) != len(shape) or min(shape, default=0) < 0:
        raise UsageError(f"{name}'s __cuda_array_interface__ describes no array (data {pointer:#x}, shape {shape}, "
                         f"strides {strides}): pass the array its library made")
    if interface.get("mask") is not None:
        raise UsageError(f"{name} is a masked array; pass its data without the mask")
    return DeviceArray(pointer, shape, strides, dtype, "cai", owner, None, stream, readonly)


def from_dlpack(array: Any, name: str, stream: int) -> DeviceArray:
    """An array through DLPack: the producer makes its data ready on `stream`; the capsule is kept
    with the array (the memory lives as long as it does)."""
    try:
        try:
            capsule = array.__dlpack__(stream=stream)
        except TypeError:  # a producer of DLPack before streams
            capsule = array.__dlpack__()
    except Exception as error:  # the producer's own refusal, whatever its kind
        said = (str(error).splitlines() or ["no message"])[0]
        raise UsageError(f"{name}'s __dlpack__ failed ({type(error).__name__}: {said}); pass an array whose "
                         f"producer can export it") from None
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    try:
        tensor = _DLTensor.from_address(get_pointer(capsule, b"dltensor"))
    except (ValueError, TypeError):
        raise UsageError(f"{name}'s __dlpack__ gave no DLPack tensor tilegen can read (a 'dltensor' capsule)") from None
    if tensor.device_type not in (_CUDA, _CUDA_MANAGED):
        raise UsageError(f"{name} is not on a CUDA GPU (DLPack device type {tensor.device_type}); move it to the GPU")
    dtype = _DLPACK_TYPES.get((tensor.code, tensor.bits, tensor.lanes))
    if dtype is None:
        raise UsageError(f"{name} has a DLPack element type tilegen does not run (code {tensor.code}, "
                         f"{tensor.bits} bits)")
    dtype = _ml_dtype(dtype) if dtype in _ML_DTYPES else np.dtype(dtype)
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = (tuple(tensor.strides[i] * dtype.itemsize for i in range(tensor.ndim)) if tensor.strides
               else _c_strides(shape, dtype.itemsize))
    return DeviceArray((tensor.data or 0) + tensor.byte_offset, shape, strides, dtype, "dlpack", (array, capsule),
                       tensor.device_id)


def caller_stream(arrays: dict[str, DeviceArray], stream: Any = None) -> int:
    """The stream to launch on: `stream` if given (a handle, or a PyTorch, CuPy, PyCUDA or cuda.core
    stream); else the current stream of the arrays' library (PyTorch, CuPy), or the stream their
    interface names; else the legacy default stream. Arrays that name different streams need `stream`."""
    if stream is not None:
        return stream_handle(stream)
    named = {}
    for name, array in arrays.items():
        if array.kind == "torch":
            named[name] = sys.modules["torch"].cuda.current_stream(array.device).cuda_stream
        elif array.kind == "cupy":
            named[name] = sys.modules["cupy"].cuda.get_current_stream().ptr
        elif array.stream is not None:
            named[name] = array.stream
    handles = {_legacy(h) for h in named.values()}
    if len(handles) > 1:
        listed = ", ".join(f"{name} stream {handle:#x}" for name, handle in named.items())
        raise UsageError(f"the arrays name different CUDA streams ({listed}): pass stream= to choose one, after "
                         f"making it wait for the others")
    return handles.pop() if handles else LEGACY_STREAM


def stream_source(arrays: dict[str, DeviceArray]) -> Callable[[], int]:
    """What gives the stream of each launch on these arrays, decided once (caller_stream's rules):
    a fixed stream, or the current stream of the one library (and device) the arrays are of."""
    first = caller_stream(arrays)  # arrays that name different streams are refused here
    libraries = {(a.kind, a.device) for a in arrays.values() if a.kind in ("torch", "cupy")}
    if not libraries:
        return lambda: first
    if len(libraries) > 1 or any(a.stream is not None for a in arrays.values() if a.kind not in ("torch", "cupy")):
        return lambda: caller_stream(arrays)  # several to ask: asked and compared at every launch
    kind, device = libraries.pop()
    if kind == "torch":
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what torch's compiled code asks: a handle,
        if raw is not None:  # with no Stream object made per launch; else the public way
            return lambda: raw(device)
        return lambda: torch.cuda.current_stream(device).cuda_stream
    current = sys.modules["cupy"].cuda.get_current_stream
    return lambda: current().ptr


def library_streams() -> list[int]:
    """The current streams of PyTorch and CuPy, where the program uses them: a CUDA graph either
    captures is captured on one of them (asked before work that a capture cannot hold)."""
    handles = []
    torch, cupy = sys.modules.get("torch"), sys.modules.get("cupy")
    if torch is not None and torch.cuda.is_initialized():
        handles.append(torch.cuda.current_stream().cuda_stream)
    if cupy is not None:
        handles.append(cupy.cuda.get_current_stream().ptr)
    return handles


def stream_handle(stream: Any) -> int:
    """A stream's handle: an int, or a stream object of PyTorch (cuda_stream), CuPy (ptr), PyCUDA
    (handle) or cuda.core (__cuda_stream__)."""
    if type(stream) is int and 0 <= stream < ADDRESSES:
        return stream
    try:
        if hasattr(stream, "__cuda_stream__"):
            return _handle(stream.__cuda_stream__()[1])
        for attribute in ("cuda_stream", "ptr", "handle"):
            if hasattr(stream, attribute):
                return _handle(getattr(stream, attribute))
        return _handle(stream)
    except (TypeError, ValueError, IndexError):
        raise UsageError(f"stream must be a CUDA stream (a handle, or a PyTorch, CuPy, PyCUDA or cuda.core "
                         f"stream), got {stream!r}") from None


def _handle(value: Any) -> int:
    """A stream handle: an integer that fits a pointer; ValueError for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < ADDRESSES:
        raise ValueError(f"a stream handle must be an integer from 0 to 2**64 - 1, got {value!r}")
    return int(value)


def _legacy(handle: int) -> int:
    return LEGACY_STREAM if handle == 0 else handle  # 0 and 1 are both the legacy default stream


def _torch(tensor: Any, name: str) -> DeviceArray:
    if not tensor.is_cuda:
        raise UsageError(f"{name} is a PyTorch tensor on {tensor.device}; move it to the GPU ({name}.cuda())")
    dtype = torch_element_type(tensor.dtype)
    if dtype is None:
        raise UsageError(f"{name} is a PyTorch tensor of {tensor.dtype}, a type tilegen does not run")
    strides = tuple(s * dtype.itemsize for s in tensor.stride())
    return DeviceArray(tensor.data_ptr(), tuple(tensor.shape), strides, dtype, "torch", tensor, tensor.device.index)


def layout_key(array: Any) -> tuple[Any, ...] | None:
    """What a call's launch depends on in this array, read through the array's own attributes at
    the least cost: its address (which, in CUDA's unified address space, also names its GPU, or
    the host), dimensions, strides and element type. None for an array of another kind, which is
    described in full on every call (a stream it names may change from call to call)."""
    reader = _KEY_READERS.get(type(array), _UNREAD)
    if reader is _UNREAD:
        reader = _KEY_READERS.setdefault(type(array), _key_reader(type(array)))
    return reader(array) if reader is not None else None


def _key_reader(kind: type) -> Callable[[Any], tuple[Any, ...]] | None:
    library = kind.__module__.split(".")[0]
    if library == "torch" and hasattr(kind, "data_ptr"):
        return lambda t: (t.data_ptr(), t.shape, t.stride(), t.dtype)
    if library == "cupy" and hasattr(kind, "data"):
        return lambda a: (a.data.ptr, a.shape, a.strides, a.dtype)
    if library == "pycuda" and hasattr(kind, "gpudata"):
        return lambda a: (int(a.gpudata), a.shape, a.strides, a.dtype)
    return None


_UNREAD = object()
_KEY_READERS: dict[type, Callable[[Any], tuple[Any, ...]] | None] = {}


def torch_element_type(dtype: Any) -> np.dtype | None:
    """The NumPy element type of a PyTorch dtype; None for one tilegen does not run."""
    name = _TORCH_TYPES.get(str(dtype))
    return None if name is None else _ml_dtype(name) if name in _ML_DTYPES else np.dtype(name)


def allocate(like: DeviceArray, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """A new array of the caller's kind, beside `like` (its device): PyTorch, CuPy, Numba, PyCUDA or NumPy."""
    return output_maker(like, shape, dtype)()


def output_maker(like: DeviceArray, shape: tuple[int, ...], dtype: np.dtype) -> Callable[[], Any]:
    """What makes new arrays like `allocate`'s, each call, at the least host cost; it keeps no array
    of the caller's alive. UsageError for an array of a kind tilegen makes none of."""
    if like.kind == "torch":
        torch = sys.modules["torch"]
        return functools.partial(torch.empty, shape, dtype=getattr(torch, dtype.name), device=like.owner.device)
    if like.kind == "cupy":
        cupy, device = sys.modules["cupy"], like.device

        def cupy_empty() -> Any:
            with cupy.cuda.Device(device):
                return cupy.empty(shape, dtype)

        return cupy_empty
    if like.kind == "numpy":
        return functools.partial(np.empty, shape, dtype)
    if like.kind == "cai" and type(like.owner).__module__.startswith("numba"):
        return functools.partial(sys.modules["numba.cuda"].device_array, shape, dtype)
    if like.kind == "pycuda":
        try:
            from ..gpu.runtime.launch import empty
        except ImportError as error:
            raise UsageError(f"a GPUArray output is made through pycuda, which did not import ({error}): "
                             f"pip install 'tilegen[cuda]', or pass out=") from None
        return functools.partial(empty, shape, dtype)
    raise UsageError(f"tilegen makes outputs for PyTorch, CuPy, Numba, PyCUDA and NumPy arrays; for a "
                     f"{type(like.owner).__name__}, pass out=")


def _c_strides(shape: tuple[int, ...], item: int) -> tuple[int, ...]:
    strides, step = [], item
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _ml_dtype(name: str) -> np.dtype:
    """bfloat16 or an FP8 type, from ml_dtypes (NumPy has none of them)."""
    from ..families.problem import numpy_dtype

    return numpy_dtype(_ML_DTYPES[name])


_TORCH_TYPES = {"torch.float32": "float32", "torch.float64": "float64", "torch.float16": "float16",
                "torch.bfloat16": "bfloat16", "torch.int32": "int32", "torch.int64": "int64",
                "torch.float8_e4m3fn": "float8_e4m3fn", "torch.float8_e5m2": "float8_e5m2"}
_ML_DTYPES = {"bfloat16": "bf16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}  # their element types
_DLPACK_TYPES = {(2, 32, 1): "float32", (2, 64, 1): "float64", (2, 16, 1): "float16", (4, 16, 1): "bfloat16",
                 (0, 32, 1): "int32", (0, 64, 1): "int64"}
_CUDA, _CUDA_MANAGED = 2, 13


class _DLTensor(ctypes.Structure):
    """The head of DLPack's DLManagedTensor: the DLTensor it starts with."""

    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]
