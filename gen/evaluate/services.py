"""What the commands that evaluate nothing ask of the layers below, re-exported (commands/ and cli/
reach compiling/ and gpu/ only through evaluate/): the compile cache, templates rendered and emitted,
a Dask worker served and a cluster's scheduler reached (`distributed` imported only then)."""

from __future__ import annotations

from typing import Sequence

from ..compiling.compiler import cache_summary, cached_by_another, clear_cache, cubin_cache, made_by, purge_failed
from ..compiling.emit import emit
from ..compiling.render import render, template_problems


def serve_gpus(address: str, gpus: Sequence[int] | None) -> int:
    from ..gpu.dask_worker import serve_gpus as serve

    return serve(address, gpus)


def check_reachable(address: str) -> None:
    from ..gpu.dask_cluster import check_reachable as check

    check(address)
