"""Shared fixtures. Every test run gets its own compile cache, never the user's, and a progress
line per item."""

from __future__ import annotations

import os
import signal

from pathlib import Path
from typing import Callable, Iterator

import pytest

from gen.compiling.compiler import CompileOptions, nvcc_path
from gen.compiling.compilers import COMPILER_ENV
from gen.core.progress import EVERY_ENV

from .fakes import ANSWER, COMPILE, FakeNvcc

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("tilegen-cache")
    patcher = pytest.MonkeyPatch()
    patcher.setenv("TILEGEN_CACHE", str(cache))
    patcher.setenv(EVERY_ENV, "0")  # a progress line per item: several tests wait for a given item's line
    yield cache
    patcher.undo()


@pytest.fixture(scope="session", autouse=True)
def terminal_signals() -> Iterator[None]:
    """The commands the tests start receive Ctrl-C and a closed terminal's SIGHUP as a terminal's
    command would, even when the suite runs with them ignored (`nohup pytest`, a script's `pytest &`
    job): a child inherits an ignored signal, and tilegen rightly keeps it ignored. A signal ignored
    here gets a handler that does nothing instead: the suite still ignores it, and a child, whose
    handlers are reset when it starts, gets the default."""
    ignored = [signum for signum in (signal.SIGINT, signal.SIGHUP) if signal.getsignal(signum) == signal.SIG_IGN]
    for signum in ignored:
        signal.signal(signum, lambda *_: None)
    yield
    for signum in ignored:
        signal.signal(signum, signal.SIG_IGN)


@pytest.fixture(scope="session")
def compile_options(private_cache: Path) -> CompileOptions:
    if nvcc_path() is None:
        pytest.skip("nvcc is not installed")
    return CompileOptions(arch="sm_90", cache=private_cache / "cubins")


@pytest.fixture
def fake_nvcc(tmp_path: Path, compile_options: CompileOptions,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FakeNvcc]]:
    """Makes a fake nvcc (tests.fakes.FakeNvcc) in this test's folder; nothing puts it on PATH but the
    test. nvcc is the compiler of the test and of every tilegen it starts ($TILEGEN_COMPILER)."""
    monkeypatch.setenv(COMPILER_ENV, "nvcc")
    made: list[FakeNvcc] = []

    def make(compile: str = COMPILE, answer: str = ANSWER) -> FakeNvcc:
        made.append(FakeNvcc(tmp_path / f"nvcc-{len(made)}", compile, answer))
        return made[-1]

    yield make
    for fake in made:
        fake.announcements.close()


def _gpu_missing() -> str | None:
    """Why GPU tests cannot run here, or None when they can."""
    import importlib.util
    import shutil
    import subprocess

    if importlib.util.find_spec("pycuda") is None:
        return "pycuda is not installed (pip install 'tilegen[cuda]')"
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA driver (nvidia-smi not found)"
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    return None if "GPU" in listed else "no CUDA GPU visible"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    reason = _gpu_missing() if gpu_items else None
    for item in gpu_items if reason else []:
        item.add_marker(pytest.mark.skip(reason=f"GPU test: {reason}"))


@pytest.fixture
def own_family_path(monkeypatch):
    """The family folders a test adds (gen.tune_kernel's, say) stay out of the tests after it."""
    from gen.families.registry import registry

    monkeypatch.setenv("TILEGEN_FAMILY_PATH", os.environ.get("TILEGEN_FAMILY_PATH", ""))
    yield
    monkeypatch.undo()
    registry.cache_clear()
