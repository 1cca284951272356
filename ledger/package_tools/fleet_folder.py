"""A fleet export's folder (docs/fleet.md, "Layout"): what it holds, the mark that makes a folder
one, its locks, the marks of exports under way, and the links it never writes through.
:mod:`ledger.package_tools.fleet` writes it and :mod:`ledger.package_tools.fleet_query` reads it."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Any, Iterator

from ..ground import errors as E
from ..ground.descriptors import file_over, open_to_read, refuse_held
from ..ground.errors import LedgerError, pass_on_interruption, shown
from ..ground.paths import make_folders, os_error, refuse_link_to_nothing, require_utf8
from ..ground.interrupts import context_manager
from ..model.package import refuse_output_in_package
from ..storage.sqlfiles import statement
from ..storage.sqlite_file import translate_sqlite_errors
from .atomic_files import discard, fsync_dir, process_tag, remove_abandoned_temp_files, write_atomic

FORMAT = "fleet-export-v1"
#: The exported tables, in the order they are written: the chain, then the public views.
TABLES = ("events", "actions", "balances", "evidence", "scope_usage", "case_status")
DATA_FILE = "data.parquet"
META_DIR = "_fleet"  # Spark, Trino and DuckDB readers of OUT/TABLE never look here
ASIDE = ".publishing"  # a case's record while its files are replaced (fleet's publish)
EXPORTS_DIR = "exports"  # _fleet/exports/: a mark per export under way, or stopped before it went through its cases

#: Characters DuckDB's file patterns give a meaning to.
_GLOB = re.compile(r"[*?\[\]{}]")


def meta_dir(out: Path) -> Path:
    return out / META_DIR


def check_out(out: Path, *, create: bool) -> Path:
    """``out`` as a fleet export: absent or empty (made one when ``create``), or one already.
    Anything else is ``INVALID_ARGUMENT`` (so a wrong path never fills a folder with files), as is
    a path holding a glob character (``*?[]{}``: the tables are read with a pattern under it) or
    one that is not UTF-8 text (DuckDB takes paths as text)."""
    require_utf8(out, "a fleet export's path must be UTF-8 text (DuckDB reads its tables by a path given as "
                      "text); choose another folder")
    if _GLOB.search(str(out.absolute())):
        raise LedgerError(E.INVALID_ARGUMENT, f"{out}: a fleet export's path may not hold *, ?, [, ], {{ or }} (its "
                          "tables are read with a file pattern under it); choose another folder")
    if create:
        refuse_output_in_package(out, "the fleet folder (--to, out= in Python)")
        refuse_link_to_nothing(out, "the fleet folder, --to")
        _refuse_inside_export(out)
    marker = meta_dir(out) / "format.json"
    try:
        if marker.is_file():
            with open_to_read(marker) as file:  # a hard link to a ledger open here keeps its locks
                recorded = json.loads(file.read().decode("utf-8"))
            found = recorded.get("format") if isinstance(recorded, dict) else recorded
            if found != FORMAT:
                raise LedgerError(E.INVALID_ARGUMENT, f"{out} holds a fleet export in format {found!r}, not {FORMAT}")
            return out
        if out.exists() and (not out.is_dir() or any(out.iterdir())) and not (create and _made_meanwhile(out)) \
                and not (create and _begun_and_cut_short(out)):
            raise LedgerError(E.INVALID_ARGUMENT, f"{out} is not a fleet export (no {META_DIR}/format.json)" + (
                " and not an empty folder, so nothing is exported into it" if create else
                "; run 'ledger fleet export' into an empty folder first"))
        if not create:
            raise LedgerError(E.INVALID_ARGUMENT, f"{out} holds no fleet export; run 'ledger fleet export'")
        make_folders(meta_dir(out) / "cases")
        (meta_dir(out) / "tmp").mkdir(exist_ok=True)
        write_atomic(marker, json.dumps({"format": FORMAT, "tables": list(TABLES)}).encode() + b"\n")
        fsync_dir(marker.parent)
    except OSError as exc:
        raise os_error(exc, f"cannot use {out} as a fleet export") from None
    except (ValueError, RecursionError):  # nested past reading too
        raise LedgerError(E.INVALID_ARGUMENT, f"{marker} is not valid JSON") from None
    return out


def _begun_and_cut_short(out: Path) -> bool:
    """Whether ``out`` holds only what a first export makes before it marks the folder a fleet export
    (``_fleet`` with an empty ``cases``, a ``tmp`` and at most a temporary file of the mark): an
    export interrupted there (Ctrl-C, a kill, a caller's timeout) left it, and the next one finishes
    it rather than refusing a folder nothing but an export wrote to."""
    meta = meta_dir(out)
    try:
        if [entry.name for entry in os.scandir(out)] != [META_DIR] or meta.is_symlink() or not meta.is_dir():
            return False
        for entry in os.scandir(meta):
            if entry.name in ("cases", "tmp") and entry.is_dir(follow_symlinks=False):
                if entry.name == "cases" and any(os.scandir(entry.path)):
                    return False
            elif not entry.name.startswith(".ledger-tmp-"):
                return False
    except OSError as exc:
        pass_on_interruption(exc)
        return False
    return True


#: How long an export waits for another export that began the same new folder to mark it one.
MARKING_WAIT_S = 5.0


def _made_meanwhile(out: Path) -> bool:
    """Whether another export began ``out`` while this one looked (it holds ``_fleet`` alone) and
    marked it a fleet export within :data:`MARKING_WAIT_S` (two first exports into one new folder)."""
    deadline = time.monotonic() + MARKING_WAIT_S
    while out.is_dir() and [entry.name for entry in os.scandir(out)] == [META_DIR]:
        if (meta_dir(out) / "format.json").is_file():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return False


def _refuse_inside_export(out: Path) -> None:
    """``INVALID_ARGUMENT`` when ``out`` lies inside another fleet export (a folder above it holds
    ``_fleet/format.json``): its files would be read as rows of that export's tables by a reader of
    ``OUTER/TABLE`` (pyarrow, Spark), under a case id made of a folder name."""
    for folder in Path(os.path.abspath(out)).parents:
        if (meta_dir(folder) / "format.json").is_file():
            raise LedgerError(E.INVALID_ARGUMENT, f"{out} is inside the fleet export {folder}: readers of its tables "
                              "would read this one's files as rows of theirs; export to a folder outside it")


@context_manager
def locked_file(path: Path, mode: int) -> Iterator[None]:
    """Hold ``flock(mode)`` on ``path``, a regular file of the export (made if missing and writable). A
    shared lock on a read-only copy of an export that cannot hold one is not taken (nobody writes it,
    so nothing to wait for); a lock file that is a link or no regular file is ``INVALID_ARGUMENT``:
    locking through it would write elsewhere, or hang on a pipe."""
    flags = (os.O_RDWR | os.O_CREAT if mode == fcntl.LOCK_EX else os.O_RDONLY) | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        refuse_held(path)  # a hard link to a ledger open here: closing it would drop that ledger's locks
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        pass_on_interruption(exc)
        if mode == fcntl.LOCK_SH and exc.errno in (errno.ENOENT, errno.EACCES, errno.EROFS):
            yield
            return
        if exc.errno == errno.ELOOP:
            raise LedgerError(E.INVALID_ARGUMENT, f"{path} is a symbolic link: a fleet export locks only its own "
                              "files, never through a link; export into a new folder", path=str(path)) from None
        raise os_error(exc, f"cannot lock {path}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LedgerError(E.INVALID_ARGUMENT, f"{path} is no regular file: a fleet export's lock files are its own; "
                          "export into a new folder", path=str(path))
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)


@context_manager
def export_marked(out: Path) -> Iterator[None]:
    """Mark an export into ``out`` under way while the ``with`` block runs: a file of its own in
    ``_fleet/exports`` that it holds locked (``flock``), removed when the block ends without an
    exception, with the marks of exports that stopped before the end (killed, interrupted, refused),
    which nothing holds locked any more. ``fleet sql`` reads them (:func:`unfinished_exports`).
    ``STORAGE_ERROR`` when the mark cannot be made; ``INVALID_ARGUMENT`` for a link or a file in
    place of ``_fleet/exports``."""
    marks = meta_dir(out) / EXPORTS_DIR
    building = meta_dir(out) / "tmp" / f".export-{secrets.token_hex(6)}{process_tag()}"  # one per export, threads too
    remove_abandoned_temp_files(building.parent, ".export-", "")
    refuse_link(out, marks)
    if os.path.lexists(marks) and not os.path.isdir(marks):
        raise LedgerError(E.INVALID_ARGUMENT, f"{marks} is no folder: a fleet export keeps the marks of exports under "
                          "way there; move it aside (a folder of that name is made again)", path=str(marks))
    try:
        make_folders(marks)
        make_folders(building.parent)
        fd = os.open(building, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise os_error(exc, f"cannot mark an export under way in {marks}", E.STORAGE_ERROR) from None
    try:
        mark = marks / building.name.removeprefix(".")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.replace(building, mark)  # locked before it is seen: a mark nobody holds is an export that stopped
        except OSError as exc:
            discard(building)
            raise os_error(exc, f"cannot mark an export under way in {marks}", E.STORAGE_ERROR) from None
        yield
        discard(mark)
        _remove_stopped_marks(marks)
    finally:
        os.close(fd)


def _remove_stopped_marks(marks: Path) -> None:
    """Remove the marks of exports that stopped before the end (nothing holds them). Best effort."""
    for path, under_way in _marks(marks):
        if not under_way:
            discard(path)


def _marks(marks: Path) -> Iterator[tuple[Path, bool]]:
    """Each regular file in ``marks`` and whether an export holds it locked. Only an export under way
    holds a mark's lock exclusive; every look at one takes it shared for a moment, so that two looks
    (a query's, a finishing export's) never take each other for an export."""
    if os.path.islink(marks):  # never read through a link (an export refuses one there)
        return
    try:
        names = sorted(os.listdir(marks))
    except OSError as oserr:
        pass_on_interruption(oserr)
        return
    for name in names:
        try:
            refuse_held(marks / name)  # a hard link to a ledger open here: closing it would drop its locks
            with file_over(os.open(marks / name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)) as file:
                if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                    continue
                try:
                    fcntl.flock(file.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    yield marks / name, True
                    continue
                yield marks / name, False
        except OSError as oserr:
            pass_on_interruption(oserr)


def unfinished_exports(out: Path) -> str | None:
    """What a reader of ``out`` should know of exports into it that have not gone through their cases:
    one under way, or one that stopped before the end with none finished since (a case it had not
    reached is missing, or as the export before left it); None when there is none."""
    counts = {True: 0, False: 0}
    for _, under_way in _marks(meta_dir(out) / EXPORTS_DIR):
        counts[under_way] += 1
    said = []
    if counts[True]:
        said.append(f"{_exports(counts[True])} into {out} {'is' if counts[True] == 1 else 'are'} under way")
    if counts[False]:
        said.append(f"{_exports(counts[False])} into {out} stopped before the end (killed, interrupted or refused) "
                    "and none has finished since")
    if not said:
        return None
    return (" and ".join(said) + ": a case not yet reached is missing, or as the export before left it"
            + ("; run 'ledger fleet export' again" if counts[False] else ""))


def _exports(count: int) -> str:
    return "an export" if count == 1 else f"{count} exports"


def refuse_link(out: Path, *folders: Path) -> None:
    """``INVALID_ARGUMENT`` naming the first of ``folders`` (inside the export ``out``) that is a
    symbolic link: the export writes only its own folders, never through a link to elsewhere
    (a case package's ``analysis/``, say)."""
    for folder in folders:
        if os.path.islink(folder):
            raise LedgerError(E.INVALID_ARGUMENT, f"{folder} is a symbolic link: a fleet export writes only in its own "
                              f"folders, never through a link; export into a new folder", path=str(folder))


def refuse_links_inside(out: Path) -> None:
    """:func:`refuse_link` for every folder of the export ``out`` that it writes in: ``_fleet`` and its
    ``cases``, ``tmp`` and ``exports``, each table's folder and each case's partition folder in it."""
    refuse_link(out, meta_dir(out), meta_dir(out) / "cases", meta_dir(out) / "tmp", meta_dir(out) / EXPORTS_DIR)
    for table in TABLES:
        refuse_link(out, out / table)
        if (out / table).is_dir():
            with os.scandir(out / table) as entries:
                refuse_link(out, *(Path(entry.path) for entry in entries if entry.is_symlink()))


#: The most bytes a case's record is read for (one an export writes is under 2 KiB; more is no record).
RECORD_BYTES_MAX = 1 << 16

#: The fields of a case's record (``_fleet/cases/<partition>.json``) and their JSON types.
RECORD_FIELDS = {"format": str, "case_id": str, "package_id": str, "head_seq": int, "head_sha256": str, "path": str}


def recorded(record: Path) -> dict[str, Any] | None:
    """The case's record, or None when there is none. A record that is no record (emptied, edited,
    not JSON) is ``INTEGRITY_ERROR``: it anchors the case's exported history, and exporting again
    without it would take a ledger rolled back to an older copy, or another package of the same case
    id, without a word. ``STORAGE_ERROR`` when it cannot be read."""
    try:
        refuse_held(record)  # a hard link to a ledger open here: reading it would drop its locks
        # never waiting on a pipe put in its place, nor following a link
        with file_over(os.open(record, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)) as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise damaged_record(record, "not a regular file")
            data = json.loads(file.read(RECORD_BYTES_MAX + 1).decode("utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise damaged_record(record, "a symbolic link") from None
        raise os_error(exc, f"cannot read the fleet's record {record}", E.STORAGE_ERROR) from None
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON (an empty or cut file too), nested past reading
        raise damaged_record(record, f"not the JSON an export writes: {shown(str(exc), 200)}") from None
    if not isinstance(data, dict) or any(type(data.get(key)) is not kind for key, kind in RECORD_FIELDS.items()):
        raise damaged_record(record, f"not a record an export writes (it needs {', '.join(RECORD_FIELDS)})")
    return data


def case_id_of(partition: str) -> str:
    """The case id a partition folder's name (``case_id=…``, a record's without ``.json``) stands for:
    ``partition_name`` read back."""
    return re.sub(r"%(25|3A)", lambda escaped: "%" if escaped[1] == "25" else ":", partition.removeprefix("case_id="))


def record_names(out: Path, *, aside: bool = False) -> list[str]:
    """The partition folder names of the cases ``out`` holds a record of (``_fleet/cases/<name>.json``;
    with ``aside``, of a record set aside by a publish cut short too), sorted, each once; none when it
    has no records yet."""
    try:
        names = os.listdir(meta_dir(out) / "cases")
    except FileNotFoundError:
        return []
    suffixes = (".json", ASIDE) if aside else (".json",)
    return sorted({stem for stem, dot, suffix in (name.rpartition(".") for name in names)
                   if dot and f".{suffix}" in suffixes})


def recorded_case_ids(out: Path) -> list[str]:
    """The ids of the cases ``out`` holds a record of, one set aside by a publish cut short too (none
    when it has no records yet)."""
    return sorted({case_id_of(name) for name in record_names(out, aside=True)})


def check_record_head(conn: Any, record: Path, last: dict[str, Any], head: dict[str, Any]) -> None:
    """``INTEGRITY_ERROR`` (:func:`damaged_record`) when ``last``, the case's record read from ``record``,
    names as its head an event of the case (``conn``: its ledger, in the export's read snapshot) at
    another seq than its ``head_seq``: a hash names one event, so the record was edited; the export it
    anchors would otherwise call the case's intact history rewritten."""
    sha, seq = last.get("head_sha256"), last.get("head_seq")
    if sha == head["head_sha256"]:
        found = head["head_seq"]
    else:  # the case moved on since: the record's head is an older event, or none of this ledger's
        with translate_sqlite_errors():
            row = conn.execute(statement("fleet_seq_of_sha"), (sha,)).fetchone()
        found = row[0] if row is not None else None
    if found is not None and found != seq:
        raise damaged_record(record, f"its head_seq {seq} is not the seq of its head_sha256, event {found} of the "
                             "case")


def damaged_record(record: Path, why: str) -> LedgerError:
    case_id = case_id_of(record.name[:record.name.rindex(".")])
    return LedgerError(E.INTEGRITY_ERROR, f"the fleet's record of case {case_id}, {record}, is damaged ({why}): it "
                       "holds the head the case's next export is checked against (so that a ledger rolled back, or "
                       "another package of that id, is refused); take the case out ('ledger fleet remove "
                       f"{record.parents[2]} {case_id}'), then export it again", path=str(record))


def file_digests(folder: Path) -> dict[str, dict[str, Any]]:
    """``{table: {"bytes": size, "sha256": hex}}`` of a case's table files built in ``folder``
    (``<table>.parquet``): what its record says its files in the export are."""
    return {table: _digest(folder / f"{table}.parquet") for table in TABLES}


def files_hold(out: Path, name: str, record: dict[str, Any]) -> bool:
    """Whether every table file of the case (partition folder ``name``) is the one its ``record`` names,
    byte for byte: a file replaced since (another case's, another table's, an older export's) or a
    record written before records named their files has the case exported again."""
    files = record.get("files")
    return isinstance(files, dict) and all(
        files.get(table) is not None and _digest(out / table / name / DATA_FILE) == files[table] for table in TABLES)


def _digest(path: Path) -> dict[str, Any] | None:
    """Size and sha256 of the regular file ``path``; None for anything else (missing, a link, a pipe,
    unreadable, the file of a ledger this process holds open: reading it would drop its locks)."""
    try:
        refuse_held(path)
        with file_over(os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)) as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None
            return {"bytes": info.st_size, "sha256": hashlib.file_digest(file, "sha256").hexdigest()}
    except OSError as oserr:
        pass_on_interruption(oserr)
        return None
