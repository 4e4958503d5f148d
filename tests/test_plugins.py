"""Bring your own kernel: the example family outside gen/ works through every command without a
GPU, entry-point plugins are found, and a bad plugin is one clear line while the others work."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from gen.cli.main import main
from gen.compiling.pool import compile_variants
from gen.families import get_family
from gen.families.registry import add_family_path, registry
from gen.families.space import Space

from .conftest import REPO

EXAMPLE = REPO / "docs" / "examples" / "reduction"


def tilegen(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    environment = dict(os.environ, CUDA_VISIBLE_DEVICES="", **(env or {}))
    environment.pop("TILEGEN_FAMILY_PATH", None)
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "gen", *args], capture_output=True, text=True, env=environment,
                          cwd=cwd)


def one_line_error(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("tilegen: error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in done.stderr, (fragment, done.stderr)


@pytest.fixture
def copied(tmp_path: Path) -> Path:
    """The example family copied outside the repository, as a user would."""
    folder = tmp_path / "my-family"
    shutil.copytree(EXAMPLE, folder)
    return folder


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def test_the_example_family_lists_renders_and_emits_from_its_own_folder(copied: Path, tmp_path: Path) -> None:
    listed = tilegen("--family-path", str(copied), "list")
    assert listed.returncode == 0 and "reduce" in listed.stdout and "RxN" in listed.stdout
    detail = tilegen("--family-path", str(copied), "list", "reduce")
    assert "names: reduce_{dtype}_b{block}_i{items}_{method}_v{vec}" in detail.stdout
    assert "default space: 64 valid points of 64" in detail.stdout
    source = tilegen("render", "reduce", "-p", "method=tree", "-p", "block=128", env={"TILEGEN_FAMILY_PATH": str(copied)})
    assert source.returncode == 0, source.stderr
    assert "void __launch_bounds__(128) reduce_f32_b128_i4_tree_v1(" in source.stdout
    assert "const float* __restrict__ data, float* __restrict__ sums,\n    int rows, int n)" in source.stdout
    assert "template  reduce.cu.j2 (sha256 " in source.stdout
    assert (f"tilegen --family-path {copied.resolve()} render reduce -p dtype=f32 -p block=128 -p items=4 "
            f"-p method=tree -p vec=1") in source.stdout  # the banner's command finds the family again
    out = tmp_path / "emitted"
    emitted = tilegen("--family-path", str(copied), "emit", "reduce", "--out", str(out))
    assert emitted.returncode == 0, emitted.stderr
    assert sorted(p.name for p in (out / "reduce").iterdir()) == sorted(
        f"reduce_{d}_b256_i{i}_{m}_v1.cu" for d in ("f32",) for i in (1, 4) for m in ("shuffle", "tree"))


def test_an_edited_copy_sweeps_without_a_gpu(copied: Path, tmp_path: Path, compile_options) -> None:
    """A user's edits to the template and the parameters reach the compiled rows."""
    edit(copied / "reduce.cu.j2", "const int tid = threadIdx.x;", "const int tid = threadIdx.x;  // my edit")
    edit(copied / "reduce.py", "space=(128, 256, 512, 1024), emitted=(256,)", "space=(64, 128), emitted=(64,)")
    out = tmp_path / "run"
    done = tilegen("--family-path", str(copied), "sweep", "reduce", "-p", "items=2", "-p", "method=shuffle",
                   "--size", "37x1001", "--size", "64x1024", "--out", str(out), "--arch", "sm_90")
    assert done.returncode == 0, done.stderr
    assert "no kernel was run:" in done.stdout
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by_status: dict[str, list] = {}
    for row in rows:
        by_status.setdefault(row["status"], []).append(row)
    # blocks 64 and 128, vec 1 and 4, at two sizes: vec=4 refuses N = 1001 (one summary row for that reason)
    assert len(by_status["compiled"]) == 2 * 2 + 2 and sum(r["skipped_count"] for r in by_status["skipped"]) == 2
    assert all("N to be a multiple of 4" in r["message"] for r in by_status["skipped"])
    assert all(r["registers"] > 0 and r["provenance"]["template_hash"] for r in by_status["compiled"])
    rendered = tilegen("--family-path", str(copied), "render", "reduce", "-p", "block=64")
    assert "// my edit" in rendered.stdout


