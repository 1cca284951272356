"""Scoped limits, authority and the soft gate (docs/scopes.md): scopes and dimensions, establishment and
authority, enforcement with limit.exceeded / limit.approaching, scope_usage, grants, check,
price_signal, remaining, the journal and the command line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from ledger import BudgetConfig, Case, LedgerError, apply_journal, export_case, import_tree, verify_case
from ledger.ground.errors import (ACCOUNT_TERMINAL, AUTHORITY_DENIED, INVALID_ARGUMENT, INVALID_CAPABILITY,
    LIMIT_EXCEEDED, NOT_INITIALIZED)
from ledger.package_tools.replay import PackageSource, Replayer


from ledger import AnalysisConfig
from ledger.ground.errors import INSUFFICIENT_BUDGET, LIMIT_REACHED


from ledger.ground.errors import INVALID_ID
from ledger.rules import gate as gate_rules
from ledger.rules import scopes as scope_rules
from ledger_cli.main import main as cli_main
from conftest import REPO, logical_dump, make_package, start_case, EXAMPLE_BUDGET
T0 = "2026-01-01T00:00:00Z"  # the set-up happens then; tests that drive the clock come later


def _ready(package: Path, *, hypotheses: int = 2, units: int = 100, config: BudgetConfig | None = None) -> Case:
    """A case whose revision 1 is initialized by ``controller`` (its issuer), every event at T0."""
    case = Case.create(package, case_id="BUG-1", at=T0)
    case.open_revision([{"statement": f"hypothesis {i}"} for i in range(1, hypotheses + 1)], units, at=T0)
    case.transition("INVESTIGATING_HYPOTHESES", at=T0)
    # failing actions count as low-information steps; these tests fail many on purpose
    patient = BudgetConfig.from_mapping({**(dict(config.policy) if config else {}), "max_low_information_steps": 1000})
    case.budget(patient).initialize(at=T0)
    return case


def _types(case: Case, since: int = 0) -> list[str]:
    return [e["type"] for e in case.events(since)]


def _usage(case: Case) -> dict[tuple[str, str, str], tuple[int, int, int]]:
    return {(r["scope_type"], r["scope_id"], r["dimension"]): (r["declared"], r["consumed"], r["remaining"])
            for r in case.query("SELECT * FROM scope_usage")}


def _refused(call, *args, **kwargs) -> LedgerError:
    with pytest.raises(LedgerError) as refused:
        call(*args, **kwargs)
    return refused.value


# --- 8.1 / 8.3: enforcement ------------------------------------------------------------------
def test_a_task_allowed_50_actions_inside_a_case_with_3_left_gets_exactly_3(package):
    """docs/scopes.md: the tightest remaining limit across scopes wins."""
    case = _ready(package)
    budget, scopes = case.budget(), case.scopes()
    scopes.establish("case", {"actions": 5}, "controller")
    for i in range(2):  # the case has used 2 of its 5 actions
        budget.reserve("H2", f"old{i}", "source.read_context")
        budget.fail("H2", f"old{i}", "done")
    scopes.establish("hypothesis:1/H1", {"actions": 50}, "controller")
    for i in range(3):
        assert budget.reserve("H1", f"q{i}", "source.read_context").action["status"] == "reserved"
        budget.fail("H1", f"q{i}", "done")
    before = case.balances()
    refused = _refused(budget.reserve, "H1", "q3", "source.read_context")
    assert refused.code == LIMIT_EXCEEDED
    assert refused.details["scope"] == "case" and refused.details["dimension"] == "actions"
    assert refused.details["consumed_after"] == 6 and refused.details["declared"] == 5
    assert "case" in refused.message
    assert _types(case)[-1] == "limit.exceeded"  # recorded, then refused
    assert case.balances() == before  # block_action: only this reservation fails
    assert _usage(case)[("case", "BUG-1", "actions")] == (5, 5, 0)
    assert _usage(case)[("hypothesis", "1/H1", "actions")] == (50, 3, 47)
    # retrying is evaluated afresh; the same refusal at the same consumption is not recorded twice
    again = _refused(budget.reserve, "H1", "q3", "source.read_context")
    assert again.code == LIMIT_EXCEEDED and again.details["recorded_seq"] == case.status()["package_generation"]
    assert _types(case)[-2:] == ["budget.failed", "limit.exceeded"]
    case.close()
    assert verify_case(package).events == len(_types(Case.open(package)))


def test_limits_as_tight_name_the_innermost_scope_then_the_first_dimension(package):
    """docs/scopes.md: with the same remaining, the innermost scope wins, then the dimension order
    units, actions, duration_ms, cost_usd_millicents (for a refusal, the account it ends, and
    advice's limited_by)."""
    case = _ready(package)
    budget, scopes = case.budget(), case.scopes()
    scopes.establish("case", {"actions": 3}, "controller")
    first = scopes.establish("revision:1", {"actions": 3}, "controller").seq
    assert budget.advice("H1")["limited_by"]["actions"] == "revision:1"  # as tight as the case: the inner one
    budget.reserve("H1", "a1", "source.read_context")
    budget.fail("H1", "a1", "done")
    spent = {r["hypothesis_id"]: r["spent_units"] for r in case.balances()}["H1"]
    scopes.establish("revision:1", {"actions": 1, "units": spent}, "controller", on_exhausted="task_failed",
                     causation_seq=first)
    refused = _refused(budget.reserve, "H1", "a2", "source.read_context")  # 0 left of both
    assert refused.code == LIMIT_EXCEEDED
    assert (refused.details["scope"], refused.details["dimension"]) == ("revision:1", "units")
    rows = {r["hypothesis_id"]: (r["status"], r["terminal_reason"]) for r in case.balances()}
    assert rows["H1"][1] == "limit:revision:1:units"
    case.close()


def test_spend_landing_exactly_on_a_units_limit_is_allowed_and_the_next_unit_is_not(package, example_policy):
    case = _ready(package, config=example_policy)
    budget = case.budget()
    case.scopes().establish("revision:1", {"units": 25}, "controller")
    for i, action in enumerate(("source.find_text", "source.find_text", "source.read_context")):  # 10 + 10 + 5
        budget.reserve("H1", f"q{i}", action)
        budget.fail("H1", f"q{i}", "done")
    assert _usage(case)[("revision", "1", "units")] == (25, 25, 0)
    refused = _refused(budget.reserve, "H2", "q9", "source.read_context")
    assert (refused.code, refused.details["scope"], refused.details["dimension"]) == (LIMIT_EXCEEDED, "revision:1", "units")
    assert refused.details["consumed_after"] == 30
    case.close()


def test_a_refund_frees_units_in_the_scope_and_a_pending_reservation_counts_in_full(package, example_policy):
    case = _ready(package, config=example_policy)
    budget = case.budget()
    case.scopes().establish("case", {"units": 15}, "controller")
    budget.reserve("H1", "q1", "source.find_text")  # 10 pending
    assert _usage(case)[("case", "BUG-1", "units")] == (15, 10, 5)
    assert _refused(budget.reserve, "H2", "q2", "source.find_text").code == LIMIT_EXCEEDED
    budget.record_result("H1", "q1", {"new": 1})
    budget.settle("H1", "q1", 100, "new")  # refund 8: net 2
    assert _usage(case)[("case", "BUG-1", "units")] == (15, 2, 13)
    budget.reserve("H2", "q2", "source.find_text")
    case.close()


def test_warning_at_ratio_0_8_fires_once_also_landing_exactly_on_80_percent_and_reestablishing_resets_it(package):
    """docs/scopes.md: limit.approaching once per scope, dimension and establishment."""
    case = _ready(package, hypotheses=1)
    budget, scopes = case.budget(), case.scopes()
    first = scopes.establish("hypothesis:1/H1", {"units": 50}, "controller", warning_ratio=0.8)
    assert first.events == ["scope.established"]
    seen = []
    for i in range(5):  # 10, 20, 30, 40 (exactly 80 %), 50
        before = case.status()["package_generation"]
        budget.reserve("H1", f"q{i}", "source.read_context")
        budget.fail("H1", f"q{i}", "done")
        seen.append(_types(case, before))
    assert seen[:3] == [["budget.reserved", "budget.failed"]] * 3
    assert seen[3] == ["budget.reserved", "limit.approaching", "budget.failed"]
    assert seen[4] == ["budget.reserved", "budget.failed"]
    rows = case.query("SELECT scope, dimension, consumed, establishment_seq FROM limit_warnings")
    assert rows == [{"scope": "hypothesis:1/H1", "dimension": "units", "consumed": 40,
                     "establishment_seq": first.seq}]
    # re-establishing (same issuer, causation_seq) resets the warning: 50 of 60 is over 80 %
    second = scopes.establish("hypothesis:1/H1", {"units": 60}, "controller", warning_ratio=0.8,
                              causation_seq=first.seq)
    assert second.events == ["scope.established", "limit.approaching"]
    assert len(case.query("SELECT * FROM limit_warnings")) == 2
    budget.reserve("H1", "q5", "source.read_context")
    assert _types(case)[-1] == "budget.reserved"  # still once per establishment
    case.close()


@pytest.mark.parametrize("ratio, warned_at", [(1, None), ("1.0", None), (0, 1), (0.0, 1), (Decimal("0.5"), 3)])
def test_ratio_one_never_warns_and_zero_warns_at_the_first_consumption(package, ratio, warned_at):
    case = _ready(package, hypotheses=1)
    budget = case.budget()
    case.scopes().establish("hypothesis:1/H1", {"actions": 5}, "controller", warning_ratio=ratio)
    found = None
    for i in range(1, 6):
        budget.reserve("H1", f"q{i}", "source.read_context")
        if _types(case)[-1] == "limit.approaching" and found is None:
            found = i
        budget.fail("H1", f"q{i}", "done")
    assert found == warned_at
    case.close()


@pytest.mark.parametrize("ratio, says", [("1", "never warns"), ("1.0000", "never warns"), ("0.8", "warn at 80%"),
                                         ("0", "warn at 0%"), ("0.9999", "warn at 99.99%")])
def test_the_establish_summary_says_a_ratio_of_one_never_warns(package, ratio, says):
    """A ratio of 1 never warns, even at the limit: the summary says so rather than "warn at 100%"."""
    _ready(package).close()
    done = CliRunner().invoke(cli_main, ["scope", "establish", str(package), "case", "--limit", "actions=1",
                                         "--warning-ratio", ratio])
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[1] == f"case actions: 0 of 1 used, 1 remaining ({says}, then block_action)"


def test_warning_ratio_is_held_in_basis_points_with_at_most_four_decimals():
    assert scope_rules.ratio_to_bps(0.8) == 8000
    assert scope_rules.ratio_to_bps("0.1234") == 1234
    assert scope_rules.ratio_to_bps(1) == 10000 and scope_rules.ratio_to_bps(0) == 0
    assert scope_rules.ratio_to_bps(0.3) == 3000  # not 2999: no float arithmetic
    assert [scope_rules.ratio_to_bps(text) for text in ("1000e-3", ".5", "0.00010000000000000000000000000000", "0E+99999")] \
        == [10000, 5000, 1, 0]
    from fractions import Fraction

    assert [scope_rules.ratio_to_bps(r) for r in (Fraction(1, 2), Decimal("0.1234"))] == [5000, 1234]
    numpy = pytest.importorskip("numpy")
    # every real number type, numpy's too, each judged by its own shortest text
    assert [scope_rules.ratio_to_bps(r) for r in (numpy.float64(0.5), numpy.float32(0.1), numpy.float16(0.25),
                                                   numpy.int64(1), numpy.uint8(1), numpy.int32(0))] \
        == [5000, 1000, 2500, 10000, 10000, 0]
    for bad in (Fraction(1, 3), numpy.float64(0.12345), numpy.uint8(2), 1 + 0j):
        with pytest.raises(LedgerError) as refused:
            scope_rules.ratio_to_bps(bad)
        assert refused.value.code == INVALID_ARGUMENT
    # exactly, past Decimal's 28 digits: none of these rounds to four decimals, and no other digits than ASCII
    for bad in (0.12345, "1.5", -0.1, True, "x", float("nan"), None, "0." + "9" * 32, "0.5" + "0" * 27 + "1",
                "1e-999999999", "\u0660.\u0665", "0.\uff15", 10**5000, -1, 2):
        with pytest.raises(LedgerError) as refused:
            scope_rules.ratio_to_bps(bad)
        assert refused.value.code == INVALID_ARGUMENT


def test_on_exhausted_ignore_is_an_invalid_capability_and_nothing_is_written(package):
    case = _ready(package)
    before = logical_dump(package / "ledger.sqlite")
    for bad in ("ignore", "retry", None):
        assert _refused(case.scopes().establish, "case", {"units": 5}, "controller",
                        on_exhausted=bad).code == INVALID_CAPABILITY
    assert logical_dump(package / "ledger.sqlite") == before
    case.close()


@pytest.mark.parametrize("call, code", [
    (dict(scope="nowhere"), INVALID_ARGUMENT), (dict(limits={"units": -1}), INVALID_ARGUMENT),
    (dict(limits={"weight": 3}), INVALID_ARGUMENT), (dict(delegate_limits={"units": 1.5}), INVALID_ARGUMENT),
    (dict(causation_seq=0), INVALID_ARGUMENT), (dict(issuer="bad id!"), INVALID_ID),
    (dict(delegate="no/slash"), INVALID_ID), (dict(issuer="bad id!", limits={"units": -1}), INVALID_ARGUMENT),
])
def test_establish_checks_arguments_then_ids_before_the_capability_in_the_documented_order(package, call, code):
    """docs/errors.md: INVALID_ARGUMENT, then INVALID_ID, then INVALID_CAPABILITY."""
    case = _ready(package)
    before = logical_dump(package / "ledger.sqlite")
    args = {"scope": "case", "limits": {"units": 5}, "issuer": "controller", **call}
    scope, limits, issuer = args.pop("scope"), args.pop("limits"), args.pop("issuer")
    assert _refused(case.scopes().establish, scope, limits, issuer, on_exhausted="ignore", **args).code == code
    line = json.dumps({"op": "establish", "scope": scope, "limits": limits, "issuer": issuer,
                       "on_exhausted": "ignore", **args})
    (result,) = apply_journal(case, [line], keep_going=True)
    assert result.error.code == code
    assert logical_dump(package / "ledger.sqlite") == before


@pytest.mark.parametrize("call, named", [
    (dict(scope="bogus"), "scope must be"), (dict(limits=None), "limits must map"),
    (dict(delegate_limits={"units": -1}), "delegate_limits.units"), (dict(issuer="bad id!"), "issuer"),
    (dict(causation_seq=0), "warning_ratio"), (dict(delegate="no/slash"), "warning_ratio"),
    (dict(on_exhausted="ignore"), "warning_ratio")])
def test_establish_checks_each_argument_in_the_order_it_takes_them_the_capability_last(package, call, named):
    """Each argument of establish is checked in the order establish takes them (scope, limits, issuer,
    delegate limits, warning ratio, causation seq, delegate), the capability last: a bad scope with a
    bad ratio was refused naming the ratio; the same through a journal line."""
    case = _ready(package)
    before = logical_dump(package / "ledger.sqlite")
    args = {"scope": "case", "limits": {"units": 5}, "issuer": "controller", "warning_ratio": 5, **call}
    scope, limits, issuer = args.pop("scope"), args.pop("limits"), args.pop("issuer")
    refused = _refused(case.scopes().establish, scope, limits, issuer, **args)
    code = INVALID_ID if named == "issuer" else INVALID_ARGUMENT
    assert refused.code == code and refused.message.startswith(named), refused.message
    line = json.dumps({"op": "establish", "scope": scope, "limits": limits, "issuer": issuer, **args})
    (result,) = apply_journal(case, [line], keep_going=True)
    assert result.error.code == code and result.error.message.startswith(named)
    assert logical_dump(package / "ledger.sqlite") == before
    case.close()
    case.close()


def test_delegate_limits_without_the_delegate_who_proposed_them_are_refused_and_nothing_written(package):
    """The event records the delegation chain [issuer, delegate]: a delegate's proposal with no
    delegate would leave the tighter limit with no one who proposed it."""
    case = _ready(package)
    before = logical_dump(package / "ledger.sqlite")
    refused = _refused(case.scopes().establish, "case", {"units": 50}, "controller", delegate_limits={"units": 40})
    assert refused.code == INVALID_ARGUMENT and "name the delegate" in refused.message
    line = json.dumps({"op": "establish", "scope": "case", "limits": {"units": 50}, "issuer": "controller",
                       "delegate_limits": {"units": 40}})
    (result,) = apply_journal(case, [line], keep_going=True)
    assert result.error.code == INVALID_ARGUMENT
    assert logical_dump(package / "ledger.sqlite") == before
    case.close()
    done = CliRunner().invoke(cli_main, ["scope", "establish", str(package), "case", "--limit", "units=50",
                                         "--delegate-limit", "units=40"])
    assert (done.exit_code, done.stderr) == (1, f"error: INVALID_ARGUMENT: {refused.message}\n")
    assert logical_dump(package / "ledger.sqlite") == before
    case = Case.open(package)
    case.scopes().establish("case", {"units": 50}, "controller", delegate_limits={"units": 40}, delegate="agent-7")
    (row,) = case.query("SELECT issuer, delegate FROM scope_establishments")
    assert (row["issuer"], row["delegate"]) == ("controller", "agent-7")
    assert [u["declared"] for u in case.scopes().usage("case") if u["dimension"] == "units"] == [40]
    case.close()


def test_an_older_ledgers_delegate_limits_without_a_delegate_still_verify_and_import(package, tmp_path, monkeypatch):
    """An older case-ledger took delegate_limits with no delegate: its history verifies and imports as it
    was (the rule refuses such a request only when it is made, never on replay)."""
    case = _ready(package)
    with monkeypatch.context() as older:  # the rule as an older case-ledger ran it
        older.setattr(scope_rules, "check_delegate", lambda request: None)
        case.scopes().establish("case", {"units": 50}, "controller", delegate_limits={"units": 40})
    export_case(case)
    case.close()
    assert verify_case(package).strict_failure() is None
    import_tree(package, tmp_path / "copy")
    with Case.open(tmp_path / "copy") as copy:
        assert [u["declared"] for u in copy.scopes().usage("case") if u["dimension"] == "units"] == [40]


@pytest.mark.parametrize("args, code", [(["nowhere", "--limit", "units=5"], INVALID_ARGUMENT),
                                        (["case", "--limit", "units=5", "--delegate", "no/slash"], INVALID_ID)])
def test_the_command_line_reports_a_bad_scope_or_id_before_a_bad_on_exhausted(package, args, code):
    _ready(package).close()
    exit_code, _, err = _cli("scope", "establish", str(package), *args, "--on-exhausted", "ignore")
    assert exit_code == 1 and err.startswith(f"error: {code}: ")


def test_money_reported_with_results_counts_from_then_on(package):
    case = _ready(package, hypotheses=1)
    budget = case.budget()
    case.scopes().establish("case", {"cost_usd_millicents": 1000}, "controller")
    budget.reserve("H1", "q1", "research.lookup")
    result = budget.record_result("H1", "q1", {"paper": 1}, cost_usd_millicents=1200)
    assert result.seq == case.status()["package_generation"] - 1  # followed by limit.approaching
    assert _types(case)[-2:] == ["budget.result_recorded", "limit.approaching"]
    budget.settle("H1", "q1", 50, "ok")
    refused = _refused(budget.reserve, "H1", "q2", "research.lookup")
    assert (refused.details["dimension"], refused.details["consumed_after"]) == ("cost_usd_millicents", 1200)
    assert _usage(case)[("case", "BUG-1", "cost_usd_millicents")] == (1000, 1200, 0)
    case.close()


def test_task_failed_ends_only_the_hypothesis_with_a_limit_reason(package):
    case = _ready(package)
    budget = case.budget()
    case.scopes().establish("hypothesis:1/H1", {"actions": 1}, "controller", on_exhausted="task_failed")
    budget.reserve("H1", "q1", "source.read_context")
    budget.fail("H1", "q1", "done")
    assert _refused(budget.reserve, "H1", "q2", "source.read_context").code == LIMIT_EXCEEDED
    assert _types(case)[-2:] == ["limit.exceeded", "budget.limit_terminated"]
    rows = {r["hypothesis_id"]: (r["status"], r["terminal_reason"]) for r in case.balances()}
    assert rows == {"H1": ("budget_exhausted", "limit:hypothesis:1/H1:actions"), "H2": ("new", None)}
    assert _refused(budget.reserve, "H1", "q2", "source.read_context").code == ACCOUNT_TERMINAL
    case.close()
    verify_case(package)


@pytest.mark.parametrize("limits, on_exhausted", [({"actions": 0}, "block_action"), ({"units": 20}, "block_action"),
                                                  ({"actions": 0}, "task_failed")])
def test_a_test_request_over_a_scope_limit_is_refused_like_a_reservation_and_records_its_test_action(
        package, example_policy, limits, on_exhausted):
    """Found by a break-it run: request_test over a limit raised KeyError('action') (its request
    has a kind, not an action), in the API, the CLI and journals alike."""
    case = _ready(package, config=example_policy)  # tests cost 30 (human) and 15 (automated) units
    case.scopes().establish("hypothesis:1/H1", limits, "controller", on_exhausted=on_exhausted)
    refused = _refused(case.budget().request_test, "H1", "t1", "human", "op-1")
    assert refused.code == LIMIT_EXCEEDED
    exceeded = case.events(0, with_body=True)[-2 if on_exhausted == "task_failed" else -1]
    body = json.loads(exceeded["body"])
    assert (exceeded["type"], body["action"], body["action_id"]) == ("limit.exceeded", "test.human", "t1")
    status = {r["hypothesis_id"]: r["status"] for r in case.balances()}["H1"]
    assert status == ("budget_exhausted" if on_exhausted == "task_failed" else "new")
    case.close()
    journal = package.parent / "more.jsonl"
    journal.write_text(json.dumps({"op": "request_test", "hypothesis": "H2", "action_id": "t2", "kind": "human",
                                   "operation_id": "op-2"}) + "\n")
    with Case.open(package) as again:
        again.scopes().establish("hypothesis:1/H2", limits, "controller", on_exhausted=on_exhausted)
    ran = subprocess.run([sys.executable, "-m", "ledger_cli", "apply", str(package), str(journal)],
                         capture_output=True, text=True)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert json.loads(ran.stdout.splitlines()[0])["error"]["code"] == LIMIT_EXCEEDED
    verify_case(package)


def test_scope_cancelled_with_a_pending_action_settles_it_starts_nothing_and_ends_every_account(package):
    """docs/scopes.md: scope_cancelled: every account in the scope terminal; pending actions still close."""
    case = _ready(package, hypotheses=3)
    budget = case.budget()
    case.scopes().establish("revision:1", {"actions": 2}, "controller", on_exhausted="scope_cancelled")
    budget.reserve("H1", "p1", "source.read_context")  # pending through the cancellation
    budget.reserve("H2", "q1", "source.read_context")
    budget.fail("H2", "q1", "done")
    refused = _refused(budget.reserve, "H3", "q2", "source.read_context")
    assert (refused.code, refused.details["scope"], refused.details["on_exhausted"]) == \
        (LIMIT_EXCEEDED, "revision:1", "scope_cancelled")
    reason = "limit:revision:1:actions"
    rows = {r["hypothesis_id"]: (r["status"], r["terminal_reason"], r["pending_action_id"]) for r in case.balances()}
    assert rows == {"H1": ("budget_exhausted", reason, "p1"), "H2": ("budget_exhausted", reason, None),
                    "H3": ("budget_exhausted", reason, None)}
    assert case.query("SELECT hypothesis_id, terminal_reason FROM terminations ORDER BY hypothesis_id") == [
        {"hypothesis_id": h, "terminal_reason": reason} for h in ("H1", "H2", "H3")]
    # the pending action can still be recorded and settled; nothing new starts
    budget.record_result("H1", "p1", {"late": True})
    settled = budget.settle("H1", "p1", 100, "useful after all")
    assert settled.action["status"] == "settled" and settled.state["H1"]["status"] == "budget_exhausted"
    for h in ("H1", "H2", "H3"):
        assert _refused(budget.reserve, h, "new", "source.read_context").code == ACCOUNT_TERMINAL
    assert case.query("SELECT * FROM balances EXCEPT SELECT * FROM balances_recomputed") == []
    case.close()
    verify_case(package)


def test_scope_cancelled_on_the_case_ends_the_accounts_of_every_revision(package):
    case = _ready(package, hypotheses=1)
    budget = case.budget()
    budget.reserve("H1", "q1", "source.read_context")
    budget.fail("H1", "q1", "done")
    case.transition("EVALUATING")
    case.open_revision([{"statement": "next"}, {"statement": "other"}], 50)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget.initialize()
    case.scopes().establish("case", {"actions": 1}, "controller", on_exhausted="scope_cancelled")
    # revision 1's H1 was exhausted by nothing yet: it is not terminal
    assert _refused(budget.reserve, "H1", "r2", "source.read_context").code == LIMIT_EXCEEDED
    assert _types(case)[-3:] == ["limit.exceeded", "budget.limit_terminated", "budget.limit_terminated"]
    statuses = {(r["revision"], r["hypothesis_id"]): r["terminal_reason"] for r in case.balances()}
    assert set(statuses.values()) == {"limit:case:actions"} and len(statuses) == 3
    case.close()
    verify_case(package)


# --- the duration clock -----------------------------------------------------------------------
def test_duration_ms_runs_on_the_journal_clock_and_a_clock_stepping_back_is_clamped(package):
    case = _ready(package)
    lines = [
        {"op": "establish", "scope": "case", "limits": {"duration_ms": 60000}, "issuer": "controller",
         "at": "2026-03-01T10:00:00Z"},
        {"op": "reserve", "hypothesis": "H1", "action_id": "q1", "action": "source.read_context",
         "at": "2026-03-01T10:00:30Z"},
        {"op": "fail", "hypothesis": "H1", "action_id": "q1", "reason": "x", "at": "2026-03-01T10:00:30Z"},
        # the clock steps back 20 s: clamped to 10:00:30, consumption stays 30000, never less
        {"op": "reserve", "hypothesis": "H2", "action_id": "q2", "action": "source.read_context",
         "at": "2026-03-01T10:00:10Z"},
        {"op": "check", "hypothesis": "H1", "action": "source.read_context", "at": "2026-03-01T10:00:59.999Z"},
        {"op": "reserve", "hypothesis": "H1", "action_id": "q3", "action": "source.read_context",
         "at": "2026-03-01T10:01:00.001Z"},
    ]
    results = list(apply_journal(case, [json.dumps(line) for line in lines], keep_going=True))
    assert [r.ok for r in results] == [True, True, True, True, True, False]
    assert case.query("SELECT created_at FROM events WHERE seq = ?", (results[3].seq,))[0]["created_at"] == \
        "2026-03-01T10:00:30.000000Z"
    assert results[4].result["allowed"] is True  # 59,999 ms: still inside
    assert results[5].error.code == LIMIT_EXCEEDED
    assert (results[5].error.details["dimension"], results[5].error.details["consumed_after"]) == ("duration_ms", 60001)
    assert _usage(case)[("case", "BUG-1", "duration_ms")] == (60000, 60001, 0)
    assert scope_rules.elapsed_ms("2026-03-01T10:00:30.000000Z", "2026-03-01T10:00:10.000000Z") == 0
    case.close()
    verify_case(package)


def _exceedances(case: Case) -> int:
    return case.query("SELECT COUNT(*) AS n FROM limit_exceedances")[0]["n"]


def test_an_identical_retry_of_a_refused_reservation_answers_with_the_recorded_refusal(package, tmp_path):
    """The same request refused against the same limit at the same consumption is one fact: retries
    are answered with the recorded refusal (its seq in ``recorded_seq``) and append nothing. Events
    that leave that limit's numbers alone do not make it new; a change of consumption, another
    request or another limit does."""
    case = _ready(package, hypotheses=3)
    budget = case.budget()
    established = case.scopes().establish("hypothesis:1/H1", {"units": 15}, "controller").seq
    case.scopes().establish("revision:1", {"units": 1000}, "controller")
    budget.reserve("H1", "q0", "source.find_text")
    budget.record_result("H1", "q0", {"found": 1})  # awaiting: a settle later refunds part of it
    budget.settle("H1", "q0", 0, "nothing new")
    head = case.status()["package_generation"]
    refusals = [_refused(budget.reserve, "H1", "q1", "source.find_text") for _ in range(200)]
    assert {(r.code, r.details["consumed_after"]) for r in refusals} == {(LIMIT_EXCEEDED, 20)}
    assert _exceedances(case) == 1 and case.status()["package_generation"] == head + 1
    assert "recorded_seq" not in refusals[0].details
    assert {r.details["recorded_seq"] for r in refusals[1:]} == {head + 1}
    budget.reserve("H2", "b1", "source.read_context")  # another hypothesis: H1's limit is unchanged
    budget.fail("H2", "b1", "x")
    assert _refused(budget.reserve, "H1", "q1", "source.find_text").details["recorded_seq"] == head + 1
    assert _exceedances(case) == 1
    assert "recorded_seq" not in _refused(budget.reserve, "H1", "q2", "source.find_text").details  # another request
    assert _exceedances(case) == 2
    case.scopes().establish("hypothesis:1/H1", {"units": 12}, "controller", causation_seq=established)  # another limit
    assert "recorded_seq" not in _refused(budget.reserve, "H1", "q1", "source.find_text").details
    assert _exceedances(case) == 3
    export_case(case)
    case.close()
    assert verify_case(package).events == head + 7
    assert import_tree(package, tmp_path / "copy").head_seq == head + 7


def test_a_refund_in_the_scope_makes_a_retried_refusal_a_new_fact(package):
    case = _ready(package, hypotheses=3)
    budget = case.budget()
    case.scopes().establish("case", {"units": 22}, "controller")
    budget.reserve("H1", "a", "source.find_text")
    budget.fail("H1", "a", "x")
    budget.reserve("H2", "b", "source.find_text")  # the case holds 20 of its 22 units
    first = _refused(budget.reserve, "H3", "c", "source.find_text")
    assert first.details["consumed_after"] == 30 and "recorded_seq" not in first.details
    assert _refused(budget.reserve, "H3", "c", "source.find_text").details["recorded_seq"] > 0
    budget.record_result("H2", "b", {"found": "something"})
    budget.settle("H2", "b", 30, "a little")  # refund 2: the case now holds 18
    after = _refused(budget.reserve, "H3", "c", "source.find_text")
    assert after.details["consumed_after"] == 28 and "recorded_seq" not in after.details
    assert _exceedances(case) == 2
    case.close()
    verify_case(package)


def test_refunds_and_reservations_adding_up_to_nothing_leave_a_retried_refusal_the_same_fact(package):
    case = _ready(package, hypotheses=3)
    budget = case.budget()
    case.scopes().establish("case", {"units": 29}, "controller")
    budget.reserve("H2", "b1", "source.read")
    budget.reserve("H3", "c1", "source.read")  # the case holds 20 of its 29 units
    first = _refused(budget.reserve, "H1", "a1", "source.read")
    assert first.details["consumed_after"] == 30 and "recorded_seq" not in first.details
    budget.record_result("H2", "b1", {"f": 1})
    assert budget.settle("H2", "b1", 100, "refund 8").action["reward_units"] == 8
    budget.record_result("H3", "c1", {"f": 2})
    assert budget.settle("H3", "c1", 25, "refund 2").action["reward_units"] == 2
    budget.reserve("H2", "b2", "source.read")  # 10 more: the case holds 20 again
    again = _refused(budget.reserve, "H1", "a1", "source.read")
    assert again.details["consumed_after"] == 30 and again.details["recorded_seq"] > 0
    assert _exceedances(case) == 1
    case.close()
    verify_case(package)


def test_refusals_recorded_before_the_retry_rule_still_verify_and_export_byte_identically(tmp_path):
    """``tests/data/repeated-limit-refusals`` was exported by the code before identical retries were
    answered with the recorded refusal (``tests/data/repeated-limit-refusals.build.txt``): three
    identical limit.exceeded events. The history replays as written; a new identical retry is answered
    with the newest of them."""
    source = REPO / "tests" / "data" / "repeated-limit-refusals"
    import_tree(source, tmp_path / "case")
    assert verify_case(tmp_path / "case").events == 11
    with Case.open(tmp_path / "case") as case:
        assert _exceedances(case) == 3
        export_case(case)
        again = _refused(case.budget().reserve, "H1", "q2", "source.read_context")
        assert again.code == LIMIT_EXCEEDED and again.details["recorded_seq"] == 11
        assert case.status()["package_generation"] == 11
    for path in source.rglob("*"):
        if path.is_file():
            assert (tmp_path / "case" / path.relative_to(source)).read_bytes() == path.read_bytes(), path


_STEP = {"hypothesis": "H1", "action_id": "q1"}
#: (lines before the one that passes the warning point, that line): each kind of event checks the warning
_AFTER_EACH_EVENT = {
    "record_result": ([{"op": "reserve", **_STEP, "action": "source.read_context"}],
                      {"op": "record_result", **_STEP, "evidence": {"x": 1}}),
    "settle": ([{"op": "reserve", **_STEP, "action": "source.read_context"},
                {"op": "record_result", **_STEP, "evidence": {"x": 1}}],
               {"op": "settle", **_STEP, "semantic_score": 50, "reason": "r"}),
    "fail": ([{"op": "reserve", **_STEP, "action": "source.read_context"}],
             {"op": "fail", **_STEP, "reason": "timed out"}),
    "grant": ([], {"op": "grant", "hypothesis": "H1", "units": 5, "issuer": "controller", "reason": "r",
                   "grant_id": "g1"}),
    "reject": ([], {"op": "reject", "hypothesis": "H1", "reason": "contradicted"}),
    "request_increase": ([], {"op": "request_increase", "scope": "case", "dimension": "units", "amount": 5,
                              "requester": "agent", "reason": "r"}),
    "transition": ([], {"op": "transition", "to": "BLOCKED"}),
}


@pytest.mark.parametrize("scope", ["case", "revision:1", "hypothesis:1/H1"])
@pytest.mark.parametrize("kind", list(_AFTER_EACH_EVENT))
@pytest.mark.sampled(every=4)
def test_a_duration_warning_is_checked_after_each_event_of_a_scope_not_only_after_a_reservation(package, kind,
                                                                                               scope):
    """A duration grows with time alone: the event that first finds it at the warning point is followed
    by limit.approaching (once), whatever the event; a hypothesis's scope holds only that hypothesis's
    events, so a case event (a transition, a request) does not check it."""
    case = _ready(package)
    before, passing = _AFTER_EACH_EVENT[kind]
    at = lambda second: f"2026-03-01T10:00:{second:02d}Z"  # noqa: E731
    lines = [{"op": "establish", "scope": scope, "limits": {"duration_ms": 10_000}, "issuer": "controller",
              "warning_ratio": 0.5, "at": at(0)}]
    lines += [{**line, "at": at(1)} for line in before] + [{**passing, "at": at(5)}, {**passing, "at": at(6)}]
    results = list(apply_journal(case, [json.dumps(line) for line in lines], keep_going=True))
    assert results[-2].ok, results[-2].error
    holds = scope != "hypothesis:1/H1" or "hypothesis" in passing
    warned = case.query("SELECT seq, body FROM events WHERE type = 'limit.approaching'")
    if not holds:
        assert warned == []
    else:
        [row] = warned  # once, though the last line comes later still
        body = json.loads(row["body"])
        assert (body["scope"], body["dimension"], body["declared"], body["consumed"]) == (scope, "duration_ms",
                                                                                          10_000, 5_000)
        assert body["request"]["op"] == passing["op"]
        assert row["seq"] == results[-2].seq + 1  # right after the passing line's own event
    # the line's result names its own event, not the warning after it
    own = case.query("SELECT type FROM events WHERE seq = ?", (results[-2].seq,))[0]["type"]
    assert own != "limit.approaching" and own.split(".")[0] in ("budget", "case", "scope")
    case.close()
    verify_case(package)


def test_a_duration_limit_dropped_by_a_new_establishment_warns_no_more_and_the_case_verifies(package):
    case = _ready(package)
    lines = [{"op": "establish", "scope": "case", "limits": {"duration_ms": 10_000}, "issuer": "controller",
              "warning_ratio": 0.5, "at": "2026-03-01T10:00:00Z"},
             {"op": "establish", "scope": "case", "limits": {"units": 1000}, "issuer": "controller",
              "causation_seq": None, "at": "2026-03-01T10:00:01Z"},
             {"op": "reject", "hypothesis": "H1", "reason": "contradicted", "at": "2026-03-01T10:00:09Z"}]
    first = list(apply_journal(case, [json.dumps(lines[0])]))[0]
    lines[1]["causation_seq"] = first.seq
    assert all(r.ok for r in apply_journal(case, [json.dumps(line) for line in lines[1:]]))
    assert "limit.approaching" not in _types(case)
    case.close()
    verify_case(package)


@pytest.mark.parametrize("field, value", [("created_at", "2026-03-01T10:59:00.000000Z"), ("actor", "someone-else")])
def test_a_later_event_of_an_operation_rewritten_to_another_time_or_actor_is_caught_by_verify(package, field, value):
    """An operation's events are written in one transaction, with one time and one actor: a history
    rewritten whole (every hash recomputed) that moves the warning after a settle later, which would
    change the duration it and every later limit measure, is INTEGRITY_ERROR at that event."""
    from test_export_verify import _edited_past_every_trigger, _rechained_from
    case = _ready(package)
    case.scopes().establish("case", {"duration_ms": 10_000}, "controller", warning_ratio=0.5,
                            at="2026-03-01T10:00:00Z")
    budget = case.budget()
    budget.reserve("H1", "q1", "source.read_context", at="2026-03-01T10:00:01Z")
    budget.record_result("H1", "q1", {"x": 1}, at="2026-03-01T10:00:02Z")
    settled = budget.settle("H1", "q1", 50, "r", at="2026-03-01T10:00:06Z")
    [warning] = case.query("SELECT seq, body FROM events WHERE type = 'limit.approaching'")
    assert warning["seq"] == settled.seq + 1
    case.close()
    forged = json.loads(warning["body"])
    forged[field] = value
    _edited_past_every_trigger(package, *_rechained_from(package, warning["seq"], json.dumps(forged)),
                               ("UPDATE events SET created_at = ? WHERE seq = ?",
                                (forged["created_at"], warning["seq"])))
    with pytest.raises(LedgerError) as caught:
        verify_case(package)
    assert caught.value.code == "INTEGRITY_ERROR" and caught.value.details["seq"] == warning["seq"]
    assert "not those of its operation's first event" in caught.value.message


@pytest.mark.slow  # a tool reply of 2 MB, stored three times
def test_a_warning_after_an_operation_as_large_as_its_allowance_is_written_with_it(package):
    """A warning carries the request of the operation it follows: after a tool call whose reply passes
    event_bytes_max (as the evidence it carries may), it is held to the operation's own allowance,
    so the warning never turns a call that fits into LIMIT_REACHED."""
    (package / "sources").mkdir(exist_ok=True)
    (package / "sources" / "big.py").write_text("".join(f"v{n} = '{'x' * 1000}'\n" for n in range(2000)))
    case = _ready(package, hypotheses=1, units=1000)
    case.scopes().establish("case", {"duration_ms": 100_000}, "controller", warning_ratio=0.5,
                            at="2026-03-01T10:00:00Z")
    case.budget().reserve("H1", "a1", "source.read_context", at="2026-03-01T10:00:10Z")
    run = case.budget().run_tool("H1", "a1", "source.read_context",
                                 {"path": "sources/big.py", "start_line": 1, "end_line": 2000},
                                 at="2026-03-01T10:01:20Z")
    assert run.budget.action["status"] == "awaiting_assessment"
    [warning] = case.query("SELECT length(body) AS n FROM events WHERE type = 'limit.approaching'")
    assert warning["n"] > 2 * 1024 * 1024  # past event_bytes_max, as the reply it follows
    case.close()
    verify_case(package)


def test_a_lifecycle_result_names_its_own_event_when_a_warning_follows_it_as_its_repeat_does(package):
    case = _ready(package)
    case.scopes().establish("case", {"duration_ms": 10_000}, "controller", warning_ratio=0.5,
                            at="2026-03-01T10:00:00Z")
    moved = case.transition("BLOCKED", at="2026-03-01T10:00:06Z")
    assert _types(case, moved.seq - 1) == ["case.transitioned", "limit.approaching"]
    assert moved.event_ref == case.event_ref(moved.seq)
    case.close()
    verify_case(package)


def test_a_duration_warning_at_a_reservation_is_written_once_with_the_others(package):
    """A reservation checks every dimension, the duration among them: the event after each event adds
    no second warning."""
    case = _ready(package)
    lines = [{"op": "establish", "scope": "case", "limits": {"duration_ms": 10_000, "actions": 2},
              "issuer": "controller", "warning_ratio": 0.5, "at": "2026-03-01T10:00:00Z"},
             {"op": "reserve", **_STEP, "action": "source.read_context", "at": "2026-03-01T10:00:06Z"}]
    list(apply_journal(case, [json.dumps(line) for line in lines]))
    warned = [json.loads(r["body"])["dimension"] for r in
              case.query("SELECT body FROM events WHERE type = 'limit.approaching' ORDER BY seq")]
    assert warned == ["actions", "duration_ms"]
    case.close()
    verify_case(package)


def test_a_duration_limit_refusal_is_recorded_once_while_the_clock_runs_on(package):
    case = _ready(package)
    lines = [{"op": "establish", "scope": "case", "limits": {"duration_ms": 1000}, "issuer": "controller",
              "at": "2026-03-01T10:00:00Z"}]
    lines += [{"op": "reserve", "hypothesis": "H1", "action_id": "q1", "action": "source.read_context",
               "at": f"2026-03-01T10:00:{second:02d}Z"} for second in range(2, 40)]
    results = list(apply_journal(case, [json.dumps(line) for line in lines], keep_going=True))
    assert [r.error.code for r in results[1:]] == [LIMIT_EXCEEDED] * 38
    assert [r.error.details["consumed_after"] for r in results[1:3]] == [2000, 3000]  # the refusal says now
    assert _exceedances(case) == 1
    case.close()
    verify_case(package)


@pytest.mark.parametrize("room, code, budget_events", [(1, LIMIT_REACHED, 1), (2, LIMIT_EXCEEDED, 2)])
def test_limit_terminated_events_count_against_budget_events_max(package, room, code, budget_events):
    """A refusal that ends accounts writes budget.limit_terminated, a budget event: without room for
    it under budget_events_max it is LIMIT_REACHED and writes nothing."""
    case = Case.create(package, "BUG-1", analysis_config=AnalysisConfig(limits={"budget_events_max": room}))
    case.open_revision([{"statement": "a"}, {"statement": "b"}], 100)
    case.transition("INVESTIGATING_HYPOTHESES")
    case.budget().initialize()
    case.scopes().establish("hypothesis:1/H1", {"actions": 0}, "controller", on_exhausted="task_failed")
    head = case.status()["package_generation"]
    assert _refused(case.budget().reserve, "H1", "q1", "source.read_context").code == code
    assert case.query("SELECT COUNT(*) AS n FROM events WHERE stream = 'budget'")[0]["n"] == budget_events
    assert case.status()["package_generation"] == head + (0 if code == LIMIT_REACHED else 2)
    case.close()
    verify_case(package)


def _case_events(case: Case) -> int:
    return case.query("SELECT COUNT(*) AS n FROM events WHERE stream = 'case'")[0]["n"]


def test_recorded_refusals_with_new_action_ids_stop_at_case_events_max(package):
    """docs/scopes.md "Limits on the history": every refused reservation with a new action id records a
    limit.exceeded event; past case_events_max the refusal is LIMIT_REACHED quoting the LIMIT_EXCEEDED
    it could not record, and nothing is written. The lifecycle is always written (it still counts)."""
    case = Case.create(package, "BUG-1", analysis_config=AnalysisConfig(limits={"case_events_max": 8}))
    case.open_revision([{"statement": "a"}], 100)
    case.transition("INVESTIGATING_HYPOTHESES")
    case.budget().initialize()
    case.scopes().establish("case", {"actions": 0}, "controller")
    assert _case_events(case) == 4  # created, opened, transitioned, established
    codes = [_refused(case.budget().reserve, "H1", f"q{n}", "source.read_context").code for n in range(10)]
    assert codes == [LIMIT_EXCEEDED] * 4 + [LIMIT_REACHED] * 6
    assert _exceedances(case) == 4 and _case_events(case) == 8
    refused = _refused(case.budget().reserve, "H1", "q-new", "source.read_context")
    assert refused.details == {"limit": "case_events_max", "case_events": 8}
    assert "this operation needs 1; the refusal it would record was not recorded: LIMIT_EXCEEDED: " in refused.message
    head = case.status()["package_generation"]
    for call in (lambda: case.scopes().request_increase("case", "actions", 5, "agent", "more please"),
                 lambda: case.scopes().establish("hypothesis:1/H1", {"actions": 3}, "controller")):
        assert _refused(call).code == LIMIT_REACHED
    assert case.status()["package_generation"] == head  # nothing written
    case.transition("EVALUATING")  # the lifecycle is never refused for room
    assert _case_events(case) == 9
    case.close()
    verify_case(package)  # replay holds no operational limits: the history verifies


def test_blocking_and_new_revisions_count_against_case_events_max_but_the_way_out_is_always_open(package):
    """Moving into BLOCKED and opening revisions can be repeated at will: they stop at case_events_max.
    Leaving BLOCKED, evaluating and closing are always written, so a case at the limit can still end."""
    case = Case.create(package, "BUG-1", analysis_config=AnalysisConfig(limits={"case_events_max": 6}))
    case.open_revision([{"statement": "a"}], 100)
    case.transition("INVESTIGATING_HYPOTHESES")
    for _ in range(2):
        case.transition("BLOCKED")
        case.transition("INVESTIGATING_HYPOTHESES")
    assert _case_events(case) == 7  # created 1, opened 2, investigating 3, 2 x (blocked, investigating)
    refused = _refused(case.transition, "BLOCKED")
    assert (refused.code, refused.details["limit"]) == (LIMIT_REACHED, "case_events_max")
    assert case.status()["state"] == "INVESTIGATING_HYPOTHESES" and _case_events(case) == 7
    case.transition("EVALUATING")
    case.transition("CLOSED")
    assert _refused(case.open_revision, [{"statement": "b"}], 100).code == LIMIT_REACHED
    assert case.status()["state"] == "CLOSED" and _case_events(case) == 9
    case.close()
    verify_case(package)


def test_a_refusal_that_ends_an_account_is_recorded_past_case_events_max(package):
    """Ending accounts happens once per account: its limit.exceeded is written even without case room."""
    case = Case.create(package, "BUG-1", analysis_config=AnalysisConfig(limits={"case_events_max": 4}))
    case.open_revision([{"statement": "a"}, {"statement": "b"}], 100)
    case.transition("INVESTIGATING_HYPOTHESES")
    case.budget().initialize()
    case.scopes().establish("hypothesis:1/H1", {"actions": 0}, "controller", on_exhausted="task_failed")
    assert _refused(case.budget().reserve, "H1", "q1", "source.read_context").code == LIMIT_EXCEEDED
    assert case.budget().snapshot().state["H1"]["status"] == "budget_exhausted"
    assert _exceedances(case) == 1 and _case_events(case) == 5
    case.close()
    verify_case(package)


RETRY_SCRIPT = """
import sys
from ledger import Case, LedgerError
with Case.open(sys.argv[1], actor="worker") as case:
    codes = set()
    for _ in range(25):
        try:
            case.budget().reserve("H1", "q-over", "source.read_context")
        except LedgerError as e:
            codes.add(e.code)
    print(",".join(sorted(codes)))
"""


@pytest.mark.slow
def test_eight_processes_retrying_one_refused_reservation_record_it_once(package):
    case = _ready(package)
    case.scopes().establish("hypothesis:1/H1", {"actions": 0}, "controller")
    case.close()
    workers = [subprocess.Popen([sys.executable, "-c", RETRY_SCRIPT, str(package)], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    outputs = [w.communicate(timeout=300)[0].strip() for w in workers]
    assert outputs == [LIMIT_EXCEEDED] * 8
    with Case.open(package) as case:
        assert _exceedances(case) == 1
    verify_case(package)


# --- 8.2: authority -----------------------------------------------------------------------------
def test_a_delegate_raising_its_own_limit_or_granting_itself_units_is_denied_and_nothing_written(package):
    case = _ready(package)
    first = case.scopes().establish("hypothesis:1/H1", {"units": 50, "actions": 10}, "controller",
                                    delegate_limits={"units": 40}, delegate="agent-7")
    assert [r["declared"] for r in first.usage] == [40, 10]  # the stricter proposal per dimension
    body = json.loads(case.events(first.seq - 1, with_body=True)[0]["body"])
    assert body["delegation_chain"] == ["controller", "agent-7"] and body["issuer"] == "controller"
    case.close()
    before = logical_dump(package / "ledger.sqlite")
    delegate = Case.open(package, actor="agent-7")
    for call in (
        lambda: delegate.scopes().establish("hypothesis:1/H1", {"units": 500}, "agent-7", causation_seq=first.seq),
        lambda: delegate.scopes().establish("hypothesis:1/H2", {"units": 500}, "agent-7"),
        lambda: delegate.budget().grant("H1", 100, "agent-7", "I need more", "g1"),
    ):
        assert _refused(call).code == AUTHORITY_DENIED
    delegate.close()
    assert logical_dump(package / "ledger.sqlite") == before


def test_a_change_not_naming_the_newest_establishment_is_a_wrong_causation_seq_or_denied(package):
    """A re-establishment that leaves causation_seq out, or names an older establishment, reuses an earlier
    establishment's identity with other inputs: from its issuer it is a wrong causation_seq
    (INVALID_ARGUMENT naming the seq to give), from anyone else AUTHORITY_DENIED; nothing is written, and
    the identical request is still that establishment again."""
    case = _ready(package)
    scopes = case.scopes()
    first = scopes.establish("case", {"units": 50}, "lead")
    second = scopes.establish("case", {"units": 60}, "lead", causation_seq=first.seq)
    generation = case.status()["package_generation"]
    for causation in (None, first.seq):
        refused = _refused(scopes.establish, "case", {"units": 70}, "lead", causation_seq=causation)
        assert (refused.code, refused.details["expected"]) == (INVALID_ARGUMENT, second.seq)
        assert f"causation_seq must be {second.seq}" in refused.message
        assert f"--causation-seq {second.seq}" in refused.message and "None" not in refused.message
        assert _refused(scopes.establish, "case", {"units": 70}, "mallory", causation_seq=causation).code == AUTHORITY_DENIED
    assert case.status()["package_generation"] == generation
    assert scopes.establish("case", {"units": 50}, "lead").reused
    assert scopes.establish("case", {"units": 60}, "lead", causation_seq=first.seq).reused


def test_changes_need_the_previous_establishment_seq(package):
    case = _ready(package)
    scopes = case.scopes()
    first = scopes.establish("case", {"units": 50}, "lead")  # the case scope: its first issuer owns it
    # without causation_seq it is the first establishment's identity, with other inputs: a wrong causation_seq
    assert _refused(scopes.establish, "case", {"units": 60}, "lead").code == INVALID_ARGUMENT
    assert _refused(scopes.establish, "case", {"units": 60}, "lead", causation_seq=first.seq - 1).code == INVALID_ARGUMENT
    assert _refused(scopes.establish, "case", {"units": 60}, "controller", causation_seq=first.seq).code == AUTHORITY_DENIED
    second = scopes.establish("case", {"units": 60}, "lead", causation_seq=first.seq)
    assert second.usage[0]["declared"] == 60
    again = scopes.establish("case", {"units": 60}, "lead", causation_seq=first.seq)
    assert again.reused and again.seq == second.seq
    assert _refused(scopes.establish, "hypothesis:2/H1", {"units": 1}, "controller").code == INVALID_ARGUMENT
    case.close()


def test_revision_scopes_need_an_initialized_budget(package):
    case = start_case(package)
    assert _refused(case.scopes().establish, "revision:1", {"units": 5}, "controller").code == NOT_INITIALIZED
    case.scopes().establish("case", {"units": 5}, "controller")  # allowed from the start
    case.close()


def test_request_increase_is_an_event_that_changes_nothing(package):
    case = _ready(package)
    scopes = case.scopes()
    scopes.establish("revision:1", {"units": 30}, "controller")
    usage = _usage(case)
    asked = scopes.request_increase("revision:1", "units", 20, "agent-7", "H1 is promising")
    assert asked.events == ["scope.increase_requested"] and not asked.reused
    assert scopes.request_increase("revision:1", "units", 20, "agent-7", "H1 is promising").reused
    assert _usage(case) == usage
    assert case.query("SELECT scope, dimension, amount, requester FROM increase_requests") == [
        {"scope": "revision:1", "dimension": "units", "amount": 20, "requester": "agent-7"}]
    case.close()


def test_a_grant_adds_units_keeps_a_terminal_account_terminal_and_resets_scarcity(package):
    case = _ready(package, hypotheses=2, units=20)
    budget = case.budget()
    budget.reserve("H1", "q1", "source.read_context")
    budget.fail("H1", "q1", "x")
    assert budget.price_signal("H1", "source.read_context")["scarcity_bps"] == 10000 + 30000 * 50 // 100
    budget.reject("H2", "wrong")
    granted = budget.grant("H1", 30, "controller", "worth it", "g1")
    assert granted.state["H1"]["granted_units"] == 30 and granted.state["H1"]["remaining_units"] == 40
    assert budget.price_signal("H1", "source.read_context")["scarcity_bps"] == 10000 + 30000 * 20 // 100
    assert budget.grant("H2", 5, "controller", "appeal", "g2").state["H2"]["status"] == "rejected"
    assert budget.grant("H1", 30, "controller", "worth it", "g1").reused
    assert case.query("SELECT * FROM balances EXCEPT SELECT * FROM balances_recomputed") == []
    case.close()
    verify_case(package)


# --- 8.4: the soft gate ---------------------------------------------------------------------------
def test_check_reports_the_tightest_remaining_tier_and_scarcity(package, example_policy):
    case = _ready(package, config=example_policy)
    budget = case.budget()
    assert budget.check("H1", "source.find_text").to_dict() == {
        "allowed": True, "cost": 10, "remaining": 100, "pct_remaining": 100, "tier": "full", "scarcity_bps": 10000}
    case.scopes().establish("hypothesis:1/H1", {"units": 45}, "controller")
    assert budget.check("H1", "source.find_text")["remaining"] == 45
    assert budget.check("H1", "source.find_text")["tier"] == "shallow"  # 45 % of 100
    for i in range(4):
        budget.reserve("H1", f"q{i}", "source.find_text")
        budget.fail("H1", f"q{i}", "x")
    reading = budget.check("H1", "source.find_text")  # 5 left in the scope: not allowed, never raised
    assert (reading["allowed"], reading["remaining"], reading["tier"]) == (False, 5, "deferred")
    assert budget.check("H1", "source.read_context")["allowed"] is True
    signal = budget.price_signal("H1", "source.find_text").to_dict()
    assert signal == {"cost": 10, "resource_cost": 22, "scarcity_bps": 22000}  # account at 60 %
    assert budget.remaining("H1").to_dict() == {"budget": 100, "spent": 40, "remaining": 60, "pct_remaining": 60}
    case.close()


@pytest.mark.parametrize("kind,price", [("human", 40), ("automated", 25)])
def test_the_gate_quotes_a_test_at_the_price_request_test_charges(package, kind, price):
    """check and price quote test.KIND at test_costs, as request_test debits it: the gate never calls a
    test affordable that request_test refuses with INSUFFICIENT_BUDGET, nor refuses one it accepts."""
    config = BudgetConfig.from_mapping({"test_costs": {"human": 40, "automated": 25}, "default_action_cost": 7})
    case = _ready(package, units=price + 3, config=config)
    budget = case.budget()
    reading = budget.check("H1", f"test.{kind}")
    assert (reading["cost"], reading["allowed"]) == (price, True)
    assert budget.price_signal("H1", f"test.{kind}").to_dict()["cost"] == price
    assert budget.request_test("H1", "t1", kind, "op-t1").action["cost_units"] == price
    budget.reserve("H2", "q1", "source.read_context")
    budget.fail("H2", "q1", "x")  # H2 now holds price + 3 - 7 < price
    refused_reading = budget.check("H2", f"test.{kind}")
    assert (refused_reading["cost"], refused_reading["allowed"], refused_reading["tier"]) == (price, False, "deferred")
    with pytest.raises(LedgerError) as refused:
        budget.request_test("H2", "t2", kind, "op-t2")
    assert refused.value.code == INSUFFICIENT_BUDGET
    assert budget.check("H2", "test.other")["cost"] == 7  # not a test kind: an ordinary action name
    out = CliRunner().invoke(cli_main, ["budget", "check", str(package), "H1", f"test.{kind}", "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["cost"] == price
    case.close()


def test_tiers_follow_the_thresholds():
    policy = BudgetConfig()
    assert [gate_rules.tier(p, True, policy) for p in (100, 50, 49, 20, 19, 0)] == \
        ["full", "full", "shallow", "shallow", "deferred", "deferred"]
    assert gate_rules.tier(100, False, policy) == "deferred"
    assert gate_rules.resource_cost(10, 16600) == 17 and gate_rules.resource_cost(10, 10000) == 10


OPS = st.lists(st.tuples(st.sampled_from(["reserve", "settle", "fail", "grant", "check"]),
                         st.sampled_from(["H1", "H2"]), st.integers(0, 100)), max_size=14)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, units=st.integers(5, 60), shallow=st.integers(0, 100), deferred=st.integers(0, 100))
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_properties_scarcity_never_falls_between_grants_tiers_follow_check_never_raises_and_books_balance(
        tmp_path_factory, ops, units, shallow, deferred):
    """hypothesis: scarcity never decreases between grants; tiers follow the thresholds; check
    never raises on any budget state; spent + remaining = budget."""
    shallow, deferred = max(shallow, deferred), min(shallow, deferred)
    policy = BudgetConfig.from_mapping({"tier_shallow_below_pct": shallow, "tier_deferred_below_pct": deferred,
                                        "action_costs": {"source.read_context": 3}})
    package = make_package(tmp_path_factory.mktemp("p") / "case")
    case = _ready(package, units=units, config=policy)
    budget = case.budget()
    case.scopes().establish("revision:1", {"units": units + 10, "actions": 8}, "controller")
    last = {h: 0 for h in ("H1", "H2")}
    for n, (op, h, score) in enumerate(ops):
        try:
            if op == "reserve":
                budget.reserve(h, f"a{n}", "source.read_context" if score % 2 else "source.find_text")
            elif op in ("settle", "fail"):
                pending = budget.snapshot().state[h]["pending_action_id"]
                if pending and op == "settle":
                    budget.record_result(h, pending, {"n": n})
                    budget.settle(h, pending, score, "r")
                elif pending:
                    budget.fail(h, pending, "r")
            elif op == "grant":
                budget.grant(h, score + 1, "controller", "more", f"g{n}")
                last[h] = 0
        except LedgerError as refused:
            assert refused.code in {"LIMIT_EXCEEDED", "INSUFFICIENT_BUDGET", "ACCOUNT_TERMINAL", "ACTION_PENDING"}
        for hyp in ("H1", "H2"):
            for action in ("source.read_context", "source.find_text"):
                reading = budget.check(hyp, action)  # never raises
                expected = "deferred" if not reading["allowed"] else (
                    "full" if reading["pct_remaining"] >= shallow else
                    "shallow" if reading["pct_remaining"] >= deferred else "deferred")
                assert reading["tier"] == expected
            scarcity = budget.price_signal(hyp, "source.find_text")["scarcity_bps"]
            assert 10000 <= scarcity <= 40000 and scarcity >= last[hyp]
            last[hyp] = scarcity
            books = budget.remaining(hyp)
            assert books["spent"] + books["remaining"] == books["budget"]
            account = budget.snapshot().state[hyp]
            assert books["budget"] == account["initial_units"] + account["granted_units"]
            assert books["remaining"] == account["remaining_units"]
    case.close()


# --- the soft gate sees a used-up limit as reserve does (docs/scopes.md) -------------------------------
LATER = "2026-01-01T00:02:00.000000Z"  # two minutes after T0: the clock of the cases below


def _used_up(package: Path, scope: str, dimension: str) -> Case:
    """A case whose ``scope`` has a ``dimension`` limit that H1 has used up (block_action): 1 action,
    10 units (one reservation, failed: no refund), 100 millicents (150 reported), or 60 s (2 minutes
    ago). Every event at T0; the case's clock (snapshot, reads without ``at``) says LATER."""
    case = Case.create(package, case_id="BUG-1", at=T0, clock=lambda: LATER)
    case.open_revision([{"statement": "h1"}, {"statement": "h2"}], 100, at=T0)
    case.transition("INVESTIGATING_HYPOTHESES", at=T0)
    budget = case.budget(BudgetConfig.from_mapping({"max_low_information_steps": 1000}))
    budget.initialize(at=T0)
    limit = {"actions": 1, "units": 10, "cost_usd_millicents": 100, "duration_ms": 60_000}[dimension]
    case.scopes().establish(scope, {dimension: limit}, "controller", at=T0)
    if dimension != "duration_ms":
        budget.reserve("H1", "q1", "source.read_context", at=T0)
        if dimension == "cost_usd_millicents":
            budget.record_result("H1", "q1", {"found": 1}, cost_usd_millicents=150, at=T0)
            budget.settle("H1", "q1", 0, "nothing new", at=T0)
        else:
            budget.fail("H1", "q1", "done", at=T0)
    return case


#: (dimension, declared, consumed_after) of the refusal once the limit above is used up.
USED_UP = {"actions": (1, 2), "units": (10, 20), "cost_usd_millicents": (100, 150), "duration_ms": (60_000, 120_000)}


@pytest.mark.parametrize("dimension", list(USED_UP))
@pytest.mark.parametrize("scope", ["case", "revision:1", "hypothesis:1/H1"])
@pytest.mark.sampled(every=4)
def test_a_used_up_limit_makes_check_advice_and_reserve_agree_in_every_scope_and_dimension(
        package, scope, dimension):
    """check and advice answer from the refusal reserve meets: not allowed, not investigable, tier
    deferred, the refusal naming the limit's scope, dimension and figures. A budget result's
    investigable stays what it is defined as (not terminal, nothing pending): both accounts."""
    case = _used_up(package, scope, dimension)
    budget = case.budget()
    declared, after = USED_UP[dimension]
    expected = {"scope": scope, "dimension": dimension, "declared": declared, "consumed_after": after,
                "on_exhausted": "block_action"}
    reading = budget.check("H1", "source.read_context")
    assert (reading["allowed"], reading["tier"]) == (False, "deferred")
    assert set(reading.to_dict()) == {"allowed", "cost", "remaining", "pct_remaining", "tier", "scarcity_bps"}
    assert (reading.refusal.code, reading.refusal.details) == (LIMIT_EXCEEDED, expected)
    assert reading.refusal.message == (f"reserving on H1 would take {dimension} of scope {scope} to {after}, over "
                                       f"its limit of {declared} (on_exhausted: block_action)")
    advice = budget.advice("H1")
    assert (advice["investigable"], advice["tier"], advice["status"]) == \
        (False, "deferred", "new" if dimension == "duration_ms" else "investigating")
    assert advice["limited_by"][dimension] == scope and advice[f"remaining_{dimension}" if dimension != "units"
                                                                else "remaining_units"] == 0
    assert (advice.refusal.code, advice.refusal.details) == (LIMIT_EXCEEDED, expected)
    whole_case = scope != "hypothesis:1/H1"
    snapshot = budget.snapshot()
    assert (snapshot.investigable, snapshot.ready_for_evaluation) == (["H1", "H2"], False)
    assert budget.advice("H2")["investigable"] is not whole_case
    assert budget.check("H2", "source.read_context")["allowed"] is not whole_case
    generation = case.status()["package_generation"]
    refused = _refused(budget.reserve, "H1", "q2", "source.read_context", at=LATER)
    assert (refused.code, refused.details["scope"], refused.details["dimension"],
            refused.details["declared"], refused.details["consumed_after"]) == (LIMIT_EXCEEDED, scope, dimension,
                                                                                declared, after)
    # the limit.exceeded event; a duration not warned of yet is, after it (warnings are checked after each event)
    written = [e["type"] for e in case.events(generation)]
    assert written == ["limit.exceeded"] + (["limit.approaching"] if dimension == "duration_ms" else [])
    assert budget.snapshot().investigable == ["H1", "H2"]  # a refused reservation leaves nothing pending
    case.close()


def test_advice_says_not_investigable_when_a_units_limit_has_less_left_than_the_cheapest_action(package):
    """advice asks about the policy's cheapest action (its affordability floor), as the account's own
    exhaustion does: 5 units left under a scope is not enough for any action costing 10. The budget
    result's investigable does not look at limits: H1 is not terminal and has nothing pending."""
    case = _ready(package)
    budget = case.budget()
    case.scopes().establish("revision:1", {"units": 15}, "controller", at=T0)
    budget.reserve("H2", "q1", "source.read_context", at=T0)
    budget.fail("H2", "q1", "done", at=T0)
    advice = budget.advice("H1")
    assert (advice["remaining_units"], advice["limited_by"]["units"], advice["investigable"], advice["tier"]) == \
        (5, "revision:1", False, "deferred")
    assert (advice.refusal.code, advice.refusal.details["consumed_after"]) == (LIMIT_EXCEEDED, 20)
    assert advice.refusal.message.startswith("reserving on H1 would take units of scope revision:1 to 20")
    assert budget.check("H1", "source.read_context")["allowed"] is False
    assert budget.snapshot().investigable == ["H1", "H2"]
    case.close()


def test_check_carries_the_refusal_reserve_would_meet_and_none_when_allowed(package, example_policy):
    case = _ready(package, config=example_policy)
    budget = case.budget()
    assert budget.check("H1", "source.read_context").refusal is None
    assert budget.advice("H1").refusal is None and budget.advice("H1")["investigable"] is True
    budget.reserve("H1", "q1", "research.lookup")  # 20 of 100: pending
    pending = budget.advice("H1")
    assert (pending["investigable"], pending["tier"], pending.refusal.code) == (False, "full", "ACTION_PENDING")
    assert budget.check("H1", "source.read_context").refusal is None  # check ignores a pending action
    budget.fail("H1", "q1", "x")
    budget.grant("H1", 0 + 1, "controller", "a unit", "g1")
    for n in range(8):  # 81 - 8 × 10 = 1 unit left: exhausted below the floor of 5
        budget.reserve("H1", f"r{n}", "source.find_text")
        budget.fail("H1", f"r{n}", "x")
    reading = budget.check("H1", "source.read_context")
    assert (reading["allowed"], reading.refusal.code, reading.refusal.details["status"]) == \
        (False, ACCOUNT_TERMINAL, "budget_exhausted")
    budget.reserve("H2", "big", "research.lookup")
    budget.fail("H2", "big", "x")
    for n in range(7):  # H2: 80 - 70 = 10 left
        budget.reserve("H2", f"s{n}", "source.find_text")
        budget.fail("H2", f"s{n}", "x")
    short = budget.check("H2", "research.lookup")
    assert (short["allowed"], short["tier"], short.refusal.code) == (False, "deferred", INSUFFICIENT_BUDGET)
    assert (short.refusal.details, short.refusal.message) == (
        {"hypothesis_id": "H2", "cost_units": 20, "remaining_units": 10}, "research.lookup costs 20 units; H2 has 10 "
        "remaining")
    assert budget.check("H2", "source.find_text").refusal is None
    case.close()


def test_check_and_advice_meet_the_limit_reached_reserve_meets_for_the_events_a_ledger_may_hold(package):
    """Reserve refuses with LIMIT_REACHED when budget_events_max leaves no room for the reservation and
    the events that close it; check and advice answer as reserve would (they said allowed)."""
    case = Case.create(package, case_id="BUG-1", at=T0,
                       analysis_config=AnalysisConfig.from_mapping({"limits": {"budget_events_max": 5}}))
    case.open_revision([{"statement": "h"}], 100, at=T0)
    case.transition("INVESTIGATING_HYPOTHESES", at=T0)
    budget = case.budget(BudgetConfig.example())
    budget.initialize(at=T0)
    budget.reserve("H1", "a1", "source.read_context", at=T0)
    budget.fail("H1", "a1", "x", at=T0)
    reading, advice = budget.check("H1", "source.read_context", at=T0), budget.advice("H1", at=T0)
    with pytest.raises(LedgerError) as refused:
        budget.reserve("H1", "a2", "source.read_context", at=T0)
    assert refused.value.code == LIMIT_REACHED
    assert (reading["allowed"], reading["tier"], reading.refusal.message) == (False, "deferred", refused.value.message)
    assert (advice["investigable"], advice["tier"], advice.refusal.message) == (False, "deferred", refused.value.message)
    case.close()


def test_check_and_advice_meet_the_limit_reached_of_spent_units_past_the_largest_exact_integer(package):
    """An account whose spent_units would pass 2**53 - 1 is refused by reserve (LIMIT_REACHED); check
    and advice say so rather than allowed (the account is never terminal and was stuck unseen)."""
    top = 2**53 - 1
    case = Case.create(package, case_id="BUG-1", at=T0)
    case.open_revision([{"statement": "h"}], top, at=T0)
    case.transition("INVESTIGATING_HYPOTHESES", at=T0)
    budget = case.budget(BudgetConfig.from_mapping({"action_costs": {"huge.action": top, "tiny.action": 1},
                                                    "max_reward_bps": 9999}))
    budget.initialize(at=T0)
    budget.reserve("H1", "big", "huge.action", at=T0)
    budget.record_result("H1", "big", {"x": 1}, at=T0)
    budget.settle("H1", "big", 100, "new", at=T0)  # refunds most of it: units left, spent at the top
    reading, advice = budget.check("H1", "tiny.action", at=T0), budget.advice("H1", at=T0)
    with pytest.raises(LedgerError) as refused:
        budget.reserve("H1", "small", "tiny.action", at=T0)
    assert refused.value.code == LIMIT_REACHED and refused.value.details["limit"] == "spent_units"
    assert (reading["allowed"], reading.refusal.message) == (False, refused.value.message)
    assert (advice["investigable"], advice.refusal.code) == (False, LIMIT_REACHED)
    case.close()


def test_budget_results_list_the_accounts_not_terminal_and_not_pending_while_advice_follows_the_limits(package):
    """investigable in operation results and snapshot is the accounts that are not terminal and have
    nothing pending, whatever the limits; once the case's last action is spent, advice and check say
    no to both accounts (naming the limit) while they stay listed, and yes again after a raise."""
    case = _ready(package)
    budget, scopes = case.budget(), case.scopes()
    first = scopes.establish("case", {"actions": 2}, "controller", at=T0)
    assert budget.reserve("H1", "q1", "source.read_context", at=T0).investigable == ["H2"]  # H1 pending
    assert budget.fail("H1", "q1", "x", at=T0).investigable == ["H1", "H2"]
    reserved = budget.reserve("H2", "q2", "source.read_context", at=T0)
    assert reserved.investigable == ["H1"]  # H2 pending; H1 is listed though the case's 2 actions are spent
    held = budget.advice("H1", at=T0)
    assert (held["investigable"], held["tier"], held.refusal.code, held.refusal.details["scope"]) == \
        (False, "deferred", LIMIT_EXCEEDED, "case")
    failed = budget.fail("H2", "q2", "x", at=T0)
    assert (failed.investigable, failed.ready_for_evaluation) == (["H1", "H2"], False)
    replayed = budget.fail("H2", "q2", "x", at=T0)
    assert (replayed.reused, replayed.investigable, budget.snapshot().investigable) == \
        (True, ["H1", "H2"], ["H1", "H2"])
    assert [budget.advice(h, at=T0)["investigable"] for h in ("H1", "H2")] == [False, False]
    assert [budget.check(h, "source.read_context", at=T0)["allowed"] for h in ("H1", "H2")] == [False, False]
    scopes.establish("case", {"actions": 3}, "controller", causation_seq=first.seq, at=T0)
    assert budget.snapshot().investigable == ["H1", "H2"]
    assert [budget.advice(h, at=T0)["investigable"] for h in ("H1", "H2")] == [True, True]
    assert budget.check("H1", "source.read_context", at=T0).refusal is None
    case.close()


def test_the_in_memory_case_gates_a_used_up_limit_as_the_case_on_disk(package):
    """The simulator's in-memory session runs the same gate: the same readings and refusals."""
    from ledger.services.memory import MemoryCase

    lines = [
        {"op": "open_revision", "hypotheses": [{"statement": "a"}, {"statement": "b"}], "units_per_hypothesis": 100},
        {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"},
        {"op": "initialize"},
        {"op": "establish", "scope": "revision:1", "limits": {"actions": 1}, "issuer": "controller"},
        {"op": "reserve", "hypothesis": "H1", "action_id": "q1", "action": "source.read_context"},
        {"op": "fail", "hypothesis": "H1", "action_id": "q1", "reason": "x"},
    ]
    on_disk = Case.create(package, case_id="BUG-1", at=T0, clock=lambda: LATER)
    in_memory = MemoryCase.create("BUG-1", at=T0, clock=lambda: LATER)
    answers = []
    for case in (on_disk, in_memory):
        budget = case.budget()
        results = list(apply_journal(case, [json.dumps({**line, "at": T0}) for line in lines], budget=budget))
        assert all(r.ok for r in results) and results[-1].result["investigable"] == ["H1", "H2"]
        check, advice = budget.check("H2", "source.read_context"), budget.advice("H2")
        answers.append((check.to_dict(), check.refusal.to_dict(), advice.to_dict(), advice.refusal.to_dict(),
                        budget.snapshot().investigable))
    assert answers[0] == answers[1]
    assert answers[0][1]["details"] == {"scope": "revision:1", "dimension": "actions", "declared": 1,
                                        "consumed_after": 2, "on_exhausted": "block_action"}
    on_disk.close()


def test_command_line_check_and_advice_say_why_a_used_up_limit_holds_the_account(package):
    _used_up(package, "case", "actions").close()
    why = ("LIMIT_EXCEEDED: reserving on H1 would take actions of scope case to 2, over its limit of 1 "
           "(on_exhausted: block_action)")
    code, out, err = _cli("budget", "check", str(package), "H1", "source.read_context")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "allowed: false" and "tier: deferred" in out.splitlines()
    assert out.splitlines()[-1] == f"not allowed: {why}"
    code, out, err = _cli("budget", "check", str(package), "H1", "source.read_context", "--json")
    assert code == 0 and json.loads(out)["allowed"] is False and set(json.loads(out)) == {
        "allowed", "cost", "remaining", "pct_remaining", "tier", "scarcity_bps"}
    assert err == f"note: not allowed: {why}\n"
    code, out, err = _cli("budget", "advice", str(package), "H1")
    lines = out.splitlines()
    assert code == 0 and {"investigable: false", "tier: deferred", "remaining_actions: 0"} <= set(lines)
    assert lines[-1] == f"not investigable: {why}"
    code, out, err = _cli("budget", "advice", str(package), "H2", "--json")
    assert (json.loads(out)["investigable"], json.loads(out)["tier"]) == (False, "deferred")
    assert err == f"note: not investigable: {why.replace('on H1', 'on H2')}\n"
    code, out, err = _cli("budget", "snapshot", str(package), "--json")
    assert json.loads(out)["investigable"] == ["H1", "H2"]  # not terminal, nothing pending


# --- concurrency, replay, journal, command line -----------------------------------------------------
RESERVE_SCRIPT = """
import sys, json
from ledger import Case, LedgerError
case = Case.open(sys.argv[1], actor="worker")
try:
    case.budget().reserve(sys.argv[2], "q-" + sys.argv[2], "source.read_context")
    print("ok")
except LedgerError as e:
    print(e.code, e.details.get("scope"), e.details.get("dimension"))
case.close()
"""


@pytest.mark.slow
def test_eight_processes_against_a_revision_units_limit_admitting_three_exactly_three_succeed(package):
    case = _ready(package, hypotheses=8)
    case.scopes().establish("revision:1", {"units": 30, "actions": 100}, "controller")  # 3 × 10 units
    case.close()
    workers = [subprocess.Popen([sys.executable, "-c", RESERVE_SCRIPT, str(package), f"H{i}"], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(1, 9)]
    outputs = [w.communicate(timeout=120)[0].strip() for w in workers]
    assert sorted(outputs) == ["LIMIT_EXCEEDED revision:1 units"] * 5 + ["ok"] * 3
    case = Case.open(package)
    assert _usage(case) == {("revision", "1", "units"): (30, 30, 0), ("revision", "1", "actions"): (100, 3, 97)}
    assert len(case.query("SELECT * FROM limit_exceedances")) == 5
    assert sum(r["spent_units"] for r in case.balances()) == 30
    case.close()
    assert verify_case(package).events == 5 + 1 + 3 + 5


def test_scope_events_export_replay_verify_and_import_byte_identically(package, tmp_path):
    case = _ready(package)
    budget, scopes = case.budget(), case.scopes()
    first = scopes.establish("case", {"units": 100, "actions": 3}, "controller", warning_ratio="0.5")
    scopes.request_increase("case", "actions", 2, "agent", "more please")
    budget.reserve("H1", "q1", "source.read_context")
    budget.record_result("H1", "q1", {"a": 1}, cost_usd_millicents=7)
    budget.settle("H1", "q1", 100, "new")
    budget.grant("H1", 5, "controller", "keep going", "g1")
    budget.reserve("H1", "q2", "source.read_context")
    budget.fail("H1", "q2", "x")
    scopes.establish("case", {"units": 100, "actions": 2}, "controller", on_exhausted="task_failed",
                     causation_seq=first.seq)
    with pytest.raises(LedgerError):
        budget.reserve("H1", "q3", "source.read_context")
    export_case(case)
    exported = sorted(p.name for p in (package / "analysis" / "case" / "events").iterdir())
    case_events = [e for e in case.query("SELECT type FROM events WHERE stream = 'case'")]
    assert len(exported) == len(case_events)
    case.close()
    report = verify_case(package)
    copy = import_tree(package, tmp_path / "copy")
    assert copy.head_sha256 == report.head_sha256
    assert logical_dump(tmp_path / "copy" / "ledger.sqlite")[-1] == logical_dump(package / "ledger.sqlite")[-1]


def test_journal_operations_carry_their_results_in_the_result_line(package):
    case = _ready(package)
    lines = [
        {"op": "establish", "scope": "revision:1", "limits": {"units": 30}, "issuer": "controller",
         "warning_ratio": 0.5, "on_exhausted": "block_action"},
        {"op": "request_increase", "scope": "revision:1", "dimension": "units", "amount": 10,
         "requester": "agent", "reason": "please"},
        {"op": "grant", "hypothesis": "H1", "units": 10, "issuer": "controller", "reason": "ok", "grant_id": "g1"},
        {"op": "check", "hypothesis": "H1", "action": "source.read_context"},
        {"op": "price_signal", "hypothesis": "H1", "action": "source.read_context"},
        {"op": "remaining", "hypothesis": "H1"},
    ]
    results = list(apply_journal(case, [json.dumps(line) for line in lines]))
    assert all(r.ok for r in results)
    assert results[0].result["usage"][0]["warning_bps"] == 5000
    assert results[2].result["state"]["H1"]["granted_units"] == 10
    assert results[3].result == {"allowed": True, "cost": 10, "remaining": 30, "pct_remaining": 27, "tier": "shallow",
                                 "scarcity_bps": 10000}
    assert results[4].result == {"cost": 10, "resource_cost": 10, "scarcity_bps": 10000}
    assert results[5].result == {"budget": 110, "spent": 0, "remaining": 110, "pct_remaining": 100}
    assert results[3].reused is True
    again = list(apply_journal(case, [json.dumps(line) for line in lines[:3]]))
    assert [r.reused for r in again] == [True, True, True]
    case.close()


def _cli(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli_main, list(args))
    return done.exit_code, done.stdout, done.stderr


def test_command_line_scope_and_soft_gate(package):
    case = _ready(package)
    case.close()
    code, out, _ = _cli("scope", "establish", str(package), "hypothesis:1/H1", "--limit", "units=40", "--limit",
                        "actions=3", "--warning-ratio", "0.75", "--json")
    assert code == 0
    established = json.loads(out)
    assert [(r["dimension"], r["declared"], r["warning_bps"]) for r in established["usage"]] == \
        [("units", 40, 7500), ("actions", 3, 7500)]
    code, _, err = _cli("--actor", "agent", "scope", "establish", str(package), "hypothesis:1/H1", "--limit",
                        "units=99", "--causation-seq", str(established["seq"]))
    assert code == 1 and err.startswith("error: AUTHORITY_DENIED:")
    code, _, err = _cli("scope", "establish", str(package), "case", "--limit", "units=5", "--on-exhausted", "ignore")
    assert code == 1 and err.startswith("error: INVALID_CAPABILITY:")
    assert _cli("scope", "establish", str(package), "case", "--limit", "units")[0] == 2
    code, out, _ = _cli("budget", "check", str(package), "H1", "source.read_context", "--json")
    assert (code, json.loads(out)["remaining"], json.loads(out)["tier"]) == (0, 40, "shallow")
    code, out, _ = _cli("budget", "price", str(package), "H1", "source.read_context", "--json")
    assert json.loads(out) == {"cost": 10, "resource_cost": 10, "scarcity_bps": 10000}
    code, out, _ = _cli("budget", "grant", str(package), "H1", "5", "--reason", "r", "--grant-id", "g1", "--json")
    assert json.loads(out)["state"]["H1"]["granted_units"] == 5
    code, _, err = _cli("--actor", "agent", "budget", "grant", str(package), "H1", "5", "--reason", "r",
                        "--grant-id", "g2")
    assert code == 1 and err.startswith("error: AUTHORITY_DENIED:")
    code, out, _ = _cli("budget", "remaining", str(package), "H1")
    assert code == 0 and "budget: 105" in out and "spent: 0" in out
    code, out, _ = _cli("--actor", "agent", "scope", "request-increase", str(package), "hypothesis:1/H1", "units",
                        "10", "--reason", "more")
    assert code == 0 and "hypothesis:1/H1 units: 0 of 40 used" in out
    code, out, _ = _cli("budget", "record", str(package), "H1", "q1", "--evidence", "{}", "--cost-usd-millicents", "3")
    assert code == 1  # nothing reserved under q1: the option parses, the ledger refuses


def test_the_worked_example_of_docs_scopes_runs_as_written(tmp_path):
    text = (REPO / "docs" / "scopes.md").read_text(encoding="utf-8")
    example = text.split("## A worked example", 1)[1]
    setup, journal = re.findall(r"```(?:sh)?\n(.*?)```", example, flags=re.DOTALL)[:2]
    assert "ledger init c2 --case-id SHOP-7 --at 2026-05-04T09:00:00Z" in setup
    (tmp_path / "scopes.jsonl").write_text(journal, encoding="utf-8")
    package = str(tmp_path / "c2")
    assert _cli("init", package, "--case-id", "SHOP-7", "--at", "2026-05-04T09:00:00Z")[0] == 0
    code, out, _ = _cli("apply", package, str(tmp_path / "scopes.jsonl"), "--keep-going")
    assert code == 1  # two lines are refused on purpose
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 25
    failed = {line["line"]: (line["error"]["code"], line["error"]["details"]["scope"],
                             line["error"]["details"]["dimension"]) for line in lines if not line["ok"]}
    assert failed == {18: (LIMIT_EXCEEDED, "revision:1", "actions"), 21: (LIMIT_EXCEEDED, "hypothesis:1/H1", "units")}
    assert lines[11]["result"] == {"allowed": True, "cost": 10, "remaining": 12, "pct_remaining": 12,
                                   "tier": "deferred", "scarcity_bps": 13600}
    assert lines[19]["result"]["events"] == ["scope.established", "limit.approaching"]
    assert lines[21]["result"] == {"cost": 10, "resource_cost": 13, "scarcity_bps": 13000}
    assert lines[23]["result"] == {"budget": 120, "spent": 10, "remaining": 110, "pct_remaining": 91}
    assert lines[24]["result"]["allowed"] is False and lines[24]["result"]["scarcity_bps"] == 12700
    case = Case.open(package)
    assert _usage(case) == {("hypothesis", "1/H1", "units"): (20, 14, 6), ("revision", "1", "actions"): (8, 4, 4),
                            ("revision", "1", "duration_ms"): (3600000, 480000, 3120000)}
    assert {r["hypothesis_id"]: r["terminal_reason"] for r in case.balances()} == \
        {"H1": "limit:hypothesis:1/H1:units", "H2": None}
    case.close()
    assert verify_case(package).events == 26
    assert "hypothesis    1/H1        units        20          14          6" in text


def test_the_memory_view_answers_the_scope_questions_exactly_as_the_sql_view(package):
    """Both views implement the scope questions of the view protocol; replay relies on it."""
    case = _ready(package)
    budget, scopes = case.budget(), case.scopes()
    first = scopes.establish("revision:1", {"units": 60, "actions": 4}, "controller", warning_ratio="0.25")
    scopes.establish("hypothesis:1/H2", {"cost_usd_millicents": 10}, "controller", delegate="a",
                     delegate_limits={"cost_usd_millicents": 5})
    for i, h in enumerate(("H1", "H2", "H1")):
        budget.reserve(h, f"q{i}", "source.read_context")
        budget.record_result(h, f"q{i}", {"i": i}, cost_usd_millicents=3 * i)
        budget.settle(h, f"q{i}", 40, "ok")
    budget.grant("H2", 7, "controller", "more", "g1")
    budget.reserve("H2", "q9", "source.read_context")
    scopes.establish("revision:1", {"units": 70}, "controller", causation_seq=first.seq)
    case.close()
    with Case.open(package) as opened:
        rows = opened.query("SELECT seq, body FROM events ORDER BY seq")
        contents = {r["sha256"]: r["body"].encode() for r in opened.query("SELECT sha256, body FROM contents")}
    replayer = Replayer(PackageSource(package, contents.get))
    for row in rows:
        replayer.apply(row["seq"], row["body"].encode("utf-8"))
    memory = replayer.view
    with Case.open(package) as opened, opened.session.read() as sql:
        for name in ("case", "revision:1", "hypothesis:1/H1", "hypothesis:1/H2"):
            assert memory.scope(name) == sql.scope(name), name
            found = sql.scope(name)
            if found:
                assert memory.warned(name, found["seq"]) == sql.warned(name, found["seq"])
        assert sql.warned("revision:1", first.seq) == frozenset({"units", "actions"})
        for revision, h in ((None, None), (1, None), (1, "H1"), (1, "H2"), (2, None)):
            assert memory.money_consumed(revision, h) == sql.money_consumed(revision, h)
        assert sql.money_consumed(1, "H2") == 3
        assert memory.revision_issuer(1) == sql.revision_issuer(1) == "controller"
        assert memory.revision_issuer(2) is sql.revision_issuer(2) is None
        for h in ("H1", "H2"):
            assert memory.lowest_pct_since_grant(1, h) == sql.lowest_pct_since_grant(1, h)
        assert sql.lowest_pct_since_grant(1, "H2") == 90 * 100 // 107  # 93 left + 7 granted, q9 pending


def cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli_main, [str(a) for a in args], input=stdin)
    return done.exit_code, done.stdout, done.stderr


HUGE = 2**53 - 1


def _huge_case(package: Path) -> Case:
    from ledger import BudgetConfig
    case = Case.create(package, case_id="BIG")
    case.open_revision([{"statement": "a"}, {"statement": "b"}], HUGE)
    case.transition("INVESTIGATING_HYPOTHESES")
    policy = BudgetConfig.from_mapping({**BudgetConfig.load(EXAMPLE_BUDGET).policy, "action_costs": {},
                                        "default_action_cost": HUGE - 1})
    budget = case.budget(policy)
    budget.initialize()
    budget.reserve("H1", "q1", "x.y")
    budget.reserve("H2", "q2", "x.y")
    return case


@pytest.mark.parametrize("option", ["--limit", "--delegate-limit"])
def test_a_repeated_limit_dimension_is_a_usage_error_naming_it(case, option):
    extra = ["--delegate", "agent"] if option == "--delegate-limit" else []
    args = ["scope", "establish", case.path, "case", "--limit", "units=9", *extra,
            option, "units=5", option, "units=6"]
    code, out, err = cli(*args)
    assert (code, out) == (2, "")
    assert "'units' is given twice" in err
    assert [e["type"] for e in case.events()][-1] == "case.transitioned"  # nothing written


def test_a_scope_whose_summed_consumption_passes_2_53_is_limit_reached_naming_it(package):
    case = _huge_case(package)
    before = len(case.events())
    with pytest.raises(LedgerError) as caught:
        case.scopes().establish("case", {"units": 5}, "controller")
    assert caught.value.code == "LIMIT_REACHED"
    assert caught.value.details == {"scope": "case", "dimension": "units"}
    assert "units consumed in scope case would be 18014398509481980" in caught.value.message
    assert len(case.events()) == before
    # a dimension without a limit is not summed into any event
    assert case.scopes().establish("revision:1", {"actions": 5}, "controller").usage[0]["consumed"] == 2
    code, _, err = cli("scope", "establish", case.path, "case", "--limit", "units=5")
    assert code == 1 and err.startswith("error: LIMIT_REACHED: units consumed in scope case")
    case.close()


def test_reported_money_whose_case_total_would_pass_2_53_is_limit_reached_and_writes_nothing(package):
    """Each cost_usd_millicents may be up to 2**53 - 1, and money_totals keeps running totals of them:
    the result that would take the case's total past 2**53 - 1 is refused, limits or not."""
    top = 2**53 - 1
    case = _ready(package, units=100)
    budget = case.budget()
    budget.reserve("H1", "q1", "source.read_context")
    budget.record_result("H1", "q1", {"n": 1}, cost_usd_millicents=top - 5)
    budget.settle("H1", "q1", 50, "x")
    budget.reserve("H2", "q2", "source.read_context")  # another account and revision total: the case's counts
    before = len(case.events())
    with pytest.raises(LedgerError) as caught:
        budget.record_result("H2", "q2", {"n": 2}, cost_usd_millicents=6)
    assert caught.value.code == "LIMIT_REACHED"
    assert caught.value.details == {"hypothesis_id": "H2", "limit": "cost_usd_millicents_total"}
    assert caught.value.message.startswith(f"the case has reported {top - 5} millicents; 6 more would pass 2**53-1")
    code, _, err = cli("budget", "record", case.path, "H2", "q2", "--evidence", '{"n": 2}', "--cost-usd-millicents", "6")
    assert (code, err.splitlines()[0]) == (1, f"error: LIMIT_REACHED: {caught.value.message}")
    assert len(case.events()) == before
    done = budget.record_result("H2", "q2", {"n": 2}, cost_usd_millicents=5)  # exactly 2**53 - 1 in all
    assert case.query("SELECT MAX(case_total) AS t FROM money_totals")[0]["t"] == top
    assert done.seq == before + 1
    case.close()


def test_the_advisory_price_is_clamped_at_2_53_minus_1(package):
    case = _huge_case(package)
    code, out, _ = cli("budget", "price", case.path, "H1", "x.y", "--json")
    assert code == 0 and json.loads(out) == {"cost": HUGE - 1, "resource_cost": HUGE, "scarcity_bps": 40000}
    from ledger.rules.gate import resource_cost
    assert (resource_cost(HUGE - 1, 40000), resource_cost(10, 13000)) == (HUGE, 13)
def test_establish_warns_at_eighty_percent_by_default_given_as_a_number(package):
    import inspect

    from ledger import ScopeManager

    assert inspect.signature(ScopeManager.establish).parameters["warning_ratio"].default == 0.8
    case = start_case(package)
    case.budget(BudgetConfig.from_mapping({})).initialize()
    result = case.scopes().establish("case", {"units": 100}, "controller")
    body = json.loads(case.events(result.seq - 1, with_body=True)[0]["body"])
    assert body["warning_bps"] == 8000
    case.close()


@pytest.mark.parametrize("ratio, bps", [("0.5", 5000), ("  0.5 ", 5000), ("\t0.25\n", 2500), (0.75, 7500)])
def test_a_warning_ratio_given_as_a_decimal_string_is_read_exactly_blanks_around_it_ignored(package, ratio, bps):
    case = start_case(package)
    case.budget(BudgetConfig.from_mapping({})).initialize()
    result = case.scopes().establish("case", {"units": 100}, "controller", warning_ratio=ratio)
    body = json.loads(case.events(result.seq - 1, with_body=True)[0]["body"])
    assert body["warning_bps"] == bps
    case.close()


_SCOPES = st.sampled_from(["case", "revision:1", "hypothesis:1/H1", "hypothesis:1/H2"])
_LIMITS = st.dictionaries(st.sampled_from(scope_rules.DIMENSIONS), st.integers(0, 60_000), min_size=1)
_JOURNAL_STEP = st.one_of(
    st.tuples(st.just("establish"), _SCOPES, _LIMITS),
    st.tuples(st.just("reserve"), st.sampled_from(["H1", "H2"]), st.integers(0, 3)),
    st.tuples(st.just("record_result"), st.sampled_from(["H1", "H2"]), st.integers(0, 500)),
    st.tuples(st.just("settle"), st.sampled_from(["H1", "H2"]), st.integers(0, 100)),
    st.tuples(st.just("fail"), st.sampled_from(["H1", "H2"]), st.just(0)),
    st.tuples(st.just("grant"), st.sampled_from(["H1", "H2"]), st.integers(1, 30)),
)


def _view_rows(case: Case) -> list[dict]:
    order = {dimension: n for n, dimension in enumerate(scope_rules.DIMENSIONS)}
    return sorted(case.query("SELECT * FROM scope_usage"),
                  key=lambda row: (row["scope_type"], row["scope_id"], order[row["dimension"]]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(_JOURNAL_STEP, st.integers(0, 20_000)), max_size=14))
@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_scope_usage_read_through_the_api_equals_the_scope_usage_view_after_every_operation(tmp_path_factory,
                                                                                           steps):
    """ScopeManager.usage() measures each scope as reserve does (accounts, money totals); the
    scope_usage view sums the history: the two agree after every operation, refused ones too."""
    case = _ready(tmp_path_factory.mktemp("usage") / "case")
    clock, actions, established = 0, {}, {}
    for (kind, target, value), elapsed in steps:
        clock += elapsed
        at = f"2026-03-01T{clock // 3_600_000:02d}:{clock // 60_000 % 60:02d}:{clock // 1000 % 60:02d}." \
             f"{clock % 1000:03d}Z"
        if kind == "establish":
            line = {"op": "establish", "scope": target, "limits": value, "issuer": "controller", "at": at}
            if target in established:
                line["causation_seq"] = established[target]
        elif kind == "grant":
            line = {"op": "grant", "hypothesis": target, "units": value, "issuer": "controller", "reason": "r",
                    "grant_id": f"g{clock}", "at": at}
        else:
            action = actions[target] = actions.get(target, 0) + (kind == "reserve")
            line = {"op": kind, "hypothesis": target, "action_id": f"a{action}", "at": at}
            line.update({"reserve": {"action": "source.read_context"},
                         "record_result": {"evidence": {"n": clock}, "cost_usd_millicents": value},
                         "settle": {"semantic_score": value, "reason": "r"},
                         "fail": {"reason": "r"}}[kind])
        [result] = apply_journal(case, [json.dumps(line)], keep_going=True)
        if kind == "establish":
            assert result.ok, result.error  # every scope can be established at any time here
            established[target] = result.seq
        assert case.scopes().usage() == _view_rows(case), line
        for name in ("case", "revision:1", "hypothesis:1/H1"):
            scope_type, _, _ = name.partition(":")
            assert case.scopes().usage(name) == [r for r in _view_rows(case) if r["scope_type"] == scope_type
                                                 and r["scope_id"] == ("BUG-1" if name == "case" else
                                                                       name.partition(":")[2])]
    case.close()


def test_a_refusal_that_would_end_accounts_without_budget_event_room_quotes_the_limit_exceeded(package):
    """on_exhausted = scope_cancelled needs a budget.limit_terminated event; with no room for it under
    budget_events_max the refusal is LIMIT_REACHED, naming the LIMIT_EXCEEDED it could not record."""
    case = Case.create(package, "BUG-1", analysis_config=AnalysisConfig(limits={"budget_events_max": 7}))
    case.open_revision([{"statement": f"s{i}"} for i in range(4)], 100)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget()
    budget.initialize()
    case.scopes().establish("case", {"actions": 2}, "controller", on_exhausted="scope_cancelled")
    budget.reserve("H1", "a1", "source.read_context")
    budget.reserve("H2", "a1", "source.read_context")  # 3 budget events, 4 kept to close the two
    head = case.status()["package_generation"]
    refused = _refused(budget.reserve, "H3", "a1", "source.read_context")
    assert refused.code == LIMIT_REACHED and refused.details == {"limit": "budget_events_max", "budget_events": 3}
    assert refused.message.startswith("the ledger holds 3 budget events of its limit of 7; this operation needs 1 "
                                      "and 4 kept to close 2 pending action(s); the refusal it would record was "
                                      "not recorded: LIMIT_EXCEEDED: ")
    assert case.status()["package_generation"] == head  # nothing written
    case.close()
    verify_case(package)


@pytest.mark.parametrize("dimension, shown", [(1, "the integer 1"), ("tokens", "'tokens'"),
                                              ("d" * 50, f"'{'d' * 39}…'")])
def test_an_unknown_dimension_is_named_as_given_and_nothing_is_written(case, dimension, shown):
    before = case.status()["package_generation"]
    with pytest.raises(LedgerError) as refused:
        case.scopes().establish("case", {dimension: 5}, "controller")
    assert (refused.value.code, refused.value.message) == (
        INVALID_ARGUMENT, f"limits: unknown dimension {shown}; dimensions: units, actions, duration_ms, cost_usd_millicents")
    assert case.status()["package_generation"] == before
