"""Budget accounting of a case (docs/concepts.md): the Python API.

:class:`BudgetManager` checks the shape of each call, then evaluates the rule of
:mod:`ledger.rules` and appends its event in one ``BEGIN IMMEDIATE`` transaction.
Every method returns a :class:`BudgetResult`; an identical replay returns the
current state with ``reused=True`` and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any, ItemsView, Iterable, Iterator, KeysView

from ..ground.arguments import NotCopied, plain_public_arguments
from ..ground import errors as E
from ..ground.clock import parse_at
from ..ground.config import BudgetConfig
from ..ground.canonical import SAFE_INTEGER_MAX
from ..ground.errors import LedgerError, describe_value, refuses_unfit_calls_of
from ..model.source_refs import resolve_source_refs
from ..rules import budget as rules
from ..rules import budget_requests as requests
from ..rules import feedback as feedback_rules
from ..rules import gate as gate_rules
from ..rules.common import check_action_name, check_hypothesis_id
from ..rules.common import hypothesis_order, not_initialized
from .session import Ran, Session, SessionBase


@refuses_unfit_calls_of
@dataclass(frozen=True)
class BudgetResult:
    """What every budget operation returns (docs/concepts.md).

    * ``package_path`` — the case folder; ``revision`` — the analysis revision;
    * ``seq`` / ``event_ref`` — the event (the original one when ``reused``) and
      the path it exports to; ``None`` for a snapshot of an uninitialized revision;
    * ``state`` — every account of the revision, keyed by hypothesis id, each with
      the ``balances`` view's columns (units are integers);
    * ``reused`` — True for an identical replay (nothing written);
    * ``investigable`` — non-terminal accounts with no pending action (scoped limits are not
      looked at: ``advice`` and ``check`` say whether a reservation would be accepted now,
      docs/scopes.md);
    * ``ready_for_evaluation`` — every account terminal and nothing pending;
    * ``action`` — the touched action's state (reserve/record/settle/fail).
    """

    package_path: str
    revision: int
    seq: int | None
    event_ref: str | None
    state: dict[str, dict[str, Any]]
    reused: bool
    investigable: list[str]
    ready_for_evaluation: bool
    action: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (what journal result lines carry)."""
        out = {
            "package_path": self.package_path, "revision": self.revision, "seq": self.seq,
            "event_ref": self.event_ref, "state": {h: dict(a) for h, a in self.state.items()},
            "reused": self.reused, "investigable": list(self.investigable),
            "ready_for_evaluation": self.ready_for_evaluation,
        }
        if self.action is not None:
            out["action"] = dict(self.action)
        return out


#: The ``KeyError`` of ``reading["refusal"]`` and ``reading.get("refusal")``: the refusal is an attribute.
REFUSAL_IS_AN_ATTRIBUTE = ("'refusal' is not one of the reading's values: it is the attribute reading.refusal "
                           "(a LedgerError, or None)")


@refuses_unfit_calls_of
@dataclass(frozen=True)
class GateReading:
    """The answer of a soft-gate read (``check``, ``price_signal``, ``remaining``, ``advice``): ``values``
    (also reachable as ``reading["key"]``) and ``seq``, the newest event it saw; ``reused`` is always
    True (nothing was written). ``refusal``: for ``check`` when ``allowed`` is false, the
    ``LedgerError`` reserving the action would meet now (for a used-up limit ``LIMIT_EXCEEDED``, its
    details naming ``scope``, ``dimension``, ``declared`` and ``consumed_after``); for ``advice`` when
    ``investigable`` is false, the one a reservation of the policy's cheapest action would meet;
    None otherwise. ``notes``: for ``check`` and ``price_signal``, sentences on what may surprise in
    the action's quoted price (a test's name quoted at ``test_costs``, a name the policy's
    ``action_costs`` lacks); empty otherwise. Neither is one of the ``values`` (docs/scopes.md)."""

    values: dict[str, Any]
    seq: int
    reused: bool = True
    refusal: LedgerError | None = None
    notes: tuple[str, ...] = ()

    # A read-only mapping of its values: ``reading["tier"]``, ``reading.get("tier")``, ``"tier" in reading``,
    # ``dict(reading)``, ``reading.items()`` and iteration (the keys) all behave as on ``to_dict()``
    # (``values`` is the dict itself, not a method).
    def __getitem__(self, key: str) -> Any:
        if key == "refusal" and key not in self.values:
            raise KeyError(REFUSAL_IS_AN_ATTRIBUTE)
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        # "refusal" goes through __getitem__'s KeyError: None here would read as "nothing refused"
        return self[key] if key in self.values or key == "refusal" else default

    def items(self) -> ItemsView[str, Any]:
        return self.values.items()

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __contains__(self, key: object) -> bool:
        return key in self.values

    def keys(self) -> KeysView[str]:
        return self.values.keys()

    def to_dict(self) -> dict[str, Any]:
        return dict(self.values)


