"""Journals: JSON-Lines operations applied to a case, one result line each (docs/journals.md).

Each input line is an object ``{"op": …, <arguments>…, "at"?: RFC 3339}`` named as
in the Python API (``hypothesis`` for the hypothesis id). :func:`apply_journal`
runs the lines in order and yields one result per line::

    {"line": N, "ok": true, "seq": …, "reused": …, "result": {…}}
    {"line": N, "ok": false, "error": {"code": …, "message": …}}

It stops after the first failure unless ``keep_going``. Blank lines are skipped.
Every operation is its own durable transaction, so a journal killed half-way can
simply be run again: what was done comes back ``reused``.
"""

from __future__ import annotations

import io
import json
import os
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Sequence

from ..ground import errors as E, interrupts
from ..services.budget import BudgetManager
from ..ground.arguments import check_callback, check_flag, check_instance, check_iterable
from ..ground.canonical import SAFE_INTEGER_MAX, parse_json, stored_bytes
from ..services.case import LEDGER_FILE, Case, check_new_case_path
from ..ground.clock import describe_micros, microseconds_between, parse_at
from ..ground.errors import LedgerError, refuses_unfit_calls, refuses_unfit_calls_of, repr_shown, shown
from ..ground.errors import pass_on_interruption
from ..services.facade import CaseFacade
from ..model.operations import OPERATIONS as REGISTRY
from ..storage.transaction import BatchRolledBack
from ..model.package import LEDGER_SIDE_FILES
from ..ground.paths import device_and_inode
from ..model.operations import operation


def journal_operations() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """op → (required keys, optional keys) of every journal operation; every line may also carry "at"."""
    return {name: (op.required_keys, op.optional_keys) for name, op in REGISTRY.items() if op.journal}


#: The journal forms of the registered operations (see :func:`journal_operations`).
OPERATIONS = journal_operations()
LINE_BYTES_MAX = 4 * 1024 * 1024
#: The ``open_revision`` key a run's allocation may be replaced in (``apply_journal``, simulation policies).
UNITS_KEY = "units_per_hypothesis"
#: A batch of journal lines is applied early once its lines add up to this many bytes.
BATCH_BYTES_MAX = 8 * 1024 * 1024


@refuses_unfit_calls_of
@dataclass(frozen=True)
class LineResult:
    """The outcome of one journal line (``error`` is None when ``ok``)."""

    line: int
    ok: bool
    seq: int | None = None
    reused: bool | None = None
    result: dict[str, Any] | None = None
    error: LedgerError | None = None
    #: ``(requested at, recorded time)`` when the line's ``at`` was earlier than the previous
    #: event and was raised to it (not part of the result line).
    clamped: tuple[str, str] | None = None
    #: The hypothesis id the line named (its ``"hypothesis"`` key), if any.
    touched: str | None = None
    #: True for a read (``check``, ``advice``, …): it writes nothing and its result says ``reused``.
    read: bool = False
    #: The line's operation (its ``"op"``), for a line that parsed.
    op: str | None = None

    @property
    def clamped_micros(self) -> int:
        """How far the line's ``at`` was raised, in microseconds (0 when it was not)."""
        return microseconds_between(*self.clamped) if self.clamped else 0

    def to_dict(self, *, changed_only: bool = False) -> dict[str, Any]:
        """The result line; ``changed_only`` keeps only the touched account in ``result.state``
        (a line that names no hypothesis, like ``initialize``, keeps every account)."""
        if self.ok:
            result = self.result
            if changed_only and self.touched is not None and isinstance((result or {}).get("state"), dict):
                result = dict(result, state={h: a for h, a in result["state"].items() if h == self.touched})
            return {"line": self.line, "ok": True, "seq": self.seq, "reused": self.reused, "result": result}
        return {"line": self.line, "ok": False, "error": self.error.to_dict()}


#: How much of an over-long line's remainder is read at a time while it is skipped.
SKIP_CHUNK_BYTES = 64 * 1024


