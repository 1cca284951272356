"""docs/concepts.md: one table-driven scenario per rule of budget accounting.

Each scenario is a list of steps ``(operation, arguments, expected)``; ``expected``
is an error code, or a dict of fields the touched account (``H1`` unless the
step names another) must have afterwards. Cases use the example policy
(read_context 5, find_text 10, database.lookup 10, research.lookup 20, floor 5).
"""

from __future__ import annotations


import os

import pytest
from hypothesis import given, strategies as st
from click.testing import CliRunner

from ledger import BudgetConfig, Case, LedgerError, AnalysisConfig
from ledger.ground.errors import (ACCOUNT_TERMINAL, ACTION_CLOSED, ACTION_PENDING, BUDGET_POLICY_CHANGED,
    CASE_STATE, INVALID_ID, INVALID_JSON, INVALID_SCORE, LIMIT_REACHED, NOT_INITIALIZED, OPERATION_CONFLICT,
    REASON_REQUIRED, RESULT_MISSING, SOURCE_REF_INVALID, UNKNOWN_ACTION, UNKNOWN_HYPOTHESIS, INVALID_ARGUMENT,
    CONFIG_INVALID)


from ledger.rules import reward_units
from conftest import EXAMPLE_BUDGET, logical_dump, make_package, start_case
from ledger_cli.main import main as cli_main
R, D, F, X = "source.read_context", "database.lookup", "source.find_text", "research.lookup"


def run_steps(budget, steps):
    """Apply the steps in order, asserting each expected code or account fields."""
    for number, (op, args, expected) in enumerate(steps, start=1):
        hypothesis = args[0] if args and isinstance(args[0], str) and args[0].startswith("H") else "H1"
        call = getattr(budget, op)
        if isinstance(expected, str):
            with pytest.raises(LedgerError) as caught:
                call(*args)
            assert caught.value.code == expected, f"step {number} {op}{args}: {caught.value}"
        else:
            result = call(*args)
            account = result.state[hypothesis]
            for key, value in expected.items():
                got = result.reused if key == "reused" else (
                    result.action[key.removeprefix("action.")] if key.startswith("action.") else account[key])
                assert got == value, f"step {number} {op}{args}: {key} = {got!r}, expected {value!r}"


