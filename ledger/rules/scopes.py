"""Scoped limits and authority (docs/scopes.md): pure rules over a :class:`LedgerView`.

Scopes are named ``case``, ``revision:<n>`` and ``hypothesis:<n>/<Hk>``. A scope's
limits are *established* by an issuer (optionally with a delegate's proposal;
the effective limit per dimension is the stricter one); only that issuer may
change them, naming the previous establishment's ``seq``. Dimensions:

* ``units`` — net units consumed by the accounts in the scope (reserved cost
  minus refunds: a pending reservation counts in full until it is settled);
* ``actions`` — reservations made;
* ``duration_ms`` — milliseconds from the scope's first establishment to the
  event time (``context.at``; times never go back, so never negative);
* ``cost_usd_millicents`` — money tools reported with ``record_result``.

The budget rules call :func:`enforce` before every reservation and
:func:`approaching` after each event that consumes; the soft gate's reads
(:mod:`ledger.rules.gate`) ask :func:`enforce` the same question without reserving.
Every ratio is integer basis points and every comparison an integer cross-multiplication.
"""

from __future__ import annotations

import functools
import numbers
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, Callable, Mapping

from ..ground.arguments import plain_arguments
from ..ground import errors as E
from ..ground.canonical import SAFE_INTEGER_MAX, canonical_sha256, check_int
from ..ground.errors import LedgerError, describe_value, given, pass_on_interruption, shortened, shown
from .common import (TERMINAL_STATUSES, Context, Draft, LedgerView, Outcome, Reused, check_action_id, check_reason,
                     not_initialized, operation_key, replay_or_conflict, require_case, unknown_hypothesis_error)

DIMENSIONS = ("units", "actions", "duration_ms", "cost_usd_millicents")
ON_EXHAUSTED = ("block_action", "task_failed", "scope_cancelled")
BPS = 10_000
DEFAULT_WARNING_BPS = 8_000
SCOPE_RE = re.compile(r"^(?:case|revision:([1-9][0-9]{0,8})|hypothesis:([1-9][0-9]{0,8})/(H[1-9][0-9]*))$")


# --- shapes ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ScopeName:
    """A parsed scope name: ``revision``/``hypothesis_id`` are None where the scope holds them all."""

    name: str
    scope_type: str
    revision: int | None
    hypothesis_id: str | None

    def scope_id(self, case_id: str) -> str:
        """``scope_id`` as ``scope_usage`` shows it: the case id, ``<n>`` or ``<n>/<Hk>``."""
        return case_id if self.scope_type == "case" else self.name.split(":", 1)[1]


def parse_scope(value: Any) -> ScopeName:
    """``case``, ``revision:<n>`` or ``hypothesis:<n>/<Hk>`` (``INVALID_ARGUMENT`` otherwise)."""
    match = SCOPE_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise LedgerError(E.INVALID_ARGUMENT, f"scope must be 'case', 'revision:<n>' or 'hypothesis:<n>/<Hk>', "
                          f"got {given(value, 80)}")
    if value == "case":
        return ScopeName(value, "case", None, None)
    if match.group(1):
        return ScopeName(value, "revision", int(match.group(1)), None)
    return ScopeName(value, "hypothesis", int(match.group(2)), match.group(3))


