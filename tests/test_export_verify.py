"""docs/files.md: export, import and verify, including tampering with triggers dropped."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from ledger import (BudgetConfig, Case, LedgerError, export_case, export_many, import_tree, verify_case,
                    read_only_query)
from ledger.ground.canonical import canonical_bytes, sha256_hex
from ledger.ground.errors import (CASE_EXISTS, INTEGRITY_ERROR, INVALID_ARGUMENT, LEDGER_MISSING, STORAGE_ERROR)
import ledger.package_tools.export as export_module
from ledger.model.package import event_path
from ledger.ground.paths import EXPORT_FILE_BYTES_MAX, bytes_at_most
from ledger.model.source_refs import line_ending_digests
from conftest import EXAMPLE_BUDGET, deny_reading, logical_dump, run_cli, make_package, start_case









@pytest.fixture
def exported(budget, case):
    budget.reserve("H1", "a1", "source.read_context")
    budget.record_result("H1", "a1", {"finding": "x"}, ["sources/app.py"])
    budget.settle("H1", "a1", 80, "good")
    budget.reserve("H1", "a2", "source.find_text")
    budget.record_result("H1", "a2", {"finding": "y"})
    budget.settle("H1", "a2", 50, "fine")
    budget.reserve("H2", "b1", "research.lookup")
    budget.fail("H2", "b1", "timeout")
    budget.reject("H2", "no")
    export_case(case)
    case.close()
    return case.path


def tree(root: Path) -> dict[str, bytes]:
    files = {}
    for directory, _, names in os.walk(root):
        for name in names:
            full = Path(directory, name)
            relative = full.relative_to(root).as_posix()
            if not relative.startswith("ledger.sqlite"):
                files[relative] = full.read_bytes()
    return files


def unguarded(path: Path) -> sqlite3.Connection:
    """A raw connection with every trigger dropped: what a determined tamperer has."""
    conn = sqlite3.connect(path / "ledger.sqlite")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    return conn


def restore_triggers(conn: sqlite3.Connection) -> None:
    from ledger.storage.sqlfiles import migrations

    for statement in migrations()[0][2]:
        if statement.lstrip("- \n").split("\n")[-1].startswith("CREATE TRIGGER") or "CREATE TRIGGER" in statement:
            conn.execute(statement[statement.index("CREATE TRIGGER"):])
    conn.commit()
    conn.close()


def assert_verify_fails_at(path: Path, seq: int | None) -> LedgerError:
    with pytest.raises(LedgerError) as caught:
        verify_case(path)
    assert caught.value.code == INTEGRITY_ERROR
    assert caught.value.details.get("seq") == seq, caught.value.message
    return caught.value


def test_export_writes_the_stored_canonical_bytes_and_a_manifest(exported):
    files = tree(exported)
    conn = sqlite3.connect(exported / "ledger.sqlite")
    events = conn.execute("SELECT seq, stream, revision, stream_seq, sha256, body FROM events ORDER BY seq").fetchall()
    assert "analysis/case/events/00000001.json" in files
    assert "analysis/budgets/0001/events/00000001.json" in files
    budget_files = sorted(k for k in files if k.startswith("analysis/budgets/0001/events/"))
    assert len(budget_files) == sum(1 for e in events if e[1] == "budget")
    for seq, stream, revision, stream_seq, sha, body in events:
        path = (f"analysis/budgets/{revision:04d}/events/{stream_seq:08d}.json" if stream == "budget"
                else f"analysis/case/events/{stream_seq:08d}.json")
        assert files[path] == body.encode() and sha256_hex(files[path]) == sha
    for sha, body in conn.execute("SELECT sha256, body FROM contents"):
        assert files[f"analysis/evidence/content/{sha}.json"] == body.encode()
    manifest = json.loads(files["manifest.json"])
    assert files["manifest.json"] == canonical_bytes(manifest)
    assert manifest["head"] == {"seq": events[-1][0], "sha256": events[-1][4]}
    assert manifest["package_generation"] == events[-1][0]
    assert manifest["artifacts"]["budget_ledger"] == {"path": budget_files[-1], "sha256": sha256_hex(files[budget_files[-1]])}
    assert manifest["artifacts"]["evidence_index"] is None
    assert (manifest["case_id"], manifest["state"], manifest["analysis_revision"]) == ("BUG-1", "INVESTIGATING_HYPOTHESES", 1)


def test_export_is_idempotent_and_incremental(exported):
    with Case.open(exported) as case:
        assert export_case(case).files_written == 0
        case.budget().reserve("H1", "a3", "source.read_context")
        report = export_case(case)
    assert report.files_written == 2  # the new event and the manifest
    assert not [p for p in tree(exported) if ".ledger-tmp-" in p]


def test_a_re_export_rewrites_exactly_the_files_that_differ_or_are_missing(exported):
    events = exported / "analysis" / "case" / "events"
    edited, removed = events / "00000002.json", events / "00000001.json"
    edited_bytes, removed_bytes = edited.read_bytes(), removed.read_bytes()
    edited.write_bytes(edited_bytes + b" ")
    removed.unlink()
    with Case.open(exported) as case:
        report = export_case(case)
        files = export_module.export_count(case)
    assert (report.files_written, report.files_unchanged) == (2, files - 2)
    assert (edited.read_bytes(), removed.read_bytes()) == (edited_bytes, removed_bytes)
    assert verify_case(exported).export_state == "current"


def test_a_temp_name_another_process_left_is_left_alone_and_the_file_still_written(tmp_path, monkeypatch):
    import itertools
    import ledger.package_tools.atomic_files as files_module

    monkeypatch.setattr(files_module, "_TEMP_NUMBERS", itertools.count(7))
    target = tmp_path / "out.json"
    taken = tmp_path / f".ledger-tmp-out.json.{os.getpid()}{files_module._TAG}7"
    taken.write_bytes(b"someone else's")
    files_module.write_atomic(target, b"{}", 0o640)
    assert target.read_bytes() == b"{}" and target.stat().st_mode & 0o777 == 0o640
    assert taken.read_bytes() == b"someone else's"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ledger-tmp-")] == [taken.name]


def test_a_file_is_the_same_as_bytes_only_when_it_is_a_regular_file_holding_exactly_them(tmp_path, monkeypatch):
    import errno
    from ledger.package_tools.atomic_files import same_bytes

    data = b'{"seq":1}'
    (tmp_path / "equal").write_bytes(data)
    (tmp_path / "edited").write_bytes(b'{"seq":2}')
    (tmp_path / "longer").write_bytes(data + b"\n")
    (tmp_path / "shorter").write_bytes(data[:-1])
    (tmp_path / "link").symlink_to(tmp_path / "equal")
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")  # opened without waiting for a writer
    found = {name: same_bytes(tmp_path / name, data)
             for name in ("equal", "edited", "longer", "shorter", "link", "folder", "fifo", "missing")}
    assert found == {"equal": True, "edited": False, "longer": False, "shorter": False, "link": False,
                     "folder": False, "fifo": False, "missing": False}
    assert same_bytes(str(tmp_path / "equal"), data, refused="it") is True

    def failing_read(fd, size):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "read", failing_read)
    assert same_bytes(tmp_path / "equal", data) is False  # a file that cannot be read is not the same
    with pytest.raises(LedgerError) as caught:
        same_bytes(tmp_path / "equal", data, refused="the exported file x")
    assert caught.value.code == STORAGE_ERROR and "cannot read the exported file x" in caught.value.message


def test_an_exported_file_the_system_fails_to_read_is_storage_error_for_verify(exported, monkeypatch):
    import errno

    real_read = os.read

    def failing_read(fd, size):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("00000002.json"):
            raise OSError(errno.EIO, "Input/output error")
        return real_read(fd, size)

    monkeypatch.setattr(os, "read", failing_read)
    with pytest.raises(LedgerError) as caught:
        verify_case(exported)
    assert caught.value.code == STORAGE_ERROR and "00000002.json" in caught.value.message


def _newest_event_file(path: Path) -> tuple[str, bytes]:
    conn = sqlite3.connect(path / "ledger.sqlite")
    stream, revision, stream_seq, body = conn.execute(
        "SELECT stream, revision, stream_seq, body FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    conn.close()
    return event_path(stream, revision, stream_seq), body.encode()


@pytest.mark.parametrize("covered", [False, True])
def test_an_exported_file_removed_while_verify_reads_is_absent_never_edited(exported, monkeypatch, covered):
    """An interrupted export removes the files it wrote: one verify listed before that is absent
    when compared. Past the manifest's head it is simply not exported yet; at or below it, missing."""
    import ledger.package_tools.verify_export as verify_module

    if covered:
        relative, _ = _newest_event_file(exported)  # the manifest's head
    else:
        with Case.open(exported) as case:  # an export that wrote the next event's file, then was stopped
            case.budget().reserve("H1", "a3", "source.read_context")
        relative, data = _newest_event_file(exported)
        (exported / relative).write_bytes(data)
    statement_of = verify_module.export_statement

    def removed_after_the_listing(conn, name, *args):  # the comparison's read of the events: after the listing
        if name == "events_for_export" and (exported / relative).exists():
            (exported / relative).unlink()
        return statement_of(conn, name, *args)

    monkeypatch.setattr(verify_module, "export_statement", removed_after_the_listing)
    if covered:
        assert "is missing" in assert_verify_fails_at(exported, _head_seq(exported)).message
    else:
        assert verify_case(exported).export_behind == 1


def _head_seq(path: Path) -> int:
    conn = sqlite3.connect(path / "ledger.sqlite")
    seq = conn.execute("SELECT max(seq) FROM events").fetchone()[0]
    conn.close()
    return seq


def test_an_interrupt_right_after_the_temp_file_is_made_leaves_no_temp_file(tmp_path, monkeypatch):
    import ledger.package_tools.atomic_files as files_module

    real_open = os.open

    def interrupted(path, flags, *rest):
        fd = real_open(path, flags, *rest)
        if flags & os.O_EXCL:
            os.close(fd)
            raise KeyboardInterrupt
        return fd

    monkeypatch.setattr(os, "open", interrupted)
    with pytest.raises(KeyboardInterrupt):
        files_module.write_atomic(tmp_path / "out.json", b"{}")
    assert list(tmp_path.iterdir()) == []


def test_an_export_that_cannot_write_a_folder_it_needs_leaves_the_tree_as_it_was(exported):
    """A file where a folder of the export belongs: the export fails with STORAGE_ERROR and removes
    every file it had written (here the budget events before it), whatever fails on the way."""
    shutil.rmtree(exported / "analysis" / "budgets")
    shutil.rmtree(exported / "analysis" / "evidence" / "content")
    (exported / "analysis" / "evidence" / "content").write_text("x\n")
    before = tree(exported)
    with Case.open(exported) as case, pytest.raises(LedgerError) as caught:
        export_case(case)
    assert caught.value.code == STORAGE_ERROR and "Not a directory" in caught.value.message
    assert tree(exported) == before
    assert not (exported / "analysis" / "budgets").exists()


def folders(root: Path) -> list[str]:
    return sorted(Path(d).relative_to(root).as_posix() for d, _, _ in os.walk(root))


def test_a_refused_export_removes_the_folders_it_made_and_no_folder_that_was_there_before(exported):
    """A failing export removed every empty folder above each file it had meant to write, up to analysis/:
    an empty folder of the package that was there before the export went with them."""
    for events in (exported / "analysis" / "case" / "events").iterdir():
        events.unlink()  # analysis/case/events/ stays, empty
    shutil.rmtree(exported / "analysis" / "budgets")  # the export makes these again, then removes them
    content = sorted((exported / "analysis" / "evidence" / "content").iterdir())[-1]
    content.unlink()
    content.mkdir()  # a folder where a file of the export belongs: the export fails there
    before, made_before = tree(exported), folders(exported)
    with Case.open(exported) as case, pytest.raises(LedgerError) as caught:
        export_case(case)
    assert caught.value.code == STORAGE_ERROR and "Is a directory" in caught.value.message
    assert (tree(exported), folders(exported)) == (before, made_before)
    assert "analysis/case/events" in made_before and "analysis/budgets" not in made_before


@pytest.mark.parametrize("fails_at", [1, 2, 3, 5])
def test_folders_an_export_made_before_a_failure_partway_through_making_them_are_removed(exported, monkeypatch,
                                                                                       fails_at):
    """Making analysis/budgets/0001/events at once (the disk running out of inodes after its first two
    folders) left those two behind: they were recorded only once the whole path was made."""
    import errno

    shutil.rmtree(exported / "analysis")
    before, made_before = tree(exported), folders(exported)
    real_mkdir, calls = os.mkdir, []

    def mkdir(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == fails_at:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    with Case.open(exported) as case, pytest.raises(LedgerError) as caught:
        export_case(case)
    monkeypatch.undo()
    assert caught.value.code == STORAGE_ERROR and "No space left on device" in caught.value.message
    assert (tree(exported), folders(exported)) == (before, made_before)
    assert len(calls) >= fails_at


@pytest.mark.parametrize("where", ["", "analysis", "analysis/case/events"])
def test_a_temp_folder_inside_the_package_is_refused_and_nothing_is_written(exported, monkeypatch, where):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(exported / where))
    before = tree(exported)
    with pytest.raises(LedgerError) as caught:
        verify_case(exported)
    assert caught.value.code == INVALID_ARGUMENT and "TMPDIR" in caught.value.message
    assert tree(exported) == before


def test_a_temp_folder_too_long_for_the_scratch_ledger_is_refused_by_verify_import_and_the_demo(
        exported, tmp_path, monkeypatch):
    """SQLite opens paths of at most 504 bytes: a temp folder whose scratch ledger would pass that is
    refused before anything is written, in one process as in two, never a traceback."""
    import tempfile

    from ledger import run_demo

    long = tmp_path / "t"
    while len(os.fsencode(long)) < 470:
        long = long / ("x" * 50)
    long.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    calls = [lambda: verify_case(exported), lambda: verify_case(exported, jobs=2),
             lambda: import_tree(exported, tmp_path / "copy"), lambda: run_demo(tmp_path / "demo", echo=lambda _: None)]
    for call in calls:
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == INVALID_ARGUMENT
        assert caught.value.message.startswith(f"the temp folder {long} is too long a path for ")
        assert "'s scratch ledger: its path would be " in caught.value.message
        assert "set TMPDIR to a shorter folder" in caught.value.message
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before
    done = run_cli("verify", str(exported), env={"TMPDIR": str(long)})
    assert done.returncode == 1 and done.stderr.startswith(b"error: INVALID_ARGUMENT: the temp folder ")
    assert b"Traceback" not in done.stderr


@pytest.mark.parametrize("in_place", [True, False])
def test_an_import_whose_temp_folder_is_inside_its_target_is_refused_before_anything_is_written(
        exported, tmp_path, monkeypatch, in_place):
    import tempfile

    source = tmp_path / "tree"
    shutil.copytree(exported, source)
    for name in os.listdir(source):
        if name.startswith("ledger.sqlite"):
            os.unlink(source / name)
    target = source if in_place else tmp_path / "copy"  # a new target must be empty: the temp folder itself
    temp = source / "tmp" if in_place else target
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    with pytest.raises(LedgerError) as caught:
        import_tree(source, None if in_place else target)
    assert caught.value.code == INVALID_ARGUMENT and "import" in caught.value.message
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before


def test_a_folder_named_like_an_export_temp_file_neither_stops_export_nor_is_removed(exported):
    folder = exported / ".ledger-tmp-manifest.json.123"
    folder.mkdir()
    with Case.open(exported) as case:
        case.budget().reserve("H1", "a3", "source.read_context")
        assert export_case(case).files_written == 2
    assert folder.is_dir() and verify_case(exported).export_state == "current"


def test_verify_passes_on_an_honest_case_and_names_the_head(exported):
    report = verify_case(exported)
    assert report.events == report.head_seq == 13 and report.contents == 2
    assert report.manifest_checked is True and report.exported_files_checked == 15


@pytest.mark.slow  # a real process: the slow lane (.ci/run) runs it
def test_an_import_that_cannot_write_its_new_ledger_names_the_package_it_writes_not_an_exported_file(tmp_path):
    """The disk full while the new ledger was written (here: a file size limit) was told as the fault of
    the exported event file being replayed then ("analysis/budgets/0001/events/00000012.json: the file
    system refused the ledger: ..."); nothing is left of the import."""
    import resource

    with start_case(tmp_path / "c", hypotheses=1, units=10_000) as case:
        budget = case.budget()
        budget.initialize()
        for n in range(12):
            budget.reserve("H1", f"a{n}", "source.read_context")
            budget.record_result("H1", f"a{n}", {"text": f"{n} " + "x" * 200_000})
            budget.settle("H1", f"a{n}", 50, "r")
        export_case(case)
    done = subprocess.run([sys.executable, "-m", "ledger_cli", "import", str(tmp_path / "c"), "--to",
                           str(tmp_path / "imp")], capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000)))
    assert done.returncode == 1
    assert re.fullmatch(rf"error: STORAGE_ERROR: cannot write the imported package {re.escape(str(tmp_path / 'imp'))} "
                        r"\(built first in \.imp\.importing-[0-9-]+ beside it\): the file system refused the ledger: "
                        r".+; nothing was written\n", done.stderr), done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["c"]


