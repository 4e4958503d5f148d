#!/usr/bin/env python3
"""Kernel Tuner's own CUDA examples through Kernel Tuner's brute force and through gen.tune_kernel,
on the same GPU: the same call (only the import differs), each run cold in a process of its own
(tilegen: an empty compile cache and tuning database; Kernel Tuner: no cache file), the two tools
alternating. Prints, per example: each tool's winner, its time, the cold tune's wall time, and
tilegen's time of Kernel Tuner's winner (so a different winner can be judged against the noise).
With --markdown, each tool's stderr (tilegen's progress and summary) is kept beside the table as
TOOL-EXAMPLE.log. Asserts nothing.

The example files are not in this repository: copy them from KernelTuner/kernel_tuner
(examples/cuda/vector_add.py's kernel is inline; convolution.cu, matmul.cu and expdist.cu are
files) into one folder and give it with --examples. The calls below follow the examples' own
scripts (convolution.py, matmul.py, expdist.py), with these changes, the same for both tools:
an `answer` where one can be computed with NumPy (vector_add, convolution, matmul), in the output's
type (float32: Kernel Tuner reads the output into an array like the answer), so both tools check
every configuration; the matmul space without the configurations whose static shared memory passes
48 KiB (Kernel Tuner stops at them); the convolution's filter fixed at its source's 17x17 and a space of
84 points instead of its 3 million, without the 512-thread blocks (64x8: on an H100 8 of their 12
configurations fail to launch in tilegen, launch_error rows, and Kernel Tuner stops the whole tune
at the first of them, reading it as a wrong result); expdist's first kernel only, checked by a verify
function (each block writes its partial sum, laid out by the configuration, so the check is that
they add up to the float64 total; cloudpickle must be installed, to send it to tilegen's workers),
compiled by nvcc in tilegen (it includes cub/cub.cuh, whose host code NVRTC does not take), over 96
of its 960 configurations, with lang="PYCUDA" (Kernel Tuner's cuda-python backend, its default, fails to load
this module on an H100 with CUDA 13: CUDA_ERROR_INVALID_IMAGE; its pycuda backend compiles with nvcc).

With --params JSON (an example's tune_params, replaced), a few configurations can be timed by both
tools over several --rounds, to see whether two near-equal winners are apart beyond each tool's noise.

Usage: scripts/bench_vs_kernel_tuner_examples.py --examples DIR [--rounds 1] [--only NAME,...] [--markdown FILE]
                                                 [--params JSON]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

EXAMPLES = ("vector_add", "convolution", "matmul", "expdist")
VECTOR_ADD = """
__global__ void vector_add(float *c, float *a, float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i<n) {
        c[i] = a[i] + b[i];
    }
}
"""


def call(example: str, folder: Path) -> tuple[tuple, dict]:
    """The example's tune_kernel arguments: (positional, keywords)."""
    rng = np.random.default_rng(7)
    if example == "vector_add":
        size = 10_000_000
        a, b = rng.standard_normal(size, np.float32), rng.standard_normal(size, np.float32)
        return (("vector_add", VECTOR_ADD, size, [np.zeros_like(b), a, b, np.int32(size)],
                 {"block_size_x": [128 + 64 * i for i in range(15)]}), {"answer": [a + b, None, None, None]})
    if example == "convolution":
        return _convolution(folder, rng)
    if example == "matmul":
        a = rng.standard_normal((4096, 4096), np.float32)
        b = rng.standard_normal((4096, 4096), np.float32)
        params = {"block_size_x": [16 * 2**i for i in range(3)], "block_size_y": [2**i for i in range(6)],
                  "tile_size_x": [2**i for i in range(4)], "tile_size_y": [2**i for i in range(4)]}
        fits = "block_size_y*tile_size_y*block_size_x*(1+tile_size_x)*4 <= 48*1024"  # static shared memory
        return (("matmul_kernel", str(folder / "matmul.cu"), (4096, 4096), [np.zeros_like(a), a, b], params),
                {"grid_div_x": ["block_size_x", "tile_size_x"], "grid_div_y": ["block_size_y", "tile_size_y"],
                 "restrictions": ["block_size_x==block_size_y*tile_size_y", fits], "iterations": 32,
                 "answer": [(a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32), None, None], "atol": 1e-2})
    return _expdist(folder, rng)


