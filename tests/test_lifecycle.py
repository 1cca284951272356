"""docs/concepts.md: the case package, its states and revisions, input identity."""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

from ledger import AnalysisConfig, Case, LedgerError, export_case
from ledger.ground.clock import format_utc
from ledger.ground.errors import (ACTION_PENDING, CASE_EXISTS, INVALID_ARGUMENT, INVALID_ID, INVALID_TRANSITION,
    LEDGER_MISSING)
from conftest import start_case, run_cli

def test_create_records_the_genesis_event_and_a_uuid4_package_id(package):
    with Case.create(package, "BUG-20") as case:
        status = case.status()
    assert status["case_id"] == "BUG-20" and status["state"] == "CREATED"
    assert status["analysis_revision"] == 0 and status["package_generation"] == 1
    assert len(status["package_id"]) == 36 and status["package_id"][14] == "4"
    assert (package / "ledger.sqlite").is_file() and (package / "sources" / "app.py").is_file()


@pytest.mark.parametrize("leftover", ["manifest.json", "analysis"])
def test_create_refuses_a_folder_with_a_manifest_or_an_analysis_tree(package, leftover):
    target = package / leftover
    target.mkdir() if leftover == "analysis" else target.write_text("{}")
    with pytest.raises(LedgerError) as caught:
        Case.create(package, "BUG-1")
    assert caught.value.code == CASE_EXISTS
    assert caught.value.message == (f"{package} already holds an exported case without its ledger.sqlite: 'ledger "
                                    "import' rebuilds the ledger from it" if leftover == "manifest.json" else
                                    f"{package} already holds an analysis/ tree (an export's, without its "
                                    "manifest.json): move it aside to create a case here")


@pytest.mark.parametrize("ledger", ["empty", "folder", "no SQLite", "no case"])
def test_create_beside_an_export_and_a_ledger_file_holding_no_case_says_to_move_that_file(package, ledger):
    """It was said to hold a case ledger when the file was not empty, and to be rebuilt by import
    when it was (which refuses while the file is there)."""
    (package / "manifest.json").write_text("{}")
    target = package / "ledger.sqlite"
    if ledger == "folder":
        target.mkdir()
    elif ledger == "no case":
        sqlite3.connect(target).execute("CREATE TABLE t (x)").connection.close()
    else:
        target.write_bytes(b"" if ledger == "empty" else b"x")
    with pytest.raises(LedgerError) as caught:
        Case.create(package, "BUG-1")
    assert caught.value.code == CASE_EXISTS
    assert caught.value.message == (f"{package} already holds an exported case and a ledger.sqlite that holds no "
                                    "case: move that file aside, then 'ledger import' rebuilds the ledger from the "
                                    "export")


@pytest.mark.parametrize("exported", [False, True])
def test_create_refuses_a_folder_with_a_ledger_saying_so_exported_or_not(package, exported):
    with Case.create(package, "BUG-1") as case:
        if exported:
            export_case(case)
    with pytest.raises(LedgerError) as caught:
        Case.create(package, "BUG-1")
    assert caught.value.code == CASE_EXISTS
    assert caught.value.message == f"{package} already holds a case ledger" + (" (and its export)" if exported else "")


def test_create_refuses_a_malformed_case_id(package):
    with pytest.raises(LedgerError) as caught:
        Case.create(package, "bug 20")
    assert caught.value.code == INVALID_ID
    assert not (package / "ledger.sqlite").exists()


