"""Real use: journal times kept, a user's own schema objects, stale exports, apply at scale.

Each test names the behaviour it checks; values are asserted, not just exit codes.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from ledger import AnalysisConfig, Case, LedgerError, export_case, verify_case
from ledger.ground.clock import describe_micros, microseconds_between
from ledger.ground.errors import INTEGRITY_ERROR, LIMIT_REACHED
from ledger_cli.main import main

EXAMPLE = Path(__file__).resolve().parent.parent / "config" / "budget.example.toml"

JOURNAL = [
    {"op": "open_revision", "hypotheses": [{"statement": "a"}, {"statement": "b"}], "at": "2026-02-01T09:00:00Z"},
    {"op": "transition", "to": "INVESTIGATING_HYPOTHESES", "at": "2026-02-01T09:01:00Z"},
    {"op": "initialize", "at": "2026-02-01T09:02:00Z"},
    {"op": "reserve", "hypothesis": "H1", "action_id": "q1", "action": "source.read_context",
     "at": "2026-02-01T08:00:00Z"},
    {"op": "reserve", "hypothesis": "H2", "action_id": "q2", "action": "source.read_context",
     "at": "2026-02-01T09:30:00Z"},
]


def cli(*args: str, stdin: str | None = None):
    return CliRunner().invoke(main, list(args), input=stdin, catch_exceptions=False)


def journal_text(lines=JOURNAL) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


def created_times(path: Path) -> list[str]:
    with Case.open(path) as opened:
        return [row["created_at"] for row in opened.events()]


# --- 1. apply --create keeps the journal's times ------------------------------------------
def test_apply_create_gives_the_case_the_journals_first_at_and_keeps_every_later_time(tmp_path):
    result = cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", stdin=journal_text())
    assert result.exit_code == 0, result.stderr
    assert created_times(tmp_path / "c") == [
        "2026-02-01T09:00:00.000000Z", "2026-02-01T09:00:00.000000Z", "2026-02-01T09:01:00.000000Z",
        "2026-02-01T09:02:00.000000Z", "2026-02-01T09:02:00.000000Z", "2026-02-01T09:30:00.000000Z"]


def test_apply_at_option_sets_the_created_case_time(tmp_path):
    result = cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", "--at", "2026-01-31T00:00:00Z",
                 stdin=journal_text(JOURNAL[:1]))
    assert result.exit_code == 0, result.stderr
    assert created_times(tmp_path / "c")[0] == "2026-01-31T00:00:00.000000Z"


@pytest.mark.parametrize("at", ["", " "])
def test_apply_create_with_an_empty_at_is_refused_and_creates_nothing(tmp_path, at):
    """An empty ``--at`` is no time, as for ``init``: it was taken for no ``--at`` at all, and the case made
    at the journal's first time."""
    result = cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", "--at", at, stdin=journal_text(JOURNAL[:1]))
    assert result.exit_code == 1
    assert result.stderr == f"error: INVALID_ARGUMENT: 'at' is not an RFC 3339 timestamp: {at!r}\n"
    assert not (tmp_path / "c").exists()


def test_apply_at_without_create_is_a_usage_error(tmp_path):
    result = cli("apply", str(tmp_path / "c"), "-", "--at", "2026-01-31T00:00:00Z", stdin="")
    assert result.exit_code == 2 and "--create" in result.stderr


def test_apply_warns_on_stderr_and_summarises_how_many_times_were_raised_and_by_how_much(tmp_path):
    result = cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", stdin=journal_text())
    assert ("warning: line 4: at 2026-02-01T08:00:00.000000Z is earlier than the previous event; "
            "recorded at 2026-02-01T09:02:00.000000Z (raised by 3720 s)") in result.stderr
    summary = result.stderr.strip().splitlines()[-1]
    assert summary.startswith("applied: 5 ok (0 reused), 0 failed, 1 time(s) raised to the previous event's time "
                              "(by up to 3720 s, 3720 s in all), ")
    assert all(json.loads(line)["ok"] for line in result.stdout.splitlines())


