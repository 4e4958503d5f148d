"""The GPU workers of a command, started before the command line is even read (gen.cli.entry):
importing tilegen's commands takes about half a second, and a GPU worker's start a second or more
(python, pycuda, a context), so they are better started side by side. The command's executor
(`make_executor`) takes them when it asks for the same GPUs in the same environment (a
`--family-path` read later changes what a worker must load: then they are not the ones asked for);
whatever is not taken is killed as the command ends (`stop`).

Importing this module is light (no compiler, no family): the entry point imports it first."""

from __future__ import annotations

from typing import Sequence

from ..gpu.local import LocalExecutor
from ..gpu.process.worker import WORKER

_started: list[tuple[LocalExecutor, list[dict[str, str]]]] = []  # each with its workers' environments


def start(gpus: Sequence[int], target: str = WORKER) -> None:
    """Begin starting a worker on each of `gpus`, without waiting for any. A start that fails here
    (no process could be made) leaves nothing: the command starts them itself, and says what fails."""
    executor = LocalExecutor(gpus, target=target)
    _started.append((executor, [worker.environment() for worker in executor.workers]))  # killed by `stop` if need be
    try:
        executor.start()
    except Exception:
        stop()


def take(gpus: Sequence[int], silence_s: float) -> LocalExecutor | None:
    """The started workers of exactly these GPUs, in this environment, as an executor whose workers
    are hung after `silence_s`; None if there are none (others started are killed: no command asks
    for two sets)."""
    found = None
    while _started:
        executor, environments = _started.pop()
        same = [worker.physical_index for worker in executor.workers] == list(gpus) and \
            environments == [worker.environment() for worker in executor.workers]
        if same and found is None:
            found = executor.hang_after(silence_s)
        else:
            executor.kill()
    return found


def stop() -> None:
    """Kill the workers started and not taken."""
    while _started:
        _started.pop()[0].kill()