def test_a_missing_ledger_beside_an_export_is_ledger_missing_never_a_fresh_ledger(package):
    from ledger import export_case

    with start_case(package) as case:
        export_case(case)
    (package / "ledger.sqlite").unlink()
    with pytest.raises(LedgerError) as caught:
        Case.open(package)
    assert caught.value.code == LEDGER_MISSING
    assert caught.value.message == (f"{package / 'ledger.sqlite'} is missing but the package has an export; restore "
                                    f"it with 'ledger import {package}' (in place) instead of starting a new ledger, "
                                    "or check the export without writing into this folder (an export you received) "
                                    f"with 'ledger import {package} --to NEW_FOLDER'")
    assert not (package / "ledger.sqlite").exists()
    from ledger_cli.main import main as cli_main  # the commands the message gives check and restore it
    from click.testing import CliRunner
    done = CliRunner().invoke(cli_main, ["import", str(package), "--to", str(package.parent / "checked")])
    assert done.exit_code == 0 and not (package / "ledger.sqlite").exists(), done.output
    done = CliRunner().invoke(cli_main, ["import", str(package)])
    assert done.exit_code == 0, done.output
    with Case.open(package) as restored:
        assert restored.status()["state"] == "INVESTIGATING_HYPOTHESES"


@pytest.mark.parametrize("kind", ["a folder", "a link to nothing"])
def test_a_ledger_file_that_is_no_file_is_a_storage_error_saying_to_move_it_aside(package, tmp_path, kind):
    """Calling it missing sent the user to an import that refused (the name is taken)."""
    from ledger import export_case, verify_case

    with start_case(package) as case:
        export_case(case)
    for name in ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"):
        (package / name).unlink(missing_ok=True)
    if kind == "a folder":
        (package / "ledger.sqlite").mkdir()
    else:
        (package / "ledger.sqlite").symlink_to(tmp_path / "gone.sqlite")
    expected = (f"{package / 'ledger.sqlite'} is {kind}, not a ledger file: move it aside; then 'ledger import "
                f"{package}' restores it in place from the package's export")
    for call in (lambda: Case.open(package), lambda: verify_case(package)):
        with pytest.raises(LedgerError) as caught:
            call()
        assert (caught.value.code, caught.value.message) == ("STORAGE_ERROR", expected)
    from ledger.package_tools.many import case_folders
    bare = package.parent / "zz-bare"  # no export beside it: its ledger.sqlite alone marks it
    (bare / "ledger.sqlite").mkdir(parents=True)
    assert case_folders([package.parent]) == [package, bare]  # verify --all takes them (and fails them)


def test_opening_a_folder_without_a_case_is_ledger_missing(tmp_path):
    with pytest.raises(LedgerError) as caught:
        Case.open(tmp_path)
    assert caught.value.code == LEDGER_MISSING
    assert not (tmp_path / "ledger.sqlite").exists()


def test_opening_a_folder_that_does_not_exist_says_so(tmp_path):
    with pytest.raises(LedgerError) as caught:
        Case.open(tmp_path / "typo")
    assert caught.value.message == (f"no case at {tmp_path / 'typo'} (no such folder); check the path, or create a "
                                    "case there with 'ledger init'")
    assert not (tmp_path / "typo").exists()


def test_opening_a_path_through_a_link_loop_or_a_file_says_which(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "file").write_text("x")
    loop = tmp_path / "loop"
    for path, why in ((loop / "c", f"{loop}, a folder above it, is a symbolic link to {loop}: a loop of links"),
                      (tmp_path / "file" / "c", "a file stands where the path needs a folder")):
        with pytest.raises(LedgerError) as caught:
            Case.open(path)
        assert caught.value.code == LEDGER_MISSING and caught.value.message == f"no case at {path} ({why}); check the path"


def test_opening_a_folder_of_cases_says_to_name_one_of_them(tmp_path):
    for name in ("case-b", "case-a"):
        start_case(tmp_path / name).close()
    (tmp_path / "notes").mkdir()
    (tmp_path / "case-c").mkdir()  # a damaged case (its ledger deleted, its lock file left) is one too,
    (tmp_path / "case-c" / "ledger.sqlite-lock").touch()  # as verify --all takes it
    with pytest.raises(LedgerError) as caught:
        Case.open(tmp_path)
    assert caught.value.code == LEDGER_MISSING
    assert caught.value.message == (f"no case at {tmp_path} (no ledger.sqlite), but it holds case folders "
                                    f"(case-a, case-b, …): name one of them, or several ('ledger serve {tmp_path}/*'; "
                                    "'ledger verify' and 'ledger export' take the folder with --all)")
    assert not (tmp_path / "ledger.sqlite").exists()