@pytest.mark.slow  # a few seconds: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("room", ["log", "commit"])
def test_an_import_whose_new_ledger_cannot_be_completed_on_a_full_disk_names_the_package_it_writes(tmp_path, room):
    """The disk full as the new ledger's log was folded into it left the file cut short, and the import
    named it so ("…ledger.sqlite is 7282688 bytes, but its own header says …: the file was cut short …
    Put the whole file back"), a file of its own making; with less room still (its transaction's commit)
    it named nothing. It names the package it writes."""
    from conftest import small_mount

    with start_case(tmp_path / "c", hypotheses=1, units=10**9) as case:
        budget = case.budget()
        budget.initialize()
        with case.batch():
            for n in range(1500 if room == "log" else 300):  # "commit": a transaction SQLite holds in memory
                budget.reserve("H1", f"a{n}", "source.read_context")
                budget.record_result("H1", f"a{n}", {"text": f"{n} " + "x" * 500})
                budget.settle("H1", f"a{n}", 50, "r")
        export_case(case)
    ledger_bytes = (tmp_path / "c" / "ledger.sqlite").stat().st_size
    # "log": the log fits, not the log and the file; "commit": not even the log, written as it commits
    undo = small_mount(tmp_path / "small", ledger_bytes * 3 // 2 if room == "log" else ledger_bytes // 2)
    try:
        with pytest.raises(LedgerError) as caught:
            import_tree(tmp_path / "c", to=tmp_path / "small" / "imp")
        assert caught.value.code == STORAGE_ERROR
        assert re.fullmatch(rf"cannot write the imported package {re.escape(str(tmp_path / 'small' / 'imp'))} "
                            r"\(built first in \.imp\.importing-[0-9-]+ beside it\): .+", caught.value.message)
        assert "cut short" not in caught.value.message
        assert list((tmp_path / "small").iterdir()) == []
    finally:
        undo()


def test_export_import_export_is_byte_identical(exported, tmp_path):
    before = tree(exported)
    report = import_tree(exported, tmp_path / "copy")
    assert report.head_seq == 13
    assert tree(tmp_path / "copy") == before

    def history(path):
        return [t for t in logical_dump(path / "ledger.sqlite") if t[0] != "schema_migrations"]

    assert history(tmp_path / "copy") == history(exported)


def test_import_onto_a_case_that_has_its_ledger_names_the_way_to_a_new_folder(exported):
    with pytest.raises(LedgerError) as refused:
        import_tree(exported)
    assert (refused.value.code, refused.value.message) == ("CASE_EXISTS", (
        f"{exported} already has a ledger.sqlite; import into a new folder ('ledger import DIR --to NEW_CASE', "
        "to= in Python), or, if an import of this folder placed it (one interrupted after placing it too), check "
        "it with 'ledger verify'"))


@pytest.mark.parametrize("swapped", ["link", "fifo"])
def test_import_refuses_a_manifest_swapped_for_a_link_or_pipe_as_verify_does_not_as_tampering(exported, tmp_path,
                                                                                             swapped):
    """A file swapped for a link is not an edited history: the CLI's first read of the manifest (for its
    progress bar) called it INTEGRITY_ERROR, where verify says INVALID_ARGUMENT naming the link."""
    source = tmp_path / "source"
    shutil.copytree(exported, source, symlinks=True)
    for name in ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"):
        (source / name).unlink(missing_ok=True)
    (source / "manifest.json").rename(source / "kept.json")
    if swapped == "link":
        (source / "manifest.json").symlink_to("kept.json")
    else:
        os.mkfifo(source / "manifest.json")
    done = run_cli("import", str(source), "--to", str(tmp_path / "new"))
    assert done.returncode == 1 and done.stderr.decode().startswith(
        "error: INVALID_ARGUMENT: manifest.json is a symbolic link where the case package keeps its own files"
        if swapped == "link" else "error: INVALID_ARGUMENT: import accepts only regular files: manifest.json is a pipe "
        "(FIFO); move it out of the folder, then run this again")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("own", ["ledger.sqlite", "manifest.json", "an exported event"])
def test_import_refuses_an_input_that_is_a_hard_link_to_the_packages_own_files(exported, tmp_path, own):
    """The router never reads such a link and the input identity counts a marker for it; import copied
    the file's bytes (the old ledger's, say) as an input of the new package, which a stored search had
    listed as skipped: the imported case then failed verify --strict."""
    source = tmp_path / "source"
    shutil.copytree(exported, source, symlinks=True)
    target = {"ledger.sqlite": source / "ledger.sqlite", "manifest.json": source / "manifest.json",
              "an exported event": next((source / "analysis").rglob("*.json"))}[own]
    (source / "sources").mkdir(exist_ok=True)
    os.link(target, source / "sources" / "copy.bin")
    done = run_cli("import", str(source), "--to", str(tmp_path / "new"))
    assert (done.returncode, done.stderr.decode()) == (1, (
        "error: INVALID_ARGUMENT: import accepts no hard link to the package's own files: sources/copy.bin is one (of "
        "ledger.sqlite, manifest.json or a file under analysis/); remove it, then run this again\n"))
    assert not (tmp_path / "new").exists()
    (source / "sources" / "copy.bin").unlink()
    assert run_cli("import", str(source), "--to", str(tmp_path / "new")).returncode == 0


@pytest.mark.slow  # over 0.5 s in the default run: the slow lane (.ci/run) runs it
def test_import_goes_into_any_folder_name_the_file_system_takes(exported, tmp_path):
    """Its hidden build folder keeps 40 characters of the target's name, so a long name (240
    bytes; 255 is the limit) does not become one too long to create."""
    for name in ("c" * 240, "é" * 120):
        assert import_tree(exported, tmp_path / name).head_seq == 13
        assert tree(tmp_path / name) == tree(exported)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["case", "c" * 240, "é" * 120])  # no build left


def test_import_restores_a_lost_ledger_in_place(exported):
    original = logical_dump(exported / "ledger.sqlite")
    (exported / "ledger.sqlite").unlink()
    with pytest.raises(LedgerError) as caught:
        Case.open(exported)
    assert caught.value.code == LEDGER_MISSING
    import_tree(exported)
    restored = logical_dump(exported / "ledger.sqlite")
    assert [t for t in restored if t[0] != "schema_migrations"] == [t for t in original if t[0] != "schema_migrations"]


def test_import_refuses_links_devices_and_non_empty_targets(exported, tmp_path):
    source = tmp_path / "src"
    shutil.copytree(exported, source)
    (source / "ledger.sqlite").unlink()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(LedgerError) as caught:
        import_tree(source, tmp_path / "busy")
    assert caught.value.code == CASE_EXISTS
    (source / "sources" / "escape").symlink_to("/etc")
    with pytest.raises(LedgerError) as caught:
        import_tree(source, tmp_path / "new")
    assert caught.value.code == INVALID_ARGUMENT
    assert not (tmp_path / "new" / "ledger.sqlite").exists()
    (source / "sources" / "escape").unlink()
    os.mkfifo(source / "sources" / "pipe")
    with pytest.raises(LedgerError) as caught:
        import_tree(source, tmp_path / "new")
    assert caught.value.code == INVALID_ARGUMENT


@pytest.mark.parametrize("nested", ["inner/ledger.sqlite", "sources/old/ledger.sqlite-wal", "data/ledger.sqlite-lock"])
def test_import_refuses_a_case_inside_the_package_as_init_does(exported, tmp_path, nested):
    """A ledger's file below the package's top would make a case inside the new one, which 'verify
    --all' and 'fleet export' never look at (init refuses to make one there): refused, nothing
    written, in place or to a new folder."""
    source = tmp_path / "src"
    shutil.copytree(exported, source)
    (source / "ledger.sqlite").unlink()
    (source / nested).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(exported / "ledger.sqlite", source / nested)
    for target in (tmp_path / "new", source):
        with pytest.raises(LedgerError) as caught:
            import_tree(source, target)
        assert caught.value.code == INVALID_ARGUMENT
        assert caught.value.message.startswith(f"import accepts no case inside the package: {nested} is another "
                                               "ledger's file")
    assert not (tmp_path / "new").exists() and not (source / "ledger.sqlite").exists()


def test_import_refuses_an_edited_or_incomplete_export_and_writes_nothing(exported, tmp_path):
    source = tmp_path / "src"
    shutil.copytree(exported, source)
    event = source / "analysis" / "budgets" / "0001" / "events" / "00000004.json"
    event.write_bytes(event.read_bytes().replace(b'"semantic_score":80', b'"semantic_score":90'))
    with pytest.raises(LedgerError) as caught:
        import_tree(source, tmp_path / "new")
    assert caught.value.code == INTEGRITY_ERROR and caught.value.details["seq"] == 7
    assert not (tmp_path / "new").exists()
    event.unlink()
    with pytest.raises(LedgerError) as caught:
        import_tree(source, tmp_path / "new2")
    assert caught.value.details["seq"] == 7


# --- tamper matrix, triggers dropped ---------------------------------------------------
def test_an_edited_event_body_is_caught_at_its_seq(exported):
    conn = unguarded(exported)
    conn.execute("UPDATE events SET body = replace(body, '\"semantic_score\":80', '\"semantic_score\":90') WHERE seq = 7")
    conn.commit()
    assert_verify_fails_at(exported, 7)


def test_an_edited_body_with_a_recomputed_hash_is_caught_by_the_chain(exported):
    conn = unguarded(exported)
    body = conn.execute("SELECT body FROM events WHERE seq = 7").fetchone()[0]
    forged = body.replace('"rewarded_units":3', '"rewarded_units":30')
    assert forged != body
    conn.execute("UPDATE events SET body = ?, sha256 = ? WHERE seq = 7", (forged, sha256_hex(forged.encode())))
    conn.commit()
    restore_triggers(conn)
    assert_verify_fails_at(exported, 7)


def _edited_past_every_trigger(path: Path, *statements: tuple[str, tuple]) -> None:
    """Run ``statements`` with every trigger dropped, then put every trigger back as it was."""
    conn = sqlite3.connect(path / "ledger.sqlite")
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    for sql, params in statements:
        assert conn.execute(sql, params).rowcount == 1
    for _, sql in triggers:
        conn.execute(sql)
    conn.commit()
    conn.close()


def _rechained_from(path: Path, seq: int, forged: str) -> list[tuple[str, tuple]]:
    """Statements giving event ``seq`` the body ``forged`` and every event from it on a recomputed
    hash and parent: a history rewritten whole, consistent with itself."""
    conn = sqlite3.connect(path / "ledger.sqlite")
    rows = conn.execute("SELECT seq, body, sha256 FROM events WHERE seq >= ? ORDER BY seq", (seq,)).fetchall()
    previous = conn.execute("SELECT sha256 FROM events WHERE seq = ?", (seq - 1,)).fetchone()[0]
    conn.close()
    statements = []
    for number, body, sha in rows:
        body = json.loads(forged if number == seq else body)
        body["parent_sha256"] = previous
        data = canonical_bytes(body).decode()
        previous = sha256_hex(data.encode())
        statements.append(("UPDATE events SET body = ?, sha256 = ?, parent_sha256 = ? WHERE seq = ?",
                           (data, previous, body["parent_sha256"], number)))
    return statements


@pytest.mark.parametrize("edit", ["body", "body and hash", "content", "history rewritten whole",
                                  "body, hash and next parent column", "placed on another", "placed outside",
                                  "two swap files"])
@pytest.mark.sampled(every=4)
def test_export_never_writes_an_edited_event_or_content_over_its_file(exported, edit):
    """An exported file may be the one copy of the original bytes: export checks every file it is to
    write before writing any, and refuses (INTEGRITY_ERROR, nothing written) an event that does not
    hash to its sha256 or follow the event before it, a content that does not hash to its name, and
    a ledger whose event at the exported manifest's head is another one."""
    conn = sqlite3.connect(exported / "ledger.sqlite")
    body = conn.execute("SELECT body FROM events WHERE seq = 7").fetchone()[0]
    sha, content = conn.execute("SELECT sha256, body FROM contents ORDER BY seq LIMIT 1").fetchone()
    placed = dict(conn.execute("SELECT seq, stream_seq FROM events WHERE seq IN (7, 8) AND stream = 'budget'"))
    conn.close()
    assert placed[8] == placed[7] + 1
    forged = body.replace('"semantic_score":80', '"semantic_score":90')
    assert forged != body
    edits = {"body": [("UPDATE events SET body = ? WHERE seq = 7", (forged,))],
             "body and hash": [("UPDATE events SET body = ?, sha256 = ? WHERE seq = 7",
                                (forged, sha256_hex(forged.encode())))],
             "content": [("UPDATE contents SET body = ? WHERE sha256 = ?", (content.replace("x", "z"), sha))],
             "history rewritten whole": _rechained_from(exported, 7, forged),
             "body, hash and next parent column": [  # the columns patched to chain, the next body left
                 ("UPDATE events SET body = ?, sha256 = ? WHERE seq = 7", (forged, sha256_hex(forged.encode()))),
                 ("UPDATE events SET parent_sha256 = ? WHERE seq = 8", (sha256_hex(forged.encode()),))],
             "placed on another": [("UPDATE events SET stream_seq = (SELECT stream_seq FROM events WHERE seq = 7) "
                                    "WHERE seq = (SELECT MAX(seq) FROM events WHERE stream = 'budget')", ())],
             "placed outside": [("INSERT INTO evidence_files (seq, path) VALUES (7, ?)",
                                 ("analysis/evidence/../../../outside.json",))],
             "two swap files": [("UPDATE events SET stream_seq = -1 WHERE seq = 7", ()),  # 7 and 8 trade files
                                ("UPDATE events SET stream_seq = stream_seq - 1 WHERE seq = 8", ()),
                                ("UPDATE events SET stream_seq = ? WHERE seq = 7", (placed[8],))]}[edit]
    _edited_past_every_trigger(exported, *edits)
    if edit in ("body", "content"):
        shutil.rmtree(exported / "analysis" / "budgets")  # files to make again: none is made
    before = tree(exported)
    with pytest.raises(LedgerError) as caught:
        export_case(exported)
    assert caught.value.code == INTEGRITY_ERROR
    assert caught.value.message.startswith({
        "body": "seq 7: the ledger's event does not hash to its sha256",
        "body and hash": "seq 8: the ledger's event does not follow event 7",
        "content": f"the ledger's content {sha} does not hash to its name",
        "history rewritten whole": f"seq {verify_head(exported)}: the ledger's event is not the one the exported "
                                   "manifest.json names as its head",
        "body, hash and next parent column": "seq 8: the ledger's event does not follow event 7",
        "placed on another": f"seq {verify_head(exported)}: the ledger places the event at 'analysis/budgets/",
        "placed outside": "seq 7: the ledger places the event at 'analysis/evidence/../../../outside.json', which is "
                          "no plain path under analysis/",
        "two swap files": "analysis/budgets/0001/events/"}[edit])
    if edit == "two swap files":
        assert "holds an event of this case that the ledger would replace with other bytes" in caught.value.message
    assert tree(exported) == before
    done = run_cli("export", str(exported))
    assert done.returncode == 1 and done.stderr.startswith(b"error: INTEGRITY_ERROR: ") and tree(exported) == before


def verify_head(path: Path) -> int:
    return read_only_query(path, "SELECT MAX(seq) FROM events")[1][0][0]


def test_a_deleted_event_is_caught_at_the_gap(exported):
    conn = unguarded(exported)
    conn.execute("DELETE FROM events WHERE seq = 9")
    conn.commit()
    assert_verify_fails_at(exported, 9)


def test_reordered_events_are_caught(exported):
    conn = unguarded(exported)
    rows = conn.execute("SELECT seq, body, sha256 FROM events WHERE seq IN (8, 9)").fetchall()
    conn.execute("UPDATE events SET sha256 = 'x' || sha256 WHERE seq IN (8, 9)")
    conn.execute("UPDATE events SET body = ?, sha256 = ? WHERE seq = 8", (rows[1][1], rows[1][2]))
    conn.execute("UPDATE events SET body = ?, sha256 = ? WHERE seq = 9", (rows[0][1], rows[0][2]))
    conn.commit()
    assert_verify_fails_at(exported, 8)


def test_a_duplicated_event_is_caught(exported):
    conn = unguarded(exported)
    conn.execute("INSERT INTO events (seq, type, revision, stream, stream_seq, created_at, sha256, parent_sha256, body) "
                 "SELECT 14, type, revision, stream, stream_seq + 100, created_at, 'f' || substr(sha256, 2), "
                 "(SELECT sha256 FROM events WHERE seq = 13), body FROM events WHERE seq = 13")
    conn.commit()
    assert_verify_fails_at(exported, 14)


def test_a_wrong_parent_is_caught(exported):
    conn = unguarded(exported)
    conn.execute("UPDATE events SET parent_sha256 = ? WHERE seq = 5", ("0" * 64,))
    conn.commit()
    assert_verify_fails_at(exported, 5)


def test_a_truncated_tail_after_export_is_caught_against_the_manifest(exported):
    conn = unguarded(exported)
    conn.execute("DELETE FROM events WHERE seq > 11")
    for table in ("closings", "terminations", "reservations"):
        conn.execute(f"DELETE FROM {table} WHERE seq > 11")
    conn.commit()
    restore_triggers(conn)
    error = assert_verify_fails_at(exported, 12)
    assert "truncated" in error.message


def test_a_truncated_tail_whose_helper_rows_stayed_is_named_as_truncation(exported):
    """The helper rows of the lost events were reported first ('holds a row the replay does not derive'),
    which hid that the ledger ends before its export."""
    conn = unguarded(exported)
    conn.execute("DELETE FROM events WHERE seq > 11")
    conn.commit()
    restore_triggers(conn)
    error = assert_verify_fails_at(exported, 12)
    assert error.message.startswith("seq 12: the ledger ends at seq 11 but its export reached seq 13")


@pytest.mark.parametrize("table, statement, seq", [
    ("reservations", "UPDATE reservations SET cost_units = 1 WHERE action_id = 'a1'", 5),
    ("closings", "UPDATE closings SET reward_units = 2 WHERE action_id = 'a1'", 7),
    ("results", "UPDATE results SET novelty_score = 0 WHERE action_id = 'a2'", 9),
    ("terminations", "DELETE FROM terminations", 13),
    ("accounts", "UPDATE accounts SET initial_units = 1000 WHERE hypothesis_id = 'H2'", 4),
    ("lifecycle", "UPDATE lifecycle SET state = 'CLOSED' WHERE seq = 3", 3),
    ("events", "UPDATE events SET type = 'budget.settled' WHERE seq = 5", 5),
])
@pytest.mark.sampled(every=4)
def test_an_edited_helper_row_is_caught_at_its_seq(exported, table, statement, seq):
    conn = unguarded(exported)
    conn.execute(statement)
    conn.commit()
    restore_triggers(conn)
    assert_verify_fails_at(exported, seq)


