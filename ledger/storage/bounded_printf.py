"""SQLite's ``printf`` (and its other name, ``format``) for people's own queries, bounded in time.

A ``%c`` conversion repeats its character ``precision`` times, one character at a time, inside one
step of the statement, which no time limit can stop: ``printf('%.*c', 2000000000, 'x')`` ran for
about 11 s before SQLite returned NULL for a text over its length limit, holding a server's query
thread all the while. :func:`bound_printf` puts a function of the same names on a connection that
returns that NULL at once when a ``%c`` would repeat its character more often than the connection's
length limit allows, and hands every other call to SQLite's own ``printf`` on a private in-memory
connection with the same limit, so every answer stays SQLite's, but two a Python function cannot give:
an answer whose bytes are no UTF-8 (a blob printed with ``%s`` or ``%c``) comes back as those bytes in
a blob, and a text argument that is no UTF-8 is refused (docs/concepts.md, docs/browse.md).
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any, Callable

#: One conversion of a format: flags, width, precision, length modifier, conversion letter.
_CONVERSION = re.compile(r"%([-+ 0#!,]*)(\*|[0-9]*)(?:\.(\*|[0-9]*))?(l{0,2})(.)", re.S)
_NAMES = ("printf", "format")
#: The conversion letters SQLite's SQL printf knows; at any other it stops formatting.
_LETTERS = frozenset("dsgzqQwcouxXfeEGinp%")


def bound_printf(conn: sqlite3.Connection, limit: int) -> None:
    """Give ``conn`` a ``printf`` and ``format`` that answer as SQLite's do, at once where a ``%c``
    would repeat past ``limit`` characters (the connection's length limit). They stay on the
    connection (Python cannot give SQLite's own back): a writer's connection keeps them after a read,
    which the ledger's own statements never call, and the next bound replaces them."""
    probe = sqlite3.connect(":memory:", check_same_thread=False)  # used only by the thread running conn's query
    probe.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
    probe.text_factory = bytes  # a blob printed with %s may be no UTF-8: its bytes come back as they are
    function = _bounded(probe, limit)
    for name in _NAMES:
        conn.create_function(name, -1, function, deterministic=True)


def _bounded(probe: sqlite3.Connection, limit: int) -> Callable[..., Any]:
    def printf(*values: Any) -> Any:
        if not values:
            return None  # printf() with nothing to format, as SQLite answers it
        form, args = values[0], values[1:]
        if _repeats_past(_format_text(form), args, limit, probe):
            return None  # what SQLite answers for a text over its length limit, after the long repeat
        placeholders = ", ".join("?" * len(values))
        answer = probe.execute(f"SELECT printf({placeholders})", values).fetchone()[0]
        try:
            return answer.decode("utf-8") if isinstance(answer, bytes) else answer
        except UnicodeDecodeError:
            return answer  # no UTF-8: the same bytes, as a blob (a function cannot give text that is no UTF-8)
    return printf


def _format_text(form: Any) -> str:
    """The format as SQLite reads it: a blob's bytes or a number's text as text, up to a NUL (where
    SQLite stops reading); nothing for NULL. Only ``%``, digits, ``.``, ``*`` and letters matter here,
    so bytes that are no UTF-8 may stand as U+FFFD."""
    if isinstance(form, (bytes, bytearray)):
        text = bytes(form).decode("utf-8", "replace")
    else:
        text = "" if form is None else str(form)
    return text.partition("\0")[0]


def _repeats_past(form: str, args: tuple[Any, ...], limit: int, probe: sqlite3.Connection) -> bool:
    """Whether the ``%c`` conversions of ``form`` repeat their characters more than ``limit`` times in
    all, each precision read as SQLite reads it: digits, or ``*`` taking the next argument as a 64-bit
    integer kept to 32 bits, a negative one negated (SQLite's ``printf.c``, ``etCHARX``). Reading
    stops where SQLite stops formatting: at a conversion letter it does not know."""
    taken = repeats = 0  # the arguments the conversions before have used; the characters %c repeats
    for match in _CONVERSION.finditer(form):
        width, precision, letter = match.group(2), match.group(3), match.group(5)
        if letter not in _LETTERS:
            break
        if letter == "%":
            continue
        taken += width == "*"
        repeat = 0
        if precision == "*":
            repeat = _int32(probe, args[taken] if taken < len(args) else None)
            taken += 1
        elif precision:
            repeat = int(precision) & 0x7FFFFFFF
        if letter == "c":
            repeats += repeat
            if repeats > limit:
                return True
        taken += letter != "n"  # %n writes nothing and takes no argument in SQL
    return False


def _int32(probe: sqlite3.Connection, value: Any) -> int:
    """``value`` as SQLite's printf takes a ``*`` precision: its 64-bit integer, kept to 32 bits, a
    negative one negated."""
    whole = probe.execute("SELECT CAST(? AS INTEGER)", (value,)).fetchone()[0] or 0
    kept = (whole & 0xFFFFFFFF) - (0x100000000 if whole & 0x80000000 else 0)
    return 0 if kept == -0x80000000 else abs(kept)  # the one negative with no positive: no precision
