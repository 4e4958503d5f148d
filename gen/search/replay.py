"""A strategy replayed against recorded measurements, without a GPU: how the tuning study, the
tests and `tilegen replay` (public spaces measured in full, gen.search.measured) compare strategies.
The strategies are the tuner's own, asked and told as a real tune asks and tells them."""

from __future__ import annotations

import bisect
import itertools
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..core import checks
from ..core.errors import UsageError
from ..store.plots import best_so_far
from .measured import MeasuredSpace, read_measured
from .strategies import STRATEGIES, STRATEGY_TYPES, SearchSpace, make_strategy


def replay(strategy: str, recorded: Mapping[str, float | None], space: SearchSpace, budget: int,
           seed: int = 0, batch: int = 1) -> list[tuple[str, float | None]]:
    """Run a strategy against recorded measurements (name -> median ms, None for failures), no GPU:
    what it asked for and the median it would have seen, in order. With `batch`, it proposes that
    many at a time, each batch told before the next is asked for (as while the GPU is busy)."""
    search = make_strategy(strategy, space, seed)
    seen: list[tuple[str, float | None]] = []
    while len(seen) < min(budget, len(space.variants)):
        proposed = search.ask(min(batch, budget - len(seen)))
        if not proposed:
            break
        for variant in proposed:
            median = recorded.get(variant.name)
            search.tell(variant, median)
            seen.append((variant.name, median))
    return seen


# ---- a measured space, replayed and scored --------------------------------------------------------

WITHIN = 0.01  # "reached the optimum": within 1% of it
SCORE_POINTS = 100  # the times at which the methodology's score compares a run with the baseline


@dataclass(frozen=True)
class Run:
    """One replayed run of a strategy from one seed: each evaluation's time (None: failed) and the
    simulated clock (seconds) when it was known."""

    times: list[float | None]
    clock_s: list[float]


def replay_measured(strategy: str, measured: MeasuredSpace, budget: int, seed: int) -> Run:
    """A strategy replayed over a measured space, the clock advanced by each evaluation's cost."""
    asked = replay(strategy, measured.time_ms, measured.space, budget, seed)
    return Run([t for _, t in asked], list(itertools.accumulate(measured.cost_s[name] for name, _ in asked)))


def replay_file(path: Path | str, strategies: Sequence[str], budgets: Sequence[int], repeats: int,
                seed: int = 0) -> dict[str, Any]:
    """`tilegen replay` and `gen.replay`: the study of a measured space in a T4 or Kernel Tuner cache
    file, its arguments checked (one line each) before the file is read."""
    if isinstance(strategies, str):
        strategies = [strategies]
    for name in strategies:
        if name not in STRATEGY_TYPES:
            raise UsageError(f"strategy {name!r} is not one of: {', '.join(STRATEGIES)}")
    budgets = [checks.whole(b, "a budget", 1) for b in ([budgets] if isinstance(budgets, int) else budgets)]
    if not strategies or not budgets:
        raise UsageError("give at least one strategy and one budget")
    repeats, seed = checks.whole(repeats, "repeats", 1), checks.whole(seed, "seed")
    return study(read_measured(path), strategies, budgets, repeats, seed)


def study(measured: MeasuredSpace, strategies: Sequence[str], budgets: Sequence[int], repeats: int,
          seed: int = 0) -> dict[str, Any]:
    """Each strategy replayed `repeats` times (seeds seed, seed + 1, ...) up to the largest budget, and
    scored at each budget (a prefix of the same runs: tilegen's strategies do not plan by the budget)."""
    baseline = Baseline(measured, max(budgets))
    scores = {}
    for name in strategies:
        runs = [replay_measured(name, measured, max(budgets), seed + r) for r in range(repeats)]
        scores[name] = {str(b): summarise([score_run(run, baseline, b) for run in runs]) for b in budgets}
    return {"source": measured.source, "configurations": len(measured),
            "failed": sum(t is None for t in measured.time_ms.values()), "optimum_ms": measured.optimum_ms,
            "repeats": repeats, "seed": seed, "strategies": scores}


