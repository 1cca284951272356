"""Rendering rows and results: the sqlite-utils family of output formats.

``table`` (tabulate, for people), ``json`` (one array), ``nl`` (newline-delimited
JSON, one object per line), ``csv`` and ``tsv`` (a header row, then values
verbatim: a spreadsheet must import them as text, since a reason may start
with ``=``). Every format but ``table`` streams: rows are written as they come
from the cursor, never collected first.
"""

from __future__ import annotations

import base64
import codecs
import unicodedata
import csv
import io
import itertools
import json
import math
import os
import re
import select
import signal
import stat
import sys
import threading
import time
from typing import Any, Iterable, Mapping, Sequence

import click

from ledger.ground import errors as E, interrupts
from ledger.ground.errors import LedgerError, first_few


class OutputError(Exception):
    """Standard output refused the result (closed pipe, full disk); carries the ``OSError``."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(cause.strerror or str(cause))
        self.cause = cause
        #: What the command had done, told after the failure (None: what a ledger command tells).
        self.done: str | None = None
        #: Whether the line being written was left cut short (written in part, then the failure).
        self.cut_short = False


def echo(text: str = "", nl: bool = True) -> None:
    """``click.echo`` to standard output; an ``OSError`` there becomes :class:`OutputError`, so it
    is never mistaken for a refusal of the command's input. A character the output's encoding
    cannot carry (an emoji on a Latin-1 terminal) is printed escaped (``\\ud83d\\ude00``). Text is
    written as it is: the human formats escape control characters before they get here, and
    CSV and TSV carry values verbatim, which click, writing to a file or pipe, would strip of
    anything like a terminal escape (``ESC[31m``)."""
    if len(text) > ECHO_CHUNK_CHARS:  # one large write to a pipe its reader closed can lose its tail
        for start in range(0, len(text), ECHO_CHUNK_CHARS):  # without an error: a later chunk reports it
            echo(text[start:start + ECHO_CHUNK_CHARS], nl=False)
        echo("", nl=nl)
        return
    try:
        try:  # color=True: never strip what reads like a terminal escape (a CSV value is kept verbatim)
            click.echo(text, nl=nl, color=True)
        except UnicodeEncodeError:
            click.echo(encodable(text, click.get_text_stream("stdout")), nl=nl, color=True)
    except OSError as exc:
        raise OutputError(exc) from exc


#: The most :func:`echo` hands to one write.
ECHO_CHUNK_CHARS = 1 << 16

#: How long an interrupted command waits for standard output's reader to take the rest of a line it
#: had begun to print (:func:`echo_line`): a reader still reading gets it whole.
FINISH_LINE_S = 2.0


#: Encodings that start what they encode with a byte-order mark (:func:`echo_line` leaves them to :func:`echo`).
_WITH_BOM = {"utf-8-sig", "utf-16", "utf-32"}

#: The signals that interrupt a command, held while :func:`echo_line` writes a line at once.
_STOPS = set(interrupts.INTERRUPTING)


class LinePrinted(KeyboardInterrupt):
    """An interrupt (Ctrl-C, SIGTERM) that came while :func:`echo_line` wrote a line it had begun:
    ``whole`` when the line was written whole all the same, False when it stays cut short (its reader
    took no more within :data:`FINISH_LINE_S`, or went away, or a second interrupt came)."""

    def __init__(self, whole: bool) -> None:
        super().__init__()
        self.whole = whole


def echo_line(text: str) -> None:
    """``text`` and a newline on standard output as :func:`echo` prints them, written straight to its
    file descriptor so that an interrupt coming while a slow reader's full pipe holds the line up never
    leaves it cut short: the interrupt is held while the line is written (each write no larger than a
    pipe takes at once, when there is room), and once it came the rest is still written for at most
    :data:`FINISH_LINE_S`; it then goes on as :class:`LinePrinted`, or as itself when nothing of the
    line was written yet. To a terminal or a socket, or without a file descriptor (a test runner's
    buffer), :func:`echo`: a write select called possible may block there."""
    stream = sys.stdout
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return echo(text)
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)) and (stat.S_ISSOCK(mode) or os.isatty(fd)):
        return echo(text)  # a terminal or socket may block a write select called possible: never with signals held
    encoding = getattr(stream, "encoding", None) or "utf-8"
    if codecs.lookup(encoding).name in _WITH_BOM:  # encoded line by line, each would start with one
        return echo(text)
    data = (text + "\n").encode(encoding, "ledger-escape")
    written = 0
    try:
        stream.flush()  # what echo() left in the stream's buffer goes first
        if len(data) <= select.PIPE_BUF:
            held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)  # an interrupt comes after the count
            try:  # the whole line in one write when there is room: a pipe takes up to PIPE_BUF bytes at once
                if select.select([], [fd], [], 0)[1]:
                    written = os.write(fd, data)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
        if written == len(data):
            return
        with interrupts.deferred() as caught:
            deadline = None
            while written < len(data):
                if caught:
                    deadline = deadline or time.monotonic() + FINISH_LINE_S
                    if not written or time.monotonic() > deadline:
                        break
                if select.select([], [fd], [], 0.1)[1]:
                    written += os.write(fd, data[written:written + select.PIPE_BUF])
    except OSError as exc:
        failed = OutputError(exc)
        failed.cut_short = 0 < written < len(data)  # the disk filled up part-way through the line, say
        raise failed from exc
    except KeyboardInterrupt:
        if not written:
            raise
        raise LinePrinted(written == len(data)) from None


def _escape_unencodable(error: UnicodeError) -> tuple[str | bytes, int]:
    """Codec error handler ``ledger-escape``: a surrogate that stands for a byte of a non-UTF-8 path
    (``os.fsdecode``) is written as that byte; any other character the encoding lacks as JSON's
    escape (``\\u00e9``, ``\\ud83d\\ude00`` for U+1F600), which keeps ``--json`` output valid JSON."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    bad = error.object[error.start:error.end]
    if all("\udc80" <= ch <= "\udcff" for ch in bad):
        return bytes(ord(ch) - 0xDC00 for ch in bad), error.end
    return json.dumps(bad)[1:-1], error.end


codecs.register_error("ledger-escape", _escape_unencodable)


def encodable(text: str, stream: Any) -> str:
    """``text`` with every character ``stream``'s encoding cannot carry escaped (see ``ledger-escape``)."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return text.encode(encoding, "ledger-escape").decode(encoding, "replace")


def escape_unencodable_output() -> None:
    """Make standard output and error print what their encoding cannot carry instead of failing (an
    emoji on a Latin-1 locale or a redirected Windows console comes out as ``\\ud83d\\ude00``; a path's
    undecodable bytes as those bytes): printing a result never turns a committed write into a
    reported failure."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            try:
                if codecs.lookup(stream.encoding or "ascii").name == "ascii":
                    # click writes to an ASCII stream through a UTF-8 one of its own that replaces
                    # what it cannot carry: a path's undecodable bytes came out as "?". As UTF-8,
                    # the stream is click's choice, and those bytes come out as they are
                    stream.reconfigure(encoding="utf-8", errors="ledger-escape")
                else:
                    stream.reconfigure(errors="ledger-escape")
            except (ValueError, OSError, LookupError):  # a stream that cannot change now; echo() still escapes
                pass


def thread_failures_on_one_line() -> None:
    """A thread of this process that stops with an exception says so in one line on stderr, where
    Python prints a traceback (a worker pool's own thread with no thread or memory left for its
    queue: the work goes on in this process)."""
    def stopped(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        hint = (" (this process may have no memory or thread left)"
                if args.exc_type is MemoryError or "new thread" in str(args.exc_value) else "")
        name = args.thread.name if args.thread is not None else "of this process"
        warn(f"warning: the thread {name} stopped: {args.exc_type.__name__}: {args.exc_value}{hint}")
    threading.excepthook = stopped


def warn(text: str) -> None:
    """A line for people on standard error, control characters escaped (see :func:`one_line`)."""
    click.echo(one_line(text), err=True)


def _plain(value: Any) -> Any:
    """SQL values JSON cannot carry: blobs as ``{"$base64": …}``, non-finite floats as strings, also
    inside lists and structs (DuckDB's nested values)."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, bytes):
        return {"$base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


#: Bidirectional controls (marks, embeddings, overrides, isolates): a terminal shows the text around
#: them reordered, so a statement can read as something it is not. Escaped wherever control characters are.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


#: What ``json.dumps`` leaves raw although some reader takes it for a line break or a control (it
#: already escapes every control character below U+0020): DEL and the C1 controls U+007F–U+009F (NEL
#: among them; a terminal may take U+009B for the start of an escape sequence) and the Unicode line
#: and paragraph separators, which ``str.splitlines`` and JavaScript split on; and a lone surrogate (a
#: file name byte that is not UTF-8, as Python reads it), which would reach the output as that raw byte
#: and leave it no UTF-8; and the bidirectional controls. JSON's ``\uXXXX`` form keeps the value identical.
_JSON_LEAVES_RAW = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff" + "".join(sorted(BIDI_CONTROLS)) + "]")


#: ``json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)``, made once:
#: ``json.dumps`` with options builds a new encoder per call, a third of a short line's cost.
def not_stored_by_the_ledger(value: Any) -> Any:
    """A value of a type JSON has no form for reached the output: the ledger stores its values as
    text and numbers, so a blob here (say a case_id patched to ``x'ff'``) is an edited ledger."""
    raise LedgerError(E.INTEGRITY_ERROR, f"the ledger holds a {type(value).__name__} value where it writes text or a "
                      "number (an edited ledger); run 'ledger verify'")


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                           default=not_stored_by_the_ledger).encode


def dumps(value: Any) -> str:
    """Compact, valid JSON for machine output (UTF-8, no ASCII escaping) that is always one line.

    Every character any line reader treats as a line break, and every bidirectional control, is
    escaped (``\\uXXXX``),
    so ``text.splitlines()`` of N outputs gives exactly N lines that parse back to the
    same values.
    """
    text = _encode(value)
    if text.isascii() and "\x7f" not in text:
        return text  # the usual case, found without the slower pattern scan: nothing to escape
    # outside strings JSON has no such characters, so replacing them everywhere is safe
    return _JSON_LEAVES_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


#: Output formats of the tabular commands, in the order their options are listed.
FORMATS = ("table", "json", "nl", "csv", "tsv")


def _cell(value: Any) -> Any:
    """A value in a CSV or table cell: a blob as hex, a list or struct as its JSON text."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (list, tuple, dict)):
        return dumps(_plain(value))
    return value


class _Rows(io.StringIO):
    """Where the CSV writer writes, a row per ``write``: its rows end in ``\\n``. The writer ends them
    in ``\\r\\n``, which makes it quote a value holding a lone carriage return as well as one holding
    a newline (with ``\\n`` alone it wrote ``a\\rb`` unquoted, which every CSV reader splits in two)."""

    def write(self, row: str) -> int:
        return super().write(row[:-2] + "\n")


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
        buffer = _Rows()
        writer = csv.writer(buffer, lineterminator="\r\n", delimiter="," if fmt == "csv" else "\t")
        writer.writerow(names)
        for row in stream:
            writer.writerow([_cell(row[n]) for n in names])
            if buffer.tell() > 65_536:
                echo(buffer.getvalue(), nl=False)
                buffer.seek(0)
                buffer.truncate()
        echo(buffer.getvalue(), nl=False)
    else:
        # a cell or name never carries a control character (a terminal escape, a newline) raw
        table = [[one_line(cell) if isinstance(cell, str) else cell for cell in (_cell(row[n]) for n in names)]
                 for row in stream]
        if not table:
            echo("(no rows)")
            return
        from tabulate import tabulate  # imported on first use: it costs about 30 ms at start-up

        echo(tabulate(table, headers=[one_line(n) for n in names], tablefmt="simple", disable_numparse=True))


def _shown_escaped(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in BIDI_CONTROLS


def one_line(text: Any) -> str:
    """``text`` with control characters, line separators and bidirectional controls escaped (a
    newline in a path shows as ``\\n``, a terminal escape as ``\\x1b``, a right-to-left override as
    ``\\u202e``), so a message, summary line or table cell never splits, moves the cursor, talks to
    the terminal or shows its text reordered."""
    text = str(text)
    if not any(map(_shown_escaped, text)):
        return text
    return "".join(ch.encode("unicode_escape").decode("ascii") if _shown_escaped(ch) else ch for ch in text)


def emit_result(result: Mapping[str, Any], as_json: bool, summary: Iterable[str]) -> None:
    """Print an operation's result: its JSON with ``--json``, else the summary lines."""
    if as_json:
        echo(dumps(result))
    else:
        for line in summary:
            echo(one_line(line))


#: A note names at most this many runs, then says how many more.
NOTE_NAMES_MAX = 10


def first_names(names: list[str]) -> str:
    """``a, b, c`` — the first :data:`NOTE_NAMES_MAX` of ``names``, then ``and N more``."""
    return first_few(names, NOTE_NAMES_MAX)
