"""The investigator's side (docs/investigator.md): one call per router action (``run_tool``),
an action bound to the code that runs it (``budget.action``), the bundled example policy and
the example investigator loop."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from contextlib import nullcontext
from pathlib import Path

import pytest

from ledger import AnalysisConfig, BudgetConfig, Case, CaseBudget, LedgerError, verify_case
from ledger.services.actions import derived_id, failure_reason
from ledger.ground.errors import INVALID_ID, LIMIT_REACHED, ROUTER_REFUSED

from conftest import REPO, InterruptAt, close_lost_descriptors, make_package, start_case

READ = {"path": "sources/app.py", "start_line": 1, "end_line": 2}


@pytest.fixture
def investigator(case: Case) -> CaseBudget:
    budget = case.budget(BudgetConfig.example())
    budget.initialize()
    return budget


def _event_count(case: Case) -> int:
    return case.status()["package_generation"]


# --- run_tool -----------------------------------------------------------------------------
def test_run_tool_reserves_runs_publishes_and_feeds_the_record_in_one_call(case, investigator):
    run = investigator.run_tool("H1", "q1", "source.read_context", READ)
    assert (run.record_id, run.novelty_score, run.reused) == ("E000001", 100, False)
    assert [item["text"] for item in run.result["items"]] == ["def add(a, b):", "    return a - b"]
    assert run.budget.action["status"] == "awaiting_assessment" and run.budget.action["cost_units"] == 5
    settled = investigator.settle("H1", "q1", 80, "the subtraction is the bug")
    assert settled.action["status"] == "settled" and settled.action["reward_units"] == 3
    record = case.query("SELECT operation_id FROM evidence_records")[0]
    assert record["operation_id"] == "op-r1-H1-q1"


def test_run_tool_called_again_is_reused_and_writes_nothing(case, investigator):
    first = investigator.run_tool("H1", "q1", "source.read_context", READ)
    events = _event_count(case)
    again = investigator.run_tool("H1", "q1", "source.read_context", READ)
    assert again.reused is True and again.record_id == first.record_id and again.result == first.result
    assert _event_count(case) == events


def test_run_tool_whose_batch_another_call_of_it_stores_between_its_two_looks_answers_from_that_batch(
        case, investigator, monkeypatch):
    """The window real processes hit (1 race in 12 under a busy writer): this call looked for its
    batch before the other call stored it, and asked whether the iteration was taken after; it
    took the other call's batch for another tool call's and refused with OPERATION_CONFLICT."""
    from ledger.services.evidence import EvidenceStore

    first = investigator.run_tool("H1", "q1", "source.read_context", READ)  # the other call, done
    events = _event_count(case)
    looks = []
    real = EvidenceStore.stored_batch

    def first_look_before_the_other_call_stored(self, iteration_id, request):
        looks.append(iteration_id)
        return None if len(looks) == 1 else real(self, iteration_id, request)

    monkeypatch.setattr(EvidenceStore, "stored_batch", first_look_before_the_other_call_stored)
    again = investigator.run_tool("H1", "q1", "source.read_context", READ)
    assert len(looks) == 2 and again.reused is True and again.record_id == first.record_id
    assert _event_count(case) == events


@pytest.mark.parametrize("settled", [False, True], ids=["stored", "stored-and-settled"])
def test_run_tool_whose_action_another_call_of_it_completes_before_its_checks_answers_from_that_batch(
        case, investigator, monkeypatch, settled):
    """This call found no batch; before it checked whether the action was closed and its operation id
    unused, another call of this very request stored the batch (and settled the action). The stored
    batch is this call's answer, as for a retry; it was refused as a conflict ("give this call a new
    action id", which pays for the same tool call twice) or as an action closed with nothing stored."""
    from ledger.services.evidence import EvidenceStore

    other = Case.open(case.path)
    real = EvidenceStore.iteration_taken
    looks, generation = [], []

    def the_other_call_completes_meanwhile(store, iteration_id):
        answer = real(store, iteration_id)
        looks.append(iteration_id)
        if len(looks) == 1:  # this call's look; the other call's own looks go on as they are
            other.budget().run_tool("H1", "q1", "source.read_context", READ)
            if settled:
                other.budget().settle("H1", "q1", 80, "read")
            generation.append(other.status()["package_generation"])
        return answer

    monkeypatch.setattr(EvidenceStore, "iteration_taken", the_other_call_completes_meanwhile)
    try:
        run = investigator.run_tool("H1", "q1", "source.read_context", READ)
    finally:
        other.close()
    assert (run.record_id, run.reused) == ("E000001", True)
    assert run.budget.action["status"] == ("settled" if settled else "awaiting_assessment")
    assert _event_count(case) == generation[0]  # this call wrote nothing


