"""matmul: C = A·B, row-major, one output element per thread, tiles staged in shared memory.

The seeds' algorithm: a block of tile x tile threads owns one tile of C and walks along K one
tile at a time, each thread loading one element of A's tile and one of B's, then adding one row
times one column out of shared memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from .family import Family, Launch, blocks, check_neutral_settings, check_shared_bytes, check_threads
from .problem import element_bytes
from .tiles import SMEM, SharedTiles
from .variant import Variant, choice, integer, require
from .gemm import GEMM, MatmulShape

DTYPES = ("f32", "f64")
BOUNDS = ("none", "guard", "split")
SYNCS = ("both", "after-load", "after-compute", "none", "divergent")
METHODS = ("tiled", "naive")
# Which barrier each placement keeps: after the tile loads, after the partial products.
LOAD_BARRIER_SYNCS = ("both", "after-load", "divergent")
COMPUTE_BARRIER_SYNCS = ("both", "after-compute", "divergent")


@dataclass(frozen=True, order=True)
class MatmulVariant(SharedTiles, Variant):
    family: ClassVar[str] = "matmul"

    dtype: str = choice("f32", DTYPES, help="element type: f32 float, f64 double")
    tile: int = integer(16, tag="t", minimum=1, space=(8, 16, 32),
                        help="square tile edge and K-step; a block is tile x tile threads")
    padding: int = integer(0, tag="p", minimum=0, space=(0, 1),
                           help="extra elements at the end of each shared-memory row")
    bounds: str = choice("guard", BOUNDS, space=BOUNDS,
                         help="none: shapes must be tile multiples; guard: every access checked; "
                              "split: interior blocks unchecked")
    sync: str = choice("both", SYNCS, emitted=SYNCS,
                       help="barriers kept: both (correct), after-load, after-compute, none, divergent "
                            "(the last four are races on purpose)")
    smem: str = choice("static", SMEM, omit="static",
                       help="shared tiles declared static, or extern and sized at launch")
    method: str = choice("tiled", METHODS, omit="tiled", emitted=METHODS,
                         help="tiled: through shared memory; naive: straight from global memory (the baseline)")

    @property
    def threads_per_block(self) -> int:
        return self.tile * self.tile

    @property
    def shared_bytes(self) -> int:
        """Shared memory of the two tiles, A's and B's: 2 · tile · (tile + padding) elements (none for naive)."""
        if self.method == "naive":
            return 0
        return 2 * self.tile * (self.tile + self.padding) * element_bytes(self.dtype)

    @property
    def load_barrier(self) -> bool:
        """Whether the barrier between the tile loads and the products is kept."""
        return self.method == "tiled" and self.sync in LOAD_BARRIER_SYNCS

    @property
    def compute_barrier(self) -> bool:
        """Whether the barrier between the products and the next iteration's loads is kept."""
        return self.method == "tiled" and self.sync in COMPUTE_BARRIER_SYNCS

    @property
    def deliberately_racy(self) -> bool:
        return self.method == "tiled" and self.sync != "both"

    def check_combination(self) -> None:
        check_threads(self.threads_per_block, f"tile {self.tile}")
        if self.method == "naive":
            check_neutral_settings([("padding", self.padding, (0,)), ("sync", self.sync, ("both",)),
                                    ("smem", self.smem, ("static",)), ("bounds", self.bounds, ("none", "guard"))],
                                   "naive")
        check_shared_bytes(self.smem, self.shared_bytes, f"tile {self.tile} with padding {self.padding}")
        require(self.sync != "divergent" or self.bounds == "guard",
                f"sync=divergent puts the barriers inside the bounds branch, so it needs bounds=guard "
                f"(got bounds={self.bounds})")


class MatmulFamily(Family):
    name = "matmul"
    summary = "C = A·B, one output element per thread, tiles through shared memory (the seeds' kernel)"
    variant_type = MatmulVariant
    problem = GEMM
    template = "matmul.cu.j2"
    matmul_dtypes = ("f64",)  # gen.matmul's family for this type
    heatmap_axes = ("tile", "padding")
    heatmap_panels = "bounds"
    compile_together = True

    def launch(self, variant: MatmulVariant, shape: MatmulShape) -> Launch:
        t = variant.tile
        return Launch(grid=(blocks(shape.n, t), blocks(shape.m, t)), block=(t, t),
                      dynamic_shared_bytes=variant.dynamic_shared_bytes)

    def refusal(self, variant: MatmulVariant, shape: MatmulShape) -> str | None:
        t = variant.tile
        if variant.bounds == "none" and any(d % t for d in (shape.m, shape.n, shape.k)):
            return (f"bounds=none needs M, N and K to be multiples of tile {t}; {shape} is not "
                    f"(use bounds=guard or bounds=split)")
        return None

    def adaptations(self, variant: MatmulVariant) -> list[MatmulVariant]:
        return [replace(variant, bounds="guard")]

    def sanitize_size(self, variant: MatmulVariant) -> str:
        return "64x64x64" if variant.bounds == "none" else "70x50x60"
