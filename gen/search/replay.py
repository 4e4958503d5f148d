"""A strategy replayed against recorded measurements, without a GPU: how the tuning study, the
tests and `tilegen replay` (public spaces measured in full, gen.search.measured) compare strategies.
The strategies are the tuner's own, asked and told as a real tune asks and tells them."""

from __future__ import annotations

import itertools
from collections import deque
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..core import checks
from ..core.errors import UsageError
from ..families.variant import Variant
from ..store.plots import best_so_far
from .measured import MeasuredSpace, read_measured
from .prior import Prior
from .strategies import STRATEGIES, STRATEGY_TYPES, SearchSpace, make_strategy


def replay(strategy: str, recorded: Mapping[str, float | None], space: SearchSpace, budget: int,
           seed: int = 0, in_flight: int = 1, prior: Prior | None = None, until: float | None = None
           ) -> list[tuple[str, float | None]]:
    """Run a strategy against recorded measurements (name -> median ms, None for failures), no GPU:
    what it asked for and the median it would have seen, in order. With `in_flight`, it is asked as a
    tune's loop asks it (gen.search.proposers.Search) while that many points compile or run: up to
    `in_flight` asked and not yet told, the oldest told first, and as many asked again as were told.
    `prior`: other GPUs' measurements of the same kernel (gen.search.prior), as a tune gives them.
    `until`: stop once a median at or below it is told (the run is the same up to there)."""
    search = make_strategy(strategy, space, seed, prior)
    seen: list[tuple[str, float | None]] = []
    waiting: deque[Variant] = deque()
    total = min(budget, len(space.variants))
    while len(seen) < total:
        waiting.extend(search.ask(min(in_flight, total - len(seen)) - len(waiting)))
        if not waiting:
            break
        variant = waiting.popleft()
        median = recorded.get(variant.name)
        search.tell(variant, median)
        seen.append((variant.name, median))
        if until is not None and median is not None and median <= until:
            break
    return seen


# ---- a measured space, replayed and scored --------------------------------------------------------

WITHIN = 0.01  # "reached the optimum": within 1% of it
SCORE_POINTS = 100  # the times at which the methodology's score compares a run with the baseline
BASELINE_RUNS = 500  # random orders whose mean is the baseline


@dataclass(frozen=True)
class Run:
    """One replayed run of a strategy from one seed: each evaluation's time (None: failed) and the
    simulated clock (seconds) when it was known."""

    times: list[float | None]
    clock_s: list[float]


def replay_measured(strategy: str, measured: MeasuredSpace, budget: int, seed: int, prior: Prior | None = None,
                    until_optimum: bool = False) -> Run:
    """A strategy replayed over a measured space, the clock advanced by each evaluation's cost;
    `until_optimum`: stopped once within WITHIN of the optimum (`reach`), or at the budget."""
    until = measured.optimum_ms * (1 + WITHIN) if until_optimum else None
    asked = replay(strategy, measured.time_ms, measured.space, budget, seed, prior=prior, until=until)
    return Run([t for _, t in asked], list(itertools.accumulate(measured.cost_s[name] for name, _ in asked)))


def replay_file(path: Path | str, strategies: Sequence[str], budgets: Sequence[int], repeats: int,
                seed: int = 0, priors: Sequence[Path | str] = ()) -> dict[str, Any]:
    """`tilegen replay` and `gen.replay`: the study of a measured space in a T4 or Kernel Tuner cache
    file, its arguments checked (one line each) before the file is read; `priors`: files of the same
    kernel measured on other GPUs, the strategies' prior."""
    if isinstance(strategies, str):
        strategies = [strategies]
    for name in strategies:
        if name not in STRATEGY_TYPES:
            raise UsageError(f"strategy {name!r} is not one of: {', '.join(STRATEGIES)}")
    budgets = [checks.whole(b, "a budget", 1) for b in ([budgets] if isinstance(budgets, int) else budgets)]
    if not strategies or not budgets:
        raise UsageError("give at least one strategy and one budget")
    repeats, seed = checks.whole(repeats, "repeats", 1), checks.whole(seed, "seed")
    priors = [priors] if isinstance(priors, (str, Path)) else list(priors)
    measured = read_measured(path)
    return study(measured, strategies, budgets, repeats, seed, measured_prior(measured, map(read_measured, priors)))