def test_the_state_graph(package):
    case = Case.create(package, "BUG-1")
    try:
        for target in ("INVESTIGATING_HYPOTHESES", "EVALUATING", "CLOSED", "BLOCKED", "GENERATING_HYPOTHESES"):
            with pytest.raises(LedgerError) as caught:
                case.transition(target)
            assert caught.value.code == INVALID_TRANSITION
        assert case.open_revision([{"statement": "a"}]).case_state == "GENERATING_HYPOTHESES"
        for target in ("BLOCKED", "EVALUATING", "CLOSED", "CREATED"):
            with pytest.raises(LedgerError) as caught:
                case.transition(target)
            assert caught.value.code == INVALID_TRANSITION
        walk = ["INVESTIGATING_HYPOTHESES", "BLOCKED", "INVESTIGATING_HYPOTHESES", "EVALUATING", "CLOSED"]
        assert [case.transition(t).case_state for t in walk] == walk
        with pytest.raises(LedgerError) as caught:
            case.transition("INVESTIGATING_HYPOTHESES")
        assert caught.value.code == INVALID_TRANSITION
        with pytest.raises(LedgerError) as caught:
            case.transition("DONE")
        assert caught.value.code == INVALID_ARGUMENT
    finally:
        case.close()


def test_a_transition_to_the_current_state_is_a_reused_replay(case):
    first = case.status()["package_generation"]
    result = case.transition("INVESTIGATING_HYPOTHESES")
    assert result.reused is True and result.seq == first
    assert case.status()["package_generation"] == first


def test_evaluating_is_refused_while_an_action_is_pending(case, example_policy):
    budget = case.budget(example_policy)
    budget.initialize()
    budget.reserve("H2", "b1", "source.read_context")
    with pytest.raises(LedgerError) as caught:
        case.transition("EVALUATING")
    assert caught.value.code == ACTION_PENDING
    budget.fail("H2", "b1", "x")
    assert case.transition("EVALUATING").case_state == "EVALUATING"


def test_reopening_starts_the_next_revision_with_fresh_accounts_and_old_artifacts_stay(case, example_policy):
    budget = case.budget(example_policy)
    budget.initialize()
    budget.reserve("H1", "a1", "source.read_context")
    budget.record_result("H1", "a1", {"finding": "old"})
    budget.settle("H1", "a1", 100, "x")
    case.transition("EVALUATING")
    reopened = case.open_revision([{"statement": "a new idea"}], 30)
    assert (reopened.revision, reopened.case_state, reopened.reused) == (2, "GENERATING_HYPOTHESES", False)
    assert [h["hypothesis_id"] for h in reopened.hypotheses] == ["H1"]
    second = case.budget().initialize()  # no config: revision 1's policy carries over
    assert second.state["H1"]["remaining_units"] == 30
    budget2 = case.budget()
    budget2.reserve("H1", "a1", "source.read_context")  # same action id, new revision: a new identity
    result = budget2.record_result("H1", "a1", {"finding": "old"})
    assert result.action["novelty_score"] == 0  # a fresh revision does not make old evidence new
    rows = case.balances()
    assert [(r["revision"], r["hypothesis_id"], r["remaining_units"]) for r in rows] == [
        (1, "H1", 99), (1, "H2", 100), (2, "H1", 25)]


def test_open_revision_replays_while_the_case_is_still_in_that_revision(case):
    again = case.open_revision([{"statement": "hypothesis 1"}, {"statement": "hypothesis 2"}], 100)
    assert again.reused is True and again.revision == 1
    with pytest.raises(LedgerError) as caught:
        case.open_revision([{"statement": "different"}], 100)
    assert caught.value.code == INVALID_TRANSITION
    assert caught.value.message.endswith("; revision 1 is open with other hypotheses (2 of them): a re-run is "
                                         "reused only with the same hypotheses and units per hypothesis")


