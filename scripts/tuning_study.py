#!/usr/bin/env python3
"""How fast each search strategy finds the best variant, from an exhaustive (brute-force) tuning
run stored in a tuning database: every strategy is replayed over the recorded measurements (no
GPU) from several seeds; for each, the best found after 25, 50 and 100 evaluations as a fraction
of the exhaustive best, and the tuning time those evaluations cost in the recorded run.

Usage: scripts/tuning_study.py --db FILE --family sgemm --size 2048x2048x2048 [--seeds 10] [--plot OUT.png]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from gen.families import get_family
from gen.store.plots import plot
from gen.families.space import Space
from gen.search.strategies import STRATEGIES, STRATEGY_TYPES, SearchSpace
from gen.core.table import markdown_table
from gen.search.replay import replay
from gen.store.plots import best_so_far
from gen.store.tuning_db import TuningDB

CHECKPOINTS = (25, 50, 100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--family", default="sgemm")
    parser.add_argument("--size", default="2048x2048x2048")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    db = TuningDB(args.db)
    (problem,) = [p for p in db.problems(args.family) if p.shape == args.size]
    rows = {row.name: row for row in db.measured(problem).values()}
    recorded = {name: row.median_ms if row.status == "ok" else None for name, row in rows.items()}
    family = get_family(args.family)
    valid = [v for v in Space.default(family).expand().valid if v.name in recorded]
    space = SearchSpace(valid)
    best = min(t for t in recorded.values() if t is not None)
    print(f"{problem.gpu_model}, {family.name} {problem.shape}: {len(valid)} valid variants measured, "
          f"{sum(t is None for t in recorded.values())} failed; exhaustive best {best:.4f} ms "
          f"({min(recorded, key=lambda n: recorded[n] or float('inf'))})")
    body, traces = [], {}
    for strategy in STRATEGIES:
        fractions = {c: [] for c in CHECKPOINTS}
        costs, overheads = [], []
        for seed in range(args.seeds if STRATEGY_TYPES[strategy].uses_seed else 1):
            started = time.perf_counter()
            asked = replay(strategy, recorded, space, max(CHECKPOINTS), seed)
            overheads.append(time.perf_counter() - started)
            trace = [median for _, median in asked]
            curve = best_so_far(trace)
            for checkpoint in CHECKPOINTS:
                found = curve[min(checkpoint, len(curve)) - 1]
                fractions[checkpoint].append(best / found if found else 0.0)
            costs.append(sum((rows[n].compile_seconds or 0) + (rows[n].measure_seconds or 0) for n, _ in asked))
            traces.setdefault(strategy, []).append(trace)
        body.append([strategy] + [f"{statistics.mean(fractions[c]):.1%} (worst {min(fractions[c]):.1%})"
                                  for c in CHECKPOINTS]
                    + [f"{statistics.mean(costs):.0f} s", f"{statistics.mean(overheads):.1f} s"])
    headers = ["strategy"] + [f"after {c}" for c in CHECKPOINTS] + ["GPU + compile time of 100 evaluations",
                                                                     "strategy's own time"]
    print(markdown_table(headers, body))
    brute_cost = sum((r.compile_seconds or 0) + (r.measure_seconds or 0) for r in rows.values())
    print(f"\nexhaustive search: {len(rows)} evaluations, {brute_cost:.0f} s of compile + GPU time recorded")
    if args.plot:
        for written in plot(list(rows.values()), {(family.name, problem.shape, problem.gpu_model.name): traces},
                            args.plot):
            print(f"plot written to {written}")


if __name__ == "__main__":
    main()
