"""gen.tune_kernel, option by option, on the fake executor: the kernels compile for real (NVRTC or
nvcc, no GPU), the fake GPU times them. The family made on the fly is read back through the
registry and the renderer, as every other family is."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import gen
from gen.cli.main import main
from gen.compiling.render import render
from gen.core.errors import UsageError
from gen.families import get_family
from gen.call.lookup import tuned

from . import fakes

VECTOR_ADD = """
__global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""
SCALE_2D = """
__constant__ float weights[4];
template <typename T> __device__ T scaled(T x, int k) { return x * weights[k % 4]; }
__global__ void scale(float *out, const float *in, int width, int height) {
    int x = blockIdx.x * block_size_x * tile + threadIdx.x, y = blockIdx.y * block_size_y + threadIdx.y;
    for (int t = 0; t < tile; t++)
        if (x + t * block_size_x < width && y < height) out[y * width + x + t * block_size_x] = scaled(in[y * width + x], t);
}
"""
N = 1000


@pytest.fixture(autouse=True)
def _own_family_path(own_family_path):
    """Every test here adds family folders: they stay out of the tests after it (conftest)."""


def vector_add_call(tmp_path: Path, **options) -> tuple[list[dict], dict]:
    a, b = np.arange(N, dtype=np.float32), np.ones(N, dtype=np.float32)
    options.setdefault("answer", [a + b, None, None, None])
    return gen.tune_kernel("vector_add", options.pop("kernel_source", VECTOR_ADD), N, [np.zeros_like(a), a, b, np.int32(N)],
                           options.pop("tune_params", {"block_size_x": [32, 64, 128]}), db=tmp_path / "t.sqlite",
                           executor=fakes.FakeExecutor(), quiet=True, **options)


def test_other_values_are_another_family_unless_a_cache_file_resumes(tmp_path: Path) -> None:
    """The tuning database recalls what a call measured only for the same inputs and answer (a fixed
    answer is checked again), or where cache= asks to resume whatever the values, as Kernel Tuner's does."""
    first, again = vector_add_call(tmp_path)[1], vector_add_call(tmp_path)[1]
    assert first["family"] == again["family"]
    a, b = np.arange(N, dtype=np.float32), np.full(N, 2.0, dtype=np.float32)
    other = vector_add_call(tmp_path, answer=[a + b, None, None, None])[1]
    assert other["family"] != first["family"]
    resumed = [vector_add_call(tmp_path, answer=[a + b * k, None, None, None], cache=str(tmp_path / f"c{k}.json"))[1]
               for k in (1, 2)]
    assert resumed[0]["family"] == resumed[1]["family"] != first["family"]


def source_of(env: dict, **params) -> str:
    family = get_family(env["family"])
    return render(family.variant({**family.default_variant().params(), **params}))


def test_results_and_env_are_shaped_like_kernel_tuners_and_the_database_has_the_winner(tmp_path: Path) -> None:
    results, env = vector_add_call(tmp_path)
    assert sorted(r["block_size_x"] for r in results) == [32, 64, 128]
    assert all(isinstance(r["time"], float) for r in results)
    best = min(results, key=lambda r: r["time"])
    assert env["best"] == best["variant"] and env["kernel_name"] == "vector_add"
    assert tuned(env["family"], N, db=tmp_path / "t.sqlite", device=fakes.FAKE_DEVICE).name == env["best"]


def test_parameters_block_and_grid_sizes_reach_the_source_as_defines(tmp_path: Path) -> None:
    _, env = vector_add_call(tmp_path)
    source = source_of(env, block_size_x=64)
    for line in ("#define block_size_x 64", "#define grid_size_x 16", "#define block_size_y 1", "#define kernel_tuner 1"):
        assert line in source
    assert "__global__ void vector_add(" in source  # copied as it is; its name is #defined to the variant's
    variant = get_family(env["family"]).variant({"block_size_x": 64})
    assert f"#define vector_add {variant.name}" in source


def test_defines_given_replace_kernel_tuners_own(tmp_path: Path) -> None:
    _, env = vector_add_call(tmp_path, defines={"block_size_x": "block_size_x", "twice": "2 * block_size_x"})
    source = source_of(env, block_size_x=128)
    assert "#define block_size_x 128" in source and "#define twice 2 * 128" in source
    assert "#define grid_size_x" not in source and "#define kernel_tuner" not in source


