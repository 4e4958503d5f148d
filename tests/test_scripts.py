"""The scripts in scripts/ cannot rot unnoticed: every name a script imports from tilegen exists,
each Python script that needs no GPU answers --help, and each shell script parses."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

PYTHON_SCRIPTS = sorted((REPO / "scripts").glob("*.py"))
SHELL_SCRIPTS = sorted((REPO / "scripts").glob("*.sh"))


def tilegen_imports(script: Path) -> list[tuple[str, str | None]]:
    """(module, name) for each `from gen... import name` in the script, (module, None) for `import gen...`;
    not those in an `except ImportError:` block (a fallback for an older tilegen)."""
    tree = ast.parse(script.read_text())
    fallbacks = {id(inner) for handler in ast.walk(tree) if isinstance(handler, ast.ExceptHandler)
                 and "ImportError" in ast.unparse(handler.type or ast.Name("")) for inner in ast.walk(handler)}
    found: list[tuple[str, str | None]] = []
    for node in (node for node in ast.walk(tree) if id(node) not in fallbacks):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "gen":
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name.split(".")[0] == "gen"]
    return found


def defined_names(module: str) -> set[str]:
    """The names a tilegen module defines at its top level, read from its source (for a module that
    cannot be imported here: one that needs pycuda)."""
    path = REPO / Path(*module.split("."))
    source = (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text()
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def has(module: str, name: str) -> bool:
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as missing:
        if missing.name != "pycuda":
            raise
        return name in defined_names(module)
    is_package = hasattr(imported, "__path__")
    return hasattr(imported, name) or (is_package and importlib.util.find_spec(f"{module}.{name}") is not None)


def needs_pycuda(script: Path) -> bool:
    return any(isinstance(node, (ast.Import, ast.ImportFrom)) and any(
        (getattr(node, "module", None) or alias.name).split(".")[0] == "pycuda" for alias in node.names)
        for node in ast.parse(script.read_text()).body)


@pytest.mark.parametrize("script", PYTHON_SCRIPTS, ids=lambda path: path.name)
def test_every_name_a_script_imports_from_tilegen_exists(script: Path) -> None:
    imports = tilegen_imports(script)
    missing = [f"{module}.{name}" for module, name in imports if name is not None and not has(module, name)]
    assert not missing, f"{script.name} imports names tilegen no longer has: {missing}"


@pytest.mark.parametrize("script", [s for s in PYTHON_SCRIPTS if not needs_pycuda(s)], ids=lambda path: path.name)
def test_a_script_that_needs_no_gpu_answers_help(script: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    monkeypatch.syspath_prepend(str(script.parent))
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(script), run_name="__main__")
    assert exited.value.code == 0 and "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda path: path.name)
def test_a_shell_script_parses(script: Path) -> None:
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
