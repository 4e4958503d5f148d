"""Compile with nvcc (no GPU needed): resources from ptxas match the families' formulas."""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from gen.compiling import compiler, nvcc
from gen.compiling.compiler import (CompileOptions, Compiled, compile_batch, compile_variant, nvcc_version, parse_ptxas,
                                provenance)
from gen.compiling.cache import BY_VARIANT, clear_cache
from gen.compiling.pool import CompilePool, compile_variants
from gen.core.processes import ProcessGroup
from gen.compiling.nvcc import Nvcc
from gen.core.errors import ToolMissing
from gen.families import builtin_families, get_family, MatmulVariant, TransposeVariant
from gen.families.registry import add_family_path
from gen.families.space import Space

from .conftest import REPO
from .fakes import OtherCompiler
from .waits import patient

# The whole golden record (every f32 tile/padding/bounds/sync/method combination), plus f64 and
# dynamic shared memory: well over the 60 representative variants the toolkit promises.
REPRESENTATIVE = [v for f in builtin_families().values() for v in Space.emitted(f).expand().valid] + [
    MatmulVariant(dtype="f64", tile=32, padding=1), MatmulVariant(tile=32, smem="dynamic", bounds="split"),
    TransposeVariant(dtype="f64", tile=64, rows=16), TransposeVariant(smem="dynamic")]


@pytest.fixture(scope="module")
def compiled(compile_options: CompileOptions):
    return compile_variants(REPRESENTATIVE, compile_options)


def test_representative_variants_compile_for_sm_90(compiled) -> None:
    assert len(compiled) >= 60
    failures = [(c.variant.name, c.log) for c in compiled if not c.ok]
    assert not failures


def test_ptxas_static_shared_bytes_equal_the_family_formula(compiled) -> None:
    for result in compiled:
        assert result.resources.static_shared_bytes == result.variant.static_shared_bytes, result.variant.name
    matmul = next(c for c in compiled if c.variant == MatmulVariant(tile=16, padding=1))
    assert matmul.resources.static_shared_bytes == 2 * 16 * 17 * 4


def test_the_seed_kernels_do_not_spill(compiled) -> None:
    # hgemm's 64 x 64 warp tiles sit at the 255-register limit: with bound checks nvcc 13.0 spills a
    # few bytes where NVRTC 13.5 does not; its rows report it, and the tuner weighs it.
    seeds = [c for c in compiled if c.variant.family != "hgemm"]
    assert seeds and all(c.resources.spill_bytes == 0 and c.resources.registers > 0 for c in seeds)


def test_a_repeated_compile_is_served_from_the_cache(compiled, compile_options, monkeypatch, fake_nvcc) -> None:
    fake = fake_nvcc("exit 1")  # the real nvcc's version, but no compile
    monkeypatch.setenv("PATH", fake.path)
    again = compile_variants(REPRESENTATIVE, compile_options)
    assert all(c.cached for c in again) and fake.compiles == 0
    assert [c.resources for c in again] == [c.resources for c in compiled]


def test_another_arch_is_another_cache_entry(compile_options, tmp_path) -> None:
    variant = MatmulVariant(tile=8)
    first = compile_variant(variant, CompileOptions(arch="sm_90", cache=tmp_path))
    other_arch = compile_variant(variant, CompileOptions(arch="sm_80", cache=tmp_path))
    assert not first.cached and not other_arch.cached
    assert compile_variant(variant, CompileOptions(arch="sm_80", cache=tmp_path)).cached


def test_the_cache_key_and_provenance_name_the_compiler_and_its_version(compile_options, tmp_path: Path) -> None:
    def compile_with(compiler: object) -> Compiled:
        return compile_variant(MatmulVariant(tile=8), CompileOptions(arch="sm_90", cache=tmp_path, compiler=compiler))

    made = compile_with(Nvcc())
    assert not made.cached and made.compiler == f"nvcc {nvcc_version()}"
    assert compile_with(OtherCompiler()).cached  # the same name and version: the same compiler
    renamed, newer = compile_with(OtherCompiler("nvcc-fork")), compile_with(OtherCompiler(version="99.9"))
    assert not renamed.cached and renamed.compiler == f"nvcc-fork {nvcc_version()}"
    assert not newer.cached and newer.compiler == "nvcc 99.9"
    assert compile_with(OtherCompiler("nvcc-fork")).cached
    made_by = provenance(CompileOptions(compiler=OtherCompiler("nvcc-fork")), get_family("matmul"))
    assert made_by["compiler"] == "nvcc-fork" and made_by["nvcc-fork"] == nvcc_version()


