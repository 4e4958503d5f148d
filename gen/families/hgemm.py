"""hgemm: C = A·B on the tensor cores, A and B in float16 or bfloat16, sums in float32.

A block of threads owns a bm x bn tile of C and walks along K in tiles of bk, copied from global
to shared memory by cp.async, `stages` tiles deep. Its warps each own a wm x wn piece, multiplied
with mma.sync.m16n8k16 on operands loaded from shared memory by ldmatrix. How the tiles sit in
shared memory is the `layout`: rows back to back (bank conflicts for ldmatrix), padded by one
16-byte chunk per row (the seeds' remedy), or XOR-swizzled (the same effect, no padding). `group`
orders the blocks so that neighbours share rows of A and columns of B in L2. C is written in
float32 or in the input type (`out`). On sm_90, `copy=tma` has the Tensor Memory Accelerator copy
the tiles in 64 x 64 boxes with its 128-byte swizzle (the kernel then takes tensor maps of A and B:
`problem_of`), each warp waiting only for its own next tile.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Mapping

import numpy as np

from ..core.errors import InvalidVariant, UsageError
from ..core.limits import REGISTERS_PER_SM, WARP_SIZE
from ..core.tensor_maps import ALIGNMENT, BOX, box_map
from .family import Family, Launch, arch_cc, blocks, check_shared_bytes, check_threads
from .gemm import GemmProblem, MatmulShape
from .problem import GEMM_BF16, GEMM_F16, UNIT_ROUNDOFF, Ceiling, element_bytes, sum_tolerance
from .tiles import WarpTiles
from .variant import Variant, choice, integer

LAYOUTS = ("swizzle", "pad", "none")
CHUNK = 8  # elements of a 16-byte chunk: the unit of cp.async and of an ldmatrix row
MAX_ACCUMULATORS = 128  # float32 outputs per thread: beyond a 64 x 64 warp tile, registers spill
# Registers a thread needs beside its sums (operands, addresses, the pipeline's counters): seen in
# ptxas's reports of this template (64 x 64 warp tile: 226-240 in all; 64 x 32: 146-160; 32 x 32: 92-106).
OTHER_REGISTERS = 96
ALIGNMENT_SLACK = 1024  # copy=tma: the stages start at the first 1024-byte boundary of dynamic shared memory


class HalfGemmProblem(GemmProblem):
    """The GEMM with half-precision inputs. The inputs are rounded to f16 or bf16 before the float64
    reference is computed from them, so the reference is exact for those inputs: the error left is
    the float32 sums' and the output's own rounding."""

    def tolerance(self, dtype: str, shape: MatmulShape) -> float:
        """`dtype` is C's type: float32 sums, plus one rounding of each output when C is half."""
        rounding = 0.0 if dtype == "f32" else 2 * UNIT_ROUNDOFF[dtype]
        return sum_tolerance("f32", shape.k) + rounding

    def ceiling(self, dtype: str) -> Ceiling:
        return GEMM_BF16 if dtype == "bf16" else GEMM_F16


HALF_GEMM = HalfGemmProblem()


class TmaGemmProblem(HalfGemmProblem):
    """The half-precision GEMM, with A and B passed as TMA tensor maps: the kernel's parameters are
    (a_map, b_map, C, M, N, K, ldc). A's boxes are `a_rows` rows (fewer than BOX: a thin tile's)."""

    def __init__(self, a_rows: int = BOX):
        self.a_rows = a_rows

    def kernel_arguments(self, shape: MatmulShape, pointers: Mapping[str, Any]) -> list[Any]:
        address = {name: int(pointer) for name, pointer in pointers.items()}
        if address["C"] % ALIGNMENT:
            raise UsageError(f"C must start at a 16-byte boundary for paired stores next to TMA copies; it starts "
                             f"at {address['C']:#x}")
        return [*self.tensor_maps(shape, address), np.uintp(address["C"]),
                *(np.int32(x) for x in (shape.m, shape.n, shape.k, shape.ldc))]

    def tensor_maps(self, shape: MatmulShape, address: Mapping[str, int]) -> list[np.void]:
        """A's and B's tensor maps, both row-major: M x K and K x N."""
        return [box_map(address["A"], shape.m, shape.k, 2 * shape.lda, "A", box_rows=self.a_rows),
                box_map(address["B"], shape.k, shape.n, 2 * shape.ldb, "B")]

    @property
    def checked_as(self) -> HalfGemmProblem:
        return HALF_GEMM  # the same inputs and reference: only how A and B are passed differs

    def rows_refusal(self, shape: MatmulShape, instead: str) -> str | None:
        """Why TMA cannot copy this shape's A and B (rows off 16-byte boundaries), naming what to use."""
        if shape.lda % CHUNK or shape.ldb % CHUNK:
            return (f"TMA copies rows that start on 16-byte boundaries: lda and ldb must be multiples of {CHUNK}; "
                    f"{shape} is not (use {instead})")
        return None


