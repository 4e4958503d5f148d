#!/usr/bin/env python3
"""Sweep throughput: a family's default space at one size, rows per second and where the time went.

Two aims stand on it:
- issue 3: the default matmul space at 2048^3 with a cold compile cache in under 2 minutes on one
  H100/H200 with its 16 cores (the defaults);
- issue 22: `--family sgemm --size 512x512x512 --timing-budget 0.05 --cache DIR`, the 3168 sgemm
  variants with a warm compile cache, at 400 ok rows/s or more on one GPU.

With --cache, the space is compiled into that folder first and one variant is swept (not timed),
so the sweep finds every cubin there and the GPU's ceilings measured. --simulated MS runs the sweep against a simulated GPU that answers every job in MS
milliseconds (tests.fakes:timed_worker): the coordinator alone, on a machine without a GPU.
--profile FILE writes a cProfile of the coordinator's threads. --profile-jobs N then runs N of the
jobs again in this process, on a worker's Runner, under cProfile: where a job's host time goes.
Prints its figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.fakes, for a simulated GPU

from bench_scale import ThreadProfiler  # noqa: E402  (scripts/ is on the path of a script run from it)

from gen.compiling.pool import compile_variants  # noqa: E402
from gen.core.results import Status  # noqa: E402
from gen.core.timing import TimingOptions
from gen.core.table import text_table  # noqa: E402
from gen.evaluate.options import RunOptions  # noqa: E402
from gen.families import get_family  # noqa: E402
from gen.families.family import point_refusal  # noqa: E402
from gen.families.space import Space  # noqa: E402
from gen.gpu.process.jobs import job_for  # noqa: E402
from gen.gpu.local import LocalExecutor  # noqa: E402
from gen.commands.sweep import SweepOptions, SweepReport, sweep  # noqa: E402
from tests.fakes import SERVICE_S  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="matmul")
    parser.add_argument("--size", default="2048x2048x2048")
    parser.add_argument("--timing-budget", type=float, default=TimingOptions().budget_s, help="seconds per variant")
    parser.add_argument("--filter", help="only the variants whose names match (as tilegen's --filter)")
    parser.add_argument("--cache", type=Path, help="a compile cache, warmed first (default: a cold one)")
    parser.add_argument("--compiler", choices=["nvrtc", "nvcc"])
    parser.add_argument("--gpus", default="0", help="GPU indices, e.g. 0,1 (default: 0)")
    parser.add_argument("--simulated", type=float, metavar="MS", help="a simulated GPU, MS ms per job")
    parser.add_argument("--profile", type=Path, metavar="FILE", help="cProfile of the coordinator's threads")
    parser.add_argument("--profile-jobs", type=int, default=0, metavar="N", help="N jobs again, profiled")
    args = parser.parse_args()
    run = RunOptions(timing=TimingOptions(budget_s=args.timing_budget), compiler=args.compiler, seed=1,
                     gpus=[int(g) for g in args.gpus.split(",")])
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["TILEGEN_CACHE"] = str(args.cache or Path(scratch) / "cache")
        if args.simulated is not None:
            os.environ[SERVICE_S] = str(args.simulated / 1e3)
        if args.cache:
            warm(args, run, Path(scratch) / "warm")
        profiler = ThreadProfiler() if args.profile else None
        started = time.perf_counter()
        with profiler.running() if profiler else open(os.devnull):
            report = sweep(SweepOptions(args.family, Path(scratch) / "run", sizes=[args.size], progress=False,
                                        filter=args.filter, run=run), executor(args, run))
        wall = time.perf_counter() - started
        print_report(report, args, wall)
        if profiler:
            profiler.write(args.profile)
        if args.profile_jobs:
            profile_jobs(args.family, args.size, args.filter, run, args.profile_jobs)


def executor(args: argparse.Namespace, run: RunOptions) -> LocalExecutor | None:
    """The simulated GPU, if asked for; None: the sweep's own (the real GPUs)."""
    if args.simulated is None:
        return None
    return LocalExecutor(run.gpus, run.silence_s, target="tests.fakes:timed_worker")


