"""Faults of the environment on every path tilegen touches (issue 29): each file-system error class
(a full disk, a read-only file system, a file tilegen may not change, no permission, a file where a
folder must be, a folder where a file must be, a link loop, a name too long) on the compile cache,
a run folder, its lock, the tuning database, an export and a family folder. Each must end in one
line naming the path and what to do, exit code 1 for a fault and 2 for a path that cannot serve as
given, never "internal error" or a traceback; and every record already there stays as it was.

Real faults, made as root: a 16 KiB tmpfs filled up, a tmpfs remounted read-only, `chattr +i`, and a
process without CAP_DAC_OVERRIDE for permission bits. Cases skip, saying why, where these are not
permitted. Each case runs `tilegen` in a process of its own, its GPU a fake one (tests.fakes).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

import gen
from gen.compiling.compiler import CompileOptions, compile_variant
from gen.core.errors import UsageError
from gen.families.matmul import MatmulVariant
from gen.store.export import write_t4
from gen.store.results_log import RUN_LOCK
from gen.store.tuning_db import TuningDB

from . import fakes
from .conftest import REPO
from .test_state_faults import WITHOUT_ROOT_POWERS, after, measured
from .waits import patient

# tilegen's command line with the fake GPU of tests.fakes (every variant ok): what sweep and tune run on.
DRIVER = ("import sys; from gen.evaluate.options import EXECUTORS; from tests.fakes import FakeExecutor; "
          "EXECUTORS['local'] = lambda run: FakeExecutor(); from gen.cli.main import main; sys.exit(main(sys.argv[1:]))")
POINTS = ["-p", "padding=0", "-p", "bounds=guard", "--arch", "sm_90", "--jobs", "1"]
TWO = ["matmul", "-p", "tile=8,16", *POINTS, "--size", "64x64x64"]  # a sweep of two points
LONG = "n" * 256  # one byte over the longest name a file system takes
DISK = "512k"  # the small disk made full: room for a cache, a run and a database, and then none
GUARD_S = 120  # turns a hang into a failure; no test waits for it


def _can(*command: str) -> str | None:
    """Why `command` (made to try a tool on this machine) fails here, or None when it works."""
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    except OSError as error:
        return f"{command[0]}: {error.strerror}"
    return None if done.returncode == 0 else f"{' '.join(command)}: {done.stderr.strip()}"


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | None]:
    """Why each way of making a fault is not permitted here (None: it is)."""
    probe = tmp_path_factory.mktemp("probe")
    (probe / "mnt").mkdir()
    (probe / "file").touch()
    mount = _can("mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(probe / "mnt"))
    if mount is None:
        _can("umount", str(probe / "mnt"))
    immutable = _can("chattr", "+i", str(probe / "file"))
    if immutable is None:
        _can("chattr", "-i", str(probe / "file"))
    return {"mount": mount, "chattr": immutable, "root": None if os.geteuid() == 0 else "not root"}


# ---- what each path holds before the fault -----------------------------------------------------------------

@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, compile_options: CompileOptions) -> Path:
    """A cache holding matmul tile 8, a run of TWO whose tile-16 row is still to do, a tuning
    database, a T4 file tilegen wrote from it, and a family folder."""
    folder = tmp_path_factory.mktemp("prepared")
    assert compile_variant(MatmulVariant(tile=8, padding=0), CompileOptions(arch="sm_90", cache=folder / "cache" /
                                                                            "cubins")).ok
    done = tilegen(folder, ["sweep", *TWO, "--out", "run"])
    assert done.returncode == 0, done.stderr
    results = folder / "run" / "results.jsonl"
    results.write_text("".join(line for line in results.read_text().splitlines(keepends=True) if "_t16_" not in line))
    (folder / "run" / "results.csv").unlink()
    TuningDB(folder / "tuned.sqlite").record([measured(16, "64x64x64"), measured(32, "64x64x64")])
    write_t4(TuningDB(folder / "tuned.sqlite", create=False).rows(), folder / "t4.json")
    shutil.copytree(REPO / "tests" / "families", folder / "families",
                    ignore=shutil.ignore_patterns("__pycache__", "blur*"))
    return folder


def tilegen(cwd: Path, args: list[str], setup: str = "", **env: str) -> subprocess.CompletedProcess:
    """tilegen ARGS on the fake GPU, in `cwd`, after `setup` (Python run before the command: see
    test_state_faults.after)."""
    command = [sys.executable, "-c", DRIVER, *args]
    return subprocess.run(after(setup, *command[1:]) if setup else command, capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1", **env),
                          timeout=patient(GUARD_S))


@dataclass(frozen=True)
class Place:
    """A path tilegen touches: its name where it lives, how to fill it with what was recorded there
    (from the prepared folder), and the command that uses it."""

    name: str
    fill: Callable[[Path, Path], None]  # (prepared, where): what was recorded there, at `where`
    command: Callable[[Path], tuple[list[str], dict[str, str]]]  # the path -> tilegen's arguments, environment
    folder: bool  # a folder (else a file)
    inner: str = ""  # a file inside the folder, for a folder where that file must be
    reads_only: bool = False  # tilegen only reads here: a full or read-only disk is no fault


def _copy(name: str) -> Callable[[Path, Path], None]:
    def fill(prepared: Path, where: Path) -> None:
        source = prepared / name
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, where)
    return fill


def _lock_left(prepared: Path, where: Path) -> None:
    """A killed run's lock, left in its folder."""
    where.write_text("4242 elsewhere\n")


