"""Re-checking a stored tool result against the reference router (``ledger verify`` and ``import``;
docs/evidence.md).

A stored result was accepted only if the reference router returned exactly it. A later replay
cannot always recompute it (the package's inputs may have changed since), but it never takes
the stored result on trust:

* every result must be one the router could have returned for its action
  (:func:`self_consistent`): the coverage equal to the arguments, every line number within
  the span, unique and in order, every path the one asked for (or matching the glob), each
  line's ``sha256`` that of its bytes, each row satisfying ``where`` and holding exactly the
  ``columns`` asked for, counts within the limits;
* every file the result read is read again now, once, from one open descriptor (as the router
  reads). When its sha256 now is the one the result records, the file is unchanged and must
  yield exactly the stored items (``find_text``: the whole file is scanned again); when the
  package's input identity is still the one the reply carries, nothing changed, so a file
  that hashes differently from what the result records, or that the router cannot read (missing,
  a link, not a regular file, over the size cap), is a forged record, and a search must list
  exactly the files the glob matches (the identity is computed again before any of these is
  called a forgery: an input changed while verify runs changes it too);
* otherwise a file that cannot be read now (removed, replaced by a link, unreadable) is a changed
  input, never ``INTEGRITY_ERROR``: the history is not suspect because the disk changed.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
from typing import Any, Callable, Mapping

from ..ground import errors as E
from ..ground.canonical import canonical_sha256
from ..ground.errors import LedgerError, shown
from .reference import (DATA_DIR, DEFAULT_ROWS, INT64_MAX, INT64_MIN, JSON_INT_MAX, SOURCES_DIR, Router,
                        confined, differs_only_where_computed, find_text_args, lookup_args, marked_integer, matching_lines,
                        span_args)
from .files import may_match_below

Note = Callable[[str, str], None]
#: ``unchecked_inputs``' why for a database whose lookup differs from this SQLite's only in values
#: SQLite computes as it reads (``VIRTUAL`` generated columns; :func:`differs_only_where_computed`).
COMPUTED_OTHERWISE = "computed otherwise by this SQLite"
_RESULT_KEYS = {"operation_id", "tool", "status", "items", "coverage", "truncated", "sources"}


class Inputs:
    """Whether the package's inputs are still those the reply was computed from: ``same`` as first
    found, asked again through ``confirm`` (a fresh input identity) before a difference is called a
    forgery, since a file edited while verify runs changes them too (then: changed since, a note)."""

    def __init__(self, same: bool, confirm: Callable[[], bool] | None = None) -> None:
        self.same, self._confirm = same, confirm

    def unchanged(self) -> bool:
        if self.same and self._confirm is not None and not self._confirm():
            self.same = False
        return self.same


def recheck(router: Router, action: Mapping[str, Any], stored: Mapping[str, Any], same_inputs: "bool | Inputs",
            note: Note | None = None) -> Any:
    """What the replay compares ``stored`` with: the router's fresh result wherever a file it read
    is unchanged, else ``stored`` itself once it passed the checks above (``INTEGRITY_ERROR``).
    ``note(path, "changed" | "removed" | "unreadable" | COMPUTED_OTHERWISE)`` hears of each file that could
    not be compared: changed since, gone or unreadable now, or a database whose lookup differs from this SQLite's
    only in values SQLite computes as it reads (docs/evidence.md)."""
    note = note or _ignore
    inputs = same_inputs if isinstance(same_inputs, Inputs) else Inputs(same_inputs)
    self_consistent(action, stored)
    if action["tool"] == "source.find_text":
        _recheck_search(router, action, stored, inputs, note)
        return stored
    path, digest = stored["sources"][0]
    data = _read_now(router, action, path, DATA_DIR if action["tool"] == "database.lookup" else SOURCES_DIR,
                     inputs, note)
    if data is None:
        return stored
    now = hashlib.sha256(data).hexdigest()
    if now != digest:
        if inputs.unchanged():
            raise _forged_digest(action, path, digest, now)
        note(path, "changed")
        return stored  # the file changed since: the checks above are all that can be made
    try:
        fresh: dict[str, Any] | LedgerError = _recompute(router, action, path, data)
    except LedgerError as exc:  # the router refuses it now
        fresh = exc
    if fresh == stored:
        return fresh
    if action["tool"] == "database.lookup":
        try:
            older = _recompute(router, action, path, data, generated=False)
        except LedgerError:
            older = None
        if older == stored:  # stored before generated columns were offered
            return older
        if differs_only_where_computed(action.get("args"), stored, data):
            note(path, COMPUTED_OTHERWISE)  # values this SQLite computes as it reads, not the file's
            return stored
    if isinstance(fresh, LedgerError):
        raise fresh
    keys = sorted(k for k in set(fresh) | set(stored) if fresh.get(k) != stored.get(k))
    raise _bad(action.get("operation_id"), f"it differs from what the unchanged file {path} yields "
               f"(in: {', '.join(keys)})", path=path)


def same_digests(recorded: dict[tuple[str, str], tuple[str, Any]], identity: Any, actions: list[Any],
                 results: list[Any]) -> None:
    """``INTEGRITY_ERROR`` when a result records, for a file, another sha256 than an earlier result
    (of this batch or any before it) computed from inputs of the same input identity: one identity
    is one set of files, so a made-up hash is found whenever the history holds a genuine one, even
    after the inputs changed since. ``recorded`` keeps ``{(identity, path): (sha256, operation)}``."""
    for action, result in zip(actions, results):
        sources = result.get("sources") if isinstance(result, Mapping) else None
        for entry in sources if isinstance(sources, list) else ():
            if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, str) for x in entry)):
                continue  # the shape checks of self_consistent name it
            path, digest = entry
            op = action.get("operation_id") if isinstance(action, Mapping) else None
            first = recorded.setdefault((str(identity), path), (digest, op))
            if first[0] != digest:
                raise _bad(op, f"it records sha256 {digest[:12]}… for {path}, but operation {shown(str(first[1]), 64)} "
                           f"read {path} from the same inputs (input identity {str(identity)[:12]}…) and recorded "
                           f"{first[0][:12]}…", path=path)


def _ignore(path: str, why: str) -> None:
    """The default ``note``: nobody listens."""


def _recompute(router: Router, action: Mapping[str, Any], path: str, data: bytes,
               generated: bool = True) -> dict[str, Any]:
    """The router's result for ``action`` from ``data``; ``INTEGRITY_ERROR`` when it refuses it."""
    try:
        if generated:
            return router.result(action, {path: data})
        found = router.lookup(action.get("args"), {path: data}, generated=False)
        return {"operation_id": action.get("operation_id"), "tool": action["tool"], "status": "ok", **found}
    except LedgerError as exc:
        raise _bad(action.get("operation_id"), f"the reference router refuses it although the file it read, "
                   f"{path}, is unchanged: {exc.message}", path=path) from None


