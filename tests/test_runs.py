"""``ledger runs import`` (docs/runs.md): real trajectories of each format become journals of derived
facts; the expected steps, hashes and atoms are computed here from the raw files, independently of
the importer."""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import (AnalysisConfig, Case, LedgerError, frontier, import_runs, load_policy, read_outcomes, simulate,
                    vary, verify_case)
from ledger.runs import run_files, trajectories
from ledger.runs.actions import ActionMap, classify
from ledger.runs.formats import OTHER_AGENTS
from ledger.package_tools.journal import apply_journal
from ledger_cli.main import main

from conftest import REPO, TRAJECTORIES

RUNS = Path(__file__).parent / "data" / "runs"
RAW = RUNS / "mini-swe-agent-verified"
PUBLIC = RUNS / "public"
RAW_FILES = sorted(RAW.glob("*.traj.json.gz"))


# --- an independent reading of the raw files -------------------------------------------------
def expected_steps(messages: list[dict]) -> list[tuple[str, str]]:
    """(command, observation) of each assistant message with exactly one fenced bash block that a
    non-assistant message follows (docs/runs.md)."""
    steps = []
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        blocks = re.findall(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", message["content"], re.S)
        if len(blocks) == 1 and index + 1 < len(messages) and messages[index + 1]["role"] != "assistant":
            steps.append((blocks[0], messages[index + 1]["content"]))
    return steps


#: mini-swe-agent's two wrappers (docs/runs.md): the output whole, or a long one's head and tail.
WHOLE = re.compile(r"<returncode>-?\d+</returncode>\n<output>\n(.*)</output>", re.S)
ELIDED = re.compile(r"<returncode>-?\d+</returncode>\n<warning>\n.*?</warning>\s*<output_head>\n(.*)</output_head>\n"
                    r"<elided_chars>\n\d+ characters elided\n</elided_chars>\n<output_tail>\n(.*)</output_tail>", re.S)


def facts(observation: str, wrapped: bool = True) -> dict:
    """The evidence of an observation: its hash and size whole, its atoms the lines of the output
    mini-swe-agent's wrapper holds (``wrapped``: the format has one), else of all of it."""
    text = "\n".join(line.rstrip() for line in observation.split("\n")).encode()
    whole, elided = WHOLE.fullmatch(observation.rstrip()), ELIDED.fullmatch(observation.rstrip())
    output = (whole.group(1) if whole else elided.group(1) + "\n" + elided.group(2) if elided else None) \
        if wrapped else None
    lines = {line.rstrip() for line in (observation if output is None else output).split("\n")} - {""}
    return {"observation_sha256": hashlib.sha256(text).hexdigest(), "observation_bytes": len(text),
            "atoms": sorted({hashlib.sha256(line.encode()).hexdigest()[:16] for line in lines})}


def journal(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def evidence_of(lines: list[dict]) -> list[dict]:
    return [line["evidence"] for line in lines if line["op"] == "record_result"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("runs")
    return out, import_runs([RAW], out)


# --- the bundled journals, reproduced -----------------------------------------------------------
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_importing_the_raw_runs_reproduces_every_bundled_journals_steps_and_observation_hashes(imported):
    out, summary = imported
    assert (summary.runs, summary.steps, summary.errors) == (100, 3870, [])
    assert len(RAW_FILES) == 100
    actions_differ = 0
    for bundled_path in sorted(TRAJECTORIES.glob("*.jsonl")):
        bundled, ours = journal(bundled_path), journal(out / bundled_path.name)
        assert [(e["observation_sha256"], e["observation_bytes"]) for e in evidence_of(ours)] == \
            [(e["observation_sha256"], e["observation_bytes"]) for e in evidence_of(bundled)], bundled_path.name
        reserves = [(l["action_id"], l["action"]) for l in ours if l["op"] == "reserve"]
        bundled_reserves = [(l["action_id"], l["action"]) for l in bundled if l["op"] == "reserve"]
        assert [a for a, _ in reserves] == [a for a, _ in bundled_reserves]
        actions_differ += sum(x != y for x, y in zip(reserves, bundled_reserves))
    assert actions_differ == 3  # docs/runs.md: 3,867 of 3,870 actions as the bundled journals name them


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_each_step_holds_the_hash_size_and_atoms_computed_from_the_raw_observation(imported):
    out, _ = imported
    for raw in RAW_FILES[::10]:
        data = json.loads(gzip.decompress(raw.read_bytes()))
        expected = [facts(observation) for _, observation in expected_steps(data["messages"])]
        got = evidence_of(journal(out / f"{data['instance_id']}.jsonl"))
        assert [{k: e[k] for k in ("observation_sha256", "observation_bytes", "atoms")} for e in got] == expected
        codes = [re.match(r"\s*<returncode>(-?\d+)</returncode>", o) for _, o in expected_steps(data["messages"])]
        assert [e.get("exit_code") for e in got] == [int(c.group(1)) if c else None for c in codes]
        assert sum(c is not None for c in codes) * 10 >= len(codes) * 9  # timeouts and the submission have none


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_journal_keeps_no_text_of_the_run(imported):
    out, _ = imported
    for raw in RAW_FILES[::7]:
        data = json.loads(gzip.decompress(raw.read_bytes()))
        text = (out / f"{data['instance_id']}.jsonl").read_text(encoding="utf-8")
        for line in journal(out / f"{data['instance_id']}.jsonl"):
            assert set(line) <= {"op", "hypotheses", "units_per_hypothesis", "to", "hypothesis", "action_id",
                                 "action", "evidence", "semantic_score", "reason"}
            assert set(line.get("evidence", {})) <= {"observation_sha256", "observation_bytes", "atoms",
                                                     "exit_code", "target"}
        targets = [e["target"] for e in evidence_of(journal(out / f"{data['instance_id']}.jsonl")) if "target" in e]
        for message in data["messages"][1:]:
            for piece in message["content"].split("\n"):
                piece = piece.strip()
                if len(piece) >= 12 and not any(piece in target for target in targets):
                    assert json.dumps(piece)[1:-1] not in text, piece


@pytest.mark.slow  # over 2.3 s in the default run: the slow lane (.ci/run) runs it
def test_the_same_input_gives_byte_identical_journals(imported, tmp_path):
    out, _ = imported
    again = tmp_path / "again"
    import_runs(RAW_FILES[:5], again)
    import_runs(RAW_FILES[:5], again)  # and an existing journal is replaced, not appended to
    for path in sorted(again.iterdir()):
        assert path.read_bytes() == (out / path.name).read_bytes()
    assert sorted(p.name for p in again.iterdir()) == sorted(f"{p.name.split('.')[0]}.jsonl" for p in RAW_FILES[:5])


def test_turns_that_are_not_steps_are_counted_by_reason_and_skipped(imported):
    _, summary = imported
    several = 0
    for raw in RAW_FILES:
        messages = json.loads(gzip.decompress(raw.read_bytes()))["messages"]
        several += sum(len(re.findall(r"```bash\s*\n(.*?)\n```", m["content"], re.S)) > 1
                       for m in messages if m["role"] == "assistant")
    assert summary.skipped == {"several bash blocks": several} and several == 120


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_imported_journals_replay_as_the_bundled_ones_do_under_apply(imported, tmp_path):
    out, _ = imported
    report = simulate([out], jobs=1)
    bundled = simulate([TRAJECTORIES], jobs=1)
    assert report.policies[0]["steps_taken"] == bundled.policies[0]["steps_taken"]


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_novelty_over_atoms_counts_the_output_lines_not_the_wrapper_with_the_figures_docs_give(imported):
    """docs/runs.md, "Novelty over atoms": the imported runs under --vary novelty_mode=evidence,atoms."""
    out, _ = imported
    runs = ledger_cli_rows(["simulate", str(out), "--vary", "novelty_mode=evidence,atoms", "--csv",
                            "--outcomes", str(TRAJECTORIES / "outcomes.csv")])
    assert runs["novelty_mode=evidence", "(all)"][4:10] == ["3325", "545", "29380", "8932", "22", "0"]
    assert runs["novelty_mode=atoms", "(all)"][4:] == ["2330", "1540", "20505", "5277", "69", "0", "205"]
    assert runs["novelty_mode=atoms", "resolved"][4:] == ["1703", "1004", "15085", "3841", "49", "0", "203"]
    assert runs["novelty_mode=atoms", "failed"][4:] == ["627", "536", "5420", "1436", "20", "0", "208"]


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_atoms_frontier_on_the_imported_runs_gives_the_figures_docs_give(imported, tmp_path):
    """docs/simulate.md, "On the bundled runs", under novelty_mode = atoms (the figures went stale when
    the wrapper's lines stopped counting as atoms)."""
    out, _ = imported
    base = tmp_path / "atoms.toml"
    base.write_text('novelty_mode = "atoms"\n' + (REPO / "config" / "budget.example.toml").read_text())
    policies = [load_policy(base), *vary(load_policy(base), [("max_low_information_steps", [6, 10, 15, 20, 30]),
                                                             ("units_per_hypothesis", [300, 500, 100000])])]
    outcomes = TRAJECTORIES / "outcomes.csv"
    [resolved] = [row for row in simulate([out], policies[:1], outcomes).policies[0]["by_outcome"].items()
                  if row[0] == "resolved"]
    assert (resolved[1]["runs"], resolved[1]["runs_abandoned"]) == (74, 49)
    doc = " ".join((REPO / "docs" / "simulate.md").read_text().split())
    shown = []
    for pct in (5, 10):
        report = frontier([out], policies, outcomes, constraint=f"resolved={pct}%", samples=1000 if pct == 10 else 0)
        choice, held = report.choice, report.choice["held_out"]
        shown.append((choice["policy"], choice["in_sample"]["units_saved_pct"], choice["in_sample"]["good_stopped_pct"],
                      held["units_saved_pct"], held["good_stopped_pct"]))
    assert shown == [
        ("max_low_information_steps=10 units_per_hypothesis=100000", 1.06, 2.71,
         {"mean": 2.13, "min": 0, "max": 5.58}, {"mean": 5.18, "min": 0, "max": 12.5}),
        ("max_low_information_steps=10 units_per_hypothesis=500", 5.55, 8.11,
         {"mean": 5.38, "min": 2.11, "max": 9.47}, {"mean": 7.68, "min": 0, "max": 12.5})]
    assert report.choice["bootstrap"]["units_saved_pct"][:2] == [1.43, 9.64]
    assert "streak of 3 stops 49 of 74 resolved runs" in doc and "5.55 % saved, 6 of 74 resolved stopped" in doc
    assert "1.06 % saved, 2 of 74 resolved runs stopped (2.71 %)" in doc and "bootstrap 1.43 to 9.64 % saved" in doc


def ledger_cli_rows(args: list[str]) -> dict[tuple[str, str], list[str]]:
    """``ledger ARGS`` (a ``--csv`` table) as rows keyed by their first two cells."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    rows = [line.split(",") for line in result.stdout.splitlines()[1:]]
    return {(row[0], row[1]): row for row in rows}


# --- the other formats ----------------------------------------------------------------------
def test_public_mini_swe_agent_files_bare_message_lists_and_mswea_fences(tmp_path):
    summary = import_runs([PUBLIC / "local.traj.json", PUBLIC / "github_issue.traj.json"], tmp_path)
    assert (summary.runs, summary.steps, summary.skipped) == (2, 12, {})
    for name in ("local", "github_issue"):
        messages = json.loads((PUBLIC / f"{name}.traj.json").read_text(encoding="utf-8"))
        expected = [facts(o) for _, o in expected_steps(messages)]
        got = evidence_of(journal(tmp_path / f"{name}.jsonl"))
        assert [{k: e[k] for k in ("observation_sha256", "observation_bytes", "atoms")} for e in got] == expected
    local = evidence_of(journal(tmp_path / "local.jsonl"))
    assert local[1] == {"observation_sha256": hashlib.sha256(b"").hexdigest(), "observation_bytes": 0, "atoms": []}
    issue = journal(tmp_path / "github_issue.jsonl")
    assert [l["action"] for l in issue if l["op"] == "reserve"][:3] == ["source.read_context", "source.find_text",
                                                                        "source.find_text"]
    assert evidence_of(issue)[2]["target"] == "tests"


def test_a_gzipped_swe_agent_traj_makes_a_step_of_each_trajectory_entry(tmp_path):
    path = PUBLIC / "swe-agent__test-repo-i1.traj.gz"
    summary = import_runs([path], tmp_path)
    entries = json.loads(gzip.decompress(path.read_bytes()))["trajectory"]
    lines = journal(tmp_path / "swe-agent__test-repo-i1.jsonl")
    assert summary.steps == len(entries) == 5
    assert [{k: e[k] for k in ("observation_sha256", "observation_bytes", "atoms")} for e in evidence_of(lines)] == \
        [facts(e["observation"]) for e in entries]
    assert all("exit_code" not in e for e in evidence_of(lines))
    assert [l["action"] for l in lines if l["op"] == "reserve"] == [
        "source.find_text", "source.read_context", "test.automated", "test.automated", "test.automated"]


def test_tool_call_mode_makes_a_step_of_each_answered_bash_call(tmp_path):
    summary = import_runs([RUNS / "toolcall.traj.json"], tmp_path)
    assert (summary.runs, summary.steps, summary.skipped) == (1, 4, {"no bash block": 1})
    data = json.loads((RUNS / "toolcall.traj.json").read_text(encoding="utf-8"))
    tools = [m for m in data["messages"] if m["role"] == "tool"]
    lines = journal(tmp_path / "toolcall-demo-1.jsonl")
    assert [e["exit_code"] for e in evidence_of(lines)] == [0, 0, 0, 1]
    assert [{k: e[k] for k in ("observation_sha256", "observation_bytes", "atoms")} for e in evidence_of(lines)] == \
        [facts(m["content"]) for m in tools]
    assert [(l["action"]) for l in lines if l["op"] == "reserve"] == [
        "source.find_text", "source.read_context", "source.read_context", "test.automated"]
    assert [e.get("target") for e in evidence_of(lines)] == [None, "calc.py", "test_calc.py", None]


def _tool_call(call_id, command):
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


SHARED, UNANSWERED = "tool call sharing its id", "tool call without a result"


@pytest.mark.parametrize("calls, replies, steps, skipped", [
    ([("c1", "ls"), ("c1", "cat a")], [("c1", "A"), ("c1", "L")], [], {SHARED: 2}),  # two calls, one id
    ([("c1", "ls"), ("c2", "cat a")], [("c1", "A"), ("c1", "L"), ("c2", "B")], ["B"], {SHARED: 1}),  # c1 twice
    ([(["x"], "ls"), ("c2", "cat a")], [(["x"], "A"), ("c2", "B")], ["A", "B"], {}),  # an id that is a list
    ([(1, "ls"), (True, "cat a")], [(1, "A"), (True, "B")], ["A", "B"], {}),  # equal in Python, not in JSON
    ([(2, "ls")], [(2.0, "A")], [], {UNANSWERED: 1}),  # 2.0 answers no call 2
])
def test_a_tool_call_whose_id_is_shared_is_skipped_and_counted_not_given_another_calls_answer(tmp_path, calls,
                                                                                             replies, steps, skipped):
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "t"},
                {"role": "assistant", "content": None, "tool_calls": [_tool_call(i, c) for i, c in calls]},
                *[{"role": "tool", "tool_call_id": i, "content": text} for i, text in replies]]
    (tmp_path / "dup.traj.json").write_text(json.dumps({"instance_id": "dup", "messages": messages}))
    summary = import_runs([tmp_path / "dup.traj.json"], tmp_path / "out")
    assert summary.skipped == skipped
    lines = journal(tmp_path / "out" / "dup.jsonl")
    assert [e["observation_sha256"] for e in evidence_of(lines)] == [facts(t)["observation_sha256"] for t in steps]


def test_the_generic_steps_format_one_step_per_line_several_runs_per_file(tmp_path):
    steps = tmp_path / "in" / "mine.jsonl"
    steps.parent.mkdir()
    rows = [{"run": "r1", "command": "grep -n add src/calc.py", "output": "1:def add(a, b):\n", "exit_code": 0},
            {"run": "r1", "command": "pytest", "output": "1 failed  \n\n1 failed", "exit_code": 1},
            {"run": "r2", "command": "cat README", "output": ""}]
    steps.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    summary = import_runs([steps], tmp_path / "out")
    assert (summary.runs, summary.steps) == (2, 3)
    r1 = evidence_of(journal(tmp_path / "out" / "r1.jsonl"))
    assert r1[0] == {**facts("1:def add(a, b):\n"), "exit_code": 0, "target": "src/calc.py"}
    assert r1[1] == {**facts("1 failed  \n\n1 failed"), "exit_code": 1}
    assert len(r1[1]["atoms"]) == 1  # "1 failed" twice, trailing spaces stripped: one atom
    assert evidence_of(journal(tmp_path / "out" / "r2.jsonl")) == [{**facts(""), "target": "README"}]


def test_a_steps_run_is_all_its_lines_wherever_they_are_and_a_bad_line_imports_none_of_the_file(tmp_path):
    """Parallel agents appending to one log interleave their runs' lines: each run is all of its
    lines in file order. The file is one unit: a bad line anywhere writes none of its runs."""
    runs = [f"r{n:02d}" for n in range(trajectories.OPEN_JOURNALS_MAX + 8)]  # more than are kept open
    rows = [{"run": run, "command": f"cat f{step}.py", "output": f"{run} step {step}\n"}
            for step in range(3) for run in runs]  # round robin: every run interleaved with all others
    steps = tmp_path / "log.jsonl"
    steps.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    summary = import_runs([steps], tmp_path / "out")
    assert (summary.runs, summary.steps, summary.errors) == (len(runs), 3 * len(runs), [])
    for run in runs:
        assert evidence_of(journal(tmp_path / "out" / f"{run}.jsonl")) == [
            {**facts(f"{run} step {step}\n"), "target": f"f{step}.py"} for step in range(3)]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(f"{run}.jsonl" for run in runs)

    steps.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"run": "r00"}\n', encoding="utf-8")
    summary = import_runs([steps], tmp_path / "again")
    assert summary.runs == 0 and "line 121" in summary.errors[0]["reason"]
    assert not (tmp_path / "again").exists()  # no journal, no temp file, not even the folder


@pytest.mark.parametrize("name, text, reason", [
    ("list.traj.json", "[1, 2]", "no message with a role"),
    ("empty.traj.json", '{"messages": []}', "no message with a role"),
    ("blank.traj.json", "\n", "no run: the file holds no JSON value (only white space or a byte-order mark)"),
    ("empty.traj", "", "no run: the file is empty"),
    ("journal.jsonl", '{"op": "initialize"}\n', 'has "op": the file is already a ledger journal'),
])
def test_an_input_that_is_no_run_is_refused_with_what_it_is_instead_of_a_run_of_no_steps(tmp_path, name, text, reason):
    (tmp_path / name).write_text(text, encoding="utf-8")
    summary = import_runs([tmp_path / name], tmp_path / "out")
    assert summary.runs == 0 and reason in summary.errors[0]["reason"]
    assert not (tmp_path / "out").exists()


def test_a_steps_line_that_is_not_utf8_refuses_its_file_saying_where(tmp_path):
    (tmp_path / "log.jsonl").write_bytes(b'{"run":"a","command":"ls","output":"ok"}\n'
                                         b'{"run":"a","command":"ls","output":"x\xff"}\n')
    summary = import_runs([tmp_path / "log.jsonl"], tmp_path / "out")
    assert summary.runs == 0
    assert summary.errors[0]["reason"] == "line 2: not UTF-8 (byte 38: invalid start byte)"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("odd", ["a link to nothing", "a pipe", "a folder"])
def test_a_folder_entry_named_like_an_input_but_no_file_is_refused_by_import_and_simulate(tmp_path, odd):
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps({"run": "a", "command": "ls", "output": "x"}) + "\n")
    entry = folder / "b.jsonl"
    if odd == "a link to nothing":
        entry.symlink_to(tmp_path / "missing.jsonl")
    elif odd == "a pipe":
        os.mkfifo(entry)  # opening it would wait for a writer forever
    else:
        entry.mkdir()
    for call in (lambda: import_runs([folder], tmp_path / "out"), lambda: simulate([folder])):
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == "INVALID_ARGUMENT"
        assert caught.value.message.startswith(f"{entry}: named like a ")
    assert not (tmp_path / "out").exists()


def test_inputs_named_in_capitals_are_taken_and_an_empty_folder_or_file_is_refused(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    with pytest.raises(LedgerError) as caught:
        import_runs([folder], tmp_path / "out")
    assert caught.value.message == "no trajectory to import (*.json, *.traj, *.jsonl, each maybe .gz)"
    (folder / "LOUD.JSONL").write_text(json.dumps({"run": "loud", "command": "ls", "output": "x"}) + "\n")
    (folder / "quiet.jsonl").write_text("\n \n")
    summary = import_runs([folder], tmp_path / "out")
    assert (summary.runs, [(Path(e["file"]).name, e["reason"]) for e in summary.errors]) == (
        1, [("quiet.jsonl", "no step line: the file's 2 lines are blank")])
    (folder / "quiet.jsonl").write_text("")
    assert [e["reason"] for e in import_runs([folder / "quiet.jsonl"], tmp_path / "out3").errors] == [
        "no step line: the file is empty"]
    (tmp_path / "out" / "SHOUT.JSONL").write_bytes((tmp_path / "out" / "loud.jsonl").read_bytes())
    assert sorted(r.run for r in simulate([tmp_path / "out"]).runs) == ["SHOUT", "loud"]


@pytest.mark.parametrize("name", ["B.JSONL.GZ", "b.jsonl.GZ", "B.JSONL.gz", "b.Jsonl.Gz"])
def test_a_gzipped_input_is_read_whatever_the_letter_case_of_its_gz(tmp_path, name):
    line = json.dumps({"run": "r1", "command": "ls", "output": "a"}) + "\n"
    (tmp_path / name).write_bytes(gzip.compress(line.encode()))
    summary = import_runs([tmp_path / name], tmp_path / "out")
    assert (summary.runs, summary.errors) == (1, [])
    plain = tmp_path / "plain.jsonl"
    plain.write_text(line)
    import_runs([plain], tmp_path / "plain-out")
    assert (tmp_path / "out" / "r1.jsonl").read_bytes() == (tmp_path / "plain-out" / "r1.jsonl").read_bytes()


def test_a_steps_lines_other_keys_are_read_past_and_reach_no_journal(tmp_path):
    line = {"run": "r1", "command": "cat a.py", "output": "x = 1", "exit_code": 0}
    (tmp_path / "plain.jsonl").write_text(json.dumps(line) + "\n")
    (tmp_path / "timed.jsonl").write_text(json.dumps({**line, "duration_ms": 12, "thought": "secret"}) + "\n")
    plain, timed = import_runs([tmp_path / "plain.jsonl"], tmp_path / "a"), import_runs([tmp_path / "timed.jsonl"],
                                                                                          tmp_path / "b")
    assert (plain.runs, plain.steps, timed.runs, timed.steps, timed.errors) == (1, 1, 1, 1, [])
    assert (tmp_path / "a" / "r1.jsonl").read_bytes() == (tmp_path / "b" / "r1.jsonl").read_bytes()


def test_a_steps_line_with_a_key_given_twice_and_a_run_id_that_is_no_string_are_refused(tmp_path):
    (tmp_path / "dk.jsonl").write_text('{"run": "a", "run": "b", "command": "ls", "output": "x"}\n')
    messages = [{"role": "system", "content": "s"}, {"role": "assistant", "content": "```bash\nls\n```"},
                {"role": "user", "content": "x"}]
    (tmp_path / "t.traj.json").write_text(json.dumps({"instance_id": 12345, "messages": messages}))
    summary = import_runs([tmp_path / "dk.jsonl", tmp_path / "t.traj.json"], tmp_path / "out")
    assert summary.runs == 0
    assert [e["reason"] for e in summary.errors] == ["line 1: the key 'run' is given twice in one object (its keys: 'run', "
                                                     "'command', 'output')",
                                                     "instance_id must be a string (the run id), got the integer 12345"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("document, key, keys", [
    ('{"instance_id": "first", "messages": MESSAGES, "instance_id": "second"}', "instance_id",
     "'instance_id', 'messages'"),
    ('{"messages": [{"role": "user", "content": "a", "content": "b"}]}', "content", "'role', 'content'"),  # deep
    ('{"trajectory": [], "trajectory": [{"action": "ls", "observation": "x"}]}', "trajectory", "'trajectory'"),
    ('{"messages": MESSAGES, "info": {"cost": 1, "cost": 2}}', "cost", "'cost'"),  # where no fact comes from
])
def test_a_trajectory_with_a_key_given_twice_is_refused_as_a_steps_line_is(tmp_path, document, key, keys):
    """Which of the two values would count? A trajectory file whose JSON gives a key twice is refused
    with its reason, never read as its last value (which dropped the first run's steps)."""
    messages = [{"role": "assistant", "content": "```bash\nls\n```"}, {"role": "user", "content": "x"}]
    (tmp_path / "t.traj.json").write_text(document.replace("MESSAGES", json.dumps(messages)))
    summary = import_runs([tmp_path / "t.traj.json"], tmp_path / "out")
    assert summary.runs == 0 and not (tmp_path / "out").exists()
    assert [e["reason"] for e in summary.errors] == [f"the key '{key}' is given twice in one object (its keys: {keys})"]


def test_a_long_key_given_twice_is_named_cut_short_with_a_mark(tmp_path):
    """A key cut short in the message ends in …: its first 80 characters are no key the file has."""
    key, other = "k" * 100, "o" * 50
    (tmp_path / "t.traj.json").write_text(f'{{"{other}": 1, "{key}": 1, "{key}": 2, "trajectory": []}}')
    summary = import_runs([tmp_path / "t.traj.json"], tmp_path / "out")
    assert [e["reason"] for e in summary.errors] == [
        f"the key {'k' * 80!r}… is given twice in one object (its keys: {'o' * 40!r}…, {'k' * 40!r}…, 'trajectory')"]


def test_an_exit_code_no_journal_can_hold_is_refused_in_steps_and_left_out_of_a_trajectory(tmp_path):
    """Journal integers stop at ±(2**53 - 1): a step line giving a larger exit code is refused with
    its file; an observation's <returncode> that large keeps the step, without the code."""
    (tmp_path / "big.jsonl").write_text(json.dumps({"run": "a", "command": "ls", "output": "b",
                                                    "exit_code": 2**53}) + "\n", encoding="utf-8")
    summary = import_runs([tmp_path / "big.jsonl"], tmp_path / "out")
    assert summary.runs == 0 and summary.errors[0]["reason"] == "line 1: exit_code must be an integer within ±(2**53-1)"
    huge = "<returncode>-99999999999999999999999</returncode>\n<output>x</output>"
    messages = [{"role": "system", "content": "s"}, {"role": "assistant", "content": "```bash\nls\n```"},
                {"role": "user", "content": huge}]
    (tmp_path / "t.traj.json").write_text(json.dumps({"messages": messages}), encoding="utf-8")
    summary = import_runs([tmp_path / "t.traj.json"], tmp_path / "out")
    assert (summary.runs, summary.steps, summary.errors) == (1, 1, [])
    [evidence] = evidence_of(journal(tmp_path / "out" / "t.jsonl"))
    assert "exit_code" not in evidence
    with Case.create(tmp_path / "case", case_id="R1") as case:  # the journal applies
        assert all(r.ok for r in apply_journal(case, (tmp_path / "out" / "t.jsonl").read_text().splitlines()))


def test_a_format_given_that_does_not_fit_says_auto_tells_them_apart(tmp_path):
    """A real mini-swe-agent run read as SWE-agent's is named for what it is (it was sent to the steps
    format, as another agent's run)."""
    summary = import_runs([RAW_FILES[0]], tmp_path / "out", fmt="swe-agent")
    assert summary.errors[0]["reason"] == (
        "no trajectory list: not a SWE-agent .traj (its messages list is a mini-swe-agent trajectory's) (read as "
        "--format swe-agent, as asked: without it, the file's name and content choose)")


def test_a_run_of_an_input_that_failed_may_come_from_a_later_input(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"run": "r", "command": "ls", "output": "x"}\n{"run": "r"}\n', encoding="utf-8")
    (tmp_path / "b.jsonl").write_text('{"run": "r", "command": "ls", "output": "y"}\n', encoding="utf-8")
    summary = import_runs([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "out")
    assert summary.runs == 1 and len(summary.errors) == 1 and "line 2" in summary.errors[0]["reason"]
    assert [e["observation_sha256"] for e in evidence_of(journal(tmp_path / "out" / "r.jsonl"))] == [
        facts("y")["observation_sha256"]]


# --- errors, outcomes, safety ------------------------------------------------------------------
def test_a_malformed_file_among_good_ones_is_named_with_its_reason_the_others_are_imported_exit_1(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.traj.json").write_bytes(gzip.decompress(RAW_FILES[0].read_bytes()))
    (inputs / "b.traj.json").write_text('{"messages": [', encoding="utf-8")
    (inputs / "c.traj.json.gz").write_bytes(b"not gzip at all")
    (inputs / "d.jsonl").write_text('{"run": "d", "command": "ls", "output": "x"}\n{"run": "d"}\n', encoding="utf-8")
    (inputs / "e.traj.json").write_bytes(gzip.decompress(RAW_FILES[1].read_bytes()))
    done = CliRunner().invoke(main, ["runs", "import", str(inputs), "--out", str(tmp_path / "out")])
    assert done.exit_code == 1
    assert "imported 2 runs" in done.stdout
    for name, reason in (("b.traj.json", "Expecting"), ("c.traj.json.gz", "gzip"), ("d.jsonl", "line 2")):
        assert re.search(rf"^error: INVALID_ARGUMENT: {re.escape(str(inputs / name))}: .*{reason}", done.stderr,
                         re.M), done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        f"{p.name.split('.')[0]}.jsonl" for p in RAW_FILES[:2])  # nothing half-written, no temp file


def test_each_file_not_imported_carries_its_code_storage_error_when_the_file_system_refused(tmp_path, monkeypatch):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "bad.traj.json").write_text('{"messages": [', encoding="utf-8")
    (inputs / "locked.traj.json").write_bytes(gzip.decompress(RAW_FILES[0].read_bytes()))
    real_open = run_files.open_run_file

    def refusing(path):  # what a file this user may not read gives (a mode alone does not stop root)
        if path.name == "locked.traj.json":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path)

    monkeypatch.setattr(run_files, "open_run_file", refusing)
    summary = import_runs([inputs], tmp_path / "out")
    assert [(Path(e["file"]).name, e["code"]) for e in summary.to_dict()["errors"]] == [
        ("bad.traj.json", "INVALID_ARGUMENT"), ("locked.traj.json", "STORAGE_ERROR")]
    assert summary.errors[1]["reason"] == "Permission denied"
    done = CliRunner().invoke(main, ["runs", "import", str(inputs / "locked.traj.json"), "--out", str(tmp_path / "o")])
    assert done.exit_code == 1
    assert f"error: STORAGE_ERROR: {inputs / 'locked.traj.json'}: Permission denied" in done.stderr


def test_a_run_id_that_is_not_a_plain_file_name_is_refused_and_nothing_is_written_outside_dir(tmp_path):
    data = json.loads(gzip.decompress(RAW_FILES[0].read_bytes()))
    out = tmp_path / "deep" / "out"
    for bad in ("../escaped", "/tmp/abs", "a/b", ".hidden", ""):
        (tmp_path / "t.traj.json").write_text(json.dumps({**data, "instance_id": bad}), encoding="utf-8")
        summary = import_runs([tmp_path / "t.traj.json"], out)
        assert summary.runs == 0 and "plain file name" in summary.errors[0]["reason"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.traj.json"]  # nor the folders it would have made


def test_a_run_id_over_128_characters_is_refused_with_its_length_and_the_rule(tmp_path):
    data = json.loads(gzip.decompress(RAW_FILES[0].read_bytes()))
    for run, ok in (("r" * 128, True), ("r" * 129, False)):
        (tmp_path / "t.traj.json").write_text(json.dumps({**data, "instance_id": run}), encoding="utf-8")
        summary = import_runs([tmp_path / "t.traj.json"], tmp_path / "out")
        assert summary.runs == (1 if ok else 0)
        if not ok:
            assert summary.errors[0]["reason"] == (
                f"run id {'r' * 80!r}… (129 characters) is not a plain file name: 1 to 128 letters, digits, "
                "'.', '_', '-', the first a letter or digit")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["r" * 128 + ".jsonl"]


def test_two_inputs_with_the_same_run_id_import_the_first_and_name_both(tmp_path):
    data = json.loads(gzip.decompress(RAW_FILES[0].read_bytes()))
    first, second = tmp_path / "a.traj.json", tmp_path / "b.traj.json"
    for path in (first, second):
        path.write_text(json.dumps({**data, "instance_id": "tiny-1"}), encoding="utf-8")
    summary = import_runs([first, second], tmp_path / "out")
    assert summary.runs == 1
    assert summary.errors == [{"file": str(second), "code": "INVALID_ARGUMENT",
                               "reason": f"run id 'tiny-1' was already imported from {first}; runs of the same "
                               "tasks by other agents or models: import each set with a --run-prefix of its own "
                               "(run_prefix= in Python)"}]


def test_a_file_given_twice_or_also_in_a_folder_given_is_imported_once_and_said_so(tmp_path):
    data = json.loads(gzip.decompress(RAW_FILES[0].read_bytes()))
    folder = tmp_path / "runs"
    folder.mkdir()
    one = folder / "a.traj.json"
    one.write_text(json.dumps({**data, "instance_id": "tiny-1"}), encoding="utf-8")
    (tmp_path / "link.traj.json").symlink_to(one)
    for inputs in ([one, one], [folder, one], [one, tmp_path / "link.traj.json"]):
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        summary = import_runs(inputs, out)
        assert summary.runs == 1 and [p.name for p in out.iterdir()] == ["tiny-1.jsonl"]
        assert summary.errors == [{"file": str(inputs[1]), "code": "INVALID_ARGUMENT", "reason": (
            f"given already (twice, or also in a folder given): its run 'tiny-1' is imported once, from {one}")}]


def test_a_run_id_a_failed_input_brought_is_free_for_the_next_input(tmp_path):
    data = json.loads(gzip.decompress(RAW_FILES[0].read_bytes()))
    steps = tmp_path / "bad.steps.jsonl"  # its first line opens run tiny-1, its second is no JSON
    steps.write_text('{"run": "tiny-1", "command": "ls", "output": "a"}\n{not json\n', encoding="utf-8")
    good = tmp_path / "good.traj.json"
    good.write_text(json.dumps({**data, "instance_id": "tiny-1"}), encoding="utf-8")
    summary = import_runs([steps, good], tmp_path / "out")
    assert summary.runs == 1 and [error["file"] for error in summary.errors] == [str(steps)]


def test_outcomes_append_record_outcome_and_the_journal_applies_and_verifies(tmp_path):
    table = tmp_path / "outcomes.csv"
    run = RAW_FILES[0].name.split(".")[0]
    table.write_text(f"instance_id,outcome\n{run},resolved\n", encoding="utf-8")
    import_runs([RAW_FILES[0]], tmp_path / "out", outcomes=table)
    lines = journal(tmp_path / "out" / f"{run}.jsonl")
    assert lines[-1] == {"op": "record_outcome", "outcome": "resolved", "source": "outcomes file outcomes.csv"}
    with Case.create(tmp_path / "case", case_id="R1") as case:
        results = list(apply_journal(case, (tmp_path / "out" / f"{run}.jsonl").read_text().splitlines(),
                                     keep_going=True))
        assert results[-1].ok
        assert (case.status()["outcome"], case.status()["outcome_source"]) == ("resolved", "outcomes file outcomes.csv")
    verify_case(tmp_path / "case")
    report = simulate([tmp_path / "out"], jobs=1)
    assert report.runs[0].outcome == "resolved"


def test_an_outcome_label_the_operation_refuses_is_refused_before_anything_is_written(tmp_path):
    table = tmp_path / "outcomes.csv"
    table.write_text("instance_id,outcome\nx,\n", encoding="utf-8")
    with pytest.raises(LedgerError) as caught:
        import_runs([RAW_FILES[0]], tmp_path / "out", outcomes=table)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, message", [
    ("outcome,run\nresolved,a\n", "needs a header row with one 'outcome' column, after the first (the run ids); "
                                   "got 'outcome', 'run'"),
    ("r" * 50 + ",outcome," + ",".join("c" * 9) + ",outcome\n", "needs a header row with one 'outcome' column, "
     "after the first (the run ids); got " + repr("r" * 40) + "…, 'outcome', " + "'c', " * 5 + "'c' and 4 more"),
    ("run,outcome,outcome\na,resolved,failed\n", "needs a header row with one 'outcome' column, after the first"),
    ("run,outcome\na,resolved,extra\n", "line 2 has 3 field(s), the header 2"),
    ("run,outcome,notes\na,resolved\n", "line 2 has 2 field(s), the header 3"),
    ("run,outcome\na, resolved\n", "line 2: run 'a': the outcome ' resolved' has spaces around it"),
    ("run,outcome\nr1 ,resolved\n", "line 2: the run id 'r1 ' has spaces around it"),
    ('run,outcome\n"r2\t",failed\n', "line 2: the run id 'r2\\t' has spaces around it"),
    ("run,outcome\na,resolved\na,failed\n", "line 3: run 'a' is listed twice"),
    ("run,outcome\na," + "x" * 65 + "\n", "line 2: run 'a': the outcome is longer than 64 characters"),
    ("run,outcome\n,resolved\n", "line 2: the run id (first column) is empty"),
    ("run,outcome\na,\n", "line 2: run 'a' has an empty outcome"),
    ('run,outcome\na,"res\nolved"\n', "line 2: run 'a': the outcome 'res\\nolved' holds U+000A, a character"),
    ("run,outcome\na,resolved\u200b\n", "line 2: run 'a': the outcome 'resolved\\u200b' holds U+200B, a character"),
    ("run,outcome\na,re\u0301solu\n", "line 2: run 'a': the outcome 're\u0301solu' is not in composed form (NFC)"),
    # quotes are read strictly: one left open, or text after a closing one, is named, never guessed around
    ('run,outcome\n"a","resolved\n', "line 2: a quoted field is never closed (its closing '\"' is missing)"),
    ('run,outcome\na,resolved\nb,"fail\ned\n', "line 3: a quoted field is never closed"),
    ('run,"outcome\n', "line 1: a quoted field is never closed"),
    ('run,outcome\na,"res"olved\n', "line 2: text follows a field's closing '\"'; put the whole field in quotes"),
    ('run,outcome\n"a"b,resolved\n', "line 2: text follows a field's closing '\"'"),
])
def test_simulate_and_runs_import_read_an_outcomes_file_one_way(tmp_path, text, message):
    """One reader for both commands: what one refuses, the other refuses with the same words."""
    table = tmp_path / "outcomes.csv"
    table.write_text(text, encoding="utf-8")
    refusals = []
    for call in (lambda: import_runs([RAW_FILES[0]], tmp_path / "out", outcomes=table),
                 lambda: simulate([tmp_path / "none"], outcomes=table)):
        with pytest.raises(LedgerError) as caught:
            call()
        refusals.append((caught.value.code, caught.value.message))
    assert refusals[0] == refusals[1]
    assert refusals[0][0] == "INVALID_ARGUMENT" and refusals[0][1].startswith(f"outcomes file {table}: {message}")
    assert not (tmp_path / "out").exists()


def test_an_outcomes_file_may_start_with_a_byte_order_mark(tmp_path):
    table = tmp_path / "outcomes.csv"
    table.write_bytes(b"\xef\xbb\xbfrun,outcome\r\na,resolved\r\n\r\nb,failed\r\n")
    assert read_outcomes(table) == {"a": "resolved", "b": "failed"}


def test_an_outcomes_file_named_with_a_byte_that_is_not_utf8_gives_journals_simulate_and_apply_take(tmp_path):
    """The record_outcome line names its outcomes file: a byte of the name that is not UTF-8 is
    written as U+FFFD (a lone surrogate has no canonical JSON form, so every journal was refused)."""
    (tmp_path / "a.traj").write_text(json.dumps({"trajectory": [{"action": "ls", "observation": "x"}]}))
    table = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"out\xffcomes.csv")))
    table.write_text("run,outcome\na,resolved\n")
    summary = import_runs([tmp_path / "a.traj"], tmp_path / "out", outcomes=table)
    last = json.loads((tmp_path / "out" / "a.jsonl").read_text().splitlines()[-1])
    assert summary.errors == [] and last == {"op": "record_outcome", "outcome": "resolved",
                                             "source": "outcomes file out\ufffdcomes.csv"}
    report = simulate([tmp_path / "out"])
    assert report.errors == [] and [(run.run, run.outcome) for run in report.runs] == [("a", "resolved")]
    with Case.create(tmp_path / "case", case_id="A") as case:
        assert all(result.ok for result in apply_journal(case, (tmp_path / "out" / "a.jsonl").read_text().splitlines()))