def test_restrictions_as_strings_and_functions_keep_only_the_configurations_they_allow(tmp_path: Path) -> None:
    results, _ = vector_add_call(tmp_path, tune_params={"block_size_x": [32, 64, 128, 256]},
                                 restrictions=["block_size_x >= 64", lambda p: p["block_size_x"] != 128])
    assert sorted(r["block_size_x"] for r in results) == [64, 256]


def test_grid_div_and_block_size_names_shape_the_launch(tmp_path: Path) -> None:
    width, height = 100, 30
    data = np.ones((height, width), np.float32)
    source = SCALE_2D.replace("block_size_x", "bx").replace("block_size_y", "by")
    _, env = gen.tune_kernel("scale", source, (width, height), [np.zeros_like(data), data, np.int32(width),
                             np.int32(height)], {"bx": [16, 32], "by": [2, 4], "tile": [1, 2]},
                             grid_div_x=["bx", "tile"], grid_div_y=["by"], block_size_names=["bx", "by"],
                             cmem_args={"weights": np.ones(4, np.float32)}, db=tmp_path / "t.sqlite",
                             executor=fakes.FakeExecutor(), quiet=True)
    family = get_family(env["family"])
    variant = family.variant({"bx": 32, "by": 4, "tile": 2})
    launch = family.launch(variant, family.parse_shape("100x30"))
    assert (launch.grid, launch.block) == ((2, 8, 1), (32, 4, 1))
    assert "#define grid_size_x 2" in render(variant) and "#define bx 32" in render(variant)


def test_constant_memory_arrays_are_the_problems_constants(tmp_path: Path) -> None:
    weights = np.array([1, 2, 3, 4], np.float32)
    data = np.ones((3, 8), np.float32)
    _, env = gen.tune_kernel("scale", SCALE_2D, (8, 3), [np.zeros_like(data), data, np.int32(8), np.int32(3)],
                             {"block_size_x": [8], "block_size_y": [1], "tile": [1]}, cmem_args={"weights": weights},
                             db=tmp_path / "t.sqlite", executor=fakes.FakeExecutor(), quiet=True)
    problem = get_family(env["family"]).problem
    constants = problem.constants(problem.parse_shape("8x3"))
    assert list(constants) == ["weights"] and constants["weights"].tolist() == [1, 2, 3, 4]


def test_answer_makes_the_output_and_atol_its_tolerance(tmp_path: Path) -> None:
    _, env = vector_add_call(tmp_path, atol=0.5)
    problem = get_family(env["family"]).problem
    shape = problem.parse_shape(str(N))
    expected = np.arange(N) + 1.0
    assert problem.output.name == "arg0"
    assert np.array_equal(problem.reference({}, shape), expected)
    bound = (0.5 * np.sqrt(N) + 1e-5 * np.linalg.norm(expected)) / np.linalg.norm(expected)
    assert problem.tolerance("f32", shape) == pytest.approx(bound)


def test_verify_judges_the_output_on_the_host_as_kernel_tuner_calls_it(tmp_path: Path) -> None:
    def verify(answer, result, atol=None):
        return bool(np.allclose(answer[0], result[0], atol=atol)) and result[1] is None

    _, env = vector_add_call(tmp_path, verify=verify, atol=0.1)
    problem = get_family(env["family"]).problem
    shape = problem.parse_shape(str(N))
    assert problem.checks_on_host and problem.reference({}, shape) is None  # verify() replaces the check
    right = np.arange(N, dtype=np.float32) + 1
    assert problem.host_check(right, shape) == ""
    assert problem.host_check(right + 1, shape) == "verify() returned False"


def test_without_an_answer_the_output_is_not_checked(tmp_path: Path) -> None:
    _, env = vector_add_call(tmp_path, answer=None)
    problem = get_family(env["family"]).problem
    assert problem.reference({}, problem.parse_shape(str(N))) is None


def test_strategy_and_its_options_bound_the_evaluations(tmp_path: Path) -> None:
    results, env = vector_add_call(tmp_path, tune_params={"block_size_x": [32 * i for i in range(1, 17)]},
                                   strategy="random_sample", strategy_options={"max_fevals": 5})
    assert env["strategy"] == "random" and len(results) <= 6  # the budget, and the default variant for comparison


