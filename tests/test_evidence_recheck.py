"""Verify and import re-check every stored tool result: against its request, and against every
file it read that is unchanged on disk (docs/evidence.md, "Verifying stored results")."""

from __future__ import annotations

import copy
from unittest import mock
import hashlib
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import BudgetConfig, Case, LedgerError, export_case, import_tree, verify_case, verify_many
from ledger.ground.errors import INTEGRITY_ERROR
from ledger.router.reference import Router
from ledger.router.check import could_equal, recheck, self_consistent
from ledger.ground.canonical import canonical_sha256
from ledger.rules import evidence as rules

from conftest import EXAMPLE_BUDGET, deny_reading, deny_searching, run_cli, start_case

APP = "sources/app.py"
APP_TEXT = "def add(a, b):\n    return a - b\n\nprint(add(1, 2))\n# add more\n\n# end\n"


@pytest.fixture
def case(package: Path):
    (package / "sources" / "app.py").write_text(APP_TEXT)
    (package / "data").mkdir()
    conn = sqlite3.connect(package / "data" / "shop.sqlite")
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, role TEXT)")
    conn.executemany("INSERT INTO users (name, role) VALUES (?, ?)", [("ann", "admin"), ("bob", "dev"), ("cy", "dev")])
    conn.commit()
    conn.close()
    opened = start_case(package, hypotheses=2)
    opened.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    yield opened
    opened.close()


def action(tool: str, **args) -> dict:
    return {"operation_id": "op-1", "hypothesis_id": "H1", "action_id": "q1", "tool": tool, "args": args}


def genuine(case: Case, act: dict) -> dict:
    """What the reference router returns for ``act`` now (a copy a forger then edits)."""
    return copy.deepcopy(Router(case.path).result(act))


def forge(case: Case, act: dict, result: dict, iteration: str = "i1") -> None:
    """Store ``result`` as a forger (or a bug) would: bypassing the store's recomputation."""
    case.budget().reserve(act["hypothesis_id"], act["action_id"], act["tool"])
    with case.session.read() as view:
        generation = view.head()[0]
    reply = {"package_generation": generation, "input_identity": case.input_identity(), "results": [result]}
    shaped = rules.shape_store(iteration, {"actions": [act]}, reply)
    case.session.run("store_tool_results", shaped, inputs={"recomputed": [result],
                                                            "input_identity": case.input_identity()})


def refused_by_verify_and_import(case: Case, tmp_path: Path, *expected: str) -> None:
    """verify and import both say INTEGRITY_ERROR, with each of ``expected`` in the message."""
    for attempt in ("verify", "import"):
        with pytest.raises(LedgerError) as caught:
            if attempt == "verify":
                verify_case(case.path)
            else:
                export_case(case)
                import_tree(case.path, tmp_path / "copy")
        assert caught.value.code == INTEGRITY_ERROR, attempt
        for text in expected:
            assert text in caught.value.message, (attempt, caught.value.message)


def change_an_unrelated_input(case: Case) -> None:
    (case.path / "sources" / "other.py").write_text("unrelated = True\n")


def line(path: str, number: int, text: str) -> dict:
    return {"kind": "source_line", "path": path, "line": number,
            "sha256": hashlib.sha256(text.encode()).hexdigest(), "text": text}


# --- every item is checked against its request ----------------------------------------------------
def test_a_search_result_omitting_a_match_of_an_unchanged_file_is_refused(case, tmp_path):
    act = action("source.find_text", text="add")
    result = genuine(case, act)
    assert [i["line"] for i in result["items"]] == [1, 4, 5]
    del result["items"][1]
    forge(case, act, result)
    change_an_unrelated_input(case)
    refused_by_verify_and_import(case, tmp_path, "sources/app.py", "3 matching line(s), the result 2")


def test_a_search_result_adding_a_line_the_unchanged_file_does_not_hold_is_refused(case, tmp_path):
    act = action("source.find_text", text="add", max_results=5)
    result = genuine(case, act)
    result["items"].append(line(APP, 6, "# add this"))
    forge(case, act, result)
    change_an_unrelated_input(case)
    refused_by_verify_and_import(case, tmp_path, "are not those the unchanged file holds")


def test_a_span_result_with_a_line_outside_the_span_or_twice_is_refused(case, tmp_path):
    act = action("source.read_context", path=APP, start_line=1, end_line=2)
    result = genuine(case, act)
    result["items"] = [line(APP, 7, "# end"), line(APP, 7, "# end")]
    forge(case, act, result)
    change_an_unrelated_input(case)
    refused_by_verify_and_import(case, tmp_path, "are not lines 1..2")


@pytest.mark.parametrize("coverage", [{"path": "sources/notes.txt"}, {"start_line": 2}, {"end_line": 9},
                                      {"file_lines": 3}])
def test_a_span_result_whose_coverage_is_not_its_arguments_is_refused(case, tmp_path, coverage):
    act = action("source.read_context", path=APP, start_line=1, end_line=2)
    result = genuine(case, act)
    result["coverage"].update(coverage)
    forge(case, act, result)
    change_an_unrelated_input(case)
    refused_by_verify_and_import(case, tmp_path, "stored result of operation op-1")


def test_a_search_result_whose_coverage_names_another_search_is_refused(case, tmp_path):
    act = action("source.find_text", text="add")
    result = genuine(case, act)
    result["coverage"]["text"] = "sub"
    forge(case, act, result)
    change_an_unrelated_input(case)
    refused_by_verify_and_import(case, tmp_path, "is not that of the search it asked for")



