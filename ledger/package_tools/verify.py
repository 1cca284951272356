"""``ledger verify``: re-derive everything from the requests alone and compare (docs/files.md).

:func:`verify_case` replays every stored event in memory (:class:`~ledger.package_tools.replay.Replayer`),
loads what the replay derives (events, contents, helper rows) into a private in-memory database beside
the ledger, and compares in bulk: every events column, contents row, helper row and public view, then
the exported files and the manifest head, then the schema. The first difference raises
``INTEGRITY_ERROR`` naming its ``seq``.
"""

from __future__ import annotations

import os
import re
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from ..ground import errors as E
from .atomic_files import process_tag, remove_abandoned_temp_folders
from ..storage.sqlfiles import (PUBLIC_VIEWS, as_shipped, folded_name, migration_record_problem, objects_using,
                                recorded_schema_version, schema_version, shipped_objects, shipped_schema, statement)
from ..ground.arguments import check_callback, check_flag
from ..ground.workers import job_count
from ..services.case import missing_ledger
from ..ground.errors import (LedgerError, first_few, integrity_error as _bad, quoted, refuses_unfit_calls,
                             refuses_unfit_calls_of)
from .manifest import check_manifest_identity, read_manifest
from .verify_export import check_export
from ..model.package import (LEDGER_FILE, check_package_names, export_tree_files, refuse_own_links,
    refuse_stray_logs)
from ..ground.canonical import sha256_hex, stored_bytes
from ..ground.clock import parse_at, utc_now
from ..ground.paths import fs_path, os_error
from ..ground.interrupts import context_manager
from .anchors import check_anchored_events, check_anchors
from .verify_rows import HELPER_TABLES, compare_rows
from .replay import PackageSource, Replayer
from .verify_range import (ALL_AFTER, ALL_LAST, SECOND_HALF_FILE, SecondHalf, content_reader, copy_second_half,
    input_identity_of, merge, plan_split, range_agrees, save_views, replay_events)
from ..storage.connection import Storage
from ..storage.sqlite_file import (SQLITE_MAX_PATH_BYTES, file_identity, translate_sqlite_errors, not_utf8,
                                   no_case_in, open_snapshot, close_then_fold, undecodable, undecodable_text,
                                   UNDEFINED_BY_THIS_PROGRAM)
from ..storage.side_files import log_files_exist

Progress = Callable[[int], None]
EVENT_COLUMNS = ("seq", "type", "revision", "stream", "stream_seq", "created_at", "sha256",
                 "parent_sha256", "operation_key", "request_sha256", "body")


