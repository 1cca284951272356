"""``ledger runs import``: which inputs it reads and how (docs/runs.md, "Formats"): the Responses API
mode of mini-swe-agent, a run's ending submission, tool calls of any shape, names, damaged or
odd files. Each file that cannot be read is named with its reason and the others are imported."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from click.testing import CliRunner

from ledger import Case, LedgerError, import_runs, simulate
from ledger.package_tools.atomic_files import process_tag
from ledger.runs.formats import OTHER_AGENTS
from ledger_cli.main import main

from conftest import read_only_mount
from test_runs import evidence_of, facts, journal

GOOD = {"messages": [{"role": "system", "content": "s"},
                     {"role": "assistant", "content": "```bash\nls src\n```"},
                     {"role": "user", "content": "<returncode>0</returncode>\na.py"}]}


def _write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _response(calls, text=None):
    """A Responses API model turn as mini-swe-agent stores it (the response object, dumped)."""
    output = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}] \
        if text else []
    output += [{"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(arguments)}
               for call_id, name, arguments in calls]
    return {"id": "resp_1", "object": "response", "status": "completed", "output": output, "extra": {"cost": 0.1}}


def _output(call_id, text, code):
    return {"type": "function_call_output", "call_id": call_id,
            "output": f"<returncode>{code}</returncode>\n<output>\n{text}\n</output>",
            "extra": {"raw_output": text, "returncode": code}}


def test_a_responses_api_trajectory_makes_a_step_of_each_answered_bash_function_call(tmp_path):
    exit_message = {"role": "exit", "content": "diff --git a/src/a.py", "extra": {"exit_status": "Submitted"}}
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "fix it"},
                _response([("c1", "bash", {"command": "ls src"})], "Let me look"), _output("c1", "a.py\nb.py", 0),
                _response([("c2", "bash", {"command": "cat src/a.py"}),
                           ("c3", "str_replace_editor", {"command": "view"})]), _output("c2", "x = 1", 0),
                _output("c3", "viewed", 0),
                _response([]),  # a response without a tool call
                {"role": "user", "content": [{"type": "input_text", "text": "format error"}]},
                _response([("c4", "bash", {"command": "python -m pytest"})]), _output("c4", "1 failed", 1),
                _response([("c5", "bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})]), exit_message]
    source = _write(tmp_path / "r.traj.json", {"messages": messages, "trajectory_format": "mini-swe-agent-1.1",
                                               "instance_id": "resp-1"})
    summary = import_runs([source], tmp_path / "out")
    assert (summary.runs, summary.steps) == (1, 4)
    assert summary.skipped == {"tool call that is not a bash command": 1, "no bash block": 1}
    lines = journal(tmp_path / "out" / "resp-1.jsonl")
    evidence = evidence_of(lines)
    outputs = [m["output"] for m in messages if isinstance(m, dict) and m.get("type") == "function_call_output"]
    assert [{k: e[k] for k in ("observation_sha256", "observation_bytes", "atoms")} for e in evidence] == \
        [facts(outputs[0]), facts(outputs[1]), facts(outputs[3]), facts(exit_message["content"])]
    assert [e.get("exit_code") for e in evidence] == [0, 0, 1, None]
    assert [e.get("target") for e in evidence] == ["src", "src/a.py", None, None]


def test_the_submission_that_ends_a_run_is_the_last_steps_observation_in_text_and_tool_call_mode(tmp_path):
    """The final command (mini-swe-agent's submit) is answered by the ``exit`` message, not a tool message."""
    exit_message = {"role": "exit", "content": "the patch", "extra": {"exit_status": "Submitted"}}
    text_mode = [{"role": "system", "content": "s"},
                 {"role": "assistant", "content": "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
                 exit_message]
    call = {"id": "c9", "type": "function", "function": {
        "name": "bash", "arguments": json.dumps({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})}}
    tool_mode = [{"role": "system", "content": "s"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                 exit_message]
    two_calls = [{"role": "system", "content": "s"},
                 {"role": "assistant", "content": None, "tool_calls": [call, {**call, "id": "c10"}]}, exit_message]
    for name, messages in (("text", text_mode), ("tool", tool_mode), ("two", two_calls)):
        _write(tmp_path / "in" / f"{name}.traj.json", {"messages": messages})
    summary = import_runs([tmp_path / "in"], tmp_path / "out")
    assert summary.steps == 2 and summary.skipped == {"tool call without a result": 2}  # whose answer is it?
    for name in ("text", "tool"):
        (evidence,) = evidence_of(journal(tmp_path / "out" / f"{name}.jsonl"))
        assert evidence["observation_sha256"] == facts("the patch")["observation_sha256"]


@pytest.mark.parametrize("calls", [1, 1.5, True, "abc", {"id": "c1"}, [1, "x", None]])
def test_tool_calls_of_any_other_shape_are_turns_skipped_never_a_crash(tmp_path, calls):
    messages = [{"role": "assistant", "content": "", "tool_calls": calls},
                {"role": "tool", "tool_call_id": "c1", "content": "o"}]
    _write(tmp_path / "in" / "m.traj.json", {"messages": messages})
    _write(tmp_path / "in" / "z.traj.json", GOOD)
    summary = import_runs([tmp_path / "in"], tmp_path / "out")
    assert (summary.runs, summary.steps, summary.errors) == (2, 1, [])
    assert summary.skipped == {"tool call that is not a bash command": len(calls) if isinstance(calls, list) else 1}


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_tool_call_that_is_not_bash_is_never_a_step_under_python_optimizations(tmp_path):
    call = {"id": "1", "function": {"name": "str_replace_editor", "arguments": json.dumps({"command": "view"})}}
    source = _write(tmp_path / "e.traj.json", {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]},
                                                            {"role": "tool", "tool_call_id": "1", "content": "f"}]})
    done = subprocess.run([sys.executable, "-O", "-m", "ledger_cli", "runs", "import", str(source), "--out",
                           str(tmp_path / "out"), "--json"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["steps"], report["skipped"]) == (0, {"tool call that is not a bash command": 1})


def test_a_command_naming_a_path_that_is_not_utf8_keeps_its_step_with_a_replacement_character(tmp_path):
    """A log decoded with surrogateescape: the target has U+FFFD for each byte; the observation's hash,
    size and atoms encode each lone surrogate as UTF-8 encodes a code point (``surrogatepass``)."""
    messages = [{"role": "assistant", "content": "```bash\ncat src/\udc80x.py\n```"},
                {"role": "user", "content": "caf\udce9"}]
    _write(tmp_path / "in" / "s.traj.json", {"messages": messages})
    (tmp_path / "in" / "t.jsonl").write_text(json.dumps(
        {"run": "t", "command": "cat src/\udc80x.py", "output": "ok"}) + "\n", encoding="utf-8")
    summary = import_runs([tmp_path / "in"], tmp_path / "out")
    assert (summary.runs, summary.steps, summary.errors) == (2, 2, [])
    for run in ("s", "t"):
        (evidence,) = evidence_of(journal(tmp_path / "out" / f"{run}.jsonl"))
        assert evidence["target"] == "src/\ufffdx.py"
    (evidence,) = evidence_of(journal(tmp_path / "out" / "s.jsonl"))
    assert evidence["observation_sha256"] == hashlib.sha256("caf\udce9".encode("utf-8", "surrogatepass")).hexdigest()
    assert evidence["atoms"] == [hashlib.sha256("caf\udce9".encode("utf-8", "surrogatepass")).hexdigest()[:16]]
    assert evidence["observation_bytes"] == 6  # the lone surrogate as three bytes, as UTF-8 encodes a code point
    report = simulate([tmp_path / "out"])
    assert [(r.run, r.steps_taken, r.error) for r in report.runs] == [("s", 1, None), ("t", 1, None)]


def test_a_gzip_file_whose_data_is_damaged_is_named_and_the_other_files_are_imported(tmp_path):
    damaged = bytearray(gzip.compress(json.dumps(GOOD).encode() * 20))
    for index in range(20, 40):
        damaged[index] ^= 0xFF
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "m.traj.json.gz").write_bytes(bytes(damaged))
    _write(tmp_path / "in" / "a.traj.json", GOOD)
    _write(tmp_path / "in" / "z.traj.json", GOOD)
    done = CliRunner().invoke(main, ["runs", "import", str(tmp_path / "in"), "--out", str(tmp_path / "out")])
    assert done.exit_code == 1
    assert "imported 2 runs (1 file(s) failed" in done.stdout
    assert f"error: INVALID_ARGUMENT: {tmp_path / 'in' / 'm.traj.json.gz'}: not gzip this import can read: " \
        in done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.jsonl", "z.jsonl"]


@pytest.mark.parametrize("data, reason", [
    (b"junk", "not gzip this import can read: Not a gzipped file (b'ju')"),
    (gzip.compress(json.dumps(GOOD).encode(), mtime=0)[:-12],
     "gzip cut short: Compressed file ended before the end-of-stream marker was reached"),
    (b"", "no run: the file is empty"),
    (gzip.compress(b" \n", mtime=0), "no run: the file holds no JSON value (only white space or a byte-order mark)"),
    (gzip.compress("\ufeff".encode(), mtime=0),
     "no run: the file holds no JSON value (only white space or a byte-order mark)")],
    ids=["not gzip", "cut short", "empty", "white space", "byte-order mark"])
def test_a_gzip_file_that_is_not_gzip_or_stops_short_or_holds_nothing_is_named_so(tmp_path, data, reason):
    """Python's own words came alone ("Not a gzipped file", "Compressed file ended …"), and an empty file
    was "not JSON: Expecting value: line 1 column 1"."""
    (tmp_path / "r.traj.json.gz").write_bytes(data)
    summary = import_runs([tmp_path / "r.traj.json.gz"], tmp_path / "out")
    assert (summary.runs, [(e["code"], e["reason"]) for e in summary.errors]) == (0, [("INVALID_ARGUMENT", reason)])


