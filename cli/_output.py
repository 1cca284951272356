"""Rendering rows and results: human tables (tabulate), ``--json`` and ``--csv``."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
from typing import Any, Iterable, Mapping, Sequence

import click
from tabulate import tabulate


def _plain(value: Any) -> Any:
    """SQL values JSON cannot carry: blobs as ``{"$base64": …}``, non-finite floats as strings."""
    if isinstance(value, bytes):
        return {"$base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def dumps(value: Any) -> str:
    """Compact, valid JSON for machine output (UTF-8, no ASCII escaping)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def emit_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None, fmt: str) -> None:
    """Print ``rows`` as a table (default), a JSON array (``json``) or CSV with a header (``csv``)."""
    names = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    if fmt == "json":
        click.echo(dumps([{k: _plain(v) for k, v in dict(row).items()} for row in rows]))
    elif fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(names)
        for row in rows:
            writer.writerow(["" if row[n] is None else row[n].hex() if isinstance(row[n], bytes) else row[n]
                             for n in names])
        click.echo(buffer.getvalue(), nl=False)
    else:
        if not rows:
            click.echo("(no rows)")
            return
        table = [["" if row[n] is None else row[n] for n in names] for row in rows]
        click.echo(tabulate(table, headers=names, tablefmt="simple", disable_numparse=True))


def emit_result(result: Mapping[str, Any], as_json: bool, summary: Iterable[str]) -> None:
    """Print an operation's result: its JSON with ``--json``, else the summary lines."""
    if as_json:
        click.echo(dumps(result))
    else:
        for line in summary:
            click.echo(line)
