"""Event body → helper rows: one small function per event type (docs/architecture.md).

The helper tables (``lifecycle``, ``revisions``, ``accounts``, ``reservations``,
…) are append-only projections of the events; the public views are derived
from them in SQL. :func:`helper_rows` returns the rows of one event as
``(statement name, parameters)`` pairs for :meth:`ledger.storage.connection.Storage.append`,
so storage never needs to know an event type. Verify builds the same rows from
its in-memory replay and compares them with the stored ones in bulk.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..ground.canonical import canonical_bytes
from ..rules.common import Draft
from ..rules.scopes import establishment_row
from ..storage.sqlite_file import HelperRow
from ..rules.novelty import evidence_atom_ids

Body = Mapping[str, Any]


def _lifecycle(body: Body, from_state: str | None) -> HelperRow:
    return ("insert_lifecycle", {"seq": body["seq"], "revision": body["revision"], "from_state": from_state,
                                 "state": body["state"]})


def _case_created(body: Body, draft: Draft) -> list[HelperRow]:
    return [("insert_case_identity", {"seq": body["seq"], "case_id": body["case_id"],
                                      "package_id": body["package_id"]}),
            _lifecycle(body, None)]


def _revision_opened(body: Body, draft: Draft) -> list[HelperRow]:
    seq, revision = body["seq"], body["revision"]
    rows: list[HelperRow] = [("insert_revision", {
        "revision": revision, "seq": seq, "units_per_hypothesis": body["units_per_hypothesis"],
        "max_hypotheses": body["max_hypotheses"], "hypothesis_batch_sha256": body["hypothesis_batch_sha256"]})]
    rows += [("insert_hypothesis", {"revision": revision, "seq": seq, **h}) for h in body["hypotheses"]]
    rows.append(_lifecycle(body, body["from_state"]))
    return rows


def _case_transitioned(body: Body, draft: Draft) -> list[HelperRow]:
    return [_lifecycle(body, body["from_state"])]


def _outcome_recorded(body: Body, draft: Draft) -> list[HelperRow]:
    return [("insert_outcome", {"seq": body["seq"], "revision": body["revision"], "outcome": body["outcome"],
                                "source": body["source"]})]


def _budget_initialized(body: Body, draft: Draft) -> list[HelperRow]:
    seq, revision = body["seq"], body["revision"]
    rows: list[HelperRow] = [("insert_policy", {"revision": revision, "seq": seq,
                                                "policy_sha256": body["policy_sha256"],
                                                "policy": canonical_bytes(body["policy"]).decode("utf-8")})]
    rows += [("insert_account", {"revision": revision, "seq": seq, "hypothesis_id": a["hypothesis_id"],
                                 "initial_units": a["initial_units"]}) for a in body["accounts"]]
    return rows


def _action_key(body: Body) -> dict[str, Any]:
    action = body["action"]
    return {"revision": body["revision"], "hypothesis_id": action["hypothesis_id"],
            "action_id": action["action_id"], "seq": body["seq"]}


def _budget_reserved(body: Body, draft: Draft) -> list[HelperRow]:
    action = body["action"]
    return [("insert_reservation", {"action": action["action"], "cost_units": action["cost_units"],
                                    **_action_key(body)})]


def _budget_result_recorded(body: Body, draft: Draft) -> list[HelperRow]:
    key = _action_key(body)
    rows: list[HelperRow] = [("insert_result", {"content_sha256": body["evidence_sha256"],
                                                "novelty_score": body["action"]["novelty_score"], **key})]
    rows += [("insert_result_source", {"path": s["path"], "sha256": s["sha256"], **key}) for s in body["sources"]]
    if "cost_usd_millicents" in body:
        rows.append(("insert_result_cost", {"cost_usd_millicents": body["cost_usd_millicents"], **key}))
    new_content = draft.contents.get(body["evidence_sha256"])
    if new_content is not None:  # a content seen before brought its atoms then
        rows += [("insert_result_atom", {"atom_id": atom, "seq": body["seq"]})
                 for atom in evidence_atom_ids(new_content) or ()]
    return rows


def _budget_closed(body: Body, draft: Draft) -> list[HelperRow]:
    action = body["action"]
    return [("insert_closing", {"outcome": action["status"], "semantic_score": action["semantic_score"],
                                "information_score": action["information_score"],
                                "reward_units": action["reward_units"], **_action_key(body)})]


def _evidence_recorded(body: Body, draft: Draft) -> list[HelperRow]:
    record = body["record"]
    rows: list[HelperRow] = [("insert_evidence_record", {
        "record_id": record["record_id"], "seq": body["seq"], "revision": record["revision"],
        "hypothesis_id": record["hypothesis_id"], "action_id": record["action_id"],
        "operation_id": record["operation_id"], "content_sha256": record["content_sha256"],
        "duplicate_of": record["duplicate_of"], "novelty_score": record["novelty_score"],
        "body": canonical_bytes(record).decode("utf-8")})]
    rows += [("insert_evidence_atom", {"atom_sha256": atom, "seq": body["seq"], "record_id": record["record_id"]})
             for atom in record["novel_atoms"]]
    return rows


def _evidence_indexed(body: Body, draft: Draft) -> list[HelperRow]:
    index = body["index"]
    return [("insert_evidence_index", {"seq": body["seq"], "index_sha256": body["index_sha256"],
                                       "next_record_number": index["next_record_number"],
                                       "record_count": index.get("record_count", len(index["records"]))})]


def _budget_evidence_recorded(body: Body, draft: Draft) -> list[HelperRow]:
    return [("insert_result", {"content_sha256": body["evidence_sha256"],
                               "novelty_score": body["action"]["novelty_score"], **_action_key(body)})]


def _budget_test_requested(body: Body, draft: Draft) -> list[HelperRow]:
    action = body["action"]
    return _budget_reserved(body, draft) + [("insert_test_request", {
        "operation_id": body["test"]["operation_id"], "seq": body["seq"], "revision": body["revision"],
        "hypothesis_id": action["hypothesis_id"], "action_id": action["action_id"], "kind": body["test"]["kind"]})]


def _feedback_submitted(body: Body, draft: Draft) -> list[HelperRow]:
    feedback = body["feedback"]
    return [("insert_feedback_draft", {"feedback_id": feedback["feedback_id"], "seq": body["seq"],
                                       "operation_id": feedback["operation_id"],
                                       "submission_sha256": feedback["submission_sha256"]})]


def _feedback_confirmed(body: Body, draft: Draft) -> list[HelperRow]:
    return [("insert_feedback_confirmation", {"feedback_id": body["feedback_id"], "seq": body["seq"]})]


def _no_rows(body: Body, draft: Draft) -> list[HelperRow]:
    return []


def _budget_granted(body: Body, draft: Draft) -> list[HelperRow]:
    grant = body["grant"]
    return [("insert_grant", {"revision": body["revision"], "hypothesis_id": grant["hypothesis_id"],
                              "grant_id": grant["grant_id"], "seq": body["seq"], "units": grant["units"]})]


def _scope_established(body: Body, draft: Draft) -> list[HelperRow]:
    rows: list[HelperRow] = [("insert_scope_establishment", establishment_row(body))]
    rows += [("insert_scope_limit", {"seq": body["seq"], "scope": body["scope"], "dimension": d, "declared": v})
             for d, v in body["effective_limits"].items()]
    return rows


def _increase_requested(body: Body, draft: Draft) -> list[HelperRow]:
    return [("insert_increase_request", {"seq": body["seq"], "scope": body["scope"], "dimension": body["dimension"],
                                         "amount": body["amount"], "requester": body["requester"]})]


def _limit_approaching(body: Body, draft: Draft) -> list[HelperRow]:
    return [("insert_limit_warning", {"scope": body["scope"], "dimension": body["dimension"],
                                      "establishment_seq": body["establishment_seq"], "seq": body["seq"],
                                      "consumed": body["consumed"]})]


def _limit_exceeded(body: Body, draft: Draft) -> list[HelperRow]:
    return [("insert_limit_exceedance", {"seq": body["seq"], "scope": body["scope"], "dimension": body["dimension"],
                                         "declared": body["declared"], "consumed_after": body["consumed_after"],
                                         "on_exhausted": body["on_exhausted"]})]


#: Event type → its helper rows (besides the terminations every budget event may add).
PROJECTIONS: dict[str, Callable[[Body, Draft], list[HelperRow]]] = {
    "case.created": _case_created,
    "revision.opened": _revision_opened,
    "case.transitioned": _case_transitioned,
    "case.outcome_recorded": _outcome_recorded,
    "budget.initialized": _budget_initialized,
    "budget.reserved": _budget_reserved,
    "budget.result_recorded": _budget_result_recorded,
    "budget.settled": _budget_closed,
    "budget.failed": _budget_closed,
    "budget.rejected": _no_rows,
    "budget.granted": _budget_granted,
    "budget.limit_terminated": _no_rows,
    "scope.established": _scope_established,
    "scope.increase_requested": _increase_requested,
    "limit.approaching": _limit_approaching,
    "limit.exceeded": _limit_exceeded,
    "budget.evidence_recorded": _budget_evidence_recorded,
    "evidence.requested": _no_rows,
    "evidence.result": _no_rows,
    "evidence.recorded": _evidence_recorded,
    "evidence.indexed": _evidence_indexed,
    "budget.test_requested": _budget_test_requested,
    "feedback.submitted": _feedback_submitted,
    "feedback.confirmed": _feedback_confirmed,
}


def _terminations(body: Body, draft: Draft) -> list[HelperRow]:
    """The accounts the event ends. Those ``initialize`` opened already ended have their row only in
    a ledger of schema version 10 or later (the statement checks): older versions kept none, and
    verify compares a ledger with a replay at its own version."""
    accounts = {a["hypothesis_id"]: a for a in body.get("accounts", ())}
    name = "insert_initial_termination" if body["type"] == "budget.initialized" else "insert_termination"
    return [(name, {"revision": body["revision"], "seq": body["seq"], "hypothesis_id": h,
                                    "status": accounts[h]["status"],
                                    "terminal_reason": accounts[h]["terminal_reason"]})
            for h in draft.terminated]


def _export_file(body: Body, draft: Draft) -> list[HelperRow]:
    """An evidence event's stream is its export path: kept in ``evidence_files``."""
    if draft.stream in ("case", "budget"):
        return []
    return [("insert_evidence_file", {"seq": body["seq"], "path": draft.stream})]