@pytest.mark.parametrize("table, statement", [
    ("lifecycle", "UPDATE lifecycle SET state = 'CLOSED', revision = 7 WHERE seq = (SELECT max(seq) FROM lifecycle)"),
    ("case_identity", "UPDATE case_identity SET case_id = 'OTHER', package_id = 'other'"),
])
def test_the_manifest_names_the_case_and_its_state_from_the_events_never_from_helper_rows(exported, table,
                                                                                        statement):
    """Export publishes the events; the manifest beside them says what those events say, so an edited
    helper row is not published (verify still names it)."""
    published = json.loads((exported / "manifest.json").read_bytes())
    seq = sqlite3.connect(exported / "ledger.sqlite").execute(f"SELECT max(seq) FROM {table}").fetchone()[0]
    conn = unguarded(exported)
    conn.execute(statement)
    conn.commit()
    restore_triggers(conn)
    (exported / "manifest.json").unlink()
    export_case(exported)
    assert json.loads((exported / "manifest.json").read_bytes()) == published
    assert_verify_fails_at(exported, seq)


def test_a_rewritten_history_whose_state_event_lacks_a_state_is_integrity_error_and_writes_no_manifest(exported):
    """A history rewritten whole (every hash recomputed) whose newest state-setting event holds a state
    of another type: export refuses it without a traceback, and no manifest.json is written."""
    conn = sqlite3.connect(exported / "ledger.sqlite")
    seq, body = conn.execute("SELECT e.seq, e.body FROM events AS e JOIN lifecycle AS l ON l.seq = e.seq "
                             "ORDER BY e.seq DESC LIMIT 1").fetchone()
    conn.close()
    _edited_past_every_trigger(exported, *_rechained_from(exported, seq, json.dumps({**json.loads(body),
                                                                                      "state": 5})))
    shutil.rmtree(exported / "analysis")
    (exported / "manifest.json").unlink()
    with pytest.raises(LedgerError) as caught:
        export_case(exported)
    assert caught.value.code == INTEGRITY_ERROR
    assert "does not hold state, revision as the ledger writes them" in caught.value.message
    assert not (exported / "manifest.json").exists()


def test_a_changed_byte_in_stored_content_is_caught(exported):
    conn = unguarded(exported)
    conn.execute("UPDATE contents SET body = replace(body, 'x', 'z')")
    conn.commit()
    restore_triggers(conn)
    assert_verify_fails_at(exported, 6)


def test_a_swapped_content_blob_is_caught(exported):
    conn = unguarded(exported)
    rows = conn.execute("SELECT sha256, body FROM contents ORDER BY seq").fetchall()
    conn.execute("UPDATE contents SET body = ? WHERE sha256 = ?", (rows[1][1], rows[0][0]))
    conn.commit()
    restore_triggers(conn)
    assert_verify_fails_at(exported, 6)


def test_a_redefined_view_is_caught(exported):
    conn = sqlite3.connect(exported / "ledger.sqlite")
    conn.execute("DROP VIEW balances")
    conn.execute("CREATE VIEW balances AS SELECT 1 AS revision")
    conn.commit()
    error = assert_verify_fails_at(exported, None)
    assert "balances" in error.message


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_dropped_trigger_alone_is_reported(exported):
    conn = sqlite3.connect(exported / "ledger.sqlite")
    conn.execute("DROP TRIGGER events_no_delete")
    conn.commit()
    error = assert_verify_fails_at(exported, None)
    assert "events_no_delete" in error.message


def test_an_edited_exported_file_or_manifest_pointer_is_caught(exported):
    path = exported / "analysis" / "case" / "events" / "00000002.json"
    original = path.read_bytes()
    path.write_bytes(original.replace(b"hypothesis 1", b"hypothesis X"))
    assert_verify_fails_at(exported, 2)
    path.write_bytes(original)
    manifest = json.loads((exported / "manifest.json").read_bytes())
    manifest["artifacts"]["budget_ledger"]["path"] = "analysis/budgets/0001/events/00000001.json"
    (exported / "manifest.json").write_bytes(canonical_bytes(manifest))
    assert_verify_fails_at(exported, None)


def test_a_changed_source_breaks_the_binding_of_the_event_that_cited_it(exported):
    (exported / "sources" / "app.py").write_text("changed\n")
    assert_verify_fails_at(exported, 6)



@pytest.mark.parametrize("unreadable", ["manifest.json", "analysis/case/events/00000001.json", "content",
                                        "analysis/case/events", "analysis", "sources/app.py", "sources"])
@pytest.mark.sampled(every=4)
def test_a_file_verify_or_import_may_not_read_is_storage_error_never_integrity_error(exported, tmp_path,
                                                                                       monkeypatch, unreadable):
    """A mode change is no tampering: a file or folder of the package this user may not read is
    STORAGE_ERROR naming it, never a missing, edited or changed file (INTEGRITY_ERROR), nor a raw OSError."""
    if unreadable == "content":
        unreadable = next(p.relative_to(exported).as_posix()
                          for p in (exported / "analysis" / "evidence" / "content").iterdir())
    deny_reading(monkeypatch, exported / unreadable)
    for attempt in ("verify", "import"):
        with pytest.raises(LedgerError) as caught:
            verify_case(exported) if attempt == "verify" else import_tree(exported, tmp_path / "copy")
        assert caught.value.code == STORAGE_ERROR, (attempt, caught.value)
        assert "Permission denied" in caught.value.message, (attempt, caught.value)
    assert not (tmp_path / "copy").exists() and not list(tmp_path.glob(".copy.importing-*"))



@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_an_export_another_process_writes_while_verify_reads_is_not_taken_for_truncation(exported):
    """verify replays a snapshot of the ledger; a writer that appends and exports meanwhile leaves
    exported files and a manifest past that snapshot: the ledger moved on, it was not truncated."""
    written = []

    def write_and_export(_events: int) -> None:
        if not written:  # once, after verify's read of the ledger began
            written.append(run_cli("budget", "grant", str(exported), "H1", "5", "--reason", "more",
                                   "--grant-id", "g-late"))
            written.append(run_cli("export", str(exported)))
    report = verify_case(exported, write_and_export)
    assert [r.returncode for r in written] == [0, 0], [r.stderr for r in written]
    assert report.export_state == "current" and report.export_behind == 0
    assert verify_case(exported).head_seq == report.head_seq + 1  # the next verify sees the new event
    assert run_cli("verify", str(exported), "--strict").returncode == 0


def test_verify_does_not_write_into_the_package(exported):
    before = tree(exported)
    dump = logical_dump(exported / "ledger.sqlite")
    verify_case(exported)
    assert tree(exported) == before and logical_dump(exported / "ledger.sqlite") == dump


# --- foreign indexes that can block the ledger's writes ------------------------------------------
BLOCKING_INDEXES = {
    "an index on an expression": "CREATE INDEX my_expr ON events(json(CASE WHEN seq > 5 THEN 'x' ELSE '1' END))",
    "a partial index (WHERE)": "CREATE INDEX my_expr ON events(seq) WHERE json(CASE WHEN seq > 5 THEN 'x' ELSE '1' END)",
    "a UNIQUE index": "CREATE UNIQUE INDEX my_expr ON events(type)",
    "an expression among plain columns": "CREATE INDEX my_expr ON events(seq, lower(type))",
}


# --- messages: altered tables, interrupted init, schema_migrations rows ---------------------------
def _tamper(case, *statements: str) -> None:
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


def _tamper_past_trigger(path: Path, trigger: str, statement: str) -> None:
    """Run ``statement`` past one dropped guard trigger of migration 008, then put the trigger back."""
    from ledger.storage.sqlfiles import migrations

    conn = sqlite3.connect(path / "ledger.sqlite")
    conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute(statement)
    restore = [s for v, _, statements in migrations() if v == 8 for s in statements
               if f"CREATE TRIGGER {trigger} " in s]
    conn.execute(restore[0])
    conn.commit()
    conn.close()


def _unguard_migrations(where: str) -> tuple[str, ...]:
    return ("DROP TRIGGER schema_migrations_no_delete", f"DELETE FROM schema_migrations {where}",
            "CREATE TRIGGER schema_migrations_no_delete BEFORE DELETE ON schema_migrations\n"
            "BEGIN\n    SELECT RAISE(ABORT, 'append-only: schema_migrations rows cannot be deleted');\nEND")


@pytest.mark.parametrize("edit", ["drop", "delete"])
def test_a_ledger_whose_migration_records_were_removed_is_edited_for_every_reader(budget, case, tmp_path, edit):
    """A dropped schema_migrations table (or all its rows deleted) is an edit of the file, not an init
    still running: 'ledger balances', 'ledger sql' and fleet export said it holds no case, "run init
    again", where opening the case and verify named the edit."""
    from ledger import export_fleet

    budget.reserve("H1", "q1", "source.read_context")
    case.close()
    with sqlite3.connect(case.path / "ledger.sqlite") as conn:
        for statement in (["DROP TABLE schema_migrations"] if edit == "drop" else _unguard_migrations("")):
            conn.execute(statement)
    conn.close()
    said = ("the ledger holds closings_by_account, made by migration 001_schema, but " + (
        "its schema_migrations table, which records the migrations run, is gone (a dropped table)" if edit == "drop"
        else "schema_migrations has no row for version 1 (a deleted row; the next write would run it again)")
        + "; the file was edited outside case-ledger")
    for read in (lambda: read_only_query(case.path, "SELECT * FROM balances"), lambda: Case.open(case.path)):
        with pytest.raises(LedgerError) as caught:
            read()
        assert caught.value.code == INTEGRITY_ERROR and caught.value.message.endswith(said), caught.value.message
    [failed] = export_fleet([case.path], tmp_path / "fleet").failed
    assert failed["error"]["code"] == INTEGRITY_ERROR and said.split(";")[0] in failed["error"]["message"]
    done = run_cli("balances", str(case.path))
    assert done.returncode == 1 and done.stderr.decode().startswith("error: INTEGRITY_ERROR: ")
    assert said in done.stderr.decode()


@pytest.mark.slow  # two verifies, over half a second: the slow lane (.ci/run) runs it
def test_the_newest_row_of_a_migration_that_changed_rows_only_reads_as_a_ledger_not_yet_upgraded(budget, case):
    """Migration 010 makes no object of its own (it adds rows and remakes a trigger as it was): with
    its row deleted the file is a version-9 ledger, which verify passes and the next writer upgrades
    again, adding no row (docs/errors.md, LEDGER_MISSING)."""
    budget.reserve("H1", "q1", "source.read_context")
    case.close()
    before = read_only_query(case.path, "SELECT * FROM terminations")[1]
    with sqlite3.connect(case.path / "ledger.sqlite") as conn:
        for statement in _unguard_migrations("WHERE version = 10"):
            conn.execute(statement)
    conn.close()
    assert read_only_query(case.path, "SELECT max(version) FROM schema_migrations")[1] == [(9,)]
    verify_case(case.path)
    with Case.open(case.path) as reopened:  # a writer: upgraded again
        reopened.budget().record_result("H1", "q1", {"found": 1})
    assert read_only_query(case.path, "SELECT max(version) FROM schema_migrations")[1] == [(10,)]
    assert read_only_query(case.path, "SELECT * FROM terminations")[1] == before
    verify_case(case.path)


#: A Python that reads and writes file names as ASCII (a name's other bytes as surrogate escapes).
NAMES_NOT_UTF8 = {**os.environ, "PYTHONUTF8": "0", "LC_ALL": "C"}
_VERIFY_IN_PYTHON = """import sys
from ledger import LedgerError, Router, verify_case
from pathlib import Path
from ledger.ground.paths import check_name_encoding, require_utf8
from ledger.model.source_refs import resolve_source_refs
router = Router(sys.argv[1])
for call in (lambda: verify_case(sys.argv[1]), lambda: resolve_source_refs(router.root, ["sources/\\xfc.py"]),
             lambda: router.read_context({"path": "sources/\\xfc.py", "start_line": 1, "end_line": 1}),
             lambda: router.find_text({"text": "return"}), lambda: require_utf8(Path("d\\xefr"), "never said")):
    try:
        call()
    except LedgerError as exc:
        print(exc.code, exc.details)
try:
    check_name_encoding("sources/\\udcff.py")
except LedgerError as exc:
    print(exc.message.split(" is not ASCII")[0])
"""


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_case_with_non_ascii_file_names_verifies_where_python_does_not_take_file_names_as_utf8(tmp_path):
    """Verified under a Latin-1 locale, a cited sources/ü.py "no longer resolves: does not exist"
    (INTEGRITY_ERROR), and under PYTHONUTF8=0 LC_ALL=C it was "not valid UTF-8": where Python takes
    file names in another encoding, such a name is refused as STORAGE_ERROR (never as an edit),
    saying to run in UTF-8 mode, which verifies it."""
    root = make_package(tmp_path / "cäse")
    (root / "sources" / "ü.py").write_text("def add(a, b):\n    return a - b\n", encoding="utf-8")
    case = start_case(root)
    budget = case.budget()
    budget.initialize()
    budget.reserve("H1", "q1", "source.read_context")
    budget.record_result("H1", "q1", {"f": 1}, source_refs=["sources/ü.py"])
    budget.run_tool("H2", "q2", "source.read_context", {"path": "sources/ü.py", "start_line": 1, "end_line": 2})
    budget.settle("H2", "q2", 50, "read")
    budget.run_tool("H2", "q3", "source.find_text", {"text": "return", "path_glob": "sources/*"})
    case.close()
    export_case(root)
    done = run_cli("verify", str(root), env=NAMES_NOT_UTF8)
    assert done.returncode == 1 and done.stderr.startswith(b"error: STORAGE_ERROR: the package file name "), done
    assert b"run Python in UTF-8 mode (PYTHONUTF8=1 in the environment, as in 'PYTHONUTF8=1 ledger verify" \
        in done.stderr
    done = run_cli("verify", str(root), env={**NAMES_NOT_UTF8, "PYTHONUTF8": "1"})
    assert (done.returncode, done.stdout[:4], done.stderr) == (0, b"ok: ", b""), done.stderr
    library = subprocess.run([sys.executable, "-c", _VERIFY_IN_PYTHON, str(root)], capture_output=True,
                             env=NAMES_NOT_UTF8, timeout=300)
    assert library.stdout == b"STORAGE_ERROR {'file_name_encoding': 'ascii'}\n" * 5 + (
        b"the package file name 'sources/\\\\xff.py'\n"), library.stderr  # undecodable bytes as \\xNN


def test_a_case_dated_in_the_past_reports_no_future_events(budget, case):
    report = verify_case(case.path)
    assert (report.future_events, report.future_max_lead_ms) == (0, 0)
    assert not any("ahead of this machine's clock" in line for line in report.notes())


@pytest.mark.parametrize("why, sql", sorted(BLOCKING_INDEXES.items()))
def test_verify_refuses_a_foreign_index_that_can_block_the_ledgers_writes(budget, case, why, sql):
    """Foreign objects: only plain column-list indexes on ledger tables are left alone."""
    budget.reserve("H1", "q1", "source.read_context")
    with sqlite3.connect(case.path / "ledger.sqlite") as conn:
        conn.execute(sql)
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and caught.value.details["object"] == "my_expr"
    expected = "an index on an expression" if why.startswith("an expression") else why
    assert f"schema object my_expr is not the ledger's own: {expected} on the ledger's events" in caught.value.message


def test_a_write_refused_because_of_a_foreign_index_names_it(budget, case):
    budget.reserve("H1", "q1", "source.read_context")
    with sqlite3.connect(case.path / "ledger.sqlite") as conn:
        conn.execute(BLOCKING_INDEXES["an index on an expression"])
    conn.close()
    with pytest.raises(LedgerError) as caught:
        budget.reserve("H2", "q2", "source.read_context")
    assert caught.value.code == INTEGRITY_ERROR and "malformed JSON" in caught.value.message
    assert "index my_expr on events" in caught.value.message
    assert caught.value.details["foreign_objects"] == ["index my_expr on events"]


def test_a_plain_foreign_index_on_columns_is_left_alone(budget, case):
    with sqlite3.connect(case.path / "ledger.sqlite") as conn:
        conn.execute("CREATE INDEX my_plain ON events(type, created_at COLLATE NOCASE)")
    conn.close()
    budget.reserve("H1", "q1", "source.read_context")
    report = verify_case(case.path)
    assert {"type": "index", "name": "my_plain", "table": "events"} in report.foreign_objects


def _index_definition_swapped(path: Path, name: str, built: str) -> str:
    """Rebuild index ``name`` as ``built`` (its entries follow that definition), then write its old
    definition text back into the schema: its entries no longer match what its definition says."""
    conn = sqlite3.connect(path / "ledger.sqlite")
    original = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
    conn.execute(f"DROP INDEX {name}")
    conn.execute(built)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (original, name))
    conn.commit()
    conn.close()
    return original


@pytest.mark.parametrize("name, built, ", [
    ("my_idx", "CREATE INDEX my_idx ON events(stream)"),  # a foreign index, said to be on (type)
    ("events_by_operation", "CREATE UNIQUE INDEX events_by_operation ON events(operation_key || 'x')"),
])
def test_an_index_whose_entries_disagree_with_its_definition_fails_verify(exported, name, built):
    """Such an index makes queries answer wrongly (a count by type reads 0; an operation's replay no
    longer finds its key) while its definition reads as shipped: verify compares every index with
    its table, with or without --strict."""
    if name == "my_idx":
        with sqlite3.connect(exported / "ledger.sqlite") as conn:
            conn.execute("CREATE INDEX my_idx ON events(type)")
        conn.close()
    _index_definition_swapped(exported, name, built)
    with pytest.raises(LedgerError) as caught:
        verify_case(exported)
    assert caught.value.code == INTEGRITY_ERROR and caught.value.details["check"] == "integrity_check"
    assert name in caught.value.message


