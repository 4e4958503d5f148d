"""gen.tuned: exact shape, then the nearest tuned shape, then a GPU of the same compute capability,
then the family's safe default; never a variant that cannot run the shape."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from gen.families import MatmulVariant, SgemmVariant, get_family
from gen.families.hgemm import HgemmVariant
from gen.core.results import DeviceInfo
from gen.call.lookup import tuned, tuned_with_reason
from gen.core.errors import UsageError
from gen.core.results import Row, Status
from gen.store.tuning_db import TuningDB

H100 = DeviceInfo("NVIDIA H100 80GB HBM3", "9.0", 132, 80 * 2**30, 50 * 2**20, "580")
H200 = DeviceInfo("NVIDIA H200", "9.0", 132, 141 * 2**30, 60 * 2**20, "580")
A100 = DeviceInfo("NVIDIA A100", "8.0", 108, 80 * 2**30, 40 * 2**20, "580")


def _row(variant, shape: str, median_ms: float, device: DeviceInfo) -> Row:
    return Row(variant.name, variant.family, variant.params(), Status.OK, shape=shape, median_ms=median_ms,
               error=1e-7, provenance=device.provenance())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "tuning.sqlite"
    TuningDB(path).record([
        _row(MatmulVariant(tile=32, bounds="none"), "1024x1024x1024", 1.0, H100),
        _row(MatmulVariant(tile=16, bounds="guard"), "1024x1024x1024", 1.2, H100),
        _row(MatmulVariant(tile=8, bounds="guard"), "4096x4096x4096", 9.0, H100),
        _row(MatmulVariant(tile=32, padding=1), "1000x1000x1000", 1.0, H200),
    ])
    return path


def test_the_exact_shape_wins(db: Path) -> None:
    variant, reason = tuned_with_reason("matmul", 1024, 1024, 1024, db=db, device=H100)
    assert variant == MatmulVariant(tile=32, bounds="none") and reason.startswith("the exact shape")


def test_a_winner_that_cannot_run_the_shape_is_adapted(db: Path) -> None:
    variant, reason = tuned_with_reason("matmul", 1000, 1000, 1000, db=db, device=H100)
    assert variant == MatmulVariant(tile=32, bounds="guard")  # the t32 bounds=none winner, with bound checks
    assert "same size bucket" in reason and "1024x1024x1024" in reason


def test_an_sgemm_winner_gets_checks_and_scalar_loads_where_it_must(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    fast = SgemmVariant(bounds="none", vec=4)
    TuningDB(path).record([_row(fast, "2048x2048x2048", 1.0, H100)])
    assert tuned("sgemm", 2048, 2048, 2048, db=path, device=H100) == fast
    assert tuned("sgemm", 2000, 2000, 2000, db=path, device=H100) == SgemmVariant(bounds="guard", vec=4)
    assert tuned("sgemm", 2001, 1999, 2001, db=path, device=H100) == SgemmVariant(bounds="guard", vec=1)


def test_far_shapes_take_the_nearest_tuned_shape_of_this_gpu(db: Path) -> None:
    variant, reason = tuned_with_reason("matmul", 3000, 5000, 7000, db=db, device=H100)
    assert variant == MatmulVariant(tile=8, bounds="guard") and "4096x4096x4096" in reason


def test_an_untuned_gpu_borrows_from_the_same_compute_capability_with_a_warning(db: Path) -> None:
    h200_only = TuningDB(db.parent / "h200.sqlite")
    h200_only.record([_row(MatmulVariant(tile=32, padding=1), "1000x1000x1000", 1.0, H200)])
    with pytest.warns(UserWarning, match="no tuning for"):
        variant = tuned("matmul", 512, 512, 512, db=h200_only.path, device=H100)
    assert variant == MatmulVariant(tile=32, padding=1)


def test_nothing_applicable_gives_the_safe_default_of_that_element_type(db: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        variant, reason = tuned_with_reason("matmul", 64, 64, 64, dtype="f64", db=db, device=A100)
    assert variant == MatmulVariant(dtype="f64") and "safe default" in reason


def test_the_sgemm_safe_default_drops_to_scalar_loads_on_misaligned_shapes(db: Path) -> None:
    assert tuned("sgemm", 1000, 1000, 1000, db=db, device=A100) == SgemmVariant()
    assert tuned("sgemm", 1001, 999, 1001, db=db, device=A100) == SgemmVariant(vec=1)


def test_a_family_made_for_another_gpu_answers_with_its_fallback(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    hgemm = HgemmVariant(bm=64, bn=128)
    TuningDB(path).record([_row(hgemm, "4096x4096x4096", 1.0, A100)])
    variant, reason = tuned_with_reason("wgmma", 4096, 4096, 4096, dtype="f16", db=path, device=A100)
    assert variant == hgemm and reason.endswith("wgmma's fallback on cc 8.0 (wgmma runs on sm_90a)")
    variant, reason = tuned_with_reason("wgmma", 4096, 4096, 4096, dtype="f16", db=path, device=H100)
    assert variant.family == "wgmma" and "fallback" not in reason  # it runs here: its own (here, its default)


def test_with_no_tuning_database_yet_the_fallback_still_answers(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEGEN_DB", str(tmp_path / "never-made.sqlite"))
    variant, reason = tuned_with_reason("wgmma", 4096, 4096, 4096, dtype="f16", device=A100)
    assert variant.family == "hgemm" and reason.startswith("the family's safe default")
    assert "wgmma's fallback on cc 8.0" in reason
    assert tuned_with_reason("wgmma", 4096, 4096, 4096, dtype="f16", device=H100)[0].family == "wgmma"


def test_a_fused_epilogue_never_answers_for_the_plain_gemm(tmp_path: Path) -> None:
    wgmma = get_family("wgmma")
    path = tmp_path / "e.sqlite"
    fused, plain = wgmma.variant({"bias": "col", "act": "relu"}), wgmma.variant({"store": "direct"})
    TuningDB(path).record([_row(fused, "4096x4096x4096", 1.0, H100), _row(plain, "4096x4096x4096", 1.1, H100)])
    assert tuned("wgmma", 4096, 4096, 4096, db=path, device=H100) == plain  # the faster row computes more


def test_a_fused_tune_is_kept_under_its_epilogue_and_answers_for_that_epilogue_only(tmp_path: Path) -> None:
    wgmma, path = get_family("wgmma"), tmp_path / "e.sqlite"
    fused, plain = wgmma.variant({"bias": "col", "act": "relu"}), wgmma.variant({"store": "direct"})
    other = wgmma.variant({"bias": "col", "act": "relu", "bn": 128})
    TuningDB(path).record([_row(fused, "4096x4096x4096", 1.0, H100), _row(plain, "4096x4096x4096", 1.1, H100),
                           _row(other, "2048x2048x2048", 0.2, H100)])
    keys = {(p.shape, p.epilogue) for p in TuningDB(path, create=False).problems("wgmma")}
    assert keys == {("4096x4096x4096", "bias=col,act=relu"), ("4096x4096x4096", ""),
                    ("2048x2048x2048", "bias=col,act=relu")}
    assert tuned("wgmma", 4096, 4096, 4096, db=path, device=H100, epilogue="bias=col,act=relu") == fused
    variant, reason = tuned_with_reason("wgmma", 4096, 4096, 4096, db=path, device=H100, epilogue="act=silu")
    assert variant == wgmma.variant({"store": "direct", "act": "silu"})  # the plain winner, the epilogue fused in
    assert reason == ("the exact shape on this GPU (4096x4096x4096 on NVIDIA H100 80GB HBM3 (cc 9.0, 132 SMs, 80 GiB))"
                      ", with the epilogue act=silu fused in")
    # a shape near one tuned both ways: the winner tuned with the epilogue comes first
    assert tuned("wgmma", 4000, 4096, 4096, db=path, device=H100, epilogue="bias=col,act=relu") == fused
    with pytest.raises(UsageError, match=r"^hgemm_\w+ fuses no epilogue \(bias=col\): a family with epilogues"):
        tuned("hgemm", 4096, 4096, 4096, db=path, device=H100, epilogue="bias=col")
