"""On a real GPU (marker `gpu`): every correct variant is right, races and hangs are caught,
and a crashing kernel does not stop a sweep. Skipped with a reason where there is no GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import pytest

from gen.compiling import compiler
from gen.families import get_family
from gen.families.space import Space
from gen.core.timing import TimingOptions
from gen.core.results import Row, Status
from gen.evaluate.options import RunOptions
from gen.commands.sweep import SweepOptions, sweep

pytestmark = pytest.mark.gpu
QUICK = TimingOptions(budget_s=0.05, min_samples=5)


def run(tmp_path: Path, family: str, params: dict, sizes: list[str], cache_configs: Sequence[str] = ("none",),
        **options) -> dict[str, Row]:
    report = sweep(SweepOptions(family, tmp_path, params=params, sizes=sizes, cache_configs=cache_configs,
                                progress=False, run=RunOptions(timing=QUICK, **options)))
    return {row.key: row for row in report.rows}


def _only_skipped_and_ok(rows: dict[str, Row]) -> int:
    """Every row that ran is ok (skipped ones are invalid points or refused shapes); the ok count."""
    bad = {key: (row.status, row.message) for key, row in rows.items() if row.status not in (Status.OK, Status.SKIPPED)}
    assert not bad
    return sum(row.status == Status.OK for row in rows.values())


MATMUL_SIZES = ["256x256x256", "1000x999x1001", "1x4097x33", "300x200x100:128,256,256"]


def test_every_default_matmul_variant_is_right_at_multiple_and_odd_shapes(tmp_path: Path) -> None:
    rows = run(tmp_path, "matmul", {}, MATMUL_SIZES)
    assert _only_skipped_and_ok(rows) == 18 + 12 * 3  # bounds=none only at 256^3
    for row in rows.values():
        if row.status == Status.OK:
            assert row.error <= row.tolerance and row.checks == 1
            assert row.min_ms <= row.median_ms <= row.max_ms and row.samples >= 5
            assert 0 < row.ceiling_share < 1.5 and row.provenance["cc"]


def test_f64_dynamic_shared_and_naive_matmul_are_right(tmp_path: Path) -> None:
    rows = run(tmp_path, "matmul", {"dtype": ["f64", "f32"], "smem": ["dynamic"], "tile": ["16", "32"]},
               ["1000x999x1001", "256x256x256"])
    rows.update(run(tmp_path / "naive", "matmul", {"method": ["naive"], "padding": ["0"], "bounds": ["guard"]},
                    ["1000x999x1001"]))
    # per dtype: 2 tiles x 2 paddings x 3 bounds, bounds=none refused at the odd size; and 3 naive
    assert _only_skipped_and_ok(rows) == 2 * (8 + 12) + 3
    assert any(row.params["dtype"] == "f64" and row.error < 1e-12 for row in rows.values() if row.error is not None)


def skip_unless_gpu(accepts: Callable[[tuple[int, int]], bool], reason: str) -> None:
    """Skip the test unless GPU 0's compute capability, (major, minor), is one that `accepts`."""
    import pycuda.driver as cuda

    cuda.init()
    if not accepts(cuda.Device(0).compute_capability()):
        pytest.skip(reason)


def runnable(family_name: str, params: dict, sizes: list[str]) -> int:
    """How many (variant, size) pairs of a space should run: valid and not refused."""
    family = get_family(family_name)
    valid = Space.default(family, params).expand().valid
    return sum(family.refusal(v, family.parse_shape(size)) is None for v in valid for size in sizes)


