"""The reference router: read-only tools over a case package's own inputs.

Three tools, each a pure read of files under ``sources/`` or ``data/``:

* ``source.read_context`` — ``{"path", "start_line", "end_line"}`` → one item per line
  ``{"kind": "source_line", "path", "line", "sha256", "text"}``; at most
  :data:`SPAN_LINES_MAX` lines; lines past the end of the file are absent and
  ``coverage.file_lines`` says how many there are.
* ``source.find_text`` — ``{"text", "path_glob"?, "max_results"?}`` → matching lines
  as above, ``coverage.files`` lists the files scanned, ``truncated`` says whether
  more matches existed. A matching file that cannot be read (over :data:`FILE_BYTES_MAX`,
  a broken symlink or one leading out of ``sources/``, not a regular file) is not
  scanned: ``coverage.skipped`` lists ``{"path", "reason"}`` for each (absent when none).
  A glob matching more than :data:`FILES_SCANNED_MAX` files is refused.
* ``database.lookup`` — ``{"database", "table", "where"?, "columns"?, "limit"?}`` →
  one item per row ``{"kind": "db_row", "database", "table", "pointer", "sha256",
  "values"}``; the table's columns and the database file's sha256 come in the
  result's ``schema``.

A *line* is the UTF-8 text between ``\\n`` separators with one trailing ``\\r``
removed; its ``sha256`` covers the line's bytes without the terminator (bytes
that are not UTF-8 appear as U+FFFD in ``text``). Every refusal — a path that is
absolute, holds ``..``, leaves ``sources/``/``data/`` or the package (through a
symlink), an unknown table or column, a span, count or file over its bound —
raises ``ROUTER_REFUSED`` and nothing is returned.

Each result also carries ``sources``: ``[[path, sha256 of the file]]`` of every
file it read, so that a later verification knows whether the inputs it was
computed from are still present unchanged.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import os
import sqlite3
import stat
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping
from urllib.parse import quote

from ..ground import errors as E
from ..ground.canonical import canonical_sha256
from ..ground.errors import LedgerError

TOOLS = ("source.read_context", "source.find_text", "database.lookup")
SPAN_LINES_MAX = 2000
RESULTS_MAX = 1000
DEFAULT_RESULTS = 100
ROWS_MAX = 1000
DEFAULT_ROWS = 100
FILE_BYTES_MAX = 16 * 1024 * 1024
FILES_SCANNED_MAX = 5000
TEXT_CHARS_MAX = 1000
WHERE_KEYS_MAX = 16
SOURCES_DIR = "sources"
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
ROWID_ALIASES = ("rowid", "_rowid_", "oid")
DATA_DIR = "data"


def _refuse(message: str, **details: Any) -> LedgerError:
    return LedgerError(E.ROUTER_REFUSED, message, **details)


def _int_arg(args: Mapping[str, Any], key: str, default: int | None, low: int, high: int | None) -> int:
    value = args.get(key, default)
    if type(value) is not int or value < low or (high is not None and value > high):
        bound = f" and at most {high}" if high is not None else ""
        raise _refuse(f"{key} must be an integer of at least {low}{bound}, got {value!r}")
    return value


def _check_keys(args: Any, required: set[str], optional: set[str], tool: str) -> Mapping[str, Any]:
    if not isinstance(args, dict):
        raise _refuse(f"{tool}: args must be an object")
    missing, extra = required - set(args), set(args) - required - optional
    if missing or extra:
        raise _refuse(f"{tool}: missing {sorted(missing)} / unexpected {sorted(extra)} argument(s)")
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


def confined(relative: Any, top: str) -> str:
    """``relative`` when it is a normalized relative path under ``top/`` (``ROUTER_REFUSED``
    otherwise); a check of the text alone, the file system is not consulted."""
    if not isinstance(relative, str) or not relative or len(relative) > 1024:
        raise _refuse(f"path must be a non-empty string, got {str(relative)[:80]!r}")
    pure = PurePosixPath(relative)
    if (pure.is_absolute() or "\\" in relative or "\x00" in relative or str(pure) != relative
            or any(part in ("..", ".", "") for part in relative.split("/"))):
        raise _refuse(f"{relative!r} is not a normalized relative path", path=relative)
    if len(pure.parts) < 2 or pure.parts[0] != top:
        raise _refuse(f"{relative!r} is outside {top}/", path=relative)
    return relative


class Router:
    """The reference router over the package at ``root``.

    ``generation()`` returns the package generation (newest event seq) and
    ``identity()`` the package's input identity; a reply carries both.
    """

    def __init__(self, root: str | os.PathLike[str], *, generation: Callable[[], int] | None = None,
                 identity: Callable[[], str] | None = None) -> None:
        self.root = Path(root)
        self._real_root = os.path.realpath(self.root)
        self._generation = generation or (lambda: 0)
        self._identity = identity or (lambda: "")

    # -- the reply --------------------------------------------------------------------
    def reply(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The complete reply to an ``evidence-request-v1`` request (``ROUTER_REFUSED`` on any refusal)."""
        actions = request.get("actions") if isinstance(request, Mapping) else None
        if not isinstance(actions, list):
            raise _refuse("the request needs a list of actions")
        generation, identity = self._generation(), self._identity()
        results = [self.result(action) for action in actions]
        return {"package_generation": generation, "input_identity": identity, "results": results}

    def result(self, action: Mapping[str, Any]) -> dict[str, Any]:
        """The result of one request action (``operation_id``, ``tool``, ``args``)."""
        tool = action.get("tool")
        runner = {"source.read_context": self.read_context, "source.find_text": self.find_text,
                  "database.lookup": self.lookup}.get(tool)
        if runner is None:
            raise _refuse(f"unknown tool {str(tool)[:60]!r}; the router offers {', '.join(TOOLS)}")
        found = runner(action.get("args"))
        return {"operation_id": action.get("operation_id"), "tool": tool, "status": "ok", **found}

    # -- paths ------------------------------------------------------------------------
    def _resolve(self, relative: Any, top: str) -> tuple[str, Path]:
        """``(relative, real path)`` of a regular file under ``top`` (``ROUTER_REFUSED`` otherwise)."""
        confined(relative, top)
        real = os.path.realpath(os.path.join(self._real_root, relative))
        allowed = os.path.join(self._real_root, top) + os.sep
        if not real.startswith(allowed):
            raise _refuse(f"{relative!r} leads outside {top}/ of the package", path=relative)
        try:
            info = os.stat(real)
        except OSError:
            raise _refuse(f"{relative!r} does not exist", path=relative) from None
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(f"{relative!r} is not a regular file", path=relative)
        if info.st_size > FILE_BYTES_MAX:
            raise _refuse(f"{relative!r} is larger than {FILE_BYTES_MAX} bytes", path=relative)
        return relative, Path(real)

    def _read(self, relative: Any) -> tuple[str, bytes]:
        relative, real = self._resolve(relative, SOURCES_DIR)
        try:
            return relative, real.read_bytes()
        except OSError as exc:
            raise _refuse(f"{relative!r} cannot be read: {exc.strerror}", path=relative) from None

    def _source_files(self, glob: str) -> list[str]:
        base = self.root / SOURCES_DIR
        found: list[str] = []
        for directory, dirnames, filenames in os.walk(base, followlinks=False):
            dirnames.sort()
            for name in sorted(filenames):
                relative = Path(directory, name).relative_to(self.root).as_posix()
                if fnmatch.fnmatchcase(relative, glob):
                    found.append(relative)
        if len(found) > FILES_SCANNED_MAX:
            raise _refuse(f"{glob!r} matches more than {FILES_SCANNED_MAX} files")
        return found

    # -- tools ------------------------------------------------------------------------
    def read_context(self, args: Any) -> dict[str, Any]:
        """Lines ``start_line``..``end_line`` (1-based, inclusive) of a file under ``sources/``."""
        args = _check_keys(args, {"path", "start_line", "end_line"}, set(), "source.read_context")
        start = _int_arg(args, "start_line", None, 1, None)
        end = _int_arg(args, "end_line", None, start, None)
        if end - start + 1 > SPAN_LINES_MAX:
            raise _refuse(f"a span covers at most {SPAN_LINES_MAX} lines; {start}..{end} has {end - start + 1}")
        path, data = self._read(args["path"])
        lines = split_lines(data)
        items = [line_item(path, n, lines[n - 1]) for n in range(start, min(end, len(lines)) + 1)]
        coverage = {"path": path, "start_line": start, "end_line": end, "file_lines": len(lines)}
        return {"items": items, "coverage": coverage, "truncated": False,
                "sources": [[path, hashlib.sha256(data).hexdigest()]]}

    def find_text(self, args: Any) -> dict[str, Any]:
        """Lines containing ``text`` (a literal) in the files matching ``path_glob`` (default every file
        under ``sources/``; ``*`` also matches ``/``), at most ``max_results`` (default 100, at most 1000)."""
        args = _check_keys(args, {"text"}, {"path_glob", "max_results"}, "source.find_text")
        text = args["text"]
        if not isinstance(text, str) or not text or len(text) > TEXT_CHARS_MAX or "\n" in text:
            raise _refuse(f"text must be a non-empty single-line string of at most {TEXT_CHARS_MAX} characters")
        glob = args.get("path_glob", SOURCES_DIR + "/*")
        if (not isinstance(glob, str) or not glob.startswith(SOURCES_DIR + "/") or ".." in glob.split("/")
                or "\\" in glob or len(glob) > 1024):
            raise _refuse(f"path_glob must name files under {SOURCES_DIR}/, got {str(glob)[:80]!r}")
        limit = _int_arg(args, "max_results", DEFAULT_RESULTS, 1, RESULTS_MAX)
        needle = text.encode("utf-8", errors="strict") if _utf8(text) else None
        if needle is None:
            raise _refuse("text is not valid UTF-8")
        items: list[dict[str, Any]] = []
        scanned: list[str] = []
        sources: list[list[str]] = []
        truncated = False
        skipped: list[dict[str, str]] = []
        for relative in self._source_files(glob):
            if truncated:
                break
            try:
                path, data = self._read(relative)
            except LedgerError as exc:  # one unreadable file does not fail the search: it is listed
                skipped.append({"path": relative, "reason": exc.message})
                continue
            scanned.append(path)
            sources.append([path, hashlib.sha256(data).hexdigest()])
            for number, raw in enumerate(split_lines(data), start=1):
                if needle in raw:
                    if len(items) == limit:
                        truncated = True
                        break
                    items.append(line_item(path, number, raw))
        coverage = {"text": text, "path_glob": glob, "max_results": limit, "files": scanned}
        if skipped:
            coverage["skipped"] = skipped
        return {"items": items, "coverage": coverage, "truncated": truncated, "sources": sources}

    def lookup(self, args: Any) -> dict[str, Any]:
        """Rows of ``table`` in the SQLite file ``database`` (under ``data/``) whose ``where`` columns equal
        the given values (bound as parameters), projected on ``columns`` (default all), by rowid,
        at most ``limit`` (default 100, at most 1000)."""
        args = _check_keys(args, {"database", "table"}, {"where", "columns", "limit"}, "database.lookup")
        database, real = self._resolve(args["database"], DATA_DIR)
        table, where = args["table"], args.get("where", {})
        limit = _int_arg(args, "limit", DEFAULT_ROWS, 1, ROWS_MAX)
        if not isinstance(table, str) or not table:
            raise _refuse("table must be a non-empty string")
        if not isinstance(where, dict) or len(where) > WHERE_KEYS_MAX:
            raise _refuse(f"where must map at most {WHERE_KEYS_MAX} column names to values")
        for value in where.values():
            if value is not None and type(value) not in (str, int):
                raise _refuse("where values must be strings, integers or null")
            if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
                raise _refuse(f"where integers must fit SQLite's 64-bit range, got {value}")
        _refuse_side_files(database, real)
        digest = _file_sha256(real)
        conn = _open_readonly(real)
        try:
            described = _describe(conn, table)
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
            shown = dict(zip(columns, (_json_value(v) for v in values)))
            items.append({"kind": "db_row", "database": database, "table": table, "pointer": f"/{table}/{rowid}",
                          "sha256": canonical_sha256(shown), "values": shown})
        coverage = {"database": database, "table": table, "where": dict(where), "columns": list(columns),
                    "limit": limit}
        schema = {"database": database, "database_sha256": digest, "table": table, "columns": described}
        return {"items": items, "coverage": coverage, "truncated": truncated, "schema": schema,
                "sources": [[database, digest]]}


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _quote(identifier: str) -> str:
    """An SQL identifier in double quotes (embedded quotes doubled); only ever used for names that
    were first found in the database's own schema."""
    return '"' + identifier.replace('"', '""') + '"'


