"""One rule for what belongs in an exported tree (issue 8, item 5) and one rule for package
file names (item 9), applied alike by verify, import, export, input identity and source refs."""

from __future__ import annotations

import os
import shutil
import hashlib
import subprocess
import sys
from pathlib import Path

import json

import pytest
from hypothesis import given, settings, strategies as st

from ledger import Case, LedgerError, export_case, import_tree, verify_case, BudgetConfig
from ledger.ground.errors import (INTEGRITY_ERROR, INVALID_ARGUMENT, SOURCE_REF_INVALID, CONFIG_INVALID)
from ledger.model.package import (EVENT_FILE_RE, content_path, EVIDENCE_EVENT_FILE_RE, event_path, evidence_path,
                                   printable_name)
from conftest import make_package, run_cli
CONTENT = "analysis/evidence/content"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    root = make_package(tmp_path_factory.mktemp("rules") / "case")
    case = Case.create(root, "BUG-5")
    case.open_revision([{"statement": "one"}, {"statement": "two"}], 40)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget()
    budget.initialize()
    budget.reserve("H1", "q1", "source.read_context")
    budget.record_result("H1", "q1", {"finding": "a - b"}, ["sources/app.py"])
    budget.settle("H1", "q1", 50, "points at the bug")
    export_case(case)
    case.close()
    return root


def verdicts(tree: Path, tmp: Path) -> tuple[LedgerError | None, LedgerError | None]:
    """(verify's refusal, import's refusal) of the same tree; None where it was accepted."""
    results = []
    try:
        verify_case(tree)
        results.append(None)
    except LedgerError as exc:
        results.append(exc)
    source = tmp / "source"
    shutil.copytree(tree, source, ignore=shutil.ignore_patterns("ledger.sqlite*"), symlinks=True)
    try:
        import_tree(source, tmp / "imported")
        results.append(None)
    except LedgerError as exc:
        assert not (tmp / "imported").exists()
        results.append(exc)
    return results[0], results[1]


def _content_file(tree: Path) -> Path:
    return sorted((tree / CONTENT).iterdir())[0]


def _copy(tree: Path, source: str, target: str) -> str:
    (tree / target).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tree / source, tree / target)
    return target


def _note(tree: Path) -> str:
    (tree / "analysis/notes.txt").write_text("mine")
    return "analysis/notes.txt"


STRAYS = {
    # the example: a copy of event 1 under a number no event has
    "copied event": lambda t: _copy(t, "analysis/case/events/00000001.json", "analysis/case/events/00000099.json"),
    "budget event copied to the next case address": lambda t: _copy(
        t, "analysis/budgets/0001/events/00000001.json", "analysis/case/events/00000004.json"),
    "event under a revision that has none": lambda t: _copy(
        t, "analysis/budgets/0001/events/00000001.json", "analysis/budgets/0002/events/00000001.json"),
    "content under another hash": lambda t: _copy(
        t, _content_file(t).relative_to(t).as_posix(), f"{CONTENT}/{'0' * 64}.json"),
    "note in analysis": _note,
    "event in the wrong folder": lambda t: _copy(t, "analysis/case/events/00000002.json",
                                                 "analysis/case/old/00000002.json"),
    # a temp file's name is accepted only beside the event or content file it was to become
    "temp-file name in a folder the export does not use": lambda t: _copy(
        t, "analysis/case/events/00000001.json", "analysis/smuggled/deep/.ledger-tmp-00000057.json.abc"),
    "temp-file name of no event file": lambda t: _copy(
        t, "analysis/budgets/0001/events/00000001.json", "analysis/budgets/0001/events/.ledger-tmp-forged.json"),
    "temp-file name without its suffix": lambda t: _copy(
        t, "analysis/case/events/00000001.json", "analysis/case/events/.ledger-tmp-00000001.json"),
    # nor in a revision folder no export makes: revision 0, or a revision's number written otherwise
    "temp-file name in the budget folder of revision 0": lambda t: _copy(
        t, "analysis/case/events/00000001.json", "analysis/budgets/0000/events/.ledger-tmp-00000001.json.abc"),
    "temp-file name in a budget folder named otherwise than an export names it": lambda t: _copy(
        t, "analysis/case/events/00000001.json", "analysis/budgets/00001/events/.ledger-tmp-00000002.json.abc"),
    "temp-file name in the evidence folder of revision 0": lambda t: _copy(
        t, "analysis/case/events/00000001.json", f"analysis/evidence/0000/{'a' * 32}/.ledger-tmp-reply.json.x"),
}


