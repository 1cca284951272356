"""A fleet of small, real cases for ``ledger fleet`` (the benchmark and tests/test_fleet.py).

:func:`make_case` builds case number N as a real, verified ledger by applying a journal
(the ``ledger apply`` logic, in process): a prefix of one of the bundled agent-run
journals (``tests/data/trajectories``), with a mix that varies by N — one or two
hypotheses, budgets small enough that some accounts run out or are abandoned for low
information, a case scope whose action limit warns and fires in some cases, and about
half of the cases closed. Every line carries an ``at`` spread over four weeks, so the
actions take different times to settle. The same N always gives the same case.
"""

from __future__ import annotations

import datetime
import json
import random
from pathlib import Path
from typing import Any

from ledger import AnalysisConfig, BudgetConfig, Case, apply_journal

ROOT = Path(__file__).resolve().parent.parent
TRAJECTORIES = ROOT / "tests" / "data" / "trajectories"
POLICY = ROOT / "config" / "budget.example.toml"
START = 1_793_491_200  # 2026-11-01T00:00:00Z

_STEPS: list[list[list[dict[str, Any]]]] = []


def _trajectories() -> list[list[list[dict[str, Any]]]]:
    """Each bundled journal as its steps: (reserve, record_result, settle) triples."""
    if not _STEPS:
        for path in sorted(TRAJECTORIES.glob("*.jsonl")):
            lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            body = [line for line in lines if line["op"] in ("reserve", "record_result", "settle")]
            _STEPS.append([body[i:i + 3] for i in range(0, len(body) - 2, 3)])
    return _STEPS


def _at(seconds: int) -> str:
    moment = datetime.datetime.fromtimestamp(START + seconds, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def journal(number: int) -> tuple[str, list[str]]:
    """``(first at, journal lines)`` of case ``number``."""
    rng = random.Random(number)
    trajectories = _trajectories()
    steps = trajectories[number % len(trajectories)]
    taken = steps[: rng.randint(3, min(24, len(steps)))]
    hypotheses = 2 if number % 3 == 0 else 1
    units = rng.choice([60, 120, 400, 100_000])
    clock = (number % 28) * 86_400 + rng.randint(0, 80_000)
    first = _at(clock)
    lines: list[dict[str, Any]] = [
        {"op": "open_revision", "units_per_hypothesis": units,
         "hypotheses": [{"statement": f"case {number} hypothesis {h}"} for h in range(1, hypotheses + 1)]},
        {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"},
        {"op": "initialize"},
    ]
    if number % 4 == 1:
        lines.append({"op": "establish", "scope": "case", "issuer": "controller",
                      "limits": {"actions": max(2, len(taken) // 2)}, "warning_ratio": 0.5,
                      "on_exhausted": "block_action"})
    for index, (reserve, record, settle) in enumerate(taken):
        hypothesis = f"H{1 + index % hypotheses}"
        for line in (reserve, record, settle):
            step = dict(line, hypothesis=hypothesis)
            lines.append(step)
    if number % 2 == 0:
        lines += [{"op": "transition", "to": "EVALUATING"}, {"op": "transition", "to": "CLOSED"}]
    out = []
    for line in lines:
        clock += rng.randint(1, 90) if line["op"] != "settle" else rng.randint(5, 900)
        out.append(json.dumps(dict(line, at=_at(clock))))
    return first, out


def make_case(path: Path, number: int) -> str:
    """Build case ``number`` at ``path`` (``FLEET-NNNNN``); its case id. Lines the rules refuse
    (a reservation past a limit or an exhausted budget) are refused as they would be in a run."""
    first, lines = journal(number)
    case_id = f"FLEET-{number:05d}"
    config = AnalysisConfig(storage={"synchronous": "NORMAL"})
    case = Case.create(path, case_id, analysis_config=config, at=first)
    try:
        for _ in apply_journal(case, lines, budget=case.budget(BudgetConfig.load(POLICY)), keep_going=True,
                               batch_size=256):
            pass
    finally:
        case.close()
    return case_id


def _make(args: tuple[str, int]) -> str:
    return make_case(Path(args[0]), args[1])


def make_fleet(directory: Path, cases: int, jobs: int) -> Path:
    """``cases`` cases under ``directory/cases`` (folder per case, ``jobs`` processes)."""
    import multiprocessing

    root = directory / "cases"
    work = [(str(root / f"{n // 1000:02d}" / f"case-{n:05d}"), n) for n in range(cases)]
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for _ in pool.imap_unordered(_make, work, chunksize=16):
            pass
    return root


#: The cross-case aggregate ``fleet_sql_ms`` times: spend per action type per day.
FLEET_QUERY = """SELECT CAST(reserved_at AS DATE) AS day, action, COUNT(*) AS actions,
       SUM(cost_units) AS spent_units, SUM(reward_units) AS refunded_units
FROM actions GROUP BY ALL ORDER BY day, action"""


def bench_fleet(directory: Path, cases: int, run_cli: Any) -> dict[str, Any]:
    """``fleet_export_cases_per_s`` (``ledger fleet export --jobs <cpus>``, a real process, over
    ``cases`` new cases), ``fleet_sql_ms`` (median of five runs of :data:`FLEET_QUERY` in process),
    and the export's peak RSS (the largest of its processes) against exporting one case."""
    import os
    import statistics
    import time

    from ledger import fleet_query

    jobs = os.cpu_count() or 1
    root = make_fleet(directory, cases, jobs)
    _, one_rss = run_cli("fleet", "export", str(root / "00" / "case-00000"), "--to", str(directory / "one"))
    elapsed, all_rss = run_cli("fleet", "export", str(root), "--to", str(directory / "fleet"), "--jobs", str(jobs))
    again, _ = run_cli("fleet", "export", str(root), "--to", str(directory / "fleet"), "--jobs", str(jobs))
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        fleet_query(directory / "fleet", FLEET_QUERY)
        timings.append(1000 * (time.perf_counter() - start))
    return {"fleet_cases": cases, "fleet_jobs": jobs, "fleet_export_cases_per_s": cases / elapsed,
            "fleet_unchanged_cases_per_s": cases / again, "fleet_sql_ms": statistics.median(timings),
            "fleet_export_one_case_rss_mib": one_rss, "fleet_export_peak_rss_mib": all_rss,
            "fleet_export_rss_ratio": all_rss / one_rss}
