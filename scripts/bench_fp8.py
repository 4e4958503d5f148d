#!/usr/bin/env python3
"""tilegen's FP8 GEMM beside cuBLAS's on this GPU (issue 49): gen.matmul (fp8gemm: this GPU's tuned
variant, or the family's default where none is tuned) and torch._scaled_mm on the same e4m3 inputs,
per-tensor scales, bfloat16 out, in one process. Each sample launches one case between CUDA events,
the L2 flushed before it; the cases take turns, sample by sample; the median is printed. Each output
is first compared with the float64 product of the same inputs (the relative error is printed).
Prints a table of medians and ratios with the geometric mean over the shapes of 512 tokens and more
(and writes it as Markdown with --markdown FILE); asserts nothing.

Shapes: 4096^3, 8192^3, and Llama-3-8B's and 70B's projections (qkv, o, gate-and-up, down) at 512 and
4096 tokens, M = tokens. --tune N first tunes each shape on this GPU (Bayesian search, N evaluations,
into the user's tuning database, which gen.matmul then reads); --variant PARAM=VALUE times that
fp8gemm variant instead of the tuned one. --scaling block gives both DeepGEMM's block scales (A per row
and 128 of K, B per 128 x 128 block: torch._scaled_mm's blockwise scaling) in place of per-tensor ones.

Usage: scripts/bench_fp8.py [--size MxNxK ...] [--tune N] [--samples 30] [--variant PARAM=VALUE ...]
                            [--scaling tensor|block] [--markdown FILE]
Needs an sm_90 GPU (H100, H200), PyTorch and pycuda.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_epilogue import medians_ms  # noqa: E402
from gen.core.table import markdown_table, text_table  # noqa: E402

CUBES = ["4096x4096x4096", "8192x8192x8192"]
PROJECTIONS = {"8B": {"qkv": (6144, 4096), "o": (4096, 4096), "gate-up": (28672, 4096), "down": (4096, 14336)},
               "70B": {"qkv": (10240, 8192), "o": (8192, 8192), "gate-up": (57344, 8192), "down": (8192, 28672)}}
TOKENS = (512, 4096)
SUITE = CUBES + [f"{tokens}x{n}x{k}" for model in PROJECTIONS.values() for n, k in model.values() for tokens in TOKENS]
# Launches of each case (compiles, module loads, cuBLAS's workspace, the SM clock's rise) before the
# samples: with one, the first shape of a run was measured at 85.5% of cuBLAS (4096^3) and at 90.4%
# later in the same run (docs/results/h200-fp8.md).
WARMUP_ROUNDS = 20


def warmed_medians_ms(cases: list[Callable[[], Any]], samples: int) -> list[float]:
    """bench_epilogue's medians (cases taking turns, the L2 flushed before every launch), after
    WARMUP_ROUNDS launches of each case."""
    import torch

    for _ in range(WARMUP_ROUNDS):
        for case in cases:
            case()
    torch.cuda.synchronize()
    return medians_ms(cases, samples)


def tilegen_case(size: str, arrays: dict[str, Any], params: dict[str, str],
                 scaling: str) -> tuple[str, Callable[[], Any]]:
    """gen.matmul on these tensors, or (with params) that fp8gemm variant through gen.kernel's Kernel."""
    import gen
    from gen.call.kernels import Kernel
    from gen.call.matmul import fp8_kernel
    from gen.families import get_family

    a, b, out, scale_a, scale_b = (arrays[name] for name in ("a", "b", "out", "scale_a", "scale_b"))
    if not params:  # the tuned (or untuned: safe_variant's) tiles with the call's scaling, as gen.matmul runs them
        return (fp8_kernel(size, "e4m3", scaling, "bf16").variant.name,
                lambda: gen.matmul(a, b, out, scale_a=scale_a, scale_b=scale_b))
    family = get_family("fp8gemm")
    variant = family.variant(params)
    prepared = Kernel(family, variant, family.parse_shape(size)).prepared(  # the scales as the kernel reads them
        A=a, B=b.t(), C=out, scale_a=scale_a.t().reshape(-1), scale_b=scale_b.t().reshape(-1))
    return variant.name, prepared


