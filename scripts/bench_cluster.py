#!/usr/bin/env python3
"""A sweep on one GPU against the same sweep on a local Dask cluster of every GPU, on one host,
then the cluster sweep again with one Dask worker killed (SIGKILL) in the middle.

The part `running` times the sweep on a Dask cluster already running, as a Dask user runs it: a
scheduler and `tilegen worker` on every GPU, started (and their GPU processes asked once, as an
earlier run would have) before the clock starts; `cluster` times `--cluster local`, its start included.

The compile cache is warmed first (and timed), so both sweeps measure the GPU side: jobs, rows,
the coordinator's work. Reports rows per second, the speed-up, how the jobs were shared, and
whether the killed run lost or duplicated a row. Prints tables and writes them as Markdown;
asserts nothing.

Usage: scripts/bench_cluster.py [--family sgemm] [--size 512x512x512] [--filter PATTERN] [--gpus 0,1]
                                [--timing-budget 0.05] [--parts compile,one,local,cluster,running,killed,tunes]
                                [--out DIR] [--markdown FILE]
       scripts/bench_cluster.py --parts simulated [--sim-start-s 1.4] [--sim-job-ms 10] [--sim-energy-s 0.6]

The part `tunes` times three cold tunes of the 180-point sgemm space at 2048^3 (scripts/bench_cold.py's
sgemm180, brute force): one GPU, every GPU with the local executor, every GPU on a local Dask cluster,
each `tilegen tune` from an empty compile cache and database (the GPU's ceilings kept, as bench_cold.py
keeps them).

Each part keeps its rows in DIR/<part>/ and its wall time in DIR/<part>.json, so the parts can run
in separate calls (a lent machine's 10-minute limit) and the report is made from those present. The
part `warm` fills the compile cache untimed, for a later call that lands on a fresh machine.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_cold's space


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="sgemm")
    parser.add_argument("--size", default="512x512x512")
    parser.add_argument("--filter", help="a name pattern, to sweep part of the default space")
    parser.add_argument("--gpus", default="0,1")
    parser.add_argument("--timing-budget", default="0.05", help="seconds of timing per variant (default: 0.05)")
    parser.add_argument("--parts", default="compile,one,local,cluster,killed")
    parser.add_argument("--out", type=Path, default=Path("runs/cluster"))
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--sim-start-s", type=float, default=1.4, help="a simulated GPU's start (part simulated)")
    parser.add_argument("--sim-job-ms", type=float, default=10.0, help="a simulated GPU's time a job")
    parser.add_argument("--sim-energy-s", type=float, default=0.6, help="and its extra time on an energy job")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    first_gpu = args.gpus.split(",")[0]
    parts = args.parts.split(",")

    compile_command = ["compile", args.family, "--arch", "sm_90", *space(args)]
    if "compile" in parts:
        save(args.out, "compile", {"wall_s": timed(compile_command, args.out / "compile.log")})
    if "warm" in parts:  # a fresh machine's cache, filled before the sweeps and not reported
        timed(compile_command, args.out / "warm.log")
    if "one" in parts:
        save(args.out, "one-gpu", sweep(args, "one-gpu", ["--gpus", first_gpu]))
    if "local" in parts:
        save(args.out, "local", sweep(args, "local", ["--gpus", args.gpus]))
    if "cluster" in parts:
        save(args.out, "cluster", sweep(args, "cluster", ["--gpus", args.gpus, "--cluster", "local"]))
    if "running" in parts:
        save(args.out, "running", running_cluster_sweep(args))
    if "killed" in parts:
        save(args.out, "killed", killed_sweep(args))
    if "tunes" in parts:
        for name, extra in (("one-gpu", ["--gpus", first_gpu]), ("local", ["--gpus", args.gpus]),
                            ("cluster", ["--gpus", args.gpus, "--cluster", "local"])):
            save(args.out, f"tune-{name}", {"wall_s": cold_tune(args, f"tune-{name}", extra)})
    if "simulated" in parts:
        print(simulated_tunes(args))
        if parts == ["simulated"]:
            return
    text = report(args)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")


def report(args: argparse.Namespace) -> str:
    """The table of the parts measured so far (in this call or earlier ones)."""
    from gen.core.table import markdown_table

    found = {name: json.loads((args.out / f"{name}.json").read_text())
             for name in ("compile", *RUNS) if (args.out / f"{name}.json").exists()}
    runs = [dict(found[name], rows=rows_of(args.out / name)) for name in RUNS if name in found]
    compiled = f", {found['compile']['wall_s']:.1f} s to compile it cold" if "compile" in found else ""
    lines = [f"{args.family} {args.size}{f' --filter {args.filter}' if args.filter else ''}, timing budget "
             f"{args.timing_budget} s per variant, compile cache warmed first{compiled}", "",
             markdown_table(["run", "wall s", "ok rows", "ok rows/s", "jobs per GPU index", "rows", "distinct"],
                            [[r["run"], f"{r['wall_s']:.1f}", r["ok"], f"{r['ok'] / r['wall_s']:.1f}",
                              r["shares"], len(r["rows"]), len(keys(r["rows"]))] for r in runs]), ""]
    for name, words in (("local", "the local executor on every GPU"), ("cluster", "the cluster"),
                        ("running", "the cluster already running")):
        if "one-gpu" in found and name in found and found["one-gpu"]["ok"]:
            one, two = found["one-gpu"], found[name]
            lines.append(f"- throughput of {words} over one GPU: "
                         f"**{(two['ok'] / two['wall_s']) / (one['ok'] / one['wall_s']):.2f}x** (target >= 1.8x)")
    tunes = {name: json.loads((args.out / f"tune-{name}.json").read_text())["wall_s"]
             for name in ("one-gpu", "local", "cluster") if (args.out / f"tune-{name}.json").exists()}
    if tunes:
        lines += ["", "cold 180-point brute-force tune (sgemm 2048^3): " + ", ".join(
            f"{name} {wall:.1f} s" + (f" ({tunes['one-gpu'] / wall:.2f}x)" if "one-gpu" in tunes else "")
            for name, wall in tunes.items())]
    if "killed" in found and "one-gpu" in found:
        killed, expected = runs[-1], keys(rows_of(args.out / "one-gpu"))
        lines += [f"- the killed run: worker {killed['victim']} killed after {killed['killed_after']} rows; lost rows: "
                  f"**{len(expected - keys(killed['rows']))}**, duplicated rows: "
                  f"**{len(killed['rows']) - len(keys(killed['rows']))}**, named as lost: {killed['lost']}",
                  f"- statuses the same as on one GPU: "
                  f"{statuses(rows_of(args.out / 'one-gpu')) == statuses(killed['rows'])} ({statuses(killed['rows'])})"]
    return "\n".join(lines)


RUNS = ("one-gpu", "local", "cluster", "running", "killed")  # the sweeps, in the report's order


def space(args: argparse.Namespace) -> list[str]:
    return ["--filter", args.filter] if args.filter else []


def save(out: Path, name: str, result: dict) -> None:
    (out / f"{name}.json").write_text(json.dumps({k: v for k, v in result.items() if k != "rows"}) + "\n")


def timed(command: list[str], log: Path, env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    with log.open("w") as output:
        subprocess.run([sys.executable, "-m", "gen", *command], stdout=output, stderr=subprocess.STDOUT, check=True,
                       env=env)
    return time.perf_counter() - started


def sgemm180_words() -> list[str]:
    """The 180-point sgemm space (bench_cold.py's) as `-p` words."""
    from bench_cold import SGEMM_180

    return [word for key, values in SGEMM_180.items() for word in ("-p", f"{key}={','.join(map(str, values))}")]


def cold_tune(args: argparse.Namespace, name: str, extra: list[str]) -> float:
    """The whole `tilegen tune` of bench_cold.py's sgemm180 space, from an empty compile cache and database."""
    from gen.core.paths import cache_dir

    cold = args.out / name
    shutil.rmtree(cold, ignore_errors=True)
    cold.mkdir(parents=True)
    if (cache_dir() / "ceilings.json").exists():
        shutil.copy(cache_dir() / "ceilings.json", cold / "ceilings.json")
    return timed(["tune", "sgemm", "--size", "2048x2048x2048", *sgemm180_words(), "--strategy", "brute", "--arch", "sm_90",
                  "--db", str(cold / "tuning.sqlite"), *extra], args.out / f"{name}.log",
                 dict(os.environ, TILEGEN_CACHE=str(cold)))


def simulated_tunes(args: argparse.Namespace) -> str:
    """The 180-point brute-force tune on simulated GPUs: one, two local, two on Dask; where its time went."""
    import tempfile

    from bench_cold import SGEMM_180

    from gen.commands.tune import TuneOptions, tune
    from gen.core.table import markdown_table
    from gen.core.timing import TUNE_TIMING
    from gen.evaluate.options import RunOptions
    from gen.gpu.dask import DaskExecutor
    from gen.gpu.local import LocalExecutor
    from tests.fakes import ENERGY_S, SERVICE_S, START_S

    os.environ.update({SERVICE_S: str(args.sim_job_ms / 1000), ENERGY_S: str(args.sim_energy_s),
                       START_S: str(args.sim_start_s), "DASK_DISTRIBUTED__DIAGNOSTICS__NVML": "False"})
    params = {key: list(values) for key, values in SGEMM_180.items()}
    timed(["compile", "sgemm", "--arch", "sm_90", *sgemm180_words()], args.out / "simulated-compile.log")
    target, rows = "tests.fakes:timed_worker", []
    for name, make in (("one GPU", lambda: LocalExecutor([0], target=target)),
                       ("two, local", lambda: LocalExecutor([0, 1], target=target)),
                       ("two, Dask", lambda: DaskExecutor("local", [0, 1], target=target))):
        with tempfile.TemporaryDirectory() as folder:
            options = TuneOptions("sgemm", "2048x2048x2048", params, strategy="brute", db=Path(folder) / "t.sqlite",
                                  progress=False, run=RunOptions(arch="sm_90", timing=TUNE_TIMING))
            began = time.perf_counter()
            executor = make()
            try:
                (result,) = tune(options, executor)
            finally:
                executor.close()
            wall, start = time.perf_counter() - began, result.trace_seconds[0]
            before = wall - result.seconds  # making the executor (a Dask cluster's start)
            rows.append([name, f"{wall:.2f}", f"{before + start:.2f}", f"{result.trace_seconds[-1] - start:.2f}",
                         f"{result.seconds - result.trace_seconds[-1]:.2f}"])
    return (f"simulated GPUs: ready after {args.sim_start_s} s, {args.sim_job_ms} ms a job, {args.sim_energy_s} s "
            f"more an energy job; the 180 variants in the compile cache\n\n" +
            markdown_table(["run", "wall s", "to the first row", "the search's rows", "finalists, default, end"],
                           rows))


def sweep(args: argparse.Namespace, name: str, extra: list[str]) -> dict:
    out = args.out / name
    wall = timed(["sweep", args.family, "--size", args.size, "--out", str(out), "--arch", "sm_90",
                  "--timing-budget", args.timing_budget, *space(args), *extra], args.out / f"{name}.log")
    return summary(name, out, wall)


def running_cluster_sweep(args: argparse.Namespace) -> dict:
    """The cluster sweep on a Dask scheduler and `tilegen worker` started beforehand, each GPU process
    asked for its GPU once (what an earlier run leaves), so that only the command is timed."""
    from distributed import Client

    from gen.gpu.dask_cluster import GPU
    from gen.gpu.dask_worker import device_task
    from gen.gpu.process.worker import WORKER

    with socket.socket() as probe:  # a free port for the scheduler
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    with (args.out / "running-cluster.log").open("w") as log:
        started = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                     "--port", address.rsplit(":", 1)[1], "--no-dashboard"], stdout=log, stderr=log)]
        try:
            started.append(subprocess.Popen([sys.executable, "-m", "gen", "worker", address, "--gpus", args.gpus],
                                            stdout=log, stderr=log))
            with Client(address, timeout=60) as client:
                client.wait_for_workers(len(args.gpus.split(",")), timeout=120)
                client.gather([client.submit(device_task, 30.0, WORKER, workers=[worker], resources={GPU: 1},
                                             pure=False) for worker in client.scheduler_info(n_workers=-1)["workers"]])
            return sweep(args, "running", ["--gpus", args.gpus, "--cluster", address])
        finally:
            for process in reversed(started):  # the workers first (tilegen worker stops its Dask workers)
                process.terminate()
                process.wait()


