"""ptxas's report (`-Xptxas -v`): what each kernel uses, read the same from any compiler that runs
ptxas and keeps its report in the log."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ENTRY = re.compile(r"^ptxas info\s*: Compiling entry function '(\w+)'", re.M)


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel."""

    registers: int
    static_shared_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


def parse_ptxas(log: str) -> Resources:
    """Registers, shared bytes, spills and stack from `-Xptxas -v` output (one kernel)."""
    def number(pattern: str) -> int:
        match = re.search(pattern, log)
        return int(match.group(1)) if match else 0

    return Resources(
        registers=number(r"Used (\d+) registers"),
        static_shared_bytes=number(r"(\d+) bytes smem"),
        spill_store_bytes=number(r"(\d+) bytes spill stores"),
        spill_load_bytes=number(r"(\d+) bytes spill loads"),
        stack_bytes=number(r"(\d+) bytes stack frame"),
    )


def kernel_logs(log: str) -> dict[str, str]:
    """ptxas's report of a multi-kernel compile, split by kernel: name -> its lines."""
    starts = list(_ENTRY.finditer(log))
    return {_plain(m.group(1)): log[m.start(): starts[i + 1].start() if i + 1 < len(starts) else len(log)]
            for i, m in enumerate(starts)}


def _plain(symbol: str) -> str:
    """A kernel's name from its symbol: a C++ kernel's mangled one (_Z10vector_addPfS_S_i) gives vector_add."""
    mangled = re.match(r"_Z(\d+)", symbol)
    return symbol[mangled.end(): mangled.end() + int(mangled.group(1))] if mangled else symbol
