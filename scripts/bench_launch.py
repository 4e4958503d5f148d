#!/usr/bin/env python3
"""The host cost of one kernel launch from Python: tilegen's ready-to-call kernel (a prepared
launch, and a full call that reads the arrays each time) against a CuPy RawKernel launch of the
same cubin, PyTorch's own op for the same work, and pycuda's prepared call (what tilegen's GPU
workers use). The kernel is the transpose family's default variant at a small size, so the GPU
finishes each launch sooner than the host issues the next: the time per launch is the host's.

Each case runs ROUNDS rounds of LAUNCHES launches; a round's host time is measured from the first
launch to the last one issued (the GPU is synchronised between rounds, outside the clock). Reported:
the median round's microseconds per launch, and its ratio to CuPy's RawKernel. The target of issue
31 is a prepared tilegen launch at most 1.5x CuPy's. Prints a table and writes it as Markdown.

Usage: scripts/bench_launch.py [--size 64x64] [--launches 200] [--rounds 50] [--markdown FILE]
Needs a GPU with CuPy and/or PyTorch (each case whose library is missing is left out and said).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gen  # noqa: E402
from gen.compiling.compiler import CompileOptions, compile_variant  # noqa: E402
from gen.core.table import text_table  # noqa: E402
from gen.families import get_family  # noqa: E402
from gen.families.problem import SCALAR_TYPES, Scalar  # noqa: E402

FAMILY = "transpose"


def per_launch_us(launch: Callable[[], Any], synchronize: Callable[[], None], launches: int, rounds: int) -> float:
    """The median round's host microseconds per launch."""
    for _ in range(3):
        launch()
    synchronize()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(launches):
            launch()
        times.append((time.perf_counter() - start) / launches * 1e6)
        synchronize()
    return statistics.median(times)


def cases(size: str) -> tuple[list[tuple[str, Callable[[], Any], Callable[[], None]]], list[str], str]:
    """(name, launch, synchronize) of every case whose library is here; notes of those left out."""
    family = get_family(FAMILY)
    shape = family.parse_shape(size)
    h, w = shape.dims
    found, missing = [], []
    kernel = gen.kernel(FAMILY, size)
    variant = kernel.variant
    cubin = compile_variant(variant, CompileOptions.local()).cubin
    launch = family.launch(variant, shape)
    scalars = [SCALAR_TYPES[a.ctype](family.problem.scalars(shape)[a.name]) for a in family.problem.arguments
               if isinstance(a, Scalar)]
    try:
        import cupy
    except ImportError:
        missing.append("CuPy is not installed: its cases are left out")
    else:
        x, y = cupy.random.random((h, w), dtype=cupy.float32), cupy.empty((w, h), cupy.float32)
        raw = cupy.RawModule(path=str(cubin)).get_function(variant.name)
        sync = cupy.cuda.get_current_stream().synchronize
        found += [("CuPy RawKernel, same cubin",
                   lambda: raw(launch.grid, launch.block, (x, y, *scalars), shared_mem=launch.dynamic_shared_bytes),
                   sync),
                  ("tilegen prepared launch, CuPy arrays", kernel.prepared(x, y), sync),
                  ("tilegen kernel(x, y), CuPy arrays", lambda: kernel(x, y), sync),
                  ("CuPy's own op: y[...] = x.T", lambda: cupy.copyto(y, x.T), sync)]
    try:
        import torch
    except ImportError:
        missing.append("PyTorch is not installed: its cases are left out")
    else:
        tx, ty = torch.rand(h, w, device="cuda"), torch.empty(w, h, device="cuda")
        prepared = kernel.prepared(tx, ty)
        stream = torch.cuda.current_stream().cuda_stream
        found += [("tilegen prepared launch, PyTorch tensors", prepared, torch.cuda.synchronize),
                  ("tilegen prepared launch, stream handle given", lambda: prepared(stream), torch.cuda.synchronize),
                  ("its driver call alone (cuLaunchKernel, cuda.bindings)", lambda: prepared.launch(stream),
                   torch.cuda.synchronize),
                  ("tilegen kernel(x, y), PyTorch tensors", lambda: kernel(tx, ty), torch.cuda.synchronize),
                  ("PyTorch's own op: y.copy_(x.t())", lambda: ty.copy_(tx.t()), torch.cuda.synchronize)]
    return found, missing, variant.name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="64x64")
    parser.add_argument("--launches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    found, missing, name = cases(args.size)
    for note in missing:
        print(note, file=sys.stderr)
    if not found:
        print("no case can run: install CuPy or PyTorch on a GPU machine", file=sys.stderr)
        return 1
    measured = [(case, per_launch_us(launch, sync, args.launches, args.rounds)) for case, launch, sync in found]
    cupy_us = dict(measured).get("CuPy RawKernel, same cubin")
    rows = [[case, f"{us:.2f}", f"{us / cupy_us:.2f}x" if cupy_us else "-"] for case, us in measured]
    header = ["launch", "host us per launch", "vs CuPy RawKernel"]
    title = (f"{name} at {args.size}: median of {args.rounds} rounds of {args.launches} launches; "
             f"numpy {np.__version__}")
    print(title)
    print(text_table(header, rows))
    if args.markdown:
        lines = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}", *(f"| {' | '.join(r)} |" for r in rows)]
        args.markdown.write_text(f"{title}\n\n" + "\n".join(lines) + "\n")
        print(f"written to {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
