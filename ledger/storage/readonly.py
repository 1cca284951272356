"""Read-only connections for people's own SQL (``ledger sql``, ``read_only_query``).

The connection cannot write: ``mode=ro``, ``query_only`` and an authorizer that
lets a statement read and nothing else (no ATTACH, DETACH or pragma but the
schema-reading ones). :func:`reading_only` puts a writer's connection under the same
authorizer for ``Case.query``. A query still running after its deadline is stopped;
every refusal is ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Iterator

from ..ground import errors as E, interrupts
from .sqlfiles import PUBLIC_VIEWS, recorded_schema_version, schema_version
from ..ground.errors import LedgerError, pass_on_interruption, quoted
from ..ground.interrupts import context_manager
from .bounded_printf import bound_printf
from .sqlite_file import (BUSY_CODES, DAMAGED_CODES, HIDDEN_FUNCTION_RE, SQLITE_ERRORS, SQLITE_INTERRUPT,
                          SQLITE_READONLY, SQLITE_TOOBIG, STORAGE_CODES, close_then_fold, connect_uri, no_case_in,
                          find_undecodable_text, primary_code, readable_uri, sqlite_error, translate_sqlite_errors,
                          undecodable)
from .side_files import log_files_exist, log_path


#: What a parameter can hide in, or be taken for in, SQL text: a string literal, a quoted name, a
#: comment, a name or number (``$`` inside a name is part of it; each to the end of the text when it
#: is not closed); then a named parameter as SQLite reads one: ``:``, ``@``, ``#`` or ``$``, then name
#: characters (``$`` among them) and ``::``, and for one that has a name, ``(…)``.
_SQL_TOKENS = re.compile(r"""'[^']*(?:'|\Z)|"[^"]*(?:"|\Z)|`[^`]*(?:`|\Z)|\[[^\]]*(?:\]|\Z)|--[^\n]*|/\*.*?(?:\*/|\Z)"""
                         r"|[\w\x80-\U0010ffff][\w$\x80-\U0010ffff]*"
                         r"|(?P<named>[:@#$](?:::)*[\w$\x80-\U0010ffff](?:[\w$\x80-\U0010ffff]|::)*(?:\([^)\s]*\)?)?)",
                         re.S)


def refuse_names_bound_by_position(sql: str, params: tuple[Any, ...] | dict[str, Any]) -> None:
    """``INVALID_ARGUMENT`` when ``params`` is a sequence (it binds ``?`` by position) and ``sql`` has a
    named parameter: ``sqlite3`` would bind it by position (Python 3.12 and 3.13 warn, 3.14 refuses)."""
    if isinstance(params, dict):
        return
    for token in _SQL_TOKENS.finditer(sql):
        if token["named"]:
            raise LedgerError(E.INVALID_ARGUMENT, f"query refused: {token['named']} is a named parameter, but params "
                              f"is a list or tuple, which binds ? by position; give a dict "
                              f"({{{token['named'][1:]!r}: ...}})")


def _stop_at_deadline(conn: sqlite3.Connection, timeout_ms: int) -> float:
    """Make SQLite stop ``conn``'s statements (``SQLITE_INTERRUPT``) once ``timeout_ms`` have passed
    from now, and return that deadline (``time.monotonic()``); ``conn.set_progress_handler(None,
    10_000)`` lifts it. Ctrl-C stops a statement too (its ``KeyboardInterrupt`` is raised inside the
    handler, which SQLite takes for a stop): :func:`_query_errors` tells the two apart by the clock."""
    deadline = time.monotonic() + timeout_ms / 1000
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
    return deadline


#: The longest text or blob a user's query may make when the case's file is smaller: SQLite stops
#: a statement at its deadline only between steps, and one function call (``replace``, ``hex``,
#: ``zeroblob``) building a value of gigabytes is one step that may run for seconds (docs/concepts.md).
VALUE_BYTES_MIN = 64 * 1024 * 1024


