"""``ledger simulate --frontier``: rendering of the frontier, the choice and its validation."""

from __future__ import annotations

from typing import Any

from ledger import FrontierReport
from ledger.simulation.frontier import name_order, stopped_pct_shown

from ._output import dumps, echo, emit_rows, one_line

FRONTIER_COLUMNS = ("runs", "steps", "steps_taken", "steps_refused", "units_spent", "units_rewarded",
                    "runs_abandoned", "runs_exhausted", "units_per_run", "runs_stopped", "units_saved")


def _rows(report: FrontierReport) -> list[dict[str, Any]]:
    front = set(report.frontier)
    rows = []
    for policy in report.policies:
        mark = "yes" if policy["name"] in front else "no"
        rows.append({"policy": policy["name"], "frontier": mark, "outcome": "(all)",
                     **{k: policy[k] for k in FRONTIER_COLUMNS}})
        for outcome, figures in policy["by_outcome"].items():
            rows.append({"policy": policy["name"], "frontier": mark, "outcome": outcome,
                         **{k: figures[k] for k in FRONTIER_COLUMNS}})
    return rows


def _summary_rows(report: FrontierReport) -> list[dict[str, Any]]:
    front = set(report.frontier)
    outcomes = sorted({o for p in report.policies for o in p["by_outcome"]})
    rows = []
    # ties as on the frontier line: numbers in names compared as numbers (=9 before =10)
    for policy in sorted(report.policies, key=lambda p: (p["units_spent"], name_order(p["name"]))):
        row = {"policy": policy["name"], "frontier": "yes" if policy["name"] in front else "no",
               **{k: policy[k] for k in ("units_spent", "units_saved", "units_per_run", "runs_stopped")}}
        for outcome in outcomes:
            group = policy["by_outcome"][outcome]
            stopped, runs = group["runs_stopped"], group["runs"]
            row[f"{outcome} stopped"] = f"{stopped}/{runs} ({stopped_pct_shown(stopped, runs):g} %)"
        rows.append(row)
    return rows


def choice_lines(choice: dict[str, Any], good: str) -> list[str]:
    """The choice, its held-out and bootstrap figures, as lines of text."""
    constraint = choice["constraint"]
    if constraint is None:
        return ["choice: none (give --max-stopped LABEL=PCT to choose)"]
    limit = f"at most {constraint['max_stopped_pct']:g} % of {constraint['label']} runs stopped"
    if choice["policy"] is None:
        return [f"choice ({limit}): none: {choice['reason']}"]
    ins, label = choice["in_sample"], constraint["label"]
    other = label != good  # the constraint's own share too, when it is on another label than --good
    lines = [f"choice ({limit}): {choice['policy']}",
             f"  in sample: units saved {ins['units_saved_pct']:g} %, {good} runs stopped {ins['good_stopped_pct']:g} %"
             + (f", {label} runs stopped {ins['constraint_stopped_pct']:g} %" if other else "")]
    held, runs = choice.get("held_out"), choice.get("figures", {}).get("runs")
    if held:
        saved, spent_none = held["units_saved_pct"], held.get("folds_without_units_spent", 0)
        lines.append(f"  held out ({held['folds']} folds{_tasks_text(held, runs)}, seed {held['seed']}): "
                     + (f"units saved {saved['mean']:g} % (min {saved['min']:g}, max {saved['max']:g}"
                        + (f"; {spent_none} fold(s) that spent nothing under no-stop left out" if spent_none else "")
                        + "), " if saved["mean"] is not None else "no fold spent units under no-stop, ")
                     + _spread_text(good, held["good_stopped_pct"], held["folds_without_good_runs"])
                     + (", " + _spread_text(label, held["constraint_stopped_pct"],
                                            held.get("folds_without_constraint_runs")) if other else "")
                     + _no_choice_text(held["chosen"]))
    boot = choice.get("bootstrap")
    if boot:
        saved, stopped = boot["units_saved_pct"], boot["good_stopped_pct"]
        without = boot["samples_without_good_runs"]
        lines.append(f"  bootstrap 95 % ({boot['samples']} samples{_tasks_text(boot, runs)}): "
                     + (f"units saved {saved[0]:g} to {saved[1]:g} %, " if saved else "no sample spent units, ")
                     + (f"{good} runs stopped {stopped[0]:g} to {stopped[1]:g} %" if stopped else f"no {good} run")
                     + (f" ({without} samples without a {good} run left out)" if without and stopped else ""))
    return lines


def _tasks_text(figures: dict[str, Any], runs: int | None) -> str:
    """`` of 40 tasks' 80 runs`` when the folds or resamples were dealt by task (--task-prefix)."""
    tasks = figures.get("tasks", runs)
    if runs is None or tasks == runs:
        return ""
    whose = "task's" if tasks == 1 else "tasks'"
    return f" of {tasks} {whose} {runs} runs"


def _no_choice_text(chosen: list[str | None]) -> str:
    """``; 1 fold(s) chose nothing (scored as no-stop)`` when a fold's other runs allowed no choice."""
    none = chosen.count(None)
    return f"; {none} fold(s) chose nothing (scored as no-stop)" if none else ""


def _spread_text(label: str, spread: dict[str, Any], folds_without: int | None) -> str:
    """``resolved runs stopped 5 % (min 0, max 10)``, saying how many folds had no such run."""
    if spread["mean"] is None:
        return f"no fold held a {label} run"
    left_out = f"; {folds_without} fold(s) without a {label} run left out" if folds_without else ""
    return f"{label} runs stopped {spread['mean']:g} % (min {spread['min']:g}, max {spread['max']:g}{left_out})"


def emit_frontier(report: FrontierReport, fmt: str, good: str) -> None:
    """Print the report: ``--json`` its dict, ``--csv``/``--tsv``/``--nl`` a row per policy and
    outcome, else a table of every policy (fewest units first), the frontier and the choice."""
    if fmt == "json":
        echo(dumps(report.to_dict()))
        return
    if fmt in ("csv", "tsv", "nl"):
        emit_rows(_rows(report), ("policy", "frontier", "outcome", *FRONTIER_COLUMNS), fmt)
        return
    emit_rows(_summary_rows(report), None, "table")
    echo(one_line(f"frontier (fewest units first): {', '.join(report.frontier)}"))
    cap = next((row.get("units_per_hypothesis") for row in report.policies if row["name"] == "cap-p75"), None)
    if cap is not None:
        echo(f"cap-p75: units_per_hypothesis = {cap} (the 75th percentile of the units each run spent under no-stop)")
    for line in choice_lines(report.choice, good):
        echo(one_line(line))