def measured_prior(measured: MeasuredSpace, others: Iterable[MeasuredSpace]) -> Prior | None:
    """Other measured spaces of the same kernel as a prior for `measured`; None without any. A space of
    other parameters is refused in one line."""
    others, names = list(others), measured.space.names
    for other in others:
        if sorted(other.space.names) != sorted(names):
            raise UsageError(f"the prior {other.source} has the parameters {', '.join(other.space.names)}, not "
                             f"{', '.join(names)}; give a file of the same kernel measured on another GPU")
    return Prior(measured.space, [{v: o.time_ms[v.name] for v in o.space.variants} for o in others]) if others else None


def study(measured: MeasuredSpace, strategies: Sequence[str], budgets: Sequence[int], repeats: int,
          seed: int = 0, prior: Prior | None = None) -> dict[str, Any]:
    """Each strategy replayed `repeats` times (seeds seed, seed + 1, ...) up to the largest budget, and
    scored at each budget (a prefix of the same runs: tilegen's strategies do not plan by the budget)."""
    baseline = Baseline(measured, max(budgets))
    scores = {}
    for name in strategies:
        runs = [replay_measured(name, measured, max(budgets), seed + r, prior) for r in range(repeats)]
        scores[name] = {str(b): score_runs(runs, baseline, b) for b in budgets}
    return {"source": measured.source, "configurations": len(measured),
            "failed": sum(t is None for t in measured.time_ms.values()), "optimum_ms": measured.optimum_ms,
            "repeats": repeats, "seed": seed, "prior_spaces": prior.spaces if prior else 0,
            "strategies": scores}


class Baseline:
    """Random search's expected best found over time, the methodology's baseline (Willemsen et al.,
    FGCS 2024): the mean of BASELINE_RUNS random orders of the space (a fixed seed), each on the same
    clock as a replayed run, since a slow configuration costs its draw more time."""

    def __init__(self, measured: MeasuredSpace, budget: int):
        times = np.array([t if t is not None else np.inf for t in measured.time_ms.values()])
        costs = np.array([measured.cost_s[name] for name in measured.time_ms])
        self.optimum, self.budget = measured.optimum_ms, min(budget, len(times))
        self.initial = float(np.where(np.isfinite(times), times, times[np.isfinite(times)].max()).mean())
        self.cost_s = float(costs.mean())
        orders = [np.random.default_rng(seed).permutation(len(times))[:self.budget] for seed in range(BASELINE_RUNS)]
        self.runs = [Run([None if np.isinf(times[i]) else float(times[i]) for i in order],
                         list(np.cumsum(costs[order]))) for order in orders]
        self.expected: dict[int, np.ndarray] = {}

    def horizon(self, budget: int) -> np.ndarray:
        """The times the score looks at: SCORE_POINTS up to what random search takes on average for
        the budget. Before its first result, a search has found what one random draw expects."""
        return budget * self.cost_s * np.arange(1, SCORE_POINTS + 1) / SCORE_POINTS

    def found(self, run: Run, budget: int) -> np.ndarray:
        """A run's best found at each time of `horizon(budget)`."""
        curve = best_so_far(run.times[:budget])
        known = np.searchsorted(run.clock_s[:budget], self.horizon(budget), side="right")
        return np.array([curve[k - 1] if k and curve[k - 1] is not None else self.initial for k in known])

    def score(self, found: np.ndarray, budget: int) -> float:
        """The methodology's score of a best-found curve over `horizon(budget)`: the mean of
        (random search's expectation - found) / (that expectation - optimum); 0 is random search."""
        return float(np.mean(self.score_over_time(found, budget)))

    def score_over_time(self, found: np.ndarray, budget: int) -> np.ndarray:
        """The score's terms at each time of `horizon(budget)`: where a curve gains or loses it."""
        if budget not in self.expected:
            self.expected[budget] = np.mean([self.found(run, budget) for run in self.runs], axis=0)
        expected = self.expected[budget]
        return (expected - found) / np.maximum(expected - self.optimum, 1e-12 * self.optimum)


