"""One recorded journal replayed under one policy, in memory (docs/simulate.md).

The journal is streamed (:func:`journal_lines`): one line is parsed and run at a
time, so memory holds the in-memory case (which the operational limits bound)
and never the journal. Every line runs through
:func:`ledger.package_tools.journal.call_operation`, the code path of ``ledger apply
--keep-going``, on a :class:`~ledger.services.memory.MemoryCase` created as ``apply
--create`` creates a case: at the journal's first ``"at"`` (else now), for the
actor given (``--actor``).

A *step* is a ``reserve`` line. Only a refusal the policy decided counts as a
refused step: ``INSUFFICIENT_BUDGET``, ``LIMIT_EXCEEDED`` (a scoped limit) or
``ACCOUNT_TERMINAL`` on an account the run's budget ended (abandoned for low
information gain, or exhausted); and a later record, settle or fail of a refused
reservation (``UNKNOWN_ACTION``), or a line on an account so ended
(``ACCOUNT_TERMINAL``), follows from it. Any other refusal makes the run an
error naming the file and line: the journal itself, a limit of the analysis
config, or the simulation's lack of an evidence store decided it, not the
policy. So does a reservation that a ``duration_ms`` limit holds while a line
before it (or it) has no ``"at"``: ``apply`` judges it by this machine's clock
while it applies the journal, a moment no replay can know.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..ground import errors as E
from ..services.budget import BudgetManager
from ..ground.clock import parse_at, utc_now
from ..ground.descriptors import open_to_read
from ..ground.config import AnalysisConfig
from ..ground.errors import LedgerError, refuses_unfit_calls_of, pass_on_interruption
from ..ground.paths import STORAGE_ERRNOS
from ..package_tools.journal import UNITS_KEY, call_operation, parse_line, read_lines, recorded_run_hint, without_bom
from ..services.memory import DEFAULT_ACTOR, MemoryCase
from ..model.operations import operation
from ..rules.common import STATUS_ABANDONED, STATUS_EXHAUSTED, TERMINAL_STATUSES
from ..rules.scopes import containing
from ..services.session import Ran


#: Codes by which a policy refuses a reservation (plus ``ACCOUNT_TERMINAL`` on an account it ended).
POLICY_CODES = frozenset({E.INSUFFICIENT_BUDGET, E.LIMIT_EXCEEDED})
#: The lines that reserve an action, priced by the policy: a tool action, or a test (``test_costs``).
STEP_OPS = frozenset({"reserve", "request_test"})
#: Account statuses a run's budget (the policy or a scoped limit) decides; ``rejected`` is the journal's.
ENDED_BY_POLICY = frozenset({STATUS_ABANDONED, STATUS_EXHAUSTED})
#: Lines read ahead for the journal's first "at", as ``ledger apply --create`` does.
FIRST_AT_LINES = 1000

#: A journal line: its number and the parsed object, or the ``LedgerError`` that refused it.
Item = tuple[int, "dict[str, Any] | LedgerError"]


@refuses_unfit_calls_of
@dataclass
class RunResult:
    """One journal under one policy. ``stopped_at_step`` is the first step the run did not
    take because every account was terminal (None: it was not cut short); ``error`` is set
    (``{"code", "message", "file", "line"}``) when a line is malformed or refused for a reason
    the policy did not decide, and then no figure counts."""

    run: str
    policy: str
    outcome: str | None = None
    steps: int = 0
    steps_taken: int = 0
    steps_refused: int = 0
    units_spent: int = 0
    units_rewarded: int = 0
    abandoned: bool = False
    exhausted: bool = False
    stopped_at_step: int | None = None
    error: dict[str, Any] | None = None
    lines: list[tuple[int, str | None]] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """What ``--per-run`` writes for this run (one JSON line)."""
        out = asdict(self)
        del out["lines"]
        return out


def journal_lines(path: Path) -> Iterator[Item]:
    """``(line number, parsed line or its LedgerError)`` of every non-blank line of the journal at
    ``path``, read one line at a time (:func:`ledger.package_tools.journal.read_lines`). ``INVALID_ARGUMENT``
    (naming the file) when it cannot be read; ``STORAGE_ERROR`` when the file system refuses the read
    (no permission, an I/O error, the open-file limit reached)."""
    try:
        with open_to_read(path) as handle:
            for number, text in enumerate(read_lines(handle), start=1):
                text = without_bom(text) if number == 1 else text
                if not text.strip():
                    continue
                try:
                    yield number, parse_line(text)
                except LedgerError as exc:
                    yield number, exc
    except OSError as exc:  # the file system's refusal (no permission, the open-file limit) is no bad journal
        pass_on_interruption(exc)
        code = E.STORAGE_ERROR if exc.errno in STORAGE_ERRNOS else E.INVALID_ARGUMENT
        raise LedgerError(code, f"{path}: cannot read: {exc.strerror or exc}", file=str(path)) from None


def parse_journal(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, parsed line)`` of every non-blank line of the journal at ``path``.

    A line ``apply`` would refuse as malformed raises its ``LedgerError`` with
    ``file`` and ``line`` in the details and both named in the message.
    """
    parsed = []
    for number, line in journal_lines(path):
        if isinstance(line, LedgerError):
            raise LedgerError(line.code, f"{path}:{number}: {line.message}", file=str(path), line=number)
        parsed.append((number, line))
    return parsed


