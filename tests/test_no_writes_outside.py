"""No command writes, renames or deletes outside the case package (issue 8, item 6): a symbolic
link where the package keeps its own folders and files is refused with INVALID_ARGUMENT
naming it, and the place the link points to is left exactly as it was."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import pytest

from ledger import Case, CheckpointWarning, LedgerError, export_case, import_tree, run_demo, verify_case
from ledger.ground.errors import INVALID_ARGUMENT

from conftest import make_package, run_cli


def snapshot(folder: Path) -> dict[str, bytes]:
    found = {}
    for directory, dirs, names in os.walk(folder):
        for name in dirs + names:
            full = Path(directory, name)
            found[full.relative_to(folder).as_posix()] = b"<dir>" if full.is_dir() else full.read_bytes()
    return found


@pytest.fixture
def case_path(tmp_path) -> Path:
    root = make_package(tmp_path / "case")
    case = Case.create(root, "BUG-6")
    case.open_revision([{"statement": "one"}], 40)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget()
    budget.initialize()
    budget.reserve("H1", "q1", "source.read_context")
    budget.record_result("H1", "q1", {"finding": "x"}, ["sources/app.py"])
    case.close()
    return root


@pytest.fixture
def elsewhere(tmp_path) -> Path:
    """A folder outside the package holding a temp-named file a buggy export would delete."""
    folder = tmp_path / "elsewhere"
    (folder / "case" / "events").mkdir(parents=True)
    (folder / ".ledger-tmp-keep.me").write_text("not yours")
    (folder / "case" / "events" / ".ledger-tmp-00000001.json.x").write_text("not yours either")
    return folder


def assert_refused_naming(action, name: str) -> LedgerError:
    with pytest.raises(LedgerError) as caught:
        action()
    assert caught.value.code == INVALID_ARGUMENT, caught.value
    assert name in caught.value.message and "symbolic link" in caught.value.message
    return caught.value


def test_export_through_a_linked_analysis_folder_is_refused_and_writes_nothing_there(case_path, elsewhere):
    """The issue's example: ln -s /somewhere/else CASE/analysis; ledger export CASE."""
    before = snapshot(elsewhere)
    (case_path / "analysis").symlink_to(elsewhere)
    with pytest.raises(LedgerError) as caught:
        with Case.open(case_path) as case:
            export_case(case)
    assert caught.value.code == INVALID_ARGUMENT and "analysis" in caught.value.message
    assert snapshot(elsewhere) == before
    result = run_cli("export", str(case_path))
    assert result.returncode == 1 and result.stderr.startswith(b"error: INVALID_ARGUMENT: ")
    assert b"analysis" in result.stderr and snapshot(elsewhere) == before
    assert_refused_naming(lambda: verify_case(case_path), "analysis")


@pytest.mark.parametrize("inner", ["analysis/case", "analysis/case/events", "analysis/evidence/content",
                                   "analysis/budgets/0001"])
def test_a_link_inside_the_export_folder_is_refused_by_export_and_verify(case_path, elsewhere, inner):
    with Case.open(case_path) as case:
        export_case(case)
    target = case_path / inner
    shutil.rmtree(target)
    target.symlink_to(elsewhere / "case" if inner.endswith("case") else elsewhere)
    before = snapshot(elsewhere)
    with Case.open(case_path) as case:
        assert_refused_naming(lambda: export_case(case), inner)
    assert_refused_naming(lambda: verify_case(case_path), inner)
    assert snapshot(elsewhere) == before


@pytest.mark.parametrize("name", ["manifest.json", "ledger.sqlite-lock", "ledger.sqlite-export-lock",
                                  "ledger.sqlite-wal", "ledger.sqlite-shm"])
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_link_in_place_of_an_own_file_is_refused_by_every_command(case_path, tmp_path, name):
    outside = tmp_path / "outside.file"
    (case_path / name).unlink(missing_ok=True)
    (case_path / name).symlink_to(outside)  # dangling: following it would create a file outside
    assert_refused_naming(lambda: Case.open(case_path), name)
    assert_refused_naming(lambda: verify_case(case_path), name)
    result = run_cli("balances", str(case_path))
    assert result.returncode == 1 and name.encode() in result.stderr
    for reading in (("sql", str(case_path), "SELECT * FROM case_status"), ("serve", str(case_path), "--metadata-only")):
        result = run_cli(*reading)  # the read-only paths too: a reader maps -shm and may create -wal
        assert result.returncode == 1 and result.stderr.startswith(b"error: INVALID_ARGUMENT: ") \
            and name.encode() in result.stderr, (reading, result.stderr)
    assert not outside.exists()


