#!/usr/bin/env python3
"""Search strategies judged where the auto-tuning field judges them: tilegen's strategies replayed
(gen.search.replay, the tuner's own code) beside Kernel Tuner's in its own simulation mode, on the same
fully measured spaces, scored the same way: the fraction of the optimum at each budget, the
evaluations and simulated seconds to within 1%, and the methodology's score (tilegen's computation,
gen.search.replay.score_runs). Kernel Tuner's runs are put on tilegen's clock (the file's compile,
framework and run times of each configuration it evaluated, in its order), so both are timed alike.

The spaces are Kernel Tuner cache files (decompressed, as Kernel Tuner reads them), e.g. those of the
FAIR benchmark hub (github.com/AutoTuningAssociation/benchmark_hub, cachefiles/*_milo/GPU.json.gz),
named KERNEL_GPU.json in --data. Kernel Tuner is optional: without it only tilegen's strategies run.

With --prior-from, each tilegen strategy also runs with a prior ("tilegen NAME, prior"): the spaces
named there of the same kernel on other GPUs (never the space itself), as a tune takes the tuning
database's measurements of other GPUs (gen.search.prior). Kernel Tuner's strategies get no prior.

Usage (Kernel Tuner 1.5 in a venv of its own, tilegen on the path):
  PYTHONPATH=. /work/venv-kt/bin/python scripts/bench_search.py --data /work/data-bench \\
      [--spaces convolution_A100 ...] [--budgets 20 50 100] [--repeats 50] [--tilegen bayes ...] \\
      [--prior-from convolution_A4000 ...] [--kernel-tuner genetic_algorithm ...] [--json OUT.json] [--plot DIR]
      [--traces] [--to-optimum 1000]

With --to-optimum CAP, each strategy instead runs until within 1% of the optimum or CAP evaluations
(Kernel Tuner's with max_fevals = CAP, stopped as its budget stops it once a configuration within 1%
is evaluated: the run is the same up to there), and the script prints per space and per kernel (its
GPUs' runs pooled) the simulated seconds and evaluations to get there: the median over all runs (a
run that never got there counts as longer than any), the mean over those that got there, and how
many got there within CAP and within 100 evaluations (gen.search.replay.time_to_optimum).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np

from gen.core.table import markdown_table
from gen.search.measured import MeasuredSpace, read_measured
from gen.search.prior import Prior
from gen.search.replay import (STUDY_HEADERS, WITHIN, Baseline, Run, measured_prior, replay_measured, score_runs,
                               study_rows, time_to_optimum)
from gen.search.strategies import DEFAULT_STRATEGY, STRATEGIES

SPACES = [f"{kernel}_{gpu}" for kernel in ("convolution", "dedispersion") for gpu in ("A100", "A4000", "MI250X", "W6600")]
KERNEL_TUNER = ("random_sample", "genetic_algorithm", "simulated_annealing", "dual_annealing", "diff_evo", "pso",
                "firefly_algorithm", "mls", "greedy_mls", "greedy_ils", "ordered_greedy_mls", "basinhopping",
                "minimize", "bayes_opt", "hybrid_vndx", "adaptive_tabu_greywolf")
KT_CACHE = "kernel_tuner_runs.json"  # in --data: each Kernel Tuner run's evaluations, by strategy/space/seed/budget


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder of KERNEL_GPU.json cache files")
    parser.add_argument("--spaces", nargs="+", default=SPACES)
    parser.add_argument("--budgets", nargs="+", type=int, default=[20, 50, 100])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--kt-repeats", type=int, help="Kernel Tuner's runs per strategy and budget (default: --repeats)")
    parser.add_argument("--tilegen", nargs="+", default=[DEFAULT_STRATEGY], choices=STRATEGIES)
    parser.add_argument("--prior-from", nargs="*", default=[], metavar="SPACE",
                        help="spaces a space's prior is drawn from: those of its kernel on other GPUs")
    parser.add_argument("--kernel-tuner", nargs="*", default=list(KERNEL_TUNER))
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--plot", type=Path, help="folder for a plot of performance over time per space")
    parser.add_argument("--traces", action="store_true",
                        help="also print how each strategy moves: where its evaluations rank in the space, and its runs' spread")
    parser.add_argument("--to-optimum", type=int, metavar="CAP",
                        help="instead run each strategy until within 1%% of the optimum (or CAP evaluations) and print the time it took")
    args = parser.parse_args()
    if args.to_optimum:
        print_time_to_optimum(args)
        return
    everything = {}
    for name in args.spaces:
        path = args.data / f"{name}.json"
        measured = read_measured(path)
        baseline = Baseline(measured, max(args.budgets))
        print(f"\n## {name}: {len(measured):,} configurations, "
              f"{sum(t is None for t in measured.time_ms.values()):,} failed, optimum {measured.optimum_ms:.4g} ms")
        prior = measured_prior(measured, [read_measured(args.data / f"{other}.json") for other in args.prior_from
                                          if other.split("_")[0] == name.split("_")[0] and other != name])
        runs = {f"tilegen {s}": [{b: run for b in args.budgets} for run in tilegen_runs(s, measured, args)]
                for s in args.tilegen}
        if prior:
            runs.update({f"tilegen {s}, prior": [{b: run for b in args.budgets}
                                                 for run in tilegen_runs(s, measured, args, prior)]
                         for s in args.tilegen})
        runs.update({f"KT {s}": kernel_tuner_runs(s, path, measured, args) for s in args.kernel_tuner})
        result = {"source": str(path), "repeats": args.repeats, "strategies": {
            label: {str(b): score_runs([r[b] for r in by_repeat], baseline, b) for b in args.budgets}
            for label, by_repeat in runs.items() if by_repeat}}
        print(markdown_table(STUDY_HEADERS, study_rows(result)))
        print_where_lost(runs, baseline, args.budgets)
        if args.traces:
            print_traces(runs, measured, args.budgets)
        everything[name] = result
        if args.plot:
            plot_space(name, runs, measured, max(args.budgets), args.plot)
    print_summary(everything, args.tilegen[0], args.budgets)
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))


def tilegen_runs(strategy: str, measured: MeasuredSpace, args: argparse.Namespace, prior: Prior | None = None
                 ) -> list[Run]:
    """One run per seed up to the largest budget (or until within 1% of the optimum, --to-optimum):
    tilegen's strategies do not plan by the budget, so each budget's figures are the run's prefix.
    Prints the time an evaluation took (a strategy's proposal cost, the replay's own included)."""
    started = time.perf_counter()
    budget = args.to_optimum or max(args.budgets)
    runs = [replay_measured(strategy, measured, budget, seed, prior, until_optimum=bool(args.to_optimum))
            for seed in range(args.repeats)]
    seconds = time.perf_counter() - started
    print(f"tilegen {strategy}{', prior' if prior else ''}: {args.repeats} runs in {seconds:.0f} s "
          f"({1000 * seconds / sum(len(run.times) for run in runs):.1f} ms an evaluation, its proposal and the replay's)")
    return runs


def kernel_tuner_runs(strategy: str, path: Path, measured: MeasuredSpace, args: argparse.Namespace
                      ) -> list[dict[int, Run]]:
    """Kernel Tuner's own simulation mode at its strategy's defaults, one run per budget and seed
    (its strategies may plan by max_fevals), its evaluations put on tilegen's clock. A run is
    deterministic per seed, so what it evaluated is kept in KT_CACHE next to the spaces and read back
    instead of run again."""
    cache_path = args.data / KT_CACHE
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    variant_type = type(measured.space.variants[0])
    names = [p.name for p in variant_type.parameters()]
    started, runs, ran = time.perf_counter(), [], 0
    until = measured.optimum_ms * (1 + WITHIN) if args.to_optimum else None
    for seed in range(args.kt_repeats or args.repeats):
        by_budget = {}
        for budget in [args.to_optimum] if args.to_optimum else args.budgets:
            key = f"{strategy}/{path.stem}/{seed}/{budget}" + ("/to-optimum" if until else "")
            if key not in cache:
                evaluated = kernel_tuner_run(strategy, path, seed, budget, names, until)
                if evaluated is None:
                    return []
                cache[key], ran = evaluated, ran + 1
                partial = cache_path.with_suffix(".partial")  # replaced whole, so a stop loses no earlier run
                partial.write_text(json.dumps(cache))
                partial.replace(cache_path)
            seen = [variant_type(**dict(zip(names, values))).name for values in cache[key]]
            by_budget[budget] = Run([measured.time_ms[n] for n in seen],
                                    list(np.cumsum([measured.cost_s[n] for n in seen])))
        runs.append(by_budget)
    print(f"KT {strategy}: {len(runs)} runs per budget ({ran} run now, the rest from {cache_path.name}) "
          f"in {time.perf_counter() - started:.0f} s")
    return runs


def kernel_tuner_run(strategy: str, path: Path, seed: int, budget: int, names: list[str], until: float | None = None
                     ) -> list[list] | None:
    """The distinct configurations one Kernel Tuner run evaluated, in its order, cut at the budget
    (None without Kernel Tuner); `until`: the run stopped, as its budget stops it, once it has
    evaluated a configuration of that time (ms) or less."""
    try:
        from kernel_tuner.interface import tune_cache
        from kernel_tuner.runners.simulation import SimulationRunner
        from kernel_tuner.util import StopCriterionReached
    except ImportError:
        return None
    random.seed(seed)
    np.random.seed(seed)
    run, evaluated = SimulationRunner.run, []
    if until is not None:
        def run_until(self, parameter_space, tuning_options):
            results = run(self, parameter_space, tuning_options)
            evaluated.extend(r for r in results if r is not None)
            if any(isinstance(r, dict) and isinstance(r.get("time"), (int, float)) and r["time"] <= until for r in results):
                tuning_options.budget.max_fevals = tuning_options.budget.num_fevals  # spent: it stops here
            return results
        SimulationRunner.run = run_until
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            results, _ = tune_cache(str(path), strategy=strategy, strategy_options={"max_fevals": budget}, quiet=True)
    except StopCriterionReached:  # a strategy that does not expect its budget spent at its first evaluation
        results = evaluated
    finally:
        SimulationRunner.run = run
    seen = dict.fromkeys(tuple(r[n] for n in names) for r in results)
    return [list(values) for values in seen][:budget]


def print_time_to_optimum(args: argparse.Namespace) -> None:
    """--to-optimum: each strategy run until within 1% of the optimum or the cap, per space and then per
    kernel (its spaces' runs pooled): how many got there, and in how many simulated seconds and
    evaluations (gen.search.replay.time_to_optimum)."""
    by_kernel: dict[str, dict[str, list[tuple[Run, float]]]] = {}
    for name in args.spaces:
        path = args.data / f"{name}.json"
        measured = read_measured(path)
        print(f"\n## {name}: {len(measured):,} configurations, optimum {measured.optimum_ms:.4g} ms, "
              f"until within 1% or {args.to_optimum} evaluations")
        runs = {f"tilegen {s}": tilegen_runs(s, measured, args) for s in args.tilegen}
        runs.update({f"KT {s}": [r[args.to_optimum] for r in kernel_tuner_runs(s, path, measured, args)]
                     for s in args.kernel_tuner})
        print(markdown_table(TO_OPTIMUM_HEADERS, [[label, *to_optimum_row(time_to_optimum(chosen, measured.optimum_ms))]
                                                  for label, chosen in runs.items() if chosen]))
        for label, chosen in runs.items():
            by_kernel.setdefault(name.split("_")[0], {}).setdefault(label, []).extend(
                (run, measured.optimum_ms) for run in chosen)
    for kernel, runs in by_kernel.items():
        print(f"\n## {kernel}: the runs of its spaces pooled")
        print(markdown_table(TO_OPTIMUM_HEADERS, [[label, *to_optimum_row(pooled_time_to_optimum(chosen))]
                                                  for label, chosen in runs.items() if chosen]))


TO_OPTIMUM_HEADERS = ["strategy", "runs within 1% (by 100 evaluations)", "seconds to 1%: median, mean of those",
                      "evaluations to 1%: median, mean of those"]


def pooled_time_to_optimum(runs: list[tuple[Run, float]]) -> dict:
    """time_to_optimum over runs of several spaces, each run with its space's optimum."""
    return time_to_optimum([run for run, _ in runs], [optimum for _, optimum in runs])


def to_optimum_row(figures: dict) -> list[str]:
    def number(value: float | None) -> str:
        return "never" if value is None else f"{value:.0f}"

    return [f"{figures['reached']}/{figures['of']} ({figures['reached_by']})",
            f"{number(figures['median_s'])}, {number(figures['mean_s'])}",
            f"{number(figures['median_evaluations'])}, {number(figures['mean_evaluations'])}"]


def print_where_lost(runs: dict, baseline: Baseline, budgets: list[int]) -> None:
    """Where each strategy gains or loses its score: the score of the mean best-found curve over each
    quarter of the time random search takes for the budget (early: the first samples; late:
    stagnation), the evaluations that fit in that time, those that failed, and the simulated seconds
    each cost on average (a search that keeps to fast configurations also evaluates cheaper ones)."""
    body = []
    for label, by_repeat in runs.items():
        for budget in budgets:
            chosen = [repeat[budget] for repeat in by_repeat]
            if not chosen:
                continue
            found = np.mean([baseline.found(run, budget) for run in chosen], axis=0)
            quarters = baseline.score_over_time(found, budget).reshape(4, -1).mean(axis=1)
            horizon = baseline.horizon(budget)[-1]
            body.append([label, budget, " ".join(f"{q:.2f}" for q in quarters),
                         f"{np.mean([np.searchsorted(run.clock_s, horizon, side='right') for run in chosen]):.1f}",
                         f"{np.mean([sum(t is None for t in run.times[:budget]) for run in chosen]):.1f}",
                         f"{np.mean([run.clock_s[:budget][-1] / len(run.clock_s[:budget]) for run in chosen]):.2f}"])
    print(markdown_table(["strategy", "budget", "score by quarter of the time", "evaluations in the time",
                          "failed", "seconds each"], body))


TRACE_STRETCHES = ((1, 1), (2, 8), (9, 20), (21, 50), (51, 100))  # evaluations, counted from 1


def print_traces(runs: dict, measured: MeasuredSpace, budgets: list[int]) -> None:
    """How each strategy moves through the space, read from its runs at the largest budget: where its
    evaluations rank among the space's configurations (the share faster than each, a failure 1; the mean
    over the runs, per stretch of evaluations: a uniform draw is 0.5), and its runs' best found as a
    multiple of the optimum at each budget, the median and the upper quartile (a tail of runs stuck in
    a slow basin shows in the quartile)."""
    ordered = np.sort([t for t in measured.time_ms.values() if t is not None])
    body = []
    for label, by_repeat in runs.items():
        chosen = [repeat[max(budgets)] for repeat in by_repeat]
        if not chosen:
            continue
        ranks = [[1.0 if t is None else np.searchsorted(ordered, t) / len(ordered) for t in run.times] for run in chosen]
        stretches = [[r for run in ranks for r in run[first - 1:last]] for first, last in TRACE_STRETCHES]
        spreads = []
        for budget in budgets:
            found = [min((t for t in run.times[:budget] if t is not None), default=np.inf) / ordered[0] for run in chosen]
            spreads.append(f"{np.median(found):.2f} / {np.percentile(found, 75):.2f}")
        body.append([label, *(f"{np.mean(shares):.2f}" if shares else "-" for shares in stretches), *spreads])
    print(markdown_table(["strategy", *(f"rank of evaluations {a}-{b}" if a < b else f"rank of evaluation {a}"
                                        for a, b in TRACE_STRETCHES),
                          *(f"best / optimum at {b}: median / upper quartile" for b in budgets)], body))


def print_summary(everything: dict, default: str, budgets: list[int]) -> None:
    """Per space, the default's score (mean over the budgets' means), without a prior and with one
    where it ran with one, against Kernel Tuner's best strategy's (which has none)."""
    body, wins = [], {"": 0, ", prior": 0}
    for name, result in everything.items():
        scores = {label: statistics.mean(figures[str(b)]["score"]["mean"] for b in budgets)
                  for label, figures in result["strategies"].items()}
        ours = {fed: scores.get(f"tilegen {default}{fed}") for fed in wins}
        theirs = {k: v for k, v in scores.items() if k.startswith("KT ")}
        best = max(theirs, key=theirs.get) if theirs else None
        for fed, score in ours.items():
            wins[fed] += score is not None and (best is None or score > theirs[best])
        body.append([name, *(f"{score:.3f}" if score is not None else "-" for score in ours.values()), best or "-",
                     f"{theirs[best]:.3f}" if best else "-"])
    print(f"\n## tilegen {default} against Kernel Tuner's best strategy per space (mean score over budgets "
          f"{', '.join(map(str, budgets))})")
    print(markdown_table(["space", f"tilegen {default}", f"tilegen {default}, prior", "KT's best", "its score"], body))
    for fed, count in wins.items():
        print(f"tilegen {default}{fed} scores higher on {count} of {len(everything)} spaces")


def plot_space(name: str, runs: dict, measured: MeasuredSpace, budget: int, folder: Path) -> None:
    """The mean best-so-far (as a fraction of the optimum) over simulated seconds, per strategy."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    horizon = budget * float(np.mean(list(measured.cost_s.values())))
    grid = np.linspace(0, horizon, 200)
    for label, by_repeat in runs.items():
        if not by_repeat:
            continue
        curves = []
        for repeat in by_repeat:
            run = repeat[budget]
            best, curve, known = 0.0, [], 0
            for seconds in grid:
                while known < len(run.clock_s) and run.clock_s[known] <= seconds:
                    if run.times[known] is not None:
                        best = max(best, measured.optimum_ms / run.times[known])
                    known += 1
                curve.append(best)
            curves.append(curve)
        axes.plot(grid, np.mean(curves, axis=0), label=label, lw=2.2 if label.startswith("tilegen") else 1.0)
    axes.set(xlabel="simulated seconds (compile + framework + runs)", ylabel="mean fraction of the optimum",
             title=f"{name}: {budget} evaluations", ylim=(0, 1.02))
    axes.legend(fontsize=6, ncol=2)
    figure.tight_layout()
    figure.savefig(folder / f"{name}.png", dpi=110)
    plt.close(figure)


if __name__ == "__main__":
    main()
