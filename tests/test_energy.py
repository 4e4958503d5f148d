"""Energy as an objective, without a GPU: a fake energy source (tests/fakes.py EnergyExecutor) for the
objectives, the finalists' front, the tuning database, CSV and T4; NVML's readings as numbers."""

from __future__ import annotations

import json
import sqlite3
import sys
import types
from pathlib import Path

import pytest

from gen.cli.main import main
from gen.core.errors import UsageError
from gen.core.objectives import pareto_front, ranked, score
from gen.core.results import Row, Status, row_from_json
from gen.core.timing import TimingOptions
from gen.evaluate.options import RunOptions
from gen.gpu.process import energy
from gen.gpu.process.energy import NO_NVML, Reading, average_watts, energy_per_launch, open_meter
from gen.call.lookup import tuned
from gen.commands.sweep import SweepOptions, summary, sweep
from gen.commands.tune import TuneOptions, tune
from gen.commands.tune_result import describe
from gen.store.export import t4_result
from gen.store.results_log import ResultLog, read_rows
from gen.store.tuning_db import TuningDB

from . import fakes

MATMUL = {"tile": ["8", "16", "32"], "padding": ["0"], "bounds": ["guard"], "sync": ["both"]}
TIME_BEST, ENERGY_BEST = "matmul_f32_t32_p0_guard_both", "matmul_f32_t8_p0_guard_both"


def ok_row(name: str, median_ms: float, energy_j: float | None) -> Row:
    return Row(name, "matmul", {}, Status.OK, error=0.0, median_ms=median_ms, energy_j=energy_j,
               power_w=None if energy_j is None else energy_j / median_ms * 1e3)


def test_each_objective_ranks_rows_by_its_own_figure_and_leaves_out_what_it_cannot_score() -> None:
    rows = [ok_row("fast", 1.0, 0.5), ok_row("frugal", 2.0, 0.2), ok_row("neither", 3.0, 0.6),
            ok_row("unmeasured", 0.5, None), Row("wrong", "matmul", {}, Status.WRONG, median_ms=0.1, energy_j=0.01)]
    assert [r.name for r in ranked(rows, "time")] == ["unmeasured", "fast", "frugal", "neither"]
    assert [r.name for r in ranked(rows, "energy")] == ["frugal", "fast", "neither"]
    assert [r.name for r in ranked(rows, "edp")] == ["frugal", "fast", "neither"]  # 0.4, 0.5, 1.8 mJ*s
    assert score(rows[1], "edp") == pytest.approx(0.2 * 2.0e-3)
    assert score(rows[3], "energy") is None and score(rows[4], "time") is None


def test_the_front_keeps_what_nothing_beats_in_both_time_and_energy() -> None:
    rows = [ok_row("fast", 1.0, 0.5), ok_row("frugal", 2.0, 0.2), ok_row("neither", 3.0, 0.6),
            ok_row("tied-time-worse-energy", 1.0, 0.7), ok_row("middle", 1.5, 0.3), ok_row("unmeasured", 0.5, None)]
    assert [r.name for r in pareto_front(rows)] == ["fast", "middle", "frugal"]


def test_an_unknown_objective_is_refused_in_python_and_on_the_command_line(capsys) -> None:
    with pytest.raises(UsageError, match="objective 'power' is not one of: time, energy, edp"):
        TuneOptions("matmul", "64x64x64", objective="power")
    with pytest.raises(SystemExit) as exited:
        main(["tune", "matmul", "--size", "64x64x64", "--objective", "power"])
    assert exited.value.code == 2
    assert "invalid choice: 'power'" in capsys.readouterr().err


def energy_tune(tmp_path: Path, objective: str, executor: fakes.FakeExecutor):
    options = TuneOptions("matmul", "64x64x64", params=MATMUL, strategy="brute", db=tmp_path / "t.sqlite",
                          progress=False, top=3, objective=objective)
    (result,) = tune(options, executor)
    return result