@pytest.mark.parametrize("log_holds_events", [True, False])
def test_the_lock_files_are_never_opened_through_a_link(case_path, tmp_path, log_holds_events):
    """Even if a link appears after the case was opened, the lock is not taken through it; closing then
    warns that the log it could not fold in keeps what it holds (a log holding nothing: no warning)."""
    outside = tmp_path / "outside.lock"
    case = Case.open(case_path)
    try:
        if log_holds_events:
            case.budget().settle("H1", "q1", 50, "fine")
        for name in ("ledger.sqlite-lock", "ledger.sqlite-export-lock"):
            (case_path / name).unlink(missing_ok=True)
            (case_path / name).symlink_to(outside)
        with pytest.raises(LedgerError) as caught:
            case.budget().reserve("H1", "q2", "source.read_context")
        assert caught.value.code == INVALID_ARGUMENT and "ledger.sqlite-lock" in caught.value.message
    finally:
        with warnings.catch_warnings(record=True) as caught_warnings:
            warnings.simplefilter("always")
            case.close()  # closing does not take the lock through the link either, so the log stays
    checkpoint = [str(w.message) for w in caught_warnings if w.category is CheckpointWarning]
    if log_holds_events:
        assert len(checkpoint) == 1 and "is a symbolic link where the case package keeps its lock file" in checkpoint[0]
    else:
        assert checkpoint == []
    assert not outside.exists()


def test_create_refuses_a_dangling_ledger_link(tmp_path):
    root = make_package(tmp_path / "new")
    (root / "ledger.sqlite").symlink_to(tmp_path / "elsewhere.sqlite")
    assert_refused_naming(lambda: Case.create(root, "BUG-6"), "ledger.sqlite")
    assert not (tmp_path / "elsewhere.sqlite").exists()


def test_import_refuses_a_linked_target_and_links_in_the_source(case_path, tmp_path, elsewhere):
    with Case.open(case_path) as case:
        export_case(case)
    before = snapshot(elsewhere)
    empty = tmp_path / "empty"
    empty.mkdir()
    link = tmp_path / "linked-target"
    link.symlink_to(empty)
    assert_refused_naming(lambda: import_tree(case_path, link), "linked-target")
    assert list(empty.iterdir()) == []
    source = tmp_path / "source"
    shutil.copytree(case_path, source, ignore=shutil.ignore_patterns("ledger.sqlite*"))
    shutil.rmtree(source / "analysis" / "evidence")
    (source / "analysis" / "evidence").symlink_to(elsewhere)
    with pytest.raises(LedgerError) as caught:
        import_tree(source, tmp_path / "imported")
    assert caught.value.code == INVALID_ARGUMENT and "analysis/evidence" in caught.value.message
    assert snapshot(elsewhere) == before and not (tmp_path / "imported").exists()


def test_demo_refuses_a_linked_folder(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "demo").symlink_to(real)
    assert_refused_naming(lambda: run_demo(tmp_path / "demo", echo=lambda line: None), "demo")
    assert list(real.iterdir()) == []


# --- nothing but a case's own commands writes inside its package -------------------------------
# A file written in another command's output folder inside a package would replace the ledger
# or its log, stand among the exported files (so verify fails), or hide a new case inside this
# one from --all: every path a command writes to is refused there, before any work.

def _exported(case_path: Path) -> Path:
    with Case.open(case_path) as case:
        export_case(case)
    return case_path


RUNS = Path(__file__).resolve().parent / "data" / "trajectories"
WRITERS_INTO = {
    "simulate --per-run over the ledger": lambda c, t: ["simulate", str(RUNS), "--outcomes", str(RUNS / "outcomes.csv"),
                                                          "--per-run", str(c / "ledger.sqlite")],
    "simulate --per-run as its log": lambda c, t: ["simulate", str(RUNS), "--outcomes", str(RUNS / "outcomes.csv"),
                                                     "--per-run", str(c / "ledger.sqlite-wal")],
    "simulate --emit in the export": lambda c, t: ["simulate", str(RUNS), "--outcomes", str(RUNS / "outcomes.csv"),
                                                     "--frontier", "--vary", "max_low_information_steps=2,4",
                                                     "--max-stopped", "failed=100", "--emit",
                                                     str(c / "analysis" / "policy.toml")],
    "runs import --out in the export": lambda c, t: ["runs", "import", str(RUNS), "--out", str(c / "analysis" / "runs")],
    "fleet export --to in the export": lambda c, t: ["fleet", "export", str(t / "other"), "--to", str(c / "analysis" / "f")],
    "fleet export --to in the package": lambda c, t: ["fleet", "export", str(t / "other"), "--to", str(c / "fleet")],
    "init inside the package": lambda c, t: ["init", str(c / "data" / "nested"), "--case-id", "BUG-7"],
    "demo inside the package": lambda c, t: ["demo", str(c / "demo")],
    "apply --create in the export": lambda c, t: ["apply", str(c / "analysis" / "n"), "-", "--create", "BUG-7"],
    "import --to inside another package": lambda c, t: ["import", str(t / "other"), "--to", str(c / "sources" / "x")],
}


