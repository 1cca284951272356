"""The frontier of a policy search (docs/simulate.md): baselines, frontier and choice against a brute-force
computation, held-out folds and bootstrap, the emitted policy, the evaluator equal to the full rules."""

from __future__ import annotations

import json
import random
import re
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from ledger import BudgetConfig, example_policy, frontier, plot_frontier, simulate, vary
from ledger.simulation import frontier as frontier_module
from ledger.simulation.evaluator import evaluate, step_table
from ledger.simulation.emit import policy_toml
from ledger.simulation.constraint import parse_max_stopped
from ledger.simulation.frontier import OUT_OF_REACH, choose, name_order, pareto_front, percentile_75
from ledger.simulation.replay import journal_lines
from ledger.simulation.replay import parse_journal, replay_run
from ledger.simulation.simulator import policy_from_mapping
from ledger.ground.errors import INVALID_ARGUMENT, LedgerError
from ledger_cli.main import main

from conftest import REPO

DATA = Path(__file__).parent / "data" / "trajectories"
OUTCOMES = DATA / "outcomes.csv"
RAW = Path(__file__).parent / "data" / "runs" / "mini-swe-agent-verified"
FILES = sorted(DATA.glob("*.jsonl"))
RUN_FIGURES = ("steps", "steps_taken", "steps_refused", "units_spent", "units_rewarded", "abandoned", "exhausted",
               "stopped_at_step", "outcome")
GRID = [("max_low_information_steps", [2, 3, 5]), ("units_per_hypothesis", [250, 100000])]


def _cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _numbers_as_numbers(name):
    return [int(part) if part.isdigit() else part for part in re.split("([0-9]+)", name)]


