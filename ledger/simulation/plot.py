"""The trade-off picture of a policy simulation: steps saved against good runs stopped.

Needs matplotlib, the optional extra ``plot`` (from a clone of the repository:
``pip install '.[plot]'``). The picture is drawn on its own ``Figure`` with its own
canvas: neither pyplot nor the caller's plotting backend is touched (docs/simulate.md).
An SVG is byte-reproducible: fixed element ids and no date.
"""

from __future__ import annotations

import importlib
import io
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..ground import errors as E
from ..ground.arguments import check_instance, check_iterable
from ..ground.canonical import check_int
from ..ground.errors import LedgerError, refuses_unfit_calls, repr_shown
from ..ground.paths import fs_path
from .output_files import check_output_file, write_output_file

PLOT_SUFFIXES = (".svg", ".png")
#: What to run for the ``plot`` extra until the package is on the package index.
INSTALL_HINT = "pip install '.[plot]' (in a clone of the repository)"
#: The salt of the SVG's element ids (matplotlib draws random ones without it).
SVG_HASH_SALT = "case-ledger"


@refuses_unfit_calls
def tradeoff_points(policies: Sequence[Mapping[str, Any]], good: str = "resolved") -> list[tuple[str, float, float]]:
    """``(name, steps saved %, good runs stopped %)`` per policy row of a simulation report.

    Steps saved = ``steps_refused / steps``; runs stopped = runs that ended abandoned
    or exhausted, among the runs whose outcome is ``good`` (all runs when the report
    has no such outcome). A policy without steps or runs scores 0. ``INVALID_ARGUMENT`` for a row
    that is no dict with a text ``name`` and integer counts (docs/simulate.md).
    """
    check_iterable(policies, "policies", "the policies of a simulation report (a list of dicts)")
    check_instance(good, str, "good", "an outcome name (str)")
    points = []
    for row in policies:
        name, steps, refused = report_row(row, ("steps", "steps_refused"), "a simulation report")
        group = outcome_group(row, good, "a simulation report")
        group = row if group is None else group
        _, runs, abandoned, exhausted = report_row(group, ("runs", "runs_abandoned", "runs_exhausted"),
                                                   "a simulation report", name)
        check_part(name, ("steps_refused", refused), ("steps", steps))
        check_part(name, ("runs_abandoned + runs_exhausted", abandoned + exhausted), ("runs", runs))
        points.append((name, 100 * refused / steps if steps else 0.0,
                       100 * (abandoned + exhausted) / runs if runs else 0.0))
    return points


def report_row(row: Any, counts: Sequence[str], report: str, name: str | None = None) -> tuple[Any, ...]:
    """``(name, *counts)`` of a policy row of ``report`` (its ``by_outcome`` group when ``name`` is
    given): ``INVALID_ARGUMENT`` unless it is a dict with a text ``name`` and each count an integer."""
    what = f"the by_outcome group of policy {repr_shown(name, 60)}" if name is not None else "each policy"
    check_instance(row, Mapping, what, f"a dict of {report}")
    if name is None:
        name = check_instance(row.get("name"), str, "the name of each policy", f"text (a row of {report})")
    values = [row.get(key) for key in counts]
    for key, value in zip(counts, values):
        check_int(value, f"{key} of policy {repr_shown(name, 60)} (a count of {report})", minimum=0)
    return (name, *values)


def check_part(name: str, part: tuple[str, int], whole: tuple[str, int]) -> None:
    """``INVALID_ARGUMENT`` unless the count ``part`` is at most ``whole`` (each ``(label, count)``):
    a share of more than all of a policy's steps or runs is no report's."""
    if part[1] > whole[1]:
        raise LedgerError(E.INVALID_ARGUMENT, f"the counts of policy {repr_shown(name, 60)} do not add up: {part[0]} "
                          f"({part[1]}) is more than {whole[0]} ({whole[1]})")


def outcome_group(row: Mapping[str, Any], good: str, report: str) -> Any:
    """The ``by_outcome`` group of the ``good`` runs of a policy row, None when there is none."""
    groups = row.get("by_outcome", {})
    check_instance(groups, Mapping, f"by_outcome of policy {repr_shown(row.get('name'), 60)}", f"a dict (as in {report})")
    return groups.get(good)


