"""Tests of journals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import Case, LedgerError
from ledger.ground.errors import (INVALID_ARGUMENT)
from ledger_cli.main import main as cli_main
from conftest import make_package, run_cli, start_case
from ledger.package_tools.journal import apply_journal, is_read


def cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli_main, [str(a) for a in args], input=stdin)
    return done.exit_code, done.stdout, done.stderr


def _snapshot_journal(path: Path, snapshots: int) -> Path:
    lines = [{"op": "open_revision", "hypotheses": [{"statement": "a"}], "units_per_hypothesis": 40},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines + [{"op": "snapshot"}] * snapshots))
    return path


def test_the_summary_counts_reads_apart_from_writes_found_already_applied(tmp_path):
    journal = tmp_path / "j.jsonl"
    lines = [{"op": "open_revision", "hypotheses": [{"statement": "a"}], "units_per_hypothesis": 40},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"},
             {"op": "check", "hypothesis": "H1", "action": "source.find_text"}, {"op": "snapshot"},
             {"op": "reserve", "hypothesis": "H1", "action_id": "a1", "action": "source.find_text"}]
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines))
    command = [sys.executable, "-m", "ledger_cli", "apply", str(tmp_path / "c"), str(journal), "--create", "C"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=120)
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert first.returncode == again.returncode == 0
    assert first.stderr.splitlines()[-1].startswith("applied: 6 ok (0 reused, 2 read(s)), 0 failed")
    assert again.stderr.startswith("applied: 6 ok (4 reused, 2 read(s)), 0 failed")
    reads = [json.loads(line) for line in first.stdout.splitlines()][3:5]
    assert [line["reused"] for line in reads] == [True, True]  # a read's result line still says it wrote nothing


@pytest.mark.parametrize("line, read", [({"op": "check"}, True), ({"op": "snapshot"}, True),
                                        ({"op": "query", "store": False}, True), ({"op": "query"}, True),
                                        ({"op": "query", "store": True}, False), ({"op": "reserve"}, False),
                                        ({"op": "store_tool_results"}, False)])
def test_a_line_is_a_read_when_it_can_write_nothing(line, read):
    assert is_read(line) is read


# --- 8. apply streams the journal ------------------------------------------------------------
PEAK_RSS = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def peak_rss_kib(*args: str) -> int:
    """Peak resident set (KiB) of ``ledger ARGS`` run in its own process."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, sys.executable, "-m", "ledger_cli", *args],
                          capture_output=True, check=True, timeout=300)
    return int(done.stdout)


