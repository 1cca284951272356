"""Querying a fleet export with DuckDB (docs/fleet.md): one read-only ``SELECT`` over every
exported table, seen as a view across all cases, that can read nothing outside the export;
values as the other commands print them.
"""

from __future__ import annotations

import datetime
import decimal
import fcntl
import os
import re
import stat
import signal
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

from ..ground import errors as E
from ..ground.arguments import check_callback
from ..ground.canonical import check_int
from ..ground.descriptors import is_held
from ..ground.errors import LedgerError, machine_refusal, refuses_unfit_calls, shown, pass_on_interruption
from ..ground.paths import fs_path
from ..ground.interrupts import context_manager
from ..storage.sqlfiles import queries
from .fleet import duckdb_module, one_line_of, sql_identifier, sql_literal
from .fleet_folder import (DATA_FILE, TABLES, check_out, locked_file, meta_dir, record_names, recorded,
                           unfinished_exports)

def _plain(value: Any) -> Any:
    """A DuckDB value as the other commands print values: times as RFC 3339 text, exact decimals,
    intervals and UUIDs as text; lists and structs (maps: lists of key/value pairs) with their
    values converted the same way."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
            return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return value.isoformat()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, datetime.timedelta)):
        return str(value)
    return value


def _damaged(exc: Exception, where: Path) -> LedgerError:
    """``INTEGRITY_ERROR``: a file of the export at or under ``where`` DuckDB cannot read; ``STORAGE_ERROR``
    when the machine refused it (the open-file limit reached, no memory), which is no damage."""
    said = shown(one_line_of(exc), 300)
    if machine_refusal(exc) in ("descriptors", "memory"):
        return LedgerError(E.STORAGE_ERROR, f"{where}: a file of the export cannot be read for lack of file "
                           f"descriptors or memory ({said}; a limit such as 'ulimit -n' or 'ulimit -v'?): the export "
                           "is not at fault", path=str(where))
    return LedgerError(E.INTEGRITY_ERROR, f"{where}: a file of the export cannot be read ({said}); export the fleet "
                       "again: it writes anew each case whose files changed since", path=str(where))


def _refuse_linked_meta(out: Path) -> None:
    """``INTEGRITY_ERROR`` when the export's ``_fleet`` folder, or its ``tmp`` folder, is a symbolic link,
    which no export makes (its lock and records are read there; DuckDB's temporary files, which it
    read through ``_fleet/tmp`` when they went there, now go to a private folder of their own)."""
    for folder in (meta_dir(out), meta_dir(out) / "tmp"):
        if os.path.islink(folder):
            raise LedgerError(E.INTEGRITY_ERROR, f"{folder} is a symbolic link, which a fleet export never makes (a "
                              "query reads only the export's own files); export the fleet again into a new folder",
                              path=str(folder))


def _fleet_connection(out: Path, spill: Path) -> tuple[Any, dict[str, LedgerError]]:
    """A DuckDB connection with a view per exported table that can read nothing but ``out`` and its
    own temporary files in ``spill`` (a new private folder), and the refusal of each table whose view
    DuckDB could not make (a damaged file: no view)."""
    duckdb = duckdb_module()
    con = duckdb.connect()
    broken: dict[str, LedgerError] = {}
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")  # it drew on stdout, in the middle of --csv or --json rows
    # DuckDB adds its temp folder (./.tmp by default) to the readable ones, resolved once: a new private
    # folder nobody else can replace (a folder of the export could be swapped for a link meanwhile)
    con.execute(f"SET temp_directory = {sql_literal(str(spill))}")
    recorded = record_names(out)
    written, damaged = _recorded_files(out, recorded)
    for table in TABLES:
        problem = damaged or _unreadable_table(out / table, recorded, written)
        if problem is not None:
            broken[table] = problem
        elif recorded:  # no view of a table no case is in yet
            # the recorded cases' files only: a partition folder the export did not write is not read
            files = "[" + ", ".join(sql_literal(str(out / table / name / DATA_FILE)) for name in recorded) + "]"
            try:
                con.execute(queries()["fleet_table_view"].format(table=table, files=files))
            except duckdb.Error as exc:
                broken[table] = _damaged(exc, out / table)
    # each intact table's folder and the cases' records alone: a read by path of a damaged table's files,
    # however spelled, is refused by DuckDB quoting that path (never an answer short of a missing file)
    readable = ", ".join(sql_literal(str(folder) + os.sep) for folder in
                         [out / table for table in TABLES if table not in broken] + [meta_dir(out) / "cases"])
    con.execute(f"SET allowed_directories = [{readable}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con, broken


def _unreadable_table(folder: Path, recorded: list[str], files: dict[str, dict[str, Any]]) -> LedgerError | None:
    """``INTEGRITY_ERROR`` for a table ``folder`` that lacks the file of a recorded case (the record is
    written after the files: removed since), holds one of another size than the case's record names
    (``files``: replaced since, by another case's, another table's or an older export's), or holds a
    link where the export made a folder or file (DuckDB reads nothing outside the export: it said
    "Permission Error"); else None. One listing of the folder and one ``lstat`` per case."""
    def refused(why: str, fix: str = "export the fleet again into a new folder") -> LedgerError:
        return LedgerError(E.INTEGRITY_ERROR, f"{folder}: {why}; {fix}", path=str(folder))
    rewritten = "export the fleet again: it writes that case's files anew"
    link = "is a symbolic link, which a fleet export never makes (a query reads only the export's own files)"
    if os.path.islink(folder):
        return refused(f"{folder} {link}")
    try:
        linked = {entry.name for entry in os.scandir(folder) if entry.is_symlink()}
    except OSError as oserr:
        pass_on_interruption(oserr)
        linked = set()
    for name in recorded:
        if name in linked:
            return refused(f"{folder / name} {link}")
        try:
            info: os.stat_result | None = os.lstat(folder / name / DATA_FILE)
        except OSError as oserr:
            pass_on_interruption(oserr)
            info = None
        mode = info.st_mode if info is not None else 0
        if stat.S_ISLNK(mode):
            return refused(f"{folder / name / DATA_FILE} {link}")
        if not stat.S_ISREG(mode):
            return refused(f"{folder / name / DATA_FILE} is missing, though the export records that case", rewritten)
        if info is not None and is_held(info):  # DuckDB's close of it would drop that ledger's locks
            return refused(f"{folder / name / DATA_FILE} is the file of a ledger open in this process (a hard "
                           "link to it), not the table the export wrote", rewritten)
        written = files.get(name, {}).get(folder.name)
        if isinstance(written, dict) and type(written.get("bytes")) is int and info is not None \
                and info.st_size != written["bytes"]:  # a record naming no size: the next export rewrites the case
            return refused(f"{folder / name / DATA_FILE} is not the file the export wrote ({info.st_size} bytes; the "
                           f"case's record names one of {written.get('bytes')}): replaced or changed since", rewritten)
    return None


def _recorded_files(out: Path, names: list[str]) -> tuple[dict[str, dict[str, Any]], LedgerError | None]:
    """The table files each recorded case's record names (``files``: size and sha256 by table), by
    partition name (a record that names none, written before records did, is left out: its files are
    then only required to be there); and the refusal of the first record that is damaged (emptied,
    edited, no record an export writes), which leaves its case's files unchecked, so no table is read."""
    files = {}
    for name in names:
        try:
            record = recorded(meta_dir(out) / "cases" / f"{name}.json")
        except LedgerError as exc:
            if exc.code != E.INTEGRITY_ERROR:
                raise
            return files, exc
        if record is not None and isinstance(record.get("files"), dict):
            files[name] = record["files"]
    return files, None


def _one_select(con: Any, query: str) -> None:
    duckdb = duckdb_module()
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:  # a statement that does not parse: said on one line, as a failing one is
        raise _query_error(exc, 0, threading.Event()) from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise LedgerError(E.INVALID_ARGUMENT, "only one SELECT statement is allowed (the export is read-only)",
                          query="refused")


@context_manager
def fleet_rows(out: str | os.PathLike[str], query: str, *, timeout_ms: int = 30_000,
               started: Callable[[], None] | None = None,
               note: Callable[[str], None] | None = None) -> Iterator[tuple[list[str], Iterator[tuple]]]:
    """Run one DuckDB ``SELECT`` over the fleet export ``out``: ``with fleet_rows(out, q) as (names, rows)``.

    Each exported table is a view across all cases with ``case_id`` first. Anything but one
    ``SELECT``, a failing query or one still running after ``timeout_ms`` is ``INVALID_ARGUMENT``;
    the query can read no file outside ``out``. Times come back as RFC 3339 UTC text. ``started()``,
    if given, is called once the export's lock is held (a ``fleet export`` publishing holds it), as the
    query's time limit starts. ``note(text)``, if given, is called then with a sentence when an export
    into ``out`` is under way, or stopped before the end with none finished since: a case it had not
    reached is missing, or as the export before left it (docs/fleet.md, "ledger fleet sql").
    """
    check_int(timeout_ms, "timeout_ms", minimum=1, maximum=86_400_000)
    check_callback(started, "started", 0)
    check_callback(note, "note", 1)
    if not isinstance(query, str):
        raise LedgerError(E.INVALID_ARGUMENT, f"query must be a str, got {type(query).__name__}")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:  # DuckDB takes UTF-8 text only: it raised a TypeError
        raise LedgerError(E.INVALID_ARGUMENT, f"query refused: it holds text that is not valid Unicode ({exc.reason} "
                          f"at position {exc.start}), which DuckDB cannot be given", query="refused") from None
    root = check_out(fs_path(out, "export folder"), create=False).absolute()
    _refuse_linked_meta(root)
    duckdb = duckdb_module()
    with locked_file(meta_dir(root) / "lock", fcntl.LOCK_SH), _ctrl_c_is_an_interrupt(), \
            tempfile.TemporaryDirectory(prefix="ledger-fleet-sql-", ignore_cleanup_errors=True) as spill:
        if started is not None:
            started()
        if note is not None and (unfinished := unfinished_exports(root)) is not None:
            note(unfinished)
        con, broken = _fleet_connection(root, Path(spill))
        timed_out = threading.Event()

        def stop() -> None:
            timed_out.set()
            con.interrupt()

        timer = threading.Timer(timeout_ms / 1000, stop)
        timer.start()
        try:
            with _interrupt_on_ctrl_c(con):
                _one_select(con, query)
                try:
                    relation = con.sql(query)
                    relation = _times_as_text(relation)
                    names = list(relation.columns)
                except UnicodeDecodeError as exc:
                    raise _not_utf8(root, exc) from None
                except duckdb.Error as exc:
                    raise _unreadable(con, root, exc, broken, query, timed_out) or _query_error(
                        exc, timeout_ms, timed_out, _holds_cases(root)) from None
                yield names, _fetch(con, relation, timeout_ms, timed_out, root, query, broken)
        finally:
            timer.cancel()
            con.close()


@context_manager
def _interrupt_on_ctrl_c(con: Any) -> Iterator[None]:
    """Make a Ctrl-C stop ``con``'s query at once. DuckDB may hold the main thread without looking for
    signals, so Python's own handler would run only when it returns; but Python's C-level handler
    writes the signal's number to the wakeup file at once, and a thread watching that file
    interrupts the query (which then ends as a ``KeyboardInterrupt``). In the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reading, writing = os.pipe()
    os.set_blocking(writing, False)
    try:
        previous = signal.set_wakeup_fd(writing, warn_on_full_buffer=False)
    except ValueError:  # no signal handling here
        os.close(reading)
        os.close(writing)
        yield
        return

    def watch() -> None:
        while data := os.read(reading, 64):
            if signal.SIGINT in data:
                con.interrupt()
            if previous >= 0:  # the wakeup file set before this one (a caller's own watcher) is told too
                try:
                    os.write(previous, data)
                except OSError as oserr:
                    pass_on_interruption(oserr)

    watcher = threading.Thread(target=watch, name="ledger-ctrl-c", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.close(writing)  # the watcher reads the end of the file and stops
        watcher.join()
        os.close(reading)


@context_manager
def _ctrl_c_is_an_interrupt() -> Iterator[None]:
    """DuckDB reports a Ctrl-C that stopped it (setting up the views, running or fetching the query)
    as a plain ``RuntimeError`` "Query interrupted": it is the ``KeyboardInterrupt`` again."""
    try:
        yield
    except RuntimeError as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt) or isinstance(exc.__context__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise


#: DuckDB's name of a time with a zone, which its Python conversion turns into values only with pytz.
ZONED = "TIMESTAMP WITH TIME ZONE"
#: How DuckDB writes each time type as text (``{}``: the value), so that nothing is lost on the
#: way to Python: infinite times and dates (Python would give its largest or smallest one),
#: nanoseconds, dates before year 1 and intervals of months (Python would count 30 days).
def _dated(rest: str, value: str = "{0}") -> str:
    """``strftime(value, '%Y' + rest)``, a year before 1 written as ISO 8601 writes it, with at least
    four digits after its minus sign (``-0001``, as year 0 is ``0000``; DuckDB's ``%Y`` writes ``-1``,
    and its ``year()`` of a time with a zone counts years before Christ upwards)."""
    text = f"strftime({value}, '%Y{rest}')"
    for digits, zeros in ((r"\d", "000"), (r"\d\d", "00"), (r"\d\d\d", "0")):  # no brace: the text is formatted
        text = f"regexp_replace({text}, '^-({digits})-', '-{zeros}" + r"\1" + "-')"
    return text


TEXT_OF = {
    ZONED: _dated("-%m-%dT%H:%M:%S.%fZ"),  # the session's zone is UTC
    "TIMESTAMP": _dated("-%m-%dT%H:%M:%S.%f"),
    "TIMESTAMP_S": _dated("-%m-%dT%H:%M:%S.%f", "CAST({0} AS TIMESTAMP)"),
    "TIMESTAMP_MS": _dated("-%m-%dT%H:%M:%S.%f", "CAST({0} AS TIMESTAMP)"),
    "TIMESTAMP_NS": _dated("-%m-%dT%H:%M:%S.%n"),
    "DATE": _dated("-%m-%d"),
    "INTERVAL": "CAST({0} AS VARCHAR)",
    "TIME_NS": "CAST({0} AS VARCHAR)",
}


#: Lists, arrays, structs and maps nested deeper than this are written whole as DuckDB's text: the
#: time DuckDB takes to prepare the rewritten query grows fast with depth (a list is a lambda,
#: each doubling it), and no time limit reaches that preparation.
NESTING_MAX = 4
#: A column whose rewrite would be longer than this (a wide struct of structs holding times) is
#: written whole as DuckDB's text, for the same reason.
REWRITE_CHARS_MAX = 20_000


def _as_text(value: str, kind: Any, levels: int = 0) -> str | None:
    """The SQL that writes ``value`` (an expression of DuckDB type ``kind``) as :data:`TEXT_OF`
    says, and the same inside lists, arrays, structs and maps (element by element, field by field;
    ``levels``: the nesting around ``value``); None when ``kind`` holds nothing that needs such care."""
    if str(kind) in TEXT_OF:
        return TEXT_OF[str(kind)].format(value)
    if kind.id not in _NESTED or not _holds_times(kind):
        return None
    children = list(kind.children)
    if kind.id == "union" or levels >= NESTING_MAX:
        return f"CAST({value} AS VARCHAR)"  # a union of text members cannot be built: its member as DuckDB writes it
    item = f"_ledger_item_{levels}"  # a lambda's parameter, named bare: no column of the query can hide it
    if kind.id in ("list", "array"):  # children: the element's type (an array's size after it)
        return f"list_transform({value}, lambda {item}: {_as_text(item, children[0][1], levels + 1) or item})"
    if kind.id == "struct":
        return _rebuilt(value, children, levels + 1)
    pairs = _rebuilt(item, children, levels + 1)  # a map: a list of key/value structs
    return f"map_from_entries(list_transform(map_entries({value}), lambda {item}: {pairs}))"


_NESTED = ("list", "array", "struct", "map", "union")


def _holds_times(kind: Any) -> bool:
    """Whether DuckDB type ``kind`` is, or holds at any depth, a type of :data:`TEXT_OF`."""
    if str(kind) in TEXT_OF:
        return True
    return kind.id in _NESTED and any(_holds_times(child) for _, child in kind.children
                                      if not isinstance(child, int))  # an array's size


def _rebuilt(value: str, fields: list[tuple[str, Any]], levels: int) -> str:
    """The struct ``value`` (its ``fields``: name and type, in order) built again with each field
    written by :func:`_as_text` where it needs it (``levels``: the nesting around the fields);
    unnamed fields (``row(…)``) stay unnamed, and a null ``value`` stays null."""
    texts = []
    for number, (_, child) in enumerate(fields, start=1):
        field = f"struct_extract_at({value}, {number})"
        texts.append(_as_text(field, child, levels) or field)
    if all(name == "" for name, _ in fields):
        packed = f"row({', '.join(texts)})"
    else:
        packed = "struct_pack(" + ", ".join(f"{sql_identifier(name)} := {text}"
                                            for (name, _), text in zip(fields, texts)) + ")"
    return f"CASE WHEN {value} IS NULL THEN NULL ELSE {packed} END"


def _times_as_text(relation: Any) -> Any:
    """``relation`` with its time, date and interval values, at any depth of lists, structs and
    maps, as text written by DuckDB (:data:`TEXT_OF`); a union holding such a value as DuckDB's
    text of its member. Anything else holding times with a zone gets them as UTC times without a
    zone (Python converts those only with pytz)."""
    columns, rewritten = [], False
    for number, (name, kind) in enumerate(zip(relation.columns, relation.types), start=1):
        column = f"#{number}"  # by position: two columns of one name are two columns
        text = _as_text(column, kind)
        if text is not None and len(text) > REWRITE_CHARS_MAX:
            text = f"CAST({column} AS VARCHAR)"
        elif text is None and ZONED in str(kind):
            text = f"CAST({column} AS {str(kind).replace(ZONED, 'TIMESTAMP')})"
        rewritten = rewritten or text is not None
        columns.append(f"{text or column} AS {sql_identifier(name)}")
    return relation.query("q", f"SELECT {', '.join(columns)} FROM q") if rewritten else relation


def _not_utf8(out: Path, exc: UnicodeDecodeError) -> LedgerError:
    """``INTEGRITY_ERROR``: DuckDB handed over a text (a value, a column's name) that is not UTF-8, which
    no export writes and DuckDB does not check: a damaged file, of a table not known here."""
    return LedgerError(E.INTEGRITY_ERROR, f"{out}: a text of the export is not valid UTF-8 ({exc}), which an export "
                       "never writes: a file was damaged since; export the fleet again: it writes anew each case "
                       "whose files changed since", path=str(out))


def _holds_cases(out: Path) -> bool:
    """True when some table of the export ``out`` holds a case's partition."""
    return any((out / table).is_dir() and any((out / table).iterdir()) for table in TABLES)


def _unreadable(con: Any, out: Path, exc: Exception, broken: dict[str, LedgerError], query: str,
                timed_out: threading.Event) -> BaseException | None:
    """The ``INTEGRITY_ERROR`` behind a failing query, if a damaged file of the export is: a table
    whose view could not be made (the query names it), a path in a damaged table's folder (which DuckDB
    may not read), a file of a recorded case DuckDB names that does not read as Parquet
    (:func:`_confirmed_damage`; another path inside the export, one the query gave, is its own error), or, for an
    error that names no file and may be a file's (DuckDB's plain ``Error``, as a damaged footer of any
    file but the first gives: "TProtocolException: Invalid data"), a table whose files do not read
    (:func:`_damaged_table`; ``KeyboardInterrupt`` when Ctrl-C stops that look)."""
    text = str(exc)
    duckdb = duckdb_module()
    if isinstance(exc, duckdb.CatalogException):
        for table, refusal in broken.items():  # SQL names are not case-sensitive
            if f"name {table} does not exist" in text.lower():
                return refusal
    if isinstance(exc, (duckdb.InvalidInputException, duckdb.IOException, duckdb.PermissionException)):
        names = record_names(out)
        for table, file in _export_paths_named(out, text, names):
            if table in broken:  # its folder is not readable: a read of it by path is refused so
                return broken[table]
            if file is not None:  # a file the export recorded: damaged, or read with the wrong reader?
                return _confirmed_damage(con, exc, out / table, file, names, timed_out)
        return None  # a path the query itself gave (a file the export never made): its own error
    if type(exc) is duckdb.Error or isinstance(exc, (duckdb.SerializationException, duckdb.InternalException)):
        return _damaged_table(con, out, query, timed_out)  # no query's own error is of these
    return None


def _export_paths_named(out: Path, text: str, names: list[str]) -> Iterator[tuple[str, Path | None]]:
    """``(table, recorded file or None)`` for each path DuckDB's error ``text`` quotes that lies in a table
    folder of the export ``out``, however the query spelled it (relative, ``/./``, through a link to
    ``out``: each resolved as DuckDB reads it, from this process's folder); the file when it is a recorded
    case's table file (``names``: the recorded partitions)."""
    real_out = os.path.realpath(out)
    recorded_names = set(names)
    for quoted in re.findall(r'"([^"\n]+)"|\'([^\'\n]+)\'', text):
        real = os.path.realpath(quoted[0] or quoted[1])
        if not real.startswith(real_out + os.sep):
            continue
        parts = Path(os.path.relpath(real, real_out)).parts
        if parts[0] in TABLES:
            recorded_file = len(parts) == 3 and parts[1] in recorded_names and parts[2] == DATA_FILE
            yield parts[0], out / parts[0] / parts[1] / DATA_FILE if recorded_file else None


def _confirmed_damage(con: Any, exc: Exception, folder: Path, file: Path, names: list[str],
                      timed_out: threading.Event) -> BaseException | None:
    """``INTEGRITY_ERROR`` (:func:`_damaged`) when ``file``, a recorded case's file DuckDB's error
    ``exc`` names, does not read as Parquet (its footer, then every value) or reads with columns other
    than another recorded case's file of its table (a damaged column name reads as a sound file of
    another schema); None when it reads as its table's: the query read it some other way (``read_csv``
    of a Parquet file), its own error. Past the query's time limit None; Ctrl-C ``KeyboardInterrupt``."""
    files = f"[{sql_literal(str(file))}]"
    for sql in ("SELECT count(*) FROM parquet_file_metadata({files})",
                "SELECT bit_xor(hash(t)) FROM read_parquet({files}) AS t"):
        if timed_out.is_set():
            return None
        try:
            con.execute(sql.format(files=files)).fetchall()
        except duckdb_module().Error as error:
            if "INTERRUPT" in str(error).upper() or timed_out.is_set():
                return None if timed_out.is_set() else KeyboardInterrupt()
            return _damaged(exc, folder)
    other = next((folder / name / DATA_FILE for name in names if folder / name / DATA_FILE != file), None)
    if other is not None and _columns(con, file) != _columns(con, other):
        return _damaged(exc, folder)
    return None


def _columns(con: Any, file: Path) -> list[tuple[str, str]] | None:
    """``(name, type)`` of each column of the Parquet ``file``; None when it cannot be read."""
    try:
        described = con.execute(f"DESCRIBE SELECT * FROM read_parquet([{sql_literal(str(file))}])").fetchall()
    except duckdb_module().Error:
        return None
    return [(str(row[0]), str(row[1])) for row in described]


def _damaged_table(con: Any, out: Path, query: str, timed_out: threading.Event) -> BaseException | None:
    """``INTEGRITY_ERROR`` for a table of the export DuckDB cannot read, else None: first each table's
    Parquet footers (their metadata read in one call, about 0.1 ms a file), then every value of each
    table (a damaged data page behind an intact footer, which the query met: through a view, by path,
    or through ``query()``, whatever its text names), the tables ``query`` names as words first. Only
    after a query failed with an error naming no file (DuckDB's plain ``Error`` and the like). The query's
    time limit bounds the look: once it passes, the look ends with None (the query's own refusal
    stands, never an interrupted read taken for a damaged file); Ctrl-C ends it with
    ``KeyboardInterrupt``."""
    words = set(re.findall(r"\w+", query.lower()))
    names = record_names(out)
    order = [table for table in TABLES if table in words] + [table for table in TABLES if table not in words]
    looks = [(table, "SELECT count(*) FROM parquet_file_metadata({files})") for table in order]
    looks += [(table, "SELECT bit_xor(hash(t)) FROM read_parquet({files}) AS t") for table in order]
    files = {table: "[" + ", ".join(sql_literal(str(out / table / name / DATA_FILE)) for name in names) + "]"
             for table in TABLES}
    for table, sql in looks if names else ():
        if timed_out.is_set():
            return None
        try:
            con.execute(sql.format(files=files[table])).fetchall()
        except duckdb_module().Error as exc:
            if "INTERRUPT" in str(exc).upper() or timed_out.is_set():
                return None if timed_out.is_set() else KeyboardInterrupt()
            return _damaged(exc, out / table)
    return None


def _query_error(exc: Exception, timeout_ms: int, timed_out: threading.Event,
                 holds_cases: bool = True) -> BaseException:
    """What a failing query means: its own error (``INVALID_ARGUMENT``), stopped at its time limit, or
    stopped by Ctrl-C (``KeyboardInterrupt`` again: DuckDB reports both as an interrupt)."""
    if "INTERRUPT" in str(exc).upper():
        if not timed_out.is_set():
            return KeyboardInterrupt()
        return LedgerError(E.INVALID_ARGUMENT, f"query stopped after {timeout_ms} ms")
    lines = [line.strip() for line in str(exc).splitlines() if line.strip(" ^")]  # no caret under the query
    if isinstance(exc, duckdb_module().CatalogException):  # an unknown table: DuckDB may suggest one of its own
        lines = [lines[0], f"(the fleet's tables: {', '.join(TABLES)}" + (
            ")" if holds_cases else "; this export holds no case, so none is there: every case given to "
            "'ledger fleet export' failed, none was given, 'ledger fleet remove' took each out, or the export stopped "
            "before it finished one)")]
    if isinstance(exc, duckdb_module().PermissionException):
        lines.append("(a query reads the export's tables, through their views or their files inside OUT/TABLE/, "
                     "one table's folder at a time, and the cases' records in OUT/_fleet/cases/; nothing else)")
    return LedgerError(E.INVALID_ARGUMENT, f"query refused: {' '.join(lines)}", query="refused")  # one line, not escaped ones


def _fetch(con: Any, relation: Any, timeout_ms: int, timed_out: threading.Event, out: Path,
           query: str, broken: dict[str, LedgerError]) -> Iterator[tuple]:
    duckdb = duckdb_module()
    while True:
        try:
            chunk = relation.fetchmany(512)
        except UnicodeDecodeError as exc:
            raise _not_utf8(out, exc) from None
        except duckdb.Error as exc:
            raise _unreadable(con, out, exc, broken, query, timed_out) or _query_error(exc, timeout_ms,
                                                                                      timed_out) from None
        if not chunk:
            return
        for row in chunk:
            yield tuple(_plain(v) for v in row)


@refuses_unfit_calls
def fleet_query(out: str | os.PathLike[str], query: str, *, timeout_ms: int = 30_000,
                note: Callable[[str], None] | None = None) -> tuple[list[str], list[tuple]]:
    """:func:`fleet_rows` with every row read: ``(column names, rows)``. ``note`` and the errors as
    :func:`fleet_rows`: ``INVALID_ARGUMENT`` (not a fleet export, a refused or failing query),
    ``INTEGRITY_ERROR`` (a file the export lists is missing or damaged)."""
    with fleet_rows(out, query, timeout_ms=timeout_ms, note=note) as (names, rows):
        return names, list(rows)
