"""stencil: a five-point Laplacian on an H x W grid, written as a new user writes a family: no
element type parameter (it is float32), no shared memory, a helper module beside it, and a
ceiling of its own (grid points per second), which it measures itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

import numpy as np

from gen.api import (MAX_THREADS_PER_BLOCK, WARP_SIZE, Ceiling, Dims, Family, Input, Launch, Output, Problem, Scalar,
                     Variant, blocks, integer, require, sum_tolerance)

from .neighbours import five_point

POINTS_PER_SECOND = 400.0  # Gpoint/s: what the stand-in measure of the ceiling below returns


def measure_points_per_second() -> float:
    """Runs in the GPU worker process, its context current. A real family would time a reference
    kernel here (with PyCUDA, CuPy or PyTorch); the tests need a rate they can check."""
    return POINTS_PER_SECOND


POINTS = Ceiling("stencil_points", "Gpoint/s", 1e9, "grid points updated per second (a stand-in rate for the tests)",
                 measure=measure_points_per_second)


@dataclass(frozen=True, order=True)
class StencilVariant(Variant):
    family: ClassVar[str] = "stencil"

    bx: int = integer(32, tag="x", minimum=1, space=(8, 16, 32, 64), help="threads of a block along W")
    by: int = integer(4, tag="y", minimum=1, space=(1, 2, 4, 8), help="threads of a block along H")
    rows: int = integer(1, tag="r", minimum=1, space=(1, 2, 4), help="grid rows each thread computes")

    def check_combination(self) -> None:
        threads = self.bx * self.by
        require(threads % WARP_SIZE == 0, f"bx {self.bx} x by {self.by} = {threads} threads is not whole warps")
        require(threads <= MAX_THREADS_PER_BLOCK, f"{threads} threads exceed {MAX_THREADS_PER_BLOCK} per block")


class Grid(Problem):
    dims = ("h", "w")
    arguments = (Input("grid"), Output("out"), Scalar("H", "h"), Scalar("W", "w"))
    default_sizes = ("4096x4096",)
    small_size = "37x45"

    def arrays(self, shape: Dims) -> dict[str, tuple[int, ...]]:
        return {"grid": (shape.h, shape.w), "out": (shape.h, shape.w)}

    def reference(self, inputs: Mapping[str, np.ndarray], shape: Dims) -> np.ndarray:
        return five_point(inputs["grid"])

    def tolerance(self, dtype: str, shape: Dims) -> float:
        return sum_tolerance(dtype, 5)

    def ceiling(self, dtype: str) -> Ceiling:
        return POINTS

    def work(self, shape: Dims, dtype: str) -> float:
        return shape.h * shape.w


class Stencil(Family):
    name = "stencil"
    summary = "out = 4·g − neighbours on an H x W grid (a test family without dtype)"
    variant_type = StencilVariant
    problem = Grid()
    template = "stencil.cu.j2"

    def launch(self, variant: StencilVariant, shape: Dims) -> Launch:
        return Launch(grid=(blocks(shape.w, variant.bx), blocks(shape.h, variant.by * variant.rows)),
                      block=(variant.bx, variant.by))
