"""Epilogues of Hopper's GEMM (wgmma): what a model does to the product before it stores it, fused
into the kernel's last step, in registers, before the conversion to C's type:

    D = act(alpha * A·B + bias) + beta * R

`bias` is a vector of N (one value per column, in the inputs' type), `act` an activation evaluated in
float32, `R` a residual matrix like C (M x N with C's row stride ldc, in C's type), alpha and beta
float32 arguments of the kernel. The residual is added after the activation, as a transformer block's
residual connection needs (cuBLASLt's epilogue adds its C term before the activation instead).
Each part is asked for by a variant parameter (`scale`, `bias`, `act`, `residual`: wgmma's and gemv's,
declared by epilogue_field); at their defaults the kernel is the plain GEMM and takes the plain GEMM's
problem (wgmma's TMA_GEMM, gemv's HALF_GEMM), unless it takes a workspace too (stream-K's:
EpilogueGemmProblem with `workspace` words)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..core.errors import InvalidVariant, UsageError
from ..core.tensor_maps import BOX
from .gemm import MatmulShape
from .hgemm import TMA_GEMM, HalfGemmProblem, TmaGemmProblem
from .problem import UNIT_ROUNDOFF, Input, Output, Scalar, Workspace, numpy_dtype
from .variant import choice

SCALES = ("none", "alpha", "alpha-beta")
ACTIVATIONS = ("none", "relu", "gelu-tanh", "gelu-erf", "silu")
RESIDUALS = ("none", "add")
PARAMETERS = ("scale", "bias", "act", "residual")  # the variant parameters of an epilogue, in Epilogue's order
FIELDS = {  # each parameter's default, values, name tag and help, as the variants declare them (epilogue_field)
    "scale": ("none", SCALES, "", "alpha: the product times the float argument alpha; alpha-beta: the residual "
              "times beta too (residual=add)"),
    "bias": ("none", ("none", "col"), "bias", "col: a vector of N added to every row (the inputs' type)"),
    "act": ("none", ACTIVATIONS, "", "the activation after the bias, in float32: ReLU, GELU (tanh or erf), SiLU"),
    "residual": ("none", RESIDUALS, "res", "add: a matrix like C (C's type, row stride ldc) added after the activation"),
}
ALPHA, BETA = 0.25, -0.75  # the factors a check passes: exact in every type, neither 0 nor 1
# float32 roundings an activation may add to a float32 output: erff's 2 ulp; __expf's 2 + 1.2 |z| ulp, where
# the sigmoid's z beyond 25 moves the output by less (GELU and SiLU as x / (1 + __expf(-z)))
ACTIVATION_ROUNDINGS = 32
# into a 16-bit output, GELU (tanh) and SiLU take 0.5 x (1 + tanh.approx.f32(y)): at most half of tanh.approx's
# 2^-11 relative error (PTX ISA) reaches the output, below its own rounding
SFU_TANH_ERROR = 2.0**-12


def activation_error(dtype: str) -> float:
    """What evaluating the activation may add to an output of type `dtype`, relative."""
    return ACTIVATION_ROUNDINGS * UNIT_ROUNDOFF["f32"] + (0.0 if dtype == "f32" else SFU_TANH_ERROR)


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.frompyfunc(math.erf, 1, 1)(x / math.sqrt(2.0)).astype(np.float64))


ACTIVATE = {  # the float64 reference of each activation
    "none": lambda x: x,
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu-tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
    "gelu-erf": _gelu_erf,
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}


@dataclass(frozen=True)
class Epilogue:
    """One epilogue: a wgmma variant's `scale`, `bias`, `act` and `residual`, and its `out` (the
    residual is in C's type)."""

    scale: str = "none"
    bias: str = "none"
    act: str = "none"
    residual: str = "none"
    out: str = "same"

    @property
    def fused(self) -> bool:
        """Whether the kernel does anything after the product (else it is the plain GEMM)."""
        return self.parts != ("none",) * 4

    @property
    def alpha(self) -> bool:
        return self.scale != "none"

    @property
    def beta(self) -> bool:
        return self.scale == "alpha-beta"

    @property
    def text(self) -> str:
        """The parameters away from the plain GEMM's, as a tuning key names them: 'bias=col,act=gelu-tanh'."""
        return ",".join(f"{name}={value}" for name, value in zip(PARAMETERS, self.parts) if value != "none")

    @property
    def parts(self) -> tuple[str, str, str, str]:
        return self.scale, self.bias, self.act, self.residual

    def check(self) -> None:
        if self.beta and self.residual == "none":
            raise InvalidVariant("scale=alpha-beta scales the residual by beta, and there is none: use residual=add, "
                                 "or scale=alpha")

    def problem(self, plain: HalfGemmProblem = TMA_GEMM) -> HalfGemmProblem:
        """The problem of a kernel that computes it after `plain`'s product (A and B passed as `plain` passes them)."""
        return epilogue_problem(self, plain=plain) if self.fused else plain


