"""transpose: out = inᵀ for a row-major H x W matrix (seed 001; the CUDA samples' `transpose`).

A block of tile x rows threads moves one tile x tile tile, each thread tile / rows elements.
`naive` reads rows of `in` (coalesced) and writes columns of `out` (strided); `shared` stages the
tile in shared memory so that both the reads and the writes are coalesced. With vec=4 a block is
(tile / 4) x rows threads and every global access is a 16-byte float4.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..core.errors import InvalidVariant
from .family import blocks, check_neutral_settings, check_shared_bytes, check_threads
from .problem import Dims, element_bytes
from ..core.limits import WARP_SIZE
from .tiles import SMEM, SharedTiles
from .variant import Variant, choice, integer
from .matrix import TRANSPOSE, VECS, TileFamily, bounds_refusal, check_vector_dtype, vector_refusal

DTYPES = ("f32", "f64")
METHODS = ("naive", "shared", "diagonal")
BOUNDS = ("none", "guard")
SYNCS = ("both", "none")
GROUPS = (0, 1, 2, 4, 8, 16, 32)
HINTS = ("normal", "stream")
WARP_CHUNKS = 8  # with vec=4 a warp covers 8 float4s (128 bytes) of each of its tile rows
WARP_ROWS = WARP_SIZE // WARP_CHUNKS  # ... and so 4 tile rows


@dataclass(frozen=True, order=True)
class TransposeVariant(SharedTiles, Variant):
    family: ClassVar[str] = "transpose"
    warp_chunks: ClassVar[int] = WARP_CHUNKS  # for the template
    warp_rows: ClassVar[int] = WARP_ROWS

    dtype: str = choice("f32", DTYPES, help="element type: f32 float, f64 double")
    method: str = choice("shared", METHODS, space=METHODS,
                         help="naive: strided writes; shared: tile through shared memory; diagonal: shared, "
                              "blocks visited along diagonals (square grids)")
    tile: int = integer(32, tag="t", minimum=1, space=(16, 32, 64), help="edge of the square tile a block moves")
    rows: int = integer(8, tag="r", minimum=1, space=(4, 8, 16),
                        help="threads per tile column: a block is tile / vec x rows threads")
    padding: int = integer(1, tag="p", minimum=0, space=(0, 1),
                           help="extra elements per shared row (1 removes the column read's bank conflicts)")
    group: int = choice(0, GROUPS, tag="g", omit=0, space=(0, 1, 2, 4, 8), emitted=(0, 2),
                        help="method=shared: blocks take tiles in groups of this many tile columns "
                             "(0: row by row), so the blocks running at once cover a compact patch")
    vec: int = choice(1, VECS, tag="v", omit=1, space=VECS,
                      help="elements per global load and store: 4 = 16-byte float4 (f32, tiles of 32 or more)")
    hint: str = choice("normal", HINTS, omit="normal", emitted=("normal",),
                       help="shared tiles: stream marks global accesses evict-first (__ldcs/__stcs), touched once")
    bounds: str = choice("guard", BOUNDS, space=BOUNDS, help="none: shapes must be tile multiples; guard: checked")
    sync: str = choice("both", SYNCS, emitted=SYNCS,
                       help="both: barrier between the tile's writes and reads; none: a race on purpose")
    smem: str = choice("static", SMEM, omit="static",
                       help="shared tile declared static, or extern and sized at launch")

    @property
    def threads_per_block(self) -> int:
        return self.tile // self.vec * self.rows

    @property
    def elements_per_thread(self) -> int:
        return self.tile * self.tile // self.threads_per_block

    @property
    def shared_bytes(self) -> int:
        """Shared memory of the staged tile: tile · (tile + padding) elements (none for naive)."""
        if self.method == "naive":
            return 0
        return self.tile * (self.tile + self.padding) * element_bytes(self.dtype)

    @property
    def barrier(self) -> bool:
        """Whether the barrier between writing the shared tile and reading it back is kept."""
        return self.method != "naive" and self.sync == "both"

    @property
    def deliberately_racy(self) -> bool:
        return self.method != "naive" and not self.barrier

    def check_combination(self) -> None:
        if self.tile % self.rows:
            raise InvalidVariant(
                f"rows {self.rows} does not divide tile {self.tile}; each thread must move a whole number of elements")
        check_threads(self.threads_per_block, f"tile {self.tile} with rows {self.rows}")
        if self.method == "naive":
            check_neutral_settings([("padding", self.padding, (0,)), ("sync", self.sync, ("both",)),
                                    ("smem", self.smem, ("static",)), ("vec", self.vec, (1,)),
                                    ("hint", self.hint, ("normal",))], "naive")
        if self.group and self.method != "shared":
            raise InvalidVariant(f"group {self.group} applies to method=shared only, which visits tiles in order "
                                 f"(use group=0 with method={self.method})")
        if self.vec > 1:
            check_vector_dtype(self.vec, self.dtype)
            self._check_vector_tiles()
        check_shared_bytes(self.smem, self.shared_bytes, f"tile {self.tile} with padding {self.padding}")

    def _check_vector_tiles(self) -> None:
        """vec=4 warps cover 8 float4s in each of 4 tile rows."""
        if self.tile % (self.vec * WARP_CHUNKS):
            raise InvalidVariant(f"vec {self.vec} needs a tile that is a multiple of {self.vec * WARP_CHUNKS} "
                                 f"(a warp covers {WARP_CHUNKS} vectors of a row); tile {self.tile} is not")
        if self.rows % WARP_ROWS:
            raise InvalidVariant(f"vec {self.vec} needs rows to be a multiple of {WARP_ROWS} (a warp covers "
                                 f"{WARP_ROWS} tile rows); rows {self.rows} is not")


class TransposeFamily(TileFamily):
    name = "transpose"
    summary = "out = in^T for an H x W matrix, naive or through a shared-memory tile (seed 001)"
    variant_type = TransposeVariant
    problem = TRANSPOSE
    template = "transpose.cu.j2"
    heatmap_axes = ("tile", "padding")

    def sanitize_size(self, variant: TransposeVariant) -> str:
        if variant.method == "diagonal" and variant.bounds != "none":  # a square grid of tiles, the last ones partial
            side = 2 * variant.tile + variant.vec
            return f"{side}x{side}"
        return super().sanitize_size(variant)

    def refusal(self, variant: TransposeVariant, shape: Dims) -> str | None:
        t = variant.tile
        if reason := bounds_refusal(variant, shape):
            return reason
        if variant.method == "diagonal" and blocks(shape.h, t) != blocks(shape.w, t):
            return f"method=diagonal needs a square grid of tiles; {shape} with tile {t} is not (use method=shared)"
        return vector_refusal(variant.vec, shape)

    def adaptations(self, variant: TransposeVariant) -> list[TransposeVariant]:
        """Bound checks, then scalar accesses, then (for the diagonal order) the plain tile order."""
        guarded = replace(variant, bounds="guard")
        scalar = replace(guarded, vec=1)
        return [guarded, scalar, replace(scalar, method="shared")]
