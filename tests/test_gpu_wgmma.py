"""Hopper's wgmma family on a real GPU (marker `gpu`; sm_90 only): every rung of the ladder (one or
two consumer warp groups, two to twelve stages, a block per tile, persistent blocks or ping-pong,
stores from registers or bulk, clusters of two with TMA multicast, no producer warp group, every
block tile) right at odd, tiny and many-tile shapes in both element types and both output types,
before anything is timed; and gen.kernel calling it on PyTorch's float16 tensors with padded rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gen
from gen.core.results import Status

from .test_gpu import _only_skipped_and_ok, module_loads, run, runnable, skip_unless_gpu

pytestmark = pytest.mark.gpu

# Odd M, N and K with 16-byte rows of A and B (TMA's one demand; C's rows 1001 apart: bulk stores
# fall back to checked ones); a problem smaller than every tile and than one step of K; more tiles
# than an H100 has SMs, so persistent blocks take several (and bulk stores serve the whole tiles).
WGMMA_SIZES = ["999x1001x1003:1008,1008,1001", "77x45x33:40,48,45", "1000x2000x200"]
RUNGS = {"dtype": ["f16", "bf16"], "out": ["same", "f32"], "bm": ["64", "128", "256"], "bn": ["64", "128", "256"],
         "consumers": ["1", "2"], "stages": ["2", "4"], "schedule": ["grid", "persistent", "pingpong"],
         "store": ["direct", "bulk"], "cluster": ["1"]}  # clusters of two: CLUSTERED
CLUSTERED = {"dtype": ["f16", "bf16"], "out": ["same", "f32"], "bm": ["64", "128", "256"], "bn": ["128", "256"],
             "consumers": ["1", "2"], "stages": ["3"], "schedule": ["grid", "persistent", "pingpong"],
             "store": ["direct", "bulk"], "cluster": ["2"]}
UNSPECIALIZED = {"dtype": ["f16", "bf16"], "bm": ["64", "128", "256"], "bn": ["128", "256"], "consumers": ["1", "2"],
                 "stages": ["2", "4"], "schedule": ["grid", "persistent"], "store": ["direct", "bulk"],
                 "specialize": ["none"]}
DEEP = {"bm": ["128"], "bn": ["128"], "stages": ["2", "3", "4", "5", "6"], "group": ["1", "8", "16"], "store": ["bulk"],
        "cluster": ["1"]}
THIN_DEEP = {"dtype": ["f16", "bf16"], "bm": ["64"], "bn": ["64", "128", "192"], "consumers": ["1"], "stages": ["6", "8", "12"],
             "schedule": ["grid"], "store": ["direct", "bulk"], "split": ["1", "2"], "cluster": ["1"]}  # a few tokens' pipelines


def _sm90() -> None:
    skip_unless_gpu(lambda cc: cc == (9, 0), "the wgmma family runs on sm_90 GPUs (H100, H200) only")


def test_every_wgmma_rung_is_right_at_odd_tiny_and_many_tile_shapes(tmp_path: Path) -> None:
    _sm90()
    rows = run(tmp_path, "wgmma", RUNGS, WGMMA_SIZES)
    assert _only_skipped_and_ok(rows) == runnable("wgmma", RUNGS, WGMMA_SIZES) > 300
    clustered = run(tmp_path / "clustered", "wgmma", CLUSTERED, WGMMA_SIZES)
    assert _only_skipped_and_ok(clustered) == runnable("wgmma", CLUSTERED, WGMMA_SIZES) > 100
    unspecialized = run(tmp_path / "none", "wgmma", UNSPECIALIZED, WGMMA_SIZES)
    assert _only_skipped_and_ok(unspecialized) == runnable("wgmma", UNSPECIALIZED, WGMMA_SIZES) > 50
    deep = run(tmp_path / "deep", "wgmma", DEEP, WGMMA_SIZES)
    assert _only_skipped_and_ok(deep) == runnable("wgmma", DEEP, WGMMA_SIZES) > 30
    thin = run(tmp_path / "thin", "wgmma", THIN_DEEP, WGMMA_SIZES)
    assert _only_skipped_and_ok(thin) == runnable("wgmma", THIN_DEEP, WGMMA_SIZES) > 40
    for row in [*rows.values(), *clustered.values(), *unspecialized.values(), *deep.values(), *thin.values()]:
        if row.status == Status.OK:
            assert row.error <= row.tolerance
            if row.params["out"] == "f32":  # the float64 reference is exact for the rounded inputs
                assert row.error < 1e-5


def test_the_sanitizer_finds_nothing_where_a_cluster_s_blocks_leave_one_before_the_other(tmp_path: Path) -> None:
    """Clusters of two end without a barrier between their blocks: each block's producer waits until both
    blocks' consumers have freed every stage, and the other warps leave at once."""
    _sm90()
    params = {"dtype": ["bf16"], "bm": ["128"], "bn": ["128"], "consumers": ["2"], "stages": ["3"],
              "schedule": ["grid", "persistent", "pingpong"], "store": ["direct", "bulk"], "split": ["1"], "cluster": ["2"]}
    rows = run(tmp_path, "wgmma", params, ["300x520x200"], sanitize=True)
    assert [row.status for row in rows.values()] == [Status.OK] * 6, {k: (r.status, r.message) for k, r in rows.items()}


def test_a_tma_variant_is_loaded_once_through_the_driver_api_for_its_checks_its_timing_and_the_next_job(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its tensor maps are passed by value, which only the driver API's launch delivers: no second copy
    is loaded through pycuda."""
    _sm90()
    assert module_loads(monkeypatch, "wgmma", ("512x512x128", "256x256x256")) == ["driver API"]


def test_gen_kernel_runs_wgmma_on_torch_float16_sub_matrices() -> None:
    _sm90()
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional)")
    a = torch.rand(700, 1032, device="cuda").sub_(0.5).half()  # M x lda: K = 999 of each row is A
    b = torch.rand(999, 520, device="cuda").sub_(0.5).half()  # K x ldb: N = 500 of each row is B
    c = torch.full((700, 520), float("nan"), device="cuda", dtype=torch.float16)
    gen.kernel("wgmma", "700x500x999:1032,520,520", dtype="f16")(a, b, c)
    torch.cuda.synchronize()
    reference = a[:, :999].double().cpu().numpy() @ b[:, :500].double().cpu().numpy()
    got = c.double().cpu().numpy()
    assert np.linalg.norm(got[:, :500] - reference) / np.linalg.norm(reference) < 2e-3
    assert np.isnan(got[:, 500:]).all()  # nothing beyond N
