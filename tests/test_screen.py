"""Screen fast, confirm at full: a tune's search at a fast compile level, its finalists compiled
at full and timed head to head; only full-level rows win. And the search's own time."""

from __future__ import annotations

from pathlib import Path

import pytest

import gen
from gen.cli.main import main
from gen.core.errors import UsageError
from gen.core.results import FULL_LEVEL
from gen.evaluate.options import RunOptions
from gen.core.results import Row, Status
from gen.families import MatmulVariant
from gen.search.proposers import Search
from gen.search.strategies import SearchSpace, make_strategy
from gen.commands.tune import DEFAULT_SCREEN, TuneOptions, tune
from gen.commands.tune_result import describe
from gen.store.tuning_db import TuningDB

from . import fakes
from .test_bad_inputs import assert_one_line_error, run_main

SPACE: dict = {}  # matmul's default space: 18 variants


def screened_tune(db: Path, executor: fakes.FakeExecutor, **given) -> object:
    options = TuneOptions("matmul", "64x64x64", params=SPACE, db=db, progress=False, top=2,
                          **{"screen": "ofc-max", "strategy": "brute", **given})
    (result,) = tune(options, executor)
    return result


def test_the_search_runs_at_the_screen_level_and_the_finalists_again_at_full(tmp_path: Path, compile_options) -> None:
    db, executor = tmp_path / "t.sqlite", fakes.FakeExecutor()
    result = screened_tune(db, executor)
    stored = TuningDB(db)
    screened, full = stored.measured(result.problem, "ofc-max"), stored.measured(result.problem)
    assert result.screen == "ofc-max" and len(screened) == result.evaluations == result.space
    assert {row.compile_level for row in screened.values()} == {"ofc-max"}
    finalists = {standing.name for standing in result.standings}
    assert len(finalists) == 2 and finalists <= set(full) and len(full) <= 3  # the finalists and the default
    assert {row.compile_level for row in full.values()} == {FULL_LEVEL}
    assert result.winner.compile_level == FULL_LEVEL and stored.best(result.problem).name == result.winner.name
    cubins = {job.name: set() for job in executor.ran}
    for job in executor.ran:
        cubins[job.name].add(job.cubin)
    assert all(len(cubins[name]) == 2 for name in finalists), "a finalist ran the screening cubin in its rounds"
    assert "screened at ofc-max, the finalists compiled and timed again at full" in describe(result)


def test_a_screened_tune_again_recalls_its_screening_rows(tmp_path: Path, compile_options) -> None:
    db = tmp_path / "t.sqlite"
    first = screened_tune(db, fakes.FakeExecutor())
    executor = fakes.FakeExecutor()
    again = screened_tune(db, executor)
    assert again.gpu_evaluations == len(executor.ran) == 2 * 5  # only the finalists' rounds ran
    assert again.winner.name == first.winner.name


def test_without_screening_every_row_is_full(tmp_path: Path, compile_options) -> None:
    db = tmp_path / "t.sqlite"
    result = screened_tune(db, fakes.FakeExecutor(), screen=None)
    assert DEFAULT_SCREEN is None and TuneOptions("matmul", "64x64x64").screening is None  # off until measured
    assert TuneOptions("matmul", "64x64x64", screen=FULL_LEVEL).screening is None
    assert result.screen is None and "screened" not in describe(result)
    rows = TuningDB(db).rows()
    assert len(rows) > result.space and {row.compile_level for row in rows} == {FULL_LEVEL}


def test_gen_tune_returns_screened_variants_with_their_level_and_the_search_time(tmp_path: Path,
                                                                                 compile_options) -> None:
    rows = gen.tune("matmul", "64x64x64", params=SPACE, strategy="bayes", budget=12, db=tmp_path / "t.sqlite",
                    quiet=True, screen="ofc-max", executor=fakes.FakeExecutor())
    assert rows[0]["winner"] and rows[0]["compile_level"] == FULL_LEVEL
    assert {row["compile_level"] for row in rows[1:]} == {FULL_LEVEL, "ofc-max"}
    assert len({row["name"] for row in rows}) == len(rows) >= 12  # one per variant: the 12 searched, the default
    assert rows[0]["search_seconds"] > 0 and len({row["search_seconds"] for row in rows}) == 1


def test_the_summary_line_names_the_search_time(tmp_path: Path, compile_options) -> None:
    result = screened_tune(tmp_path / "t.sqlite", fakes.FakeExecutor(), strategy="bayes", budget=12)
    assert result.search_seconds > 0
    assert f"the search's own {result.search_seconds:.2f} s" in describe(result).splitlines()[0]


def test_a_tune_at_a_fast_compile_level_is_refused_with_the_way_to_screen() -> None:
    with pytest.raises(UsageError) as refused:
        TuneOptions("matmul", "64x64x64", run=RunOptions(compile_level="ofc-max"))
    assert "screen=" in str(refused.value) and "--screen ofc-max" in str(refused.value)
    with pytest.raises(UsageError):
        TuneOptions("matmul", "64x64x64", screen="fastest")


def test_screen_and_no_screen_together_are_one_line(capsys) -> None:
    code, out, err = run_main(capsys, ["tune", "matmul", "--size", "64x64x64", "--screen", "ofc-max", "--no-screen"])
    assert_one_line_error(code, out, err, "not allowed with argument")


def test_tune_kernel_screens_when_asked(tmp_path: Path, compile_options) -> None:
    source = ("extern \"C\" __global__ void add(float* c, const float* a, const float* b, int n) {\n"
              "  int i = blockIdx.x * block_size_x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }\n")
    import numpy as np

    n = 4096
    a, b = np.ones(n, np.float32), np.ones(n, np.float32)
    results, env = gen.tune_kernel("add", source, n, [np.zeros_like(a), a, b, np.int32(n)],
                                   {"block_size_x": [32, 64, 128, 256]}, db=tmp_path / "t.sqlite", quiet=True,
                                   executor=fakes.FakeExecutor(), screen="ptxas-o1")
    assert env["screen"] == "ptxas-o1" and env["search_seconds"] >= 0 and len(results) == 4


def test_a_screening_search_names_its_best_so_far_for_a_full_compile_as_they_change() -> None:
    variants = [MatmulVariant(tile=tile, padding=padding) for tile in (8, 16, 32) for padding in (0, 1)]
    search = Search(make_strategy("brute", SearchSpace(variants)), None, len(variants), all_at_once=True,
                    level="ofc-max", confirm=2)
    proposal = search.propose(4)
    assert {p.level for p in proposal.points} == {"ofc-max"} and not proposal.likely
    for point, ms in zip(proposal.points[:3], (3.0, 1.0, 2.0)):
        search.tell(Row(point.variant.name, "matmul", {}, Status.OK, median_ms=ms, error=0.0))
    named = search.propose(4).likely
    assert [p.variant for p in named] == [proposal.points[1].variant, proposal.points[2].variant]
    assert {p.level for p in named} == {None}  # the run's level: full
    assert not search.propose(4).likely  # unchanged: not named again
    search.tell(Row(proposal.points[3].variant.name, "matmul", {}, Status.OK, median_ms=0.5, error=0.0))
    assert [p.variant for p in search.propose(4).likely][0] == proposal.points[3].variant
    plain = Search(make_strategy("brute", SearchSpace(variants)), None, len(variants), all_at_once=True, confirm=2)
    plain.propose(4)
    plain.tell(Row(proposal.points[0].variant.name, "matmul", {}, Status.OK, median_ms=1.0, error=0.0))
    assert not plain.propose(4).likely  # no screening: nothing to confirm ahead