def _read_now(router: Router, action: Mapping[str, Any], path: str, top: str, inputs: Inputs,
              note: Note) -> bytes | None:
    """The file's bytes now, or None when it cannot be read (a changed input, not a fault), noted as
    ``removed`` (no such file now) or ``unreadable``. With the inputs unchanged, a file that is missing,
    a link, not a regular file or over the size cap now was so when the result was computed, and the
    router could not have read it: ``INTEGRITY_ERROR``. A read the system refuses (permission, I/O)
    says nothing of the inputs and stays a note."""
    try:
        return router.read_file(path, top)
    except LedgerError as exc:
        if not exc.details.get("unreadable"):
            raise
        if exc.details.get("errno") is None and inputs.unchanged():
            raise _bad(action.get("operation_id"), f"it read {path}, but the package's inputs are those the reply "
                       f"was computed from and the router cannot read that file: {exc.message}", path=path) from None
        note(path, "removed" if exc.details.get("missing") else "unreadable")
        return None


def _recheck_search(router: Router, action: Mapping[str, Any], stored: Mapping[str, Any], inputs: Inputs,
                    note: Note) -> None:
    op = action.get("operation_id")
    needle = action["args"]["text"].encode("utf-8")
    files = stored["coverage"]["files"]
    by_file: dict[str, list[Any]] = {path: [] for path in files}
    for item in stored["items"]:
        by_file[item["path"]].append(item)
    for position, (path, digest) in enumerate(stored["sources"]):
        data = _read_now(router, action, path, SOURCES_DIR, inputs, note)
        if data is None:
            continue
        now = hashlib.sha256(data).hexdigest()
        if now != digest:
            if inputs.unchanged():
                raise _forged_digest(action, path, digest, now)
            note(path, "changed")
            continue
        found, kept = matching_lines(path, data, needle), by_file[path]
        cut = stored["truncated"] and position == len(files) - 1  # the search stopped inside this file
        if (found[:len(kept)] != kept) or (len(found) <= len(kept) if cut else len(found) != len(kept)):
            raise _bad(op, f"its lines of {path} are not those the unchanged file holds: the file has "
                       f"{len(found)} matching line(s), the result {len(kept)}", path=path)
    _check_listing(router, action, stored, inputs, note)


