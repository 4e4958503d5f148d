"""blur: the mean of each 3 x 3 neighbourhood of an H x W grid. A test family whose parameters are
named like tilegen's own words (smem, dtype, bounds, vec, cache), each with this family's meaning:
smem=1 stages the block's tile in a static shared array; bounds=trust leaves out the output's
bound check; vec outputs per thread; cache=ldg reads through the read-only cache."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Mapping

import numpy as np

from gen.api import (COPY_BANDWIDTH, Ceiling, Dims, Family, Input, Launch, Output, Problem, Scalar, Variant, blocks,
                     choice, element_bytes, sum_tolerance)

from .neighbours import box3

BX, BY = 32, 8  # threads of a block along W and H


@dataclass(frozen=True, order=True)
class BlurVariant(Variant):
    family: ClassVar[str] = "blur"

    dtype: str = choice("f32", ("f32", "f64"), help="element type")
    smem: int = choice(0, (0, 1), tag="s", space=(0, 1), help="1: stage the block's tile in a static shared array")
    bounds: str = choice("check", ("check", "trust"), space=("check", "trust"),
                         help="trust: no bound check on the output (H, W whole tiles)")
    vec: int = choice(1, (1, 2), tag="v", space=(1, 2), help="outputs per thread along W")
    cache: str = choice("plain", ("plain", "ldg"), space=("plain", "ldg"), help="ldg: loads through __ldg")

    @property
    def tile_bytes(self) -> int:
        """The static shared tile of smem=1: the block's outputs and a one-element halo."""
        return (BY + 2) * (BX * self.vec + 2) * element_bytes(self.dtype) if self.smem else 0


class Grid(Problem):
    dims = ("h", "w")
    arguments = (Input("grid"), Output("out"), Scalar("H", "h"), Scalar("W", "w"))
    default_sizes = ("4096x4096",)
    small_size = "37x45"

    def arrays(self, shape: Dims) -> dict[str, tuple[int, ...]]:
        return {"grid": (shape.h, shape.w), "out": (shape.h, shape.w)}

    def reference(self, inputs: Mapping[str, np.ndarray], shape: Dims) -> np.ndarray:
        return box3(inputs["grid"])

    def tolerance(self, dtype: str, shape: Dims) -> float:
        return sum_tolerance(dtype, 9)

    def ceiling(self, dtype: str) -> Ceiling:
        return COPY_BANDWIDTH

    def work(self, shape: Dims, dtype: str) -> float:
        return 2 * shape.h * shape.w * element_bytes(dtype)


class Blur(Family):
    name = "blur"
    summary = "the 3 x 3 mean of an H x W grid (a test family with parameters named like tilegen's)"
    variant_type = BlurVariant
    problem = Grid()
    template = "blur.cu.j2"
    heatmap_axes = ("smem", "vec")

    def launch(self, variant: BlurVariant, shape: Dims) -> Launch:
        return Launch(grid=(blocks(shape.w, BX * variant.vec), blocks(shape.h, BY)), block=(BX, BY))

    def refusal(self, variant: BlurVariant, shape: Dims) -> str | None:
        if variant.bounds == "trust" and (shape.h % BY or shape.w % (BX * variant.vec)):
            return f"bounds=trust needs H a multiple of {BY} and W of {BX * variant.vec}; {shape} is not"
        return None

    def adaptations(self, variant: BlurVariant) -> list[BlurVariant]:
        return [replace(variant, bounds="check")]

    def sanitize_size(self, variant: BlurVariant) -> str:
        return f"{2 * BY}x{2 * BX * variant.vec}" if variant.bounds == "trust" else self.problem.small_size