@pytest.mark.parametrize("kind", sorted(STRAYS))
@pytest.mark.sampled(every=4)
def test_verify_and_import_refuse_the_same_stray_file_and_name_it(exported, tmp_path, kind):
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    stray = STRAYS[kind](tree)
    by_verify, by_import = verdicts(tree, tmp_path)
    assert by_verify is not None and by_import is not None
    assert by_verify.code == by_import.code == INTEGRITY_ERROR
    assert by_verify.message == by_import.message
    assert stray in by_verify.message and by_verify.details["path"] == stray


SYSTEM_CLUTTER = ["analysis/.DS_Store", "analysis/case/events/.DS_Store", "analysis/case/events/._00000001.json",
                  "analysis/budgets/Thumbs.db", "analysis/case/desktop.ini", "analysis/evidence/ehthumbs.db"]


@pytest.mark.parametrize("clutter", SYSTEM_CLUTTER)
@pytest.mark.sampled(every=4)
def test_a_file_a_file_browser_makes_in_analysis_is_left_alone_by_verify_and_import(exported, tmp_path, clutter):
    """Finder makes .DS_Store in every folder it shows, and ._NAME beside each file on some volumes:
    opening a package on a Mac made verify fail it as tampered (INTEGRITY_ERROR). An editor's backup
    (a user's own file) is still named."""
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    (tree / clutter).write_bytes(b"\x00\x00\x00\x01Bud1")
    assert verdicts(tree, tmp_path) == (None, None)
    assert not (tmp_path / "imported" / clutter).exists()
    (tree / "analysis/case/events/00000001.json~").write_bytes(b"{}")
    (tmp_path / "again").mkdir()
    by_verify, by_import = verdicts(tree, tmp_path / "again")
    assert by_verify.code == by_import.code == INTEGRITY_ERROR and "00000001.json~" in by_verify.message


EXPORT_TEMPS = ["analysis/case/events/.ledger-tmp-00000001.json.abc",  # beside an event it would replace
                "analysis/case/events/.ledger-tmp-00000009.json.4242-a1b2c3-7",  # an event not exported yet
                "analysis/budgets/0001/events/.ledger-tmp-00000002.json.k_9x-Q2",
                f"{CONTENT}/.ledger-tmp-{'ab' * 32}.json.x1"]


@pytest.mark.parametrize("temp", EXPORT_TEMPS)
def test_an_export_temp_file_is_accepted_by_both_and_removed_by_the_next_export(exported, tmp_path, temp):
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    (tree / temp).write_bytes(b"half")
    assert verdicts(tree, tmp_path) == (None, None)
    with Case.open(tree) as case:
        export_case(case)
    assert not (tree / temp).exists()


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_temp_file_of_a_revision_the_ledger_lacks_is_refused_by_verify_and_taken_by_import(exported, tmp_path):
    """The ledger says which revisions an export of it can write: verify refuses a temp file in the
    folder of one it does not have. Import has no ledger, and an interrupted export may have been
    writing the first events of a revision whose opening event it had not written yet: it takes
    such a temp file, in any revision's folder an export names."""
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    for temp in ("analysis/budgets/0099/events/.ledger-tmp-00000001.json.abc",
                 f"analysis/evidence/0002/{'a' * 32}/.ledger-tmp-reply.json.x"):
        (tree / temp).parent.mkdir(parents=True)
        (tree / temp).write_bytes(b"half")
        by_verify, by_import = verdicts(tree, tmp_path / temp.split("/")[1])
        assert by_import is None and by_verify.code == INTEGRITY_ERROR and by_verify.details["path"] == temp
        assert by_verify.message.endswith("is not part of the export: named as an export's temp file for "
                                          f"{temp.replace('.ledger-tmp-', '').rsplit('.', 1)[0]}, but no export of "
                                          "this case writes there (a revision the case does not have, or a folder "
                                          "name no export makes)")
        (tree / temp).unlink()