def _check_listing(router: Router, action: Mapping[str, Any], stored: Mapping[str, Any], inputs: Inputs,
                   note: Note) -> None:
    """With the inputs unchanged, the search saw the files the glob matches now, in order (up to
    where it stopped). With them changed, a file the glob matches now, that the search would have
    read (it was not there then) and that holds the searched text, is noted as added: the search's
    lines cannot be recomputed with it (one without the text, or one the router cannot read,
    leaves its lines as they were). So is a file it skipped (a pipe, a link, one too large or this
    user's to read then) that it would read now and that holds the text."""
    op, coverage = action.get("operation_id"), stored["coverage"]
    try:
        listing = router._source_files(coverage["path_glob"])
    except LedgerError as exc:
        if exc.details.get("unreadable") or not inputs.unchanged():  # changed since: nothing to compare with
            return
        raise _bad(op, f"the reference router refuses it over unchanged inputs: {exc.message}") from None
    skipped = [entry["path"] for entry in coverage.get("skipped", [])]
    seen = set(coverage["files"]) | set(skipped)
    if not _walked(listing, seen, stored["truncated"]) and inputs.unchanged():
        listing = router._source_files(coverage["path_glob"], folder_links=False)  # as earlier versions listed
        if not _walked(listing, seen, stored["truncated"]):
            raise _bad(op, "the files it lists are not those its glob matches in the unchanged package")
    last = walk_order(coverage["files"][-1]) if stored["truncated"] and coverage["files"] else None
    needle = coverage["text"].encode("utf-8")
    skipped_set = set(skipped)
    for path in listing:
        if (path not in seen or path in skipped_set) and (last is None or walk_order(path) < last):
            try:
                found = matching_lines(path, router.read_file(path, SOURCES_DIR), needle)
            except LedgerError:
                continue
            if found:  # a file it skipped (a pipe, a link, too large then) that it would read now counts too
                note(path, "added since a search that matches it" if path not in skipped_set
                      else "readable now, and matching, where the search skipped it")


def _walked(listing: list[str], seen: set[str], truncated: bool) -> bool:
    """Whether a search that listed (scanned or skipped) ``seen`` walked ``listing`` in order, all of it
    unless it was ``truncated``."""
    visited = [path for path in listing if path in seen]
    return visited == listing[:len(visited)] and len(visited) == len(seen) and (
        truncated or len(visited) == len(listing))


