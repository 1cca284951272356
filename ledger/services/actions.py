"""An investigator's actions in one call each (docs/investigator.md).

:class:`CaseBudget` is the budget manager of an open :class:`~ledger.services.case.Case`
(``case.budget()``): every :class:`~ledger.services.budget.BudgetManager` operation, plus

* :meth:`CaseBudget.run_tool` — one router action: reserve, run the reference
  router, publish the verified reply as evidence and feed its record to the action,
  with operation and iteration ids derived from the action's identity, so a retry
  after a crash repeats the same operations and comes back ``reused``;
* :meth:`CaseBudget.action` — a context manager binding an action to the code that
  runs it: whatever leaves the block (an exception, ``KeyboardInterrupt``, a block
  that records nothing) closes the action with ``fail``; nothing stays pending;
* ``submit_feedback``, ``confirm_feedback`` and ``store_feedback`` beside ``request_test``,
  so an asynchronous test is driven from one object.

Each step stays its own durable operation: a crash between two steps leaves the
state a retry continues from.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..ground.arguments import NotCopied, plain_public_arguments
from ..ground import errors as E
from .budget import BudgetManager, BudgetResult
from ..ground.config import BudgetConfig
from ..ground.errors import LedgerError, pass_on_interruption, refuses_unfit_calls_of
from ..ground.interrupts import context_manager
from .evidence import EvidenceResult, EvidenceStore, FeedbackResult
from ..rules.common import (ACTION_ID_RE, CLOSED_ACTION_STATUSES, REASON_CHARS_MAX, check_action_id, check_action_name,
                            check_hypothesis_id, is_blank, not_initialized, unknown_hypothesis_error)
from ..rules import budget_requests as requests
from .session import Session

def derived_id(kind: str, revision: int, hypothesis_id: str, action_id: str) -> str:
    """``KIND-r<revision>-<hypothesis>-<action_id>``: the operation (``op``) or iteration (``run``) id
    :meth:`CaseBudget.run_tool` uses for an action; when longer than an id may be, the action id
    part is replaced by the first 32 hex digits of its sha256, and when that is still too long (a
    hypothesis id longer than any revision's, which ``reserve`` then refuses as unknown), both parts
    by those of ``HYPOTHESIS/ACTION_ID``'s."""
    found = f"{kind}-r{revision}-{hypothesis_id}-{action_id}"
    if ACTION_ID_RE.fullmatch(found):
        return found
    found = f"{kind}-r{revision}-{hypothesis_id}-{hashlib.sha256(action_id.encode('utf-8')).hexdigest()[:32]}"
    if ACTION_ID_RE.fullmatch(found):
        return found
    return f"{kind}-r{revision}-{hashlib.sha256(f'{hypothesis_id}/{action_id}'.encode('utf-8')).hexdigest()[:32]}"


def failure_reason(exc: BaseException) -> str:
    """The ``fail`` reason for an exception: its type and message, made a valid reason (never blank,
    even for an exception whose message cannot be had or whose type name shows nothing)."""
    try:
        message = str(exc).strip()
    except Exception as problem:  # a __str__ that raises: the type still says what happened
        pass_on_interruption(problem)
        message = ""
    name = type(exc).__name__
    text = f"{name}: {message}" if message else name
    text = text.replace("\x00", "?").encode("utf-8", "replace").decode("utf-8")[:REASON_CHARS_MAX]
    return text if not is_blank(text) else "an exception with no readable type or message"


@refuses_unfit_calls_of
@dataclass(frozen=True)
class ToolRun:
    """What :meth:`CaseBudget.run_tool` returns: the action (``hypothesis_id``, ``action_id``,
    ``tool``), its evidence ``record_id`` and ``novelty_score``, the router's ``result`` for the
    action (what the agent assesses before ``settle``), the budget ``budget`` after the action's
    evidence was fed (its ``action`` awaits assessment), and ``reused`` (True when every step had
    already been done: nothing was written)."""

    hypothesis_id: str
    action_id: str
    tool: str
    record_id: str
    novelty_score: int
    result: dict[str, Any]
    budget: BudgetResult
    reused: bool

    def to_dict(self) -> dict[str, Any]:
        return {"hypothesis_id": self.hypothesis_id, "action_id": self.action_id, "tool": self.tool,
                "record_id": self.record_id, "novelty_score": self.novelty_score, "result": self.result,
                "budget": self.budget.to_dict(), "reused": self.reused}


@plain_public_arguments
class Action(NotCopied):
    """An action bound to the block that runs it (:meth:`CaseBudget.action`).

    ``reservation`` is the reserve's result; :meth:`record` (or :meth:`record_evidence`) stores the
    outcome, after which ``result`` holds the budget result (the action awaits ``settle``).
    Leaving the block by an exception closes the action with ``fail`` (reason: the exception's type
    and message) and lets the exception go on; leaving it normally without a recorded result fails
    it too (reason ``no result was recorded``; ``result`` and ``failed`` then hold the fail's result,
    or ``result`` the result recorded otherwise meanwhile, so after a block left normally ``result``
    is None only when the revision no longer has the action). An action whose result was recorded
    before the block began (a retry after a crash) is never closed by the block: its result stays.
    """

    def __init__(self, budget: "CaseBudget", hypothesis_id: str, action_id: str, action: str,
                 at: str | None) -> None:
        self._budget = budget
        self.hypothesis_id, self.action_id, self.action = hypothesis_id, action_id, action
        self._at = at
        self.reservation: BudgetResult | None = None
        self.result: BudgetResult | None = None
        self.failed: BudgetResult | None = None
        self._past = False

    def __enter__(self) -> "Action":
        self.reservation = reserve_or_close(self._budget, self.hypothesis_id, self.action_id, self.action, self._at)
        state = self.reservation.action or {}
        self._past = state.get("status") not in (None, "reserved")
        if self._past:  # a retry of an action already past this block
            self.result = self.reservation
        return self

    def record(self, evidence: Any, source_refs: Iterable[str] | None = None, *,
               cost_usd_millicents: int | None = None) -> BudgetResult:
        """:meth:`BudgetManager.record_result` for this action."""
        with self._unreserved_hint():
            self.result = self._budget.record_result(self.hypothesis_id, self.action_id, evidence, source_refs,
                                                     cost_usd_millicents=cost_usd_millicents, at=self._at)
        return self.result

    def record_evidence(self, record_id: str) -> BudgetResult:
        """:meth:`BudgetManager.record_evidence` for this action."""
        with self._unreserved_hint():
            self.result = self._budget.record_evidence(self.hypothesis_id, self.action_id, record_id, at=self._at)
        return self.result

    @context_manager
    def _unreserved_hint(self) -> Iterator[None]:
        """``UNKNOWN_ACTION`` of an action never entered as a block says that entering reserves it."""
        try:
            yield
        except LedgerError as refused:
            if refused.code != E.UNKNOWN_ACTION or self.reservation is not None:
                raise
            raise LedgerError(refused.code, f"{refused.message} (budget.action reserves when its block is "
                              "entered: with budget.action(h, a, tool) as act: act.record(...))",
                              **refused.details) from None

    def settle(self, semantic_score: int, reason: str) -> BudgetResult:
        """:meth:`BudgetManager.settle` for this action (after :meth:`record`); ``result`` then holds
        the settlement."""
        self.result = self._budget.settle(self.hypothesis_id, self.action_id, semantic_score, reason, at=self._at)
        return self.result

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if exc is None and self.result is not None:
            return False
        if exc is None:  # no result through this block: fail it, unless it got one otherwise or was closed
            try:
                closed = self._budget._fail_if_reserved(self.hypothesis_id, self.action_id, "no result was recorded",
                                                       at=self._at)
            except LedgerError as refused:  # the case closed inside the block, the ledger busy: say what is left
                refused.add_note(f"case-ledger: action {self.action_id} was left reserved (no result was recorded "
                                 "and closing it with fail was refused); fail it, or enter the block again, once "
                                 "the case is open")
                raise
            self.failed = closed if isinstance(closed, BudgetResult) else None
            # ``result`` holds the state the block leaves, as on entering a closed action: the fail,
            # or the result recorded otherwise meanwhile (a reserve again is reused: it writes nothing)
            self.result = self.failed if closed is None or self.failed is not None else \
                self._budget.reserve(self.hypothesis_id, self.action_id, self.action, at=self._at)
        elif self._past:  # recorded or closed before this block began: a retry never discards it
            exc.add_note(left_as_it_was(self.action_id, (self.reservation.action or {}).get("status"),
                                        " when the block began"))
        else:  # a result this block recorded is failed too (docs/investigator.md); one it did not record stays
            self.failed = close_failed(self._budget, self.hypothesis_id, self.action_id, exc, self._at,
                                       recorded_here=self.result is not None)
        return False


def _refuse_closed(budget: "CaseBudget", hypothesis_id: str, action_id: str) -> None:
    """``ACTION_CLOSED`` for a ``run_tool`` of an action closed with no stored batch (failed, a tool
    call refused or interrupted): it can take no reply, so the tool is not run for it."""
    status = budget._status(hypothesis_id, action_id)
    if status in CLOSED_ACTION_STATUSES:
        raise LedgerError(E.ACTION_CLOSED, f"{hypothesis_id}/{action_id} is already {status}, with no stored tool call "
                          "to answer from: run_tool runs a tool only for an action that has no result yet; give "
                          "this call a new action id", hypothesis_id=hypothesis_id, action_id=action_id)


def _stored_query(store: EvidenceStore, iteration_id: str, request: Mapping[str, Any], at: str | None,
                  action_id: str) -> EvidenceResult:
    """``run_tool``'s stored tool call. A batch another call of this very request stored meanwhile
    (under another generation of the ledger: its reply is then not this one's) is the answer, as
    for a retry; a batch of another tool call under the action's iteration id is
    ``OPERATION_CONFLICT`` worded for the action."""
    try:
        return store.query(iteration_id, request, store=True, at=at)
    except LedgerError as exc:
        if exc.code != E.OPERATION_CONFLICT:
            raise
        stored = store.stored_batch(iteration_id, request)
        if stored is not None:
            return stored
        raise LedgerError(E.OPERATION_CONFLICT, f"action {action_id} already ran a tool call with another tool "
                          "or other args; give this call a new action id",
                          **exc.details) from None


class _NotReserved(Exception):
    """Raised inside :meth:`CaseBudget._fail_if_reserved`'s transaction (rolling it back) when the
    action no longer awaits its result; carries the action's ``status``."""

    def __init__(self, status: str | None) -> None:
        super().__init__(status)
        self.status = status


def _taken(budget: "CaseBudget", hypothesis_id: str, action_id: str, iteration_id: str) -> LedgerError:
    """``OPERATION_CONFLICT`` for a ``run_tool`` whose iteration id already holds a batch of another
    tool call: this action's with other args (noted as left as it was), or, when the revision has no
    such action, another action's whose derived ids coincide with these (an action id too long for
    them and the 32 hex digits of its sha256 that replace it, given as an action id of its own)."""
    if budget._status(hypothesis_id, action_id) is None:
        return LedgerError(E.OPERATION_CONFLICT, (
            f"action {action_id} of {hypothesis_id} would store its tool call as iteration {iteration_id}, which "
            "already holds another action's (their derived ids coincide); give this call a new action id"),
            iteration_id=iteration_id)
    exc = LedgerError(E.OPERATION_CONFLICT, f"action {action_id} already ran a tool call with another tool or "
                      "other args; give this call a new action id", iteration_id=iteration_id)
    _leave_to_its_owner(budget, hypothesis_id, action_id, exc)
    return exc


def _refuse_used_operation(store: Any, hypothesis_id: str, action_id: str, operation_id: str) -> None:
    """``OPERATION_CONFLICT`` before anything is reserved when the operation id ``run_tool`` derives for
    this action already names another stored result or a requested test: storing its tool call would be
    refused after the reservation, which no later call could complete."""
    used = store.operation_use(operation_id)
    if used is not None:
        raise LedgerError(E.OPERATION_CONFLICT, (
            f"action {action_id} of {hypothesis_id} would store its tool call as operation {operation_id}, which "
            f"{used} already uses; give this call a new action id"), operation_id=operation_id)


def _feed(budget: "CaseBudget", hypothesis_id: str, action_id: str, record_id: str, at: str | None) -> BudgetResult:
    """``record_evidence`` of ``run_tool``'s stored record; ``ACTION_CLOSED`` worded for ``run_tool`` when
    the action was closed before it took the record (a call interrupted between its two steps, then
    failed): the stored tool call stays, unused, and no call reopens the action."""
    try:
        return budget.record_evidence(hypothesis_id, action_id, record_id, at=at)
    except LedgerError as exc:
        if exc.code != E.ACTION_CLOSED:
            raise
        raise LedgerError(E.ACTION_CLOSED, (
            f"{hypothesis_id}/{action_id} was closed ({budget._status(hypothesis_id, action_id)}) before it "
            f"took its stored tool call (record {record_id}), which stays stored; run_tool does not reopen a closed "
            "action: give this call a new action id"), **exc.details) from None


def _leave_to_its_owner(budget: "CaseBudget", hypothesis_id: str, action_id: str, exc: LedgerError) -> None:
    """Note on ``exc`` (``OPERATION_CONFLICT``: a batch of another tool call is stored under the action)
    that the action was left as it was: the call that stored that batch, or its retry, completes it."""
    try:
        status = budget._status(hypothesis_id, action_id)
    except LedgerError:
        status = None
    exc.add_note(left_as_it_was(action_id, status) if status not in ("reserved", None) else
                 f"case-ledger: action {action_id} was left as it was: the call that stored its tool call, run "
                 "again, completes it")


def left_as_it_was(action_id: str, status: str | None, when: str = "") -> str:
    """The note saying an action an exception met was not closed by it, in the words of its ``status``
    (``failed``: closed with no result; None: no longer reserved; else the status its result gave it)."""
    state = ("was already closed with fail" if status == "failed" else "is not reserved" if status is None
             else f"already had its result ({status})")
    return f"case-ledger: action {action_id} {state}{when}; it was left as it was"


def reserve_or_close(budget: "CaseBudget", hypothesis_id: str, action_id: str, action: str,
                     at: str | None) -> BudgetResult:
    """``reserve`` for a block or ``run_tool``, whose own cleanup covers only what follows it. An
    exception other than a refusal (``KeyboardInterrupt`` arriving as the reservation commits) may
    come after the commit: the action it leaves reserved (for this very tool) is closed with ``fail``
    (:func:`close_failed`, a note on the exception), as an exception in a later step would close it."""
    try:
        return budget.reserve(hypothesis_id, action_id, action, at=at)
    except LedgerError:
        raise
    except BaseException as exc:
        try:
            with budget._session.read() as view:
                state = view.action(view.case()["revision"], hypothesis_id, action_id)
        except Exception as problem:  # the interrupt goes on, whatever this read meets
            state = None
            exc.add_note(f"case-ledger: whether action {action_id} was left reserved could not be read ({problem}); "
                         "pending_actions() says")
        if state is not None and state["status"] == "reserved" and state["action"] == action:
            close_failed(budget, hypothesis_id, action_id, exc, at)
        raise


def close_failed(budget: "CaseBudget", hypothesis_id: str, action_id: str, exc: BaseException,
                 at: str | None, *, recorded_here: bool = False) -> BudgetResult | None:
    """Close the action with ``fail`` for ``exc`` if it still awaits its result (checked in the
    transaction that fails it: a result the caller did not record itself, ``recorded_here``, but a
    nested block, a direct call or another process did, even a moment before, is never discarded);
    else, or if ``fail`` is refused too (the ledger is busy), say so in a note on ``exc`` and return None."""
    try:
        if recorded_here:
            closed = budget.fail(hypothesis_id, action_id, failure_reason(exc), at=at)
        else:
            closed = budget._fail_if_reserved(hypothesis_id, action_id, failure_reason(exc), at=at)
        if not isinstance(closed, BudgetResult):
            exc.add_note(left_as_it_was(action_id, closed))
            return None
        if budget._session.in_batch():  # the exception leaving the batch takes the fail back with the rest
            exc.add_note(f"case-ledger: action {action_id} was closed with fail (no refund) inside a batch: if this "
                         "exception leaves the batch, its rollback undoes the reservation and the fail with everything "
                         "else the batch wrote")
        else:
            exc.add_note(f"case-ledger: action {action_id} was closed with fail (no refund); "
                         "a new attempt needs a new action id")
        return closed
    except Exception as problem:
        exc.add_note(f"case-ledger: closing action {action_id} with fail was refused: {problem}")
        return None


@plain_public_arguments
class CaseBudget(BudgetManager):
    """The budget manager of an open case: :class:`BudgetManager` plus :meth:`run_tool` and
    :meth:`action` (docs/investigator.md)."""

    def __init__(self, session: Session, package_path: Path | None, config: BudgetConfig | None,
                 evidence: Callable[[], EvidenceStore]) -> None:
        super().__init__(session, package_path, config)
        self._evidence = evidence

    def _revision(self) -> int:
        with self._session.read() as view:
            return view.case()["revision"]

    def action_status(self, hypothesis_id: str, action_id: str) -> str | None:
        """The action's status now (``reserved``, ``awaiting_assessment``, ``settled``, ``failed``, …),
        None when the current revision's hypothesis has no such action (it never ran). Writes nothing.
        Errors: ``INVALID_ID`` for an id no action can have; ``UNKNOWN_HYPOTHESIS`` for a hypothesis the
        current revision does not have, ``NOT_INITIALIZED`` before a revision is open (as ``advice``:
        a mistyped id is never read as an action that never ran) (docs/investigator.md)."""
        check_hypothesis_id(hypothesis_id)
        check_action_id(action_id)
        with self._session.read() as view:
            revision = view.case()["revision"]
            state = view.action(revision, hypothesis_id, action_id)
            if state is None:
                opened = view.revision(revision) if revision else None
                if opened is None:
                    raise not_initialized(revision)
                if all(hypothesis["hypothesis_id"] != hypothesis_id for hypothesis in opened["hypotheses"]):
                    raise unknown_hypothesis_error(revision, hypothesis_id)
        return None if state is None else state["status"]

    def _status(self, hypothesis_id: str, action_id: str) -> str | None:
        """:meth:`action_status` without its refusals of a hypothesis (None for it): for the calls
        whose own refusals come in their documented order."""
        with self._session.read() as view:
            state = view.action(view.case()["revision"], hypothesis_id, action_id)
        return None if state is None else state["status"]

    def _fail_if_reserved(self, hypothesis_id: str, action_id: str, reason: str, *,
                         at: str | None = None) -> BudgetResult | str | None:
        """:meth:`fail` the action only if it still awaits its result, checked inside the transaction
        that would fail it, so a result recorded by anyone up to that moment is never discarded.
        Returns the ``fail``'s result, or the action's status when it was not ``reserved`` (None
        when the revision has no such action: nothing written). Errors: those of :meth:`fail`."""
        request = requests.shape_fail(hypothesis_id, action_id, reason)

        def still_reserved(view: Any) -> None:
            state = view.action(view.case()["revision"], hypothesis_id, action_id)
            if state is None or state["status"] != "reserved":
                raise _NotReserved(None if state is None else state["status"])

        try:
            return self._result(self._session.run("fail", request, at=at, config=self.config,
                                                  prepare=still_reserved), (hypothesis_id, action_id))
        except _NotReserved as not_reserved:
            return not_reserved.status

    def run_tool(self, hypothesis_id: str, action_id: str, tool: str, args: Mapping[str, Any], *,
                 at: str | None = None) -> ToolRun:
        """One router action: reserve ``tool`` on ``hypothesis_id`` as ``action_id``, run the reference
        router on ``args`` (a refused call reserves nothing), publish the verified reply as an evidence record and feed it to the
        action, which then awaits ``settle``. Operation and iteration ids come from the action's
        identity (:func:`derived_id`), so calling again after a crash or with the same arguments
        repeats the same operations (``reused`` when all were done); once the batch is stored, a call
        again answers from it without running the router, whatever changed in the inputs since
        (docs/investigator.md). If a step after the
        reservation raises (a refused tool call, ``KeyboardInterrupt``) while the action has no
        result yet, the action is closed with ``fail``; an action that already had its result (a
        repeat with other arguments is ``OPERATION_CONFLICT``) is left as it was. The exception goes on. Errors: those of ``reserve``, ``store_tool_results`` and
        ``record_evidence``; ``INVALID_ARGUMENT`` for ``args`` that are not an object.
        """
        check_hypothesis_id(hypothesis_id)
        check_action_id(action_id)
        check_action_name(tool)
        revision = self._revision()
        iteration_id = derived_id("run", revision, hypothesis_id, action_id)
        request = {"actions": [{"operation_id": derived_id("op", revision, hypothesis_id, action_id),
                                "hypothesis_id": hypothesis_id, "action_id": action_id, "tool": tool,
                                "args": args}]}
        store = self._evidence()
        # a retry after the batch was stored answers from it, whatever changed in the inputs since
        stored = store.stored_batch(iteration_id, request)
        if stored is None and store.iteration_taken(iteration_id):
            # taken since the first look: by another call of this very request (its batch is the
            # answer), or by another tool call's batch (refused before reserving)
            stored = store.stored_batch(iteration_id, request)
            if stored is None:
                raise _taken(self, hypothesis_id, action_id, iteration_id)
        if stored is None:
            try:  # before the router runs for nothing
                _refuse_closed(self, hypothesis_id, action_id)
                _refuse_used_operation(store, hypothesis_id, action_id, request["actions"][0]["operation_id"])
            except LedgerError:  # unless another call of this very request stored its batch since the look
                stored = store.stored_batch(iteration_id, request)
                if stored is None:
                    raise
        if stored is None:  # a read first: a refused tool call, or a result the case cannot take, reserves nothing
            store.check_limits(iteration_id, request, store.query(iteration_id, request).reply)
        reserved = reserve_or_close(self, hypothesis_id, action_id, tool, at)
        try:  # the reply must read the ledger after the reservation
            if stored is None:
                stored = _stored_query(store, iteration_id, request, at, action_id)
            record = stored.records[0]
            fed = _feed(self, hypothesis_id, action_id, record["record_id"], at)
        except BaseException as exc:
            if isinstance(exc, LedgerError) and exc.code == E.OPERATION_CONFLICT and "operation_id" not in exc.details:
                _leave_to_its_owner(self, hypothesis_id, action_id, exc)  # this action's own batch, other args
            else:
                close_failed(self, hypothesis_id, action_id, exc, at)  # only while it has no result yet
            raise
        assert stored.reply is not None
        return ToolRun(hypothesis_id, action_id, tool, record["record_id"], record["novelty_score"],
                       stored.reply["results"][0], fed, reserved.reused and stored.reused and fed.reused)

    # -- an external test's reply, beside request_test (the evidence store's calls, docs/evidence.md) --
    def submit_feedback(self, operation_id: str, reply: Mapping[str, Any], attachments: Mapping[str, Any] | None = None,
                        *, at: str | None = None) -> FeedbackResult:
        """:meth:`EvidenceStore.submit_feedback`: a draft reply to the test of ``operation_id``."""
        return self._evidence().submit_feedback(operation_id, reply, attachments, at=at)

    def confirm_feedback(self, feedback_id: str, *, at: str | None = None) -> FeedbackResult:
        """:meth:`EvidenceStore.confirm_feedback`."""
        return self._evidence().confirm_feedback(feedback_id, at=at)

    def store_feedback(self, operation_id: str, feedback_id: str | None = None, *,
                       at: str | None = None) -> EvidenceResult:
        """:meth:`EvidenceStore.store_feedback` (without ``feedback_id``: the operation's confirmed draft)."""
        return self._evidence().store_feedback(operation_id, feedback_id, at=at)

    def action(self, hypothesis_id: str, action_id: str, action: str, *, at: str | None = None) -> Action:
        """``with budget.action(h, a, "test.automated") as act: act.record(run_tests())``: reserve on
        entering; record inside; any exception (``KeyboardInterrupt`` included) or a block that
        records nothing closes the action with ``fail`` and the exception goes on. Settle after
        the block (``budget.settle`` or ``act.settle``). Entering again after a crash reserves
        nothing new (``reused``)."""
        return Action(self, hypothesis_id, action_id, action, at)
