"""The reads an agent makes before each action (docs/scopes.md, docs/concepts.md): ``advice``,
the soft gate's floor kept in ``account_floors`` (one indexed read whatever the history), and
``snapshot`` checking only what this process has not checked yet. Their cost is measured by the
benchmark (``gate_latency_ratio_100k_vs_1k``, ``snapshot_latency_ratio_100k_vs_1k``), not here."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
import sqlite3
from pathlib import Path

import pytest

from ledger import BudgetConfig, Case, LedgerError, export_case, verify_case
from ledger.ground.errors import INTEGRITY_ERROR, UNKNOWN_HYPOTHESIS

from conftest import downgrade_ledger, start_case

T0 = "2026-01-01T00:00:00Z"


def _spend(budget, hypothesis: str, actions: int, prefix: str, score: int = 0, money: int | None = None) -> None:
    for n in range(actions):
        budget.reserve(hypothesis, f"{prefix}{n}", "source.find_text", at=T0)
        budget.record_result(hypothesis, f"{prefix}{n}", {"n": n, "p": prefix}, cost_usd_millicents=money, at=T0)
        budget.settle(hypothesis, f"{prefix}{n}", score, "assessed", at=T0)


@pytest.fixture
def busy(package: Path) -> Case:
    """Three accounts of 100 units spent down, granted to, and spent again."""
    case = start_case(package, hypotheses=3)
    budget = case.budget(BudgetConfig.example())
    budget.initialize(at=T0)
    _spend(budget, "H1", 3, "a", score=90, money=250)
    _spend(budget, "H2", 5, "b", score=30, money=40)
    budget.grant("H2", 40, "controller", "more room", "g1", at=T0)
    _spend(budget, "H2", 2, "c", score=50)
    _spend(budget, "H3", 1, "d", score=30)
    budget.grant("H3", 10, "controller", "a little more", "g2", at=T0)
    yield case
    case.close()


def _floors_by_scanning(case: Case) -> dict[str, int]:
    """Each account's lowest pct_remaining after every budget event since its last grant, from the bodies."""
    floors: dict[str, int] = {}
    for event in case.events(with_body=True):
        body = json.loads(event["body"])
        if not body["type"].startswith("budget."):
            continue
        granted = body["grant"]["hypothesis_id"] if body["type"] == "budget.granted" else None
        for a in body["accounts"]:
            pct = a["remaining_units"] * 100 // (a["initial_units"] + a["granted_units"])
            h = a["hypothesis_id"]
            floors[h] = pct if h not in floors or h == granted else min(floors[h], pct)
    return floors


def test_the_price_signal_reads_each_accounts_lowest_pct_since_its_last_grant(busy):
    budget = busy.budget()
    expected = _floors_by_scanning(busy)
    assert expected == {"H1": 84, "H2": 60, "H3": 92}
    for h, floor in expected.items():
        assert budget.price_signal(h, "source.read_context")["scarcity_bps"] == 10_000 + 30_000 * (100 - floor) // 100


def test_account_floors_hold_a_row_only_when_a_floor_moves_and_verify_checks_them(busy):
    rows = busy.query("SELECT hypothesis_id, lowest_pct FROM account_floors ORDER BY seq, hypothesis_id")
    assert [r["lowest_pct"] for r in rows if r["hypothesis_id"] == "H3"] == [100, 90, 92]
    assert len(rows) < len(busy.events())
    busy.close()
    assert verify_case(busy.path).events > 0


def test_a_changed_account_floor_is_an_integrity_error_for_verify(busy):
    busy.close()
    conn = sqlite3.connect(busy.path / "ledger.sqlite")
    conn.execute("DROP TRIGGER account_floors_no_update")
    conn.execute("UPDATE account_floors SET lowest_pct = 99 WHERE hypothesis_id = 'H2'")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as refused:
        verify_case(busy.path)
    assert refused.value.code == INTEGRITY_ERROR and "account_floors" in refused.value.message


