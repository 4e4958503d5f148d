"""Which variant to use for a shape on this GPU, from the tuning database.

The order of preference: this GPU model's winner for the exact shape; for the nearest tuned
shape in the same size bucket (every dimension within the same power of two); for its nearest
tuned shape at any size; a GPU of the same compute capability (with a warning); and last the
family's safe default. A stored winner that cannot run the shape (bounds=none on an odd size,
16-byte vectors on a misaligned one) is adapted: the same tiles with bounds=guard, and scalar
loads if need be; if no adaptation runs either, the next in its ranking is tried.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
import sys
import warnings
from pathlib import Path
from typing import Any

from .errors import InvalidVariant
from .families import get_family
from .family import Family
from .jobs import DeviceInfo
from .tunedb import Problem, TuningDB
from .variant import Variant
from .worker import LocalExecutor

RANKS_TRIED = 20  # how far down a stored ranking to look for a variant that can run the shape


def tuned(family: str, *dims: int, dtype: str = "f32", db: Path | None = None,
          device: DeviceInfo | None = None) -> Variant:
    """The best known variant of `family` for this shape on the current GPU (see the module doc)."""
    return tuned_with_reason(family, *dims, dtype=dtype, db=db, device=device)[0]


def tuned_with_reason(family: str, *dims: int, dtype: str = "f32", db: Path | None = None,
                      device: DeviceInfo | None = None, gpu_model: str | None = None) -> tuple[Variant, str]:
    chosen_family = get_family(family)
    shape = chosen_family.parse_shape("x".join(str(d) for d in dims))
    model = gpu_model or (device or current_device()).model
    database = TuningDB(db)
    tuned_here = [p for p in database.problems(family) if p.dtype == dtype]
    same_model = [p for p in tuned_here if p.gpu_model == model]
    same_cc = [p for p in tuned_here if p.gpu_model != model and _cc(p.gpu_model) == _cc(model)]
    bucket = _bucket(shape.dims)
    searches = [
        ("the exact shape on this GPU", [p for p in same_model if p.shape == str(shape)]),
        ("the nearest tuned shape in the same size bucket on this GPU",
         [p for p in same_model if _bucket(_dims(chosen_family, p)) == bucket]),
        ("the nearest tuned shape on this GPU", same_model),
        ("the nearest tuned shape on a GPU of the same compute capability", same_cc),
    ]
    for reason, problems in searches:
        for problem in sorted(problems, key=lambda p: _distance(_dims(chosen_family, p), shape.dims)):
            variant = _runnable_winner(database, chosen_family, problem, shape)
            if variant is not None:
                if problems is same_cc:
                    warnings.warn(f"no tuning for {model}; using {problem.gpu_model}'s winner at {problem.shape}",
                                  stacklevel=3)
                return variant, f"{reason} ({problem.shape} on {problem.gpu_model})"
    return chosen_family.safe_variant(shape, dtype), "the family's safe default (nothing tuned applies)"


@functools.cache
def current_device() -> DeviceInfo:
    """The GPU of the caller's current pycuda context, else the first GPU (asked in a worker process)."""
    cuda = sys.modules.get("pycuda.driver")
    if cuda is not None:
        try:
            from .run import read_device_info

            return read_device_info(cuda.Context.get_device(), 0)
        except cuda.Error:
            pass
    executor = LocalExecutor([0])
    try:
        return executor.devices()[0]
    finally:
        executor.close()


def _runnable_winner(database: TuningDB, family: Family, problem: Problem, shape: Any) -> Variant | None:
    for row in database.top(problem, RANKS_TRIED):
        variant = runnable(family, family.variant_type.from_name(row.name), shape)
        if variant is not None:
            return variant
    return None


def runnable(family: Family, variant: Variant, shape: Any) -> Variant | None:
    """The variant, or its nearest relative that can run the shape: bounds=guard, then scalar loads."""
    params = variant.params()
    for change in ({}, {"bounds": "guard"}, {"bounds": "guard", "vec": 1}):
        if not set(change) <= set(params):
            continue
        candidate = replace(variant, **change)
        try:
            candidate.check()
        except InvalidVariant:
            continue
        if family.refusal(candidate, shape) is None:
            return candidate
    return None


def _dims(family: Family, problem: Problem) -> tuple[int, ...]:
    return family.parse_shape(problem.shape).dims


def _bucket(dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.ceil(math.log2(d)) for d in dims)


def _distance(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    return sum(abs(math.log2(x / y)) for x, y in zip(a, b))


def _cc(model: str) -> str:
    return model.split("(cc ", 1)[-1].split(",", 1)[0]