def test_the_example_passes_the_cpu_side_checks_and_compiles(compile_options, monkeypatch) -> None:
    monkeypatch.setenv("TILEGEN_FAMILY_PATH", str(EXAMPLE))
    registry.cache_clear()
    try:
        family = get_family("reduce")
        assert family.source == str(EXAMPLE / "reduce.py") and not registry().problems
        problem = family.problem
        shape = family.parse_shape("37x1001")
        inputs = {n: a.astype("float64") for n, a in problem.random_inputs("f32", shape, seed=3).items()}
        assert inputs["data"].shape == (37, 1001) and problem.reference(inputs, shape).shape == (37,)
        assert family.runnable(family.variant({"vec": "4"}), shape) == family.variant({"vec": "1"})
        variants = Space.emitted(family).expand().valid + Space.default(family, {"vec": ["4"], "block": ["1024"]}).expand().valid
        compiled = compile_variants(variants, compile_options)
        assert all(c.ok and c.resources.spill_bytes == 0 for c in compiled), [c.log for c in compiled if not c.ok]
        tree = next(c for c in compiled if c.variant.method == "tree" and c.variant.block == 1024)
        assert tree.resources.static_shared_bytes == tree.variant.shared_bytes == 1024 * 4
    finally:
        registry.cache_clear()


def test_tune_and_best_need_a_gpu_or_a_named_model_for_plugins_too(copied: Path, tmp_path: Path) -> None:
    one_line_error(tilegen("--family-path", str(copied), "tune", "reduce", "--size", "64x1024", "--budget", "2",
                           "--db", str(tmp_path / "t.sqlite")), "tune needs a GPU")


ENTRY_POINT_MODULE = '''
from dataclasses import dataclass
from typing import ClassVar
import reduce as example

@dataclass(frozen=True, order=True)
class RowSumVariant(example.ReduceVariant):
    family: ClassVar[str] = "rowsum"

class RowSum(example.Reduce):
    name = "rowsum"
    variant_type = RowSumVariant
'''


def test_an_installed_package_is_found_through_its_entry_point(tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site)
    (site / "myfamilies.py").write_text(ENTRY_POINT_MODULE)
    dist = site / "myfamilies-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myfamilies\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[tilegen.families]\nrowsum = myfamilies:RowSum\n")
    listed = tilegen("list", env={"PYTHONPATH": os.pathsep.join([str(site), str(REPO)])})
    assert listed.returncode == 0, listed.stderr
    assert "\nrowsum " in listed.stdout and "\nreduce " not in listed.stdout  # only what the entry point names
    rendered = tilegen("render", "rowsum", env={"PYTHONPATH": os.pathsep.join([str(site), str(REPO)])})
    assert rendered.returncode == 0 and "rowsum_f32_b256_i4_shuffle_v1(" in rendered.stdout
    assert "//   tilegen render rowsum -p " in rendered.stdout  # installed: found without a path


# ---- bad plugins: one line naming the file and the fix; the other families keep working ----------

