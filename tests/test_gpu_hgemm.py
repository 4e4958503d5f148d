"""The tensor-core GEMM on a real GPU (marker `gpu`): every layout and stage count right at odd and
strided shapes, in both element types and both output types, before anything is timed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.core.results import Status

from .test_gpu import _only_skipped_and_ok, run, runnable

pytestmark = pytest.mark.gpu

# 999x1001x1003: nothing a multiple of 8, so only copy=scalar runs; the strided one runs copy=async
# too; 256x384x512 runs bounds=none (whole tiles of 128 x 128 x 32).
HGEMM_SIZES = ["999x1001x1003", "1000x1000x1000:1008,1016,1000", "256x384x512"]
HGEMM_SLICE = {"dtype": ["f16", "bf16"], "out": ["same", "f32"], "bm": ["128"], "bn": ["128"], "bk": ["32"],
               "wm": ["64"], "wn": ["64"], "stages": ["2", "3", "4", "5"], "layout": ["swizzle", "pad", "none"],
               "bounds": ["none", "guard"], "copy": ["async", "scalar"]}


def test_every_hgemm_layout_and_stage_count_is_right_at_odd_and_strided_shapes(tmp_path: Path) -> None:
    rows = run(tmp_path, "hgemm", HGEMM_SLICE, HGEMM_SIZES)
    assert _only_skipped_and_ok(rows) == runnable("hgemm", HGEMM_SLICE, HGEMM_SIZES) > 100
    for row in rows.values():
        if row.status == Status.OK:
            assert row.error <= row.tolerance
            if row.params["out"] == "f32":  # the float64 reference is exact for the rounded inputs
                assert row.error < 1e-5
            assert row.ceiling_share is None or 0 < row.ceiling_share < 1.5


# Every block and warp geometry the family's space holds, both pipelines, the two conflict-free
# layouts: each thread's copy and ldmatrix addresses are its first ones plus constants, which holds
# only where a pass of the threads covers a multiple of 8 rows (else they are worked out per row):
# 32-thread blocks (64 x 64 with one 64 x 64 warp) take the second way.
GEOMETRY_SIZES = ["1000x1000x1000:1008,1016,1000", "512x768x512"]
GEOMETRY_SLICE = {"dtype": ["f16"], "out": ["same"], "bm": ["64", "128", "256"], "bn": ["64", "128", "256"],
                  "bk": ["32", "64"], "wm": ["32", "64"], "wn": ["32", "64"], "stages": ["3"],
                  "layout": ["swizzle", "pad"], "pipeline": ["plain", "overlap"], "bounds": ["none", "guard"]}


def test_every_hgemm_block_and_warp_geometry_and_pipeline_is_right(tmp_path: Path) -> None:
    rows = run(tmp_path, "hgemm", GEOMETRY_SLICE, GEOMETRY_SIZES)
    assert _only_skipped_and_ok(rows) == runnable("hgemm", GEOMETRY_SLICE, GEOMETRY_SIZES) > 300
    assert all(row.error <= row.tolerance for row in rows.values() if row.status == Status.OK)
