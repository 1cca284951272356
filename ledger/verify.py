"""``ledger verify``: re-derive everything from the requests alone and compare (SPEC 9).

:func:`verify_case` replays every stored event in memory
(:class:`~ledger.replay.Replayer`), loads what the replay derives (events,
contents, helper rows) into a private in-memory database beside the ledger,
and compares in bulk: every events column, contents row, helper row and public
view, then the exported files and the manifest head, then the schema. The
first difference raises ``INTEGRITY_ERROR`` naming its ``seq``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from . import errors as E
from ._files import same_bytes
from ._sql import schema_version, shipped_schema, statement
from .canonical import sha256_hex
from .case import Case
from .errors import LedgerError
from .errors import integrity_error as _bad
from .manifest import check_manifest, read_manifest
from .package import LEDGER_FILE, MANIFEST_FILE, content_path, event_path
from .paths import fs_path
from .replay import PackageSource, Replayer
from .storage import Storage, file_identity, translate_sqlite_errors

Progress = Callable[[int], None]
#: Helper tables compared row by row against the replay.
HELPER_TABLES = ("case_identity", "lifecycle", "revisions", "hypotheses", "policies", "accounts",
                 "grants", "reservations", "results", "result_sources", "closings", "terminations",
                 "evidence_records", "evidence_atoms", "evidence_indexes", "evidence_files")
PUBLIC_VIEWS = ("balances", "balances_recomputed", "actions", "evidence", "case_status")
EVENT_COLUMNS = ("seq", "type", "revision", "stream", "stream_seq", "created_at", "sha256",
                 "parent_sha256", "operation_key", "request_sha256", "body")


@dataclass
class VerifyReport:
    """A passed verification: how much was checked and the head it ends at."""

    package_path: str
    events: int
    contents: int
    head_seq: int
    head_sha256: str
    exported_files_checked: int
    manifest_checked: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__, ok=True)


def _rows_differ(conn: sqlite3.Connection, table: str, order: str) -> tuple[Any, ...] | None:
    """First row (by ``order``) present in only one of main.<table> and orig.<table>."""
    with translate_sqlite_errors():
        return conn.execute(statement("rows_differ", table=table, order=order)).fetchone()


def verify_case(path: str | os.PathLike[str], progress: Progress | None = None) -> VerifyReport:
    """Verify the case at ``path`` (SPEC 9); raise ``INTEGRITY_ERROR`` naming the first bad ``seq``.

    Re-applies every stored request into a scratch ledger and compares event bytes,
    helper rows, public views, exported files that exist, and the manifest head
    (a truncated or rolled-back ledger fails). Writes nothing in the package.
    """
    root = fs_path(path, "case path")
    ledger = root / LEDGER_FILE
    if not ledger.is_file():
        Case.open(root)  # raises the right LEDGER_MISSING
    with tempfile.TemporaryDirectory(prefix="ledger-verify-") as scratch_dir:
        scratch = Storage.scratch(Path(scratch_dir) / "replay.sqlite", ledger)
        immutable = scratch.read_only_source
        before = file_identity(ledger) if immutable else None
        try:
            report = _verify_attached(root, scratch, progress)
        except LedgerError as exc:
            if immutable and exc.code == E.INTEGRITY_ERROR and file_identity(ledger) != before:
                raise _changed_under_us(ledger) from None
            raise
        finally:
            scratch.conn.close()
        if immutable and file_identity(ledger) != before:
            raise _changed_under_us(ledger)
        return report


def _changed_under_us(ledger: Path) -> LedgerError:
    return LedgerError(E.LEDGER_BUSY, f"{ledger} changed while it was read as a read-only snapshot; run verify "
                       "again (on a read-only mount, pause writers elsewhere first)")


def _orig_schema_version(conn: sqlite3.Connection) -> int:
    with translate_sqlite_errors():
        has = conn.execute(statement("has_migrations_table", "orig")).fetchone()
        return conn.execute(statement("schema_version_of", "orig")).fetchone()[0] if has else 0


def _verify_attached(root: Path, scratch: Storage, progress: Progress | None) -> VerifyReport:
    conn = scratch.conn
    version = _orig_schema_version(conn)
    if version > schema_version():
        raise LedgerError(E.SCHEMA_VERSION, f"the ledger has schema version {version}; this case-ledger knows {schema_version()}")
    if version == 0:
        raise LedgerError(E.LEDGER_MISSING, "the ledger holds no schema (an interrupted init?)")

    def content_of(sha: str) -> bytes | None:
        row = conn.execute(statement("content_body", "orig"), {"sha256": sha}).fetchone()
        return None if row is None else _as_bytes(row[0])

    replayer = Replayer(PackageSource(root, content_of), scratch.append, schema_every_event=False)
    expected = 1
    try:
        cursor = conn.execute(statement("events_for_verify", "orig", columns=", ".join(EVENT_COLUMNS)))
        while rows := cursor.fetchmany(512):
            for row in rows:
                stored = dict(zip(EVENT_COLUMNS, row))
                if stored["seq"] != expected:
                    raise _bad(expected, f"event {expected} is missing (next stored seq is {stored['seq']})")
                data = _as_bytes(stored["body"])
                if stored["sha256"] != sha256_hex(data):
                    raise _bad(expected, "stored sha256 does not match the event's bytes (edited event)")
                replayer.apply(expected, data)
                if progress:
                    progress(1)
                expected += 1
        head = conn.execute(statement("newest_event", "orig")).fetchone()
    except sqlite3.DatabaseError as exc:
        raise _bad(expected, f"cannot read the ledger: {exc}") from None
    if head is None:
        raise _bad(1, "the ledger holds no events")
    replayer.finish()
    _compare_rows(conn)
    exported = _check_export(root, conn, head)
    _compare_schema(conn)
    return VerifyReport(str(root), replayer.count,
                        conn.execute(statement("content_count")).fetchone()[0],
                        head[0], head[1], exported, (root / MANIFEST_FILE).exists())


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")


def _compare_rows(conn: sqlite3.Connection) -> None:
    """Events columns, contents, helper rows and views of the ledger against the replay.

    Every table is compared before anything is reported, so the error names the
    smallest differing ``seq`` whichever table it is in.
    """
    found: list[tuple[int, str]] = []
    differing = _rows_differ(conn, "events", "seq")
    if differing is not None:
        found.append((differing[0], "an events column disagrees with the event's body"))
    differing = _rows_differ(conn, "contents", "seq")
    if differing is not None:
        found.append((differing[1], f"content row {differing[0]} disagrees with the replay (edited, extra or swapped)"))
    for table in HELPER_TABLES:
        differing = _rows_differ(conn, table, "seq")
        if differing is not None:
            columns = [d[1] for d in conn.execute(statement("table_columns", table=table))]
            found.append((differing[columns.index("seq")], f"helper table {table} disagrees with the replay"))
    if found:
        seq, message = min(found, key=lambda item: (item[0] if type(item[0]) is int else 2**63, item[1]))
        raise _bad(seq if type(seq) is int else None, message)
    for view in PUBLIC_VIEWS:
        try:
            differing = _rows_differ(conn, view, "1")
        except LedgerError as exc:
            raise _bad(None, f"view {view} cannot be read: {exc.message}", view=view) from None
        if differing is not None:
            raise _bad(None, f"view {view} disagrees with the replay: {differing}", view=view)


#: Tables SQLite creates on its own (``sqlite_autoindex_*`` indexes have no SQL text and never show up).
SQLITE_OWN_TABLES = frozenset({"sqlite_sequence", "sqlite_stat1", "sqlite_stat2", "sqlite_stat3", "sqlite_stat4"})


def _compare_schema(conn: sqlite3.Connection) -> None:
    """Triggers, views, indexes and tables must be exactly the shipped ones, none missing, altered
    or added (checked last: no seq to name)."""
    shipped = shipped_schema()
    present = dict(conn.execute(statement("schema_objects", "orig")))
    for name, sql in sorted(shipped.items()):
        if present.get(name) != sql:
            raise _bad(None, f"schema object {name} is missing or altered (a dropped trigger leaves the ledger unguarded)",
                       object=name)
    # only the tables SQLite makes itself (ANALYZE's statistics, AUTOINCREMENT's counters) are tolerated;
    # a trigger slipped in under a sqlite_ name with writable_schema is as foreign as any other
    foreign = sorted(name for name in present if name not in shipped and name not in SQLITE_OWN_TABLES)
    if foreign:
        raise _bad(None, f"schema object {foreign[0]} is not the ledger's own (a foreign trigger, table, view or "
                   "index can block or alter writes)", object=foreign[0])


def _check_export(root: Path, conn: sqlite3.Connection, head: tuple[int, str]) -> int:
    """Exported files that exist must hold the ledger's bytes; the manifest must be what an
    export at its head writes; an exported event the ledger no longer has means truncation."""
    manifest = read_manifest(root)
    checked = 0
    if manifest is not None:
        check_manifest(manifest, conn, head[0])
    known = {event_path(*row) for row in conn.execute(statement("event_addresses"))}
    for relative, path in _exported_event_files(root):
        if relative not in known:
            try:
                seq = json.loads(path.read_bytes()).get("seq")
            except (ValueError, AttributeError, RecursionError, OSError):
                continue  # not an event of ours: not evidence of truncation
            if type(seq) is int and seq > head[0]:
                raise _bad(head[0] + 1, f"{relative} holds event {seq} but the ledger ends at seq {head[0]} "
                           "(truncated or rolled-back ledger)")
    limit = manifest["head"]["seq"] if manifest else 0
    for seq, stream, revision, stream_seq, body in conn.execute(statement("events_for_export")):
        target = root / event_path(stream, revision, stream_seq)
        if target.exists() or target.is_symlink():
            if not same_bytes(target, _as_bytes(body)):
                raise _bad(seq, f"exported file {event_path(stream, revision, stream_seq)} differs from the ledger")
            checked += 1
        elif seq <= limit:
            raise _bad(seq, f"exported file {event_path(stream, revision, stream_seq)} is missing")
    for sha, seq, body in conn.execute(statement("contents_for_export")):
        target = root / content_path(sha)
        if target.exists() or target.is_symlink():
            if not same_bytes(target, _as_bytes(body)):
                raise _bad(seq, f"exported content {sha} differs from the ledger")
            checked += 1
        elif seq <= limit:
            raise _bad(seq, f"exported content {sha} is missing")
    return checked


def _exported_event_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(relative path, path) of every file in the exported event folders."""
    folders = [root / "analysis" / "case" / "events"]
    budgets = root / "analysis" / "budgets"
    if budgets.is_dir():
        folders += sorted(p / "events" for p in budgets.iterdir() if p.is_dir())
    for folder in folders:
        if folder.is_dir():
            for entry in os.scandir(folder):
                if entry.name.endswith(".json") and not entry.name.startswith("."):
                    yield Path(entry.path).relative_to(root).as_posix(), Path(entry.path)