def bound_values(conn: sqlite3.Connection, stored_bytes: int | None = None) -> int:
    """Set SQLite's value-length limit on ``conn`` to the larger of :data:`VALUE_BYTES_MIN` and
    ``stored_bytes`` (the size of the case's files, by default the pages of ``conn``'s database:
    no value stored in them is longer, so every stored value stays readable), and its ``printf`` to
    one bounded in time (:mod:`.bounded_printf`); return the limit it had. ``STORAGE_ERROR`` or ``INTEGRITY_ERROR`` when the file cannot be read."""
    if stored_bytes is None:
        with translate_sqlite_errors():
            pages, page_bytes = (conn.execute(f"PRAGMA {name}").fetchone()[0] for name in ("page_count", "page_size"))
        stored_bytes = pages * page_bytes
    limit = max(VALUE_BYTES_MIN, stored_bytes)
    bound_printf(conn, limit)  # a %c repeating past the limit: one step no deadline stops
    return conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)


def _stored_bytes(path: Path) -> int:
    """The size of the case file ``path`` and its ``-wal``: an upper bound on any value stored in it."""
    total = 0
    for name in (path, log_path(path, "-wal")):
        try:
            total += os.stat(name).st_size
        except OSError as oserr:
            pass_on_interruption(oserr)
    return total


@context_manager
def _query_errors(timeout_ms: int, deadline: float, conn: sqlite3.Connection) -> Iterator[None]:
    """A user's query failing (:func:`_query_error`), stopped at its deadline (``INVALID_ARGUMENT``)
    or, before it, by Ctrl-C (``KeyboardInterrupt`` again)."""
    try:
        yield
    except UnicodeEncodeError as exc:
        raise _not_unicode(exc) from None
    except (sqlite3.Error, ValueError, OverflowError) as exc:
        if primary_code(exc) == SQLITE_INTERRUPT:
            if time.monotonic() <= deadline:
                raise KeyboardInterrupt from None  # the user stopped it, not its time limit
            raise LedgerError(E.INVALID_ARGUMENT, f"query stopped at its time limit, {timeout_ms / 1000:g} s "
                              f"(ledger sql --timeout SECONDS; timeout_ms={timeout_ms} in Python)", timeout_ms=timeout_ms) from None
        raise _query_error(exc, conn) from None


def _query_error(exc: BaseException, conn: sqlite3.Connection) -> LedgerError:
    """What a user's failing statement means, for ``ledger sql`` and ``Case.query`` alike, told by
    SQLite's result code (never by words in its message, which may quote the user's SQL): a busy
    file (``LEDGER_BUSY``), a failing one (``STORAGE_ERROR``) and a damaged one (``INTEGRITY_ERROR``)
    keep their codes; any other failure, a write refused on the read-only connection among them, is
    the statement's own (``INVALID_ARGUMENT``, :func:`_refused`)."""
    primary = primary_code(exc) if isinstance(exc, sqlite3.Error) else None
    if undecodable(exc) or str(exc) == _FUNCTION_FAILED:  # text sqlite3 cannot read (a result, printf's argument)
        return _undecodable_result(exc, conn)
    if (primary is not None and primary != SQLITE_READONLY and (
            primary in BUSY_CODES or primary in DAMAGED_CODES or primary in STORAGE_CODES)) or _hides(exc, conn):
        translated = sqlite_error(exc)  # a table-valued function a table of the user's hides: named as such
        if isinstance(translated, LedgerError):
            return translated
    return _refused(exc)


#: sqlite3's words for a Python function of the connection that raised, or whose arguments it could not
#: give it (a text that is not UTF-8 given to this program's printf or format, :mod:`.bounded_printf`).
_FUNCTION_FAILED = "user-defined function raised exception"