def test_a_refused_line_whose_refusal_was_recorded_at_a_raised_time_is_warned_and_counted(tmp_path):
    """A line refused by a limit records limit.exceeded, at the previous event's time when its at is
    earlier: apply warned of and counted raised times of successful lines only. A refusal that
    recorded nothing (an unknown hypothesis) raised no time."""
    lines = [{"op": "open_revision", "hypotheses": [{"statement": "a"}, {"statement": "b"}]},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"},
             {"op": "establish", "scope": "hypothesis:1/H1", "limits": {"actions": 0}, "issuer": "controller"},
             {"op": "reserve", "hypothesis": "H1", "action_id": "q1", "action": "x.y", "at": "2026-01-05T10:05:00Z"},
             {"op": "reserve", "hypothesis": "H1", "action_id": "q2", "action": "x.y", "at": "2026-01-05T10:01:00Z"},
             {"op": "reserve", "hypothesis": "H9", "action_id": "q4", "action": "x.y", "at": "2026-01-05T10:02:00Z"},
             {"op": "reserve", "hypothesis": "H2", "action_id": "q3", "action": "x.y", "at": "2026-01-05T10:03:00Z"}]
    text = "".join(json.dumps({**line, "at": line.get("at", "2026-01-05T10:00:00Z")}) + "\n" for line in lines)
    result = cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", "--keep-going", stdin=text)
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: line 6: at 2026-01-05T10:01:00.000000Z is earlier than the previous event; recorded at "
        "2026-01-05T10:05:00.000000Z (raised by 240 s)",
        "warning: line 8: at 2026-01-05T10:03:00.000000Z is earlier than the previous event; recorded at "
        "2026-01-05T10:05:00.000000Z (raised by 120 s)"]
    assert result.stderr.strip().splitlines()[-1].startswith(
        "applied: 5 ok (0 reused), 3 failed (the first at line 5: LIMIT_EXCEEDED), 2 time(s) raised to the previous "
        "event's time (by up to 240 s, 360 s in all)")
    assert [json.loads(line)["ok"] for line in result.stdout.splitlines()][4:] == [False, False, False, True]


def test_case_last_clamp_notes_an_explicit_at_raised_by_the_last_write_only(package):
    with Case.create(package, "C-1", at="2026-02-01T10:00:00Z") as opened:
        assert opened.last_clamp is None
        opened.open_revision([{"statement": "a"}], at="2026-02-01T09:00:00Z")
        assert opened.last_clamp == ("2026-02-01T09:00:00.000000Z", "2026-02-01T10:00:00.000000Z")
        opened.open_revision([{"statement": "a"}], at="2026-02-01T08:00:00Z")  # a replay writes nothing
        assert opened.last_clamp is None
        opened.transition("INVESTIGATING_HYPOTHESES", at="2026-02-01T11:00:00Z")
        assert opened.last_clamp is None


