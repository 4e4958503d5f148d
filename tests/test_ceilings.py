"""Ceilings without a GPU: a family names and measures its own, each is measured once per GPU model
and kept in ceilings.json under the model's fields (a file of tilegen 0.1 or 0.2, keyed by the
model's display string, is still read), and a sweep's rows show the share of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gen.core.errors import UsageError
from gen.core.results import GpuModel
from gen.evaluate.options import RunOptions
from gen.families.problem import Ceiling
from gen.families.registry import registry
from gen.gpu.process.ceilings import Ceilings
from gen.gpu.local import LocalExecutor
from gen.commands.sweep import SweepOptions, sweep
from gen.store.results_log import read_rows

from .conftest import REPO
from .fakes import FAKE_DEVICE

H100 = GpuModel("NVIDIA H100 80GB HBM3", "9.0", 132, 79)
SHOWN_BY_0_2 = "NVIDIA H100 80GB HBM3 (cc 9.0, 132 SMs, 79 GiB)"  # str(H100) as tilegen 0.2 wrote it


class Counted:
    """A ceiling's measure that returns `rate` and counts its calls."""

    def __init__(self, rate: object):
        self.rate, self.calls = rate, 0

    def __call__(self) -> object:
        self.calls += 1
        return self.rate


def _ceiling(key: str, measure: Counted | None) -> Ceiling:
    return Ceiling(key, "Gpoint/s", 1e9, "a test's own rate", measure=measure)


def test_a_ceiling_is_measured_once_and_kept_under_the_models_fields(tmp_path: Path) -> None:
    path, measure = tmp_path / "ceilings.json", Counted(12.5)
    assert Ceilings(H100, path).rate(_ceiling("points", measure)) == 12.5
    assert Ceilings(H100, path).rate(_ceiling("points", measure)) == 12.5  # a later worker reads it
    assert measure.calls == 1
    assert json.loads(path.read_text()) == {H100.key: {"points": 12.5}}


def test_a_file_of_tilegen_0_2_is_read_and_nothing_in_it_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "ceilings.json"
    other = "NVIDIA A100-SXM4-40GB (cc 8.0, 108 SMs, 39 GiB)"
    path.write_text(json.dumps({SHOWN_BY_0_2: {"copy": 2982.0, "points": 7.0}, other: {"copy": 1400.0}}))
    known, new = Counted(99.0), Counted(3.0)
    ceilings = Ceilings(H100, path)
    assert ceilings.rate(_ceiling("points", known)) == 7.0 and known.calls == 0  # measured already
    assert ceilings.rate(_ceiling("lines", new)) == 3.0 and new.calls == 1
    assert json.loads(path.read_text()) == {SHOWN_BY_0_2: {"copy": 2982.0, "points": 7.0}, other: {"copy": 1400.0},
                                            H100.key: {"lines": 3.0}}  # 0.2's entries as they were
    assert Ceilings(H100, path).rate(_ceiling("points", known)) == 7.0 and known.calls == 0


def test_the_models_key_wins_over_its_old_display_string(tmp_path: Path) -> None:
    path = tmp_path / "ceilings.json"
    path.write_text(json.dumps({SHOWN_BY_0_2: {"points": 7.0}, H100.key: {"points": 8.0}}))
    assert Ceilings(H100, path).rate(_ceiling("points", Counted(1.0))) == 8.0


def test_old_display_strings_are_read_back_as_models() -> None:
    assert GpuModel.from_display(SHOWN_BY_0_2) == H100
    assert GpuModel.from_display(str(FAKE_DEVICE.model)) == FAKE_DEVICE.model
    assert GpuModel.from_display("NVIDIA H100 (a note)") is None and GpuModel.from_display(H100.key) is None


def test_a_ceiling_that_cannot_be_measured_has_no_rate_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ceilings.json"
    assert Ceilings(H100, path).rate(_ceiling("unmeasured", None)) is None
    assert not path.exists()


@pytest.mark.parametrize("rate", [0.0, -3.0, float("nan"), float("inf"), "fast", None, True])
def test_a_measure_that_returns_no_rate_is_refused_and_nothing_is_written(tmp_path: Path, rate: object) -> None:
    path = tmp_path / "ceilings.json"
    if rate is None:  # None from a family's measure: it could not measure here, so no share
        assert Ceilings(H100, path).rate(_ceiling("points", Counted(rate))) is None
    else:
        with pytest.raises(UsageError, match=r"the ceiling 'points' measured .*: its measure must return the rate in "
                                             r"Gpoint/s, a positive number"):
            Ceilings(H100, path).rate(_ceiling("points", Counted(rate)))
    assert not path.exists()