def test_every_default_transpose_and_copy_variant_is_right(tmp_path: Path) -> None:
    sizes = ["512x512", "1000x999", "1x4097", "1000x996"]  # the last for vec=4: odd, but whole float4s
    rows = run(tmp_path, "transpose", {}, sizes)
    f64 = {"dtype": ["f64"], "smem": ["dynamic"], "method": ["shared", "diagonal"]}
    rows.update(run(tmp_path / "f64", "transpose", f64, ["1000x999", "256x256"]))
    rows.update(run(tmp_path / "copy", "copy", {"bounds": ["none", "guard"]}, sizes))
    expected = (runnable("transpose", {}, sizes) + runnable("transpose", f64, ["1000x999", "256x256"])
                + runnable("copy", {"bounds": ["none", "guard"]}, sizes))
    assert _only_skipped_and_ok(rows) == expected > 100
    assert all(row.error == 0.0 for row in rows.values() if row.status == Status.OK)


SGEMM_SLICE = {"bm": ["64", "128"], "bn": ["128"], "bk": ["8", "16"], "wm": ["32", "64"], "wn": ["64"], "tm": ["8"],
               "tn": ["4"], "padding": ["0", "4"], "vec": ["1", "4"], "stages": ["1", "2"],
               "bounds": ["none", "guard", "split"]}
SGEMM_SIZES = ["256x256x256", "300x200x100", "301x203x101", "200x300x64:72,304,304"]


def test_sgemm_variants_are_right_at_multiple_odd_and_strided_shapes(tmp_path: Path) -> None:
    rows = run(tmp_path, "sgemm", SGEMM_SLICE, SGEMM_SIZES)
    assert _only_skipped_and_ok(rows) == runnable("sgemm", SGEMM_SLICE, SGEMM_SIZES) > 150
    assert {row.params["bounds"] for row in rows.values() if row.status == Status.OK and row.shape == "301x203x101"} \
        == {"guard", "split"}


def test_every_default_sgemm_variant_is_right(tmp_path: Path) -> None:
    """All of the default space (bounds=none, both loads): 3168 variants at a shape every tile divides."""
    rows = run(tmp_path, "sgemm", {}, ["256x256x256"])
    assert _only_skipped_and_ok(rows) == runnable("sgemm", {}, ["256x256x256"]) > 3000


SPLIT_K = {"bm": ["64"], "bn": ["128"], "bk": ["16"], "wm": ["64"], "wn": ["32"], "tm": ["4"], "tn": ["4"],
           "padding": ["4"], "vec": ["1", "4"], "stages": ["1", "2"], "load": ["registers", "async"],
           "splitk": ["2", "4", "16"], "bounds": ["none", "guard", "split"]}


def test_split_k_adds_every_slice_once_at_odd_strided_and_short_k_shapes(tmp_path: Path) -> None:
    """K = 64 gives 16 slices only 4 steps: the empty ones must leave C alone; C is poisoned
    before each run, so a launch that did not zero it first would come back NaN."""
    rows = run(tmp_path, "sgemm", SPLIT_K, SGEMM_SIZES)
    assert _only_skipped_and_ok(rows) == runnable("sgemm", SPLIT_K, SGEMM_SIZES) > 100


def test_racy_placements_are_caught(tmp_path: Path) -> None:
    rows = run(tmp_path, "matmul", {"tile": ["16"], "padding": ["0"], "bounds": ["guard"],
                                    "sync": ["after-load", "after-compute", "none"]}, ["1024x1024x1024"], sanitize=True)
    rows.update(run(tmp_path / "t", "transpose", {"method": ["shared"], "tile": ["32"], "rows": ["8"], "padding": ["1"],
                                                  "bounds": ["guard"], "sync": ["none"]}, ["1000x999"], sanitize=True))
    assert all(row.checks in (None, 3) for row in rows.values())
    caught = {row.name: row.status for row in rows.values() if row.status in (Status.WRONG, Status.RACY)}
    assert caught, {row.name: (row.status, row.message) for row in rows.values()}
    assert any(row.hazards and row.hazards.get("racecheck") for row in rows.values())


