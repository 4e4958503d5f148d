"""The one evaluation loop. Every command that evaluates something is a proposer handed to it:
a space (sweep, compile), a search strategy (tune), the finalists' interleaved rounds, a list of
stored winners (revalidate). A sink records the rows (the results log, the tuning database, a
plain list); the engine compiles and runs them.

    outcome = evaluate(proposer, engine, sink, progress, resume_hint)

The loop asks the proposer for as many points as the engine has room for, hands them to the
engine, and gives each finished row to the sink, the proposer and the progress line, until the
proposer has nothing more to propose and every point has its row. A proposer that offers more
(a sweep offers every point at once) has the rest compiled ahead and handed over as rows come
back: a burst of thousands of points would take the coordinator's one interpreter lock from the
thread that feeds the GPUs (scripts/bench_scale.py measured 85-88% of 64 simulated GPUs kept busy
with the burst, 98-99% without). A search may name a cutoff: points
timed from then on stop early once clearly slower than it. Interrupts and failures end
here, once for every command, with one line saying what was kept and how to go on.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from ..core.errors import RunFailed, RunInterrupted
from ..core.progress import Progress
from ..core.results import Row, Status
from .engine import Engine
from .plan import Point


@dataclass
class Proposal:
    """What a proposer offers now."""

    points: list[Point] = field(default_factory=list)  # to evaluate
    rows: list[Row] = field(default_factory=list)  # decided without evaluating (skipped points): recorded
    recalled: list[Row] = field(default_factory=list)  # measured before, kept elsewhere: told, not recorded
    likely: list[Point] = field(default_factory=list)  # what it expects to propose next: compiled ahead, first


class Proposer(Protocol):
    def propose(self, room: int) -> Proposal:
        """What to evaluate next; `room` is how many points keep the engine busy (a guide: a
        proposer that knows everything it wants may offer it all at once). An empty proposal while
        not done means it waits for rows of points in flight."""

    def tell(self, row: Row) -> None:
        """A row of a point it proposed (evaluated now or recalled)."""

    def done(self) -> bool:
        """Whether it will propose nothing more."""

    def timing_cutoff_ms(self) -> float | None:
        """Points still to be timed may stop timing once clearly slower than this (a search's best
        so far, with a margin); None: time every point in full."""


class Sink(Protocol):
    def record(self, rows: list[Row]) -> None:
        """Rows made by this evaluation (kept as they come: a killed run loses none)."""

    def recall(self, rows: list[Row]) -> None:
        """Rows measured before and given to the proposer again (a sink that subclasses Sink
        ignores them unless it says otherwise)."""

    def kept(self) -> str:
        """What is kept, in a few words, for the line an interrupt ends with."""


@dataclass
class Outcome:
    rows: list[Row]  # every row of this evaluation, recalled ones too, in the order they came
    fresh: int  # rows the engine made


class ListSink(Sink):
    """A sink that keeps rows in memory (a compile without --out, finals, revalidate)."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def record(self, rows: list[Row]) -> None:
        self.rows.extend(rows)

    def kept(self) -> str:
        return f"{len(self.rows)} rows evaluated"


def evaluate(proposer: Proposer, engine: Engine, sink: Sink, progress: Progress | None = None,
             resume_hint: str = "") -> Outcome:
    """Evaluate what `proposer` proposes on `engine`, recording rows in `sink` (see the module doc).
    Ctrl-C ends it with RunInterrupted, a run that cannot go on with RunFailed, each saying what
    `sink` kept and `resume_hint` (how to go on)."""
    outcome = Outcome([], 0)
    try:
        _run(proposer, engine, sink, progress, outcome)
    except KeyboardInterrupt:
        raise RunInterrupted(_kept(sink, resume_hint)) from None
    except RunFailed as failed:
        raise RunFailed(f"{failed}; {_kept(sink, resume_hint)}") from None
    finally:
        if progress is not None:
            progress.close()
    return outcome


def _run(proposer: Proposer, engine: Engine, sink: Sink, progress: Progress | None, outcome: Outcome) -> None:
    waiting: deque[Point] = deque()  # proposed, not submitted yet: they go in as the engine has room
    while True:
        engine.stop_timing_above(proposer.timing_cutoff_ms())
        room = engine.room()
        proposal = proposer.propose(max(0, room - len(waiting)))
        waiting.extend(proposal.points)
        engine.submit([waiting.popleft() for _ in range(min(room, len(waiting)))])
        if left := min(len(proposal.points), len(waiting)):  # more than the engine has room for: compiled meanwhile
            engine.compile_ahead(proposal.points[-left:])
        if proposal.likely:
            engine.speculate(proposal.likely)
        if proposal.rows:
            sink.record(proposal.rows)
            _tell(proposer, proposal.rows, None, outcome)
        if proposal.recalled:
            sink.recall(proposal.recalled)
            _tell(proposer, proposal.recalled, progress, outcome)
        if engine.idle and not waiting:
            if proposer.done():
                return
            if not (proposal.points or proposal.rows or proposal.recalled):
                raise RuntimeError(f"{type(proposer).__name__} proposed nothing while nothing was in flight")
            continue
        rows = engine.finished()
        if rows:
            sink.record(rows)
            outcome.fresh += len(rows)
            _tell(proposer, rows, progress, outcome)


def _tell(proposer: Proposer, rows: list[Row], progress: Progress | None, outcome: Outcome) -> None:
    for row in rows:
        proposer.tell(row)
        outcome.rows.append(row)
        if progress is not None:
            progress.advance(progress_text(row), str(row.status))


def progress_text(row: Row) -> str:
    text = f"{row.name} {row.shape} {row.status}".replace("  ", " ")
    if row.median_ms is not None:
        text += f" {row.median_ms:.4g} ms"
    return text


def _kept(sink: Sink, resume_hint: str) -> str:
    return f"{sink.kept()}; {resume_hint}" if resume_hint else sink.kept()


def exit_code(rows: list[Row]) -> int:
    """A command's exit code from its rows: 1 when every point that was not skipped failed to
    compile (nothing compiled, ran or was timed), else 0."""
    statuses = {row.status for row in rows} - {Status.SKIPPED}
    return 1 if statuses == {Status.COMPILE_ERROR} else 0
