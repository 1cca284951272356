"""Regression tests for break-it findings on input checking, apply summaries and documentation (round B)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import Case, LedgerError, read_only_query, read_only_rows
from ledger.errors import INVALID_ARGUMENT, NOT_INITIALIZED
from ledger_cli.main import main as cli_main

from conftest import EXAMPLE_BUDGET, start_case

TRAJECTORIES = Path(__file__).parent / "data" / "trajectories"


def cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli_main, [str(a) for a in args], input=stdin)
    return done.exit_code, done.stdout, done.stderr


# 1. numbers: NaN, infinity and negative values are refused, never a traceback

@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "-1", "0", "1e9"])
def test_sql_timeout_that_is_not_a_finite_number_in_range_is_a_usage_error(case, value):
    code, out, err = cli("sql", case.path, "select 1", "--timeout", value)
    assert (code, out) == (2, "")
    assert "--timeout" in err and "Traceback" not in err


def test_sql_timeout_in_range_still_runs(case):
    assert cli("sql", case.path, "select 7 AS x", "--timeout", "0.5", "--json")[:2] == (0, '[{"x":7}]\n')


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -5, 0, True, 1.5, "30", 86_400_001])
def test_read_only_query_timeout_must_be_a_positive_integer_of_milliseconds(case, timeout):
    with pytest.raises(LedgerError) as caught:
        read_only_query(case.path, "select 1", timeout_ms=timeout)
    assert caught.value.code == INVALID_ARGUMENT and "timeout_ms" in caught.value.message
    with pytest.raises(LedgerError) as caught:
        with read_only_rows(case.path, "select 1", timeout_ms=timeout):
            pass
    assert caught.value.code == INVALID_ARGUMENT


def test_read_only_query_sql_must_be_a_string(case):
    with pytest.raises(LedgerError) as caught:
        read_only_query(case.path, b"select 1")
    assert caught.value.code == INVALID_ARGUMENT
    assert read_only_query(case.path, "select 2 AS y", timeout_ms=1000) == (["y"], [(2,)])


# 3. a KEY=VALUE option repeated with the same key is a usage error naming the key

@pytest.mark.parametrize("option", ["--limit", "--delegate-limit"])
def test_a_repeated_limit_dimension_is_a_usage_error_naming_it(case, option):
    extra = ["--delegate", "agent"] if option == "--delegate-limit" else []
    args = ["scope", "establish", case.path, "case", "--limit", "units=9", *extra,
            option, "units=5", option, "units=6"]
    code, out, err = cli(*args)
    assert (code, out) == (2, "")
    assert "'units' is given twice" in err
    assert [e["type"] for e in case.events()][-1] == "case.transitioned"  # nothing written


def test_a_repeated_vary_key_is_a_usage_error_naming_it(tmp_path):
    code, out, err = cli("simulate", TRAJECTORIES, "--vary", "max_low_information_steps=2",
                         "--vary", "max_low_information_steps=3", "--jobs", "1")
    assert (code, out) == (2, "")
    assert "max_low_information_steps is given twice" in err


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


# 4. budget snapshot before initialize

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


def test_budget_snapshot_after_initialize_still_reports(budget):
    assert budget.snapshot().revision == 1 and budget.snapshot().seq == 4


# 2. the apply summary counts committed lines even when their result lines cannot be printed

def _snapshot_journal(path: Path, snapshots: int) -> Path:
    lines = [{"op": "open_revision", "hypotheses": [{"statement": "a"}], "units_per_hypothesis": 40},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines + [{"op": "snapshot"}] * snapshots))
    return path


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("batch_size, ok", [(100, 49), (10, 10)])
def test_apply_into_a_full_output_counts_what_committed(tmp_path, batch_size, ok):
    journal = _snapshot_journal(tmp_path / "j.jsonl", 46)
    with open("/dev/full", "wb") as full:
        done = subprocess.run([sys.executable, "-m", "ledger_cli", "apply", str(tmp_path / "c"), str(journal),
                               "--create", "C", "--batch-size", str(batch_size)],
                              stdout=full, stderr=subprocess.PIPE, timeout=120)
    err = done.stderr.decode()
    assert done.returncode == 1
    assert f"applied: {ok} ok ({ok - 3} reused), 0 failed" in err
    assert f"{ok} of them not printed (standard output failed; no further line was applied)" in err
    assert "error: OUTPUT_ERROR: cannot print the result" in err
    with Case.open(tmp_path / "c") as case:
        assert len(case.events()) == 4  # created, revision, transition, initialize: nothing past the batch


def test_apply_into_a_pipe_closed_early_counts_what_committed(tmp_path):
    journal = _snapshot_journal(tmp_path / "j.jsonl", 5000)
    reader = subprocess.Popen(["head", "-c", "10"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    done = subprocess.run([sys.executable, "-m", "ledger_cli", "apply", str(tmp_path / "c"), str(journal),
                           "--create", "C", "--batch-size", "5003"],
                          stdout=reader.stdin, stderr=subprocess.PIPE, timeout=120)
    reader.stdin.close()
    reader.wait()
    err = done.stderr.decode()
    assert done.returncode == 1 and "Traceback" not in err
    assert "applied: 5003 ok (5000 reused), 0 failed" in err
    printed = 5003 - int(err.split("applied: 5003 ok (5000 reused), 0 failed, no time raised, ")[1].split(", ")[1].split()[0])
    assert 0 < printed < 5003
