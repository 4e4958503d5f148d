"""Ctrl-C and SIGTERM stop any command within seconds, keep what finished, and never leave a
false result: a compile killed by the interrupt is not a compile error, in rows or in the cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gen.compiler import CompileOptions, cache_summary, compile_batch
from gen.errors import Interrupted
from gen.families import SgemmVariant
from gen.processes import ProcessGroup
from gen.store import read_rows

from .conftest import REPO

SGEMM_SLICE = ["-p", "bm=64,128", "-p", "bn=64,128", "-p", "bk=8,16", "-p", "wm=32", "-p", "wn=32,64", "-p", "tm=4",
               "-p", "tn=4", "-p", "padding=4", "-p", "vec=4", "-p", "stages=2", "-p", "bounds=none"]
STOP_WITHIN_S = 2.0


def start(args: list[str], cache: Path, log: Path) -> subprocess.Popen:
    """tilegen in a process group of its own, as a shell runs a job: a signal to the group reaches
    every process in it, as Ctrl-C at a terminal does."""
    environment = dict(os.environ, TILEGEN_CACHE=str(cache), CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "gen", *args], stdout=subprocess.DEVNULL, stderr=open(log, "w"),
                            env=environment, cwd=REPO, start_new_session=True)


def wait_for(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def stop(process: subprocess.Popen, signum: int, group: bool) -> float:
    started = time.monotonic()
    if group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    process.wait(timeout=30)
    return time.monotonic() - started


def test_ctrl_c_stops_a_cold_compile_at_once_and_caches_no_failure(tmp_path: Path, compile_options) -> None:
    cache, out, log = tmp_path / "cache", tmp_path / "out", tmp_path / "log"
    process = start(["compile", "sgemm", *SGEMM_SLICE, "--arch", "sm_90", "--jobs", "2", "--out", str(out)],
                    cache, log)
    wait_for(lambda: "compile 1/" in log.read_text())  # nvcc is busy with the next ones
    assert stop(process, signal.SIGINT, group=True) < STOP_WITHIN_S
    assert process.returncode == 130
    said = log.read_text().strip().splitlines()[-1]
    assert said.startswith("tilegen: interrupted: ") and "rows kept in" in said
    rows = read_rows(out / "results.jsonl")  # every line whole
    assert rows and all(r.status in ("compiled", "skipped") for r in rows)
    assert (out / "results.csv").read_text().count("\n") == len(rows) + 1
    assert cache_summary(cache / "cubins").failed == 0
    again = subprocess.run([sys.executable, "-m", "gen", "compile", "sgemm", *SGEMM_SLICE, "--arch", "sm_90"],
                           capture_output=True, text=True, cwd=REPO,
                           env=dict(os.environ, TILEGEN_CACHE=str(cache), PYTHONPATH=str(REPO)))
    assert again.returncode == 0 and ", 0 failed," in again.stdout


def test_sigterm_stops_a_sweep_whose_resume_then_finishes_it(tmp_path: Path, compile_options) -> None:
    cache, out, log = tmp_path / "cache", tmp_path / "out", tmp_path / "log"
    sweep = ["sweep", "matmul", "-p", "tile=8,16,32", "-p", "padding=0,1,2", "--size", "96x96x96", "--arch", "sm_90",
             "--jobs", "1", "--out", str(out)]
    process = start(sweep, cache, log)
    results = out / "results.jsonl"
    wait_for(lambda: results.exists() and '"compiled"' in results.read_text())
    assert stop(process, signal.SIGTERM, group=False) < STOP_WITHIN_S
    assert process.returncode == 130 and "--resume to continue" in log.read_text()
    kept = read_rows(results)
    assert 0 < len(kept) < 27 and (out / "results.csv").exists()
    finished = subprocess.run([sys.executable, "-m", "gen", *sweep, "--resume"], capture_output=True, text=True,
                              cwd=REPO, env=dict(os.environ, TILEGEN_CACHE=str(cache), CUDA_VISIBLE_DEVICES="",
                                                 PYTHONPATH=str(REPO)))
    assert finished.returncode == 0, finished.stderr
    rows = read_rows(results)
    assert [r.key for r in rows[: len(kept)]] == [r.key for r in kept]  # nothing rewritten
    assert len({r.key for r in rows}) == len(rows) == 27  # nothing lost, nothing twice
    assert not [r for r in rows if r.status == "compile_error"]


def test_a_killed_compile_raises_and_leaves_nothing_in_the_cache(tmp_path: Path, compile_options) -> None:
    options = CompileOptions(arch="sm_90", cache=tmp_path / "cubins", jobs=1)
    children = ProcessGroup()
    threading.Timer(0.5, children.kill_all).start()  # while nvcc works on it
    with pytest.raises(Interrupted):
        compile_batch([SgemmVariant(bm=64, bn=64, wm=32, wn=32)], options, children)
    assert not list(options.cache.glob("*.json"))
    with pytest.raises(Interrupted):  # and the group starts nothing more
        compile_batch([SgemmVariant(bm=64, bn=64, wm=32, wn=64)], options, children)


def test_the_cache_command_shows_purges_failures_and_clears(tmp_path: Path, compile_options, monkeypatch) -> None:
    from gen import compiler
    from gen.cli import main
    from gen.families import MatmulVariant

    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path))
    options = CompileOptions(arch="sm_90", cache=tmp_path / "cubins", jobs=1)
    compiler.compile_variant(MatmulVariant(tile=8), options)
    real_render = compiler.render
    monkeypatch.setattr(compiler, "render", lambda v: "broken;\n" if v.tile == 16 else real_render(v))
    assert not compiler.compile_variant(MatmulVariant(tile=16), options).ok
    assert cache_summary(options.cache).entries == 2 and cache_summary(options.cache).failed == 1
    monkeypatch.setattr(sys, "argv", ["tilegen"])
    assert main(["cache"]) == 0
    assert main(["cache", "--purge-failed"]) == 0
    assert cache_summary(options.cache).entries == 1 and cache_summary(options.cache).failed == 0
    assert compiler.compile_variant(MatmulVariant(tile=8), options).cached
    assert main(["cache", "--clear"]) == 0
    assert cache_summary(options.cache).entries == 0 and not list(options.cache.glob("*.cubin"))
