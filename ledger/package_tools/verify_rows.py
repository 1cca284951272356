"""Verify's row comparison: the ledger's events columns, contents, helper rows and public views
against those the replay derived (docs/files.md, "verify").

Rows are compared value by value with each value's storage class (``10.0`` and ``10`` are equal in
SQL, not here) and table by table with their counts (a comparison of row sets cannot see a row
stored twice). The first difference is ``INTEGRITY_ERROR`` naming the smallest ``seq`` it can.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ..ground.errors import integrity_error as _bad, LedgerError, shortened
from ..storage.sqlfiles import PUBLIC_VIEWS, column_list, statement
from ..storage.sqlite_file import translate_sqlite_errors

#: Helper tables compared row by row against the replay.
HELPER_TABLES = ("case_identity", "lifecycle", "revisions", "hypotheses", "policies", "accounts",
                 "grants", "reservations", "results", "result_sources", "closings", "terminations",
                 "evidence_records", "scope_establishments", "scope_limits", "limit_warnings",
                 "limit_exceedances", "increase_requests", "result_costs", "evidence_atoms", "outcomes", "result_atoms", "test_requests",
                 "feedback_drafts", "feedback_confirmations", "account_floors", "money_totals",
                 "evidence_indexes", "evidence_files")


def _rows_differ(conn: sqlite3.Connection, table: str, order: str, query: str = "rows_differ") -> tuple[Any, ...] | None:
    """First row (by ``order``) present in only one of main.<table> and orig.<table> (``query``:
    ``view_rows_differ`` for a view, computed once per side)."""
    with translate_sqlite_errors():
        types = column_list(conn, table, types=True)
        return conn.execute(statement(query, table=table, order=order, types=types)).fetchone()


def compare_rows(conn: sqlite3.Connection, tables_agree: bool = False, saved: set[str] = frozenset()) -> None:
    """Events columns, contents, helper rows and views of the ledger against the replay
    (``tables_agree``: the tables were compared already, in two ranges of seq, and agree;
    ``saved``: the views whose ledger side was computed already).

    Every table is compared before anything is reported, so the error names the
    smallest differing ``seq`` whichever table it is in.
    """
    found: list[tuple[int, str]] = []
    # a ledger made by an older schema version has not every table and view yet (its scratch neither)
    present = {name for name, _sql in conn.execute(statement("schema_objects", "orig"))}
    if not tables_agree:
        _compare_tables(conn, present, found)
    if found:
        seq, message = min(found, key=lambda item: (item[0] if type(item[0]) is int else 2**63, item[1]))
        raise _bad(seq if type(seq) is int else None, message)
    for view in (v for v in PUBLIC_VIEWS if v in present):
        try:
            differing = _rows_differ(conn, view, "1", "saved_view_rows_differ" if view in saved else "view_rows_differ")
        except LedgerError as exc:
            raise _bad(None, f"view {view} cannot be read: {exc.message}", view=view) from None
        if differing is not None:
            raise _bad(None, f"view {view} disagrees with the replay: {differing}", view=view)


def _compare_tables(conn: sqlite3.Connection, present: set[str], found: list[tuple[int, str]]) -> None:
    """Add ``(seq, message)`` to ``found`` for each table whose rows differ from the replay's."""
    with translate_sqlite_errors():
        differing = conn.execute(statement("events_differ")).fetchone()
    if differing is not None:
        found.append((differing[0], _events_difference(conn, differing[0])))
    for table in ("contents", *(t for t in HELPER_TABLES if t in present)):
        differing = _rows_differ(conn, table, "seq")
        if differing is not None:
            columns = [d[1] for d in conn.execute(statement("table_columns", table=table))]
            row = dict(zip(columns, differing[1:]))
            found.append((_seq_named(row["seq"]), _row_difference(table, differing[0], row)))
    for table in ("contents", *(t for t in HELPER_TABLES if t in present)):
        repeated = _repeated_row(conn, table)
        if repeated is not None:
            found.append(repeated)


def _row_difference(table: str, side: str, row: dict[str, Any]) -> str:
    """What verify says of the first row only one side holds: its table, which side, and its values
    (each shortened), so that the edit can be found with SQL."""
    values = ", ".join(f"{name}={shortened(repr(value), 60)}" for name, value in row.items())
    kind = "content table" if table == "contents" else "helper table"
    if side == "ledger":
        return f"{kind} {table} holds a row the replay does not derive (edited, extra or swapped): {values}"
    return f"{kind} {table} lacks a row the replay derives (edited or deleted): {values}"


#: The columns ``event_columns_at`` reads, as verify names them.
_EVENT_COLUMNS = ("type", "revision", "stream", "stream_seq", "created_at", "sha256", "parent_sha256", "operation_key",
                  "request_sha256", "body", "storage class of revision", "storage class of stream_seq")


def _events_difference(conn: sqlite3.Connection, seq: int) -> str:
    """What verify says of the first event whose row differs from the replay's: the columns that
    differ, with the stored and the derived value of each (but the body's, too long to show)."""
    with translate_sqlite_errors():
        held, derived = (conn.execute(statement("event_columns_at", schema), {"seq": seq}).fetchone()
                         for schema in ("orig", "main"))
    if held is None or derived is None:
        return "the events table " + ("lacks an event the replay derives" if held is None else
                                      "holds an event the replay does not derive")
    named = [(name, mine, theirs) for name, mine, theirs in zip(_EVENT_COLUMNS, held, derived)
             if mine != theirs or type(mine) is not type(theirs)]
    return "the events column(s) " + "; ".join(
        name if name == "body" else f"{name} (stored {shortened(repr(mine), 60)}, the body gives "
                                    f"{shortened(repr(theirs), 60)})" for name, mine, theirs in named
    ) + " disagree with the event's body"


def _seq_named(value: Any) -> int | None:
    """The seq a differing row names: an integer, or the equal one when it was stored as a real
    (``5.0``, itself the difference); None for anything else."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value if type(value) is int else None


def _repeated_row(conn: sqlite3.Connection, table: str) -> tuple[int | None, str] | None:
    """``(seq, message)`` when the ledger's ``table`` holds as many distinct rows as the replay but
    not as many rows: a row stored twice (a unique index rebuilt around it), which a comparison of
    row sets cannot see."""
    with translate_sqlite_errors():
        held, replayed = conn.execute(statement("row_counts", table=table)).fetchone()
        if held == replayed:
            return None
        row = conn.execute(statement("repeated_row", table=table, columns=column_list(conn, table))).fetchone()
    where = f"a row of seq {row[0]} stored twice" if row is not None else "rows added or missing"
    return (row[0] if row is not None else None,
            f"{'content' if table == 'contents' else 'helper'} table {table} holds {held} rows where the replay "
            f"has {replayed} ({where})")