@refuses_unfit_calls_of
@dataclass
class VerifyReport:
    """A passed verification: how much was checked and the head it ends at.

    ``export_behind`` is how many events the ledger holds past the exported
    ``manifest.json`` head (0 when the export is current; None with no export):
    a stale export, not an error (``ledger verify --strict`` makes it one).
    ``export_state`` sums it up: ``"current"``, ``"behind"``, ``"none"`` (never
    exported) or ``"partial"`` (exported files but no ``manifest.json``: an
    interrupted export); all but ``"current"`` fail ``--strict``.
    ``foreign_objects`` lists the schema objects a user added that cannot change
    or hide the ledger's rows (``{"type", "name", "table"}``: views, indexes,
    tables, full-text tables and their shadow tables). ``future_events`` counts the
    events whose time is ahead of this machine's clock, by at most
    ``future_max_lead_ms`` milliseconds: a note, never a failure (the writer's clock
    or its configured tolerance may be ahead of the auditor's). ``unchecked_inputs`` lists
    ``{"path", "why"}`` for each input a stored tool result read that has ``"changed"`` since, is ``"unreadable"``
    now (a link, removed, refused) or was ``"computed otherwise by this SQLite"``: those results were checked against their
    requests only (docs/evidence.md), a note, never a failure. ``events_left_out`` (import only)
    counts the event files past the export manifest's head that the new case does not hold: an
    export interrupted before its manifest, or a manifest older than the files (docs/files.md).
    """

    package_path: str
    events: int
    contents: int
    head_seq: int
    head_sha256: str
    exported_files_checked: int
    manifest_checked: bool
    export_behind: int | None = None
    foreign_objects: list[dict[str, str]] = field(default_factory=list)
    future_events: int = 0
    future_max_lead_ms: int = 0
    export_state: str = "current"
    unchecked_inputs: list[dict[str, str]] = field(default_factory=list)
    events_left_out: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__, foreign_objects=[dict(o) for o in self.foreign_objects],
                    unchecked_inputs=[dict(u) for u in self.unchecked_inputs], ok=True)

    def notes(self) -> list[str]:
        """Lines for people about what passed but deserves a look (stale export, foreign objects)."""
        lines = []
        if self.export_state == "none":
            lines.append("not exported: there is no manifest.json; run 'ledger export'")
        elif self.export_state == "partial":
            lines.append(f"partial export: {self.exported_files_checked} exported file(s) but no manifest.json "
                         "(an interrupted export?); run 'ledger export'")
        if self.export_behind:
            lines.append(f"export is {self.export_behind} event(s) behind the ledger (manifest head seq "
                         f"{self.head_seq - self.export_behind}, ledger head seq {self.head_seq}); "
                         "run 'ledger export' to bring it up to date")
        if self.events_left_out:
            lines.append(f"left out {self.events_left_out} event(s) whose files lie past the export's manifest "
                         f"(head seq {self.head_seq}): an export interrupted before its manifest, or a manifest "
                         "older than the files; the new case ends at the manifest's head")
        if self.future_events:
            lines.append(f"{self.future_events} event(s) are dated ahead of this machine's clock, by up to "
                         f"{self.future_max_lead_ms} ms (the writer's clock or its at_future_tolerance_ms; not "
                         "a fault of the history)")
        if self.unchecked_inputs:
            shown = first_few([f"{u['path']} ({u['why']})" for u in self.unchecked_inputs], 5)
            lines.append(f"{len(self.unchecked_inputs)} input file(s) differ from what stored tool results read or "
                         f"searched (edited, added, removed, unreadable, readable only now, or computed otherwise by "
                         f"this SQLite), so those results were checked against their requests only: {shown}")
        for obj in self.foreign_objects:
            on = f" on {obj['table']}" if obj["table"] != obj["name"] else ""
            lines.append(f"foreign object (not the ledger's, left alone): {obj['type']} {obj['name']}{on}")
        return lines

    def strict_failure(self) -> LedgerError | None:
        """The error ``ledger verify --strict`` fails with, or None when the case passes it too.

        First an export that is not current (``INTEGRITY_ERROR``: never exported, partial, or
        behind the ledger), then stored tool results that could not be re-proved from their input
        files as the package holds them now (``STALE_GENERATION`` naming the files of
        ``unchecked_inputs``): a plain verify notes them, ``--strict`` demands that every result
        be recomputed from its files (docs/evidence.md, "Checking stored results again").
        """
        if self.export_state != "current":
            why = {"none": "the case was never exported (no manifest.json)",
                   "partial": "the export is partial: exported files but no manifest.json (an interrupted export?)",
                   }.get(self.export_state, f"the export is {self.export_behind} event(s) behind the ledger")
            return LedgerError(E.INTEGRITY_ERROR, f"{why} (--strict); run 'ledger export'")
        if self.unchecked_inputs:
            shown = ", ".join(f"{u['path']} ({u['why']})" for u in self.unchecked_inputs)
            return LedgerError(E.STALE_GENERATION, f"{len(self.unchecked_inputs)} input file(s) differ from what stored "
                               f"tool results read or searched (edited, added, removed, unreadable, readable only now, "
                               f"or computed otherwise by this SQLite), so those results cannot be recomputed from them "
                               f"(--strict): {shown}")
        return None


#: Verify's scratch folder in the system's temp folder: ``ledger-verify-<random>.<machine>.<pid>``.
#: One a killed verify left is removed by the next verify on this machine, once its process is gone.
SCRATCH_PREFIX = "ledger-verify-"
#: The scratch ledgers verify makes in its scratch folder (the second for a replay over two processes).
SCRATCH_FILES = ("replay.sqlite", SECOND_HALF_FILE)


