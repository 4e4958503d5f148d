"""A non-editable install finds its templates: build the wheel, install it in a fresh venv, render."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

from .conftest import REPO


def test_a_wheel_installed_in_a_fresh_venv_renders(tmp_path: Path) -> None:
    wheels, venv, elsewhere = tmp_path / "wheels", tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
                   check=True)
    # System site-packages lend jinja2 and numpy without a download; the wheel itself goes into the venv.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    (wheel,) = wheels.glob("tilegen-*.whl")
    shipped = zipfile.ZipFile(wheel).namelist()
    assert "gen/py.typed" in shipped  # type checkers read the package's hints (PEP 561)
    assert any(re.fullmatch(r"tilegen-[^/]+\.dist-info/licenses/LICENSE", name) for name in shipped), shipped
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True)
    done = subprocess.run([str(venv / "bin" / "tilegen"), "render", "transpose", "-p", "tile=16"],
                          capture_output=True, text=True, cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert "transpose_f32_shared_t16_r8_p1_guard_both" in done.stdout
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import gen.core.paths; print(gen.core.paths.builtin_templates_dir())"],
                           capture_output=True, text=True, cwd=elsewhere).stdout.strip()
    assert where.startswith(str(venv)) and where.endswith("gen/templates")


def test_the_changelog_names_the_version_and_the_license_the_one_pyproject_declares() -> None:
    from gen import __version__

    changelog = (REPO / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## (\d+\.\d+\.\d+)", changelog, flags=re.MULTILINE)
    assert versions and versions[0] == __version__, f"CHANGELOG.md's latest entry {versions[:1]} is not {__version__}"
    assert 'license = "MIT"' in (REPO / "pyproject.toml").read_text()
    assert (REPO / "LICENSE").read_text().startswith("MIT License")
