"""docs/cli.md: the command line and journals, in real processes."""

from __future__ import annotations

import csv
import io
import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ledger.clock import format_utc

from conftest import EXAMPLE_BUDGET, logical_dump, make_package, run_cli


def ok(*args: str, **kwargs) -> str:
    done = run_cli(*args, **kwargs)
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr
    return done.stdout.decode()


def refused(code: str, *args: str, status: int = 1, **kwargs) -> str:
    done = run_cli(*args, **kwargs)
    err = done.stderr.decode()
    assert done.returncode == status, (done.returncode, err)
    assert "Traceback" not in err
    if code:
        assert err.startswith(f"error: {code}: "), err
    return err


@pytest.fixture(scope="module")
def cli_case_template(tmp_path_factory) -> Path:
    """Built through the CLI once per module (four processes); each test gets a copy."""
    path = make_package(tmp_path_factory.mktemp("cli") / "case")
    ok("init", str(path), "--case-id", "BUG-7")
    ok("revision", "open", str(path), "--hypothesis", "first", "--hypothesis", "second", "--units", "50")
    ok("state", str(path), "INVESTIGATING_HYPOTHESES")
    ok("--config", str(EXAMPLE_BUDGET), "budget", "initialize", str(path))
    return path


@pytest.fixture
def cli_case(cli_case_template, tmp_path) -> Path:
    return Path(shutil.copytree(cli_case_template, tmp_path / "case"))


@pytest.mark.slow  # about 30 processes; the commands are each covered by faster tests as well
def test_a_whole_investigation_through_the_cli(cli_case):
    c = str(cli_case)
    out = json.loads(ok("budget", "reserve", c, "H1", "q1", "source.read_context", "--json"))
    assert out["action"]["cost_units"] == 5 and out["state"]["H1"]["remaining_units"] == 45
    out = json.loads(ok("budget", "record", c, "H1", "q1", "--evidence", '{"finding": 1}',
                        "--source-ref", "sources/app.py", "--json"))
    assert out["action"]["novelty_score"] == 100
    out = json.loads(ok("budget", "settle", c, "H1", "q1", "--score", "100", "--reason", "good", "--json"))
    assert out["action"]["reward_units"] == 4 and out["state"]["H1"]["remaining_units"] == 49
    ok("budget", "reserve", c, "H2", "q2", "research.lookup")
    ok("budget", "fail", c, "H2", "q2", "--reason", "timeout")
    ok("budget", "reject", c, "H2", "--reason", "contradicted")
    rows = json.loads(ok("balances", c, "--json"))
    assert [(r["hypothesis_id"], r["remaining_units"], r["status"]) for r in rows] == [
        ("H1", 49, "investigating"), ("H2", 30, "rejected")]
    table = list(csv.DictReader(io.StringIO(ok("actions", c, "--csv"))))
    assert [(r["action_id"], r["status"], r["reward_units"]) for r in table] == [("q1", "settled", "4"), ("q2", "failed", "0")]
    assert "investigating" in ok("balances", c)
    events = json.loads(ok("events", c, "--json"))
    assert [e["seq"] for e in events] == list(range(1, 11))
    assert all(e["parent_sha256"] == p["sha256"] for p, e in zip(events, events[1:]))
    snapshot = json.loads(ok("budget", "snapshot", c, "--json"))
    assert snapshot["state"]["H2"]["status"] == "rejected"
    status = json.loads(ok("state", c, "--json"))
    assert status["package_generation"] == 10
    assert "files written" in ok("export", c) or "written" in ok("export", c)
    assert json.loads(ok("verify", c, "--json"))["ok"] is True


@pytest.mark.parametrize("args, code", [
    (("budget", "reserve", "{c}", "H9", "q1", "source.read_context"), "UNKNOWN_HYPOTHESIS"),
    (("budget", "reserve", "{c}", "H1", "q 1", "source.read_context"), "INVALID_ID"),
    (("budget", "record", "{c}", "H1", "q1", "--evidence", "{\"a\": NaN}"), "INVALID_JSON"),
    (("budget", "settle", "{c}", "H1", "nope", "--score", "50", "--reason", "x"), "UNKNOWN_ACTION"),
    (("budget", "settle", "{c}", "H1", "q1", "--score", "500", "--reason", "x"), "INVALID_SCORE"),
    (("budget", "fail", "{c}", "H1", "q1", "--reason", " "), "REASON_REQUIRED"),
    (("state", "{c}", "CLOSED"), "INVALID_TRANSITION"),
    (("state", "{c}", "NOPE"), "INVALID_ARGUMENT"),
    (("--config", "{missing}", "budget", "reserve", "{c}", "H1", "q1", "source.read_context"), "CONFIG_INVALID"),
    (("--config", "{bad}", "budget", "reserve", "{c}", "H1", "q1", "source.read_context"), "BUDGET_POLICY_CHANGED"),
    (("init", "{c}", "--case-id", "X"), "CASE_EXISTS"),
    (("balances", "{nocase}"), "LEDGER_MISSING"),
    (("sql", "{c}", "DELETE FROM events"), "INVALID_ARGUMENT"),
    (("budget", "reserve", "{c}", "H1", "q1", "source.read_context", "--at", "soon"), "INVALID_ARGUMENT"),
])
def test_refusals_print_one_error_line_and_exit_1_writing_nothing(cli_case, tmp_path, args, code):
    bad = tmp_path / "bad.toml"
    bad.write_text("max_reward_bps = 1\n")
    values = {"c": str(cli_case), "missing": str(tmp_path / "none.toml"), "bad": str(bad),
              "nocase": str(tmp_path / "nothing")}
    before = logical_dump(cli_case / "ledger.sqlite")
    filled = []
    for arg in args:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        filled.append(arg)
    err = refused(code, *filled)
    assert err.count("\n") == 1
    assert logical_dump(cli_case / "ledger.sqlite") == before


