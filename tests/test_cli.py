"""docs/cli.md: the command line and journals, in real processes."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click import exceptions as click_exceptions
from click.testing import CliRunner

from ledger import Case
from ledger.ground.clock import format_utc
from conftest import EXAMPLE_BUDGET, logical_dump, make_package, run_cli, REPO, start_case
from ledger_cli.main import main as cli_main

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
    exported = ok("export", c)
    head = json.loads(ok("verify", c, "--json"))
    assert head["ok"] is True
    assert exported.rstrip("\n").endswith(f"unchanged; head seq {head['head_seq']} sha256 {head['head_sha256']}")


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
@pytest.mark.sampled(every=4)
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
@pytest.mark.sampled(every=4)
def test_usage_errors_exit_2(cli_case, args):
    done = run_cli(*[str(cli_case) if a == "c" else a for a in args])
    assert done.returncode == 2
    assert b"Traceback" not in done.stderr


def test_revision_open_takes_the_allocation_by_the_name_apply_and_simulate_give_it_too(tmp_path):
    """The frontier's note names --units-per-hypothesis for apply; revision open took only --units."""
    ok("init", str(tmp_path / "c"), "--case-id", "BUG-8")
    assert ok("revision", "open", str(tmp_path / "c"), "--hypothesis", "x", "--units-per-hypothesis", "500") == (
        "revision 1: GENERATING_HYPOTHESES (seq 2)\n  H1: x (500 units)\n")


@pytest.mark.slow  # over 0.9 s in the default run: the slow lane (.ci/run) runs it
def test_a_grant_to_an_account_that_ended_says_the_account_stays_ended(cli_case):
    """The units are added (remaining grows) but a rejected account takes no more actions: a note says
    so, as a user granting to revive it would otherwise not know; a grant to an open account, none."""
    ok("budget", "reject", str(cli_case), "H2", "--reason", "contradicted")
    ended = run_cli("budget", "grant", str(cli_case), "H2", "5", "--reason", "more", "--grant-id", "g1")
    assert ended.returncode == 0 and "H2: rejected, 55 units remaining" in ended.stdout.decode()
    assert ended.stderr.decode() == ("note: H2 is rejected (contradicted): the units are added, but an account that "
                                     "ended takes no more actions (its status stays)\n")
    opened = run_cli("budget", "grant", str(cli_case), "H1", "5", "--reason", "more", "--grant-id", "g2", "--json")
    assert opened.returncode == 0 and opened.stderr == b""
    again = run_cli("budget", "grant", str(cli_case), "H2", "5", "--reason", "more", "--grant-id", "g1")
    assert again.returncode == 0 and "reused: nothing written" in again.stdout.decode() and again.stderr == b""

@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
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


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
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


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
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
    assert stopped.stderr.decode().splitlines()[-1].endswith(
        "; stopped at line 3, its first failure: any lines after it were not applied (--keep-going applies each "
        "line on its own)")
    kept = run_cli("apply", str(tmp_path / "b"), str(journal), "--create", "B", "--keep-going")
    assert kept.returncode == 1
    out = [json.loads(line) for line in kept.stdout.decode().splitlines()]
    assert [(r["line"], r["ok"] or r["error"]["code"]) for r in out] == [
        (1, True), (2, True), (3, "INVALID_ARGUMENT"), (4, "UNKNOWN_OPERATION"), (5, "INVALID_JSON"),
        (7, "INVALID_ARGUMENT"), (8, "INVALID_ARGUMENT"), (9, "INVALID_ARGUMENT"), (10, True), (11, "INVALID_JSON")]
    assert "stopped at line" not in kept.stderr.decode()


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_apply_reads_stdin_and_refuses_a_case_with_another_id(tmp_path):
    case = tmp_path / "s"
    out = ok("apply", str(case), "-", "--create", "S-1", stdin=journal_bytes(JOURNAL[:2]))
    assert len(out.splitlines()) == 2
    refused("CASE_EXISTS", "apply", str(case), "-", "--create", "OTHER", stdin=journal_bytes(JOURNAL[:2]))


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_import_and_missing_ledger_through_the_cli(cli_case, tmp_path):
    c = str(cli_case)
    ok("export", c)
    (cli_case / "ledger.sqlite").unlink()
    assert "import" in refused("LEDGER_MISSING", "balances", c)
    ok("import", c)
    assert json.loads(ok("verify", c, "--json"))["head_seq"] == 4
    ok("import", c, "--to", str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "sources" / "app.py").is_file()


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_verify_reports_integrity_errors_with_exit_1(cli_case):
    import sqlite3

    conn = sqlite3.connect(cli_case / "ledger.sqlite")
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute("UPDATE events SET body = replace(body, '\"units_per_hypothesis\":50', '\"units_per_hypothesis\":60') WHERE seq = 2")
    conn.commit()
    conn.close()
    err = refused("INTEGRITY_ERROR", "verify", str(cli_case))
    assert "seq 2" in err


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
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


def cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli_main, [str(a) for a in args], input=stdin)
    return done.exit_code, done.stdout, done.stderr


LONE_SURROGATE = "\ud800"  # no file-system name: os.fsencode refuses it


def test_a_path_with_a_newline_is_shown_escaped_on_one_line(tmp_path):
    target = tmp_path / "nl\ncase"
    code, out, _ = cli("init", target, "--case-id", "NL")
    assert code == 0 and out.count("\n") == 1 and f"at {tmp_path}/nl\\ncase (package" in out
    code, _, err = cli("init", target, "--case-id", "NL")
    assert (code, err) == (1, f"error: CASE_EXISTS: {tmp_path}/nl\\ncase already holds a case ledger\n")


def test_an_evidence_file_that_is_a_fifo_or_folder_is_refused_without_blocking(budget, case, tmp_path):
    import os
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        code, out, err = cli("budget", "record", case.path, "H1", "q1", "--evidence-file", path)
        assert (code, out) == (2, "") and "is not a regular file" in err
    code, out, err = cli("evidence", "store", case.path, fifo, fifo, "--iteration", "i1")
    assert code == 2 and "is not a regular file" in err


def test_evidence_from_standard_input_is_read_no_further_than_its_limit(budget, case):
    """An endless pipe given as --evidence-file - is refused once past evidence_payload_bytes_max
    (plus event_bytes_max of room for whitespace), never read whole; nothing is written."""
    script = ("import subprocess, sys\n"
              "p = subprocess.Popen([sys.executable, '-m', 'ledger_cli', 'budget', 'record', sys.argv[1], 'H1', 'q1',\n"
              "                      '--evidence-file', '-'], stdin=subprocess.PIPE, stderr=subprocess.PIPE)\n"
              "try:\n"
              "    while p.poll() is None:\n"
              "        p.stdin.write(b' ' * 65536)\n"
              "except BrokenPipeError:\n"
              "    pass\n"
              "sys.stdout.write(p.stderr.read().decode())\n"
              "sys.exit(p.wait())\n")
    before = logical_dump(case.path / "ledger.sqlite")
    done = subprocess.run([sys.executable, "-c", script, str(case.path)], capture_output=True, timeout=120)
    assert done.returncode == 1
    assert done.stdout.decode() == ("error: LIMIT_REACHED: --evidence-file (standard input) is larger than "
                                    "evidence_payload_bytes_max + event_bytes_max = "
                                    f"{1024 * 1024 + 2 * 1024 * 1024} bytes (to allow more, raise [limits] "
                                    "evidence_payload_bytes_max in the analysis config: --analysis-config FILE; "
                                    "in Python, analysis_config= of Case.open)\n")
    assert logical_dump(case.path / "ledger.sqlite") == before


# --- 10. usage exits on every allowed click version ---------------------------------------------
@pytest.mark.parametrize("args", [[], ["budget"], ["revision"], ["scope"]])
def test_a_bare_group_is_a_usage_error_with_its_help(args):
    done = run_cli(*args)
    assert done.returncode == 2
    assert b"Usage:" in done.stderr and b"Traceback" not in done.stderr


def _every_command(group, path=()):
    """``(path, command)`` of the group and of every command and group under it, loaded as ``ledger`` loads them."""
    import click
    yield path, group
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _every_command(command, (*path, name))
        else:
            yield (*path, name), command


