"""A served case's connections (docs/browse.md): read-only, escaped in their URI, each cursor
bounded in the bytes it returns, and refusing to read on once the file they opened was replaced
(another file put in its place) or, for a snapshot of a read-only file system, changed:
:class:`CaseChanged`, which ``ledger serve`` answers as a case that is unavailable."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ..ground import errors as E
from ..ground.descriptors import refuse_inherited
from ..ground.paths import device_and_inode
from ..storage.sqlite_file import ClosingConnection, file_identity, readable_uri
from ..storage.side_files import wal_bytes

#: The most text and blob bytes one served query may return, all its rows together (Datasette's
#: pages read at most 1,001 rows; the picture reads every row of its question). Room for a page of
#: any table of a case within the default limits: 100 events of 2 MiB (``event_bytes_max``), or all
#: 64 MiB of distinct evidence content; and more than Datasette's CSV download holds (100 MiB,
#: ``max_csv_mb``), so a streamed download ends at Datasette's own limit first.
RESULT_BYTES_MAX = 256 * 1024 * 1024

#: Bytes that JSON writes as ``\\u00XX`` (six bytes; a few as two, counted six all the same):
#: the control characters and DEL (Python's JSON escapes all but space to tilde).
_CONTROL_BYTES = bytes([*range(32), 127])
_HIGH_BYTES = bytes(range(128, 256))
#: What Datasette's JSON puts around the base64 of a blob that is not UTF-8.
_BASE64_WRAPPER = '{"$base64": true, "encoded": ""}'


def rendered_bytes(value: str | bytes) -> int:
    """At least the bytes Datasette's JSON takes to write the text or blob ``value`` (Python's
    ``json.dumps``, non-ASCII escaped): a control character as six bytes, a quote or backslash as
    two, a character of two to four UTF-8 bytes as six or twelve (three per byte at most); a blob
    as that text when it is UTF-8, else as base64 (four bytes per three) in a small object."""
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    controls = len(data) - len(data.translate(None, _CONTROL_BYTES))
    high = len(data) - len(data.translate(None, _HIGH_BYTES))
    text = len(data) + 5 * controls + 2 * high + data.count(b'"') + data.count(b"\\")
    return text if isinstance(value, str) else max(text, -(-len(data) // 3) * 4 + len(_BASE64_WRAPPER))


class _BoundedCursor(sqlite3.Cursor):
    """A cursor refusing, as SQLite refuses a value past its length limit, to return more than
    :data:`RESULT_BYTES_MAX` bytes of text and blobs in all, counted as JSON writes them
    (:func:`rendered_bytes`): 1,000 rows of 50 MB each took 12 GB of the server's memory while one
    value stayed under the limit, and 250 MB of zero bytes, written as ``\\u0000``, 7.6 GB."""

    returned = 0

    def fetchone(self) -> Any:
        row = super().fetchone()
        if row is not None:
            self.returned += sum(rendered_bytes(value) for value in row if isinstance(value, (str, bytes)))
            if self.returned > RESULT_BYTES_MAX:
                raise sqlite3.OperationalError(
                    f"the query's rows pass {RESULT_BYTES_MAX // 2 ** 20} MiB of text and blobs (as JSON writes "
                    "them: a zero byte or other control character counts six); ask for fewer "
                    "rows (?_size=10) or shorter values (substr), or read them with ledger sql")
        return row

    def fetchmany(self, size: int | None = None) -> list[Any]:
        rows = []
        for _ in range(self.arraysize if size is None else size):
            row = self.fetchone()
            if row is None:
                break
            rows.append(row)
        return rows

    def fetchall(self) -> list[Any]:
        rows = []
        while (row := self.fetchone()) is not None:
            rows.append(row)
        return rows

    def __next__(self) -> Any:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row


class CaseChanged(sqlite3.OperationalError):
    """The served file was replaced since this connection opened it, or, opened as a snapshot of a
    read-only file system, changed: its reads would show what is no longer there (or, for the
    snapshot, its changed pages as a damaged file)."""


class _BoundedConnection(ClosingConnection):
    """A connection whose cursors are :class:`_BoundedCursor` (Datasette reads through ``cursor()``),
    closed with it (:class:`~ledger.storage.sqlite_file.ClosingConnection`, at every close: a server
    stopped mid-query leaves no ``-wal``/``-shm``). One opened as an immutable snapshot (a read-only
    file system) refuses every read once the file or its log changed since (written through another
    mount): SQLite, told it never changes, would read its changed pages as a damaged file
    ("malformed") or miss the log's newer events."""

    closes_every_cursor = True  # closed once, when the server stops
    #: The ledger's file and log as the snapshot was opened (None: an ordinary read, which follows writers).
    snapshot_of: tuple[int, ...] | None = None
    #: The opened file's device and inode: another file renamed into its place is not read as it.
    opened: tuple[int, int] | None = None
    ledger_path = ""

    #: The ledger's file and log when a read found them damaged (None: no read did since the last look).
    damaged_as: tuple[int, ...] | None = None

    def noted_damage(self) -> None:
        """A read found the file damaged: remember the file as it is, for :meth:`forget_damage`."""
        self.damaged_as = _file_state(self.ledger_path)

    def forget_damage(self) -> None:
        """Drop the pages this connection holds in memory (``PRAGMA shrink_memory``) once the file changed
        since a read found it damaged. A file written over in place (not through SQLite) changes no log,
        so SQLite kept the pages it had read of the damage, and a whole copy put back stayed "malformed"
        on this connection for good; while the file stays as it was, the pages read before the damage
        are kept, and it is still named damaged (a file cut to nothing would read as an empty one)."""
        if self.damaged_as is not None and _file_state(self.ledger_path) != self.damaged_as:
            self.damaged_as = None
            try:
                self.execute("PRAGMA shrink_memory")
            except sqlite3.Error:  # closed, or replaced since: the read that follows says so
                pass

    def cursor(self, factory: Any = None) -> Any:  # type: ignore[override]
        if self.snapshot_of is not None and _file_state(self.ledger_path) != self.snapshot_of:
            raise CaseChanged(
                f"{self.ledger_path} changed since the server opened it, as a snapshot of a read-only file system "
                "(it is written through another mount): start ledger serve again to read it as it is now")
        if self.opened is not None and device_and_inode(self.ledger_path) not in (self.opened, None):
            raise replaced(self.ledger_path)
        return super().cursor(factory or _BoundedCursor)