class Baseline:
    """Random search's expected best after k evaluations (without replacement, failures counted as
    the worst time, as a model-free search sees them) and its expected clock: the methodology's
    baseline (Willemsen et al., FGCS 2024), computed exactly rather than sampled."""

    def __init__(self, measured: MeasuredSpace, budget: int):
        times = [t for t in measured.time_ms.values() if t is not None]
        ranked = np.sort(np.array(times + [max(times)] * (len(measured) - len(times))))
        count = len(ranked)
        survival = np.ones(count + 1)  # P(the best of k draws ranks at or beyond i), i = 0..count
        self.expected_best = []
        for k in range(min(budget, count)):
            survival[:count] *= np.clip((count - np.arange(count) - k) / (count - k), 0, None)
            survival[count] = 0.0
            self.expected_best.append(float((ranked * (survival[:count] - survival[1:])).sum()))
        self.optimum = measured.optimum_ms
        self.cost_s = float(np.mean(list(measured.cost_s.values())))

    def at(self, seconds: float) -> float:
        draws = min(max(1, int(seconds / self.cost_s)), len(self.expected_best))
        return self.expected_best[draws - 1]


def score_run(run: Run, baseline: Baseline, budget: int) -> dict[str, float | None]:
    """What one run reached at a budget: the fraction of the optimum, the evaluations and simulated
    seconds to within 1% (None: not reached), and the methodology's score: the mean over the time
    random search takes for the budget of (baseline - best so far) / (baseline - optimum)."""
    curve = best_so_far(run.times[:budget])
    best = curve[-1] if curve else None
    reached = next((i for i, b in enumerate(curve) if b is not None and b <= baseline.optimum * (1 + WITHIN)), None)
    horizon = budget * baseline.cost_s
    performance = []
    for point in range(1, SCORE_POINTS + 1):
        seconds = horizon * point / SCORE_POINTS
        known = bisect.bisect_right(run.clock_s[:budget], seconds)
        expected = baseline.at(seconds)
        found = curve[known - 1] if known and curve[known - 1] is not None else baseline.expected_best[0]
        performance.append((expected - found) / (expected - baseline.optimum) if expected > baseline.optimum else 1.0)
    return {"fraction": baseline.optimum / best if best else 0.0,
            "evaluations_to_1pc": None if reached is None else reached + 1,
            "seconds_to_1pc": None if reached is None else run.clock_s[reached],
            "score": float(np.mean(performance))}


def summarise(scored: Sequence[Mapping[str, float | None]]) -> dict[str, dict[str, float | int | None]]:
    """Each figure's mean and standard deviation over the runs that have it, and how many do."""
    summary = {}
    for figure in scored[0]:
        values = [s[figure] for s in scored if s[figure] is not None]
        summary[figure] = {"mean": float(np.mean(values)) if values else None,
                           "std": float(np.std(values)) if values else None, "runs": len(values)}
    return summary


STUDY_HEADERS = ["strategy", "budget", "fraction of optimum", "evaluations to 1%", "seconds to 1%", "score"]


def study_rows(result: Mapping[str, Any]) -> list[list[str]]:
    """A study's figures as table rows: each mean ± standard deviation, and for the figures a run
    may not reach, in how many runs it did."""
    rows = []
    for name, by_budget in result["strategies"].items():
        for budget, figures in by_budget.items():
            rows.append([name, budget, _spread(figures["fraction"], "{:.1%}"),
                         _spread(figures["evaluations_to_1pc"], "{:.0f}", result["repeats"]),
                         _spread(figures["seconds_to_1pc"], "{:.0f}", result["repeats"]),
                         _spread(figures["score"], "{:.3f}")])
    return rows


def _spread(figure: Mapping[str, Any], form: str, runs: int | None = None) -> str:
    if figure["mean"] is None:
        return f"never (0/{runs})" if runs else "-"
    text = f"{form.format(figure['mean'])} ± {form.format(figure['std'])}"
    return f"{text} ({figure['runs']}/{runs})" if runs else text