def test_every_command_refuses_a_single_value_option_given_twice():
    """Each command and group, present and future, is of a class that checks (none made with plain click)."""
    from ledger_cli._common import OnceCommand, UsageGroup

    commands = list(_every_command(cli_main))
    assert len(commands) > 40
    assert [" ".join(path) for path, command in commands if not isinstance(command, (OnceCommand, UsageGroup))] == []


@pytest.mark.parametrize("args, named", [
    (["budget", "record", "{case}", "H1", "a1", "--evidence", '{{"a": 1}}', "--evidence", '{{"b": 2}}'], "--evidence"),
    (["budget", "settle", "{case}", "H1", "a1", "--semantic-score", "10", "--reason", "x", "--reason", "y"],
     "--reason"),
    (["--actor", "alice", "--actor", "bob", "budget", "reserve", "{case}", "H1", "a1", "x.y"], "--actor"),
    (["scope", "establish", "{case}", "case", "--limit", "units=5", "--delegate", "a", "--delegate", "b"],
     "--delegate"),
], ids=["record-evidence", "settle-reason", "global-actor", "scope-delegate"])
def test_a_single_value_option_given_twice_is_a_usage_error_and_writes_nothing(package, args, named):
    """click would keep the last value and drop the first unsaid: the command is refused instead (exit 2)."""
    start_case(package).close()
    before = logical_dump(package / "ledger.sqlite")
    done = run_cli(*[arg.format(case=package) for arg in args])
    assert done.returncode == 2, done.stderr
    assert f"is given more than once; give it once (a second value would replace the first)".encode() in done.stderr
    assert named.encode() in done.stderr and b"Traceback" not in done.stderr
    assert logical_dump(package / "ledger.sqlite") == before


def test_help_is_shown_whatever_options_are_repeated_beside_it():
    done = run_cli("verify", "--jobs", "1", "--jobs", "2", "--help")
    assert done.returncode == 0 and done.stdout.startswith(b"Usage: ledger verify ")
    done = run_cli("--actor", "a", "--actor", "b", "--help")
    assert done.returncode == 0 and done.stdout.startswith(b"Usage: ledger ")


def test_options_that_take_several_values_and_flags_may_still_repeat(package):
    start_case(package).close()
    done = run_cli("revision", "open", str(package), "--hypothesis", "a", "--hypothesis", "b")
    assert done.returncode == 1 and b"is given more than once" not in done.stderr  # refused by the case, not by usage
    done = run_cli("verify", str(package), "--strict", "--strict")
    assert b"is given more than once" not in done.stderr and done.returncode in (0, 1)


def test_the_lowest_deps_script_exists_and_is_executable():
    script = REPO / ".ci" / "lowest-deps"
    assert script.stat().st_mode & 0o111
    text = script.read_text(encoding="utf-8")
    assert "--resolution lowest-direct" in text and 'not slow and not torture' in text


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_every_json_output_escapes_line_breaks(package):
    start_case(package).close()
    done = run_cli("sql", str(package), "SELECT char(8232) AS a, char(8233) AS b, char(133) AS c", "--json")
    text = done.stdout.decode("utf-8")
    assert len(text.splitlines()) == 1
    assert json.loads(text) == [{"a": "\u2028", "b": "\u2029", "c": "\x85"}]
    done = run_cli("events", str(package), "--json", "--body")
    assert len(done.stdout.decode("utf-8").splitlines()) == 1


def test_dumps_keeps_values_and_one_line_for_any_text():
    from hypothesis import given, strategies as st

    from ledger_cli._output import dumps

    @given(st.lists(st.text(), max_size=5))
    def check(values):
        text = dumps(values)
        assert len(text.splitlines()) == 1 and json.loads(text) == values
        # a lone surrogate (a file name byte that is not UTF-8) is escaped: the output is always UTF-8
        text.encode("utf-8")

    check()
    assert dumps({"file": "out\udcffcomes.csv"}) == '{"file":"out\\udcffcomes.csv"}'


@pytest.mark.parametrize("args", [
    ["budget", "record", "{case}", "H1", "H1", "--evidence", "{{}}", "--evidence-file", LONE_SURROGATE],
    ["--config", LONE_SURROGATE, "state", "{case}"],
    ["--analysis-config", LONE_SURROGATE, "state", "{case}"],
    ["apply", "{case}", LONE_SURROGATE],
    ["verify", LONE_SURROGATE],
], ids=["evidence-file", "config", "analysis-config", "journal", "verify"])
def test_cli_path_arguments_with_a_lone_surrogate_are_error_lines_not_tracebacks(case, args):
    """Found by the CLI fuzzer in CI: click opened '\\ud800' and UnicodeEncodeError escaped."""
    from click.testing import CliRunner

    from ledger_cli.main import main

    before = case.storage.conn.execute("SELECT count(*) FROM events").fetchone()[0]
    result = CliRunner().invoke(main, [a.format(case=case.path) for a in args])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert "error: INVALID_ARGUMENT: " in result.output or "error: CONFIG_INVALID: " in result.output
    assert case.storage.conn.execute("SELECT count(*) FROM events").fetchone()[0] == before


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_non_ascii_argument_under_an_ascii_locale_is_refused_naming_the_locale(tmp_path):
    """With LC_ALL=C and PYTHONUTF8=0 Python keeps each non-ASCII byte of an argument as a lone
    surrogate; the refusal says the locale is the cause, and a non-UTF-8 byte under a UTF-8 locale
    is refused naming the byte (it said "lone surrogate" alone, which the user never typed)."""
    assert run_cli("init", str(tmp_path / "c"), "--case-id", "C1").returncode == 0
    events = Case.open(tmp_path / "c").query("SELECT count(*) AS n FROM events")
    args = ("outcome", "record", str(tmp_path / "c"), "resolved", "--source")
    ascii_locale = run_cli(*args, "\u00e9valuation", env={"LC_ALL": "C", "PYTHONUTF8": "0", "LANG": "C"})
    assert ascii_locale.returncode == 1
    assert ascii_locale.stderr.decode().endswith(
        "error: INVALID_JSON: source contains a lone surrogate (this locale's encoding is ascii, not UTF-8, so a "
        "non-ASCII argument cannot be read: use a UTF-8 locale such as LC_ALL=C.UTF-8, or PYTHONUTF8=1)\n")
    not_utf8 = run_cli(*args, os.fsdecode(b"\xe9valuation"), env={"LC_ALL": "C.UTF-8", "PYTHONUTF8": "1"})
    assert not_utf8.returncode == 1
    assert not_utf8.stderr.decode().endswith("error: INVALID_JSON: source contains a lone surrogate (a command-line "
                                             "argument holds a byte that is not UTF-8: 0xe9)\n")
    assert Case.open(tmp_path / "c").query("SELECT count(*) AS n FROM events") == events


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_under_an_ascii_locale_a_path_prints_as_its_bytes_and_a_query_names_the_locale(tmp_path):
    """Under LC_ALL=C with PYTHONUTF8=0, click wrote through a UTF-8 stream of its own that replaced
    a path's undecodable bytes with "?" (created case X3 at …/c3 ??); a query holding a non-ASCII
    argument was refused without the locale hint other commands give."""
    ascii_locale = {"LC_ALL": "C", "PYTHONUTF8": "0", "LANG": "C"}
    folder = os.fsencode(tmp_path) + b"/c3 \xc3\xa9"
    created = subprocess.run([sys.executable, "-m", "ledger_cli", "init", folder, "--case-id", "X3"],
                             capture_output=True, env={**os.environ, **ascii_locale}, timeout=120)
    assert created.returncode == 0 and created.stdout.startswith(b"created case X3 at " + folder + b" ("), created
    query = subprocess.run([sys.executable, "-m", "ledger_cli", "sql", folder, "SELECT '\xc3\xa9' AS x".encode()],
                           capture_output=True, env={**os.environ, **ascii_locale}, timeout=120)
    assert query.returncode == 1 and query.stderr.endswith(
        b"(this locale's encoding is ascii, not UTF-8, so a non-ASCII argument cannot be read: use a UTF-8 locale "
        b"such as LC_ALL=C.UTF-8, or PYTHONUTF8=1)\n"), query.stderr


