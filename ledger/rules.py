"""The ledger's rules as pure functions: lifecycle (SPEC 2) and budget accounting (SPEC 6).

Each operation has two halves:

* ``shape_*`` checks the call itself (ids, scores, reasons, JSON) and returns the
  canonical *request* dict that is hashed for idempotency and stored in the event;
* an apply function takes a read-only :class:`LedgerView` of the current state and
  the request and returns either :class:`Reused` (an identical replay) or a
  :class:`Draft` (the derived body of the event to append), raising
  :class:`~ledger.errors.LedgerError` in the order of SPEC 6.1.

The same functions serve the live write path (view backed by indexed SQL reads)
and ``verify``/``import`` (which re-apply every stored request and compare bytes).
Integers only: no float touches a unit, score or ratio.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from . import errors as E
from .canonical import SAFE_INTEGER_MAX, canonical_bytes, canonical_sha256, check_int, check_json_value, sha256_hex
from .config import BudgetConfig
from .errors import LedgerError

# --- vocabulary -------------------------------------------------------------
CREATED = "CREATED"
GENERATING = "GENERATING_HYPOTHESES"
INVESTIGATING = "INVESTIGATING_HYPOTHESES"
BLOCKED = "BLOCKED"
EVALUATING = "EVALUATING"
CLOSED = "CLOSED"
CASE_STATES = (CREATED, GENERATING, INVESTIGATING, BLOCKED, EVALUATING, CLOSED)
#: Moves made with ``transition``; GENERATING_HYPOTHESES is reached only by ``open_revision``.
TRANSITIONS = frozenset({
    (GENERATING, INVESTIGATING),
    (INVESTIGATING, BLOCKED),
    (BLOCKED, INVESTIGATING),
    (INVESTIGATING, EVALUATING),
    (EVALUATING, CLOSED),
})
OPEN_REVISION_FROM = frozenset({CREATED, EVALUATING, CLOSED})
MUTABLE_STATES = frozenset({GENERATING, INVESTIGATING})

STATUS_NEW = "new"
STATUS_INVESTIGATING = "investigating"
STATUS_EXHAUSTED = "budget_exhausted"
STATUS_ABANDONED = "abandoned_low_information_gain"
STATUS_REJECTED = "rejected"
TERMINAL_STATUSES = frozenset({STATUS_EXHAUSTED, STATUS_ABANDONED, STATUS_REJECTED})
REASON_BELOW_FLOOR = "remaining_below_floor"
REASON_LOW_INFORMATION = "low_information_streak"

ACTION_RESERVED = "reserved"
ACTION_AWAITING = "awaiting_assessment"
ACTION_SETTLED = "settled"
ACTION_FAILED = "failed"
CLOSED_ACTION_STATUSES = frozenset({ACTION_SETTLED, ACTION_FAILED})

HYPOTHESIS_ID_RE = re.compile(r"^H[1-9][0-9]*$")
ACTION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
ACTION_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
CASE_ID_RE = ACTION_ID_RE
#: Canonical encodings of the empty evidence payloads of SPEC 6.3.
EMPTY_EVIDENCE = frozenset({b"null", b"{}", b"[]", b'""'})

STATEMENT_CHARS_MAX = 4000
REASON_CHARS_MAX = 4000
ACTION_NAME_CHARS_MAX = 128
SOURCE_REFS_MAX = 256
SOURCE_REF_CHARS_MAX = 1024
SCORE_MAX = 100


# --- results of applying a rule ----------------------------------------------
@dataclass(frozen=True)
class Reused:
    """An identical replay: nothing is written; ``seq`` is the original event's."""

    seq: int


@dataclass(frozen=True)
class Draft:
    """The derived content of an event about to be appended.

    ``fields`` are the body's keys except the chain fields (``seq``,
    ``parent_sha256``, ``created_at``, ``actor``) that storage adds;
    ``contents`` maps sha256 → canonical bytes of new content rows.
    """

    type: str
    stream: str  # "case" or "budget"
    revision: int
    operation_key: str | None
    request: dict[str, Any]
    fields: dict[str, Any]
    contents: dict[str, bytes] = field(default_factory=dict)


