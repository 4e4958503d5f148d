"""The compile cache, the same for every compiler (`CompileCache`): each variant's compile, a cubin
and its resources or a compile error with the compiler's diagnostic, under a key that names the
source, the options, and the compiler and its version (`compiler.cache_key`). Every entry is proven
before it is trusted (its record names its key, its kernel and its compile level, its cubin's sha256); one that fails the proof is removed, with a note on stderr, and compiled
again. Beside the entries, `by-variant/` keeps, under each variant's key (what determines its source:
`compiler.variant_keys`), the key its compile is kept under, so a warm run finds it without rendering.
Only tilegen's own files here are ever removed (and a folder under one of their names, which
would block that entry).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import re
import shutil
import stat
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ..core.cubin import symbol_of, symbols
from ..core.errors import RunFailed, UsageError, path_failure
from ..core.own_files import size_of, write_atomically
from ..core.paths import cache_dir
from ..core.progress import note
from .ptxas import Resources
from .verdict import has_diagnostic

CACHE_FORMAT = 4  # part of every cache key: records of another format are never read as entries

BY_VARIANT = "by-variant"  # the folder of each variant's key (`remember`), which entries' surveys pass over
_KEY = re.compile(r"^[0-9a-f]{32}$")
_RECORD_NAME = re.compile(r"^[0-9a-f]{32}\.json$")
_CUBIN_NAME = re.compile(r"^[0-9a-f]{32}\.cubin$")
# Every name tilegen gives a file in the cache: records, cubins, older tilegens' batch cubins, and
# the temporaries of writes cut short. Nothing else there is tilegen's to remove.
_OWN_NAME = re.compile(r"^(?:batch-)?[0-9a-f]{32}\.(?:json|cubin)(?:\.[a-z0-9_]{8})?$")


@dataclass(frozen=True)
class CubinFile:
    """A cubin in the cache, named after its content's sha256: a batch's variants share one."""

    name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class CacheEntry:
    """One variant's compile as the cache keeps it: a cubin and its resources, or a compile error."""

    log: str
    seconds: float
    cubin: CubinFile | None = None  # None: a compile error, whose log diagnoses the source
    resources: Resources | None = None


class DamagedEntry(Exception):
    """A cache record that fails its proof; the message says how. `cubin`: a cubin it names that is
    not what was compiled, and no entry can use."""

    def __init__(self, problem: str, cubin: Path | None = None):
        super().__init__(problem)
        self.cubin = cubin


@dataclass(frozen=True)
class CacheSummary:
    folder: Path
    entries: int  # proven entries
    failed: int  # of them, compile errors
    damaged: int  # records that fail their proof, and stray files: cubins no entry names, cut-short writes
    bytes: int  # of every file tilegen wrote there