def test_divergent_barriers_end_without_stopping_the_sweep(tmp_path: Path) -> None:
    rows = run(tmp_path, "matmul", {"tile": ["16"], "padding": ["0"], "bounds": ["guard"], "sync": ["divergent", "both"]},
               ["1000x999x1001"], sanitize=True, silence_s=20.0)
    by_sync = {row.params["sync"]: row for row in rows.values()}
    # Seen on an H100: threads outside C exit before the barriers and exited threads count as
    # arrived, so nothing hangs and synccheck finds nothing; the edge tiles hold stale values and
    # the check catches it as `wrong`. Elsewhere it may hang (`timeout`) or trip synccheck (`racy`).
    caught = (Status.TIMEOUT, Status.LAUNCH_ERROR, Status.RACY, Status.WRONG)
    assert by_sync["divergent"].status in caught, by_sync["divergent"]
    assert by_sync["both"].status == Status.OK


OUT_OF_BOUNDS = """extern "C" __global__ void {name}(const float* A, const float* B, float* C,
    int M, int N, int K, int lda, int ldb, int ldc)
{{
    C[(size_t)1 << 40] = 1.0f;  // a terabyte past C: an illegal address
}}
"""


def test_an_out_of_bounds_kernel_is_a_launch_error_and_the_next_variant_runs(tmp_path: Path, monkeypatch) -> None:
    real_render = compiler.render

    def inject(variant):
        return OUT_OF_BOUNDS.format(name=variant.name) if variant.tile == 8 else real_render(variant)

    monkeypatch.setattr(compiler, "render", inject)
    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path / "cache"))  # of its own: tile 8's source is not its own
    rows = run(tmp_path / "run", "matmul", {"tile": ["8", "16", "32"], "padding": ["0"], "bounds": ["guard"]},
               ["256x256x256"])
    by_tile = {row.params["tile"]: row for row in rows.values()}
    assert by_tile[8].status == Status.LAUNCH_ERROR and "illegal" in by_tile[8].message.lower()
    assert by_tile[16].status == by_tile[32].status == Status.OK


def test_every_cache_configuration_runs(tmp_path: Path) -> None:
    rows = run(tmp_path, "matmul", {"tile": ["32"], "padding": ["1"], "bounds": ["guard"]}, ["512x512x512"],
               cache_configs=["none", "shared", "l1", "equal"])
    assert sorted(row.cache_config for row in rows.values() if row.status == Status.OK) == ["equal", "l1", "none", "shared"]


def test_a_kernels_cache_preference_follows_each_job_that_asks_for_another(tmp_path: Path) -> None:
    """One kernel of a module, asked for with l1, then shared, then l1 again (one variant's jobs at
    three cache configurations): each time it carries the carveout asked for, not the one before."""
    import pycuda.autoprimaryctx  # noqa: F401  (a context for the module)
    import pycuda.driver as cuda

    from gen.compiling.compiler import CompileOptions, compile_variant
    from gen.core.limits import CACHE_CONFIGS
    from gen.gpu.runtime.launch import CubinModule

    variant = get_family("matmul").default_variant()
    module = CubinModule(str(compile_variant(variant, CompileOptions.local()).cubin))
    carveouts = []
    for preference in ("l1", "shared", "l1"):
        function = module.function(variant.name, preference, 0)
        carveouts.append(function.get_attribute(cuda.function_attribute.PREFERRED_SHARED_MEMORY_CARVEOUT))
    assert carveouts == [CACHE_CONFIGS[p] for p in ("l1", "shared", "l1")]