BAD_PLUGINS = {
    "does not import": ("reduce.py", "import numpy as np", "import numpy as np\nimport no_such_module",
                        ["reduce.py: cannot be imported (ModuleNotFoundError: No module named 'no_such_module')"]),
    "undefined template variable": ("reduce.cu.j2", "constexpr int ITEMS = {{ v.items }};",
                                    "constexpr int ITEMS = {{ v.itemz }};", ["reduce.cu.j2:", "itemz"]),
    "clashing parameter": ("reduce.py", "    items: int = integer(", "    name: int = integer(",
                           ["reduce.py: parameter 'name' of reduce clashes with an attribute every variant has"]),
    "reference of the wrong shape": ("reduce.py", 'return inputs["data"].sum(axis=1)', 'return inputs["data"].sum(axis=0)',
                                     ["reduce.py: reduce's reference() returns an array of shape (1001,)",
                                      "output region of sums is (37,)"]),
    "an empty space": ("reduce.py", 'space=("shuffle", "tree")', "space=()",
                       ["reduce.py: parameter 'method' of reduce has an empty space (space=()); give it at least one "
                        "value"]),
    "None in a space": ("reduce.py", "space=(1, 2, 4, 8)", "space=(None,)",
                        ["reduce.py: parameter 'items' of reduce: its space holds None, which it does not allow "
                         "(items must be an integer, got None); fix the space"]),
    "an architecture that is none": ("reduce.py", '    heatmap_axes = ("block", "items")',
                                     '    heatmap_axes = ("block", "items")\n    target_arch = "90a"',
                                     ["reduce.py: reduce.target_arch '90a' must be an architecture like 'sm_90a'"]),
    "a fallback without an architecture": ("reduce.py", '    heatmap_axes = ("block", "items")',
                                           '    heatmap_axes = ("block", "items")\n    fallback = "copy"',
                                           ["reduce.py: reduce.fallback 'copy' must name another family, and only "
                                            "with a target_arch"]),
    "launch over the limits": ("reduce.py", "block=(variant.block,)", "block=(variant.block * 8,)",
                               ["reduce.py: reduce's launch() of reduce_f32_b256_i1_shuffle_v1 at 37x1001", "a block of 2048 x 1 x 1 gives "
                                "2048 threads per block; the CUDA limit is 1024", "add a constraint"]),
}


@pytest.mark.parametrize("case", sorted(BAD_PLUGINS))
def test_a_bad_plugin_is_one_clear_line_and_the_other_families_work(case: str, copied: Path) -> None:
    file, old, new, fragments = BAD_PLUGINS[case]
    edit(copied / file, old, new)
    path = ("--family-path", str(copied))
    one_line_error(tilegen(*path, "render", "reduce"), *fragments)
    assert tilegen(*path, "render", "matmul", "-p", "tile=8").returncode == 0
    listed = tilegen(*path, "list")
    assert listed.returncode == 0 and "matmul" in listed.stdout
    if case != "undefined template variable":  # that one is found when rendering
        assert "tilegen: warning: " in listed.stderr and str(copied) in listed.stderr


def test_two_families_of_one_name_are_refused_naming_both_files(copied: Path, tmp_path: Path) -> None:
    second = tmp_path / "second"
    shutil.copytree(copied, second)
    one_line_error(tilegen("--family-path", str(copied), "--family-path", str(second), "render", "reduce"),
                   "family 'reduce' is defined twice", str(copied / "reduce.py"), str(second / "reduce.py"),
                   "rename one")
    assert tilegen("--family-path", str(copied), "--family-path", str(second), "render", "copy").returncode == 0
    listed = tilegen("--family-path", str(copied), "--family-path", str(second), "list")
    assert listed.returncode == 0 and "\nreduce " not in listed.stdout and "copy" in listed.stdout
    assert "warning: family 'reduce' is defined twice" in listed.stderr and "renamed" in listed.stderr


def test_a_family_path_that_is_not_a_folder_is_refused(tmp_path: Path) -> None:
    one_line_error(tilegen("--family-path", str(tmp_path / "nowhere"), "list"), "nowhere: no such folder")


def test_load_families_reaches_the_registry(copied: Path, monkeypatch) -> None:
    monkeypatch.delenv("TILEGEN_FAMILY_PATH", raising=False)
    try:
        add_family_path(copied)
        assert get_family("reduce").source == str(copied / "reduce.py")
        assert os.environ["TILEGEN_FAMILY_PATH"] == str(copied.resolve())  # workers started later inherit it
    finally:
        registry.cache_clear()


