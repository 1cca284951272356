"""The ``sql/`` folder: statement splitting, migrations, named statements.

Tables, triggers and views live in ``sql/NNN_name.sql`` migration files; the
statements the code runs live in ``sql/queries.sql`` (write path) and
``sql/reads.sql`` (read side), each block headed ``-- name: <name>``.
"""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
import threading
from functools import cache
from typing import Any

from ..ground.resources import resource_dir
from ..ground.errors import INTEGRITY_ERROR, SQLITE_UNSUPPORTED, LedgerError, quoted

#: The oldest SQLite the views work with: they read JSON with ``->>``, which SQLite 3.38.0 added
#: (docs/sql.md).
SQLITE_MIN_VERSION = (3, 38, 0)
#: The ledger's public views (docs/sql.md): what people read; ``verify`` compares each with a replay's.
PUBLIC_VIEWS = ("balances", "balances_recomputed", "actions", "evidence", "case_status", "scope_usage")
#: The columns of the views the library returns as rows (``Case.balances()``, ``actions()``, ``status()``), as the
#: schema this code writes defines them (docs/sql.md).
VIEW_COLUMNS = {
    "balances": frozenset({"revision", "hypothesis_id", "initial_units", "granted_units", "spent_units",
                           "rewarded_units", "remaining_units", "status", "terminal_reason", "pending_action_id",
                           "low_information_streak", "settled_actions", "failed_actions", "statement"}),
    "actions": frozenset({"revision", "hypothesis_id", "action_id", "action", "cost_units", "status",
                          "novelty_score", "semantic_score", "information_score", "reward_units", "reserved_at",
                          "closed_at", "closing_reason"}),
    "case_status": frozenset({"case_id", "package_id", "state", "analysis_revision", "package_generation",
                              "head_sha256", "outcome", "outcome_source"}),
}