def self_consistent(action: Mapping[str, Any], stored: Mapping[str, Any]) -> None:
    """``INTEGRITY_ERROR`` unless ``stored`` could be a reference result of ``action``."""
    op, tool, args = action.get("operation_id"), action.get("tool"), action.get("args")
    try:
        expected_keys = _RESULT_KEYS | ({"schema"} if tool == "database.lookup" else set())
        if (stored.get("operation_id") != op or stored.get("tool") != tool or not isinstance(args, dict)
                or set(stored) != expected_keys or stored.get("status") != "ok"):
            raise _bad(op, "its tool, operation id or fields differ from what the router returns for the action")
        if tool == "source.read_context":
            _check_span(op, args, stored)
        elif tool == "source.find_text":
            _check_search(op, args, stored)
        elif tool == "database.lookup":
            _check_rows(op, args, stored)
        else:
            raise _bad(op, f"unknown tool {shown(tool, 60)!r}")
    except LedgerError as exc:
        if exc.code == E.INTEGRITY_ERROR:
            raise
        raise _bad(op, f"the reference router refuses its action: {exc.message}") from None


def _check_line(op: Any, item: Mapping[str, Any], path: str) -> None:
    text = item.get("text")
    if (item.get("kind") != "source_line" or item.get("path") != path or not isinstance(text, str)
            or "\n" in text):  # a line ends at a newline: its text never holds one
        raise _bad(op, f"item {shown(item, 80)} is not a line of {path}")
    raw = _line_bytes(text)
    if raw is not None and item.get("sha256") != hashlib.sha256(raw).hexdigest():
        raise _bad(op, f"line {item.get('line')} of {path}: its sha256 is not that of its text")


def _line_bytes(text: str) -> bytes | None:
    """The bytes a line's text stands for; None only when it holds U+FFFD and a line's bytes
    cannot be told from its text (the file's bytes were not UTF-8): then the unchanged file decides."""
    if "\ufffd" not in text:
        return text.encode("utf-8")
    return None


def _check_span(op: Any, args: Mapping[str, Any], stored: Mapping[str, Any]) -> None:
    path, start, end = span_args(args)
    coverage = stored["coverage"]
    lines = coverage.get("file_lines") if isinstance(coverage, dict) else None
    if (coverage != {"path": path, "start_line": start, "end_line": end, "file_lines": lines}
            or type(lines) is not int or lines < 0):
        raise _bad(op, f"its coverage {shown(coverage, 120)} is not that of the span it asked for")
    numbers = [item.get("line") for item in stored["items"]]
    if numbers != list(range(start, min(end, lines) + 1)):
        raise _bad(op, f"its line numbers are not lines {start}..{min(end, lines)} of {path}, each once")
    for item in stored["items"]:
        _check_line(op, item, path)
    _check_sources(op, stored, [path])
    if stored["truncated"] is not False:
        raise _bad(op, "a span is never truncated")


def _check_search(op: Any, args: Mapping[str, Any], stored: Mapping[str, Any]) -> None:
    text, glob, limit = find_text_args(args)
    coverage, files = stored["coverage"], stored["coverage"].get("files")
    skipped = coverage.get("skipped")
    expected = {"text": text, "path_glob": glob, "max_results": limit, "files": files}
    if skipped is not None:
        expected["skipped"] = skipped
    if coverage != expected or not isinstance(files, list) or (skipped is not None and not (
            isinstance(skipped, list) and skipped and all(isinstance(s, dict) and set(s) == {"path", "reason"}
                                                        and isinstance(s["reason"], str) for s in skipped))):
        raise _bad(op, f"its coverage {shown(coverage, 120)} is not that of the search it asked for")
    listed = files + [s["path"] for s in skipped or []]
    below = {s["path"] for s in skipped or []}  # a link to a folder is listed where the glob may reach below it
    for path in listed:
        if not fnmatch.fnmatchcase(confined(path, SOURCES_DIR), glob) and not (path in below
                                                                                and may_match_below(glob, path)):
            raise _bad(op, f"{path} does not match its path_glob {glob}")
    if len(set(listed)) != len(listed):
        raise _bad(op, "it lists a file twice")
    for kind, paths in (("files", files), ("skipped files", [s["path"] for s in skipped or []])):
        if paths != sorted(paths, key=walk_order):
            raise _bad(op, f"its {kind} are not in the order a search walks sources/ (each folder's files by "
                       "name, then its folders by name)")
    for entry in skipped or []:  # the router's refusal of that file, which names it first
        if not entry["reason"].startswith(f"{entry['path']!r} "):
            raise _bad(op, f"the reason it gives for skipping {entry['path']} is not the router's")
    _check_sources(op, stored, files)
    order = {path: position for position, path in enumerate(files)}
    keys = []
    for item in stored["items"]:
        _check_line(op, item, item.get("path") if item.get("path") in order else "a file it read")
        if text not in item["text"]:
            raise _bad(op, f"line {item.get('line')} of {item.get('path')} does not contain the searched text")
        keys.append((order[item["path"]], item["line"]))
    if keys != sorted(set(keys)):
        raise _bad(op, "its lines are not in file order, each once")
    _check_count(op, stored, limit)