def test_run_tool_of_an_action_closed_before_it_took_its_stored_call_says_so_and_writes_nothing(
        case, investigator, monkeypatch):
    """Interrupted between storing its tool call and feeding it, run_tool fails the action; a call again
    finds the stored batch but cannot feed a closed action. The refusal says what happened in run_tool's
    terms (it named record_evidence's step: "cannot record evidence for H1/q1")."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(CaseBudget, "record_evidence", interrupted)
    with pytest.raises(KeyboardInterrupt):
        investigator.run_tool("H1", "q1", "source.read_context", READ)
    monkeypatch.undo()
    assert investigator.action_status("H1", "q1") == "failed"
    events = _event_count(case)
    with pytest.raises(LedgerError) as refused:
        investigator.run_tool("H1", "q1", "source.read_context", READ)
    assert refused.value.code == "ACTION_CLOSED"
    assert refused.value.message == ("H1/q1 was closed (failed) before it took its stored tool call (record "
                                     "E000001), which stays stored; run_tool does not reopen a closed action: give "
                                     "this call a new action id")
    assert _event_count(case) == events


def test_run_tool_repeated_with_other_arguments_is_refused_and_keeps_the_recorded_result(case, investigator):
    """A changed repeat is OPERATION_CONFLICT and writes nothing: the action keeps its result, and
    settles as before (the refused repeat used to close it with fail and lose its refund)."""
    investigator.run_tool("H1", "q1", "source.read_context", READ)
    events = _event_count(case)
    with pytest.raises(LedgerError) as caught:
        investigator.run_tool("H1", "q1", "source.read_context", {**READ, "end_line": 3})
    assert caught.value.code == "OPERATION_CONFLICT"
    assert caught.value.message == ("action q1 already ran a tool call with another tool or other args; give this "
                                    "call a new action id")
    assert caught.value.__notes__ == ["case-ledger: action q1 already had its result (awaiting_assessment); it was "
                                      "left as it was"]
    assert _event_count(case) == events
    assert investigator.settle("H1", "q1", 80, "x").action["status"] == "settled"


@pytest.mark.parametrize("change", ["another input added", "the file it read edited", "the file it read removed"])
def test_run_tool_called_again_after_the_inputs_changed_answers_from_the_stored_batch(case, investigator, change):
    first = investigator.run_tool("H1", "q1", "source.read_context", READ)
    events = _event_count(case)
    app = case.path / "sources" / "app.py"
    if change == "another input added":
        (case.path / "sources" / "other.txt").write_text("unrelated\n")
    elif change == "the file it read edited":
        app.write_text("def add(a, b):\n    return a + b\n")
    else:
        app.unlink()
    again = investigator.run_tool("H1", "q1", "source.read_context", READ)
    assert (again.reused, again.record_id, again.result) == (True, first.record_id, first.result)
    assert again.budget.action["status"] == "awaiting_assessment" and _event_count(case) == events
    assert investigator.settle("H1", "q1", 80, "the subtraction").action["status"] == "settled"
    assert investigator.run_tool("H1", "q1", "source.read_context", READ).budget.action["status"] == "settled"


def test_run_tool_resumed_after_a_crash_and_an_input_change_feeds_the_stored_batch(case, investigator):
    request = {"actions": [{"operation_id": derived_id("op", 1, "H1", "q2"), "hypothesis_id": "H1",
                            "action_id": "q2", "tool": "source.read_context", "args": READ}]}
    investigator.reserve("H1", "q2", "source.read_context")
    stored = case.evidence().query(derived_id("run", 1, "H1", "q2"), request, store=True)  # then a crash
    (case.path / "sources" / "app.py").write_text("changed\n")
    resumed = investigator.run_tool("H1", "q2", "source.read_context", READ)
    assert resumed.record_id == stored.records[0]["record_id"] and resumed.result == stored.reply["results"][0]
    assert resumed.budget.action["status"] == "awaiting_assessment"


def test_run_tool_ids_come_from_the_action_identity_and_stay_valid_ids():
    assert derived_id("run", 2, "H3", "q-7") == "run-r2-H3-q-7"
    long = derived_id("op", 1, "H1", "a" * 128)
    assert len(long) <= 128 and long.startswith("op-r1-H1-") and long == derived_id("op", 1, "H1", "a" * 128)
    both = derived_id("op", 1, "H" + "1" * 130, "a")  # a hypothesis id longer than any revision's
    assert len(both) <= 128 and both.startswith("op-r1-") and both != derived_id("op", 1, "H" + "1" * 131, "a")


def test_run_tool_on_a_well_formed_hypothesis_id_no_revision_has_is_unknown_hypothesis_as_reserve_says(
        case, investigator):
    """However long the hypothesis id, run_tool answers as reserve does (it named an iteration id
    the caller never gave, INVALID_ID), and nothing is written."""
    events = _event_count(case)
    for hypothesis_id in ("H9", "H" + "1" * 130):
        with pytest.raises(LedgerError) as caught:
            investigator.run_tool(hypothesis_id, "x1", "source.read_context", READ)
        assert caught.value.code == "UNKNOWN_HYPOTHESIS", caught.value
    assert _event_count(case) == events


def test_run_tool_whose_derived_ids_are_another_actions_is_refused_before_reserving(case, investigator):
    """An action id too long for the derived ids is replaced by 32 hex digits of its sha256; that
    same text given as an action id of its own derives the same ids. It is refused before anything
    is reserved (it used to reserve, then fail to store, leaving a debit no retry could clear)."""
    long_id = "step-" + "x" * 120
    investigator.run_tool("H1", long_id, "source.read_context", READ)
    investigator.settle("H1", long_id, 50, "read")
    short_id = hashlib.sha256(long_id.encode()).hexdigest()[:32]
    assert derived_id("run", 1, "H1", short_id) == derived_id("run", 1, "H1", long_id)
    events = _event_count(case)
    for args in (READ, {**READ, "end_line": 1}):
        with pytest.raises(LedgerError) as caught:
            investigator.run_tool("H1", short_id, "source.read_context", args)
        assert caught.value.code == "OPERATION_CONFLICT"
        assert caught.value.message == (
            f"action {short_id} of H1 would store its tool call as iteration {derived_id('run', 1, 'H1', short_id)}, "
            "which already holds another action's (their derived ids coincide); give this call a new action id")
    assert _event_count(case) == events and investigator.action_status("H1", short_id) is None
    assert investigator.run_tool("H1", "next", "source.read_context", READ).budget.action["status"] == "awaiting_assessment"


@pytest.mark.parametrize("user", ["a requested test", "a stored query"])
def test_run_tool_whose_derived_operation_id_another_call_used_is_refused_before_reserving(case, investigator, user):
    """The operation id run_tool derives may already name a requested test or another stored result
    (given by hand): storing the tool call would be refused after the reservation, leaving a debit no
    later call completes. It is refused before anything is reserved, and the action is free to use."""
    taken = derived_id("op", 1, "H1", "x1")
    if user == "a requested test":
        investigator.request_test("H2", "t1", "automated", taken)
        used = "a requested test"
    else:
        request = {"actions": [{"operation_id": taken, "hypothesis_id": "H2", "action_id": "t1",
                                "tool": "source.read_context", "args": READ}]}
        investigator.reserve("H2", "t1", "source.read_context")
        stored = case.evidence().query("manual-1", request, store=True)
        used = f"record {stored.records[0]['record_id']}"
    events = _event_count(case)
    with pytest.raises(LedgerError) as caught:
        investigator.run_tool("H1", "x1", "source.read_context", READ)
    assert caught.value.code == "OPERATION_CONFLICT" and caught.value.details["operation_id"] == taken
    assert caught.value.message == (f"action x1 of H1 would store its tool call as operation {taken}, which {used} "
                                    "already uses; give this call a new action id")
    assert _event_count(case) == events and investigator.action_status("H1", "x1") is None
    assert investigator.advice("H1")["investigable"]
    assert investigator.run_tool("H1", "x2", "source.read_context", READ).budget.action["status"] == "awaiting_assessment"


def test_run_tool_refused_by_the_router_reserves_nothing(case, investigator):
    events = _event_count(case)
    with pytest.raises(LedgerError) as refused:
        investigator.run_tool("H1", "q1", "source.read_context", {"path": "../outside", "start_line": 1,
                                                                   "end_line": 1})
    assert refused.value.code == ROUTER_REFUSED
    assert _event_count(case) == events and case.actions() == []


@pytest.mark.parametrize("limit, value", [("evidence_artifact_bytes_max", 200), ("evidence_records_max", 1),
                                          ("evidence_content_bytes_max", 300), ("event_bytes_max", 2048)])
def test_run_tool_whose_result_the_case_cannot_take_reserves_nothing_and_runs_once_the_limit_is_raised(
        package, limit, value):
    start_case(package).close()
    (package / "sources" / "long.txt").write_text("x" * 3000 + "\n")
    # the text searched for: the stored request's 1,000 characters pass event_bytes_max = 2048 beside
    # the evidence the event carries (which that limit allows beyond it)
    tool, args = ("source.find_text", {"text": "x" * 1000, "path_glob": "sources/long.txt"}) \
        if limit == "event_bytes_max" else ("source.read_context", READ)
    with Case.open(package, analysis_config=AnalysisConfig.from_mapping({"limits": {limit: value}})) as opened:
        budget = opened.budget(BudgetConfig.example())
        budget.initialize()
        if limit == "evidence_records_max":
            budget.run_tool("H2", "q0", "source.read_context", {**READ, "end_line": 1})
        events = _event_count(opened)
        with pytest.raises(LedgerError) as refused:
            budget.run_tool("H1", "q1", tool, args)
        assert refused.value.code == LIMIT_REACHED and refused.value.details["limit"] == limit
        assert _event_count(opened) == events and budget.action_status("H1", "q1") is None
    with Case.open(package) as reopened:  # the default limits take the same call, under the same ids
        run = reopened.budget().run_tool("H1", "q1", tool, args)
        assert run.budget.action["status"] == "awaiting_assessment" and not run.reused


def test_run_tool_failing_after_its_reservation_says_the_action_was_closed_with_fail(case, investigator,
                                                                                      monkeypatch):
    import ledger.services.actions as actions

    def refuse(*args, **kwargs):
        raise LedgerError("LEDGER_BUSY", "the ledger is busy")
    monkeypatch.setattr(actions, "_feed", refuse)
    with pytest.raises(LedgerError) as refused:
        investigator.run_tool("H1", "q1", "source.read_context", READ)
    assert refused.value.__notes__ == ["case-ledger: action q1 was closed with fail (no refund); a new attempt "
                                       "needs a new action id"]
    assert investigator.action_status("H1", "q1") == "failed"


def test_run_tool_with_a_malformed_id_is_refused_before_anything_runs(case, investigator):
    with pytest.raises(LedgerError) as refused:
        investigator.run_tool("H1", "bad id", "source.read_context", READ)
    assert refused.value.code == INVALID_ID and case.actions() == []


def _child(script: str, package: Path) -> subprocess.Popen:
    code = textwrap.dedent(script)
    return subprocess.Popen([sys.executable, "-c", code, str(package)], stdout=subprocess.PIPE,
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def _kill_after_line(child: subprocess.Popen, expected: bytes) -> None:
    assert child.stdout is not None
    assert child.stdout.readline().strip() == expected
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    child.stdout.close()
    assert child.returncode == -signal.SIGKILL


def test_run_tool_after_a_process_killed_between_its_steps_continues_then_comes_back_reused(case, investigator):
    case.close()
    child = _child("""
        import sys, time
        from ledger import BudgetConfig, Case
        from ledger.services.actions import derived_id
        case = Case.open(sys.argv[1])
        budget = case.budget(BudgetConfig.example())
        request = {"actions": [{"operation_id": derived_id("op", 1, "H1", "q1"), "hypothesis_id": "H1",
                                "action_id": "q1", "tool": "source.read_context",
                                "args": {"path": "sources/app.py", "start_line": 1, "end_line": 2}}]}
        budget.reserve("H1", "q1", "source.read_context")          # step 1
        case.evidence().query(derived_id("run", 1, "H1", "q1"), request, store=True)  # step 2
        print("published", flush=True)
        time.sleep(60)                                              # killed before step 3
    """, case.path)
    _kill_after_line(child, b"published")
    with Case.open(case.path) as reopened:
        budget = reopened.budget()
        assert reopened.actions()[0]["status"] == "reserved"  # the crash left a recoverable state
        resumed = budget.run_tool("H1", "q1", "source.read_context", READ)
        assert resumed.reused is False and resumed.record_id == "E000001"
        assert resumed.budget.action["status"] == "awaiting_assessment"
        assert budget.run_tool("H1", "q1", "source.read_context", READ).reused is True
        assert len(reopened.query("SELECT * FROM evidence_records")) == 1


def test_run_tool_with_other_arguments_after_a_crash_leaves_the_crashed_calls_action_for_its_retry(case,
                                                                                                  investigator):
    """The batch of the first call is stored, its process killed before it fed the record: a call of
    the same action with other arguments is OPERATION_CONFLICT and writes nothing (it used to close
    the action with fail), and the first call's retry completes it."""
    case.close()
    child = _child("""
        import sys, time
        from ledger import BudgetConfig, Case
        from ledger.services.actions import CaseBudget
        def killed_here(*args, **kwargs):
            print("published", flush=True)
            time.sleep(60)
        CaseBudget.record_evidence = killed_here                    # killed after the batch is stored
        Case.open(sys.argv[1]).budget(BudgetConfig.example()).run_tool(
            "H1", "q1", "source.read_context", {"path": "sources/app.py", "start_line": 1, "end_line": 2})
    """, case.path)
    _kill_after_line(child, b"published")
    with Case.open(case.path) as reopened:
        budget = reopened.budget()
        events = _event_count(reopened)
        with pytest.raises(LedgerError) as caught:
            budget.run_tool("H1", "q1", "source.read_context", {**READ, "end_line": 3})
        assert caught.value.code == "OPERATION_CONFLICT"
        assert caught.value.__notes__ == ["case-ledger: action q1 was left as it was: the call that stored its tool "
                                          "call, run again, completes it"]
        assert (_event_count(reopened), budget.action_status("H1", "q1")) == (events, "reserved")
        resumed = budget.run_tool("H1", "q1", "source.read_context", READ)
        assert (resumed.record_id, resumed.budget.action["status"]) == ("E000001", "awaiting_assessment")


