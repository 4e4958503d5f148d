"""Shared fixtures. Every test run gets its own compile cache, never the user's."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.compiler import CompileOptions, nvcc_path

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("tilegen-cache")
    patcher = pytest.MonkeyPatch()
    patcher.setenv("TILEGEN_CACHE", str(cache))
    yield cache
    patcher.undo()


@pytest.fixture(scope="session")
def compile_options(private_cache: Path) -> CompileOptions:
    if nvcc_path() is None:
        pytest.skip("nvcc is not installed")
    return CompileOptions(arch="sm_90", cache=private_cache / "cubins")
