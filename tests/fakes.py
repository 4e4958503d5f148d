"""Stand-ins for the GPU: worker processes that hang or crash, and an in-process executor; for
nvcc: a script put first on PATH that can announce it started, hang, fail or call the real one; and
for a compiler passed in (CompileOptions.compiler): nvcc under another name or version.

Worker targets live at module level so that spawned processes can import them.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import sys
import time
import zlib
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Callable, Iterable, Iterator

from gen.compiling.nvcc import Nvcc
from gen.gpu.process.jobs import Job
from gen.gpu.sanitize import TOOLS
from gen.gpu.process.worker import HeldPhases
from gen.core.objectives import NO_ENERGY
from gen.core.results import DeviceInfo, Measurement, Status
from gen.core.timing import Timing
from .waits import patient

FAKE_DEVICE = DeviceInfo(name="Fake GPU", cc="9.0", sm_count=132, memory_bytes=80 * 2**30, l2_bytes=50 * 2**20,
                         driver="13.0", index=0)


def fake_measurement(job: Job) -> Measurement:
    """Larger tiles are faster (matmul, transpose); other families get a stable pseudo-random speed.
    compute-sanitizer's tools find nothing."""
    if job.sanitizer:
        return Measurement(Status.OK, hazards={tool: 0 for tool in TOOLS}, device=FAKE_DEVICE)
    found = re.search(r"_t(\d+)_", job.name)
    tile = int(found.group(1)) if found else 1 + zlib.crc32(job.name.encode()) % 64
    median = (1.0 + zlib.crc32(job.name.encode()) % 100 / 1000) / tile  # distinct: no ties between variants
    timing = Timing(median_ms=median, min_ms=0.9 * median, max_ms=1.1 * median, stdev_ms=0.01 * median, samples=20)
    return Measurement(Status.OK, error=1e-7, tolerance=1e-5, checks=len(job.seeds), timing=timing,
                       l2_flushed=True, throughput=float(tile), unit="TFLOP/s", ceiling=50.0, device=FAKE_DEVICE)


def _serve(connection: Connection, on_t8) -> None:
    connection.send(("ready", FAKE_DEVICE))
    while (job := connection.recv()) is not None:
        if "_t8_" in job.name:
            on_t8()
        connection.send(("done", fake_measurement(job)))


def hanging_worker(connection: Connection, index: int) -> None:
    _serve(connection, lambda: time.sleep(3600))


def crashing_worker(connection: Connection, index: int) -> None:
    _serve(connection, lambda: os._exit(3))


def context_losing_worker(connection: Connection, index: int) -> None:
    """As the real worker after a launch that loses its CUDA context: a t8 variant's row says so,
    then the process ends, with whatever job was queued behind it unread."""
    connection.send(("ready", FAKE_DEVICE))
    while (job := connection.recv()) is not None:
        lost = "_t8_" in job.name
        connection.send(("done", replace(fake_measurement(job), status=Status.LAUNCH_ERROR, context_lost=True)
                         if lost else fake_measurement(job)))
        if lost:
            return


def exiting_worker(connection: Connection, index: int) -> None:
    """Its process ends right after a t8 variant's row, between jobs, with the next one unread (as an
    out-of-memory kill might end it)."""
    connection.send(("ready", FAKE_DEVICE))
    while (job := connection.recv()) is not None:
        connection.send(("done", fake_measurement(job)))
        if "_t8_" in job.name:
            os._exit(0)


def busy_phases_worker(connection: Connection, index: int) -> None:
    """A t8 variant goes through a new phase every 20 ms for 1.5 s: each too short to be told on its
    own (gen.gpu.process.worker.HeldPhases), and never silent."""
    connection.send(("ready", FAKE_DEVICE))
    phases = HeldPhases(connection)
    while (job := connection.recv()) is not None:
        if "_t8_" in job.name:
            for step in range(75):
                phases(f"step {step}")
                time.sleep(0.02)
        phases.send(("done", fake_measurement(job)))


LAST_SHAPE = "1x1x1"  # lookahead_worker waits for no job after one of this shape


