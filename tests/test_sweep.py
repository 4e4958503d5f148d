"""The sweep driver without a GPU: isolation, resume after a kill, rows, and the no-GPU fallback."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gen.compiling import compiler
from gen.cli.main import main
from gen.core.errors import TilegenError
from gen.gpu.process.jobs import Job
from gen.core.results import Status
from gen.store.results_log import read_rows
from gen.evaluate.options import RunOptions
from gen.core.processes import python_environment
from gen.commands.sweep import SweepOptions, summary, sweep
from gen.core.nvidia_smi import parse_gpus
from gen.gpu.executor import GpuUnavailable
from gen.gpu.isolated import IsolatedWorker
from gen.gpu.local import LocalExecutor
from gen.gpu.sanitize import count_hazards, not_run

from . import fakes
from .conftest import REPO
from .waits import patient


def _job(tile: int) -> Job:
    return Job(f"matmul_f32_t{tile}_p0_guard_both", "matmul", "/nonexistent.cubin", "64x64x64")


@pytest.mark.parametrize("target, status, message", [
    ("tests.fakes:hanging_worker", Status.TIMEOUT, "no progress for 1 s"),
    ("tests.fakes:crashing_worker", Status.LAUNCH_ERROR, "exit code 3"),
], ids=["hangs", "crashes"])
def test_a_bad_variant_ends_as_a_row_and_a_fresh_worker_runs_the_next(target, status, message) -> None:
    worker = IsolatedWorker(silence_s=1.0, target=target)
    try:
        bad = worker.run(_job(8))
        assert bad.status is status and message in bad.message
        assert worker.run(_job(16)).status is Status.OK
        assert worker.restarts == 1
    finally:
        worker.stop()


def test_progress_reports_keep_a_slow_worker_alive() -> None:
    worker = IsolatedWorker(silence_s=1.0, target="tests.fakes:chatty_slow_worker")
    try:
        assert worker.run(_job(8)).status is Status.OK  # 1.6 s of work, never 1 s of silence
    finally:
        worker.stop()


def test_a_worker_that_finds_no_gpu_says_why() -> None:
    executor = LocalExecutor([0], target="tests.fakes:unavailable_worker")
    with pytest.raises(GpuUnavailable, match="fake") as raised:
        executor.devices()
    executor.close()
    assert isinstance(raised.value, TilegenError)  # the command line reports it as one line, exit 2


def test_a_sweep_records_every_row_with_the_schema_of_the_design(tmp_path: Path, compile_options) -> None:
    options = SweepOptions("matmul", tmp_path, params={"tile": ["8", "16", "64"]}, sizes=["64x64x64", "100x70x90"],
                           progress=False, run=RunOptions(seed=5), keep_skipped=True)
    report = sweep(options, executor=fakes.FakeExecutor())
    rows = read_rows(tmp_path / "results.jsonl")
    assert len(rows) == len(report.rows) == 3 * 2 * 3 * 2  # tiles x paddings x bounds x sizes
    by_status = {status: [r for r in rows if r.status == status] for status in Status}
    assert len(by_status[Status.SKIPPED]) == 2 * 3 * 2 + 2 * 2  # tile 64 everywhere; bounds=none on the odd size
    assert any("4096 threads per block" in r.message for r in by_status[Status.SKIPPED])
    assert any("multiples of tile" in r.message for r in by_status[Status.SKIPPED])
    ok = by_status[Status.OK]
    assert len(ok) == 36 - 16
    row = ok[0]
    for field in ("registers", "static_shared_bytes", "spill_bytes", "median_ms", "min_ms", "max_ms", "stdev_ms",
                  "samples", "throughput", "ceiling_share", "error"):
        assert getattr(row, field) is not None, field
    for key in ("gpu", "cc", "sm_count", "driver", "compiler", "template_hash", "tilegen", "arch"):
        assert key in row.provenance, key
    assert row.provenance[row.provenance["compiler"]]  # the compiler's version, under its name
    assert (tmp_path / "results.csv").exists()
    assert "fastest at 64x64x64" in summary(report)


def test_points_not_run_are_one_row_per_reason_and_size_and_a_resume_adds_none(tmp_path: Path,
                                                                                compile_options) -> None:
    options = SweepOptions("matmul", tmp_path, params={"tile": ["8", "16", "64"]}, sizes=["64x64x64", "100x70x90"],
                           progress=False, run=RunOptions(seed=5))
    report = sweep(options, executor=fakes.FakeExecutor())
    skipped = [r for r in read_rows(tmp_path / "results.jsonl") if r.status is Status.SKIPPED]
    # tile 64 at each size (6 points each); bounds=none at the odd size, tiles 8 and 16 (2 paddings each)
    assert sorted((r.shape, r.skipped_count) for r in skipped) == [("100x70x90", 2), ("100x70x90", 2),
                                                                   ("100x70x90", 6), ("64x64x64", 6)]
    assert {r.message for r in skipped if r.skipped_count == 6} == {
        "tile 64 gives 4096 threads per block; the CUDA limit is 1024"}
    assert "skipped 16" in summary(report) and len(report.rows) == 4 + 20
    again = sweep(replace(options, resume=True), executor=fakes.FakeExecutor())
    assert again.new_rows == 0 and len(read_rows(tmp_path / "results.jsonl")) == 4 + 20


def test_a_killed_sweep_resumes_with_nothing_lost_or_duplicated(tmp_path: Path, compile_options) -> None:
    out = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-m", "tests.fakes", str(out)], cwd=REPO,
                             env=dict(os.environ, PYTHONPATH=str(REPO)))
    results = out / "results.jsonl"
    deadline = time.monotonic() + patient(120)
    while time.monotonic() < deadline and (not results.exists() or results.read_text().count('"ok"') < 4):
        time.sleep(0.1)
    child.send_signal(signal.SIGKILL)
    child.wait()
    finished = [line for line in results.read_text().splitlines() if _is_json(line)]
    assert 4 <= len(finished) < 36, "the kill should land mid-sweep"
    executor = fakes.FakeExecutor()
    report = sweep(SweepOptions("matmul", out, sizes=["64x64x64", "96x96x96"], resume=True, progress=False,
                                run=RunOptions(seed=1)), executor=executor)
    after = results.read_text().splitlines()
    assert after[: len(finished)] == finished  # every finished row kept as it was
    keys = [r.key for r in read_rows(results)]
    assert len(keys) == len(set(keys)) == 18 * 2
    assert len(executor.ran) == report.new_rows == 36 - len(finished)



ONE_POINT = {"tile": ["8"], "padding": ["0"], "bounds": ["guard"]}


def test_a_size_or_cache_given_twice_is_swept_once(tmp_path: Path, compile_options) -> None:
    executor = fakes.FakeExecutor()
    report = sweep(SweepOptions("matmul", tmp_path, params=ONE_POINT, sizes=["64x64x64", "64x64x64", " 64x64x64"],
                                cache_configs=["none", "shared", "none"], progress=False), executor=executor)
    assert [r.key for r in report.rows] == [r.key for r in read_rows(tmp_path / "results.jsonl")] == [
        "matmul_f32_t8_p0_guard_both@64x64x64@none", "matmul_f32_t8_p0_guard_both@64x64x64@shared"]
    assert len(executor.ran) == 2
    settings = json.loads((tmp_path / "run.json").read_text())
    assert settings["--size"] == ["64x64x64"] and settings["--cache-config"] == ["none", "shared"]


def test_a_repeated_size_on_the_command_line_is_one_size(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["sweep", "matmul", "-p", "tile=8", "-p", "padding=0", "-p", "bounds=guard", "--size", "64x64x64",
                 "--size", "64x64x64", "--cache-config", "none,none", "--out", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("matmul: 1 points; 1 to run, 0 not run") and out.count("  run: ") == 1


def test_a_resume_runs_the_points_that_only_compiled(tmp_path: Path, compile_options,
                                                     capsys: pytest.CaptureFixture) -> None:
    """A sweep on a machine without a GPU leaves `compiled` rows; resumed where a GPU is, those
    points run, and from then on each point's newest row is the one that counts."""
    options = SweepOptions("matmul", tmp_path, params={**ONE_POINT, "tile": ["8", "16"]}, sizes=["64x64x64"],
                           progress=False, run=RunOptions(arch="sm_90"))
    first = sweep(options, executor=fakes.NoGpuExecutor())
    assert [r.status for r in first.rows] == [Status.COMPILED] * 2 and not first.ran_kernels
    assert sweep(replace(options, resume=True), executor=fakes.NoGpuExecutor()).new_rows == 0  # still no GPU
    executor = fakes.FakeExecutor()
    resumed = sweep(replace(options, resume=True), executor=executor)
    assert len(executor.ran) == resumed.new_rows == 2 and resumed.ran_kernels
    assert [r.status for r in resumed.rows] == [Status.OK] * 2  # the newest row of each point
    assert "status: ok 2" in summary(resumed) and "compiled" not in summary(resumed)
    again = fakes.FakeExecutor()
    assert sweep(replace(options, resume=True), executor=again).new_rows == 0 and again.ran == []
    assert [r.status for r in read_rows(tmp_path / "results.jsonl")] == [Status.COMPILED] * 2 + [Status.OK] * 2
    assert main(["report", str(tmp_path)]) == 0
    assert "compiled" not in capsys.readouterr().out  # the report counts each point's newest row

