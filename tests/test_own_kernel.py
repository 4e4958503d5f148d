"""A user's own kernel, end to end, without a GPU: two test families (tests/families/) go through
every command. `stencil` has no dtype parameter, no shared_bytes and a helper module beside it;
`blur` has parameters named like tilegen's own words (smem, dtype, bounds, vec, cache), each with
the family's own meaning. Generic code must learn what it needs from the family, never from a
parameter's name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gen
from gen.cli.main import main
from gen.core.errors import UsageError
from gen.core.results import Row, Status
from gen.families import get_family
from gen.families.space import Space
from gen.call.kernels import Kernel
from gen.families.registry import registry
from gen.store.plots import plot
from gen.store.results_log import read_rows
from gen.commands.tune import TuneOptions, tune
from gen.commands.tune_result import describe

from .conftest import REPO
from .fakes import FAKE_DEVICE, FakeExecutor
from .waits import patient

FAMILIES = REPO / "tests" / "families"


@pytest.fixture
def own_families(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TILEGEN_FAMILY_PATH", str(FAMILIES))
    registry.cache_clear()
    yield FAMILIES
    registry.cache_clear()


@pytest.fixture
def copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test families copied, for a case to break one of them."""
    folder = tmp_path / "families"
    shutil.copytree(FAMILIES, folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("TILEGEN_FAMILY_PATH", str(folder))
    registry.cache_clear()
    yield folder
    registry.cache_clear()


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def run_main(capsys: pytest.CaptureFixture, args: list[str]) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def test_a_family_without_dtype_is_tuned_then_found_by_best_and_tuned(own_families: Path, tmp_path: Path, capsys,
                                                                       compile_options) -> None:
    db = tmp_path / "t.sqlite"
    (result,) = tune(TuneOptions("stencil", "512x512", params={"bx": ["32", "64"], "rows": ["1"]}, strategy="brute",
                                 db=db, progress=False, top=2), FakeExecutor())
    assert result.problem.dtype == "f32"  # the element type the family declares, not ''
    code, out, err = run_main(capsys, ["best", "stencil", "--size", "512x512", "--gpu-model", "Fake", "--db", str(db)])
    assert code == 0 and out.strip() == result.winner.name and "the exact shape on this GPU" in err
    assert gen.tuned("stencil", 512, 512, db=db, device=FAKE_DEVICE).name == result.winner.name


def test_a_dtype_parameter_of_a_plugin_is_its_element_type_everywhere(own_families: Path, tmp_path: Path, capsys,
                                                                      compile_options) -> None:
    db = tmp_path / "t.sqlite"
    (result,) = tune(TuneOptions("blur", "64x64", params={"dtype": ["f64"], "cache": ["plain"], "vec": ["1"]},
                                 strategy="brute", db=db, progress=False, top=1), FakeExecutor())
    assert result.problem.dtype == "f64"
    code, out, err = run_main(capsys, ["best", "blur", "--size", "64x64", "--dtype", "f64", "--gpu-model", "Fake",
                                       "--db", str(db)])
    assert code == 0 and out.strip() == result.winner.name and "exact shape" in err
    code, out, err = run_main(capsys, ["best", "blur", "--size", "64x64", "--gpu-model", "Fake", "--db", str(db)])
    assert out.strip() == "blur_f32_s0_check_v1_plain" and "safe default" in err  # f32 was never tuned


def test_a_parameter_named_smem_means_what_its_family_says(own_families: Path, tmp_path: Path, capsys,
                                                           compile_options) -> None:
    out = tmp_path / "run"
    code, printed, err = run_main(capsys, ["compile", "blur", "-p", "smem=0,1", "-p", "bounds=check", "-p", "vec=1",
                                           "-p", "cache=plain", "--arch", "sm_90", "--out", str(out)])
    assert code == 0, err
    rows = {row.params["smem"]: row for row in read_rows(out / "results.jsonl")}
    staged = get_family("blur").variant({"smem": "1"})
    assert rows[1].static_shared_bytes == staged.tile_bytes > 0 and rows[1].dynamic_shared_bytes == 0
    assert rows[0].static_shared_bytes == 0 and rows[0].dynamic_shared_bytes == 0


def _measured_rows(family_name: str, shape: str, params: dict[str, list[str]]) -> list[Row]:
    """A correct, timed row of every variant of a space."""
    family = get_family(family_name)
    variants = Space.from_options(family, [f"{k}={','.join(v)}" for k, v in params.items()]).expand().valid
    return [Row(v.name, family_name, v.params(), Status.OK, shape=shape, median_ms=1.0 + n, error=1e-7,
                throughput=1.0 / (1 + n), unit="GB/s") for n, v in enumerate(variants)]


def _png_width(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[16:20], "big")  # the IHDR chunk's width


def test_a_plot_splits_its_heatmaps_as_the_family_says_not_by_a_parameters_name(own_families: Path,
                                                                                 tmp_path: Path) -> None:
    """blur has a parameter named bounds, with its own meaning: one heatmap; the built-ins split
    theirs by their bounds parameter; stencil has no heatmap axes: its plot is the convergence alone."""
    pytest.importorskip("matplotlib")
    trace = {("stencil", "64x64", ""): {"brute": [[2.0, 1.0]]}}
    [stencil] = plot(_measured_rows("stencil", "64x64", {"bx": ["32", "64"], "by": ["4"]}), trace,
                     tmp_path / "stencil.png")
    one_panel = _png_width(stencil)
    with pytest.raises(UsageError, match="nothing to plot"):
        plot(_measured_rows("stencil", "64x64", {"bx": ["32", "64"], "by": ["4"]}), {}, tmp_path / "no.png")
    blur = _measured_rows("blur", "64x64", {"dtype": ["f32"], "smem": ["0", "1"], "bounds": ["check", "trust"],
                                            "vec": ["1", "2"], "cache": ["plain"]})
    assert [_png_width(path) for path in plot(blur, {}, tmp_path / "blur.png")] == [one_panel]
    matmul = _measured_rows("matmul", "64x64x64", {"tile": ["8", "16"], "padding": ["0", "1"],
                                                   "bounds": ["none", "guard"], "sync": ["both"]})
    assert [_png_width(path) for path in plot(matmul, {}, tmp_path / "matmul.png")] == [2 * one_panel]


def test_a_variant_without_shared_bytes_sweeps_without_a_gpu(tmp_path: Path, compile_options) -> None:
    """A subprocess with a deadline: a compile thread that died used to leave the sweep waiting for ever."""
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "gen", "--family-path", str(FAMILIES), "sweep", "stencil", "-p",
                           "bx=32", "-p", "by=1,2", "-p", "rows=1", "--size", "37x45", "--arch", "sm_90", "--out",
                           str(out)], capture_output=True, text=True, timeout=patient(120),
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    assert {row.status for row in read_rows(out / "results.jsonl")} == {"compiled"}