@pytest.mark.parametrize("writer", WRITERS_INTO, ids=list(WRITERS_INTO))
@pytest.mark.sampled(every=4)
def test_no_command_writes_its_output_inside_a_case_package(case_path, tmp_path, writer):
    _exported(case_path)
    other = tmp_path / "other"
    with Case.create(other, "BUG-8") as case:
        export_case(case)
    before = snapshot(case_path)
    done = run_cli(*WRITERS_INTO[writer](case_path, tmp_path), stdin=b'{"op": "check"}\n')
    assert done.returncode == 1, done.stderr
    error = done.stderr.decode()
    assert error.startswith("error: INVALID_ARGUMENT: ") and f"the case package {case_path}" in error, error
    assert snapshot(case_path) == before
    assert verify_case(case_path).head_seq > 0


def test_a_link_into_a_package_is_followed_before_the_path_is_judged(case_path, tmp_path):
    _exported(case_path)
    (tmp_path / "looks-outside").symlink_to(case_path / "analysis")
    before = snapshot(case_path)
    done = run_cli("simulate", str(RUNS), "--outcomes", str(RUNS / "outcomes.csv"),
                   "--per-run", str(tmp_path / "looks-outside" / "runs.jsonl"))
    assert done.returncode == 1 and b"is inside the case package" in done.stderr, done.stderr
    assert snapshot(case_path) == before


def test_the_library_refuses_new_cases_and_outputs_inside_a_package(case_path, tmp_path):
    from ledger import export_fleet, import_runs

    _exported(case_path)
    import_tree(case_path, tmp_path / "copy")
    before = snapshot(case_path)
    attempts = {
        "Case.create": lambda: Case.create(case_path / "data" / "nested", "BUG-7"),
        "import_tree": lambda: import_tree(tmp_path / "copy", case_path / "sources" / "x"),
        "import_runs": lambda: import_runs([RUNS], case_path / "runs"),
        "export_fleet": lambda: export_fleet([case_path], case_path / "fleet"),
    }
    for name, attempt in attempts.items():
        with pytest.raises(LedgerError) as caught:
            attempt()
        assert caught.value.code == INVALID_ARGUMENT and "is inside the case package" in caught.value.message, name
    assert snapshot(case_path) == before


def test_a_folder_beside_a_package_or_holding_packages_is_not_inside_one(case_path, tmp_path):
    from ledger import export_fleet

    _exported(case_path)
    (tmp_path / "notes").mkdir()
    report = export_fleet([tmp_path], tmp_path / "notes" / "fleet")  # a folder of cases holds the export
    assert report.to_dict()["exported"] == 1
    done = run_cli("init", str(tmp_path / "beside"), "--case-id", "BUG-7")
    assert done.returncode == 0, done.stderr


def test_a_fleet_export_writes_through_no_link_inside_its_folder(case_path, tmp_path):
    """A table folder or a case's partition folder of an export that is a link (to a package's
    analysis/, say) is refused, naming it, and the package is left as it was."""
    from ledger import export_fleet

    _exported(case_path)
    out = tmp_path / "fleet"
    export_fleet([case_path], out)
    other = tmp_path / "other"
    with Case.create(other, "BUG-9") as case:
        export_case(case)
    before = snapshot(other)
    shutil.rmtree(out / "actions")
    (out / "actions").symlink_to(other / "analysis")
    for links in ("the table folder", "a partition folder"):
        with Case.open(case_path) as case:
            case.budget().grant("H1", 1, "controller", "more", f"g-{len(links)}")
        with pytest.raises(LedgerError) as refused:
            export_fleet([case_path], out)
        assert refused.value.code == INVALID_ARGUMENT and "is a symbolic link" in refused.value.message
        if links == "the table folder":
            (out / "actions").unlink()
            (out / "actions").mkdir()
            (out / "actions" / "case_id=BUG-6").symlink_to(other / "analysis")
    assert snapshot(other) == before and verify_case(other).head_seq == 1