def _brute_force(policies, good, label, pct):
    """Every figure from plain simulate, the frontier by comparing every pair, the choice by filtering."""
    base = policies[0]
    no_stop = policy_from_mapping("no-stop", {**base.settings(), "max_low_information_steps": OUT_OF_REACH,
                                              "units_per_hypothesis": OUT_OF_REACH})
    spends = sorted(r.units_spent for r in simulate([DATA], [no_stop], OUTCOMES).runs)
    p75 = spends[-(-len(spends) * 3 // 4) - 1]
    cap = policy_from_mapping("cap-p75", {**base.settings(), "units_per_hypothesis": p75})
    everything = [no_stop, cap, *policies]
    runs = simulate([DATA], everything, OUTCOMES).runs
    figures = {}
    for policy in everything:
        mine = [r for r in runs if r.policy == policy.name]
        figures[policy.name] = (sum(r.units_spent for r in mine),
                                sum(1 for r in mine if r.outcome == good and r.steps_refused),
                                sum(1 for r in mine if r.outcome == label and r.steps_refused),
                                sum(1 for r in mine if r.outcome == label))
    front = [name for name, (u, s, _, _) in figures.items()
             if not any(u2 <= u and s2 <= s and (u2, s2) != (u, s) for u2, s2, _, _ in figures.values())]
    front.sort(key=lambda name: (figures[name][0], figures[name][1], _numbers_as_numbers(name)))
    allowed = [(u, s, _numbers_as_numbers(name), name) for name, (u, _, s, n) in figures.items() if s * 100 <= pct * n]
    best = min(allowed)
    choice = best[3] if best[0] < figures["no-stop"][0] else None
    return figures, front, choice, p75


@pytest.mark.parametrize("label, pct", [("resolved", 2),  # the other constraints in the slow lane (a frontier each)
                                        pytest.param("resolved", 10, marks=pytest.mark.slow),
                                        pytest.param("failed", 50, marks=pytest.mark.slow),
                                        pytest.param("resolved", 30, marks=pytest.mark.slow)])
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_frontier_and_the_choice_equal_a_brute_force_computation(label, pct):
    policies = [example_policy(), *vary(example_policy(), GRID)]
    report = frontier([DATA], policies, OUTCOMES, constraint=f"{label}={pct}%", folds=0)
    figures, front, choice, p75 = _brute_force(policies, "resolved", label, pct)
    rows = {row["name"]: row for row in report.policies}
    assert list(rows) == ["no-stop", "cap-p75", *[p.name for p in policies]]
    for name, (units, good_stopped, label_stopped, _) in figures.items():
        assert rows[name]["units_spent"] == units, name
        assert rows[name]["by_outcome"]["resolved"]["runs_stopped"] == good_stopped, name
        assert rows[name]["by_outcome"][label]["runs_stopped"] == label_stopped, name
        assert rows[name]["units_saved"] == figures["no-stop"][0] - units
    assert report.frontier == front
    assert report.choice["policy"] == choice
    assert report.evaluated[1].units_per_hypothesis == p75
    if choice is not None:
        assert report.choice["figures"] == rows[choice]
        assert report.choice["constraint"] == {"label": label, "max_stopped_pct": float(pct)}


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_baselines_never_stop_and_cap_at_the_75th_percentile_of_spend():
    report = frontier([DATA], [example_policy()], OUTCOMES, folds=0)
    rows = {row["name"]: row for row in report.policies}
    assert (rows["no-stop"]["runs_stopped"], rows["no-stop"]["units_saved"], rows["no-stop"]["runs_abandoned"],
            rows["no-stop"]["runs_exhausted"]) == (0, 0, 0, 0)
    assert rows["no-stop"]["units_spent"] == 34290 and rows["no-stop"]["units_per_run"] == 342
    assert rows["example"]["units_saved"] == 34290 - 29375
    assert rows["example"]["by_outcome"]["resolved"]["runs_stopped"] == 14
    assert rows["cap-p75"]["runs_stopped"] == 25
    assert report.choice == {"policy": None, "constraint": None, "reason": "no --max-stopped constraint given"}
    spent = [run.units_spent for run in report.simulation.runs if run.policy == "no-stop"]
    assert len(spent) == 100 and rows["cap-p75"]["units_per_hypothesis"] == percentile_75(spent) == 385
    # every row gives the allocation its policy sets (None: the journals' own), so a program can read the choice's
    assert {name: row["units_per_hypothesis"] for name, row in rows.items()} == {
        "no-stop": 2 ** 40, "cap-p75": 385, "example": None}


@pytest.mark.slow  # over 0.6 s in the default run: the slow lane (.ci/run) runs it
def test_the_frontier_table_names_the_cap_its_cap_p75_baseline_computed(tmp_path):
    journals = tmp_path / "journals"
    journals.mkdir()
    for name in sorted(p.name for p in DATA.glob("*.jsonl"))[:8]:
        (journals / name).write_bytes((DATA / name).read_bytes())
    done = CliRunner().invoke(main, ["simulate", str(journals), "--frontier", "--outcomes", str(OUTCOMES)])
    report = frontier([journals], [example_policy()], OUTCOMES, folds=0)
    cap = next(row["units_per_hypothesis"] for row in report.policies if row["name"] == "cap-p75")
    assert done.exit_code == 0 and f"\ncap-p75: units_per_hypothesis = {cap} (the 75th percentile of the units " \
        "each run spent under no-stop)\n" in done.output


def test_the_frontier_table_orders_tied_policies_as_the_frontier_line_does_numbers_as_numbers(tmp_path):
    journals = tmp_path / "journals"
    journals.mkdir()
    for name in sorted(p.name for p in DATA.glob("*.jsonl"))[:4]:
        (journals / name).write_bytes((DATA / name).read_bytes())
    done = CliRunner().invoke(main, ["simulate", str(journals), "--frontier", "--outcomes", str(OUTCOMES),
                                     "--vary", "max_low_information_steps=100,9,11,10"])
    assert done.exit_code == 0, done.output
    table = [line.split()[0] for line in done.output.splitlines() if line.startswith("max_low_information_steps=")]
    assert table == [f"max_low_information_steps={n}" for n in (9, 10, 11, 100)]
    frontier_line = next(line for line in done.output.splitlines() if line.startswith("frontier (fewest units"))
    named = [n for n in frontier_line.split(": ", 1)[1].split(", ") if n.startswith("max_low")]
    assert named == table


@pytest.mark.parametrize("values, expected", [([5], 5), ([1, 2, 3, 4], 3), ([4, 1, 3, 2, 5], 4), ([0, 0], 1),
                                              (list(range(1, 101)), 75)])
def test_percentile_75_is_the_nearest_rank(values, expected):
    assert percentile_75(values) == expected


def test_the_frontier_keeps_every_point_no_other_dominates_and_ties_both():
    points = [("a", 10, 5), ("b", 10, 5), ("c", 12, 5), ("d", 8, 9), ("e", 20, 0), ("f", 9, 9)]
    assert pareto_front(points) == ["d", "a", "b", "e"]


def test_ties_order_policy_names_with_their_numbers_compared_as_numbers():
    points = [("steps=10", 10, 5), ("steps=6", 10, 5), ("steps=06", 10, 5), ("steps=6b", 10, 5), ("a", 10, 5)]
    assert pareto_front(points) == ["a", "steps=06", "steps=6", "steps=6b", "steps=10"]
    assert name_order("x=6") < name_order("x=10") and name_order("x=10") < name_order("y=1")


def _leave_one_out(tmp_path, resolved: int, failed: int):
    """A frontier over ``resolved`` + ``failed`` bundled runs with one fold per run, and each run's outcome."""
    table = dict(line.split(",") for line in OUTCOMES.read_text().splitlines()[1:])
    picked = ([r for r, o in table.items() if o == "resolved"][:resolved]
              + [r for r, o in table.items() if o == "failed"][:failed])
    for run in picked:
        (tmp_path / f"{run}.jsonl").write_bytes((DATA / f"{run}.jsonl").read_bytes())
    policies = [example_policy(), *vary(example_policy(), [("max_low_information_steps", [2, 4, 8])])]
    report = frontier([tmp_path], policies, {run: table[run] for run in picked}, constraint="failed=100%",
                      folds=len(picked), seed=3, samples=200)
    return report, {run: table[run] for run in picked}


def test_held_out_shares_leave_out_the_folds_without_such_runs(tmp_path):
    """With one run per fold, a failed run's fold has no resolved run: it gives no share of
    resolved runs stopped (it used to count as 0 %, lowering the mean), and the constraint's own
    label (failed, not --good) gets its share too."""
    report, outcome = _leave_one_out(tmp_path, resolved=3, failed=2)
    held = report.choice["held_out"]
    ids = sorted(outcome)
    random.Random(3).shuffle(ids)
    stopped = {(r.policy, r.run): r.steps_refused > 0 for r in report.simulation.runs}
    shares = {"resolved": [], "failed": []}
    for run, name in zip(ids, held["chosen"]):  # fold k holds the k-th shuffled run alone
        shares[outcome[run]].append(100.0 * stopped[(name or "no-stop", run)])
    assert (held["folds_without_good_runs"], held["folds_without_constraint_runs"]) == (2, 3)
    from ledger_cli.frontier import choice_lines
    line = choice_lines(report.choice, "resolved")[2]
    assert "; 2 fold(s) without a resolved run left out)" in line
    assert "; 3 fold(s) without a failed run left out)" in line  # the spread is of 2 folds, not 5: said
    for key, label in (("good_stopped_pct", "resolved"), ("constraint_stopped_pct", "failed")):
        values = shares[label]
        assert held[key] == {"mean": round(sum(values) / len(values), 2), "min": min(values), "max": max(values)}
    assert set(report.choice["in_sample"]) == {"units_saved_pct", "good_stopped_pct", "constraint_stopped_pct"}
    boot = report.choice["bootstrap"]
    assert boot["samples_without_good_runs"] > 0 and len(boot["good_stopped_pct"]) == 2


def test_a_held_out_fold_or_resample_that_spent_nothing_is_left_out_of_the_units_saved(tmp_path):
    """0 units saved of 0 spent is no share: such a fold counted as 0 %, lowering the mean (and a
    resample so, the interval); now left out and counted, as folds without a good run are."""
    table = dict(line.split(",") for line in OUTCOMES.read_text().splitlines()[1:])
    spenders = [run for run, outcome in table.items() if outcome == "resolved"][:2]
    for run in spenders:
        (tmp_path / f"{run}.jsonl").write_bytes((DATA / f"{run}.jsonl").read_bytes())
    for idle in ("idle-1", "idle-2"):  # journals that spend nothing
        (tmp_path / f"{idle}.jsonl").write_bytes(b"")
    outcomes = {run: "resolved" for run in [*spenders, "idle-1", "idle-2"]}
    spent = min(r.units_spent for r in simulate([tmp_path], [example_policy()], outcomes).runs if r.run in spenders)
    policies = [example_policy(), *vary(example_policy(), [("units_per_hypothesis", [spent // 2])])]
    report = frontier([tmp_path], policies, outcomes, constraint="resolved=100%", folds=4, seed=0, samples=200)
    held, boot = report.choice["held_out"], report.choice["bootstrap"]
    assert held["chosen"].count(None) == 0
    assert held["folds_without_units_spent"] == 2  # one fold per run: only the spenders' folds spent
    assert held["units_saved_pct"]["min"] > 0
    assert 0 < boot["samples_without_units_spent"] < 200 and boot["units_saved_pct"][0] > 0


@pytest.mark.parametrize("samples, bounds", [(200, [5, 194]), (100, [2, 97]), (39, [0, 38]), (1000, [25, 974])])
def test_the_bootstrap_interval_drops_a_fortieth_of_the_sorted_shares_at_each_end(monkeypatch, samples, bounds):
    """docs/simulate.md, "Bootstrap": with N = 200 the 6th and the 195th of the sorted shares."""
    drawn = iter(reversed(range(samples)))  # the shares of the samples, in an order to be sorted
    monkeypatch.setattr(frontier_module, "_shares", lambda *args: (float(next(drawn)), None))

    class Table:
        run_ids = ["a", "b"]

    boot = frontier_module.bootstrap(Table(), "p", "resolved", samples, 0)
    assert boot["units_saved_pct"] == bounds
    assert (boot["good_stopped_pct"], boot["samples_without_good_runs"]) == (None, samples)


def test_the_held_out_line_says_how_many_folds_chose_nothing():
    """Such a fold scores as no-stop (nothing saved, nothing stopped), which the means alone hid."""
    from ledger_cli.frontier import choice_lines

    spread = {"mean": 0.0, "min": 0.0, "max": 0.0}
    held = {"folds": 3, "seed": 0, "chosen": [None, "p", None], "units_saved_pct": spread,
            "good_stopped_pct": spread, "folds_without_good_runs": 0, "constraint_stopped_pct": spread}
    choice = {"policy": "p", "constraint": {"label": "resolved", "max_stopped_pct": 5.0}, "held_out": held,
              "in_sample": {"units_saved_pct": 1.0, "good_stopped_pct": 0.0, "constraint_stopped_pct": 0.0}}
    assert choice_lines(choice, "resolved")[2] == (
        "  held out (3 folds, seed 0): units saved 0 % (min 0, max 0), resolved runs stopped 0 % (min 0, max 0); "
        "2 fold(s) chose nothing (scored as no-stop)")
    held["chosen"] = ["p", "p", "p"]
    assert choice_lines(choice, "resolved")[2].endswith("resolved runs stopped 0 % (min 0, max 0)")
    held["folds_without_units_spent"] = 1  # a fold whose runs spent nothing is left out, and said so
    assert choice_lines(choice, "resolved")[2].startswith("  held out (3 folds, seed 0): units saved 0 % (min 0, max 0; "
                                                          "1 fold(s) that spent nothing under no-stop left out), ")
    held["units_saved_pct"] = {"mean": None, "min": None, "max": None}
    assert choice_lines(choice, "resolved")[2].startswith("  held out (3 folds, seed 0): no fold spent units under "
                                                          "no-stop, resolved runs stopped")


def test_the_choice_lines_give_the_constraints_own_label_and_the_folds_left_out(tmp_path):
    report, _ = _leave_one_out(tmp_path, resolved=3, failed=2)
    table = tmp_path / "outcomes.csv"
    table.write_text("instance_id,outcome\n" + "".join(f"{p.stem},{o}\n" for p, o in _outcome_rows(tmp_path)))
    done = _cli("simulate", tmp_path, "--outcomes", table, "--frontier", "--vary", "max_low_information_steps=2,4,8",
                "--max-stopped", "failed=100%", "--folds", "5", "--seed", "3", "--jobs", "1")
    assert done.exit_code == 0, done.output
    held = report.choice["held_out"]
    line = next(line for line in done.stdout.splitlines() if line.startswith("  held out"))
    assert (f"resolved runs stopped {held['good_stopped_pct']['mean']:g} %" in line
            and "; 2 fold(s) without a resolved run left out)" in line
            and f", failed runs stopped {held['constraint_stopped_pct']['mean']:g} %" in line), line
    assert ", failed runs stopped " in next(line for line in done.stdout.splitlines() if line.startswith("  in sample"))


def _outcome_rows(folder):
    table = dict(line.split(",") for line in OUTCOMES.read_text().splitlines()[1:])
    return [(path, table[path.stem]) for path in sorted(folder.glob("*.jsonl"))]


@pytest.mark.parametrize("options, message", [
    ({"constraint": 5}, "constraint must be None, a LABEL=PCT string (\"resolved=2%\") or a Constraint, got int"),
    ({"good": None}, "good must be an outcome label (a non-empty str), got None"),
    ({"good": ""}, "good must be an outcome label (a non-empty str), got ''"),
])
def test_frontier_refuses_options_of_the_wrong_kind(options, message):
    with pytest.raises(LedgerError) as caught:
        frontier([FILES[0]], [example_policy()], OUTCOMES, **options)
    assert (caught.value.code, caught.value.message) == (INVALID_ARGUMENT, message)


def test_frontier_takes_policies_as_simulate_does_files_too(tmp_path):
    policy = tmp_path / "streak2.toml"  # the example's prices, another streak limit
    policy.write_text(re.sub(r"(?m)^max_low_information_steps = 3", "max_low_information_steps = 2",
                             (REPO / "config" / "budget.example.toml").read_text()))
    report = frontier([FILES[0]], [example_policy(), str(policy), f"two={policy}"], OUTCOMES, good="failed", folds=0)
    assert [row["name"] for row in report.policies] == ["no-stop", "cap-p75", "example", "streak2", "two"]
    with pytest.raises(LedgerError) as caught:
        frontier([FILES[0]], [], OUTCOMES)
    assert caught.value.message == "frontier needs at least one policy (the first is the base)"


def test_a_label_no_run_has_says_which_journals_were_left_out_for_an_error(tmp_path):
    lines = [{"op": "open_revision", "hypotheses": [{"statement": "a"}]},
             {"op": "record_outcome", "outcome": "failed", "source": "x"},
             {"op": "record_outcome", "outcome": "resolved", "source": "x"}]  # a second outcome: an error
    (tmp_path / "two.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(LedgerError) as caught:
        frontier([tmp_path], [example_policy()], good="failed")
    assert caught.value.message.startswith(
        "--good: no run has the outcome 'failed' (outcomes: none: give --outcomes or record_outcome lines); 1 "
        "journal(s) were not simulated for an error, and their outcomes are not counted (the first: "
        f"OPERATION_CONFLICT: {tmp_path / 'two.jsonl'}:3: ")
    assert [error["code"] for error in caught.value.details["not_simulated"]] == ["OPERATION_CONFLICT"]
    assert caught.value.details["not_simulated"][0]["message"].startswith(f"{tmp_path / 'two.jsonl'}:3: ")


class _Totals:
    """Per-policy (units, stopped, runs) of a choice, whatever runs are asked about."""

    def __init__(self, totals):
        self.names, self._totals = list(totals), totals

    def totals(self, name, ids, label):
        return self._totals[name]


def test_the_choice_among_equal_policies_takes_the_name_with_the_smaller_number():
    table = _Totals({"no-stop": (100, 0, 10), "steps=10": (60, 1, 10), "steps=6": (60, 1, 10),
                     "steps=3": (40, 5, 10)})
    assert choose(table, [], parse_max_stopped("resolved=10%")) == "steps=6"
    assert choose(table, [], parse_max_stopped("resolved=50%")) == "steps=3"


def test_when_no_policy_meets_the_limit_the_nearest_is_the_saving_policy_stopping_the_fewest():
    """No policy saving units stops at most 5 %: the nearest is the one of those stopping the fewest
    (ties: fewer units, then the smaller number); no-stop, which saves nothing, is never it."""
    from ledger.simulation.frontier import nearest

    table = _Totals({"no-stop": (100, 0, 10), "steps=10": (90, 2, 10), "steps=8": (80, 2, 10),
                     "steps=6": (80, 2, 10), "steps=3": (40, 5, 10), "wide": (100, 1, 10)})
    limit = parse_max_stopped("resolved=5%")
    assert choose(table, [], limit) is None and nearest(table, [], limit) == "steps=6"
    assert nearest(_Totals({"no-stop": (100, 0, 10), "wide": (100, 1, 10)}), [], limit) is None


@pytest.mark.parametrize("spec, label, pct", [("resolved=2%", "resolved", 2), ("resolved=2.5", "resolved", 2.5),
                                              ("a=b=0 %", "a=b", 0), ("failed=100%", "failed", 100),
                                              ("resolved=.5", "resolved", 0.5), ("resolved= 7. %", "resolved", 7)])
def test_max_stopped_reads_label_and_share(spec, label, pct):
    constraint = parse_max_stopped(spec)
    assert (constraint.label, float(constraint.pct)) == (label, pct)


@pytest.mark.parametrize("spec", ["resolved", "=2%", "resolved=", "resolved=101%", "resolved=-1", "resolved=x",
                                  "resolved=1/2", "resolved=nan", "resolved=1_0", "resolved=1e1",
                                  "resolved=\u0665", "resolved=+5", "resolved=inf", "resolved=.",
                                  "resolved=" + "9" * 4301, "resolved=0." + "0" * 4299 + "1", "resolved=" + "0" * 5000])
def test_max_stopped_refuses_what_is_not_a_label_and_a_share(spec):
    """A share of more than 4300 digits (Python reads no number longer) is refused like any other, the
    refusal quoting a bounded part of it."""
    with pytest.raises(LedgerError) as caught:
        parse_max_stopped(spec)
    assert caught.value.code == INVALID_ARGUMENT and len(caught.value.message) < 300


def test_max_stopped_reads_a_share_of_up_to_4300_digits():
    assert parse_max_stopped("resolved=0." + "0" * 4297 + "1").pct == Fraction(1, 10 ** 4298)
    assert parse_max_stopped("resolved=" + "0" * 4299 + "7").pct == 7


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_no_choice_when_nothing_meets_the_constraint_and_saves_exit_0(tmp_path):
    done = _cli("simulate", DATA, "--outcomes", OUTCOMES, "--vary", "max_low_information_steps=4,6", "--frontier",
                "--max-stopped", "resolved=0%", "--json", "--jobs", "1", "--emit", tmp_path / "p.toml")
    assert done.exit_code == 0, done.output
    choice = json.loads(done.stdout)["choice"]
    assert choice["policy"] is None and "no policy stops at most 0 % of the resolved runs" in choice["reason"]
    near = choice["nearest"]
    assert near["policy"].startswith("max_low_information_steps=") and near["constraint_stopped"] > 0
    assert near["constraint_stopped_pct"] == -(-10000 * near["constraint_stopped"] // near["constraint_runs"]) / 100
    assert choice["reason"].endswith(f"{near['policy']} stops the fewest: {near['constraint_stopped']} of "
                                     f"{near['constraint_runs']} ({near['constraint_stopped_pct']:g} %, rounded up)")
    admitted = _cli("simulate", DATA, "--outcomes", OUTCOMES, "--vary", "max_low_information_steps=4,6", "--frontier",
                    "--max-stopped", f"resolved={near['constraint_stopped_pct']}%", "--json", "--jobs", "1")
    assert json.loads(admitted.stdout)["choice"]["policy"] is not None  # the share shown admits a choice
    assert not (tmp_path / "p.toml").exists() and "no choice" in done.stderr
    table = _cli("simulate", DATA, "--outcomes", OUTCOMES, "--vary", "max_low_information_steps=6", "--frontier",
                 "--max-stopped", "resolved=0%", "--jobs", "1")
    assert table.exit_code == 0 and "choice (at most 0 % of resolved runs stopped): none:" in table.stdout


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_share_of_runs_stopped_is_shown_rounded_up_so_a_limit_of_it_admits_the_choice():
    """The choice line showed 1 of 46 as 2.17 %, and --max-stopped resolved=2.17% then chose nothing."""
    args = ["simulate", DATA, "--outcomes", OUTCOMES, "--vary", "max_low_information_steps=6", "--vary",
            "units_per_hypothesis=500", "--frontier", "--jobs", "1"]
    first = json.loads(_cli(*args, "--max-stopped", "resolved=5%", "--json").stdout)["choice"]
    group = first["figures"]["by_outcome"]["resolved"]
    stopped, runs, shown = group["runs_stopped"], group["runs"], first["in_sample"]["constraint_stopped_pct"]
    assert 0 < stopped < runs and shown == -(-10000 * stopped // runs) / 100 and shown > 100 * stopped / runs
    again = _cli(*args, "--max-stopped", f"resolved={shown}%")
    assert f"resolved runs stopped {shown:g} %" in again.stdout
    assert f"{stopped}/{runs} ({shown:g} %)" in again.stdout
    assert json.loads(_cli(*args, "--max-stopped", f"resolved={shown}%", "--json").stdout)["choice"]["policy"] \
        == first["policy"]


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_emitted_policy_reproduces_the_choice(tmp_path):
    target = tmp_path / "chosen.toml"
    done = _cli("simulate", DATA, "--outcomes", OUTCOMES, "--vary", "max_low_information_steps=2,4,5", "--frontier",
                "--max-stopped", "resolved=10%", "--json", "--jobs", "1", "--emit", target,
                "--per-run", tmp_path / "runs.jsonl")
    assert done.exit_code == 0, done.output
    per_run = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert len(per_run) == 6 * 100 and {r["policy"] for r in per_run} >= {"no-stop", "cap-p75", "example"}
    choice = json.loads(done.stdout)["choice"]
    assert choice["policy"] == "max_low_information_steps=4"
    config = BudgetConfig.load(target)
    assert config.policy_sha256 == choice["figures"]["policy_sha256"]
    spends = [r["units_spent"] for r in per_run if r["policy"] == "no-stop" and r.get("error") is None]
    assert f"baseline cap-p75 gave each hypothesis {percentile_75(spends)} units" in target.read_text()
    again = _cli("simulate", DATA, "--outcomes", OUTCOMES, "--policy", target, "--json", "--jobs", "1")
    replayed = json.loads(again.stdout)["policies"][0]
    assert {k: v for k, v in replayed.items() if k != "name"} == {
        k: (v if k != "by_outcome" else {o: {f: n for f, n in g.items() if f not in ("runs_stopped", "units_saved")}
                                         for o, g in v.items()})
        for k, v in choice["figures"].items() if k not in ("name", "runs_stopped", "units_saved", "units_per_hypothesis")}
    assert choice["figures"]["units_per_hypothesis"] is None  # the frontier's rows also give the allocation


def test_an_emitted_policy_with_an_allocation_says_so_and_still_loads(tmp_path):
    policy = vary(example_policy(), [("units_per_hypothesis", [300])])[0]
    text = policy_toml(policy)
    assert "gives each hypothesis 300 units" in text and "\nunits_per_hypothesis" not in text
    (tmp_path / "p.toml").write_text(text)
    assert BudgetConfig.load(tmp_path / "p.toml").policy_sha256 == policy.policy_sha256


def test_an_emitted_policy_names_the_searchs_cap_so_held_back_runs_meet_a_cap_that_has_not_seen_them(tmp_path):
    """On runs held back from the search, the row cap-p75 takes its cap from those runs themselves."""
    policy = example_policy()
    text = policy_toml(policy, baseline_cap=1234)
    assert "The search's baseline cap-p75 gave each hypothesis 1234 units" in text
    assert "add 1234 to --vary units_per_hypothesis" in text and "cap-p75" not in policy_toml(policy)
    (tmp_path / "p.toml").write_text(text)
    assert BudgetConfig.load(tmp_path / "p.toml").policy_sha256 == policy.policy_sha256


@pytest.mark.slow
def test_the_output_is_the_same_for_a_seed_and_the_folds_move_with_it():
    args = ["simulate", DATA, "--outcomes", OUTCOMES, "--vary", "max_low_information_steps=2,4,5", "--frontier",
            "--max-stopped", "resolved=10%", "--bootstrap", "50", "--json", "--jobs", "1"]
    first, second = _cli(*args).stdout, _cli(*args).stdout
    assert first == second
    other = json.loads(_cli(*args, "--seed", "7").stdout)["choice"]
    mine = json.loads(first)["choice"]
    assert mine["held_out"]["seed"] == 0 and other["held_out"]["seed"] == 7
    assert (mine["held_out"], mine["bootstrap"]) != (other["held_out"], other["bootstrap"])
    held = mine["held_out"]
    assert held["folds"] == 5 and len(held["chosen"]) == 5
    for key in ("units_saved_pct", "good_stopped_pct"):
        assert held[key]["min"] <= held[key]["mean"] <= held[key]["max"]
        low, high = mine["bootstrap"][key]
        assert low <= mine["in_sample"][key] <= high


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_held_out_scores_each_fold_with_the_choice_of_the_others():
    """Recomputed here: the runs shuffled by the seed, K folds by stride, the choice on the rest."""
    policies = [example_policy(), *vary(example_policy(), [("max_low_information_steps", [2, 4, 5])])]
    report = frontier([DATA], policies, OUTCOMES, constraint="resolved=10%", folds=4, seed=3)
    runs = report.simulation.runs
    ids = sorted({r.run for r in runs})
    random.Random(3).shuffle(ids)
    names = [p.name for p in report.evaluated]
    for k in range(4):
        held = set(ids[k::4])
        train = [r for r in runs if r.run not in held]
        best = None
        for name in names:
            mine = [r for r in train if r.policy == name]
            good = [r for r in mine if r.outcome == "resolved"]
            stopped = sum(1 for r in good if r.steps_refused)
            if stopped * 100 <= 10 * len(good):
                best = min(best or (10 ** 9, 0, ""), (sum(r.units_spent for r in mine), stopped, name))
        assert report.choice["held_out"]["chosen"][k] == best[2]


def test_in_each_held_out_fold_cap_p75_is_capped_by_the_other_folds_runs_alone(tmp_path):
    """The cap-p75 baseline a fold chooses from and is scored by takes its cap (the 75th percentile of
    no-stop's spending) from the other folds' runs only, never from the runs it is scored on."""
    names = ["django__django-11206", "django__django-11239", "django__django-11299"]
    for name in names:
        (tmp_path / f"{name}.jsonl").write_bytes((DATA / f"{name}.jsonl").read_bytes())
    report = frontier([tmp_path], [example_policy()], OUTCOMES, constraint="resolved=70%", folds=3, seed=0)
    held = report.choice["held_out"]
    assert "cap-p75" in held["chosen"]
    assert {r.policy for r in report.simulation.runs} == {"no-stop", "cap-p75", example_policy().name}
    spent = {r.run: r.units_spent for r in report.simulation.runs if r.policy == "no-stop"}
    ids = sorted(spent)
    random.Random(0).shuffle(ids)
    saved = []
    for k, chosen in enumerate(held["chosen"]):
        part = sorted(ids[k::3])
        baseline = sum(spent[run] for run in part)
        if chosen is None:  # no choice: the fold runs as no-stop
            saved.append(0.0)
            continue
        cap = percentile_75([spent[run] for run in spent if run not in part])
        own = policy_from_mapping("own", {**example_policy().settings(), "units_per_hypothesis": cap})
        scored = own if chosen == "cap-p75" else example_policy()
        runs = simulate([tmp_path / f"{run}.jsonl" for run in part], [scored], OUTCOMES, jobs=1).runs
        saved.append(100 * (baseline - sum(r.units_spent for r in runs)) / baseline)
    assert held["units_saved_pct"] == {"mean": round(sum(saved) / 3, 2), "min": round(min(saved), 2),
                                       "max": round(max(saved), 2)}
    everyone = percentile_75(list(spent.values()))
    assert any(percentile_75([spent[run] for run in spent if run not in sorted(ids[k::3])]) != everyone
               for k in range(3))


def _scoped_journal(steps: int) -> str:
    """A run that re-establishes a scope naming the seq its first establishment has when every step
    runs: a policy that refuses a step moves that seq, and the run fails for a reason it did not decide."""
    lines = [{"op": "open_revision", "hypotheses": [{"statement": "a"}], "units_per_hypothesis": 100000},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}]
    for n in range(steps):
        lines += [{"op": "reserve", "hypothesis": "H1", "action_id": f"s{n}", "action": "source.find_text"},
                  {"op": "record_result", "hypothesis": "H1", "action_id": f"s{n}", "evidence": {"x": n}},
                  {"op": "settle", "hypothesis": "H1", "action_id": f"s{n}", "semantic_score": 50, "reason": "r"}]
    lines += [{"op": "establish", "scope": "revision:1", "limits": {"actions": 100000}, "issuer": "controller"},
              {"op": "establish", "scope": "revision:1", "limits": {"actions": 200000}, "issuer": "controller",
               "causation_seq": 3 + 3 * steps + 2},
              {"op": "record_outcome", "outcome": "resolved", "source": "test"}]
    return "".join(json.dumps(line) + "\n" for line in lines)


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_run_only_a_folds_own_cap_fails_is_left_out_of_nothing(tmp_path):
    """A fold's own cap-p75 is evaluated like any policy, but a run that fails under it alone (and
    under no shown policy) stays in every row with no error, and that fold offers no cap-p75."""
    for path in FILES[:13]:
        (tmp_path / path.name).write_bytes(path.read_bytes())
    (tmp_path / "zz-scoped.jsonl").write_text(_scoped_journal(50))
    report = frontier([tmp_path], [example_policy()], OUTCOMES, constraint="resolved=60%", seed=0)
    assert {row["name"]: row["runs"] for row in report.policies} == {"no-stop": 14, "cap-p75": 14, "example": 14}
    assert all(run.error is None for run in report.simulation.runs)
    spent = {r.run: r.units_spent for r in report.simulation.runs if r.policy == "no-stop"}
    caps = frontier_module.fold_cap_policies(example_policy(), spent, None, 0)
    assert len(caps) == 5
    failing = [part for part, cap in caps.items()
               if simulate([tmp_path / "zz-scoped.jsonl"], [cap], OUTCOMES, jobs=1).runs[0].error is not None]
    assert failing, "the premise: some fold's own cap fails the scoped run"
    assert report.choice["held_out"]["folds"] == 5


def test_a_run_a_policy_fails_though_no_stop_went_through_is_named_and_the_command_fails(tmp_path):
    """Such a run counts under no policy, as plain simulate has it; the frontier left it out of every
    row without a word and exited 0 (only no-stop's errors were reported)."""
    (tmp_path / FILES[1].name).write_bytes(FILES[1].read_bytes())  # resolved
    (tmp_path / "zz-scoped.jsonl").write_text(_scoped_journal(50))
    tight = vary(example_policy(), [("units_per_hypothesis", [100])])
    report = frontier([tmp_path], tight, OUTCOMES)
    assert {row["name"]: row["runs"] for row in report.policies} == {"no-stop": 1, "cap-p75": 1,
                                                                     "units_per_hypothesis=100": 1}
    [error] = report.simulation.errors
    assert error["message"].startswith(f"{tmp_path / 'zz-scoped.jsonl'}:")
    assert re.search(r"\(under the policy (cap-p75|units_per_hypothesis=100); another went through\)$", error["message"])
    [plain] = simulate([tmp_path], [frontier_module.no_stop_policy(example_policy()), *tight], OUTCOMES).errors
    assert plain["message"].endswith(" (under the policy units_per_hypothesis=100; another went through)")
    assert "under the policy" not in simulate([tmp_path], tight, OUTCOMES).errors[0]["message"]
    done = CliRunner().invoke(main, ["simulate", str(tmp_path), "--outcomes", str(OUTCOMES), "--frontier",
                                     "--vary", "units_per_hypothesis=100", "--csv"])
    assert done.exit_code == 1 and "\nerror: INVALID_ARGUMENT: 1 journal(s) not simulated: " in done.stderr


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_readme_shows_the_real_output_of_its_choosing_a_policy_command():
    """The README's *Choosing a policy* block is what that command prints over the 100 real runs
    (without ``--plot``, which needs the optional matplotlib: the prose says to add it), and its prose quotes it."""
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Choosing a policy", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    command = " ".join(part.strip().rstrip("\\").strip() for part in block[:3])
    assert command == ("$ ledger simulate tests/data/trajectories/ --outcomes tests/data/trajectories/outcomes.csv "
                       "--vary max_low_information_steps=3,4,6 --vary units_per_hypothesis=300,500,100000 "
                       "--frontier --max-stopped resolved=5% --bootstrap 1000")
    assert "add `--plot frontier.svg` for the picture below" in section
    done = _cli("simulate", DATA, "--outcomes", OUTCOMES, "--vary", "max_low_information_steps=3,4,6", "--vary",
                "units_per_hypothesis=300,500,100000", "--frontier", "--max-stopped", "resolved=5%",
                "--bootstrap", "1000")
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == block[3:]
    chosen = next(line for line in block if line.startswith("max_low_information_steps=6 units_per_hypothesis=500 "))
    assert " ".join(chosen.split()[-6:]) == "2/26 (7.7 %) 3/74 (4.06 %)"  # runs stopped, with their share (rounded up)
    assert "choice (at most 5 % of resolved runs stopped): max_low_information_steps=6 units_per_hypothesis=500" in block
    assert "units saved 3.77 % (min 1.79, max 6.95), resolved runs stopped 3.75 % (min 0, max 6.25)" in section
    assert "units saved 0.48 to 7.36 %" in section and "it saves\n3.8 % on average (1.8 to 7.0 %)" in section


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_json_has_policies_frontier_and_choice_with_the_new_figures_per_outcome():
    done = _cli("simulate", DATA, "--outcomes", OUTCOMES, "--frontier", "--json", "--jobs", "1")
    out = json.loads(done.stdout)
    assert list(out) == ["policies", "frontier", "choice"]
    row = out["policies"][0]
    assert row["name"] == "no-stop" and {"runs_stopped", "units_saved", "units_per_run"} <= set(row)
    assert {"runs_stopped", "units_saved", "units_per_run"} <= set(row["by_outcome"]["resolved"])
    csv = _cli("simulate", DATA, "--outcomes", OUTCOMES, "--frontier", "--csv", "--jobs", "1").stdout.splitlines()
    assert csv[0] == ("policy,frontier,outcome,runs,steps,steps_taken,steps_refused,units_spent,units_rewarded,"
                      "runs_abandoned,runs_exhausted,units_per_run,runs_stopped,units_saved")
    assert csv[1] == "no-stop,yes,(all),100,3870,3870,0,34290,10258,0,0,342,0,0"


@pytest.mark.parametrize("args, message", [
    (["--max-stopped", "resolved=2%"], "--max-stopped needs --frontier"),
    (["--emit", "x.toml"], "--emit needs --frontier and --max-stopped LABEL=PCT"),  # said one at a time
    (["--folds", "3"], "--folds needs --frontier and --max-stopped LABEL=PCT"),
    (["--bootstrap", "9"], "--bootstrap needs --frontier and --max-stopped LABEL=PCT"),
    (["--seed", "3"], "--seed needs --frontier"),
    (["--frontier", "--emit", "x.toml"], "--emit needs --max-stopped"),
    (["--frontier", "--max-stopped", "resolved"], "expected LABEL=PCT"),
    (["--frontier", "--bootstrap", "100"], "--bootstrap needs --max-stopped"),  # it was ignored, exit 0
    (["--frontier", "--folds", "3"], "--folds needs --max-stopped"),
    (["--frontier", "--seed", "-7"], "--seed"),  # Python's random takes -7 as 7
    (["--frontier", "--good", ""], "Invalid value for '--good': give an outcome label"),  # was exit 1
    (["--frontier", "--good", " "], "Invalid value for '--good': give an outcome label"),
])
def test_frontier_options_are_usage_errors_without_what_they_need(args, message):
    done = CliRunner().invoke(main, ["simulate", str(DATA / "astropy__astropy-13033.jsonl"), *args])
    assert done.exit_code == 2 and message in done.stderr


@pytest.mark.parametrize("options, message", [
    ({"samples": 100}, "folds, bootstrap samples and task prefixes score the choice a constraint makes"),
    ({"folds": 3}, "folds, bootstrap samples and task prefixes score the choice a constraint makes"),
    ({"task_prefixes": ["gpt5."]}, "folds, bootstrap samples and task prefixes score the choice a constraint makes"),
    ({"seed": -7, "constraint": "resolved=2%"}, "--seed must be an integer of 0 or more, got -7"),
])
def test_frontier_refuses_scoring_options_with_nothing_to_score_and_a_negative_seed(options, message):
    with pytest.raises(LedgerError) as refused:
        frontier([DATA / "astropy__astropy-13033.jsonl"], [example_policy()], OUTCOMES, **options)
    assert refused.value.code == "INVALID_ARGUMENT" and message in refused.value.message


def test_a_missing_good_label_says_when_it_is_the_default_and_a_constraint_label_is_named_first():
    """Without outcomes, ``--max-stopped resolved=5%`` is the option the user gave: it is named, not ``--good``,
    whose default the user may never have typed; ``--good``'s own refusal says what its default is."""
    run = [DATA / "astropy__astropy-13033.jsonl"]  # records no outcome of its own
    with pytest.raises(LedgerError) as refused:
        frontier(run, [example_policy()], None, constraint="resolved=5%")
    assert refused.value.message == ("--max-stopped: no run has the outcome 'resolved' (outcomes: none: give "
                                     "--outcomes or record_outcome lines)")
    with pytest.raises(LedgerError) as refused:
        frontier(run, [example_policy()], None)
    assert refused.value.message == ("--good: no run has the outcome 'resolved' (outcomes: none: give --outcomes or "
                                     "record_outcome lines); --good is 'resolved' unless given")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_label_no_run_has_and_bad_folds_are_refused_naming_them():
    done = CliRunner().invoke(main, ["simulate", str(DATA), "--outcomes", str(OUTCOMES), "--frontier", "--good",
                                     "fixed", "--jobs", "1"])
    assert done.exit_code == 1 and "error: INVALID_ARGUMENT: --good: no run has the outcome 'fixed'" in done.stderr
    with pytest.raises(LedgerError, match="--folds"):
        frontier([DATA], [example_policy()], OUTCOMES, constraint="resolved=2%", folds=1)
    with pytest.raises(LedgerError, match="baseline"):
        frontier([DATA], [policy_from_mapping("no-stop", {})], OUTCOMES)


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_the_default_folds_are_five_or_one_per_run_when_there_are_fewer_runs(tmp_path):
    rows = [line.split(",") for line in OUTCOMES.read_text().splitlines()[1:]]
    resolved = [DATA / f"{row[0]}.jsonl" for row in rows if row[1] == "resolved"]
    others = [DATA / f"{row[0]}.jsonl" for row in rows if row[1] != "resolved"]
    for count, folds in ((4, 4), (1, 0), (6, 5)):
        folder = tmp_path / f"runs-{count}"
        folder.mkdir()
        for path in (resolved[:1] + others[:count - 1]):  # a resolved run among them: --good has one
            (folder / path.name).write_bytes(path.read_bytes())
        report = frontier([folder], [example_policy(), *vary(example_policy(), GRID)], OUTCOMES,
                          constraint="resolved=100%")
        if folds:  # one run: no folds, and no error for the default (a choice may be made or not)
            assert report.choice["held_out"]["folds"] == folds
    done = CliRunner().invoke(main, ["simulate", str(tmp_path / "runs-4"), "--outcomes", str(OUTCOMES), "--frontier",
                                     "--max-stopped", "resolved=100%", "--vary", "max_low_information_steps=2,3,5",
                                     "--jobs", "1", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["choice"]["held_out"]["folds"] == 4
    with pytest.raises(LedgerError, match="--folds"):  # given, it is taken as given
        frontier([tmp_path / "runs-4"], [example_policy()], OUTCOMES, constraint="resolved=100%", folds=5)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_choice_whose_held_out_stops_break_the_constraint_is_warned_about(tmp_path):
    """On the first 30 bundled runs, the choice at 10 % of resolved runs stops 13 % of them on
    average on the runs each fold left out: the command says so on stderr, the output is unchanged."""
    for path in FILES[:30]:
        (tmp_path / path.name).write_bytes(path.read_bytes())
    args = ["simulate", str(tmp_path), "--outcomes", str(OUTCOMES), "--frontier", "--jobs", "1",
            "--vary", "max_low_information_steps=2,3,4,5,6,8", "--vary", "units_per_hypothesis=200,300,500,100000"]
    done = CliRunner().invoke(main, [*args, "--max-stopped", "resolved=10%", "--json"])
    assert done.exit_code == 0
    held = json.loads(done.stdout)["choice"]["held_out"]["good_stopped_pct"]
    assert held == {"mean": 13.0, "min": 0.0, "max": 25.0}
    assert done.stderr.splitlines()[0] == ("warning: on the runs each fold left out, the choice stops 13 % of the resolved runs on "
                           "average (up to 25 %), above the 10 % allowed: expect it to stop more on new runs than on "
                           "these; check it on runs it did not see (simulate them with --policy FILE --frontier, and --vary "
                           "units_per_hypothesis=N when the choice sets it)")
    within = CliRunner().invoke(main, [*args, "--max-stopped", "resolved=20%", "--json"])
    assert within.exit_code == 0 and "warning:" not in within.stderr


def test_a_run_the_evaluator_does_not_model_is_replayed_in_full(tmp_path):
    """A journal with a scope line has no step table; its figures are the full replay's."""
    lines = (DATA / "astropy__astropy-13033.jsonl").read_text().splitlines()
    scope = json.dumps({"op": "establish", "scope": "case", "limits": {"actions": 30}, "issuer": "controller"})
    (tmp_path / "scoped.jsonl").write_text("\n".join([*lines[:3], scope, *lines[3:]]) + "\n")
    assert step_table("scoped", journal_lines(tmp_path / "scoped.jsonl")) is None
    policies = [example_policy(), *vary(example_policy(), [("max_low_information_steps", [2])])]
    report = frontier([tmp_path], policies, {"scoped": "resolved"}, folds=0)
    full = simulate([tmp_path], report.evaluated, {"scoped": "resolved"})
    assert [r["units_spent"] for r in report.policies] == [r["units_spent"] for r in full.policies]
    assert report.policies[2]["steps_refused"] == full.policies[2]["steps_refused"] > 0


@pytest.mark.slow
def test_a_difference_from_the_full_rules_replays_every_policy_in_full(monkeypatch):
    real = frontier_module.evaluate

    def off_by_one(table, policy, units):
        run = real(table, policy, units)
        run.units_spent += 1
        return run

    policies = [example_policy(), *vary(example_policy(), [("max_low_information_steps", [2, 4])])]
    exact = frontier([DATA], policies, OUTCOMES, constraint="resolved=10%", folds=0)
    monkeypatch.setattr(frontier_module, "evaluate", off_by_one)
    confirmed = frontier([DATA], policies, OUTCOMES, constraint="resolved=10%", folds=0)
    assert confirmed.to_dict() == exact.to_dict()


# --- the evaluator equals the full rules -----------------------------------------------------------
def _policy(draw_settings):
    return policy_from_mapping("generated", draw_settings)


POLICIES = st.fixed_dictionaries({
    "max_low_information_steps": st.integers(1, 9),
    "low_information_threshold": st.integers(0, 100),
    "new_evidence_score": st.integers(0, 100),
    "max_reward_bps": st.integers(0, 9999),
    "default_action_cost": st.integers(1, 60),
    "action_costs": st.dictionaries(st.sampled_from(["source.find_text", "source.read_context", "test.automated",
                                                     "shell.edit", "shell.run"]), st.integers(1, 60)),
    "novelty_mode": st.sampled_from(["evidence", "atoms"]),
}, optional={"units_per_hypothesis": st.integers(1, 3000)})


@pytest.fixture(scope="module")
def atom_journals(tmp_path_factory):
    out = tmp_path_factory.mktemp("atoms")
    done = CliRunner().invoke(main, ["runs", "import", str(RAW), "--out", str(out), "--outcomes", str(OUTCOMES)])
    assert done.exit_code == 0, done.output
    return sorted(out.glob("*.jsonl"))


def _check_equal(files, settings_):
    policy = _policy(settings_)
    for path in files:
        lines = parse_journal(path)
        table = step_table(path.stem, lines)
        assert table is not None, path.stem
        full, fast = replay_run(path.stem, lines, policy), evaluate(table, policy, 100)
        assert full.error is None
        assert [getattr(fast, k) for k in RUN_FIGURES] == [getattr(full, k) for k in RUN_FIGURES], (path.stem, settings_)


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(POLICIES)
def test_the_evaluator_equals_the_full_rules_on_every_bundled_run(settings_):
    _check_equal(FILES, settings_)


@pytest.mark.slow
def test_the_evaluator_equals_the_full_rules_on_every_imported_run_with_atoms(atom_journals):
    rng = random.Random(5)
    for _ in range(4):
        _check_equal(atom_journals, {
            "max_low_information_steps": rng.randint(1, 6), "low_information_threshold": rng.choice([0, 20, 60]),
            "novelty_mode": "atoms", "default_action_cost": rng.randint(1, 30),
            "units_per_hypothesis": rng.choice([50, 200, 800])})


@settings(max_examples=25, deadline=None)
@given(POLICIES)
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_evaluator_equals_the_full_rules_on_a_sample_of_runs(settings_):
    _check_equal(FILES[::17], settings_)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_frontier_picture_is_the_same_bytes_and_marks_baselines_and_choice(tmp_path):
    pytest.importorskip("matplotlib")
    report = frontier([DATA], [example_policy(), *vary(example_policy(), [("max_low_information_steps", [2, 4])])],
                      OUTCOMES, constraint="resolved=10%", folds=0)
    first = plot_frontier(report, tmp_path / "a.svg").read_bytes()
    assert first == plot_frontier(report, tmp_path / "b.svg").read_bytes()
    text = first.decode()
    for label in ("no-stop", "cap-p75", "max_low_information_steps=4", "(choice)", "not resolved) runs stopped"):
        assert label in text
    assert plot_frontier(report, tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_the_frontier_pictures_labels_stay_inside_the_figure_wherever_the_points_lie():
    """A choice at the right edge had its long name run under the colour bar and off the picture,
    and the squeezed axes cut the title; each setting is now a line, written away from the edge."""
    pytest.importorskip("matplotlib")
    from ledger.simulation.frontier_plot import _draw
    from ledger.simulation.plot import load_matplotlib

    _, figure_class, canvas_class = load_matplotlib()
    long = "max_low_information_steps=1 units_per_hypothesis=30"
    for choice_at in (0.0, 50.0):
        points = [("no-stop", 0.0, 0.0, 0.0), ("cap-p75", 17.0, 50.0 - choice_at, 50.0),
                  (long, 35.0, choice_at, 50.0), ("other", 9.0, 25.0, 0.0)]
        figure = figure_class(figsize=(7.5, 4.8))
        canvas = canvas_class(figure)
        axes = figure.subplots()
        _draw(figure, axes, points, ["no-stop", long], long, "resolved")
        figure.tight_layout()
        renderer = canvas.get_renderer()
        inside = figure.bbox
        for text in [axes.title, *axes.texts]:
            box = text.get_window_extent(renderer)
            assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1, \
                text.get_text()
        assert any(t.get_text() == long.replace(" ", "\n") + "\n(choice)" for t in axes.texts)


@pytest.mark.parametrize("key, values", [("default_action_cost", "1,10"), ("action_costs.source.read_context", "1"),
                                         ("test_costs.automated", "1")])
def test_the_frontier_refuses_policies_priced_unlike_the_first(key, values):
    """Units spent under two price tables do not compare: a policy charging 1 where the first charges
    10 "saved" units by its prices alone and was chosen for it, stopping nothing more."""
    done = _cli("simulate", FILES[0], "--outcomes", OUTCOMES, "--frontier", "--vary", f"{key}={values}",
                "--max-stopped", "resolved=0", "--jobs", "1")
    assert done.exit_code == 1 and done.stdout == ""
    name = f"{key}={values.split(',')[0]}"
    assert done.stderr == (f"error: INVALID_ARGUMENT: policy '{name}' prices actions unlike the first policy "
                           f"'example' ({key.split('.')[0]} differs): the frontier compares units spent, which "
                           "compare only under one price table; give every policy the first one's "
                           "default_action_cost, action_costs and test_costs (a policy file leaving them out has "
                           "the built-in prices), or compare prices with simulate without --frontier\n")
    same = policy_from_mapping("same prices", {**example_policy().settings(), "max_low_information_steps": 2})
    assert frontier([FILES[0]], [example_policy(), same], OUTCOMES, good="failed", jobs=1).policies  # prices alike
    settings = example_policy().settings()
    listed = {**settings, "action_costs": {**settings["action_costs"], "tests.run": settings["default_action_cost"]}}
    alike = policy_from_mapping("listed at the default", listed)  # an action listed at the default cost
    report = frontier([FILES[0]], [example_policy(), alike], OUTCOMES, good="failed", jobs=1)
    assert "listed at the default" in [row["name"] for row in report.policies]


def test_a_fold_whose_training_runs_hold_no_run_of_the_constraints_label_makes_no_choice(tmp_path):
    """Every policy meets "at most 50 % of the resolved runs stopped" on runs with none resolved: such a
    fold chose the policy stopping every run. It now makes no choice and scores as no-stop."""
    from ledger import import_runs

    steps = tmp_path / "steps.jsonl"
    lines = [("a", "cat f.py", "line1\nline2", 0), ("a", "grep x f.py", "hit1", 0), ("a", "python t.py", "ok", 0),
             *[("b", "cat f.py", "same", 0)] * 4, ("b", "python t.py", "ok2", 1),
             ("c", "python t.py", "r1", 1), ("c", "python t.py", "r2", 1), *[("d", "ls", "", 0)] * 3, ("d", "ls", "x", 0)]
    steps.write_text("".join(json.dumps({"run": r, "command": c, "output": o, "exit_code": e}) + "\n"
                             for r, c, o, e in lines))
    import_runs([steps], tmp_path / "j", outcomes={"a": "resolved", "b": "resolved", "c": "failed", "d": "failed"})
    policies = [example_policy(), *vary(example_policy(), [("units_per_hypothesis", [1, 100000])])]
    report = frontier([tmp_path / "j"], policies, constraint="resolved=50", folds=2, seed=1, jobs=1)
    held_out = report.choice["held_out"]
    assert held_out["chosen"] == ["cap-p75", None]  # fold 2 trained on c and d, both failed
    assert held_out["good_stopped_pct"]["max"] == 0.0


def test_an_emitted_choice_with_an_allocation_says_on_stderr_where_the_allocation_goes(tmp_path):
    """No budget file holds units_per_hypothesis: a policy applied from the emitted file alone never
    stopped a run the simulation stopped, so --emit says on stderr how to give the allocation."""
    few = tmp_path / "runs"
    few.mkdir()
    for journal in FILES[:6]:
        (few / journal.name).write_bytes(journal.read_bytes())
    target = tmp_path / "chosen.toml"
    args = ["simulate", few, "--outcomes", OUTCOMES, "--frontier", "--folds", "0", "--max-stopped", "resolved=100%",
            "--jobs", "1", "--json", "--emit", target]
    done = _cli(*args)
    choice = json.loads(done.stdout)["choice"]
    units = choice["figures"]["units_per_hypothesis"]
    assert (done.exit_code, choice["policy"]) == (0, "cap-p75") and units > 0  # the baseline, the cheapest here
    assert BudgetConfig.load(target).policy_sha256 == choice["figures"]["policy_sha256"]
    assert (f"note: {target} holds the chosen budget keys; the choice also gives each hypothesis {units} units, "
            f"which no budget file holds: add --units-per-hypothesis {units} to ledger apply, --vary "
            f"units_per_hypothesis={units} to ledger simulate --policy, --units {units} to ledger revision open, "
            f"units_per_hypothesis={units} to open_revision in Python\n") in done.stderr
    plain = _cli(*args, "--vary", "max_low_information_steps=1")  # cheaper still, at the journals' allocation
    assert json.loads(plain.stdout)["choice"]["policy"] == "max_low_information_steps=1"
    assert plain.exit_code == 0 and "units_per_hypothesis" not in plain.stderr


def test_the_journals_may_be_any_iterable_of_paths_read_once():
    """A generator of paths (read once, as simulate reads it) gives the frontier a list gives: the
    journals were read a second time, from the spent generator, and the search refused "no journal"."""
    paths = FILES[:3]
    given = frontier((path for path in paths), [example_policy()], OUTCOMES)
    listed = frontier(paths, [example_policy()], OUTCOMES)
    assert given.to_dict() == listed.to_dict() and {row["runs"] for row in given.policies} == {3}


@pytest.mark.parametrize("options, message", [
    ({"good": "fixed"}, "--good: no run has the outcome 'fixed' (outcomes: failed, resolved)"),
    ({"constraint": "bogus=5%"}, "--max-stopped: no run has the outcome 'bogus' (outcomes: failed, resolved)"),
    ({"constraint": "bogus=5%", "good": "fixed"}, "--max-stopped: no run has the outcome 'bogus' (outcomes: failed, "),
    ({"constraint": "resolved=5%", "folds": 4}, "--folds must be 0 (none) or from 2 to the number of runs (3), got 4"),
    ({"constraint": "resolved=5%", "folds": 1}, "--folds must be 0 (none) or from 2 to the number of runs (3), got 1"),
])
def test_what_no_policy_can_mend_is_refused_before_the_other_policies_are_replayed(monkeypatch, options, message):
    """A label no run has, or more folds than runs, is refused once the journals are listed or no-stop is
    replayed: never after every policy of the grid was (minutes on a large grid)."""
    replayed = []
    monkeypatch.setattr(frontier_module, "_evaluated", lambda *args: replayed.append(args) or [])
    runs = ("django__django-11206", "django__django-13821", "astropy__astropy-13033")
    files = [DATA / f"{run}.jsonl" for run in runs]
    with pytest.raises(LedgerError) as refused:
        frontier(files, vary(example_policy(), [("max_low_information_steps", [2, 4])]), OUTCOMES, **options)
    assert refused.value.code == INVALID_ARGUMENT and refused.value.message.startswith(message)
    assert replayed == []


def test_one_fold_is_a_usage_error_whatever_the_runs():
    done = CliRunner().invoke(main, ["simulate", str(DATA / "astropy__astropy-13033.jsonl"), "--outcomes",
                                     str(OUTCOMES), "--frontier", "--max-stopped", "resolved=5%", "--folds", "1",
                                     "--jobs", "1"])
    assert (done.exit_code, done.stdout) == (2, "")
    assert "Invalid value for '--folds': 1 fold leaves no runs to choose on; give 0 (none) or 2 or more" in done.stderr
