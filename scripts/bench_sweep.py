#!/usr/bin/env python3
"""Sweep throughput: the default matmul space at 2048^3 with a cold compile cache.

Aim (issue 3): under 2 minutes on one H100/H200 with its 16 cores. Prints the wall time split
into compile, check, time and overhead; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from gen.evaluate.options import RunOptions
from gen.core.results import TimingOptions
from gen.core.results import Status
from gen.search.sweep import SweepOptions, sweep
from gen.core.table import text_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="matmul")
    parser.add_argument("--size", default="2048x2048x2048")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["TILEGEN_CACHE"] = str(Path(scratch) / "cache")  # cold: nothing compiled yet
        started = time.perf_counter()
        report = sweep(SweepOptions(args.family, Path(scratch) / "run", sizes=[args.size], progress=False,
                                    run=RunOptions(timing=TimingOptions())))
        wall = time.perf_counter() - started
    stats = report.stats
    statuses = sorted({str(r.status) for r in report.rows})
    print(f"{len(report.rows)} variants of the default {args.family} space at {args.size}, "
          f"{os.cpu_count()} cores, statuses {statuses}, kernels ran: {report.ran_kernels}")
    print(text_table(["stage", "seconds", "of the wall time"],
                     [["nvcc (summed over its runs)", round(stats.compile_seconds, 2),
                       f"{stats.compile_seconds / wall:.0%}"],
                      ["GPU: check and time", round(stats.gpu_seconds, 2), f"{stats.gpu_seconds / wall:.0%}"],
                      ["wall", round(wall, 2), "100%"]]))
    print(f"aim: under 120 s; {'met' if wall < 120 else 'missed'}")
    ok = [r for r in report.rows if r.status == Status.OK]
    if ok:
        best = max(ok, key=lambda r: r.throughput)
        print(f"fastest: {best.name} {best.median_ms:.3f} ms, {best.throughput:.2f} {best.unit}")


if __name__ == "__main__":
    main()