_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def ratio_to_bps(ratio: Any) -> int:
    """``warning_ratio`` (0–1, at most four decimals; any real number type: int, float, Decimal,
    Fraction, numpy's; or a decimal string in ASCII digits) as integer basis points, exactly: 0.8 →
    8000. ``INVALID_ARGUMENT`` otherwise."""
    def refused(why: str = "must be a number from 0 to 1") -> LedgerError:
        try:
            shown = shortened(repr(ratio), 100)
        except ValueError:  # an integer of more digits than Python turns into text
            shown = f"an integer of about {ratio.bit_length() * 3 // 10} digits"
        except Exception as exc:  # a caller's object whose repr raises
            pass_on_interruption(exc)
            shown = f"a {type(ratio).__name__} that cannot be shown"
        return LedgerError(E.INVALID_ARGUMENT, f"warning_ratio {why}, got {shown}")

    if isinstance(ratio, bool) or not isinstance(ratio, (str, Decimal, numbers.Real)):
        raise refused()
    if isinstance(ratio, numbers.Rational):  # int, Fraction, numpy's integers: exactly, never as text
        if not 0 <= ratio <= 1:
            raise refused("must be from 0 to 1")
        scaled = Fraction(int(ratio.numerator), int(ratio.denominator)) * BPS  # numpy integers as Python ones
        if scaled.denominator != 1:
            raise refused("accepts at most four decimals")
        return int(scaled)
    if isinstance(ratio, str):
        text = ratio.strip()
        if not _DECIMAL_TEXT.fullmatch(text):  # ASCII digits only, as every number option
            raise refused()
    elif isinstance(ratio, Decimal):
        text = str(ratio)
    else:  # a float of any width (numpy's too): its own shortest text, which reads back as it
        text = str(ratio)
        if not _DECIMAL_TEXT.fullmatch(text):
            try:
                text = repr(float(ratio))
            except (OverflowError, ValueError):
                raise refused() from None
    try:
        exact = Decimal(text)
    except InvalidOperation:
        raise refused() from None
    if not exact.is_finite() or not 0 <= exact <= 1:
        raise refused("must be from 0 to 1")
    # exactly, in integers: Decimal arithmetic would round to its 28 digits (0.99…9 with 32 nines → 1)
    if not exact:
        return 0
    _, digits, exponent = exact.as_tuple()
    significant = "".join(map(str, digits)).rstrip("0")  # not empty: the ratio is not 0
    shift = exponent + len(digits) - len(significant) + 4  # basis points = int(significant) * 10**shift
    if shift < 0:
        raise refused("accepts at most four decimals")
    return int(significant) * 10 ** shift


def _check_limits(value: Any, what: str) -> dict[str, int]:
    if not isinstance(value, Mapping) or not value:
        raise LedgerError(E.INVALID_ARGUMENT, f"{what} must map dimensions ({', '.join(DIMENSIONS)}) to integers")
    for key in value:
        if not isinstance(key, str) or key not in DIMENSIONS:
            raise LedgerError(E.INVALID_ARGUMENT, f"{what}: unknown dimension {given(key, 40)}; "
                              f"dimensions: {', '.join(DIMENSIONS)}")
    return {key: check_int(value[key], f"{what}.{key}", minimum=0) for key in DIMENSIONS if key in value}


#: ``shape_establish`` given no ``warning_ratio`` (None is a ratio it refuses).
_NO_RATIO = object()


@plain_arguments
def shape_establish(scope: Any, limits: Any, issuer: Any, delegate: Any = None, delegate_limits: Any = None,
                    warning_bps: Any = DEFAULT_WARNING_BPS, on_exhausted: Any = "block_action",
                    causation_seq: Any = None, *, warning_ratio: Any = _NO_RATIO) -> dict[str, Any]:
    """Request of ``establish``, refused in the order of docs/errors.md: each argument in the order
    ``establish`` takes them (scope, limits, issuer: ``INVALID_ID``, delegate limits, warning, causation,
    delegate: ``INVALID_ID``), then ``INVALID_CAPABILITY`` for an ``on_exhausted`` not in
    :data:`ON_EXHAUSTED` (``ignore`` included). ``warning_ratio``, when given, takes the place of
    ``warning_bps`` (:func:`ratio_to_bps`, checked in the warning's turn)."""
    parsed = parse_scope(scope)
    checked_limits = _check_limits(limits, "limits")
    checked_issuer = check_action_id(issuer, "issuer")
    checked_delegate_limits = None if delegate_limits is None else _check_limits(delegate_limits, "delegate_limits")
    if warning_ratio is _NO_RATIO:
        bps = check_int(warning_bps, "warning_bps", minimum=0, maximum=BPS)
    else:
        bps = ratio_to_bps(warning_ratio)
    causation = None if causation_seq is None else check_int(causation_seq, "causation_seq", minimum=1)
    checked_delegate = None if delegate is None else check_action_id(delegate, "delegate")
    if not isinstance(on_exhausted, str) or on_exhausted not in ON_EXHAUSTED:
        raise LedgerError(E.INVALID_CAPABILITY, f"on_exhausted must be one of {', '.join(ON_EXHAUSTED)}, "
                          f"got {given(on_exhausted, 40)}", on_exhausted=shown(on_exhausted, 40))
    return {"op": "establish", "scope": parsed.name, "limits": checked_limits, "issuer": checked_issuer,
            "delegate": checked_delegate, "delegate_limits": checked_delegate_limits, "warning_bps": bps,
            "on_exhausted": on_exhausted, "causation_seq": causation}


