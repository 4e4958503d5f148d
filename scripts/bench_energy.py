#!/usr/bin/env python3
"""NVML's energy counter on this GPU, and the energy per launch of a tune's finalists.

First the counter (read only: nothing of the GPU is set): how often nvmlDeviceGetTotalEnergyConsumption
changes and by how little (its update interval and resolution), idle and under load (a memset loop),
and the same for nvmlDeviceGetPowerUsage. Then `--repeats` tunes of FAMILY at SIZE into one fresh
tuning database, ranked by energy: the first searches; each of the others tunes each of the first
one's finalists alone (five rounds, each with its energy), so every repeat measures the same
finalists. Prints, per finalist, the
median round's time and joules per launch of every repeat, the spread of those over the repeats,
and the time-optimal and energy-optimal finalists side by side; --markdown writes the same as
Markdown. Asserts nothing.

Usage: scripts/bench_energy.py [--family sgemm] [--size 4096x4096x4096] [--repeats 3] [--top 5]
                               [--budget 100] [--gpu 0] [--markdown PATH]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gen.core.table import text_table
from gen.evaluate.options import RunOptions
from gen.core.timing import TUNE_TIMING
from gen.commands.tune import TuneOptions, tune
from gen.store.tuning_db import TuningDB

WATCH_S = 2.0  # seconds each meter is watched, idle and under load
COUNTER_HEADERS = ["reading", "load", "changes", "interval ms (median)", "interval ms (min-max)", "step (median)",
                   "step (min)", "resolution (gcd of steps)", "W"]
FINALIST_HEADERS = ["finalist", "ms (median of repeats)", "mJ per launch, each repeat", "mJ spread", "W"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="sgemm")
    parser.add_argument("--size", default="4096x4096x4096")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=5, help="finalists (default: 5)")
    parser.add_argument("--budget", type=int, default=100, help="evaluations of the first tune's search")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown to PATH")
    args = parser.parse_args()
    counter = watch_meters(args.gpu)
    print(text_table(COUNTER_HEADERS, counter), flush=True)
    finalists, sides = energy_of_finalists(args)
    print(text_table(FINALIST_HEADERS, finalists))
    print("\n".join(sides))
    if args.markdown:
        args.markdown.write_text(markdown(args, counter, finalists, sides))
        print(f"written to {args.markdown}")


# ---- the meters -----------------------------------------------------------------------------------

def watch_meters(gpu: int) -> list[list[object]]:
    """A row per meter (the energy counter, the power reading) and load (idle, a memset loop)."""
    import pycuda.driver as cuda
    import pynvml

    cuda.init()
    device = cuda.Device(gpu)
    context = device.make_context()
    buffer = cuda.mem_alloc(2**32)
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(device.pci_bus_id().encode())
        meters = {"energy counter (mJ)": pynvml.nvmlDeviceGetTotalEnergyConsumption,
                  "power reading (mW)": pynvml.nvmlDeviceGetPowerUsage}
        rows = []
        for name, read in meters.items():
            for load in ("idle", "memset loop"):
                rows.append([name, load, *changes(lambda: read(handle), buffer if load != "idle" else None,
                                                  counter=name.startswith("energy"))])
        return rows
    finally:
        buffer.free()
        context.pop()
        context.detach()  # the tunes' workers get the GPU to themselves


def changes(read, buffer, counter: bool) -> list[object]:
    """Watch a meter for WATCH_S, the GPU kept busy with memsets of `buffer` (None: idle): how many
    times it changed, the intervals between changes, the steps of its value (and their greatest
    common divisor: the finest step the meter takes), and the watts it says."""
    import pycuda.driver as cuda

    seen = [(time.monotonic(), read())]
    started, stream = time.monotonic(), cuda.Stream()
    while time.monotonic() - started < WATCH_S:
        if buffer is not None and stream.is_done():
            for salt in range(4):
                cuda.memset_d32_async(buffer, salt, 2**30, stream)
        value = read()
        if value != seen[-1][1]:
            seen.append((time.monotonic(), value))
    stream.synchronize()
    updates = seen[1:]
    intervals = [(b[0] - a[0]) * 1e3 for a, b in zip(updates, updates[1:])]
    steps = [abs(b[1] - a[1]) for a, b in zip(updates, updates[1:])]
    if len(updates) < 2:
        return [len(updates), "-", "-", "-", "-", "-", "-"]
    span = updates[-1][0] - updates[0][0]
    watts = (updates[-1][1] - updates[0][1]) / 1e3 / span if counter else statistics.mean(v for _, v in updates) / 1e3
    return [len(updates), round(statistics.median(intervals), 2), f"{min(intervals):.2f}-{max(intervals):.2f}",
            statistics.median(steps), min(steps), math.gcd(*(int(step) for step in steps)), round(watts, 1)]


# ---- the finalists --------------------------------------------------------------------------------

@dataclass
class Finalist:
    """A finalist over the repeats: each repeat's median round, in ms, mJ per launch and W."""

    name: str
    ms: list[float] = field(default_factory=list)
    mj: list[float] = field(default_factory=list)
    watts: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.ms)

    @property
    def median_mj(self) -> float:
        return statistics.median(self.mj)

    def row(self) -> list[object]:
        spread = (max(self.mj) - min(self.mj)) / self.median_mj
        watts = round(statistics.median(self.watts), 1) if self.watts else "-"
        return [self.name, round(self.median_ms, 4), " / ".join(f"{e:.4g}" for e in self.mj), f"{spread:.1%}", watts]