def epilogue_field(name: str) -> Any:
    """Epilogue parameter `name` as a variant's dataclass field: asked for, never searched."""
    default, values, tag, help = FIELDS[name]
    return choice(default, values, tag=tag, omit="none", help=help)


def with_epilogue(family: Any, variant: Any, epilogue: str) -> Any:
    """`variant` of `family` computing `epilogue` ('bias=col,act=gelu-tanh'; '' for none) after its product."""
    asked = dict(part.partition("=")[::2] for part in epilogue.split(",") if part)
    if unknown := sorted(set(asked) - set(PARAMETERS)):
        raise UsageError(f"epilogue {epilogue!r}: {', '.join(unknown)} is none of {family.name}'s epilogue parameters "
                         f"({', '.join(PARAMETERS)}); write them like 'bias=col,act=gelu-tanh'")
    try:
        return family.variant({**variant.params(), **{name: asked.get(name, "none") for name in PARAMETERS}})
    except InvalidVariant as reason:
        raise UsageError(f"epilogue {epilogue!r}: {reason}") from None


def called_epilogue(bias: bool, activation: str | None, residual: bool, alpha: bool, beta: bool) -> Epilogue:
    """The epilogue of a gen.matmul call from what it was given (its arrays, its activation's name,
    its factors); UsageError for a call no epilogue computes."""
    if activation is not None and (not isinstance(activation, str) or activation not in ACTIVATIONS[1:]):
        raise UsageError(f"activation must be one of {', '.join(ACTIVATIONS[1:])} (or None), got {activation!r}")
    if beta and not residual:
        raise UsageError("beta scales the residual, and there is none: pass residual=, or leave beta out")
    scale = "alpha-beta" if beta else "alpha" if alpha else "none"
    return Epilogue(scale, "col" if bias else "none", activation or "none", "add" if residual else "none")


@functools.cache
def epilogue_problem(epilogue: Epilogue, workspace: Workspace | None = None,
                     plain: HalfGemmProblem = TMA_GEMM) -> "EpilogueGemmProblem":
    """One problem object per epilogue, workspace and plain problem: the GPU worker keeps inputs and
    references per problem."""
    return EpilogueGemmProblem(epilogue, workspace, plain)