def test_iterations_set_the_fewest_samples_and_compiler_options_the_flags(tmp_path: Path) -> None:
    needs_scale = "#if SCALE != 2\n#error compiler_options did not arrive\n#endif\n" + VECTOR_ADD
    results, env = vector_add_call(tmp_path, iterations=12, compiler_options=["-DSCALE=2", "--use_fast_math"],
                                   kernel_source=needs_scale)
    assert env["iterations"] == 12 and {r["status"] for r in results} == {"ok"}
    assert get_family(env["family"]).compile_flags[:2] == ("-DSCALE=2", "--use_fast_math")


def test_a_jinja_template_file_gets_the_parameters_as_names(tmp_path: Path) -> None:
    template = tmp_path / "add.cu.j2"
    template.write_text(VECTOR_ADD.replace("block_size_x + threadIdx.x", "{{ block_size_x }} + threadIdx.x"))
    a = np.ones(N, np.float32)
    _, env = gen.tune_kernel("vector_add", str(template), N, [np.zeros_like(a), a, a, np.int32(N)],
                             {"block_size_x": [64, 128]}, lang="cupy", db=tmp_path / "t.sqlite",
                             executor=fakes.FakeExecutor(), quiet=True)
    assert "blockIdx.x * 128 + threadIdx.x" in source_of(env, block_size_x=128)


def test_an_include_beside_the_source_file_is_found(tmp_path: Path) -> None:
    (tmp_path / "helpers.h").write_text("__device__ inline float twice(float x) { return 2 * x; }\n")
    kernel = tmp_path / "add.cu"
    kernel.write_text('#include "helpers.h"\n' + VECTOR_ADD.replace("a[i] + b[i]", "twice(a[i]) + b[i]"))
    a = np.ones(N, np.float32)
    results, _ = gen.tune_kernel("vector_add", str(kernel), N, [np.zeros_like(a), a, a, np.int32(N)],
                                 {"block_size_x": [64]}, answer=[3 * a, None, None, None], db=tmp_path / "t.sqlite",
                                 executor=fakes.FakeExecutor(), quiet=True)
    assert [r["status"] for r in results] == ["ok"]


def test_cache_file_gets_the_results_and_one_of_another_kernel_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "vector_add.json"
    results, _ = vector_add_call(tmp_path, cache=str(cache))
    assert json.loads(cache.read_text())["results"] == json.loads(json.dumps(results))
    cache.write_text(json.dumps({"kernel_name": "other", "tune_params": {}}))
    with pytest.raises(UsageError, match="cache="):
        vector_add_call(tmp_path, cache=str(cache))


@pytest.mark.parametrize("option, value", [("smem_args", {"size": 4}),
                                           ("texmem_args", {}), ("metrics", {"x": len}), ("observers", []),
                                           ("objective", "GFLOP/s"), ("compiler", "nvcc"), ("platform", 1)])
def test_options_tilegen_does_not_support_are_refused_by_name(tmp_path: Path, option: str, value) -> None:
    with pytest.raises(UsageError, match=f"option {option}="):
        vector_add_call(tmp_path, **{option: value})


