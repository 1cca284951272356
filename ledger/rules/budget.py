"""Budget accounting rules (docs/concepts.md): initialize, reserve, record_result, settle, fail, reject
(their requests are shaped in :mod:`ledger.rules.budget_requests`).

Every rule re-derives the full state of every account of the revision after its
event; the event body carries it, so a reader never needs to replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..ground import errors as E
from ..ground.canonical import SAFE_INTEGER_MAX, canonical_sha256
from ..ground.config import BudgetConfig
from ..ground.errors import LedgerError, limit_reached
from .common import (ACTION_AWAITING, ACTION_FAILED, ACTION_RESERVED, ACTION_SETTLED, CLOSED_ACTION_STATUSES,
                     MUTABLE_STATES, STATUS_ABANDONED, STATUS_EXHAUSTED, STATUS_INVESTIGATING, STATUS_NEW,
                     STATUS_REJECTED, TERMINAL_STATUSES, REASON_BELOW_FLOOR, REASON_LOW_INFORMATION, Context, Draft,
                     LedgerView, Reused, account_terminal_error, case_state_error, action_pending_error,
                     insufficient_budget_error, not_initialized, operation_key, hypothesis_order, replay_or_conflict,
                     require_case, sorted_accounts, unknown_hypothesis_error, Outcome, check_budget_room,
                     spent_limit_error)
from . import scopes as scope_rules
from .novelty import result_novelty


def reward_units(cost_units: int, max_reward_bps: int, information_score: int) -> int:
    """docs/concepts.md: ``min(floor(cost * bps * information / 1_000_000), cost - 1)`` — always ``< cost``."""
    return min(cost_units * max_reward_bps * information_score // 1_000_000, cost_units - 1)


def _remaining(account: Mapping[str, Any]) -> int:
    return (account["initial_units"] + account["granted_units"]
            - account["spent_units"] + account["rewarded_units"])


def _apply_status_rules(account: dict[str, Any], policy: BudgetConfig) -> None:
    """docs/concepts.md, after initialization and after every settle or fail. Exhaustion wins."""
    if account["status"] in TERMINAL_STATUSES:
        return
    if account["remaining_units"] < policy.affordability_floor_units:
        account["status"] = STATUS_EXHAUSTED
        account["terminal_reason"] = REASON_BELOW_FLOOR
    elif account["low_information_streak"] >= policy["max_low_information_steps"]:
        account["status"] = STATUS_ABANDONED
        account["terminal_reason"] = REASON_LOW_INFORMATION


@dataclass
class _BudgetContext:
    case: dict[str, Any]
    revision: int
    policy: BudgetConfig
    policy_sha256: str
    accounts: dict[str, dict[str, Any]]
    batch_sha256: str


def _budget_prelude(view: LedgerView, request: Mapping[str, Any], config: BudgetConfig | None,
                    key_parts: Sequence[str | None], *, key_op: str | None = None,
                    changed_goes_on: bool = False) -> tuple[Reused | None, _BudgetContext | None, str]:
    """Identity → CASE_STATE → NOT_INITIALIZED → UNKNOWN_HYPOTHESIS → BUDGET_POLICY_CHANGED. With
    ``changed_goes_on`` the same identity with other inputs is no ``OPERATION_CONFLICT``: the checks go
    on, and the operation's own refusal answers (a second ``reject``: ``ACCOUNT_TERMINAL``)."""
    case = require_case(view)
    revision = case["revision"]
    key = operation_key(revision, key_op or request["op"], *key_parts)
    reused = replay_or_conflict(view, key, request, conflict=not changed_goes_on)
    if reused is not None:
        return reused, None, key
    if case["state"] not in MUTABLE_STATES:
        raise case_state_error("a budget change", "GENERATING_HYPOTHESES or INVESTIGATING_HYPOTHESES", case["state"])
    head = view.budget_head(revision)
    if head is None:
        raise not_initialized(revision)
    accounts = head["accounts"]
    hypothesis_id = request.get("hypothesis_id")
    if hypothesis_id is not None and hypothesis_id not in accounts:
        raise unknown_hypothesis_error(revision, hypothesis_id)
    policy_sha256 = head["policy_sha256"]
    if config is not None and config.policy_sha256 != policy_sha256:
        raise LedgerError(
            E.BUDGET_POLICY_CHANGED,
            f"the configured policy differs from the one frozen for revision {revision}; "
            "use the frozen policy: give no config (case.budget() in Python, no --config on the command line) or the same one",
            frozen_policy_sha256=policy_sha256, configured_policy_sha256=config.policy_sha256,
        )
    ctx = _BudgetContext(case, revision, view.policy_config(revision), policy_sha256,
                         accounts, head["hypothesis_batch_sha256"])
    return None, ctx, key


