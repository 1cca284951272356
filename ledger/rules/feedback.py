"""Rules of asynchronous tests and feedback (docs/evidence.md).

* :func:`request_test` reserves an external test (action ``test.human`` or
  ``test.automated``, priced by the policy's ``test_costs``) on a hypothesis and
  binds it to an ``operation_id``: a ``budget.test_requested`` budget event.
* :func:`submit_feedback` stores a draft reply to that test (``F000001``…, case-wide)
  with its attachments as content rows: a ``feedback.submitted`` case event. A draft is
  not evidence.
* :func:`confirm_feedback` confirms a draft (``feedback.confirmed``) and, when the case
  is ``BLOCKED``, moves it back to ``INVESTIGATING_HYPOTHESES`` in the same operation.
* :func:`store_feedback` checks the confirmed draft's hashes and publishes it as an
  evidence record plus a new index, bound to the test's reservation.

All are pure: they read a :class:`~ledger.rules.common.LedgerView` and return drafts.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, Mapping

from ..ground.arguments import plain_arguments
from ..ground import errors as E
from ..ground.canonical import canonical_bytes, canonical_sha256, sha256_hex
from ..ground.config import BudgetConfig
from ..ground.errors import LedgerError, given, integrity_error, shown
from . import budget as budget_rules
from . import evidence as evidence_rules
from .common import (ACTION_RESERVED, BLOCKED, INVESTIGATING, MUTABLE_STATES, Context, Draft, LedgerView, Outcome,
                     Reused, case_state_error, check_action_id, check_hypothesis_id, replay_or_conflict, require_case)
from .lifecycle import case_fields

TEST_KINDS = ("human", "automated")
FEEDBACK_STATUSES = ("passed", "failed", "unable_to_test")
FEEDBACK_ID_RE = re.compile(r"^F[0-9]{6,}$")
ATTACHMENT_NAME_MAX = 128
ATTACHMENT_NAME_RE = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{ATTACHMENT_NAME_MAX - 1}}}$")
ATTACHMENTS_MAX = 64
#: States a draft may be submitted or confirmed in: work goes on, or waits for the test.
FEEDBACK_STATES = MUTABLE_STATES | {BLOCKED}


def feedback_id(number: int) -> str:
    """``F000001`` for 1 (six digits, more once past 999999)."""
    return f"F{number:06d}"


# --- shapes ------------------------------------------------------------------------------------
@plain_arguments
def shape_request_test(hypothesis_id: Any, action_id: Any, kind: Any, operation_id: Any) -> dict[str, Any]:
    """Request of ``request_test``: ``INVALID_ID`` for a malformed id, ``INVALID_ARGUMENT`` for a
    kind other than ``human`` or ``automated``."""
    check_hypothesis_id(hypothesis_id)
    check_action_id(action_id)
    check_action_id(operation_id, "operation_id")
    if not isinstance(kind, str) or kind not in TEST_KINDS:
        raise LedgerError(E.INVALID_ARGUMENT, f"test kind must be one of {', '.join(TEST_KINDS)}, got {given(kind, 40)}")
    return {"op": "request_test", "hypothesis_id": hypothesis_id, "action_id": action_id, "kind": kind,
            "operation_id": operation_id}


def _attachment_bytes(name: str, value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, Mapping) and set(value) == {"base64"} and isinstance(value["base64"], str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except (binascii.Error, ValueError):
            pass
    raise LedgerError(E.INVALID_ARGUMENT, f"attachment {name!r} must be its text or {{\"base64\": …}} (standard "
                      "base64 alphabet, padded)", attachment=name)


@plain_arguments
def shape_submit_feedback(operation_id: Any, reply: Any, attachments: Any) -> dict[str, Any]:
    """Request of ``submit_feedback``: ``reply`` is ``{"status": "passed" | "failed" |
    "unable_to_test", "details": any JSON}``; ``attachments`` maps a file name to its text or to
    ``{"base64": …}``. ``INVALID_ID``, ``INVALID_ARGUMENT``, ``INVALID_JSON``."""
    check_action_id(operation_id, "operation_id")
    if (not isinstance(reply, Mapping) or set(reply) - {"status", "details"} or "status" not in reply
            or not isinstance(reply["status"], str) or reply["status"] not in FEEDBACK_STATUSES):
        raise LedgerError(E.INVALID_ARGUMENT, "reply must be {\"status\": \"passed\" | \"failed\" | "
                          "\"unable_to_test\", \"details\": …}")
    attachments = {} if attachments is None else attachments
    if not isinstance(attachments, Mapping) or len(attachments) > ATTACHMENTS_MAX:
        raise LedgerError(E.INVALID_ARGUMENT, f"attachments must map at most {ATTACHMENTS_MAX} file names to contents")
    for name, value in attachments.items():
        if not isinstance(name, str) or not ATTACHMENT_NAME_RE.fullmatch(name):
            if not isinstance(name, str):
                raise LedgerError(E.INVALID_ARGUMENT, f"attachment names must be strings; got {given(name, 40)}")
            if len(name) > ATTACHMENT_NAME_MAX:
                raise LedgerError(E.INVALID_ARGUMENT, f"attachment name {given(name, 40)} has {len(name)} "
                                  f"characters; at most {ATTACHMENT_NAME_MAX} are allowed")
            raise LedgerError(E.INVALID_ARGUMENT, f"attachment name {given(name, 40)} must match "
                              f"{ATTACHMENT_NAME_RE.pattern}")
        _attachment_bytes(name, value)
    request = {"op": "submit_feedback", "operation_id": operation_id, "reply": dict(reply),
               "attachments": dict(attachments)}
    canonical_bytes(request)  # INVALID_JSON for what has no canonical form
    return request


@plain_arguments
def shape_confirm_feedback(feedback: Any) -> dict[str, Any]:
    """Request of ``confirm_feedback`` (``INVALID_ID`` unless ``F000001``…)."""
    return {"op": "confirm_feedback", "feedback_id": _check_feedback_id(feedback)}


@plain_arguments
def shape_store_feedback(operation_id: Any, feedback: Any) -> dict[str, Any]:
    """Request of ``store_feedback`` (``INVALID_ID`` for malformed ids)."""
    check_action_id(operation_id, "operation_id")
    return {"op": "store_feedback", "operation_id": operation_id, "feedback_id": _check_feedback_id(feedback)}


def _check_feedback_id(value: Any) -> str:
    if not isinstance(value, str) or not FEEDBACK_ID_RE.fullmatch(value):
        raise LedgerError(E.INVALID_ID, f"feedback id must look like F000001, got {given(value, 40)}")
    return value


def _key(op: str, *parts: str) -> str:
    return ":".join(("0", op) + parts)


# --- rules -------------------------------------------------------------------------------------
def request_test(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Outcome | Reused:
    """Reserve an external test on a hypothesis, priced by ``test_costs`` (docs/evidence.md).

    The reservation's checks in their order (the identity is the reservation's: an
    action id is reserved once, by ``reserve`` or here), then ``OPERATION_CONFLICT`` for
    an ``operation_id`` already used by a test or a stored tool result.
    """
    op_id = request["operation_id"]

    def unused_operation() -> None:
        if view.test_request(op_id) is not None or view.evidence_operation(op_id) is not None:
            raise LedgerError(E.OPERATION_CONFLICT, f"operation {op_id} is already used; give each test its own id",
                              operation_id=op_id)

    def price(policy: BudgetConfig) -> int:
        return policy.price_units(f"test.{request['kind']}")

    return budget_rules.reserve_priced(view, request, context, f"test.{request['kind']}", price,
                                       "budget.test_requested", unused_operation,
                                       test={"kind": request["kind"], "operation_id": op_id})


def _feedback_state(view: LedgerView, verb: str) -> dict[str, Any]:
    case = require_case(view)
    if case["state"] not in FEEDBACK_STATES:
        raise case_state_error(f"{verb} feedback", "GENERATING_HYPOTHESES, INVESTIGATING_HYPOTHESES or BLOCKED",
                               case["state"])
    return case


def check_standard_base64(attachments: Mapping[str, Any]) -> None:
    """``INVALID_ARGUMENT`` for an attachment in base64 other than the standard form of its bytes:
    another spelling of the same bytes (``"QR=="`` for ``"QQ=="``) would be stored as other content."""
    for name, value in attachments.items():
        if not isinstance(value, str):
            standard = base64.b64encode(_attachment_bytes(name, value)).decode("ascii")
            if standard != value["base64"]:
                raise LedgerError(E.INVALID_ARGUMENT, f"attachment {name!r}: its base64 is not the standard form of "
                                  f"its bytes (unused bits set); give {shown(standard, 40)}", attachment=name)


def _attachment_rows(attachments: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    """Per attachment (sorted by name) its hashes, and its content row (``{"name", "text"|"base64"}``)."""
    rows, contents = [], {}
    for name in sorted(attachments):
        value = attachments[name]
        data = _attachment_bytes(name, value)
        stored = {"name": name, **({"text": value} if isinstance(value, str) else dict(value))}
        content = canonical_bytes(stored)
        sha = sha256_hex(content)
        contents[sha] = content
        rows.append({"name": name, "sha256": sha256_hex(data), "bytes": len(data), "content_sha256": sha})
    return rows, contents


def submit_feedback(view: LedgerView, request: Mapping[str, Any], context: Context) -> Draft | Reused:
    """Store a draft reply to a requested test (docs/evidence.md); not evidence.

    Errors: ``CASE_STATE`` (only ``GENERATING_HYPOTHESES``, ``INVESTIGATING_HYPOTHESES``,
    ``BLOCKED``), ``NO_RESERVATION`` (no test was requested under ``operation_id``, or its
    reservation is no longer pending: failed, assessed, or of an earlier revision),
    ``OPERATION_CONFLICT`` (the test's feedback is stored already), ``LIMIT_REACHED`` (an attachment
    over ``evidence_artifact_bytes_max``, or distinct content over ``evidence_content_bytes_max``). The
    identical reply and attachments again are reused.
    """
    op_id = request["operation_id"]
    submission = canonical_sha256({"reply": request["reply"], "attachments": request["attachments"]})
    key = _key("submit_feedback", op_id, submission)
    reused = replay_or_conflict(view, key, request)
    if reused is not None:
        return reused
    case = _feedback_state(view, "submitting")
    test = _pending_test(view, op_id, case)
    _unanswered(view, op_id, context)
    if context.limits is not None:  # not on replay: an older case-ledger took other spellings, kept as they are
        check_standard_base64(request["attachments"])
    rows, contents = _attachment_rows(request["attachments"])
    new = {sha: data for sha, data in contents.items() if not view.content_seen(sha)}
    evidence_rules.check_content_limits(view, new, 0, context.limits)
    fid = feedback_id(view.feedback_total() + 1)
    draft = {"feedback_id": fid, "operation_id": op_id, "hypothesis_id": test["hypothesis_id"],
             "action_id": test["action_id"], "test_kind": test["kind"], "test_revision": test["revision"],
             "reply_sha256": canonical_sha256(request["reply"]), "attachments": rows,
             "submission_sha256": submission}
    fields = {**case_fields(case, "feedback.submitted", case["revision"]), "format": "feedback-event-v1",
              "feedback": draft}
    return Draft("feedback.submitted", "case", case["revision"], key, dict(request), fields, new,
                 size_allowance=sum(len(data) for data in contents.values()))  # the attachments it carries


def _pending_test(view: LedgerView, op_id: str, case: Mapping[str, Any]) -> Mapping[str, Any]:
    """The test requested under ``op_id`` when its reservation is still pending in the case's
    revision, else ``NO_RESERVATION`` (no such test, or failed, assessed or of another revision)."""
    test = view.test_request(op_id)
    if test is None:
        raise LedgerError(E.NO_RESERVATION, f"no test was requested under operation {op_id}", operation_id=op_id)
    action = view.action(test["revision"], test["hypothesis_id"], test["action_id"])
    if test["revision"] != case["revision"] or action is None or action["status"] != ACTION_RESERVED:
        raise LedgerError(E.NO_RESERVATION, f"the test of operation {op_id} is no longer pending "
                          f"({test['hypothesis_id']}/{test['action_id']} is "
                          f"{action['status'] if action else 'gone'}, revision {test['revision']})",
                          operation_id=op_id)
    return test


def _unanswered(view: LedgerView, op_id: str, context: Context) -> None:
    """``OPERATION_CONFLICT`` once feedback was stored for the test of ``op_id``: a draft submitted or
    confirmed after it could never be stored (a replay keeps the history an older case-ledger took)."""
    record = view.evidence_operation(op_id) if context.limits is not None else None
    if record is not None:
        raise LedgerError(E.OPERATION_CONFLICT, f"the test of operation {op_id} has its feedback stored already "
                          f"(record {record}); record_evidence feeds it to the budget", operation_id=op_id)


def confirm_feedback(view: LedgerView, request: Mapping[str, Any], context: Context) -> Outcome | Reused:
    """Confirm a draft; a ``BLOCKED`` case moves back to ``INVESTIGATING_HYPOTHESES`` in the same
    operation (docs/evidence.md). Errors: ``CASE_STATE``, ``INVALID_ARGUMENT`` (unknown feedback id),
    ``NO_RESERVATION`` (its test's reservation is no longer pending), ``OPERATION_CONFLICT`` (the
    test's feedback is stored already)."""
    fid = request["feedback_id"]
    key = _key("confirm_feedback", fid)
    reused = replay_or_conflict(view, key, request)
    if reused is not None:
        return reused
    case = _feedback_state(view, "confirming")
    found = view.feedback(fid)
    if found is None:
        raise LedgerError(E.INVALID_ARGUMENT, f"there is no feedback {fid}", feedback_id=fid)
    _pending_test(view, found["operation_id"], case)
    _unanswered(view, found["operation_id"], context)
    fields = {**case_fields(case, "feedback.confirmed", case["revision"]), "format": "feedback-event-v1",
              "feedback_id": fid, "operation_id": found["operation_id"],
              "submission_sha256": found["submission_sha256"]}
    drafts = [Draft("feedback.confirmed", "case", case["revision"], key, dict(request), fields)]
    if case["state"] == BLOCKED:
        moved = {**case_fields(case, "case.transitioned", case["revision"]), "from_state": BLOCKED,
                 "state": INVESTIGATING}
        drafts.append(Draft("case.transitioned", "case", case["revision"], None, {**request, "part": 1}, moved))
    return Outcome(tuple(drafts))


def _verified_feedback(view: LedgerView, found: Mapping[str, Any]) -> None:
    """``INTEGRITY_ERROR`` unless the draft's reply and every attachment still hash as submitted."""
    fid = found["feedback_id"]
    if canonical_sha256(found["reply"]) != found["reply_sha256"]:
        raise integrity_error(found["seq"], f"feedback {fid}: its reply no longer matches its hash")
    for row in found["attachments"]:
        data = view.attachment(row["content_sha256"])
        if data is None or sha256_hex(data) != row["content_sha256"]:
            raise integrity_error(found["seq"], f"feedback {fid}: attachment {row['name']} is missing or altered",
                                  attachment=row["name"])
        try:
            stored = json.loads(data)
            raw = _attachment_bytes(row["name"], stored.get("text", {k: v for k, v in stored.items() if k == "base64"}))
        except (ValueError, AttributeError, LedgerError):
            raise integrity_error(found["seq"], f"feedback {fid}: attachment {row['name']} is unreadable") from None
        if sha256_hex(raw) != row["sha256"] or len(raw) != row["bytes"]:
            raise integrity_error(found["seq"], f"feedback {fid}: attachment {row['name']} does not match its hash",
                                  attachment=row["name"])


def _feedback_result(test: Mapping[str, Any], found: Mapping[str, Any]) -> dict[str, Any]:
    """The stored feedback as a result: a passed/failed reply is one atom (test action, status,
    details, attachment hashes); ``unable_to_test`` returns none (novelty 0)."""
    reply = found["reply"]
    items = []
    if reply["status"] != "unable_to_test":
        items.append({"kind": "test_feedback", "action": f"test.{test['kind']}", "status": reply["status"],
                      "details": reply.get("details"), "attachments": sorted(a["sha256"] for a in found["attachments"])})
    return {"tool": f"test.{test['kind']}", "status": reply["status"], "items": items,
            "coverage": {"test": test["kind"]}, "truncated": False, "schema": None}


def require_storing_state(view: LedgerView) -> Mapping[str, Any]:
    """The case, or ``CASE_STATE`` unless it is in a state where feedback may be stored."""
    case = require_case(view)
    if case["state"] not in MUTABLE_STATES:
        raise case_state_error("storing feedback", "GENERATING_HYPOTHESES or INVESTIGATING_HYPOTHESES", case["state"])
    return case


def store_feedback(view: LedgerView, request: Mapping[str, Any], context: Context) -> Outcome | Reused:
    """Publish a confirmed draft as an evidence record bound to its test's reservation (docs/evidence.md).

    Errors in order: ``OPERATION_CONFLICT`` (another draft already stored for the operation),
    ``CASE_STATE``, ``INVALID_ARGUMENT`` (unknown feedback id), ``NO_RESERVATION`` (no test
    under ``operation_id``, a draft of another operation, or a reservation no longer
    pending), ``FEEDBACK_NOT_CONFIRMED``, ``INTEGRITY_ERROR`` (reply or attachment hashes),
    ``LIMIT_REACHED``. It never requests a new test.
    """
    op_id, fid = request["operation_id"], request["feedback_id"]
    key = _key("store_feedback", op_id)
    reused = replay_or_conflict(view, key, request)
    if reused is not None:
        return reused
    case = require_storing_state(view)
    found = view.feedback(fid)
    if found is None:
        raise LedgerError(E.INVALID_ARGUMENT, f"there is no feedback {fid}", feedback_id=fid)
    test = view.test_request(op_id)
    action = view.action(test["revision"], test["hypothesis_id"], test["action_id"]) if test else None
    if test is None or found["operation_id"] != op_id or test["revision"] != case["revision"] \
            or action is None or action["status"] != ACTION_RESERVED:
        raise LedgerError(E.NO_RESERVATION, f"feedback {fid} is not bound to a still-pending test of operation {op_id} "
                          "in this revision", operation_id=op_id, feedback_id=fid)
    if view.evidence_operation(op_id) is not None:  # its folder holds another record already
        raise LedgerError(E.OPERATION_CONFLICT, f"operation {op_id} already has a stored record", operation_id=op_id)
    if not found["confirmed"]:
        raise LedgerError(E.FEEDBACK_NOT_CONFIRMED, f"feedback {fid} is a draft; confirm it first", feedback_id=fid)
    _verified_feedback(view, found)
    action_ref = {"hypothesis_id": test["hypothesis_id"], "action_id": test["action_id"], "operation_id": op_id}
    origin = {"kind": "feedback", "feedback_id": fid, "submission_sha256": found["submission_sha256"],
              "reply_sha256": found["reply_sha256"]}
    batch = evidence_rules.BatchBuilder(view, case, {"iteration_id": op_id})
    drafts = batch.build_single(action_ref, _feedback_result(test, found), origin, key, dict(request))
    evidence_rules.check_content_limits(view, batch.new_contents, 1, context.limits)
    return Outcome(tuple(drafts))
