"""fp8gemm: C = A·B in FP8 (e4m3 or e5m2) on Hopper's tensor cores, sums in float32, C in bfloat16,
float16 or float32, scaled as torch._scaled_mm scales.

The wgmma family's kernel (templates/wgmma.cu.j2: TMA copies, mbarrier pipeline, wgmma from shared
memory, the same schedules, stores and epilogues) with three differences the hardware imposes:
wgmma reads 8-bit operands K-major only, so B comes as N x K row-major (K x N by columns, as
torch._scaled_mm takes its second argument); a stage holds 128 elements of K (128 bytes: the
swizzle's width) and each wgmma takes 32 of them (m64nNk32); and the float32 sums are multiplied by
the scales before the epilogue. A sibling family rather than more element types of wgmma's, because
B's layout, the output types and the scale arguments make it another problem: wgmma's space, names
and tuning stay as they are.

`scaling`: none; tensor (scale_a and scale_b: one float32 each, on the GPU); rowcol (scale_a: a float32
per row of A, scale_b: one per column of B, as torch._scaled_mm's row-wise scaling); block (DeepGEMM's:
scale_a per row of A and 128 elements of K, KB x M with KB = ceil(K / 128); scale_b per 128 x 128 block
of B, ceil(N / 128) x KB; torch._scaled_mm's 1x128 and 128x128 blockwise scales, transposed as it takes
them). With block scales each 128 of K is summed apart by the tensor cores, then added into a second
set of float32 sums, times its scales.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import ClassVar, Mapping

import numpy as np

from ..core.errors import InvalidVariant
from ..core.tensor_maps import BOX, box_map
from .epilogue import Epilogue, EpilogueGemmProblem, activation_error
from .gemm import MatmulShape
from .problem import GEMM_FP8, UNIT_ROUNDOFF, Ceiling, Input, numpy_dtype
from .family import blocks
from .variant import Variant, choice
from .wgmma import CLUSTER_HELP, MAX_SUMS, PERSISTENT_BLOCKS, SCHEDULES, SPLITS, THIN_ROWS, WgmmaFamily, WgmmaVariant

FP8_TYPES = ("e4m3", "e5m2")
FP8_OUTPUTS = ("bf16", "f16", "f32")
FP8_SCHEDULES = tuple(s for s in SCHEDULES if s != "streamk")
SCALINGS = ("none", "tensor", "rowcol", "block")
ROW_ELEMENTS = 16  # TMA's rows start on 16-byte boundaries: 16 FP8 elements
# Hopper's FP8 tensor cores keep about 14 bits of a sum's mantissa, not float32's 24 (DeepSeek-V3's
# technical report, 3.3.2; on an H200 the errors grow like sqrt(K), 30-50x below the tolerance this
# gives: docs/results/h200-fp8.md): the unit roundoff of the sums, in place of float32's.
FP8_SUM_ROUNDOFF = 2.0**-14
BK_FP8 = 128  # K per stage: 128 one-byte elements, the 128-byte swizzle's width
SCALE_BLOCK = BK_FP8  # block scaling's blocks, 128 of K for A's rows and 128 x 128 of B: one step each
# A tune's first picks and gen.matmul's untuned choice (Fp8GemmFamily.likely_best): the default, or
# tiles of 128 x 256, 192 or 128, each whole or split along K, whichever estimated_us finishes first
# (the first wins a tie); those with 4 stages and direct stores, as every tuned winner of the 512-token
# shapes on an H200 had (few tiles a block: no next tile's products for bulk stores to overlap, and
# their staging's room a stage).
FILLERS = ({}, *({"bn": bn, "stages": 4, "store": "direct", **split} for bn in (256, 192, 128)
                 for split in ({}, {"schedule": "grid", "split": 2}, {"schedule": "grid", "split": 4})))
# What estimated_us counts, fitted to an H200's 512-token Llama-3 shapes (docs/results/h200-fp8.md): a
# block's step of 128 along K by tile width (bm = 128: a 128 x 128 tile's step costs 73% of a 128 x 256
# one's, not half), and each round of split blocks' sum through distributed shared memory.
STEP_US = {256: 0.89, 192: 0.74, 128: 0.65}
SPLIT_SUM_US = 12.0


@dataclass(frozen=True)
class ColumnsShape(MatmulShape):
    """M x N x K with B given as N x K row-major (K x N by columns): ldb >= K."""

    b_by_columns: ClassVar[bool] = True


@dataclass(frozen=True, order=True)
class Fp8Variant(WgmmaVariant):
    family: ClassVar[str] = "fp8gemm"

    dtype: str = choice("e4m3", FP8_TYPES, space=("e4m3",), emitted=FP8_TYPES,
                        help="element type of A and B: e4m3 (4 exponent bits, 3 mantissa bits) or e5m2 (5 and 2)")
    out: str = choice("bf16", FP8_OUTPUTS, tag="c", space=("bf16",), emitted=("bf16",),
                      help="C's type: bfloat16, float16 or float32")
    stages: int = choice(3, (2, 3, 4, 5, 6), tag="s", space=(3, 4, 5), emitted=(3,),  # wgmma's deep ones: not measured here
                         help="tiles in shared memory at once; the producer refills each as soon as it is free")
    schedule: str = choice("persistent", FP8_SCHEDULES, space=FP8_SCHEDULES, emitted=("persistent",),
                           help="wgmma's schedules but streamk (its workspace is not passed with FP8's scales yet)")
    cluster: int = choice(1, (1, 2), tag="cl", space=(1,), emitted=(1,), help=CLUSTER_HELP)  # not measured here
    split: int = choice(1, SPLITS, tag="split", omit=1, space=SPLITS[:3], emitted=(1,),
                        help="blocks per tile of C, a cluster, each multiplying its share of K; the first adds the "
                             "others' float32 sums in their order (deterministic), then scales and stores")
    scaling: str = choice("tensor", SCALINGS, tag="by", space=("tensor",), emitted=SCALINGS,
                          help="none; tensor: the sums times scale_a * scale_b (float32 scalars on the GPU); "
                               "rowcol: times scale_a[row] * scale_b[column] (vectors of M and N); block: each 128 of K "
                               "times scale_a[block of K, row] * scale_b[block of 128 columns, block of K]")

    @property
    def output_dtype(self) -> str:
        return self.out

    def check_combination(self) -> None:
        if self.bm in THIN_ROWS:
            raise InvalidVariant(f"fp8gemm has no thin tiles (bm {self.bm}): its boxes of A are 64 rows; use bm 64, "
                                 f"128 or 256")
        if self.scaling == "block":
            self._check_block_scaling()
        if self.bias != "none":
            raise InvalidVariant("fp8gemm has no bias yet (its inputs' type is FP8): use bias=none and add the bias "
                                 "as a residual (residual=add)")
        super().check_combination()

    def _check_block_scaling(self) -> None:
        sums = self.sums_per_thread
        if 2 * sums > MAX_SUMS:
            raise InvalidVariant(f"scaling=block keeps a second set of float32 sums: {self.rows_per_consumer} rows x bn "
                                 f"{self.bn} need {2 * sums} per consumer thread, more than {MAX_SUMS} (use bn=128 or "
                                 f"less, or 64 rows per consumer)")
        if self.specialize != "producer":
            raise InvalidVariant("scaling=block has its products waited for step by step: use specialize=producer")


class Fp8GemmProblem(EpilogueGemmProblem):
    """The FP8 GEMM: A (M x K) and B (N x K) row-major, passed as TMA tensor maps of one-byte elements,
    then C, the epilogue's residual, the scales, M, N, K, ldc and the epilogue's factors. Its inputs are
    FP8 values (exact), its scales positive float32, and its float64 reference multiplies the
    dequantised inputs, applies the scales, then the epilogue."""

    shape_type = ColumnsShape

    def __init__(self, epilogue: Epilogue, scaling: str):
        super().__init__(epilogue)
        self.scaling = scaling
        scales = [Input("scale_a", "f32"), Input("scale_b", "f32")] * (scaling != "none")
        sizes = next(i for i, a in enumerate(self.arguments) if a.name == "M")
        self.arguments = (*self.arguments[:sizes], *scales, *self.arguments[sizes:])

    def arrays(self, shape: MatmulShape) -> dict[str, tuple[int, ...]]:
        blocks_k = blocks(shape.k, SCALE_BLOCK)
        rows = {"none": (), "tensor": (1, 1), "rowcol": (shape.m, shape.n),
                "block": (blocks_k * shape.m, blocks(shape.n, SCALE_BLOCK) * blocks_k)}[self.scaling]
        return {**super().arrays(shape), **dict(zip(("scale_a", "scale_b"), ((r,) for r in rows)))}

    def tensor_maps(self, shape: MatmulShape, address: Mapping[str, int]) -> list[np.void]:
        """A's and B's tensor maps: M x K and N x K, of one-byte elements."""
        return [box_map(address["A"], shape.m, shape.k, shape.lda, "A", 1),
                box_map(address["B"], shape.n, shape.k, shape.ldb, "B", 1)]

    def random_inputs(self, dtype: str, shape: MatmulShape, seed: int) -> dict[str, np.ndarray]:
        """A and B in [-1, 1) rounded to FP8 (so exactly representable); scales in [0.5, 2); R in C's type."""
        inputs = super().random_inputs(dtype, shape, seed)
        for name in ("scale_a", "scale_b"):
            if name in inputs:
                inputs[name] = inputs[name] * np.float32(0.75) + np.float32(1.25)
        if "R" in inputs:
            inputs["R"] = inputs["R"].astype(np.float64).astype(numpy_dtype(self.epilogue.out))
        return inputs

    def product(self, inputs: Mapping[str, np.ndarray], shape: MatmulShape) -> np.ndarray:
        """The dequantised inputs' product, B taken by columns, times the scales."""
        if self.scaling == "block":
            return dequantised_a(inputs, shape) @ dequantised_b(inputs, shape).T
        product = inputs["A"][:, : shape.k] @ inputs["B"][:, : shape.k].T
        if self.scaling != "none":
            product = product * inputs["scale_a"][: shape.m, None] * inputs["scale_b"][None, : shape.n]
        return product

    def tolerance(self, dtype: str, shape: MatmulShape) -> float:
        """The half-precision GEMM's rule with the tensor cores' FP8 sums in place of float32's: 16 u
        sqrt(K) with u = 2^-14, plus one rounding of each output to C's type (u of bfloat16 or float16,
        twice); the FP8 inputs are exact. With an epilogue, the epilogue's rule: that twice, plus the
        activation's evaluation."""
        rounding = 0.0 if dtype == "f32" else 2 * UNIT_ROUNDOFF[dtype]
        gemm = 16 * FP8_SUM_ROUNDOFF * math.sqrt(shape.k) + rounding
        return 2 * gemm + activation_error(dtype) if self.epilogue.fused else gemm

    def ceiling(self, dtype: str) -> Ceiling:
        return GEMM_FP8


