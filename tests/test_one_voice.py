"""Flags, progress, summaries and reports that agree with each other and with the code (issue 33):
one meaning per flag name, progress fit for logs, reports that rank within a problem, summaries
that name their compiler, and commands that make no file when their input is wrong."""

from __future__ import annotations

import io
import json
import re
import shlex
from pathlib import Path

import pytest

from gen.compiling import compiler
from gen.compiling.compilers import default_compiler
from gen.cli.main import main
from gen.cli.parser import build_parser
from gen.core.progress import EVERY_ENV, Progress
from gen.core.results import Row, Status
from gen.evaluate.options import RunOptions
from gen.commands.sweep import SweepOptions, summary, sweep
from gen.store.report import report
from gen.store.tuning_db import TuningDB

from .fakes import FakeExecutor, NoGpuExecutor

SMALL = ["-p", "tile=8,16", "-p", "padding=0", "-p", "bounds=guard", "--arch", "sm_90"]  # matmul: 2 variants


def run_main(capsys: pytest.CaptureFixture, args: list[str]) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as stop:  # --help
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


# ---- the compiler is named as it is ------------------------------------------------------------

def test_help_texts_name_the_compiler_tilegen_uses_not_nvcc_alone(capsys) -> None:
    for command in ([], ["compile"]):
        code, out, _ = run_main(capsys, [*command, "--help"])
        text = " ".join(out.split())
        assert code == 0 and "with nvcc" not in text and "NVRTC where installed, else nvcc" in text, out


def test_each_commands_help_ends_with_an_example_the_command_line_takes(capsys) -> None:
    _, usage, _ = run_main(capsys, ["--help"])
    commands = re.search(r"\{([a-z,]+)\}", usage).group(1).split(",")
    for command in commands:
        code, out, _ = run_main(capsys, [command, "--help"])
        *_, heading, example = out.rstrip().splitlines()
        assert (code, heading) == (0, "example:") and example.startswith(f"  tilegen {command} "), out
        build_parser().parse_args(shlex.split(example)[1:])  # exits 2 if a flag or a value is refused
        if command in ("list", "render"):  # the ones that need no GPU and write nothing: run them
            assert run_main(capsys, shlex.split(example)[1:])[0] == 0
    assert len(commands) > 10


def test_a_sweep_summary_names_its_compiler_and_says_that_compile_time_is_summed_over_threads(
        tmp_path: Path, capsys) -> None:
    options = SweepOptions("matmul", tmp_path / "run", params={"tile": [8], "padding": [0], "bounds": ["guard"]},
                           sizes=["64x64x64"], progress=False, run=RunOptions(arch="sm_90", seed=1))
    result = sweep(options, executor=NoGpuExecutor())
    used = default_compiler()
    assert f"compiler: {used.name} {used.version()} for sm_90" in summary(result)
    assert "summed over its" in result.time_line() and "compile " not in result.time_line()


# ---- one meaning per flag name ---------------------------------------------------------------

@pytest.mark.parametrize("old, new, field", [
    (["tune", "sgemm", "--size", "64x64x64", "--top", "5"], ["tune", "sgemm", "--size", "64x64x64", "--finalists", "5"],
     "finalists"),
    (["sweep", "matmul", "--cache", "l1"], ["sweep", "matmul", "--cache-config", "l1"], "cache_configs"),
    (["best", "sgemm", "--size", "64x64x64", "--gpu", "H100"], ["best", "sgemm", "--size", "64x64x64", "--gpu-model",
                                                                 "H100"], "gpu_model"),
])
def test_an_old_flag_spelling_sets_what_the_new_one_sets_with_a_one_line_note(old, new, field, capsys) -> None:
    from gen.cli.parser import build_parser

    renamed = build_parser().parse_args(old)
    note = capsys.readouterr().err
    assert getattr(renamed, field) == getattr(build_parser().parse_args(new), field)
    assert note.count("\n") == 1 and f"{old[-2]} is now {new[-2]}" in note, note
    assert capsys.readouterr().err == ""  # the new spelling says nothing


