"""``ledger.sqlite``: connection, fair writer lock, transactions, migrations, the hash chain.

docs/architecture.md. One :class:`Storage` wraps one ``sqlite3`` connection opened with
``isolation_level=None`` (we issue every ``BEGIN`` ourselves). Each mutation is
exactly one ``BEGIN IMMEDIATE … COMMIT`` inside :meth:`Storage.write`, which first
takes a blocking OS lock on the sidecar file ``ledger.sqlite-lock`` so that writers
queue in the kernel instead of polling SQLite's busy handler (which can starve a
writer past its timeout). ``sqlite3`` errors are translated to ``LedgerError`` in
exactly one place, :func:`translate_sqlite_errors` (``sqlite_file``).

Storage is the ground floor of the library: it stores opaque canonical event
bytes with the columns and helper rows its caller computed, and knows no event
type, rule or configuration.
"""

from __future__ import annotations

import ctypes
import os
import sqlite3
import weakref
from pathlib import Path
from typing import Any, Callable, Mapping

from ..ground import errors as E
from .sqlfiles import (foreign_write_blockers, migration_functions, migration_record_problem, migrations, queries,
                       recorded_schema_version, schema_object, schema_version)
from ..ground.canonical import ZERO_SHA256
from ..ground.clock import utc_now
from ..ground.errors import LedgerError, pass_on_interruption
from .writer_lock import WriterLock, fork_count
from .sqlite_file import (LOCK_SUFFIX, NOTHING_WRITTEN, WAL_RESTART_BYTES, EventRow, HelperRow, SQLITE_ERRORS,
                          connect_path, connect_uri, file_uri, immutable_snapshot, passive_checkpoint, probe_file,
                          readable_uri, refuse_another_programs, run_migration_statement, sqlite_error,
                          translate_sqlite_errors)
from .side_files import log_path, wal_bytes, writable_side_files
from ..ground.paths import os_error
from .transaction import Batch, Read, Write, abandoned, busy_reason


def _raise_translated(exc: BaseException) -> None:
    """Raise what :func:`sqlite_error` makes of ``exc`` (``exc`` itself when it stays as it is)."""
    translated = sqlite_error(exc)
    if translated is exc:
        raise exc
    raise translated from None


#: Every open :class:`Storage` of this process, so that a forked child can keep their connections.
_LIVE: "weakref.WeakSet[Storage]" = weakref.WeakSet()


def _keep_inherited_connections() -> None:
    """In a forked child: every inherited connection gets a reference that is never dropped, so that
    neither garbage collection nor the interpreter's exit closes it there. Closing it would roll
    back a transaction the parent has open, through the shared WAL index, and corrupt the ledger."""
    for storage in list(_LIVE):
        _never_freed(storage.conn)


def _never_freed(conn: sqlite3.Connection) -> None:
    try:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(conn))
    except (AttributeError, OSError) as oserr:  # no C API at hand: a module reference, cleared only at exit
        _KEPT.append(conn)
        pass_on_interruption(oserr)


_KEPT: list[sqlite3.Connection] = []
os.register_at_fork(after_in_child=_keep_inherited_connections)


#: The text encodings a SQLite file may have (``PRAGMA encoding``).
_ENCODINGS = frozenset({"UTF-8", "UTF-16le", "UTF-16be"})


def _text_encoding(uri: str) -> str:
    """The text encoding of the SQLite file at ``uri`` (opened read-only as given)."""
    probe = connect_uri(uri)
    try:
        encoding = probe.execute("PRAGMA encoding").fetchone()[0]
    finally:
        probe.close()
    return encoding if encoding in _ENCODINGS else "UTF-8"


def _writer_lock(path: Path) -> WriterLock:
    """The writer lock of the ledger at ``path``, beside the real file: writers reaching one ledger
    through different symbolic links share one queue."""
    real = Path(os.path.realpath(path))
    return WriterLock(real.with_name(real.name + LOCK_SUFFIX))


