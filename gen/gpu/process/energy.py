"""Joules per launch and the SM clock from NVML (the nvidia-ml-py package, imported as pynvml), read
only: tilegen never sets clocks, power limits or any other setting of the GPU.

NVML's total-energy counter (millijoules since the driver loaded; Volta and later) advances only
every few milliseconds (scripts/bench_energy.py measures by how much and how often), so a
variant is run back to back for ENERGY_WINDOW_S or more, and the GPU's average power is the
counter's rise between two of its updates divided by the time between them: as many of the counter's
update periods as fit between the two, each period the median gap between updates the host saw (a
host slowed by other work sees an update late, which stretches one gap and shortens the next, but
moves no median). Where the counter is
missing, the average of NVML's power readings over the window stands in. Energy per launch is
that power times the time per launch of the same back-to-back loop (for a kernel shorter than
the host takes to launch it, the loop's time includes the GPU's waits for the host).

The SM clock and NVML's clock event (throttle) reasons are read with a variant's timed rounds
(`clock_summary`: the median MHz and the reasons that slowed the SM, SLOWDOWNS), after
`settle_clock` has run it back to back until the clock stopped rising.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from ..runtime.device import event, synchronize

ENERGY_WINDOW_S = 0.5  # the variant runs back to back this long (after the warm-up), at least
ENERGY_WARMUP_S = 0.1  # before: the GPU's power settles under the new load
MIN_UPDATES = 5  # counter updates within the window, at least
MAX_WINDOW_S = 5.0  # a counter that does not advance this long is no counter
BATCH_MS = 5.0  # launches are queued in batches of about this much GPU work
BATCHES_AHEAD = 20  # batches queued behind the one running (100 ms): a host slowed by other work for less
# leaves the GPU busy (an idle GPU's watts would count in the variant's joules)
NO_NVML = "NVML is not installed (pip install nvidia-ml-py, or tilegen[cuda])"
CLOCK_STEADY = 0.01  # two SM clock readings this close, relatively, are a steady clock
CLOCK_READ_MS = 20.0  # GPU work queued between two readings while the clock settles
CLOCK_SETTLE_S = 0.5  # the settling stops here, steady or not
MAX_BATCH = 10_000  # launches queued between two clock readings, at most
NVML_CLOCK_SM = 1  # nvmlClockType_t's SM clock
# NVML's clock event reasons that slow the SM (nvmlClocksEventReason*, the same bits as the older
# nvmlClocksThrottleReason*); idle, applications clocks, sync boost and display settings are not throttling.
SLOWDOWNS = {0x4: "power cap", 0x8: "hardware slowdown", 0x20: "thermal slowdown",
             0x40: "hardware thermal slowdown", 0x80: "hardware power brake"}


@dataclass(frozen=True)
class Reading:
    """One observed value of the meter: the host's clock (s), and joules (the counter) or watts."""

    seconds: float
    value: float


class Meter:
    """One GPU as NVML reads it: its energy counter, or its power readings where the counter is missing
    (`counter`; None: neither), and its SM clock with the reasons it is slowed (`clocks`)."""

    def __init__(self, nvml: Any, handle: Any, counter: bool | None, clocks: bool = False):
        self._nvml, self._handle, self.counter, self.clocks = nvml, handle, counter, clocks

    def read(self) -> float:
        """Joules since the driver loaded (counter), else watts now."""
        if self.counter:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1e3
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1e3

    def clock(self) -> tuple[float, int]:
        """The SM clock now (MHz) and NVML's clock event reasons (a bit mask)."""
        reasons = getattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # its name before nvidia-ml-py 12.535
        return float(self._nvml.nvmlDeviceGetClockInfo(self._handle, NVML_CLOCK_SM)), int(reasons(self._handle))


def open_meter(pci_bus_id: str) -> tuple[Meter | None, str]:
    """The meter of the GPU at `pci_bus_id` (None where NVML cannot reach it), and why it reads no
    energy (one line; '' where it does)."""
    try:
        import pynvml
    except ImportError:
        return None, NO_NVML
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode())  # bytes: every nvidia-ml-py takes them
    except pynvml.NVMLError as error:
        return None, f"NVML cannot reach the GPU at {pci_bus_id} ({error})"
    meter = Meter(pynvml, handle, None)
    meter.clocks = _answers(pynvml, meter.clock)
    for counter, read in ((True, pynvml.nvmlDeviceGetTotalEnergyConsumption), (False, pynvml.nvmlDeviceGetPowerUsage)):
        if _answers(pynvml, lambda: read(handle)):
            meter.counter = counter
            return meter, ""
    return meter, f"the GPU at {pci_bus_id} reports neither an energy counter nor its power to NVML"


