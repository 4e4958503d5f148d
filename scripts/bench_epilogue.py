#!/usr/bin/env python3
"""What a fused epilogue costs and saves on this GPU (issue 48): a variant with bias + GELU (tanh) fused
(gen.matmul's untuned choice for the shape: gemv's at one token, else wgmma's, unless --variant changes
it), the same variant without the epilogue, and torch.matmul followed by PyTorch's bias add and GELU,
in bfloat16, in one process on the same inputs. Each sample launches one case between CUDA events, the
L2 flushed before it; the cases take turns, sample by sample. Each output is first compared with the
float32 result of the same formula (PyTorch's): the relative error is printed beside the times.
Prints a table of medians (and writes it as Markdown with --markdown FILE); asserts nothing.

With --models, the shapes of scripts/bench_vs_vendor.py --models (those of dense arrays), and a
summary against the issue's targets: the fused epilogue's cost over no epilogue, and its time against
torch.matmul's then PyTorch's bias and GELU.

Usage: scripts/bench_epilogue.py [--size MxNxK ... | --models] [--samples 30] [--variant PARAM=VALUE ...] [--markdown FILE]
Needs an sm_90 GPU (H100, H200) and PyTorch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gen.call.kernels import Kernel  # noqa: E402
from gen.core.table import markdown_table, text_table  # noqa: E402
from gen.families import get_family  # noqa: E402
from model_shapes import MODEL_SHAPES  # noqa: E402  (scripts/, beside this one)

SIZES = ["4096x4096x4096", "8192x4096x14336"]
FUSED = {"dtype": "bf16", "bias": "col", "act": "gelu-tanh"}
FLUSH_BYTES = 256 * 2**20  # over five times an H100's or H200's L2


def tilegen_case(params: dict[str, str], size: str, arrays: dict[str, Any]) -> tuple[str, Callable[[], None]]:
    """A variant's call (gen.kernel's path: a stream-K variant's workspace is the stream's) on these
    PyTorch tensors, on PyTorch's stream, of gen.matmul's family on an H100 or H200 (gemv for its rows of A,
    else wgmma); called once here, so that compiling and loading are not timed."""
    gemv = get_family("gemv")
    family = gemv if int(size.split("x")[0]) <= gemv.matmul_rows else get_family("wgmma")
    shape = family.parse_shape(size)
    variant = family.variant({**family.safe_variant(shape, "bf16").params(), **params})
    kernel = Kernel(family, variant, shape)
    ordered = [arrays[name] for name in kernel.arrays]
    kernel(*ordered)
    return variant.name, lambda: kernel(*ordered)


def medians_ms(cases: list[Callable[[], None]], samples: int) -> list[float]:
    """Each case's median over `samples` event-timed launches, the cases taking turns, the L2 flushed
    before every launch."""
    import torch

    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    for case in cases:  # warm-up: module loads, PyTorch's workspace
        case()
    times: list[list[float]] = [[] for _ in cases]
    for sample in range(samples):
        events = []
        for i in [(sample + j) % len(cases) for j in range(len(cases))]:  # a different case first each round
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            cases[i]()
            end.record()
            events.append((i, start, end))
        torch.cuda.synchronize()
        for i, start, end in events:
            times[i].append(start.elapsed_time(end))
    return [statistics.median(t) for t in times]


def measure(size: str, samples: int, fused: dict[str, str]) -> list[list[Any]]:
    import torch

    m, n, k = (int(d) for d in size.split("x"))
    generator = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.rand(m, k, device="cuda", generator=generator) - 0.5).bfloat16()
    b = (torch.rand(k, n, device="cuda", generator=generator) - 0.5).bfloat16()
    bias = (torch.rand(n, device="cuda", generator=generator) - 0.5).bfloat16()
    fused_out, plain_out = (torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2))
    fused_name, fused_call = tilegen_case(fused, size, {"A": a, "B": b, "C": fused_out, "bias": bias})
    plain = {key: value for key, value in fused.items() if key not in ("bias", "act")}
    plain_name, plain_call = tilegen_case(plain, size, {"A": a, "B": b, "C": plain_out})
    torch_out: dict[str, Any] = {}

    def torch_call() -> None:
        c = torch.matmul(a, b)
        c.add_(bias)
        torch_out["C"] = torch.nn.functional.gelu(c, approximate="tanh")

    cases = [fused_call, plain_call, torch_call]
    times = medians_ms(cases, samples)
    product = a.float() @ b.float()
    expected = {"fused": torch.nn.functional.gelu(product + bias.float(), approximate="tanh"), "plain": product}
    got = {"fused": fused_out, "plain": plain_out, "torch": torch_out["C"]}
    expected["torch"] = expected["fused"]
    error = {key: float((got[key].float() - expected[key]).norm() / expected[key].norm()) for key in got}
    flops = 2 * m * n * k
    names = [("fused", f"tilegen {fused_name}"), ("plain", f"tilegen {plain_name} (no epilogue)"),
             ("torch", "torch.matmul, then + bias and GELU (tanh)")]
    return [[size, label, f"{t:.4f}", f"{flops / t / 1e9:.1f}", f"{t / times[1]:.3f}", f"{error[key]:.2e}"]
            for (key, label), t in zip(names, times)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", action="append", help=f"MxNxK (default: {', '.join(SIZES)})")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--variant", action="append", default=[],
                        help="a parameter of the fused variant, PARAM=VALUE (default: gen.matmul's untuned choice, "
                             "bf16, bias=col, act=gelu-tanh)")
    parser.add_argument("--models", action="store_true", help="the model suite's shapes (scripts/model_shapes.py)")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    import torch

    fused = {**FUSED, **dict(item.split("=", 1) for item in args.variant)}
    sizes = [size for size in MODEL_SHAPES if ":" not in size] if args.models else args.size or SIZES
    rows = []
    for size in sizes:
        rows += measure(size, args.samples, fused)
        print(" | ".join(map(str, rows[-3])), flush=True)
    header = ["size", "case", "median ms", "TFLOP/s", "vs no epilogue", "error vs float32"]
    title = (f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__} (CUDA {torch.version.cuda}): medians of "
             f"{args.samples} samples per case, cases alternating, L2 flushed before each")
    summary = targets(rows)
    print(title)
    print(text_table(header, rows))
    print(summary)
    if args.markdown:
        args.markdown.write_text(f"{title}\n\n{markdown_table(header, rows)}\n\n{summary}\n")
    return 0


def targets(rows: list[list[Any]]) -> str:
    """Issue 48's two figures over the shapes: the fused epilogue's cost over the same variant without
    it (at most 3%), and torch.matmul plus PyTorch's bias and GELU over the fused variant (above 1)."""
    fused, torch_ = rows[0::3], rows[2::3]
    costs = {row[0]: float(row[4]) for row in fused}
    gains = {f[0]: float(t[2]) / float(f[2]) for f, t in zip(fused, torch_)}
    worst_cost, worst_gain = max(costs, key=costs.get), min(gains, key=gains.get)
    return (f"- fused over no epilogue: median {statistics.median(costs.values()):.3f}, highest {costs[worst_cost]:.3f} "
            f"({worst_cost}); {sum(c <= 1.03 for c in costs.values())} of {len(costs)} within 3%\n"
            f"- torch.matmul + bias + GELU over fused: lowest {gains[worst_gain]:.2f}x ({worst_gain}); fused faster at "
            f"{sum(g > 1 for g in gains.values())} of {len(gains)} shapes")


if __name__ == "__main__":
    raise SystemExit(main())