def _budget_fields(ctx: _BudgetContext, event_type: str, accounts: Mapping[str, Any],
                   **extra: Any) -> dict[str, Any]:
    fields = {
        "format": "budget-event-v1", "type": event_type, "case_id": ctx.case["case_id"],
        "package_id": ctx.case["package_id"], "revision": ctx.revision,
        "hypothesis_batch_sha256": ctx.batch_sha256, "policy_sha256": ctx.policy_sha256,
        "accounts": sorted_accounts(accounts),
    }
    fields.update(extra)
    return fields


def _budget_draft(ctx: _BudgetContext, event_type: str, key: str, request: Mapping[str, Any],
                  accounts: Mapping[str, Any], *, contents: dict[str, bytes] | None = None,
                  **extra: Any) -> Draft:
    """The budget event: every account after it, and the accounts it makes terminal."""
    terminated = tuple(
        h for h in hypothesis_order(accounts)
        if accounts[h]["status"] in TERMINAL_STATUSES
        and (h not in ctx.accounts or ctx.accounts[h]["status"] not in TERMINAL_STATUSES)
    )
    return Draft(event_type, "budget", ctx.revision, key, dict(request), _budget_fields(ctx, event_type, accounts, **extra),
                 contents or {}, terminated)


def _require_action(view: LedgerView, ctx: _BudgetContext, hypothesis_id: str,
                    action_id: str, *, verb: str) -> dict[str, Any]:
    action = view.action(ctx.revision, hypothesis_id, action_id)
    if action is None:
        raise LedgerError(
            E.UNKNOWN_ACTION, f"no action {action_id} was reserved on {hypothesis_id} in revision {ctx.revision}",
            hypothesis_id=hypothesis_id, action_id=action_id,
        )
    if action["status"] in CLOSED_ACTION_STATUSES:
        raise LedgerError(
            E.ACTION_CLOSED, f"cannot {verb} {hypothesis_id}/{action_id}: it is already {action['status']}",
            hypothesis_id=hypothesis_id, action_id=action_id,
        )
    return action


def _require_unanswered(view: LedgerView, ctx: _BudgetContext, action: Mapping[str, Any]) -> str | None:
    """``NO_RESERVATION`` when ``action`` already has its result (docs/errors.md): a caller's
    mistake refused by the rule, before storage's append-only keys would see it. Returns the
    operation id when the action is a requested test (its result comes only through its
    confirmed feedback, docs/evidence.md), else None."""
    h, action_id = action["hypothesis_id"], action["action_id"]
    if action["status"] != ACTION_RESERVED:
        raise LedgerError(E.NO_RESERVATION, f"{h}/{action_id} already has its result ({action['status']}); "
                          "settle or fail it", hypothesis_id=h, action_id=action_id)
    return view.test_of_action(ctx.revision, h, action_id)


def _open_account(ctx: _BudgetContext, h: str) -> dict[str, Any]:
    """A copy of the account, if it may start something new: ``ACCOUNT_TERMINAL``, then
    ``ACTION_PENDING`` (docs/errors.md order; reserve and reject only)."""
    account = dict(ctx.accounts[h])
    if account["status"] in TERMINAL_STATUSES:
        raise account_terminal_error(h, account)
    if account["pending_action_id"] is not None:
        raise action_pending_error(h, account)
    return account


