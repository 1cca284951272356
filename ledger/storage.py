"""``ledger.sqlite``: connection, fair writer lock, transactions, migrations, the hash chain.

SPEC section 3. One :class:`Storage` wraps one ``sqlite3`` connection opened with
``isolation_level=None`` (we issue every ``BEGIN`` ourselves). Each mutation is
exactly one ``BEGIN IMMEDIATE … COMMIT`` inside :meth:`Storage.write`, which first
takes a blocking OS lock on the sidecar file ``ledger.sqlite-lock`` so that writers
queue in the kernel instead of polling SQLite's busy handler (which can starve a
writer past its timeout). ``sqlite3`` errors are translated to ``LedgerError`` in
exactly one place, :func:`translate_sqlite_errors`.

Storage is the ground floor of the library: it stores opaque canonical event
bytes with the columns and helper rows its caller computed, and knows no event
type, rule or configuration.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import quote

import sqlite_utils

from . import errors as E
from ._sql import migrations, queries, schema_object, schema_version, statement
from .canonical import ZERO_SHA256
from .clock import utc_now
from .errors import LedgerError
from ._lock import WriterLock
from .paths import os_error

LEDGER_FILE = "ledger.sqlite"
LOCK_SUFFIX = "-lock"
#: WAL size past which a writer restarts the log after its commit, and how long it waits for readers.
#: ``synchronous`` and ``busy_timeout_ms`` when the caller gives none (the analysis config's ``[storage]``).
STORAGE_DEFAULTS: Mapping[str, Any] = {"synchronous": "FULL", "busy_timeout_ms": 5000}
WAL_RESTART_BYTES = 8 * 1024 * 1024
WAL_RESTART_WAIT_MS = 200


# --- errors ------------------------------------------------------------------------
#: SQLITE_PERM, SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN (primary result codes).
_STORAGE_CODES = frozenset({3, 8, 10, 13, 14})

@contextmanager
def _query_errors(timeout_ms: int) -> Iterator[None]:
    """A user's query failing (or stopped at its deadline) becomes ``INVALID_ARGUMENT``."""
    try:
        yield
    except (sqlite3.Error, ValueError, OverflowError) as exc:
        if "interrupted" in str(exc):
            raise LedgerError(E.INVALID_ARGUMENT, f"query stopped after {timeout_ms} ms") from None
        raise LedgerError(E.INVALID_ARGUMENT, f"query refused: {exc}") from None


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


@contextmanager
def translate_sqlite_errors() -> Iterator[None]:
    """The one place where ``sqlite3`` errors become ``LedgerError``.

    busy/locked → ``LEDGER_BUSY`` (retryable); the file system refusing the
    file (cannot open, read-only, I/O error, disk full, permission) →
    ``STORAGE_ERROR``; constraint and trigger aborts, corruption and every other
    database error → ``INTEGRITY_ERROR``.
    """
    try:
        yield
    except sqlite3.OperationalError as exc:
        text = str(exc)
        if "locked" in text or "busy" in text:
            raise LedgerError(E.LEDGER_BUSY, f"the case is busy: {text}; retry") from None
        primary = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        if primary in _STORAGE_CODES:
            raise LedgerError(E.STORAGE_ERROR, f"the file system refused the ledger: {text} "
                              "(read-only location, missing permission, full disk or a closed case?); "
                              "nothing was written") from None
        raise LedgerError(E.INTEGRITY_ERROR, f"SQLite refused: {text}") from None
    except sqlite3.ProgrammingError as exc:
        if "closed database" in str(exc):
            raise LedgerError(E.INVALID_ARGUMENT, "this case was closed; open it again to use it") from None
        raise
    except sqlite3.DatabaseError as exc:  # IntegrityError (triggers), corrupt files, …
        raise LedgerError(E.INTEGRITY_ERROR, f"SQLite refused: {exc}") from None


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
    """A SQLite ``file:`` URI for ``path`` (any bytes, percent-encoded) opened in ``mode``."""
    return f"file:{quote(os.fsencode(os.path.abspath(path)))}?mode={mode}"


#: SQLite's unix VFS refuses file names of 512 bytes or more; ``-wal``/``-shm`` add 4.
SQLITE_MAX_PATH_BYTES = 512 - len("-wal") - 1


