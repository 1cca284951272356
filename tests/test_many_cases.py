"""docs/cli.md: `ledger verify CASE…` and `ledger export CASE…` over several cases and worker processes."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from ledger import BudgetConfig, LedgerError, build_folders, case_folders, export_many, verify_case, verify_many
from ledger.ground.errors import INTEGRITY_ERROR, INVALID_ARGUMENT, LEDGER_MISSING

from conftest import deny_reading, run_cli, start_case


def make_cases(root: Path, count: int) -> list[Path]:
    """``count`` small honest cases (a revision, a budget, one settled action) under ``root``."""
    paths = []
    for number in range(1, count + 1):
        path = root / f"case-{number:02d}"
        case = start_case(path, case_id=f"BUG-{number}")
        budget = case.budget(BudgetConfig.example())
        budget.initialize()
        budget.reserve("H1", "q1", "source.read_context")
        budget.record_result("H1", "q1", {"finding": f"observation {number}"})
        budget.settle("H1", "q1", 50, "relevant")
        case.close()
        paths.append(path)
    return paths


def tamper(path: Path) -> None:
    """An edited event body with every trigger dropped (what a determined tamperer has)."""
    conn = sqlite3.connect(path / "ledger.sqlite")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("UPDATE events SET body = replace(body, '\"semantic_score\":50', '\"semantic_score\":60') "
                 "WHERE type = 'budget.settled'")
    conn.commit()
    conn.close()


@pytest.fixture(scope="module")
def four_cases(tmp_path_factory) -> list[Path]:
    return make_cases(tmp_path_factory.mktemp("many"), 4)


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_verify_many_reports_each_case_in_order_and_counts_them(four_cases):
    seen = []
    report = verify_many(four_cases, jobs=2, each=seen.append)
    assert [outcome["case"] for outcome in report.cases] == [str(p) for p in four_cases]
    assert seen == report.cases
    assert (report.passed, report.failed) == (4, 0)
    assert all(outcome["report"]["events"] == 7 for outcome in report.cases)
    assert report.to_dict()["ok"] is True


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_one_failing_case_fails_alone_and_the_others_are_still_checked(tmp_path):
    cases = make_cases(tmp_path, 3)
    tamper(cases[1])
    for jobs in (1, 2):
        report = verify_many(cases, jobs=jobs)
        assert [outcome["ok"] for outcome in report.cases] == [True, False, True]
        assert report.cases[1]["error"]["code"] == INTEGRITY_ERROR
        assert (report.passed, report.failed) == (2, 1)


def test_a_missing_case_is_a_failed_line_not_an_exception(four_cases, tmp_path):
    report = verify_many([four_cases[0], tmp_path / "nowhere"], jobs=1)
    assert report.cases[1]["ok"] is False and report.cases[1]["error"]["code"] == LEDGER_MISSING
    assert report.passed == 1


def test_a_case_given_twice_is_verified_once(four_cases):
    report = verify_many([four_cases[0], four_cases[0], four_cases[1]], jobs=2)
    assert [outcome["case"] for outcome in report.cases] == [str(four_cases[0]), str(four_cases[1])]


def test_jobs_must_be_a_positive_integer(four_cases):
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(LedgerError) as caught:
            verify_many(four_cases, jobs=bad)
        assert caught.value.code == INVALID_ARGUMENT


def test_case_folders_lists_the_cases_inside_a_folder_sorted_and_refuses_a_folder_with_none(four_cases, tmp_path):
    root = four_cases[0].parent
    (root / "not-a-case").mkdir(exist_ok=True)
    assert case_folders([root]) == sorted(four_cases)
    with pytest.raises(LedgerError) as caught:
        case_folders([tmp_path])
    assert caught.value.code == INVALID_ARGUMENT and "a case itself" not in caught.value.message
    with pytest.raises(LedgerError) as caught:
        case_folders([four_cases[0]])
    assert caught.value.message.endswith("holds no case folder (a folder with ledger.sqlite) (it is a case itself: "
                                         "leave out --all)")


def test_a_folder_of_cases_that_is_a_link_to_nothing_is_named_as_such(tmp_path):
    (tmp_path / "cases").symlink_to(tmp_path / "moved-away")
    with pytest.raises(LedgerError) as caught:
        case_folders([tmp_path / "cases"])
    assert caught.value.code == INVALID_ARGUMENT
    assert caught.value.message == (f"{tmp_path / 'cases'} (a folder of cases) is a link that leads nowhere "
                                    f"(to {tmp_path / 'moved-away'}, which is not there); give a folder, or remove "
                                    "the link")
    missing = run_cli("verify", "--all", str(tmp_path / "gone"))  # no link: the system's own words
    assert missing.stderr.decode().startswith(f"error: INVALID_ARGUMENT: cannot list the cases in {tmp_path / 'gone'}: ")


def test_a_link_to_a_case_folder_is_one_of_the_cases_of_its_folder(four_cases, tmp_path):
    """A folder of links to cases kept elsewhere: each link is verified as its case (it was passed by
    silently, and the summary counted only the others)."""
    (tmp_path / "linked").symlink_to(four_cases[1], target_is_directory=True)
    (tmp_path / "broken").symlink_to(tmp_path / "nowhere")
    (tmp_path / "own").symlink_to(four_cases[0].parent, target_is_directory=True)  # a folder of cases, no case
    make_cases(tmp_path / "here", 1)
    (tmp_path / "here" / "linked").symlink_to(four_cases[2], target_is_directory=True)
    (tmp_path / "here" / "loopA").symlink_to("loopB")  # links that loop or lead through a file: no folders
    (tmp_path / "here" / "loopB").symlink_to("loopA")
    (tmp_path / "here" / "through").symlink_to(tmp_path / "here" / "case-01" / "ledger.sqlite" / "x")
    assert case_folders([tmp_path / "here"]) == [tmp_path / "here" / "case-01", tmp_path / "here" / "linked"]
    report = verify_many(case_folders([tmp_path / "here"]), jobs=1)
    assert [(Path(o["case"]).name, o["ok"]) for o in report.cases] == [("case-01", True), ("linked", True)]
    (tmp_path / "here" / "a-link").symlink_to("case-01")  # the case and a link to it: once, by its own name
    assert [Path(o["case"]).name for o in verify_many(case_folders([tmp_path / "here"]), jobs=1).cases] == [
        "case-01", "linked"]


@pytest.mark.parametrize("left", ["manifest.json and analysis/", "ledger.sqlite-wal", "ledger.sqlite-lock"])
@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_case_folder_that_lost_its_ledger_fails_and_is_never_left_out(tmp_path, left):
    """A package whose ``ledger.sqlite`` is gone but which still shows a case's marks (its export,
    or the ledger's side files) is one of the cases ``--all`` finds, and it fails with
    ``LEDGER_MISSING``: leaving it out would report every case verified while one cannot be."""
    cases = make_cases(tmp_path, 2)
    if left == "manifest.json and analysis/":
        assert export_many(cases).failed == 0
    else:
        (cases[1] / left).write_bytes(b"")
    (cases[1] / "ledger.sqlite").unlink()
    (tmp_path / "notes").mkdir()  # a folder with no mark of a case is no case
    (tmp_path / "notes" / "manifest.json").write_text("{}")
    assert case_folders([tmp_path]) == cases
    for run in (verify_many, export_many):
        report = run(case_folders([tmp_path]), jobs=1)
        assert [outcome["ok"] for outcome in report.cases] == [True, False]
        assert report.cases[1]["error"]["code"] == LEDGER_MISSING
    done = run_cli("verify", "--all", str(tmp_path))
    assert done.returncode == 1
    assert f"FAILED {cases[1]}: LEDGER_MISSING: ".encode() in done.stdout and b"1 ok, 1 failed" in done.stdout


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_export_many_exports_every_case_and_a_second_run_writes_nothing(tmp_path):
    cases = make_cases(tmp_path, 3)
    first = export_many(cases, jobs=2)
    assert first.failed == 0 and all(o["report"]["files_written"] > 0 for o in first.cases)
    second = export_many(cases, jobs=2)
    assert [o["report"]["files_written"] for o in second.cases] == [0, 0, 0]
    assert all((case / "manifest.json").is_file() for case in cases)
    assert verify_many(cases, jobs=2, strict=True).failed == 0


def test_strict_fails_a_case_whose_export_is_not_current(four_cases):
    report = verify_many(four_cases[:2], jobs=1, strict=True)
    assert report.failed == 2 and report.cases[0]["error"]["code"] == INTEGRITY_ERROR
    assert report.cases[0]["error"]["message"] == ("the case was never exported (no manifest.json) (--strict); "
                                                   "run 'ledger export'")
    assert [case["report"]["ok"] for case in report.cases] == [False, False]  # said true: never ok under --strict


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_cli_verify_prints_one_line_per_case_and_a_summary_and_exits_1_when_one_fails(tmp_path):
    cases = make_cases(tmp_path, 3)
    tamper(cases[2])
    done = run_cli("verify", *map(str, cases), "--jobs", "2")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.decode().splitlines()
    for case, line in zip(cases[:2], lines):  # the head's sha256 too: what --anchor takes
        assert line == f"ok {case}: 7 events, 1 contents, head seq 7 sha256 {verify_case(case).head_sha256}"
    assert lines[2].startswith(f"FAILED {cases[2]}: INTEGRITY_ERROR: ")
    assert lines[3] == "verified 3 case(s): 2 ok, 1 failed"
    assert len(lines) == 4
    assert done.stderr.decode().splitlines() == [f"note: {case}: not exported: there is no manifest.json; run "
                                                 "'ledger export'" for case in cases[:2]]


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_cli_verify_all_takes_every_case_in_the_folder_and_exits_0_when_all_pass(four_cases):
    done = run_cli("verify", "--all", str(four_cases[0].parent), "--jobs", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [f"ok {case}" for case in four_cases]
    assert lines[-1] == "verified 4 case(s): 4 ok, 0 failed"


@pytest.mark.slow  # over 0.5 s in the default run: the slow lane (.ci/run) runs it
def test_cli_verify_json_prints_one_object_for_several_cases(four_cases):
    done = run_cli("verify", *map(str, four_cases[:2]), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["passed"], result["failed"], result["ok"]) == (2, 0, True)
    assert [c["report"]["head_seq"] for c in result["cases"]] == [7, 7]


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_cli_single_case_output_is_unchanged(four_cases):
    done = run_cli("verify", str(four_cases[0]))
    assert done.returncode == 0
    assert done.stdout.decode().startswith("ok: 7 events, 1 contents, head seq 7 sha256 ")


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_cli_jobs_with_one_case_prints_the_multi_case_lines(four_cases):
    done = run_cli("verify", str(four_cases[0]), "--jobs", "1")
    head = verify_case(four_cases[0]).head_sha256
    assert done.stdout.decode().splitlines() == [f"ok {four_cases[0]}: 7 events, 1 contents, head seq 7 sha256 {head}",
                                                 "verified 1 case(s): 1 ok, 0 failed"]


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_cli_several_cases_print_each_cases_notes_on_stderr(four_cases, tmp_path):
    """What one case's verify notes (here: never exported) is printed for each case of several too."""
    exported = tmp_path / "exported"
    make_cases(exported, 1)
    assert run_cli("export", str(exported / "case-01")).returncode == 0
    done = run_cli("verify", str(four_cases[0]), str(exported / "case-01"), "--jobs", "1")
    assert done.returncode == 0 and len(done.stdout.decode().splitlines()) == 3
    notes = [line for line in done.stderr.decode().splitlines() if line.startswith("note:")]
    assert notes == [f"note: {four_cases[0]}: not exported: there is no manifest.json; run 'ledger export'"]