TMA_GEMM = TmaGemmProblem()


@functools.cache
def tma_gemm(a_rows: int) -> TmaGemmProblem:
    """The TMA GEMM whose A boxes are `a_rows` rows: one object each (TMA_GEMM's BOX)."""
    return TMA_GEMM if a_rows == BOX else TmaGemmProblem(a_rows)


@dataclass(frozen=True, order=True)
class HgemmVariant(WarpTiles, Variant):
    family: ClassVar[str] = "hgemm"

    dtype: str = choice("f16", ("f16", "bf16"), space=("f16",), emitted=("f16", "bf16"),
                        help="element type of A and B: float16 or bfloat16")
    out: str = choice("same", ("same", "f32"), tag="c", space=("same",), emitted=("same",),
                      help="C's type: the inputs' (same) or float32")
    bm: int = integer(128, tag="bm", minimum=16, space=(64, 128, 256), emitted=(128,), help="block tile rows (of C)")
    bn: int = integer(128, tag="bn", minimum=16, space=(64, 128, 256), emitted=(128,), help="block tile columns")
    bk: int = choice(32, (32, 64), tag="bk", space=(32, 64), emitted=(32, 64),
                     help="K step of the block tile: 2 or 4 steps of 16, their operands in two register sets")
    wm: int = integer(64, tag="wm", minimum=16, space=(32, 64), emitted=(64,), help="warp tile rows (a multiple of 16)")
    wn: int = integer(64, tag="wn", minimum=16, space=(32, 64), emitted=(64,), help="warp tile columns (a multiple of 16)")
    stages: int = choice(3, (2, 3, 4, 5), tag="s", space=(2, 3, 4), emitted=(3,),
                         help="tiles in shared memory at once, each copied in as soon as its stage is free")
    pipeline: str = choice("overlap", ("plain", "overlap"), space=("overlap",), emitted=("overlap",),
                           help="plain: wait and barrier as each tile starts; overlap: during its last k-step, "
                                "behind the last products")
    layout: str = choice("swizzle", LAYOUTS, space=("swizzle", "pad"), emitted=LAYOUTS,
                         help="shared tiles: XOR-swizzled chunks, rows padded by 16 bytes, or none (bank conflicts)")
    group: int = choice(8, (1, 4, 8, 16), tag="g", space=(8,), emitted=(8,),
                        help="rows of blocks taken together, column by column, for L2 reuse (1: row by row)")
    bounds: str = choice("none", ("none", "guard"), space=("none",), emitted=("none", "guard"),
                         help="none: shapes must be tile multiples; guard: checked")
    copy: str = choice("async", ("async", "scalar", "tma"), omit="async", space=("async", "tma"), emitted=("async", "tma"),
                       help="async: 16-byte cp.async (K, N, lda, ldb multiples of 8); scalar: any shape and alignment; "
                            "tma: the Tensor Memory Accelerator, 64 x 64 boxes (sm_90; lda, ldb multiples of 8)")

    @property
    def output_dtype(self) -> str:
        return "f32" if self.out == "f32" else self.dtype

    @property
    def a_tile_elements(self) -> int:
        """One stage of A's tile in shared memory, padding included."""
        return self.bm * (self.bk + self._row_padding)

    @property
    def b_tile_elements(self) -> int:
        return self.bk * (self.bn + self._row_padding)

    @property
    def _row_padding(self) -> int:
        return CHUNK if self.layout == "pad" else 0

    @property
    def shared_bytes(self) -> int:
        tiles = self.stages * (self.a_tile_elements + self.b_tile_elements) * element_bytes(self.dtype)
        if self.copy == "tma":  # from the first 1024-byte boundary (the swizzle's), then a barrier and a counter per stage
            return tiles + 16 * self.stages + ALIGNMENT_SLACK
        return tiles

    @property
    def dynamic_shared_bytes(self) -> int:
        return self.shared_bytes  # always sized at launch: every useful tile is past the 48 KiB of static

    @property
    def static_shared_bytes(self) -> int:
        return 0

    def check_combination(self) -> None:
        for tile, warp, axis in ((self.bm, self.wm, "m"), (self.bn, self.wn, "n")):
            if warp % 16:
                raise InvalidVariant(f"w{axis} {warp} must be a multiple of 16 (mma pieces are 16 rows, and B's are "
                                     f"loaded 16 columns at a time)")
            if tile % warp:
                raise InvalidVariant(f"w{axis} {warp} does not divide b{axis} {tile}; warps must tile the block")
        check_threads(self.threads_per_block, f"bm {self.bm} x bn {self.bn} with warp tile {self.wm} x {self.wn}")
        accumulators = self.wm * self.wn // WARP_SIZE
        if accumulators > MAX_ACCUMULATORS:
            raise InvalidVariant(f"warp tile {self.wm} x {self.wn} leaves {accumulators} float32 sums per thread; "
                                 f"more than {MAX_ACCUMULATORS} spill out of registers")
        registers = accumulators + OTHER_REGISTERS
        if registers * self.threads_per_block > REGISTERS_PER_SM:
            raise InvalidVariant(f"{self.threads_per_block} threads with warp tile {self.wm} x {self.wn} need about "
                                 f"{registers} registers each, {registers * self.threads_per_block} in all; an SM has "
                                 f"{REGISTERS_PER_SM} (use fewer warps or a smaller warp tile)")
        if self.copy == "tma" and (self.bk != BOX or self.layout != "swizzle" or self.bm % BOX or self.bn % BOX
                                   or BOX % self.wn or self.pipeline != "overlap"):
            raise InvalidVariant(f"copy=tma copies {BOX} x {BOX} boxes with the 128-byte swizzle, each warp on its own "
                                 f"(as pipeline=overlap): it needs bk {BOX}, layout=swizzle, bm and bn multiples of "
                                 f"{BOX}, wn dividing {BOX} (a warp's columns within a box) and pipeline=overlap; this "
                                 f"is bk {self.bk}, layout={self.layout}, bm {self.bm}, bn {self.bn}, wn {self.wn}, "
                                 f"pipeline={self.pipeline}")
        if self.layout == "swizzle" and self.bn % 64:
            raise InvalidVariant(f"layout=swizzle permutes B's rows in groups of 64 elements (8 chunks): bn {self.bn} "
                                 f"is not a multiple of 64 (use layout=pad)")
        check_shared_bytes("dynamic", self.shared_bytes, f"bm {self.bm}, bn {self.bn}, bk {self.bk} x {self.stages} stages")


