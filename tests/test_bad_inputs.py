"""Bad input, on the command line and through the Python API, as a new user types it.

Every case must end in one line that names the problem (the command line: exit code 2 and no
traceback; the API: a TilegenError), and must leave every file as it was: each case runs in a
folder of prepared files (a finished run with a torn last line, databases, result files), whose
tree and bytes are compared before and after.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import gen
from gen.cli.main import main
from gen.compiling.compiler import CompileOptions, compile_variant
from gen.compiling.nvrtc import nvrtc_options
from gen.compiling.render import render
from gen.compiling.pool import compile_variants
from gen.core.errors import TilegenError
from gen.store.export import write_t4
from gen.families import get_family, variant_from_name
from gen.families.matmul import MatmulVariant
from gen.compiling.emit import emit
from gen.evaluate.options import RunOptions
from gen.core.results import DeviceInfo, Row, Status
from gen.core.timing import TimingOptions
from gen.families.space import Space
from gen.store.results_log import read_rows
from gen.commands.sweep import SweepOptions, preview, sweep
from gen.commands.tune import TuneOptions, tune
from gen.store.tuning_db import TuningKey, TuningDB

from .conftest import REPO, _gpu_missing
from .fakes import FakeExecutor
from .waits import patient

H100 = DeviceInfo("NVIDIA H100 80GB HBM3", "9.0", 132, 80 * 2**30, 50 * 2**20, "580")
LONG = "n" * 256  # a file name one byte over the file systems' limit of 255
TOO_LONG = "which is 256 bytes long; a file or folder name may be at most 255 bytes"
NO_GPU = pytest.mark.skipif(_gpu_missing() is None, reason="needs a machine without a usable GPU")
TORN = b'{"name": "matmul_f32_t8_p0_gua'  # a killed run's half-written last line

# The prepared run: matmul tile 8, padding 0, bounds guard at 64x64x64, compiled for sm_90.
RUN = ["-p", "tile=8", "-p", "padding=0", "-p", "bounds=guard", "--size", "64x64x64", "--arch", "sm_90",
       "--out", "run", "--resume"]


def _resume_with(*changes: str, drop: tuple[str, ...] = ()) -> list[str]:
    """The prepared run's sweep --resume with options dropped (each with its value) and others added."""
    args = list(RUN)
    for option in drop:
        at = args.index(option)
        del args[at:at + 2]
    return ["sweep", "matmul", *args, *changes]


# ---- the prepared folder ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prepared_run(tmp_path_factory: pytest.TempPathFactory, compile_options) -> Path:
    out = tmp_path_factory.mktemp("prepared") / "run"
    sweep(SweepOptions("matmul", out, params={"tile": ["8"], "padding": ["0"], "bounds": ["guard"]},
                       sizes=["64x64x64"], progress=False, run=RunOptions(arch="sm_90", seed=1)),
          executor=FakeExecutor())
    return out


@pytest.fixture(scope="module")
def prepared_databases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Databases made once and copied into each case's folder: tuned.sqlite's damaged copies, and
    another program's file with a table named measurements."""
    folder = tmp_path_factory.mktemp("databases")
    tuned = tmp_path_factory.mktemp("tuned") / "tuned.sqlite"
    TuningDB(tuned).record([_measured(MatmulVariant(tile=32), "1024x1024x1024")])
    for name, damage in DAMAGED_DATABASES.items():
        shutil.copy(tuned, folder / name)
        with sqlite3.connect(folder / name) as connection:
            connection.execute("UPDATE measurements SET row = ?", (damage(connection.execute(
                "SELECT row FROM measurements").fetchone()[0]),))
        connection.close()
    with sqlite3.connect(folder / "measures.sqlite") as connection:
        connection.execute("CREATE TABLE measurements (taken TEXT, value REAL)")
    connection.close()
    return folder


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prepared_run: Path, prepared_databases: Path) -> Path:
    """The folder every case runs in, holding what the cases point at."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TILEGEN_DB", str(tmp_path / "default.sqlite"))  # no database unless a case names one
    monkeypatch.delenv("TILEGEN_FAMILY_PATH", raising=False)
    shutil.copytree(prepared_run, tmp_path / "run")
    with open(tmp_path / "run" / "results.jsonl", "ab") as results:
        results.write(TORN)
    shutil.copytree(prepared_run, tmp_path / "used")
    (tmp_path / "afile").write_text("a file, not a folder\n")
    (tmp_path / "notes.txt").write_text("not a database " * 40)
    with sqlite3.connect(tmp_path / "foreign.sqlite") as connection:  # another program's database
        connection.execute("CREATE TABLE notes (body TEXT)")
        connection.execute("INSERT INTO notes VALUES ('mine')")
    connection.close()
    TuningDB(tmp_path / "tuned.sqlite").record([_measured(MatmulVariant(tile=32), "1024x1024x1024")])
    for database in prepared_databases.iterdir():
        shutil.copy(database, tmp_path / database.name)
    for name, line in ROW_LINES.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_text(line + "\n")
    for name, damage in DAMAGED_RUNS.items():
        shutil.copytree(prepared_run, tmp_path / name)
        first, *rest = (tmp_path / name / "results.jsonl").read_text().splitlines(keepends=True)
        (tmp_path / name / "results.jsonl").write_text("".join([damage(first.rstrip("\n")) + "\n", *rest]))
    for name, files in USERS_FOLDERS.items():
        (tmp_path / name).mkdir()
        for file in files:
            (tmp_path / name / file).write_text("the user's own\n")
    (tmp_path / "noresults").mkdir()
    (tmp_path / "variants" / "matmul").mkdir(parents=True)
    (tmp_path / "variants" / "matmul" / "matmul_f32_t16_p1_guard_both.cu").write_text("// my own kernel\n")
    return tmp_path


def _measured(variant: Any, shape: str) -> Row:
    return Row(variant.name, variant.family, variant.params(), Status.OK, shape=shape, median_ms=1.0, error=1e-7,
               provenance=H100.provenance())


ROW_LINES = {  # folders whose results.jsonl holds one line that is not a result row
    "rows-list": "[1, 2]",
    "rows-text": '"ok"',
    "rows-number": "3",
    "rows-null": "null",
    "rows-empty-object": "{}",
    "rows-bad-status": json.dumps({"name": "matmul_f32_t8_p0_guard_both", "family": "matmul", "params": {},
                                   "status": "fine"}),
    "rows-not-json": "name=matmul status=ok",
}


def _with(**fields: Any) -> Callable[[str], str]:
    """A damage: the row's JSON with these fields set."""
    return lambda text: json.dumps({**json.loads(text), **fields})


def _status_twice(text: str) -> str:
    return text[:-1] + ', "status": "ok"}'