def lookahead_worker(connection: Connection, index: int) -> None:
    """Before answering a job, waits (up to a minute) for the next one to reach its socket, unless
    the job's shape is LAST_SHAPE; each row's message says whether the next job was there."""
    connection.send(("ready", FAKE_DEVICE))
    while (job := connection.recv()) is not None:
        there = job.shape != LAST_SHAPE and connection.poll(60)
        connection.send(("done", replace(fake_measurement(job), message="next waiting" if there else "none")))


def cubin_reading_worker(connection: Connection, index: int) -> None:
    """Each row's message is the job's cubin file: its bytes (as text) and its folder's mode."""
    connection.send(("ready", FAKE_DEVICE))
    while (job := connection.recv()) is not None:
        path = Path(job.cubin)
        said = f"{path.read_bytes().decode()} {oct(path.parent.stat().st_mode & 0o777)}"
        connection.send(("done", replace(fake_measurement(job), message=said)))


def chatty_slow_worker(connection: Connection, index: int) -> None:
    """Slow, but reports progress: must not be mistaken for a hang."""
    def slow() -> None:
        for _ in range(4):
            time.sleep(0.4)
            connection.send(("phase", "still checking"))
    _serve(connection, slow)


def steady_worker(connection: Connection, index: int, seconds_per_job: float = 0.1,
                  before_job: Callable[[int], None] = lambda done: None) -> None:
    """Every job ok after 0.1 s, on a device that names its GPU index: GPUs 0 and 1 are one model,
    any other index another, but GPU 3 is not usable (a stand-in for the Dask cluster tests).
    `before_job(jobs done so far)` runs before each job."""
    if index == 3:
        connection.send(("unavailable", "no usable CUDA GPU 3: fake"))
        return
    device = replace(FAKE_DEVICE, index=index, name="Fake GPU" if index < 2 else "Fake GPU B")
    connection.send(("ready", device))
    done = 0
    while (job := connection.recv()) is not None:
        before_job(done)
        time.sleep(seconds_per_job)
        connection.send(("done", replace(fake_measurement(job), device=device)))
        done += 1
        announce(f"done {index} {job.name}")


# A test that holds a sweep in its middle (tests.fakes:held_worker) names two FIFOs in the environment,
# which the Dask workers and their GPU processes inherit: one the fake GPUs announce on, one they wait on.
ANNOUNCE_ENV, GATE_ENV = "TILEGEN_TEST_ANNOUNCE", "TILEGEN_TEST_GATE"
HELD_AFTER = 3  # jobs GPU 0 measures before it waits


def held_worker(connection: Connection, index: int) -> None:
    """steady_worker at no delay; GPU 0, once it has measured HELD_AFTER jobs, announces "waiting"
    and holds its next one until the test opens the gate ($TILEGEN_TEST_GATE): a sweep the test
    keeps in its middle while workers join."""
    def hold(done: int) -> None:
        if index == 0 and done == HELD_AFTER:
            announce("waiting")
            wait_for_gate(connection)

    steady_worker(connection, index, seconds_per_job=0.0, before_job=hold)


def gated_start_worker(connection: Connection, index: int) -> None:
    """steady_worker at no delay, which first announces "starting INDEX" and waits at the gate
    ($TILEGEN_TEST_GATE: one "go" each) before it says it is ready: a test hears every GPU start
    before any is ready only if the workers start together."""
    announce(f"starting {index}")
    pass_gate()
    steady_worker(connection, index, seconds_per_job=0.0)


def gated_stop_worker(connection: Connection, index: int) -> None:
    """steady_worker at no delay, which, told to stop, announces "stopping INDEX" and waits at the gate
    ($TILEGEN_TEST_GATE: one "go" each), then announces "stopped INDEX" and ends: a test hears every
    GPU stop before it opens the gate only if the workers are told to stop together (one at a time,
    the first is killed at the gate once its grace is over, and never says it stopped)."""
    steady_worker(connection, index, seconds_per_job=0.0)
    announce(f"stopping {index}")
    pass_gate()
    announce(f"stopped {index}")


def pass_gate() -> None:
    """Wait for one opening of the gate ($TILEGEN_TEST_GATE: one "go" each)."""
    gate = os.open(os.environ[GATE_ENV], os.O_RDONLY)
    try:
        os.read(gate, len(b"go\n"))
    finally:
        os.close(gate)


def announce(line: str) -> None:
    """A line on the FIFO $TILEGEN_TEST_ANNOUNCE, if one is named and the test still holds it."""
    if path := os.environ.get(ANNOUNCE_ENV):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # the test that named it is over
            return
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)


