"""Policy simulation (docs/simulate.md): figures equal `apply --keep-going`, hand-computed runs, grids, bad input."""

from __future__ import annotations

import itertools
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import AnalysisConfig, Case, LedgerError, MemoryCase, apply_journal, example_policy, frontier, simulate, vary
from ledger.simulation.simulator import parse_vary
from ledger.simulation.replay import parse_journal, replay_run
from ledger.simulation.simulator import Policy, policy_from_mapping
from ledger_cli.main import main, main as cli_main
from ledger.ground.errors import INVALID_ARGUMENT
from conftest import EXAMPLE_BUDGET, REPO, read_only_mount


from ledger import frontier, load_policy, plot_frontier, plot_tradeoff
from ledger.package_tools.journal import first_at as journal_first_at

DATA = Path(__file__).parent / "data" / "trajectories"
OUTCOMES = DATA / "outcomes.csv"
#: abandoned under the example policy (django-11206, -13821), and one that is not (astropy-13033)
JOURNALS = ["django__django-11206", "django__django-13821", "astropy__astropy-13033"]


def _policies() -> list[Policy]:
    base = example_policy()
    return [base,
            *vary(base, [("max_low_information_steps", [2])]),
            *vary(base, [("units_per_hypothesis", [150])]),  # tiny allocation: exhausted
            policy_from_mapping("defaults", {"low_information_threshold": 50})]


def _apply(tmp_path: Path, journal: Path, policy: Policy) -> tuple[list[tuple[int, str | None]], list[dict]]:
    lines = journal.read_bytes().split(b"\n")
    case = Case.create(tmp_path / f"{journal.stem}-{abs(hash(policy.name))}", "C1")
    try:  # a policy's allocation replaces the journal's, in apply as in the simulation
        results = list(apply_journal(case, lines, budget=case.budget(policy.config), keep_going=True,
                                     batch_size=100, units_per_hypothesis=policy.units_per_hypothesis))
        return [(r.line, None if r.ok else r.error.code) for r in results], case.balances()
    finally:
        case.close()


@pytest.mark.parametrize("name", JOURNALS)
def test_simulated_lines_and_balances_equal_apply_keep_going_under_four_policies(tmp_path, name):
    """docs/simulate.md: 'with the same rules as apply': every line's outcome and every final balance."""
    journal = DATA / f"{name}.jsonl"
    lines = parse_journal(journal)
    for policy in _policies():
        applied, balances = _apply(tmp_path, journal, policy)
        traced = replay_run(name, lines, policy, trace=True)
        assert traced.lines == applied, policy.name
        fast = replay_run(name, lines, policy)
        refused = sum(1 for (number, code), (_, line) in zip(applied, lines) if code and line["op"] == "reserve")
        assert (fast.steps_refused, traced.steps_refused) == (refused, refused), policy.name
        assert fast.units_spent == traced.units_spent == sum(b["spent_units"] for b in balances)
        assert fast.units_rewarded == traced.units_rewarded == sum(b["rewarded_units"] for b in balances)
        statuses = {b["status"] for b in balances}
        assert fast.abandoned == (statuses == {"abandoned_low_information_gain"}), policy.name
        assert fast.exhausted == (statuses == {"budget_exhausted"}), policy.name
        assert fast.stopped_at_step == traced.stopped_at_step


def test_apply_units_per_hypothesis_replaces_every_open_revisions_allocation_as_simulate_does(tmp_path):
    """`ledger apply --units-per-hypothesis N` gives each hypothesis N units whatever the journal's
    open_revision lines say (or leave out), so a run applied under a chosen policy's allocation
    has the figures simulate gave it; anything but an integer >= 1 is refused and writes nothing."""
    journal = tmp_path / "two.jsonl"
    text = _journal(tmp_path, ["a", "b", "a"], units=100000).read_text()
    again = [{"op": "transition", "to": "EVALUATING"}, {"op": "open_revision", "hypotheses": [{"statement": "t"}]},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}]
    journal.write_text(text + "".join(json.dumps(line) + "\n" for line in again))
    policy = vary(example_policy(), [("units_per_hypothesis", [25])])[0]
    simulated = simulate([journal], [policy]).runs[0]
    done = CliRunner().invoke(main, ["--config", str(EXAMPLE_BUDGET), "apply", str(tmp_path / "case"), str(journal),
                                     "--create", "C1", "--keep-going", "-q", "--units-per-hypothesis", "25"])
    assert done.exit_code == 0, done.output
    with Case.open(tmp_path / "case") as case:
        balances = case.balances()
    assert [(b["revision"], b["initial_units"]) for b in balances] == [(1, 25), (2, 25)]
    assert sum(b["spent_units"] for b in balances) == simulated.units_spent == 30
    assert sum(b["rewarded_units"] for b in balances) == simulated.units_rewarded
    for bad in ("0", "-1", "x", "9007199254740992"):
        refused = CliRunner().invoke(main, ["apply", str(tmp_path / f"bad{bad}"), str(journal), "--create", "C2",
                                            "--units-per-hypothesis", bad])
        assert refused.exit_code == 2 and "--units-per-hypothesis" in refused.output
        assert not (tmp_path / f"bad{bad}").exists()
    with Case.create(tmp_path / "api", "C3") as case:
        for bad in (0, True, 2.0, "5", 2**53):
            with pytest.raises(LedgerError) as caught:
                list(apply_journal(case, [text], units_per_hypothesis=bad))
            assert caught.value.code == "INVALID_ARGUMENT" and "units_per_hypothesis" in caught.value.message
        assert case.status()["analysis_revision"] == 0


def test_the_tiny_allocation_policy_exhausts_and_the_grid_changes_outcomes():
    lines = parse_journal(DATA / "astropy__astropy-13033.jsonl")
    tiny = vary(example_policy(), [("units_per_hypothesis", [150])])[0]
    run = replay_run("a", lines, tiny)
    assert (run.exhausted, run.abandoned) == (True, False)
    traced = replay_run("a", lines, tiny, trace=True)
    reserve_lines = {number for number, line in lines if line["op"] == "reserve"}
    codes = [code for number, code in traced.lines if number in reserve_lines]
    # below 10 units a 10-unit search is refused while a 5-unit read still fits; then exhaustion stops the run
    assert codes[:run.stopped_at_step - 1].count("INSUFFICIENT_BUDGET") == run.steps_refused - (
        run.steps - run.stopped_at_step + 1) > 0
    assert set(codes[run.stopped_at_step - 1:]) == {"ACCOUNT_TERMINAL"}


def _journal(tmp_path: Path, evidences: list[str], units: int | None = None, name: str = "run") -> Path:
    opening = {"op": "open_revision", "hypotheses": [{"statement": "s"}]}
    if units is not None:
        opening["units_per_hypothesis"] = units
    lines = [opening, {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}]
    for n, evidence in enumerate(evidences, start=1):
        lines += [{"op": "reserve", "hypothesis": "H1", "action_id": f"s{n}", "action": "source.find_text"},
                  {"op": "record_result", "hypothesis": "H1", "action_id": f"s{n}", "evidence": {"o": evidence}},
                  {"op": "settle", "hypothesis": "H1", "action_id": f"s{n}", "semantic_score": 50, "reason": "r"}]
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_max_low_information_steps_1_stops_at_the_first_repeated_observation(tmp_path):
    """docs/concepts.md with a streak limit of 1: step 2 repeats step 1's observation (novelty 0), the
    account is abandoned, and steps 3 and 4 are not taken. Cost 10; step 1 refunds
    10 * 8000 * min(100, 50) // 1e6 = 4; step 2 refunds 0."""
    path = _journal(tmp_path, ["a", "a", "b", "c"], units=100)
    policy = policy_from_mapping("strict", {"max_low_information_steps": 1})
    report = simulate([path], [policy])
    run = report.runs[0]
    assert (run.steps, run.steps_taken, run.steps_refused) == (4, 2, 2)
    assert (run.units_spent, run.units_rewarded) == (20, 4)
    assert (run.abandoned, run.exhausted, run.stopped_at_step) == (True, False, 3)
    assert report.policies[0]["runs_abandoned"] == 1


def test_a_tiny_units_per_hypothesis_exhausts_the_account(tmp_path):
    """docs/concepts.md/6.4: 25 units, cost 10, refund 4 per new observation: 25 → 19 → 13 → 7 < floor 10,
    so the account is exhausted after step 3 and step 4 is refused. The policy's
    units_per_hypothesis replaces the journal's 100."""
    path = _journal(tmp_path, ["a", "b", "c", "d"], units=100)
    policy = policy_from_mapping("tiny", {"units_per_hypothesis": 25})
    run = simulate([path], [policy]).runs[0]
    assert (run.steps, run.steps_taken, run.steps_refused) == (4, 3, 1)
    assert (run.units_spent, run.units_rewarded) == (30, 12)
    assert (run.exhausted, run.abandoned, run.stopped_at_step) == (True, False, 4)
    unchanged = simulate([path], [policy_from_mapping("plain", {})]).runs[0]
    assert (unchanged.steps_refused, unchanged.units_spent, unchanged.exhausted) == (0, 40, False)


