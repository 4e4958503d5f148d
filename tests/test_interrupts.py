"""Ctrl-C, SIGTERM and a closed terminal (SIGHUP) stop any command within seconds, keep what
finished, and never leave a false result: a compile killed by the interrupt is not a compile error,
in rows or in the cache.

Every test waits for events, never for time: a line tilegen prints, or a fake nvcc on PATH that
announces through a FIFO that it has started (and then hangs, as a long compile would).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gen.cli.main import main
from gen.compiling.compiler import CompileOptions, cache_summary, compile_batch
from gen.core.errors import Interrupted
from gen.families import SgemmVariant
from gen.core.processes import ProcessGroup
from gen.store.results_log import read_rows

from .conftest import REPO
from .fakes import ANNOUNCE_AND_HANG, Announcements, LineReader, ends_within
from .waits import patient

# Two variants to compile, one after the other, and one skipped as invalid (tile 64).
SPACE = ["matmul", "-p", "tile=8,16,64", "-p", "padding=0", "-p", "bounds=guard", "--arch", "sm_90", "--jobs", "1"]
# The real nvcc for the first compile, then one that announces it started and hangs.
FIRST_THEN_HANG = f'[ "$RUN" -gt 1 ] && {{ {ANNOUNCE_AND_HANG}; }}; exec "$REAL" "$@"'
STOP_WITHIN_S = 2.0
KEPT = "tilegen: interrupted: 1 of 2 variants compiled; 2 rows kept in"  # SPACE's skipped row and first variant


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compile_options: CompileOptions) -> Path:
    """This test's own compile cache ($TILEGEN_CACHE, passed on to the tilegen it starts)."""
    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "cubins"