DAMAGED_RUNS = {  # copies of the prepared run whose first row has a field of the wrong kind
    "row-shape": _with(shape=5),
    "row-params": _with(params="tile=8"),
    "row-median": _with(median_ms="fast"),
    "row-count": _with(skipped_count="3"),
    "row-ok-unchecked": _with(error=None),
    "row-median-negative": _with(median_ms=-1),
    "row-median-nan": _with(median_ms=float("nan")),
    "row-median-infinite": _with(median_ms=float("inf")),
    "row-error-negative": _with(error=-0.5),
    "row-samples-negative": _with(samples=-3),
    "row-twice": _status_twice,
}
DAMAGED_DATABASES = {  # copies of tuned.sqlite whose one measurement has a row that is not a result row
    "bad-json.sqlite": lambda text: text[:40],
    "bad-status.sqlite": _with(status="fine"),
    "bad-twice.sqlite": _status_twice,
    "bad-median-negative.sqlite": _with(median_ms=-1),
    "bad-median-nan.sqlite": _with(median_ms=float("nan")),
    "bad-median-infinite.sqlite": _with(median_ms=float("inf")),
}
USERS_FOLDERS = {"mine-csv": ["results.csv"], "mine-settings": ["run.json", "notes.txt"]}  # not tilegen's


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under `root`, with the bytes of each file (None for folders)."""
    return {str(path.relative_to(root)): path.read_bytes() if path.is_file() else None
            for path in sorted(root.rglob("*"))}


def run_main(capsys: pytest.CaptureFixture, args: list[str]) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as stop:  # argparse's own exit
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, fragment: str) -> None:
    assert code == 2, (code, out, err)
    assert err.startswith("tilegen: error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in out + err
    assert fragment in err, (fragment, err)


# ---- the command line ---------------------------------------------------------------------------------------

def case(args: str | list[str], fragment: str, *marks: Any, env: dict[str, str] | None = None,
         id: str | None = None) -> Any:
    return pytest.param(args.split() if isinstance(args, str) else args, fragment, env or {}, marks=marks,
                        id=id or (args if isinstance(args, str) else " ".join(args)))


CLI_CASES = [
    # numbers the command line refuses
    case("tune matmul --size 64x64x64 --budget 0", "--budget: must be a whole number of at least 1, got '0'"),
    case("tune matmul --size 64x64x64 --budget -1", "--budget: must be a whole number of at least 1"),
    case("tune matmul --size 64x64x64 --budget nan", "--budget: must be a whole number of at least 1, got 'nan'"),
    case("tune matmul --size 64x64x64 --budget inf", "--budget: must be a whole number of at least 1, got 'inf'"),
    case("tune matmul --size 64x64x64 --budget 2.5", "--budget: must be a whole number"),
    case("tune matmul --size 64x64x64 --budget 1_0", "--budget: must be a whole number"),
    case("tune matmul --size 64x64x64 --budget +5", "--budget: must be a whole number"),
    case("tune matmul --size 64x64x64 --budget ٥", "--budget: must be a whole number"),
    case("tune matmul --size 64x64x64 --time 0", "--time: must be a positive, finite number of seconds"),
    case("tune matmul --size 64x64x64 --time inf", "--time: must be a positive, finite number of seconds"),
    case("tune matmul --size 64x64x64 --top 0", "--top: must be a whole number of at least 1"),
    case("tune matmul --size 64x64x64 --seed -3", "--seed: must be a whole number, got '-3'"),
    case("sweep matmul --out x --timing-budget 0", "argument --timing-budget: must be a positive, finite number of "
                                                   "seconds, got '0'"),
    case("sweep matmul --out x --timing-budget -1", "--timing-budget: must be a positive, finite number of seconds"),
    case("sweep matmul --out x --timing-budget nan", "--timing-budget: must be a positive, finite number"),
    case("sweep matmul --out x --timing-budget inf", "--timing-budget: must be a positive, finite number"),
    case("sweep matmul --out x --timing-budget soon", "--timing-budget: must be a number of seconds, got 'soon'"),
    case("sweep matmul --out x --timeout inf", "--timeout: must be a positive, finite number of seconds"),
    case("sweep matmul --out x --timeout 0", "--timeout: must be a positive, finite number of seconds"),
    case("tune matmul --size 64x64x64 --timeout -3", "--timeout: must be a positive, finite number of seconds"),
    case("sweep matmul --out x --top -1", "--top: must be a whole number of at least 1, got '-1'"),
    case("sweep matmul --out x --top 0", "--top: must be a whole number of at least 1"),
    case("sweep matmul --out x --seed 1.5", "--seed: must be a whole number, got '1.5'"),
    case("sweep matmul --out x --max-points 0", "--max-points: must be a whole number of at least 1"),
    case("sweep matmul --out x --budget 0.5", "on sweep, the timing budget per variant is --timing-budget SECONDS"),
    case("report run --top 0", "--top: must be a whole number of at least 1"),
    case("compile matmul --jobs 0", "--jobs: must be a whole number of at least 1, got '0'"),
    case("compile matmul --jobs -5", "--jobs: must be a whole number of at least 1, got '-5'"),
    case("compile matmul --jobs many", "--jobs: must be a whole number of at least 1"),
    case("sweep matmul --out x --jobs 0", "--jobs: must be a whole number of at least 1"),
    # parameters and their values
    case("render matmul -p tile=1_6", "tile must be an integer written in digits, like 16; got '1_6'"),
    case("render matmul -p tile=+16", "tile must be an integer written in digits, like 16; got '+16'"),
    case("render matmul -p tile=16.0", "tile must be an integer written in digits, like 16; got '16.0'"),
    case("render matmul -p tile=0x10", "tile must be an integer written in digits, like 16; got '0x10'"),
    case("render matmul -p tile=١٦", "tile must be an integer written in digits"),
    case("render matmul -p tile=0", "tile 0 is below its minimum of 1"),
    case("render matmul -p tile=64", "tile 64 gives 4096 threads per block; the CUDA limit is 1024"),
    case("render matmul -p bounds=clamp", "bounds 'clamp' is not one of: none, guard, split"),
    case("render transpose -p rows=12", "rows 12 does not divide tile 32"),
    case("render matmul -p tile", "parameter option 'tile' must look like name=value"),
    case("render matmul -p =8", "parameter option '=8' must look like name=value"),
    case("render matmul -p tiles=8", "matmul has no parameter 'tiles'; its parameters are: dtype, tile"),
    case("render matmul -p tile=8,16", "render takes one value per parameter, like -p tile=8"),
    case("compile matmul -p tile=", "parameter tile needs at least one value"),
    case("render matmul -p tile=", "parameter tile needs at least one value (tilegen list matmul shows its values)"),
    case(["render", "matmul", "-p", "tile= "], "parameter tile needs at least one value", id="render -p 'tile= '"),
    case("render matmul -p tile=,,", "parameter tile needs at least one value"),
    # one rule for every number typed: ASCII digits, no sign, no '_'
    case("render matmul -p padding=-0", "padding must be an integer written in digits, like 16; got '-0' (ASCII "
                                        "digits, no sign, no '_')"),
    case("render matmul -p padding=-1", "padding must be an integer written in digits, like 16; got '-1'"),
    case("sweep matmul --out x --size ٦٤x64x64", "size '٦٤x64x64' for matmul: needs 3 positive integers separated "
                                                 "by 'x' (ASCII digits, no sign, no '_')"),
    case("sweep matmul --out x --size 64x64x64:١٠٢٤,64,64", "needs 3 positive integers separated by ','"),
    case("best matmul --size 64x٦٤x64 --gpu-model H100 --db tuned.sqlite", "size '64x٦٤x64' for matmul"),
    case("tune matmul --size 6_4x64x64", "size '6_4x64x64' for matmul: needs 3 positive integers"),
    case("sweep matmul --out x --gpus ١", "--gpus '١' must be 'all' or GPU indices like 0,1"),
    case("sweep matmul --out x --gpus +1", "--gpus '+1' must be 'all' or GPU indices like 0,1"),
    case("compile matmul -p sync=sometimes", "sync 'sometimes' is not one of"),
    # families and sizes
    case("render conv", "unknown family 'conv'; families: matmul, sgemm, hgemm, wgmma, fp8gemm, gemv, transpose, copy"),
    case("list conv", "unknown family 'conv'"),
    case("sweep conv --out x", "unknown family 'conv'"),
    case("tune conv --size 64", "unknown family 'conv'"),
    case("best conv --size 64", "unknown family 'conv'"),
    case("frobnicate", "invalid choice: 'frobnicate'"),
    case("sweep matmul --out x --size 64x64", "size '64x64' for matmul: needs 3 positive integers"),
    case("sweep matmul --out x --size 0x64x64", "size '0x64x64' for matmul: every dimension must be at least 1"),
    case("sweep matmul --out x --size=-64x64x64", "size '-64x64x64' for matmul"),
    case("sweep matmul --out x --size big", "size 'big' for matmul"),
    case("sweep matmul --out x --size 64x64x64x64", "size '64x64x64x64' for matmul"),
    case(["sweep", "matmul", "--out", "x", "--size", ""], "size '' for matmul", id="sweep --size ''"),
    case("sweep transpose --out x --size 64x64x64", "size '64x64x64' for transpose: needs 2 positive integers"),
    case("tune matmul --size 64xx64", "size '64xx64' for matmul"),
    case("tune matmul", "tune needs FAMILY and --size (or --revalidate)"),
    case("tune matmul --size 64x64x64 --strategy luck", "argument --strategy: invalid choice: 'luck'"),
    case("best matmul --size 64x64", "size '64x64' for matmul"),
    # other options
    case("compile matmul --arch volta", "--arch 'volta' is not a GPU architecture like sm_90"),
    case("compile matmul --arch 90", "--arch '90' is not a GPU architecture"),
    case("sweep matmul --out x --arch sm9", "--arch 'sm9' is not a GPU architecture"),
    case("compile matmul -p tile=8 --arch sm_999", "does not compile for it; it compiles for sm_"),
    case("sweep matmul -p tile=8 --out fresh --arch sm_999", "does not compile for it; it compiles for sm_"),
    case("tune matmul --size 64x64x64 --arch sm_999", "does not compile for it; it compiles for sm_"),
    case("compile matmul --filter nothing-like-this", "no matmul variant matches --filter 'nothing-like-this'"),
    case("sweep matmul --out x --filter nothing-like-this", "no matmul variant matches --filter"),
    case("sweep matmul --out x --cache-config huge", "cache 'huge' is not one of: none, shared, l1, equal"),
    case(["sweep", "matmul", "-p", "tile=8", "--size", "64x64x64", "--out", "fresh", "--cache-config", ""],
         "--cache-config (cache_configs) needs at least one of: none, shared, l1, equal", id="sweep --cache-config ''"),
    case("sweep matmul -p tile=8 --size 64x64x64 --out fresh --cache-config ,",
         "--cache-config (cache_configs) needs at least one"),
    case("sweep matmul --out x --gpus one", "--gpus 'one' must be 'all' or GPU indices like 0,1"),
    case("sweep matmul --out x --gpus -1", "--gpus '-1' must list distinct GPU indices"),
    case("sweep matmul --out x --gpus 0,0", "--gpus '0,0' must list distinct GPU indices"),
    case("--family-path nowhere list", "--family-path"),
    case(["--family-path", "", "list"], "--family-path must be a path, got ''", id="--family-path '' list"),
    # the element type and the GPU of `best`
    case("best matmul --size 64x64x64 --dtype f16 --gpu-model H100 --db tuned.sqlite",
         "matmul has no element type 'f16'; its element types are: f32, f64"),
    case("best sgemm --size 64x64x64 --dtype f64 --gpu-model H100 --db tuned.sqlite",
         "sgemm has no element type 'f64'; its element types are: f32"),
    case("best matmul --size 64x64x64 --dtype F32", "matmul has no element type 'F32'"),
    case("best matmul --size 64x64x64 --gpu-model A100 --db tuned.sqlite",
         "--gpu-model 'A100' matches 0 GPU models in tuned.sqlite (known: NVIDIA H100"),
    case("best matmul --size 64x64x64 --gpu-model H100", "the tuning database ($TILEGEN_DB, else in tilegen's cache "
                                                    "folder)"),
    case("best matmul --size 64x64x64 --db tuned.sqlite", "name a GPU model to answer from the tuning database without one", NO_GPU),
    # where results go: a file, under a file, a read-only folder, a folder already used
    case("compile matmul -p tile=8 --out afile", "--out afile is a file, not a folder; give a folder"),
    case("sweep matmul -p tile=8 --out afile", "--out afile is a file, not a folder"),
    case("emit matmul --out afile", "--out afile is a file, not a folder"),
    case("compile matmul -p tile=8 --out afile/run", "--out afile/run cannot be made:"),
    case("sweep matmul -p tile=8 --out afile/run", "--out afile/run cannot be made:"),
    case("emit matmul --out afile/variants", "--out afile/variants cannot be made:"),
    # /proc takes no new file or folder, not even from root, to whom every folder's permissions say yes
    case("compile matmul -p tile=8 --out /proc/run", "--out /proc/run: cannot write in /proc ("),
    case("sweep matmul -p tile=8 --out /proc/run", "--out /proc/run: cannot write in /proc ("),
    case("emit matmul --out /proc/variants", "--out /proc/variants: cannot write in /proc ("),
    case("compile matmul -p tile=8 --out used", "already holds results: choose another --out, or remove its "
                                                "results.jsonl"),
    case("sweep matmul -p tile=8 --out used", "already holds results: pass --resume to continue that run"),
    case("sweep matmul -p tile=8", "a sweep needs --out DIR, the folder for its results.jsonl and results.csv"),
    case("emit matmul --out variants", "matmul_f32_t16_p1_guard_both.cu was not written by tilegen"),
    case("export --t4 missing/t4.json --db tuned.sqlite", "--t4 missing/t4.json: the folder missing does not exist"),
    case("export --t4 afile/t4.json --db tuned.sqlite", "the folder afile is a file"),
    case("export --t4 run --db tuned.sqlite", "--t4 run is a folder; give a file name"),
    case("export --t4 /proc/t4.json --db tuned.sqlite", "--t4 /proc/t4.json: cannot write in /proc ("),
    # what tilegen did not write, or must never write over
    case("export --t4 tuned.sqlite --db tuned.sqlite", "--t4 tuned.sqlite is an SQLite database; tilegen never "
                                                       "writes over it, even with --force: give another file"),
    case("export --t4 foreign.sqlite --db tuned.sqlite --force", "--t4 foreign.sqlite is an SQLite database"),
    case("export --t4 run/results.jsonl --db tuned.sqlite", "--t4 run/results.jsonl is a file of a tilegen run; "
                                                            "tilegen never writes over it"),
    case("export --t4 run/results.csv --db tuned.sqlite --force", "--t4 run/results.csv is a file of a tilegen run"),
    case("export --t4 notes.txt --db tuned.sqlite", "--t4 notes.txt exists and is not a T4 file tilegen wrote; give "
                                                    "another file, or pass --force to replace it"),
    case(_resume_with(drop=("--out",)) + ["--out", "mine-csv"], "--out mine-csv holds results.csv that tilegen did "
         "not write (the folders it writes carry a .tilegen-run file); choose another --out, or move them away",
         id="sweep --resume into the user's results.csv"),
    case("sweep matmul -p tile=8 --size 64x64x64 --out mine-csv", "--out mine-csv holds results.csv that tilegen "
                                                                  "did not write"),
    case("compile matmul -p tile=8 --out mine-csv", "--out mine-csv holds results.csv that tilegen did not write"),
    case("sweep matmul -p tile=8 --size 64x64x64 --out mine-settings", "--out mine-settings holds run.json that "
                                                                       "tilegen did not write"),
    case("report run --plot missing/plot.png", "--plot missing/plot.png: the folder missing does not exist"),
    case("report run --plot run", "--plot run is a folder"),
    # $TILEGEN_CACHE that tilegen cannot use
    case("compile matmul -p tile=8 --out fresh", "$TILEGEN_CACHE afile is a file, not a folder",
         env={"TILEGEN_CACHE": "afile"}),
    case("sweep matmul -p tile=8 --out fresh", "$TILEGEN_CACHE afile is a file, not a folder",
         env={"TILEGEN_CACHE": "afile"}),
    case("tune matmul --size 64x64x64", "$TILEGEN_CACHE afile is a file", env={"TILEGEN_CACHE": "afile"}),
    case("cache", "$TILEGEN_CACHE afile is a file", env={"TILEGEN_CACHE": "afile"}),
    case("compile matmul -p tile=8", "$TILEGEN_CACHE afile/cache cannot be made",
         env={"TILEGEN_CACHE": "afile/cache"}),
    case("compile matmul -p tile=8 --out fresh", "$TILEGEN_CACHE /proc/cache: cannot write in /proc (",
         env={"TILEGEN_CACHE": "/proc/cache"}, id="$TILEGEN_CACHE under /proc"),
    # a name longer than any file system takes, wherever a path is given
    case(f"compile matmul -p tile=8 --out {LONG}", f"--out names '{LONG}', {TOO_LONG}", id="compile --out LONG"),
    case(f"sweep matmul -p tile=8 --out fresh/{LONG}", TOO_LONG, id="sweep --out fresh/LONG"),
    case(f"emit matmul --out {LONG}", f"--out names '{LONG}', {TOO_LONG}", id="emit --out LONG"),
    case(f"export --t4 {LONG}.json --db tuned.sqlite", f"--t4 names '{LONG}.json', which is 261 bytes long",
         id="export --t4 LONG.json"),
    case(f"report run --plot {LONG}.png", "--plot names", id="report --plot LONG.png"),
    case(f"report {LONG}", f"report DIR names '{LONG}', {TOO_LONG}", id="report LONG"),
    case(f"report --db {LONG}", f"--db names '{LONG}', {TOO_LONG}", id="report --db LONG"),
    case(f"tune matmul --size 64x64x64 --db {LONG}", f"--db names '{LONG}', {TOO_LONG}", id="tune --db LONG"),
    case(f"best matmul --size 64x64x64 --gpu-model H100 --db {LONG}", TOO_LONG, id="best --db LONG"),
    case(f"--family-path {LONG} list", f"--family-path names '{LONG}', {TOO_LONG}", id="--family-path LONG"),
    case("compile matmul -p tile=8", f"$TILEGEN_CACHE names '{LONG}', {TOO_LONG}", env={"TILEGEN_CACHE": LONG},
         id="$TILEGEN_CACHE LONG"),
    case("tune matmul --size 64x64x64", f"$TILEGEN_DB names '{LONG}', {TOO_LONG}", env={"TILEGEN_DB": LONG},
         id="$TILEGEN_DB LONG"),
    # $TILEGEN_COMPILE_TIMEOUT that is not a deadline
    case("compile matmul -p tile=8 --out fresh", "$TILEGEN_COMPILE_TIMEOUT must be a positive, finite number of "
                                                 "seconds, got 'soon'", env={"TILEGEN_COMPILE_TIMEOUT": "soon"}),
    case("sweep matmul -p tile=8 --out fresh", "$TILEGEN_COMPILE_TIMEOUT must be a positive, finite number of "
                                               "seconds, got '0'", env={"TILEGEN_COMPILE_TIMEOUT": "0"}),
    case("sweep matmul -p tile=8 --out fresh", "$TILEGEN_COMPILE_TIMEOUT must be at most 2147483 seconds (24.8 days",
         env={"TILEGEN_COMPILE_TIMEOUT": "2147484"}),
    # databases: mistyped, a folder, not a database, another program's
    case("report --db tunde.sqlite", "--db tunde.sqlite does not exist; give the tuning database"),
    case("export --t4 t4.json --db tunde.sqlite", "--db tunde.sqlite does not exist"),
    case("best matmul --size 64x64x64 --gpu-model H100 --db tunde.sqlite", "--db tunde.sqlite does not exist"),
    case("report --db run", "--db run is a folder"),
    case("report --db notes.txt", "notes.txt is not a tilegen tuning database"),
    case("report --db foreign.sqlite", "foreign.sqlite is an SQLite database but not tilegen's (its tables: notes)"),
    case("report --db measures.sqlite", "measures.sqlite is an SQLite database but not tilegen's (its tables: "
                                        "measurements)"),
    case("best matmul --size 64x64x64 --gpu-model H100 --db measures.sqlite", "measures.sqlite is an SQLite database but "
                                                                        "not tilegen's"),
    case("tune matmul --size 64x64x64 --db measures.sqlite", "measures.sqlite is an SQLite database but not tilegen's"),
    case("export --t4 t4.json --db foreign.sqlite", "is an SQLite database but not tilegen's"),
    case("tune matmul --size 64x64x64 --db foreign.sqlite", "is an SQLite database but not tilegen's"),
    case("tune matmul --size 64x64x64 --db run", "--db run is a folder"),
    case("tune matmul --size 64x64x64 --db afile/t.sqlite", "the folder of --db afile is a file, not a folder"),
    case("report run tuned.sqlite", "tuned.sqlite has no results.jsonl"),
    case("report", "report takes result folders or --db FILE"),
    case("report run --db tuned.sqlite", "report takes result folders or --db FILE (one of the two)"),
    case("report nowhere", "nowhere has no results.jsonl"),
    case("report noresults", "noresults has no results.jsonl"),
    # result files holding lines that are not result rows
    *[case(f"report {name}", f"{name}/results.jsonl:1 is not a result row") for name in ROW_LINES],
    case("sweep matmul -p tile=8 --size 64x64x64 --out rows-list --resume", "rows-list/results.jsonl:1 is not a "
                                                                           "result row (a result row is a JSON "
                                                                           "object, not list)"),
    # result rows with a field of the wrong kind: one line naming file, line and field; a resume reads them
    # before it compiles anything (a compile would fill the empty cache folder given here)
    *[case(command, f"{name}/results.jsonl:1 is not a result row ({problem}); fix or remove that line",
           env={"TILEGEN_CACHE": "cache"}) for name, problem in [
        ("row-shape", "its field 'shape' must be text, got 5"),
        ("row-params", "its field 'params' must be an object, got \"tile=8\""),
        ("row-median", "its field 'median_ms' must be a number, or null, got \"fast\""),
        ("row-count", "its field 'skipped_count' must be a whole number, or null, got \"3\""),
        ("row-ok-unchecked", "an ok row needs a number in its field 'error', got null"),
        ("row-median-negative", "its field 'median_ms' must be above 0, got -1"),
        ("row-median-nan", "its field 'median_ms' must be above 0, got NaN"),
        ("row-median-infinite", "its field 'median_ms' must be finite, got Infinity"),
        ("row-error-negative", "its field 'error' must not be negative or NaN, got -0.5"),
        ("row-samples-negative", "its field 'samples' must not be negative or NaN, got -3"),
        ("row-twice", "the key 'status' is given twice"),
    ] for command in (f"report {name}", _resume_with(drop=("--out",)) + ["--out", name])],
    # measurements whose row has a field of the wrong kind: one line naming file, measurement and field
    *[case(command, f"{name}: the row of measurement 1 is not a result row ({problem}") for name, problem in [
        ("bad-json.sqlite", "Expecting property name enclosed in double quotes"),
        ("bad-status.sqlite", "its field 'status' must be one of: ok, wrong,"),
        ("bad-twice.sqlite", "the key 'status' is given twice"),
        ("bad-median-negative.sqlite", "its field 'median_ms' must be above 0, got -1"),
        ("bad-median-nan.sqlite", "its field 'median_ms' must be above 0, got NaN"),
        ("bad-median-infinite.sqlite", "its field 'median_ms' must be finite, got Infinity"),
    ] for command in (f"report --db {name}", f"best matmul --size 1024x1024x1024 --gpu-model H100 --db {name}",
                      f"export --t4 t4.json --db {name}")],
    # --resume with settings other than the run's, each difference named
    case(_resume_with("-p", "tile=16", drop=("-p",)), "-p tile 16 (the run has 8)",
         id="resume: other parameter values"),
    case(_resume_with(drop=("-p",)), "-p tile 8,16,32 (the run has 8)", id="resume: a parameter left out"),
    case(_resume_with("--size", "96x96x96"), "--size 64x64x64,96x96x96 (the run has 64x64x64)",
         id="resume: another size too"),
    case(_resume_with(drop=("--size",)), "--size 2048x2048x2048 (the run has 64x64x64)",
         id="resume: the default size"),
    case(_resume_with("--arch", "sm_80"), "--arch sm_80 (the run has sm_90)", id="resume: another arch"),
    case(_resume_with("--timing-budget", "0.25"), "--timing-budget 0.25 (the run has 1.0)",
         id="resume: another timing budget"),
    case(_resume_with("--warm"), "--warm True (the run has False)", id="resume: a warm L2"),
    case(_resume_with("--cache-config", "shared"), "--cache-config shared (the run has none)", id="resume: another cache"),
    case(_resume_with("--filter", "guard"), "--filter guard (the run has (none))", id="resume: a filter"),
    case(["sweep", "transpose", "--size", "64x64", "--arch", "sm_90", "--out", "run", "--resume"],
         "family transpose (the run has matmul); --size 64x64 (the run has 64x64x64)", id="resume: another family"),
    case(_resume_with("--size", "96x96x96", "--arch", "sm_80"),
         "--size 64x64x64,96x96x96 (the run has 64x64x64); --arch sm_80 (the run has sm_90)",
         id="resume: two differences"),
    # spaces too large to take on
    case(["sweep", "sgemm", "--out", "x", "-p", "bm=" + ",".join(map(str, range(1, 201))),
          "-p", "bn=" + ",".join(map(str, range(1, 201)))],
         "the sgemm space has 69,120,000 points (bm: 200 x bn: 200 x", id="sweep: 69 million points"),
    case(["compile", "sgemm", "-p", "bm=" + ",".join(map(str, range(1, 201)))],
         "the sgemm space has 1,036,800 points (bm: 200 x bn: 3", id="compile: a million points"),
    case(["tune", "sgemm", "--size", "64x64x64", "--dry-run", "-p", "bm=" + ",".join(map(str, range(1, 201)))],
         "more than --max-points 100,000", id="tune --dry-run: a million points"),
    case("tune matmul --size 64x64x64 --max-points 10", "the matmul space has 18 points (tile: 3 x padding: 2 x "
                                                        "bounds: 3), more than --max-points 10"),
    case("sweep matmul --out x --max-points 10", "the matmul space has 18 points (tile: 3 x padding: 2 x bounds: 3), "
                                                "more than --max-points 10"),
    case("sweep matmul --out x --size 64x64x64 --size 96x96x96 --max-points 20",
         "at 2 sizes and cache preferences 36, more than --max-points 20"),
    # a dry run plans no variant that the run refuses
    case("tune wgmma --size 1024x1024x1024 --arch sm_80 --dry-run",
         "wgmma kernels use sm_90a's own instructions and run on sm_90 GPUs only; this run compiles for sm_80"),
    case("sweep wgmma --size 1024x1024x1024 --arch sm_80 --dry-run",
         "wgmma kernels use sm_90a's own instructions and run on sm_90 GPUs only; this run compiles for sm_80"),
]


@pytest.mark.parametrize("args, fragment, env", CLI_CASES)
def test_the_command_line_refuses_bad_input_in_one_line_and_changes_nothing(
        place: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, args: list[str], fragment: str,
        env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = snapshot(place)
    assert_one_line_error(*run_main(capsys, args), fragment)
    assert snapshot(place) == before


@pytest.mark.parametrize("command", [["compile", "matmul", "-p", "tile=8", "--out", "fresh"],
                                     ["sweep", "matmul", "-p", "tile=8", "--out", "fresh"]], ids=["compile", "sweep"])
def test_a_template_gone_missing_is_one_line_and_leaves_nothing_behind(
        place: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    monkeypatch.setattr(type(get_family("matmul")), "template", "gone.cu.j2")
    before = snapshot(place)
    assert_one_line_error(*run_main(capsys, command), "template 'gone.cu.j2' is missing from")
    assert snapshot(place) == before


# ---- the Python API ---------------------------------------------------------------------------------------

def _sweep(**options: Any) -> Callable[[], Any]:
    arguments = {"family": "matmul", "out": Path("fresh"), "sizes": ["64x64x64"], "progress": False, **options}
    return lambda: sweep(SweepOptions(**arguments), executor=FakeExecutor())


def _run(**run_options: Any) -> Callable[[], Any]:
    """A sweep with RunOptions(**run_options), made when the case runs (RunOptions checks itself)."""
    return lambda: _sweep(run=RunOptions(**run_options))()


def _tune(**options: Any) -> Callable[[], Any]:
    """TuneOptions(**options), made when the case runs (TuneOptions checks itself)."""
    return lambda: TuneOptions("matmul", "64x64x64", progress=False, **options)


def api(call: Callable[[], Any], fragment: str, id: str, *marks: Any) -> Any:
    return pytest.param(call, fragment, id=id, marks=marks)


API_CASES = [
    # SweepOptions
    api(_sweep(params="tile=16"), "params must map parameter names to values", "params as text"),
    api(_sweep(params={"tile": None}), "parameter tile takes a list of values", "a parameter's values: None"),
    api(_sweep(params={"tile": {"a": 1}}), "parameter tile takes a list of values", "a parameter's values: a dict"),
    api(_sweep(params={"tile": []}), "parameter tile needs at least one value", "a parameter's values: none"),
    api(_sweep(params={"tile": 16.5}), "tile must be an integer written in digits", "a parameter's value: 16.5"),
    api(_sweep(params={"tile": [True]}), "tile must be an integer written in digits", "a parameter's value: True"),
    api(_sweep(params={"tile": ["1_6"]}), "got '1_6'", "a parameter's value: 1_6"),
    api(_sweep(params={"tiles": [8]}), "matmul has no parameter 'tiles'", "an unknown parameter"),
    api(_sweep(sizes=[1024]), "a size for matmul is text like", "a size as a number"),
    api(_sweep(sizes=[None]), "a size for matmul is text like", "a size as None"),
    api(_sweep(sizes="64x64"), "size '64x64' for matmul: needs 3 positive integers", "one size, malformed"),
    api(_sweep(sizes={"m": 64}), "sizes takes a list of values", "sizes as a dict"),
    api(_sweep(cache_configs=["huge"]), "cache 'huge' is not one of", "an unknown cache preference"),
    api(_sweep(cache_configs="huge"), "cache 'huge' is not one of", "a cache preference on its own"),
    api(_sweep(cache_configs=[]), "--cache-config (cache_configs) needs at least one of: none, shared", "no cache preference"),
    api(_sweep(cache_configs=[["none"]]), "cache ['none'] is not one of", "a cache preference inside a list"),
    api(_sweep(resume="no"), "resume must be True or False, got 'no'", "resume as text"),
    api(_sweep(keep_skipped=None), "keep_skipped must be True or False, got None", "keep_skipped: None"),
    api(_sweep(params={"tile": b"16"}), "tile must be an integer written in digits", "a parameter's value: bytes"),
    api(_sweep(params={"tile": np.array(16)}), "parameter tile takes a list of values", "a parameter's values: "
                                                                                        "a 0-d array"),
    api(_sweep(out="fresh\0"), "holds a NUL character", "out: a NUL"),
    api(_sweep(out=Path(LONG)), f"out names '{LONG}', {TOO_LONG}", "out: a name over 255 bytes"),
    api(_sweep(out=None), "a sweep needs --out DIR, the folder for its results.jsonl", "out: None"),
    api(_sweep(out=5), "out must be a path, got 5", "out: a number"),
    api(_sweep(out=Path("afile")), "--out afile is a file, not a folder", "out: a file"),
    api(_sweep(out=Path("used")), "already holds results", "out: a used folder"),
    api(_sweep(out=Path("run"), resume=True, sizes=["96x96x96"]), "--size 96x96x96 (the run has 64x64x64)",
        "resume with another size"),
    api(_sweep(filter=5), "filter must be a name pattern", "filter: a number"),
    api(_sweep(filter="nothing-like-this"), "no matmul variant matches --filter", "filter: matches nothing"),
    api(_sweep(run="fast"), "run must be a gen.evaluate.options.RunOptions", "run: text"),
    api(_run(silence_s=0), "the worker timeout (silence_s) must be a positive, finite number",
        "run: silence 0"),
    api(_run(timing=TimingOptions(budget_s=float("nan"))), "the timing budget (timing.budget_s) "
        "must be a positive, finite number of seconds", "run: timing budget nan"),
    api(_run(timing=TimingOptions(budget_s=float("inf"))), "must be a positive, finite number",
        "run: timing budget inf"),
    api(_run(gpus=[]), "gpus must list distinct GPU indices", "run: no GPUs"),
    api(_run(gpus=[0, 0]), "gpus must list distinct GPU indices", "run: a GPU twice"),
    api(_run(gpus="0"), "gpus must list distinct GPU indices", "run: GPUs as text"),
    api(_run(gpus=[-1]), "gpus must list distinct GPU indices", "run: GPU -1"),
    api(_run(gpus=None), "gpus must list distinct GPU indices like [0, 1], got None", "run: GPUs None"),
    api(_run(gpus=1.5), "gpus must list distinct GPU indices like [0, 1], got 1.5", "run: GPUs 1.5"),
    api(_run(compile_jobs="2"), "compile_jobs must be a whole number of at least 1, got '2'", "run: jobs as text"),
    api(_run(silence_s="30"), "the worker timeout (silence_s) must be a positive, finite number of seconds, got '30'",
        "run: silence as text"),
    api(_run(seed=-1), "seed must be a whole number, got -1", "run: seed -1"),
    api(_run(compile_jobs=0), "compile_jobs must be a whole number of at least 1",
        "run: no compile jobs"),
    api(_run(arch="volta"), "--arch 'volta' is not a GPU architecture", "run: arch volta"),
    api(_run(gpus=[[0]]), "gpus must list distinct GPU indices like [0, 1], got [[0]]", "run: a GPU as a list"),
    api(_run(timing=None), "timing must be a gen.core.timing.TimingOptions, got None", "run: timing None"),
    api(_run(sanitize="yes"), "sanitize must be True or False, got 'yes'", "run: sanitize as text"),
    api(_run(cluster=8786), "cluster must be 'local' or a scheduler's address", "run: cluster as a number"),
    api(_sweep(max_points=0), "max_points must be a whole number of at least 1", "max_points 0"),
    api(_sweep(max_points="10"), "max_points must be a whole number of at least 1, got '10'", "max_points as text"),
    api(_sweep(max_points=10), "more than --max-points 10", "max_points below the space"),
    api(lambda: tune(TuneOptions("matmul", "64x64x64", max_points=10, progress=False), FakeExecutor()),
        "more than --max-points 10", "tune: max_points below the space"),
    api(_sweep(family=None), "a family is named by text, like 'matmul'; got None", "family: None"),
    api(_sweep(family=["matmul"]), "a family is named by text", "family: a list"),
    api(_sweep(family="conv"), "unknown family 'conv'", "family: unknown"),
    # tune
    api(lambda: tune(TuneOptions("matmul", "64x64x64", budget=0)), "budget must be a whole number of at least 1, "
        "got 0", "tune: budget 0"),
    api(_tune(budget=-1), "budget must be a whole number of at least 1, got -1", "TuneOptions: budget -1"),
    api(_tune(budget=2.5), "budget must be a whole number of at least 1, got 2.5", "TuneOptions: budget 2.5"),
    api(_tune(budget="100"), "budget must be a whole number of at least 1, got '100'", "TuneOptions: budget as text"),
    api(_tune(top=0), "top must be a whole number of at least 1, got 0", "TuneOptions: top 0"),
    api(_tune(top=-1), "top must be a whole number of at least 1, got -1", "TuneOptions: top -1"),
    api(_tune(top=1.5), "top must be a whole number of at least 1, got 1.5", "TuneOptions: top 1.5"),
    api(_tune(top=True), "top must be a whole number of at least 1, got True", "TuneOptions: top True"),
    api(_tune(time_s=0), "time_s must be a positive, finite number of seconds, got 0", "TuneOptions: time 0"),
    api(_tune(time_s="soon"), "time_s must be a positive, finite number of seconds, got 'soon'",
        "TuneOptions: time as text"),
    api(_tune(seed=-1), "seed must be a whole number, got -1", "TuneOptions: seed -1"),
    api(_tune(seed=1.5), "seed must be a whole number, got 1.5", "TuneOptions: seed 1.5"),
    api(_tune(max_points=0), "max_points must be a whole number of at least 1, got 0", "TuneOptions: max_points 0"),
    api(_tune(filter=5), "filter must be a name pattern", "TuneOptions: filter 5"),
    api(_tune(run=None), "run must be a gen.evaluate.options.RunOptions, got None", "TuneOptions: run None"),
    api(lambda: TuneOptions("matmul", "64x64x64", progress="no"), "progress must be True or False, got 'no'",
        "TuneOptions: progress as text"),
    api(_tune(strategy=["bayes"]), "strategy ['bayes'] is not one of", "TuneOptions: strategy in a list"),
    api(_tune(strategy="luck"), "strategy 'luck' is not one of: brute, random", "TuneOptions: strategy luck"),
    api(lambda: tune(TuneOptions("matmul", "64x64x64", strategy="luck")), "strategy 'luck' is not one of",
        "tune: unknown strategy"),
    api(lambda: tune(TuneOptions("matmul", "64x64")), "size '64x64' for matmul", "tune: malformed size"),
    api(lambda: tune(TuneOptions("matmul", 64)), "a size for matmul is text", "tune: size as a number"),
    api(lambda: tune(TuneOptions("matmul", "64x64x64", params={"tile": "1_6"})), "got '1_6'",
        "tune: parameter 1_6"),
    api(lambda: tune(TuneOptions("matmul", "64x64x64", db=Path("foreign.sqlite"))),
        "is an SQLite database but not tilegen's", "tune: another program's database"),
    # looking up, and running, tuned variants
    api(lambda: gen.tuned("conv", 64, 64, 64), "unknown family 'conv'", "tuned: unknown family"),
    api(lambda: gen.tuned("sgemm", 64, 64), "size '64x64' for sgemm: needs 3 positive integers",
        "tuned: two dimensions"),
    api(lambda: gen.tuned("sgemm", 64.0, 64, 64), "a shape is its dimensions as integers", "tuned: a float"),
    api(lambda: gen.tuned("sgemm", True, 64, 64), "a shape is its dimensions as integers", "tuned: a bool"),
    api(lambda: gen.tuned("sgemm", -1, 64, 64), "size '-1x64x64' for sgemm", "tuned: negative"),
    api(lambda: gen.tuned("sgemm", "64x64"), "size '64x64' for sgemm", "tuned: written shape, malformed"),
    api(lambda: gen.tuned("sgemm", None), "a shape is its dimensions as integers", "tuned: None"),
    api(lambda: gen.tuned("sgemm", 64, 64, 64, dtype="f16"), "sgemm has no element type 'f16'", "tuned: dtype f16"),
    api(lambda: gen.tuned("matmul", 64, 64, 64, db=Path("tunde.sqlite"), device=H100),
        "--db tunde.sqlite does not exist", "tuned: mistyped database"),
    api(lambda: gen.tuned("matmul", 64, 64, 64, db=Path("notes.txt"), device=H100),
        "notes.txt is not a tilegen tuning database", "tuned: not a database"),
    api(lambda: gen.tuned("matmul", 64, 64, 64, db=Path("run"), device=H100), "--db run is a folder",
        "tuned: a folder as database"),
    api(lambda: gen.tuned("matmul", 64, 64, 64, db=Path("tuned.sqlite")), "which GPU?", "tuned: no GPU", NO_GPU),
    api(lambda: gen.tuned("sgemm", "٦٤x64x64"), "size '٦٤x64x64' for sgemm: needs 3 positive integers",
        "tuned: Arabic-Indic digits"),
    api(lambda: gen.tuned("sgemm", 64, 64, 64, device="H100"), "device must be a gen.core.results.DeviceInfo (or None: "
        "the current GPU), got 'H100'", "tuned: device as text"),
    api(lambda: gen.tuned("sgemm", 64, 64, 64, device=H100.model), "device must be a gen.core.results.DeviceInfo",
        "tuned: a GPU model as the device"),
    api(lambda: gen.kernel("sgemm", 64, 64, 64, dtype=["f32"]), "sgemm has no element type ['f32']",
        "kernel: dtype in a list"),
    api(lambda: gen.kernel("sgemm", 64.0, 64, 64), "a shape is its dimensions as integers", "kernel: a float"),
    api(lambda: gen.kernel("sgemm", 64, 64, 64, dtype="f64"), "sgemm has no element type 'f64'", "kernel: dtype"),
    api(lambda: gen.kernel("matmul", "64x64"), "size '64x64' for matmul", "kernel: malformed shape"),
    api(lambda: gen.matmul(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32)),
        "a must be a 2-D array on the GPU, got a NumPy array", "matmul: numpy arrays"),
    api(lambda: gen.matmul(None, None), "a must be a PyTorch tensor, a CuPy, Numba or JAX array", "matmul: None"),
    api(lambda: gen.load_families("nowhere"), "load_families' folder", "load_families: a missing folder"),
    api(lambda: gen.load_families(""), "load_families' folder must be a path, got ''", "load_families: ''"),
    api(lambda: gen.load_families(None), "load_families' folder must be a path, got None", "load_families(None)"),
    # the pieces underneath
    api(lambda: get_family("matmul").parse_shape(None), "a size for matmul is text like", "parse_shape(None)"),
    api(lambda: get_family("matmul").parse_shape(4096), "a size for matmul is text like", "parse_shape(4096)"),
    api(lambda: get_family("transpose").parse_shape(""), "size '' for transpose", "parse_shape('')"),
    api(lambda: variant_from_name("nonsense"), "unknown family 'nonsense'", "variant_from_name: no family"),
    api(lambda: variant_from_name("matmul_f32_t16"), "cannot read padding from", "variant_from_name: cut short"),
    api(lambda: variant_from_name(None), "a variant name is text", "variant_from_name(None)"),
    api(lambda: get_family("matmul").parse_shape("٦٤x64x64"), "size '٦٤x64x64' for matmul: needs 3 positive",
        "parse_shape: Arabic-Indic digits"),
    api(lambda: variant_from_name("matmul_f32_t١٦_p1_guard_both"), "cannot read tile from 't١٦'",
        "variant_from_name: Arabic-Indic digits"),
    api(lambda: MatmulVariant.from_name(None), "a variant name is text like matmul_f32_t16_p0_guard_both, got None",
        "from_name(None)"),
    api(lambda: Space.default(get_family("matmul"), {"tile": ["+16"]}), "got '+16'", "Space: +16"),
    api(lambda: Space.default(get_family("matmul"), {"padding": ["-0"]}), "got '-0'", "Space: -0"),
    api(lambda: Space.default("matmul"), "a space is made of a family object (gen.families.get_family('matmul')), "
        "got 'matmul'", "Space: a family's name"),
    api(lambda: Space.default(None), "a space is made of a family object", "Space: None"),
    api(lambda: get_family("matmul").variant({"tile": "1_6"}), "got '1_6'", "Family.variant: 1_6"),
    api(lambda: get_family("matmul").variant({"tile": "١٦"}), "got '١٦'", "Family.variant: Arabic-Indic digits"),
    api(lambda: get_family("matmul").variant("tile=16"), "a variant's values map parameter names to values, like "
        "{'tile': 16}; got 'tile=16'", "Family.variant: text"),
    api(lambda: get_family("matmul").variant(None), "a variant's values map parameter names", "Family.variant: None"),
    api(lambda: TuningDB(Path("foreign.sqlite")), "is an SQLite database but not tilegen's",
        "TuningDB: another program's"),
    api(lambda: TuningDB(Path("run")), "--db run is a folder", "TuningDB: a folder"),
    api(lambda: TuningDB(Path("tunde.sqlite"), create=False), "--db tunde.sqlite does not exist",
        "TuningDB: a reader's mistyped path"),
    api(lambda: write_t4([], Path("run")), "--t4 run is a folder", "write_t4: onto a folder"),
    api(lambda: write_t4([], Path("tuned.sqlite"), force=True), "--t4 tuned.sqlite is an SQLite database",
        "write_t4: onto a database"),
    api(lambda: write_t4([], Path("notes.txt")), "is not a T4 file tilegen wrote", "write_t4: onto the user's file"),
    api(lambda: TuningDB(Path("measures.sqlite")), "is an SQLite database but not tilegen's",
        "TuningDB: another program's measurements"),
    api(lambda: TuningDB(Path("bad-status.sqlite"), create=False).rows(), "bad-status.sqlite: the row of "
        "measurement 1 is not a result row (its field 'status'", "TuningDB.rows: a bad row"),
    api(lambda: gen.tuned("matmul", 1024, 1024, 1024, db=Path("bad-json.sqlite"), device=H100),
        "the row of measurement 1 is not a result row", "tuned: a bad row"),
    api(lambda: TuningKey(str(H100.model), "matmul", "f32", "1024x1024x1024"), "a TuningKey's gpu_model is a "
        "gen.core.results.GpuModel (its fields), got 'NVIDIA H100", "TuningKey: a GPU model's display string"),
    api(lambda: TuningDB(Path("tuned.sqlite"), create=False).rows("matmul", str(H100.model)),
        "TuningDB.rows: gpu_model is a gen.core.results.GpuModel", "TuningDB.rows: a GPU model's display string"),
    api(lambda: TuningDB(Path("tuned.sqlite")).record([_measured(MatmulVariant(tile=8), "64x64x64")], "H100"),
        "TuningDB.record: model is a gen.core.results.GpuModel", "TuningDB.record: a GPU model's name"),
    api(lambda: read_rows(Path("row-params/results.jsonl")), "its field 'params' must be an object",
        "read_rows: params as text"),
    api(_sweep(out=Path("mine-csv")), "holds results.csv that tilegen did not write", "out: the user's folder"),
    api(lambda: read_rows(Path("rows-list/results.jsonl")), "is not a result row (a result row is a JSON object",
        "read_rows: a list"),
    api(lambda: emit(Path("afile"), [get_family("matmul")]), "--out afile is a file", "emit: into a file"),
    api(lambda: emit(Path("variants"), [get_family("matmul")]), "was not written by tilegen",
        "emit: over the user's file"),
    api(lambda: compile_variants([MatmulVariant(tile=8)], CompileOptions(arch="sm_999")),
        "does not compile for it; it compiles for sm_", "compile_variants: an architecture the compiler does not compile for"),
    # options objects typed, each field checked (issue 29)
    api(lambda: compile_variant(None, CompileOptions()), "a variant is needed, like gen.variant('matmul', tile=16); "
        "got None", "compile_variant: None"),
    api(lambda: compile_variant(MatmulVariant(tile=8), None), "options must be a gen.compiling.options.CompileOptions",
        "compile_variant: no options"),
    api(lambda: render(None), "a variant is needed", "render: None"),
    api(lambda: CompileOptions(cache=Path("afile")), "cache afile is a file, not a folder", "CompileOptions: cache a file"),
    api(lambda: CompileOptions(flags="-O3"), "flags must be a sequence of strings, like ('-lineinfo', '-O3'); got '-O3'",
        "CompileOptions: flags as one string"),
    api(lambda: CompileOptions(flags=["-O3", 3]), "flags must be a sequence of strings", "CompileOptions: a flag 3"),
    api(lambda: CompileOptions(arch="sm_90\n"), "--arch 'sm_90\\n' is not a GPU architecture", "CompileOptions: arch + newline"),
    api(lambda: nvrtc_options("sm_90", ["--maxrregcount=abc"]), "the flag '--maxrregcount=abc': --maxrregcount takes a "
        "whole number of registers", "NVRTC: --maxrregcount=abc"),
    api(lambda: nvrtc_options("sm_90", ["-ftz=yes"]), "-ftz takes true or false", "NVRTC: -ftz=yes"),
    *[api(lambda timing=timing: RunOptions(timing=timing), fragment, f"RunOptions: {fragment.split()[0]}") for timing, fragment in [
        (TimingOptions(min_samples=0), "timing.min_samples must be a whole number of at least 1, got 0"),
        (TimingOptions(min_samples=10, max_samples=5), "timing.max_samples must be a whole number of at least 10"),
        (TimingOptions(target_rsd=float("nan")), "timing.target_rsd must be a positive, finite number, got nan"),
        (TimingOptions(warmup=-1), "timing.warmup must be a whole number, got -1"),
        (TimingOptions(warm="no"), "timing.warm must be True or False, got 'no'"),
        (TimingOptions(stop_above_ms=-1.0), "timing.stop_above_ms must be a positive, finite number, got -1.0"),
        (TimingOptions(budget_s=1e9), "must be at most 2147483 seconds (24.8 days"),
    ]],
]


@pytest.mark.parametrize("call, fragment", API_CASES)
def test_the_api_refuses_bad_input_with_a_tilegen_error_and_changes_nothing(place: Path, call: Callable[[], Any],
                                                                           fragment: str) -> None:
    before = snapshot(place)
    with pytest.raises(TilegenError) as raised:
        call()
    message = str(raised.value)
    assert fragment in message and "\n" not in message, message
    assert snapshot(place) == before


def test_numpy_integers_are_integers_to_the_api(place: Path) -> None:
    """numpy's integers (numbers.Integral) and floats are taken where Python's are, and kept as
    Python's: JSON (run.json), SQLite and random.Random take no others."""
    tuned = gen.tuned("matmul", np.int64(1024), np.int32(1024), 1024, db=Path("tuned.sqlite"), device=H100)
    assert tuned.name == MatmulVariant(tile=32).name  # the stored winner of that exact shape
    assert gen.tuned("sgemm", np.int64(64), 64, 64, db=Path("tuned.sqlite"), device=H100).family == "sgemm"
    assert get_family("matmul").variant({"tile": np.int64(16)}).tile == 16
    assert Space.default(get_family("matmul"), {"tile": np.int64(16)}).values["tile"] == (16,)
    run = RunOptions(seed=np.uint8(1), gpus=np.array([0, 1]), compile_jobs=np.int64(2), silence_s=np.float32(2.5),
                     timing=TimingOptions(budget_s=np.float64(0.5)))
    options = TuneOptions("matmul", "64x64x64", budget=np.int64(4), seed=np.int64(3), top=np.int16(2),
                          time_s=np.float32(60), max_points=np.int64(100), run=run)
    counts = [options.budget, options.seed, options.top, options.max_points, run.seed, run.compile_jobs, *run.gpus]
    assert [type(n) for n in counts] == [int] * 8 and run.gpus == (0, 1)
    assert [type(s) for s in (options.time_s, run.silence_s, run.timing.budget_s)] == [float] * 3
    assert type(SweepOptions("matmul", max_points=np.int64(10)).max_points) is int


