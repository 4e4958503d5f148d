"""A family whose kernel reads constant memory: out[i] = in[i] * weights[i % 8], the weights in a
`__constant__` array that the Problem fills before every check (Problem.constants)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gen.api import COPY_BANDWIDTH, Family, Input, Launch, Output, Problem, Scalar, Variant, blocks, choice

WEIGHTS = 8


class Weighted(Problem):
    dims = ("n",)
    arguments = (Input("data"), Output("out"), Scalar("n"))
    default_sizes = ("1000000",)
    small_size = "1001"

    def constants(self, shape):
        return {"weights": np.linspace(-2.0, 3.0, WEIGHTS, dtype=np.float32)}

    def arrays(self, shape):
        return {"data": (shape.n,), "out": (shape.n,)}

    def reference(self, inputs, shape):
        weights = self.constants(shape)["weights"].astype(np.float64)
        return inputs["data"] * np.resize(weights, shape.n)

    def tolerance(self, dtype, shape):
        return 1e-6

    def ceiling(self, dtype):
        return COPY_BANDWIDTH

    def work(self, shape, dtype):
        return 8.0 * shape.n


@dataclass(frozen=True, order=True)
class WeightedVariant(Variant):
    family: ClassVar[str] = "weighted"

    block: int = choice(256, (128, 256), tag="b", space=(128, 256), help="threads per block")


class WeightedFamily(Family):
    name = "weighted"
    summary = "out[i] = in[i] * weights[i % 8], the weights in constant memory"
    variant_type = WeightedVariant
    problem = Weighted()
    template = "weighted.cu.j2"

    def launch(self, variant, shape):
        return Launch(grid=(blocks(shape.n, variant.block),), block=(variant.block,))