@plain_arguments
def shape_request_increase(scope: Any, dimension: Any, amount: Any, requester: Any, reason: Any) -> dict[str, Any]:
    """Request of ``request_increase`` (an event that changes nothing)."""
    parsed = parse_scope(scope)
    if not isinstance(dimension, str) or dimension not in DIMENSIONS:
        raise LedgerError(E.INVALID_ARGUMENT, f"dimension must be one of {', '.join(DIMENSIONS)}, got {given(dimension, 40)}")
    return {"op": "request_increase", "scope": parsed.name, "dimension": dimension,
            "amount": check_int(amount, "amount", minimum=1), "requester": check_action_id(requester, "requester"),
            "reason": check_reason(reason)}


# --- consumption ---------------------------------------------------------------------------
def _micros(stamp: str) -> int:
    return (datetime.fromisoformat(stamp[:-1]) - datetime(1, 1, 1)) // timedelta(microseconds=1)


def elapsed_ms(origin_at: str, at: str) -> int:
    """Whole milliseconds from ``origin_at`` to ``at`` (stored timestamps), never negative."""
    return max(0, _micros(at) - _micros(origin_at)) // 1000


def _scope_accounts(view: LedgerView, scope: ScopeName) -> dict[tuple[int, str], dict[str, Any]]:
    case = require_case(view)
    revisions = range(1, case["revision"] + 1) if scope.revision is None else (scope.revision,)
    found = {}
    for revision in revisions:
        for h, account in view.accounts(revision).items():
            if scope.hypothesis_id is None or h == scope.hypothesis_id:
                found[(revision, h)] = account
    return found


def consumption(view: LedgerView, info: Mapping[str, Any], at: str) -> dict[str, int]:
    """What the scope of establishment ``info`` consumed, per dimension, at time ``at``."""
    scope = parse_scope(info["scope"])
    accounts = _scope_accounts(view, scope).values()
    return {
        "units": sum(a["spent_units"] - a["rewarded_units"] for a in accounts),
        "actions": sum(a["settled_actions"] + a["failed_actions"] + (a["pending_action_id"] is not None)
                       for a in accounts),
        "duration_ms": elapsed_ms(info["origin_at"], at),
        "cost_usd_millicents": view.money_consumed(scope.revision, scope.hypothesis_id),
    }


def within_safe_range(amount: int, scope: str, dimension: str) -> int:
    """``amount`` (a derived consumption) if exact JSON can carry it, else ``LIMIT_REACHED`` naming the
    scope and dimension: ledger numbers stop at ±(2**53 − 1), and a sum of large accounts may not."""
    if abs(amount) > SAFE_INTEGER_MAX:
        raise LedgerError(E.LIMIT_REACHED, f"{dimension} consumed in scope {scope} would be {amount}, beyond the "
                          f"largest number the ledger records ({SAFE_INTEGER_MAX}); nothing was written",
                          scope=scope, dimension=dimension)
    return amount


