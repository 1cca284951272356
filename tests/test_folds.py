"""Held-out folds and bootstrap resamples keep a task's runs together (docs/simulate.md, "Held-out
folds"): runs imported with a run prefix each (``gpt5.X``, ``claude.X``) are one task's runs when
``--task-prefix`` names the prefixes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, strategies as st

from ledger import example_policy, frontier, vary
from ledger.ground.errors import LedgerError
from ledger.simulation.folds import (by_task, check_prefixes_start, default_folds, fold_parts, resample, task_of,
                                     task_prefixes)
from ledger_cli.main import main

DATA = Path(__file__).parent / "data" / "trajectories"
OUTCOMES = dict(line.split(",") for line in (DATA / "outcomes.csv").read_text().splitlines()[1:])
POLICIES = [example_policy(), *vary(example_policy(), [("max_low_information_steps", [2, 4, 8])])]


def test_a_runs_task_is_its_id_without_the_longest_prefix_that_leaves_something():
    prefixes = ("gpt5.", "gpt5.1.", "claude.")
    assert task_of("gpt5.astropy-1", prefixes) == "astropy-1"
    assert task_of("gpt5.1.astropy-1", prefixes) == "astropy-1"  # the longer prefix, not "1.astropy-1"
    assert task_of("astropy-1", prefixes) == "astropy-1"  # no prefix: its own task
    assert task_of("gpt5.", prefixes) == "gpt5."  # nothing but a prefix: its own id
    assert task_of("xgpt5.astropy-1", prefixes) == "xgpt5.astropy-1"  # a prefix starts the id, or is none
    assert by_task(["gpt5.b", "claude.a", "gpt5.a", "a"], prefixes) == [["a", "claude.a", "gpt5.a"], ["gpt5.b"]]


run_ids = st.lists(st.text("ab.-x1", min_size=1, max_size=6), min_size=2, max_size=30, unique=True)


@given(run_ids, st.integers(2, 30), st.integers(0, 2 ** 32))
def test_without_prefixes_the_folds_and_resamples_are_those_of_the_runs(ids, folds, seed):
    """Every run a task of its own: exactly the dealing of the runs themselves (as before tasks)."""
    ids = sorted(ids)
    folds = min(folds, len(ids))
    shuffled = list(ids)
    random.Random(seed).shuffle(shuffled)
    assert fold_parts(ids, folds, seed) == [sorted(shuffled[k::folds]) for k in range(folds)]
    rng, plain = random.Random(seed), random.Random(seed)
    assert resample(rng, by_task(ids, ())) == plain.choices(ids, k=len(ids))


@given(run_ids, st.lists(st.sampled_from(["a.", "b.", "a.b.", "x"]), max_size=3), st.integers(2, 30),
       st.integers(0, 2 ** 32))
def test_folds_partition_the_runs_and_hold_each_task_whole(ids, prefixes, folds, seed):
    tasks = by_task(ids, prefixes)
    if all(len(group) == 1 for group in tasks):  # prefixes that group nothing change nothing
        assert fold_parts(ids, min(folds, len(ids)), seed, prefixes) == fold_parts(ids, min(folds, len(ids)), seed)
    folds = min(folds, len(tasks))
    if folds < 2:
        return
    parts = fold_parts(ids, folds, seed, prefixes)
    assert sorted(run for part in parts for run in part) == sorted(ids)
    assert all(part for part in parts)  # as many tasks as folds at least: no fold is empty
    for group in tasks:
        assert sum(set(group) <= set(part) for part in parts) == 1
    sample = resample(random.Random(seed), tasks)
    assert len({task_of(run, prefixes) for run in sample}) <= len(tasks)
    for run in sample:  # a task drawn brings all its runs, as many times as it was drawn
        group = next(g for g in tasks if run in g)
        assert all(sample.count(other) == sample.count(run) for other in group)


def test_task_prefixes_may_be_any_iterable_of_text_and_none_is_none():
    assert task_prefixes(None) == () and task_prefixes({"a."}) == ("a.",)
    assert task_prefixes(prefix for prefix in ["b.", "a.", "b."]) == ("b.", "a.")
    for value in ("a.", b"a.", {"a.": 1}, 5):
        with pytest.raises(LedgerError, match="must be a list of run-id prefixes"):
            task_prefixes(value)


@pytest.mark.parametrize("value, message", [
    ("gpt5.", "must be a list of run-id prefixes"),
    ([""], "must be the non-empty text"),
    ([b"gpt5."], "must be the non-empty text"),
    (["gpt5-"], "--task-prefix 'gpt5-' starts no run id (of 2 run(s): 'claude.a', 'gpt5.a')"),
    (["gpt5.a"], "--task-prefix 'gpt5.a' is a whole run id and starts no other (of 2 run(s): "),  # it said "starts
    # no run id" while listing that very id: a whole id leaves nothing to name a task
])
def test_a_task_prefix_must_start_some_run_id(value, message):
    with pytest.raises(LedgerError) as refused:
        check_prefixes_start(task_prefixes(value), ["gpt5.a", "claude.a"])
    assert refused.value.code == "INVALID_ARGUMENT" and message in refused.value.message
    assert task_prefixes(["gpt5.", "claude.", "gpt5."]) == ("gpt5.", "claude.")
    check_prefixes_start(("gpt5.", "claude."), ["gpt5.a", "claude.a"])  # each starts one: nothing refused


def test_the_default_folds_are_five_or_one_per_task_when_there_are_fewer_tasks():
    runs = [f"{prefix}t{n}" for prefix in ("a.", "b.") for n in range(4)]
    assert (default_folds(None, runs), default_folds(None, runs, ["a.", "b."])) == (5, 4)
    assert default_folds(None, ["a.t", "b.t"], ["a.", "b."]) == 0  # one task: nothing to hold out
    assert default_folds(3, runs, ["a.", "b."]) == 3  # given, as given (checked against the tasks later)


def _two_agents(folder: Path, resolved: int = 3, failed: int = 3) -> dict[str, str]:
    """The same bundled runs as two agents' (prefixes ``a.`` and ``b.``): each task's two runs alike."""
    picked = ([r for r, o in OUTCOMES.items() if o == "resolved"][:resolved]
              + [r for r, o in OUTCOMES.items() if o == "failed"][:failed])
    outcomes = {}
    for prefix in ("a.", "b."):
        for run in picked:
            (folder / f"{prefix}{run}.jsonl").write_bytes((DATA / f"{run}.jsonl").read_bytes())
            outcomes[prefix + run] = OUTCOMES[run]
    return outcomes


@pytest.mark.slow  # about a second: the slow lane (.ci/run) runs it
def test_held_out_folds_deal_tasks_and_score_each_with_the_choice_of_the_others(tmp_path):
    """Recomputed here: the tasks shuffled by the seed, K folds by stride, each fold every run of
    its tasks, the choice made on the other folds' runs."""
    outcomes = _two_agents(tmp_path)
    report = frontier([tmp_path], POLICIES, outcomes, constraint="failed=100%", folds=3, seed=5, samples=50,
                      task_prefixes=["a.", "b."])
    held, boot = report.choice["held_out"], report.choice["bootstrap"]
    assert (held["folds"], held["tasks"], boot["tasks"]) == (3, 6, 6)
    tasks = sorted({run[2:] for run in outcomes})
    random.Random(5).shuffle(tasks)
    runs = report.simulation.runs
    for k in range(3):
        held_tasks = set(tasks[k::3])
        train = [r for r in runs if r.run[2:] not in held_tasks]
        best = None
        for name in [p.name for p in report.evaluated]:
            mine = [r for r in train if r.policy == name]
            stopped = sum(1 for r in mine if r.outcome == "failed" and r.steps_refused)
            best = min(best or (10 ** 9, 0, ""), (sum(r.units_spent for r in mine), stopped, name))
        baseline = sum(r.units_spent for r in train if r.policy == "no-stop")
        assert held["chosen"][k] == (best[2] if best[0] < baseline else None)
    plain = frontier([tmp_path], POLICIES, outcomes, constraint="failed=100%", folds=3, seed=5)
    assert plain.choice["held_out"]["tasks"] == 12  # without prefixes every run is a task


