"""Read-only connections for people's own SQL (``ledger sql``, ``read_only_query``).

The connection cannot write: ``mode=ro``, ``query_only`` and an authorizer that
denies ATTACH, DETACH and every pragma but the schema-reading ones. A query
still running after its deadline is stopped; every refusal is ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..ground import errors as E
from .sqlfiles import statement
from ..ground.errors import LedgerError
from .sqlite_file import connect_uri, log_files_exist, readable_uri, release_log, translate_sqlite_errors


@contextmanager
def _query_errors(timeout_ms: int) -> Iterator[None]:
    """A user's query failing (or stopped at its deadline) becomes ``INVALID_ARGUMENT``."""
    try:
        yield
    except (sqlite3.Error, ValueError, OverflowError) as exc:
        if "interrupted" in str(exc):
            raise LedgerError(E.INVALID_ARGUMENT, f"query stopped at its time limit, {timeout_ms / 1000:g} s "
                              f"(ledger sql --timeout SECONDS; timeout_ms={timeout_ms} in Python)") from None
        why = ("; a read-only query may not ATTACH, DETACH or run a PRAGMA but the schema-reading ones "
               f"({', '.join(sorted(READ_ONLY_PRAGMAS))})" if str(exc) == "not authorized" else "")
        raise LedgerError(E.INVALID_ARGUMENT, f"query refused: {exc}{why}") from None


def _fetch(cursor: sqlite3.Cursor, timeout_ms: int, size: int = 512) -> Iterator[tuple]:
    """The cursor's rows, ``size`` at a time (nothing holds the whole result)."""
    while True:
        with _query_errors(timeout_ms):
            chunk = cursor.fetchmany(size)
        if not chunk:
            return
        yield from chunk


#: Pragmas that only read the schema: allowed on the read-only ``ledger sql`` connection.
READ_ONLY_PRAGMAS = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo", "foreign_key_list",
    "function_list", "module_list", "pragma_list", "collation_list", "compile_options",
})


def open_readonly(path: Path) -> sqlite3.Connection:
    """A connection that cannot write: ``mode=ro`` plus an authorizer denying ATTACH and writes.

    Of the pragmas only the schema-reading ones of :data:`READ_ONLY_PRAGMAS` are allowed
    (as ``SELECT * FROM pragma_table_info('events')`` or ``PRAGMA table_info(events)``).
    """
    conn = connect_uri(readable_uri(path)[0])
    with translate_sqlite_errors():
        conn.execute("PRAGMA query_only = ON")

        def authorizer(action: int, name: str | None = None, *_: Any) -> int:
            if action == sqlite3.SQLITE_PRAGMA and (name or "").lower() in READ_ONLY_PRAGMAS:
                return sqlite3.SQLITE_OK  # pragma_table_info('events') and the like only read
            if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_PRAGMA):
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK

        conn.set_authorizer(authorizer)
    return conn

def readonly_query(path: Path, sql: str, timeout_ms: int = 30_000) -> tuple[list[str], list[tuple]]:
    """Run one statement on a read-only connection; ``(column names, rows)``.

    Anything that is not a single row-returning read fails with
    ``INVALID_ARGUMENT`` (writes, ATTACH, PRAGMA, several statements), and so
    does a query still running after ``timeout_ms``.
    """
    with readonly_rows(path, sql, timeout_ms) as (names, rows):
        return names, list(rows)

@contextmanager
def readonly_rows(path: Path, sql: str, timeout_ms: int = 30_000) -> Iterator[tuple[list[str], Iterator[tuple]]]:
    """Like :func:`readonly_query`, but the rows come from the cursor as they are read
    (``with readonly_rows(path, sql) as (names, rows): …``); the connection
    closes when the block ends, leaving no ``-wal``/``-shm`` it made. ``LEDGER_MISSING`` for a file
    that holds no case."""
    log_was_there = log_files_exist(path)
    conn = open_readonly(path)
    try:
        with translate_sqlite_errors():
            has_schema = conn.execute(statement("has_migrations_table")).fetchone() is not None
    except BaseException:
        conn.close()
        raise
    if not has_schema:
        conn.close()
        raise LedgerError(E.LEDGER_MISSING, f"{path} holds no case (an interrupted init?); run init again")
    deadline = time.monotonic() + timeout_ms / 1000
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
    try:
        with _query_errors(timeout_ms):
            import sqlite_utils  # imported on first use: it costs about 80 ms at start-up

            db = sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
            cursor = db.execute(sql)
            if cursor.description is None:
                raise LedgerError(E.INVALID_ARGUMENT, "the statement returns no rows; only reads are allowed")
        yield [d[0] for d in cursor.description], _fetch(cursor, timeout_ms)
    finally:
        conn.close()
        if not log_was_there:
            release_log(path)
