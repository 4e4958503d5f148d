#!/usr/bin/env python3
"""Cold tuning at the compile floor (issue 35), on one GPU: how well each compile level ranks
variants, and how long cold tunes take with and without screening.

(a) Fidelity: every variant of each space is swept (compiled and timed) at each compile level
(gen.compiling.levels). Per level: the Spearman rank correlation of its times with full's, the
full-level winner's rank in the level's order (how many finalists screening needs to keep it), and
the winner after confirmation (the level's best FINALISTS re-ranked by their full-level times)
against full's winner: the same variant, or how much slower. Compile seconds summed over variants,
and registers and stack, say what the level costs and gives.

(b) Cold tunes, each in a process of its own from an empty compile cache and database (the per-GPU
ceilings file is kept, as scripts/bench_vs_kernel_tuner.py keeps it): brute force at full, brute
force screened at each --screen level, and bayes (at full and screened). Wall time, the time until
a variant within 1% of the space's best (by full-level times: the fidelity sweep's, else the cold
brute force's) was timed, the winner and its full-level time against the best, and the search
strategy's own time.

The spaces: sgemm180, the 180-point sgemm space at 2048^3 of docs/results/h100-vs-kernel-tuner.md;
sgemm3168, the default sgemm space (3168 valid points at 2048^3); transpose, the default transpose
space at 16384^2. Needs no Kernel Tuner.

Rows are written as they come, to OUT/fidelity.csv, OUT/tunes.csv and OUT/bench_cold.md (rewritten
whole after each row), so a run cut short keeps what finished; the sweeps (OUT/sweeps/SPACE/LEVEL)
resume when run again. Asserts nothing.

Usage: scripts/bench_cold.py OUT [--spaces sgemm180,transpose] [--levels full,ptxas-o1,ofc-mid]
       [--screen ofc-mid --screen ptxas-o1] [--only fidelity|tunes] [--timing-budget 0.3]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gen.compiling.levels import COMPILE_LEVELS, FULL  # noqa: E402

SGEMM_180 = {"bm": [64, 128], "bn": [64, 128], "bk": [8, 16], "wm": [32, 64], "wn": [32, 64], "tm": [4, 8],
             "tn": [4, 8], "padding": [0, 4], "vec": [4], "stages": [2], "load": ["registers"], "bounds": ["none"],
             "sync": ["both"]}
SPACES = {"sgemm180": ("sgemm", "2048x2048x2048", SGEMM_180), "sgemm3168": ("sgemm", "2048x2048x2048", {}),
          "transpose": ("transpose", "16384x16384", {})}
FIDELITY_COLUMNS = ["space", "level", "variants", "spearman", "full_winner_rank", "confirmed_same_winner",
                    "confirmed_slower", "compile_s_summed", "sweep_wall_s", "registers_median", "stack_max_bytes"]
TUNE_COLUMNS = ["space", "strategy", "screen", "evaluations", "wall_s", "s_to_within_1pct", "winner",
                "winner_slower_than_best", "search_s", "gpu_share"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the tables (CSV and Markdown) and the sweeps")
    parser.add_argument("--spaces", default=",".join(SPACES), help=f"of {', '.join(SPACES)} (default: all)")
    parser.add_argument("--levels", default=",".join(COMPILE_LEVELS), help="compile levels of the fidelity study")
    parser.add_argument("--screen", action="append", choices=COMPILE_LEVELS[1:],
                        help="a level the cold tunes screen at (repeatable; default: ofc-mid and ptxas-o1)")
    parser.add_argument("--only", choices=("fidelity", "tunes"), help="one part only")
    parser.add_argument("--finalists", type=int, default=3, help="finalists of a screened tune (default: 3)")
    parser.add_argument("--bayes-budget", type=int, default=60, help="evaluations of the bayes tunes (default: 60)")
    parser.add_argument("--timing-budget", type=float, default=0.3, help="seconds per variant in the sweeps")
    parser.add_argument("--compiler", choices=("nvrtc", "nvcc"), help="default: tilegen's")
    parser.add_argument("--child-timeout", type=float, default=900.0, help="seconds for one cold tune")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(cold_tune(**json.loads(args.child))), flush=True)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    tables = Tables(args.out)
    for space in args.spaces.split(","):
        reference = fidelity(space, args, tables) if args.only != "tunes" else swept_full(space, args)
        if args.only != "fidelity":
            tunes(space, args, tables, reference)


# ---- (a) fidelity ---------------------------------------------------------------------------------------

def fidelity(space: str, args: argparse.Namespace, tables: "Tables") -> dict[str, float]:
    """Sweep the space at each level (full first); one row per level. Full's times by name."""
    levels = [FULL] + [level for level in args.levels.split(",") if level != FULL]
    swept = {}
    for level in levels:
        print(f"--- fidelity {space} at {level}", flush=True)
        started = time.perf_counter()
        swept[level] = sweep_rows(space, level, args)
        wall = time.perf_counter() - started
        tables.add("fidelity", fidelity_row(space, level, swept[level], swept[FULL], args.finalists, wall))
    return times_of(swept[FULL])


