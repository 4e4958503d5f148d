#!/usr/bin/env python3
"""The cost of calling a tuned kernel from Python (issues 31 and 47), beside the peers in the same run.

1. Host cost per launch (transpose's default variant at a small size, so the GPU finishes each launch
   sooner than the host issues the next): tilegen's kernel called sized (`gen.kernel(f, size)(x, y)`),
   by shape (`gen.kernel(f)(x, y)`) and prepared, against a CuPy RawKernel launch of the same cubin.
2. gen.matmul on PyTorch tensors (bfloat16 by default) in an enqueue-bound loop at a small shape:
   host us per call, with and without out=, against torch.matmul; and the GPU time per call of a
   captured CUDA graph of those calls, replayed, against the eager loop's.
3. Single calls on an idle GPU at model shapes: the user-visible time of one gen.matmul call (CUDA
   events around the call, the GPU idle before it) against the kernel's own time (back-to-back
   calls, as the tuner times it), and the same for torch.matmul (cuBLAS).

Each case's result is checked first (against float64, outputs poisoned with NaN). Rounds alternate
between the cases; medians are reported. Prints tables, and writes them as Markdown with --markdown.

Usage: scripts/bench_launch.py [--size 64x64] [--launches 200] [--rounds 50] [--dtype bf16]
       [--gemm 512x512x512] [--shapes 5120x3072x2048,4096x4096x4096] [--markdown FILE]
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
from gen.families import gemm_families, get_family  # noqa: E402
from gen.families.problem import SCALAR_TYPES, Scalar, numpy_dtype  # noqa: E402

FAMILY = "transpose"


def per_launch_us(found: list[tuple[str, Callable[[], Any], Callable[[], None]]], launches: int,
                  rounds: int) -> dict[str, float]:
    """Each case's median round of host microseconds per launch, the cases' rounds alternating."""
    times: dict[str, list[float]] = {name: [] for name, _, _ in found}
    for name, launch, synchronize in found:
        for _ in range(3):
            launch()
        synchronize()
    for _ in range(rounds):
        for name, launch, synchronize in found:
            start = time.perf_counter()
            for _ in range(launches):
                launch()
            times[name].append((time.perf_counter() - start) / launches * 1e6)
            synchronize()
    return {name: statistics.median(values) for name, values in times.items()}


def cases(size: str) -> tuple[list[tuple[str, Callable[[], Any], Callable[[], None]]], list[str], str]:
    """(name, launch, synchronize) of every case whose library is here; notes of those left out."""
    family = get_family(FAMILY)
    shape = family.parse_shape(size)
    h, w = shape.dims
    found, missing = [], []
    kernel, by_shape = gen.kernel(FAMILY, size), gen.kernel(FAMILY)
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
        x, y = cupy.random.random((h, w), dtype=cupy.float32), cupy.full((w, h), cupy.nan, cupy.float32)
        kernel(x, y)
        assert bool((y == x.T).all()), "tilegen's transpose is wrong on CuPy arrays"
        raw = cupy.RawModule(path=str(cubin)).get_function(variant.name)
        sync = cupy.cuda.get_current_stream().synchronize
        found += [("CuPy RawKernel, same cubin",
                   lambda: raw(launch.grid, launch.block, (x, y, *scalars), shared_mem=launch.dynamic_shared_bytes),
                   sync),
                  ("tilegen prepared launch, CuPy arrays", kernel.prepared(x, y), sync),
                  ("tilegen kernel(x, y) sized, CuPy arrays", lambda: kernel(x, y), sync),
                  ("tilegen kernel(x, y) by shape, CuPy arrays", lambda: by_shape(x, y), sync),
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
                  ("tilegen kernel(x, y) sized, PyTorch tensors", lambda: kernel(tx, ty), torch.cuda.synchronize),
                  ("tilegen kernel(x, y) by shape, PyTorch tensors", lambda: by_shape(tx, ty), torch.cuda.synchronize),
                  ("PyTorch's own op: y.copy_(x.t())", lambda: ty.copy_(tx.t()), torch.cuda.synchronize)]
    return found, missing, variant.name


def gemm_operands(torch: Any, dims: str, dtype: Any) -> tuple[Any, Any, Any]:
    """A, B and a NaN-poisoned out for an MxNxK product, gen.matmul's result checked against float64."""
    m, n, k = (int(d) for d in dims.split("x"))
    a, b = (torch.randn(*shape, device="cuda", dtype=dtype) / 8 for shape in ((m, k), (k, n)))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    gen.matmul(a, b, out)
    reference = a.double() @ b.double()
    error = float((out.double() - reference).norm() / reference.norm())
    assert error < 1e-2, f"gen.matmul at {dims}: relative error {error:.2e} against float64"
    return a, b, out


