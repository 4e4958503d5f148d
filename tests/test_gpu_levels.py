"""On a real GPU (marker `gpu`): kernels compiled at every compile level are right, and a screened
tune names a winner measured at full. Skipped with a reason where there is no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.compiling.levels import COMPILE_LEVELS, FULL
from gen.core.results import Status
from gen.core.timing import TimingOptions
from gen.evaluate.options import RunOptions
from gen.commands.sweep import SweepOptions, sweep
from gen.commands.tune import TuneOptions, tune
from gen.store.tuning_db import TuningDB

pytestmark = pytest.mark.gpu
QUICK = TimingOptions(budget_s=0.05, min_samples=5)
SGEMM = {"bm": ["64", "128"], "bn": ["64"], "bk": ["8"], "wm": ["32"], "wn": ["32", "64"], "tm": ["4", "8"],
         "tn": ["4"], "bounds": ["guard"]}


@pytest.mark.parametrize("level", COMPILE_LEVELS)
def test_every_level_compiles_right_kernels(tmp_path: Path, level: str) -> None:
    report = sweep(SweepOptions("sgemm", tmp_path, params=SGEMM, sizes=["512x512x512", "1000x999x1001"],
                                progress=False, run=RunOptions(timing=QUICK, compile_level=level)))
    ran = [row for row in report.rows if row.status is not Status.SKIPPED]
    assert ran and all(row.status is Status.OK for row in ran), [(r.name, r.status, r.message) for r in ran]
    assert {row.compile_level for row in ran} == {level}


def test_a_screened_tune_names_a_winner_timed_at_full(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite"
    (result,) = tune(TuneOptions("sgemm", "1024x1024x1024", params=SGEMM, strategy="brute", db=db, progress=False,
                                 top=2, screen="ofc-max"))
    stored = TuningDB(db)
    assert result.winner.compile_level == FULL and stored.best(result.problem).name == result.winner.name
    assert {row.compile_level for row in stored.measured(result.problem, "ofc-max").values()} == {"ofc-max"}
