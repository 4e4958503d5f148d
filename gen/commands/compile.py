"""`tilegen compile`: every point of a space compiled (no GPU), rows kept as they come (in a results
log with --out), and a table of the resources each variant uses."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from ..core.progress import Progress
from ..core.results import Row, Status
from ..core.table import text_table
from ..evaluate.engine import EngineStats
from ..evaluate.loop import Sink, evaluate
from ..evaluate.plan import ANNOUNCE_POINTS, make_plan, space_line
from ..evaluate.session import Session
from ..families.space import Space
from ..store.results_log import ResultLog
from ..search.proposers import PointList


@dataclass
class CompileReport:
    rows: list[Row]  # the plan's skipped rows, then each compile's row as it finished
    stats: EngineStats
    filtered: int = 0  # points the name pattern left out


class CompileSink(Sink):
    """The rows of a compile, kept in memory and, with --out, in its results log as they come."""

    def __init__(self, total: int, log: ResultLog | None):
        self.total, self.log = total, log
        self.rows: list[Row] = []

    def record(self, rows: list[Row]) -> None:
        self.rows.extend(rows)
        for row in rows if self.log else ():
            self.log.append(row)

    def kept(self) -> str:
        compiled = sum(row.status != Status.SKIPPED for row in self.rows)
        kept = f"; {len(self.rows)} rows kept in {self.log.path}" if self.log else ""
        return f"{compiled} of {self.total} variants compiled{kept}"


def compile_space(space: Space, pattern: str | None, keep_skipped: bool, session: Session,
                  log: ResultLog | None, progress: bool = True) -> CompileReport:
    """Compile every point of `space` whose name matches `pattern` in a compile-only `session`;
    skipped points first. Without `progress`, nothing is said on stderr."""
    made_by = session.pool.provenance(space.family)  # the compiler and the template are there
    say = (lambda line: print(line, file=sys.stderr)) if progress else (lambda line: None)
    if len(space) >= ANNOUNCE_POINTS:
        say(f"compile: {space_line(space, 1)}; checking them")
    plan = make_plan(space.family, space, [None], [""], pattern, keep_skipped, arch=made_by["arch"])
    say(f"compile: {plan.describe()}")
    skipped = plan.skipped_rows(made_by, keep_skipped)
    sink = CompileSink(len(plan.runnable), log)
    engine = session.engine()
    try:
        with engine:
            evaluate(PointList(plan.runnable, skipped), engine, sink,
                     Progress(len(plan.runnable), "compile", enabled=progress))
    finally:
        if log:
            log.finish()
    return CompileReport(sink.rows, engine.stats, plan.filtered)


def resource_table(rows: list[Row]) -> str:
    body = [[r.name, r.status, r.registers, r.static_shared_bytes, r.dynamic_shared_bytes, r.spill_bytes,
             r.stack_bytes, r.compile_seconds, _note(r)] for r in rows]
    return text_table(["variant", "status", "regs", "static smem", "dyn smem", "spill", "stack", "seconds",
                       "note"], body)


def _note(row: Row) -> str:
    """The first line of a row's message; a summary of skipped points says how many it stands for."""
    counted = f"{row.skipped_count} points like this: " if row.skipped_count and row.skipped_count > 1 else ""
    text = row.message.strip()
    return counted + (text.splitlines()[0][:100] if text else "")
