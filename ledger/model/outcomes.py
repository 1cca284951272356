"""The outcomes file of runs: which runs resolved their task, as a CSV file (run id, outcome) that
``ledger simulate --outcomes`` and ``ledger runs import --outcomes`` both read, one way
(docs/simulate.md, "Outcomes")."""

from __future__ import annotations

import csv
import io
import os
from typing import Iterator, Mapping

from ..ground import errors as E
from ..ground.canonical import is_utf8_text
from ..ground.descriptors import open_to_read
from ..ground.errors import LedgerError, first_few, quoted, refuses_unfit_calls, pass_on_interruption
from ..ground.paths import STORAGE_ERRNOS, fs_path
from ..rules.common import is_blank
from ..rules.lifecycle import OUTCOME_CHARS_MAX, REPORT_OUTCOMES, check_new_outcome


@refuses_unfit_calls
def read_outcomes(path: str | os.PathLike[str]) -> dict[str, str]:
    """Run id (first column) → outcome (the column named ``outcome``, another one) of a UTF-8 CSV
    file with a header row; blank lines are skipped.

    ``INVALID_ARGUMENT``, naming the file and line, for a missing or unreadable file, a header
    without exactly one ``outcome`` column besides the first, a row with another number of fields
    than the header, a quote left open or text after a closing quote, a run listed twice, or a run id
    or outcome :func:`check_outcome` refuses.
    """
    path = fs_path(path, "outcomes file")
    if path.exists() and not path.is_file():  # a fifo would block, a folder cannot be read
        raise LedgerError(E.INVALID_ARGUMENT, f"outcomes file {path}: not a regular file")
    where = f"outcomes file {os.fspath(path)}"
    outcomes: dict[str, str] = {}
    try:
        with io.TextIOWrapper(open_to_read(path), encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle, strict=True)  # a quote left open or text after one: refused, not guessed
            header = _next_row(reader, where, 1) or []
            if header.count("outcome") != 1 or header[0] == "outcome":
                raise LedgerError(E.INVALID_ARGUMENT, f"{where}: needs a header row with one 'outcome' column, "
                                  f"after the first (the run ids); got {first_few([quoted(h, 40) for h in header], 8) or 'none'}")
            column = header.index("outcome")
            ended = reader.line_num  # a record may span lines (a quoted newline): named by its first
            while (row := _next_row(reader, where, ended + 1)) is not None:
                started, ended = ended + 1, reader.line_num
                if not row:
                    continue
                line = f"{where}: line {started}"
                if len(row) != len(header):
                    raise LedgerError(E.INVALID_ARGUMENT, f"{line} has {len(row)} field(s), the header {len(header)}")
                if row[0] in outcomes:
                    raise LedgerError(E.INVALID_ARGUMENT, f"{line}: run {row[0]!r} is listed twice")
                outcomes[row[0]] = check_outcome(row[0], row[column], line)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        pass_on_interruption(exc)
        refused = isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS  # the file system's refusal, not the file's
        raise LedgerError(E.STORAGE_ERROR if refused else E.INVALID_ARGUMENT, f"{where}: cannot read: {exc}") from None
    return outcomes


def _next_row(reader: Iterator[list[str]], where: str, line: int) -> list[str] | None:
    """The next record of ``reader`` (None at the end); a malformed one is ``INVALID_ARGUMENT`` naming the
    line it starts on and what is wrong with its quotes."""
    try:
        return next(reader, None)
    except csv.Error as exc:
        why = {"unexpected end of data": "a quoted field is never closed (its closing '\"' is missing)",
               "',' expected after '\"'": "text follows a field's closing '\"'; put the whole field in quotes"}
        raise LedgerError(E.INVALID_ARGUMENT, f"{where}: line {line}: {why.get(str(exc), str(exc))}") from None


def check_outcomes(outcomes: Mapping[str, str], where: str) -> Mapping[str, str]:
    """Every ``(run, outcome)`` of a table given as a mapping, checked by :func:`check_outcome`."""
    for run, outcome in outcomes.items():
        check_outcome(run, outcome, where)
    return outcomes


def check_outcome(run: str, outcome: str, where: str) -> str:
    """``outcome`` of ``run``, a label a journal's ``record_outcome`` could record: ``INVALID_ARGUMENT``
    naming ``where`` for a blank run id or one with spaces around it, a blank outcome, one with spaces
    around it (`` resolved`` would be a label apart from ``resolved``), one longer than 64 characters,
    one holding NUL or a lone surrogate, a control or format character (a newline, U+200B), or one named
    like a row of simulate's reports (``(all)``, ``(no outcome)``)."""
    if is_blank(run):
        raise LedgerError(E.INVALID_ARGUMENT, f"{where}: the run id (first column) is empty")
    if run != run.strip():  # no run id (a file name) has them: the row could never match its run
        raise LedgerError(E.INVALID_ARGUMENT, f"{where}: the run id {run!r} has spaces around it; write it "
                          "without them")
    if is_blank(outcome):
        raise LedgerError(E.INVALID_ARGUMENT, f"{where}: run {run!r} has an empty outcome; give one, or leave "
                          "the run out (then it is counted under '(no outcome)')")
    if outcome != outcome.strip():
        raise LedgerError(E.INVALID_ARGUMENT, f"{where}: run {run!r}: the outcome {outcome!r} has spaces around "
                          "it; write it without them")
    if len(outcome) > OUTCOME_CHARS_MAX:
        raise LedgerError(E.INVALID_ARGUMENT, f"{where}: run {run!r}: the outcome is longer than "
                          f"{OUTCOME_CHARS_MAX} characters")
    if "\x00" in outcome or not is_utf8_text(outcome):
        raise LedgerError(E.INVALID_ARGUMENT, f"{where}: run {run!r}: the outcome holds NUL or a lone surrogate")
    if outcome in REPORT_OUTCOMES:
        raise LedgerError(E.INVALID_ARGUMENT, f"{where}: run {run!r}: the outcome {outcome!r} is a name the "
                          "report uses itself; call it something else")
    check_new_outcome(outcome, f"{where}: run {run!r}: the outcome")  # a character that shows nothing
    return outcome

