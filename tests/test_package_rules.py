"""One rule for what belongs in an exported tree (issue 8, item 5) and one rule for package
file names (item 9), applied alike by verify, import, export, input identity and source refs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ledger import Case, LedgerError, export_case, import_tree, verify_case
from ledger.ground.errors import INTEGRITY_ERROR, INVALID_ARGUMENT, SOURCE_REF_INVALID
from ledger.model.package import printable_name

from conftest import make_package

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
}


@pytest.mark.parametrize("kind", sorted(STRAYS))
def test_verify_and_import_refuse_the_same_stray_file_and_name_it(exported, tmp_path, kind):
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    stray = STRAYS[kind](tree)
    by_verify, by_import = verdicts(tree, tmp_path)
    assert by_verify is not None and by_import is not None
    assert by_verify.code == by_import.code == INTEGRITY_ERROR
    assert by_verify.message == by_import.message
    assert stray in by_verify.message and by_verify.details["path"] == stray


def test_an_export_temp_file_is_accepted_by_both(exported, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    (tree / "analysis/case/events/.ledger-tmp-00000001.json.abc").write_bytes(b"half")
    assert verdicts(tree, tmp_path) == (None, None)


def test_events_an_interrupted_export_wrote_past_the_manifest_head_are_accepted_by_both(exported, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(exported, tree)
    with Case.open(tree) as case:
        manifest = (tree / "manifest.json").read_bytes()
        case.budget().reserve("H2", "q2", "source.find_text")
        export_case(case)
    (tree / "manifest.json").write_bytes(manifest)  # as if killed before the manifest was replaced
    assert verdicts(tree, tmp_path) == (None, None)


# --- item 9: file names ---------------------------------------------------------------------
BAD_NAMES = [b"sources/\xff.py", b"sources/a\nb.py", b"sources/tab\there.txt", b"sources/\x1b[31mred",
             b"sources/\xfe\xfd/inner.py", b"top\x7f.txt", "sources/line\u2028break.py".encode()]


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
