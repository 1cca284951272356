"""Rendering rows and results: human tables (tabulate), ``--json`` and ``--csv``."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import re
from typing import Any, Iterable, Mapping, Sequence

import click
from tabulate import tabulate


class OutputError(Exception):
    """Standard output refused the result (closed pipe, full disk); carries the ``OSError``."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(cause.strerror or str(cause))
        self.cause = cause


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


def emit_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None, fmt: str) -> None:
    """Print ``rows`` as a table (default), a JSON array (``json``) or CSV with a header (``csv``)."""
    names = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    if fmt == "json":
        echo(dumps([{k: _plain(v) for k, v in dict(row).items()} for row in rows]))
    elif fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(names)
        for row in rows:
            writer.writerow(["" if row[n] is None else row[n].hex() if isinstance(row[n], bytes) else row[n]
                             for n in names])
        echo(buffer.getvalue(), nl=False)
    else:
        if not rows:
            echo("(no rows)")
            return
        table = [["" if row[n] is None else row[n] for n in names] for row in rows]
        echo(tabulate(table, headers=names, tablefmt="simple", disable_numparse=True))


def emit_result(result: Mapping[str, Any], as_json: bool, summary: Iterable[str]) -> None:
    """Print an operation's result: its JSON with ``--json``, else the summary lines."""
    if as_json:
        echo(dumps(result))
    else:
        for line in summary:
            echo(line)