def test_a_template_broken_and_fixed_in_one_process_renders_again(copied: Path, monkeypatch) -> None:
    from gen.compiling.render import render
    from gen.core.errors import TemplateProblem

    monkeypatch.delenv("TILEGEN_FAMILY_PATH", raising=False)
    try:
        add_family_path(copied)
        variant = get_family("reduce").default_variant()
        template = copied / "reduce.cu.j2"
        working = template.read_text()
        first = render(variant)
        template.write_text(working + "{% if v.block %}\n")  # never closed
        with pytest.raises(TemplateProblem, match="reduce.cu.j2"):
            render(variant)
        template.write_text(working)  # fixed while the process runs (a notebook, a worker)
        assert render(variant) == first
    finally:
        registry.cache_clear()


def test_a_new_familys_variants_rendered_by_many_threads_at_once_are_each_rendered_whole(copied: Path,
                                                                                        monkeypatch) -> None:
    """A compile pool's threads all start on a template no thread has loaded yet (one loads it, the others wait)."""
    from gen.compiling.render import render
    from gen.families.space import Space

    monkeypatch.delenv("TILEGEN_FAMILY_PATH", raising=False)
    try:
        add_family_path(copied)
        variants = Space.default(get_family("reduce")).expand(None).valid[:8]
        start, sources = threading.Barrier(len(variants)), {}

        def rendered(variant) -> None:
            start.wait()
            sources[variant] = render(variant)

        threads = [threading.Thread(target=rendered, args=(variant,)) for variant in variants]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(set(sources.values())) == len(variants) > 1
        assert all(sources[variant] == render(variant) for variant in variants)
    finally:
        registry.cache_clear()