def load_matplotlib() -> tuple[Any, Any, Any]:
    """``(matplotlib, Figure, FigureCanvasAgg)``, imported without choosing a backend (pyplot
    is not imported, so a caller's backend and figures stay as they were)."""
    try:
        matplotlib = importlib.import_module("matplotlib")
        figure = importlib.import_module("matplotlib.figure")
        agg = importlib.import_module("matplotlib.backends.backend_agg")
    except ImportError:
        raise LedgerError(E.INVALID_ARGUMENT, f"--plot needs matplotlib: {INSTALL_HINT}") from None
    return matplotlib, figure.Figure, agg.FigureCanvasAgg


def literal(text: str) -> str:
    """``text`` (a policy name, an outcome label) drawn as it is: matplotlib reads text between two
    ``$`` as math (``$\\undefined$`` fails the whole picture), so each ``$`` is escaped."""
    return text.replace("$", "\\$")


def check_plot(path: str | os.PathLike[str]) -> Path:
    """What :func:`plot_tradeoff` would refuse, checked before a simulation runs: the suffix
    (``.svg``/``.png``), matplotlib being installed, and a writable target (``INVALID_ARGUMENT``)."""
    target = check_output_file(path, "--plot")
    if target.suffix.lower() not in PLOT_SUFFIXES:
        raise LedgerError(E.INVALID_ARGUMENT, f"--plot {target}: the file must end in .svg or .png")
    load_matplotlib()
    return target


@refuses_unfit_calls
def plot_tradeoff(policies: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], *, base: str | None = None,
                  good: str = "resolved") -> Path:
    """Draw :func:`tradeoff_points` of ``policies`` to ``path`` (``.svg`` or ``.png``), each point
    labelled by policy name, ``base`` (default: the first policy) marked. Returns the path.

    ``INVALID_ARGUMENT`` for another suffix or when matplotlib is missing; ``STORAGE_ERROR``
    when the file cannot be written.
    """
    policies = list(check_iterable(policies, "policies", "the policies of a simulation report (a list of dicts)"))
    check_instance(base, (str, type(None)), "base", "a policy's name (str) or None")
    target = fs_path(path, "path")
    if target.suffix.lower() not in PLOT_SUFFIXES:
        raise LedgerError(E.INVALID_ARGUMENT, f"--plot {target}: the file must end in .svg or .png")
    matplotlib, figure_class, canvas_class = load_matplotlib()
    points = tradeoff_points(policies, good)
    base = base if base is not None else (points[0][0] if points else None)
    has_good = any(good in row.get("by_outcome", {}) for row in policies)
    figure = figure_class(figsize=(7, 4.5))
    canvas_class(figure)  # the figure's own canvas: no pyplot, no global backend
    _draw(figure.subplots(), points, base, literal(f"{good} runs stopped (%)") if has_good else "runs stopped (%)")
    figure.tight_layout()
    svg = target.suffix.lower() == ".svg"
    return write_output_file(target, figure_bytes(matplotlib, figure, svg), "--plot")


def figure_bytes(matplotlib: Any, figure: Any, svg: bool) -> bytes:
    """The drawn ``figure`` as SVG (byte-reproducible: fixed element ids, no date) or PNG bytes."""
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": SVG_HASH_SALT} if svg else {}):  # restores the caller's settings
        figure.savefig(buffer, format="svg" if svg else "png", metadata={"Date": None} if svg else {})
    return buffer.getvalue()


def _draw(axes: Any, points: Sequence[tuple[str, float, float]], base: str | None, xlabel: str) -> None:
    """One marker per point; policies with the same figures share it, their names one per line
    (printed over each other, they could not be read)."""
    right = max((stopped for _, _, stopped in points), default=0.0) / 2
    names: dict[tuple[float, float], list[str]] = {}
    for name, saved, stopped in points:
        names.setdefault((stopped, saved), []).append(f"{name} (base)" if name == base else name)
    for (stopped, saved), labels in names.items():
        marked = base is not None and f"{base} (base)" in labels
        axes.scatter([stopped], [saved], s=80 if marked else 36, marker="*" if marked else "o",
                     color="tab:red" if marked else "tab:blue", zorder=3)
        axes.annotate(literal("\n".join(labels)), (stopped, saved), textcoords="offset points",
                      xytext=(-6, 4) if stopped > right else (6, 4), ha="right" if stopped > right else "left",
                      fontsize=8)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("steps saved (%)")
    axes.set_title("Policy trade-off: steps saved against good runs stopped")
    axes.grid(True, alpha=0.3)
    axes.margins(0.15)
