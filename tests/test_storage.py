"""docs/architecture.md: WAL, append-only tables guarded by triggers, schema versions, rollback."""

from __future__ import annotations

import sqlite3
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

import ledger.storage.connection as storage_module
from ledger import (Case, LedgerError, export_case, read_only_query, verify_case,
    BudgetConfig, CheckpointWarning)
from ledger.ground.errors import (INTEGRITY_ERROR, SCHEMA_VERSION, INVALID_ARGUMENT, STORAGE_ERROR)
from ledger.storage.sqlfiles import schema_version, split_statements
from conftest import logical_dump, read_only_mount, run_cli, EXAMPLE_BUDGET, start_case
from ledger.storage.readonly import readonly_query
LEDGER_TABLES = ("events", "contents", "evidence_records", "case_identity", "lifecycle", "revisions",
                 "hypotheses", "policies", "accounts", "grants", "reservations", "results",
                 "result_sources", "closings", "terminations", "schema_migrations")


@pytest.fixture
def filled(budget, case):
    budget.reserve("H1", "a1", "source.read_context")
    budget.record_result("H1", "a1", {"finding": "x"}, ["sources/app.py"])
    budget.settle("H1", "a1", 80, "good")
    budget.reserve("H2", "b1", "research.lookup")
    budget.fail("H2", "b1", "timeout")
    budget.reject("H2", "no")
    return case.path / "ledger.sqlite"


def raw(path, seed=True):
    """A plain sqlite3 connection with default settings, as an outsider would open it.

    Tables the fixture leaves empty get one row (tied to the newest event, which
    the guards allow) so that UPDATE and DELETE triggers have something to fire on.
    """
    conn = sqlite3.connect(path)
    if seed and conn.execute("SELECT COUNT(*) FROM grants").fetchone()[0] == 0:
        conn.execute("INSERT INTO grants VALUES (1, 'H1', 'g1', (SELECT MAX(seq) FROM events), 5)")
        conn.execute("INSERT INTO evidence_records VALUES ('E000001', (SELECT MAX(seq) FROM events), 1, 'H1', "
                     "'a1', 'op-1', (SELECT sha256 FROM contents LIMIT 1), NULL, 100, '{}')")
        conn.commit()
    return conn


def test_the_ledger_uses_wal_full_sync_foreign_keys_and_a_busy_timeout(case):
    conn = case.storage.conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    assert conn.isolation_level is None


def test_the_schema_version_is_recorded_and_a_newer_file_is_refused(case, package):
    assert case.query("SELECT MAX(version) AS v FROM schema_migrations") == [{"v": schema_version()}]
    case.close()
    conn = raw(package / "ledger.sqlite", seed=False)
    conn.execute("DROP TRIGGER schema_migrations_insert_guard")
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 'x')")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as caught:
        Case.open(package)
    assert caught.value.code == SCHEMA_VERSION
    with pytest.raises(LedgerError) as caught:  # the read-only query too: its views may mean other things
        read_only_query(package, "SELECT * FROM case_status")
    assert caught.value.code == SCHEMA_VERSION and "schema version 999" in caught.value.message
    # refused, the reader's -wal and -shm go as after a read (the query left them, docs/files.md)
    assert sorted(p.name for p in package.iterdir() if p.name.startswith("ledger.sqlite-")) == ["ledger.sqlite-lock"]


