"""NVRTC as tilegen's compiler: the same resources as nvcc, compile errors as rows, the compiler in
the cache key and in every row, nvcc flags translated or refused, and the faults of a compile held
in NVRTC itself: a run stopped, a worker that crashes, a compile past its deadline.

Hangs and crashes come from a stand-in for NVRTC's worker process (tests.fake_nvrtc) that says
when it has started compiling.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pytest

from gen.compiling import nvrtc_library
from gen.compiling.compiler import CompileOptions, compile_batch, compile_variant, parse_ptxas
from gen.compiling.compilers import COMPILER_ENV, compiler_named, default_compiler
from gen.compiling.nvcc import Nvcc
from gen.compiling.nvrtc import Nvrtc, nvrtc_options
from gen.compiling import compiler
from gen.compiling.pool import compile_variants
from gen.cli.main import main
from gen.core.errors import Interrupted, UsageError
from gen.core.processes import ProcessGroup
from gen.core.results import Status
from gen.families import MatmulVariant, builtin_families, get_family
from gen.store.results_log import read_rows

from . import fake_nvrtc
from .conftest import REPO
from .fakes import Announcements, ends_within
from .waits import patient

pytestmark = pytest.mark.skipif(not nvrtc_library.available(),
                                reason="NVRTC is not installed (pip install 'tilegen[nvrtc]')")
VARIANT = MatmulVariant(tile=8, padding=0)


@pytest.fixture
def nvrtc(compile_options: CompileOptions, tmp_path: Path) -> CompileOptions:
    """NVRTC, with this test's own cache."""
    return replace(compile_options, compiler=Nvrtc(), cache=tmp_path / "cubins")


def test_nvrtc_is_the_default_where_installed_unless_the_environment_names_nvcc(monkeypatch) -> None:
    assert isinstance(default_compiler(), Nvrtc)
    monkeypatch.setenv(COMPILER_ENV, "nvcc")
    assert isinstance(default_compiler(), Nvcc)
    monkeypatch.setenv(COMPILER_ENV, "clang")
    with pytest.raises(UsageError, match=r"\$TILEGEN_COMPILER 'clang' is not a compiler tilegen has; use one of: "
                                         r"nvrtc, nvcc"):
        default_compiler()


def test_every_builtin_familys_defaults_compile_to_the_resources_nvcc_gives(nvrtc: CompileOptions,
                                                                            tmp_path: Path) -> None:
    variants = [get_family(name).default_variant() for name in builtin_families()]
    by_nvcc = compile_batch(variants, replace(nvrtc, compiler=Nvcc(), cache=tmp_path / "nvcc"), ProcessGroup())
    by_nvrtc = compile_batch(variants, nvrtc, ProcessGroup())
    for ours, theirs in zip(by_nvrtc, by_nvcc):
        assert ours.ok and theirs.ok, (ours.log, theirs.log)
        assert ours.resources == theirs.resources, ours.variant.name
        assert ours.compiler.startswith("nvrtc ") and theirs.compiler.startswith("nvcc ")
        assert ours.cubin.read_bytes()[:4] == b"\x7fELF"  # a cubin, not PTX


def test_nvrtc_batches_only_what_leaves_each_thread_several_runs(nvrtc: CompileOptions) -> None:
    """Up to 8 to a program would cost NVRTC the threads' finishing together (docs/results/compile-batching.md)."""
    variants = [MatmulVariant(tile=tile, padding=padding) for tile in (8, 16) for padding in (0, 1)]
    compiled = compile_variants(variants, replace(nvrtc, jobs=1))  # nvcc would put the last three in one run
    assert all(c.ok for c in compiled)
    assert len({c.cubin for c in compiled}) == len(variants)


def test_the_cache_keeps_each_compilers_cubin_apart(nvrtc: CompileOptions) -> None:
    first = compile_variant(VARIANT, nvrtc)
    by_nvcc = compile_variant(VARIANT, replace(nvrtc, compiler=Nvcc()))
    again = compile_variant(VARIANT, nvrtc)
    assert not first.cached and not by_nvcc.cached and again.cached
    assert again.cubin == first.cubin != by_nvcc.cubin


def test_a_compile_error_is_a_row_that_names_the_line(tmp_path: Path, compile_options, monkeypatch,
                                                      capsys) -> None:
    real_render = compiler.render
    broken = "matmul_f32_t16_p0_guard_both"
    monkeypatch.setattr(compiler, "render", lambda v: "\n\nbroken;\n" if v.name == broken else real_render(v))
    monkeypatch.setenv("TILEGEN_CACHE", str(tmp_path / "cache"))  # of its own: the broken source is not the variant's
    code = main(["compile", "matmul", "-p", "tile=8,16", "-p", "padding=0", "-p", "bounds=guard", "--compiler",
                 "nvrtc", "--out", str(tmp_path / "run")])
    capsys.readouterr()
    rows = {row.name: row for row in read_rows(tmp_path / "run" / "results.jsonl")}
    assert code == 1 and rows[broken].status is Status.COMPILE_ERROR  # a compile error: exit code 1
    assert f"{broken}.cu(3): error" in rows[broken].message
    other = rows["matmul_f32_t8_p0_guard_both"]
    assert other.status is Status.COMPILED and other.provenance["compiler"] == "nvrtc"
    assert other.provenance["nvrtc"] == nvrtc_library.library_version()


def test_ptxas_refusing_a_kernel_in_nvrtc_is_a_compile_error_row_not_a_broken_installation(
        nvrtc: CompileOptions, monkeypatch) -> None:
    # NVRTC puts ptxas's error after its report, the two joined by a NUL: the error must still be read
    big = ("extern \"C\" __global__ void {name}(float *out) {{\n    __shared__ float tile[20000];\n"
           "    tile[threadIdx.x] = threadIdx.x;\n    __syncthreads();\n    out[threadIdx.x] = tile[19999 - threadIdx.x];\n}}\n")
    monkeypatch.setattr(compiler, "render", lambda v: big.format(name=v.name))
    result = compile_variant(VARIANT, nvrtc)
    assert not result.ok and "uses too much shared data" in result.log
    assert "\0" not in result.log


