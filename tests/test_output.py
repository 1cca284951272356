"""Output for people (docs/cli.md): control characters and terminal escapes in stored text are shown
escaped in every human-readable output, and an output encoding that cannot carry a character (a
Latin-1 locale) escapes it instead of failing: a committed write never reports failure because of
how its result is printed."""

from __future__ import annotations

import io
import json
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import Case, export_case
from ledger_cli.main import main as cli_main

from conftest import run_cli

T0 = "2026-01-01T00:00:00Z"
#: A window-title write, an OSC 52 clipboard write, clear-screen and cursor-home, an 8-bit CSI, a
#: line separator, a carriage return, a bell, and a right-to-left override and isolate (text shown reordered).
HOSTILE = "t\x1b]0;owned\x07 \x1b]52;c;ZXZpbA==\x07 \x1b[2J\x1b[H \x9b31m \u2028 \r over\x07 \u202eevil\u2067x"
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def _raw_controls(text: str) -> list[str]:
    """Characters a terminal would act on or show text reordered by, other than the newlines between lines."""
    return [ch for ch in text if ch != "\n" and (unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in BIDI)]


@pytest.fixture
def hostile_case(tmp_path) -> Path:
    with Case.create(tmp_path / "c", "BUG-1", at=T0) as case:
        case.open_revision([{"statement": HOSTILE}, {"statement": "plain"}], 50, at=T0)
        case.transition("INVESTIGATING_HYPOTHESES", at=T0)
        budget = case.budget()
        budget.initialize(at=T0)
        budget.reserve("H1", "a1", "source.read_context", at=T0)
        budget.fail("H1", "a1", HOSTILE, at=T0)
        budget.reject("H2", HOSTILE, at=T0)
        export_case(case)
    return tmp_path / "c"


HUMAN_OUTPUTS = [
    ["balances", "{c}"], ["actions", "{c}"], ["events", "{c}"], ["events", "{c}", "--body"], ["state", "{c}"],
    ["sql", "{c}", "SELECT statement, terminal_reason FROM balances"],
    ["sql", "{c}", "SELECT closing_reason AS \"x\x1b[2Jy\" FROM actions"],
    ["sql", "{c}", "SELECT body FROM events ORDER BY seq DESC LIMIT 1"],
    ["verify", "{c}"], ["budget", "remaining", "{c}", "H1"], ["budget", "remaining", "{c}", "H2"],
]


@pytest.mark.parametrize("args", HUMAN_OUTPUTS, ids=lambda a: " ".join(a[:3])[:40])
@pytest.mark.sampled(every=4)
def test_control_characters_and_terminal_escapes_are_shown_escaped_in_human_output(hostile_case, args):
    done = CliRunner().invoke(cli_main, [a.format(c=hostile_case) for a in args])
    assert done.exit_code == 0, done.output
    assert _raw_controls(done.stdout) == [] and _raw_controls(done.stderr) == []
    if args[0] in ("balances", "actions", "sql") and "body" not in args[-1]:
        assert "\\x1b]52;c;ZXZpbA==\\x07" in done.stdout and "\\x9b31m" in done.stdout
        assert "\\u202eevil\\u2067x" in done.stdout


@pytest.mark.parametrize("fmt, delimiter", [("--csv", ","), ("--tsv", "\t")])
def test_csv_and_tsv_carry_values_verbatim_terminal_escapes_included_into_a_pipe(hostile_case, fmt, delimiter):
    """Into a file or a pipe, click stripped every ESC[…] sequence from the values (clear-screen, a
    colour), so the same command wrote other data there than on a terminal."""
    import csv as csv_module

    done = run_cli("sql", str(hostile_case), "SELECT statement, terminal_reason FROM balances ORDER BY hypothesis_id",
                   fmt)
    assert done.returncode == 0, done.stderr
    rows = list(csv_module.reader(io.StringIO(done.stdout.decode(), newline=""), delimiter=delimiter))
    assert rows[1:] == [[HOSTILE, ""], ["plain", HOSTILE]]


@pytest.mark.parametrize("args", [["balances", "{c}", "--json"], ["actions", "{c}", "--nl"], ["events", "{c}", "--json"],
                                  ["sql", "{c}", "SELECT * FROM balances", "--json"], ["state", "{c}", "--json"]])
