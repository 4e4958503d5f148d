"""A streaming compile pool: variants asked for one at a time come back as futures, compiled by a
few threads (one per core), several to a compiler run when many wait. The one place tilegen
compiles many variants at once (the engine, `compile_variants`, gen.call.kernels all use it).

    pool = CompilePool(options)
    future = pool.submit(variant)          # urgent: a point waits for it
    pool.prefetch(variants)                 # speculative: compiled when threads are free
    pool.prefetch(likely, first=True)       # speculative, ahead of the other speculative ones
    compiled = future.result()

Each request may name a compile level (gen.compiling.levels); left out, the options' level. A
variant at two levels is two compiles; one compiler run holds variants of one level.

The first wave compiles one variant per run, so that the first results come soon; later, when
more wait than there are threads, several go to one run (`batch_size`) of a compiler that batches
(`Compiler.batches`), as many as leave each thread `Compiler.runs_per_thread` runs of what waits
(nvcc: 1, its start-up shared by up to 8; NVRTC: 64, small batches finishing together);
a compiler that does not batch gets one each. An error the compiler
cannot turn into a result (a template that does not render, a compiler that keeps failing) is
the future's exception. `kill()` stops it all: running compiles are killed, and their futures
and the queued ones end with Interrupted, never with a result.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, as_completed
from dataclasses import replace
from typing import Callable, Iterable

from ..core.errors import Interrupted
from ..core.processes import ProcessGroup
from ..families.family import Family
from ..families.variant import Variant
from .compiler import CompileOptions, Compiled, batch_size, compile_batch, provenance
from .levels import check_level
from .options import check_arch

Request = tuple[Variant, str]  # a variant and the level to compile it at


class CompilePool:
    def __init__(self, options: CompileOptions):
        self.options = options
        self._children = ProcessGroup()  # the compiler runs, killed together
        self._lock = threading.Condition()
        self._urgent: deque[Request] = deque()
        self._later: dict[Request, None] = {}  # in order: a dict, so that one can leave it at once
        self._futures: dict[Request, Future[Compiled]] = {}
        self._runs = 0  # compiler runs started: the first wave compiles one variant each
        self._provenance: dict[str, dict[str, str]] = {}
        self._stopped = False
        self._threads = [threading.Thread(target=self._work, name=f"tilegen-compile-{n}", daemon=True)
                         for n in range(options.jobs)]
        for thread in self._threads:
            thread.start()

    @property
    def workers(self) -> int:
        return len(self._threads)

    def provenance(self, family: Family) -> dict[str, str]:
        """What makes this pool's rows of `family` (gen.compiling.compiler.provenance), computed once."""
        if family.name not in self._provenance:
            self._provenance[family.name] = provenance(self.options, family)
        return self._provenance[family.name]

    def submit(self, variant: Variant, level: str | None = None) -> Future[Compiled]:
        """The compile of `variant` (at `level`, else the options'), ahead of every speculative one;
        one future per variant and level."""
        request = self._request_of(variant, level)
        with self._lock:
            future = self._request(request)
            if request in self._later:
                del self._later[request]
                self._urgent.append(request)
            return future

    def prefetch(self, variants: Iterable[Variant], level: str | None = None, first: bool = False) -> None:
        """Compile these when a thread is free: proposals to come (their futures are kept); `first`:
        ahead of the speculative ones already waiting (what a search will most likely ask for next)."""
        requests = [self._request_of(variant, level) for variant in variants]
        with self._lock:
            for request in requests:
                if request not in self._futures:
                    self._futures[request] = Future()
                    self._later[request] = None
            if first:
                ahead = {r: None for r in requests if r in self._later}
                self._later = {**ahead, **{r: None for r in self._later if r not in ahead}}
            self._lock.notify_all()

    def close(self) -> None:
        """Stop the threads once the compiles running now are done; queued ones are dropped."""
        with self._lock:
            self._stopped = True
            self._lock.notify_all()
            dropped = [self._futures[v] for v in (*self._urgent, *self._later)]
            self._urgent.clear()
            self._later.clear()
        for future in dropped:
            future.cancel()

    def kill(self) -> None:
        """Stop now: the compiler runs are killed; what they compiled is never a result."""
        self._children.kill_all()
        self.close()

    def join(self, timeout: float) -> None:
        for thread in self._threads:
            thread.join(timeout)

    # ---- inside ------------------------------------------------------------------------------

    def _request_of(self, variant: Variant, level: str | None) -> Request:
        return variant, self.options.level if level is None else check_level(level)

    def _request(self, request: Request) -> Future[Compiled]:
        """The future of a request, queued as urgent when it is new (holding the lock)."""
        if request not in self._futures:
            self._futures[request] = Future()
            self._urgent.append(request)
            self._lock.notify()
        return self._futures[request]

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            batch = [request for request in batch if self._futures[request].set_running_or_notify_cancel()]
            if not batch:
                continue
            futures = [self._futures[request] for request in batch]
            options = replace(self.options, level=batch[0][1])
            try:
                results = compile_batch([variant for variant, _ in batch], options, self._children)
            except BaseException as error:  # Interrupted when killed; else an error no row can hold
                for future in futures:
                    future.set_exception(error)
                if isinstance(error, Interrupted):
                    return
                continue
            for future, compiled in zip(futures, results):
                future.set_result(compiled)

    def _next_batch(self) -> list[Request] | None:
        """The next requests to compile together (of one level); None when the pool stops."""
        with self._lock:
            while not self._stopped and not (self._urgent or self._later):
                self._lock.wait()
            if self._stopped:
                return None
            compiler = self.options.compiler
            one_each = self._runs < self.workers or not compiler.batches
            count = 1 if one_each else batch_size(len(self._urgent or self._later),
                                                  self.workers * compiler.runs_per_thread)
            self._runs += 1
            if self._urgent:
                batch = _same_level(self._urgent, count)
                for request in batch:
                    self._urgent.remove(request)
                return batch
            batch = _same_level(self._later, count)
            for request in batch:
                del self._later[request]
            return batch


def _same_level(queue: Iterable[Request], count: int) -> list[Request]:
    """Up to `count` requests from the head of `queue` at the level of its first, in order."""
    batch: list[Request] = []
    for request in queue:
        if batch and request[1] != batch[0][1]:
            continue
        batch.append(request)
        if len(batch) == count:
            break
    return batch


def compile_variants(variants: Iterable[Variant], options: CompileOptions,
                     on_done: Callable[[Compiled], None] | None = None) -> list[Compiled]:
    """Compile every variant (each once), `options.jobs` compiler runs at a time; results in the
    order of `variants`. `on_done` is called as each variant finishes (from this thread)."""
    variants = list(variants)
    check_arch(options.arch, options.compiler)
    pool = CompilePool(options)
    try:
        futures = {variant: pool.submit(variant) for variant in dict.fromkeys(variants)}
        for future in as_completed(futures.values()):
            if on_done:
                on_done(future.result())
        return [futures[variant].result() for variant in variants]
    except BaseException:
        pool.kill()  # Ctrl-C, or a run that cannot go on: no compile goes on behind our back
        raise
    finally:
        pool.close()
