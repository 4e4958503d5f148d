"""variants/ is the golden record: it must equal what the templates produce now."""

from __future__ import annotations

from gen.compiling.emit import emitted_files
from gen.families import builtin_families

from .conftest import REPO


def test_variants_folder_is_current() -> None:
    expected = emitted_files(builtin_families().values())
    on_disk = {str(p.relative_to(REPO / "variants")): p.read_text() for p in (REPO / "variants").glob("*/*.cu")}
    missing = sorted(set(expected) - set(on_disk))
    extra = sorted(set(on_disk) - set(expected))
    changed = sorted(name for name in set(expected) & set(on_disk) if expected[name] != on_disk[name])
    hint = "run `tilegen emit` and commit variants/"
    assert not missing, f"{len(missing)} files missing, e.g. {missing[:3]}: {hint}"
    assert not extra, f"{len(extra)} files no longer produced, e.g. {extra[:3]}: {hint}"
    assert not changed, f"{len(changed)} files differ, e.g. {changed[:3]}: {hint}"
