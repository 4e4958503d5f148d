"""What the commands that evaluate nothing ask of the layers below (search/ and cli/ reach build/
and gpu/ only through evaluate/): the compile cache, templates rendered and emitted, a Dask worker
served and a cluster's scheduler reached (those two import `distributed` only when called)."""

from __future__ import annotations

from typing import Sequence

from ..build.compiler import cache_summary, cached_by_another, clear_cache, cubin_cache, made_by, purge_failed
from ..build.emit import emit
from ..build.render import render, template_problems

__all__ = ["cache_summary", "cached_by_another", "check_reachable", "clear_cache", "cubin_cache", "emit", "made_by",
           "purge_failed", "render", "serve_gpus", "template_problems"]


def serve_gpus(address: str, gpus: Sequence[int] | None) -> int:
    """Serve this host's GPUs to the Dask scheduler at `address` (gen.gpu.dask_worker)."""
    from ..gpu.dask_worker import serve_gpus as serve

    return serve(address, gpus)


def check_reachable(address: str) -> None:
    """UsageError unless a Dask scheduler answers at `address` (gen.gpu.dask_cluster)."""
    from ..gpu.dask_cluster import check_reachable as check

    check(address)