#: How the files of agent runs as they were recorded are named (``ledger runs import`` reads them).
RECORDED_RUN_SUFFIXES = (".traj", ".json", ".gz")


def recorded_run_hint(name: str) -> str:
    """What to add when line 1 of the file ``name`` is no journal line and the file is named like an
    agent run as it was recorded (:data:`RECORDED_RUN_SUFFIXES`): how to make it a journal. Else ""."""
    if str(name).lower().endswith(".jsonl.gz"):
        return ("; this file looks gzip-compressed, and a journal is read as plain text: decompress it first "
                "(gunzip FILE); an agent's steps file goes to 'ledger runs import FILE --out DIR'")
    if not str(name).lower().endswith(RECORDED_RUN_SUFFIXES):
        return ""
    return ("; this file looks like an agent run as it was recorded (*.traj, *.json, *.gz), not a journal: "
            "'ledger runs import FILE --out DIR' makes it one")


def refuse_case_files_as_journal(stream: BinaryIO, case_path: str | os.PathLike[str]) -> None:
    """``INVALID_ARGUMENT`` when ``stream`` (a journal opened to be applied to the case at ``case_path``)
    is that case's own ``ledger.sqlite`` or one of the files beside it (a hard link to them too): only
    SQLite reads them, and every line would be refused as no JSON (docs/reliability.md). Nothing for a
    stream that is no file (standard input from a pipe)."""
    try:
        opened = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation) as oserr:
        pass_on_interruption(oserr)
        return
    for name in (LEDGER_FILE, *LEDGER_SIDE_FILES):
        if device_and_inode(Path(case_path) / name) == (opened.st_dev, opened.st_ino):
            raise LedgerError(E.INVALID_ARGUMENT, f"{getattr(stream, 'name', 'the journal')} is the case's own {name}, "
                              "which only SQLite reads, not a JSON-Lines journal")