def energy_of_finalists(args: argparse.Namespace, *executor) -> tuple[list[list[object]], list[str]]:
    """`repeats` tunes into one database: per finalist, its median time and its joules per launch in
    each repeat; and the time-optimal and energy-optimal finalists side by side."""
    found: dict[str, Finalist] = {}
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "tuning.sqlite"
        searched: list[str] = []  # the first tune's finalists: each later repeat tunes each of these alone
        for repeat in range(args.repeats):
            results = []
            for name in searched or [None]:
                options = TuneOptions(args.family, args.size, budget=None if name else args.budget, db=db,
                                      top=1 if name else args.top, filter=name, strategy="brute" if name else "bayes",
                                      objective="energy", progress=False,
                                      run=RunOptions(gpus=[args.gpu], timing=TUNE_TIMING))
                results += tune(options, *executor)
            searched = searched or [standing.name for standing in results[0].standings]
            for result in results:
                stored = TuningDB(db, create=False).measured(result.problem)
                print(f"repeat {repeat + 1}: {result.evaluations} evaluations in {result.seconds:.1f} s; "
                      f"{result.energy_note or 'energy measured'}", flush=True)
                for standing in (s for s in result.standings if s.energy_j is not None):
                    finalist = found.setdefault(standing.name, Finalist(standing.name))
                    finalist.ms.append(standing.median_ms)
                    finalist.mj.append(standing.energy_j * 1e3)
                    if stored[standing.name].power_w is not None:
                        finalist.watts.append(stored[standing.name].power_w)
    finalists = sorted(found.values(), key=lambda f: f.median_ms)
    if not finalists:
        return [], ["no finalist has its energy measured"]
    sides = [(what, chosen.row()) for what, chosen in (("time-optimal", finalists[0]),
                                                        ("energy-optimal", min(finalists, key=lambda f: f.median_mj)))]
    return [f.row() for f in finalists], [f"{what}: {row[0]}, {row[1]} ms, {row[2]} mJ per launch (spread {row[3]}), "
                                          f"{row[4]} W" for what, row in sides]


def markdown(args: argparse.Namespace, counter: list[list[object]], finalists: list[list[object]],
             sides: list[str]) -> str:
    def table(headers: list[str], rows: list[list[object]]) -> str:
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        return "\n".join(lines + ["| " + " | ".join(str(v) for v in row) + " |" for row in rows])

    return (f"## NVML's meters (watched {WATCH_S:g} s each)\n\n{table(COUNTER_HEADERS, counter)}\n\n"
            f"## {args.family} {args.size}: the finalists over {args.repeats} repeats\n\n"
            f"{table(FINALIST_HEADERS, finalists)}\n\n" + "\n".join(f"- {line}" for line in sides) + "\n")


if __name__ == "__main__":
    main()