@pytest.mark.parametrize("table", LEDGER_TABLES)
@pytest.mark.sampled(every=4)
def test_update_and_delete_are_refused_on_every_table(filled, table):
    conn = raw(filled)
    before = logical_dump(filled)
    column = conn.execute(f"PRAGMA table_info({table})").fetchall()[0][1]
    for statement in (f"UPDATE {table} SET {column} = {column}", f"DELETE FROM {table}"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(statement)
    conn.rollback()
    conn.close()
    assert logical_dump(filled) == before


def copy_row_sql(conn, table, verb, *, seq_shift=0, suffix=""):
    columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    select = ", ".join(f"{c} + {seq_shift}" if c == "seq" and seq_shift else c for c in columns)
    return (f"{verb} INTO {table} ({', '.join(columns)}) SELECT {select} FROM {table} "
            f"ORDER BY rowid DESC LIMIT 1 {suffix}")


@pytest.mark.parametrize("table", LEDGER_TABLES)
@pytest.mark.parametrize("verb", ["INSERT", "INSERT OR REPLACE", "REPLACE", "INSERT OR IGNORE"])
@pytest.mark.sampled(every=4)
def test_duplicate_and_replacing_inserts_are_refused_on_every_table(filled, table, verb):
    conn = raw(filled)
    before = logical_dump(filled)
    with pytest.raises(sqlite3.DatabaseError):
        conn.execute(copy_row_sql(conn, table, verb))
        # INSERT OR IGNORE may swallow a plain constraint error: it must still change nothing
        assert logical_dump(filled) == before
        raise sqlite3.IntegrityError("ignored")
    conn.rollback()
    conn.close()
    assert logical_dump(filled) == before


@pytest.mark.parametrize("table", LEDGER_TABLES)
@pytest.mark.sampled(every=4)
def test_upserts_are_refused_on_every_table(filled, table):
    conn = raw(filled)
    before = logical_dump(filled)
    first = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")][0]
    # "WHERE true" lets SQLite parse the ON CONFLICT clause after a SELECT
    statement = (copy_row_sql(conn, table, "INSERT").replace(f"FROM {table} ORDER BY", f"FROM {table} WHERE true ORDER BY")
                 + f" ON CONFLICT DO UPDATE SET {first} = excluded.{first}")
    with pytest.raises(sqlite3.DatabaseError):
        conn.execute(statement)
    conn.rollback()
    conn.close()
    assert logical_dump(filled) == before


def test_out_of_order_forked_and_gapped_event_inserts_are_refused(filled):
    conn = raw(filled)
    head_seq, head_sha = conn.execute("SELECT seq, sha256 FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    template = ("INSERT INTO events (seq, type, revision, stream, stream_seq, created_at, sha256, parent_sha256, body) "
                "VALUES (?, 'budget.reserved', 1, 'budget', 999, 'x', ?, ?, '{}')")
    cases = [
        (head_seq + 2, "a" * 64, head_sha),          # gap
        (head_seq, "b" * 64, head_sha),              # reuses a seq
        (head_seq + 1, "c" * 64, "0" * 64),          # forks from genesis
        (3, "d" * 64, "0" * 64),                     # rewrites the past
        (1, "e" * 64, "0" * 64),                     # a second genesis
    ]
    for values in cases:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(template, values)
    conn.close()


def test_helper_rows_cannot_be_attached_to_an_older_event(filled):
    conn = raw(filled)
    with pytest.raises(sqlite3.IntegrityError, match="newest event"):
        conn.execute("INSERT INTO reservations VALUES (1, 'H1', 'zz', 5, 'source.read_context', 5)")
    conn.close()


def test_split_statements_keeps_trigger_bodies_whole():
    script = "CREATE TABLE t (a);\n-- c\nCREATE TRIGGER g BEFORE DELETE ON t\nBEGIN\n  SELECT 1;\n  SELECT 2;\nEND;\n"
    assert split_statements(script) == [
        "CREATE TABLE t (a);", "-- c\nCREATE TRIGGER g BEFORE DELETE ON t\nBEGIN\n  SELECT 1;\n  SELECT 2;\nEND;"]


def test_a_sqlite_refusal_inside_an_operation_is_an_integrity_error_and_rolls_back(budget, case):
    budget.reserve("H1", "a1", "source.read_context")
    before = logical_dump(case.path / "ledger.sqlite")

    def sabotage(label):
        if label == "insert_reservation":
            case.storage.conn.execute("INSERT INTO grants VALUES (1, 'H1', 'g', 1, 5)")  # wrong seq: refused

    case.storage.fault_hook = sabotage
    with pytest.raises(LedgerError) as caught:
        budget.reserve("H2", "b1", "source.read_context")
    assert caught.value.code == INTEGRITY_ERROR
    case.storage.fault_hook = None
    assert logical_dump(case.path / "ledger.sqlite") == before
    assert not case.storage.conn.in_transaction
    assert budget.reserve("H2", "b1", "source.read_context").reused is False


def test_close_checkpoints_the_wal(budget, case):
    for i in range(20):
        budget.reserve("H1", f"a{i}", "source.read_context")
        budget.record_result("H1", f"a{i}", {"i": i})
        budget.settle("H1", f"a{i}", 100, "new")
    wal = case.path / "ledger.sqlite-wal"
    assert wal.exists() and wal.stat().st_size > 0
    case.close()
    assert not wal.exists() or wal.stat().st_size == 0


def test_the_balances_view_and_its_recomputation_from_rows_agree(budget, case):
    budget.reserve("H1", "a1", "source.read_context")
    budget.record_result("H1", "a1", {"x": 1})
    budget.settle("H1", "a1", 90, "good")
    budget.reserve("H1", "a2", "source.read_context")
    budget.reserve("H2", "b1", "research.lookup")
    budget.fail("H2", "b1", "timeout")
    budget.reject("H2", "no")
    fast = case.query("SELECT * FROM balances ORDER BY revision, hypothesis_id")
    slow = case.query("SELECT * FROM balances_recomputed ORDER BY revision, hypothesis_id")
    assert fast == slow
    assert [(r["hypothesis_id"], r["remaining_units"], r["pending_action_id"], r["status"]) for r in fast] == [
        ("H1", 93, "a2", "investigating"), ("H2", 80, None, "rejected")]


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


def test_side_files_left_read_only_by_a_read_of_a_read_only_ledger_do_not_stop_its_next_writer(tmp_path):
    """A reader of a ledger made read-only (chmod a-w) left -wal and -shm read-only, as SQLite copies
    the ledger's modes; once the ledger was writable again every write was STORAGE_ERROR ("attempt
    to write a readonly database") until the -shm was made writable by hand."""
    case = Case.create(tmp_path / "c", "RO-1")
    case.close()
    ledger = tmp_path / "c" / "ledger.sqlite"
    for suffix in ("-wal", "-shm"):  # as the read left them (an empty -shm is set up afresh by SQLite)
        Path(f"{ledger}{suffix}").write_bytes(b"")
        os.chmod(f"{ledger}{suffix}", 0o444)
    if os.geteuid() == 0 and shutil.which("setpriv"):  # as the owner without root's override of modes
        opened = subprocess.run(["setpriv", "--inh-caps=-all", "--bounding-set=-all", sys.executable, "-m",
                                 "ledger_cli", "revision", "open", str(tmp_path / "c"), "--hypothesis", "x"],
                                capture_output=True, text=True)
        assert opened.returncode == 0, opened.stderr
    else:
        with Case.open(tmp_path / "c") as again:
            again.open_revision([{"statement": "x"}])
    assert not os.path.exists(f"{ledger}-wal")  # the writer's close folded them away, as always
    with Case.open(tmp_path / "c") as again:
        assert again.status()["analysis_revision"] == 1


@pytest.mark.slow  # real processes: the slow lane (.ci/run) runs it
def test_a_read_of_a_ledger_made_read_only_warns_of_no_log_that_holds_nothing(tmp_path):
    """A command reading a ledger made read-only (chmod a-w) warned that its write-ahead log "was not
    emptied ... every committed operation is kept in it", of a log of 0 bytes."""
    case = Case.create(tmp_path / "c", "RO-2")
    case.close()
    os.chmod(tmp_path / "c" / "ledger.sqlite", 0o444)
    prefix = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"] if os.geteuid() == 0 else []
    if prefix and shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to drop root's override of modes")
    for _ in range(2):  # the second meets the -wal and -shm the first left (read-only, as the ledger)
        done = subprocess.run([*prefix, sys.executable, "-m", "ledger_cli", "state", str(tmp_path / "c")],
                              capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert (done.returncode, done.stderr) == (0, "")
        assert "case_id: RO-2" in done.stdout
        assert os.path.getsize(tmp_path / "c" / "ledger.sqlite-wal") == 0


def test_a_read_only_mount_with_shm_and_an_empty_wal_is_read_as_an_immutable_snapshot(budget, case):
    """Read-only locations: reads work whatever -shm/lock files lie there; writes are STORAGE_ERROR."""
    budget.reserve("H1", "q1", "source.read_context")
    _leave_shm_and_empty_wal(case)
    folder, undo = read_only_mount(case.path)
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


def test_a_read_only_copy_with_writes_in_its_wal_but_no_shm_is_refused_naming_the_log(budget, case, tmp_path):
    """A copy taken while a writer had the case open (its -wal holds writes), without the -shm SQLite
    needs to read them and cannot make on a read-only mount: every reader says so and what to do."""
    budget.reserve("H1", "q1", "source.read_context")
    copy = tmp_path / "copy"
    shutil.copytree(case.path, copy)
    assert (copy / "ledger.sqlite-wal").stat().st_size > 0
    (copy / "ledger.sqlite-shm").unlink()
    folder, undo = read_only_mount(copy)
    try:
        for read in (lambda: verify_case(folder), lambda: read_only_query(folder, "SELECT 1"),
                     lambda: Case.open(folder)):
            with pytest.raises(LedgerError) as caught:
                read()
            assert caught.value.code == STORAGE_ERROR
            assert caught.value.message.startswith(f"cannot read {folder / 'ledger.sqlite'}: ledger.sqlite-wal beside "
                                                   "it holds writes not yet folded into it, and SQLite needs "
                                                   "ledger.sqlite-shm beside them to read them"), caught.value.message
    finally:
        undo()


def test_closing_a_reader_whose_lock_file_cannot_be_opened_skips_the_checkpoint(case, tmp_path):
    """Read-only locations: a reader in a folder it may not write closes without the writer lock."""
    case.storage._lock.path = tmp_path / "no-such-folder" / "ledger.sqlite-lock"
    assert case.close() is None
    assert not (tmp_path / "no-such-folder").exists()


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


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_sql_on_an_interrupted_init_is_ledger_missing_like_every_other_command(tmp_path):
    folder = tmp_path / "half"
    folder.mkdir()
    sqlite3.connect(folder / "ledger.sqlite").execute("PRAGMA journal_mode = WAL").fetchall()
    done = run_cli("sql", str(folder), "SELECT COUNT(*) FROM events")
    assert done.returncode == 1
    assert done.stderr.startswith(b"error: LEDGER_MISSING: ") and b"holds no case (an init still running, or one interrupted: then run init again)" in done.stderr
    with pytest.raises(LedgerError) as caught:
        read_only_query(folder, "SELECT 1")
    assert caught.value.code == "LEDGER_MISSING"


# --- 3. a reader never stalls writers; close() says what it could not checkpoint ----------------
def test_writers_beside_an_open_reader_run_no_blocking_checkpoint(package, monkeypatch):
    case = start_case(package, units=10**6)
    budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
    budget.initialize()
    monkeypatch.setattr(storage_module, "WAL_RESTART_BYTES", 0)  # as if the WAL were past 8 MiB
    reader = sqlite3.connect(case.storage.path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM balances").fetchone()
    statements: list[str] = []
    case.storage.conn.set_trace_callback(statements.append)
    started = time.monotonic()
    for n in range(20):
        budget.reserve("H1", f"w{n}", "source.read_context")
        budget.record_result("H1", f"w{n}", {"n": n})
        budget.settle("H1", f"w{n}", 100, "new")
    elapsed = time.monotonic() - started
    case.storage.conn.set_trace_callback(None)
    checkpoints = [s for s in statements if "wal_checkpoint" in s]
    assert checkpoints and all("PASSIVE" in s for s in checkpoints)  # never RESTART or TRUNCATE
    assert not any("busy_timeout" in s for s in statements)
    assert elapsed < len(checkpoints) * 0.2  # the old code paid 200 ms per commit here
    reader.execute("ROLLBACK")
    reader.close()
    assert case.close() is None  # the reader has left: closing empties the log


def test_close_reports_a_checkpoint_a_reader_prevented_and_a_later_close_finishes_it(package):
    case = start_case(package)
    reader = sqlite3.connect(case.storage.path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM balances").fetchall()
    case.transition("EVALUATING")  # a write after the reader's snapshot
    started = time.monotonic()
    with pytest.warns(CheckpointWarning, match="another connection is reading"):
        report = case.close()
    assert time.monotonic() - started < 1.0  # did not wait the busy timeout
    assert "was not emptied" in report
    assert Path(str(case.storage.path) + "-wal").stat().st_size > 0
    reader.execute("ROLLBACK")
    reader.close()
    again = Case.open(package)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        assert again.close() is None
    wal = Path(str(again.storage.path) + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0


def test_the_cli_prints_the_incomplete_checkpoint_as_a_warning(package):
    start_case(package).close()
    reader = sqlite3.connect(package / "ledger.sqlite", isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM balances").fetchall()
    try:
        done = run_cli("state", str(package), "EVALUATING")
    finally:
        reader.execute("ROLLBACK")
        reader.close()
    assert done.returncode == 0, done.stderr
    assert b"warning: the write-ahead log" in done.stderr and b"Traceback" not in done.stderr


def test_opening_a_file_without_a_ledger_leaves_it_untouched(tmp_path):
    (tmp_path / "ledger.sqlite").write_bytes(b"")
    done = run_cli("state", str(tmp_path))
    assert done.returncode == 1 and b"LEDGER_MISSING" in done.stderr
    assert (tmp_path / "ledger.sqlite").read_bytes() == b""
    assert not (tmp_path / "ledger.sqlite-wal").exists()


def test_a_closed_case_says_so(case):
    case.close()
    with pytest.raises(LedgerError) as caught:
        case.status()
    assert caught.value.code == INVALID_ARGUMENT and "closed" in caught.value.message


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_case_on_a_read_only_location_can_be_read_and_verified_but_not_written(budget, case):
    budget.reserve("H1", "q1", "source.read_context")
    export_case(case)
    case.close()
    folder, undo = read_only_mount(case.path)
    try:
        with Case.open(folder) as opened:
            assert opened.status()["package_generation"] == 5
            assert [row["spent_units"] for row in opened.balances()][:1] == [5]
            with pytest.raises(LedgerError) as caught:
                opened.transition("BLOCKED")
            assert caught.value.code == STORAGE_ERROR
        assert verify_case(folder).head_seq == 5
        sql = run_cli("sql", str(folder), "SELECT COUNT(*) AS n FROM events", "--json")
        assert json.loads(sql.stdout) == [{"n": 5}], sql.stderr
        export = run_cli("export", str(folder))
        assert export.returncode == 1 and b"error: STORAGE_ERROR: " in export.stderr
    finally:
        undo()


def test_a_refusal_caught_inside_a_batch_rolls_back_alone_and_one_escaping_rolls_back_the_batch(budget, case):
    before = case.status()["package_generation"]
    with case.batch():
        kept = budget.reserve("H1", "q1", "source.read_context")
        with pytest.raises(LedgerError):
            budget.reserve("H9", "q1", "source.read_context")
    assert kept.seq == before + 1 and case.status()["package_generation"] == before + 1
    with pytest.raises(LedgerError) as caught:
        with case.batch():
            lost = budget.reserve("H2", "q2", "source.read_context")
            budget.reserve("H9", "q2", "source.read_context")
    assert caught.value.code == "UNKNOWN_HYPOTHESIS" and lost.seq == before + 2
    assert case.status()["package_generation"] == before + 1  # the whole batch is gone, as documented
    assert budget.reserve("H2", "q2", "source.read_context").seq == before + 2


def test_writers_through_a_symlinked_ledger_share_the_writer_queue(case, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "ledger.sqlite").symlink_to(case.path / "ledger.sqlite")
    with Case.open(other) as through_link:
        expected = Path(os.path.realpath(case.path / "ledger.sqlite")).with_name("ledger.sqlite-lock")
        assert through_link.storage._lock.path == case.storage._lock.path == expected


@pytest.mark.slow  # over 0.5 s in the default run: the slow lane (.ci/run) runs it
def test_a_case_in_a_folder_this_user_may_not_write_is_a_storage_error_not_an_immutable_read(budget, case):
    """An owner may be writing: an immutable read of a changing file would look like tampering."""
    budget.reserve("H1", "q1", "source.read_context")
    case.close()
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="ledger-shared-"))  # outside pytest's 0700 tmp tree
    shared.chmod(0o755)
    folder = shared / "case"
    shutil.copytree(case.path, folder)
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv to run as another user")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        probe = subprocess.run([*prefix, sys.executable, "-c", "import ledger_cli"], capture_output=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        if probe.returncode != 0:  # e.g. the venv lives in a folder only root may enter
            shutil.rmtree(shared)
            pytest.skip("the other user cannot run this Python")
    else:
        prefix = []
        folder.chmod(0o555)
    try:
        for args in (["verify", str(folder)], ["balances", str(folder)]):
            done = subprocess.run([*prefix, sys.executable, "-m", "ledger_cli", *args], capture_output=True,
                                  env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
            assert done.returncode == 1 and b"error: STORAGE_ERROR: " in done.stderr, done.stderr
            assert b"may not write that folder; let this user write the folder (chmod u+w " in done.stderr
            assert b"(cp keeps the read-only modes)" in done.stderr
    finally:
        folder.chmod(0o755)
        shutil.rmtree(shared)


@pytest.mark.parametrize("number, code", [(30, STORAGE_ERROR), (13, STORAGE_ERROR), (28, STORAGE_ERROR),
                                          (2, INVALID_ARGUMENT), (20, INVALID_ARGUMENT)])
def test_file_system_refusals_are_storage_errors_and_bad_paths_invalid_arguments(number, code):
    from ledger.ground.paths import os_error

    assert os_error(OSError(number, os.strerror(number), "/x"), "doing it").code == code


@pytest.mark.parametrize("junk", [b"not a journal at all", b"\xd9\xd5\x05\xf9", b"\x01" + bytes(600)])
def test_a_journal_sqlite_did_not_write_is_named_for_readers_and_a_writer_deletes_it(tmp_path, junk):
    """A ``-journal`` whose first byte is not zero is *hot* to SQLite, so a reader cannot open the ledger
    past it: readers say the journal is not SQLite's (never a permission problem); a writer deletes it."""
    case = start_case(tmp_path / "case")
    head = case.status()["head_sha256"]
    case.close()
    journal = tmp_path / "case" / "ledger.sqlite-journal"
    journal.write_bytes(junk)
    for read in (lambda: verify_case(tmp_path / "case"), lambda: read_only_query(tmp_path / "case", "SELECT 1")):
        with pytest.raises(LedgerError) as caught:
            read()
        assert caught.value.code == STORAGE_ERROR
        assert "ledger.sqlite-journal beside it does not start as a journal SQLite wrote" in caught.value.message
    result = run_cli("verify", str(tmp_path / "case"))
    assert result.returncode == 1 and b"does not start as a journal SQLite wrote" in result.stderr
    with Case.open(tmp_path / "case") as opened:
        assert opened.status()["head_sha256"] == head
    assert not journal.exists() and verify_case(tmp_path / "case").head_sha256 == head


def test_a_journal_starting_with_a_zero_byte_is_not_hot_and_readers_pass_it(tmp_path):
    case = start_case(tmp_path / "case")
    head = case.status()["head_sha256"]
    case.close()
    (tmp_path / "case" / "ledger.sqlite-journal").write_bytes(bytes(64) + b"junk")
    assert verify_case(tmp_path / "case").head_sha256 == head


def test_a_transaction_cut_short_in_a_rollback_journal_is_storage_error_for_readers_until_a_writer_rolls_it_back(
        tmp_path):
    """A ledger a user switched to a rollback journal, whose writer was killed mid-transaction: readers
    (verify, sql) cannot roll the journal back and say so (never a permission problem, never damaged
    history); the next writer's open rolls it back and verify passes on the history as it was."""
    case = start_case(tmp_path / "case")
    head = case.status()["head_sha256"]
    case.close()
    sqlite3.connect(tmp_path / "case" / "ledger.sqlite").execute("PRAGMA journal_mode = DELETE").fetchall()
    killed = subprocess.run([sys.executable, "-c", (
        "import os, signal, sqlite3\n"
        f"c = sqlite3.connect({str(tmp_path / 'case' / 'ledger.sqlite')!r}, isolation_level=None)\n"
        "c.execute('PRAGMA cache_size = 1'); c.execute('BEGIN IMMEDIATE'); c.execute('CREATE TABLE zz (x)')\n"
        "c.execute('INSERT INTO zz SELECT randomblob(3000) FROM (WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL "
        "SELECT i + 1 FROM r WHERE i < 200) SELECT i FROM r)')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")])
    assert killed.returncode == -9 and (tmp_path / "case" / "ledger.sqlite-journal").stat().st_size > 0
    for read in (lambda: verify_case(tmp_path / "case"), lambda: read_only_query(tmp_path / "case", "SELECT 1")):
        with pytest.raises(LedgerError) as caught:
            read()
        assert caught.value.code == STORAGE_ERROR
        assert "ledger.sqlite-journal beside it holds a transaction cut short" in caught.value.message
    with Case.open(tmp_path / "case") as opened:  # a writer's open rolls it back
        assert opened.status()["head_sha256"] == head
    assert verify_case(tmp_path / "case").head_sha256 == head


@pytest.mark.parametrize("kind", ["folder", "pipe"])
def test_a_journal_that_is_no_regular_file_is_named_for_readers_never_a_permission_problem(tmp_path, kind):
    """SQLite must read a rollback journal before it reads the ledger: a folder there fails its read, a
    pipe would block it; readers say so at once (never a hang, never "this user may not write")."""
    case = start_case(tmp_path / "case")
    case.close()
    journal = tmp_path / "case" / "ledger.sqlite-journal"
    if kind == "folder":
        journal.mkdir()
        (journal / "inside").write_text("x")
    else:
        os.mkfifo(journal)
    for read in (lambda: verify_case(tmp_path / "case"), lambda: read_only_query(tmp_path / "case", "SELECT 1")):
        with pytest.raises(LedgerError) as caught:
            read()
        assert caught.value.code == STORAGE_ERROR
        assert "ledger.sqlite-journal beside it is not a regular file" in caught.value.message


def _odd_file(path: Path, kind: str) -> None:
    if kind == "folder":
        path.mkdir()
        (path / "inside").write_text("x")
    else:
        os.mkfifo(path)


@pytest.mark.parametrize("kind", ["folder", "pipe"])
@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.sampled(every=4)
def test_a_log_file_that_is_no_regular_file_is_named_for_writers_never_a_hang(tmp_path, suffix, kind):
    """A -wal or -shm that was a folder or a pipe got SQLite's "read-only location, missing
    permission" (or "this user may not write that folder"), naming no file; a -journal pipe made a
    writer (ledger export) wait forever in open(), where no Ctrl-C or SIGTERM reached it. Every open
    names the file and says to move it aside."""
    start_case(tmp_path / "case").close()
    side = tmp_path / "case" / f"ledger.sqlite{suffix}"
    _odd_file(side, kind)
    done = subprocess.run([sys.executable, "-m", "ledger_cli", "export", str(tmp_path / "case")],
                          capture_output=True, text=True, timeout=120)
    what = "a folder" if kind == "folder" else "a pipe (FIFO)"
    assert done.returncode == 1 and done.stderr.startswith(
        f"error: STORAGE_ERROR: cannot open {tmp_path / 'case' / 'ledger.sqlite'}: ledger.sqlite{suffix} beside it "
        f"is {what}, not a file, where SQLite keeps the ledger's "), done.stderr
    assert "move it aside, then run this again" in done.stderr
    with pytest.raises(LedgerError) as caught:
        Case.open(tmp_path / "case")
    assert caught.value.code == STORAGE_ERROR and caught.value.details["path"] == str(side)
    if suffix != "-journal":  # readers: as for a writer (a journal has its own message, above)
        for read in (lambda: verify_case(tmp_path / "case"), lambda: read_only_query(tmp_path / "case", "SELECT 1")):
            with pytest.raises(LedgerError) as caught:
                read()
            assert caught.value.code == STORAGE_ERROR and f"ledger.sqlite{suffix} beside it is {what}" in \
                caught.value.message


@pytest.mark.parametrize("kind", ["folder", "pipe"])
@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_new_case_beside_a_log_file_that_is_no_regular_file_names_it(tmp_path, suffix, kind):
    """A -wal or -journal folder was taken for a lost case's log (CASE_EXISTS, "put the ledger back")."""
    (tmp_path / "case").mkdir()
    _odd_file(tmp_path / "case" / f"ledger.sqlite{suffix}", kind)
    with pytest.raises(LedgerError) as caught:
        Case.create(tmp_path / "case", "C1")
    assert caught.value.code == STORAGE_ERROR and "move it aside" in caught.value.message
    assert caught.value.details["path"] == str(tmp_path / "case" / f"ledger.sqlite{suffix}")
    assert sorted(os.listdir(tmp_path / "case")) == [f"ledger.sqlite{suffix}"]


# closing, the case cannot take the lock to empty its log either, and warns so
@pytest.mark.filterwarnings("ignore::ledger.storage.connection.CheckpointWarning")
@pytest.mark.parametrize("name", ["ledger.sqlite-lock", "ledger.sqlite-export-lock"])
def test_a_lock_file_that_is_a_folder_is_named_with_what_to_do(tmp_path, name):
    case = start_case(tmp_path / "case")
    case.close()
    (tmp_path / "case" / name).unlink(missing_ok=True)
    (tmp_path / "case" / name).mkdir()
    with pytest.raises(LedgerError) as caught:
        with Case.open(tmp_path / "case") as opened:
            if name == "ledger.sqlite-lock":
                opened.transition("INVESTIGATING_HYPOTHESES")
            else:
                export_case(opened)
    assert caught.value.code == STORAGE_ERROR
    assert caught.value.message.endswith(f"{name} is a folder, not a file, where the case package keeps its lock "
                                         "file; move it aside, then run this again")


@pytest.mark.parametrize("kind", ["a folder", "a pipe (FIFO)", "a socket"])
def test_creating_a_case_beside_a_lock_file_that_cannot_be_one_makes_no_ledger_file(tmp_path, kind):
    """The lock path is looked at before the ledger file is made: anything but a regular file there is
    refused first, and no empty ledger.sqlite stays behind (which every later command took for a lost
    case); a socket was INVALID_ARGUMENT ("No such device or address"), a pipe taken as a lock file."""
    lock = tmp_path / "case" / "ledger.sqlite-lock"
    lock.parent.mkdir()
    if kind == "a folder":
        lock.mkdir()
    elif kind == "a pipe (FIFO)":
        os.mkfifo(lock)
    else:
        listening = socket.socket(socket.AF_UNIX)
        listening.bind(str(lock))
        listening.close()
    with pytest.raises(LedgerError) as caught:
        Case.create(tmp_path / "case", "BUG-1")
    assert caught.value.code == STORAGE_ERROR and f"ledger.sqlite-lock is {kind}, not a file" in caught.value.message
    assert sorted(path.name for path in (tmp_path / "case").iterdir()) == ["ledger.sqlite-lock"]
    lock.rmdir() if kind == "a folder" else lock.unlink()
    with Case.create(tmp_path / "case", "BUG-1") as case:
        assert case.status()["case_id"] == "BUG-1"
    assert sorted(path.name for path in (tmp_path / "case").iterdir()) == ["ledger.sqlite", "ledger.sqlite-lock"]


def test_a_case_path_starting_with_two_slashes_opens_as_the_same_folder(tmp_path):
    """POSIX keeps a leading "//"; after "file:" it would read as a URI's host."""
    case = start_case(tmp_path / "case")
    head = case.status()["head_sha256"]
    case.close()
    doubled = "/" + str(tmp_path / "case")
    assert doubled.startswith("//")
    with Case.open(doubled) as opened:
        assert opened.status()["head_sha256"] == head
    assert verify_case(doubled).head_sha256 == head
    assert read_only_query(doubled, "SELECT COUNT(*) FROM events")[1][0][0] >= 1


def test_a_ledger_an_older_version_wrote_on_a_read_only_mount_says_how_to_upgrade_it(case):
    """Opening it must upgrade its schema first, which a read-only location refuses: the message
    says why (an older case-ledger wrote it), what upgrades it, and what reads it as it is."""
    from conftest import downgrade_ledger

    case.close()
    downgrade_ledger(case.path, 6)
    folder, undo = read_only_mount(case.path)
    try:
        with pytest.raises(LedgerError) as caught:
            Case.open(folder)
        assert (caught.value.code, caught.value.message) == (STORAGE_ERROR, (
            f"{folder / 'ledger.sqlite'} was written by an older case-ledger (schema version 6; this one reads "
            f"{schema_version()}) and must be upgraded once, by a command that writes (such as 'ledger export') "
            "where it may be written; its location is read-only. 'ledger verify', 'ledger sql' and 'ledger fleet "
            "export' read it as it is"))
        assert verify_case(folder).head_seq == 3
        assert readonly_query(folder / "ledger.sqlite", "SELECT MAX(version) FROM schema_migrations")[1] == [(6,)]
    finally:
        undo()


def test_an_exported_ledger_copied_without_the_log_holding_its_writes_says_so(tmp_path):
    """A copy taken while the case was open, whose writes were all still in its -wal, left without that
    log: the file holds no case, and the export beside it says one existed, so every reader says the
    log is missing (it said an init was running and to run init again, which init then refuses)."""
    case = Case.create(tmp_path / "live", case_id="LIVE-1")
    case.open_revision([{"statement": "h"}], 100)
    export_case(case)
    copy = tmp_path / "copy"
    shutil.copytree(case.path, copy)
    case.close()
    for side in ("ledger.sqlite-wal", "ledger.sqlite-shm"):
        (copy / side).unlink()
    said = (f"{copy / 'ledger.sqlite'} holds no case, but the manifest.json beside it names an exported one: the "
            "ledger was copied without its ledger.sqlite-wal (which held its writes), or replaced")
    for read in (lambda: verify_case(copy), lambda: read_only_query(copy, "SELECT 1"), lambda: Case.open(copy)):
        with pytest.raises(LedgerError) as caught:
            read()
        assert caught.value.code == "LEDGER_MISSING" and caught.value.message.startswith(said), caught.value.message


#: Other programs' databases, and the objects a refusal names: one of a framework keeping its own
#: schema_migrations (Rails' versions are text, golang-migrate's a number and a flag), one with a
#: table named as a ledger's, and one in WAL mode whose log holds its rows.
OTHER_PROGRAMS = {
    "orders": ("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT); CREATE INDEX by_item ON orders(item); "
               "INSERT INTO orders (item) VALUES ('stock'); ANALYZE;", "index by_item, table orders"),
    "rails": ("CREATE TABLE schema_migrations (version varchar PRIMARY KEY); INSERT INTO schema_migrations "
              "VALUES ('20240101'); CREATE TABLE users (id integer);", "table schema_migrations, table users"),
    "migrate": ("CREATE TABLE schema_migrations (version bigint, dirty boolean); INSERT INTO schema_migrations "
                "VALUES (3, 0);", "table schema_migrations"),
    "events": ("CREATE TABLE events (x); CREATE TABLE users (a);", "table events, table users"),
    "wal": ("PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; CREATE TABLE t (x); INSERT INTO t VALUES (1);",
            "table t"),
}


def _another_programs_database(folder: Path, kind: str) -> Path:
    """A folder whose ledger.sqlite is another program's (:data:`OTHER_PROGRAMS`), written by a process
    of its own (one in WAL mode leaves its -wal holding the rows, as a program still running would)."""
    folder.mkdir()
    ledger = folder / "ledger.sqlite"
    script = ("import os, sqlite3, sys\nconn = sqlite3.connect(sys.argv[1])\nconn.executescript(sys.argv[2])\n"
              "conn.commit()\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", script, str(ledger), OTHER_PROGRAMS[kind][0]], check=True, timeout=60)
    return ledger


@pytest.mark.parametrize("kind", [kind if kind in ("rails", "wal") else pytest.param(kind, marks=pytest.mark.slow)
                                  for kind in sorted(OTHER_PROGRAMS)])  # each over 0.5 s: two in the default run
def test_no_case_is_written_into_another_programs_database_and_readers_name_it(tmp_path, kind):
    """A ledger.sqlite that holds another program's objects (none of a ledger's by name and SQL alike: its
    own schema_migrations or events too) is no interrupted init, whose first write makes schema and case
    in one transaction: init refuses to write a case into it (it took the file over, journal mode and
    all; a framework's schema_migrations was a traceback), leaving it and its -wal as they were; every
    reader names it another program's (it said an init was running and to run init again)."""
    ledger = _another_programs_database(tmp_path / "theirs", kind)
    names = OTHER_PROGRAMS[kind][1]

    def files() -> dict[str, bytes]:
        return {name: (ledger.parent / name).read_bytes() for name in sorted(os.listdir(ledger.parent))
                if not name.endswith("-shm")}  # (a reader's index of the log, SQLite's to keep)

    before = files()
    made = [lambda: Case.create(ledger.parent, case_id="C-1"),
            lambda: run_cli("init", str(ledger.parent), "--case-id", "C-1"),
            lambda: run_cli("apply", str(ledger.parent), "-", "--create", "C-1", stdin=b'{"op": "initialize"}\n')]
    for make in made:
        try:
            done = make()
        except LedgerError as caught:
            code, message = caught.code, caught.message
        else:
            code, message = "INVALID_ARGUMENT", done.stderr.decode().partition("INVALID_ARGUMENT: ")[2]
            assert done.returncode == 1, done.stderr
        assert code == INVALID_ARGUMENT
        assert message.startswith(f"{ledger} is an SQLite database of another program ({names}): "
                                  "no case is written into it"), message
        assert files() == before
    said = f"{ledger} is an SQLite database of another program ({names}), not a case ledger"
    for read in (lambda: verify_case(ledger.parent), lambda: read_only_query(ledger.parent, "SELECT 1"),
                 lambda: Case.open(ledger.parent)):
        with pytest.raises(LedgerError) as caught:
            read()
        assert caught.value.code == "LEDGER_MISSING" and caught.value.message.startswith(said), caught.value.message
    for command in (("state",), ("export",), ("verify",)):
        done = run_cli(*command, str(ledger.parent))
        assert done.returncode == 1 and f"error: LEDGER_MISSING: {said}" in done.stderr.decode(), done.stderr
    assert files() == before


def test_a_ledger_whose_every_statement_was_edited_is_an_edited_ledger_not_another_programs(tmp_path):
    """Every object's SQL edited (a space added through writable_schema): none is one a migration made,
    but its core tables (events, case_identity, schema_migrations) are there by name, so it is an edited
    ledger: it opens, and verify names its altered table (INTEGRITY_ERROR), never another program's."""
    start_case(tmp_path / "case").close()
    ledger = tmp_path / "case" / "ledger.sqlite"
    conn = sqlite3.connect(ledger)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = sql || ' ' WHERE sql IS NOT NULL")
    conn.commit()
    conn.close()
    with Case.open(ledger.parent) as opened:
        assert opened.status()["case_id"] == "BUG-1"
    with pytest.raises(LedgerError) as caught:
        verify_case(ledger.parent)
    assert caught.value.code == INTEGRITY_ERROR and "is altered" in caught.value.message, caught.value


def test_a_new_case_is_made_in_an_empty_database_file_or_one_holding_only_sqlites_own_tables(tmp_path):
    """An empty file (an init cut short before its first write), or one holding only SQLite's own
    statistics, is no other program's: a case is made in it."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "ledger.sqlite").touch()
    (tmp_path / "stats").mkdir()
    with sqlite3.connect(tmp_path / "stats" / "ledger.sqlite") as conn:
        conn.execute("ANALYZE")
    conn.close()
    for name in ("empty", "stats"):
        with Case.create(tmp_path / name, case_id="C-1") as case:
            assert case.status()["case_id"] == "C-1"
        assert verify_case(tmp_path / name).head_seq == 1


def _cut_short_case(tmp_path: Path, size: int) -> tuple[Path, bytes]:
    """A closed case whose ledger.sqlite is cut to its first ``size`` bytes; and the whole file."""
    start_case(tmp_path / "case").close()
    ledger = tmp_path / "case" / "ledger.sqlite"
    whole = ledger.read_bytes()
    ledger.write_bytes(whole[:size])
    return ledger, whole


@pytest.mark.parametrize("size, beside", [
    (1, None), (15, None), (50, None), (4096, None), (6000, None), (-4096, None),
    (6000, "an empty journal"), (6000, "a log SQLite did not write")])
def test_a_ledger_cut_short_is_integrity_error_for_readers_and_writers_and_nothing_is_made_beside_it(tmp_path, size,
                                                                                                   beside):
    """A ledger file shorter than its own header records (a copy stopped mid-way, a truncated file) is
    refused before SQLite opens it: no ``-wal`` or ``-shm`` made beside it, the sizes named. A log or
    journal beside it holding no writes (empty, or not SQLite's) changes nothing."""
    ledger, whole = _cut_short_case(tmp_path, size)
    if beside == "an empty journal":
        (ledger.parent / "ledger.sqlite-journal").write_bytes(b"")
    elif beside == "a log SQLite did not write":
        (ledger.parent / "ledger.sqlite-wal").write_bytes(bytes(100))
    pages = int.from_bytes(whole[28:32], "big")
    expected = 100 if 0 < size < 100 else pages * 4096
    assert len(whole) == pages * 4096
    for call in (lambda: verify_case(ledger.parent), lambda: read_only_query(ledger.parent, "SELECT 1"),
                 lambda: Case.open(ledger.parent), lambda: export_case(ledger.parent)):
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == INTEGRITY_ERROR
        assert caught.value.message.startswith(f"{ledger} is {len(whole[:size])} byte{'s' if size != 1 else ''}, but ")
        assert "the file was cut short" in caught.value.message
        assert caught.value.details["expected_bytes"] == expected
    for command in (["verify"], ["sql", "SELECT 1"], ["events"]):
        ran = run_cli(command[0], str(ledger.parent), *command[1:])
        assert ran.returncode == 1 and ran.stderr.startswith(b"error: INTEGRITY_ERROR: ") and b"cut short" in ran.stderr
    assert [p.name for p in ledger.parent.iterdir() if p.name.endswith(("-wal", "-shm"))] == (
        ["ledger.sqlite-wal"] if beside == "a log SQLite did not write" else [])
    ledger.write_bytes(whole)  # put back whole: every command reads it again
    assert verify_case(ledger.parent).head_sha256


def test_a_ledger_short_for_an_instant_as_a_checkpoint_writes_it_is_never_called_cut_short(tmp_path, monkeypatch):
    """A checkpoint writes page 1 (and the size it records) before the pages past the old end: the
    file is short for an instant. Only a shortfall that stays through three looks is refused."""
    import ledger.storage.side_files as side_files

    ledger, whole = _cut_short_case(tmp_path, 8192)
    pauses = []

    class Checkpointing:
        """The pause between two looks, during which the checkpoint writes the rest of the file."""
        def sleep(self, seconds):
            pauses.append(seconds)
            if len(pauses) == 2:
                ledger.write_bytes(whole)

    monkeypatch.setattr(side_files, "time", Checkpointing())
    side_files.check_not_cut_short(ledger)
    assert pauses == [0.05, 0.05]
    monkeypatch.undo()
    assert verify_case(ledger.parent).head_sha256


def test_the_size_a_ledger_header_records_is_trusted_only_where_sqlite_trusts_it(tmp_path):
    """A header whose change counter and version-valid-for number differ records no size SQLite uses;
    a file longer than its header records, or a short one with writes in its ``-wal``, which SQLite
    reads first, is left to SQLite: never refused as cut short."""
    from ledger.storage.side_files import check_not_cut_short

    ledger, whole = _cut_short_case(tmp_path, 8192)
    stale = bytearray(whole[:8192])
    stale[92:96] = (int.from_bytes(stale[24:28], "big") + 1).to_bytes(4, "big")
    ledger.write_bytes(bytes(stale))
    check_not_cut_short(ledger)
    ledger.write_bytes(whole[:8192])
    (ledger.parent / "ledger.sqlite-wal").write_bytes(bytes.fromhex("377f0682") + bytes(60))  # SQLite's log header
    check_not_cut_short(ledger)
    (ledger.parent / "ledger.sqlite-wal").unlink()
    ledger.write_bytes(whole + bytes(4096))
    check_not_cut_short(ledger)
    assert verify_case(ledger.parent).head_sha256


_DISK_FULL_IN_A_BATCH = """
import json, os, resource, sys
from ledger import Case, LedgerError, verify_case
path = sys.argv[1]
case = Case.create(path, "FULL-1")
case.open_revision([{"statement": "h"}], 10**9)
case.transition("INVESTIGATING_HYPOTHESES")
budget = case.budget()
budget.initialize()
head = case.status()["package_generation"]
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(os.path.join(path, "ledger.sqlite")) + 400_000, hard))
caught = []
try:
    with case.batch():
        for n in range(5000):
            try:
                budget.reserve("H1", f"a{n}", "source.read_context")
                budget.record_result("H1", f"a{n}", {"text": f"{n} " + "x" * 3000})
                budget.settle("H1", f"a{n}", 50, "r")
            except LedgerError as exc:  # the caller goes on inside the batch, as a loop catching refusals may
                caught.append([type(exc).__name__, exc.code])
                if len(caught) == 2:
                    break
except LedgerError as exc:
    caught.append([type(exc).__name__, exc.code, exc.message])
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
after = case.status()["package_generation"]
budget.reserve("H1", "b1", "source.read_context")  # the case goes on from what was written
print(json.dumps({"caught": caught, "head": head, "after": after,
                  "verified": verify_case(path).head_seq, "now": case.status()["package_generation"]}))
"""


@pytest.mark.slow  # a real process: the slow lane (.ci/run) runs it
def test_a_batch_sqlite_rolled_back_for_a_full_disk_is_refused_to_its_end_and_writes_nothing(tmp_path):
    """An operation in a batch meeting the disk full (here: a file size limit) once SQLite had written
    part of the batch to the log made SQLite roll back the whole transaction: it was that operation's
    refusal alone, the batch's later operations ran outside any transaction, and its end said
    "INTEGRITY_ERROR: cannot commit - no transaction is active". Each later operation and the batch's
    end are refused as a batch rolled back (STORAGE_ERROR); nothing of it is written."""
    done = subprocess.run([sys.executable, "-c", _DISK_FULL_IN_A_BATCH, str(tmp_path / "c")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    first, second, end = report["caught"]
    assert first == ["BatchRolledBack", "STORAGE_ERROR"] and second == first
    assert end[:2] == ["BatchRolledBack", "STORAGE_ERROR"] and end[2].startswith("an earlier operation of this batch")
    assert report["after"] == report["head"] and report["verified"] == report["now"] == report["head"] + 1


def test_a_batch_inside_a_batch_is_refused_and_the_outer_batch_still_holds(case):
    """The inner batch's end closed the outer one's transaction state: later writes failed with
    'INTEGRITY_ERROR: SQLite refused: no such savepoint: operation'. It is refused where it opens."""
    budget = case.budget(BudgetConfig.example())
    budget.initialize()
    events = case.status()["package_generation"]
    with case.batch():
        budget.reserve("H1", "a0", "source.read_context")
        with pytest.raises(LedgerError) as refused:
            with case.batch():
                pass
        budget.fail("H1", "a0", "not run")  # the outer batch goes on as if nothing was tried
    assert refused.value.code == INVALID_ARGUMENT and "a batch is already open on this case" in refused.value.message
    assert (budget.action_status("H1", "a0"), case.status()["package_generation"]) == ("failed", events + 2)


@pytest.mark.parametrize("then", ["end", "write", "read"])
def test_a_case_closed_inside_its_batch_rolls_the_batch_back_and_says_so_at_its_next_step(package, then):
    """The batch's end (or a write after the close) raised sqlite3's own "Cannot operate on a closed
    database" out of the library; the close had rolled the batch back, which nothing said."""
    case = start_case(package)
    events = case.status()["package_generation"]
    closed_in_batch = ("this case was closed inside its batch, which closing rolled back: none of the batch's "
                       "operations was written; end a batch before closing its case, and open the case again to use it")
    with pytest.raises(LedgerError) as refused:
        with case.batch():
            case.transition("BLOCKED")
            case.close()
            if then == "write":
                case.transition("INVESTIGATING_HYPOTHESES")
            elif then == "read":
                case.status()
    said = "this case was closed; open it again to use it" if then == "read" else closed_in_batch
    assert (refused.value.code, refused.value.message) == (INVALID_ARGUMENT, said)
    with Case.open(package) as again:
        assert (again.status()["package_generation"], again.status()["state"]) == (events, "INVESTIGATING_HYPOTHESES")
        assert again.transition("BLOCKED").case_state == "BLOCKED"  # nothing left held


def test_a_memory_cases_batch_groups_nothing_and_rolls_nothing_back_as_it_says():
    """MemoryCase.batch() showed Case.batch()'s docstring (one transaction, rolled back whole); in
    memory every operation is applied as it returns, which its own docstring now says."""
    from ledger import MemoryCase

    memory = MemoryCase.create("m")
    memory.open_revision([{"statement": "s"}], 100)
    memory.transition("INVESTIGATING_HYPOTHESES")
    budget = memory.budget(BudgetConfig.example())
    budget.initialize()
    with pytest.raises(RuntimeError):
        with memory.batch():
            with memory.batch():  # accepted: nothing to nest
                budget.reserve("H1", "a", "source.read_context")
            raise RuntimeError("leaves the batch")
    assert budget.snapshot().state["H1"]["pending_action_id"] == "a"
    assert "rolls nothing back" in MemoryCase.batch.__doc__


_UNDER_A_FILE_SIZE_LIMIT = """
import resource, signal, sys
from ledger import LedgerError, read_only_query
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) rather than killing
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    read_only_query(sys.argv[1], "SELECT 1")
except LedgerError as exc:
    print(exc.code, exc.message)
"""


def test_a_shm_a_file_size_limit_keeps_from_being_made_is_not_blamed_on_the_folders_permissions(budget, case):
    """`ulimit -f` small: SQLite cannot make the 32 KiB -shm a read needs. The refusal said this user may not
    write the folder (chmod u+w), which was not so."""
    budget.reserve("H1", "q1", "source.read_context")
    case.close()
    (case.path / "ledger.sqlite-shm").unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-c", _UNDER_A_FILE_SIZE_LIMIT, str(case.path)], capture_output=True,
                          timeout=120)
    said = done.stdout.decode()
    assert said.startswith(f"STORAGE_ERROR cannot read {case.path / 'ledger.sqlite'}: SQLite could not create "
                           "ledger.sqlite-shm beside it, in a folder this user may write (SQLite: "), done.stderr
    assert said.rstrip().endswith("a file-size limit ('ulimit -f') or a full disk?") and "chmod" not in said


def test_an_interrupt_inside_a_close_inside_a_batch_goes_on_as_itself_and_leaves_nothing_held(package, monkeypatch):
    """A KeyboardInterrupt landing in the close's release of the writer lock left the case marked open
    with its connection closed: the batch's end raised sqlite3's "Cannot operate on a closed database"
    in its place."""
    from ledger.storage import writer_lock

    case = start_case(package)
    events = case.status()["package_generation"]
    real, shots = writer_lock.WriterLock.close, [1]

    def cut(self):
        real(self)
        if shots:
            shots.pop()
            raise KeyboardInterrupt
    monkeypatch.setattr(writer_lock.WriterLock, "close", cut)
    with pytest.raises(KeyboardInterrupt):
        with case.batch():
            case.transition("BLOCKED")
            case.close()
    monkeypatch.undo()
    with Case.open(package) as again:
        assert again.status()["package_generation"] == events
        assert again.transition("BLOCKED").case_state == "BLOCKED"


def test_a_batch_whose_end_an_interrupt_cut_short_is_ended_when_its_loop_enters_it_again(package, monkeypatch):
    """An interrupt at the very start of a batch's end left it marked open: the loop that caught it and
    entered the same batch again was refused "a batch is already open" every time, holding the writer
    lock (another Case waited, then LEDGER_BUSY). It is ended (rolled back) and the batch runs anew."""
    from ledger.storage import transaction

    case = start_case(package)
    events = case.status()["package_generation"]
    real, shots = transaction.Batch.__exit__, [1]

    def cut(self, *exc):
        if shots:
            shots.pop()
            raise KeyboardInterrupt
        return real(self, *exc)
    monkeypatch.setattr(transaction.Batch, "__exit__", cut)
    tries = []
    for attempt in range(3):
        try:
            with case.batch():
                case.transition("BLOCKED")
            break
        except KeyboardInterrupt:
            tries.append(attempt)
    monkeypatch.undo()
    assert tries == [0] and case.status()["package_generation"] == events + 1
    with Case.open(package) as other:
        assert other.transition("INVESTIGATING_HYPOTHESES").case_state == "INVESTIGATING_HYPOTHESES"
    case.close()