@pytest.mark.parametrize("args", [
    ("budget", "reserve"), ("nope",), ("balances",), ("budget", "settle", "c", "H1", "q1", "--score", "x", "--reason", "r"),
    ("balances", "c", "--json", "--csv"), ("budget", "record", "c", "H1", "q1"),
])
def test_usage_errors_exit_2(cli_case, args):
    done = run_cli(*[str(cli_case) if a == "c" else a for a in args])
    assert done.returncode == 2
    assert b"Traceback" not in done.stderr


def test_sql_runs_read_only_queries_in_three_formats(cli_case):
    c = str(cli_case)
    assert json.loads(ok("sql", c, "SELECT state FROM case_status", "--json")) == [{"state": "INVESTIGATING_HYPOTHESES"}]
    assert ok("sql", c, "SELECT case_id FROM case_status", "--csv") == "case_id\nBUG-7\n"
    assert "BUG-7" in ok("sql", c, "SELECT case_id FROM case_status")
    for statement in ("ATTACH 'x.db' AS x", "PRAGMA query_only = 0", "SELECT 1; SELECT 2", "UPDATE events SET seq = 1"):
        refused("INVALID_ARGUMENT", "sql", c, statement)


JOURNAL = [
    {"op": "open_revision", "hypotheses": [{"statement": "a"}, {"statement": "b"}], "units_per_hypothesis": 30},
    {"op": "transition", "to": "INVESTIGATING_HYPOTHESES", "at": "2026-01-05T10:00:00Z"},
    {"op": "initialize"},
    {"op": "reserve", "hypothesis": "H1", "action_id": "q1", "action": "source.read_context", "at": "2026-01-05T10:01:00Z"},
    {"op": "record_result", "hypothesis": "H1", "action_id": "q1", "evidence": {"f": 1}, "source_refs": ["sources/app.py"]},
    {"op": "settle", "hypothesis": "H1", "action_id": "q1", "semantic_score": 50, "reason": "ok"},
    {"op": "reserve", "hypothesis": "H1", "action_id": "q2", "action": "research.lookup"},
    {"op": "fail", "hypothesis": "H1", "action_id": "q2", "reason": "timeout"},
    {"op": "reject", "hypothesis": "H2", "reason": "no"},
    {"op": "snapshot"},
]


def journal_bytes(lines) -> bytes:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines).encode()


def test_apply_prints_one_result_line_per_line_and_a_rerun_is_all_reused(tmp_path):
    case = make_package(tmp_path / "j")
    journal = tmp_path / "j.jsonl"
    # times a little ahead of now (within at_future_tolerance_ms), so that line 2's is the newest
    now = datetime.now(timezone.utc)
    at2, at4 = (format_utc(now + timedelta(seconds=s)) for s in (60, 120))
    lines = [dict(line) for line in JOURNAL]
    lines[1]["at"], lines[3]["at"] = at2, at4
    journal.write_bytes(journal_bytes(lines))
    args = ("--config", str(EXAMPLE_BUDGET), "apply", str(case), str(journal), "--create", "BUG-9")
    first = [json.loads(line) for line in ok(*args).splitlines()]
    assert [r["line"] for r in first] == list(range(1, 11)) and all(r["ok"] for r in first)
    assert [r["seq"] for r in first[:9]] == list(range(2, 11))
    assert first[5]["result"]["action"]["reward_units"] == 2
    assert first[-1]["result"]["state"]["H1"]["remaining_units"] == 7
    before = logical_dump(case / "ledger.sqlite")
    second = [json.loads(line) for line in ok(*args).splitlines()]
    assert all(r["reused"] for r in second)
    assert [r["seq"] for r in second] == [r["seq"] for r in first]
    assert logical_dump(case / "ledger.sqlite") == before
    times = json.loads(ok("events", str(case), "--json"))
    assert [t["created_at"] for t in times[2:4]] == [at2] * 2  # the "at" of line 2, then clamped
    assert times[4]["created_at"] == at4


