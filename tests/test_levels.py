"""Compile levels (gen.compiling.levels): each level's options reach the compiler, the cache keeps
a compile per level, every compiled row says its level, and the tuning database names winners from
full-level rows only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gen
from gen.cli.main import main
from gen.compiling.compiler import CompileOptions, compile_variant
from gen.compiling.levels import COMPILE_LEVELS, FULL, LEVELS, level_flags
from gen.compiling.nvrtc import nvrtc_options
from gen.compiling.pool import CompilePool
from gen.core.errors import UsageError
from gen.core.results import Row, Status, row_from_json
from gen.evaluate.options import RunOptions
from gen.families import MatmulVariant
from gen.store.export import t4_result
from gen.store.tuning_db import TuningDB

from .fakes import OtherCompiler
from .test_bad_inputs import assert_one_line_error, run_main
from .test_tunedb import PROBLEM, measured_row


def test_every_level_has_options_for_both_compilers_and_full_has_none() -> None:
    assert level_flags(FULL, "nvrtc") == level_flags(FULL, "nvcc") == ()
    for level in COMPILE_LEVELS[1:]:
        assert level_flags(level, "nvrtc") and level_flags(level, "nvcc")
        nvrtc_options("sm_90", level_flags(level, "nvrtc"))  # NVRTC takes its own spelling as it is


@pytest.mark.parametrize("make", [lambda: CompileOptions(level="fastest"), lambda: RunOptions(compile_level="O9"),
                                  lambda: level_flags("ofc-max", "clang")])
def test_an_unknown_level_or_a_compiler_without_a_column_is_one_line(make) -> None:
    with pytest.raises(UsageError) as refused:
        make()
    assert "\n" not in str(refused.value) and ("one of: full" in str(refused.value) or "clang" in str(refused.value))


def test_the_command_line_refuses_an_unknown_level(capsys) -> None:
    code, out, err = run_main(capsys, ["compile", "matmul", "-p", "tile=8", "--compile-level", "fastest"])
    assert_one_line_error(code, out, err, "invalid choice: 'fastest'")


def test_a_level_is_its_own_cache_entry_with_its_flags_and_its_row_says_it(compile_options, tmp_path: Path) -> None:
    compiler = OtherCompiler()
    flags_seen: list[tuple[str, ...]] = []
    real = compiler.compile
    compiler.compile = lambda sources, arch, flags, *rest: flags_seen.append(tuple(flags)) or real(sources, arch, flags,
                                                                                                   *rest)
    variant = MatmulVariant(tile=8)
    full = compile_variant(variant, CompileOptions(arch="sm_90", cache=tmp_path, compiler=compiler))
    fast = compile_variant(variant, CompileOptions(arch="sm_90", cache=tmp_path, compiler=compiler, level="ptxas-o1"))
    assert full.ok and fast.ok and not fast.cached
    assert (full.level, fast.level) == (FULL, "ptxas-o1")
    assert flags_seen[0][-2:] != LEVELS["ptxas-o1"].nvcc and flags_seen[1][-2:] == LEVELS["ptxas-o1"].nvcc
    again = compile_variant(variant, CompileOptions(arch="sm_90", cache=tmp_path, compiler=compiler, level="ptxas-o1"))
    assert again.cached and len(flags_seen) == 2


def test_a_pool_compiles_one_variant_at_two_levels_as_two_compiles(compile_options, tmp_path: Path) -> None:
    pool = CompilePool(CompileOptions(arch="sm_90", cache=tmp_path, jobs=1, compiler=OtherCompiler()))
    try:
        variant = MatmulVariant(tile=8)
        full, fast = pool.submit(variant), pool.submit(variant, "ptxas-o1")
        assert pool.submit(variant) is full and full is not fast
        assert (full.result(60).level, fast.result(60).level) == (FULL, "ptxas-o1")
    finally:
        pool.kill()


def test_compile_rows_and_the_summary_name_the_level(compile_options, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["compile", "matmul", "-p", "tile=8", "-p", "padding=0", "-p", "bounds=guard", "-p", "sync=both",
                 "--compile-level", "ptxas-o1", "--out", str(out), "--quiet", "--compiler", "nvcc"]) == 0
    assert "at ptxas-o1" in capsys.readouterr().out
    (row,) = [row_from_json(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert row.status is Status.COMPILED and row.compile_level == row.level == "ptxas-o1"
    assert "compile_level" in (out / "results.csv").read_text().splitlines()[0].split(",")


def test_a_row_written_before_levels_reads_as_compiled_at_full() -> None:
    old = measured_row(8, 1.0).to_dict()
    del old["compile_level"]
    row = Row.from_dict(json.loads(json.dumps(old)))
    assert row.compile_level == "" and row.level == FULL


def test_screening_rows_are_kept_but_never_win(tmp_path: Path) -> None:
    db = TuningDB(tmp_path / "t.sqlite")
    fast_and_wrong_level = measured_row(16, 0.1)
    fast_and_wrong_level.compile_level = "ofc-max"
    old = measured_row(8, 2.0)  # a row of tilegen before levels: full
    full = measured_row(32, 1.0)
    full.compile_level = FULL
    db.record([old, full, fast_and_wrong_level])
    assert [row.params["tile"] for row in db.top(PROBLEM, 5)] == [32, 8]
    assert set(db.measured(PROBLEM)) == {old.name, MatmulVariant(tile=32).name}
    assert list(db.measured(PROBLEM, "ofc-max")) == [fast_and_wrong_level.name]
    assert len(db.rows()) == 3 and {row.name for row in db.latest_rows()} == set(db.measured(PROBLEM))
    assert gen.tuned("matmul", 256, 256, 256, gpu="H100", db=db.path).name == MatmulVariant(tile=32).name


def test_a_sweep_resumed_at_another_level_is_refused(compile_options, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    common = ["sweep", "matmul", "-p", "tile=8", "-p", "padding=0", "-p", "bounds=guard", "-p", "sync=both",
              "--size", "64x64x64", "--out", str(out), "--quiet", "--gpus", "0"]
    main([*common, "--compile-level", "ptxas-o1"])
    capsys.readouterr()
    assert main([*common, "--resume"]) == 2
    assert "--compile-level" in capsys.readouterr().err


def test_a_screening_row_exports_to_t4_with_its_level() -> None:
    screened = measured_row(8, 1.0)
    screened.compile_level = "ofc-mid"
    assert t4_result(screened)["configuration"]["compile_level"] == "ofc-mid"
    assert "compile_level" not in t4_result(measured_row(8, 1.0))["configuration"]  # full, as before levels
