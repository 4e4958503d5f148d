"""Which variant to use for a shape on this GPU, from the tuning database.

The order of preference: this GPU model's winner for the exact shape; for the nearest tuned
shape in the same size bucket (every dimension within the same power of two); for its nearest
tuned shape at any size; a GPU of the same compute capability (with a warning); and last the
family's safe default. A stored winner that cannot run the shape (bounds=none on an odd size,
16-byte vectors on a misaligned one) is adapted the way its family says (Family.adaptations);
if no adaptation runs either, the next in its ranking is tried.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

from ..core.checks import is_whole
from ..core.objectives import DEFAULT_OBJECTIVE, check_objective, needs_energy
from ..core.errors import TilegenError, UsageError
from ..families import get_family
from ..families.family import Family
from ..core.results import DeviceInfo, GpuModel
from ..store.tuning_db import TuningKey, TuningDB, default_db_path
from ..families.variant import Variant

RANKS_TRIED = 20  # how far down a stored ranking to look for a variant that can run the shape


def tuned(family: str, *dims: int | str, dtype: str | None = None, db: Path | None = None,
          device: DeviceInfo | None = None, gpu: str | None = None, objective: str = DEFAULT_OBJECTIVE,
          epilogue: str = "") -> Variant:
    """The best known variant of `family` for this shape on the current GPU (see the module doc).
    The shape is its dimensions (`tuned("sgemm", 4096, 4096, 4096)`) or its written form; `dtype`
    is an element type of the family (default: its default variant's). `gpu` names a GPU model of
    the database by part of its name ("H100"): then no GPU is asked. `objective` is what "best"
    means: time, energy or edp (gen.core.objectives; energy counts only variants measured with it).
    `epilogue` asks for a variant that computes it after the product ('bias=col,act=gelu-tanh': the
    family's parameters, as a tune fixed them with -p): one tuned with it, else the plain winner with it."""
    model = gpu_model_named(TuningDB(db, create=False), gpu, "gpu") if gpu is not None else None
    return tuned_with_reason(family, *dims, dtype=dtype, db=db, device=device, gpu_model=model,
                             objective=objective, epilogue=epilogue)[0]


def gpu_model_named(db: TuningDB, name: str, argument: str) -> GpuModel:
    """The one GPU model in the database whose name contains `name` (given as `argument`)."""
    if not isinstance(name, str) or not name:
        raise UsageError(f"{argument} names a GPU model by part of its name, like 'H100'; got {name!r}")
    models = db.models()
    found = [m for m in models if name.lower() in str(m).lower()]
    if len(found) != 1:
        known = "; ".join(str(m) for m in models) or "none"
        raise UsageError(f"{argument} {name!r} matches {len(found)} GPU models in {db.path} (known: {known})")
    return found[0]


def tuned_with_reason(family: str, *dims: int | str, dtype: str | None = None, db: Path | None = None,
                      device: DeviceInfo | None = None, gpu_model: GpuModel | None = None,
                      objective: str = DEFAULT_OBJECTIVE, epilogue: str = "") -> tuple[Variant, str]:
    variant, reason = _tuned_with_reason(family, dims, dtype, db, device, gpu_model, objective, epilogue)
    if not epilogue:
        return variant, reason
    fused = get_family(variant.family).with_epilogue(variant, epilogue)
    if fused is None:
        raise UsageError(f"{variant.name} fuses no epilogue ({epilogue}): a family with epilogues does (wgmma, "
                         f"on sm_90)")
    return fused, reason if fused == variant else f"{reason}, with the epilogue {epilogue} fused in"


def _tuned_with_reason(family: str, dims: tuple[int | str, ...], dtype: str | None, db: Path | None,
                       device: DeviceInfo | None, gpu_model: GpuModel | None, objective: str,
                       epilogue: str) -> tuple[Variant, str]:
    """tuned_with_reason's answer, before the epilogue is fused into a variant tuned without it: among
    the stored winners of each place, one tuned with the epilogue comes first, then a plain one."""
    check_objective(objective)
    chosen_family = get_family(family)
    shape = chosen_family.parse_shape(shape_text(dims))
    dtype = chosen_family.check_dtype(dtype)
    if device is not None and not isinstance(device, DeviceInfo):
        raise UsageError(f"device must be a gen.core.results.DeviceInfo (or None: the current GPU), got {device!r}")
    if gpu_model is not None and not isinstance(gpu_model, GpuModel):
        raise UsageError(f"gpu_model must be a gen.core.results.GpuModel (or None: the device's), got {gpu_model!r}")
    untuned = (chosen_family.safe_variant(shape, dtype), "the family's safe default (no tuning database yet)")
    no_database = db is None and not default_db_path().exists()  # nothing tuned on this machine yet
    if no_database and not chosen_family.fallback:
        return untuned
    if gpu_model is None and device is None:
        from ..evaluate.session import current_device  # imported only when a GPU is asked: gen.call.kernels stays light

        try:
            device = current_device()
        except TilegenError:
            if no_database:  # no GPU to judge the fallback by either
                return untuned
            raise
    model = gpu_model or device.model  # type: ignore[union-attr]
    if not chosen_family.runs_on(model.cc) and chosen_family.fallback:
        variant, reason = tuned_with_reason(chosen_family.fallback, *dims, dtype=dtype, db=db, device=device,
                                            gpu_model=gpu_model, objective=objective, epilogue=epilogue)
        return variant, f"{reason}; {family}'s fallback on cc {model.cc} ({family} runs on {chosen_family.target_arch})"
    if no_database:
        return untuned
    database = TuningDB(db, create=False)
    tuned_here = [p for p in database.problems(family) if p.dtype == dtype and p.epilogue in (epilogue, "")]
    models = set(database.models())
    same_model = [p for p in tuned_here if p.gpu_model == model]
    same_cc = [p for p in tuned_here if p.gpu_model != model and p.gpu_model in models and p.gpu_model.cc == model.cc]
    bucket = _bucket(shape.dims)
    searches = [
        ("the exact shape on this GPU", [p for p in same_model if p.shape == str(shape)]),
        ("the nearest tuned shape in the same size bucket on this GPU",
         [p for p in same_model if _bucket(_dims(chosen_family, p)) == bucket]),
        ("the nearest tuned shape on this GPU", same_model),
        ("the nearest tuned shape on a GPU of the same compute capability", same_cc),
    ]
    for reason, problems in searches:
        for problem in sorted(problems, key=lambda p: (p.epilogue != epilogue,
                                                       shape_distance(_dims(chosen_family, p), shape.dims))):
            found = _runnable_winner(database, chosen_family, problem, shape, objective)
            if found is not None:
                variant, stored = found
                if problems is same_cc:
                    warnings.warn(f"no tuning for {model}; using {problem.gpu_model}'s winner at {problem.shape}",
                                  stacklevel=3)
                adapted = f", adapted from {stored} to run {shape}" if stored != variant.name else ""
                return variant, f"{reason} ({problem.shape} on {problem.gpu_model}){adapted}"
    measured = f" with its energy measured (--objective {objective})" if needs_energy(objective) else ""
    return chosen_family.safe_variant(shape, dtype), f"the family's safe default (nothing tuned applies{measured})"


def shape_text(dims: tuple[int | str, ...]) -> str:
    """(4096, 4096, 4096) -> '4096x4096x4096'; a single written shape passes through."""
    if len(dims) == 1 and isinstance(dims[0], str):
        return dims[0]
    if not dims or not all(is_whole(d) for d in dims):
        raise UsageError(f"a shape is its dimensions as integers, or its written form like '4096x4096'; got {dims!r}")
    return "x".join(str(int(d)) for d in dims)


def _runnable_winner(database: TuningDB, family: Family, problem: TuningKey, shape: Any,
                     objective: str) -> tuple[Variant, str] | None:
    """The best stored variant that runs the shape, as it is or adapted, and the stored name (of the
    problem's epilogue: the database keeps each epilogue's winners apart)."""
    for row in database.top(problem, RANKS_TRIED, objective):
        stored = family.variant_type.from_name(row.name)
        variant = family.runnable(stored, shape)
        if variant is not None:
            return variant, row.name
    return None


def _dims(family: Family, problem: TuningKey) -> tuple[int, ...]:
    return family.parse_shape(problem.shape).dims


def _bucket(dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.ceil(math.log2(d)) for d in dims)


def shape_distance(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """How far apart two shapes' dimensions are, in factors of two: nearest tuned shapes are nearest by it."""
    return sum(abs(math.log2(x / y)) for x, y in zip(a, b))
