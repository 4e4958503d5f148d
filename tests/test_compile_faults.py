"""Compiles that go wrong through no fault of the source: a damaged cache, a compiler that is killed,
hangs, runs short of memory or disk, or reports success without a cubin. None of them may become a
compile error, in rows or in the cache; a rerun under good conditions gives the rows of a clean run.

Broken or slow compilers are fake nvcc scripts put first on PATH (tests.fakes.FakeNvcc), so nvcc
is every test's compiler here (NVRTC's faults are tests/test_nvrtc.py's). A run that meets one goes
through `python -m gen`, as a user's does; everything else calls the CLI in-process.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from gen.compiling import compiler
from gen.cli.main import main
from gen.compiling.compilers import COMPILER_ENV
from gen.compiling.compiler import CompileOptions, cache_summary, compile_batch, compile_variant
from gen.core.processes import ProcessGroup
from gen.families import MatmulVariant
from gen.evaluate.options import RunOptions
from gen.core.results import Row, Status
from gen.store.results_log import read_rows
from gen.commands.sweep import SweepOptions, sweep

from .conftest import REPO
from .fakes import ANNOUNCE_AND_HANG, FakeExecutor, LineReader, ends_within
from .waits import patient

NAME = "matmul_f32_t8_p0_guard_both"
ONE = ["matmul", "-p", "tile=8", "-p", "padding=0", "-p", "bounds=guard", "--arch", "sm_90"]  # NAME alone
TWO = ["matmul", "-p", "tile=8,16", "-p", "padding=0", "-p", "bounds=guard", "--arch", "sm_90"]
# Two variants compiled one after the other, and one skipped as invalid (tile 64 has 4096 threads).
SPACE = ["matmul", "-p", "tile=8,16,64", "-p", "padding=0", "-p", "bounds=guard", "--arch", "sm_90", "--jobs", "1"]
GUARD_S = 120  # turns a hang into a failure; no test waits for it


@pytest.fixture(scope="module", autouse=True)
def nvcc_compiles() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(COMPILER_ENV, "nvcc")
        yield


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compile_options: CompileOptions) -> Path:
    """This test's own compile cache ($TILEGEN_CACHE): the folder of its entries."""
    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "cubins"


