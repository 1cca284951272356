"""A shell command split into words as the shell splits it, for :mod:`ledger.runs.actions` (docs/runs.md).

The standard library's ``shlex`` does the splitting; before it, comments are left out (a ``#``
starting a word, outside quotes, to the line's end), line ends outside quotes become command
separators, and ANSI-C quoted strings (``$'1p\\nw out'``) are decoded into plain single-quoted ones,
which ``shlex`` does not know (it kept the ``$`` and the backslashes, hiding what the string says).
"""

from __future__ import annotations

import re
import shlex

#: The longest command split into words: longer ones take the default action. The standard library's
#: splitter builds each word a character at a time, so its time grows with the square of the longest
#: word (a megabyte path took minutes); a command this long is a script or a file's text, not a read.
COMMAND_CHARS_MAX = 65_536


def split_words(command: str) -> list[str] | None:
    """The command's words with separators as their own words; None when it cannot be split (a quote
    left open, an ANSI-C string left open, an expansion whose words only running it gives) or is
    longer than :data:`COMMAND_CHARS_MAX`."""
    if len(command) > COMMAND_CHARS_MAX:
        return None
    text = _shell_text(command)
    if text is None:
        return None
    lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;<>()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:
        return None


#: A backslash sequence in an ANSI-C quoted string (``$'…'``), as bash 5.2 reads it.
_ANSI_C_ESCAPE = re.compile(r"\\(x\{[0-9A-Fa-f]*\}?|x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}"
                            r"|c\\\\|c.|.)", re.S)
#: The rest of an ANSI-C quoted string after ``$'``: up to the first quote no backslash escapes.
_ANSI_C_BODY = re.compile(r"(?:[^\\']|\\.)*'", re.S)
_ANSI_C_NAMED = {"a": b"\a", "b": b"\b", "e": b"\x1b", "E": b"\x1b", "f": b"\f", "n": b"\n", "r": b"\r",
                 "t": b"\t", "v": b"\v", "\\": b"\\", "'": b"'", '"': b'"', "?": b"?"}
#: Characters after which a ``#`` starts a comment (outside quotes, at the start of a word).
_BEFORE_COMMENT = frozenset(" \t\n;&|()<>")
#: A descriptor's number written against its redirection (``2>/dev/null``, ``2>&1``), which the
#: splitter would make a word of its own, as ``2 >/dev/null`` gives one: left out of the words.
_DESCRIPTOR = re.compile(r"[0-9]+(?=[<>])")
#: A parameter expansion that gives the variable's value as it is (``${name}``, ``${1}``): any
#: other (``${x:--i}``, ``${x@P}``, ``${x/a/b}``) may give an option or run a command.
_PLAIN_PARAMETER = re.compile(r"\$\{(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+)\}")
_DESCRIPTOR_IN = re.compile(r"(?:^|[\s;&|()<>])[0-9]+[<>]")


def _shell_text(command: str) -> str | None:
    """``command`` with its comments left out, each line end outside quotes made a ``;`` (a new
    command; one inside quotes is part of its word: a sed script of several lines, a ``python -c``
    program; a backslash before it joins the lines), each ANSI-C quoted string (``$'a\\nb'``) made
    the plain single-quoted string of what bash decodes it to, and a descriptor's number written
    against its redirection left out (``2>x`` is ``>x``); None for an ANSI-C string left open, a
    translated string (``$"…"``) or a parameter expansion other than ``${name}`` (``${x:--i}``,
    ``${x@P}``), whose words the shell makes only as it runs."""
    if ("$'" not in command and "#" not in command and "\n" not in command and '$"' not in command
            and "${" not in command and not _DESCRIPTOR_IN.search(command)):
        return command
    out, quote, index = [], "", 0
    starts_word = True  # the next character, unquoted and unescaped, would start a word
    braces = 0  # parameter expansions open (``${x:- #}``): a # inside one is text
    while index < len(command):
        char = command[index]
        if char == "$" and quote != "'" and ((not quote and command.startswith('$"', index)) or (
                command.startswith("${", index) and not _PLAIN_PARAMETER.match(command, index))):
            return None  # a translated string, or an expansion with an operator (${x:--i}, ${x@P}): any word
        if quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":  # outside single quotes a backslash keeps the next character as it is
            if command.startswith("\n", index + 1):  # a line continued: both go, the word goes on
                index += 2
                continue
            out.append(command[index:index + 2])
            index += 2
            starts_word = False
            continue
        elif quote == '"':
            quote = "" if char == '"' else quote
        elif char == "\n":
            out.append(" ; ")
            index += 1
            starts_word = True
            continue
        elif char == "#" and starts_word and not braces:
            end = command.find("\n", index)
            index = len(command) if end < 0 else end  # the line end stays: it ends the command
            continue
        elif command.startswith("$$", index):  # the shell's process id, then whatever follows
            out.append("$$")
            index += 2
            starts_word = False
            continue
        elif command.startswith("$'", index):
            end = _ANSI_C_BODY.match(command, index + 2)
            if end is None:
                return None
            text = _ansi_c_decoded(command[index + 2:end.end() - 1])
            out.append("'" + text.replace("'", "'\\''") + "'")
            index = end.end()
            starts_word = False
            continue
        elif char in "'\"":
            quote = char
        elif starts_word and (descriptor := _DESCRIPTOR.match(command, index)):
            index = descriptor.end()  # "2>": the number only picks the descriptor; "2 >" keeps its word
            continue
        if quote != "'" and command.startswith("${", index):
            braces += 1
        elif char == "}" and braces and quote != "'":
            braces -= 1
        starts_word = not quote and char in _BEFORE_COMMENT
        out.append(char)
        index += 1
    return "".join(out)


def _ansi_c_decoded(body: str) -> str:
    """The text an ANSI-C quoted string's ``body`` stands for: escapes of bytes (``\\xHH``, octal)
    joined with the rest as UTF-8 (bytes that are no UTF-8 as U+FFFD), cut at a NUL as bash cuts it."""
    data = bytearray()
    position = 0
    for match in _ANSI_C_ESCAPE.finditer(body):
        data += body[position:match.start()].encode("utf-8", "surrogatepass")
        position = match.end()
        piece = _ansi_c_bytes(match.group(1))
        if b"\0" in piece:
            data += piece[:piece.index(b"\0")]
            return data.decode("utf-8", "replace")
        data += piece
    data += body[position:].encode("utf-8", "surrogatepass")
    return data.decode("utf-8", "replace")


def _ansi_c_bytes(code: str) -> bytes:
    """The bytes one escape (its text after the backslash) stands for."""
    if code.startswith("x{") or (code[0] == "x" and len(code) > 1):  # \x{77 with no brace closing it too
        return bytes([int(code.strip("x{}") or "0", 16) & 0xFF])
    if code[0] in "uU" and len(code) > 1:
        point = int(code[1:], 16)
        return b"" if point > 0x10FFFF else chr(point).encode("utf-8", "replace")
    if code[0] in "01234567":
        return bytes([int(code, 8) & 0xFF])
    if code[0] == "c" and len(code) > 1:
        return b"\x7f" if code[1] == "?" else bytes([code[1].encode("utf-8", "surrogatepass")[0] & 0x1F])
    return _ANSI_C_NAMED.get(code, ("\\" + code).encode("utf-8", "surrogatepass"))  # unknown: kept as written