def read_lines(stream: BinaryIO, on_bytes: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """The lines of a binary ``stream`` (without their ``\\n`` or ``\\r\\n``), read one at a time, so
    memory does not grow with the journal.

    A line longer than ``LINE_BYTES_MAX`` is read no further than two bytes past the limit
    (:func:`parse_line` refuses it with ``LIMIT_REACHED``) and yielded; the rest of it is skipped
    when the next line is asked for, so it still counts as one line. ``on_bytes`` is called with the bytes consumed (progress).
    ``INVALID_ARGUMENT`` when ``stream`` is not a binary file object (open it with ``"rb"``).
    """
    if not callable(getattr(stream, "readline", None)):
        raise LedgerError(E.INVALID_ARGUMENT, f"stream must be a binary file object (open(path, 'rb')), "
                          f"got {type(stream).__name__}")
    check_callback(on_bytes, "on_bytes", 1)
    room = 3  # the first line: room for a byte order mark, taken off later, or an over-long line would
    while True:  # shrink back under the limit and be read as a (cut) line
        line = stream.readline(LINE_BYTES_MAX + 2 + room)  # room for a CRLF ending, which is no part of the line
        room = 0
        if not isinstance(line, bytes):
            raise LedgerError(E.INVALID_ARGUMENT, "stream must be opened in binary mode (open(path, 'rb')), "
                              f"it gave {type(line).__name__}")
        if not line:
            return
        if on_bytes is not None:
            on_bytes(len(line))
        if line.endswith(b"\n"):
            yield line[:-2] if line.endswith(b"\r\n") else line[:-1]
            continue
        if len(line) <= LINE_BYTES_MAX:
            yield line
            continue
        yield line  # refused as over-long; its rest is skipped only if a next line is asked for, so a
        while True:  # caller stopping at this failure never reads an endless one (/dev/zero) to its end
            rest = stream.readline(SKIP_CHUNK_BYTES)  # in small pieces: memory stays flat
            if on_bytes is not None and rest:
                on_bytes(len(rest))
            if not rest or rest.endswith(b"\n"):
                break


def parse_line(text: str | bytes) -> dict[str, Any]:
    """Parse and check one journal line's shape (``INVALID_JSON``, ``INVALID_ARGUMENT``,
    ``UNKNOWN_OPERATION``)."""
    if not isinstance(text, (str, bytes)):
        raise LedgerError(E.INVALID_ARGUMENT, f"a journal line must be text, got {type(text).__name__}")
    if len(text) > LINE_BYTES_MAX:
        raise LedgerError(E.LIMIT_REACHED, f"journal line longer than {LINE_BYTES_MAX} bytes "
                          "(a fixed limit of journals: pass a large evidence payload through the Python API)")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LedgerError(E.INVALID_JSON, f"journal line is not UTF-8: {exc}") from None
    line = parse_json(text)
    if not isinstance(line, dict):
        raise LedgerError(E.INVALID_ARGUMENT, "a journal line must be a JSON object")
    if "op" not in line:
        raise LedgerError(E.INVALID_ARGUMENT, "a journal line needs an \"op\" key")
    op = line["op"]
    found = operation(op, journal=True)  # the genesis operation has none: apply --create performs it
    required, optional = found.required_keys, found.optional_keys
    keys = line.keys() - {"op", "at"}
    missing = required - keys
    if missing:
        raise LedgerError(E.INVALID_ARGUMENT, f"{op}: missing key(s) {', '.join(sorted(missing))}")
    extra = keys - required - optional
    if extra:
        raise LedgerError(E.INVALID_ARGUMENT, f"{op}: unexpected key(s) {', '.join(sorted(extra))}")
    for key in sorted(found.flag_keys & keys):
        if not isinstance(line[key], bool):
            raise LedgerError(E.INVALID_ARGUMENT, f"{op}: {key} must be a JSON boolean (true or false), "
                              f"got {shown(json.dumps(line[key], ensure_ascii=False), 40)}", key=key)
    if None in line.values():  # an optional key (or "at") is either absent or has a value
        nulls = sorted(key for key in optional | {"at"} if key in line and line[key] is None)
        if nulls:  # a null required key is the operation's to refuse, with its own code
            raise LedgerError(E.INVALID_ARGUMENT, f"{op}: {', '.join(nulls)} may be left out but not null")
    return line


def is_read(line: dict[str, Any]) -> bool:
    """True for a parsed journal line that writes nothing: a read (``check``, ``snapshot``, …), and
    ``query`` unless its ``store`` is true."""
    return operation(line["op"]).rule is None and line.get("store") is not True


def run_operation(case: Case, budget: BudgetManager, line: dict[str, Any]) -> tuple[int | None, bool, dict[str, Any]]:
    """Apply one parsed line through the operation registry; return ``(seq, reused, result dict)``.

    Afterwards ``case.session.last_clamp`` tells whether the line's ``at`` was raised.
    """
    outcome = call_operation(case, budget, line)
    return outcome.seq, outcome.reused, outcome.to_dict()


def call_operation(case: Case, budget: BudgetManager, line: dict[str, Any]) -> Any:
    """Apply one parsed line through the operation registry and return what the service method
    returned (a result object with ``seq``, ``reused`` and ``to_dict()``); raises its ``LedgerError``."""
    op = operation(line["op"])
    case.session.last_clamp = None
    at = line.get("at")
    kwargs = {argument.param: line[argument.key] for argument in op.arguments if argument.key in line}
    if op.accepts_at:
        kwargs["at"] = at
    elif at is not None:
        parse_at(at)  # a read takes no time, but a malformed one is still refused
    if op.service == "case":
        service = case
    elif op.service == "budget":
        service = budget
    else:
        service = case.scopes() if op.service == "scope" else case.evidence()
    return getattr(service, op.name)(**kwargs)


@refuses_unfit_calls
def apply_journal(case: Case, lines: Iterable[str | bytes], *, budget: BudgetManager | None = None,
                  keep_going: bool = False, batch_size: int = 1,
                  on_commit: Callable[[int], None] | None = None,
                  units_per_hypothesis: int | None = None) -> Iterator[LineResult]:
    """Apply journal ``lines`` to ``case``, yielding one :class:`LineResult` per non-blank line.

    ``budget`` defaults to ``case.budget()`` (the frozen policy). Stops after the
    first failed line unless ``keep_going``. Up to ``batch_size`` lines (and at most
    ``BATCH_BYTES_MAX`` bytes of them) share one transaction (group commit,
    :meth:`Case.batch`; with 1, each line is a batch of its own); ``lines`` is read as the batches need it
    (:func:`read_lines` streams a file); each
    line still succeeds or fails alone, and results are yielded only after their
    batch committed, so every yielded result is durable (inside the caller's own
    :meth:`Case.batch`, the lines run in it, durable when it commits). ``on_commit(n)``, if
    given, is called after each batch committed, before its ``n`` results are
    yielded (a caller that stops early knows how many committed results remain). A Ctrl-C or
    SIGTERM that comes while a batch commits is raised once its results are yielded, never between
    the commit and ``on_commit``; one that comes while a batch runs rolls it back.
    ``units_per_hypothesis`` (an integer from 1 to 2**53 - 1), if given, replaces the allocation of every
    ``open_revision`` line, exactly as a simulation policy that sets it does (docs/simulate.md);
    ``INVALID_ARGUMENT`` for anything else.
    """
    check_instance(case, CaseFacade, "case", "an open Case")
    check_iterable(lines, "lines", "an iterable of journal lines (str or bytes each), e.g. a list or read_lines(file)")
    check_instance(budget, (BudgetManager, type(None)), "budget", "a BudgetManager or None")
    check_flag(keep_going, "keep_going")
    check_callback(on_commit, "on_commit", 1)
    budget = budget or case.budget()
    if type(batch_size) is not int or batch_size < 1:
        raise LedgerError(E.INVALID_ARGUMENT, f"batch_size must be an integer >= 1, got {repr_shown(batch_size, 80)}")
    _check_units(units_per_hypothesis)
    pending: list[tuple[int, str | bytes]] = []
    run = _BatchRun(case, budget, keep_going, on_commit, units_per_hypothesis)

    pending_bytes = 0
    for number, text in enumerate(lines, start=1):
        text = without_bom(text) if number == 1 else text
        if isinstance(text, (str, bytes)) and not text.strip():
            continue
        pending.append((number, text))
        pending_bytes += len(text) if isinstance(text, (str, bytes)) else 0
        # a batch ends at batch_size lines or BATCH_BYTES_MAX bytes: memory stays bounded by the batch in
        # hand (a smaller batch gives the same results); and at a line that will fail and stop the run,
        # so that the next line (maybe an endless line's rest) is never read
        over_long = not keep_going and isinstance(text, (str, bytes)) and len(text) > LINE_BYTES_MAX
        if len(pending) >= batch_size or pending_bytes >= BATCH_BYTES_MAX or over_long:
            yield from run.batch(pending)
            pending, pending_bytes = [], 0
            if run.stopped:
                return
    if pending:
        yield from run.batch(pending)


def _check_units(units: Any) -> None:
    if units is not None and (type(units) is not int or not 1 <= units <= SAFE_INTEGER_MAX):
        raise LedgerError(E.INVALID_ARGUMENT, f"units_per_hypothesis must be an integer from 1 to {SAFE_INTEGER_MAX} "
                          f"or None, got {repr_shown(units, 80)}")


class _BatchRun:
    """:func:`apply_journal`'s batches: each one's lines run in one transaction (a batch of one line
    too: its commit and its count are then one step, which an interrupt cannot come between), then
    its results handed over; ``stopped`` once a failed line ends the run (not ``keep_going``)."""

    def __init__(self, case: Case, budget: BudgetManager, keep_going: bool,
                 on_commit: Callable[[int], None] | None, units: int | None) -> None:
        self.case, self.budget, self.keep_going = case, budget, keep_going
        self.on_commit, self.units = on_commit, units
        self.stopped = False

    def batch(self, chunk: list[tuple[int, str | bytes]]) -> Iterator[LineResult]:
        """The batch's results once it committed. A Ctrl-C or SIGTERM while it commits is handled
        once they are handed over (raised after the last), never between the commit and
        ``on_commit``: the caller counts every committed line."""
        done: list[LineResult] = []
        committing, committed = ExitStack(), False
        try:
            with committing:
                with nullcontext() if self.case.session.in_batch() else self.case.batch():  # the caller's own
                    self._run_lines(chunk, done)
                    committing.enter_context(interrupts.deferred())  # from here to the count: one step
                committed = True
                if self.on_commit is not None:
                    self.on_commit(len(done))
        except KeyboardInterrupt:
            if not committed:
                raise  # inside the batch: nothing of it committed
            yield from done
            raise
        yield from done

    def _run_lines(self, chunk: list[tuple[int, str | bytes]], done: list[LineResult]) -> None:
        for number, text in chunk:
            self.case.session.last_clamp = None  # a line refused before it ran raised no time
            try:
                parsed = parse_line(text)
                if self.units is not None and parsed["op"] == "open_revision":
                    parsed[UNITS_KEY] = self.units
                seq, reused, result = run_operation(self.case, self.budget, parsed)
            except LedgerError as exc:  # a refusal may have recorded events (limit.exceeded), at a raised time
                if isinstance(exc, BatchRolledBack):  # the disk full took the batch: no line's own failure
                    raise
                done.append(LineResult(number, False, error=exc, clamped=self.case.session.last_clamp))
                if not self.keep_going:
                    self.stopped = True
                    return
                continue
            done.append(LineResult(number, True, seq, reused, result, clamped=self.case.session.last_clamp,
                                    touched=parsed.get("hypothesis"), read=is_read(parsed), op=parsed["op"]))


def open_for_journal(path: str, *, create_case_id: str | None = None, at: str | None = None,
                     first_lines: Sequence[str | bytes] | None = None, journal_name: str = "",
                     journal_ended: bool = False, **options: Any) -> Case:
    """Open the case at ``path``, creating it first when ``create_case_id`` is given; with
    ``first_lines`` (the journal's first lines, from the file ``journal_name``), only when they start
    as a journal does (:func:`check_journal_start`, after the refusals of the path itself), and only
    when they hold a line that is not blank if they are the whole journal (``journal_ended``).

    ``at`` (RFC 3339 UTC) is the time of the case-created event (default now; the
    CLI passes the journal's first ``at``, see :func:`first_at`). ``options`` go to
    :meth:`Case.open`/:meth:`Case.create` (``analysis_config``, ``actor``). Re-running ``apply --create ID`` on the case it created simply
    opens it, so a killed journal can be run again; a case with another id is
    ``CASE_EXISTS``.
    """
    if create_case_id is None:
        try:
            return Case.open(path, **options)
        except LedgerError as exc:  # a journal usually starts a case: say how it can
            if exc.code != E.LEDGER_MISSING:
                raise
            raise LedgerError(exc.code, f"{exc.message}, or let the journal create it ('ledger apply CASE "
                              "JOURNAL --create CASE_ID')", **exc.details) from None
    if first_lines is not None and not _ledger_there(check_new_case_path(path)):
        check_journal_start(first_lines, journal_name, journal_ended)  # a file that is no journal creates no case
    try:
        return Case.create(path, create_case_id, at=at, **options)
    except LedgerError as exc:
        if exc.code != E.CASE_EXISTS:
            raise
    case = Case.open(path, **options)
    existing = case.status()["case_id"]
    if existing != create_case_id:
        case.close()
        raise LedgerError(E.CASE_EXISTS, f"{path} holds case {existing}, not {create_case_id}")
    return case


def _ledger_there(root: Path) -> bool:
    """Whether ``root`` holds a ledger file; a path that cannot be looked at is left to
    :meth:`Case.create`, which says what is wrong with it."""
    try:
        return (root / LEDGER_FILE).exists()
    except OSError as oserr:
        pass_on_interruption(oserr)
        return True


def check_journal_start(lines: Iterable[str | bytes], name: str, whole: bool = False) -> None:
    """What ``apply --create`` checks before it creates a case: the first non-blank of ``lines`` (the
    journal's first lines) reads as a journal line (:func:`parse_line`), else its refusal, saying that
    no case was created (with :func:`recorded_run_hint` for the file ``name``): a file that is no
    journal (an agent run, a compressed or binary file) leaves nothing behind. A line over
    ``LINE_BYTES_MAX`` that starts a JSON object passes: it may be a journal's, and fails as its own
    line; one that does not (``/dev/zero``, a binary file with no line break) creates nothing. When ``lines`` are
    the ``whole`` journal and none is non-blank, ``INVALID_ARGUMENT``: an empty journal creates no case."""
    number = 0
    for number, text in enumerate(lines, start=1):
        text = without_bom(text) if number == 1 else text
        if isinstance(text, (str, bytes)) and not text.strip():
            continue
        try:
            parse_line(text)
        except LedgerError as exc:
            if exc.code == E.LIMIT_REACHED and text.lstrip()[:1] in ("{", b"{"):  # a journal's, maybe: it
                return  # fails where it is
            if exc.code == E.LIMIT_REACHED:
                exc = LedgerError(exc.code, f"{exc.message}, and it does not start a JSON object")
            raise LedgerError(exc.code, f"line {number} is no journal line, so no case was created: {exc.message}"
                              + recorded_run_hint(name), **{**exc.details, "line": number}) from None
        return
    if whole:
        what = f"its {number} line(s) are all blank" if number else "it is empty"
        raise LedgerError(E.INVALID_ARGUMENT, f"the journal{f' {name}' if name else ''} has no line to apply "
                          f"({what}), so no case was created")


def first_at(lines: Iterable[str | bytes]) -> str | None:
    """The first valid ``"at"`` of a journal (normalized), or None: the time ``apply --create``
    gives the case it creates, so the journal's own times are kept. Unreadable lines are skipped
    here (applying them reports them)."""
    check_iterable(lines, "lines", "an iterable of journal lines (str or bytes each)")
    for number, text in enumerate(lines):
        text = without_bom(text) if number == 0 else text
        if not isinstance(text, (str, bytes)) or not text.strip() or b'"at"' not in stored_bytes(text):
            continue
        try:
            line = parse_json(text)
            if isinstance(line, dict) and "at" in line:
                return parse_at(line["at"])
        except LedgerError:
            continue
    return None


def without_bom(text: Any) -> Any:
    """``text`` without a leading UTF-8 byte order mark (some editors start files with one);
    used on a journal's first line only."""
    if isinstance(text, bytes) and text.startswith(b"\xef\xbb\xbf"):
        return text[3:]
    if isinstance(text, str) and text.startswith("\ufeff"):
        return text[1:]
    return text


@refuses_unfit_calls_of
@dataclass
class JournalSummary:
    """Counts of an applied journal: lines ``ok`` (of which ``reused``: writes found already applied,
    and ``reads``: reads, which write nothing), ``failed``, ``clamped``
    (lines whose ``at`` was raised to the previous event's time, by ``clamped_micros_max`` at most
    and ``clamped_micros_total`` in all) and the ``elapsed_s`` seconds since it was made.
    ``unprinted``: committed lines whose result line the caller could not print (its output failed,
    or ``interrupted``: Ctrl-C or SIGTERM stopped it while it printed a committed batch).
    ``cut_short``: the line whose result line was left cut short on the caller's output (an interrupt
    its reader took no more after, or the output failing part-way), else None. ``stopped_at``: the
    line a run without ``keep_going`` stopped at (its first failure), else None; ``first_failure``:
    ``(line, code)`` of the first line that failed, else None. ``last_line``: the last line counted, else
    None; ``ended_by_error``: the caller stopped at an error that is no line's own (the disk full, say),
    printed after the summary."""

    ok: int = 0
    failed: int = 0
    reused: int = 0
    reads: int = 0
    clamped: int = 0
    clamped_micros_max: int = 0
    clamped_micros_total: int = 0
    unprinted: int = 0
    interrupted: bool = False
    cut_short: int | None = None
    stopped_at: int | None = None
    first_failure: tuple[int, str] | None = None
    last_line: int | None = None
    ended_by_error: bool = False
    started: float = field(default_factory=time.monotonic, repr=False)

    def add(self, result: LineResult) -> None:
        """Count one line's result (a refused line's raised time too: the events its refusal recorded)."""
        self.last_line = result.line
        if result.clamped:
            micros = result.clamped_micros
            self.clamped += 1
            self.clamped_micros_max = max(self.clamped_micros_max, micros)
            self.clamped_micros_total += micros
        if not result.ok:
            self.failed += 1
            if self.first_failure is None:
                self.first_failure = (result.line, result.error.code if result.error is not None else "")
            return
        self.ok += 1
        if result.read:
            self.reads += 1
        elif result.reused:
            self.reused += 1

    @property
    def elapsed_s(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def to_dict(self) -> dict[str, Any]:
        return {"lines_ok": self.ok, "lines_failed": self.failed, "lines_reused": self.reused, "lines_read": self.reads,
                "times_clamped": self.clamped, "clamped_micros_max": self.clamped_micros_max,
                "clamped_micros_total": self.clamped_micros_total, "elapsed_s": self.elapsed_s}

    def text(self) -> str:
        """One line for people, e.g. ``applied: 12 ok (3 reused), 1 failed, no time raised, 0.41 s``."""
        clamped = (f"{self.clamped} time(s) raised to the previous event's time (by up to "
                   f"{describe_micros(self.clamped_micros_max)}, {describe_micros(self.clamped_micros_total)} in all)"
                   if self.clamped else "no time raised")
        why = "interrupted" if self.interrupted else "standard output failed"
        cut = (f"; the result of line {self.cut_short} was cut short: a last line "
               "that does not parse is that one" if self.cut_short is not None else "")
        unprinted = (f", {self.unprinted} of them not printed ({why}{cut}; no further line was applied)"
                     if self.unprinted else "")
        stopped = (f"; stopped at line {self.stopped_at}, its first failure: any lines after it were not applied "
                   "(--keep-going applies each line on its own)" if self.stopped_at is not None else "")
        if self.ended_by_error:
            after = (f"after line {self.last_line} by the error below: no line after it" if self.last_line is not None
                     else "before its first line by the error below: no line")
            stopped += (f"; stopped {after} was applied (run the command again to go on: the lines applied "
                        "answer reused)")
        reads = f", {self.reads} read(s)" if self.reads else ""
        first = (f" (the first at line {self.first_failure[0]}: {self.first_failure[1]})"
                 if self.first_failure is not None and self.stopped_at is None else "")
        return (f"applied: {self.ok} ok ({self.reused} reused{reads}), {self.failed} failed{first}, {clamped}, "
                f"{self.elapsed_s:.2f} s{unprinted}{stopped}")


def clamp_warning(result: LineResult) -> str:
    """The warning printed for a line whose ``at`` was raised to the previous event's time."""
    return raised_at_warning(*result.clamped, where=f"line {result.line}: ")


def raised_at_warning(requested: str, used: str, where: str = "") -> str:
    """The warning printed for a write whose ``at`` (``requested``) was raised to the previous event's
    time (``used``): ``Case.last_clamp``'s pair, or a journal line's (``where`` names the line)."""
    return (f"warning: {where}at {requested} is earlier than the previous event; recorded at {used} "
            f"(raised by {describe_micros(microseconds_between(requested, used))})")