def warm(args: argparse.Namespace, run: RunOptions, out: Path) -> None:
    """Everything a user who ran tilegen here before finds ready: the space compiled into the cache,
    and the GPU's ceilings (and PyCUDA's build of the checker) from a sweep of one variant."""
    started = time.perf_counter()
    valid = Space.default(get_family(args.family)).expand(args.filter).valid
    compiled = compile_variants(valid, run.compile_options())
    one = time.perf_counter()
    sweep(SweepOptions(args.family, out, sizes=[args.size], progress=False, filter=valid[0].name, run=run),
          executor(args, run))
    print(f"warm: {sum(c.cached for c in compiled)} of {len(compiled)} variants were in the compile cache; a sweep "
          f"of one variant (what any sweep pays once: planning, the worker's start, the problem's data) took "
          f"{time.perf_counter() - one:.2f} s; {time.perf_counter() - started:.1f} s in all", flush=True)


def print_report(report: SweepReport, args: argparse.Namespace, wall: float) -> None:
    stats = report.stats
    statuses = sorted({str(r.status) for r in report.rows})
    ok = [r for r in report.rows if r.status == Status.OK]
    gpu = f"simulated, {args.simulated} ms a job" if args.simulated is not None else "real"
    print(f"{len(report.rows)} rows of the default {args.family} space at {args.size}, {os.cpu_count()} cores, "
          f"GPU {gpu}, statuses {statuses}, kernels ran: {report.ran_kernels}")
    print(text_table(["stage", "seconds", "of the wall time"],
                     [["compiler (summed over its runs)", round(stats.compile_seconds, 2),
                       f"{stats.compile_seconds / wall:.0%}"],
                      ["GPU worker: check", round(stats.check_seconds, 2), f"{stats.check_seconds / wall:.0%}"],
                      ["GPU worker: time", round(stats.time_seconds, 2), f"{stats.time_seconds / wall:.0%}"],
                      ["wall", round(wall, 2), "100%"]]))
    print(f"ok rows/s: {len(ok) / wall:.1f} ({len(ok)} ok rows in {wall:.2f} s)")
    if ok:
        print_timing_costs(ok, args.timing_budget)
    if ok and args.simulated is None:
        best = max(ok, key=lambda r: r.throughput)
        print(f"fastest: {best.name} {best.median_ms:.3f} ms, {best.throughput:.2f} {best.unit}")


def print_timing_costs(ok: list, budget_s: float) -> None:
    """Where the GPU time of the rows went: samples per row, the rows that ran out of budget, and
    the kernels' own time (median x samples) against the time the worker spent on them."""
    samples = sorted(r.samples for r in ok)
    kernel_s = sum(r.median_ms * r.samples for r in ok) / 1e3
    measure_s = sum(r.measure_seconds or 0.0 for r in ok)
    budget_bound = sum((r.measure_seconds or 0.0) >= budget_s for r in ok)
    quartiles = [samples[int(q * (len(samples) - 1))] for q in (0, 0.25, 0.5, 0.75, 1)]
    print(f"samples per row (min, quartiles, max): {quartiles}; rows that used their whole budget: {budget_bound}; "
          f"kernel time (median x samples) {kernel_s:.2f} s of {measure_s:.2f} s the worker spent")
    slowest = sorted(ok, key=lambda r: -(r.measure_seconds or 0.0))[:5]
    for r in slowest:
        print(f"  {r.name}: {r.samples} samples, median {r.median_ms:.4f} ms, {r.measure_seconds * 1e3:.1f} ms")


def profile_jobs(family_name: str, size: str, pattern: str | None, run: RunOptions, count: int) -> None:
    """`count` jobs of the space on a Runner in this process, under cProfile: the worker's host time."""
    import pycuda.autoprimaryctx  # noqa: F401  (the Runner's context)

    from gen.gpu.process.runner import Runner

    family = get_family(family_name)
    shape = family.parse_shape(size)
    variants = [v for v in Space.default(family).matching(pattern) if point_refusal(family, v, shape) is None][:count]
    compiled = compile_variants(variants, run.compile_options())
    jobs = [job_for(c, shape, "none", 1, run.timing) for c in compiled if c.cubin]
    runner = Runner()
    runner.run(jobs[0])  # the problem's data and the checker's kernels: once per worker
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    for job in jobs[1:]:
        runner.run(job)
    profile.disable()
    seconds = time.perf_counter() - started
    print(f"{len(jobs) - 1} jobs on a Runner in this process: {seconds / (len(jobs) - 1) * 1e3:.2f} ms a job")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