@pytest.mark.parametrize("glob", ["sources/linked/*", "sources/*.py", "sources/l?nked/[u]til.py"])
def test_a_search_whose_glob_reaches_below_a_link_to_a_folder_stores_and_verifies(case, glob):
    """A search lists a link to a folder as skipped when its glob could match a path below it; the
    stored result is the router's own, so verify (and its check of the result's form) passes it."""
    (case.path / "sources" / "lib").mkdir()
    (case.path / "sources" / "lib" / "util.py").write_text("add = 1\n")
    (case.path / "sources" / "linked").symlink_to("lib")
    run = case.budget().run_tool("H1", "q1", "source.find_text", {"text": "add", "path_glob": glob})
    assert [entry["path"] for entry in run.result["coverage"]["skipped"]] == ["sources/linked"]
    assert verify_case(case.path).unchecked_inputs == []


def test_a_search_listing_every_file_but_a_link_to_a_folder_verifies_as_earlier_versions_stored_it(case):
    """A search lists a link to a folder as skipped (it is never followed); earlier versions left it
    out, and what they stored still verifies over the unchanged package. Leaving out a skipped file
    is still caught."""
    (case.path / "sources" / "lib").mkdir()
    (case.path / "sources" / "lib" / "util.py").write_text("add = 1\n")
    (case.path / "sources" / "linked").symlink_to("lib")
    (case.path / "sources" / "zz.py").symlink_to("app.py")
    act = action("source.find_text", text="add")
    result = genuine(case, act)
    assert [entry["path"] for entry in result["coverage"]["skipped"]] == ["sources/linked", "sources/zz.py"]
    del result["coverage"]["skipped"][0]  # as an earlier version stored it
    forge(case, act, result)
    assert verify_case(case.path).unchecked_inputs == []
    act = {**action("source.find_text", text="add"), "operation_id": "op-2", "hypothesis_id": "H2"}
    result = genuine(case, act)
    del result["coverage"]["skipped"][1]  # a link to a file: listed by every version
    forge(case, act, result, "i2")
    with pytest.raises(LedgerError) as caught:  # (import takes no package holding links)
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR
    assert "the files it lists are not those its glob matches in the unchanged package" in caught.value.message

def test_a_row_contradicting_its_where_is_refused(case, tmp_path):
    act = action("database.lookup", database="data/shop.sqlite", table="users", where={"role": "dev"})
    result = genuine(case, act)
    result["items"][0]["values"]["role"] = "admin"
    result["items"][0]["sha256"] = rules.canonical_sha256(result["items"][0]["values"])
    forge(case, act, result)
    change_an_unrelated_input(case)
    refused_by_verify_and_import(case, tmp_path, "does not satisfy where role = dev")


def test_a_row_with_columns_other_than_those_asked_for_is_refused(case, tmp_path):
    act = action("database.lookup", database="data/shop.sqlite", table="users", columns=["name"])
    result = genuine(case, act)
    result["items"][0]["values"]["role"] = "admin"
    result["items"][0]["sha256"] = rules.canonical_sha256(result["items"][0]["values"])
    forge(case, act, result)
    change_an_unrelated_input(case)
    refused_by_verify_and_import(case, tmp_path, "with the columns asked for")



def _value(value):
    def edit(result):
        item = result["items"][0]
        item["values"]["name"] = value
        item["sha256"] = canonical_sha256(item["values"])
    return edit


def _reversed_files(result):
    result["coverage"]["files"].reverse()
    result["sources"].reverse()
    result["items"].sort(key=lambda i: (result["coverage"]["files"].index(i["path"]), i["line"]))