def test_open_revision_mid_revision_with_other_units_says_the_units_differ(case):
    """A journal re-run without the units its first run had (apply's --units-per-hypothesis) is not a
    re-run: INVALID_TRANSITION, and the message names both allocations."""
    with pytest.raises(LedgerError) as caught:
        case.open_revision([{"statement": "hypothesis 1"}, {"statement": "hypothesis 2"}], 500)
    assert (caught.value.code, caught.value.message) == (INVALID_TRANSITION, (
        "open_revision is allowed from CREATED, EVALUATING or CLOSED, not INVESTIGATING_HYPOTHESES; revision 1 "
        "is open with the same hypotheses at 100 units each, and this call asks for 500: a re-run is reused "
        "only with the same units per hypothesis"))


@pytest.mark.parametrize("hypotheses, units", [
    ([], None), ([{"statement": " "}], None), ([{"statement": "a", "extra": 1}], None),
    ([{"statement": f"h{i}"} for i in range(9)], None), ("not a list", None),
    ([{"statement": "a"}], 0), ([{"statement": "a"}], True), ([{"statement": "a"}], 1.5),
])
def test_open_revision_refuses_bad_batches(package, hypotheses, units):
    with Case.create(package, "BUG-1") as case:
        with pytest.raises(LedgerError) as caught:
            case.open_revision(hypotheses, units)
        assert caught.value.code == INVALID_ARGUMENT
        assert case.status()["package_generation"] == 1


def test_max_hypotheses_comes_from_the_analysis_config(package):
    with Case.create(package, "BUG-1", analysis_config=AnalysisConfig(max_hypotheses=2)) as case:
        with pytest.raises(LedgerError):
            case.open_revision([{"statement": "a"}, {"statement": "b"}, {"statement": "c"}])
        result = case.open_revision([{"statement": "a"}, {"statement": "b"}])
        assert [h["allocation_units"] for h in result.hypotheses] == [100, 100]


def test_input_identity_ignores_the_ledgers_own_files_and_sees_every_input(case, example_policy):
    from ledger import export_case

    before = case.input_identity()
    budget = case.budget(example_policy)
    budget.initialize()
    budget.reserve("H1", "a1", "source.read_context")
    budget.record_result("H1", "a1", {"x": 1}, ["sources/app.py"])
    export_case(case)
    assert case.input_identity() == before
    (case.path / "analysis" / "notes.txt").write_text("mine")
    changed = case.input_identity()
    assert changed != before
    (case.path / "analysis" / "notes.txt").unlink()
    (case.path / "sources" / "app.py").write_text("changed")
    assert case.input_identity() not in (before, changed)


def test_an_interrupted_init_can_simply_be_run_again(package):
    # the first init died after creating the file but before its transaction committed
    import sqlite3

    sqlite3.connect(package / "ledger.sqlite").close()
    with pytest.raises(LedgerError) as caught:
        Case.open(package)
    assert caught.value.code == LEDGER_MISSING
    with Case.create(package, "BUG-1") as case:
        assert case.status()["case_id"] == "BUG-1"


def test_a_bad_at_is_invalid_argument_and_a_clock_stepping_back_is_clamped(case, example_policy):
    budget = case.budget(example_policy)
    soon = format_utc(datetime.now(timezone.utc) + timedelta(seconds=60))  # within at_future_tolerance_ms
    budget.initialize(at=soon)
    for bad in ("yesterday", "2030-01-01T00:00:00+02:00", "2030-02-30T00:00:00Z", 5):
        with pytest.raises(LedgerError) as caught:
            budget.reserve("H1", "a1", "source.read_context", at=bad)
        assert caught.value.code == INVALID_ARGUMENT
    budget.reserve("H1", "a1", "source.read_context", at="2020-01-01T00:00:00Z")
    times = [r["created_at"] for r in case.query("SELECT created_at FROM events ORDER BY seq")]
    assert times[-1] == soon and times == sorted(times)