# --- verify --strict without a (complete) export -------------------------------------------------
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_strict_verify_fails_without_an_export_and_plain_verify_says_not_exported(budget, case):
    """verify --strict: no manifest.json is not a current export."""
    case.close()
    report = verify_case(case.path)
    assert (report.export_state, report.export_behind, report.manifest_checked) == ("none", None, False)
    assert "not exported: there is no manifest.json; run 'ledger export'" in report.notes()
    plain = run_cli("verify", str(case.path), "--json")
    assert plain.returncode == 0 and json.loads(plain.stdout)["export_state"] == "none"
    strict = run_cli("verify", str(case.path), "--strict")
    assert strict.returncode == 1
    assert b"error: INTEGRITY_ERROR: the case was never exported (no manifest.json) (--strict)" in strict.stderr
    assert strict.stdout.startswith(b"FAILED --strict: 4 events") and b"ok" not in strict.stdout.split(b"\n")[0]
    as_json = run_cli("verify", str(case.path), "--strict", "--json")
    result = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and result["ok"] is False and result["export_state"] == "none"
    assert result["error"]["code"] == "INTEGRITY_ERROR" and "never exported" in result["error"]["message"]


def test_importing_a_case_never_exported_says_to_export_it_first(budget, case, tmp_path):
    case.close()
    with pytest.raises(LedgerError) as caught:
        import_tree(case.path, tmp_path / "copy")
    assert caught.value.code == INVALID_ARGUMENT
    assert caught.value.message == (f"{case.path} has no manifest.json: not an exported case (a case with its ledger "
                                    "is exported with 'ledger export CASE'; import rebuilds a ledger from that export)")
    assert not (tmp_path / "copy").exists()


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_verify_json_prints_ok_false_and_the_error_when_the_case_fails(budget, case):
    """With --json, stdout says the case failed whatever failed it (tampering as a --strict export
    state), and stderr has the error line every command prints."""
    budget.reserve("H1", "q1", "source.read_context")
    case.close()
    conn = unguarded(case.path)
    conn.execute("UPDATE reservations SET cost_units = 1")
    conn.commit()
    conn.close()
    done = run_cli("verify", str(case.path), "--json")
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["ok"] is False and result["error"]["code"] == "INTEGRITY_ERROR"
    assert done.stderr.decode().splitlines()[-1] == f"error: INTEGRITY_ERROR: {result['error']['message']}"
    missing = run_cli("verify", str(case.path / "nowhere"), "--json")
    assert missing.returncode == 1 and json.loads(missing.stdout)["error"]["code"] == "LEDGER_MISSING"


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_strict_verify_fails_on_an_export_interrupted_before_its_manifest(budget, case):
    export_case(case)
    case.close()
    (case.path / "manifest.json").unlink()  # what an export killed before writing it leaves
    report = verify_case(case.path)
    assert report.export_state == "partial" and report.exported_files_checked == 4
    assert any(line.startswith("partial export: 4 exported file(s) but no manifest.json") for line in report.notes())
    strict = run_cli("verify", str(case.path), "--strict")
    assert strict.returncode == 1 and b"error: INTEGRITY_ERROR: the export is partial" in strict.stderr
    with Case.open(case.path) as reopened:
        assert export_case(reopened).manifest["head"]["seq"] == 4
    again = run_cli("verify", str(case.path), "--strict", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["export_state"] == "current"


def test_verify_names_a_ledger_table_with_an_added_column(budget, case):
    """Schema check: a changed ledger table is named before any row comparison."""
    _tamper(case, "ALTER TABLE events ADD COLUMN note TEXT")
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and caught.value.details["object"] == "events"
    assert caught.value.message == ("the ledger's table events is altered: its definition differs from the schema's "
                                    "(any change to its SQL, a comment or blanks included)")


def test_deleting_every_schema_migrations_row_is_integrity_error_not_ledger_missing(budget, case):
    """schema_migrations rows must match the schema the file holds."""
    _tamper(case, *_unguard_migrations(""))
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR
    assert "made by migration 001_schema, but schema_migrations has no row for version 1" in caught.value.message
    with pytest.raises(LedgerError) as opened:
        Case.open(case.path)
    assert opened.value.code == INTEGRITY_ERROR and "no row for version 1" in opened.value.message


def test_deleting_the_last_schema_migrations_rows_fails_verify_and_the_next_open_migrates_nothing(budget, case):
    # 010 makes no object of its own (it adds rows and puts a guard back unchanged): deleting its
    # row alone leaves a ledger of version 9, whose terminations rows verify then checks as such
    last = 9
    _tamper(case, *_unguard_migrations(f"WHERE version >= {last}"))
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and f"no row for version {last}" in caught.value.message
    with pytest.raises(LedgerError) as opened:
        Case.open(case.path)
    assert opened.value.code == INTEGRITY_ERROR and "nothing was migrated" in opened.value.message
    with sqlite3.connect(case.path / "ledger.sqlite") as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] < last
    conn.close()


def test_an_edited_schema_migrations_name_is_named_with_the_migration_it_should_be(budget, case):
    _tamper(case, "DROP TRIGGER schema_migrations_no_update", "UPDATE schema_migrations SET name = 'x' WHERE version = 2",
            "CREATE TRIGGER schema_migrations_no_update BEFORE UPDATE ON schema_migrations\nBEGIN\n    SELECT "
            "RAISE(ABORT, 'append-only: schema_migrations rows cannot be updated');\nEND")
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR
    assert "schema_migrations names version 2 'x', but that migration is 'views' (an edited row)" in caught.value.message


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_manifest_that_disagrees_with_the_ledger_is_refused_by_verify_and_import(budget, case, tmp_path):
    budget.reserve("H1", "a1", "source.read_context")
    export_case(case)
    manifest = json.loads((case.path / "manifest.json").read_bytes())
    for field, value in (("state", "CLOSED"), ("analysis_revision", 7), ("package_generation", 3)):
        (case.path / "manifest.json").write_bytes(canonical_bytes({**manifest, field: value}))
        with pytest.raises(LedgerError) as caught:
            verify_case(case.path)
        assert caught.value.code == INTEGRITY_ERROR and field in caught.value.message
        with pytest.raises(LedgerError):
            import_tree(case.path, tmp_path / f"copy-{field}")
        assert not (tmp_path / f"copy-{field}").exists()
    (case.path / "manifest.json").write_bytes(canonical_bytes(
        {**manifest, "artifacts": {**manifest["artifacts"], "budget_ledger": None}}))
    with pytest.raises(LedgerError):
        verify_case(case.path)


def test_truncation_is_caught_from_exported_events_even_without_a_manifest(budget, case):
    budget.reserve("H1", "a1", "source.read_context")
    budget.fail("H1", "a1", "x")
    export_case(case)
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    conn.execute("DROP TRIGGER events_no_delete")
    conn.execute("DROP TRIGGER closings_no_delete")
    conn.execute("DELETE FROM closings WHERE seq = 6")
    conn.execute("DELETE FROM events WHERE seq = 6")
    conn.commit()
    conn.close()
    (case.path / "manifest.json").unlink()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.details["seq"] == 6


def test_an_event_file_past_the_head_that_does_not_continue_the_history_is_no_truncation(budget, case):
    """A file claiming the ledger's next seq with another parent was added or copied in (here: an
    earlier event with its seq edited): verify names it as no part of the export, never accusing
    the ledger of a rollback."""
    budget.reserve("H1", "a1", "source.read_context")
    export_case(case)
    head = case.query("SELECT seq, stream, revision, stream_seq FROM events ORDER BY seq DESC LIMIT 1")[0]
    case.close()
    folder = case.path / "analysis" / "budgets" / f"{head['revision']:04d}" / "events"
    body = json.loads((folder / f"{head['stream_seq']:08d}.json").read_bytes())
    stray = folder / f"{head['stream_seq'] + 1:08d}.json"
    stray.write_text(json.dumps({**body, "seq": head["seq"] + 1}), encoding="utf-8")
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and "is not part of the export" in caught.value.message, caught.value
    assert "rolled-back" not in caught.value.message and str(stray.relative_to(case.path)) in caught.value.message


def test_an_analysis_that_is_a_file_is_named_by_verify_export_and_import(budget, case, tmp_path):
    """``analysis`` replaced by a regular file: every command that reads or writes the export names it
    (verify said the first event file was missing, export failed writing under it, import that the
    export had no event 1)."""
    export_case(case)
    case.close()
    shutil.rmtree(case.path / "analysis")
    (case.path / "analysis").write_text("x", encoding="utf-8")
    for run in (lambda: verify_case(case.path), lambda: export_case(case.path),
                lambda: import_tree(case.path, tmp_path / "copy")):
        with pytest.raises(LedgerError) as caught:
            run()
        assert caught.value.code == INVALID_ARGUMENT, caught.value
        assert caught.value.message.startswith("analysis is not a folder: the export's folder is the one")
    assert not (tmp_path / "copy").exists() and (case.path / "analysis").read_text(encoding="utf-8") == "x"


def test_a_new_case_is_not_made_beside_an_analysis_that_is_a_file_or_a_link(tmp_path):
    """init where ``analysis`` is a file names it as no folder (it called it an export's tree, without its
    manifest); where it is a link, the advice is a real folder (it said a folder or file, which the
    check of a file then refused)."""
    (tmp_path / "file").mkdir()
    (tmp_path / "file" / "analysis").write_text("x", encoding="utf-8")
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "analysis").symlink_to("nowhere")
    with pytest.raises(LedgerError) as caught:
        Case.create(tmp_path / "file", "C-1")
    assert caught.value.code == INVALID_ARGUMENT and caught.value.message.startswith("analysis is not a folder")
    with pytest.raises(LedgerError) as caught:
        Case.create(tmp_path / "link", "C-1")
    assert caught.value.code == INVALID_ARGUMENT and caught.value.message.endswith("(replace it with a real folder)")
    assert sorted(p.name for p in (tmp_path / "file").iterdir()) == ["analysis"]


def test_another_packages_event_file_past_the_head_is_no_truncation(budget, case, tmp_path):
    """An event file of another case copied in, whose seq lies past the head (a gap from it): it
    continues no history of this case, so verify and export name it as no part of the export, never
    accusing the ledger of a rollback (a gap counted as the lost history whatever package it named)."""
    budget.reserve("H1", "a1", "source.read_context")
    export_case(case)
    head = case.query("SELECT seq, stream, revision, stream_seq FROM events ORDER BY seq DESC LIMIT 1")[0]
    case.close()
    folder = case.path / "analysis" / "budgets" / f"{head['revision']:04d}" / "events"
    body = json.loads((folder / f"{head['stream_seq']:08d}.json").read_bytes())
    stray = folder / f"{head['stream_seq'] + 3:08d}.json"
    stray.write_text(json.dumps({**body, "seq": head["seq"] + 3, "package_id": "another-package"}), encoding="utf-8")
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and "is not part of the export" in caught.value.message
    assert "rolled-back" not in caught.value.message, caught.value
    report = export_case(case.path)  # exported, saying what verify will refuse
    assert report.stray is not None and stray.name in report.stray and "is not part of the export" in report.stray
    stray.write_text("[1, 2]", encoding="utf-8")  # an event file's name holding no event at all
    report = export_case(case.path)
    assert report.stray is not None and stray.name in report.stray


@pytest.mark.parametrize("keep_next", [True, False])
def test_a_ledger_that_lost_its_last_events_is_truncation_with_or_without_the_next_file(budget, case, tmp_path,
                                                                                        keep_next):
    """A ledger put back from an older copy under a newer export (no manifest): the exported file of
    its next event names its last event as its parent; when that file is gone too, the later files
    still show the ledger ended early."""
    budget.reserve("H1", "a0", "source.read_context")
    head = case.query("SELECT max(seq) AS seq FROM events")[0]["seq"]
    case.close()
    shutil.copyfile(case.path / "ledger.sqlite", tmp_path / "older.sqlite")
    with Case.open(case.path) as opened:
        later = opened.budget()
        later.fail("H1", "a0", "x")
        later.reserve("H1", "a1", "source.read_context")
        export_case(opened)
    (case.path / "ledger.sqlite").write_bytes((tmp_path / "older.sqlite").read_bytes())
    (case.path / "manifest.json").unlink()
    if not keep_next:
        next(p for p in (case.path / "analysis").rglob("*.json")
             if json.loads(p.read_bytes()).get("seq") == head + 1).unlink()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.details["seq"] == head + 1, caught.value
    assert f"but the ledger ends at seq {head}" in caught.value.message, caught.value


@pytest.mark.parametrize("manifest", ["removed", "garbage", "oversized"])
def test_export_refuses_a_ledger_that_lost_its_last_events_whatever_its_manifest(budget, case, tmp_path, manifest):
    """A ledger put back from an older copy under a newer export whose manifest is gone or unreadable:
    export refuses as verify does (it wrote a manifest at the older head, hiding the rollback, and
    called the lost events' files misplaced), writing nothing."""
    budget.reserve("H1", "a0", "source.read_context")
    head = case.query("SELECT max(seq) AS seq FROM events")[0]["seq"]
    case.close()
    shutil.copyfile(case.path / "ledger.sqlite", tmp_path / "older.sqlite")
    with Case.open(case.path) as opened:
        later = opened.budget()
        later.fail("H1", "a0", "x")
        later.reserve("H1", "a1", "source.read_context")
        export_case(opened)
    (case.path / "ledger.sqlite").write_bytes((tmp_path / "older.sqlite").read_bytes())
    written = {"removed": None, "garbage": b"not json", "oversized": b" " * 70_000 + b"{}"}[manifest]
    (case.path / "manifest.json").unlink()
    if written is not None:
        (case.path / "manifest.json").write_bytes(written)
    def files() -> dict[Path, bytes]:
        return {path: path.read_bytes() for path in case.path.rglob("*") if path.is_file()
                and "ledger.sqlite" not in path.name}

    before = files()
    with pytest.raises(LedgerError) as caught:
        export_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR
    assert f"holds event {head + 1} but the ledger ends at seq {head} (truncated or rolled-back ledger" \
        in caught.value.message, caught.value
    with pytest.raises(LedgerError) as caught:  # verify names the manifest itself first, when there is one
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR
    assert ("manifest.json" if written else f"but the ledger ends at seq {head}") in caught.value.message
    assert files() == before


def test_a_ledger_rolled_back_and_continued_otherwise_is_named_rolled_back(budget, case, tmp_path):
    """The ledger and its manifest put back from older copies, then one other event appended: verify
    names the first event that differs from its exported file, and says a ledger put back from an
    older copy may be why (it said "not part of the export")."""
    budget.reserve("H1", "a0", "source.read_context")
    export_case(case)
    head = case.query("SELECT max(seq) AS seq FROM events")[0]["seq"]
    case.close()
    shutil.copyfile(case.path / "ledger.sqlite", tmp_path / "older.sqlite")
    shutil.copyfile(case.path / "manifest.json", tmp_path / "older.json")
    with Case.open(case.path) as opened:
        later = opened.budget()
        later.fail("H1", "a0", "x")
        later.reserve("H1", "a1", "source.read_context")
        export_case(opened)
    (case.path / "ledger.sqlite").write_bytes((tmp_path / "older.sqlite").read_bytes())
    (case.path / "manifest.json").write_bytes((tmp_path / "older.json").read_bytes())
    with Case.open(case.path) as opened:
        opened.budget().fail("H1", "a0", "another ending")  # seq head + 1, unlike the exported one
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    # named at the first event that differs: the rolled-back ledger's own next event
    assert caught.value.code == INTEGRITY_ERROR and caught.value.details["seq"] == head + 1
    assert f"holds another event {head + 1} after the same event {head} (edited, or another history exported " \
        "from there: a ledger put back from an older copy" in caught.value.message, caught.value


def test_a_ledger_rolled_back_and_continued_as_far_otherwise_is_named_another_history(budget, case, tmp_path):
    """Put back from an older copy and continued by as many other events: the exported file of the
    next event differs with the same parent; verify says it may be another history and how to keep
    it, not only that 'ledger export' writes over it."""
    budget.reserve("H1", "a0", "source.read_context")
    export_case(case)
    head = case.query("SELECT max(seq) AS seq FROM events")[0]["seq"]
    case.close()
    shutil.copyfile(case.path / "ledger.sqlite", tmp_path / "older.sqlite")
    shutil.copyfile(case.path / "manifest.json", tmp_path / "older.json")
    with Case.open(case.path) as opened:
        opened.budget().fail("H1", "a0", "x")
        export_case(opened)
    (case.path / "ledger.sqlite").write_bytes((tmp_path / "older.sqlite").read_bytes())
    (case.path / "manifest.json").write_bytes((tmp_path / "older.json").read_bytes())
    with Case.open(case.path) as opened:
        opened.budget().fail("H1", "a0", "another ending")
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.details["seq"] == head + 1 and f"differs from the ledger: it holds another event {head + 1} " \
        f"after the same event {head} (edited, or another history exported from there" in caught.value.message, caught.value


def test_an_exported_event_reformatted_is_named_other_bytes_not_another_history(budget, case):
    """The same event re-indented holds the same value in other bytes: no other history after the
    event before it (it was named one)."""
    export_case(case)
    case.close()
    path = case.path / "analysis" / "case" / "events" / "00000001.json"
    path.write_text(json.dumps(json.loads(path.read_bytes()), indent=2))
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.details["seq"] == 1 and "another event" not in caught.value.message
    assert "analysis/case/events/00000001.json differs from the ledger: other bytes, edited or reformatted " \
        "('ledger export' writes it again from the ledger: keep the differing file first if it is evidence)" \
        in caught.value.message


def test_an_edited_exported_content_is_named_by_its_path_in_the_package(exported):
    content = next(p for p in sorted((exported / "analysis" / "evidence" / "content").iterdir())
                   if b'"x"' in p.read_bytes())  # the first result's (a folder lists in no set order)
    content.write_bytes(content.read_bytes().replace(b'"x"', b'"z"'))
    error = assert_verify_fails_at(exported, 6)
    assert error.message.startswith(f"seq 6: exported content analysis/evidence/content/{content.name} differs from the "
                                    "ledger: other bytes"), error.message


