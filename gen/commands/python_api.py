"""Sweeping and tuning from Python: `gen.sweep(...)` and `gen.tune(...)` take keyword arguments and
return the rows as dicts. They build the options the command line builds and call the same drivers
(gen.commands.sweep, gen.commands.tune), so they check, write and stop as `tilegen sweep` and
`tilegen tune` do; only the printing differs (notes become warnings).

    rows = gen.sweep("transpose", sizes=["8192x8192"], out="runs/tr", timing_budget=0.5)
    rows = gen.tune("sgemm", "2048x2048x2048", strategy="bayes", budget=50)
    best = rows[0]                    # the winner first: rows[0]["name"], rows[0]["median_ms"]
    points = gen.tune("sgemm", "2048x2048x2048", dry_run=True)   # what it would evaluate; nothing run

The keywords are the flags' names (`finalists=` for --finalists, `jobs=`, `timeout=`, `quiet=`, `time=`,
`full_timing=`, `dry_run=`); the names of before 0.3 (`top=`, `compile_jobs=`, `silence_s=`,
`progress=`, `time_s=`, `early_stop=`) are taken until 0.4, each with a DeprecationWarning.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..core.objectives import DEFAULT_OBJECTIVE
from ..core.results import Row, is_ok
from ..core.timing import TUNE_TIMING, TimingOptions
from ..evaluate.options import FULL, RunOptions
from ..evaluate.plan import Plan, shape_text
from ..evaluate.services import check_reachable
from ..evaluate.session import Executor
from ..families.registry import get_family
from ..families.space import MAX_POINTS
from ..search.replay import replay_file
from ..search.strategies import DEFAULT_STRATEGY
from .sweep import SweepOptions, preview
from .sweep import sweep as run_sweep
from .tune import DEFAULT_SCREEN, TuneOptions, candidates, tuned_rows
from .tune import tune as run_tune


# The keywords of before 0.3, taken until 0.4: the flag's name each became, and how its value reads as that.
_OLD_KEYWORDS = {"top": ("finalists", lambda top: top), "compile_jobs": ("jobs", lambda jobs: jobs),
                 "silence_s": ("timeout", lambda seconds: seconds), "progress": ("quiet", lambda progress: not progress),
                 "time_s": ("time", lambda seconds: seconds), "early_stop": ("full_timing", lambda early: not early)}


def sweep(family: str, sizes: str | Sequence[str] = (), *, out: str | Path | None = None,
          params: Mapping[str, Any] | None = None, filter: str | None = None, resume: bool = False,
          cache_configs: str | Sequence[str] = ("none",), keep_skipped: bool = False,
          max_points: int = MAX_POINTS, arch: str | None = None, compiler: str | None = None,
          jobs: int | None = None, gpus: Sequence[int] = (0,), cluster: str | None = None,
          timing_budget: float = 1.0, warm: bool = False, seed: int | None = None, sanitize: bool = False,
          timeout: float = 30.0, quiet: bool = False, executor: Executor | None = None,
          energy: bool = False, compile_level: str = FULL, dry_run: bool = False,
          **old_keywords: Any) -> list[dict[str, Any]]:
    """Check and time every variant of `family`'s space (its default space, with `params`
    replacing some parameters' values: {"tile": [16, 32]}; a value on its own is a list of one) at
    every size in `sizes` (the family's default sizes if empty), appending each row to
    `out`/results.jsonl as it finishes, as `tilegen sweep` does. Returns every row of the run
    folder (resumed ones included), each a dict of gen.core.results.Row's fields. Without a GPU the
    variants compile and their rows say `compiled`. `executor` replaces this host's GPU workers
    (gen.gpu.executor.Executor: a test's fake, a cluster of your own). `energy`: also measure each
    variant's joules per launch and average power (`energy_j`, `power_w`; NVML), as `--energy` does.
    `compile_level`: how hard the compiler optimises (gen.compiling.levels.LEVELS), as `--compile-level`.
    `dry_run`: as `--dry-run`, nothing compiled or written (`out` may be left out); returns one dict per
    point the sweep would run (`name`, `shape`, `cache_config`)."""
    renamed = _renamed("sweep", old_keywords, jobs=jobs, timeout=timeout, quiet=quiet)
    timing = TimingOptions(budget_s=timing_budget, warm=warm, energy=energy)
    run = _run_options(arch, compiler, renamed["jobs"], gpus, cluster, timing, renamed["timeout"], seed=seed,
                       sanitize=sanitize, compile_level=compile_level)
    options = SweepOptions(family=family, out=out, params=params or {}, sizes=sizes, filter=filter, resume=resume,
                           cache_configs=cache_configs, keep_skipped=keep_skipped, max_points=max_points, run=run,
                           progress=not renamed["quiet"])
    if dry_run:
        return _points(preview(options))
    report = run_sweep(options, executor)
    for note in report.notes:
        warnings.warn(note, stacklevel=2)
    return [row.to_dict() for row in report.rows]


def tune(family: str, size: str, *, params: Mapping[str, Any] | None = None, strategy: str = DEFAULT_STRATEGY,
         budget: int | None = None, time: float | None = None, db: str | Path | None = None,
         filter: str | None = None, seed: int = 0, finalists: int = 3, full_timing: bool = False,
         max_points: int = MAX_POINTS, arch: str | None = None, compiler: str | None = None,
         jobs: int | None = None, gpus: Sequence[int] = (0,), cluster: str | None = None,
         timing_budget: float = TUNE_TIMING.budget_s, warm: bool = False, timeout: float = 30.0,
         quiet: bool = False, executor: Executor | None = None, objective: str = DEFAULT_OBJECTIVE,
         screen: str | None = DEFAULT_SCREEN, dry_run: bool = False, **old_keywords: Any) -> list[dict[str, Any]]:
    """Autotune `family` at one `size` on each GPU model among `gpus`, as `tilegen tune` does: the
    `strategy` (brute, random, anneal, local, genetic, trend, forest, bayes, portfolio: the default) evaluates up to
    `budget` variants (brute force without one: the whole space; the others: 100) or as many as fit
    in `time` seconds, the finalists are timed again, and everything goes into the tuning database `db` (default: $TILEGEN_DB,
    else tuning.sqlite in tilegen's cache folder), where gen.tuned and gen.kernel find the winner.
    The finalists' energy is measured too; `objective` (time, energy or edp) ranks them. `screen`: a
    compile level (gen.compiling.levels) to search at, the finalists compiled and timed again at full.

    Returns the rows the database holds for this problem, one per variant measured (earlier tunes'
    included; a variant only screened: its screening row, whose `compile_level` says so), as dicts of
    gen.core.results.Row's fields plus `winner` (True for the tune's winner on that GPU model),
    `gpu_model` and `search_seconds` (the search strategy's own time on that model): for each GPU
    model tuned, the winner first, then the other correct variants fastest first, then those that
    failed.

    `dry_run`: as `--dry-run`, nothing compiled or written; returns one dict per variant the search
    chooses from (`name`, `shape`, `cache_config`)."""
    renamed = _renamed("tune", old_keywords, finalists=finalists, jobs=jobs, timeout=timeout, quiet=quiet, time=time,
                       full_timing=full_timing)
    run = _run_options(arch, compiler, renamed["jobs"], gpus, cluster,
                       TimingOptions(budget_s=timing_budget, warm=warm), renamed["timeout"])
    options = TuneOptions(family=family, size=size, params=params or {}, filter=filter, strategy=strategy,
                          budget=budget, time_s=renamed["time"], db=db, seed=seed, top=renamed["finalists"], run=run,
                          progress=not renamed["quiet"], max_points=max_points, early_stop=not renamed["full_timing"],
                          objective=objective, screen=screen)
    if dry_run:
        chosen = get_family(family)
        return _points(candidates(chosen, chosen.parse_shape(size), options).plan)
    options.run.compile_options()  # the arch, compiler and compile cache, before the database is made
    rows = []
    for result in run_tune(options, executor):
        measured = tuned_rows(result, options.db)
        measured[result.winner.name] = result.winner  # its median round, as `best` and gen.tuned read it
        ranked = sorted(measured.values(), key=lambda row: _rank(row, result.winner.name))
        rows += [{**row.to_dict(), "winner": row.name == result.winner.name, "gpu_model": str(result.problem.gpu_model),
                  "search_seconds": result.search_seconds} for row in ranked]
    return rows


def _renamed(function: str, old_keywords: Mapping[str, Any], **keywords: Any) -> dict[str, Any]:
    """`keywords` (the flags' names) with any of `old_keywords` (their names before 0.3) read as the
    new name, each with a one-line DeprecationWarning; TypeError for a keyword neither knows."""
    for old, value in old_keywords.items():
        new, convert = _OLD_KEYWORDS.get(old, (None, None))
        if new not in keywords:
            raise TypeError(f"gen.{function}() got an unexpected keyword argument {old!r}")
        flag = new.replace("_", "-")
        warnings.warn(f"gen.{function}({old}=) is now {new}= (the flag --{flag}); {old}= goes in tilegen 0.4",
                      DeprecationWarning, stacklevel=3)
        keywords[new] = convert(value)
    return keywords


def _points(plan: Plan) -> list[dict[str, Any]]:
    """A dry run's answer: the points a run would evaluate."""
    return [{"name": point.variant.name, "shape": shape_text(point.shape), "cache_config": point.cache_config}
            for point in plan.runnable]


def _rank(row: Row, winner: str) -> tuple[int, float]:
    if row.name == winner:
        return 0, 0.0
    return (1, row.median_ms) if is_ok(row) else (2, 0.0)


def _run_options(arch: str | None, compiler: str | None, compile_jobs: int | None, gpus: Sequence[int],
                 cluster: str | None, timing: TimingOptions, silence_s: float, **extra: Any) -> RunOptions:
    """RunOptions from keyword arguments, checked as the command line's are; a cluster's scheduler
    must answer before anything is written."""
    options = RunOptions(arch=arch, compiler=compiler, compile_jobs=compile_jobs, gpus=gpus, cluster=cluster,
                         timing=timing, silence_s=silence_s, **extra)
    if cluster and cluster != "local":
        check_reachable(cluster)
    return options


def replay(file: str | Path, *, strategies: str | Sequence[str] = (DEFAULT_STRATEGY,), budgets: int | Sequence[int] = (100,),
           repeats: int = 10, seed: int = 0, prior: str | Path | Sequence[str | Path] = ()) -> dict[str, Any]:
    """Replay search strategies over a measured space (a T4 file or a Kernel Tuner cache file, gzipped
    or not), without a GPU, as `tilegen replay` does: each strategy `repeats` times from seeds `seed`,
    `seed + 1`, ..., answered with the file's measurements. Returns the study as `tilegen replay
    --json` prints it: per strategy and budget, the mean, standard deviation and count of runs of
    `fraction` (of the optimum reached), `evaluations_to_1pc`, `seconds_to_1pc` (simulated: the
    file's compile, framework and run times) and `score` (docs/search.md says how it is computed).
    `prior`: files of the same kernel measured on other GPUs, given to the strategies as a tune gives
    them the tuning database's measurements of other GPUs (gen.search.prior)."""
    return replay_file(file, strategies, budgets, repeats, seed, prior)