def check_ledger_path(path: Path) -> None:
    """``INVALID_ARGUMENT`` when SQLite could not open ``path`` (or its ``-wal``) by name."""
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


def _connect_uri(uri: str) -> sqlite3.Connection:
    with translate_sqlite_errors():
        return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, **TRANSACTION_CONTROL)


def _connect(path: Path, mode: str) -> sqlite3.Connection:
    check_ledger_path(path)
    return _connect_uri(file_uri(path, mode))


def _probe(conn: sqlite3.Connection) -> None:
    """One read, so that a file SQLite cannot open or map fails here (``STORAGE_ERROR``)."""
    with translate_sqlite_errors():
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()


def _wal_is_empty(path: Path) -> bool:
    wal = path.with_name(path.name + "-wal")
    try:
        return wal.stat().st_size == 0
    except FileNotFoundError:
        return True


def _on_read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def file_identity(path: Path) -> tuple[int, int, int, int]:
    """``(inode, size, mtime_ns, ctime_ns)``: changes whenever the file is written."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def readable_uri(path: Path) -> tuple[str, bool]:
    """``(uri, immutable)`` to read ``path``: ``mode=ro``, or an immutable snapshot on a
    read-only location.

    A WAL ledger needs its ``-shm`` file even to read. On a file system mounted
    read-only, with no ``-wal`` content left, nobody writes the file through this
    mount, so it is read with ``immutable=1``. A folder this user merely may not
    write is not enough: its owner may be writing, and an immutable read of a
    changing file would look like tampering; that, and anything else that stops
    the read, is ``STORAGE_ERROR``.
    """
    uri = file_uri(path, "ro")
    probe = _connect(path, "ro")
    try:
        _probe(probe)
        return uri, False
    except LedgerError as exc:
        if exc.code != E.STORAGE_ERROR or not path.is_file() or not _wal_is_empty(path):
            raise
        if not _on_read_only_mount(path):
            raise LedgerError(E.STORAGE_ERROR, f"cannot read {path}: SQLite needs to create {path.name}-shm beside "
                              "it and this user may not write that folder; read it as its owner, or copy the "
                              "case") from None
        return uri + "&immutable=1", True
    finally:
        probe.close()


class Storage:
    """One connection to a ``ledger.sqlite`` and everything that writes it.

    ``settings`` are the analysis config's ``storage`` (``synchronous``,
    ``busy_timeout_ms``). Not thread-safe: the session that owns it refuses
    calls from other threads.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path,
                 settings: Mapping[str, Any] | None = None) -> None:
        self.conn = conn
        self.path = path
        self.settings = {**STORAGE_DEFAULTS, **(settings or {})}
        # beside the real file: writers reaching one ledger through different symlinks share one queue
        real = Path(os.path.realpath(path))
        self._lock = WriterLock(real.with_name(real.name + LOCK_SUFFIX))
        self._in_write = False
        self._in_batch = False
        #: Opened as an immutable snapshot on a read-only location (:meth:`open`).
        self.read_only = False
        #: verify only: the ATTACHed original is read as an immutable snapshot.
        self.read_only_source = False
        #: Test hook: called with a label before every write statement and the COMMIT.
        self.fault_hook: Callable[[str], None] | None = None
        with translate_sqlite_errors():
            self.conn.execute("PRAGMA foreign_keys = ON")
            self.conn.execute(f"PRAGMA busy_timeout = {int(self.settings['busy_timeout_ms'])}")
            self.conn.execute(f"PRAGMA synchronous = {self.settings['synchronous']}")

    # -- opening ----------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, settings: Mapping[str, Any] | None = None) -> "Storage":
        """Open (creating if needed) a ledger file whose schema the caller applies.

        The caller runs :meth:`apply_migrations` and its first append in one
        :meth:`write`, so an interrupted ``init`` leaves no half-made case.
        """
        conn = _connect(path, "rwc")
        with translate_sqlite_errors():
            conn.execute("PRAGMA journal_mode = WAL").fetchall()
        return cls(conn, path, settings)

    @classmethod
    def open(cls, path: Path, settings: Mapping[str, Any] | None = None) -> "Storage":
        """Open an existing ledger; refuses a newer schema with ``SCHEMA_VERSION``.

        On a read-only location the ledger opens as an immutable snapshot
        (:func:`readable_uri`): reads work, writes are ``STORAGE_ERROR``.
        """
        conn = _connect(path, "rw")
        try:
            _probe(conn)
        except LedgerError as exc:
            conn.close()
            if exc.code != E.STORAGE_ERROR:
                raise
            uri, immutable = readable_uri(path)
            if not immutable:
                raise
            conn = _connect_uri(uri)
            storage = cls(conn, path, settings)
            storage.read_only = True
            try:
                if storage.check_schema_version() < schema_version():
                    raise LedgerError(E.STORAGE_ERROR, f"{path} needs a schema upgrade but its location is read-only")
            except BaseException:
                conn.close()
                raise
            return storage
        storage = cls(conn, path, settings)
        try:
            # a file without our schema (an interrupted init, or not a ledger) is left untouched
            if storage.check_schema_version() > 0:
                with translate_sqlite_errors():
                    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                        conn.execute("PRAGMA journal_mode = WAL").fetchall()
            storage.migrate()
        except BaseException:
            conn.close()
            raise
        return storage

    @classmethod
    def scratch(cls, path: Path, original: Path) -> "Storage":
        """A private, unguarded ledger at ``path`` with ``original`` attached read-only as ``orig``,
        inside one long transaction that :meth:`append` writes into directly.

        Being one transaction, every read of ``orig`` sees the same snapshot even
        if a writer appends meanwhile; no writer lock is taken (nobody else knows
        the file) and no durability is asked for. ``read_only_source`` says
        whether ``orig`` is read as an immutable snapshot. Close ``conn`` when done.
        """
        conn = sqlite3.connect(file_uri(path, "rwc"), uri=True, isolation_level=None, check_same_thread=False,
                               **TRANSACTION_CONTROL)
        with translate_sqlite_errors():
            conn.execute("PRAGMA journal_mode = OFF")  # no durability needed for a scratch copy
            source, immutable = readable_uri(original)
            conn.execute("ATTACH DATABASE ? AS orig", (source,))
        storage = cls(conn, path, {"synchronous": "OFF", "busy_timeout_ms": 5000})
        storage.read_only_source = immutable
        with translate_sqlite_errors():
            conn.execute("BEGIN")
        storage._in_write = True  # one long private transaction
        with translate_sqlite_errors():
            has = conn.execute(statement("has_migrations_table", "orig")).fetchone()
            original_version = conn.execute(statement("schema_version_of", "orig")).fetchone()[0] if has else 0
        # private and rebuilt from scratch: no guards needed; the original's schema version, so an
        # older ledger's views are compared with the views of its own version
        storage.apply_migrations(triggers=False, up_to=original_version or None)
        return storage

    @classmethod
    def open_readonly(cls, path: Path) -> sqlite3.Connection:
        """A connection that cannot write: ``mode=ro`` plus an authorizer denying ATTACH and writes.

        Of the pragmas only the schema-reading ones of :data:`READ_ONLY_PRAGMAS` are allowed
        (as ``SELECT * FROM pragma_table_info('events')`` or ``PRAGMA table_info(events)``).
        """
        conn = _connect_uri(readable_uri(path)[0])
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

    @classmethod
    def readonly_query(cls, path: Path, sql: str, timeout_ms: int = 30_000) -> tuple[list[str], list[tuple]]:
        """Run one statement on a read-only connection; ``(column names, rows)``.

        Anything that is not a single row-returning read fails with
        ``INVALID_ARGUMENT`` (writes, ATTACH, PRAGMA, several statements), and so
        does a query still running after ``timeout_ms``.
        """
        with cls.readonly_rows(path, sql, timeout_ms) as (names, rows):
            return names, list(rows)

    @classmethod
    @contextmanager
    def readonly_rows(cls, path: Path, sql: str, timeout_ms: int = 30_000) -> Iterator[tuple[list[str], Iterator[tuple]]]:
        """Like :meth:`readonly_query`, but the rows come from the cursor as they are read
        (``with Storage.readonly_rows(path, sql) as (names, rows): …``); the connection
        closes when the block ends."""
        conn = cls.open_readonly(path)
        deadline = time.monotonic() + timeout_ms / 1000
        conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
        try:
            with _query_errors(timeout_ms):
                db = sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
                cursor = db.execute(sql)
                if cursor.description is None:
                    raise LedgerError(E.INVALID_ARGUMENT, "the statement returns no rows; only reads are allowed")
            yield [d[0] for d in cursor.description], _fetch(cursor, timeout_ms)
        finally:
            conn.close()

    def current_schema_version(self) -> int:
        """Version recorded in ``schema_migrations`` (0 for a file with no schema yet)."""
        with translate_sqlite_errors():
            exists = self.conn.execute(statement("has_migrations_table")).fetchone()
        return self.one("schema_version")[0] if exists else 0

    def migrate(self) -> None:
        """Bring an existing ledger up to :func:`schema_version` (``SCHEMA_VERSION`` if newer).

        A file with no schema at all (an ``init`` interrupted before its commit) is
        left alone: :meth:`ledger.case.Case.create` finishes it.
        """
        current = self.check_schema_version()
        if 0 < current < schema_version():
            with self.write():
                self.apply_migrations()

    def check_schema_version(self) -> int:
        """The file's schema version; ``SCHEMA_VERSION`` if it is newer than this code."""
        known = schema_version()
        current = self.current_schema_version()
        if current > known:
            raise LedgerError(
                E.SCHEMA_VERSION,
                f"{self.path} has schema version {current}; this case-ledger knows up to {known}; upgrade case-ledger",
                file_version=current, known_version=known,
            )
        return current

    def apply_migrations(self, *, triggers: bool = True, up_to: int | None = None) -> None:
        """Run the missing ``sql/NNN_*.sql`` statements (up to version ``up_to``, default all).
        Call inside :meth:`write`.

        ``triggers=False`` builds an unguarded copy (verify's private scratch ledger).
        """
        current = self.current_schema_version()
        for version, name, statements in migrations():
            if version <= current or (up_to is not None and version > up_to):
                continue
            for sql in statements:
                if not triggers and schema_object(sql)[0] == "trigger":
                    continue
                self._fault(f"migration {version}")
                with translate_sqlite_errors():
                    self.conn.execute(sql)
            self.execute("insert_migration", version=version, name=name, applied_at=utc_now())

    def close(self) -> None:
        """Checkpoint the WAL into the main file (``wal_checkpoint(TRUNCATE)``) and close."""
        try:
            with translate_sqlite_errors():
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                # a reader elsewhere holding a snapshot would make TRUNCATE wait the whole
                # busy timeout and still fail; wait briefly, and leave the WAL to a later close
                self.conn.execute(f"PRAGMA busy_timeout = {min(100, int(self.settings['busy_timeout_ms']))}")
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except LedgerError:
            pass  # a busy reader elsewhere keeps the WAL; closing must still succeed
        finally:
            self.conn.close()

    # -- transactions ---------------------------------------------------------------
    @contextmanager
    def write(self) -> Iterator["Storage"]:
        """One ``BEGIN IMMEDIATE … COMMIT``; any exception (``KeyboardInterrupt`` too) rolls back.

        Inside :meth:`batch` it is a ``SAVEPOINT`` instead, so a refused operation
        rolls back alone. Raises ``LEDGER_BUSY`` when the writer lock is not
        obtained within ``busy_timeout_ms``; the connection stays usable after
        every failure.
        """
        if self._in_batch:
            with self._savepoint():
                yield self
            return
        if self._in_write:
            raise RuntimeError("Storage.write() does not nest outside a batch")
        if self.read_only:
            raise LedgerError(E.STORAGE_ERROR, f"{self.path} is on a read-only location: reads work, writes cannot")
        try:
            fd = self._lock.acquire(int(self.settings["busy_timeout_ms"]))
        except OSError as exc:
            raise os_error(exc, f"cannot take the writer lock of {self.path}") from None
        self._in_write = True
        try:
            with translate_sqlite_errors():
                if self.conn.in_transaction:  # left over from an interrupted rollback
                    self.conn.execute("ROLLBACK")
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self
                    self._fault("COMMIT")
                    self.conn.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
                self._bound_wal()
        finally:
            self._in_write = False
            WriterLock.release(fd)

    def _bound_wal(self) -> None:
        """Keep the WAL bounded while readers keep coming: past ``WAL_RESTART_BYTES`` run a
        ``wal_checkpoint(RESTART)``, which waits (briefly) for the current readers to move
        off the log so it can start over instead of growing."""
        try:
            size = os.stat(str(self.path) + "-wal").st_size
        except OSError:
            return
        if size <= WAL_RESTART_BYTES:
            return
        self.conn.execute(f"PRAGMA busy_timeout = {WAL_RESTART_WAIT_MS}")
        try:
            self.conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        finally:
            self.conn.execute(f"PRAGMA busy_timeout = {int(self.settings['busy_timeout_ms'])}")

    @contextmanager
    def batch(self) -> Iterator["Storage"]:
        """Group commit: one transaction (and one fsync) for every :meth:`write` inside.

        Each operation runs in its own savepoint, so a refused one rolls back
        alone; nothing inside is durable until the batch commits, and an
        exception escaping the batch rolls all of it back.
        """
        with self.write():
            self._in_batch = True
            try:
                yield self
            finally:
                self._in_batch = False

    @contextmanager
    def _savepoint(self) -> Iterator[None]:
        with translate_sqlite_errors():
            self.conn.execute("SAVEPOINT operation")
            try:
                yield
            except BaseException:
                try:
                    self.conn.execute("ROLLBACK TO operation")
                    self.conn.execute("RELEASE operation")
                except sqlite3.Error:
                    pass  # the batch's own rollback will clean up
                raise
            self.conn.execute("RELEASE operation")

    def _rollback(self) -> None:
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the original exception is what the caller must see

    @contextmanager
    def read(self) -> Iterator["Storage"]:
        """A consistent read snapshot, ended before returning (no transaction is left open)."""
        if self._in_write:
            yield self
            return
        with translate_sqlite_errors():
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            self.conn.execute("BEGIN")
            try:
                yield self
            finally:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")

    def _fault(self, label: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(label)

    # -- statements -----------------------------------------------------------------
    def execute(self, statement: str, /, **params: Any) -> sqlite3.Cursor:
        """Run the named statement of ``sql/queries.sql`` (fault hook first, for tests)."""
        self._fault(statement)
        with translate_sqlite_errors():
            return self.conn.execute(queries()[statement], params)

    def one(self, statement: str, /, **params: Any) -> tuple | None:
        """First row of the named query, or None."""
        with translate_sqlite_errors():
            return self.conn.execute(queries()[statement], params).fetchone()

    def all(self, statement: str, /, **params: Any) -> list[tuple]:
        """All rows of the named query."""
        with translate_sqlite_errors():
            return self.conn.execute(queries()[statement], params).fetchall()

    # -- the chain ---------------------------------------------------------------------
    def head(self) -> tuple[int, str, str]:
        """``(seq, sha256, created_at)`` of the newest event, or ``(0, 64 zeros, "")``."""
        row = self.one("head")
        return (row[0], row[1], row[2]) if row else (0, ZERO_SHA256, "")

    def append(self, event: EventRow, rows: list[HelperRow] = (), contents: Mapping[str, bytes] | None = None) -> None:
        """Insert ``event`` onto the hash chain, then its ``contents`` (sha256 → canonical bytes)
        and helper ``rows``. Call inside :meth:`write`.

        The ``events`` insert trigger refuses a row that does not extend the chain
        (``seq`` = previous + 1, ``parent_sha256`` = previous sha256); that refusal,
        like every constraint, is ``INTEGRITY_ERROR``.
        """
        self.execute("insert_event", seq=event.seq, type=event.type, revision=event.revision,
                     stream=event.stream, stream_seq=event.stream_seq, created_at=event.created_at,
                     sha256=event.sha256, parent_sha256=event.parent_sha256, operation_key=event.operation_key,
                     request_sha256=event.request_sha256, body=event.body.decode("utf-8"))
        for sha, data in (contents or {}).items():
            total = self.one("content_bytes_total")[0] + len(data)
            self.execute("insert_content", sha256=sha, seq=event.seq, size_bytes=len(data), cumulative_bytes=total,
                         body=data.decode("utf-8"))
        for name, params in rows:
            self.execute(name, **params)