def test_a_folder_gives_only_trajectory_names_and_only_a_jsonl_name_is_the_steps_format(tmp_path):
    inputs = tmp_path / "in"
    _write(inputs / "a.traj.json", GOOD)
    (inputs / "notes.txt.gz").write_bytes(gzip.compress(b"hi"))
    (inputs / "backup.tar.gz").write_bytes(gzip.compress(b"tar"))
    (inputs / "old.gz").mkdir()
    _write(inputs / "b.jsonl.json", GOOD)  # a trajectory whose name merely holds .jsonl
    summary = import_runs([inputs], tmp_path / "out")
    assert (summary.runs, summary.steps, summary.errors) == (2, 2, [])
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.jsonl", "b.jsonl"]


def test_an_object_with_a_trajectory_list_is_swe_agent_and_one_with_neither_list_says_both(tmp_path):
    swe = _write(tmp_path / "s.traj", {"trajectory": [{"action": "ls", "observation": "a.py"}], "messages": []})
    neither = _write(tmp_path / "n.traj", {"history": [{"role": "system", "content": "s"}]})
    summary = import_runs([swe, neither], tmp_path / "out")
    assert (summary.runs, summary.steps) == (1, 1)
    assert summary.errors[0]["reason"] == (
        "no messages list: not a mini-swe-agent trajectory (nor a SWE-agent .traj: no trajectory list); it holds a "
        "SWE-agent history but no trajectory list (a demonstration, or a run that did not finish): the import reads "
        "the trajectory list a finished run writes")


@pytest.mark.parametrize("name, content, said", [
    ("events.json", [{"id": 1, "action": "run", "args": {"command": "ls"}}],
     "no message with a role: an empty or foreign list, not a mini-swe-agent trajectory"),
    ("other.json", {"events": []}, "no messages list: not a mini-swe-agent trajectory (nor a SWE-agent .traj: no "
                                   "trajectory list)")])
def test_another_agents_run_is_refused_pointing_at_the_steps_format(tmp_path, name, content, said):
    """An OpenHands event list (or any other agent's file) was refused without the way in."""
    summary = import_runs([_write(tmp_path / name, content)], tmp_path / "out")
    assert summary.errors[0]["reason"] == said + OTHER_AGENTS
    assert OTHER_AGENTS == ("; another agent's run (OpenHands, Aider, your own) comes in through the steps format: "
                            "one JSON line per step with run, command and output (docs/runs.md)")


def test_a_file_of_one_json_value_per_line_not_named_jsonl_says_how_steps_are_read(tmp_path):
    lines = tmp_path / "run.traj.json"
    lines.write_text('{"role": "user", "content": "x"}\n{"role": "assistant", "content": "y"}\n', encoding="utf-8")
    assert import_runs([lines], tmp_path / "out").errors[0]["reason"].endswith(
        "(several JSON values, one per line? a file of steps is read in the steps format: name it *.jsonl, or give "
        "--format steps)")


@pytest.mark.parametrize("fmt", ["auto", "mini-swe-agent", "swe-agent"])
def test_a_journal_read_as_a_trajectory_is_sent_to_apply_whatever_its_name_or_format(tmp_path, fmt):
    """It was sent to the steps format, which then sends it to apply."""
    lines = tmp_path / "run.traj.json"
    lines.write_text('{"op": "open_revision", "hypotheses": [{"statement": "x"}]}\n{"op": "initialize"}\n',
                     encoding="utf-8")
    assert import_runs([lines], tmp_path / "out", fmt=fmt).errors[0]["reason"].startswith(
        "not JSON: Extra data: line 2 column 1 (char 60) (its first line has \"op\": the file is already a ledger "
        "journal; give it to 'ledger apply' or 'ledger simulate', decompressed first if it is gzipped)")
    lines.write_text('{"op": "open_revision", "hypotheses": [{"statement": "x"}]}\n', encoding="utf-8")  # one line
    assert import_runs([lines], tmp_path / "out", fmt=fmt).errors[0]["reason"].startswith(
        "holds one journal line (it has \"op\"): the file is already a ledger journal; give it to 'ledger apply' or "
        "'ledger simulate', decompressed first if it is gzipped")


def test_a_number_of_thousands_of_digits_is_named_as_such(tmp_path):
    digits = "9" * 5000
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "big.traj.json").write_text('{"messages": [], "n": %s}' % digits, encoding="utf-8")
    (tmp_path / "in" / "big.jsonl").write_text('{"run": "r", "command": "ls", "output": "", "exit_code": %s}\n'
                                               % digits, encoding="utf-8")
    code = {"messages": [{"role": "assistant", "content": "```bash\nls\n```"},
                         {"role": "user", "content": f"<returncode>{digits}</returncode>\nx"}]}
    _write(tmp_path / "in" / "code.traj.json", code)
    summary = import_runs([tmp_path / "in"], tmp_path / "out")
    assert [(Path(e["file"]).name, e["reason"]) for e in summary.errors] == [
        ("big.jsonl", "line 1: not JSON this import reads: a number of more than 4,300 digits"),
        ("big.traj.json", "not JSON this import reads: a number of more than 4,300 digits")]
    (evidence,) = evidence_of(journal(tmp_path / "out" / "code.jsonl"))
    assert "exit_code" not in evidence  # past any exact JSON integer: left out, as the docs say