def test_variants_compile_together_only_where_the_compiler_batches(compile_options, tmp_path: Path) -> None:
    variants = [MatmulVariant(tile=8, padding=0), MatmulVariant(tile=16, padding=0)]  # a family that batches
    batching, alone = OtherCompiler(), OtherCompiler(batches=False)
    for other in (batching, alone):
        options = CompileOptions(arch="sm_90", cache=tmp_path / str(other.batches), jobs=1, compiler=other)
        assert all(c.ok and not c.cached for c in compile_batch(variants, options, ProcessGroup()))
    assert batching.runs == [[v.name for v in variants]]
    assert alone.runs == [[v.name] for v in variants]


class _GatedCompiler(OtherCompiler):
    """A compiler whose first run (and third, where `hold_third`) waits until the test opens its gate."""

    def __init__(self, hold_third: bool = False, **kind) -> None:
        super().__init__(**kind)
        self.gates = {0: threading.Event(), **({2: threading.Event()} if hold_third else {})}

    def compile(self, sources, arch, flags, deadline_s, children):
        gate = self.gates.get(len(self.runs))
        if gate is not None:
            assert gate.wait(patient(60)), "the test never opened this run's gate"
        return super().compile(sources, arch, flags, deadline_s, children)


def _pool_runs(compiler: _GatedCompiler, cache: Path) -> list[list[str]]:
    """The runs a one-thread pool gives `compiler` for six variants asked for while its first run waits."""
    variants = [MatmulVariant(tile=tile, padding=padding) for tile in (8, 16) for padding in (0, 1, 2)]
    pool = CompilePool(CompileOptions(arch="sm_90", cache=cache, jobs=1, compiler=compiler))
    try:
        futures = [pool.submit(variant) for variant in variants]
        compiler.gates[0].set()
        if 2 in compiler.gates:
            assert futures[1].result(60).ok  # done while the third run waits: not held back in a batch with it
            assert not futures[2].done()
            compiler.gates[2].set()
        assert all(future.result(60).ok for future in futures)
        return compiler.runs
    finally:
        pool.kill()


def test_a_pool_sizes_batches_by_the_runs_each_thread_should_have(compile_options, tmp_path: Path) -> None:
    names = [v.name for v in (MatmulVariant(tile=tile, padding=padding) for tile in (8, 16) for padding in (0, 1, 2))]
    assert _pool_runs(_GatedCompiler(), tmp_path / "1") == [names[:1], names[1:]]  # as large as can be
    assert _pool_runs(_GatedCompiler(runs_per_thread=4), tmp_path / "4") == [  # 5 wait: ceil(5/4), then one each
        names[:1], names[1:3], *([name] for name in names[3:])]


def test_a_pool_gives_each_variant_a_run_of_its_own_where_the_compiler_batches_not(compile_options,
                                                                                   tmp_path: Path) -> None:
    runs = _pool_runs(_GatedCompiler(hold_third=True, batches=False), tmp_path)
    assert runs == [[name] for run in runs for name in run] and len(runs) == 6


