"""On a real GPU (marker `gpu`): the call path as a model uses it. gen.matmul and gen.kernel calls
captured in a CUDA graph (PyTorch's and CuPy's capture) replay right, also after the inputs'
contents change; a call that cannot be captured refuses in one line and leaves the capture whole;
a torch.compile(fullgraph=True) model of two tuned GEMMs and an activation gives the eager result;
a call on a layout seen before reads nothing but the layout. Each library is optional: its tests
skip with a reason where it is missing."""

from __future__ import annotations

import numpy as np
import pytest

import gen

pytestmark = pytest.mark.gpu
RELATIVE_BF16 = 1e-2  # bfloat16 inputs, float32 accumulation: against float64
RELATIVE_F32 = 1e-5


def _torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional)")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch


def _error(torch, c, a, b) -> float:
    reference = a.double() @ b.double()
    return float((c.double() - reference).norm() / reference.norm())


def _half_matmul_or_skip(torch, dtype: str = "bf16"):
    from gen.families import all_families

    if not any(dtype in family.matmul_dtypes for family in all_families().values()):
        pytest.skip(f"no registered family multiplies {dtype}")
    return torch.bfloat16 if dtype == "bf16" else torch.float16


@pytest.mark.parametrize("warm", [True, False], ids=["called-before", "first-call-captured"])
def test_a_torch_graph_of_matmul_and_kernel_calls_replays_right_after_the_inputs_change(warm: bool) -> None:
    torch = _torch()
    dtype = _half_matmul_or_skip(torch)
    m, n, k = (512, 384, 256) if warm else (320, 448, 192)  # a layout of its own: nothing loaded or kept yet
    a, b = torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(k, n, device="cuda", dtype=dtype)
    x, y = torch.rand(m, n, device="cuda"), torch.full((n, m), float("nan"), device="cuda")
    transpose = gen.kernel("transpose", m, n)
    if warm:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # as PyTorch asks: warmed up on a side stream
            gen.matmul(a, b), transpose(x, y)
        torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = gen.matmul(a, b)
        transpose(c.float(), y)
    for _ in range(2):
        a.copy_(torch.randn(m, k, device="cuda", dtype=dtype))
        b.copy_(torch.randn(k, n, device="cuda", dtype=dtype))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert _error(torch, c, a, b) < RELATIVE_BF16
        assert torch.equal(y, c.float().t())


def test_a_cupy_graph_of_matmul_calls_replays_right_after_the_inputs_change() -> None:
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed (optional)")
    rng = np.random.default_rng(3)
    a, b = (cupy.asarray(rng.uniform(-1, 1, shape).astype(np.float32)) for shape in ((300, 200), (200, 100)))
    c = cupy.full((300, 100), cupy.nan, cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        gen.matmul(a, b, c)  # warmed up outside the capture, as with PyTorch
        stream.begin_capture()
        gen.matmul(a, b, c)
        graph = stream.end_capture()
        for seed in (4, 5):
            a[...] = cupy.asarray(np.random.default_rng(seed).uniform(-1, 1, (300, 200)).astype(np.float32))
            c.fill(cupy.nan)
            graph.launch(stream)
            stream.synchronize()
            host_a, host_b = cupy.asnumpy(a).astype(np.float64), cupy.asnumpy(b).astype(np.float64)
            reference = host_a @ host_b
            assert np.linalg.norm(cupy.asnumpy(c) - reference) / np.linalg.norm(reference) < RELATIVE_F32


def test_a_call_that_cannot_be_captured_says_so_and_the_capture_goes_on() -> None:
    torch = _torch()
    a, b = torch.rand(128, 64, device="cuda"), torch.rand(64, 96, device="cuda")
    host_x, host_y = np.ones((64, 32), np.float32), np.zeros((32, 64), np.float32)
    transpose = gen.kernel("transpose", 64, 32)
    c = gen.matmul(a, b)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        with pytest.raises(gen.UsageError, match="^NumPy arrays are copied to the GPU and back, which a CUDA graph "
                                                 "cannot capture"):
            transpose(host_x, host_y)
        gen.matmul(a, b, c)
    c.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert _error(torch, c, a, b) < RELATIVE_F32 and not host_y.any()


def test_a_compiled_model_of_two_tuned_gemms_and_an_activation_gives_the_eager_result() -> None:
    torch = _torch()
    dtype = _half_matmul_or_skip(torch)
    import gen.torch_ops  # noqa: F401 - registers torch.ops.tilegen

    def model(x, w1, w2):
        return torch.ops.tilegen.matmul(torch.nn.functional.gelu(torch.ops.tilegen.matmul(x, w1)), w2)

    x, w1, w2 = (torch.randn(*shape, device="cuda", dtype=dtype) / 8 for shape in ((128, 256), (256, 512),
                                                                                    (512, 192)))
    import importlib.util

    backend = "inductor" if importlib.util.find_spec("triton") else "aot_eager"  # inductor's GPU code needs triton
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    out, eager = compiled(x, w1, w2), model(x, w1, w2)
    hidden = torch.nn.functional.gelu((x.double() @ w1.double()).to(dtype).double())
    reference = hidden @ w2.double()
    assert out.dtype == eager.dtype and out.shape == (128, 192)
    assert float((out.double() - eager.double()).norm() / eager.double().norm()) < RELATIVE_BF16
    assert float((out.double() - reference).norm() / reference.norm()) < 3 * RELATIVE_BF16


def test_a_compiled_graph_runs_any_familys_kernel_in_place() -> None:
    torch = _torch()
    import gen.torch_ops  # noqa: F401

    def model(x, y):
        torch.ops.tilegen.kernel("transpose", "", [x * 2], y)
        return y + 1

    x, y = torch.rand(96, 160, device="cuda"), torch.empty(160, 96, device="cuda")
    assert torch.equal(torch.compile(model, fullgraph=True)(x, y), (x * 2).t() + 1)


def test_a_layout_seen_before_is_launched_without_reading_the_arrays_again(monkeypatch) -> None:
    torch = _torch()
    import gen.call.matmul

    a, b = torch.rand(200, 120, device="cuda"), torch.rand(120, 80, device="cuda")
    out = torch.empty(200, 80, device="cuda")
    gen.matmul(a, b, out)

    def refused(*arguments, **options):
        raise AssertionError("the arrays were described again")

    monkeypatch.setattr(gen.call.matmul, "describe", refused)
    out.fill_(float("nan"))
    assert gen.matmul(a, b, out) is out
    torch.cuda.synchronize()
    assert _error(torch, out, a, b) < RELATIVE_F32
    with pytest.raises(AssertionError, match="described again"):  # a new layout is read in full
        gen.matmul(a[:100], b, out[:100])