def test_journal_temp_files_of_a_killed_import_are_removed_by_the_next_one(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    tag = process_tag()
    dead = out / f".r1.abcd1234{tag.rsplit('.', 1)[0]}.{child.pid}.tmp"
    alive = out / f".r2.abcd1234{tag}.tmp"  # this very process: still running, kept
    foreign = out / ".r3.abcd1234.ffffffffffff.1.tmp"  # another machine's: kept
    for path in (dead, alive, foreign):
        path.write_text("half a journal")
    summary = import_runs([_write(tmp_path / "a.traj.json", GOOD)], out)
    assert summary.runs == 1
    assert sorted(p.name for p in out.iterdir()) == sorted(["a.jsonl", alive.name, foreign.name])


def test_an_output_folder_no_journal_can_be_written_in_is_one_storage_error_before_any_input_is_read(
        tmp_path, monkeypatch):
    from ledger.runs import run_files

    source = _write(tmp_path / "a.traj.json", GOOD)
    real_open = os.open

    def refusing(path, *args, **kwargs):  # what a read-only folder gives (a mode alone does not stop root)
        if os.path.basename(str(path)).startswith(".ledger-probe."):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    opened = []
    monkeypatch.setattr(run_files, "open_run_file", lambda path: opened.append(path))
    monkeypatch.setattr(os, "open", refusing)
    with pytest.raises(LedgerError) as caught:
        import_runs([source], tmp_path / "out")
    monkeypatch.undo()
    assert caught.value.code == "STORAGE_ERROR"
    assert caught.value.message == f"cannot write journals in the output folder {tmp_path / 'out'}: Permission denied"
    assert opened == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("refused", [".ledger-probe.", ".a-run."])  # the folder's probe, a journal's temp file
def test_a_temp_file_the_folder_refuses_is_refused_for_that_though_removing_the_file_never_made_fails_too(
        tmp_path, monkeypatch, refused):
    """On a read-only file system removing a file that was never created fails too (EROFS, not
    ENOENT): that failure took the refusal's place (a bare OSError from import_runs, a message naming
    the temp file). Here the create fails for want of space, the removal for want of permission."""
    import errno

    source = _write(tmp_path / "a.traj.json", {**GOOD, "instance_id": "a-run"})
    real_open, real_unlink = os.open, os.unlink

    def refusing(real, number, words):
        def call(path, *args, **kwargs):
            if os.path.basename(str(path)).startswith(refused):
                raise OSError(number, words, str(path))
            return real(path, *args, **kwargs)
        return call

    monkeypatch.setattr(os, "open", refusing(real_open, errno.ENOSPC, "No space left on device"))
    monkeypatch.setattr(os, "unlink", refusing(real_unlink, errno.EROFS, "Read-only file system"))
    if refused == ".ledger-probe.":
        with pytest.raises(LedgerError) as caught:
            import_runs([source], tmp_path / "out")
        assert (caught.value.code, caught.value.message) == (
            "STORAGE_ERROR", f"cannot write journals in the output folder {tmp_path / 'out'}: No space left on device")
    else:
        summary = import_runs([source], tmp_path / "out")
        assert [error["file"] for error in summary.errors] == [str(source)] and summary.journals == []
        assert summary.errors[0]["reason"] == (  # it named no journal: read as if the run file had no space
            f"its journal cannot be written in {tmp_path / 'out'}: No space left on device")


def test_a_read_only_mount_as_the_output_folder_is_refused_naming_it(tmp_path):
    (tmp_path / "out").mkdir()
    folder, undo = read_only_mount(tmp_path / "out")
    try:
        done = subprocess.run([sys.executable, "-m", "ledger_cli", "runs", "import",
                               str(_write(tmp_path / "a.traj.json", GOOD)), "--out", str(folder)],
                              capture_output=True, text=True, timeout=120)
    finally:
        undo()
    assert (done.returncode, done.stderr) == (1, f"error: STORAGE_ERROR: cannot write journals in the output folder "
                                                 f"{folder}: Read-only file system\n")


def test_a_run_id_of_one_character_says_one_character(tmp_path):
    summary = import_runs([_write(tmp_path / "t.traj.json", {**GOOD, "instance_id": "-"})], tmp_path / "out")
    assert summary.errors[0]["reason"].startswith("run id '-' (1 character) is not a plain file name")


def test_an_output_folder_this_user_may_not_even_list_still_gives_the_storage_error(tmp_path, monkeypatch):
    """A folder made under umask 777 cannot be listed: the refusal is still STORAGE_ERROR, not the
    listing's own error on the way out."""
    from ledger.runs import trajectories

    def refusing(folder):
        raise LedgerError("STORAGE_ERROR", f"cannot write journals in the output folder {folder}: Permission denied")

    real_iterdir = Path.iterdir

    def unlistable(self):
        if self.name == "out":
            raise PermissionError(13, "Permission denied", str(self))
        return real_iterdir(self)

    monkeypatch.setattr(trajectories, "_check_writable", refusing)
    monkeypatch.setattr(Path, "iterdir", unlistable)
    with pytest.raises(LedgerError) as caught:
        import_runs([_write(tmp_path / "a.traj.json", GOOD)], tmp_path / "out")
    assert caught.value.code == "STORAGE_ERROR"


def test_a_steps_file_whose_journal_name_is_taken_by_a_folder_writes_none_of_its_runs(tmp_path):
    (tmp_path / "out" / "r2.jsonl").mkdir(parents=True)
    steps = tmp_path / "log.jsonl"
    steps.write_text("".join(json.dumps({"run": run, "command": "ls", "output": "x"}) + "\n"
                             for run in ("r1", "r2", "r3")), encoding="utf-8")
    summary = import_runs([steps], tmp_path / "out")
    assert (summary.runs, summary.errors[0]["reason"]) == (
        0, "r2.jsonl in the output folder is a folder, not a journal: move it aside")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["r2.jsonl"]  # no journal, no temp file


def test_a_tool_call_whose_arguments_nest_past_what_python_reads_is_a_turn_skipped(tmp_path):
    deep = {"id": "c1", "function": {"name": "bash", "arguments": "[" * 5000 + "]" * 5000}}
    good = {"id": "c2", "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}
    messages = [{"role": "assistant", "content": "", "tool_calls": [deep, good]},
                {"role": "tool", "tool_call_id": "c1", "content": "?"}, {"role": "tool", "tool_call_id": "c2", "content": "a"}]
    summary = import_runs([_write(tmp_path / "r.traj.json", {"messages": messages})], tmp_path / "out")
    assert (summary.runs, summary.steps, summary.skipped) == (1, 1, {"tool call that is not a bash command": 1})


def test_a_trajectory_or_steps_file_in_utf16_or_utf32_is_refused_as_not_utf8(tmp_path):
    text = json.dumps(GOOD)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "u16.traj.json").write_bytes(text.encode("utf-16"))
    (tmp_path / "in" / "u32.traj.json").write_bytes(text.encode("utf-32"))
    (tmp_path / "in" / "s16.jsonl").write_bytes(json.dumps({"run": "s", "command": "ls", "output": "x"}).encode("utf-16"))
    (tmp_path / "in" / "bom.traj.json").write_bytes(b"\xef\xbb\xbf" + text.encode())  # UTF-8 with a mark: read
    (tmp_path / "in" / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + json.dumps({"run": "b", "command": "ls",
                                                                            "output": "x"}).encode() + b"\n")
    step = json.dumps({"run": "c", "command": "ls", "output": "x"}).encode() + b"\n"
    (tmp_path / "in" / "bom2.jsonl").write_bytes(step + b"\xef\xbb\xbf" + step)  # a mark past the start: refused
    summary = import_runs([tmp_path / "in"], tmp_path / "out")
    assert summary.runs == 2 and sorted((Path(e["file"]).name, e["reason"]) for e in summary.errors) == [
        ("bom2.jsonl", "line 2: not valid JSON: it begins with a byte-order mark (U+FEFF), which only a file's first "
         "line may carry (a file joined after another's end, say); remove it"),  # it gave Python's hint
        ("s16.jsonl", "line 1: not UTF-8 (byte 1: invalid start byte)"),
        ("u16.traj.json", "not UTF-8 (byte 1: invalid start byte)"),
        ("u32.traj.json", "not UTF-8 (byte 1: invalid start byte)")]


@pytest.mark.parametrize("named", ["the folder", "the file"])
def test_an_import_whose_output_folder_holds_an_input_is_refused_before_writing(tmp_path, named):
    """A journal is written as RUN.jsonl in the output folder: there it could replace an input not
    read yet (run b's journal over the steps file b.jsonl, losing run c)."""
    folder = tmp_path / "logs"
    folder.mkdir()
    first = folder / "a.jsonl"
    first.write_text('{"run": "b", "command": "ls", "output": "x"}\n')
    (folder / "b.jsonl").write_text('{"run": "c", "command": "ls", "output": "y"}\n')
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a.jsonl").symlink_to(first)  # a link to an input inside the output folder
    for out in (folder, tmp_path / "link"):
        if out.name == "link":
            out.symlink_to(folder)
        with pytest.raises(LedgerError) as through_link:
            import_runs([tmp_path / "elsewhere" / "a.jsonl"], out)
        assert "lies in the output folder" in through_link.value.message
        with pytest.raises(LedgerError) as refused:
            import_runs([folder if named == "the folder" else first], out)
        assert refused.value.code == "INVALID_ARGUMENT" and refused.value.details["path"] == str(first)
        assert "lies in the output folder" in refused.value.message
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert import_runs([first], folder / "journals").runs == 1  # a folder inside it is another folder


@pytest.mark.parametrize("source", ["trajectory", "steps"])
def test_an_interrupt_while_a_journal_is_begun_leaves_no_temp_file(tmp_path, monkeypatch, source):
    """Ctrl-C while a run's journal file was being started (its first lines) left that temp file."""
    from ledger.runs import trajectories

    if source == "steps":
        given = tmp_path / "log.jsonl"
        given.write_text('{"run": "r1", "command": "ls", "output": "x"}\n')
    else:
        given = _write(tmp_path / "r1.traj.json", {"instance_id": "r1", "trajectory_format": "mini-swe-agent-1.1",
                                                   "messages": [{"role": "user", "content": "fix it"},
                                                                _response([("c1", "bash", {"command": "ls"})]),
                                                                _output("c1", "a.py", 0)]})
    written = []

    def interrupted(item):
        written.append(item)
        if len(written) == 2:
            raise KeyboardInterrupt
        return json.dumps(item).encode("ascii") + b"\n"

    monkeypatch.setattr(trajectories, "_line", interrupted)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(KeyboardInterrupt):
        import_runs([given], out)
    assert len(written) == 2 and list(out.iterdir()) == []
    monkeypatch.undo()
    assert import_runs([given], out).runs == 1  # the run id was not taken by the interrupted attempt


@pytest.mark.parametrize("which", [".ledger-probe.", ".r1."])
def test_an_interrupt_the_moment_a_temp_file_is_created_leaves_no_file(tmp_path, monkeypatch, which):
    """Ctrl-C inside the create of a journal's temp file (or of the probe saying the output folder is
    writable), after the file existed but before its name was returned, left it behind."""
    given = tmp_path / "log.jsonl"
    given.write_text('{"run": "r1", "command": "ls", "output": "x"}\n')
    real_open = os.open

    def interrupted(path, *args, **kwargs):
        fd = real_open(path, *args, **kwargs)
        if os.path.basename(str(path)).startswith(which):
            os.close(fd)
            raise KeyboardInterrupt
        return fd

    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(os, "open", interrupted)
    with pytest.raises(KeyboardInterrupt):
        import_runs([given], out)
    monkeypatch.undo()
    assert list(out.iterdir()) == []
    assert import_runs([given], out).runs == 1 and [p.name for p in out.iterdir()] == ["r1.jsonl"]


def test_a_temp_name_already_taken_is_left_alone_and_the_journal_still_written(tmp_path, monkeypatch):
    import itertools
    import ledger.package_tools.atomic_files as files_module

    given = tmp_path / "log.jsonl"
    given.write_text('{"run": "r1", "command": "ls", "output": "x"}\n')
    out = tmp_path / "out"
    out.mkdir()
    taken = [out / f".ledger-probe.7{process_tag()}.tmp", out / f".r1.9{process_tag()}.tmp"]  # the probe took 8
    for path in taken:
        path.write_bytes(b"not this import's")
    monkeypatch.setattr(files_module, "_TEMP_NUMBERS", itertools.count(7))
    assert import_runs([given], out).runs == 1
    assert sorted(p.name for p in out.iterdir()) == sorted([taken[0].name, taken[1].name, "r1.jsonl"])
    assert all(path.read_bytes() == b"not this import's" for path in taken)


@pytest.mark.parametrize("name, compress", [("r1.traj.json", False), ("r1.traj", False), ("r1.json.gz", True)])
def test_a_recorded_run_given_where_a_journal_is_expected_is_pointed_to_runs_import(tmp_path, name, compress):
    """simulate and apply read journals; a trajectory file given to them was only "not valid JSON"
    (a folder of them already said how to make journals)."""
    data = json.dumps(GOOD, indent=2).encode()
    given = tmp_path / name
    given.write_bytes(gzip.compress(data) if compress else data)
    hint = ("this file looks like an agent run as it was recorded (*.traj, *.json, *.gz), not a journal: "
            "'ledger runs import FILE --out DIR' makes it one")
    assert simulate([given]).errors[0]["message"].endswith(f"; {hint}")
    created = CliRunner().invoke(main, ["apply", str(tmp_path / "case"), str(given), "--create", "C1"])
    assert created.exit_code == 1 and created.stderr.startswith("error: INVALID_JSON: line 1 is no journal line, "
                                                                "so no case was created: ")
    assert created.stderr.endswith(f"; {hint}\n") and not (tmp_path / "case").exists()
    Case.create(tmp_path / "case", "C1").close()  # into a case that exists, line by line
    applied = CliRunner().invoke(main, ["apply", str(tmp_path / "case"), str(given)])
    assert applied.exit_code == 1 and f"hint: {hint}\n" in applied.stderr
    journal = tmp_path / "bad.jsonl"  # a journal's own bad first line gets no such hint
    journal.write_text("{\n")
    assert "runs import" not in simulate([journal]).errors[0]["message"]


def test_a_gzipped_journal_is_told_to_be_decompressed_by_simulate_apply_and_runs_import(tmp_path):
    """simulate and apply pointed a gzipped journal to runs import, which pointed it back to them."""
    given = tmp_path / "run.jsonl.gz"
    given.write_bytes(gzip.compress(b'{"op": "initialize"}\n'))
    hint = ("this file looks gzip-compressed, and a journal is read as plain text: decompress it first "
            "(gunzip FILE); an agent's steps file goes to 'ledger runs import FILE --out DIR'")
    assert simulate([given]).errors[0]["message"].endswith(f"; {hint}")
    created = CliRunner().invoke(main, ["apply", str(tmp_path / "case"), str(given), "--create", "C1"])
    assert created.exit_code == 1 and created.stderr.endswith(f"; {hint}\n")
    assert import_runs([given], tmp_path / "out").errors[0]["reason"].endswith(
        "the file is already a ledger journal; give it to 'ledger apply' or 'ledger simulate', decompressed first "
        "if it is gzipped)")


def test_a_journal_from_a_stream_without_a_name_gets_no_hint_and_no_error(tmp_path):
    """The recorded-run hint reads the journal's file name: standard input under a test runner has none."""
    done = CliRunner().invoke(main, ["apply", str(tmp_path / "case"), "-", "--create", "C1"], input=b'{"finding": 1}\n')
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit)  # no AttributeError
    assert done.stderr == ('error: INVALID_ARGUMENT: line 1 is no journal line, so no case was created: a journal '
                           'line needs an "op" key\n')


