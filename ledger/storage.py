"""``ledger.sqlite``: connection, fair writer lock, transactions, migrations, the hash chain.

SPEC section 3. One :class:`Storage` wraps one ``sqlite3`` connection opened with
``isolation_level=None`` (we issue every ``BEGIN`` ourselves). Each mutation is
exactly one ``BEGIN IMMEDIATE … COMMIT`` inside :meth:`Storage.write`, which first
takes a blocking OS lock on the sidecar file ``ledger.sqlite-lock`` so that writers
queue in the kernel instead of polling SQLite's busy handler (which can starve a
writer past its timeout). ``sqlite3`` errors are translated to ``LedgerError`` in
exactly one place, :func:`translate_sqlite_errors`.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import quote

import sqlite_utils

from . import errors as E
from ._resources import resource_dir
from .canonical import ZERO_SHA256, canonical_bytes, canonical_event_bytes, sha256_hex
from .clock import utc_now
from .config import DEFAULT_LIMITS, DEFAULT_STORAGE, BudgetConfig
from .errors import LedgerError
from .paths import os_error
from .rules import TERMINAL_STATUSES, Draft

LEDGER_FILE = "ledger.sqlite"
LOCK_SUFFIX = "-lock"
#: WAL size past which a writer restarts the log after its commit, and how long it waits for readers.
WAL_RESTART_BYTES = 8 * 1024 * 1024
WAL_RESTART_WAIT_MS = 200
_MIGRATION_RE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


# --- SQL files ---------------------------------------------------------------
def split_statements(script: str) -> list[str]:
    """Split a SQL script into complete statements with ``sqlite3.complete_statement``.

    ``executescript()`` would commit any open transaction first, so migrations run
    statement by statement inside our own ``BEGIN IMMEDIATE``.
    """
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not all(l.strip().startswith("--") or not l.strip() for l in buffer.splitlines()):
        raise ValueError(f"incomplete SQL statement: {buffer[:80]!r}")
    return statements


@cache
def migrations() -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """``(version, name, statements)`` of every ``sql/NNN_name.sql``, in order."""
    found = []
    for path in sorted(resource_dir("sql").iterdir()):
        match = _MIGRATION_RE.match(path.name)
        if match:
            statements = tuple(split_statements(path.read_text(encoding="utf-8")))
            found.append((int(match.group(1)), match.group(2), statements))
    return tuple(found)


def schema_object(statement: str) -> tuple[str, str, str]:
    """``(type, name, sql as sqlite_master stores it)`` of a ``CREATE`` statement, else ``("", "", "")``."""
    lines = statement.splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)  # leading comments are not part of what sqlite_master stores
    text = "\n".join(lines).strip().rstrip(";").rstrip()
    match = re.match(r"CREATE\s+(?:UNIQUE\s+)?(TABLE|TRIGGER|VIEW|INDEX)\s+(\w+)", text)
    return (match.group(1).lower(), match.group(2), text) if match else ("", "", "")


def shipped_schema() -> dict[str, str]:
    """Name → SQL of every table, index, trigger and view the migrations create."""
    return {name: sql for _, _, statements in migrations() for statement in statements
            for kind, name, sql in [schema_object(statement)] if kind}


def schema_version() -> int:
    """The newest schema version this code knows."""
    return migrations()[-1][0]


@cache
def queries() -> dict[str, str]:
    """Named statements of ``sql/queries.sql`` (write path) and ``sql/reads.sql`` (read side),
    each block headed ``-- name: <name>``."""
    named: dict[str, str] = {}
    for file in ("queries.sql", "reads.sql"):
        current = None
        for line in (resource_dir("sql") / file).read_text(encoding="utf-8").splitlines():
            match = re.match(r"^--\s*name:\s*(\w+)\s*$", line)
            if match:
                if match.group(1) in named:
                    raise ValueError(f"{file}: statement {match.group(1)} is named twice")
                current = match.group(1)
                named[current] = ""
            elif current is not None and not line.startswith("--"):
                named[current] += line + "\n"
    return {name: sql.strip() for name, sql in named.items()}


def statement(name: str, schema: str = "main", **identifiers: str) -> str:
    """Text of a named statement with its ``{schema}``/``{table}``/… placeholders filled.

    ``schema`` is ``main`` or ``orig`` (the ledger verify attaches); identifiers
    come from code, never from input. Values bind as parameters.
    """
    return _statement(name, schema, tuple(sorted(identifiers.items())))


@cache
def _statement(name: str, schema: str, identifiers: tuple[tuple[str, str], ...]) -> str:
    text = queries()[name]
    return text.format(schema=schema, **dict(identifiers)) if "{" in text else text


# --- errors ------------------------------------------------------------------------
#: SQLITE_PERM, SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN (primary result codes).
_STORAGE_CODES = frozenset({3, 8, 10, 13, 14})

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


# --- the writer queue -----------------------------------------------------------
class WriterLock:
    """Exclusive ``flock`` on ``ledger.sqlite-lock``, waited for in the kernel with a deadline.

    An uncontended acquire is one non-blocking ``flock``. Under contention a helper
    thread blocks in ``flock`` (the kernel wakes waiters as soon as the lock is
    released, instead of SQLite's sleep-and-poll) while the caller waits at most
    ``timeout_ms``; a thread that wins after its caller gave up releases at once.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def _open(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def acquire(self, timeout_ms: int) -> int:
        """Return a locked file descriptor, or raise ``LEDGER_BUSY`` after ``timeout_ms``."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            os.close(fd)
        except BaseException:
            os.close(fd)
            raise
        return self._wait(timeout_ms)

    def _wait(self, timeout_ms: int) -> int:
        cond = threading.Condition()
        box: dict[str, Any] = {"fd": None, "abandoned": False, "error": None}

        def waiter() -> None:
            try:
                fd = self._open()
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:
                with cond:
                    box["error"] = exc
                    cond.notify()
                return
            with cond:
                if box["abandoned"]:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
                    return
                box["fd"] = fd
                cond.notify()

        threading.Thread(target=waiter, name="ledger-writer-lock", daemon=True).start()
        with cond:
            try:
                cond.wait_for(lambda: box["fd"] is not None or box["error"] is not None,
                              timeout_ms / 1000)
            finally:
                if box["fd"] is None:
                    box["abandoned"] = True
            if box["error"] is not None:
                raise LedgerError(E.LEDGER_BUSY, f"cannot lock {self.path}: {box['error']}")
            if box["fd"] is None:
                raise LedgerError(
                    E.LEDGER_BUSY, f"another writer held the case for more than {timeout_ms} ms; retry",
                    busy_timeout_ms=timeout_ms,
                )
            return box["fd"]

    @staticmethod
    def release(fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


# --- export paths ------------------------------------------------------------------
def event_path(stream: str, revision: int, stream_seq: int) -> str:
    """Where an event exports to (SPEC 9), relative to the package root."""
    if stream == "budget":
        return f"analysis/budgets/{revision:04d}/events/{stream_seq:08d}.json"
    return f"analysis/case/events/{stream_seq:08d}.json"


def content_path(sha256: str) -> str:
    return f"analysis/evidence/content/{sha256}.json"


@dataclass(frozen=True)
class Appended:
    """An event just written: its ``seq``, hash, time, export path and decoded body."""

    seq: int
    sha256: str
    created_at: str
    event_ref: str
    body: dict[str, Any]


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
    ``busy_timeout_ms``) and ``limits`` its SPEC 11 limits. Not thread-safe: use
    one ``Storage`` per thread or process.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path,
                 settings: Mapping[str, Any] | None = None,
                 limits: Mapping[str, int] | None = None) -> None:
        self.conn = conn
        self.path = path
        self.settings = {**DEFAULT_STORAGE, **(settings or {})}
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}
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
    def create(cls, path: Path, settings: Mapping[str, Any] | None = None,
               limits: Mapping[str, int] | None = None) -> "Storage":
        """Open (creating if needed) a ledger file whose schema the caller applies.

        The caller runs :meth:`apply_migrations` and its first append in one
        :meth:`write`, so an interrupted ``init`` leaves no half-made case.
        """
        conn = _connect(path, "rwc")
        with translate_sqlite_errors():
            conn.execute("PRAGMA journal_mode = WAL").fetchall()
        return cls(conn, path, settings, limits)

    @classmethod
    def open(cls, path: Path, settings: Mapping[str, Any] | None = None,
             limits: Mapping[str, int] | None = None) -> "Storage":
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
            storage = cls(conn, path, settings, limits)
            storage.read_only = True
            try:
                if storage.check_schema_version() < schema_version():
                    raise LedgerError(E.STORAGE_ERROR, f"{path} needs a schema upgrade but its location is read-only")
            except BaseException:
                conn.close()
                raise
            return storage
        storage = cls(conn, path, settings, limits)
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
    def open_readonly(cls, path: Path) -> sqlite3.Connection:
        """A connection that cannot write: ``mode=ro`` plus an authorizer denying ATTACH and writes."""
        conn = _connect_uri(readable_uri(path)[0])
        with translate_sqlite_errors():
            conn.execute("PRAGMA query_only = ON")

            def authorizer(action: int, *_: Any) -> int:
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
        conn = cls.open_readonly(path)
        deadline = time.monotonic() + timeout_ms / 1000
        conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
        try:
            db = sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
            cursor = db.execute(sql)
            if cursor.description is None:
                raise LedgerError(E.INVALID_ARGUMENT, "the statement returns no rows; only reads are allowed")
            return [d[0] for d in cursor.description], cursor.fetchall()
        except (sqlite3.Error, ValueError, OverflowError) as exc:
            if "interrupted" in str(exc):
                raise LedgerError(E.INVALID_ARGUMENT, f"query stopped after {timeout_ms} ms") from None
            raise LedgerError(E.INVALID_ARGUMENT, f"query refused: {exc}") from None
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

    def apply_migrations(self, *, triggers: bool = True) -> None:
        """Run the missing ``sql/NNN_*.sql`` statements. Call inside :meth:`write`.

        ``triggers=False`` builds an unguarded copy (verify's private scratch ledger).
        """
        current = self.current_schema_version()
        for version, name, statements in migrations():
            if version <= current:
                continue
            for statement in statements:
                if not triggers and schema_object(statement)[0] == "trigger":
                    continue
                self._fault(f"migration {version}")
                with translate_sqlite_errors():
                    self.conn.execute(statement)
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

    def next_stream_seq(self, stream: str, revision: int) -> int:
        if stream == "budget":
            return self.one("stream_count_budget", revision=revision)[0] + 1
        return self.one("stream_count_case")[0] + 1

    def append(self, draft: Draft, *, at: str | None, actor: str,
               check_limits: bool = True) -> Appended:
        """Append ``draft`` as the next event and its helper rows. Call inside :meth:`write`.

        ``at`` (normalized RFC 3339) defaults to now and is clamped to the previous
        event's time. Raises ``LIMIT_REACHED`` for an event over ``event_bytes_max``.
        """
        seq, parent, previous_at = self.head()
        created_at = max(at or utc_now(), previous_at)
        body = dict(draft.fields)
        body.update(seq=seq + 1, parent_sha256=parent, created_at=created_at, actor=actor,
                    request=draft.request)
        data = canonical_event_bytes(body)
        if check_limits and len(data) > self.limits["event_bytes_max"]:
            raise LedgerError(
                E.LIMIT_REACHED, f"event of {len(data)} bytes exceeds event_bytes_max = {self.limits['event_bytes_max']}",
                limit="event_bytes_max",
            )
        return self.append_bytes(data, body, draft.operation_key, draft.contents)

    def append_bytes(self, data: bytes, body: Mapping[str, Any], operation_key: str | None,
                     contents: Mapping[str, bytes]) -> Appended:
        """Insert the canonical ``data`` of ``body`` (already chained) and project its rows."""
        stream = "budget" if body["format"] == "budget-event-v1" else "case"
        revision = body["revision"]
        stream_seq = self.next_stream_seq(stream, revision)
        sha = sha256_hex(data)
        request = body.get("request")
        self.execute(
            "insert_event", seq=body["seq"], type=body["type"], revision=revision, stream=stream,
            stream_seq=stream_seq, created_at=body["created_at"], sha256=sha,
            parent_sha256=body["parent_sha256"], operation_key=operation_key,
            request_sha256=sha256_hex(canonical_bytes(request)) if operation_key else None,
            body=data.decode("utf-8"),
        )
        self._project(body, contents)
        return Appended(body["seq"], sha, body["created_at"], event_path(stream, revision, stream_seq),
                        dict(body))

    def _project(self, body: Mapping[str, Any], contents: Mapping[str, bytes]) -> None:
        """Write the helper rows an event establishes (the views are derived from them)."""
        seq, kind, revision = body["seq"], body["type"], body["revision"]
        for sha, data in contents.items():
            total = self.one("content_bytes_total")[0] + len(data)
            self.execute("insert_content", sha256=sha, seq=seq, size_bytes=len(data), cumulative_bytes=total,
                         body=data.decode("utf-8"))
        if kind == "case.created":
            self.execute("insert_case_identity", seq=seq, case_id=body["case_id"], package_id=body["package_id"])
            self.execute("insert_lifecycle", seq=seq, revision=revision, from_state=None, state=body["state"])
        elif kind == "revision.opened":
            self.execute("insert_revision", revision=revision, seq=seq,
                         units_per_hypothesis=body["units_per_hypothesis"],
                         max_hypotheses=body["max_hypotheses"],
                         hypothesis_batch_sha256=body["hypothesis_batch_sha256"])
            for h in body["hypotheses"]:
                self.execute("insert_hypothesis", revision=revision, seq=seq, **h)
            self.execute("insert_lifecycle", seq=seq, revision=revision,
                         from_state=body["from_state"], state=body["state"])
        elif kind == "case.transitioned":
            self.execute("insert_lifecycle", seq=seq, revision=revision,
                         from_state=body["from_state"], state=body["state"])
        elif kind == "budget.initialized":
            self.execute("insert_policy", revision=revision, seq=seq, policy_sha256=body["policy_sha256"],
                         policy=canonical_bytes(body["policy"]).decode("utf-8"))
            for account in body["accounts"]:
                self.execute("insert_account", revision=revision, seq=seq,
                             hypothesis_id=account["hypothesis_id"], initial_units=account["initial_units"])
        if body["format"] == "budget-event-v1":
            self._project_action(body)
            for account in body["accounts"]:
                if account["status"] in TERMINAL_STATUSES and not self.one(
                        "termination_exists", revision=revision, hypothesis_id=account["hypothesis_id"]):
                    self.execute("insert_termination", revision=revision, seq=seq,
                                 hypothesis_id=account["hypothesis_id"], status=account["status"],
                                 terminal_reason=account["terminal_reason"])

    def _project_action(self, body: Mapping[str, Any]) -> None:
        action = body.get("action")
        if action is None:
            return
        key = {"revision": body["revision"], "hypothesis_id": action["hypothesis_id"],
               "action_id": action["action_id"], "seq": body["seq"]}
        kind = body["type"]
        if kind == "budget.reserved":
            self.execute("insert_reservation", action=action["action"], cost_units=action["cost_units"], **key)
        elif kind == "budget.result_recorded":
            self.execute("insert_result", content_sha256=body["evidence_sha256"],
                         novelty_score=action["novelty_score"], **key)
            for source in body["sources"]:
                self.execute("insert_result_source", path=source["path"], sha256=source["sha256"], **key)
        elif kind in ("budget.settled", "budget.failed"):
            self.execute("insert_closing", outcome=action["status"], semantic_score=action["semantic_score"],
                         information_score=action["information_score"], reward_units=action["reward_units"],
                         **key)


@lru_cache(maxsize=64)
def _policy_config(policy_json: str) -> BudgetConfig:
    """Frozen policies are validated once per process, not on every operation."""
    return BudgetConfig.from_mapping(json.loads(policy_json))


class SqlView:
    """The rules' :class:`~ledger.rules.LedgerView` over a :class:`Storage`: indexed, bounded reads."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def case(self) -> dict[str, Any] | None:
        row = self.storage.one("case_head")
        if row is None:
            return None
        case_id, package_id, seq, revision, state = row
        return {"case_id": case_id, "package_id": package_id, "state": state,
                "state_seq": seq, "revision": revision}

    def revision(self, revision: int) -> dict[str, Any] | None:
        row = self.storage.one("revision", revision=revision)
        if row is None:
            return None
        hypotheses = [
            {"hypothesis_id": h, "statement": s, "allocation_units": u}
            for h, s, u in self.storage.all("revision_hypotheses", revision=revision)
        ]
        return {"revision": row[0], "seq": row[1], "units_per_hypothesis": row[2],
                "max_hypotheses": row[3], "hypothesis_batch_sha256": row[4], "hypotheses": hypotheses,
                "hypotheses_request": [{"statement": h["statement"]} for h in hypotheses]}

    def policy_config(self, revision: int) -> BudgetConfig:
        row = self.storage.one("policy", revision=revision)
        return _policy_config(row[0])

    def previous_policy(self, revision: int) -> tuple[dict[str, Any], str] | None:
        row = self.storage.one("latest_policy_before", revision=revision)
        return (json.loads(row[0]), row[1]) if row else None

    def budget_head(self, revision: int) -> dict[str, Any] | None:
        row = self.storage.one("latest_budget_body", revision=revision)
        if row is None:
            return None
        try:
            body = json.loads(row[0])
            return {"policy_sha256": body["policy_sha256"],
                    "hypothesis_batch_sha256": body["hypothesis_batch_sha256"],
                    "accounts": {a["hypothesis_id"]: a for a in body["accounts"]}}
        except (ValueError, TypeError, KeyError, RecursionError):
            raise LedgerError(E.INTEGRITY_ERROR, f"the newest budget event of revision {revision} is malformed; "
                              "run 'ledger verify'") from None

    def accounts(self, revision: int) -> dict[str, dict[str, Any]]:
        head = self.budget_head(revision)
        return head["accounts"] if head else {}

    def operation(self, key: str) -> tuple[int, str] | None:
        row = self.storage.one("operation", operation_key=key)
        return (row[0], row[1]) if row else None

    def action(self, revision: int, hypothesis_id: str, action_id: str) -> dict[str, Any] | None:
        row = self.storage.one("action_state", revision=revision, hypothesis_id=hypothesis_id, action_id=action_id)
        if row is None:
            return None
        action, cost, novelty, outcome, semantic, information, reward, recorded = row
        return {
            "hypothesis_id": hypothesis_id, "action_id": action_id, "action": action, "cost_units": cost,
            "status": outcome or ("awaiting_assessment" if recorded else "reserved"),
            "novelty_score": novelty, "semantic_score": semantic,
            "information_score": information, "reward_units": reward,
        }

    def content_seen(self, sha256: str) -> bool:
        return self.storage.one("content_exists", sha256=sha256) is not None

    def content_bytes_total(self) -> int:
        return self.storage.one("content_bytes_total")[0]

    def budget_events_total(self) -> int:
        return self.storage.one("budget_events_total")[0]