_REVISION = [{"op": "open_revision", "hypotheses": [{"statement": "N a"}, {"statement": "N b"}], "units_per_hypothesis": 400},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"},
             *[line for n in range(3) for line in (
                 {"op": "reserve", "hypothesis": "H1", "action_id": f"qN{n}", "action": "source.read_context"},
                 {"op": "record_result", "hypothesis": "H1", "action_id": f"qN{n}", "evidence": {"finding": f"N {n}"},
                   "source_refs": ["sources/app.py"]},
                 {"op": "settle", "hypothesis": "H1", "action_id": f"qN{n}", "semantic_score": 50, "reason": "ok"})],
             {"op": "reject", "hypothesis": "H1", "reason": "no"}, {"op": "reject", "hypothesis": "H2", "reason": "no"},
             {"op": "transition", "to": "EVALUATING"}]


def _revisions(case: Case, first: int, count: int) -> None:
    from ledger import apply_journal

    for revision in range(first, first + count):
        lines = [json.dumps(line).replace("qN", f"q{revision}_").replace('"N ', f'"{revision} ') for line in _REVISION]
        assert all(result.ok for result in apply_journal(case, lines))


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_an_export_killed_at_any_rename_leaves_a_tree_verify_and_import_both_take(tmp_path):
    """Killed at every 5th of its renames (each batch's temp files are renamed in order, so any
    prefix of them may be whole), the export of three new revisions leaves a tree that verify takes
    and import rebuilds at the manifest's head."""
    root = make_package(tmp_path / "case")
    with Case.create(root, "C1") as case:
        _revisions(case, 1, 1)
        export_case(case)
        _revisions(case, 2, 3)
    pristine = tmp_path / "pristine"
    shutil.copytree(root, pristine)
    child = ("import os, signal, sys\nreal, count = os.replace, [0]\n"
             "def replace(src, dst, *a, **k):\n    count[0] += 1\n"
             "    if count[0] == int(sys.argv[2]):\n        os.kill(os.getpid(), signal.SIGKILL)\n"
             "    return real(src, dst, *a, **k)\n"
             "os.replace = replace\nfrom ledger import export_case\nexport_case(sys.argv[1])\n")
    head = json.loads((root / "manifest.json").read_bytes())["head"]["seq"]
    killed = 0
    for point in range(1, 64, 5):
        tree = tmp_path / f"killed-{point}"
        shutil.copytree(pristine, tree)
        done = subprocess.run([sys.executable, "-c", child, str(tree), str(point)])
        killed += done.returncode == -9
        report = verify_case(tree)
        imported = import_tree(tree, tmp_path / f"imported-{point}")
        manifest = json.loads((tree / "manifest.json").read_bytes())["head"]
        assert report.head_seq > head and (imported.head_seq, imported.head_sha256) == (manifest["seq"], manifest["sha256"])
    assert killed >= 10  # the export has more renames than the points tried


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("killed_at", ["analysis/budgets/0005/events/00000003.json",
                                       "analysis/budgets/0004/events/00000001.json"])
def test_an_export_killed_while_writing_new_revisions_is_taken_by_verify_and_import(tmp_path, killed_at):
    """Events past the manifest's head stop replaying at the first whose content file is not written
    yet, so the events opening the new revisions may never be replayed: the temp files of a revision
    the replay does not know were refused by import (verify took them), after a real kill."""
    root = make_package(tmp_path / "case")
    with Case.create(root, "C1") as case:
        _revisions(case, 1, 2)
        export_case(case)
        _revisions(case, 3, 3)
    child = ("import os, signal, sys\nreal = os.replace\n"
             "def replace(src, dst, *a, **k):\n"
             f"    if str(dst).endswith({killed_at!r}):\n        os.kill(os.getpid(), signal.SIGKILL)\n"
             "    return real(src, dst, *a, **k)\n"
             "os.replace = replace\nfrom ledger import export_case\nexport_case(sys.argv[1])\n")
    assert subprocess.run([sys.executable, "-c", child, str(root)]).returncode == -9
    assert any(".ledger-tmp-" in p.name for p in (root / killed_at).parent.iterdir())
    assert verify_case(root).head_seq > 0
    assert import_tree(root, tmp_path / "imported").head_seq == json.loads((root / "manifest.json").read_bytes())[
        "head"]["seq"]


