"""The README's two commands are the ones CI and users run."""

from __future__ import annotations

import re

from .conftest import REPO


def readme_commands() -> list[str]:
    block = re.search(r"## The two commands\n+```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_has_two_commands_and_ci_runs_the_second() -> None:
    install_and_run, run_tests = readme_commands()
    assert install_and_run.startswith("python3 -m pip install . && tilegen ")
    assert run_tests in (REPO / ".ci" / "run").read_text().splitlines()
