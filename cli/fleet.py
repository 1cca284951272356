"""``ledger fleet export`` and ``fleet sql``: many cases as partitioned Parquet, queried with DuckDB."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ledger import export_fleet, remove_from_fleet
from ledger.ground.workers import JOBS_MAX
from ledger.package_tools.fleet import find_cases as fleet_cases
from ledger.package_tools.fleet_query import fleet_rows
from ledger.services.case import unique_names

from ._common import JSON, CaseFolder, FiniteFloatRange, IntegerRange, UsageGroup, progress_bar, table_options
from ._deadline import QueryDeadline
from ._output import emit_result, emit_rows, one_line, warn


@click.group(cls=UsageGroup)
def fleet() -> None:
    """Many cases at once: export them as Parquet (one partition per case) and query them with DuckDB.

    Needs the optional extra: pip install '.[fleet]' (in a clone of the repository).
    """


@fleet.command("export")
@click.argument("paths", metavar="FOLDER_OR_CASE...", nargs=-1, required=True,
                type=CaseFolder(give="a case folder (the one holding ledger.sqlite) or a folder of cases"))
@click.option("--to", "out", required=True, metavar="OUT", type=click.Path(path_type=str),
              help="Export folder (made if missing; must be empty or an earlier fleet export).")
@click.option("--jobs", type=IntegerRange(1, JOBS_MAX), default=1, show_default=True,
              help="Processes exporting cases side by side (each holds one case at a time).")
@JSON
def export_command(paths: tuple[str, ...], out: str, jobs: int, as_json: bool) -> None:
    """Export every case found in FOLDER_OR_CASE... as OUT/TABLE/case_id=ID/data.parquet.

    Tables: events, actions, balances, evidence, scope_usage, case_status. A case whose
    head was already exported is skipped; each other case is verified first and its
    files replaced by rename. A case that fails verify is reported (error lines on
    stderr, exit status 1) and not exported; the others still are.
    """
    passed_by: list[tuple[Path, str]] = []
    cases = fleet_cases(paths, passed_by)
    for path, why in passed_by:
        warn(f"note: {path}: left out: {why}")
    with progress_bar(len(cases), "exporting") as bar:
        report = export_fleet(cases, out, jobs=jobs, progress=bar.update)
    emit_result(report.to_dict(), as_json,
                [f"fleet export {out}: {report.cases} cases, {report.exported} exported, "
                 f"{report.unchanged} unchanged (head as exported: not read again), {len(report.failed)} failed"])
    for entry in report.failed:
        click.echo(one_line(f"error: {entry['error']['code']}: {entry['path']}: {entry['error']['message']}"),
                   err=True)
    if report.failed:
        sys.exit(1)


@fleet.command("remove")
@click.argument("out", metavar="OUT", type=CaseFolder(give="the fleet export's folder (the one 'ledger fleet export --to' wrote)"))
@click.argument("case_ids", metavar="CASE_ID...", nargs=-1, required=True)
@JSON
def remove_command(out: str, case_ids: tuple[str, ...], as_json: bool) -> None:
    """Take the cases CASE_ID... out of the fleet export OUT: their records and files.

    For a case gone from its folders, or one to export again from another package
    under the same id (a case id names one package in a fleet). An id OUT does not
    hold is refused, and then nothing is removed.
    """
    removed = remove_from_fleet(out, case_ids)
    emit_result({"out": out, "removed": removed}, as_json, [f"fleet remove {out}: removed {', '.join(removed)}"])


@fleet.command("sql")
@click.argument("out", metavar="OUT", type=CaseFolder(give="the fleet export's folder (the one 'ledger fleet export --to' wrote)"))
@click.argument("query")
@click.option("--timeout", "timeout_s", type=FiniteFloatRange(0.001, 86_400), default=30, show_default=True,
              help="Seconds after which the query is stopped.")
@table_options
def sql_command(out: str, query: str, timeout_s: float, fmt: str) -> None:
    """Run one DuckDB SELECT QUERY over the fleet export OUT.

    Views across all cases, each with case_id first: events, actions, balances,
    evidence, scope_usage, case_status. Times print as RFC 3339 UTC text. The query
    can read no file outside OUT and write nothing.
    """
    with QueryDeadline(timeout_s, started=False) as deadline, fleet_rows(out, query, timeout_ms=max(1, round(timeout_s * 1000)),
                                                         started=deadline.restart,
                                                         note=lambda text: warn(f"note: {text}")) as (columns, rows):
        columns = unique_names(columns)
        emit_rows((dict(zip(columns, row)) for row in deadline.rows(rows)), columns, fmt)
