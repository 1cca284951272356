"""A shell command split into words as the shell splits it, for :mod:`ledger.runs.actions` (docs/runs.md).

The standard library's ``shlex`` does the splitting; before it, line ends outside quotes become
command separators and ANSI-C quoted strings (``$'1p\\nw out'``) are decoded into plain single-quoted
ones, which ``shlex`` does not know (it kept the ``$`` and the backslashes, hiding what the string says).
"""

from __future__ import annotations

import re
import shlex

#: The longest command split into words: longer ones take the default action. The standard library's
#: splitter builds each word a character at a time, so its time grows with the square of the longest
#: word (a megabyte path took minutes); a command this long is a script or a file's text, not a read.
COMMAND_CHARS_MAX = 65_536


def _line_ends_split(command: str) -> str:
    """``command`` with each line end outside quotes made a ``;`` (a new command); a line end inside
    quotes is part of its word (a sed script of several lines, a ``python -c`` program)."""
    if "\n" not in command:
        return command
    out, quote, escaped = [], "", False
    for char in command:
        if escaped and char == "\n" and quote != "'":  # a backslash before a line end joins the lines
            out.pop()
            escaped = False
            continue
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote and char == quote:
            quote = ""
        elif not quote and char in "'\"":
            quote = char
        elif char == "\n" and not quote:
            out.append(" ; ")
            continue
        out.append(char)
    return "".join(out)


def split_words(command: str) -> list[str] | None:
    """The command's words with separators as their own words; None when it cannot be split or is
    longer than :data:`COMMAND_CHARS_MAX`."""
    if len(command) > COMMAND_CHARS_MAX:
        return None
    lexer = shlex.shlex(_line_ends_split(_ansi_c_quotes(command)), posix=True, punctuation_chars="|&;<>()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:
        return None


#: What a backslash sequence in an ANSI-C quoted string (``$'…'``) stands for, as bash decodes it.
_ANSI_C_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)", re.S)
#: The rest of an ANSI-C quoted string after ``$'``: up to the first quote no backslash escapes.
_ANSI_C_BODY = re.compile(r"(?:[^\\']|\\.)*'", re.S)
_ANSI_C_NAMED = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                 "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _ansi_c_char(match: re.Match[str]) -> str:
    code = match.group(1)
    if code[0] in "xuU" and len(code) > 1:
        return chr(min(int(code[1:], 16), 0x10FFFF))
    if code[0] in "01234567":
        return chr(int(code, 8) & 0xFF)
    if code[0] == "c" and len(code) == 2:
        return chr(ord(code[1]) & 0x1F)
    return _ANSI_C_NAMED.get(code, "\\" + code)  # an unknown escape keeps its backslash


def _ansi_c_quotes(command: str) -> str:
    """``command`` with each ANSI-C quoted string outside other quotes (``$'a\\nb'``) made the plain
    single-quoted string of what it decodes to; one left open is kept as it is (``shlex`` refuses it)."""
    if "$'" not in command:
        return command
    out, quote, index = [], "", 0
    while index < len(command):
        char = command[index]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":  # outside single quotes a backslash keeps the next character as it is
            out.append(command[index:index + 2])
            index += 2
            continue
        elif quote == '"':
            quote = "" if char == '"' else quote
        elif char == "$" and command.startswith("'", index + 1):
            end = _ANSI_C_BODY.match(command, index + 2)
            if end is None:
                return command
            text = _ANSI_C_ESCAPE.sub(_ansi_c_char, command[index + 2:end.end() - 1])
            out.append("'" + text.replace("'", "'\\''") + "'")
            index = end.end()
            continue
        elif char in "'\"":
            quote = char
        out.append(char)
        index += 1
    return "".join(out)