def _convolution(folder: Path, rng: np.random.Generator) -> tuple[tuple, dict]:
    size, fh, fw = 4096, 17, 17
    image = rng.standard_normal((size + fh - 1, size + fw - 1), np.float32)
    weights = rng.standard_normal(33 * 33, np.float32)  # the source's d_filter holds 33x33
    kernel = weights[:fh * fw].reshape(fh, fw).astype(np.float64)
    shape = image.shape  # correlation by FFT, in float64
    product = np.fft.rfft2(image.astype(np.float64)) * np.conj(np.fft.rfft2(kernel, shape))
    expected = np.fft.irfft2(product, shape)[:size, :size]
    params = {"block_size_x": [16, 32, 64], "block_size_y": [4, 8], "tile_size_x": [1, 2], "tile_size_y": [1, 2, 4],
              "use_padding": [0, 1], "read_only": [0, 1]}
    return (("convolution_kernel", str(folder / "convolution.cu"), (size, size),
             [np.zeros(size * size, np.float32), image.ravel(), weights], params),
            {"grid_div_x": ["block_size_x", "tile_size_x"], "grid_div_y": ["block_size_y", "tile_size_y"],
             "cmem_args": {"d_filter": weights},
             "restrictions": ["use_padding==0 or (block_size_x % 32 != 0)", "block_size_x*block_size_y<=256"],
             "answer": [expected.ravel().astype(np.float32), None, None], "atol": 1e-2})  # 289 float32 products a sum


def _expdist(folder: Path, rng: np.random.Generator) -> tuple[tuple, dict]:
    params = {"block_size_x": [32, 64, 128, 256], "block_size_y": [1, 2, 4, 8], "tile_size_x": [1, 2, 4],
              "tile_size_y": [1, 2], "use_shared_mem": [1]}  # 96 of the example's 960: Kernel Tuner compiles each with nvcc
    alloc, size, ndim = 3000, np.int32(2000), 2
    a = rng.standard_normal(alloc * ndim)
    b = a + 0.00001 * rng.standard_normal(alloc * ndim)
    scale_a, scale_b = np.absolute(0.01 * rng.standard_normal(alloc)), np.absolute(0.01 * rng.standard_normal(alloc))
    blocks = int(np.ceil(size / 32.0) * np.ceil(size / 1.0))
    m = int(size)  # the kernel reads dimension d of point i at A[d * m + i]
    distance = sum((a[d * m:(d + 1) * m, None] - b[None, d * m:(d + 1) * m]) ** 2 for d in range(ndim))
    expected = np.zeros(blocks)
    expected[0] = np.exp(-distance / (scale_a[:m, None] + scale_b[None, :m])).sum()  # the partial sums' total
    return (("ExpDist", str(folder / "expdist.cu"), (size, size),
             [a, b, size, size, scale_a, scale_b, np.zeros(blocks)], params),
            {"grid_div_x": ["block_size_x", "tile_size_x"], "grid_div_y": ["block_size_y", "tile_size_y"],
             "answer": [None] * 6 + [expected], "verify": same_total,
             "lang": "PYCUDA"})  # Kernel Tuner's pycuda backend: its cuda-python one fails to load this module


def same_total(answer: list, result: list, atol: float | None = None) -> bool:
    """expdist's check: the blocks' partial sums (laid out by the configuration) add up to the
    float64 total of every pair's term (tilegen sends this function to its workers with cloudpickle)."""
    total = answer[-1].sum()
    return bool(abs(result[-1].sum() - total) <= 1e-9 * abs(total))