def matmul_host_rows(torch: Any, dims: str, dtype: Any, launches: int, rounds: int) -> list[list[str]]:
    """gen.matmul's host cost per call in an enqueue-bound loop against torch.matmul, and a captured
    graph of `launches` calls replayed (GPU time per call, CUDA events) against the eager loop's."""
    a, b, out = gemm_operands(torch, dims, dtype)
    prepared = gemm_prepared(a, b, out, dims, {torch.bfloat16: "bf16", torch.float16: "f16"}.get(dtype, "f32"))
    found = [("torch.matmul(a, b)", lambda: torch.matmul(a, b), torch.cuda.synchronize),
             (f"{prepared.variant.name}, prepared", prepared, torch.cuda.synchronize),
             ("gen.matmul(a, b)", lambda: gen.matmul(a, b), torch.cuda.synchronize),
             ("torch.matmul(a, b, out=out)", lambda: torch.matmul(a, b, out=out), torch.cuda.synchronize),
             ("gen.matmul(a, b, out)", lambda: gen.matmul(a, b, out), torch.cuda.synchronize)]
    host = per_launch_us(found, launches, rounds)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            gen.matmul(a, b, out)
    out.fill_(float("nan"))
    graph.replay()
    reference = a.double() @ b.double()
    assert float((out.double() - reference).norm() / reference.norm()) < 1e-2, "the replayed graph is wrong"
    gpu = {"gen.matmul(a, b, out)": gpu_us(torch, lambda: [gen.matmul(a, b, out) for _ in range(launches)],
                                           launches, rounds),
           "its captured graph, replayed": gpu_us(torch, graph.replay, launches, rounds)}
    rows = [[case, f"{us:.2f}", f"{us / host['torch.matmul(a, b)']:.2f}x", f"{gpu[case]:.2f}" if case in gpu else "-"]
            for case, us in host.items()]
    return rows + [["its captured graph, replayed", "-", "-", f"{gpu['its captured graph, replayed']:.2f}"]]


def gemm_prepared(a: Any, b: Any, out: Any, dims: str, dtype: str) -> Any:
    """The launch gen.matmul makes at `dims`, prepared through gen.kernel: the first of the families
    that multiply the type that takes these arrays here."""
    for family in gemm_families(np.dtype(numpy_dtype(dtype))):
        try:
            return gen.kernel(family.name, dims, dtype=dtype).prepared(a, b, out)
        except gen.UsageError:
            continue
    raise SystemExit(f"no family multiplies {dtype} at {dims} here")


def gpu_us(torch: Any, run: Callable[[], Any], calls: int, rounds: int) -> float:
    """The median over `rounds` of the GPU time per call of `run` (which makes `calls` calls), by CUDA events."""
    times = []
    for _ in range(rounds + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times[2:])


def single_call_rows(torch: Any, shapes: list[str], dtype: Any, rounds: int) -> list[list[str]]:
    """Per shape: the kernel's own time (back-to-back calls) and one call's user-visible time on an
    idle GPU, for gen.matmul and torch.matmul, in microseconds."""
    rows = []
    for dims in shapes:
        a, b, out = gemm_operands(torch, dims, dtype)
        cublas_out = torch.empty_like(out)
        tilegen_call, cublas_call = (lambda: gen.matmul(a, b, out)), (lambda: torch.matmul(a, b, out=cublas_out))
        own = {name: gpu_us(torch, lambda call=call: [call() for _ in range(20)], 20, rounds)
               for name, call in (("tilegen", tilegen_call), ("cublas", cublas_call))}
        single = {"tilegen": [], "cublas": []}
        for _ in range(rounds):  # alternating, each on an idle GPU
            for name, call in (("tilegen", tilegen_call), ("cublas", cublas_call)):
                single[name].append(gpu_us(torch, call, 1, 1))
        mid = {name: statistics.median(values) for name, values in single.items()}
        rows.append([dims, f"{own['tilegen']:.1f}", f"{mid['tilegen']:.1f}", f"{mid['tilegen'] / own['tilegen']:.3f}",
                     f"{own['cublas']:.1f}", f"{mid['cublas']:.1f}", f"{own['cublas'] / own['tilegen'] * 100:.1f}%"])
    return rows


