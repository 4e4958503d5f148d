"""A command's session, built alike for sweep, tune, compile, revalidate and the Python API: the
compile options and pool, the GPUs (an executor), the checking, and an engine, or one per GPU
model with cubins for its architecture (`for model, engine in session.per_model("tune")`)."""

from __future__ import annotations

import random
from dataclasses import replace
from functools import cache
from typing import Iterator

from ..compiling.compiler import made_by
from ..compiling.levels import FULL
from ..compiling.pool import CompilePool
from ..core.errors import UsageError
from ..core.results import DeviceInfo, GpuModel
from ..gpu.executor import Executor, GpuUnavailable  # for commands/: the drivers' executor= and a GPU missing
from .engine import Checking, Engine
from .options import RunOptions, make_executor

class Session:
    """`run`: how points are evaluated; `executor`: the GPUs (None: made from `run`, unless `gpus`
    is False, a compile only), started at once, so that they start while the command plans; the
    session closes it when it ends."""

    def __init__(self, run: RunOptions, executor: Executor | None = None, gpus: bool = True):
        self.executor = (executor or make_executor(run)) if gpus else None
        try:
            if self.executor is not None:
                self.executor.start()
            self.run, self.compiling = run, run.compile_options()  # --arch, --jobs, --compiler, the cache
        except BaseException:  # a bad --arch, say, or Ctrl-C: no worker is left starting
            if self.executor is not None:
                self.executor.kill()
            raise
        self.pool = CompilePool(self.compiling)
        seed = run.seed if run.seed is not None else random.randrange(1, 2**31)
        self.checking = Checking(seed, run.timing if self.executor is not None else None, run.sanitize)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.kill()
        if self.executor is not None:
            self.executor.close()

    @property
    def compiled_by(self) -> str:
        """'nvrtc 13.0.88 for sm_90': the compiler, its version and the architecture (and the compile
        level where it is not full: 'nvrtc 13.0.88 for sm_90 at ofc-max')."""
        level = f" at {self.compiling.level}" if self.compiling.level != FULL else ""
        return f"{made_by(self.compiling)} for {self.compiling.arch}{level}"

    def engine(self) -> Engine:
        """The engine over the session's pool and GPUs."""
        return Engine(self.pool, self.executor, self.checking)

    def per_model(self, command: str) -> Iterator[tuple[GpuModel, Engine]]:
        """An engine for each GPU model among the session's GPUs (their workers started), each with
        cubins for its model's architecture unless --arch names one; UsageError without a GPU."""
        try:
            groups = self.executor.by_model()  # type: ignore[union-attr]
        except GpuUnavailable as reason:
            raise UsageError(f"{command} needs a GPU: {reason}") from None
        for index, (model, group) in enumerate(groups.items()):
            arch = self.run.arch or model.arch
            pool = self.pool if index == 0 and self.compiling.arch == arch else \
                CompilePool(replace(self.compiling, arch=arch))
            with Engine(pool, group, self.checking) as engine:
                yield model, engine


@cache
def current_device() -> DeviceInfo:
    """The GPU of the caller's current context (pycuda's, PyTorch's, CuPy's: any library's), else the
    first GPU (asked in a worker process)."""
    from ..gpu.local import LocalExecutor

    try:
        from ..gpu.runtime.native import current_device_info
    except ImportError:  # no cuda.bindings: a worker process asks
        current_device_info = lambda: None  # noqa: E731
    if (found := current_device_info()) is not None:
        return found
    executor = LocalExecutor([0])
    try:
        return executor.devices()[0]
    except GpuUnavailable as reason:
        raise UsageError(f"which GPU? {reason}; name a GPU model to answer from the tuning database without one "
                         f"(gen.tuned(..., gpu='H100'); tilegen best --gpu-model H100)") from None
    finally:
        executor.close()