def child(tool: str, example: str, folder: Path, params: dict | None) -> dict[str, Any]:
    """One cold tune in this process (over `params` when given); what it found."""
    if tool == "kernel_tuner":
        from kernel_tuner import tune_kernel
    else:
        from gen import tune_kernel
    positional, keywords = call(example, folder)
    if params:
        positional = (*positional[:4], params)
    started = time.perf_counter()
    results, env = tune_kernel(*positional, strategy="brute_force", **keywords, **(
        {} if tool == "tilegen" else {"verbose": False}))  # tilegen's progress and summary: on stderr, logged
    seconds = time.perf_counter() - started
    names = list(positional[4])
    timed = [r for r in results if isinstance(r.get("time"), (int, float))]
    best = min(timed, key=lambda r: r["time"])
    statuses: dict[str, int] = {}
    for r in results:
        status = "ok" if isinstance(r.get("time"), (int, float)) else str(r.get("time"))[:80]
        statuses[status] = statuses.get(status, 0) + 1
    return {"tool": tool, "example": example, "seconds": seconds, "configs": len(results), "ok": len(timed),
            "statuses": statuses, "gpu_seconds": env.get("gpu_seconds"),
            "winner": {n: best[n] for n in names}, "time_ms": best["time"],
            "times": {json.dumps({n: r[n] for n in names}): r["time"] for r in timed}}


def run_child(tool: str, example: str, folder: Path, log_folder: Path | None, params: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        env = dict(os.environ, TILEGEN_CACHE=f"{scratch}/cache", TILEGEN_DB=f"{scratch}/tuning.sqlite")
        if example == "expdist":
            env["TILEGEN_COMPILER"] = "nvcc"
        done = subprocess.run([sys.executable, __file__, "--child", tool, example, "--examples", str(folder),
                               *(["--params", params] if params else [])],
                              env=env, capture_output=True, text=True)
    if log_folder is not None:
        (log_folder / f"{tool}-{example}.log").write_text(done.stderr)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"tool": tool, "example": example, "error": last}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(found: list[dict[str, Any]]) -> str:
    lines = ["| example | tool | configs (ok) | winner | winner ms | tilegen ms of Kernel Tuner's winner | cold tune s |",
             "|---|---|---|---|---|---|---|"]
    by_example: dict[str, dict[str, dict]] = {}
    for run in found:
        by_example.setdefault(run["example"], {})[run["tool"]] = run
    for example, runs in by_example.items():
        kt, tg = runs.get("kernel_tuner", {}), runs.get("tilegen", {})
        for run in (kt, tg):
            if not run:
                continue
            if "error" in run:
                lines.append(f"| {example} | {run['tool']} | failed: {run['error']} | | | | |")
                continue
            mine = tg.get("times", {}).get(json.dumps(kt["winner"])) if "winner" in kt else None
            cross = f"{mine:.4g}" if run is tg and mine is not None else ""
            lines.append(f"| {example} | {run['tool']} | {run['configs']} ({run['ok']}) | "
                         f"{' '.join(f'{k}={v}' for k, v in run['winner'].items())} | {run['time_ms']:.4g} | {cross} | "
                         f"{run['seconds']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=Path, required=True, help="folder holding Kernel Tuner's example files")
    parser.add_argument("--rounds", type=int, default=1, help="times each tool runs each example, alternating")
    parser.add_argument("--only", type=lambda text: text.split(","), help=f"examples, comma-separated: {', '.join(EXAMPLES)}")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown to this file")
    parser.add_argument("--params", help="JSON: tune_params to use instead of the example's own")
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "EXAMPLE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.examples.resolve(),
                              json.loads(args.params) if args.params else None)))
        return
    unknown = sorted(set(args.only or ()) - set(EXAMPLES))
    if unknown:
        parser.error(f"--only: no example {unknown[0]!r}; choose from {', '.join(EXAMPLES)}")
    found = []
    for example in args.only or EXAMPLES:
        for round_ in range(args.rounds):
            order = ("kernel_tuner", "tilegen") if round_ % 2 == 0 else ("tilegen", "kernel_tuner")
            for tool in order:
                found.append(run_child(tool, example, args.examples.resolve(), args.markdown.parent if args.markdown else None,
                                       args.params))
                print(json.dumps(found[-1]), flush=True)
    text = table(found)
    print(text)
    if args.markdown:
        args.markdown.write_text(f"# Kernel Tuner's examples: Kernel Tuner's brute force and gen.tune_kernel\n\n"
                                 f"Made by scripts/bench_vs_kernel_tuner_examples.py.\n\n{text}\n")


if __name__ == "__main__":
    main()
