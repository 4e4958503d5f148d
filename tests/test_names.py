"""Names are a persistence format: every stored name still parses to the same variant and back,
and a parameter added at its default leaves existing names as they were."""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from gen.cli.main import main
from gen.families import MatmulVariant, builtin_families, variant_from_name
from gen.families.registry import FAMILY_PATH_ENV, registry
from gen.store.results_log import read_rows
from gen.families.variant import integer

from .conftest import REPO

RELEASE_DB = REPO / "tests" / "data" / "tuning-0.1.0.sqlite"


def _stored_names() -> set[str]:
    names = {row.name for path in (REPO / "docs" / "results" / "data").rglob("*.jsonl") for row in read_rows(path)}
    with sqlite3.connect(f"file:{RELEASE_DB}?mode=ro", uri=True) as connection:
        names |= {name for (name,) in connection.execute("SELECT DISTINCT variant FROM measurements")}
    return names


@pytest.fixture
def example_family_loaded(monkeypatch: pytest.MonkeyPatch):
    """The example reduction family on the family path, as its stored sweep was run."""
    monkeypatch.setenv(FAMILY_PATH_ENV, str(REPO / "docs" / "examples" / "reduction"))
    registry.cache_clear()
    yield
    registry.cache_clear()  # monkeypatch restores the path after this; the next lookup reloads


def test_every_stored_name_parses_back_to_itself(example_family_loaded: None) -> None:
    names = _stored_names()
    families = {n.split("_")[0] for n in names}
    assert len(names) > 3000 and families == {"matmul", "sgemm", "transpose", "copy", "reduce"}
    assert [n for n in names if variant_from_name(n).name != n] == []


def test_best_answers_from_a_database_written_by_tilegen_0_1_0(tmp_path: Path, capsys) -> None:
    db = tmp_path / "old.sqlite"
    shutil.copy(RELEASE_DB, db)  # opening a database may write to it (WAL): never the committed copy
    assert main(["best", "sgemm", "--size", "4096x4096x4096", "--gpu-model", "H200", "--db", str(db)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip().startswith("sgemm_f32_") and "on NVIDIA H200" in captured.err
    assert main(["best", "transpose", "--size", "16384x16384", "--gpu-model", "H100", "--db", str(db)]) == 0
    assert capsys.readouterr().out.strip().startswith("transpose_f32_")


# A change to a format renames stored variants: it must be deliberate, and keep old names parsing.
FORMATS = {
    "matmul": "matmul_{dtype}_t{tile}_p{padding}_{bounds}_{sync}[_{smem}: static][_{method}: tiled]",
    "sgemm": "sgemm_{dtype}_bm{bm}_bn{bn}_bk{bk}_wm{wm}_wn{wn}_tm{tm}_tn{tn}_p{padding}_v{vec}_s{stages}"
             "[_{load}: registers][_sk{splitk}: 1]_{bounds}_{sync}[_{smem}: static]",
    "transpose": "transpose_{dtype}_{method}_t{tile}_r{rows}_p{padding}[_g{group}: 0][_v{vec}: 1][_{hint}: normal]"
                 "_{bounds}_{sync}[_{smem}: static]",
    "copy": "copy_{dtype}_{method}_t{tile}_r{rows}[_v{vec}: 1]_{bounds}[_{smem}: static]",
}


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_the_name_formats_are_what_stored_results_were_written_with(family: str) -> None:
    assert builtin_families()[family].variant_type.name_format() == FORMATS[family]


@dataclass(frozen=True, order=True)
class MatmulWithANewParameter(MatmulVariant):
    unroll: int = integer(1, tag="u", minimum=1, omit=1, space=(1, 2), help="a parameter added after release")


def test_a_parameter_added_at_its_default_keeps_every_old_name() -> None:
    old = MatmulVariant(tile=32, padding=1, bounds="split")
    assert MatmulWithANewParameter(tile=32, padding=1, bounds="split").name == old.name
    assert MatmulWithANewParameter.from_name(old.name) == MatmulWithANewParameter(tile=32, padding=1, bounds="split")
    unrolled = MatmulWithANewParameter(tile=32, unroll=2)
    assert unrolled.name == "matmul_f32_t32_p0_guard_both_u2"
    assert MatmulWithANewParameter.from_name(unrolled.name) == unrolled