class LedgerView(Protocol):
    """What the rules may read. Storage implements it with bounded, indexed queries."""

    def case(self) -> dict[str, Any] | None: ...  # case_id, package_id, state, state_seq, revision
    def revision(self, revision: int) -> dict[str, Any] | None: ...
    def policy_config(self, revision: int) -> BudgetConfig: ...  # the frozen policy
    def previous_policy(self, revision: int) -> tuple[dict[str, Any], str] | None: ...
    def budget_head(self, revision: int) -> dict[str, Any] | None: ...  # newest budget event's state
    def accounts(self, revision: int) -> dict[str, dict[str, Any]]: ...
    def operation(self, key: str) -> tuple[int, str] | None: ...
    def action(self, revision: int, hypothesis_id: str, action_id: str) -> dict[str, Any] | None: ...
    def content_seen(self, sha256: str) -> bool: ...
    def content_bytes_total(self) -> int: ...
    def budget_events_total(self) -> int: ...


# --- shape checks -----------------------------------------------------------------
def _check_hypothesis_id(value: Any) -> str:
    if not isinstance(value, str) or not HYPOTHESIS_ID_RE.fullmatch(value):
        raise LedgerError(E.INVALID_ID, f"hypothesis id must match H1, H2, …, got {value!r}")
    return value


def _check_action_id(value: Any, what: str = "action_id") -> str:
    if not isinstance(value, str) or not ACTION_ID_RE.fullmatch(value):
        raise LedgerError(
            E.INVALID_ID,
            f"{what} must match ^[A-Za-z0-9][A-Za-z0-9._:-]{{0,127}}$, got {str(value)[:80]!r}",
        )
    return value


def _check_action_name(value: Any) -> str:
    if (not isinstance(value, str) or len(value) > ACTION_NAME_CHARS_MAX
            or not ACTION_NAME_RE.fullmatch(value)):
        raise LedgerError(
            E.INVALID_ID,
            f"action name must look like 'source.read_context', got {str(value)[:80]!r}",
        )
    return value


def check_case_id(value: Any) -> str:
    """A case id follows the action-id pattern (``INVALID_ID`` otherwise)."""
    return _check_action_id(value, "case_id")


def _check_reason(value: Any) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise LedgerError(E.REASON_REQUIRED, "a non-blank reason is required")
    if not isinstance(value, str):
        raise LedgerError(E.INVALID_ARGUMENT, f"reason must be a string, got {type(value).__name__}")
    if len(value) > REASON_CHARS_MAX:
        raise LedgerError(E.INVALID_ARGUMENT, f"reason longer than {REASON_CHARS_MAX} characters")
    _check_text(value, "reason")
    return value


