"""Re-checking a stored tool result against the reference router (``ledger verify`` and ``import``).

A stored result was accepted only if the reference router returned exactly it. A later replay
cannot always recompute it (the package's inputs may have changed since), but it never takes
the stored result on trust:

* the reference router refusing the stored action while the package's inputs are unchanged
  is ``INTEGRITY_ERROR``; with unchanged inputs (the current input identity equals the one the
  reply carries) the result is always recomputed and compared;
* with changed inputs the stored result must be self-consistent — the action and every path
  confined to ``sources/``/``data/``, a line's ``sha256`` that of its text (unless the text
  holds U+FFFD, the stand-in for bytes that are not UTF-8), a row's ``sha256`` that of its
  values, items matching the action — and every file whose recorded hash still matches the
  file on disk must yield the very items stored from it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

from ..ground import errors as E
from ..ground.canonical import canonical_sha256
from ..ground.errors import LedgerError
from .reference import DATA_DIR, SOURCES_DIR, Router, confined, line_item, split_lines

_POINTER = re.compile(r"/(.+)/(-?[0-9]+)")


def recheck(router: Router, action: Mapping[str, Any], stored: Mapping[str, Any], same_inputs: bool) -> Any:
    """What the replay compares ``stored`` with: the router's fresh result when it can be
    recomputed, else ``stored`` itself once it passed the checks above (``INTEGRITY_ERROR``)."""
    op = action.get("operation_id")
    try:
        fresh = router.result(action)
    except LedgerError as exc:
        if same_inputs:
            raise _bad(op, f"the reference router refuses it over unchanged inputs: {exc.message}") from None
        fresh = None
    if same_inputs:
        return fresh
    self_consistent(action, stored)
    if fresh is not None and fresh.get("sources") == stored.get("sources"):
        return fresh
    unchanged = _unchanged_sources(router, stored)
    if unchanged and action.get("tool") != "source.find_text":
        if fresh is None:
            raise _bad(op, "the reference router refuses it although the file it read is unchanged")
        return fresh  # one file, unchanged: the recomputation must equal the stored result
    for item in stored["items"]:
        path = item.get("path")
        if path in unchanged:
            lines = unchanged[path]
            number = item.get("line")
            if (type(number) is not int or not 1 <= number <= len(lines)
                    or item != line_item(path, number, lines[number - 1])):
                raise _bad(op, f"line {number} of {path} differs from the unchanged file")
    return stored


def self_consistent(action: Mapping[str, Any], stored: Mapping[str, Any]) -> None:
    """``INTEGRITY_ERROR`` unless ``stored`` could be a reference result of ``action``."""
    op, tool, args = action.get("operation_id"), action.get("tool"), action.get("args")
    try:
        if stored.get("operation_id") != op or stored.get("tool") != tool or not isinstance(args, dict):
            raise _bad(op, "its tool or operation id differs from the action")
        for path, _digest in stored.get("sources", []):
            confined(path, DATA_DIR if tool == "database.lookup" else SOURCES_DIR)
        read = {path for path, _digest in stored.get("sources", [])}
        if tool == "source.read_context":
            _check_lines(op, stored, {confined(args.get("path"), SOURCES_DIR)} & read)
        elif tool == "source.find_text":
            if not str(args.get("path_glob", SOURCES_DIR + "/*")).startswith(SOURCES_DIR + "/"):
                raise _bad(op, "its path_glob leaves sources/")
            _check_lines(op, stored, read, needle=args.get("text"))
        elif tool == "database.lookup":
            _check_rows(op, stored, confined(args.get("database"), DATA_DIR), args.get("table"), read)
        else:
            raise _bad(op, f"unknown tool {str(tool)[:60]!r}")
    except LedgerError as exc:
        if exc.code == E.INTEGRITY_ERROR:
            raise
        raise _bad(op, exc.message) from None


def _check_lines(op: Any, stored: Mapping[str, Any], paths: set[str], needle: Any = None) -> None:
    for item in stored["items"]:
        text = item.get("text")
        if item.get("kind") != "source_line" or item.get("path") not in paths or not isinstance(text, str):
            raise _bad(op, f"item {str(item)[:80]} is not a line of a file it read")
        if "\ufffd" not in text and item.get("sha256") != hashlib.sha256(text.encode("utf-8")).hexdigest():
            raise _bad(op, f"line {item.get('line')} of {item.get('path')}: its sha256 is not that of its text")
        if needle is not None and (not isinstance(needle, str) or needle not in text):
            raise _bad(op, f"line {item.get('line')} of {item.get('path')} does not contain the searched text")


def _check_rows(op: Any, stored: Mapping[str, Any], database: str, table: Any, read: set[str]) -> None:
    if read != {database}:
        raise _bad(op, f"it names sources other than {database}")
    for item in stored["items"]:
        pointer = _POINTER.fullmatch(str(item.get("pointer")))
        if (item.get("kind") != "db_row" or item.get("database") != database or item.get("table") != table
                or pointer is None or pointer.group(1) != table
                or item.get("sha256") != canonical_sha256(item.get("values"))):
            raise _bad(op, f"row {str(item.get('pointer'))[:80]} is not a row of {database}")


def _unchanged_sources(router: Router, stored: Mapping[str, Any]) -> dict[str, list[bytes]]:
    """``{path: lines}`` of the files whose recorded sha256 still matches the file on disk."""
    found: dict[str, list[bytes]] = {}
    for path, digest in stored.get("sources", []):
        top = DATA_DIR if path.startswith(DATA_DIR + "/") else SOURCES_DIR
        try:
            _relative, real = router._resolve(path, top)
            data = real.read_bytes()
        except (LedgerError, OSError):
            continue  # gone or unreadable: changed inputs
        if hashlib.sha256(data).hexdigest() == digest:
            found[path] = split_lines(data) if top == SOURCES_DIR else []
    return found


def _bad(op: Any, message: str) -> LedgerError:
    return LedgerError(E.INTEGRITY_ERROR, f"stored result of operation {str(op)[:64]}: {message}")