class CompileCache:
    """A folder of entries. An entry is a record, `<key>.json`, that names its cubin with the cubin's
    sha256 and size; the cubin is written first and the record last, each atomically, so a record
    whose cubin matches it is a whole entry. `load` proves an entry before it returns it."""

    def __init__(self, folder: Path):
        self.folder = folder

    def load(self, key: str, kernel: str, level: str) -> CacheEntry | None:
        """The proven entry under `key` for the kernel named `kernel` (a variant's name) compiled at
        `level`, else None. A damaged one is removed, with a note naming the kernel."""
        record = self.folder / f"{key}.json"
        try:
            return self._proven(record, key, kernel, level)
        except FileNotFoundError:
            return None
        except DamagedEntry as damage:
            note(f"the compile cache's entry for {kernel} was damaged ({damage}): removed, compiling it again")
            for path in (record, damage.cubin):
                if path is not None:
                    self._remove(path)
            return None

    def key_for(self, variant_key: str) -> str | None:
        """The key a variant's compile was kept under (`remember`), by the variant's own key: what
        determines its source, without rendering it (compiler.variant_keys); None when not known."""
        try:
            key = (self.folder / BY_VARIANT / variant_key).read_text()
        except (OSError, UnicodeDecodeError):
            return None
        return key if _KEY.fullmatch(key) else None

    def remember(self, variant_key: str, key: str) -> None:
        """Keep the key a variant's compile is kept under, for `key_for`; only a shortcut: a cache
        where it cannot be written (read-only, full) is still read as before."""
        path = self.folder / BY_VARIANT / variant_key
        try:
            path.parent.mkdir(exist_ok=True)
            write_atomically(path, key.encode())
        except OSError:
            pass

    def put_cubin(self, cubin: bytes) -> CubinFile:
        digest = hashlib.sha256(cubin).hexdigest()
        named = CubinFile(f"{digest[:32]}.cubin", digest, len(cubin))
        self._write(self.folder / named.name, cubin)
        return named

    def put(self, key: str, kernel: str, level: str, entry: CacheEntry) -> None:
        """Record the entry of the kernel named `kernel`, compiled at `level`; its cubin must be in the
        cache already (`put_cubin`)."""
        record = {"format": CACHE_FORMAT, "key": key, "kernel": kernel, "level": level, "seconds": entry.seconds,
                  "log": entry.log,
                  "cubin": asdict(entry.cubin) if entry.cubin else None,
                  "resources": asdict(entry.resources) if entry.resources else None}
        self._write(self.folder / f"{key}.json", json.dumps(record).encode())

    def summary(self) -> CacheSummary:
        proven, failed, damaged, own, _ = self._survey()
        return CacheSummary(self.folder, len(proven), len(failed), len(damaged), sum(size_of(p) for p in own))

    def purge_failed(self) -> tuple[int, int]:
        """Remove the compile errors and the damaged entries (and stray files); their counts. The
        variants' keys go too (some led to those entries): the next run makes them again."""
        _, failed, damaged, _, _ = self._survey()
        for path in [*failed, *damaged, self.folder / BY_VARIANT]:
            self._remove(path)
        return len(failed), len(damaged)

    def clear(self) -> tuple[int, int]:
        """Remove every file tilegen wrote here, and nothing else: how many entries it held, and
        how many other files stay."""
        _, _, _, own, others = self._survey()
        for path in [*own, self.folder / BY_VARIANT]:
            self._remove(path)
        return sum(bool(_RECORD_NAME.match(p.name)) for p in own), len(others)

    def _survey(self) -> tuple[list[Path], list[Path], list[Path], list[Path], list[Path]]:
        """The files here: proven entries' records, compile errors among them, damaged records and
        stray files, every file tilegen named, and the files it did not."""
        proven: list[Path] = []
        failed: list[Path] = []
        damaged: list[Path] = []
        own: list[Path] = []
        others: list[Path] = []
        used: set[str] = set()
        found = sorted(self.folder.iterdir()) if self.folder.is_dir() else []
        for path in found:
            if path.is_file():
                (own if _OWN_NAME.match(path.name) else others).append(path)
            elif _OWN_NAME.match(path.name):  # a folder under an entry's name: it blocks that entry
                own.append(path)
        for record in (p for p in own if _RECORD_NAME.match(p.name)):
            try:
                entry = self._proven(record, record.stem)
            except (DamagedEntry, FileNotFoundError):
                damaged.append(record)
                continue
            proven.append(record)
            if entry.cubin is None:
                failed.append(record)
            else:
                used.add(entry.cubin.name)
        damaged += [p for p in own if not _RECORD_NAME.match(p.name) and p.name not in used]
        return proven, failed, damaged, own, others

    def _proven(self, record: Path, key: str, kernel: str | None = None, level: str | None = None) -> CacheEntry:
        """The entry `record` holds, if it proves whole, for the kernel `kernel` at the compile level
        `level` (None: the ones it names): DamagedEntry says why not. Its cubin must be the one
        compiled (its sha256) and hold the kernel's symbol: a record that names another kernel's
        cubin, or another level's, is damaged, not a hit."""
        try:
            text = record.read_bytes()
        except FileNotFoundError:
            raise
        except OSError as error:
            raise DamagedEntry(f"cannot be read: {error.strerror}") from None
        try:
            fields_ = json.loads(text)
        except ValueError:
            raise DamagedEntry("empty" if not text.strip() else "not JSON") from None
        if not isinstance(fields_, dict):
            raise DamagedEntry(f"a JSON {type(fields_).__name__}, not a record")
        if fields_.get("format") != CACHE_FORMAT or fields_.get("key") != key:
            raise DamagedEntry("not a record of this tilegen's for this entry")
        log, seconds = _field(fields_, "log", str), _field(fields_, "seconds", (int, float))
        named = _field(fields_, "kernel", str)
        if kernel is not None and named != kernel:
            raise DamagedEntry(f"it is the record of the kernel {named!r}")
        compiled_at = _field(fields_, "level", str)
        if level is not None and compiled_at != level:
            raise DamagedEntry(f"it is the record of a compile at {compiled_at}, not {level}")
        if fields_.get("cubin") is None:
            if not has_diagnostic(log):
                raise DamagedEntry("a compile error without the compiler's diagnostic")
            return CacheEntry(log, seconds)
        cubin = _cubin_file(_field(fields_, "cubin", dict))
        resources = _resources(_field(fields_, "resources", dict))
        self._prove_cubin(cubin, named)
        return CacheEntry(log, seconds, cubin, resources)

    def _prove_cubin(self, cubin: CubinFile, kernel: str) -> None:
        path = self.folder / cubin.name
        try:
            found = path.stat()
        except FileNotFoundError:
            raise DamagedEntry(f"its cubin {cubin.name} is missing") from None
        if not stat.S_ISREG(found.st_mode):
            raise DamagedEntry(f"its cubin {cubin.name} is not a file", path)
        if found.st_size != cubin.size:
            raise DamagedEntry(f"its cubin {cubin.name} has {found.st_size} bytes, not {cubin.size}", path)
        if _sha256_of(path, found.st_size, found.st_mtime_ns, found.st_ino) != cubin.sha256:
            raise DamagedEntry(f"its cubin {cubin.name} has other contents than were compiled", path)
        if symbol_of(_symbols_of(path, found.st_size, found.st_mtime_ns, found.st_ino), kernel) is None:
            raise DamagedEntry(f"its cubin {cubin.name} holds no kernel {kernel!r}")  # another's: not removed

    def _remove(self, path: Path) -> None:
        """Remove one of tilegen's files here, or a folder under such a name."""
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError as error:
            raise path_failure(error, path, "remove", elsewhere="remove it yourself, or set $TILEGEN_CACHE to "
                               "another folder") from None

    def _write(self, path: Path, data: bytes) -> None:
        if path.is_dir() and not path.is_symlink():
            self._remove(path)  # a folder under the name would block this entry for good
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomically(path, data)
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise RunFailed(f"cannot write the compile cache {self.folder} ({error.strerror}); free space there "
                                f"(or set $TILEGEN_CACHE to a folder with room), then run again") from None
            raise UsageError(f"cannot write the compile cache {self.folder} ({error.strerror}); set $TILEGEN_CACHE "
                             f"to a writable folder") from None