@pytest.mark.parametrize("objective, winner", [("time", TIME_BEST), ("energy", ENERGY_BEST), ("edp", ENERGY_BEST)])
def test_a_tune_measures_its_finalists_energy_and_ranks_them_by_the_objective(tmp_path: Path, compile_options,
                                                                              objective: str, winner: str) -> None:
    executor = fakes.EnergyExecutor()
    result = energy_tune(tmp_path, objective, executor)
    rounds = result.evaluations + 3 * 5  # three finalists, five interleaved rounds
    searched, finals, after = executor.ran[:result.evaluations], executor.ran[result.evaluations:rounds], \
        executor.ran[rounds:]  # after: the family's default variant, for the speed-up, if not measured yet
    assert not any(job.timing.energy for job in searched + after)
    # energy in every round where the objective ranks by it, else in the last (for the front): it is slow
    measured = finals if objective != "time" else finals[-3:]
    assert all(job.timing.energy for job in measured) and not any(job.timing.energy for job in finals[:-len(measured)])
    assert result.winner.name == result.standings[0].name == winner and result.winner.energy_j is not None
    assert [s.name for s in result.front] == [TIME_BEST, "matmul_f32_t16_p0_guard_both", ENERGY_BEST]
    report = describe(result)
    assert f"time-energy front of the finalists (fastest first, least energy last): {TIME_BEST} (" in report
    db = TuningDB(tmp_path / "t.sqlite", create=False)
    assert db.best(result.problem, objective).name == winner
    assert db.best(result.problem, "time").name == TIME_BEST and db.best(result.problem, "energy").name == ENERGY_BEST


def test_a_winner_by_energy_slower_than_the_default_is_said_slower_not_faster(tmp_path: Path, compile_options) -> None:
    result = energy_tune(tmp_path, "energy", fakes.EnergyExecutor())
    slower = result.standings[0].median_ms / result.default.median_ms
    assert result.winner.name == ENERGY_BEST and slower > 1  # the fake's energy-optimal tile is slow
    (line,) = [line for line in describe(result).splitlines() if "default variant" in line]
    assert line.endswith(f": {slower:.2f}x slower (the winner is chosen by energy, not by time)"), line


def test_best_and_gen_tuned_take_the_objective(tmp_path: Path, compile_options, capsys) -> None:
    result = energy_tune(tmp_path, "time", fakes.EnergyExecutor())
    db = str(tmp_path / "t.sqlite")
    for objective, winner in (("time", TIME_BEST), ("energy", ENERGY_BEST), ("edp", ENERGY_BEST)):
        assert main(["best", "matmul", "--size", "64x64x64", "--gpu-model", "Fake", "--db", db,
                     "--objective", objective]) == 0
        assert capsys.readouterr().out.strip() == winner
        assert tuned("matmul", 64, 64, 64, db=Path(db), device=fakes.FAKE_DEVICE, objective=objective).name == winner
    with pytest.raises(UsageError, match="objective 'joules' is not one of"):
        tuned("matmul", 64, 64, 64, db=Path(db), device=fakes.FAKE_DEVICE, objective="joules")
    assert result.problem.gpu_model == fakes.FAKE_DEVICE.model


def test_without_energy_a_tune_says_why_in_one_line_and_ranks_by_time(tmp_path: Path, compile_options, capsys) -> None:
    result = energy_tune(tmp_path, "energy", fakes.EnergyExecutor(missing=NO_NVML))
    assert result.winner.name == TIME_BEST and result.winner.energy_j is None and not result.front
    lines = [line for line in describe(result).splitlines() if "energy" in line]
    assert lines == [f"energy not measured: {NO_NVML}: ranked by time"]
    db = str(tmp_path / "t.sqlite")
    assert main(["best", "matmul", "--size", "64x64x64", "--gpu-model", "Fake", "--db", db,
                 "--objective", "energy"]) == 0
    captured = capsys.readouterr()
    assert "nothing tuned applies with its energy measured (--objective energy)" in captured.err


def test_time_only_work_never_asks_for_energy(tmp_path: Path, compile_options) -> None:
    executor = fakes.EnergyExecutor(missing=NO_NVML)
    result = energy_tune(tmp_path, "time", executor)
    assert sum(job.timing.energy for job in executor.ran) == 3  # the finalists only, in their last round
    assert describe(result).count(NO_NVML) == 1 and result.winner.name == TIME_BEST


def test_energy_reaches_the_results_log_csv_and_t4(tmp_path: Path) -> None:
    row = ok_row("matmul_f32_t8_p0_guard_both", 2.0, 0.25)
    with ResultLog(tmp_path) as log:
        log.append(row)
        log.finish()
    (back,) = read_rows(tmp_path / "results.jsonl")
    assert (back.energy_j, back.power_w) == (0.25, 125.0)
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert {"energy_j", "power_w"} <= set(header)
    measurements = {m["name"]: (m["value"], m["unit"]) for m in t4_result(row)["measurements"]}
    assert measurements["nvml_energy"] == (0.25, "J") and measurements["nvml_power"] == (125.0, "W")
    assert "nvml_energy" not in {m["name"] for m in t4_result(ok_row("x", 1.0, None))["measurements"]}