def run_main(capsys: pytest.CaptureFixture, args: list[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def tilegen(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`python -m gen ARGS` with this environment (and no GPU), as a user runs it."""
    environment = dict(os.environ, PYTHONPATH=str(REPO), CUDA_VISIBLE_DEVICES="", PYTHONDONTWRITEBYTECODE="1", **env)
    return subprocess.run([sys.executable, "-m", "gen", *args], capture_output=True, text=True, cwd=cwd,
                          env=environment, timeout=patient(GUARD_S))


def assert_run_failed(done: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit code 1 and one line that says why (holding each fragment), no traceback: that line."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("tilegen: error: ")]
    assert len(errors) == 1 and done.stderr.rstrip().endswith(errors[0]), done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
    return errors[0]


def notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("tilegen: note: ")]


def essentials(rows: list[Row]) -> list[tuple[Any, ...]]:
    """What a compile's rows say, without the seconds nvcc took."""
    return sorted((r.name, str(r.status), r.registers, r.static_shared_bytes, r.dynamic_shared_bytes, r.spill_bytes,
                   r.stack_bytes, r.message, r.skipped_count, sorted(r.provenance.items())) for r in rows)


def rows_in(folder: Path) -> list[Row]:
    results = folder / "results.jsonl"
    return read_rows(results) if results.exists() else []


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory, compile_options: CompileOptions) -> dict[str, Path]:
    """Caches compiled once for the module, for tests to copy: "one" holds NAME; "batch" holds NAME
    and its tile-16 twin from one nvcc run, in one cubin."""
    folder = tmp_path_factory.mktemp("compiled")
    assert compile_variant(MatmulVariant(tile=8, padding=0), CompileOptions(arch="sm_90", cache=folder / "one")).ok
    twins = compile_batch([MatmulVariant(tile=8, padding=0), MatmulVariant(tile=16, padding=0)],
                          CompileOptions(arch="sm_90", cache=folder / "batch", jobs=1), ProcessGroup())
    assert all(c.ok for c in twins) and len({c.cubin for c in twins}) == 1
    return {"one": folder / "one", "batch": folder / "batch"}


# ---- the cache proves an entry before trusting it ----------------------------------------------------------

DAMAGED_RECORDS = {
    "emptied": b"",
    "garbage": b"\x00garbage{",
    "only ok": b'{"ok": true}',
    "a list": b"[]",
    "an error without a diagnostic": b'{"ok": false, "log": "ptxas info    : Used 32 registers", "seconds": 0.3}',
}


@pytest.mark.parametrize("damage", DAMAGED_RECORDS.values(), ids=DAMAGED_RECORDS)
def test_a_damaged_record_is_removed_with_a_note_and_compiled_again(
        cache: Path, compiled: dict[str, Path], capsys: pytest.CaptureFixture, damage: bytes) -> None:
    shutil.copytree(compiled["one"], cache)
    (record,) = cache.glob("*.json")
    record.write_bytes(damage)
    code, out, err = run_main(capsys, ["compile", *ONE])
    assert code == 0 and "1 compiled (0 from cache), 0 failed" in out, (out, err)
    (note,) = notes(err)
    assert NAME in note and "damaged" in note and "compiling it again" in note
    code, out, err = run_main(capsys, ["compile", *ONE])
    assert code == 0 and "1 compiled (1 from cache), 0 failed" in out and not notes(err)


def test_a_damaged_record_does_not_stop_a_sweep(cache: Path, compiled: dict[str, Path], tmp_path: Path) -> None:
    shutil.copytree(compiled["one"], cache)
    (record,) = cache.glob("*.json")
    record.write_bytes(b'{"format": 2')
    report = sweep(SweepOptions("matmul", tmp_path / "run", params={"tile": [8], "padding": [0], "bounds": ["guard"]},
                                sizes=["64x64x64"], progress=False, run=RunOptions(arch="sm_90", seed=1)),
                   executor=FakeExecutor())
    assert [(row.name, row.status) for row in report.rows] == [(NAME, Status.OK)]


def test_a_cubin_deleted_from_the_cache_is_compiled_again_not_a_compile_error(
        cache: Path, compiled: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    shutil.copytree(compiled["batch"], cache)
    for cubin in cache.glob("*.cubin"):
        cubin.unlink()
    code, out, err = run_main(capsys, ["compile", *TWO])
    assert code == 0 and "2 compiled (0 from cache), 0 failed" in out, (out, err)
    assert len(notes(err)) == 2 and all("is missing" in note for note in notes(err))


@pytest.mark.parametrize("content", [b"not a cubin\n", b""], ids=["replaced by text", "truncated to 0 bytes"])
def test_a_cubin_altered_in_the_cache_is_compiled_again(cache: Path, compiled: dict[str, Path],
                                                        capsys: pytest.CaptureFixture, content: bytes) -> None:
    shutil.copytree(compiled["one"], cache)
    (cubin,) = cache.glob("*.cubin")
    cubin.write_bytes(content)
    code, out, err = run_main(capsys, ["compile", *ONE])
    assert code == 0 and "1 compiled (0 from cache), 0 failed" in out, (out, err)
    assert NAME in notes(err)[0]
    assert [path.read_bytes()[:4] for path in cache.glob("*.cubin")] == [b"\x7fELF"]  # the altered one is gone


def test_a_folder_where_a_cubin_should_be_is_counted_removed_and_compiled_again(
        cache: Path, compiled: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    shutil.copytree(compiled["one"], cache)
    (cubin,) = cache.glob("*.cubin")
    cubin.unlink()
    (cubin / "inside").mkdir(parents=True)  # a folder, not empty, under the cubin's name
    code, out, _ = run_main(capsys, ["cache"])
    assert code == 0 and "0 compiled variants (0 compile errors), 2 damaged entries" in out, out
    code, out, err = run_main(capsys, ["compile", *ONE])
    assert code == 0 and "1 compiled (0 from cache), 0 failed" in out, (out, err)
    assert "is not a file" in notes(err)[0]
    assert [path.read_bytes()[:4] for path in cache.glob("*.cubin")] == [b"\x7fELF"]  # the folder is gone
    code, out, err = run_main(capsys, ["compile", *ONE])
    assert code == 0 and "1 compiled (1 from cache), 0 failed" in out and not notes(err), (out, err)


def test_a_record_edited_to_serve_another_levels_cubin_is_damage_not_a_hit(
        cache: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["compile", *ONE, "--compile-level", "ptxas-o1"]) == 0
    (fast_path,) = cache.glob("*.json")
    assert main(["compile", *ONE]) == 0
    (full_path,) = set(cache.glob("*.json")) - {fast_path}
    capsys.readouterr()
    full, fast = json.loads(full_path.read_text()), json.loads(fast_path.read_text())
    full_path.write_text(json.dumps({**fast, "key": full["key"]}))  # the ptxas-o1 entry under full's key
    code, out, err = run_main(capsys, ["compile", *ONE])
    assert code == 0 and "1 compiled (0 from cache), 0 failed" in out, (out, err)
    assert "compile at ptxas-o1, not full" in notes(err)[0]


def test_the_cache_command_counts_damaged_entries_and_purge_failed_removes_them(
        cache: Path, compiled: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    shutil.copytree(compiled["batch"], cache)
    (cubin,) = cache.glob("*.cubin")
    cubin.unlink()  # both entries lose their cubin
    (cache / f"{'0' * 32}.json.k3x9_a2b").write_bytes(b'{"form')  # a write cut short
    code, out, _ = run_main(capsys, ["cache"])
    assert code == 0 and "0 compiled variants (0 compile errors), 3 damaged entries" in out
    assert "--purge-failed removes" in out
    code, out, _ = run_main(capsys, ["cache", "--purge-failed"])
    assert code == 0 and "removed 0 cached compile errors and 3 damaged entries" in out
    assert not list(cache.iterdir())


def test_a_record_edited_to_name_another_kernels_cubin_is_damage_not_a_hit(
        cache: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["compile", *ONE]) == 0 and main(["compile", *ONE[:2], "tile=16", *ONE[3:]]) == 0
    capsys.readouterr()
    records = {json.loads(path.read_text())["kernel"]: path for path in cache.glob("*.json")}
    twin = json.loads(records[NAME.replace("t8", "t16")].read_text())
    mine = json.loads(records[NAME].read_text())
    records[NAME].write_text(json.dumps({**mine, "cubin": twin["cubin"]}))  # names the tile-16 kernel's cubin
    own_cubin = cache / mine["cubin"]["name"]
    code, out, _ = run_main(capsys, ["cache"])  # the edited record is damaged; its own cubin a stray file
    assert code == 0 and "1 compiled variants (0 compile errors), 2 damaged entries" in out, out
    code, out, err = run_main(capsys, ["compile", *ONE])
    assert code == 0 and "1 compiled (0 from cache), 0 failed" in out, (out, err)
    (note,) = notes(err)
    assert f"holds no kernel '{NAME}'" in note and "compiling it again" in note
    assert own_cubin.is_file() and (cache / twin["cubin"]["name"]).is_file()  # the other kernel's cubin stays
    code, out, err = run_main(capsys, ["compile", *ONE[:2], "tile=8,16", *ONE[3:]])
    assert code == 0 and "2 compiled (2 from cache), 0 failed" in out and not notes(err), (out, err)


def test_cache_clear_removes_tilegens_entries_and_nothing_else(cache: Path, compiled: dict[str, Path],
                                                              capsys: pytest.CaptureFixture) -> None:
    shutil.copytree(compiled["one"], cache)
    mine = {"notes.json": b"{}", "kernel.cubin": b"mine", "README": b"my cache notes", f"{'a' * 32}.txt": b"x"}
    for name, content in mine.items():
        (cache / name).write_bytes(content)
    code, out, _ = run_main(capsys, ["cache", "--clear"])
    assert code == 0 and "removed 1 cached compiles" in out and "kept the 4 files" in out
    assert {path.name: path.read_bytes() for path in cache.iterdir()} == mine


# ---- a compiler that fails says nothing about the source ---------------------------------------------------

def test_an_nvcc_that_reports_success_with_an_empty_cubin_is_never_cached(
        cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture, fake_nvcc) -> None:
    fake = fake_nvcc(': > "$OUT"; exit 0')  # no ptxas report either
    done = tilegen(["compile", *ONE], tmp_path, PATH=fake.path)
    assert_run_failed(done, f"cannot compile {NAME}", "exited 0 but wrote an empty cubin",
                      "check the CUDA installation")
    assert fake.compiles == 2 and not list(cache.glob("*.json"))
    code, out, _ = run_main(capsys, ["compile", *ONE, "--out", str(tmp_path / "again")])  # the real nvcc
    assert code == 0 and "1 compiled (0 from cache)" in out
    assert [row.registers > 0 for row in rows_in(tmp_path / "again")] == [True]


def test_an_nvcc_that_exits_0_without_a_cubin_ends_the_run_in_one_line(cache: Path, tmp_path: Path,
                                                                       fake_nvcc) -> None:
    fake = fake_nvcc("exit 0")
    assert_run_failed(tilegen(["compile", *ONE], tmp_path, PATH=fake.path), NAME, "exited 0 but wrote no cubin")
    assert not list(cache.glob("*.json"))


FAULTS = {  # what the fake nvcc does, and what the one line must say about it
    "nvcc killed by SIGKILL": ("kill -9 $$", ["killed by SIGKILL", "lower --jobs"]),
    "cicc killed by the OOM killer": ("echo Killed >&2; echo \"nvcc error   : 'cicc' died due to signal 9 (Kill "
                                      "signal)\" >&2; exit 255", ["'Killed'", "lower --jobs"]),
    "a full TMPDIR": ('echo "<built-in>: fatal error: when writing output to $TMPDIR/tmpxft_00001_k.cpp1.ii: No space '
                      'left on device" >&2; echo "compilation terminated." >&2; exit 1',
                      ["No space left on device", "free space in the temporary folder", "$TMPDIR"]),
}


@pytest.mark.parametrize("compile, said", FAULTS.values(), ids=FAULTS)
def test_a_compiler_killed_or_short_of_disk_stops_the_run_in_one_line_and_caches_nothing(
        cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture, fake_nvcc, compile: str, said: list[str]) -> None:
    fake = fake_nvcc(compile)
    done = tilegen(["compile", *ONE, "--out", str(tmp_path / "bad")], tmp_path, PATH=fake.path)
    assert_run_failed(done, f"cannot compile {NAME}", *said, "twice", "0 rows kept in")
    assert fake.compiles == 2  # tried once more
    assert not list(cache.glob("*.json")) and not rows_in(tmp_path / "bad")
    code, out, _ = run_main(capsys, ["compile", *ONE])  # good conditions: the real nvcc
    assert code == 0 and "1 compiled (0 from cache), 0 failed" in out


def test_a_compiler_fault_that_passes_is_compiled_once_more(cache: Path, tmp_path: Path, fake_nvcc) -> None:
    fake = fake_nvcc('[ "$RUN" = 1 ] && kill -9 $$; exec "$REAL" "$@"')
    done = tilegen(["compile", *ONE], tmp_path, PATH=fake.path)
    assert done.returncode == 0 and "1 compiled (0 from cache), 0 failed" in done.stdout, done.stderr
    (note,) = notes(done.stderr)
    assert NAME in note and "killed by SIGKILL" in note and "compiling it once more" in note
    assert fake.compiles == 2


def test_a_tmpdir_that_does_not_exist_is_no_compile_error(cache: Path, tmp_path: Path) -> None:
    done = tilegen(["compile", *ONE], tmp_path, TMPDIR=str(tmp_path / "gone"))
    assert done.returncode == 0 and "1 compiled (0 from cache), 0 failed" in done.stdout, done.stderr
    assert cache_summary(cache).entries == 1 and cache_summary(cache).failed == 0


# ---- every tool has a deadline -----------------------------------------------------------------------------

def test_an_nvcc_that_never_returns_is_killed_with_its_session_at_its_deadline(cache: Path, tmp_path: Path,
                                                                              fake_nvcc) -> None:
    fake = fake_nvcc('sleep 3600 & echo "started $RUN $$ $!" > "$ANNOUNCE"; wait')  # nvcc waits on a stage
    done = tilegen(["compile", *ONE, "--out", str(tmp_path / "run")], tmp_path, PATH=fake.path,
                   TILEGEN_COMPILE_TIMEOUT="1")
    assert done.returncode == 1 and "0 compiled (0 from cache), 1 failed" in done.stdout, done.stderr
    (row,) = rows_in(tmp_path / "run")
    assert row.status == Status.COMPILE_ERROR and "nvcc did not finish within 1 s and was killed" in row.message
    assert "not cached" in row.message and not list(cache.glob("*.json"))
    _, _, nvcc, stage = fake.announcements.next().split()
    assert ends_within(int(nvcc), 10.0) and ends_within(int(stage), 10.0)


@pytest.mark.parametrize("answer, said", [
    ('case "$*" in *--version*) exec sleep 3600;; esac; exec "$REAL" "$@"', "did not answer within 1 s and was killed"),
    ('case "$*" in *--version*) exit 0;; esac; exec "$REAL" "$@"', "printed nothing (exit code 0)"),
], ids=["never returns", "prints nothing"])
def test_an_nvcc_version_that_never_answers_ends_the_run_in_one_line(cache: Path, tmp_path: Path, fake_nvcc,
                                                                    answer: str, said: str) -> None:
    fake = fake_nvcc(answer=answer)
    done = tilegen(["compile", *ONE], tmp_path, PATH=fake.path, TILEGEN_COMPILE_TIMEOUT="1")
    assert_run_failed(done, "`nvcc --version`", said, "check the CUDA installation")
    assert fake.compiles == 0


def test_jobs_beyond_the_cores_are_capped_and_said(cache: Path, capsys: pytest.CaptureFixture) -> None:
    cores = compiler.usable_cores()
    assert CompileOptions(jobs=100_000).jobs == cores  # not a thread each, started before anything compiles
    code, out, err = run_main(capsys, ["compile", *ONE, "--jobs", "100000"])
    assert code == 0 and "1 compiled (0 from cache), 0 failed" in out
    assert f"--jobs 100000 is more than the {cores} cores tilegen can use here" in err


# ---- a rerun after a fault is a clean run ------------------------------------------------------------------

def test_a_sweep_stopped_by_a_failing_compiler_resumes_to_a_clean_finish(
        cache: Path, tmp_path: Path, fake_nvcc, monkeypatch: pytest.MonkeyPatch) -> None:
    command = ["sweep", *SPACE, "--size", "64x64x64", "--out", str(tmp_path / "run")]
    fake = fake_nvcc('[ "$RUN" -gt 1 ] && kill -9 $$; exec "$REAL" "$@"')
    assert_run_failed(tilegen(command, tmp_path, PATH=fake.path), "cannot compile matmul_f32_t16_p0_guard_both",
                      "killed by SIGKILL", "rows kept in", "run the same sweep with --resume to continue")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main([*command, "--resume"]) == 0  # the real nvcc
    rows = read_rows(tmp_path / "run" / "results.jsonl")
    assert sorted((row.name, row.status) for row in rows) == [
        ("matmul_f32_t16_p0_guard_both", "compiled"), ("matmul_f32_t64_p0_guard_both", "skipped"),
        (NAME, "compiled")]


@pytest.fixture(scope="module")
def clean_rows(tmp_path_factory: pytest.TempPathFactory, compile_options: CompileOptions) -> list[tuple[Any, ...]]:
    """What compiling SPACE from a cold cache under good conditions gives."""
    folder = tmp_path_factory.mktemp("clean")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TILEGEN_CACHE", str(folder / "cache"))
        assert main(["compile", *SPACE, "--out", str(folder / "run")]) == 0
    return essentials(read_rows(folder / "run" / "results.jsonl"))


def interrupted(tmp_path: Path, fake_nvcc, out: Path) -> None:
    """Ctrl-C while nvcc compiles the second variant (the first one's row is kept)."""
    fake = fake_nvcc(f'[ "$RUN" -gt 1 ] && {{ {ANNOUNCE_AND_HANG}; }}; exec "$REAL" "$@"')
    process = subprocess.Popen([sys.executable, "-m", "gen", "compile", *SPACE, "--out", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path,
                               env=dict(os.environ, PYTHONPATH=str(REPO), PATH=fake.path), start_new_session=True)
    LineReader(process.stderr.fileno()).until("compile 1/2")
    fake.announcements.until("started")
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=patient(GUARD_S)) == 130


def killed(tmp_path: Path, fake_nvcc, out: Path) -> None:
    """nvcc killed (by the OOM killer, say) from the second compile on."""
    fake = fake_nvcc('[ "$RUN" -gt 1 ] && kill -9 $$; exec "$REAL" "$@"')
    assert_run_failed(tilegen(["compile", *SPACE, "--out", str(out)], tmp_path, PATH=fake.path), "killed by SIGKILL")


def starved_of_disk(tmp_path: Path, fake_nvcc, out: Path) -> None:
    """The real nvcc, whose files may not grow past 256 KiB: its preprocessed source is larger (the
    limit's signal, which tilegen's children get back, ends the preprocessor)."""
    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

    done = subprocess.run([sys.executable, "-m", "gen", "compile", *SPACE, "--out", str(out)], capture_output=True,
                          text=True, cwd=tmp_path, preexec_fn=small_files, timeout=patient(GUARD_S),
                          env=dict(os.environ, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1"))
    assert_run_failed(done, "File size limit exceeded", "free space in the temporary folder")


@pytest.mark.parametrize("spoil", [interrupted, killed, starved_of_disk])
def test_a_compile_interrupted_killed_or_starved_of_disk_then_rerun_gives_the_rows_of_a_clean_run(
        cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture, fake_nvcc, clean_rows, spoil) -> None:
    spoil(tmp_path, fake_nvcc, tmp_path / "spoilt")
    assert not [row for row in rows_in(tmp_path / "spoilt") if row.status == Status.COMPILE_ERROR]
    assert cache_summary(cache).failed == 0
    code, out, _ = run_main(capsys, ["compile", *SPACE, "--out", str(tmp_path / "again")])
    assert code == 0 and ", 0 failed," in out
    assert essentials(rows_in(tmp_path / "again")) == clean_rows
