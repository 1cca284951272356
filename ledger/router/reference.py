"""The reference router: read-only tools over a case package's own inputs.

Three tools, each a pure read of files under ``sources/`` or ``data/``:

* ``source.read_context`` — ``{"path", "start_line", "end_line"}`` → one item per line
  ``{"kind": "source_line", "path", "line", "sha256", "text"}``; at most
  :data:`SPAN_LINES_MAX` lines; lines past the end of the file are absent and
  ``coverage.file_lines`` says how many there are.
* ``source.find_text`` — ``{"text", "path_glob"?, "max_results"?}`` → matching lines
  as above, ``coverage.files`` lists the files scanned, ``truncated`` says whether
  more matches existed. A matching file that cannot be read (over :data:`~ledger.router.files.FILE_BYTES_MAX`,
  a symbolic link, to a folder too, a hard link to the ledger's files, not a regular file) is
  not scanned: ``coverage.skipped`` lists ``{"path", "reason"}`` for each (absent when none).
  ``text`` is found in the files' bytes (its UTF-8).
  A glob matching more than :data:`FILES_SCANNED_MAX` files is refused.
* ``database.lookup`` — ``{"database", "table", "where"?, "columns"?, "limit"?}`` →
  one item per row ``{"kind": "db_row", "database", "table", "pointer", "sha256",
  "values"}``; the table's columns and the database file's sha256 come in the
  result's ``schema``.

A *line* is the UTF-8 text between ``\\n`` separators with one trailing ``\\r``
removed; its ``sha256`` covers the line's bytes without the terminator (bytes
that are not UTF-8 appear as U+FFFD in ``text``). A column value beyond
±(2^53−1) is ``{"integer": "<digits>"}``, a real ``{"real": repr}``, a blob
``{"base64": …}``, text as a line's (bytes that are not UTF-8 as U+FFFD). Every
refusal — a path that is absolute, holds ``..``,
leaves ``sources/``/``data/``, passes through a symbolic link or is a hard link
to the ledger's own files, an unknown table or column, a span, count or file
over its bound, a read the system refuses — raises ``ROUTER_REFUSED`` and
nothing is returned.

Each input is read once, from one descriptor opened by walking its path from
the package folder without following links (docs/evidence.md), and everything
the result says comes from those bytes. Each result also carries ``sources``:
``[[path, sha256 of the file]]`` of every file it read, so that a later
verification knows whether the inputs it was computed from are still present
unchanged.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import os
import sqlite3
import re
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping

from ..ground import errors as E
from ..ground.canonical import SAFE_INTEGER_MAX, canonical_sha256, is_utf8_text
from ..ground.errors import LedgerError, given, quoted, refuses_unfit_calls_of, shown, pass_on_interruption
from ..ground.arguments import check_callback, check_instance
from ..ground.paths import check_name_encoding, fs_path, fwalk
from .files import is_link, may_match_below, open_folder, read_below, unreadable
from ..storage.side_files import DATABASE_MAGIC

TOOLS = ("source.read_context", "source.find_text", "database.lookup")
SPAN_LINES_MAX = 2000
RESULTS_MAX, DEFAULT_RESULTS = 1000, 100
ROWS_MAX, DEFAULT_ROWS = 1000, 100
FILES_SCANNED_MAX = 5000
TEXT_CHARS_MAX = 1000
WHERE_KEYS_MAX = 16
SOURCES_DIR = "sources"
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
ROWID_ALIASES = ("rowid", "_rowid_", "oid")
DATA_DIR = "data"
JSON_INT_MAX = 2 ** 53 - 1
#: The most bytes the values of a lookup's rows may hold in all (text and blobs): 1 GiB, the largest
#: evidence artifact any analysis config lets a case store. A tiny database whose generated column
#: makes each row large is refused once its rows pass it, not read to the end into memory.
LOOKUP_BYTES_MAX = 1024 ** 3
_INTEGER = re.compile(r"-?(0|[1-9][0-9]{0,19})")  # at most 20 digits: past SQLite's range, never past int()'s
_LONG_INTEGER = re.compile(r"-?[1-9][0-9]{20,}")


def _refuse(message: str, **details: Any) -> LedgerError:
    return LedgerError(E.ROUTER_REFUSED, message, **details)


def _int_arg(args: Mapping[str, Any], key: str, default: int | None, low: int, high: int | None) -> int:
    value = args.get(key, default)
    if type(value) is not int or value < low or (high is not None and value > high):
        bound = f" and at most {high}" if high is not None else ""
        raise _refuse(f"{key} must be an integer of at least {low}{bound}, got {given(value, 80)}")
    return value


def _check_keys(args: Any, required: set[str], optional: set[str], tool: str) -> Mapping[str, Any]:
    if not isinstance(args, dict):
        raise _refuse(f"{tool}: args must be an object")
    missing, extra = required - set(args), set(args) - required - optional
    if missing or extra:
        problems = [f"{what} argument(s) {', '.join(map(repr, sorted(keys)))}"
                    for what, keys in (("missing", missing), ("unexpected", extra)) if keys]
        takes = ", ".join(sorted(required) + [f"{key} (optional)" for key in sorted(optional)])
        raise _refuse(f"{tool}: {'; '.join(problems)} (it takes {takes})")
    return args


def split_lines(data: bytes) -> list[bytes]:
    """The lines of ``data``: separated by ``\\n``, one trailing ``\\r`` removed, no empty last line."""
    if not data:
        return []
    parts = data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    return [p[:-1] if p.endswith(b"\r") else p for p in parts]


def line_item(path: str, number: int, raw: bytes) -> dict[str, Any]:
    """One ``source_line`` item."""
    return {"kind": "source_line", "path": path, "line": number, "sha256": hashlib.sha256(raw).hexdigest(),
            "text": raw.decode("utf-8", errors="replace")}


#: The longest path (in characters) a tool call may name.
PATH_CHARS_MAX = 1024


def confined(relative: Any, top: str) -> str:
    """``relative`` when it is a normalized relative path under ``top/`` (``ROUTER_REFUSED``
    otherwise); a check of the text alone, the file system is not consulted."""
    if not isinstance(top, str):
        raise LedgerError(E.INVALID_ARGUMENT, f"top must be a folder name (a str), got {given(top, 80)}")
    if not isinstance(relative, str) or not relative:
        raise _refuse(f"path must be a non-empty string, got {given(relative, 80)}")
    if len(relative) > PATH_CHARS_MAX:
        raise _refuse(f"path holds {len(relative)} characters, more than the {PATH_CHARS_MAX} a path may: "
                      f"{given(relative, 80)}")
    pure = PurePosixPath(relative)
    if (pure.is_absolute() or "\\" in relative or "\x00" in relative or str(pure) != relative
            or not is_utf8_text(relative) or any(part in ("..", ".", "") for part in relative.split("/"))):
        raise _refuse(f"{relative!r} is not a normalized relative path of UTF-8 text", path=relative)
    if relative == top:
        raise _refuse(f"{relative!r} is the folder {top}/ itself: name a file in it ('{top}/…')", path=relative)
    if len(pure.parts) < 2 or pure.parts[0] != top:
        hint = f" (paths start at the package folder: did you mean '{top}/{relative}'?)" \
            if len(pure.parts) == 1 else ""
        raise _refuse(f"{relative!r} is outside {top}/{hint}", path=relative)
    return relative


@refuses_unfit_calls_of(init=True)
class Router:
    """The reference router over the package at ``root``.

    ``generation()`` returns the package generation (newest event seq) and
    ``identity()`` the package's input identity; a reply carries both.
    """

    def __init__(self, root: str | os.PathLike[str], *, generation: Callable[[], int] | None = None,
                 identity: Callable[[], str] | None = None) -> None:
        self.root = fs_path(root, "the router's package folder")
        self._generation = (lambda: 0) if check_callback(generation, "generation", 0) is None else generation
        self._identity = (lambda: "") if check_callback(identity, "identity", 0) is None else identity

    # -- the reply --------------------------------------------------------------------
    def reply(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The complete reply to an ``evidence-request-v1`` request (``ROUTER_REFUSED`` on any refusal)."""
        actions = request.get("actions") if isinstance(request, Mapping) else None
        if not isinstance(actions, list):
            raise _refuse("the request needs a list of actions")
        generation, identity = self._generation(), self._identity()
        results = [self.result(action) for action in actions]
        return {"package_generation": generation, "input_identity": identity, "results": results}

    def result(self, action: Mapping[str, Any], files: Mapping[str, bytes] | None = None) -> dict[str, Any]:
        """The result of one request action (``operation_id``, ``tool``, ``args``). With ``files``
        (``{path: bytes}``, a re-check) the named file is taken from there instead of the disk."""
        if not isinstance(action, Mapping):
            raise _refuse(f"an action must be an object, got {given(action, 60)}")
        tool = action.get("tool")
        runner = {"source.read_context": self.read_context, "source.find_text": self.find_text,
                  "database.lookup": self.lookup}.get(tool) if isinstance(tool, str) else None
        if runner is None:
            raise _refuse(f"unknown tool {given(tool, 60)}; the router offers {', '.join(TOOLS)}")
        if files is None:
            found = runner(action.get("args"))
        elif tool == "source.find_text":  # a search lists the folder: it is re-checked file by file
            raise _refuse("source.find_text reads the folder, not given files")
        else:
            found = runner(action.get("args"), files)
        return {"operation_id": action.get("operation_id"), "tool": tool, "status": "ok", **found}

    # -- reading: once, from one descriptor, never through a link -----------------------
    def read_file(self, relative: Any, top: str, own: dict[str, Any] | None = None) -> bytes:
        """The bytes of the regular file ``relative`` under ``top/``, read once from one open file.

        The path is walked from the package folder one name at a time (``O_NOFOLLOW`` at every
        step), so a symbolic link anywhere below the package folder is refused, and so is a
        hard link to one of the ledger's own files (same device and inode), a file that is not
        regular, and one over :data:`~ledger.router.files.FILE_BYTES_MAX`. ``ROUTER_REFUSED`` in every case, also
        when the system refuses the read (``unreadable`` in its details); ``STORAGE_ERROR`` for a name that
        is not ASCII when this Python's file names are not UTF-8. ``own`` keeps the
        ledger's own file ids between the reads of one search (found once, when first needed).
        """
        confined(relative, top)
        check_name_encoding(relative)  # STORAGE_ERROR: this Python would open a file of other bytes
        root_fd = open_folder(self.root, relative)
        try:
            return read_below(root_fd, relative, {} if own is None else own)
        finally:
            os.close(root_fd)

    def _source_files(self, glob: str, folder_links: bool = True) -> list[str]:
        """Names under ``sources/`` matching ``glob``, in walk order (sorted per folder); links are
        listed, never followed, a link to a folder among the folder's files where ``glob`` matches it or
        could match a path below it (:func:`~ledger.router.files.may_match_below`; left out without
        ``folder_links``, as searches stored by earlier versions left it: how those are checked)."""
        found: list[str] = []
        root_fd = open_folder(self.root, SOURCES_DIR)
        try:
            if is_link(SOURCES_DIR, root_fd):
                raise unreadable(SOURCES_DIR, "is a symbolic link; the router follows no link, so it never "
                                  "reads outside sources/ of the package")
            try:
                for directory, dirnames, filenames, folder_fd in fwalk(SOURCES_DIR, root_fd):
                    links = [name for name in dirnames if is_link(name, folder_fd)]  # never walked into
                    dirnames[:] = sorted(set(dirnames) - set(links))
                    for name in sorted(filenames + links if folder_links else filenames):
                        relative = f"{directory}/{name}"
                        check_name_encoding(relative)  # listed by other bytes than its own: STORAGE_ERROR
                        if fnmatch.fnmatchcase(relative, glob) or (name in links and may_match_below(glob, relative)):
                            found.append(relative)
            except FileNotFoundError:
                raise unreadable(SOURCES_DIR, "does not exist: the package has no sources to search") from None
            except OSError as exc:  # sources/ itself may not be read (a subfolder's error is skipped)
                pass_on_interruption(exc)
                raise unreadable(SOURCES_DIR, f"cannot be read: {exc.strerror or exc}", exc.errno) from None
        finally:
            os.close(root_fd)
        if len(found) > FILES_SCANNED_MAX:
            raise _refuse(f"{glob!r} matches more than {FILES_SCANNED_MAX} files")
        return found

    # -- tools ------------------------------------------------------------------------
    def read_context(self, args: Any, files: Mapping[str, bytes] | None = None) -> dict[str, Any]:
        """Lines ``start_line``..``end_line`` (1-based, inclusive) of a file under ``sources/``, or of
        ``files[path]`` (relative path → the file's bytes) when ``files`` is given: ``ROUTER_REFUSED`` when
        it lacks the path, ``INVALID_ARGUMENT`` when it is no mapping or the value no bytes."""
        path, start, end = span_args(args)
        data = _given(files, path) if files is not None else self.read_file(path, SOURCES_DIR)
        lines = split_lines(data)
        items = [line_item(path, n, lines[n - 1]) for n in range(start, min(end, len(lines)) + 1)]
        coverage = {"path": path, "start_line": start, "end_line": end, "file_lines": len(lines)}
        return {"items": items, "coverage": coverage, "truncated": False,
                "sources": [[path, hashlib.sha256(data).hexdigest()]]}

    def find_text(self, args: Any) -> dict[str, Any]:
        """Lines containing ``text`` (a literal) in the files matching ``path_glob`` (default every file
        under ``sources/``; ``*`` also matches ``/``), at most ``max_results`` (default 100, at most 1000)."""
        text, glob, limit = find_text_args(args)
        needle = text.encode("utf-8")
        items: list[dict[str, Any]] = []
        scanned: list[str] = []
        sources: list[list[str]] = []
        truncated = False
        skipped: list[dict[str, str]] = []
        own: dict[str, Any] = {}
        for relative in self._source_files(glob):
            if truncated:
                break
            try:
                data = self.read_file(relative, SOURCES_DIR, own)
            except LedgerError as exc:  # one unreadable file does not fail the search: it is listed
                skipped.append({"path": relative, "reason": exc.message})
                continue
            scanned.append(relative)
            sources.append([relative, hashlib.sha256(data).hexdigest()])
            for item in matching_lines(relative, data, needle):
                if len(items) == limit:
                    truncated = True
                    break
                items.append(item)
        coverage = {"text": text, "path_glob": glob, "max_results": limit, "files": scanned}
        if skipped:
            coverage["skipped"] = skipped
        return {"items": items, "coverage": coverage, "truncated": truncated, "sources": sources}

    def lookup(self, args: Any, files: Mapping[str, bytes] | None = None, *,
               generated: bool = True) -> dict[str, Any]:
        """Rows of ``table`` in the SQLite file ``database`` (under ``data/``) whose ``where`` columns equal
        the given values (bound as parameters), projected on ``columns`` (default all, generated columns
        included), by rowid, at most ``limit`` (default 100, at most 1000). The file is read once; its
        sha256 and its rows come from those same bytes. With ``files`` (a re-check) the bytes come from
        there and a side file next to the database does not matter."""
        database, table, where, limit = lookup_args(args)
        if files is None:
            _refuse_side_files(self.root, database)
            data = self.read_file(database, DATA_DIR)
        else:
            data = _given(files, database)
        digest = hashlib.sha256(data).hexdigest()
        conn = _open_bytes(database, data)
        try:
            described = _describe(conn, table, generated)
            names = [c["name"] for c in described]
            columns = args.get("columns", names)
            if (not isinstance(columns, list) or not columns or len(set(map(str, columns))) != len(columns)
                    or any(not isinstance(c, str) or c not in names for c in columns)):
                raise _refuse(f"columns must be a non-empty list of distinct columns of {table}: {names}")
            unknown = [c for c in where if c not in names]
            if unknown:
                raise _refuse(f"{table} has no column(s) {unknown}")
            rows, truncated = _select(conn, table, columns, where, limit, _rowid_alias(table, names))
        finally:
            conn.close()
        items = []
        for rowid, values in rows:
            shown = dict(zip(columns, (json_value(v) for v in values)))
            items.append({"kind": "db_row", "database": database, "table": table, "pointer": f"/{table}/{rowid}",
                          "sha256": canonical_sha256(shown), "values": shown})
        coverage = {"database": database, "table": table, "where": dict(args.get("where", {})),
                    "columns": list(columns), "limit": limit}
        schema = {"database": database, "database_sha256": digest, "table": table, "columns": described}
        return {"items": items, "coverage": coverage, "truncated": truncated, "schema": schema,
                "sources": [[database, digest]]}