def run_error(where: str, number: int | None, exc: LedgerError, why: str = "") -> dict[str, Any]:
    """The ``error`` of a run: ``{"code", "message", "file", "line"}``, the message naming file and line."""
    at = f"{where}:{number}" if number is not None else where
    why += recorded_run_hint(where) if number == 1 else ""
    return {"code": exc.code, "message": f"{at}: {exc.message}{why}", "file": where, "line": number}


class _FiguresOnly(BudgetManager):
    """The budget manager the simulator runs lines through: the same checks and rules, but no
    result object is built for each line (only the figures at the end are read)."""

    def _result(self, ran: Ran, action: tuple[str, str] | None = None) -> Ran:  # type: ignore[override]
        return ran


def _first_at(items: Iterator[Item]) -> tuple[tuple[str, int] | None, list[Item]]:
    """The first valid ``"at"`` among the first :data:`FIRST_AT_LINES` lines (and its line number),
    and the lines read to find it (to be replayed first)."""
    head: list[Item] = []
    for item in items:
        head.append(item)
        line = item[1]
        if isinstance(line, dict) and "at" in line:
            try:
                return (parse_at(line["at"]), item[0]), head
            except LedgerError:
                pass
        if len(head) >= FIRST_AT_LINES:
            break
    return None, head


def _drained(head: list[Item]) -> Iterator[Item]:
    """The items of ``head`` in order, each let go of once given (the list is emptied)."""
    head.reverse()
    while head:
        yield head.pop()


class _Replay:
    """The state of one run: the in-memory case, its budget manager, the figures and what the
    judgement of later refusals needs (the reservations the policy refused)."""

    def __init__(self, case: MemoryCase, budget: BudgetManager, result: RunResult, where: str, trace: bool) -> None:
        self.case, self.budget, self.result, self.where, self.trace = case, budget, result, where, trace
        self.refused: set[tuple[Any, Any]] = set()
        self.untimed: int | None = None  # the first line whose time came from the clock
        self.scoped = False  # whether any scope operation ran (a duration_ms limit needs one)

    def fail(self, number: int | None, exc: LedgerError, why: str = "") -> None:
        """Make the run an error (the first one only), naming the file and line."""
        if self.result.error is None:
            self.result.error = run_error(self.where, number, exc, why)

    def line(self, number: int, line: dict[str, Any], units: int | None) -> None:
        """Run one parsed line and judge its refusal, if any."""
        op = line["op"]
        is_step = op in STEP_OPS
        self.result.steps += is_step
        if "at" not in line and self.untimed is None and operation(op).accepts_at:
            self.untimed = number
        self.scoped = self.scoped or operation(op).service == "scope"
        if is_step and self.untimed is not None and self.scoped and self._duration_limited(line):
            self.fail(number, LedgerError(E.INVALID_ARGUMENT, f"this reservation is held by a duration_ms limit, "
                                          f"and line {self.untimed} has no \"at\": apply judges it by this "
                                          "machine's clock while it applies the journal, which no replay can know; "
                                          "give every line its \"at\""))
            if not self.trace:
                return
        if op == "open_revision" and units is not None:
            line = {**line, UNITS_KEY: units}
        try:
            call_operation(self.case, self.budget, line)
        except LedgerError as exc:
            self._judge(number, line, exc)
            if self.trace:
                self.result.lines.append((number, exc.code))
            return
        if self.trace:
            self.result.lines.append((number, None))

    def _judge(self, number: int, line: dict[str, Any], exc: LedgerError) -> None:
        identity = (line.get("hypothesis"), line.get("action_id"))
        code = exc.code
        if line["op"] in STEP_OPS:
            if code in POLICY_CODES or (code == E.ACCOUNT_TERMINAL and self._ended(line)):
                self.refused.add(identity)
                self.result.steps_refused += 1
                if self.result.stopped_at_step is None and code == E.ACCOUNT_TERMINAL and self._all_terminal():
                    self.result.stopped_at_step = self.result.steps
                return
        elif (code == E.UNKNOWN_ACTION and identity in self.refused) or (code == E.ACCOUNT_TERMINAL
                                                                         and self._ended(line)):
            return  # follows from a refusal of the policy
        self.fail(number, exc, f" ({line['op']} refused for a reason the policy did not decide)")

    def _accounts(self) -> dict[str, dict[str, Any]]:
        state = self.case.view.case()
        return self.case.view.accounts(state["revision"]) if state else {}

    def _ended(self, line: dict[str, Any]) -> bool:
        account = self._accounts().get(line.get("hypothesis"))
        return account is not None and account["status"] in ENDED_BY_POLICY

    def _all_terminal(self) -> bool:
        accounts = self._accounts()
        return bool(accounts) and all(a["status"] in TERMINAL_STATUSES for a in accounts.values())

    def _duration_limited(self, line: dict[str, Any]) -> bool:
        state = self.case.view.case()
        hypothesis = line.get("hypothesis")
        if not state or not isinstance(hypothesis, str):
            return False
        scopes = (self.case.view.scope(name) for name in containing(state["revision"], hypothesis))
        return any(scope is not None and "duration_ms" in scope["limits"] for scope in scopes)

    def finish(self) -> RunResult:
        result, view = self.result, self.case.view
        result.steps_taken = result.steps - result.steps_refused
        state = view.case()
        for revision in range(1, (state["revision"] if state else 0) + 1):
            for account in view.accounts(revision).values():
                result.units_spent += account["spent_units"]
                result.units_rewarded += account["rewarded_units"]
        statuses = {a["status"] for a in self._accounts().values()}
        result.abandoned = statuses == {STATUS_ABANDONED}
        result.exhausted = statuses == {STATUS_EXHAUSTED}
        return result


