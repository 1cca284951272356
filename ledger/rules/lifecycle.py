"""Lifecycle rules (docs/concepts.md): creating the case, opening revisions, moving between states."""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..ground.arguments import plain_arguments
from ..ground import errors as E
from ..ground.canonical import canonical_sha256, check_int
from ..ground.errors import LedgerError, given
from .common import (is_blank, label_problem, CASE_STATES, CREATED, EVALUATING, GENERATING, OPEN_REVISION_FROM, STATEMENT_CHARS_MAX, TRANSITIONS,
                     Context, Draft,
                     LedgerView, Reused, check_case_id, check_text, operation_key, replay_or_conflict,
                     require_case)


@plain_arguments
def shape_create(case_id: Any, package_id: Any) -> dict[str, Any]:
    """Request of the genesis event ``case.created``."""
    check_case_id(case_id)
    if not isinstance(package_id, str) or not re.fullmatch(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", package_id):
        raise LedgerError(E.INVALID_ARGUMENT, f"package_id must be a UUID4, got {package_id!r}")
    return {"op": "create", "case_id": case_id, "package_id": package_id}


@plain_arguments
def shape_open_revision(hypotheses: Any, units_per_hypothesis: Any, *,
                        default_units: int, max_hypotheses: int) -> dict[str, Any]:
    """Request of ``open_revision``: a non-empty list of ``{"statement": str}`` (docs/concepts.md)."""
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
        if not isinstance(statement, str) or is_blank(statement):
            raise LedgerError(E.INVALID_ARGUMENT, f"hypothesis {index}: statement must be a non-blank string")
        if len(statement) > STATEMENT_CHARS_MAX:
            raise LedgerError(
                E.INVALID_ARGUMENT, f"hypothesis {index}: statement longer than {STATEMENT_CHARS_MAX} characters"
            )
        check_text(statement, f"hypothesis {index} statement")
        batch.append({"statement": statement})
    units = default_units if units_per_hypothesis is None else units_per_hypothesis
    check_int(units, "units_per_hypothesis", minimum=1)
    return {"op": "open_revision", "hypotheses": batch, "units_per_hypothesis": units,
            "max_hypotheses": max_hypotheses}


@plain_arguments
def shape_transition(to: Any) -> dict[str, Any]:
    """Request of ``transition``: ``to`` must be one of :data:`CASE_STATES`."""
    if not isinstance(to, str) or to not in CASE_STATES:
        raise LedgerError(E.INVALID_ARGUMENT, f"unknown case state {given(to, 40)}; states: {', '.join(CASE_STATES)}")
    return {"op": "transition", "to": to}


def case_fields(case: Mapping[str, Any], event_type: str, revision: int) -> dict[str, Any]:
    return {"format": "case-event-v1", "type": event_type, "case_id": case["case_id"],
            "package_id": case["package_id"], "revision": revision}


def create(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft:
    """Genesis event ``case.created`` (state ``CREATED``, revision 0)."""
    if view.case() is not None:
        raise LedgerError(E.CASE_EXISTS, "the ledger already holds a case")
    fields = {"format": "case-event-v1", "type": "case.created", "case_id": request["case_id"],
              "package_id": request["package_id"], "revision": 0, "state": CREATED}
    return Draft("case.created", "case", 0, None, dict(request), fields)


def open_revision(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Reused:
    """Open revision 1 from ``CREATED``, or the next one from ``EVALUATING``/``CLOSED``.

    An identical call while the case is still in the revision it opened returns
    :class:`Reused`. Errors: ``INVALID_TRANSITION``.
    """
    case = require_case(view)
    current = case["revision"]
    info = view.revision(current) if current > 0 else None
    if (info is not None and info["hypotheses_request"] == request["hypotheses"]
            and info["units_per_hypothesis"] == request["units_per_hypothesis"]):
        return Reused(info["seq"])
    if case["state"] not in OPEN_REVISION_FROM:
        raise LedgerError(
            E.INVALID_TRANSITION,
            f"open_revision is allowed from CREATED, EVALUATING or CLOSED, not {case['state']}"
            + (_not_a_rerun(current, info, request) if info is not None else ""),
            state=case["state"],
        )
    revision = current + 1
    units = request["units_per_hypothesis"]
    hypotheses = [
        {"hypothesis_id": f"H{i}", "statement": h["statement"], "allocation_units": units}
        for i, h in enumerate(request["hypotheses"], start=1)
    ]
    fields = case_fields(case, "revision.opened", revision)
    fields.update({
        "from_state": case["state"], "state": GENERATING, "hypotheses": hypotheses,
        "hypothesis_batch_sha256": canonical_sha256(hypotheses),
        "units_per_hypothesis": units, "max_hypotheses": request["max_hypotheses"],
    })
    return Draft("revision.opened", "case", revision, None, dict(request), fields)


def _not_a_rerun(current: int, info: Mapping[str, Any], request: Mapping[str, Any]) -> str:
    """Why an ``open_revision`` refused mid-revision was not the re-run it may look like (only the
    same hypotheses and units are ``reused``): what differs from revision ``current``'s."""
    if info["hypotheses_request"] != request["hypotheses"]:
        count = len(info["hypotheses_request"])
        return (f"; revision {current} is open with other hypotheses ({count} of them): a re-run is reused only "
                "with the same hypotheses and units per hypothesis")
    return (f"; revision {current} is open with the same hypotheses at {info['units_per_hypothesis']} units each, "
            f"and this call asks for {request['units_per_hypothesis']}: a re-run is reused only with the same "
            "units per hypothesis")


def transition(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Reused:
    """Move the case along docs/concepts.md's graph. Errors: ``INVALID_TRANSITION``, ``ACTION_PENDING``."""
    case = require_case(view)
    target = request["to"]
    if case["state"] == target:
        return Reused(case["state_seq"])
    if (case["state"], target) not in TRANSITIONS:
        hint = " (use open_revision)" if target == GENERATING else ""
        allowed = sorted(to for frm, to in TRANSITIONS if frm == case["state"])
        moves = (f"from {case['state']} the case can move to {', '.join(allowed)}" if allowed
                 else f"no transition leaves {case['state']}")
        if case["state"] in OPEN_REVISION_FROM:
            moves += " (open_revision starts a new revision)"
        raise LedgerError(
            E.INVALID_TRANSITION, f"cannot move from {case['state']} to {target}{hint}; {moves}",
            state=case["state"], to=target, allowed=allowed,
        )
    if target == EVALUATING:
        pending = [a for a in view.accounts(case["revision"]).values() if a["pending_action_id"]]
        if pending:
            names = ", ".join(f"{a['hypothesis_id']}/{a['pending_action_id']}" for a in pending)
            raise LedgerError(E.ACTION_PENDING, f"actions still pending: {names}; settle or fail them first")
    fields = case_fields(case, "case.transitioned", case["revision"])
    fields.update({"from_state": case["state"], "state": target})
    return Draft("case.transitioned", "case", case["revision"], None, dict(request), fields)




OUTCOME_CHARS_MAX = 64
OUTCOME_SOURCE_CHARS_MAX = 1000


#: Outcome names simulate's reports use themselves: ``(all)`` is the row of every run,
#: ``(no outcome)`` the runs that recorded none.
REPORT_OUTCOMES = frozenset({"(all)", "(no outcome)"})


def check_new_outcome(outcome: str, where: str = "outcome") -> None:
    """``INVALID_ARGUMENT`` for an outcome named like a row of simulate's reports (:data:`REPORT_OUTCOMES`),
    with spaces around it, holding a character that shows nothing or breaks its line (a control or
    format character) or letters not in composed form (:func:`~ledger.rules.common.label_problem`), each
    of which would make a label that reads as another one; refused when an outcome is recorded (a ledger
    that recorded one before still verifies)."""
    problem = label_problem(outcome)
    if problem:
        raise LedgerError(E.INVALID_ARGUMENT, f"{where} {outcome!r} {problem}")
    if outcome in REPORT_OUTCOMES:
        raise LedgerError(E.INVALID_ARGUMENT, f"{where} {outcome!r} is a name simulate's reports use themselves "
                          f"({', '.join(sorted(REPORT_OUTCOMES))}); call it something else")


@plain_arguments
def shape_record_outcome(outcome: Any, source: Any) -> dict[str, Any]:
    """Request of ``record_outcome``: a short non-blank ``outcome`` label (at most 64 characters) and a
    non-blank ``source`` saying where the verdict came from (at most 1000). ``INVALID_ARGUMENT`` otherwise."""
    for value, what, limit in ((outcome, "outcome", OUTCOME_CHARS_MAX), (source, "source", OUTCOME_SOURCE_CHARS_MAX)):
        if not isinstance(value, str) or is_blank(value):
            raise LedgerError(E.INVALID_ARGUMENT, f"{what} must be a non-blank string, got {given(value, 80)}")
        if len(value) > limit:
            raise LedgerError(E.INVALID_ARGUMENT, f"{what} is longer than {limit} characters")
        check_text(value, what)
    return {"op": "record_outcome", "outcome": outcome, "source": source}


def record_outcome(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Reused:
    """How the current revision's work ended (docs/runs.md): once per revision, in any state after
    ``open_revision`` (EVALUATING and CLOSED included: the verdict often comes after the work).
    The same outcome again is :class:`Reused`; a different one is ``OPERATION_CONFLICT``.
    Errors: ``INVALID_TRANSITION`` (no revision is open yet), ``OPERATION_CONFLICT``."""
    case = require_case(view)
    revision = case["revision"]
    if revision == 0:
        raise LedgerError(E.INVALID_TRANSITION, f"record_outcome needs an open revision; the case is {case['state']} "
                          "(open_revision first)", state=case["state"])
    key = operation_key(revision, "record_outcome")
    try:
        found = replay_or_conflict(view, key, request)
    except LedgerError as exc:
        raise LedgerError(E.OPERATION_CONFLICT, f"revision {revision} already has another outcome (seq "
                          f"{exc.details['seq']}); an outcome is recorded once per revision", **exc.details) from None
    if found is not None:
        return found
    fields = case_fields(case, "case.outcome_recorded", revision)
    fields.update({"state": case["state"], "outcome": request["outcome"], "source": request["source"]})
    return Draft("case.outcome_recorded", "case", revision, key, dict(request), fields)
