"""A fleet of cases as Hive-partitioned Parquet, and DuckDB SQL over it (docs/fleet.md).

:func:`export_fleet` writes, for every case package found, its history and public views as
``OUT/TABLE/case_id=ID/data.parquet`` with explicit column types. It is incremental (the head of
each case is recorded in ``OUT/_fleet/cases/``; an unchanged head is skipped), verifies a case
before exporting it (a failure is reported, nothing of that case is written), replaces a case's
files by rename (readers never see a half-written file) and runs over ``jobs`` processes, each
holding one case at a time. :func:`fleet_rows` runs one DuckDB ``SELECT`` with each table a view
across all cases. Both need DuckDB, the optional extra ``fleet``.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import importlib
import importlib.util
import json
import errno
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..ground import errors as E, interrupts
from .atomic_files import fsync_dir, remove_abandoned_builds, write_atomic
from ..storage.sqlfiles import queries, recorded_schema_version, schema_version, statement
from ..ground.arguments import check_callback, check_iterable
from ..rules.common import check_case_id
from ..services.case import missing_ledger
from ..ground.errors import (LedgerError, describe_value, first_few, machine_refusal, pass_on_interruption, quoted,
                             refuses_unfit_calls, refuses_unfit_calls_of, shown)
from ..model.package import (BUILD_FOLDER_LEFT_OUT, DEAD_LINK_LEFT_OUT, EXPORT_ALONE_LEFT_OUT, LEDGER_FILE,
                             TOO_DEEP_LEFT_OUT, dead_link, export_alone, is_build_folder, is_case_package, once_each,
                             refuse_output_in_package, second_paths)
from ..ground.paths import fs_path, os_error, walk
from ..ground.workers import interrupts_blocked, job_count, parent_gone, shutdown_pool, watch_parent, worker_context
from ..storage.connection import Storage
from ..storage.readonly import open_readonly
from ..storage.sqlite_file import close_then_fold, no_case_in, translate_sqlite_errors
from ..storage.side_files import log_files_exist
from .anchors import anchor_or_none
from .fleet_folder import (ASIDE, DATA_FILE, FORMAT, META_DIR, TABLES, check_out, check_record_head, export_marked,
                           file_digests, files_hold, locked_file, meta_dir, recorded, recorded_case_ids, refuse_link,
                           refuse_links_inside)
from .verify import verify_then_read

#: What ``fleet_head`` reads, as the report and the case's record name it.
HEAD_KEYS = ("case_id", "package_id", "head_seq", "head_sha256")

#: Explicit Parquet types of the known columns (every other column is typed by :func:`column_type`).
INTEGER_COLUMNS = frozenset({
    "seq", "revision", "analysis_revision", "package_generation", "initial_units", "granted_units",
    "spent_units", "rewarded_units", "remaining_units", "low_information_streak", "settled_actions",
    "failed_actions", "cost_units", "novelty_score", "semantic_score", "information_score", "reward_units",
    "declared", "consumed", "remaining", "warning_bps"})
TIMESTAMP_COLUMNS = frozenset({"created_at", "reserved_at", "closed_at"})
#: Name endings that type a column the map does not know yet (a view that gained a column).
INTEGER_SUFFIXES = ("_units", "_score", "_count", "_seq", "_ms", "_bps", "_actions", "_revision")
TIMESTAMP_SUFFIX = "_at"

Progress = Callable[[int], None]


def column_type(name: str) -> str:
    """The DuckDB type a column is exported as: ``BIGINT``, ``TIMESTAMPTZ`` or ``VARCHAR``.

    Known columns come from the explicit map; another column is typed by its name (``…_at`` a UTC
    timestamp; ``…_units``, ``…_score``, ``…_count``, ``…_seq``, ``…_ms``, ``…_bps``, ``…_actions``,
    ``…_revision`` a 64-bit integer; anything else text): every case gives a column the same type."""
    if name in INTEGER_COLUMNS:
        return "BIGINT"
    if name in TIMESTAMP_COLUMNS or name.endswith(TIMESTAMP_SUFFIX):
        return "TIMESTAMPTZ"
    if name.endswith(INTEGER_SUFFIXES):
        return "BIGINT"
    return "VARCHAR"


#: The longest partition folder name: the case's record is written through a temp file named
#: ``.ledger-tmp-NAME.json.PID-TAG-N`` (a pid of up to 7 digits, a tag of 8 characters, N up to 10
#: digits), and a file name holds 255 bytes.
PARTITION_NAME_BYTES_MAX = 255 - len(".ledger-tmp-" ".json.") - 7 - 8 - 10


def partition_name(case_id: str) -> str:
    """``case_id=…`` with ``:`` escaped as ``%3A`` (Hadoop paths cannot hold a colon; Spark,
    Trino and DuckDB read the value back as the case id). ``INVALID_ARGUMENT`` when that name
    passes :data:`PARTITION_NAME_BYTES_MAX` (an id of 128 characters holding more than 38 colons)."""
    name = "case_id=" + case_id.replace("%", "%25").replace(":", "%3A")
    if len(name.encode("utf-8", "surrogateescape")) > PARTITION_NAME_BYTES_MAX:
        raise LedgerError(E.INVALID_ARGUMENT, f"case id {case_id} makes a partition folder name of {len(name)} "
                          f"characters (a colon is written %3A), over the {PARTITION_NAME_BYTES_MAX} a fleet export's "
                          "file names allow: this case cannot be exported to a fleet")
    return name


def one_line_of(exc: BaseException) -> str:
    """The first line of an exception's message (DuckDB's own add lines of advice)."""
    return (str(exc).splitlines() or [""])[0]


def duckdb_module() -> Any:
    try:
        return importlib.import_module("duckdb")
    except Exception as exc:  # noqa: BLE001 - DuckDB's own errors, raised as it loads, are not ImportError
        pass_on_interruption(exc)
        if machine_refusal(exc) == "memory":
            raise LedgerError(E.STORAGE_ERROR, f"DuckDB, which the fleet commands use, had no memory to load: "
                              f"{shown(one_line_of(exc), 300)}") from None
        if not isinstance(exc, ImportError):
            raise
        if isinstance(exc.__context__, KeyboardInterrupt) or isinstance(exc.__cause__, KeyboardInterrupt):
            raise KeyboardInterrupt from None  # Ctrl-C while DuckDB was loading
        if importlib.util.find_spec("duckdb") is not None:  # installed, but it failed to load
            raise LedgerError(E.INVALID_ARGUMENT, f"DuckDB, which the fleet commands use, failed to load: {exc}") from None
        raise LedgerError(E.INVALID_ARGUMENT,
                          "the fleet commands need DuckDB: pip install '.[fleet]' (in a clone of the repository)") from None


def sql_literal(text: str) -> str:
    """``text`` as a DuckDB string literal."""
    return "'" + text.replace("'", "''") + "'"


def sql_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# -- finding the cases ------------------------------------------------------------------

def find_cases(paths: Iterable[str | os.PathLike[str]], left_out: list[tuple[Path, str]] | None = None) -> list[Path]:
    """Every case package (a folder holding ``ledger.sqlite``, or a damaged one that lost it:
    :func:`is_case_package`) named in or found under ``paths`` (folders are walked, a link to a
    case folder taken but no link walked, a case's own folder not entered), in order, once each (a folder reached by two paths
    is the first of them, named by its own path rather than a link's when it is reached both ways).
    A path that is neither a case nor a folder holding one is ``LEDGER_MISSING``. ``left_out``, when
    given, receives ``(path, why)`` of what the walk passes by that may look like a case: a build
    folder, a link that leads nowhere or loops, a folder holding an export alone, a second path to a
    case found already."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]  # one path, not its characters
    found: list[Path] = []  # in order; once_each keeps each case once
    for given in check_iterable(paths, "paths", "a list of cases or folders of cases"):
        root = fs_path(given, "case or folder")
        if os.path.lexists(root / LEDGER_FILE) or is_case_package(root):  # named: a build folder's case too
            found.append(root)
            continue
        if not root.is_dir():
            raise missing_ledger(root)
        any_case = False
        unread: list[tuple[Path, bool]] = []  # the folders the walk cannot list, whether too long to name
        for folder, dirs, files in walk(root, onerror=lambda exc: _unread(exc, unread)):
            dirs.sort()
            if is_case_package(Path(folder)):
                found.append(Path(folder))
                any_case, dirs[:] = True, []
            else:
                if left_out is not None:
                    left_out.extend((Path(folder, d), BUILD_FOLDER_LEFT_OUT) for d in dirs if is_build_folder(d))
                    left_out.extend((Path(folder, f), DEAD_LINK_LEFT_OUT) for f in sorted(files)
                                    if dead_link(Path(folder, f)))
                    left_out.extend([(Path(folder), EXPORT_ALONE_LEFT_OUT)] if export_alone(folder) else [])
                dirs[:] = [d for d in dirs if d != META_DIR and not is_build_folder(d)]
                for name in dirs:  # the walk does not enter links: a link to a case is taken, never walked
                    if _linked_case(Path(folder) / name):
                        found.append(Path(folder) / name)
                        any_case = True
        kept = [path for path, too_deep in unread if not too_deep]  # may hold cases: taken, so that they fail
        found.extend(kept)
        if left_out is not None:  # a path too long to name: no command could open a case there
            left_out.extend((path, TOO_DEEP_LEFT_OUT) for path, too_deep in unread if too_deep)
        if not any_case and not kept:
            raise LedgerError(E.LEDGER_MISSING, f"no case package (a folder with {LEDGER_FILE}) under {root}")
    if left_out is not None:
        left_out.extend(second_paths(found))
    return once_each(found)


def _unread(exc: OSError, unread: list[tuple[Path, bool]]) -> None:
    """A folder the walk could not list (and whether its path is too long to name), unless it is gone
    or a file now (a tool's scratch folder, made and removed while the walk ran, holds no case)."""
    if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        unread.append((Path(exc.filename), exc.errno == errno.ENAMETOOLONG))


def _linked_case(path: Path) -> bool:
    """Whether ``path`` is a link to a case folder (none in a folder this user may list but not search)."""
    try:
        return path.is_symlink() and path.is_dir() and is_case_package(path)
    except OSError as oserr:
        E.pass_on_interruption(oserr)
        return False


# -- exporting one case -----------------------------------------------------------------

_CONNECTION: Any = None


def _connection() -> Any:
    """This process's DuckDB connection: one thread (``jobs`` sets the parallelism), UTC."""
    global _CONNECTION
    if _CONNECTION is None:
        _CONNECTION = duckdb_module().connect()
        _CONNECTION.execute("SET threads = 1")
        _CONNECTION.execute("SET enable_progress_bar = false")
        _CONNECTION.execute("SET TimeZone = 'UTC'")
        _CONNECTION.execute("SET preserve_insertion_order = true")
    return _CONNECTION


def _write_table(cursor: Any, out_file: Path) -> None:
    """Write the rows of ``cursor`` (SQLite) as ``out_file`` (Parquet) with explicit column types
    (every column but ``case_id``, which the partition folder carries).

    The rows go through a JSON-Lines file beside it, streamed, so memory holds no table."""
    names = [d[0] for d in cursor.description]
    source = out_file.with_suffix(".jsonl")
    try:
        with open(source, "w", encoding="utf-8") as lines:
            while chunk := cursor.fetchmany(512):
                for row in chunk:
                    lines.write(json.dumps(dict(zip(names, row)), ensure_ascii=False) + "\n")
    except OSError as exc:  # a full disk: named with the file (verify, around this, knows none)
        raise os_error(exc, f"cannot write {source}", E.STORAGE_ERROR) from None
    # case_id is the partition key (the folder name): a copy inside the file would clash in Spark
    types = {n: column_type(n) for n in names if n != "case_id"}
    read_as = "{" + ", ".join(f"{sql_literal(n)}: {sql_literal('VARCHAR' if t == 'TIMESTAMPTZ' else t)}"
                              for n, t in types.items()) + "}"
    columns = ", ".join(f"CAST(NULLIF({sql_identifier(n)}, '') AS TIMESTAMPTZ) AS {sql_identifier(n)}"
                        if t == "TIMESTAMPTZ" else sql_identifier(n) for n, t in types.items())
    duckdb = duckdb_module()
    try:
        # filled here, not by statement(), whose cache would keep every case's paths
        _connection().execute(queries()["fleet_copy_parquet"].format(
            columns=columns, source=sql_literal(str(source)), types=read_as, target=sql_literal(str(out_file))))
    except BaseException as exc:
        if interrupts.pending():  # DuckDB broke the copy off for a Ctrl-C ("Query interrupted")
            raise KeyboardInterrupt from None
        if isinstance(exc, (duckdb.IOException, duckdb.OutOfMemoryException)):  # the machine's refusal, not the data's
            raise LedgerError(E.STORAGE_ERROR, f"cannot write {out_file}: {shown(one_line_of(exc), 300)}") from None
        if isinstance(exc, duckdb.Error):  # a value its column's type cannot hold
            raise LedgerError(E.INVALID_ARGUMENT, f"cannot write table {out_file.stem} as Parquet: {exc}") from None
        raise
    source.unlink()
    with open(out_file, "rb") as written:
        os.fsync(written.fileno())


def _with_head(case: Path, out: Path, step: Callable[..., None]) -> dict[str, Any]:
    """The report's entry of one case: its head read in one read snapshot of its ledger, then
    ``step(conn, case, out, head, entry)`` in that snapshot (:func:`_head_step` or
    :func:`_export_snapshot`), which sets ``status``; a refusal makes it failed."""
    entry: dict[str, Any] = {"path": str(case), "case_id": None}
    try:
        if not (case / LEDGER_FILE).is_file():
            raise missing_ledger(case)  # a damaged package find_cases took: say what it lacks
        log_was_there = log_files_exist(case / LEDGER_FILE)
        conn = open_readonly(case / LEDGER_FILE)
        try:
            with translate_sqlite_errors():
                conn.execute("BEGIN")  # one snapshot for the head and every table
                has_schema = recorded_schema_version(conn, "main", case / LEDGER_FILE) > 0  # empty, another's?
            row = _head_row(conn, case) if has_schema else None
            if row is None:
                raise no_case_in(conn, case / LEDGER_FILE, path=str(case))
            head = dict(zip(HEAD_KEYS, row))
            entry.update(head)
            step(conn, case, out, head, entry)
        finally:  # the reader made -wal and -shm: leave the case as it was found
            close_then_fold((conn,), case / LEDGER_FILE, not log_was_there)
    except LedgerError as exc:
        if interrupts.pending():  # a refusal Ctrl-C caused inside a callback: the command ends, not the case
            raise KeyboardInterrupt from None
        entry.update(status="failed", error={"code": exc.code, "message": str(exc.message)})
    except OSError as exc:
        error = os_error(exc, f"cannot export {case}")
        entry.update(status="failed", error={"code": error.code, "message": str(error.message)})
    return entry


def _head_row(conn: Any, case: Path) -> tuple[Any, ...] | None:
    """The ``fleet_head`` row of the case: ``INTEGRITY_ERROR`` as verify words it when its
    ``case_status`` view cannot give one (dropped, or without its columns: altered in the file)."""
    try:
        with translate_sqlite_errors():
            row = conn.execute(statement("fleet_head")).fetchone()
    except LedgerError as exc:
        if exc.code in (E.STORAGE_ERROR, E.LEDGER_BUSY):
            raise
        raise _altered_status(case, exc.message) from None
    if row is None:  # the schema and the case's first event are written in one transaction
        raise _altered_status(case, "it gives no row")
    if not all(type(value) is kind for value, kind in zip(row, (str, str, int, str))):
        raise _altered_status(case, "its head holds values of types the ledger never writes")
    try:
        check_case_id(row[0])  # it names the case's files in the export: never a path of its own
    except LedgerError:
        raise _altered_status(case, f"its case_id {quoted(row[0], 80)} is no case id") from None
    return row


def _altered_status(case: Path, why: str) -> LedgerError:
    return LedgerError(E.INTEGRITY_ERROR, f"the ledger's case_status view is missing or altered ({why}); "
                       f"'ledger verify {case}' says what else differs", path=str(case))


def _head_step(conn: Any, case: Path, out: Path, head: dict[str, Any], entry: dict[str, Any]) -> None:
    """``status`` unchanged when ``out`` holds this head of the case, else None (to be exported)."""
    name = partition_name(head["case_id"])
    record = recorded(meta_dir(out) / "cases" / f"{name}.json")
    unchanged = record is not None and _holds_head(record, head) and files_hold(out, name, record)
    entry["status"] = "unchanged" if unchanged else None


def _holds_head(record: dict[str, Any], head: dict[str, Any]) -> bool:
    """Whether the export holds this head of the case, written with this version's columns (tables
    written by a case-ledger of another schema version, or before records named it, lack or differ
    in columns: the case is exported again, so that every partition of a table has the same ones)."""
    return (record.get("package_id"), record.get("head_sha256"), record.get("head_seq"), record.get("schema_version")
            ) == (head["package_id"], head["head_sha256"], head["head_seq"], schema_version())


def _export_snapshot(conn: Any, case: Path, out: Path, head: dict[str, Any], entry: dict[str, Any]) -> None:
    """Verify the case and write its tables (``status`` exported, with the head written), unless
    ``out`` already holds this head (unchanged). The tables are read in verify's snapshot, not ``conn``'s."""
    name = partition_name(head["case_id"])
    record_path = meta_dir(out) / "cases" / f"{name}.json"
    with locked_file(meta_dir(out) / "cases" / f"{name}.lock", fcntl.LOCK_EX):
        record = recorded(record_path)
        last = record or recorded(record_path.with_suffix(ASIDE)) or {}  # set aside by a publish cut short
        if last and last.get("package_id") != head["package_id"]:
            here = last.get("path") == os.path.abspath(case)  # the same folder, holding another package's ledger now
            raise LedgerError(E.INVALID_ARGUMENT, (
                f"case id {head['case_id']} is already exported from another package ({last.get('path')}, "
                f"package_id {last.get('package_id')}" + (f"; this folder's {LEDGER_FILE} is package_id "
                f"{head['package_id']} now: replaced since that export" if here else "") + "); a case id names "
                f"one package in a fleet: to hold this one instead, take that one out ('ledger fleet remove OUT "
                f"{head['case_id']}'), then export again"))
        if last:
            check_record_head(conn, record_path, last, head)
        if record and _holds_head(record, head) and files_hold(out, name, record):
            entry["status"] = "unchanged"
            return
        build = meta_dir(out) / "tmp" / f".build-{name}.{os.getpid()}"
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        try:
            head = _verified_tables(case, head, last, build)
            record = {"format": FORMAT, "case_id": head["case_id"], "package_id": head["package_id"],
                      "head_seq": head["head_seq"], "head_sha256": head["head_sha256"],
                      "path": os.path.abspath(case),  # where it was, whatever folder the next export runs in
                      "schema_version": schema_version(),  # the columns its tables were written with
                      "files": file_digests(build)}  # what a query and the next export check the files against
            # ASCII JSON: a path that is not UTF-8 (a surrogate escape) is written as \udcXX and read back the same
            _publish(build, out, name, json.dumps(record).encode("ascii") + b"\n")
        finally:
            shutil.rmtree(build, ignore_errors=True)
        entry.update(head, status="exported")


def _verified_tables(case: Path, head: dict[str, Any], last: dict[str, Any], build: Path) -> dict[str, Any]:
    """Verify the case and write its tables into ``build`` from the very snapshot verified (a change
    made before verify read it and undone after was exported unverified); its head is returned."""
    def write(scratch: Storage) -> dict[str, Any]:  # the replay, the ledger attached to it as orig
        conn = scratch.conn
        with translate_sqlite_errors():
            seen = dict(zip(HEAD_KEYS, conn.execute(statement("fleet_head", "orig")).fetchone()))
        if (seen["case_id"], seen["package_id"]) != (head["case_id"], head["package_id"]) \
                or seen["head_seq"] < head["head_seq"]:  # the ledger only grows: another file was put there
            raise LedgerError(E.LEDGER_BUSY, f"{case / LEDGER_FILE} was replaced while it was exported; export again")
        # the replay's tables, which verify found equal to the ledger's, brought to this version's
        # schema as a writer's open upgrades a ledger: every table has this version's columns, also
        # for a ledger an older case-ledger wrote and none has opened since (the ledger is not touched)
        scratch.apply_migrations(triggers=False)
        for table in TABLES:
            query = statement("fleet_events" if table == "events" else "fleet_view", "main", table=table)
            with translate_sqlite_errors():
                _write_table(conn.execute(query), build / f"{table}.parquet")
        return seen
    try:  # the head recorded at the last export anchors the case: a rewrite since fails
        return verify_then_read(case, write, anchors=anchor_or_none(last.get("head_seq"), last.get("head_sha256")))[1]
    except LedgerError as exc:
        if "anchored_seq" not in exc.details or last.get("path") in (str(case), os.path.abspath(case)):
            raise
        raise LedgerError(exc.code, f"{exc.message} (this fleet last exported the case from {last.get('path')}: "
                          "is this a copy of it?)", **exc.details) from None


def _publish(build: Path, out: Path, name: str, record: bytes) -> None:
    """Move the built files into place, then write the case's ``record``: each file a rename, all
    under the export lock, which ``fleet sql`` holds shared while it reads (so it never sees two
    heads of a case). The old record waits aside as ``case_id=<ID>.publishing`` meanwhile: a publish
    cut short between two renames leaves the case unrecorded, out of ``fleet sql`` rather than read
    at two heads, until the next export (which that record still anchors) publishes it whole."""
    targets = [out / table / name for table in TABLES]
    for target in targets:
        target.mkdir(parents=True, exist_ok=True)
        refuse_link(out, target.parent, target)
        refuse_output_in_package(target, "the fleet folder (--to, out= in Python)")  # a case package someone put in the export's place
    record_path = meta_dir(out) / "cases" / f"{name}.json"
    with locked_file(meta_dir(out) / "lock", fcntl.LOCK_EX):
        if parent_gone():  # the export was killed: its workers write nothing more into OUT
            raise KeyboardInterrupt
        if os.path.lexists(record_path):
            os.replace(record_path, record_path.with_suffix(ASIDE))
        for table, target in zip(TABLES, targets):
            os.replace(build / f"{table}.parquet", target / DATA_FILE)
        for target in targets:
            fsync_dir(target)  # the files are in place on disk before the record names their head
        write_atomic(record_path, record)
        fsync_dir(record_path.parent)
        record_path.with_suffix(ASIDE).unlink(missing_ok=True)


# -- exporting a fleet ------------------------------------------------------------------

@refuses_unfit_calls_of
@dataclass
class FleetReport:
    """What :func:`export_fleet` did: counts, and every case that failed (path, case id, error)."""

    out: str
    cases: int = 0
    exported: int = 0
    unchanged: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)

    def add(self, entry: dict[str, Any]) -> None:
        self.cases += 1
        if entry["status"] == "exported":
            self.exported += 1
        elif entry["status"] == "unchanged":
            self.unchanged += 1
        else:
            self.failed.append(entry)

    def to_dict(self) -> dict[str, Any]:
        return {"out": self.out, "cases": self.cases, "exported": self.exported, "unchanged": self.unchanged,
                "failed": self.failed}


