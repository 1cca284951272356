"""The view protocol in memory (replay, verify, simulation): :class:`MemoryView` holds the state
:class:`~ledger.model.views.SqlView` reads from SQLite in dicts and advances with
:meth:`MemoryView.apply`, one event body at a time, without touching SQLite. Both answer every
question identically for the same history (``tests/test_seams.py`` checks it on real journals).
"""

from __future__ import annotations

import json
from typing import AbstractSet, Any, Mapping

from ..ground import errors as E
from ..ground.canonical import ZERO_SHA256, canonical_bytes, canonical_sha256
from ..ground.config import BudgetConfig
from ..ground.errors import LedgerError
from ..rules.novelty import evidence_atom_ids
from ..rules.scopes import establishment_row
from .views import policy_config_of, budget_head_of, feedback_state, refusal_key


class MemoryView:
    """The whole state a rule can ask about, held in memory and advanced event by event.

    Start empty (a case not yet created) and call :meth:`apply` with each event's
    body, canonical bytes and stream, in chain order. Nothing touches SQLite, so a
    replay (verify, import) or a simulation runs at the speed of the rules.
    """

    def __init__(self) -> None:
        self._case: dict[str, Any] | None = None
        self._revisions: dict[int, dict[str, Any]] = {}
        self._policies: dict[int, tuple[str, str]] = {}
        self._budget_heads: dict[int, dict[str, Any]] = {}
        self._operations: dict[str, tuple[int, str]] = {}
        self._actions: dict[tuple[int, str, str], dict[str, Any]] = {}
        self._contents: set[str] = set()
        self._content_bytes = 0
        self._stream_counts: dict[tuple[str, int], int] = {}
        self._budget_events = 0
        self._head: tuple[int, str, str] = (0, ZERO_SHA256, "")
        self._scopes: dict[str, dict[str, Any]] = {}
        self._duration_scopes: set[str] = set()
        self._warned: dict[tuple[str, int], set[str]] = {}
        self._money: dict[tuple[int, str], int] = {}
        self._issuers: dict[int, str] = {}
        self._lowest_pct: dict[tuple[int, str], int] = {}
        self._records: dict[str, dict[str, Any]] = {}
        self._record_by_operation: dict[str, str] = {}
        self._record_by_action: dict[tuple[int, str, str], tuple[str, str]] = {}
        self._record_by_content: dict[str, str] = {}
        self._atoms: set[str] = set()
        self._result_atoms: set[str] = set()
        self._index: dict[str, Any] | None = None
        self._reservation_seqs: dict[tuple[int, str, str], int] = {}
        self._tests: dict[str, dict[str, Any]] = {}
        self._test_by_action: dict[tuple[int, str, str], str] = {}
        self._limit_refusals: dict[str, int] = {}
        self._indexed: dict[str, str] = {}  # record id → the record hash its index lists
        self._feedback: dict[str, dict[str, Any]] = {}
        self._attachments: dict[str, bytes] = {}

    # -- the protocol ----------------------------------------------------------------
    def case(self) -> dict[str, Any] | None:
        return dict(self._case) if self._case else None

    def revision(self, revision: int) -> dict[str, Any] | None:
        info = self._revisions.get(revision)
        if info is None:
            return None
        return {**info, "hypotheses": [dict(h) for h in info["hypotheses"]],
                "hypotheses_request": [{"statement": h["statement"]} for h in info["hypotheses"]]}

    def policy_config(self, revision: int) -> BudgetConfig:
        return policy_config_of(self._policies[revision][0])

    def previous_policy(self, revision: int) -> tuple[dict[str, Any], str] | None:
        earlier = [r for r in self._policies if r < revision]
        if not earlier:
            return None
        policy_json, sha = self._policies[max(earlier)]
        return json.loads(policy_json), sha

    def budget_head(self, revision: int) -> dict[str, Any] | None:
        head = self._budget_heads.get(revision)
        if head is None:
            return None
        return {**head, "accounts": {h: dict(a) for h, a in head["accounts"].items()}}

    def accounts(self, revision: int) -> dict[str, dict[str, Any]]:
        head = self.budget_head(revision)
        return head["accounts"] if head else {}

    def operation(self, key: str) -> tuple[int, str] | None:
        return self._operations.get(key)

    def action(self, revision: int, hypothesis_id: str, action_id: str) -> dict[str, Any] | None:
        found = self._actions.get((revision, hypothesis_id, action_id))
        return dict(found) if found else None

    def content_seen(self, sha256: str) -> bool:
        return sha256 in self._contents

    def content_bytes_total(self) -> int:
        return self._content_bytes

    def budget_events_total(self) -> int:
        return self._budget_events

    def head(self) -> tuple[int, str, str]:
        return self._head

    def next_stream_seq(self, stream: str, revision: int) -> int:
        if stream not in ("budget", "case"):
            return 0  # an evidence event's stream is its own export path: not numbered
        return self._stream_counts.get((stream, revision if stream == "budget" else 0), 0) + 1

    def scope(self, name: str) -> dict[str, Any] | None:
        found = self._scopes.get(name)
        return {**found, "limits": dict(found["limits"])} if found else None

    def warned(self, name: str, establishment_seq: int) -> frozenset[str]:
        return frozenset(self._warned.get((name, establishment_seq), ()))

    def duration_scopes(self) -> AbstractSet[str]:
        return self._duration_scopes

    def money_consumed(self, revision: int | None, hypothesis_id: str | None) -> int:
        return sum(m for (r, h), m in self._money.items()
                   if (revision is None or r == revision) and (hypothesis_id is None or h == hypothesis_id))

    def revision_issuer(self, revision: int) -> str | None:
        return self._issuers.get(revision)

    def lowest_pct_since_grant(self, revision: int, hypothesis_id: str) -> int | None:
        return self._lowest_pct.get((revision, hypothesis_id))

    def account_floors(self, revision: int) -> dict[str, int | None]:
        return {h: pct for (r, h), pct in self._lowest_pct.items() if r == revision}
    def evidence_operation(self, operation_id: str) -> str | None:
        return self._record_by_operation.get(operation_id)

    def evidence_binding(self, revision: int, hypothesis_id: str, action_id: str) -> tuple[str, str] | None:
        return self._record_by_action.get((revision, hypothesis_id, action_id))

    def first_record_with_content(self, sha256: str) -> str | None:
        return self._record_by_content.get(sha256)

    def atom_seen(self, atom_sha256: str) -> bool:
        return atom_sha256 in self._atoms

    def result_atoms_seen(self, atom_ids: list[str]) -> int:
        return sum(a in self._result_atoms for a in atom_ids)

    def evidence_record(self, record_id: str) -> dict[str, Any] | None:
        found = self._records.get(record_id)
        return json.loads(canonical_bytes(found)) if found else None

    def evidence_records_total(self) -> int:
        return len(self._records)

    def evidence_index_head(self) -> dict[str, Any] | None:
        if not self._index:
            return None
        records = self._index["records"]
        return {**self._index, "records": None if records is None else list(records)}

    def indexed_record_sha(self, record_id: str) -> str | None:
        return self._indexed.get(record_id)

    def reservation_seq(self, revision: int, hypothesis_id: str, action_id: str) -> int | None:
        return self._reservation_seqs.get((revision, hypothesis_id, action_id))

    def test_request(self, operation_id: str) -> dict[str, Any] | None:
        found = self._tests.get(operation_id)
        return dict(found) if found else None

    def limit_refusal(self, identity: Mapping[str, Any]) -> int | None:
        return self._limit_refusals.get(refusal_key(identity))

    def test_of_action(self, revision: int, hypothesis_id: str, action_id: str) -> str | None:
        return self._test_by_action.get((revision, hypothesis_id, action_id))

    def feedback(self, feedback_id: str) -> dict[str, Any] | None:
        found = self._feedback.get(feedback_id)
        return json.loads(canonical_bytes(found)) if found else None

    def feedback_total(self) -> int:
        return len(self._feedback)

    def attachment(self, sha256: str) -> bytes | None:
        return self._attachments.get(sha256)

    # -- advancing -------------------------------------------------------------------
    def apply(self, body: Mapping[str, Any], sha256: str, stream: str, operation_key: str | None,
              contents: Mapping[str, bytes], *, request_sha256: str | None = None) -> int:
        """Advance by one event (``body`` as stored, ``sha256`` of its bytes); return its ``stream_seq``.

        ``request_sha256``: the sha256 of the canonical bytes of ``body["request"]`` when the caller
        has it already (the replay does), else it is computed here for an event with an operation key."""
        seq, revision, kind = body["seq"], body["revision"], body["type"]
        stream_seq = 0  # an evidence event (its stream is its export path) is not numbered
        if stream in ("budget", "case"):
            scope = (stream, revision if stream == "budget" else 0)
            stream_seq = self._stream_counts.get(scope, 0) + 1
            self._stream_counts[scope] = stream_seq
        self._head = (seq, sha256, body["created_at"])
        if operation_key is not None:
            if request_sha256 is None:
                self._remember_operation(operation_key, seq, body["request"])
            else:
                self._operations[operation_key] = (seq, request_sha256)
        for sha, data in contents.items():
            self._contents.add(sha)
            self._content_bytes += len(data)
        if "state" in body and kind != "case.outcome_recorded":  # an outcome changes no state
            self._apply_lifecycle(body)
        if kind == "budget.result_recorded" and body["evidence_sha256"] in contents:
            self._result_atoms.update(evidence_atom_ids(contents[body["evidence_sha256"]]) or ())
        if kind == "revision.opened":
            self._revisions[revision] = {
                "revision": revision, "seq": seq, "units_per_hypothesis": body["units_per_hypothesis"],
                "max_hypotheses": body["max_hypotheses"], "hypothesis_batch_sha256": body["hypothesis_batch_sha256"],
                "hypotheses": [dict(h) for h in body["hypotheses"]]}
        if stream == "budget":
            self._apply_budget(body)
        elif body.get("format") == "scope-event-v1":
            self._apply_scope(body)
        elif kind == "evidence.recorded":
            self._apply_record(body["record"])
        elif kind == "evidence.indexed":
            self._apply_index(body)
        elif kind == "feedback.submitted":
            self._feedback[body["feedback"]["feedback_id"]] = feedback_state(body, False)
            self._attachments.update(contents)
        elif kind == "feedback.confirmed":
            self._feedback[body["feedback_id"]]["confirmed"] = True
        return stream_seq

    def _apply_index(self, body: Mapping[str, Any]) -> None:
        """The newest index: v1 lists every record so far (kept, for its successor's legacy form),
        v2 only the records it adds and their running count (docs/evidence.md)."""
        index = body["index"]
        before = self._index["record_count"] if self._index else 0
        cumulative = body["format"] == "evidence-index-v1"
        added = index["records"][before:] if cumulative else index["records"]
        self._indexed.update((entry["record_id"], entry["sha256"]) for entry in added)
        self._index = {"index_sha256": body["index_sha256"], "next_record_number": index["next_record_number"],
                       "record_count": len(index["records"]) if cumulative else index["record_count"],
                       "format": body["format"], "records": list(index["records"]) if cumulative else None}

    def _remember_operation(self, key: str, seq: int, request: Mapping[str, Any]) -> None:
        """Note operation ``key`` (answered by event ``seq``) with its request's hash."""
        self._operations[key] = (seq, canonical_sha256(request))

    def _apply_scope(self, body: Mapping[str, Any]) -> None:
        if body["type"] == "scope.established":
            self._scopes[body["scope"]] = {**establishment_row(body), "limits": dict(body["effective_limits"])}
            if "duration_ms" in body["effective_limits"]:
                self._duration_scopes.add(body["scope"])
            else:
                self._duration_scopes.discard(body["scope"])
        elif body["type"] == "limit.exceeded":
            identity = {k: body[k] for k in ("scope", "dimension", "declared", "on_exhausted", "establishment_seq",
                                             "revision", "request")}
            identity["consumed_after"] = None if body["dimension"] == "duration_ms" else body["consumed_after"]
            self._limit_refusals[refusal_key(identity)] = body["seq"]
        elif body["type"] == "limit.approaching":
            self._warned.setdefault((body["scope"], body["establishment_seq"]), set()).add(body["dimension"])

    def _apply_record(self, record: Mapping[str, Any]) -> None:
        rid = record["record_id"]
        self._records[rid] = dict(record)
        self._record_by_operation.setdefault(record["operation_id"], rid)
        self._record_by_action.setdefault((record["revision"], record["hypothesis_id"], record["action_id"]),
                                          (rid, record["operation_id"]))
        self._record_by_content.setdefault(record["content_sha256"], rid)
        self._atoms.update(record["novel_atoms"])

    def _apply_lifecycle(self, body: Mapping[str, Any]) -> None:
        if body["type"] == "case.created":
            self._case = {"case_id": body["case_id"], "package_id": body["package_id"]}
        if self._case is None:
            raise LedgerError(E.INTEGRITY_ERROR, "the ledger has no case.created event")
        self._case.update(state=body["state"], state_seq=body["seq"], revision=body["revision"])

    def _apply_budget(self, body: Mapping[str, Any]) -> None:
        revision = body["revision"]
        self._budget_events += 1
        if body["type"] == "budget.initialized":
            self._policies[revision] = (canonical_bytes(body["policy"]).decode("utf-8"), body["policy_sha256"])
        self._budget_heads[revision] = budget_head_of(body)
        action = body.get("action")
        if action is not None:
            key = (revision, action["hypothesis_id"], action["action_id"])
            self._actions[key] = dict(action)
            if body["type"] in ("budget.reserved", "budget.test_requested"):
                self._reservation_seqs[key] = body["seq"]
            if body["type"] == "budget.test_requested":
                self._tests[body["test"]["operation_id"]] = {"seq": body["seq"], "revision": revision,
                                                             "hypothesis_id": action["hypothesis_id"],
                                                             "action_id": action["action_id"],
                                                             "kind": body["test"]["kind"]}
                self._test_by_action[key] = body["test"]["operation_id"]
        if body["type"] == "budget.initialized":
            self._issuers[revision] = body["actor"]
        if "cost_usd_millicents" in body:
            key = (revision, action["hypothesis_id"])
            self._money[key] = self._money.get(key, 0) + body["cost_usd_millicents"]
        granted = body["grant"]["hypothesis_id"] if body["type"] == "budget.granted" else None
        for account in body["accounts"]:
            key = (revision, account["hypothesis_id"])
            pct = account["remaining_units"] * 100 // (account["initial_units"] + account["granted_units"])
            self._lowest_pct[key] = pct if key not in self._lowest_pct or key[1] == granted \
                else min(pct, self._lowest_pct[key])