@pytest.mark.slow  # about a second: the slow lane (.ci/run) runs it
def test_the_cli_deals_folds_by_task_and_says_so(tmp_path):
    outcomes = _two_agents(tmp_path, resolved=2, failed=1)
    table = tmp_path.parent / "outcomes.csv"
    table.write_text("run,outcome\n" + "".join(f"{run},{label}\n" for run, label in outcomes.items()))
    args = ["simulate", str(tmp_path), "--outcomes", str(table), "--frontier", "--vary",
            "max_low_information_steps=2,4,8", "--max-stopped", "failed=100%", "--bootstrap", "20", "--jobs", "1"]
    done = CliRunner().invoke(main, [*args, "--task-prefix", "a.", "--task-prefix", "b."])
    assert done.exit_code == 0, done.output
    assert "  held out (3 folds of 3 tasks' 6 runs, seed 0): " in done.stdout  # the default: one fold per task
    assert "  bootstrap 95 % (20 samples of 3 tasks' 6 runs): " in done.stdout
    plain = CliRunner().invoke(main, args)
    assert "  held out (5 folds, seed 0): " in plain.stdout and "tasks" not in plain.stdout
    too_many = CliRunner().invoke(main, [*args, "--task-prefix", "a.", "--task-prefix", "b.", "--folds", "4"])
    assert too_many.exit_code == 1
    assert ("error: INVALID_ARGUMENT: --folds must be 0 (none) or from 2 to the number of tasks (3, of 6 runs), "
            "got 4") in too_many.stderr
    typo = CliRunner().invoke(main, [*args, "--task-prefix", "a-", "--json"])
    assert typo.exit_code == 1 and "--task-prefix 'a-' starts no run id" in typo.stderr and typo.stdout == ""
    one = CliRunner().invoke(main, [*args, "--task-prefix", "a.", "--json"])
    assert json.loads(one.stdout)["choice"]["held_out"]["tasks"] == 6  # a.X is task X, b.X its own: b. not named
    assert one.stderr.splitlines()[-1] == (
        "note: --task-prefix grouped no runs: no two run ids are the same without the prefixes given, so every "
        "run is a task of its own (a.X and b.X are one task only when both a. and b. are given)")
    assert "grouped no runs" not in done.stderr
    task = next(run for run in sorted(outcomes) if outcomes[run] == "failed")[2:]  # a.TASK, b.TASK: one task
    single = CliRunner().invoke(main, ["simulate", str(tmp_path / f"a.{task}.jsonl"), str(tmp_path / f"b.{task}.jsonl"),
                                       *args[2:], "--good", "failed", "--task-prefix", "a.", "--task-prefix", "b.",
                                       "--folds", "2"])
    assert single.exit_code == 1 and ("--folds must be 0 (none): a single task (of 2 runs) leaves nothing to "
                                      "hold out, got 2") in single.stderr


