#!/usr/bin/env python3
"""A sweep on one GPU against the same sweep on a local Dask cluster of every GPU, on one host,
then the cluster sweep again with one Dask worker killed (SIGKILL) in the middle.

The compile cache is warmed first (and timed), so both sweeps measure the GPU side: jobs, rows,
the coordinator's work. Reports rows per second, the speed-up, how the jobs were shared, and
whether the killed run lost or duplicated a row. Prints tables and writes them as Markdown;
asserts nothing.

Usage: scripts/bench_cluster.py [--family sgemm] [--size 1024x1024x1024] [--gpus 0,1] [--out DIR]
                                [--markdown FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="sgemm")
    parser.add_argument("--size", default="1024x1024x1024")
    parser.add_argument("--gpus", default="0,1")
    parser.add_argument("--out", type=Path, default=Path("runs/cluster"))
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    first_gpu = args.gpus.split(",")[0]

    compile_s = timed(["compile", args.family, "--arch", "sm_90"], args.out / "compile.log")
    one = sweep(args, "one-gpu", ["--gpus", first_gpu])
    two = sweep(args, "cluster", ["--gpus", args.gpus, "--cluster", "local"])
    killed = killed_sweep(args)

    from gen.table import markdown_table

    expected = keys(one["rows"])
    lines = [f"{args.family} {args.size}, the default space ({len(expected)} points, "
             f"{sum(r['status'] == 'ok' for r in one['rows'])} ok), compile cache warmed first "
             f"({compile_s:.1f} s cold, 32 cores)", "",
             markdown_table(["run", "wall s", "ok rows", "ok rows/s", "jobs per GPU index", "rows", "distinct"],
                            [[r["run"], f"{r['wall_s']:.1f}", r["ok"], f"{r['ok'] / r['wall_s']:.1f}",
                              r["shares"], len(r["rows"]), len(keys(r["rows"]))] for r in (one, two, killed)]), "",
             f"- throughput of the cluster over one GPU: **{(two['ok'] / two['wall_s']) / (one['ok'] / one['wall_s']):.2f}x**"
             f" (target >= 1.8x)",
             f"- the killed run: worker {killed['victim']} killed after {killed['killed_after']} rows; lost rows: "
             f"**{len(expected - keys(killed['rows']))}**, duplicated rows: "
             f"**{len(killed['rows']) - len(keys(killed['rows']))}**, named as lost: {killed['lost']}",
             f"- statuses the same as on one GPU: {statuses(one['rows']) == statuses(killed['rows'])} "
             f"({statuses(killed['rows'])})"]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")


def timed(command: list[str], log: Path) -> float:
    started = time.perf_counter()
    with log.open("w") as output:
        subprocess.run([sys.executable, "-m", "gen", *command], stdout=output, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - started


def sweep(args: argparse.Namespace, name: str, extra: list[str]) -> dict:
    out = args.out / name
    wall = timed(["sweep", args.family, "--size", args.size, "--out", str(out), "--arch", "sm_90", *extra],
                 args.out / f"{name}.log")
    return summary(name, out, wall)


def killed_sweep(args: argparse.Namespace) -> dict:
    """The cluster sweep through the API, one Dask worker process SIGKILLed a third of the way in."""
    from gen.cluster import DaskExecutor
    from gen.pipeline import RunOptions
    from gen.sweep import SweepOptions, sweep as run_sweep
    from gen.worker import parse_gpus

    out = args.out / "killed"
    executor = DaskExecutor("local", parse_gpus(args.gpus))
    started = time.perf_counter()
    done = threading.Thread(target=run_sweep, args=(SweepOptions(args.family, out, sizes=[args.size], progress=False,
                                                                  run=RunOptions(arch="sm_90")),),
                            kwargs={"executor": executor})
    done.start()
    results, victim, killed_after = out / "results.jsonl", None, 0
    while done.is_alive():
        time.sleep(0.2)
        count = len(results.read_text().splitlines()) if results.exists() else 0
        if victim is None and count >= 1000:
            victim = executor.gpu_workers()[-1]
            pid = executor._client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)
            killed_after = count
    result = summary("cluster, a worker killed", out, time.perf_counter() - started)
    return dict(result, victim=victim, killed_after=killed_after, lost=executor.lost)


def summary(name: str, out: Path, wall: float) -> dict:
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    shares = collections.Counter(r["provenance"].get("gpu_index") for r in rows if r["status"] == "ok")
    return {"run": name, "wall_s": wall, "rows": rows, "ok": sum(r["status"] == "ok" for r in rows),
            "shares": ", ".join(f"{index}: {count}" for index, count in sorted(shares.items()))}


def keys(rows: list[dict]) -> set[tuple[str, str]]:
    return {(r["name"], r["shape"]) for r in rows}


def statuses(rows: list[dict]) -> dict[str, int]:
    return dict(sorted(collections.Counter(r["status"] for r in rows).items()))


if __name__ == "__main__":
    main()
