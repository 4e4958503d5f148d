"""The caller's arrays without a GPU: arrays that expose __cuda_array_interface__ or __dlpack__
are read and checked (element type, dimensions, strides, streams) in one line each, before anything
touches a GPU; each call's shape picks its variant; gen.matmul's dispatch asks the registry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gen
from gen.call.arrays import LEGACY_STREAM, caller_stream, describe, stream_handle, stream_source
from gen.families import get_family
from gen.families import gemm_families
from gen.call.kernels import shape_from_dims
from gen.call.lookup import tuned_with_reason

from . import fakes


class FakeDeviceArray:
    """What CuPy, Numba and PyTorch show of a device array: __cuda_array_interface__ (version 3)."""

    def __init__(self, shape, typestr="<f4", strides=None, pointer=1 << 20, stream=None, readonly=False):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (pointer, readonly),
                                         "strides": strides, "version": 3, "stream": stream}


class DlpackOnly:
    """An array seen only through DLPack (as JAX's are), here one on the host."""

    def __init__(self, array: np.ndarray):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()


def gemm_arrays(m=64, n=16, k=32, **b_options):
    return FakeDeviceArray((m, k)), FakeDeviceArray((k, n), **b_options), FakeDeviceArray((m, n))


def test_the_array_interface_is_read_with_c_order_when_it_gives_no_strides() -> None:
    seen = describe(FakeDeviceArray((3, 5), "<f8", pointer=4096, stream=7), "x")
    assert (seen.pointer, seen.shape, seen.strides, seen.dtype, seen.stream) == (4096, (3, 5), (40, 8),
                                                                                  np.dtype("float64"), 7)
    assert seen.row_major() and not describe(FakeDeviceArray((3, 5), strides=(4, 12)), "x").row_major()


@pytest.mark.parametrize("arrays, error", [
    (gemm_arrays(typestr="<f8"), "^B is float64, but sgemm_f32_.* takes float32 for B$"),
    ((*gemm_arrays()[:2], FakeDeviceArray((64, 17))), r"^sgemm cannot tell its shape from the arrays' dimensions "
                                                      r"\(A \(64, 32\), B \(32, 16\), C \(64, 17\)\): give it"),
    (gemm_arrays(strides=(4, 128)), r"^B must be contiguous and row-major, got strides \(4, 128\) \(bytes\)$"),
    ((*gemm_arrays(), FakeDeviceArray((1,))), r"^sgemm takes 3 arrays \(A, B, C\), got 4$"),
    ((FakeDeviceArray((64, 32), stream=7), FakeDeviceArray((32, 16), stream=9), FakeDeviceArray((64, 16))),
     r"^the arrays name different CUDA streams \(A stream 0x7, B stream 0x9\): pass stream= to choose one"),
    ((*gemm_arrays()[:2], [[1.0]]), "^C must be a PyTorch tensor, a CuPy, Numba or JAX array .* got list$"),
    ((*gemm_arrays()[:2], DlpackOnly(np.zeros((64, 16), np.float32))),
     r"^C is not on a CUDA GPU \(DLPack device type 1\); move it to the GPU$"),
    ((*gemm_arrays()[:2], FakeDeviceArray((64, 16), readonly=True)),
     "^C is read-only; give an array the result can be written into$"),
], ids=["dtype", "shape", "strides", "count", "streams", "not an array", "dlpack on the host", "read-only output"])
def test_a_kernel_refuses_arrays_it_cannot_run_in_one_line_before_any_gpu_work(arrays, error) -> None:
    with pytest.raises(gen.UsageError, match=error):
        gen.kernel("sgemm")(*arrays)


def test_a_kernel_with_sizes_refuses_arrays_of_another_shape() -> None:
    with pytest.raises(gen.UsageError, match=r"^C of sgemm at 64x16x32 must be \(64, 16\), got \(16, 64\)$"):
        gen.kernel("sgemm", 64, 16, 32)(*gemm_arrays()[:2], FakeDeviceArray((16, 64)))


def test_each_calls_shape_picks_the_variant_and_explain_says_why() -> None:
    kernel = gen.kernel("matmul")
    text = kernel.explain(*gemm_arrays(m=100, n=50, k=30))
    assert text.startswith("matmul f32 at 100x50x30: matmul_f32_") and "the family's safe default" in text
    assert kernel.explain(FakeDeviceArray((9, 3), "<f8"), FakeDeviceArray((3, 4), "<f8"),
                          FakeDeviceArray((9, 4), "<f8")).startswith("matmul f64 at 9x4x3: matmul_f64_")
    with pytest.raises(gen.UsageError, match=r"^A is float16; matmul runs float32, float64 here$"):
        kernel.explain(FakeDeviceArray((9, 3), "<f2"), FakeDeviceArray((3, 4), "<f2"), FakeDeviceArray((9, 4), "<f2"))


def test_shapes_come_from_any_familys_arrays() -> None:
    assert str(shape_from_dims(get_family("transpose"), {"in": (30, 70), "out": (70, 30)})) == "30x70"
    assert str(shape_from_dims(get_family("sgemm"), {"A": (7, 5), "B": (5, 3), "C": (7, 3)})) == "7x3x5"


def test_streams_come_from_the_caller(monkeypatch) -> None:
    class TorchLike:
        cuda_stream = 0x51

    class CupyLike:
        ptr = 0x52

    class CudaCoreLike:
        def __cuda_stream__(self):
            return (0, 0x53)

    assert [stream_handle(s) for s in (TorchLike(), CupyLike(), CudaCoreLike(), 0x54)] == [0x51, 0x52, 0x53, 0x54]
    with pytest.raises(gen.UsageError, match="^stream must be a CUDA stream"):
        stream_handle("fast")
    arrays = {"a": describe(FakeDeviceArray((2,), stream=0), "a"), "b": describe(FakeDeviceArray((2,), stream=1), "b")}
    assert caller_stream(arrays) == LEGACY_STREAM  # 0 and 1 both mean the legacy default stream
    assert caller_stream({"a": describe(FakeDeviceArray((2,), stream=0x99), "a")}) == 0x99
    assert caller_stream(arrays, stream=0x77) == 0x77
    assert stream_source({"a": describe(FakeDeviceArray((2,), stream=0x99), "a")})() == 0x99  # decided once
    with pytest.raises(gen.UsageError, match="^the arrays name different CUDA streams"):
        stream_source({"a": describe(FakeDeviceArray((2,), stream=5), "a"),
                       "b": describe(FakeDeviceArray((2,), stream=6), "b")})


def test_matmul_asks_the_registry_which_family_multiplies_a_type() -> None:
    assert [f.name for f in gemm_families(np.dtype("float32"))] == ["sgemm"]
    assert [f.name for f in gemm_families(np.dtype("float64"))] == ["matmul"]
    assert [f.name for f in gemm_families(np.dtype("float16"))] == ["gemv", "wgmma", "hgemm"]  # a few rows, then Hopper's
    with pytest.raises(gen.UsageError, match=r"^no registered family multiplies int32 matrices; gen.matmul "
                                             r"multiplies .*float32 \(sgemm\)"):
        gen.matmul(FakeDeviceArray((4, 4), "<i4"), FakeDeviceArray((4, 4), "<i4"))
    with pytest.raises(gen.UsageError, match=r"^a must be a 2-D array on the GPU, got a NumPy array"):
        gen.matmul(np.ones((4, 4), np.float32), FakeDeviceArray((4, 4)))
    with pytest.raises(gen.UsageError, match="^tilegen makes outputs for PyTorch, CuPy, Numba, PyCUDA and NumPy "
                                             "arrays; for a FakeDeviceArray, pass out="):
        gen.matmul(FakeDeviceArray((4, 3)), FakeDeviceArray((3, 5)))
    with pytest.raises(gen.UsageError, match=r"^out must be a float32 4 x 5 matrix, got float64 \(4, 5\)$"):
        gen.matmul(FakeDeviceArray((4, 3)), FakeDeviceArray((3, 5)), FakeDeviceArray((4, 5), "<f8"))


def test_a_stored_winner_that_cannot_run_the_shape_is_adapted_and_the_reason_says_so(tmp_path: Path,
                                                                                      compile_options) -> None:
    db = tmp_path / "t.sqlite"
    gen.tune("matmul", "64x64x64", params={"tile": 16, "padding": 0, "bounds": "none"}, strategy="brute", db=db,
             finalists=1, quiet=True, executor=fakes.FakeExecutor())
    exact = tuned_with_reason("matmul", "64x64x64", db=db, gpu_model=fakes.FAKE_DEVICE.model)[1]
    variant, reason = tuned_with_reason("matmul", "63x63x63", db=db, gpu_model=fakes.FAKE_DEVICE.model)
    assert exact.startswith("the exact shape on this GPU") and "adapted" not in exact
    assert variant.name == "matmul_f32_t16_p0_guard_both"
    assert reason.endswith("adapted from matmul_f32_t16_p0_none_both to run 63x63x63")


def test_import_gen_loads_no_gpu_library_and_never_torch_or_cupy() -> None:
    import subprocess
    import sys

    loaded = subprocess.run([sys.executable, "-c", "import sys, gen; gen.kernel; gen.tune; import gen.call.kernels; "
                             "print(sorted(m for m in ('pycuda', 'torch', 'cupy', 'cuda.bindings.driver') "
                             "if m in sys.modules))"], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_a_launch_packs_each_argument_once_and_goes_on_the_stream_given(monkeypatch) -> None:
    """What cuLaunchKernel is handed (the driver replaced: no GPU here): the grid and block padded
    to three dimensions, the stream, and an array of pointers to each argument's own value."""
    import ctypes

    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    from gen.gpu.runtime import native

    calls = []

    class Driver:
        CUstream = staticmethod(lambda handle: ("stream", handle))

        @staticmethod
        def cuLaunchKernel(*arguments):
            calls.append(("launch", *arguments))
            return (native.SUCCESS,)

        @staticmethod
        def cuMemsetD2D8Async(*arguments):
            calls.append(("memset", *arguments))
            return (native.SUCCESS,)

    monkeypatch.setattr(native, "driver", Driver)
    launch = native.DriverLaunch("kernel", (3, 2), (32,), 256, [np.uintp(0xABC000), np.int32(7), np.float32(1.5)],
                           clears=[(0x1000, 64, 32, 4)])
    launch(0x5EED)
    memset, (_, function, *geometry, shared, stream, parameters, extra) = calls
    assert memset == ("memset", 0x1000, 64, 0, 32, 4, ("stream", 0x5EED))
    assert (function, geometry, shared, stream, extra) == ("kernel", [3, 2, 1, 32, 1, 1], 256, ("stream", 0x5EED), 0)
    pointers = (ctypes.c_uint64 * 3).from_address(parameters)
    assert [ctypes.c_uint64.from_address(pointers[0]).value, ctypes.c_int32.from_address(pointers[1]).value,
            ctypes.c_float.from_address(pointers[2]).value] == [0xABC000, 7, 1.5]


def test_an_array_named_stream_is_an_array_not_the_launch_stream(tmp_path: Path, monkeypatch) -> None:
    """A family of your own may call an argument `stream`: by name, it is that array."""
    from gen.families.registry import FAMILY_PATH_ENV, registry

    own = Path(__file__).parent / "families"
    (tmp_path / "stencil.py").write_text((own / "stencil.py").read_text().replace('Input("grid")', 'Input("stream")')
                                         .replace('inputs["grid"]', 'inputs["stream"]')
                                         .replace('{"grid":', '{"stream":'))
    for name in ("stencil.cu.j2", "neighbours.py"):
        (tmp_path / name).write_text((own / name).read_text())
    monkeypatch.setenv(FAMILY_PATH_ENV, str(tmp_path))
    registry.cache_clear()
    try:
        kernel = gen.kernel("stencil", 37, 45)
        assert kernel.arrays[0] == "stream"
        with pytest.raises(gen.UsageError, match=r"^stream is float64, but stencil_\S+ takes float32 for stream$"):
            kernel(stream=FakeDeviceArray((37, 45), "<f8"), out=FakeDeviceArray((37, 45)))
    finally:
        registry.cache_clear()


class Raising:
    """A DLPack producer that refuses to export."""

    def __dlpack__(self, stream=None):
        raise RuntimeError("cannot export a sparse tensor\nsecond line")


class GpuArrayLike:
    """What a pycuda GPUArray shows: gpudata, shape, strides, dtype."""

    def __init__(self, shape):
        self.gpudata, self.shape, self.dtype = 1 << 20, shape, np.dtype("float32")
        self.strides = (shape[1] * 4, 4)


def _interface(**fields):
    array = FakeDeviceArray((64, 16))
    array.__cuda_array_interface__.update(fields)
    return array


@pytest.mark.parametrize("output, error", [
    (_interface(strides=("x", 4)), r"^C's __cuda_array_interface__ is not one tilegen can read \(invalid literal"),
    (_interface(strides=(4,)), r"^C's __cuda_array_interface__ describes no array \(data 0x100000, shape \(64, 16\), "
                               r"strides \(4,\)\): pass the array its library made$"),
    (_interface(stream="fast"), r"^C's __cuda_array_interface__ is not one tilegen can read \(a stream handle must "
                                r"be an integer from 0 to 2\*\*64 - 1, got 'fast'\)$"),
    (_interface(stream=2**70), r"^C's __cuda_array_interface__ is not one tilegen can read \(a stream handle"),
    (_interface(data=(-4096, False)), r"^C's __cuda_array_interface__ describes no array \(data -0x1000"),
    (_interface(version=99), r"^C's __cuda_array_interface__ is version 99; tilegen reads versions 0 to 3$"),
    (Raising(), r"^C's __dlpack__ failed \(RuntimeError: cannot export a sparse tensor\); pass an array whose "
                r"producer can export it$"),
], ids=["junk strides", "strides of another rank", "named stream", "huge stream", "negative pointer", "version",
        "dlpack raises"])
def test_a_malformed_array_is_refused_in_one_line(output, error) -> None:
    with pytest.raises(gen.UsageError, match=error):
        gen.kernel("sgemm")(*gemm_arrays()[:2], output)


def test_a_stream_handle_must_fit_a_pointer() -> None:
    for stream in (2**70, -1, 1.5, True):
        with pytest.raises(gen.UsageError, match=f"^stream must be a CUDA stream .*got {stream!r}$"):
            stream_handle(stream)
    assert stream_handle(np.uint64(2**64 - 1)) == 2**64 - 1


def test_matmul_of_gpuarrays_without_pycuda_says_what_to_install(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pycuda", None)  # import pycuda fails, as where it is not installed
    monkeypatch.setitem(sys.modules, "gen.gpu.runtime.launch", None)
    with pytest.raises(gen.UsageError, match=r"^a GPUArray output is made through pycuda, which did not import "
                                             r"\(.*\): pip install 'tilegen\[cuda\]', or pass out=$"):
        gen.matmul(GpuArrayLike((8, 4)), GpuArrayLike((4, 8)))


def test_a_call_that_cannot_be_captured_says_so_before_touching_the_capture(monkeypatch) -> None:
    """NumPy arrays are copied (and waited for): inside a CUDA graph capture the call refuses in one
    line (the driver replaced: it says a capture is under way on every stream asked). On an H100 the
    legacy stream a NumPy call chooses did not say so while PyTorch captured on its own stream:
    PyTorch's and CuPy's current streams are asked too (tests/test_gpu_call_path.py)."""
    import sys
    from types import SimpleNamespace

    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    from cuda.bindings import driver
    from gen.gpu.runtime import native

    asked = []

    class Capturing:
        CUresult, CUstreamCaptureStatus, CUstream = driver.CUresult, driver.CUstreamCaptureStatus, int

        @staticmethod
        def cuStreamIsCapturing(stream):
            asked.append(stream)
            return native.SUCCESS, driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE

    def no_copy(array):
        raise AssertionError("a NumPy array was copied during the capture")

    monkeypatch.setattr(native, "driver", Capturing)
    monkeypatch.setitem(sys.modules, "gen.gpu.runtime.launch", SimpleNamespace(to_device=no_copy))  # pycuda's copies
    x, y = np.ones((8, 4), np.float32), np.zeros((4, 8), np.float32)
    with pytest.raises(gen.UsageError, match="^NumPy arrays are copied to the GPU and back, which a CUDA graph cannot "
                                             "capture: give a call you capture arrays already on the GPU$"):
        gen.kernel("transpose", 8, 4)(x, y, stream=0x5EED)
    assert 0x5EED in asked and not y.any()  # the stream of the call (and PyTorch's and CuPy's, where in use)


def test_a_layout_key_changes_with_anything_a_launch_depends_on() -> None:
    """The key a kept launch is found by: a CuPy-like array's address, dimensions, strides and type;
    none for arrays described in full at every call (the array interface may name another stream)."""
    from types import SimpleNamespace

    from gen.call.arrays import layout_key

    class CupyLike:
        __module__ = "cupy._core.core"
        data = None

        def __init__(self, pointer=4096, shape=(4, 8), strides=(32, 4), dtype=np.dtype("float32")):
            self.data, self.shape, self.strides, self.dtype = SimpleNamespace(ptr=pointer), shape, strides, dtype

    key = layout_key(CupyLike())
    assert key == layout_key(CupyLike()) and None not in key
    others = [CupyLike(pointer=8192), CupyLike(shape=(8, 4)), CupyLike(strides=(64, 4)),
              CupyLike(dtype=np.dtype("float64"))]
    assert all(layout_key(other) != key for other in others)
    assert layout_key(FakeDeviceArray((4, 8))) is None and layout_key(np.zeros(3)) is None


def test_a_variant_that_cannot_run_the_shape_is_refused_before_any_launch() -> None:
    """gemv computes at most eight rows of A: at 16 rows its default (one row) would write C's first
    row only, so gen.kernel refuses, naming the family's reason: given the shape, at once; choosing
    the variant per call, at the call, before anything is launched."""
    refusal = (r"^gemv_f16_r1_\S+ cannot run 16x64x64: rows 1 computes at most 1 rows of A; 16x64x64 has M = 16 "
               r"\(use wgmma or hgemm\)$")
    with pytest.raises(gen.UsageError, match=refusal):
        gen.kernel("gemv", 16, 64, 64, dtype="f16")
    per_call = gen.kernel("gemv", dtype="f16")
    with pytest.raises(gen.UsageError, match=refusal):
        per_call(FakeDeviceArray((16, 64), "<f2"), FakeDeviceArray((64, 64), "<f2"), FakeDeviceArray((16, 64), "<f2"))
