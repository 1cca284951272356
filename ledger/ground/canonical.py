"""Canonical JSON (RFC 8785 / JCS) and hashing (docs/concepts.md).

Everything the ledger hashes, stores or exports goes through
:func:`canonical_bytes`, which delegates to the maintained ``rfc8785``
package. Values with no canonical form are refused with ``INVALID_JSON``.
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
import re
from typing import Any, Callable, Iterator, Mapping

import rfc8785

from .errors import INVALID_ARGUMENT, INVALID_JSON, LedgerError, describe_value, shortened, shown

#: Largest magnitude an integer may have in canonical JSON: 2**53 - 1.
SAFE_INTEGER_MAX = 2**53 - 1
#: Deepest nesting of arrays and objects accepted in evidence.
JSON_DEPTH_MAX = 64
ZERO_SHA256 = "0" * 64


def canonical_bytes(value: Any, name: str = "$") -> bytes:
    """RFC 8785 canonical UTF-8 bytes of a JSON value (``name`` names it in messages: ``evidence``).

    Raises ``INVALID_JSON`` for NaN, ±Infinity, non-string object keys, lone
    surrogates, integers outside ±(2**53 − 1), unsupported types and nesting
    too deep to encode.

    Values inside the *plain domain* (:func:`_plain`: strings, integers within
    ±(2**53 − 1), booleans, null, lists, and objects whose keys are ASCII) are
    encoded by the standard library's ``json.dumps`` with sorted keys, compact
    separators and ``ensure_ascii=False``, which produces exactly the RFC 8785
    bytes for them: ASCII keys sort the same by UTF-16 code units as by code
    points, integers print the same, and both escape exactly ``"``, ``\\`` and
    U+0000–U+001F in strings. Everything else (floats, non-ASCII keys, anything
    unsure) goes to the maintained ``rfc8785`` package. ``tests/test_canonical.py``
    checks the equality on generated values, RFC 8785's edge cases included.
    """
    try:
        if _plain(value):
            return _dumps(value).encode("utf-8")
    except (UnicodeEncodeError, RecursionError):
        pass  # a lone surrogate or deep nesting: rfc8785 reports it
    return _rfc8785_bytes(value, name)


_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                          check_circular=False).encode


def _plain(value: Any) -> bool:
    """True when ``value`` lies in the domain where ``json.dumps`` output is RFC 8785 canonical.

    Leaves (most of an event) are checked inline, without a call each."""
    kind = type(value)
    if kind is dict:
        try:
            if not all(map(str.isascii, value)):  # every key an ASCII str (a non-str key: TypeError)
                return False
        except TypeError:
            return False
        items: Any = value.values()
    elif kind is list:
        items = value
    else:
        return kind is str or value is None or kind is bool or (kind is int and -SAFE_INTEGER_MAX <= value <= SAFE_INTEGER_MAX)
    for item in items:
        kind = type(item)
        if kind is str or item is None or kind is bool:
            continue
        if kind is int:
            if -SAFE_INTEGER_MAX <= item <= SAFE_INTEGER_MAX:
                continue
            return False
        if kind is not dict and kind is not list or not _plain(item):
            return False
    return True


def _rfc8785_bytes(value: Any, name: str) -> bytes:
    try:
        return rfc8785.dumps(value)
    except rfc8785.IntegerDomainError as exc:
        where = _locate(value, lambda v: type(v) is int and abs(v) > SAFE_INTEGER_MAX, name)
        raise LedgerError(INVALID_JSON, f"integer outside ±(2**53-1) at {where}: {exc}; exact JSON integers "
                          f"stop there, so {_larger_integer_hint(where)}") from None
    except rfc8785.FloatDomainError:
        where = _locate(value, lambda v: isinstance(v, float) and not math.isfinite(v), name)
        raise LedgerError(INVALID_JSON, f"number at {where} has no JSON form (NaN and ±Infinity are not JSON); "
                          "use a finite number, null, or a string such as \"Infinity\"") from None
    except (rfc8785.CanonicalizationError, UnicodeError) as exc:
        # lone surrogates surface as UnicodeEncodeError from the UTF-16 key sort
        where = _locate(value, lambda v: _why_not_json(v) is not None, name)
        why = _why_not_json(_find(value, where, name))  # None when nothing was found: rfc8785's words
        raise LedgerError(INVALID_JSON, f"no canonical JSON form at {where}: {why or exc}") from None
    except RecursionError:
        raise LedgerError(INVALID_JSON, "JSON nested too deeply") from None


def _why_not_json(value: Any) -> str | None:
    """Why ``value`` itself (not what it holds) has no JSON form, or None: text with a lone
    surrogate, an object key that is no text (or holds one), a value of a type JSON does not have."""
    if isinstance(value, str):
        return None if is_utf8_text(value) else "text holding a lone surrogate (no UTF-8 form)"
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str):
                return f"an object key that is not a string ({type(key).__name__} {shown(key, 40)!r})"
            if not is_utf8_text(key):
                return "an object key holding a lone surrogate (no UTF-8 form)"
        return None
    if value is None or isinstance(value, (bool, int, float, list, tuple)):
        return None
    kind = type(value)
    named = f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ not in ("builtins", None) else kind.__name__
    return f"a value of type {named}, which JSON does not have"  # numpy.bool_, not a bare "bool"


def is_utf8_text(text: str) -> bool:
    """True when ``text`` has a UTF-8 form (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _find(value: Any, where: str, root: str) -> Any:
    """The item of ``value`` that :func:`_locate` named ``where`` (``value`` itself when none is)."""
    return next((item for item, path in _walk(value, root) if path == where), value)


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def _member(key: Any) -> str:
    """``.key`` for a plain key, else ``["…"]`` with the key JSON-escaped in ASCII, so that a path
    naming a key of control characters, escapes or lone surrogates prints and encodes as it is."""
    text = str(key)
    return f".{text}" if _PLAIN_KEY.fullmatch(text) else f"[{json.dumps(text)}]"


def _locate(value: Any, bad: Callable[[Any], bool], root: str = "$") -> str:
    """Where the first value for which ``bad`` holds sits inside ``value``: ``$``, ``$.x``, ``$.x[1]``."""
    return next((path for item, path in _walk(value, root) if bad(item)), root)


def _walk(value: Any, root: str) -> Iterator[tuple[Any, str]]:
    """Every item of ``value`` with its path, breadth first (``value`` itself first, as ``root``)."""
    queue: collections.deque[tuple[Any, str]] = collections.deque([(value, root)])
    while queue:
        item, path = queue.popleft()
        yield item, path
        if isinstance(item, dict):
            queue.extend((child, path + _member(key)) for key, child in item.items())
        elif isinstance(item, (list, tuple)):
            queue.extend((child, f"{path}[{index}]") for index, child in enumerate(item))


def canonical_event_bytes(body: Mapping[str, Any]) -> bytes:
    """Canonical bytes of an event body: exactly :func:`canonical_bytes` of it.

    A budget event carries every account of its revision, and an operation changes one of
    them: the members of a leading ``accounts`` list (its key sorting before every other key)
    are encoded once per process and reused while equal, value and type alike, so ``True`` and
    ``1`` stay apart (:data:`_MEMBERS`). Anything else takes :func:`canonical_bytes`.
    """
    accounts = body.get("accounts") if type(body) is dict else None
    if type(accounts) is not list or not accounts or len(body) < 2:
        return canonical_bytes(body)
    rest = dict(body)
    del rest["accounts"]
    try:
        if min(rest) <= "accounts" or not _plain(rest):  # a non-str key: TypeError
            return canonical_bytes(body)
        members = []
        for member in accounts:
            if type(member) is not dict:
                return canonical_bytes(body)
            values = tuple(member.values())
            key = (tuple(member), values, tuple(map(type, values)))
            text = _MEMBERS.get(key)
            if text is None:
                if not _plain(member):
                    return canonical_bytes(body)
                if len(_MEMBERS) >= _MEMBERS_MAX:
                    _MEMBERS.clear()
                text = _MEMBERS[key] = _dumps(member)
            members.append(text)
        return ('{"accounts":[' + ",".join(members) + "]," + _dumps(rest)[1:]).encode("utf-8")
    except (TypeError, UnicodeEncodeError, RecursionError):
        return canonical_bytes(body)  # unhashable or unencodable members: the general path decides


#: Canonical text of event-body list members by (keys, values, value types) (:func:`canonical_event_bytes`).
_MEMBERS: dict[tuple, str] = {}
_MEMBERS_MAX = 4096


def stored_bytes(value: Any) -> bytes:
    """A stored TEXT or BLOB value (or a journal line) as its bytes: bytes as they are, text as
    UTF-8 with lone surrogates kept (``surrogatepass``), so the bytes hashed are those stored."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")


def sha256_hex(data: bytes) -> str:
    """Lowercase hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def canonical_sha256(value: Any) -> str:
    """sha256 of the canonical bytes of ``value`` (raises ``INVALID_JSON``)."""
    return sha256_hex(canonical_bytes(value))


class _Refused(LedgerError):
    """``INVALID_JSON`` for a value the strict parser refuses; :func:`parse_json` replaces it with one
    naming where the value sits. ``describe`` turns a JSON path (``$.temperature``) into the message."""

    def __init__(self, describe: Callable[[str], str]) -> None:
        super().__init__(INVALID_JSON, describe("$"))


def _duplicate_key(pairs: list[tuple[str, Any]]) -> str | None:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    return None


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # some key came twice: name the first one
        key = _duplicate_key(pairs)
        raise _Refused(lambda where: f"duplicate object key {key!r} in the object at {where}")
    return out


def _reject_constant(name: str) -> Any:
    raise _Refused(lambda where: f"{name} at {where} is not JSON")


def _integral_out_of_range(number: float) -> bool:
    # JCS writes such a double as an integer literal (1e16 -> 10000000000000000), which
    # would read back as an integer beyond ±(2**53-1); refuse it so every value round-trips
    return number.is_integer() and SAFE_INTEGER_MAX < abs(number) < 1e21


_SURROGATE_ESCAPE = re.compile(r"\\[uU][dD][89a-fA-F]")


def _int_problem(text: str) -> Callable[[str], str] | None:
    # more than 16 digits is past 2**53 - 1 (JSON has no leading zeros); Python would not even read
    # one of thousands of digits
    if len(text) - text.startswith("-") <= 16 and -SAFE_INTEGER_MAX <= int(text) <= SAFE_INTEGER_MAX:
        return None
    return lambda where: f"integer {shortened(text, 80)} at {where} is outside ±(2**53-1); {_larger_integer_hint(where)}"


#: A path into a lookup's ``where``: the tool arguments' own (``args.where.COLUMN``), or the arguments
#: checked alone (``where.COLUMN``); a key named ``where`` anywhere else (evidence, a payload) is not one.
_WHERE_VALUE = re.compile(r"^(\$\.)?where\.|(^|[.\]])args\.where\.")


def _larger_integer_hint(where: str) -> str:
    """How to send an integer past ±(2**53-1) instead: as a string, or in an evidence lookup's ``where``
    as ``{"integer": "<digits>"}`` (docs/evidence.md), which compares equal to the stored integer."""
    if _WHERE_VALUE.search(where):
        return 'send a larger number in a where value as {"integer": "<decimal digits>"}'
    return LARGER_NUMBER_HINT


#: Where a value outside ±(2**53-1) cannot be sent as it is (the largest integer JSON carries exactly).
LARGER_NUMBER_HINT = ("a field that takes a number (units, costs, limits) takes none larger; in free-form data "
                      "(evidence) send a larger number as a string")


def _float_problem(text: str) -> Callable[[str], str] | None:
    number = float(text)
    if not math.isfinite(number):  # 1e400 reads as infinity, which has no JSON form
        return lambda where: f"number {shortened(text, 80)} at {where} is too large for a double (it would read as infinity)"
    if _integral_out_of_range(number):
        return lambda where: f"number {shortened(text, 80)} at {where} is an integer beyond ±(2**53-1)"
    if number == 0 and any(digit in "123456789" for digit in text.lower().split("e")[0]):
        # 1e-400 would silently become 0 (and then equal -0.0 as evidence)
        return lambda where: f"number {shortened(text, 80)} at {where} is too small for a double: it would read as 0"
    return None


def _parse_int(text: str) -> int:
    problem = _int_problem(text)
    if problem:
        raise _Refused(problem)
    return int(text)


def _parse_float(text: str) -> float:
    problem = _float_problem(text)
    if problem:
        raise _Refused(problem)
    return float(text)


class _Marker:
    """Stands, in a second parse, for the value the strict parser refused (see :func:`_refusal_at`)."""

    def __init__(self, describe: Callable[[str], str]) -> None:
        self.describe = describe


def _refusal_at(text: str | bytes) -> str:
    """The message of the first value the strict parser refuses in ``text``, naming its JSON path:
    a second, lenient parse puts a marker where each refused value sits, in parse order."""
    markers: list[_Marker] = []

    def mark(describe: Callable[[str], str] | None, value: Any) -> Any:
        if describe is None:
            return value
        markers.append(_Marker(describe))
        return markers[-1]

    def pairs_hook(pairs: list[tuple[str, Any]]) -> Any:
        key = _duplicate_key(pairs)
        out = dict(pairs)
        if key is None:
            return out
        marker = mark(lambda where: f"duplicate object key {key!r} in the object at {where}", None)
        marker.value = out
        return marker

    value = json.loads(text, object_pairs_hook=pairs_hook,
                       parse_constant=lambda name: mark(lambda where: f"{name} at {where} is not JSON", None),
                       parse_int=lambda t: mark(_int_problem(t), 0),  # only the problem's place matters
                       parse_float=lambda t: mark(_float_problem(t), float(t)))
    first = markers[0]
    stack: list[tuple[Any, str]] = [(value, "$")]
    while stack:
        item, path = stack.pop()
        if item is first:
            return first.describe(path)
        if isinstance(item, _Marker) and hasattr(item, "value"):
            item = item.value
        if isinstance(item, dict):
            stack.extend((child, path + _member(key)) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{index}]") for index, child in enumerate(item))
    return first.describe("$")


def check_json_value(value: Any, name: str = "$") -> None:
    """Refuse Python floats that canonicalize to an integer literal beyond ±(2**53 − 1),
    and nesting deeper than :data:`JSON_DEPTH_MAX` (which could not be read back safely); the
    message names where (``evidence.x[2]``, rooted at ``name``).

    ``canonical_bytes`` accepts ``1e16`` (a double) but writes it as
    ``10000000000000000``, which :func:`parse_json` must refuse; callers taking
    JSON values from code (evidence) call this so stored values always read back.
    """
    if _json_value_ok(value):
        return  # the usual case: no path is spelled out
    stack = [(value, 1, name)]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, float):
            if _integral_out_of_range(item):
                raise LedgerError(INVALID_JSON, f"number {item!r} at {where} is an integer beyond ±(2**53-1)")
        elif isinstance(item, (dict, list, tuple)):
            if depth > JSON_DEPTH_MAX:
                raise LedgerError(INVALID_JSON, f"JSON nested deeper than {JSON_DEPTH_MAX} levels at {where}")
            if isinstance(item, dict):
                stack.extend((child, depth + 1, f"{where}.{key}") for key, child in item.items())
            else:
                stack.extend((child, depth + 1, f"{where}[{index}]") for index, child in enumerate(item))


