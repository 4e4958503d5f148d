"""Joules per launch from NVML (the nvidia-ml-py package, imported as pynvml), read only: tilegen
never sets clocks, power limits or any other setting of the GPU.

NVML's total-energy counter (millijoules since the driver loaded; Volta and later) advances only
every few milliseconds (scripts/bench_energy.py measures by how much and how often), so a
variant is run back to back for ENERGY_WINDOW_S or more, and the GPU's average power is the
counter's rise between two of its updates divided by the time between them. Where the counter is
missing, the average of NVML's power readings over the window stands in. Energy per launch is
that power times the time per launch of the same back-to-back loop (for a kernel shorter than
the host takes to launch it, the loop's time includes the GPU's waits for the host).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

ENERGY_WINDOW_S = 0.5  # the variant runs back to back this long (after the warm-up), at least
ENERGY_WARMUP_S = 0.1  # before: the GPU's power settles under the new load
MIN_UPDATES = 5  # counter updates within the window, at least
MAX_WINDOW_S = 5.0  # a counter that does not advance this long is no counter
BATCH_MS = 5.0  # launches are queued in batches of about this much GPU work
NO_NVML = "NVML is not installed (pip install nvidia-ml-py, or tilegen[cuda])"


@dataclass(frozen=True)
class Reading:
    """One observed value of the meter: the host's clock (s), and joules (the counter) or watts."""

    seconds: float
    value: float


class Meter:
    """One GPU's energy counter, or its power readings where the counter is missing (`counter`)."""

    def __init__(self, nvml: Any, handle: Any, counter: bool):
        self._nvml, self._handle, self.counter = nvml, handle, counter

    def read(self) -> float:
        """Joules since the driver loaded (counter), else watts now."""
        if self.counter:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1e3
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1e3


def open_meter(pci_bus_id: str) -> tuple[Meter | None, str]:
    """The meter of the GPU at `pci_bus_id`, or None and why not (one line)."""
    try:
        import pynvml
    except ImportError:
        return None, NO_NVML
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode())  # bytes: every nvidia-ml-py takes them
    except pynvml.NVMLError as error:
        return None, f"NVML cannot reach the GPU at {pci_bus_id} ({error})"
    for counter, read in ((True, pynvml.nvmlDeviceGetTotalEnergyConsumption), (False, pynvml.nvmlDeviceGetPowerUsage)):
        try:
            read(handle)
            return Meter(pynvml, handle, counter), ""
        except pynvml.NVMLError:
            continue
    return None, f"the GPU at {pci_bus_id} reports neither an energy counter nor its power to NVML"


def average_watts(readings: list[Reading], counter: bool) -> float | None:
    """The GPU's average power over the readings (each a change from the one before; the first is
    where reading began): the counter's rise from its first update to its last over the time
    between them, or the mean of the power readings. None where the counter updated fewer than
    twice."""
    if not counter:
        return sum(r.value for r in readings) / len(readings) if readings else None
    updates = readings[1:]
    if len(updates) < 2 or updates[-1].seconds <= updates[0].seconds:
        return None
    return (updates[-1].value - updates[0].value) / (updates[-1].seconds - updates[0].seconds)


def energy_per_launch(call: Callable[[], Any], meter: Meter, seconds_per_launch: float,
                      window_s: float = ENERGY_WINDOW_S) -> tuple[float, float] | str:
    """(joules per launch, average watts) of `call` run back to back, for ENERGY_WARMUP_S and then
    `window_s` or more (until the counter updated MIN_UPDATES times); or why not, in a few words.
    The meter is read only while a batch of launches waits behind the one running: the GPU is busy
    throughout. `seconds_per_launch` sizes the batches."""
    import pycuda.driver as cuda

    batch = max(1, round(BATCH_MS / 1e3 / max(seconds_per_launch, 1e-7)))
    readings: list[Reading] = []
    queued: deque[Any] = deque()
    first, launches, started = None, 0, time.monotonic()
    while (elapsed := time.monotonic() - started - ENERGY_WARMUP_S) < window_s or len(readings) <= MIN_UPDATES:
        if elapsed >= MAX_WINDOW_S:
            cuda.Context.synchronize()
            what = "energy counter" if meter.counter else "power reading"
            return f"NVML's {what} changed {max(0, len(readings) - 1)} times in {MAX_WINDOW_S:g} s"
        if first is None and elapsed >= 0:
            first = _recorded(cuda.Event())  # the window starts behind the warm-up's launches
        for _ in range(batch):
            call()
        launches += batch if first is not None else 0
        queued.append(_recorded(cuda.Event()))
        while len(queued) > 1:
            if queued[0].query():
                queued.popleft()
            elif first is not None:
                _read(meter, readings)
    last = _recorded(cuda.Event())
    last.synchronize()
    watts = average_watts(readings, meter.counter)
    if watts is None:
        return "too few energy readings"
    return watts * last.time_since(first) / 1e3 / launches, watts


def _recorded(event: Any) -> Any:
    event.record()
    return event


def _read(meter: Meter, readings: list[Reading]) -> None:
    """Read the meter; keep the reading if it changed."""
    value = meter.read()
    if not readings or value != readings[-1].value:
        readings.append(Reading(time.monotonic(), value))