def _line_with_a_newline(result):
    text = "def add(a, b):\n    return a + b"
    result["items"][0].update(text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


LOOKUP = {"database": "data/shop.sqlite", "table": "users"}
NEVER_RETURNED = {
    "a line holding a newline": (("source.read_context", {"path": APP, "start_line": 1, "end_line": 1}),
                                 _line_with_a_newline),
    "files out of walk order": (("source.find_text", {"text": "a"}), _reversed_files),
    "a skip reason not the router's": (("source.find_text", {"text": "a"}), lambda r: r["coverage"].update(
        skipped=[{"path": "sources/zz.py", "reason": "fine"}])),
    "a plain real": (("database.lookup", LOOKUP), _value(2.5)),
    "a boolean": (("database.lookup", LOOKUP), _value(True)),
    "a small integer marked": (("database.lookup", LOOKUP), _value({"integer": "5"})),
    "a real that is not a repr": (("database.lookup", LOOKUP), _value({"real": "1.50"})),
    "a real NaN": (("database.lookup", LOOKUP), _value({"real": "nan"})),
    "base64 not in standard form": (("database.lookup", LOOKUP), _value({"base64": "!!"})),
    "an object of another form": (("database.lookup", LOOKUP), _value({"text": "ann"})),
    "a column described otherwise": (("database.lookup", LOOKUP), lambda r: r["schema"]["columns"][0].update(pk="1")),
}


@pytest.mark.parametrize("shape", sorted(NEVER_RETURNED))
@pytest.mark.sampled(every=4)
def test_a_result_holding_what_the_router_never_returns_is_refused_after_its_inputs_changed(case, tmp_path, shape):
    """With its files changed since, a result is checked against its request only: then nothing the
    reference router never writes may pass (a newline inside a line, files out of walk order, a
    value or column in another form)."""
    (tool, args), edit = NEVER_RETURNED[shape]
    act = action(tool, **args)
    result = genuine(case, act)
    edit(result)
    forge(case, act, result)
    for changed in (case.path / APP, case.path / "sources" / "notes.txt"):
        changed.write_text(changed.read_text() + "# changed since\n")
    with sqlite3.connect(case.path / "data" / "shop.sqlite") as db:
        db.execute("INSERT INTO users (name, role) VALUES ('dee', 'qa')")
    db.close()
    refused_by_verify_and_import(case, tmp_path, "stored result of operation op-1")


def test_rows_of_an_unchanged_database_must_be_the_rows_it_holds(case, tmp_path):
    act = action("database.lookup", database="data/shop.sqlite", table="users", where={"role": "dev"})
    result = genuine(case, act)
    result["items"][1]["values"]["name"] = "eve"  # satisfies where; not what the file holds
    result["items"][1]["sha256"] = rules.canonical_sha256(result["items"][1]["values"])
    forge(case, act, result)
    change_an_unrelated_input(case)
    refused_by_verify_and_import(case, tmp_path, "differs from what the unchanged file data/shop.sqlite yields")


# --- a wrong recorded hash does not switch the recompute off -----------------------------------------
def test_a_made_up_recorded_hash_of_an_unchanged_file_is_refused(case, tmp_path):
    act = action("source.read_context", path=APP, start_line=2, end_line=2)
    result = genuine(case, act)
    result["items"] = [line(APP, 2, "    return a + b")]
    result["sources"] = [[APP, "0" * 64]]
    forge(case, act, result)
    refused_by_verify_and_import(case, tmp_path, "records sha256 000000000000… for sources/app.py")



def test_an_in_place_import_rechecks_results_as_verify_does_and_keeps_nothing_it_refuses(case, tmp_path):
    """Restoring a lost ledger in place: the export tree beside the inputs is no input, so the
    replay knows the inputs are those the reply was computed from and refuses the made-up hash
    itself, naming the file; and a refused import leaves no ledger behind."""
    act = action("source.read_context", path=APP, start_line=2, end_line=2)
    result = genuine(case, act)
    result["items"] = [line(APP, 2, "    return a + b")]
    result["sources"] = [[APP, "0" * 64]]
    forge(case, act, result)
    export_case(case)
    case.close()
    (case.path / "ledger.sqlite").unlink()
    with pytest.raises(LedgerError) as caught:
        import_tree(case.path)
    assert caught.value.code == INTEGRITY_ERROR
    assert caught.value.message.startswith("analysis/evidence/") and "000000000000" in caught.value.message
    assert not [p.name for p in case.path.iterdir() if p.name in ("ledger.sqlite", "ledger.sqlite-wal",
                                                                  "ledger.sqlite-shm")]



@pytest.mark.parametrize("ghost", ["missing", "a link", "a fifo", "over the size cap"])
def test_a_result_of_a_file_the_router_cannot_read_under_the_inputs_it_names_is_refused(case, tmp_path, ghost):
    """The reply's input identity is the package's now: a file a result claims to have read that is
    missing, a link, a FIFO or over 16 MiB now was so then, and the router could not have read it."""
    path = "sources/ghost.py"
    if ghost == "a link":
        os.symlink("app.py", case.path / path)
    elif ghost == "a fifo":
        os.mkfifo(case.path / path)
    elif ghost == "over the size cap":
        (case.path / path).write_bytes(b"x\n" * (8 * 1024 * 1024 + 1))
    act = action("source.read_context", path=path, start_line=1, end_line=1)
    result = genuine(case, action("source.read_context", path=APP, start_line=1, end_line=1))
    result["items"][0]["path"] = result["coverage"]["path"] = path
    result["sources"] = [[path, "1" * 64]]
    forge(case, act, result)
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and "the router cannot read that file" in caught.value.message


def test_a_line_of_bytes_that_are_not_utf8_is_still_checked_against_the_unchanged_file(case, tmp_path):
    (case.path / "sources" / "latin.txt").write_bytes(b"caf\xe9 au lait\nsecond\n")
    act = action("source.read_context", path="sources/latin.txt", start_line=1, end_line=1)
    result = genuine(case, act)
    assert result["items"][0]["text"] == "caf\ufffd au lait"
    result["items"][0]["sha256"] = hashlib.sha256(b"caf\xe8 au lait").hexdigest()  # another byte, same text
    forge(case, act, result)
    change_an_unrelated_input(case)
    refused_by_verify_and_import(case, tmp_path, "differs from what the unchanged file sources/latin.txt yields")


def test_a_genuine_result_verifies_after_its_file_and_others_changed(case, tmp_path):
    case.budget().reserve("H1", "q1", "source.find_text")
    case.evidence().query("i1", {"actions": [action("source.find_text", text="add")]}, True)
    (case.path / APP).write_text("def add(a, b):\n    return a + b\n")
    change_an_unrelated_input(case)
    report = verify_case(case.path)
    assert report.unchecked_inputs == [{"path": APP, "why": "changed"}]
    assert any("sources/app.py (changed)" in note for note in report.notes())
    export_case(case)
    import_tree(case.path, tmp_path / "copy")


@pytest.mark.parametrize("added, text, noted", [("sources/zz.py", "x = add(1, 2)", True),
                                                ("sources/a/deeper.py", "x = add(1, 2)", True),
                                                ("sources/zz.txt", "nothing to find", False),
                                                ("notes/zz.py", "x = add(1, 2)", False)])
def test_a_file_added_where_a_stored_search_would_have_read_it_is_noted_and_fails_strict(case, added, text, noted):
    """The search's lines cannot be recomputed with a file holding its text that it never saw:
    --strict passed it, only the files the search had read being checked. A file without the text,
    or outside the glob, leaves the lines as they were."""
    case.budget().reserve("H1", "q1", "source.find_text")
    case.evidence().query("i1", {"actions": [action("source.find_text", text="add", path_glob="sources/**")]}, True)
    export_case(case)
    (case.path / added).parent.mkdir(parents=True, exist_ok=True)
    (case.path / added).write_text(text + "\n")
    report = verify_case(case.path)
    assert report.unchecked_inputs == ([{"path": added, "why": "added since a search that matches it"}] if noted
                                       else [])
    failure = report.strict_failure()  # what ledger verify --strict fails with
    assert (failure.code, f"{added} (added since a search that matches it)" in failure.message) == (
        "STALE_GENERATION", True) if noted else failure is None


@pytest.mark.parametrize("was, text, noted", [("pipe", "x = add(1, 2)", True), ("link", "x = add(1, 2)", True),
                                              ("pipe", "nothing to find", False)])
def test_a_file_a_stored_search_skipped_that_it_would_read_now_is_noted_and_fails_strict(case, was, text, noted):
    """A pipe or a link the search skipped, a regular file holding its text now: the stored lines
    cannot be recomputed with it, as with a file added (verify --strict passed it)."""
    skipped = case.path / "sources" / "zz.py"
    if was == "pipe":
        os.mkfifo(skipped)
    else:
        skipped.symlink_to(case.path / APP)
    case.budget().reserve("H1", "q1", "source.find_text")
    result = case.evidence().query("i1", {"actions": [action("source.find_text", text="add", path_glob="sources/**")]},
                                   True)
    assert [entry["path"] for entry in result.reply["results"][0]["coverage"]["skipped"]] == ["sources/zz.py"]
    export_case(case)
    skipped.unlink()
    skipped.write_text(text + "\n")
    report = verify_case(case.path)
    why = "readable now, and matching, where the search skipped it"
    assert report.unchecked_inputs == ([{"path": "sources/zz.py", "why": why}] if noted else [])
    failure = report.strict_failure()
    assert (failure.code, f"sources/zz.py ({why})" in failure.message) == ("STALE_GENERATION", True) if noted \
        else failure is None


def test_a_glob_matching_too_many_files_since_a_search_is_a_changed_input_not_tampering(case, monkeypatch):
    """sources/ grown past the router's file limit (5,000, here 3) made verify call a healthy search
    damaged: "the reference router refuses it over unchanged inputs", though they had changed."""
    import ledger.router.reference as reference

    case.budget().reserve("H1", "q1", "source.find_text")
    case.evidence().query("i1", {"actions": [action("source.find_text", text="add")]}, True)
    monkeypatch.setattr(reference, "FILES_SCANNED_MAX", 3)
    for n in range(3):
        (case.path / "sources" / f"more{n}.txt").write_text("nothing\n")
    assert verify_case(case.path).unchecked_inputs == []


# --- side files beside an input database are not tampering ----------------------------------------
def _store_lookup(case: Case) -> None:
    case.budget().reserve("H1", "q1", "database.lookup")
    act = action("database.lookup", database="data/shop.sqlite", table="users", where={"role": "dev"})
    case.evidence().query("i1", {"actions": [act]}, True)


@pytest.mark.parametrize("writes", [False, True])
def test_a_database_another_program_left_with_wal_and_shm_files_still_verifies(case, tmp_path, writes):
    path = case.path / "data" / "shop.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    _store_lookup(case)
    before = path.read_bytes()
    # another program opens it in WAL mode and is killed before it checkpoints (or closes)
    script = ("import sqlite3, os, signal, sys\n"
              f"c = sqlite3.connect({str(path)!r})\n"
              "c.execute('PRAGMA wal_autocheckpoint=0')\n"
              "c.execute('SELECT COUNT(*) FROM users').fetchall()\n"
              + ("c.execute(\"INSERT INTO users (name, role) VALUES ('dan', 'dev')\"); c.commit()\n" if writes else "")
              + "print('ready', flush=True)\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    subprocess.run([sys.executable, "-c", script], check=False, timeout=60)
    assert (case.path / "data" / "shop.sqlite-wal").exists() and (case.path / "data" / "shop.sqlite-shm").exists()
    assert path.read_bytes() == before
    assert verify_case(case.path).unchecked_inputs == []  # re-read and recomputed, not skipped
    export_case(case)
    import_tree(case.path, tmp_path / "copy")


def test_an_empty_journal_file_beside_an_input_database_is_not_tampering(case, tmp_path):
    _store_lookup(case)
    (case.path / "data" / "shop.sqlite-journal").write_bytes(b"")
    assert verify_case(case.path).events > 0
    act = action("database.lookup", database="data/shop.sqlite", table="users")
    assert len(Router(case.path).result(act)["items"]) == 3  # and a lookup is still answered


def test_an_input_that_can_no_longer_be_read_is_a_changed_input_not_tampering(case, tmp_path):
    case.budget().reserve("H1", "q1", "source.read_context")
    case.evidence().query("i1", {"actions": [action("source.read_context", path=APP, start_line=1, end_line=2)]},
                          True)
    moved = tmp_path / "moved.py"
    os.rename(case.path / APP, moved)
    os.symlink(moved, case.path / APP)  # now a link the router will not follow
    report = verify_case(case.path)
    assert report.unchecked_inputs == [{"path": APP, "why": "unreadable"}]
    assert any("checked against their requests only" in note for note in report.notes())



@pytest.mark.parametrize("gone", ["file", "folder"])
def test_an_input_removed_since_is_named_removed_not_unreadable(case, gone):
    """A file a stored result read that is gone now (itself, or its folder) is a changed input, and the
    report says so: it said "unreadable", which reads as a permission problem to look into."""
    case.budget().reserve("H1", "q1", "source.read_context")
    case.evidence().query("i1", {"actions": [action("source.read_context", path=APP, start_line=1, end_line=2)]},
                          True)
    if gone == "file":
        (case.path / APP).unlink()
    else:
        shutil.rmtree(case.path / "sources")
    report = verify_case(case.path)
    assert report.unchecked_inputs == [{"path": APP, "why": "removed"}]
    assert any(f"{APP} (removed)" in note for note in report.notes())


@pytest.mark.parametrize("which", ["read", "unrelated", "unsearchable folder"])
def test_an_input_this_user_may_not_read_is_a_changed_input_not_a_failure(case, tmp_path, monkeypatch, which):
    case.budget().reserve("H1", "q1", "source.read_context")
    case.evidence().query("i1", {"actions": [action("source.read_context", path=APP, start_line=1, end_line=2)]},
                          True)
    export_case(case)
    unrelated = case.path / "sources" / "private" / "secret.txt"
    unrelated.parent.mkdir()
    unrelated.write_text("not for everyone\n")
    if which == "unsearchable folder":
        deny_searching(monkeypatch, unrelated.parent)
    else:
        deny_reading(monkeypatch, case.path / APP if which == "read" else unrelated)
    report = verify_case(case.path)  # neither a raw PermissionError nor STORAGE_ERROR: the history is fine
    assert report.unchecked_inputs == ([{"path": APP, "why": "unreadable"}] if which == "read" else [])
    assert case.input_identity() != ""  # the live identity does not fail either



@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_special_file_made_among_the_inputs_after_a_search_is_a_changed_input_not_tampering(case, kind):
    """A search lists every name its glob matches (a FIFO or socket as skipped), so one made since
    changes the input identity: the stored search is then no longer compared with the listing."""
    case.budget().reserve("H1", "q1", "source.find_text")
    case.evidence().query("i1", {"actions": [action("source.find_text", text="add")]}, True)
    export_case(case)
    before = case.input_identity()
    special = case.path / "sources" / "zz.special"
    if kind == "fifo":
        os.mkfifo(special)
    else:
        os.mknod(special, 0o600 | stat.S_IFSOCK)
    report = verify_case(case.path, strict=True)  # never INTEGRITY_ERROR
    assert report.strict_failure() is None  # every file the search read is unchanged: still recomputed
    assert case.input_identity() != before
    special.unlink()
    assert case.input_identity() == before and verify_case(case.path).unchecked_inputs == []



@pytest.mark.parametrize("change", ["edited", "removed", "added"])
def test_an_input_changed_while_verify_runs_is_a_changed_input_not_a_forgery(case, change):
    """verify finds the inputs unchanged when it starts; a file edited, removed or added while it runs
    changes them, which the first difference must not call a forged record (the identity is asked again)."""
    budget = case.budget()
    for h, action_id, tool, args in [("H1", "a1", "source.find_text", {"text": "add"}),
                                     ("H2", "a2", "source.read_context", {"path": APP, "start_line": 2, "end_line": 2}),
                                     ("H1", "a3", "source.find_text", {"text": "return"})]:
        budget.run_tool(h, action_id, tool, args)
        budget.settle(h, action_id, 50, "read")
    export_case(case)
    calls = []

    def change_once_the_first_batch_is_replayed(_events):
        calls.append(1)
        if len(calls) == 12:  # past the first batch, before the second
            if change == "edited":
                (case.path / APP).write_text("def add(a, b):\n    return a + b\n")
            elif change == "removed":
                (case.path / APP).unlink()
            else:
                (case.path / "sources" / "more.py").write_text("return add\n")
    report = verify_case(case.path, change_once_the_first_batch_is_replayed)
    assert len(calls) > 12
    assert report.unchecked_inputs == (  # the second search ("return") would have read the file added
        [{"path": "sources/more.py", "why": "added since a search that matches it"}] if change == "added" else
        [{"path": APP, "why": "changed" if change == "edited" else "removed"}])


# --- the re-check accepts every genuine result ------------------------------------------------------
AFFINITIES = ["INTEGER", "TEXT", "REAL", "NUMERIC", "BLOB", "", "TEXT COLLATE NOCASE", "COLLATE RTRIM"]
VALUES = st.one_of(st.none(), st.integers(-3, 3),
                   st.sampled_from(["1", "2.0", " 3", "3 ", "x", "X", "x  ", "é", "É", "", "1e0", "-0"]),
                   st.sampled_from([1.0, 2.5, -0.0]), st.binary(max_size=2), st.sampled_from([2 ** 60, -(2 ** 62)]))
WHERES = st.one_of(st.none(), st.integers(-3, 3),
                   st.sampled_from(["1", "2.0", "3", "x", "X ", "é", "", "2.5", "1e0"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.lists(VALUES, min_size=len(AFFINITIES), max_size=len(AFFINITIES)), max_size=8),
       column=st.integers(0, len(AFFINITIES) - 1), wanted=WHERES)
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_every_genuine_lookup_result_is_self_consistent_whatever_the_affinities(tmp_path, rows, column, wanted):
    """Whatever a column's affinity and built-in collation (the result records neither), every row a
    lookup returns satisfies its where as the re-check compares it."""
    root = tmp_path / "pkg"
    (root / "data").mkdir(parents=True, exist_ok=True)
    db = root / "data" / "t.sqlite"
    if db.exists():
        db.unlink()
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (" + ", ".join(f"c{i} {kind}" for i, kind in enumerate(AFFINITIES)) + ")")
    conn.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(AFFINITIES))})", rows)
    conn.commit()
    conn.close()
    act = {"operation_id": "o", "tool": "database.lookup",
           "args": {"database": "data/t.sqlite", "table": "t", "where": {f"c{column}": wanted}}}
    result = Router(root).result(act)
    self_consistent(act, result)
    assert recheck(Router(root), act, result, True) == result
    for item in result["items"]:
        assert could_equal(item["values"][f"c{column}"], wanted)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.text(alphabet="ab\n\r", max_size=30), min_size=1, max_size=4),
       limit=st.integers(1, 6), needle=st.sampled_from(["a", "ab", "b\r"]))