@pytest.mark.parametrize("statement", ["\u200b\u200d", "\u3164", "\ufe0f\u2800"])
def test_a_statement_of_only_invisible_characters_is_refused(case, statement):
    with pytest.raises(LedgerError) as caught:
        case.open_revision([{"statement": statement}])
    assert caught.value.code == INVALID_ARGUMENT and "non-blank" in caught.value.message


@pytest.mark.parametrize("extra", [["--at", "bogus"], ["--actor", "bad actor"]])
def test_a_refused_init_creates_nothing(tmp_path, extra):
    target = tmp_path / "new"
    args = (["--actor", "bad actor"] if extra[0] == "--actor" else []) + ["init", str(target), "--case-id", "A"] + (
        extra if extra[0] == "--at" else [])
    done = run_cli(*args)
    assert done.returncode == 1 and not target.exists()


def test_an_init_whose_ledger_cannot_be_made_leaves_no_folder_it_made(tmp_path, monkeypatch):
    """A folder nobody may write in (umask 777, say) fails the ledger's creation: STORAGE_ERROR, and the
    folders init made for it are gone again; a folder that was there before stays."""
    from ledger.storage import connection

    def refused(path, mode):
        raise LedgerError("STORAGE_ERROR", f"the file system refused the ledger at {path}; nothing was written")

    monkeypatch.setattr(connection, "connect_path", refused)
    with pytest.raises(LedgerError) as caught:
        Case.create(tmp_path / "a" / "b" / "new", "A")
    assert caught.value.code == "STORAGE_ERROR" and list(tmp_path.iterdir()) == []
    (tmp_path / "there").mkdir()
    with pytest.raises(LedgerError) as caught:
        Case.create(tmp_path / "there", "A")
    assert caught.value.code == "STORAGE_ERROR" and list(tmp_path.iterdir()) == [tmp_path / "there"]


def test_an_init_whose_folder_cannot_be_made_leaves_none_of_the_folders_above_it(tmp_path, monkeypatch):
    """A folder made under umask 777 cannot hold the next one: the mkdir fails part way, and the
    folders it did make are removed."""
    real_mkdir = os.mkdir

    def part_way(path, *args, **kwargs):  # a and b are made, c is refused
        if os.path.basename(path) == "c":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", part_way)
    with pytest.raises(LedgerError) as caught:
        Case.create(tmp_path / "a" / "b" / "c", "A")
    assert caught.value.code == "STORAGE_ERROR" and list(tmp_path.iterdir()) == []


# --- record_outcome (docs/runs.md, docs/concepts.md) ------------------------------------------
def test_record_outcome_is_once_per_revision_the_same_again_is_reused_a_different_one_conflicts(case):
    first = case.record_outcome("resolved", "swe-bench evaluation")
    assert (first.revision, first.case_state, first.reused) == (1, "INVESTIGATING_HYPOTHESES", False)
    generation = case.status()["package_generation"]
    again = case.record_outcome("resolved", "swe-bench evaluation")
    assert again.reused is True and again.seq == first.seq
    for outcome, source in (("failed", "swe-bench evaluation"), ("resolved", "a human")):
        with pytest.raises(LedgerError) as caught:
            case.record_outcome(outcome, source)
        assert caught.value.code == "OPERATION_CONFLICT"
    assert case.status()["package_generation"] == generation


def test_record_outcome_changes_no_state_and_a_transition_to_the_same_state_is_still_reused(case):
    state_seq = case.transition("INVESTIGATING_HYPOTHESES").seq
    case.record_outcome("resolved", "ci")
    assert case.status()["state"] == "INVESTIGATING_HYPOTHESES"
    assert case.transition("INVESTIGATING_HYPOTHESES").seq == state_seq


@pytest.mark.parametrize("final_state", ["EVALUATING", "CLOSED"])
def test_record_outcome_is_allowed_after_the_work_ended(case, final_state):
    case.transition("EVALUATING")
    if final_state == "CLOSED":
        case.transition("CLOSED")
    result = case.record_outcome("failed", "swe-bench evaluation")
    assert result.case_state == final_state and not result.reused
    status = case.status()
    assert (status["state"], status["outcome"], status["outcome_source"]) == (final_state, "failed",
                                                                              "swe-bench evaluation")