def test_export_leaves_a_temp_like_name_no_export_makes_and_verify_names_it(exported, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    stray = tree / "analysis/smuggled/.ledger-tmp-00000001.json.abc"
    stray.parent.mkdir()
    stray.write_bytes(b"mine")
    with Case.open(tree) as case:
        export_case(case)
    assert stray.read_bytes() == b"mine"
    with pytest.raises(LedgerError) as caught:
        verify_case(tree)
    assert caught.value.code == INTEGRITY_ERROR
    assert "named like an export's temp file" in caught.value.message


def test_events_an_interrupted_export_wrote_past_the_manifest_head_are_accepted_by_both(exported, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    with Case.open(tree) as case:
        manifest = (tree / "manifest.json").read_bytes()
        case.budget().reserve("H2", "q2", "source.find_text")
        export_case(case)
    (tree / "manifest.json").write_bytes(manifest)  # as if killed before the manifest was replaced
    assert verdicts(tree, tmp_path) == (None, None)


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_import_to_a_new_folder_says_how_many_events_past_the_manifest_head_it_left_out(exported, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    with Case.open(tree) as case:
        manifest = (tree / "manifest.json").read_bytes()
        head = case.query("SELECT MAX(seq) AS n FROM events")[0]["n"]
        budget = case.budget()
        budget.reserve("H2", "q2", "source.find_text")
        budget.fail("H2", "q2", "tool crashed")
        export_case(case)
    (tree / "manifest.json").write_bytes(manifest)  # an older manifest than the files
    report = import_tree(tree, tmp_path / "copy")
    assert (report.head_seq, report.events_left_out) == (head, 2)
    assert report.to_dict()["events_left_out"] == 2
    assert any("left out 2 event(s)" in line and f"head seq {head}" in line for line in report.notes())
    result = run_cli("import", str(tree), "--to", str(tmp_path / "copy-cli"))
    assert result.returncode == 0 and b"left out 2 event(s)" in result.stdout + result.stderr
    assert import_tree(exported, tmp_path / "whole").events_left_out == 0


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_an_export_killed_before_the_content_of_an_event_past_the_head_still_imports(exported, tmp_path):
    """Export writes every new event file, then the new content files, then the manifest: killed
    between the two, an event past the manifest's head lacks its content. Verify accepts that tree
    and import into a new folder leaves those events out (with any content true to its name an
    event past the head had), while a content file that does not hash to its name is still named."""
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    with Case.open(tree) as case:
        manifest = (tree / "manifest.json").read_bytes()
        head = case.query("SELECT MAX(seq) AS n FROM events")[0]["n"]
        budget = case.budget()
        budget.reserve("H2", "q2", "source.find_text")
        budget.record_result("H2", "q2", {"finding": "only past the head"})
        budget.reserve("H1", "q3", "source.find_text")
        budget.record_result("H1", "q3", {"finding": "also past the head"})
        new = [content_path(row["sha256"]) for row in case.query(f"SELECT sha256 FROM contents WHERE seq > {head}")]
        export_case(case)
    (tree / "manifest.json").write_bytes(manifest)  # killed before the manifest was replaced
    (tree / new[0]).unlink()  # ... and before the first new content was written
    assert len(new) == 2 and (tree / new[1]).exists()
    assert verdicts(tree, tmp_path) == (None, None)
    report = import_tree(tree, tmp_path / "copy")
    assert (report.head_seq, report.events_left_out) == (head, 4)
    assert verify_case(tmp_path / "copy").head_seq == head
    assert not (tmp_path / "copy" / new[1]).exists()
    (tree / new[1]).write_bytes(b'{"finding":"edited"}')
    with pytest.raises(LedgerError) as caught:
        import_tree(tree, tmp_path / "again")
    assert caught.value.code == INTEGRITY_ERROR and caught.value.details["path"] == new[1]
    assert not (tmp_path / "again").exists()


def _interrupted(exported: Path, tree: Path) -> tuple[int, list[str], list[str]]:
    """``tree``: a copy of ``exported`` with four events past the manifest's head whose export was
    killed before its first new content file; ``(head, new event files, new content files)``."""
    shutil.copytree(exported, tree)
    with Case.open(tree) as case:
        manifest = (tree / "manifest.json").read_bytes()
        head = case.query("SELECT MAX(seq) AS n FROM events")[0]["n"]
        budget = case.budget()
        budget.reserve("H2", "q2", "source.find_text")
        budget.record_result("H2", "q2", {"finding": "only past the head"})
        budget.reserve("H1", "q3", "source.find_text")
        budget.record_result("H1", "q3", {"finding": "also past the head"})
        contents = [content_path(r["sha256"]) for r in case.query(f"SELECT sha256 FROM contents WHERE seq > {head}")]
        events = [event_path(r["stream"], r["revision"], r["stream_seq"])
                  for r in case.query(f"SELECT stream, revision, stream_seq FROM events WHERE seq > {head} ORDER BY seq")]
        export_case(case)
    (tree / "manifest.json").write_bytes(manifest)
    (tree / contents[0]).unlink()
    return head, events, contents


FORGERIES = {
    # a file claiming a seq past the head that does not continue the hash chain
    "forged event at a new revision's address": lambda tree, events: (
        "analysis/budgets/0005/events/00000001.json", b'{"seq": 99}'),
    "forged event at the next case address": lambda tree, events: (
        "analysis/case/events/00000077.json", b'{"seq": 1000000, "parent_sha256": "' + b"0" * 64 + b'"}'),
    # bytes true to their name that no event past the head names
    "planted content": lambda tree, events: (
        f"{CONTENT}/{hashlib.sha256(b'{}').hexdigest()}.json", b"{}"),
    # the event the replay stops at, edited: refused for its bytes, not for a missing content
    "edited first event past the head": lambda tree, events: (
        events[0], (tree / events[0]).read_bytes().replace(b'"revision":1', b'"revision":1,"x":1', 1)),
    # a later one, edited: it no longer continues the chain from the one before
    "edited later event past the head": lambda tree, events: (
        events[2], (tree / events[2]).read_bytes().replace(b'"revision":1', b'"revision":1,"x":1', 1)),
}


@pytest.mark.parametrize("kind", FORGERIES)
@pytest.mark.sampled(every=4)
def test_import_leaves_out_only_a_real_continuation_past_the_head(exported, tmp_path, kind):
    """What an interrupted export left is taken only when it continues the hash chain from the last
    event replayed and the event the replay stopped at lacks its content; a forged or edited file
    past the head, or a content file no event past the head names, is INTEGRITY_ERROR naming it."""
    tree = tmp_path / "tree"
    head, events, _ = _interrupted(exported, tree)
    assert import_tree(tree, tmp_path / "genuine").events_left_out == 4
    relative, data = FORGERIES[kind](tree, events)
    assert (tree / relative).exists() == relative.startswith("analysis/budgets/0001/")
    (tree / relative).parent.mkdir(parents=True, exist_ok=True)
    (tree / relative).write_bytes(data)
    with pytest.raises(LedgerError) as caught:
        import_tree(tree, tmp_path / "copy")
    assert caught.value.code == INTEGRITY_ERROR, caught.value
    named = caught.value.details.get("path") or caught.value.details.get("file")
    assert named == relative or relative in events and named in events[events.index(relative):], caught.value
    assert not (tmp_path / "copy").exists()


# --- item 9: file names ---------------------------------------------------------------------
BAD_NAMES = [b"sources/\xff.py", b"sources/a\nb.py", b"sources/tab\there.txt", b"sources/\x1b[31mred",
             b"sources/\xfe\xfd/inner.py", b"top\x7f.txt", "sources/line\u2028break.py".encode()]


@settings(max_examples=300, deadline=None)
@given(revision=st.integers(1, 2**53 - 1), counter=st.integers(1, 2**53 - 1),
       stream=st.sampled_from(["case", "budget"]))
def test_every_path_an_event_exports_to_is_an_event_file_of_the_export_rule(revision, counter, stream):
    """Revisions past 9999 and counters past 99,999,999 widen their folder and file names: verify
    and import must still know them as event files (import found events only through this rule)."""
    assert EVENT_FILE_RE.fullmatch(event_path(stream, revision, counter))
    for name in ("E000001.json", "result.json", "index.json"):
        assert EVIDENCE_EVENT_FILE_RE.fullmatch(evidence_path(revision, "op", name))
        assert EVENT_FILE_RE.fullmatch(evidence_path(revision, "op", name))


@pytest.mark.slow  # about 35 s (30,000 exported files): the slow lane (.ci/run) runs it
def test_a_case_of_ten_thousand_revisions_exports_verifies_and_imports(tmp_path):
    lines = []
    for revision in range(1, 10_002):
        lines += [{"op": "open_revision", "hypotheses": [{"statement": f"h {revision}"}], "units_per_hypothesis": 10},
                  {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"},
                  {"op": "transition", "to": "EVALUATING"}]
    lines[-1:] = [{"op": "initialize"}, {"op": "reserve", "hypothesis": "H1", "action_id": "q", "action": "x.y"},
                  {"op": "record_result", "hypothesis": "H1", "action_id": "q", "evidence": {"n": 1}}]  # revision 10001
    journal = tmp_path / "revisions.jsonl"
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    (tmp_path / "analysis.toml").write_text("[limits]\ncase_events_max = 1000000\n", encoding="utf-8")
    done = run_cli("--analysis-config", str(tmp_path / "analysis.toml"), "apply", str(tmp_path / "case"),
                   str(journal), "--create", "REVS-1", "--quiet", "--batch-size", "500")
    assert done.returncode == 0, done.stderr
    export_case(tmp_path / "case")
    assert (tmp_path / "case" / "analysis" / "budgets" / "10001" / "events" / "00000003.json").is_file()
    verify_case(tmp_path / "case", strict=True)
    imported = import_tree(tmp_path / "case", tmp_path / "again")
    assert imported.head_seq == verify_case(tmp_path / "case").head_seq


def test_printable_name_shows_undecodable_bytes_and_control_characters():
    assert printable_name(os.fsdecode(b"sources/\xff.py")) == "sources/\\xff.py"
    assert printable_name("sources/a\nb\x1b.py") == "sources/a\\nb\\x1b.py"
    assert printable_name("café 🍰") == "café 🍰"


@pytest.mark.parametrize("raw", BAD_NAMES, ids=lambda r: repr(r))
def test_every_command_refuses_a_package_file_name_outside_the_rule_and_names_it(exported, tmp_path, raw):
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    bad = os.path.join(os.fsencode(tree), raw)
    os.makedirs(os.path.dirname(bad), exist_ok=True)
    with open(bad, "wb") as handle:
        handle.write(b"x")
    refusals = []
    with Case.open(tree) as case:
        for action in (case.input_identity, lambda: export_case(case)):
            with pytest.raises(LedgerError) as caught:
                action()
            refusals.append(caught.value)
    by_verify, by_import = verdicts(tree, tmp_path)
    refusals += [by_verify, by_import]
    parts = raw.split(b"/")
    bad_prefix = next(b"/".join(parts[:i + 1]) for i in range(len(parts))
                      if parts[i] != b"sources")  # the first name that breaks the rule
    for refusal in refusals:
        assert refusal is not None and refusal.code == INVALID_ARGUMENT, refusal
        assert refusal.details["path"] == printable_name(os.fsdecode(bad_prefix))
        assert refusal.details["path"].isprintable() and refusal.details["path"] in refusal.message


def test_a_source_ref_outside_the_name_rule_is_refused_naming_it(exported, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    (tree / "sources" / "a\nb.py").write_text("x")
    with Case.open(tree) as case:
        with pytest.raises(LedgerError) as caught:
            case.resolve_source_refs(["sources/a\nb.py"])
    assert caught.value.code == SOURCE_REF_INVALID
    assert caught.value.details["path"] == "sources/a\\nb.py"


def test_input_identity_of_good_names_is_unchanged_by_the_rule(exported, tmp_path):
    """Valid UTF-8 names without control characters (accents, spaces, emoji) stay inputs."""
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    with Case.open(tree) as case:
        before = case.input_identity()
        (tree / "sources" / "café menu 🍰.txt").write_text("x")
        assert case.input_identity() != before
    assert verdicts(tree, tmp_path) == (None, None)


LONE_SURROGATE = "\ud800"  # no file-system name: os.fsencode refuses it


def test_a_hard_link_to_the_ledger_is_not_a_source(budget, case):
    os.link(case.path / "ledger.sqlite", case.path / "sources" / "hard")
    budget.reserve("H1", "a1", "source.read_context")
    with pytest.raises(LedgerError) as caught:
        budget.record_result("H1", "a1", {"x": 1}, ["sources/hard"])
    assert caught.value.code == SOURCE_REF_INVALID


def test_a_case_folder_with_a_non_utf8_name_works(tmp_path):
    folder = os.fsdecode(bytes(tmp_path) + b"/case-\xff")
    with Case.create(folder, "BYTES-1") as case:
        case.open_revision([{"statement": "s"}])
        export_case(case)
    assert verify_case(folder).head_seq == 2


@pytest.mark.parametrize("call", [
    lambda: Case.create(LONE_SURROGATE, "X-1"),
    lambda: Case.open(LONE_SURROGATE),
    lambda: verify_case(LONE_SURROGATE),
    lambda: import_tree(LONE_SURROGATE),
], ids=["create", "open", "verify", "import"])
def test_a_path_with_a_lone_surrogate_is_an_invalid_argument(call):
    with pytest.raises(LedgerError) as caught:
        call()
    assert caught.value.code == INVALID_ARGUMENT
    assert "cannot name a file" in caught.value.message


def test_a_config_path_with_a_lone_surrogate_is_config_invalid():
    with pytest.raises(LedgerError) as caught:
        BudgetConfig.load(LONE_SURROGATE)
    assert caught.value.code == CONFIG_INVALID


# --- found by the second break-it round ------------------------------------------------------
def test_the_longest_ledger_path_sqlite_opens_is_504_bytes_and_a_longer_one_is_refused_by_its_length(tmp_path):
    """SQLite opens names of at most 512 bytes, its rollback journal's ("-journal") among them: a
    ledger path of 505 to 507 bytes passed the check and failed as a refusing file system."""
    base = tmp_path / ("d" * 200) / ("e" * 200)
    base.mkdir(parents=True)
    for total, ok in ((504, True), (505, False)):
        room = total - len(os.fsencode(base)) - 1 - len("/ledger.sqlite")
        folder = base / (str(total) + "c" * (room - 3))
        assert len(os.fsencode(folder / "ledger.sqlite")) == total
        if ok:
            Case.create(folder, "LONG-1").close()
            with Case.open(folder) as opened:
                assert opened.status()["case_id"] == "LONG-1"
        else:
            with pytest.raises(LedgerError) as caught:
                Case.create(folder, "LONG-2")
            assert caught.value.code == INVALID_ARGUMENT
            assert caught.value.message.endswith("the ledger's absolute path is 505 bytes; SQLite opens at most 504 "
                                                 "(move the case to a shorter path)")


def test_a_ledger_path_sqlite_cannot_open_is_refused_before_any_folder_is_made(tmp_path):
    deep = tmp_path / ("d" * 200) / ("e" * 200) / ("f" * 120)
    deep.mkdir(parents=True)
    with pytest.raises(LedgerError) as caught:
        Case.create(deep / "case", "LONG-1")
    assert caught.value.code == INVALID_ARGUMENT and "SQLite opens at most" in caught.value.message
    assert not (deep / "case").exists()
    result = run_cli("init", str(deep / "case2"), "--case-id", "LONG-2")
    assert result.returncode == 1 and b"error: INVALID_ARGUMENT: " in result.stderr
    assert b"Traceback" not in result.stderr


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_case_moved_under_a_too_long_path_is_an_invalid_argument_not_tampering(case, tmp_path):
    case.close()
    deep = tmp_path / ("d" * 200) / ("e" * 200) / ("f" * 120)
    shutil.copytree(case.path, deep / "moved")
    for args in (["state", str(deep / "moved")], ["verify", str(deep / "moved")]):
        result = run_cli(*args)
        assert result.returncode == 1 and b"error: INVALID_ARGUMENT: " in result.stderr, result.stderr


@pytest.mark.parametrize("path", [b"", "", "a\x00b", 3, None], ids=["empty-bytes", "empty", "nul", "int", "none"])
def test_case_paths_of_the_wrong_kind_are_invalid_arguments(tmp_path, path):
    for call in (lambda: Case.create(path, "X-1"), lambda: Case.open(path), lambda: verify_case(path)):
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == INVALID_ARGUMENT


def test_bytes_paths_work_like_str_paths(tmp_path):
    folder = os.fsencode(tmp_path / "bytes-case")
    with Case.create(folder, "BYTES-2") as case:
        case.open_revision([{"statement": "s"}])
    assert verify_case(folder).head_seq == 2 and Case.open(folder).status()["case_id"] == "BYTES-2"


# --- a source ref is hashed from the one file it resolved to ----------------------------------------
FIFO_SWAPPER = """
import os, sys, time
target, fifo, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
parked = target + ".parked"
end = time.monotonic() + seconds
while time.monotonic() < end:
    os.rename(target, parked)
    os.rename(fifo, target)         # a FIFO takes the file's place
    os.rename(target, fifo)
    os.rename(parked, target)       # the file is back
"""

RESOLVER = """
import hashlib, sys, time
from ledger import LedgerError
from ledger.model.source_refs import resolve_source_refs
root, ref, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
seen, refused, end = set(), 0, time.monotonic() + seconds
while time.monotonic() < end:
    try:
        seen.update(r["sha256"] for r in resolve_source_refs(root, [ref]))
    except LedgerError as exc:
        assert exc.code == "SOURCE_REF_INVALID", exc
        refused += 1
print(" ".join(sorted(seen)), refused, flush=True)
"""


@pytest.mark.parametrize("swap", ["a folder for a link to outside", "the file for a FIFO"])
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_source_ref_is_hashed_from_the_file_it_resolved_to_never_outside_or_waiting(tmp_path, swap):
    from test_router import SWAPPER

    root = make_package(tmp_path / "case")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("OUTSIDE\n")
    (root / "sources" / "d").mkdir()
    (root / "sources" / "d" / "f.txt").write_text("inside\n")
    inside = hashlib.sha256(b"inside\n").hexdigest()
    if swap == "the file for a FIFO":
        os.mkfifo(tmp_path / "fifo")
        args = [FIFO_SWAPPER, str(root / "sources" / "d" / "f.txt"), str(tmp_path / "fifo"), "1.5"]
    else:
        args = [SWAPPER, str(root), str(root / "parked"), str(outside), "1.5"]
    swapper = subprocess.Popen([sys.executable, "-c", *args])
    try:  # a resolver that waited on the FIFO would never print: the timeout fails the test
        done = subprocess.run([sys.executable, "-c", RESOLVER, str(root), "sources/d/f.txt", "1.2"],
                              capture_output=True, text=True, timeout=60)
    finally:
        swapper.wait(timeout=60)
    assert done.returncode == 0, done.stderr
    hashes, refused = done.stdout.rsplit(" ", 1)
    assert hashes.split() == [inside] and int(refused) > 0


IDENTITY = """
import sys, time
from pathlib import Path
from ledger.model.input_identity import input_identity
root, seconds = Path(sys.argv[1]), float(sys.argv[2])
count, end = 0, time.monotonic() + seconds
while time.monotonic() < end:
    input_identity(root, set())
    count += 1
print(count, flush=True)
"""


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_input_identity_never_waits_on_a_file_swapped_for_a_fifo_while_it_walks(tmp_path):
    root = make_package(tmp_path / "case")
    (root / "sources" / "d").mkdir()
    (root / "sources" / "d" / "f.txt").write_text("inside\n")
    os.mkfifo(tmp_path / "fifo")
    swapper = subprocess.Popen([sys.executable, "-c", FIFO_SWAPPER, str(root / "sources" / "d" / "f.txt"),
                                str(tmp_path / "fifo"), "1.5"])
    try:  # a walk that waited on the FIFO would never print: the timeout fails the test
        done = subprocess.run([sys.executable, "-c", IDENTITY, str(root), "1.2"], capture_output=True, text=True,
                              timeout=60)
    finally:
        swapper.wait(timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0


def test_a_manifest_temp_file_is_no_input_and_export_removes_only_the_names_it_makes(exported, tmp_path):
    """An interrupted export's ``.ledger-tmp-manifest.json.<suffix>`` is not an input (exporting again
    never changes the identity) and the next export removes it; a user's file merely starting with
    that name is an input and stays."""
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    with Case.open(tree) as case:
        identity = case.input_identity()
        temp = tree / ".ledger-tmp-manifest.json.4242-abcdef-0"
        temp.write_bytes(b"half a manifest")
        assert case.input_identity() == identity
        mine = tree / ".ledger-tmp-manifest.json.my notes.txt"
        mine.write_text("user data")
        with_mine = case.input_identity()
        assert with_mine != identity
        export_case(case)
        assert not temp.exists() and mine.read_text() == "user data"
        assert case.input_identity() == with_mine


def test_what_lies_at_an_exported_path_never_counts_in_the_identity(exported, tmp_path):
    """A link to a folder, a link to a file, a pipe or an empty folder where an exported event belongs
    leaves the identity as it was (verify and export name them; the identity only excludes the path)."""
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    event = tree / "analysis/case/events/00000001.json"
    with Case.open(tree) as case:
        identity = case.input_identity()
        for make in (lambda: event.symlink_to(tree / "sources"), lambda: event.symlink_to(tree / "sources/app.py"),
                     lambda: os.mkfifo(event), lambda: event.mkdir()):
            event.unlink() if event.is_symlink() or event.exists() and not event.is_dir() else event.rmdir()
            make()
            assert case.input_identity() == identity