#: A pool's task: ``(case folder, out)`` to the report's entry of the case.
_Worker = Callable[[tuple[str, str]], dict[str, Any]]


def _head_worker(args: tuple[str, str]) -> dict[str, Any]:
    return _with_head(Path(args[0]), Path(args[1]), _head_step)


def _export_worker(args: tuple[str, str]) -> dict[str, Any]:
    return _with_head(Path(args[0]), Path(args[1]), _export_snapshot)


def _blocked_map(pool: concurrent.futures.ProcessPoolExecutor) -> Callable[[Any, list[Any], int], Iterable[Any]]:
    """``pool.map`` with SIGINT blocked while it submits, which starts the workers: they inherit the
    mask, so a Ctrl-C to the process group interrupts this process alone (workers.interrupts_blocked)."""
    def run(worker: Any, work: list[Any], chunk: int) -> Iterable[Any]:
        with interrupts_blocked():
            return pool.map(worker, work, chunksize=chunk)
    return run


@refuses_unfit_calls
def export_fleet(paths: Iterable[str | os.PathLike[str]], out: str | os.PathLike[str], *, jobs: int | None = 1,
                 progress: Progress | None = None) -> FleetReport:
    """Export every case found in ``paths`` (cases or folders of cases) to ``out`` (docs/fleet.md).

    A case whose head is the one recorded in ``out`` is skipped; a case that fails ``verify``
    (or cannot be read) is reported in ``failed`` and nothing of it is written. Cases of one case
    id in several folders (copies of one package, or two packages) all fail, each naming the
    others: which of them the fleet should hold is not for the order of the folders to decide.
    ``jobs`` processes (an integer from 1 to 256, else ``INVALID_ARGUMENT``; None: the cores this
    process may use) each export one case at a time. ``progress(1)`` is called per case.
    A path given that does not exist is ``LEDGER_MISSING`` before anything is written (a folder that
    lost its ledger is a case that fails, in ``failed``).
    """
    jobs = job_count(jobs)
    check_callback(progress, "progress", 1)
    duckdb_module()
    cases = find_cases(paths)
    target = check_out(fs_path(out, "the fleet folder (--to, out= in Python)"), create=True).absolute()
    refuse_links_inside(target)
    remove_abandoned_builds(meta_dir(target) / "tmp", ".build-")
    with export_marked(target):
        report = FleetReport(str(out))
        pool = None
        try:
            if jobs == 1 or len(cases) <= 1:
                run: Callable[[_Worker, list[tuple[str, str]], int], Iterable[dict[str, Any]]] = \
                    lambda worker, work, chunk: map(worker, work)
            else:
                pool = concurrent.futures.ProcessPoolExecutor(  # a worker ends with this process
                    max_workers=jobs, mp_context=worker_context(), initializer=watch_parent, initargs=(os.getpid(),))
                run = _blocked_map(pool)
            heads = list(run(_head_worker, [(str(case), str(target)) for case in cases], 64))
            _refuse_shared_case_ids(heads, recorded_case_ids(target))
            entries = iter(run(_export_worker, [(e["path"], str(target)) for e in heads if e["status"] is None], 4))
            for head in heads:
                report.add(head if head["status"] is not None else next(entries))
                if progress is not None:
                    progress(1)
        except concurrent.futures.BrokenExecutor:  # BrokenProcessPool
            raise LedgerError(E.STORAGE_ERROR, "a worker process of the export ended before its cases were done "
                              "(killed, or out of memory); the cases exported so far stay, and the next export of "
                              "these folders does the rest") from None
        finally:
            if pool is not None:
                shutdown_pool(pool)
    return report