def span_args(args: Any) -> tuple[str, int, int]:
    """``(path, start_line, end_line)`` of a ``source.read_context`` call."""
    args = _check_keys(args, {"path", "start_line", "end_line"}, set(), "source.read_context")
    start = _int_arg(args, "start_line", None, 1, SAFE_INTEGER_MAX)  # bounded: each is quoted in a message
    end = _int_arg(args, "end_line", None, 1, SAFE_INTEGER_MAX)
    if end < start:
        raise _refuse(f"end_line {end} is before start_line {start} (a span runs from start_line to end_line, "
                      "both included)")
    if end - start + 1 > SPAN_LINES_MAX:
        raise _refuse(f"a span covers at most {SPAN_LINES_MAX} lines; {start}..{end} has {end - start + 1}")
    return confined(args["path"], SOURCES_DIR), start, end


def find_text_args(args: Any) -> tuple[str, str, int]:
    """``(text, path_glob, max_results)`` of a ``source.find_text`` call, defaults filled in."""
    args = _check_keys(args, {"text"}, {"path_glob", "max_results"}, "source.find_text")
    text = args["text"]
    if not isinstance(text, str) or not text or len(text) > TEXT_CHARS_MAX or "\n" in text:
        raise _refuse(f"text must be a non-empty single-line string of at most {TEXT_CHARS_MAX} characters")
    glob = args.get("path_glob", SOURCES_DIR + "/*")
    if isinstance(glob, str) and len(glob) > PATH_CHARS_MAX:
        raise _refuse(f"path_glob holds {len(glob)} characters, more than the {PATH_CHARS_MAX} a path may")
    if (not isinstance(glob, str) or not glob.startswith(SOURCES_DIR + "/") or ".." in glob.split("/")
            or "\\" in glob):
        raise _refuse(f"path_glob must name files under {SOURCES_DIR}/, got {given(glob, 80)}")
    limit = _int_arg(args, "max_results", DEFAULT_RESULTS, 1, RESULTS_MAX)
    if not is_utf8_text(text):
        raise _refuse("text is not valid UTF-8")
    return text, glob, limit


