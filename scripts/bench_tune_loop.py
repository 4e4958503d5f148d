#!/usr/bin/env python3
"""Where a tune's time goes without a GPU: the real tune (its loop, engine, compile pool, Search and
Rounds) on the 180-point sgemm space at 2048^3, with the compiler and the GPU simulated by sleeps and
the GPU's answers taken from the H200's exhaustive run (docs/results/data/h200/sgemm-2048-exhaustive.jsonl):
each variant's median and its measure seconds, a compile of COMPILE_S seconds a variant on 16
threads (NVRTC on the H200: 5.9 s for the 180 cold, about 0.5 core-seconds each), the GPU worker
ready after START_S, an energy job ENERGY_S longer. Prints, per strategy and seed: the wall time, when
the first evaluation was told, when the search ended, the search's seconds per evaluation, when its
best came within 1% of the space's best (and after how many evaluations), and the GPU's busy seconds. Then (--windows) the evaluations
the strategy needs to within 1% when the tune keeps that many proposals in flight (the replay, 30 seeds).

Usage: scripts/bench_tune_loop.py [--strategies brute portfolio] [--seeds 3] [--windows 1 4 8 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout
RECORDED = REPO / "docs" / "results" / "data" / "h200" / "sgemm-2048-exhaustive.jsonl"
SPACE = {"bm": [64, 128], "bn": [64, 128], "bk": [8, 16], "wm": [32, 64], "wn": [32, 64], "tm": [4, 8],
         "tn": [4, 8], "padding": [0, 4], "vec": [4], "stages": [2], "load": ["registers"], "bounds": ["none"],
         "sync": ["both"]}  # scripts/bench_vs_kernel_tuner.py's
COMPILE_S, COMPILE_RUN_S, START_S, ENERGY_S, THREADS = 0.5, 0.006, 2.0, 0.5, 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", nargs="*", default=["brute", "portfolio"])
    parser.add_argument("--budget", type=int, default=60, help="evaluations of a strategy other than brute force")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--windows", nargs="*", type=int, default=[1, 4, 8, 20])
    args = parser.parse_args()
    os.environ["TILEGEN_CACHE"] = tempfile.mkdtemp(prefix="tilegen-sim-")
    recorded = {row.name: row for row in _rows()}
    optimum = min(row.median_ms for row in recorded.values() if row.median_ms is not None)
    print("| strategy | seed | wall s | first told s | search ends s | search s per evaluation | within 1% at s (evaluations) | GPU busy s |")
    print("|---|---|---|---|---|---|---|---|")
    for strategy in args.strategies:
        for seed in range(args.seeds):
            print(_simulated_tune(strategy, None if strategy == "brute" else args.budget, seed, recorded, optimum),
                  flush=True)
    for strategy in (s for s in args.strategies if s != "brute"):
        for window in args.windows:
            print(_window(strategy, args.budget, window, recorded, optimum), flush=True)


def _rows():
    from gen.store.results_log import read_rows

    return read_rows(RECORDED)


def _simulated_tune(strategy: str, budget: int | None, seed: int, recorded: dict, optimum: float) -> str:
    from gen.commands.tune import TuneOptions, tune
    from gen.core.timing import TUNE_TIMING
    from gen.evaluate.options import RunOptions

    _simulate_compiles()
    executor = SimulatedGpu(recorded)
    started = time.perf_counter()
    (result,) = tune(TuneOptions("sgemm", "2048x2048x2048", params={k: [str(v) for v in vs] for k, vs in SPACE.items()},
                                 strategy=strategy, budget=budget, seed=seed, progress=False,
                                 db=Path(tempfile.mkdtemp(prefix="tilegen-sim-db-")) / "t.sqlite",
                                 run=RunOptions(arch="sm_90", timing=TUNE_TIMING, compiler="nvcc", compile_jobs=THREADS)),
                     executor)
    wall, told = time.perf_counter() - started, result.trace_seconds
    within = next((i for i, t in enumerate(result.trace) if t is not None and t <= 1.01 * optimum), None)
    per_evaluation = (told[-1] - told[0]) / max(len(told) - 1, 1)
    return (f"| {strategy} | {seed} | {wall:.2f} | {told[0]:.2f} | {told[-1]:.2f} | {per_evaluation:.3f} | "
            f"{'never' if within is None else f'{told[within]:.2f} ({within + 1})'} | {executor.busy_s:.2f} |")


def _simulate_compiles() -> None:
    """Every compile a sleep of COMPILE_RUN_S a compiler run plus COMPILE_S a variant, THREADS threads: nvcc patched to
    batch as NVRTC does (4 runs a thread)."""
    from gen.compiling import options, pool
    from gen.compiling.compiler import Compiled
    from gen.compiling.nvcc import Nvcc

    def compile_batch(variants, compile_options, children):
        time.sleep(COMPILE_RUN_S + COMPILE_S * len(variants))
        return [Compiled(v, Path(os.devnull), None, COMPILE_S, "", False, "simulated", compile_options.level)
                for v in variants]

    pool.compile_batch, options.usable_cores, Nvcc.runs_per_thread = compile_batch, lambda: THREADS, 4


class SimulatedGpu:
    """An executor of one simulated H200: each job takes its variant's recorded measure seconds and
    answers its recorded median."""

    def __init__(self, recorded: dict):
        from gen.core.results import DeviceInfo

        self.recorded, self.busy_s, self.killed, self.started = recorded, 0.0, False, False
        self.device = DeviceInfo(name="NVIDIA H200", cc="9.0", sm_count=132, memory_bytes=140 * 2**30,
                                 l2_bytes=50 * 2**20, driver="13.0", index=0)

    def start(self) -> None:
        pass

    def devices(self) -> list:
        if not self.started:
            time.sleep(START_S)
            self.started = True
        return [self.device]

    def capacity(self) -> int:
        return 2

    def run(self, jobs):
        from gen.core.results import Measurement, Status
        from gen.core.timing import Timing

        for job in jobs:
            row, energy = self.recorded[job.name], bool(job.timing and job.timing.energy)
            seconds = row.measure_seconds + (ENERGY_S if energy else 0.0)
            time.sleep(seconds)
            self.busy_s += seconds
            if self.killed:
                return
            timing = Timing(median_ms=row.median_ms, min_ms=row.median_ms, max_ms=row.median_ms, stdev_ms=0.0,
                            samples=20)
            yield job, Measurement(Status.OK, error=1e-7, tolerance=1e-5, checks=1, timing=timing, l2_flushed=True,
                                   device=self.device, time_seconds=seconds, energy_j=1.0 if energy else None)

    def close(self) -> None:
        pass

    def kill(self) -> None:
        self.killed = True

    def by_model(self) -> dict:
        return {self.device.model: self}


def _window(strategy: str, budget: int, window: int, recorded: dict, optimum: float) -> str:
    """Evaluations to within 1% over 30 seeds, replayed with `window` proposals in flight."""
    from gen.families import get_family
    from gen.families.space import Space
    from gen.search.replay import replay
    from gen.search.strategies import SearchSpace

    times = {name: row.median_ms for name, row in recorded.items()}
    space = SearchSpace(Space.default(get_family("sgemm"), {k: [str(v) for v in vs] for k, vs in SPACE.items()})
                        .expand().valid)
    reached = []
    for seed in range(30):
        seen = replay(strategy, times, space, budget, seed, in_flight=window)
        reached += [next((i + 1 for i, (_, t) in enumerate(seen) if t is not None and t <= 1.01 * optimum), None)]
    got = [r for r in reached if r is not None]
    if not got:
        return f"{strategy}, {window} in flight: within 1% in 0 of 30 seeds"
    return (f"{strategy}, {window} in flight: within 1% in {len(got)} of 30 seeds; evaluations to 1%: median "
            f"{statistics.median(got):g}, mean {statistics.mean(got):.1f}, most {max(got)}")


if __name__ == "__main__":
    main()
