"""The soft gate (docs/scopes.md): reads that say whether, and how deeply, an account may work now.

They write nothing and never refuse for lack of budget. One question decides them all,
:func:`reservation_refusal`: the refusal ``reserve`` would meet now on the account, in the
order of docs/errors.md, the case's state aside (``ACCOUNT_TERMINAL``, ``ACTION_PENDING``,
``LIMIT_EXCEEDED`` naming the scope, dimension and figures, ``INSUFFICIENT_BUDGET``), or None.
``check``'s ``allowed`` is that question for one action (the refusal goes with the reading);
``advice``'s ``investigable`` and ``tier`` ask it for the cheapest action of the policy (its
affordability floor), so a scope limit that is used up (any scope, any dimension) is seen the
same way by both and by ``reserve``. The ``investigable`` list of a budget result is not one of
these reads: it is the accounts that are not terminal and have nothing pending
(:func:`ledger.rules.budget.investigable`), whatever the limits say.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..ground import errors as E
from ..ground.canonical import SAFE_INTEGER_MAX
from ..ground.config import BudgetConfig
from ..ground.errors import LedgerError
from .common import (TERMINAL_STATUSES, LedgerView, account_terminal_error, action_pending_error, check_budget_room,
                     insufficient_budget_error, not_initialized, require_case, spent_limit_error,
                     unknown_hypothesis_error)
from .scopes import BPS, DIMENSIONS, ScopeMemo, containing, enforce, exceeded_error, scope_state

#: How a refusal names the action ``advice`` asks about.
CHEAPEST_ACTION = "the cheapest action"


def tier(pct_remaining: int, allowed: bool, policy: BudgetConfig) -> str:
    """``full`` while pct ≥ ``tier_shallow_below_pct``, ``shallow`` while ≥ ``tier_deferred_below_pct``,
    else ``deferred``; a call that is not allowed is always ``deferred``."""
    if not allowed:
        return "deferred"
    if pct_remaining >= policy["tier_shallow_below_pct"]:
        return "full"
    return "shallow" if pct_remaining >= policy["tier_deferred_below_pct"] else "deferred"


def scarcity(lowest_pct: int, policy: BudgetConfig) -> int:
    """``10000 + (max_scarcity_bps - 10000) * (100 - lowest_pct) // 100`` basis points."""
    return BPS + (policy["max_scarcity_bps"] - BPS) * (100 - lowest_pct) // 100


