"""On a real GPU (marker `gpu`): tuned kernels on PyTorch and CuPy arrays where they live: dense
arrays and views, the caller's stream (a non-default one, and one still busy with the producer of
the input: the result is right with no synchronisation by the caller, and the call itself does not
wait), DLPack, shape dispatch, and one-line refusals of a wrong element type or device. Each library
is optional: its tests skip with a reason where it is missing."""

from __future__ import annotations

import numpy as np
import pytest

import gen

pytestmark = pytest.mark.gpu
RELATIVE_F32 = 1e-5


def _torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional)")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False  # the producers' products are exact enough to compare
    return torch


def _cupy():
    return pytest.importorskip("cupy", reason="CuPy is not installed (optional)")


def _error(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    reference = a.astype(np.float64) @ b.astype(np.float64)
    return float(np.linalg.norm(c - reference) / np.linalg.norm(reference))


def _busy(torch, stream, seconds_of_work: int = 120):
    """Queues a long chain of 4096^3 products on `stream` (about 3 ms each on an H100)."""
    with torch.cuda.stream(stream):
        t = torch.randn(4096, 4096, device="cuda") / 64
        for _ in range(seconds_of_work):
            t = torch.tanh(t @ t)
    return t


def test_torch_tensors_and_views_are_multiplied_in_place_and_returned_as_tensors() -> None:
    torch = _torch()
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, (301, 203)).astype(np.float32), rng.uniform(-1, 1, (203, 101)).astype(np.float32)
    c = gen.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda())
    assert isinstance(c, torch.Tensor) and c.is_cuda and c.dtype == torch.float32 and tuple(c.shape) == (301, 101)
    assert _error(c.cpu().numpy(), a, b) < RELATIVE_F32
    big_a, big_b = torch.rand(600, 520, device="cuda"), torch.rand(520, 700, device="cuda")
    big_c = torch.full((640, 720), float("nan"), device="cuda")
    out = big_c[20:320, 8:520]
    assert gen.matmul(big_a[100:400, 8:264], big_b[4:260, 16:528], out) is out
    host = big_c.cpu().numpy()
    assert _error(host[20:320, 8:520], big_a[100:400, 8:264].cpu().numpy(), big_b[4:260, 16:528].cpu().numpy()) \
        < RELATIVE_F32
    assert np.isnan(host[:20]).all() and np.isnan(host[20:320, :8]).all()  # nothing outside the view


def test_a_stream_still_busy_with_the_producer_needs_no_synchronisation_by_the_caller() -> None:
    """A is written on a side stream after a long chain of work there; gen.matmul on that stream
    (current, or passed as stream=) reads it only when it is ready, and returns before it is."""
    torch = _torch()
    rng = np.random.default_rng(2)
    a, b = rng.uniform(-1, 1, (512, 384)).astype(np.float32), rng.uniform(-1, 1, (384, 256)).astype(np.float32)
    a_ready, b_gpu = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    gen.matmul(a_ready, b_gpu)  # compiled and loaded before the race
    torch.cuda.synchronize()
    for pass_stream in (False, True):
        side = torch.cuda.Stream()
        a_gpu = torch.zeros_like(a_ready)
        _busy(torch, side)
        with torch.cuda.stream(side):
            a_gpu.copy_(a_ready)  # A is produced only after the chain
            c = gen.matmul(a_gpu, b_gpu) if not pass_stream else None
        if pass_stream:
            c = gen.matmul(a_gpu, b_gpu, stream=side)
        assert not side.query(), "gen.matmul waited for the stream (or the producer was too short)"
        side.synchronize()
        assert _error(c.cpu().numpy(), a, b) < RELATIVE_F32


def test_refusals_of_element_type_and_device_are_one_line() -> None:
    torch = _torch()
    a = torch.rand(64, 32, device="cuda")
    with pytest.raises(gen.UsageError) as raised:
        gen.matmul(a, torch.rand(32, 16, device="cuda", dtype=torch.float64))
    assert "of one type" in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(gen.UsageError, match=r"^b is a PyTorch tensor on cpu; move it to the GPU \(b.cuda\(\)\)$"):
        gen.matmul(a, torch.rand(32, 16))
    with pytest.raises(gen.UsageError, match=r"^C is float64, but sgemm_f32_\S+ takes float32 for C$"):
        gen.kernel("sgemm")(a, torch.rand(32, 16, device="cuda"), torch.empty(64, 16, device="cuda",
                                                                                dtype=torch.float64))
    if torch.cuda.device_count() > 1:
        with pytest.raises(gen.UsageError, match="^B is on GPU 1, but the current CUDA context is GPU 0's"):
            gen.kernel("sgemm")(a, torch.rand(32, 16, device="cuda:1"), torch.empty(64, 16, device="cuda"))


def test_each_calls_shape_chooses_its_variant_on_torch_arrays() -> None:
    torch = _torch()
    transpose = gen.kernel("transpose")
    for rows, columns in ((3, 7), (1000, 999), (64, 4096)):
        x = torch.rand(rows, columns, device="cuda")
        y = torch.empty(columns, rows, device="cuda")
        assert transpose(x, y) is y
        assert torch.equal(y, x.t())
        assert transpose.explain(x, y).startswith(f"transpose f32 at {rows}x{columns}: transpose_f32_")