def module_loads(monkeypatch: pytest.MonkeyPatch, family: str, shapes: tuple[str, str]) -> list[str]:
    """The bindings through which the GPU worker's Runner loads a cubin for two jobs on the family's
    first default variant (two seeds checked, then timed; then a seed at another shape), once each
    load; both jobs must come out right."""
    import pycuda.driver as cuda

    from gen.compiling.compiler import CompileOptions, compile_variant
    from gen.gpu.process.jobs import Job
    from gen.gpu.process.runner import Runner
    from gen.gpu.runtime import native

    variant = Space.default(get_family(family)).expand().valid[0]
    compiled = compile_variant(variant, CompileOptions.local())
    runner = Runner()  # its own compare kernels are loaded before the count starts
    loads: list[str] = []
    for binding, owner, name in (("pycuda", cuda, "module_from_buffer"), ("driver API", native, "load")):
        load = getattr(owner, name)
        monkeypatch.setattr(owner, name, lambda *a, load=load, binding=binding: loads.append(binding) or load(*a))
    first = runner.run(Job(variant.name, family, str(compiled.cubin), shapes[0], seeds=(1, 2), timing=QUICK))
    second = runner.run(Job(variant.name, family, str(compiled.cubin), shapes[1], seeds=(3,), timing=QUICK))
    assert (first.status, first.checks, second.status) == (Status.OK, 2, Status.OK), (first.message, second.message)
    assert first.timing is not None and second.timing is not None
    return loads


def test_a_variant_is_loaded_once_through_pycuda_for_its_checks_its_timing_and_the_next_job(monkeypatch) -> None:
    assert module_loads(monkeypatch, "sgemm", ("512x512x512", "256x256x256")) == ["pycuda"]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_the_device_checker_catches_unwritten_stray_and_wrong_elements(dtype: str) -> None:
    import numpy as np
    import pycuda.autoprimaryctx  # noqa: F401  (importing gen.gpu.process.checker makes no context: the caller brings one)
    import pycuda.gpuarray as gpuarray

    from gen.families.problem import numpy_dtype
    from gen.gpu.process import checker as gpu
    from gen.gpu.runtime.launch import fill

    reference = np.random.default_rng(3).uniform(-1, 1, (5, 7))
    expected = np.full((5, 9), np.nan)  # two padding columns (ld 9) outside the output region
    expected[:, :7] = reference
    problem = gpu.DeviceProblem({}, gpuarray.to_gpu(expected), float(np.linalg.norm(reference)), reference.size)
    good = expected.astype(numpy_dtype(dtype))
    checker = gpu.OutputChecker()
    tolerance = {"f32": 1e-6, "f16": 1e-3, "bf16": 1e-2}[dtype]  # the rounding of `good` itself

    def on_device(host: np.ndarray):  # 16-bit floats travel as their bits (pycuda copies no bfloat16)
        return gpuarray.to_gpu(host.view(np.uint16)).view(host.dtype) if host.dtype.itemsize == 2 else gpuarray.to_gpu(host)

    def verdict(planted: np.ndarray) -> tuple[float, str]:
        return checker.compare(on_device(planted), problem, tolerance=tolerance)

    error, found = verdict(good)
    assert found == "" and error < tolerance / 2
    poisoned = on_device(good)
    fill(poisoned, np.nan)  # what every check does to the output before the launch
    assert "35 of 35 output elements were not written" in checker.compare(poisoned, problem, tolerance)[1]
    unwritten, stray, wrong = good.copy(), good.copy(), good.copy()
    unwritten[2, 3] = np.nan
    stray[4, 8] = 0.5
    wrong[1, 1] += 0.25
    assert "1 of 35 output elements were not written" in verdict(unwritten)[1]
    assert "1 elements outside the output region were written" in verdict(stray)[1]
    assert "above the tolerance" in verdict(wrong)[1]


EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "reduction"
REDUCE_SIZES = ["1000x999", "37x1001", "1x4097", "3x5", "4096x1024"]


def test_the_example_reduction_is_right_at_odd_sizes_and_timed(tmp_path: Path, monkeypatch) -> None:
    """The plugin family outside gen/ runs in the isolated workers like a built-in (they load it
    from TILEGEN_FAMILY_PATH): every variant right at odd sizes, timed against the copy ceiling."""
    from gen.families.registry import registry

    monkeypatch.setenv("TILEGEN_FAMILY_PATH", str(EXAMPLE))
    registry.cache_clear()
    try:
        rows = run(tmp_path, "reduce", {"dtype": ["f32", "f64"]}, REDUCE_SIZES)
        assert _only_skipped_and_ok(rows) == runnable("reduce", {"dtype": ["f32", "f64"]}, REDUCE_SIZES) > 200
        ok = [row for row in rows.values() if row.status == Status.OK]
        assert all(row.error <= row.tolerance and row.unit == "GB/s" and 0 < row.ceiling_share < 1.5 for row in ok)
        assert {row.params["method"] for row in ok} == {"shuffle", "tree"}
    finally:
        registry.cache_clear()


