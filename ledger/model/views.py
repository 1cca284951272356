"""The view protocol over SQL (the live write path); its twin in memory is
:mod:`ledger.model.memory_view` (replay, verify, simulation).

The rules read state only through a :class:`~ledger.rules.common.LedgerView`.
:class:`SqlView` answers with bounded, indexed reads of one open
:class:`~ledger.storage.connection.Storage`; ``MemoryView`` holds the same state in
dicts. Both answer every question identically for the same history
(``tests/test_seams.py`` checks it on real journals).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import AbstractSet, Any, Callable, Mapping

from ..ground import errors as E
from ..ground.canonical import canonical_sha256, stored_bytes
from ..ground.config import BudgetConfig
from ..ground.errors import LedgerError
from ..storage.connection import Storage


@lru_cache(maxsize=64)
def policy_config_of(policy_json: str) -> BudgetConfig:
    """Frozen policies are validated once per process, not on every operation."""
    try:
        settings = json.loads(policy_json)
    except (ValueError, TypeError, RecursionError):
        raise LedgerError(E.INTEGRITY_ERROR, "the policy frozen for the revision is not the JSON the ledger wrote "
                          "(an edited ledger); run 'ledger verify'") from None
    return BudgetConfig.from_mapping(settings)


#: Columns of the ``scope_latest`` statement, the keys of :meth:`SqlView.scope` (plus ``limits``).
SCOPE_COLUMNS = ("seq", "scope", "scope_type", "scope_id", "scope_revision", "scope_hypothesis", "establishment",
                 "issuer", "delegate", "warning_bps", "on_exhausted", "causation_seq", "origin_at")


def feedback_state(body: Mapping[str, Any], confirmed: bool) -> dict[str, Any]:
    """What :meth:`SqlView.feedback` answers, from a ``feedback.submitted`` event body."""
    return {**body["feedback"], "seq": body["seq"], "reply": body["request"]["reply"], "confirmed": confirmed}


def refusal_key(identity: Mapping[str, Any]) -> str:
    """The in-memory key of a recorded limit refusal (its identity, docs/scopes.md)."""
    return canonical_sha256(dict(identity))


def cache_key(statement: str, **params: Any) -> tuple[str, tuple]:
    """How :class:`WriterCache` files the answer of a named statement with its parameters."""
    if len(params) < 2:  # nothing to order (the usual case)
        return statement, tuple(params.items())
    return statement, tuple(sorted(params.items()))


#: Keys of the kept answers of statements without parameters (:func:`cache_key`'s form).
_BUDGET_TOTAL = cache_key("budget_events_total")
_CASE_COUNT = cache_key("stream_count_case")


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
    CACHED = frozenset({"case_head", "policy", "scope_latest", "scope_limits_of", "duration_scopes"})
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
            answers[_CASE_COUNT] = stream_seq
            return
        revision = (("revision", body["revision"]),)
        answers[("stream_count_budget", revision)] = stream_seq
        answers[("latest_budget_body", revision)] = budget_head_of(body)
        if _BUDGET_TOTAL in answers:
            answers[_BUDGET_TOTAL] += 1

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
        key = (name, tuple(params.items())) if len(params) < 2 else cache_key(name, **params)
        return self._kept(key, lambda: self.storage.one(name, **params))

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
        return policy_config_of(row[0])

    def previous_policy(self, revision: int) -> tuple[dict[str, Any], str] | None:
        row = self.storage.one("latest_policy_before", revision=revision)
        return (json.loads(row[0]), row[1]) if row else None

    def _kept(self, key: tuple[str, tuple], compute: Callable[[], Any]) -> Any:
        """``compute()``, or the answer the writer's cache keeps for ``key`` while the head is ours."""
        if self.cache is None:
            return compute()
        if self._head is None:
            self.head()  # checks the cache against the chain head first
        answers = self.cache.answers
        if key not in answers:
            answers[key] = compute()
        return answers[key]

    def budget_head(self, revision: int) -> dict[str, Any] | None:
        return self._kept(("latest_budget_body", (("revision", revision),)), lambda: self._read_budget_head(revision))

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
        return self._kept(_BUDGET_TOTAL, lambda: self.storage.one("budget_events_total")[0])

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
            return self._kept(("stream_count_budget", (("revision", revision),)),
                              lambda: self.storage.one("stream_count_budget", revision=revision)[0]) + 1
        return self._kept(_CASE_COUNT, lambda: self.storage.one("stream_count_case")[0]) + 1

    # -- scoped limits ---------------------------------------------------------------
    def scope(self, name: str) -> dict[str, Any] | None:
        row = self._one("scope_latest", scope=name)
        if row is None:
            return None
        info = dict(zip(SCOPE_COLUMNS, row))
        if self.cache is None:
            info["limits"] = dict(self.storage.all("scope_limits_of", seq=info["seq"]))
        else:
            key = ("scope_limits_of", (("seq", info["seq"]),))
            if key not in self.cache.answers:
                self.cache.answers[key] = self.storage.all("scope_limits_of", seq=info["seq"])
            info["limits"] = dict(self.cache.answers[key])
        return info

    def duration_scopes(self) -> AbstractSet[str]:
        return self._kept(("duration_scopes", ()),
                          lambda: frozenset(name for (name,) in self.storage.all("duration_limited_scopes")))

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
        return self._kept(("account_floors", (("revision", revision),)),
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

    def result_atoms_seen(self, atom_ids: list[str]) -> int:
        if not atom_ids:
            return 0
        return self.storage.one("result_atoms_seen", atoms=json.dumps(atom_ids))[0]

    def evidence_record(self, record_id: str) -> dict[str, Any] | None:
        row = self.storage.one("evidence_record_body", record_id=record_id)
        return json.loads(row[0]) if row else None

    def evidence_records_total(self) -> int:
        head = self.evidence_index_head()
        return head["record_count"] if head else 0

    def evidence_index_head(self) -> dict[str, Any] | None:
        row = self.storage.one("evidence_index_head")
        if row is None:
            return None
        return {"index_sha256": row[0], "next_record_number": row[1], "record_count": row[2], "format": row[3],
                "records": None}  # a write never needs the v1 list: it writes evidence-index-v2

    def indexed_record_sha(self, record_id: str) -> str | None:
        row = self.storage.one("evidence_indexed_sha", record_id=record_id)
        return row[0] if row else None

    def reservation_seq(self, revision: int, hypothesis_id: str, action_id: str) -> int | None:
        row = self.storage.one("reservation_seq", revision=revision, hypothesis_id=hypothesis_id, action_id=action_id)
        return row[0] if row else None

    # -- asynchronous tests and feedback -----------------------------------------------
    def test_request(self, operation_id: str) -> dict[str, Any] | None:
        row = self.storage.one("test_request", operation_id=operation_id)
        return dict(zip(("seq", "revision", "hypothesis_id", "action_id", "kind"), row)) if row else None

    def limit_refusal(self, identity: Mapping[str, Any]) -> int | None:
        params = {**identity, "request": json.dumps(identity["request"], sort_keys=True, separators=(",", ":"),
                                                    ensure_ascii=False)}
        row = self.storage.one("limit_refusal_recorded", **params)
        return row[0] if row else None

    def test_of_action(self, revision: int, hypothesis_id: str, action_id: str) -> str | None:
        row = self.storage.one("test_of_action", revision=revision, hypothesis_id=hypothesis_id, action_id=action_id)
        return row[0] if row else None

    def feedback(self, feedback_id: str) -> dict[str, Any] | None:
        row = self.storage.one("feedback_draft", feedback_id=feedback_id)
        return feedback_state(json.loads(row[1]), bool(row[2])) if row else None

    def feedback_total(self) -> int:
        return self.storage.one("feedback_count")[0]

    def attachment(self, sha256: str) -> bytes | None:
        row = self.storage.one("attachment_content", sha256=sha256)
        if row is None:
            return None
        return stored_bytes(row[0])
