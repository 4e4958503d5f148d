"""gen.matmul's fused epilogues on a real GPU (marker `gpu`; sm_90 only, where the wgmma family
runs): each keyword alone and all together, in both half types, at odd shapes with padded rows,
at a thin one and at one token (gemv's), each output NaN-poisoned before its call and compared with a float64
reference; a second call on the same layouts only launches, and a plain call on them stays plain."""

from __future__ import annotations

import math

import pytest

import gen

from .test_gpu import skip_unless_gpu
from .test_gpu_call_path import _torch

pytestmark = pytest.mark.gpu

RELATIVE = 1e-2  # half-precision inputs and output, float32 sums and epilogue: against float64
ACTIVATE = {
    None: lambda x: x,
    "relu": lambda x: x.clamp(min=0),
    "gelu-tanh": lambda x: 0.5 * x * (1 + ((2 / math.pi) ** 0.5 * (x + 0.044715 * x**3)).tanh()),
    "gelu-erf": lambda x: 0.5 * x * (1 + (x / 2**0.5).erf()),
    "silu": lambda x: x * x.sigmoid(),
}
CALLS = [  # the keywords of one call: True stands for an array the test makes
    {"bias": True}, {"activation": "relu"}, {"activation": "gelu-tanh"}, {"activation": "gelu-erf"},
    {"activation": "silu"}, {"residual": True}, {"alpha": 0.5}, {"alpha": -2.0, "beta": 0.25, "residual": True},
    {"beta": -1.0, "residual": True}, {"bias": True, "activation": "gelu-tanh", "residual": True, "alpha": 0.75,
                                       "beta": 1.5},
]
SHAPES = [(999, 1001, 1003), (77, 45, 33), (16, 6144, 4096), (1, 1001, 1003)]  # one token: gemv's


def _operands(torch, dtype, m, n, k):
    """A and B as views of rows padded to 16 bytes (TMA's demand), C and R dense."""
    pad = lambda width: -(-width // 8) * 8  # noqa: E731
    a = torch.randn(m, pad(k), device="cuda", dtype=dtype)[:, :k]
    b = torch.randn(k, pad(n), device="cuda", dtype=dtype)[:, :n]
    return a, b, torch.randn(n, device="cuda", dtype=dtype), torch.randn(m, n, device="cuda", dtype=dtype)


def _reference(a, b, bias, residual, call):
    d = call.get("alpha", 1.0) * (a.double() @ b.double())
    if call.get("bias"):
        d = d + bias.double()
    d = ACTIVATE[call.get("activation")](d)
    if call.get("residual"):
        d = d + call.get("beta", 1.0) * residual.double()
    return d


def _call(a, b, out, bias, residual, call):
    arrays = {"bias": bias, "residual": residual}
    return gen.matmul(a, b, out, **{key: arrays[key] if value is True else value for key, value in call.items()})


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_each_epilogue_keyword_matches_float64_at_odd_and_thin_shapes(dtype: str) -> None:
    skip_unless_gpu(lambda cc: cc == (9, 0), "the fused epilogues are the wgmma family's: sm_90 GPUs only")
    torch = _torch()
    kind = torch.bfloat16 if dtype == "bf16" else torch.float16
    for m, n, k in SHAPES:
        a, b, bias, residual = _operands(torch, kind, m, n, k)
        out = torch.empty(m, n, device="cuda", dtype=kind)
        for call in CALLS:
            out.fill_(float("nan"))
            assert _call(a, b, out, bias, residual, call) is out
            reference = _reference(a, b, bias, residual, call)
            torch.cuda.synchronize()
            error = float((out.double() - reference).norm() / reference.norm())
            assert error < RELATIVE, f"{m}x{n}x{k} {call}: relative error {error}"


def test_a_bias_off_a_16_byte_boundary_is_read_element_by_element() -> None:
    """The kernel fetches a tile's bias columns into shared memory 16 bytes a lane; a bias that is a view
    one element in (2-byte aligned) takes the element-wise path, at an odd shape, one of whole tiles and
    one of many tiles a block."""
    skip_unless_gpu(lambda cc: cc == (9, 0), "the fused epilogues are the wgmma family's: sm_90 GPUs only")
    torch = _torch()
    for m, n, k in ((999, 1001, 1003), (512, 768, 256), (4000, 3000, 136)):
        a, b, _, residual = _operands(torch, torch.bfloat16, m, n, k)
        bias = torch.randn(n + 1, device="cuda", dtype=torch.bfloat16)[1:]
        assert bias.data_ptr() % 16 != 0
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        call = {"bias": True, "activation": "gelu-tanh"}
        _call(a, b, out, bias, residual, call)
        reference = _reference(a, b, bias, residual, call)
        torch.cuda.synchronize()
        assert float((out.double() - reference).norm() / reference.norm()) < RELATIVE, (m, n, k)


def test_a_fused_call_on_layouts_seen_before_only_launches_and_a_plain_one_stays_plain(monkeypatch) -> None:
    skip_unless_gpu(lambda cc: cc == (9, 0), "the fused epilogues are the wgmma family's: sm_90 GPUs only")
    torch = _torch()
    import gen.call.matmul

    a, b, bias, residual = _operands(torch, torch.bfloat16, 256, 192, 128)
    out = torch.empty(256, 192, device="cuda", dtype=torch.bfloat16)
    calls = ({"bias": True, "activation": "silu", "residual": True}, {})
    for call in calls:
        _call(a, b, out, bias, residual, call)

    def refused(*arguments, **options):
        raise AssertionError("the arrays were described again")

    monkeypatch.setattr(gen.call.matmul, "describe", refused)
    for call in calls:
        out.fill_(float("nan"))
        _call(a, b, out, bias, residual, call)
        reference = _reference(a, b, bias, residual, call)
        torch.cuda.synchronize()
        assert float((out.double() - reference).norm() / reference.norm()) < RELATIVE
    with pytest.raises(AssertionError, match="described again"):  # another activation is another launch
        _call(a, b, out, bias, residual, {"bias": True, "activation": "relu", "residual": True})