def test_opening_an_older_ledger_fills_account_floors_and_money_totals_as_the_writer_would_have(busy):
    floors = busy.query("SELECT * FROM account_floors ORDER BY revision, hypothesis_id, seq")
    money = busy.query("SELECT * FROM money_totals ORDER BY seq")
    busy.close()
    downgrade_ledger(busy.path, 8)  # before account_floors and money_totals existed
    assert verify_case(busy.path).events > 0  # checked against its own schema version
    with Case.open(busy.path) as opened:
        assert opened.query("SELECT * FROM account_floors ORDER BY revision, hypothesis_id, seq") == floors
        assert opened.query("SELECT * FROM money_totals ORDER BY seq") == money and len(money) == 8
        assert opened.budget().price_signal("H2", "source.read_context")["scarcity_bps"] == 22_000
    assert verify_case(busy.path).events > 0


# --- advice ----------------------------------------------------------------------------------------
def test_advice_answers_remaining_units_actions_and_time_by_the_tightest_scope(busy):
    scopes = busy.scopes()
    scopes.establish("revision:1", {"actions": 30, "units": 500}, "controller", at=T0)
    scopes.establish("hypothesis:1/H1", {"actions": 4, "duration_ms": 60_000}, "controller", at=T0)
    origin = datetime.fromisoformat(busy.events()[-1]["created_at"].replace("Z", "+00:00"))
    later = (origin + timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    advice = busy.budget().advice("H1", at=later)
    assert advice.values == {
        "hypothesis_id": "H1", "status": "investigating", "pending_action_id": None, "investigable": True,
        "remaining_units": 91, "budget": 100, "pct_remaining": 91, "tier": "full", "scarcity_bps": 14_800,
        "remaining_actions": 1, "remaining_duration_ms": 50_000, "remaining_cost_usd_millicents": None,
        "limited_by": {"units": "account", "actions": "hypothesis:1/H1", "duration_ms": "hypothesis:1/H1"},
        "ready_for_evaluation": False}


def test_advice_names_a_scope_whose_units_are_tighter_than_the_account(busy):
    busy.scopes().establish("case", {"units": 90}, "controller", at=T0)
    advice = busy.budget().advice("H2")
    used = sum(a["spent_units"] - a["rewarded_units"] for a in busy.balances())
    assert advice["remaining_units"] == 90 - used and advice["limited_by"]["units"] == "case"


def test_advice_on_a_pending_or_terminal_account_is_not_investigable(busy):
    budget = busy.budget()
    budget.reserve("H1", "p1", "source.read_context", at=T0)
    pending = budget.advice("H1")
    assert (pending["investigable"], pending["pending_action_id"]) == (False, "p1")
    budget.reject("H3", "ruled out", at=T0)
    rejected = budget.advice("H3")
    assert (rejected["investigable"], rejected["status"], rejected["tier"]) == (False, "rejected", "deferred")


def test_the_reads_describe_the_accounts_not_the_case_state_which_reserve_still_checks(busy):
    """docs/investigator.md: in EVALUATING (as in BLOCKED or CLOSED) check and advice answer for the
    account as it stands, and the reservation they allow is refused with CASE_STATE."""
    budget = busy.budget()
    busy.transition("EVALUATING", at=T0)
    assert budget.check("H1", "source.read_context")["allowed"] is True
    assert budget.advice("H1")["investigable"] is True
    generation = busy.status()["package_generation"]
    with pytest.raises(LedgerError) as refused:
        budget.reserve("H1", "late", "source.read_context", at=T0)
    assert refused.value.code == "CASE_STATE" and busy.status()["package_generation"] == generation


def test_advice_of_an_unknown_hypothesis_is_refused(busy):
    with pytest.raises(LedgerError) as refused:
        busy.budget().advice("H9")
    assert refused.value.code == UNKNOWN_HYPOTHESIS


# --- snapshot ----------------------------------------------------------------------------------------
def test_snapshot_includes_events_another_connection_appended_since_its_last_check(busy):
    budget = busy.budget()
    first = budget.snapshot()
    with Case.open(busy.path) as other:
        other.budget().reserve("H1", "x1", "source.read_context", at=T0)
    second = budget.snapshot()
    assert second.seq > first.seq and second.state["H1"]["pending_action_id"] == "x1"


def test_a_snapshot_inside_a_batch_that_rolls_back_leaves_later_snapshots_of_the_committed_state(busy):
    """What a batch wrote is not committed, maybe never: a snapshot there checks it, and remembers none of it."""
    budget = busy.budget()
    before = budget.snapshot()
    with pytest.raises(RuntimeError):
        with busy.batch():
            budget.reserve("H1", "rolled-back", "source.read_context", at=T0)
            inside = budget.snapshot()
            assert inside.seq == before.seq + 1 and inside.state["H1"]["pending_action_id"] == "rolled-back"
            raise RuntimeError("the batch is abandoned")
    after = budget.snapshot()
    assert (after.seq, after.state) == (before.seq, before.state)
    budget.reserve("H1", "next", "source.read_context", at=T0)  # the rolled-back seq, taken by another event
    assert budget.snapshot().state["H1"]["pending_action_id"] == "next"
    with Case.open(busy.path) as other:
        assert other.budget().snapshot().state == budget.snapshot().state


def test_a_snapshot_in_a_batch_checks_only_the_budget_events_appended_since_the_last_snapshot(busy, monkeypatch):
    """Inside a batch (apply's group commit) every snapshot checked the revision's budget events from the
    last one checked outside any batch: a journal of snapshots took time growing with its history. What
    a batch's snapshot checked is taken by the next while its newest event is still stored as checked."""
    from ledger.services import session as session_module

    checked = []
    real = session_module._check_balanced
    monkeypatch.setattr(session_module, "_check_balanced", lambda seq, body: (checked.append(seq), real(seq, body)))
    budget = busy.budget()
    with busy.batch():
        for n in range(3):
            budget.reserve("H1", f"b{n}", "source.read_context", at=T0)
            budget.fail("H1", f"b{n}", "not run", at=T0)
        budget.snapshot()
        checked.clear()
        budget.reserve("H2", "b9", "source.read_context", at=T0)
        budget.snapshot()
        assert len(checked) == 1  # the reservation alone
    checked.clear()
    with busy.batch():  # the next batch: from the first one's snapshot on, which it committed
        budget.snapshot()
        assert checked == []
    budget.snapshot()  # outside: the same, now remembered as committed
    assert checked == []


def test_a_batchs_snapshot_then_an_edit_of_what_it_checked_is_still_found(busy):
    budget = busy.budget()
    with busy.batch():
        budget.reserve("H1", "e1", "source.read_context", at=T0)
        budget.snapshot()
    conn = sqlite3.connect(busy.path / "ledger.sqlite")
    conn.execute("DROP TRIGGER events_no_update")
    seq = conn.execute("SELECT MAX(seq) FROM events").fetchone()[0]
    conn.execute("UPDATE events SET body = replace(body, 'e1', 'e2') WHERE seq = ?", (seq,))
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as refused:
        budget.snapshot()
    assert refused.value.code == INTEGRITY_ERROR and refused.value.details["seq"] == seq


def test_snapshot_detects_a_checked_budget_event_changed_underneath(busy):
    budget = busy.budget()
    budget.snapshot()
    conn = sqlite3.connect(busy.path / "ledger.sqlite")
    conn.execute("DROP TRIGGER events_no_update")
    seq = conn.execute("SELECT MIN(seq) FROM events WHERE type = 'budget.settled'").fetchone()[0]
    conn.execute("UPDATE events SET body = replace(body, '\"assessed\"', '\"edited!!\"') WHERE seq = ?", (seq,))
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as refused:
        budget.snapshot()
    assert refused.value.code == INTEGRITY_ERROR and refused.value.details["seq"] == seq


def test_snapshot_detects_an_edited_event_appended_after_its_last_check(busy):
    budget = busy.budget()
    budget.snapshot()
    budget.reserve("H1", "x1", "source.read_context", at=T0)
    conn = sqlite3.connect(busy.path / "ledger.sqlite")
    conn.execute("DROP TRIGGER events_no_update")
    # a different first hex digit, whatever the hash was (a fixed '0' left one hash in 16 unchanged)
    conn.execute("UPDATE events SET sha256 = (CASE substr(sha256, 1, 1) WHEN '0' THEN '1' ELSE '0' END) || "
                 "substr(sha256, 2) WHERE seq = (SELECT MAX(seq) FROM events)")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as refused:
        budget.snapshot()
    assert refused.value.code == INTEGRITY_ERROR
    seq = refused.value.details["seq"]
    # named by its seq, as verify names it: a budget event's export file is numbered within its stream
    assert refused.value.message.startswith(f"seq {seq}: the budget event ")


def test_money_limits_read_running_totals_of_the_account_the_revision_and_the_case(busy):
    last = busy.query("SELECT hypothesis_total, revision_total, case_total FROM money_totals ORDER BY seq DESC")[0]
    assert last == {"hypothesis_total": 200, "revision_total": 950, "case_total": 950}
    scopes = busy.scopes()
    scopes.establish("case", {"cost_usd_millicents": 1000}, "controller", at=T0)
    scopes.establish("hypothesis:1/H1", {"cost_usd_millicents": 820}, "controller", at=T0)
    usage = {(row["scope_type"], row["dimension"]): row["consumed"] for row in scopes.usage()}
    assert usage == {("case", "cost_usd_millicents"): 950, ("hypothesis", "cost_usd_millicents"): 750}
    advice = busy.budget().advice("H1")
    assert (advice["remaining_cost_usd_millicents"], advice["limited_by"]["cost_usd_millicents"]) == (50, "case")
    busy.close()
    assert verify_case(busy.path).events > 0


def test_a_gate_reading_is_a_read_only_mapping_of_its_values(busy):
    reading = busy.budget().check("H1", "source.read_context")
    assert dict(reading) == reading.to_dict()
    assert list(reading) == list(reading.to_dict()) == ["allowed", "cost", "remaining", "pct_remaining", "tier",
                                                          "scarcity_bps"]
    assert len(reading) == 6 and "tier" in reading and "refusal" not in reading
    assert reading["cost"] == 5
    assert (reading.get("tier"), reading.get("nothing"), reading.get("nothing", "none")) == (reading["tier"], None, "none")
    assert list(reading.items()) == list(reading.to_dict().items())


def test_a_gate_readings_refusal_is_an_attribute_and_asking_for_it_as_a_key_says_so(busy):
    """``reading.get("refusal")`` answering None would read as "nothing refused" on a refused reading."""
    budget = busy.budget()
    budget.reserve("H2", "pending-1", "source.read_context")
    refused = budget.advice("H2")
    assert refused["investigable"] is False and refused.refusal.code == "ACTION_PENDING"
    for ask in (lambda: refused["refusal"], lambda: refused.get("refusal"), lambda: refused.get("refusal", None)):
        with pytest.raises(KeyError, match=r"attribute reading\.refusal"):
            ask()
    assert "refusal" not in refused and "refusal" not in dict(refused)


def _raise_missing(path: str) -> None:
    Case.open(path)  # LEDGER_MISSING, raised in the worker


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_refused_reading_and_its_refusal_cross_to_another_process_intact_and_compare_by_value(tmp_path):
    import pickle
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    case = start_case(tmp_path / "c", hypotheses=1, units=10)
    budget = case.budget(BudgetConfig.example())
    budget.initialize()
    reading = budget.check("H1", "research.lookup")  # costs 20, 10 left
    assert reading["allowed"] is False and reading.refusal.code == "INSUFFICIENT_BUDGET"
    copy = pickle.loads(pickle.dumps(reading))
    assert copy == reading == budget.check("H1", "research.lookup")
    assert (copy.refusal.code, copy.refusal.message, copy.refusal.details) == (
        reading.refusal.code, reading.refusal.message, reading.refusal.details)
    case.close()
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        with pytest.raises(LedgerError) as caught:
            pool.submit(_raise_missing, str(tmp_path / "nowhere")).result()
    assert caught.value.code == "LEDGER_MISSING" and str(tmp_path / "nowhere") in caught.value.message


def _sqlite_steps(case: Case, call) -> int:
    """SQLite virtual-machine instructions ``call`` runs on the case's connection: a count that grows
    with the rows a read scans, never with the machine's speed."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0
    case.storage.conn.set_progress_handler(count, 1)
    try:
        call()
    finally:
        case.storage.conn.set_progress_handler(None, 1)
    return steps[0]


@pytest.mark.slow  # two histories of 300 and 1,200 actions
def test_the_agents_per_action_reads_and_run_tool_scan_no_more_of_a_longer_history(package):
    """input_identity (which every run_tool computes), scopes().usage() and one run_tool + settle
    read the same rows whether the case holds 300 actions or 1,200: none of them reads the history."""
    case = start_case(package, hypotheses=2, units=10 ** 9)
    (package / "sources").mkdir(exist_ok=True)
    (package / "sources" / "lines.py").write_text("".join(f"x{n} = {n}\n" for n in range(10)), encoding="utf-8")
    budget = case.budget(BudgetConfig.from_mapping({"max_low_information_steps": 10 ** 6}))
    budget.initialize(at=T0)
    case.scopes().establish("case", {"units": 10 ** 12, "duration_ms": 10 ** 12}, "controller", at=T0)
    measured = []
    for total in (300, 1200):
        with case.batch():
            _spend(budget, "H1", total - len(case.actions()), f"n{total}-", score=50)
        tool = len(measured)
        reads = {"input_identity": case.input_identity, "usage": case.scopes().usage,
                 "run_tool": lambda: (budget.run_tool("H2", f"t{tool}", "source.read_context",
                                                      {"path": "sources/lines.py", "start_line": tool + 1,
                                                       "end_line": tool + 1}),
                                      budget.settle("H2", f"t{tool}", 50, "read"))}
        measured.append({name: _sqlite_steps(case, call) for name, call in reads.items()})
    small, large = measured
    assert {name: large[name] <= small[name] * 1.1 + 50 for name in small} == {name: True for name in small}, measured


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_an_exported_case_reads_only_the_events_since_its_last_identity_and_keeps_its_identity(package, tmp_path):
    """A case exported mid-run: its input identity reads the exported paths of the events appended since
    the previous call only (the SQLite work does not grow with the history), exporting never changes the
    identity, and a second Case on the same package, writing and exporting, does not mislead the first."""
    case = start_case(package, hypotheses=2, units=10 ** 9)
    budget = case.budget(BudgetConfig.from_mapping({"max_low_information_steps": 10 ** 6}))
    budget.initialize(at=T0)
    export_case(case)
    identity = case.input_identity()
    measured = []
    for total in (40, 160):
        with case.batch():
            _spend(budget, "H1", total - len(case.actions()), f"n{total}-", score=50)
        export_case(case)
        assert case.input_identity() == identity  # catches up with the events since the last call
        measured.append(_sqlite_steps(case, case.input_identity))
    small, large = measured
    assert large <= small * 1.1 + 50, measured
    with Case.open(package) as other:  # another writer appends and exports behind the first's back
        _spend(other.budget(), "H2", 3, "o", score=50)
        export_case(other)
    with Case.open(package) as fresh:
        assert case.input_identity() == identity == fresh.input_identity()
    (package / "analysis" / "case" / "events" / "mine.txt").write_text("a note")  # not exported: an input
    assert case.input_identity() != identity
    case.close()


def test_check_and_price_carry_the_notes_on_a_surprising_price_for_a_loop_in_python(budget):
    """A test's name quoted at test_costs while a reservation under it debits default_action_cost was
    said only by the command line: a Python loop gating with check stopped earlier than simulate."""
    for read in (budget.check, budget.price_signal):
        reading = read("H1", "test.automated")
        assert reading["cost"] == 15
        assert reading.notes == (
            "test.automated is quoted at test_costs, 15 units, the price of a test asked for with request_test; a "
            "reservation under this name debits 10 units (its action_costs entry or default_action_cost): give an "
            "action your agent runs itself a name of its own",)
        assert read("H1", "source.read_context").notes == ()
        assert read("H1", "source.read_contxt").notes == (
            "source.read_contxt is not among the action_costs of the policy this revision froze (database.lookup, "
            "research.lookup, source.find_text, source.read_context): it is priced at default_action_cost, 10 units",)
    assert budget.reserve("H1", "t1", "test.automated").action["cost_units"] == 10
    assert budget.advice("H1").notes == () and budget.remaining("H1").notes == ()
