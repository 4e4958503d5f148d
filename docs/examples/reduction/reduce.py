"""reduce: out[r] = sum of row r of an R x N matrix. An example family written outside tilegen.

Copy this folder, edit the template and the parameters, and point tilegen at the copy:

    tilegen --family-path path/to/reduction list reduce
    tilegen --family-path path/to/reduction sweep reduce --size 4096x8192 --out runs/reduce

One block sums one row: each thread adds up a strided slice of the row, keeping `items` loads in
flight, then the block combines its threads' sums with warp shuffles or a shared-memory tree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Mapping

import numpy as np

from gen.api import (COPY_BANDWIDTH, MAX_THREADS_PER_BLOCK, WARP_SIZE, Ceiling, Dims, Family, Input, Launch, Output,
                     Problem, Scalar, Variant, choice, element_bytes, integer, require, sum_tolerance)


@dataclass(frozen=True, order=True)
class ReduceVariant(Variant):
    family: ClassVar[str] = "reduce"

    dtype: str = choice("f32", ("f32", "f64"), help="element type: f32 float, f64 double")
    block: int = integer(256, tag="b", minimum=WARP_SIZE, space=(128, 256, 512, 1024), emitted=(256,),
                         help="threads per block; one block sums one row")
    items: int = integer(4, tag="i", minimum=1, space=(1, 2, 4, 8), emitted=(1, 4),
                         help="independent loads each thread has in flight per step")
    method: str = choice("shuffle", ("shuffle", "tree"), space=("shuffle", "tree"),
                         help="how a block combines its sums: warp shuffles, or a shared-memory tree")
    vec: int = choice(1, (1, 4), tag="v", space=(1, 4), emitted=(1,),
                      help="elements per load: 4 = 16-byte float4 (f32; N a multiple of 4)")

    @property
    def shared_bytes(self) -> int:
        """The tree keeps one sum per thread; shuffles, one per warp."""
        count = self.block if self.method == "tree" else self.block // WARP_SIZE
        return count * element_bytes(self.dtype)

    def check_combination(self) -> None:
        require(self.block % WARP_SIZE == 0, f"block {self.block} must be a multiple of {WARP_SIZE} (whole warps)")
        require(self.block <= MAX_THREADS_PER_BLOCK,
                f"block {self.block} exceeds the CUDA limit of {MAX_THREADS_PER_BLOCK} threads")
        require(self.method != "tree" or self.block & (self.block - 1) == 0,
                f"method=tree halves the block at each step: block {self.block} must be a power of two")
        require(self.vec == 1 or self.dtype == "f32", f"vec {self.vec} needs dtype f32 (a float4); use vec=1")


class RowSums(Problem):
    dims = ("r", "n")  # sizes are written RxN, e.g. 4096x8192
    arguments = (Input("data"), Output("sums"), Scalar("rows", "r"), Scalar("n"))
    default_sizes = ("4096x8192",)
    small_size = "37x1001"

    def arrays(self, shape: Dims) -> dict[str, tuple[int, ...]]:
        return {"data": (shape.r, shape.n), "sums": (shape.r,)}

    def reference(self, inputs: Mapping[str, np.ndarray], shape: Dims) -> np.ndarray:
        return inputs["data"].sum(axis=1)

    def tolerance(self, dtype: str, shape: Dims) -> float:
        return sum_tolerance(dtype, shape.n)

    def ceiling(self, dtype: str) -> Ceiling:
        return COPY_BANDWIDTH

    def work(self, shape: Dims, dtype: str) -> float:
        return (shape.r * shape.n + shape.r) * element_bytes(dtype)  # the matrix read once, the sums written


class Reduce(Family):
    name = "reduce"
    summary = "out[r] = sum of row r of an R x N matrix: one block per row, shuffles or a tree"
    variant_type = ReduceVariant
    problem = RowSums()
    template = "reduce.cu.j2"
    heatmap_axes = ("block", "items")

    def launch(self, variant: ReduceVariant, shape: Dims) -> Launch:
        return Launch(grid=(shape.r,), block=(variant.block,))

    def refusal(self, variant: ReduceVariant, shape: Dims) -> str | None:
        if variant.vec > 1 and shape.n % variant.vec:
            return f"vec={variant.vec} needs N to be a multiple of {variant.vec} (aligned rows); {shape} is not"
        return None

    def adaptations(self, variant: ReduceVariant) -> list[ReduceVariant]:
        return [replace(variant, vec=1)]  # scalar loads run any N

    def sanitize_size(self, variant: ReduceVariant) -> str:
        return "37x1000" if variant.vec > 1 else self.problem.small_size