def test_a_familys_own_ceiling_is_measured_in_the_gpu_worker_and_each_row_has_its_share(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compile_options) -> None:
    """tests/families/stencil.py names its own ceiling, whose measure returns 400 Gpoint/s. The GPU
    worker (a stand-in, tests.fakes:ceiling_worker) asks the ceilings code for it, which calls the
    family's measure there, once, and keeps the rate for the next runs on that GPU model."""
    monkeypatch.setenv("TILEGEN_FAMILY_PATH", str(REPO / "tests" / "families"))
    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path / "cache"))
    registry.cache_clear()
    try:
        rows = _stencil_sweep(tmp_path / "first")
        assert {(row.unit, row.ceiling) for row in rows} == {("Gpoint/s", 400.0)}
        assert all(row.ceiling_share == pytest.approx(row.throughput / 400.0) for row in rows)
        path = tmp_path / "cache" / "ceilings.json"
        assert json.loads(path.read_text()) == {FAKE_DEVICE.model.key: {"stencil_points": 400.0}}
        path.write_text(json.dumps({FAKE_DEVICE.model.key: {"stencil_points": 500.0}}))
        assert {row.ceiling for row in _stencil_sweep(tmp_path / "again")} == {500.0}  # kept, not measured again
    finally:
        registry.cache_clear()


def _stencil_sweep(out: Path) -> list:
    sweep(SweepOptions("stencil", out, params={"bx": ["32"], "by": ["4"], "rows": ["1", "2"]}, sizes=["64x64"],
                       progress=False, run=RunOptions(seed=1)),
          executor=LocalExecutor([0], target="tests.fakes:ceiling_worker"))
    rows = read_rows(out / "results.jsonl")
    assert len(rows) == 2, rows
    return rows


def test_the_ceilings_lock_is_never_opened_through_a_link(tmp_path: Path) -> None:
    thesis = tmp_path / "thesis.txt"
    thesis.write_text("three years of work\n")
    path = tmp_path / "ceilings.json"
    (tmp_path / "ceilings.json.lock").symlink_to(thesis)
    with pytest.raises(UsageError, match="ceilings.json.lock is a symbolic link, not a file tilegen made"):
        Ceilings(H100, path).rate(_ceiling("points", Counted(12.5)))
    assert thesis.read_text() == "three years of work\n" and not path.exists()


def test_without_cublas_the_gemm_ceiling_is_the_libraries_product_and_without_them_none(monkeypatch) -> None:
    """Where cuBLAS's library is not found, the GEMM ceilings' product is CuPy's or PyTorch's, on two
    random n x n operands; with neither, there is none (the rows then have no share)."""
    from gen.gpu.process import ceilings
    from gen.gpu.runtime import cublas

    calls = []
    monkeypatch.setattr(cublas, "available", lambda: False)
    monkeypatch.setattr(ceilings, "vendor_gemm", lambda dtype: (lambda n: ("operand", n), lambda a, b: calls.append((a, b))))
    with ceilings.vendor_product("bf16", 64) as product:
        product()
    assert calls == [(("operand", 64), ("operand", 64))]
    monkeypatch.setattr(ceilings, "vendor_gemm", lambda dtype: None)
    with ceilings.vendor_product("f16", 64) as product:
        assert product is None


def test_a_bfloat16_operand_is_float32s_upper_half() -> None:
    import numpy as np

    from gen.gpu.process.ceilings import random_operand

    bits, values = random_operand("bf16", 33, 3), random_operand("f32", 33, 3)
    assert bits.dtype == np.uint16 and bits.shape == (33, 33)
    assert np.array_equal(bits, (values.view(np.uint32) >> 16).astype(np.uint16))
    assert -1 <= values.min() and values.max() < 1 and len(np.unique(bits)) > 100


@pytest.mark.parametrize("fails", [None, "create", "launch"])
def test_a_cublas_that_cannot_run_leaves_the_ceiling_to_the_libraries(monkeypatch, fails) -> None:
    """cuBLAS's product is tried with one launch first: where its handle or that launch fails (a
    library newer than the driver), its handle is let go and CuPy's or PyTorch's product serves."""
    import contextlib
    import sys
    import types

    from gen.gpu.process import ceilings
    from gen.gpu.runtime import cublas

    events = []
    memory = types.ModuleType("gen.gpu.runtime.launch")  # no GPU here: device arrays stand in as host ones
    memory.to_device, memory.empty = (lambda array: array), (lambda dims, dtype: ("C", dims))
    monkeypatch.setitem(sys.modules, "gen.gpu.runtime.launch", memory)

    @contextlib.contextmanager
    def product(dtype, a, b, c):
        if fails == "create":
            raise RuntimeError("cuBLAS: cublasCreate returned status 3")
        events.append("created")

        def launch() -> None:
            if fails == "launch":
                raise RuntimeError("cuBLAS: cublasGemmEx returned status 13")
            events.append("launch")
        try:
            yield launch
        finally:
            events.append("destroyed")

    monkeypatch.setattr(cublas, "available", lambda: True)
    monkeypatch.setattr(cublas, "product", product)
    monkeypatch.setattr(ceilings, "vendor_gemm", lambda dtype: (lambda n: n, lambda a, b: events.append("library")))
    with ceilings.vendor_product("bf16", 8) as launch:
        launch()
    assert events == {None: ["created", "launch", "launch", "destroyed"], "create": ["library"],
                      "launch": ["created", "destroyed", "library"]}[fails]