#: A case whose newest event is at 10:05, with H1 limited to no action (its reserve records a refusal).
_CLAMP_CASE = [{"op": "open_revision", "hypotheses": [{"statement": "a"}, {"statement": "b"}, {"statement": "c"}]},
               {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"},
               {"op": "establish", "scope": "hypothesis:1/H1", "limits": {"actions": 0}, "issuer": "controller"},
               {"op": "reserve", "hypothesis": "H2", "action_id": "q1", "action": "x.y", "at": "2026-01-05T10:05:00Z"}]
_RAISED = ("warning: at 2026-01-05T10:01:00.000000Z is earlier than the previous event; recorded at "
           "2026-01-05T10:05:00.000000Z (raised by 240 s)")


@pytest.mark.parametrize("command, status", [
    (["state", "{case}", "BLOCKED"], 0), (["budget", "reserve", "{case}", "H3", "q2", "x.y"], 0),
    (["budget", "fail", "{case}", "H2", "q1", "--reason", "timed out"], 0),
    (["outcome", "record", "{case}", "resolved", "--source", "eval"], 0),
    (["scope", "establish", "{case}", "hypothesis:1/H2", "--limit", "actions=9"], 0),
    (["budget", "reserve", "{case}", "H1", "q3", "x.y"], 1)], ids=lambda value: " ".join(value[:2])
    if isinstance(value, list) else None)
def test_a_command_given_an_at_earlier_than_the_previous_event_warns_of_the_time_it_recorded(tmp_path, command,
                                                                                              status):
    """A single command recorded the previous event's time in place of an earlier --at without a word,
    where `ledger apply` warns per line. A replay writes nothing and warns of nothing; a refusal that
    recorded its events (a limit) warns before its error."""
    text = "".join(json.dumps({**line, "at": line.get("at", "2026-01-05T10:00:00Z")}) + "\n" for line in _CLAMP_CASE)
    assert cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", stdin=text).exit_code == 0
    args = [arg.format(case=tmp_path / "c") for arg in command] + ["--at", "2026-01-05T10:01:00Z"]
    result = cli(*args)
    assert (result.exit_code, result.stderr.splitlines()[0]) == (status, _RAISED), result.stderr
    assert created_times(tmp_path / "c")[-1] == "2026-01-05T10:05:00.000000Z"
    again = cli(*args)
    assert "warning" not in again.stderr and (status or "reused" in again.stdout), (again.stdout, again.stderr)
    assert cli(*args[:-2], "--at", "2026-01-05T10:06:00Z").stderr.count("warning") == 0


@given(st.integers(0, 10**12), st.integers(0, 10**12))
def test_microseconds_between_is_exact_and_antisymmetric(a, b):
    from ledger.ground.clock import format_utc
    from datetime import datetime, timedelta, timezone
    base = datetime(2000, 1, 1, tzinfo=timezone.utc)
    ta, tb = format_utc(base + timedelta(microseconds=a)), format_utc(base + timedelta(microseconds=b))
    assert microseconds_between(ta, tb) == b - a == -microseconds_between(tb, ta)


def test_describe_micros_is_exact():
    assert [describe_micros(m) for m in (0, 5, 3_720_000_000, 1_250_000, 90_000 * 10**6)] == [
        "0 s", "0.000005 s", "3720 s", "1.25 s", "1 d 1 h"]


# --- 6. apply at scale ------------------------------------------------------------------
def test_apply_quiet_prints_only_the_summary(tmp_path):
    result = cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", "--quiet", stdin=journal_text())
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr.strip().startswith("applied: 5 ok (0 reused), 0 failed")


def test_apply_quiet_still_names_the_first_failure_and_exits_1(tmp_path):
    bad = JOURNAL[:3] + [{"op": "reserve", "hypothesis": "H9", "action_id": "q1", "action": "source.read_context"}]
    result = cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", "-q", stdin=journal_text(bad))
    assert result.exit_code == 1 and result.stdout == ""
    assert "line 4: error: UNKNOWN_HYPOTHESIS" in result.stderr and "3 ok (0 reused), 1 failed" in result.stderr


def test_apply_keep_going_summary_names_the_first_failed_line_and_its_code(tmp_path):
    """With the result lines sent elsewhere, the summary on stderr still says where the failures begin;
    a run that stopped at its first failure says so instead (the same line, named once)."""
    bad = JOURNAL[:3] + [{"op": "reserve", "hypothesis": "H9", "action_id": "q1", "action": "source.read_context"},
                         {"op": "reserve", "hypothesis": "H1", "action_id": "q1", "action": "source.read_context"},
                         {"op": "transition", "to": "NO_SUCH_STATE"}]
    going = cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", "--keep-going", stdin=journal_text(bad))
    summary = going.stderr.strip().splitlines()[-1]
    assert going.exit_code == 1
    assert summary.startswith("applied: 4 ok (0 reused), 2 failed (the first at line 4: UNKNOWN_HYPOTHESIS), ")
    stopped = cli("apply", str(tmp_path / "d"), "-", "--create", "C-1", stdin=journal_text(bad))
    summary = stopped.stderr.strip().splitlines()[-1]
    assert summary.startswith("applied: 3 ok (0 reused), 1 failed, no time raised, ")
    assert summary.endswith("; stopped at line 4, its first failure: any lines after it were not applied "
                            "(--keep-going applies each line on its own)")


def test_apply_rerun_counts_reused_lines(tmp_path):
    cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", stdin=journal_text())
    again = cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", "-q", stdin=journal_text())
    assert "applied: 5 ok (5 reused), 0 failed, no time raised" in again.stderr


def test_apply_results_changed_keeps_only_the_touched_account(tmp_path):
    result = cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", "--results", "changed", stdin=journal_text())
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert list(lines[2]["result"]["state"]) == ["H1", "H2"]  # initialize touches every account
    assert list(lines[3]["result"]["state"]) == ["H1"] and list(lines[4]["result"]["state"]) == ["H2"]
    assert lines[4]["result"]["state"]["H2"]["spent_units"] == 10


def test_every_budget_events_limit_reached_names_its_setting_and_option(tmp_path):
    analysis = AnalysisConfig(limits={"budget_events_max": 3})
    with Case.create(tmp_path / "c", "C-1", analysis_config=analysis) as opened:
        opened.open_revision([{"statement": "a"}])
        opened.transition("INVESTIGATING_HYPOTHESES")
        budget = opened.budget()
        budget.initialize()
        with pytest.raises(LedgerError) as caught:
            budget.reserve("H1", "q1", "source.read_context")
    assert caught.value.code == LIMIT_REACHED
    assert "[limits] budget_events_max" in caught.value.message and "--analysis-config" in caught.value.message
    assert caught.value.details["limit"] == "budget_events_max"


def test_event_bytes_limit_reached_names_its_setting_and_option(tmp_path):
    analysis = AnalysisConfig(limits={"event_bytes_max": 1024})
    with Case.create(tmp_path / "c", "C-1", analysis_config=analysis) as opened:
        with pytest.raises(LedgerError) as caught:
            opened.open_revision([{"statement": "x" * 2000}])
    assert caught.value.code == LIMIT_REACHED
    assert "[limits] event_bytes_max" in caught.value.message and "--analysis-config" in caught.value.message


# --- 2. a user's own schema objects -------------------------------------------------------
@pytest.fixture
def exported(tmp_path):
    path = tmp_path / "c"
    cli("apply", str(path), "-", "--create", "C-1", stdin=journal_text())
    with Case.open(path) as opened:
        export_case(opened)
    return path


def add_sql(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path / "ledger.sqlite")
    for text in statements:
        conn.execute(text)
    conn.commit()
    conn.close()


def test_verify_reports_a_users_view_index_and_fts_table_as_foreign_and_passes(exported):
    from sqlite_utils import Database
    add_sql(exported, "CREATE VIEW my_report AS SELECT hypothesis_id, spent_units FROM balances",
            "CREATE INDEX my_idx ON events (type)")
    db = Database(exported / "ledger.sqlite")
    db["contents"].enable_fts(["body"])
    db.close()
    report = verify_case(exported)
    kinds = {o["name"]: (o["type"], o["table"]) for o in report.foreign_objects}
    assert kinds["my_report"] == ("view", "my_report") and kinds["my_idx"] == ("index", "events")
    assert kinds["contents_fts"] == ("full-text table", "contents_fts")
    assert kinds["contents_fts_data"] == ("full-text shadow table", "contents_fts_data")
    assert report.to_dict()["foreign_objects"] == report.foreign_objects
    # writes keep working with these objects present, and verify still passes afterwards
    more = [{"op": "record_result", "hypothesis": "H1", "action_id": "q1", "evidence": {"finding": "x"}}]
    assert cli("apply", str(exported), "-", "-q", stdin=journal_text(more)).exit_code == 0  # a contents row too
    after = verify_case(exported)
    assert (after.head_seq, after.contents, after.export_behind) == (7, 1, 1)
    text = cli("verify", str(exported))
    assert text.exit_code == 0 and "foreign object (not the ledger's, left alone): view my_report" in text.stdout


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_verify_lists_foreign_objects_in_every_row_format_with_the_summary_on_stderr(exported):
    add_sql(exported, "CREATE VIEW my_report AS SELECT hypothesis_id FROM balances",
            "CREATE INDEX my_idx ON events (type)")
    nl = cli("verify", str(exported), "--nl")
    assert nl.exit_code == 0
    rows = [json.loads(line) for line in nl.stdout.splitlines()]
    assert sorted(rows, key=lambda r: r["name"]) == [
        {"type": "index", "name": "my_idx", "table": "events"},
        {"type": "view", "name": "my_report", "table": "my_report"}]
    assert nl.stderr.startswith("ok: 6 events")
    csv_out = cli("verify", str(exported), "--csv")
    assert csv_out.stdout.splitlines()[0] == "type,name,table"
    assert sorted(csv_out.stdout.splitlines()[1:]) == ["index,my_idx,events", "view,my_report,my_report"]
    tsv_out = cli("verify", str(exported), "--tsv")
    assert "view\tmy_report\tmy_report" in tsv_out.stdout.splitlines()
    table = cli("verify", str(exported), "--table")
    assert table.stdout.splitlines()[0].split() == ["type", "name", "table"] and "my_idx" in table.stdout
    whole = json.loads(cli("verify", str(exported), "--json").stdout)
    assert whole["ok"] is True and len(whole["foreign_objects"]) == 2
    both = cli("verify", str(exported), "--json", "--nl")
    assert both.exit_code == 2 and "choose one of --json, --nl" in both.stderr


def test_verify_csv_without_foreign_objects_prints_only_the_header(exported):
    out = cli("verify", str(exported), "--csv")
    assert (out.exit_code, out.stdout) == (0, "type,name,table\n")


@pytest.mark.parametrize("ddl", [
    "CREATE TRIGGER mine AFTER INSERT ON contents BEGIN SELECT 1; END",
    "CREATE UNIQUE INDEX mine ON events (type)",
], ids=["trigger-on-ledger-table", "unique-index-on-ledger-table"])
def test_verify_keeps_integrity_error_for_what_can_change_or_block_the_ledgers_rows(exported, ddl):
    if "UNIQUE" in ddl:
        ddl = "CREATE UNIQUE INDEX mine ON events (seq, type)"
    add_sql(exported, ddl)
    with pytest.raises(LedgerError) as caught:
        verify_case(exported)
    assert caught.value.code == INTEGRITY_ERROR and "mine" in caught.value.message


def test_verify_still_catches_an_altered_ledger_view(exported):
    add_sql(exported, "DROP VIEW actions", "CREATE VIEW actions AS SELECT * FROM reservations")
    with pytest.raises(LedgerError) as caught:
        verify_case(exported)
    assert caught.value.code == INTEGRITY_ERROR and "actions" in caught.value.message


# --- 5. stale export -----------------------------------------------------------------------
def test_verify_reports_how_many_events_a_stale_export_is_behind(exported):
    assert verify_case(exported).export_behind == 0
    with Case.open(exported) as opened:
        opened.budget().fail("H1", "q1", reason="tool crashed")
    report = verify_case(exported)
    assert report.export_behind == 1 and report.to_dict()["export_behind"] == 1
    text = cli("verify", str(exported))
    assert text.exit_code == 0 and "export is 1 event(s) behind the ledger (manifest head seq 6, ledger head seq 7)" in text.stdout
    as_json = cli("verify", str(exported), "--json")
    assert json.loads(as_json.stdout)["export_behind"] == 1
    strict = cli("verify", str(exported), "--strict")
    assert strict.exit_code == 1 and "1 event(s) behind" in strict.stderr


def test_verify_without_export_has_no_behind_count(tmp_path):
    cli("apply", str(tmp_path / "c"), "-", "--create", "C-1", stdin=journal_text())
    assert verify_case(tmp_path / "c").export_behind is None


# --- 7. output formats ---------------------------------------------------------------------
@pytest.fixture
def applied(tmp_path):
    path = tmp_path / "c"
    cli("apply", str(path), "-", "--create", "C-1", stdin=journal_text())
    return path


@pytest.mark.parametrize("command", [["events"], ["balances"], ["actions"], ["sql", "SELECT * FROM events"]])
def test_tabular_commands_give_the_same_rows_as_json_nl_csv_and_tsv(applied, command):
    import csv
    import io

    args = [command[0], str(applied), *command[1:]]
    as_json = json.loads(cli(*args, "--json").stdout)
    as_nl = [json.loads(line) for line in cli(*args, "--nl").stdout.splitlines()]
    as_csv = list(csv.DictReader(io.StringIO(cli(*args, "--csv").stdout)))
    as_tsv = list(csv.DictReader(io.StringIO(cli(*args, "--tsv").stdout), delimiter="\t"))
    assert as_nl == as_json and len(as_json) > 1
    text = [{k: "" if v is None else str(v) for k, v in row.items()} for row in as_json]
    assert as_csv == text == as_tsv
    table = cli(*args, "--table").stdout.splitlines()
    assert len(table) == len(as_json) + 2 and table[0].split()[0] == list(as_json[0])[0]


def test_several_output_formats_are_a_usage_error(applied):
    result = cli("events", str(applied), "--nl", "--tsv")
    assert result.exit_code == 2 and "choose one of --nl, --tsv" in result.stderr


def test_events_stream_from_the_cursor(applied):
    with Case.open(applied) as opened:
        rows = opened.iter_events(0)
        assert next(rows)["seq"] == 1 and next(rows)["seq"] == 2  # a generator, not a list
        rows.close()
        assert [r["seq"] for r in opened.iter_events(4)] == [5, 6]


def test_a_write_while_an_events_iterator_is_open_names_the_iterator(applied):
    """An iterator of rows holds its read snapshot until read to its end or closed; a write meanwhile is
    refused naming it (not as a nested operation, whose advice is to close and open the case), and
    goes through once it is closed."""
    with Case.open(applied) as opened:
        rows = opened.iter_events(0)
        next(rows)
        with pytest.raises(LedgerError) as caught:
            opened.record_outcome("resolved", "tests")
        assert caught.value.code == "INVALID_ARGUMENT"
        assert "iterator of this case's rows (iter_events)" in caught.value.message
        assert "iterator.close()" in caught.value.message and "nested" not in caught.value.message
        rows.close()
        assert opened.record_outcome("resolved", "tests").seq == 7


# --- 9. small things -------------------------------------------------------------------------
@pytest.mark.parametrize("value, shown", [(True, "got true"), ("ten", 'got the string "ten"'),
                                          (2.5, "got the number 2.5"), (None, "got null"), ([1], "got an array")])
def test_type_errors_say_what_was_sent_in_json_terms(package, value, shown):
    from ledger import BudgetConfig
    with Case.create(package, "C-1") as opened:
        opened.open_revision([{"statement": "a"}])
        opened.transition("INVESTIGATING_HYPOTHESES")
        budget = opened.budget(BudgetConfig.load(EXAMPLE))
        budget.initialize()
        budget.reserve("H1", "q1", "source.read_context")
        budget.record_result("H1", "q1", {"finding": "x"})
        with pytest.raises(LedgerError) as caught:
            budget.settle("H1", "q1", value, "why")
    assert caught.value.message.endswith(shown) and "bool" not in caught.value.message
    assert "str " not in caught.value.message and "float" not in caught.value.message


@pytest.mark.parametrize("where", ["batch", "iterator"])
def test_an_events_iterator_inside_a_batch_or_another_iterator_reads_that_snapshot_at_once(tmp_path, where):
    """An iterator started where a snapshot is already held (a batch, another iterator) reads its rows at
    once from it: it read on lazily with no snapshot of its own once the batch or the first iterator
    ended, yielding rows written after it started (past the 512 rows its cursor had fetched), and
    such a write went through while it was open."""
    from ledger import apply_journal
    lines = [{"op": "open_revision", "hypotheses": [{"statement": "h"}], "units_per_hypothesis": 10 ** 9},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}]
    for n in range(200):
        lines += [{"op": "reserve", "hypothesis": "H1", "action_id": f"a{n}", "action": "source.read_context"},
                  {"op": "record_result", "hypothesis": "H1", "action_id": f"a{n}", "evidence": {"n": n}},
                  {"op": "settle", "hypothesis": "H1", "action_id": f"a{n}", "semantic_score": 80, "reason": "r"}]
    with Case.create(tmp_path / "c", "C-1") as opened:
        assert all(r.ok for r in apply_journal(opened, [json.dumps(line) for line in lines], batch_size=100))
        if where == "batch":
            with opened.batch():
                inner = opened.iter_events(0)
                assert next(inner)["seq"] == 1
        else:
            outer = opened.iter_events(0)
            next(outer)
            inner = opened.iter_events(0)
            assert next(inner)["seq"] == 1
            outer.close()
        assert opened.record_outcome("resolved", "tests").seq == 605  # the inner holds no snapshot: it goes on
        assert [row["seq"] for row in inner][-1] == 604  # the rows as of its start, not the one written since