@pytest.mark.parametrize("options, says", [
    ({"lang": "OpenCL"}, "lang="), ({"strategy": "pso"}, "strategy="),
    ({"strategy_options": {"popsize": 4}}, "popsize"), ({"strategy_options": [1]}, "strategy_options"), ({"tune_params": {"block_size_x": [1.5]}}, "tune_params"),
    ({"answer": [None, None, None, None, None]}, "answer"), ({"restrictions": ["block_size_x >"]}, "restrictions"),
    ({"cmem_args": {"weights": [1, 2]}}, "cmem_args"), ({"iterations": 0}, "iterations"),
    ({"tune_params": {"block_size_x": [2048]}}, "1024 threads"), ({"tune_params": {"name": [1]}}, "'name'"),
    ({"cache": 5}, "cache must be a file name"), ({"cache": ""}, "cache must be a file name"),
    ({"cache": "/no/such/folder/results.json"}, "which is no folder"),
    ({"restrictions": ["block_sise_x > 32"]}, "'block_sise_x > 32' raised NameError"),
    ({"restrictions": [lambda p: p["block_size_x"] // 0 > 1]}, "function 1 raised ZeroDivisionError"),
    ({"cmem_args": {"weights": np.array([1.0, None])}}, r"cmem_args\['weights'\] is an array of object"),
])
def test_bad_values_are_one_line_naming_the_option(tmp_path: Path, options: dict, says: str) -> None:
    with pytest.raises(UsageError, match=says) as raised:
        vector_add_call(tmp_path, **options)
    assert "\n" not in str(raised.value)


def test_block_sizes_not_tuned_take_kernel_tuners_defaults(tmp_path: Path) -> None:
    width, height = 1000, 30
    data = np.ones((height, width), np.float32)
    source = SCALE_2D.replace("block_size_y", "1").replace("* tile", "").replace("t < tile", "t < 1")
    _, env = gen.tune_kernel("scale", source, (width, height), [np.zeros_like(data), data, np.int32(width),
                             np.int32(height)], {"unused": [1, 2]}, cmem_args={"weights": np.ones(4, np.float32)},
                             db=tmp_path / "t.sqlite", executor=fakes.FakeExecutor(), quiet=True)
    family = get_family(env["family"])  # neither block size tuned: 256 x 1, and the grid divides by them
    launch = family.launch(family.variant({"unused": 2}), family.parse_shape("1000x30"))
    assert (launch.grid, launch.block) == ((4, 30, 1), (256, 1, 1))


def test_a_source_file_that_is_not_utf8_is_one_line_naming_the_line(tmp_path: Path) -> None:
    source = tmp_path / "vector_add.cu"
    source.write_bytes(b"// vector_add\n// caf\xe9\n" + VECTOR_ADD.encode())
    with pytest.raises(UsageError, match=r"vector_add.cu line 2 holds the byte 0xe9, which is not UTF-8") as raised:
        vector_add_call(tmp_path, kernel_source=str(source))
    assert "\n" not in str(raised.value)


class Asked:
    """A restriction that lets every configuration through and keeps each it was asked about (a
    class of a module: it pickles by reference, with or without cloudpickle)."""

    def __init__(self) -> None:
        self.seen: list[dict] = []

    def __call__(self, params: dict) -> bool:
        self.seen.append(dict(params))
        return True


def test_without_a_gpu_nothing_is_enumerated_or_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path / "cache"))
    asked = Asked()
    a = np.ones(N, dtype=np.float32)
    with pytest.raises(UsageError, match="tune_kernel needs a GPU: no usable CUDA GPU 0") as raised:
        gen.tune_kernel("vector_add", VECTOR_ADD, N, [np.zeros_like(a), a, a, np.int32(N)],
                        {"block_size_x": [32, 64, 128], "unroll": list(range(50))}, restrictions=[asked],
                        cache=str(tmp_path / "results.json"), db=tmp_path / "t.sqlite",
                        executor=fakes.NoGpuExecutor(), quiet=True)
    assert "\n" not in str(raised.value)
    assert len(asked.seen) == 1  # the first configuration alone, the default variant's: the space is not enumerated
    assert not list(tmp_path.iterdir())  # no family folder, no array, no database, no results file


def test_arrays_are_stored_once_and_the_cache_command_counts_and_clears_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path / "cache"))
    first = vector_add_call(tmp_path)[1]
    other = vector_add_call(tmp_path, tune_params={"block_size_x": [32, 64]})[1]  # another family, the same arrays
    assert first["family_folder"] != other["family_folder"]
    assert not list(Path(first["family_folder"]).glob("*.npy"))
    stored = sorted((tmp_path / "cache" / "kernel_tuner" / "arrays").iterdir())
    assert len(stored) == 4  # c, a, b and the answer, each once for both families
    assert main(["cache"]) == 0
    assert "2 tune_kernel families, 4 arrays" in capsys.readouterr().out
    assert main(["cache", "--clear"]) == 0
    assert "removed 2 tune_kernel families and 4 arrays" in capsys.readouterr().out
    assert not list((tmp_path / "cache" / "kernel_tuner").rglob("*.*"))


@pytest.mark.parametrize("verbose", [True, False])
def test_verbose_prints_each_configuration_and_the_best(tmp_path: Path, capsys, verbose: bool) -> None:
    results, env = vector_add_call(tmp_path, verbose=verbose)
    printed = capsys.readouterr().out.splitlines()
    if not verbose:
        assert printed == []
        return
    assert sorted(printed[:-1]) == sorted(f"block_size_x={r['block_size_x']}, time={r['time']:.4g} ms" for r in results)
    assert printed[-1] == f"best performing configuration: {env['best']}, time={env['best_time']:.4g} ms"