def test_apply_stops_at_the_first_error_unless_keep_going(tmp_path):
    lines = [JOURNAL[0], JOURNAL[1], {"op": "settle", "hypothesis": "H1"}, {"op": "frobnicate"}, "not json",
             "", "[1]", {"op": "initialize", "extra": 1}, {"op": "initialize", "at": "2026-13-01T00:00:00Z"},
             {"op": "initialize"}, '{"op": "reserve", "op": "reserve"}']
    journal = tmp_path / "j.jsonl"
    journal.write_bytes(journal_bytes(lines))
    stopped = run_cli("apply", str(tmp_path / "a"), str(journal), "--create", "A")
    assert stopped.returncode == 1
    out = [json.loads(line) for line in stopped.stdout.decode().splitlines()]
    assert [r["ok"] for r in out] == [True, True, False]
    assert out[2]["error"]["code"] == "INVALID_ARGUMENT"
    kept = run_cli("apply", str(tmp_path / "b"), str(journal), "--create", "B", "--keep-going")
    assert kept.returncode == 1
    out = [json.loads(line) for line in kept.stdout.decode().splitlines()]
    assert [(r["line"], r["ok"] or r["error"]["code"]) for r in out] == [
        (1, True), (2, True), (3, "INVALID_ARGUMENT"), (4, "UNKNOWN_OPERATION"), (5, "INVALID_JSON"),
        (7, "INVALID_ARGUMENT"), (8, "INVALID_ARGUMENT"), (9, "INVALID_ARGUMENT"), (10, True), (11, "INVALID_JSON")]


def test_apply_reads_stdin_and_refuses_a_case_with_another_id(tmp_path):
    case = tmp_path / "s"
    out = ok("apply", str(case), "-", "--create", "S-1", stdin=journal_bytes(JOURNAL[:2]))
    assert len(out.splitlines()) == 2
    refused("CASE_EXISTS", "apply", str(case), "-", "--create", "OTHER", stdin=journal_bytes(JOURNAL[:2]))


def test_import_and_missing_ledger_through_the_cli(cli_case, tmp_path):
    c = str(cli_case)
    ok("export", c)
    (cli_case / "ledger.sqlite").unlink()
    assert "import" in refused("LEDGER_MISSING", "balances", c)
    ok("import", c)
    assert json.loads(ok("verify", c, "--json"))["head_seq"] == 4
    ok("import", c, "--to", str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "sources" / "app.py").is_file()


def test_verify_reports_integrity_errors_with_exit_1(cli_case):
    import sqlite3

    conn = sqlite3.connect(cli_case / "ledger.sqlite")
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute("UPDATE events SET body = replace(body, '\"units_per_hypothesis\":50', '\"units_per_hypothesis\":60') WHERE seq = 2")
    conn.commit()
    conn.close()
    err = refused("INTEGRITY_ERROR", "verify", str(cli_case))
    assert "seq 2" in err


def test_demo_runs_exports_verifies_and_says_where_the_case_is(tmp_path):
    out = ok("demo", str(tmp_path / "d"))
    for word in ("INSUFFICIENT_BUDGET", "budget_exhausted", "abandoned_low_information_gain", "rejected",
                 "duplicate", "no refund", "refund 8" if False else "refund 4", "verified", str(tmp_path / "d")):
        assert word in out, word
    assert "E000002 novelty 50" in out and "record E000002 fed to the action: novelty 50" in out
    assert json.loads(ok("verify", str(tmp_path / "d"), "--json"))["head_seq"] == 56
    rows = {r["hypothesis_id"]: r for r in json.loads(ok("balances", str(tmp_path / "d"), "--json"))}
    assert {h: (r["status"], r["remaining_units"]) for h, r in rows.items()} == {
        "H1": ("investigating", 21), "H2": ("abandoned_low_information_gain", 10),
        "H3": ("budget_exhausted", 4), "H4": ("rejected", 37)}
    refused("CASE_EXISTS", "demo", str(tmp_path / "d"))
    second = ok("demo", cwd=tmp_path)
    assert str(tmp_path / "ledger-demo") in second
    assert str(tmp_path / "ledger-demo-2") in ok("demo", cwd=tmp_path)


@pytest.mark.parametrize("inside", ["ledger.sqlite", "manifest.json"])
def test_a_case_argument_naming_a_file_inside_the_case_asks_for_the_case_folder(cli_case, inside):
    (cli_case / "manifest.json").write_text("{}", encoding="utf-8")
    err = refused("", "budget", "snapshot", str(cli_case / inside), status=2)
    assert "is a file: give the case folder" in err and f"the case folder holding it is {cli_case}" in err


def test_budget_readings_print_json_values_for_people(cli_case):
    out = ok("budget", "check", str(cli_case), "H1", "source.read_context")
    assert "allowed: true" in out and "tier: full" in out and "True" not in out
    advice = ok("budget", "advice", str(cli_case), "H1")
    assert "investigable: true" in advice and "remaining_actions: null" in advice
    assert json.loads(ok("budget", "advice", str(cli_case), "H2", "--json"))["remaining_units"] == 50


def test_write_commands_say_the_event_path_is_where_export_writes(cli_case):
    out = ok("budget", "reserve", str(cli_case), "H1", "q1", "source.read_context")
    assert out.startswith("seq 5 (exports to analysis/budgets/0001/events/00000002.json)\n")
