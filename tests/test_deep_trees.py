"""A folder tree of any depth: every walk of a tree a user can reach (a package's ``sources/`` and
``analysis/``, a folder of cases, an import's copy, ``runs import --recursive``) works without
recursion (ledger/ground/paths.py: ``walk``, ``fwalk``, ``remove_tree``).

Python 3.11's ``os.walk``, ``os.fwalk`` and ``shutil.rmtree`` call themselves once per folder level,
so a tree about 1,000 folders deep (a path of some 2,000 characters) raised ``RecursionError``, a
traceback, from ``verify``, ``export``, ``import``, ``fleet export`` and the router. The trees here
are 400 deep under a recursion limit lowered to leave fewer frames than that: pytest's own clean-up
of a tree past the real limit would fail the same way.
"""

from __future__ import annotations

import inspect
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import Router, export_case, export_fleet, import_tree, verify_case
from ledger.ground.paths import fwalk, remove_tree, walk
from ledger.package_tools.demo import run_demo
from ledger_cli.main import main

DEPTH = 400


def _deep(top: Path, depth: int = DEPTH) -> Path:
    """``top/d/d/…/d`` (``depth`` levels, made one by one: ``os.makedirs`` recurses too); the deepest."""
    folder = top
    folder.mkdir(parents=True, exist_ok=True)
    for _ in range(depth):
        folder = folder / "d"
        folder.mkdir()
    return folder


class _FewFrames:
    """The interpreter's recursion limit lowered to leave fewer frames than :data:`DEPTH`."""

    def __enter__(self) -> None:
        self.limit = sys.getrecursionlimit()
        sys.setrecursionlimit(len(inspect.stack()) + DEPTH - 100)

    def __exit__(self, *exc) -> None:
        sys.setrecursionlimit(self.limit)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    case = tmp_path_factory.mktemp("deep") / "demo"
    run_demo(case, echo=lambda _: None)
    return case


def test_a_package_with_a_deep_tree_in_its_sources_verifies_exports_imports_and_joins_a_fleet(demo, tmp_path):
    package = tmp_path / "case"
    shutil.copytree(demo, package, symlinks=True)
    bottom = _deep(package / "sources" / "deep")
    (bottom / "notes.txt").write_text("needle\n")
    with _FewFrames():
        assert verify_case(package).events == 56
        export_case(package)
        assert import_tree(package, tmp_path / "imported").events == 56
        found = Router(package).find_text({"text": "needle", "path_glob": "sources/deep/*"})
        report = export_fleet([package], tmp_path / "fleet")
    assert [item["path"] for item in found["items"]] == [str(Path("sources/deep", *["d"] * DEPTH, "notes.txt"))]
    assert (report.exported, report.failed) == (1, [])
    assert (tmp_path / "imported" / "sources" / "deep" / Path(*["d"] * DEPTH) / "notes.txt").read_text() == "needle\n"


def test_a_deep_tree_beside_cases_in_a_folder_of_cases_is_walked(demo, tmp_path):
    shutil.copytree(demo, tmp_path / "cases" / "c1", symlinks=True)
    _deep(tmp_path / "cases" / "zz")
    with _FewFrames():
        report = export_fleet([tmp_path / "cases"], tmp_path / "fleet")
    assert (report.exported, report.failed) == (1, [])


def test_walk_and_fwalk_give_what_os_walk_and_os_fwalk_give_links_listed_never_entered(tmp_path):
    for name in ("b/x", "a/y/z", "a/y/w", "c"):
        (tmp_path / name).mkdir(parents=True)
    for name in ("a/f1", "a/y/f2", "b/x/f3", "top"):
        (tmp_path / name).write_text(name)
    (tmp_path / "b" / "to_a").symlink_to(tmp_path / "a")
    (tmp_path / "b" / "to_file").symlink_to(tmp_path / "top")
    (tmp_path / "b" / "nowhere").symlink_to(tmp_path / "missing")

    def ours_and_os(walker, reference):
        mine, theirs = [], []
        for out, it in ((mine, walker), (theirs, reference)):
            for folder, dirnames, filenames, *_ in it:
                dirnames.sort()
                out.append((str(folder), list(dirnames), sorted(filenames)))
        return mine, theirs

    mine, theirs = ours_and_os(walk(tmp_path), os.walk(tmp_path))
    assert mine == theirs and len(mine) == 8
    root = os.open(tmp_path, os.O_RDONLY)
    try:
        mine, theirs = ours_and_os(fwalk(".", root), os.fwalk(".", dir_fd=root))
    finally:
        os.close(root)
    assert mine == theirs and len(mine) == 8


def test_fwalk_gives_nothing_for_a_link_or_a_file_and_raises_for_a_top_that_is_missing(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "file").write_text("x")
    root = os.open(tmp_path, os.O_RDONLY)
    try:
        assert list(fwalk("link", root)) == [] and list(fwalk("file", root)) == []
        with pytest.raises(FileNotFoundError):
            list(fwalk("missing", root))
    finally:
        os.close(root)