def test_every_genuine_search_result_verifies_whether_or_not_the_inputs_changed(tmp_path, files, limit, needle):
    root = tmp_path / "pkg"
    if root.exists():
        import shutil
        shutil.rmtree(root)
    (root / "sources" / "sub").mkdir(parents=True)
    for number, text in enumerate(files):
        folder = root / "sources" / ("sub" if number % 2 else "")
        (folder / f"f{number}.txt").write_bytes(text.encode())
    act = {"operation_id": "o", "tool": "source.find_text", "args": {"text": needle.rstrip("\r") or "a",
                                                                     "max_results": limit}}
    result = Router(root).result(act)
    for same in (True, False):
        assert recheck(Router(root), act, result, same) == result


def test_oversized_numbers_in_a_stored_result_are_refused_without_a_traceback(case, tmp_path):
    act = action("database.lookup", database="data/shop.sqlite", table="users", where={"role": "dev"})
    result = genuine(case, act)
    result["items"][0]["pointer"] = "/users/" + "9" * 5000
    forge(case, act, result)
    change_an_unrelated_input(case)
    refused_by_verify_and_import(case, tmp_path, "is not a row of data/shop.sqlite")


# --- one input identity is one set of files -------------------------------------------------------
def _forge_under(case: Case, act: dict, result: dict, identity: str, iteration: str = "i2") -> None:
    """``forge`` with a reply that claims the input identity ``identity`` (not the package's now)."""
    case.budget().reserve(act["hypothesis_id"], act["action_id"], act["tool"])
    with case.session.read() as view:
        generation = view.head()[0]
    reply = {"package_generation": generation, "input_identity": identity, "results": [result]}
    shaped = rules.shape_store(iteration, {"actions": [act]}, reply)
    case.session.run("store_tool_results", shaped, inputs={"recomputed": [result], "input_identity": identity})


