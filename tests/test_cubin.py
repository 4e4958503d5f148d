"""Reading a cubin's symbol table without a GPU: kernels by their own or their C++-mangled names."""

from __future__ import annotations

from gen.compiling.compiler import CompileOptions, compile_variant
from gen.core.cubin import kernel_symbol, symbols
from gen.families import MatmulVariant


def test_a_compiled_kernel_is_found_by_its_name_and_nothing_else_is(compile_options: CompileOptions) -> None:
    variant = MatmulVariant(tile=8)
    cubin = compile_variant(variant, compile_options).cubin.read_bytes()
    assert variant.name in symbols(cubin)
    assert kernel_symbol(cubin, variant.name) == variant.name
    assert kernel_symbol(cubin, "matmul_f32_t16") is None


def test_anything_but_an_elf_has_no_symbols() -> None:
    assert symbols(b"not an elf") == frozenset() and symbols(b"\x7fELF\x02\x01" + b"\0" * 8) == frozenset()