def test_a_row_written_before_energy_existed_still_reads() -> None:
    old = {"name": "v", "family": "matmul", "params": {}, "status": "ok", "error": 0.0, "median_ms": 1.0}
    row = row_from_json(json.dumps(old))
    assert row.energy_j is None and row.power_w is None
    with pytest.raises(ValueError, match="'energy_j' must be a number, or null"):
        row_from_json(json.dumps({**old, "energy_j": "lots"}))


def test_a_database_without_the_energy_columns_reads_and_a_writer_adds_them(tmp_path: Path, compile_options) -> None:
    path = tmp_path / "t.sqlite"
    result = energy_tune(tmp_path, "time", fakes.EnergyExecutor())
    with sqlite3.connect(path) as connection:  # as tilegen made it before energy
        connection.execute("ALTER TABLE measurements DROP COLUMN energy_j")
        connection.execute("ALTER TABLE measurements DROP COLUMN power_w")
    connection.close()
    assert TuningDB(path, create=False).best(result.problem, "energy").name == ENERGY_BEST
    TuningDB(path).record([ok_row("matmul_f32_t8_p0_guard_both", 2.0, 0.25)], fakes.FAKE_DEVICE.model)
    with sqlite3.connect(path) as connection:
        stored = connection.execute("SELECT energy_j, power_w FROM measurements ORDER BY id DESC LIMIT 1").fetchone()
    connection.close()
    assert stored == (0.25, 125.0)


def test_the_counter_gives_power_from_its_updates_and_power_readings_their_mean() -> None:
    # the first reading is where reading began, mid-interval; then updates at 0.1 s and 0.4 s: 30 J in 0.3 s
    readings = [Reading(0.05, 100.0), Reading(0.1, 105.0), Reading(0.2, 115.0), Reading(0.4, 135.0)]
    assert average_watts(readings, counter=True) == pytest.approx(100.0)
    assert average_watts(readings[:2], counter=True) is None  # a single update: no interval
    assert average_watts([Reading(0.0, 300.0), Reading(0.1, 310.0)], counter=False) == pytest.approx(305.0)


def test_an_update_the_host_saw_late_does_not_move_the_power() -> None:
    # the counter rises 30 J every 0.1 s (300 W); a host busy with other work saw two updates late,
    # the last one 40 ms late: the rise over the host's own times would read 270 W
    seen = [0.02, 0.1, 0.2, 0.33, 0.4, 0.5, 0.64]
    readings = [Reading(seconds, 1000.0 + 300.0 * round(seconds, 1)) for seconds in seen]
    assert (readings[-1].value - readings[1].value) / (readings[-1].seconds - readings[1].seconds) < 280
    assert average_watts(readings, counter=True) == pytest.approx(300.0)


class FakeNvml(types.ModuleType):
    """pynvml with a GPU that has no energy counter but reports its power, or neither."""

    class NVMLError(Exception):
        pass

    def __init__(self, power: bool):
        super().__init__("pynvml")
        self.power = power

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: bytes) -> bytes:
        return bus_id

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: bytes) -> int:
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetPowerUsage(self, handle: bytes) -> int:
        if not self.power:
            raise self.NVMLError("Not Supported")
        return 250_000  # milliwatts


def test_a_meter_falls_back_to_power_readings_and_says_why_it_has_neither(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert open_meter("0000:19:00.0") == (None, NO_NVML)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(power=True))
    meter, reason = open_meter("0000:19:00.0")
    assert reason == "" and not meter.counter and meter.read() == 250.0
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(power=False))
    meter, reason = open_meter("0000:19:00.0")
    assert meter.counter is None and not meter.clocks  # this fake reads no clock either
    assert reason == "the GPU at 0000:19:00.0 reports neither an energy counter nor its power to NVML"


