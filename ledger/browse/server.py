"""``ledger serve``: Datasette on one or more cases, read-only (docs/browse.md).

Needs Datasette, the optional extra ``web`` (``pip install '.[web]'`` in a clone of the repository). Each
ledger file is opened ``mode=ro`` (a live case's newest commits are read from its WAL, which
Datasette's immutable mode would skip; immutable only on a read-only file system) and every connection Datasette makes to it gets
``PRAGMA query_only``, so no statement sent over HTTP can write. The metadata and canned
queries come from :mod:`ledger.browse.metadata`; the remaining-units picture is an ``.svg`` output
renderer registered here (a chart drawn on the server: no JavaScript, nothing fetched).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import importlib
import inspect
import ipaddress
import json
import logging
import os
import re
import signal
import socket
import sqlite3
import sys
import threading
import time
import types
import warnings
import webbrowser
import weakref
from pathlib import Path
from typing import Any, Callable, Sequence

from ..ground import errors as E
from .connections import CaseChanged, case_connection, device_and_inode
from .metadata import (CHART_FORMAT, CHART_QUERY, ServedCase, browse_config, browse_metadata, left_out_warnings,
                       remaining_units_svg, served_cases)
from ..ground.errors import LedgerError, printable, quoted, shown
from ..storage.sqlfiles import schema_version
from ..storage.readonly import (REFUSED_FUNCTIONS, SEVERAL_STATEMENTS, bound_values, several_statements,
                                without_final_semicolons)
from ..storage.sqlite_file import release_log
from ..storage.side_files import check_not_cut_short, log_files_exist

#: The picture reads every row of its question: up to 30 s (Datasette's pages stop a query at 1 s).
CHART_TIME_LIMIT_MS = 30_000
#: How long a stop (Ctrl-C, SIGTERM) waits for downloads under way before it ends them.
GRACE_S = 3
INSTALL_HINT = "ledger serve needs Datasette: pip install '.[web]' (in a clone of the repository)"
_PLUGIN_NAME = "case-ledger-serve"
#: Datasette's own error handler, which ours replaces in a process that serves cases.
_DATASETTE_ERRORS = "datasette.handle_exception"
_DATASETTE_BLOBS = "datasette.blob_renderer"
#: The Datasette instances this module made, and the case databases of each.
_OURS: "weakref.WeakKeyDictionary[Any, frozenset[str]]" = weakref.WeakKeyDictionary()


def _datasette_module(name: str = "datasette.app") -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise LedgerError(E.INVALID_ARGUMENT, INSTALL_HINT) from None


def serve_metadata(paths: Sequence[str | os.PathLike[str]],
                   left_out: list[tuple[str, LedgerError]] | None = None) -> dict[str, Any]:
    """What ``--metadata-only`` prints: the metadata file ``datasette --metadata`` takes, canned
    queries included under each database's ``queries`` key (where Datasette 1.0's configuration
    file keeps them too, so the same JSON serves as both files). Needs no Datasette. ``left_out``:
    as :func:`~ledger.browse.metadata.served_cases` takes it (the cases that cannot be read, listed
    there instead of refused)."""
    return browse_metadata(served_cases(paths, left_out))


async def _render_chart(datasette: Any, database: str, query_name: str | None, sql: str | None,
                        request: Any) -> dict[str, Any] | None:
    """The picture of the ``remaining_units_history`` question, from all its rows (not only the
    page Datasette shows)."""
    if query_name != CHART_QUERY or datasette not in _OURS:
        return None
    hypothesis = request.args.get("hypothesis_id") or ""
    result = await datasette.get_database(database).execute(sql, {"hypothesis_id": hypothesis}, truncate=False,
                                                            custom_time_limit=CHART_TIME_LIMIT_MS)
    rows = [dict(zip(result.columns, row)) for row in result.rows]
    body = remaining_units_svg(rows, title=f"{database}: remaining units of each hypothesis")
    return {"body": body, "content_type": "image/svg+xml; charset=utf-8"}


def _can_render_chart(datasette: Any, query_name: str | None) -> bool:
    return query_name == CHART_QUERY and datasette in _OURS


def _case_database(database_module: Any) -> Any:
    """Datasette's ``Database`` for a served case: every connection (reads, and the write connection
    a write attempt would open, which SQLite then refuses) is :func:`case_connection`."""
    quiet = "log_sql_errors" in inspect.signature(database_module.Database.execute).parameters
    page_error = _datasette_module("datasette.views.base").DatasetteError

    class CaseDatabase(database_module.Database):  # type: ignore[misc,name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # the file served: every connection, opened now or later, reads it or nothing
            self.opened_as = device_and_inode(self.path)
            self.schema_version: Any = None  # the last one read, for Datasette's look at every case

        @property
        def size(self) -> int:  # the index page's figure: a stat of the file
            try:
                return super().size
            except OSError as exc:
                E.pass_on_interruption(exc)
                raise _unavailable(self.path, exc) from None

        def connect(self, write: bool = False) -> sqlite3.Connection:
            try:
                os.stat(self.path)  # moved or removed: said plainly
                conn = case_connection(self.path, self.opened_as)
            except CaseChanged as exc:
                raise _unavailable_page(str(exc)) from None
            except (OSError, sqlite3.Error, LedgerError) as exc:
                E.pass_on_interruption(exc)
                raise _unopenable(self.path, exc) from None
            getattr(self, "_all_file_connections", []).append(conn)  # closed by close(), as Datasette's own
            return conn

        async def execute_fn(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
            try:
                return await super().execute_fn(functools.partial(_forgetting_damage, fn))
            except CaseChanged as exc:  # a page, not a line on the terminal per request
                raise _unavailable_page(str(exc)) from None
            except sqlite3.DatabaseError as exc:
                if not _damaged_file(exc):
                    raise
                raise _damaged(self.path, await asyncio.to_thread(_cut_short_reason, self.path), exc) from None

        async def execute(self, *args: Any, **kwargs: Any) -> Any:
            # a refused query is answered to its visitor, never printed on the terminal (any visitor could fill it)
            if quiet:
                kwargs["log_sql_errors"] = False
            args = _ended_once(args)
            schema_look = bool(args) and args[0] == SCHEMA_LOOK
            try:
                results = await super().execute(*args, **kwargs)
            except (sqlite3.ProgrammingError, sqlite3.Warning) as exc:  # SQL SQLite would not run as asked
                said = SEVERAL_STATEMENTS if several_statements(exc) else f"query refused: {exc}"
                raise refused_query(said, title="Invalid SQL", status=400) from None
            except page_error as exc:
                # Datasette looks at every case's schema before any page: one case unavailable made every
                # page of every case answer so. Its last version seen (None: a case not read yet) instead
                if not (schema_look and exc.status == 503):
                    raise
                return database_module.Results([(self.schema_version,)], False, [("schema_version",)])
            if schema_look:
                self.schema_version = results.first()[0]
            return results

    class refused_query(page_error, sqlite3.ProgrammingError):  # type: ignore[misc,valid-type]
        """A query the visitor sent that SQLite will not run (``_where=1=1;select 1``: one statement at
        a time): the SQL page shows it as any refused query; a table page answers 400, not a 500 with a
        traceback on the server's terminal (Datasette prints one for any other exception)."""

    return CaseDatabase