class HgemmFamily(Family):
    """The GEMM on half-precision inputs, with tensor-core kernels."""

    name = "hgemm"
    summary = "C = A·B in float16 or bfloat16 on the tensor cores: mma.sync, ldmatrix, cp.async pipeline, swizzle or padding"
    variant_type = HgemmVariant
    problem = HALF_GEMM
    template = "hgemm.cu.j2"
    heatmap_axes = ("bm", "bn")
    heatmap_panels = "layout"
    matmul_dtypes = ("f16", "bf16")

    def arch_refusal(self, variant: HgemmVariant, arch: str) -> str | None:
        if variant.copy == "tma" and tuple(int(x) for x in arch_cc(arch).split(".")) < (9, 0):
            return (f"copy=tma needs the Tensor Memory Accelerator of sm_90 or later; this run compiles for {arch} "
                    f"(use copy=async)")
        return None

    def problem_of(self, variant: HgemmVariant) -> HalfGemmProblem:
        return TMA_GEMM if variant.copy == "tma" else HALF_GEMM

    def launch(self, variant: HgemmVariant, shape: MatmulShape) -> Launch:
        return Launch(grid=(blocks(shape.n, variant.bn), blocks(shape.m, variant.bm)),
                      block=(variant.threads_per_block,), dynamic_shared_bytes=variant.dynamic_shared_bytes)

    def refusal(self, variant: HgemmVariant, shape: MatmulShape) -> str | None:
        if variant.bounds == "none" and (shape.m % variant.bm or shape.n % variant.bn or shape.k % variant.bk):
            return (f"bounds=none needs M, N and K to be multiples of bm {variant.bm}, bn {variant.bn} and bk "
                    f"{variant.bk}; {shape} is not (use bounds=guard)")
        if variant.copy == "tma" and (reason := TMA_GEMM.rows_refusal(shape, "copy=scalar")):
            return reason
        if variant.copy == "async" and any(d % CHUNK for d in (shape.k, shape.n, shape.lda, shape.ldb)):
            return (f"copy=async copies 16 bytes at a time: K, N, lda and ldb must be multiples of {CHUNK}; "
                    f"{shape} is not (use copy=scalar)")
        if variant.bounds == "none" and shape.ldc % 2:
            return f"bounds=none stores two outputs at a time: ldc must be even; {shape} is not (use bounds=guard)"
        return None

    def adaptations(self, variant: HgemmVariant) -> list[HgemmVariant]:
        """Bound checks, then element-by-element copies as well (odd shapes, misaligned views)."""
        return [replace(variant, bounds="guard"), replace(variant, bounds="guard", copy="scalar")]

    def unaligned(self, variant: HgemmVariant) -> HgemmVariant | None:
        """Element-by-element copies and checked (single) stores: 16-byte copies need 16-byte aligned
        rows, and unchecked stores write C two elements at a time."""
        aligned_only = variant.copy != "scalar" or variant.bounds == "none"
        return replace(variant, bounds="guard", copy="scalar") if aligned_only else None

    def sanitize_size(self, variant: HgemmVariant) -> str:
        if variant.bounds == "none":
            return f"{2 * variant.bm}x{2 * variant.bn}x{2 * variant.bk}"
        return "131x203x101" if variant.copy == "scalar" else "136x200x104"  # async and tma: rows of whole chunks
