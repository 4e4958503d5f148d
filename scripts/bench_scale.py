#!/usr/bin/env python3
"""How many GPUs one coordinator can feed: the real coordinator (a PointList proposer, the
evaluation loop, the Engine, and an executor) against N simulated GPU workers on this machine.

Each simulated GPU is a worker process running `tests.fakes:timed_worker`: it reports the phases a
real worker reports for a job, sleeps the service time, and answers ok. The variants are compiled
once, into the compile cache, before anything is timed; the workers are started before the clock
starts, so a run measures only the jobs: rows/s, and efficiency, rows/s over N x one worker's rows/s
(the N = 1 run of the same executor and service time). `of ideal` is rows/s over N / service time;
`coord CPU` is the coordinator process's CPU time (every thread; the local Dask scheduler runs in it)
per row. On a machine with few cores, the N worker processes share them with the coordinator: read
the efficiency there as bounded by the CPU. Prints a table (and writes it as Markdown); asserts nothing.

Usage: scripts/bench_scale.py [--executors local,dask] [--service-ms 1,10] [--workers 1,2,4,8,16,32,64]
                              [--seconds 2] [--max-jobs 4000] [--jobs J] [--markdown FILE] [--profile FILE]

--seconds is the ideal work per run (jobs = N x seconds / service time, within 100 and --max-jobs),
--jobs a fixed count instead. --profile writes a cProfile of the coordinator's threads over the runs
(restrict them to the case to profile) and prints its top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import os
import pstats
import resource
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.fakes, for the workers too

from gen.compiling.compiler import CompileOptions  # noqa: E402
from gen.compiling.pool import CompilePool, compile_variants  # noqa: E402
from gen.core.results import Status  # noqa: E402
from gen.core.timing import TimingOptions
from gen.core.table import markdown_table, text_table  # noqa: E402
from gen.evaluate.engine import Checking, Engine  # noqa: E402
from gen.evaluate.loop import ListSink, evaluate  # noqa: E402
from gen.evaluate.plan import Point  # noqa: E402
from gen.families import get_family  # noqa: E402
from gen.search.proposers import PointList  # noqa: E402
from tests.fakes import SERVICE_S  # noqa: E402

TARGET = "tests.fakes:timed_worker"
FAMILY = "matmul"
TILES = ("8", "16")  # the variants compiled: jobs cycle through them at many shapes
HEADERS = ["executor", "service ms", "N", "jobs", "start s", "seconds", "rows/s", "efficiency", "of ideal",
           "coord CPU ms/row", "machine busy"]


@dataclass
class Measured:
    executor: str
    service_ms: float
    workers: int
    jobs: int
    start_s: float  # starting the N workers (not in `seconds`)
    seconds: float
    ok: int
    cpu_s: float  # the coordinator process's CPU time during the run
    busy: float  # the share of the machine's cores busy during the run (workers, coordinator, anything else)
    failure: str = ""  # why the run stopped, if it did

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executors", default="local,dask", help="local and/or dask (a local Dask cluster)")
    parser.add_argument("--service-ms", default="1,10", help="each simulated GPU's time per job, in ms")
    parser.add_argument("--workers", default="1,2,4,8,16,32,64", help="the numbers N of simulated GPUs")
    parser.add_argument("--seconds", type=float, default=2.0, help="ideal seconds of work per run (default 2)")
    parser.add_argument("--max-jobs", type=int, default=4000)
    parser.add_argument("--jobs", type=int, help="jobs per run, instead of --seconds")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--profile", type=Path, help="cProfile the coordinator's threads into this file")
    args = parser.parse_args()
    options = CompileOptions(arch="sm_90")
    compile_variants(variants(), options)  # into the cache: the runs take them from there
    cores = len(os.sched_getaffinity(0))
    print(f"{cores} cores available ({os.cpu_count()} on the machine); simulated GPUs: {TARGET}", flush=True)
    profiler = ThreadProfiler() if args.profile else None
    results: list[Measured] = []
    for kind in args.executors.split(","):
        for service_ms in map(float, args.service_ms.split(",")):
            for workers in map(int, args.workers.split(",")):
                jobs = args.jobs or job_count(workers, service_ms / 1000, args.seconds, args.max_jobs)
                try:
                    results.append(measure(kind, service_ms, workers, jobs, options, profiler))
                except Exception as error:  # the run stopped (a Dask cluster that lost its workers, say)
                    reason = str(error).split(" (lost: ")[0][:100]
                    results.append(Measured(kind, service_ms, workers, jobs, 0.0, 0.0, 0, 0.0, 0.0,
                                            f"{type(error).__name__}: {reason}"))
                print(text_table(HEADERS, [cells(results[-1], results)]).splitlines()[-1], flush=True)
    text = report(results, cores)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if profiler is not None:
        profiler.write(args.profile)


def variants() -> list[Any]:
    family = get_family(FAMILY)
    return [family.variant({"tile": tile}) for tile in TILES]


def points(count: int) -> list[Point]:
    """`count` distinct points: the variants at shapes that are multiples of every tile."""
    family = get_family(FAMILY)
    sides = [32 * i for i in range(1, 33)]
    shapes = (family.parse_shape(f"{m}x{n}x{k}") for m, n, k in itertools.product(sides, repeat=3))
    pairs = ((variant, shape) for shape in shapes for variant in variants())
    return [Point(variant, shape, "none") for variant, shape in itertools.islice(pairs, count)]


def job_count(workers: int, service_s: float, seconds: float, most: int) -> int:
    return max(100, min(most, round(workers * seconds / service_s)))


def measure(kind: str, service_ms: float, workers: int, jobs: int, options: CompileOptions,
            profiler: "ThreadProfiler | None") -> Measured:
    """One run: N simulated GPUs started (timed apart), then `jobs` points through the real loop."""
    os.environ[SERVICE_S] = str(service_ms / 1000)  # the worker processes inherit it
    wanted = points(jobs)
    started = time.perf_counter()
    with (profiler.running() if profiler else nothing()):
        executor = make_executor(kind, workers)
        try:
            executor.devices()
            start_s = time.perf_counter() - started
            cpu, machine, began = cpu_seconds(), machine_ticks(), time.perf_counter()
            with Engine(CompilePool(options), executor, Checking(seed=1, timing=TimingOptions())) as engine:
                outcome = evaluate(PointList(wanted), engine, ListSink())
            seconds, cpu = time.perf_counter() - began, cpu_seconds() - cpu
            busy = busy_share(machine, machine_ticks())
        finally:
            executor.close()
    ok = sum(row.status == Status.OK for row in outcome.rows)
    if ok != jobs:
        print(f"warning: {jobs - ok} of {jobs} rows not ok: {outcome.rows[0].status} {outcome.rows[0].message}")
    return Measured(kind, service_ms, workers, jobs, start_s, seconds, ok, cpu, busy)


def make_executor(kind: str, workers: int) -> Any:
    gpus = list(range(workers))  # fake GPU indices: timed_worker takes any
    if kind == "local":
        from gen.gpu.local import LocalExecutor

        return LocalExecutor(gpus, target=TARGET)
    if kind == "dask":
        # The simulated GPUs' indices go past the real ones: Dask's GPU monitor (NVML) would fail
        # to find the worker's CUDA_VISIBLE_DEVICES and its nanny would not start.
        os.environ["DASK_DISTRIBUTED__DIAGNOSTICS__NVML"] = "False"
        from gen.gpu.dask import DaskExecutor

        return DaskExecutor("local", gpus, target=TARGET)
    raise SystemExit(f"bench_scale.py: unknown executor {kind!r}: local or dask")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def efficiency(result: Measured, results: list[Measured]) -> float | None:
    """Rows/s over N x the rows/s of the N = 1 run of the same executor and service time (None: no such run)."""
    one = next((r for r in results if (r.executor, r.service_ms, r.workers) == (result.executor, result.service_ms, 1)),
               None)
    return result.rate / (result.workers * one.rate) if one and one.rate and not result.failure else None


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every core since boot, from /proc/stat (0, 0 where there is none)."""
    try:
        ticks = [int(t) for t in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = ticks[3] + ticks[4]  # idle and iowait
    return sum(ticks) - idle, sum(ticks)


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total else float("nan")


def cells(result: Measured, results: list[Measured]) -> list[Any]:
    if result.failure:
        return [result.executor, f"{result.service_ms:g}", result.workers, result.jobs, "-", "-",
                f"failed: {result.failure}", "-", "-", "-", "-"]
    share = efficiency(result, results)
    ideal = result.workers / (result.service_ms / 1000)
    return [result.executor, f"{result.service_ms:g}", result.workers, result.jobs, f"{result.start_s:.1f}",
            f"{result.seconds:.2f}", f"{result.rate:,.0f}", "-" if share is None else f"{share:.0%}", f"{result.rate / ideal:.0%}",
            f"{1000 * result.cpu_s / max(1, result.ok):.2f}", f"{result.busy:.0%}"]


def report(results: list[Measured], cores: int) -> str:
    """The table, and per executor and service time the peak rows/s and where efficiency fell under 90%."""
    lines = [f"Simulated GPU workers ({TARGET}) on {cores} CPU cores: the N worker processes share them with the "
             f"coordinator, so efficiency at large N is bounded by the CPU here.", "",
             markdown_table(HEADERS, [cells(r, results) for r in results]), ""]
    for (kind, service_ms), group in itertools.groupby(results, key=lambda r: (r.executor, r.service_ms)):
        group = list(group)
        peak = max(group, key=lambda r: r.rate)
        below = [r.workers for r in group if (share := efficiency(r, results)) is not None and share < 0.9]
        where = f"efficiency first under 90% at N = {below[0]}" if below else "efficiency 90% or more throughout"
        lines.append(f"- {kind}, {service_ms:g} ms jobs: peak {peak.rate:,.0f} rows/s at N = {peak.workers}; {where}")
    return "\n".join(lines)


class ThreadProfiler:
    """cProfile in every thread started while `running` (and the calling one): the coordinator's
    work happens in the engine's, the executor's and Dask's threads. From Python 3.12 one profiler
    sees every thread (cProfile rides sys.monitoring, one per process): it counts the process's CPU
    time, which, the interpreter lock running one thread's Python at a time, is mostly that thread's."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []

    def running(self) -> Any:
        from contextlib import contextmanager

        @contextmanager
        def profiled() -> Iterator[None]:
            main = self._start()
            if sys.version_info >= (3, 12):
                try:
                    yield
                finally:
                    main.disable()
                return
            threading.setprofile(self._hook)
            try:
                yield
            finally:
                threading.setprofile(None)
                main.disable()

        return profiled()

    def _start(self) -> cProfile.Profile:
        # CPU time: waits (for the GIL too) are not work
        profile = cProfile.Profile(time.process_time if sys.version_info >= (3, 12) else time.thread_time)
        self.profiles.append(profile)
        profile.enable()
        return profile

    def _hook(self, frame: Any, event: str, arg: Any) -> Callable | None:
        """Installed in each new thread by threading.setprofile: hands the thread to a profiler of its own."""
        sys.setprofile(None)
        self._start()
        return None

    def write(self, path: Path) -> None:
        stats = pstats.Stats(self.profiles[0])
        for profile in self.profiles[1:]:
            stats.add(profile)
        stats.dump_stats(str(path))
        stats.sort_stats("tottime").print_stats(30)


def nothing() -> Any:
    from contextlib import nullcontext

    return nullcontext()


if __name__ == "__main__":
    main()