def write_journal(path: Path, first: str, filler: bytes, total_bytes: int) -> Path:
    with open(path, "wb") as out:
        out.write(first.encode("utf-8") + b"\n")
        chunk = filler * (1024 * 1024 // len(filler))
        for _ in range(total_bytes // len(chunk)):
            out.write(chunk)
    return path


# --- 11. JSON lines survive line readers -------------------------------------------------------
BREAKS = "a\u2028b\u2029c\x85d\x0be\x0cf\x1cg\x1dh\x1ei\rj\nk"


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
    assert f"applied: {ok} ok (0 reused, {ok - 3} read(s)), 0 failed" in err
    assert f"{ok} of them not printed (standard output failed; no further line was applied)" in err
    assert "error: OUTPUT_ERROR: cannot print the result" in err
    # what a line committed is said whether its result was printed or not: the policy initialize froze
    assert "note: line 3: initialize froze the built-in default policy" in err
    with Case.open(tmp_path / "c") as case:
        assert len(case.events()) == 4  # created, revision, transition, initialize: nothing past the batch


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
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
    assert "applied: 5003 ok (0 reused, 5000 read(s)), 0 failed" in err
    printed = 5003 - int(err.split("applied: 5003 ok (0 reused, 5000 read(s)), 0 failed, no time raised, ")[1].split(", ")[1].split()[0])
    assert 0 < printed < 5003


def test_a_journal_may_start_with_a_utf8_bom_like_an_evidence_file(tmp_path):
    journal = _snapshot_journal(tmp_path / "j.jsonl", 1)
    journal.write_bytes(b"\xef\xbb\xbf" + journal.read_bytes())
    code, out, err = cli("apply", tmp_path / "c", journal, "--create", "C")
    assert code == 0 and [json.loads(line)["ok"] for line in out.splitlines()] == [True] * 4
    from ledger import simulate
    from ledger.package_tools.journal import first_at as journal_first_at
    assert journal_first_at(['\ufeff{"at": "2026-01-02T00:00:00Z"}']) == "2026-01-02T00:00:00.000000Z"
    assert simulate(journal, jobs=1).errors == []


def test_a_bom_after_the_first_line_is_still_invalid_json(case):
    from ledger import apply_journal
    results = list(apply_journal(case, ['{"op": "snapshot"}', '\ufeff{"op": "snapshot"}'], keep_going=True))
    assert (results[1].error.code, results[1].error.message) == (  # it said "Expecting value: line 1 column 1"
        "INVALID_JSON", "not valid JSON: it begins with a byte-order mark (U+FEFF), which only a file's first line "
        "may carry (a file joined after another's end, say); remove it")


@pytest.mark.slow
def test_peak_memory_of_apply_does_not_grow_with_the_journal(tmp_path):
    make_package(tmp_path / "c")
    start_case(tmp_path / "c").close()
    failing = '{"op": "reserve", "hypothesis": "H9", "action_id": "x", "action": "source.find_text"}'
    line = b'{"op": "snapshot", "at": "2020-01-01T00:00:00Z"}\n'
    small = write_journal(tmp_path / "small.jsonl", failing, line, 0)
    large = write_journal(tmp_path / "large.jsonl", failing, line, 120 * 1024 * 1024)
    spaces = write_journal(tmp_path / "spaces.jsonl", '{"op": "initialize"}', b" " * 1023 + b"\n", 120 * 1024 * 1024)
    long_line = write_journal(tmp_path / "long.jsonl", failing, b"x" * 1024, 120 * 1024 * 1024)
    try:
        base = peak_rss_kib("apply", str(tmp_path / "c"), str(small))
        for journal in (large, spaces, long_line):  # first line fails; succeeds; one huge second line
            peak = peak_rss_kib("apply", str(tmp_path / "c"), str(journal))
            assert peak <= 1.5 * base, (journal.name, peak, base)
    finally:
        for journal in (large, spaces, long_line):  # pytest keeps recent tmp folders: free the disk
            journal.unlink()


def test_read_lines_streams_and_counts_an_over_long_line_once(monkeypatch):
    import io

    import ledger.package_tools.journal as journal_module

    monkeypatch.setattr(journal_module, "LINE_BYTES_MAX", 8)
    data = b'{"a":1}\n' + b"y" * 30 + b"\nlast"
    consumed: list[int] = []
    lines = list(journal_module.read_lines(io.BytesIO(data), on_bytes=consumed.append))
    assert lines == [b'{"a":1}', b"y" * 10, b"last"]
    assert sum(consumed) == len(data)


def test_a_line_at_the_limit_with_a_crlf_ending_is_within_it(monkeypatch):
    """The \r of a CRLF ending is no part of the line: a line of exactly the limit was refused as
    over-long with CRLF and accepted with LF."""
    import io

    import ledger.package_tools.journal as journal_module

    monkeypatch.setattr(journal_module, "LINE_BYTES_MAX", 8)
    data = b'{"a":12}\r\n{"a":12}\n{"a":123}\r\n{"a":1}\r\n'
    lines = list(journal_module.read_lines(io.BytesIO(data)))
    assert lines == [b'{"a":12}', b'{"a":12}', b'{"a":123}\r', b'{"a":1}']  # the third read to 2 bytes past
    assert [len(line) > 8 for line in lines] == [False, False, True, False]  # parse_line refuses the third


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_long_first_line_fails_alone_and_stops_the_run(package, tmp_path):
    start_case(package).close()
    journal = tmp_path / "j.jsonl"
    journal.write_bytes(b"x" * (5 * 1024 * 1024) + b"\n" + b'{"op": "initialize"}\n')
    done = run_cli("apply", str(package), str(journal))
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    assert [(x["line"], x["ok"]) for x in lines] == [(1, False)]
    assert lines[0]["error"]["code"] == "LIMIT_REACHED"
    done = run_cli("apply", str(package), str(journal), "--keep-going")
    assert [(x["line"], x["ok"]) for x in map(json.loads, done.stdout.splitlines())] == [(1, False), (2, True)]


@pytest.mark.parametrize("line, shown", [
    ({"op": "transition", "to": None}, "unknown case state null;"),
    ({"op": "transition", "to": {"a": 1}}, "unknown case state an object;"),
    ({"op": "transition", "to": "LOST"}, "unknown case state 'LOST';"),
    ({"op": "establish", "scope": True, "limits": {"units": 5}, "issuer": "lead"}, "got true"),
    ({"op": "request_test", "hypothesis": "H1", "action_id": "t1", "operation_id": "op-t1", "kind": False},
     "got false"),
    ({"op": "record_outcome", "outcome": {"a": None}, "source": "x"}, "got an object"),
    ({"op": "record_outcome", "outcome": "resolved", "source": True}, "got true"),
])
@pytest.mark.sampled(every=4)
def test_a_refused_value_of_a_journal_is_shown_as_json_never_as_python(package, tmp_path, line, shown):
    start_case(package).close()
    journal = tmp_path / "j.jsonl"
    journal.write_text(json.dumps(line) + "\n", encoding="utf-8")
    done = run_cli("apply", str(package), str(journal))
    (result,) = map(json.loads, done.stdout.splitlines())
    assert shown in result["error"]["message"], result
    assert "None" not in result["error"]["message"] and "True" not in result["error"]["message"]


@pytest.mark.parametrize("create", [True, False])
@pytest.mark.parametrize("batch_size", ["1", "100"])
def test_an_endless_first_line_fails_without_being_read_to_its_end(package, tmp_path, create, batch_size):
    """/dev/zero has no line end: the line is refused at 4 MiB and nothing more is read, whether the
    case is made by the journal (then it is not: the line starts no JSON object) or exists, whatever
    the batch."""
    if not create:
        start_case(package).close()
    target = str(tmp_path / "z") if create else str(package)
    done = run_cli("apply", target, "/dev/zero", "--batch-size", batch_size, *(["--create", "Z"] if create else []))
    assert done.returncode == 1
    if create:
        assert done.stdout == b"" and b"error: LIMIT_REACHED: line 1 is no journal line, so no case was created" \
            in done.stderr and not (tmp_path / "z").exists()
        return
    (line,) = map(json.loads, done.stdout.splitlines())
    assert (line["line"], line["ok"], line["error"]["code"]) == (1, False, "LIMIT_REACHED")


def test_an_over_long_first_line_of_a_journal_that_creates_its_case_is_one_line(tmp_path):
    journal = tmp_path / "j.jsonl"
    journal.write_bytes(b'{"op": "snapshot", "x": "' + b"x" * (5 * 1024 * 1024) + b'"}\n'
                        + b'{"op": "open_revision", "hypotheses": [{"statement": "a"}]}\n')
    done = run_cli("apply", str(tmp_path / "c"), str(journal), "--create", "C", "--keep-going")
    assert [(x["line"], x["ok"]) for x in map(json.loads, done.stdout.splitlines())] == [(1, False), (2, True)]


def test_apply_result_lines_split_into_one_line_each(package, tmp_path):
    Case.create(package, "C1").close()
    journal = tmp_path / "j.jsonl"
    rows = [{"op": "open_revision", "hypotheses": [{"statement": BREAKS}, {"statement": "x\u2029"}]},
            {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"},
            {"op": "reserve", "hypothesis": "H1", "action_id": "bad\u2028id", "action": "source.find_text"}]
    journal.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    done = run_cli("apply", str(package), str(journal), "--keep-going")
    text = done.stdout.decode("utf-8")
    lines = text.splitlines()
    assert len(lines) == 3
    parsed = [json.loads(line) for line in lines]
    assert [h["statement"] for h in parsed[0]["result"]["hypotheses"]] == [BREAKS, "x\u2029"]
    assert parsed[2]["error"]["code"] == "INVALID_ID"
    for raw in ("\u2028", "\u2029", "\x85"):
        assert raw not in text


@pytest.mark.parametrize("line", [
    {"op": "transition", "to": "BLOCKED", "at": None},
    {"op": "open_revision", "hypotheses": [{"statement": "s"}], "units_per_hypothesis": None},
    {"op": "record_result", "hypothesis": "H1", "action_id": "a", "evidence": 1, "source_refs": None},
    {"op": "initialize", "at": "２０２６-01-01T00:00:00Z"},
    5,
])
def test_null_optional_keys_and_unicode_digits_are_invalid_arguments(case, line):
    text = line if isinstance(line, int) else json.dumps(line, ensure_ascii=False)
    [result] = list(apply_journal(case, [text]))
    assert not result.ok and result.error.code == INVALID_ARGUMENT


def test_journal_line_shape_checks_name_missing_unexpected_and_null_keys():
    """A journal line's shape: missing and unexpected keys are named (sorted); an optional key or
    ``at`` may be left out but not null; a null required key is left to the operation's own check."""
    from ledger.package_tools.journal import parse_line

    def refusal(text: str) -> tuple[str, str]:
        with pytest.raises(LedgerError) as caught:
            parse_line(text)
        return caught.value.code, caught.value.message

    assert refusal('{"op": "settle", "hypothesis": "H1"}') == (
        "INVALID_ARGUMENT", "settle: missing key(s) action_id, reason, semantic_score")
    assert refusal('{"op": "fail", "hypothesis": "H1", "action_id": "a", "reason": "r", "zz": 1, "b": 2}') == (
        "INVALID_ARGUMENT", "fail: unexpected key(s) b, zz")
    assert refusal('{"op": "fail", "hypothesis": "H1", "action_id": "a", "reason": "r", "at": null}') == (
        "INVALID_ARGUMENT", "fail: at may be left out but not null")
    assert refusal('{"op": "record_result", "hypothesis": "H1", "action_id": "a", "evidence": 1, '
                   '"source_refs": null, "at": null}') == (
        "INVALID_ARGUMENT", "record_result: at, source_refs may be left out but not null")
    line = parse_line('{"op": "fail", "hypothesis": null, "action_id": "a", "reason": "r"}')
    assert line["hypothesis"] is None  # the operation refuses it: INVALID_ID


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("signal_name, status", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_apply_stopped_by_a_signal_counts_every_line_it_committed(tmp_path, signal_name, status):
    """A signal while apply prints a committed batch (here: its output pipe full, unread) ends it as
    Ctrl-C does; the summary still counts every committed line, printed or not, so a re-run finds
    exactly that many applied (the batch's lines not yet printed were left out of the count)."""
    import re
    import signal
    import time

    lines = [{"op": "open_revision", "hypotheses": [{"statement": "h"}], "units_per_hypothesis": 100000},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}]
    for n in range(1500):
        lines += [{"op": "reserve", "hypothesis": "H1", "action_id": f"a{n}", "action": "source.read_context"},
                  {"op": "record_result", "hypothesis": "H1", "action_id": f"a{n}", "evidence": {"n": n}},
                  {"op": "settle", "hypothesis": "H1", "action_id": f"a{n}", "semantic_score": 80, "reason": "r"}]
    journal = tmp_path / "j.jsonl"
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines))
    command = [sys.executable, "-m", "ledger_cli", "apply", str(tmp_path / "c"), str(journal), "--batch-size", "500"]
    process = subprocess.Popen([*command, "--create", "C"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # the pipe (64 KiB: some 400 result lines) is full: apply waits, printing a batch
    process.send_signal(getattr(signal, signal_name))
    _, err = process.communicate(timeout=120)
    assert process.returncode == status, err
    first = re.search(r"applied: (\d+) ok \((\d+) reused\), (\d+) failed", err)
    assert first is not None and first.group(3) == "0", err
    assert 0 < int(first.group(1)) < len(lines)
    assert "not printed (interrupted; no further line was applied)" in err
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    second = re.search(r"applied: (\d+) ok \((\d+) reused\), (\d+) failed", again.stderr)
    assert again.returncode == 0 and second is not None, again.stderr
    assert (int(second.group(1)), int(second.group(2))) == (len(lines), int(first.group(1)))


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("options", [[], ["--batch-size", "5000"], ["--batch-size", "5000", "--keep-going"]],
                         ids=["batches", "one-batch", "one-batch-keep-going"])
def test_apply_stopped_by_an_error_of_no_lines_own_says_after_which_line_it_stopped(tmp_path, options):
    """The disk full (here: a file size limit) while apply commits a batch: the summary said "0 failed"
    and nothing of where it stopped, above an error saying "nothing was written"; it names the last line
    applied, and a re-run finds exactly those lines applied. In a batch so large that SQLite writes to
    the log before its end, the disk full rolls the whole transaction back: that was a failed line, the
    batch going on outside any transaction, then "INTEGRITY_ERROR: cannot commit - no transaction is
    active"; it ends the batch, which is not written, with the error of the disk."""
    import re
    import resource

    lines = [{"op": "open_revision", "hypotheses": [{"statement": "h"}], "units_per_hypothesis": 100000},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}]
    for n in range(1000):
        lines += [{"op": "reserve", "hypothesis": "H1", "action_id": f"a{n}", "action": "source.read_context"},
                  {"op": "record_result", "hypothesis": "H1", "action_id": f"a{n}", "evidence": {"n": n}},
                  {"op": "settle", "hypothesis": "H1", "action_id": f"a{n}", "semantic_score": 80, "reason": "r"}]
    journal = tmp_path / "j.jsonl"
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines))
    command = [sys.executable, "-m", "ledger_cli", "apply", "-q", *options, str(tmp_path / "c"), str(journal)]
    limited = subprocess.run([*command, "--create", "C"], capture_output=True, text=True, timeout=300,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (2_000_000, 2_000_000)))
    assert limited.returncode == 1, limited.stderr
    summary, error = limited.stderr.splitlines()[:2]
    if options:  # the one batch is not written
        assert re.fullmatch(r"applied: 0 ok \(0 reused\), 0 failed, no time raised, [0-9.]+ s; stopped before its "
                            r"first line by the error below: no line was applied \(run the command again to go on: "
                            r"the lines applied answer reused\)", summary), summary
        assert error.startswith("error: STORAGE_ERROR: the file system refused the ledger: ")
        assert error.endswith("; SQLite rolled back the whole batch: none of its operations was written, the ones "
                              "before this one included"), error
        applied = 0
    else:
        found = re.fullmatch(r"applied: (\d+) ok \(0 reused\), 0 failed, no time raised, [0-9.]+ s; stopped after "
                             r"line (\d+) by the error below: no line after it was applied \(run the command again "
                             r"to go on: the lines applied answer reused\)", summary)
        assert found is not None and found.group(1) == found.group(2) and 0 < int(found.group(1)) < len(lines), summary
        assert error.startswith("error: STORAGE_ERROR: the file system refused the ledger: ")
        applied = int(found.group(1))
    from ledger import verify_case

    verify_case(tmp_path / "c")  # what was written is whole: the lines before the stop, or the case alone
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    second = re.search(r"applied: (\d+) ok \((\d+) reused\), 0 failed", again.stderr)
    assert again.returncode == 0 and second is not None, again.stderr
    assert (int(second.group(1)), int(second.group(2))) == (len(lines), applied)