def test_an_output_folder_that_is_a_link_to_nothing_is_refused_naming_the_link(tmp_path):
    """The system's answer when a folder is made there, "File exists", named no cause."""
    source = _write(tmp_path / "in" / "r1.traj.json", GOOD)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(LedgerError) as caught:
        import_runs([source], tmp_path / "dangling")
    assert caught.value.code == "INVALID_ARGUMENT" and caught.value.message == (
        f"{tmp_path / 'dangling'} (the output folder, --out) is a link that leads nowhere (to {tmp_path / 'nowhere'}, "
        "which is not there); give a folder, or remove the link")
    (tmp_path / "up").symlink_to("dangling")  # a folder above it, through two links
    with pytest.raises(LedgerError) as caught:
        import_runs([source], tmp_path / "up" / "sub")
    assert caught.value.message.startswith(
        f"{tmp_path / 'up'}, a folder above {tmp_path / 'up' / 'sub'} (the output folder, --out), is a link that "
        f"leads nowhere (to dangling ({tmp_path / 'dangling'}), a link to {tmp_path / 'nowhere'}, which is not there)")
    assert not (tmp_path / "nowhere").exists()


FENCE_PIECES = ["```bash", "```mswea_bash_command", "\n", " ", "\t", "x", "```", "\n```"]


@given(st.lists(st.sampled_from(FENCE_PIECES), max_size=40).map("".join))
@settings(max_examples=400, deadline=None)
@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_bash_blocks_are_the_fence_pattern_s_matches_searched_no_further_than_the_last_closing_fence(text):
    """mini-swe-agent's fence pattern, searched only up to the last closing fence (so that a reply of
    many unclosed openings takes linear time), finds exactly the blocks the pattern finds in the whole text."""
    from ledger.runs.formats import _FENCE, _bash_blocks

    assert _bash_blocks(text) == _FENCE.findall(text)


def test_a_reply_of_many_unclosed_fences_is_a_turn_without_a_bash_block(tmp_path):
    from ledger.runs.formats import mini_swe_agent_steps

    messages = [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "```bash\nx" * 20_000},
                {"role": "user", "content": "no command"}]
    assert [str(item) for item in mini_swe_agent_steps({"messages": messages})] == ["no bash block"]


def test_a_run_file_or_steps_line_past_the_size_limit_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    """A trajectory (decompressed: a gzip file may expand a thousandfold) or one line of a steps file
    over the limit is that file's error; the other files are imported."""
    from ledger.runs import run_files

    monkeypatch.setattr(run_files, "RUN_FILE_BYTES_MAX", 4000)
    padded = {**GOOD, "pad": "x" * 5000}
    inputs = tmp_path / "in"
    _write(inputs / "plain.traj.json", padded)
    (inputs / "packed.traj.json.gz").write_bytes(gzip.compress(json.dumps(padded).encode()))
    line = {"run": "s1", "command": "ls", "output": "y" * 5000}
    (inputs / "steps.jsonl").write_text(json.dumps({**line, "output": "a"}) + "\n" + json.dumps(line) + "\n")
    _write(inputs / "small.traj.json", GOOD)
    summary = import_runs([inputs], tmp_path / "out")
    assert (summary.runs, sorted(p.name for p in (tmp_path / "out").iterdir())) == (1, ["small.jsonl"])
    assert sorted((Path(e["file"]).name, e["code"], e["reason"]) for e in summary.errors) == [
        ("packed.traj.json.gz", "INVALID_ARGUMENT", "holds more than 4000 bytes once decompressed, more than a run "
         "file may: split it, or leave out what no journal keeps"),
        ("plain.traj.json", "INVALID_ARGUMENT", "holds more than 4000 bytes, more than a run file may: split it, "
         "or leave out what no journal keeps"),
        ("steps.jsonl", "INVALID_ARGUMENT", "line 2 holds more than 4000 bytes, more than one step may: leave "
         "out what no journal keeps")]
    reads = []
    real_open = run_files.open_run_file

    def counting(path):
        handle = real_open(path)
        real_read = handle.read
        handle.read = lambda n=-1: reads.append(n) or real_read(n)
        return handle
    monkeypatch.setattr(run_files, "open_run_file", counting)
    monkeypatch.setattr(run_files, "RUN_FILE_BYTES_MAX", 10)
    summary = import_runs([inputs / "packed.traj.json.gz"], tmp_path / "out2")
    assert summary.runs == 0 and reads == [1 << 20]  # one chunk, then no further


def test_a_steps_line_past_the_size_limit_is_refused_holding_no_more_than_about_the_limit(tmp_path, monkeypatch):
    """readline with the bound as its limit held the pieces it read beside the line it joined: a line
    of 1.1 GiB in a 5 MB gzip file peaked at 2.1 GB to be refused."""
    import tracemalloc
    from ledger.runs import run_files

    bound = 8 << 20
    monkeypatch.setattr(run_files, "RUN_FILE_BYTES_MAX", bound)
    (tmp_path / "s.jsonl.gz").write_bytes(gzip.compress(b'{"run": "r", "command": "ls", "output": "'
                                                        + b"y" * (bound + (1 << 20)) + b'"}\n'))
    tracemalloc.start()
    try:
        summary = import_runs([tmp_path / "s.jsonl.gz"], tmp_path / "out")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [e["reason"] for e in summary.errors] == [f"line 1 holds more than {bound} bytes once decompressed, "
                                                     "more than one step may: leave out what no journal keeps"]
    assert peak < 1.4 * bound, peak


@given(lines=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=6),
       last_newline=st.booleans())
@settings(max_examples=200, deadline=None)
def test_a_steps_file_is_cut_into_the_lines_readline_gives_and_refused_at_the_same_line(lines, last_newline):
    """Read a chunk at a time (here 4 bytes, the bound 10): the same lines, the same line refused."""
    import io
    from ledger.runs import run_files

    data = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")

    def reference() -> list:
        handle, out = io.BytesIO(data), []
        while line := handle.readline(11):
            if len(line) > 10:
                return [*out, "refused", len(out) + 1]
            out.append(line)
        return out

    def chunked() -> list:
        out = []
        try:
            for line in run_files.run_file_lines(io.BytesIO(data), Path("s.jsonl")):
                out.append(bytes(line))
        except ValueError as exc:
            return [*out, "refused", int(str(exc).split()[1])]
        return out
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_files, "RUN_FILE_BYTES_MAX", 10)
        patch.setattr(run_files, "_LINE_CHUNK_BYTES", 4)
        assert chunked() == reference()


@pytest.mark.parametrize("fmt, data, reason", [
    ("mini-swe-agent", {"trajectory": [{"action": "ls", "observation": "a"}]},
     "no messages list: not a mini-swe-agent trajectory (its trajectory list is a SWE-agent .traj's) (read as "
     "--format mini-swe-agent, as asked: without it, the file's name and content choose)"),
    ("swe-agent", {"trajectory_format": "mini-swe-agent-1", "messages": [
        {"role": "assistant", "content": "```bash\nls\n```"}, {"role": "user", "content": "a"}]},
     "no trajectory list: not a SWE-agent .traj (its messages list is a mini-swe-agent trajectory's) (read as "
     "--format swe-agent, as asked: without it, the file's name and content choose)")])
def test_a_run_refused_under_a_format_given_by_hand_says_so(tmp_path, fmt, data, reason):
    """Forced to the wrong format, a file holding the other format's list was said to have none (a
    mini-swe-agent run read as SWE-agent's was sent to the steps format, as another agent's)."""
    summary = import_runs([_write(tmp_path / "r.traj", data)], tmp_path / "out", fmt=fmt)
    assert [e["reason"] for e in summary.errors] == [reason]
    assert import_runs([tmp_path / "r.traj"], tmp_path / "out").runs == 1  # auto reads it