def replay_run(run: str, lines: Iterable[Item], policy: Any, *, analysis: AnalysisConfig | None = None,
               package: Path | None = None, trace: bool = False, actor: str = DEFAULT_ACTOR,
               clock: Callable[[], str] | None = None, source: str | None = None) -> RunResult:
    """Replay journal ``lines`` (``(number, parsed line or LedgerError)``, streamed or a list)
    from an empty in-memory case under ``policy`` (a :class:`~ledger.simulation.simulator.Policy`).

    ``actor`` is the case's actor (``--actor``); ``clock`` gives the time of a line without
    ``"at"`` (default: this machine's clock, read once for the whole run: see the module's
    docstring for why no figure depends on it); ``source`` names the journal in an error
    (default: ``run``). With ``trace``, a run that has an error still goes on and ``lines`` of
    the result holds ``(line number, None | error code)`` for every line, as ``apply
    --keep-going`` reports them.
    """
    result = RunResult(run, policy.name, lines=[] if trace else None)
    where = source or run
    items = iter(lines)
    first, head = _first_at(items)
    if clock is None:
        now = utc_now()
        clock = lambda: now  # noqa: E731 - one moment for the whole run
    try:
        case = MemoryCase.create("simulation", analysis_config=analysis, package=package, chain=False, clock=clock,
                                 actor=actor, at=first[0] if first else None)
    except LedgerError as exc:  # the journal's first "at" (far ahead of this machine's clock)
        result.error = run_error(where, first[1] if first else None, exc)
        return _read_outcome(chain(_drained(head), items), result)
    replay = _Replay(case, _FiguresOnly(case.session, package, policy.config), result, where, trace)
    lines = chain(_drained(head), items)
    for number, line in lines:
        if isinstance(line, LedgerError):
            replay.fail(number, line)
            if trace:
                result.lines.append((number, line.code))
        else:
            replay.line(number, line, policy.units_per_hypothesis)
            _note_outcome(line, result)
        if result.error is not None and not trace:
            return _read_outcome(lines, result)
    return replay.finish()


def _note_outcome(line: dict[str, Any], result: RunResult) -> None:
    """A ``record_outcome`` line gives the run its outcome (docs/runs.md): the newest counts."""
    if line.get("op") == "record_outcome":
        label = line.get("outcome")
        if isinstance(label, str) and label.strip():
            result.outcome = label


def _read_outcome(rest: Iterable[Item], result: RunResult) -> RunResult:
    """``result`` of a run that has an error, with the outcome its journal records on the lines
    left: no figure of it counts, but its outcome is still the journal's, checked against
    ``--outcomes`` like any other run's."""
    for _, line in rest:
        if isinstance(line, dict):
            _note_outcome(line, result)
    return result