@pytest.mark.parametrize("tool", ["source.read_context", "source.find_text"])
def test_a_made_up_hash_under_the_inputs_of_an_earlier_genuine_result_is_refused_after_inputs_changed(
        case, tmp_path, tool):
    case.budget().reserve("H1", "q0", "source.read_context")
    genuine_act = {**action("source.read_context", path=APP, start_line=1, end_line=1), "action_id": "q0",
                   "operation_id": "op-0"}
    stored = case.evidence().query("i1", {"actions": [genuine_act]}, True)
    identity = stored.reply["input_identity"]
    if tool == "source.read_context":
        act = {**action(tool, path=APP, start_line=2, end_line=2), "hypothesis_id": "H2"}
        result = genuine(case, act)
        result["items"] = [line(APP, 2, "    return a + b")]
    else:
        act = {**action(tool, text="add"), "hypothesis_id": "H2"}
        result = genuine(case, act)
        del result["items"][1]
    result["sources"] = [[path, "0" * 64] for path, _digest in result["sources"]]
    _forge_under(case, act, result, identity)
    change_an_unrelated_input(case)  # the package's identity now differs from both replies'
    refused_by_verify_and_import(case, tmp_path, "records sha256 000000000000… for sources/app.py",
                                 "operation op-0 read sources/app.py from the same inputs")