def refuse_temp_inside(root: Path, doing: str = "verify") -> Path:
    """The system's temp folder, where verify puts its scratch ledger; ``INVALID_ARGUMENT`` when it is
    the package ``root`` or inside it: verify writes nothing in a package, and its scratch ledger
    there would be taken for a file of the package. ``doing`` names the command for the message
    (import and the demo check before they write anything, as they verify what they built)."""
    temp = Path(tempfile.gettempdir())
    package, folder = Path(os.path.realpath(root)), Path(os.path.realpath(temp))
    if folder == package or package in folder.parents:
        raise LedgerError(E.INVALID_ARGUMENT, f"the temp folder {temp} is inside {root}, where {doing} would put the "
                          "scratch ledger it verifies with, and verify writes nothing in a case package: set TMPDIR "
                          "to a folder outside it", temp=str(temp))
    longest = max(SCRATCH_FILES, key=len)  # in a folder named like the one verify makes (mkdtemp adds 8 characters)
    length = len(os.fsencode(os.path.abspath(temp / f"{SCRATCH_PREFIX}{'x' * 8}{process_tag()}" / longest)))
    if length > SQLITE_MAX_PATH_BYTES:
        raise LedgerError(E.INVALID_ARGUMENT, f"the temp folder {temp} is too long a path for {doing}'s scratch ledger: its "
                          f"path would be {length} bytes, and SQLite opens at most "
                          f"{SQLITE_MAX_PATH_BYTES}; set TMPDIR to a shorter folder", temp=str(temp))
    return temp


@refuses_unfit_calls
def verify_case(path: str | os.PathLike[str], progress: Progress | None = None, *, strict: bool = False,
                jobs: int | None = 1, anchors: Mapping[int, str] | None = None) -> VerifyReport:
    """Verify the case at ``path`` (docs/files.md); raise ``INTEGRITY_ERROR`` naming the first bad ``seq``.

    First SQLite's own check of the file (``PRAGMA integrity_check``: every page, and every index
    compared with its table, so an index that answers queries wrongly fails), then re-applies every stored request into
    a scratch ledger and compares event bytes, helper rows, public views, exported
    files that exist, and the manifest head (a truncated or rolled-back ledger
    fails). Writes nothing in the package: its scratch ledger goes to the system's temp folder
    (``INVALID_ARGUMENT`` when that folder is inside the package; docs/files.md). A file the
    system refuses to read (no permission, an I/O error) is ``STORAGE_ERROR`` naming it: never
    taken for a missing or edited one. ``LEDGER_MISSING`` when ``path`` holds no ``ledger.sqlite``.

    ``jobs``: processes for this one case (an integer from 1 to 256, else ``INVALID_ARGUMENT``; None: the
    cores this process may use). With 2 or more, a ledger of at least 20,000 events has its later events
    replayed by a second process at the same time (docs/performance.md); the result is the same.
    That process is started with ``spawn``, which imports the calling script's main module again:
    a script passing ``jobs`` other than 1 keeps its own work under ``if __name__ == "__main__":``.

    ``strict`` has no effect (verify always runs the full check; calls passing it still work): what
    ``ledger verify --strict`` adds is :meth:`VerifyReport.strict_failure` of the report returned.

    ``anchors``: ``{seq: sha256}`` of events recorded elsewhere earlier (a head ``ledger verify``
    printed, kept in a ticket or a commit). Hashes show a history that disagrees with itself, not one
    rewritten whole with every hash recomputed; an anchor does: the ledger must hold event ``seq``
    with that sha256, which fixes every event up to it (``INTEGRITY_ERROR`` otherwise, and for a
    ledger that ends before ``seq``; ``INVALID_ARGUMENT`` for a malformed anchor). docs/files.md.
    """
    return verify_then_read(path, None, progress, strict=strict, jobs=jobs, anchors=anchors)[0]


