"""Where one run's jobs meet this host's workers (gen.gpu.local): the table, in the caller's
thread, takes jobs from the feed (gen.gpu.feed) as workers can hold them, sends them, waits on
every busy worker at once (poll), reads what each sent as it comes, and times each one's silence.
A job's result, and the next job sent in its place, cost one thread no hand-over.

A worker holds up to JOBS_AHEAD jobs: one running, the next waiting in its socket, so that it
starts the next the moment it finishes one, without a round trip through this process. It still
runs them one at a time, so no two timings share a GPU. A job that runs aside, in a thread of its
own (a sanitizer job, or any job whose worker must start again first), waits until its worker has
nothing sent, and what is dealt to that worker after it waits behind it: compute-sanitizer has
the GPU to itself. When a worker dies or hangs, the job it was running gets the row, and the jobs
queued behind it are sent again, in order, to the worker started afresh: none is lost or run twice.
"""

from __future__ import annotations

import os
import queue
import select
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..core.errors import Interrupted
from ..core.processes import POLL_S
from ..core.results import Measurement, Status
from .feed import JobFeed
from .isolated import IsolatedWorker
from .process.jobs import Job

JOBS_AHEAD = 2  # jobs a worker holds at once: the one it runs and the next
SCAN_S = 0.02  # how often the busy workers' silences are looked at (a hang is found this much late at most)

# What runs aside, in a thread of its own, while the job's worker holds no job: a sanitizer job,
# which gives its measurement; or, for any other job, its worker started again (None: the job is
# sent next). Raises if it cannot.
Aside = Callable[[IsolatedWorker, Job], Measurement | None]


@dataclass
class _Queued:
    job: Job
    behind: bool = False  # sent while its worker ran another job
    retried: bool = False  # sent again after its worker died before it told any phase


@dataclass
class _Seat:
    """One worker as the table sees it."""

    worker: IsolatedWorker
    sent: deque[_Queued] = field(default_factory=deque)  # in the worker's hands; the first is running
    waiting: deque[_Queued] = field(default_factory=deque)  # dealt, not sent yet
    aside: bool = False  # a thread aside runs for it
    descriptor: int | None = None  # registered with the poll while something is sent