def test_genuine_results_of_the_same_inputs_and_of_changed_inputs_still_verify(case, tmp_path):
    case.budget().reserve("H1", "q1", "source.read_context")
    case.evidence().query("i1", {"actions": [action("source.read_context", path=APP, start_line=1, end_line=2)]},
                          True)
    case.budget().reserve("H2", "q2", "source.find_text")
    act = {**action("source.find_text", text="add"), "hypothesis_id": "H2", "action_id": "q2", "operation_id": "op-2"}
    case.evidence().query("i2", {"actions": [act]}, True)  # the same inputs: the same sha256 of app.py
    (case.path / APP).write_text("def add(a, b):\n    return a + b\n")
    case.budget().fail("H1", "q1", "read again below")
    case.budget().reserve("H1", "q3", "source.read_context")  # new inputs: another identity, another sha256
    again = {**action("source.read_context", path=APP, start_line=1, end_line=2), "action_id": "q3",
             "operation_id": "op-3"}
    case.evidence().query("i3", {"actions": [again]}, True)
    assert verify_case(case.path).unchecked_inputs == [{"path": APP, "why": "changed"}]
    export_case(case)
    import_tree(case.path, tmp_path / "copy")


# --- what a changed input leaves open, and how --strict closes it ----------------------------------
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_made_up_hash_under_a_made_up_input_identity_is_noted_and_fails_strict_verify(case, tmp_path):
    """The file never changed, but the forged result claims it did (a fresh identity, a made-up hash):
    a plain verify cannot tell it from a real edit and names the file; --strict refuses it."""
    act = action("source.read_context", path=APP, start_line=2, end_line=2)
    result = genuine(case, act)
    result["items"] = [line(APP, 2, "    return a + b  # fabricated")]
    result["sources"] = [[APP, "0" * 64]]
    _forge_under(case, act, result, "f" * 64)
    export_case(case)
    report = verify_case(case.path)
    assert report.unchecked_inputs == [{"path": APP, "why": "changed"}]
    assert any("sources/app.py (changed)" in note for note in report.notes())
    failure = report.strict_failure()
    assert failure.code == "STALE_GENERATION"
    assert failure.message.endswith("cannot be recomputed from them (--strict): sources/app.py (changed)")
    plain = run_cli("verify", str(case.path))
    assert plain.returncode == 0 and b"sources/app.py (changed)" in plain.stdout + plain.stderr
    strict = run_cli("verify", str(case.path), "--strict")
    assert strict.returncode == 1
    assert b"error: STALE_GENERATION: 1 input file(s) differ from what stored tool results read or searched" \
        in strict.stderr
    many = verify_many([case.path], jobs=1, strict=True)
    assert many.cases[0]["ok"] is False and many.cases[0]["error"]["code"] == "STALE_GENERATION"


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_strict_verify_passes_when_every_result_is_recomputed_from_unchanged_inputs(case):
    case.budget().reserve("H1", "q1", "source.find_text")
    case.evidence().query("i1", {"actions": [action("source.find_text", text="add")]}, True)
    export_case(case)
    report = verify_case(case.path, strict=True)
    assert report.unchecked_inputs == [] and report.strict_failure() is None
    assert run_cli("verify", str(case.path), "--strict").returncode == 0
    change_an_unrelated_input(case)  # a file no result read: every result is still recomputed
    assert verify_case(case.path).strict_failure() is None
    (case.path / APP).write_text("def add(a, b):\n    return a + b\n")  # a genuine edit of a file read
    assert verify_case(case.path).strict_failure().code == "STALE_GENERATION"