@pytest.mark.parametrize("name", ["(all)", "(no outcome)"])
def test_an_outcome_named_like_a_row_of_the_reports_is_refused_wherever_it_is_recorded(tmp_path, name):
    """simulate's reports name their rows (all) and (no outcome): an outcome of that name would be
    counted as one of them, so it is refused where simulate --outcomes refuses it."""
    with Case.create(tmp_path / "case", case_id="R1") as case:
        case.open_revision([{"statement": "a"}])
        before = len(case.events())
        with pytest.raises(LedgerError) as caught:
            case.record_outcome(name, "ci")
        assert caught.value.code == "INVALID_ARGUMENT" and "a name simulate's reports use themselves" in caught.value.message
        assert len(case.events()) == before
    table = tmp_path / "outcomes.csv"
    table.write_text(f"instance_id,outcome\nx,{name}\n", encoding="utf-8")
    with pytest.raises(LedgerError) as caught:
        import_runs([RAW_FILES[0]], tmp_path / "out", outcomes=table)
    assert caught.value.message == (f"outcomes file {table}: line 2: run 'x': the outcome {name!r} is a name the "
                                    "report uses itself; call it something else")
    assert not (tmp_path / "out").exists()
    journal = tmp_path / "runs" / "r.jsonl"  # a journal recording one anyway (written by hand, or before)
    journal.parent.mkdir()
    journal.write_text(json.dumps({"op": "open_revision", "hypotheses": [{"statement": "a"}]}) + "\n"
                       + json.dumps({"op": "record_outcome", "outcome": name, "source": "x"}) + "\n", encoding="utf-8")
    report = simulate([journal.parent], jobs=1)  # replayed as apply would: that line is refused
    assert [(e["file"], e["line"], e["code"]) for e in report.errors] == [(str(journal), 2, "INVALID_ARGUMENT")]
    assert "a name simulate's reports use themselves" in report.errors[0]["message"]
    assert report.policies[0]["runs"] == 0