def _interrupted_while_a_long_line_is_printed(tmp_path: Path, drained_after_s: float) -> tuple[bytes, str, int]:
    """``ledger apply`` of result lines longer than a pipe takes at once (some 31 KB each) into a pipe
    read only 40,000 bytes, then SIGTERM while it waits with a line begun, and the rest read
    ``drained_after_s`` later: (its output, its stderr, its status)."""
    import signal
    import time

    line = json.dumps({"op": "open_revision", "units_per_hypothesis": 100, "at": "2026-01-01T00:00:00Z",
                       "hypotheses": [{"statement": f"s{n} " + "x" * 3900} for n in range(8)]})
    journal = tmp_path / "long.jsonl"
    journal.write_text((line + "\n") * 300)
    process = subprocess.Popen([sys.executable, "-m", "ledger_cli", "apply", str(tmp_path / "c"), str(journal),
                                "--create", "C", "--batch-size", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = process.stdout.read(40_000)
    time.sleep(2)  # the pipe is full again: apply waits in the middle of a line
    process.send_signal(signal.SIGTERM)
    time.sleep(drained_after_s)
    out += process.stdout.read()
    return out, process.stderr.read().decode(), process.wait(timeout=60)


def _printed_and_counted(out: bytes, err: str) -> tuple[list[bytes], int, int]:
    import re

    *whole, last = out.split(b"\n")
    for printed in whole:
        json.loads(printed)
    counts = re.search(r"applied: (\d+) ok [^\n]*?(?:, (\d+) of them not printed \(interrupted|\n)", err)
    assert counts is not None, err
    return whole, int(counts.group(1)), int(counts.group(2) or 0)


@pytest.mark.slow  # some 4 s: the slow lane (.ci/run) runs it
def test_an_interrupt_while_a_result_line_is_printed_lets_a_reader_still_reading_have_it_whole(tmp_path):
    """Ctrl-C or SIGTERM while a slow reader's full pipe holds up a result line begun: the rest of the
    line is still written while the reader takes it (it was cut where the pipe was full, 4,096 bytes
    in, while the summary said nothing was half-written), and the count of lines not printed is exact."""
    out, err, status = _interrupted_while_a_long_line_is_printed(tmp_path, 0.3)
    whole, ok, unprinted = _printed_and_counted(out + b"x", err)
    assert status == 143 and out.endswith(b"\n"), err
    assert len(whole) == ok - unprinted and unprinted == 0 and "cut short" not in err


@pytest.mark.slow  # some 6 s: the slow lane (.ci/run) runs it
def test_a_result_line_left_cut_short_by_an_interrupt_is_named_in_the_summary(tmp_path):
    """A reader that takes nothing more for two seconds after the interrupt leaves the line begun cut
    short: the summary names that line and counts it as not printed."""
    out, err, status = _interrupted_while_a_long_line_is_printed(tmp_path, 3.5)
    whole, ok, unprinted = _printed_and_counted(out, err)
    assert status == 143 and not out.endswith(b"\n") and len(out.rsplit(b"\n", 1)[1]) > 0, err
    assert len(whole) == ok - unprinted and unprinted == 1
    assert f"the result of line {ok} was cut short: a last line that does not parse is that one" in err


@pytest.mark.slow  # some 3 s: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("hypotheses, statement_chars", [(4, 100), (8, 3900)])  # lines of 1 KB and 32 KB
def test_apply_printing_to_a_terminal_nobody_reads_still_stops_at_an_interrupt(tmp_path, hypotheses, statement_chars):
    """A terminal paused (Ctrl-S) takes no more output, though select calls a write possible: a result
    line written there with the interrupt held blocked Ctrl-C and SIGTERM until the terminal was read.
    Printing to a terminal is as before: the interrupt ends the command at once."""
    import os
    import pty
    import signal
    import time

    line = json.dumps({"op": "open_revision", "units_per_hypothesis": 100,
                       "hypotheses": [{"statement": f"s{n} " + "x" * statement_chars} for n in range(hypotheses)]})
    journal = tmp_path / "j.jsonl"
    journal.write_text((line + "\n") * 2000)
    leader, follower = pty.openpty()  # the leader is never read: the terminal fills up
    process = None
    try:
        process = subprocess.Popen([sys.executable, "-m", "ledger_cli", "apply", str(tmp_path / "c"), str(journal),
                                    "--create", "C", "--batch-size", "1"], stdout=follower, stderr=subprocess.PIPE)
        time.sleep(2)
        process.send_signal(signal.SIGINT)
        status = process.wait(timeout=10)  # it waited until the terminal was read
        err = process.stderr.read().decode()
        assert status == 130 and "interrupted" in err, (status, err[-600:])
    finally:
        if process is not None and process.poll() is None:  # still waiting on the terminal: the test ends it
            process.kill()
            process.wait()
        os.close(leader)
        os.close(follower)


def test_output_that_fails_part_way_through_a_result_line_is_named_in_the_summary(tmp_path):
    """Standard output failing in the middle of a line (a file that may grow no further, as on a full
    disk) leaves that line cut short: the summary names it and counts it as not printed (the file
    ended in half a line and nothing said so)."""
    import re
    import resource
    import signal

    def small_files() -> None:  # in the child: a file grows past 1 MB no further (EFBIG) rather than kill it
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))

    line = json.dumps({"op": "open_revision", "units_per_hypothesis": 100,  # results of some 32 KB each,
                       "hypotheses": [{"statement": f"s{n} " + "x" * 3900} for n in range(8)]})  # the ledger small
    journal = tmp_path / "j.jsonl"
    journal.write_text((line + "\n") * 60)
    out = tmp_path / "out.jsonl"
    with out.open("wb") as stdout:
        done = subprocess.run([sys.executable, "-m", "ledger_cli", "apply", str(tmp_path / "c"), str(journal),
                               "--create", "C", "--keep-going"], stdout=stdout, stderr=subprocess.PIPE,
                              preexec_fn=small_files, timeout=120)
    err = done.stderr.decode()
    *whole, last = out.read_bytes().split(b"\n")
    for line in whole:
        json.loads(line)
    counts = re.search(r"applied: (\d+) ok .*?, (\d+) failed.*?, (\d+) of them not printed", err)
    assert done.returncode == 1 and counts is not None and last, err
    assert len(whole) == int(counts.group(1)) + int(counts.group(2)) - int(counts.group(3))
    assert f"the result of line {len(whole) + 1} was cut short: a last line that does not parse is that one" in err


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_result_lines_in_an_encoding_with_a_byte_order_mark_carry_one_mark_in_all(tmp_path, encoding):
    """An output encoding that starts with a byte-order mark (PYTHONIOENCODING=utf-8-sig) starts the
    output with one, not every result line (each line was encoded on its own: only the first parsed)."""
    journal = tmp_path / "j.jsonl"
    journal.write_text("".join(json.dumps({"op": "reserve", "hypothesis": "H1", "action_id": f"a{n}",
                                           "action": "source.read_context"}) + "\n" for n in range(3)))
    done = subprocess.run([sys.executable, "-m", "ledger_cli", "apply", str(tmp_path / "c"), str(journal),
                           "--create", "C", "--keep-going"], capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONIOENCODING": encoding})
    text = done.stdout.decode(encoding)  # the one mark read as the encoding's, any other kept as U+FEFF
    assert "\ufeff" not in text and len([json.loads(line) for line in text.splitlines()]) == 3


@pytest.mark.parametrize("given", ["ledger.sqlite", "ledger.sqlite-wal", "a hard link"])
def test_a_journal_that_is_the_cases_own_ledger_file_is_refused_before_a_line_is_read(tmp_path, given):
    """The case's own ledger.sqlite (or a file beside it, or a hard link to it) given as the journal is
    no journal: refused naming it, nothing read (every line was an INVALID_JSON of the ledger's bytes)."""
    case = start_case(make_package(tmp_path / "c"))
    case.budget().initialize()  # the -wal holds writes while the case is open
    journal = case.path / given if given != "a hard link" else tmp_path / "journal.jsonl"
    if given == "a hard link":
        os.link(case.path / "ledger.sqlite", journal)
    before = case.query("SELECT COUNT(*) AS n FROM events")[0]["n"]
    done = CliRunner().invoke(cli_main, ["apply", str(case.path), str(journal), "--keep-going"])
    named = "ledger.sqlite-wal" if given == "ledger.sqlite-wal" else "ledger.sqlite"
    assert done.exit_code == 1 and done.stderr == (f"error: INVALID_ARGUMENT: {journal} is the case's own {named}, "
                                                   "which only SQLite reads, not a JSON-Lines journal\n"), done.output
    assert done.stdout == "" and case.query("SELECT COUNT(*) AS n FROM events")[0]["n"] == before
    case.close()


@pytest.mark.parametrize("batch_size", [1, 3])
def test_apply_journal_inside_the_callers_batch_runs_its_lines_there(tmp_path, batch_size):
    """A batch of apply's own inside the caller's was a batch inside a batch (refused now, and an
    INTEGRITY_ERROR before): the lines run in the caller's batch and commit or roll back with it."""
    case = start_case(make_package(tmp_path / "c"))
    budget = case.budget()
    budget.initialize()
    before = case.status()["package_generation"]
    lines = [json.dumps({"op": "reserve", "hypothesis": "H1", "action_id": "a0", "action": "source.read_context"}),
             json.dumps({"op": "fail", "hypothesis": "H1", "action_id": "a0", "reason": "r"})]
    with pytest.raises(RuntimeError):
        with case.batch():
            assert [r.ok for r in apply_journal(case, lines, batch_size=batch_size)] == [True, True]
            raise RuntimeError("the caller's batch rolls back")
    assert case.status()["package_generation"] == before and budget.action_status("H1", "a0") is None
    with case.batch():
        assert [r.seq for r in apply_journal(case, lines, batch_size=batch_size)] == [before + 1, before + 2]
    assert budget.action_status("H1", "a0") == "failed"
    case.close()


@pytest.mark.parametrize("batch_size", [3, 1])
def test_an_interrupt_while_a_batch_commits_comes_after_its_results_and_every_committed_line_is_counted(
        tmp_path, batch_size):
    """Ctrl-C between a batch's commit and its count (on_commit) left lines committed and never
    counted: apply's summary said 900 where the case held 1000. The interrupt that comes while a
    batch commits is raised once the batch's results are handed over; with a batch size of 1 too,
    whose line committed inside its own operation, its result then lost (helper 211 saw it in 4 of
    8 Ctrl-Cs of `ledger apply --batch-size 1`)."""
    import os
    import signal

    case = start_case(make_package(tmp_path / "c"))
    case.budget().initialize()
    lines = [json.dumps(line) for line in (
        {"op": "reserve", "hypothesis": "H1", "action_id": "a0", "action": "source.read_context"},
        {"op": "fail", "hypothesis": "H1", "action_id": "a0", "reason": "r"},
        {"op": "reserve", "hypothesis": "H1", "action_id": "a1", "action": "source.read_context"},
        {"op": "fail", "hypothesis": "H1", "action_id": "a1", "reason": "r"})]
    before = case.status()["package_generation"]
    commits, results = [], []
    case.storage.fault_hook = lambda label: label == "COMMIT" and os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        for result in apply_journal(case, lines, batch_size=batch_size, on_commit=commits.append):
            results.append(result)
    case.storage.fault_hook = None
    assert commits == [batch_size] and [r.seq for r in results] == list(range(before + 1, before + batch_size + 1))
    assert case.status()["package_generation"] == before + batch_size  # the first batch committed, nothing after
    case.close()


@pytest.mark.parametrize("start, created", [(b"\0", False), (b"x", False), (b" \t{", True), (b"\xef\xbb\xbf{", True)])
def test_apply_create_of_an_over_long_first_line_creates_a_case_only_if_it_starts_a_json_object(
        tmp_path, start, created):
    """A first line over the line limit may be a journal's (a large evidence record), so it created the
    case and failed as its own line; /dev/zero or a binary file with no line break did so too."""
    from ledger.package_tools.journal import LINE_BYTES_MAX

    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(start + b"\0" * (LINE_BYTES_MAX + 10) + b"\n")
    done = CliRunner().invoke(cli_main, ["apply", str(tmp_path / "case"), str(journal), "--create", "C1"])
    assert done.exit_code == 1 and "LIMIT_REACHED" in done.output, done.output
    assert (tmp_path / "case" / "ledger.sqlite").exists() is created
    if not created:
        assert done.stderr.startswith("error: LIMIT_REACHED: line 1 is no journal line, so no case was created: "
                                      "journal line longer than 4194304 bytes"), done.stderr
        assert "and it does not start a JSON object" in done.stderr


@pytest.mark.parametrize("first, code", [
    (b"\x1f\x8b\x08\x00gzip", "INVALID_JSON"), (b'{"trajectory": []}', "INVALID_ARGUMENT"),
    (b'{"op": "bogus"}', "UNKNOWN_OPERATION"), (b"\n\n[1, 2]", "INVALID_ARGUMENT")])
@pytest.mark.parametrize("keep_going", [False, True])
def test_apply_create_of_a_file_whose_first_line_is_no_journal_line_creates_no_case(tmp_path, first, code,
                                                                                     keep_going):
    """A case made for a file that is no journal stayed behind, stamped with the time of the mistake:
    a later journal's earlier times were then all raised to it."""
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(first + b'\n{"op": "open_revision", "hypotheses": [{"statement": "a"}], '
                        b'"units_per_hypothesis": 5}\n')
    done = CliRunner().invoke(cli_main, ["apply", str(tmp_path / "case"), str(journal), "--create", "C1",
                                         *(["--keep-going"] if keep_going else [])])
    line = first.count(b"\n") + 1
    assert done.exit_code == 1 and done.stderr.startswith(
        f"error: {code}: line {line} is no journal line, so no case was created: "), done.stderr
    assert not (tmp_path / "case").exists() and done.stdout == ""


@pytest.mark.parametrize("content, what", [(b"", "it is empty"), (b"\n  \n\t\n", "its 3 line(s) are all blank"),
                                           (b"\xef\xbb\xbf\n", "its 1 line(s) are all blank")])
@pytest.mark.parametrize("stdin", [False, True])
def test_apply_create_of_a_journal_with_no_line_creates_no_case(tmp_path, content, what, stdin):
    """An empty or all-blank journal made a case stamped with the wall clock, and the real journal
    run next had every earlier time raised to it. With the case there, such a journal applies nothing."""
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(content)
    args = ["apply", str(tmp_path / "case"), "-" if stdin else str(journal), "--create", "C1"]
    done = CliRunner().invoke(cli_main, args, input=content if stdin else None)
    named = "" if stdin else f" {journal}"
    assert (done.exit_code, done.stdout) == (1, "")
    assert done.stderr == (f"error: INVALID_ARGUMENT: the journal{named} has no line to apply ({what}), "
                           "so no case was created\n")
    assert not (tmp_path / "case").exists()
    Case.create(tmp_path / "case", "C1").close()
    again = CliRunner().invoke(cli_main, args, input=content if stdin else None)
    assert again.exit_code == 0 and again.stdout == "", again.output


def test_apply_create_of_a_journal_starting_with_blank_lines_creates_its_case_at_its_first_time(tmp_path):
    journal = tmp_path / "journal.jsonl"
    journal.write_text('\n  \n{"op": "open_revision", "hypotheses": [{"statement": "a"}], '
                       '"units_per_hypothesis": 5, "at": "2026-05-01T00:00:00Z"}\n')
    done = CliRunner().invoke(cli_main, ["apply", str(tmp_path / "case"), str(journal), "--create", "C1"])
    assert done.exit_code == 0, done.output
    with Case.open(tmp_path / "case") as case:
        assert [e["created_at"] for e in case.events()] == ["2026-05-01T00:00:00.000000Z"] * 2


def test_a_reads_seq_is_the_event_its_answer_stands_on(tmp_path):
    """docs/journals.md: a snapshot's seq is the revision's newest budget event (its state is the accounts
    after it), which a later outcome leaves behind the head; the other reads give the case's newest event."""
    journal = tmp_path / "j.jsonl"
    journal.write_text("\n".join(json.dumps(line) for line in [
        {"op": "open_revision", "hypotheses": [{"statement": "a"}], "units_per_hypothesis": 100},
        {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"},
        {"op": "record_outcome", "outcome": "resolved", "source": "x"}, {"op": "snapshot"},
        {"op": "check", "hypothesis": "H1", "action": "source.read_context"},
        {"op": "remaining", "hypothesis": "H1"},
        {"op": "price_signal", "hypothesis": "H1", "action": "source.read_context"}]) + "\n")
    code, out, _ = cli("apply", tmp_path / "c", journal, "--create", "C")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [(line["seq"], line["reused"]) for line in lines] == [
        (2, False), (3, False), (4, False), (5, False), (4, True), (5, True), (5, True), (5, True)]
    assert lines[4]["result"]["seq"] == 4


def test_a_ctrl_c_while_apply_closes_the_case_still_prints_the_summary(tmp_path, monkeypatch):
    """A second Ctrl-C landing in the case's last checkpoint, as apply closes it after the first, lost
    the summary: 1,276 committed lines and no 'applied:' line (helper 215, 13 of 13 tries 0-3 ms apart)."""
    journal = tmp_path / "j.jsonl"
    journal.write_text('{"op": "open_revision", "hypotheses": [{"statement": "a"}]}\n'
                       '{"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}\n')
    real_close = Case.close

    def interrupted_close(self):
        real_close(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(Case, "close", interrupted_close)
    done = CliRunner().invoke(cli_main, ["apply", str(tmp_path / "c"), str(journal), "--create", "C1", "-q"])
    assert done.exit_code != 0
    assert "applied: 2 ok (0 reused), 0 failed" in done.stderr, done.stderr