def test_a_trajectory_list_none_of_whose_entries_has_an_action_is_another_agents_not_a_run_with_no_step(tmp_path):
    """SWE-agent writes an action into every trajectory entry; a list of chat entries (role and text,
    as another tool's dataset rows hold them) was read as a SWE-agent run whose every turn is skipped,
    and written as a run that spent nothing, exit 0."""
    rows = {"instance_id": "r__r-1", "exit_status": "submitted", "trajectory": [
        {"role": "system", "text": "s", "mask": True}, {"role": "ai", "text": "```bash\nls\n```", "mask": False},
        {"role": "user", "text": "a.py", "mask": True}]}
    summary = import_runs([_write(tmp_path / "r.json", rows)], tmp_path / "out")
    assert (summary.runs, summary.runs_without_steps) == (0, [])
    assert [(e["code"], e["reason"]) for e in summary.errors] == [(
        "INVALID_ARGUMENT", "no trajectory entry with an action (the first holds 'role', 'text', 'mask'): another "
        "agent's trajectory list, not a SWE-agent .traj" + OTHER_AGENTS)]
    some = {"trajectory": [{"role": "x"}, {"action": "ls", "observation": "a"}]}  # one action is enough: a run
    assert import_runs([_write(tmp_path / "s.traj", some)], tmp_path / "out2").steps == 1


@pytest.mark.parametrize("entries, held", [([1, 2, None], "none is an object"), ([{}], "the first object is empty"),
                                           (["ls", {}], "the first object is empty")])
def test_a_trajectory_list_of_no_object_with_an_action_is_refused_whatever_its_entries_are(tmp_path, entries, held):
    """A list of entries none of which is an object was written as a run with no step, exit 0, where a
    list of objects without an action was refused; an empty first object was named by no key at all."""
    summary = import_runs([_write(tmp_path / "r.traj", {"trajectory": entries})], tmp_path / "out")
    assert (summary.runs, [e["reason"] for e in summary.errors]) == (0, [
        f"no trajectory entry with an action ({held}): another agent's trajectory list, not a SWE-agent .traj"
        + OTHER_AGENTS])
    assert import_runs([_write(tmp_path / "e.traj", {"trajectory": []})], tmp_path / "out2").runs_without_steps == ["e"]


@pytest.mark.parametrize("extra", [{"resolved_ids": ["r1"]}, {"resolved_ids": [], "model_patch": "diff"}])
def test_a_run_holding_a_reports_or_a_predictions_key_too_is_still_a_run(tmp_path, extra):
    """A mini-swe-agent run with a ``resolved_ids`` list was taken for an evaluation's report and left out,
    exit 0: an object holding steps is a run, whatever else it holds."""
    folder = tmp_path / "runs"
    _write(folder / "a.traj.json", {**GOOD, "instance_id": "a", **extra})
    _write(folder / "b.traj.json", {**GOOD, "instance_id": "b"})
    summary = import_runs([folder], tmp_path / "out")
    assert (summary.runs, summary.not_runs, summary.errors) == (2, [], [])
    assert len(journal(tmp_path / "out" / "a.jsonl")) == len(journal(tmp_path / "out" / "b.jsonl")) > 1


@pytest.mark.parametrize("text", ["", "\n", "\ufeff"])
def test_a_predictions_file_that_holds_nothing_yet_is_no_run_whatever_blank_it_holds(tmp_path, text):
    """An empty preds.json was an error of the import (exit 1), where {} and an empty all_preds.jsonl are
    left out as holding no prediction yet."""
    folder = tmp_path / "output"
    _write(folder / "r1.traj.json", {**GOOD, "instance_id": "r1"})
    (folder / "preds.json").write_text(text, encoding="utf-8")
    summary = import_runs([folder], tmp_path / "out")
    assert (summary.runs, summary.errors, summary.not_runs) == (1, [], [str(folder / "preds.json")])


def test_the_turns_skipped_are_those_of_the_runs_written(tmp_path):
    """A run that could not be written (its journal's name a folder in DIR) had its skipped turns counted
    beside the runs and steps of the others only."""
    turn = {"role": "assistant", "content": "no block"}
    skipping = {**GOOD, "instance_id": "a", "messages": [*GOOD["messages"], turn]}
    alone = import_runs([_write(tmp_path / "a.traj.json", skipping)], tmp_path / "alone")
    assert sum(alone.skipped.values()) == 1
    (tmp_path / "out" / "a.jsonl").mkdir(parents=True)
    summary = import_runs([tmp_path / "a.traj.json", _write(tmp_path / "b.traj.json", {**GOOD, "instance_id": "b"})],
                          tmp_path / "out")
    assert (summary.runs, len(summary.errors), summary.skipped) == (1, 1, {})


def test_a_steps_line_whose_run_id_cannot_be_a_file_name_is_named_by_its_line(tmp_path):
    steps = tmp_path / "s.jsonl"
    steps.write_text('{"run": "r1", "command": "ls", "output": "a"}\n{"run": "a b", "command": "ls", "output": "a"}\n')
    assert [e["reason"] for e in import_runs([steps], tmp_path / "out").errors] == [
        "line 2: run id 'a b' (3 characters) is not a plain file name: 1 to 128 letters, digits, '.', '_', '-', "
        "the first a letter or digit"]


def test_a_marked_mini_swe_agent_run_with_no_message_yet_is_written_with_no_step(tmp_path):
    """As one holding only its system and user messages is; a bare empty list is still no run."""
    marked = _write(tmp_path / "in" / "e.traj.json", {"trajectory_format": "mini-swe-agent-1", "instance_id": "e1",
                                                      "messages": []})
    summary = import_runs([marked], tmp_path / "out")
    assert (summary.runs, summary.steps, summary.runs_without_steps) == (1, 0, ["e1"])
    bare = _write(tmp_path / "in" / "b.traj.json", {"messages": []})
    assert import_runs([bare], tmp_path / "out2").errors[0]["reason"] == (
        "no message with a role: an empty or foreign list, not a mini-swe-agent trajectory" + OTHER_AGENTS)


