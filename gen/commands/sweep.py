"""Sweep a space on the GPU: every point of the space at every size through the evaluation loop,
each row appended the moment it is finished, a killed or interrupted run resumed.

The plan (gen.evaluate.plan) knows the points that are not run (an invalid variant, a shape it
refuses) before anything compiles; they are written first, one summary row per reason and size
unless `keep_skipped` asks for a row per point. Everything the options say is checked before
anything is written.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..core import checks
from ..core.errors import UsageError
from ..core.limits import CACHE_CONFIGS
from ..core.paths import as_path
from ..core.progress import Progress
from ..core.objectives import NO_ENERGY
from ..core.results import Row, Status
from ..evaluate.engine import Engine, EngineStats
from ..evaluate.loop import Sink, evaluate
from ..evaluate.options import FULL, RunOptions, sanitizer_path
from ..evaluate.plan import ANNOUNCE_POINTS, Plan, make_plan, space_line
from ..families import get_family
from ..families.family import Family
from ..evaluate.session import Executor, Session
from ..families.space import MAX_POINTS, Space, values_of
from ..store.report import fastest_table, status_counts
from ..store.results_log import ResultLog, latest
from ..search.proposers import PointList

SANITIZE_NOTE = ("--sanitize runs each of the {count:,} variants three more times, under compute-sanitizer's "
                 "racecheck, synccheck and memcheck, each in a process of its own that starts CUDA: expect a few "
                 "seconds per variant")


@dataclass(frozen=True)
class SweepOptions:
    family: str
    out: Path | None = None  # the folder for results.jsonl and results.csv; a preview needs none
    params: Mapping[str, Sequence[Any]] = field(default_factory=dict)  # a value on its own is a list of one
    sizes: Sequence[str] = ()  # empty: the family's default sizes; a string on its own is one size
    filter: str | None = None
    resume: bool = False
    cache_configs: Sequence[str] = ("none",)  # each once, in the order given (so are the sizes)
    run: RunOptions = field(default_factory=RunOptions)
    progress: bool = True
    keep_skipped: bool = False  # a row per point not run; else one per reason, size and cache preference
    max_points: int = MAX_POINTS  # refuse larger sweeps (points of the space x sizes x cache preferences)

    def __post_init__(self) -> None:
        """Options from Python are checked as the command line's are; lists given as one value are made lists."""
        object.__setattr__(self, "out", None if self.out is None else as_path(self.out, "out"))
        object.__setattr__(self, "sizes", () if self.sizes is None else values_of(self.sizes, "sizes"))
        caches = values_of(self.cache_configs, "cache_configs")
        if not caches:  # `--cache-config ''` would run no point at all
            raise UsageError(f"--cache-config (cache_configs) needs at least one of: {', '.join(CACHE_CONFIGS)}")
        for cache in caches:
            if not isinstance(cache, str) or cache not in CACHE_CONFIGS:
                raise UsageError(f"cache {cache!r} is not one of: {', '.join(CACHE_CONFIGS)}")
        object.__setattr__(self, "cache_configs", tuple(dict.fromkeys(caches)))
        checks.name_pattern(self.filter)
        for name in ("resume", "progress", "keep_skipped"):
            checks.flag(getattr(self, name), name)
        checks.instance(self.run, RunOptions, "run")
        object.__setattr__(self, "max_points", checks.whole(self.max_points, "max_points", 1))


@dataclass
class SweepReport:
    rows: list[Row]  # the newest row of each point in the results file, earlier runs' (resumed) included
    new_rows: int
    ran_kernels: bool
    note: str  # why no kernel ran, if none did
    stats: EngineStats
    out: Path
    notes: list[str] = field(default_factory=list)  # what the user should know (a dropped half-written line)
    compiled_by: str = ""  # 'nvrtc 13.0.88 for sm_90': the compiler, its version and the architecture
    compile_threads: int = 1

    @property
    def seconds(self) -> dict[str, float]:
        """Wall time, and the time the compiler and the GPUs were busy (they overlap)."""
        return {"total": self.stats.wall_seconds, "compile": self.stats.compile_seconds,
                "gpu": self.stats.gpu_seconds}

    def time_line(self) -> str:
        """Where the time went, each sum over threads or GPUs said as such."""
        threads = f"its {self.compile_threads} threads" if self.compile_threads > 1 else "its one thread"
        return (f"{self.stats.wall_seconds:.1f} s in all; the compiler busy {self.stats.compile_seconds:.1f} s summed "
                f"over {threads}, the GPUs busy {self.stats.gpu_seconds:.1f} s summed over GPUs")


class LogSink(Sink):
    """The sweep's rows, appended to its results log as they come. A point that only compiled
    before (no GPU) and only compiles again gets no second row."""

    def __init__(self, log: ResultLog, only_compiled: set[str]):
        self.log, self.only_compiled = log, only_compiled

    def record(self, rows: list[Row]) -> None:
        for row in rows:
            if row.status is not Status.COMPILED or row.key not in self.only_compiled:
                self.log.append(row)

    def kept(self) -> str:
        return f"{len(self.log.rows)} rows kept in {self.log.path} (and results.csv)"


