"""Regression tests for break-it findings on input checking, apply summaries and documentation (round B)."""

from __future__ import annotations

import json
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