@pytest.mark.parametrize("plot, fragment", [
    ("out.jsonl", "--plot out.jsonl: matplotlib cannot write .jsonl files; end the name with one of "),
    ("out", "--plot out: no extension names its format; end the name with one of "),
])
def test_a_plot_matplotlib_cannot_write_is_refused_before_the_report(
        place: Path, capsys: pytest.CaptureFixture, plot: str, fragment: str) -> None:
    before = snapshot(place)
    code, out, err = run_main(capsys, ["report", "run", "--plot", plot])
    assert_one_line_error(code, out, err, fragment)
    assert ".png, " in err and out == ""  # the formats named; no report computed
    assert snapshot(place) == before


@pytest.mark.parametrize("command, code, output", [
    (["emit", "matmul", "--out", "variantsé"], 0, b" files under variants\\xe9/"),
    (["report", "nowhé"], 2, b"tilegen: error: nowh\\xe9 has no results.jsonl"),
], ids=["a message on stdout", "an error on stderr"])
def test_paths_the_terminal_cannot_encode_print_as_escapes(tmp_path: Path, command: list[str], code: int,
                                                         output: bytes) -> None:
    done = subprocess.run([sys.executable, "-m", "gen", *command], capture_output=True, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(REPO), PYTHONIOENCODING="ascii"))
    assert done.returncode == code, done.stderr
    assert output in done.stdout + done.stderr and b"Traceback" not in done.stderr
    assert len((done.stdout + done.stderr).strip().splitlines()) == 1