class CheckpointWarning(UserWarning):
    """Closing could not empty the write-ahead log (a reader elsewhere holds an old snapshot)."""


class Storage:
    """One connection to a ``ledger.sqlite`` and everything that writes it.

    ``settings`` are the analysis config's ``storage`` (``synchronous``,
    ``busy_timeout_ms``). Not thread-safe: the session that owns it refuses
    calls from other threads.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path,
                 settings: Mapping[str, Any], lock: WriterLock | None = None) -> None:
        self.conn = conn
        self.path = path
        self.settings = dict(settings)
        self._lock = lock or _writer_lock(path)
        self._creating = lock is not None and lock.locked  # held from create() to the end of the first write
        self._in_write = self._in_batch = self._savepoint_open = False
        self._holder: Any = None  # the frame whose `with` holds the write (transaction.Write), while it does
        self._holder_at = -1  # that frame's instruction as it entered the `with`
        self._commits = 0  # commits since the WAL size was last looked at (:meth:`_bound_wal`)
        self._in_read = False
        self._reader: Any = None  # the frame whose `with` holds the read (transaction.Read), while it does
        self._reader_at = -1
        self._closed = self._closing = False
        self._fork = fork_count()  # the connection belongs to this process (:meth:`check_process`)
        _LIVE.add(self)
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
            self.conn.execute(f"PRAGMA journal_size_limit = {WAL_RESTART_BYTES}").fetchall()

    # -- opening ----------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, settings: Mapping[str, Any], check: Callable[[], None] = lambda: None) -> "Storage":
        """Open (creating if needed) a ledger file whose schema the caller applies.

        The caller runs :meth:`apply_migrations` and its first append in one
        :meth:`write`, so an interrupted ``init`` leaves no half-made case. The writer lock is
        held from before ``check`` (the caller's refusals of what the folder holds) to the end
        of that write: processes creating one case at once run one after another, each seeing
        whole what the one before left (``LEDGER_BUSY`` past ``busy_timeout_ms``).
        """
        lock = _writer_lock(path)
        lock.check_path()  # a lock path that cannot be one is refused before anything is made
        made_lock, ledger_there = not os.path.lexists(lock.path), os.path.lexists(path)
        try:
            lock.acquire(int(settings["busy_timeout_ms"]))
            check()
            refuse_another_programs(path, creating=True)  # before a writer's connection changes it
            conn = connect_path(path, "rwc")
            try:
                with translate_sqlite_errors():
                    conn.execute(f"PRAGMA busy_timeout = {int(settings['busy_timeout_ms'])}")
                    conn.execute("PRAGMA journal_mode = WAL").fetchall()
                return cls(conn, path, settings, lock)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            if made_lock and lock.locked and (ledger_there or not os.path.lexists(path)):
                Path(lock.path).unlink(missing_ok=True)  # a refused creation leaves nothing; unlinked while held
            lock.close()
            raise

    @classmethod
    def open(cls, path: Path, settings: Mapping[str, Any]) -> "Storage":
        """Open an existing ledger; refuses a newer schema with ``SCHEMA_VERSION``.

        On a read-only location the ledger opens as an immutable snapshot
        (:func:`readable_uri`): reads work, writes are ``STORAGE_ERROR``.
        """
        writable_side_files(path)
        if os.path.lexists(log_path(path, "-wal")):  # looked at first: a writer's connection copies the log in
            refuse_another_programs(path, creating=False)
        conn = connect_path(path, "rw")
        try:
            if immutable_snapshot(path):
                raise LedgerError(E.STORAGE_ERROR, f"{path} is on a read-only location")
            probe_file(conn)
        except LedgerError as exc:
            conn.close()
            if exc.code != E.STORAGE_ERROR:
                raise
            uri, immutable = readable_uri(path)
            if not immutable:
                raise
            conn = connect_uri(uri)
            storage = cls(conn, path, settings)
            storage.read_only = True
            try:
                if (version := storage.check_schema_version()) < schema_version():
                    raise LedgerError(E.STORAGE_ERROR, (
                        f"{path} was written by an older case-ledger (schema version {version}; this one reads "
                        f"{schema_version()}) and must be upgraded once, by a command that writes (such as 'ledger "
                        "export') where it may be written; its location is read-only. 'ledger verify', 'ledger sql' "
                        "and 'ledger fleet export' read it as it is"))
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
        with translate_sqlite_errors():
            source, immutable = readable_uri(original)
            conn = connect_uri(file_uri(path, "rwc"))
        try:  # a refusal or Ctrl-C closes the connection, and with it its read of ``orig``
            with translate_sqlite_errors():
                # SQLite attaches only a file of the main one's text encoding: a ledger reloaded as
                # UTF-16 (a dump read back under PRAGMA encoding) is compared in its own encoding
                conn.execute(f"PRAGMA encoding = '{_text_encoding(source)}'")
                conn.execute("PRAGMA journal_mode = OFF")  # no durability needed for a scratch copy
                conn.hold(original)  # the attached ledger keeps its locks too
                conn.execute("ATTACH DATABASE ? AS orig", (source,))
            storage = cls(conn, path, {"synchronous": "OFF", "busy_timeout_ms": 5000})
            storage.read_only_source = immutable
            with translate_sqlite_errors():
                conn.execute("BEGIN")
            storage._in_write = True  # one long private transaction
            with translate_sqlite_errors():
                original_version = recorded_schema_version(conn, "orig", original)
            # private and rebuilt from scratch: no guards needed; the original's schema version, so an
            # older ledger's views are compared with the views of its own version
            storage.apply_migrations(triggers=False, up_to=original_version or None)
        except BaseException:
            conn.close()
            raise
        return storage

    def current_schema_version(self) -> int:
        """Version recorded in ``schema_migrations`` (:func:`~.sqlfiles.recorded_schema_version`)."""
        with translate_sqlite_errors():
            return recorded_schema_version(self.conn, "main", self.path)

    def migrate(self) -> None:
        """Bring an existing ledger up to :func:`schema_version` (``SCHEMA_VERSION`` if newer).

        A file with no schema at all (an ``init`` interrupted before its commit) is
        left alone: :meth:`ledger.services.case.Case.create` finishes it.
        """
        current = self.check_schema_version()
        if 0 < current < schema_version():
            with translate_sqlite_errors():
                problem = migration_record_problem(self.conn)
            if problem:
                raise LedgerError(E.INTEGRITY_ERROR, f"{self.path}: {problem}; nothing was migrated")
            with self.write():
                self.apply_migrations()

    def check_schema_version(self) -> int:
        """The file's schema version; ``SCHEMA_VERSION`` if it is newer than this code."""
        known = schema_version()
        current = self.current_schema_version()
        if current > known:
            raise LedgerError(E.SCHEMA_VERSION, f"{self.path} has schema version {current}; this case-ledger knows up "
                              f"to {known}; upgrade case-ledger", file_version=current, known_version=known)
        return current

    def apply_migrations(self, *, triggers: bool = True, up_to: int | None = None) -> None:
        """Run the missing ``sql/NNN_*.sql`` statements (up to version ``up_to``, default all).
        Call inside :meth:`write`.

        ``triggers=False`` builds an unguarded copy (verify's private scratch ledger).
        """
        current = self.current_schema_version()
        migration_functions(self.conn)
        for version, name, statements in migrations():
            if version <= current or (up_to is not None and version > up_to):
                continue
            for sql in statements:
                if not triggers and schema_object(sql)[0] == "trigger":
                    continue
                self._fault(f"migration {version}")
                run_migration_statement(self.conn, sql)
            self.execute("insert_migration", version=version, name=name, applied_at=utc_now())

    def close(self) -> str | None:
        """Checkpoint the WAL into the main file and close; never waits on another connection.

        Returns None when the WAL was emptied (``wal_checkpoint(TRUNCATE)``), else a sentence saying why not:
        a reader elsewhere still holds an old snapshot (the log is emptied by a later close) or the checkpoint
        of a log holding frames failed. When another ledger writer holds the writer lock, the log is its to
        empty: nothing is tried and None is returned. Closing always succeeds (one cut short is finished again).
        """
        if self._closed:
            return None  # closing twice is harmless
        if self.forked:
            self._abandon()
            return None
        try:
            if self._closing:  # a close an interrupt cut short: what it left is finished below
                return None
            self._closing = True
            with translate_sqlite_errors():
                self._rollback()
                self._lock.release()
                return self._final_checkpoint()
        except LedgerError as exc:  # what committed stays in the log (an empty one holds nothing to warn of)
            why = exc.message.removesuffix(NOTHING_WRITTEN)
            return (f"the write-ahead log of {self.path} was not emptied: {why}; every committed operation is kept in "
                    "it, and a later close empties it") if wal_bytes(self.path) else None
        finally:  # closed once both ran
            try:
                self._lock.close()
            finally:
                self.conn.close()
            self._closed = True

    def _final_checkpoint(self) -> str | None:
        if self.read_only or not self._try_lock():
            return None  # an immutable snapshot has no log; a writer at work checkpoints when it closes
        self.conn.execute("PRAGMA busy_timeout = 0")  # TRUNCATE waits for readers: here it never does
        busy, log_frames, done = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if not busy and log_frames <= 0:
            return None
        return (f"the write-ahead log {self.path}-wal was not emptied ({wal_bytes(self.path)} bytes, "
                f"{max(done, 0)} of {max(log_frames, 0)} pages copied): another connection is reading an older "
                "snapshot; it stays until a later close after that reader ends")

    def _try_lock(self) -> bool:
        """The writer lock if free now; False also when its file cannot be opened (a read-only
        location, or a folder this user may not write): a reader never needs it, and the log is
        then the writer's to empty."""
        try:
            return self._lock.try_acquire()
        except OSError as oserr:
            pass_on_interruption(oserr)
            return False

    # -- the process ----------------------------------------------------------------
    @property
    def writing(self) -> bool:
        """True inside :meth:`write` or :meth:`batch`: what is read there may still be rolled back."""
        return self._in_write

    @property
    def forked(self) -> bool:
        """True in a process forked after this connection was opened (it is the parent's)."""
        return self._fork != fork_count()

    def check_process(self) -> None:
        """``INVALID_ARGUMENT`` in a forked child: SQLite forbids using a connection across a fork
        (the child holds none of the parent's file locks, so its writes would overwrite the parent's)."""
        if self.forked:
            raise LedgerError(E.INVALID_ARGUMENT, "this case was opened by the process this one was forked "
                              "from; a ledger connection does not survive a fork: open the case again here")

    def discard(self) -> None:
        """Close after a failed create or open: the connection and the kept lock file, no checkpoint."""
        self._closed = True
        try:
            self._lock.close()
        finally:
            self.conn.close()

    def _abandon(self) -> None:
        """A forked child's way out: the parent's transaction, connection and lock are left alone
        (this process's copy of the lock file is closed); the connection is never closed here
        (:func:`_keep_inherited_connections`)."""
        self._in_write = self._in_batch = self._savepoint_open = self._in_read = False
        self._closed = True
        self._lock.close()

    # -- transactions ---------------------------------------------------------------
    def write(self, depth: int = 1) -> Write:
        """One ``BEGIN IMMEDIATE … COMMIT``; any exception (``KeyboardInterrupt`` too) rolls back.

        Inside :meth:`batch` it is a ``SAVEPOINT`` instead, so a refused operation
        rolls back alone. Raises ``LEDGER_BUSY`` when the writer lock is not
        obtained within ``busy_timeout_ms``; the connection stays usable after
        every failure. ``sqlite3`` errors of the body are translated as every other.
        ``depth``: frames up from the write's ``__enter__`` to the one whose ``with`` holds it.
        """
        return Write(self, depth)

    def _begin(self) -> None:
        """:meth:`write`'s start: the writer lock, then ``BEGIN IMMEDIATE`` (everything undone on failure)."""
        if self._closed:  # before the lock: a closed case neither opens its lock file again nor keeps it
            raise LedgerError(E.INVALID_ARGUMENT, "this case was closed; open it again to use it")
        if self._in_write or self._in_read:  # (Write.__enter__ ended an abandoned write already)
            raise LedgerError(E.INVALID_ARGUMENT, busy_reason(self))
        if self.read_only:
            raise LedgerError(E.STORAGE_ERROR, f"{self.path} is on a read-only location: reads work, writes cannot")
        try:
            self._in_write = True
            try:
                if not self._creating:  # create() holds it for the first write
                    self._lock.acquire(int(self.settings["busy_timeout_ms"]))
            except OSError as exc:
                raise os_error(exc, f"cannot take the writer lock of {self.path}") from None
            try:
                if self.conn.in_transaction:  # left over from an interrupted rollback
                    self.conn.execute("ROLLBACK")
                self.conn.execute("BEGIN IMMEDIATE")
            except SQLITE_ERRORS as exc:
                _raise_translated(exc)
        except BaseException:
            self._end()
            raise

    def _commit(self) -> None:
        try:
            self._settle_savepoint()
            self._fault("COMMIT")
            self.conn.execute("COMMIT")
        except SQLITE_ERRORS as exc:
            _raise_translated(exc)
        self._bound_wal()

    def recover_abandoned_write(self) -> None:
        """End a write whose own end an interrupt cut short (at the very start of its ``__exit__``,
        before any of it ran): its transaction and the writer lock were left held. It is abandoned
        once the frame whose ``with`` held it is no longer running; a write whose block is still
        running (a nested call) is left to its block."""
        if not self._in_write:
            if self._lock.locked:  # cut short after it was marked ended: only the lock is left
                self._lock.release()
        elif abandoned(self._holder, self._holder_at):
            self._in_batch = self._savepoint_open = False
            self._end()

    def _end(self) -> None:
        """Every way out of :meth:`write`, a second interrupt during the first one's cleanup included:
        the next call (or close) finishes what an interrupted cleanup left."""
        self._in_write = self._creating = False
        self._holder = None
        try:
            try:
                self._rollback()
            finally:
                if self.conn.in_transaction:  # a second interrupt cut the rollback short
                    self._rollback()
        finally:
            self._lock.release()

    def _bound_wal(self) -> None:
        """Keep the WAL bounded, never waiting for readers: at the first and every 16th commit, past
        ``WAL_RESTART_BYTES`` run a ``wal_checkpoint(PASSIVE)`` (copies what no reader still needs,
        returns at once); once all is copied and no reader holds an old snapshot, the next write
        starts the log over and ``journal_size_limit`` shrinks the file back."""
        self._commits = (self._commits + 1) % 16
        if self._commits == 1 and wal_bytes(self.path) > WAL_RESTART_BYTES:
            passive_checkpoint(self.conn, lambda: self._fault("checkpoint"))

    def batch(self) -> Batch:
        """Group commit: one transaction (and one fsync) for every :meth:`write` inside.

        Each operation runs in its own savepoint, so a refused one rolls back
        alone; nothing inside is durable until the batch commits, and an
        exception escaping the batch rolls all of it back.
        """
        return Batch(self)

    def _open_savepoint(self) -> None:
        self._settle_savepoint()
        self._savepoint_open = True  # before it exists: rolling back a missing savepoint is harmless
        try:
            self.conn.execute("SAVEPOINT operation")
        except SQLITE_ERRORS as exc:
            _raise_translated(exc)

    def _release_savepoint(self) -> None:
        try:
            self.conn.execute("RELEASE operation")
        except SQLITE_ERRORS as exc:
            _raise_translated(exc)
        self._savepoint_open = False

    def _settle_savepoint(self) -> None:
        """Roll back an operation's savepoint whose own rollback was interrupted, so a batch never
        commits half an operation."""
        if self._savepoint_open:
            for sql in ("ROLLBACK TO operation", "RELEASE operation"):
                try:
                    self.conn.execute(sql)
                except sqlite3.Error:
                    pass  # no such savepoint: it was never made, or the batch already rolled back
            self._savepoint_open = False

    def _rollback(self) -> None:
        """End an uncommitted transaction (nothing to do after a commit)."""
        self._savepoint_open = False
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the original exception is what the caller must see

    def read(self, depth: int = 1) -> Read:
        """A consistent read snapshot, ended before returning (no transaction is left open); inside a
        write or another read, that one's. ``depth``: frames up from the read's ``__enter__`` to the
        one whose ``with`` holds it."""
        return Read(self, depth)

    def _end_read(self) -> None:
        """Every way out of :meth:`read` (a rollback an interrupt cut short: the next read or write ends it)."""
        self._in_read = False
        self._reader = None
        self._rollback()

    def end_read_of(self, holder: Any) -> None:
        """End the read the ``with`` of frame ``holder`` entered, if it is still open (its end cut short)."""
        if self._in_read and self._reader is holder:
            self._end_read()

    def recover_abandoned_read(self) -> None:
        """End a read whose end an interrupt cut short (:func:`~.transaction.abandoned`): left, its
        snapshot answered the process's later reads and every write was refused as nested."""
        if self._in_read and abandoned(self._reader, self._reader_at, read=True):
            self._end_read()

    def _fault(self, label: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(label)

    # -- statements -----------------------------------------------------------------
    def execute(self, statement: str, /, **params: Any) -> sqlite3.Cursor:
        """Run the named statement of ``sql/queries.sql`` (fault hook first, for tests); a refused
        write (``INTEGRITY_ERROR``) names the indexes and triggers a user added to ledger tables."""
        self._fault(statement)
        try:
            try:
                return self.conn.execute(queries()[statement], params)
            except SQLITE_ERRORS as error:
                _raise_translated(error)
        except LedgerError as exc:
            foreign = foreign_write_blockers(self.conn) if exc.code == E.INTEGRITY_ERROR else []
            if not foreign:
                raise
            raise LedgerError(exc.code, f"{exc.message} (objects added to the ledger's tables that can refuse its "
                              f"writes: {', '.join(foreign)}; drop them, 'ledger verify' names the culprit)",
                              **{**exc.details, "foreign_objects": foreign}) from None

    def one(self, statement: str, /, **params: Any) -> tuple | None:
        """First row of the named query, or None."""
        try:  # no context manager: the write path runs several of these per operation
            return self.conn.execute(queries()[statement], params).fetchone()
        except SQLITE_ERRORS as exc:
            _raise_translated(exc)

    def all(self, statement: str, /, **params: Any) -> list[tuple]:
        """All rows of the named query."""
        try:
            return self.conn.execute(queries()[statement], params).fetchall()
        except SQLITE_ERRORS as exc:
            _raise_translated(exc)

    # -- the chain ---------------------------------------------------------------------
    def head(self) -> tuple[int, str, str]:
        """``(seq, sha256, created_at)`` of the newest event, or ``(0, 64 zeros, "")``."""
        row = self.one("head")
        if row is None:
            return (0, ZERO_SHA256, "")
        if type(row[0]) is not int or type(row[1]) is not str or type(row[2]) is not str:
            raise LedgerError(E.INTEGRITY_ERROR, f"the newest event (seq {row[0]!r}) has a seq, sha256 or created_at "
                              "of a type the ledger never writes (an edited ledger); run 'ledger verify'")
        return (row[0], row[1], row[2])

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