def test_a_lone_surrogate_read_from_a_file_is_refused_without_blaming_the_locale(tmp_path):
    """Only an argument's bytes depend on the locale: an evidence file's "\\udce9" is refused as it is."""
    journal = tmp_path / "j.jsonl"
    journal.write_text("".join(json.dumps(line) + "\n" for line in (
        {"op": "open_revision", "hypotheses": [{"statement": "a"}], "units_per_hypothesis": 100},
        {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"},
        {"op": "reserve", "hypothesis": "H1", "action_id": "q1", "action": "source.read_context"})))
    assert run_cli("apply", str(tmp_path / "c"), str(journal), "--create", "C1").returncode == 0
    (tmp_path / "ev.json").write_text('{"x": "\\udce9"}')
    done = run_cli("budget", "record", str(tmp_path / "c"), "H1", "q1", "--evidence-file", str(tmp_path / "ev.json"),
                   env={"LC_ALL": "C", "PYTHONUTF8": "0", "LANG": "C"})
    assert done.returncode == 1 and done.stderr.decode().endswith(
        "no canonical JSON form at $.x: text holding a lone surrogate (no UTF-8 form)\n")


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_reading_from_a_closed_standard_input_is_an_error_line(case):
    case.close()
    for args in (["apply", str(case.path), "-"], ["budget", "record", str(case.path), "H1", "q1", "--evidence-file", "-"]):
        result = subprocess.run([sys.executable, "-m", "ledger_cli", *args], stdin=subprocess.DEVNULL,
                                capture_output=True, close_fds=True, preexec_fn=lambda: os.close(0))
        assert result.returncode == 1, result.stderr
        assert b"error: INVALID_ARGUMENT: '-' reads standard input, but standard input is closed" in result.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["init"], ["nosuch"], ["--nosuch"], ["budget"], ["budget", "reserve"],
                                  ["verify", "--jobs", "x", "."], ["budget", "reserve", ".", "--config", "x"]])
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_usage_error_exits_2_even_when_stderr_cannot_take_its_message(args):
    """A full stderr made the message's write fail, and the command exit 1 as a refusal would."""
    for stderr in ("full", "closed"):
        with open("/dev/full", "wb") as full:
            result = subprocess.run([sys.executable, "-m", "ledger_cli", *args], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=full if stderr == "full" else None,
                                    preexec_fn=(lambda: os.close(2)) if stderr == "closed" else None)
        assert (result.returncode, result.stdout) == (2, b""), (stderr, result)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_result_that_cannot_be_printed_is_an_output_error_and_the_operation_stays_committed(budget, case):
    case.close()
    with open("/dev/full", "wb") as full:
        result = subprocess.run([sys.executable, "-m", "ledger_cli", "budget", "reserve", str(case.path), "H1", "q9",
                                 "source.read_context"], stdout=full, stderr=subprocess.PIPE)
    assert result.returncode == 1
    assert result.stderr.decode() == ("error: OUTPUT_ERROR: cannot print the result (No space left on device); what "
                                      "the command wrote stays: a change to a ledger is committed (read it back with "
                                      "'ledger events' or 'ledger state'), journals and files it wrote are in place; "
                                      "a read writes nothing, so run it again\n")
    again = run_cli("budget", "reserve", str(case.path), "H1", "q9", "source.read_context", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["reused"] is True


@pytest.mark.slow  # over 0.5 s in the default run: the slow lane (.ci/run) runs it
def test_state_with_at_but_no_new_state_is_a_usage_error_and_an_empty_config_is_refused(case):
    case.close()
    assert run_cli("state", str(case.path), "--at", "garbage").returncode == 2
    result = run_cli("--config", "", "budget", "snapshot", str(case.path))
    assert result.returncode == 1 and b"error: CONFIG_INVALID: " in result.stderr
    empty = run_cli("init", "", "--case-id", "X1")
    assert empty.returncode == 1 and b"error: INVALID_ARGUMENT: case path is empty" in empty.stderr


@pytest.mark.parametrize("value", ["1_000", "+5", "\u0663", "0x10", "5.0"])
@pytest.mark.parametrize("args", [("events", "{case}", "--since"), ("balances", "{case}", "--revision"),
                                  ("apply", "{case}", "-", "--batch-size"), ("verify", "{case}", "--jobs"),
                                  ("simulate", "{case}", "--seed"), ("scope", "establish", "{case}", "case", "--limit")])
@pytest.mark.sampled(every=4)
def test_integer_options_take_ascii_digits_only(case, args, value):
    """int() would read 1_000, +5 and other scripts' digits; an accounting tool's numbers are plain."""
    case.close()
    given = f"units={value}" if args[-1] == "--limit" else value
    done = CliRunner().invoke(cli_main, [a.format(case=case.path) for a in args] + [given])
    assert done.exit_code == 2, done.output
    assert "is not" in done.stderr and "ASCII digits, an optional leading -" in done.stderr


@pytest.mark.parametrize("args", [("scope", "establish", "{case}", "case", "--limit"),
                                  ("scope", "establish", "{case}", "case", "--limit", "actions=1", "--delegate", "d",
                                   "--delegate-limit"), ("budget", "grant", "{case}", "H1", "--reason", "r"),
                                  ("events", "{case}", "--since")])
def test_an_integer_option_past_the_digits_python_reads_is_a_usage_error_quoting_a_bounded_part(case, args):
    """Python reads no integer of more than 4300 digits (a ValueError, which reached the user from
    --limit as a traceback): each integer option refuses one as a usage error, its value cut short."""
    case.close()
    digits = "9" * 4301
    given = f"units={digits}" if args[-1].endswith("-limit") else digits
    done = CliRunner().invoke(cli_main, [a.format(case=case.path) for a in args] + [given])
    assert done.exit_code == 2, done.output
    assert "99999999999999999999… is an integer of 4301 digits, past any the ledger holds" in done.stderr
    assert len(done.stderr) < 600 and "Traceback" not in done.stderr


@pytest.mark.parametrize("args, given, says", [
    (("events", "{case}", "--since"), "9" * 4300, "99999999999999999999… (4300 digits) is not in the range"),
    (("events", "{case}", "--since"), "0x" + "f" * 5000,
     "'0xffffffffffffffffffffffffffffffffffffff'… is not an integer"),
    (("scope", "establish", "{case}", "case", "--limit"), "units=0x" + "f" * 5000,
     "'units=0xffffffffffffffffffffffffffffffffffffffffffffffffffff'… is not DIMENSION=INTEGER")])
def test_a_long_value_refused_by_an_integer_option_is_quoted_cut_short(case, args, given, says):
    """A refused value of thousands of characters (a number out of range, or no number) is quoted by its
    start and length, not whole."""
    case.close()
    done = CliRunner().invoke(cli_main, [a.format(case=case.path) for a in args] + [given])
    assert done.exit_code == 2 and says in done.stderr and len(done.stderr) < 600, done.stderr


def test_snapshot_output_says_it_is_a_read(budget, case):
    case.close()
    result = run_cli("budget", "snapshot", str(case.path))
    first = result.stdout.decode().splitlines()[0]
    assert result.returncode == 0 and first.endswith("its budget events and the balances view checked ('ledger verify' checks everything)") and "reused" not in first
    with Case.open(case.path) as again:
        seq = again.budget().snapshot().seq
    assert first.startswith(f"revision 1 as of its newest budget event, seq {seq} (exports to ")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_help_into_a_full_stdout_and_a_closed_stdout_are_output_errors(case):
    case.close()
    with open("/dev/full", "wb") as full:
        for args in (["--help"], ["--version"], ["verify", "--help"]):
            done = subprocess.run([sys.executable, "-m", "ledger_cli", *args], stdout=full, stderr=subprocess.PIPE)
            assert (done.returncode, done.stderr) == (1, b"error: OUTPUT_ERROR: cannot print the result (No space "
                                                      b"left on device); nothing was run\n"), args
    before = case.path.joinpath("ledger.sqlite").read_bytes()
    closed = subprocess.run([sys.executable, "-m", "ledger_cli", "budget", "reserve", str(case.path), "H1", "q1",
                             "source.read_context"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: os.close(1))
    assert closed.returncode == 1 and b"standard output is closed; nothing was run" in closed.stderr
    assert case.path.joinpath("ledger.sqlite").read_bytes() == before


def test_help_is_shown_even_when_a_named_config_is_bad(case):
    done = run_cli("--config", "/no/such.toml", "verify", "--help")
    assert done.returncode == 0 and done.stdout.startswith(b"Usage: ")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_outcome_record_once_per_revision_through_the_cli(cli_case):
    c = str(cli_case)
    first = json.loads(ok("outcome", "record", c, "resolved", "--source", "swe-bench evaluation", "--json"))
    assert (first["revision"], first["reused"], first["event_ref"][:21]) == (1, False, "analysis/case/events/")
    assert "reused" in ok("outcome", "record", c, "resolved", "--source", "swe-bench evaluation")
    refused("OPERATION_CONFLICT", "outcome", "record", c, "failed", "--source", "swe-bench evaluation")
    refused("INVALID_ARGUMENT", "outcome", "record", c, " ", "--source", "ci")
    refused("", "outcome", "record", c, "resolved", status=2)  # --source is required: a usage error
    status = json.loads(ok("state", c, "--json"))
    assert (status["outcome"], status["outcome_source"]) == ("resolved", "swe-bench evaluation")


def test_runs_import_names_an_unreadable_file_and_exits_1_after_importing_the_rest(tmp_path):
    good = tmp_path / "in" / "r1.jsonl"
    good.parent.mkdir()
    good.write_text(json.dumps({"run": "r1", "command": "ls", "output": "a\nb\n"}) + "\n", encoding="utf-8")
    (tmp_path / "in" / "bad.traj.json").write_text("[", encoding="utf-8")
    done = run_cli("runs", "import", str(tmp_path / "in"), "--out", str(tmp_path / "out"))
    err = done.stderr.decode()
    assert done.returncode == 1 and "Traceback" not in err
    assert err.startswith(f"error: INVALID_ARGUMENT: {tmp_path / 'in' / 'bad.traj.json'}: ")
    assert done.stdout.decode().startswith("imported 1 run (1 file(s) failed: named below), 1 step into")
    assert (tmp_path / "out" / "r1.jsonl").is_file()


@pytest.mark.parametrize("inside", ["ledger.sqlite", "manifest.json"])
def test_a_case_argument_naming_a_file_inside_the_case_asks_for_the_case_folder(cli_case, inside):
    (cli_case / "manifest.json").write_text("{}", encoding="utf-8")
    err = refused("", "budget", "snapshot", str(cli_case / inside), status=2)
    assert "is a file: give the case folder" in err and f"the case folder holding it is {cli_case}" in err


@pytest.mark.parametrize("args, give", [
    (("serve",), "give the case folder (the one holding ledger.sqlite)"),
    (("fleet", "sql"), "give the fleet export's folder (the one 'ledger fleet export --to' wrote)"),
    (("fleet", "export"), "give a case folder (the one holding ledger.sqlite) or a folder of cases"),
    (("import",), "give the exported package's folder (the one holding manifest.json and analysis/; unpack an "
                  "archive first)")])
def test_a_folder_argument_naming_a_file_says_which_folder_to_give(tmp_path, args, give):
    (tmp_path / "f").write_text("x", encoding="utf-8")
    tail = {"sql": ("SELECT 1",), "export": ("--to", str(tmp_path / "out"))}.get(args[-1], ())
    err = refused("", *args, str(tmp_path / "f"), *tail, status=2)
    assert f"'{tmp_path / 'f'}' is a file: {give}" in err, err


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_budget_record_json_refusals_name_the_option_and_the_file(cli_case, tmp_path):
    """Like REQUEST and REPLY of ``evidence store``, bad evidence JSON says where it came from."""
    c = str(cli_case)
    ok("budget", "reserve", c, "H1", "q1", "source.read_context")
    bad = tmp_path / "bad.json"
    bad.write_text("{bad")
    before = logical_dump(cli_case / "ledger.sqlite")
    assert refused("INVALID_JSON", "budget", "record", c, "H1", "q1", "--evidence", '{"a":') == (
        "error: INVALID_JSON: --evidence: not valid JSON: Expecting value: line 1 column 6 (char 5)\n")
    assert refused("INVALID_JSON", "budget", "record", c, "H1", "q1", "--evidence-file", str(bad)) == (
        f"error: INVALID_JSON: --evidence-file ({bad}): not valid JSON: Expecting property name enclosed in "
        "double quotes: line 1 column 2 (char 1)\n")
    assert refused("INVALID_JSON", "budget", "record", c, "H1", "q1", "--evidence-file", "-", stdin=b"[") == (
        "error: INVALID_JSON: --evidence-file (standard input): not valid JSON: Expecting value: line 1 column 2 "
        "(char 1)\n")
    assert refused("INVALID_JSON", "budget", "record", c, "H1", "q1", "--evidence", '{"a": NaN}') == (
        "error: INVALID_JSON: --evidence: NaN at $.a is not JSON\n")
    assert logical_dump(cli_case / "ledger.sqlite") == before


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_global_option_after_the_command_is_a_usage_error_that_says_where_it_goes(cli_case):
    c = str(cli_case)
    for args, option in [(("budget", "reserve", c, "H1", "q1", "source.read_context", "--config", "b.toml"), "--config"),
                         (("balances", c, "--actor=me"), "--actor"),
                         (("evidence", "feedback", "confirm", c, "F000001", "--analysis-config", "a.toml"),
                          "--analysis-config")]:
        err = refused("", *args, status=2)  # click quotes the option as '--x' (8.2+) or writes ": --x" (8.1)
        assert re.search(rf"Error: No such option(:)? '?{option}'? here: it is a global option, given before the "
                         rf"command \(ledger {option} … COMMAND …\)\.\n$", err), err
    version = refused("", "balances", c, "--version", status=2)  # eager: only before a command anyway
    assert re.search(r"Error: No such option(:)? '?--version'?", version) and "global option" not in version
    other = refused("", "balances", c, "--jsn", status=2)  # any other unknown option: click's own message
    assert re.search(r"Error: No such option(:)? '?--jsn'?", other) and "global option" not in other


def test_apply_to_a_folder_without_a_case_names_create_and_makes_nothing(tmp_path):
    journal = tmp_path / "j.jsonl"
    journal.write_text('{"op": "initialize"}\n')
    err = refused("LEDGER_MISSING", "apply", str(tmp_path / "new"), str(journal))
    assert err == (f"error: LEDGER_MISSING: no case at {tmp_path / 'new'} (no such folder); check the path, or "
                   "create a case there with 'ledger init', or let the journal create it ('ledger apply CASE JOURNAL --create CASE_ID')\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.jsonl"]


@pytest.mark.parametrize("command", ["verify", "export", "actions", "serve"])
def test_a_case_path_that_is_a_link_to_nothing_is_named_as_such(tmp_path, command):
    """It said 'no ledger.sqlite' as of a folder there."""
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    args = [command, str(tmp_path / "dangling")] + (["--metadata-only"] if command == "serve" else [])
    assert refused("LEDGER_MISSING", *args) == (
        f"error: LEDGER_MISSING: no case at {tmp_path / 'dangling'} (a symbolic link to {tmp_path / 'gone'}, which is "
        "not there); check the path\n")


def test_a_case_path_below_a_link_leading_nowhere_names_that_link_not_ledger_init(tmp_path):
    """verify advised 'ledger init' there, which then refused the path for that link."""
    (tmp_path / "moved").symlink_to(tmp_path / "gone")
    assert refused("LEDGER_MISSING", "verify", str(tmp_path / "moved" / "c")) == (
        f"error: LEDGER_MISSING: no case at {tmp_path / 'moved' / 'c'} ({tmp_path / 'moved'}, a folder above it, is a "
        f"symbolic link to {tmp_path / 'gone'}, which is not there); check the path\n")


def test_a_case_path_that_is_a_chain_or_loop_of_links_is_named_by_where_it_goes_wrong(tmp_path):
    """A chain was named by its first link's target ("a link to b, which is not there": b is, a link
    itself), a loop by the link itself."""
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to(tmp_path / "gone")
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    (tmp_path / "self").symlink_to("self")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "up").symlink_to("../nowhere")
    (tmp_path / "real" / "deep").mkdir(parents=True)  # ../ from a folder reached through a link: its real parent
    (tmp_path / "through").symlink_to("real/deep")
    (tmp_path / "real" / "deep" / "x").symlink_to("../gone2")
    (tmp_path / "gone2").symlink_to("/elsewhere")  # what a reading of the path alone would take it for
    (tmp_path / "selfd").symlink_to("selfd/sub")  # a loop among the folders on the way
    expected = {
        "a": f"to b ({tmp_path / 'b'}), a link to {tmp_path / 'gone'}, which is not there",
        "loop1": f"to loop2 ({tmp_path / 'loop2'}), a link to loop1 ({tmp_path / 'loop1'}): a loop of links",
        "self": f"to self ({tmp_path / 'self'}): a loop of links",
        "sub/up": f"to ../nowhere ({tmp_path / 'nowhere'}), which is not there",
        "through/x": f"to ../gone2 ({tmp_path / 'real' / 'gone2'}), which is not there",
        "selfd": f"to selfd/sub ({tmp_path / 'selfd' / 'sub'}): a loop of links among the folders on its way"}
    for name, where in expected.items():
        assert refused("LEDGER_MISSING", "verify", str(tmp_path / name)) == (
            f"error: LEDGER_MISSING: no case at {tmp_path / name} (a symbolic link {where}); check the path\n")
        assert refused("INVALID_ARGUMENT", "init", str(tmp_path / name), "--case-id", "X-1") == (
            f"error: INVALID_ARGUMENT: {tmp_path / name} (case path) is a link that leads nowhere ({where}); give a "
            "folder, or remove the link\n")


@pytest.mark.parametrize("command", [("init", "--case-id", "X-1"), ("apply", "JOURNAL", "--create", "X-1")])
def test_a_new_case_at_a_link_to_nothing_is_refused_naming_the_link(tmp_path, command):
    """It said 'File exists', the system's word, naming no cause."""
    journal = tmp_path / "j.jsonl"
    journal.write_text('{"op": "initialize"}\n')
    (tmp_path / "dangling").symlink_to("gone")
    args = [command[0], str(tmp_path / "dangling"), *(str(journal) if a == "JOURNAL" else a for a in command[1:])]
    assert refused("INVALID_ARGUMENT", *args) == (
        f"error: INVALID_ARGUMENT: {tmp_path / 'dangling'} (case path) is a link that leads nowhere (to gone "
        f"({tmp_path / 'gone'}), which is not there); give a folder, or remove the link\n")
    assert not (tmp_path / "gone").exists()


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_query_stopped_at_its_time_limit_says_the_limit_in_the_unit_it_was_given(cli_case):
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    assert refused("INVALID_ARGUMENT", "sql", str(cli_case), endless, "--timeout", "0.25") == (
        "error: INVALID_ARGUMENT: query stopped at its time limit, 0.25 s (ledger sql --timeout SECONDS; "
        "timeout_ms=250 in Python)\n")


#: One call of a function that runs for seconds (about 20 s here), which SQLite cannot stop: ltrim of
#: 120,000 characters by a set of 60,001, each character looked up in the whole set.
_LONG_CALL = ("SELECT length(ltrim(replace(hex(zeroblob(60000)), '0', 'a'), replace(hex(zeroblob(30000)), '0', 'b') "
              "|| 'a')) AS n")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_query_held_past_its_time_limit_by_one_function_call_ends_the_command_with_the_refusal(cli_case):
    """SQLite stops a query between steps: one call of a function is one step (a printf of two
    billion characters ran 12 s, 47 s under load; ltrim of a long text by a long set of characters
    takes time growing with the product of their lengths, here about 20 s), and ledger sql
    --timeout 0.3 ran on to the call's end."""
    long_call = _LONG_CALL
    assert refused("INVALID_ARGUMENT", "sql", str(cli_case), long_call, "--timeout", "0.3") == (
        "error: INVALID_ARGUMENT: query stopped at its time limit, 0.3 s (--timeout SECONDS): one call of a "
        "function in it ran on past the limit, so the command ended; nothing was written\n")
    assert refused("", "sql", str(cli_case), "SELECT count(*) AS n FROM events", "--timeout", "0.3", status=0) == ""


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_ctrl_c_while_one_function_call_holds_a_query_ends_the_command_as_an_interrupt(cli_case):
    """Python runs no handler while SQLite holds the main thread in one call: a Ctrl-C waited for the
    call's end (12 s) and the command then printed its result and exited 0."""
    long_call = _LONG_CALL
    done = interrupted_after(3.0, "sql", str(cli_case), long_call, "--timeout", "60")  # well inside the call
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "error: interrupted; nothing half-written "
                                                           "remains, run the command again\n")