def _partition_or_none(case_id: str) -> str | None:
    """:func:`partition_name` of ``case_id``, or None for an id no fleet export can hold."""
    try:
        return partition_name(case_id)
    except LedgerError:
        return None


@refuses_unfit_calls
def remove_from_fleet(out: str | os.PathLike[str], case_ids: Iterable[str]) -> list[str]:
    """Take the cases of ``case_ids`` out of the fleet export ``out`` (docs/fleet.md): each one's
    record first (``fleet sql`` leaves an unrecorded case out), then its partition of every table,
    under the case's lock and the export's (a ``fleet sql`` reading meanwhile is waited for). Returns
    the case ids removed, in the order given. ``INVALID_ID`` for a text that is no case id,
    ``INVALID_ARGUMENT`` when ``out`` is no fleet export or for an id it does not hold (then nothing
    is removed); ``STORAGE_ERROR`` when a file cannot be removed.
    """
    ids = list(check_iterable(case_ids, "case_ids", "a list of case ids"))
    for case_id in ids:
        if not isinstance(case_id, str) or not case_id:
            raise LedgerError(E.INVALID_ARGUMENT, f"each case id must be a non-empty str, got {describe_value(case_id)}")
        check_case_id(case_id)  # a case id names no folder of its own: "A:1/../.." names none
    root = check_out(fs_path(out, "the fleet folder (out)"), create=False).absolute()
    refuse_links_inside(root)
    names = {case_id: _partition_or_none(case_id) for case_id in ids}
    missing = [case_id for case_id, name in names.items() if name is None or not _in_fleet(root, name)]
    if missing:
        never = [case_id for case_id in missing if names[case_id] is None]
        raise LedgerError(E.INVALID_ARGUMENT, f"the fleet export {root} holds no case {first_few(missing, 3)}; "
                          "nothing was removed ('ledger fleet sql OUT \"SELECT case_id FROM case_status\"' lists "
                          "those it holds)" + (f"; no fleet export can hold {first_few(never, 1)}: its partition "
                                               f"folder name would pass {PARTITION_NAME_BYTES_MAX} characters"
                                               if never else ""))
    for name in names.values():
        cases = meta_dir(root) / "cases"
        try:
            with locked_file(cases / f"{name}.lock", fcntl.LOCK_EX), locked_file(meta_dir(root) / "lock", fcntl.LOCK_EX):
                for record in (cases / f"{name}.json", cases / f"{name}{ASIDE}"):
                    record.unlink(missing_ok=True)
                fsync_dir(cases)  # unrecorded on disk before its files go
                for table in TABLES:
                    refuse_link(root, root / table, root / table / name)
                    if os.path.lexists(root / table / name):
                        shutil.rmtree(root / table / name)
        except OSError as exc:
            raise os_error(exc, f"cannot remove {name} from the fleet export {root}") from None
    return list(names)


