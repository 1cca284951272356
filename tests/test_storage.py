"""docs/architecture.md: WAL, append-only tables guarded by triggers, schema versions, rollback."""

from __future__ import annotations

import sqlite3

import pytest

from ledger import Case, LedgerError
from ledger.ground.errors import INTEGRITY_ERROR, SCHEMA_VERSION
from ledger.storage.sqlfiles import schema_version, split_statements

from conftest import logical_dump

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


@pytest.mark.parametrize("table", LEDGER_TABLES)
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