def walk_order(path: str) -> list[tuple[int, str]]:
    """The sort key of a path in the order a search lists files: a folder's own files (by name)
    before its sub-folders (by name), depth first."""
    *folders, name = path.split("/")
    return [(1, folder) for folder in folders] + [(0, name)]


def _check_count(op: Any, stored: Mapping[str, Any], limit: int) -> None:
    count = len(stored["items"])
    if count > limit or not isinstance(stored["truncated"], bool) or (stored["truncated"] and count != limit):
        raise _bad(op, f"it holds {count} item(s) for a limit of {limit} (truncated: {stored['truncated']})")


def _check_sources(op: Any, stored: Mapping[str, Any], paths: list[str]) -> None:
    sources = stored["sources"]
    if [entry[0] if isinstance(entry, list) and entry else None for entry in sources] != paths:
        raise _bad(op, f"its sources {shown(sources, 120)} are not the files it read ({', '.join(paths)})")


def _check_rows(op: Any, args: Mapping[str, Any], stored: Mapping[str, Any]) -> None:
    database, table, where, limit = lookup_args(args)
    schema, coverage = stored["schema"], stored["coverage"]
    _check_sources(op, stored, [database])
    described = schema.get("columns") if isinstance(schema, dict) else None
    names = [c.get("name") for c in described] if isinstance(described, list) and all(
        isinstance(c, dict) for c in described) else None
    if (names is None or schema != {"database": database, "database_sha256": stored["sources"][0][1],
                                    "table": table, "columns": described} or len(set(names)) != len(names)
            or not all(_is_column(c) for c in described)):
        raise _bad(op, f"its schema {shown(schema, 120)} is not that of {database} table {shown(table, 80)}")
    columns = args.get("columns", names)
    if coverage != {"database": database, "table": table, "where": args.get("where", {}), "columns": columns,
                    "limit": args.get("limit", DEFAULT_ROWS)} or not set(columns) | set(where) <= set(names):
        raise _bad(op, f"its coverage {shown(coverage, 120)} is not that of the lookup it asked for")
    rowids = []
    for item in stored["items"]:
        pointer, values = str(item.get("pointer")), item.get("values")
        rowid = pointer[len(table) + 2:] if pointer.startswith(f"/{table}/") else ""
        if (item.get("kind") != "db_row" or item.get("database") != database or item.get("table") != table
                or not _is_integer_text(rowid) or not isinstance(values, dict) or set(values) != set(columns)
                or item.get("sha256") != canonical_sha256(values)):
            raise _bad(op, f"row {shown(pointer, 80)} is not a row of {database} table {shown(table, 80)} with the "
                       "columns asked for")
        for column, value in values.items():
            if not is_column_value(value):
                raise _bad(op, f"row {shown(pointer, 80)} has {column} = {shown(value, 40)}, which is no value the router "
                           "writes (null, text, an integer within ±(2^53-1), or {\"real\"|\"integer\"|\"base64\": …})")
        for column, wanted in where.items():
            if column in values and not could_equal(values[column], wanted):
                raise _bad(op, f"row {shown(pointer, 80)} has {column} = {shown(str(values[column]), 40)}, which does not "
                           f"satisfy where {column} = {shown(wanted, 40)}")
        rowids.append(int(rowid))
    if rowids != sorted(set(rowids)):
        raise _bad(op, "its rows are not in row id order, each once")
    _check_count(op, stored, limit)


