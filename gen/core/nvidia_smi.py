"""The one place that asks nvidia-smi: which GPUs this host has (`--gpus all`), their compute
capability (the local nvcc architecture) and the driver's version (provenance).

nvidia-smi is an external tool like nvcc: it runs in a session of its own with a deadline, and a
machine without it (or whose driver does not answer) is an answer too: nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Callable, Sequence

from .checks import whole_text
from .errors import UsageError
from .processes import ProcessGroup

DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")  # "NVRM version: NVIDIA UNIX ... Kernel Module  580.159.04 ..."
NVIDIA_SMI_TIMEOUT_S = 20.0  # a driver that does not answer within this is taken as no driver


def query(fields: Sequence[str], gpu: int | None = None, timeout_s: float = NVIDIA_SMI_TIMEOUT_S) -> list[str]:
    """The lines `nvidia-smi --query-gpu=FIELDS --format=csv,noheader` prints (of GPU `gpu` alone,
    if given), one per GPU, stripped; [] when nvidia-smi is missing, fails, or has not answered
    within `timeout_s` (it is killed then)."""
    command = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"]
    if gpu is not None:
        command += ["-i", str(gpu)]
    try:
        done = ProcessGroup().run(command, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:  # it prints why on stdout ("NVIDIA-SMI has failed ..."): not an answer
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def visible_gpus() -> list[int]:
    """The indices nvidia-smi lists (within CUDA_VISIBLE_DEVICES when that is set), else []."""
    try:
        indices = [int(index) for index in query(["index"])]
    except ValueError:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        allowed = {int(part) for part in visible.split(",") if part.strip().isdigit()}
        indices = [i for i in indices if i in allowed]
    return indices


def parse_gpus(text: str) -> list[int]:
    """'0,1' -> [0, 1]; 'all' -> every GPU nvidia-smi lists (or [0] when it lists none)."""
    if text.strip() == "all":
        return visible_gpus() or [0]
    gpus = [whole_text(part.strip(), negative=True) for part in text.split(",")]  # -1 read, to be named below
    if None in gpus:
        raise UsageError(f"--gpus {text!r} must be 'all' or GPU indices like 0,1")
    if not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus):
        raise UsageError(f"--gpus {text!r} must list distinct GPU indices like 0,1")
    return gpus


def driver_version(gpu: int, api_version: Callable[[], int]) -> str:
    """The driver's version as nvidia-smi prints it (580.159.04): its kernel module's, read where
    Linux shows it (every GPU worker asks as it starts, and nvidia-smi takes a while to start), else
    nvidia-smi's answer; else the CUDA API version it serves, which `api_version` asks the driver for
    (through whichever CUDA binding the caller has)."""
    listed = [found] if (found := _kernel_module_version()) else query(["driver_version"], gpu=gpu)
    if listed:
        return listed[0]
    api = api_version()
    return f"CUDA {api // 1000}.{api % 1000 // 10}"


def _kernel_module_version() -> str | None:
    """The NVIDIA kernel module's version (the driver's: its libraries refuse to work with another),
    None where it cannot be read."""
    try:
        text = DRIVER_VERSION_FILE.read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)\s", text)
    return found.group(1) if found else None