def _open_readonly(path: Path) -> sqlite3.Connection:
    # immutable: SQLite writes nothing next to the file (no -shm, no -wal); a -wal or -journal
    # file was refused before, so the main file alone holds every row
    uri = f"file:{quote(os.fsencode(os.path.abspath(path)))}?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise _refuse(f"{path.name} cannot be opened read-only as SQLite: {exc}") from None
    return conn


def _describe(conn: sqlite3.Connection, table: str) -> list[dict[str, Any]]:
    """The columns of ``table`` (an existing rowid table) from the database's own schema."""
    try:
        tables = {name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        if table not in tables:
            raise _refuse(f"the database has no table {table[:80]!r}; it has {sorted(tables)}")
        info = conn.execute(f"PRAGMA table_info({_quote(table)})").fetchall()
        alias = _rowid_alias(table, [row[1] for row in info])
        conn.execute(f"SELECT {alias} FROM {_quote(table)} LIMIT 0").fetchall()
    except sqlite3.Error as exc:
        raise _refuse(f"table {table[:80]!r} cannot be read by rowid: {exc}") from None
    return [{"name": name, "type": kind, "notnull": bool(notnull), "pk": pk} for _, name, kind, notnull, _, pk in info]


def _rowid_alias(table: str, names: list[str]) -> str:
    """The first of ``rowid``, ``_rowid_``, ``oid`` that no column of ``table`` shadows (a column of
    that name would be read instead of the row id); ``ROUTER_REFUSED`` when all three are shadowed."""
    taken = {name.lower() for name in names}
    for alias in ROWID_ALIASES:
        if alias not in taken:
            return alias
    raise _refuse(f"table {table[:80]!r} has columns named {', '.join(ROWID_ALIASES)}: its row ids cannot be read")


def _refuse_side_files(database: str, real: Path) -> None:
    """``ROUTER_REFUSED`` when ``<database>-wal`` or ``<database>-journal`` exists: rows may live
    there, outside the file that is read and hashed (checkpoint or commit the database first)."""
    for suffix in ("-wal", "-journal"):
        if os.path.lexists(str(real) + suffix):
            raise _refuse(f"{database} has a {suffix} file next to it (uncheckpointed or unfinished writes); "
                          "checkpoint the database (or close its writers) and query again", path=database)


def _select(conn: sqlite3.Connection, table: str, columns: list[str], where: Mapping[str, Any],
            limit: int, rowid: str = "rowid") -> tuple[list[tuple[int, tuple]], bool]:
    projection = ", ".join(_quote(c) for c in columns)
    conditions = " AND ".join(f"{_quote(c)} IS ?" for c in where) or "1"
    sql = f"SELECT {rowid}, {projection} FROM {_quote(table)} WHERE {conditions} ORDER BY {rowid} LIMIT ?"
    try:
        found = conn.execute(sql, [*where.values(), limit + 1]).fetchall()
    except sqlite3.Error as exc:
        raise _refuse(f"lookup in {table[:80]!r} failed: {exc}") from None
    return [(row[0], row[1:]) for row in found[:limit]], len(found) > limit


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float):
        return {"real": repr(value)}
    return value
