"""tilegen's version: in every result row's provenance, the emitted files' banners and the wheel."""

__version__ = "0.3.0"