def test_verify_names_the_smallest_bad_seq_across_tables(budget, case):
    for n in range(3):
        budget.reserve("H1", f"a{n}", "source.read_context")
        budget.fail("H1", f"a{n}", "x")
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    conn.execute("DROP TRIGGER reservations_no_update")
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute("UPDATE reservations SET cost_units = 1 WHERE seq = 5")
    conn.execute("UPDATE events SET created_at = 'x' WHERE seq = 9")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.details["seq"] == 5


def test_a_malformed_newest_budget_event_is_an_integrity_error_not_a_crash(budget, case):
    budget.reserve("H1", "a1", "source.read_context")
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    head_seq, head_sha = conn.execute("SELECT seq, sha256 FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    conn.execute("INSERT INTO events (seq, type, revision, stream, stream_seq, created_at, sha256, parent_sha256, body) "
                 "VALUES (?, 'budget.reserved', 1, 'budget', 99, 'x', ?, ?, '{}')", (head_seq + 1, "f" * 64, head_sha))
    conn.commit()
    conn.close()
    with Case.open(case.path) as opened:
        with pytest.raises(LedgerError) as caught:
            opened.budget().reserve("H2", "b1", "source.read_context")
    assert caught.value.code == INTEGRITY_ERROR


@pytest.mark.parametrize("name", ["zz", "sqlite_stat1", "sqlite_sequence"])
def test_verify_refuses_a_foreign_trigger_on_a_ledger_table(case, name):
    """Whatever its name: one of SQLite's own tables' names (set with writable_schema) hid it."""
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    conn.execute("CREATE TRIGGER zz AFTER INSERT ON events WHEN NEW.type = 'budget.rejected' "
                 "BEGIN SELECT RAISE(ABORT, 'busy, try later'); END")
    if name != "zz":
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_master SET name = ?, sql = replace(sql, 'TRIGGER zz', 'TRIGGER ' || ?) "
                     "WHERE name = 'zz'", (name, name))
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR
    assert f"schema object {name} is not the ledger's own: a trigger on the ledger's events" in caught.value.message


@pytest.mark.parametrize("ddl, kind", [
    ("CREATE TABLE notes (x)", "table"),
    ("CREATE VIEW spent AS SELECT 1", "view"),
    ("CREATE INDEX extra ON events (type)", "index"),
], ids=["table", "view", "index"])
def test_verify_reports_a_users_own_table_view_or_index_as_foreign(case, ddl, kind):
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    conn.execute(ddl)
    conn.commit()
    conn.close()
    assert [o["type"] for o in verify_case(case.path).foreign_objects] == [kind]


@pytest.mark.parametrize("ddl, function", [
    ("CREATE TABLE json_each (x)", "json_each"),
    ("CREATE VIEW json_each AS SELECT 1 AS value", "json_each"),
    ("CREATE TABLE pragma_index_list (x); CREATE INDEX mine ON events (type)", "pragma_index_list"),  # verify's
], ids=["table-json_each", "view-json_each", "table-pragma_index_list"])
def test_a_users_table_hiding_a_function_the_ledgers_sql_calls_is_named_with_what_to_do(case, ddl, function):
    """SQLite resolves such a name to the user's object, so the ledger's own views cannot run: every
    read names the object and says to rename or drop it (it was a bare "'json_each' is not a function")."""
    from ledger.storage.readonly import readonly_query

    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    conn.executescript(ddl)  # (verify reads the shape of a user's index on a ledger table with pragma_index_list)
    conn.commit()
    conn.close()
    reads = [lambda: verify_case(case.path)] + ([lambda: Case.open(case.path).balances(),
                                                 lambda: readonly_query(case.path / "ledger.sqlite",
                                                                        "SELECT COUNT(*) FROM balances")]
                                                if "json" in function else [])
    for read in reads:  # the last as `ledger sql` and Case.query read (it was "query refused: … not a function")
        with pytest.raises(LedgerError) as caught:
            read()
        assert caught.value.code == INTEGRITY_ERROR and caught.value.details["object"] == function
        assert (f"a table or view named {function} in the ledger file hides SQLite's table-valued function "
                f"{function}") in caught.value.message and "rename or drop it" in caught.value.message


@pytest.mark.parametrize("sql", ["WITH json_each(x) AS (SELECT 1) SELECT * FROM json_each('[1]')",
                                 "WITH pragma_table_info(x) AS (SELECT 1) SELECT * FROM pragma_table_info('events')"])
def test_a_query_whose_own_name_hides_a_function_is_the_querys_error_not_the_files(case, sql):
    """A CTE the statement names like a table-valued function hides it in that statement only: the
    query's own error (INVALID_ARGUMENT), never a damaged ledger (no table or view of that name is in it)."""
    from ledger.storage.readonly import readonly_query

    for read in (lambda: readonly_query(case.path / "ledger.sqlite", sql), lambda: case.query(sql)):
        with pytest.raises(LedgerError) as caught:
            read()
        assert caught.value.code == "INVALID_ARGUMENT" and "is not a function" in caught.value.message


def test_statistics_of_a_table_renamed_since_analyze_are_named_stale_not_forged(case):
    """SQLite keeps a renamed table's statistics under its old name: listed as naming nothing in the file
    (stale, or not ANALYZE's), never as statistics that are not counts."""
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    conn.execute("CREATE TABLE n (a, b)")
    conn.executemany("INSERT INTO n VALUES (?, ?)", [(i, i) for i in range(5)])
    conn.execute("CREATE INDEX ni ON n (a)")
    conn.execute("ANALYZE")
    conn.execute("ALTER TABLE n RENAME TO n2")
    conn.commit()
    conn.close()
    assert [(o["type"], o["name"]) for o in verify_case(case.path).foreign_objects] == [
        ("table", "n2"), ("index", "ni"), (NAMING_NOTHING, "sqlite_stat1")]


def test_verify_accepts_sqlites_own_statistics_tables(case):
    """ANALYZE's statistics, of the ledger's tables and of a user's own (a WITHOUT ROWID table with an
    index, whose rows name the table as its own index) with a hint a user may add, are no foreign object."""
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    conn.execute("CREATE TABLE mine (k TEXT PRIMARY KEY, v) WITHOUT ROWID")
    conn.execute("CREATE INDEX mine_v ON mine (v)")
    conn.executemany("INSERT INTO mine VALUES (?, ?)", [(str(i), i % 3) for i in range(20)])
    conn.execute("ANALYZE")
    conn.execute("UPDATE sqlite_stat1 SET stat = stat || ' unordered' WHERE idx = 'mine_v'")
    conn.commit()
    assert conn.execute("SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'events'").fetchone()[0] > 0
    conn.close()
    report = verify_case(case.path)
    assert report.head_seq > 0
    assert [(o["type"], o["name"]) for o in report.foreign_objects] == [("table", "mine"), ("index", "mine_v")]


NAMING_NOTHING = "statistics naming nothing in the file (stale, or not ANALYZE's)"
NOT_COUNTS = "statistics that are not counts (not ANALYZE's)"


@pytest.mark.parametrize("rows, reported", [
    ("INSERT INTO sqlite_stat1 VALUES ('hidden words', NULL, '1')", NAMING_NOTHING),
    ("INSERT INTO sqlite_stat1 VALUES ('events', 'no_such_index', '5 1')", NAMING_NOTHING),
    ("INSERT INTO sqlite_stat1 VALUES ('events', NULL, 'any text at all')", NOT_COUNTS),
    ("UPDATE sqlite_stat1 SET stat = stat || ' and a note' WHERE tbl = 'events'", NOT_COUNTS),
    ("INSERT INTO sqlite_sequence VALUES ('H1 was granted 1000 units', 1000)", "AUTOINCREMENT counters"),
], ids=["unknown-table", "unknown-index", "not-counts", "words-after-counts", "autoincrement-counters"])
def test_verify_reports_sqlites_own_tables_holding_what_sqlite_did_not_write(case, rows, reported):
    """Text a user puts into SQLite's own tables (statistics that name nothing in the file or are not
    counts; AUTOINCREMENT counters, when the ledger has no such table) is listed, never passed over."""
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    conn.execute("CREATE TABLE q (id INTEGER PRIMARY KEY AUTOINCREMENT)")  # makes sqlite_sequence
    conn.execute("DROP TABLE q")
    conn.execute("ANALYZE")
    conn.execute(rows)
    conn.commit()
    conn.close()
    foreign = [(o["type"], o["name"]) for o in verify_case(case.path).foreign_objects]
    assert foreign == [("AUTOINCREMENT counters", "sqlite_sequence")] + (
        [(reported, "sqlite_stat1")] if reported != "AUTOINCREMENT counters" else [])


def test_verify_accepts_migrations_applied_out_of_time_order(case):
    """A case migrated on a machine whose clock was behind the one that made it is no edited ledger."""
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite", isolation_level=None)
    guard = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'schema_migrations_no_update'").fetchone()[0]
    conn.executescript("BEGIN; DROP TRIGGER schema_migrations_no_update; UPDATE schema_migrations SET applied_at = "
                       f"'1999-01-01T00:00:00.000000Z' WHERE version = 2; {guard}; COMMIT;")
    conn.close()
    assert verify_case(case.path).foreign_objects == []


@pytest.mark.parametrize("applied_at", ["2031-02-30 forged by mallory", "2026-02-03T10:00:00Z",
                                        "2026-02-30T10:00:00.000000Z", 17])
def test_verify_refuses_a_migration_applied_at_no_time_the_ledger_writes(case, applied_at):
    """Every row of schema_migrations is checked, its time too: in the form the ledger writes and a real
    date (its order is not: a case migrated on a machine whose clock is behind is no fault)."""
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite", isolation_level=None)
    guard = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'schema_migrations_no_update'").fetchone()[0]
    conn.executescript(f"BEGIN; DROP TRIGGER schema_migrations_no_update; UPDATE schema_migrations SET applied_at = "
                       f"{applied_at!r} WHERE version = 1; UPDATE schema_migrations SET applied_at = "
                       f"'1999-01-01T00:00:00.000000Z' WHERE version = 2; {guard}; COMMIT;")
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR
    assert caught.value.message.startswith(f"schema_migrations records migration 1 as applied at '{applied_at}', "
                                           "which is not a time as the ledger writes them")


def test_export_files_get_the_umask_mode_and_import_keeps_input_modes(budget, case, tmp_path):
    old = os.umask(0o022)
    try:
        (case.path / "sources" / "run.sh").write_text("echo\n", encoding="utf-8")
        (case.path / "sources" / "run.sh").chmod(0o755)
        (case.path / "sources" / "notes.txt").chmod(0o444)
        budget.reserve("H1", "q1", "source.read_context")
        export_case(case)
        assert (case.path / "manifest.json").stat().st_mode & 0o777 == 0o644
        assert {p.stat().st_mode & 0o777 for p in (case.path / "analysis").rglob("*.json")} == {0o644}
        case.close()
        import_tree(case.path, tmp_path / "copy")
        assert (tmp_path / "copy" / "sources" / "run.sh").stat().st_mode & 0o777 == 0o755
        assert (tmp_path / "copy" / "sources" / "notes.txt").stat().st_mode & 0o777 == 0o444
    finally:
        os.umask(old)


def test_a_reformatted_manifest_is_refused_by_verify_and_import(budget, case, tmp_path):
    export_case(case)
    case.close()
    manifest = case.path / "manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_bytes()), indent=1), encoding="utf-8")
    for call in (lambda: verify_case(case.path), lambda: import_tree(case.path, tmp_path / "copy")):
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == INTEGRITY_ERROR and "canonical form" in caught.value.message


def test_a_trigger_slipped_in_under_a_sqlite_name_is_foreign(case):
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("INSERT INTO sqlite_master VALUES ('trigger', 'sqlite_evil', 'events', 0, "
                 "'CREATE TRIGGER sqlite_evil BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, ''evil''); END')")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and "sqlite_evil" in caught.value.message


def test_verify_names_a_cited_source_file_edited_since_it_was_cited(budget, case):
    (case.path / "sources" / "cited.py").write_text("x = 1\n")
    budget.reserve("H1", "q1", "source.read_context")
    budget.record_result("H1", "q1", {"finding": "x is 1"}, source_refs=["sources/app.py", "sources/cited.py"])
    (case.path / "sources" / "cited.py").write_text("x = 2\n")
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR
    assert "sources/cited.py" in caught.value.message and "sources/app.py" not in caught.value.message
    assert caught.value.details["paths"] == ["sources/cited.py"]
    (case.path / "sources" / "cited.py").unlink()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert "sources/cited.py" in caught.value.message


@pytest.mark.parametrize("cited, checked_out", [(b"x = 1\ny = 2\n", b"x = 1\r\ny = 2\r\n"),
                                                (b"x = 1\r\ny = 2\r\n", b"x = 1\ny = 2\n")])
def test_a_cited_source_whose_line_endings_alone_changed_is_named_as_such(budget, case, cited, checked_out):
    """git's core.autocrlf rewrites line endings on checkout: the binding still fails, and says why."""
    (case.path / "sources" / "cited.py").write_bytes(cited)
    budget.reserve("H1", "q1", "source.read_context")
    budget.record_result("H1", "q1", {"finding": "x is 1"}, source_refs=["sources/cited.py"])
    (case.path / "sources" / "cited.py").write_bytes(checked_out)
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and caught.value.message.endswith(
        "the cited source file(s) sources/cited.py differ from the sha256 the event recorded (only the line "
        "endings of sources/cited.py changed (CRLF for LF or the reverse, as git's core.autocrlf does on "
        "checkout): restore the bytes as cited)")
    (case.path / "sources" / "cited.py").write_bytes(checked_out.replace(b"2", b"3"))
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.message.endswith("recorded (edited since it was cited?)")


@pytest.mark.parametrize("data", [b"a\r\nb\n", b"\r", b"x\r\r\n\n", b"", b"z" * (2 ** 20 - 1) + b"\r\n" + b"y\r",
                                  b"z" * (2 ** 20 - 1) + b"\r" + b"q\n", b"\r\n" * (2 ** 19 + 7)])
def test_the_line_endings_hint_streams_the_cited_file_with_the_same_digests_as_reading_it_whole(tmp_path, data):
    """Read whole, a large cited file took its size in memory three times over (and a link or a FIFO
    swapped in was followed or waited on): now streamed in blocks, a CRLF split between two blocks
    included."""
    (tmp_path / "sources").mkdir()
    (tmp_path / "sources" / "f.txt").write_bytes(data)
    as_lf = data.replace(b"\r\n", b"\n")
    assert line_ending_digests(tmp_path, "sources/f.txt") == (
        hashlib.sha256(as_lf).hexdigest(), hashlib.sha256(as_lf.replace(b"\n", b"\r\n")).hexdigest())