def score_runs(runs: Sequence[Run], baseline: Baseline, budget: int) -> dict[str, dict[str, float | int | None]]:
    """The runs' figures at a budget, each a mean and standard deviation over the runs that have it
    (`runs`: how many) out of all (`of`): the fraction of the optimum reached, the evaluations and
    simulated seconds to within 1%, and the methodology's score. The score is the mean, over the time
    random search takes for the budget, of (baseline - best found) / (baseline - optimum), the best
    found being the mean over the runs (as the methodology averages runs before it scores); its
    spread is that of the runs scored one by one."""
    figures = [_figures(run, baseline, budget) for run in runs]
    summary = {}
    for figure in ("fraction", "evaluations_to_1pc", "seconds_to_1pc", "score"):
        values = [f[figure] for f in figures if f[figure] is not None]
        summary[figure] = {"mean": float(np.mean(values)) if values else None,
                           "std": float(np.std(values)) if values else None, "runs": len(values), "of": len(runs)}
    summary["score"]["mean"] = baseline.score(np.mean([f["found"] for f in figures], axis=0), budget)
    return summary


def reach(run: Run, optimum: float, budget: int | None = None) -> int | None:
    """The index of the run's first evaluation within WITHIN of the optimum (None: not within the budget)."""
    return next((i for i, t in enumerate(run.times[:budget]) if t is not None and t <= optimum * (1 + WITHIN)), None)


def time_to_optimum(runs: Sequence[Run], optimum: float | Sequence[float], by: int = 100
                    ) -> dict[str, float | int | None]:
    """Runs made until within WITHIN of the optimum (replay_measured(until_optimum=True), or cut
    there): how many got there (`reached` of `of`; the others are censored at their end), the median
    simulated seconds and evaluations to get there over all runs (None when half or more are censored),
    the means over those that got there, and how many got there by `by` evaluations. `optimum`: one
    per run for runs of several spaces."""
    optima = [optimum] * len(runs) if isinstance(optimum, (int, float)) else list(optimum)
    reached = [(i, run) for i, run in ((reach(run, best), run) for run, best in zip(runs, optima)) if i is not None]
    seconds = sorted([run.clock_s[i] for i, run in reached] + [np.inf] * (len(runs) - len(reached)))
    evaluations = sorted([i + 1 for i, _ in reached] + [np.inf] * (len(runs) - len(reached)))

    def median(values: list[float]) -> float | None:
        value = float(np.median(values)) if values else np.inf
        return value if np.isfinite(value) else None

    return {"of": len(runs), "reached": len(reached), "by": by, "reached_by": sum(i < by for i, _ in reached),
            "median_s": median(seconds), "mean_s": float(np.mean(seconds[:len(reached)])) if reached else None,
            "median_evaluations": median(evaluations),
            "mean_evaluations": float(np.mean(evaluations[:len(reached)])) if reached else None}


def _figures(run: Run, baseline: Baseline, budget: int) -> dict[str, Any]:
    curve = best_so_far(run.times[:budget])
    best = curve[-1] if curve else None
    reached = reach(run, baseline.optimum, budget)
    found = baseline.found(run, budget)
    return {"fraction": baseline.optimum / best if best else 0.0,
            "evaluations_to_1pc": None if reached is None else reached + 1,
            "seconds_to_1pc": None if reached is None else run.clock_s[reached],
            "score": baseline.score(found, budget), "found": found}

STUDY_HEADERS = ["strategy", "budget", "fraction of optimum", "evaluations to 1%", "seconds to 1%", "score"]


def study_rows(result: Mapping[str, Any]) -> list[list[str]]:
    """A study's figures as table rows: each mean ± standard deviation, and for the figures a run
    may not reach, in how many runs it did."""
    rows = []
    for name, by_budget in result["strategies"].items():
        for budget, figures in by_budget.items():
            rows.append([name, budget, _spread(figures["fraction"], "{:.1%}"),
                         _spread(figures["evaluations_to_1pc"], "{:.0f}", True),
                         _spread(figures["seconds_to_1pc"], "{:.0f}", True),
                         _spread(figures["score"], "{:.3f}")])
    return rows


def _spread(figure: Mapping[str, Any], form: str, counted: bool = False) -> str:
    if figure["mean"] is None:
        return f"never (0/{figure['of']})"
    text = f"{form.format(figure['mean'])} ± {form.format(figure['std'])}"
    return f"{text} ({figure['runs']}/{figure['of']})" if counted else text
