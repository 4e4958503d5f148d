"""Tables from result rows: status counts, the best variant per problem, the top N."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..core.errors import UsageError
from ..families import element_type
from ..core.results import Row, Status
from .results_log import latest, read_rows
from .run_folder import RESULTS_JSONL
from ..core.table import markdown_table, text_table

Table = Callable[[Sequence[str], Sequence[Sequence[object]]], str]


def load_rows(directories: Iterable[Path]) -> list[Row]:
    """The newest row of each point in each folder's results (a resumed sweep may hold two)."""
    rows: list[Row] = []
    for directory in directories:
        path = Path(directory) / RESULTS_JSONL
        if not path.exists():
            raise UsageError(f"{directory} has no {RESULTS_JSONL}: give a folder a sweep or compile wrote to")
        rows.extend(latest(read_rows(path)))
    return rows


def measured(rows: Iterable[Row]) -> list[Row]:
    """Correct rows with a throughput, fastest first."""
    return sorted((r for r in rows if r.status == Status.OK and r.throughput is not None),
                  key=lambda r: -r.throughput)


def status_table(rows: Sequence[Row], table: Table = text_table) -> str:
    counts: Counter[tuple[str, str]] = Counter()
    for row in rows:
        counts[(row.family, str(row.status))] += row.points  # a summary of skipped points counts each
    return table(["family", "status", "points"], [[f, s, n] for (f, s), n in sorted(counts.items())])


def best_table(rows: Sequence[Row], table: Table = text_table) -> str:
    """The fastest correct variant for each family, dtype, problem and GPU."""
    best: dict[tuple, Row] = {}
    for row in measured(rows):
        best.setdefault((row.family, element_type(row.name), row.shape, row.provenance.get("gpu")), row)
    return table(["gpu", "problem", "best variant", "median ms", "throughput", "of ceiling"],
                 [[r.provenance.get("gpu", ""), r.shape, r.name, round(r.median_ms, 4), _rate(r), _share(r)]
                  for r in best.values()])


def top_table(rows: Sequence[Row], count: int = 10, table: Table = text_table) -> str:
    return table(["variant", "problem", "cache", "median ms", "throughput", "of ceiling", "error", "regs"],
                 [[r.name, r.shape, r.cache_config, round(r.median_ms, 4), _rate(r), _share(r),
                   f"{r.error:.2g}", r.registers] for r in measured(rows)[:count]])


def report(rows: Sequence[Row], count: int = 10, markdown: bool = False) -> str:
    table = markdown_table if markdown else text_table
    heading = "### " if markdown else ""
    return "\n\n".join([f"{heading}Rows per status", status_table(rows, table),
                        f"{heading}Best per problem", best_table(rows, table),
                        f"{heading}Top {count}", top_table(rows, count, table)])


def _rate(row: Row) -> str:
    return f"{row.throughput:.2f} {row.unit}"


def _share(row: Row) -> str:
    return f"{row.ceiling_share:.1%}" if row.ceiling_share is not None else ""