ACCOUNT_FIELDS = ("hypothesis_id", "initial_units", "granted_units", "spent_units", "rewarded_units",
                  "remaining_units", "status", "terminal_reason", "pending_action_id",
                  "low_information_streak", "settled_actions", "failed_actions")


_account_values = itemgetter(*ACCOUNT_FIELDS)


def _state(accounts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Accounts by hypothesis id, in hypothesis order, each with the ``balances`` columns in order."""
    return {h: dict(zip(ACCOUNT_FIELDS, _account_values(accounts[h]))) for h in hypothesis_order(accounts)}


@plain_public_arguments
class BudgetManager(NotCopied):
    """Budget operations on one case. ``config=None`` uses the policy frozen for the revision.

    With a ``config`` whose policy differs from the frozen one, identical replays
    and snapshots still work and every new operation fails with
    ``BUDGET_POLICY_CHANGED``. ``at`` (RFC 3339 UTC) sets the event time.
    """

    def _bound_to_a_ledger(self) -> bool:
        return isinstance(self._session, Session)

    def __init__(self, session: SessionBase, package_path: Path | None, config: BudgetConfig | None = None) -> None:
        if config is not None and not isinstance(config, BudgetConfig):
            raise LedgerError(E.INVALID_ARGUMENT, f"config must be a BudgetConfig (BudgetConfig.load(path) or "
                              f"BudgetConfig.from_mapping(...)) or None, got {type(config).__name__}")
        self._session = session
        self.package_path = package_path
        self.config = config

    def _run(self, name: str, request: dict[str, Any], at: str | None, action: tuple[str, str] | None = None,
             inputs: dict[str, Any] | None = None) -> BudgetResult:
        return self._result(self._session.run(name, request, at=at, config=self.config, inputs=inputs), action)

    def _result(self, ran: Ran, action: tuple[str, str] | None = None) -> BudgetResult:
        seq = ran.seq
        if ran.appended:
            first = ran.appended[0]  # the operation's own event; limit.approaching may follow it
            body, seq = first.body, first.seq
            revision, ref = body["revision"], first.event_ref
            accounts = {a["hypothesis_id"]: a for a in body["accounts"]}
            action_state = body.get("action")
        else:
            with self._session.read() as view:
                revision = view.case()["revision"]
                accounts = view.accounts(revision)
                ref = self._session.event_ref(seq)
                action_state = view.action(revision, *action) if action else None
        return BudgetResult(
            package_path=str(self.package_path), revision=revision, seq=seq, event_ref=ref,
            state=_state(accounts), reused=ran.reused,
            investigable=rules.investigable(accounts), ready_for_evaluation=rules.ready_for_evaluation(accounts),
            action=action_state,
        )

    def initialize(self, *, at: str | None = None) -> BudgetResult:
        """Open one account per hypothesis of the current revision (docs/concepts.md).

        Errors: ``CASE_STATE``, ``LIMIT_REACHED``. Repeating returns ``reused=True``
        and never refills anything, whatever the config: a repeat is a replay, and replays never
        compare policies, so a manager whose config differs from the frozen policy is told so
        by its first new operation (``BUDGET_POLICY_CHANGED``), not here; see
        :meth:`policy_changed` to ask first.
        """
        return self._run("initialize", requests.shape_initialize(), at)

    def policy_changed(self) -> bool:
        """True when this manager's config differs from the policy frozen for the current revision
        (its new operations would fail with ``BUDGET_POLICY_CHANGED``); False without a config or a
        budget. Writes nothing."""
        if self.config is None:
            return False
        with self._session.read() as view:
            head = view.budget_head(view.case()["revision"])
        return head is not None and head["policy_sha256"] != self.config.policy_sha256

    def frozen_policy(self, revision: int | None = None) -> BudgetConfig | None:
        """The policy ``revision``'s ``initialize`` froze (default: the current revision), by which its
        operations are priced and scored: the config it was given, else the previous revision's policy,
        else the built-in defaults (docs/concepts.md). None before that ``initialize``. Writes nothing."""
        if revision is not None and (type(revision) is not int or not 1 <= revision <= SAFE_INTEGER_MAX):
            raise LedgerError(E.INVALID_ARGUMENT, f"revision must be a revision number (an integer from 1) or None, "
                              f"got {describe_value(revision)}")
        with self._session.read() as view:
            revision = view.case()["revision"] if revision is None else revision
            return None if view.budget_head(revision) is None else view.policy_config(revision)

    def reserve(self, hypothesis_id: str, action_id: str, action: str, *, at: str | None = None) -> BudgetResult:
        """Debit ``action``'s cost from ``hypothesis_id`` before the tool runs.

        ``action`` is a tool name such as ``source.read_context``; its cost is
        ``action_costs[action]`` or ``default_action_cost``. Errors (in order):
        ``INVALID_ID``, ``OPERATION_CONFLICT``, ``CASE_STATE``, ``NOT_INITIALIZED``,
        ``UNKNOWN_HYPOTHESIS``, ``BUDGET_POLICY_CHANGED``, ``ACCOUNT_TERMINAL``,
        ``ACTION_PENDING``, ``INSUFFICIENT_BUDGET``, ``LIMIT_REACHED``, ``LIMIT_EXCEEDED`` (a scope's
        limit, docs/scopes.md).
        """
        request = requests.shape_reserve(hypothesis_id, action_id, action)
        return self._run("reserve", request, at, (hypothesis_id, action_id))

    def record_result(self, hypothesis_id: str, action_id: str, evidence: Any,
                      source_refs: Iterable[str] | None = None, *, cost_usd_millicents: int | None = None,
                      at: str | None = None) -> BudgetResult:
        """Store ``evidence`` (any JSON value, ≤ 1 MiB canonical) for a reserved action.

        ``source_refs`` are relative paths of regular files inside the package,
        stored with their sha256. Novelty v1 is computed now (new and non-empty →
        ``new_evidence_score``, else 0); nothing is refunded until ``settle``.
        ``cost_usd_millicents`` is external money the tool reported (an integer ≥ 0,
        1/1000 of a US cent); it counts against ``cost_usd_millicents`` limits from now on.
        Errors: ``INVALID_ID``, ``INVALID_JSON``, ``INVALID_ARGUMENT`` (a ``cost_usd_millicents`` that
        is not an integer ≥ 0), ``LIMIT_REACHED``, ``SOURCE_REF_INVALID``, then the order of docs/concepts.md up to ``ACTION_CLOSED``.
        """
        refs = [] if source_refs is None else source_refs
        request, payload = requests.shape_record_result(
            hypothesis_id, action_id, evidence, refs,
            evidence_bytes_max=self._session.limits["evidence_payload_bytes_max"],
            cost_usd_millicents=cost_usd_millicents)
        if self.package_path is None and request["source_refs"]:
            raise LedgerError(E.SOURCE_REF_INVALID, "source references need a package folder to resolve in, "
                              "and this case has none (an in-memory case without a package)")
        sources = resolve_source_refs(self.package_path, request["source_refs"]) if request["source_refs"] else []
        return self._run("record_result", request, at, (hypothesis_id, action_id),
                         inputs={"evidence": payload, "sources": sources})

    def record_evidence(self, hypothesis_id: str, action_id: str, record_id: str, *,
                        at: str | None = None) -> BudgetResult:
        """Feed evidence record ``record_id`` (``E000001``…) to the reserved action: it awaits
        assessment with novelty ``min(new_evidence_score, record novelty)``; nothing is refunded yet.
        Errors: ``INVALID_ID``, the order of docs/concepts.md, ``INVALID_ARGUMENT`` (unknown record),
        ``NO_RESERVATION`` (a record of another reservation, or a result already recorded).
        """
        request = requests.shape_record_evidence(hypothesis_id, action_id, record_id)
        return self._run("record_evidence", request, at, (hypothesis_id, action_id))

    def request_test(self, hypothesis_id: str, action_id: str, kind: str, operation_id: str, *,
                     at: str | None = None) -> BudgetResult:
        """Reserve an external test (``kind`` ``human`` or ``automated``: the action ``test.human`` or
        ``test.automated``, priced by the policy's ``test_costs``) and bind it to ``operation_id``.

        Waiting costs nothing; the case may move to ``BLOCKED`` meanwhile with every balance and
        pending reservation kept. Its reply comes through the evidence store's ``submit_feedback``,
        ``confirm_feedback`` and ``store_feedback``, then ``record_evidence`` and ``settle``.
        Errors: ``INVALID_ID``, ``INVALID_ARGUMENT`` (kind), then those of :meth:`reserve`, with
        ``OPERATION_CONFLICT`` also for an ``operation_id`` already used.
        """
        request = feedback_rules.shape_request_test(hypothesis_id, action_id, kind, operation_id)
        return self._run("request_test", request, at, (hypothesis_id, action_id))

    def settle(self, hypothesis_id: str, action_id: str, semantic_score: int, reason: str,
               *, at: str | None = None) -> BudgetResult:
        """Close an assessed action and refund (docs/concepts.md).

        ``semantic_score`` is an ``int`` 0–100 (no bool, no float); ``reason`` a
        non-blank string. ``information = min(novelty, semantic_score)``;
        ``reward = min(cost * max_reward_bps * information // 1_000_000, cost - 1)``.
        Errors: ``INVALID_SCORE``, ``REASON_REQUIRED``, …, ``RESULT_MISSING``.
        """
        request = requests.shape_settle(hypothesis_id, action_id, semantic_score, reason)
        return self._run("settle", request, at, (hypothesis_id, action_id))

    def fail(self, hypothesis_id: str, action_id: str, reason: str, *, at: str | None = None) -> BudgetResult:
        """Close a pending action with no refund; counts as a low-information step.

        Errors: ``REASON_REQUIRED``, …, ``UNKNOWN_ACTION``, ``ACTION_CLOSED``.
        """
        request = requests.shape_fail(hypothesis_id, action_id, reason)
        return self._run("fail", request, at, (hypothesis_id, action_id))

    def reject(self, hypothesis_id: str, reason: str, *, at: str | None = None) -> BudgetResult:
        """Mark the account ``rejected`` (terminal), no refund, nothing deleted.

        Errors: ``REASON_REQUIRED``, …, ``ACCOUNT_TERMINAL``, ``ACTION_PENDING``.
        """
        return self._run("reject", requests.shape_reject(hypothesis_id, reason), at)

    def grant(self, hypothesis_id: str, units: int, issuer: str, reason: str, grant_id: str,
              *, at: str | None = None) -> BudgetResult:
        """Add ``units`` (an integer ≥ 1) to an account: the only way to add units. Only the revision's
        issuer (the actor that initialized its budget) may; a terminal account stays terminal.
        Identity ``(revision, grant, hypothesis_id, grant_id)``. Resets the price signal's scarcity.
        Errors: ``INVALID_ARGUMENT``, ``INVALID_ID``, ``REASON_REQUIRED``, ``OPERATION_CONFLICT``,
        ``CASE_STATE``, ``NOT_INITIALIZED``, ``UNKNOWN_HYPOTHESIS``, ``BUDGET_POLICY_CHANGED``,
        ``AUTHORITY_DENIED``, ``LIMIT_REACHED``.
        """
        request = requests.shape_grant(hypothesis_id, units, issuer, reason, grant_id)
        return self._run("grant", request, at)

    def check(self, hypothesis_id: str, action: str, *, at: str | None = None) -> "GateReading":
        """The soft gate: ``allowed``, ``cost``, ``remaining`` (the tightest of the account and every
        ``units`` limit holding it), ``pct_remaining``, ``tier`` (``full``/``shallow``/``deferred``) and
        ``scarcity_bps`` for reserving ``action`` now (``at``: the time ``duration_ms`` limits are judged
        at). When not ``allowed``, the reading's ``refusal`` is the ``LedgerError`` reserving ``action``
        would meet now (``LIMIT_EXCEEDED`` naming the limit's scope, dimension and figures, …; for
        ``test.human``/``test.automated``, quoted at ``test_costs``, the one ``request_test`` would
        meet: docs/concepts.md, "Choices where the rules leave room"). Writes
        nothing and never raises for lack of budget. Errors: ``INVALID_ID``, ``NOT_INITIALIZED``,
        ``UNKNOWN_HYPOTHESIS``."""
        check_hypothesis_id(hypothesis_id)
        check_action_name(action)
        with self._session.read() as view:
            moment = max(parse_at(at) if at is not None else self._session.clock(), view.head()[2])
            values, refusal, notes = gate_rules.check(view, hypothesis_id, action, moment, self._session.limits)
            return GateReading(values, view.head()[0], refusal=refusal, notes=notes)

    def price_signal(self, hypothesis_id: str, action: str, *, at: str | None = None) -> "GateReading":
        """``{cost, resource_cost, scarcity_bps}``: ``scarcity_bps = 10000 + (max_scarcity_bps - 10000) *
        depletion_pct // 100`` with ``depletion_pct = 100 -`` the lowest ``pct_remaining`` since the
        last grant, ``resource_cost = ceil(cost * scarcity_bps / 10000)``. Advisory: the debited cost is
        always ``cost``. Writes nothing. Errors: ``INVALID_ID``, ``NOT_INITIALIZED``, ``UNKNOWN_HYPOTHESIS``."""
        check_hypothesis_id(hypothesis_id)
        check_action_name(action)
        if at is not None:
            parse_at(at)
        with self._session.read() as view:
            values, notes = gate_rules.price_signal(view, hypothesis_id, action)
            return GateReading(values, view.head()[0], notes=notes)

    def remaining(self, hypothesis_id: str) -> "GateReading":
        """``{budget, spent, remaining, pct_remaining}`` of an account (``budget = initial + granted``,
        ``spent`` net of refunds, ``spent + remaining = budget``). Writes nothing. Errors: ``INVALID_ID``,
        ``NOT_INITIALIZED``, ``UNKNOWN_HYPOTHESIS``."""
        check_hypothesis_id(hypothesis_id)
        with self._session.read() as view:
            return GateReading(gate_rules.remaining(view, hypothesis_id), view.head()[0])

    def advice(self, hypothesis_id: str, *, at: str | None = None) -> "GateReading":
        """Everything an agent's prompt needs about ``hypothesis_id`` in one read, at the same cost
        whatever the length of the history: ``status``, ``pending_action_id``, ``investigable``,
        ``remaining_units``, ``budget``, ``pct_remaining``, ``tier``, ``scarcity_bps``,
        ``remaining_actions``, ``remaining_duration_ms``, ``remaining_cost_usd_millicents`` (the
        tightest limit holding the account, None when there is none), ``limited_by`` (dimension →
        scope) and ``ready_for_evaluation``. ``investigable`` and ``tier`` agree with ``check`` of the
        policy's cheapest action: a used-up limit makes the account not investigable and ``deferred``,
        and the reading's ``refusal`` says why (so this ``investigable`` can be false for an account
        that ``BudgetResult.investigable`` lists: that list does not look at limits). Writes nothing.
        Errors: ``INVALID_ID``, ``NOT_INITIALIZED``, ``UNKNOWN_HYPOTHESIS``."""
        check_hypothesis_id(hypothesis_id)
        with self._session.read() as view:
            moment = max(parse_at(at) if at is not None else self._session.clock(), view.head()[2])
            values, refusal = gate_rules.advice(view, hypothesis_id, moment, self._session.limits)
            return GateReading(values, view.head()[0], refusal=refusal)

    def pending_actions(self) -> list[dict[str, Any]]:
        """The current revision's actions still open, in hypothesis order: one per account with a
        ``pending_action_id`` (an account has at most one), each the action's state as a budget
        result's ``action`` gives it (``hypothesis_id``, ``action_id``, ``action``, ``cost_units``,
        ``status`` ``reserved`` or ``awaiting_assessment``, ``novelty_score``, …) and
        ``test_operation_id``: the operation a test reserved by :meth:`request_test` is bound to (its
        reply comes through the evidence store's feedback calls), None for any other action; and
        ``bound_record_id``: the evidence record a stored tool call (:meth:`run_tool`, or
        ``store_tool_results`` under the action) published for a ``reserved`` action, whose result
        comes only through :meth:`record_evidence` of it (``NO_RESERVATION`` for any other), else None. What a
        loop started again after a crash takes up (the same ids and action name reserve nothing new;
        a requested test, through its reply) or gives up with :meth:`fail` (docs/investigator.md,
        "After a restart"). ``[]`` before ``initialize``. Writes nothing; costs the same at any
        history length."""
        with self._session.read() as view:
            revision = view.case()["revision"]
            accounts = view.accounts(revision)
            pending = [(h, accounts[h]["pending_action_id"]) for h in hypothesis_order(accounts)
                       if accounts[h]["pending_action_id"] is not None]
            return [_pending_action(view, revision, h, action_id) for h, action_id in pending]

    def snapshot(self) -> BudgetResult:
        """Replay and validate the current revision's budget history; write nothing.

        Checks every budget event of the revision: hash of its stored bytes,
        parent link, ``remaining = initial + granted - spent + rewarded >= 0``,
        ``0 <= reward < cost``, and that the ``balances`` view equals the newest
        state. Raises ``INTEGRITY_ERROR`` naming the first bad ``seq``, and
        ``NOT_INITIALIZED`` when the current revision has no budget yet.
        """
        revision, last_seq, accounts, ref = self._session.budget_snapshot()
        if last_seq is None:
            raise not_initialized(revision)
        return BudgetResult(
            package_path=str(self.package_path), revision=revision, seq=last_seq, event_ref=ref,
            state=_state(accounts), reused=True,
            investigable=rules.investigable(accounts), ready_for_evaluation=rules.ready_for_evaluation(accounts),
        )


def _pending_action(view: Any, revision: int, h: str, action_id: str) -> dict[str, Any]:
    """One of :meth:`BudgetManager.pending_actions`: the action's state, its test's operation, the
    record bound to it while it awaits that record."""
    action = view.action(revision, h, action_id)
    bound = view.evidence_binding(revision, h, action_id) if action["status"] == "reserved" else None
    return {**action, "test_operation_id": view.test_of_action(revision, h, action_id),
            "bound_record_id": None if bound is None else bound[0]}