PLACES = {
    "cache": Place("cache", _copy("cache"), lambda path: (["compile", "matmul", "-p", "tile=8,16", *POINTS],
                                                          {"TILEGEN_CACHE": str(path)}), folder=True,
                   inner="cubins/RECORD"),
    "run folder": Place("run", _copy("run"), lambda path: (["sweep", *TWO, "--out", str(path), "--resume"], {}),
                        folder=True, inner="results.jsonl"),
    "lock": Place(f"run/{RUN_LOCK}", _lock_left, lambda path: (["sweep", *TWO, "--out", str(path.parent),
                                                                "--resume"], {}), folder=False),
    "database": Place("tuned.sqlite", _copy("tuned.sqlite"), lambda path: (
        ["tune", "matmul", "--size", "64x64x64", "-p", "tile=8,16", *POINTS, "--strategy", "brute", "--budget", "2",
         "--db", str(path)], {}), folder=False),
    "export": Place("t4.json", _copy("t4.json"), lambda path: (["export", "--t4", str(path), "--db", "tuned.sqlite"],
                                                               {}), folder=False),
    "family path": Place("families", _copy("families"), lambda path: (["list", "--family-path", str(path)], {}),
                         folder=True, inner="stencil.cu.j2", reads_only=True),
}
# The lock's name is tilegen's own, so no name of it is too long, and the folder it is in is the run folder's.
NOT_APPLICABLE = {("lock", "ENAMETOOLONG"), ("lock", "ENOTDIR")}
FAULTS = ("ENOSPC", "EROFS", "EPERM", "EACCES", "ENOTDIR", "EISDIR", "ELOOP", "ENAMETOOLONG")


class Scene:
    """The case's folder: the place made faulty, and what to undo afterwards."""

    def __init__(self, root: Path, machine: dict[str, str | None]):
        self.root, self.machine = root, machine
        self.mounts: list[Path] = []
        self.immutable: list[Path] = []

    def need(self, what: str) -> None:
        if self.machine[what]:
            pytest.skip(f"cannot make this fault here: {self.machine[what]}")

    def tmpfs(self, name: str) -> Path:
        self.need("mount")
        folder = self.root / name
        folder.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(folder)], check=True)
        self.mounts.append(folder)
        return folder

    def fill_up(self, folder: Path) -> None:
        """Write into `folder` until its file system is full."""
        filler = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while os.write(filler, b"\0" * 4096):
                pass
        except OSError as error:
            assert error.errno == errno.ENOSPC
        finally:
            os.close(filler)

    def read_only(self, folder: Path) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)

    def make_immutable(self, path: Path) -> None:
        self.need("chattr")
        subprocess.run(["chattr", "+i", str(path)], check=True)
        self.immutable.append(path)

    def undo(self) -> None:
        for path in self.immutable:
            subprocess.run(["chattr", "-i", str(path)], check=False)
        for folder in reversed(self.mounts):
            subprocess.run(["umount", str(folder)], check=False)