def verify_then_read(path: str | os.PathLike[str], read: Callable[[Storage], Any] | None,
                     progress: Progress | None = None, *, strict: bool = False, jobs: int | None = 1,
                     anchors: Mapping[int, str] | None = None) -> tuple[VerifyReport, Any]:
    """:func:`verify_case`, then what ``read(scratch)`` returns, read in the snapshot verified (the
    scratch ledger of the replay, the ledger attached to it as ``orig``): the fleet export writes the
    rows verified, not a snapshot taken apart."""
    anchors = check_anchors(anchors)
    try:
        return _verify_case(path, progress, strict, 1 if read else jobs, anchors, read)
    except OSError as exc:
        raise os_error(exc, "verify: the file system refused") from None


def _verify_case(path: str | os.PathLike[str], progress: Progress | None, strict: bool, jobs: int | None,
                 anchors: dict[int, str], read: Callable[[Storage], Any] | None) -> tuple[VerifyReport, Any]:
    root = fs_path(path, "case path")
    check_callback(progress, "progress", 1)
    check_flag(strict, "strict")
    jobs = job_count(jobs)
    ledger = root / LEDGER_FILE
    refuse_own_links(root)
    if not ledger.is_file():
        raise missing_ledger(root)
    refuse_stray_logs(root)
    check_package_names(root)
    log_was_there = log_files_exist(ledger)
    temp = refuse_temp_inside(root)
    remove_abandoned_temp_folders(temp, SCRATCH_PREFIX)
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, suffix=process_tag()) as scratch_dir:
        scratch, second, immutable, before = None, None, False, None
        try:  # the scratch ledger's making too: its read of the ledger makes -wal and -shm
            scratch = Storage.scratch(Path(scratch_dir) / SCRATCH_FILES[0], ledger)
            immutable = scratch.read_only_source
            before = file_identity(ledger) if immutable else None
            with translate_sqlite_errors():  # a damaged file's undecodable text, wherever it is first read
                split = plan_split(scratch, Path(scratch_dir), jobs)  # before the first read of the ledger's snapshot
                _newest_seq(scratch.conn)  # that first read: every event in the snapshot was written before now
                started_at = utc_now()
                if split is not None:  # started first: its start-up runs beside SQLite's check of the file
                    second = SecondHalf.start(root, ledger, split[2], split[0], split[1], started_at)
                _sqlite_check(scratch.conn, "integrity_check")  # every index compared with its table
                report = _verify_attached(root, scratch, progress, second, started_at, anchors)
                extra = read(scratch) if read is not None else None
        except LedgerError as exc:
            if immutable and exc.code == E.INTEGRITY_ERROR and file_identity(ledger) != before:
                raise _changed_under_us(ledger) from None
            if undecodable(exc) and scratch is not None:  # read in batches: the row at fault, by its own seq
                raise (undecodable_text(scratch.conn, "orig") or exc) from None
            raise
        finally:  # the second process first, before the scratch folder goes; then the ledger's log is folded
            close_then_fold((second, scratch and scratch.conn), ledger, not immutable and not log_was_there)
        if immutable and file_identity(ledger) != before:
            raise _changed_under_us(ledger)
        return report, extra