def test_run_tool_whose_batch_another_identical_call_stored_meanwhile_answers_from_it(case, investigator,
                                                                                        monkeypatch):
    """Two calls of one action with the same arguments race: both found no batch, the other stored
    its own at another generation of the ledger (a write in between). This call answers from the
    stored batch, as a retry does, rather than calling the arguments other and failing the action."""
    other = Case.open(case.path)
    from ledger.services import evidence
    real = evidence.EvidenceStore._stored_reply
    calls = []

    def not_yet(store, iteration_id, request):
        calls.append(iteration_id)
        if len(calls) == 2:  # storing: this call read no batch just before the other one stored its own
            other.budget().grant("H2", 1, "controller", "a write in between", "g1")
            other.budget().run_tool("H1", "q1", "source.read_context", READ)
            return None
        return real(store, iteration_id, request)
    monkeypatch.setattr(evidence.EvidenceStore, "_stored_reply", not_yet)
    run = investigator.run_tool("H1", "q1", "source.read_context", READ)
    assert (run.record_id, run.budget.action["status"]) == ("E000001", "awaiting_assessment")
    assert len(case.query("SELECT * FROM evidence_records")) == 1
    other.close()


@pytest.mark.slow  # real processes, 12 races
def test_run_tool_called_twice_at_once_with_the_same_arguments_succeeds_twice_while_others_write(case,
                                                                                                   investigator):
    case.close()
    (case.path / "sources" / "lines.py").write_text("".join(f"x{n} = {n}\n" for n in range(12)), encoding="utf-8")
    script = """
        import sys, time
        from ledger import BudgetConfig, Case, LedgerError
        case = Case.open(sys.argv[1])
        budget = case.budget(BudgetConfig.example())
        print("ready", flush=True)
        race = int(sys.stdin.readline())
        try:  # a line of its own each race: new information, so the account is not abandoned
            run = budget.run_tool("H1", f"q{race}", "source.read_context",
                                  {"path": "sources/lines.py", "start_line": race + 1, "end_line": race + 1})
            print("ok", run.budget.action["status"], flush=True)
        except LedgerError as exc:
            print("refused", exc.code, flush=True)
    """
    noise = _child("""
        import sys, time
        from ledger import BudgetConfig, Case
        budget = Case.open(sys.argv[1]).budget(BudgetConfig.example())
        for n in range(100000):
            budget.grant("H2", 1, "controller", "others write", f"g{n}")
            time.sleep(0.002)
    """, case.path)
    try:
        for race in range(12):
            children = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(case.path)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
                                         env={**os.environ, "PYTHONPATH": str(REPO)}) for _ in range(2)]
            assert [child.stdout.readline().strip() for child in children] == ["ready", "ready"]
            for child in children:
                child.stdin.write(f"{race}\n")
                child.stdin.flush()
            answers = [child.communicate(timeout=120)[0].strip() for child in children]
            assert answers == ["ok awaiting_assessment"] * 2, (race, answers)
            with Case.open(case.path) as settling:
                settling.budget().settle("H1", f"q{race}", 50, "read")
    finally:
        noise.kill()
        noise.wait(timeout=60)
        noise.stdout.close()
    with Case.open(case.path) as reopened:
        assert [a["status"] for a in reopened.actions() if a["hypothesis_id"] == "H1"] == ["settled"] * 12
    verify = __import__("ledger").verify_case(case.path)
    assert verify.head_seq > 0


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("args", [{**READ, "end_line": 2 ** 53 + 1}, {**READ, "nested": _nested(3000)}, _nested(3000)])
def test_run_tool_with_arguments_json_cannot_hold_is_invalid_json_and_reserves_nothing(case, investigator, args):
    events = _event_count(case)
    with pytest.raises(LedgerError) as caught:
        investigator.run_tool("H1", "q1", "source.read_context", args)
    assert caught.value.code == "INVALID_JSON"
    assert (_event_count(case), investigator.action_status("H1", "q1")) == (events, None)


@pytest.mark.parametrize("ids", [("\ud800", "a1"), ("H1", "\ud800"), (None, 5), (b"H1", "a1"), ("H1", "")])
def test_action_status_refuses_an_id_no_action_can_have(case, investigator, ids):
    with pytest.raises(LedgerError) as caught:
        investigator.action_status(*ids)
    assert caught.value.code == INVALID_ID


def test_action_status_refuses_a_hypothesis_the_revision_does_not_have_rather_than_reading_it_as_never_run(
        case, investigator):
    events = _event_count(case)
    with pytest.raises(LedgerError) as caught:
        investigator.action_status("H9", "a1")
    assert (caught.value.code, caught.value.details["hypothesis_id"]) == ("UNKNOWN_HYPOTHESIS", "H9")
    assert "revision 1 has no hypothesis H9" in str(caught.value)
    with pytest.raises(LedgerError) as advised:
        investigator.advice("H9")
    assert advised.value.code == caught.value.code  # the same refusal as the reads before an action
    assert (investigator.action_status("H2", "a1"), _event_count(case)) == (None, events)  # H2's never ran


def test_action_status_before_a_revision_is_open_is_not_initialized_and_a_revision_without_budget_has_no_actions(
        tmp_path):
    case = Case.create(tmp_path / "case", case_id="BUG-1")
    try:
        with pytest.raises(LedgerError) as caught:
            case.budget().action_status("H1", "a1")
        assert caught.value.code == "NOT_INITIALIZED" and "no revision is open yet" in str(caught.value)
        case.open_revision([{"statement": "one"}], 100)
        assert case.budget().action_status("H1", "a1") is None  # opened, not initialized: it never ran
        with pytest.raises(LedgerError) as unknown:
            case.budget().action_status("H2", "a1")
        assert unknown.value.code == "UNKNOWN_HYPOTHESIS"
    finally:
        case.close()


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")

    __repr__ = __str__


@pytest.mark.parametrize("value", [_nested(3000), _Unprintable()])
def test_a_refusal_names_a_value_nested_thousands_deep_or_unprintable_without_failing_itself(case, investigator,
                                                                                             value):
    investigator.reserve("H1", "q1", "source.read_context")
    events = _event_count(case)
    for call, code in [(lambda: investigator.record_evidence("H1", "q1", value), INVALID_ID),
                       (lambda: investigator.request_test("H2", "t1", value, "op-1"), "INVALID_ARGUMENT")]:
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == code and len(caught.value.message) < 300
    assert _event_count(case) == events


# --- budget.action ----------------------------------------------------------------------------
def test_an_action_block_that_records_leaves_the_action_awaiting_settle(case, investigator):
    with investigator.action("H1", "t1", "test.automated") as act:
        act.record({"passed": 3, "failed": 1})
    assert act.result.action["status"] == "awaiting_assessment" and act.failed is None
    assert act.settle(60, "one test fails on the locale").action["status"] == "settled"


def test_an_action_recorded_without_entering_its_block_says_that_entering_reserves_it(case, investigator):
    act = investigator.action("H1", "t1", "test.automated")
    with pytest.raises(LedgerError) as refused:
        act.record({"passed": 3})
    assert (refused.value.code, refused.value.message) == (
        "UNKNOWN_ACTION", "no action t1 was reserved on H1 in revision 1 (budget.action reserves when its block "
                          "is entered: with budget.action(h, a, tool) as act: act.record(...))")
    assert case.actions() == []


def test_an_action_block_that_raises_fails_the_action_with_the_exception_and_reraises(case, investigator):
    with pytest.raises(ValueError, match="tests could not start"):
        with investigator.action("H1", "t1", "test.automated"):
            raise ValueError("tests could not start")
    action = case.actions()[0]
    assert (action["status"], action["closing_reason"]) == ("failed", "ValueError: tests could not start")
    assert investigator.remaining("H1")["remaining"] == 100 - 10  # fail refunds nothing
    assert "H1" in investigator.snapshot().investigable


def test_an_action_block_interrupted_by_keyboard_interrupt_fails_the_action_and_reraises(case, investigator):
    with pytest.raises(KeyboardInterrupt):
        with investigator.action("H2", "t1", "test.automated") as act:
            act.record({"partial": True})  # even after a result: the interrupted action is closed
            raise KeyboardInterrupt
    action = case.actions()[0]
    assert (action["status"], action["closing_reason"]) == ("failed", "KeyboardInterrupt")
    assert act.failed is not None and act.failed.action["status"] == "failed"


def test_an_action_failed_inside_a_batch_says_the_batchs_rollback_undoes_the_fail(case, investigator):
    """The note said "closed with fail" while the exception, leaving the batch, rolled the reservation
    and the fail back: the action id was unused and nothing was written. Caught inside the batch, the
    fail is kept, as the note says."""
    events = _event_count(case)
    with pytest.raises(RuntimeError) as raised:
        with case.batch():
            with investigator.action("H2", "b1", "test.automated"):
                raise RuntimeError("in batch")
    assert raised.value.__notes__ == [
        "case-ledger: action b1 was closed with fail (no refund) inside a batch: if this exception leaves the "
        "batch, its rollback undoes the reservation and the fail with everything else the batch wrote"]
    assert (investigator.action_status("H2", "b1"), _event_count(case)) == (None, events)
    with case.batch():
        with pytest.raises(RuntimeError):
            with investigator.action("H2", "b2", "test.automated"):
                raise RuntimeError("caught inside")
    assert investigator.action_status("H2", "b2") == "failed"


