"""Sweep a space on the GPU: enumerate, record invalid points, compile in parallel, run each
variant in an isolated worker, append every row the moment it is finished, resume a killed run.

Orchestration only: the stages live in space, compiler, worker (run), sanitize and store.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from .compiler import CompileOptions, Compiled, compile_variants, compiled_row, provenance
from .errors import UsageError
from .families import get_family
from .family import refused
from .jobs import CACHE_CONFIGS, Job, job_for
from .progress import Progress
from .results import Measurement, Row, Status, TimingOptions, row_key, skipped_row
from .sanitize import sanitize, sanitizer_path
from .space import Space
from .store import ResultLog
from .table import text_table
from .variant import Variant
from .worker import Executor, GpuUnavailable, LocalExecutor



@dataclass(frozen=True)
class SweepOptions:
    family: str
    out: Path
    params: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    sizes: Sequence[str] = ()  # empty: the family's default sizes
    filter: str | None = None
    resume: bool = False
    sanitize: bool = False
    cache_configs: Sequence[str] = ("none",)
    arch: str | None = None  # None: the local GPU's, else sm_90
    timing: TimingOptions = field(default_factory=TimingOptions)
    silence_s: float = 30.0  # a worker silent this long is hung: killed, and the row is a timeout
    gpus: Sequence[int] = (0,)
    seed: int | None = None  # None: fresh random inputs every run
    compile_jobs: int | None = None
    progress: bool = True


@dataclass
class SweepReport:
    rows: list[Row]  # every row in the results file, earlier ones of a resumed run included
    new_rows: int
    ran_kernels: bool
    note: str  # why no kernel ran, if none did
    seconds: dict[str, float]
    out: Path


def sweep(options: SweepOptions, executor: Executor | None = None) -> SweepReport:
    """Run the sweep `options` describes; rows go to options.out/results.jsonl as they finish."""
    started = time.perf_counter()
    family = get_family(options.family)
    shapes = [family.parse_shape(size) for size in options.sizes or family.default_sizes]
    for cache in options.cache_configs:
        if cache not in CACHE_CONFIGS:
            raise UsageError(f"cache {cache!r} is not one of: {', '.join(CACHE_CONFIGS)}")
    expansion = Space.default(family, options.params).select(options.filter)
    if options.sanitize:
        sanitizer_path()
    compile_options = CompileOptions.local(options.arch, options.compile_jobs)
    made_by = provenance(compile_options, family)
    seed = options.seed if options.seed is not None else random.randrange(1, 2**31)
    seconds: dict[str, float] = {}
    with ResultLog(options.out, options.resume) as log:
        plan = _Plan(shapes, options.cache_configs, log.done)
        for skipped in expansion.skipped:
            for shape, cache in plan.open_points(skipped.variant):
                log.append(skipped_row(skipped.variant, skipped.reason, str(shape), cache_config=cache,
                                       provenance=dict(made_by)))
        to_run = [v for v in expansion.valid if plan.open_points(v)]
        clock = time.perf_counter()
        compiled = _compile(to_run, compile_options, options.progress)
        seconds["compile"] = time.perf_counter() - clock
        pending: dict[Job, Row] = {}
        for variant in to_run:
            for shape, cache in plan.open_points(variant):
                row = compiled_row(compiled[variant], str(shape), cache_config=cache, provenance=dict(made_by))
                if not compiled[variant].ok:
                    log.append(row)
                elif reason := refused(family, variant, shape):
                    log.append(skipped_row(variant, reason, str(shape), cache_config=cache, provenance=row.provenance))
                else:
                    pending[job_for(compiled[variant], shape, cache, seed, options.timing)] = row
        executor = executor or LocalExecutor(options.gpus, options.silence_s)
        try:
            ran, note = _run(pending, executor, options, log, seconds)
        finally:
            executor.close()
        log.write_csv()
        seconds["total"] = time.perf_counter() - started
        return SweepReport(log.rows, len(log.rows) - len(plan.done), ran, note, seconds, options.out)


def summary(report: SweepReport, top: int = 10) -> str:
    """Counts per status and the fastest correct variants per problem."""
    counts = Counter(str(row.status) for row in report.rows)
    lines = ["status: " + ", ".join(f"{status} {count}" for status, count in sorted(counts.items()))]
    measured = sorted((r for r in report.rows if r.throughput is not None and r.status == Status.OK),
                      key=lambda r: (r.shape, -r.throughput))
    for shape in dict.fromkeys(r.shape for r in measured):
        best = [r for r in measured if r.shape == shape][:top]
        body = [[r.name, r.cache_config, round(r.median_ms, 4), round(r.throughput, 2),
                 f"{r.ceiling_share:.1%}" if r.ceiling_share else "", f"{r.error:.2g}"] for r in best]
        unit = best[0].unit
        lines += ["", f"fastest at {shape}:",
                  text_table(["variant", "cache", "median ms", unit, "of ceiling", "error"], body)]
    if not report.ran_kernels:
        lines += ["", f"no kernel was run: {report.note}", "rows are marked 'compiled'"]
    return "\n".join(lines)


class _Plan:
    """Which (shape, cache) points of each variant still need a row."""

    def __init__(self, shapes: list[Any], caches: Sequence[str], done: set[str]):
        self.shapes, self.caches, self.done = shapes, list(caches), set(done)

    def open_points(self, variant: Variant) -> list[tuple[Any, str]]:
        return [(shape, cache) for shape in self.shapes for cache in self.caches
                if row_key(variant.name, str(shape), cache) not in self.done]


def _compile(variants: list[Variant], options: CompileOptions, show: bool) -> dict[Variant, Compiled]:
    progress = Progress(len(variants), "compile", enabled=show)
    results = compile_variants(variants, options, on_done=lambda c: progress.advance(c.variant.name))
    progress.close()
    return {c.variant: c for c in results}


def _run(pending: dict[Job, Row], executor: Executor, options: SweepOptions, log: ResultLog,
         seconds: dict[str, float]) -> tuple[bool, str]:
    """Run every pending job and append its row; without a GPU, append them as `compiled`."""
    try:
        devices = executor.devices()
    except GpuUnavailable as reason:
        for row in pending.values():
            row.message = f"not run: {reason}"
            log.append(row)
        return False, str(reason)
    hazards = _sanitize_all(pending, devices[0].index, seconds) if options.sanitize and pending else {}
    progress = Progress(len(pending), "run", enabled=options.progress)
    seconds.setdefault("check", 0.0)
    seconds.setdefault("time", 0.0)
    for job, measurement in executor.run(list(pending)):
        row = pending[job]
        measurement.apply_to(row)
        _apply_hazards(row, hazards.get(job.name))
        seconds["check"] += measurement.check_seconds
        seconds["time"] += measurement.time_seconds
        log.append(row)
        progress.advance(_progress_text(row, measurement))
    progress.close()
    return True, ""


def _sanitize_all(pending: dict[Job, Row], gpu: int, seconds: dict[str, float]) -> dict[str, tuple[dict, str]]:
    """compute-sanitizer once per variant at its small shape, before any timing runs."""
    clock = time.perf_counter()
    first_jobs = {job.name: job for job in reversed(list(pending))}
    progress = Progress(len(first_jobs), "sanitize")
    results = {}
    for name, job in first_jobs.items():
        family = get_family(job.family)
        small = replace(job, shape=family.sanitize_size(family.variant_type.from_name(name)), timing=None,
                        seeds=job.seeds[:1])
        results[name] = sanitize(small, gpu)
        progress.advance(f"{name} {results[name][0]}")
    progress.close()
    seconds["sanitize"] = time.perf_counter() - clock
    return results


def _apply_hazards(row: Row, found: tuple[dict[str, int], str] | None) -> None:
    if found is None:
        return
    row.hazards, note = found
    if note:
        row.message = "; ".join(m for m in (row.message, note) if m)
    if sum(row.hazards.values()) and row.status in (Status.OK, Status.WRONG):
        row.status = Status.RACY
        tools = ", ".join(f"{tool} {count}" for tool, count in row.hazards.items() if count)
        row.message = "; ".join(m for m in (row.message, f"compute-sanitizer hazards: {tools}") if m)


def _progress_text(row: Row, measurement: Measurement) -> str:
    text = f"{row.name} {row.shape} {row.status}"
    if measurement.timing:
        text += f" {measurement.timing.median_ms:.4g} ms"
    return text
