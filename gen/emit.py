"""Write the golden record: every variant of each family's emitted space to variants/<family>/."""

from __future__ import annotations

from pathlib import Path

from .families import FAMILIES
from .render import render
from .space import Space


def emitted_files() -> dict[str, str]:
    """Relative path -> source for every file of the golden record."""
    files = {}
    for family in FAMILIES.values():
        for variant in Space.emitted(family).expand().valid:
            files[f"{family.name}/{variant.name}.cu"] = render(variant)
    return files


def emit(out: Path) -> int:
    """Write variants/ from scratch (stale .cu files of each family removed); returns the file count."""
    files = emitted_files()
    for family in FAMILIES:
        folder = out / family
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.cu"):
            stale.unlink()
    for relative, source in files.items():
        (out / relative).write_text(source)
    return len(files)
