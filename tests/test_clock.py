"""Tests of clock."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from ledger import (BudgetConfig, Case, LedgerError, export_case, AnalysisConfig,
    import_tree)
from ledger.ground.clock import format_utc

from ledger.ground.errors import (CONFIG_INVALID, INVALID_ARGUMENT)
from conftest import EXAMPLE_BUDGET, run_cli, start_case


def generation(case: Case) -> int:
    return case.status()["package_generation"]


@pytest.fixture
def budget_case(package):
    case = start_case(package)
    budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
    budget.initialize()
    yield case, budget
    case.close()


# --- 7. a far-future time is refused ----------------------------------------------------------
def soon(seconds: float) -> str:
    return format_utc(datetime.now(timezone.utc) + timedelta(seconds=seconds))


def test_a_far_future_at_is_refused_and_later_times_stay_right(budget_case):
    case, budget = budget_case
    before = generation(case)
    with pytest.raises(LedgerError) as caught:
        budget.reserve("H1", "a1", "source.read_context", at="2062-01-05T10:00:00Z")
    assert caught.value.code == INVALID_ARGUMENT and "at_future_tolerance_ms" in caught.value.message
    assert generation(case) == before
    result = budget.reserve("H1", "a1", "source.read_context", at="2026-01-05T10:00:00Z")
    stamped = case.events()[-1]["created_at"]
    assert result.seq == before + 1 and stamped < "2030"


@pytest.mark.parametrize("call", [
    lambda c, b, at: b.initialize(at=at),
    lambda c, b, at: b.reject("H2", "no", at=at),
    lambda c, b, at: c.transition("EVALUATING", at=at),
    lambda c, b, at: c.open_revision([{"statement": "s"}], at=at),
])
def test_every_api_path_that_takes_at_refuses_a_far_future_one(budget_case, call):
    case, budget = budget_case
    before = generation(case)
    with pytest.raises(LedgerError) as caught:
        call(case, budget, soon(3600))
    assert caught.value.code == INVALID_ARGUMENT and generation(case) == before


def test_create_with_a_far_future_at_makes_no_folder(tmp_path):
    with pytest.raises(LedgerError) as caught:
        Case.create(tmp_path / "new", "C1", at="2062-01-05T10:00:00Z")
    assert caught.value.code == INVALID_ARGUMENT
    assert not (tmp_path / "new").exists()


def test_the_tolerance_is_configurable_and_past_times_always_pass(package):
    strict = AnalysisConfig.from_mapping({"limits": {"at_future_tolerance_ms": 0}})
    case = Case.create(package, "C1", analysis_config=strict, at="1999-01-01T00:00:00Z")
    try:
        with pytest.raises(LedgerError):
            case.open_revision([{"statement": "s"}], at=soon(5))
        case.open_revision([{"statement": "s"}], at="2000-01-01T00:00:00Z")
        assert case.events()[-1]["created_at"] == "2000-01-01T00:00:00.000000Z"
    finally:
        case.close()
    default = start_case(package.parent / "other")
    try:
        default.transition("EVALUATING", at=soon(60))  # within the default five minutes
    finally:
        default.close()


def test_the_tolerance_must_be_a_non_negative_integer(tmp_path):
    for bad in ("-1", "1.5", "true"):
        path = tmp_path / f"a{bad}.toml"
        path.write_text(f"[limits]\nat_future_tolerance_ms = {bad}\n", encoding="utf-8")
        with pytest.raises(LedgerError) as caught:
            AnalysisConfig.load(path)
        assert caught.value.code == CONFIG_INVALID


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_cli_at_and_journal_at_refuse_a_far_future_time(package, tmp_path):
    start_case(package).close()
    done = run_cli("state", str(package), "EVALUATING", "--at", "2062-01-05T10:00:00Z")
    assert done.returncode == 1 and done.stderr.startswith(b"error: INVALID_ARGUMENT: 'at' 2062-01-05")
    journal = tmp_path / "j.jsonl"
    journal.write_text(json.dumps({"op": "transition", "to": "EVALUATING", "at": "2062-01-05T10:00:00Z"})
                       + "\n" + json.dumps({"op": "transition", "to": "EVALUATING"}) + "\n", encoding="utf-8")
    done = run_cli("apply", str(package), str(journal), "--keep-going")
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    assert [x["ok"] for x in lines] == [False, True]
    assert lines[0]["error"]["code"] == INVALID_ARGUMENT
    with Case.open(package) as case:
        assert case.events()[-1]["created_at"] < "2030"


def test_years_before_1000_keep_four_digits_and_survive_export_and_import(package, tmp_path):
    with Case.create(package, "OLD-1", at="0999-01-01T00:00:00Z") as case:
        case.open_revision([{"statement": "s"}], at="0999-06-01T00:00:00Z")
        assert case.query("SELECT created_at FROM events ORDER BY seq")[-1]["created_at"] == "0999-06-01T00:00:00.000000Z"
        export_case(case)
    assert import_tree(package, tmp_path / "copy").head_seq == 2


def test_a_case_s_clock_is_read_as_at_is_its_time_stored_in_the_one_form(tmp_path):
    """The clock a case is given returns times as `at` takes them: stored in the ledger's form, so
    the events verify (a time stored as the clock gave it failed verify)."""
    from ledger import verify_case

    case = Case.create(tmp_path / "c", "C-1", clock=lambda: "2030-01-05T10:00:00Z")
    case.open_revision([{"statement": "a"}])
    assert [event["created_at"] for event in case.events()] == ["2030-01-05T10:00:00.000000Z"] * 2
    case.close()
    assert verify_case(tmp_path / "c").head_seq == 2
    with Case.open(tmp_path / "c", clock=lambda: "2030-01-05T11:00:00+00:00") as again:
        again.transition("INVESTIGATING_HYPOTHESES")
        assert again.events()[-1]["created_at"] == "2030-01-05T11:00:00.000000Z"


@pytest.mark.parametrize("clock, said", [
    (lambda: "garbage", 'the case\'s clock returned the string "garbage", not an RFC 3339 UTC time'),
    (lambda: "2030-01-05T10:00:00+01:00", "the case's clock returned the string"),
    (lambda: "2030-06-30T23:59:60Z", "the case's clock returned the string"),
    (lambda: None, "the case's clock returned null, not an RFC 3339 UTC time"),
    ("not callable", "clock must be a callable returning an RFC 3339 UTC time"),
])
def test_a_clock_that_gives_no_utc_time_is_refused_before_anything_is_made_or_written(tmp_path, clock, said):
    with pytest.raises(LedgerError) as refused:
        Case.create(tmp_path / "new", "C-1", clock=clock)
    assert refused.value.code == INVALID_ARGUMENT and refused.value.message.startswith(said)
    assert not (tmp_path / "new").exists()
    Case.create(tmp_path / "c", "C-1").close()
    if callable(clock):
        with Case.open(tmp_path / "c", clock=clock) as opened:
            with pytest.raises(LedgerError) as refused:
                opened.open_revision([{"statement": "a"}])
            assert refused.value.code == INVALID_ARGUMENT and len(opened.events()) == 1
    else:
        with pytest.raises(LedgerError):
            Case.open(tmp_path / "c", clock=clock)


@pytest.mark.parametrize("config", [{"limits": {}}, "analysis.toml"])
def test_an_analysis_config_that_is_not_one_is_invalid_argument(tmp_path, config):
    for attempt in (lambda: Case.create(tmp_path / "new", "C-1", analysis_config=config),
                    lambda: Case.open(tmp_path / "new", analysis_config=config)):
        with pytest.raises(LedgerError) as refused:
            attempt()
        assert refused.value.code == INVALID_ARGUMENT and "analysis_config must be an AnalysisConfig" \
            in refused.value.message
    assert not (tmp_path / "new").exists()


def test_an_at_that_is_no_timestamp_is_named_cut_short_with_a_mark(tmp_path):
    with pytest.raises(LedgerError) as caught:
        Case.create(tmp_path / "case", "C1", at="2026" + "x" * 100)
    assert caught.value.message == f"'at' is not an RFC 3339 timestamp: {('2026' + 'x' * 60)!r}…"
    assert not (tmp_path / "case").exists()


@pytest.mark.parametrize("at, said", [
    ("2016-12-31T23:59:60Z", "'at' is a leap second ('2016-12-31T23:59:60Z'), which the ledger cannot store"),
    ("2026-01-05 10:00:00Z", "'at' is not an RFC 3339 timestamp: '2026-01-05 10:00:00Z'; join the date and the "
                             "time with T (2026-01-05T10:00:00Z)"),
    ("2026-01-05 10:00Z", "'at' is not an RFC 3339 timestamp: '2026-01-05 10:00Z'"),
    ("2026-01-05T10:00:60Z", "'at' is not a valid time: second must be in 0..59"),  # no leap second there
    ("2026-01-05 10:00:00+01:00", "'at' is not an RFC 3339 timestamp: '2026-01-05 10:00:00+01:00'"),
    ("2026-01-05 10:00:60Z", "'at' is not an RFC 3339 timestamp: '2026-01-05 10:00:60Z'")])
def test_a_leap_second_or_a_space_between_date_and_time_is_refused_saying_what_to_give(tmp_path, at, said):
    """RFC 3339 allows both; the ledger stores neither (its times count days of 86,400 seconds, and
    one form of each time): the refusal says so, where it said 'second must be in 0..59' or nothing."""
    with pytest.raises(LedgerError) as caught:
        Case.create(tmp_path / "case", "C1", at=at)
    assert caught.value.code == INVALID_ARGUMENT and caught.value.message.startswith(said), caught.value.message
    assert ("join the date" in caught.value.message) == (at == "2026-01-05 10:00:00Z")  # only where T would do
    assert not (tmp_path / "case").exists()


@pytest.mark.parametrize("given", ["2026-01-05T10:00:03Z", "2026-01-05t10:00:03z", "2026-01-05T10:00:03+00:00",
                                   "2026-01-05T10:00:03-00:00"])
def test_an_at_time_in_utc_may_name_it_z_plus_or_minus_zero_and_any_other_offset_is_refused(given):
    from ledger.ground.clock import parse_at

    assert parse_at(given) == "2026-01-05T10:00:03.000000Z"
    with pytest.raises(LedgerError) as caught:
        parse_at(given[:19] + "+01:00")
    assert caught.value.code == INVALID_ARGUMENT
