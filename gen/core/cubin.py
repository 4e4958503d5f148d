"""What a cubin (an ELF file) declares, read without a GPU or a CUDA library: the names in its
symbol table. Kernels are among them, under their C++-mangled names where they have C++ linkage."""

from __future__ import annotations

import struct

ELF64_LITTLE = b"\x7fELF\x02\x01"
SYMBOL_TABLE = 2  # SHT_SYMTAB


def symbols(data: bytes) -> frozenset[str]:
    """The names in the symbol tables of a 64-bit little-endian ELF; empty for anything else (or a
    damaged file)."""
    if data[:6] != ELF64_LITTLE:
        return frozenset()
    try:
        table_at, = struct.unpack_from("<Q", data, 0x28)  # e_shoff
        entry_size, count = struct.unpack_from("<HH", data, 0x3A)  # e_shentsize, e_shnum
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, table_at + i * entry_size) for i in range(count)]
        names: set[str] = set()
        for _, kind, _, _, start, length, link, _, _, symbol_size in sections:
            if kind != SYMBOL_TABLE or not symbol_size:
                continue
            strings = sections[link][4]  # the string table's offset in the file
            for at in range(start, start + length, symbol_size):
                name_at = strings + struct.unpack_from("<I", data, at)[0]
                names.add(data[name_at:data.index(b"\0", name_at)].decode(errors="replace"))
        return frozenset(names)
    except (struct.error, ValueError, IndexError):
        return frozenset()


def kernel_symbol(data: bytes, name: str) -> str | None:
    """The symbol of kernel `name` in a cubin (see symbol_of)."""
    return symbol_of(symbols(data), name)


def symbol_of(found: frozenset[str], name: str) -> str | None:
    """Among a cubin's symbols, kernel `name`'s: `name` itself (extern "C"), else the one C++-mangled
    symbol of a function of that name at namespace scope (_Z<length><name>...); None when there is
    none, or several (overloads)."""
    if name in found:
        return name
    mangled = [s for s in found if s.startswith(f"_Z{len(name)}{name}") and not s.startswith(".")]
    return mangled[0] if len(mangled) == 1 else None
