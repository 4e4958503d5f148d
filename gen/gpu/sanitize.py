"""compute-sanitizer on one variant at a small shape (a sanitizer job, gen.gpu.process.jobs): racecheck,
synccheck and memcheck hazards.

A numerically right answer does not make a variant safe: a race may simply not have bitten this
time. Each tool runs the variant once, in a process of its own under the sanitizer.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess

from ..core.errors import ToolMissing
from ..core.processes import ProcessGroup
from ..core.results import Measurement, Status
from .process.jobs import Job
from .process.worker import once_command

TOOLS = ("racecheck", "synccheck", "memcheck")
SANITIZER_TIMEOUT_S = 120.0


@functools.cache
def sanitizer_path() -> str:
    found = shutil.which("compute-sanitizer")
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        candidate = os.path.join(root or "", "bin", "compute-sanitizer")
        if not found and root and os.path.exists(candidate):
            found = candidate
    if not found:
        raise ToolMissing("compute-sanitizer not found: it ships with the CUDA toolkit; put its bin/ on PATH "
                          "or leave out --sanitize")
    return found


def sanitize(job: Job, environment: dict[str, str], children: ProcessGroup) -> Measurement:
    """A sanitizer job's measurement: the hazards found by each tool, run in `environment` (its GPU
    worker's), and a note on anything that went wrong running them."""
    hazards, notes = {}, []
    for tool in TOOLS:
        # Only the variant's kernel: the checker's own reductions are not under test; and only what
        # the kernel does, not the host's API calls (cuda.bindings probes the driver's entry points
        # with calls that fail by design, which memcheck would count as errors).
        command = [sanitizer_path(), "--tool", tool, "--kernel-name", f"kne={job.name}", "--report-api-errors", "no",
                   *once_command(job)]
        try:
            done = children.run(command, timeout=SANITIZER_TIMEOUT_S, env=environment)
        except subprocess.TimeoutExpired:
            hazards[tool] = 1
            notes.append(f"{tool} timed out after {SANITIZER_TIMEOUT_S:.0f} s (a hang counts as a hazard)")
            continue
        count = count_hazards(done.stdout + done.stderr)
        if count is None:
            notes.append(f"{tool} printed no summary (exit code {done.returncode})")
            continue
        if count == 0 and (refused := not_run(done.stdout)):  # nothing ran, so nothing was checked
            notes.append(f"{tool}: the kernel did not run ({refused})")
            continue
        hazards[tool] = count
    return Measurement(Status.OK, hazards=hazards, hazard_note="; ".join(notes))


def not_run(output: str) -> str:
    """Why the job the sanitizer ran did not get to its kernel, from the JSON line the one-job
    process prints (`run_once`), or '' where it ran. A wrong answer ran the kernel; a launch error
    may not have."""
    for line in reversed(output.splitlines()):
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict) and result.get("status") == Status.LAUNCH_ERROR:
            return result.get("message") or Status.LAUNCH_ERROR
        return ""
    return ""


def count_hazards(output: str) -> int | None:
    """Errors in the sanitizer's summary lines (racecheck also counts hazards), or None without one."""
    counts = [int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error", output)]
    counts += [int(n) for n in re.findall(r"RACECHECK SUMMARY: (\d+) hazard", output)]
    return max(counts) if counts else None
