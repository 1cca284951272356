"""Export, import and verify (SPEC section 9).

* :func:`export_case` writes every event and content row as the exact canonical
  bytes stored in the ledger, each file atomically (temp file, fsync, rename),
  fsyncs the directories it touched and writes ``manifest.json`` last, so the
  manifest never points at a file that is missing or different. It is
  idempotent and incremental: files already holding the right bytes are left alone.
* :func:`verify_case` re-applies every stored request with the rules into a
  scratch ledger and compares: every event's bytes, every helper row, every
  public view, the export tree and the manifest's head. The first difference
  raises ``INTEGRITY_ERROR`` naming its ``seq``.
* :func:`import_tree` rebuilds ``ledger.sqlite`` from an exported tree through the
  same re-application, accepting only regular files inside the tree.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator, Mapping

from . import errors as E
from . import rules
from .canonical import canonical_bytes, canonical_event_bytes, parse_json, sha256_hex
from .case import ANALYSIS_DIR, EXPORT_TEMP_PREFIX, MANIFEST_FILE, Case, is_ledger_own, resolve_source_refs
from .config import BudgetConfig
from .errors import LedgerError
from .paths import fs_path, os_error
from .schemas import validator
from .storage import (LEDGER_FILE, SqlView, Storage, WriterLock, content_path, event_path, file_uri, schema_version,
                      TRANSACTION_CONTROL, file_identity, readable_uri, shipped_schema, statement,
                      translate_sqlite_errors)

Progress = Callable[[int], None]
MANIFEST_FORMAT = "case-manifest-v1"
#: How long an export waits for another export of the same package to finish.
EXPORT_LOCK_WAIT_MS = 3_600_000
#: Helper tables compared row by row against the replay, with the column that names the event.
HELPER_TABLES = ("case_identity", "lifecycle", "revisions", "hypotheses", "policies", "accounts",
                 "grants", "reservations", "results", "result_sources", "closings", "terminations",
                 "evidence_records")
PUBLIC_VIEWS = ("balances", "balances_recomputed", "actions", "evidence", "case_status")
EVENT_COLUMNS = ("seq", "type", "revision", "stream", "stream_seq", "created_at", "sha256",
                 "parent_sha256", "operation_key", "request_sha256", "body")


def _bad(seq: int | None, message: str, **details: Any) -> LedgerError:
    where = f"seq {seq}: " if seq is not None else ""
    return LedgerError(E.INTEGRITY_ERROR, where + message, seq=seq, **details)


# --- atomic files ------------------------------------------------------------------
def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_file_mode() -> int:
    """``0o666`` less the process umask: the mode ``open()`` gives a new file (``0o644`` under umask 022)."""
    try:
        with open("/proc/self/status", "rb") as status:  # reads the umask without changing it
            for line in status:
                if line.startswith(b"Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder, fsync, rename.

    The caller fsyncs the folder (once per batch of files). A crash leaves either
    the old file or the new one, plus at most a ``.ledger-tmp-*`` leftover. The
    file gets ``mode`` (default :func:`new_file_mode`; pass it when writing many).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=EXPORT_TEMP_PREFIX + path.name + ".", dir=path.parent)
    try:
        try:
            # mkstemp's 0600 would hide the export from other readers
            os.fchmod(fd, new_file_mode() if mode is None else mode)
            handle = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)  # not yet owned by a file object: nothing else would close it
            raise
        with handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def _same_bytes(path: Path, data: bytes) -> bool:
    try:
        if path.is_symlink() or path.stat().st_size != len(data):
            return False
        return path.read_bytes() == data
    except OSError:
        return False


@dataclass
class ExportReport:
    """What an export did: files written and left alone, the manifest it wrote."""

    package_path: str
    files_written: int = 0
    files_unchanged: int = 0
    manifest: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"package_path": self.package_path, "files_written": self.files_written,
                "files_unchanged": self.files_unchanged, "manifest": self.manifest}


def _remove_empty_parents(directory: Path, root: Path) -> None:
    """Remove folders an interrupted export created, up to (not including) ``root``."""
    while directory != root and root in directory.parents:
        try:
            directory.rmdir()
        except OSError:
            return  # not empty: it held files before
        directory = directory.parent


def _stale_temp_files(root: Path) -> Iterator[Path]:
    analysis = root / ANALYSIS_DIR
    if analysis.is_dir():
        for directory, _, names in os.walk(analysis):
            for name in names:
                if name.startswith(EXPORT_TEMP_PREFIX):
                    yield Path(directory, name)
    for name in os.listdir(root):
        if name.startswith(EXPORT_TEMP_PREFIX + MANIFEST_FILE + "."):  # only what write_atomic names
            yield root / name


def manifest_for(conn: sqlite3.Connection, head_seq: int, schema: str = "main") -> dict[str, Any] | None:
    """The manifest an export at ``head_seq`` writes, from the ledger tables in ``schema``."""
    head = conn.execute(statement("manifest_head", schema), {"seq": head_seq}).fetchone()
    if head is None:
        return None
    case_id, package_id = conn.execute(statement("manifest_identity", schema)).fetchone()
    state, revision = conn.execute(statement("manifest_lifecycle", schema), {"seq": head_seq}).fetchone()
    budget = conn.execute(statement("manifest_budget_artifact", schema), {"seq": head_seq}).fetchone()
    return {
        "format": MANIFEST_FORMAT, "case_id": case_id, "package_id": package_id, "state": state,
        "analysis_revision": revision, "package_generation": head_seq,
        "head": {"seq": head_seq, "sha256": head[0]},
        "artifacts": {"budget_ledger": {"path": event_path(*budget[:3]), "sha256": budget[3]} if budget else None,
                      "evidence_index": None},
    }


def _check_manifest(manifest: Mapping[str, Any], conn: sqlite3.Connection, ledger_head: int,
                    schema: str = "main") -> None:
    """The manifest must be exactly what an export of this ledger at its head would write."""
    head_seq = manifest["head"]["seq"]
    expected = manifest_for(conn, head_seq, schema)
    if expected is None:
        raise _bad(ledger_head + 1, f"the ledger ends at seq {ledger_head} but its export reached seq {head_seq} "
                   "(truncated or rolled-back ledger)", manifest_head_seq=head_seq)
    if expected["head"] != manifest["head"]:
        raise _bad(head_seq, "the event at the exported head differs from the manifest's sha256")
    wrong = sorted(key for key in set(expected) | set(manifest) if expected.get(key) != manifest.get(key))
    if wrong:
        raise _bad(None, f"manifest.json disagrees with the ledger at seq {head_seq} in: {', '.join(wrong)}",
                   fields=wrong)


def export_count(case: Case) -> int:
    """Number of files an export of ``case`` consists of (events + contents + manifest)."""
    with case.storage.read():
        events = case.storage.conn.execute(statement("event_count")).fetchone()[0]
        contents = case.storage.conn.execute(statement("content_count")).fetchone()[0]
    return events + contents + 1


def export_case(case: Case, progress: Progress | None = None) -> ExportReport:
    """Export ``case`` to ``<package>/analysis/`` and ``manifest.json`` (SPEC 9).

    Reads one consistent snapshot of the ledger; writes only files whose bytes
    differ; writes the manifest last. If anything fails before the manifest is
    replaced (an exception, ``KeyboardInterrupt`` included), the files this run
    created are removed again, so the tree is as it was. Raises
    ``STORAGE_ERROR`` if the folder cannot be written.
    """
    root = case.path
    # one export at a time per package: a concurrent one would see our temp files as stale
    lock = WriterLock(root / (LEDGER_FILE + "-export-lock"))
    try:
        fd = lock.acquire(EXPORT_LOCK_WAIT_MS)
    except OSError as exc:
        raise os_error(exc, f"cannot write the export under {root}", E.STORAGE_ERROR) from None
    try:
        return _export_locked(case, root, progress)
    finally:
        WriterLock.release(fd)


def _export_locked(case: Case, root: Path, progress: Progress | None) -> ExportReport:
    report = ExportReport(str(root))
    for leftover in _stale_temp_files(root):
        leftover.unlink(missing_ok=True)
    touched: set[Path] = set()
    created: list[Path] = []
    committed = False
    mode = new_file_mode()  # once per export, not once per file

    def put(relative: str, data: bytes) -> None:
        target = root / relative
        if _same_bytes(target, data):
            report.files_unchanged += 1
        else:
            if not target.exists():
                created.append(target)
            write_atomic(target, data, mode)
            report.files_written += 1
            touched.add(target.parent)
        if progress:
            progress(1)

    storage = case.storage
    try:
        with storage.read():
            conn = storage.conn
            head_seq = 0
            for seq, stream, revision, stream_seq, body in conn.execute(statement("events_for_export")):
                put(event_path(stream, revision, stream_seq), body.encode("utf-8"))
                head_seq = seq
            for sha, _seq, body in conn.execute(statement("contents_for_export")):
                put(content_path(sha), body.encode("utf-8"))
            manifest = manifest_for(conn, head_seq)
        for directory in sorted(touched, key=lambda p: len(p.parts), reverse=True):
            _fsync_dir(directory)
            # new folders must survive too: their parents gained an entry
            for parent in directory.relative_to(root).parents:
                _fsync_dir(root / parent)
        data = canonical_bytes(manifest)
        if _same_bytes(root / MANIFEST_FILE, data):
            report.files_unchanged += 1
            committed = True
        else:
            write_atomic(root / MANIFEST_FILE, data, mode)
            committed = True
            _fsync_dir(root)
            report.files_written += 1
        if progress:
            progress(1)
    except BaseException as exc:
        if not committed:
            for path in reversed(created):
                path.unlink(missing_ok=True)
                _remove_empty_parents(path.parent, root)
        if isinstance(exc, OSError):
            raise os_error(exc, f"cannot write the export under {root}", E.STORAGE_ERROR) from None
        raise
    report.manifest = manifest
    return report


# --- re-application (shared by verify and import) -----------------------------
class Replayer:
    """Re-applies stored events, one at a time, into ``target`` and checks each byte.

    ``package_root`` is where source references are resolved (their sha256 must
    still match). ``content_of(sha256)`` returns stored content bytes or None.
    """

    def __init__(self, target: Storage, package_root: Path, content_of: Callable[[str], bytes | None],
                 *, schema_every_event: bool = True) -> None:
        self.target = target
        self.schema_every_event = schema_every_event
        self._schema_checked: set[tuple[str, str]] = set()
        self.view = SqlView(target)
        self.package_root = package_root
        self.content_of = content_of
        self._source_case = _SourceResolver(package_root)
        self.previous_sha = "0" * 64
        self.previous_at = ""
        self.count = 0

    def apply(self, seq: int, data: bytes) -> dict[str, Any]:
        """Check and re-apply the event expected at ``seq`` whose stored bytes are ``data``.

        The event is rebuilt from its request alone (plus its time and actor) and
        its canonical bytes must equal ``data``: that one comparison proves the
        stored bytes canonical and every derived field right.
        """
        try:
            body = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise _bad(seq, f"stored event is not valid JSON: {exc}") from None
        if type(body) is not dict:
            raise _bad(seq, "stored event is not a JSON object")
        if body.get("seq") != seq:
            raise _bad(seq, f"expected event seq {seq}, found {body.get('seq')!r} (deleted, duplicated or reordered history)")
        if body.get("parent_sha256") != self.previous_sha:
            raise _bad(seq, "parent_sha256 does not match the previous event (reordered, forked or edited history)")
        fmt = body.get("format")
        if fmt not in ("case-event-v1", "budget-event-v1"):
            raise _bad(seq, f"unknown event format {fmt!r}")
        errors = self._schema_errors(fmt, body)
        if errors:
            where = ".".join(str(p) for p in errors[0].absolute_path) or "(top level)"
            raise _bad(seq, f"event does not match schema {fmt}: {where}: {errors[0].message}")
        created_at, actor = body.get("created_at"), body.get("actor")
        if type(created_at) is not str or type(actor) is not str or type(body.get("request")) is not dict:
            raise _bad(seq, "event lacks a created_at, actor or request")
        if created_at < self.previous_at:
            raise _bad(seq, "created_at goes back in time")
        draft = self._recompute(seq, body)
        rebuilt = dict(draft.fields)
        rebuilt.update(seq=seq, parent_sha256=self.previous_sha, created_at=created_at,
                       actor=actor, request=draft.request)
        try:
            expected = canonical_event_bytes(rebuilt)
        except LedgerError as exc:
            raise _bad(seq, f"the recomputed event has no canonical form: {exc.message}") from None
        if expected != data:
            keys = sorted(k for k in set(rebuilt) | set(body) if rebuilt.get(k) != body.get(k))
            detail = ", ".join(keys) if keys else "its byte form (not canonical JSON)"
            raise _bad(seq, f"event differs from its recomputation from the request in: {detail}", fields=keys)
        self.target.append_bytes(data, body, draft.operation_key, draft.contents)
        self.previous_sha = sha256_hex(data)
        self.previous_at = created_at
        self.count += 1
        return body

    def _schema_errors(self, fmt: str, body: dict[str, Any]) -> list[Any]:
        """JSON Schema errors of ``body``.

        With ``schema_every_event`` (import: external input) every event is
        validated. Otherwise (verify of the ledger's own events) the first event of
        each type is: for the rest, the shape checks re-validate the request and the
        byte-for-byte equality with the recomputed event covers every other field.
        """
        kind = (fmt, str(body.get("type")))
        if self.schema_every_event or kind not in self._schema_checked:
            self._schema_checked.add(kind)
            return sorted(validator(fmt).iter_errors(body), key=lambda e: list(e.absolute_path))
        return []

    def _recompute(self, seq: int, body: Mapping[str, Any]) -> rules.Draft:
        request = body["request"]
        try:
            op = request.get("op")
            if op == "create":
                normalized = rules.shape_create(request.get("case_id"), request.get("package_id"))
                outcome: rules.Draft | rules.Reused = rules.create(self.view, normalized)
            elif op == "open_revision":
                normalized = rules.shape_open_revision(
                    request.get("hypotheses"), request.get("units_per_hypothesis"),
                    default_units=1, max_hypotheses=_int_or(request.get("max_hypotheses"), 1))
                outcome = rules.open_revision(self.view, normalized)
            elif op == "transition":
                normalized = rules.shape_transition(request.get("to"))
                outcome = rules.transition(self.view, normalized)
            elif op == "initialize":
                normalized = rules.shape_initialize()
                policy = BudgetConfig.from_mapping(body.get("policy") or {})
                outcome = rules.initialize(self.view, normalized, policy, None)
            elif op == "reserve":
                normalized = rules.shape_reserve(request.get("hypothesis_id"), request.get("action_id"), request.get("action"))
                outcome = rules.reserve(self.view, normalized, None, None)
            elif op == "record_result":
                sha = request.get("evidence_sha256")
                payload = self.content_of(sha) if isinstance(sha, str) else None
                if payload is None:
                    raise _bad(seq, f"evidence content {sha} is missing")
                if sha256_hex(payload) != sha:
                    raise _bad(seq, f"evidence content {sha} does not match its hash (swapped or edited)")
                evidence = parse_json(payload)
                normalized, canonical = rules.shape_record_result(
                    request.get("hypothesis_id"), request.get("action_id"), evidence,
                    request.get("source_refs"), evidence_bytes_max=None)
                if canonical != payload:
                    raise _bad(seq, f"evidence content {sha} is not canonical JSON")
                sources = self._source_case.resolve(normalized["source_refs"], seq)
                outcome = rules.record_result(self.view, normalized, payload, sources, None, None)
            elif op == "settle":
                normalized = rules.shape_settle(request.get("hypothesis_id"), request.get("action_id"),
                                                request.get("semantic_score"), request.get("reason"))
                outcome = rules.settle(self.view, normalized, None, None)
            elif op == "fail":
                normalized = rules.shape_fail(request.get("hypothesis_id"), request.get("action_id"), request.get("reason"))
                outcome = rules.fail(self.view, normalized, None, None)
            elif op == "reject":
                normalized = rules.shape_reject(request.get("hypothesis_id"), request.get("reason"))
                outcome = rules.reject(self.view, normalized, None, None)
            else:
                raise _bad(seq, f"unknown operation {op!r} in the request")
        except LedgerError as exc:
            if exc.code == E.INTEGRITY_ERROR and exc.details.get("seq") == seq:
                raise
            raise _bad(seq, f"the stored request is refused on replay: {exc.code}: {exc.message}",
                       replay_code=exc.code) from None
        if isinstance(outcome, rules.Reused):
            raise _bad(seq, f"the request repeats the operation of seq {outcome.seq}")
        if normalized != request:
            raise _bad(seq, "the stored request is not in its normalized form")
        return outcome


def _int_or(value: Any, default: int) -> int:
    return value if type(value) is int else default


class _SourceResolver:
    """Resolves source refs against a package folder for re-application."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def resolve(self, refs: list[str], seq: int) -> list[dict[str, str]]:
        try:
            return resolve_source_refs(self.root, refs) if refs else []
        except LedgerError as exc:
            raise _bad(seq, f"source reference no longer resolves: {exc.message}") from None


# --- verify -------------------------------------------------------------------------
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


def _scratch_storage(directory: str, original: Path) -> Storage:
    """A throwaway ledger with ``original`` attached read-only as ``orig``, inside one transaction.

    Being one transaction, every read of ``orig`` sees the same snapshot even if
    a writer appends meanwhile.
    """
    path = Path(directory) / "replay.sqlite"
    conn = sqlite3.connect(file_uri(path, "rwc"), uri=True, isolation_level=None, check_same_thread=False,
                           **TRANSACTION_CONTROL)
    with translate_sqlite_errors():
        conn.execute("PRAGMA journal_mode = OFF")  # no durability needed for a scratch copy
        source, immutable = readable_uri(original)
        conn.execute("ATTACH DATABASE ? AS orig", (source,))
    storage = Storage(conn, path, {"synchronous": "OFF", "busy_timeout_ms": 5000})
    storage.read_only_source = immutable
    with translate_sqlite_errors():
        conn.execute("BEGIN")
    storage._in_write = True  # one long private transaction; no writer lock needed
    storage.apply_migrations(triggers=False)  # private and rebuilt from scratch: no guards needed
    return storage


def _rows_differ(conn: sqlite3.Connection, table: str, order: str) -> tuple[Any, ...] | None:
    """First row (by ``order``) present in only one of main.<table> and orig.<table>."""
    with translate_sqlite_errors():
        return conn.execute(statement("rows_differ", table=table, order=order)).fetchone()


def read_manifest(root: Path) -> dict[str, Any] | None:
    """``manifest.json`` parsed and schema-checked, or None when absent."""
    path = root / MANIFEST_FILE
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file():
        raise _bad(None, "manifest.json is not a regular file")
    data = path.read_bytes()
    try:
        manifest = parse_json(data)
    except LedgerError as exc:
        raise _bad(None, f"manifest.json is not valid JSON: {exc.message}") from None
    errors = list(validator(MANIFEST_FORMAT).iter_errors(manifest))
    if errors:
        raise _bad(None, f"manifest.json does not match {MANIFEST_FORMAT}: {errors[0].message}")
    # JSON Schema's "integer" accepts 10.0: integers must really be ints
    for value in (manifest["head"]["seq"], manifest["analysis_revision"], manifest["package_generation"]):
        if type(value) is not int:
            raise _bad(None, f"manifest.json holds {value!r} where an integer belongs")
    if canonical_bytes(manifest) != data:  # export writes canonical bytes (SPEC 4); anything else was edited
        raise _bad(None, "manifest.json is not in canonical form (RFC 8785): it was rewritten after export")
    return manifest


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
        scratch = _scratch_storage(scratch_dir, ledger)
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

    replayer = Replayer(scratch, root, content_of, schema_every_event=False)
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
        _check_manifest(manifest, conn, head[0])
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
            if not _same_bytes(target, _as_bytes(body)):
                raise _bad(seq, f"exported file {event_path(stream, revision, stream_seq)} differs from the ledger")
            checked += 1
        elif seq <= limit:
            raise _bad(seq, f"exported file {event_path(stream, revision, stream_seq)} is missing")
    for sha, seq, body in conn.execute(statement("contents_for_export")):
        target = root / content_path(sha)
        if target.exists() or target.is_symlink():
            if not _same_bytes(target, _as_bytes(body)):
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


# --- import -------------------------------------------------------------------------
def _walk_regular(root: Path) -> Iterator[tuple[str, Path]]:
    """Every file below ``root`` as (posix relative path, path); links and specials refused."""
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(directory, name)
            info = os.lstat(full)
            relative = full.relative_to(root).as_posix()
            if stat.S_ISLNK(info.st_mode):
                raise LedgerError(E.INVALID_ARGUMENT, f"import accepts no links: {relative}")
            if name in dirnames:
                continue
            if not stat.S_ISREG(info.st_mode):
                raise LedgerError(E.INVALID_ARGUMENT, f"import accepts only regular files: {relative}")
            yield relative, full


def import_tree(source: str | os.PathLike[str], to: str | os.PathLike[str] | None = None,
                progress: Progress | None = None) -> VerifyReport:
    """Rebuild a case package from an exported tree (SPEC 9) and verify it.

    ``source`` is a package folder with ``manifest.json`` and ``analysis/``; ``to``
    a new (absent or empty) folder, or ``source`` itself when its ``ledger.sqlite``
    was lost. Inputs (``sources/``, ``data/``, other files) are copied. Only
    regular files inside the tree are accepted (``INVALID_ARGUMENT`` for links,
    devices, ``..``); every event is re-applied and compared byte for byte
    (``INTEGRITY_ERROR`` naming the seq). Writes nothing if anything fails.
    """
    src = fs_path(source, "import source")
    dest = fs_path(to, "import target") if to is not None else src
    if not src.is_dir():
        raise LedgerError(E.INVALID_ARGUMENT, f"{src} is not a folder")
    in_place = dest.resolve() == src.resolve()
    if in_place:
        if (src / LEDGER_FILE).exists():
            raise LedgerError(E.CASE_EXISTS, f"{src} already has a {LEDGER_FILE}; import into a new folder")
    elif dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise LedgerError(E.CASE_EXISTS, f"{dest} exists and is not empty")
    elif dest.resolve().is_relative_to(src.resolve()):
        raise LedgerError(E.INVALID_ARGUMENT, f"{dest} is inside {src}: the new case would become one of "
                          "the source package's inputs; import to a folder outside it")
    manifest = read_manifest(src)
    if manifest is None:
        raise LedgerError(E.INVALID_ARGUMENT, f"{src} has no manifest.json: not an exported case")
    files = dict(_walk_regular(src))
    events: dict[int, str] = {}
    for relative in files:
        pure = PurePosixPath(relative)
        if pure.parts[0] != ANALYSIS_DIR or pure.name.startswith(EXPORT_TEMP_PREFIX):
            continue
        if (len(pure.parts) == 4 and pure.parts[1:3] == ("case", "events")) or (
                len(pure.parts) == 5 and pure.parts[1] == "budgets" and pure.parts[3] == "events"):
            try:
                seq = json.loads(files[relative].read_bytes()).get("seq")
            except (ValueError, AttributeError, RecursionError):
                raise _bad(None, f"{relative} is not an event") from None
            if type(seq) is not int or seq in events:
                raise _bad(seq if type(seq) is int else None, f"{relative} repeats or lacks an event seq")
            events[seq] = relative
    # the manifest is the export's commit point: events after its head are ignored
    head_seq = manifest["head"]["seq"]
    missing = next((i for i in range(1, head_seq + 1) if i not in events), None)
    if missing is not None:
        raise _bad(missing, f"the export has no event {missing} (its manifest names head seq {head_seq})")

    def content_of(sha: str) -> bytes | None:
        relative = content_path(sha)
        return files[relative].read_bytes() if relative in files else None

    # a new package is built in a hidden sibling folder and renamed into place at the end,
    # so an interrupted import leaves the target absent and can simply be run again
    build_dir = src if in_place else dest.parent / f".{dest.name}.importing-{os.getpid()}-{time.time_ns()}"
    building = build_dir / (LEDGER_FILE + "-import")
    scratch_files = [Path(str(building) + suffix) for suffix in ("", "-wal", "-shm", "-lock")]
    try:
        if not in_place:
            build_dir.mkdir(parents=True)
            for relative, full in files.items():
                if is_ledger_own(PurePosixPath(relative)):
                    continue
                target = build_dir / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(full, target)
                shutil.copymode(full, target)  # an executable or read-only input stays so
        for leftover in scratch_files:
            leftover.unlink(missing_ok=True)
        storage = Storage.create(building)
        try:
            with storage.write():
                storage.apply_migrations()
                replayer = Replayer(storage, build_dir, content_of)
                for seq in range(1, head_seq + 1):
                    relative = events[seq]
                    data = files[relative].read_bytes()
                    body = replayer.apply(seq, data)
                    stream = "budget" if body["format"] == "budget-event-v1" else "case"
                    stream_seq = storage.one("event_by_seq", seq=seq)[4]
                    if event_path(stream, body["revision"], stream_seq) != relative:
                        raise _bad(seq, f"{relative} is not where event {seq} belongs")
                    if progress:
                        progress(1)
                _check_manifest(manifest, storage.conn, head_seq)
        finally:
            storage.close()
        for suffix in ("-wal", "-shm"):
            # a lost ledger's log must never be replayed onto the rebuilt file: keep it aside
            stale = build_dir / (LEDGER_FILE + suffix)
            if stale.exists():
                os.replace(stale, build_dir / f"{LEDGER_FILE}{suffix}.orphaned-{time.time_ns()}")
        os.replace(building, build_dir / LEDGER_FILE)
        _fsync_dir(build_dir)
        if not in_place:
            if dest.exists():
                dest.rmdir()  # checked empty above
            os.rename(build_dir, dest)
            _fsync_dir(dest.parent)
    except BaseException:
        for leftover in scratch_files:
            leftover.unlink(missing_ok=True)
        if not in_place:
            shutil.rmtree(build_dir, ignore_errors=True)
        raise
    for leftover in scratch_files:
        leftover.unlink(missing_ok=True)
    with Case.open(dest) as case:
        export_case(case)
    return verify_case(dest)