def test_the_line_endings_hint_holds_no_more_than_a_block_of_the_file_and_reads_only_a_regular_file_inside(tmp_path):
    (tmp_path / "sources").mkdir()
    (tmp_path / "sources" / "big.txt").write_bytes(b"line\r\n" * (8 * 2 ** 20 // 6))
    tracemalloc.start()
    try:
        assert line_ending_digests(tmp_path, "sources/big.txt") is not None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 * 2 ** 20
    os.mkfifo(tmp_path / "sources" / "fifo")  # opened without waiting for a writer, then refused
    (tmp_path.parent / "outside.txt").write_bytes(b"x\n")
    (tmp_path / "sources" / "out").symlink_to(tmp_path.parent / "outside.txt")
    assert [line_ending_digests(tmp_path, ref) for ref in ("sources/fifo", "sources/out", "sources/none", "a\0b")] == [
        None] * 4


@pytest.mark.parametrize("log", ["ledger.sqlite-wal", "ledger.sqlite-journal"])
def test_a_log_beside_a_linked_ledger_where_sqlite_never_reads_it_fails_verify(case, tmp_path, log):
    """A ledger kept elsewhere through a link: a log left beside the link (here an edit of the
    hypotheses, written with the guards dropped) passed verify, SQLite reading the file's own log
    only, and was applied by the first copy that followed the link."""
    case.close()
    real = tmp_path / "kept" / "real.sqlite"
    real.parent.mkdir()
    shutil.move(case.path / "ledger.sqlite", real)
    (case.path / "ledger.sqlite").symlink_to(real)
    assert verify_case(case.path).events > 0  # the link alone is fine
    forged = tmp_path / "forged"
    forged.mkdir()
    shutil.copy(real, forged / "ledger.sqlite")
    conn = sqlite3.connect(forged / "ledger.sqlite", isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    for name, in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f'DROP TRIGGER "{name}"')
    conn.execute("UPDATE hypotheses SET statement = 'forged'")
    held = forged / "ledger.sqlite-wal"
    shutil.copy(held, case.path / log)  # the log, before the connection closes and checkpoints it
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and caught.value.message.startswith(
        f"{log} lies beside the link ledger.sqlite (to {real}), where SQLite never reads it")
    # the reads took SQLite's log files for the real file's: none is left beside it
    assert read_only_query(case.path, "SELECT count(*) FROM events")[1][0][0] > 0
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.sqlite"]
    (case.path / log).unlink()
    assert verify_case(case.path).events > 0
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.sqlite"]


# --- physical damage: SQLite's own check --------------------------------------------------------
def _flip_bit(path: Path, index: str, offset_in_page: int) -> int:
    """Flip the lowest bit of one byte of ``index``'s root page (offsets past 4095 count from the
    page's end) in a checkpointed ledger; returns the page number."""
    ledger = path / "ledger.sqlite"
    with sqlite3.connect(ledger) as conn:
        page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (index,)).fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(ledger.read_bytes())
    at = (page - 1) * size + (offset_in_page if offset_in_page < size else 2 * size - offset_in_page)
    data[at] ^= 0x01
    ledger.write_bytes(bytes(data))
    return page


def test_a_flipped_bit_in_an_index_entry_fails_verify_with_what_sqlite_names(exported):
    """One bit of an index entry's row pointer: SQLite's quick_check cannot see it; integrity_check,
    which verify runs with or without --strict, says "row 1 missing from index …"."""
    _flip_bit(exported, "sqlite_autoindex_reservations_1", 4096 + 3)  # the first entry's rowid byte
    for strict in (False, True):
        with pytest.raises(LedgerError) as caught:
            verify_case(exported, strict=strict)
        assert caught.value.code == INTEGRITY_ERROR and caught.value.details["check"] == "integrity_check"
        assert "missing from index sqlite_autoindex_reservations_1" in caught.value.message
        assert caught.value.message.endswith("(a copy made by cp while a writer was at work can be torn so: copy a "
                                             "live case's ledger with sqlite3's .backup)")
    ran = run_cli("verify", str(exported))
    assert ran.returncode == 1 and b"error: INTEGRITY_ERROR: SQLite's integrity_check" in ran.stderr
    assert b"missing from index sqlite_autoindex_reservations_1" in ran.stderr and b"Traceback" not in ran.stderr


@pytest.mark.parametrize("offset", [3, 4, 5, 8])
def test_a_flipped_bit_in_an_index_page_header_fails_verify_naming_the_page(exported, offset):
    page = _flip_bit(exported, "sqlite_autoindex_reservations_1", offset)
    with pytest.raises(LedgerError) as caught:
        verify_case(exported)
    assert caught.value.code == INTEGRITY_ERROR and caught.value.details["check"] == "integrity_check"
    assert f"page {page}" in caught.value.message
    assert len(caught.value.message) < 1000  # the first few problems, not hundreds of lines


def test_a_read_of_a_damaged_ledger_says_damage_not_a_refused_query(exported):
    """``ledger sql`` and ``Case.query`` read a page SQLite finds malformed: the ledger is damaged
    (INTEGRITY_ERROR), which is not the user's statement's fault (INVALID_ARGUMENT)."""
    from ledger.storage.readonly import readonly_query

    _flip_bit(exported, "sqlite_autoindex_reservations_1", 0)  # the page type: no kind of page at all
    query = "SELECT count(*) FROM reservations INDEXED BY sqlite_autoindex_reservations_1"
    with pytest.raises(LedgerError) as caught:
        readonly_query(exported / "ledger.sqlite", query)
    assert caught.value.code == INTEGRITY_ERROR and "malformed" in caught.value.message
    with Case.open(exported) as case, pytest.raises(LedgerError) as caught:
        case.query(query)
    assert caught.value.code == INTEGRITY_ERROR and "malformed" in caught.value.message
    ran = run_cli("sql", str(exported), query)
    assert ran.returncode == 1 and ran.stderr.startswith(b"error: INTEGRITY_ERROR: ")


@pytest.mark.parametrize("text", [b"REFERENCES events (seq)", b'"reason":"timeout"'])
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_flipped_bit_that_leaves_text_not_utf8_is_integrity_error_never_a_traceback(exported, text):
    """A high bit flipped in a schema statement or in an event's body: SQLite finds no damage to the
    pages, and the text is no longer UTF-8 (the sqlite3 module cannot decode it, nor SQLite's
    message quoting it)."""
    ledger = exported / "ledger.sqlite"
    data = bytearray(ledger.read_bytes())
    at = data.index(text) + 1
    data[at] ^= 0x80
    ledger.write_bytes(bytes(data))
    for strict in (False, True):
        with pytest.raises(LedgerError) as caught:
            verify_case(exported, strict=strict)
        assert caught.value.code == INTEGRITY_ERROR, caught.value
    ran = run_cli("verify", str(exported))
    assert ran.returncode == 1 and ran.stderr.startswith(b"error: INTEGRITY_ERROR: ") and b"Traceback" not in ran.stderr
    for command in (["balances"], ["state"], ["events"]):
        ran = run_cli(*command, str(exported))
        assert b"Traceback" not in ran.stderr and ran.returncode in (0, 1), (command, ran.stderr[-300:])


def test_verify_strict_is_a_flag():
    with pytest.raises(LedgerError) as caught:
        verify_case(".", strict="yes")
    assert caught.value.code == INVALID_ARGUMENT


@pytest.mark.parametrize("args", [["verify"], ["sql", "SELECT COUNT(*) FROM events"], ["balances"], ["state"],
                                  ["events"], ["actions", "--json"]])
@pytest.mark.sampled(every=4)
def test_reading_commands_leave_no_write_ahead_log_files_beside_the_ledger(exported, args):
    """docs/files.md: -wal and -shm exist only while a connection is open; verify and sql read through
    a read-only connection, which cannot remove them, so they fold them away as a writer's close does."""
    from conftest import run_cli

    leftovers = lambda: sorted(p.name for p in exported.iterdir() if p.name.endswith(("-wal", "-shm")))
    assert leftovers() == []
    run = run_cli(args[0], str(exported), *args[1:])
    assert run.returncode == 0, run.stderr
    assert leftovers() == []


def test_verify_and_read_only_queries_in_python_leave_no_write_ahead_log_files(exported):
    leftovers = lambda: sorted(p.name for p in exported.iterdir() if p.name.endswith(("-wal", "-shm")))
    assert verify_case(exported).events > 0 and leftovers() == []
    assert read_only_query(exported, "SELECT COUNT(*) FROM balances")[1][0][0] == 2 and leftovers() == []


@pytest.fixture(scope="module")
def case_of_700_events(tmp_path_factory):
    """A case of 700-odd events: more than one batch of verify's and a query's reads of the ledger."""
    root = tmp_path_factory.mktemp("long") / "case"
    case = Case.create(root, "LONG")
    case.open_revision([{"statement": "a"}], 100_000)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget(BudgetConfig.example())
    budget.initialize()
    with case.batch():
        for n in range(230):
            budget.reserve("H1", f"q{n}", "source.read_context")
            budget.record_result("H1", f"q{n}", {"finding": f"observation {n}"})
            budget.settle("H1", f"q{n}", 50, "relevant")
    case.close()
    return root


@pytest.mark.parametrize("read, raised", [("verify", KeyboardInterrupt), ("query", KeyboardInterrupt),
                                          ("verify", LedgerError("INTEGRITY_ERROR", "a refusal inside the replay")),
                                          ("scratch", KeyboardInterrupt)],
                         ids=["verify-ctrl-c", "query-ctrl-c", "verify-refusal", "verify-making-its-scratch-ctrl-c"])
def test_a_read_cut_short_by_ctrl_c_or_a_refusal_leaves_no_write_ahead_log_files(case_of_700_events, monkeypatch,
                                                                                 read, raised):
    """docs/files.md: a reader's -wal and -shm go when it closes, cut short or not. The cursor of the
    interrupted read, held by the frames the exception passes, kept the closed connection open in
    SQLite, so that closing the last one no longer folded and removed them."""
    from itertools import count

    from ledger.package_tools.replay import Replayer
    from ledger.services.case import read_only_rows
    from ledger.storage.connection import Storage

    calls, apply = count(1), Replayer.apply

    def cut_short_at_the_third_event(self, *args):
        if next(calls) == 3:
            raise raised
        return apply(self, *args)

    leftovers = lambda: sorted(p.name for p in case_of_700_events.iterdir() if p.name.endswith(("-wal", "-shm")))
    assert leftovers() == []
    with pytest.raises(type(raised) if isinstance(raised, BaseException) else raised) as caught:  # kept, frames too
        if read == "verify":
            monkeypatch.setattr(Replayer, "apply", cut_short_at_the_third_event)
            verify_case(case_of_700_events)
        elif read == "scratch":  # once the scratch ledger has read the ledger's schema version
            monkeypatch.setattr(Storage, "apply_migrations", lambda *args, **kwargs: (_ for _ in ()).throw(raised))
            verify_case(case_of_700_events)
        else:
            with read_only_rows(case_of_700_events, "SELECT seq, body FROM events") as (_, rows):
                assert next(rows)[0] == 1
                raise raised
    assert caught.value.__traceback__ is not None and leftovers() == []
    monkeypatch.undo()
    assert verify_case(case_of_700_events).events > 690 and leftovers() == []



def test_a_ctrl_c_while_verify_closes_its_reads_waits_until_the_log_is_folded(case_of_700_events, monkeypatch):
    """The interrupt arriving as verify closes its connection to the ledger (at the end of a run, or
    after a refusal) cut its clean-up in two: the log it made stayed beside the case (3 % of Ctrl-Cs)."""
    import os
    import signal

    from ledger.storage.sqlite_file import ClosingConnection

    close, sent = ClosingConnection.close, []

    def interrupted_close(self):
        if not sent and any(row[1] == "orig" for row in self.execute("PRAGMA database_list")):
            sent.append(os.kill(os.getpid(), signal.SIGINT))  # verify's reading connection, as it closes
        close(self)

    monkeypatch.setattr(ClosingConnection, "close", interrupted_close)
    with pytest.raises(KeyboardInterrupt):
        verify_case(case_of_700_events)
    assert sent and sorted(p.name for p in case_of_700_events.iterdir() if p.name.endswith(("-wal", "-shm"))) == []

def test_verify_leaves_the_log_of_a_case_another_connection_holds_open(exported):
    """Only the last connection folds the log: verify never removes one a writer is using."""
    with Case.open(exported) as opened:
        opened.budget().grant("H1", 5, "controller", "more", "g1")
        assert (exported / "ledger.sqlite-wal").exists()
        assert verify_case(exported).events > 0
        assert (exported / "ledger.sqlite-wal").exists()
        assert opened.balances()[0]["granted_units"] == 5
    assert verify_case(exported).events > 0
    assert not (exported / "ledger.sqlite-wal").exists()


def test_an_outcome_is_a_case_event_exported_verified_imported_and_an_edited_outcome_is_caught(budget, case, tmp_path):
    budget.reserve("H1", "a1", "source.read_context")
    budget.record_result("H1", "a1", {"finding": "x"})
    budget.settle("H1", "a1", 80, "good")
    recorded = case.record_outcome("resolved", "swe-bench evaluation")
    export_case(case)
    path = case.path
    case.close()
    assert recorded.event_ref.startswith("analysis/case/events/")
    body = json.loads((path / recorded.event_ref).read_bytes())
    assert (body["type"], body["outcome"], body["source"], body["revision"]) == (
        "case.outcome_recorded", "resolved", "swe-bench evaluation", 1)
    assert verify_case(path).head_seq == recorded.seq
    import_tree(path, tmp_path / "copy")
    with Case.open(tmp_path / "copy") as copy:
        assert (copy.status()["outcome"], copy.status()["outcome_source"]) == ("resolved", "swe-bench evaluation")
    _tamper_past_trigger(path, "outcomes_no_update", "UPDATE outcomes SET outcome = 'failed'")
    assert_verify_fails_at(path, recorded.seq)


def test_an_edited_atom_row_of_a_result_is_caught(case, tmp_path):
    budget = case.budget(BudgetConfig.from_mapping({"novelty_mode": "atoms"}))
    budget.initialize()
    budget.reserve("H1", "a1", "source.read_context")
    result = budget.record_result("H1", "a1", {"atoms": ["aa", "bb"]})
    case.close()
    verify_case(case.path)
    _tamper_past_trigger(case.path, "result_atoms_no_delete", "DELETE FROM result_atoms WHERE atom_id = 'bb'")
    assert_verify_fails_at(case.path, result.seq)
def test_export_case_takes_a_case_folder_path_like_verify_and_import(tmp_path):
    path = make_package(tmp_path / "case")
    start_case(path).close()
    report = export_case(str(path))
    assert report.files_written > 0 and verify_case(path).export_state == "current"
    assert export_case(path).files_written == 0
    with pytest.raises(LedgerError) as refused:
        export_case(tmp_path / "nothing-here")
    assert refused.value.code == LEDGER_MISSING


# --- the case's own status rows changed: every command says INTEGRITY_ERROR ----------------------
STATUS_EDITS = {
    "case_status replaced by another view": ["DROP VIEW case_status", "CREATE VIEW case_status AS SELECT 1 AS x"],
    "case_status made empty": ["DROP VIEW case_status",
                               "CREATE VIEW case_status AS SELECT * FROM case_identity WHERE 0"],
    "the case identity row deleted": ["DROP TRIGGER case_identity_no_delete", "DELETE FROM case_identity"],
}


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("edit", STATUS_EDITS, ids=list(STATUS_EDITS))
def test_a_changed_status_row_is_integrity_error_in_every_command_never_a_traceback(exported, edit):
    conn = sqlite3.connect(exported / "ledger.sqlite")
    guard = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'case_identity_no_delete'").fetchone()[0]
    for statement in STATUS_EDITS[edit]:
        conn.execute(statement)
    conn.execute("DROP TRIGGER IF EXISTS case_identity_no_delete")
    conn.execute(guard)  # put back as it was: only the rows or the view differ
    conn.commit()
    conn.close()
    # export publishes the events and a manifest read from them, never these rows or the view: it
    # writes the package as it was (verify, run on it, names the edit)
    for command, fails in ((["verify", "C"], True), (["state", "C"], True), (["export", "C"], False),
                           (["apply", "C", "-", "--create", "BUG-1"], True)):
        done = run_cli(*[str(exported) if part == "C" else part for part in command], stdin=b'{"op": "snapshot"}\n')
        assert b"Traceback" not in done.stderr and done.returncode == (1 if fails else 0), (command, done.stderr)
        assert not fails or done.stderr.startswith(b"error: INTEGRITY_ERROR: "), (command, done.stderr)


# --- the verify command writes nothing ---------------------------------------------------------
def _ledger_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.name in ("ledger.sqlite", "ledger.sqlite-wal")}


@pytest.mark.slow  # over 0.5 s in the default run: the slow lane (.ci/run) runs it
def test_the_verify_command_writes_nothing_whatever_the_ledgers_schema_journal_mode_or_log(tmp_path):
    """`ledger verify CASE` reads through read-only connections only: an older schema is not
    migrated (and a lie in its views is still found), a rollback-journal ledger stays one, and a
    crash's -wal is neither folded in nor deleted. (It opened the case as a writer for its
    progress bar, which migrated, rewrote or folded all three.)"""
    from click.testing import CliRunner

    from conftest import downgrade_ledger
    from ledger_cli.main import main

    def verify(path: Path) -> tuple[int, str]:
        done = CliRunner().invoke(main, ["verify", str(path)])
        return done.exit_code, done.output

    old = tmp_path / "old"
    start_case(make_package(old)).close()
    downgrade_ledger(old, 6)
    lying = tmp_path / "lying"
    shutil.copytree(old, lying)
    conn = sqlite3.connect(lying / "ledger.sqlite")
    conn.execute("DROP VIEW case_status")
    conn.execute("CREATE VIEW case_status AS SELECT 'BUG-1' AS case_id, 'CLOSED' AS state")
    conn.commit()
    conn.close()
    for path, status in ((old, 0), (lying, 1)):
        before = _ledger_files(path)
        code, output = verify(path)
        assert code == status, output
        assert _ledger_files(path) == before
        assert read_only_query(path, "SELECT MAX(version) FROM schema_migrations")[1] == [(6,)]
    assert "INTEGRITY_ERROR: the ledger's view case_status is altered: its definition differs" in verify(lying)[1]

    rollback = tmp_path / "rollback"
    start_case(make_package(rollback)).close()
    sqlite3.connect(rollback / "ledger.sqlite").execute("PRAGMA journal_mode = DELETE").fetchall()
    before = _ledger_files(rollback)
    assert verify(rollback)[0] == 0 and _ledger_files(rollback) == before
    assert read_only_query(rollback, "SELECT 1")[1] == [(1,)]
    assert sqlite3.connect(rollback / "ledger.sqlite").execute("PRAGMA journal_mode").fetchone() == ("delete",)

    crashed, copy = tmp_path / "crashed", tmp_path / "copy"
    with start_case(make_package(crashed)) as case:
        case.storage.conn.execute("PRAGMA wal_autocheckpoint = 0")
        case.budget().initialize()
        copy.mkdir()
        for name in ("ledger.sqlite", "ledger.sqlite-wal"):  # what a crash leaves: committed writes in the log
            shutil.copyfile(crashed / name, copy / name)
    before = _ledger_files(copy)
    assert len(before["ledger.sqlite-wal"]) > 0
    code, output = verify(copy)
    assert code == 0 and "head seq 4 " in output, output
    assert _ledger_files(copy) == before


def test_a_ledger_reloaded_in_utf16_verifies_as_it_did_and_its_tampering_is_still_found(budget, case):
    """A dump read back into a file whose text is UTF-16 (PRAGMA encoding) is the same ledger: verify
    compares it in its own encoding (SQLite attaches only files of one encoding), and still finds a
    changed body there."""
    budget.reserve("H1", "q1", "source.read_context")
    budget.record_result("H1", "q1", {"finding": "line 2 subtracts"})
    case.close()
    ledger = case.path / "ledger.sqlite"
    dump = list(sqlite3.connect(ledger).iterdump())
    ledger.unlink()
    conn = sqlite3.connect(ledger)
    conn.execute("PRAGMA encoding = 'UTF-16le'")
    conn.executescript("\n".join(dump))
    conn.close()
    assert sqlite3.connect(ledger).execute("PRAGMA encoding").fetchone() == ("UTF-16le",)
    assert verify_case(case.path).head_seq == len([line for line in dump if line.startswith('INSERT INTO "events"')])
    from ledger.storage.sqlfiles import shipped_schema

    conn = sqlite3.connect(ledger)
    conn.execute("DROP TRIGGER events_no_update")
    seq, body = conn.execute("SELECT seq, body FROM events WHERE type = 'budget.reserved'").fetchone()
    forged = body.replace(b'"q1"', b'"q9"') if isinstance(body, bytes) else body.replace('"q1"', '"q9"')
    assert forged != body
    conn.execute("UPDATE events SET body = ? WHERE seq = ?", (forged, seq))
    conn.execute(shipped_schema()["events_no_update"])
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and "schema object" not in caught.value.message