def _undecodable_result(exc: BaseException, conn: sqlite3.Connection) -> LedgerError:
    """A text that is not UTF-8, which the sqlite3 module can neither give as a result nor pass to a
    function of this program (``printf``): ``INTEGRITY_ERROR`` naming the row when a table of the ledger
    holds such text (a damaged file), else the query made it (``CAST(x'ff' AS TEXT)``) or its function
    failed, ``INVALID_ARGUMENT``; as damage, with 'ledger verify' to tell, when the search itself cannot
    read the file. The search runs to its end whatever the query's time limit (Ctrl-C still stops it)."""
    conn.set_progress_handler(None, 0)  # a deadline passing in it would call an intact file unreadable
    try:
        damaged = find_undecodable_text(conn)
    except (sqlite3.Error, UnicodeDecodeError):
        damaged = sqlite_error(exc) if undecodable(exc) else None
    if isinstance(damaged, LedgerError):
        return damaged
    if str(exc) == _FUNCTION_FAILED:
        return LedgerError(E.INVALID_ARGUMENT, f"query refused: {exc}: this program's printf() or format() failed, "
                           "as it does given a text that is not UTF-8 (hex(…) or CAST(… AS BLOB) gives its bytes)",
                           query="refused")
    column = re.match(r"Could not decode to UTF-8 column '(.*?)' with text", str(exc), re.S)
    named = (f"column {quoted(column[1], 80)} of the result" if column and "\ufffd" not in column[1]
             else "a value of the result")  # a name that is not ASCII comes garbled in sqlite3's message
    return LedgerError(E.INVALID_ARGUMENT, f"query failed: {named} is text that is not UTF-8, and none of the "
                       "ledger's own tables holds such text: the query made it (a CAST of bytes AS TEXT, say); hex(…) "
                       "or CAST(… AS BLOB) gives its bytes", query="failed")


def _hides(exc: BaseException, conn: sqlite3.Connection) -> bool:
    """Whether ``exc`` is SQLite's "'json_each' is not a function" because a table or view of that name
    in the ledger file hides a table-valued function (a name the statement itself gave, a CTE's, is
    the statement's own error)."""
    hidden = HIDDEN_FUNCTION_RE.fullmatch(str(exc)) if isinstance(exc, sqlite3.OperationalError) else None
    if hidden is None:
        return False
    try:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name = ? COLLATE NOCASE",
                            (hidden[1],)).fetchone() is not None
    except sqlite3.Error:
        return False


def _older_views(exc: sqlite3.OperationalError, version: int) -> BaseException:
    """``exc`` as :func:`_query_errors` reports it, with what explains a name the statement does not
    find in a ledger an older case-ledger wrote and no writer has upgraded: its views and tables
    are those of its own schema version, without what newer ones add."""
    if version >= schema_version() or not str(exc).startswith(("no such column", "no such table")):
        return exc
    return sqlite3.OperationalError(f"{exc} (this ledger was written by an older case-ledger, schema version "
                                    f"{version}, and no writer has upgraded it to {schema_version()} yet: its views "
                                    "lack what newer ones have; a command that writes, such as 'ledger export', "
                                    "upgrades it)")


def _fetch(cursor: sqlite3.Cursor, timeout_ms: int, deadline: float, size: int = 512) -> Iterator[tuple]:
    """The cursor's rows, ``size`` at a time (nothing holds the whole result)."""
    while True:
        with _query_errors(timeout_ms, deadline, cursor.connection):
            chunk = cursor.fetchmany(size)
        if not chunk:
            return
        yield from chunk


#: Pragmas that only read the schema: allowed on the read-only ``ledger sql`` connection.
READ_ONLY_PRAGMAS = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo", "foreign_key_list",
    "function_list", "module_list", "pragma_list", "collation_list", "compile_options",
})


#: What a read may do: select, read columns, call functions, recurse; and the pragmas above.
_READ_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                           getattr(sqlite3, "SQLITE_RECURSIVE", 33)})


#: SQL functions no user's query may call: ``fts3_tokenizer(name)`` answers with the address of code
#: inside this process (and, given a second argument, plants one), which no read needs.
REFUSED_FUNCTIONS = frozenset({"fts3_tokenizer"})


