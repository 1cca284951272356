"""The view protocol over SQL (the live write path) and in memory (replay, verify, simulation).

The rules read state only through a :class:`~ledger.rules.common.LedgerView`.
:class:`SqlView` answers with bounded, indexed reads of one open
:class:`~ledger.storage.Storage`; :class:`MemoryView` holds the same state in
dicts and advances with :meth:`MemoryView.apply`, one event body at a time,
without touching SQLite. Both answer every question identically for the same
history (``tests/test_seams.py`` checks it on real journals).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Callable, Mapping

from . import errors as E
from .canonical import ZERO_SHA256, canonical_bytes, canonical_sha256
from .config import BudgetConfig
from .errors import LedgerError
from .rules.scopes import establishment_row
from .storage import Storage


@lru_cache(maxsize=64)
def _policy_config(policy_json: str) -> BudgetConfig:
    """Frozen policies are validated once per process, not on every operation."""
    return BudgetConfig.from_mapping(json.loads(policy_json))


#: Columns of the ``scope_latest`` statement, the keys of :meth:`SqlView.scope` (plus ``limits``).
SCOPE_COLUMNS = ("seq", "scope", "scope_type", "scope_id", "scope_revision", "scope_hypothesis", "establishment",
                 "issuer", "delegate", "warning_bps", "on_exhausted", "causation_seq", "origin_at")


def feedback_state(body: Mapping[str, Any], confirmed: bool) -> dict[str, Any]:
    """What :meth:`SqlView.feedback` answers, from a ``feedback.submitted`` event body."""
    return {**body["feedback"], "seq": body["seq"], "reply": body["request"]["reply"], "confirmed": confirmed}


def cache_key(statement: str, **params: Any) -> tuple[str, tuple]:
    """How :class:`WriterCache` files the answer of a named statement with its parameters."""
    return statement, tuple(sorted(params.items()))


def budget_head_of(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the rules read of a revision's newest budget event: its policy and hypothesis batch
    hashes and its accounts by hypothesis ID (copies: the body itself is never shared)."""
    return {"policy_sha256": body["policy_sha256"], "hypothesis_batch_sha256": body["hypothesis_batch_sha256"],
            "accounts": {a["hypothesis_id"]: dict(a) for a in body["accounts"]}}


class WriterCache:
    """Answers a writer keeps across its operations for facts only rare events change.

    The chain head's sha256 stands for the whole history, so while the head a write reads
    is the head this writer left (:meth:`check`), no other writer has appended and the
    kept answers are still true. An event of ours whose helper rows feed one of the
    tables behind them (:data:`FEEDS`) clears them (:meth:`appended`).
    """

    #: Statements whose answers are kept, and the inserts that change them.
    CACHED = frozenset({"case_head", "policy", "scope_latest", "scope_limits_of"})
    FEEDS = frozenset({"insert_case_identity", "insert_lifecycle", "insert_policy",
                       "insert_scope_establishment", "insert_scope_limit"})

    def __init__(self) -> None:
        self.head: tuple[int, str, str] | None = None
        self.answers: dict[tuple[str, tuple], Any] = {}

    def check(self, head: tuple[int, str, str]) -> None:
        """The head a new write read: keep the answers only if it is the head this writer left."""
        if head[:2] != (self.head or (None, None))[:2]:
            self.answers.clear()
        self.head = head

    def appended(self, head: tuple[int, str, str], statements: Any, body: Mapping[str, Any] | None = None,
                 stream: str | None = None, stream_seq: int = 0) -> None:
        """An event of ours is stored (``statements``: the names of its helper rows' inserts;
        ``body``, ``stream`` and ``stream_seq`` its body and place, which bring the kept stream
        counts and budget head up to date instead of dropping them)."""
        if not self.FEEDS.isdisjoint(statements):
            self.answers.clear()
        self.head = head
        if body is None or stream not in ("budget", "case"):
            return
        answers = self.answers
        if stream == "case":
            answers[cache_key("stream_count_case")] = stream_seq
            return
        answers[cache_key("stream_count_budget", revision=body["revision"])] = stream_seq
        answers[cache_key("latest_budget_body", revision=body["revision"])] = budget_head_of(body)
        if cache_key("budget_events_total") in answers:
            answers[cache_key("budget_events_total")] += 1

    def forget(self) -> None:
        """A write ended without committing: trust nothing until the next :meth:`check`."""
        self.head = None
        self.answers.clear()