def resource_cost(cost: int, scarcity_bps: int) -> int:
    """``ceil(cost * scarcity_bps / 10000)`` in integers, at most 2**53 − 1 (the advisory price of a
    huge cost is clamped there, so it stays an exact JSON number; the debited cost is ``cost``)."""
    return min(-(-cost * scarcity_bps // BPS), SAFE_INTEGER_MAX)


def reservation_refusal(view: LedgerView, revision: int, hypothesis_id: str, account: dict[str, Any], cost: int,
                        action: str, at: str, *, pending_counts: bool,
                        memo: ScopeMemo | None = None, limits: Mapping[str, int] | None = None) -> LedgerError | None:
    """The refusal a reservation of ``action`` at ``cost`` units on this account would meet at ``at``,
    in reserve's order (docs/errors.md), or None when it would be accepted: ``ACCOUNT_TERMINAL``;
    ``ACTION_PENDING`` only if ``pending_counts`` (the gate's ``allowed`` ignores a pending action);
    ``LIMIT_EXCEEDED`` as reserve words it (the tightest limit of any scope holding the account, in any
    dimension: scope, dimension, declared, consumed_after, on_exhausted); ``INSUFFICIENT_BUDGET``.
    Then the ``LIMIT_REACHED`` reserve would meet: the analysis config's ``budget_events_max`` (given
    ``limits``: no room for the reservation and the events that close it) and the account's
    ``spent_units`` passing 2**53 − 1 (as does a limit whose consumption would). The case's state is
    not looked at (reserve refuses with ``CASE_STATE`` first)."""
    if account["status"] in TERMINAL_STATUSES:
        return account_terminal_error(hypothesis_id, account)
    if pending_counts and account["pending_action_id"] is not None:
        return action_pending_error(hypothesis_id, account)
    try:
        exceeded = enforce(view, revision, hypothesis_id, cost, at, memo)
    except LedgerError as exc:
        if exc.code != E.LIMIT_REACHED:
            raise
        return exc
    if exceeded is not None:
        return exceeded_error(exceeded, hypothesis_id)
    if cost > account["remaining_units"]:
        return insufficient_budget_error(action, cost, hypothesis_id, account["remaining_units"])
    if limits is not None:  # the accounts are read only for the room check
        try:
            check_budget_room(view, limits, view.accounts(revision), opens_action=True)
        except LedgerError as exc:
            return exc
    return spent_limit_error(hypothesis_id, account, cost)


def _gate_prelude(view: LedgerView, hypothesis_id: str) -> tuple[int, dict[str, Any], BudgetConfig]:
    case = require_case(view)
    revision = case["revision"]
    accounts = view.accounts(revision)
    if not accounts:
        raise not_initialized(revision)
    if hypothesis_id not in accounts:
        raise unknown_hypothesis_error(revision, hypothesis_id)
    return revision, accounts[hypothesis_id], view.policy_config(revision)


def _pct(remaining: int, budget: int) -> int:
    return remaining * 100 // budget


def price_signal(view: LedgerView, hypothesis_id: str, action: str) -> tuple[dict[str, int], tuple[str, ...]]:
    """``{cost, resource_cost, scarcity_bps}``: scarcity from the lowest ``pct_remaining`` the account
    showed after any event since its last grant, so it never falls between grants (advisory only:
    the debited cost is always ``cost``); and the policy's notes on that price
    (:meth:`~ledger.ground.config.BudgetConfig.price_notes`). Errors: ``NOT_INITIALIZED``,
    ``UNKNOWN_HYPOTHESIS``."""
    revision, account, policy = _gate_prelude(view, hypothesis_id)
    cost = policy.price_units(action)
    signal = _scarcity_of(view, revision, hypothesis_id, account, policy)
    return ({"cost": cost, "resource_cost": resource_cost(cost, signal), "scarcity_bps": signal},
            tuple(policy.price_notes(action)))


def _scarcity_of(view: LedgerView, revision: int, hypothesis_id: str, account: dict[str, Any],
                 policy: BudgetConfig) -> int:
    lowest = view.lowest_pct_since_grant(revision, hypothesis_id)
    if lowest is None:
        lowest = _pct(account["remaining_units"], account["initial_units"] + account["granted_units"])
    return scarcity(lowest, policy)


def _tightest(view: LedgerView, revision: int, hypothesis_id: str, at: str,
              memo: ScopeMemo) -> dict[str, tuple[int, str]]:
    """Per dimension, ``(remaining, scope)`` of the tightest established limit holding the account."""
    found: dict[str, tuple[int, str]] = {}
    for name in containing(revision, hypothesis_id):
        info, used = scope_state(view, name, at, memo)
        if info is None or used is None:
            continue
        for dimension in DIMENSIONS:
            declared = info["limits"].get(dimension)
            if declared is not None:
                left = max(0, declared - used[dimension])
                if dimension not in found or left < found[dimension][0]:
                    found[dimension] = (left, name)
    return found


def check(view: LedgerView, hypothesis_id: str, action: str, at: str,
          limits: Mapping[str, int] | None = None) -> tuple[dict[str, Any], LedgerError | None, tuple[str, ...]]:
    """``{allowed, cost, remaining, pct_remaining, tier, scarcity_bps}`` for reserving ``action`` now,
    the refusal that reservation would meet (None when ``allowed``) and the policy's notes on the
    price (:meth:`~ledger.ground.config.BudgetConfig.price_notes`).

    ``remaining`` is the least of the account's remaining units and every ``units`` limit that
    holds it; ``allowed`` means affordable, not terminal and inside every limit (a pending action
    is ignored): :func:`reservation_refusal` found nothing. Never raises for lack of budget;
    ``NOT_INITIALIZED``/``UNKNOWN_HYPOTHESIS`` as reads do.
    """
    revision, account, policy = _gate_prelude(view, hypothesis_id)
    cost = policy.price_units(action)
    memo: ScopeMemo = {}
    tightest = _tightest(view, revision, hypothesis_id, at, memo)
    remaining = min(account["remaining_units"], tightest["units"][0]) if "units" in tightest \
        else account["remaining_units"]
    refusal = reservation_refusal(view, revision, hypothesis_id, account, cost, action, at, pending_counts=False,
                                  memo=memo, limits=limits)
    pct = _pct(remaining, account["initial_units"] + account["granted_units"])
    return {"allowed": refusal is None, "cost": cost, "remaining": remaining, "pct_remaining": pct,
            "tier": tier(pct, refusal is None, policy),
            "scarcity_bps": _scarcity_of(view, revision, hypothesis_id, account, policy)}, refusal, \
        tuple(policy.price_notes(action))


def remaining(view: LedgerView, hypothesis_id: str) -> dict[str, int]:
    """``{budget, spent, remaining, pct_remaining}`` of the account: ``budget = initial + granted``,
    ``spent`` the net units used (reserved minus refunded), so ``spent + remaining = budget``."""
    _, account, _ = _gate_prelude(view, hypothesis_id)
    budget = account["initial_units"] + account["granted_units"]
    left = account["remaining_units"]
    return {"budget": budget, "spent": budget - left, "remaining": left, "pct_remaining": _pct(left, budget)}


def advice(view: LedgerView, hypothesis_id: str, at: str,
           limits: Mapping[str, int] | None = None) -> tuple[dict[str, Any], LedgerError | None]:
    """What an agent's prompt needs before choosing its next action on ``hypothesis_id``, in one read
    (docs/scopes.md), and the refusal a reservation of the policy's cheapest action would meet now
    (None when ``investigable``): the account's ``status``, ``pending_action_id`` and whether it is
    ``investigable`` (not terminal, nothing pending, and that action inside every limit: narrower
    than a budget result's ``investigable``, which does not look at limits);
    ``remaining_units`` (the least of the account's units and every ``units`` limit holding it),
    ``budget``, ``pct_remaining``, ``tier`` (``deferred`` when even that action is not allowed, as
    ``check`` would say) and ``scarcity_bps``; ``remaining_actions``, ``remaining_duration_ms`` and
    ``remaining_cost_usd_millicents`` (the tightest limit of that dimension holding the account,
    None when none does) and ``limited_by`` (dimension → that scope, ``account`` for units when the
    account's own balance is the tightest); ``ready_for_evaluation`` of the whole revision.
    Errors: ``NOT_INITIALIZED``, ``UNKNOWN_HYPOTHESIS``."""
    revision, account, policy = _gate_prelude(view, hypothesis_id)
    memo: ScopeMemo = {}
    tightest = _tightest(view, revision, hypothesis_id, at, memo)
    if "units" not in tightest or account["remaining_units"] <= tightest["units"][0]:
        tightest["units"] = (account["remaining_units"], "account")
    units = tightest["units"][0]
    budget = account["initial_units"] + account["granted_units"]
    blocked = reservation_refusal(view, revision, hypothesis_id, account, policy.affordability_floor_units,
                                  CHEAPEST_ACTION, at, pending_counts=False, memo=memo, limits=limits)
    pending = account["pending_action_id"] is not None and account["status"] not in TERMINAL_STATUSES
    refusal = action_pending_error(hypothesis_id, account) if pending else blocked
    pct = _pct(units, budget)
    accounts = view.accounts(revision).values()
    return {
        "hypothesis_id": hypothesis_id, "status": account["status"], "pending_action_id": account["pending_action_id"],
        "investigable": refusal is None,
        "remaining_units": units, "budget": budget, "pct_remaining": pct,
        "tier": tier(pct, blocked is None, policy),
        "scarcity_bps": _scarcity_of(view, revision, hypothesis_id, account, policy),
        **{f"remaining_{d}": tightest[d][0] if d in tightest else None for d in DIMENSIONS[1:]},
        "limited_by": {d: name for d, (_, name) in tightest.items()},
        "ready_for_evaluation": all(a["status"] in TERMINAL_STATUSES and a["pending_action_id"] is None
                                    for a in accounts),
    }, refusal