def test_describe_value_never_names_a_python_type():
    from ledger.ground.errors import describe_value
    assert [describe_value(v) for v in (False, 0, float("inf"), 'say "hi"', {})] == [
        "false", "the integer 0", "a non-finite number", 'the string "say \\"hi\\""', "an object"]


def test_a_long_integer_is_described_by_its_length_and_first_digits():
    """A refusal quoting an integer of more than 40 digits names its length and first 20 digits (it
    quoted all of them: some 4,300 digits in one message)."""
    from ledger.ground.errors import describe_value
    assert describe_value(10 ** 39) == "the integer 1" + "0" * 39
    assert describe_value(-(10 ** 40)) == "an integer of 41 digits (-1000000000000000000…)"
    assert describe_value(int("9" * 4300)) == "an integer of 4300 digits (99999999999999999999…)"


def test_a_tuple_where_an_array_is_asked_for_is_named_a_tuple_saying_an_array_is_a_list(case):
    """A Python caller's tuple is no JSON array: the refusal said "an array is not of type 'array'"."""
    with pytest.raises(LedgerError) as refused:
        case.evidence().query("i1", {"actions": ({"operation_id": "op-1", "hypothesis_id": "H1", "action_id": "q1",
                                                 "tool": "source.read_context", "args": {}},)})
    assert refused.value.code == "INVALID_ARGUMENT"
    assert refused.value.message == ("request: actions: a tuple, which is no JSON value (a JSON array is a list) is "
                                     "not of type 'array'")


