"""gen.matmul's fused epilogues without a GPU: what a call asks for becomes wgmma's epilogue
parameters (the text a tuning key keeps), each bad argument is one line before anything runs, a
family with no epilogue says so, a tune is for one epilogue, and tilegen::matmul's schema and shape
function take the epilogue too (tests/test_gpu_matmul_epilogue.py
runs them)."""

from __future__ import annotations

import pytest

import gen
from gen.families import get_family
from gen.families.epilogue import called_epilogue

from .test_arrays import FakeDeviceArray
from .test_bad_inputs import assert_one_line_error, run_main

WGMMA = get_family("wgmma")


def test_a_calls_epilogue_becomes_the_wgmma_parameters_and_back() -> None:
    epilogue = called_epilogue(bias=True, activation="gelu-tanh", residual=True, alpha=False, beta=True)
    assert epilogue.text == "scale=alpha-beta,bias=col,act=gelu-tanh,residual=add"
    fused = WGMMA.with_epilogue(WGMMA.default_variant(), epilogue.text)
    assert fused.name.endswith("_alphabeta_biascol_gelutanh_resadd") and WGMMA.epilogue_of(fused) == epilogue.text
    assert WGMMA.with_epilogue(fused, "") == WGMMA.default_variant() and WGMMA.epilogue_of(WGMMA.default_variant()) == ""
    assert called_epilogue(False, None, False, True, False).text == "scale=alpha"
    assert get_family("hgemm").with_epilogue(get_family("hgemm").default_variant(), "bias=col") is None


def test_a_tune_of_two_epilogues_at_once_is_refused_before_anything_is_written(tmp_path, capsys) -> None:
    database = tmp_path / "t.sqlite"
    assert_one_line_error(*run_main(capsys, ["tune", "wgmma", "--size", "256x256x256", "-p", "act=relu,silu", "--db",
                                             str(database)]),
                          "a tune is for one epilogue; this space has act=relu; act=silu: give each of its "
                          "parameters one value with -p")
    assert not database.exists()


def _f32(*shape, **options):
    return FakeDeviceArray(shape, **options)


@pytest.mark.parametrize("options, error", [
    ({"activation": "gelu"}, r"^activation must be one of relu, gelu-tanh, gelu-erf, silu \(or None\), got 'gelu'$"),
    ({"activation": "none"}, r"^activation must be one of relu, .* got 'none'$"),
    ({"beta": 0.5}, r"^beta scales the residual, and there is none: pass residual=, or leave beta out$"),
    ({"alpha": "2"}, r"^alpha must be a finite number \(or None\), got '2'$"),
    ({"alpha": float("inf")}, r"^alpha must be a finite number \(or None\), got inf$"),
    ({"bias": _f32(7)}, r"^bias must be a contiguous vector of N = 6 float32 on the GPU, got float32 \(7,\)$"),
    ({"bias": _f32(6, typestr="<f8")}, r"^bias must be a contiguous vector of N = 6 float32 on the GPU, got float64"),
    ({"residual": _f32(4, 5)}, r"^residual must be a float32 4 x 6 matrix with out's row stride \(6 elements\), "
                               r"got float32 \(4, 5\)"),
    ({"residual": _f32(4, 6, strides=(32, 4))}, r"^residual must be a float32 4 x 6 matrix with out's row stride "
                                                r"\(6 elements\), got float32 \(4, 6\) with strides \(32, 4\) bytes$"),
    ({"residual": _f32(6)}, r"^residual must be a 2-D array on the GPU, got shape \(6,\)$"),
    ({"bias": _f32(6)}, r"^sgemm fuses no epilogue: bias, activation, residual, alpha and beta need the wgmma "
                        r"family \(float16 or bfloat16 on an sm_90 GPU, rows of A and B on 16-byte boundaries\); "
                        r"apply them after the product$"),
    ({"alpha": 2}, r"^sgemm fuses no epilogue"),
], ids=["activation", "activation none", "beta alone", "alpha text", "alpha inf", "bias length", "bias type",
        "residual shape", "residual stride", "residual vector", "float32 bias", "float32 alpha"])
def test_each_bad_epilogue_argument_is_one_line(options, error) -> None:
    with pytest.raises(gen.UsageError, match=error):
        gen.matmul(_f32(4, 3), _f32(3, 6), _f32(4, 6), **options)


def test_the_torch_operator_takes_the_epilogue_and_checks_its_shapes() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional)")
    import gen.torch_ops  # noqa: F401 - registers torch.ops.tilegen

    def meta(*shape):
        return torch.empty(*shape, dtype=torch.bfloat16, device="meta")

    def block(x, w, bias, r):
        return torch.ops.tilegen.matmul(x, w, bias, "gelu-tanh", residual=r, alpha=0.5, beta=2.0)

    y = torch.compile(block, fullgraph=True, backend="aot_eager")(meta(8, 32), meta(32, 64), meta(64), meta(8, 64))
    assert (tuple(y.shape), y.dtype) == ((8, 64), torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"^tilegen::matmul: bias must be a vector of N = 64, got \(63,\)$"):
        torch.ops.tilegen.matmul(meta(8, 32), meta(32, 64), meta(63))
    with pytest.raises(RuntimeError, match=r"^tilegen::matmul: residual must be \(8, 64\) like C, got \(8, 63\)$"):
        torch.ops.tilegen.matmul(meta(8, 32), meta(32, 64), residual=meta(8, 63))


def test_a_kernel_with_an_epilogue_takes_its_arrays_and_only_the_scalars_the_shape_does_not_set() -> None:
    kernel = gen.kernel("wgmma", 64, 32, 16, dtype="f16", epilogue="scale=alpha,bias=col,act=relu")
    assert kernel.arrays == ["A", "B", "C", "bias"] and kernel.variant.name.endswith("_alpha_biascol_relu")
    arrays = [FakeDeviceArray(shape, "<f2") for shape in ((64, 16), (16, 32), (64, 32), (32,))]
    with pytest.raises(gen.UsageError, match=r"^wgmma_f16_\w+_alpha_biascol_relu takes no scalar M, gamma from the "
                                             r"caller; it takes alpha$"):
        kernel(*arrays, scalars={"gamma": 1.0, "M": 3})
    with pytest.raises(gen.UsageError, match=r"^bias of wgmma at 64x32x16 must be \(32,\), got \(31,\)$"):
        kernel(*arrays[:3], FakeDeviceArray((31,), "<f2"), scalars={"alpha": 2.0})
    with pytest.raises(gen.UsageError, match="^a kernel with an epilogue takes its shape"):
        gen.kernel("wgmma", epilogue="bias=col")


@pytest.mark.parametrize("epilogue, error", [
    ("foo=bar", r"^epilogue 'foo=bar': foo is none of wgmma's epilogue parameters \(scale, bias, act, residual\); "
                r"write them like 'bias=col,act=gelu-tanh'$"),
    ("bias=cols", r"^epilogue 'bias=cols': bias 'cols' is not one of: none, col$"),
    ("scale=alpha-beta", r"^wgmma_\w+_alphabeta is not a valid wgmma variant: scale=alpha-beta scales the residual"),
])
def test_an_epilogue_written_wrong_is_one_line(epilogue, error) -> None:
    with pytest.raises(gen.UsageError, match=error):
        WGMMA.with_epilogue(WGMMA.default_variant(), epilogue)
