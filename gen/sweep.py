"""Sweep a space on the GPU: every point of the space at every size through the evaluation
pipeline, each row appended the moment it is finished, a killed or interrupted run resumed.

Orchestration only: the stages live in space, pipeline (compile, run, sanitize) and store.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .errors import RunInterrupted, UsageError
from .families import get_family
from .jobs import CACHE_CONFIGS
from .pipeline import Pipeline, PipelineStats, Point, RunOptions
from .progress import Progress
from .results import Row, Status
from .space import Space
from .store import ResultLog
from .table import text_table
from .worker import Executor


@dataclass(frozen=True)
class SweepOptions:
    family: str
    out: Path
    params: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    sizes: Sequence[str] = ()  # empty: the family's default sizes
    filter: str | None = None
    resume: bool = False
    cache_configs: Sequence[str] = ("none",)
    run: RunOptions = field(default_factory=RunOptions)
    progress: bool = True


@dataclass
class SweepReport:
    rows: list[Row]  # every row in the results file, earlier ones of a resumed run included
    new_rows: int
    ran_kernels: bool
    note: str  # why no kernel ran, if none did
    stats: PipelineStats
    out: Path

    @property
    def seconds(self) -> dict[str, float]:
        """Wall time, and the time nvcc and the GPUs were busy (they overlap)."""
        return {"total": self.stats.wall_seconds, "nvcc": self.stats.compile_seconds,
                "gpu": self.stats.gpu_seconds}


def sweep(options: SweepOptions, executor: Executor | None = None) -> SweepReport:
    """Run the sweep `options` describes; rows go to options.out/results.jsonl as they finish."""
    family = get_family(options.family)
    shapes = [family.parse_shape(size) for size in options.sizes or family.default_sizes]
    for cache in options.cache_configs:
        if cache not in CACHE_CONFIGS:
            raise UsageError(f"cache {cache!r} is not one of: {', '.join(CACHE_CONFIGS)}")
    if options.run.sanitize:
        from .sanitize import sanitizer_path

        sanitizer_path()
    expansion = Space.default(family, options.params).select(options.filter)
    variants = [s.variant for s in expansion.skipped] + expansion.valid
    points = [Point(v, shape, cache) for v in variants for shape in shapes for cache in options.cache_configs]
    with ResultLog(options.out, options.resume) as log:
        done = log.done
        todo = [p for p in points if p.key not in done]
        progress = Progress(len(todo), "sweep", enabled=options.progress)
        pipeline = Pipeline(family, options.run, executor)
        try:
            with pipeline:
                pipeline.submit(todo)
                for row in pipeline.rows():
                    log.append(row)
                    progress.advance(_progress_text(row))
        except KeyboardInterrupt:
            raise RunInterrupted(f"{len(log.rows)} rows kept in {log.path} (and results.csv); run the same sweep "
                                 f"with --resume to continue") from None
        finally:
            progress.close()
            log.write_csv()
        ran = pipeline.unavailable is None and any(r.status not in (Status.SKIPPED, Status.COMPILE_ERROR,
                                                                    Status.COMPILED) for r in log.rows)
        return SweepReport(log.rows, len(log.rows) - log.done_before, ran, pipeline.unavailable or "",
                           pipeline.stats, options.out)


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
    if report.note:
        lines += ["", f"no kernel was run: {report.note}"]
        if counts.get(str(Status.COMPILED)):
            lines.append("rows that compiled are marked 'compiled'")
    return "\n".join(lines)


def _progress_text(row: Row) -> str:
    text = f"{row.name} {row.shape} {row.status}"
    if row.median_ms is not None:
        text += f" {row.median_ms:.4g} ms"
    return text