class SqlView:
    """The rules' :class:`~ledger.rules.LedgerView` over a :class:`Storage`: indexed, bounded reads.

    With a :class:`WriterCache` (a session's write), the reads of :attr:`WriterCache.CACHED`
    are answered from it when the head shows nothing changed them.
    """

    def __init__(self, storage: Storage, cache: WriterCache | None = None) -> None:
        self.storage = storage
        self.cache = cache
        self._head: tuple[int, str, str] | None = None

    def _one(self, name: str, **params: Any) -> tuple | None:
        return self._kept(cache_key(name, **params), lambda: self.storage.one(name, **params))

    def case(self) -> dict[str, Any] | None:
        row = self._one("case_head")
        if row is None:
            return None
        case_id, package_id, seq, revision, state = row
        return {"case_id": case_id, "package_id": package_id, "state": state,
                "state_seq": seq, "revision": revision}

    def revision(self, revision: int) -> dict[str, Any] | None:
        row = self.storage.one("revision", revision=revision)
        if row is None:
            return None
        hypotheses = [
            {"hypothesis_id": h, "statement": s, "allocation_units": u}
            for h, s, u in self.storage.all("revision_hypotheses", revision=revision)
        ]
        return {"revision": row[0], "seq": row[1], "units_per_hypothesis": row[2],
                "max_hypotheses": row[3], "hypothesis_batch_sha256": row[4], "hypotheses": hypotheses,
                "hypotheses_request": [{"statement": h["statement"]} for h in hypotheses]}

    def policy_config(self, revision: int) -> BudgetConfig:
        row = self._one("policy", revision=revision)
        return _policy_config(row[0])

    def previous_policy(self, revision: int) -> tuple[dict[str, Any], str] | None:
        row = self.storage.one("latest_policy_before", revision=revision)
        return (json.loads(row[0]), row[1]) if row else None

    def _kept(self, key: tuple[str, tuple], compute: Callable[[], Any]) -> Any:
        """``compute()``, or the answer the writer's cache keeps for ``key`` while the head is ours."""
        if self.cache is None:
            return compute()
        self.head()  # checks the cache against the chain head first
        answers = self.cache.answers
        if key not in answers:
            answers[key] = compute()
        return answers[key]

    def budget_head(self, revision: int) -> dict[str, Any] | None:
        return self._kept(cache_key("latest_budget_body", revision=revision), lambda: self._read_budget_head(revision))

    def _read_budget_head(self, revision: int) -> dict[str, Any] | None:
        row = self.storage.one("latest_budget_body", revision=revision)
        if row is None:
            return None
        try:
            return budget_head_of(json.loads(row[0]))
        except (ValueError, TypeError, KeyError, RecursionError):
            raise LedgerError(E.INTEGRITY_ERROR, f"the newest budget event of revision {revision} is malformed; "
                              "run 'ledger verify'") from None

    def accounts(self, revision: int) -> dict[str, dict[str, Any]]:
        head = self.budget_head(revision)
        return head["accounts"] if head else {}

    def operation(self, key: str) -> tuple[int, str] | None:
        row = self.storage.one("operation", operation_key=key)
        return (row[0], row[1]) if row else None

    def action(self, revision: int, hypothesis_id: str, action_id: str) -> dict[str, Any] | None:
        row = self.storage.one("action_state", revision=revision, hypothesis_id=hypothesis_id, action_id=action_id)
        if row is None:
            return None
        action, cost, novelty, outcome, semantic, information, reward, recorded = row
        return {
            "hypothesis_id": hypothesis_id, "action_id": action_id, "action": action, "cost_units": cost,
            "status": outcome or ("awaiting_assessment" if recorded else "reserved"),
            "novelty_score": novelty, "semantic_score": semantic,
            "information_score": information, "reward_units": reward,
        }

    def content_seen(self, sha256: str) -> bool:
        return self.storage.one("content_exists", sha256=sha256) is not None

    def content_bytes_total(self) -> int:
        return self.storage.one("content_bytes_total")[0]

    def budget_events_total(self) -> int:
        return self._kept(cache_key("budget_events_total"), lambda: self.storage.one("budget_events_total")[0])

    def head(self) -> tuple[int, str, str]:
        if self.cache is None:
            return self.storage.head()
        if self._head is None:  # a write's first read of the head (the rules' own appends come after)
            self._head = self.storage.head()
            self.cache.check(self._head)
        return self._head

    def next_stream_seq(self, stream: str, revision: int) -> int:
        if stream not in ("budget", "case"):
            return 0  # an evidence event's stream is its own export path: not numbered
        if stream == "budget":
            return self._kept(cache_key("stream_count_budget", revision=revision),
                              lambda: self.storage.one("stream_count_budget", revision=revision)[0]) + 1
        return self._kept(cache_key("stream_count_case"), lambda: self.storage.one("stream_count_case")[0]) + 1

    # -- scoped limits ---------------------------------------------------------------
    def scope(self, name: str) -> dict[str, Any] | None:
        row = self._one("scope_latest", scope=name)
        if row is None:
            return None
        info = dict(zip(SCOPE_COLUMNS, row))
        if self.cache is None:
            info["limits"] = dict(self.storage.all("scope_limits_of", seq=info["seq"]))
        else:
            key = cache_key("scope_limits_of", seq=info["seq"])
            if key not in self.cache.answers:
                self.cache.answers[key] = self.storage.all("scope_limits_of", seq=info["seq"])
            info["limits"] = dict(self.cache.answers[key])
        return info

    def warned(self, name: str, establishment_seq: int) -> frozenset[str]:
        return frozenset(r[0] for r in self.storage.all("scope_warned", scope=name,
                                                         establishment_seq=establishment_seq))

    def money_consumed(self, revision: int | None, hypothesis_id: str | None) -> int:
        if revision is None:
            row = self.storage.one("money_consumed_case")
        elif hypothesis_id is None:
            row = self.storage.one("money_consumed_revision", revision=revision)
        else:
            row = self.storage.one("money_consumed_account", revision=revision, hypothesis_id=hypothesis_id)
        return row[0] if row else 0

    def revision_issuer(self, revision: int) -> str | None:
        row = self.storage.one("revision_issuer", revision=revision)
        return row[0] if row else None

    def lowest_pct_since_grant(self, revision: int, hypothesis_id: str) -> int | None:
        row = self.storage.one("lowest_pct_since_grant", revision=revision, hypothesis_id=hypothesis_id)
        return row[0] if row else None

    def account_floors(self, revision: int) -> dict[str, int | None]:
        """Each account's floor before the next event (the writer keeps and advances it)."""
        return self._kept(cache_key("account_floors", revision=revision),
                          lambda: dict(self.storage.all("account_floors_of_revision", revision=revision)))

    # -- the evidence store ------------------------------------------------------------
    def evidence_operation(self, operation_id: str) -> str | None:
        row = self.storage.one("evidence_by_operation", operation_id=operation_id)
        return row[0] if row else None

    def evidence_binding(self, revision: int, hypothesis_id: str, action_id: str) -> tuple[str, str] | None:
        row = self.storage.one("evidence_by_action", revision=revision, hypothesis_id=hypothesis_id,
                               action_id=action_id)
        return (row[0], row[1]) if row else None

    def first_record_with_content(self, sha256: str) -> str | None:
        row = self.storage.one("evidence_first_with_content", content_sha256=sha256)
        return row[0] if row else None

    def atom_seen(self, atom_sha256: str) -> bool:
        return self.storage.one("evidence_atom_exists", atom_sha256=atom_sha256) is not None

    def evidence_record(self, record_id: str) -> dict[str, Any] | None:
        row = self.storage.one("evidence_record_body", record_id=record_id)
        return json.loads(row[0]) if row else None

    def evidence_records_total(self) -> int:
        head = self.evidence_index_head()
        return len(head["records"]) if head else 0

    def evidence_index_head(self) -> dict[str, Any] | None:
        row = self.storage.one("evidence_index_head")
        if row is None:
            return None
        body = json.loads(row[0])
        return {"index_sha256": body["index_sha256"], **body["index"]}

    def reservation_seq(self, revision: int, hypothesis_id: str, action_id: str) -> int | None:
        row = self.storage.one("reservation_seq", revision=revision, hypothesis_id=hypothesis_id, action_id=action_id)
        return row[0] if row else None

    # -- asynchronous tests and feedback -----------------------------------------------
    def test_request(self, operation_id: str) -> dict[str, Any] | None:
        row = self.storage.one("test_request", operation_id=operation_id)
        return dict(zip(("seq", "revision", "hypothesis_id", "action_id", "kind"), row)) if row else None

    def feedback(self, feedback_id: str) -> dict[str, Any] | None:
        row = self.storage.one("feedback_draft", feedback_id=feedback_id)
        return feedback_state(json.loads(row[1]), bool(row[2])) if row else None

    def feedback_total(self) -> int:
        return self.storage.one("feedback_count")[0]

    def attachment(self, sha256: str) -> bytes | None:
        row = self.storage.one("attachment_content", sha256=sha256)
        if row is None:
            return None
        return row[0] if isinstance(row[0], bytes) else str(row[0]).encode("utf-8", "surrogatepass")


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
        self._warned: dict[tuple[str, int], set[str]] = {}
        self._money: dict[tuple[int, str], int] = {}
        self._issuers: dict[int, str] = {}
        self._lowest_pct: dict[tuple[int, str], int] = {}
        self._records: dict[str, dict[str, Any]] = {}
        self._record_by_operation: dict[str, str] = {}
        self._record_by_action: dict[tuple[int, str, str], tuple[str, str]] = {}
        self._record_by_content: dict[str, str] = {}
        self._atoms: set[str] = set()
        self._index: dict[str, Any] | None = None
        self._reservation_seqs: dict[tuple[int, str, str], int] = {}
        self._tests: dict[str, dict[str, Any]] = {}
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
        return _policy_config(self._policies[revision][0])

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

    def evidence_record(self, record_id: str) -> dict[str, Any] | None:
        found = self._records.get(record_id)
        return json.loads(canonical_bytes(found)) if found else None

    def evidence_records_total(self) -> int:
        return len(self._records)

    def evidence_index_head(self) -> dict[str, Any] | None:
        return json.loads(canonical_bytes(self._index)) if self._index else None

    def reservation_seq(self, revision: int, hypothesis_id: str, action_id: str) -> int | None:
        return self._reservation_seqs.get((revision, hypothesis_id, action_id))

    def test_request(self, operation_id: str) -> dict[str, Any] | None:
        found = self._tests.get(operation_id)
        return dict(found) if found else None

    def feedback(self, feedback_id: str) -> dict[str, Any] | None:
        found = self._feedback.get(feedback_id)
        return json.loads(canonical_bytes(found)) if found else None

    def feedback_total(self) -> int:
        return len(self._feedback)

    def attachment(self, sha256: str) -> bytes | None:
        return self._attachments.get(sha256)

    # -- advancing -------------------------------------------------------------------
    def apply(self, body: Mapping[str, Any], sha256: str, stream: str, operation_key: str | None,
              contents: Mapping[str, bytes]) -> int:
        """Advance by one event (``body`` as stored, ``sha256`` of its bytes); return its ``stream_seq``."""
        seq, revision, kind = body["seq"], body["revision"], body["type"]
        stream_seq = 0  # an evidence event (its stream is its export path) is not numbered
        if stream in ("budget", "case"):
            scope = (stream, revision if stream == "budget" else 0)
            stream_seq = self._stream_counts.get(scope, 0) + 1
            self._stream_counts[scope] = stream_seq
        self._head = (seq, sha256, body["created_at"])
        if operation_key is not None:
            self._remember_operation(operation_key, seq, body["request"])
        for sha, data in contents.items():
            self._contents.add(sha)
            self._content_bytes += len(data)
        if "state" in body:
            self._apply_lifecycle(body)
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
            self._index = {"index_sha256": body["index_sha256"], **body["index"]}
        elif kind == "feedback.submitted":
            self._feedback[body["feedback"]["feedback_id"]] = feedback_state(body, False)
            self._attachments.update(contents)
        elif kind == "feedback.confirmed":
            self._feedback[body["feedback_id"]]["confirmed"] = True
        return stream_seq

    def _remember_operation(self, key: str, seq: int, request: Mapping[str, Any]) -> None:
        """Note operation ``key`` (answered by event ``seq``) with its request's hash."""
        self._operations[key] = (seq, canonical_sha256(request))

    def _apply_scope(self, body: Mapping[str, Any]) -> None:
        if body["type"] == "scope.established":
            self._scopes[body["scope"]] = {**establishment_row(body), "limits": dict(body["effective_limits"])}
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
