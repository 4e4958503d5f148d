"""`tilegen tune --revalidate`: every stored winner timed again on this machine's GPU models, each
model's on that model's GPUs with cubins for its architecture; a change larger than the noise
means the winner moved (a new driver or compiler, other clocks)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.results import GpuModel, Row, is_ok
from ..evaluate.engine import Engine
from ..evaluate.loop import Sink, evaluate
from ..evaluate.options import RunOptions
from ..evaluate.plan import Point
from ..evaluate.session import Executor, Session
from ..families import get_family
from ..store.tuning_db import TuningKey, TuningDB
from ..search.proposers import PointList
from .tune import record_measured


@dataclass(frozen=True)
class Retimed:
    problem: TuningKey
    stored: Row  # the winner as stored
    new: Row  # timed again now
    change: float  # new / stored - 1 (inf when it failed now)
    noise: float  # the change that is still noise

    @property
    def moved(self) -> bool:
        return abs(self.change) > self.noise


def revalidate(db: TuningDB, run: RunOptions, executor: Executor | None = None) -> list[Retimed]:
    """Time every stored winner on this machine's GPU models again (see the module doc)."""
    with Session(replace(run, seed=1), executor) as session:
        return [retimed for model, engine in session.per_model("revalidate")
                for retimed in _retime_model(db, model, engine)]


def _retime_model(db: TuningDB, model: GpuModel, engine: Engine) -> list[Retimed]:
    problems = [p for p in db.problems() if p.gpu_model == model]
    winners = {problem: db.best(problem) for problem in problems}
    points = {problem: Point(get_family(problem.family).variant_type.from_name(stored.name),
                             get_family(problem.family).parse_shape(problem.shape), "none")
              for problem, stored in winners.items()}
    sink = RetimeSink(db, {point.key: problem for problem, point in points.items()})
    outcome = evaluate(PointList(points.values()), engine, sink, resume_hint="revalidate again to go on")
    new = {row.key: row for row in outcome.rows}
    return [_retimed(problem, winners[problem], new[point.key]) for problem, point in points.items()]


class RetimeSink(Sink):
    """The new timings, each recorded under its own problem."""

    def __init__(self, db: TuningDB, problems: dict[str, TuningKey]):
        self.db, self.problems = db, problems
        self.count = 0

    def record(self, rows: list[Row]) -> None:
        for row in rows:
            record_measured(self.db, [row], self.problems[row.key])
        self.count += len(rows)

    def kept(self) -> str:
        return f"{self.count} stored winners re-timed and kept in {self.db.path}"


def _retimed(problem: TuningKey, stored: Row, new: Row) -> Retimed:
    if not is_ok(new):
        return Retimed(problem, stored, new, float("inf"), 0.0)
    change = new.median_ms / stored.median_ms - 1
    noise = max(0.02, 3 * max(stored.stdev_ms / stored.median_ms, new.stdev_ms / new.median_ms))
    return Retimed(problem, stored, new, change, noise)