def test_record_outcome_needs_an_open_revision(package):
    with Case.create(package, case_id="BUG-1") as created:
        with pytest.raises(LedgerError) as caught:
            created.record_outcome("resolved", "ci")
        assert caught.value.code == INVALID_TRANSITION
        assert created.status()["package_generation"] == 1


def test_each_revision_has_its_own_outcome_and_case_status_shows_the_current_one(case):
    case.record_outcome("failed", "ci run 1")
    case.transition("EVALUATING")
    case.open_revision([{"statement": "another idea"}], 10)
    assert case.status()["outcome"] is None
    case.record_outcome("resolved", "ci run 2")
    assert (case.status()["outcome"], case.status()["outcome_source"]) == ("resolved", "ci run 2")
    rows = case.query("SELECT revision, outcome, source FROM outcomes ORDER BY revision")
    assert [(r["revision"], r["outcome"], r["source"]) for r in rows] == [(1, "failed", "ci run 1"),
                                                                         (2, "resolved", "ci run 2")]


@pytest.mark.parametrize("outcome, source", [("", "ci"), ("   ", "ci"), ("resolved", ""), ("x" * 65, "ci"),
                                             ("resolved", "s" * 1001), (3, "ci"), ("resolved", None),
                                             ("a\x00b", "ci")])
def test_a_bad_outcome_or_source_is_invalid_argument_and_writes_nothing(case, outcome, source):
    generation = case.status()["package_generation"]
    with pytest.raises(LedgerError) as caught:
        case.record_outcome(outcome, source)
    assert caught.value.code == INVALID_ARGUMENT
    assert case.status()["package_generation"] == generation


@pytest.mark.parametrize("outcome, message", [
    ("res\nolved", "outcome 'res\\nolved' holds U+000A, a character that shows nothing"),
    ("resolved\u200b", "outcome 'resolved\\u200b' holds U+200B, a character that shows nothing"),
    ("\ufeffresolved", "outcome '\\ufeffresolved' holds U+FEFF, a character that shows nothing"),
    ("r\u00e9solu\tok", "outcome 'r\u00e9solu\\tok' holds U+0009, a character that shows nothing"),
    (" resolved", "outcome ' resolved' has spaces around it"),
    ("resolved\u00a0", "outcome 'resolved\\xa0' has spaces around it"),
    ("re\u0301solu", "outcome 're\u0301solu' is not in composed form (NFC): it holds U+0301 where another character "
                     "prints the same"),
    ("\u212b", "outcome '\u212b' is not in composed form (NFC): it holds U+212B"),
    ("resolved\u2028failed", "outcome 'resolved\\u2028failed' holds U+2028, a character that shows nothing"),
    ("won\u00a0t", "outcome 'won\\xa0t' holds U+00A0, a character that shows nothing, breaks the line or prints as "
                   "another"),
    ("a\u3164", "outcome 'a\u3164' holds U+3164, a character that shows nothing"),
    ("ok\ufe0f", "outcome 'ok\ufe0f' holds U+FE0F, a character that shows nothing"),
    ("a\u2800b", "outcome 'a\u2800b' holds U+2800, a character that shows nothing"),
])
def test_an_outcome_label_that_would_read_as_another_is_refused_when_recorded(case, outcome, message):
    """A label holding a character that shows nothing (or breaks its line), or spaces around it,
    prints like another label and splits simulate's tables: refused, nothing written."""
    generation = case.status()["package_generation"]
    with pytest.raises(LedgerError) as caught:
        case.record_outcome(outcome, "ci")
    assert (caught.value.code, caught.value.message.startswith(message)) == (INVALID_ARGUMENT, True), caught.value.message
    assert case.status()["package_generation"] == generation
    assert case.record_outcome("r\u00e9solu", "ci").reused is False  # a letter past ASCII is a label