def establishment_row(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ``scope_establishments`` row (and a view's :meth:`scope` answer, less ``limits``) of a
    ``scope.established`` event body."""
    scope = parse_scope(body["scope"])
    return {"seq": body["seq"], "scope": scope.name, "scope_type": scope.scope_type, "scope_id": body["scope_id"],
            "scope_revision": scope.revision, "scope_hypothesis": scope.hypothesis_id,
            "establishment": body["establishment"], "issuer": body["issuer"], "delegate": body["delegate"],
            "warning_bps": body["warning_bps"], "on_exhausted": body["on_exhausted"],
            "causation_seq": body["causation_seq"], "origin_at": body["origin_at"]}


def containing(revision: int, hypothesis_id: str) -> tuple[str, ...]:
    """Every scope that holds account ``hypothesis_id`` of ``revision``, innermost first."""
    return (f"hypothesis:{revision}/{hypothesis_id}", f"revision:{revision}", "case")


def _scope_fields(case: Mapping[str, Any], event_type: str, scope: ScopeName, **extra: Any) -> dict[str, Any]:
    fields = {"format": "scope-event-v1", "type": event_type, "case_id": case["case_id"],
              "package_id": case["package_id"], "revision": case["revision"], "scope": scope.name,
              "scope_type": scope.scope_type, "scope_id": scope.scope_id(case["case_id"])}
    fields.update(extra)
    return fields


# --- enforcement ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Exceeded:
    """The limit a reservation would break: the tightest one when several would."""

    scope: str
    dimension: str
    declared: int
    consumed_after: int
    remaining: int
    on_exhausted: str
    establishment_seq: int

    @property
    def terminal_reason(self) -> str:
        return f"limit:{self.scope}:{self.dimension}"


#: Scope name → its newest establishment and consumption at one moment (None, None: not established),
#: so one read asking about several accounts looks each scope up once.
ScopeMemo = dict[str, "tuple[dict[str, Any] | None, dict[str, int] | None]"]


def scope_state(view: LedgerView, name: str, at: str,
                memo: ScopeMemo | None = None) -> tuple[dict[str, Any] | None, dict[str, int] | None]:
    """``(establishment, consumption at at)`` of scope ``name``, or ``(None, None)`` if it has none."""
    if memo is not None and name in memo:
        return memo[name]
    info = view.scope(name)
    state = (info, consumption(view, info, at) if info is not None else None)
    if memo is not None:
        memo[name] = state
    return state


def enforce(view: LedgerView, revision: int, hypothesis_id: str, cost: int, at: str,
            memo: ScopeMemo | None = None) -> Exceeded | None:
    """docs/scopes.md: the limit a reservation of ``cost`` units on ``hypothesis_id`` would exceed
    (``consumed_after > declared``) in any scope holding it, or None. When several would be,
    the one with the least remaining wins (then the innermost scope, then dimension order).
    ``memo`` (:data:`ScopeMemo`) lets one read ask about several accounts."""
    found: list[tuple[int, int, int, Exceeded]] = []
    for depth, name in enumerate(containing(revision, hypothesis_id)):
        info, used = scope_state(view, name, at, memo)
        if info is None or used is None:
            continue
        after = {**used, "units": used["units"] + cost, "actions": used["actions"] + 1}
        for order, dimension in enumerate(DIMENSIONS):
            declared = info["limits"].get(dimension)
            if declared is not None and within_safe_range(after[dimension], name, dimension) > declared:
                remaining = max(0, declared - used[dimension])
                found.append((remaining, depth, order, Exceeded(name, dimension, declared, after[dimension], remaining,
                                                                info["on_exhausted"], info["seq"])))
    return min(found, key=lambda item: item[:3])[3] if found else None


def exceeded_draft(view: LedgerView, exceeded: Exceeded, request: Mapping[str, Any], action: str) -> Draft:
    """The ``limit.exceeded`` event of a refused reservation (not an operation: no identity);
    ``action`` is what was to be reserved (a tool action, or ``test.KIND`` for a test)."""
    case = require_case(view)
    fields = _scope_fields(case, "limit.exceeded", parse_scope(exceeded.scope), dimension=exceeded.dimension,
                           declared=exceeded.declared, consumed_after=exceeded.consumed_after,
                           remaining=exceeded.remaining, on_exhausted=exceeded.on_exhausted,
                           establishment_seq=exceeded.establishment_seq,
                           hypothesis_id=request["hypothesis_id"], action_id=request["action_id"],
                           action=action)
    return Draft("limit.exceeded", "case", case["revision"], None, dict(request), fields)


def exceeded_error(exceeded: Exceeded, hypothesis_id: str) -> LedgerError:
    return LedgerError(
        E.LIMIT_EXCEEDED, f"reserving on {hypothesis_id} would take {exceeded.dimension} of scope {exceeded.scope} to "
        f"{exceeded.consumed_after}, over its limit of {exceeded.declared} (on_exhausted: {exceeded.on_exhausted})",
        scope=exceeded.scope, dimension=exceeded.dimension, declared=exceeded.declared,
        consumed_after=exceeded.consumed_after, on_exhausted=exceeded.on_exhausted)


def accounts_to_end(view: LedgerView, exceeded: Exceeded, revision: int, hypothesis_id: str) -> dict[int, list[str]]:
    """Revision → accounts the ``on_exhausted`` action makes terminal (those not terminal yet)."""
    if exceeded.on_exhausted == "task_failed":
        return {revision: [hypothesis_id]}
    if exceeded.on_exhausted != "scope_cancelled":
        return {}
    ending: dict[int, list[str]] = {}
    for (r, h), account in sorted(_scope_accounts(view, parse_scope(exceeded.scope)).items()):
        if account["status"] not in TERMINAL_STATUSES:
            ending.setdefault(r, []).append(h)
    return ending


def approaching(view: LedgerView, request: Mapping[str, Any], at: str,
                checks: list[tuple[Mapping[str, Any], frozenset[str], Mapping[str, int]]]) -> list[Draft]:
    """``limit.approaching`` events due after an event: for each ``(establishment, dimensions already
    warned, consumption the event adds)``, every dimension whose consumption is now > 0 and
    ``consumed * 10000 >= warning_bps * declared`` for the first time (10000 never warns)."""
    case = require_case(view)
    drafts = []
    for info, warned, added in checks:
        if info["warning_bps"] >= BPS:
            continue
        used = consumption(view, info, at)
        for dimension in DIMENSIONS:
            declared = info["limits"].get(dimension)
            consumed = used[dimension] + added.get(dimension, 0)
            if declared is not None:
                within_safe_range(consumed, info["scope"], dimension)
            if (declared is None or dimension in warned or consumed <= 0
                    or consumed * BPS < info["warning_bps"] * declared):
                continue
            fields = _scope_fields(case, "limit.approaching", parse_scope(info["scope"]), dimension=dimension,
                                   declared=declared, consumed=consumed, warning_bps=info["warning_bps"],
                                   establishment_seq=info["seq"])
            drafts.append(Draft("limit.approaching", "case", case["revision"], None, dict(request), fields))
    return drafts


Rule = Callable[[LedgerView, Mapping[str, Any], Context], "Draft | Outcome | Reused"]


def with_duration_warnings(rule: Rule) -> Rule:
    """``rule`` with the ``limit.approaching`` events its operation's time makes due appended after
    its events (:func:`duration_warnings`): every operation's rule is wrapped (the registry,
    ``ledger.model.operations``), so the API, verify's replay and the simulator agree."""
    @functools.wraps(rule)
    def checked(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Outcome | Reused:
        outcome = rule(view, request, context)
        if isinstance(outcome, Reused):
            return outcome
        drafts = outcome.events if isinstance(outcome, Outcome) else (outcome,)
        due = duration_warnings(view, request, context.at, drafts)
        if not due:
            return outcome
        return Outcome((*drafts, *due), outcome.refusal if isinstance(outcome, Outcome) else None)
    return checked


def duration_warnings(view: LedgerView, request: Mapping[str, Any], at: str, drafts: tuple[Draft, ...]) -> list[Draft]:
    """``limit.approaching`` for each ``duration_ms`` limit of a scope holding the operation's events
    that ``at`` reaches for the first time: a warning is checked after each event (docs/scopes.md),
    and time moves a duration at every event, where the other dimensions move only at the
    reservations, results and establishments that check them. The scopes holding an event: the
    case, its revision and, for an event about one hypothesis, that hypothesis's; innermost first.
    Scopes the operation establishes, and warnings it already writes, are left to it."""
    limited = view.duration_scopes()
    if not limited:  # the usual case: no duration limit anywhere
        return []
    case = view.case()
    if case is None:
        return []
    hypotheses = {request["hypothesis_id"]} if isinstance(request.get("hypothesis_id"), str) else set()
    hypotheses.update(d.fields["action"]["hypothesis_id"] for d in drafts if isinstance(d.fields.get("action"), dict))
    names: dict[str, None] = {}
    for draft in drafts:
        for hypothesis in sorted(hypotheses):
            names[f"hypothesis:{draft.revision}/{hypothesis}"] = None
    for draft in drafts:
        names[f"revision:{draft.revision}"] = None
    names["case"] = None
    established = {d.fields["scope"] for d in drafts if d.type == "scope.established"}
    written = {d.fields["establishment_seq"] for d in drafts
               if d.type == "limit.approaching" and d.fields["dimension"] == "duration_ms"}
    due = []
    for name in names:
        info = view.scope(name) if name in limited and name not in established else None
        if (info is None or "duration_ms" not in info["limits"] or info["warning_bps"] >= BPS
                or info["seq"] in written or "duration_ms" in view.warned(name, info["seq"])):
            continue
        declared, consumed = info["limits"]["duration_ms"], elapsed_ms(info["origin_at"], at)
        if consumed <= 0 or consumed * BPS < info["warning_bps"] * declared:
            continue
        fields = _scope_fields(case, "limit.approaching", parse_scope(name), dimension="duration_ms",
                               declared=declared, consumed=within_safe_range(consumed, name, "duration_ms"),
                               warning_bps=info["warning_bps"], establishment_seq=info["seq"])
        # it carries the operation's request, so it may be as large: a feedback's attachments, a tool's reply
        due.append(Draft("limit.approaching", "case", case["revision"], None, dict(request), fields,
                         size_allowance=max(d.size_allowance for d in drafts)))
    return due


def warnings_after(view: LedgerView, request: Mapping[str, Any], at: str, revision: int, hypothesis_id: str,
                   added: Mapping[str, int]) -> list[Draft]:
    """:func:`approaching` for every established scope holding ``hypothesis_id`` of ``revision``."""
    checks = []
    for name in containing(revision, hypothesis_id):
        info = view.scope(name)
        if info is not None:
            checks.append((info, view.warned(name, info["seq"]), added))
    return approaching(view, request, at, checks)


# --- establish and request_increase -----------------------------------------------------------
def _check_scope_exists(view: LedgerView, scope: ScopeName) -> str | None:
    """The issuer of the scope's revision (None for ``case``); ``NOT_INITIALIZED``/``UNKNOWN_HYPOTHESIS``."""
    if scope.revision is None:
        return None
    case = require_case(view)
    if scope.revision > case["revision"]:
        raise LedgerError(E.INVALID_ARGUMENT, f"revision {scope.revision} is not open (the case is at revision "
                          f"{case['revision']})")
    issuer = view.revision_issuer(scope.revision)
    if issuer is None:
        raise not_initialized(scope.revision)
    if scope.hypothesis_id is not None and scope.hypothesis_id not in view.accounts(scope.revision):
        raise unknown_hypothesis_error(scope.revision, scope.hypothesis_id)
    return issuer


def _check_authority(previous: Mapping[str, Any] | None, revision_issuer: str | None,
                     request: Mapping[str, Any]) -> None:
    issuer, causation = request["issuer"], request["causation_seq"]
    if previous is None:
        if revision_issuer is not None and issuer != revision_issuer:
            raise LedgerError(E.AUTHORITY_DENIED, f"only {revision_issuer}, who initialized the revision's budget, may "
                              f"establish {request['scope']}; {issuer} may not", issuer=issuer)
        if causation is not None:
            raise LedgerError(E.INVALID_ARGUMENT, f"{request['scope']} has no establishment yet; leave causation_seq out")
        return
    if issuer != previous["issuer"]:
        raise LedgerError(E.AUTHORITY_DENIED, f"only {previous['issuer']}, who established {request['scope']}, may "
                          f"change its limits; {issuer} may not (ask with request_increase)", issuer=issuer)
    if causation != previous["seq"]:
        raise LedgerError(E.INVALID_ARGUMENT, f"causation_seq must be {previous['seq']}, the seq of the previous "
                          f"establishment of {request['scope']} (--causation-seq {previous['seq']} on the command "
                          f"line); got {describe_value(causation)}", expected=previous["seq"])


def effective_limits(limits: Mapping[str, int], delegate_limits: Mapping[str, int] | None) -> dict[str, int]:
    """Per dimension, the stricter (smaller) of the issuer's and the delegate's proposals."""
    merged = dict(limits)
    for dimension, value in (delegate_limits or {}).items():
        merged[dimension] = min(value, merged.get(dimension, value))
    return {d: merged[d] for d in DIMENSIONS if d in merged}


def check_delegate(request: Mapping[str, Any]) -> None:
    """``INVALID_ARGUMENT`` for ``delegate_limits`` with no ``delegate``: the event would hold a tighter
    limit with no one who proposed it."""
    if request["delegate_limits"] is not None and request["delegate"] is None:
        raise LedgerError(E.INVALID_ARGUMENT, "delegate_limits are a delegate's own proposal: name the delegate "
                          "who made it (delegate; --delegate on the command line)")


def establish(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Outcome | Reused:
    """Set or change a scope's limits (docs/scopes.md), followed by any ``limit.approaching`` now due.

    Errors in order: ``INVALID_ARGUMENT`` (``delegate_limits`` with no ``delegate``, a revision not
    open), ``NOT_INITIALIZED``,
    ``UNKNOWN_HYPOTHESIS``, ``AUTHORITY_DENIED``, ``INVALID_ARGUMENT`` (a wrong ``causation_seq``). A
    request under the identity of an earlier establishment with other inputs (a change of limits that
    leaves ``causation_seq`` out or names an older establishment) is one of the last two: only the
    identical request is that establishment again (``reused``).
    """
    case = require_case(view)
    scope = parse_scope(request["scope"])
    key = operation_key(0, "establish", scope.name, str(request["causation_seq"] or 0))
    try:
        reused = replay_or_conflict(view, key, request)
    except LedgerError as exc:
        previous = view.scope(scope.name) if exc.code == E.OPERATION_CONFLICT else None
        if previous is not None:  # anyone but its issuer, or a causation_seq not naming the newest establishment
            _check_authority(previous, None, request)
        raise
    if reused is not None:
        return reused
    if context.limits is not None:  # not on replay: an older case-ledger took it, and its history stays
        check_delegate(request)
    revision_issuer = _check_scope_exists(view, scope)
    previous = view.scope(scope.name)
    _check_authority(previous, revision_issuer, request)
    limits = effective_limits(request["limits"], request["delegate_limits"])
    chain = [request["issuer"]] + ([request["delegate"]] if request["delegate"] else [])
    fields = _scope_fields(case, "scope.established", scope, issuer=request["issuer"], delegate=request["delegate"],
                           delegation_chain=chain, effective_limits=limits, warning_bps=request["warning_bps"],
                           on_exhausted=request["on_exhausted"], causation_seq=request["causation_seq"],
                           establishment=1 + (previous["establishment"] if previous else 0),
                           origin_at=previous["origin_at"] if previous else context.at)
    draft = Draft("scope.established", "case", case["revision"], key, dict(request), fields)
    info = {"scope": scope.name, "seq": view.head()[0] + 1, "limits": limits, "warning_bps": request["warning_bps"],
            "origin_at": fields["origin_at"]}
    warnings = approaching(view, request, context.at, [(info, frozenset(), {})])
    return with_following(draft, warnings)


def with_following(draft: Draft, following: list[Draft]) -> Draft | Outcome:
    """``draft`` alone, or an :class:`Outcome` of ``draft`` then the events that follow it."""
    return Outcome((draft, *following)) if following else draft


def request_increase(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Reused:
    """Record a delegate's request for more of one dimension; it changes no limit.

    Identity: the request itself (an identical repeat is ``reused``).
    Errors: ``INVALID_ARGUMENT`` (a revision not open), ``NOT_INITIALIZED``, ``UNKNOWN_HYPOTHESIS``.
    """
    case = require_case(view)
    scope = parse_scope(request["scope"])
    key = operation_key(0, "request_increase", scope.name, canonical_sha256(request)[:32])
    reused = replay_or_conflict(view, key, request)
    if reused is not None:
        return reused
    _check_scope_exists(view, scope)
    fields = _scope_fields(case, "scope.increase_requested", scope, dimension=request["dimension"],
                           amount=request["amount"], requester=request["requester"], reason=request["reason"])
    return Draft("scope.increase_requested", "case", case["revision"], key, dict(request), fields)

