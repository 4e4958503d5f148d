"""copy: out = in for an H x W matrix, the CUDA samples' reference kernels for the transpose.

`plain` is the samples' copy, `shared` their copySharedMem: the same tiles and threads as a
transpose, without the transposition, so the gap between the two is the transpose's own cost.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..core.errors import InvalidVariant
from .family import check_shared_bytes, check_threads
from .problem import Dims, element_bytes
from .tiles import SMEM, SharedTiles
from .variant import Variant, choice, integer
from .matrix import COPY, VECS, TileFamily, bounds_refusal, check_vector_dtype, vector_refusal


@dataclass(frozen=True, order=True)
class CopyVariant(SharedTiles, Variant):
    family: ClassVar[str] = "copy"

    dtype: str = choice("f32", ("f32", "f64"), help="element type: f32 float, f64 double")
    method: str = choice("plain", ("plain", "shared"), space=("plain", "shared"),
                         help="plain: global to global; shared: through a shared tile (copySharedMem)")
    tile: int = integer(32, tag="t", minimum=1, space=(32, 64), help="edge of the square tile a block moves")
    rows: int = integer(8, tag="r", minimum=1, space=(8,), help="threads per tile column: a block is tile x rows threads")
    vec: int = choice(1, VECS, tag="v", omit=1, space=VECS, help="elements per load and store: 4 = 16-byte float4 (f32)")
    bounds: str = choice("guard", ("none", "guard"), help="none: shapes must be tile multiples; guard: checked")
    smem: str = choice("static", SMEM, omit="static",
                       help="shared tile declared static, or extern and sized at launch")

    @property
    def threads_per_block(self) -> int:
        return self.tile // self.vec * self.rows

    @property
    def shared_bytes(self) -> int:
        return self.tile * self.tile * element_bytes(self.dtype) if self.method == "shared" else 0

    def check_combination(self) -> None:
        if self.tile % self.rows:
            raise InvalidVariant(f"rows {self.rows} does not divide tile {self.tile}")
        if self.vec > 1:
            check_vector_dtype(self.vec, self.dtype)
            if self.tile % self.vec:
                raise InvalidVariant(f"vec {self.vec} does not divide tile {self.tile}")
        check_threads(self.threads_per_block, f"tile {self.tile} with rows {self.rows}")
        if self.method == "plain" and self.smem != "static":
            raise InvalidVariant("smem dynamic does not apply to method=plain, which has no shared tile (use smem=static)")
        check_shared_bytes(self.smem, self.shared_bytes, f"tile {self.tile}")


class CopyFamily(TileFamily):
    """The transpose's tiles, threads and launch; the output is the input itself."""

    name = "copy"
    summary = "out = in for an H x W matrix: the samples' copy and copySharedMem, the transpose's yardstick"
    variant_type = CopyVariant
    problem = COPY
    template = "copy.cu.j2"
    heatmap_axes = ("tile", "rows")

    def refusal(self, variant: CopyVariant, shape: Dims) -> str | None:
        return bounds_refusal(variant, shape) or vector_refusal(variant.vec, shape)

    def adaptations(self, variant: CopyVariant) -> list[CopyVariant]:
        guarded = replace(variant, bounds="guard")
        return [guarded, replace(guarded, vec=1)]