def test_only_the_time_waiting_on_a_query_counts_toward_its_deadline_not_printing_its_rows():
    from ledger_cli._deadline import QueryDeadline

    deadline = QueryDeadline(30)
    assert deadline.waiting_since is not None  # opening the query counts
    seen = []
    for row in deadline.rows(iter([(1,), (2,)])):
        seen.append((row, deadline.waiting_since))  # the caller holds a row: printing, not waiting
    assert seen == [((1,), None), ((2,), None)] and deadline.waiting_since is None


def interrupted_after(seconds: float, *args: str) -> subprocess.CompletedProcess:
    """Run ``ledger ARGS`` in a real process and send it Ctrl-C (SIGINT) after ``seconds``."""
    import signal
    import time

    process = subprocess.Popen([sys.executable, "-m", "ledger_cli", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    time.sleep(seconds)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_query_stopped_by_ctrl_c_is_an_interrupt_not_its_time_limit(cli_case):
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    done = interrupted_after(1.5, "sql", str(cli_case), endless, "--timeout", "60")
    assert (done.returncode, done.stderr) == (130, "error: interrupted; nothing half-written remains, run the "
                                              "command again\n")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("gap_s", [0.001, 0.01])
def test_a_second_ctrl_c_while_the_command_exits_changes_nothing(cli_case, gap_s):
    """Two Ctrl-Cs a few milliseconds apart, while the output waited on a full pipe: the second
    ended the process by the signal itself (status -2) or printed a traceback from the interpreter's
    shutdown. The command ends once: its one line and 130."""
    import signal
    import time

    rows = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 2000000) SELECT x, 'abcdefghij' FROM c"
    process = subprocess.Popen([sys.executable, "-m", "ledger_cli", "sql", str(cli_case), rows, "--csv", "--timeout", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    time.sleep(2.0)  # its output now waits on the pipe nobody reads
    process.send_signal(signal.SIGINT)
    time.sleep(gap_s)
    process.send_signal(signal.SIGINT)
    err = process.stderr.read().decode()
    process.stdout.close()
    assert (process.wait(timeout=60), err) == (130, "error: interrupted; nothing half-written remains, run the "
                                                    "command again\n")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("sigint", ["default", "ignored"])
@pytest.mark.parametrize("signal_name, status", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_sigterm_and_sighup_end_a_command_as_ctrl_c_does_with_128_and_the_signal(cli_case, sigint, signal_name, status):
    """SIGTERM (timeout, a CI runner, a service manager) and SIGHUP (a terminal closed, an ssh session
    dropped: it ended the command where it stood, without a word) end a command as Ctrl-C does, with
    the status a shell gives a process that signal ended; also in a script's background job, which
    starts with SIGINT ignored."""
    import signal
    import time

    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    process = subprocess.Popen([sys.executable, "-m", "ledger_cli", "sql", str(cli_case), endless, "--timeout", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                               preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint == "ignored"
                               else None)
    time.sleep(1.5)
    process.send_signal(getattr(signal, signal_name))
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (status, "error: interrupted; nothing half-written remains, run the command "
                                                 "again\n")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_reading_under_a_config_other_than_the_frozen_policy_warns_which_policy_it_used(cli_case, tmp_path):
    """cli_case froze the example policy (read_context costs 5); --config with another price still
    reads at 5, and says so, where a change would be refused."""
    c, other = str(cli_case), tmp_path / "other.toml"
    other.write_text(EXAMPLE_BUDGET.read_text().replace('"source.read_context" = 5', '"source.read_context" = 7'))
    assert '"source.read_context" = 7' in other.read_text()
    warning = ("warning: --config is not the policy frozen for revision 1: this used the frozen one, and changes "
               "under this --config are refused (BUDGET_POLICY_CHANGED)\n")
    for args in (("budget", "check", c, "H1", "source.read_context"), ("budget", "price", c, "H1", "source.read_context"),
                 ("budget", "advice", c, "H1"), ("budget", "remaining", c, "H1"), ("budget", "snapshot", c),
                 ("budget", "initialize", c)):
        done = run_cli("--config", str(other), *args)
        assert (done.returncode, done.stderr.decode()) == (0, warning), args
    assert "cost: 5" in ok("--config", str(other), "budget", "check", c, "H1", "source.read_context")
    same = run_cli("--config", str(EXAMPLE_BUDGET), "budget", "check", c, "H1", "source.read_context")
    assert (same.returncode, same.stderr) == (0, b"")
    refused("BUDGET_POLICY_CHANGED", "--config", str(other), "budget", "reserve", c, "H1", "q1", "source.read_context")


def test_the_case_status_prints_json_values_for_people(cli_case):
    lines = ok("state", str(cli_case)).splitlines()
    assert lines[2:5] == ["state: INVESTIGATING_HYPOTHESES", "analysis_revision: 1", "package_generation: 4"]
    assert lines[-2:] == ["outcome: null", "outcome_source: null"]


def test_a_reading_of_an_action_the_policy_prices_by_default_says_so_when_the_policy_names_prices(cli_case, tmp_path):
    """A misspelt action name was quoted at default_action_cost without a word: check and price now say
    so on stderr (the answer itself unchanged); a named action, a test's price and a policy naming no
    action price say nothing."""
    c = str(cli_case)
    note = ("note: source.read_contxt is not among the action_costs of the policy this revision froze "
            "(database.lookup, research.lookup, source.find_text, source.read_context): it is priced at "
            "default_action_cost, 10 units\n")
    for args in (("budget", "check", c, "H1", "source.read_contxt"), ("budget", "price", c, "H1", "source.read_contxt",
                                                                     "--json")):
        status, out, err = cli(*args)
        assert (status, err) == (0, note), args
        assert "cost" in out
    assert cli("budget", "check", c, "H1", "source.read_context")[2] == ""
    plain = start_case(tmp_path / "plain", hypotheses=1)
    plain.budget().initialize()
    plain.close()
    assert cli("budget", "check", str(plain.path), "H1", "anything.at_all")[::2] == (0, "")


def test_a_test_name_quoted_at_test_costs_says_what_a_reservation_under_it_debits(cli_case):
    """check and price quote test.automated and test.human at test_costs (request-test's price) while
    budget reserve under that name debits default_action_cost: both say so on stderr, with the two
    figures, and the reservation debits the second."""
    c = str(cli_case)
    for name, quoted in (("test.automated", 15), ("test.human", 30)):
        note = (f"note: {name} is quoted at test_costs, {quoted} units, the price of a test asked for with "
                f"request_test; a reservation under this name debits 10 units (its action_costs entry or "
                f"default_action_cost): give an action your agent runs itself a name of its own\n")
        for command in ("check", "price"):
            status, out, err = cli("budget", command, c, "H1", name, "--json")
            assert (status, err, json.loads(out)["cost"]) == (0, note, quoted), (name, command)
    assert "reserved, cost 10" in ok("budget", "reserve", c, "H1", "t1", "test.automated")


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_budget_readings_print_json_values_for_people(cli_case):
    out = ok("budget", "check", str(cli_case), "H1", "source.read_context")
    assert "allowed: true" in out and "tier: full" in out and "True" not in out
    advice = ok("budget", "advice", str(cli_case), "H1")
    assert "investigable: true" in advice and "remaining_actions: null" in advice
    assert json.loads(ok("budget", "advice", str(cli_case), "H2", "--json"))["remaining_units"] == 50


def test_write_commands_say_the_event_path_is_where_export_writes(cli_case):
    out = ok("budget", "reserve", str(cli_case), "H1", "q1", "source.read_context")
    assert out.startswith("seq 5 (exports to analysis/budgets/0001/events/00000002.json)\n")


# --- a file or folder a command reads: missing or unreadable is a usage error (docs/cli.md) -----------
INPUT_ARGUMENTS = [
    (["apply", "{case}", "{path}"], "JOURNAL"),
    (["simulate", "{path}"], "JOURNAL_OR_FOLDER..."),
    (["simulate", "{journal}", "--outcomes", "{path}"], "--outcomes"),
    (["simulate", "{journal}", "--frontier", "--outcomes", "{path}"], "--outcomes"),
    (["runs", "import", "{path}", "--out", "{out}"], "TRAJ_OR_FOLDER..."),
    (["runs", "import", "{journal}", "--out", "{out}", "--outcomes", "{path}"], "--outcomes"),
    (["evidence", "store", "{case}", "{path}", "{journal}", "--iteration", "i1"], "REQUEST"),
    (["evidence", "feedback", "submit", "{case}", "op-1", "{path}"], "REPLY"),
    (["budget", "record", "{case}", "H1", "q1", "--evidence-file", "{path}"], "--evidence-file"),
]
INPUT_IDS = ["apply", "simulate", "simulate-outcomes", "frontier-outcomes", "runs-import", "runs-import-outcomes",
             "evidence-store", "feedback-submit", "budget-record"]


def _input_call(args: list[str], cli_case: Path, tmp_path: Path, path: Path) -> tuple[list[str], Path]:
    journal = tmp_path / "j.jsonl"
    journal.write_text('{"op": "initialize"}\n', encoding="utf-8")
    values = {"case": str(cli_case), "path": str(path), "journal": str(journal), "out": str(tmp_path / "out")}
    return [a.format(**values) for a in args], tmp_path / "out"


@pytest.mark.parametrize("args,argument", INPUT_ARGUMENTS, ids=INPUT_IDS)
def test_a_missing_input_file_is_a_usage_error_in_every_command_that_reads_one(cli_case, tmp_path, args, argument):
    """simulate and runs import said INVALID_ARGUMENT (exit 1) where apply said usage (exit 2): every
    command now refuses a missing journal, trajectory, outcomes CSV, request or reply before running."""
    before = logical_dump(cli_case / "ledger.sqlite")
    missing = tmp_path / "missing.jsonl"
    call, out = _input_call(args, cli_case, tmp_path, missing)
    result = CliRunner().invoke(cli_main, call, prog_name="ledger")
    assert (result.exit_code, result.stdout) == (2, "")
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"Error: Invalid value for '{argument}': ") and str(missing) in last
    assert re.search(r"does not exist|No such file or directory", last)
    assert result.stderr.startswith("Usage: ledger ")
    assert logical_dump(cli_case / "ledger.sqlite") == before and not out.exists()


@pytest.mark.parametrize("args,argument", INPUT_ARGUMENTS, ids=INPUT_IDS)
def test_an_unreadable_input_file_is_a_usage_error_in_every_command_that_reads_one(cli_case, tmp_path, monkeypatch,
                                                                                     args, argument):
    """As a missing one (this user may not read it: checked before opening, or refused by the open)."""
    import click.types

    locked = tmp_path / "locked.jsonl"
    locked.write_text('{"op": "initialize"}\n', encoding="utf-8")
    access, open_stream = os.access, click.types.open_stream

    def no_access(path, mode, *rest, **kwargs):
        return False if os.fspath(path) == str(locked) else access(path, mode, *rest, **kwargs)

    def no_open(path, *rest, **kwargs):
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(locked))
        return open_stream(path, *rest, **kwargs)

    monkeypatch.setattr(os, "access", no_access)
    monkeypatch.setattr(click.types, "open_stream", no_open)
    call, out = _input_call(args, cli_case, tmp_path, locked)
    result = CliRunner().invoke(cli_main, call, prog_name="ledger")
    assert (result.exit_code, result.stdout) == (2, "")
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"Error: Invalid value for '{argument}': ") and str(locked) in last
    assert re.search(r"is not readable|Permission denied", last)
    assert not out.exists()


def test_a_mistyped_command_is_a_usage_error_naming_the_close_ones_at_every_level():
    for args, typo, close in ((["verfy", "x"], "verfy", "verify"), (["simulte"], "simulte", "simulate"),
                              (["budget", "chek"], "chek", "check")):
        code, out, err = cli(*args)
        assert code == 2 and out == ""
        assert f"No such command '{typo}'" in err
        if hasattr(click_exceptions, "NoSuchCommand"):  # click 8.2+ suggests; 8.1 names the typo only
            assert f"Did you mean '{close}'?" in err


def test_a_ctrl_c_while_the_command_line_is_still_loading_ends_with_the_message_and_status_130(monkeypatch, capsys):
    from ledger_cli import entry

    class Loading:
        def __getattr__(self, name):
            raise KeyboardInterrupt  # what Ctrl-C raises inside an import

    import signal

    from ledger.ground import interrupts

    monkeypatch.setitem(sys.modules, "ledger_cli.main", Loading())
    monkeypatch.setattr(interrupts, "_ending", [False, False])  # this test process goes on after the command
    handlers = {number: signal.getsignal(number) for number in interrupts.INTERRUPTING}
    try:
        with pytest.raises(SystemExit) as ended:
            entry.run()
        # the process ends: a second Ctrl-C while it exits changes nothing
        assert {number: signal.getsignal(number) for number in handlers} == dict.fromkeys(handlers, signal.SIG_IGN)
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    assert ended.value.code == 130
    assert capsys.readouterr().err == "error: interrupted; nothing half-written remains, run the command again\n"


#: Python run as the ``ledger`` command (``ledger state CASE``), sending itself SIGNAL at MOMENT.
_SIGNALLED_RUN = """
import atexit, importlib, os, signal, sys
import click
number = getattr(signal, sys.argv[1])
send = lambda *args, **kwargs: os.kill(os.getpid(), number)
if sys.argv[2] == "loading":  # while the command line's modules are imported
    real = importlib.import_module
    importlib.import_module = lambda name, package=None: (name == ".main" and send(), real(name, package))[1]
elif sys.argv[2] == "arguments":  # while click reads the arguments
    parse = click.Group.parse_args
    click.Group.parse_args = lambda *args: (send(), parse(*args))[1]
else:  # once the command is over, as the process exits
    atexit.register(send)
sys.argv = ["ledger", "state", sys.argv[3]]
from ledger_cli.entry import run
run()
"""


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("moment", ["loading", "arguments", "over"])
def test_a_signal_before_the_command_runs_interrupts_it_and_one_after_it_is_over_changes_nothing(package, moment,
                                                                                                    signal_name):
    """SIGTERM while the command line loaded ended the process at once without a word (status -15 to
    its parent); SIGINT or SIGTERM while click read the arguments printed click's "Aborted!" (status
    1); either once the command was over ended it without a word, by the signal, or with a traceback."""
    start_case(package).close()
    done = subprocess.run([sys.executable, "-c", _SIGNALLED_RUN, signal_name, moment, str(package)],
                          capture_output=True, text=True, timeout=60)
    if moment == "over":
        assert (done.returncode, done.stderr, done.stdout.split(":")[0]) == (0, "", "case_id")
    else:
        assert (done.returncode, done.stdout) == ({"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}[signal_name], "")
        assert done.stderr == "error: interrupted; nothing half-written remains, run the command again\n"

@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_reading_commands_start_without_importing_pandas_even_when_it_is_installed(package, tmp_path):
    """sqlite-utils imports pandas and numpy when they are installed (half a second of start-up);
    every command reading through it (`ledger sql`, the length of `ledger verify`'s progress bar)
    hides them while importing it, and they stay importable afterwards."""
    pytest.importorskip("pandas")
    start_case(package).close()
    commands = [["verify", str(package)], ["export", str(package)], ["balances", str(package), "--csv"], ["sql", str(package), "SELECT COUNT(*) AS n FROM events", "--csv"]]
    script = ("import sys\nfrom click.testing import CliRunner\nfrom ledger_cli.main import main\n"
              f"for args in {commands!r}:\n"
              "    done = CliRunner().invoke(main, args)\n"
              "    assert done.exit_code == 0, done.output\n"
              "    print(args[0], 'pandas' in sys.modules, 'numpy' in sys.modules)\n"
              "print(done.stdout.splitlines())\n"
              "import pandas, sqlite_utils.db\nprint(sqlite_utils.db.pd is None)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["verify False False", "export False False", "balances False False",
                                        "sql False False", "['n', '3']", "True"]


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_apply_says_when_initialize_froze_the_built_in_policy_and_only_then(tmp_path):
    journal = tmp_path / "j.jsonl"
    journal.write_bytes(journal_bytes(JOURNAL[:4]))
    plain = run_cli("apply", str(make_package(tmp_path / "plain")), str(journal), "--create", "BUG-9")
    assert plain.returncode == 0
    assert b"note: line 3: initialize froze the built-in default policy" in plain.stderr and b"--config FILE" in plain.stderr
    again = run_cli("apply", str(tmp_path / "plain"), str(journal))  # reused: nothing frozen now
    assert again.returncode == 0 and b"built-in default policy" not in again.stderr
    priced = run_cli("--config", str(EXAMPLE_BUDGET), "apply", str(make_package(tmp_path / "priced")), str(journal),
                     "--create", "BUG-9")
    assert priced.returncode == 0 and b"built-in default policy" not in priced.stderr


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_apply_says_an_initialize_without_config_kept_an_earlier_revisions_policy(tmp_path):
    """A later revision's initialize without --config keeps the policy an earlier revision froze
    (its prices applied): apply said it froze the built-in defaults."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text('{"op":"open_revision","hypotheses":[{"statement":"a"}],"units_per_hypothesis":50}\n'
                     '{"op":"transition","to":"INVESTIGATING_HYPOTHESES"}\n{"op":"initialize"}\n'
                     '{"op":"transition","to":"EVALUATING"}\n')
    second.write_text('{"op":"open_revision","hypotheses":[{"statement":"b"}],"units_per_hypothesis":50}\n'
                      '{"op":"transition","to":"INVESTIGATING_HYPOTHESES"}\n{"op":"initialize"}\n'
                      '{"op":"reserve","hypothesis":"H1","action_id":"q","action":"x.y"}\n')
    (tmp_path / "p7.toml").write_text("default_action_cost = 7\n")
    assert run_cli("--config", str(tmp_path / "p7.toml"), "apply", str(tmp_path / "c"), str(first), "--create",
                   "KEPT-1").returncode == 0
    kept = run_cli("apply", str(tmp_path / "c"), str(second))
    with Case.open(tmp_path / "c") as case:
        sha = case.budget().frozen_policy(2).policy_sha256
        assert case.budget().frozen_policy(1).policy_sha256 == sha and case.budget().frozen_policy().cost_units("x") == 7
    assert kept.returncode == 0 and b"built-in default policy" not in kept.stderr
    assert (f"note: line 3: initialize kept the policy an earlier revision froze (policy_sha256 {sha[:12]}…), not the "
            "built-in defaults").encode() in kept.stderr
    assert json.loads(kept.stdout.splitlines()[3])["result"]["action"]["cost_units"] == 7


_WARNING_COMMAND = """
import sys, warnings
import ledger
status = ledger.Case.status
def warned_status(self, *args, **kwargs):
    warnings.warn("a warning of its own", UserWarning)
    return status(self, *args, **kwargs)
ledger.Case.status = warned_status
from ledger_cli.main import main
main(["state", sys.argv[1]])
"""


def _two_gib_at_most() -> None:
    """In the child: a loop that grows memory fails within seconds instead of filling the machine."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.parametrize("flags", [["-W", "default"], ["-X", "dev"]])
def test_a_warning_a_command_gives_is_shown_once_under_any_warning_setting(tmp_path, flags):
    """Shown while the command's warnings were still being recorded, a warning was recorded again and
    shown again, for ever (memory grew until the process was killed)."""
    start_case(tmp_path / "c").close()
    done = subprocess.run([sys.executable, *flags, "-c", _WARNING_COMMAND, str(tmp_path / "c")],
                          capture_output=True, text=True, timeout=120, preexec_fn=_two_gib_at_most)
    assert done.returncode == 0 and done.stdout.startswith("case_id: BUG-1\n")
    assert done.stderr.count("UserWarning: a warning of its own") == 1, done.stderr  # 3.13 adds the source line


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_command_refused_for_an_existing_case_leaves_no_file_open(tmp_path):
    """init over a case, apply --create of a case already there: the lock file opened to look was left
    open (a ResourceWarning under -W default)."""
    start_case(tmp_path / "c").close()
    journal = tmp_path / "j.jsonl"
    journal.write_text('{"op": "transition", "to": "BLOCKED"}\n', encoding="utf-8")
    for args, code in ((["init", str(tmp_path / "c"), "--case-id", "BUG-1"], 1),
                       (["apply", "--create", "BUG-1", str(tmp_path / "c"), str(journal), "-q"], 0)):
        done = subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-m", "ledger_cli.main", *args],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == code and "ResourceWarning" not in done.stderr, done.stderr


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_usage_error_with_stderr_closed_writes_nothing_into_stdout(case):
    """With `2>&-`, click printed the usage error into stdout: into the CSV or JSON a script was saving."""
    case.close()
    done = subprocess.run([sys.executable, "-m", "ledger_cli", "sql", str(case.path), "--csv"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, preexec_fn=lambda: os.close(2), timeout=60)
    assert (done.returncode, done.stdout) == (2, b"")
    done = subprocess.run([sys.executable, "-m", "ledger_cli", "state", str(case.path)], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, preexec_fn=lambda: os.close(2), timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(b"case_id: BUG-1\n")


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_command_run_in_a_removed_folder_says_so(tmp_path, case):
    """`ledger demo` in a folder removed meanwhile said "the path cannot be used: No such file or
    directory", naming no path; an absolute path still works there."""
    case.close()
    gone = tmp_path / "gone"
    gone.mkdir()
    hint = "; the current folder no longer exists (removed or moved while in use): cd to one that does\n"
    # run from a file, as the `ledger` script is: under `python -c` the removed folder is on the import
    # path, where Python 3.13.0 itself fails to import socket (SystemError)
    script = tmp_path / "ledger_in_a_removed_folder.py"
    script.write_text("import os, sys\nos.chdir(sys.argv[1])\nos.rmdir(sys.argv[1])\n"
                      "from ledger_cli.main import main\nmain(sys.argv[2:], prog_name='ledger')\n")
    for args, says in ((["demo"], "error: INVALID_ARGUMENT: the path cannot be used: No such file or directory"),
                       (["init", "x", "--case-id", "X-1"], "error: INVALID_ARGUMENT: cannot create a case at x: No "
                                                          "such file or directory")):
        gone.mkdir(exist_ok=True)
        done = subprocess.run([sys.executable, str(script), str(gone), *args], capture_output=True, text=True,
                              timeout=120)
        assert (done.returncode, done.stderr) == (1, says + hint)
    gone.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, str(script), str(gone), "state", str(case.path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("case_id: BUG-1\n")


def test_settle_takes_the_semantic_score_by_the_name_journals_and_python_give_it(cli_case):
    """--semantic-score is --score's other name (runs import and the journal's settle line say semantic_score)."""
    c = str(cli_case)
    assert cli("budget", "reserve", c, "H1", "q1", "source.read_context")[0] == 0
    assert cli("budget", "record", c, "H1", "q1", "--evidence", '{"finding": 1}')[0] == 0
    status, out, _ = cli("budget", "settle", c, "H1", "q1", "--semantic-score", "100", "--reason", "good", "--json")
    assert (status, json.loads(out)["action"]["reward_units"]) == (0, 4)


@pytest.mark.parametrize("refusal", [MemoryError(), RuntimeError("can't start new thread"),
                                     ImportError("/x/rpds.so: failed to map segment from shared object")])
def test_a_command_the_machine_refuses_memory_or_threads_says_so_without_a_traceback(tmp_path, monkeypatch, refusal):
    """Under a memory limit (`ulimit -v`) a MemoryError, a thread that cannot start or a library that
    cannot be loaded reached the user as a traceback."""
    import ledger.package_tools.many as many

    def refused(*args, **kwargs):
        raise refusal
    monkeypatch.setattr(many, "verify_case", refused)
    case = Case.create(tmp_path / "c", "MEM-1")
    case.close()
    code, out, err = cli("verify", str(tmp_path / "c"), "--jobs", "1")
    assert code == 1 and out == "" and "Traceback" not in err
    assert err.startswith("error: STORAGE_ERROR: the machine refused the memory this command needs (a memory limit "
                          "such as 'ulimit -v'?); what it committed before stays committed and nothing is half written")


@pytest.mark.parametrize("args", [
    ["simulate", "{link}"],
    ["simulate", "{ok}", "--outcomes", "{link}"],
    ["simulate", "{ok}", "--package", "{link}"],
    ["runs", "import", "{link}", "--out", "out"],
    ["apply", "{case}", "{link}"],
    ["evidence", "store", "{case}", "{ok}", "{link}"],
    ["evidence", "feedback", "submit", "{case}", "op-1", "{ok}", "--attach", "{link}"],
    ["budget", "record", "{case}", "H1", "a-1", "--evidence-file", "{link}"],
    ["import", "{link}"],
], ids=["simulate", "simulate-outcomes", "simulate-package", "runs-import", "apply", "evidence-reply",
        "feedback-attach", "evidence-file", "import"])
def test_an_input_given_as_a_symbolic_link_to_nothing_is_a_usage_error_that_says_so(tmp_path, args):
    """A link whose target is gone is listed by ``ls``: the usage error names it as a link to nothing
    and its target, not as a path that does not exist; nothing is written."""
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    (tmp_path / "ok.jsonl").write_text("")
    given = [arg.format(link=tmp_path / "gone", ok=tmp_path / "ok.jsonl", case=tmp_path / "case") for arg in args]
    before = sorted(p.name for p in tmp_path.iterdir())
    done = CliRunner().invoke(cli_main, given)
    assert done.exit_code == 2, done.output
    assert f"{str(tmp_path / 'gone')!r} is a symbolic link to nothing (it points to " \
           f"{str(tmp_path / 'nowhere')!r}, which does not exist)" in done.stderr
    assert "does not exist." not in done.stderr and sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_chain_of_links_ending_in_nothing_and_a_loop_of_links_are_named_as_such(tmp_path, monkeypatch):
    """The refusal said the chain's next link "does not exist" (it does: a link to nothing), and a loop
    "points to" a link that exists; ``-`` stays standard input even beside a link to nothing named ``-``."""
    (tmp_path / "d1").symlink_to(tmp_path / "nowhere")
    (tmp_path / "d2").symlink_to("d1")
    (tmp_path / "loop-a").symlink_to("loop-b")
    (tmp_path / "loop-b").symlink_to("loop-a")
    chain = CliRunner().invoke(cli_main, ["simulate", str(tmp_path / "d2")])
    assert chain.exit_code == 2
    assert f"{str(tmp_path / 'd2')!r} is a symbolic link to nothing (it points to 'd1', itself a link to nothing)" \
        in chain.stderr
    loop = CliRunner().invoke(cli_main, ["simulate", str(tmp_path / "loop-a")])
    assert loop.exit_code == 2 and f"{str(tmp_path / 'loop-a')!r} is a loop of symbolic links" in loop.stderr
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").symlink_to("nowhere")
    done = CliRunner().invoke(cli_main, ["apply", str(tmp_path / "c"), "-"], input="")
    assert "symbolic link" not in done.stderr and "LEDGER_MISSING" in done.stderr  # stdin read; no case there


@pytest.mark.slow  # a real process: the slow lane (.ci/run) runs it
def test_bytes_that_are_not_utf8_in_several_arguments_are_all_named(tmp_path):
    """Which argument a refusal is about is not known where the hint is made: every such byte is named
    (the hint named the first anywhere, 0xfe of a case path that opened, for the query's 0xff)."""
    env = {"LC_ALL": "C.UTF-8", "PYTHONUTF8": "1"}
    assert run_cli("init", os.fsdecode(b"c\xfe"), "--case-id", "C1", env=env, cwd=tmp_path).returncode == 0
    done = run_cli("sql", os.fsdecode(b"c\xfe"), os.fsdecode(b"select '\xff'"),
                   env={"LC_ALL": "C.UTF-8", "PYTHONUTF8": "1"}, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.decode().rstrip().endswith(
        "(command-line arguments hold bytes that are not UTF-8: 0xfe, 0xff)"), done.stderr