def sweep_rows(space: str, level: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    import gen

    family, size, params = SPACES[space]
    out = args.out / "sweeps" / space / level
    return gen.sweep(family, [size], out=out, params=params, resume=(out / "run.json").exists(),
                     timing_budget=args.timing_budget, compile_level=level, compiler=args.compiler, seed=0,
                     quiet=True)


def fidelity_row(space: str, level: str, rows: list[dict], full_rows: list[dict], finalists: int,
                 wall: float) -> dict[str, Any]:
    times, full = times_of(rows), times_of(full_rows)
    common = sorted(set(times) & set(full))
    if not common:
        return {"space": space, "level": level, "variants": 0, "sweep_wall_s": round(wall, 1),
                "compile_s_summed": round(sum(row["compile_seconds"] or 0 for row in rows), 1)}  # nothing timed
    order = sorted(common, key=times.get)
    best = min(common, key=full.get)
    confirmed = min(order[:finalists], key=full.get)
    compiled = [row for row in rows if row["status"] == "ok"]
    return {"space": space, "level": level, "variants": len(common),
            "spearman": round(spearman([times[n] for n in common], [full[n] for n in common]), 4),
            "full_winner_rank": order.index(best) + 1, "confirmed_same_winner": confirmed == best,
            "confirmed_slower": f"{full[confirmed] / full[best] - 1:.2%}",
            "compile_s_summed": round(sum(row["compile_seconds"] or 0 for row in rows), 1),
            "sweep_wall_s": round(wall, 1),
            "registers_median": statistics.median(row["registers"] for row in compiled) if compiled else None,
            "stack_max_bytes": max((row["stack_bytes"] or 0 for row in compiled), default=None)}


def swept_full(space: str, args: argparse.Namespace) -> dict[str, float]:
    """Full-level times of an earlier run's sweep of the space into the same folder, if any."""
    log = args.out / "sweeps" / space / FULL / "results.jsonl"
    return times_of([json.loads(line) for line in log.read_text().splitlines()]) if log.exists() else {}


def times_of(rows: list[dict]) -> dict[str, float]:
    return {row["name"]: row["median_ms"] for row in rows if row["status"] == "ok" and row["median_ms"]}


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (ties ranked by their mean rank)."""
    ra, rb = _ranks(a), _ranks(b)
    mean = (len(a) + 1) / 2
    cov = sum((x - mean) * (y - mean) for x, y in zip(ra, rb))
    spread = (sum((x - mean) ** 2 for x in ra) * sum((y - mean) ** 2 for y in rb)) ** 0.5
    return cov / spread if spread else float("nan")


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start:end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


# ---- (b) cold tunes -------------------------------------------------------------------------------------

def tunes(space: str, args: argparse.Namespace, tables: "Tables", reference: dict[str, float]) -> None:
    screens = args.screen or ["ofc-mid", "ptxas-o1"]
    runs = [("brute", None, None), *[("brute", None, s) for s in screens], ("bayes", args.bayes_budget, None),
            *[("bayes", args.bayes_budget, s) for s in screens]]
    for strategy, budget, screen in runs:
        print(f"--- cold tune {space} {strategy} screen={screen}", flush=True)
        result = run_child(dict(space=space, strategy=strategy, budget=budget, screen=screen,
                                finalists=args.finalists, compiler=args.compiler), args.child_timeout)
        if result is None:
            continue
        reference = reference or (result["full_times"] if strategy == "brute" and screen is None else {})
        tables.add("tunes", tune_row(space, strategy, screen, result, reference))


def run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """One cold tune in a fresh process; None (its output printed) when it failed or ran out of time."""
    command = [sys.executable, __file__, "unused", "--child", json.dumps(spec)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"    no result within {timeout:g} s", flush=True)
        return None
    line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        print(f"    failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}", flush=True)
        return None
    return json.loads(line[len("RESULT "):])


def cold_tune(space: str, strategy: str, budget: int | None, screen: str | None, finalists: int,
              compiler: str | None) -> dict[str, Any]:
    """In the child: one tune from an empty compile cache and database."""
    from gen.core.paths import cache_dir

    warm = cache_dir() / "ceilings.json"
    cold = Path(tempfile.mkdtemp(prefix="tilegen-cold-"))
    if warm.exists():
        shutil.copy(warm, cold / "ceilings.json")
    os.environ["TILEGEN_CACHE"] = str(cold)
    from gen.core.timing import TUNE_TIMING
    from gen.evaluate.options import RunOptions
    from gen.commands.tune import TuneOptions, tune
    from gen.store.tuning_db import TuningDB

    family, size, params = SPACES[space]
    clock = time.perf_counter()
    (result,) = tune(TuneOptions(family, size, params={k: [str(v) for v in vs] for k, vs in params.items()},
                                 strategy=strategy, budget=budget, db=cold / "tuning.sqlite", progress=False,
                                 top=finalists, screen=screen, run=RunOptions(timing=TUNE_TIMING, compiler=compiler)))
    wall = time.perf_counter() - clock
    full = TuningDB(cold / "tuning.sqlite").measured(result.problem)
    return {"wall_s": wall, "evaluations": result.evaluations, "winner": result.winner.name,
            "trace": list(zip(result.trace_seconds, told_names(cold / "tuning.sqlite"))),
            "full_times": {n: r.median_ms for n, r in full.items() if r.median_ms is not None},
            "search_s": result.search_seconds, "gpu_share": result.gpu_seconds / result.seconds}


def told_names(db: Path) -> list[str]:
    """The variants of the last search session, in the order they were told."""
    with sqlite3.connect(db) as connection:
        return [name for (name,) in connection.execute(
            "SELECT variant FROM trace WHERE session = (SELECT MAX(session) FROM trace) ORDER BY step")]


def tune_row(space: str, strategy: str, screen: str | None, result: dict, reference: dict[str, float]
             ) -> dict[str, Any]:
    best = min(reference.values()) if reference else None
    within = next((round(s, 1) for s, name in result["trace"] if best and reference.get(name, 1e30) <= 1.01 * best),
                  None)
    winner_ms = reference.get(result["winner"])
    return {"space": space, "strategy": strategy, "screen": screen or "", "evaluations": result["evaluations"],
            "wall_s": round(result["wall_s"], 1), "s_to_within_1pct": within, "winner": result["winner"],
            "winner_slower_than_best": f"{winner_ms / best - 1:.2%}" if best and winner_ms else "",
            "search_s": round(result["search_s"], 2), "gpu_share": f"{result['gpu_share']:.0%}"}


# ---- output -----------------------------------------------------------------------------------------------

class Tables:
    """The rows so far (an earlier run's into the same folder too): each appended to its CSV as it
    comes, and the Markdown rewritten whole."""

    def __init__(self, out: Path):
        self.out, self.rows = out, {"fidelity": [], "tunes": []}
        for table in self.rows:
            if (path := out / f"{table}.csv").exists():
                with path.open(newline="") as file:
                    self.rows[table] = list(csv.DictReader(file))

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows[table].append(row)
        path = self.out / f"{table}.csv"
        columns = FIDELITY_COLUMNS if table == "fidelity" else TUNE_COLUMNS
        new = not path.exists()
        with path.open("a", newline="") as file:
            writer = csv.DictWriter(file, columns, restval="")
            if new:
                writer.writeheader()
            writer.writerow(row)
        print("    " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
        (self.out / "bench_cold.md").write_text(self.markdown())

    def markdown(self) -> str:
        parts = []
        for table, columns in (("fidelity", FIDELITY_COLUMNS), ("tunes", TUNE_COLUMNS)):
            if self.rows[table]:
                lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
                lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in self.rows[table]]
                parts.append(f"## {table}\n\n" + "\n".join(lines))
        return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    main()
