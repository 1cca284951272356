"""Real agent-run journals (tests/data/trajectories/, README "Real input"), replayed
and checked against an independent model of the rules of docs/concepts.md.

Every journal is applied with ``keep_going`` through the library; the outcome of
every line and the final balance are compared with what a small pure-Python
model in this file predicts from docs/concepts.md alone (it imports nothing from
``ledger.rules`` and reuses no library computation). Each replayed case is then
exported and verified. The aggregate figures of the README table are checked
over all 100 journals, and one journal goes through the real ``ledger apply``
command twice (the second run must be a pure replay).

The cases are created with the default analysis config, i.e. with
``synchronous=FULL`` (fsync on every commit): all 100 journals apply in well
under a minute, so there is no need to relax durability for speed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import TRAJECTORIES, logical_dump, run_cli
from ledger.services.case import Case
from ledger import export_case, verify_case
from ledger.package_tools.journal import apply_journal, open_for_journal

JOURNALS = sorted(TRAJECTORIES.glob("*.jsonl"))
JOURNAL_IDS = [p.stem for p in JOURNALS]
#: Every journal; the default run replays every twentieth one (5), ``-m slow`` all 100.
SAMPLED_JOURNALS = [pytest.param(p, id=p.stem, marks=() if i % 20 == 0 else pytest.mark.slow)
                    for i, p in enumerate(JOURNALS)]

# --- the default policy (docs/concepts.md), no config given -----------------------------------
DEFAULT_ACTION_COST = 10
ACTION_COSTS: dict[str, int] = {}          # empty in code: test.automated costs 10 as well
MAX_REWARD_BPS = 8000
NEW_EVIDENCE_SCORE = 100
LOW_INFORMATION_THRESHOLD = 20
MAX_LOW_INFORMATION_STEPS = 3
FLOOR = min([DEFAULT_ACTION_COST, *ACTION_COSTS.values()])
TERMINAL = {"budget_exhausted", "abandoned_low_information_gain", "rejected"}

#: the README "Real input" table
README_FIGURES = {
    "journals": 100,
    "lines": 11_910,
    "agent steps": 3_870,
    "steps settled": 3_325,
    "runs abandoned": 22,
    "steps skipped": 545,
    "units spent": 33_250,
    "units refunded": 10_432,
    "runs exhausted": 0,
}

#: the account fields compared on every accepted line
STATE_FIELDS = ("remaining_units", "spent_units", "rewarded_units", "status",
                "low_information_streak", "settled_actions")


def journal_lines(path: Path) -> list[str]:
    """The journal split the way ``ledger apply`` splits it (line numbers count from 1)."""
    return path.read_text(encoding="utf-8").split("\n")


# --- the independent model ------------------------------------------------------------
def canonical(value: Any) -> str:
    # The evidence objects hold only strings and integers, so sorted-key compact JSON
    # is exactly RFC 8785 here.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Account:
    initial: int
    spent: int = 0
    rewarded: int = 0
    status: str = "new"
    streak: int = 0
    settled: int = 0
    failed: int = 0
    pending: str | None = None

    @property
    def remaining(self) -> int:
        return self.initial - self.spent + self.rewarded

    def state(self) -> dict[str, Any]:
        return {"remaining_units": self.remaining, "spent_units": self.spent, "rewarded_units": self.rewarded,
                "status": self.status, "low_information_streak": self.streak, "settled_actions": self.settled}

    def after_step(self) -> None:
        """docs/concepts.md, right after initialization and after every settle or fail."""
        if self.status in TERMINAL:
            return
        if self.remaining < FLOOR:
            self.status = "budget_exhausted"
        elif self.streak >= MAX_LOW_INFORMATION_STEPS:
            self.status = "abandoned_low_information_gain"


@dataclass
class Expected:
    """The model's prediction for one line."""

    line: int
    op: str
    ok: bool
    code: str | None = None
    state: dict[str, Any] | None = None        # H1's account after the line (budget ops)
    case_state: str | None = None              # lifecycle ops
    action: dict[str, Any] | None = None       # novelty / information / reward of the action