@pytest.mark.parametrize("rules, kind", [("5", "int"), ('"ab"', "str"), ("{}", "dict"), ('{action = "a.b"}', "dict")])
def test_actions_rules_must_be_a_list_of_rules(tmp_path, rules, kind):
    mapping = tmp_path / "actions.toml"
    mapping.write_text(f"rules = {rules}\n", encoding="utf-8")
    with pytest.raises(LedgerError) as caught:
        ActionMap.load(mapping)
    assert caught.value.code == "CONFIG_INVALID" and caught.value.details["key"] == "rules"
    assert caught.value.message == (f"{mapping}: rules: must be a list of rules ([[rules]] tables with action and "
                                    f"programs), got {kind}")


@pytest.mark.parametrize("text, message", [
    ('defualt = "shell.run"\n', "defualt: unknown key (did you mean default?)"),
    ('[[rules]]\nactoin = "x.y"\nprograms = ["cat"]\n', "rules[1].actoin: unknown key (did you mean action?)"),
    ('[[rules]]\naction = "x.y"\nprograms = ["cat"]\nprogams = []\n',
     "rules[1].progams: unknown key (did you mean programs?)"),
    ('[[rules]]\naction = "x.y"\n', "rules[1]: needs exactly the keys action and programs"),
])
def test_an_actions_file_names_its_unknown_key_as_the_budget_config_does(tmp_path, text, message):
    mapping = tmp_path / "actions.toml"
    mapping.write_text(text, encoding="utf-8")
    with pytest.raises(LedgerError) as caught:
        ActionMap.load(mapping)
    assert (caught.value.code, caught.value.message) == ("CONFIG_INVALID", f"{mapping}: {message}")


