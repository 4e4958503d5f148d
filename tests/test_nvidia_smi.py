"""nvidia-smi is asked in one place (gen.core.nvidia_smi): a fake one first on PATH stands in for
a driver that answers, fails or hangs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.compiling.options import DEFAULT_ARCH, local_arch
from gen.core import nvidia_smi

from .fakes import ends_within


def _fake_nvidia_smi(folder: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """A shell script named nvidia-smi, alone on PATH (with the shell tools it uses)."""
    (folder / "bin").mkdir()
    script = folder / "bin" / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder / 'bin'}:/usr/bin:/bin")
    return script


def test_a_query_returns_the_lines_nvidia_smi_prints_for_the_gpu_asked(tmp_path: Path, monkeypatch) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, f'echo "$@" > {tmp_path / "asked"}; printf "580.159.04 \\n\\n"')
    assert nvidia_smi.query(["driver_version"], gpu=2) == ["580.159.04"]
    assert (tmp_path / "asked").read_text().split() == ["--query-gpu=driver_version", "--format=csv,noheader",
                                                        "-i", "2"]


def test_a_driver_that_fails_is_no_answer_not_its_error_message(tmp_path: Path, monkeypatch) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the "
                                            "NVIDIA driver.\"; exit 9")
    assert nvidia_smi.query(["driver_version"], gpu=0) == []
    assert nvidia_smi.visible_gpus() == []


def test_a_driver_that_hangs_is_no_answer_and_nothing_it_started_is_left(tmp_path: Path, monkeypatch) -> None:
    pid_file = tmp_path / "sleeper"
    _fake_nvidia_smi(tmp_path, monkeypatch, f"sleep 3600 & echo $! > {pid_file}; wait")
    assert nvidia_smi.query(["index"], timeout_s=2.0) == []
    assert ends_within(int(pid_file.read_text()), 10.0)  # its whole session was killed at the deadline, not in an hour


def test_no_nvidia_smi_is_no_answer(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert nvidia_smi.query(["index"]) == [] and nvidia_smi.visible_gpus() == []


def test_the_local_architecture_is_the_first_gpus_compute_capability(tmp_path: Path, monkeypatch) -> None:
    script = _fake_nvidia_smi(tmp_path, monkeypatch, "printf '8.6\\n9.0\\n'")
    local_arch.cache_clear()
    try:
        assert local_arch() == "sm_86"
        script.write_text("#!/bin/sh\nexit 9\n")
        local_arch.cache_clear()
        assert local_arch() == DEFAULT_ARCH
    finally:
        local_arch.cache_clear()


def test_the_driver_version_is_nvidia_smis_else_the_api_version_the_binding_reads(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    def never() -> int:
        raise AssertionError("the driver was asked though nvidia-smi answered")

    monkeypatch.setattr(nvidia_smi, "DRIVER_VERSION_FILE", tmp_path / "no-kernel-module")
    _fake_nvidia_smi(tmp_path, monkeypatch, 'printf "580.159.04\\n"')
    assert nvidia_smi.driver_version(0, never) == "580.159.04"
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert nvidia_smi.driver_version(0, lambda: 13010) == "CUDA 13.1"


@pytest.mark.parametrize("line", [
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 17:01:30 UTC 2025",
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22)  Thu Oct",
    "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.159.04  Release Build  (dvs-builder@U22)  Thu",
])
def test_the_driver_version_is_read_from_the_kernel_module_without_nvidia_smi(tmp_path: Path, monkeypatch,
                                                                              line: str) -> None:
    """Each GPU worker asks as it starts: /proc's line is read at once, where nvidia-smi takes a while."""
    (tmp_path / "version").write_text(f"{line}\nGCC version:  gcc version 12.3.0\n")
    monkeypatch.setattr(nvidia_smi, "DRIVER_VERSION_FILE", tmp_path / "version")
    _fake_nvidia_smi(tmp_path, monkeypatch, 'printf "999.0\\n"')
    assert nvidia_smi.driver_version(0, lambda: 13010) == "580.159.04"
    (tmp_path / "version").write_text("NVRM version: something else\n")
    assert nvidia_smi.driver_version(0, lambda: 13010) == "999.0"  # nvidia-smi's, as before