def test_top_seed_and_gpus_mean_one_thing_in_every_command(capsys) -> None:
    from gen.cli.parser import build_parser

    parser = build_parser()
    sweep_args = parser.parse_args(["sweep", "matmul"])
    tune_args = parser.parse_args(["tune", "sgemm", "--size", "64x64x64"])
    assert sweep_args.seed == tune_args.seed  # the same default: the same inputs from run to run
    helps = {command: " ".join(run_main(capsys, [command, "--help"])[1].split()) for command in ("sweep", "tune")}
    assert "--top" not in helps["tune"] and "--finalists N" in helps["tune"]
    assert "--cache " not in helps["sweep"] and "--cache-config" in helps["sweep"]
    for command in ("best", "export"):
        text = " ".join(run_main(capsys, [command, "--help"])[1].split())
        assert "--gpu-model" in text and "--gpu " not in text


def test_report_and_export_take_the_family_first_as_every_other_command(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rows = [_row("sgemm", "sgemm_f32_a", 40.0, 0.8, "TFLOP/s"), _row("transpose", "transpose_f32_b", 3000.0, 0.9,
                                                                     "GB/s", shape="1024x1024")]
    (run / "results.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rows))
    code, out, err = run_main(capsys, ["report", "sgemm", str(run)])
    assert code == 0 and "sgemm_f32_a" in out and "transpose_f32_b" not in out, err
    code, _, err = run_main(capsys, ["report", str(run), "--family", "sgemm"])
    assert code == 0 and "--family is now FAMILY" in err
    db = tmp_path / "t.sqlite"
    TuningDB(db)
    code, _, err = run_main(capsys, ["export", "sgemm", "--t4", str(tmp_path / "t4.json"), "--db", str(db)])
    assert code == 2 and f"{db} holds no measurements of family sgemm;" in err, err


def test_export_of_an_empty_database_names_no_family_or_gpu_it_was_not_given(tmp_path: Path, capsys) -> None:
    db = tmp_path / "t.sqlite"
    TuningDB(db)
    code, _, err = run_main(capsys, ["export", "--t4", str(tmp_path / "results.json"), "--db", str(db)])
    assert code == 2 and "that family" not in err and f"{db} holds no measurements; tilegen tune" in err, err


# ---- progress --------------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_without_a_terminal_is_a_line_every_few_seconds_with_counts_and_eta() -> None:
    log, clock = io.StringIO(), Clock()
    progress = Progress(3168, "sweep", log, clock=clock, every_s=5.0)
    for n in range(3168):
        clock.now += 0.01  # 31.68 s in all
        progress.advance(f"variant{n}", "ok" if n % 10 else "wrong")
    progress.close()
    lines = log.getvalue().splitlines()
    assert 6 <= len(lines) <= 8, lines  # one every 5 s, and the last
    assert "ETA" in lines[0] and "wrong" in lines[0] and "ok" in lines[0]
    assert lines[-1].startswith("sweep: 3,168/3,168 (ok 2,851, wrong 317)") and lines[-1].endswith("done")


def test_quiet_says_nothing_on_stderr_and_without_it_progress_is_not_a_line_per_variant(
        capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVERY_ENV)  # the suite's own setting: a line per item
    code, out, err = run_main(capsys, ["compile", "matmul", *SMALL, "--quiet"])
    assert code == 0 and err == "" and "2 compiled" in out
    code, _, err = run_main(capsys, ["compile", "matmul", *SMALL])
    progress = [line for line in err.splitlines() if line.startswith("compile") and "/2" in line]
    assert code == 0 and len(progress) == 1 and "compiled 2" in progress[0], err


# ---- report and plots ------------------------------------------------------------------------

def _row(family: str, name: str, throughput: float, share: float | None, unit: str, shape: str = "2048x2048x2048",
         gpu: str = "NVIDIA H200") -> Row:
    return Row(name, family, {}, Status.OK, shape=shape, median_ms=1.0, error=1e-7, throughput=throughput, unit=unit,
               ceiling_share=share, provenance={"gpu": gpu, "compiler": "nvrtc", "nvrtc": "13.0.88", "arch": "sm_90"})


def test_report_ranks_within_each_problem_by_share_of_its_ceiling_and_never_mixes_units() -> None:
    copies = [_row("transpose", f"transpose_f32_c{n}", 3000.0 + n, 0.8, "GB/s", shape="8192x8192") for n in range(12)]
    sgemm = [_row("sgemm", "sgemm_f32_fast", 50.0, 0.953, "TFLOP/s"),  # its ceiling measured lower that run
             _row("sgemm", "sgemm_f32_raw", 51.0, 0.90, "TFLOP/s")]
    text = report(copies + sgemm, count=10)
    assert "compiler: nvrtc 13.0.88 for sm_90 (14 rows)" in text
    tables = text.split("Top 10: ")[1:]
    assert len(tables) == 2 and all(("GB/s" in t) != ("TFLOP/s" in t) for t in tables), text
    ranked = next(t for t in tables if t.startswith("sgemm"))
    assert ranked.index("sgemm_f32_fast") < ranked.index("sgemm_f32_raw")
    assert "sgemm 2048x2048x2048 on NVIDIA H200" in ranked.splitlines()[0].replace("f32 ", "")


def test_plots_are_one_per_family_shape_and_gpu_and_say_so_in_their_titles(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    from gen.store.plots import plot

    def rows(shape: str, gpu: str) -> list[Row]:
        return [Row(f"matmul_f32_t{t}_p{p}_guard_both", "matmul", {"tile": t, "padding": p, "bounds": "guard",
                                                                   "sync": "both"}, Status.OK, shape=shape,
                    median_ms=1.0, error=1e-7, throughput=t + p, unit="GFLOP/s", provenance={"gpu": gpu})
                for t in (8, 16) for p in (0, 1)]

    written = plot(rows("64x64x64", "NVIDIA H200") + rows("96x96x96", "NVIDIA H100"), {}, tmp_path / "plot.png")
    titles = sorted(Image.open(path).text["Title"] for path in written)
    assert len(written) == 2 and all(path.exists() for path in written)
    assert titles == ["tilegen: matmul 64x64x64 on NVIDIA H200", "tilegen: matmul 96x96x96 on NVIDIA H100"]


# ---- what commands say and leave behind --------------------------------------------------------

def test_revalidating_a_database_that_is_not_there_makes_no_file(tmp_path: Path, capsys) -> None:
    db = tmp_path / "X.sqlite"
    code, _, err = run_main(capsys, ["tune", "--revalidate", "--db", str(db)])
    assert code == 2 and not db.exists() and str(db) in err and len(err.splitlines()) == 1, err


def test_compile_counts_what_filter_left_out(capsys) -> None:
    code, out, _ = run_main(capsys, ["compile", "matmul", *SMALL, "--filter", "*_t8_*"])
    assert code == 0 and "1 compiled" in out and "1 left out by --filter" in out, out


def test_compile_exits_1_when_any_variant_fails_to_compile(capsys, monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    original = compiler.render
    monkeypatch.setattr(compiler, "render", lambda v: "this is not CUDA;\n" if v.tile == 8 else original(v))
    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path / "cache"))  # of its own: the broken source is not the variant's
    code, out, _ = run_main(capsys, ["compile", "matmul", *SMALL, "--compiler", "nvcc"])
    assert code == 1 and "1 compiled" in out and "1 failed" in out, out


def test_a_sanitized_sweep_says_why_it_is_slow(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "bin" / "compute-sanitizer"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:{__import__('os').environ['PATH']}")
    options = SweepOptions("matmul", tmp_path / "run", params={"tile": [8, 16], "padding": [0], "bounds": ["guard"]},
                           sizes=["64x64x64"], run=RunOptions(arch="sm_90", seed=1, sanitize=True))
    sweep(options, executor=NoGpuExecutor())
    err = capsys.readouterr().err
    assert "--sanitize runs each of the 2 variants three more times" in err and "a few seconds per variant" in err


def test_a_compile_that_changed_compiler_says_why_nothing_came_from_the_cache(
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Installing NVRTC changes the default compiler, and so every cache key: the next compile says so."""
    from gen.compiling import nvrtc_library

    if not nvrtc_library.available():
        pytest.skip("NVRTC is not installed (pip install '.[nvrtc]')")
    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path))
    assert run_main(capsys, ["compile", "matmul", *SMALL, "--compiler", "nvcc", "--quiet"])[0] == 0
    code, out, err = run_main(capsys, ["compile", "matmul", *SMALL, "--compiler", "nvrtc", "--quiet"])
    assert code == 0 and "(0 from cache)" in out
    assert "nothing came from the compile cache, which holds these variants made by nvcc" in err, err
    assert "--compiler nvcc would use them" in err


# ---- reports that say why, and --json --------------------------------------------------------------

def test_a_report_of_a_run_without_a_gpu_says_why_nothing_is_ranked(tmp_path: Path, capsys) -> None:
    assert run_main(capsys, ["compile", "matmul", *SMALL, "--out", str(tmp_path / "run")])[0] == 0
    code, out, _ = run_main(capsys, ["report", str(tmp_path / "run")])
    assert code == 0 and "none ranked: no row is correct and timed (compiled 2); a run without a GPU only compiles" in out
    code, out, _ = run_main(capsys, ["report", str(tmp_path / "run"), "--json"])
    assert code == 0 and json.loads(out)["problems"] == [] and "a run without a GPU" in json.loads(out)["none_ranked"]


def test_report_plot_with_nothing_to_plot_says_so_before_printing_anything(tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    assert run_main(capsys, ["compile", "matmul", *SMALL, "--out", str(tmp_path / "run")])[0] == 0
    code, out, err = run_main(capsys, ["report", str(tmp_path / "run"), "--plot", str(tmp_path / "p.png")])
    assert (code, out) == (2, "") and err.startswith("tilegen: error: nothing to plot") and err.count("\n") == 1
    assert not list(tmp_path.glob("p*.png"))


def test_report_json_holds_what_the_tables_show(tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / "run"
    sweep(SweepOptions("matmul", out_dir, params={"tile": [8, 16], "padding": [0], "bounds": ["guard"]},
                       sizes=["64x64x64"], progress=False, run=RunOptions(arch="sm_90", seed=1)), FakeExecutor())
    _, text, _ = run_main(capsys, ["report", str(out_dir), "--top", "1"])
    code, out, _ = run_main(capsys, ["report", str(out_dir), "--top", "1", "--json"])
    data = json.loads(out)
    (problem,) = data["problems"]
    assert code == 0 and problem["shape"] == "64x64x64" and len(problem["ranked"]) == 1 and "none_ranked" not in data
    assert problem["ranked"][0]["name"] in text.split("Best per problem")[1]
    assert data["statuses"] == {"matmul": {"ok": 2}}


def test_best_json_names_the_variant_best_prints(tmp_path: Path, capsys) -> None:
    import gen

    db = tmp_path / "t.sqlite"
    gen.tune("matmul", "64x64x64", params={"tile": [8, 16], "padding": 0}, strategy="brute", db=db, quiet=True,
             executor=FakeExecutor())
    asked = ["best", "matmul", "--size", "64x64x64", "--gpu-model", "Fake", "--db", str(db)]
    _, name, reason = run_main(capsys, asked)
    code, out, err = run_main(capsys, [*asked, "--json"])
    assert (code, err) == (0, "") and json.loads(out) == {
        "family": "matmul", "size": "64x64x64", "dtype": name.split("_")[1], "variant": name.strip(),
        "from": reason.strip().removeprefix("from ")}