@pytest.mark.parametrize("text, key, message", [
    ('[[rules]]\naction = "x.y"\nprograms = []\n', "rules[1].programs",
     "rules[1].programs: empty, so the rule would never match a command; name its programs, or remove the rule"),
    ('[[rules]]\naction = "x.y"\nprograms = ["cat", "cat"]\n', "rules[1].programs",
     "rules[1].programs[2]: 'cat' is given twice in the list"),
    ('[[rules]]\naction = "x.y"\nprograms = ["cat", " ls"]\n', "rules[1].programs",
     "rules[1].programs[2]: ' ls' has blanks at its ends, so it would never match a command's program; remove them"),
    ('neutral = ["wc", "wc"]\n', "neutral", "neutral[2]: 'wc' is given twice in the list"),
    ('neutral = ["wc\\t"]\n', "neutral",
     "neutral[1]: 'wc\\t' has blanks at its ends, so it would never match a command's program; remove them"),
    # one space between a program and its subcommand, nothing else: the shell splits the rest
    *[(f'[[rules]]\naction = "x.y"\nprograms = ["cat", {json.dumps(name)}]\n', "rules[1].programs",
       f"rules[1].programs[2]: {name!r} is neither a program's name nor a program and its subcommand with one space "
       "between them (str_replace_editor view), so it would never match a command's program")
      for name in ("git  log", "str_replace_editor view extra", "git\tlog", "git\nlog")],
    ('[[rules]]\naction = "a.b"\nprograms = ["grep"]\n[[rules]]\naction = "c.d"\nprograms = ["rg", "grep"]\n',
     "rules[2].programs", "rules[2].programs[2]: 'grep' is a program of rules[1] (a.b) already, which comes first, so "
     "this rule would never apply to it"),
])
def test_an_actions_file_refuses_a_rule_or_program_name_that_could_never_match(tmp_path, text, key, message):
    mapping = tmp_path / "actions.toml"
    mapping.write_text(text, encoding="utf-8")
    with pytest.raises(LedgerError) as caught:
        ActionMap.load(mapping)
    assert (caught.value.code, caught.value.message, caught.value.details["key"]) == (
        "CONFIG_INVALID", f"{mapping}: {message}", key)