def matching_lines(path: str, data: bytes, needle: bytes) -> list[dict[str, Any]]:
    """Every line of ``data`` holding ``needle``, as ``source_line`` items of ``path``."""
    return [line_item(path, number, raw) for number, raw in enumerate(split_lines(data), start=1) if needle in raw]


def differs_only_where_computed(args: Any, stored: Mapping[str, Any], data: bytes) -> bool:
    """Whether ``stored``, a ``database.lookup`` result that passed the shape checks, holds what ``data``
    holds wherever the file holds the value, so that only values SQLite computes as it reads (``VIRTUAL``
    generated columns: another version may round otherwise or lack a function) can differ from this
    SQLite's: a plain rowid table whose computed columns the lookup projects or matches, its columns as
    described now, each stored row's other values those of the file's row with that row id (which
    satisfies ``where`` on them), and, when ``where`` matches no computed column, exactly the file's
    matching row ids and truncation. False whenever that cannot be shown."""
    try:
        database, table, where, limit = lookup_args(args)
        conn = _open_bytes(database, data)
    except LedgerError:
        return False
    try:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
        described = _describe(conn, table)
        names = [c["name"] for c in described]
        computed = {name for _, name, *_rest, hidden in conn.execute(f"PRAGMA table_xinfo({_quote(table)})")
                    if hidden == 2}
        columns = args.get("columns", names)
        if (str(sql).lstrip().upper().startswith("CREATE VIRTUAL") or stored["schema"]["columns"] != described
                or not isinstance(columns, list) or not columns or len(set(columns)) != len(columns)
                or not set(columns) | set(where) <= set(names)
                or not computed & (set(columns) | set(where))):
            return False
        rowid, plain = _rowid_alias(table, names), [c for c in columns if c not in computed]
        plain_where = {c: v for c, v in where.items() if c not in computed}
        conditions = "".join(f" AND {_quote(c)} IS ?" for c in plain_where)
        row_sql = f"SELECT {', '.join([rowid] + [_quote(c) for c in plain])} FROM {_quote(table)} WHERE {rowid} = ?"
        ids = [int(item["pointer"].rsplit("/", 1)[1]) for item in stored["items"]]
        for number, item in zip(ids, stored["items"]):
            found = conn.execute(row_sql + conditions, [number, *plain_where.values()]).fetchone()
            if found is None or [json_value(v) for v in found[1:]] != [item["values"][c] for c in plain]:
                return False
        if computed & set(where):  # which rows such a where matched is the record's account of it
            return True
        matching = [r for (r,) in conn.execute(f"SELECT {rowid} FROM {_quote(table)} WHERE 1{conditions} ORDER BY "
                                               f"{rowid} LIMIT ?", [*plain_where.values(), limit + 1])]
        return ids == matching[:limit] and stored["truncated"] == (len(matching) > limit)
    except (LedgerError, sqlite3.Error, TypeError, ValueError, KeyError, AttributeError, OverflowError):
        return False
    finally:
        conn.close()