class EpilogueGemmProblem(TmaGemmProblem):
    """The half GEMM with an epilogue, A and B passed as its `plain` problem passes them: its kernel takes
    (a_map, b_map, C, [bias,] [R,] [W,] M, N, K, ldc, [alpha,] [beta]) after TMA_GEMM (wgmma), (A, B, C,
    [bias,] [R,] M, N, K, lda, ldb, ldc, [alpha,] [beta]) after HALF_GEMM (gemv); its inputs add the bias
    and the residual, and its reference applies the same epilogue in float64. W: the kernel's
    `workspace`, where it takes one (named W)."""

    def __init__(self, epilogue: Epilogue, workspace: Workspace | None = None, plain: HalfGemmProblem = TMA_GEMM):
        self.epilogue, self.workspace, self.plain = epilogue, workspace, plain
        extras = [Input("bias")] * (epilogue.bias == "col") + [Input("R")] * (epilogue.residual == "add") \
            + [workspace] * (workspace is not None)
        factors = [Scalar(n, ctype="float") for n, on in (("alpha", epilogue.alpha), ("beta", epilogue.beta)) if on]
        self.arguments = (Input("A"), Input("B"), Output("C"), *extras, Scalar("M", "m"), Scalar("N", "n"),
                          Scalar("K", "k"), Scalar("lda"), Scalar("ldb"), Scalar("ldc"), *factors)

    @property
    def a_rows(self) -> int:
        """The rows of A's boxes in its tensor maps: its plain problem's."""
        return getattr(self.plain, "a_rows", BOX)

    @property
    def checked_as(self) -> TmaGemmProblem:
        """Itself; with a workspace or thin boxes of A, the same epilogue's problem without them (its inputs
        and reference)."""
        if self.workspace is None and self.a_rows == BOX:
            return self
        return self.epilogue.problem(TMA_GEMM if self.a_rows != BOX else self.plain).checked_as

    def arrays(self, shape: MatmulShape) -> dict[str, tuple[int, ...]]:
        extras = {"bias": (shape.n,), "R": (shape.m, shape.ldc)}
        names = {a.name for a in self.arguments}
        return {**super().arrays(shape), **{name: dims for name, dims in extras.items() if name in names},
                **({self.workspace.name: (self.workspace.words,)} if self.workspace else {})}

    def scalars(self, shape: MatmulShape) -> dict[str, int | float]:
        factors = {"alpha": ALPHA, "beta": BETA}
        return {a.name: factors[a.name] if a.name in factors else getattr(shape, a.attribute)
                for a in self.arguments if isinstance(a, Scalar)}

    def kernel_arguments(self, shape: MatmulShape, pointers: Mapping[str, Any]) -> list[Any]:
        extras = [a.name for a in self.arguments[3:] if isinstance(a, (Input, Workspace))]
        if missing := [a.name for a in self.arguments[3:] if isinstance(a, Input) and a.name not in pointers]:
            raise UsageError(f"this kernel's epilogue also takes {' and '.join(missing)} (bias: a vector of N; R: a "
                             f"matrix like C): pass them")
        # A, B, C and the sizes as the plain problem passes them; tensor maps are this problem's own (FP8's
        # subclass makes them of one-byte elements)
        plain = super() if isinstance(self.plain, TmaGemmProblem) else self.plain
        a, b, c, *sizes = plain.kernel_arguments(shape, pointers)
        scalars = self.scalars(shape)  # alpha and beta: the caller's where `pointers` holds them (gen.matmul)
        factors = [np.float32(pointers.get(name, scalars[name])) for name in ("alpha", "beta") if name in scalars]
        return [a, b, c, *(np.uintp(int(pointers[name])) for name in extras), *sizes, *factors]

    def element_type(self, name: str, dtype: str, output_dtype: str) -> str:
        return output_dtype if name == "R" else super().element_type(name, dtype, output_dtype)

    def random_inputs(self, dtype: str, shape: MatmulShape, seed: int) -> dict[str, np.ndarray]:
        inputs = super().random_inputs(dtype, shape, seed)
        if "R" in inputs and self.epilogue.out == "f32":  # like C: in float32
            inputs["R"] = inputs["R"].astype(numpy_dtype("f32"))
        return inputs

    def reference(self, inputs: Mapping[str, np.ndarray], shape: MatmulShape) -> np.ndarray:
        epilogue, scalars = self.epilogue, self.scalars(shape)
        d = self.product(inputs, shape) * scalars.get("alpha", 1.0)
        if epilogue.bias == "col":
            d = d + inputs["bias"][: shape.n]
        d = ACTIVATE[epilogue.act](d)
        if epilogue.residual == "add":
            d = d + scalars.get("beta", 1.0) * inputs["R"][: shape.m, : shape.n]
        return d

    def product(self, inputs: Mapping[str, np.ndarray], shape: MatmulShape) -> np.ndarray:
        """A·B in float64: what the epilogue is applied to."""
        return super().reference(inputs, shape)

    def tolerance(self, dtype: str, shape: MatmulShape) -> float:
        """The GEMM's, twice over (an activation may halve the reference's norm: ReLU drops the
        negative half), plus the activation's evaluation."""
        return 2 * super().tolerance(dtype, shape) + activation_error(dtype)
