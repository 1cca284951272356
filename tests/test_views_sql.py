"""The public views read the same in every SQL engine, carry when and why, and old ledgers still verify.

Checked through SQLite itself (``typeof()`` of every value), through DuckDB's
SQLite reader (declared column types and values) and against the ledger's own API.
"""

from __future__ import annotations

import importlib.util
import shutil
import sqlite3
import json
import subprocess
import sys
import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import Case, LedgerError, read_only_query, verify_case, AnalysisConfig, BudgetConfig, export_case, import_tree
from ledger.services.case import read_only_rows
from ledger.storage.sqlfiles import migrations, shipped_schema
from ledger.ground.errors import (INVALID_ARGUMENT, NOT_INITIALIZED, CONFIG_INVALID, INTEGRITY_ERROR, INVALID_JSON,
    LIMIT_REACHED, SOURCE_REF_INVALID, STORAGE_ERROR)
from ledger_cli.main import main as cli_main
from conftest import EXAMPLE_BUDGET, make_package, run_cli, start_case
from ledger.ground.canonical import canonical_bytes
from ledger.package_tools.journal import apply_journal
INTEGER_COLUMNS = {
    "balances": {"revision", "initial_units", "granted_units", "spent_units", "rewarded_units", "remaining_units",
                 "low_information_streak", "settled_actions", "failed_actions"},
    "actions": {"revision", "cost_units", "novelty_score", "semantic_score", "information_score", "reward_units"},
    "case_status": {"analysis_revision", "package_generation"},
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    from ledger import run_demo
    path, _, _ = run_demo(tmp_path_factory.mktemp("demo") / "d", echo=lambda text: None)
    return Path(path)


def public_views(path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{path / 'ledger.sqlite'}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view' ORDER BY name")]
    finally:
        conn.close()


def test_every_view_value_has_its_columns_sqlite_type(demo):
    conn = sqlite3.connect(f"file:{demo / 'ledger.sqlite'}?mode=ro", uri=True)
    for view, integers in INTEGER_COLUMNS.items():
        cursor = conn.execute(f"SELECT * FROM {view}")
        names = [d[0] for d in cursor.description]
        for row in cursor.fetchall():
            for name, value in zip(names, row):
                kind = conn.execute("SELECT typeof(?)", (value,)).fetchone()[0]
                assert kind in (("integer", "null") if name in integers else ("text", "null")), (view, name, kind)
    conn.close()


def test_actions_carry_reservation_and_closing_times_and_the_closing_reason(demo):
    with Case.open(demo) as opened:
        rows = opened.actions()
        events = {e["seq"]: e for e in opened.events(with_body=True)}
    first = rows[0]
    assert (first["action_id"], first["status"], first["closing_reason"]) == (
        "q-0001", "settled", "shows the double increment directly")
    assert first["reserved_at"] < first["closed_at"]
    closed_at = {e["created_at"] for e in events.values() if '"reason":"shows the double increment directly"' in e["body"]}
    assert closed_at == {first["closed_at"]}
    pending = [r for r in rows if r["status"] == "reserved"]
    assert all(r["closed_at"] is None and r["closing_reason"] is None for r in pending)


def test_balances_carry_the_hypothesis_statement(demo):
    with Case.open(demo) as opened:
        statements = {(h["revision"], h["hypothesis_id"]): h["statement"]
                      for h in opened.query("SELECT revision, hypothesis_id, statement FROM hypotheses")}
        rows = opened.balances()
        assert rows == opened.query("SELECT * FROM balances_recomputed ORDER BY revision, "
                                    "CAST(substr(hypothesis_id, 2) AS INTEGER)")
    assert [r["statement"] for r in rows] == [statements[(r["revision"], r["hypothesis_id"])] for r in rows]
    assert rows[1]["statement"] == "sell() computes prices with binary floats"


def test_ledger_sql_allows_read_only_pragma_table_functions(demo):
    columns, rows = read_only_query(demo, "SELECT name, type FROM pragma_table_info('events') ORDER BY cid")
    assert columns == ["name", "type"] and rows[:2] == [("seq", "INTEGER"), ("type", "TEXT")]


@pytest.mark.parametrize("query", ["PRAGMA user_version = 7", "SELECT * FROM pragma_journal_mode",
                                   "PRAGMA journal_mode = DELETE", "ATTACH 'other.db' AS other"])
def test_ledger_sql_still_refuses_writing_pragmas_and_attach(demo, query):
    with pytest.raises(LedgerError) as caught:
        read_only_query(demo, query)
    assert caught.value.code == INVALID_ARGUMENT


def test_shipped_schema_follows_drop_and_recreate_per_version():
    latest = max(m[0] for m in migrations())
    old, new = shipped_schema(2), shipped_schema(latest)
    assert "closing_reason" not in old["actions"] and "closing_reason" in new["actions"]
    assert "JOIN json_each(e.body, '$.accounts') AS a\n" in old["balances"] + "\n"
    assert set(old) <= set(new)


def _downgrade_to_version_2(path: Path) -> None:
    """Make a current ledger look like one made before the views changed (schema version 2)."""
    conn = sqlite3.connect(path / "ledger.sqlite")
    v2_views = {name: sql for name, sql in shipped_schema(2).items() if sql.startswith("CREATE VIEW")}
    guard = shipped_schema()["schema_migrations_no_delete"]
    for name, sql in v2_views.items():
        if shipped_schema()[name] != sql:
            conn.execute(f"DROP VIEW {name}")
            conn.execute(sql)
    # objects that later migrations add (tables, their guards and indexes, views) did not exist at version 2
    v2 = shipped_schema(2)
    later = [(kind, name) for kind, name in conn.execute(
        "SELECT type, name FROM sqlite_master WHERE sql IS NOT NULL AND type IN ('view', 'trigger', 'index', 'table')")
        if name not in v2]
    for kind, name in sorted(later, key=lambda item: ("view", "trigger", "index", "table").index(item[0])):
        conn.execute(f"DROP {kind.upper()} IF EXISTS {name}")
    conn.execute("DROP TRIGGER schema_migrations_no_delete")
    conn.execute("DELETE FROM schema_migrations WHERE version > 2")
    conn.execute(guard)
    conn.commit()
    conn.close()


def _demo_without_evidence(target: Path) -> Path:
    """The demo's journal without its evidence steps (lines of q-0012…q-0014): a history a
    version-2 ledger can hold, exported like the demo (35 events)."""
    from ledger import BudgetConfig, apply_journal, export_case
    from ledger.ground.resources import resource_dir

    example = resource_dir("examples") / "demo"
    lines = [line for line in (example / "journal.jsonl").read_text(encoding="utf-8").splitlines()
             if not any(f'"q-001{n}"' in line for n in (2, 3, 4))]
    shutil.copytree(example / "sources", target / "sources", ignore=shutil.ignore_patterns("__pycache__"))
    with Case.create(target, "BUG-20", at="2026-01-05T09:59:00Z") as case:
        policy = BudgetConfig.load(resource_dir("config") / "budget.example.toml")
        refused = [r.error.code for r in apply_journal(case, lines, budget=case.budget(policy), keep_going=True)
                   if not r.ok]
        assert refused == ["INSUFFICIENT_BUDGET"]
        export_case(case)
    return target


def test_verify_checks_an_old_ledger_against_its_own_schema_version_and_opening_upgrades_it(tmp_path):
    path = _demo_without_evidence(tmp_path / "d")
    _downgrade_to_version_2(Path(path))
    old = verify_case(path)
    assert old.foreign_objects == [] and old.events == 35
    with Case.open(path) as opened:  # opening migrates the views
        assert "closing_reason" in opened.actions()[0]
    assert verify_case(path).events == 35


def _duckdb_with_sqlite():
    """A DuckDB connection with the SQLite reader loaded from its PyPI package (no network)."""
    if importlib.util.find_spec("duckdb") is None or importlib.util.find_spec("duckdb_extension_sqlite_scanner") is None:
        pytest.skip("duckdb and duckdb-extension-sqlite-scanner are not installed (pip install -e '.[test]')")
    import duckdb
    import duckdb_extension_sqlite_scanner as package

    found = sorted(Path(next(iter(package.__path__))).glob("extensions/*/sqlite_scanner.duckdb_extension"))
    if not found:
        pytest.skip("duckdb-extension-sqlite-scanner ships no extension file for this platform")
    conn = duckdb.connect()
    try:
        conn.execute(f"LOAD '{found[0]}'")
    except duckdb.Error as exc:
        pytest.skip(f"DuckDB cannot load its SQLite reader here ({exc}); the package must match duckdb's version")
    return conn


def test_every_view_parses_in_duckdb_with_typed_columns_and_the_ledgers_values(demo):
    duck = _duckdb_with_sqlite()
    duck.execute(f"ATTACH '{demo / 'ledger.sqlite'}' AS l (TYPE sqlite, READ_ONLY)")
    for view in public_views(demo):
        types = dict((row[0], row[1]) for row in duck.execute(f"DESCRIBE l.{view}").fetchall())
        assert "BLOB" not in types.values(), (view, types)
        for name in INTEGER_COLUMNS.get(view, ()):
            assert types[name] == "BIGINT", (view, name, types[name])
    with Case.open(demo) as opened:
        checks = {"balances": opened.balances(), "actions": opened.actions(), "case_status": [opened.status()]}
    for view, expected in checks.items():
        cursor = duck.execute(f"SELECT * FROM l.{view}")
        names = [d[0] for d in cursor.description]
        got = [dict(zip(names, row)) for row in cursor.fetchall()]
        key = (lambda r: (r["revision"], r["hypothesis_id"], r.get("action_id"))) if view != "case_status" else None
        assert (sorted(got, key=key) if key else got) == (sorted(expected, key=key) if key else expected), view


def cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli_main, [str(a) for a in args], input=stdin)
    return done.exit_code, done.stdout, done.stderr


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "-1", "0", "1e9"])
def test_sql_timeout_that_is_not_a_finite_number_in_range_is_a_usage_error(case, value):
    code, out, err = cli("sql", case.path, "select 1", "--timeout", value)
    assert (code, out) == (2, "")
    assert "--timeout" in err and "Traceback" not in err


