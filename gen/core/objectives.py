"""What a tune, `best` and `gen.tuned` minimise: a row's time, its energy, or their product.

- `time`: the median milliseconds per launch (the default);
- `energy`: joules per launch, from the GPU's energy counter (gen.gpu.process.energy);
- `edp`: the energy-delay product, joules x seconds per launch.

A row measured without energy has no energy or edp score: it can be ranked by time only.
"""

from __future__ import annotations

from typing import Protocol, Sequence, TypeVar

from .errors import UsageError
from .results import Row, is_ok

OBJECTIVES = ("time", "energy", "edp")
DEFAULT_OBJECTIVE = "time"
NO_ENERGY = "energy not measured"  # how a row's message begins to say why it has no energy


def check_objective(objective: object) -> str:
    """`objective` if it is one of OBJECTIVES; UsageError otherwise."""
    if not isinstance(objective, str) or objective not in OBJECTIVES:
        raise UsageError(f"objective {objective!r} is not one of: {', '.join(OBJECTIVES)}")
    return objective


def needs_energy(objective: str) -> bool:
    return objective != "time"


def score(row: Row, objective: str) -> float | None:
    """What `objective` makes of a correct row (lower is better); None where the row cannot say
    (not correct, or measured without energy)."""
    if not is_ok(row):
        return None
    if objective == "time":
        return row.median_ms
    if row.energy_j is None:
        return None
    return row.energy_j if objective == "energy" else row.energy_j * row.median_ms / 1e3


def ranked(rows: Sequence[Row], objective: str) -> list[Row]:
    """The rows `objective` can score, best first (a stable sort: ties keep their order)."""
    scored = [(value, i, row) for i, row in enumerate(rows) if (value := score(row, objective)) is not None]
    return [row for _, _, row in sorted(scored, key=lambda item: item[:2])]


class Measured(Protocol):
    """What the front needs of a row or a tune's standing."""

    median_ms: float
    energy_j: float | None


M = TypeVar("M", bound=Measured)


def pareto_front(measured: Sequence[M]) -> list[M]:
    """Those that no other beats in both time and energy (in one at least strictly), fastest
    first; those without energy are left out. Give correct rows (or standings) only."""
    known = sorted((m for m in measured if m.energy_j is not None), key=lambda m: (m.median_ms, m.energy_j))
    front: list[M] = []
    for candidate in known:
        if not front or candidate.energy_j < front[-1].energy_j:
            front.append(candidate)
    return front