def lookup_args(args: Any) -> tuple[str, str, dict[str, Any], int]:
    """``(database, table, where with marked integers unwrapped, limit)`` of a ``database.lookup`` call."""
    args = _check_keys(args, {"database", "table"}, {"where", "columns", "limit"}, "database.lookup")
    database = confined(args["database"], DATA_DIR)
    table, where = args["table"], args.get("where", {})
    limit = _int_arg(args, "limit", DEFAULT_ROWS, 1, ROWS_MAX)
    if not isinstance(table, str) or not table:
        raise _refuse("table must be a non-empty string")
    if not isinstance(where, dict) or len(where) > WHERE_KEYS_MAX:
        raise _refuse(f"where must map at most {WHERE_KEYS_MAX} column names to values")
    columns = args.get("columns")
    if columns is not None and (not isinstance(columns, list) or not all(isinstance(c, str) for c in columns)):
        raise _refuse("columns must be a non-empty list of distinct column names")
    bound = {}
    for column, supplied in where.items():
        value = marked_integer(supplied) if isinstance(supplied, dict) else supplied
        if isinstance(supplied, dict) and value is None and list(supplied) == ["integer"]:
            digits = supplied["integer"]
            if isinstance(digits, str) and _LONG_INTEGER.fullmatch(digits):  # past 20 digits
                raise _out_of_range(shown(digits, 80))
            raise _refuse(f"where value {shown(column, 80)!r}: {{\"integer\": …}} takes a string of decimal digits, "
                          f"an optional minus sign first and no leading zero (as \"-12\" or \"9007199254740993\"); "
                          f"got {given(digits, 80)}")
        if (value is None and supplied is not None) or (value is not None and type(value) not in (str, int)):
            raise _refuse(f"where values must be strings, integers ({{\"integer\": \"<digits>\"}} for one "
                          f"beyond ±(2^53-1)) or null; {shown(column, 80)!r} is {given(supplied, 80)}")
        low, high = (INT64_MIN, INT64_MAX) if isinstance(supplied, dict) else (-JSON_INT_MAX, JSON_INT_MAX)
        if type(value) is int and not low <= value <= high:  # a plain JSON integer stops at ±(2^53-1)
            raise _out_of_range(value)
        bound[column] = value
    return database, table, bound, limit