def test_an_actions_file_takes_a_program_name_with_characters_the_shell_keeps_in_a_word(tmp_path):
    """A no-break space, an ideographic space or a control character other than a tab or line break
    is part of the word the shell splits, so a command can run that program: Python's own split
    (every Unicode space) refused them as names that could never match."""
    names = ["git\u00a0log", "git\u3000log", "a\x1cb", "\u00a0ls"]
    mapping = ActionMap.from_mapping({"rules": [{"action": "x.y", "programs": names}]})
    assert [classify(f"{name} f.py", mapping)[0] for name in names] == ["x.y"] * 4


def test_an_actions_file_may_name_no_neutral_filter(tmp_path):
    mapping = tmp_path / "actions.toml"
    mapping.write_text("neutral = []\n", encoding="utf-8")
    assert ActionMap.load(mapping).neutral == frozenset()


def test_semantic_score_and_an_actions_file_change_settle_and_action_names(tmp_path):
    mapping = tmp_path / "actions.toml"
    mapping.write_text('default = "shell.other"\n[[rules]]\naction = "shell.look"\nprograms = ["ls", "cat"]\n',
                       encoding="utf-8")
    import_runs([PUBLIC / "github_issue.traj.json"], tmp_path / "out", semantic_score=70, actions=mapping)
    lines = journal(tmp_path / "out" / "github_issue.jsonl")
    assert {l["semantic_score"] for l in lines if l["op"] == "settle"} == {70}
    assert [l["action"] for l in lines if l["op"] == "reserve"][:4] == ["shell.look", "shell.look", "shell.look",
                                                                        "shell.look"]
    assert "shell.other" in {l["action"] for l in lines if l["op"] == "reserve"}
    with pytest.raises(LedgerError) as caught:
        ActionMap.from_mapping({"rules": [{"action": "Not An Action", "programs": ["ls"]}]})
    assert caught.value.code == "CONFIG_INVALID" and caught.value.details["key"] == "rules[1].action"
    mapping.write_text('default = "Not An Action"\n', encoding="utf-8")
    with pytest.raises(LedgerError) as caught:
        ActionMap.load(mapping)
    assert caught.value.message.startswith(f"{mapping}: default: an action name looks like")  # the file is named
    assert caught.value.details["key"] == "default"


def test_cli_summary_json_and_no_progress_bar_off_a_terminal(tmp_path):
    done = CliRunner().invoke(main, ["runs", "import", str(RUNS / "toolcall.traj.json"), "--out", str(tmp_path),
                                     "--json"])
    assert done.exit_code == 0 and done.stderr == ""
    assert json.loads(done.stdout) == {"runs": 1, "steps": 4, "skipped": {"no bash block": 1}, "errors": [],
                                       "journals": [str(tmp_path / "toolcall-demo-1.jsonl")],
                                       "runs_without_outcome": [], "outcomes_without_run": [],
                                       "runs_without_steps": [], "runs_unmarked": [], "not_runs": [],
                                       "subfolders_not_read": [], "over_default_limits": {}}
    usage = CliRunner().invoke(main, ["runs", "import", str(RUNS), "--out", str(tmp_path), "--format", "nope"])
    assert usage.exit_code == 2
    missing = CliRunner().invoke(main, ["runs", "import", str(tmp_path / "nothing"), "--out", str(tmp_path)])
    assert missing.exit_code == 2  # a usage error, as apply's missing JOURNAL
    assert f"Error: Invalid value for 'TRAJ_OR_FOLDER...': Path '{tmp_path / 'nothing'}' does not exist." \
        in missing.stderr


def test_memory_does_not_hold_earlier_runs(tmp_path):
    """Journals are written as each file is read: after a run is imported its journal is on disk and
    complete (the importer keeps no list of runs besides the summary's paths)."""
    seen = []
    import_runs(RAW_FILES[:3], tmp_path, progress=lambda done, total: seen.append(
        (done, total, len(list(tmp_path.glob("*.jsonl"))), len([p for p in os.listdir(tmp_path) if p.endswith(".tmp")]))))
    assert seen == [(1, 3, 1, 0), (2, 3, 2, 0), (3, 3, 3, 0)]


def test_a_journal_that_cannot_be_put_in_place_is_named_and_leaves_no_temp_file(tmp_path):
    out = tmp_path / "out"
    (out / "toolcall-demo-1.jsonl").mkdir(parents=True)  # a folder where the journal belongs
    summary = import_runs([RUNS / "toolcall.traj.json"], out)
    assert summary.runs == 0 and summary.errors[0]["file"] == str(RUNS / "toolcall.traj.json")
    assert sorted(p.name for p in out.iterdir()) == ["toolcall-demo-1.jsonl"]


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_import_memory_does_not_grow_with_the_number_of_runs(tmp_path):
    """Peak memory of a real process importing 10 runs and 100 runs (docs/runs.md: streaming)."""
    import subprocess
    import sys

    script = ("import resource, sys\nfrom ledger import import_runs\n"
              "import_runs(sys.argv[2:], sys.argv[1])\n"
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    peaks = []
    for count in (10, 100):
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path / str(count)),
                               *map(str, RAW_FILES[:count])], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        peaks.append(int(done.stdout))
    assert peaks[1] <= peaks[0] * 1.25, peaks