def _json_value_ok(value: Any) -> bool:
    """True when :func:`check_json_value` finds nothing in ``value`` (the same walk, without paths)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float):
            if _integral_out_of_range(item):
                return False
        elif isinstance(item, (dict, list, tuple)):
            if depth > JSON_DEPTH_MAX:
                return False
            depth += 1
            stack.extend([(child, depth) for child in (item.values() if isinstance(item, dict) else item)])
    return True


class _StrictDecoder(json.JSONDecoder):
    """``json.JSONDecoder`` refusing duplicate keys, NaN/±Infinity and numbers beyond ±(2**53 − 1)."""

    def __init__(self, *, check_ints: bool = True, **options: Any) -> None:
        super().__init__(**options, object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_constant,
                         parse_float=_parse_float, parse_int=_parse_int if check_ints else None)


_STRICT = _StrictDecoder()  # reused: building a decoder costs as much as parsing a short line
#: The same without the integer hook, for text with no run of 16 digits: every integer in such
#: text has at most 15 digits, so it lies within ±(2**53 − 1) and the C parser reads it as is.
_STRICT_SHORT_INTS = _StrictDecoder(check_ints=False)
_LONG_DIGIT_RUN = re.compile(r"[0-9]{16}")


#: A byte-order mark as text, and what a JSON text beginning with one inside a file is told.
BOM_TEXT = "\ufeff"
BOM_INSIDE = ("not valid JSON: it begins with a byte-order mark (U+FEFF), which only a file's first line may "
              "carry (a file joined after another's end, say); remove it")


def parse_json(text: str | bytes) -> Any:
    """Parse JSON text strictly: duplicate keys, NaN and ±Infinity are ``INVALID_JSON``; bytes must be
    UTF-8 (``INVALID_JSON`` naming the first byte that is not; a leading byte-order mark is skipped).

    Integers beyond ±(2**53 − 1) (and floats that would read back as such) are
    refused while parsing; text that escapes a surrogate (``"\\ud800"``) is
    checked in full for a canonical form, so lone surrogates are refused too.
    """
    if isinstance(text, str):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise LedgerError(INVALID_JSON, "JSON text contains a lone surrogate") from None
    else:  # UTF-8 only (a byte-order mark allowed), never UTF-16 or UTF-32 guessed from the bytes
        try:
            text = bytes(text).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise LedgerError(INVALID_JSON, f"not UTF-8 (byte {exc.start + 1}: {exc.reason})") from None
    try:
        value = (_STRICT if _LONG_DIGIT_RUN.search(text) else _STRICT_SHORT_INTS).decode(text)
    except _Refused:
        raise LedgerError(INVALID_JSON, _refusal_at(text)) from None
    except LedgerError:
        raise
    except RecursionError:
        raise LedgerError(INVALID_JSON, "JSON nested too deeply") from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError
        if text.startswith(BOM_TEXT):  # past a file's start: a line of a journal glued on after another file
            raise LedgerError(INVALID_JSON, BOM_INSIDE) from None
        raise LedgerError(INVALID_JSON, f"not valid JSON: {exc}") from None
    if _SURROGATE_ESCAPE.search(text):
        canonical_bytes(value)  # a lone surrogate has no canonical form
    return value


def check_int(value: Any, name: str, *, minimum: int | None = None,
              maximum: int | None = None, code: str = INVALID_ARGUMENT) -> int:
    """Return ``value`` if it is an ``int`` (never a ``bool``) within range.

    The range is always clipped to ±(2**53 − 1) (docs/concepts.md); ``code`` is the
    error raised otherwise (``INVALID_ARGUMENT`` unless the caller says).
    """
    if type(value) is not int:  # bool is an int subclass; floats like 25.0 are not ints
        raise LedgerError(code, f"{name} must be an integer, got {describe_value(value)}")
    low = -SAFE_INTEGER_MAX if minimum is None else max(minimum, -SAFE_INTEGER_MAX)
    high = SAFE_INTEGER_MAX if maximum is None else min(maximum, SAFE_INTEGER_MAX)
    if not low <= value <= high:
        raise LedgerError(code, f"{name} must be between {low} and {high}, got {describe_value(value)}")
    return value