def wait_for_gate(connection: Connection) -> None:
    """Wait for a line on the FIFO $TILEGEN_TEST_GATE, saying every second that the job is still
    going (a silent GPU process is taken for a hang)."""
    gate = os.open(os.environ[GATE_ENV], os.O_RDONLY)
    try:
        while not select.select([gate], [], [], 1.0)[0]:
            connection.send(("phase", "held by the test"))
        os.read(gate, 64)
    finally:
        os.close(gate)


SERVICE_S = "TILEGEN_FAKE_SERVICE_S"  # timed_worker's service time per job, in seconds
START_S = "TILEGEN_FAKE_START_S"  # and its start, before it is ready (a real worker's: python, pycuda, a context)
EXIT_S = "TILEGEN_FAKE_EXIT_S"  # and its end, once told to stop (a real worker's: its modules, its context)
ENERGY_S = "TILEGEN_FAKE_ENERGY_S"  # and, on a job that measures energy, the extra time NVML's counter takes


def timed_worker(connection: Connection, index: int) -> None:
    """A simulated GPU of any index (scripts/bench_scale.py): every job ok after $TILEGEN_FAKE_SERVICE_S
    seconds (default 0.01), reporting the phases a real worker reports for a job that is checked and
    timed, as it does (a phase is told only once it lasts: gen.gpu.process.worker.HeldPhases); it is
    ready after $TILEGEN_FAKE_START_S seconds, and ends $TILEGEN_FAKE_EXIT_S seconds after it is told
    to stop; a job that measures energy takes $TILEGEN_FAKE_ENERGY_S seconds more (each 0 by default)."""
    seconds, energy_s = float(os.environ.get(SERVICE_S, "0.01")), float(os.environ.get(ENERGY_S, "0"))
    time.sleep(float(os.environ.get(START_S, "0")))
    device = replace(FAKE_DEVICE, index=index)
    connection.send(("ready", device))
    phases = HeldPhases(connection)
    while (job := connection.recv()) is not None:
        for seed in job.seeds:
            phases(f"check seed {seed}")
        phases("time")
        time.sleep(seconds + (energy_s if job.timing is not None and job.timing.energy else 0.0))
        phases.send(("done", replace(fake_measurement(job), device=device)))
    time.sleep(float(os.environ.get(EXIT_S, "0")))


def phase_hanging_worker(connection: Connection, index: int) -> None:
    """As the real worker reports phases (gen.gpu.process.worker.HeldPhases): a t8 variant hangs
    while measuring a ceiling, after a phase too short to be told."""
    connection.send(("ready", FAKE_DEVICE))
    phases = HeldPhases(connection)
    while (job := connection.recv()) is not None:
        phases("check seed 1")
        if "_t8_" in job.name:
            phases("measuring the ceiling gemm_f32")
            time.sleep(3600)
        phases.send(("done", fake_measurement(job)))


def long_message_worker(connection: Connection, index: int) -> None:
    """Every job ok, its message 300 kB long: more than one read of the socket brings it."""
    _serve_measurements(connection, lambda job: replace(fake_measurement(job), message="x" * 300_000))


def _serve_measurements(connection: Connection, measure) -> None:
    connection.send(("ready", FAKE_DEVICE))
    while (job := connection.recv()) is not None:
        connection.send(("done", measure(job)))



def dask_worker_killing_worker(connection: Connection, index: int) -> None:
    """steady_worker, but a _t8_ variant kills the Dask worker process that started this one."""
    _serve(connection, lambda: os.kill(os.getppid(), signal.SIGKILL))


