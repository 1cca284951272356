"""``ledger export``: the ledger as canonical JSON files under ``analysis/`` (docs/files.md).

:func:`export_case` writes every event and content row as the exact canonical
bytes stored in the ledger, each file atomically (temp file, fsync, rename; in
batches, so that one file system commit covers many files), fsyncs the
directories it touched and writes ``manifest.json`` last, so the manifest never
points at a file that is missing or different. It is idempotent
and incremental: files already holding the right bytes are left alone.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator

from ..ground import errors as E
from .atomic_files import (discard, fsync_dir, fsync_folders, new_file_mode, remove_empty_folder, same_bytes,
                           write_atomic, write_atomic_many)
from ..storage.writer_lock import WriterLock
from ..storage.sqlfiles import statement
from ..storage.sqlite_file import undecodable, undecodable_text
from ..ground.arguments import check_callback, check_instance
from ..ground.canonical import ZERO_SHA256, canonical_bytes, sha256_hex
from ..ground.errors import LedgerError, refuses_unfit_calls, refuses_unfit_calls_of, pass_on_interruption
from ..services.case import Case
from .manifest import check_manifest_identity, manifest_for, read_manifest
from .lost_history import lost_continuation
from ..model.package import (ANALYSIS_DIR, CONTENT_FILE_RE, LEDGER_FILE, MANIFEST_FILE, check_package_names, content_path, is_export_temp,
                      event_path, export_tree_files, refuse_own_links, well_placed, check_export_tree)
from ..ground.paths import EXPORT_FILE_BYTES_MAX, bytes_at_most, os_error, walk
from ..ground.workers import stop_requested

Progress = Callable[[int], None]
#: How long an export waits for another export of the same package to finish.
EXPORT_LOCK_WAIT_MS = 3_600_000
#: Files written (and fsynced) together: one file system journal commit for the batch, at most this
#: many temp files left over by a crash, and this many descriptors open at once.
WRITE_BATCH = 128


@refuses_unfit_calls_of
@dataclass
class ExportReport:
    """What an export did: files written and left alone, the manifest it wrote."""

    package_path: str
    files_written: int = 0
    files_unchanged: int = 0
    manifest: dict[str, Any] = field(default_factory=dict)
    #: A file under ``analysis/`` that is no part of the export, as verify names it (None: none):
    #: the export leaves it, and verify and import refuse the package until it is moved out.
    stray: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"package_path": self.package_path, "files_written": self.files_written,
                "files_unchanged": self.files_unchanged, "manifest": self.manifest, "stray": self.stray}

    def notes(self) -> list[str]:
        """Lines for people about what the export left that verify and import refuse."""
        return [f"{self.stray}; verify and import refuse the package until it is moved out"] if self.stray else []


def _stale_temp_files(root: Path) -> Iterator[Path]:
    analysis = root / ANALYSIS_DIR
    if analysis.is_dir():
        for directory, _, names in walk(analysis):
            for name in names:
                path = Path(directory, name)
                if is_export_temp(path.relative_to(root).as_posix()):  # only what an export names so
                    yield path
    for name in os.listdir(root):
        if is_export_temp(name):  # only what write_atomic names for manifest.json
            yield root / name


def _make_folder(folder: Path, made: list[Path]) -> bool:
    """Make ``folder`` (and its parents), each folder it is to make added to ``made`` first (so that one
    made before a failure partway, the disk out of inodes, is removed too); True when ``folder`` did not
    exist (so it holds no file). Something else of that name makes the writes into it fail, and they say
    why."""
    missing: list[Path] = []
    probe = folder
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    made.extend(missing)
    try:
        folder.mkdir(parents=True)
    except (FileExistsError, NotADirectoryError):
        return False
    return bool(missing)


def read_manifest_if_readable(root: Path) -> dict[str, Any] | None:
    """The package's ``manifest.json`` as :func:`read_manifest` reads it, or None when there is none or
    it cannot be read (an export repairs that)."""
    try:
        return read_manifest(root)
    except LedgerError:
        return None


def _export_files(conn: sqlite3.Connection) -> Iterator[tuple[str, bytes]]:
    """``(relative path, bytes)`` of every file an export holds but the manifest: the events in
    order, then the contents."""
    for _seq, stream, revision, stream_seq, body, _sha, _parent in conn.execute(statement("events_to_export")):
        yield event_path(stream, revision, stream_seq), _stored_text(body, f"event {_seq}")
    for sha, _seq, body in conn.execute(statement("contents_for_export")):
        yield content_path(sha), _stored_text(body, f"content {sha}")


def _files_to_write(root: Path, conn: sqlite3.Connection, manifest: dict[str, Any] | None, report: ExportReport,
                    progress: Progress | None) -> tuple[set[str], int, set[str]]:
    """The files whose bytes differ from the ledger's (or are missing), each checked, the head seq,
    and every file the export holds (its events' and contents' paths).

    ``INTEGRITY_ERROR``, before anything is written (docs/files.md, "Exported files"), when an event
    does not hash to its sha256, does not name the seq and parent the chain gives it, or goes to
    another event's file or to no plain path under ``analysis/``; when a content to be written does
    not hash to its name; when a file to be replaced holds an event or content of this case; or
    when the exported ``manifest.json`` names a head the ledger does not hold (a history rewritten
    or truncated since it was exported, or another case's export)."""
    if manifest is not None:  # another package's manifest is named so, as verify names it
        try:
            check_manifest_identity(manifest, conn)
        except LedgerError as exc:
            raise _refused(exc.message) from None
    to_write: set[str] = set()
    head_seq, previous = 0, ZERO_SHA256
    folders: dict[Path, bool] = {}
    paths: set[str] = set()
    shas: set[str] = set()
    for seq, stream, revision, stream_seq, body, sha, parent in conn.execute(statement("events_to_export")):
        data = _stored_text(body, f"event {seq}")
        # every event, written or not: its bytes hash to its sha256 and name the seq and parent the
        # chain gives it (its columns alone could be patched to fit), and it has a file of its own
        if seq != head_seq + 1 or parent != previous or not _names(data, seq, previous):
            raise _refused(f"seq {seq}: the ledger's event does not follow event {head_seq} (a removed or "
                           "re-chained event)")
        if sha256_hex(data) != sha:
            raise _refused(f"seq {seq}: the ledger's event does not hash to its sha256 (an edited event)")
        if not well_placed(stream, revision, stream_seq):
            raise _refused(f"seq {seq}: the ledger's events row places the event by stream {stream!r}, revision "
                           f"{revision!r}, stream_seq {stream_seq!r}, where text and integers belong (an edited column)")
        relative = event_path(stream, revision, stream_seq)
        if relative in paths or not _plain_path(relative):
            raise _refused(f"seq {seq}: the ledger places the event at {relative!r}, "
                           f"{'where another event goes' if relative in paths else 'which is no plain path under analysis/'} "
                           "(an edited column)")
        paths.add(relative)
        shas.add(sha)
        if not _differs(root, relative, data, folders, to_write):
            _unchanged(report, progress)
        if manifest is not None and seq == manifest["head"]["seq"] and sha != manifest["head"]["sha256"]:
            raise _refused(f"seq {seq}: the ledger's event is not the one the exported manifest.json names as its "
                           "head (a history rewritten since it was exported, or another case's export)")
        head_seq, previous = seq, sha
    if manifest is not None and manifest["head"]["seq"] > head_seq:
        raise _refused(f"the exported manifest.json names event {manifest['head']['seq']} as its head, but the "
                       f"ledger ends at seq {head_seq} (truncated or rolled back since it was exported, or copied without "
                       "its ledger.sqlite-wal: if the export is the newer copy, 'ledger import' it into a new folder)")
    for sha, _seq, body in conn.execute(statement("contents_for_export")):
        paths.add(content_path(sha))
        data = _stored_text(body, f"content {sha}")
        if _differs(root, content_path(sha), data, folders, to_write):
            if sha256_hex(data) != sha:
                raise _refused(f"the ledger's content {sha} does not hash to its name (an edited content)")
        else:
            _unchanged(report, progress)
    for relative in sorted(to_write):
        _refuse_replacing_a_sound_file(root, relative, shas)
    return to_write, head_seq, paths


def _refuse_replacing_a_sound_file(root: Path, relative: str, shas: set[str]) -> None:
    """``INTEGRITY_ERROR`` when the exported file ``relative``, which the ledger's bytes would replace,
    holds an event of this case (its bytes hash to an event's sha256) or a content (they hash to the
    name it has): an export of a sound ledger never finds one where another file belongs, so either
    the ledger's columns were edited to place an event there, or exported files were moved by hand."""
    target = root / relative
    try:
        if not stat.S_ISREG(os.lstat(target).st_mode):
            return
        data = bytes_at_most(target, EXPORT_FILE_BYTES_MAX)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return  # missing or unreadable: writing it says why, if it must
    if data is None:
        return  # larger than any event or content: no file of this case
    held = sha256_hex(data)
    name = PurePosixPath(relative)
    if held in shas or (CONTENT_FILE_RE.fullmatch(relative) and name.stem == held):
        raise _refused(f"{relative} holds {'an event' if held in shas else 'a content'} of this case that the ledger "
                       "would replace with other bytes (an edited column placing an event there, or exported files "
                       "moved by hand: then move that file aside and export again)")


def _names(data: bytes, seq: int, parent: str) -> bool:
    """Whether the event body ``data`` names ``seq`` and ``parent`` as its own."""
    try:
        body = json.loads(data)
    except ValueError:
        return False
    return type(body) is dict and body.get("seq") == seq and type(body.get("seq")) is int \
        and body.get("parent_sha256") == parent


def _plain_path(relative: str) -> bool:
    """Whether ``relative`` is a plain path under ``analysis/``: no ``.``, ``..`` or empty part."""
    parts = relative.split("/")
    return parts[0] == ANALYSIS_DIR and len(parts) > 1 and all(part not in ("", ".", "..") for part in parts) \
        and "\\" not in relative and "\0" not in relative


def _differs(root: Path, relative: str, data: bytes, folders: dict[Path, bool], to_write: set[str]) -> bool:
    """Whether the file ``relative`` must be written (missing, or other bytes); added to ``to_write``.
    ``STORAGE_ERROR`` for a file there that the system refuses to read (no permission, the open-file
    limit): never taken for one that differs, which would be checked, and written, as one replaced."""
    target = root / relative
    exists = folders.get(target.parent)
    if exists is None:
        exists = folders[target.parent] = target.parent.is_dir()
    if exists and same_bytes(target, data, refused=f"the exported file {relative}"):
        return False
    to_write.add(relative)
    return True


def _unchanged(report: ExportReport, progress: Progress | None) -> None:
    report.files_unchanged += 1
    if progress:
        progress(1)


def _stored_text(body: Any, what: str) -> bytes:
    """The UTF-8 bytes of a stored body, which the ledger always writes as text: a blob or number
    there is an edited ledger (``INTEGRITY_ERROR``, nothing exported)."""
    if type(body) is not str:
        raise _refused(f"the ledger's {what} is stored as {type(body).__name__}, not as the text the ledger writes "
                       "(an edited ledger)")
    return body.encode("utf-8")


def _refused(problem: str) -> LedgerError:
    return LedgerError(E.INTEGRITY_ERROR, f"{problem}; nothing was exported: run 'ledger verify' (a manifest.json "
                       "that is itself what was edited can be moved aside, and the case exported again)")


def export_count(case: Case) -> int:
    """Number of files an export of ``case`` consists of (events + contents + manifest)."""
    check_instance(case, Case, "case", "an open Case")
    with case.session.read():
        events = case.storage.conn.execute(statement("event_count")).fetchone()[0]
        contents = case.storage.conn.execute(statement("content_count")).fetchone()[0]
    return events + contents + 1


@refuses_unfit_calls
def export_case(case: "Case | str | os.PathLike[str]", progress: Progress | None = None, *,
                waiting: Callable[[], None] | None = None) -> ExportReport:
    """Export ``case`` to ``<package>/analysis/`` and ``manifest.json`` (docs/files.md).

    Reads one consistent snapshot of the ledger; writes only files whose bytes
    differ; writes the manifest last. If anything fails before the manifest is
    replaced (an exception, ``KeyboardInterrupt`` included), the files this run
    created are removed again, so the tree is as it was. Raises
    ``STORAGE_ERROR`` if the folder cannot be written; ``INVALID_ARGUMENT`` when ``case``
    is neither a :class:`Case` nor a case folder's path (like ``verify_case`` and ``import_tree``
    take; the case is opened and closed again) or ``progress`` is neither None nor a function of
    the files done; ``LEDGER_MISSING`` when a path given holds no ``ledger.sqlite``.

    One export of a package runs at a time: another one's waits for it, up to an hour
    (``EXPORT_LOCK_WAIT_MS``; then ``LEDGER_BUSY``), and ``waiting()``, if given, is called once
    when that wait begins (the command line says so on stderr). ``INVALID_ARGUMENT`` for a
    ``waiting`` that is not a function of no argument.
    """
    check_instance(case, (Case, str, os.PathLike), "case", "an open Case or a case folder's path")
    check_callback(progress, "progress", 1)
    check_callback(waiting, "waiting", 0)
    if not isinstance(case, Case):
        with Case.open(case) as opened:
            return export_case(opened, progress, waiting=waiting)
    root = case.path
    # one export at a time per package: a concurrent one would see our temp files as stale
    lock = WriterLock(root / (LEDGER_FILE + "-export-lock"))
    try:
        try:
            free = lock.try_acquire()
        except OSError as exc:
            raise os_error(exc, f"cannot write the export under {root}", E.STORAGE_ERROR) from None
        if not free:
            if waiting is not None:
                waiting()  # the caller's: what it raises goes on as it is
            try:
                _wait_for_export(lock, root)
            except OSError as exc:
                raise os_error(exc, f"cannot write the export under {root}", E.STORAGE_ERROR) from None
        return _export_locked(case, root, progress)
    finally:
        lock.close()


def _wait_for_export(lock: WriterLock, root: Path) -> None:
    """The export lock of ``root``, taken once another export lets it go; ``LEDGER_BUSY`` naming that
    export after ``EXPORT_LOCK_WAIT_MS``."""
    try:  # in a worker process whose caller is stopping, the wait ends at once
        lock.acquire(EXPORT_LOCK_WAIT_MS, stop=stop_requested)
    except LedgerError as exc:
        if exc.code != E.LEDGER_BUSY or exc.details.get("stopped"):
            raise
        raise LedgerError(E.LEDGER_BUSY, f"another export of {root} held its lock ({lock.path.name}) for more than "
                          f"{EXPORT_LOCK_WAIT_MS // 60_000} minutes (a stopped or hung process?); retry once it ends",
                          busy_timeout_ms=EXPORT_LOCK_WAIT_MS) from None


def _export_locked(case: Case, root: Path, progress: Progress | None) -> ExportReport:
    report = ExportReport(str(root))
    refuse_own_links(root)  # nothing is written, renamed or deleted through a link
    check_package_names(root)  # a package verify and import would refuse is not exported either
    files = export_tree_files(root)  # no link or special file in analysis/
    for leftover in _stale_temp_files(root):
        discard(leftover)  # a folder of that name, or a file this user may not remove, stays: it is never read
    touched: set[Path] = set()
    created: list[Path] = []
    committed = False
    mode = new_file_mode()  # once per export, not once per file
    made: dict[Path, bool] = {}  # folder → made by this export (so it held no file before)
    folders_made: list[Path] = []  # each folder this export made

    pending: list[tuple[Path, bytes]] = []

    def write(relative: str, data: bytes) -> None:
        target = root / relative
        folder = target.parent
        new = made.get(folder)
        if new is None:
            new = made[folder] = _make_folder(folder, folders_made)
        if new or not target.exists():
            created.append(target)
        touched.add(folder)
        pending.append((target, data))
        if len(pending) == WRITE_BATCH:
            flush()

    def flush() -> None:
        write_atomic_many(pending, mode)  # each file durable before it is renamed into place
        report.files_written += len(pending)
        if progress:
            progress(len(pending))
        pending.clear()

    try:
        manifest, last_revision, accounted = _read_and_write(case, root, files, report, progress, write, flush)
        fsync_folders(root, touched)
        data = canonical_bytes(manifest)
        if same_bytes(root / MANIFEST_FILE, data, refused=MANIFEST_FILE):
            report.files_unchanged += 1
            committed = True
        else:
            write_atomic(root / MANIFEST_FILE, data, mode)
            committed = True
            fsync_dir(root)
            report.files_written += 1
        if progress:
            progress(1)
    except BaseException as exc:
        if not committed:
            for path in reversed(created):  # every one, whatever fails: nothing of this export stays
                discard(path)
            for folder in sorted(folders_made, key=lambda made_folder: len(made_folder.parts), reverse=True):
                remove_empty_folder(folder)  # those it made alone, deepest first: a folder there before stays
        if isinstance(exc, OSError):
            raise os_error(exc, f"cannot write the export under {root}", E.STORAGE_ERROR) from None
        raise
    report.manifest, report.stray = manifest, _stray(files, accounted, last_revision)
    return report


def _read_and_write(case: Case, root: Path, files: list[str], report: ExportReport, progress: Progress | None,
                    write: Callable[[str, bytes], None],
                    flush: Callable[[], None]) -> tuple[dict[str, Any], int, set[str]]:
    """In one read of the ledger, first every file compared and every one to write checked, then those
    written (``write``, ``flush``): an exported file may be the one copy of an event's original bytes.
    Exported event files (``files``, listed under the export lock) past the ledger's head that continue
    its history are ``INTEGRITY_ERROR``, as verify names them, with a readable manifest or without
    one: the ledger was truncated or rolled back since, and a manifest written at its head would hide
    that. Returns the manifest, the last revision and every file the export holds. Text the sqlite3
    module cannot read is ``INTEGRITY_ERROR`` naming its row."""
    with case.session.read():
        conn = case.storage.conn
        try:
            to_write, head_seq, accounted = _files_to_write(root, conn, read_manifest_if_readable(root), report,
                                                            progress)
            lost = lost_continuation(root, [relative for relative in files if relative not in accounted], conn,
                                     head_seq)
            if lost:
                raise _refused(lost)
            if to_write:
                for relative, data in _export_files(conn):
                    if relative in to_write:
                        write(relative, data)
                flush()
            (last_revision,) = conn.execute(statement("last_revision")).fetchone()
            return manifest_for(conn, head_seq), last_revision, accounted
        except (sqlite3.Error, UnicodeDecodeError, LedgerError) as exc:  # text the sqlite3 module could not read?
            if not undecodable(exc):
                raise
            raise (undecodable_text(conn, "main") or exc) from None


def _stray(files: list[str], accounted: set[str], last_revision: int) -> str | None:
    """What verify and import will refuse in the exported tree (a file under ``analysis/`` that is no
    part of the export), said by the export rather than by them later; None when nothing."""
    try:
        check_export_tree(files, accounted, last_revision)
    except LedgerError as exc:
        return exc.message
    return None


