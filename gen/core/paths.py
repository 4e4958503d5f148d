"""Where tilegen keeps files between runs (compile cache, measured ceilings, tuning database),
where its own templates are, and the checks every command makes before it writes anywhere: a
path no file system takes (a name over 255 bytes), and a folder or file tilegen cannot write, are
refused in one line before anything on disk changes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import UsageError

CACHE_ENV = "TILEGEN_CACHE"
_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # gen/
# The longest file or folder name and the longest path Linux takes, in bytes (NAME_MAX, and
# PATH_MAX less its NUL): every call on a longer one fails with "File name too long".
NAME_MAX = 255
PATH_MAX = 4095


def cache_dir() -> Path:
    """$TILEGEN_CACHE, else $XDG_CACHE_HOME/tilegen, else ~/.cache/tilegen; UsageError when it is a
    file or tilegen cannot write there."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return writable_folder(Path(override).expanduser(), f"${CACHE_ENV}")
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return writable_folder(Path(base) / "tilegen", f"the cache folder (set ${CACHE_ENV} to move it)")


def builtin_templates_dir() -> Path:
    """tilegen's templates: inside the installed package, else beside it in a source checkout."""
    for candidate in (_PACKAGE_DIR / "templates", _PACKAGE_DIR.parent / "templates"):
        if candidate.is_dir():
            return candidate
    raise UsageError(f"no templates/ folder beside {_PACKAGE_DIR}; reinstall tilegen")


def writable_folder(path: Path, what: str) -> Path:
    """`path` if it is a folder tilegen can write in, or can create; UsageError naming `what` (the
    option or variable that gave it) otherwise. Leaves nothing behind (see _check_can_create)."""
    path = as_path(path, what)
    if path.is_symlink() and not path.exists():
        raise UsageError(f"{what} {path} is a symbolic link that leads nowhere (a loop, or its target is gone); give "
                         f"a folder")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path} is a file, not a folder; give a folder")
    _check_writable_ancestor(path, what)
    return path


def writable_file(path: Path, what: str) -> Path:
    """`path` if tilegen can write that file in a folder that exists; UsageError otherwise. Leaves
    nothing behind (see _check_can_create)."""
    path = as_path(path, what)
    if path.is_symlink():
        raise UsageError(f"{what} {path} is a symbolic link; tilegen writes no file through a link: give the file "
                         f"itself, or a new name")
    if path.is_dir():
        raise UsageError(f"{what} {path} is a folder; give a file name, like {path / 'out.json'}")
    folder = path.parent
    if not folder.is_dir():
        problem = "is a file" if folder.exists() else "does not exist"
        raise UsageError(f"{what} {path}: the folder {folder} {problem}; give a file in an existing folder")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{what} {path}: permission denied; give a file in a folder you can write")
    if not path.exists():
        _check_can_create(folder, f"{what} {path}", "give a file in a folder you can write")
    return path


def existing_file(path: Path, what: str, hint: str) -> Path:
    """`path` if it is a file that exists; UsageError with `hint` (how to get one) otherwise."""
    path = as_path(path, what)
    if not path.is_file():
        problem = "is a folder" if path.is_dir() else "does not exist"
        raise UsageError(f"{what} {path} {problem}; {hint}")
    return path


def as_path(path: object, what: str) -> Path:
    """`path` as a Path, if it is one the file system can take; UsageError naming `what` otherwise."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise UsageError(f"{what} must be a path, got {path!r}")
    if problem := path_problem(Path(path)):
        raise UsageError(f"{what} {problem}")
    return Path(path)


def path_problem(path: Path) -> str | None:
    """Why no file system takes `path` (a NUL, a name or the whole over its limit), or None."""
    if "\0" in str(path):
        return f"{str(path)!r} holds a NUL character, which no file name may hold"
    for name in path.parts:
        if (size := len(os.fsencode(name))) > NAME_MAX:
            return f"names {name!r}, which is {size} bytes long; a file or folder name may be at most {NAME_MAX} bytes"
    if (size := len(os.fsencode(str(path.absolute())))) > PATH_MAX:
        return f"{path} is {size} bytes long as a full path; the limit is {PATH_MAX}"
    return None


def _check_writable_ancestor(path: Path, what: str) -> None:
    """The nearest folder that exists on the way to `path` must be one tilegen can write in."""
    existing = path.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{what} {path} cannot be made: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {path}: cannot write in {existing} (permission denied); choose a folder you can "
                         f"write")
    _check_can_create(existing, f"{what} {path}", "choose a folder you can write")


def _check_can_create(folder: Path, subject: str, hint: str) -> None:
    """Make and remove a folder in `folder`, else UsageError saying `subject` cannot be written and
    `hint`: os.access says yes to root for every folder on a writable mount, /proc included, where
    nobody can make anything; only trying tells."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".tilegen-probe-", dir=folder))
    except OSError as error:
        raise UsageError(f"{subject}: cannot write in {folder} ({error.strerror}); {hint}") from None