def reads_only(action: int, name: str | None = None, function: str | None = None, *_: Any) -> int:
    """An SQLite authorizer that lets a statement read and nothing else: no write, no schema
    change, no transaction control, no ATTACH, no pragma but the schema-reading ones of
    :data:`READ_ONLY_PRAGMAS` (as ``SELECT * FROM pragma_table_info('events')`` or
    ``PRAGMA table_info(events)``), no function of :data:`REFUSED_FUNCTIONS`."""
    if action == sqlite3.SQLITE_FUNCTION and (function or "").lower() in REFUSED_FUNCTIONS:
        verdict = sqlite3.SQLITE_DENY
    elif action == sqlite3.SQLITE_PRAGMA:
        verdict = sqlite3.SQLITE_OK if (name or "").lower() in READ_ONLY_PRAGMAS else sqlite3.SQLITE_DENY
    elif action == sqlite3.SQLITE_UPDATE and (name or "").lower() in _SCHEMA_TABLES:
        # asked while a pragma table function such as pragma_table_info() reads the schema; a real
        # update of the schema table needs writable_schema, a pragma refused above
        verdict = sqlite3.SQLITE_OK
    else:
        verdict = sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY
    if verdict == sqlite3.SQLITE_DENY:
        _REFUSED.action = action
    return verdict


#: The action :func:`reads_only` last refused in this thread (SQLite asks it as it prepares a statement,
#: in the thread that runs it), for :func:`_refused` to say why.
_REFUSED = threading.local()
_TRANSACTION_CONTROL = frozenset({sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT})


_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"})


def _reads_in_transactions(action: int, name: str | None = None, *rest: Any) -> int:
    """:func:`reads_only`, and ``BEGIN``/``COMMIT`` too: on a connection that cannot write, a read
    transaction holds one snapshot for several reads."""
    return sqlite3.SQLITE_OK if action == sqlite3.SQLITE_TRANSACTION else reads_only(action, name, *rest)


def open_readonly(path: Path) -> sqlite3.Connection:
    """A connection that cannot write: ``mode=ro``, ``query_only`` and the :func:`reads_only`
    authorizer (read transactions allowed)."""
    conn = connect_uri(readable_uri(path)[0])
    try:
        with translate_sqlite_errors():
            conn.execute("PRAGMA query_only = ON")
            conn.set_authorizer(_reads_in_transactions)
    except BaseException:  # Ctrl-C too: no connection is left open to keep the file
        conn.close()
        raise
    return conn


@context_manager
def reading_only(conn: sqlite3.Connection, timeout_ms: int | None = None) -> Iterator[None]:
    """Run the block's statements on ``conn`` (a writer's connection, say) under :func:`reads_only`,
    each a user's read: a refused or failing statement is ``INVALID_ARGUMENT`` (``LEDGER_BUSY``,
    ``STORAGE_ERROR`` and damage keep their codes), and so is one still running after ``timeout_ms``
    milliseconds (None: no limit). Setting an authorizer makes SQLite prepare every statement again,
    so none prepared before escapes it. The connection is given back as it was whatever lands while
    it is set up or given back (a Ctrl-C, a caller's timeout): left with the authorizer, a writer's
    connection refused every later statement as "not authorized"."""
    length_was = conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
    try:
        bound_values(conn)
        conn.set_authorizer(reads_only)
        errors = nullcontext() if timeout_ms is None else _query_errors(
            timeout_ms, _stop_at_deadline(conn, timeout_ms), conn)
        with errors:
            yield
    except SQLITE_ERRORS as exc:
        raise _query_error(exc, conn) from None
    except UnicodeEncodeError as exc:
        raise _not_unicode(exc) from None
    finally:  # each a call into C, each in a `finally` of the one before: an interrupt (which Python
        try:  # raises only as a call starts or a call into C returns) cannot leave one of them out
            conn.set_authorizer(None)
        finally:
            try:
                conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, length_was)
            finally:
                conn.set_progress_handler(None, 10_000)


#: A query of nothing but white space, comments and semicolons: no statement at all. Possessive: a
#: text that does not match is refused in one pass (runs of ``--`` made a backtracking one exponential).
_BLANK_SQL = re.compile(r"(?:\s++|;|--[^\n]*+|/\*(?:[^*]++|\*(?!/))*+(?:\*/|\Z))*+")


#: What a query of several statements is told, wherever it is given (``ledger sql``, ``Case.query``, a served case).
SEVERAL_STATEMENTS = "query refused: it holds more than one statement; a query is one statement: run each on its own"


