"""The measured quantities: what a row says of a variant's run beside its verdict, each declared
once, as output formats are (`EXPORTERS`). Kernel Tuner's observers are the anchor: a column's
`observer` is the name Kernel Tuner's observer gives the same measurement, which a T4 file uses.

A quantity's columns are fields of `Row` and `Measurement` (gen/core/results.py). From this
table, and nowhere else, a measurement's optional columns go into its row, a row's into the
tuning database's measurements table (gen/store/tuning_schema.py) and into a T4 file's
measurements (gen/store/export.py). How one is measured is the GPU worker's (gen/gpu/process/).
Adding one: its row here, its fields in results.py, its measurer in the worker.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One figure of a quantity: the Row and Measurement field, its unit, Kernel Tuner's name."""

    field: str
    unit: str
    observer: str


@dataclass(frozen=True)
class Quantity:
    """A measured quantity: its name, what it is, its columns; `optional`: measured only when asked
    (a column added to the tuning database after its first tables), not in every timed row."""

    name: str
    what: str
    columns: tuple[Column, ...]
    optional: bool = True


QUANTITIES = (
    Quantity("time", "milliseconds per launch: the median of CUDA-event samples (gen/gpu/process/timing.py)",
             (Column("median_ms", "ms", "time"),), optional=False),
    Quantity("energy", "joules per launch and the GPU's average power while it ran the variant, from NVML "
                       "(gen/gpu/process/energy.py): with --energy, and a tune's finalists",
             (Column("energy_j", "J", "nvml_energy"), Column("power_w", "W", "nvml_power"))),
)
OPTIONAL_COLUMNS = tuple(column for quantity in QUANTITIES if quantity.optional for column in quantity.columns)
TIME = QUANTITIES[0].columns[0]