def _answers(nvml: Any, read: Callable[[], Any]) -> bool:
    """Whether NVML answers `read` on this GPU."""
    try:
        read()
        return True
    except (nvml.NVMLError, AttributeError):  # AttributeError: an nvidia-ml-py without the call
        return False


def clock_summary(readings: list[tuple[float, int]]) -> tuple[float, str]:
    """The median SM clock of the readings (MHz, the lower middle one) and the reasons seen that slowed
    the SM, named ('' when none)."""
    seen = 0
    for _, reasons in readings:
        seen |= reasons
    return sorted(mhz for mhz, _ in readings)[(len(readings) - 1) // 2], \
        ", ".join(name for bit, name in SLOWDOWNS.items() if seen & bit)


def settle_clock(call: Callable[[], Any], meter: Meter, limit_s: float = CLOCK_SETTLE_S) -> list[float]:
    """Run `call` back to back until two SM clock readings about CLOCK_READ_MS of GPU work apart are
    within CLOCK_STEADY of each other (the clock stopped rising), or for `limit_s`; the readings
    (MHz). Each is taken while the work queued before it runs; the first batch, one call, only sizes
    the rest: its reading is not compared."""
    batch, readings, started = 1, [], time.monotonic()
    while time.monotonic() - started < limit_s:
        begun = event(recorded=True)
        for _ in range(batch):
            call()
        queued = event(recorded=True)
        readings.append(meter.clock()[0])
        queued.synchronize()
        if len(readings) > 2 and abs(readings[-1] - readings[-2]) <= CLOCK_STEADY * readings[-2]:
            break
        batch = min(MAX_BATCH, max(1, round(CLOCK_READ_MS * batch / max(queued.time_since(begun), 1e-3))))
    return readings


def average_watts(readings: list[Reading], counter: bool) -> float | None:
    """The GPU's average power over the readings (each a change from the one before; the first is
    where reading began): the counter's rise from its first update to its last over the time
    between them, counted in whole update periods of the median gap between updates; or the mean
    of the power readings. None where the counter updated fewer than twice."""
    if not counter:
        return sum(r.value for r in readings) / len(readings) if readings else None
    updates = readings[1:]
    if len(updates) < 2 or updates[-1].seconds <= updates[0].seconds:
        return None
    period = statistics.median(later.seconds - earlier.seconds for earlier, later in zip(updates, updates[1:]))
    periods = max(1, round((updates[-1].seconds - updates[0].seconds) / period))
    return (updates[-1].value - updates[0].value) / (periods * period)


def energy_per_launch(call: Callable[[], Any], meter: Meter, seconds_per_launch: float,
                      window_s: float = ENERGY_WINDOW_S) -> tuple[float, float] | str:
    """(joules per launch, average watts) of `call` run back to back, for ENERGY_WARMUP_S and then
    `window_s` or more (until the counter updated MIN_UPDATES times); or why not, in a few words.
    The meter is read once a batch, and while BATCHES_AHEAD batches of launches wait behind the one
    running (the GPU is busy throughout, unless the host cannot launch as fast as it runs).
    `seconds_per_launch` sizes the batches."""
    batch = max(1, round(BATCH_MS / 1e3 / max(seconds_per_launch, 1e-7)))
    readings: list[Reading] = []
    queued: deque[Any] = deque()
    first, launches, started = None, 0, time.monotonic()
    while (elapsed := time.monotonic() - started - ENERGY_WARMUP_S) < window_s or len(readings) <= MIN_UPDATES:
        if elapsed >= MAX_WINDOW_S:
            synchronize()
            what = "energy counter" if meter.counter else "power reading"
            return f"NVML's {what} changed {max(0, len(readings) - 1)} times in {MAX_WINDOW_S:g} s"
        if first is None and elapsed >= 0:
            first = event(recorded=True)  # the window starts behind the warm-up's launches
        for _ in range(batch):
            call()
        launches += batch if first is not None else 0
        queued.append(event(recorded=True))
        if first is not None:  # once a batch: a host slower than the GPU never fills the queue below
            _read(meter, readings)
        while len(queued) > BATCHES_AHEAD:
            if queued[0].query():
                queued.popleft()
            elif first is not None:
                _read(meter, readings)
    last = event(recorded=True)
    last.synchronize()
    watts = average_watts(readings, meter.counter)
    if watts is None:
        return "too few energy readings"
    return watts * last.time_since(first) / 1e3 / launches, watts


def _read(meter: Meter, readings: list[Reading]) -> None:
    """Read the meter; keep the reading if it changed."""
    value = meter.read()
    if not readings or value != readings[-1].value:
        readings.append(Reading(time.monotonic(), value))