def dequantised_a(inputs: Mapping[str, np.ndarray], shape: MatmulShape) -> np.ndarray:
    """A (M x K) in float64, each row's blocks of 128 of K times their scale (scale_a: KB x M)."""
    scales = inputs["scale_a"].astype(np.float64).reshape(-1, shape.m).T  # M x KB
    return inputs["A"][: shape.m, : shape.k].astype(np.float64) * np.repeat(scales, SCALE_BLOCK, axis=1)[:, : shape.k]


def dequantised_b(inputs: Mapping[str, np.ndarray], shape: MatmulShape) -> np.ndarray:
    """B (N x K) in float64, each 128 x 128 block times its scale (scale_b: ceil(N / 128) x KB)."""
    scales = inputs["scale_b"].astype(np.float64).reshape(-1, blocks(shape.k, SCALE_BLOCK))
    spread = np.repeat(np.repeat(scales, SCALE_BLOCK, axis=0), SCALE_BLOCK, axis=1)
    return inputs["B"][: shape.n, : shape.k].astype(np.float64) * spread[: shape.n, : shape.k]


@functools.cache
def fp8_problem(epilogue: Epilogue, scaling: str) -> Fp8GemmProblem:
    """One problem object per epilogue and scaling: the GPU worker keeps inputs and references per problem."""
    return Fp8GemmProblem(epilogue, scaling)