def cubin_cache() -> Path:
    """The compile cache's folder: cubins/ in tilegen's cache folder."""
    return cache_dir() / "cubins"


def cache_summary(folder: Path) -> CacheSummary:
    return CompileCache(folder).summary()


def purge_failed(folder: Path) -> tuple[int, int]:
    """Remove the cached compile errors and damaged entries (the next run compiles those variants
    again): how many of each."""
    return CompileCache(folder).purge_failed()


def clear_cache(folder: Path) -> tuple[int, int]:
    """Remove every cached compile, and only tilegen's files: how many entries, and how many other files kept."""
    return CompileCache(folder).clear()


def _field(record: dict, name: str, kind: type | tuple[type, ...]) -> Any:
    value = record.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DamagedEntry(f"its field {name!r} is {'missing' if value is None else 'malformed'}")
    return value


def _cubin_file(fields_: dict) -> CubinFile:
    name, sha256, size = fields_.get("name"), fields_.get("sha256"), fields_.get("size")
    if not (isinstance(name, str) and _CUBIN_NAME.match(name) and isinstance(sha256, str)
            and isinstance(size, int) and not isinstance(size, bool)):
        raise DamagedEntry("its field 'cubin' is malformed")
    return CubinFile(name, sha256, size)


def _resources(fields_: dict) -> Resources:
    names = [f.name for f in fields(Resources)]
    if sorted(fields_) != sorted(names) or not all(type(fields_[n]) is int and fields_[n] >= 0 for n in names):
        raise DamagedEntry("its field 'resources' is malformed")
    return Resources(**fields_)


@functools.lru_cache(maxsize=4096)
def _sha256_of(path: Path, size: int, mtime_ns: int, inode: int) -> str:
    """A file's sha256, kept while its size, time and inode stay (a batch's cubin proves 8 entries)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@functools.lru_cache(maxsize=4096)
def _symbols_of(path: Path, size: int, mtime_ns: int, inode: int) -> frozenset[str]:
    """The names in a cubin's ELF symbol table, kept while its size, time and inode stay."""
    return symbols(path.read_bytes())


