"""The targets of the benchmark's ratios and the README table printed from saved runs.

``python -m benchmarks --table RUN_A.json RUN_B.json …`` prints one Markdown table:
a row per figure, a column per run (named by its file name), and the target with
whether each run meets it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: key → (comparison, bound, meaning). Every ratio is measured within one run.
TARGETS: dict[str, tuple[str, float, str]] = {
    "durable_op_vs_raw": (">=", 0.6, "durable API operations/s ÷ raw one-row durable commits/s"),
    "vs_eventsourcing": (">=", 1.2, "API operations/s ÷ eventsourcing's SQLite events/s"),
    "vs_file_per_event": (">=", 1.5, "API operations/s ÷ a JSON file per event with fsync"),
    "cpu_per_op_vs_raw": ("<=", 3, "process CPU per API operation ÷ per raw commit"),
    "apply_vs_raw_batch": (">=", 0.1, "journal apply operations/s ÷ raw inserts/s, 100 rows per commit"),
    "verify_vs_scan": (">=", 0.3, "verify events/s ÷ bare scan (fetch, json.loads, sha256)"),
    "export_vs_raw_files": (">=", 0.7, "export files/s ÷ bare atomic writes of the same bytes"),
    "multi_verify_speedup": (">=", 1.6, "cases verified/s with `--jobs 2` ÷ with `--jobs 1`, 200 small cases"),
    "apply_rss_ratio": ("<=", 1.5, "peak RSS applying the long journal ÷ the 1,000-line one"),
    "latency_ratio_100k_vs_1k": ("<=", 1.25, "median durable operation latency, large ledger ÷ 1,000 events"),
    "gate_latency_ratio_100k_vs_1k": ("<=", 1.25, "median `check`/`advice` latency, large ledger ÷ 1,000 events "
                                      "(the worse of the two)"),
    "snapshot_latency_ratio_100k_vs_1k": ("<=", 1.5, "median `snapshot()` latency after the process's first, large "
                                          "ledger ÷ 1,000 events"),
    "verify_peak_rss_mib": ("<=", 200, "peak RSS of `ledger verify` (MiB)"),
    "balances_query_ms": ("<=", 5, "`SELECT * FROM balances` on the large ledger (ms)"),
    "simulate_vs_apply": (">=", 30, ("`ledger simulate` journal lines/s ÷ `ledger apply --keep-going` journal "
                                     "lines/s, the same 100 journals")),
    "fleet_export_rss_ratio": ("<=", 1.5, "peak RSS of `ledger fleet export` over 10,000 cases ÷ over one case"),
    "frontier_vs_simulate": (">=", 10, ("`ledger simulate --frontier` policy × run pairs per CPU second ÷ plain "
                                        "`ledger simulate`'s, the same 1,000-policy grid and 100 journals")),
}

#: The targets that are plain values, not ratios: every other target divides two figures of one run.
PLAIN_VALUES = ("verify_peak_rss_mib", "balances_query_ms")

#: Figures shown under the targets, for context (no target of their own).
CONTEXT = ("fsync_ms", "event_bytes", "events", "raw_tx_per_s", "ledger_ops_per_s",
           "ledger_ops_per_s_synchronous_normal", "ledger_cpu_ms_per_op", "raw_cpu_ms_per_op",
           "file_per_event_ops_per_s", "eventsourcing_ops_per_s", "sql_floor_ops_per_s", "sql_floor_cpu_ms_per_op",
           "sql_floor_vs_raw", "sql_floor_vs_eventsourcing", "ledger_vs_sql_floor", "apply_ops_per_s", "raw_batch_inserts_per_s",
           "apply_vs_ledger_ops", "cli_check_ms", "verify_events_per_s", "scan_events_per_s", "export_files_per_s",
           "raw_files_per_s", "apply_rss_small_mib", "apply_rss_large_mib", "latency_ms_small", "latency_ms_large",
           "simulate_s", "apply_s", "simulate_lines", "simulate_steps", "simulate_lines_per_s",
           "apply_journal_ops_per_s", "simulate_steps_per_s", "simulate_steps_vs_apply_lines",
           "check_ms_small", "check_ms_large", "advice_ms_small", "advice_ms_large", "snapshot_ms_small",
           "snapshot_ms_large",
           "fleet_cases", "fleet_jobs", "fleet_export_cases_per_s", "fleet_unchanged_cases_per_s", "fleet_sql_ms",
           "fleet_export_one_case_rss_mib", "fleet_export_peak_rss_mib",
           "frontier_policies", "frontier_runs", "frontier_s", "frontier_plain_simulate_s",
           "frontier_cpu_s", "frontier_plain_simulate_cpu_s", "frontier_pairs_per_s", "frontier_plain_pairs_per_s",
           "frontier_vs_simulate_wall",
           "multi_verify_cases", "multi_verify_cases_per_s_jobs1",
           "multi_verify_cases_per_s_jobs2")



def normalized(run: dict[str, Any]) -> dict[str, Any]:
    """``run`` with the simulation figures under today's names. Runs saved before the target moved
    to lines over lines (those without ``simulate_vs_apply_unit``) stored the steps-over-lines
    ratio as ``simulate_vs_apply`` and the lines-over-lines one as ``simulate_lines_vs_apply``
    (absent from the oldest). Runs without ``simulate_policy`` applied the journals under the
    default policy, where ``simulate`` used the example one."""
    if "simulate_vs_apply_unit" in run or "simulate_vs_apply" not in run:
        return run
    out = dict(run)
    out["simulate_steps_vs_apply_lines"] = out.pop("simulate_vs_apply")
    out["simulate_vs_apply"] = out.pop("simulate_lines_vs_apply", None)
    return out


def met(key: str, value: Any) -> bool | None:
    """Whether ``value`` meets the target of ``key`` (None when there is no value or no target)."""
    if key not in TARGETS or not isinstance(value, (int, float)):
        return None
    comparison, bound, _ = TARGETS[key]
    return value >= bound if comparison == ">=" else value <= bound


def _figure(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2 if abs(value) >= 0.1 else 3
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def table(runs: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of ``runs`` (column name → a run's JSON object)."""
    names = list(runs)
    lines = ["| figure | " + " | ".join(names) + " | target |",
             "| --- | " + " | ".join("---" for _ in names) + " | --- |"]
    for key, (comparison, bound, meaning) in TARGETS.items():
        cells = []
        for name in names:
            value = runs[name].get(key)
            verdict = met(key, value)
            cells.append(_figure(value) + ("" if verdict is None else " ✓" if verdict else " ✗"))
        sign = "≥" if comparison == ">=" else "≤"
        lines.append(f"| `{key}` ({meaning}) | " + " | ".join(cells) + f" | {sign} {bound:g} |")
    for key in CONTEXT:
        if any(key in run for run in runs.values()):
            lines.append(f"| `{key}` | " + " | ".join(_figure(runs[n].get(key)) for n in names) + " | — |")
    return "\n".join(lines)


def print_table(paths: list[Path]) -> int:
    """Print the table of the runs saved in ``paths`` (``python -m benchmarks --json > FILE``)."""
    runs = {}
    for path in paths:
        try:
            runs[path.stem] = normalized(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, AttributeError) as exc:  # missing, unreadable or not a saved run
            print(f"error: {path}: not a saved run ({exc})", file=sys.stderr)
            return 2
    quick = [name for name, run in runs.items() if run.get("quick")]
    print(table(runs))
    if quick:
        print(f"\n(--quick runs, smaller sizes, not comparable with full runs: {', '.join(quick)})")
    return 0
