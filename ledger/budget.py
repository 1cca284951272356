"""Budget accounting of a case (SPEC section 6): the Python API.

:class:`BudgetManager` checks the shape of each call, then evaluates the rule of
:mod:`ledger.rules` and appends its event in one ``BEGIN IMMEDIATE`` transaction.
Every method returns a :class:`BudgetResult`; an identical replay returns the
current state with ``reused=True`` and writes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from . import errors as E
from ._sql import statement
from .canonical import sha256_hex
from .config import BudgetConfig
from .errors import LedgerError
from .package import resolve_source_refs
from .rules import budget as rules
from .rules.common import sorted_accounts
from .session import Ran, Session


@dataclass(frozen=True)
class BudgetResult:
    """What every budget operation returns (SPEC 6.1).

    * ``package_path`` — the case folder; ``revision`` — the analysis revision;
    * ``seq`` / ``event_ref`` — the event (the original one when ``reused``) and
      the path it exports to; ``None`` for a snapshot of an uninitialized revision;
    * ``state`` — every account of the revision, keyed by hypothesis id, each with
      the ``balances`` view's columns (units are integers);
    * ``reused`` — True for an identical replay (nothing written);
    * ``investigable`` — non-terminal accounts with no pending action;
    * ``ready_for_evaluation`` — every account terminal and nothing pending;
    * ``action`` — the touched action's state (reserve/record/settle/fail).
    """

    package_path: str
    revision: int
    seq: int | None
    event_ref: str | None
    state: dict[str, dict[str, Any]]
    reused: bool
    investigable: list[str]
    ready_for_evaluation: bool
    action: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (what journal result lines carry)."""
        out = {
            "package_path": self.package_path, "revision": self.revision, "seq": self.seq,
            "event_ref": self.event_ref, "state": {h: dict(a) for h, a in self.state.items()},
            "reused": self.reused, "investigable": list(self.investigable),
            "ready_for_evaluation": self.ready_for_evaluation,
        }
        if self.action is not None:
            out["action"] = dict(self.action)
        return out


ACCOUNT_FIELDS = ("hypothesis_id", "initial_units", "granted_units", "spent_units", "rewarded_units",
                  "remaining_units", "status", "terminal_reason", "pending_action_id",
                  "low_information_streak", "settled_actions", "failed_actions")