def _sqlite_check(conn: sqlite3.Connection, check: str) -> None:
    """``INTEGRITY_ERROR`` with what SQLite's ``check`` names (page, row, index) unless it says ok:
    physical damage to the file, which the replay of readable rows alone could miss (docs/files.md)."""
    try:
        found = [str(row[0]) for row in conn.execute(statement("sqlite_check", "orig", check=check)).fetchall()]
    except sqlite3.DatabaseError as exc:
        found = [str(exc)]
    except UnicodeDecodeError as exc:
        found = [not_utf8(exc)]
    if found != ["ok"]:
        found = [line for row in found for line in row.splitlines() if line and not line.startswith("*** in database")]
        foreign = objects_using(conn, found[0], "orig") if found[0].startswith(UNDEFINED_BY_THIS_PROGRAM) else []
        if foreign:
            which = "it uses" if len(foreign) == 1 else "one of them uses"
            raise LedgerError(E.INTEGRITY_ERROR, f"SQLite cannot run its {check} of ledger.sqlite: {found[0]}: the "
                              f"file holds {', '.join(foreign)}, added to it, and {which} a collation or function this "
                              "program does not define (no damage: SQLite can neither check such an object nor read "
                              "or write a table it is on); drop it (DROP INDEX, DROP TRIGGER or DROP VIEW in sqlite3)",
                              seq=None, check=check, problems=found, foreign_objects=foreign)
        shown = "; ".join(found[:5]) + (f"; … {len(found) - 5} more" if len(found) > 5 else "")
        raise LedgerError(E.INTEGRITY_ERROR, f"SQLite's {check} of ledger.sqlite reports the file damaged: {shown} "
                          "(a copy made by cp while a writer was at work can be torn so: copy a live case's ledger "
                          "with sqlite3's .backup)", seq=None, check=check, problems=found)


def _changed_under_us(ledger: Path) -> LedgerError:
    return LedgerError(E.LEDGER_BUSY, f"{ledger} changed while it was read as a read-only snapshot; run verify "
                       "again (on a read-only mount, pause writers elsewhere first)")


def _orig_schema_version(conn: sqlite3.Connection) -> int:
    with translate_sqlite_errors():
        return recorded_schema_version(conn, "orig")


def _check_migrations(conn: sqlite3.Connection, version: int, root: Path) -> None:
    """``INTEGRITY_ERROR`` for ``schema_migrations`` rows that disagree with the schema or hold no time
    as the ledger writes them; ``LEDGER_MISSING`` for a file with no case (``version`` 0)."""
    problem = migration_record_problem(conn, "orig")
    if problem:
        raise _bad(None, problem, table="schema_migrations")
    if version == 0:
        raise no_case_in(conn, root / LEDGER_FILE, "orig")  # none yet, or another program's database
    problem = _migration_time_problem(conn)
    if problem:
        raise _bad(None, problem, table="schema_migrations")


def _migration_time_problem(conn: sqlite3.Connection) -> str | None:
    """Why a ``schema_migrations`` row's ``applied_at`` is not a time as the ledger writes them, or None.
    Their order is not checked: a case copied to a machine whose clock is behind and migrated there
    records a later migration at an earlier time."""
    for version, at in conn.execute(statement("migration_times", "orig")).fetchall():
        try:
            if parse_at(at) == at:
                continue
        except LedgerError:
            pass
        return (f"schema_migrations records migration {version} as applied at {quoted(str(at), 64)}, which is not a "
                "time as the ledger writes them (YYYY-MM-DDTHH:MM:SS.ffffffZ): an edited row")
    return None


