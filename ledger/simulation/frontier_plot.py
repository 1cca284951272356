"""The frontier picture: units saved against good runs stopped, bad runs stopped as a colour scale.

Drawn like :mod:`ledger.simulation.plot`'s picture, on an explicit ``Figure`` with its own
canvas (no pyplot, no backend chosen), an SVG byte-reproducible (docs/simulate.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..ground import errors as E
from ..ground.arguments import check_instance, check_iterable
from ..ground.canonical import check_int
from ..ground.errors import LedgerError, refuses_unfit_calls, repr_shown
from ..ground.paths import fs_path
from .frontier import BASELINES, FrontierReport
from .output_files import write_output_file
from .plot import PLOT_SUFFIXES, check_part, figure_bytes, literal, load_matplotlib, outcome_group, report_row


def frontier_points(policies: Sequence[Mapping[str, Any]], good: str = "resolved") -> list[tuple[str, float, float, float]]:
    """``(name, units saved %, good runs stopped %, other runs stopped %)`` per policy row of a
    frontier report (``units_saved`` against ``no-stop``; shares of the runs of each group)."""
    check_iterable(policies, "policies", "the policies of a frontier report (a list of dicts)")
    check_instance(good, str, "good", "an outcome name (str)")
    points = []
    for row in policies:
        name, spent, runs, stopped = report_row(row, ("units_spent", "runs", "runs_stopped"), "a frontier report")
        # saved against no-stop: less than nothing when a policy spends more than no-stop would
        saved = check_int(row.get("units_saved"), f"units_saved of policy {repr_shown(name, 60)} (a frontier report's)")
        if spent + saved < 0:
            raise LedgerError(E.INVALID_ARGUMENT, f"the counts of policy {repr_shown(name, 60)} do not add up: units_saved "
                              f"({saved}) takes more than its units_spent ({spent}) away from what no-stop spent")
        group = outcome_group(row, good, "a frontier report")
        _, my_runs, my_stopped = report_row(group, ("runs", "runs_stopped"), "a frontier report",
                                            name) if group is not None else (name, 0, 0)
        check_part(name, ("runs_stopped", stopped), ("runs", runs))
        check_part(name, (f"the {good} group's runs", my_runs), ("runs", runs))
        check_part(name, (f"the {good} group's runs_stopped", my_stopped), ("its runs", my_runs))
        check_part(name, (f"the {good} group's runs_stopped", my_stopped), ("runs_stopped", stopped))
        check_part(name, ("runs_stopped outside it", stopped - my_stopped), ("runs outside it", runs - my_runs))
        spent += saved
        others_runs, others_stopped = runs - my_runs, stopped - my_stopped
        points.append((name, 100 * saved / spent if spent else 0.0,
                       100 * my_stopped / my_runs if my_runs else 0.0,
                       100 * others_stopped / others_runs if others_runs else 0.0))
    return points


@refuses_unfit_calls
def plot_frontier(report: Any, path: str | os.PathLike[str], *, good: str = "resolved") -> Path:
    """Draw a :class:`~ledger.simulation.frontier.FrontierReport` to ``path`` (``.svg``/``.png``):
    every policy a point (units saved % against ``good`` runs stopped %, coloured by the other runs
    stopped %), the frontier as a line, the baselines and the choice marked. ``INVALID_ARGUMENT``
    for another suffix or without matplotlib; ``STORAGE_ERROR`` when the file cannot be written."""
    check_instance(report, FrontierReport, "report", "a FrontierReport (what frontier() returns)")
    target = fs_path(path, "path")
    if target.suffix.lower() not in PLOT_SUFFIXES:
        raise LedgerError(E.INVALID_ARGUMENT, f"--plot {target}: the file must end in .svg or .png")
    matplotlib, figure_class, canvas_class = load_matplotlib()
    points = frontier_points(report.policies, good)
    figure = figure_class(figsize=(7.5, 4.8))
    canvas_class(figure)
    axes = figure.subplots()
    _draw(figure, axes, points, report.frontier, report.choice.get("policy"), good)
    figure.tight_layout()
    svg = target.suffix.lower() == ".svg"
    return write_output_file(target, figure_bytes(matplotlib, figure, svg), "--plot")


def _draw(figure: Any, axes: Any, points: Sequence[tuple[str, float, float, float]], front: Sequence[str],
          choice: str | None, good: str) -> None:
    by_name = {name: (stopped, saved) for name, saved, stopped, _ in points}
    line = [by_name[name] for name in reversed(front)]
    axes.plot([x for x, _ in line], [y for _, y in line], color="0.4", linewidth=1, zorder=2, label="frontier")
    top = max((bad for *_, bad in points), default=0.0) or 1.0
    dots = axes.scatter([p[2] for p in points], [p[1] for p in points], c=[p[3] for p in points], cmap="viridis",
                        vmin=0.0, vmax=top, s=30, zorder=3, edgecolors="0.2", linewidths=0.4)
    figure.colorbar(dots, ax=axes, label=literal(f"other (not {good}) runs stopped (%)"))
    lowest, highest = min((p[2] for p in points), default=0.0), max((p[2] for p in points), default=0.0)
    for name, saved, stopped, _ in points:
        if name in BASELINES or name == choice:
            chosen = name == choice
            axes.scatter([stopped], [saved], s=160 if chosen else 70, marker="*" if chosen else "s",
                         facecolors="none", edgecolors="tab:red" if chosen else "black", linewidths=1.2, zorder=4)
            # one setting per line, written away from the nearer side, so no label runs off the axes
            left = highest > lowest and stopped > (lowest + highest) / 2
            text = "\n".join(name.split(" ")) + ("\n(choice)" if chosen else "")
            axes.annotate(literal(text), (stopped, saved), textcoords="offset points", ha="right" if left else "left",
                          va="top" if chosen else "bottom", xytext=(-6 if left else 6, -8 if chosen else 4), fontsize=8)
    axes.set_xlabel(literal(f"{good} runs stopped (%)"))
    axes.set_ylabel("units saved against no-stop (%)")
    axes.set_title(literal(f"Policy frontier: units saved against {good} runs stopped"))
    axes.grid(True, alpha=0.3)
    axes.margins(0.08)
    axes.legend(loc="lower right", fontsize=8)
