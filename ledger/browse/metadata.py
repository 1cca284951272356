"""What a person browsing a case is told: descriptions, questions and the remaining-units picture.

The texts come from ``sql/descriptions.toml`` (the one source ``docs/sql.md``'s view tables are
generated from, see docs/sql.md) and the questions' SQL from ``sql/browse.sql``; this module
turns them into Datasette's metadata (docs/browse.md) and draws the picture as SVG. It needs
no Datasette: ``ledger.browse.server`` wires it into one.
"""

from __future__ import annotations

import collections
import html
import os
import re
import sqlite3
import tomllib
from functools import cache
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from ..ground import errors as E
from ..ground.resources import resource_dir
from ..storage.sqlfiles import named_statements, shipped_schema
from ..services.case import read_only_query
from ..ground.errors import LedgerError
from ..model.package import LEDGER_FILE
from ..ground.paths import device_and_inode, fs_path, require_utf8

#: The canned query drawn as the picture, and the suffix of its picture's address.
CHART_QUERY = "remaining_units_history"
CHART_FORMAT = "svg"
RAW_HISTORY = "Raw history (append-only; read the views first): "


@cache
def descriptions() -> dict[str, Any]:
    """``sql/descriptions.toml``: views (heading, description, columns), tables, queries."""
    with open(resource_dir("sql") / "descriptions.toml", "rb") as file:
        return tomllib.load(file)


def view_columns(view: str) -> dict[str, dict[str, str]]:
    """Column → ``{type, unit, meaning}`` of a public view, in the view's column order."""
    entry = descriptions()["views"][view]
    return view_columns(entry["same_columns_as"]) if "same_columns_as" in entry else dict(entry["columns"])


def plain(text: str) -> str:
    """``text`` without its Markdown code quotes (Datasette shows descriptions as plain text)."""
    return text.replace("`", "")


def column_description(column: Mapping[str, str]) -> str:
    """What a column means, then its unit in brackets when it has one."""
    meaning = plain(column["meaning"])
    return f"{meaning} [{column['unit']}]" if column["unit"] else meaning


def canned_queries() -> dict[str, dict[str, str]]:
    """Name → ``{sql, title, description}`` of every question offered on a case, in order."""
    statements = named_statements("browse.sql")
    texts = descriptions()["queries"]
    if list(statements) != list(texts):
        raise ValueError(f"sql/browse.sql names {list(statements)} but descriptions.toml {list(texts)}")
    return {name: {"sql": statements[name], "title": texts[name]["title"],
                   "description": texts[name]["description"]} for name in statements}


def sql_reference() -> str:
    """The ``## Views`` section of docs/sql.md, generated from ``sql/descriptions.toml``."""
    parts = ["## Views\n\nThis section is generated from `sql/descriptions.toml`, whose texts `ledger serve` also shows\n"
             "beside each view and column ([browse.md](browse.md)).\n"]
    for view, entry in descriptions()["views"].items():
        parts.append(f"\n### `{view}` — {entry['heading']}\n")
        if entry.get("intro"):
            parts.append(f"\n{entry['intro'].strip()}\n")
        if "same_columns_as" not in entry:
            parts.append("\n| column | type | unit | meaning |\n| --- | --- | --- | --- |\n")
            parts.extend(f"| `{name}` | {column['type']} | {column['unit'] or '—'} | {column['meaning']} |\n"
                         for name, column in entry["columns"].items())
        if entry.get("outro"):
            parts.append(f"\n{entry['outro'].strip()}\n")
    return "".join(parts)


def tables_reference() -> str:
    """The list of every ledger table in docs/sql.md's ``## Tables``, generated from
    ``sql/descriptions.toml`` and the schema (each table's columns; the events table's explained)."""
    texts = descriptions()
    names = table_columns()
    rows = [f"| `{table}` | {text} | {', '.join(f'`{c}`' for c in names[table])} |\n"
            for table, text in texts["tables"].items()]
    columns = [f"| `{name}` | {meaning} |\n" for name, meaning in texts["tables_columns"]["events"].items()]
    return ("| table | what it holds | columns |\n| --- | --- | --- |\n" + "".join(rows)
            + "\nThe columns of `events`:\n\n| column | meaning |\n| --- | --- |\n" + "".join(columns))