@pytest.fixture
def scene(tmp_path: Path, machine: dict[str, str | None]) -> Iterator[Scene]:
    made = Scene(tmp_path, machine)
    yield made
    made.undo()


def make_fault(scene: Scene, place: Place, fault: str, prepared: Path) -> tuple[Path, str]:
    """Fill the place with what was recorded there, then make `fault` on it: its path, and Python to
    run in the tilegen process first (to give up root's power over permission bits)."""
    root, setup = scene.root, ""
    if fault in ("ENOSPC", "EROFS"):
        disk = scene.tmpfs("disk")
        path = disk / place.name
        _fill(place, prepared, path)
        scene.fill_up(disk) if fault == "ENOSPC" else scene.read_only(disk)
    elif fault == "EPERM":
        path = root / place.name
        _fill(place, prepared, path)
        scene.make_immutable(path)
    elif fault == "EACCES":
        scene.need("root")
        path = root / place.name
        _fill(place, prepared, path)
        path.chmod(0o000 if place.reads_only else 0o555 if place.folder else 0o444)
        setup = WITHOUT_ROOT_POWERS
    elif fault == "ENOTDIR":
        (root / "afile").write_text("a file, not a folder\n")
        path = root / "afile" / place.name
    elif fault == "EISDIR":
        path = root / place.name
        if place.folder:
            _fill(place, prepared, path)
            inner = next(path.glob("cubins/*.json")) if place.inner == "cubins/RECORD" else path / place.inner
            inner.unlink()
            inner.mkdir()  # a folder where tilegen keeps a file
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.mkdir()
    elif fault == "ELOOP":
        path = root / place.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(path.name)
    else:
        path = root / LONG if "/" not in place.name else root / place.name.replace(place.name.split("/")[-1], LONG)
    shutil.copy2(prepared / "tuned.sqlite", root / "tuned.sqlite") if place.name != "tuned.sqlite" else None
    return path, setup


def _fill(place: Place, prepared: Path, path: Path) -> None:
    if "/" in place.name:  # the lock: in the prepared run
        _copy("run")(prepared, path.parent)
    place.fill(prepared, path)


def recorded(root: Path) -> dict[str, bytes]:
    """Every file under `root` that can be read, with its bytes."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.name != "filler":
            try:
                found[str(path.relative_to(root))] = path.read_bytes()
            except OSError:
                continue
    return found


def expected(place: Place, fault: str) -> tuple[int, str]:
    """The exit code, and the one line's start: a fault of the machine is 1, a path that cannot serve
    as given is 2. A family folder is only read: a full or read-only disk changes nothing, and a
    family whose template cannot be read is left out with a warning."""
    if place.reads_only and fault in ("ENOSPC", "EROFS", "EPERM"):
        return 0, ""
    if place.reads_only and fault == "EISDIR":
        return 0, "tilegen: warning: "
    if place.inner == "cubins/RECORD" and fault == "EISDIR":  # a folder where a record should be: a damaged
        return 0, ""  # entry, removed with a note and compiled again (test_compile_faults.py)
    return (1 if fault == "ENOSPC" else 2), "tilegen: error: "


CASES = [pytest.param(place, fault, id=f"{place}-{fault}") for place in PLACES for fault in FAULTS
         if (place, fault) not in NOT_APPLICABLE]


@pytest.mark.parametrize("place_name, fault", CASES)
def test_a_fault_on_a_path_is_one_line_naming_it_and_loses_nothing(
        scene: Scene, prepared: Path, place_name: str, fault: str) -> None:
    place = PLACES[place_name]
    path, setup = make_fault(scene, place, fault, prepared)
    before = recorded(scene.root)
    args, env = place.command(path)
    done = tilegen(scene.root, args, setup, **env)
    said = done.stdout + done.stderr
    assert "Traceback" not in said and "internal error" not in said, said
    code, start = expected(place, fault)
    assert done.returncode == code, (done.returncode, said)
    lines = [line for line in done.stderr.splitlines() if line.startswith(("tilegen: error: ", "tilegen: warning: "))]
    if start:
        assert len(lines) == 1 and lines[0].startswith(start), done.stderr
        assert path.name[:40] in lines[0] or str(path.parent) in lines[0], lines[0]
    else:
        assert not lines, done.stderr
    if code:
        assert done.stderr.rstrip().endswith(lines[0]), done.stderr
    assert_kept(before, recorded(scene.root))


def assert_kept(before: dict[str, bytes], now: dict[str, bytes]) -> None:
    """Nothing recorded is lost or changed: a results log may have grown by whole rows before the
    disk filled; a dead run's lock is no record."""
    for name, content in before.items():
        if name.endswith("results.jsonl"):
            assert now.get(name, b"").startswith(content) and now[name].endswith(b"\n"), name
        elif not name.endswith(RUN_LOCK):
            assert now.get(name) == content, name


