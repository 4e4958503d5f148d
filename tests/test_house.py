"""The house rules (tests/house.py) hold for gen/, and the check finds each kind of break."""
import shutil
from pathlib import Path

import pytest

from tests.house import check

GEN = Path(__file__).resolve().parent.parent / "gen"


def test_gen_keeps_the_house_rules():
    assert check(GEN) == []


@pytest.fixture
def scratch(tmp_path):
    """A copy of gen/ to break on purpose."""
    copy = tmp_path / "gen"
    shutil.copytree(GEN, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_a_cycle_through_imports_inside_functions_is_found(scratch):
    (scratch / "core" / "ping.py").write_text("def ping():\n    from gen.core import pong\n")
    (scratch / "core" / "pong.py").write_text("def pong():\n    from . import ping\n")
    assert check(scratch) == ["import cycle: gen.core.ping -> gen.core.pong"]


def test_an_upward_import_is_found(scratch):
    (scratch / "families" / "reach.py").write_text("import os\n\n\ndef reach():\n    from ..gpu.runtime import launch\n")
    findings = check(scratch)
    assert len(findings) == 1
    assert ("families/reach.py:5: families imports gen.gpu.runtime.launch from gpu/runtime, against the layer order"
            in findings[0])


def test_the_cuda_runtime_does_not_reach_up_into_the_gpu_worker(scratch):
    (scratch / "gpu" / "runtime" / "reach.py").write_text("from ..process.jobs import Job\n")
    assert [f.split(": ", 1)[1] for f in check(scratch)] == [
        "gpu/runtime imports gen.gpu.process.jobs from gpu/process, against the layer order"]


def test_a_module_at_the_package_root_beside_the_face_is_found(scratch):
    (scratch / "helpers.py").write_text("from .core.errors import UsageError\n")
    assert [f.split("helpers.py", 1)[1] for f in check(scratch)] == [
        ": the package root holds only the face (__init__, __main__, api, torch_ops); move it onto a floor"]


def test_the_compile_layer_and_gpu_do_not_import_each_other(scratch):
    (scratch / "gpu" / "side.py").write_text("from gen.compiling.render import render\n")
    assert [f.split(": ", 1)[1] for f in check(scratch)] == [
        "gpu imports gen.compiling.render from compiling, against the layer order"]


def test_a_third_party_package_outside_its_layer_is_found(scratch):
    (scratch / "evaluate" / "draw.py").write_text("import jinja2\nimport numpy\nfrom cuda.bindings import driver\n")
    findings = [f.split(": ", 1)[1] for f in check(scratch)]
    assert findings == ["jinja2 is imported in evaluate; only compiling may import it",
                        "cuda.bindings.driver is imported in evaluate; only gpu/runtime may import it"]


def test_the_cuda_bindings_are_imported_only_by_the_cuda_runtime(scratch):
    (scratch / "gpu" / "process" / "bind.py").write_text("import pycuda.driver as cuda\nfrom cuda import bindings\n")
    (scratch / "call" / "bind.py").write_text("def bind():\n    from cuda.bindings.driver import cuInit\n")
    (scratch / "gpu" / "runtime" / "bind.py").write_text("import pycuda.gpuarray\nimport cuda.bindings.runtime\n")
    assert sorted(f.split(": ", 1)[1] for f in check(scratch)) == [
        "cuda.bindings is imported in gpu/process; only gpu/runtime may import it",
        "cuda.bindings.driver.cuInit is imported in call; only gpu/runtime may import it",
        "pycuda.driver is imported in gpu/process; only gpu/runtime may import it"]


def test_a_long_module_and_a_long_function_are_found(scratch):
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    (scratch / "core" / "long.py").write_text("def long():\n" + body + "\n" * 340)
    findings = [f.split("long.py", 1)[1] for f in check(scratch)]
    assert findings == [": 401 lines (at most 400)", ":1: long is 61 lines (at most 60)"]