def test_sql_timeout_in_range_still_runs(case):
    assert cli("sql", case.path, "select 7 AS x", "--timeout", "0.5", "--json")[:2] == (0, '[{"x":7}]\n')


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -5, 0, True, 1.5, "30", 86_400_001])
def test_read_only_query_timeout_must_be_a_positive_integer_of_milliseconds(case, timeout):
    with pytest.raises(LedgerError) as caught:
        read_only_query(case.path, "select 1", timeout_ms=timeout)
    assert caught.value.code == INVALID_ARGUMENT and "timeout_ms" in caught.value.message
    with pytest.raises(LedgerError) as caught:
        with read_only_rows(case.path, "select 1", timeout_ms=timeout):
            pass
    assert caught.value.code == INVALID_ARGUMENT


def test_read_only_query_sql_must_be_a_string(case):
    with pytest.raises(LedgerError) as caught:
        read_only_query(case.path, b"select 1")
    assert caught.value.code == INVALID_ARGUMENT
    assert read_only_query(case.path, "select 2 AS y", timeout_ms=1000) == (["y"], [(2,)])


@pytest.mark.parametrize("args", [(5,), ("select 1", 5), ("select ?", {"a": 1}), ("select ?, ?", [1])])
def test_case_query_with_a_wrong_statement_type_or_parameters_is_invalid_argument(case, args):
    with pytest.raises(LedgerError) as caught:
        case.query(*args)
    assert caught.value.code == INVALID_ARGUMENT
    assert case.query("select :a AS a", {"a": 2}) == [{"a": 2}]