def test_runs_import_shows_terminal_escapes_in_file_names_escaped(tmp_path):
    """A trajectory's file name is the user's data: an OSC title write or a screen clear in it is
    printed escaped in the error lines and the summary, never sent to the terminal."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "x\x1b]0;pwn\x07y.traj.json").write_text("not json")
    (inputs / "ok\x1b[2J.traj.json").write_text(json.dumps({"trajectory": [{"action": "ls", "observation": "x"}]}))
    done = CliRunner().invoke(main, ["runs", "import", str(inputs), "--out", str(tmp_path / "out\x1b[31m")],
                              color=True)  # as on a terminal: click strips nothing
    assert done.exit_code == 1
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert "x\\x1b]0;pwn\\x07y.traj.json: " in done.stderr and "ok\\x1b[2J.traj.json: run id" in done.stderr
def test_runs_the_outcomes_file_does_not_name_and_outcomes_of_no_run_imported_are_listed_and_noted(tmp_path):
    """An outcomes file whose run ids do not match the runs (another benchmark's, say) is not
    silent: the summary lists the runs it does not name and the rows that name no run imported,
    and a note on stderr names each."""
    outcomes = tmp_path / "o.csv"
    outcomes.write_text("instance_id,outcome\nlocal,resolved\nelsewhere,failed\n")
    summary = import_runs([RUNS / "public"], tmp_path / "out", outcomes=outcomes)
    assert summary.runs_without_outcome == ["github_issue", "swe-agent__test-repo-i1"]
    assert summary.outcomes_without_run == ["elsewhere"]
    plain = import_runs([RUNS / "public"], tmp_path / "out2")  # no outcomes given
    assert (plain.runs_without_outcome, plain.outcomes_without_run) == ([], [])
    done = CliRunner().invoke(main, ["runs", "import", str(RUNS / "public"), "--out", str(tmp_path / "out3"),
                                     "--outcomes", str(outcomes)])
    assert done.exit_code == 0 and done.stderr == (
        "note: 2 run(s) have no outcome in --outcomes (their journals record none): github_issue, "
        "swe-agent__test-repo-i1\nnote: 1 run(s) in --outcomes were not imported: elsewhere\n")
    local = (tmp_path / "out3" / "local.jsonl").read_text().splitlines()[-1]
    assert json.loads(local) == {"op": "record_outcome", "outcome": "resolved", "source": "outcomes file o.csv"}


def _canonical_size(evidence: dict) -> int:
    return len(json.dumps(evidence, sort_keys=True, separators=(",", ":")).encode())


def _lines_filling(limit: int) -> int:
    """The most distinct lines one observation may have for its step's evidence to stay within ``limit``
    canonical bytes (counted here from the format's own definition, :func:`facts`)."""
    lines = limit // 19
    while _canonical_size(facts(_numbered(lines + 1))) <= limit:
        lines += 1
    while _canonical_size(facts(_numbered(lines))) > limit:
        lines -= 1
    return lines


def _numbered(lines: int) -> str:
    return "\n".join(f"line {n}" for n in range(lines))


@pytest.mark.slow  # two observations of about 55,000 lines
def test_a_run_over_a_default_limit_is_written_and_named_and_simulate_refuses_exactly_those(tmp_path):
    limit = 1024 * 1024  # the analysis config's default evidence_payload_bytes_max
    fits = _lines_filling(limit)
    steps = tmp_path / "steps.jsonl"
    with steps.open("w") as out:
        for run, lines in (("fits", fits), ("over", fits + 1)):
            out.write(json.dumps({"run": run, "command": "ls", "output": _numbered(lines)}) + "\n")
        for n in range(3334):  # 3 budget events a step, and the initialize: 3,333 steps fill 10,000
            out.write(json.dumps({"run": "long", "command": "ls", "output": f"x{n}"}) + "\n")
            if n < 3333:
                out.write(json.dumps({"run": "filled", "command": "ls", "output": f"x{n}"}) + "\n")
    summary = import_runs([steps], tmp_path / "out")
    assert (summary.runs, summary.errors) == (4, [])
    assert summary.over_default_limits == {"evidence_payload_bytes_max": ["over"], "budget_events_max": ["long"]}
    assert evidence_of(journal(tmp_path / "out" / "over.jsonl")) == [facts(_numbered(fits + 1))]
    refused = {run.run: run.error and run.error["code"] for run in simulate([tmp_path / "out"]).runs}
    assert refused == {"filled": None, "fits": None, "long": "LIMIT_REACHED", "over": "LIMIT_REACHED"}
    done = CliRunner().invoke(main, ["runs", "import", str(steps), "--out", str(tmp_path / "again")])
    assert done.exit_code == 0
    assert "note: 1 run(s) pass the analysis config's default budget_events_max (10000): apply refuses them, and " \
           "so does simulate under any policy that lets them reach it (the run then counts under no policy), " \
           "unless the analysis config (--analysis-config FILE) raises [limits] budget_events_max: long" \
           in done.output


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_step_no_journal_line_could_hold_refuses_its_file_saying_why(tmp_path):
    steps = tmp_path / "steps.jsonl"
    steps.write_text(json.dumps({"run": "huge", "command": "ls", "output": _numbered(250_000)}) + "\n"
                     + json.dumps({"run": "small", "command": "ls", "output": "x"}) + "\n")
    summary = import_runs([steps], tmp_path / "out")
    assert summary.runs == 0
    [error] = summary.errors
    assert error["code"] == "INVALID_ARGUMENT"
    assert re.fullmatch(r"run huge: step 1's observation has 250000 distinct lines, which make a journal line of "
                        r"\d+ bytes, over the 4194304 a journal line may hold: no journal could replay it",
                        error["reason"])
    assert not (tmp_path / "out").exists()


def test_a_command_longer_than_is_split_takes_the_default_action_and_no_target():
    """Splitting a command into words takes time growing with the square of its longest word: a
    command past COMMAND_CHARS_MAX is not split (a megabyte path took minutes) and is the default."""
    from ledger.runs.actions import classify
    from ledger.runs.shell_words import COMMAND_CHARS_MAX

    assert classify("cat " + "a" * (COMMAND_CHARS_MAX - 4)) == ("source.read_context", "a" * (COMMAND_CHARS_MAX - 4))
    assert classify("cat " + "a" * (COMMAND_CHARS_MAX - 3)) == ("test.automated", None)


def test_a_step_whose_line_is_exactly_as_long_as_a_journal_line_may_be_is_imported(tmp_path, monkeypatch):
    """The limit is the line's length without its newline, as apply reads it."""
    steps = tmp_path / "steps.jsonl"
    steps.write_text(json.dumps({"run": "edge", "command": "ls", "output": _numbered(40)}) + "\n")
    import_runs([steps], tmp_path / "measured")
    [line] = [raw for raw in (tmp_path / "measured" / "edge.jsonl").read_bytes().splitlines()
              if b'"record_result"' in raw]
    monkeypatch.setattr(trajectories, "LINE_BYTES_MAX", len(line))
    assert import_runs([steps], tmp_path / "fits").runs == 1
    monkeypatch.setattr(trajectories, "LINE_BYTES_MAX", len(line) - 1)
    refused = import_runs([steps], tmp_path / "over")
    assert refused.runs == 0 and f"a journal line of {len(line)} bytes" in refused.errors[0]["reason"]


def test_an_out_folder_under_a_file_is_a_path_that_cannot_be_used_not_a_file_system_refusal(tmp_path):
    (tmp_path / "a-file").write_text("")
    steps = tmp_path / "steps.jsonl"
    steps.write_text(json.dumps({"run": "r1", "command": "ls", "output": "x"}) + "\n")
    done = CliRunner().invoke(main, ["runs", "import", str(steps), "--out", str(tmp_path / "a-file" / "sub")])
    assert (done.exit_code, done.output) == (1, f"error: INVALID_ARGUMENT: the path cannot be used: Not a directory "
                                                f"({tmp_path / 'a-file' / 'sub'})\n")


def test_an_import_whose_every_file_fails_says_so_and_leaves_no_new_folder(tmp_path):
    """Journals given to `runs import` all fail (each named); the summary counts the failures and the
    output folder it would have made is not left behind, empty. A folder that was there stays."""
    journals = tmp_path / "journals"
    journals.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (journals / name).write_text('{"op": "initialize"}\n')
    result = CliRunner().invoke(main, ["runs", "import", str(journals), "--out", str(tmp_path / "new")])
    assert result.exit_code == 1
    assert result.stdout.startswith("imported 0 runs (2 file(s) failed: named below), 0 steps into ")
    assert result.stderr.count("error: INVALID_ARGUMENT: ") == 2 and "already a ledger journal" in result.stderr
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    assert CliRunner().invoke(main, ["runs", "import", str(journals), "--out", str(tmp_path / "kept")]).exit_code == 1
    assert (tmp_path / "kept").is_dir()


def test_simulate_of_a_folder_without_journals_names_runs_import():
    result = CliRunner().invoke(main, ["simulate", str(RUNS / "mini-swe-agent-verified")])
    assert result.exit_code == 1
    assert "no journal (*.jsonl) to simulate" in result.stderr and "ledger runs import" in result.stderr


def test_a_run_whose_every_turn_is_skipped_is_written_and_named_as_a_run_without_steps(tmp_path):
    """A run with no step (no bash block, only other tools, an empty .traj) is still a run, with its
    journal, but never a silent one: the summary names it and the command notes it on stderr."""
    (tmp_path / "text.traj.json").write_text(json.dumps({"messages": [
        {"role": "user", "content": "fix"}, {"role": "assistant", "content": "thinking, no command"},
        {"role": "user", "content": "go on"}]}))
    (tmp_path / "tools.traj.json").write_text(json.dumps({"messages": [
        {"role": "user", "content": "fix"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "str_replace_editor",
                                                                       "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "edited"}]}))
    (tmp_path / "empty.traj").write_text(json.dumps({"trajectory": []}))
    (tmp_path / "one.traj").write_text(json.dumps({"trajectory": [{"action": "ls", "observation": "a"}]}))
    out = tmp_path / "out"
    summary = import_runs([tmp_path / name for name in ("text.traj.json", "tools.traj.json", "empty.traj",
                                                         "one.traj")], out)
    assert (summary.runs, summary.steps, summary.runs_without_steps) == (4, 1, ["text", "tools", "empty"])
    assert len((out / "empty.jsonl").read_text().splitlines()) == 3  # open_revision, transition, initialize
    done = CliRunner().invoke(main, ["runs", "import", str(tmp_path / "empty.traj"), str(tmp_path / "one.traj"),
                                     "--out", str(tmp_path / "cli")])
    assert done.exit_code == 0
    assert done.stderr == ("note: 1 run(s) have no step (no model turn at all, or every turn skipped, as the summary line "
                           "counts): their "
                           "journals hold no action, and simulate counts them as runs that spent nothing: empty\n")


def test_the_limits_note_compares_with_the_analysis_config_given(tmp_path):
    """Runs passing a limit are named against the analysis config the journals will run under: a
    lowered limit names runs the default would pass, a raised one names none."""
    steps = tmp_path / "steps.jsonl"
    with steps.open("w") as out:
        for run, count in (("short", 3), ("long", 4)):  # 3 budget events a step and the initialize
            for n in range(count):
                out.write(json.dumps({"run": run, "command": "ls", "output": f"x{n}"}) + "\n")
    assert import_runs([steps], tmp_path / "default").over_default_limits == {}
    lowered = AnalysisConfig(limits={"budget_events_max": 10})
    assert import_runs([steps], tmp_path / "low", analysis=lowered).over_default_limits == {
        "budget_events_max": ["long"]}
    refused = {run.run: run.error and run.error["code"] for run in simulate([tmp_path / "low"], analysis=lowered).runs}
    assert refused == {"short": None, "long": "LIMIT_REACHED"}
    with pytest.raises(LedgerError) as caught:
        import_runs([steps], tmp_path / "bad", analysis={"limits": {}})
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.message == "analysis must be an AnalysisConfig or None, got dict"
    config = tmp_path / "analysis.toml"
    config.write_text("[limits]\nbudget_events_max = 10\n")
    done = CliRunner().invoke(main, ["--analysis-config", str(config), "runs", "import", str(steps),
                                     "--out", str(tmp_path / "cli")])
    assert done.exit_code == 0
    assert ("note: 1 run(s) pass the analysis config's budget_events_max (10): apply refuses them, and so does "
            "simulate under any policy that lets them reach it (the run then counts under no policy), unless the "
            f"analysis config ({config}) raises [limits] budget_events_max: long") in done.stderr
    config.write_text("[limits]\nbudget_events_max = 13\n")
    done = CliRunner().invoke(main, ["--analysis-config", str(config), "runs", "import", str(steps),
                                     "--out", str(tmp_path / "cli")])
    assert done.exit_code == 0 and "note:" not in done.stderr


# --- action names and targets of shell commands (runs/actions.py, docs/runs.md "Action names") ---------
def test_the_default_action_map_is_the_one_docs_runs_md_lists():
    """The programs of each rule and the neutral filters are listed twice, in code and in the docs."""
    from ledger.runs.actions import DEFAULT_ACTIONS

    page = (REPO / "docs" / "runs.md").read_text(encoding="utf-8")
    for rule in DEFAULT_ACTIONS["rules"]:
        row = re.search(rf"^\| `{re.escape(rule['action'])}` \| (.+) \|$", page, re.M)[1]
        assert re.findall(r"`([^`]+)`", row) == rule["programs"], rule["action"]
    neutral = re.search(r"^Neutral filters: (.+?) \(they print", page, re.M | re.S)[1]
    assert re.findall(r"`([^`]+)`", neutral) == DEFAULT_ACTIONS["neutral"]


@pytest.mark.parametrize("command, expected", [
    ("str_replace_editor view /testbed/a.py", ("source.read_context", "/testbed/a.py")),
    ("str_replace_editor view /testbed/a.py --view_range 1 40", ("source.read_context", "/testbed/a.py")),
    ("str_replace_editor str_replace /testbed/a.py --old_str x --new_str y", ("test.automated", None)),
    ("str_replace_editor create /testbed/t.py --file_text x", ("test.automated", None)),
    ("open src/marshmallow/fields.py 1474", ("source.read_context", "src/marshmallow/fields.py")),
    ("open 30 src/a.py", ("source.read_context", "src/a.py")),
    ("str_replace_editor view --view_range 1 40 /testbed/a.py", ("source.read_context", "/testbed/a.py")),
    ("cat a.py b.py", ("source.read_context", None)),
])
def test_swe_agents_file_viewer_reads_and_its_line_numbers_are_no_paths(command, expected):
    """SWE-agent 1.x reads files with str_replace_editor view, which was the default action (its
    edits share the program); open FILE LINE had no target, its line number taken for a second path."""
    from ledger.runs.actions import classify

    assert classify(command) == expected


@pytest.mark.parametrize("command, expected", [
    ("cat `ls`", ("test.automated", None)), ('cat "$(ls)"', ("test.automated", None)),
    ("cat $(ls)", ("test.automated", None)), ("grep -n x `find . -name a.py`", ("test.automated", None)),
    ("cat -- -f", ("source.read_context", "-f")), ("grep -- -x a.py", ("source.find_text", "a.py")),
    ("cat $FILE", ("source.read_context", None)), ("cat ${DIR}/a.py b.py", ("source.read_context", "b.py")),
    ("ls -d */", ("source.find_text", None)), ("ls lib/tests/test_contour*", ("source.find_text", None)),
    ("cat a.py test_?.py", ("source.read_context", "a.py")), ("grep -n x '[ab].py' c.py", ("source.find_text", "c.py")),
])
def test_a_word_that_runs_a_command_or_holds_a_variable_or_a_glob_names_no_target(command, expected):
    """A command substitution runs a program the rules do not see (the step is the default action, as a
    subshell is); a variable's path is not known here, nor the files a glob matches (``ls -d */`` gave
    the target ``*``); after ``--`` a word starting with - is a path."""
    from ledger.runs.actions import classify

    assert classify(command) == expected


@pytest.mark.parametrize("command, expected", [
    ("cd /testbed && cat f.py", ("source.read_context", "/testbed/f.py")),
    ("cd /testbed && grep -rn x src/", ("source.find_text", "/testbed/src")),
    ("cd /testbed && grep -rn x .", ("source.find_text", "/testbed")),
    ("cd /testbed; head -n 5 a.py", ("source.read_context", "/testbed/a.py")),
    ("cd /testbed && find / -name 'x*' 2>/dev/null | head", ("source.find_text", "/")),
    ("cd src && cd lib && sed -n 1,5p x.py", ("source.read_context", "src/lib/x.py")),
    ("cd /a && cat ../b/c", ("source.read_context", "/b/c")), ("cd -- /a && ls b", ("source.find_text", "/a/b")),
    ("cd $D && cat f.py", ("source.read_context", None)), ("cd $D && cat /etc/x", ("source.read_context", "/etc/x")),
    ("cd - && cat f", ("source.read_context", None)), ("cd && cat f", ("source.read_context", None)),
    ("cd -P /a && cat f", ("source.read_context", None)), ("cd $D && cd /a && cat f", ("source.read_context", "/a/f")),
    ("cd /testbed", ("test.automated", None)), ("cd /testbed && python x.py", ("test.automated", None)),
    ("cd /testbed && cat f > g", ("test.automated", None)), ("cd /testbed && cat a.py b.py", ("source.read_context", None)),
    ("cat f.py", ("source.read_context", "f.py")), ("grep -rn x .", ("source.find_text", None)),
    ("cd . && grep -rn x .", ("source.find_text", None)), ("cd src && cd .. && grep -rn x .", ("source.find_text", None)),
    ("cd /x && cat f.py /x/f.py", ("source.read_context", "/x/f.py")),
    ("/usr/bin/cd /x && cat f.py", ("test.automated", None)),  # a program of its own: it moves no shell
])
def test_cd_runs_no_program_of_the_rules_and_the_relative_paths_after_it_name_paths_under_its_folder(command, expected):
    """An agent running each command in a new shell (mini-swe-agent) starts most of them with
    ``cd /testbed &&``: that made every read and search the default action with no target. A folder the
    text does not show leaves a relative path after it unknown; the agent's own folder (no cd) is as before."""
    from ledger.runs.actions import classify

    assert classify(command) == expected


@pytest.mark.parametrize("command, expected", [
    ("cd /testbed | cat f.py", ("source.read_context", "f.py")), ("echo x | cd /t && cat f", ("source.read_context", "f")),
    ("cd /testbed & cat f.py", ("source.read_context", "f.py")), ("cd /testbed || cat f.py", ("source.read_context", "f.py")),
    ("cd /t || true; cat f.py", ("source.read_context", "/t/f.py")), ("cd /t\ncat f.py", ("source.read_context", "/t/f.py")),
])
def test_a_cd_in_a_pipeline_or_the_background_moves_nothing_and_the_command_after_its_or_runs_where_it_failed(
        command, expected):
    """A pipeline's commands and a background job run in subshells; ``cd a || cat f`` reads ./f (cat runs
    only where cd failed). Each of these gave the target under the cd's folder."""
    from ledger.runs.actions import classify

    assert classify(command) == expected


@pytest.mark.parametrize("command, expected", [
    ("cat f.py f.py", ("source.read_context", "f.py")), ("cat ./f.py", ("source.read_context", "f.py")),
    ("cat ./a//b/../f.py", ("source.read_context", "a/f.py")), ("cat f.py ./f.py", ("source.read_context", "f.py")),
    ("ls /", ("source.find_text", "/")), ("cat ../f", ("source.read_context", "../f")),
])
def test_a_target_is_the_path_tidied_as_written_and_one_path_named_twice_is_still_one_path(command, expected):
    """``cat f.py f.py`` had no target (two paths counted), and ``./f.py`` and ``f.py`` were two targets."""
    from ledger.runs.actions import classify

    assert classify(command) == expected


@pytest.mark.parametrize("command, target", [
    ("cd a || cd b; cat f", "a/f"), ("true || cd a; cat f", "f"), ("cd /x || cd /y; cat f", "/x/f"),
    ("cd a && true & cat g", "g"), ("cd a || true | cat g", "g"), ("cd a; cat f &", "a/f"),
])
def test_every_command_is_taken_to_succeed_so_a_cd_after_or_or_in_a_background_list_moves_nothing(command, target):
    """What follows ``||`` runs only where the command before it failed (a ``cd`` there was taken as run),
    the whole pipeline after ``cd a ||`` runs in the folder before it (only its first command did), and
    a list ending in ``&`` runs in a subshell (only a ``cd`` right before ``&`` was seen so). Each was
    checked against bash."""
    from ledger.runs.actions import classify

    assert classify(command)[1] == target


@pytest.mark.parametrize("command, target", [
    ("cd /testbed && cat ~/.bashrc", "~/.bashrc"), ("cd a && cd ~ && cat f", "~/f"), ("cat ~/../f", "~/../f"),
    ("cd ~ && cat ../f", "~/../f"), ("ls ~/..", "~/.."), ("cat ''", None), ("cd a && ls ''", None), ("cat -", None),
    ("cd a && cat -- -", None), ("cat //f", "/f"), ("cat ///x//y", "/x/y"), ("cat {a,b}.py", None),
    ("cd {a,b}; cat f", None), ("cat f{1..3}.py", None),
])
def test_a_home_is_kept_as_written_and_no_file_stdin_or_brace_list_is_taken_for_a_path(command, target):
    """``~`` was joined under a cd's folder (/testbed/~/.bashrc) and had ``..`` taken off above it; an empty
    word became ``/``, ``-`` (the standard input) a file, a leading ``//`` stayed, and a brace list, which the
    shell makes into several words, was one made-up path."""
    from ledger.runs.actions import classify

    assert classify(command)[1] == target


@pytest.mark.parametrize("named", ["cd", "cd /a"])
def test_a_rule_or_actions_file_naming_cd_does_not_change_how_cd_is_read(named):
    """Also as a program with its first argument (``cd /a``), the way ``str_replace_editor view`` is named."""
    from ledger.runs.actions import ActionMap, classify

    mapping = ActionMap.from_mapping({"rules": [{"action": "shell.move", "programs": [named]},
                                                {"action": "source.read", "programs": ["cat"]}],
                                      "neutral": [named], "default": "shell.run"})
    assert classify("cd /a && cat f", mapping) == ("source.read", "/a/f")
    assert classify("cd /a", mapping) == ("shell.run", None)


@pytest.mark.parametrize("command", [
    "sed -ni 's/a/b/p' f.py", "sed -Ei s/a/b/ f.py", "sed --in-place=.bak s/a/b/ f.py", "cat x.py &>out",
    "cat x.py &>>out", "find . -fls out", "find . -name '*.py' -fprint0 o", "find . -fprintf o %p", "ls | xargs rm",
    "grep -l x . | xargs sed -i s/a/b/", "cat x.py | head -n1 | xargs python", "ls | xargs -I% cp % /tmp",
    "cat x.py | awk '{system(\"rm y\")}'", "grep x f | awk '{print > \"o\"}'", "cat x.py | sort -o out",
    "cat x.py | uniq - out", "sed 's/a/b/w out' f.py", "sed -n 's/a/b/gw out' f.py", "sed '1e date' f.py",
    "sed 's/x/date/e' f.py", "sed -n '/re/w o' f.py", "sed -e 's/a/b/' -e 'w x' f", "sed -n '$W o' f",
    "sed --expression='2e ls' f", "sed -n '\\,x,w o' f", "tree -o tree.txt", "tree -L 2 -o t.txt src",
    "rg --pre ./script.sh foo", "rg --pre=./unzip.sh foo src", "less -o log.txt setup.py", "less -Olog setup.py",
    "less --log-file=log setup.py",
    # an option cut short as getopt takes it, one in a cluster, one taking a value before the script
    "sed --in s/a/Z/ g.py", "sed --expr='w out3' f.py", "sed -l 5 'w out1' f.py", "sed --line-length 5 'w o' f.py",
    "cat f.py | sort -uo out4", "cat f.py | sort --out=out5", "cat f.py | sort --compress-program=sh",
    "tree -ao out.txt .", "tree -R -H . -L 2 .", "less --log-f=/tmp/log f.py", "less -So /tmp/log f.py",
    # awk options beyond a field separator, a variable and program text; a program that includes or loads
    "cat f.py; awk -i inplace '{sub(/a/,\"b\")}1' f.py", "cat f | awk '@include \"inplace\"; {print}'",
    "cat f | awk -d1 '{print}'", "cat f | awk -f prog.awk", "cat f | awk '@load \"rwarray\"; {print}'",
    # a pager or helper program of the user's choosing; bat writing its cache or configuration
    "bat --generate-config-file", "bat cache --build", "bat --pager 'sh -c x' f.py", "ag --pager CMD x src",
    "ack --pager=CMD x", "rg --hostname-bin=/tmp/e.sh x src",
    # what xargs runs: after a redirection among its options, by its path, by another xargs
    "cat list3.txt | xargs -n 1 >/dev/null touch", "cat f.py | xargs -P 4 &>/dev/null touch",
    "cat l | xargs -n 1 >&2 touch", "cat list2.txt | /usr/bin/xargs touch", "cat list.txt | xargs xargs touch",
    # a program of a reader's name outside the system's folders
    "/tmp/evil/cat f.py", "cat f.py | /tmp/x/echo hi", "/usr/bin/open f.py",
    # a subshell whose bracket is joined to an operator
    "cat f.py;(touch p);", "cat f.py&&(touch p)|cat", "head f.py&(touch p);", "cat f.py|&(touch p)|&cat",
    "ls;(touch p)|grep x",
    # words the shell makes only as it runs: brace lists giving options, translated strings, expansions
    "sed --{in-place,posix} s/a/Z/ f.py", "cat f.py | sort --{output=p,unique}", "find . -name f.py -{delete,print}",
    "cat {-i,-n} f", 'sed $"-i" s/a/Z/ f.py', "sed ${x:--i} s/a/Z/ f.py", "find . -name f.py ${x:--delete}",
    "cat f.py | sort ${o:--o}p", "printf -v x '%s' '\\044(touch p)'; cat f.py ${x@P}", 'cat f.py ${x:-"}" #}; touch p',
    'cat "${x:-y}" f.py',
    # sed: [ as text in a replacement or y part, a class inside brackets, a script file
    "sed 's/a/[/;w p' f.py", "sed -n 'y/[/x/;w p' f.py", "sed 's/[[:alpha:]/]/X/;w p' f.py",
    "sed -n '/[[:digit:]/]/p;w p' f.py", "sed -n -f s.sed f.py", "sed -n --file=s.sed f.py",
    # tree takes a cluster's values from the next words; uniq's output after --; less's lesskey; awk's @f()
    "tree -Lo 2 p", "tree -Po x p", "cat f.py | uniq -- -in p", "less --lesskey-src=lk f.py", "less -k lk f.py",
    "cat f.py | awk '{f=\"sys\" \"tem\"; @f(\"touch p\")}'"])
def test_a_command_that_writes_or_runs_another_is_the_default_action(command):
    """Each was a read or a search: sed's -i among other options, &> redirections, find's writing
    actions, the program xargs runs, awk's system() and print into a file, sort -o, uniq IN OUT,
    a sed script's w, W and e commands and the w and e flags of its s command, tree -o, less keeping
    a log file, rg --pre running a program on each file."""
    from ledger.runs.actions import classify

    assert classify(command) == ("test.automated", None)


@pytest.mark.parametrize("command, expected", [
    ("grep -n foo a.py || echo 'not found'", ("source.find_text", "a.py")), ("pwd && ls src", ("source.find_text", "src")),
    ("which python; cat a.py", ("source.read_context", "a.py")), ("printf '%s\\n' ---; cat a.py", ("source.read_context", "a.py")),
    ("echo hi", ("test.automated", None)), ("echo x > a.py; cat a.py", ("test.automated", None)),
    ("cat f.py 2>/dev/null", ("source.read_context", "f.py")), ("cat 2 >/dev/null", ("source.read_context", "2")),
    ("/usr/bin/cat f.py", ("source.read_context", "f.py")), ("sed -l 5 -n 1p f.py", ("source.read_context", "f.py")),
    ("cat f.py | awk -F: -v x=1 '{print $1}' | sort -t, -k2", ("source.read_context", "f.py")),
    ("cat f.py | /usr/bin/xargs cat", ("source.read_context", "f.py")),
    ("sed -n '/[/]/p' f.py", ("source.read_context", "f.py")), ("sed -n 's/[]]/x/p' f.py", ("source.read_context", "f.py")),
    ("cat ${HOME}/f.py", ("source.read_context", None)), ("goto 10", ("source.read_context", None)),
    ("search_file foo f.py", ("source.find_text", "f.py")), ("grep --include=*.{py,txt} -rn x src", ("source.find_text", "src")), ("grep -q x f &>/dev/null && echo y", ("source.find_text", "f")),
    ("grep -rn x src 2>>/dev/null | head", ("source.find_text", "src")), ("cat <  /dev/null f", ("source.read_context", "f")),
    ("cat f >/dev/nullx", ("test.automated", None)), ("cat f > /dev/null.txt", ("test.automated", None)),
    ("cat x.py 2>&1", ("source.read_context", "x.py")), ("grep -n foo a.py 2>&1 | head -5", ("source.find_text", "a.py")),
    ("grep -l x src | xargs cat", ("source.find_text", "src")), ("cat a.py | awk '{print $1}' | sort | uniq",
                                                              ("source.read_context", "a.py")),
    ("sed -n 1,5p f.py", ("source.read_context", "f.py")), ("tree -L 2 src", ("source.find_text", "src")),
    ("rg --pre-glob '*.gz' foo src", ("source.find_text", "src")), ("less setup.py", ("source.read_context", "setup.py")),
    ("grep --include '*.py' -rn foo src", ("source.find_text", "src")), ("ag -G py foo src", ("source.find_text", "src")),
    ("rg --glob '*.py' foo src", ("source.find_text", "src")), ("rg --type py foo src", ("source.find_text", "src"))])
def test_a_descriptor_copy_and_what_xargs_reads_keep_a_read_a_read(command, expected):
    """2>&1 names no file (it was taken for a redirection, the step the default action), nor does a
    redirection to or from /dev/null (2>/dev/null made a read the default action); the files
    xargs hands a reader come from the pipe, so they are no target; a long option's value given as
    the next word (--include '*.py', ag's -G) is no path (the read lost its target)."""
    from ledger.runs.actions import classify

    assert classify(command) == expected


@pytest.mark.parametrize("command, expected", [
    ("sed -ne '/def/,+5p' f.py", ("source.read_context", "f.py")), ("sed --expression=1d f.py", ("source.read_context", "f.py")),
    ("sed --expression 1d f.py", ("source.read_context", "f.py")), ("grep --regexp=foo a.py", ("source.find_text", "a.py")),
    ("grep --regexp foo a.py", ("source.find_text", "a.py")), ("grep -rne foo src", ("source.find_text", "src")),
    ("rg -f patterns.txt src", ("source.find_text", "src")), ("grep -f pats.txt f.py", ("source.find_text", "f.py")),
    ("grep --file=pats.txt f.py", ("source.find_text", "f.py")), ("sed 's/w/e/g' f.py", ("source.read_context", "f.py")),
    ("sed -n '/we/p' f.py", ("source.read_context", "f.py")), ("sed '/x/a we said' f.py", ("source.read_context", "f.py")),
    ("sed 'y/we/ew/' f.py", ("source.read_context", "f.py")), ("sed -n '/a/{p;q}' f.py", ("source.read_context", "f.py"))])
def test_a_pattern_or_script_given_by_option_leaves_the_first_plain_word_a_path(command, expected):
    """-ne SCRIPT (e last in a cluster), --expression and --regexp give the script or pattern as
    -e does: the first plain word is then a path (it was taken for the script, so no target). A
    sed script's letters w and e inside a pattern, a text or a y command write nothing."""
    from ledger.runs.actions import classify

    assert classify(command) == expected


@pytest.mark.parametrize("command, writes", [
    ("sed -n '# note\nw out' f.py", True), ("sed -n ':top\nw out' f.py", True), ("sed '/x/a hi\nw out' f.py", True),
    ("sed -n 'r h.txt\ns/a/b/e' f.py", True), ("sed -n 'b;w out' f.py", True), ("sed -n ':a;w out' f.py", True),
    ("sed '1i\\\nwest\nw x' f.py", True), ("sed 's|a|b|w out' f.py", True), ("sed 's,a,b,e' f.py", True),
    ("sed -f s.sed events.log", True), ("sed -n -f prog.sed web.py", True), ("sed --file=prog.sed west.py", True),
    ("sed -n '/[/]e/p' f.py", False), ("sed -e '1a\\' -e 'west' f.py", False), ("sed '1i\\\nwest' f.py", False),
    ("sed -n \\\n '1,5p' f.py", False), ("sed -n \\\n '1p;w out' f.py", True)])
def test_a_sed_script_of_several_lines_or_parts_is_read_as_sed_reads_it(command, writes):
    """A line end inside the quotes ends a comment, a label or a text to add, as it does for sed (it
    was made a ';' and the rest of the script was taken for the comment); a label also ends at ';';
    -e parts are one script joined by line ends; a bracket holds the delimiter; a script from a file
    (-f), which is not read, may write, as awk's may: the default action (its first plain word had
    been read as the script, and 'events' holds an e); a backslash before a line end joins the lines,
    as the shell does (it was a word of its own)."""
    from ledger.runs.actions import classify

    action, target = classify(command)
    assert (action == "test.automated") == writes, (action, target)
    if not writes:
        assert target == command.split()[-1]


@pytest.mark.parametrize("command, expected", [
    ("sed -n $'1p\\nw out' f.py", ("test.automated", None)), ("sed -n $'1,5p' f.py", ("source.read_context", "f.py")),
    ("sed $'s/a/b/\\x77 out' f.py", ("test.automated", None)), ("cat $'f\\x2epy'", ("source.read_context", "f.py")),
    ("grep $'it\\'s' a.py", ("source.find_text", "a.py")), ("cat $'a b'", ("source.read_context", "a b")),
    ("grep \"$'x'\" a.py", ("source.find_text", "a.py")), ("cat '$'x", ("source.read_context", None)),
    ("cat $'open", ("test.automated", None)), ("sed -n $'1p\\nw o' f.py # $'\\'", ("test.automated", None)),
    ("cat $'\\303\\251.py'", ("source.read_context", "é.py")), ("cat $'\\xc3\\xa9.py'", ("source.read_context", "é.py")),
    ("cat $'a.py\\0b'", ("source.read_context", "a.py")), ("cat $'\\x{61}.py'", ("source.read_context", "a.py")),
    ("cat $'\\UFFFFFFFFa.py'", ("source.read_context", "a.py")), ("cat $$'a.py'", ("source.read_context", None)),
    ("# read it\ncat f.py # the file", ("source.read_context", "f.py")), ("cat a#b.py", ("source.read_context", "a#b.py")),
    ("grep '#x' f.py", ("source.find_text", "f.py")), ("cat notes\\ #1.txt; rm -rf src", ("test.automated", None)),
    ("cat a\\;#b > out", ("test.automated", None)), ("cat x\\\n#y > out", ("test.automated", None)),
    ("cat \\\n#y > out", ("source.read_context", None)), ("cat f.py;#x > o", ("source.read_context", "f.py")),
    ("cat ${f:- #} > out", ("test.automated", None)), ("sed -n 1p ${f:- #} -i a", ("test.automated", None)),
    ("cat \"${x:-\" #\"}\" > out", ("test.automated", None)), ("cat ${x#y} f.py # c", ("test.automated", None)),
    ("sed -n $'\\x{77 out' a", ("test.automated", None)), ("sed $'-\\x{69' s/a/b/ f", ("test.automated", None))])
def test_an_ansi_c_quoted_string_is_read_as_the_shell_decodes_it(command, expected):
    """$'…' strings decode their backslash escapes as bash 5.2 does (bytes joined as UTF-8, a NUL
    ending the string), so a sed script written in one (a w command after \\n, a w as \\x77) writes
    as it does unquoted; they were read with the $ and the backslashes kept. Inside other quotes $' is
    plain text; one never closed cannot be split (the default action), unless a comment holds it: a
    # starting a word starts a comment, as in the shell (it was a word, and a later $' in it undid
    the decoding of the whole command); one after an escaped blank or a continued line does not."""
    from ledger.runs.actions import classify

    assert classify(command) == expected


def test_an_actions_file_may_name_a_program_with_its_subcommand(tmp_path):
    from ledger.runs.actions import ActionMap, classify

    (tmp_path / "a.toml").write_text('[[rules]]\naction = "source.edit"\nprograms = ["str_replace_editor str_replace"]\n')
    mapping = ActionMap.load(tmp_path / "a.toml")
    assert classify("str_replace_editor str_replace a.py", mapping) == ("source.edit", "a.py")
    assert classify("str_replace_editor view a.py", mapping) == ("test.automated", None)
