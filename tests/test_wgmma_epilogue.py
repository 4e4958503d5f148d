"""wgmma's fused epilogues without a GPU: D = act(alpha * A·B + bias) + beta * R. Names round-trip,
the refused combination says why, the problem's arguments, inputs and float64 reference (against a
small case worked out by hand), and every epilogue rendered and compiled for sm_90a."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gen.compiling.compiler import CompileOptions
from gen.compiling.pool import compile_variants
from gen.core.errors import InvalidVariant, UsageError
from gen.families import get_family
from gen.families.space import Space

from .test_bad_inputs import assert_one_line_error, run_main

WGMMA = get_family("wgmma")
FUSED = {"scale": "alpha-beta", "bias": "col", "act": "gelu-tanh", "residual": "add"}


def test_epilogue_names_round_trip_and_the_plain_gemm_keeps_its_name() -> None:
    plain = WGMMA.default_variant()
    assert plain.name == "wgmma_f16_csame_bm128_bn256_wg2_s3_persistent_g8_producer_cl1_bulk"
    for act in ("none", "relu", "gelu-tanh", "gelu-erf", "silu"):
        for scale in ("none", "alpha", "alpha-beta"):
            for bias in ("none", "col"):
                variant = WGMMA.variant({"act": act, "scale": scale, "bias": bias, "residual": "add"})
                assert WGMMA.variant_type.from_name(variant.name) == variant
    assert WGMMA.variant(FUSED).name == plain.name + "_alphabeta_biascol_gelutanh_resadd"


def test_the_default_space_searches_no_epilogue_and_plain_variants_keep_the_plain_problem() -> None:
    variants = Space.default(WGMMA).expand().valid
    assert variants and not any(v.epilogue.fused for v in variants)
    assert {WGMMA.problem_of(v) for v in variants if v.schedule != "streamk" and v.bm >= 64} == {WGMMA.problem}
    thin = {WGMMA.problem_of(v) for v in variants if v.bm < 64}  # A in boxes of their rows, the same inputs
    assert {p.a_rows for p in thin} == {16} and {p.checked_as for p in thin} == {WGMMA.problem.checked_as}
    assert len({WGMMA.problem_of(v) for v in variants if v.schedule == "streamk"}) == 1  # with stream-K's workspace
    fused = WGMMA.variant(FUSED)
    assert WGMMA.problem_of(fused) is WGMMA.problem_of(WGMMA.variant({**FUSED, "store": "direct"}))  # one per epilogue
    f32 = WGMMA.variant({**FUSED, "out": "f32", "store": "direct"})
    assert WGMMA.problem_of(fused) is not WGMMA.problem_of(f32)  # R is like C
    thin = WGMMA.variant({**FUSED, "bm": 16, "consumers": 1, "schedule": "grid", "store": "direct"})
    assert WGMMA.problem_of(thin).a_rows == 16 and WGMMA.problem_of(thin).checked_as is WGMMA.problem_of(fused)


def test_a_beta_without_a_residual_is_refused_with_what_to_use(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(InvalidVariant, match="scale=alpha-beta scales the residual by beta.*use residual=add"):
        WGMMA.variant_type(scale="alpha-beta").check()
    assert_one_line_error(*run_main(capsys, ["render", "wgmma", "-p", "scale=alpha-beta", "-p", "act=relu"]),
                          "scale=alpha-beta scales the residual by beta")
    with pytest.raises(InvalidVariant, match="act 'gelu' is not one of"):
        WGMMA.variant_type(act="gelu").check()


def test_the_kernel_takes_bias_and_residual_after_c_and_alpha_and_beta_last() -> None:
    shape = WGMMA.parse_shape("64x48x32")
    problem = WGMMA.problem_of(WGMMA.variant(FUSED))
    assert [a.name for a in problem.arguments] == ["A", "B", "C", "bias", "R", "M", "N", "K", "lda", "ldb", "ldc",
                                                    "alpha", "beta"]
    assert problem.scalars(shape) == {"M": 64, "N": 48, "K": 32, "lda": 32, "ldb": 48, "ldc": 48, "alpha": 0.25,
                                      "beta": -0.75}
    alpha_only = WGMMA.problem_of(WGMMA.variant({"scale": "alpha", "act": "relu"}))
    assert [a.name for a in alpha_only.arguments if a.name not in ("lda", "ldb")] == \
        ["A", "B", "C", "M", "N", "K", "ldc", "alpha"]
    with pytest.raises(UsageError, match="epilogue also takes bias and R"):  # gen.kernel's three arrays, say
        problem.kernel_arguments(shape, {"A": 0x1000, "B": 0x2000, "C": 0x3000})
    with pytest.raises(UsageError, match="C must start at a 16-byte boundary"):  # the plain GEMM's demands hold
        problem.kernel_arguments(shape, {"A": 0x1000, "B": 0x2000, "C": 0x3004, "bias": 0x4000, "R": 0x5000})


def test_bias_is_a_vector_of_n_and_the_residual_is_like_c() -> None:
    shape = WGMMA.parse_shape("5x6x8:8,8,7")
    inputs = WGMMA.problem_of(WGMMA.variant({**FUSED, "out": "f32", "store": "direct"})).random_inputs("bf16", shape, 0)
    assert inputs["bias"].shape == (6,) and str(inputs["bias"].dtype) == "bfloat16"
    assert inputs["R"].shape == (5, 7) and inputs["R"].dtype == np.float32
    same = WGMMA.problem_of(WGMMA.variant(FUSED)).random_inputs("f16", shape, 0)
    assert same["R"].dtype == np.float16


def _small_case() -> tuple[dict[str, np.ndarray], object]:
    """A·B = [[4, -8], [0.5, 2]] (2 x 2 x 2), a bias and a residual, all exact."""
    shape = WGMMA.parse_shape("2x2x2")
    inputs = {"A": np.array([[1.0, 2.0], [0.5, -0.5]]), "B": np.array([[2.0, 0.0], [1.0, -4.0]]),
              "bias": np.array([-2.0, 4.0]), "R": np.array([[1.0, -1.0], [0.5, 2.0]])}
    return inputs, shape


def test_the_reference_applies_alpha_the_bias_relu_and_beta_times_the_residual() -> None:
    inputs, shape = _small_case()
    problem = WGMMA.problem_of(WGMMA.variant({**FUSED, "act": "relu"}))
    # alpha = 0.25: [[1, -2], [0.125, 0.5]]; + bias: [[-1, 2], [-1.875, 4.5]]; relu: [[0, 2], [0, 4.5]];
    # + beta (-0.75) * R: [[-0.75, 2.75], [-0.375, 3]]
    assert problem.reference(inputs, shape).tolist() == [[-0.75, 2.75], [-0.375, 3.0]]
    plain_add = WGMMA.problem_of(WGMMA.variant({"residual": "add"}))  # no alpha, no beta: A·B + R
    assert plain_add.reference(inputs, shape).tolist() == [[5.0, -9.0], [1.0, 4.0]]


@pytest.mark.parametrize("act, formula", [
    ("gelu-tanh", lambda x: 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))),
    ("gelu-erf", lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2)))),
    ("silu", lambda x: x / (1 + math.exp(-x))),
])
def test_the_reference_applies_each_smooth_activation_after_the_bias(act, formula) -> None:
    inputs, shape = _small_case()
    problem = WGMMA.problem_of(WGMMA.variant({"bias": "col", "act": act}))
    pre = [[2.0, -4.0], [-1.5, 6.0]]  # A·B + bias
    expected = [[formula(x) for x in row] for row in pre]
    assert np.allclose(problem.reference(inputs, shape), expected, rtol=1e-9, atol=0)
    assert problem.tolerance("f16", shape) > WGMMA.problem.tolerance("f16", shape)


EPILOGUES = [  # each parameter's every value at least once, on both store paths and both output types
    {**FUSED, "act": act, "store": store, "out": out, "bn": bn}
    for act in ("relu", "gelu-tanh", "gelu-erf", "silu") for store, out, bn in (("direct", "same", 256), ("bulk", "f32", 128))
] + [{"scale": "alpha", "store": "bulk", "dtype": "bf16"}, {"bias": "col", "store": "direct", "dtype": "bf16"},
     {"residual": "add", "bias": "col", "act": "silu", "schedule": "pingpong", "bn": 128, "store": "direct"}]


SPILL_LIMIT = 32  # bytes: with 128 sums per thread, the residual's loads and the bias's columns spill a few (nvcc 13.0: 32 with ReLU, 128 x 256, stored direct)


def test_every_epilogue_renders_and_compiles_for_sm_90a_spilling_at_most_a_few_registers(
        compile_options: CompileOptions) -> None:
    variants = [WGMMA.variant(params) for params in EPILOGUES]
    for variant in variants:
        variant.check()
    results = compile_variants(variants, compile_options)
    assert len(results) == len(variants)
    assert not [(r.variant.name, r.log) for r in results if not r.ok]
    assert all("for 'sm_90a'" in r.log for r in results)  # ptxas's report: each compiled for sm_90a
    assert all(r.resources.spill_bytes <= SPILL_LIMIT and r.resources.stack_bytes <= SPILL_LIMIT for r in results)