def initialize(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Reused:
    """Open one account per hypothesis of the current revision and freeze the policy.

    The policy is ``config`` if given, else the previous revision's frozen policy,
    else the defaults. Repeating returns :class:`Reused` and never refills.
    Errors: ``CASE_STATE``, ``INTEGRITY_ERROR`` (an incomplete batch), ``LIMIT_REACHED``.
    """
    case = require_case(view)
    revision = case["revision"]
    key = operation_key(revision, "initialize")
    reused = replay_or_conflict(view, key, request)
    if reused is not None:
        return reused
    if case["state"] not in MUTABLE_STATES:
        raise case_state_error("initialize", "GENERATING_HYPOTHESES or INVESTIGATING_HYPOTHESES", case["state"])
    info = view.revision(revision)
    hypotheses = info["hypotheses"] if info else []
    ids = [h["hypothesis_id"] for h in hypotheses]
    if (not hypotheses or ids != [f"H{i}" for i in range(1, len(ids) + 1)]
            or any(h["allocation_units"] < 1 for h in hypotheses)
            or len(hypotheses) > info["max_hypotheses"]):
        raise LedgerError(E.INTEGRITY_ERROR, f"the hypothesis batch of revision {revision} is incomplete")
    config = context.config
    if config is None:
        previous = view.previous_policy(revision)
        config = BudgetConfig.from_mapping(previous[0]) if previous else BudgetConfig()
    check_budget_room(view, context.limits)
    accounts: dict[str, dict[str, Any]] = {}
    for h in hypotheses:
        account = {
            "hypothesis_id": h["hypothesis_id"], "initial_units": h["allocation_units"],
            "granted_units": 0, "spent_units": 0, "rewarded_units": 0,
            "remaining_units": h["allocation_units"], "status": STATUS_NEW, "terminal_reason": None,
            "pending_action_id": None, "low_information_streak": 0,
            "settled_actions": 0, "failed_actions": 0,
        }
        _apply_status_rules(account, config)
        accounts[h["hypothesis_id"]] = account
    # no account before this event: one an allocation below the affordability floor ends at once
    # is terminated by it (a terminations row, as for any other budget event)
    ctx = _BudgetContext(case, revision, config, config.policy_sha256, {}, info["hypothesis_batch_sha256"])
    return _budget_draft(ctx, "budget.initialized", key, request, accounts, policy=config.to_dict())


def reserve(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Outcome | Reused:
    """Debit an action's cost before it runs (docs/concepts.md), inside every scoped limit (docs/scopes.md).

    Errors in order: ``OPERATION_CONFLICT``, ``CASE_STATE``, ``NOT_INITIALIZED``,
    ``UNKNOWN_HYPOTHESIS``, ``BUDGET_POLICY_CHANGED``, ``ACCOUNT_TERMINAL``,
    ``ACTION_PENDING``, ``LIMIT_EXCEEDED`` (after recording ``limit.exceeded`` and applying
    ``on_exhausted``: an :class:`Outcome` with a refusal), ``INSUFFICIENT_BUDGET``, ``LIMIT_REACHED``.
    A reservation that brings a scope to its warning ratio is followed by ``limit.approaching``.
    """
    return reserve_priced(view, request, context, request["action"], lambda policy: policy.cost_units(request["action"]),
                          "budget.reserved")


def reserve_priced(view: LedgerView, request: Mapping[str, Any], context: Context, action_name: str,
                   price: Callable[[BudgetConfig], int], event_type: str,
                   check: Callable[[], None] | None = None, **extra: Any) -> Draft | Outcome | Reused:
    """The reservation step shared by ``reserve`` and ``request_test``: ``price(policy)`` is the
    cost; ``check`` runs after ``ACTION_PENDING`` (an operation's own refusals); ``extra``
    fields go into the event. Its identity is the reservation's, ``revision:reserve:h:action_id``,
    so one action id is never reserved twice by either operation."""
    h, action_id = request["hypothesis_id"], request["action_id"]
    reused, ctx, key = _budget_prelude(view, request, context.config, (h, action_id), key_op="reserve")
    if reused is not None:
        return reused
    account = _open_account(ctx, h)
    if check is not None:
        check()
    cost = price(ctx.policy)
    exceeded = scope_rules.enforce(view, ctx.revision, h, cost, context.at)
    if exceeded is not None:
        return _limit_outcome(view, ctx, exceeded, request, h, action_name, context.limits)
    if cost > account["remaining_units"]:
        raise insufficient_budget_error(action_name, cost, h, account["remaining_units"])
    check_budget_room(view, context.limits, ctx.accounts, opens_action=True)
    over = spent_limit_error(h, account, cost)
    if over is not None:
        raise over
    account["spent_units"] += cost
    account["remaining_units"] = _remaining(account)
    account["pending_action_id"] = action_id
    if account["status"] == STATUS_NEW:
        account["status"] = STATUS_INVESTIGATING
    accounts = {**ctx.accounts, h: account}
    action = {"hypothesis_id": h, "action_id": action_id, "action": action_name, "cost_units": cost,
              "status": ACTION_RESERVED, "novelty_score": None, "semantic_score": None,
              "information_score": None, "reward_units": None}
    draft = _budget_draft(ctx, event_type, key, request, accounts, action=action, **extra)
    warnings = scope_rules.warnings_after(view, request, context.at, ctx.revision, h, {"units": cost, "actions": 1})
    return scope_rules.with_following(draft, warnings)


def record_result(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Outcome | Reused:
    """Store the evidence of a reserved action and compute novelty v1 (docs/concepts.md); under
    ``novelty_mode = "atoms"`` evidence carrying an ``atoms`` list scores the share of its atoms not
    returned before anywhere in the case (capped by ``new_evidence_score``).

    ``evidence`` is the payload's canonical bytes; ``sources`` the resolved
    ``[{"path", "sha256"}]`` of ``source_refs``. Nothing is refunded yet.
    Errors: the prelude's, ``UNKNOWN_ACTION``, ``ACTION_CLOSED``, ``LIMIT_REACHED``, ``NO_RESERVATION`` (docs/errors.md).
    """
    h, action_id = request["hypothesis_id"], request["action_id"]
    reused, ctx, key = _budget_prelude(view, request, context.config, (h, action_id))
    if reused is not None:
        return reused
    action = dict(_require_action(view, ctx, h, action_id, verb="record a result for"))
    test_operation = _require_unanswered(view, ctx, action)
    # a stored batch's result is never replaced; not on replay: an older ledger's swap was accepted in its day
    bound = view.evidence_binding(ctx.revision, h, action_id) if context.limits is not None else None
    if test_operation is not None or bound is not None:
        why = (f"the test requested under operation {test_operation}: its result comes only through its confirmed "
               "feedback (store_feedback, then record_evidence)" if test_operation is not None else f"bound to the "
               f"stored batch of operation {bound[1]}: its result comes only through record_evidence of {bound[0]}")
        raise LedgerError(E.NO_RESERVATION, f"{h}/{action_id} is {why}", hypothesis_id=h, action_id=action_id,
                          operation_id=test_operation if test_operation is not None else bound[1])
    # no room check: the reserve kept room for this event and the settle (check_budget_room)
    content_sha256 = request["evidence_sha256"]
    seen = view.content_seen(content_sha256)
    evidence = context.inputs["evidence"]
    limits = context.limits
    if not seen and limits is not None:
        stored = view.content_bytes_total()
        if stored + len(evidence) > limits["evidence_content_bytes_max"]:
            raise limit_reached("evidence_content_bytes_max", f"distinct evidence content would reach "
                                f"{stored + len(evidence)} bytes; the limit is {limits['evidence_content_bytes_max']}")
    money = request.get("cost_usd_millicents")
    if money and limits is not None:  # not on replay: an older ledger's totals were accepted in their day
        reported = view.money_consumed(None, None)  # the case's total bounds its revision's and account's
        if reported + money > SAFE_INTEGER_MAX:
            # its running totals are stored (money_totals) and must stay exact integers (docs/concepts.md)
            raise LedgerError(E.LIMIT_REACHED, f"the case has reported {reported} millicents; {money} more would pass "
                              "2**53-1, the largest exact JSON integer (a fixed limit, no setting changes it)",
                              hypothesis_id=h, limit="cost_usd_millicents_total")
    novelty = result_novelty(view, evidence, seen, ctx.policy)
    action.update(status=ACTION_AWAITING, novelty_score=novelty)
    extra = {} if money is None else {"cost_usd_millicents": money}  # absent: the event's bytes as before
    draft = _budget_draft(ctx, "budget.result_recorded", key, request, ctx.accounts,
                          contents={} if seen else {content_sha256: evidence}, action=action,
                          evidence_sha256=content_sha256, evidence_bytes=len(evidence),
                          sources=[dict(s) for s in context.inputs["sources"]], **extra)
    if not money:
        return draft
    warnings = scope_rules.warnings_after(view, request, context.at, ctx.revision, h, {"cost_usd_millicents": money})
    return scope_rules.with_following(draft, warnings)


def record_evidence(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Reused:
    """Feed an evidence record to its reserved action (docs/evidence.md): the action awaits assessment with
    novelty ``min(new_evidence_score, record novelty)``. Nothing moves money.

    Errors: the prelude's, ``UNKNOWN_ACTION``, ``ACTION_CLOSED``, ``INVALID_ARGUMENT`` (no such
    record), ``NO_RESERVATION`` (the record belongs to another reservation, or the action already
    has its result), ``INTEGRITY_ERROR`` (the record is not in the evidence index).
    """
    h, action_id, rid = request["hypothesis_id"], request["action_id"], request["record_id"]
    reused, ctx, key = _budget_prelude(view, request, context.config, (h, action_id))
    if reused is not None:
        return reused
    action = dict(_require_action(view, ctx, h, action_id, verb="record evidence for"))
    record = view.evidence_record(rid)
    if record is None:
        raise LedgerError(E.INVALID_ARGUMENT, f"there is no evidence record {rid}", record_id=rid)
    if (record["revision"], record["hypothesis_id"], record["action_id"]) != (ctx.revision, h, action_id):
        raise LedgerError(E.NO_RESERVATION, f"record {rid} belongs to {record['hypothesis_id']}/{record['action_id']} "
                          f"of revision {record['revision']}, not to {h}/{action_id}", record_id=rid)
    test_operation = _require_unanswered(view, ctx, action)
    if test_operation is not None and (record["origin"].get("kind") != "feedback"
                                       or record["operation_id"] != test_operation):
        raise LedgerError(E.NO_RESERVATION, f"{h}/{action_id} is the test requested under operation {test_operation}: "
                          f"its result comes only through its confirmed feedback, not record {rid}", record_id=rid)
    if view.indexed_record_sha(rid) != canonical_sha256(record):
        raise LedgerError(E.INTEGRITY_ERROR, f"record {rid} is not in the evidence index with its hash")
    action.update(status=ACTION_AWAITING,
                  novelty_score=min(ctx.policy["new_evidence_score"], record["novelty_score"]))
    return _budget_draft(ctx, "budget.evidence_recorded", key, request, ctx.accounts, action=action,
                         evidence_sha256=record["content_sha256"], record_id=rid)


def settle(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Reused:
    """Close an assessed action and refund for new information (docs/concepts.md).

    Errors: the prelude's, ``UNKNOWN_ACTION``, ``ACTION_CLOSED``, ``RESULT_MISSING`` (never
    ``LIMIT_REACHED``: its room was kept at reserve).
    """
    h, action_id = request["hypothesis_id"], request["action_id"]
    reused, ctx, key = _budget_prelude(view, request, context.config, (h, action_id))
    if reused is not None:
        return reused
    action = dict(_require_action(view, ctx, h, action_id, verb="settle"))
    if action["status"] != ACTION_AWAITING:  # a requested test's result comes from its feedback (docs/evidence.md)
        test = view.test_of_action(ctx.revision, h, action_id)
        how = (f"store the confirmed feedback of its test (operation {test}), then record_evidence of that record"
               if test is not None else "record_result or record_evidence")
        raise LedgerError(E.RESULT_MISSING, f"{h}/{action_id} has no recorded result to assess; {how} first",
                          hypothesis_id=h, action_id=action_id)
    information = min(action["novelty_score"], request["semantic_score"])
    reward = reward_units(action["cost_units"], ctx.policy["max_reward_bps"], information)
    account = dict(ctx.accounts[h])
    account["rewarded_units"] += reward
    account["remaining_units"] = _remaining(account)
    account["pending_action_id"] = None
    account["settled_actions"] += 1
    if information > ctx.policy["low_information_threshold"]:
        account["low_information_streak"] = 0
    else:
        account["low_information_streak"] += 1
    _apply_status_rules(account, ctx.policy)
    action.update(status=ACTION_SETTLED, semantic_score=request["semantic_score"],
                  information_score=information, reward_units=reward)
    return _budget_draft(ctx, "budget.settled", key, request, {**ctx.accounts, h: account}, action=action)


def fail(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Reused:
    """Close a pending action with no refund; a low-information step (docs/concepts.md).

    Errors: the prelude's, ``UNKNOWN_ACTION``, ``ACTION_CLOSED`` (never ``LIMIT_REACHED``:
    its room was kept at reserve).
    """
    h, action_id = request["hypothesis_id"], request["action_id"]
    reused, ctx, key = _budget_prelude(view, request, context.config, (h, action_id))
    if reused is not None:
        return reused
    action = dict(_require_action(view, ctx, h, action_id, verb="fail"))
    account = dict(ctx.accounts[h])
    account["pending_action_id"] = None
    account["failed_actions"] += 1
    account["low_information_streak"] += 1
    _apply_status_rules(account, ctx.policy)
    action.update(status=ACTION_FAILED, reward_units=0)
    return _budget_draft(ctx, "budget.failed", key, request, {**ctx.accounts, h: account}, action=action)


def reject(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Reused:
    """Mark an account ``rejected`` (terminal) without refund (docs/concepts.md). A reject of an account
    already rejected, with other words, is ``ACCOUNT_TERMINAL`` as for any terminal account (only the
    identical call again is reused).

    Errors: the prelude's, ``ACCOUNT_TERMINAL``, ``ACTION_PENDING``, ``LIMIT_REACHED``.
    """
    h = request["hypothesis_id"]
    reused, ctx, key = _budget_prelude(view, request, context.config, (h,), changed_goes_on=True)
    if reused is not None:
        return reused
    account = _open_account(ctx, h)
    check_budget_room(view, context.limits, ctx.accounts)
    account["status"] = STATUS_REJECTED
    account["terminal_reason"] = request["reason"]
    return _budget_draft(ctx, "budget.rejected", key, request, {**ctx.accounts, h: account})


def grant(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Reused:
    """Add units to an account (docs/scopes.md): the only way to; by the revision's issuer only. A terminal
    account stays terminal. Identity ``(revision, grant, h, grant_id)``.

    Errors: the prelude's, ``AUTHORITY_DENIED``, ``LIMIT_REACHED``.
    """
    h = request["hypothesis_id"]
    reused, ctx, key = _budget_prelude(view, request, context.config, (h, request["grant_id"]))
    if reused is not None:
        return reused
    issuer = view.revision_issuer(ctx.revision)
    if request["issuer"] != issuer:
        raise LedgerError(E.AUTHORITY_DENIED, f"only {issuer}, who initialized revision {ctx.revision}'s budget, may "
                          f"grant units; {request['issuer']} may not (ask with request_increase)",
                          issuer=request["issuer"])
    check_budget_room(view, context.limits, ctx.accounts)
    account = dict(ctx.accounts[h])
    if account["granted_units"] + account["initial_units"] + request["units"] > SAFE_INTEGER_MAX:
        most = SAFE_INTEGER_MAX - account["granted_units"] - account["initial_units"]
        raise LedgerError(E.LIMIT_REACHED, (
            f"{h}'s initial and granted units together would pass 2**53-1 ({account['initial_units']} initial + "
            f"{account['granted_units']} granted + {request['units']}), whatever it has spent: at most {most} more "
            "can be granted"), hypothesis_id=h, limit="granted_units")
    account["granted_units"] += request["units"]
    account["remaining_units"] = _remaining(account)
    grant_fields = {k: request[k] for k in ("hypothesis_id", "grant_id", "units", "issuer", "reason")}
    return _budget_draft(ctx, "budget.granted", key, request, {**ctx.accounts, h: account}, grant=grant_fields)


def _revision_context(view: LedgerView, ctx: _BudgetContext, revision: int) -> _BudgetContext:
    if revision == ctx.revision:
        return ctx
    head = view.budget_head(revision)
    return _BudgetContext(ctx.case, revision, view.policy_config(revision), head["policy_sha256"],
                          head["accounts"], head["hypothesis_batch_sha256"])


def refusal_identity(exceeded: "scope_rules.Exceeded", request: Mapping[str, Any], revision: int) -> dict[str, Any]:
    """What makes two limit refusals the same fact (docs/scopes.md): the identical request, in the same
    revision, against the same establishment's limit (scope, dimension, declared, ``on_exhausted``) at
    the same consumption after it (``duration_ms`` only grows with the clock, so not its value)."""
    consumed = None if exceeded.dimension == "duration_ms" else exceeded.consumed_after
    return {"scope": exceeded.scope, "dimension": exceeded.dimension, "declared": exceeded.declared,
            "on_exhausted": exceeded.on_exhausted, "establishment_seq": exceeded.establishment_seq,
            "revision": revision, "request": dict(request), "consumed_after": consumed}


def _limit_outcome(view: LedgerView, ctx: _BudgetContext, exceeded: "scope_rules.Exceeded",
                   request: Mapping[str, Any], h: str, action_name: str,
                   limits: Mapping[str, int] | None) -> Outcome:
    """Record ``limit.exceeded`` for the refused ``action_name`` (a tool action, or ``test.KIND``),
    end the accounts ``on_exhausted`` names (one ``budget.limit_terminated`` event per revision),
    then refuse with ``LIMIT_EXCEEDED``.

    A refusal already recorded (:func:`refusal_identity`) that ends no account is answered again
    without appending (``recorded_seq`` names its event); on replay (``limits`` None) the history
    says what was recorded. The ``budget.limit_terminated`` events count against
    ``budget_events_max`` like every budget event (``LIMIT_REACHED`` when there is no room)."""
    ending_by_revision = scope_rules.accounts_to_end(view, exceeded, ctx.revision, h)
    if limits is not None and not ending_by_revision:
        recorded = view.limit_refusal(refusal_identity(exceeded, request, ctx.revision))
        if recorded is not None:
            refusal = scope_rules.exceeded_error(exceeded, h)
            refusal.details["recorded_seq"] = recorded
            raise refusal
    if ending_by_revision:
        check_budget_room(view, limits, ctx.accounts, events=len(ending_by_revision),
                          refusal=scope_rules.exceeded_error(exceeded, h))
    drafts = [scope_rules.exceeded_draft(view, exceeded, request, action_name)]
    for revision, ending in sorted(ending_by_revision.items()):
        rctx = _revision_context(view, ctx, revision)
        accounts = dict(rctx.accounts)
        for hypothesis_id in ending:
            accounts[hypothesis_id] = {**accounts[hypothesis_id], "status": STATUS_EXHAUSTED,
                                       "terminal_reason": exceeded.terminal_reason}
        drafts.append(_budget_draft(rctx, "budget.limit_terminated", None, request, accounts,
                                    limit={"scope": exceeded.scope, "dimension": exceeded.dimension}))
    return Outcome(tuple(drafts), refusal=scope_rules.exceeded_error(exceeded, h))


def investigable(accounts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Non-terminal accounts with no pending action, in hypothesis order."""
    return [h for h in hypothesis_order(accounts)
            if accounts[h]["status"] not in TERMINAL_STATUSES and accounts[h]["pending_action_id"] is None]


def ready_for_evaluation(accounts: Mapping[str, Mapping[str, Any]]) -> bool:
    """Every account terminal and nothing pending (an empty ``investigable`` is not enough)."""
    return bool(accounts) and all(
        a["status"] in TERMINAL_STATUSES and a["pending_action_id"] is None for a in accounts.values()
    )
