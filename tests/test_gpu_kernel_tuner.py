"""On a real GPU (marker `gpu`): constant memory filled in the GPU worker for a hand-written family
and through gen.tune_kernel's cmem_args, and Kernel Tuner-style kernels (a vector add, a 2-D
convolution with its filter in constant memory) tuned, checked and looked up. The CPU test at the
top checks the constant-memory family loads, so the GPU tests fail only for what the GPU does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gen
from gen.core.errors import UsageError
from gen.core.results import Status
from gen.core.timing import TimingOptions
from gen.evaluate.options import RunOptions
from gen.families import get_family
from gen.commands.sweep import SweepOptions, sweep

from .conftest import REPO

CONSTANT_FAMILY = REPO / "tests" / "families_constant"
QUICK = TimingOptions(budget_s=0.05, min_samples=5)
CONVOLUTION = """
#define image_width 500
#define image_height 300
#define input_width (image_width + filter_width - 1)
__constant__ float filter[filter_height * filter_width];

__global__ void convolution(float *output, const float *input) {
    int x = blockIdx.x * block_size_x * tile_size_x + threadIdx.x;
    int y = blockIdx.y * block_size_y + threadIdx.y;
    #pragma unroll
    for (int t = 0; t < tile_size_x; t++, x += block_size_x) {
        if (x >= image_width || y >= image_height) return;
        float sum = 0.0f;
        for (int i = 0; i < filter_height; i++)
            for (int j = 0; j < filter_width; j++)
                sum += input[(y + i) * input_width + x + j] * filter[i * filter_width + j];
        output[y * image_width + x] = sum;
    }
}
"""


@pytest.fixture(autouse=True)
def _own_family_path(own_family_path):
    """Every test here adds family folders: they stay out of the tests after it (conftest)."""


def test_the_constant_memory_family_loads_with_its_constants() -> None:
    gen.load_families(CONSTANT_FAMILY)
    problem = get_family("weighted").problem
    assert problem.constants(problem.parse_shape("1001"))["weights"].shape == (8,)


@pytest.mark.gpu
def test_a_families_constant_memory_is_filled_before_every_check(tmp_path: Path) -> None:
    gen.load_families(CONSTANT_FAMILY)
    report = sweep(SweepOptions("weighted", tmp_path, sizes=["1001", "1000000"], progress=False,
                                run=RunOptions(timing=QUICK)))
    assert {row.status for row in report.rows} == {Status.OK} and len(report.rows) == 4
    assert all(row.error < 1e-6 for row in report.rows)


@pytest.mark.gpu
def test_vector_add_through_tune_kernel_is_right_and_gen_kernel_runs_the_winner(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TILEGEN_DB", str(tmp_path / "t.sqlite"))  # where gen.kernel looks the winner up
    n = 1_000_003
    a, b = np.random.randn(n).astype(np.float32), np.random.randn(n).astype(np.float32)
    source = ("__global__ void vector_add(float *c, float *a, float *b, int n) {\n"
              "    int i = blockIdx.x * block_size_x + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i];\n}\n")
    results, env = gen.tune_kernel("vector_add", source, n, [np.zeros_like(a), a, b, np.int32(n)],
                                   {"block_size_x": [64, 128, 256, 512]}, answer=[a + b, None, None, None],
                                   quiet=True)
    assert [r["status"] for r in results] == ["ok"] * 4
    winner = next(r for r in results if r["variant"] == env["best"])  # its median round's row
    assert winner["time"] == pytest.approx(env["best_time"], rel=0.05)
    import pycuda.autoprimaryctx  # noqa: F401  (gen.kernel runs in the caller's context)

    out = np.zeros_like(a)
    kernel = gen.kernel(env["family"], n)
    kernel(out, a, b)
    assert np.allclose(out, a + b)


@pytest.mark.gpu
def test_a_kernel_that_adds_into_its_output_starts_from_the_array_given(tmp_path: Path) -> None:
    n = 100_003
    a, start = np.random.randn(n).astype(np.float32), np.full(n, 2.0, np.float32)
    source = ("__global__ void add_into(float *c, const float *a, int n) {\n"
              "    int i = blockIdx.x * block_size_x + threadIdx.x;\n    if (i < n) c[i] += a[i];\n}\n")
    results, _ = gen.tune_kernel("add_into", source, n, [start, a, np.int32(n)], {"block_size_x": [128, 256]},
                                 answer=[start + a, None, None], quiet=True, db=tmp_path / "t.sqlite")
    assert [r["status"] for r in results] == ["ok"] * 2


@pytest.mark.gpu
def test_a_convolution_with_cmem_args_is_checked_against_its_answer(tmp_path: Path) -> None:
    fh = fw = 5
    image = np.random.randn(300 + fh - 1, 500 + fw - 1).astype(np.float32)
    weights = np.random.randn(fh * fw).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(image.astype(np.float64), (fh, fw))
    expected = np.einsum("yxij,ij->yx", windows, weights.reshape(fh, fw).astype(np.float64))
    tune_params = {"block_size_x": [32, 64], "block_size_y": [2, 4], "tile_size_x": [1, 2],
                   "filter_height": [fh], "filter_width": [fw]}
    results, env = gen.tune_kernel("convolution", CONVOLUTION, (500, 300), [np.zeros(500 * 300, np.float32), image],
                                   tune_params, grid_div_x=["block_size_x", "tile_size_x"], answer=[expected, None],
                                   atol=1e-4, cmem_args={"filter": weights}, db=tmp_path / "t.sqlite", quiet=True)
    assert [r["status"] for r in results] == ["ok"] * 8, [r["message"] for r in results]
    with pytest.raises(UsageError, match="ran correctly"):  # a filter the answer was not made with
        gen.tune_kernel("convolution", CONVOLUTION, (500, 300), [np.zeros(500 * 300, np.float32), image],
                        tune_params, grid_div_x=["block_size_x", "tile_size_x"], answer=[expected, None], atol=1e-4,
                        cmem_args={"filter": -weights}, db=tmp_path / "wrong.sqlite", quiet=True)
    assert env["best_time"] > 0


@pytest.mark.gpu
def test_without_an_answer_every_variant_runs_and_says_it_was_not_checked(tmp_path: Path) -> None:
    image = np.random.randn(304, 504).astype(np.float32)
    results, _ = gen.tune_kernel("convolution", CONVOLUTION, (500, 300), [np.zeros(500 * 300, np.float32), image],
                                 {"block_size_x": [32, 64], "block_size_y": [4], "tile_size_x": [1],
                                  "filter_height": [5], "filter_width": [5]},
                                 grid_div_x=["block_size_x", "tile_size_x"],
                                 cmem_args={"filter": np.ones(25, np.float32)}, db=tmp_path / "t.sqlite", quiet=True)
    assert [r["status"] for r in results] == ["ok", "ok"]
    assert all("not checked" in r["message"] for r in results)


@pytest.mark.gpu
def test_verify_runs_in_the_gpu_worker_on_the_output(tmp_path: Path) -> None:
    n = 4099
    a = np.random.randn(n).astype(np.float32)
    source = ("__global__ void twice(float *c, const float *a, int n) {\n"
              "    int i = blockIdx.x * block_size_x + threadIdx.x;\n    if (i < n) c[i] = 2 * a[i];\n}\n")

    def verify(answer, result, atol=None):
        return bool(np.allclose(result[0], answer[0], atol=atol))

    results, _ = gen.tune_kernel("twice", source, n, [np.zeros_like(a), a, np.int32(n)], {"block_size_x": [64, 128]},
                                 answer=[2 * a, None, None], verify=verify, db=tmp_path / "t.sqlite", quiet=True)
    assert [r["status"] for r in results] == ["ok", "ok"]
    with pytest.raises(UsageError, match="ran correctly"):
        gen.tune_kernel("twice", source, n, [np.zeros_like(a), a, np.int32(n)], {"block_size_x": [64, 128]},
                        answer=[3 * a, None, None], verify=verify, db=tmp_path / "wrong.sqlite", quiet=True)
