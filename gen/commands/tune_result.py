"""What a tune found on one GPU model, and the report it prints: the finalists ranked by the
objective, with their energy and SM clock (and whether the GPU throttled) where measured, and their
time-energy front."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.objectives import DEFAULT_OBJECTIVE, needs_energy, pareto_front
from ..core.results import Row, is_ok
from ..store.report import compiled_by
from ..store.tuning_db import TuningKey
from ..search.proposers import Standing
from ..search.strategies import STRATEGY_TYPES


@dataclass
class TuneResult:
    problem: TuningKey
    strategy: str
    winner: Row
    standings: list[Standing]
    default: Row | None
    evaluations: int
    gpu_evaluations: int
    seconds: float
    trace: list[float | None]
    trace_seconds: list[float]  # when each evaluation finished, from the start of the tune
    gpu_seconds: float  # the GPUs' busy time (checking and timing), summed
    space: int  # variants the strategy searched among
    objective: str = DEFAULT_OBJECTIVE  # what ranked the finalists
    energy_note: str = ""  # why the finalists have no energy, where they have none
    screen: str | None = None  # the compile level the search ran at (its finalists confirmed at full); None: full
    search_seconds: float = 0.0  # the strategy's own time: its model's fits and acquisitions, summed

    @property
    def front(self) -> list[Standing]:
        """The finalists on the time-energy Pareto front, fastest first (none without energy)."""
        return pareto_front(self.standings)

    @property
    def covered_space(self) -> bool:
        """Whether every variant of the space was evaluated: the winner is the space's best."""
        return self.evaluations >= self.space

    @property
    def lead(self) -> float | None:
        """How much worse the runner-up is than the winner, relatively, by the objective (by time
        where either has no value of it)."""
        if len(self.standings) < 2:
            return None
        first, second = self.standings[:2]
        if first.score is None or second.score is None:
            return second.median_ms / first.median_ms - 1
        return second.score / first.score - 1

    @property
    def noise(self) -> float:
        return max(s.spread if s.score_spread is None else s.score_spread for s in self.standings[:2])

    @property
    def speedup_over_default(self) -> float | None:
        if self.default is None or not is_ok(self.default):
            return None
        return self.default.median_ms / self.standings[0].median_ms


def describe(result: TuneResult) -> str:
    """The report a tuning run prints."""
    winner, first = result.winner, result.standings[0]
    busy = result.gpu_seconds / result.seconds if result.seconds else 0.0
    lines = [f"{result.problem.gpu_model}, {result.problem.family} {result.problem.dtype} {result.problem.shape}: "
             f"{result.evaluations} evaluations ({result.gpu_evaluations} on the GPU) by {result.strategy} "
             f"in {result.seconds:.1f} s (GPUs busy {busy:.0%} of it, their time summed over GPUs; the search's own "
             f"{result.search_seconds:.2f} s){_screened(result)}",
             f"winner{_by(result)}: {first.name}  {first.median_ms:.4g} ms, {winner.throughput:.2f} {winner.unit}"
             f"{_energy(first)}",
             f"  {_coverage(result)}", f"  compiled by {compiled_by(winner)}"]
    for standing in result.standings:
        lines.append(f"  {standing.name:<70} median {standing.median_ms:.4g} ms over {len(standing.medians_ms)} "
                     f"interleaved rounds, spread {standing.spread:.1%}{_energy(standing)}{_clock(standing)}")
    if result.lead is not None:
        verdict = "larger than the noise" if result.lead > result.noise else "within the noise: a tie"
        lines.append(f"lead over the runner-up{_by(result)}: {result.lead:.1%}; noise {result.noise:.1%}: {verdict}")
    lines += _front(result)
    speedup = result.speedup_over_default
    if speedup is not None:
        lines.append(f"against the family's default variant {result.default.name}: {_compared(speedup, result)}")
    return "\n".join(lines)


def _compared(speedup: float, result: TuneResult) -> str:
    """The winner's time against the default's, in words that hold either way: '2.10x faster',
    '2.10x slower' (a winner by energy may be), never '0.48x faster'."""
    chosen = f" (the winner is chosen{_by(result)}, not by time)" if _by(result) else ""
    if speedup >= 1:
        return f"{speedup:.2f}x faster{chosen}"
    return f"{1 / speedup:.2f}x slower{chosen}"


def _screened(result: TuneResult) -> str:
    return f"; screened at {result.screen}, the finalists compiled and timed again at full" if result.screen else ""


def _energy(standing: Standing) -> str:
    if standing.energy_j is None:
        return ""
    spread = f", spread {standing.energy_spread:.1%}" if len(standing.energies_j) > 1 else " (one round)"
    return f"; {standing.energy_j * 1e3:.4g} mJ per launch{spread}"


def _clock(standing: Standing) -> str:
    """'; SM clock 1980 MHz, not throttled', or '... throttled (power cap)'; '' where not read."""
    if standing.sm_clock_mhz is None:
        return ""
    throttled = f"throttled ({standing.throttle})" if standing.throttle else "not throttled"
    return f"; SM clock {standing.sm_clock_mhz:.0f} MHz, {throttled}"


def _by(result: TuneResult) -> str:
    """What ranked the finalists, where not time (nor time for want of energy)."""
    return "" if result.objective == DEFAULT_OBJECTIVE or result.energy_note else f" by {result.objective}"


def _front(result: TuneResult) -> list[str]:
    """The finalists' time-energy Pareto front, or why there is none."""
    if result.energy_note:
        return [f"{result.energy_note}: ranked by time"] if needs_energy(result.objective) else [result.energy_note]
    front = result.front
    if not front:
        return []
    points = ", ".join(f"{s.name} ({s.median_ms:.4g} ms, {s.energy_j * 1e3:.4g} mJ)" for s in front)
    return [f"time-energy front of the finalists (fastest first, least energy last): {points}"]


def _coverage(result: TuneResult) -> str:
    """Whether the winner is the best of the whole space or of the part evaluated."""
    if result.covered_space:
        return f"the best of the whole space: all {result.space:,} variants evaluated"
    hint = " (brute force without --budget covers the whole space)" if STRATEGY_TYPES[result.strategy].covers_space else ""
    return f"the best of the {result.evaluations:,} evaluated, a subset of the {result.space:,} variants{hint}"