# ---- links tilegen did not make -----------------------------------------------------------------------------

@pytest.mark.parametrize("link", [RUN_LOCK, "results.jsonl", "run.json"])
def test_a_run_file_that_is_a_link_to_a_users_file_is_refused_and_the_file_kept(
        tmp_path: Path, prepared: Path, link: str) -> None:
    thesis = tmp_path / "thesis.txt"
    thesis.write_text("three years of work\n")
    shutil.copytree(prepared / "run", tmp_path / "run")
    (tmp_path / "run" / link).unlink(missing_ok=True)
    (tmp_path / "run" / link).symlink_to(thesis)
    done = tilegen(tmp_path, ["sweep", *TWO, "--out", "run", "--resume"])
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"tilegen: error: --out's run/{link} is a symbolic link, not a file tilegen made")
    assert thesis.read_text() == "three years of work\n"


@pytest.mark.parametrize("target", ["t4.json", "afile"])
def test_export_writes_no_file_through_a_link(tmp_path: Path, prepared: Path, target: str) -> None:
    shutil.copy2(prepared / "tuned.sqlite", tmp_path / "tuned.sqlite")
    (tmp_path / "afile").write_text("mine\n")
    (tmp_path / "t4.json").symlink_to(target)  # a loop, or a link to the user's file
    done = tilegen(tmp_path, ["export", "--t4", "t4.json", "--db", "tuned.sqlite", "--force"])
    assert done.returncode == 2 and done.stderr.startswith("tilegen: error: --t4 t4.json is a symbolic link;")
    assert (tmp_path / "t4.json").is_symlink() and (tmp_path / "afile").read_text() == "mine\n"


@pytest.mark.parametrize("companion", ["-wal", "-shm", "-journal"])
def test_export_never_writes_over_a_databases_journal_even_with_force(tmp_path: Path, prepared: Path,
                                                                     companion: str) -> None:
    shutil.copy2(prepared / "tuned.sqlite", tmp_path / "tuned.sqlite")
    journal = tmp_path / f"tuned.sqlite{companion}"
    journal.write_bytes(b"\x37\x7f\x06\x82 what SQLite keeps beside the database")
    done = tilegen(tmp_path, ["export", "--t4", journal.name, "--db", "tuned.sqlite", "--force"])
    assert done.returncode == 2 and done.stderr.startswith(
        f"tilegen: error: --t4 {journal.name} is the journal of the SQLite database tuned.sqlite; tilegen never "
        f"writes over it"), done.stderr
    assert journal.read_bytes().startswith(b"\x37\x7f\x06\x82")


@pytest.mark.parametrize("fault", ["EROFS", "EPERM"])
def test_a_database_in_a_read_only_folder_is_read(scene: Scene, prepared: Path, fault: str) -> None:
    folder = scene.tmpfs("disk") if fault == "EROFS" else scene.root / "disk"
    folder.mkdir(exist_ok=True)
    shutil.copy2(prepared / "tuned.sqlite", folder / "tuned.sqlite")
    scene.read_only(folder) if fault == "EROFS" else scene.make_immutable(folder)
    before = recorded(folder)
    for command in (["report", "--db", "disk/tuned.sqlite"],
                    ["best", "matmul", "--size", "64x64x64", "--gpu", "H100", "--db", "disk/tuned.sqlite"]):
        done = tilegen(scene.root, command)
        assert done.returncode == 0 and "matmul_f32_t32" in done.stdout, done.stdout + done.stderr
    assert recorded(folder) == before and sorted(os.listdir(folder)) == ["tuned.sqlite"]