def test_export_refuses_a_ledger_older_than_its_export_and_names_the_way_back(exported, tmp_path):
    """A ledger put back from an older copy under a newer export: export would replace the newer
    manifest with an older head; it refuses, writing nothing, and says to import the export."""
    shutil.copyfile(exported / "ledger.sqlite", tmp_path / "older.sqlite")
    with Case.open(exported) as case:
        case.budget().grant("H1", 1, "controller", "more", "g-1")
        export_case(case)
    (exported / "ledger.sqlite").write_bytes((tmp_path / "older.sqlite").read_bytes())
    before = tree(exported)
    with pytest.raises(LedgerError) as caught:
        export_case(exported)
    assert caught.value.code == INTEGRITY_ERROR and "'ledger import' it into a new folder" in caught.value.message
    assert "but the ledger ends at seq" in caught.value.message and tree(exported) == before


def test_export_refuses_an_events_row_edited_out_of_its_types_naming_the_seq(package, example_policy):
    """An events row whose revision is stored as 1.0 (equal to 1 in SQL) places no file: export
    refuses with INTEGRITY_ERROR naming the seq and writes nothing; verify names it too."""
    from test_verify_split import _unguarded_change
    case = start_case(package)
    case.budget(example_policy).initialize()
    case.close()
    _unguarded_change(package, "events", "revision INTEGER NOT NULL", "revision BLOB NOT NULL",
                      "UPDATE events SET revision = CAST(revision AS REAL) WHERE seq = :seq", 4)
    with Case.open(package) as reopened, pytest.raises(LedgerError) as caught:
        export_case(reopened)
    assert caught.value.code == INTEGRITY_ERROR and caught.value.message.startswith(
        "seq 4: the ledger's events row places the event by stream 'budget', revision 1.0, stream_seq 1")
    assert not (package / "analysis").exists() and not (package / "manifest.json").exists()
    with pytest.raises(LedgerError) as verified:
        verify_case(package)
    assert (verified.value.code, verified.value.details.get("seq")) == (INTEGRITY_ERROR, 4)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_export_and_import_need_few_open_files_whatever_the_batch(tmp_path):
    """Export writes its files 128 at a time but holds one open at a time: under a limit of 32 open
    files (a process's own take some) a case of 400 files exports, imports and verifies."""
    import resource
    import subprocess
    import sys

    package = make_package(tmp_path / "c")
    with start_case(package, units=10_000) as case:
        budget = case.budget()
        budget.initialize()
        with case.batch():
            for n in range(130):
                budget.reserve("H1", f"a{n}", "source.read_context")
                budget.record_result("H1", f"a{n}", {"line": n})
                budget.settle("H1", f"a{n}", 90, "new")

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for args in (["export", str(package)], ["import", str(package), "--to", str(tmp_path / "copy")],
                 ["verify", str(tmp_path / "copy")]):
        done = subprocess.run([sys.executable, "-m", "ledger_cli", *args], capture_output=True, text=True,
                              preexec_fn=few_files, env=env, timeout=300)
        assert done.returncode == 0, (args, done.stderr)
    assert len(list((package / "analysis").rglob("*.json"))) > 260
    assert not [p for p in package.rglob(".ledger-tmp-*")]


def _past_the_guards(path: Path, table: str, statement: str) -> None:
    """Run ``statement`` with ``table``'s guard triggers dropped, then put them back."""
    conn = sqlite3.connect(path / "ledger.sqlite", isolation_level=None)
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?",
                            (table,)).fetchall()
    conn.execute("BEGIN")
    for name, _ in triggers:
        conn.execute(f'DROP TRIGGER "{name}"')
    conn.execute(statement)
    for _, sql in triggers:
        conn.execute(sql)
    conn.execute("COMMIT")
    conn.close()


@pytest.mark.parametrize("table, statement, command", [
    ("events", "UPDATE events SET body = CAST(body AS BLOB) WHERE seq = (SELECT MAX(seq) FROM events)", ["export"]),
    ("contents", "UPDATE contents SET body = CAST(body AS BLOB)", ["export"]),
    ("events", "UPDATE events SET created_at = CAST(created_at AS BLOB) WHERE seq = (SELECT MAX(seq) FROM events)",
     ["budget", "advice", "CASE", "H1"]),
    ("case_identity", "UPDATE case_identity SET case_id = x'ff'", ["state"]),
    ("case_identity", "UPDATE case_identity SET case_id = x'ff'", ["state", "--json"]),
    ("policies", "UPDATE policies SET policy = 'not json'", ["budget", "advice", "CASE", "H1"]),
], ids=["event-body-blob", "content-body-blob", "created_at-blob", "case_id-blob", "case_id-blob-json",
        "policy-not-json"])
@pytest.mark.sampled(every=4)
def test_a_value_of_a_type_the_ledger_never_writes_is_an_integrity_error_for_every_command(
        exported, case, table, statement, command):
    """Past its guards, a stored text made a blob (or a policy made not JSON) is an edited ledger:
    `INTEGRITY_ERROR` pointing to verify, and nothing exported, never a Python error."""
    from click.testing import CliRunner

    from ledger_cli.main import main

    case.close()
    shutil.rmtree(case.path / "analysis", ignore_errors=True)
    (case.path / "manifest.json").unlink(missing_ok=True)
    _past_the_guards(case.path, table, statement)
    args = [str(case.path) if part == "CASE" else part for part in command]
    done = CliRunner().invoke(main, args if "CASE" in command else [*args, str(case.path)])
    assert isinstance(done.exception, SystemExit) and done.exit_code == 1, done.output
    assert done.output.startswith("error: INTEGRITY_ERROR: ") and "ledger verify" in done.output
    assert not (case.path / "analysis").exists() and not (case.path / "manifest.json").exists()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR


def test_a_manifest_far_larger_than_an_export_writes_is_refused_before_it_is_read_whole(exported):
    """An export's manifest.json stays under 1 KiB: one over 64 KiB is INTEGRITY_ERROR from verify and
    import, read no further than that bound; export writes the right one over it."""
    from ledger.package_tools.manifest import MANIFEST_MAX_BYTES

    honest = (exported / "manifest.json").read_bytes()
    (exported / "manifest.json").write_bytes(honest[:-1] + b" " * (16 * 2 ** 20) + b"}")
    tracemalloc.start()
    try:
        with pytest.raises(LedgerError) as caught:
            verify_case(exported)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.code == INTEGRITY_ERROR
    assert caught.value.message.startswith(f"manifest.json is over {MANIFEST_MAX_BYTES} bytes")
    assert peak < 4 * 2 ** 20
    with pytest.raises(LedgerError) as refused:
        import_tree(exported, exported.parent / "copy")
    assert refused.value.code == INTEGRITY_ERROR and not (exported.parent / "copy").exists()
    export_case(exported)
    assert (exported / "manifest.json").read_bytes() == honest


def _sparse(path: Path, size: int) -> None:
    """``path`` replaced by a file of ``size`` zero bytes that takes no room on disk."""
    path.unlink(missing_ok=True)
    with open(path, "wb") as file:
        file.truncate(size)


HUGE = EXPORT_FILE_BYTES_MAX + 1  # one byte more than any event or content may hold


@pytest.mark.parametrize("where", ["event", "content"])
def test_import_refuses_an_event_or_content_file_larger_than_any_may_be_without_reading_it(exported, tmp_path, where):
    """A package file over the largest event or content an analysis config allows is no file of an
    export: INTEGRITY_ERROR naming it, told by its size (a 40 GiB sparse file ended in MemoryError)."""
    files = sorted(exported.glob("analysis/budgets/0001/events/*.json" if where == "event"
                                 else "analysis/evidence/content/*.json"))
    _sparse(files[1 if where == "event" else 0], HUGE)
    tracemalloc.start()
    try:
        with pytest.raises(LedgerError) as caught:
            import_tree(exported, tmp_path / "new")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.code == INTEGRITY_ERROR
    relative = files[1 if where == "event" else 0].relative_to(exported).as_posix()
    assert relative in caught.value.message
    assert peak < 64 * 1024 * 1024  # nothing the size of the file was read
    assert not (tmp_path / "new").exists()


def test_verify_and_export_pass_over_a_stray_event_named_file_larger_than_any_event(exported):
    """A file named like a later event but over any event's size is not read whole: verify names it
    as no part of the export; export writes the ledger's files beside it."""
    stray = exported / "analysis" / "budgets" / "0001" / "events" / "00000999.json"
    _sparse(stray, HUGE)
    with pytest.raises(LedgerError) as caught:
        verify_case(exported)
    assert caught.value.code == INTEGRITY_ERROR and "00000999.json is not part of the export" in caught.value.message
    stray.unlink()
    first = sorted((exported / "analysis" / "budgets" / "0001" / "events").glob("*.json"))[0]
    kept = first.read_bytes()
    _sparse(first, HUGE)  # where the ledger's event belongs: export writes it again
    with Case.open(exported) as case:
        export_case(case)
    assert first.read_bytes() == kept
    assert verify_case(exported).head_seq == 13


@pytest.mark.parametrize("size, most, whole", [(0, 0, True), (5, 5, True), (6, 5, False), (5, 10 ** 9, True)])
def test_bytes_at_most_reads_a_file_up_to_its_bound_and_no_further(tmp_path, size, most, whole):
    path = tmp_path / "f"
    path.write_bytes(b"x" * size)
    tracemalloc.start()
    try:
        got = bytes_at_most(path, most)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == (b"x" * size if whole else None)
    assert peak < 1024 * 1024  # the bound is not set aside: a 5-byte file under a 1 GB bound


def test_a_folder_where_an_exported_file_belongs_is_named_as_a_folder_by_verify_and_export(exported):
    """Verify called it missing (a FIFO there was "not a regular file"); export named only its own
    temp file, not the folder in the way."""
    event = sorted((exported / "analysis" / "budgets" / "0001" / "events").glob("*.json"))[1]
    event.unlink()
    event.mkdir()
    relative = event.relative_to(exported).as_posix()
    with pytest.raises(LedgerError) as caught:
        verify_case(exported)
    assert caught.value.code == INTEGRITY_ERROR
    assert caught.value.message.endswith(f"exported file {relative} is a folder, not a file (move it aside)")
    with Case.open(exported) as case:
        with pytest.raises(LedgerError) as refused:
            export_case(case)
    assert refused.value.code == STORAGE_ERROR
    assert refused.value.message.endswith(f" to {event})")
    (exported / "ledger.sqlite").rename(exported.parent / "kept.sqlite")
    with pytest.raises(LedgerError) as rebuilt:  # import said "the export has no event N" alone
        import_tree(exported, exported.parent / "new")
    seq = json.loads(sorted(event.parent.glob("*.json"))[0].read_bytes())["seq"] + 1
    assert rebuilt.value.code == INTEGRITY_ERROR and rebuilt.value.message.startswith(
        f"seq {seq}: the export has no event {seq} (its manifest names head seq 13); {relative} is a folder, "
        "not a file (move it aside)"), rebuilt.value.message
    (exported.parent / "kept.sqlite").rename(exported / "ledger.sqlite")
    event.rmdir()
    with Case.open(exported) as case:
        export_case(case)
    assert verify_case(exported).head_seq == 13


def test_another_cases_ledger_put_in_place_is_named_as_another_package_not_as_a_truncation(tmp_path):
    """A shorter ledger of another package (same case id) copied over an exported case: named as another
    package's by the manifest, or without one by the first event file (it said the ledger was truncated,
    at its end, then that event 1 was another history after the same event 0)."""
    for name, actions in (("long", 2), ("short", 1)):
        case = start_case(tmp_path / name, case_id="SAME-1")
        budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
        budget.initialize()
        for n in range(actions):
            budget.reserve(f"H{n % 2 + 1}", f"a{n}", "source.read_context")
            budget.fail(f"H{n % 2 + 1}", f"a{n}", "x")
        export_case(case)
        case.close()
    shutil.copyfile(tmp_path / "short" / "ledger.sqlite", tmp_path / "long" / "ledger.sqlite")
    ids = {name: json.loads((tmp_path / name / "manifest.json").read_bytes())["package_id"]
           for name in ("long", "short")}
    with pytest.raises(LedgerError) as caught:
        verify_case(tmp_path / "long")
    assert (caught.value.code, caught.value.message) == (INTEGRITY_ERROR, (
        f"manifest.json is another package's: it names case SAME-1 package {ids['long']}, the ledger case SAME-1 "
        f"package {ids['short']} (a manifest copied from another case's export, or another case's ledger.sqlite put "
        "in place)"))
    (tmp_path / "long" / "manifest.json").unlink()  # without the manifest, the first event file says it
    with pytest.raises(LedgerError) as caught:
        verify_case(tmp_path / "long")
    assert (caught.value.code, caught.value.details["seq"]) == (INTEGRITY_ERROR, 1)
    assert caught.value.message == (
        f"seq 1: exported file analysis/case/events/00000001.json is another package's: it names case SAME-1 package "
        f"{ids['long']}, the ledger case SAME-1 package {ids['short']} (another case's export copied in, or another "
        "case's ledger.sqlite put in place)")


@pytest.mark.parametrize("edit, message", [
    ("UPDATE closings SET reward_units = reward_units + 1 WHERE action_id = 'k1'",
     "helper table closings holds a row the replay does not derive (edited, extra or swapped): revision=1, "
     "hypothesis_id='H1', action_id='k1', seq=7, outcome='settled', semantic_score=80"),
    ("DELETE FROM closings WHERE action_id = 'k1'",
     "helper table closings lacks a row the replay derives (edited or deleted): revision=1, hypothesis_id='H1', "
     "action_id='k1', seq=7, outcome='settled'"),
    ("UPDATE contents SET cumulative_bytes = cumulative_bytes + 1 WHERE seq = 6",
     "content table contents holds a row the replay does not derive (edited, extra or swapped): sha256='"),
])
def test_a_table_row_only_one_side_holds_is_named_by_its_values_and_which_side_holds_it(budget, case, edit, message):
    """The first differing row of a table is shown, column by column, with the side that holds it:
    enough to find the edit with SQL."""
    budget.reserve("H1", "k1", "source.read_context")
    budget.record_result("H1", "k1", {"x": "y" * 500})
    budget.settle("H1", "k1", 80, "r")
    case.close()
    conn = unguarded(case.path)
    conn.execute(edit)
    restore_triggers(conn)
    caught = assert_verify_fails_at(case.path, 7 if "closings" in edit else 6)
    assert caught.message.startswith(f"seq {7 if 'closings' in edit else 6}: {message}"), caught.message
    assert len(caught.message) < 1200


def test_an_import_the_file_system_refuses_midway_names_the_copy_and_writes_nothing(exported, tmp_path, monkeypatch):
    """A full disk while an input is copied: the error names both files as a copy (it said "renaming")."""
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "sendfile", full)  # shutil's copy on Linux
    with pytest.raises(LedgerError) as caught:
        import_tree(exported, tmp_path / "new")
    assert caught.value.code == STORAGE_ERROR
    assert re.search(r": No space left on device \(from \S+/sources/\S+ to \S+/sources/\S+\)$", caught.value.message), \
        caught.value.message
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("other_id", ["BUG-1", "OTHER-2"])
def test_a_manifest_of_another_package_is_named_as_such_whatever_its_head(exported, tmp_path, other_id):
    """A manifest.json copied from another case's export (same case id or not, a head past this
    ledger's or before it): named as another package's, not as a changed head or a truncation."""
    other = start_case(tmp_path / "other", case_id=other_id)
    with other:
        export_case(other)
    identity = json.loads((tmp_path / "other" / "manifest.json").read_bytes())
    for head in (identity["head"], {"seq": 40, "sha256": "0" * 64}):
        (exported / "manifest.json").write_bytes(canonical_bytes({**identity, "head": head}))
        with pytest.raises(LedgerError) as caught:
            verify_case(exported)
        theirs = json.loads((tmp_path / "other" / "manifest.json").read_bytes())
        with Case.open(exported) as case:
            ids = (case.status()["case_id"], case.status()["package_id"])
        assert (caught.value.code, caught.value.message) == (INTEGRITY_ERROR, (
            f"manifest.json is another package's: it names case {other_id} package {theirs['package_id']}, the ledger "
            f"case {ids[0]} package {ids[1]} (a manifest copied from another case's export, or another case's "
            "ledger.sqlite put in place)"))
        with pytest.raises(LedgerError) as refused:  # export says the same, and writes nothing
            export_case(exported)
        assert refused.value.message.startswith(caught.value.message + "; nothing was exported")
        with pytest.raises(LedgerError) as imported:  # import too (it said the export had no event past its own)
            import_tree(exported, tmp_path / "imported")
        assert (imported.value.code, imported.value.message) == (caught.value.code, caught.value.message)
        assert not (tmp_path / "imported").exists()


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_an_export_says_which_stray_file_verify_and_import_will_refuse(exported):
    """Export wrote nothing and reported success on a tree verify then failed for a file it never writes."""
    (exported / "analysis" / "note.txt").write_text("mine\n")
    with Case.open(exported) as case:
        report = export_case(case)
    assert report.stray == ("analysis/note.txt is not part of the export: the export writes no such file; move it "
                            "out of analysis/")
    done = run_cli("export", str(exported))
    assert done.returncode == 0 and done.stdout.decode().splitlines()[1] == (
        f"{report.stray}; verify and import refuse the package until it is moved out")
    assert json.loads(run_cli("export", str(exported), "--json").stdout)["stray"] == report.stray
    (exported / "analysis" / "note.txt").unlink()
    with Case.open(exported) as case:
        assert export_case(case).stray is None


_HOLD_EXPORT_LOCK = """
import fcntl, sys, time
with open(sys.argv[1], "a+b") as handle:
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
    print("held", flush=True)
    sys.stdin.readline()  # held until the test writes a line (or closes the pipe)
"""


