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
    rows = gen.tune("matmul", "64x64x64", params={"padding": 0}, strategy="random", budget=4, db=db, finalists=2,
                    quiet=True, executor=fakes.FakeExecutor())
    assert rows[0]["winner"] and not any(row["winner"] for row in rows[1:])
    assert rows[0]["gpu_model"].startswith("Fake GPU") and rows[0]["shape"] == "64x64x64"
    others = [row["median_ms"] for row in rows[1:] if row["status"] == "ok"]
    assert others == sorted(others) and len(rows) >= 4
    assert all(row["params"]["padding"] == 0 for row in rows)
    assert gen.tuned("matmul", 64, 64, 64, gpu="fake", db=db).name == rows[0]["name"]  # no GPU asked


def test_tuned_names_an_unknown_gpu_model_as_an_argument(tmp_path: Path, compile_options) -> None:
    db = tmp_path / "t.sqlite"
    gen.tune("matmul", "64x64x64", params={"tile": 8, "padding": 0}, strategy="brute", db=db, finalists=1,
             quiet=True, executor=fakes.FakeExecutor())
    with pytest.raises(gen.UsageError, match=r"^gpu 'A100' matches 0 GPU models in .*\(known: Fake GPU"):
        gen.tuned("matmul", 64, 64, 64, gpu="A100", db=db)


def test_sweep_takes_keywords_and_returns_the_rows_it_wrote(tmp_path: Path, compile_options) -> None:
    out = tmp_path / "run"
    rows = gen.sweep("matmul", "64x64x64", out=out, params={"tile": [8, 16], "padding": 0, "bounds": "guard"},
                     quiet=True, executor=fakes.FakeExecutor())
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
    *keywords, old = list(tune.parameters.values())[2:]  # old: the keywords of 0.2, taken until 0.4
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in keywords) and old.kind is inspect.Parameter.VAR_KEYWORD
    assert {"params", "strategy", "budget", "db"} <= set(tune.parameters)
    assert {"sizes", "out", "params"} <= set(inspect.signature(gen.sweep).parameters)


def test_errors_are_exported_and_variant_refuses_values_outside_the_space(tmp_path: Path) -> None:
    assert issubclass(gen.UsageError, gen.TilegenError)
    with pytest.raises(gen.UsageError, match=r"is not a valid matmul variant: .*1024"):
        get_family("matmul").variant({"tile": 64})
    with pytest.raises(gen.UsageError, match="^load_families' folder .*: no such folder"):
        gen.load_families(tmp_path / "missing")


@pytest.mark.parametrize("function, command", [(gen.sweep, ["sweep", "matmul"]), (gen.tune, ["tune", "matmul"])],
                         ids=["sweep", "tune"])
def test_the_keywords_are_the_flags_names(function, command: list[str], capsys) -> None:
    from gen.cli.parser import build_parser

    parser = build_parser()
    dests = set(vars(parser.parse_args(command)))  # what each flag sets (--size: sizes, -p: params)
    with pytest.raises(SystemExit):
        parser.parse_args([*command, "--help"])
    flags = capsys.readouterr().out
    keywords = [name for name, parameter in inspect.signature(function).parameters.items()
                if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name != "executor"]  # no flag passes an object
    assert [name for name in keywords if name not in dests and f"--{name.replace('_', '-')}" not in flags] == []


def test_the_keywords_of_0_2_still_work_with_a_one_line_deprecation_note(tmp_path: Path, compile_options,
                                                                         capsys) -> None:
    db = tmp_path / "t.sqlite"
    with pytest.warns(DeprecationWarning) as notes:
        rows = gen.tune("matmul", "64x64x64", params={"tile": 8, "padding": 0}, strategy="brute", db=db, top=1,
                        progress=False, compile_jobs=1, silence_s=30.0, executor=fakes.FakeExecutor())
    assert [str(note.message) for note in notes if note.category is DeprecationWarning] == [
        f"gen.tune({old}=) is now {new}= (the flag --{new}); {old}= goes in tilegen 0.4"
        for old, new in [("top", "finalists"), ("progress", "quiet"), ("compile_jobs", "jobs"), ("silence_s", "timeout")]]
    assert rows[0]["winner"] and capsys.readouterr().err == ""  # progress=False: as quiet=True, no progress line
    with pytest.raises(TypeError, match="unexpected keyword argument 'top'"):  # a sweep has no finalists
        gen.sweep("matmul", "64x64x64", dry_run=True, top=1)


def test_a_dry_run_returns_the_points_the_command_line_counts_and_writes_nothing(tmp_path: Path, capsys) -> None:
    import re

    from gen.cli.main import main

    out = tmp_path / "run"
    points = gen.sweep("matmul", ["64x64x64", "32x32x32"], out=out, params={"padding": 0}, dry_run=True)
    assert main(["sweep", "matmul", "--size", "64x64x64", "--size", "32x32x32", "-p", "padding=0", "--dry-run"]) == 0
    counted = re.search(r"; ([\d,]+) to run", capsys.readouterr().out)
    assert len(points) == int(counted.group(1).replace(",", "")) > 0 and not out.exists()
    assert {point["shape"] for point in points} == {"64x64x64", "32x32x32"}
    searched = gen.tune("matmul", "64x64x64", params={"padding": 0}, strategy="brute", db=tmp_path / "t.sqlite",
                        dry_run=True)
    assert main(["tune", "matmul", "--size", "64x64x64", "-p", "padding=0", "--strategy", "brute", "--dry-run"]) == 0
    assert f": {len(searched):,} variants to search by brute" in capsys.readouterr().out
    assert not (tmp_path / "t.sqlite").exists()
