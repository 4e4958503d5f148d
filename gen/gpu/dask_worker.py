"""What runs ON a Dask worker of a tilegen cluster (gen.gpu.dask is the coordinator): the tasks the
coordinator submits (`device_task`, `jobs_task`) and the isolated GPU subprocess they share, kept
between tasks; and `serve_gpus`, which starts such Dask workers for `tilegen worker ADDRESS`.

Each Dask worker offers one `GPU` resource and runs one job at a time, in the same isolated
subprocess (gen.gpu.isolated.IsolatedWorker), fed by the same local executor (gen.gpu.local) with
the same hang timeout as on one host, so a crashing kernel never kills a Dask worker.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import socket
import stat
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from ..core.errors import RunFailed
from ..core.nvidia_smi import visible_gpus
from ..core.own_files import write_atomically
from ..core.processes import visible_devices_for
from ..core.results import DeviceInfo, Measurement
from .dask_cluster import GPU, GPU_TARGET_ENV, PRELOAD, check_reachable
from .process.jobs import Job
from .process.worker import WORKER
from .local import LocalExecutor

_held: dict[str, LocalExecutor] = {}  # this Dask worker's GPU subprocess per target, kept between tasks


def dask_setup(dask_worker: object) -> None:
    """Dask's preload hook, as a Dask worker of tilegen's starts: its GPU subprocess (of the target
    $TILEGEN_GPU_TARGET names) starts now, while the cluster and the coordinator still start, rather
    than with the first task (a second or more: python, pycuda, a context)."""
    target = os.environ.get(GPU_TARGET_ENV)
    if target:
        _held_gpu(target).start()


def device_task(silence_s: float, target: str) -> DeviceInfo:
    """Start this worker's GPU subprocess (or wait for its start) and say which GPU it holds."""
    (device,) = _gpu(silence_s, target).devices()
    return device


def jobs_task(jobs: list[Job], cubins: dict[str, bytes], silence_s: float, target: str) -> list[Measurement]:
    """Run jobs one after another on this worker's GPU, each cubin (by the coordinator's path)
    written to a local file first. They go through the local executor's seat table, as on one
    host: the GPU process holds the next job while it runs one, so it never waits for this
    process between two jobs, and one that hangs or crashes it is replaced for the jobs after."""
    paths = {name: _local_cubin(cubin) for name, cubin in cubins.items()}
    local = [replace(job, cubin=paths[job.cubin]) for job in jobs]
    measured = {id(job): measurement for job, measurement in _gpu(silence_s, target).run(local)}
    return [measured[id(job)] for job in local]


def _local_cubin(cubin: bytes) -> str:
    """A local file with these bytes, named by their hash (written once per worker host), in a
    folder of this user's alone: /tmp is everyone's, and a file found there is used only if it
    holds exactly these bytes."""
    folder = Path(tempfile.gettempdir()) / f"tilegen-cubins-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    found = folder.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise RunFailed(f"{folder} is not a folder of this user's alone (a link, another user's, or open to others); "
                        f"remove it, then run again")
    path = folder / f"{hashlib.sha256(cubin).hexdigest()[:32]}.cubin"
    if path.is_symlink() or not path.is_file() or path.read_bytes() != cubin:
        write_atomically(path, cubin)  # replaces a link there, never writes through it
    return str(path)


def stop_gpu_worker(target: str) -> None:
    """Stop this process's GPU subprocess that runs `target`, if there is one (the next task starts
    a fresh one)."""
    gpu = _held.pop(target, None)
    if gpu is not None:
        gpu.close()


def pinned_gpu() -> tuple[int, str | None]:
    """The GPU this process is pinned to by CUDA_VISIBLE_DEVICES: its index (the first listed when
    that is an index, else 0; for provenance and nvidia-smi) and the value itself, which its GPU
    process gets as it is (a UUID, a MIG id, a list: CUDA runs on the first); (0, None) if unset."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return 0, None
    first = visible.split(",")[0].strip()
    return (int(first) if first.isdigit() else 0), visible


def _gpu(silence_s: float, target: str) -> LocalExecutor:
    """This Dask worker's GPU subprocess, with the hang timeout of the run that calls now (runs one
    after another may differ)."""
    return _held_gpu(target).hang_after(silence_s)


def _held_gpu(target: str) -> LocalExecutor:
    """The executor of this Dask worker's one GPU subprocess of `target` (made here, not started;
    stopped at exit)."""
    gpu = _held.get(target)
    if gpu is None:
        index, visible = pinned_gpu()
        gpu = _held[target] = LocalExecutor([index], target=target, visible_devices=visible)
        atexit.register(gpu.close)
    return gpu


# ---- tilegen worker ADDRESS ------------------------------------------------------------------

def serve_gpus(address: str, gpus: Sequence[int] | None = None) -> int:
    """Start one Dask worker per GPU of this host for the scheduler at `address`, each pinned to its
    GPU with one `GPU` resource, and wait for them; Ctrl-C stops them."""
    check_reachable(address)  # a one-line error now, rather than workers retrying for ever
    chosen = list(gpus) if gpus is not None else (visible_gpus() or [0])
    host = socket.gethostname()
    processes = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                                   "--resources", f"{GPU}=1", "--name", f"{host}-gpu{gpu}", "--no-dashboard",
                                   "--preload", PRELOAD],
                                  env=dict(os.environ, CUDA_VISIBLE_DEVICES=visible_devices_for(gpu),
                                           **{GPU_TARGET_ENV: WORKER}))
                 for gpu in chosen]
    print(f"tilegen: {len(processes)} Dask worker(s) for {address} on GPU(s) {', '.join(map(str, chosen))}; "
          f"Ctrl-C stops them", file=sys.stderr, flush=True)
    try:
        return max(process.wait() for process in processes)
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