def with_view_columns(view: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` of ``view`` (one of :data:`VIEW_COLUMNS`); ``INTEGRITY_ERROR`` when they lack a column of the
    view (altered in the file), which a caller reading them by name would meet as a ``KeyError``."""
    missing = VIEW_COLUMNS[view] - set(rows[0]) if rows else ()
    if missing:
        raise LedgerError(INTEGRITY_ERROR, f"the ledger's {view} view gives rows without its columns "
                          f"{', '.join(sorted(missing))}: the ledger was changed; run 'ledger verify'")
    return rows


_MIGRATION_RE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


def check_sqlite_version(found: tuple[int, ...] | None = None, text: str | None = None) -> None:
    """``SQLITE_UNSUPPORTED`` when the SQLite library Python uses is older than :data:`SQLITE_MIN_VERSION`
    (checked before any ledger file is opened or made, so nothing is written)."""
    found = sqlite3.sqlite_version_info if found is None else found
    if tuple(found) < SQLITE_MIN_VERSION:
        need = ".".join(map(str, SQLITE_MIN_VERSION))
        raise LedgerError(SQLITE_UNSUPPORTED,
                          f"this Python uses SQLite {text or sqlite3.sqlite_version}, but a ledger needs SQLite {need} "
                          "or newer (the views read JSON with ->>); run it with a Python whose sqlite3 module uses a newer "
                          "SQLite (current python.org, conda and Linux distribution builds do)",
                          found=text or sqlite3.sqlite_version, required=need)


class _FunctionFailures(threading.local):
    """The exceptions raised inside :func:`migration_functions` on this thread while SQLite called them (a
    Ctrl-C, say), which ``sqlite3`` reports only as "user-defined function raised exception": raised as
    themselves after. One list per thread, so two threads upgrading two ledgers never see each other's."""

    def __init__(self) -> None:
        self.raised: list[BaseException] = []


FUNCTION_FAILURES = _FunctionFailures()


def atoms_marked(atoms: str | None) -> str | None:
    """``ledger_atoms_marked(json_text)``, which migration 008 calls on an atoms list holding a NUL:
    ``{"marker": M, "atoms": [...]}``, each string with its NULs written as ``M``, a character none of
    them holds (SQLite's ``json_each`` ends a text at its first ``\\u0000``; ``replace(value, M,
    char(0))`` puts them back); None for anything but a JSON list of strings."""
    try:
        listed = json.loads(atoms) if isinstance(atoms, str) else None
        if not isinstance(listed, list) or not all(isinstance(atom, str) for atom in listed):
            return None
        held = set("".join(listed))  # the private-use characters first, then any but NUL and surrogates
        codes = itertools.chain(range(0xE000, 0xF900), range(0xF0000, 0x110000), range(1, 0xD800),
                                range(0xF900, 0xF0000))
        marker = next((chr(code) for code in codes if chr(code) not in held), None)  # one: never a neighbour's
        if marker is None:  # a list holding every character there is (over a mebibyte of atoms)
            return None
        return json.dumps({"marker": marker, "atoms": [atom.replace("\0", marker) for atom in listed]},
                          ensure_ascii=False)
    except ValueError:
        return None
    except BaseException as exc:  # sqlite3 would turn it into an error of the statement
        FUNCTION_FAILURES.raised.append(exc)
        raise


def migration_functions(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL functions the migrations call (:func:`atoms_marked`)."""
    conn.create_function("ledger_atoms_marked", 1, atoms_marked, deterministic=True)


def split_statements(script: str) -> list[str]:
    """Split a SQL script into complete statements with ``sqlite3.complete_statement``.

    ``executescript()`` would commit any open transaction first, so migrations run
    statement by statement inside our own ``BEGIN IMMEDIATE``.
    """
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not all(l.strip().startswith("--") or not l.strip() for l in buffer.splitlines()):
        raise ValueError(f"incomplete SQL statement: {quoted(buffer, 80)}")
    return statements


@cache
def migrations() -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """``(version, name, statements)`` of every ``sql/NNN_name.sql``, in order."""
    found = []
    for path in sorted(resource_dir("sql").iterdir()):
        match = _MIGRATION_RE.match(path.name)
        if match:
            statements = tuple(split_statements(path.read_text(encoding="utf-8")))
            found.append((int(match.group(1)), match.group(2), statements))
    return tuple(found)


def schema_object(statement: str) -> tuple[str, str, str]:
    """``(type, name, sql as sqlite_master stores it)`` of a ``CREATE`` statement, else ``("", "", "")``."""
    lines = statement.splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)  # leading comments are not part of what sqlite_master stores
    text = "\n".join(lines).strip().rstrip(";").rstrip()
    match = re.match(r"CREATE\s+(?:UNIQUE\s+)?(TABLE|TRIGGER|VIEW|INDEX)\s+(\w+)", text)
    return (match.group(1).lower(), match.group(2), text) if match else ("", "", "")


_DROP_RE = re.compile(r"DROP\s+(?:TABLE|TRIGGER|VIEW|INDEX)\s+(?:IF\s+EXISTS\s+)?(?:main\.)?(\w+)", re.I)


def shipped_schema(version: int | None = None) -> dict[str, str]:
    """Name → SQL of every table, index, trigger and view the migrations up to ``version``
    (default: all) leave behind; a later migration's ``DROP … name`` and re-``CREATE`` replace it."""
    objects: dict[str, str] = {}
    for number, _, statements in migrations():
        if version is not None and number > version:
            break
        for text in statements:
            kind, name, sql = schema_object(text)
            if kind:
                objects[name] = sql
                continue
            dropped = _DROP_RE.match("\n".join(l for l in text.splitlines() if not l.lstrip().startswith("--")).strip())
            if dropped:
                objects.pop(dropped.group(1), None)
    return objects


def shipped_objects(version: int | None = None) -> dict[tuple[str, str], str]:
    """:func:`shipped_schema` keyed by ``(type, name)``, as ``sqlite_master`` holds them: a trigger's
    name is not a table's, view's or index's (SQLite keeps triggers' names apart), so a trigger
    named like a shipped view is a different object, never the view."""
    return {(schema_object(sql)[0], name): sql for name, sql in shipped_schema(version).items()}


@cache
def former_objects() -> frozenset[tuple[int, str, str, str]]:
    """``(version, type, name, sql)`` of each object an earlier build of schema ``version`` wrote
    otherwise than that version's migration does now (``sql/history.sql``, each statement headed
    ``-- version: N``): what verify takes as shipped for a ledger of that version."""
    text = (resource_dir("sql") / "history.sql").read_text(encoding="utf-8")
    found = set()
    for each in split_statements(text):
        heading = re.search(r"^--\s*version:\s*(\d+)\s*$", each, re.M)
        kind, name, sql = schema_object(each)
        if not (heading and kind):
            raise ValueError(f"sql/history.sql: a statement without its '-- version: N' or CREATE: {each[:80]!r}")
        found.add((int(heading.group(1)), kind, name, sql))
    return frozenset(found)


def as_shipped(version: int, kind: str, name: str, sql: str | None, shipped: str) -> bool:
    """Whether ``sql`` is ``shipped``, the definition of ``kind`` ``name`` schema ``version`` ships, or
    that object as an earlier build of that version wrote it (:func:`former_objects`)."""
    return sql == shipped or (version, kind, name, sql) in former_objects()


def typed_objects(conn: sqlite3.Connection, schema: str = "main") -> dict[tuple[str, str], str]:
    """``(type, name)`` → SQL of the tables, views, indexes and triggers of ``schema``."""
    return {(kind, name): sql for kind, name, _table, sql in conn.execute(statement("schema_objects_typed", schema))}


@cache
def _every_shipped_object() -> frozenset[tuple[str, str, str]]:
    """``(type, name, sql)`` of every object any migration makes (``schema_object`` of each statement)."""
    return frozenset((kind, name, sql) for _, _, statements in migrations()
                     for kind, name, sql in map(schema_object, statements) if kind)


def foreign_schema(conn: sqlite3.Connection, schema: str = "main") -> list[str]:
    """The objects (``"table x"``) of a database that holds none a migration makes, by name and SQL
    alike, nor all of a ledger's core tables by name, but holds others: another program's (its own
    ``schema_migrations`` or ``events`` too),
    never a case ledger's, whose first write makes its schema and case in one transaction. Empty for
    an empty file and for one holding a ledger's objects (:func:`migration_record_problem` judges
    those). SQLite's own (``sqlite_stat1``) are no program's."""
    shipped = _every_shipped_object()
    own = conn.execute(statement("migrations_table_sql", schema)).fetchone()  # a ledger's, as a rule: one row
    if own is not None and ("table", "schema_migrations", bytes(own[0]).decode("utf-8", "replace")) in shipped:
        return []
    factory = conn.text_factory
    conn.text_factory = bytes  # SQLite's UTF-8 whatever the file's encoding: damaged text is no match, no error
    try:
        rows = conn.execute(statement("schema_objects_typed", schema)).fetchall()
    finally:
        conn.text_factory = factory
    present = [(kind, name, sql) for kind, name, _table, sql in
               (tuple(column.decode("utf-8", "replace") for column in row) for row in rows)
               if not name.startswith("sqlite_")]
    if any(row in shipped for row in present) or _LEDGER_CORE <= {(kind, name) for kind, name, _ in present}:
        return []  # (a ledger whose every statement was edited still has its core tables: an edited ledger)
    return [f"{kind} {name}" for kind, name, _ in present]


#: Tables every ledger has, which no other program's database has all of.
_LEDGER_CORE = {("table", "schema_migrations"), ("table", "events"), ("table", "case_identity")}


def recorded_schema_version(conn: sqlite3.Connection, schema: str = "main", ledger: object = "the ledger") -> int:
    """The schema version ``schema_migrations`` of ``schema`` records, 0 for a file with no schema yet
    or another program's database (:func:`foreign_schema`: its own ``schema_migrations`` says nothing
    of a ledger's); ``INTEGRITY_ERROR`` naming ``ledger`` for a version no case-ledger writes (an
    edited row). ``sqlite3.Error`` as the schema's reads raise it."""
    if conn.execute(statement("has_migrations_table", schema)).fetchone() is None or foreign_schema(conn, schema):
        return 0
    version = conn.execute(statement("schema_version_of", schema)).fetchone()[0]
    if type(version) is not int:
        raise LedgerError(INTEGRITY_ERROR, f"{ledger}: schema_migrations holds version {quoted(version, 40)}, "
                          "which no case-ledger writes; the file was edited outside case-ledger")
    return version


def schema_version() -> int:
    """The newest schema version this code knows."""
    return migrations()[-1][0]


@cache
def queries() -> dict[str, str]:
    """Named statements of ``sql/queries.sql`` (write path), ``sql/reads.sql`` (read side) and ``sql/fleet.sql``,
    each block headed ``-- name: <name>``."""
    named: dict[str, str] = {}
    for file in ("queries.sql", "reads.sql", "fleet.sql"):
        for name, sql in named_statements(file).items():
            if name in named:
                raise ValueError(f"{file}: statement {name} is named twice")
            named[name] = sql
    return named


@cache
def named_statements(file: str) -> dict[str, str]:
    """The blocks of ``sql/<file>`` headed ``-- name: <name>``, in file order (comment lines dropped)."""
    named: dict[str, str] = {}
    current = None
    for line in (resource_dir("sql") / file).read_text(encoding="utf-8").splitlines():
        match = re.match(r"^--\s*name:\s*(\w+)\s*$", line)
        if match:
            if match.group(1) in named:
                raise ValueError(f"{file}: statement {match.group(1)} is named twice")
            current = match.group(1)
            named[current] = ""
        elif current is not None and not line.startswith("--"):
            named[current] += line + "\n"
    return {name: sql.strip() for name, sql in named.items()}


def statement(name: str, schema: str = "main", **identifiers: str) -> str:
    """Text of a named statement with its ``{schema}``/``{table}``/… placeholders filled.

    ``schema`` is ``main`` or ``orig`` (the ledger verify attaches); identifiers
    come from code, never from input. Values bind as parameters.
    """
    return _statement(name, schema, tuple(sorted(identifiers.items())))


@cache
def _statement(name: str, schema: str, identifiers: tuple[tuple[str, str], ...]) -> str:
    text = queries()[name]
    return text.format(schema=schema, **dict(identifiers)) if "{" in text else text


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def folded_name(name: str) -> str:
    """``name`` as SQLite matches identifiers: ASCII letters case-insensitively (``"EVENTS"`` is the
    table ``events``; ``sqlite_master`` keeps a trigger's table name as it was typed), nothing else."""
    return name.translate(_ASCII_LOWER)


def column_list(conn: sqlite3.Connection, table: str, schema: str = "main", *, types: bool = False) -> str:
    """The columns of ``schema.table`` (one of the ledger's own tables or views: names from its
    schema), comma-separated; with ``types``, their storage classes (``typeof("col"), …``), which
    verify compares besides the values, as ``10.0 = 10`` in SQL."""
    names = [row[1] for row in conn.execute(statement("table_columns", schema, table=table))]
    each = 'typeof("{}")' if types else '"{}"'
    return ", ".join(each.format(name.replace('"', '""')) for name in names)




@cache
def _made_by(version: int) -> dict[tuple[str, str], str]:
    """``(type, name)`` → SQL of the tables, triggers, views and indexes migration ``version`` creates."""
    return {(kind, name): sql for v, _, statements in migrations() if v == version
            for kind, name, sql in map(schema_object, statements) if kind}


def migration_record_problem(conn: sqlite3.Connection, schema: str = "main") -> str | None:
    """Why the ``schema_migrations`` rows of ``schema`` disagree with the schema the file holds,
    or None: the rows must be exactly the shipped migrations up to the newest recorded one, and
    no object a later migration makes (or remakes, as a view-only migration does) may be there
    already (a deleted row would have the next writer run that migration again). A file with no
    schema at all has no problem."""
    if foreign_schema(conn, schema):
        return None  # another program's database: no ledger's migrations to judge
    present = typed_objects(conn, schema)
    rows = ([tuple(r) for r in conn.execute(statement("migration_rows", schema))]
            if ("table", "schema_migrations") in present else [])
    version = max((v for v, _ in rows), default=0)
    expected = [(v, name) for v, name, _ in migrations() if v <= version]
    if rows != expected:
        if [v for v, _ in rows] != [v for v, _ in expected]:
            return (f"schema_migrations holds versions {[v for v, _ in rows]} but the migrations up to {version} are "
                    f"{[v for v, _ in expected]} (an edited or deleted row)")
        held, shipped = next((r, e) for r, e in zip(rows, expected) if r != e)
        return (f"schema_migrations names version {held[0]} {held[1]!r}, but that migration is {shipped[1]!r} "
                "(an edited row)")
    known = shipped_objects(version) if version else {}
    for later, name, _ in migrations():
        made = _made_by(later) if later > version else {}
        extra = sorted(n for n, sql in made.items()
                       if n in present and (n not in known or (present[n] == sql and sql != known[n])))
        if extra:
            if ("table", "schema_migrations") not in present:
                return (f"the ledger holds {extra[0][1]}, made by migration {later:03d}_{name}, but its "
                        "schema_migrations table, which records the migrations run, is gone (a dropped table)")
            return (f"the ledger holds {extra[0][1]}, made by migration {later:03d}_{name}, but schema_migrations has "
                    f"no row for version {later} (a deleted row; the next write would run it again)")
    return None


def _added_objects(conn: sqlite3.Connection, schema: str) -> tuple[set[str], list[tuple[str, str, str, str]]]:
    """The names of the tables and views the schema ships, and ``(type, name, table, sql)`` of every
    object in ``schema`` it does not ship (``sqlite3.Error`` when the schema cannot be read)."""
    shipped = shipped_objects(recorded_schema_version(conn, schema))
    tables = {name for kind, name in shipped if kind in ("table", "view")}
    return tables, [(kind, name, table, sql) for kind, name, table, sql in
                    conn.execute(statement("schema_objects_typed", schema)).fetchall() if (kind, name) not in shipped]


def objects_using(conn: sqlite3.Connection, undefined: str, schema: str = "main") -> list[str]:
    """``"index my_idx on mine"``-style names of the indexes, triggers and views the schema does not
    ship, on any table, whose statement names ``undefined`` (a collation or function SQLite said it does
    not know: "no such collation sequence: weird", "unknown function: myf()"), or every such object
    when none names it; [] when none is there or the schema cannot be read."""
    word = re.sub(r"^.*?: ", "", undefined).removesuffix("()").strip().lower()
    try:
        rows = [row for row in _added_objects(conn, schema)[1] if row[0] in ("index", "trigger", "view")]
    except (sqlite3.Error, UnicodeDecodeError):
        return []
    naming = [row for row in rows if word and word in row[3].lower()]
    return [f"{kind} {name} on {table}" if kind != "view" else f"view {name}"
            for kind, name, table, _ in naming or rows]


def foreign_write_blockers(conn: sqlite3.Connection, schema: str = "main") -> list[str]:
    """``"index my_idx on events"``-style names of the indexes and triggers on ledger tables that
    the schema does not ship: what can make SQLite refuse the ledger's own writes, or its reads
    (one whose collation or function this program does not define); [] when even that cannot be read."""
    try:
        tables, rows = _added_objects(conn, schema)
    except sqlite3.Error:
        return []
    return [f"{kind} {name} on {table}" for kind, name, table, _ in rows
            if kind in ("index", "trigger") and folded_name(table) in tables]
