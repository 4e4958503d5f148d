"""The feed between the engine and an executor (gen.gpu.feed): jobs in order, a taker told once
when the next comes, an iterator that waits and ends when the feed closes."""

from __future__ import annotations

import threading
from dataclasses import replace

from gen.gpu.feed import JobFeed
from gen.gpu.process.jobs import Job
from .waits import patient


def _job(number: int) -> Job:
    return Job("matmul_f32_t16_p0_guard_both", "matmul", "/nonexistent.cubin", f"{64 * number}x64x64", ticket=number)


def test_a_taker_finds_none_and_is_told_once_when_the_next_job_comes() -> None:
    feed = JobFeed()
    told: list[str] = []
    assert feed.take(on_arrival=lambda: told.append("came")) is None
    feed.put(_job(1))
    feed.put(_job(2))
    assert told == ["came"]  # once, not per job
    assert [feed.take(), feed.take(), feed.take()] == [_job(1), _job(2), None]
    assert not feed.ended
    feed.close()
    assert feed.ended and told == ["came"]  # the last take left no one waiting


def test_closing_tells_a_waiting_taker_and_drops_later_jobs() -> None:
    feed = JobFeed()
    told = threading.Event()
    assert feed.take(on_arrival=told.set) is None
    feed.close()
    assert told.is_set() and feed.ended
    feed.put(_job(1))
    assert feed.take() is None and len(feed) == 0


def test_iterating_waits_for_each_job_and_ends_once_closed_and_empty() -> None:
    feed = JobFeed(on_take=lambda job: replace(job, cache_config="l1"))
    taken: list[Job] = []
    first = threading.Event()

    def take_all() -> None:
        for job in feed:
            taken.append(job)
            first.set()

    taker = threading.Thread(target=take_all)
    taker.start()
    feed.put(_job(1))
    assert first.wait(patient(60))  # it took the first while the feed stayed open
    feed.put(_job(2))
    feed.close()
    taker.join(patient(60))
    assert not taker.is_alive()
    assert [(job.ticket, job.cache_config) for job in taken] == [(1, "l1"), (2, "l1")]


def test_a_job_s_ticket_is_not_part_of_the_work() -> None:
    assert _job(1) != _job(2) and replace(_job(1), ticket=7) == _job(1)
    assert hash(replace(_job(1), ticket=7)) == hash(_job(1))


def test_waiting_for_the_next_job_gives_up_at_its_timeout_and_ends_with_the_feed() -> None:
    feed = JobFeed()
    assert feed.next(timeout=0) is None and not feed.ended  # none yet: the taker looks again later
    feed.put(_job(1))
    assert feed.next(timeout=0) == _job(1)
    feed.close()
    assert feed.next() is None and feed.ended  # closed and empty: no wait
