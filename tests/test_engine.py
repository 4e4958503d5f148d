"""The engine and the one evaluation loop: compiles and GPU work overlap, rows stream, a plan checks
each point once, every command is a proposer, and batches of proposals keep their quality."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from gen.compiling.pool import CompilePool
from gen.core.results import Measurement, Row, Status
from gen.core.timing import EARLY_STOP_MARGIN, TimingOptions, slower_than_cutoff
from gen.evaluate.engine import Checking, Engine
from gen.evaluate.loop import ListSink, Proposal, evaluate
from gen.evaluate.options import RunOptions
from gen.evaluate.plan import Point, make_plan
from gen.gpu.local import LocalExecutor
from gen.gpu.sanitize import sanitizer_path
from gen.families import MatmulVariant, get_family
from gen.families.space import Space
from gen.search.proposers import PointList, Rounds, Search
from gen.search.replay import replay
from gen.search.strategies import SearchSpace, make_strategy
from gen.commands.sweep import SweepOptions, sweep
from gen.store.results_log import read_rows

from . import fakes
from .conftest import REPO
from .waits import patient

WAIT_FOR_RELEASE = 'if [ "$RUN" -ge 2 ]; then echo "waiting $RUN" > "$ANNOUNCE"; read line < "$RELEASE"; fi; ' \
                   'exec "$REAL" "$@"'


class NotingExecutor(fakes.FakeExecutor):
    """Says on a queue when each job reaches the (fake) GPU."""

    def __init__(self, noted) -> None:
        super().__init__()
        self.noted = noted

    def run(self, jobs):
        for job, measurement in super().run(jobs):
            self.noted(job.name)
            yield job, measurement


def test_the_gpu_starts_while_the_compiler_still_compiles(tmp_path: Path, fake_nvcc, monkeypatch) -> None:
    """Compiles after the first wait for the test's word; meanwhile the first variant's point must
    reach the GPU: no waiting for the whole space to compile."""
    release = tmp_path / "release"
    import os

    os.mkfifo(release)
    nvcc = fake_nvcc(compile=WAIT_FOR_RELEASE.replace('"$RELEASE"', f'"{release}"'))
    monkeypatch.setenv("PATH", nvcc.path)
    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path / "cold"))
    reached_gpu = threading.Event()
    releaser = threading.Thread(target=lambda: (reached_gpu.wait(patient(120)), _release(release, 3)), daemon=True)
    releaser.start()
    executor = NotingExecutor(lambda name: reached_gpu.set())
    report = sweep(SweepOptions("matmul", tmp_path / "run", params={"tile": ["8", "16", "32"], "padding": ["0"],
                                                                    "bounds": ["guard"], "sync": ["both"]},
                                sizes=["64x64x64"], progress=False, run=RunOptions(compile_jobs=1)), executor)
    assert nvcc.announcements.next().startswith("waiting 2")  # compile 2 waited ...
    assert reached_gpu.is_set()  # ... and it was let go only once a job had reached the GPU
    assert report.stats.compiled == 3 and report.stats.measured == 3 and len(executor.ran) == 3


def _release(fifo: Path, count: int) -> None:
    """Let `count - 1` waiting compiles go, one line each."""
    released = 0
    while released < count - 1:
        try:
            with open(fifo, "w") as writer:
                writer.write("go\n")
            released += 1
        except BrokenPipeError:  # opened beside a reader that was closing after its line: write again
            continue


def test_a_plan_checks_each_point_once_and_the_engine_compiles_each_variant_once(compile_options) -> None:
    family = get_family("matmul")
    space = Space.default(family, {"tile": ["16"], "bounds": ["none"], "padding": ["0"], "sync": ["both"]})
    shapes = [family.parse_shape(s) for s in ("64x64x64", "100x64x64", "128x128x128")]
    plan = make_plan(family, space, shapes, ["none"])
    assert [str(p.shape) for p in plan.runnable] == ["64x64x64", "128x128x128"]
    (group,) = plan.skipped.values()
    assert "multiples of tile 16" in group.reason and str(group.example.shape) == "100x64x64"
    executor = fakes.FakeExecutor()
    with Engine(CompilePool(compile_options), executor, Checking(seed=3, timing=None)) as engine:
        outcome = evaluate(PointList(plan.runnable), engine, ListSink())
    assert [row.status for row in outcome.rows] == [Status.OK, Status.OK] and len(executor.ran) == 2
    assert engine.stats.compiled + engine.stats.cached == 1


def test_the_engine_leaves_the_executor_it_was_given_open(compile_options) -> None:
    family = get_family("matmul")
    executor = fakes.FakeExecutor()
    points = [Point(family.variant({"tile": "16"}), family.parse_shape("64x64x64"))]
    with Engine(CompilePool(compile_options), executor, Checking(seed=3, timing=None)) as engine:
        assert [row.status for row in evaluate(PointList(points), engine, ListSink()).rows] == [Status.OK]
    assert not executor.closed


def test_rounds_measure_the_finalists_together_one_round_at_a_time(compile_options) -> None:
    family = get_family("matmul")
    finalists = [family.variant({"tile": tile}) for tile in ("8", "16")]
    rounds = Rounds(finalists, family.parse_shape("64x64x64"), 3)
    executor = fakes.FakeExecutor()
    with Engine(CompilePool(compile_options), executor, Checking(seed=3, timing=None)) as engine:
        evaluate(rounds, engine, ListSink())
    ran = [job.name for job in executor.ran]
    assert [set(ran[i:i + 2]) for i in (0, 2, 4)] == [{v.name for v in finalists}] * 3  # A B, A B, A B
    standings = rounds.standings()
    assert [s.name for s in standings] == [finalists[1].name, finalists[0].name]  # tile 16 is faster (fakes)
    assert all(len(s.medians_ms) == 3 for s in standings)


class SanitizingExecutor(fakes.FakeExecutor):
    """compute-sanitizer finds one race in every variant; or, with `broken`, cannot run at all."""

    def __init__(self, broken: bool = False) -> None:
        super().__init__()
        self.broken = broken

    def run(self, jobs):
        for job, measurement in super().run(jobs):
            if job.sanitizer:
                measurement = (Measurement(Status.LAUNCH_ERROR, "ToolMissing: no compute-sanitizer") if self.broken
                               else replace(measurement, hazards={"racecheck": 1, "synccheck": 0}))
            yield job, measurement


def test_the_engine_sends_each_variant_a_sanitizer_job_first_whose_hazards_join_its_first_row(
        compile_options) -> None:
    family = get_family("matmul")
    variants = [family.variant({"tile": tile}) for tile in ("8", "16")]
    points = [Point(v, family.parse_shape(shape)) for v in variants for shape in ("64x64x64", "128x64x64")]
    executor = SanitizingExecutor()
    with Engine(CompilePool(compile_options), executor, Checking(seed=3, timing=None, sanitize=True)) as engine:
        rows = evaluate(PointList(points), engine, ListSink()).rows
    for variant in variants:
        ran = [(job.shape, job.sanitizer) for job in executor.ran if job.name == variant.name]
        assert ran[0] == (family.sanitize_size(variant), True) and [s for _, s in ran].count(True) == 1
        by_shape = {row.shape: row for row in rows if row.name == variant.name}
        first, other = by_shape["64x64x64"], by_shape["128x64x64"]  # the first point submitted, and the next
        assert first.status is Status.RACY and first.hazards == {"racecheck": 1, "synccheck": 0}
        assert first.message == "compute-sanitizer hazards: racecheck 1"
        assert other.status is Status.OK and other.hazards is None


def test_a_sanitizer_job_that_cannot_run_is_its_variants_row_and_its_job_is_not_sent(compile_options) -> None:
    family = get_family("matmul")
    point = Point(family.variant({"tile": "16"}), family.parse_shape("64x64x64"))
    executor = SanitizingExecutor(broken=True)
    with Engine(CompilePool(compile_options), executor, Checking(seed=3, timing=None, sanitize=True)) as engine:
        (row,) = evaluate(PointList([point]), engine, ListSink()).rows
    assert (row.status, row.message, row.hazards) == (Status.LAUNCH_ERROR, "ToolMissing: no compute-sanitizer", None)
    assert [job.sanitizer for job in executor.ran] == [True]


def test_sanitizer_jobs_on_this_hosts_gpus_give_racy_rows_and_every_point_its_row(
        compile_options, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the seat table (simulated GPUs): the variant's job, sent once its sanitizer job came
    back, reaches a GPU like any other."""
    tool = tmp_path / "bin" / "compute-sanitizer"
    tool.parent.mkdir()
    tool.write_text('#!/bin/sh\necho "========= ERROR SUMMARY: 2 errors"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    sanitizer_path.cache_clear()
    family = get_family("matmul")
    points = [Point(family.variant({"tile": tile}), family.parse_shape(shape))
              for tile in ("8", "16") for shape in ("64x64x64", "128x64x64")]
    executor = LocalExecutor([0, 1], target="tests.fakes:steady_worker")
    try:
        with Engine(CompilePool(compile_options), executor, Checking(seed=3, timing=None, sanitize=True)) as engine:
            rows = evaluate(PointList(points), engine, ListSink()).rows
    finally:
        executor.close()
        sanitizer_path.cache_clear()
    statuses = {(row.name, row.shape): row.status for row in rows}
    assert statuses == {(point.variant.name, str(point.shape)): Status.RACY if str(point.shape) == "64x64x64"
                        else Status.OK for point in points}  # each variant's first point
    assert [row.hazards for row in rows if row.status is Status.RACY] == [{"racecheck": 2, "synccheck": 2,
                                                                          "memcheck": 2}] * 2


class FeedCounting(fakes.FakeExecutor):
    """Notes, as it takes each job, how many more wait in the engine's feed."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[int] = []

    def run(self, jobs):
        for job, measurement in super().run(jobs):
            self.waiting.append(len(jobs))
            yield job, measurement


def test_points_offered_all_at_once_reach_the_engine_as_it_has_room(compile_options) -> None:
    """A sweep offers every point at once. Handed to the engine in one burst, they all became jobs
    at the start, and making them took the interpreter lock from the thread that feeds the GPUs;
    now the loop hands them over as rows come back, so the feed never holds more than the room."""
    family = get_family("matmul")
    shapes = [family.parse_shape(f"{32 * m}x32x32") for m in range(1, 121)]
    points = [Point(family.variant({"tile": "16"}), shape) for shape in shapes]
    executor = FeedCounting()
    with Engine(CompilePool(compile_options), executor, Checking(seed=3, timing=None)) as engine:
        room = engine.room()
        outcome = evaluate(PointList(points), engine, ListSink())
    assert sorted(row.shape for row in outcome.rows) == sorted(str(shape) for shape in shapes)
    assert {row.status for row in outcome.rows} == {Status.OK}
    assert 0 < max(executor.waiting) <= room < len(points)


class Stalled:
    """A proposer that waits for rows while nothing is in flight: a bug the loop must not hang on."""

    def propose(self, room: int) -> Proposal:
        return Proposal()

    def tell(self, row: Row) -> None:
        pass

    def done(self) -> bool:
        return False

    def timing_cutoff_ms(self) -> None:
        return None


def test_a_proposer_that_waits_for_nothing_ends_the_loop_instead_of_hanging(compile_options) -> None:
    with Engine(CompilePool(compile_options), None, Checking(seed=1, timing=None)) as engine:
        with pytest.raises(RuntimeError, match="Stalled proposed nothing while nothing was in flight"):
            evaluate(Stalled(), engine, ListSink())


def test_bayes_with_eight_proposals_in_flight_keeps_its_quality() -> None:
    """The constant liar: 100 evaluations asked as a tune asks with eight in flight, on the recorded
    H200 sgemm space, land within 2% of the exhaustive best in at least 4 of 5 seeds, as one at a time does."""
    rows = read_rows(REPO / "docs" / "results" / "data" / "h200" / "sgemm-2048-exhaustive.jsonl")
    recorded = {r.name: r.median_ms if r.status == "ok" else None for r in rows}
    space = SearchSpace([v for v in Space.default(get_family("sgemm")).expand().valid if v.name in recorded])
    optimum = min(t for t in recorded.values() if t is not None)
    found = [min(t for _, t in replay("bayes", recorded, space, 100, seed, in_flight=8) if t is not None)
             for seed in range(5)]
    assert sum(best <= 1.02 * optimum for best in found) >= 4


class OneThenAnother:
    """Proposes one point, and once its row is told, another under a timing cutoff of half its median."""

    def __init__(self, first: Point, second: Point):
        self.waiting, self.told = [first, second], []

    def propose(self, room: int) -> Proposal:
        if len(self.waiting) == 2 or (self.waiting and self.told):
            return Proposal([self.waiting.pop(0)])
        return Proposal()

    def tell(self, row: Row) -> None:
        self.told.append(row)

    def done(self) -> bool:
        return not self.waiting

    def timing_cutoff_ms(self) -> float | None:
        return self.told[0].median_ms / 2 if self.told else None


def test_points_timed_after_a_search_names_a_cutoff_carry_it_to_the_gpu(compile_options) -> None:
    executor = fakes.FakeExecutor()
    first, second = (Point(MatmulVariant(tile=tile), get_family("matmul").parse_shape(
        "64x64x64"), "none") for tile in (8, 16))
    proposer = OneThenAnother(first, second)
    with Engine(CompilePool(compile_options), executor, Checking(seed=1, timing=TimingOptions())) as engine:
        evaluate(proposer, engine, ListSink())
    assert [job.timing.stop_above_ms for job in executor.ran] == [None, proposer.told[0].median_ms / 2]


def test_a_search_names_its_best_so_far_with_a_margin_as_the_cutoff_unless_told_not_to() -> None:
    space = SearchSpace(Space.from_options(get_family("matmul"), ["tile=8,16", "padding=0", "bounds=guard"]).expand().valid)
    rows = [Row(name=v.name, family="matmul", params=v.params(), status=Status.OK, median_ms=ms) for v, ms in zip(space.variants, (2.0, 1.0))]
    for early_stop, expected in ((EARLY_STOP_MARGIN, [None, 2.0 * 1.1, 1.0 * 1.1]), (None, [None, None, None])):
        search = Search(make_strategy("brute", space, 0), None, budget=10, early_stop=early_stop)
        search.propose(10)
        cutoffs = [search.timing_cutoff_ms()]
        for row in rows:
            search.tell(row)
            cutoffs.append(search.timing_cutoff_ms())
        assert cutoffs == pytest.approx(expected) if early_stop else cutoffs == expected


@pytest.mark.parametrize("samples, cutoff, stops", [
    ([2.0] * 4, 1.0, False),  # too few samples to tell
    ([2.0] * 5, 1.0, True),
    ([2.0, 2.0, 0.9, 2.0, 2.0], 1.0, False),  # one as fast as the cutoff
    ([2.0] * 5, None, False),  # no cutoff: timed in full
])
def test_timing_stops_early_only_when_every_sample_of_enough_is_slower_than_the_cutoff(
        samples: list[float], cutoff: float | None, stops: bool) -> None:
    assert slower_than_cutoff(samples, TimingOptions(stop_above_ms=cutoff)) is stops