def test_stopped_at_step_is_the_first_step_not_taken_whatever_lifecycle_lines_follow(tmp_path):
    """The streak limit of 1 abandons H1 at step 2 (a repeat); step 3 is the first not taken. A
    repeated ``initialize`` (a replay, writing nothing) after it, or a new revision that runs on,
    leaves the first stop as it was."""
    path = _journal(tmp_path, ["a", "a", "b", "c", "d"], units=100)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3 + 3 * 3]) + '{"op": "initialize"}\n' + "".join(lines[3 + 3 * 3:]))
    strict = policy_from_mapping("strict", {"max_low_information_steps": 1})
    run = simulate([path], [strict]).runs[0]
    assert (run.steps, run.steps_refused, run.abandoned, run.stopped_at_step) == (5, 3, True, 3)
    reopened = tmp_path / "reopened.jsonl"
    reopened.write_text("".join(lines[:3 + 3 * 3]) + "".join(json.dumps(line) + "\n" for line in [
        {"op": "transition", "to": "EVALUATING"},
        {"op": "open_revision", "hypotheses": [{"statement": "another"}], "units_per_hypothesis": 100},
        {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"},
        {"op": "reserve", "hypothesis": "H1", "action_id": "r2", "action": "source.find_text"}]))
    run = simulate([reopened], [strict]).runs[0]
    assert (run.steps, run.steps_taken, run.stopped_at_step) == (4, 3, 3)


def test_without_units_in_the_journal_the_analysis_config_allocates(tmp_path):
    path = _journal(tmp_path, ["a", "b", "c", "d"])
    run = simulate([path], [policy_from_mapping("plain", {})],
                   analysis=AnalysisConfig(units_per_hypothesis=25)).runs[0]
    assert (run.steps_taken, run.exhausted) == (3, True)


def test_vary_builds_exactly_the_grid_asked_for():
    base = example_policy()
    grid = vary(base, [parse_vary("max_low_information_steps=2,3"), parse_vary("low_information_threshold=10,30")])
    assert [p.name for p in grid] == [
        "max_low_information_steps=2 low_information_threshold=10",
        "max_low_information_steps=2 low_information_threshold=30",
        "max_low_information_steps=3 low_information_threshold=10",
        "max_low_information_steps=3 low_information_threshold=30"]
    assert [(p.config["max_low_information_steps"], p.config["low_information_threshold"]) for p in grid] == [
        (2, 10), (2, 30), (3, 10), (3, 30)]
    for policy in grid:  # everything else is the base policy's
        rest = {k: v for k, v in policy.config.policy.items()
                if k not in ("max_low_information_steps", "low_information_threshold")}
        assert rest == {k: v for k, v in base.config.policy.items() if k in rest}
    costs = vary(base, [parse_vary("action_costs.source.find_text=1,50")])
    assert [p.config.cost_units("source.find_text") for p in costs] == [1, 50]
    assert [p.units_per_hypothesis for p in vary(base, [parse_vary("units_per_hypothesis=7")])] == [7]


@pytest.mark.parametrize("spec, code", [("no_such_key=1", "INVALID_ARGUMENT"), ("max_low_information_steps=0", "CONFIG_INVALID"),
                                        ("max_reward_bps=10000", "CONFIG_INVALID"), ("units_per_hypothesis=0", "CONFIG_INVALID"),
                                        ("units_per_hypothesis=9007199254740992", "CONFIG_INVALID")])
def test_vary_refuses_unknown_keys_and_values_the_policy_schema_refuses(spec, code):
    with pytest.raises(LedgerError) as info:
        vary(example_policy(), [parse_vary(spec)])
    assert info.value.code == code and spec.split("=")[0] in info.value.message


MONOTONE_SUBSET = sorted(DATA.glob("*.jsonl"))[::7]  # 15 journals


def _monotone(journals: list[Path]) -> list:
    policies = vary(example_policy(), [("max_low_information_steps", [1, 2, 3, 4, 6])])
    report = simulate(journals, policies)
    by_run: dict[str, list] = {}
    for run in report.runs:
        by_run.setdefault(run.run, []).append(run)
    for runs in by_run.values():
        for fewer, more in zip(runs, runs[1:]):
            assert more.steps_refused <= fewer.steps_refused, (fewer, more)
            assert more.units_spent >= fewer.units_spent and more.units_rewarded >= fewer.units_rewarded
            assert more.abandoned <= fewer.abandoned
    return report.policies


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_raising_max_low_information_steps_never_refuses_more_steps_on_each_run():
    """Checked on all 100 journals first (test_monotone_on_all_runs): per run, a longer allowed streak
    never increases steps_refused or runs abandoned, and never lowers units spent or refunded."""
    rows = _monotone(MONOTONE_SUBSET)
    assert [r["steps_refused"] for r in rows] == sorted((r["steps_refused"] for r in rows), reverse=True)
    assert rows[0]["runs_abandoned"] == len(MONOTONE_SUBSET)  # a streak of 1: every run repeats an output


@pytest.mark.slow
def test_monotone_on_all_runs_and_the_example_figures():
    rows = _monotone(sorted(DATA.glob("*.jsonl")))
    assert [r["steps_refused"] for r in rows] == [2859, 1430, 545, 116, 0]
    report = simulate([DATA], None, OUTCOMES, jobs=2)
    row = report.policies[0]
    assert (row["runs"], row["steps"], row["steps_refused"], row["runs_abandoned"]) == (100, 3870, 545, 22)
    assert {k: (v["runs"], v["runs_abandoned"]) for k, v in row["by_outcome"].items()} == {
        "failed": (26, 8), "resolved": (74, 14)}


def test_jobs_in_processes_give_the_same_figures_as_one_process():
    journals = [DATA / f"{name}.jsonl" for name in JOURNALS]
    one = simulate(journals, None, OUTCOMES, jobs=1)
    two = simulate(journals, None, OUTCOMES, jobs=2)
    assert one.to_dict() == two.to_dict()
    assert [r.to_dict() for r in one.runs] == [r.to_dict() for r in two.runs]


def test_jobs_none_means_the_usable_cores_and_other_jobs_are_refused(monkeypatch):
    from ledger.ground import workers
    from ledger.simulation import simulator

    journals = [DATA / f"{name}.jsonl" for name in JOURNALS]
    asked = []
    monkeypatch.setattr(simulator, "shared_map", lambda work, tasks, jobs: asked.append(jobs) or map(work, tasks))
    monkeypatch.setattr(workers, "usable_cores", lambda: 3)
    default = simulate(journals, None, OUTCOMES, jobs=None)
    assert asked == [3] and default.to_dict() == simulate(journals, None, OUTCOMES, jobs=1).to_dict()
    for bad in (0, -1, 2.0, "2", True, 257, 10**9):
        with pytest.raises(LedgerError) as refused:
            simulate(journals, None, OUTCOMES, jobs=bad)
        assert refused.value.code == "INVALID_ARGUMENT" and "jobs must be an integer from 1 to 256" in refused.value.message


def test_the_memory_case_writes_nothing_and_refuses_source_refs_without_a_package(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    case = MemoryCase.create("M1")
    case.open_revision([{"statement": "s"}], 50)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget()
    budget.initialize()
    budget.reserve("H1", "a1", "source.find_text")
    with pytest.raises(LedgerError) as info:
        budget.record_result("H1", "a1", {"x": 1}, source_refs=["sources/app.py"])
    assert info.value.code == "SOURCE_REF_INVALID"
    result = budget.record_result("H1", "a1", {"x": 1})
    assert result.action["novelty_score"] == 100 and budget.snapshot().state["H1"]["spent_units"] == 10
    assert list(tmp_path.iterdir()) == []


# --- command line ------------------------------------------------------------------------
def _cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_cli_json_has_exactly_the_keys_of_the_contract(tmp_path):
    journals = [str(DATA / f"{name}.jsonl") for name in JOURNALS]
    done = _cli("simulate", *journals, "--outcomes", str(OUTCOMES), "--vary", "max_low_information_steps=2,4",
                "--json", "--jobs", "1", "--per-run", str(tmp_path / "runs.jsonl"))
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert list(out) == ["policies"]
    assert [p["name"] for p in out["policies"]] == ["example", "max_low_information_steps=2",
                                                   "max_low_information_steps=4"]
    figures = ["runs", "steps", "steps_taken", "steps_refused", "units_spent", "units_rewarded",
               "runs_abandoned", "runs_exhausted", "units_per_run"]
    for policy in out["policies"]:
        assert list(policy) == ["name", "policy_sha256", *figures, "by_outcome"]
        assert sorted(policy["by_outcome"]) == ["failed", "resolved"]
        assert all(list(v) == figures for v in policy["by_outcome"].values())
        assert policy["runs"] == 3 and policy["steps"] == policy["steps_taken"] + policy["steps_refused"]
    assert out["policies"][0]["policy_sha256"] == example_policy().config.policy_sha256
    per_run = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert len(per_run) == 9 and per_run[0]["run"] == "django__django-11206" and per_run[0]["outcome"] == "resolved"


def test_cli_csv_and_table(tmp_path):
    journal = str(DATA / "django__django-11206.jsonl")
    done = _cli("simulate", journal, "--csv", "--jobs", "1")
    assert done.exit_code == 0
    assert done.stdout.splitlines() == [
        "policy,outcome,runs,steps,steps_taken,steps_refused,units_spent,units_rewarded,runs_abandoned,runs_exhausted,"
        "units_per_run",
        "example,(all),1,23,15,8,145,42,1,0,145"]
    table = _cli("simulate", journal, "--jobs", "1")
    assert table.exit_code == 0 and "policy example" in table.stdout and "145" in table.stdout


def test_cli_a_malformed_line_fails_that_run_only_naming_file_and_line(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_bytes((DATA / "django__django-11206.jsonl").read_bytes())
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"op": "open_revision", "hypotheses": [{"statement": "s"}]}\n\n{"op": "reserve", "hypothesis": \n')
    done = CliRunner().invoke(main, ["simulate", str(tmp_path), "--json", "--jobs", "1"])
    assert done.exit_code == 1
    assert json.loads(done.stdout)["policies"][0]["runs"] == 1
    assert f"error: INVALID_JSON: 1 journal(s) not simulated: {bad}:3:" in done.stderr


def test_cli_every_journal_not_simulated_is_named_on_a_line_of_its_own(tmp_path):
    """However many journals fail, each is named: one message holding them all was cut short in the
    middle, and some were never named."""
    (tmp_path / "good.jsonl").write_bytes((DATA / "django__django-11206.jsonl").read_bytes())
    names = [f"bad-{n:02d}-{'x' * 150}.jsonl" for n in range(16)]
    for name in names:
        (tmp_path / name).write_text('{"op": "open_revision", "hypotheses": [{"statement": "s"}]}\n{"op": 1}\n')
    done = CliRunner().invoke(main, ["simulate", str(tmp_path), "--csv", "--jobs", "1"])
    assert done.exit_code == 1
    lines = done.stderr.splitlines()
    assert [line.split(": ", 3)[:2] for line in lines[:-1]] == [["note", "not simulated"]] * 15
    assert lines[-1].startswith(f"error: UNKNOWN_OPERATION: 16 journal(s) not simulated (the other 15 named above): "
                                f"{tmp_path / names[0]}:2: ")
    assert all(any(f"{tmp_path / name}:2: " in line for line in lines) for name in names)


def test_cli_frontier_names_every_journal_not_simulated_when_no_run_has_the_good_label(tmp_path):
    """A --good label no run has ends the search; the journals left out for an error may be why,
    so each is named, as a plain simulate names them."""
    names = [f"bad-{n:02d}.jsonl" for n in range(4)]
    for name in names:
        (tmp_path / name).write_text('{"op": "open_revision", "hypotheses": [{"statement": "s"}]}\n{"op": 1}\n')
    done = CliRunner().invoke(main, ["simulate", str(tmp_path), "--frontier", "--good", "resolved", "--jobs", "1"])
    assert done.exit_code == 1
    lines = done.stderr.splitlines()
    assert [line.split(": ", 3)[:2] for line in lines[:-1]] == [["note", "not simulated"]] * 3
    assert lines[-1].startswith("error: INVALID_ARGUMENT: --good: no run has the outcome 'resolved' (outcomes: none")
    assert f"(the first: UNKNOWN_OPERATION: {tmp_path / names[0]}:2: " in lines[-1]
    assert all(any(f"{tmp_path / name}:2: " in line for line in lines) for name in names)


@pytest.mark.parametrize("vary_spec, named", [("nope=1,2", "nope"), ("max_low_information_steps=0", "max_low_information_steps=0"),
                                              ("max_low_information_steps=two", "two")])
def test_cli_bad_vary_is_a_usage_error_naming_it(vary_spec, named):
    done = CliRunner().invoke(main, ["simulate", str(DATA / "django__django-11206.jsonl"), "--vary", vary_spec])
    assert done.exit_code == 2 and "--vary" in done.stderr and named in done.stderr
    error_line = done.stderr.strip().splitlines()[-1]
    assert error_line.startswith("Error: --vary") and "INVALID" not in error_line  # a usage error, not a code


def test_a_note_names_ten_runs_and_counts_the_rest():
    """One journal simulated with the whole outcomes file: 99 runs have no journal; the note names
    the first ten (in the file's order) and counts the others, on one line."""
    done = CliRunner().invoke(main, ["simulate", str(DATA / "django__django-11206.jsonl"), "--outcomes",
                                     str(OUTCOMES), "--csv", "--jobs", "1"])
    assert done.exit_code == 0
    listed = [row.split(",")[0] for row in OUTCOMES.read_text().splitlines()[1:]]
    others = [run for run in listed if run != "django__django-11206"]
    assert done.stderr.splitlines() == [
        f"note: 99 run(s) in --outcomes have no journal: {', '.join(others[:10])} and 89 more"]


def test_cli_reports_outcomes_without_journal_and_journals_without_outcome(tmp_path):
    outcomes = tmp_path / "o.csv"
    outcomes.write_text("instance_id,outcome\ndjango__django-11206,resolved\nghost-run,failed\n")
    journals = [str(DATA / "django__django-11206.jsonl"), str(DATA / "astropy__astropy-13033.jsonl")]
    done = CliRunner().invoke(main, ["simulate", *journals, "--outcomes", str(outcomes), "--json", "--jobs", "1"])
    assert done.exit_code == 0
    assert "1 run(s) in --outcomes have no journal: ghost-run" in done.stderr
    assert "1 journal(s) have no outcome (counted as '(no outcome)'): astropy__astropy-13033" in done.stderr
    by_outcome = json.loads(done.stdout)["policies"][0]["by_outcome"]
    # failed is only the outcome of a run without a journal: none of the runs counted has it
    assert {k: v["runs"] for k, v in by_outcome.items()} == {"resolved": 1, "(no outcome)": 1}


def test_the_reports_outcomes_are_those_of_the_runs_it_counts(tmp_path):
    """A label only a run without a journal, or one whose journal has a malformed line, has: no
    by_outcome group (a column of 0/0 runs before), as --good refuses it."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "good.jsonl").write_bytes((DATA / "django__django-11206.jsonl").read_bytes())
    (tmp_path / "runs" / "bad.jsonl").write_text("{not json\n")
    outcomes = {"good": "resolved", "bad": "failed", "ghost": "partial"}
    report = simulate([tmp_path / "runs"], outcomes=outcomes, jobs=1)
    assert [run.run for run in report.runs if run.error] == ["bad"]
    assert [list(policy["by_outcome"]) for policy in report.policies] == [["resolved"]]
    with pytest.raises(LedgerError) as refused:
        frontier([tmp_path / "runs"], [example_policy()], outcomes, good="failed")
    assert refused.value.code == "INVALID_ARGUMENT" and "no run has the outcome 'failed'" in refused.value.message


def test_a_run_with_an_error_keeps_the_outcome_its_journal_records(tmp_path):
    """A malformed line before the journal's record_outcome: the run counts nowhere, but its outcome
    is still the journal's (checked against --outcomes), and no note says it is counted under
    '(no outcome)'."""
    lines = (DATA / "django__django-11206.jsonl").read_text().splitlines(keepends=True)
    lines.append(json.dumps({"op": "record_outcome", "outcome": "resolved", "source": "test"}) + "\n")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "bad.jsonl").write_text("".join(lines[:4]) + "{not json\n" + "".join(lines[5:]))
    (tmp_path / "runs" / "bare.jsonl").write_text("".join(lines[:4]) + "{not json\n")
    report = simulate([tmp_path / "runs"], jobs=1)
    assert [(run.run, run.outcome, run.error["line"]) for run in report.runs] == [
        ("bad", "resolved", 5), ("bare", None, 5)]
    done = CliRunner().invoke(main, ["simulate", str(tmp_path / "runs"), "--json", "--jobs", "1"])
    assert done.exit_code == 1
    assert "(no outcome)" not in done.stderr and "(counted as" not in done.stderr
    outcomes = tmp_path / "o.csv"
    outcomes.write_text("instance_id,outcome\nbad,failed\n")
    with pytest.raises(LedgerError) as refused:
        simulate([tmp_path / "runs"], outcomes=outcomes, jobs=1)
    assert "bad" in refused.value.message and "'resolved'" in refused.value.message
    outcomes.write_text("instance_id,outcome\nbad,resolved\n")
    done = CliRunner().invoke(main, ["simulate", str(tmp_path / "runs"), "--outcomes", str(outcomes), "--jobs", "1"])
    assert "1 journal(s) with an error have no outcome either (a run with an error counts nowhere): bare" in (
        done.stderr)
    assert "counted as '(no outcome)'" not in done.stderr


def test_per_run_names_a_journal_whose_path_is_not_utf8_and_reads_back_to_it(tmp_path):
    folder = tmp_path / os.fsdecode(b"runs-\xff")
    folder.mkdir()
    (folder / "r.jsonl").write_text("{not json\n")
    per_run = tmp_path / "per-run.jsonl"
    done = CliRunner().invoke(main, ["simulate", str(folder), "--per-run", str(per_run), "--jobs", "1"])
    assert done.exit_code == 1 and "INVALID_JSON" in done.stderr
    [line] = per_run.read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["error"]["file"] == str(folder / "r.jsonl")


def test_cli_plot_without_matplotlib_is_a_clear_error(tmp_path, monkeypatch):
    import ledger.simulation.plot as plot_module

    real = plot_module.importlib.import_module

    def no_matplotlib(name, *args):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(plot_module.importlib, "import_module", no_matplotlib)
    done = CliRunner().invoke(main, ["simulate", str(DATA / "django__django-11206.jsonl"), "--jobs", "1",
                                     "--plot", str(tmp_path / "p.svg")])
    assert done.exit_code == 1
    assert ("error: INVALID_ARGUMENT: --plot needs matplotlib: pip install '.[plot]' (in a clone of the "
            "repository)") in done.stderr
    wrong = CliRunner().invoke(main, ["simulate", str(DATA / "django__django-11206.jsonl"), "--plot", "p.pdf"])
    assert wrong.exit_code == 1 and "must end in .svg or .png" in wrong.stderr


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_cli_plot_draws_an_svg_labelled_by_policy(tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "tradeoff.svg"
    done = _cli("simulate", str(DATA / "django__django-11206.jsonl"), "--jobs", "1", "--outcomes", str(OUTCOMES),
                "--vary", "max_low_information_steps=2,4", "--plot", str(target))
    assert done.exit_code == 0
    svg = target.read_text()
    assert svg.startswith("<?xml") and "example (base)" in svg and "max_low_information_steps=4" in svg


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_policies_with_the_same_figures_share_one_point_with_every_name_readable(tmp_path):
    """Two policies that refuse the same steps (the base and ``novelty_mode=evidence``, say) get one
    marker whose label names both, one per line, instead of two labels printed over each other."""
    pytest.importorskip("matplotlib")

    def row(name, refused, stopped):
        return {"name": name, "steps": 100, "steps_refused": refused, "runs": 10, "runs_abandoned": stopped,
                "runs_exhausted": 0}

    target = plot_tradeoff([row("example", 14, 2), row("novelty_mode=evidence", 14, 2),
                            row("novelty_mode=atoms", 43, 7)], tmp_path / "same.svg")
    svg = target.read_text()
    assert re.findall(r'id="(PathCollection_\d+)"', svg) == ["PathCollection_1", "PathCollection_2"]
    labels = [text for text in re.findall(r"<!-- (.*?) -->", svg) if "example" in text or "mode" in text]
    assert labels == ["example (base)", "novelty_mode=evidence", "novelty_mode=atoms"]
    # the shared point is the base's red star, drawn once; the other point is blue
    assert [svg.count("style=\"fill: #d62728"), svg.count("style=\"fill: #1f77b4")] == [1, 1]


@pytest.mark.slow  # over 1.1 s in the default run: the slow lane (.ci/run) runs it
def test_policy_names_and_labels_are_drawn_as_they_are_never_as_math(tmp_path):
    """Text between two ``$`` is math to matplotlib: a policy named ``$\\undefinedcmd$`` failed the
    whole picture. Names and labels are drawn literally, in both pictures."""
    pytest.importorskip("matplotlib")
    name = "$\\undefinedcmd$ cost$5"
    row = {"name": name, "steps": 100, "steps_refused": 43, "runs": 10, "runs_abandoned": 7, "runs_exhausted": 0}
    svg = plot_tradeoff([{**row, "name": "example", "steps_refused": 14}, row], tmp_path / "t.svg").read_text()
    assert name in re.findall(r"<!-- (.*?) -->", svg)
    (tmp_path / "run.jsonl").write_bytes((DATA / "django__django-11206.jsonl").read_bytes())
    (tmp_path / "policy.toml").write_text(re.sub(r"(?m)^max_low_information_steps = 3", "max_low_information_steps = 2",
                                                 EXAMPLE_BUDGET.read_text()))  # the example's prices
    label = "ok $\\bad$"
    report = frontier([tmp_path / "run.jsonl"], [example_policy(), load_policy(f"{name}={tmp_path / 'policy.toml'}")],
                      {"run": label}, good=label, constraint=f"{label}=100%", folds=0)
    svg = plot_frontier(report, tmp_path / "f.svg", good=label).read_text()
    assert f"{label} runs stopped (%)" in re.findall(r"<!-- (.*?) -->", svg)


def test_policies_given_as_a_generator_draw_the_same_picture_with_its_outcome_label(tmp_path):
    """The rows were read twice, the second time for the axis label: a generator, used up by then,
    gave "runs stopped (%)" for points that counted the resolved runs."""
    pytest.importorskip("matplotlib")
    rows = [{"name": "example", "steps": 10, "steps_refused": 2, "runs": 4, "runs_abandoned": 1, "runs_exhausted": 0,
             "by_outcome": {"resolved": {"runs": 2, "runs_abandoned": 1, "runs_exhausted": 0}}}]
    listed = plot_tradeoff(rows, tmp_path / "a.svg").read_bytes()
    assert b"resolved runs stopped (%)" in listed
    assert plot_tradeoff(iter(rows), tmp_path / "b.svg").read_bytes() == listed


def test_cli_missing_journal_and_bad_policy_file(tmp_path):
    missing = CliRunner().invoke(main, ["simulate", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2  # a usage error, as apply's missing JOURNAL
    assert f"Error: Invalid value for 'JOURNAL_OR_FOLDER...': Path '{tmp_path / 'nope.jsonl'}' does not exist." \
        in missing.stderr
    policy = tmp_path / "p.toml"
    policy.write_text("max_reward_bps = 2.5\n")
    bad = CliRunner().invoke(main, ["simulate", str(DATA / "django__django-11206.jsonl"), "--policy", f"mine={policy}"])
    assert bad.exit_code == 1 and f"error: CONFIG_INVALID: {policy}: max_reward_bps" in bad.stderr
    empty = CliRunner().invoke(main, ["simulate", str(DATA / "django__django-11206.jsonl"), "--policy", ""])
    assert (empty.exit_code, empty.stderr) == (
        1, "error: CONFIG_INVALID: policy is empty (give a path; '.' is the current folder)\n")  # as --config ""


def test_a_journal_with_scoped_limits_simulates_like_apply(tmp_path):
    """Scope operations run in memory too: a case-wide limit of one action refuses the second."""
    lines = [
        {"op": "open_revision", "hypotheses": [{"statement": "a"}], "units_per_hypothesis": 100},
        {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"},
        {"op": "initialize"},
        {"op": "establish", "scope": "case", "limits": {"actions": 1}, "issuer": "controller"},
        {"op": "reserve", "hypothesis": "H1", "action_id": "a1", "action": "source.read_context"},
        {"op": "fail", "hypothesis": "H1", "action_id": "a1", "reason": "x"},
        {"op": "reserve", "hypothesis": "H1", "action_id": "a2", "action": "source.read_context"},
    ]
    journal = tmp_path / "scoped.jsonl"
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    result = CliRunner().invoke(main, ["simulate", str(journal), "--json", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)["policies"][0]
    assert (figures["steps"], figures["steps_taken"], figures["steps_refused"]) == (2, 1, 1)
    assert figures["units_spent"] == 5


TRAJECTORIES = Path(__file__).parent / "data" / "trajectories"


def cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli_main, [str(a) for a in args], input=stdin)
    return done.exit_code, done.stdout, done.stderr


def test_a_repeated_vary_key_is_a_usage_error_naming_it(tmp_path):
    code, out, err = cli("simulate", TRAJECTORIES, "--vary", "max_low_information_steps=2",
                         "--vary", "max_low_information_steps=3", "--jobs", "1")
    assert (code, out) == (2, "")
    assert "max_low_information_steps is given twice" in err


@pytest.mark.parametrize("values, message", [([2, 2], "--vary max_low_information_steps: the value 2 is given twice; "
                                                        "give each value once"),
                                             ([], "--vary max_low_information_steps: no value given; give at least one")])
def test_vary_in_the_api_refuses_what_the_command_line_refuses(values, message):
    with pytest.raises(LedgerError) as caught:
        vary(example_policy(), [("max_low_information_steps", values)])
    assert (caught.value.code, caught.value.message) == (INVALID_ARGUMENT, message)


@pytest.mark.parametrize("grid, message", [
    ([("units_per_hypothesis", range(1, 10**9))], "--vary units_per_hypothesis: more than 10000 values, more "
                                                  "policies than one grid may have; vary fewer values"),
    ([("units_per_hypothesis", itertools.count(1))], "--vary units_per_hypothesis: more than 10000 values, more "
                                                     "policies than one grid may have; vary fewer values"),
    ([("units_per_hypothesis", [10**5000])], "--vary units_per_hypothesis: an integer of thousands of digits, more "
                                             "than any setting takes"),
    ([("units_per_hypothesis", [True])], "--vary units_per_hypothesis: a value must be an integer, got True"),
    ([("units_per_hypothesis", [2.0])], "--vary units_per_hypothesis: a value must be an integer, got 2.0"),
    ([], "grid holds no (key, values) pair; give at least one")])
def test_vary_refuses_a_grid_it_cannot_make_before_holding_its_values(grid, message):
    """An endless or huge iterator of values was held whole (gigabytes) before the grid's bound refused it; an
    integer past 4,300 digits raised Python's ValueError; an empty grid was "a policy's name must be …"."""
    with pytest.raises(LedgerError) as caught:
        vary(example_policy(), grid)
    assert (caught.value.code, caught.value.message) == (INVALID_ARGUMENT, message)


@pytest.mark.parametrize("units, said", [(True, "true"), ("100", 'the string "100"'), (0, "the integer 0"),
                                         (10**5000, "an integer of thousands of digits")],
                         ids=["true", "text", "zero", "thousands of digits"])
def test_a_policys_units_per_hypothesis_is_refused_naming_the_value_as_its_file_spells_it(units, said):
    """It was named in Python's spelling (True, '100') where every budget key names a TOML value (true, the
    string "100"), and an integer past 4,300 digits raised Python's ValueError."""
    with pytest.raises(LedgerError) as caught:
        policy_from_mapping("p", {"units_per_hypothesis": units})
    assert (caught.value.code, caught.value.message) == ("CONFIG_INVALID", "units_per_hypothesis: must be an "
                                                         "integer from 1 to 9007199254740991 (the ledger's largest "
                                                         f"allocation), got {said}")


def test_a_journal_given_twice_or_also_in_a_folder_given_is_simulated_once(tmp_path):
    """It was refused as "run id … names two journals: X and X"."""
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copy(TRAJECTORIES / "django__django-11206.jsonl", folder)
    for given in ([folder, folder], [folder, folder / "django__django-11206.jsonl"]):
        assert [r.run for r in simulate(given, jobs=1).runs] == ["django__django-11206"]
    (tmp_path / "other").mkdir()
    shutil.copy(TRAJECTORIES / "django__django-11206.jsonl", tmp_path / "other")
    with pytest.raises(LedgerError) as caught:
        simulate([folder, tmp_path / "other"], jobs=1)
    assert caught.value.message.startswith("run id 'django__django-11206' names two journals: ")


@pytest.mark.parametrize("value", ["1_000", "+5", "\u0663", " 5x"])
def test_vary_integers_are_ascii_digits_only(value):
    with pytest.raises(LedgerError) as caught:
        parse_vary(f"max_low_information_steps=4,{value}")
    assert caught.value.message.startswith(f"--vary max_low_information_steps: {value!r} is not an integer (ASCII digits")
    assert parse_vary("max_low_information_steps=4, -3 ,05") == ("max_low_information_steps", [4, -3, 5])


def test_simulate_with_an_empty_list_of_policies_is_refused_not_the_example_policy():
    with pytest.raises(LedgerError) as caught:
        simulate([DATA / "django__django-11206.jsonl"], [])
    assert caught.value.code == INVALID_ARGUMENT and caught.value.message.startswith("policies is empty")
    assert simulate([DATA / "django__django-11206.jsonl"]).policies[0]["name"] == "example"


def test_vary_refuses_a_key_given_twice_in_the_api():
    from ledger import example_policy, vary
    with pytest.raises(LedgerError) as caught:
        vary(example_policy(), [("max_low_information_steps", [2]), ("max_low_information_steps", [3])])
    assert caught.value.code == INVALID_ARGUMENT and caught.value.details["key"] == "max_low_information_steps"
    assert [p.name for p in vary(example_policy(), [("max_low_information_steps", [2, 3])])] == [
        "max_low_information_steps=2", "max_low_information_steps=3"]


def test_two_policies_with_one_name_are_a_usage_error(tmp_path):
    code, out, err = cli("simulate", TRAJECTORIES, "--policy", f"a={EXAMPLE_BUDGET}", "--policy",
                         f"a={EXAMPLE_BUDGET}", "--jobs", "1")
    assert (code, out) == (2, "")
    assert "two policies are named 'a'" in err


@pytest.mark.parametrize("name, problem", [
    ("a\nb", "holds U+000A, a character that shows nothing"), ("x\u200b", "holds U+200B, a character that shows"),
    (" a", "has spaces around it"), ("re\u0301solu", "is not in composed form (NFC): it holds U+0301"),
])
def test_a_policy_name_that_would_read_as_another_is_refused(tmp_path, name, problem):
    """A policy's name heads its rows and columns in every report: one holding a character that shows
    nothing or breaks the line, or spaces, or letters not in composed form, would print as another
    (or split a CSV row); the outcome labels' rule. A usage error on the command line."""
    with pytest.raises(LedgerError) as caught:
        Policy(name, example_policy().config)
    assert caught.value.code == INVALID_ARGUMENT
    assert caught.value.message.startswith(f"the policy name {name!r} {problem}")
    code, out, err = cli("simulate", TRAJECTORIES, "--policy", f"{name}={EXAMPLE_BUDGET}", "--jobs", "1")
    assert (code, out) == (2, "") and f"Invalid value for --policy: the policy name {name!r} {problem}" in err
    assert Policy("r\u00e9solu \u00e9t\u00e9", example_policy().config).name == "r\u00e9solu \u00e9t\u00e9"


def test_simulate_accepts_one_journal_path_as_a_str_and_a_path():
    from ledger import simulate
    one = TRAJECTORIES / "django__django-11206.jsonl"
    for given in (str(one), one, [str(one)]):
        report = simulate(given, jobs=1)
        assert [result.run for result in report.runs] == ["django__django-11206"]


def test_simulate_outcomes_must_map_text_to_text():
    from ledger import simulate
    one = TRAJECTORIES / "django__django-11206.jsonl"
    for outcomes, said in (({"django__django-11206": None}, "the outcome of 'django__django-11206' is None"),
                           ({5: "resolved"}, "a key is int")):  # it said "got 5: str", as if 5 were the text
        with pytest.raises(LedgerError) as caught:
            simulate([one], outcomes=outcomes, jobs=1)
        assert (caught.value.code, caught.value.message) == (
            INVALID_ARGUMENT, f"outcomes must map run ids (str) to outcomes (str): {said}")
    report = simulate([one], outcomes={"django__django-11206": "resolved"}, jobs=1)
    assert list(report.policies[0]["by_outcome"]) == ["resolved"]


def test_simulate_refuses_a_bad_per_run_or_plot_target_before_running(tmp_path, monkeypatch):
    import ledger.simulation.simulator as simulation
    ran = []
    monkeypatch.setattr(simulation, "journal_files", lambda paths: ran.append(paths) or [])
    code, _, err = cli("simulate", TRAJECTORIES, "--per-run", tmp_path / "missing" / "runs.jsonl")
    assert (code, err) == (1, f"error: INVALID_ARGUMENT: --per-run {tmp_path}/missing/runs.jsonl: the folder "
                              f"{tmp_path}/missing does not exist\n")
    code, _, err = cli("simulate", TRAJECTORIES, "--plot", tmp_path / "figure.pdf")
    assert code == 1 and "the file must end in .svg or .png" in err
    code, _, err = cli("simulate", TRAJECTORIES, "--plot", tmp_path)
    assert code == 2 and "is a directory" in err  # click refuses a folder itself (usage)
    assert ran == []  # nothing was simulated


def test_an_output_file_given_twice_or_naming_an_input_is_refused_before_running(tmp_path):
    journals = tmp_path / "journals"
    journals.mkdir()
    journal = journals / "django__django-11206.jsonl"
    journal.write_bytes((DATA / journal.name).read_bytes())
    outcomes = tmp_path / "outcomes.csv"
    outcomes.write_text("run,outcome\ndjango__django-11206,resolved\n")
    (tmp_path / "link.jsonl").symlink_to(journal)
    policy = tmp_path / "policy.toml"
    policy.write_bytes((REPO / "config" / "budget.example.toml").read_bytes())
    for args, message in [
        (["--per-run", tmp_path / "x.toml", "--emit", tmp_path / "x.toml", "--frontier", "--max-stopped",
          "resolved=5"], f"--emit {tmp_path}/x.toml: is also the file of --per-run; give each output its own file"),
        (["--per-run", journal], f"--per-run {journal}: is an input of this command; writing it would replace it; "
                                 "give another file"),
        (["--per-run", tmp_path / "link.jsonl"], f"--per-run {tmp_path}/link.jsonl: is an input of this command"),
        (["--outcomes", outcomes, "--per-run", outcomes], f"--per-run {outcomes}: is an input of this command"),
        (["--policy", policy, "--per-run", policy], f"--per-run {policy}: is an input of this command"),
        (["--policy", f"mine={policy}", "--per-run", policy], f"--per-run {policy}: is an input of this command"),
        (["--per-run", journals / "runs.JSONL"], f"--per-run {journals}/runs.JSONL: is in a folder of journals this "
                                                 "command reads; simulating that folder again would read it as a "
                                                 "journal; write it elsewhere"),
    ]:
        before = {p: p.read_bytes() for p in (journal, outcomes, policy)}
        code, _, err = cli("simulate", journals, *args)
        assert code == 1 and err.startswith(f"error: INVALID_ARGUMENT: {message}"), err
        assert {p: p.read_bytes() for p in (journal, outcomes, policy)} == before
    for option in ("--config", "--analysis-config"):  # the global options' files are read too
        kept = policy.read_bytes() if option == "--config" else b"[limits]\n"
        policy.write_bytes(kept)
        code, _, err = cli(option, policy, "simulate", journals, "--per-run", policy)
        assert code == 1 and "is an input of this command" in err and policy.read_bytes() == kept
        assert not (tmp_path / "x.toml").exists()
    code, _, err = cli("simulate", journals, "--outcomes", outcomes, "--per-run", "/dev/null", "--emit", "/dev/null",
                       "--frontier", "--max-stopped", "resolved=100")  # no regular file: two outputs may share it
    assert code == 0, err


def test_simulate_without_matplotlib_refuses_plot_before_running(tmp_path, monkeypatch):
    import importlib
    import ledger.simulation.simulator as simulation
    real = importlib.import_module

    def no_matplotlib(name, *args):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args)
    ran = []
    monkeypatch.setattr(importlib, "import_module", no_matplotlib)
    monkeypatch.setattr(simulation, "journal_files", lambda paths: ran.append(paths) or [])
    code, _, err = cli("simulate", TRAJECTORIES, "--plot", tmp_path / "figure.svg")
    assert (code, err) == (1, "error: INVALID_ARGUMENT: --plot needs matplotlib: pip install '.[plot]' (in a clone of "
                           "the repository)\n")
    assert ran == [] and not (tmp_path / "figure.svg").exists()


PLOT_KEEPS_THE_CALLERS_MATPLOTLIB = """
import sys
import matplotlib
matplotlib.use("svg")  # the caller's choice (Jupyter's inline backend, say)
matplotlib.rcParams["svg.hashsalt"] = "callers-salt"
from ledger import plot_tradeoff
from ledger.simulation.plot import check_plot
rows = [{"name": "p", "runs": 2, "steps": 10, "steps_refused": 3, "runs_abandoned": 1, "runs_exhausted": 0,
         "by_outcome": {}}]
check_plot(sys.argv[1])
plot_tradeoff(rows, sys.argv[1])
print(matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules, matplotlib.rcParams["svg.hashsalt"])
"""


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_plotting_leaves_the_callers_backend_pyplot_and_settings_as_they_were(tmp_path):
    pytest.importorskip("matplotlib")
    done = subprocess.run([sys.executable, "-c", PLOT_KEEPS_THE_CALLERS_MATPLOTLIB, str(tmp_path / "p.svg")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["svg", "False", "callers-salt"]
    assert (tmp_path / "p.svg").read_bytes().startswith(b"<?xml")


@pytest.mark.parametrize("suffix", [".svg", ".png"])
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_the_picture_is_the_same_bytes_on_every_run(tmp_path, suffix):
    pytest.importorskip("matplotlib")
    report = simulate([DATA / f"{name}.jsonl" for name in JOURNALS],
                      vary(example_policy(), [("max_low_information_steps", [2, 4])]), OUTCOMES)
    first = plot_tradeoff(report.policies, tmp_path / f"a{suffix}").read_bytes()
    second = plot_tradeoff(report.policies, tmp_path / f"b{suffix}").read_bytes()
    assert first == second
    if suffix == ".svg":
        assert b"<dc:date>" not in first and b'id="p' in first  # element ids are there, but fixed


def test_the_plot_install_hint_says_what_works_from_a_clone():
    """The package is not on the package index: every hint names `pip install '.[plot]'`."""
    root = Path(__file__).parent.parent
    help_text = CliRunner().invoke(main, ["simulate", "--help"]).stdout
    for where, text in [("README.md", (root / "README.md").read_text(encoding="utf-8")),
                        ("docs/simulate.md", (root / "docs" / "simulate.md").read_text(encoding="utf-8")),
                        ("--help", " ".join(help_text.split()))]:
        assert "case-ledger[plot]" not in text and "pip install '.[plot]'" in text, where


@pytest.mark.parametrize("vary_spec", ["max_low_information_steps=4,4", "max_low_information_steps=4, 04",
                                       "units_per_hypothesis=7,8,7"])
def test_a_vary_value_given_twice_is_a_usage_error(vary_spec):
    done = CliRunner().invoke(main, ["simulate", str(DATA / "django__django-11206.jsonl"), "--vary", vary_spec])
    assert done.exit_code == 2, done.output
    assert "--vary" in done.stderr and "is given twice" in done.stderr
    with pytest.raises(LedgerError) as info:
        parse_vary(vary_spec)
    assert info.value.code == "INVALID_ARGUMENT"


def test_a_policy_named_like_a_vary_policy_is_a_usage_error(tmp_path):
    policy = tmp_path / "max_low_information_steps=3.toml"  # named after its stem
    policy.write_text("max_low_information_steps = 3\n")
    done = CliRunner().invoke(main, ["simulate", str(DATA / "django__django-11206.jsonl"), "--policy",
                                     str(policy), "--vary", "max_low_information_steps=3"])
    assert done.exit_code == 2 and "two policies are named 'max_low_information_steps=3'" in done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_per_run_file_that_cannot_be_written_is_named_and_no_ledger_is_mentioned(tmp_path):
    full = tmp_path / "full.jsonl"
    full.symlink_to("/dev/full")  # writable, but every write fails: no space left on device
    done = CliRunner().invoke(main, ["simulate", str(DATA / "django__django-11206.jsonl"), "--jobs", "1", "--csv",
                                     "--per-run", str(full)])
    assert done.exit_code == 1
    assert done.stderr == f"error: STORAGE_ERROR: --per-run {full}: cannot write: No space left on device\n"
    assert full.is_symlink()  # a link to a device is written through, never replaced
    assert "ledger" not in done.stderr.lower().replace("error:", "") and "committed" not in done.stderr
    assert done.stdout.startswith("policy,outcome")  # the figures were printed first


def _small_files_only() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))  # a longer write fails (EFBIG), as on a full disk


@pytest.mark.parametrize("option", ["--emit", pytest.param("--per-run", marks=pytest.mark.slow),
                                    pytest.param("--plot", marks=pytest.mark.slow)])  # the slow lane: 4 processes each
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_an_output_file_that_cannot_be_written_whole_is_left_as_it_was(tmp_path, option):
    suffix = {"--per-run": ".jsonl", "--emit": ".toml", "--plot": ".svg"}[option]
    if option == "--plot":
        pytest.importorskip("matplotlib")
    kept = tmp_path / f"kept{suffix}"
    kept.write_bytes(b"what the user had\n")
    kept.chmod(0o640)
    frontier_args = ["--frontier", "--folds", "0", "--max-stopped", "resolved=100%"] if option == "--emit" else []
    command = [sys.executable, "-m", "ledger_cli", "simulate", str(DATA / "django__django-11206.jsonl"), "--jobs", "1",
               "--outcomes", str(DATA / "outcomes.csv"), "--vary", "max_low_information_steps=2,3", *frontier_args,
               option, str(kept)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, preexec_fn=_small_files_only)
    assert done.returncode == 1
    assert done.stderr.endswith(f"error: STORAGE_ERROR: {option} {kept}: cannot write: File too large (the file was "
                                "left as it was)\n")
    assert kept.read_bytes() == b"what the user had\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept.name]  # no temporary file left
    written = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert written.returncode == 0 and kept.read_bytes() != b"what the user had\n"
    assert oct(kept.stat().st_mode & 0o777) == oct(0o640)  # the file keeps its mode


def test_an_output_file_that_is_a_pipe_is_written_through(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ledger_cli", "simulate", str(DATA / "django__django-11206.jsonl"),
                           "--jobs", "1", "--json", "--per-run", "/dev/stderr"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0
    assert [json.loads(line)["run"] for line in done.stderr.splitlines()] == ["django__django-11206"]


@pytest.mark.parametrize("rows, message", [
    ("run,outcome\na,resolved\nb,\n", "line 3: run 'b' has an empty outcome"),
    ("run,outcome\na,resolved\nb,   \n", "line 3: run 'b' has an empty outcome"),
    ('run,note,outcome\na,"two\nlines",resolved\nb,x,\n', "line 4: run 'b' has an empty outcome"),
    ("run,outcome\n,resolved\n", "line 2: the run id (first column) is empty"),
    ("run,outcome\na,(all)\n", "line 2: run 'a': the outcome '(all)' is a name the report uses itself"),
    ("run,outcome\na,(no outcome)\n", "the outcome '(no outcome)' is a name the report uses itself"),
    ("run,outcome\na,resolved\na,failed\n", "line 3: run 'a' is listed twice"),
    # a record spanning lines is named by the line it starts on (it was the one it ends on)
    ('run,outcome\n\nb,resolved\n"a\n",x\n', "line 4: the run id 'a\\n' has spaces around it"),
])
def test_an_outcome_row_without_a_usable_outcome_is_refused_naming_file_and_line(tmp_path, rows, message):
    outcomes = tmp_path / "o.csv"
    outcomes.write_text(rows, encoding="utf-8")
    with pytest.raises(LedgerError) as info:
        simulate([DATA / "django__django-11206.jsonl"], None, outcomes)
    assert info.value.code == "INVALID_ARGUMENT"
    assert info.value.message.startswith(f"outcomes file {outcomes}: ") and message in info.value.message
    done = CliRunner().invoke(main, ["simulate", str(DATA / "django__django-11206.jsonl"), "--outcomes", str(outcomes)])
    assert done.exit_code == 1 and message in done.stderr and done.stdout == ""


@pytest.mark.parametrize("outcomes", [{"a": ""}, {"a": " "}, {"": "resolved"}, {"a": "(all)"}])
def test_an_outcomes_mapping_without_a_usable_outcome_is_refused(outcomes):
    with pytest.raises(LedgerError) as info:
        simulate([DATA / "django__django-11206.jsonl"], None, outcomes)
    assert info.value.code == "INVALID_ARGUMENT" and info.value.message.startswith("outcomes: ")


# --- only the policy's refusals count; apply and simulate decide alike ----------------------
OPENING = [{"op": "open_revision", "hypotheses": [{"statement": "a"}, {"statement": "b"}], "units_per_hypothesis": 100},
           {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}]


def _step(n: int, hypothesis: str = "H1", **reserve_keys) -> list[dict]:
    return [{"op": "reserve", "hypothesis": hypothesis, "action_id": f"a{n}", "action": "source.read_context",
             **reserve_keys},
            {"op": "record_result", "hypothesis": hypothesis, "action_id": f"a{n}", "evidence": {"o": n}},
            {"op": "settle", "hypothesis": hypothesis, "action_id": f"a{n}", "semantic_score": 50, "reason": "r"}]


def _write(tmp_path: Path, name: str, lines: list[dict]) -> Path:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


#: name → (journal lines, the code, the line number) of a refusal no policy decides
NOT_THE_POLICYS = {
    "malformed at": (OPENING + _step(1) + _step(2, at="yesterday") + _step(3), "INVALID_ARGUMENT", 7),
    "far-future at": (OPENING + _step(1, at="2026-01-01T00:00:00Z") + _step(2, at="2999-01-01T00:00:00Z"),
                      "INVALID_ARGUMENT", 7),
    "allocation past 2**53-1": ([{**OPENING[0], "units_per_hypothesis": 2**53 + 1}] + OPENING[1:] + _step(1),
                                "INVALID_JSON", 1),
    "allocation the ledger refuses": ([{**OPENING[0], "units_per_hypothesis": 0}] + OPENING[1:] + _step(1),
                                      "INVALID_ARGUMENT", 1),
    "evidence-store line": (OPENING + _step(1) + [{"op": "query", "request": {"tool": "source.read_context"},
                                                    "iteration_id": "i1"}] + _step(2), "INVALID_ARGUMENT", 7),
    "reserve on a rejected hypothesis": (OPENING + _step(1) + [{"op": "reject", "hypothesis": "H2", "reason": "r"}]
                                         + _step(2, "H2"), "ACCOUNT_TERMINAL", 8),
    "reserve while another action is pending": (OPENING + _step(1)[:1] + _step(2), "ACTION_PENDING", 5),
    "settle with a bad score": (OPENING + _step(1)[:2] + [{**_step(1)[2], "semantic_score": 500}], "INVALID_SCORE", 6),
    "scope established by someone else": (OPENING + [{"op": "establish", "scope": "revision:1", "limits": {"actions": 1},
                                                      "issuer": "mallory"}] + _step(1), "AUTHORITY_DENIED", 4),
    "unknown hypothesis": (OPENING + _step(1, "H7"), "UNKNOWN_HYPOTHESIS", 4),
}


@pytest.mark.parametrize("name", sorted(NOT_THE_POLICYS))
def test_a_refusal_the_policy_did_not_decide_makes_the_run_an_error_naming_file_and_line(tmp_path, name):
    lines, code, number = NOT_THE_POLICYS[name]
    journal = _write(tmp_path, "bad", lines)
    good = _write(tmp_path, "good", OPENING + _step(1))
    report = simulate([good, journal], [example_policy(), policy_from_mapping("lax", {})])
    assert [e["code"] for e in report.errors] == [code], report.errors
    assert (report.errors[0]["file"], report.errors[0]["line"]) == (str(journal), number)
    assert report.errors[0]["message"].startswith(f"{journal}:{number}: ")
    assert [row["runs"] for row in report.policies] == [1, 1]  # the good run only, under both policies
    assert all(run.error == report.errors[0] for run in report.runs if run.run == "bad")
    done = CliRunner().invoke(main, ["simulate", str(tmp_path), "--csv", "--jobs", "1"])
    assert done.exit_code == 1
    assert done.stderr.startswith(f"error: {code}: 1 journal(s) not simulated: {journal}:{number}: ")
    assert "example,(all),1," in done.stdout


def test_a_limit_of_the_analysis_config_is_not_a_refusal_of_the_policy(tmp_path):
    """budget_events_max (1 initialized + 3 per step): the 4th reservation would pass 12 events."""
    journal = _write(tmp_path, "long", OPENING + [line for n in range(1, 10) for line in _step(n)])
    report = simulate([journal], None, analysis=AnalysisConfig(limits={"budget_events_max": 12}))
    assert [(e["code"], e["line"]) for e in report.errors] == [("LIMIT_REACHED", 13)]
    assert "budget_events_max" in report.errors[0]["message"] and report.policies[0]["runs"] == 0


def test_what_follows_from_a_policy_refusal_is_not_an_error(tmp_path):
    """H1 has 30 units; a read costs 10 and refunds 4. A 25-unit search is refused (INSUFFICIENT_BUDGET) and its
    record and settle find no action (UNKNOWN_ACTION); three reads later 6 units are left, under the 10-unit floor:
    exhausted, so the next reserve and the reject on H1 are refused (ACCOUNT_TERMINAL). H2 goes on."""
    lines = ([{**OPENING[0], "units_per_hypothesis": 30}] + OPENING[1:] + _step(1) + _step(2, action="source.find_text")
             + _step(3) + _step(4) + _step(5) + _step(6) + [{"op": "reject", "hypothesis": "H1", "reason": "r"}]
             + _step(7, "H2"))
    policy = policy_from_mapping("plain", {"action_costs": {"source.find_text": 25}})
    journal = _write(tmp_path, "short", lines)
    traced = replay_run("short", parse_journal(journal), policy, trace=True)
    assert [code for _, code in traced.lines if code] == ["INSUFFICIENT_BUDGET", "UNKNOWN_ACTION", "UNKNOWN_ACTION",
                                                          "ACCOUNT_TERMINAL", "UNKNOWN_ACTION", "UNKNOWN_ACTION",
                                                          "ACCOUNT_TERMINAL"]
    run = simulate([journal], [policy]).runs[0]
    assert run.error is None and traced.error is None
    assert (run.steps, run.steps_taken, run.steps_refused, run.units_spent) == (7, 5, 2, 50)
    assert (run.exhausted, run.stopped_at_step) == (False, None)  # H2 is not exhausted: the run was not cut short


def _apply_like_the_cli(tmp_path: Path, journal: Path, policy: Policy, actor: str = "controller"):
    """What `ledger --actor ACTOR apply CASE JOURNAL --create C1 --keep-going` decides, line by line."""
    raw = journal.read_bytes().split(b"\n")
    case = Case.create(tmp_path / f"applied-{journal.stem}-{actor}", "C1", actor=actor, at=journal_first_at(raw))
    try:
        results = list(apply_journal(case, raw, budget=case.budget(policy.config), keep_going=True))
        return [(r.line, None if r.ok else r.error.code) for r in results], case.balances()
    finally:
        case.close()


def _timed(lines: list[dict], start: int = 0) -> list[dict]:
    return [{**line, "at": f"2026-01-05T10:{(start + i) // 60:02d}:{(start + i) % 60:02d}Z"} for i, line in enumerate(lines)]


#: name → (journal lines, actor): scoped limits, an actor's authority, and times judged by a duration limit
DECIDED_ALIKE = {
    "actions limit of a hypothesis": (OPENING + [{"op": "establish", "scope": "hypothesis:1/H1", "limits": {"actions": 2},
                                                  "issuer": "controller"}] + _step(1) + _step(2) + _step(3), "controller"),
    "units limit, task failed": (OPENING + [{"op": "establish", "scope": "case", "limits": {"units": 12},
                                             "issuer": "controller", "on_exhausted": "task_failed"}]
                                 + _step(1) + _step(2) + _step(3) + _step(4, "H2"), "controller"),
    "units limit, scope cancelled": (OPENING + [{"op": "establish", "scope": "revision:1", "limits": {"units": 12},
                                                 "issuer": "controller", "on_exhausted": "scope_cancelled"}]
                                     + _step(1) + _step(2, "H2") + _step(3) + _step(4, "H2"), "controller"),
    "the actor establishes": (OPENING + [{"op": "establish", "scope": "revision:1", "limits": {"actions": 1},
                                          "issuer": "alice"}] + _step(1) + _step(2), "alice"),
    "another actor may not": (OPENING + [{"op": "establish", "scope": "revision:1", "limits": {"actions": 1},
                                          "issuer": "alice"}] + _step(1) + _step(2), "bob"),
    "duration limit, timed lines": (_timed(OPENING + [{"op": "establish", "scope": "case", "limits": {"duration_ms": 9500},
                                                       "issuer": "controller"}]
                                           + [line for n in range(1, 6) for line in _step(n)]), "controller"),
    "times raised to the previous event": (_timed(OPENING + _step(1)) + _timed(_step(2), start=-30)
                                           + _timed(_step(3), start=100), "controller"),
    "a test priced by test_costs": ([{**OPENING[0], "units_per_hypothesis": 25}] + OPENING[1:]
                                    + [{"op": "request_test", "hypothesis": "H1", "action_id": "t1", "kind": "human",
                                        "operation_id": "op-t1"},
                                       {"op": "request_test", "hypothesis": "H2", "action_id": "t2",
                                        "kind": "automated", "operation_id": "op-t2"},
                                       {"op": "fail", "hypothesis": "H2", "action_id": "t2", "reason": "no runner"}]
                                    + _step(1), "controller"),
}


@pytest.mark.parametrize("name", sorted(DECIDED_ALIKE))
@pytest.mark.sampled(every=4)
def test_simulate_decides_every_line_as_apply_does_with_scopes_actors_and_times(tmp_path, name):
    lines, actor = DECIDED_ALIKE[name]
    journal = _write(tmp_path, "run", lines)
    for policy in [example_policy(), policy_from_mapping("costly", {"default_action_cost": 6})]:
        applied, balances = _apply_like_the_cli(tmp_path / policy.name, journal, policy, actor)
        traced = replay_run("run", parse_journal(journal), policy, trace=True, actor=actor)
        assert traced.lines == applied, policy.name
        fast = replay_run("run", parse_journal(journal), policy, actor=actor)
        steps = {number for number, line in parse_journal(journal) if line["op"] in ("reserve", "request_test")}
        refused = sum(1 for number, code in applied if code and number in steps)
        if fast.error is None:
            assert (fast.steps_refused, fast.units_spent) == (refused, sum(b["spent_units"] for b in balances))
        else:  # not the policy's doing: the line apply refuses is the one named
            assert (fast.error["line"], fast.error["code"]) in applied, fast.error
    assert any(code for _, code in applied) or name == "times raised to the previous event"


def test_a_test_request_the_policy_cannot_afford_is_a_refused_step_not_a_run_error(tmp_path):
    """request_test reserves a test action at its test_costs price: the policy decides whether it fits
    (30 units for a human test, 25 in the account), as it decides a reserve."""
    lines, _ = DECIDED_ALIKE["a test priced by test_costs"]
    run = simulate([_write(tmp_path, "tests", lines)], None).runs[0]
    assert run.error is None
    # H1: the human test (30) is refused; H2: the automated test (15) is taken, then failed; H1's read (5) is taken
    assert (run.steps, run.steps_taken, run.steps_refused, run.units_spent) == (3, 2, 1, 20)
    cheap = policy_from_mapping("cheap tests", {"test_costs": {"human": 20}})
    assert simulate([_write(tmp_path, "tests", lines)], [cheap]).runs[0].steps_refused == 0


def test_the_global_actor_reaches_the_simulation(tmp_path):
    lines, _ = DECIDED_ALIKE["the actor establishes"]
    journal = _write(tmp_path, "run", lines)
    as_alice = CliRunner().invoke(main, ["--actor", "alice", "simulate", str(journal), "--csv", "--jobs", "1"])
    assert as_alice.exit_code == 0, as_alice.output
    assert as_alice.stdout.splitlines()[1].startswith("example,(all),1,2,1,1,")  # the limit of one action refused one
    as_controller = CliRunner().invoke(main, ["simulate", str(journal), "--csv", "--jobs", "1"])
    assert as_controller.exit_code == 1 and "error: AUTHORITY_DENIED: 1 journal(s) not simulated:" in as_controller.stderr
    bad = CliRunner().invoke(main, ["--actor", "not an id", "simulate", str(journal)])
    assert bad.exit_code == 1 and bad.stderr.startswith("error: INVALID_ID:")


def test_a_duration_limit_over_lines_without_at_is_an_error_not_a_guess(tmp_path):
    """apply judges a line without "at" by the machine's clock while it applies it: 400 untimed steps under a
    duration limit are taken or refused by how fast the machine is, which no replay can know."""
    lines = OPENING + [{"op": "establish", "scope": "case", "limits": {"duration_ms": 50}, "issuer": "controller"}]
    journal = _write(tmp_path, "untimed", lines + [line for n in range(1, 401) for line in _step(n)])
    report = simulate([journal], None)
    assert [(e["code"], e["line"]) for e in report.errors] == [("INVALID_ARGUMENT", 5)]
    assert 'line 1 has no "at"' in report.errors[0]["message"] and report.policies[0]["runs"] == 0
    timed = _write(tmp_path, "timed", _timed(lines) + [line for n in range(1, 401) for line in _step(n)])
    error = simulate([timed], None).errors[0]  # the first reservation, itself without "at"
    assert error["line"] == 5 and 'line 5 has no "at"' in error["message"]
    no_limit = _write(tmp_path, "free", OPENING + [line for n in range(1, 4) for line in _step(n)])
    assert simulate([no_limit], None).errors == []  # without a duration limit the clock decides nothing


def test_the_simulated_case_starts_at_the_journals_first_at_as_apply_create_does():
    from ledger_cli.journal import PEEK_LINES_MAX
    from ledger.simulation.replay import FIRST_AT_LINES

    assert FIRST_AT_LINES == PEEK_LINES_MAX


PEAK_RSS = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
assert done.returncode == 0, done.stderr
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _peak_rss_kib(*args: str) -> int:
    """Peak resident set (KiB) of ``ledger ARGS`` in a process of its own."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, sys.executable, "-m", "ledger_cli", *args],
                          capture_output=True, text=True, check=True, timeout=600)
    return int(done.stdout)


def _long_journal(path: Path, steps: int, evidence_bytes: int) -> Path:
    with open(path, "w", encoding="utf-8") as out:
        for line in [{**OPENING[0], "units_per_hypothesis": 10**12}, *OPENING[1:]]:
            out.write(json.dumps(line) + "\n")
        filler = "x" * evidence_bytes
        for n in range(steps):
            for line in _step(n):
                if line["op"] == "record_result":
                    line["evidence"] = {"n": n, "text": filler}
                out.write(json.dumps(line) + "\n")
    return path


@pytest.mark.slow
def test_simulate_streams_a_journal_so_peak_memory_does_not_grow_with_its_length(tmp_path):
    """The same 3,000 steps in a 1.3 MB journal and in a 48 MB one (16 kB of evidence per step), under two
    policies: the long journal is read a line at a time for each policy, never held, parsed or not."""
    short = _long_journal(tmp_path / "short.jsonl", 3000, 100)
    long = _long_journal(tmp_path / "long.jsonl", 3000, 16_000)
    try:
        assert long.stat().st_size > 30 * short.stat().st_size
        grid = ["--vary", "max_low_information_steps=2", "--jobs", "1", "--csv"]
        base = _peak_rss_kib("simulate", str(short), *grid)
        peak = _peak_rss_kib("simulate", str(long), *grid)
        assert peak <= 1.25 * base, (peak, base)
    finally:
        long.unlink()  # pytest keeps recent tmp folders: free the disk


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_standard_output_that_refuses_the_figures_is_reported_without_talking_of_a_ledger(tmp_path):
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "ledger_cli", "simulate", str(DATA / "django__django-11206.jsonl"),
                               "--csv", "--jobs", "1", "--per-run", str(tmp_path / "runs.jsonl")],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr == ("error: OUTPUT_ERROR: cannot print the result (No space left on device); simulate wrote "
                           "nothing (no --per-run or --plot file yet): run it again\n")
    assert not (tmp_path / "runs.jsonl").exists()


def test_simulate_help_describes_the_json_output_it_prints():
    shown = " ".join(CliRunner().invoke(main, ["simulate", "--help"]).output.split())
    assert 'Print one JSON object, {"policies": [...]}' in shown and "JSON array" not in shown.split("--nl")[0]
    done = CliRunner().invoke(main, ["simulate", str(DATA / "django__django-11206.jsonl"), "--json", "--jobs", "1"])
    assert done.exit_code == 0 and list(json.loads(done.stdout)) == ["policies"]




# --- outcomes from journals, units per run per outcome (docs/simulate.md, docs/runs.md) ---------
def _journal_with_outcome(tmp_path: Path, name: str, outcome: str | None) -> Path:
    path = tmp_path / f"{name}.jsonl"
    text = (DATA / "django__django-11206.jsonl").read_text(encoding="utf-8").rstrip("\n") + "\n"
    if outcome is not None:
        text += json.dumps({"op": "record_outcome", "outcome": outcome, "source": "swe-bench evaluation"}) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def test_simulate_reads_each_runs_outcome_from_its_journal_and_the_csv_fills_the_rest(tmp_path):
    _journal_with_outcome(tmp_path, "a", "resolved")
    _journal_with_outcome(tmp_path, "b", None)
    report = simulate([tmp_path], jobs=1)
    assert {r.run: r.outcome for r in report.runs} == {"a": "resolved", "b": None}
    assert sorted(report.policies[0]["by_outcome"]) == ["(no outcome)", "resolved"]
    csv_file = tmp_path / "outcomes.csv"
    csv_file.write_text("instance_id,outcome\na,resolved\nb,failed\n", encoding="utf-8")
    report = simulate([tmp_path], outcomes=csv_file, jobs=1)
    assert {r.run: r.outcome for r in report.runs} == {"a": "resolved", "b": "failed"}
    assert report.runs_without_outcome == []


def test_a_run_whose_journal_and_csv_disagree_is_an_error_naming_both(tmp_path):
    _journal_with_outcome(tmp_path, "a", "resolved")
    csv_file = tmp_path / "outcomes.csv"
    csv_file.write_text("instance_id,outcome\na,failed\n", encoding="utf-8")
    with pytest.raises(LedgerError) as caught:
        simulate([tmp_path / "a.jsonl"], outcomes=csv_file, jobs=1)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert "'resolved'" in caught.value.message and "'failed'" in caught.value.message and "a" in caught.value.message
    done = CliRunner().invoke(main, ["simulate", str(tmp_path / "a.jsonl"), "--outcomes", str(csv_file), "--jobs", "1"])
    assert done.exit_code == 1 and "error: INVALID_ARGUMENT: run a: its journal records" in done.stderr


def test_units_per_run_is_units_spent_per_run_of_each_outcome_rounded_down(tmp_path):
    journals = [str(DATA / f"{name}.jsonl") for name in JOURNALS]
    report = simulate(journals, outcomes=OUTCOMES, jobs=1)
    for policy in report.policies:
        for figures in (policy, *policy["by_outcome"].values()):
            assert figures["units_per_run"] == figures["units_spent"] // figures["runs"]
        per_outcome = {}
        for run in report.runs:
            per_outcome.setdefault(run.outcome, []).append(run.units_spent)
        for outcome, spent in per_outcome.items():
            assert policy["by_outcome"][outcome]["units_per_run"] == sum(spent) // len(spent)


def test_vary_takes_the_novelty_mode_words_and_refuses_an_unknown_one(tmp_path):
    assert parse_vary("novelty_mode=evidence, atoms") == ("novelty_mode", ["evidence", "atoms"])
    grid = vary(example_policy(), [("novelty_mode", ["evidence", "atoms"])])
    assert [p.name for p in grid] == ["novelty_mode=evidence", "novelty_mode=atoms"]
    assert grid[0].policy_sha256 == example_policy().policy_sha256
    assert grid[1].config.novelty_mode == "atoms"
    with pytest.raises(LedgerError) as caught:
        vary(example_policy(), [("novelty_mode", ["lines"])])
    assert caught.value.code == "CONFIG_INVALID" and "novelty_mode" in caught.value.message


def test_a_journal_path_that_is_a_pipe_is_refused_as_not_a_file_never_as_missing(tmp_path):
    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(LedgerError) as caught:
        simulate([fifo])
    assert caught.value.code == "INVALID_ARGUMENT"
    assert "not a regular file or folder" in caught.value.message and "no such" not in caught.value.message


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_vary_grid_of_more_policies_than_one_grid_may_have_is_refused_before_any_is_made():
    """A 5000 × 5000 grid grew to 19 GB before printing anything; it is refused at once, naming its size."""
    from ledger.simulation.simulator import GRID_POLICIES_MAX

    values = ",".join(str(n) for n in range(1, 5001))
    done = CliRunner().invoke(main, ["simulate", str(DATA / "django__django-11206.jsonl"), "--vary",
                                     f"max_low_information_steps={values}", "--vary", f"units_per_hypothesis={values}"])
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == ("Error: --vary makes 5000 × 5000 = 25000000 policies, more than "
                                                    f"the {GRID_POLICIES_MAX} one grid may have; vary fewer values")
    assert len(vary(example_policy(), [("max_low_information_steps", range(1, 101)),
                                       ("units_per_hypothesis", range(1, 101))])) == GRID_POLICIES_MAX


@pytest.mark.parametrize("named", ["/dev/stdout", "the file itself"])
def test_per_run_lines_to_standard_output_redirected_to_a_file_follow_the_table(tmp_path, named):
    """The file was replaced whole by the per-run lines, losing the table printed before them."""
    target = tmp_path / "out.txt"
    journal = DATA / "django__django-11206.jsonl"
    with open(target, "wb") as stdout:
        done = subprocess.run([sys.executable, "-m", "ledger_cli", "simulate", str(journal), "--per-run",
                               "/dev/stdout" if named == "/dev/stdout" else str(target)],
                              stdout=stdout, stderr=subprocess.PIPE, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = target.read_text().splitlines()
    assert lines[0].startswith("policy example  (policy_sha256 ") and lines[1].startswith("outcome ")
    assert json.loads(lines[-1])["run"] == "django__django-11206" and len(lines) == 5


def test_an_output_file_on_a_read_only_file_system_is_refused_saying_so(tmp_path):
    """It was refused as "permission denied", which sent the user to chmod."""
    from ledger.simulation.output_files import check_output_file

    (tmp_path / "out").mkdir()
    folder, undo = read_only_mount(tmp_path / "out")
    try:
        with pytest.raises(LedgerError) as caught:
            check_output_file(folder / "runs.jsonl", "--per-run")
    finally:
        undo()
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.message == f"--per-run {folder / 'runs.jsonl'}: cannot write there (the file system is read-only)"


def test_source_refs_resolve_in_a_package_given_as_str_bytes_or_path(tmp_path):
    """``package`` is a path of any kind a path argument takes; bytes were a TypeError."""
    (tmp_path / "pkg" / "sources").mkdir(parents=True)
    (tmp_path / "pkg" / "sources" / "app.py").write_text("def add(a, b):\n    return a - b\n", encoding="utf-8")
    journal = tmp_path / "run.jsonl"
    journal.write_text("\n".join(json.dumps(line) for line in (
        {"op": "open_revision", "hypotheses": [{"statement": "add() subtracts"}], "units_per_hypothesis": 40},
        {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"},
        {"op": "initialize"},
        {"op": "reserve", "hypothesis": "H1", "action_id": "q1", "action": "source.read_context"},
        {"op": "record_result", "hypothesis": "H1", "action_id": "q1", "evidence": {"finding": "a - b"},
         "source_refs": ["sources/app.py"]})) + "\n", encoding="utf-8")
    for package in (tmp_path / "pkg", str(tmp_path / "pkg"), bytes(tmp_path / "pkg")):
        report = simulate([journal], package=package, jobs=1)
        assert report.errors == [] and report.runs[0].error is None and report.runs[0].steps == 1, report.runs
    assert simulate([journal], jobs=1).runs[0].error["code"] == "SOURCE_REF_INVALID"


def test_a_journal_or_outcomes_file_the_system_refuses_to_read_is_storage_error_not_a_bad_input(tmp_path, monkeypatch):
    """The open-file limit reached (or no permission) is the file system's refusal, never a journal or an
    outcomes file that is wrong (INVALID_ARGUMENT, as it was)."""
    import errno

    import ledger.model.outcomes as outcomes_module
    import ledger.simulation.replay as replay

    def out_of_descriptors(path):
        raise OSError(errno.EMFILE, "Too many open files", str(path))
    journal = tmp_path / "r.jsonl"
    journal.write_text('{"op": "initialize"}\n')
    monkeypatch.setattr(replay, "open_to_read", out_of_descriptors)
    with pytest.raises(LedgerError) as caught:
        list(replay.journal_lines(journal))
    assert (caught.value.code, caught.value.message) == ("STORAGE_ERROR",
                                                         f"{journal}: cannot read: Too many open files")
    csv_file = tmp_path / "outcomes.csv"
    csv_file.write_text("run,outcome\nr,resolved\n")
    monkeypatch.setattr(outcomes_module, "open_to_read", out_of_descriptors)
    with pytest.raises(LedgerError) as refused:
        outcomes_module.read_outcomes(csv_file)
    assert refused.value.code == "STORAGE_ERROR" and "Too many open files" in refused.value.message


def test_a_policy_name_left_empty_before_its_equals_sign_is_refused(tmp_path):
    """``--policy =FILE.toml`` (a NAME from an unset variable, say) is no name at all: refused as a usage
    error, never named after the file as if no name had been given."""
    with pytest.raises(LedgerError) as caught:
        load_policy(f"={EXAMPLE_BUDGET}")
    assert caught.value.code == INVALID_ARGUMENT and caught.value.details == {"policy_name": ""}
    code, out, err = cli("simulate", TRAJECTORIES, "--policy", f"={EXAMPLE_BUDGET}", "--jobs", "1")
    assert (code, out) == (2, "")
    assert "Invalid value for --policy: the policy name before '=' in" in err and "is empty" in err
    assert load_policy(str(EXAMPLE_BUDGET)).name == "budget.example"


def test_a_vary_value_of_thousands_of_digits_is_quoted_by_its_start_and_end(tmp_path):
    """A refusal names the policy a --vary value would make: one of 4,300 digits is shortened, its middle
    counted (the whole name was quoted: over 2 KB of digits), as is one given twice."""
    digits = "9" * 4300
    code, out, err = cli("simulate", TRAJECTORIES, "--vary", f"max_low_information_steps={digits}", "--jobs", "1")
    assert (code, out) == (2, "")
    said = err.splitlines()[-1]
    assert said.startswith("Error: --vary max_low_information_steps=999") and "characters left out" in said
    assert said.endswith(": max_low_information_steps: an integer of about 4301 digits is outside ±9007199254740991")
    assert len(said) < 300
    with pytest.raises(LedgerError) as twice:
        vary(example_policy(), [("max_low_information_steps", [int(digits), int(digits)])])
    assert "characters left out" in twice.value.message and len(twice.value.message) < 200