SCENARIOS = {
    "reserve debits the cost before the tool runs and starts investigating": [
        ("reserve", ("H1", "a1", R), {"spent_units": 5, "remaining_units": 95, "status": "investigating",
                                      "pending_action_id": "a1", "action.status": "reserved"}),
    ],
    "an action without a policy entry costs default_action_cost": [
        ("reserve", ("H1", "a1", "test.automated"), {"spent_units": 10, "action.cost_units": 10}),
    ],
    "reserve refuses a second pending action on the same hypothesis": [
        ("reserve", ("H1", "a1", R), {"remaining_units": 95}),
        ("reserve", ("H1", "a2", R), ACTION_PENDING),
        ("reserve", ("H2", "b1", R), {"remaining_units": 95, "pending_action_id": "b1"}),
    ],
    "record_result stores evidence without refunding": [
        ("reserve", ("H1", "a1", R), {}),
        ("record_result", ("H1", "a1", {"finding": "x"}), {"remaining_units": 95, "rewarded_units": 0,
                                                          "action.status": "awaiting_assessment",
                                                          "action.novelty_score": 100}),
    ],
    "settle refunds for new information (cost 10, scores 100/100 -> 8)": [
        ("reserve", ("H1", "a1", D), {"remaining_units": 90}),
        ("record_result", ("H1", "a1", {"rows": [1]}), {}),
        ("settle", ("H1", "a1", 100, "decisive"), {"rewarded_units": 8, "remaining_units": 98,
                                                    "action.reward_units": 8, "action.information_score": 100,
                                                    "settled_actions": 1, "pending_action_id": None}),
    ],
    "a semantic score of 50 refunds 4 of 10": [
        ("reserve", ("H1", "a1", D), {}),
        ("record_result", ("H1", "a1", {"rows": [2]}), {}),
        ("settle", ("H1", "a1", 50, "half relevant"), {"rewarded_units": 4, "remaining_units": 94}),
    ],
    "duplicate evidence scores zero novelty and earns nothing even at semantic 100": [
        ("reserve", ("H1", "a1", D), {}),
        ("record_result", ("H1", "a1", {"b": 2, "a": 1}), {"action.novelty_score": 100}),
        ("settle", ("H1", "a1", 100, "new"), {"rewarded_units": 8}),
        ("reserve", ("H2", "b1", D), {}),
        ("record_result", ("H2", "b1", {"a": 1.0, "b": 2}), {"action.novelty_score": 0}),
        ("settle", ("H2", "b1", 100, "seen before"), {"rewarded_units": 0, "low_information_streak": 1}),
    ],
    "empty evidence is never new": [
        ("reserve", ("H1", "a1", R), {}),
        ("record_result", ("H1", "a1", {}), {"action.novelty_score": 0}),
        ("settle", ("H1", "a1", 100, "nothing"), {"rewarded_units": 0}),
        ("reserve", ("H1", "a2", R), {}),
        ("record_result", ("H1", "a2", ""), {"action.novelty_score": 0}),
        ("fail", ("H1", "a2", "gave up"), {"failed_actions": 1}),
        ("reserve", ("H1", "a3", R), {}),
        ("record_result", ("H1", "a3", None), {"action.novelty_score": 0}),
        ("reserve", ("H2", "b1", R), {}),
        ("record_result", ("H2", "b1", []), {"action.novelty_score": 0}),
    ],
    "fail closes a pending action with no refund and counts as low information": [
        ("reserve", ("H1", "a1", X), {"remaining_units": 80}),
        ("fail", ("H1", "a1", "tool timed out"), {"remaining_units": 80, "failed_actions": 1,
                                                   "low_information_streak": 1, "action.status": "failed",
                                                   "pending_action_id": None}),
        ("fail", ("H1", "a1", "again"), OPERATION_CONFLICT),
        ("fail", ("H1", "a1", "tool timed out"), {"reused": True}),
        ("settle", ("H1", "a1", 50, "late"), ACTION_CLOSED),
        ("record_result", ("H1", "a1", {"late": 1}), ACTION_CLOSED),
    ],
    "settle needs a recorded result": [
        ("reserve", ("H1", "a1", R), {}),
        ("settle", ("H1", "a1", 50, "too early"), RESULT_MISSING),
        ("settle", ("H1", "zz", 50, "never reserved"), UNKNOWN_ACTION),
        ("record_result", ("H1", "zz", {"x": 1}), UNKNOWN_ACTION),
        ("fail", ("H2", "a1", "other hypothesis"), UNKNOWN_ACTION),
    ],
    "a cost above the remaining balance is refused but a cheaper action still fits": [
        ("reserve", ("H1", "a1", X), {"remaining_units": 80}),
        ("fail", ("H1", "a1", "x"), {}),
        ("reserve", ("H1", "a2", X), {"remaining_units": 60}),
        ("fail", ("H1", "a2", "x"), {}),
        ("reserve", ("H1", "a3", X), {"remaining_units": 40}),
        ("record_result", ("H1", "a3", {"n": 3}), {}),
        ("settle", ("H1", "a3", 100, "x"), {"remaining_units": 56, "low_information_streak": 0}),
        ("reserve", ("H1", "a4", X), {"remaining_units": 36}),
        ("record_result", ("H1", "a4", {"n": 4}), {}),
        ("settle", ("H1", "a4", 100, "x"), {"remaining_units": 52}),
    ],
    "remaining below the affordability floor after settle exhausts the account": [
        ("reserve", ("H1", "a1", X), {}), ("fail", ("H1", "a1", "x"), {}),
        ("reserve", ("H1", "a2", X), {}), ("record_result", ("H1", "a2", {"n": 1}), {}),
        ("settle", ("H1", "a2", 100, "x"), {"remaining_units": 76}),
        ("reserve", ("H1", "a3", X), {}), ("record_result", ("H1", "a3", {"n": 2}), {}),
        ("settle", ("H1", "a3", 100, "x"), {"remaining_units": 72}),
        ("reserve", ("H1", "a4", X), {}), ("record_result", ("H1", "a4", {"n": 3}), {}),
        ("settle", ("H1", "a4", 100, "x"), {"remaining_units": 68}),
        ("reserve", ("H1", "a5", X), {}), ("record_result", ("H1", "a5", {"n": 4}), {}),
        ("settle", ("H1", "a5", 100, "x"), {"remaining_units": 64}),
        ("reserve", ("H1", "a6", X), {}), ("fail", ("H1", "a6", "x"), {"remaining_units": 44}),
        ("reserve", ("H1", "a7", X), {}), ("fail", ("H1", "a7", "x"), {"remaining_units": 24}),
        ("reserve", ("H1", "a8", X), {}),
        ("record_result", ("H1", "a8", {"n": 5}), {}),
        ("settle", ("H1", "a8", 0, "irrelevant"), {"remaining_units": 4, "status": "budget_exhausted",
                                                  "terminal_reason": "remaining_below_floor"}),
        ("reserve", ("H1", "a9", R), ACCOUNT_TERMINAL),
    ],
    "exhaustion wins over abandonment when both hold": [
        *[step for n in range(1, 5) for step in (
            ("reserve", ("H3", f"c{n}", X), {}),
            ("record_result", ("H3", f"c{n}", {"c": n}), {}),
            ("settle", ("H3", f"c{n}", 21, "just above the threshold"),
             {"remaining_units": 100 - 17 * n, "low_information_streak": 0}))],
        ("reserve", ("H3", "c5", R), {}), ("fail", ("H3", "c5", "x"), {"low_information_streak": 1}),
        ("reserve", ("H3", "c6", R), {}), ("fail", ("H3", "c6", "x"), {"low_information_streak": 2}),
        ("reserve", ("H3", "c7", X), {}),
        ("fail", ("H3", "c7", "x"), {"remaining_units": 2, "status": "budget_exhausted",
                                      "terminal_reason": "remaining_below_floor", "low_information_streak": 3}),
    ],
    "three low-information steps in a row abandon the hypothesis and a good one resets the streak": [
        ("reserve", ("H1", "a1", R), {}), ("record_result", ("H1", "a1", {"n": 1}), {}),
        ("settle", ("H1", "a1", 20, "threshold is low"), {"low_information_streak": 1}),
        ("reserve", ("H1", "a2", R), {}), ("record_result", ("H1", "a2", {"n": 2}), {}),
        ("settle", ("H1", "a2", 21, "above threshold"), {"low_information_streak": 0}),
        ("reserve", ("H1", "a3", R), {}), ("fail", ("H1", "a3", "x"), {"low_information_streak": 1}),
        ("reserve", ("H1", "a4", R), {}), ("record_result", ("H1", "a4", {"n": 1}), {}),
        ("settle", ("H1", "a4", 100, "duplicate"), {"low_information_streak": 2, "status": "investigating"}),
        ("reserve", ("H1", "a5", R), {}), ("record_result", ("H1", "a5", {"n": 5}), {}),
        ("settle", ("H1", "a5", 5, "weak"), {"low_information_streak": 3,
                                              "status": "abandoned_low_information_gain",
                                              "terminal_reason": "low_information_streak"}),
        ("reserve", ("H1", "a6", R), ACCOUNT_TERMINAL),
        ("reject", ("H1", "done anyway"), ACCOUNT_TERMINAL),
    ],
    "reject is terminal, refunds nothing and needs pending actions closed first": [
        ("reserve", ("H2", "b1", R), {}),
        ("reject", ("H2", "contradicted"), ACTION_PENDING),
        ("fail", ("H2", "b1", "x"), {}),
        ("reject", ("H2", " "), REASON_REQUIRED),
        ("reject", ("H2", "contradicted by b1"), {"status": "rejected", "terminal_reason": "contradicted by b1",
                                                  "remaining_units": 95}),
        ("reject", ("H2", "contradicted by b1"), {"reused": True}),
        ("reject", ("H2", "other words"), ACCOUNT_TERMINAL),  # terminal, as for any terminal account
        ("reserve", ("H2", "b2", R), ACCOUNT_TERMINAL),
    ],
    "identity replays return reused and changed inputs conflict": [
        ("reserve", ("H1", "a1", R), {"reused": False}),
        ("reserve", ("H1", "a1", R), {"reused": True, "spent_units": 5}),
        ("reserve", ("H1", "a1", X), OPERATION_CONFLICT),
        ("record_result", ("H1", "a1", {"v": 1}), {"reused": False}),
        ("record_result", ("H1", "a1", {"v": 1.0}), {"reused": True}),
        ("record_result", ("H1", "a1", {"v": 2}), OPERATION_CONFLICT),
        ("settle", ("H1", "a1", 70, "ok"), {"reused": False, "rewarded_units": 2}),
        ("settle", ("H1", "a1", 70, "ok"), {"reused": True, "rewarded_units": 2}),
        ("settle", ("H1", "a1", 70, "other reason"), OPERATION_CONFLICT),
        ("fail", ("H1", "a1", "x"), ACTION_CLOSED),
    ],
    "shape checks come first": [
        ("reserve", ("H0", "a1", R), INVALID_ID),
        ("reserve", ("h1", "a1", R), INVALID_ID),
        ("reserve", ("H1", "", R), INVALID_ID),
        ("reserve", ("H1", "-a", R), INVALID_ID),
        ("reserve", ("H1", "a" * 129, R), INVALID_ID),
        ("reserve", ("H1", "a1", "Read"), INVALID_ID),
        ("reserve", ("H1", "a1", "read"), INVALID_ID),
        ("reserve", ("H9", "a1", R), UNKNOWN_HYPOTHESIS),
        ("reserve", ("H1", "a1", R), {}),
        ("record_result", ("H1", "a1", {"x": float("nan")}), INVALID_JSON),
        ("record_result", ("H1", "a1", {"x": 2**53}), INVALID_JSON),
        ("record_result", ("H1", "a1", {"x": 1}, ["../escape"]), SOURCE_REF_INVALID),
        ("record_result", ("H1", "a1", {"x": 1}, ["sources/missing.py"]), SOURCE_REF_INVALID),
        ("record_result", ("H1", "a1", {"x": 1}, ["ledger.sqlite"]), SOURCE_REF_INVALID),
        ("record_result", ("H1", "a1", {"x": 1}, ["/etc/passwd"]), SOURCE_REF_INVALID),
        ("record_result", ("H1", "a1", {"x": 1}, ["sources"]), SOURCE_REF_INVALID),
        ("record_result", ("H1", "a1", {"x": 1}, ["sources/./app.py"]), SOURCE_REF_INVALID),
        ("record_result", ("H1", "a1", {"x": 1}, ["sources/app.py"]), {"action.novelty_score": 100}),
        ("settle", ("H1", "a1", True, "bool"), INVALID_SCORE),
        ("settle", ("H1", "a1", 50.0, "float"), INVALID_SCORE),
        ("settle", ("H1", "a1", 101, "too high"), INVALID_SCORE),
        ("settle", ("H1", "a1", -1, "too low"), INVALID_SCORE),
        ("settle", ("H1", "a1", 50, ""), REASON_REQUIRED),
        ("settle", ("H1", "a1", 50, None), REASON_REQUIRED),
        ("settle", ("H9", "a1", 50.5, ""), INVALID_SCORE),
        ("fail", ("H1", "a1", "  \n"), REASON_REQUIRED),
    ],
}