class Table:
    """One run's table: `serve` deals the feed's jobs to the workers and yields each job with its
    measurement as it finishes; `post` is how a thread aside hands its outcome back."""

    def __init__(self, workers: list[IsolatedWorker], killed: threading.Event, aside: Aside, feed: JobFeed):
        self.killed, self._aside, self._feed = killed, aside, feed
        self._seats = {id(worker): _Seat(worker) for worker in workers}
        # A seat once per job its worker can take; one of each first: the first jobs spread over the GPUs.
        self._free: deque[_Seat] = deque(seat for _ in range(JOBS_AHEAD) for seat in self._seats.values())
        self._posted: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self._wake_read, self._wake_write = os.pipe()
        self._open = True  # until `close`: the other threads wake the table only while it is (under _lock)
        self._lock = threading.Lock()
        self._busy: dict[int, _Seat] = {}  # by the worker's descriptor
        self._dealt = 0  # jobs taken from the feed
        self._fed_all = False  # the feed has ended: every job is dealt
        self._finished = 0  # jobs whose measurement came back
        self._next_scan = 0.0  # when the workers' silences are looked at next
        self._poll = select.poll()
        self._poll.register(self._wake_read, select.POLLIN)

    def post(self, item: tuple) -> None:
        """From a thread aside: ("started", worker, queued), its worker started again; or ("finished",
        worker, job, measurement): a sanitizer job's, or why the aside could not be done."""
        self._posted.put(item)
        self._wake()

    def serve(self) -> Iterator[tuple[Job, Measurement]]:
        """Each job with its measurement as it finishes, until the feed has ended and every job dealt
        has finished; nothing once killed (what was running is dropped)."""
        self._deal()
        while not self._fed_all or self._finished < self._dealt:
            finished = self._round()
            if self.killed.is_set():
                return
            self._finished += len(finished)
            self._deal()
            yield from finished

    def close(self) -> None:
        """The run is over (or left early): a worker still busy is stopped, its jobs dropped (their
        answers must not reach a later run)."""
        for seat in self._busy.values():
            seat.worker.kill()
        with self._lock:
            self._open = False
            os.close(self._wake_read)
            os.close(self._wake_write)

    def _wake(self) -> None:
        """From another thread: the table looks at the feed and the posts again (unless closed)."""
        with self._lock:
            if self._open:
                os.write(self._wake_write, b"!")

    def _deal(self) -> None:
        """Hand the feed's jobs to the workers that can hold one more; when it has none now, it
        wakes the table once one comes."""
        while self._free and not self._fed_all and not self.killed.is_set():
            job = self._feed.take(on_arrival=self._wake)
            if job is None:
                self._fed_all = self._feed.ended
                return
            self._dealt += 1
            seat = self._free.popleft()
            seat.waiting.append(_Queued(job))
            self._advance(seat)

    # ---- one round -------------------------------------------------------------------------------

    def _round(self) -> list[tuple[Job, Measurement]]:
        """Wait until a worker sent something, something was posted, or a worker's silence ran out;
        what finished meanwhile."""
        finished: list[tuple[Job, Measurement]] = []
        for descriptor, _ in self._poll.poll(self._wait_ms()):
            if descriptor == self._wake_read:
                os.read(self._wake_read, 1 << 16)
                self._take_posted(finished)
            elif (seat := self._busy.get(descriptor)) is not None:
                self._read(seat, finished)
        now = time.monotonic()
        if now >= self._next_scan:  # not every round: with many workers, a scan costs more than a row
            self._next_scan = now + SCAN_S
            for seat in [seat for seat in self._busy.values() if seat.worker.deadline <= now]:
                self._job_done(seat, seat.worker.time_out(), finished)
        return finished

    def _take_posted(self, finished: list[tuple[Job, Measurement]]) -> None:
        while not self._posted.empty():
            kind, worker, *what = self._posted.get_nowait()
            seat = self._seats[id(worker)]
            seat.aside = False
            if kind == "started":
                seat.waiting.appendleft(what[0])
            else:  # "finished"
                finished.append(self._finished_job(seat, what[0], what[1]))
            self._advance(seat)

    def _read(self, seat: _Seat, finished: list[tuple[Job, Measurement]]) -> None:
        """What a readable worker sent: each job it finished (several, if they came together)."""
        try:
            measurement = seat.worker.receive()
            while measurement is not None:
                self._job_done(seat, measurement, finished)
                measurement = seat.worker.receive_pending() if seat.sent else None
        except Exception:  # its connection closed under it: killed
            if not self.killed.is_set():
                raise

    def _job_done(self, seat: _Seat, measurement: Measurement, finished: list[tuple[Job, Measurement]]) -> None:
        """The seat's running job finished (or hung, or killed its worker). A worker gone takes the
        jobs queued behind it back to wait for the worker's next start."""
        done = seat.sent.popleft()
        if measurement.context_lost or seat.worker.stopped:  # what it held never ran: it waits for the next start
            seat.waiting.extendleft(reversed(seat.sent))
            seat.sent.clear()
        if not seat.sent:
            self._unregister(seat)
        if done.behind and not done.retried and seat.worker.died_unstarted:
            # The worker died after its last job, or as this one began: once, this one is not blamed.
            seat.waiting.appendleft(_Queued(done.job, retried=True))
        else:
            finished.append(self._finished_job(seat, done.job, measurement))
        self._advance(seat)

    def _finished_job(self, seat: _Seat, job: Job, measurement: Measurement) -> tuple[Job, Measurement]:
        self._free.append(seat)
        return job, measurement

    # ---- sending ---------------------------------------------------------------------------------

    def _advance(self, seat: _Seat) -> None:
        """Send what waits for the worker, in order, up to a job that runs aside: that one starts
        once the worker has nothing sent."""
        while seat.waiting and not seat.aside and not self.killed.is_set():
            queued = seat.waiting[0]
            if not queued.job.sanitizer and seat.worker.alive:
                seat.waiting.popleft()
                if not self._send(seat, queued) and seat.sent:
                    return  # its worker died: the job waits for what it sent to come back
                continue
            if seat.sent:
                return  # compute-sanitizer and a start happen only while the worker holds no job
            seat.waiting.popleft()
            seat.aside = True
            threading.Thread(target=self._run_aside, args=(seat.worker, queued), daemon=True).start()

    def _run_aside(self, worker: IsolatedWorker, queued: _Queued) -> None:
        """In a thread of its own: a sanitizer job, or the worker's start."""
        try:
            measurement = self._aside(worker, queued.job)
        except Interrupted:  # killed: what was running is dropped
            return
        except Exception as error:  # a worker that cannot start again, say: a row that says so
            self.post(("finished", worker, queued.job, Measurement(
                Status.LAUNCH_ERROR, f"{type(error).__name__}: {error}", device=worker.device, context_lost=True)))
            return
        self.post(("started", worker, queued) if measurement is None else ("finished", worker, queued.job, measurement))

    def _send(self, seat: _Seat, queued: _Queued) -> bool:
        """The job to its worker. Unless the run was killed meanwhile (then it is dropped), a worker
        that died under it takes the job back to wait for its next start: at once if it holds no
        other job, else once what it holds comes back (its death is read from its socket)."""
        try:  # a kill from another thread may stop the worker at any point of this
            descriptor = seat.worker.fileno()
            seat.worker.send(queued.job, queued_behind=bool(seat.sent))
        except (Interrupted, OSError):  # the worker stopped under us: by a kill, or it died
            if not self.killed.is_set():
                seat.waiting.appendleft(queued)
                if not seat.sent:
                    seat.worker.kill()
            return False
        queued.behind = bool(seat.sent)
        seat.sent.append(queued)
        if seat.descriptor is None:
            seat.descriptor = descriptor
            self._busy[descriptor] = seat
            self._poll.register(descriptor, select.POLLIN)
        return True

    def _unregister(self, seat: _Seat) -> None:
        if seat.descriptor is not None:
            self._busy.pop(seat.descriptor, None)
            try:
                self._poll.unregister(seat.descriptor)
            except KeyError:
                pass
            seat.descriptor = None

    def _wait_ms(self) -> float:
        """Until the next scan for silent workers; at most POLL_S, to notice a kill."""
        return 1000 * max(0.0, min(POLL_S, self._next_scan - time.monotonic()))