def test_gen_kernel_runs_the_tuned_plugin_variant_on_the_callers_arrays(tmp_path: Path, monkeypatch) -> None:
    import numpy as np

    import gen
    from gen.families.registry import registry
    from gen.commands.tune import TuneOptions, tune

    monkeypatch.setenv("TILEGEN_DB", str(tmp_path / "t.sqlite"))
    monkeypatch.setenv("TILEGEN_FAMILY_PATH", str(EXAMPLE))
    registry.cache_clear()
    try:
        (result,) = tune(TuneOptions("reduce", "1000x1000", params={"block": ["128", "256"], "items": ["2", "4"]},
                                     strategy="brute", budget=20, run=RunOptions(timing=QUICK), progress=False,
                                     top=2))
        assert result.winner.status == Status.OK
        import pycuda.autoprimaryctx  # noqa: F401  (the caller's context)
        import pycuda.gpuarray as gpuarray

        data = np.random.default_rng(5).uniform(-1, 1, (1000, 999)).astype(np.float32)
        sums = gpuarray.empty(1000, np.float32)
        kernel = gen.kernel("reduce", 1000, 999)  # a shape not tuned: the winner, adapted (vec=1 for N 999)
        assert kernel.variant.vec == 1
        kernel(data=gpuarray.to_gpu(data), sums=sums)
        expected = data.astype(np.float64).sum(axis=1)
        assert np.linalg.norm(sums.get() - expected) / np.linalg.norm(expected) < 1e-5
    finally:
        registry.cache_clear()


OWN_FAMILIES = Path(__file__).resolve().parent / "families"


@pytest.mark.parametrize("family, size, dtype", [("stencil", "1000x999", None), ("blur", "1024x1024", "f64"),
                                                 ("blur", "1000x999", "f32")])
def test_your_own_family_goes_from_sweep_to_tune_to_best_to_a_kernel_on_numpy_arrays(
        family: str, size: str, dtype: str | None, tmp_path: Path, monkeypatch, capsys) -> None:
    """tests/families: `stencil` has no dtype parameter, `blur` has parameters named smem, dtype,
    bounds, vec and cache. Each is swept, tuned, looked up by `best` and gen.tuned, and run by
    gen.kernel on NumPy arrays: the tuned winner is found every time."""
    import numpy as np

    import gen
    from gen.cli.main import main
    from gen.families.registry import registry
    from gen.commands.tune import TuneOptions, tune

    db = tmp_path / "t.sqlite"
    monkeypatch.setenv("TILEGEN_DB", str(db))
    monkeypatch.setenv("TILEGEN_FAMILY_PATH", str(OWN_FAMILIES))
    registry.cache_clear()
    params = {"dtype": [dtype]} if dtype else {}
    try:
        rows = run(tmp_path / "sweep", family, params, [size, "37x45", "64x512"])
        assert _only_skipped_and_ok(rows) == runnable(family, params, [size, "37x45", "64x512"]) > 10
        (result,) = tune(TuneOptions(family, size, params=params, strategy="brute", run=RunOptions(timing=QUICK),
                                     progress=False, top=2))
        assert result.covered_space and result.winner.status == Status.OK
        assert main(["best", family, "--size", size, *(["--dtype", dtype] if dtype else [])]) == 0
        out, err = capsys.readouterr()
        assert out.strip() == result.winner.name and "the exact shape on this GPU" in err
        h, w = (int(d) for d in size.split("x"))
        assert gen.tuned(family, h, w, dtype=dtype).name == result.winner.name
        import pycuda.autoprimaryctx  # noqa: F401  (the caller's context)

        kernel = gen.kernel(family, h, w, dtype=dtype)
        assert kernel.variant.name == result.winner.name
        element = np.float64 if dtype == "f64" else np.float32
        grid = np.random.default_rng(3).uniform(-1, 1, (h, w)).astype(element)
        out = np.full((h, w), np.nan, element)
        assert kernel(grid=grid, out=out) is out  # filled in place
        expected = get_family(family).problem.reference({"grid": grid.astype(np.float64)}, get_family(family)
                                                        .parse_shape(size))
        assert np.linalg.norm(out - expected) / np.linalg.norm(expected) < (1e-12 if dtype == "f64" else 1e-5)
    finally:
        registry.cache_clear()