class Fp8GemmFamily(WgmmaFamily):
    """The GEMM on FP8 inputs with Hopper's wgmma and TMA: sm_90a only."""

    name = "fp8gemm"
    summary = ("C = A·B in FP8 (e4m3, e5m2) on Hopper, B given N x K, scaled per tensor or per row and column, "
               "C in bf16, f16 or f32: wgmma's kernel (sm_90a)")
    variant_type = Fp8Variant
    problem = fp8_problem(Epilogue(out="bf16"), "tensor")
    fallback = None  # no other family multiplies FP8
    matmul_dtypes = FP8_TYPES

    def problem_of(self, variant: Fp8Variant) -> Fp8GemmProblem:
        return fp8_problem(variant.epilogue, variant.scaling)

    def refusal(self, variant: Fp8Variant, shape: MatmulShape) -> str | None:
        if shape.lda % ROW_ELEMENTS or shape.ldb % ROW_ELEMENTS:
            return (f"TMA copies rows that start on 16-byte boundaries: FP8 lda and ldb (K for dense matrices) must be "
                    f"multiples of {ROW_ELEMENTS}; {shape} is not (pad the rows)")
        return None

    def sanitize_size(self, variant: Fp8Variant) -> str:
        return f"{variant.bm + 3}x{variant.bn + 8}x{2 * BOX + 48}"

    def likely_best(self, shape: MatmulShape, dtype: str | None = None) -> list[Variant]:
        """The default and the narrower tiles and splits of K (FILLERS) that fill SMs it leaves idle
        (512 tokens: 64-128 tiles of 128 x 256 for 132 SMs), those estimated to finish first first."""
        default = self.adapted_default(shape, dtype)
        fillers = (replace(default, **changes) for changes in FILLERS)
        return sorted((v for v in fillers if self.runnable(v, shape) == v), key=lambda v: estimated_us(v, shape))


def estimated_us(variant: Fp8Variant, shape: MatmulShape) -> float:
    """A FILLERS variant's time on a shape, in microseconds on an H200 less what every launch costs: the
    rounds of blocks the SMs run one after another, times each block's steps along K and its split's sum."""
    tiles = blocks(shape.m, variant.bm) * blocks(shape.n, variant.bn)
    rounds = blocks(tiles * variant.split, PERSISTENT_BLOCKS)
    steps = blocks(blocks(shape.k, BK_FP8), variant.split)
    return rounds * (steps * STEP_US[variant.bn] + SPLIT_SUM_US * (variant.split > 1))
