"""The tilegen command: one-line errors with exit code 2, tables and rows for compile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gen.cli import main


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gen", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("args, message", [
    (["render", "matmul", "-p", "tile=64"], "tile 64 gives 4096 threads per block; the CUDA limit is 1024"),
    (["render", "matmul", "-p", "bounds=clamp"], "bounds 'clamp' is not one of: none, guard, split"),
    (["render", "matmul", "-p", "tile"], "must look like name=value"),
    (["render", "conv", "-p", "tile=8"], "unknown family 'conv'; families: matmul, sgemm, transpose, copy"),
    (["render", "transpose", "-p", "rows=12"], "rows 12 does not divide tile 32"),
    (["compile", "matmul", "-p", "sync=sometimes"], "sync 'sometimes' is not one of"),
    (["compile", "matmul", "--arch", "volta"], "--arch 'volta' is not a GPU architecture"),
    (["compile", "matmul", "--filter", "nothing-like-this"], "no matmul variant matches --filter"),
    (["list", "conv"], "unknown family 'conv'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_input_is_one_line_and_exit_code_2(args: list[str], message: str) -> None:
    done = run_cli(*args)
    assert done.returncode == 2
    assert done.stderr.startswith("tilegen: error: ")
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_list_shows_parameters_values_and_defaults(capsys) -> None:
    assert main(["list", "transpose"]) == 0
    out = capsys.readouterr().out
    assert "method" in out and "naive, shared" in out and "default variant: transpose_f32_shared_t32_r8_p1_guard_both" in out


def test_render_prints_the_variant(capsys) -> None:
    assert main(["render", "matmul", "-p", "tile=8", "-p", "padding=1"]) == 0
    assert 'extern "C" __global__ void matmul_f32_t8_p1_guard_both(' in capsys.readouterr().out


def test_compile_prints_resources_and_writes_rows(tmp_path: Path, compile_options) -> None:
    out = tmp_path / "run"
    done = run_cli("compile", "transpose", "-p", "method=shared", "-p", "tile=32,64", "-p", "rows=8,32",
                   "-p", "bounds=guard", "-p", "padding=1", "-p", "vec=1", "-p", "group=0", "--arch", "sm_90", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "transpose_f32_shared_t32_r8_p1_guard_both" in done.stdout and "4224" in done.stdout
    assert "3 compiled" in done.stdout and "1 skipped" in done.stdout
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by_status = {row["status"] for row in rows}
    assert by_status == {"compiled", "skipped"}
    skipped = next(row for row in rows if row["status"] == "skipped")
    assert skipped["name"] == "transpose_f32_shared_t64_r32_p1_guard_both"
    assert "2048 threads per block" in skipped["message"]
    compiled = next(row for row in rows if row["name"] == "transpose_f32_shared_t32_r8_p1_guard_both")
    assert compiled["static_shared_bytes"] == 32 * 33 * 4 and compiled["registers"] > 0
    assert compiled["provenance"]["arch"] == "sm_90"
    assert (out / "results.csv").read_text().startswith("name,family,")
    again = run_cli("compile", "transpose", "--out", str(out))
    assert again.returncode == 2 and "already holds results" in again.stderr


def test_emit_writes_the_golden_record(tmp_path: Path, capsys) -> None:
    (tmp_path / "matmul").mkdir()
    (tmp_path / "matmul" / "stale_variant.cu").write_text("old")
    assert main(["emit", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "matmul" / "stale_variant.cu").exists()
    assert (tmp_path / "matmul" / "matmul_f32_t16_p1_guard_both.cu").exists()
    assert "wrote" in capsys.readouterr().out
