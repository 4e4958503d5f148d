"""sgemm: C = A·B in float32 on the CUDA cores, register-blocked (no tensor cores).

A block of threads owns a bm x bn tile of C and walks along K in steps of bk. Each warp owns a
wm x wn piece of it; its 32 lanes sit 4 x 8 over a sub-tile of (4·tm) x (8·tn), which the warp
repeats to cover its piece, so each thread accumulates (wm·wn)/32 outputs in registers. A's
tile is stored transposed in shared memory (As[k][m]) so that both operands are read as 16-byte
vectors along M and N. With stages=2 the next tiles' global loads are issued before the current
products and stored into the other shared buffer after them (register prefetch, one barrier
per step); with load=async B's tile is copied there by cp.async instead (sm_80 and later).
With splitk=S, blockIdx.z takes one of S slices of K and adds its partial sums into C, which the
launch zeroes first: more blocks for shapes whose M x N tiles alone cannot fill the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..core.errors import InvalidVariant
from .family import Family, Launch, blocks, check_shared_bytes, check_threads
from .problem import element_bytes
from ..core.limits import MAX_REGISTERS_PER_THREAD, WARP_SIZE
from .tiles import SMEM, SharedTiles, WarpTiles
from .variant import Variant, choice, integer
from .gemm import GEMM, MatmulShape

LANES_M, LANES_N = 4, 8  # how a warp's 32 lanes sit over its sub-tile
BOUNDS = ("none", "guard", "split")
LOADS = ("registers", "async")
SPLITS = (1, 2, 4, 8, 16)
SYNCS = ("both", "none")


@dataclass(frozen=True, order=True)
class SgemmVariant(SharedTiles, WarpTiles, Variant):
    family: ClassVar[str] = "sgemm"

    dtype: str = choice("f32", ("f32",), help="element type (float32 only: the CUDA-core SGEMM)")
    bm: int = integer(128, tag="bm", minimum=1, space=(64, 128, 256), emitted=(128,), help="block tile rows (of C)")
    bn: int = integer(128, tag="bn", minimum=1, space=(64, 128, 256), emitted=(128,), help="block tile columns")
    bk: int = integer(16, tag="bk", minimum=1, space=(8, 16, 32), emitted=(16,), help="K step of the block tile")
    wm: int = integer(64, tag="wm", minimum=1, space=(32, 64, 128), emitted=(64,), help="warp tile rows")
    wn: int = integer(64, tag="wn", minimum=1, space=(32, 64, 128), emitted=(64,), help="warp tile columns")
    tm: int = integer(8, tag="tm", minimum=1, space=(4, 8), emitted=(8,),
                      help="rows a thread holds per warp sub-tile")
    tn: int = integer(4, tag="tn", minimum=1, space=(4, 8), emitted=(4,),
                      help="columns a thread holds per warp sub-tile")
    padding: int = integer(4, tag="p", minimum=0, space=(0, 4), emitted=(4,),
                           help="extra floats per row of the transposed A tile (a multiple of 4)")
    vec: int = choice(4, (1, 4), tag="v", space=(1, 4), emitted=(1, 4),
                      help="floats per global load and store: 4 = 16-byte vectors")
    stages: int = choice(2, (1, 2), tag="s", space=(1, 2), emitted=(1, 2),
                         help="shared buffers: 2 overlaps the next loads with the products")
    load: str = choice("registers", LOADS, omit="registers", space=LOADS, emitted=LOADS,
                       help="stages=2: the next tiles come through registers, or B's by cp.async (sm_80+)")
    splitk: int = choice(1, SPLITS, tag="sk", omit=1,
                         help="slices of K run by separate blocks, their sums added into C (zeroed first)")
    bounds: str = choice("guard", BOUNDS, space=("none",), emitted=BOUNDS,
                         help="none: shapes must be tile multiples; guard: checked; split: interior blocks unchecked")
    sync: str = choice("both", SYNCS, emitted=SYNCS, help="both: the barriers; none: races, for teaching")
    smem: str = choice("static", SMEM, omit="static",
                       help="shared tiles declared static, or extern and sized at launch (needed past 48 KiB)")

    @property
    def iter_m(self) -> int:
        """Warp sub-tiles along M."""
        return self.wm // (LANES_M * self.tm)

    @property
    def iter_n(self) -> int:
        return self.wn // (LANES_N * self.tn)

    @property
    def accumulators(self) -> int:
        """Outputs each thread keeps in registers."""
        return self.wm * self.wn // WARP_SIZE

    @property
    def shared_bytes(self) -> int:
        """stages · (bk · (bm + padding) + bk · bn) floats: A's tile transposed and padded, and B's."""
        return self.stages * self.bk * (self.bm + self.padding + self.bn) * element_bytes(self.dtype)

    @property
    def deliberately_racy(self) -> bool:
        return self.sync != "both"

    def check_combination(self) -> None:
        for tile, warp, axis in ((self.bm, self.wm, "m"), (self.bn, self.wn, "n")):
            if tile % warp:
                raise InvalidVariant(f"w{axis} {warp} does not divide b{axis} {tile}; warps must tile the block")
        for warp, thread, lanes, axis in ((self.wm, self.tm, LANES_M, "m"), (self.wn, self.tn, LANES_N, "n")):
            if thread % 4 or warp % (lanes * thread):
                raise InvalidVariant(
                    f"t{axis} {thread} must be a multiple of 4 and {lanes} x t{axis} = {lanes * thread} must divide "
                    f"w{axis} {warp} (a warp's {lanes} lanes along {axis.upper()} read 16-byte vectors)")
        threads = self.threads_per_block
        check_threads(threads, f"bm {self.bm} x bn {self.bn} with warp tile {self.wm} x {self.wn}")
        held = self.accumulators + self.iter_m * self.tm + self.iter_n * self.tn
        if held > MAX_REGISTERS_PER_THREAD:
            raise InvalidVariant(
                f"warp tile {self.wm} x {self.wn} leaves {self.accumulators} outputs and "
                f"{held - self.accumulators} operands per thread, {held} registers; a thread has at most "
                f"{MAX_REGISTERS_PER_THREAD}")
        if self.load == "async" and self.stages != 2:
            raise InvalidVariant(f"load=async overlaps the next step's copy with this one's products: it needs "
                                 f"stages=2, not {self.stages} (or use load=registers)")
        if self.padding % 4:
            raise InvalidVariant(f"padding {self.padding} must be a multiple of 4 to keep A's rows 16-byte aligned")
        self._check_tile_loads(threads)
        check_shared_bytes(self.smem, self.shared_bytes, f"bm {self.bm}, bn {self.bn}, bk {self.bk} x {self.stages} stages")

    def _check_tile_loads(self, threads: int) -> None:
        """Every thread loads whole rows' worth of vectors: the tiles must split evenly over the threads."""
        if self.bk % self.vec:
            raise InvalidVariant(f"vec {self.vec} does not divide bk {self.bk}")
        for name, per_row, rows in (("A", self.bk // self.vec, self.bm), ("B", self.bn // self.vec, self.bk)):
            if threads % per_row or (per_row * rows) % threads:
                raise InvalidVariant(
                    f"{threads} threads cannot share {name}'s tile evenly ({rows} rows of {per_row} vectors of "
                    f"{self.vec}); change the block or warp tile")


class SgemmFamily(Family):
    """The GEMM problem (shared with matmul), with its own kernels and launch geometry."""

    name = "sgemm"
    summary = "C = A·B in float32, register-blocked: block, warp and thread tiles, 16-byte vectors, double buffering"
    variant_type = SgemmVariant
    problem = GEMM
    template = "sgemm.cu.j2"
    matmul_dtypes = ("f32",)  # gen.matmul's family for this type
    heatmap_axes = ("bm", "bn")
    heatmap_panels = "bounds"
    compile_together = True

    def launch(self, variant: SgemmVariant, shape: MatmulShape) -> Launch:
        # split-K adds into C, which must start at zero
        return Launch(grid=(blocks(shape.n, variant.bn), blocks(shape.m, variant.bm), variant.splitk),
                      block=(variant.threads_per_block,), dynamic_shared_bytes=variant.dynamic_shared_bytes,
                      clears_output=variant.splitk > 1)

    def refusal(self, variant: SgemmVariant, shape: MatmulShape) -> str | None:
        if variant.bounds == "none" and (shape.m % variant.bm or shape.n % variant.bn or shape.k % variant.bk):
            return (f"bounds=none needs M, N and K to be multiples of bm {variant.bm}, bn {variant.bn} and bk "
                    f"{variant.bk}; {shape} is not (use bounds=guard or bounds=split)")
        if variant.vec == 4 and any(d % 4 for d in (shape.k, shape.n, shape.lda, shape.ldb, shape.ldc)):
            return f"vec=4 needs K, N and the leading dimensions to be multiples of 4; {shape} is not (use vec=1)"
        return None

    def adaptations(self, variant: SgemmVariant) -> list[SgemmVariant]:
        """Bound checks, then scalar loads as well (for misaligned shapes)."""
        return [replace(variant, bounds="guard"), replace(variant, bounds="guard", vec=1)]

    def unaligned(self, variant: SgemmVariant) -> SgemmVariant | None:
        """Scalar loads: vec=4 reads 16-byte vectors, which need 16-byte aligned rows."""
        return replace(variant, vec=1) if variant.vec > 1 else None

    def sanitize_size(self, variant: SgemmVariant) -> str:
        if variant.bounds == "none":
            return f"{2 * variant.bm}x{2 * variant.bn}x{2 * variant.bk}"
        return "300x200x100" if variant.vec == 4 else "301x203x101"
