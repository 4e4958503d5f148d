"""tilegen: Jinja templates -> CUDA C kernel variants, compiled, checked, timed and tuned."""

__version__ = "0.1.0"
