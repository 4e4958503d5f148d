"""The GEMM problem, C = A·B row-major with leading dimensions, shared by matmul and sgemm."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

import numpy as np

from .problem import GEMM_F32, GEMM_F64, Ceiling, Input, Output, Problem, Scalar, parse_dims, sum_tolerance
from ..core.limits import MAX_ELEMENTS


@dataclass(frozen=True)
class MatmulShape:
    """M x N x K with row-major leading dimensions; lda > K etc. describes a sub-matrix view."""

    b_by_columns: ClassVar[bool] = False  # B given as N x K row-major (K x N by columns): its rows hold K
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int

    @classmethod
    def of(cls, m: int, n: int, k: int, lda: int | None = None, ldb: int | None = None,
           ldc: int | None = None) -> "MatmulShape":
        shape = cls(m, n, k, lda or k, ldb or (k if cls.b_by_columns else n), ldc or n)
        shape.check()
        return shape

    @property
    def b_rows(self) -> tuple[int, int]:
        """B's rows and the elements each holds."""
        return (self.n, self.k) if self.b_by_columns else (self.k, self.n)

    def check(self) -> None:
        leads = (("lda", self.lda, self.k), ("ldb", self.ldb, self.b_rows[1]), ("ldc", self.ldc, self.n))
        for name, lead, width in leads:
            if lead < width:
                raise ValueError(f"{name} {lead} is smaller than the row it must hold ({width})")
        for name, rows, lead in (("A", self.m, self.lda), ("B", self.b_rows[0], self.ldb), ("C", self.m, self.ldc)):
            if rows * lead > MAX_ELEMENTS:
                raise ValueError(f"{name} would hold {rows * lead} elements; 32-bit indexing allows {MAX_ELEMENTS}")

    @property
    def dims(self) -> tuple[int, ...]:
        return (self.m, self.n, self.k)

    def __str__(self) -> str:
        text = f"{self.m}x{self.n}x{self.k}"
        if (self.lda, self.ldb, self.ldc) != (self.k, self.b_rows[1], self.n):
            text += f":{self.lda},{self.ldb},{self.ldc}"
        return text


class GemmProblem(Problem):
    arguments = (Input("A"), Input("B"), Output("C"), Scalar("M", "m"), Scalar("N", "n"), Scalar("K", "k"),
                 Scalar("lda"), Scalar("ldb"), Scalar("ldc"))
    default_sizes = ("2048x2048x2048",)
    small_size = "70x50x60"
    shape_type: type[MatmulShape] = MatmulShape

    shape_format = "MxNxK[:lda,ldb,ldc]"

    @property
    def shape_example(self) -> str:
        return "4096x4096x4096 or 1000x999x1001:1024,1024,1024"

    def _parse_shape(self, text: str) -> MatmulShape:
        dims_text, _, leading_text = text.partition(":")
        m, n, k = parse_dims(dims_text, 3)
        lda, ldb, ldc = parse_dims(leading_text, 3, separator=",") if leading_text else (None, None, None)
        return self.shape_type.of(m, n, k, lda, ldb, ldc)

    def arrays(self, shape: MatmulShape) -> dict[str, tuple[int, ...]]:
        return {"A": (shape.m, shape.lda), "B": (shape.b_rows[0], shape.ldb), "C": (shape.m, shape.ldc)}

    def output_region(self, shape: MatmulShape) -> tuple[slice, ...]:
        return (slice(0, shape.m), slice(0, shape.n))

    def reference(self, inputs: Mapping[str, np.ndarray], shape: MatmulShape) -> np.ndarray:
        return inputs["A"][:, : shape.k] @ inputs["B"][:, : shape.n]

    def tolerance(self, dtype: str, shape: MatmulShape) -> float:
        return sum_tolerance(dtype, shape.k)

    def ceiling(self, dtype: str) -> Ceiling:
        return GEMM_F64 if dtype == "f64" else GEMM_F32

    def work(self, shape: MatmulShape, dtype: str) -> float:
        return 2 * shape.m * shape.n * shape.k


GEMM = GemmProblem()
