"""How long a test waits for an event before it fails, and how soon a thing must happen: seconds on
an idle machine, stretched by the machine's load (the suite runs beside other work: at a load of
8 on 2 cores, everything takes about four times as long). Tests wait for events (a line, a process's
end, a thread's); these deadlines only turn a hang into a failure, or bound "at once"."""

from __future__ import annotations

import os


def patient(seconds: float) -> float:
    """`seconds` times the load per core, when that is above 1: the greater of the last minute's
    average and the processes that would run now (the average lags behind a load that just began)."""
    with open("/proc/loadavg") as loadavg:
        minute, _, _, running = loadavg.read().split()[:4]
    load = max(float(minute), float(running.split("/")[0]))
    return seconds * max(1.0, load / (len(os.sched_getaffinity(0)) or 1))
