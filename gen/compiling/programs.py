"""Several variants as one program: each rendered source in a namespace of its own (extern "C" keeps
each kernel's symbol), for compilers that compile a batch in one run."""

from __future__ import annotations

import hashlib
from typing import Mapping


def one_program(sources: Mapping[str, str]) -> tuple[str, str]:
    """(name, source) of one program holding these kernels (kernel name -> its source)."""
    if len(sources) == 1:
        ((name, source),) = sources.items()
        return name, source
    names = "\0".join(sources)
    name = f"batch_{hashlib.sha256(names.encode()).hexdigest()[:8]}"
    source = "".join(f"namespace tilegen_variant_{i} {{\n{text}\n}}  // namespace\n\n"
                     for i, text in enumerate(sources.values()))
    return name, source
