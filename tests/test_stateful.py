"""Random sequences of budget operations against an independent reference model (docs/concepts.md).

A ``hypothesis`` state machine drives a real :class:`ledger.Case` (a fresh
package in a temp folder per example, a few hypotheses with small allocations
so that accounts run dry) with valid *and* invalid calls: reserve, record_result,
settle, fail, reject, initialize, BLOCKED ⇄ INVESTIGATING transitions, exact
replays of applied operations and changed replays under the same identity.

:class:`ReferenceModel` is written from the text of docs/concepts.md alone; it never imports
``ledger.rules``, ``ledger.ground.canonical`` or ``ledger.ground.config``. For every call it
predicts either the error code (first failing check in docs/concepts.md's order) or
the exact outcome: ``reused``, ``seq``, ``event_ref``, the state of every
account and of the touched action. Refused and reused calls must write nothing
(``logical_dump`` is compared before and after); accepted calls append exactly
one event with the next ``seq``.
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from ledger import BudgetConfig, LedgerError

from conftest import TORTURE_SCALE, logical_dump, make_package, start_case, torture_run

# --- the reference model: docs/concepts.md, written independently ---------------------

GENERATING = "GENERATING_HYPOTHESES"
INVESTIGATING = "INVESTIGATING_HYPOTHESES"
BLOCKED = "BLOCKED"
TERMINAL = ("budget_exhausted", "abandoned_low_information_gain", "rejected")

#: docs/concepts.md defaults of the keys the accounting uses.
SPEC_DEFAULTS = {
    "default_action_cost": 10,
    "action_costs": {},
    "max_reward_bps": 8000,
    "new_evidence_score": 100,
    "low_information_threshold": 20,
    "max_low_information_steps": 3,
}

#: docs/concepts.md identifiers (full-string matches, as in JSON Schema / ECMAScript regexes).
HYPOTHESIS_ID = re.compile(r"H[1-9][0-9]*")
ACTION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
ACTION_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")
SAFE_INT = 2**53 - 1
#: Files a source reference may name in the test package (make_package writes them).
EXISTING_SOURCES = frozenset({"sources/app.py", "sources/notes.txt"})
OMITTED = "<omitted>"  # record_result called without source_refs


class Refused(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _matches(pattern: re.Pattern[str], value: Any) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def canonical_key(value: Any) -> str:
    """A string equal for two JSON values iff RFC 8785 gives them the same bytes.

    Raises ``Refused("INVALID_JSON")`` for values with no canonical form (docs/concepts.md).
    Integral floats are numbers like any other (``1.0`` is ``1``, ``-0.0`` is ``0``).
    """

    def norm(v: Any) -> Any:
        if v is None or isinstance(v, bool):
            return v
        if isinstance(v, int):
            if abs(v) > SAFE_INT:
                raise Refused("INVALID_JSON")
            return v
        if isinstance(v, float):
            # a JSON number with an integral value beyond ±(2^53−1) is such an integer too
            if not math.isfinite(v) or (v.is_integer() and abs(v) > SAFE_INT):
                raise Refused("INVALID_JSON")
            return int(v) if v.is_integer() else v
        if isinstance(v, str):
            if any(0xD800 <= ord(c) <= 0xDFFF for c in v):
                raise Refused("INVALID_JSON")
            return v
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise Refused("INVALID_JSON")
            return {norm(k): norm(x) for k, x in v.items()}
        raise Refused("INVALID_JSON")

    return json.dumps(norm(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


EMPTY_KEYS = frozenset({"null", "{}", "[]", '""'})


@dataclass
class Call:
    """One API call through one of three managers: ``main`` (the example's policy),
    ``other`` (a policy differing in a key the accounting does not use) or ``frozen``
    (``config=None``: the policy frozen at initialize, or the defaults of docs/concepts.md when it is
    the one that initializes)."""

    op: str
    manager: str = "main"
    args: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        via = "" if self.manager == "main" else f" via {self.manager} manager"
        return f"{self.op}({inner}){via}"


@dataclass
class Expected:
    error: str | None = None
    reused: bool = False
    seq: int | None = None
    event_ref: str | None = None
    event_type: str | None = None
    action_key: tuple[str, str] | None = None


class ReferenceModel:
    """Pure-Python accounting of one revision, from docs/concepts.md."""

    def __init__(self, hypotheses: int, units: int, policy: dict[str, Any], case_state: str,
                 other_change: dict[str, Any] | None = None) -> None:
        #: the policy each manager's config means; ``frozen`` (no config) initializes the defaults
        self.policies = {
            "main": {**SPEC_DEFAULTS, **copy.deepcopy(policy)},
            "other": {**SPEC_DEFAULTS, **copy.deepcopy(policy), **copy.deepcopy(other_change or {})},
            "frozen": dict(SPEC_DEFAULTS),
        }
        self.frozen_by: str | None = None  # the manager whose policy initialize froze
        self.hypotheses = [f"H{i}" for i in range(1, hypotheses + 1)]
        self.units = units
        self.case_state = case_state
        self.initialized = False
        self.accounts: dict[str, dict[str, Any]] = {}
        self.actions: dict[tuple[str, str], dict[str, Any]] = {}
        self.order: list[tuple[str, str]] = []
        self.operations: dict[tuple, tuple[Any, int, str]] = {}  # identity -> (inputs, seq, event_ref)
        self.seen: set[str] = set()
        # case.created, revision.opened (+ case.transitioned when investigating)
        self.last_seq = 3 if case_state == INVESTIGATING else 2
        self.case_events = self.last_seq
        self.budget_events = 0
        self.last_budget_seq: int | None = None

    @property
    def policy(self) -> dict[str, Any]:
        return self.policies[self.frozen_by or "main"]

    # rules of docs/concepts.md / 6.4
    def cost(self, action: str) -> int:
        return self.policy["action_costs"].get(action, self.policy["default_action_cost"])

    @property
    def floor(self) -> int:
        return min([self.policy["default_action_cost"], *self.policy["action_costs"].values()])

    def reward(self, cost: int, information: int) -> int:
        return min(cost * self.policy["max_reward_bps"] * information // 1_000_000, cost - 1)

    def status_rules(self, account: dict[str, Any]) -> None:
        if account["status"] in TERMINAL:
            return
        if account["remaining_units"] < self.floor:
            account["status"], account["terminal_reason"] = "budget_exhausted", "remaining_below_floor"
        elif account["low_information_streak"] >= self.policy["max_low_information_steps"]:
            account["status"] = "abandoned_low_information_gain"
            account["terminal_reason"] = "low_information_streak"

    # views of the model
    def state(self) -> dict[str, dict[str, Any]]:
        return {h: dict(self.accounts[h]) for h in sorted(self.accounts, key=lambda h: int(h[1:]))}

    def investigable(self) -> list[str]:
        return [h for h, a in self.state().items()
                if a["status"] not in TERMINAL and a["pending_action_id"] is None]

    def ready_for_evaluation(self) -> bool:
        return bool(self.accounts) and all(
            a["status"] in TERMINAL and a["pending_action_id"] is None for a in self.accounts.values())

    def action_rows(self) -> list[dict[str, Any]]:
        return [{"revision": 1, **self.actions[key]} for key in self.order]

    def balance_rows(self) -> list[dict[str, Any]]:
        return [{"revision": 1, **a} for a in self.state().values()]

    def pending(self) -> list[tuple[str, str]]:
        return [(h, a["pending_action_id"]) for h, a in self.state().items() if a["pending_action_id"]]

    # prediction
    def step(self, call: Call) -> Expected:
        """Predict ``call``'s outcome and, when it is accepted, apply it to the model."""
        try:
            return self._step(call)
        except Refused as refusal:
            return Expected(error=refusal.code)

    def _shape(self, call: Call) -> tuple[tuple, Any]:
        """Shape checks (docs/concepts.md, first group) → (identity, inputs)."""
        a = call.args
        if call.op == "initialize":
            return ("initialize",), ()
        h = a["hypothesis_id"]
        if not _matches(HYPOTHESIS_ID, h):
            raise Refused("INVALID_ID")
        if call.op != "reject" and not _matches(ACTION_ID, a["action_id"]):
            raise Refused("INVALID_ID")
        if call.op == "reserve":
            if not _matches(ACTION_NAME, a["action"]):
                raise Refused("INVALID_ID")
            return ("reserve", h, a["action_id"]), (a["action"],)
        if call.op == "settle":
            score = a["semantic_score"]
            if type(score) is not int or not 0 <= score <= 100:
                raise Refused("INVALID_SCORE")
        if call.op in ("settle", "fail", "reject") and not a["reason"].strip():
            raise Refused("REASON_REQUIRED")
        if call.op == "record_result":
            key = canonical_key(a["evidence"])
            refs = [] if a["source_refs"] == OMITTED else list(a["source_refs"])
            if len(set(refs)) != len(refs) or not set(refs) <= EXISTING_SOURCES:
                raise Refused("SOURCE_REF_INVALID")
            return ("record_result", h, a["action_id"]), (key, tuple(refs))
        if call.op == "settle":
            return ("settle", h, a["action_id"]), (a["semantic_score"], a["reason"])
        if call.op == "fail":
            return ("fail", h, a["action_id"]), (a["reason"],)
        return ("reject", h), (a["reason"],)

    def _step(self, call: Call) -> Expected:
        identity, inputs = self._shape(call)
        a = call.args
        action_key = (a["hypothesis_id"], a["action_id"]) if "action_id" in a else None
        if identity in self.operations:
            known, seq, ref = self.operations[identity]
            if known == inputs:
                return Expected(reused=True, seq=seq, event_ref=ref, action_key=action_key)
            if call.op != "reject":  # a changed reject goes on: its account is terminal (ACCOUNT_TERMINAL)
                raise Refused("OPERATION_CONFLICT")
        if self.case_state not in (GENERATING, INVESTIGATING):
            raise Refused("CASE_STATE")
        if call.op == "initialize":
            self.frozen_by = call.manager
            for h in self.hypotheses:
                account = {
                    "hypothesis_id": h, "initial_units": self.units, "granted_units": 0,
                    "spent_units": 0, "rewarded_units": 0, "remaining_units": self.units,
                    "status": "new", "terminal_reason": None, "pending_action_id": None,
                    "low_information_streak": 0, "settled_actions": 0, "failed_actions": 0,
                }
                self.status_rules(account)
                self.accounts[h] = account
            self.initialized = True
            return self._append(identity, inputs, "budget.initialized", None)
        if not self.initialized:
            raise Refused("NOT_INITIALIZED")
        h = a["hypothesis_id"]
        if h not in self.accounts:
            raise Refused("UNKNOWN_HYPOTHESIS")
        if call.manager not in ("frozen", self.frozen_by):  # a config other than the frozen policy
            raise Refused("BUDGET_POLICY_CHANGED")
        account = self.accounts[h]
        if call.op in ("reserve", "reject") and account["status"] in TERMINAL:
            raise Refused("ACCOUNT_TERMINAL")
        action = self.actions.get(action_key) if action_key else None
        if call.op in ("record_result", "settle", "fail"):
            if action is None:
                raise Refused("UNKNOWN_ACTION")
            if action["status"] in ("settled", "failed"):
                raise Refused("ACTION_CLOSED")
        if call.op in ("reserve", "reject") and account["pending_action_id"] is not None:
            raise Refused("ACTION_PENDING")
        if call.op == "settle" and action["status"] == "reserved":
            raise Refused("RESULT_MISSING")
        if call.op == "reserve" and self.cost(a["action"]) > account["remaining_units"]:
            raise Refused("INSUFFICIENT_BUDGET")

        # accepted: apply
        if call.op == "reserve":
            cost = self.cost(a["action"])
            account["spent_units"] += cost
            account["pending_action_id"] = a["action_id"]
            if account["status"] == "new":
                account["status"] = "investigating"
            self.actions[action_key] = {
                "hypothesis_id": h, "action_id": a["action_id"], "action": a["action"],
                "cost_units": cost, "status": "reserved", "novelty_score": None,
                "semantic_score": None, "information_score": None, "reward_units": None,
            }
            self.order.append(action_key)
            event_type = "budget.reserved"
        elif call.op == "record_result":
            key = inputs[0]
            novelty = 0 if key in EMPTY_KEYS or key in self.seen else self.policy["new_evidence_score"]
            self.seen.add(key)
            action.update(status="awaiting_assessment", novelty_score=novelty)
            event_type = "budget.result_recorded"
        elif call.op == "settle":
            information = min(action["novelty_score"], a["semantic_score"])
            reward = self.reward(action["cost_units"], information)
            action.update(status="settled", semantic_score=a["semantic_score"],
                          information_score=information, reward_units=reward)
            account["rewarded_units"] += reward
            account["pending_action_id"] = None
            account["settled_actions"] += 1
            if information > self.policy["low_information_threshold"]:
                account["low_information_streak"] = 0
            else:
                account["low_information_streak"] += 1
            event_type = "budget.settled"
        elif call.op == "fail":
            action.update(status="failed", reward_units=0)
            account["pending_action_id"] = None
            account["failed_actions"] += 1
            account["low_information_streak"] += 1
            event_type = "budget.failed"
        else:  # reject
            account["status"], account["terminal_reason"] = "rejected", a["reason"]
            event_type = "budget.rejected"
        account["remaining_units"] = (account["initial_units"] + account["granted_units"]
                                      - account["spent_units"] + account["rewarded_units"])
        if call.op in ("settle", "fail"):
            self.status_rules(account)
        return self._append(identity, inputs, event_type, action_key)

    def _append(self, identity: tuple, inputs: Any, event_type: str,
                action_key: tuple[str, str] | None) -> Expected:
        self.last_seq += 1
        self.budget_events += 1
        self.last_budget_seq = self.last_seq
        ref = f"analysis/budgets/0001/events/{self.budget_events:08d}.json"
        self.operations[identity] = (inputs, self.last_seq, ref)
        return Expected(seq=self.last_seq, event_ref=ref, event_type=event_type, action_key=action_key)

    def transition(self, to: str) -> Expected:
        self.case_state = to
        self.last_seq += 1
        self.case_events += 1
        return Expected(seq=self.last_seq, event_ref=f"analysis/case/events/{self.case_events:08d}.json",
                        event_type="case.transitioned")


# --- pools of arguments ---------------------------------------------------------------

POLICIES = [
    # the brief's policy: floor 3, two low-information steps abandon
    {"default_action_cost": 7, "action_costs": {"source.read_context": 3, "research.lookup": 13},
     "max_low_information_steps": 2},
    # novelty can never beat the threshold: every settle is a low-information step
    {"default_action_cost": 7, "action_costs": {"source.read_context": 3, "research.lookup": 13},
     "max_low_information_steps": 3, "max_reward_bps": 9999, "new_evidence_score": 20},
    # no refunds at all, a single low-information step abandons
    {"default_action_cost": 5, "action_costs": {"research.lookup": 11},
     "max_low_information_steps": 1, "max_reward_bps": 0, "low_information_threshold": 0},
    # high threshold, generous refunds
    {"default_action_cost": 6, "action_costs": {"source.read_context": 4, "database.lookup": 9},
     "max_low_information_steps": 2, "max_reward_bps": 9000, "low_information_threshold": 60},
]
#: Changes that make a different policy (BUDGET_POLICY_CHANGED for new operations).
OTHER_POLICY_CHANGES = [
    {"tier_shallow_below_pct": 60},
    {"max_scarcity_bps": 50000},
    {"test_costs": {"human": 31, "automated": 15}},
]

VALID_HYPOTHESIS_IDS = ["H1", "H1", "H2", "H2", "H3"]
INVALID_HYPOTHESIS_IDS = [
    "H4", "H9", "H10",                                    # well-formed, unknown when there are ≤ 3
    "H0", "h1", "", "H01", "H1\n", " H1", "H", "H1 ",     # malformed
]
VALID_ACTION_IDS = ["a1", "a2", "a3", "a4", "a5", "a6", "q.7", "x:8", "Z-9", "a" * 128]
INVALID_ACTION_IDS = ["", "-a", "a b", "a1\n", "a" * 129, "é1", ".a"]
VALID_ACTION_NAMES = ["source.read_context", "source.read_context", "research.lookup",
                      "source.find_text", "test.automated", "database.lookup"]
INVALID_ACTION_NAMES = ["read", "Source.read", "source.", "source.read_context\n", "a.b-c", ""]
EVIDENCE = [
    None, {}, [], "",                                     # empty: novelty 0
    {"a": 1.0}, {"a": 1}, {"b": 2, "a": 1}, {"a": 1, "b": 2.0},   # equal after canonicalization
    [1, 2], [1.0, 2.0], [2, 1], 0, 0.0, -0.0, False, "0", " ",
    [[]], {"a": {}}, [None], 1.5, 9007199254740991, 9007199254740991.0, 1e-7,
    "finding", {"finding": "line 23 adds quantity again"},
    {"finding": "line 23 adds quantity again", "line": 23},
    {"x": "\u00e9"}, {"x": "e\u0301"},
]
INVALID_EVIDENCE = [float("nan"), float("inf"), {"x": 2**53}, -(2**53), 2.0**60, {1: "a"}, "\ud800",
                    {"a": [float("-inf")]}]
VALID_SOURCE_REFS = [OMITTED, OMITTED, [], ["sources/app.py"], ["sources/notes.txt"],
                     ["sources/app.py", "sources/notes.txt"]]
INVALID_SOURCE_REFS = [["../outside.txt"], ["/etc/hostname"], ["sources/missing.py"], ["ledger.sqlite"],
                       ["sources"], ["sources/app.py", "sources/app.py"], ["./sources/app.py"], [""]]
VALID_REASONS = ["checked", "checked", "tool timed out", "contradicted", "  kept verbatim\n"]
INVALID_REASONS = ["", "   ", "\n\t"]


def mostly(valid: Any, invalid: Any, weight: int = 6) -> st.SearchStrategy:
    """``valid`` about ``weight`` times as often as ``invalid`` (lists or strategies)."""
    valid_s, invalid_s = (x if isinstance(x, st.SearchStrategy) else st.sampled_from(x) for x in (valid, invalid))
    return st.sampled_from([True] * weight + [False]).flatmap(lambda ok: valid_s if ok else invalid_s)


HYPOTHESES = mostly(VALID_HYPOTHESIS_IDS, INVALID_HYPOTHESIS_IDS, 4)
ACTION_IDS = mostly(VALID_ACTION_IDS, INVALID_ACTION_IDS, 5)
ACTION_NAMES = mostly(VALID_ACTION_NAMES, INVALID_ACTION_NAMES)
EVIDENCES = mostly(EVIDENCE, INVALID_EVIDENCE)
SOURCE_REF_LISTS = mostly(VALID_SOURCE_REFS, INVALID_SOURCE_REFS)
REASONS = mostly(VALID_REASONS, INVALID_REASONS)
VALID_SCORES = st.one_of(st.integers(0, 100), st.sampled_from([0, 20, 21, 50, 59, 60, 61, 100]))
SCORES = mostly(VALID_SCORES, [True, False, 50.0, 0.0, 100.0, -1, 101, 2**60], 5)
MANAGERS = st.sampled_from(["main"] * 6 + ["frozen"] * 2 + ["other"])


# --- the state machine -------------------------------------------------------------------

class BudgetLedgerMachine(RuleBasedStateMachine):
    """Real Case vs ReferenceModel, call by call."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp: Path | None = None
        self.case = None
        self.model: ReferenceModel | None = None
        self.applied: list[Call] = []
        self.log: list[str] = []

    # setup
    @initialize(
        data=st.data(),
        hypotheses=st.integers(1, 3),
        policy=st.sampled_from(POLICIES),
        other_change=st.sampled_from(OTHER_POLICY_CHANGES),
        investigate=st.sampled_from([True, True, True, False]),
        initialize_now=st.sampled_from([True, True, True, True, False]),
    )
    def open_a_fresh_case(self, data, hypotheses, policy, other_change, investigate, initialize_now):
        # mostly 20–60 units; sometimes just around the affordability floor (exhausted at initialize or not)
        floor = min([policy["default_action_cost"], *policy["action_costs"].values()])
        units = data.draw(st.sampled_from([True] * 5 + [False]).flatmap(
            lambda usual: st.integers(20, 60) if usual else st.sampled_from(
                [u for u in (floor - 2, floor - 1, floor, floor + 1) if u >= 1])), label="units")
        self.tmp = Path(tempfile.mkdtemp(prefix="stateful-"))
        path = make_package(self.tmp / "case")
        self.case = start_case(path, hypotheses=hypotheses, units=units, investigate=investigate)
        self.db = path / "ledger.sqlite"
        self.managers = {
            "main": self.case.budget(BudgetConfig.from_mapping(policy)),
            "frozen": self.case.budget(),
            "other": self.case.budget(BudgetConfig.from_mapping({**policy, **other_change})),
        }
        self.model = ReferenceModel(hypotheses, units, policy,
                                    INVESTIGATING if investigate else GENERATING, other_change)
        self.log.append(f"start_case(hypotheses={hypotheses}, units={units}, investigate={investigate}), "
                        f"policy={policy}, other manager's change={other_change}")
        assert self.case.status()["package_generation"] == self.model.last_seq
        if initialize_now:
            self.perform(Call("initialize"))  # with the main config

    def teardown(self) -> None:
        if self.case is not None:
            self.case.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # one call, checked against the model
    def _invoke(self, call: Call):
        manager = self.managers[call.manager]
        a = copy.deepcopy(call.args)
        if call.op == "initialize":
            return manager.initialize()
        if call.op == "reserve":
            return manager.reserve(a["hypothesis_id"], a["action_id"], a["action"])
        if call.op == "record_result":
            if a["source_refs"] == OMITTED:
                return manager.record_result(a["hypothesis_id"], a["action_id"], a["evidence"])
            return manager.record_result(a["hypothesis_id"], a["action_id"], a["evidence"],
                                         source_refs=a["source_refs"])
        if call.op == "settle":
            return manager.settle(a["hypothesis_id"], a["action_id"], a["semantic_score"], a["reason"])
        if call.op == "fail":
            return manager.fail(a["hypothesis_id"], a["action_id"], a["reason"])
        if call.op == "reject":
            return manager.reject(a["hypothesis_id"], a["reason"])
        raise AssertionError(f"unknown op {call.op}")

    def _history(self) -> str:
        return "\n  ".join(self.log[-40:])

    def perform(self, call: Call) -> None:
        before = logical_dump(self.db)
        expected = self.model.step(call)
        try:
            result = self._invoke(call)
        except LedgerError as err:
            self.log.append(f"{call!r} -> {err.code}")
            assert err.code == expected.error, (
                f"{call!r}: expected {expected.error or 'success'}, got {err.code} ({err.message})"
                f"\nhistory:\n  {self._history()}")
            assert logical_dump(self.db) == before, f"refused {call!r} wrote to the ledger"
            return
        self.log.append(f"{call!r} -> seq {result.seq}{' reused' if result.reused else ''}")
        assert expected.error is None, (
            f"{call!r}: expected {expected.error}, got success (seq {result.seq}, reused {result.reused})"
            f"\nhistory:\n  {self._history()}")
        assert (result.reused, result.seq, result.event_ref) == (
            expected.reused, expected.seq, expected.event_ref), f"{call!r}\nhistory:\n  {self._history()}"
        assert result.revision == 1
        assert result.state == self.model.state(), f"{call!r}\nhistory:\n  {self._history()}"
        assert result.investigable == self.model.investigable()
        assert result.ready_for_evaluation == self.model.ready_for_evaluation()
        if expected.action_key is not None:
            assert result.action == self.model.actions[expected.action_key], f"{call!r}"
        else:
            assert result.action is None
        after = logical_dump(self.db)
        if expected.reused:
            assert after == before, f"identical replay {call!r} wrote to the ledger"
        else:
            self.applied.append(call)
            assert self.case.status()["package_generation"] == expected.seq
            newest = self.case.query("SELECT seq, type FROM events ORDER BY seq DESC LIMIT 1")[0]
            assert (newest["seq"], newest["type"]) == (expected.seq, expected.event_type)

    # draws
    def _target(self, data) -> tuple[str, str]:
        """(hypothesis, action id): mostly a pending action, sometimes any reserved one or a random pair."""
        pending, known = self.model.pending(), list(self.model.actions)
        source = data.draw(st.sampled_from(["pending"] * 6 + ["known"] * 2 + ["random"] * 2), label="target")
        if source == "pending" and pending:
            return data.draw(st.sampled_from(pending), label="pending action")
        if source in ("pending", "known") and known:
            return data.draw(st.sampled_from(known), label="reserved action")
        return data.draw(HYPOTHESES, label="hypothesis"), data.draw(ACTION_IDS, label="action id")

    def _reservation(self, data, fresh: bool = False) -> tuple[str, str]:
        """Mostly (or, with ``fresh``, always) a free hypothesis and an action id it has not used
        yet, else random pool values."""
        free = self.model.investigable()
        if free and (fresh or data.draw(st.sampled_from([True, True, False]), label="fresh reservation")):
            h = data.draw(st.sampled_from(free), label="free hypothesis")
            unused = [a for a in VALID_ACTION_IDS if (h, a) not in self.model.actions]
            if unused:
                return h, data.draw(st.sampled_from(unused), label="unused action id")
            return h, data.draw(ACTION_IDS, label="action id")
        return data.draw(HYPOTHESES, label="hypothesis"), data.draw(ACTION_IDS, label="action id")

    # rules
    @rule(data=st.data(), action=ACTION_NAMES, manager=MANAGERS)
    def reserve(self, data, action, manager):
        h, action_id = self._reservation(data)
        self.perform(Call("reserve", manager, {"hypothesis_id": h, "action_id": action_id, "action": action}))

    @rule(data=st.data(), evidence=EVIDENCES, source_refs=SOURCE_REF_LISTS, manager=MANAGERS)
    def record_result(self, data, evidence, source_refs, manager):
        h, action_id = self._target(data)
        self.perform(Call("record_result", manager, {"hypothesis_id": h, "action_id": action_id,
                                                     "evidence": evidence, "source_refs": source_refs}))

    @rule(data=st.data(), score=SCORES, reason=REASONS, manager=MANAGERS)
    def settle(self, data, score, reason, manager):
        h, action_id = self._target(data)
        self.perform(Call("settle", manager, {"hypothesis_id": h, "action_id": action_id,
                                              "semantic_score": score, "reason": reason}))

    @rule(data=st.data(), reason=REASONS, manager=MANAGERS)
    def fail(self, data, reason, manager):
        h, action_id = self._target(data)
        self.perform(Call("fail", manager, {"hypothesis_id": h, "action_id": action_id, "reason": reason}))

    @rule(data=st.data(), by_config=st.booleans(), calls=st.integers(1, 4))
    def advance_an_investigation_with_valid_calls(self, data, by_config, calls):
        """The happy path (1–4 valid calls), so that accounts really get spent, refunded,
        exhausted and abandoned within a short run."""
        manager = (self.model.frozen_by or "main") if by_config else "frozen"
        for _ in range(calls):
            pending = self.model.pending()
            free = self.model.investigable()
            if self.model.case_state == BLOCKED or not (pending or free):
                return
            if pending and (not free or data.draw(st.booleans(), label="advance a pending action")):
                h, action_id = data.draw(st.sampled_from(pending), label="pending action")
                if self.model.actions[(h, action_id)]["status"] == "reserved":
                    evidence = data.draw(st.sampled_from(EVIDENCE), label="evidence")
                    refs = data.draw(st.sampled_from(VALID_SOURCE_REFS), label="source refs")
                    call = Call("record_result", manager, {"hypothesis_id": h, "action_id": action_id,
                                                           "evidence": evidence, "source_refs": refs})
                elif data.draw(st.sampled_from([True] * 5 + [False]), label="settle rather than fail"):
                    call = Call("settle", manager, {
                        "hypothesis_id": h, "action_id": action_id,
                        "semantic_score": data.draw(VALID_SCORES, label="score"),
                        "reason": data.draw(st.sampled_from(VALID_REASONS), label="reason")})
                else:
                    call = Call("fail", manager, {"hypothesis_id": h, "action_id": action_id,
                                                  "reason": data.draw(st.sampled_from(VALID_REASONS))})
            else:
                h, action_id = self._reservation(data, fresh=True)
                action = data.draw(st.sampled_from(VALID_ACTION_NAMES), label="action")
                call = Call("reserve", manager, {"hypothesis_id": h, "action_id": action_id, "action": action})
            self.perform(call)

    @rule(h=HYPOTHESES, reason=REASONS, manager=MANAGERS)
    def reject(self, h, reason, manager):
        self.perform(Call("reject", manager, {"hypothesis_id": h, "reason": reason}))

    @precondition(lambda self: self.model is not None and not self.model.initialized)
    @rule(manager=st.sampled_from(["main"] * 3 + ["frozen", "other"]))
    def initialize_the_budget(self, manager):
        self.perform(Call("initialize", manager))

    @precondition(lambda self: bool(self.applied))
    @rule(data=st.data())
    def replay_an_applied_operation_exactly(self, data):
        call = data.draw(st.sampled_from(self.applied), label="replayed call")
        # any manager: replays (initialize included) answer before the policy is compared
        self.perform(Call(call.op, data.draw(MANAGERS, label="replay manager"), copy.deepcopy(call.args)))

    @precondition(lambda self: any(c.op != "initialize" for c in self.applied))
    @rule(data=st.data())
    def replay_an_applied_operation_with_one_input_changed(self, data):
        call = data.draw(st.sampled_from([c for c in self.applied if c.op != "initialize"]), label="changed call")
        args = copy.deepcopy(call.args)
        if call.op == "reserve":
            args["action"] = data.draw(ACTION_NAMES, label="new action")
        elif call.op == "record_result":
            if data.draw(st.booleans(), label="change evidence"):
                args["evidence"] = data.draw(EVIDENCES, label="new evidence")
            else:
                args["source_refs"] = data.draw(SOURCE_REF_LISTS, label="new refs")
        elif call.op == "settle" and data.draw(st.booleans(), label="change score"):
            args["semantic_score"] = data.draw(SCORES, label="new score")
        else:
            args["reason"] = data.draw(REASONS, label="new reason")
        self.perform(Call(call.op, data.draw(MANAGERS, label="manager"), args))

    @rule(block=st.sampled_from([True, False, False]))
    def block_or_unblock_the_case(self, block):
        if self.model.case_state == INVESTIGATING and not block:
            return
        to = BLOCKED if self.model.case_state == INVESTIGATING else INVESTIGATING
        expected = self.model.transition(to)
        result = self.case.transition(to)
        self.log.append(f"transition({to!r}) -> seq {result.seq}")
        assert (result.case_state, result.seq, result.reused, result.event_ref) == (
            to, expected.seq, False, expected.event_ref)

    # invariants
    @invariant()
    def balances_view_equals_the_model(self):
        if self.case is None:
            return
        rows = [{k: v for k, v in r.items() if k != "statement"} for r in self.case.balances()]  # text, not state
        assert rows == self.model.balance_rows(), f"history:\n  {self._history()}"

    @invariant()
    def balances_recomputed_from_the_helper_rows_equals_balances(self):
        if self.case is None:
            return
        for one, other in (("balances", "balances_recomputed"), ("balances_recomputed", "balances")):
            assert self.case.query(f"SELECT * FROM {one} EXCEPT SELECT * FROM {other}") == [], \
                f"{one} holds rows {other} lacks; history:\n  {self._history()}"

    @invariant()
    def actions_view_equals_the_model(self):
        if self.case is None:
            return
        rows = self.case.actions()
        # the times and the closing reason are what was recorded, not state the model predicts
        assert all(r["reserved_at"] and (r["closed_at"] is None) == (r["status"] in ("reserved", "awaiting_assessment"))
                   for r in rows)
        when = ("reserved_at", "closed_at", "closing_reason")
        assert [{k: v for k, v in r.items() if k not in when} for r in rows] == self.model.action_rows(), \
            f"history:\n  {self._history()}"

    @invariant()
    def every_account_balances_and_every_settled_reward_is_below_its_cost(self):
        if self.case is None:
            return
        actions = self.case.actions()
        for row in self.case.balances():
            mine = [a for a in actions if a["hypothesis_id"] == row["hypothesis_id"]]
            assert row["remaining_units"] == (row["initial_units"] + row["granted_units"]
                                              - row["spent_units"] + row["rewarded_units"])
            assert row["remaining_units"] >= 0
            assert row["granted_units"] == 0
            assert row["spent_units"] == sum(a["cost_units"] for a in mine)
            assert row["rewarded_units"] == sum(a["reward_units"] or 0 for a in mine)
            assert row["settled_actions"] == sum(a["status"] == "settled" for a in mine)
            assert row["failed_actions"] == sum(a["status"] == "failed" for a in mine)
            assert (row["pending_action_id"] is None) == all(
                a["status"] in ("settled", "failed") for a in mine)
        for a in actions:
            if a["status"] == "settled":
                assert 0 <= a["reward_units"] < a["cost_units"], a
                assert a["information_score"] == min(a["novelty_score"], a["semantic_score"]), a

    @invariant()
    def package_generation_and_snapshot_follow_the_model(self):
        if self.case is None:
            return
        assert self.case.status()["package_generation"] == self.model.last_seq
        if self.model.initialized:
            snap = self.managers["frozen"].snapshot()
            assert (snap.seq, snap.state, snap.investigable, snap.ready_for_evaluation) == (
                self.model.last_budget_seq, self.model.state(), self.model.investigable(),
                self.model.ready_for_evaluation())

    @invariant()
    def replaying_the_latest_applied_operation_writes_nothing(self):
        if self.case is None or not self.applied:
            return
        last = self.applied[-1]
        expected_seq = self.model.operations[self.model._shape(last)[0]][1]
        before = logical_dump(self.db)
        result = self._invoke(last)
        assert (result.reused, result.seq) == (True, expected_seq)
        assert result.state == self.model.state()
        assert logical_dump(self.db) == before


FAST = settings(max_examples=40, stateful_step_count=30, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                report_multiple_bugs=False)
LONG = settings(max_examples=40 * TORTURE_SCALE, stateful_step_count=80, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                report_multiple_bugs=False)


@pytest.mark.slow
def test_random_budget_operation_sequences_behave_exactly_as_the_spec_model_predicts():
    run_state_machine_as_test(BudgetLedgerMachine, settings=FAST)


@pytest.mark.torture
def test_long_random_budget_operation_sequences_behave_exactly_as_the_spec_model_predicts(request):
    if not torture_run(request.config):
        pytest.skip("long run: select it with -m torture")
    run_state_machine_as_test(BudgetLedgerMachine, settings=LONG)


# --- the reference model itself against the worked examples of docs/concepts.md ------------------------

def test_the_reference_model_reproduces_the_spec_reward_examples():
    model = ReferenceModel(1, 100, {}, INVESTIGATING)  # default policy: cost 10, 8000 bps
    assert [model.reward(10, 100), model.reward(10, 50), model.reward(1, 100), model.reward(10, 0)] == [8, 4, 0, 0]


def test_the_reference_model_treats_key_order_and_number_spelling_as_the_same_evidence():
    assert canonical_key({"a": 1, "b": 2.0}) == canonical_key({"b": 2, "a": 1})
    assert canonical_key({"a": 1.0}) == canonical_key({"a": 1})
    assert canonical_key(-0.0) == canonical_key(0)
    assert canonical_key(False) != canonical_key(0)
    assert canonical_key("1") != canonical_key(1)
    assert [canonical_key(v) in EMPTY_KEYS for v in (None, {}, [], "", " ", [[]], 0)] == [
        True, True, True, True, False, False, False]


def test_the_reference_model_refuses_ids_with_a_trailing_newline():
    model = ReferenceModel(1, 40, POLICIES[0], INVESTIGATING)
    model.step(Call("initialize"))
    outcomes = [model.step(Call("reserve", args={"hypothesis_id": h, "action_id": a, "action": n})).error
                for h, a, n in [("H1\n", "a1", "source.read_context"),
                                ("H1", "a1\n", "source.read_context"),
                                ("H1", "a1", "source.read_context\n")]]
    assert outcomes == ["INVALID_ID"] * 3


# --- a disagreement the machine found, pinned as a fixed call sequence -------------------
# Python's ``$`` also matches before a final newline, so ``re.match(r"^H[1-9][0-9]*$", "H1\n")``
# succeeds: "H1\n", "a1\n" and "source.read_context\n" used to be accepted (the last one
# priced at default_action_cost, not its action_costs entry). docs/concepts.md: anything else is INVALID_ID.

@pytest.mark.parametrize("hypothesis_id, action_id, action", [
    ("H1\n", "a1", "source.read_context"),
    ("H1", "a1\n", "source.read_context"),
    ("H1", "a1", "source.read_context\n"),
], ids=["hypothesis-id", "action-id", "action-name"])
def test_reserve_refuses_an_id_with_a_trailing_newline_as_invalid_id(tmp_path, hypothesis_id, action_id, action):
    case = start_case(make_package(tmp_path / "case"), hypotheses=1, units=40)
    try:
        budget = case.budget(BudgetConfig.from_mapping(POLICIES[0]))
        budget.initialize()
        before = logical_dump(tmp_path / "case" / "ledger.sqlite")
        with pytest.raises(LedgerError) as caught:
            budget.reserve(hypothesis_id, action_id, action)
        assert caught.value.code == "INVALID_ID"
        assert logical_dump(tmp_path / "case" / "ledger.sqlite") == before
    finally:
        case.close()