def test_init_refuses_a_folder_holding_a_lost_ledgers_log_and_keeps_it(tmp_path):
    """A write-ahead log without its ledger holds committed writes: a new ledger there would have
    SQLite delete it, so init and apply --create refuse (CASE_EXISTS, LEDGER_MISSING) and keep it."""
    folder = tmp_path / "lost"
    folder.mkdir()
    (folder / "ledger.sqlite-wal").write_bytes(b"committed writes")
    with pytest.raises(LedgerError) as refused:
        Case.create(folder, "NEW-1")
    assert refused.value.code == "CASE_EXISTS" and "ledger.sqlite-wal but no ledger.sqlite" in refused.value.message
    done = run_cli("apply", str(folder), "-", "--create", "NEW-1", stdin=b'{"op": "snapshot"}\n')
    assert done.returncode == 1 and b"LEDGER_MISSING" in done.stderr and b"ledger.sqlite-wal" in done.stderr
    assert sorted(os.listdir(folder)) == ["ledger.sqlite-wal"]
    assert (folder / "ledger.sqlite-wal").read_bytes() == b"committed writes"


def test_an_emptied_ledger_beside_its_log_is_refused_by_every_command_and_the_log_kept(case_path, tmp_path):
    """An empty (zero-byte) ledger.sqlite beside a log holding writes: SQLite, opening the empty file,
    would delete the log, so every reader and writer refuses (LEDGER_MISSING, init CASE_EXISTS) before
    opening it, and the log stays byte for byte."""
    from ledger import read_only_query

    with Case.open(case_path) as case:
        case.storage.conn.execute("PRAGMA wal_autocheckpoint = 0")
        case.budget().grant("H1", 1, "controller", "more", "g-1")
        wal = (case_path / "ledger.sqlite-wal").read_bytes()  # committed, not yet folded in
    journal = bytes.fromhex("d9d505f920a163d7") + (0).to_bytes(4, "big") + b"salt" + (76).to_bytes(4, "big")
    for log, data in (("ledger.sqlite-wal", wal), ("ledger.sqlite-journal", journal + b"\0" * 492)):
        folder = tmp_path / log.rsplit("-", 1)[1]
        folder.mkdir()
        (folder / "ledger.sqlite").write_bytes(b"")
        (folder / log).write_bytes(data)
        for code, attempt in (("LEDGER_MISSING", lambda: Case.open(folder)),
                              ("LEDGER_MISSING", lambda: verify_case(folder)),
                              ("LEDGER_MISSING", lambda: export_case(folder)),
                              ("LEDGER_MISSING", lambda: read_only_query(folder, "SELECT 1")),
                              ("CASE_EXISTS", lambda: Case.create(folder, "NEW-1"))):
            with pytest.raises(LedgerError) as refused:
                attempt()
            assert refused.value.code == code and log in refused.value.message
        done = run_cli("state", str(folder))
        assert done.returncode == 1 and done.stderr.startswith(b"error: LEDGER_MISSING: ") and log.encode() in done.stderr
        assert sorted(os.listdir(folder)) == ["ledger.sqlite", log]
        assert (folder / log).read_bytes() == data and (folder / "ledger.sqlite").read_bytes() == b""


def test_init_runs_again_where_an_interrupted_init_left_an_empty_ledger_and_its_journal(tmp_path):
    """What an init killed while SQLite switched the new file to its log left: an empty ledger.sqlite
    and a -journal recording an empty file. Nothing of a ledger is in it, so init runs again."""
    folder = tmp_path / "half"
    folder.mkdir()
    (folder / "ledger.sqlite").write_bytes(b"")
    header = bytes.fromhex("d9d505f920a163d7") + (0).to_bytes(4, "big") + b"salt" + (0).to_bytes(4, "big")
    (folder / "ledger.sqlite-journal").write_bytes(header + b"\0" * 492)
    with Case.create(folder, "BUG-7") as case:
        assert case.status()["case_id"] == "BUG-7"
    assert verify_case(folder).head_seq == 1