def table_columns() -> dict[str, list[str]]:
    """Every table of the shipped schema → its column names, in order."""
    conn = sqlite3.connect(":memory:")
    try:
        tables = [(name, sql) for name, sql in shipped_schema().items() if re.match(r"\s*CREATE\s+TABLE\b", sql, re.I)]
        for _, sql in tables:
            conn.execute(sql)
        return {name: [row[1] for row in conn.execute(f"PRAGMA table_info({name})")] for name, _ in tables}
    finally:
        conn.close()


class ServedCase(NamedTuple):
    """A case as it is served: its database name in Datasette, ledger file, case id and state."""

    name: str
    ledger: Path
    case_id: str
    state: str
    schema_version: int = 0  # of the ledger file: older than this case-ledger's until a writer upgrades it


def served_cases(paths: Sequence[str | os.PathLike[str]],
                 left_out: list[tuple[str, LedgerError]] | None = None) -> list[ServedCase]:
    """The cases at ``paths``, each read once (``LEDGER_MISSING`` for a folder that holds none, any
    error reading one; ``INVALID_ARGUMENT`` for none given or the same case twice). Given a list
    ``left_out``, a case that cannot be read, or given again, is appended to it, as its path and the
    error, and the others are served; the first error is raised only when no case is left. Database
    names are the case ids made URL-safe, with ``-2``, ``-3`` … when two cases share one (never another case's own
    name, whatever the order: a copy of BUG-20 is not named BUG-20-2 beside the case BUG-20-2,
    and the case X-Y is at /X-Y beside the case X.Y), nor a name a route of Datasette's answers
    first or keeps for itself (``favicon-ico`` is served as ``case-favicon-ico``, ``_internal`` as
    ``case-_internal``). The first row of ``case_status`` is
    shown as it is, whatever it holds (a view altered in the file: ``ledger verify`` judges it)."""
    if not paths:
        raise LedgerError(E.INVALID_ARGUMENT, "give at least one case folder")
    seen: dict[object, str] = {}  # each ledger served (its device and inode), by the path it was first given as
    read: list[tuple[Path, str, str, int]] = []
    for path in paths:
        try:
            root = fs_path(path, "case path")
            rows = [(*_starting_read(root, STATUS_READ, 2), *_starting_read(root, VERSION_READ, 1))]
            ledger = Path(os.path.realpath(root / LEDGER_FILE))
            # Datasette keeps every database's path as text
            require_utf8(ledger, "the path is not UTF-8 text, which the browser server cannot serve; rename the folder")
        except LedgerError as exc:
            if left_out is None:
                raise
            left_out.append((os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else repr(path), exc))
            continue
        same = device_and_inode(ledger) or ledger  # one file however it is reached (hard link, bind mount)
        if same in seen:
            twice = LedgerError(E.INVALID_ARGUMENT, f"{path}: the same case as {seen[same]} is given twice "
                                "(served once, as that)")
            if left_out is None:
                raise twice
            left_out.append((os.fsdecode(path), twice))
            continue
        seen[same] = os.fsdecode(path)
        case_id, state, version = rows[0]
        read.append((ledger, _as_text(case_id), _as_text(state), version if type(version) is int else 0))
    if not read and left_out:
        raise left_out[0][1]
    bases = [re.sub(r"[^A-Za-z0-9_-]", "-", case_id) or "case" for _, case_id, _, _ in read]
    bases = [f"case-{base}" if _SHADOWED.match(base) else base for base in bases]
    names: dict[int, str] = {}
    # a case whose id is its name already is named first, so that another made to look like it waits
    for index in sorted(range(len(read)), key=lambda i: read[i][1] != bases[i]):
        name, number = bases[index], 1
        while name in names.values() or (name != bases[index] and name in bases):
            number += 1
            name = f"{bases[index]}-{number}"
        names[index] = name
    return [ServedCase(names[index], *case) for index, case in enumerate(read)]


def left_out_warnings(left_out: Sequence[tuple[str, LedgerError]], given: int, what: str = "") -> list[str]:
    """The warning lines naming each case :func:`served_cases` left out (of
    ``given``), all but the first when it left out every one (that one's error is the answer)."""
    shown = left_out[1:] if len(left_out) == given else left_out
    return [f"warning: {path} is left out{what}: {refused.code}: {refused.message}" for path, refused in shown]


