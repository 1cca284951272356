"""``ledger simulate --frontier``: rendering of the frontier, the choice and its validation."""

from __future__ import annotations

from typing import Any

from ledger import FrontierReport

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
    for policy in sorted(report.policies, key=lambda p: (p["units_spent"], p["name"])):
        row = {"policy": policy["name"], "frontier": "yes" if policy["name"] in front else "no",
               **{k: policy[k] for k in ("units_spent", "units_saved", "units_per_run", "runs_stopped")}}
        for outcome in outcomes:
            group = policy["by_outcome"][outcome]
            row[f"{outcome} stopped"] = f"{group['runs_stopped']}/{group['runs']}"
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
    ins = choice["in_sample"]
    lines = [f"choice ({limit}): {choice['policy']}",
             f"  in sample: units saved {ins['units_saved_pct']:g} %, {good} runs stopped {ins['good_stopped_pct']:g} %"]
    held = choice.get("held_out")
    if held:
        saved, stopped = held["units_saved_pct"], held["good_stopped_pct"]
        lines.append(f"  held out ({held['folds']} folds, seed {held['seed']}): units saved {saved['mean']:g} % "
                     f"(min {saved['min']:g}, max {saved['max']:g}), {good} runs stopped {stopped['mean']:g} % "
                     f"(min {stopped['min']:g}, max {stopped['max']:g})")
    boot = choice.get("bootstrap")
    if boot:
        saved, stopped = boot["units_saved_pct"], boot["good_stopped_pct"]
        lines.append(f"  bootstrap 95 % ({boot['samples']} samples): units saved {saved[0]:g} to {saved[1]:g} %, "
                     f"{good} runs stopped {stopped[0]:g} to {stopped[1]:g} %")
    return lines


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
    for line in choice_lines(report.choice, good):
        echo(one_line(line))