def helper_rows(body: Body, draft: Draft) -> list[HelperRow]:
    """Every helper row event ``body`` (made from ``draft``) establishes, in insertion order.

    Raises ``KeyError`` for an event type without a projection (a defect: every
    event type the rules make is listed in :data:`PROJECTIONS`).
    """
    return _export_file(body, draft) + PROJECTIONS[body["type"]](body, draft) + _terminations(body, draft)


def floor_rows(body: Body, floors: Mapping[str, int | None]) -> list[HelperRow]:
    """The ``account_floors`` rows of budget event ``body``: one per account whose lowest
    ``pct_remaining`` since its last grant moves (``floors``: each account's floor before the event,
    None when it has none yet). A grant resets its account's floor to its pct at the grant;
    ``floors`` is updated in place."""
    granted = body["grant"]["hypothesis_id"] if body["type"] == "budget.granted" else None
    rows: list[HelperRow] = []
    for account in body["accounts"]:
        h = account["hypothesis_id"]
        pct = account["remaining_units"] * 100 // (account["initial_units"] + account["granted_units"])
        before = floors.get(h)
        after = pct if before is None or h == granted else min(before, pct)
        if after != before:
            rows.append(("insert_account_floor", {"revision": body["revision"], "hypothesis_id": h,
                                                  "seq": body["seq"], "lowest_pct": after}))
            floors[h] = after  # type: ignore[index]
    return rows


def money_rows(body: Body, consumed: Callable[[int | None, str | None], int]) -> list[HelperRow]:
    """The ``money_totals`` row of a result that reported money (none otherwise): the running totals
    of its account, its revision and the case, from ``consumed(revision, hypothesis_id)`` before it."""
    if "cost_usd_millicents" not in body:
        return []
    revision, h, cost = body["revision"], body["action"]["hypothesis_id"], body["cost_usd_millicents"]
    return [("insert_money_total", {"seq": body["seq"], "revision": revision, "hypothesis_id": h,
                                    "hypothesis_total": consumed(revision, h) + cost,
                                    "revision_total": consumed(revision, None) + cost,
                                    "case_total": consumed(None, None) + cost})]