def _out_of_range(value: int | str) -> LedgerError:
    return _refuse(f"where integers must be within ±(2^53-1), or within SQLite's 64-bit range as "
                   f"{{\"integer\": \"<digits>\"}}; got {value}")


def marked_integer(value: Mapping[str, Any]) -> int | None:
    """The integer of ``{"integer": "<decimal digits>"}`` (how an integer beyond ±(2^53−1) is carried
    in JSON), else None."""
    digits = value.get("integer") if len(value) == 1 else None
    if isinstance(digits, str) and _INTEGER.fullmatch(digits):
        return int(digits)
    return None


def _given(files: Mapping[str, bytes], path: str) -> bytes:
    """The bytes ``files`` holds for ``path``: ``ROUTER_REFUSED`` when it holds none, ``INVALID_ARGUMENT``
    when ``files`` is no mapping or its value no bytes (text has no single byte form to hash)."""
    check_instance(files, Mapping, "files", "a mapping of relative path to the file's bytes")
    if path not in files:
        raise _refuse(f"{path!r} is not among the files given", path=path)
    return check_instance(files[path], (bytes, bytearray), f"files[{quoted(path, 80)}]", "the file's bytes")


# -- reading below the package folder -------------------------------------------------------------
def _quote(identifier: str) -> str:
    """An SQL identifier in double quotes (embedded quotes doubled); only ever used for names that
    were first found in the database's own schema."""
    return '"' + identifier.replace('"', '""') + '"'