def test_json_output_carries_no_raw_control_character_and_reads_back_the_same_text(hostile_case, args):
    done = CliRunner().invoke(cli_main, [a.format(c=hostile_case) for a in args])
    assert done.exit_code == 0 and _raw_controls(done.stdout) == []
    if args[0] == "balances":
        assert json.loads(done.stdout)[0]["statement"] == HOSTILE


@pytest.mark.parametrize("args", [["apply", "{c}", HOSTILE], ["import", HOSTILE], ["verify", "{c}", f"--x{HOSTILE}"],
                                  ["balances", "{c}", HOSTILE], [f"v{HOSTILE}"]],
                         ids=["missing-journal", "missing-folder", "unknown-option", "extra-argument", "unknown-command"])
@pytest.mark.sampled(every=4)
def test_a_usage_error_quoting_an_argument_shows_it_escaped(hostile_case, args):
    """click quoted a file name that does not exist (or an unknown option) raw: an OSC sequence set the
    terminal's title, a right-to-left override reordered the line. Usage errors exit 2 as before."""
    done = run_cli(*[a.format(c=hostile_case) for a in args])
    err = done.stderr.decode()
    assert done.returncode == 2 and _raw_controls(err) == [] and "Traceback" not in err, err
    assert "\\x1b]0;owned\\x07" in err and ("\\u202eevil\\u2067x" in err or "--x" in args[-1]), err  # click cuts --x… at =


def test_an_operation_summary_shows_a_hostile_statement_escaped(tmp_path):
    done = CliRunner().invoke(cli_main, ["init", str(tmp_path / "c"), "--case-id", "BUG-1"])
    assert done.exit_code == 0
    done = CliRunner().invoke(cli_main, ["revision", "open", str(tmp_path / "c"), "--hypothesis", HOSTILE])
    assert done.exit_code == 0 and _raw_controls(done.stdout) == [] and "\\x1b]0;owned\\x07" in done.stdout


@pytest.mark.parametrize("verb", ["verify", "export"])
def test_case_folder_names_are_shown_escaped_in_the_lines_of_several_cases(hostile_case, tmp_path, verb):
    """A folder named with a terminal escape, or with a line break followed by a line of its own
    making, prints as one escaped line per case: no raw control character, no forged "ok" line."""
    import shutil

    cases = tmp_path / "cases"
    cases.mkdir()
    forged = cases / "x: 7 events\nok bad"
    shutil.copytree(hostile_case, cases / "t\x1b]0;TITLE\x07x")
    shutil.copytree(hostile_case, forged)
    (forged / "manifest.json").write_bytes(b"not a manifest")
    done = CliRunner().invoke(cli_main, [verb, "--all", str(cases), "--jobs", "1"])
    failed = verb == "verify"  # export writes the manifest again
    assert done.exit_code == failed and _raw_controls(done.stdout) == [] and _raw_controls(done.stderr) == []
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and lines[-1].endswith(f"case(s): {2 - failed} ok, {int(failed)} failed")
    assert any(line.startswith(f"{'FAILED' if failed else 'ok'} {cases}/x: 7 events\\nok bad: ") for line in lines)
    assert any(line.startswith(f"ok {cases}/t\\x1b]0;TITLE\\x07x: ") for line in lines)


# --- standard output that is not UTF-8 ----------------------------------------------------------
LATIN1 = {"PYTHONIOENCODING": "latin-1"}
EMOJI = "caf\u00e9 \U0001f600 \u2603"


