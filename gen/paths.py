"""Where tilegen keeps files between runs: the compile cache, measured ceilings, the tuning DB."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

CACHE_ENV = "TILEGEN_CACHE"


def cache_dir() -> Path:
    """$TILEGEN_CACHE, else the user's cache folder (e.g. ~/.cache/tilegen)."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir("tilegen"))