def test_build_folders_of_killed_imports_and_demos_are_not_cases(case_path, tmp_path):
    """verify --all and fleet export find the cases of a folder, not the hidden folders where an
    import or a demo builds a package (one a killed run left holds a whole ledger)."""
    from ledger import export_fleet
    from ledger.package_tools.many import case_folders

    cases = tmp_path / "cases"
    cases.mkdir()
    shutil.copytree(case_path, cases / "one")
    for hidden in (".one.importing-4242-17", ".ledger-demo-building-x.4242"):
        shutil.copytree(case_path, cases / hidden)
    assert case_folders([cases]) == [cases / "one"]
    assert export_fleet([cases], tmp_path / "fleet").to_dict()["exported"] == 1


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_link_loop_in_a_path_is_an_error_line_never_a_traceback(case_path, tmp_path):
    _exported(case_path)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for args in (["import", str(case_path), "--to", str(tmp_path / "loop" / "q")],
                 ["verify", str(tmp_path / "loop" / "x"), str(case_path)],
                 ["export", str(tmp_path / "loop" / "x"), str(case_path)]):
        done = run_cli(*args)  # one case: an error line; several: a line per case, the loop's failed
        assert done.returncode == 1 and b"Traceback" not in done.stderr + done.stdout, (args, done.stderr)
        assert done.stderr.startswith(b"error: ") or b"1 ok, 1 failed" in done.stdout, (args, done.stdout)


def test_a_new_case_named_like_a_build_folder_is_refused(tmp_path):
    """import --to and demo remove a killed run's hidden build folder by its name, and verify --all
    passes such folders by: a case may not be made under such a name (this process's own build
    folders, named with its pid, excepted)."""
    for name in (".mine.importing-99999-1", ".ledger-demo-building-mine.99999"):
        for attempt in (lambda: Case.create(tmp_path / name, "MINE-1"),
                        lambda: run_demo(tmp_path / name, echo=lambda line: None)):
            with pytest.raises(LedgerError) as refused:
                attempt()
            assert refused.value.code == INVALID_ARGUMENT and "the ledger's own build folder" in refused.value.message
        assert not (tmp_path / name).exists()


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_an_output_named_like_a_ledgers_own_file_is_refused(tmp_path):
    """A file or folder named ledger.sqlite or like its side files makes the folder holding it look
    like a (damaged) case package, hiding that folder's cases from --all and fleet export."""
    for name in ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-journal", "ledger.sqlite-lock"):
        done = run_cli("simulate", str(RUNS), "--per-run", str(tmp_path / name))
        assert done.returncode == 1 and b"is the name of a ledger's own file" in done.stderr, done.stderr
        with pytest.raises(LedgerError) as refused:
            Case.create(tmp_path / name, "MINE-2")
        assert refused.value.code == INVALID_ARGUMENT
    assert list(tmp_path.iterdir()) == []


def test_a_fleet_export_locks_through_no_link_and_no_pipe(case_path, tmp_path):
    from ledger import export_fleet, fleet_query

    _exported(case_path)
    out = tmp_path / "fleet"
    export_fleet([case_path], out)
    victim = tmp_path / "victim"
    victim.mkdir()
    lock = out / "_fleet" / "cases" / "case_id=BUG-6.lock"
    lock.unlink()
    lock.symlink_to(victim / "STRAY")
    with Case.open(case_path) as case:
        case.budget().grant("H1", 1, "controller", "more", "g-lock")
    [failed] = export_fleet([case_path], out).to_dict()["failed"]  # the case fails; the others would go on
    assert failed["error"]["code"] == INVALID_ARGUMENT and "is a symbolic link" in failed["error"]["message"]
    assert list(victim.iterdir()) == []
    (out / "_fleet" / "lock").unlink(missing_ok=True)
    os.mkfifo(out / "_fleet" / "lock")
    with pytest.raises(LedgerError) as refused:  # at once: a pipe is never waited on
        fleet_query(out, "SELECT 1", timeout_ms=2000)
    assert refused.value.code == INVALID_ARGUMENT and "no regular file" in refused.value.message


def test_a_case_package_in_a_partitions_place_is_refused_and_left_alone(case_path, tmp_path):
    from ledger import export_fleet

    _exported(case_path)
    out = tmp_path / "fleet"
    export_fleet([case_path], out)
    partition = out / "events" / "case_id=BUG-6"
    shutil.rmtree(partition)
    with Case.create(partition, "BUG-10") as case:  # made before the rule: a package where one belongs
        export_case(case)
    before = snapshot(partition)
    with Case.open(case_path) as case:
        case.budget().grant("H1", 1, "controller", "more", "g-partition")
    [failed] = export_fleet([case_path], out).to_dict()["failed"]
    assert failed["error"]["code"] == INVALID_ARGUMENT and "is the case package" in failed["error"]["message"]
    assert snapshot(partition) == before