def test_an_invalid_transition_lists_the_allowed_moves(package):
    with Case.create(package, "C-1") as opened:
        opened.open_revision([{"statement": "a"}])
        with pytest.raises(LedgerError) as caught:
            opened.transition("CLOSED")
    assert caught.value.message == ("cannot move from GENERATING_HYPOTHESES to CLOSED; from GENERATING_HYPOTHESES "
                                    "the case can move to INVESTIGATING_HYPOTHESES")
    assert caught.value.details["allowed"] == ["INVESTIGATING_HYPOTHESES"]


@pytest.mark.parametrize("number, where", [(float("inf"), "evidence.x"), (float("nan"), "evidence.y[1]")])
def test_a_non_finite_number_names_its_field_and_what_is_allowed(package, number, where):
    from ledger import BudgetConfig
    with Case.create(package, "C-1") as opened:
        opened.open_revision([{"statement": "a"}])
        opened.transition("INVESTIGATING_HYPOTHESES")
        budget = opened.budget(BudgetConfig.load(EXAMPLE))
        budget.initialize()
        budget.reserve("H1", "q1", "source.read_context")
        evidence = {"x": number} if where == "evidence.x" else {"y": [1, number]}
        with pytest.raises(LedgerError) as caught:
            budget.record_result("H1", "q1", evidence)
    assert caught.value.message.startswith(f"number at {where} has no JSON form")
    assert "use a finite number, null, or a string" in caught.value.message and "JCS" not in caught.value.message