def test_a_prepared_launch_runs_on_any_stream_handle() -> None:
    torch = _torch()
    x, y = torch.rand(256, 512, device="cuda"), torch.empty(512, 256, device="cuda")
    launch = gen.kernel("transpose", 256, 512).prepared(x, y)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    launch(side.cuda_stream)
    side.synchronize()
    assert torch.equal(y, x.t())


def test_a_numpy_output_beside_tensors_waits_for_the_callers_busy_stream() -> None:
    """The kernel runs on the tensors' stream, a non-blocking one still busy: the NumPy output is
    copied back only after the kernel ran there (not when the default stream is idle)."""
    torch = _torch()
    x = torch.rand(1024, 2048, device="cuda")
    transpose = gen.kernel("transpose", 1024, 2048)
    transpose(x, torch.empty(2048, 1024, device="cuda"))  # compiled and loaded before the race
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    _busy(torch, side, 30)
    host = np.full((2048, 1024), np.nan, np.float32)
    with torch.cuda.stream(side):
        assert transpose(x, host) is host
    assert np.array_equal(host, x.cpu().numpy().T)


def test_a_kernels_cache_of_launches_keeps_no_array_alive() -> None:
    import gc
    import weakref

    torch = _torch()
    transpose = gen.kernel("transpose", 256, 512)
    x, y = torch.rand(256, 512, device="cuda"), torch.empty(512, 256, device="cuda")
    transpose(x, y)
    transpose(x, y)  # from the cache of launches
    torch.cuda.synchronize()
    assert torch.equal(y, x.t())
    gone = [weakref.ref(x), weakref.ref(y)]
    del x, y
    gc.collect()
    assert [ref() for ref in gone] == [None, None]


def test_stream_settles_arrays_that_name_different_streams() -> None:
    torch, cupy = _torch(), _cupy()
    x = torch.rand(256, 512, device="cuda")
    y = cupy.full((512, 256), cupy.nan, cupy.float32)
    torch.cuda.synchronize()
    transpose, side = gen.kernel("transpose", 256, 512), torch.cuda.Stream()
    with torch.cuda.stream(side), cupy.cuda.Stream(non_blocking=True):
        with pytest.raises(gen.UsageError, match="name different CUDA streams"):
            transpose(x, y)
        assert transpose(x, y, stream=side) is y
    side.synchronize()
    assert np.array_equal(cupy.asnumpy(y), x.cpu().numpy().T)


def test_dlpack_arrays_are_read_through_their_capsule() -> None:
    torch = _torch()

    class DlpackOnly:  # what JAX shows: __dlpack__ and no array interface
        def __init__(self, tensor):
            self.tensor = tensor

        def __dlpack__(self, stream=None):
            return self.tensor.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.tensor.__dlpack_device__()

    a, b = torch.rand(70, 50, device="cuda"), torch.rand(50, 60, device="cuda")
    out = torch.empty(70, 60, device="cuda")
    gen.matmul(DlpackOnly(a), DlpackOnly(b), out)
    torch.cuda.synchronize()
    assert _error(out.cpu().numpy(), a.cpu().numpy(), b.cpu().numpy()) < RELATIVE_F32


def test_cupy_arrays_views_and_a_busy_non_default_stream() -> None:
    cupy = _cupy()
    rng = np.random.default_rng(3)
    a, b = rng.uniform(-1, 1, (300, 200)).astype(np.float32), rng.uniform(-1, 1, (200, 100)).astype(np.float32)
    c = gen.matmul(cupy.asarray(a), cupy.asarray(b))
    assert isinstance(c, cupy.ndarray) and _error(cupy.asnumpy(c), a, b) < RELATIVE_F32
    big = cupy.asarray(rng.uniform(-1, 1, (400, 400)).astype(np.float32))
    view = gen.matmul(big[10:310, 4:204], big[50:250, 100:300])
    assert _error(cupy.asnumpy(view), cupy.asnumpy(big[10:310, 4:204]), cupy.asnumpy(big[50:250, 100:300])) \
        < RELATIVE_F32
    side = cupy.cuda.Stream(non_blocking=True)
    a_ready = cupy.asarray(a)
    with side:
        t = cupy.random.standard_normal((4096, 4096), dtype=cupy.float32) / 64
        for _ in range(120):
            t = cupy.tanh(t @ t)
        a_gpu = a_ready.copy()  # produced on the side stream, after the chain
        c = gen.matmul(a_gpu, cupy.asarray(b))
        assert not side.done, "gen.matmul waited for the stream (or the producer was too short)"
    side.synchronize()
    assert _error(cupy.asnumpy(c), a, b) < RELATIVE_F32
    with pytest.raises(gen.UsageError, match=r"^out must be a float32 300 x 100 matrix, got float64"):
        gen.matmul(cupy.asarray(a), cupy.asarray(b), cupy.empty((300, 100), cupy.float64))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_matmul_on_torch_tensors(dtype: str) -> None:
    torch = _torch()
    from gen.families import all_families

    element = "f16" if dtype == "float16" else "bf16"
    if not any(element in family.matmul_dtypes for family in all_families().values()):
        pytest.skip(f"no registered family multiplies {dtype} (hgemm is not registered)")
    a = torch.rand(256, 128, device="cuda").to(getattr(torch, dtype))
    b = torch.rand(128, 192, device="cuda").to(getattr(torch, dtype))
    c = gen.matmul(a, b)
    assert c.dtype in (a.dtype, torch.float32) and tuple(c.shape) == (256, 192)
    reference = a.double() @ b.double()
    assert float((c.double() - reference).norm() / reference.norm()) < 1e-2