def _check_text(value: str, what: str) -> None:
    """Lone surrogates have no UTF-8 (and no canonical JSON) form; NUL would be cut short by
    SQLite's text functions (the views read reasons with ``json_extract``)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise LedgerError(E.INVALID_JSON, f"{what} contains a lone surrogate") from None
    if "\x00" in value:
        raise LedgerError(E.INVALID_ARGUMENT, f"{what} contains a NUL character")


def shape_create(case_id: Any, package_id: Any) -> dict[str, Any]:
    """Request of the genesis event ``case.created``."""
    check_case_id(case_id)
    if not isinstance(package_id, str) or not re.fullmatch(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", package_id):
        raise LedgerError(E.INVALID_ARGUMENT, f"package_id must be a UUID4, got {package_id!r}")
    return {"op": "create", "case_id": case_id, "package_id": package_id}


def shape_open_revision(hypotheses: Any, units_per_hypothesis: Any, *,
                        default_units: int, max_hypotheses: int) -> dict[str, Any]:
    """Request of ``open_revision``: a non-empty list of ``{"statement": str}`` (SPEC 2, 6.1)."""
    if not isinstance(hypotheses, (list, tuple)) or not hypotheses:
        raise LedgerError(E.INVALID_ARGUMENT, "hypotheses must be a non-empty list")
    if len(hypotheses) > max_hypotheses:
        raise LedgerError(
            E.INVALID_ARGUMENT,
            f"{len(hypotheses)} hypotheses exceed max_hypotheses = {max_hypotheses}",
        )
    batch = []
    for index, item in enumerate(hypotheses, start=1):
        if not isinstance(item, Mapping) or set(item) != {"statement"}:
            raise LedgerError(
                E.INVALID_ARGUMENT, f"hypothesis {index} must be an object with exactly the key 'statement'"
            )
        statement = item["statement"]
        if not isinstance(statement, str) or not statement.strip():
            raise LedgerError(E.INVALID_ARGUMENT, f"hypothesis {index}: statement must be a non-blank string")
        if len(statement) > STATEMENT_CHARS_MAX:
            raise LedgerError(
                E.INVALID_ARGUMENT, f"hypothesis {index}: statement longer than {STATEMENT_CHARS_MAX} characters"
            )
        _check_text(statement, f"hypothesis {index} statement")
        batch.append({"statement": statement})
    units = default_units if units_per_hypothesis is None else units_per_hypothesis
    check_int(units, "units_per_hypothesis", minimum=1)
    return {"op": "open_revision", "hypotheses": batch, "units_per_hypothesis": units,
            "max_hypotheses": max_hypotheses}


def shape_transition(to: Any) -> dict[str, Any]:
    """Request of ``transition``: ``to`` must be one of :data:`CASE_STATES`."""
    if to not in CASE_STATES or not isinstance(to, str):
        raise LedgerError(E.INVALID_ARGUMENT, f"unknown case state {to!r}; states: {', '.join(CASE_STATES)}")
    return {"op": "transition", "to": to}


def shape_initialize() -> dict[str, Any]:
    return {"op": "initialize"}


def shape_reserve(hypothesis_id: Any, action_id: Any, action: Any) -> dict[str, Any]:
    return {"op": "reserve", "hypothesis_id": _check_hypothesis_id(hypothesis_id),
            "action_id": _check_action_id(action_id), "action": _check_action_name(action)}


def shape_record_result(hypothesis_id: Any, action_id: Any, evidence: Any, source_refs: Any,
                        *, evidence_bytes_max: int | None) -> tuple[dict[str, Any], bytes]:
    """Request of ``record_result`` and the evidence's canonical bytes.

    Only the syntax of ``source_refs`` is checked here; the package checks that
    each names a regular file inside it (``SOURCE_REF_INVALID``).
    """
    _check_hypothesis_id(hypothesis_id)
    _check_action_id(action_id)
    payload = canonical_bytes(evidence)
    check_json_value(evidence)
    if evidence_bytes_max is not None and len(payload) > evidence_bytes_max:
        raise LedgerError(
            E.LIMIT_REACHED,
            f"evidence payload is {len(payload)} bytes; the limit is {evidence_bytes_max}",
            limit="evidence_payload_bytes_max",
        )
    refs = check_source_ref_list(source_refs)
    request = {"op": "record_result", "hypothesis_id": hypothesis_id, "action_id": action_id,
               "evidence_sha256": sha256_hex(payload), "source_refs": refs}
    return request, payload


def check_source_ref_list(source_refs: Any) -> list[str]:
    """A list of distinct relative path strings (``SOURCE_REF_INVALID`` otherwise)."""
    if source_refs is None:
        return []
    if not isinstance(source_refs, (list, tuple)):
        raise LedgerError(E.SOURCE_REF_INVALID, "source_refs must be a list of relative paths")
    if len(source_refs) > SOURCE_REFS_MAX:
        raise LedgerError(E.SOURCE_REF_INVALID, f"more than {SOURCE_REFS_MAX} source refs")
    seen: set[str] = set()
    for ref in source_refs:
        if not isinstance(ref, str) or not ref or len(ref) > SOURCE_REF_CHARS_MAX:
            raise LedgerError(E.SOURCE_REF_INVALID, f"source ref must be a non-empty path string, got {str(ref)[:80]!r}")
        if ref in seen:
            raise LedgerError(E.SOURCE_REF_INVALID, f"source ref {ref!r} listed twice")
        if "\x00" in ref:
            raise LedgerError(E.SOURCE_REF_INVALID, "a source ref contains a NUL character")
        _check_text(ref, "source ref")
        seen.add(ref)
    return list(source_refs)


def shape_settle(hypothesis_id: Any, action_id: Any, semantic_score: Any, reason: Any) -> dict[str, Any]:
    _check_hypothesis_id(hypothesis_id)
    _check_action_id(action_id)
    check_int(semantic_score, "semantic_score", minimum=0, maximum=SCORE_MAX, code=E.INVALID_SCORE)
    return {"op": "settle", "hypothesis_id": hypothesis_id, "action_id": action_id,
            "semantic_score": semantic_score, "reason": _check_reason(reason)}


def shape_fail(hypothesis_id: Any, action_id: Any, reason: Any) -> dict[str, Any]:
    _check_hypothesis_id(hypothesis_id)
    _check_action_id(action_id)
    return {"op": "fail", "hypothesis_id": hypothesis_id, "action_id": action_id,
            "reason": _check_reason(reason)}


def shape_reject(hypothesis_id: Any, reason: Any) -> dict[str, Any]:
    return {"op": "reject", "hypothesis_id": _check_hypothesis_id(hypothesis_id),
            "reason": _check_reason(reason)}


# --- helpers ------------------------------------------------------------------------
def hypothesis_number(hypothesis_id: str) -> int:
    return int(hypothesis_id[1:])


def sorted_accounts(accounts: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Accounts in hypothesis order (H2 before H10)."""
    return [dict(accounts[h]) for h in sorted(accounts, key=hypothesis_number)]