#: What serving reads of each case as it starts: one row, whatever an altered view would return.
STATUS_READ = "SELECT (SELECT case_id FROM case_status LIMIT 1), (SELECT state FROM case_status LIMIT 1)"
VERSION_READ = "SELECT (SELECT MAX(version) FROM schema_migrations)"
STARTING_READ_MS = 5_000


def _starting_read(root: Path, query: str, width: int) -> tuple[Any, ...]:
    """The one row of ``query`` on the case at ``root``; ``width`` NULLs when the case's view or table cannot
    answer it (altered in the file: the case is served all the same, 'ledger verify' judges it)."""
    try:
        return read_only_query(root, query, timeout_ms=STARTING_READ_MS)[1][0]
    except LedgerError as exc:
        if "timeout_ms" in exc.details:
            raise LedgerError(exc.code, f"{root}: reading its case_status view took over {STARTING_READ_MS // 1000} "
                              "s, which the ledger's own view never does (altered in the file?): run 'ledger verify "
                              f"{root}'", path=str(root)) from None
        if exc.details.get("query") not in ("refused", "failed"):  # the file or the lock, not the statement
            raise
        return (None,) * width


def _as_text(value: Any) -> str:
    """A ``case_status`` value as the page shows it: text as it is, nothing as empty, else its SQL text."""
    return value if isinstance(value, str) else "" if value is None else str(value)


#: Database names whose pages a route of Datasette's answers before the database's own (it matches
#: each path from its start against "/favicon.ico", the dot any character): served as case-NAME.
#: Names Datasette answers first or keeps for itself (its icon's route, its own databases ``_internal`` and
#: ``_memory``, its pages under ``/-/``): a case of such a name, which only a file altered by hand can hold
#: for the last three, is served as ``case-NAME``.
_SHADOWED = re.compile(r"favicon.ico|(?:_internal|_memory|-)\Z")


def _chart_address(name: str) -> str:
    return f"/{name}/{CHART_QUERY}.{CHART_FORMAT}?hypothesis_id="


def _case_page(case: ServedCase) -> str:
    """The HTML at the top of a case's page: the views to read first, the picture, the raw tables."""
    items = "".join(f'<li><a href="/{case.name}/{view}"><strong>{view}</strong></a>: '
                    f"{html.escape(entry['description'])}</li>"
                    for view, entry in descriptions()["views"].items())
    return (f"<p>Case <strong>{html.escape(case.case_id)}</strong>, state <strong>{html.escape(case.state)}"
            f'</strong> when this server started (<a href="/{case.name}/case_status">case_status</a> shows it '
            f"now), from the folder <code>{html.escape(str(case.ledger.parent))}</code>. Read the views first:"
            f"</p><ul>{items}</ul>"
            f'<p><img src="{_chart_address(case.name)}" alt="remaining units of each hypothesis across the '
            f'history" width="720" height="320"></p>'
            "<p>The tables listed below are the raw history the views are derived from: append-only and "
            "hash-chained. This server shows the file as it is and checks nothing: <code>ledger verify</code> "
            "checks the history and every view against it.</p>")


def _tables() -> dict[str, dict[str, Any]]:
    texts = descriptions()
    tables: dict[str, dict[str, Any]] = {}
    for view, entry in texts["views"].items():
        tables[view] = {"description": entry["description"],
                        "columns": {name: column_description(column) for name, column in view_columns(view).items()}}
    for table, text in texts["tables"].items():
        tables[table] = {"description": RAW_HISTORY + plain(text)}
        if table in texts["tables_columns"]:
            tables[table]["columns"] = {name: plain(meaning) for name, meaning in texts["tables_columns"][table].items()}
    return tables


def _queries(case: ServedCase) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for name, query in canned_queries().items():
        found[name] = dict(query)
        if name == CHART_QUERY:
            found[name]["description_html"] = (
                f"<p>{html.escape(query['description'])}</p>"
                f'<p><img src="{_chart_address(case.name)}" alt="remaining units of each hypothesis across the '
                f'history" width="720" height="320"></p>')
    return found