def _verify_attached(root: Path, scratch: Storage, progress: Progress | None, second: SecondHalf | None,
                     started_at: str, anchors: dict[int, str]) -> VerifyReport:
    conn = scratch.conn
    version = _orig_schema_version(conn)
    if version > schema_version():
        raise LedgerError(E.SCHEMA_VERSION, f"the ledger has schema version {version}; this case-ledger knows {schema_version()}")
    _check_migrations(conn, version, root)
    _check_own_tables(conn, version)
    _another_packages_manifest(root, conn)
    derived: list[Any] = []  # what the replay derives, stored into the scratch ledger in bulk
    package = PackageSource(root, content_reader(conn), lambda: input_identity_of(root, conn))
    replayer = Replayer(package, lambda *item: derived.append(item), schema_every_event=False)
    replayer.started_at = started_at  # the clock both processes count future events against
    tables_agree = False  # True: every table was compared in two ranges, and both agreed
    saved: set[str] = set()  # the ledger's views computed already (save_views)
    try:
        expected = replay_events(scratch, replayer, derived, ALL_AFTER, ALL_LAST if second is None else second.after,
                                 progress)
        if second is not None:  # the later events: checked by the second process, or else here
            tables = [t for t in ("events", "contents", *HELPER_TABLES) if t in _present(conn, "main")]
            compared = ["events", "contents", *(t for t in HELPER_TABLES if t in _present(conn, "orig"))]
            tables_agree = range_agrees(conn, compared, second.after, later=False)  # while the second one runs
            saved = save_views(conn, [v for v in PUBLIC_VIEWS if v in _present(conn, "orig")])
            outcome = second.receive()
            after = second.after
            if outcome is not None and outcome["after"] > after:  # it moved the split past an operation's events
                expected = replay_events(scratch, replayer, derived, after, outcome["after"], progress,
                                         expected=expected)
                after = outcome["after"]
            if outcome is None or not second.accepts(replayer, outcome, _newest_seq(conn)):
                tables_agree = False
            else:
                merge(replayer, outcome)
                tables_agree = copy_second_half(conn, tables, second.after) and tables_agree
                if progress:
                    progress(outcome["count"])
                after = expected = second.last
                expected += 1
            replay_events(scratch, replayer, derived, after, ALL_LAST, progress, expected=expected)
            tables_agree = tables_agree and range_agrees(conn, compared, second.after, later=True)
    finally:
        if second is not None:
            second.close()  # at once when the first half failed
    try:
        head = conn.execute(statement("newest_event", "orig")).fetchone()
    except sqlite3.DatabaseError as exc:
        raise _bad(replayer.count + 1, f"cannot read the ledger: {exc}") from None
    except UnicodeDecodeError as exc:
        raise _bad(replayer.count + 1, f"cannot read the ledger: {not_utf8(exc)}") from None
    if head is None:
        raise _bad(1, "the ledger holds no events")
    check_anchored_events(conn, anchors, head[0])
    replayer.finish()
    # the export tree is read first, then compared with the ledger as it is now: a writer may have
    # appended and exported past the verified snapshot meanwhile (never a truncation). Before the rows:
    # a ledger cut short is said as such, not as the helper rows its lost events left behind
    manifest, files = read_manifest(root), export_tree_files(root)
    with _ledger_now(root / LEDGER_FILE, scratch, head) as (now, now_head):
        exported, manifest_head = check_export(root, now, now_head, manifest, files)
    compare_rows(conn, tables_agree, saved)
    foreign = _compare_schema(conn, version)
    return VerifyReport(str(root), replayer.count, conn.execute(statement("content_count")).fetchone()[0],
                        head[0], head[1], exported, manifest is not None,
                        None if manifest_head is None else max(0, head[0] - manifest_head), foreign,
                        replayer.future_events, replayer.max_lead_ms,
                        _export_state(manifest_head, head[0], exported),
                        [{"path": p, "why": w} for p, w in sorted(package.unchecked.items())])


def _another_packages_manifest(root: Path, conn: sqlite3.Connection) -> None:
    """Another package's manifest here (or another package's ledger under this export) is named so
    before the replay, whose first refusal would say less (a source file the other case cites, say),
    when the ledger's event 1 holds its hash and event 2 follows it (an edited event 1 is named by the
    replay). Anything else wrong with the manifest or the ledger is named where it is compared."""
    first = conn.execute(statement("first_events", "orig")).fetchall()
    if not first or first[0][0] != 1 or first[0][1] != sha256_hex(stored_bytes(first[0][3])) \
            or (len(first) == 2 and first[1][2] != first[0][1]):
        return
    try:
        manifest = read_manifest(root)
        if manifest is not None:
            check_manifest_identity(manifest, conn, "orig")
    except LedgerError as exc:
        if exc.details.get("fields") == ["case_id", "package_id"]:  # another package's
            raise


def _newest_seq(conn: sqlite3.Connection) -> int | None:
    """The ledger's head seq in this snapshot, or None (unreadable: read again, and named, later)."""
    try:
        head = conn.execute(statement("newest_event", "orig")).fetchone()
    except (sqlite3.Error, UnicodeDecodeError):
        return None
    return None if head is None else head[0]


def _present(conn: sqlite3.Connection, schema: str) -> set[str]:
    """The tables and views of the scratch ledger (``main``) or of the ledger (``orig``)."""
    with translate_sqlite_errors():
        return {name for name, _sql in conn.execute(statement("schema_objects", schema))}