def test_remove_tree_removes_a_deep_tree_and_never_what_a_link_in_it_leads_to(tmp_path):
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "file").write_text("stays")
    bottom = _deep(tmp_path / "gone")
    (bottom / "link").symlink_to(kept)
    (bottom / "file").write_text("x")
    (tmp_path / "top-link").symlink_to(kept)
    with _FewFrames():
        remove_tree(tmp_path / "gone")
        remove_tree(tmp_path / "top-link")  # a link itself: nothing removed
    assert not (tmp_path / "gone").exists()
    assert (kept / "file").read_text() == "stays" and (tmp_path / "top-link").is_symlink()


# --- paths longer than the system can name, and folders swapped while walked ---------------------
LONG = "n" * 60  # 100 levels of it: a path of some 6,100 characters, past the 4,096 the system can name


def _long_path(top: Path, levels: int = 100) -> Path:
    """``top/nnn…/nnn…/…`` made level by level through folder descriptors (the path is too long to name)."""
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.mkdir(LONG, dir_fd=fd)
            below = os.open(LONG, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = below
        os.close(os.open("notes.txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
        with open(f"/proc/self/fd/{fd}/notes.txt", "w") as handle:
            handle.write("needle\n")
    finally:
        os.close(fd)
    return Path(top, *[LONG] * levels, "notes.txt")


def test_the_router_lists_a_file_whose_path_is_too_long_to_name_as_skipped_not_left_out(demo, tmp_path):
    """Its folders are opened through their parents' descriptors, as os.fwalk opens them: opening each by
    its whole path left the subtree out without a word once the path passed 4,096 bytes."""
    package = tmp_path / "case"
    shutil.copytree(demo, package, symlinks=True)
    deepest = _long_path(package / "sources" / "deep")
    found = Router(package).find_text({"text": "needle", "path_glob": "sources/deep/*"})
    relative = deepest.relative_to(package).as_posix()
    assert found["items"] == [] and [s["path"] for s in found["coverage"]["skipped"]] == [relative]


def test_a_hard_link_to_a_ledger_file_too_deep_to_name_is_still_refused_by_the_router(demo, tmp_path):
    package = tmp_path / "case"
    shutil.copytree(demo, package, symlinks=True)
    _long_path(package / "analysis" / "extra")
    fd = os.open(package / "analysis" / "extra", os.O_RDONLY)
    try:
        for _ in range(100):
            below = os.open(LONG, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = below
        os.link("notes.txt", package / "sources" / "linked.py", src_dir_fd=fd)
    finally:
        os.close(fd)
    found = Router(package).find_text({"text": "needle", "path_glob": "sources/linked.py"})
    assert found["items"] == []
    assert [(s["path"], "ledger's own files" in s["reason"]) for s in found["coverage"]["skipped"]] == [
        ("sources/linked.py", True)]


def test_a_folder_too_long_to_name_beside_cases_is_left_out_with_a_note_and_the_cases_exported(demo, tmp_path):
    shutil.copytree(demo, tmp_path / "cases" / "c1", symlinks=True)
    _long_path(tmp_path / "cases" / "zz")
    done = CliRunner().invoke(main, ["fleet", "export", str(tmp_path / "cases"), "--to", str(tmp_path / "fleet")])
    assert done.exit_code == 0, done.output
    assert "left out: a folder whose path is longer than the system can name" in done.stderr
    assert done.stdout.endswith("1 cases, 1 exported, 0 unchanged (head as exported: not read again), 0 failed\n")


def test_remove_tree_never_follows_a_folder_swapped_for_a_link_while_it_works(tmp_path, monkeypatch):
    """It emptied each folder by its path: a folder swapped for a link to another one after its parent
    was listed had that other folder emptied (shutil.rmtree, through descriptors, never did)."""
    from ledger.ground import paths

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("stays")
    (tmp_path / "gone" / "sub").mkdir(parents=True)
    (tmp_path / "gone" / "sub" / "f").write_text("x")
    real_listed = paths._listed

    def swapping(fd):
        entries = real_listed(fd)
        if any(entry.name == "sub" for entry in entries) and (tmp_path / "gone" / "sub").is_dir():
            (tmp_path / "gone" / "sub").rename(tmp_path / "moved")
            (tmp_path / "gone" / "sub").symlink_to(victim)
        return entries
    monkeypatch.setattr(paths, "_listed", swapping)
    remove_tree(tmp_path / "gone")
    assert (victim / "keep").read_text() == "stays" and (tmp_path / "moved" / "f").exists()


def test_make_folders_under_a_link_to_nothing_names_the_link(tmp_path):
    from ledger.ground.paths import make_folders

    (tmp_path / "dang").symlink_to(tmp_path / "missing")
    with pytest.raises(FileExistsError) as caught:
        make_folders(tmp_path / "dang" / "sub" / "case")
    assert caught.value.filename == str(tmp_path / "dang")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        make_folders(tmp_path / "file" / "sub")
    make_folders(tmp_path / "a" / "b" / "c")
    make_folders(tmp_path / "a" / "b" / "c")
    assert (tmp_path / "a" / "b" / "c").is_dir()