@pytest.mark.slow  # over 0.5 s in the default run: the slow lane (.ci/run) runs it
def test_cli_export_several_cases_and_a_missing_one(tmp_path):
    cases = make_cases(tmp_path, 2)
    missing = tmp_path / "empty"
    missing.mkdir()
    done = run_cli("export", *map(str, cases), str(missing), "--jobs", "2")
    assert done.returncode == 1
    lines = done.stdout.decode().splitlines()
    assert lines[0].startswith(f"ok {cases[0]}: ") and "files written" in lines[0]
    assert re.search(r"; head seq [0-9]+ sha256 [0-9a-f]{64}$", lines[0]), lines[0]  # what an anchor takes
    assert lines[2].startswith(f"FAILED {missing}: {LEDGER_MISSING}: ")
    assert lines[3] == "exported 3 case(s): 2 ok, 1 failed"


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_cli_usage_errors_of_several_cases(four_cases, tmp_path):
    assert run_cli("verify", "--all", str(tmp_path)).returncode == 1  # no case inside: INVALID_ARGUMENT
    assert b"INVALID_ARGUMENT" in run_cli("verify", "--all", str(tmp_path)).stderr
    assert run_cli("verify", *map(str, four_cases[:2]), "--csv").returncode == 2
    assert run_cli("verify", str(four_cases[0]), "--jobs", "0").returncode == 2
    assert run_cli("verify").returncode == 2