def _export_state(manifest_head: int | None, head_seq: int, exported_files: int) -> str:
    if manifest_head is None:
        return "partial" if exported_files else "none"
    return "current" if manifest_head >= head_seq else "behind"


@context_manager
def _ledger_now(ledger: Path, scratch: Storage, head: tuple[int, str]) -> Iterator[tuple[sqlite3.Connection, int]]:
    """``(connection, head seq)`` of the ledger as it is now, for the export check: the verified
    snapshot while nothing was appended since (or on an immutable read), else a new read of the
    file, which must continue the verified history (``LEDGER_BUSY`` when it does not: the file
    was replaced or rewritten while verify read it; run it again)."""
    if scratch.read_only_source:
        yield scratch.conn, head[0]
        return
    live = open_snapshot(ledger)
    try:
        with translate_sqlite_errors():
            newest = live.execute(statement("newest_event")).fetchone()
            at_head = live.execute(statement("manifest_head"), {"seq": head[0]}).fetchone()
        if at_head is None or at_head[0] != head[1]:
            raise _changed_under_us(ledger)
        if newest[0] == head[0]:
            yield scratch.conn, head[0]  # nothing appended since: the verified rows themselves
        else:
            yield live, newest[0]
    finally:
        live.close()


def _check_own_tables(conn: sqlite3.Connection, version: int) -> None:
    """The ledger's tables and views that verify compares row by row must be the shipped ones,
    before any row is compared (an added column would only make the comparison fail obscurely)."""
    shipped = shipped_schema(version)
    present = dict(conn.execute(statement("schema_objects", "orig")).fetchall())
    for name in ("events", "contents", *HELPER_TABLES, *PUBLIC_VIEWS):
        kind = "view" if name in PUBLIC_VIEWS else "table"
        if name in shipped and not as_shipped(version, kind, name, present.get(name), shipped[name]):
            raise _bad(None, f"the ledger's {kind} {name} is "
                       f"{'missing' if name not in present else 'altered'}: its definition differs from the schema's "
                       "(any change to its SQL, a comment or blanks included)", object=name)


#: Tables SQLite creates on its own (``sqlite_autoindex_*`` indexes have no SQL text and never show up).
SQLITE_OWN_TABLES = frozenset({"sqlite_sequence", "sqlite_stat1", "sqlite_stat2", "sqlite_stat3", "sqlite_stat4"})


def _compare_schema(conn: sqlite3.Connection, version: int) -> list[dict[str, str]]:
    """The ledger's own tables, triggers, views and indexes must be exactly the shipped ones (of
    the file's schema ``version``), none missing or altered; return the objects a user added
    that cannot change or hide the ledger's rows (checked last: no seq to name).

    A foreign trigger on a ledger table or view, and a foreign index on a ledger table that is
    not a plain column list (UNIQUE, partial, on an expression: it can refuse the ledger's own
    appends), are ``INTEGRITY_ERROR``.
    """
    shipped = shipped_objects(version)
    tables = {name for kind, name in shipped if kind in ("table", "view")}  # what a trigger or index is on
    objects = conn.execute(statement("schema_objects_typed", "orig")).fetchall()
    present = {(kind, name): sql for kind, name, _, sql in objects}
    for (kind, name), sql in sorted(shipped.items()):
        if not as_shipped(version, kind, name, present.get((kind, name)), sql):
            why = "a dropped trigger leaves the ledger unguarded" if kind == "trigger" else "the ledger's rows or reads depend on it"
            raise _bad(None, f"schema {kind} {name} is missing or altered ({why})", object=name)
    fts = {name for kind, name, _, sql in objects if kind == "table" and _FTS_RE.match(sql)}
    foreign = []
    for kind, name, table, sql in objects:
        if kind == "table" and name in SQLITE_OWN_TABLES:  # a trigger, view or index may not hide behind their names
            foreign += _sqlite_table_not_its_own(conn, name)
            continue
        if (kind, name) in shipped:
            continue
        if kind == "trigger" and folded_name(table) in tables:
            raise _bad(None, f"schema object {name} is not the ledger's own: a trigger on the ledger's "
                       f"{folded_name(table)} can block or alter its writes; drop it", object=name)
        if kind == "index" and folded_name(table) in tables:
            _refuse_index_that_can_block_writes(conn, name, table)
        foreign.append({"type": _foreign_kind(kind, name, sql, fts), "name": name, "table": table})
    return foreign


