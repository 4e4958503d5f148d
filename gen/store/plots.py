"""PNG plots for `tilegen report --plot`, one figure per (family, shape, GPU), named in its title:
throughput heatmaps over the family's two heatmap axes (one per value of its heatmap_panels
parameter, if it names one), and how fast each tuning strategy converged on that problem. Needs
matplotlib (pip install 'tilegen[plot]')."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..core.errors import UsageError
from ..families import get_family
from .report import measured
from ..core.results import Row


def check_plot_path(path: Path) -> None:
    """Refuse a file name whose extension names no format matplotlib writes (it picks the format
    from the extension), before anything is computed."""
    _pyplot()  # matplotlib is there
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = sorted(FigureCanvasAgg.get_supported_filetypes())
    if path.suffix.lower().removeprefix(".") not in formats:
        # without an extension matplotlib would write another file, PATH.png
        problem = f"matplotlib cannot write {path.suffix} files" if path.suffix else "no extension names its format"
        raise UsageError(f"--plot {path}: {problem}; end the name with one of {', '.join('.' + f for f in formats)}, "
                         f"like plot.png")


PlotKey = tuple[str, str, str]  # family, shape, GPU name
Traces = dict[str, list[list[float | None]]]  # strategy -> one median trace per tuning session
TITLED = {".png", ".pdf", ".svg"}  # formats whose files keep the title as metadata too


def plot(rows: Sequence[Row], traces: dict[PlotKey, Traces], path: Path) -> list[Path]:
    """A figure per (family, shape, GPU) with heatmaps or traces: at `path` when there is one, else
    beside it, named PATH-STEM-FAMILY-SHAPE-GPU.EXT. The paths written, in order."""
    check_something_to_plot(rows, traces)
    problems = _heatmaps(rows)
    drawn = sorted(set(problems) | set(traces))
    written = []
    for problem in drawn:
        target = path if len(drawn) == 1 else path.with_name(f"{path.stem}-{_slug(problem)}{path.suffix}")
        _figure(problems.get(problem, []), traces.get(problem, {}), target, plot_title(problem))
        written.append(target)
    return written


def check_something_to_plot(rows: Sequence[Row], traces: dict[PlotKey, Traces]) -> None:
    """UsageError, before anything is printed or written, when there would be no figure."""
    if not _heatmaps(rows) and not traces:
        raise UsageError("nothing to plot: no correct measured rows with heatmap axes and no tuning traces "
                         "(a run without a GPU only compiles); leave out --plot")


def _heatmaps(rows: Sequence[Row]) -> dict[PlotKey, list[tuple]]:
    return {problem: panels for problem in sorted({_problem(r) for r in measured(rows)})
            if (panels := _heatmap_panels(rows, problem))}


def plot_title(problem: PlotKey) -> str:
    family, shape, gpu = problem
    return f"tilegen: {family} {shape} on {gpu or 'a GPU not recorded'}"


def _figure(panels: list[tuple], traces: Traces, path: Path, title: str) -> None:
    """One figure: the heatmaps (see the module doc), then the convergence of every strategy in `traces`."""
    pyplot = _pyplot()
    count = len(panels) + (1 if traces else 0)
    figure, axes = pyplot.subplots(1, count, figsize=(5.2 * count, 4.4), squeeze=False)
    for axis, (label, x_name, y_name, x_values, y_values, grid) in zip(axes[0], panels):
        image = axis.imshow(grid, origin="lower", cmap="viridis", aspect="auto")
        axis.set_xticks(range(len(x_values)), [str(v) for v in x_values])
        axis.set_yticks(range(len(y_values)), [str(v) for v in y_values])
        axis.set_xlabel(x_name)
        axis.set_ylabel(y_name)
        axis.set_title(label, fontsize=9)
        for (row, column), value in _cells(grid):
            axis.text(column, row, f"{value:.3g}", ha="center", va="center", color="white", fontsize=7)
        figure.colorbar(image, ax=axis, shrink=0.8)
    if traces:
        _convergence(axes[0][-1], traces)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110, metadata={"Title": title} if path.suffix.lower() in TITLED else None)
    pyplot.close(figure)


def _problem(row: Row) -> PlotKey:
    return (row.family, row.shape, str(row.provenance.get("gpu", "")))


def _slug(problem: PlotKey) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", "-".join(problem)).strip("-")


def _pyplot() -> Any:
    """matplotlib's pyplot, drawing off-screen; UsageError where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        raise UsageError("plots need matplotlib: pip install 'tilegen[plot]'") from None
    return pyplot


def _heatmap_panels(rows: Sequence[Row], problem: PlotKey) -> list[tuple]:
    """(label, x name, y name, x values, y values, grid) per heatmap of one problem; none for a
    family that names no heatmap axes."""
    family = get_family(problem[0])
    if family.heatmap_axes is None:
        return []
    x_name, y_name = family.heatmap_axes
    split = family.heatmap_panels
    chosen = [r for r in measured(rows) if _problem(r) == problem]
    panels = []
    for value in sorted({r.params.get(split) for r in chosen}) if split else [None]:
        subset = [r for r in chosen if split is None or r.params.get(split) == value]
        x_values = sorted({r.params[x_name] for r in subset})
        y_values = sorted({r.params[y_name] for r in subset})
        if len(x_values) * len(y_values) < 2:
            continue  # a single cell (say, the default variant measured for comparison) says nothing
        grid = [[max((r.throughput for r in subset if r.params[x_name] == x and r.params[y_name] == y),
                     default=float("nan")) for x in x_values] for y in y_values]
        label = (f"{split}={value}: " if split else "") + f"best {chosen[0].unit}\n(over the other parameters)"
        panels.append((label, x_name, y_name, x_values, y_values, grid))
    return panels


def _cells(grid: list[list[float]]):
    for row, values in enumerate(grid):
        for column, value in enumerate(values):
            if value == value:  # not NaN
                yield (row, column), value


def _convergence(axis, traces: dict[str, list[list[float | None]]]) -> None:
    """Best found so far as a fraction of the best any run found: thin lines per run, thick medians."""
    measured = [t for sessions in traces.values() for trace in sessions for t in trace if t is not None]
    if not measured:
        return
    overall = min(measured)
    for colour, (strategy, sessions) in enumerate(sorted(traces.items())):
        curves = [[overall / v if v else 0.0 for v in best_so_far(trace)] for trace in sessions]
        for curve in curves:
            axis.plot(range(1, len(curve) + 1), curve, color=f"C{colour}", linewidth=0.6, alpha=0.25)
        length = min(len(c) for c in curves)
        median = [statistics.median(c[i] for c in curves) for i in range(length)]
        axis.plot(range(1, length + 1), median, color=f"C{colour}", linewidth=2.0,
                  label=f"{strategy} (median of {len(curves)} runs)" if len(curves) > 1 else strategy)
    axis.set_xscale("log")
    axis.set_ylim(0.5, 1.01)
    axis.set_xlabel("evaluations")
    axis.set_ylabel("best found / best of all runs")
    axis.set_title("strategy convergence", fontsize=9)
    axis.legend(fontsize=7, loc="lower right")


def best_so_far(trace: Iterable[float | None]) -> list[float | None]:
    """The best median found after each evaluation of a trace (None before any succeeded)."""
    best: float | None = None
    curve = []
    for median in trace:
        if median is not None and (best is None or median < best):
            best = median
        curve.append(best)
    return curve