# --- a reply holds one result per action, in request order ----------------------------------------
def forge_batch(case: Case, acts: list[dict], results: list[dict]) -> None:
    """Store a batch as a forger writing the events directly would: no rule check of the reply."""
    for act in acts:
        case.budget().reserve(act["hypothesis_id"], act["action_id"], act["tool"])
    with case.session.read() as view:
        generation = view.head()[0]
    reply = {"package_generation": generation, "input_identity": case.input_identity(), "results": results}
    shaped = rules.shape_store("i1", {"actions": acts}, reply)
    with mock.patch.object(rules, "_check_reply", lambda *args: None):
        case.session.run("store_tool_results", shaped, inputs={"recomputed": results,
                                                                "input_identity": case.input_identity()})


@pytest.mark.parametrize("shape", ["extra", "missing"])
def test_a_reply_with_other_than_one_result_per_action_is_refused(case, tmp_path, shape):
    first = action("source.read_context", path=APP, start_line=1, end_line=1)
    second = dict(action("source.read_context", path=APP, start_line=2, end_line=2),
                  operation_id="op-2", hypothesis_id="H2", action_id="q2")
    result = genuine(case, first)
    if shape == "extra":  # a result no action asked for, which nothing would ever recompute
        ghost = dict(copy.deepcopy(result), operation_id="op-ghost")
        ghost["items"][0]["text"] = "made up"
        forge_batch(case, [first], [result, ghost])
    else:  # the second action's result left out
        forge_batch(case, [first, second], [result])
    refused_by_verify_and_import(case, tmp_path, "result(s) for", "action(s)")


# --- values SQLite computes as it reads: only they may differ from this SQLite's ------------------------
def _computed_table(case: Case, ddl: str, *rows: str) -> None:
    conn = sqlite3.connect(case.path / "data" / "p.sqlite")
    conn.executescript(ddl + "".join(f"INSERT INTO {row};" for row in rows))
    conn.close()


def _made_up(act: dict, case: Case, columns: list[dict], rows: list[tuple[int, dict]]) -> dict:
    """A lookup result no router returned: its schema, rows and values as a forger writes them."""
    digest = hashlib.sha256((case.path / "data" / "p.sqlite").read_bytes()).hexdigest()
    args, table = act["args"], act["args"]["table"]
    return {"operation_id": act["operation_id"], "tool": act["tool"], "status": "ok", "truncated": False,
            "items": [{"kind": "db_row", "database": "data/p.sqlite", "table": table, "pointer": f"/{table}/{rowid}",
                       "sha256": canonical_sha256(values), "values": values} for rowid, values in rows],
            "coverage": {"database": "data/p.sqlite", "table": table, "where": args.get("where", {}),
                         "columns": args.get("columns", [c["name"] for c in columns]), "limit": 100},
            "schema": {"database": "data/p.sqlite", "database_sha256": digest, "table": table, "columns": columns},
            "sources": [["data/p.sqlite", digest]]}