@pytest.mark.parametrize("args, message", [
    (["--task-prefix", "a."], "--task-prefix needs --frontier and --max-stopped LABEL=PCT"),
    (["--frontier", "--task-prefix", "a."], "--task-prefix needs --max-stopped"),
    (["--frontier", "--max-stopped", "resolved=5", "--task-prefix", ""], "Invalid value for '--task-prefix'"),
])
def test_task_prefixes_are_usage_errors_without_a_choice_to_score(args, message):
    done = CliRunner().invoke(main, ["simulate", str(DATA / "astropy__astropy-13033.jsonl"), *args])
    assert done.exit_code == 2 and message in done.stderr


def test_the_choice_lines_count_tasks_and_runs_in_plain_words():
    from ledger_cli.frontier import choice_lines

    choice = {"policy": "p", "constraint": {"label": "failed", "max_stopped_pct": 100.0}, "figures": {"runs": 2},
              "in_sample": {"units_saved_pct": 1.0, "good_stopped_pct": 0.0, "constraint_stopped_pct": 0.0},
              "bootstrap": {"samples": 20, "tasks": 1, "units_saved_pct": [0, 1], "good_stopped_pct": [0, 0],
                            "samples_without_good_runs": 0}}
    assert choice_lines(choice, "failed")[2].startswith("  bootstrap 95 % (20 samples of 1 task's 2 runs): ")
    choice["bootstrap"]["tasks"] = 2  # a task per run: nothing to say
    assert choice_lines(choice, "failed")[2].startswith("  bootstrap 95 % (20 samples): ")
