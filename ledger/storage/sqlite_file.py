"""The ledger file itself: its name and path limits, ``file:`` URIs, connecting, read-only
snapshots, and the one translation of ``sqlite3`` errors into ``LedgerError`` (docs/architecture.md).
"""

from __future__ import annotations

import errno
import gc
import os
import re
import sqlite3
import sys
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping
from urllib.parse import quote, unquote_to_bytes

from ..ground import errors as E, interrupts
from ..ground.errors import LedgerError, integrity_error, pass_on_interruption, shortened
from ..ground.descriptors import hold_file, refuse_inherited
from ..ground.interrupts import context_manager
from .side_files import (check_not_cut_short, check_side_files, hot_journal, log_files_exist, log_path, orphaned_logs,
                         wal_is_empty)
from .sqlfiles import (FUNCTION_FAILURES, check_sqlite_version, foreign_schema, migration_record_problem,
                       shipped_objects, statement)

LEDGER_FILE = "ledger.sqlite"
#: An export's manifest and its folder of canonical JSON, beside the ledger in the case package (docs/files.md).
MANIFEST_FILE, ANALYSIS_DIR = "manifest.json", "analysis"
LOCK_SUFFIX = "-lock"
#: WAL size past which a writer runs a passive checkpoint after its commit; also the size a
#: restarted log is truncated back to (``journal_size_limit``).
WAL_RESTART_BYTES = 8 * 1024 * 1024


# --- errors ------------------------------------------------------------------------
#: SQLITE_PERM, SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN (primary result codes).
STORAGE_CODES = frozenset({3, 8, 10, 13, 14})
#: SQLITE_BUSY, SQLITE_LOCKED: another connection holds the file; a retry may succeed.
BUSY_CODES = frozenset({5, 6})
#: SQLITE_CORRUPT, SQLITE_NOTADB: the file itself is damaged.
DAMAGED_CODES = frozenset({11, 26})
SQLITE_READONLY = 8
SQLITE_INTERRUPT = 9
SQLITE_TOOBIG = 18


def run_migration_statement(conn: sqlite3.Connection, sql: str) -> None:
    """Run one statement of a migration (:func:`translate_sqlite_errors`); an exception raised inside a
    function of :func:`~.sqlfiles.migration_functions` while it ran (a Ctrl-C: ``sqlite3`` reports any
    as "user-defined function raised exception") is raised as itself, never as a damaged ledger."""
    FUNCTION_FAILURES.raised.clear()
    try:
        with translate_sqlite_errors():
            conn.execute(sql)
    except LedgerError:
        if FUNCTION_FAILURES.raised:
            raise FUNCTION_FAILURES.raised.pop() from None
        raise


