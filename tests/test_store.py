"""Results: rows appended and flushed one by one; a torn last line is tolerated on resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gen.core.errors import UsageError
from gen.families import MatmulVariant
from gen.core.results import Row, Status, skipped_row
from gen.store.results_log import ResultLog, read_rows


def _row(tile: int, status: Status = Status.OK) -> Row:
    variant = MatmulVariant(tile=tile)
    return Row(variant.name, "matmul", variant.params(), status, shape="64x64x64", median_ms=0.5, error=1e-7)


def test_rows_are_on_disk_as_soon_as_they_are_appended(tmp_path: Path) -> None:
    log = ResultLog(tmp_path)
    log.append(_row(8))
    lines = (tmp_path / "results.jsonl").read_text().splitlines()  # read before close
    assert [json.loads(line)["name"] for line in lines] == ["matmul_f32_t8_p0_guard_both"]
    log.close()


def test_resume_drops_a_torn_last_line_and_appends_cleanly(tmp_path: Path) -> None:
    with ResultLog(tmp_path) as log:
        log.append(_row(8))
        log.append(_row(16))
    path = tmp_path / "results.jsonl"
    path.write_bytes(path.read_bytes() + _row(32).to_json().encode()[:40])  # killed mid-write
    with ResultLog(tmp_path, resume=True) as log:
        assert [row.key for row in log.rows] == ["matmul_f32_t8_p0_guard_both@64x64x64",
                                                 "matmul_f32_t16_p0_guard_both@64x64x64"]
        log.append(_row(32))
    rows = read_rows(path)
    assert [r.params["tile"] for r in rows] == [8, 16, 32]
    assert rows[0].status is Status.OK and rows[0].median_ms == 0.5


def test_a_whole_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(_row(8).to_json())
    with ResultLog(tmp_path, resume=True) as log:
        log.append(_row(16))
    assert len(read_rows(path)) == 2


def test_existing_results_are_never_overwritten_without_resume(tmp_path: Path) -> None:
    with ResultLog(tmp_path) as log:
        log.append(_row(8))
    with pytest.raises(UsageError, match="pass --resume"):
        ResultLog(tmp_path)
    assert len(read_rows(tmp_path / "results.jsonl")) == 1


def test_a_corrupt_middle_line_is_reported_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(_row(8).to_json() + "\n{not json\n" + _row(16).to_json() + "\n")
    with pytest.raises(UsageError, match="results.jsonl:2 is not a result row"):
        read_rows(path)


def test_csv_flattens_parameters_and_provenance(tmp_path: Path) -> None:
    with ResultLog(tmp_path) as log:
        row = skipped_row(MatmulVariant(tile=64), "too many threads", provenance={"gpu": "H100"})
        log.append(row)
        csv_path = log.write_csv()
    header, line = csv_path.read_text().splitlines()
    assert "param_tile" in header.split(",") and "gpu" in header.split(",")
    assert "skipped" in line and "too many threads" in line and "H100" in line


def test_a_file_written_whole_is_as_readable_as_one_written_plainly(tmp_path: Path) -> None:
    from gen.core.own_files import UMASK, write_atomically

    target = tmp_path / "run.json"
    write_atomically(target, b"{}")
    plain = tmp_path / "plain"
    plain.write_bytes(b"{}")
    assert target.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777 == 0o666 & ~UMASK