class _InterruptedAfterCommit:
    """The case's connection, raising ``KeyboardInterrupt`` once, right after a ``COMMIT`` succeeded:
    Ctrl-C arriving as the reservation is made durable."""

    def __init__(self, conn):
        self._conn, self.left = conn, 1

    def execute(self, sql, *args):
        cursor = self._conn.execute(sql, *args)
        if self.left and sql.lstrip().upper().startswith("COMMIT"):
            self.left -= 1
            raise KeyboardInterrupt("as the reservation committed")
        return cursor

    def __getattr__(self, name):
        return getattr(self._conn, name)


@pytest.mark.parametrize("entered", ["an action block", "run_tool"])
def test_an_interrupt_arriving_as_the_reservation_commits_leaves_no_action_reserved(case, investigator, entered):
    """The reservation is durable but the block never began (or run_tool's later steps never ran):
    the action it left reserved is closed with fail, with a note, as an interrupt inside would."""
    real = case.storage.conn
    case.storage.conn = _InterruptedAfterCommit(real)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        if entered == "run_tool":
            investigator.run_tool("H1", "t1", "source.read_context", READ)
        else:
            with investigator.action("H1", "t1", "source.read_context"):
                pytest.fail("the block must not run")
    case.storage.conn = real
    action = case.actions()[0]
    assert (action["action_id"], action["status"], action["closing_reason"]) == (
        "t1", "failed", "KeyboardInterrupt: as the reservation committed")
    assert "case-ledger: action t1 was closed with fail (no refund); a new attempt needs a new action id" in \
        interrupted.value.__notes__
    assert investigator.pending_actions() == []
    verify_case(case.path)


def test_an_interrupt_as_the_reservation_commits_stays_an_interrupt_when_the_ledger_cannot_be_read(case, investigator):
    """The look at what the interrupted reservation left cannot read the ledger (an I/O error): the
    interrupt goes on as it came, with a note saying where to look, never turned into that error."""
    import sqlite3

    real = case.storage.conn

    class ThenUnreadable(_InterruptedAfterCommit):
        def execute(self, sql, *args):
            if not self.left:
                raise sqlite3.OperationalError("disk I/O error")
            return super().execute(sql, *args)

    case.storage.conn = ThenUnreadable(real)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        with investigator.action("H1", "t1", "source.read_context"):
            pytest.fail("the block must not run")
    case.storage.conn = real
    assert any(note.startswith("case-ledger: whether action t1 was left reserved could not be read (")
               for note in interrupted.value.__notes__), interrupted.value.__notes__
    assert [a["action_id"] for a in investigator.pending_actions()] == ["t1"]  # left for pending_actions()


def test_an_interrupt_in_a_reservation_refused_for_another_tool_leaves_that_action_as_it_was(case, investigator):
    """The action id is another tool's reservation (OPERATION_CONFLICT); an interrupt arriving as that
    refusal rolls back must not close the other tool's action."""
    investigator.reserve("H1", "t1", "test.automated")
    real = case.storage.conn

    class AtRollback(_InterruptedAfterCommit):
        def execute(self, sql, *args):
            if self.left and sql.lstrip().upper().startswith("ROLLBACK"):
                self.left -= 1
                self._conn.execute(sql, *args)
                raise KeyboardInterrupt("as the refusal rolled back")
            return self._conn.execute(sql, *args)

    case.storage.conn = AtRollback(real)
    with pytest.raises(KeyboardInterrupt):
        with investigator.action("H1", "t1", "source.read_context"):
            pytest.fail("the block must not run")
    case.storage.conn = real
    assert [(a["action"], a["status"]) for a in case.actions()] == [("test.automated", "reserved")]
    verify_case(case.path)


def test_an_interrupt_before_the_reservation_commits_closes_nothing_and_adds_no_note(case, investigator):
    real = case.storage.conn

    class BeforeCommit(_InterruptedAfterCommit):
        def execute(self, sql, *args):
            if self.left and sql.lstrip().upper().startswith("COMMIT"):
                self.left -= 1
                raise KeyboardInterrupt("before the commit")
            return self._conn.execute(sql, *args)

    case.storage.conn = BeforeCommit(real)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        with investigator.action("H1", "t1", "source.read_context"):
            pytest.fail("the block must not run")
    case.storage.conn = real
    assert case.actions() == [] and getattr(interrupted.value, "__notes__", []) == []
    with investigator.action("H1", "t1", "source.read_context") as act:  # the same id: a fresh reservation
        act.record({"x": 1})
    assert act.reservation.reused is False
    verify_case(case.path)


@pytest.mark.parametrize("how", ["a nested block", "a direct call"])
def test_a_block_leaves_a_result_it_did_not_record_itself(case, investigator, how):
    """The result came from elsewhere (a nested block with the same ids, record_result called
    directly): leaving the block neither fails the action nor says no result was recorded."""
    with investigator.action("H1", "a1", "tests.run") as outer:
        if how == "a nested block":
            with investigator.action("H1", "a1", "tests.run") as inner:
                inner.record({"x": 1})
        else:
            investigator.record_result("H1", "a1", {"x": 1})
    assert outer.failed is None and investigator.action_status("H1", "a1") == "awaiting_assessment"
    assert outer.result.reused and outer.result.action["status"] == "awaiting_assessment"  # the state it left
    assert investigator.settle("H1", "a1", 70, "assessed").action["status"] == "settled"


def test_the_note_on_a_block_entered_again_names_the_state_the_action_was_left_in(case, investigator):
    """A block whose action was already closed when it began leaves it as it was, and its note says how
    it was closed: failed (no result) or settled, never "had its result" for an action failed without one."""
    for attempt in range(2):
        with pytest.raises(RuntimeError) as caught:
            with investigator.action("H1", "t1", "tests.run"):
                raise RuntimeError("the tool crashed")
    assert caught.value.__notes__ == ["case-ledger: action t1 was already closed with fail when the block began; it "
                                      "was left as it was"]
    assert investigator.action_status("H1", "t1") == "failed"
    investigator.reserve("H1", "t2", "tests.run")
    investigator.record_result("H1", "t2", {"x": 1})
    investigator.settle("H1", "t2", 50, "assessed")
    with pytest.raises(RuntimeError) as caught:
        with investigator.action("H1", "t2", "tests.run"):
            raise RuntimeError("retried after settling")
    assert caught.value.__notes__ == ["case-ledger: action t2 already had its result (settled) when the block "
                                      "began; it was left as it was"]


def test_a_block_failing_after_another_recorded_the_result_leaves_that_result(case, investigator):
    """Two runs of one action id (another process, say): the one whose record is refused
    (OPERATION_CONFLICT) must not fail the action the other one recorded."""
    investigator.reserve("H1", "a1", "tests.run")
    investigator.record_result("H1", "a1", {"first": True})  # the other run, done first
    with pytest.raises(LedgerError) as caught:
        with investigator.action("H1", "a1", "tests.run") as act:
            act.record({"second": True})
    assert caught.value.code == "OPERATION_CONFLICT" and act.failed is None
    assert caught.value.__notes__ == ["case-ledger: action a1 already had its result (awaiting_assessment) when "
                                      "the block began; it was left as it was"]
    investigator.reserve("H2", "b1", "tests.run")
    with pytest.raises(LedgerError):
        with investigator.action("H2", "b1", "tests.run") as act:
            investigator.record_result("H2", "b1", {"first": True})  # recorded meanwhile, not by this block
            act.record({"second": True})
    assert act.failed is None and investigator.action_status("H2", "b1") == "awaiting_assessment"


