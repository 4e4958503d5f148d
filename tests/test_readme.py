"""The docs' commands are the ones users run. The README's two commands are the ones CI and users
run; every other command shown in a fenced `sh` block of README.md or docs/*.md runs as written on
a machine without a GPU, or carries a marker comment on its line: `# needs a GPU` (it runs kernels,
or reads what a tune on a GPU stored) or `# needs a Dask cluster`. Marked commands are still
parsed, so a flag they spell wrongly fails here too.

How "as written" is taken: each file's commands run in order in a folder of their own (its `docs`
is the checkout's), with HOME and the compile cache there and CUDA hidden, so a GPU machine runs
the same no-GPU path. `python3 -m pip install SPEC` is checked, not run (it would change this
suite's own environment): SPEC must be the project or one of its extras. `python3 -m pytest` is
this suite itself."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gen.cli.parser import build_parser

from .conftest import REPO
from .waits import patient

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARKERS = ("# needs a GPU", "# needs a Dask cluster")
INSTALL = "python3 -m pip install "
THIS_SUITE = "python3 -m pytest"


def readme_commands() -> list[str]:
    block = re.search(r"## The two commands\n+```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_has_two_commands_and_ci_runs_the_second() -> None:
    install_and_run, run_tests = readme_commands()
    assert install_and_run.startswith("python3 -m pip install . && tilegen ")
    assert run_tests in (REPO / ".ci" / "run").read_text().splitlines()


def shell_commands(path: Path) -> list[str]:
    """The commands of a file's `sh` blocks, a line ending in a backslash joined to the next; comment
    lines left out (a command keeps the comment on its own line)."""
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", path.read_text(), re.S | re.M):
        pending = ""
        for line in block.splitlines():
            line = f"{pending} {line.strip()}" if pending else line.strip()
            pending = line[:-1].rstrip() if line.endswith("\\") else ""
            if line and not pending and not line.startswith("#"):
                commands.append(line)
    return commands


def marked(command: str) -> bool:
    return any(marker in command for marker in MARKERS)


def test_the_docs_show_commands_and_mark_some_as_needing_a_gpu() -> None:
    commands = {path.name: shell_commands(path) for path in DOCS}
    assert len(commands["README.md"]) > 20 and commands["kernel-tuner.md"], commands
    assert any(marked(c) for c in commands["README.md"]) and not all(marked(c) for c in commands["README.md"])


@pytest.mark.parametrize("path", [p for p in DOCS if shell_commands(p)], ids=lambda p: p.name)
def test_every_command_in_the_docs_runs_without_a_gpu_or_is_marked(path: Path, tmp_path: Path) -> None:
    (tmp_path / "docs").symlink_to(REPO / "docs")
    (tmp_path / "home").mkdir()
    bin_folder = Path(sys.executable).parent
    env = {**os.environ, "HOME": str(tmp_path / "home"), "TILEGEN_CACHE": str(tmp_path / "cache"),
           "CUDA_VISIBLE_DEVICES": "", "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}"}
    for name in ("TILEGEN_DB", "TILEGEN_FAMILY_PATH", "TILEGEN_COMPILER"):
        env.pop(name, None)
    for command in shell_commands(path):
        for part in [p.strip() for p in command.split("&&")]:
            if marked(command):
                _parses(part)
            elif part.startswith(INSTALL):
                _installable(part.removeprefix(INSTALL))
            elif part != THIS_SUITE:
                done = subprocess.run(["bash", "-c", part], cwd=tmp_path, env=env, capture_output=True, text=True,
                                      timeout=patient(300))
                assert done.returncode == 0, f"{path.name}: {part}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
                assert " is now " not in done.stderr, f"{path.name}: {part} uses an old flag: {done.stderr}"


def _parses(command: str) -> None:
    words = shlex.split(command.split("#")[0])
    if words[0] == "tilegen":
        build_parser().parse_args(words[1:])
    else:
        assert words[:2] == ["dask", "scheduler"] or words[0] == "CUDA_VISIBLE_DEVICES=3", command


def _installable(spec: str) -> None:
    """`.` or `".[extra,...]"`: the project, with extras it declares."""
    extras = re.fullmatch(r"""\.|"\.\[([a-z,]+)\]\"""", spec)
    assert extras, f"pip install {spec}: not this project"
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set((extras.group(1) or "").split(",")) - {""} <= set(declared), spec


NVCC_COMPILES = re.compile(r"(with|by) `?nvcc\b|\bnvcc (compiles|runs)\b|lets nvcc\b")


def test_the_docs_name_the_compiler_tilegen_uses() -> None:
    """A sentence that says nvcc compiles (with nvcc, by nvcc, nvcc runs) also says NVRTC does
    where it is installed: NVRTC is the default there."""
    for path in DOCS:
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        for sentence in re.split(r"(?<=[.;])\s+", " ".join(text.split())):
            if NVCC_COMPILES.search(sentence):
                assert "NVRTC" in sentence, f"{path.name}: {sentence}"
