"""The chosen policy written as a budget TOML file: ``ledger simulate --frontier --emit`` (docs/simulate.md)."""

from __future__ import annotations

import json
import os
from typing import Mapping

from .frontier import CAP_P75, FrontierReport
from .output_files import write_output_file
from .simulator import Policy


def policy_toml(policy: Policy, baseline_cap: int | None = None) -> str:
    """``policy`` as a budget TOML that ``BudgetConfig.load`` and ``ledger simulate --policy`` read.
    ``units_per_hypothesis`` is not a budget key: when the policy sets it, a comment says so (the
    allocation is given when a revision opens; ``--vary units_per_hypothesis=N`` simulates it and
    ``ledger apply --units-per-hypothesis N`` applies it). ``baseline_cap``: the allocation of the
    search's ``cap-p75``, named in a comment so that runs held back from the search can be scored
    against a cap that has not seen them (docs/simulate.md)."""
    settings = policy.config.to_dict()
    lines = [f"# The policy {policy.name!r} chosen by ledger simulate --frontier."]
    if policy.units_per_hypothesis is not None:
        units = policy.units_per_hypothesis
        lines.append(f"# It also gives each hypothesis {units} units (units_per_hypothesis, set when a revision "
                     f"opens, not here): simulate it with --vary units_per_hypothesis={units}, apply it with "
                     f"ledger apply --units-per-hypothesis {units}.")
    if baseline_cap is not None:
        lines.append(f"# The search's baseline {CAP_P75} gave each hypothesis {baseline_cap} units (the 75th percentile "
                     f"of the searched runs' spending). On runs held back from the search, the row {CAP_P75} takes "
                     f"its cap from those runs themselves; add {baseline_cap} to --vary units_per_hypothesis for "
                     f"this policy at the search's cap.")
    tables = {key: value for key, value in settings.items() if isinstance(value, Mapping)}
    for key, value in settings.items():
        if key not in tables:
            lines.append(f"{json.dumps(key)} = {json.dumps(value)}")
    for table, values in tables.items():
        lines.append(f"\n[{table}]")
        lines.extend(f"{json.dumps(key)} = {json.dumps(value)}" for key, value in values.items())
    return "\n".join(lines) + "\n"


def emit_policy(report: FrontierReport, path: str | os.PathLike[str]) -> None:
    """Write :func:`policy_toml` of ``report.chosen`` (with the cap of the report's ``cap-p75``) to
    ``path``, whole or not at all (``STORAGE_ERROR`` when it cannot; the file is then left as it was)."""
    assert report.chosen is not None
    cap = next((p.units_per_hypothesis for p in report.evaluated if p.name == CAP_P75), None)
    write_output_file(path, policy_toml(report.chosen, cap).encode("utf-8"), "--emit")