def test_run_tool_interrupted_once_its_result_is_recorded_keeps_it(case, investigator, monkeypatch):
    recorded = CaseBudget.record_evidence

    def then_interrupted(self, *args, **kwargs):
        recorded(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(CaseBudget, "record_evidence", then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        investigator.run_tool("H1", "r1", "source.read_context", READ)
    monkeypatch.undo()
    assert investigator.action_status("H1", "r1") == "awaiting_assessment"
    again = investigator.run_tool("H1", "r1", "source.read_context", READ)
    assert again.reused and again.budget.action["status"] == "awaiting_assessment"
    assert investigator.settle("H1", "r1", 80, "x").action["status"] == "settled"


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no message")


@pytest.mark.parametrize("exc, reason", [(_Unprintable(), "_Unprintable"),
                                         (type("\u200b", (Exception,), {})(), "an exception with no readable type "
                                                                             "or message"),
                                         (type(" ", (Exception,), {})("  "), "an exception with no readable type "
                                                                            "or message")])
def test_a_block_fails_its_action_even_for_an_exception_with_no_readable_message(case, investigator, exc, reason):
    assert failure_reason(exc) == reason
    with pytest.raises(type(exc)):
        with investigator.action("H2", "a1", "tests.run"):
            raise exc
    assert investigator.action_status("H2", "a1") == "failed"


def test_an_action_block_that_records_nothing_fails_the_action_and_its_result_is_the_fail(case, investigator):
    with investigator.action("H1", "t1", "test.automated") as act:
        pass
    assert case.actions()[0]["closing_reason"] == "no result was recorded"
    assert act.result is act.failed and act.result.action["status"] == "failed"  # as on entering it again
    with investigator.action("H1", "t1", "test.automated") as again:
        pass
    assert again.result.action == act.result.action and again.failed is None


def test_an_action_refused_on_entry_runs_no_block_and_leaves_nothing(case, investigator):
    investigator.reject("H1", "ruled out")
    ran = []
    with pytest.raises(LedgerError) as refused:
        with investigator.action("H1", "t1", "test.automated"):
            ran.append(True)
    assert refused.value.code == "ACCOUNT_TERMINAL" and ran == [] and case.actions() == []


def test_a_failure_that_cannot_be_recorded_is_noted_on_the_original_exception(case, investigator):
    with pytest.raises(RuntimeError) as raised:
        with investigator.action("H1", "t1", "test.automated") as act:
            act.record({"ok": True})
            investigator.settle("H1", "t1", 50, "assessed inside the block")
            raise RuntimeError("after settling")
    assert any("closing action t1 with fail was refused" in note for note in raised.value.__notes__)
    assert case.actions()[0]["status"] == "settled"


def test_a_block_whose_closing_fail_is_refused_says_the_action_was_left_reserved(case, investigator):
    """The case closed inside the block: the fail that closes an action with no result cannot be
    written, and the block's error says the action stays reserved (it said only that the case was
    closed); pending_actions then fail resolves it."""
    for ending in ("normally", "by an exception"):
        action_id = "t1" if ending == "normally" else "t2"
        with Case.open(case.path) as inner:
            budget = inner.budget()
            with pytest.raises((LedgerError, ValueError)) as raised:
                with budget.action("H1", action_id, "test.automated"):
                    inner.close()
                    if ending != "normally":
                        raise ValueError("tool bug")
            notes = raised.value.__notes__
            assert any(f"action {action_id} was left reserved" in note if ending == "normally" else
                       f"closing action {action_id} with fail was refused" in note for note in notes), notes
        with Case.open(case.path) as reopened:
            budget = reopened.budget()
            assert [(a["hypothesis_id"], a["action_id"]) for a in budget.pending_actions()] == [("H1", action_id)]
            assert budget.fail("H1", action_id, "closed inside its block").action["status"] == "failed"


def test_an_action_after_a_process_killed_inside_its_block_is_resumed_by_entering_again(case, investigator):
    case.close()
    child = _child("""
        import sys, time
        from ledger import Case
        case = Case.open(sys.argv[1])
        with case.budget().action("H1", "t1", "test.automated") as act:
            print("reserved", flush=True)
            time.sleep(60)  # killed while the tool runs
    """, case.path)
    _kill_after_line(child, b"reserved")
    with Case.open(case.path) as reopened:
        budget = reopened.budget()
        assert reopened.actions()[0]["status"] == "reserved"  # pending, as after any crash
        with budget.action("H1", "t1", "test.automated") as act:
            assert act.reservation.reused is True
            act.record({"passed": True})
        assert act.settle(70, "retried after the crash").action["status"] == "settled"
        assert [a["status"] for a in reopened.actions()] == ["settled"]


@pytest.mark.parametrize("retry", ["records other evidence", "raises"])
def test_an_action_whose_result_was_recorded_before_a_crash_keeps_it_when_its_block_runs_again(
        case, investigator, retry):
    case.close()
    child = _child("""
        import sys, time
        from ledger import Case
        case = Case.open(sys.argv[1])
        with case.budget().action("H1", "t1", "test.automated") as act:
            act.record({"run": 1, "passed": 3})
            print("recorded", flush=True)
            time.sleep(60)  # killed before the block ends (and before settle)
    """, case.path)
    _kill_after_line(child, b"recorded")
    with Case.open(case.path) as reopened:
        budget = reopened.budget()
        with pytest.raises((LedgerError, RuntimeError)) as raised:
            with budget.action("H1", "t1", "test.automated") as act:
                assert act.reservation.reused is True and act.result is not None
                if retry == "raises":
                    raise RuntimeError("the tool crashed this time")
                act.record({"run": 2, "passed": 2})  # OPERATION_CONFLICT: the action has its result
        assert any("already had its result" in note for note in raised.value.__notes__)
        assert act.failed is None
        action = reopened.actions()[0]
        assert (action["status"], action["closing_reason"]) == ("awaiting_assessment", None)
        assert budget.settle("H1", "t1", 70, "the first run's result").action["reward_units"] > 0


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("ending", ["records nothing", "raises"])
def test_a_block_never_fails_a_result_another_process_records_while_it_ends(case, investigator, ending):
    """The block's fail is checked in the transaction that writes it: another process's result that
    commits while the block ends (both waiting on a busy writer) is kept, or refused; never recorded
    and then failed."""
    import fcntl
    import threading
    import time

    for round_ in range(3):
        action_id = f"t{round_}"
        with pytest.raises(RuntimeError) if ending == "raises" else nullcontext():
            with investigator.action("H1", action_id, "test.automated") as act:
                busy = os.open(case.path / "ledger.sqlite-lock", os.O_RDWR)
                fcntl.flock(busy, fcntl.LOCK_EX)  # a writer holding the ledger while both queue
                other = _child(f"""
                    import sys
                    from ledger import Case, LedgerError
                    with Case.open(sys.argv[1]) as case:
                        try:
                            print(case.budget().record_result("H1", "{action_id}", {{"from": "other"}}).reused)
                        except LedgerError as refused:
                            print(refused.code)
                """, case.path)
                time.sleep(0.5)  # the other process now waits for the writer
                threading.Timer(0.3, os.close, [busy]).start()  # closing drops the lock with the descriptor
                if ending == "raises":
                    raise RuntimeError("the tool crashed")
        answer = other.communicate(timeout=60)[0].decode().strip()
        action = next(a for a in case.actions() if a["action_id"] == action_id)
        if answer == "False":  # the other process's result was recorded: it stays
            assert (action["status"], act.failed) == ("awaiting_assessment", None)
            investigator.settle("H1", action_id, 50, "the other process's result")
        else:  # the block failed it first: the other process was refused
            assert answer == "ACTION_CLOSED" and action["status"] == "failed" and act.failed is not None


def test_failure_reasons_are_valid_reasons_whatever_the_message():
    assert failure_reason(ValueError("a\x00b")) == "ValueError: a?b"
    assert failure_reason(RuntimeError("")) == "RuntimeError"
    assert len(failure_reason(ValueError("x" * 10_000))) == 4000


# --- the example policy -----------------------------------------------------------------------------
def test_the_bundled_example_policy_loads_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    policy = BudgetConfig.example()
    assert policy.cost_units("source.read_context") == 5 and policy["test_costs"]["automated"] == 15


def test_an_action_closed_inside_its_block_is_left_as_closed(case, investigator):
    with investigator.action("H1", "t1", "test.automated"):
        investigator.fail("H1", "t1", "the tool was not installed")
    assert case.actions()[0]["closing_reason"] == "the tool was not installed"


def test_an_action_settled_inside_its_block_stays_settled(case, investigator):
    with investigator.action("H1", "t1", "test.automated") as act:
        act.record({"passed": True})
        settled = act.settle(40, "assessed at once")
    assert act.failed is None and case.actions()[0]["status"] == "settled"
    assert act.result is settled and act.result.action["status"] == "settled"  # the block's last word


# --- the example loop -----------------------------------------------------------------------------
def _run_example(folder, cwd):
    return subprocess.run([sys.executable, "-m", "ledger.examples.investigator", str(folder)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_the_example_loop_refuses_a_folder_that_already_holds_its_case_and_changes_nothing(tmp_path):
    assert _run_example(tmp_path, tmp_path).returncode == 0
    ledger_bytes = (tmp_path / "BUG-20" / "ledger.sqlite").read_bytes()
    again = _run_example(tmp_path, tmp_path)
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr == f"error: {tmp_path / 'BUG-20'} already exists: name another folder\n"
    assert (tmp_path / "BUG-20" / "ledger.sqlite").read_bytes() == ledger_bytes


def test_the_example_loop_names_a_folder_it_cannot_use_without_a_traceback(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "BUG-20").mkdir()  # an empty folder of that name is a case that exists too
    for folder, says in [(tmp_path / "a-file", "Not a directory"), (tmp_path, "already exists")]:
        done = _run_example(folder, tmp_path)
        assert done.returncode == 1 and done.stderr.startswith("error: ") and says in done.stderr
        assert "Traceback" not in done.stderr


def test_the_example_loop_answers_help_with_its_usage_and_makes_no_folder(tmp_path):
    for option in ("--help", "-h"):
        done = subprocess.run([sys.executable, "-m", "ledger.examples.investigator", option], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stderr == ""
        assert "python -m ledger.examples.investigator [FOLDER]" in done.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["--help"], ["case"]], ids=["help", "a-run"])
def test_the_example_loop_stops_quietly_with_status_1_when_its_reader_went_away(tmp_path, args):
    """``python -m ledger.examples.investigator | head -1``: output whose reader closed the pipe ends the
    program with status 1 and nothing on stderr (no BrokenPipeError traceback, no "Exception ignored")."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE, as after `head` exits
    try:
        done = subprocess.run([sys.executable, "-m", "ledger.examples.investigator", *args], cwd=tmp_path,
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (1, "")


@pytest.mark.parametrize("args", [["--help"], ["case"]], ids=["help", "a-run"])
def test_the_example_loop_says_a_full_output_in_one_line_with_status_1(tmp_path, args):
    """``> /dev/full``: ``--help`` ended in a traceback (only a closed pipe was handled)."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "ledger.examples.investigator", *args], cwd=tmp_path,
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (1, "error: [Errno 28] No space left on device\n")


_CTRL_C_AT_THIRD_SETTLE = """
import runpy, sys
import ledger
settle, calls = ledger.CaseBudget.settle, []
def interrupted(self, *args, **kwargs):
    calls.append(1)
    if len(calls) == 3:
        raise KeyboardInterrupt  # as Ctrl-C lands between two actions
    return settle(self, *args, **kwargs)
ledger.CaseBudget.settle = interrupted
sys.argv = ["investigator", sys.argv[1]]
runpy.run_module("ledger.examples.investigator", run_name="__main__")
"""


@pytest.mark.slow  # a real process: the slow lane (.ci/run) runs it
def test_the_example_loop_interrupted_says_so_with_status_130_and_leaves_a_ledger_that_verifies(tmp_path):
    from ledger import verify_case

    done = subprocess.run([sys.executable, "-c", _CTRL_C_AT_THIRD_SETTLE, str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (130, "interrupted\n")
    assert len(done.stdout.splitlines()) == 2  # two actions settled, then the interrupt
    assert verify_case(tmp_path / "BUG-20").events > 0


def test_the_example_loop_skips_what_a_used_up_limit_holds_and_stops_when_nothing_may_reserve(tmp_path, capsys):
    """docs/investigator.md: a budget result keeps listing the accounts a limit holds (not terminal, nothing
    pending), so the loop asks check before each action: with the case's one action spent it skips both
    hypotheses and returns instead of going round again."""
    import shutil
    from importlib.resources import files

    from ledger.examples import investigator as example
    from ledger.ground.errors import LIMIT_EXCEEDED

    package = tmp_path / "BUG-20"
    shutil.copytree(Path(str(files("ledger.examples"))) / "demo" / "sources", package / "sources",
                    ignore=shutil.ignore_patterns("__pycache__"))
    case = Case.create(package, case_id="BUG-20")
    case.open_revision([{"statement": s} for s in example.HYPOTHESES], units_per_hypothesis=40)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget(BudgetConfig.example())
    budget.initialize()
    case.scopes().establish("case", {"actions": 1}, "controller")
    snapshots = []
    snapshot = budget.snapshot

    def counted():
        assert len(snapshots) < 5, "the loop goes round without acting"
        snapshots.append(snapshot())
        return snapshots[-1]

    budget.snapshot = counted
    example.work(budget, package)
    assert capsys.readouterr().out.splitlines() == [
        "H1-0: 40 units left before, score 90, information 90, now investigating"]
    assert [(s.investigable, s.ready_for_evaluation) for s in snapshots] == [(["H1", "H2"], False)] * 2
    held = [budget.check(h, "source.read_context") for h in ("H1", "H2")]
    assert [(r["allowed"], r.refusal.code, r.refusal.details["scope"]) for r in held] == \
        [(False, LIMIT_EXCEEDED, "case")] * 2
    assert [budget.advice(h)["investigable"] for h in ("H1", "H2")] == [False, False]
    assert [a["status"] for a in case.actions()] == ["settled"]
    case.close()


def _start_from_the_docs():
    """The ``start`` function docs/investigator.md gives for starting or resuming a case."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "investigator.md").read_text(encoding="utf-8")
    section = text.split("## Starting or resuming a case", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(code, namespace)
    return namespace["start"]


def test_the_documented_start_resumes_a_case_at_any_point_of_its_setup(tmp_path):
    start = _start_from_the_docs()
    case, budget = start(tmp_path / "new")  # a new case
    budget.reserve("H1", "a1", "source.read_context")
    generation = case.status()["package_generation"]
    case.close()
    case, budget = start(tmp_path / "new")  # resumed: every setup step reused, nothing written
    assert case.status()["package_generation"] == generation and budget.action_status("H1", "a1") == "reserved"
    case.close()
    Case.create(tmp_path / "created-only", "BUG-7").close()  # a crash right after create
    case, budget = start(tmp_path / "created-only")
    assert [b["hypothesis_id"] for b in case.balances()] == ["H1", "H2"]
    case.close()


def test_the_documented_long_run_config_holds_for_the_start_that_names_it_and_is_not_stored(tmp_path, monkeypatch):
    """docs/investigator.md, "Long runs": the limits given to start hold for that case's calls; a start
    without them is back at the defaults (the limits are not stored in the case)."""
    text = (REPO / "docs" / "investigator.md").read_text(encoding="utf-8")
    code = next(c for c in (b.split("```")[0] for b in text.split("```python\n")[1:]) if "budget_events_max" in c)
    assert '"budget_events_max": 100_000' in code
    monkeypatch.chdir(tmp_path)
    names = {"start": _start_from_the_docs()}
    exec(code.replace("100_000", "5"), names)  # initialize writes 1: room for one action (its 3 events) only
    case, budget = names["case"], names["budget"]
    budget.reserve("H1", "a1", "source.read_context")
    budget.fail("H1", "a1", "nothing")
    with pytest.raises(LedgerError) as caught:
        budget.reserve("H2", "b1", "source.read_context")
    assert caught.value.code == "LIMIT_REACHED" and caught.value.details["limit"] == "budget_events_max"
    assert budget.advice("H2")["investigable"] is False
    assert budget.check("H2", "source.read_context")["allowed"] is False
    case.close()
    case, budget = _start_from_the_docs()(tmp_path / "cases" / "BUG-7")  # the defaults again: 10,000
    assert budget.reserve("H2", "b1", "source.read_context").action["status"] == "reserved"
    case.close()


@pytest.mark.parametrize("state", ["BLOCKED", "EVALUATING", "CLOSED"])
def test_the_documented_start_leaves_a_case_past_its_setup_where_it_is_and_writes_nothing(tmp_path, state):
    """A case blocked on a test, being evaluated or closed is resumed as it is: start wrote a transition
    that silently unblocked a BLOCKED case, and refused an EVALUATING or CLOSED one."""
    start = _start_from_the_docs()
    case, _ = start(tmp_path / "c")
    case.transition("BLOCKED" if state == "BLOCKED" else "EVALUATING")
    if state == "CLOSED":
        case.transition("CLOSED")
    generation = case.status()["package_generation"]
    case.close()
    case, budget = start(tmp_path / "c")
    assert (case.status()["state"], case.status()["package_generation"]) == (state, generation)
    assert [b["hypothesis_id"] for b in case.balances()] == ["H1", "H2"]
    case.close()


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_documented_start_run_by_several_processes_at_once_on_a_new_folder_starts_one_case(tmp_path):
    """Processes racing to create the case: the losers' CASE_EXISTS is taken as the case another
    process just created, and every one of them resumes it."""
    script = ("import sys\nsys.path.insert(0, 'tests')\nfrom test_investigator import _start_from_the_docs\n"
              "case, budget = _start_from_the_docs()(sys.argv[1])\nprint(case.status()['state'])\ncase.close()\n")
    children = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "new")], cwd=REPO, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    answers = [child.communicate(timeout=120) for child in children]
    assert [(child.returncode, out) for child, (out, _) in zip(children, answers)] == \
        [(0, "INVESTIGATING_HYPOTHESES\n")] * 4, [err for _, err in answers]
    with Case.open(tmp_path / "new") as case:
        assert [b["hypothesis_id"] for b in case.balances()] == ["H1", "H2"]
        assert verify_case(case.path).events == case.status()["package_generation"]


@pytest.mark.parametrize("before", ["nothing", "recorded, not settled"])
def test_the_documented_resumable_action_block_runs_the_tool_once_and_writes_nothing_when_run_again(case, before):
    """docs/investigator.md's loop body for an action taken again (resumed, or simply started
    again): the tool runs only while the action has no result, settle only while it awaits it."""
    text = (REPO / "docs" / "investigator.md").read_text(encoding="utf-8")
    block = next(code for code in text.split("```python\n")[1:] if "if act.result is None" in code).split("```")[0]
    budget = case.budget(BudgetConfig.example())
    budget.initialize()
    runs: list[int] = []

    def run_tests() -> str:
        runs.append(len(runs) + 1)
        return f"run {len(runs)}: test_restock failed"  # another output each time, as a real test run's

    def assess(body: str) -> int:
        assert "run 1: test_restock failed" in body  # the recorded output, not a new run's
        return 80

    names = {"budget": budget, "case": case, "run_tests": run_tests, "assess": assess}
    if before == "recorded, not settled":  # a run stopped between the block and settle
        with budget.action("H1", "t-1", "tests.run") as act:
            act.record({"output": run_tests()})
    exec(block, dict(names))
    after_first = _event_count(case)
    assert runs == [1] and [a["status"] for a in case.actions()] == ["settled"]
    exec(block, dict(names))
    assert runs == [1] and _event_count(case) == after_first


def test_pending_actions_lists_the_current_revisions_open_actions_in_hypothesis_order_and_writes_nothing(case):
    budget = case.budget(BudgetConfig.example())
    assert budget.pending_actions() == []  # before initialize
    budget.initialize()
    budget.reserve("H2", "b-1", "tests.run")
    budget.reserve("H1", "a-1", "source.read_context")
    budget.record_result("H1", "a-1", {"lines": [1, 2]})
    events = _event_count(case)
    pending = budget.pending_actions()
    assert [(p["hypothesis_id"], p["action_id"], p["action"], p["status"], p["cost_units"]) for p in pending] == [
        ("H1", "a-1", "source.read_context", "awaiting_assessment", 5), ("H2", "b-1", "tests.run", "reserved", 10)]
    assert [(p["test_operation_id"], p["bound_record_id"]) for p in pending] == [(None, None), (None, None)]
    assert {k: v for k, v in pending[0].items() if k not in ("test_operation_id", "bound_record_id")} == budget.settle(
        "H1", "a-1", 0, "nothing new").action | {"status": "awaiting_assessment", "semantic_score": None,
                                                 "information_score": None, "reward_units": None}
    assert [p["action_id"] for p in budget.pending_actions()] == ["b-1"]
    budget.fail("H2", "b-1", "given up")
    assert budget.pending_actions() == [] and _event_count(case) == events + 2


def test_pending_actions_of_a_reopened_case_are_the_new_revisions_own(case):
    budget = case.budget(BudgetConfig.example())
    budget.initialize()
    budget.reserve("H1", "a-1", "source.read_context")
    budget.fail("H1", "a-1", "given up")
    case.transition("EVALUATING")
    case.open_revision([{"statement": "another reading"}], 100)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget.initialize()
    assert budget.pending_actions() == []
    budget.reserve("H1", "a-1", "tests.run")  # revision 2's own action of that id
    assert [(p["action_id"], p["action"], p["status"]) for p in budget.pending_actions()] == [
        ("a-1", "tests.run", "reserved")]


def test_the_documented_restart_recipe_takes_up_or_gives_up_what_a_crash_left_open(case):
    """docs/investigator.md, "After a restart": each open action is taken up under the name it was
    reserved with (the tool runs only while it has no result) or given up with ``fail``."""
    text = (REPO / "docs" / "investigator.md").read_text(encoding="utf-8")
    block = next(code for code in text.split("```python\n")[1:] if "in budget.pending_actions():" in code).split("```")[0]
    budget = case.budget(BudgetConfig.example())
    budget.initialize()
    budget.reserve("H1", "a-1", "tests.run")  # a crash before the tool ran
    budget.reserve("H2", "b-1", "source.read_context")  # a crash after its result was recorded
    budget.record_result("H2", "b-1", {"output": "recorded before the crash"})
    ran: list[str] = []
    assessed: list[str] = []
    names = {"budget": budget, "case": case, "worth_running_again": lambda action: action == "tests.run",
             "call_tool": lambda action: ran.append(action) or f"{action} run again",
             "assess": lambda body: assessed.append(body) or 80}
    exec(block, dict(names))
    actions = {(a["hypothesis_id"], a["action_id"]): a for a in case.actions()}
    assert ran == ["tests.run"] and budget.pending_actions() == []
    assert [actions[k]["status"] for k in (("H1", "a-1"), ("H2", "b-1"))] == ["settled", "settled"]
    # each assessed from its own recorded output, the one recorded before the crash too
    assert sorted(json.loads(body)["output"] for body in assessed) == [
        "recorded before the crash", "tests.run run again"]
    assert [a["action"] for a in case.actions()] == ["tests.run", "source.read_context"]  # nothing new reserved
    budget.reserve("H1", "a-2", "tests.run")  # given up instead: the hypothesis may act again
    events = _event_count(case)
    exec(block, dict(names, worth_running_again=lambda action: False))
    assert ran == ["tests.run"] and budget.pending_actions() == [] and _event_count(case) == events + 1
    assert case.actions()[-1]["status"] == "failed"
    budget.request_test("H2", "t-1", "automated", "op-t-1")  # a requested test: its reply takes it up
    events = _event_count(case)
    exec(block, dict(names))
    assert [(p["action_id"], p["test_operation_id"]) for p in budget.pending_actions()] == [("t-1", "op-t-1")]
    assert ran == ["tests.run"] and _event_count(case) == events


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_run_tool_killed_before_feeding_its_stored_reply_is_taken_up_by_the_restart_recipe(case, tmp_path):
    """A process killed after run_tool stored its checked reply, before record_evidence: the action
    is still reserved, and a record given with other evidence is NO_RESERVATION. pending_actions
    names the bound record; the documented recipe feeds it, runs nothing, and settles."""
    case.close()
    script = ("import os, signal, sys\n"
              "from ledger import BudgetConfig, Case\n"
              "from ledger.services.actions import CaseBudget\n"
              "CaseBudget.record_evidence = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
              "budget = Case.open(sys.argv[1]).budget(BudgetConfig.example())\n"
              "budget.initialize()\n"
              f"budget.run_tool('H1', 'q-1', 'source.read_context', {READ!r})\n")
    killed = subprocess.run([sys.executable, "-c", script, str(case.path)], capture_output=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    with Case.open(case.path) as opened:
        budget = opened.budget()
        [pending] = budget.pending_actions()
        assert (pending["action_id"], pending["status"], pending["bound_record_id"]) == ("q-1", "reserved", "E000001")
        text = (REPO / "docs" / "investigator.md").read_text(encoding="utf-8")
        block = next(code for code in text.split("```python\n")[1:]
                     if "in budget.pending_actions():" in code).split("```")[0]
        ran: list[str] = []
        exec(block, {"budget": budget, "case": opened, "worth_running_again": lambda action: False,
                     "assess": lambda body: 80, "call_tool": lambda action: ran.append(action)})
        [action] = opened.actions()
        assert ran == [] and (action["status"], action["closing_reason"]) == ("settled", "assessed after a restart")
        assert opened.query("SELECT record_id, action_id FROM evidence_records") == [
            {"record_id": "E000001", "action_id": "q-1"}]
    verify_case(case.path)


def test_run_tool_of_an_action_closed_without_a_stored_call_is_action_closed_before_the_router_runs(
        case, investigator, monkeypatch):
    """A retry of a run_tool whose store failed (here: interrupted) ran the router, then was refused
    as "already had its result (failed)": it had none, and the tool ran for nothing."""
    from ledger.router.reference import Router

    store = type(case.evidence())
    real_query = store.query

    def interrupted(self, *args, **kwargs):
        if kwargs.get("store"):
            raise KeyboardInterrupt
        return real_query(self, *args, **kwargs)

    monkeypatch.setattr(store, "query", interrupted)
    with pytest.raises(KeyboardInterrupt):
        investigator.run_tool("H1", "q-1", "source.read_context", READ)
    monkeypatch.undo()
    assert investigator.action_status("H1", "q-1") == "failed"
    events = _event_count(case)
    monkeypatch.setattr(Router, "reply", lambda *a, **k: pytest.fail("the router ran"))
    with pytest.raises(LedgerError) as caught:
        investigator.run_tool("H1", "q-1", "source.read_context", READ)
    assert caught.value.code == "ACTION_CLOSED" and _event_count(case) == events
    assert caught.value.message.startswith("H1/q-1 is already failed, with no stored tool call to answer from")


def _public_callables(owner: object) -> list[tuple[str, object]]:
    """The public methods of ``owner`` (an instance or a class) that a caller calls."""
    return [(name, getattr(owner, name)) for name in dir(owner) if not name.startswith("_")
            and callable(getattr(owner, name, None)) and not isinstance(getattr(owner, name), type)]


def test_a_call_that_does_not_fit_a_public_signature_is_invalid_argument_and_does_nothing(case, investigator,
                                                                                           tmp_path):
    """Python's TypeError for a missing, unknown or doubled argument reached callers of the
    library, whose one exception is LedgerError: every public function and method of the services
    refuses such a call with INVALID_ARGUMENT before it runs."""
    import inspect

    import ledger
    from ledger import MemoryCase

    action = investigator.action("H1", "fit-1", "source.read_context")
    owners = [ledger, case, investigator, case.scopes(), case.evidence(), action, Case,
              MemoryCase.create("MEM-1")]
    before = _event_count(case)
    checked = []
    for owner in owners:
        names = ledger.__all__ if owner is ledger else None
        for name, member in _public_callables(owner):
            if not (name in names and inspect.isfunction(member) if names is not None else inspect.ismethod(member)):
                continue  # a module's own imports, an attribute holding a function (a case's clock)
            parameters = inspect.signature(member).parameters.values()
            if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
                continue
            with pytest.raises(LedgerError) as refused:
                member(not_an_argument=1)
            assert refused.value.code == "INVALID_ARGUMENT", (owner, name)
            assert "not_an_argument" in refused.value.message or "missing" in refused.value.message, (owner, name)
            checked.append(name)
    assert _event_count(case) == before
    assert {"verify_case", "import_runs", "simulate", "reserve", "settle", "run_tool", "open_revision", "create",
            "record", "store_tool_results", "establish"} <= set(checked), sorted(checked)
    with pytest.raises(LedgerError) as refused:
        investigator.settle("H1", "fit-1", 50)
    assert (refused.value.code, refused.value.message) == (
        "INVALID_ARGUMENT", "BudgetManager.settle() missing 1 required positional argument: 'reason'")
    from ledger.ground.errors import refuses_unfit_calls

    @refuses_unfit_calls
    def adds(a, b):
        return a + b

    with pytest.raises(TypeError):  # a TypeError from inside the callee is no refusal of its call
        adds(1, "b")
    with pytest.raises(LedgerError):
        adds(1, a=2)


def test_every_public_method_of_every_public_class_refuses_a_call_that_does_not_fit():
    """Config classes, the reference router, reports and results leaked TypeError for such a call:
    every public method, class method and static method of every public class (and the constructor
    of the classes callers build) refuses it with INVALID_ARGUMENT."""
    import inspect

    import ledger
    from ledger import AnalysisConfig, BudgetConfig, Policy, Router

    leaking = []
    for name in ledger.__all__:
        public = getattr(ledger, name)
        for klass in (public.__mro__ if inspect.isclass(public) else ()):
            for method, member in vars(klass).items() if klass.__module__.startswith("ledger.") else ():
                function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
                if not method.startswith("_") and inspect.isfunction(function) \
                        and not getattr(function, "refuses_unfit_calls", False):
                    leaking.append(f"{klass.__name__}.{method}")
    assert leaking == []
    for build in (BudgetConfig, AnalysisConfig, Router, Policy):
        with pytest.raises(LedgerError) as refused:
            build(not_an_argument=1)
        assert refused.value.code == "INVALID_ARGUMENT" and "not_an_argument" in refused.value.message
    for call in (lambda: BudgetConfig.load(), lambda: BudgetConfig.example().price_units(),
                 lambda: LedgerError("INVALID_ARGUMENT", "x").to_dict(1)):
        with pytest.raises(LedgerError) as refused:
            call()
        assert refused.value.code == "INVALID_ARGUMENT"


# --- functions given as arguments (docs/api.md "LedgerError") -------------------------------------------
def _decorated():
    import functools

    def report(label, count):
        return (label, count)

    @functools.wraps(report)
    def labelled(*args, **kwargs):  # supplies the label itself: callable with the count alone
        return report("verify", *args, **kwargs)
    return labelled


class _Proxy:
    """A callable whose attributes cannot be read (a remote object's proxy, say)."""

    def __call__(self, count):
        return count

    def __getattr__(self, name):
        raise RuntimeError(f"no attribute {name} here")


class _Collector(list):
    """A callable that is empty, so false, until it is called."""

    def __call__(self, line):
        self.append(line)


@pytest.mark.parametrize("function, fits", [
    (lambda count: None, True), (lambda count, extra=None: None, True), (lambda *args: None, True), (min, True),
    (_decorated(), True), (_Proxy(), True), (_Collector(), True), (lambda: None, False),
    (lambda count, extra: None, False), (lambda count, *, key: None, False),
], ids=["one", "default", "star", "builtin", "wrapped", "proxy", "false", "none", "two", "keyword_only"])
def test_a_function_argument_is_refused_only_when_it_cannot_take_the_arguments_it_is_called_with(function, fits):
    """A wrapper made with functools.wraps is judged by its own shape too (it was judged by the function it
    wraps alone), and one whose shape cannot be read is taken (a proxy raised its own error)."""
    from ledger.ground.arguments import check_callback

    if fits:
        assert check_callback(function, "progress", 1) is function
        return
    with pytest.raises(LedgerError) as caught:
        check_callback(function, "progress", 1)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.message.startswith("progress must be a function of 1 positional argument, got")


def test_a_function_argument_that_is_false_is_called_not_replaced_by_the_default(tmp_path):
    """``echo`` and the router's ``generation`` were taken as None when false (an empty collector)."""
    from ledger import Router, run_demo

    lines = _Collector()
    run_demo(tmp_path / "demo", echo=lines)
    assert len(lines) > 10

    class Generation(_Collector):
        def __call__(self):
            return 7
    assert Router(tmp_path / "demo", generation=Generation()).reply({"actions": []})["package_generation"] == 7


@pytest.mark.parametrize("occurrence, reserved", [(1, False), (3, True)])
def test_a_timeout_the_callers_signal_handler_raises_during_run_tool_goes_on_as_itself(
        case, investigator, monkeypatch, occurrence, reserved):
    """A ``TimeoutError`` (an ``OSError``, errno None) raised by the caller's SIGALRM handler while
    run_tool read a file was taken for the system's refusal to read it: the input identity hashed
    the file as unreadable (then ``STALE_GENERATION``) or the router refused it (``ROUTER_REFUSED``),
    and the caller's timeout was lost. It goes on as itself: before the reservation (the first
    opening of the file, by the input identity) nothing is written; after it (the third, the
    router's read) the action is failed with a note, as for any exception."""
    real_open = os.open
    opened = []

    def times_out(path, *args, **kwargs):
        if os.fsdecode(path).endswith("app.py"):
            opened.append(path)
            if len(opened) == occurrence:
                raise TimeoutError("tool timed out")
        return real_open(path, *args, **kwargs)

    events = _event_count(case)
    monkeypatch.setattr(os, "open", times_out)
    with pytest.raises(TimeoutError, match="tool timed out") as raised:
        investigator.run_tool("H1", "t1", "source.read_context", READ)
    monkeypatch.undo()
    notes = getattr(raised.value, "__notes__", [])
    if reserved:
        assert investigator.action_status("H1", "t1") == "failed"
        assert notes == ["case-ledger: action t1 was closed with fail (no refund); a new attempt needs a new action id"]
    else:
        assert (investigator.action_status("H1", "t1"), notes, _event_count(case)) == (None, [], events)


def test_the_systems_own_timeout_reading_a_file_is_still_a_refusal(case, investigator, monkeypatch):
    """ETIMEDOUT from the system (a network file system, say) carries its errno: a refusal naming it."""
    real_open = os.open

    def system_times_out(path, *args, **kwargs):
        if os.fsdecode(path).endswith("app.py") and "dir_fd" in kwargs:  # the router's read
            raise TimeoutError(errno.ETIMEDOUT, "Connection timed out")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", system_times_out)
    with pytest.raises(LedgerError) as refused:
        investigator.run_tool("H1", "t2", "source.read_context", READ)
    assert refused.value.code == "ROUTER_REFUSED" and "Connection timed out" in refused.value.message


# one landing as a generator is collected is printed and dropped by Python itself ("Exception ignored")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.slow  # about 15 s: the slow lane (.ci/run) runs it
def test_a_timeout_at_every_moment_of_run_tool_is_the_timeout_or_nothing_and_leaves_no_action_reserved(tmp_path):
    """The caller's timeout raised at every third moment of run_tool where Python runs a signal handler
    (a function starting, a call into C returning), the exception kept alive as the caller's ``except``
    keeps it: each call completes or raises it, and no action is left reserved. A read cut short as it
    was entered left its snapshot open while the exception lived, so the fail that closes the action
    was refused as nested and the action stayed reserved (one real SIGALRM in CI: every later action
    of the hypothesis then ``ACTION_PENDING``)."""
    case = start_case(make_package(tmp_path / "case"), hypotheses=1, units=10 ** 9)
    budget = case.budget(BudgetConfig.from_mapping({"max_low_information_steps": 10 ** 6}))
    budget.initialize()
    budget.run_tool("H1", "warm", "source.read_context", READ)
    budget.settle("H1", "warm", 50, "read")
    at, kept, outcomes = 1, [], set()
    while at < 30_000:
        exc = (interrupt := InterruptAt(at)).run(
            lambda: budget.run_tool("H1", f"a{at}", "source.read_context", {**READ, "end_line": 1 + at % 2}))
        if exc is None and interrupt.seen < at:
            break  # past the call's last moment
        kept.append(exc)
        outcomes.add(type(exc).__name__)
        status = budget.action_status("H1", f"a{at}")
        assert status in (None, "failed", "awaiting_assessment"), (at, status, getattr(exc, "__notes__", None))
        if status == "awaiting_assessment":
            budget.settle("H1", f"a{at}", 50, "read")
        at += 3
    assert 1000 < at < 30_000 and outcomes <= {"TimeoutError", "NoneType"} and "TimeoutError" in outcomes
    case.close()
    verify_case(tmp_path / "case")
    close_lost_descriptors(tmp_path / "case")


@pytest.mark.slow  # a few seconds: the slow lane (.ci/run) runs it
def test_a_real_sigalrm_timeout_at_any_moment_of_run_tool_is_the_timeout_or_nothing(tmp_path):
    """A real process times run_tool out with SIGALRM at 150 moments from 0.2 to 15 ms: each call
    either completes or raises the handler's TimeoutError, never a refusal standing for it; the
    ledger verifies after."""
    script = tmp_path / "alarms.py"
    script.write_text(textwrap.dedent(f"""
        import json, signal, sys
        sys.path.insert(0, {str(REPO / 'tests')!r})
        from conftest import make_package, start_case
        from ledger import BudgetConfig, LedgerError

        def on_alarm(*args):
            raise TimeoutError("tool timed out")

        signal.signal(signal.SIGALRM, on_alarm)
        case = start_case(make_package(__import__("pathlib").Path(sys.argv[1])), hypotheses=1, units=10 ** 9)
        budget = case.budget(BudgetConfig.from_mapping({{"max_low_information_steps": 10 ** 6}}))
        budget.initialize()
        read = {{"path": "sources/app.py", "start_line": 1, "end_line": 2}}
        budget.run_tool("H1", "warm", "source.read_context", read)
        budget.settle("H1", "warm", 50, "read")
        seen = {{}}
        for n in range(150):
            kind = None
            try:  # the alarm may also land as the timer is disarmed, after the call: it then completed
                try:
                    signal.setitimer(signal.ITIMER_REAL, 0.0002 + n * 0.0001)
                    budget.run_tool("H1", f"a{{n}}", "source.read_context", {{**read, "end_line": 1 + n % 2}})
                    kind = "done"
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except TimeoutError:
                kind = kind or "timeout"
            except LedgerError as exc:
                kind = exc.code + ": " + exc.message[:200]
            if budget.action_status("H1", f"a{{n}}") == "awaiting_assessment":  # a timeout after its result
                budget.settle("H1", f"a{{n}}", 50, "read")
            seen[kind] = seen.get(kind, 0) + 1
        case.close()
        print(json.dumps(seen))
    """))
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "case")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert set(seen) <= {"done", "timeout"}, seen
    assert seen.get("timeout", 0) > 0 and sum(seen.values()) == 150
    verify_case(tmp_path / "case")  # raises INTEGRITY_ERROR on any fault