@dataclass
class Model:
    """docs/concepts.md for the operations these journals use, under the default policy."""

    case_state: str = "CREATED"
    allocation: int | None = None
    hypotheses: list[str] = field(default_factory=list)
    accounts: dict[str, Account] | None = None
    actions: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)

    def run(self, lines: list[str]) -> list[Expected]:
        out = []
        for number, text in enumerate(lines, start=1):
            if text.strip():
                out.append(self.step(number, json.loads(text)))
        return out

    def step(self, number: int, line: dict[str, Any]) -> Expected:
        op = line["op"]
        if op == "open_revision":
            assert self.case_state == "CREATED", "the model covers one revision only"
            self.hypotheses = [f"H{i}" for i in range(1, len(line["hypotheses"]) + 1)]
            self.allocation = line["units_per_hypothesis"]
            self.case_state = "GENERATING_HYPOTHESES"
            return Expected(number, op, True, case_state=self.case_state)
        if op == "transition":
            self.case_state = line["to"]
            return Expected(number, op, True, case_state=self.case_state)
        if op == "initialize":
            self.accounts = {h: Account(self.allocation) for h in self.hypotheses}
            for account in self.accounts.values():
                account.after_step()
            return self._ok(number, op, "H1")
        h, action_id = line["hypothesis"], line["action_id"]
        if self.accounts is None:
            return Expected(number, op, False, "NOT_INITIALIZED")
        if h not in self.accounts:
            return Expected(number, op, False, "UNKNOWN_HYPOTHESIS")
        account = self.accounts[h]
        known = self.actions.get((h, action_id))
        if op == "reserve":
            assert known is None, "the model does not replay reservations"
            if account.status in TERMINAL:
                return Expected(number, op, False, "ACCOUNT_TERMINAL")
            if account.pending is not None:
                return Expected(number, op, False, "ACTION_PENDING")
            cost = ACTION_COSTS.get(line["action"], DEFAULT_ACTION_COST)
            if cost > account.remaining:
                return Expected(number, op, False, "INSUFFICIENT_BUDGET")
            self.actions[(h, action_id)] = {"cost": cost, "status": "reserved"}
            account.spent += cost
            account.pending = action_id
            if account.status == "new":
                account.status = "investigating"
            return self._ok(number, op, h)
        if known is None:
            return Expected(number, op, False, "UNKNOWN_ACTION")
        if known["status"] in ("settled", "failed"):
            return Expected(number, op, False, "ACTION_CLOSED")
        if op == "record_result":
            assert known["status"] == "reserved", "the model does not replay results"
            evidence = line["evidence"]
            key = canonical(evidence)
            empty = evidence in (None, {}, [], "")
            novelty = 0 if empty or key in self.seen else NEW_EVIDENCE_SCORE
            self.seen.add(key)
            known.update(status="awaiting_assessment", novelty=novelty)
            return self._ok(number, op, h, action={"status": "awaiting_assessment", "novelty_score": novelty})
        if op == "settle":
            if known["status"] != "awaiting_assessment":
                return Expected(number, op, False, "RESULT_MISSING")
            cost = known["cost"]
            information = min(known["novelty"], line["semantic_score"])
            reward = min(cost * MAX_REWARD_BPS * information // 1_000_000, cost - 1)
            known.update(status="settled")
            account.rewarded += reward
            account.settled += 1
            account.pending = None
            account.streak = account.streak + 1 if information <= LOW_INFORMATION_THRESHOLD else 0
            account.after_step()
            return self._ok(number, op, h, action={"status": "settled", "novelty_score": known["novelty"],
                                                   "information_score": information, "reward_units": reward})
        raise AssertionError(f"line {number}: the model does not cover op {op!r}")

    def _ok(self, number: int, op: str, h: str, action: dict[str, Any] | None = None) -> Expected:
        return Expected(number, op, True, state=self.accounts[h].state(), action=action)

    def balance_row(self, h: str) -> dict[str, Any]:
        a = self.accounts[h]
        return {"revision": 1, "hypothesis_id": h, "initial_units": a.initial, "granted_units": 0,
                "spent_units": a.spent, "rewarded_units": a.rewarded, "remaining_units": a.remaining,
                "status": a.status, "pending_action_id": a.pending, "low_information_streak": a.streak,
                "settled_actions": a.settled, "failed_actions": a.failed}


def model_of(path: Path) -> tuple[list[Expected], Model]:
    model = Model()
    return model.run(journal_lines(path)), model


# --- replaying through the library, once per journal per module ---------------------------
@dataclass
class Replay:
    path: Path
    lines: list[dict[str, Any]]         # LineResult.to_dict() of every line
    balances: list[dict[str, Any]]
    generation: int


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """``replay(journal_path)`` applies the journal once (cached) and returns a :class:`Replay`."""
    root = tmp_path_factory.mktemp("trajectories")
    cache: dict[Path, Replay] = {}

    def get(path: Path) -> Replay:
        if path not in cache:
            target = root / path.stem
            case = open_for_journal(str(target), create_case_id=path.stem.replace("__", "-"))
            try:
                lines = [r.to_dict() for r in apply_journal(case, journal_lines(path), keep_going=True)]
                balances = case.balances()
                generation = case.status()["package_generation"]
            finally:
                case.close()
            cache[path] = Replay(target, lines, balances, generation)
        return cache[path]

    return get


def figures(runs: list[tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]]) -> dict[str, int]:
    """The README figures from (per-line outcomes, final balance rows, ops) of every journal."""
    out = dict.fromkeys(README_FIGURES, 0)
    out["journals"] = len(runs)
    for outcomes, balances, ops in runs:
        out["lines"] += len(outcomes)
        for outcome, op in zip(outcomes, ops):
            out["agent steps"] += op == "reserve"
            out["steps settled"] += op == "settle" and outcome["ok"]
            out["steps skipped"] += op == "reserve" and outcome.get("code") == "ACCOUNT_TERMINAL"
        for row in balances:
            out["runs abandoned"] += row["status"] == "abandoned_low_information_gain"
            out["runs exhausted"] += row["status"] == "budget_exhausted"
            out["units spent"] += row["spent_units"]
            out["units refunded"] += row["rewarded_units"]
    return out


