"""Proposers: what each command hands the evaluation loop (gen.evaluate.loop). They differ only in
what they propose:

- `PointList`: fixed points, all at once: a sweep's or a compile's plan, stored winners to time
  again, a family's default variant. Rows decided beforehand (skipped points) come first.
- `Search`: a search strategy's proposals, a warm start first, within a budget and a time limit.
- `Rounds`: the finalists measured again in interleaved rounds, A B C A B C ..., so that drift
  hits them alike; ranked by the tune's objective (time, energy or edp).

A point whose variant a store already measured (`known`) is recalled, not evaluated again.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from ..core.objectives import DEFAULT_OBJECTIVE, needs_energy, score
from ..core.quantities import OPTIONAL_COLUMNS
from ..core.results import Row, is_ok
from ..core.timing import EARLY_STOP_MARGIN
from ..evaluate.loop import Proposal
from ..evaluate.plan import Point
from ..families.variant import Variant
from .strategies import Strategy


LIKELY_AHEAD = 16  # variants a search's strategy expects to ask for next, compiled ahead of other speculation


class PointList:
    """Fixed points, all proposed at once, after the rows decided beforehand."""

    def __init__(self, points: Iterable[Point], decided: Sequence[Row] = (), known: Mapping[str, Row] | None = None):
        self.points, self.decided, self.known = list(points), list(decided), known or {}
        self._proposed = False

    def propose(self, room: int) -> Proposal:
        if self._proposed:
            return Proposal()
        self._proposed = True
        fresh = [p for p in self.points if p.variant.name not in self.known]
        recalled = [self.known[p.variant.name] for p in self.points if p.variant.name in self.known]
        return Proposal(fresh, self.decided, recalled)

    def tell(self, row: Row) -> None:
        pass

    def done(self) -> bool:
        return self._proposed

    def timing_cutoff_ms(self) -> None:
        return None  # a sweep is a measurement: every point timed in full


class Search:
    """A strategy's proposals at one shape: first `warm` (the nearest tuned shape's winners), then
    what the strategy asks for, until `budget` evaluations are told, the space is exhausted or
    `deadline` (time.monotonic) passes. `all_at_once` (brute force) proposes everything it may at
    once; a model-guided strategy proposes only what keeps the engine busy, so that each proposal
    knows of as many measurements as it can, and names what it will likely ask for next.

    Each point is compiled at `level` (None: the run's). A screening search (a fast `level`) names
    its best `confirm` variants so far as likely points at the run's level whenever they change:
    the finalists' full compiles start before the search ends."""

    def __init__(self, strategy: Strategy, shape: Any, budget: int, warm: Sequence[Variant] = (),
                 known: Mapping[str, Row] | None = None, deadline: float | None = None, all_at_once: bool = False,
                 early_stop: float | None = EARLY_STOP_MARGIN, level: str | None = None, confirm: int = 0):
        self.strategy, self.shape, self.budget, self.level = strategy, shape, budget, level
        self.warm, self.known = list(warm), known or {}
        self.deadline, self.all_at_once, self.early_stop = deadline, all_at_once, early_stop
        self.confirm = confirm if level is not None else 0
        self.trace: list[float | None] = []  # the median of each evaluation told, in order (None: failed)
        self.trace_times: list[float] = []  # when each was told (time.monotonic)
        self.evaluated = 0  # points proposed for the engine (the others were recalled)
        self._pending = 0
        self._best_ms: float | None = None  # the best median told so far
        self._exhausted = False
        self._by_name = {v.name: v for v in strategy.space.variants}
        self._confirming: list[Variant] = []  # the best so far last named for a compile at the run's level

    def propose(self, room: int) -> Proposal:
        wanted = self.budget - len(self.trace) - self._pending
        count = 0 if self.done() else wanted if self.all_at_once else min(wanted, room)
        if count <= 0:
            return Proposal(likely=self._finalists_ahead())
        batch = [self.warm.pop(0) for _ in range(min(count, len(self.warm)))]
        self.strategy.pending.update(batch)  # asked for, as the strategy's own are: it proposes none of them again
        batch = batch or self.strategy.ask(count)
        self._exhausted = not batch
        recalled = [self.known[v.name] for v in batch if v.name in self.known]
        points = [Point(v, self.shape, "none", level=self.level) for v in batch if v.name not in self.known]
        self._pending += len(batch)
        self.evaluated += len(points)
        likely = [] if self.all_at_once else self.strategy.likely_next(LIKELY_AHEAD)
        return Proposal(points, recalled=recalled, likely=self._finalists_ahead() + [
            Point(v, self.shape, "none", level=self.level) for v in likely if v.name not in self.known])

    def _finalists_ahead(self) -> list[Point]:
        """The best `confirm` so far at the run's level, when they changed since last named."""
        best = self.finalists(self.confirm) if self.confirm else []
        if best == self._confirming:
            return []
        self._confirming = best
        return [Point(v, self.shape, "none") for v in best]

    def tell(self, row: Row) -> None:
        median = row.median_ms if is_ok(row) else None
        self.strategy.tell(self._by_name[row.name], median)
        if median is not None and (self._best_ms is None or median < self._best_ms):
            self._best_ms = median
        self.trace.append(median)
        self.trace_times.append(time.monotonic())
        self._pending -= 1

    def done(self) -> bool:
        out_of_time = self.deadline is not None and time.monotonic() > self.deadline
        return len(self.trace) + self._pending >= self.budget or self._exhausted or out_of_time

    def timing_cutoff_ms(self) -> float | None:
        """The best median so far, `early_stop` (a fraction) slower: a point clearly slower than
        that cannot win, so its timing may stop early. None before the first measurement."""
        if self.early_stop is None or self._best_ms is None:
            return None
        return self._best_ms * (1 + self.early_stop)

    def finalists(self, count: int) -> list[Variant]:
        """The fastest variants measured, fastest first."""
        measured = [(t, v) for v, t in self.strategy.results.items() if t is not None]
        return [v for _, v in sorted(measured, key=lambda item: item[0])][:count]


@dataclass
class Standing:
    """A finalist after the interleaved rounds: each round's median, and where measured its energy
    and its value of the tune's objective (gen.core.objectives)."""

    name: str
    medians_ms: list[float]
    energies_j: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    clocks_mhz: list[float] = field(default_factory=list)  # each round's SM clock, where NVML read it
    throttles: list[str] = field(default_factory=list)  # and what slowed the SM in it ('': nothing)

    @property
    def median_ms(self) -> float:
        """The median round's median (the lower of the middle two for an even count: a measured value)."""
        return statistics.median_low(self.medians_ms)

    @property
    def spread(self) -> float:
        """Relative spread of its round medians: (max - min) / median."""
        return _spread(self.medians_ms)

    @property
    def energy_j(self) -> float | None:
        """The median round's joules per launch; None where no round measured energy."""
        return statistics.median_low(self.energies_j) if self.energies_j else None

    @property
    def energy_spread(self) -> float | None:
        return _spread(self.energies_j) if self.energies_j else None

    @property
    def sm_clock_mhz(self) -> float | None:
        """The median round's SM clock; None where no round read it."""
        return statistics.median_low(self.clocks_mhz) if self.clocks_mhz else None

    @property
    def throttle(self) -> str | None:
        """What slowed the SM in any round, named ('': nothing); None where no round read it."""
        if not self.clocks_mhz:
            return None
        return ", ".join(dict.fromkeys(r for found in self.throttles for r in found.split(", ") if r))

    @property
    def score(self) -> float | None:
        """The median round's value of the objective; None where no round has one."""
        return statistics.median_low(self.scores) if self.scores else None

    @property
    def score_spread(self) -> float | None:
        return _spread(self.scores) if self.scores else None


def _spread(values: list[float]) -> float:
    """(max - min) / the median (the lower middle one)."""
    return (max(values) - min(values)) / statistics.median_low(values)


class Rounds:
    """The finalists measured again, `rounds` times, one round at a time, with their energy: in
    every round where the objective needs it, else in the last (for the time-energy front: each
    energy measurement runs the variant for half a second or more)."""

    def __init__(self, finalists: Sequence[Variant], shape: Any, rounds: int, objective: str = DEFAULT_OBJECTIVE):
        self.finalists, self.shape, self.rounds, self.objective = list(finalists), shape, rounds, objective
        self.rows: dict[str, list[Row]] = {v.name: [] for v in finalists}  # each finalist's correct rows
        self._started = 0
        self._waiting = 0  # rows of the current round still to come

    def propose(self, room: int) -> Proposal:
        if self._waiting or self._started >= self.rounds:
            return Proposal()
        self._started += 1
        self._waiting = len(self.finalists)
        energy = needs_energy(self.objective) or self._started == self.rounds
        return Proposal([Point(v, self.shape, "none", energy) for v in self.finalists])

    def tell(self, row: Row) -> None:
        self._waiting -= 1
        if is_ok(row):
            self.rows[row.name].append(row)

    def done(self) -> bool:
        return self._started >= self.rounds and not self._waiting

    def timing_cutoff_ms(self) -> None:
        return None  # the finalists are timed in full

    def standings(self) -> list[Standing]:
        """The finalists that were right in some round, best first by the objective (those it cannot
        score, measured without energy, after the others), then by the median round's time."""
        standings = [Standing(name, [row.median_ms for row in rows],
                              [row.energy_j for row in rows if row.energy_j is not None],
                              [found for row in rows if (found := score(row, self.objective)) is not None],
                              [row.sm_clock_mhz for row in rows if row.sm_clock_mhz is not None],
                              [row.throttle or "" for row in rows if row.sm_clock_mhz is not None])
                     for name, rows in self.rows.items() if rows]
        return sorted(standings, key=lambda s: (s.score is None, s.score or 0.0, s.median_ms))

    def median_round(self, standing: Standing) -> Row:
        """The row of the round whose value of the objective is the standing's (by time where it has
        none), with the energy and clock of a round that measured them where that round did not, and
        what slowed the SM in any round."""
        rows = self.rows[standing.name]
        if standing.score is not None:
            row = next(row for row in rows if score(row, self.objective) == standing.score)
        else:
            row = next(row for row in rows if row.median_ms == standing.median_ms)
        if row.energy_j is None and row.sm_clock_mhz is None:
            measured = next((other for other in rows if other.energy_j is not None or other.sm_clock_mhz is not None), row)
            row = replace(row, **{column.field: getattr(measured, column.field) for column in OPTIONAL_COLUMNS})
        return replace(row, throttle=standing.throttle) if standing.throttle is not None else row