@pytest.mark.parametrize("flags, expected", [
    (["-lineinfo", "-use_fast_math", "-maxrregcount=64", "-Xptxas", "-O2"],
     ["-lineinfo", "--use_fast_math", "--maxrregcount=64", "--ptxas-options=-O2"]),
    (["-DTILE=8", "--ftz=true", "-std=c++17"], ["-DTILE=8", "--ftz=true", "-std=c++17"]),
])
def test_nvcc_flags_are_translated(flags: list[str], expected: list[str]) -> None:
    assert nvrtc_options("sm_90", flags) == ["--gpu-architecture=sm_90", "--ptxas-options=-v", *expected]


@pytest.mark.parametrize("flag", ["-Xcompiler", "--keep", "-O3", "-rdc=true"])
def test_an_nvcc_flag_nvrtc_has_no_equivalent_of_is_refused_in_one_line(nvrtc: CompileOptions, flag: str) -> None:
    with pytest.raises(UsageError, match=f"the nvcc flag '{flag}' has no NVRTC equivalent; compile with --compiler nvcc"):
        compile_variant(VARIANT, replace(nvrtc, flags=(*nvrtc.flags, flag)))


def test_an_unknown_compiler_is_refused_by_the_command_line(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["compile", "matmul", "--compiler", "clang"])
    assert exited.value.code == 2 and "invalid choice: 'clang'" in capsys.readouterr().err


# ---- a compile that hangs or crashes in its worker -------------------------------------------------------

@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Announcements]:
    """NVRTC's workers replaced by tests.fake_nvrtc, which hangs or crashes as told, after saying so
    on the Announcements returned."""
    def make(behaviour: str) -> Announcements:
        monkeypatch.setenv(fake_nvrtc.BEHAVIOUR_ENV, behaviour)
        monkeypatch.setenv(fake_nvrtc.ANNOUNCE_ENV, str(tmp_path / "announce"))
        made.append(Announcements(tmp_path / "announce"))
        return made[-1]

    made: list[Announcements] = []
    yield make
    for announcements in made:
        announcements.close()


STAND_IN = Nvrtc(worker="tests.fake_nvrtc")


class Compiling(threading.Thread):
    """compile_batch of one variant, in a thread, with its own process group."""

    def __init__(self, options: CompileOptions):
        super().__init__(daemon=True)
        self.options, self.children = options, ProcessGroup()
        self.result: object = None
        self.start()

    def run(self) -> None:
        try:
            self.result = compile_batch([VARIANT], self.options, self.children)[0]
        except BaseException as error:  # noqa: BLE001 - the test looks at it
            self.result = error

    def outcome(self) -> object:
        self.join(patient(60))
        assert not self.is_alive()
        return self.result


def test_a_compile_stopped_with_its_run_is_interrupted_and_never_cached(nvrtc: CompileOptions, stand_in) -> None:
    said = stand_in("hang")
    compiling = Compiling(replace(nvrtc, compiler=STAND_IN))
    said.until(f"compiling {VARIANT.name}")
    compiling.children.kill_all()  # what Ctrl-C does to a run's compiles
    assert isinstance(compiling.outcome(), Interrupted)
    assert not [path for path in nvrtc.cache.rglob("*") if path.is_file()]


def test_a_worker_ends_the_moment_tilegen_is_killed_even_mid_compile(stand_in) -> None:
    """SIGKILL leaves tilegen no time to end its workers: each sees its socket hang up and ends at
    once, in the middle of a compile that would never finish (the stand-in's)."""
    said = stand_in("hang")
    tilegen = subprocess.Popen(
        [sys.executable, "-c", "from gen.compiling.nvrtc import Nvrtc\nfrom gen.core.processes import ProcessGroup\n"
         "Nvrtc(worker='tests.fake_nvrtc').compile({'k': ''}, 'sm_90', [], 600.0, ProcessGroup())\n"],
        env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
    worker = int(said.until("compiling").split()[-1])
    tilegen.kill()
    tilegen.wait()
    assert ends_within(worker, 60.0)  # as good as never: the stand-in's compile does not end


def test_a_worker_that_crashes_twice_gives_a_row_that_says_so_and_caches_nothing(nvrtc: CompileOptions,
                                                                                  stand_in) -> None:
    said = stand_in("crash")
    crashed = compile_variant(VARIANT, replace(nvrtc, compiler=STAND_IN))
    said.until(f"compiling {VARIANT.name}")
    said.until(f"compiling {VARIANT.name}")  # the crash, and the one more try after it
    assert not crashed.ok and crashed.log.startswith("nvrtc crashed (SIGSEGV) compiling it; not cached")
    assert "--compiler" in crashed.log
    assert not [path for path in nvrtc.cache.rglob("*") if path.is_file()]


def test_a_compile_past_its_deadline_is_killed_and_never_cached(nvrtc: CompileOptions, stand_in) -> None:
    said = stand_in("hang")
    timed_out = compile_variant(VARIANT, replace(nvrtc, compiler=STAND_IN, timeout_s=0.5))
    said.until(f"compiling {VARIANT.name}")
    assert not timed_out.ok and timed_out.log.startswith("nvrtc did not finish within 0.5 s and was killed; not cached")
    assert not [path for path in nvrtc.cache.rglob("*") if path.is_file()]
    assert compile_variant(VARIANT, nvrtc).ok  # the real NVRTC, after the killed stand-in
