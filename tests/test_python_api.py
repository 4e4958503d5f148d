"""Tuning from Python: gen.sweep and gen.tune (keyword arguments, rows back as dicts, the CLI's
drivers), gen.tuned(gpu=...) without a GPU, and the errors `gen` exports."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

import gen
from gen.families import get_family

from . import fakes


def test_tune_returns_the_rows_winner_first_and_tuned_finds_it_by_gpu_name(tmp_path: Path, compile_options) -> None:
    db = tmp_path / "t.sqlite"
    rows = gen.tune("matmul", "64x64x64", params={"padding": 0}, strategy="random", budget=4, db=db, top=2,
                    progress=False, executor=fakes.FakeExecutor())
    assert rows[0]["winner"] and not any(row["winner"] for row in rows[1:])
    assert rows[0]["gpu_model"].startswith("Fake GPU") and rows[0]["shape"] == "64x64x64"
    others = [row["median_ms"] for row in rows[1:] if row["status"] == "ok"]
    assert others == sorted(others) and len(rows) >= 4
    assert all(row["params"]["padding"] == 0 for row in rows)
    assert gen.tuned("matmul", 64, 64, 64, gpu="fake", db=db).name == rows[0]["name"]  # no GPU asked


def test_tuned_names_an_unknown_gpu_model_as_an_argument(tmp_path: Path, compile_options) -> None:
    db = tmp_path / "t.sqlite"
    gen.tune("matmul", "64x64x64", params={"tile": 8, "padding": 0}, strategy="brute", db=db, top=1,
             progress=False, executor=fakes.FakeExecutor())
    with pytest.raises(gen.UsageError, match=r"^gpu 'A100' matches 0 GPU models in .*\(known: Fake GPU"):
        gen.tuned("matmul", 64, 64, 64, gpu="A100", db=db)


def test_sweep_takes_keywords_and_returns_the_rows_it_wrote(tmp_path: Path, compile_options) -> None:
    out = tmp_path / "run"
    rows = gen.sweep("matmul", "64x64x64", out=out, params={"tile": [8, 16], "padding": 0, "bounds": "guard"},
                     progress=False, executor=fakes.FakeExecutor())
    written = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {row["name"] for row in rows} == {row["name"] for row in written}
    assert {row["params"]["tile"] for row in rows if row["status"] == "ok"} == {8, 16}


def test_sweep_refuses_bad_arguments_by_their_names(tmp_path: Path) -> None:
    with pytest.raises(gen.UsageError, match="strategy 'fast' is not one of"):
        gen.tune("matmul", "64x64x64", strategy="fast", db=tmp_path / "t.sqlite")
    with pytest.raises(gen.UsageError, match="^cache 'l3' is not one of"):
        gen.sweep("matmul", "64x64x64", out=tmp_path / "r", cache_configs="l3")
    with pytest.raises(TypeError):  # the keywords are the signature: a CLI flag's spelling is not one
        gen.sweep("matmul", "64x64x64", out=tmp_path / "r", timing_budget_s=1)


def test_the_python_api_keeps_one_signature_for_tools_built_on_it() -> None:
    tune = inspect.signature(gen.tune)
    assert list(tune.parameters)[:2] == ["family", "size"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(tune.parameters.values())[2:])
    assert {"params", "strategy", "budget", "db"} <= set(tune.parameters)
    assert {"sizes", "out", "params"} <= set(inspect.signature(gen.sweep).parameters)


def test_errors_are_exported_and_variant_refuses_values_outside_the_space(tmp_path: Path) -> None:
    assert issubclass(gen.UsageError, gen.TilegenError)
    with pytest.raises(gen.UsageError, match=r"is not a valid matmul variant: .*1024"):
        get_family("matmul").variant({"tile": 64})
    with pytest.raises(gen.UsageError, match="^load_families' folder .*: no such folder"):
        gen.load_families(tmp_path / "missing")