def test_a_bash_call_whose_arguments_give_a_key_twice_is_a_turn_skipped(tmp_path):
    """Which of the two commands would the step be? Neither: as a key twice in the file itself."""
    twice = {"id": "c1", "function": {"name": "bash", "arguments": '{"command": "ls", "command": "rm -rf x"}'}}
    good = {"id": "c2", "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}
    messages = [{"role": "assistant", "content": "", "tool_calls": [twice, good]},
                {"role": "tool", "tool_call_id": "c1", "content": "?"}, {"role": "tool", "tool_call_id": "c2", "content": "a"}]
    summary = import_runs([_write(tmp_path / "r.traj.json", {"messages": messages})], tmp_path / "out")
    assert (summary.runs, summary.steps, summary.skipped) == (1, 1, {"tool call that is not a bash command": 1})


@pytest.mark.parametrize("answer", [
    {"role": "tool", "tool_call_id": "c1", "content": 12345},
    {"role": "tool", "tool_call_id": "c1", "content": {"text": "a"}},
    {"role": "tool", "tool_call_id": "c1"},
    {"type": "function_call_output", "call_id": "c1", "output": {"stdout": "a"}},
])
def test_a_tool_answer_that_is_not_text_is_a_turn_skipped_never_an_empty_observation(tmp_path, answer):
    call = {"id": "c1", "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}
    messages = [*GOOD["messages"], {"role": "assistant", "content": "", "tool_calls": [call]}, answer]
    summary = import_runs([_write(tmp_path / "r.traj.json", {"messages": messages})], tmp_path / "out")
    assert (summary.runs, summary.steps, summary.skipped) == (1, 1, {"observation that is not text": 1})


def test_a_text_mode_observation_that_is_not_text_is_a_turn_skipped(tmp_path):
    messages = [*GOOD["messages"], {"role": "assistant", "content": "```bash\nls\n```"}, {"role": "user", "content": 7}]
    summary = import_runs([_write(tmp_path / "r.traj.json", {"messages": messages})], tmp_path / "out")
    assert (summary.runs, summary.steps, summary.skipped) == (1, 1, {"observation that is not text": 1})


def test_a_mini_swe_agent_message_that_is_not_an_object_is_counted_as_skipped(tmp_path):
    messages = [1, None, "x", *GOOD["messages"], [], {"role": "user", "content": "hi"}]
    summary = import_runs([_write(tmp_path / "r.traj.json", {"messages": messages})], tmp_path / "out")
    assert (summary.runs, summary.steps, summary.skipped) == (1, 1, {"entry that is not an object": 4})


def test_a_swe_agent_entry_lacking_its_action_or_observation_is_skipped_under_what_it_lacks(tmp_path):
    entries = [{"action": "ls", "observation": "a.py"}, "ls", {"observation": "a"}, {"action": 5, "observation": "a"},
               {"action": "ls", "observation": None}, {"action": "ls"}, {"action": "ls", "observation": 5}]
    summary = import_runs([_write(tmp_path / "r.traj", {"trajectory": entries})], tmp_path / "out")
    assert (summary.runs, summary.steps) == (1, 1)
    assert summary.skipped == {"entry that is not an object": 1, "entry without an action": 1,
                               "action that is not text": 1, "entry without an observation": 2,
                               "observation that is not text": 1}


@pytest.mark.parametrize("empty", ["", "  \n\t"])
def test_an_empty_command_is_no_step_in_any_trajectory_format_and_a_bad_steps_line(tmp_path, empty):
    call = {"id": "c1", "function": {"name": "bash", "arguments": json.dumps({"command": empty})}}
    tool_mode = [*GOOD["messages"], {"role": "assistant", "content": "", "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": "c1", "content": "x"}]
    inputs = [_write(tmp_path / "swe.traj", {"trajectory": [{"action": "ls", "observation": "a"},
                                                             {"action": empty, "observation": "b"}]}),
              _write(tmp_path / "tools.traj.json", {"messages": tool_mode})]
    summary = import_runs(inputs, tmp_path / "out")
    assert (summary.runs, summary.steps, summary.skipped) == (2, 2, {"empty command": 2})
    steps = tmp_path / "s.jsonl"
    steps.write_text(json.dumps({"run": "r1", "command": "ls", "output": "a"}) + "\n"
                     + json.dumps({"run": "r1", "command": empty, "output": "b"}) + "\n", encoding="utf-8")
    summary = import_runs([steps], tmp_path / "out2")
    assert summary.runs == 0 and summary.errors[0]["reason"] == \
        "line 2: the command is empty: a step is a command that was run"


@pytest.mark.parametrize("observation, atom_lines", [
    ("<returncode>0</returncode>\n<output>\na.py\nb.py\n</output>", ["a.py", "b.py"]),
    ("<returncode>0</returncode>\n<output>\n</output>", []),
    ("<returncode>1</returncode>\n<warning>\ntoo long\n</warning><output_head>\nh1\nh2\n</output_head>\n<elided_chars>\n"
     "61 characters elided\n</elided_chars>\n<output_tail>\nt1\n</output_tail>", ["h1", "h2", "t1"]),
    ("<returncode>0</returncode>\n<output>\na.py\n", ["<returncode>0</returncode>", "<output>", "a.py"]),  # no end
    ("a.py\n<output>\n", ["a.py", "<output>"]),  # no wrapper: every line
    # a timeout or error: its <exception> first (the wrapper's lines were counted as atoms)
    ("<exception>Command 'ls' timed out\nafter 60 seconds</exception>\n<returncode>-1</returncode>\n<output>\n</output>",
     ["Command 'ls' timed out", "after 60 seconds"]),
    # the mini command's observation, a JSON object (its braces and keys were atoms, the output one line)
    ('{\n  "returncode": 0,\n  "output": "alpha\\nbeta\\n"\n}', ["alpha", "beta"]),
    ('{"returncode": 1, "output_head": "h1\\nh2", "output_tail": "t1", "elided_chars": 9, "warning": "Output too long.",'
     ' "exception_info": "boom"}', ["boom", "h1", "h2", "t1"]),
    ('{"returncode": "0", "output": "x"}', ['{"returncode": "0", "output": "x"}']),  # not the mini command's
    # an exit code of more than 20 digits: none a journal can hold, and the output still unwrapped
    (f"<returncode>{'9' * 21}</returncode>\n<output>\na.py\n</output>", ["a.py"]),
    (f"<returncode>-{'9' * 5000}</returncode>\n<output>\na.py\n</output>", ["a.py"]),
    (f'{{"returncode": {"9" * 21}, "output": "a.py\\n"}}', ["a.py"]),
    (f'{{"returncode": {"9" * 5000}, "output": "a.py\\n"}}', ["a.py"]),
    # a key given twice: which of the two a reader keeps, JSON does not settle, so it is plain text
    ('{"returncode": 0, "returncode": 1, "output": "x"}', ['{"returncode": 0, "returncode": 1, "output": "x"}']),
    ('{"returncode": 0, "output": "x", "output": "y"}', ['{"returncode": 0, "output": "x", "output": "y"}']),
])
def test_the_atoms_of_a_wrapped_observation_are_its_output_lines_and_of_any_other_all_its_lines(tmp_path, observation,
                                                                                                atom_lines):
    messages = [{"role": "assistant", "content": "```bash\nls\n```"}, {"role": "user", "content": observation}]
    import_runs([_write(tmp_path / "r.traj.json", {"messages": messages})], tmp_path / "out")
    [evidence] = evidence_of(journal(tmp_path / "out" / "r.jsonl"))
    assert evidence["atoms"] == sorted({hashlib.sha256(line.encode()).hexdigest()[:16] for line in atom_lines})
    assert evidence["observation_bytes"] == len(observation.encode())  # the hash and size: the whole observation


@pytest.mark.parametrize("observation, code", [
    ("<exception>timed out</exception>\n<returncode>-1</returncode>\n<output>\n</output>", -1),
    ('{\n  "returncode": 2,\n  "output": "no such file\\n"\n}', 2),
    (f'{{"returncode": {"9" * 20}, "output": "x"}}', int("9" * 20)),  # past a journal's integers (2**53): none
    (f'{{"returncode": {"9" * 21}, "output": "x"}}', None),
    (f"<returncode>{'9' * 21}</returncode>\n<output>\nx\n</output>", None),
    ('{"returncode": 0, "returncode": 1, "output": "x"}', None),
])
def test_the_exit_code_of_an_observation_after_an_exception_or_in_json_is_read(tmp_path, observation, code):
    messages = [{"role": "assistant", "content": "```bash\nls\n```"}, {"role": "user", "content": observation}]
    import_runs([_write(tmp_path / "r.traj.json", {"messages": messages})], tmp_path / "out")
    [evidence] = evidence_of(journal(tmp_path / "out" / "r.jsonl"))
    assert evidence.get("exit_code") == (code if code is None or abs(code) < 2**53 else None)


def test_a_swe_agent_retry_run_imports_its_chosen_attempt_and_one_without_it_is_refused_naming_attempts(tmp_path):
    chosen = {"trajectory": [{"action": "ls", "observation": "a.py"}, {"action": "cat a.py", "observation": "x"}]}
    other = {"trajectory": [{"action": "pwd", "observation": "/"}]}
    finished = _write(tmp_path / "done.traj", {"attempts": [other, chosen], **chosen})
    unfinished = _write(tmp_path / "running.traj", {"attempts": [other]})
    summary = import_runs([finished, unfinished], tmp_path / "out")
    assert (summary.runs, summary.steps) == (1, 2)
    [error] = summary.errors
    assert error["reason"].startswith("a SWE-agent retry run's attempts without the trajectory of the attempt it chose")


def test_a_run_read_as_mini_swe_agent_with_none_of_its_marks_is_named_in_a_note(tmp_path):
    """A plain chat transcript whose reply holds a bash snippet imported as an agent run without a word."""
    chat = [{"role": "user", "content": "How do I list files?"},
            {"role": "assistant", "content": "Like this:\n```bash\nls -la\n```"},
            {"role": "user", "content": "Thanks! And count lines?"}]
    agent = [{"role": "assistant", "content": "```bash\nls\n```"},
             {"role": "user", "content": "<returncode>0</returncode>\n<output>\na.py\n</output>"}]
    summary = import_runs([_write(tmp_path / "chat.json", chat), _write(tmp_path / "agent.traj.json", agent)],
                          tmp_path / "out")
    assert (summary.runs, summary.runs_unmarked) == (2, ["chat"])
    done = CliRunner().invoke(main, ["runs", "import", str(tmp_path / "chat.json"), "--out", str(tmp_path / "cli")])
    assert done.exit_code == 0 and done.stderr == (
        "note: 1 run(s) read as mini-swe-agent show none of its marks (no trajectory_format, no observation in its "
        "<returncode> wrapper or with an exit code): check they are agent runs: chat\n")


def test_a_jsonl_file_that_is_no_steps_file_is_refused_saying_how_jsonl_is_read(tmp_path):
    (tmp_path / "report.jsonl").write_text(json.dumps({"instance_id": "x", "resolved": True}) + "\n")
    summary = import_runs([tmp_path / "report.jsonl"], tmp_path / "out")
    assert summary.errors[0]["reason"] == (
        "line 1: needs the string keys run, command and output (a *.jsonl file is read in the steps format: one "
        "step per line; an agent's other JSON Lines files, such as predictions, are no trajectory)")


def test_a_file_read_as_steps_because_asked_is_not_said_to_be_read_so_for_its_name(tmp_path):
    (tmp_path / "run.traj").write_text(json.dumps({"trajectory": []}) + "\n")
    summary = import_runs([tmp_path / "run.traj"], tmp_path / "out", fmt="steps")
    assert summary.errors[0]["reason"] == (
        "line 1: needs the string keys run, command and output (the steps format: one step per line; an agent's "
        "other JSON Lines files, such as predictions, are no trajectory) (read as --format steps, as asked: "
        "without it, the file's name and content choose)")


# --- an agent's own output folder: a subfolder per run, its predictions beside them ---------------
def _agent_output(root: Path) -> Path:
    """mini-swe-agent's layout: OUT/<instance>/<instance>.traj.json, OUT/preds.json, a log."""
    for run in ("b-2", "a-1"):
        _write(root / run / f"{run}.traj.json", {**GOOD, "instance_id": run, "trajectory_format": "mini-swe-agent-1"})
    _write(root / "preds.json", {run: {"instance_id": run, "model_name_or_path": "m", "model_patch": "diff"}
                                 for run in ("a-1", "b-2")})
    (root / "minisweagent.log").write_text("log\n")
    return root


def test_a_folder_is_read_without_its_subfolders_unless_recursive_and_a_note_names_the_folder(tmp_path):
    """An agent writes each run into a folder of its own: reading only the top level found its
    predictions alone, refused as 'another agent's run', and nothing said where the runs were."""
    root = _agent_output(tmp_path / "output")
    with pytest.raises(LedgerError) as caught:
        import_runs([root], tmp_path / "flat")
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.message == (f"no run to import: {root / 'preds.json'} holds an agent's predictions or an "
                                    f"evaluation's report, not a run; {root} holds trajectories in subfolders "
                                    f"({root / 'a-1' / 'a-1.traj.json'}): give --recursive")
    assert not (tmp_path / "flat").exists()
    done = CliRunner().invoke(main, ["runs", "import", str(root), "--out", str(tmp_path / "flat")])
    assert (done.exit_code, done.stdout) == (1, "")
    assert done.stderr == f"error: INVALID_ARGUMENT: {caught.value.message}\n"
    done = CliRunner().invoke(main, ["runs", "import", str(root), "-r", "--out", str(tmp_path / "cli")])
    assert done.exit_code == 0 and sorted(p.name for p in (tmp_path / "cli").iterdir()) == ["a-1.jsonl", "b-2.jsonl"]
    summary = import_runs([root], tmp_path / "deep", recursive=True)
    assert (summary.runs, summary.errors, summary.subfolders_not_read) == (2, [], [])
    assert summary.journals == [str(tmp_path / "deep" / "a-1.jsonl"), str(tmp_path / "deep" / "b-2.jsonl")]
    assert summary.not_runs == [str(root / "preds.json")]
    _write(root / "c-3.traj.json", {**GOOD, "instance_id": "c-3"})  # a run at the top as well: imported, and a note
    summary = import_runs([root], tmp_path / "top")
    assert (summary.runs, summary.subfolders_not_read) == (1, [str(root)])
    done = CliRunner().invoke(main, ["runs", "import", str(root), "--out", str(tmp_path / "top")])
    assert done.exit_code == 0
    assert done.stderr.splitlines()[-1] == (f"note: the subfolders of {root} hold trajectories, not read: give "
                                            "--recursive to read them")
    (root / "preds.json").unlink()
    (root / "c-3.traj.json").unlink()
    with pytest.raises(LedgerError) as caught:
        import_runs([root], tmp_path / "none")
    assert caught.value.message.endswith(f"; {root} holds them in subfolders ({root / 'a-1' / 'a-1.traj.json'}): "
                                         "give --recursive")


def test_recursive_reads_every_depth_in_name_order_and_follows_no_link_to_a_folder(tmp_path):
    root = tmp_path / "in"
    for name in ("z/deep/er/r4", "a/r1", "a/b/r2", "m/r3"):
        run = name.rpartition("/")[2]
        _write(root / f"{name}.traj.json", {**GOOD, "instance_id": run})
    elsewhere = _write(tmp_path / "elsewhere" / "r9.traj.json", {**GOOD, "instance_id": "r9"}).parent
    (root / "link").symlink_to(elsewhere)
    summary = import_runs([root], tmp_path / "out", recursive=True)
    assert [Path(j).stem for j in summary.journals] == ["r2", "r1", "r3", "r4"]  # a/b/ sorts before a/r1
    with pytest.raises(LedgerError) as caught:
        import_runs([root], tmp_path / "out2", recursive="yes")
    assert caught.value.code == "INVALID_ARGUMENT"


@pytest.mark.parametrize("predictions", [
    {"a-1": {"instance_id": "a-1", "model_name_or_path": "m", "model_patch": "diff"}},
    [{"instance_id": "a-1", "model_patch": "diff"}, {"instance_id": "b-2", "model_patch": ""}],
    {"instance_id": "a-1", "model_patch": "diff"},
])
def test_an_agents_predictions_are_no_run_and_are_left_out_with_a_note(tmp_path, predictions):
    _write(tmp_path / "in" / "preds.json", predictions)
    _write(tmp_path / "in" / "r1.traj.json", {**GOOD, "instance_id": "r1"})
    (tmp_path / "in" / "all_preds.jsonl").write_text("".join(
        json.dumps({"instance_id": run, "model_patch": "diff", "model_name_or_path": "m"}) + "\n" for run in "ab"))
    done = CliRunner().invoke(main, ["runs", "import", str(tmp_path / "in"), "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    assert done.stdout == f"imported 1 run, 1 step into {tmp_path / 'out'}; turns skipped: none\n"
    assert done.stderr == (f"note: 2 file(s) hold an agent's predictions or an evaluation's report, no run: "
                           f"left out: {tmp_path / 'in' / 'all_preds.jsonl'}, {tmp_path / 'in' / 'preds.json'}\n")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["r1.jsonl"]


@pytest.mark.parametrize("not_predictions", [
    {"messages": [], "model_patch": "x"}, {"trajectory": [], "model_patch": "x"}, {}, [], {"a": {"patch": "x"}},
])
def test_a_file_is_taken_for_predictions_only_with_a_model_patch_and_no_step(tmp_path, not_predictions):
    from ledger.runs.formats import is_no_run

    assert not is_no_run(not_predictions)


def test_a_run_prefix_lets_runs_of_the_same_tasks_by_two_agents_share_a_folder_and_a_simulation(tmp_path):
    """Two models' runs of one task have the same instance_id (read from inside the file): the second
    was refused as 'already imported', and simulate refused two journals of one run id."""
    for model in ("gpt", "kimi"):
        _write(tmp_path / model / "t-1" / "t-1.traj.json", {**GOOD, "instance_id": "t-1"})
    outcomes = tmp_path / "outcomes.csv"
    outcomes.write_text("instance_id,outcome\nt-1,resolved\nt-2,unresolved\n")
    clash = import_runs([tmp_path / "gpt", tmp_path / "kimi"], tmp_path / "clash", recursive=True)
    assert clash.runs == 1
    assert clash.errors[0]["reason"] == (f"run id 't-1' was already imported from {tmp_path / 'gpt' / 't-1' / 't-1.traj.json'}"
                                         "; runs of the same tasks by other agents or models: import each set with a "
                                         "--run-prefix of its own (run_prefix= in Python)")
    gpt = import_runs([tmp_path / "gpt"], tmp_path / "out", recursive=True, run_prefix="gpt.", outcomes=outcomes)
    done = CliRunner().invoke(main, ["runs", "import", str(tmp_path / "kimi"), "-r", "--run-prefix", "kimi-",
                                     "--out", str(tmp_path / "out"), "--outcomes", str(outcomes)])
    assert done.exit_code == 0, done.output
    assert done.stderr.splitlines()[-1] == ("note: give simulate --frontier --task-prefix kimi- (and each other "
                                            "agent's prefix), so that its held-out folds keep each task's runs together")
    assert (gpt.runs, gpt.runs_without_outcome, gpt.outcomes_without_run) == (1, [], ["t-2"])
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpt.t-1.jsonl", "kimi-t-1.jsonl"]
    lines = journal(tmp_path / "out" / "gpt.t-1.jsonl")
    assert lines[0]["hypotheses"] == [{"statement": "agent run gpt.t-1"}]
    assert lines[-1] == {"op": "record_outcome", "outcome": "resolved", "source": "outcomes file outcomes.csv"}
    report = simulate([tmp_path / "out"])
    assert sorted((r.run, r.outcome, r.error) for r in report.runs) == [("gpt.t-1", "resolved", None),
                                                                         ("kimi-t-1", "resolved", None)]
    bare = import_runs([tmp_path / "gpt"], tmp_path / "bare", recursive=True, run_prefix="gpt.")
    assert bare.runs == 1
    done = CliRunner().invoke(main, ["simulate", str(tmp_path / "bare"), "--outcomes", str(outcomes)])
    assert done.exit_code == 0
    assert done.stderr.splitlines()[-1] == (
        "note: journal 'gpt.t-1' looks like run 't-1' of --outcomes imported with the --run-prefix 'gpt.': the "
        "outcomes name runs as their journals do, prefix included (or give them to 'ledger runs import --outcomes')")
    done = CliRunner().invoke(main, ["simulate", str(tmp_path / "out"), "--outcomes", str(outcomes)])
    assert done.exit_code == 0  # the journals carry their outcomes: the note still says why none matched
    assert "note: journal 'gpt.t-1' looks like run 't-1' of --outcomes imported with the --run-prefix 'gpt.'" in done.stderr
    usage = CliRunner().invoke(main, ["runs", "import", str(tmp_path / "gpt"), "-r", "--run-prefix", "a/b",
                                      "--out", str(tmp_path / "never")])
    assert usage.exit_code == 2 and "Invalid value for '--run-prefix': the run prefix 'a/b' must start" in usage.stderr
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("prefix, message", [
    ("-x", "the run prefix '-x' must start a plain file name"), ("a/b", "the run prefix 'a/b' must start"),
    (3, "the run prefix 3 must start"),
])
def test_a_run_prefix_that_cannot_start_a_run_id_is_refused_before_anything_is_read(tmp_path, prefix, message):
    source = _write(tmp_path / "a.traj.json", GOOD)
    with pytest.raises(LedgerError) as caught:
        import_runs([source], tmp_path / "out", run_prefix=prefix)
    assert caught.value.code == "INVALID_ARGUMENT" and caught.value.message.startswith(message)
    assert not (tmp_path / "out").exists()


def test_a_run_id_is_checked_before_its_prefix_and_the_two_together_stay_within_128_characters(tmp_path):
    empty = _write(tmp_path / "e.traj.json", {**GOOD, "instance_id": ""})
    long = _write(tmp_path / "l.traj.json", {**GOOD, "instance_id": "r" * 126})
    summary = import_runs([empty, long], tmp_path / "out", run_prefix="abc")
    assert [e["reason"] for e in summary.errors] == [
        "run id '' (0 characters) is not a plain file name: 1 to 128 letters, digits, '.', '_', '-', the first a "
        "letter or digit",
        f"run id '{'r' * 80}'… with the prefix 'abc' has 129 characters, more than the 128 a run id may have"]


def test_recursive_reads_a_tree_deeper_than_the_interpreters_recursion_limit(tmp_path):
    """A tree about 1,000 folders deep made the reading recurse past Python's limit (a traceback). The
    limit is lowered here rather than the tree made that deep: pytest's own clean-up recurses too."""
    import inspect

    deep = tmp_path / "in"
    deep.mkdir()
    for _ in range(400):
        deep = deep / "d"
        deep.mkdir()
    _write(deep / "r.traj.json", {**GOOD, "instance_id": "r"})
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 200)
    try:
        summary = import_runs([tmp_path / "in"], tmp_path / "out", recursive=True)
    finally:
        sys.setrecursionlimit(limit)
    assert (summary.runs, summary.errors) == (1, [])


def test_a_subfolder_that_cannot_be_listed_fails_alone_and_the_other_runs_are_imported(tmp_path, monkeypatch):
    from conftest import deny_reading

    _write(tmp_path / "in" / "a" / "r1.traj.json", {**GOOD, "instance_id": "r1"})
    _write(tmp_path / "in" / "b" / "r2.traj.json", {**GOOD, "instance_id": "r2"})
    deny_reading(monkeypatch, tmp_path / "in" / "b")
    try:
        summary = import_runs([tmp_path / "in"], tmp_path / "out", recursive=True)
        assert summary.runs == 1
        assert summary.errors == [{"file": str(tmp_path / "in" / "b"), "code": "STORAGE_ERROR",
                                   "reason": "cannot list this folder: Permission denied"}]
        deny_reading(monkeypatch, tmp_path / "in" / "a")
        with pytest.raises(LedgerError) as caught:  # nothing else to import: the listing's error
            import_runs([tmp_path / "in"], tmp_path / "out2", recursive=True)
        assert caught.value.code == "STORAGE_ERROR"
        assert caught.value.message.startswith(f"no trajectory to import, and the folder {tmp_path / 'in' / 'a'} "
                                               "cannot be listed: Permission denied")
    finally:
        (tmp_path / "in" / "a").chmod(0o755)
        (tmp_path / "in" / "b").chmod(0o755)


def test_the_output_folder_inside_the_folder_read_is_passed_over(tmp_path):
    """Its journals were counted as trajectories not read (a note saying to give --recursive, which was
    then refused), and read as inputs by a second recursive import."""
    root = _agent_output(tmp_path / "output")
    for _ in range(2):
        summary = import_runs([root], root / "journals", recursive=True)
        assert (summary.runs, summary.errors) == (2, [])
    _write(root / "top.traj.json", {**GOOD, "instance_id": "top"})
    (root / "a-1").rename(tmp_path / "a-1")
    (root / "b-2").rename(tmp_path / "b-2")
    summary = import_runs([root], root / "journals")
    assert (summary.runs, summary.subfolders_not_read) == (1, [])


@pytest.mark.parametrize("prefix", ["", "x."])
def test_a_run_id_is_free_again_once_the_input_that_brought_it_failed(tmp_path, prefix):
    """A run whose input failed after its id was taken is not imported: another input may bring it. With a
    --run-prefix the failed run's id stayed taken (the id was let go without its prefix)."""
    _write(tmp_path / "in" / "a.traj.json", {"instance_id": "r1", "messages": 5})  # fails once its run began
    _write(tmp_path / "in" / "b.traj.json", {**GOOD, "instance_id": "r1"})
    summary = import_runs([tmp_path / "in"], tmp_path / "out", run_prefix=prefix)
    assert summary.runs == 1 and [e["file"] for e in summary.errors] == [str(tmp_path / "in" / "a.traj.json")]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f"{prefix}r1.jsonl"]


def test_run_ids_that_differ_only_in_letter_case_are_refused_as_one_file(tmp_path):
    """Their journals would be one file where file names ignore case (macOS, Windows): the second is
    refused as a duplicate is, naming the first; ids that differ otherwise are both imported."""
    for name, run in (("a", "Foo-1"), ("b", "foo-1"), ("c", "foo-2")):
        _write(tmp_path / "in" / f"{name}.traj.json", {**GOOD, "instance_id": run})
    summary = import_runs([tmp_path / "in"], tmp_path / "out")
    assert summary.runs == 2
    assert summary.errors == [{"file": str(tmp_path / "in" / "b.traj.json"), "code": "INVALID_ARGUMENT", "reason": (
        f"run id 'foo-1' differs from the run id 'Foo-1' imported from {tmp_path / 'in' / 'a.traj.json'} only in "
        "letter case: their journals would be one file where file names ignore case (macOS, Windows); give the "
        "runs ids that differ otherwise")}]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["Foo-1.jsonl", "foo-2.jsonl"]
    _write(tmp_path / "more" / "a.traj.json", {**GOOD, "instance_id": "FOO-2"})  # an earlier import's journal
    _write(tmp_path / "more" / "b.traj.json", {**GOOD, "instance_id": "Foo-1"})  # the same id: imported again
    summary = import_runs([tmp_path / "more"], tmp_path / "out")
    assert summary.runs == 1 and [e["reason"] for e in summary.errors] == [
        f"run id 'FOO-2' differs from the journal foo-2.jsonl that {tmp_path / 'out'} holds only in letter case: the "
        "two would be one file where file names ignore case (macOS, Windows); import into another folder, or give "
        "the runs ids that differ otherwise"]


def test_a_subfolder_holding_an_earlier_imports_journals_is_no_trajectory_not_read(tmp_path):
    """An earlier import's output under the folder read, but not this import's output folder, was
    counted as trajectories not read: the note said to give --recursive, which would read each journal
    as a steps file and fail them all. A journal (first line an operation) is passed over; a trajectory
    in another subfolder still gets the note."""
    root = tmp_path / "in"
    _write(root / "top.traj.json", {**GOOD, "instance_id": "top"})
    import_runs([root], root / "earlier")
    assert sorted(p.name for p in (root / "earlier").iterdir()) == ["top.jsonl"]
    summary = import_runs([root], tmp_path / "out")
    assert (summary.runs, summary.subfolders_not_read) == (1, [])
    _write(root / "runs" / "a-1.traj.json", {**GOOD, "instance_id": "a-1"})
    summary = import_runs([root], tmp_path / "out2")
    assert (summary.runs, summary.subfolders_not_read) == (1, [str(root)])


@pytest.mark.parametrize("name, text", [("preds.json", "{}"), ("preds.json", "[]"), ("all_preds.jsonl", ""),
                                        ("PREDS.json", "{}")])
def test_an_agents_predictions_file_holding_none_yet_is_left_out_too(tmp_path, name, text):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_text(text)
    _write(tmp_path / "in" / "r1.traj.json", {**GOOD, "instance_id": "r1"})
    summary = import_runs([tmp_path / "in"], tmp_path / "out")
    assert (summary.runs, summary.errors, summary.not_runs) == (1, [], [str(tmp_path / "in" / name)])
    (tmp_path / "in" / "other.json").write_text(text or "{}")  # not a predictions file's name: a failed run
    assert [e["file"] for e in import_runs([tmp_path / "in"], tmp_path / "out").errors] == [
        str(tmp_path / "in" / "other.json")]


@pytest.mark.parametrize("length, refused", [(126, False), (127, False), (128, True), (129, True)])
def test_a_run_prefix_leaves_room_for_a_run_id(tmp_path, length, refused):
    source = _write(tmp_path / "a.traj.json", {**GOOD, "instance_id": "r"})
    if not refused:
        assert Path(import_runs([source], tmp_path / "out", run_prefix="p" * length).journals[0]).name == \
            "p" * length + "r.jsonl"
        return
    with pytest.raises(LedgerError) as caught:
        import_runs([source], tmp_path / "out", run_prefix="p" * length)
    assert caught.value.message == (f"the run prefix has {length} characters: a run id has at most 128, so the "
                                    "prefix at most 127 (one left for the run's own id)")


@pytest.mark.parametrize("report", [
    {"django__django-11099": {"patch_is_None": False, "patch_exists": True, "patch_successfully_applied": True,
                              "resolved": True, "tests_status": {"FAIL_TO_PASS": {"success": ["t"], "failure": []}}}},
    {"total_instances": 2, "resolved_ids": ["a-1"], "unresolved_ids": ["b-2"]},
])
def test_an_evaluations_report_in_an_agents_output_folder_is_no_run_and_is_left_out(tmp_path, report):
    """SWE-bench's report.json beside the runs failed as 'another agent's run', and the import exited 1."""
    root = _agent_output(tmp_path / "output")
    _write(root / "a-1" / "report.json", report)
    summary = import_runs([root], tmp_path / "out", recursive=True)
    assert (summary.runs, summary.errors) == (2, [])
    assert summary.not_runs == [str(root / "a-1" / "report.json"), str(root / "preds.json")]


def test_outcomes_and_the_paths_of_several_cases_may_be_bytes_as_every_single_path_may(tmp_path):
    source = _write(tmp_path / "a.traj.json", {**GOOD, "instance_id": "r1"})
    (tmp_path / "outcomes.csv").write_text("instance_id,outcome\nr1,resolved\n")
    summary = import_runs([source], tmp_path / "out", outcomes=os.fsencode(tmp_path / "outcomes.csv"))
    assert journal(tmp_path / "out" / "r1.jsonl")[-1]["outcome"] == "resolved" and summary.runs == 1
    report = simulate([os.fsencode(tmp_path / "out")], outcomes=os.fsencode(tmp_path / "outcomes.csv"))
    assert [r.outcome for r in report.runs] == ["resolved"]


@pytest.mark.parametrize("progress", [lambda done: None, lambda done, total, more: None, min])
def test_a_progress_function_of_another_shape_is_refused_before_anything_is_read(tmp_path, progress):
    """A one-argument function failed with Python's TypeError after the first journal was written."""
    source = _write(tmp_path / "a.traj.json", GOOD)
    if progress is min:  # no signature Python can read: taken
        assert import_runs([source], tmp_path / "out", progress=progress).runs == 1
        return
    with pytest.raises(LedgerError) as caught:
        import_runs([source], tmp_path / "out", progress=progress)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.message.startswith("progress must be a function of 2 positional arguments, got")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, text", [
    ("deep.traj.json", "[" * 100_000 + "]" * 100_000),
    ("deep.jsonl", '{"instance_id": "a", "messages": ' + "[" * 100_000 + "]" * 100_000 + "}\n"),
])
def test_json_nested_past_what_python_reads_is_named_as_such_in_the_files_words(tmp_path, name, text):
    """A trajectory or steps line nested deeper than Python's parser goes is that file's error, said of
    the file (it was Python's "maximum recursion depth exceeded while decoding a JSON array")."""
    (tmp_path / name).write_text(text)
    summary = import_runs([tmp_path / name], tmp_path / "out")
    assert summary.runs == 0 and [error["code"] for error in summary.errors] == ["INVALID_ARGUMENT"]
    assert summary.errors[0]["reason"] == ("JSON nested deeper than Python reads (thousands of levels); no "
                                           "trajectory nests so deep")
