"""scripts/bench_cold.py's measures, on made-up rows (the script itself needs a GPU): the rank
correlation, the winner after confirmation, the time to within 1%, and rows kept as they come."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

from .conftest import REPO


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_cold", REPO / "scripts" / "bench_cold.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(times: dict[str, float], level: str = "full") -> list[dict]:
    return [{"name": name, "status": "ok", "median_ms": ms, "compile_seconds": 0.5, "registers": 64,
             "stack_bytes": 0, "compile_level": level} for name, ms in times.items()]


def test_spearman_is_one_for_the_same_order_and_minus_one_for_the_reverse(bench) -> None:
    assert bench.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert bench.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert bench.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.8660254, rel=1e-6)  # a tie: mean ranks


def test_the_winner_after_confirmation_and_the_full_winners_rank(bench) -> None:
    full = {"a": 1.0, "b": 1.1, "c": 1.2, "d": 2.0}
    screened = {"a": 3.0, "b": 2.0, "c": 2.5, "d": 1.0}  # full's winner is third by this level
    row = bench.fidelity_row("s", "ofc-max", rows(screened, "ofc-max"), rows(full), 3, 1.0)
    assert row["full_winner_rank"] == 4 and not row["confirmed_same_winner"]
    assert row["confirmed_slower"] == "10.00%" and row["spearman"] == pytest.approx(-0.8)
    kept = bench.fidelity_row("s", "ofc-max", rows(screened, "ofc-max"), rows(full), 4, 1.0)
    assert kept["confirmed_same_winner"] and kept["confirmed_slower"] == "0.00%"


def test_time_to_within_one_percent_goes_by_full_level_times(bench) -> None:
    reference = {"a": 1.0, "b": 1.005, "c": 2.0}
    result = {"trace": [[0.5, "c"], [1.5, "b"], [2.5, "a"]], "wall_s": 3.0, "evaluations": 3, "winner": "a",
              "search_s": 0.01, "gpu_share": 0.5}
    row = bench.tune_row("s", "brute", "ofc-mid", result, reference)
    assert row["s_to_within_1pct"] == 1.5 and row["winner_slower_than_best"] == "0.00%"


def test_each_row_is_in_the_csv_and_the_markdown_as_it_comes(bench, tmp_path: Path) -> None:
    tables = bench.Tables(tmp_path)
    tables.add("fidelity", {"space": "s", "level": "full", "variants": 0})
    assert "| s | full | 0 |" in (tmp_path / "bench_cold.md").read_text()
    tables.add("fidelity", {"space": "s", "level": "ofc-max", "variants": 2, "spearman": 0.9})
    with (tmp_path / "fidelity.csv").open() as file:
        assert [row["level"] for row in csv.DictReader(file)] == ["full", "ofc-max"]
    later = bench.Tables(tmp_path)  # another run into the same folder keeps the rows before it
    later.add("tunes", {"space": "s", "strategy": "brute", "screen": ""})
    text = (tmp_path / "bench_cold.md").read_text()
    assert "| s | ofc-max | 2 | 0.9 |" in text and "| s | brute |" in text