def test_ceilings_are_measured_in_the_gpu_worker_and_kept_under_the_models_fields(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """tests/families/stencil.py names its own ceiling (its measure returns 400 Gpoint/s): the runner
    measures it in the GPU worker and every row has its share. A ceilings file of tilegen 0.2 (keyed
    by the model's display string) is read: its copy bandwidth is not measured again."""
    import json

    from gen.families.registry import registry
    from gen.gpu.local import LocalExecutor

    cache = tmp_path / "cache"
    monkeypatch.setenv("TILEGEN_CACHE", str(cache))
    monkeypatch.setenv("TILEGEN_FAMILY_PATH", str(OWN_FAMILIES))
    registry.cache_clear()
    executor = LocalExecutor([0])
    try:
        model = executor.devices()[0].model
    finally:
        executor.close()
    cache.mkdir()
    (cache / "ceilings.json").write_text(json.dumps({str(model): {"copy": 1234.5}}))  # as tilegen 0.2 wrote it
    try:
        rows = run(tmp_path / "stencil", "stencil", {"bx": ["32"], "by": ["4"]}, ["1000x999"])
        rows.update(run(tmp_path / "copy", "copy", {"bounds": ["guard"]}, ["1000x999"]))
    finally:
        registry.cache_clear()
    ok = [row for row in rows.values() if row.status == Status.OK]
    assert {(row.family, row.unit, row.ceiling) for row in ok} == {("stencil", "Gpoint/s", 400.0),
                                                                   ("copy", "GB/s", 1234.5)}
    assert all(row.ceiling_share == pytest.approx(row.throughput / row.ceiling) for row in ok)
    assert json.loads((cache / "ceilings.json").read_text()) == {str(model): {"copy": 1234.5},
                                                                 model.key: {"stencil_points": 400.0}}


@pytest.mark.parametrize("dtype", ["f64", "f32", "f16", "bf16"])
def test_the_cublas_ceilings_product_is_a_times_b_at_an_odd_size(dtype: str) -> None:
    """The GEMM ceilings call cuBLAS through ctypes (no PyTorch import): C = A B of row-major arrays,
    right against float64 at 257 x 257 x 257, C poisoned with NaN first."""
    import numpy as np
    import pycuda.autoprimaryctx  # noqa: F401  (the worker's context, here the test's)

    from gen.gpu.process.ceilings import random_operand
    from gen.gpu.runtime import cublas
    from gen.gpu.runtime.launch import fill, to_device, to_host

    if not cublas.available():
        pytest.skip("cuBLAS's library is not found here (cuda.pathfinder: NVIDIA's wheels or CUDA_HOME)")

    def values(bits: np.ndarray) -> np.ndarray:  # bfloat16's bits widened to float32's
        return (bits.astype(np.uint32) << 16).view(np.float32) if dtype == "bf16" else bits

    n = 257
    a, b = random_operand(dtype, n, 0), random_operand(dtype, n, 1)
    c = to_device(np.empty((n, n), a.dtype))
    fill(c, np.array(0x7FC0 if dtype == "bf16" else np.nan).astype(a.dtype))
    with cublas.product(dtype, to_device(a), to_device(b), c) as product:
        product()
    got = values(to_host(c, np.empty((n, n), a.dtype))).astype(np.float64)
    want = values(a).astype(np.float64) @ values(b).astype(np.float64)
    tolerance = {"f64": 1e-12, "f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}[dtype] * np.abs(want).max()
    assert np.isfinite(got).all() and np.abs(got - want).max() <= tolerance


def _gpu_count() -> int:
    import subprocess

    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU ")
    except OSError:
        return 0


@pytest.mark.skipif(_gpu_count() < 2, reason="needs two GPUs of one host")
def test_tuning_on_two_gpus_shares_the_space_and_never_shares_a_gpu(tmp_path: Path) -> None:
    from gen.commands.tune import TuneOptions, tune
    from gen.store.tuning_db import TuningDB

    db = tmp_path / "t.sqlite"
    (result,) = tune(TuneOptions("matmul", "1024x1024x1024", params={"padding": ["0"], "tile": ["8", "16", "32"]},
                                 strategy="random", budget=9, db=db, run=RunOptions(gpus=[0, 1], timing=QUICK),
                                 progress=False))
    rows = TuningDB(db).rows("matmul")
    assert result.evaluations == 9
    assert {row.provenance["gpu_index"] for row in rows} == {0, 1}  # the space was shared out
    assert len({row.provenance["gpu_model"] for row in rows}) == 1 and all(r.status == Status.OK for r in rows)


def test_tuned_and_matmul_run_in_the_callers_own_context(tmp_path: Path, monkeypatch) -> None:
    import numpy as np

    import gen
    from gen.families import variant_from_name
    from gen.commands.tune import TuneOptions, tune
    from gen.store.tuning_db import TuningDB

    monkeypatch.setenv("TILEGEN_DB", str(tmp_path / "t.sqlite"))
    small = {"bm": ["64", "128"], "bn": ["64"], "bk": ["16"], "wm": ["32"], "wn": ["64"], "vec": ["4"]}
    (result,) = tune(TuneOptions("sgemm", "512x512x512", params=small, strategy="brute", budget=20,
                                 run=RunOptions(timing=QUICK), progress=False, top=2))
    import pycuda.autoprimaryctx  # noqa: F401  (the caller's context)
    import pycuda.gpuarray as gpuarray

    assert gen.tuned("sgemm", 512, 512, 512) == variant_from_name(TuningDB().best(result.problem).name)
    rng = np.random.default_rng(11)
    for dtype, (m, n, k) in ((np.float32, (512, 512, 512)), (np.float32, (301, 203, 101)), (np.float64, (130, 70, 90))):
        a, b = rng.uniform(-1, 1, (m, k)).astype(dtype), rng.uniform(-1, 1, (k, n)).astype(dtype)
        c = gen.matmul(gpuarray.to_gpu(a), gpuarray.to_gpu(b)).get()
        reference = a.astype(np.float64) @ b.astype(np.float64)
        assert np.linalg.norm(c - reference) / np.linalg.norm(reference) < (1e-5 if dtype == np.float32 else 1e-12)
    # seed 004's sub-matrices: views into larger matrices, the result written into a view of a third
    big_a, big_b = rng.uniform(-1, 1, (600, 520)).astype(np.float32), rng.uniform(-1, 1, (520, 700)).astype(np.float32)
    big_c = gpuarray.to_gpu(np.full((640, 720), np.nan, np.float32))
    a_view, b_view = gpuarray.to_gpu(big_a)[100:400, 8:264], gpuarray.to_gpu(big_b)[4:260, 16:528]
    gen.matmul(a_view, b_view, big_c[20:320, 8:520])
    result = big_c.get()
    reference = big_a[100:400, 8:264].astype(np.float64) @ big_b[4:260, 16:528].astype(np.float64)
    assert np.linalg.norm(result[20:320, 8:520] - reference) / np.linalg.norm(reference) < 1e-5
    assert np.isnan(result[:20]).all() and np.isnan(result[20:320, :8]).all()  # nothing outside the view
