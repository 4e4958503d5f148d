"""A streaming compile pool: variants asked for one at a time come back as futures, compiled by a
few threads (one per core), several to a compiler run when many wait. The one place tilegen
compiles many variants at once (the engine, `compile_variants`, gen.kernels all use it).

    pool = CompilePool(options)
    future = pool.submit(variant)          # urgent: a point waits for it
    pool.prefetch(variants)                 # speculative: compiled when threads are free
    compiled = future.result()

The first wave compiles one variant per run, so that the first results come soon; later, when
more wait than there are threads, several go to one run (`batch_size`). An error the compiler
cannot turn into a result (a template that does not render, a compiler that keeps failing) is
the future's exception. `kill()` stops it all: running compiles are killed, and their futures
and the queued ones end with Interrupted, never with a result.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from concurrent.futures import Future, as_completed
from typing import Callable, Iterable

from ..core.errors import Interrupted
from ..core.processes import ProcessGroup
from ..families.family import Family
from ..families.variant import Variant
from .compiler import CompileOptions, Compiled, batch_size, compile_batch, provenance
from .options import check_arch


class CompilePool:
    def __init__(self, options: CompileOptions):
        self.options = options
        self._children = ProcessGroup()  # the compiler runs, killed together
        self._lock = threading.Condition()
        self._urgent: deque[Variant] = deque()
        self._later: dict[Variant, None] = {}  # in order: a dict, so that one can leave it at once
        self._futures: dict[Variant, Future[Compiled]] = {}
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

    def submit(self, variant: Variant) -> Future[Compiled]:
        """The compile of `variant`, ahead of every speculative one; one future per variant."""
        with self._lock:
            future = self._request(variant)
            if variant in self._later:
                del self._later[variant]
                self._urgent.append(variant)
            return future

    def prefetch(self, variants: Iterable[Variant]) -> None:
        """Compile these when a thread is free: proposals to come (their futures are kept)."""
        with self._lock:
            for variant in variants:
                if variant not in self._futures:
                    self._futures[variant] = Future()
                    self._later[variant] = None
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

    def _request(self, variant: Variant) -> Future[Compiled]:
        """The future of a variant, queued as urgent when it is new (holding the lock)."""
        if variant not in self._futures:
            self._futures[variant] = Future()
            self._urgent.append(variant)
            self._lock.notify()
        return self._futures[variant]

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            futures = [self._futures[v] for v in batch]
            if not all(f.set_running_or_notify_cancel() for f in futures):
                futures = [f for f in futures if not f.cancelled()]
                batch = [v for v in batch if not self._futures[v].cancelled()]
            try:
                results = compile_batch(batch, self.options, self._children)
            except BaseException as error:  # Interrupted when killed; else an error no row can hold
                for future in futures:
                    future.set_exception(error)
                if isinstance(error, Interrupted):
                    return
                continue
            for future, compiled in zip(futures, results):
                future.set_result(compiled)

    def _next_batch(self) -> list[Variant] | None:
        """The next variants to compile together; None when the pool stops."""
        with self._lock:
            while not self._stopped and not (self._urgent or self._later):
                self._lock.wait()
            if self._stopped:
                return None
            first_wave = self._runs < self.workers
            count = 1 if first_wave else batch_size(len(self._urgent or self._later), self.workers)
            self._runs += 1
            if self._urgent:
                return [self._urgent.popleft() for _ in range(min(count, len(self._urgent)))]
            batch = list(itertools.islice(self._later, count))
            for variant in batch:
                del self._later[variant]
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