def _is_json(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def test_without_a_gpu_a_sweep_compiles_and_says_no_kernel_ran(tmp_path: Path, compile_options) -> None:
    done = subprocess.run([sys.executable, "-m", "gen", "sweep", "transpose", "-p", "tile=32", "-p", "rows=8",
                           "-p", "vec=1", "-p", "group=0", "--size", "256x256", "--out", str(tmp_path), "--arch", "sm_90"],
                          capture_output=True, text=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert done.returncode == 0, done.stderr
    assert "no kernel was run:" in done.stdout
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    compiled = [r for r in rows if r["status"] == "compiled"]
    assert len(compiled) == 3 * 2 * 2 - 2  # methods x paddings x bounds, less naive with padding 1
    assert all(r["message"].startswith("not run:") and r["registers"] > 0 for r in compiled)


SCRIPT = """
print("the script ran")  # at import: a worker that imported this module would print it again
from pathlib import Path
from gen.evaluate.options import RunOptions
from gen.commands.sweep import SweepOptions, sweep
report = sweep(SweepOptions("matmul", out=Path("run"), params={"tile": 8, "padding": 0, "bounds": "guard"},
                            sizes="64x64x64", progress=False, run=RunOptions(arch="sm_90")))
print("note:", report.note)
"""


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="needs a machine without pycuda")
def test_a_script_without_a_main_guard_sweeps_and_its_workers_say_why_no_kernel_ran(tmp_path: Path,
                                                                                      compile_options) -> None:
    """The README's Python example as a user's script: workers are `python -m gen.gpu.process.worker` processes,
    which never import the script, and a worker that cannot start names the real cause."""
    (tmp_path / "my_sweep.py").write_text(SCRIPT)
    done = subprocess.run([sys.executable, "my_sweep.py"], capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=patient(300))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("the script ran") == 1
    assert "note: pycuda is not installed" in done.stdout and "died while starting" not in done.stdout
    assert [r.status for r in read_rows(tmp_path / "run" / "results.jsonl")] == [Status.COMPILED]


def test_a_compile_error_is_a_row_and_the_sweep_goes_on(tmp_path: Path, compile_options, monkeypatch) -> None:
    real_render = compiler.render
    monkeypatch.setattr(compiler, "render",
                        lambda v: "broken;\n" if v.name == "matmul_f32_t16_p1_guard_both" else real_render(v))
    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path / "cache"))  # of its own: the broken source is not the variant's
    sweep(SweepOptions("matmul", tmp_path, params={"tile": ["16"], "bounds": ["guard", "split"]}, sizes=["64x64x64"],
                       progress=False), executor=fakes.FakeExecutor())
    rows = {r.name: r for r in read_rows(tmp_path / "results.jsonl")}
    assert rows["matmul_f32_t16_p1_guard_both"].status is Status.COMPILE_ERROR
    assert "error" in rows["matmul_f32_t16_p1_guard_both"].message
    assert [r.status for n, r in rows.items() if n != "matmul_f32_t16_p1_guard_both"] == [Status.OK] * 3