def several_statements(exc: BaseException) -> bool:
    """Whether ``exc`` is sqlite3's refusal of a query of several statements (its own words, not SQLite's)."""
    return isinstance(exc, sqlite3.ProgrammingError) and str(exc).startswith(
        "You can only execute one statement at a time")


def one_statement(sql: str) -> str:
    """``sql``, a user's query, without the semicolons, white space and comments that end it (see
    :func:`without_final_semicolons`): ``SELECT 1;; -- note`` is one statement, as ``SELECT 1;`` is.
    ``INVALID_ARGUMENT`` for a query that holds no statement (only white space, comments or semicolons),
    which ``Case.query`` answered with no rows."""
    if _BLANK_SQL.fullmatch(sql):
        raise LedgerError(E.INVALID_ARGUMENT, "the query holds no statement (only white space, comments or "
                          "semicolons)", query="refused")
    return without_final_semicolons(sql)


#: A query's text up to the first ``;`` outside its string literals, quoted names and comments (SQLite's
#: lexical rules: ``'…'``, ``"…"``, ``[…]`` and ```…``` end at their closing mark, a doubled one being two
#: such in a row; ``--`` runs to the end of its line, ``/*`` to ``*/`` or the end). Possessive: linear.
_UNTIL_SEMICOLON = re.compile(r"""(?:'[^']*+'|"[^"]*+"|\[[^\]]*+\]|`[^`]*+`"""
                              r"""|--[^\n]*+|/\*(?:[^*]++|\*(?!/))*+(?:\*/|\Z)"""
                              r"""|[^'"\[`;/-]++|/(?!\*)|-(?!-))*+;""")


def without_final_semicolons(sql: str) -> str:
    """``sql`` without what follows its first statement when that is only semicolons, white space and
    comments (``SELECT 1;; -- note``: sqlite3 took what follows the first ``;`` for a second statement),
    then without the semicolons and white space that end it (all of a text of nothing else). The first
    statement ends at its first ``;`` outside literals and comments (:func:`_first_statement_end`)."""
    end = _first_statement_end(sql)
    if end is not None and _BLANK_SQL.fullmatch(sql, end):
        sql = sql[:end]
    return sql.rstrip(" \t\n\r\f;")


def _first_statement_end(sql: str) -> int | None:
    """The index just past the ``;`` ending ``sql``'s first statement (the first outside its literals and
    comments, :data:`_UNTIL_SEMICOLON`, where SQLite's ``sqlite3.complete_statement`` agrees: not one
    inside a trigger's body), or None (no such ``;``, or a text SQLite cannot be given: its refusal
    comes later)."""
    found = _UNTIL_SEMICOLON.match(sql)
    if found is None:
        return None
    try:
        return found.end() if sqlite3.complete_statement(sql[:found.end()]) else None
    except (UnicodeEncodeError, ValueError):  # a lone surrogate, a NUL character
        return None


def _no_rows() -> LedgerError:
    """``INVALID_ARGUMENT`` for a statement that returns no rows."""
    return LedgerError(E.INVALID_ARGUMENT, "the statement returns no rows; only a read that returns rows runs "
                       "here (SELECT, WITH … SELECT, VALUES, or a schema-reading PRAGMA)", query="refused")


def _not_unicode(exc: UnicodeEncodeError) -> LedgerError:
    """``INVALID_ARGUMENT`` for a statement or parameter SQLite cannot be given: text with a lone surrogate."""
    return LedgerError(E.INVALID_ARGUMENT, f"query refused: the statement or a parameter holds text that is not "
                       f"valid Unicode ({exc.reason} at position {exc.start}), which SQLite cannot be given",
                       query="refused")