def _open_bytes(database: str, data: bytes) -> sqlite3.Connection:
    """An in-memory SQLite database holding ``data`` (the very bytes that were hashed): nothing is
    opened on disk again and nothing is written next to the file. A WAL-mode header (bytes 18-19)
    is read as the rollback-journal one, which is what a copy without its ``-wal`` is."""
    image = bytearray(data)
    if len(image) >= 20 and image[:16] == DATABASE_MAGIC and image[18:20] == b"\x02\x02":
        image[18:20] = b"\x01\x01"
    try:
        conn = sqlite3.connect(":memory:", isolation_level=None)
    except sqlite3.Error as exc:  # pragma: no cover - an in-memory database always opens
        raise _refuse(f"{database} cannot be opened: {exc}") from None
    conn.text_factory = _text_of  # SQLite keeps whatever bytes a TEXT value was given
    try:
        if image:  # an empty file is an empty database, as SQLite opens one (deserialize refuses b"")
            conn.deserialize(bytes(image))
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        conn.close()
        raise _refuse(f"{database} cannot be read as SQLite: {exc}", path=database) from None
    return conn


def _text_of(data: bytes) -> str:
    """A TEXT value as a source line's text is read: bytes that are not UTF-8 as U+FFFD."""
    return data.decode("utf-8", errors="replace")