def test_parse_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_gpus("0,1") == [0, 1]
    fake = tmp_path / "nvidia-smi"  # a driver that lists four GPUs
    fake.write_text("#!/bin/sh\nprintf '0\\n1\\n2\\n3\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert parse_gpus("all") == [0, 1, 2, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    assert parse_gpus("all") == [1, 3]  # only those CUDA lets this process see
    fake.unlink()
    assert parse_gpus("all") == [0]  # no driver: GPU 0, whose worker then says why it cannot run


def test_count_hazards_reads_the_sanitizer_summaries() -> None:
    assert count_hazards("========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)\n") == 3
    assert count_hazards("========= ERROR SUMMARY: 0 errors\n") == 0
    assert count_hazards("========= ERROR SUMMARY: 1 error\n") == 1
    assert count_hazards("the program printed nothing useful") is None


def test_a_sanitizer_run_whose_kernel_never_launched_is_not_counted_as_clean() -> None:
    refused = '{"status": "launch_error", "message": "A must start at a 16-byte boundary"}'
    assert not_run(f"========= COMPUTE-SANITIZER\n{refused}\n========= ERROR SUMMARY: 0 errors\n") == \
        "A must start at a 16-byte boundary"
    assert not_run('{"status": "ok", "message": ""}\n========= ERROR SUMMARY: 0 errors\n') == ""
    assert not_run('{"status": "wrong", "message": "3 elements differ"}\n') == ""  # a wrong answer ran the kernel


@pytest.mark.parametrize("inherited, expected", [(None, "3"), ("", ""), (" ", " "), ("2,3", "3")])
def test_a_child_sees_its_gpu_unless_the_parent_hid_every_gpu(monkeypatch: pytest.MonkeyPatch,
                                                             inherited: str | None, expected: str) -> None:
    if inherited is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", inherited)
    assert python_environment(3)["CUDA_VISIBLE_DEVICES"] == expected