def _file_state(path: str) -> tuple[int, ...]:
    """The ledger file's identity (:func:`~ledger.storage.sqlite_file.file_identity`) and its log's
    size, as a snapshot checks them; ``(-1,)`` when it is gone."""
    try:
        return (*file_identity(Path(path)), wal_bytes(Path(path)))
    except OSError as oserr:
        E.pass_on_interruption(oserr)
        return (-1,)


def case_connection(path: str, opened_as: tuple[int, int] | None = None) -> sqlite3.Connection:
    """A read-only connection to the ledger file at ``path``, opened by a URI whose path is
    escaped: Datasette puts the path into ``file:PATH?mode=ro`` as it is, so a folder named with
    ``#``, ``?`` or ``%`` opened another file, read-write (``c#x`` opened ``c``, ``p%41`` opened
    ``pA``). Every cursor returns at most :data:`RESULT_BYTES_MAX` bytes. A ledger on a read-only
    file system (which cannot hold the ``-shm`` file a read needs) is read as ``ledger sql`` reads it
    (:func:`~ledger.storage.sqlite_file.readable_uri`: an immutable snapshot, whose reads are refused
    once the file changed, written through another mount); ``STORAGE_ERROR`` when it cannot be read."""
    state, opened = _file_state(path), device_and_inode(path)  # before it is opened: a change after is seen
    if opened_as is not None and opened not in (opened_as, None):  # the server's first look saw another file
        raise replaced(path)
    uri, immutable = readable_uri(Path(path))
    refuse_inherited(path)
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, factory=_BoundedConnection)
    conn.hold(path)  # Datasette's own connections keep their locks on the file too
    conn.ledger_path = path
    if immutable:
        conn.snapshot_of = state
    else:
        conn.opened = opened_as or opened
    return conn


def replaced(path: str) -> CaseChanged:
    return CaseChanged(f"{path} was replaced since the server opened it (another file was put in its place): start "
                       "ledger serve again to read the file there now")