def _describe(conn: sqlite3.Connection, table: str, generated: bool = True) -> list[dict[str, Any]]:
    """The columns of ``table`` (an existing rowid table of the user's, any name but SQLite's own
    ``sqlite_…``) from the database's own schema; generated columns included unless ``generated``
    is false (how results stored before they were offered are recomputed)."""
    try:
        tables = sorted(name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                        if not name.lower().startswith("sqlite_"))
        if table not in tables:
            raise _refuse(f"the database has no table {quoted(table, 80)}; it has {tables}")
        info = [row for row in conn.execute(f"PRAGMA table_xinfo({_quote(table)})").fetchall()
                if row[6] == 0 or (generated and row[6] in (2, 3))]
        alias = _rowid_alias(table, [row[1] for row in info])
        conn.execute(f"SELECT {alias} FROM {_quote(table)} LIMIT 0").fetchall()
    except sqlite3.Error as exc:
        raise _refuse(f"table {quoted(table, 80)} cannot be read by rowid: {exc}") from None
    return [{"name": name, "type": kind, "notnull": bool(notnull), "pk": pk}
            for _, name, kind, notnull, _, pk, _hidden in info]


def _rowid_alias(table: str, names: list[str]) -> str:
    """The first of ``rowid``, ``_rowid_``, ``oid`` that no column of ``table`` shadows (a column of
    that name would be read instead of the row id); ``ROUTER_REFUSED`` when all three are shadowed."""
    taken = {name.lower() for name in names}
    for alias in ROWID_ALIASES:
        if alias not in taken:
            return alias
    raise _refuse(f"table {quoted(table, 80)} has columns named {', '.join(ROWID_ALIASES)}: its row ids cannot be read")