#: What ANALYZE writes in ``sqlite_stat1.stat`` (row counts), and the hints SQLite reads after them.
_STAT1 = re.compile(r"[0-9]+(?: [0-9]+)*(?: (?:unordered|noskipscan|sz=[0-9]+))*")


def _sqlite_table_not_its_own(conn: sqlite3.Connection, name: str) -> list[dict[str, str]]:
    """SQLite's own table ``name`` as a foreign object when it holds what SQLite did not put there: the
    ledger makes no AUTOINCREMENT table, so ``sqlite_sequence`` comes from a user's table; statistics
    rows must name a table (and an index of it) the file holds, and ``sqlite_stat1``'s must be counts."""
    if name == "sqlite_sequence":
        return [{"type": "AUTOINCREMENT counters", "name": name, "table": name}]
    names = conn.execute(statement("schema_names", "orig")).fetchall()
    tables = {n for kind, n, _ in names if kind == "table"}
    indexes = {(table, n) for kind, n, table in names if kind == "index"}
    stat = "stat" if name == "sqlite_stat1" else "NULL"
    try:
        rows = conn.execute(statement("statistics_rows", "orig", table=name, stat=stat)).fetchall()
    except sqlite3.OperationalError:  # not the columns ANALYZE makes
        rows = [(None, None, None)]
    for table, index, counts in rows:  # rows of a table renamed since ANALYZE keep its old name: stale, not forged
        if table not in tables or index is not None and index != table and (table, index) not in indexes:
            return [{"type": "statistics naming nothing in the file (stale, or not ANALYZE's)", "name": name,
                     "table": name}]
        if name == "sqlite_stat1" and not (type(counts) is str and _STAT1.fullmatch(counts)):
            return [{"type": "statistics that are not counts (not ANALYZE's)", "name": name, "table": name}]
    return []


def _refuse_index_that_can_block_writes(conn: sqlite3.Connection, name: str, table: str) -> None:
    """A user's index on a ledger table is left alone only as a plain column list: a UNIQUE or
    partial index, an expression or an unknown collation can make the ledger's own appends fail."""
    unique, partial, expressions, collations = conn.execute(
        statement("index_shape", "orig"), {"name": name, "table": table}).fetchone()
    why = ("a UNIQUE index" if unique else "a partial index (WHERE)" if partial else
           "an index on an expression" if expressions else "an index with a collation SQLite does not know"
           if collations else None)
    if why:
        raise _bad(None, f"schema object {name} is not the ledger's own: {why} on the ledger's {table} can refuse "
                   "its appends; drop it or make it a plain index on columns", object=name)


_FTS_RE = re.compile(r"CREATE\s+VIRTUAL\s+TABLE\s.*\bUSING\s+fts[345]\b", re.I | re.S)
#: Tables SQLite's full-text modules keep beside a full-text table ``<name>``: ``<name>_<suffix>``.
FTS_SHADOW_SUFFIXES = ("data", "idx", "content", "docsize", "config", "segments", "segdir", "stat")


def _foreign_kind(kind: str, name: str, sql: str, fts: set[str]) -> str:
    """How verify names a user's own object: view, index, table, trigger, full-text table or its shadow."""
    if kind != "table":
        return kind
    if name in fts:
        return "full-text table"
    if any(name == f"{base}_{suffix}" for base in fts for suffix in FTS_SHADOW_SUFFIXES):
        return "full-text shadow table"
    return "virtual table" if re.match(r"CREATE\s+VIRTUAL\b", sql, re.I) else "table"
