"""Rendering rows and results: the sqlite-utils family of output formats.

``table`` (tabulate, for people), ``json`` (one array), ``nl`` (newline-delimited
JSON, one object per line), ``csv`` and ``tsv`` (a header row, then values
verbatim: a spreadsheet must import them as text, since a reason may start
with ``=``). Every format but ``table`` streams: rows are written as they come
from the cursor, never collected first.
"""

from __future__ import annotations

import base64
import unicodedata
import csv
import io
import itertools
import json
import math
import re
from typing import Any, Iterable, Mapping, Sequence

import click


class OutputError(Exception):
    """Standard output refused the result (closed pipe, full disk); carries the ``OSError``."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(cause.strerror or str(cause))
        self.cause = cause
        #: What the command had done, told after the failure (None: what a ledger command tells).
        self.done: str | None = None


def echo(text: str = "", nl: bool = True) -> None:
    """``click.echo`` to standard output; an ``OSError`` there becomes :class:`OutputError`, so it
    is never mistaken for a refusal of the command's input."""
    try:
        click.echo(text, nl=nl)
    except OSError as exc:
        raise OutputError(exc) from exc


def _plain(value: Any) -> Any:
    """SQL values JSON cannot carry: blobs as ``{"$base64": …}``, non-finite floats as strings."""
    if isinstance(value, bytes):
        return {"$base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


#: Characters some line reader takes for a line break that ``json.dumps`` leaves raw (it already
#: escapes every control character below U+0020, ``\n``, ``\r``, ``\x0b``, ``\x0c``, ``\x1c``–``\x1e``
#: among them): NEL and the Unicode line and paragraph separators, which ``str.splitlines`` and
#: JavaScript split on. JSON's ``\uXXXX`` form keeps the value identical.
LINE_BREAKS_LEFT_RAW = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_LINE_BREAK = re.compile("[\x85\u2028\u2029]")


def dumps(value: Any) -> str:
    """Compact, valid JSON for machine output (UTF-8, no ASCII escaping) that is always one line.

    Every character any line reader treats as a line break is escaped (``\\uXXXX``),
    so ``text.splitlines()`` of N outputs gives exactly N lines that parse back to the
    same values.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # outside strings JSON has no such characters, so replacing them everywhere is safe
    return _LINE_BREAK.sub(lambda m: LINE_BREAKS_LEFT_RAW[m.group()], text)


def unique_names(columns: Sequence[str]) -> list[str]:
    """Column names made unique: a repeated ``seq`` becomes ``seq_2``, ``seq_3``, … so no value is lost."""
    seen: set[str] = set()
    names = []
    for name in columns:
        candidate, n = name, 1
        while candidate in seen:
            n += 1
            candidate = f"{name}_{n}"
        seen.add(candidate)
        names.append(candidate)
    return names


#: Output formats of the tabular commands, in the order their options are listed.
FORMATS = ("table", "json", "nl", "csv", "tsv")


def _cell(value: Any) -> Any:
    return "" if value is None else value.hex() if isinstance(value, bytes) else value


def emit_rows(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None, fmt: str) -> None:
    """Print ``rows`` in format ``fmt`` (one of :data:`FORMATS`). ``columns`` None takes the
    first row's keys. Only ``table`` collects the rows (to size its columns)."""
    iterator = iter(rows)
    first = next(iterator, None)
    names = list(columns) if columns is not None else (list(first) if first is not None else [])
    stream = itertools.chain([first], iterator) if first is not None else iter(())
    if fmt == "json":
        echo("[", nl=False)
        for number, row in enumerate(stream):
            echo(("," if number else "") + dumps({k: _plain(v) for k, v in dict(row).items()}), nl=False)
        echo("]")
    elif fmt == "nl":
        for row in stream:
            echo(dumps({k: _plain(v) for k, v in dict(row).items()}))
    elif fmt in ("csv", "tsv"):
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n", delimiter="," if fmt == "csv" else "\t")
        writer.writerow(names)
        for row in stream:
            writer.writerow([_cell(row[n]) for n in names])
            if buffer.tell() > 65_536:
                echo(buffer.getvalue(), nl=False)
                buffer.seek(0)
                buffer.truncate()
        echo(buffer.getvalue(), nl=False)
    else:
        table = [["" if row[n] is None else row[n] for n in names] for row in stream]
        if not table:
            echo("(no rows)")
            return
        from tabulate import tabulate  # imported on first use: it costs about 30 ms at start-up

        echo(tabulate(table, headers=names, tablefmt="simple", disable_numparse=True))


def one_line(text: Any) -> str:
    """``text`` with control characters escaped (a newline in a path shows as ``\\n``), so a
    message or summary line never splits or moves the cursor."""
    text = str(text)
    if not any(unicodedata.category(ch) == "Cc" for ch in text):
        return text
    return "".join(ch.encode("unicode_escape").decode("ascii") if unicodedata.category(ch) == "Cc" else ch
                   for ch in text)


def emit_result(result: Mapping[str, Any], as_json: bool, summary: Iterable[str]) -> None:
    """Print an operation's result: its JSON with ``--json``, else the summary lines."""
    if as_json:
        echo(dumps(result))
    else:
        for line in summary:
            echo(one_line(line))
