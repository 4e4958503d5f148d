"""On a real GPU (marker `gpu`): the whole `tilegen sweep` command, whose GPU worker starts before
the command line is read (gen.cli.entry), runs its variants, and the driver's version its rows name
(read from the kernel module, not asked of nvidia-smi) is the one nvidia-smi reports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gen.core.nvidia_smi import query
from gen.core.results import Status
from gen.store.results_log import read_rows

from .conftest import REPO

pytestmark = pytest.mark.gpu


def test_a_sweep_whose_worker_started_early_runs_and_names_the_driver_as_nvidia_smi_does(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "gen", "sweep", "transpose", "-p", "tile=32", "--size", "1024x1024",
                           "--out", str(tmp_path), "--gpus", "0", "--timing-budget", "0.02", "--quiet"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr
    ok = [row for row in read_rows(tmp_path / "results.jsonl") if row.status is Status.OK]
    assert ok, done.stdout
    drivers = {row.provenance["driver"] for row in ok}
    assert len(drivers) == 1
    if listed := query(["driver_version"], gpu=0):  # a host without nvidia-smi has nothing to compare with
        assert drivers == {listed[0]}