def killed_sweep(args: argparse.Namespace) -> dict:
    """The cluster sweep through the API, one Dask worker process SIGKILLed a third of the way in."""
    from gen.gpu.dask import DaskExecutor
    from gen.evaluate.options import RunOptions
    from gen.core.timing import TimingOptions
    from gen.commands.sweep import SweepOptions, sweep as run_sweep
    from gen.core.nvidia_smi import parse_gpus

    out = args.out / "killed"
    executor = DaskExecutor("local", parse_gpus(args.gpus))
    started = time.perf_counter()
    timing = TimingOptions(budget_s=float(args.timing_budget))
    options = SweepOptions(args.family, out, sizes=[args.size], filter=args.filter, progress=False,
                           run=RunOptions(arch="sm_90", gpus=parse_gpus(args.gpus), timing=timing))
    done = threading.Thread(target=run_sweep, args=(options,), kwargs={"executor": executor})
    done.start()
    one_gpu = args.out / "one-gpu.json"
    kill_at = max(json.loads(one_gpu.read_text())["ok"] // 3, 1) if one_gpu.exists() else 300  # a third of the way
    results, victim, killed_after = out / "results.jsonl", None, 0
    while done.is_alive():
        time.sleep(0.2)
        count = len(results.read_text().splitlines()) if results.exists() else 0
        if victim is None and count >= kill_at:
            victim = executor.gpu_workers()[-1]
            pid = executor.client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)
            killed_after = count
    result = summary("cluster, a worker killed", out, time.perf_counter() - started)
    return dict(result, victim=victim, killed_after=killed_after, lost=executor.lost)


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def summary(name: str, out: Path, wall: float) -> dict:
    rows = rows_of(out)
    shares = collections.Counter(r["provenance"].get("gpu_index") for r in rows if r["status"] == "ok")
    return {"run": name, "wall_s": wall, "rows": rows, "ok": sum(r["status"] == "ok" for r in rows),
            "shares": ", ".join(f"{index}: {count}" for index, count in sorted(shares.items()))}


def keys(rows: list[dict]) -> set[tuple[str, str]]:
    return {(r["name"], r["shape"]) for r in rows}


def statuses(rows: list[dict]) -> dict[str, int]:
    return dict(sorted(collections.Counter(r["status"] for r in rows).items()))


if __name__ == "__main__":
    main()