def test_import_errors_name_the_file_as_well_as_the_seq(exported, tmp_path):
    from ledger import import_tree
    target = exported / "analysis" / "budgets" / "0001" / "events" / "00000002.json"
    target.write_bytes(target.read_bytes().replace(b'"cost_units":10', b'"cost_units":11'))
    with pytest.raises(LedgerError) as caught:
        import_tree(exported, tmp_path / "copy")
    assert caught.value.code == INTEGRITY_ERROR
    assert caught.value.message.startswith("analysis/budgets/0001/events/00000002.json: seq 5: ")
    assert caught.value.details["file"] == "analysis/budgets/0001/events/00000002.json"


def test_import_leaves_no_wal_or_shm_behind(exported, tmp_path):
    from ledger import import_tree
    import_tree(exported, tmp_path / "copy")
    left = sorted(p.name for p in (tmp_path / "copy").iterdir() if p.name.startswith("ledger.sqlite"))
    assert "ledger.sqlite-wal" not in left and "ledger.sqlite-shm" not in left and "ledger.sqlite" in left


def test_the_demo_hint_names_the_program_as_it_was_started(monkeypatch, tmp_path):
    from ledger_cli.journal import invoked_as
    program = tmp_path / "venv" / "bin" / "ledger"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr("sys.argv", [str(program), "demo"])
    assert invoked_as() == str(program)
    monkeypatch.setenv("PATH", str(program.parent))
    program.chmod(0o755)
    assert invoked_as() == "ledger"


def test_the_apply_progress_bar_ends_full_even_when_apply_stops_early(tmp_path, monkeypatch):
    import contextlib
    import ledger_cli.journal as journal_cli

    seen = {}

    class Bar:
        def update(self, n):
            seen["done"] = seen.get("done", 0) + n

    @contextlib.contextmanager
    def fake_bar(total, label):
        seen["total"] = total
        yield Bar()

    monkeypatch.setattr(journal_cli, "progress_bar", fake_bar)
    bad = JOURNAL[:2] + [{"op": "nope"}] + JOURNAL[2:]
    journal = tmp_path / "j.jsonl"
    journal.write_text(journal_text(bad) + "\n\n", encoding="utf-8")
    result = cli("apply", str(tmp_path / "c"), str(journal), "--create", "C-1")
    assert result.exit_code == 1
    # the bar counts the journal's bytes (it is read as a stream); the stop still fills it
    assert seen["total"] == journal.stat().st_size and seen["done"] >= seen["total"]