def browse_metadata(cases: Iterable[ServedCase], with_queries: bool = True) -> dict[str, Any]:
    """Datasette metadata for ``cases``: a title per case (case id and state when served), descriptions of
    every view, column and table, and (``with_queries``) the canned queries under each database's
    ``queries`` key, as ``datasette --metadata`` takes them."""
    cases = list(cases)
    title = (f"case-ledger: {cases[0].case_id} ({cases[0].state})" if len(cases) == 1
             else f"case-ledger: {len(cases)} cases")
    databases = {}
    counts = collections.Counter(case.case_id for case in cases)
    for case in cases:
        # packages of one case id (copies of a case, say) are told apart by their folders
        where = f", {case.ledger.parent}" if counts[case.case_id] > 1 else ""
        databases[case.name] = {"title": f"{case.case_id} ({case.state}{where})", "description_html": _case_page(case),
                                "tables": _tables()}
        if with_queries:
            databases[case.name]["queries"] = _queries(case)
    return {"title": title, "description": "Append-only, hash-chained budget and evidence ledgers: read the "
            "views first; every number in them is derived from the raw history. Shown as the files are: "
            "ledger verify checks them, this server does not.",
            "databases": databases}


def browse_config(cases: Iterable[ServedCase]) -> dict[str, Any]:
    """The canned queries as Datasette 1.0 keeps them in its configuration file."""
    return {"databases": {case.name: {"queries": _queries(case)} for case in cases}}


# --- the picture ------------------------------------------------------------------------------
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 720, 320, 56, 130, 28, 44


def _series(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[int, int]]]:
    """Line label → ``[(seq, remaining units)]``; the revision joins the label when there are several."""
    rows = list(rows)
    several = len({row["revision"] for row in rows}) > 1
    lines: dict[str, list[tuple[int, int]]] = {}
    for row in rows:
        label = f"{row['revision']}/{row['hypothesis_id']}" if several else str(row["hypothesis_id"])
        lines.setdefault(label, []).append((int(row["seq"]), int(row["remaining_units"])))
    return lines


def remaining_units_svg(rows: Iterable[Mapping[str, Any]], title: str = "") -> str:
    """A step line per hypothesis of its remaining units against the event ``seq`` (rows with
    ``seq``, ``revision``, ``hypothesis_id`` and ``remaining_units``, as the
    ``remaining_units_history`` question returns them); each line runs on to the newest event."""
    lines = _series(rows)
    points = [p for line in lines.values() for p in line]
    first = min((s for s, _ in points), default=0)
    last = max((s for s, _ in points), default=1)
    top = max(max((u for _, u in points), default=0), 1)
    span_x, span_y = max(last - first, 1), top
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(seq: int) -> str:
        return f"{LEFT + (seq - first) * plot_w / span_x:.1f}"

    def y(units: int) -> str:
        return f"{TOP + plot_h - max(units, 0) * plot_h / span_y:.1f}"

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
           f"<title>{html.escape(title or 'remaining units of each hypothesis')}</title>",
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="black"/>',
           f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="black"/>']
    for value in sorted({0, top // 2, top}):
        out.append(f'<text x="{LEFT - 6}" y="{y(value)}" text-anchor="end" dominant-baseline="middle">{value}</text>')
    for seq in sorted({first, last}):
        out.append(f'<text x="{x(seq)}" y="{TOP + plot_h + 16}" text-anchor="middle">{seq}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">event seq</text>')
    out.append(f'<text x="14" y="{TOP + plot_h / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {TOP + plot_h / 2:.1f})">remaining units</text>')
    if not lines:
        out.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{TOP + plot_h / 2:.1f}" text-anchor="middle">'
                   "no budget events yet</text>")
    for number, (label, line) in enumerate(lines.items()):
        colour = _COLOURS[number % len(_COLOURS)]
        path = [f"{x(line[0][0])},{y(line[0][1])}"]
        for (_, before), (seq, units) in zip(line, line[1:]):
            path += [f"{x(seq)},{y(before)}", f"{x(seq)},{y(units)}"]
        path.append(f"{x(last)},{y(line[-1][1])}")
        out.append(f'<polyline class="hypothesis" data-label="{html.escape(label)}" fill="none" stroke="{colour}" '
                   f'stroke-width="2" points="{" ".join(path)}"/>')
        legend_y = TOP + 4 + number * 18
        out.append(f'<line x1="{WIDTH - RIGHT + 14}" y1="{legend_y}" x2="{WIDTH - RIGHT + 34}" y2="{legend_y}" '
                   f'stroke="{colour}" stroke-width="3"/>')
        out.append(f'<text x="{WIDTH - RIGHT + 40}" y="{legend_y}" dominant-baseline="middle">'
                   f"{html.escape(label)}: {line[-1][1]}</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
