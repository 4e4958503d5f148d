"""The jobs on their way to the GPUs: the engine puts each job in the feed as its variant compiles,
and an executor takes them as its GPUs free up.

An executor that waits on many things at once (gen.gpu.table, in one thread) takes jobs without
blocking and is told when the next one comes; another (gen.gpu.dask) waits for the next job a
while at a time. A feed has one taker at a time.

    feed = JobFeed()
    feed.put(job)                         # the producer
    job = feed.take(on_arrival=wake)      # a job, or None: `wake()` is called once one comes
    job = feed.next(timeout=1.0)          # or wait for one (None: none came, or the feed ended)
    feed.close()                          # no more jobs: takers end once the feed is empty
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Iterable, Iterator

from .process.jobs import Job


class JobFeed:
    """A first-in, first-out feed of jobs between threads. `on_take` turns each job as it is taken
    (the engine names the freshest timing cutoff there)."""

    def __init__(self, on_take: Callable[[Job], Job] | None = None):
        self._on_take = on_take
        self._jobs: deque[Job] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._on_arrival: Callable[[], None] | None = None  # a taker waiting to hear of the next job

    @classmethod
    def of(cls, jobs: "JobFeed | Iterable[Job]") -> "JobFeed":
        """The feed itself, or a closed feed of these (finite) jobs: what an executor's `run` takes."""
        if isinstance(jobs, JobFeed):
            return jobs
        feed = cls()
        for job in jobs:
            feed.put(job)
        feed.close()
        return feed

    def put(self, job: Job) -> None:
        """One more job, last in line. After `close`, dropped: the run is over."""
        with self._ready:
            if self._closed:
                return
            self._jobs.append(job)
            self._ready.notify()
            arrived = self._take_on_arrival()
        if arrived is not None:
            arrived()

    def close(self) -> None:
        """No more jobs: takers end once they have taken those already in."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
            arrived = self._take_on_arrival()
        if arrived is not None:
            arrived()

    def take(self, on_arrival: Callable[[], None] | None = None) -> Job | None:
        """The next job, without waiting; None if there is none now, and then `on_arrival` (when
        given) is called, once, from the putting thread, when one comes or the feed closes."""
        with self._ready:
            if not self._jobs:
                if on_arrival is not None and not self._closed:
                    self._on_arrival = on_arrival
                return None
            job = self._jobs.popleft()
        return self._on_take(job) if self._on_take else job

    def next(self, timeout: float | None = None) -> Job | None:
        """The next job, waiting up to `timeout` seconds (None: until one comes or the feed closes);
        None if none came (see `ended`)."""
        with self._ready:
            self._ready.wait_for(lambda: self._jobs or self._closed, timeout)
            if not self._jobs:
                return None
            job = self._jobs.popleft()
        return self._on_take(job) if self._on_take else job

    def __len__(self) -> int:
        """Jobs in it now, not taken yet."""
        with self._ready:
            return len(self._jobs)

    @property
    def ended(self) -> bool:
        """Closed, and every job in it taken."""
        with self._ready:
            return self._closed and not self._jobs

    def __iter__(self) -> Iterator[Job]:
        """Each job as it comes, waiting for it; ends once the feed is closed and empty."""
        while (job := self.next()) is not None:
            yield job

    def _take_on_arrival(self) -> Callable[[], None] | None:
        arrived, self._on_arrival = self._on_arrival, None
        return arrived
