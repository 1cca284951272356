"""Regressions for the break-it findings on verify, storage and the read paths."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ledger import importer
from ledger import AnalysisConfig, Case, LedgerError, export_case, import_tree, read_only_query, verify_case
from ledger.clock import format_utc
from ledger.errors import INTEGRITY_ERROR
from ledger.readonly import readonly_query

from conftest import run_cli
from test_regressions import _read_only_mount

READ_COMMANDS = (["state"], ["balances"], ["events"], ["sql", "SELECT COUNT(*) AS n FROM events"], ["verify"])


def _leave_shm_and_empty_wal(case) -> None:
    """What an earlier read-only connection leaves (a reader such as the sqlite3 shell with -readonly):
    ``-shm`` and a 0-byte ``-wal`` beside the ledger, plus the lock file."""
    case.close()
    reader = sqlite3.connect(f"file:{case.path / 'ledger.sqlite'}?mode=ro", uri=True)
    assert reader.execute("SELECT COUNT(*) FROM events").fetchone()[0] > 0
    reader.close()
    for suffix, size in (("-shm", None), ("-wal", 0), ("-lock", 0)):
        sidecar = case.path / ("ledger.sqlite" + suffix)
        assert sidecar.exists() and (size is None or sidecar.stat().st_size == size), suffix


def test_a_read_only_mount_with_shm_and_an_empty_wal_is_read_as_an_immutable_snapshot(budget, case):
    """Read-only locations: reads work whatever -shm/lock files lie there; writes are STORAGE_ERROR."""
    budget.reserve("H1", "q1", "source.read_context")
    _leave_shm_and_empty_wal(case)
    folder, undo = _read_only_mount(case.path)
    try:
        opened = Case.open(folder)
        assert opened.storage.read_only is True
        assert opened.status()["package_generation"] == 5
        assert [row["spent_units"] for row in opened.balances()][:1] == [5]
        assert opened.close() is None  # closing never needs the writer lock file
        assert verify_case(folder).head_seq == 5
        assert readonly_query(folder / "ledger.sqlite", "SELECT COUNT(*) FROM events") == (["COUNT(*)"], [(5,)])
        write = run_cli("state", str(folder), "BLOCKED")
        assert write.returncode == 1 and b"error: STORAGE_ERROR: " in write.stderr and b"read-only" in write.stderr
    finally:
        undo()


def test_closing_a_reader_whose_lock_file_cannot_be_opened_skips_the_checkpoint(case, tmp_path):
    """Read-only locations: a reader in a folder it may not write closes without the writer lock."""
    case.storage._lock.path = tmp_path / "no-such-folder" / "ledger.sqlite-lock"
    assert case.close() is None
    assert not (tmp_path / "no-such-folder").exists()


def _as_other_user(folder: Path) -> list[str]:
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to run as another user")
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import ledger_cli"], capture_output=True,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    if probe.returncode != 0:
        pytest.skip("the other user cannot run this Python")
    return prefix


@pytest.mark.slow
@pytest.mark.parametrize("with_shm", [True, False])
def test_every_read_command_follows_one_rule_in_a_folder_this_user_may_not_write(budget, case, with_shm):
    """Read-only locations (not-writable folder): with -shm every read works, without it every read is STORAGE_ERROR."""
    budget.reserve("H1", "q1", "source.read_context")
    if with_shm:
        _leave_shm_and_empty_wal(case)
    else:
        case.close()
    shared = Path(tempfile.mkdtemp(prefix="ledger-shared-"))
    shared.chmod(0o755)
    folder = shared / "case"
    shutil.copytree(case.path, folder)
    try:
        prefix = _as_other_user(folder)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        for command in READ_COMMANDS:
            done = subprocess.run([*prefix, sys.executable, "-m", "ledger_cli", command[0], str(folder), *command[1:]],
                                  capture_output=True, env=env)
            if with_shm:
                assert done.returncode == 0, (command, done.stderr)
            else:
                assert done.returncode == 1 and done.stderr.startswith(b"error: STORAGE_ERROR: "), (command, done.stderr)
        write = subprocess.run([*prefix, sys.executable, "-m", "ledger_cli", "state", str(folder), "BLOCKED"],
                               capture_output=True, env=env)
        assert write.returncode == 1 and write.stderr.startswith(b"error: STORAGE_ERROR: ")
    finally:
        folder.chmod(0o755)
        shutil.rmtree(shared)


# --- event times ahead of the auditor's clock ----------------------------------------------------
def _ahead(minutes: int) -> str:
    return format_utc(datetime.now(timezone.utc) + timedelta(minutes=minutes))


def test_verify_and_import_never_fail_on_a_time_ahead_of_the_local_clock(package, tmp_path):
    """Times: a writer's clock (or tolerance) ahead of the auditor's is a note, not tampering."""
    wide = AnalysisConfig.from_mapping({"limits": {"at_future_tolerance_ms": 3_600_000}})
    with Case.create(package, "C1", analysis_config=wide, at=_ahead(30)) as case:
        export_case(case)
    report = verify_case(package)
    assert report.head_seq == 1 and report.future_events == 1
    assert 25 * 60_000 < report.future_max_lead_ms <= 30 * 60_000
    assert any("1 event(s) are dated ahead of this machine's clock" in line for line in report.notes())
    imported = import_tree(package, tmp_path / "copy")
    assert imported.head_seq == 1
    done = run_cli("verify", str(package), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["future_events"] == 1
    text = run_cli("verify", str(package))
    assert text.returncode == 0 and b"dated ahead of this machine's clock" in text.stdout


def test_a_case_dated_in_the_past_reports_no_future_events(budget, case):
    report = verify_case(case.path)
    assert (report.future_events, report.future_max_lead_ms) == (0, 0)
    assert not any("ahead of this machine's clock" in line for line in report.notes())


# --- foreign indexes that can block the ledger's writes ------------------------------------------
BLOCKING_INDEXES = {
    "an index on an expression": "CREATE INDEX my_expr ON events(json(CASE WHEN seq > 5 THEN 'x' ELSE '1' END))",
    "a partial index (WHERE)": "CREATE INDEX my_expr ON events(seq) WHERE json(CASE WHEN seq > 5 THEN 'x' ELSE '1' END)",
    "a UNIQUE index": "CREATE UNIQUE INDEX my_expr ON events(type)",
    "an expression among plain columns": "CREATE INDEX my_expr ON events(seq, lower(type))",
}


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


# --- verify --strict without a (complete) export -------------------------------------------------
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


# --- messages: altered tables, interrupted init, schema_migrations rows ---------------------------
def _tamper(case, *statements: str) -> None:
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


def test_verify_names_a_ledger_table_with_an_added_column(budget, case):
    """Schema check: a changed ledger table is named before any row comparison."""
    _tamper(case, "ALTER TABLE events ADD COLUMN note TEXT")
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and caught.value.details["object"] == "events"
    assert "the ledger's events is missing or altered" in caught.value.message


def test_sql_on_an_interrupted_init_is_ledger_missing_like_every_other_command(tmp_path):
    folder = tmp_path / "half"
    folder.mkdir()
    sqlite3.connect(folder / "ledger.sqlite").execute("PRAGMA journal_mode = WAL").fetchall()
    done = run_cli("sql", str(folder), "SELECT COUNT(*) FROM events")
    assert done.returncode == 1
    assert done.stderr.startswith(b"error: LEDGER_MISSING: ") and b"interrupted init" in done.stderr
    with pytest.raises(LedgerError) as caught:
        read_only_query(folder, "SELECT 1")
    assert caught.value.code == "LEDGER_MISSING"


def _unguard_migrations(where: str) -> tuple[str, ...]:
    return ("DROP TRIGGER schema_migrations_no_delete", f"DELETE FROM schema_migrations {where}",
            "CREATE TRIGGER schema_migrations_no_delete BEFORE DELETE ON schema_migrations\n"
            "BEGIN\n    SELECT RAISE(ABORT, 'append-only: schema_migrations rows cannot be deleted');\nEND")


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


def test_deleting_the_last_schema_migrations_row_fails_verify_and_the_next_open_migrates_nothing(budget, case):
    last = case.storage.one("schema_version")[0]
    _tamper(case, *_unguard_migrations(f"WHERE version = {last}"))
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and f"no row for version {last}" in caught.value.message
    with pytest.raises(LedgerError) as opened:
        Case.open(case.path)
    assert opened.value.code == INTEGRITY_ERROR and "nothing was migrated" in opened.value.message
    with sqlite3.connect(case.path / "ledger.sqlite") as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] < last
    conn.close()


# --- import: abandoned build folders, concurrent imports ------------------------------------------
def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def exported(budget, case):
    export_case(case)
    case.close()
    return case.path


def test_an_import_removes_the_build_folders_of_killed_imports_to_the_same_target(exported, tmp_path):
    """Import: hidden .X.importing-<pid>-<n> folders of dead processes are removed, live ones kept."""
    dead = tmp_path / f".copy.importing-{_dead_pid()}-17"
    alive = tmp_path / f".copy.importing-{os.getpid()}-18"
    other = tmp_path / f".copy2.importing-{_dead_pid()}-19"
    for folder in (dead, alive, other):
        (folder / "analysis").mkdir(parents=True)
        (folder / "ledger.sqlite-import").write_bytes(b"half")
    assert import_tree(exported, tmp_path / "copy").head_seq == 4
    assert not dead.exists() and alive.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if ".importing-" in p.name) == [alive.name, other.name]


def test_an_import_whose_target_is_taken_meanwhile_is_case_exists_and_leaves_nothing(exported, tmp_path):
    target = tmp_path / "copy"
    real_rebuild = importer._rebuild

    def rebuild_then_lose_the_race(*args, **kwargs):
        real_rebuild(*args, **kwargs)
        target.mkdir()
        (target / "winner.txt").write_text("another import got here first")

    importer._rebuild = rebuild_then_lose_the_race
    try:
        with pytest.raises(LedgerError) as caught:
            import_tree(exported, target)
    finally:
        importer._rebuild = real_rebuild
    assert caught.value.code == "CASE_EXISTS" and "was taken while the import ran" in caught.value.message
    assert sorted(p.name for p in target.iterdir()) == ["winner.txt"]
    assert not [p for p in tmp_path.iterdir() if ".importing-" in p.name]


def test_concurrent_imports_to_one_target_one_wins_the_others_are_case_exists(exported, tmp_path):
    outcomes: list[str] = []

    def run() -> None:
        try:
            import_tree(exported, tmp_path / "copy")
            outcomes.append("ok")
        except LedgerError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["CASE_EXISTS", "CASE_EXISTS", "ok"]
    assert verify_case(tmp_path / "copy").head_seq == 4
    assert not [p for p in tmp_path.iterdir() if ".importing-" in p.name]