# --- the model itself ----------------------------------------------------------------------
def test_the_model_reproduces_the_spec_worked_examples_and_abandons_after_three_repeats():
    evidence = {"observation_sha256": "a" * 64, "observation_bytes": 1}
    lines = [json.dumps(x) for x in [
        {"op": "open_revision", "hypotheses": [{"statement": "s"}], "units_per_hypothesis": 100},
        {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"},
        {"op": "initialize"},
    ]]
    for i in range(1, 6):
        lines += [json.dumps(x) for x in [
            {"op": "reserve", "hypothesis": "H1", "action_id": f"s{i}", "action": "test.automated"},
            {"op": "record_result", "hypothesis": "H1", "action_id": f"s{i}", "evidence": evidence},
            {"op": "settle", "hypothesis": "H1", "action_id": f"s{i}", "semantic_score": 50, "reason": "r"},
        ]]
    expected = Model().run(lines)
    assert [e.action["reward_units"] for e in expected if e.op == "settle" and e.ok] == [4, 0, 0, 0]
    assert [(e.ok, e.code) for e in expected[-3:]] == [
        (False, "ACCOUNT_TERMINAL"), (False, "UNKNOWN_ACTION"), (False, "UNKNOWN_ACTION")]
    assert expected[-4].state == {"remaining_units": 64, "spent_units": 40, "rewarded_units": 4,
                                  "status": "abandoned_low_information_gain", "low_information_streak": 3,
                                  "settled_actions": 4}
    # docs/concepts.md: cost 10, both scores 100 -> reward 8
    assert min(10 * MAX_REWARD_BPS * min(100, 100) // 1_000_000, 9) == 8


# --- every journal, line by line ---------------------------------------------------------------
def test_there_are_one_hundred_real_journals():
    assert len(JOURNALS) == 100


@pytest.mark.parametrize("journal", SAMPLED_JOURNALS)
def test_every_line_of_a_real_journal_has_the_outcome_the_spec_rules_predict(journal, replay):
    expected, _ = model_of(journal)
    actual = replay(journal).lines
    assert [e.line for e in expected] == [a["line"] for a in actual]
    mismatches = []
    next_seq = 2  # seq 1 is the case's creation
    for e, a in zip(expected, actual):
        where = f"{journal.stem} line {e.line} ({e.op})"
        got_code = None if a["ok"] else a["error"]["code"]
        if (a["ok"], got_code) != (e.ok, e.code):
            mismatches.append(f"{where}: expected ok={e.ok} code={e.code}, got ok={a['ok']} code={got_code}"
                              + ("" if a["ok"] else f" ({a['error']['message']})"))
            continue
        if not e.ok:
            continue
        if (a["seq"], a["reused"]) != (next_seq, False):
            mismatches.append(f"{where}: expected seq {next_seq} not reused, got seq {a['seq']} reused {a['reused']}")
        next_seq = a["seq"] + 1
        result = a["result"]
        if e.case_state is not None and result.get("case_state") != e.case_state:
            mismatches.append(f"{where}: expected case_state {e.case_state}, got {result.get('case_state')}")
        if e.state is not None:
            got = {k: result["state"]["H1"].get(k) for k in STATE_FIELDS}
            if got != e.state:
                mismatches.append(f"{where}: expected H1 {e.state}, got {got}")
        if e.action is not None:
            got = {k: result["action"].get(k) for k in e.action}
            if got != e.action:
                mismatches.append(f"{where}: expected action {e.action}, got {got}")
    assert mismatches == []


@pytest.mark.parametrize("journal", SAMPLED_JOURNALS)
def test_the_final_balance_of_a_real_journal_equals_the_one_the_spec_rules_predict(journal, replay):
    expected, model = model_of(journal)
    done = replay(journal)
    assert len(done.balances) == 1
    row = dict(done.balances[0])
    terminal_reason = row.pop("terminal_reason")
    assert row.pop("statement") == f"agent run {journal.stem}"  # the hypothesis the journal opened
    assert row == model.balance_row("H1")
    assert (terminal_reason is not None) == (row["status"] in TERMINAL)
    # rejected lines write nothing: one event per accepted line, after the creation event
    assert done.generation == 1 + sum(e.ok for e in expected)


@pytest.mark.slow
@pytest.mark.parametrize("journal", JOURNALS, ids=JOURNAL_IDS)
def test_a_replayed_real_journal_exports_and_then_verifies_with_its_manifest(journal, replay):
    done = replay(journal)
    with Case.open(done.path) as case:
        exported = export_case(case)
    assert exported.manifest["package_generation"] == done.generation
    report = verify_case(done.path)
    assert report.manifest_checked is True
    assert report.events == done.generation
    assert report.head_seq == done.generation
    assert report.exported_files_checked >= done.generation


# --- the README table ------------------------------------------------------------------------------
def test_the_spec_model_over_all_journals_gives_the_readme_real_input_figures():
    runs = []
    for journal in JOURNALS:
        expected, model = model_of(journal)
        runs.append(([{"ok": e.ok, "code": e.code} for e in expected], [model.balance_row("H1")],
                     [e.op for e in expected]))
    assert figures(runs) == README_FIGURES


@pytest.mark.slow
def test_the_library_replay_of_all_journals_gives_the_readme_real_input_figures(replay):
    runs = []
    for journal in JOURNALS:
        done = replay(journal)
        ops = [json.loads(t)["op"] for t in journal_lines(journal) if t.strip()]
        outcomes = [{"ok": a["ok"], "code": None if a["ok"] else a["error"]["code"]} for a in done.lines]
        runs.append((outcomes, done.balances, ops))
    assert figures(runs) == README_FIGURES


# --- the real command line ------------------------------------------------------------------------------
def _smallest_journal_with_a_failed_line() -> Path:
    candidates = [p for p in JOURNALS if any(not e.ok for e in model_of(p)[0])]
    return min(candidates, key=lambda p: (p.stat().st_size, p.name))


def _check_shape(out: list[dict[str, Any]]) -> None:
    for item in out:
        assert isinstance(item["line"], int) and isinstance(item["ok"], bool)
        if item["ok"]:
            assert set(item) == {"line", "ok", "seq", "reused", "result"}
            assert isinstance(item["seq"], int) and isinstance(item["reused"], bool)
            assert isinstance(item["result"], dict)
        else:
            assert set(item) == {"line", "ok", "error"}
            assert {"code", "message"} <= set(item["error"]) <= {"code", "message", "details"}
            assert isinstance(item["error"]["code"], str) and isinstance(item["error"]["message"], str)


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_the_cli_applies_a_real_journal_with_one_documented_line_each_and_a_rerun_only_replays(tmp_path):
    journal = _smallest_journal_with_a_failed_line()
    expected, _ = model_of(journal)
    case_dir = tmp_path / "case"
    numbers = [n for n, t in enumerate(journal_lines(journal), start=1) if t.strip()]

    first = run_cli("apply", str(case_dir), str(journal), "--create", "traj-1", "--keep-going")
    out = [json.loads(line) for line in first.stdout.decode("utf-8").splitlines()]
    _check_shape(out)
    assert [item["line"] for item in out] == numbers
    assert [(i["ok"], None if i["ok"] else i["error"]["code"]) for i in out] == [(e.ok, e.code) for e in expected]
    assert any(not i["ok"] for i in out)
    assert first.returncode == (1 if any(not i["ok"] for i in out) else 0), first.stderr
    assert all(i["reused"] is False for i in out if i["ok"])
    before = logical_dump(case_dir / "ledger.sqlite")

    second = run_cli("apply", str(case_dir), str(journal), "--create", "traj-1", "--keep-going")
    again = [json.loads(line) for line in second.stdout.decode("utf-8").splitlines()]
    _check_shape(again)
    assert second.returncode == 1, second.stderr
    assert [(i["line"], i["ok"]) for i in again] == [(i["line"], i["ok"]) for i in out]
    assert [i["error"]["code"] for i in again if not i["ok"]] == [i["error"]["code"] for i in out if not i["ok"]]
    assert all(i["reused"] is True for i in again if i["ok"])
    assert [i["seq"] for i in again if i["ok"]] == [i["seq"] for i in out if i["ok"]]
    assert logical_dump(case_dir / "ledger.sqlite") == before