def _refuse_side_files(root: Path, database: str) -> None:
    """``ROUTER_REFUSED`` when a non-empty ``<database>-wal`` or ``<database>-journal`` exists: rows
    may live there, outside the file that is read and hashed (checkpoint or commit the database
    first). An empty one (and any ``-shm``) holds no rows and does not matter."""
    for suffix in ("-wal", "-journal"):
        try:
            size = os.lstat(os.path.join(root, database + suffix)).st_size
        except OSError as oserr:
            pass_on_interruption(oserr)
            continue
        if size:
            raise _refuse(f"{database} has a non-empty {suffix} file next to it (uncheckpointed or unfinished "
                          "writes); checkpoint the database (or close its writers) and query again", path=database)


def _select(conn: sqlite3.Connection, table: str, columns: list[str], where: Mapping[str, Any],
            limit: int, rowid: str = "rowid") -> tuple[list[tuple[int, tuple]], bool]:
    projection = ", ".join(_quote(c) for c in columns)
    conditions = " AND ".join(f"{_quote(c)} IS ?" for c in where) or "1"
    sql = f"SELECT {rowid}, {projection} FROM {_quote(table)} WHERE {conditions} ORDER BY {rowid} LIMIT ?"
    found: list[tuple] = []
    held = 0
    try:
        for row in conn.execute(sql, [*where.values(), limit + 1]):  # one row at a time: counted as read
            found.append(row)
            held += sum(len(value) for value in row if isinstance(value, (str, bytes)))
            if held > LOOKUP_BYTES_MAX:
                raise _refuse(f"the rows of {quoted(table, 80)} read so far hold more than {LOOKUP_BYTES_MAX} bytes, more "
                              "than any evidence may (a generated column that makes large values?); ask for "
                              "fewer rows (limit) or columns")
    except sqlite3.Error as exc:
        raise _refuse(f"lookup in {quoted(table, 80)} failed: {exc}") from None
    return [(row[0], row[1:]) for row in found[:limit]], len(found) > limit


def json_value(value: Any) -> Any:
    """A column value as JSON: blobs as ``{"base64": …}``, reals as ``{"real": repr}``, integers beyond
    ±(2^53−1) (which JSON numbers cannot carry exactly) as ``{"integer": "<decimal digits>"}``."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float):
        return {"real": repr(value)}
    if isinstance(value, int) and not -JSON_INT_MAX <= value <= JSON_INT_MAX:
        return {"integer": str(value)}
    return value