def visible_devices_worker(connection: Connection, index: int) -> None:
    """A GPU named after the CUDA_VISIBLE_DEVICES its process was started with."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)")
    connection.send(("ready", replace(FAKE_DEVICE, name=visible, index=index)))
    connection.recv()  # None: stop


def ceiling_worker(connection: Connection, index: int) -> None:
    """Fake timings against the ceiling of the job's family, as the ceilings code gives it in a GPU
    worker process: measured once per GPU model (by the family's own `measure`), then kept."""
    from gen.families import get_family
    from gen.gpu.process.ceilings import Ceilings

    ceilings = Ceilings(FAKE_DEVICE.model)
    connection.send(("ready", FAKE_DEVICE))
    while (job := connection.recv()) is not None:
        family = get_family(job.family)
        ceiling = family.problem.ceiling(family.variant_type.from_name(job.name).dtype)
        rate = ceilings.rate(ceiling, lambda phase: connection.send(("phase", phase)))
        connection.send(("done", replace(fake_measurement(job), unit=ceiling.unit, ceiling=rate)))


def unavailable_worker(connection: Connection, index: int) -> None:
    connection.send(("unavailable", "no usable CUDA GPU 0: fake"))


class FakeExecutor:
    """Runs jobs in this process: every variant is ok, faster with larger tiles, and free of hazards."""

    def __init__(self, delay_s: float = 0.0):
        self.delay_s, self.ran, self.killed, self.closed = delay_s, [], False, False

    def start(self) -> None:
        pass

    def devices(self) -> list[DeviceInfo]:
        return [FAKE_DEVICE]

    def capacity(self) -> int:
        return 2  # the job it runs and the next

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        for job in jobs:
            time.sleep(self.delay_s)
            if self.killed:
                return
            self.ran.append(job)
            yield job, fake_measurement(job)

    def close(self) -> None:
        self.closed = True

    def kill(self) -> None:
        self.killed = True

    def by_model(self) -> dict:
        return {device.model: self for device in self.devices()}  # GpuUnavailable without a GPU, as every executor


class EnergyExecutor(FakeExecutor):
    """A fake energy source: jobs that ask for energy get it, the GPU drawing 10 mW x tile^3, so
    that larger tiles are faster but cost more joules per launch and energy x time (tile 32 is
    the time-optimal matmul, tile 8 the energy- and edp-optimal one), and their SM clock, slowed by
    `throttle` ('': not slowed). With `missing`, the worker says why it has none, and reads no clock."""

    CLOCK_MHZ = 1980.0

    def __init__(self, missing: str | None = None, throttle: str = ""):
        super().__init__()
        self.missing, self.throttle = missing, throttle

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        for job, measured in super().run(jobs):
            if job.timing is not None and job.timing.energy:
                if self.missing:
                    measured.message = f"{NO_ENERGY}: {self.missing}"
                else:
                    measured.power_w = 0.01 * measured.throughput ** 3  # the fake's throughput is its tile
                    measured.energy_j = measured.power_w * measured.timing.median_ms / 1e3
                    measured.sm_clock_mhz, measured.throttle = self.CLOCK_MHZ, self.throttle
            yield job, measured


class NoGpuExecutor(FakeExecutor):
    """A machine without a usable GPU: a sweep compiles its points and marks them `compiled`."""

    def devices(self) -> list[DeviceInfo]:
        from gen.gpu.executor import GpuUnavailable

        raise GpuUnavailable("no usable CUDA GPU 0: fake")


def slow_sweep(out: str) -> None:
    """A sweep of 18 variants x 2 sizes at 0.3 s a job, for a test to kill in the middle."""
    from gen.evaluate.options import RunOptions
    from gen.commands.sweep import SweepOptions, sweep

    sweep(SweepOptions("matmul", Path(out), sizes=["64x64x64", "96x96x96"], progress=False, run=RunOptions(seed=1)),
          executor=FakeExecutor(delay_s=0.3))


if __name__ == "__main__":
    slow_sweep(sys.argv[1])


# ---- tools on PATH -----------------------------------------------------------------------------------

REAL_NVCC = shutil.which("nvcc")  # tests that use it ask for the compile_options fixture, which skips without nvcc

# What a fake nvcc does with a compile (shell). $RUN numbers the compiles (1 for the first), $OUT is
# the cubin it should write, $ANNOUNCE the FIFO the test reads, $REAL the real nvcc.
COMPILE = 'exec "$REAL" "$@"'
HANG = "exec sleep 3600"
ANNOUNCE = 'echo "started $RUN $$" > "$ANNOUNCE"'
ANNOUNCE_AND_HANG = f"{ANNOUNCE}; {HANG}"
ANSWER = 'exec "$REAL" "$@"'  # what it does with --version, --list-gpu-code and --list-gpu-arch


class FakeNvcc:
    """A shell script named nvcc in a folder of its own, for a test to put first on PATH (`path`).
    Queries go to the real nvcc unless `answer` says otherwise; each compile claims a run number,
    then does what `compile` says."""

    def __init__(self, folder: Path, compile: str = COMPILE, answer: str = ANSWER):
        self.folder = folder
        (folder / "bin").mkdir(parents=True)
        (folder / "runs").mkdir()
        self.announcements = Announcements(folder / "announce")
        script = folder / "bin" / "nvcc"
        script.write_text(f"""#!/bin/sh
REAL={REAL_NVCC}
ANNOUNCE={folder / "announce"}
case " $* " in *" --version "*|*" --list-gpu-code "*|*" --list-gpu-arch "*) {answer};; esac
RUN=1
while ! mkdir "{folder / "runs"}/$RUN" 2>/dev/null; do RUN=$((RUN + 1)); done
OUT=; previous=
for argument in "$@"; do [ "$previous" = -o ] && OUT=$argument; previous=$argument; done
{compile}
""")
        script.chmod(0o755)

    @property
    def path(self) -> str:
        """$PATH with this nvcc first."""
        return f"{self.folder / 'bin'}{os.pathsep}{os.environ['PATH']}"

    @property
    def compiles(self) -> int:
        """How many compiles it was asked for."""
        return len(list((self.folder / "runs").iterdir()))


class LineReader:
    """Lines from a pipe or FIFO, read as they come: a test blocks on the next one (select, with a
    deadline, stretched by the machine's load, that only turns a hang into a failure)."""

    def __init__(self, fd: int):
        self.fd, self.buffer, self.seen = fd, b"", []
        os.set_blocking(fd, False)

    def next(self, timeout: float = 120.0) -> str:
        """The next whole line; AssertionError when none comes (the writer ended, or the deadline passed)."""
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.fd], [], [], patient(timeout))
            assert ready, f"no line within {patient(timeout):.0f} s; so far: {self.seen}"
            chunk = os.read(self.fd, 65536)
            assert chunk, f"the writer ended; its lines: {self.seen}"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.seen.append(line.decode())
        return self.seen[-1]

    def until(self, wanted: str, timeout: float = 120.0) -> str:
        """The first line holding `wanted`."""
        while wanted not in (line := self.next(timeout)):
            pass
        return line

    def close(self) -> None:
        os.close(self.fd)


