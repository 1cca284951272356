"""Journals: JSON-Lines operations applied to a case, one result line each (SPEC 10.1).

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

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from . import errors as E
from .budget import BudgetManager
from .canonical import parse_json
from .case import Case
from .clock import parse_at
from .errors import LedgerError
from .operations import OPERATIONS as REGISTRY
from .operations import operation


def journal_operations() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """op → (required keys, optional keys) of every journal operation; every line may also carry "at"."""
    return {name: (op.required_keys, op.optional_keys) for name, op in REGISTRY.items() if op.journal}


#: The journal forms of the registered operations (see :func:`journal_operations`).
OPERATIONS = journal_operations()
LINE_BYTES_MAX = 4 * 1024 * 1024


@dataclass(frozen=True)
class LineResult:
    """The outcome of one journal line (``error`` is None when ``ok``)."""

    line: int
    ok: bool
    seq: int | None = None
    reused: bool | None = None
    result: dict[str, Any] | None = None
    error: LedgerError | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.ok:
            return {"line": self.line, "ok": True, "seq": self.seq, "reused": self.reused, "result": self.result}
        return {"line": self.line, "ok": False, "error": self.error.to_dict()}


def parse_line(text: str | bytes) -> dict[str, Any]:
    """Parse and check one journal line's shape (``INVALID_JSON``, ``INVALID_ARGUMENT``,
    ``UNKNOWN_OPERATION``)."""
    if not isinstance(text, (str, bytes)):
        raise LedgerError(E.INVALID_ARGUMENT, f"a journal line must be text, got {type(text).__name__}")
    if len(text) > LINE_BYTES_MAX:
        raise LedgerError(E.LIMIT_REACHED, f"journal line longer than {LINE_BYTES_MAX} bytes")
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
    keys = set(line) - {"op", "at"}
    missing = sorted(required - keys)
    if missing:
        raise LedgerError(E.INVALID_ARGUMENT, f"{op}: missing key(s) {', '.join(missing)}")
    extra = sorted(keys - required - optional)
    if extra:
        raise LedgerError(E.INVALID_ARGUMENT, f"{op}: unexpected key(s) {', '.join(extra)}")
    nulls = sorted(key for key in optional | {"at"} if key in line and line[key] is None)
    if nulls:  # an optional key is either absent or has a value
        raise LedgerError(E.INVALID_ARGUMENT, f"{op}: {', '.join(nulls)} may be left out but not null")
    return line


def run_operation(case: Case, budget: BudgetManager, line: dict[str, Any]) -> tuple[int | None, bool, dict[str, Any]]:
    """Apply one parsed line through the operation registry; return ``(seq, reused, result dict)``."""
    op = operation(line["op"])
    at = line.get("at")
    kwargs = {argument.param: line[argument.key] for argument in op.arguments if argument.key in line}
    if op.accepts_at:
        kwargs["at"] = at
    elif at is not None:
        parse_at(at)  # a read takes no time, but a malformed one is still refused
    service = {"case": case, "budget": budget}.get(op.service) or case.evidence()
    outcome = getattr(service, op.name)(**kwargs)
    return outcome.seq, outcome.reused, outcome.to_dict()


def apply_journal(case: Case, lines: Iterable[str | bytes], *, budget: BudgetManager | None = None,
                  keep_going: bool = False, batch_size: int = 1) -> Iterator[LineResult]:
    """Apply journal ``lines`` to ``case``, yielding one :class:`LineResult` per non-blank line.

    ``budget`` defaults to ``case.budget()`` (the frozen policy). Stops after the
    first failed line unless ``keep_going``. With ``batch_size`` > 1, up to that
    many lines share one transaction (group commit, :meth:`Case.batch`); each
    line still succeeds or fails alone, and results are yielded only after their
    batch committed, so every yielded result is durable.
    """
    budget = budget or case.budget()
    if type(batch_size) is not int or batch_size < 1:
        raise LedgerError(E.INVALID_ARGUMENT, f"batch_size must be an integer >= 1, got {batch_size!r}")
    pending: list[tuple[int, str | bytes]] = []
    stopped = False

    def run_batch(chunk: list[tuple[int, str | bytes]]) -> list[LineResult]:
        nonlocal stopped
        done: list[LineResult] = []
        with case.batch() if batch_size > 1 else nullcontext():
            for number, text in chunk:
                try:
                    parsed = parse_line(text)
                    seq, reused, result = run_operation(case, budget, parsed)
                except LedgerError as exc:
                    done.append(LineResult(number, False, error=exc))
                    if not keep_going:
                        stopped = True
                        break
                    continue
                done.append(LineResult(number, True, seq, reused, result))
        return done

    for number, text in enumerate(lines, start=1):
        if isinstance(text, (str, bytes)) and not text.strip():
            continue
        pending.append((number, text))
        if len(pending) >= batch_size:
            yield from run_batch(pending)
            pending = []
            if stopped:
                return
    if pending:
        yield from run_batch(pending)


def open_for_journal(path: str, *, create_case_id: str | None = None, **options: Any) -> Case:
    """Open the case at ``path``, creating it first when ``create_case_id`` is given.

    ``options`` go to :meth:`Case.open`/:meth:`Case.create` (``analysis_config``,
    ``actor``). Re-running ``apply --create ID`` on the case it created simply
    opens it, so a killed journal can be run again; a case with another id is
    ``CASE_EXISTS``.
    """
    if create_case_id is None:
        return Case.open(path, **options)
    try:
        return Case.create(path, create_case_id, **options)
    except LedgerError as exc:
        if exc.code != E.CASE_EXISTS:
            raise
    case = Case.open(path, **options)
    existing = case.status()["case_id"]
    if existing != create_case_id:
        case.close()
        raise LedgerError(E.CASE_EXISTS, f"{path} holds case {existing}, not {create_case_id}")
    return case