def sweep(options: SweepOptions, executor: Executor | None = None) -> SweepReport:
    """Run the sweep `options` describes; rows go to options.out/results.jsonl as they finish. An
    `executor` given is closed when the sweep ends, as tune and revalidate close theirs."""
    if options.out is None:
        raise UsageError("a sweep needs --out DIR, the folder for its results.jsonl and results.csv (a --dry-run "
                         "needs none)")
    family, space, shapes = _checked(options)
    with Session(options.run, executor) as session:
        made_by = session.pool.provenance(family)  # the compiler and the template are there
        settings = run_settings(options, space, shapes, session.compiling.arch)
        with ResultLog(options.out, options.resume, settings=settings) as log:
            report = _sweep(options, family, space, shapes, log, session.engine(), made_by)
    report.compiled_by, report.compile_threads = session.compiled_by, session.compiling.jobs
    return report


def _sweep(options: SweepOptions, family: Family, space: Space, shapes: list[Any], log: ResultLog, engine: Engine,
           made_by: dict[str, str]) -> SweepReport:
    if len(space) >= ANNOUNCE_POINTS:
        _say(options, f"sweep: {space_line(space, len(shapes))}; checking them")
    plan = make_plan(family, space, shapes, options.cache_configs, options.filter, options.keep_skipped,
                     arch=made_by["arch"])
    newest = latest(log.rows)
    only_compiled = {row.key for row in newest if row.status is Status.COMPILED}  # no kernel ran: run again
    done = {row.key for row in newest} - only_compiled
    groups_done = {_group(row) for row in log.rows if row.skipped_count}
    skipped = [row for row in plan.skipped_rows(made_by, options.keep_skipped)
               if row.key not in done and _group(row) not in groups_done]
    todo = [p for p in plan.runnable if p.key not in done]
    earlier = f" ({len(plan.runnable) - len(todo):,} done before)" if log.done_before else ""
    _say(options, f"sweep: {plan.describe()}{earlier}")
    if options.run.sanitize:
        _say(options, "sweep: " + SANITIZE_NOTE.format(count=len({point.variant for point in todo})))
    try:
        with engine:
            evaluate(PointList(todo, skipped), engine, LogSink(log, only_compiled),
                     Progress(len(todo), "sweep", enabled=options.progress),
                     "run the same sweep with --resume to continue")
    finally:
        log.finish()
    rows = latest(log.rows)
    ran = engine.unavailable is None and any(r.status not in (Status.SKIPPED, Status.COMPILE_ERROR, Status.COMPILED)
                                             for r in rows)
    return SweepReport(rows, len(log.rows) - log.done_before, ran, engine.unavailable or "", engine.stats,
                       options.out, log.notes)


def preview(options: SweepOptions) -> Plan:
    """What `sweep(options)` would run and skip, without compiling or writing anything."""
    family, space, shapes = _checked(options)
    return make_plan(family, space, shapes, options.cache_configs, options.filter, keep=False,
                     arch=options.run.compile_arch)


def run_settings(options: SweepOptions, space: Space, shapes: Sequence[Any], arch: str) -> dict[str, Any]:
    """What makes a run's rows what they are, named as the command line names it: a resumed run
    must have the same (kept in DIR/run.json)."""
    return {"family": space.family.name, "--size": [str(s) for s in shapes],
            **{f"-p {name}": list(values) for name, values in space.values.items()},
            "--filter": options.filter, "--cache-config": list(options.cache_configs), "--arch": arch,
            "--timing-budget": options.run.timing.budget_s, "--warm": options.run.timing.warm,
            "--sanitize": options.run.sanitize,
            **({"--energy": True} if options.run.timing.energy else {}),  # only when on: older run.json files match
            **({"--compile-level": options.run.compile_level} if options.run.compile_level != FULL else {})}


def summary(report: SweepReport, top: int = 10) -> str:
    """Counts per status and the fastest correct variants per problem."""
    counts = status_counts(report.rows)
    lines = ["status: " + ", ".join(f"{status} {count}" for status, count in sorted(counts.items()))]
    if report.compiled_by:
        lines.append(f"compiler: {report.compiled_by}")
    measured = sorted((r for r in report.rows if r.throughput is not None and r.status == Status.OK),
                      key=lambda r: (r.shape, -r.throughput))
    for shape in dict.fromkeys(r.shape for r in measured):
        best = [r for r in measured if r.shape == shape][:top]
        lines += ["", f"fastest at {shape}:", fastest_table(best, energy=any(r.energy_j is not None for r in best))]
    no_energy = sorted({part for r in report.rows for part in r.message.split("; ") if part.startswith(NO_ENERGY)})
    lines += ["", no_energy[0]] if no_energy else []  # asked for, not measured: why, once
    if report.note:
        lines += ["", f"no kernel was run: {report.note}"]
        if counts.get(str(Status.COMPILED)):
            lines.append("rows that compiled are marked 'compiled'")
    return "\n".join(lines)


def _checked(options: SweepOptions) -> tuple[Family, Space, list[Any]]:
    """The family, space and shapes the options name, each checked, before anything is written."""
    family = get_family(options.family)
    shapes = _distinct_shapes(family.parse_shape(size) for size in options.sizes or family.default_sizes)
    if options.run.sanitize:
        sanitizer_path()
    space = Space.default(family, options.params)
    space.check_size(options.max_points, len(shapes) * len(options.cache_configs))
    return family, space, shapes


def _distinct_shapes(shapes: Iterable[Any]) -> list[Any]:
    """Each shape once, in the order given: a size given twice (or written two ways) is one size."""
    by_text: dict[str, Any] = {}
    for shape in shapes:
        by_text.setdefault(str(shape), shape)
    return list(by_text.values())


def _say(options: SweepOptions, line: str) -> None:
    if options.progress:
        print(line, file=sys.stderr)


def _group(row: Row) -> tuple[str, str, str]:
    return (row.message, row.shape, row.cache_config)