@pytest.mark.parametrize("missing", [None, NO_NVML])
def test_a_sweep_asked_for_energy_shows_it_or_says_once_why_not(tmp_path: Path, compile_options, missing) -> None:
    options = SweepOptions("matmul", tmp_path, params=MATMUL, sizes=["64x64x64"], progress=False,
                           run=RunOptions(timing=TimingOptions(budget_s=0.1, energy=True)))
    report = sweep(options, executor=fakes.EnergyExecutor(missing))
    shown = summary(report)
    assert all((row.energy_j is None) == bool(missing) for row in report.rows)
    assert ("mJ per launch" in shown) == (not missing)
    assert shown.count(NO_NVML) == (1 if missing else 0)


def test_a_sweep_measured_with_energy_resumes_only_with_it(tmp_path: Path, compile_options) -> None:
    options = SweepOptions("matmul", tmp_path, params=MATMUL, sizes=["64x64x64"], progress=False,
                           run=RunOptions(timing=TimingOptions(budget_s=0.1, energy=True)))
    sweep(options, executor=fakes.EnergyExecutor())
    without = SweepOptions("matmul", tmp_path, params=MATMUL, sizes=["64x64x64"], progress=False, resume=True,
                           run=RunOptions(timing=TimingOptions(budget_s=0.1)))
    with pytest.raises(UsageError, match=r"--energy \(none\) \(the run has True\)"):
        sweep(without, executor=fakes.EnergyExecutor())


class FakeDriver(types.ModuleType):
    """pycuda.driver for the energy loop: an event records how many launches were queued before it,
    and 1 ms passes per launch; each event is busy when first asked, done when asked again (or done
    at once: a GPU that runs each launch before the host queues the next)."""

    def __init__(self, host_bound: bool = False) -> None:
        super().__init__("pycuda.driver")
        self.launches = 0
        driver = self

        class Event:
            def __init__(self) -> None:
                self.at, self.asked = 0, False

            def record(self) -> None:
                self.at = driver.launches

            def query(self) -> bool:
                done, self.asked = self.asked or host_bound, True
                return done

            def synchronize(self) -> None:
                pass

            def time_since(self, start: "Event") -> float:
                return float(self.at - start.at)

        self.Event = Event
        self.Context = types.SimpleNamespace(synchronize=lambda: None)


class SteadyClock:
    """The host's clock for the energy loop, 0.1 ms on each time it is read, and an energy counter of a
    GPU drawing 300 W, in joules, updated whenever it is read: the loop timestamps a reading right
    after it, so the power it works out must be the counter's (one counter updated every 10 ms and
    read late was off by the lateness), and no load on the machine running the test moves it."""

    counter = True

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 1e-4
        return self.now

    def read(self) -> float:
        return 300.0 * self.now


@pytest.mark.parametrize("host_bound", [False, True], ids=["gpu-bound", "host-bound"])
def test_the_energy_loop_takes_power_from_the_counters_updates_and_time_from_the_events(monkeypatch,
                                                                                         host_bound) -> None:
    # host-bound: the launches never queue up ahead of the GPU (a kernel shorter than its launch), so
    # the counter is read as the batches go, not only while a full queue drains
    driver = FakeDriver(host_bound)
    monkeypatch.setitem(sys.modules, "pycuda.driver", driver)
    monkeypatch.setitem(sys.modules, "pycuda", types.SimpleNamespace(driver=driver))
    clock = SteadyClock()
    monkeypatch.setattr(energy, "time", clock)

    def launch() -> None:
        driver.launches += 1

    measured = energy_per_launch(launch, clock, seconds_per_launch=1e-3, window_s=0.05)
    assert isinstance(measured, tuple), measured
    joules, watts = measured
    assert watts == pytest.approx(300.0, rel=0.05)
    assert joules == pytest.approx(watts * 1e-3)  # 1 ms a launch, by the events


def test_gen_tune_and_gen_tuned_take_the_objective_from_python(tmp_path: Path, compile_options) -> None:
    import gen

    db = tmp_path / "t.sqlite"
    rows = gen.tune("matmul", "64x64x64", params=MATMUL, strategy="brute", db=db, quiet=True,
                    objective="energy", executor=fakes.EnergyExecutor())
    assert rows[0]["winner"] and rows[0]["name"] == ENERGY_BEST and rows[0]["energy_j"] > 0
    assert gen.tuned("matmul", 64, 64, 64, gpu="fake", db=db, objective="energy").name == ENERGY_BEST
    assert gen.tuned("matmul", 64, 64, 64, gpu="fake", db=db).name == TIME_BEST