def ends_within(pid: int, seconds: float) -> bool:
    """Whether a process (not necessarily a child) has ended or ends within `seconds` (stretched by the
    machine's load: tests.waits.patient): waited for on
    its pidfd, which is readable once it has exited (a killed process closes its files first, and
    only then exits: it may still run for a moment after its pipes are closed)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], patient(seconds))[0])
    finally:
        os.close(fd)


class Announcements(LineReader):
    """A FIFO that fake tools write a line to when they start. The test holds it open for reading
    and writing, so a writer never waits and the test never sees its end."""

    def __init__(self, path: Path):
        os.mkfifo(path)
        super().__init__(os.open(path, os.O_RDWR))


class Gate:
    """A FIFO that fake GPUs wait on (wait_for_gate) until the test opens the gate. The test holds
    it open for reading and writing, so a waiter's open never blocks."""

    def __init__(self, path: Path):
        os.mkfifo(path)
        self.fd = os.open(path, os.O_RDWR)

    def open(self) -> None:
        os.write(self.fd, b"go\n")

    def close(self) -> None:
        os.close(self.fd)


# ---- compilers passed in -------------------------------------------------------------------------------

class OtherCompiler:
    """The real nvcc under another name, version or batching (a gen.compiling.compilers.Compiler that
    tilegen has not met); notes the kernels of each run it is asked for."""

    def __init__(self, name: str = "nvcc", version: str | None = None, batches: bool = True, runs_per_thread: int = 1):
        self.name, self.release, self.batches, self.runs_per_thread = name, version, batches, runs_per_thread
        self.nvcc = Nvcc()
        self.runs: list[list[str]] = []

    def version(self) -> str:
        return self.release or self.nvcc.version()

    def archs(self) -> tuple[str, ...]:
        return self.nvcc.archs()

    def compile(self, sources, arch, flags, deadline_s, children):
        self.runs.append(list(sources))
        return self.nvcc.compile(sources, arch, flags, deadline_s, children)