@pytest.fixture
def plugin_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A family-path folder for in-process commands: --family-path changes the environment and
    the registry, both put back afterwards."""
    monkeypatch.delenv("TILEGEN_FAMILY_PATH", raising=False)
    folder = tmp_path / "plugins"
    folder.mkdir()
    yield folder
    registry.cache_clear()


def test_a_module_that_exits_when_imported_is_left_out_and_every_command_works(
        plugin_folder: Path, capsys: pytest.CaptureFixture) -> None:
    (plugin_folder / "quits.py").write_text("import sys\nfrom gen.api import Family\nsys.exit(0)\n\n\n"
                                           "class Quits(Family):\n    pass\n")
    assert main(["--family-path", str(plugin_folder), "list"]) == 0
    out, err = capsys.readouterr()
    assert "\nmatmul " in out and "\ntranspose " in out  # the built-ins are listed
    assert f"tilegen: warning: {plugin_folder.resolve() / 'quits.py'}: cannot be imported" in err
    assert "it calls sys.exit(0)" in err


def test_what_a_plugin_prints_when_imported_stays_out_of_rendered_source(
        plugin_folder: Path, capsys: pytest.CaptureFixture) -> None:
    (plugin_folder / "chatty.py").write_text("import gen.api\nprint('chatty plugin loaded')\n\n\n"
                                             "class Chatty(gen.api.Family):\n    pass\n")
    assert main(["--family-path", str(plugin_folder), "render", "matmul", "-p", "tile=8"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("// Generated by tilegen") and "chatty" not in out
    assert "chatty plugin loaded" in err


# ---- what a family folder runs, and its templates checked at load (issue 29) ----------------------------

def test_a_script_kept_beside_a_family_is_never_run(copied: Path, tmp_path: Path) -> None:
    (copied / "make_plots.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\n")
    (copied / "broken_notes.py").write_text("notes: (\n")  # imported: its error is said
    for command in (["list"], ["render", "reduce"], ["list", "reduce"]):
        done = tilegen("--family-path", str(copied), *command)
        assert done.returncode == 0 and "reduce" in done.stdout, done.stderr
    assert not (tmp_path / "ran").exists()
    assert f"tilegen: warning: {copied / 'broken_notes.py'}: cannot be imported (SyntaxError" in done.stderr


TEMPLATE_ERRORS = {
    "a syntax error": ({}, "{% if v.vec == 4 %}", "{% if v.vec == 4 %", "reduce.cu.j2:24: expected token 'end of statement block'"),
    "a typo in an included template": ({"part.cu.j2": "// {{ vec }}\n"}, "// Launch:", "{% include 'part.cu.j2' %}\n"
                                       "// Launch:", "part.cu.j2:1: {{ vec }} is not defined; the variant is `v`"),
}


@pytest.mark.parametrize("case", sorted(TEMPLATE_ERRORS))
def test_a_template_error_is_found_at_load_with_file_and_line_and_its_family_left_out(
        copied: Path, tmp_path: Path, case: str, compile_options) -> None:
    files, old, new, said = TEMPLATE_ERRORS[case]
    for name, text in files.items():
        (copied / name).write_text(text)
    edit(copied / "reduce.cu.j2", old, new)
    path = ("--family-path", str(copied))
    listed = tilegen(*path, "list")
    assert listed.returncode == 0 and "\nmatmul " in listed.stdout and "\nreduce " not in listed.stdout
    assert listed.stderr.count("tilegen: warning: ") == 1 and said in listed.stderr, listed.stderr
    for command in (["list", "reduce"], ["render", "reduce"], ["compile", "reduce", "--arch", "sm_90"],
                    ["sweep", "reduce", "--out", str(tmp_path / "out"), "--arch", "sm_90"]):
        done = tilegen(*path, *command)  # compile and sweep say first what they will do
        errors = [line for line in done.stderr.splitlines() if line.startswith("tilegen: error: ")]
        assert done.returncode == 2 and len(errors) == 1 and done.stderr.rstrip().endswith(errors[0]), done.stderr
        assert said in errors[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_module_that_raises_keyboard_interrupt_is_left_out_not_taken_for_a_stop(
        plugin_folder: Path, capsys: pytest.CaptureFixture) -> None:
    (plugin_folder / "grumpy.py").write_text("from gen.api import Family\nraise KeyboardInterrupt\n\n\n"
                                             "class Grumpy(Family):\n    pass\n")
    assert main(["--family-path", str(plugin_folder), "list"]) == 0
    out, err = capsys.readouterr()
    assert "\nmatmul " in out and "tilegen: interrupted" not in err
    assert f"tilegen: warning: {plugin_folder.resolve() / 'grumpy.py'}: cannot be imported (PluginExited: it raises " \
           f"KeyboardInterrupt, though no one interrupted it)" in err


def test_a_family_path_with_a_tilde_or_through_a_link_is_the_folder_it_names(
        copied: Path, tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(copied)
    for environment in ({"TILEGEN_FAMILY_PATH": "~/my-family", "HOME": str(tmp_path)},
                        {"TILEGEN_FAMILY_PATH": str(tmp_path / "link")}):
        done = tilegen("list", env=environment)
        assert done.returncode == 0 and "\nreduce " in done.stdout and not done.stderr, done.stderr
    done = tilegen("--family-path", str(tmp_path / "link"), "list", "reduce")
    assert done.returncode == 0 and f"defined in: {copied / 'reduce.py'}" in done.stdout, done.stdout + done.stderr


SCALE = 'Scalar("n"), Scalar("scale", ctype="float"))'  # a float scalar no shape has: scalars() gives it


@pytest.mark.parametrize("scale, loads", [('"scale": 0.5', True), ("", False)], ids=["given", "left-out"])
def test_a_scalar_that_is_no_shape_dimension_loads_when_scalars_gives_it(copied: Path, scale: str, loads: bool) -> None:
    module = copied / "reduce.py"
    edit(module, 'Scalar("n"))', SCALE)
    edit(module, "    def reference(", f"    def scalars(self, shape):\n        return {{\"rows\": shape.r, \"n\": shape.n, "
                                        f"{scale}}}\n\n    def reference(")
    listed = tilegen("--family-path", str(copied), "list", "reduce")
    if loads:
        assert listed.returncode == 0 and listed.stderr == "" and "RxN" in listed.stdout, listed.stderr
    else:  # left out, saying why
        assert listed.returncode == 2 and "reduce.py: reduce's scalars() gives no value for scale" in listed.stderr