def test_arguments_of_several_cases_are_checked_before_anything_runs(four_cases):
    for call in (lambda: verify_many(four_cases, each="print"), lambda: export_many(four_cases, each=1),
                 lambda: export_many(four_cases, analysis_config={"storage": {}}),
                 lambda: verify_many([1, 2]), lambda: verify_many(four_cases, strict="yes"),
                 lambda: case_folders(None)):
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == INVALID_ARGUMENT


def test_one_path_is_one_case_not_its_characters(four_cases):
    report = verify_many(str(four_cases[0]), jobs=1)
    assert [outcome["case"] for outcome in report.cases] == [str(four_cases[0])]
    assert case_folders(str(four_cases[0].parent)) == sorted(four_cases)


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_all_leaves_out_build_folders_and_says_so_on_stderr(four_cases):
    """A folder named like an import's or a demo's build folder is a run's scratch: `--all` leaves it
    out of the cases (it is neither verified nor failed) and notes it on stderr, stdout unchanged."""
    import shutil

    root = four_cases[0].parent
    scratch = [root / ".case-02.importing-999999-1", root / ".ledger-demo-building-demo.999999"]
    for folder in scratch:
        shutil.copytree(four_cases[1], folder)
    assert case_folders([root]) == four_cases
    assert build_folders([root]) == scratch
    done = run_cli("verify", "--all", str(root), "--jobs", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines()[-1] == "verified 4 case(s): 4 ok, 0 failed; 2 left out (see the notes)"
    assert done.stderr.decode().splitlines()[:2] == [
        f"note: {folder}: left out: named like an import's or a demo's build folder (a run's scratch, which a "
        "killed run leaves and the next import or demo there removes)" for folder in scratch]
    exported = json.loads(run_cli("export", "--all", str(root), "--json").stdout)
    assert exported["passed"] == 4 and [item["path"] for item in exported["left_out"]] == list(map(str, scratch))


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_build_folder_holding_a_whole_exported_case_is_left_out_for_its_name_alone(tmp_path):
    """An import builds a whole case, exported, in its build folder: `--all` leaves such a folder out
    with the one note its name earns (it was also said to hold "an export's analysis/ but no
    ledger.sqlite", which it does not), and the summary line counts it."""
    import shutil

    from ledger.package_tools.many import left_out

    [case] = make_cases(tmp_path / "cases", 1)
    assert run_cli("export", str(case)).returncode == 0
    scratch = case.parent / ".bad.importing-999999-1"
    shutil.copytree(case, scratch)
    build_note = ("named like an import's or a demo's build folder (a run's scratch, which a killed run leaves and "
                  "the next import or demo there removes)")
    assert left_out([case.parent]) == [(scratch, build_note)]
    done = run_cli("verify", "--all", str(case.parent), "--jobs", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines()[-1] == "verified 1 case(s): 1 ok, 0 failed; 1 left out (see the notes)"
    assert [line for line in done.stderr.decode().splitlines() if "left out" in line] == [
        f"note: {scratch}: left out: {build_note}"]
    listed = json.loads(run_cli("verify", "--all", str(case.parent), "--json").stdout)
    assert (listed["passed"], listed["left_out"]) == (1, [{"path": str(scratch), "why": build_note}])


@pytest.mark.slow  # over 0.5 s in the default run: the slow lane (.ci/run) runs it
def test_all_notes_links_that_lead_nowhere_or_loop_and_a_second_link_to_a_case_it_takes_once(tmp_path):
    """Nothing left out without a word: a link to a folder that is gone, one that loops, a folder
    holding an export's analysis/ alone, and a link to a case listed already (verified once, under its
    own name) are each a note on stderr."""
    from ledger.package_tools.many import left_out

    cases = make_cases(tmp_path / "cases", 2)
    root = cases[0].parent
    (root / "a-gone").symlink_to(root / "nowhere")
    (root / "b-loop").symlink_to(root / "b-loop")
    (root / "z-again").symlink_to(cases[1])
    (root / "c-export-alone" / "analysis" / "case" / "events").mkdir(parents=True)  # an export whose case is gone
    (root / "d-notes" / "analysis").mkdir(parents=True)  # a folder like any other: no note
    assert left_out([root]) == [(root / "a-gone", "a link that leads nowhere or loops"),
                                (root / "b-loop", "a link that leads nowhere or loops"),
                                (root / "c-export-alone", "holds an export's analysis/ but no ledger.sqlite, none of "
                                                          "its side files and no manifest.json: not a case package"),
                                (root / "z-again", f"the same case folder as {cases[1]}, which is taken once")]
    done = run_cli("verify", "--all", str(root), "--jobs", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines()[-1] == "verified 2 case(s): 2 ok, 0 failed; 4 left out (see the notes)"
    assert [line for line in done.stderr.decode().splitlines() if "left out" in line] == [
        f"note: {path}: left out: {why}" for path, why in left_out([root])]



@pytest.mark.parametrize("command", ["verify", "export"])
def test_a_case_named_again_by_another_path_is_taken_once_and_said_so(tmp_path, command):
    """Cases named one by one: a link to one named already, or its own path written again, is taken
    once, under its first path, with the note --all gives (it was dropped without a word)."""
    cases = make_cases(tmp_path / "cases", 2)
    (tmp_path / "again").symlink_to(cases[0])
    done = run_cli(command, str(cases[0]), str(tmp_path / "again"), str(cases[1]), "--jobs", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines()[-1].endswith(" 2 case(s): 2 ok, 0 failed; 1 left out (see the notes)")
    assert [line for line in done.stderr.decode().splitlines() if "left out" in line] == [
        f"note: {tmp_path / 'again'}: left out: the same case folder as {cases[0]}, which is taken once"]
    done = run_cli(command, str(cases[0]), str(cases[0]) + "/", "--jobs", "1")  # the same path, written twice
    assert done.returncode == 0 and done.stdout.decode().splitlines()[-1].endswith(
        " 1 case(s): 1 ok, 0 failed; 1 left out (see the notes)")
    assert [line for line in done.stderr.decode().splitlines() if "left out" in line] == [
        f"note: {cases[0]}: left out: the same case folder as {cases[0]}, which is taken once"]

def test_a_folder_of_cases_this_user_may_not_list_fails_in_verify_all(tmp_path, monkeypatch):
    """A folder inside the folder of cases that cannot be listed may be a case: it is taken and
    fails (STORAGE_ERROR), never left out without a word."""
    start_case(tmp_path / "cases" / "visible").close()
    (tmp_path / "cases" / "locked").mkdir()
    deny_reading(monkeypatch, tmp_path / "cases" / "locked")
    try:
        report = verify_many(case_folders([tmp_path / "cases"]), jobs=1)
    finally:
        (tmp_path / "cases" / "locked").chmod(0o755)
    assert [(outcome["case"], outcome["ok"]) for outcome in report.cases] == [
        (str(tmp_path / "cases" / "locked"), False), (str(tmp_path / "cases" / "visible"), True)]
    assert report.cases[0]["error"]["code"] == "STORAGE_ERROR"
    assert "may not read the folder" in report.cases[0]["error"]["message"] or \
        "Permission denied" in report.cases[0]["error"]["message"]


def _long_cases(root: Path, count: int, actions: int) -> list[Path]:
    """``count`` copies of one case of ``actions`` settled actions (3 budget events each), each
    taking a second or more to export or verify, none exported yet."""
    import shutil

    from ledger import AnalysisConfig, Case

    first = root / "long-1"
    case = Case.create(first, "LONG-1", analysis_config=AnalysisConfig(limits={"budget_events_max": 100_000}))
    case.open_revision([{"statement": "a"}], 100_000)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget(BudgetConfig.example())
    budget.initialize()
    with case.batch():
        for n in range(actions):
            budget.reserve("H1", f"q{n}", "source.read_context")
            budget.record_result("H1", f"q{n}", {"finding": f"observation {n}"})
            budget.settle("H1", f"q{n}", 50, "relevant")
    case.close()
    paths = [first]
    for number in range(2, count + 1):
        paths.append(root / f"long-{number}")
        shutil.copytree(first, paths[-1])
    return paths


@pytest.mark.slow  # seconds of work per case: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("command", ["export", "verify"])
def test_sigterm_to_the_process_group_stops_the_workers_as_ctrl_c_does_leaving_nothing(tmp_path, command):
    """What timeout, a CI runner or a service manager sends, to every process of the command: the
    workers kept SIGINT blocked but died of SIGTERM at once, leaving an export's temporary files in
    the packages and verify's scratch folders; the command said nothing half-written remained."""
    import os
    import signal
    import subprocess
    import sys
    import time

    cases = _long_cases(tmp_path / "cases", 6, 700)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "ledger_cli", command, "--jobs", "3", *map(str, cases)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env={**os.environ, "TMPDIR": str(scratch)})
    try:
        deadline = time.monotonic() + 60
        children: list[str] = []
        while time.monotonic() < deadline:  # the workers started (beside the resource tracker) and at work
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
            if len(children) >= 3:
                break
            time.sleep(0.02)
        time.sleep(0.3)
        assert process.poll() is None, "the command ended before the signal: give it more work"
        os.killpg(process.pid, signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert len(children) >= 3, "the workers did not start"
    assert process.returncode == 143 and "Traceback" not in err, err
    assert err.endswith("error: interrupted; nothing half-written remains, run the command again\n"), err
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
                  if ".ledger-tmp" in p.name or p.parent == scratch)
    assert left == []
    # the workers finish the cases they hold; the calling process's own verify, cut short, closes its
    # read of the case it was at, with the cursor its frames held (no -wal or -shm left beside it)
    assert sorted(p.name for p in tmp_path.rglob("ledger.sqlite-*") if p.name.endswith(("-wal", "-shm"))) == []
    for path in cases:
        verify_case(path)


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_folder_of_cases_named_twice_is_read_once_and_one_holding_only_what_is_left_out_says_what(tmp_path):
    """`--all big ./big/` listed every case and every entry left out twice (each case's second listing a
    note of its own); a folder holding only entries left out was refused with none of their notes."""
    from ledger.package_tools.many import left_out

    cases = make_cases(tmp_path / "big", 2)
    root = cases[0].parent
    (root / "gone").symlink_to(root / "nowhere")
    assert case_folders([root, f"{root}/", tmp_path / "big" / "."]) == cases
    assert left_out([root, f"{root}/"]) == [(root / "gone", "a link that leads nowhere or loops")]
    done = run_cli("verify", "--all", str(root), f"{root}/", "--jobs", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines()[-1] == "verified 2 case(s): 2 ok, 0 failed; 1 left out (see the notes)"
    only = tmp_path / "only"
    only.mkdir()
    (only / "gone").symlink_to(only / "nowhere")
    done = run_cli("verify", "--all", str(only))
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        f"note: {only / 'gone'}: left out: a link that leads nowhere or loops",
        f"error: INVALID_ARGUMENT: {only} holds no case folder (a folder with ledger.sqlite)"]
