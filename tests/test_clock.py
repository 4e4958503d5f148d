"""The SM clock and throttling, without a GPU: a fake NVML for the reading and the reasons' names, a
fake driver for the steady-clock warm-up's stop rule, and the fake energy source (tests/fakes.py
EnergyExecutor) for the tune's report, its rows, the tuning database and T4."""

from __future__ import annotations

import sqlite3
import sys
import types
from pathlib import Path

import pytest

from gen.commands.tune_result import describe
from gen.core.results import Row, Status, row_from_json
from gen.gpu.process.energy import CLOCK_STEADY, NO_NVML, clock_summary, open_meter, settle_clock
from gen.store.export import t4_result

from . import fakes
from .test_energy import FakeDriver, FakeNvml, energy_tune

POWER_CAP, IDLE, APPLICATIONS_CLOCKS, HW_THERMAL = 0x4, 0x1, 0x2, 0x40


class ClockedNvml(FakeNvml):
    """pynvml with an energy counter and an SM clock, in the reasons' call of nvidia-ml-py 12.535 and
    later (`events`) or the older throttle reasons."""

    def __init__(self, mhz: float, reasons: int, events: bool = True):
        super().__init__(power=True)
        self.mhz, self.reasons, self.sm = mhz, reasons, []
        if events:
            self.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: self.reasons
        else:
            self.nvmlDeviceGetCurrentClocksThrottleReasons = lambda handle: self.reasons

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: bytes) -> int:
        return 1_000_000

    def nvmlDeviceGetClockInfo(self, handle: bytes, kind: int) -> int:
        self.sm.append(kind)
        return self.mhz


@pytest.mark.parametrize("events", [True, False])
def test_a_meter_reads_the_sm_clock_and_the_reasons_under_either_name(monkeypatch, events: bool) -> None:
    nvml = ClockedNvml(1755, POWER_CAP | IDLE, events)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter, reason = open_meter("0000:19:00.0")
    assert reason == "" and meter.counter and meter.clocks
    assert meter.clock() == (1755.0, POWER_CAP | IDLE) and set(nvml.sm) == {1}  # NVML_CLOCK_SM


def test_only_the_reasons_that_slow_the_sm_are_named_and_the_clock_is_the_median_reading() -> None:
    mhz, throttle = clock_summary([(1980, IDLE), (1755, POWER_CAP | APPLICATIONS_CLOCKS), (1900, HW_THERMAL),
                                   (1700, 0)])
    assert mhz == 1755 and throttle == "power cap, hardware thermal slowdown"
    assert clock_summary([(1980, IDLE | APPLICATIONS_CLOCKS), (1975, 0)]) == (1975, "")


class RisingClock:
    """An SM clock that reads each of `mhz` in turn, then the last for ever."""

    clocks = True

    def __init__(self, mhz: list[float]):
        self.mhz, self.reads = list(mhz), 0

    def clock(self) -> tuple[float, int]:
        self.reads += 1
        return (self.mhz.pop(0) if len(self.mhz) > 1 else self.mhz[0]), 0


def fake_driver(monkeypatch) -> FakeDriver:
    driver = FakeDriver()
    monkeypatch.setitem(sys.modules, "pycuda.driver", driver)
    monkeypatch.setitem(sys.modules, "pycuda", types.SimpleNamespace(driver=driver))
    return driver


def test_the_warm_up_runs_until_two_readings_agree_not_counting_the_first_batch(monkeypatch) -> None:
    driver = fake_driver(monkeypatch)

    def launch() -> None:
        driver.launches += 1

    # the first reading (one launch, sizing the batches) agrees with the second, but the clock still rises
    rising = [345.0, 345.0, 1200.0, 1800.0, 1975.0, 1975.0 * (1 + CLOCK_STEADY / 2)]
    assert settle_clock(launch, RisingClock(rising), limit_s=60.0) == rising
    assert driver.launches == 1 + 5 * 20  # then batches of CLOCK_READ_MS: 20 launches of the fake's 1 ms


class UnsettledClock(RisingClock):
    """An SM clock that never settles: 1000 and 2000 MHz in turn."""

    def clock(self) -> tuple[float, int]:
        self.reads += 1
        return 1000.0 * (1 + self.reads % 2), 0


def test_the_warm_up_is_bounded_when_the_clock_never_settles(monkeypatch) -> None:
    driver = fake_driver(monkeypatch)

    def launch() -> None:
        driver.launches += 1

    unsettled = UnsettledClock([])
    readings = settle_clock(launch, unsettled, limit_s=0.05)  # it returns: the test would hang otherwise
    assert len(readings) == unsettled.reads >= 1 and len(set(readings)) == min(2, len(readings))


@pytest.mark.parametrize("throttle, said", [("", "not throttled"), ("power cap", "throttled (power cap)")])
def test_the_report_names_each_finalists_clock_and_whether_it_throttled(tmp_path: Path, compile_options,
                                                                        throttle: str, said: str) -> None:
    result = energy_tune(tmp_path, "time", fakes.EnergyExecutor(throttle=throttle))
    lines = [line for line in describe(result).splitlines() if "interleaved rounds" in line]
    assert len(lines) == 3 and all(line.endswith(f"; SM clock 1980 MHz, {said}") for line in lines), lines
    assert result.winner.sm_clock_mhz == fakes.EnergyExecutor.CLOCK_MHZ and result.winner.throttle == throttle
    with sqlite3.connect(tmp_path / "t.sqlite") as connection:
        stored = connection.execute("SELECT sm_clock_mhz, throttle FROM measurements WHERE sm_clock_mhz IS NOT NULL "
                                    "ORDER BY id DESC LIMIT 1").fetchone()
    connection.close()
    assert stored == (1980.0, throttle)


def test_without_nvml_a_tune_reads_no_clock_and_its_rows_say_none(tmp_path: Path, compile_options) -> None:
    result = energy_tune(tmp_path, "time", fakes.EnergyExecutor(missing=NO_NVML))
    assert "SM clock" not in describe(result)
    assert all(s.sm_clock_mhz is None and s.throttle is None for s in result.standings)
    assert result.winner.sm_clock_mhz is None and result.winner.throttle is None


def test_the_clock_reaches_t4_by_kernel_tuners_name_and_a_row_reads_back() -> None:
    row = Row("v", "matmul", {}, Status.OK, error=0.0, median_ms=1.0, sm_clock_mhz=1755.0, throttle="power cap")
    measurements = {m["name"]: (m["value"], m["unit"]) for m in t4_result(row)["measurements"]}
    assert measurements["core_freq"] == (1755.0, "MHz") and "" not in measurements
    back = row_from_json(row.to_json())
    assert (back.sm_clock_mhz, back.throttle) == (1755.0, "power cap")
    with pytest.raises(ValueError, match="'throttle' must be"):
        row_from_json(row.to_json().replace('"power cap"', "4"))
