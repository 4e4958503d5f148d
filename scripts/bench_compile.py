#!/usr/bin/env python3
"""Compile throughput: variants per second for the default matmul space, cold and warm cache.

Aims (issue 2): a warm-cache run of the whole default space under 2 s; a cold run within 10% of
one variant's compile time x count / cores. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from gen.compiling.compiler import CompileOptions, nvcc_version
from gen.compiling.pool import compile_variants
from gen.families import get_family
from gen.families.space import Space
from gen.core.table import text_table


def timed_compile(variants: list, options: CompileOptions) -> float:
    start = time.perf_counter()
    results = compile_variants(variants, options)
    assert all(r.ok for r in results), [r.log for r in results if not r.ok]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="matmul")
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args()
    family = get_family(args.family)
    variants = Space.default(family).expand().valid
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as scratch:
        singles = [timed_compile([family.default_variant()], CompileOptions(args.arch, cache=Path(scratch) / f"one{i}"))
                   for i in range(3)]
        one = statistics.median(singles)
        options = CompileOptions(args.arch, cache=Path(scratch) / "space", jobs=cores)
        cold = timed_compile(variants, options)
        warm = timed_compile(variants, options)
    ideal = one * len(variants) / cores
    print(f"nvcc {nvcc_version()}, {cores} cores, {len(variants)} variants of the default {family.name} space, "
          f"one variant compiles in {one:.2f} s")
    print(text_table(
        ["run", "seconds", "variants/s", "aim", "met"],
        [["cold cache", round(cold, 2), round(len(variants) / cold, 1),
          f"<= {1.1 * ideal:.2f} s (ideal {ideal:.2f}, {cold / ideal:.0%} of it)", cold <= 1.1 * ideal],
         ["warm cache", round(warm, 3), round(len(variants) / warm, 1), "< 2 s", warm < 2]]))


if __name__ == "__main__":
    main()