def _is_column(column: Mapping[str, Any]) -> bool:
    """A column as the router describes one: ``{"name", "type": text, "notnull": bool, "pk": int >= 0}``."""
    return (set(column) == {"name", "type", "notnull", "pk"} and isinstance(column["name"], str)
            and isinstance(column["type"], str) and type(column["notnull"]) is bool
            and type(column["pk"]) is int and column["pk"] >= 0)


def is_column_value(value: Any) -> bool:
    """Whether ``value`` is a column value as :func:`~ledger.router.reference.json_value` writes one: null,
    text, an integer within ±(2^53−1), ``{"real": repr}`` of a number (never NaN, which SQLite stores as
    null), ``{"integer": digits}`` beyond ±(2^53−1) within 64 bits, ``{"base64": …}`` in standard form."""
    if value is None or isinstance(value, str):
        return True
    if type(value) is int:
        return -JSON_INT_MAX <= value <= JSON_INT_MAX
    if not isinstance(value, dict) or len(value) != 1 or not isinstance(next(iter(value.values())), str):
        return False
    (form, text), = value.items()
    if form == "real":
        try:
            number = float(text)
        except ValueError:
            return False
        return number == number and repr(number) == text
    if form == "integer":
        number = marked_integer(value)
        return number is not None and JSON_INT_MAX < abs(number) and INT64_MIN <= number <= INT64_MAX
    if form == "base64":
        try:
            return base64.b64encode(base64.b64decode(text, validate=True)).decode("ascii") == text
        except ValueError:
            return False
    return False


def _is_integer_text(text: str) -> bool:
    """A row id as the router writes it: an integer of SQLite's range in its plain decimal form."""
    digits = text[1:] if text.startswith("-") else text
    return (0 < len(digits) <= 19 and digits.isascii() and digits.isdigit() and text == str(int(text))
            and INT64_MIN <= int(text) <= INT64_MAX)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def could_equal(value: Any, wanted: Any) -> bool:
    """Whether a row's ``value`` (as JSON) can be what ``column IS wanted`` matched, given SQLite's
    comparison affinities: numbers compare as numbers (text that reads as a number counts), a
    number bound against a text column compares as its decimal text, NULL only matches null. Text
    compares under any of SQLite's built-in collations, since a result does not record the column's:
    ``BINARY`` (the same text), ``NOCASE`` (the same but for ASCII letters' case) or ``RTRIM`` (the
    same but for trailing spaces)."""
    if wanted is None or value is None:
        return wanted is None and value is None
    left, right = _number(value), _number(wanted)
    if left is not None and right is not None and left == right:
        return True
    if isinstance(value, str):
        text = wanted if isinstance(wanted, str) else str(wanted)
        return (value == text or value.translate(_ASCII_LOWER) == text.translate(_ASCII_LOWER)
                or value.rstrip(" ") == text.rstrip(" "))
    return False


def _number(value: Any) -> int | float | None:
    if type(value) is int:
        return value
    if isinstance(value, dict):
        if set(value) == {"real"}:
            try:
                return float(value["real"])
            except (TypeError, ValueError):
                return None
        return marked_integer(value)
    if isinstance(value, str):
        text = value.strip()
        if len(text) <= 4000:  # int() refuses longer decimal text; float() reads any length
            try:
                return int(text)
            except ValueError:
                pass
        try:
            number = float(text)
        except ValueError:
            return None
        return number if number == number and text.lower() not in ("inf", "-inf", "infinity", "-infinity") else None
    return None


def _forged_digest(action: Mapping[str, Any], path: str, recorded: str, now: str) -> LedgerError:
    return _bad(action.get("operation_id"), f"it records sha256 {recorded[:12]}… for {path}, but the package's "
                "inputs are those the reply was computed from and the file hashes to "
                f"{now[:12]}…", path=path)


def _bad(op: Any, message: str, **details: Any) -> LedgerError:
    return LedgerError(E.INTEGRITY_ERROR, f"stored result of operation {shown(op, 64)}: {message}", **details)

