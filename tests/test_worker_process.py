"""The GPU worker process's command line, without a GPU: a job handed to a `--once` process (under
compute-sanitizer, or ncu in scripts/inspect_variant.py) arrives as it was sent."""

from __future__ import annotations

import subprocess
import sys

from gen.core.timing import TimingOptions
from gen.gpu.process.jobs import Job
from gen.gpu.process.worker import job_from_json, once_command

from .conftest import REPO
from .waits import patient


def test_a_job_reaches_a_once_process_as_it_was_sent() -> None:
    job = Job("matmul_f32_t8_p0_guard", "matmul", "/tmp/a.cubin", "64x64x64", "l1", seeds=(3, 4),
              timing=TimingOptions(budget_s=0.5, warm=True), sanitizer=True)
    command = once_command(job)
    assert command[:4] == [sys.executable, "-m", "gen.gpu.process.worker", "--once"]
    assert job_from_json(command[4]) == job
    untimed = Job("copy_f32_b256", "copy", "/tmp/b.cubin", "64x64", timing=None)
    assert job_from_json(once_command(untimed)[4]) == untimed


def test_the_inspect_script_finds_what_it_imports() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "inspect_variant.py"), "--help"],
                          capture_output=True, text=True, cwd=REPO, timeout=patient(120))
    assert done.returncode == 0 and "usage" in done.stdout, done.stderr


def test_the_worker_process_names_its_usage() -> None:
    done = subprocess.run([sys.executable, "-m", "gen.gpu.process.worker"], capture_output=True, text=True,
                          cwd=REPO, timeout=patient(120))
    assert done.returncode == 2 and "python -m gen.gpu.process.worker --once JOB_JSON" in done.stderr