def test_a_compile_error_is_a_result_with_the_log(compile_options, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(compiler, "render", lambda variant: "this is not CUDA;\n")  # not its source: a cache of its own
    result = compile_variant(MatmulVariant(tile=8, padding=7), replace(compile_options, cache=tmp_path))
    assert not result.ok and result.cubin is None and result.resources is None
    assert "error" in result.log


def test_missing_nvcc_is_one_clear_message(monkeypatch) -> None:
    monkeypatch.setattr(nvcc, "nvcc_path", lambda: None)
    with pytest.raises(ToolMissing, match="nvcc not found: install the CUDA toolkit"):
        compile_variants([MatmulVariant()], CompileOptions(compiler=nvcc.Nvcc()))


def test_parse_ptxas_reads_registers_shared_spills_and_stack() -> None:
    log = """ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2176 bytes smem, 400 bytes cmem[0]"""
    resources = parse_ptxas(log)
    assert (resources.registers, resources.static_shared_bytes, resources.stack_bytes) == (40, 2176, 24)
    assert resources.spill_bytes == 20


def _fastest(data_file: str, per_shape: int) -> list:
    """The fastest ok rows of a recorded H200 run (docs/results/data/h200), per shape."""
    from gen.core.results import Status
    from gen.store.results_log import read_rows

    from .conftest import REPO

    rows = [r for r in read_rows(REPO / "docs" / "results" / "data" / "h200" / data_file) if r.status == Status.OK]
    by_name = {}
    for row in sorted(rows, key=lambda r: r.median_ms):  # a variant measured twice counts once
        by_name.setdefault((row.shape, row.name), row)
    fastest = []
    for shape in sorted({r.shape for r in by_name.values()}):
        fastest += [r for (s, _), r in by_name.items() if s == shape][:per_shape]
    return fastest


@pytest.mark.parametrize("data_file, per_shape", [
    ("sgemm-2048-exhaustive.jsonl", 10),  # the default space's winners at 2048^3
    ("sgemm-2048-async.jsonl", 3),  # the cp.async twins
    ("tuned-shapes.jsonl", 1),  # the winner of every other tuned shape, transposes included
])
def test_the_fastest_variants_measured_on_an_h200_compile_without_spills(compile_options, data_file: str,
                                                                         per_shape: int) -> None:
    """The winners must keep everything in registers, with the register counts ptxas gave on the GPU host."""
    from gen.families import variant_from_name

    fastest = _fastest(data_file, per_shape)
    results = compile_variants([variant_from_name(r.name) for r in fastest], compile_options)
    assert all(c.ok and c.resources.spill_bytes == 0 and c.resources.stack_bytes == 0 for c in results)
    assert [c.resources.registers for c in results] == [r.registers for r in fastest]


FAKE_CUOBJDUMP = """#!/bin/sh
[ "$1" = -sass ] && [ -f "$2" ] || { echo "usage: cuobjdump -sass CUBIN" >&2; exit 1; }
cat <<'SASS'
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   FFMA R2, R3, R4, R5 ;
        /*0020*/                   LDS.128 R4, [R2] ;
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
SASS
"""


def test_inspect_variant_says_what_limits_a_variant_and_which_compiler_made_it(
        compile_options, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "cuobjdump").write_text(FAKE_CUOBJDUMP)
    (tmp_path / "cuobjdump").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(sys, "argv", ["inspect_variant.py", "matmul_f32_t16_p1_guard_both"])
    runpy.run_path(str(REPO / "scripts" / "inspect_variant.py"), run_name="__main__")
    header, _, row = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["variant", "compiler", "regs"]
    registers = compile_variant(MatmulVariant(tile=16, padding=1), compile_options).resources.registers
    # no spills; 4 instructions, a quarter FFMA; FFMA, LDS.128 and BAR.SYNC once each among the watched
    compiler = compile_options.compiler
    assert row.split() == ["matmul_f32_t16_p1_guard_both", compiler.name, compiler.version(), str(registers), "0", "4", "25%",
                           "1", "1", "0", "0", "0", "0", "0", "0", "1"]


def test_the_whole_default_hgemm_space_compiles_without_error(compile_options) -> None:
    variants = Space.default(get_family("hgemm")).expand().valid
    results = compile_variants(variants, compile_options)
    assert len(results) == len(variants) > 300
    assert not [(r.variant.name, r.log) for r in results if not r.ok]


def test_a_warm_compile_renders_nothing_and_a_changed_template_or_option_compiles_again(
        tmp_path: Path, own_family_path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "family"
    shutil.copytree(REPO / "docs" / "examples" / "reduction", folder)
    add_family_path(folder)
    variant = get_family("reduce").default_variant()
    counted = OtherCompiler()
    options = CompileOptions(arch="sm_90", cache=tmp_path / "cache", compiler=counted)
    first = compile_variant(variant, options)
    assert first.ok and not first.cached and len(counted.runs) == 1
    real_render = compiler.render
    monkeypatch.setattr(compiler, "render", lambda v: pytest.fail(f"{v.name} was rendered"))
    again = compile_variant(variant, options)
    assert again.cached and again.cubin == first.cubin and len(counted.runs) == 1
    monkeypatch.setattr(compiler, "render", real_render)
    assert not compile_variant(variant, replace(options, flags=(*options.flags, "-DFASTER"))).cached
    assert not compile_variant(variant, replace(options, arch="sm_80")).cached
    template = folder / "reduce.cu.j2"
    original = template.read_text()
    template.write_text(original + "// changed\n")
    changed = compile_variant(variant, options)
    assert not changed.cached and len(counted.runs) == 4
    template.write_text(original)
    assert compile_variant(variant, options).cached and len(counted.runs) == 4
    clear_cache(options.cache)
    assert not list(options.cache.iterdir())  # the variants' keys went with the entries
    (options.cache / BY_VARIANT).write_text("not a folder")  # the keys cannot be kept: the cache is still read
    assert not compile_variant(variant, options).cached and compile_variant(variant, options).cached