def start(args: list[str], cwd: Path, **env: str) -> tuple[subprocess.Popen, LineReader]:
    """tilegen in a process group of its own, as a shell runs a job (a signal to the group reaches
    every process in it, as Ctrl-C at a terminal does), and the lines it writes on stderr."""
    environment = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO), **env)
    process = subprocess.Popen([sys.executable, "-m", "gen", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env=environment, cwd=cwd, start_new_session=True)
    return process, LineReader(process.stderr.fileno())


def stop(process: subprocess.Popen, signum: int, group: bool) -> float:
    """Send the signal; seconds until tilegen has exited."""
    started = time.monotonic()
    if group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    process.wait(timeout=patient(30))
    return time.monotonic() - started


def test_ctrl_c_stops_a_cold_compile_at_once_and_caches_no_failure(tmp_path: Path, cache: Path, fake_nvcc,
                                                                   capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    fake = fake_nvcc(FIRST_THEN_HANG)
    process, said = start(["compile", *SPACE, "--out", str(out)], tmp_path, PATH=fake.path)
    said.until("compile 1/2")
    fake.announcements.until("started")  # nvcc is busy with the second
    assert stop(process, signal.SIGINT, group=True) < patient(STOP_WITHIN_S)
    assert process.returncode == 130
    assert said.until("tilegen: interrupted").startswith(KEPT)
    rows = read_rows(out / "results.jsonl")  # every line whole
    assert sorted(r.status for r in rows) == ["compiled", "skipped"]
    assert (out / "results.csv").read_text().count("\n") == len(rows) + 1
    assert cache_summary(cache).failed == 0
    assert main(["compile", *SPACE]) == 0 and ", 0 failed," in capsys.readouterr().out


def test_sigterm_stops_a_sweep_whose_resume_then_finishes_it(tmp_path: Path, cache: Path, fake_nvcc,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    sweep = ["sweep", "matmul", "-p", "tile=8,16,32", "-p", "padding=0,1,2", "-p", "bounds=guard", "--size",
             "96x96x96", "--arch", "sm_90", "--jobs", "1", "--out", str(out)]
    fake = fake_nvcc(FIRST_THEN_HANG)
    process, said = start(sweep, tmp_path, PATH=fake.path)
    said.until("sweep 1/9")
    fake.announcements.until("started")
    assert stop(process, signal.SIGTERM, group=False) < patient(STOP_WITHIN_S)
    assert process.returncode == 130 and "--resume to continue" in said.until("tilegen: interrupted")
    results = out / "results.jsonl"
    kept = read_rows(results)
    assert len(kept) == 1 and (out / "results.csv").exists()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main([*sweep, "--resume"]) == 0  # the real nvcc
    rows = read_rows(results)
    assert [r.key for r in rows[: len(kept)]] == [r.key for r in kept]  # nothing rewritten
    assert len({r.key for r in rows}) == len(rows) == 9  # nothing lost, nothing twice
    assert not [r for r in rows if r.status == "compile_error"]


def test_a_closed_terminal_stops_a_compile_kills_its_nvcc_and_leaves_no_temporary_files(
        tmp_path: Path, cache: Path, fake_nvcc) -> None:
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    scratch.mkdir()
    fake = fake_nvcc('[ "$RUN" -gt 1 ] && { touch "$TMPDIR/tmpxft_00001_k.cpp1.ii"; sleep 3600 & '
                     'echo "started $RUN $$ $!" > "$ANNOUNCE"; wait; }; exec "$REAL" "$@"')
    process, said = start(["compile", *SPACE, "--out", str(out)], tmp_path, PATH=fake.path, TMPDIR=str(scratch))
    said.until("compile 1/2")
    _, _, nvcc, stage = fake.announcements.until("started").split()
    assert stop(process, signal.SIGHUP, group=True) < patient(STOP_WITHIN_S)
    assert process.returncode == 130
    assert said.until("tilegen: interrupted").startswith(KEPT)
    assert ends_within(int(nvcc), 10.0) and ends_within(int(stage), 10.0)
    assert not list(scratch.iterdir())  # tilegen's folders and nvcc's files alike
    assert sorted(r.status for r in read_rows(out / "results.jsonl")) == ["compiled", "skipped"]
    assert cache_summary(cache).failed == 0


def test_ctrl_c_while_nvcc_is_asked_its_version_stops_that_nvcc_too(tmp_path: Path, cache: Path, fake_nvcc) -> None:
    fake = fake_nvcc(answer='case "$*" in *--version*) sleep 3600 & echo "started 0 $$ $!" > "$ANNOUNCE"; wait;; '
                            'esac; exec "$REAL" "$@"')
    process, said = start(["compile", *SPACE], tmp_path, PATH=fake.path)
    _, _, nvcc, child = fake.announcements.until("started").split()
    assert stop(process, signal.SIGINT, group=False) < patient(STOP_WITHIN_S)
    assert process.returncode == 130 and said.until("tilegen: interrupted")
    assert ends_within(int(nvcc), 10.0) and ends_within(int(child), 10.0)


# Modules tilegen imports as it starts, shadowed by one that says so and then waits, as a slow import
# would: socket is the first beyond the gen package itself; numpy's C extension turns an interrupt
# in its import into an ImportError of its own (a 50-line advice to reinstall numpy).
WAITS = "os.read(os.pipe()[0], 1)\n"
STARTING = {"socket": WAITS, "numpy": WAITS,
            "numpy-import-error": f"try:\n    {WAITS}except BaseException as error:\n"
                                  f"    raise ImportError('Importing the numpy C-extensions failed.') from error\n"}


@pytest.mark.parametrize("shadowed", STARTING)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_while_tilegen_starts_is_an_interrupt_not_a_traceback(tmp_path: Path, signum: int,
                                                                        shadowed: str) -> None:
    """The command line's imports take half a second; a signal then is handled as later on, from the
    first module tilegen imports beyond its package (before that, Python itself is starting)."""
    announcements = Announcements(tmp_path / "importing")
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / f"{shadowed.split('-')[0]}.py").write_text(
        f"import os\nos.write(os.open({str(tmp_path / 'importing')!r}, os.O_WRONLY), b'importing\\n')\n"
        f"{STARTING[shadowed]}")
    process = subprocess.Popen([sys.executable, "-m", "gen", "list"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, cwd=tmp_path, start_new_session=True,
                               env=dict(os.environ, PYTHONPATH=f"{shadow}{os.pathsep}{REPO}"))
    try:
        announcements.until("importing")
        assert stop(process, signum, group=True) < patient(STOP_WITHIN_S)
        assert process.returncode == 130
        assert process.stderr.read() == b"tilegen: interrupted\n"
    finally:
        announcements.close()


def test_a_killed_compile_raises_and_leaves_nothing_in_the_cache(tmp_path: Path, fake_nvcc,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_nvcc(ANNOUNCE_AND_HANG)
    monkeypatch.setenv("PATH", fake.path)
    options = CompileOptions(arch="sm_90", cache=tmp_path / "cubins", jobs=1)
    children = ProcessGroup()

    def kill_once_nvcc_started() -> None:
        fake.announcements.until("started")
        children.kill_all()

    threading.Thread(target=kill_once_nvcc_started, daemon=True).start()
    with pytest.raises(Interrupted):
        compile_batch([SgemmVariant(bm=64, bn=64, wm=32, wn=32)], options, children)
    assert not list(options.cache.glob("*.json"))
    with pytest.raises(Interrupted):  # and the group starts nothing more
        compile_batch([SgemmVariant(bm=64, bn=64, wm=32, wn=64)], options, children)
    assert fake.compiles == 1


def test_the_cache_command_shows_purges_failures_and_clears(tmp_path: Path, compile_options, monkeypatch) -> None:
    from gen.compiling import compiler
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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("ignored", [True, False], ids=["ignored", "handled"])
def test_an_ignored_sighup_stays_ignored_and_sigint_stops_tilegen_however_it_started(tmp_path: Path, signum: int,
                                                                                    ignored: bool) -> None:
    """`nohup tilegen ...` starts with SIGHUP ignored: a SIGHUP (here from a plugin tilegen loads) must
    not stop it. A script's `tilegen ... &` job starts with SIGINT ignored by the shell: Ctrl-C sent to
    the script's process group must stop it all the same, as it does one started in the foreground."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "signals_itself.py").write_text(
        f"import os\nfrom gen.api import Family\nos.kill(os.getpid(), {int(signum)})\n\n\nclass Unfinished(Family):\n"
        f"    pass\n")
    started_as = f"import signal\nsignal.signal({int(signum)}, signal.SIG_IGN)\n" if ignored else ""
    code = f"{started_as}import sys\nfrom gen.cli.entry import run\nsys.exit(run())\n"
    done = subprocess.run([sys.executable, "-c", code, "--family-path", str(plugins), "list"], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=tmp_path)
    if ignored and signum == signal.SIGHUP:
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert "sgemm" in done.stdout
    else:
        assert (done.returncode, done.stderr) == (130, "tilegen: interrupted\n")
