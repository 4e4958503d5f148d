"""Where tilegen keeps files between runs (compile cache, measured ceilings, tuning database) and
where its own templates are."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UsageError

CACHE_ENV = "TILEGEN_CACHE"
_PACKAGE_DIR = Path(__file__).resolve().parent


def cache_dir() -> Path:
    """$TILEGEN_CACHE, else $XDG_CACHE_HOME/tilegen, else ~/.cache/tilegen."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tilegen"


def builtin_templates_dir() -> Path:
    """tilegen's templates: inside the installed package, else beside it in a source checkout."""
    for candidate in (_PACKAGE_DIR / "templates", _PACKAGE_DIR.parent / "templates"):
        if candidate.is_dir():
            return candidate
    raise UsageError(f"no templates/ folder beside {_PACKAGE_DIR}; reinstall tilegen")
