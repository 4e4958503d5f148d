"""The H x W matrix problems, transpose and copy, and the tile launch their families share."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..core.errors import InvalidVariant
from .family import Family, Launch, blocks
from .problem import COPY_BANDWIDTH, Ceiling, Dims, Input, Output, Problem, Scalar, element_bytes
from ..core.limits import MAX_ELEMENTS

VECS = (1, 4)


class MatrixProblem(Problem):
    """out = f(in) for a row-major H x W matrix of `in`; moving bytes is all the work."""

    dims = ("h", "w")
    arguments = (Input("in"), Output("out"), Scalar("H", "h"), Scalar("W", "w"))
    default_sizes = ("8192x8192",)
    small_size = "100x70"

    def _parse_shape(self, text: str) -> Dims:
        shape = super()._parse_shape(text)
        if shape.h * shape.w > MAX_ELEMENTS:
            raise ValueError(f"{shape.h * shape.w} elements; 32-bit indexing allows {MAX_ELEMENTS}")
        return shape

    def tolerance(self, dtype: str, shape: Dims) -> float:
        return 0.0  # moving values copies bits: anything but an exact match is wrong

    def ceiling(self, dtype: str) -> Ceiling:
        return COPY_BANDWIDTH

    def work(self, shape: Dims, dtype: str) -> float:
        return 2 * shape.h * shape.w * element_bytes(dtype)


class TransposeProblem(MatrixProblem):
    def arrays(self, shape: Dims) -> dict[str, tuple[int, ...]]:
        return {"in": (shape.h, shape.w), "out": (shape.w, shape.h)}

    def reference(self, inputs: Mapping[str, np.ndarray], shape: Dims) -> np.ndarray:
        return inputs["in"].T


class CopyProblem(MatrixProblem):
    def arrays(self, shape: Dims) -> dict[str, tuple[int, ...]]:
        return {"in": (shape.h, shape.w), "out": (shape.h, shape.w)}

    def reference(self, inputs: Mapping[str, np.ndarray], shape: Dims) -> np.ndarray:
        return inputs["in"]


TRANSPOSE, COPY = TransposeProblem(), CopyProblem()


class TileFamily(Family):
    """What transpose and copy share: a tile x tile tile of the H x W input per block, moved by
    tile / vec x rows threads, and the bounds their heatmaps are panelled by."""

    heatmap_panels = "bounds"
    compile_together = True

    def launch(self, variant: Any, shape: Dims) -> Launch:
        t = variant.tile
        return Launch(grid=(blocks(shape.w, t), blocks(shape.h, t)), block=(t // variant.vec, variant.rows),
                      dynamic_shared_bytes=variant.dynamic_shared_bytes)

    def sanitize_size(self, variant: Any) -> str:
        """Twice the tile where bounds=none needs whole tiles; else odd (whole float4s for vec=4)."""
        if variant.bounds == "none":
            return f"{2 * variant.tile}x{2 * variant.tile}"
        return "100x68" if variant.vec > 1 else "100x70"


def bounds_refusal(variant: Any, shape: Dims) -> str | None:
    t = variant.tile
    if variant.bounds == "none" and (shape.h % t or shape.w % t):
        return f"bounds=none needs H and W to be multiples of tile {t}; {shape} is not (use bounds=guard)"
    return None


def vector_refusal(vec: int, shape: Dims) -> str | None:
    """Vectors of `vec` elements need every row to start aligned: H and W multiples of vec."""
    if vec > 1 and (shape.h % vec or shape.w % vec):
        return f"vec={vec} needs H and W to be multiples of {vec} (16-byte aligned rows); {shape} is not (use vec=1)"
    return None


def check_vector_dtype(vec: int, dtype: str) -> None:
    if dtype != "f32":
        raise InvalidVariant(f"vec {vec} needs dtype f32 (a float4 is 16 bytes); use vec=1 for {dtype}")