def _in_fleet(root: Path, name: str) -> bool:
    """Whether the fleet export at ``root`` holds anything of the case whose partitions are ``name``."""
    cases = meta_dir(root) / "cases"
    return any(os.path.lexists(path) for path in (cases / f"{name}.json", cases / f"{name}{ASIDE}",
                                                  *(root / table / name for table in TABLES)))


#: The other folders of a shared case id a failure names (the rest counted): one line each, not n².
SHARED_NAMED = 3


def _refuse_shared_case_ids(heads: list[dict[str, Any]], recorded: list[str]) -> None:
    """Fail every entry whose case id another entry of this export has too, naming the others; and every
    one not ``recorded`` in the fleet yet whose id differs only in letter case from another's, of this
    export or recorded (their files would be one where file names ignore case: macOS, Windows)."""
    folders: dict[str, list[str]] = {}
    for entry in heads:
        if entry["status"] != "failed":
            folders.setdefault(entry["case_id"], []).append(entry["path"])
    spellings: dict[str, set[str]] = {}
    for case_id in [*folders, *recorded]:
        spellings.setdefault(case_id.lower(), set()).add(case_id)
    for entry in heads:
        shared = folders.get(entry.get("case_id"), []) if entry["status"] != "failed" else []
        if len(shared) > 1:
            other = [path for path in shared if path != entry["path"]]
            entry.update(status="failed", error={"code": E.INVALID_ARGUMENT, "message": (
                f"case id {entry['case_id']} is also in {first_few(other, SHARED_NAMED)}; a case id names one "
                "package in a fleet, so none of them is exported: give one folder per case id")})
        elif shared and entry["case_id"] not in recorded and len(spellings[entry["case_id"].lower()]) > 1:
            alike = sorted(spellings[entry["case_id"].lower()] - {entry["case_id"]})
            entry.update(status="failed", error={"code": E.INVALID_ARGUMENT, "message": (
                f"case id {entry['case_id']} differs from case id {first_few(alike, SHARED_NAMED)} (of this export or "
                "in the fleet already) only in letter case: their files would be one where file names ignore case "
                "(macOS, Windows), so it is not exported; a fleet holds case ids that differ otherwise")})