def _refused(exc: BaseException) -> LedgerError:
    """``INVALID_ARGUMENT`` for a user's statement SQLite refused, saying what a read may not do."""
    refused, _REFUSED.action = getattr(_REFUSED, "action", None), None
    why = ("; a read-only query may not write, change the schema, VACUUM, ATTACH, DETACH or run a PRAGMA but "
           f"the schema-reading ones ({', '.join(sorted(READ_ONLY_PRAGMAS))})"
           if str(exc) in ("not authorized", "authorization denied") or primary_code(exc) == SQLITE_READONLY else "")
    if str(exc) == "not authorized" and refused in _TRANSACTION_CONTROL:
        why = ("; each query runs on its own, in a snapshot of its own: a read-only query may not begin, commit or "
               "roll back a transaction, nor set or release a savepoint")
    if several_statements(exc):
        return LedgerError(E.INVALID_ARGUMENT, SEVERAL_STATEMENTS, query="refused")
    if str(exc).startswith("not authorized to use function"):
        why = "; it answers with an address inside this program, which no read needs"
    if isinstance(exc, sqlite3.Error) and primary_code(exc) == SQLITE_TOOBIG:
        why = (f"; a query may make, or be given as a parameter, no text or blob longer than "
               f"{VALUE_BYTES_MIN // (1024 * 1024)} MiB (or the case file's size, when larger), so that one function "
               "call cannot run long past the time limit")
    if str(exc) == "integer overflow":  # the statement ran: a value it computed passed SQLite's integers
        return LedgerError(E.INVALID_ARGUMENT, "query failed: integer overflow: a value it computed (a SUM, say) "
                           "passed 2**63-1, the largest integer SQLite holds; TOTAL() sums as a floating-point "
                           "number, or CAST the values AS REAL first", query="failed")
    if str(exc).startswith("no such table:"):
        why = ("; the ledger's views are " + ", ".join(PUBLIC_VIEWS) + " (docs/sql.md lists them and its tables; "
               "SELECT name, type FROM sqlite_master lists what this file holds)")
    return LedgerError(E.INVALID_ARGUMENT, f"query refused: {exc}{why}", query="refused")

def readonly_query(path: Path, sql: str, timeout_ms: int = 30_000) -> tuple[list[str], list[tuple]]:
    """Run one statement on a read-only connection; ``(column names, rows)``.

    Anything that is not a single row-returning read fails with
    ``INVALID_ARGUMENT`` (writes, ATTACH, PRAGMA, several statements), and so
    does a query still running after ``timeout_ms``.
    """
    with readonly_rows(path, sql, timeout_ms) as (names, rows):
        return names, list(rows)

@context_manager
def readonly_rows(path: Path, sql: str, timeout_ms: int = 30_000) -> Iterator[tuple[list[str], Iterator[tuple]]]:
    """Like :func:`readonly_query`, but the rows come from the cursor as they are read
    (``with readonly_rows(path, sql) as (names, rows): …``); the connection
    closes when the block ends, leaving no ``-wal``/``-shm`` it made. ``LEDGER_MISSING`` for a file
    that holds no case."""
    log_was_there = log_files_exist(path)
    conn = open_readonly(path)
    try:  # whatever ends the block (a refusal, Ctrl-C), the reader's -wal and -shm go with it
        with translate_sqlite_errors():
            version = recorded_schema_version(conn, "main", path)
        if version == 0:
            raise no_case_in(conn, path)
        if version > schema_version():  # its views may mean what this code does not know: as every command does
            raise LedgerError(E.SCHEMA_VERSION, f"{path} has schema version {version}; this case-ledger knows up to "
                              f"{schema_version()}; upgrade case-ledger", file_version=version,
                              known_version=schema_version())
        bound_values(conn, _stored_bytes(path))
        deadline = _stop_at_deadline(conn, timeout_ms)
        with _query_errors(timeout_ms, deadline, conn):
            with interrupts.deferred():  # imported on first use (about 80 ms at start-up), never cut in two
                import sqlite_utils

            db = sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
            conn.set_authorizer(reads_only)  # the user's statement controls no transaction, as in Case.query
            try:
                cursor = db.execute(one_statement(sql))
            except sqlite3.OperationalError as exc:
                raise _older_views(exc, version) from None
            if cursor.description is None:
                raise _no_rows()
        yield [d[0] for d in cursor.description], _fetch(cursor, timeout_ms, deadline)
    finally:
        close_then_fold((conn,), path, not log_was_there)