# ---- the compile cache's own shapes of damage (finding 5) and a full disk before the first row (finding 4) --

def _cubins_a_file(cache: Path) -> None:
    shutil.rmtree(cache / "cubins")
    (cache / "cubins").write_text("a file where the cache's folder should be\n")


def _cubin_a_folder(cache: Path) -> None:
    cubin = next((cache / "cubins").glob("*.cubin"))
    cubin.unlink()
    cubin.mkdir()


CACHE_SHAPES = {  # what is wrong, the fault it is made under, the command, its exit code and its line
    "cubins/ a file": (_cubins_a_file, "", ["compile", "matmul", "-p", "tile=8", *POINTS], 2,
                       "cubins is a file, not a folder"),
    "read-only, a damaged entry": (lambda cache: next((cache / "cubins").glob("*.json")).write_text("{"), "EROFS",
                                   ["compile", "matmul", "-p", "tile=8", *POINTS], 2, "cache"),
    "read-only, --clear": (lambda cache: None, "EROFS", ["cache", "--clear"], 2, "cache"),
    "read-only, --purge-failed": (_cubin_a_folder, "EROFS", ["cache", "--purge-failed"], 2, "cache"),
}


@pytest.mark.parametrize("shape", sorted(CACHE_SHAPES))
def test_a_cache_tilegen_cannot_use_is_one_line(scene: Scene, prepared: Path, shape: str) -> None:
    damage, fault, command, code, fragment = CACHE_SHAPES[shape]
    cache = scene.root / "cache"
    if fault:  # the entries' folder on a disk of its own, made read-only; the cache folder writable
        shutil.copytree(prepared / "cache" / "cubins", scene.tmpfs("cache/cubins"), dirs_exist_ok=True)
    else:
        shutil.copytree(prepared / "cache", cache)
    damage(cache)
    if fault:
        scene.read_only(cache / "cubins")
    before = recorded(cache)
    done = tilegen(scene.root, command, TILEGEN_CACHE=str(cache))
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("tilegen: error: ")]
    assert done.returncode == code and len(errors) == 1 and done.stderr.rstrip().endswith(errors[0]), done.stderr
    assert fragment in errors[0] and str(cache) in errors[0], errors[0]
    if fault:  # where the cache can be written, a damaged entry's record is removed, as it should be
        assert recorded(cache) == before


def test_a_full_disk_under_an_empty_out_is_one_line_and_leaves_no_file(scene: Scene) -> None:
    disk = scene.tmpfs("disk")
    scene.fill_up(disk)
    (disk / "run").mkdir()  # an empty --out: its lock is taken before anything is read
    done = tilegen(scene.root, ["sweep", *TWO, "--out", "disk/run"])
    errors = [line for line in done.stderr.splitlines() if line.startswith("tilegen: error: ")]
    assert done.returncode == 1 and len(errors) == 1 and "(No space left on device)" in errors[0], done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert not list((disk / "run").iterdir())


def test_tune_kernel_with_a_cache_file_it_cannot_write_is_one_line_before_the_tune(
        scene: Scene, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_family_path) -> None:
    results = scene.tmpfs("results")
    scene.read_only(results)
    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path / "cache"))
    a = np.ones(100, dtype=np.float32)
    source = "__global__ void add(float *c, const float *a, int n) { int i = threadIdx.x; if (i < n) c[i] += a[i]; }"
    with pytest.raises(UsageError, match="cache=.* cannot be written") as raised:
        gen.tune_kernel("add", source, 100, [np.zeros_like(a), a, np.int32(100)], {"block_size_x": [32, 64]},
                        cache=str(results / "add.json"), db=tmp_path / "t.sqlite", executor=fakes.FakeExecutor(),
                        quiet=True)
    assert "\n" not in str(raised.value)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["results"]  # no database, no family folder
