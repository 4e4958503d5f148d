#!/usr/bin/env python3
"""NVRTC against nvcc: every built-in family's golden space (the variants/ folder) and the
180-point sgemm space of scripts/bench_vs_kernel_tuner.py, compiled cold with each, on every core.

For each space and compiler: the wall time of a cold compile (an empty cache) and the variants per
second; then, variant by variant, whether NVRTC's resources (registers, shared bytes, spills, stack)
equal nvcc's. NVRTC runs as tilegen runs it (a warm worker process per compile thread) and, for
comparison, in the compile threads themselves (`Nvrtc(isolated=False)`: the bindings release the
GIL), and with batches as large as nvcc's (up to 8 variants to a program as soon as more wait
than there are threads: tilegen's NVRTC before issue 35, whose threads finished far apart).
Prints tables and writes them as Markdown with --markdown; asserts nothing.

Usage: scripts/bench_compilers.py [--arch sm_90] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gen.compiling.compiler import Compiled, CompileOptions  # noqa: E402
from gen.compiling.compilers import Compiler  # noqa: E402
from gen.compiling.nvcc import Nvcc  # noqa: E402
from gen.compiling.nvrtc import Nvrtc  # noqa: E402
from gen.compiling.options import usable_cores  # noqa: E402
from gen.compiling.pool import compile_variants  # noqa: E402
from gen.core.table import markdown_table  # noqa: E402
from gen.families import builtin_families, get_family  # noqa: E402
from gen.families.space import Space  # noqa: E402
from gen.families.variant import Variant  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_kernel_tuner import SPACE  # noqa: E402



class BatchedAsNvcc(Nvrtc):
    """NVRTC given batches as large as nvcc's (tilegen's NVRTC before issue 35)."""

    runs_per_thread = 1


COMPILERS: dict[str, Callable[[], Compiler]] = {
    "nvrtc (worker processes)": Nvrtc, "nvrtc (threads)": lambda: Nvrtc(isolated=False),
    "nvrtc (batched as nvcc)": BatchedAsNvcc, "nvcc": Nvcc}


def spaces() -> dict[str, list[Variant]]:
    """Each built-in family's golden space, and the 180-point sgemm space."""
    found = {f"{name} golden": Space.emitted(family).expand().valid for name, family in builtin_families().items()}
    sgemm = get_family("sgemm")
    options = [f"{name}={','.join(str(value) for value in values)}" for name, values in SPACE.items()]
    found["sgemm 180-point"] = Space.from_options(sgemm, options).expand().valid
    return found


def cold_compile(variants: list[Variant], compiler: Compiler, arch: str) -> tuple[float, list[Compiled]]:
    with tempfile.TemporaryDirectory() as scratch:
        options = CompileOptions(arch, cache=Path(scratch) / "cubins", compiler=compiler)
        started = time.perf_counter()
        compiled = compile_variants(variants, options)
        return time.perf_counter() - started, compiled


def resource_mismatches(ours: list[Compiled], theirs: list[Compiled]) -> list[str]:
    return [f"{a.variant.name}: {a.resources} vs {b.resources}" for a, b in zip(ours, theirs)
            if not (a.ok and b.ok) or a.resources != b.resources]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    rows, mismatched = [], []
    for space, variants in spaces().items():
        results = {name: cold_compile(variants, make(), args.arch) for name, make in COMPILERS.items()}
        nvcc_s, by_nvcc = results["nvcc"]
        for name, (seconds, compiled) in results.items():
            wrong = resource_mismatches(compiled, by_nvcc)
            mismatched += wrong
            rows.append([space, len(variants), name, f"{seconds:.2f}", f"{len(variants) / seconds:.0f}",
                         f"{nvcc_s / seconds:.1f}x", "" if name == "nvcc" else f"{len(variants) - len(wrong)}/"
                                                                                f"{len(variants)}"])
            print(" | ".join(str(cell) for cell in rows[-1]), flush=True)
    text = "\n".join([f"cold compiles for {args.arch} on {usable_cores()} cores, "
                      f"nvcc {Nvcc().version()}, NVRTC {Nvrtc().version()}", "",
                      markdown_table(["space", "variants", "compiler", "cold s", "variants/s", "vs nvcc",
                                      "resources equal to nvcc's"], rows)]
                     + ([f"", f"resources that differ ({len(mismatched)}):", ""] + [f"- {m}" for m in mismatched[:20]]
                        if mismatched else []))
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