def _export_lock_held_by_another_process(case_path: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_EXPORT_LOCK, str(case_path / "ledger.sqlite-export-lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout.readline() == b"held\n"
    return holder


def _line_within(stream, seconds: float) -> str:
    """The next line of a child's ``stream``, or "" when none comes within ``seconds``."""
    import select

    ready, _, _ = select.select([stream], [], [], seconds)
    return stream.readline().decode() if ready else ""


def test_an_export_waiting_for_another_export_of_the_case_says_so_then_runs_once_it_ends(tmp_path):
    """One export of a package at a time: the command waiting for another process's export prints a
    note on stderr as the wait begins (it was silent for up to an hour), then exports once it ends."""
    case = start_case(tmp_path / "case")
    case.close()
    holder = _export_lock_held_by_another_process(tmp_path / "case")
    waiting = subprocess.Popen([sys.executable, "-m", "ledger_cli", "export", str(tmp_path / "case")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        note = _line_within(waiting.stderr, 60)
        assert note == (f"note: another export of {tmp_path / 'case'} is running; waiting for it to end "
                        "(up to an hour)\n")
        assert waiting.poll() is None and not (tmp_path / "case" / "manifest.json").exists()
        holder.communicate(b"done\n", timeout=30)
        out, err = waiting.communicate(timeout=60)
    finally:
        for process in (holder, waiting):
            if process.poll() is None:
                process.kill()
    assert waiting.returncode == 0, err
    assert out.decode().startswith(f"exported {tmp_path / 'case'}: ")
    assert verify_case(tmp_path / "case").export_state == "current"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_several_cases_exported_at_once_say_which_one_waits_for_another_export_of_it(tmp_path, jobs):
    """The note comes from the process exporting that case (a worker too, which shares the command's
    stderr) as the wait begins: the command was silent while its line waited, up to an hour."""
    for name in ("a", "b"):
        start_case(tmp_path / name).close()
    holder = _export_lock_held_by_another_process(tmp_path / "b")
    command = [sys.executable, "-m", "ledger_cli", "export", str(tmp_path / "a"), str(tmp_path / "b"), "--jobs", jobs]
    exporting = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        note = _line_within(exporting.stderr, 60)
        assert note == (f"note: another export of {tmp_path / 'b'} is running; its line waits for it to end "
                        "(up to an hour)\n")
        assert exporting.poll() is None and not (tmp_path / "b" / "manifest.json").exists()
        holder.communicate(b"done\n", timeout=30)
        out, err = exporting.communicate(timeout=60)
    finally:
        for process in (holder, exporting):
            if process.poll() is None:
                process.kill()
    assert exporting.returncode == 0 and err == b"", err
    assert out.decode().splitlines()[-1] == "exported 2 case(s): 2 ok, 0 failed"
    assert verify_case(tmp_path / "b").export_state == "current"


@pytest.mark.slow  # real processes waiting on locks: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("signal_name, status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_export_of_several_cases_stops_at_once_though_a_worker_waits_for_another_export(tmp_path, signal_name,
                                                                                          status):
    """A worker waiting for another export's lock (up to an hour) never sees the signal: the command
    waited for it, ignoring Ctrl-C, until that export ended. The wait now ends as its caller stops."""
    import signal as signals
    import time

    for name in ("a", "b", "c", "d"):
        start_case(tmp_path / name).close()
    holders = [_export_lock_held_by_another_process(tmp_path / name) for name in ("c", "d")]
    command = [sys.executable, "-m", "ledger_cli", "export", *(str(tmp_path / n) for n in "abcd"), "--jobs", "2"]
    exporting = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert "its line waits for it to end" in _line_within(exporting.stderr, 60)
        time.sleep(0.3)  # both waits under way, one of them (at least) in a worker
        sent = time.monotonic()
        exporting.send_signal(getattr(signals, signal_name))
        _, err = exporting.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        for process in (*holders, exporting):
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=30)  # reaped, its pipes closed
    assert exporting.returncode == status and took < 10, (took, err)
    assert err.decode().endswith("error: interrupted; nothing half-written remains, run the command again\n")


def test_export_many_calls_waiting_with_the_case_and_needs_an_importable_one_for_several_jobs(tmp_path):
    start_case(tmp_path / "a").close()
    noted: list[str] = []
    holder = _export_lock_held_by_another_process(tmp_path / "a")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(export_module, "EXPORT_LOCK_WAIT_MS", 200)
            report = export_many([tmp_path / "a"], jobs=1, waiting=noted.append)  # one job: any function
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert noted == [str(tmp_path / "a")] and report.cases[0]["error"]["code"] == "LEDGER_BUSY"
    for waiting in (lambda case: None, "print"):
        with pytest.raises(LedgerError) as caught:
            export_many([tmp_path / "a"], jobs=2, waiting=waiting)
        assert caught.value.code == INVALID_ARGUMENT and "waiting" in caught.value.message
    assert not (tmp_path / "a" / "manifest.json").exists()  # refused before any export
    program = ("import sys\nfrom ledger import LedgerError, export_many\ndef note(case): print(case)\n"
               "try:\n    export_many([sys.argv[1]], jobs=2, waiting=note)\nexcept LedgerError as e:\n"
               "    print(e.code, e.message)\n")  # pickled by its name, which no worker could find
    done = subprocess.run([sys.executable, "-c", program, str(tmp_path / "a")], capture_output=True, text=True,
                          timeout=120)
    assert (done.stdout, done.stderr) == (
        "INVALID_ARGUMENT waiting must be a function a worker process can import when more than one job runs: one "
        "defined by a program given as text (python -c, standard input, a notebook or the interactive interpreter) is "
        "not; define it in a module, or use jobs=1\n", "")


def test_export_calls_waiting_once_only_when_another_export_holds_the_case_and_names_it_when_it_gives_up(
        tmp_path, monkeypatch):
    case = start_case(tmp_path / "case")
    calls = []
    export_case(case, waiting=lambda: calls.append("waited"))
    assert calls == []  # nothing to wait for
    with pytest.raises(LedgerError) as caught:
        export_case(case, waiting="print")
    assert caught.value.code == INVALID_ARGUMENT
    monkeypatch.setattr(export_module, "EXPORT_LOCK_WAIT_MS", 200)
    holder = _export_lock_held_by_another_process(tmp_path / "case")
    try:
        with pytest.raises(LedgerError) as busy:
            export_case(case, waiting=lambda: calls.append("waited"))
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert (busy.value.code, calls) == ("LEDGER_BUSY", ["waited"])
    assert f"another export of {tmp_path / 'case'} held its lock (ledger.sqlite-export-lock)" in str(busy.value)
    holder = _export_lock_held_by_another_process(tmp_path / "case")

    def broken_pipe() -> None:
        raise BrokenPipeError(32, "Broken pipe")
    try:  # the caller's own failure goes on as itself, never as the export's STORAGE_ERROR
        with pytest.raises(BrokenPipeError):
            export_case(case, waiting=broken_pipe)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert export_case(case).files_written == 0  # the holder gone, the lock is free again (nothing new to write)
    case.close()


@pytest.mark.parametrize("error", [errno.EMFILE, errno.EACCES])
def test_an_exported_file_export_may_not_read_is_storage_error_never_a_replaced_file(exported, monkeypatch, error):
    """Export compares each exported file with the ledger's bytes: one the system refused to read (the
    open-file limit reached, no permission) was taken for one that differs, then found to hold an event
    of this case where other bytes belong: INTEGRITY_ERROR for a sound export. It is STORAGE_ERROR naming
    the file now, and nothing is written."""
    import ledger.ground.paths as paths
    import ledger.package_tools.atomic_files as atomic_files

    with Case.open(exported) as case:
        case.budget().grant("H1", 5, "controller", "more", "g-new")  # something to export
    target = exported / "analysis" / "case" / "events" / "00000001.json"
    before = {path: path.read_bytes() for path in exported.rglob("*.json")}
    if error == errno.EACCES:
        deny_reading(monkeypatch, target)
    else:  # every way export opens the file, as a process out of descriptors meets it
        real_open = paths.open_regular

        def refused(path, *args, **kwargs):
            if Path(path) == target:
                raise OSError(error, os.strerror(error), str(path))
            return real_open(path, *args, **kwargs)
        monkeypatch.setattr(atomic_files, "open_regular", refused)
        monkeypatch.setattr(paths, "open_regular", refused)
    with pytest.raises(LedgerError) as caught:
        export_case(exported)
    assert caught.value.code == STORAGE_ERROR
    assert caught.value.message.startswith("cannot read the exported file analysis/case/events/00000001.json: ")
    monkeypatch.undo()
    assert {path: path.read_bytes() for path in exported.rglob("*.json")} == before
    assert export_case(exported).files_written > 0  # readable again: the export runs


@pytest.mark.parametrize("command, table, column, seq", [("verify", "events", "body", 600),
                                                          ("verify", "reservations", "action", 602),
                                                          ("export", "events", "body", 600)])  # export reads events
def test_text_that_is_not_utf8_is_named_by_its_row_in_verify_and_export(case_of_700_events, tmp_path, command, table,
                                                                         column, seq):
    """The events are read in batches: verify blamed text the sqlite3 module could not read on the
    first event of its batch (513 here), export on none (\"SQLite refused: Could not decode…\")."""
    case = tmp_path / "case"
    shutil.copytree(case_of_700_events, case)
    conn = sqlite3.connect(case / "ledger.sqlite", isolation_level=None)
    triggers = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    conn.execute("BEGIN")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    assert conn.execute(f"UPDATE {table} SET {column} = CAST(CAST({column} AS BLOB) || x'ff' AS TEXT) WHERE seq = ?",
                        (seq,)).rowcount == 1
    for (sql,) in triggers:
        conn.execute(sql)
    conn.execute("COMMIT")
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(case) if command == "verify" else export_case(case)
    assert caught.value.code == "INTEGRITY_ERROR" and caught.value.details["seq"] == seq
    assert caught.value.message.startswith(f"seq {seq}: {table}.{column} holds bytes that are not UTF-8 where text "
                                           "belongs (invalid start byte at byte ")
    assert not (case / "analysis").exists()


@pytest.mark.parametrize("added, said", [
    ("CREATE INDEX wi ON events(type COLLATE weird)", "no such collation sequence: weird"),
    ("CREATE INDEX fi ON events(myf(type))", "unknown function: myf()"),
    ("CREATE INDEX mi ON mine(x COLLATE weird)", "no such collation sequence: weird"),  # on a table of one's own
])
def test_an_added_index_using_a_collation_or_function_this_program_lacks_is_named_not_called_damage(case, added,
                                                                                                     said):
    """SQLite's integrity check cannot run then: verify said the file was damaged, perhaps torn by cp,
    and export's count of its files 'SQLite refused: no such collation sequence', naming nothing."""
    from ledger.package_tools.export import export_count

    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    conn.create_collation("weird", lambda a, b: (a > b) - (a < b))
    conn.create_function("myf", 1, lambda x: x, deterministic=True)
    conn.execute("CREATE TABLE mine(x TEXT)")
    conn.execute("CREATE INDEX harmless ON reservations(action)")  # named only when no other names what is missing
    conn.execute(added)
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    index = added.split()[2]
    assert caught.value.code == "INTEGRITY_ERROR"
    table = "mine" if index == "mi" else "events"
    assert caught.value.details["foreign_objects"] == [f"index {index} on {table}"]
    assert caught.value.message == (
        f"SQLite cannot run its integrity_check of ledger.sqlite: {said}: the file holds index {index} on {table}, "
        "added to it, and it uses a collation or function this program does not define (no damage: SQLite can "
        "neither check such an object nor read or write a table it is on); drop it (DROP INDEX, DROP TRIGGER or "
        "DROP VIEW in sqlite3)")
    if index == "wi":  # a count of the events reads through the smallest index, this one
        with Case.open(case.path) as opened, pytest.raises(LedgerError) as caught:
            export_count(opened)
        assert caught.value.message == (
            "SQLite refused: no such collation sequence: weird: an index, trigger or view added to the ledger file "
            "uses a collation or function this program does not define; 'ledger verify' names it, and dropping it "
            "lets the ledger work")


def _bytes_not_utf8_put_in(path: Path, statement: str, schema: bool = False) -> None:
    conn = sqlite3.connect(path / "ledger.sqlite", isolation_level=None)
    triggers = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("PRAGMA writable_schema = ON") if schema else None
    assert conn.execute(statement).rowcount == 1
    for (sql,) in triggers if not schema else ():
        conn.execute(sql)
    conn.close()


def test_text_not_utf8_read_by_any_command_is_damage_that_verify_names(exported):
    """A command reading such text said 'SQLite refused: Could not decode…' quoting it (an event
    whole), and 'ledger sql' called it the query's fault (INVALID_ARGUMENT)."""
    _bytes_not_utf8_put_in(exported, "UPDATE schema_migrations SET name = CAST(CAST(name AS BLOB) || x'ff' AS TEXT) "
                                     "WHERE version = 1")
    with pytest.raises(LedgerError) as caught:
        export_case(exported)
    assert caught.value.code == "INTEGRITY_ERROR"
    assert caught.value.message == (
        "SQLite refused: Could not decode to UTF-8 column 'name' with text 'schema\ufffd' (the ledger file holds "
        "bytes that are not UTF-8 where text belongs: it is damaged; 'ledger verify' names where)")
    for call in (lambda: read_only_query(exported, "SELECT name FROM schema_migrations"),
                 lambda: verify_case(exported)):  # a query names the row, as verify does
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == "INTEGRITY_ERROR"
        assert caught.value.message == ("schema_migrations.name holds bytes that are not UTF-8 where text belongs "
                                        "(invalid start byte at byte 6): the file is damaged")
        assert caught.value.details == {"seq": None, "table": "schema_migrations", "column": "name"}


def test_a_schema_statement_not_utf8_is_named_by_verify(exported):
    _bytes_not_utf8_put_in(exported, "UPDATE sqlite_master SET sql = CAST(CAST(sql AS BLOB) || x'ff' AS TEXT) "
                                     "WHERE type = 'view' AND name = 'actions'", schema=True)
    with pytest.raises(LedgerError) as caught:
        verify_case(exported)
    assert caught.value.code == "INTEGRITY_ERROR" and caught.value.details["object"] == "actions"
    assert caught.value.message.startswith("the statement of view 'actions' in the file's schema holds bytes that "
                                           "are not UTF-8 where text belongs (invalid start byte at byte ")


def test_another_cases_ledger_citing_sources_this_package_lacks_is_named_as_another_package(tmp_path):
    """Another case's ledger.sqlite put under this case's export, citing sources this package does not
    hold: named as another package's by the manifest (it said a source reference no longer resolved,
    the replay's first refusal), before the replay."""
    from ledger import run_demo

    demo, _, _ = run_demo(tmp_path / "demo", echo=lambda text: None)
    with start_case(tmp_path / "plain", case_id="PLAIN-1") as plain:
        export_case(plain)
    shutil.copyfile(demo / "ledger.sqlite", tmp_path / "plain" / "ledger.sqlite")
    with pytest.raises(LedgerError) as caught:
        verify_case(tmp_path / "plain")
    assert caught.value.code == INTEGRITY_ERROR
    assert caught.value.message.startswith("manifest.json is another package's: it names case PLAIN-1 package ")
    assert caught.value.details["fields"] == ["case_id", "package_id"]


def test_an_edited_event_1_is_named_by_the_replay_not_as_another_packages_manifest(tmp_path):
    """Event 1's package id edited in the ledger (its hash left, or made anew): the manifest is this
    package's, so the replay names the edit (the early look for another package's manifest had blamed
    the manifest)."""
    with start_case(tmp_path / "c", case_id="EDIT-1") as case:
        export_case(case)
    ledger = tmp_path / "c" / "ledger.sqlite"
    conn = sqlite3.connect(ledger)
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'events'"
                            ).fetchall()
    for name, _sql in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("UPDATE events SET body = replace(body, json_extract(body, '$.package_id'), "
                 "'00000000-0000-4000-8000-000000000000') WHERE seq = 1")
    for _name, sql in triggers:
        conn.execute(sql)
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(tmp_path / "c")
    assert caught.value.message == "seq 1: stored sha256 does not match the event's bytes (edited event)"


def test_import_of_an_export_whose_event_1_is_another_packages_names_the_event_not_the_manifest(tmp_path):
    """Another package's event 1 (same case id) copied into an export: the manifest is this package's,
    so import names where the history breaks (it blamed the manifest once event 1 was read)."""
    for name in ("a", "b"):
        with start_case(tmp_path / name, case_id="SAME-2") as case:
            export_case(case)
    first = Path("analysis/case/events/00000001.json")
    shutil.copyfile(tmp_path / "b" / first, tmp_path / "a" / first)
    with pytest.raises(LedgerError) as caught:
        import_tree(tmp_path / "a", tmp_path / "imported")
    assert caught.value.code == INTEGRITY_ERROR and "manifest.json" not in caught.value.message
    assert caught.value.message.startswith("analysis/case/events/00000002.json: seq 2: parent_sha256 does not match "
                                           "the previous event")


def test_texts_an_earlier_build_took_replay_as_written_while_new_writes_refuse_them(package, monkeypatch):
    """Reasons, statements and labels now refuse the characters that show nothing beside the format ones
    (the Hangul filler U+3164, variation selectors, U+2800): a ledger an earlier build wrote with them
    verifies and imports as written (verify replays it under that build's rule), never "edited"."""
    import ledger.rules.common as common

    with monkeypatch.context() as earlier:  # the earlier build's rule: none of them refused
        earlier.setattr(common, "_SHOWS_NOTHING", re.compile("(?!)"))
        with Case.create(package, case_id="BUG-1") as case:
            case.open_revision([{"statement": "\ufe0f\u2800"}, {"statement": "b"}], 100)
            case.transition("INVESTIGATING_HYPOTHESES")
            budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
            budget.initialize()
            budget.reject("H1", "\u3164")
            budget.reject("H2", "b")
            case.record_outcome("ok\ufe0f", "ci")
    assert verify_case(package).head_seq == verify_case(package, jobs=2).head_seq == 7
    export_case(package)
    assert import_tree(package, package.parent / "copy").head_seq == 7
    with Case.open(package) as case:
        with pytest.raises(LedgerError) as caught:
            case.open_revision([{"statement": "\u3164"}], 100)
        assert (caught.value.code, caught.value.message) == (
            INVALID_ARGUMENT, "hypothesis 1: statement must be a non-blank string")
    assert verify_case(package).head_seq == 7