def test_a_family_module_imports_the_helpers_beside_it(own_families: Path, capsys) -> None:
    code, out, err = run_main(capsys, ["list", "stencil"])
    assert code == 0 and "stencil_x{bx}_y{by}_r{rows}" in out and "warning" not in err
    family = get_family("stencil")
    shape = family.parse_shape("5x6")
    grid = (np.arange(30.0) ** 2).reshape(5, 6)
    reference = family.problem.reference({"grid": grid}, shape)
    assert reference[2, 3] == 4 * 225 - 81 - 441 - 196 - 256 and reference[0, 0] == 0 - 36 - 1


def test_the_family_path_is_taken_after_the_command_too(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    # --family-path sets it: put back afterwards (setenv, not delenv: delenv of an unset variable
    # records nothing to undo, and the folders leaked into every later test)
    monkeypatch.setenv("TILEGEN_FAMILY_PATH", "")
    registry.cache_clear()
    try:
        code, out, err = run_main(capsys, ["list", "--family-path", str(FAMILIES)])
        assert code == 0 and "\nstencil " in out and "\nblur " in out
        code, out, err = run_main(capsys, ["--family-path", str(REPO / "docs" / "examples" / "reduction"), "list",
                                           "--family-path", str(FAMILIES)])
        assert code == 0 and "\nreduce " in out and "\nstencil " in out, err  # before and after: both
    finally:
        registry.cache_clear()


def test_numpy_arrays_given_to_a_kernel_need_pycuda_not_gpudata(own_families: Path) -> None:
    pytest.importorskip("numpy")
    if __import__("importlib").util.find_spec("pycuda") is not None:
        pytest.skip("pycuda is installed: the GPU test runs NumPy arrays for real")
    family = get_family("stencil")
    kernel = Kernel(family, family.default_variant(), family.parse_shape("37x45"))
    grid, out = np.ones((37, 45), np.float32), np.empty((37, 45), np.float32)
    with pytest.raises(UsageError, match="NumPy arrays are copied to the GPU through pycuda"):
        kernel(grid=grid, out=out)
    with pytest.raises(UsageError, match="grid must be a PyTorch tensor, a CuPy, Numba or JAX array .*; got list"):
        kernel(grid=[[1.0]], out=out)
    with pytest.raises(UsageError, match=r"out of stencil at 37x45 must be \(37, 45\)"):
        kernel(grid=grid, out=np.empty((45, 37), np.float32))


# ---- a plugin's mistakes are found when it loads, over its whole default space ------------------------

LOAD_MISTAKES = {
    "an undefined name in one branch of the template": (
        "stencil.cu.j2", "constexpr int ROWS = {{ v.rows }};", "constexpr int ROWS = {{ rows }};",
        ["stencil.cu.j2:10: {{ rows }} is not defined; the variant is `v`: write {{ v.rows }}"]),
    "a misspelt attribute of v": (
        "stencil.cu.j2", "__launch_bounds__({{ v.bx * v.by }})", "__launch_bounds__({{ v.bx * v.bz }})",
        ["stencil.cu.j2:7: v.bz: StencilVariant has no attribute 'bz'; did you mean v.by?"]),
    "check_combination raising for one variant": (
        "stencil.py", "        threads = self.bx * self.by\n",
        "        threads = self.bx * self.by\n        if self.rows == 4:\n            self.depth\n",
        ["stencil.py: stencil_x8_y1_r4: check_combination() raised AttributeError", "require(condition, reason)"]),
    "launch raising for one variant": (
        "stencil.py", "block=(variant.bx, variant.by))", "block=(variant.bx, 64 // (64 - variant.bx)))",
        ["stencil.py: stencil_x64_y1_r1: launch() raised ZeroDivisionError", "fix launch() for this variant"]),
    "a launch over the limits for one variant": (
        "stencil.py", "block=(variant.bx, variant.by))", "block=(variant.bx, variant.by * variant.rows))",
        ["stencil.py: stencil's launch() of stencil_x64_y8_r4 at 37x45: a block of 64 x 32 x 1 gives 2048 threads",
         "add a constraint"]),
}


@pytest.mark.parametrize("mistake", sorted(LOAD_MISTAKES))
def test_a_plugins_mistake_anywhere_in_its_space_is_one_line_when_it_loads(mistake: str, copied: Path,
                                                                          capsys) -> None:
    file, old, new, fragments = LOAD_MISTAKES[mistake]
    edit(copied / file, old, new)
    code, out, err = run_main(capsys, ["list"])
    assert code == 0 and "\nmatmul " in out and "\nblur " in out  # the others keep working
    warnings = [line for line in err.splitlines() if "stencil" in line]
    assert len(warnings) == 1 and all(fragment in warnings[0] for fragment in fragments), err
    code, out, err = run_main(capsys, ["render", "stencil"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert all(fragment in err for fragment in fragments), err


def test_an_error_in_a_compile_thread_ends_the_command_with_one_line(copied: Path, capsys, compile_options) -> None:
    edit(copied / "blur.cu.j2", "constexpr int BX = 32, BY = 8, VEC = {{ v.vec }};",
         "constexpr int BX = 32, BY = 8, VEC = {{ 2 // (2 - v.vec) }};")  # vec=2 divides by zero
    code, out, err = run_main(capsys, ["compile", "blur", "-p", "vec=1,2", "-p", "smem=0", "--arch", "sm_90"])
    said = err.strip().splitlines()[-1]
    assert code == 2 and said.startswith("tilegen: error: ") and "Traceback" not in err, err
    assert "blur.cu.j2:13: ZeroDivisionError" in said and "in a family's own code" in said


# ---- tune does what its user means ----------------------------------------------------------------------

def test_brute_force_covers_the_whole_space_unless_given_a_budget(tmp_path: Path, compile_options) -> None:
    from gen.commands.tune import preview

    space = {"tile": ["8", "16", "32"], "padding": ["0", "1"], "bounds": ["guard"], "sync": ["both"]}
    whole = TuneOptions("matmul", "64x64x64", params=space, strategy="brute", db=tmp_path / "a.sqlite", top=1,
                        progress=False)
    (result,) = tune(whole, FakeExecutor())
    assert result.evaluations == result.space == 6 and result.covered_space
    assert "the best of the whole space: all 6 variants evaluated" in describe(result)
    (part,) = tune(TuneOptions(**{**whole.__dict__, "budget": 4, "db": tmp_path / "b.sqlite"}), FakeExecutor())
    assert part.evaluations == 4 and not part.covered_space
    assert "a subset of the 6 variants (brute force without --budget covers the whole space)" in \
        describe(part)
    assert "evaluates 3,168 of them" in preview(TuneOptions("sgemm", "2048x2048x2048", strategy="brute"))
    assert "evaluates 100 of them" in preview(TuneOptions("sgemm", "2048x2048x2048", strategy="bayes"))


def test_a_dry_run_says_what_the_budget_will_run(own_families: Path, capsys) -> None:
    code, out, err = run_main(capsys, ["tune", "stencil", "--size", "512x512", "--dry-run", "--budget", "30"])
    assert code == 0 and "39 variants to search by portfolio; the budget evaluates 30 of them" in out


def test_a_shape_the_default_space_cannot_run_is_tuned_through_the_familys_adaptations(
        tmp_path: Path, capsys, compile_options) -> None:
    from gen.commands.tune import candidates

    code, out, err = run_main(capsys, ["tune", "sgemm", "--size", "2000x7000x3000", "--dry-run"])
    assert code == 0 and "; 3,168 to run (3,168 of them adapted: bounds=guard), 12,384 not run (51 reasons)" in out
    assert "3,168 variants to search by portfolio" in out and out.count("to run") == 1  # one account
    family = get_family("sgemm")
    chosen = candidates(family, family.parse_shape("2000x7000x3000"), TuneOptions("sgemm", "2000x7000x3000"))
    assert chosen.plan.adapted == 3168 and {v.bounds for v in chosen.variants} == {"guard"}
    (result,) = tune(TuneOptions("matmul", "100x100x100", params={"bounds": ["none"], "tile": ["8", "16"],
                                                                  "padding": ["0"], "sync": ["both"]},
                                 strategy="brute", db=tmp_path / "t.sqlite", progress=False, top=1), FakeExecutor())
    assert result.winner.params["bounds"] == "guard" and result.evaluations == 2