def primary_code(exc: BaseException) -> int | None:
    """SQLite's primary result code of a ``sqlite3`` error (None when the module gives none)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF

@context_manager
def translate_sqlite_errors() -> Iterator[None]:
    """The one place where ``sqlite3`` errors become ``LedgerError`` (:func:`sqlite_error`)."""
    try:
        yield
    except SQLITE_ERRORS as exc:
        translated = sqlite_error(exc)
        if translated is exc:
            raise
        raise translated from None


#: SQLite's "unable to open database file": also what it says when the process has no descriptor left.
SQLITE_CANTOPEN = 14


#: What a refusal says when the process reached its open-file limit.
NO_DESCRIPTOR_LEFT = "this process has no file descriptor left: its open-file limit, 'ulimit -n', is reached"


def out_of_descriptors() -> bool:
    """Whether this process can open no more files (``EMFILE``, ``ENFILE``): what SQLite's
    "unable to open database file" then means (it keeps the errno to itself)."""
    try:
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return oserr.errno in (errno.EMFILE, errno.ENFILE)
    os.close(fd)  # the null device: never a file a connection holds
    return False


#: How a refusal of the file system ends (the write it ended was rolled back); a refusal after the
#: writes committed (the log's checkpoint at close) says otherwise.
NOTHING_WRITTEN = "; nothing was written"

#: What :func:`sqlite_error` translates (a hot path catches these and calls it, without a context manager).
SQLITE_ERRORS = (sqlite3.Error, UnicodeDecodeError, OverflowError)


#: SQLite's message when a user's table or view named like a table-valued function the ledger's SQL
#: calls (``json_each``, ``pragma_index_list``, …) hides that function.
HIDDEN_FUNCTION_RE = re.compile(r"'([^']+)' is not a function")


def sqlite_error(exc: BaseException) -> BaseException:
    """The ``LedgerError`` a ``sqlite3`` error becomes; ``exc`` itself when it stays as it is.

    busy/locked → ``LEDGER_BUSY`` (retryable); the file system refusing the
    file (cannot open, read-only, I/O error, disk full, permission) →
    ``STORAGE_ERROR``; constraint and trigger aborts, corruption and every other
    database error → ``INTEGRITY_ERROR``; a Python int too large to bind → ``INVALID_ARGUMENT``;
    any error once a Ctrl-C arrived (:mod:`ledger.ground.interrupts`) → ``KeyboardInterrupt``.
    """
    if interrupts.pending():  # Ctrl-C inside a callback, which sqlite3 turned into this error
        return KeyboardInterrupt()
    if isinstance(exc, OverflowError):  # a Python int bound to a statement that SQLite cannot hold
        return LedgerError(E.INVALID_ARGUMENT, f"a number does not fit SQLite's 64-bit integers: {exc}; nothing was "
                           "written")
    if isinstance(exc, sqlite3.OperationalError):
        text, primary = str(exc), primary_code(exc)
        # by SQLite's result code: a message may quote a user's table named busy_table
        if primary in BUSY_CODES or (primary is None and ("locked" in text or "busy" in text)):
            return LedgerError(E.LEDGER_BUSY, f"the case is busy: {text} (another connection held it past the wait, "
                               "busy_timeout_ms in the analysis config); retry")
        if primary in STORAGE_CODES:
            why = (NO_DESCRIPTOR_LEFT if primary == SQLITE_CANTOPEN and out_of_descriptors() else
                   "read-only location, missing permission, full disk or a closed case?")
            return LedgerError(E.STORAGE_ERROR, f"the file system refused the ledger: {text} ({why}){NOTHING_WRITTEN}")
        hidden = HIDDEN_FUNCTION_RE.fullmatch(text)
        if hidden:
            return LedgerError(E.INTEGRITY_ERROR, f"SQLite refused: {text}: a table or view named {hidden[1]} in the "
                               f"ledger file hides SQLite's table-valued function {hidden[1]}, which the ledger's "
                               "own views and queries call; rename or drop it (docs/sql.md)", object=hidden[1])
        if text.startswith(_UNDECODABLE[0]):  # the sqlite3 module's, quoting the text (a whole event, say): shortened
            return LedgerError(E.INTEGRITY_ERROR, f"SQLite refused: {shortened(text, 300)} (the ledger file "
                               f"{_UNDECODABLE[1]}: it is damaged; 'ledger verify' names where)")
        if text.startswith(UNDEFINED_BY_THIS_PROGRAM):
            return LedgerError(E.INTEGRITY_ERROR, f"SQLite refused: {text}: {ADDED_OBJECT_UNDEFINED}")
        return LedgerError(E.INTEGRITY_ERROR, f"SQLite refused: {text}")
    if isinstance(exc, sqlite3.ProgrammingError):
        if "closed database" in str(exc):
            return LedgerError(E.INVALID_ARGUMENT, "this case was closed; open it again to use it")
        if "binding" in str(exc).lower() or "parameters" in str(exc):  # Case.query's caller gave wrong params
            return LedgerError(E.INVALID_ARGUMENT, f"query parameters do not fit the statement: {exc}")
        return exc
    if isinstance(exc, sqlite3.DatabaseError):  # IntegrityError (triggers), corrupt files, …
        return LedgerError(E.INTEGRITY_ERROR, f"SQLite refused: {exc}")
    if isinstance(exc, UnicodeDecodeError):  # SQLite's message or a stored text is not UTF-8: a damaged file
        return LedgerError(E.INTEGRITY_ERROR, f"SQLite refused: {not_utf8(exc)}")
    return exc


def passive_checkpoint(conn: sqlite3.Connection, fault: Callable[[], None]) -> None:
    """``wal_checkpoint(PASSIVE)`` after a commit (``fault`` first: a test's hook). The commit stands, so
    the file system's refusal (a full disk) or a busy log is not the operation's failure: the log stays
    larger until a later checkpoint, or the close's, copies it back. Ctrl-C, or a damaged file, is
    raised as at any moment (docs/reliability.md)."""
    try:
        fault()
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    except SQLITE_ERRORS as exc:
        translated = sqlite_error(exc)
        if not isinstance(translated, LedgerError) or translated.code not in (E.STORAGE_ERROR, E.LEDGER_BUSY):
            raise translated from None


#: SQLite's words for a collation or function an index, trigger or view of the file uses that this
#: program does not define (another program's, added to the ledger file): every statement that
#: would use it fails, a read included.
UNDEFINED_BY_THIS_PROGRAM = ("no such collation sequence", "no such function", "unknown function")
ADDED_OBJECT_UNDEFINED = ("an index, trigger or view added to the ledger file uses a collation or function this "
                          "program does not define; 'ledger verify' names it, and dropping it lets the ledger work")

#: Said of text the sqlite3 module cannot read: its own message (``OperationalError``), and ours.
_UNDECODABLE = ("Could not decode to UTF-8", "holds bytes that are not UTF-8 where text belongs")


def not_utf8(exc: UnicodeDecodeError) -> str:
    """What a ``UnicodeDecodeError`` from the sqlite3 module means: bytes of the file (a schema
    statement, a text value, or SQLite's message quoting them) are not UTF-8."""
    return (f"the ledger file {_UNDECODABLE[1]} ({exc.reason} at position "
            f"{exc.start} of that text: the file is damaged)")


def undecodable_text(conn: sqlite3.Connection, schema: str = "main") -> LedgerError | None:
    """``INTEGRITY_ERROR`` naming the text of the ledger (``schema``: ``main``, or ``orig``, the one
    verify checks) that is not UTF-8, which the sqlite3 module refuses to read: of the rows holding
    such text in the ledger's own tables, the one of the lowest ``seq`` (a table without one,
    ``schema_migrations``, by its table alone); None when every text reads (or the search itself
    cannot read the file)."""
    try:
        return find_undecodable_text(conn, schema)
    except (sqlite3.Error, UnicodeDecodeError):
        return None


def find_undecodable_text(conn: sqlite3.Connection, schema: str = "main") -> LedgerError | None:
    """:func:`undecodable_text`, but a search that cannot read the file raises what it met
    (``sqlite3.Error``, ``UnicodeDecodeError``): None means every text of the ledger reads."""
    found: list[tuple[int, str, str, UnicodeDecodeError]] = []
    for table in sorted(name for kind, name in shipped_objects() if kind == "table"):
        names = [row[1] for row in conn.execute(statement("table_columns", schema, table=table))]
        key = "seq" if "seq" in names else "rowid"
        for column in names:
            hit = _first_undecodable(conn, schema, table, column, key)
            if hit is not None:
                found.append((hit[0] if key == "seq" else -1, table, column, hit[1]))
    if not found:
        return _undecodable_schema(conn, schema)
    seq, table, column, exc = min(found, key=lambda hit: (hit[0] < 0, hit[0]))
    return integrity_error(seq if seq >= 0 else None, f"{table}.{column} {_UNDECODABLE[1]} ({exc.reason} at byte "
                           f"{exc.start}): the file is damaged", table=table, column=column)


def _undecodable_schema(conn: sqlite3.Connection, schema: str) -> LedgerError | None:
    """``INTEGRITY_ERROR`` naming the first schema object whose name or statement is not UTF-8."""
    for kind, name, sql in conn.execute(statement("schema_text_bytes", schema)):
        for part, data in (("name", name), ("statement", sql)):
            try:
                (data or b"").decode("utf-8")
            except UnicodeDecodeError as exc:
                shown = (name or b"").decode("utf-8", "replace")
                return integrity_error(None, f"the {part} of {kind} {shown!r} in the file's schema {_UNDECODABLE[1]} "
                                       f"({exc.reason} at byte {exc.start}): the file is damaged", object=shown)
    return None


def _first_undecodable(conn: sqlite3.Connection, schema: str, table: str, column: str,
                       key: str) -> tuple[int, UnicodeDecodeError] | None:
    quoted = '"' + column.replace('"', '""') + '"'
    for row_key, data in conn.execute(statement("text_bytes", schema, table=table, column=quoted, key=key)):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return row_key, exc
    return None


def undecodable(error: BaseException) -> bool:
    """Whether ``error`` (as the sqlite3 module raised it, or translated) is text of the ledger file the
    sqlite3 module could not read as UTF-8, which it says with no type or code of its own: verify and
    export then look for the row holding it."""
    if isinstance(error, LedgerError):
        return error.code == E.INTEGRITY_ERROR and any(phrase in error.message for phrase in _UNDECODABLE)
    return isinstance(error, UnicodeDecodeError) or (
        isinstance(error, sqlite3.OperationalError) and str(error).startswith(_UNDECODABLE[0]))


@dataclass(frozen=True)
class EventRow:
    """One row of ``events``: the chain columns storage checks, and the canonical ``body`` bytes.

    Storage does not read ``body``; the caller computed every column from it.
    """

    seq: int
    type: str
    revision: int
    stream: str
    stream_seq: int
    created_at: str
    sha256: str
    parent_sha256: str
    operation_key: str | None
    request_sha256: str | None
    body: bytes


#: One helper row: the name of an ``insert_*`` statement of ``sql/queries.sql`` and its parameters.
HelperRow = tuple[str, Mapping[str, Any]]


def file_uri(path: Path, mode: str) -> str:
    """A SQLite ``file:`` URI for ``path`` (any bytes, percent-encoded) opened in ``mode``. A path
    starting with two slashes (``//tmp/case``, which POSIX keeps) is given one: after ``file:`` they
    would start an authority (a host) that SQLite refuses."""
    absolute = os.fsencode(os.path.abspath(path))
    if absolute.startswith(b"//"):
        absolute = b"/" + absolute.lstrip(b"/")
    return f"file:{quote(absolute)}?mode={mode}"


#: SQLite's unix VFS opens file names of at most 512 bytes; the rollback journal it may open beside
#: the ledger (``-journal``: 8 more bytes, the longest of its files' names) must fit too.
SQLITE_MAX_PATH_BYTES = 512 - len("-journal")


def no_case_yet(ledger: Path | str, **details: Any) -> LedgerError:
    """The ``LEDGER_MISSING`` error for a ledger file that is there but holds no case yet: its
    schema or its case row is not written (``ledger init`` still running, or interrupted); beside a
    ``manifest.json`` (an exported case), a ledger copied without the ``-wal`` that held its writes."""
    if os.path.exists(os.path.join(os.path.dirname(os.fspath(ledger)), MANIFEST_FILE)):
        return LedgerError(E.LEDGER_MISSING, f"{ledger} holds no case, but the manifest.json beside it names an "
                           f"exported one: the ledger was copied without its {LEDGER_FILE}-wal (which held its "
                           "writes), or replaced; put that log back beside it, or 'ledger import' the export into "
                           "a new folder", **details)
    return LedgerError(E.LEDGER_MISSING, f"{ledger} holds no case (an init still running, or one "
                       "interrupted: then run init again)", **details)


def no_case_in(conn: sqlite3.Connection, ledger: Path | str, schema: str = "main", **details: Any) -> LedgerError:
    """What a ledger file without its ``schema_migrations`` table or case row is: :func:`no_case_yet`,
    or ``INTEGRITY_ERROR`` when it holds tables a migration makes that its rows do not account for
    (the table dropped or rows deleted outside case-ledger, not an init still running)."""
    try:
        with translate_sqlite_errors():
            problem, foreign = migration_record_problem(conn, schema), foreign_schema(conn, schema)
    except LedgerError as exc:
        return exc
    if foreign:
        return no_case_in_another_program(ledger, foreign, **details)
    return migrations_edited(ledger, problem, **details) if problem else no_case_yet(ledger, **details)


def another_programs(objects: list[str]) -> str:
    """The first objects of another program's database, as a refusal names them."""
    return ", ".join(objects[:3]) + (f" and {len(objects) - 3} more" if len(objects) > 3 else "")


def refuse_another_programs(path: Path, creating: bool) -> None:
    """When ``path`` is another program's database (:func:`~ledger.storage.sqlfiles.foreign_schema`),
    looked at through a read-only connection, which leaves it and its ``-wal`` as they are (a
    writer's, closing, copies the log into the file): ``INVALID_ARGUMENT`` when a new case is to be
    made in it (``creating``: no case is written into it), else ``LEDGER_MISSING``. Nothing for a
    file that is not there or empty."""
    try:
        if os.path.getsize(path) == 0:
            return
    except OSError as oserr:
        pass_on_interruption(oserr)
        return  # opening it says why
    try:
        conn = connect_path(path, "ro")  # its checks first: a log that is no log is never opened
        try:
            with translate_sqlite_errors():
                foreign = foreign_schema(conn)
        finally:
            conn.close()
    except LedgerError:
        return  # unreadable so (a log without its index on a read-only location, a file cut short): opening it says why
    if foreign and creating:
        raise LedgerError(E.INVALID_ARGUMENT, f"{path} is an SQLite database of another program "
                          f"({another_programs(foreign)}): no case is written into it; move it away or choose "
                          "another folder")
    if foreign:
        raise no_case_in_another_program(path, foreign)


def no_case_in_another_program(ledger: Path | str, foreign: list[str], **details: Any) -> LedgerError:
    """The ``LEDGER_MISSING`` error for another program's database where a ledger belongs."""
    return LedgerError(E.LEDGER_MISSING, f"{ledger} is an SQLite database of another program "
                       f"({another_programs(foreign)}), not a case ledger: give the folder of a case, or move "
                       "that file away before 'ledger init'", **details)


def migrations_edited(ledger: Path | str, problem: str, **details: Any) -> LedgerError:
    """The ``INTEGRITY_ERROR`` for a ledger whose ``schema_migrations`` records disagree with its
    schema (``problem``: :func:`~ledger.storage.sqlfiles.migration_record_problem`'s words)."""
    return LedgerError(E.INTEGRITY_ERROR, f"{ledger}: {problem}; the file was edited outside case-ledger", **details)


def check_ledger_path(path: Path) -> None:
    """``INVALID_ARGUMENT`` when SQLite could not open ``path`` (or its ``-wal``) by name (``SQLITE_UNSUPPORTED``: too old)."""
    check_sqlite_version()
    length = len(os.fsencode(os.path.abspath(path)))
    if length > SQLITE_MAX_PATH_BYTES:
        raise LedgerError(E.INVALID_ARGUMENT,
                          f"{path}: the ledger's absolute path is {length} bytes; SQLite opens at most "
                          f"{SQLITE_MAX_PATH_BYTES} (move the case to a shorter path)")


#: With ``isolation_level=None``: the sqlite3 module never opens transactions behind our back.
#: Python 3.12+ also has ``autocommit``, whose default is to change in a future version; pin the
#: mode ``isolation_level`` governs (on 3.11 there is no such argument, and no other mode).
TRANSACTION_CONTROL: dict[str, Any] = (
    {"autocommit": sqlite3.LEGACY_TRANSACTION_CONTROL} if hasattr(sqlite3, "LEGACY_TRANSACTION_CONTROL") else {})


class ClosingConnection(sqlite3.Connection):
    """A connection that, closed while an exception is on its way (Ctrl-C in the middle of a read, a
    refusal raised inside a loop over rows), first closes the cursors still open on it. SQLite keeps a
    connection closed with a statement unfinished open until that statement goes; the cursor a frame
    of that exception still holds kept the file open past ``close()``, and the ``-wal`` and ``-shm``
    the last connection's close folds and removes stayed beside the ledger (docs/files.md). The
    cursors are found as what refers to the connection: a scan of the process's objects (a few
    milliseconds), made only then, or at every close where :attr:`closes_every_cursor` says so."""

    #: Whether every close looks for open cursors (not only one while an exception is on its way).
    closes_every_cursor = False
    #: What lets go of each file this connection holds (:meth:`hold`).
    _let_go: tuple[Any, ...] = ()

    def hold(self, path: str | os.PathLike[str]) -> None:
        """Hold the file ``path`` (its own, or one it attaches) for as long as this connection is open
        (or alive), so that no descriptor the ledger closes drops its locks
        (:mod:`ledger.ground.descriptors`). Called before the connection reads it."""
        self._let_go = (*self._let_go, weakref.finalize(self, hold_file(path)))

    def close(self) -> None:
        try:
            if self.closes_every_cursor or sys.exc_info()[1] is not None:
                for holder in gc.get_referrers(self):
                    if isinstance(holder, sqlite3.Cursor):
                        try:
                            holder.close()
                        except sqlite3.Error:  # in use by another thread: close() still closes what it can
                            pass
            super().close()
        finally:
            for let_go in self._let_go:
                let_go()


def connect_uri(uri: str) -> sqlite3.Connection:
    """A connection to ``uri`` (autocommit; transactions begun explicitly) that closes its cursors
    when closed and holds its file while open (:class:`ClosingConnection`)."""
    if uri.startswith("file:"):
        refuse_inherited(uri_path(uri))  # a forked child could take no lock on its parent's ledger
    with translate_sqlite_errors():
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                               factory=ClosingConnection, **TRANSACTION_CONTROL)
    if uri.startswith("file:"):
        conn.hold(uri_path(uri))
    return conn


def uri_path(uri: str) -> str:
    """The file a ``file:`` URI (:func:`file_uri`) names."""
    return os.fsdecode(unquote_to_bytes(uri[len("file:"):].split("?", 1)[0]))


def connect_path(path: Path, mode: str) -> sqlite3.Connection:
    """A connection to the ledger file ``path`` in ``mode`` (``ro``, ``rw``, ``rwc``); ``LEDGER_MISSING``
    (and nothing opened) when ``path`` is empty but a log beside it holds a ledger's writes
    (:func:`orphaned_logs`), which SQLite would delete."""
    check_ledger_path(path)
    check_side_files(path)
    check_not_cut_short(path)
    logs = orphaned_logs(path)
    if logs:
        raise LedgerError(E.LEDGER_MISSING, f"{path} is empty but {' and '.join(logs)} beside it "
                          f"{'holds' if len(logs) == 1 else 'hold'} a ledger's writes: the ledger file was emptied or "
                          "replaced; put it back (or 'ledger import' the case's export to a new folder), and keep "
                          "the log: opening the empty file would delete it")
    return connect_uri(file_uri(path, mode))


def release_log(path: Path) -> None:
    """After a read-only connection (verify's, ``ledger sql``'s) that made ``-wal`` and ``-shm``: open and
    close one read-write connection on ``path``, so that SQLite, closing the last connection, folds the
    log into the file and removes both (docs/files.md). With another connection still open they are
    left to it; a ledger that cannot be opened for writing keeps them (nothing is reported). Without
    either there is nothing to fold and nothing is opened (a writer's open would roll back a hot
    rollback journal, which a refused reader must leave as it found it)."""
    if not log_files_exist(path):
        return
    try:
        conn = connect_path(path, "rw")
    except LedgerError:
        return
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except SQLITE_ERRORS:  # a damaged schema's text too: best effort, never in place of a refusal under way
        pass
    finally:
        conn.close()


def close_then_fold(closables: Iterable[Any], path: Path, fold: bool) -> None:
    """Close each of ``closables`` (connections, or what holds one open; None is skipped), in order,
    then, when ``fold``, :func:`release_log` ``path``. A Ctrl-C or SIGTERM meanwhile takes effect once
    it is done: cut in two, the reader's ``-wal`` and ``-shm`` stayed beside the ledger."""
    with interrupts.deferred():
        for closable in closables:
            if closable is not None:
                closable.close()
        if fold:
            release_log(path)


def open_snapshot(path: Path) -> sqlite3.Connection:
    """A read-only connection to the ledger ``path`` inside one read transaction, so that every read sees
    the same snapshot (verify's second look at a ledger a writer may have moved on); close it when done."""
    conn = connect_uri(readable_uri(path)[0])
    try:
        with translate_sqlite_errors():
            conn.execute("BEGIN")
    except BaseException:
        conn.close()
        raise
    return conn


def probe_file(conn: sqlite3.Connection) -> None:
    """One read, so that a file SQLite cannot open or map fails here (``STORAGE_ERROR``)."""
    with translate_sqlite_errors():
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()


def _on_read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False


def immutable_snapshot(path: Path) -> bool:
    """True for a ledger file on a read-only mount with no ``-wal`` content: read it with
    ``immutable=1`` whatever ``-shm`` or lock files lie beside it (nothing is written there)."""
    return _on_read_only_mount(path) and path.is_file() and wal_is_empty(path)


def file_identity(path: Path) -> tuple[int, int, int, int]:
    """``(inode, size, mtime_ns, ctime_ns)``: changes whenever the file is written."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def readable_uri(path: Path) -> tuple[str, bool]:
    """``(uri, immutable)`` to read ``path``: ``mode=ro``, or an immutable snapshot on a
    read-only location.

    A WAL ledger needs its ``-shm`` file even to read. On a file system mounted
    read-only, with no ``-wal`` content left, nobody writes the file through this
    mount, so it is read with ``immutable=1`` (whatever ``-shm`` or lock files an earlier
    read left there). A folder this user merely may not write is read like any
    other while its ``-shm`` file exists (SQLite maps it read-only); without one it
    is ``STORAGE_ERROR``, never an immutable read: its owner may be writing, and an
    immutable read of a changing file would look like tampering.
    """
    uri = file_uri(path, "ro")
    journal = hot_journal(path)
    if journal == "transaction":
        raise LedgerError(E.STORAGE_ERROR, f"cannot read {path}: {path.name}-journal beside it holds a transaction "
                          "cut short (a writer stopped mid-way), which SQLite must roll back before the file can be "
                          "read; run a command that writes the case once (such as 'ledger export') where this user "
                          "may write its folder, then this one again (if a writer is at work on it now, wait for it)")
    if journal == "unreadable":
        raise LedgerError(E.STORAGE_ERROR, f"cannot read {path}: {path.name}-journal beside it is not a regular file "
                          "(a folder, a pipe) or is one this user may not read, and SQLite must read a rollback "
                          "journal there before it reads the ledger; move it aside (or let this user read it), then "
                          "run this again")
    if journal == "unknown":
        raise LedgerError(E.STORAGE_ERROR, f"cannot read {path}: {path.name}-journal beside it does not start as a "
                          "journal SQLite wrote (damaged, or another file of that name), and SQLite will not read the "
                          "ledger past it; a command that writes the case (such as 'ledger export') deletes it, as "
                          "SQLite does with such a journal, restoring nothing from it: move it aside first to keep it, "
                          "then run 'ledger verify'")
    if immutable_snapshot(path):
        check_not_cut_short(path)
        return uri + "&immutable=1", True
    probe = connect_path(path, "ro")
    try:
        probe_file(probe)
        return uri, False
    except LedgerError as exc:
        if exc.code == E.STORAGE_ERROR and out_of_descriptors():  # no -shm or folder at fault: the process's limit
            raise LedgerError(E.STORAGE_ERROR, f"cannot read {path}: {NO_DESCRIPTOR_LEFT}") from None
        if exc.code == E.STORAGE_ERROR and path.is_file() and not wal_is_empty(path) \
                and not os.path.exists(log_path(path, "-shm")) and not os.access(path.parent, os.W_OK):
            raise LedgerError(E.STORAGE_ERROR, f"cannot read {path}: {path.name}-wal beside it holds writes not yet "
                              f"folded into it, and SQLite needs {path.name}-shm beside them to read them, which it "
                              "cannot make where this user may not write (a read-only mount, say); open the case "
                              "once where it can be written (any ledger command folds the log in), then copy it "
                              "here, or copy the -shm with it") from None
        if exc.code != E.STORAGE_ERROR or not path.is_file() or not wal_is_empty(path):
            raise
        if os.access(path.parent, os.W_OK) and not _on_read_only_mount(path):  # no permission at fault
            said = re.match(r"the file system refused the ledger: (.*?) \(", exc.message)
            raise LedgerError(E.STORAGE_ERROR, f"cannot read {path}: SQLite could not create {path.name}-shm beside "
                              f"it, in a folder this user may write (SQLite: {said[1] if said else exc.message}): a "
                              "file-size limit ('ulimit -f') or a full disk?") from None
        if not _on_read_only_mount(path):
            raise LedgerError(E.STORAGE_ERROR, f"cannot read {path}: SQLite needs to create {path.name}-shm beside "
                              "it and this user may not write that folder; let this user write the folder "
                              f"(chmod u+w {path.parent}, as its owner), or copy the case somewhere this user may "
                              "write and make the copy writable (cp keeps the read-only modes)") from None
        return uri + "&immutable=1", True
    finally:
        probe.close()