def _latin1_ok(*args: str, stdin: bytes | None = None) -> str:
    run = run_cli(*map(str, args), env=LATIN1, stdin=stdin)
    assert run.returncode == 0, run.stderr.decode("latin-1")
    assert b"Traceback" not in run.stderr and b"error:" not in run.stderr
    return run.stdout.decode("latin-1")


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_committed_write_reports_success_when_stdout_cannot_encode_its_result(tmp_path):
    case = tmp_path / "c"
    _latin1_ok("init", case, "--case-id", "BUG-1")
    shown = _latin1_ok("revision", "open", case, "--hypothesis", EMOJI, "--hypothesis", "plain")
    assert "caf\u00e9 \\ud83d\\ude00 \\u2603" in shown  # é is Latin-1; the rest is escaped
    journal = "\n".join(json.dumps(line) for line in [
        {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"},
        {"op": "reserve", "hypothesis": "H1", "action_id": "a1", "action": "source.read_context"},
        {"op": "fail", "hypothesis": "H1", "action_id": "a1", "reason": EMOJI}]) + "\n"
    applied = _latin1_ok("apply", case, "-", stdin=journal.encode("utf-8"))
    assert len(applied.splitlines()) == 4 and all(json.loads(line)["ok"] for line in applied.splitlines())
    with Case.open(case) as opened:
        assert opened.balances()[0]["statement"] == EMOJI and opened.actions()[0]["closing_reason"] == EMOJI


@pytest.mark.parametrize("args", [["balances", "{c}"], ["actions", "{c}"], ["events", "{c}", "--body"],
                                  ["state", "{c}"], ["sql", "{c}", "SELECT statement FROM balances"],
                                  ["actions", "{c}", "--csv"], ["actions", "{c}", "--tsv"], ["verify", "{c}"],
                                  ["budget", "remaining", "{c}", "H1"], ["export", "{c}"],
                                  ["revision", "open", "{c}", "--hypothesis", EMOJI]],
                         ids=lambda a: " ".join(a[:2]))
@pytest.mark.sampled(every=4)
def test_every_command_prints_what_latin1_cannot_carry_escaped(latin1_case, args):
    shown = _latin1_ok(*[a.format(c=latin1_case) for a in args])
    if args[0] in ("balances", "sql"):
        assert "\\ud83d\\ude00" in shown


@pytest.mark.parametrize("args", [["balances", "{c}", "--json"], ["actions", "{c}", "--nl"], ["state", "{c}", "--json"]])
def test_json_printed_to_a_latin1_stdout_is_still_json_with_the_same_text(latin1_case, args):
    shown = _latin1_ok(*[a.format(c=latin1_case) for a in args])
    values = [json.loads(line) for line in shown.splitlines()]
    if args[0] == "balances":
        assert values[0][0]["statement"] == EMOJI
    if args[0] == "actions":
        assert values[0]["closing_reason"] == EMOJI


@pytest.fixture
def latin1_case(tmp_path) -> Path:
    with Case.create(tmp_path / "c", "BUG-1", at=T0) as case:
        case.open_revision([{"statement": EMOJI}], 50, at=T0)
        case.transition("INVESTIGATING_HYPOTHESES", at=T0)
        budget = case.budget()
        budget.initialize(at=T0)
        budget.reserve("H1", "a1", "source.read_context", at=T0)
        budget.fail("H1", "a1", EMOJI, at=T0)
        case.transition("EVALUATING", at=T0)
    return tmp_path / "c"


@pytest.mark.parametrize("fmt", ["--table", "--csv", "--nl"])
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_reader_that_goes_away_ends_every_format_quietly_with_status_1(tmp_path, fmt):
    """``ledger events CASE | head -1``: whatever the format, the command stops with status 1 and
    says nothing (no false 'busy' warning from the read still open), as docs/errors.md says."""
    import subprocess
    import sys

    lines = [json.dumps({"op": "open_revision", "hypotheses": [{"statement": "h"}]}),
             json.dumps({"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}), json.dumps({"op": "initialize"})]
    for n in range(400):
        base = {"hypothesis": "H1", "action_id": f"a{n}"}
        lines += [json.dumps({"op": "reserve", **base, "action": "x.y"}),
                  json.dumps({"op": "record_result", **base, "evidence": {"n": n}}),
                  json.dumps({"op": "settle", **base, "semantic_score": 100, "reason": "r"})]
    journal = tmp_path / "j.jsonl"
    journal.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "a.toml").write_text("units_per_hypothesis = 100000\n", encoding="utf-8")
    done = run_cli("--analysis-config", str(tmp_path / "a.toml"), "apply", str(tmp_path / "c"), str(journal),
                   "--create", "PIPE-1", "--quiet")
    assert done.returncode == 0, done.stderr
    reader = subprocess.Popen([sys.executable, "-m", "ledger_cli", "events", str(tmp_path / "c"), fmt],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader.stdout.read(100)  # the first bytes, then the reader goes away (about 300 KB are left)
    reader.stdout.close()
    assert reader.wait(timeout=60) == 1
    assert reader.stderr.read() == b""


def test_table_columns_line_up_around_text_two_cells_wide(capsys):
    """Padding counted characters: a row holding 解決 (four terminal cells) was shifted by two."""
    from wcwidth import wcswidth

    from ledger_cli._output import emit_rows

    emit_rows([{"outcome": "解決", "runs": 2}, {"outcome": "resolved", "runs": 10}], None, "table")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    starts = {wcswidth(line[:line.rindex(" ") + 1]) for line in lines}  # where the last column begins
    assert len(starts) == 1, lines


def _on_a_terminal(args: list[str], term: str, terminal: str) -> tuple[bytes, bytes]:
    """``ledger ARGS`` with ``terminal`` ("stdout" or "stderr") a pseudo-terminal and the other a pipe:
    ``(what the pipe got, what the terminal got)``."""
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, terminal: follower}
    process = subprocess.Popen([sys.executable, "-m", "ledger_cli", *args], **streams,
                               env={**os.environ, "TERM": term, "COLUMNS": "80"})
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other end closed: the command ended
            break
        if not chunk:
            break
        shown += chunk
    piped = (process.stderr if terminal == "stdout" else process.stdout).read()
    process.wait(timeout=120)
    os.close(leader)
    return piped, shown


@pytest.mark.parametrize("term", ["xterm", "dumb"])
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_progress_bar_goes_to_a_terminal_stderr_alone_never_into_stdout(tmp_path, term):
    """`export --json` on a terminal printed its bar (and a hide-cursor escape) into stdout before the JSON;
    under TERM=dumb a bar was still drawn."""
    case = Case.create(tmp_path / "c", "BAR-1")
    case.close()
    results, terminal = _on_a_terminal(["export", str(tmp_path / "c"), "--json"], term, "stdout")
    assert json.loads(terminal.replace(b"\r\n", b"\n"))["manifest"]["head"]["seq"] == 1 and b"exporting" not in terminal
    results, terminal = _on_a_terminal(["export", str(tmp_path / "c"), "--json"], term, "stderr")
    assert json.loads(results)["manifest"]["head"]["seq"] == 1
    assert (b"exporting" in terminal) == (term != "dumb")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_note_of_an_export_waiting_for_another_starts_a_line_of_its_own_below_a_terminals_bar(tmp_path):
    """On a terminal the bar is drawn before the wait begins: the note was printed onto the bar's line."""
    import subprocess
    import sys

    case = Case.create(tmp_path / "c", "BAR-1")
    case.close()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\n"
        "handle = open(sys.argv[1], 'a+b'); fcntl.flock(handle.fileno(), fcntl.LOCK_EX)\n"
        "print('held', flush=True); time.sleep(1.5)"), str(tmp_path / "c" / "ledger.sqlite-export-lock")],
        stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        _, terminal = _on_a_terminal(["export", str(tmp_path / "c")], "xterm", "stderr")
    finally:
        holder.kill()
        holder.wait(timeout=30)
    text = terminal.replace(b"\r\n", b"\n").decode()
    assert "exporting" in text and "note: another export of" in text
    assert text[text.index("note: another export of") - 1] == "\n", text


def test_a_thread_that_stops_with_an_exception_says_so_in_one_line_not_a_traceback(monkeypatch, capsys):
    """A worker pool's own thread with no thread left for its queue printed Python's traceback; the
    command goes on (its work done in the calling process), and says so in one line."""
    import threading
    from ledger_cli._output import thread_failures_on_one_line

    monkeypatch.setattr(threading, "excepthook", threading.excepthook)  # put back after the test

    def fails(error: BaseException) -> None:
        raise error
    thread_failures_on_one_line()
    for error in (RuntimeError("can't start new thread"), ValueError("bad\nvalue"), SystemExit(3)):
        thread = threading.Thread(target=fails, args=(error,), name="pool-thread")
        thread.start()
        thread.join()
    assert capsys.readouterr().err == (
        "warning: the thread pool-thread stopped: RuntimeError: can't start new thread (this process may have no "
        "memory or thread left)\n"
        "warning: the thread pool-thread stopped: ValueError: bad\\nvalue\n")
