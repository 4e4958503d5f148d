"""Tables from result rows: status counts, the best variant per problem, the top N."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..core.errors import UsageError
from ..families import element_type
from ..core.results import Row, Status
from .results_log import latest, read_rows
from .run_folder import RESULTS_JSONL
from ..core.table import markdown_table, text_table

TableFormat = Callable[[Sequence[str], Sequence[Sequence[object]]], str]  # text_table or markdown_table


@dataclass(frozen=True)
class ReportStyle:
    """How `tilegen report` prints its tables (see REPORT_STYLES)."""

    table: TableFormat
    heading: str = ""  # what begins a heading's line
    help: str = ""  # for its flag, --NAME; the first style, the default, has none


# The one table of the report's styles: `tilegen report` offers a --NAME flag for each but the first.
REPORT_STYLES = {"text": ReportStyle(text_table),
                 "markdown": ReportStyle(markdown_table, "### ", "Markdown tables instead of plain text")}


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


def by_problem(rows: Iterable[Row]) -> dict[tuple[str, str, str, str], list[Row]]:
    """Correct measured rows per problem (family, element type, shape, GPU), in that order, each
    problem's best first: by share of its ceiling where every row has one, else by throughput (a
    problem has one unit; problems are never ranked against each other)."""
    groups: dict[tuple[str, str, str, str], list[Row]] = {}
    for row in measured(rows):
        key = (row.family, element_type(row.name), row.shape, str(row.provenance.get("gpu", "")))
        groups.setdefault(key, []).append(row)
    for group in groups.values():
        if all(row.ceiling_share is not None for row in group):
            group.sort(key=lambda row: -row.ceiling_share)
    return dict(sorted(groups.items()))


def status_counts(rows: Iterable[Row]) -> Counter[str]:
    """Points per status (a summary row of skipped points counts each of them)."""
    counts: Counter[str] = Counter()
    for row in rows:
        counts[str(row.status)] += row.points
    return counts


def status_table(rows: Sequence[Row], table: TableFormat = text_table) -> str:
    return table(["family", "status", "points"],
                 [[family, status, count] for family in sorted({row.family for row in rows})
                  for status, count in sorted(status_counts(r for r in rows if r.family == family).items())])


def best_table(rows: Sequence[Row], table: TableFormat = text_table) -> str:
    """The best correct variant of each family, element type, shape and GPU."""
    return table(["gpu", "family", "problem", "best variant", "median ms", "throughput", "of ceiling"],
                 [[gpu, family, shape, r.name, round(r.median_ms, 4), _rate(r), _share(r)]
                  for (family, _, shape, gpu), (r, *_) in by_problem(rows).items()])


def top_tables(rows: Sequence[Row], count: int = 10, table: TableFormat = text_table, heading: str = "") -> list[str]:
    """For each problem, its best `count` rows under a heading that names the problem."""
    tables = []
    for (family, dtype, shape, gpu), ranked in by_problem(rows).items():
        where = f" on {gpu}" if gpu else ""
        tables += [f"{heading}Top {count}: {family} {dtype} {shape}{where}".replace("  ", " "),
                   fastest_table(ranked[:count], table, registers=True)]
    return tables


def fastest_table(ranked: Sequence[Row], table: TableFormat = text_table, registers: bool = False,
                  energy: bool = False) -> str:
    """Measured rows of one problem, as ranked: each variant's time, throughput, share of the
    ceiling and error (and its registers, its energy)."""
    return table(["variant", "cache", "median ms", ranked[0].unit, "of ceiling", "error",
                  *(["regs"] if registers else []), *(["mJ per launch"] if energy else [])],
                 [[r.name, r.cache_config, round(r.median_ms, 4), round(r.throughput, 2), _share(r), f"{r.error:.2g}",
                   *([r.registers] if registers else []),
                   *([f"{r.energy_j * 1e3:.4g}" if r.energy_j is not None else ""] if energy else [])] for r in ranked])


def compiled_by(row: Row) -> str:
    """'nvrtc 13.0.88 for sm_90': the compiler of a row, its version and the architecture (rows of
    tilegen 0.2 name no compiler: nvcc made them)."""
    compiler, arch = row.provenance.get("compiler", "nvcc"), row.provenance.get("arch")
    return f"{compiler} {row.provenance.get(compiler, '(version not recorded)')}" + (f" for {arch}" if arch else "")


def compilers_line(rows: Iterable[Row]) -> str:
    """'compiler: nvrtc 13.0.88 for sm_90 (40 rows)': what made the rows that compiled."""
    made = _compilers(rows)
    return "compiler: " + ("; ".join(f"{who} ({count} rows)" for who, count in sorted(made.items())) or "none")


def _compilers(rows: Iterable[Row]) -> Counter[str]:
    return Counter(compiled_by(row) for row in rows if row.status not in (Status.SKIPPED, Status.COMPILE_ERROR))


def report(rows: Sequence[Row], count: int = 10, style: str = "text") -> str:
    table, heading = REPORT_STYLES[style].table, REPORT_STYLES[style].heading
    best = best_table(rows, table) if by_problem(rows) else none_ranked(rows)
    return "\n\n".join([f"{heading}Rows per status", status_table(rows, table), compilers_line(rows),
                         f"{heading}Best per problem (ranked by share of its ceiling)", best,
                         *top_tables(rows, count, table, heading)])


def report_data(rows: Sequence[Row], count: int = 10) -> dict[str, Any]:
    """The report as data (`tilegen report --json`): the points per status of each family, the rows
    each compiler made, each problem's best `count` rows (as results.jsonl holds them), best first,
    and why none is ranked when none is."""
    problems = by_problem(rows)
    return {"statuses": {family: dict(sorted(status_counts(r for r in rows if r.family == family).items()))
                         for family in sorted({row.family for row in rows})},
            "compilers": dict(sorted(_compilers(rows).items())),
            "problems": [{"family": family, "dtype": dtype, "shape": shape, "gpu": gpu,
                          "ranked": [row.to_dict() for row in ranked[:count]]}
                         for (family, dtype, shape, gpu), ranked in problems.items()],
            **({} if problems else {"none_ranked": none_ranked(rows)})}


def none_ranked(rows: Sequence[Row]) -> str:
    """Why no problem has a ranking: no row is correct and timed (a run without a GPU times nothing)."""
    counts = status_counts(rows)
    said = ", ".join(f"{status} {count}" for status, count in sorted(counts.items())) or "no rows"
    hint = ("; a run without a GPU only compiles: sweep on a GPU to time and rank the variants"
            if counts[str(Status.COMPILED)] else "")
    return f"none ranked: no row is correct and timed ({said}){hint}"


def _rate(row: Row) -> str:
    return f"{row.throughput:.2f} {row.unit}"


def _share(row: Row) -> str:
    return f"{row.ceiling_share:.1%}" if row.ceiling_share is not None else ""