def operation_key(revision: int, op: str, hypothesis_id: str | None = None,
                  action_id: str | None = None) -> str:
    """Identity of an operation (SPEC 6.1): ``revision:op[:hypothesis[:action_id]]``."""
    parts = [str(revision), op]
    if hypothesis_id is not None:
        parts.append(hypothesis_id)
    if action_id is not None:
        parts.append(action_id)
    return ":".join(parts)


def reward_units(cost_units: int, max_reward_bps: int, information_score: int) -> int:
    """SPEC 6.2: ``min(floor(cost * bps * information / 1_000_000), cost - 1)`` — always ``< cost``."""
    return min(cost_units * max_reward_bps * information_score // 1_000_000, cost_units - 1)


def _remaining(account: Mapping[str, Any]) -> int:
    return (account["initial_units"] + account["granted_units"]
            - account["spent_units"] + account["rewarded_units"])


def _apply_status_rules(account: dict[str, Any], policy: BudgetConfig) -> None:
    """SPEC 6.4, after initialization and after every settle or fail. Exhaustion wins."""
    if account["status"] in TERMINAL_STATUSES:
        return
    if account["remaining_units"] < policy.affordability_floor_units:
        account["status"] = STATUS_EXHAUSTED
        account["terminal_reason"] = REASON_BELOW_FLOOR
    elif account["low_information_streak"] >= policy["max_low_information_steps"]:
        account["status"] = STATUS_ABANDONED
        account["terminal_reason"] = REASON_LOW_INFORMATION


def _replay_or_conflict(view: LedgerView, key: str, request: Mapping[str, Any]) -> Reused | None:
    found = view.operation(key)
    if found is None:
        return None
    seq, request_sha256 = found
    if request_sha256 != canonical_sha256(request):
        raise LedgerError(
            E.OPERATION_CONFLICT,
            f"operation {key} was already applied at seq {seq} with different inputs",
            seq=seq, operation=key,
        )
    return Reused(seq)


def _require_case(view: LedgerView) -> dict[str, Any]:
    case = view.case()
    if case is None:
        raise LedgerError(E.INTEGRITY_ERROR, "the ledger has no case.created event")
    return case


def _case_fields(case: Mapping[str, Any], event_type: str, revision: int) -> dict[str, Any]:
    return {"format": "case-event-v1", "type": event_type, "case_id": case["case_id"],
            "package_id": case["package_id"], "revision": revision}


# --- lifecycle (SPEC 2) ------------------------------------------------------------
def create(view: LedgerView, request: Mapping[str, Any]) -> Draft:
    """Genesis event ``case.created`` (state ``CREATED``, revision 0)."""
    if view.case() is not None:
        raise LedgerError(E.CASE_EXISTS, "the ledger already holds a case")
    fields = {"format": "case-event-v1", "type": "case.created", "case_id": request["case_id"],
              "package_id": request["package_id"], "revision": 0, "state": CREATED}
    return Draft("case.created", "case", 0, None, dict(request), fields)


def open_revision(view: LedgerView, request: Mapping[str, Any]) -> Draft | Reused:
    """Open revision 1 from ``CREATED``, or the next one from ``EVALUATING``/``CLOSED``.

    An identical call while the case is still in the revision it opened returns
    :class:`Reused`. Errors: ``INVALID_TRANSITION``.
    """
    case = _require_case(view)
    current = case["revision"]
    if current > 0:
        info = view.revision(current)
        if (info is not None and info["hypotheses_request"] == request["hypotheses"]
                and info["units_per_hypothesis"] == request["units_per_hypothesis"]):
            return Reused(info["seq"])
    if case["state"] not in OPEN_REVISION_FROM:
        raise LedgerError(
            E.INVALID_TRANSITION,
            f"open_revision is allowed from CREATED, EVALUATING or CLOSED, not {case['state']}",
            state=case["state"],
        )
    revision = current + 1
    units = request["units_per_hypothesis"]
    hypotheses = [
        {"hypothesis_id": f"H{i}", "statement": h["statement"], "allocation_units": units}
        for i, h in enumerate(request["hypotheses"], start=1)
    ]
    fields = _case_fields(case, "revision.opened", revision)
    fields.update({
        "from_state": case["state"], "state": GENERATING, "hypotheses": hypotheses,
        "hypothesis_batch_sha256": canonical_sha256(hypotheses),
        "units_per_hypothesis": units, "max_hypotheses": request["max_hypotheses"],
    })
    return Draft("revision.opened", "case", revision, None, dict(request), fields)


def transition(view: LedgerView, request: Mapping[str, Any]) -> Draft | Reused:
    """Move the case along SPEC 2's graph. Errors: ``INVALID_TRANSITION``, ``ACTION_PENDING``."""
    case = _require_case(view)
    target = request["to"]
    if case["state"] == target:
        return Reused(case["state_seq"])
    if (case["state"], target) not in TRANSITIONS:
        hint = " (use open_revision)" if target == GENERATING else ""
        raise LedgerError(
            E.INVALID_TRANSITION, f"cannot move from {case['state']} to {target}{hint}",
            state=case["state"], to=target,
        )
    if target == EVALUATING:
        pending = [a for a in view.accounts(case["revision"]).values() if a["pending_action_id"]]
        if pending:
            names = ", ".join(f"{a['hypothesis_id']}/{a['pending_action_id']}" for a in pending)
            raise LedgerError(E.ACTION_PENDING, f"actions still pending: {names}; settle or fail them first")
    fields = _case_fields(case, "case.transitioned", case["revision"])
    fields.update({"from_state": case["state"], "state": target})
    return Draft("case.transitioned", "case", case["revision"], None, dict(request), fields)


# --- budget (SPEC 6) ----------------------------------------------------------------
@dataclass
class _BudgetContext:
    case: dict[str, Any]
    revision: int
    policy: BudgetConfig
    policy_sha256: str
    accounts: dict[str, dict[str, Any]]
    batch_sha256: str


#: Events a reserved action may still need to close: ``record_result`` and ``settle``.
CLOSING_EVENTS_PER_ACTION = 2


def _check_budget_room(view: LedgerView, limits: Mapping[str, int] | None,
                       accounts: Mapping[str, Mapping[str, Any]] | None = None, *,
                       opens_action: bool = False) -> None:
    """``LIMIT_REACHED`` unless ``budget_events_max`` leaves room for this event and for closing
    every pending action (SPEC 11; 6.1 "so nothing is stranded").

    Each pending action, and the one a reserve opens, keeps room for
    :data:`CLOSING_EVENTS_PER_ACTION` events, so ``record_result``, ``settle``
    and ``fail`` are never refused for room and a debit is never stranded.
    """
    if limits is None:
        return
    limit = limits["budget_events_max"]
    pending = sum(1 for account in (accounts or {}).values() if account["pending_action_id"] is not None)
    pending += 1 if opens_action else 0
    total = view.budget_events_total()
    if total + 1 + CLOSING_EVENTS_PER_ACTION * pending > limit:
        kept = f" and {CLOSING_EVENTS_PER_ACTION * pending} kept to close {pending} pending action(s)" if pending else ""
        raise LedgerError(
            E.LIMIT_REACHED, f"the ledger holds {total} budget events of its limit of {limit}; this event needs 1"
            f"{kept}", limit="budget_events_max", budget_events=total,
        )


def _budget_prelude(view: LedgerView, request: Mapping[str, Any], config: BudgetConfig | None,
                    key_parts: Sequence[str | None]) -> tuple[Reused | None, _BudgetContext | None, str]:
    """Identity → CASE_STATE → NOT_INITIALIZED → UNKNOWN_HYPOTHESIS → BUDGET_POLICY_CHANGED."""
    case = _require_case(view)
    revision = case["revision"]
    key = operation_key(revision, request["op"], *key_parts)
    reused = _replay_or_conflict(view, key, request)
    if reused is not None:
        return reused, None, key
    if case["state"] not in MUTABLE_STATES:
        raise LedgerError(
            E.CASE_STATE, f"budget changes need GENERATING_HYPOTHESES or INVESTIGATING_HYPOTHESES; the case is {case['state']}",
            state=case["state"],
        )
    head = view.budget_head(revision)
    if head is None:
        raise LedgerError(E.NOT_INITIALIZED, f"revision {revision} has no budget yet; run initialize first")
    accounts = head["accounts"]
    hypothesis_id = request.get("hypothesis_id")
    if hypothesis_id is not None and hypothesis_id not in accounts:
        raise LedgerError(
            E.UNKNOWN_HYPOTHESIS, f"revision {revision} has no hypothesis {hypothesis_id}",
            hypothesis_id=hypothesis_id,
        )
    policy_sha256 = head["policy_sha256"]
    if config is not None and config.policy_sha256 != policy_sha256:
        raise LedgerError(
            E.BUDGET_POLICY_CHANGED,
            f"the configured policy differs from the one frozen for revision {revision}; "
            "open the case without a config or with the frozen policy",
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


def _open_account(ctx: _BudgetContext, h: str) -> dict[str, Any]:
    """A copy of the account, if it may start something new: ``ACCOUNT_TERMINAL``, then
    ``ACTION_PENDING`` (SPEC 6.1 order; reserve and reject only)."""
    account = dict(ctx.accounts[h])
    if account["status"] in TERMINAL_STATUSES:
        raise LedgerError(
            E.ACCOUNT_TERMINAL, f"{h} is {account['status']} ({account['terminal_reason']})",
            hypothesis_id=h, status=account["status"],
        )
    if account["pending_action_id"] is not None:
        raise LedgerError(
            E.ACTION_PENDING, f"{h} has pending action {account['pending_action_id']}; settle or fail it first",
            hypothesis_id=h, pending_action_id=account["pending_action_id"],
        )
    return account


def initialize(view: LedgerView, request: Mapping[str, Any], config: BudgetConfig | None,
               limits: Mapping[str, int] | None) -> Draft | Reused:
    """Open one account per hypothesis of the current revision and freeze the policy.

    The policy is ``config`` if given, else the previous revision's frozen policy,
    else the defaults. Repeating returns :class:`Reused` and never refills.
    Errors: ``CASE_STATE``, ``INTEGRITY_ERROR`` (an incomplete batch), ``LIMIT_REACHED``.
    """
    case = _require_case(view)
    revision = case["revision"]
    key = operation_key(revision, "initialize")
    reused = _replay_or_conflict(view, key, request)
    if reused is not None:
        return reused
    if case["state"] not in MUTABLE_STATES:
        raise LedgerError(
            E.CASE_STATE, f"initialize needs GENERATING_HYPOTHESES or INVESTIGATING_HYPOTHESES; the case is {case['state']}",
            state=case["state"],
        )
    info = view.revision(revision)
    hypotheses = info["hypotheses"] if info else []
    ids = [h["hypothesis_id"] for h in hypotheses]
    if (not hypotheses or ids != [f"H{i}" for i in range(1, len(ids) + 1)]
            or any(h["allocation_units"] < 1 for h in hypotheses)
            or len(hypotheses) > info["max_hypotheses"]):
        raise LedgerError(E.INTEGRITY_ERROR, f"the hypothesis batch of revision {revision} is incomplete")
    if config is None:
        previous = view.previous_policy(revision)
        config = BudgetConfig.from_mapping(previous[0]) if previous else BudgetConfig()
    _check_budget_room(view, limits)
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
    ctx = _BudgetContext(case, revision, config, config.policy_sha256, accounts,
                         info["hypothesis_batch_sha256"])
    fields = _budget_fields(ctx, "budget.initialized", accounts, policy=dict(config.policy))
    return Draft("budget.initialized", "budget", revision, key, dict(request), fields)


def reserve(view: LedgerView, request: Mapping[str, Any], config: BudgetConfig | None,
            limits: Mapping[str, int] | None) -> Draft | Reused:
    """Debit an action's cost before it runs (SPEC 6.1).

    Errors in order: ``OPERATION_CONFLICT``, ``CASE_STATE``, ``NOT_INITIALIZED``,
    ``UNKNOWN_HYPOTHESIS``, ``BUDGET_POLICY_CHANGED``, ``ACCOUNT_TERMINAL``,
    ``ACTION_PENDING``, ``INSUFFICIENT_BUDGET``, ``LIMIT_REACHED``.
    """
    h, action_id, action_name = request["hypothesis_id"], request["action_id"], request["action"]
    reused, ctx, key = _budget_prelude(view, request, config, (h, action_id))
    if reused is not None:
        return reused
    account = _open_account(ctx, h)
    cost = ctx.policy.cost_units(action_name)
    if cost > account["remaining_units"]:
        raise LedgerError(
            E.INSUFFICIENT_BUDGET,
            f"{action_name} costs {cost} units; {h} has {account['remaining_units']} remaining",
            hypothesis_id=h, cost_units=cost, remaining_units=account["remaining_units"],
        )
    _check_budget_room(view, limits, ctx.accounts, opens_action=True)
    if account["spent_units"] + cost > SAFE_INTEGER_MAX:
        # every number in an event must stay an exact JSON integer (SPEC 4)
        raise LedgerError(
            E.LIMIT_REACHED, f"{h} has spent {account['spent_units']} units; {cost} more would pass 2**53-1, "
            "the largest exact JSON integer", hypothesis_id=h, limit="spent_units",
        )
    account["spent_units"] += cost
    account["remaining_units"] = _remaining(account)
    account["pending_action_id"] = action_id
    if account["status"] == STATUS_NEW:
        account["status"] = STATUS_INVESTIGATING
    accounts = {**ctx.accounts, h: account}
    action = {"hypothesis_id": h, "action_id": action_id, "action": action_name, "cost_units": cost,
              "status": ACTION_RESERVED, "novelty_score": None, "semantic_score": None,
              "information_score": None, "reward_units": None}
    fields = _budget_fields(ctx, "budget.reserved", accounts, action=action)
    return Draft("budget.reserved", "budget", ctx.revision, key, dict(request), fields)


def record_result(view: LedgerView, request: Mapping[str, Any], evidence: bytes,
                  sources: Sequence[Mapping[str, str]], config: BudgetConfig | None,
                  limits: Mapping[str, int] | None) -> Draft | Reused:
    """Store the evidence of a reserved action and compute novelty v1 (SPEC 6.1, 6.3).

    ``evidence`` is the payload's canonical bytes; ``sources`` the resolved
    ``[{"path", "sha256"}]`` of ``source_refs``. Nothing is refunded yet.
    Errors: the prelude's, ``UNKNOWN_ACTION``, ``ACTION_CLOSED``, ``LIMIT_REACHED``.
    """
    h, action_id = request["hypothesis_id"], request["action_id"]
    reused, ctx, key = _budget_prelude(view, request, config, (h, action_id))
    if reused is not None:
        return reused
    action = dict(_require_action(view, ctx, h, action_id, verb="record a result for"))
    # no room check: the reserve kept room for this event and the settle (_check_budget_room)
    content_sha256 = request["evidence_sha256"]
    seen = view.content_seen(content_sha256)
    if not seen and limits is not None:
        stored = view.content_bytes_total()
        if stored + len(evidence) > limits["evidence_content_bytes_max"]:
            raise LedgerError(
                E.LIMIT_REACHED, f"distinct evidence content would reach {stored + len(evidence)} bytes; "
                f"the limit is {limits['evidence_content_bytes_max']}", limit="evidence_content_bytes_max",
            )
    novelty = 0 if (evidence in EMPTY_EVIDENCE or seen) else ctx.policy["new_evidence_score"]
    action.update(status=ACTION_AWAITING, novelty_score=novelty)
    fields = _budget_fields(ctx, "budget.result_recorded", ctx.accounts, action=action,
                            evidence_sha256=content_sha256, evidence_bytes=len(evidence),
                            sources=[dict(s) for s in sources])
    contents = {} if seen else {content_sha256: evidence}
    return Draft("budget.result_recorded", "budget", ctx.revision, key, dict(request), fields, contents)


def settle(view: LedgerView, request: Mapping[str, Any], config: BudgetConfig | None,
           limits: Mapping[str, int] | None) -> Draft | Reused:
    """Close an assessed action and refund for new information (SPEC 6.1, 6.2, 6.4).

    Errors: the prelude's, ``UNKNOWN_ACTION``, ``ACTION_CLOSED``, ``RESULT_MISSING`` (never
    ``LIMIT_REACHED``: its room was kept at reserve).
    """
    h, action_id = request["hypothesis_id"], request["action_id"]
    reused, ctx, key = _budget_prelude(view, request, config, (h, action_id))
    if reused is not None:
        return reused
    action = dict(_require_action(view, ctx, h, action_id, verb="settle"))
    if action["status"] != ACTION_AWAITING:
        raise LedgerError(
            E.RESULT_MISSING, f"{h}/{action_id} has no recorded result to assess; record_result first",
            hypothesis_id=h, action_id=action_id,
        )
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
    fields = _budget_fields(ctx, "budget.settled", {**ctx.accounts, h: account}, action=action)
    return Draft("budget.settled", "budget", ctx.revision, key, dict(request), fields)


def fail(view: LedgerView, request: Mapping[str, Any], config: BudgetConfig | None,
         limits: Mapping[str, int] | None) -> Draft | Reused:
    """Close a pending action with no refund; a low-information step (SPEC 6.1).

    Errors: the prelude's, ``UNKNOWN_ACTION``, ``ACTION_CLOSED`` (never ``LIMIT_REACHED``:
    its room was kept at reserve).
    """
    h, action_id = request["hypothesis_id"], request["action_id"]
    reused, ctx, key = _budget_prelude(view, request, config, (h, action_id))
    if reused is not None:
        return reused
    action = dict(_require_action(view, ctx, h, action_id, verb="fail"))
    account = dict(ctx.accounts[h])
    account["pending_action_id"] = None
    account["failed_actions"] += 1
    account["low_information_streak"] += 1
    _apply_status_rules(account, ctx.policy)
    action.update(status=ACTION_FAILED, reward_units=0)
    fields = _budget_fields(ctx, "budget.failed", {**ctx.accounts, h: account}, action=action)
    return Draft("budget.failed", "budget", ctx.revision, key, dict(request), fields)


def reject(view: LedgerView, request: Mapping[str, Any], config: BudgetConfig | None,
           limits: Mapping[str, int] | None) -> Draft | Reused:
    """Mark an account ``rejected`` (terminal) without refund (SPEC 6.1).

    Errors: the prelude's, ``ACCOUNT_TERMINAL``, ``ACTION_PENDING``, ``LIMIT_REACHED``.
    """
    h = request["hypothesis_id"]
    reused, ctx, key = _budget_prelude(view, request, config, (h,))
    if reused is not None:
        return reused
    account = _open_account(ctx, h)
    _check_budget_room(view, limits, ctx.accounts)
    account["status"] = STATUS_REJECTED
    account["terminal_reason"] = request["reason"]
    fields = _budget_fields(ctx, "budget.rejected", {**ctx.accounts, h: account})
    return Draft("budget.rejected", "budget", ctx.revision, key, dict(request), fields)


def investigable(accounts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Non-terminal accounts with no pending action, in hypothesis order."""
    return [a["hypothesis_id"] for a in sorted_accounts(accounts)
            if a["status"] not in TERMINAL_STATUSES and a["pending_action_id"] is None]


def ready_for_evaluation(accounts: Mapping[str, Mapping[str, Any]]) -> bool:
    """Every account terminal and nothing pending (an empty ``investigable`` is not enough)."""
    return bool(accounts) and all(
        a["status"] in TERMINAL_STATUSES and a["pending_action_id"] is None for a in accounts.values()
    )