@pytest.mark.parametrize("steps", SCENARIOS.values(), ids=list(SCENARIOS))
def test_budget_rule_scenario(tmp_path, steps):
    case = start_case(make_package(tmp_path / "case"), hypotheses=3, units=100)
    try:
        budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
        budget.initialize()
        run_steps(budget, steps)
    finally:
        case.close()


@pytest.mark.parametrize("cost, bps, information, expected", [
    (10, 8000, 100, 8), (10, 8000, 50, 4), (10, 8000, 0, 0), (1, 9999, 100, 0), (2, 9999, 100, 1),
    (7, 8000, 33, 1), (100, 0, 100, 0), (100, 9999, 100, 99), (3, 8000, 99, 2),
    (2**40, 8000, 100, 2**40 * 8000 * 100 // 1_000_000),
    (2**53 - 1, 9999, 100, min((2**53 - 1) * 9999 * 100 // 1_000_000, 2**53 - 2)),
])
def test_reward_is_exact_integer_arithmetic_and_always_below_cost(cost, bps, information, expected):
    assert reward_units(cost, bps, information) == expected
    assert 0 <= expected < cost


def test_large_allocations_and_costs_stay_exact(tmp_path):
    units = 2**53 - 1
    case = start_case(make_package(tmp_path / "case"), hypotheses=1, units=units)
    try:
        cost = 2**52 + 3
        budget = case.budget(BudgetConfig.from_mapping({"action_costs": {"research.lookup": cost}}))
        budget.initialize()
        budget.reserve("H1", "a1", "research.lookup")
        budget.record_result("H1", "a1", {"big": 1})
        result = budget.settle("H1", "a1", 57, "exact")
        reward = cost * 8000 * 57 // 1_000_000
        assert result.action["reward_units"] == reward
        assert result.state["H1"]["remaining_units"] == units - cost + reward
        assert case.balances()[0]["remaining_units"] == units - cost + reward
    finally:
        case.close()


def test_allocation_below_the_floor_is_exhausted_right_after_initialize(tmp_path):
    case = start_case(make_package(tmp_path / "case"), hypotheses=2, units=4)
    try:
        result = case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
        assert [a["status"] for a in result.state.values()] == ["budget_exhausted"] * 2
        assert result.ready_for_evaluation is True
        assert result.investigable == []
    finally:
        case.close()


def test_initialize_twice_never_refills_even_under_another_config(case, example_policy):
    budget = case.budget(example_policy)
    first = budget.initialize()
    budget.reserve("H1", "a1", "research.lookup")
    again = case.budget(BudgetConfig.from_mapping({"default_action_cost": 1})).initialize()
    assert again.reused is True and again.seq == first.seq
    assert again.state["H1"]["remaining_units"] == 80


def test_a_different_policy_refuses_new_operations_but_replays_and_snapshots_work(case, example_policy):
    case.budget(example_policy).initialize()
    case.budget(example_policy).reserve("H1", "a1", "source.read_context")
    other = case.budget(BudgetConfig.from_mapping({"max_reward_bps": 5000}))
    assert other.reserve("H1", "a1", "source.read_context").reused is True
    with pytest.raises(LedgerError) as caught:
        other.record_result("H1", "a1", {"x": 1})
    assert caught.value.code == BUDGET_POLICY_CHANGED
    assert other.snapshot().state["H1"]["spent_units"] == 5
    # no config: the frozen policy is used
    assert case.budget().record_result("H1", "a1", {"x": 1}).action["novelty_score"] == 100


def test_a_conflicting_repeat_says_what_to_do_instead(budget, case):
    budget.reserve("H1", "a1", "source.read_context")
    budget.record_result("H1", "a1", {"v": 1})
    budget.grant("H2", 5, "controller", "more", "g1")
    budget.reserve("H2", "b1", "source.read_context")
    budget.fail("H2", "b1", "timeout")
    budget.reject("H2", "contradicted")
    before = logical_dump(case.path / "ledger.sqlite")
    advice = {
        "a new action needs a new action id": [lambda: budget.reserve("H1", "a1", "source.find_text")],
        "an action's result is recorded once; a new action needs a new action id": [
            lambda: budget.record_result("H1", "a1", {"v": 2})],
        "an action is closed once (settled or failed); a new action needs a new action id": [
            lambda: budget.fail("H2", "b1", "other")],
        "a new grant needs a new grant_id": [lambda: budget.grant("H2", 6, "controller", "more", "g1")],
    }
    for words, calls in advice.items():
        for call in calls:
            with pytest.raises(LedgerError) as refused:
                call()
            assert refused.value.code == OPERATION_CONFLICT
            assert refused.value.message.endswith(f"with different inputs; {words}"), refused.value.message
    assert logical_dump(case.path / "ledger.sqlite") == before


def test_a_reject_of_a_rejected_hypothesis_with_other_words_is_account_terminal_and_the_same_is_reused(budget, case):
    """A reject of an account already terminal is ACCOUNT_TERMINAL unless it is the identical call (the
    rule for reject, which ranks after the case's state): it was OPERATION_CONFLICT, as a changed repeat of
    other operations is. Nothing is written either way."""
    first = budget.reject("H2", "contradicted")
    before = logical_dump(case.path / "ledger.sqlite")
    assert budget.reject("H2", "contradicted").reused and budget.reject("H2", "contradicted").seq == first.seq
    with pytest.raises(LedgerError) as refused:
        budget.reject("H2", "other words")
    assert (refused.value.code, refused.value.message) == (ACCOUNT_TERMINAL, "H2 is rejected (contradicted)")
    assert logical_dump(case.path / "ledger.sqlite") == before


def test_operations_before_initialize_are_not_initialized(case):
    with pytest.raises(LedgerError) as caught:
        case.budget().reserve("H1", "a1", "source.read_context")
    assert caught.value.code == NOT_INITIALIZED


def test_a_write_before_any_revision_is_open_is_case_state_saying_to_open_one(tmp_path, example_policy):
    """A read there says "open one, then run initialize" (NOT_INITIALIZED); a write meets the case's
    state first, whose message only named the states it needs: it now says to open a revision too."""
    with Case.create(tmp_path / "c", "C-1") as created:
        budget = created.budget(example_policy)
        for call in (budget.initialize, lambda: budget.reserve("H1", "a1", "source.read_context")):
            with pytest.raises(LedgerError) as caught:
                call()
            assert caught.value.code == CASE_STATE and caught.value.message.endswith(
                "; the case is CREATED; open a revision first ('ledger revision open', open_revision in Python)")


def test_budget_mutations_outside_generating_or_investigating_are_case_state(case, example_policy):
    budget = case.budget(example_policy)
    budget.initialize()
    budget.reserve("H1", "a1", "source.read_context")
    budget.fail("H1", "a1", "x")
    case.transition("BLOCKED")
    with pytest.raises(LedgerError) as caught:
        budget.reserve("H1", "a2", "source.read_context")
    assert caught.value.code == CASE_STATE
    # an identical replay still answers in any state
    assert budget.fail("H1", "a1", "x").reused is True
    case.transition("INVESTIGATING_HYPOTHESES")
    assert budget.reserve("H1", "a2", "source.read_context").reused is False


def test_order_of_checks_identity_before_case_state_before_unknown_hypothesis(case, example_policy):
    budget = case.budget(example_policy)
    budget.initialize()
    budget.reserve("H1", "a1", "source.read_context")
    case.transition("BLOCKED")
    codes = []
    for call in (lambda: budget.reserve("H1", "a1", "research.lookup"),   # conflict first
                 lambda: budget.reserve("H9", "a2", "research.lookup"),   # then case state
                 lambda: budget.reserve("H1", "a2", "x")):                # shape before all
        with pytest.raises(LedgerError) as caught:
            call()
        codes.append(caught.value.code)
    assert codes == [OPERATION_CONFLICT, CASE_STATE, INVALID_ID]


def test_a_terminal_account_may_still_settle_its_pending_action_order(case, example_policy):
    budget = case.budget(example_policy)
    budget.initialize()
    budget.reserve("H1", "a1", "source.read_context")
    with pytest.raises(LedgerError) as caught:
        budget.reserve("H1", "a2", "x.y")  # ACTION_PENDING ranks after shape
    assert caught.value.code == ACTION_PENDING


def test_refused_operations_write_nothing(case, example_policy):
    budget = case.budget(example_policy)
    budget.initialize()
    budget.reserve("H1", "a1", "research.lookup")
    before = logical_dump(case.path / "ledger.sqlite")
    for call in (lambda: budget.reserve("H1", "a2", "research.lookup"),
                 lambda: budget.settle("H1", "a1", 50, "no result"),
                 lambda: budget.record_result("H1", "a1", {"x": float("inf")}),
                 lambda: budget.reject("H1", "pending"),
                 lambda: budget.reserve("H1", "a1", "database.lookup")):
        with pytest.raises(LedgerError):
            call()
    assert logical_dump(case.path / "ledger.sqlite") == before


def test_identical_replays_write_nothing(budget, case):
    budget.reserve("H1", "a1", "source.read_context")
    budget.record_result("H1", "a1", {"x": 1}, ["sources/app.py"])
    before = logical_dump(case.path / "ledger.sqlite")
    assert budget.reserve("H1", "a1", "source.read_context").reused
    assert budget.record_result("H1", "a1", {"x": 1}, ["sources/app.py"]).reused
    assert budget.initialize().reused
    assert logical_dump(case.path / "ledger.sqlite") == before


def test_oversized_evidence_is_limit_reached_and_the_limit_itself_is_accepted(budget):
    budget.reserve("H1", "a1", "source.read_context")
    limit = 1024 * 1024
    at_limit = "x" * (limit - 2)  # canonical form adds two quotes
    too_big = "x" * (limit - 1)
    with pytest.raises(LedgerError) as caught:
        budget.record_result("H1", "a1", too_big)
    assert caught.value.code == LIMIT_REACHED
    assert budget.record_result("H1", "a1", at_limit).action["novelty_score"] == 100


def test_the_budget_event_limit_is_enforced(package):
    from ledger import AnalysisConfig

    case = Case.create(package, "BUG-1", analysis_config=AnalysisConfig(limits={"budget_events_max": 4}))
    try:
        case.open_revision([{"statement": "s"}])
        budget = case.budget()
        budget.initialize()
        budget.reserve("H1", "a1", "source.read_context")  # 1 + 1 + 2 kept for its closing = 4
        budget.fail("H1", "a1", "x")
        with pytest.raises(LedgerError) as caught:
            budget.reserve("H1", "a2", "source.read_context")
        assert caught.value.code == LIMIT_REACHED and caught.value.details["budget_events"] == 3
        assert caught.value.message == (
            "the ledger holds 3 budget events of its limit of 4; this operation needs 1 and 2 kept to close the "
            "action it opens (to allow more, raise [limits] budget_events_max in the analysis config: "
            "--analysis-config FILE; in Python, analysis_config= of Case.open)")
    finally:
        case.close()


def test_the_budget_event_limit_names_the_pending_actions_apart_from_the_one_a_reserve_opens(package):
    from ledger import AnalysisConfig

    case = Case.create(package, "BUG-1", analysis_config=AnalysisConfig(limits={"budget_events_max": 6}))
    with case:
        case.open_revision([{"statement": "a"}, {"statement": "b"}], 100)
        case.transition("INVESTIGATING_HYPOTHESES")
        budget = case.budget()
        budget.initialize()
        budget.reserve("H1", "a1", "source.read_context")  # 2 events, 2 kept for a1
        with pytest.raises(LedgerError) as caught:
            budget.reserve("H2", "b1", "source.read_context")
        assert caught.value.message.startswith(
            "the ledger holds 2 budget events of its limit of 6; this operation needs 1 and 4 kept to close "
            "1 pending action(s) and the action it opens (")
        assert [p["action_id"] for p in budget.pending_actions()] == ["a1"]


@pytest.mark.parametrize("limit", [5, 6, 7, 8, 9])
def test_a_reserve_keeps_room_to_close_every_pending_action_so_no_debit_is_stranded(package, limit):
    """docs/concepts.md refuses EVALUATING with pending actions "so nothing is stranded"; docs/errors.md limits
    refuse explicitly. A reserve is accepted only if it and every pending action can still close."""
    from ledger import AnalysisConfig

    case = Case.create(package, "BUG-1", analysis_config=AnalysisConfig(limits={"budget_events_max": limit}))
    try:
        case.open_revision([{"statement": "a"}, {"statement": "b"}], 100)
        case.transition("INVESTIGATING_HYPOTHESES")
        budget = case.budget()
        budget.initialize()
        accepted = []
        for n, h in enumerate(["H1", "H2"] * 3):
            try:
                budget.reserve(h, f"a{n}", "source.read_context")
                accepted.append((h, f"a{n}"))
            except LedgerError as refused:
                assert refused.code in (LIMIT_REACHED, "ACTION_PENDING")
        assert accepted, "at least one reserve fits"
        for h, action_id in accepted:  # every accepted action closes, never LIMIT_REACHED
            budget.record_result(h, action_id, {"finding": action_id})
            budget.settle(h, action_id, 100, "new")
        assert case.transition("EVALUATING").case_state == "EVALUATING"
        total = case.query("SELECT COUNT(*) AS n FROM events WHERE stream = 'budget'")[0]["n"]
        assert total <= limit
        assert all(row["pending_action_id"] is None for row in case.balances())
    finally:
        case.close()


def test_spent_units_that_would_pass_the_largest_exact_integer_are_a_limit_not_invalid_json(package):
    from ledger import BudgetConfig

    case = Case.create(package, "BUG-1")
    try:
        case.open_revision([{"statement": "a"}], units_per_hypothesis=2**53 - 1)
        case.transition("INVESTIGATING_HYPOTHESES")
        budget = case.budget(BudgetConfig.from_mapping({"default_action_cost": 2**52, "max_reward_bps": 9999}))
        budget.initialize()
        budget.reserve("H1", "q0", "x.y")
        budget.record_result("H1", "q0", {"i": 0})
        budget.settle("H1", "q0", 100, "r")
        before = case.status()["package_generation"]
        with pytest.raises(LedgerError) as caught:
            budget.reserve("H1", "q1", "x.y")
        assert caught.value.code == LIMIT_REACHED and caught.value.details["limit"] == "spent_units"
        assert case.status()["package_generation"] == before
    finally:
        case.close()


def test_a_grant_is_refused_when_initial_and_granted_units_together_would_pass_the_largest_exact_integer(package):
    """What an account may hold is bounded by its initial and granted units together, whatever it
    spent: the refusal says so and how much more can be granted (it said the account would hold
    more than 2**53-1 units when it would hold less)."""
    from ledger import BudgetConfig

    case = Case.create(package, "BUG-1")
    try:
        case.open_revision([{"statement": "a"}], units_per_hypothesis=2**53 - 1)
        case.transition("INVESTIGATING_HYPOTHESES")
        budget = case.budget(BudgetConfig.from_mapping({"default_action_cost": 1000}))
        budget.initialize()
        budget.reserve("H1", "q0", "x.y")
        with pytest.raises(LedgerError) as caught:
            budget.grant("H1", 1000, "controller", "to fill the account", "g1")
        assert caught.value.code == LIMIT_REACHED and caught.value.details["limit"] == "granted_units"
        assert caught.value.message == (f"H1's initial and granted units together would pass 2**53-1 ({2**53 - 1} "
                                        "initial + 0 granted + 1000), whatever it has spent: at most 0 more can be "
                                        "granted")
    finally:
        case.close()


def test_source_refs_store_the_file_hash_and_symlinks_inside_are_ordinary(budget, case):
    import hashlib

    (case.path / "sources" / "link.py").symlink_to("app.py")
    (case.path / "sources" / "out.py").symlink_to("/etc/hostname")
    (case.path / "sources" / "ledger-link").symlink_to("../ledger.sqlite")
    budget.reserve("H1", "a1", "source.read_context")
    for ref in ("sources/out.py", "sources/ledger-link"):
        with pytest.raises(LedgerError) as caught:
            budget.record_result("H1", "a1", {"x": 1}, [ref])
        assert caught.value.code == SOURCE_REF_INVALID
    budget.record_result("H1", "a1", {"x": 1}, ["sources/link.py"])
    rows = case.query("SELECT path, sha256 FROM result_sources")
    expected = hashlib.sha256((case.path / "sources" / "app.py").read_bytes()).hexdigest()
    assert rows == [{"path": "sources/link.py", "sha256": expected}]


def test_investigable_and_ready_for_evaluation(budget):
    budget.reserve("H1", "a1", "source.read_context")
    result = budget.reject("H2", "no")
    assert result.investigable == []  # H1 pending, H2 terminal
    assert result.ready_for_evaluation is False
    budget.fail("H1", "a1", "x")
    result = budget.reject("H1", "also no")
    assert result.investigable == [] and result.ready_for_evaluation is True


def test_the_balances_view_equals_the_reported_state(budget, case):
    budget.reserve("H1", "a1", "source.find_text")
    budget.record_result("H1", "a1", {"x": 1})
    result = budget.settle("H1", "a1", 30, "meh")
    budget.reserve("H2", "b1", "source.read_context")
    result = budget.snapshot()
    rows = {r.pop("hypothesis_id"): r for r in case.balances()}
    assert {h: r.pop("statement") for h, r in rows.items()} == {"H1": "hypothesis 1", "H2": "hypothesis 2"}
    for h, account in result.state.items():
        expected = dict(account)
        expected.pop("hypothesis_id")
        assert rows[h] == {"revision": 1, **expected}


#: Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt), and the blank Braille pattern.
_IGNORABLE = [(0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
              (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
              (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
              (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF), (0x2800, 0x2800)]


@given(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=12)
       | st.text(alphabet=st.sampled_from(" \t\n\x00\x1f\x7f\x85\xa0\u200b\u2028\u3000\ufeffa\u00e9"
                                          "\u034f\u115f\u17b5\u180b\u2065\u2800\u3164\ufe0f\uffa0\ufff8\U000e0100"
                                          "\u2801\u3163\u17b6\U000e1000"), max_size=8))
def test_a_reason_is_blank_exactly_when_every_character_is_whitespace_a_space_a_control_or_shows_nothing(text):
    """Blank: whitespace, spaces, controls, format characters and the other characters Unicode says
    may be ignored in display (the Hangul filler U+3164, variation selectors, …) or that print as an
    empty cell (U+2800): a reason of U+3164 alone was taken."""
    import unicodedata

    from ledger.rules.common import is_blank

    expected = all(ch.isspace() or unicodedata.category(ch) in ("Zs", "Cc", "Cf")
                   or any(low <= ord(ch) <= high for low, high in _IGNORABLE) for ch in text)
    assert is_blank(text) is expected


def cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli_main, [str(a) for a in args], input=stdin)
    return done.exit_code, done.stdout, done.stderr


def test_budget_snapshot_before_initialize_is_not_initialized(case):
    with pytest.raises(LedgerError) as caught:
        case.budget().snapshot()
    assert caught.value.code == NOT_INITIALIZED
    code, out, err = cli("budget", "snapshot", case.path)
    assert (code, out) == (1, "")
    assert err.startswith("error: NOT_INITIALIZED: revision 1 has no budget yet")


def test_budget_snapshot_before_any_revision_is_not_initialized(package):
    Case.create(package, case_id="BUG-1").close()
    code, out, err = cli("budget", "snapshot", package)
    assert (code, err) == (1, "error: NOT_INITIALIZED: no revision is open yet; open one, then run initialize\n")


@pytest.mark.parametrize("call", [
    lambda b: b.advice("H1"), lambda b: b.check("H1", "source.read_context"), lambda b: b.remaining("H1"),
    lambda b: b.price_signal("H1", "source.read_context")])
def test_every_budget_call_before_any_revision_says_to_open_one_first(package, call):
    """initialize cannot mend a case with no revision (it is CASE_STATE there): the refusal says to open one."""
    with Case.create(package, case_id="BUG-1") as case:
        with pytest.raises(LedgerError) as caught:
            call(case.budget())
        assert (caught.value.code, caught.value.message) == (
            NOT_INITIALIZED, "no revision is open yet; open one, then run initialize")
        assert case.status()["package_generation"] == 1
    for command in (["advice", "H1"], ["remaining", "H1"], ["check", "H1", "source.read_context"]):
        code, out, err = cli("budget", command[0], package, *command[1:])
        assert (code, err) == (1, "error: NOT_INITIALIZED: no revision is open yet; open one, then run initialize\n")


def test_budget_snapshot_after_initialize_still_reports(budget):
    assert budget.snapshot().revision == 1 and budget.snapshot().seq == 4


@pytest.mark.parametrize("reason", ["\u200b", " \u200b\u2060 ", "\u00a0", "\x07", "\ufeff", "\u3164", "\u115f\u1160",
                                    "\uffa0", "\u034f", "\ufe0f", "\u180b", "\u17b4", "\u2800", "\U000e0100 \u200e"])
def test_a_reason_of_only_invisible_characters_is_reason_required(budget, reason):
    with pytest.raises(LedgerError) as caught:
        budget.reject("H1", reason)
    assert caught.value.code == "REASON_REQUIRED"
    assert budget.reject("H1", "\u200bvisible").state["H1"]["status"] == "rejected"


def test_text_limit_4000_characters_as_documented(budget):
    assert budget.reject("H1", "r" * 4000).state["H1"]["status"] == "rejected"
    with pytest.raises(LedgerError) as caught:
        budget.reject("H2", "r" * 4001)
    assert caught.value.code == INVALID_ARGUMENT


def test_a_nul_in_a_reason_is_refused_so_views_never_truncate_it(budget):
    with pytest.raises(LedgerError) as caught:
        budget.reject("H1", "x\x00y")
    assert caught.value.code == INVALID_ARGUMENT
    assert budget.reject("H1", "x y").state["H1"]["terminal_reason"] == "x y"
    assert budget.snapshot().state["H1"]["status"] == "rejected"


def test_distinct_evidence_content_is_limited(package):
    case = Case.create(package, "C-1", analysis_config=AnalysisConfig(limits={"evidence_content_bytes_max": 30}))
    try:
        case.open_revision([{"statement": "s"}])
        budget = case.budget()
        budget.initialize()
        budget.reserve("H1", "a1", "source.read_context")
        budget.record_result("H1", "a1", {"k": "0123456789"})  # 20 bytes
        budget.fail("H1", "a1", "x")
        budget.reserve("H1", "a2", "source.read_context")
        with pytest.raises(LedgerError) as caught:
            budget.record_result("H1", "a2", {"k": "abcdefghij"})
        assert caught.value.code == LIMIT_REACHED
        assert budget.record_result("H1", "a2", {"k": "0123456789"}).action["novelty_score"] == 0  # seen: no new bytes
    finally:
        case.close()


# --- novelty over atoms (policy key novelty_mode, docs/concepts.md) ---------------------------
ATOMS = {"novelty_mode": "atoms"}


def test_the_default_novelty_mode_is_not_frozen_so_policies_hash_as_before():
    assert BudgetConfig().policy_sha256 == "cfd69d0c7e9063c5c30d26434d7ed2d37e4a93431cfbff98dab37c7de53c49e9"
    explicit = BudgetConfig.from_mapping({"novelty_mode": "evidence"})
    assert explicit.policy_sha256 == BudgetConfig().policy_sha256 and "novelty_mode" not in explicit.policy
    atoms = BudgetConfig.from_mapping(ATOMS)
    assert atoms.policy["novelty_mode"] == "atoms" and atoms.policy_sha256 != BudgetConfig().policy_sha256
    assert (BudgetConfig().novelty_mode, atoms.novelty_mode) == ("evidence", "atoms")


@pytest.mark.parametrize("value", ["lines", "", 1, True, ["atoms"]])
def test_an_unknown_novelty_mode_is_config_invalid_naming_the_key(value):
    with pytest.raises(LedgerError) as caught:
        BudgetConfig.from_mapping({"novelty_mode": value})
    assert caught.value.code == CONFIG_INVALID and caught.value.details["key"] == "novelty_mode"


def _atoms_budget(case, **policy):
    budget = case.budget(BudgetConfig.from_mapping({**ATOMS, **policy}))
    budget.initialize()
    return budget


def _novelty(budget, hypothesis, action_id, evidence):
    budget.reserve(hypothesis, action_id, "source.read_context")
    return budget.record_result(hypothesis, action_id, evidence).action["novelty_score"]


def test_atom_novelty_is_the_floor_of_the_unseen_share_of_distinct_atoms(case):
    budget = _atoms_budget(case)
    assert _novelty(budget, "H1", "a1", {"atoms": ["a", "b", "c"]}) == 100
    budget.settle("H1", "a1", 50, "x")
    # 1 unseen of 3 distinct (the repeated "d" counts once): floor(100 / 3)
    assert _novelty(budget, "H2", "b1", {"atoms": ["a", "b", "d", "d"]}) == 33
    budget.settle("H2", "b1", 50, "x")
    # seen anywhere in the case: H1 and H2 both count
    assert _novelty(budget, "H1", "a2", {"atoms": ["a", "d", "e", "f"], "n": 1}) == 50
    budget.settle("H1", "a2", 50, "x")
    assert _novelty(budget, "H1", "a3", {"atoms": [], "n": 2}) == 0


def test_atom_novelty_is_capped_by_new_evidence_score_and_evidence_without_atoms_keeps_the_whole_evidence_rule(case):
    budget = _atoms_budget(case, new_evidence_score=60)
    assert _novelty(budget, "H1", "a1", {"atoms": ["a", "b"]}) == 60
    budget.settle("H1", "a1", 50, "x")
    assert _novelty(budget, "H1", "a2", {"finding": "new"}) == 60
    budget.settle("H1", "a2", 50, "x")
    assert _novelty(budget, "H1", "a3", {"finding": "new"}) == 0  # not an atoms list: seen content
    budget.settle("H1", "a3", 50, "x")
    assert _novelty(budget, "H2", "b1", {"atoms": "a b", "n": 3}) == 60  # a string is no atoms list


def test_evidence_mode_ignores_atoms(budget):
    assert _novelty(budget, "H1", "a1", {"atoms": ["a"], "n": 1}) == 100
    budget.settle("H1", "a1", 50, "x")
    assert _novelty(budget, "H1", "a2", {"atoms": ["a"], "n": 2}) == 100


def test_atoms_seen_in_an_earlier_revision_are_not_new(case):
    budget = _atoms_budget(case)
    _novelty(budget, "H1", "a1", {"atoms": ["a", "b"]})
    budget.settle("H1", "a1", 50, "x")
    budget.reject("H2", "done")
    case.transition("EVALUATING")
    case.open_revision([{"statement": "again"}], 100)
    case.transition("INVESTIGATING_HYPOTHESES")
    second = case.budget()  # the frozen atoms policy carries over
    second.initialize()
    assert _novelty(second, "H1", "a1", {"atoms": ["a", "b", "c", "d"]}) == 50


def test_the_atoms_mode_is_frozen_and_replayed_by_verify_and_memory(case, tmp_path):
    from ledger import MemoryCase, verify_case

    budget = _atoms_budget(case)
    scores = []
    for number, atoms in enumerate((["a", "b"], ["b", "c", "d"], ["a", "b", "c", "d"]), start=1):
        scores.append(_novelty(budget, "H1", f"a{number}", {"atoms": atoms}))
        budget.settle("H1", f"a{number}", 50, "x")
    assert scores == [100, 66, 0]
    assert case.query("SELECT policy FROM policies")[0]["policy"].count('"novelty_mode":"atoms"') == 1
    case.close()
    verify_case(case.path)
    memory = MemoryCase.create("m")
    memory.open_revision([{"statement": "s"}], 100)
    memory.transition("INVESTIGATING_HYPOTHESES")
    replayed = memory.budget(BudgetConfig.from_mapping(ATOMS))
    replayed.initialize()
    again = []
    for number, atoms in enumerate((["a", "b"], ["b", "c", "d"], ["a", "b", "c", "d"]), start=1):
        again.append(_novelty(replayed, "H1", f"a{number}", {"atoms": atoms}))
        replayed.settle("H1", f"a{number}", 50, "x")
    assert again == scores
def test_policy_changed_tells_a_manager_its_config_differs_from_the_frozen_policy(case, example_policy):
    assert case.budget(example_policy).policy_changed() is False  # no budget yet
    case.budget(example_policy).initialize()
    other = case.budget(BudgetConfig.from_mapping({"default_action_cost": 7}))
    assert other.initialize().reused is True  # a repeat is a replay: policies are not compared
    assert other.policy_changed() is True
    assert case.budget(example_policy).policy_changed() is False and case.budget().policy_changed() is False


def test_settling_a_plain_action_before_its_result_names_both_ways_to_record_one(tmp_path):
    """RESULT_MISSING on a plain action names record_result and record_evidence (a router
    result comes through record_evidence), and writes nothing."""
    case = start_case(make_package(tmp_path / "pkg"))
    budget = case.budget()
    budget.initialize()
    budget.reserve("H1", "a1", "source.read_context")
    before = case.status()["package_generation"]
    with pytest.raises(LedgerError) as early:
        budget.settle("H1", "a1", 50, "too early")
    assert (early.value.code, early.value.message) == (
        RESULT_MISSING, "H1/a1 has no recorded result to assess; record_result or record_evidence first")
    assert case.status()["package_generation"] == before
    case.close()


# --- the checks read the values stored ----------------------------------------------------------
class _ShortStr(str):
    """Text that says it is one character long."""

    def __len__(self):
        return 1


class _NoNulStr(str):
    """Text that says it holds no NUL."""

    def __contains__(self, item):
        return False


class _InRangeInt(int):
    """A number that says it lies within every range."""

    def __lt__(self, other):
        return False

    __gt__ = __lt__

    def __le__(self, other):
        return True

    __ge__ = __le__


class _EmptyItems(dict):
    """A mapping whose items() hides its members."""

    def items(self):
        return iter(())


def _events(case: Case) -> int:
    return case.query("SELECT COUNT(*) AS n FROM events")[0]["n"]


@pytest.mark.parametrize("call, plain, code", [
    (lambda b: b.fail("H1", "a1", _ShortStr("x" * 5000)), lambda b: b.fail("H1", "a1", "x" * 5000), INVALID_ARGUMENT),
    (lambda b: b.fail("H1", "a1", _NoNulStr("a\x00b")), lambda b: b.fail("H1", "a1", "a\x00b"), INVALID_ARGUMENT),
    (lambda b: b.reject("H2", _ShortStr("x" * 5000)), lambda b: b.reject("H2", "x" * 5000), INVALID_ARGUMENT),
    (lambda b: b.grant("H2", _InRangeInt(-5), "controller", "more", "g1"),
     lambda b: b.grant("H2", -5, "controller", "more", "g1"), INVALID_ARGUMENT),
], ids=["fail reason too long", "fail reason with NUL", "reject reason too long", "negative grant"])
def test_a_subclass_s_own_answers_about_its_value_are_never_taken_for_the_value_stored(budget, case, call, plain,
                                                                                         code):
    """A str or int subclass may say it is short, holds no NUL or lies in range while the value
    stored (and read back by verify's replay) does not: every check reads the value itself, so the
    call is refused exactly as the plain value is, and nothing is written."""
    budget.reserve("H1", "a1", "source.read_context")
    before = _events(case)
    for attempt in (plain, call):
        with pytest.raises(LedgerError) as refused:
            attempt(budget)
        assert refused.value.code == code
    assert _events(case) == before


def test_a_lying_score_and_a_mapping_hiding_its_members_are_checked_by_what_they_hold(budget, case):
    from ledger import verify_case

    budget.reserve("H1", "a1", "source.read_context")
    budget.record_result("H1", "a1", _EmptyItems({"finding": "x"}))
    assert [row["body"] for row in case.query("SELECT body FROM contents")] == ['{"finding":"x"}']
    with pytest.raises(LedgerError) as refused:
        budget.settle("H1", "a1", _InRangeInt(500), "relevant")
    assert refused.value.code == INVALID_SCORE
    budget.settle("H1", "a1", 50, "relevant")
    case.close()
    assert verify_case(case.path).events == 7


def test_every_request_shape_checks_plain_values():
    """Every rule's shape_* function (what checks a call's arguments and builds the stored request)
    is wrapped to make its arguments plain first: none can be added without it."""
    import inspect

    from ledger.rules import budget_requests, evidence, feedback, lifecycle, scopes

    shapes = [(module.__name__, name, function) for module in (budget_requests, evidence, feedback, lifecycle, scopes)
              for name, function in inspect.getmembers(module, inspect.isfunction) if name.startswith("shape_")
              and function.__module__ == module.__name__]
    assert len(shapes) == 19
    assert [f"{module}.{name}" for module, name, function in shapes if not getattr(function, "plain_arguments", False)] == []


class _Hostile:
    """An argument whose comparisons and repr raise."""

    def __eq__(self, other):
        raise RuntimeError("eq")

    __hash__ = object.__hash__

    def __repr__(self):
        raise RuntimeError("repr")


class _ReprRaisingFloat(float):
    def __repr__(self):
        raise RuntimeError("repr")


class _ReprRaisingStr(str):
    def __repr__(self):
        raise RuntimeError("repr")


@pytest.mark.parametrize("call, code", [
    (lambda case, b: case.transition(_Hostile()), INVALID_ARGUMENT),
    (lambda case, b: case.scopes().establish("case", {"actions": 5}, "controller", on_exhausted=_Hostile()),
     "INVALID_CAPABILITY"),
    (lambda case, b: case.scopes().establish("case", {_Hostile(): 5}, "controller"), INVALID_ARGUMENT),
    (lambda case, b: case.scopes().establish("case", {"actions": 5}, "controller", warning_ratio=_Hostile()),
     INVALID_ARGUMENT),
    (lambda case, b: b.settle("H1", "a1", _ReprRaisingFloat(50.0), "r"), INVALID_SCORE),
    (lambda case, b: b.advice(_ReprRaisingStr("h 1")), INVALID_ID),
    (lambda case, b: b.fail("H1", "a1", 10 ** 5000), INVALID_ARGUMENT),
], ids=["transition", "on_exhausted", "limit key", "warning_ratio", "float score", "hypothesis id", "huge reason"])
def test_an_argument_whose_own_methods_raise_is_refused_with_the_documented_code(budget, case, call, code):
    """Whatever a caller's object does when compared or printed, the call ends in a LedgerError with
    its documented code (never that object's exception), and nothing is written."""
    budget.reserve("H1", "a1", "source.read_context")
    budget.record_result("H1", "a1", {"finding": "x"})
    before = _events(case)
    with pytest.raises(LedgerError) as refused:
        call(case, budget)
    assert refused.value.code == code
    assert _events(case) == before


def test_a_config_file_named_by_bytes_is_read_as_a_str_name_is(tmp_path):
    (tmp_path / "budget.toml").write_text("max_reward_bps = 5000\n")
    assert BudgetConfig.load(os.fsencode(tmp_path / "budget.toml")) == BudgetConfig.load(tmp_path / "budget.toml")
    (tmp_path / "bad.toml").write_text("max_reward_bps = true\n")
    with pytest.raises(LedgerError) as wrong:
        BudgetConfig.load(os.fsencode(tmp_path / "bad.toml"))
    assert wrong.value.code == "CONFIG_INVALID" and wrong.value.message.startswith(f"{tmp_path / 'bad.toml'}: ")
    with pytest.raises(LedgerError) as refused:
        BudgetConfig.load(os.fsencode(tmp_path / "none.toml"))
    assert refused.value.code == "CONFIG_INVALID" and refused.value.message == f"{tmp_path / 'none.toml'}: no such file"


@pytest.mark.parametrize("ref", [" sources/app.py", "sources/none.py", "sources/' x.py", 'sources/" y.py'])
def test_a_source_ref_that_does_not_exist_is_named_once_as_given(budget, case, ref):
    """The refusal quotes the ref as given, once, whatever quotes or spaces it holds (a leading space
    garbled it into "' sources/app.py' sources/app.py' does not exist")."""
    budget.reserve("H1", "a1", "source.read_context")
    with pytest.raises(LedgerError) as refused:
        budget.record_result("H1", "a1", {"x": 1}, [ref])
    assert (refused.value.code, refused.value.message) == (SOURCE_REF_INVALID, f"{ref!r} does not exist")


class _S(str):
    pass


class _I(int):
    pass


class _D(dict):
    pass


class _L(list):
    pass


_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5),
                    st.text(max_size=5).map(_S), st.integers().map(_I))
_VALUES = st.recursive(_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(_L), st.lists(inner, max_size=4).map(tuple),
    st.dictionaries(st.text(max_size=4), inner, max_size=4),
    st.dictionaries(st.text(max_size=4).map(_S), inner, max_size=4).map(_D)), max_leaves=20)


def _exact(value) -> bool:
    if isinstance(value, dict):
        return type(value) is dict and all(type(k) is str and _exact(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value) in (list, tuple) and all(_exact(v) for v in value)
    return type(value) in (str, int, float, bool, type(None))


class _Identity(str):
    """A str subclass whose equal texts are different keys."""

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


def test_two_keys_that_are_one_as_plain_text_are_refused_never_merged(budget, case):
    """Two keys of a str subclass, different to the dict, are one key once stored: which value would
    be kept cannot be told, so the call is refused (one of them was dropped without a word)."""
    budget.reserve("H1", "a1", "source.read_context")
    before = _events(case)
    with pytest.raises(LedgerError) as refused:
        budget.record_result("H1", "a1", {"rows": {_Identity("a"): 1, _Identity("a"): 2}})
    assert (refused.value.code, refused.value.message) == (INVALID_JSON, (
        "an object gives the key 'a' twice (keys of a str subclass, equal as text): which of its values would be "
        "stored cannot be told"))
    assert _events(case) == before


def test_a_config_mapping_is_read_by_what_it_holds_not_its_own_answers():
    """A dict subclass given as a budget or analysis config (or a table inside one) is read by the
    data it holds, as every other argument is (its own items() hid its keys, which took their defaults)."""
    budget = BudgetConfig.from_mapping(_EmptyItems({"default_action_cost": 7, "action_costs": _EmptyItems({"x.y": 3})}))
    assert (budget.policy["default_action_cost"], dict(budget.policy["action_costs"])) == (7, {"x.y": 3})
    assert BudgetConfig(policy=_EmptyItems({"default_action_cost": 8})).policy["default_action_cost"] == 8
    analysis = AnalysisConfig.from_mapping(_EmptyItems({"limits": _EmptyItems({"case_events_max": 123})}))
    assert analysis.limits["case_events_max"] == 123


@given(_VALUES)
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_plain_data_keeps_every_value_and_leaves_no_subclass(value):
    from ledger.ground.arguments import plain_data

    plain = plain_data(value)
    assert plain == value and _exact(plain)
    assert not _containers(plain) & _containers(value)  # a private copy: no dict or list of the caller's
    if not isinstance(value, (dict, list, tuple)) and _exact(value):
        assert plain is value  # a plain scalar: nothing to copy


def _containers(value) -> set[int]:
    """The ids of the dicts and lists ``value`` holds, itself included."""
    if isinstance(value, dict):
        return {id(value)}.union(*(_containers(item) for item in value.values()))
    if isinstance(value, (list, tuple)):
        return ({id(value)} if isinstance(value, list) else set()).union(*(_containers(item) for item in value))
    return set()


class _Boom(Exception):
    pass


def _boom(*args, **kwargs):
    raise _Boom()


class _RaisingStr(str):
    """Text whose every method of its own raises: comparing, hashing, measuring, showing it."""

    __eq__ = __hash__ = __len__ = __repr__ = __contains__ = __getitem__ = __iter__ = _boom
    strip = lower = encode = _boom


class _RaisingDict(dict):
    keys = items = values = get = __iter__ = __getitem__ = __len__ = __contains__ = _boom


class _RaisingList(list):
    __iter__ = __len__ = __getitem__ = _boom


@pytest.mark.parametrize("call", [
    lambda case, b: b.reserve("H1", "a2", "source.read_context", at=_RaisingStr("2026-01-01T00:00:00Z")),
    lambda case, b: b.advice(_RaisingStr("H1")),
    lambda case, b: b.remaining(_RaisingStr("H1")),
    lambda case, b: b.check("H1", _RaisingStr("source.read_context")),
    lambda case, b: b.price_signal(_RaisingStr("H1"), "source.read_context"),
    lambda case, b: case.record_outcome(_RaisingStr("resolved"), "x"),
    lambda case, b: case.query(_RaisingStr("SELECT 1 AS one")),
    lambda case, b: case.query("SELECT ? AS one", _RaisingList(["a"])),
    lambda case, b: b.run_tool("H2", "r1", "source.read_context",
                               _RaisingDict({"path": "sources/app.py", "start_line": 1, "end_line": 1})),
    lambda case, b: case.scopes().establish("case", {"actions": 5}, "controller", warning_ratio=_RaisingStr("0.5")),
    lambda case, b: case.open_revision(_RaisingList([{"statement": "b"}])),
    lambda case, b: b.action(_RaisingStr("H2"), "r2", "source.read_context"),
], ids=["at", "advice", "remaining", "check", "price_signal", "record_outcome", "query sql", "query params",
        "run_tool args", "warning_ratio", "open_revision", "action"])
def test_every_public_call_reads_its_arguments_as_plain_values(budget, case, call):
    """A caller's str, dict or list subclass whose own methods raise reaches no check, lookup or read
    on the way to the rules: each public call takes the plain value it holds, so it answers as for that
    value (a result, or a LedgerError), never with the subclass's exception."""
    budget.reserve("H1", "a1", "source.read_context")
    try:
        call(case, budget)
    except LedgerError:
        pass


def test_every_public_method_of_the_services_takes_plain_arguments():
    import inspect

    from ledger.services.actions import Action, CaseBudget
    from ledger.services.budget import BudgetManager
    from ledger.services.case import Case as CaseClass
    from ledger.services.evidence import EvidenceStore
    from ledger.services.facade import CaseFacade
    from ledger.services.scopes import ScopeManager

    bare = [f"{cls.__name__}.{name}" for cls in (Action, CaseBudget, BudgetManager, CaseClass, EvidenceStore,
                                                 CaseFacade, ScopeManager)
            for name, member in vars(cls).items() if not name.startswith("_")
            and (inspect.isfunction(member) or isinstance(member, classmethod))
            and not getattr(getattr(member, "__func__", member), "plain_arguments", False)]
    assert bare == []