# ---- what used to be quietly wrong ------------------------------------------------------------------------

@pytest.mark.parametrize("params, sizes, tiles", [
    ({"tile": "16"}, "64x64x64", [16]),
    ({"tile": 16}, ["64x64x64"], [16]),
    ({"tile": ["8", 16]}, ("64x64x64",), [8, 16]),
], ids=["a string is one value", "a number is one value", "a list of mixed types"])
def test_a_value_given_on_its_own_is_one_value_not_its_characters(params: dict, sizes: Any, tiles: list[int]) -> None:
    plan = preview(SweepOptions("matmul", params=params, sizes=sizes))  # a preview writes nothing: no out
    assert sorted({point.variant.tile for point in plan.runnable}) == tiles
    assert {str(point.shape) for point in plan.runnable} == {"64x64x64"}


def test_a_resumed_run_says_it_dropped_a_half_written_line_and_keeps_everything_else(
        place: Path, capsys: pytest.CaptureFixture) -> None:
    kept = (place / "run" / "results.jsonl").read_bytes()[:-len(TORN)]
    report = sweep(SweepOptions("matmul", Path("run"), params={"tile": [8], "padding": [0], "bounds": ["guard"]},
                                sizes=["64x64x64"], resume=True, progress=False, run=RunOptions(arch="sm_90")),
                   executor=FakeExecutor())
    assert len(report.notes) == 1 and "was cut short" in report.notes[0] and "runs again" in report.notes[0]
    assert report.new_rows == 0  # the torn line was no point's row: nothing runs again
    assert (place / "run" / "results.jsonl").read_bytes() == kept