def _ended_once(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments of a served query, its SQL without the semicolons, white space and comments that end
    it: ``SELECT 1;; -- note`` is one statement, as in ``ledger sql``."""
    ended = without_final_semicolons(args[0]) if args and isinstance(args[0], str) else ""
    return (ended, *args[1:]) if ended else args


def _forgetting_damage(read: Callable[[sqlite3.Connection], Any], conn: sqlite3.Connection) -> Any:
    """``read(conn)``, after dropping what ``conn`` holds in memory of a file found damaged that changed
    since (a whole copy put back in place: ``forget_damage`` of :mod:`.connections`); a read finding the
    file damaged is noted for that."""
    if hasattr(conn, "forget_damage"):
        conn.forget_damage()
    try:
        return read(conn)
    except sqlite3.DatabaseError as exc:
        if _damaged_file(exc) and hasattr(conn, "noted_damage"):
            conn.noted_damage()
        raise


def _unavailable_page(message: str) -> Exception:
    """``503 Case unavailable``: a page, not a traceback or a line on the server's terminal."""
    return _datasette_module("datasette.views.base").DatasetteError(message, title="Case unavailable", status=503)


def _unopenable(path: str, exc: BaseException) -> Exception:
    """The 503 of a case a page cannot open: damaged (SQLite refuses it as no database) or else moved,
    removed or made unreadable."""
    if getattr(exc, "code", None) == E.INTEGRITY_ERROR or _damaged_file(exc):
        return _damaged(path, _cut_short_reason(path), exc)
    return _unavailable(path, exc)


def _unavailable(path: str, exc: BaseException) -> Exception:
    reason = getattr(exc, "strerror", None) or getattr(exc, "message", None) or exc
    return _unavailable_page(f"{path} cannot be opened now ({reason}): moved, removed or made unreadable since the "
                             "server started; put it back, or start ledger serve again")


def _damaged(path: str, cut_short: str | None, exc: BaseException) -> Exception:
    reason = exc.message.removeprefix("SQLite refused: ") if isinstance(exc, LedgerError) else exc
    said = cut_short or (f"{path} cannot be read now ({reason}): the file is damaged (changed by something other than "
                         f"case-ledger?); 'ledger verify {Path(path).parent}' says how")
    return _unavailable_page(f"{said}. The server reads it again once a whole copy is put back")


#: What Datasette asks of every database before it answers any page (its schema's version).
SCHEMA_LOOK = "PRAGMA schema_version"
#: SQLite's result codes for a file that is no (longer a whole) database: SQLITE_CORRUPT, SQLITE_NOTADB.
_DAMAGED_FILE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


def _damaged_file(exc: BaseException) -> bool:
    """Whether SQLite refused ``exc``'s file as no (longer a whole) database."""
    return getattr(exc, "sqlite_errorcode", None) in _DAMAGED_FILE_CODES


def _cut_short_reason(path: str) -> str | None:
    """What :func:`~ledger.storage.side_files.check_not_cut_short` says of the ledger at ``path``
    (None: it is not cut short, or cannot be looked at)."""
    try:
        check_not_cut_short(Path(path))
    except LedgerError as exc:
        return exc.message
    except OSError as oserr:
        E.pass_on_interruption(oserr)  # else the file is gone or unreadable: nothing more to say
    return None


def _no_address_functions(action: int, first: str | None, second: str | None, *_: Any) -> int:
    """The authorizer of every served connection: :data:`REFUSED_FUNCTIONS` denied, all else as before."""
    if action == sqlite3.SQLITE_FUNCTION and (second or "").lower() in REFUSED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _plugin() -> Any:
    """The Datasette plugin: ``query_only`` on every connection to a served case, and the
    picture's ``.svg`` renderer. Registered once per process; it acts only on this module's
    Datasette instances."""
    hookimpl = _datasette_module("datasette").hookimpl

    @hookimpl
    def prepare_connection(conn: Any, database: str, datasette: Any) -> None:
        if database in _OURS.get(datasette, ()):
            conn.execute("PRAGMA query_only = ON")
            # one request must not build a value of gigabytes (zeroblob, repeat) that starves the others
            bound_values(conn)
            conn.set_authorizer(_no_address_functions)

    @hookimpl
    def register_output_renderer(datasette: Any) -> list[dict[str, Any]]:
        return [{"extension": CHART_FORMAT, "render": _render_chart, "can_render": _can_render_chart},
                {"extension": "blob", "render": _render_blob, "can_render": lambda: False}]

    @hookimpl
    def handle_exception(datasette: Any, request: Any, exception: BaseException) -> Any:
        # Datasette's own handler is unregistered (case_datasette): it printed a traceback on the
        # server's terminal for every error that was no DatasetteError, the visitor's bad input included
        default = _datasette_module("datasette.handle_exception").handle_exception
        if datasette not in _OURS:
            return default(datasette, request, exception)
        return default(datasette, request, _page_error(exception, request))

    plugin = types.ModuleType(_PLUGIN_NAME.replace("-", "_"))
    plugin.prepare_connection = prepare_connection  # type: ignore[attr-defined]
    plugin.register_output_renderer = register_output_renderer  # type: ignore[attr-defined]
    plugin.handle_exception = handle_exception  # type: ignore[attr-defined]
    return plugin


async def _render_blob(datasette: Any, database: str, rows: Sequence[Any], columns: Sequence[str], request: Any,
                       table: str | None, view_name: str) -> Any:
    """Datasette's ``.blob`` download, of a value that is binary or none: Datasette sent a number's or a
    text's page half begun, then failed (a traceback on the server's terminal, the visitor's answer cut
    short), and failed too on a query of no row or a ``_blob_hash`` beside values that are no blob.
    Such a request is ``400``: saying what the column holds, or, given a ``_blob_hash`` no blob of the
    column has, that the link has expired (Datasette's words; it makes such links for blobs alone)."""
    column = request.args.get("_blob_column")
    if datasette in _OURS and column in columns:
        bad_request = _datasette_module("datasette.utils.asgi").BadRequest
        if "_blob_hash" in request.args:
            rows = [row for row in rows if isinstance(row[column], bytes)]
        elif not rows:
            raise bad_request("the query returned no row: there is no binary value to download")
        elif not isinstance(rows[0][column], (bytes, type(None))):
            kind = "text" if isinstance(rows[0][column], str) else "a number"
            raise bad_request(f"{column} holds {kind}, not a binary value: its .csv or .json page shows it")
    render = _datasette_module("datasette.blob_renderer").render_blob
    return await render(datasette, database, rows, columns, request, table, view_name)


def _page_error(exception: BaseException, request: Any) -> Any:
    """The error page a served case answers ``exception`` with: a ``DatasetteError`` Datasette renders
    without printing anything. Datasette's refusals of a table page's options, which it raises as
    errors of the server (``_sort`` of an unknown column), a value it could not read or use from the
    request (``_timelimit=abc``, ``_through={bad``, ``_json_infinity=abc``: a ``ValueError``; an
    integer past SQLite's, a ``_next`` of the wrong type) and a CSV query past a ``_timelimit`` are
    ``400``; anything else is ``500`` with its message, and one line on the server's terminal naming
    the page."""
    page_error = _datasette_module("datasette.views.base").DatasetteError
    if isinstance(exception, page_error):
        if exception.status != 500:
            return exception
        return page_error(exception.message, title=getattr(exception, "title", None) or "Bad request", status=400,
                          message_is_html=getattr(exception, "message_is_html", False))
    if isinstance(exception, _datasette_module("datasette.utils.asgi").Base400):
        return exception  # Datasette's own answers (400, 403, 404), which it renders without printing
    unusable = _unusable_request(request)
    if unusable is not None:  # Datasette read the request without checking it (a KeyError, a TypeError)
        return page_error(unusable, title="Bad request", status=400)
    if type(exception).__name__ == "QueryInterrupted":  # a CSV page's query past its (given) time limit
        return page_error("the query took too long: past its time limit", title="SQL Interrupted", status=400)
    # a served case is only read: a constraint or a datatype mismatch there comes of the visitor's value
    if isinstance(exception, (ValueError, OverflowError, sqlite3.DataError, sqlite3.IntegrityError)):
        return page_error(f"a value of the request cannot be used: {str(exception) or type(exception).__name__}",
                          title="Bad request", status=400)
    said = shown(printable(str(exception)), 300)
    sys.stderr.write(f"warning: {printable(request.path)}: {type(exception).__name__}: {said}\n")
    return page_error(str(exception), title="Server error", status=500)


def _unusable_request(request: Any) -> str | None:
    """Why Datasette cannot answer ``request``, for the request values it uses without checking
    them (it met them as a ``KeyError`` or a ``TypeError``, a fault of the server by its kind): a
    ``_through`` that is no JSON object naming a ``table`` and a ``column`` (strings) and a ``value``,
    and a case's own CSV (``/CASE.csv``) without the SQL to run. None: nothing known wrong."""
    args = getattr(request, "args", None)
    if args is None:
        return None
    for through in args.getlist("_through"):
        try:
            given = json.loads(through)
        except (ValueError, RecursionError):  # no JSON, or nested deeper than Python reads
            given = None
        if not (isinstance(given, dict) and isinstance(given.get("table"), str)
                and isinstance(given.get("column"), str) and "value" in given
                and (given["value"] is None or isinstance(given["value"], (str, int, float)))):
            return (f"_through must be a JSON object naming a table, a column and a value, such as "
                    f'{{"table": "results", "column": "action_id", "value": "a1"}}; got {quoted(through, 100)}')
    path = getattr(request, "path", "")
    if re.fullmatch(r"/[^/.]+\.csv", path) and not (args.get("sql") or "").strip():
        return f"a case's CSV is the answer to a query: give the SQL to run, as {path}?sql=SELECT …"
    return None


#: The threads Datasette runs a server's queries in (its ``num_sql_threads``).
SQL_THREADS = 3


def case_datasette(paths: Sequence[str | os.PathLike[str]], sql_threads: int = SQL_THREADS,
                   left_out: list[tuple[str, LedgerError]] | None = None) -> Any:
    """A Datasette serving the cases at ``paths`` read-only, with their metadata, questions and
    picture (``await ds.client.get("/")`` reads it without a server). ``sql_threads`` 0 runs
    every query in the caller's thread (Datasette's ``num_sql_threads``). ``left_out``: as
    :func:`~ledger.browse.metadata.served_cases` takes it."""
    return _datasette_of(served_cases(paths, left_out), sql_threads)


def _datasette_of(cases: Sequence[ServedCase], sql_threads: int) -> Any:
    app = _datasette_module("datasette.app")
    database_module = _datasette_module("datasette.database")
    plugins = _datasette_module("datasette.plugins").pm
    # Datasette 0.65's error page prints every refused query with rich when rich is installed,
    # which fails outside an except block with rich 14 or newer and turns the refusal into an
    # error of its own; without rich it renders the page as intended
    _datasette_module("datasette.handle_exception").rich = None
    if not plugins.has_plugin(_PLUGIN_NAME):
        plugins.register(_plugin(), name=_PLUGIN_NAME)
        for theirs in (_DATASETTE_ERRORS, _DATASETTE_BLOBS):  # ours answers every error (_page_error), and
            if plugins.has_plugin(theirs):  # every .blob link (_render_blob), a case's or not
                plugins.unregister(name=theirs)
    options: dict[str, Any] = {"settings": {"allow_download": False, "num_sql_threads": sql_threads}}
    if "config" in inspect.signature(app.Datasette).parameters:  # Datasette 1.0: queries are configuration
        options.update(metadata=browse_metadata(cases, with_queries=False), config=browse_config(cases))
    else:
        options.update(metadata=browse_metadata(cases))
    datasette = app.Datasette(files=[], **options)
    _remember_table_permissions(datasette, plugins)
    _OURS[datasette] = frozenset(case.name for case in cases)
    database_class = _case_database(database_module)
    for case in cases:
        datasette.add_database(database_class(datasette, path=str(case.ledger), is_mutable=True), name=case.name)
    if "_memory" in datasette.databases:
        datasette.remove_database("_memory")
    return datasette


def _remember_table_permissions(datasette: Any, plugins: Any) -> None:
    """Answer each table's permission rules at once: Datasette 0.65.5 copies the whole metadata
    (every case's descriptions) each time it asks for a table's rules, once per table listed, so
    the home page grew with the square of the cases served (12 demo cases: 3 s). The metadata of
    served cases sets no table rule (``allow``), and never changes: without a plugin adding metadata
    of its own, every table has none; with one, each table's rules are worked out once."""
    rules = getattr(datasette, "_table_permission_allows", None)
    if not callable(rules):
        return
    local = getattr(datasette, "_metadata_local", None) or {}
    tables = [*(local.get("tables") or {}).values(), *(config for database in (local.get("databases") or {}).values()
                for config in ((database or {}).get("tables") or {}).values())]
    if not plugins.hook.get_metadata.get_hookimpls() and not any("allow" in (config or {}) for config in tables):
        datasette._table_permission_allows = lambda database, table: []
    else:
        datasette._table_permission_allows = functools.lru_cache(maxsize=None)(rules)


#: The most parameters a request's query string may hold (:func:`read_only_methods`): Datasette 0.65
#: parses the whole query string again for each one it reads, in the thread that serves every page.
QUERY_PARAMETERS_MAX = 200
#: The HTTP methods a served case answers; any other is 405 (:func:`read_only_methods`).
READ_METHODS = ("GET", "HEAD")


def read_only_methods(app: Callable[..., Any]) -> Callable[..., Any]:
    """The ASGI application ``app`` answering only ``GET`` and ``HEAD``: any other HTTP method is
    ``405 Method Not Allowed`` with a line saying why, before ``app`` sees it. Nothing a served case
    offers writes, and Datasette 0.65 answered a ``POST`` to a table page with an error 500 and a
    traceback on the server's terminal. A query string of more than :data:`QUERY_PARAMETERS_MAX`
    parameters is ``400 Bad Request`` (Datasette's time grew with their square: 10,000 of them held
    every page of every case for minutes)."""
    refused = b"this server is read-only: it answers GET and HEAD requests only\n"
    crowded = f"a request may give at most {QUERY_PARAMETERS_MAX} query parameters\n".encode()

    async def guarded(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] == "http" and scope["method"] not in READ_METHODS:
            await _answer(send, 405, refused, [(b"allow", ", ".join(READ_METHODS).encode())])
        elif scope["type"] == "http" and _parameters(scope.get("query_string", b"")) > QUERY_PARAMETERS_MAX:
            await _answer(send, 400, crowded)
        else:
            await app(scope, receive, send)

    return guarded


def _parameters(query: bytes) -> int:
    """How many parameters a query string gives (the pieces between ``&`` that are not empty)."""
    return len(query) and sum(1 for piece in query.split(b"&") if piece)


async def _answer(send: Callable[..., Any], status: int, body: bytes,
                  headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """A plain-text answer of ``status`` to an ASGI request, before Datasette sees it."""
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"), *headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (``INVALID_ARGUMENT`` when it cannot, or for an empty
    or blank ``host``, which would listen on every address: say ``0.0.0.0`` to mean that)."""
    if not isinstance(host, str) or not host.strip():
        raise LedgerError(E.INVALID_ARGUMENT, f"the address to listen on is empty ({host!r}); give one, such as "
                          "127.0.0.1 (this machine only) or 0.0.0.0 (every address, on a network you trust)")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except (OSError, OverflowError, UnicodeError, TypeError) as exc:  # TypeError: a host of bytes no name holds
        sock.close()
        E.pass_on_interruption(exc)
        raise LedgerError(E.INVALID_ARGUMENT, f"cannot listen on {host}:{port}: {exc}") from None
    return sock


def serve_cases(paths: Sequence[str | os.PathLike[str]], host: str = "127.0.0.1", port: int = 8001,
                open_browser: bool = False, echo: Callable[[str], None] = print,
                warn: Callable[[str], None] | None = None) -> None:
    """Serve the cases at ``paths`` until Ctrl-C (or SIGTERM): ``port`` 0 takes a free one; the
    address is echoed (and opened in a browser with ``open_browser``) once it listens. Listening on
    an address other than this machine's own (``0.0.0.0``) is said through ``warn`` (default: a
    line on standard error): there is no login. A case that cannot be read (no case in the folder, a
    damaged ledger) is left out with a warning naming its error, and the others are served; the
    error is raised (``LEDGER_MISSING``, ``INTEGRITY_ERROR``, …) when none is left."""
    # like every read path, serving leaves no -wal/-shm it made (docs/files.md)
    left_out: list[tuple[str, LedgerError]] = []
    try:
        served = served_cases(paths, left_out)
    finally:  # every case left out is named, the first one's error raised when none is left
        for line in left_out_warnings(left_out, len(paths), ", not served"):
            (warn or _stderr)(line)
    logless = [case.ledger for case in served if not log_files_exist(case.ledger)]
    datasette = _datasette_of(served, SQL_THREADS)
    uvicorn = _datasette_module("uvicorn")
    sock = _listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}/"
    server = uvicorn.Server(uvicorn.Config(read_only_methods(datasette.app()), log_level="warning", lifespan="on",
                                           timeout_graceful_shutdown=GRACE_S))
    quiet = _QuietStop()
    logging.getLogger("uvicorn.error").addFilter(quiet)  # after Config, which configures uvicorn's logging
    names = ", ".join(name for name in datasette.databases if name in _OURS[datasette])
    echo(f"serving {names} read-only at {url} (Ctrl-C stops)")
    for case in served:
        if case.schema_version < schema_version():  # its views lack columns some canned questions read
            (warn or _stderr)(f"warning: {case.ledger} was written by an older case-ledger (schema version "
                              f"{case.schema_version}; this one reads {schema_version()}) and not upgraded since: "
                              "questions naming what newer versions added fail on it; a command that writes, "
                              f"such as 'ledger export {case.ledger.parent}', upgrades it")
    if not _loopback(sock.getsockname()[0]):
        (warn or _stderr)(f"warning: listening on {host}, not only on this machine: anyone who can reach it may "
                          "read every served case and run SQL on it (there is no login)")
    if open_browser:  # once the server answers, and without waiting for a browser run in the terminal
        threading.Thread(target=_open_once_started, args=(server, url, echo), daemon=True).start()
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if in_main else None
    # the terminal closing (SIGHUP) stops it as SIGTERM does, instead of killing it mid-request
    # (unless SIGHUP is ignored, as under nohup: then it stays ignored)
    keep_hup = not in_main or signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    previous_hup = None if keep_hup else signal.signal(signal.SIGHUP, server.handle_exit)
    try:  # uvicorn shuts down on SIGINT/SIGTERM, then raises the signal again: both end here
        with warnings.catch_warnings():
            # a table page refused with 400 (a facet on no column) leaves Datasette's facet coroutines
            # unawaited: Python's warning about them, at the stop, is no news for whoever runs the server
            warnings.filterwarnings("ignore", r"coroutine .* was never awaited", RuntimeWarning)
            server.run(sockets=[sock])
            gc.collect()  # those coroutines are let go of here, under the filter
    except (KeyboardInterrupt, _Stopped):
        pass
    finally:
        logging.getLogger("uvicorn.error").removeFilter(quiet)
        if in_main:
            signal.signal(signal.SIGTERM, previous)
            if previous_hup is not None:
                signal.signal(signal.SIGHUP, previous_hup)
        sock.close()
        for database in datasette.databases.values():
            database.close()
        for ledger in logless:
            release_log(ledger)
    echo("stopped")


def _open_once_started(server: Any, url: str, echo: Callable[[str], None]) -> None:
    """Open ``url`` in a browser once ``server`` answers (a browser run in the terminal, such as
    w3m, holds this thread until it ends, never the server); nothing when the server stops first."""
    while not server.started:
        if server.should_exit:
            return
        time.sleep(0.05)
    if not webbrowser.open(url):  # no browser here (a server without a display, say)
        echo("no web browser could be opened here: open the address above yourself")


def _loopback(address: str) -> bool:
    """Whether the socket address ``address`` is this machine's only (``127.0.0.0/8``, ``::1``, and
    ``::ffff:127.x.x.x``, an IPv4 loopback address on an IPv6 socket)."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class _QuietStop(logging.Filter):
    """Keeps a stop quiet: the requests a stop ends after :data:`GRACE_S` (a download under way, or
    all at once on a second Ctrl-C) are cancelled, which uvicorn logged as errors with tracebacks."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError):
            return False
        return not record.getMessage().endswith("timeout graceful shutdown exceeded")


class _Stopped(Exception):
    """SIGTERM, raised again by uvicorn after its graceful shutdown."""


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped()