def _state(accounts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Accounts by hypothesis id, in hypothesis order, each with the ``balances`` columns in order."""
    return {a["hypothesis_id"]: {k: a[k] for k in ACCOUNT_FIELDS} for a in sorted_accounts(accounts)}


class BudgetManager:
    """Budget operations on one case. ``config=None`` uses the policy frozen for the revision.

    With a ``config`` whose policy differs from the frozen one, identical replays
    and snapshots still work and every new operation fails with
    ``BUDGET_POLICY_CHANGED``. ``at`` (RFC 3339 UTC) sets the event time.
    """

    def __init__(self, session: Session, package_path: Path, config: BudgetConfig | None = None) -> None:
        if config is not None and not isinstance(config, BudgetConfig):
            raise LedgerError(E.INVALID_ARGUMENT, f"config must be a BudgetConfig (BudgetConfig.load(path) or "
                              f"BudgetConfig.from_mapping(...)) or None, got {type(config).__name__}")
        self._session = session
        self.package_path = package_path
        self.config = config

    def _run(self, name: str, request: dict[str, Any], at: str | None, action: tuple[str, str] | None = None,
             inputs: dict[str, Any] | None = None) -> BudgetResult:
        return self._result(self._session.run(name, request, at=at, config=self.config, inputs=inputs), action)

    def _result(self, ran: Ran, action: tuple[str, str] | None = None) -> BudgetResult:
        seq = ran.seq
        if ran.last is not None:
            body = ran.last.body
            revision, ref = body["revision"], ran.last.event_ref
            accounts = {a["hypothesis_id"]: a for a in body["accounts"]}
            action_state = body.get("action")
        else:
            with self._session.read() as view:
                revision = view.case()["revision"]
                accounts = view.accounts(revision)
                ref = self._session.event_ref(seq)
                action_state = view.action(revision, *action) if action else None
        return BudgetResult(
            package_path=str(self.package_path), revision=revision, seq=seq, event_ref=ref,
            state=_state(accounts), reused=ran.reused,
            investigable=rules.investigable(accounts), ready_for_evaluation=rules.ready_for_evaluation(accounts),
            action=action_state,
        )

    def initialize(self, *, at: str | None = None) -> BudgetResult:
        """Open one account per hypothesis of the current revision (SPEC 6.1).

        Errors: ``CASE_STATE``, ``LIMIT_REACHED``. Repeating returns ``reused=True``
        and never refills anything, whatever the config.
        """
        return self._run("initialize", rules.shape_initialize(), at)

    def reserve(self, hypothesis_id: str, action_id: str, action: str, *, at: str | None = None) -> BudgetResult:
        """Debit ``action``'s cost from ``hypothesis_id`` before the tool runs.

        ``action`` is a tool name such as ``source.read_context``; its cost is
        ``action_costs[action]`` or ``default_action_cost``. Errors (in order):
        ``INVALID_ID``, ``OPERATION_CONFLICT``, ``CASE_STATE``, ``NOT_INITIALIZED``,
        ``UNKNOWN_HYPOTHESIS``, ``BUDGET_POLICY_CHANGED``, ``ACCOUNT_TERMINAL``,
        ``ACTION_PENDING``, ``INSUFFICIENT_BUDGET``, ``LIMIT_REACHED``.
        """
        request = rules.shape_reserve(hypothesis_id, action_id, action)
        return self._run("reserve", request, at, (hypothesis_id, action_id))

    def record_result(self, hypothesis_id: str, action_id: str, evidence: Any,
                      source_refs: Iterable[str] | None = None, *, at: str | None = None) -> BudgetResult:
        """Store ``evidence`` (any JSON value, ≤ 1 MiB canonical) for a reserved action.

        ``source_refs`` are relative paths of regular files inside the package,
        stored with their sha256. Novelty v1 is computed now (new and non-empty →
        ``new_evidence_score``, else 0); nothing is refunded until ``settle``.
        Errors: ``INVALID_ID``, ``INVALID_JSON``, ``LIMIT_REACHED``,
        ``SOURCE_REF_INVALID``, then the order of SPEC 6.1 up to ``ACTION_CLOSED``.
        """
        refs = [] if source_refs is None else source_refs
        request, payload = rules.shape_record_result(
            hypothesis_id, action_id, evidence, refs,
            evidence_bytes_max=self._session.limits["evidence_payload_bytes_max"])
        sources = resolve_source_refs(self.package_path, request["source_refs"])
        return self._run("record_result", request, at, (hypothesis_id, action_id),
                         inputs={"evidence": payload, "sources": sources})

    def record_evidence(self, hypothesis_id: str, action_id: str, record_id: str, *,
                        at: str | None = None) -> BudgetResult:
        """Feed evidence record ``record_id`` (``E000001``…) to the reserved action: it awaits
        assessment with novelty ``min(new_evidence_score, record novelty)``; nothing is refunded yet.
        Errors: ``INVALID_ID``, the order of SPEC 6.1, ``INVALID_ARGUMENT`` (unknown record),
        ``NO_RESERVATION`` (a record of another reservation, or a result already recorded).
        """
        request = rules.shape_record_evidence(hypothesis_id, action_id, record_id)
        return self._run("record_evidence", request, at, (hypothesis_id, action_id))

    def settle(self, hypothesis_id: str, action_id: str, semantic_score: int, reason: str,
               *, at: str | None = None) -> BudgetResult:
        """Close an assessed action and refund (SPEC 6.2).

        ``semantic_score`` is an ``int`` 0–100 (no bool, no float); ``reason`` a
        non-blank string. ``information = min(novelty, semantic_score)``;
        ``reward = min(cost * max_reward_bps * information // 1_000_000, cost - 1)``.
        Errors: ``INVALID_SCORE``, ``REASON_REQUIRED``, …, ``RESULT_MISSING``.
        """
        request = rules.shape_settle(hypothesis_id, action_id, semantic_score, reason)
        return self._run("settle", request, at, (hypothesis_id, action_id))

    def fail(self, hypothesis_id: str, action_id: str, reason: str, *, at: str | None = None) -> BudgetResult:
        """Close a pending action with no refund; counts as a low-information step.

        Errors: ``REASON_REQUIRED``, …, ``UNKNOWN_ACTION``, ``ACTION_CLOSED``.
        """
        request = rules.shape_fail(hypothesis_id, action_id, reason)
        return self._run("fail", request, at, (hypothesis_id, action_id))

    def reject(self, hypothesis_id: str, reason: str, *, at: str | None = None) -> BudgetResult:
        """Mark the account ``rejected`` (terminal), no refund, nothing deleted.

        Errors: ``REASON_REQUIRED``, …, ``ACCOUNT_TERMINAL``, ``ACTION_PENDING``.
        """
        return self._run("reject", rules.shape_reject(hypothesis_id, reason), at)

    def snapshot(self) -> BudgetResult:
        """Replay and validate the current revision's budget history; write nothing.

        Checks every budget event of the revision: hash of its stored bytes,
        parent link, ``remaining = initial + granted - spent + rewarded >= 0``,
        ``0 <= reward < cost``, and that the ``balances`` view equals the newest
        state. Raises ``INTEGRITY_ERROR`` naming the first bad ``seq``.
        """
        storage = self._session.storage
        with self._session.read() as view:
            revision = view.case()["revision"]
            rows = storage.conn.execute(statement("budget_chain_of_revision"), {"revision": revision})
            last_seq, accounts = None, {}
            for seq, sha, body_text, parent_sha in rows:
                body = json.loads(body_text)
                if sha256_hex(body_text.encode("utf-8")) != sha or body.get("parent_sha256") != parent_sha:
                    raise LedgerError(E.INTEGRITY_ERROR, f"budget event {seq} does not match its hash chain", seq=seq)
                for account in body["accounts"]:
                    remaining = (account["initial_units"] + account["granted_units"]
                                 - account["spent_units"] + account["rewarded_units"])
                    if remaining != account["remaining_units"] or remaining < 0:
                        raise LedgerError(E.INTEGRITY_ERROR, f"budget event {seq}: {account['hypothesis_id']} does not balance", seq=seq)
                action = body.get("action") or {}
                if action.get("reward_units") is not None and not 0 <= action["reward_units"] < action["cost_units"]:
                    raise LedgerError(E.INTEGRITY_ERROR, f"budget event {seq}: reward outside [0, cost)", seq=seq)
                last_seq, accounts = seq, {a["hypothesis_id"]: a for a in body["accounts"]}
            view_rows = storage.conn.execute(statement("balances_of_revision"), {"revision": revision})
            names = [d[0] for d in view_rows.description]
            for row in view_rows.fetchall():
                record = dict(zip(names, row))
                record.pop("revision")
                if accounts.get(record["hypothesis_id"]) != record:
                    raise LedgerError(
                        E.INTEGRITY_ERROR, f"balances view disagrees with budget event {last_seq} on {record['hypothesis_id']}",
                        seq=last_seq,
                    )
            ref = self._session.event_ref(last_seq) if last_seq else None
        return BudgetResult(
            package_path=str(self.package_path), revision=revision, seq=last_seq, event_ref=ref,
            state=_state(accounts), reused=True,
            investigable=rules.investigable(accounts), ready_for_evaluation=rules.ready_for_evaluation(accounts),
        )
