"""The tensor-core GEMM on a real GPU (marker `gpu`): every layout and stage count right at odd and
strided shapes, in both element types and both output types, before anything is timed; TMA copies
(sm_90) in every geometry, and called through gen.call.kernels on PyTorch tensors with padded rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gen.core.results import Status
from gen.families import get_family
from gen.call.kernels import Kernel

from .test_gpu import _only_skipped_and_ok, run, runnable, skip_unless_gpu

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
                  "layout": ["swizzle", "pad"], "pipeline": ["plain", "overlap"], "bounds": ["none", "guard"],
                  "copy": ["async"]}  # copy=tma's geometries: below


def test_every_hgemm_block_and_warp_geometry_and_pipeline_is_right(tmp_path: Path) -> None:
    rows = run(tmp_path, "hgemm", GEOMETRY_SLICE, GEOMETRY_SIZES)
    assert _only_skipped_and_ok(rows) == runnable("hgemm", GEOMETRY_SLICE, GEOMETRY_SIZES) > 300
    assert all(row.error <= row.tolerance for row in rows.values() if row.status == Status.OK)


# TMA copies: odd M, N and K with 16-byte rows of A and B (lda, ldb multiples of 8), a strided view,
# whole tiles, and a problem smaller than one tile and one step of K.
TMA_SIZES = ["999x1000x1016", "1000x1000x1000:1008,1016,1000", "512x768x512", "77x48x40"]
TMA_GEOMETRY = {"dtype": ["f16"], "out": ["same"], "bm": ["64", "128", "256"], "bn": ["64", "128", "256"],
                "bk": ["64"], "wm": ["32", "64"], "wn": ["32", "64"], "stages": ["3"], "layout": ["swizzle"],
                "bounds": ["none", "guard"], "copy": ["tma"]}
TMA_TYPES_AND_STAGES = {"dtype": ["f16", "bf16"], "out": ["same", "f32"], "bm": ["128"], "bn": ["128"], "bk": ["64"],
                        "wm": ["64"], "wn": ["64"], "stages": ["2", "3", "4", "5"], "layout": ["swizzle"],
                        "bounds": ["guard"], "copy": ["tma"]}


def _sm90() -> None:
    skip_unless_gpu(lambda cc: cc >= (9, 0), "copy=tma needs the Tensor Memory Accelerator: sm_90 or later")


def test_every_tma_geometry_type_and_stage_count_is_right(tmp_path: Path) -> None:
    _sm90()
    geometry = run(tmp_path, "hgemm", TMA_GEOMETRY, TMA_SIZES)
    assert _only_skipped_and_ok(geometry) == runnable("hgemm", TMA_GEOMETRY, TMA_SIZES) > 100
    types = run(tmp_path / "types", "hgemm", TMA_TYPES_AND_STAGES, TMA_SIZES)
    assert _only_skipped_and_ok(types) == runnable("hgemm", TMA_TYPES_AND_STAGES, TMA_SIZES) == 16 * len(TMA_SIZES)
    for row in [*geometry.values(), *types.values()]:
        if row.status == Status.OK:
            assert row.error <= row.tolerance
            if row.params["out"] == "f32":
                assert row.error < 1e-5


def test_a_tma_variant_runs_on_torch_bfloat16_sub_matrices() -> None:
    _sm90()
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional)")
    family = get_family("hgemm")
    variant = family.variant_type(dtype="bf16", bk=64, copy="tma", bounds="guard")
    shape = family.parse_shape("700x500x999:1032,520,520")
    seeded = torch.Generator(device="cuda").manual_seed(30)
    a = torch.rand(700, 1032, device="cuda", generator=seeded).sub_(0.5).bfloat16()  # M x lda: K = 999 of each row
    a[:, 999:] = float("nan")  # the rows' padding: a copy that reads past K poisons C
    b = torch.rand(999, 520, device="cuda", generator=seeded).sub_(0.5).bfloat16()  # K x ldb: N = 500 of each row
    c = torch.full((700, 520), float("nan"), device="cuda", dtype=torch.bfloat16)
    Kernel(family, variant, shape)(a, b, c)
    torch.cuda.synchronize()
    reference = a[:, :999].double().cpu().numpy() @ b[:, :500].double().cpu().numpy()
    got = c.double().cpu().numpy()
    error = np.linalg.norm(got[:, :500] - reference) / np.linalg.norm(reference)  # the GPU checker's measure
    assert error <= family.problem.tolerance("bf16", shape)
    assert np.isnan(got[:, 500:]).all()  # nothing beyond N