def _column(name: str, pk: int = 0) -> dict:
    return {"name": name, "type": "TEXT", "notnull": False, "pk": pk}


def _edited(result: dict, index: int, **values) -> dict:
    item = result["items"][index]
    item["values"].update(values)
    item["sha256"] = canonical_sha256(item["values"])
    return result


FORGERIES_BESIDE_COMPUTED_VALUES = {
    "a value the file holds, and a row left out": (
        "CREATE TABLE p (item TEXT, price REAL, shown REAL AS (price * 2) VIRTUAL);",
        ["p (item, price) VALUES ('widget', 2.5)", "p (item, price) VALUES ('gizmo', 9.0)"], {},
        lambda act, case: (lambda result: (result["items"].pop(1), result)[1])(
            _edited(genuine(case, act), 0, item="FORGED", price={"real": "1000.0"}))),
    "a value the file holds, where a computed column matched": (
        "CREATE TABLE p (item TEXT, price REAL, shown REAL AS (price * 2) VIRTUAL);",
        ["p (item, price) VALUES ('widget', 2.5)"], {"where": {"shown": 5}, "columns": ["item"]},
        lambda act, case: _edited(genuine(case, act), 0, item="FORGED")),
    "a row the file lacks, where a computed column matched": (
        "CREATE TABLE p (item TEXT, price REAL, shown REAL AS (price * 2) VIRTUAL);",
        ["p (item, price) VALUES ('widget', 2.5)"], {"where": {"shown": 5}, "columns": ["item"]},
        lambda act, case: (lambda result: {**result, "items": result["items"] + [
            {**result["items"][0], "pointer": "/p/42"}]})(genuine(case, act))),
    "a value beside a STORED generated column": (
        "CREATE TABLE p (item TEXT, price REAL, kept REAL AS (price * 2) STORED);",
        ["p (item, price) VALUES ('widget', 2.5)"], {"columns": ["item", "kept"]},
        lambda act, case: _edited(genuine(case, act), 0, item="FORGED")),
    "a full-text table's text": (
        "CREATE VIRTUAL TABLE p USING fts5(body);", ["p (body) VALUES ('real text')"], {},
        lambda act, case: _edited(genuine(case, act), 0, body="FORGED")),
    "rows of a WITHOUT ROWID table": (
        "CREATE TABLE p (k TEXT PRIMARY KEY, v TEXT, g TEXT AS (upper(v)) VIRTUAL) WITHOUT ROWID;",
        ["p (k, v) VALUES ('a', 'x')"], {},
        lambda act, case: _made_up(act, case, [_column("k", 1), _column("v"), _column("g")],
                                   [(1, {"k": "zzz", "v": "made up", "g": "MADE UP"})])),
    "a column the table lacks": (
        "CREATE TABLE p (item TEXT, shown TEXT AS (upper(item)) VIRTUAL);", ["p (item) VALUES ('widget')"],
        {"where": {"secret": "yes"}},
        lambda act, case: _made_up(act, case, [_column("item"), _column("shown"), _column("secret")],
                                   [(42, {"item": "password", "shown": "PASSWORD", "secret": "yes"})])),
}


@pytest.mark.parametrize("forgery", FORGERIES_BESIDE_COMPUTED_VALUES, ids=list(FORGERIES_BESIDE_COMPUTED_VALUES))
@pytest.mark.sampled(every=4)
def test_a_forgery_beside_values_sqlite_computes_as_it_reads_is_still_an_integrity_error(case, tmp_path, forgery):
    """Only the values SQLite computes as it reads may differ from this SQLite's recompute of an unchanged
    file (another version computes them otherwise): every value the file holds, the rows a where on
    them matched, the table's shape and the router's refusals are still compared, and a forgery of any
    of them is INTEGRITY_ERROR, never a note, and never a traceback."""
    ddl, rows, args, forged = FORGERIES_BESIDE_COMPUTED_VALUES[forgery]
    _computed_table(case, ddl, *rows)
    act = action("database.lookup", database="data/p.sqlite", table="p", **args)
    forge(case, act, forged(act, case))
    refused_by_verify_and_import(case, tmp_path, "op-1")


@pytest.mark.parametrize("rowid", ["9999999999999999999", "-9999999999999999999", "9223372036854775808"])
def test_a_row_id_past_sqlites_range_is_an_integrity_error_naming_the_operation(case, tmp_path, rowid):
    """A pointer's row id is an integer of SQLite's 64-bit range: one past it (19 digits pass the length
    check) is no row the router can point at, refused as such, never a Python OverflowError reported as
    the caller's INVALID_ARGUMENT."""
    _computed_table(case, "CREATE TABLE p (item TEXT, price REAL, shown REAL AS (price * 2) VIRTUAL);",
                    "p (item, price) VALUES ('widget', 2.5)")
    act = action("database.lookup", database="data/p.sqlite", table="p")
    result = genuine(case, act)
    result["items"][0]["pointer"] = f"/p/{rowid}"
    with pytest.raises(LedgerError) as caught:
        recheck(Router(case.path), act, result, True)
    assert caught.value.code == INTEGRITY_ERROR
    forge(case, act, result)
    refused_by_verify_and_import(case, tmp_path, "op-1")
