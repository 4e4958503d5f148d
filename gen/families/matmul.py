"""matmul: C = A·B, row-major, one output element per thread, tiles staged in shared memory.

The seeds' algorithm: a block of tile x tile threads owns one tile of C and walks along K one
tile at a time, each thread loading one element of A's tile and one of B's, then adding one row
times one column out of shared memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from ..errors import InvalidVariant
from ..family import (UNIT_ROUNDOFF, Family, Launch, blocks, check_naive_settings, check_shared_bytes, element_bytes,
                      parse_dims)
from ..limits import MAX_ELEMENTS, MAX_THREADS_PER_BLOCK
from ..variant import Variant, choice, integer

DTYPES = ("f32", "f64")
SMEM = ("static", "dynamic")
BOUNDS = ("none", "guard", "split")
SYNCS = ("both", "after-load", "after-compute", "none", "divergent")
METHODS = ("tiled", "naive")
# Which barrier each placement keeps: after the tile loads, after the partial products.
LOAD_BARRIER_SYNCS = ("both", "after-load", "divergent")
COMPUTE_BARRIER_SYNCS = ("both", "after-compute", "divergent")
ARRAY_ARGUMENTS = ("A", "B", "C")  # the kernels' pointer arguments, in order; the sizes follow


@dataclass(frozen=True, order=True)
class MatmulVariant(Variant):
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
        threads = self.threads_per_block
        if threads > MAX_THREADS_PER_BLOCK:
            raise InvalidVariant(
                f"tile {self.tile} gives {threads} threads per block; the CUDA limit is {MAX_THREADS_PER_BLOCK}")
        if self.method == "naive":
            check_naive_settings([("padding", self.padding, (0,)), ("sync", self.sync, ("both",)),
                                  ("smem", self.smem, ("static",)), ("bounds", self.bounds, ("none", "guard"))])
        check_shared_bytes(self.smem, self.shared_bytes, f"tile {self.tile} with padding {self.padding}")
        if self.sync == "divergent" and self.bounds != "guard":
            raise InvalidVariant(
                f"sync=divergent puts the barriers inside the bounds branch, so it needs bounds=guard "
                f"(got bounds={self.bounds})")


@dataclass(frozen=True)
class MatmulShape:
    """M x N x K with row-major leading dimensions; lda > K etc. describes a sub-matrix view."""

    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int

    @classmethod
    def of(cls, m: int, n: int, k: int, lda: int | None = None, ldb: int | None = None,
           ldc: int | None = None) -> "MatmulShape":
        shape = cls(m, n, k, lda or k, ldb or n, ldc or n)
        shape.check()
        return shape

    def check(self) -> None:
        for name, lead, width in (("lda", self.lda, self.k), ("ldb", self.ldb, self.n), ("ldc", self.ldc, self.n)):
            if lead < width:
                raise ValueError(f"{name} {lead} is smaller than the row it must hold ({width})")
        for name, rows, lead in (("A", self.m, self.lda), ("B", self.k, self.ldb), ("C", self.m, self.ldc)):
            if rows * lead > MAX_ELEMENTS:
                raise ValueError(f"{name} would hold {rows * lead} elements; 32-bit indexing allows {MAX_ELEMENTS}")

    @property
    def dims(self) -> tuple[int, ...]:
        return (self.m, self.n, self.k)

    def __str__(self) -> str:
        text = f"{self.m}x{self.n}x{self.k}"
        if (self.lda, self.ldb, self.ldc) != (self.k, self.n, self.n):
            text += f":{self.lda},{self.ldb},{self.ldc}"
        return text


class MatmulFamily(Family):
    name = "matmul"
    variant_type = MatmulVariant
    template = "matmul.cu.j2"
    summary = "C = A·B, one output element per thread, tiles through shared memory (the seeds' kernel)"
    shape_format = "MxNxK[:lda,ldb,ldc]"
    shape_example = "4096x4096x4096 or 1000x999x1001:1024,1024,1024"
    throughput_unit = "TFLOP/s"
    default_sizes = ("2048x2048x2048",)

    def _parse_shape(self, text: str) -> MatmulShape:
        dims_text, _, leading_text = text.partition(":")
        m, n, k = parse_dims(dims_text, 3)
        lda, ldb, ldc = parse_dims(leading_text, 3, separator=",") if leading_text else (None, None, None)
        return MatmulShape.of(m, n, k, lda, ldb, ldc)

    def launch(self, variant: MatmulVariant, shape: MatmulShape) -> Launch:
        t = variant.tile
        return Launch(grid=(blocks(shape.n, t), blocks(shape.m, t), 1), block=(t, t, 1),
                      dynamic_shared_bytes=variant.dynamic_shared_bytes)

    def refusal(self, variant: MatmulVariant, shape: MatmulShape) -> str | None:
        t = variant.tile
        if variant.bounds == "none" and any(d % t for d in (shape.m, shape.n, shape.k)):
            return (f"bounds=none needs M, N and K to be multiples of tile {t}; {shape} is not "
                    f"(use bounds=guard or bounds=split)")
        return super().refusal(variant, shape)

    def input_dims(self, shape: MatmulShape) -> dict[str, tuple[int, ...]]:
        return {"A": (shape.m, shape.lda), "B": (shape.k, shape.ldb)}

    def output_dims(self, shape: MatmulShape) -> tuple[str, tuple[int, ...]]:
        return "C", (shape.m, shape.ldc)

    def output_region(self, shape: MatmulShape) -> tuple[slice, ...]:
        return (slice(0, shape.m), slice(0, shape.n))

    def reference(self, inputs: Mapping[str, np.ndarray], shape: MatmulShape) -> np.ndarray:
        a = inputs["A"][:, : shape.k].astype(np.float64)
        b = inputs["B"][:, : shape.n].astype(np.float64)
        return a @ b

    def tolerance(self, dtype: str, shape: MatmulShape) -> float:
        # Rounding errors of a K-term sum grow like sqrt(K) on random data; 16 leaves room for the
        # order in which a kernel adds, while a race or a wrong index is off by orders of magnitude.
        return 16 * UNIT_ROUNDOFF[dtype] * math.sqrt(shape.k)

    def kernel_arguments(self, shape: MatmulShape, arrays: Mapping[str, Any]) -> list[Any]:
        ints = [np.int32(x) for x in (shape.m, shape.n, shape.k, shape.lda, shape.ldb, shape.ldc)]
        return [*(arrays[name] for name in ARRAY_ARGUMENTS), *ints]

    def ceiling_key(self, dtype: str) -> str:
        return f"gemm_{dtype}"

    def sanitize_size(self, variant: MatmulVariant) -> str:
        return "64x64x64" if variant.bounds == "none" else "70x50x60"

    def operations(self, shape: MatmulShape) -> int:
        return 2 * shape.m * shape.n * shape.k

    def bytes_moved(self, shape: MatmulShape, dtype: str) -> int:
        return (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n) * element_bytes(dtype)