def scales(m: int, n: int, k: int, scaling: str) -> tuple[Any, Any, Any, Any]:
    """scale_a and scale_b as torch._scaled_mm takes them, and what they multiply A (M x K) and B (N x K) by:
    0.5 and 2 per tensor; per block, 0.5 or 2 by block (a's M x K/128 by columns, b's the transpose of
    w's N/128 x K/128)."""
    import torch

    if scaling == "tensor":
        return torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda"), 0.5, 2.0
    blocks_k, blocks_n = -(-k // 128), -(-n // 128)
    scale_a = (torch.arange(m * blocks_k, device="cuda") % 2 * 1.5 + 0.5).reshape(blocks_k, m).t()
    scale_w = (torch.arange(blocks_n * blocks_k, device="cuda") % 3 * 0.75 + 0.5).reshape(blocks_n, blocks_k)
    spread_a = scale_a.double().repeat_interleave(128, 1)[:, :k]
    return scale_a, scale_w.t(), spread_a, scale_w.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]


def measure(size: str, samples: int, params: dict[str, str], scaling: str) -> list[Any]:
    import torch

    m, n, k = (int(d) for d in size.split("x"))
    generator = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.rand(m, k, device="cuda", generator=generator) * 2 - 1).to(torch.float8_e4m3fn)
    b = (torch.rand(n, k, device="cuda", generator=generator) * 2 - 1).to(torch.float8_e4m3fn).t()  # K x N by columns
    scale_a, scale_b, times_a, times_b = scales(m, n, k, scaling)
    ours, theirs = (torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2))
    name, tilegen_call = tilegen_case(size, {"a": a, "b": b, "out": ours, "scale_a": scale_a, "scale_b": scale_b},
                                      params, scaling)

    def cublas_call() -> None:
        theirs.copy_(torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16))

    def cublas_only() -> Any:
        return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)

    cublas_call()
    tilegen_ms, cublas_ms = warmed_medians_ms([tilegen_call, cublas_only], samples)
    torch.cuda.synchronize()
    reference = (a.double() * times_a) @ (b.t().double() * times_b).t()
    errors = [float((c.double() - reference).norm() / reference.norm()) for c in (ours, theirs)]
    flops = 2 * m * n * k
    return [size, name, f"{tilegen_ms:.4f}", f"{cublas_ms:.4f}", f"{flops / tilegen_ms / 1e9:.1f}",
            f"{flops / cublas_ms / 1e9:.1f}", f"{cublas_ms / tilegen_ms:.1%}", f"{errors[0]:.2e}", f"{errors[1]:.2e}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", action="append", help="MxNxK (default: the cubes and the projections)")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--tune", type=int, metavar="N", help="first tune each shape (N evaluations)")
    parser.add_argument("--variant", action="append", default=[], help="time this fp8gemm parameter, PARAM=VALUE")
    parser.add_argument("--scaling", choices=("tensor", "block"), default="tensor")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    import torch

    sizes = args.size or SUITE
    if args.tune:
        from gen.commands.tune import TuneOptions, tune

        for size in sizes:
            print(f"tuning fp8gemm e4m3 {size} ({args.tune} evaluations)", flush=True)
            tune(TuneOptions("fp8gemm", size, params={"dtype": ["e4m3"]}, strategy="bayes", budget=args.tune,
                             progress=False))
    params = dict(item.split("=", 1) for item in args.variant)
    header = ["size", "tilegen variant", "tilegen ms", "cuBLAS ms", "tilegen TFLOP/s", "cuBLAS TFLOP/s",
              "of cuBLAS", "tilegen error", "cuBLAS error"]
    rows = []
    for size in sizes:
        rows.append(measure(size, args.samples, params, args.scaling))
        print(" | ".join(rows[-1]), flush=True)
    ratios = [float(row[6].rstrip("%")) / 100 for row in rows if int(row[0].split("x")[0]) >= 512]
    title = (f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__} (CUDA {torch.version.cuda}): e4m3, "
             f"{'per-tensor' if args.scaling == 'tensor' else 'block (1x128, 128x128)'} scales, bf16 out; medians of {args.samples} samples per case, cases alternating, L2 flushed "
             f"before each{f'; tuned with {args.tune} evaluations per shape' if args.tune else ''}")
    mean = f"geometric mean of tilegen / cuBLAS over {len(ratios)} shapes: {statistics.geometric_mean(ratios):.1%}"
    print(title)
    print(text_table(header, rows))
    print(mean)
    if args.markdown:
        args.markdown.write_text(f"{title}\n\n{markdown_table(header, rows)}\n\n{mean}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