def test_a_sweep_whose_every_compile_fails_exits_1_without_calling_rows_compiled(
        place: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, compile_options) -> None:
    from gen.compiling import compiler

    monkeypatch.setattr(compiler, "render", lambda variant: f"broken {variant.name};\n")
    monkeypatch.setenv("TILEGEN_CACHE", str(place / "cache"))  # of its own: these are not the variants' sources
    code, out, err = run_main(capsys, ["sweep", "matmul", "-p", "tile=8,64", "-p", "padding=0", "--size", "64x64x64",
                                       "--out", "broken", "--arch", "sm_90", "--gpus", "0"])
    assert code == 1 and "Traceback" not in out + err
    assert "compile_error 3" in out and "skipped 3" in out and "marked 'compiled'" not in out
    code, out, err = run_main(capsys, ["compile", "matmul", "-p", "tile=8", "-p", "padding=0", "--arch", "sm_90"])
    assert code == 1 and "0 compiled (3 from cache), 3 failed" in out


def test_list_gives_the_default_space_as_valid_points_of_all(capsys: pytest.CaptureFixture) -> None:
    assert main(["list", "sgemm"]) == 0
    assert "default space: 3168 valid points of 15552" in capsys.readouterr().out


@pytest.mark.parametrize("command", [
    ["sweep", "sgemm", "--out", "fresh", "--size", "2048x2048x2048", "--dry-run"],
    ["sweep", "sgemm", "--size", "2048x2048x2048", "--dry-run"],
    ["tune", "sgemm", "--size", "2048x2048x2048", "--dry-run"],
], ids=["sweep", "sweep without --out", "tune"])
def test_a_dry_run_counts_and_samples_without_compiling_or_writing(
        place: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    monkeypatch.setenv("TILEGEN_CACHE", str(place / "cache"))  # a compile would write here
    before = snapshot(place)
    code, out, err = run_main(capsys, command)
    assert code == 0, err
    assert out.startswith("sgemm: 15,552 points (") and "; 3,168 to run, 12,384 not run (51 reasons)" in out
    assert out.count("  run: sgemm_f32_") == 5 and "... and 3,163 more" in out
    assert "not run (2,304, e.g. sgemm_" in out
    assert snapshot(place) == before


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path: Path, compile_options) -> None:
    """`tilegen compile ... | head -2`: the rest of the table has nowhere to go, and that is fine."""
    paddings = ",".join(str(p) for p in range(300))  # 900 skipped rows: a table larger than a pipe holds
    process = subprocess.Popen([sys.executable, "-m", "gen", "compile", "matmul", "-p", "tile=64", "-p",
                                f"padding={paddings}", "--keep-skipped"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)))
    first = [process.stdout.readline() for _ in range(2)]
    process.stdout.close()  # the reader goes, as head does
    err = process.stderr.read().decode()
    assert process.wait(timeout=patient(60)) == 0, err
    assert first[0].startswith(b"variant ") and "Traceback" not in err and "Exception ignored" not in err
