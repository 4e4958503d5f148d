"""The measured quantities, each declared once, as output formats are. Kernel Tuner's observers are
the anchor: a column's `observer` is the name Kernel Tuner gives the same measurement (a T4 file's).

A column is a field of `Row` and `Measurement` (gen/core/results.py). From this table alone, a
measurement's optional columns go into its row, a row's into the tuning database's columns
(gen/store/tuning_schema.py) and into a T4 file (gen/store/export.py). The GPU worker measures
them (gen/gpu/process/). Adding one: its row here, its fields in results.py, its measurer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    field: str  # of Row and Measurement
    unit: str
    observer: str  # Kernel Tuner's name for it; '': Kernel Tuner has none (a T4 file leaves it out)
    sql: str = "REAL"  # its type in the tuning database


@dataclass(frozen=True)
class Quantity:
    name: str
    what: str
    columns: tuple[Column, ...]
    optional: bool = True  # measured only when asked: a column the tuning database added after its first tables


QUANTITIES = (
    Quantity("time", "milliseconds per launch: the median of CUDA-event samples (gen/gpu/process/timing.py)",
             (Column("median_ms", "ms", "time"),), optional=False),
    Quantity("energy", "joules per launch and the GPU's average power, from NVML (gen/gpu/process/energy.py): "
                       "with --energy, and a tune's finalists",
             (Column("energy_j", "J", "nvml_energy"), Column("power_w", "W", "nvml_power"))),
    Quantity("clock", "the SM clock (the median of NVML's readings over the timed rounds, after the clock "
                      "stopped rising) and the reasons NVML saw it slowed ('' when none: power cap, thermal or "
                      "hardware slowdown; gen/gpu/process/energy.py): where energy is measured",
             (Column("sm_clock_mhz", "MHz", "core_freq"), Column("throttle", "", "", sql="TEXT"))),
)
OPTIONAL_COLUMNS = tuple(column for quantity in QUANTITIES if quantity.optional for column in quantity.columns)
TIME = QUANTITIES[0].columns[0]