def test_sql_output_carries_blobs_and_non_finite_numbers_as_valid_json(case):
    case.close()
    done = run_cli("sql", str(case.path), "SELECT x'00ff' AS b, 1e999 AS inf, -1e999 AS ninf", "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout) == [{"b": {"$base64": "AP8="}, "inf": "Infinity", "ninf": "-Infinity"}]
    assert run_cli("sql", str(case.path), "SELECT x'00ff' AS b", "--csv").stdout == b"b\n00ff\n"
    slow = run_cli("sql", str(case.path), "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                   "SELECT count(*) FROM c", "--timeout", "0.5")
    assert slow.returncode == 1 and b"error: INVALID_ARGUMENT: query stopped" in slow.stderr
    assert run_cli("events", str(case.path), "--since", "99999999999999999999").returncode == 2


def test_sql_keeps_every_column_when_names_repeat(case):
    case.close()
    result = run_cli("sql", str(case.path), "SELECT e1.seq, e2.seq FROM events e1 JOIN events e2 "
                     "ON e2.seq = e1.seq + 1 ORDER BY e1.seq", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert rows[0] == {"seq": 1, "seq_2": 2} and all(r["seq_2"] == r["seq"] + 1 for r in rows)
    csv_out = run_cli("sql", str(case.path), "SELECT 1 AS a, 2 AS a", "--csv")
    assert csv_out.stdout.decode().splitlines() == ["a,a_2", "1,2"]


@pytest.mark.parametrize("since", [2**64, -1, "x", 1.0, True])
def test_events_since_must_be_a_safe_non_negative_integer(case, since):
    with pytest.raises(LedgerError) as caught:
        case.events(since)
    assert caught.value.code == INVALID_ARGUMENT
