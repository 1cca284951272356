"""``ledger balances``, ``actions``, ``events``, ``sql``: reading a case."""

from __future__ import annotations

import click

from ledger.services.case import unique_names

from ._common import (OnceCommand, BALANCE_COLUMNS, CASE, read_only_rows, FiniteFloatRange, Integer, IntegerRange,
                      Settings, pass_settings, table_options)
from ._deadline import QueryDeadline
from ._output import emit_rows

EVENT_COLUMNS = ("seq", "type", "revision", "created_at", "sha256", "parent_sha256")

@click.command(cls=OnceCommand)
@CASE
@click.option("--revision", "revision_number", type=Integer(), help="Only this revision.")
@table_options
@pass_settings
def balances(settings: Settings, case: str, revision_number: int | None, fmt: str) -> None:
    """The balances view: one row per revision and hypothesis."""
    with settings.open(case) as opened:
        rows = [r for r in opened.balances() if revision_number is None or r["revision"] == revision_number]
    emit_rows(rows, BALANCE_COLUMNS, fmt)


@click.command(cls=OnceCommand)
@CASE
@table_options
@pass_settings
def actions(settings: Settings, case: str, fmt: str) -> None:
    """The actions view: one row per reserved action, in reservation order."""
    with settings.open(case) as opened:
        rows = opened.actions()
    emit_rows(rows, None if rows else ("revision", "hypothesis_id", "action_id"), fmt)


@click.command(cls=OnceCommand)
@CASE
@click.option("--since", type=IntegerRange(0, 2**53 - 1), default=0, help="Only events with seq greater than this.")
@click.option("--body", "with_body", is_flag=True, help="Include each event's canonical JSON body.")
@table_options
@pass_settings
def events(settings: Settings, case: str, since: int, with_body: bool, fmt: str) -> None:
    """The hash chain: seq, type, revision, time, sha256 and parent of every event.

    Every format but --table streams the rows as they are read.
    """
    columns = EVENT_COLUMNS + (("body",) if with_body else ())
    with settings.open(case) as opened:
        emit_rows(opened.iter_events(since, with_body=with_body), columns, fmt)


@click.command(cls=OnceCommand)
@CASE
@click.argument("query")
@click.option("--timeout", "timeout_s", type=FiniteFloatRange(0.001, 86_400), default=30, show_default=True,
              help="Seconds after which the query is stopped.")
@table_options
def sql(case: str, query: str, timeout_s: float, fmt: str) -> None:
    """Run one read-only SQL QUERY on CASE's ledger.sqlite (writes are refused).

    Public views: balances, balances_recomputed, actions, evidence, scope_usage, case_status.
    Schema-reading pragma functions work (SELECT * FROM pragma_table_info('events')).
    Every format but --table streams the rows as they are read.
    """
    with QueryDeadline(timeout_s) as deadline, \
            read_only_rows(case, query, timeout_ms=max(1, round(timeout_s * 1000))) as (columns, rows):
        columns = unique_names(columns)  # `SELECT e1.seq, e2.seq …` keeps both values
        emit_rows((dict(zip(columns, row)) for row in deadline.rows(rows)), columns, fmt)