def floor_rows(torch: Any, found: list[tuple[str, Callable[[], Any], Callable[[], None]]],
               rounds: int) -> list[list[str]]:
    """What a launch adds to a kernel's time as its caller sees it on an idle GPU, whoever launches
    it: per launch case of the small kernel, one call's time between events on an idle GPU against
    its own time back to back, in microseconds (the floor under issue 47's single-call target)."""
    rows = []
    for name, launch, _ in found:
        if "own op" in name:
            continue
        own = gpu_us(torch, lambda launch=launch: [launch() for _ in range(20)], 20, rounds)
        single = statistics.median(gpu_us(torch, launch, 1, 1) for _ in range(rounds))
        rows.append([name, f"{own:.2f}", f"{single:.2f}", f"{single - own:.2f}"])
    return rows


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}", *(f"| {' | '.join(r)} |" for r in rows)]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="64x64")
    parser.add_argument("--launches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    parser.add_argument("--gemm", default="512x512x512", help="gen.matmul's enqueue-bound shape, MxNxK")
    parser.add_argument("--shapes", default="5120x3072x2048,4096x4096x4096,2048x8192x4096,128x14336x4096,"
                                            "16x4096x4096", help="the single calls' shapes, MxNxK")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    found, missing, name = cases(args.size)
    for note in missing:
        print(note, file=sys.stderr)
    if not found:
        print("no case can run: install CuPy or PyTorch on a GPU machine", file=sys.stderr)
        return 1
    measured = per_launch_us(found, args.launches, args.rounds)
    cupy_us = measured.get("CuPy RawKernel, same cubin")
    tables = [(f"1. {name} at {args.size}: host us per launch, median of {args.rounds} alternating rounds of "
               f"{args.launches} launches", ["launch", "host us per launch", "vs CuPy RawKernel"],
               [[case, f"{us:.2f}", f"{us / cupy_us:.2f}x" if cupy_us else "-"] for case, us in measured.items()])]
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
        torch.backends.cuda.matmul.allow_tf32 = False
        tables.append((f"2. gen.matmul on {args.dtype} PyTorch tensors at {args.gemm}, enqueue-bound",
                       ["call", "host us per call", "vs torch.matmul(a, b)", "GPU us per call"],
                       matmul_host_rows(torch, args.gemm, dtype, args.launches, args.rounds)))
        tables.append((f"3. single calls on an idle GPU, {args.dtype}, us (median of {args.rounds})",
                       ["MxNxK", "tilegen kernel's own", "gen.matmul single call", "single / own", "cuBLAS own",
                        "torch.matmul single call", "cuBLAS own / tilegen own"],
                       single_call_rows(torch, args.shapes.split(","), dtype, args.rounds)))
        tables.append((f"4. the floor: a launch of {name} at {args.size} on an idle GPU, us (median of {args.rounds})",
                       ["launch", "own (back to back)", "single call", "added by the launch"],
                       floor_rows(torch, found, args.rounds)))
    text = f"{torch_and_cupy()}; numpy {np.__version__}\n"
    for title, header, rows in tables:
        print(f"\n{title}")
        print(text_table(header, rows))
        text += f"\n{title}\n\n" + markdown(header, rows)
    if args.markdown:
        args.markdown.write_text(text)
        print(f"written to {args.markdown}")
    return 0


def torch_and_cupy() -> str:
    versions = [f"{lib} {sys.modules[lib].__version__}" for lib in ("torch", "cupy") if lib in sys.modules]
    return ", ".join(versions) or "no PyTorch, no CuPy"


if __name__ == "__main__":
    sys.exit(main())
