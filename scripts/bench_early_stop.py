#!/usr/bin/env python3
"""What stopping losers early saves a tune: the 180-point SGEMM space of bench_vs_kernel_tuner.py,
brute force at 2048^3 with a warm compile cache (so the GPU, not the compiler, sets the pace), with
the early stop (tilegen's default) and with --full-timing, alternating, `--rounds` times each.
Prints the wall time, the GPUs' busy time, the samples timed, the rows stopped early and the winner
of each run; asserts nothing.

Usage: scripts/bench_early_stop.py [--size 2048x2048x2048] [--rounds 2] [--cache DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_vs_kernel_tuner's SPACE

from bench_vs_kernel_tuner import SPACE  # noqa: E402

from gen.core.table import text_table  # noqa: E402
from gen.evaluate.options import RunOptions  # noqa: E402
from gen.core.timing import TUNE_TIMING  # noqa: E402
from gen.commands.tune import TuneOptions, tune  # noqa: E402
from gen.store.tuning_db import TuningDB  # noqa: E402

HEADERS = ["timing", "wall s", "GPU busy s", "samples", "stopped early", "winner", "winner ms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="2048x2048x2048")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cache", type=Path, help="the compile cache (default: a fresh one, warmed first)")
    args = parser.parse_args()
    os.environ["TILEGEN_CACHE"] = str(args.cache or Path(tempfile.mkdtemp(prefix="tilegen-early-stop-")))
    params = {name: [str(v) for v in values] for name, values in SPACE.items()}
    one_tune(args.size, params, early_stop=True)  # compiles the space and measures the ceilings: not shown
    table = []
    for _ in range(args.rounds):
        for early_stop in (True, False):
            table.append(one_tune(args.size, params, early_stop))
            print(text_table(HEADERS, table[-1:]), flush=True)
    print(text_table(HEADERS, table))


def one_tune(size: str, params: dict[str, list[str]], early_stop: bool) -> list[object]:
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "tuning.sqlite"
        started = time.perf_counter()
        (result,) = tune(TuneOptions("sgemm", size, params=params, strategy="brute", db=db, progress=False,
                                     early_stop=early_stop, run=RunOptions(arch="sm_90", timing=TUNE_TIMING)))
        wall = time.perf_counter() - started
        rows = TuningDB(db).measured(result.problem).values()
    samples = sum(row.samples or 0 for row in rows)
    stopped = sum("timing stopped" in row.message for row in rows)
    return ["early stop" if early_stop else "full", round(wall, 2), round(result.gpu_seconds, 2), samples, stopped,
            result.winner.name, round(result.winner.median_ms, 4)]


if __name__ == "__main__":
    main()
