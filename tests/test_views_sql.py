"""The public views read the same in every SQL engine, carry when and why, and old ledgers still verify.

Checked through SQLite itself (``typeof()`` of every value), through DuckDB's
SQLite reader (declared column types and values) and against the ledger's own API.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sqlite3
import json
from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st
from click.testing import CliRunner

from ledger import Case, LedgerError, read_only_query, verify_case
from ledger.services.case import read_only_rows
from ledger.storage.sqlfiles import migrations, schema_version, shipped_schema
from ledger.ground.errors import (INVALID_ARGUMENT)
from ledger_cli.main import main as cli_main
from conftest import downgrade_ledger, make_package, run_cli, start_case
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


@pytest.mark.parametrize("query, says", [
    ("SELECT json('x')", "malformed JSON"),  # a word SQLite also uses of a damaged file
    ("SELECT * FROM busy_table", "no such table: busy_table"),  # words of a busy file
    ("SELECT * FROM locked", "no such table: locked"),
    ("SELECT * FROM corrupt_x", "no such table: corrupt_x"),
    ("SELECT * FROM interrupted", "no such table: interrupted"),  # a word of a query stopped at its limit
    ("SELECT * FROM pragma_busy_timeout(1)", "too many arguments"),
    ("BEGIN IMMEDIATE", "a read-only query may not begin"),
])
def test_a_failing_query_is_the_statements_fault_whatever_words_sqlites_message_holds(demo, query, says):
    """The code of a failing query comes from SQLite's result code, never from words of its message,
    which may quote the query: a healthy, idle ledger answers INVALID_ARGUMENT, in ledger sql and
    Case.query alike (a busy or damaged file keeps LEDGER_BUSY or INTEGRITY_ERROR)."""
    with pytest.raises(LedgerError) as caught:
        read_only_query(demo, query)
    assert caught.value.code == INVALID_ARGUMENT and says in caught.value.message
    with Case.open(demo) as case:
        with pytest.raises(LedgerError) as again:
            case.query(query)
        assert again.value.code == INVALID_ARGUMENT


@pytest.mark.parametrize("query, params", [("SELECT '\ud800'", ()), ("SELECT ?", ("\ud800",)),
                                           ("SELECT :x", {"x": "a\udcffb"})])
def test_a_query_or_parameter_that_is_not_unicode_is_refused_as_a_ledger_error(demo, query, params):
    with Case.open(demo) as case:
        with pytest.raises(LedgerError) as caught:
            case.query(query, params)
        assert caught.value.code == INVALID_ARGUMENT and "not valid Unicode" in caught.value.message
        assert caught.value.details == {"query": "refused"}
        assert case.query("SELECT 1 AS one") == [{"one": 1}]
    if not params:
        with pytest.raises(LedgerError) as caught:
            read_only_query(demo, query)
        assert caught.value.code == INVALID_ARGUMENT and "not valid Unicode" in caught.value.message


def test_a_case_path_the_file_system_cannot_name_is_the_same_refusal_for_every_reader(tmp_path):
    """A name longer than the file system takes is a path that cannot name a file, as one holding a NUL
    is: INVALID_ARGUMENT for every reader (and every other path argument), before anything is read."""
    too_long = tmp_path / ("a" * 5000)
    codes = set()
    for call in (lambda: Case.open(too_long), lambda: read_only_query(too_long, "SELECT 1")):
        with pytest.raises(LedgerError) as caught:
            call()
        codes.add(caught.value.code)
        assert "is longer than this file system takes" in caught.value.message
    assert codes == {"INVALID_ARGUMENT"}


def test_a_case_path_longer_than_the_system_takes_of_short_names_is_named_by_its_length(tmp_path):
    """A path of 25 folders of 200 bytes each (5,000 bytes and more) was said to hold a name too long."""
    too_long = tmp_path.joinpath(*["d" * 200] * 25)
    size = len(os.fsencode(str(too_long)))
    for call in (lambda: Case.open(too_long), lambda: read_only_query(too_long, "SELECT 1"),
                 lambda: Case.create(too_long, "BUG-1")):
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == INVALID_ARGUMENT
        assert caught.value.message.endswith(f"cannot name a file: the path, of {size} bytes, is longer than this "
                                             "system takes")
    assert list(tmp_path.iterdir()) == []


def test_ledger_sql_allows_read_only_pragma_table_functions(demo):
    columns, rows = read_only_query(demo, "SELECT name, type FROM pragma_table_info('events') ORDER BY cid")
    assert columns == ["name", "type"] and rows[:2] == [("seq", "INTEGER"), ("type", "TEXT")]


@pytest.mark.parametrize("query, words", [
    ("PRAGMA user_version = 7", "not authorized"), ("SELECT * FROM pragma_journal_mode", "not authorized"),
    ("PRAGMA journal_mode = DELETE", "not authorized"), ("ATTACH 'other.db' AS other", "not authorized"),
    ("VACUUM", "authorization denied"), ("VACUUM INTO 'copy.db'", "authorization denied")])
def test_ledger_sql_still_refuses_writing_pragmas_and_attach(demo, query, words, tmp_path, monkeypatch):
    """Each refusal says what a read may not do (VACUUM's, SQLite's "authorization denied", said nothing more)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LedgerError) as caught:
        read_only_query(demo, query)
    assert caught.value.code == INVALID_ARGUMENT
    assert caught.value.message.startswith(f"query refused: {words}; a read-only query may not write, change "
                                           "the schema, VACUUM, ATTACH, DETACH or run a PRAGMA but the schema-reading "
                                           "ones (collation_list, ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("query, name", [("SELECT hex(fts3_tokenizer('simple'))", "fts3_tokenizer"),
                                         ("SELECT FTS3_TOKENIZER('simple', x'4141414141414141')", "FTS3_TOKENIZER")])
def test_no_query_may_call_a_function_that_answers_with_an_address_inside_the_program(demo, query, name):
    """``fts3_tokenizer`` (where SQLite has it) gave the address of code inside the process, and took one to
    call later; ``ledger serve`` refused it, ``ledger sql`` and ``Case.query`` did not."""
    message = ("query refused: not authorized to use function: {}; it answers with an address inside this program, "
               "which no read needs")
    with Case.open(demo) as case:
        for call in (lambda: read_only_query(demo, query), lambda: case.query(query)):
            with pytest.raises(LedgerError) as caught:
                call()
            assert (caught.value.code, caught.value.message) == (INVALID_ARGUMENT, message.format(name))
        assert case.query("SELECT 1 AS one") == [{"one": 1}]


@pytest.mark.parametrize("command, view, kept", [("balances", "balances", "revision, hypothesis_id, initial_units"),
                                                ("balances", "balances", "*, 1 AS extra"),
                                                ("actions", "actions", "revision, hypothesis_id, action_id")])
def test_a_view_altered_to_lack_its_columns_is_named_never_a_traceback(demo, tmp_path, command, view, kept):
    """``ledger balances`` of a balances view altered in the file to fewer columns ended in Python's
    ``KeyError: 'granted_units'``; ``Case.balances()`` gave rows without the documented keys."""
    altered = tmp_path / "altered"
    shutil.copytree(demo, altered)
    source = "accounts" if view == "balances" else "reservations"
    with sqlite3.connect(altered / "ledger.sqlite") as conn:
        conn.execute(f"CREATE TABLE kept_{view} AS SELECT * FROM {view}")
        conn.execute(f"DROP VIEW {view}")
        source = f"kept_{view}" if kept.startswith("*") else source
        conn.execute(f"CREATE VIEW {view} AS SELECT {kept} FROM {source}")
    conn.close()
    done = run_cli(command, str(altered))
    err = done.stderr.decode()
    if kept.startswith("*"):  # every column, and one more: read as it is
        assert done.returncode == 0 and err == "", done.stderr
        return
    assert done.returncode == 1 and "Traceback" not in err, err
    if command == "balances":
        assert err.startswith(f"error: INTEGRITY_ERROR: the ledger's {view} view gives rows without its "
                                      "columns failed_actions, granted_units, "), err
        assert err.endswith(": the ledger was changed; run 'ledger verify'\n")
        with Case.open(altered) as case, pytest.raises(LedgerError) as caught:
            case.balances()
        assert caught.value.code == "INTEGRITY_ERROR"
    else:
        assert err.startswith("error: INTEGRITY_ERROR: "), done.stderr


@pytest.mark.parametrize("query", ["", "  \n", ";", "/* a */ ; -- b\n ;", "-- only a comment", "/* not closed"])
def test_a_query_of_no_statement_is_named_as_such(demo, query):
    """``Case.query`` answered such a query with no rows, where ``ledger sql`` refused it."""
    with Case.open(demo) as case:
        for call in (lambda: read_only_query(demo, query), lambda: case.query(query)):
            with pytest.raises(LedgerError) as caught:
                call()
            assert (caught.value.code, caught.value.message) == (
                INVALID_ARGUMENT, "the query holds no statement (only white space, comments or semicolons)")


@pytest.mark.parametrize("query", [
    "SELECT 1 AS one;;", "SELECT 1 AS one; ;\n", "SELECT 1 AS one ;\t;" + ";" * 100_000,
    "SELECT 1 AS one;; -- note", "SELECT 1 AS one; -- a\n; /* b; */ ;", "SELECT length(';') AS one;; -- x ;",
    "SELECT 1 AS one -- a ; b\n;;", "SELECT length(';/*') - 2 AS one;;", "SELECT 1 AS one /* ; */;\n;",
    "SELECT length('" + ";" * 40 + "') - 39 AS one;; -- note", "SELECT 1 AS one /*" + "x;" * 40 + "*/;; -- n",
    "SELECT 1 AS \"one\" -- it's\n;; /* ; */", "SELECT length('it''s;') - 4 AS [one];;"])
def test_a_statement_ended_by_several_semicolons_is_one_statement(demo, query):
    """It was refused as "more than one statement" (sqlite3 took what follows the first ';' for another),
    also when comments sit among the semicolons that end it."""
    with Case.open(demo) as case:
        assert case.query(query) == [{"one": 1}]
    assert read_only_query(demo, query) == (["one"], [(1,)])
    assert read_only_query(demo, "SELECT ';;' AS t") == (["t"], [(";;",)])


@hypothesis.given(st.lists(st.sampled_from(["SELECT 1", "'a;b'", "'it''s'", '"x;"', "[a;]", "`q;`", "-- c;\n",
                                             "/* ; */", ";", " ", "\n", "/", "-", "'", "*", "x", "/*"]),
                           max_size=12).map("".join))
def test_a_querys_first_statement_ends_where_sqlites_own_tokenizer_says(sql):
    """The end of the first statement found in one linear pass is the first ``;`` after which SQLite
    deems the text a complete statement (sqlite3.complete_statement, tried at every ``;``)."""
    from ledger.storage.readonly import _first_statement_end

    ends = [at + 1 for at, ch in enumerate(sql) if ch == ";" and sqlite3.complete_statement(sql[:at + 1])]
    assert _first_statement_end(sql) == (ends[0] if ends else None)


@pytest.mark.parametrize("query", ["BEGIN", "BEGIN DEFERRED", "BEGIN IMMEDIATE", "begin exclusive transaction",
                                   "COMMIT", "END", "ROLLBACK", "SAVEPOINT a", "RELEASE a", "ROLLBACK TO a",
                                   "/* a comment first */ BEGIN", " " + "--" * 40 + "\nBEGIN",
                                   "/*" + "*" * 10_000 + "*/ COMMIT"])
def test_a_query_may_not_control_a_transaction_and_is_told_it_runs_in_a_snapshot_of_its_own(demo, query):
    """``ledger sql`` let BEGIN run and answered "returns no rows", and COMMIT with SQLite's "cannot commit -
    no transaction is active"; Case.query refused both as "not authorized" with a list that left them out."""
    message = ("query refused: not authorized; each query runs on its own, in a snapshot of its own: a read-only "
               "query may not begin, commit or roll back a transaction, nor set or release a savepoint")
    with Case.open(demo) as case:
        for call in (lambda: read_only_query(demo, query), lambda: case.query(query)):
            with pytest.raises(LedgerError) as caught:
                call()
            assert (caught.value.code, caught.value.message) == (INVALID_ARGUMENT, message)
        assert case.query("SELECT 1 AS one") == [{"one": 1}]
    assert read_only_query(demo, "SELECT 1 AS one") == (["one"], [(1,)])


@pytest.mark.parametrize("query", ["SELECT 1; SELECT 2", "SELECT 1; COMMIT", "SELECT 1;;\n-- x\nSELECT 2"])
def test_a_query_of_several_statements_is_refused_as_such(demo, query):
    message = "query refused: it holds more than one statement; a query is one statement: run each on its own"
    with Case.open(demo) as case:
        for call in (lambda: read_only_query(demo, query), lambda: case.query(query)):
            with pytest.raises(LedgerError) as caught:
                call()
            assert (caught.value.code, caught.value.message) == (INVALID_ARGUMENT, message)


@pytest.mark.parametrize("query, named", [
    ("SELECT CAST(x'ff' AS TEXT) AS bad", "column 'bad'"),
    ("SELECT CAST(x'41ff' AS TEXT)", 'column "CAST(x\'41ff\' AS TEXT)"'),
    ("SELECT CAST(x'ff' AS TEXT) AS \"é\"", "a value"),  # sqlite3's message garbles a name that is not ASCII
    ("SELECT char(65) || CAST(x'ff' AS TEXT) AS t FROM hypotheses", "column 't'")])
def test_text_a_query_makes_that_is_not_utf8_is_the_querys_own_failure_not_damage(demo, query, named):
    """Text a query made (a CAST of bytes) that is not UTF-8 was called damage of the file
    (INTEGRITY_ERROR), which verify then did not find: no table of the ledger holds such text."""
    message = (f"query failed: {named} of the result is text that is not UTF-8, and none of the ledger's own "
               "tables holds such text: the query made it (a CAST of bytes AS TEXT, say); hex(…) or CAST(… AS "
               "BLOB) gives its bytes")
    with Case.open(demo) as case:
        for call in (lambda: read_only_query(demo, query), lambda: case.query(query)):
            with pytest.raises(LedgerError) as caught:
                call()
            assert (caught.value.code, caught.value.message) == (INVALID_ARGUMENT, message)


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


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
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


@pytest.mark.slow  # over 0.5 s in the default run: the slow lane (.ci/run) runs it
def test_every_view_parses_in_duckdb_with_typed_columns_and_the_ledgers_values(full):
    duck = _duckdb_with_sqlite()
    duck.execute(f"ATTACH '{full / 'ledger.sqlite'}' AS l (TYPE sqlite, READ_ONLY)")
    for view in public_views(full):
        types = dict((row[0], row[1]) for row in duck.execute(f"DESCRIBE l.{view}").fetchall())
        assert "BLOB" not in types.values(), (view, types)
        for name in INTEGER_COLUMNS.get(view, ()):
            assert types[name] == "BIGINT", (view, name, types[name])
    with Case.open(full) as opened:
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


@pytest.mark.parametrize("value", ["\u0665", "\uff15", "\u0665.5", "1\u0660"])
def test_sql_timeout_in_digits_other_than_ascii_is_a_usage_error_as_an_integer_option_is(case, value):
    """Python reads "٥" (ARABIC-INDIC FIVE) as 5; the integer options refuse such digits, and so do the
    number options (``sql --timeout``, ``fleet sql --timeout``)."""
    code, out, err = cli("sql", case.path, "select 1", "--timeout", value)
    assert (code, out) == (2, "")
    assert f"{value!r} is not a number (ASCII digits, a decimal point, an exponent)" in err


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


@pytest.mark.parametrize("args", [(5,), ("select 1", 5), ("select ?", {"a": 1}), ("select ?, ?", [1]), ("select ?", [2**63])])
def test_case_query_with_a_wrong_statement_type_or_parameters_is_invalid_argument(case, args):
    with pytest.raises(LedgerError) as caught:
        case.query(*args)
    assert caught.value.code == INVALID_ARGUMENT
    assert case.query("select :a AS a", {"a": 2}) == [{"a": 2}]



@pytest.mark.parametrize("sql, name", [("SELECT :a AS a", ":a"), ("SELECT ?1, @b", "@b"), ("SELECT $c", "$c"),
                                       ("SELECT ':x' || :d", ":d"), ("SELECT 1 /* :x */ + :é", ":é"),
                                       ("SELECT #e", "#e"), ("SELECT :f$g", ":f$g"), ("SELECT :h::i", ":h::i"),
                                       ("SELECT $j(k)", "$j(k)"), ("SELECT :$", ":$"), ("SELECT @::$", "@::$")])
def test_a_named_parameter_given_a_list_is_refused_not_bound_by_position(case, sql, name):
    """A list or tuple binds ``?`` by position: sqlite3 would bind a named parameter from it all the same
    (Python 3.12 and 3.13 warn, 3.14 refuses), so it is refused on every Python, naming the parameter."""
    with pytest.raises(LedgerError) as caught:
        case.query(sql, [1, 2])
    assert caught.value.code == INVALID_ARGUMENT
    assert caught.value.message.startswith(f"query refused: {name} is a named parameter, but params is a list")
    assert f"give a dict ({{{name[1:]!r}: ...}})" in caught.value.message


@pytest.mark.parametrize("sql", ["SELECT ':a', ?", 'SELECT 1 AS "b:c", ?', "SELECT 1 AS [d:e], ?", "SELECT 1 AS f$g, ?",
                                 "SELECT ? -- :h", "SELECT /* @i */ ?", "SELECT 'it''s :j', ?", "SELECT `k:l`, ? FROM "
                                 "(SELECT 1 AS `k:l`)", "SELECT x'3a6d', ?"])
def test_what_only_looks_like_a_named_parameter_binds_from_a_list(case, sql):
    """Inside a string, a quoted name, a comment, or after a name's first letter, ``:`` ``@`` ``$`` are no
    parameter: such a statement binds its ``?`` from a list."""
    assert list(case.query(sql, [7])[0].values())[-1] == 7


_SELECTED = ["':a'", "'it''s @b'", '1 AS "c:d"', "2 AS [e:f]", "3 AS g$h", "4 /* :i */", "x'3a6a'", "5 -- :k\n"]


@hypothesis.settings(max_examples=60, deadline=None,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(parts=st.lists(st.sampled_from(_SELECTED), max_size=4),
                  parameter=st.sampled_from(["?", "?3", ":p", "@q", "$r", "$s::t", ":é1", "#u", ":$", ":v$w", "$x(y)",
                                             "@::$", None]),
                  at=st.integers(0, 4))
def test_a_named_parameter_is_found_where_sqlite_finds_one(case, parts, parameter, at):
    """Against SQLite itself: given no value at all (an empty dict), it names the statement's first
    parameter when that is named ("binding parameter :p") and numbers it when it is not."""
    if parameter is not None:
        parts.insert(min(at, len(parts)), parameter)
    sql = "SELECT " + (", ".join(parts) or "1")
    try:
        sqlite3.connect(":memory:").execute(sql, {})
        named = False
    except sqlite3.ProgrammingError as error:
        named = "binding parameter" in str(error)
    try:
        case.query(sql, (1,) * sql.count("?"))
        refused = False
    except LedgerError as error:
        refused = "is a named parameter" in error.message
    assert refused == named


class _Buffer:
    """An object with a buffer but no SQL value, as a numpy scalar or array is."""

    def __init__(self, data):
        self.data = data

    def __buffer__(self, flags):
        return memoryview(self.data)


@pytest.mark.parametrize("params, says", [
    ([_Buffer(b"\x03\x00\x00\x00\x00\x00\x00\x00")], "params[0] must be None, a bool, int, float, str or bytes, got "
                                                    "test_views_sql._Buffer"),
    ({"a": [1]}, "params['a'] must be None, a bool, int, float, str or bytes, got list"),
    ({1: 1}, "a params key must be a str, got int"),
    ([float("nan")], "params[0] is NaN, which SQLite has no value for (it would bind as NULL); give None if NULL "
                     "is meant"),
    ("3", "params must be a list or tuple (for ?) or a dict (for :name), got str"),
    ((n for n in [3]), "params must be a list or tuple (for ?) or a dict (for :name), got generator")])
def test_a_query_parameter_sqlite_has_no_value_for_is_refused_not_bound_as_bytes(case, params, says):
    """sqlite3 binds any object with a buffer as a blob: a numpy.int64(3) would compare as 8 bytes and
    match no row, without a word."""
    with pytest.raises(LedgerError) as caught:
        case.query("SELECT :a AS a" if isinstance(params, dict) else "SELECT ? AS a", params)
    assert (caught.value.code, caught.value.message) == (INVALID_ARGUMENT, says)
    assert case.query("SELECT ? AS a, ? AS b, ? AS c, ? AS d, ? AS e", (None, True, 3, 1.5, b"x")) == [
        {"a": None, "b": 1, "c": 3, "d": 1.5, "e": b"x"}]
    assert case.query("SELECT ? AS a", [bytearray(b"y")]) == [{"a": b"y"}]


def test_a_numpy_number_as_a_query_parameter_is_refused_naming_its_type(case):
    numpy = pytest.importorskip("numpy")
    with pytest.raises(LedgerError) as caught:
        case.query("SELECT seq FROM events WHERE seq = ?", [numpy.int64(1)])
    assert caught.value.message == "params[0] must be None, a bool, int, float, str or bytes, got numpy.int64"
    assert case.query("SELECT seq FROM events WHERE seq = ?", [numpy.float64(1)]) == [{"seq": 1}]

ENDLESS = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT COUNT(*) FROM r"


def test_case_query_stops_a_statement_at_its_time_limit_and_the_case_stays_usable(case, budget):
    with pytest.raises(LedgerError) as caught:
        case.query(ENDLESS, timeout_ms=50)
    assert caught.value.code == INVALID_ARGUMENT and "time limit" in caught.value.message
    assert case.query("SELECT 3 AS x", timeout_ms=1000) == [{"x": 3}]
    count = case.query("SELECT COUNT(*) AS n FROM events")[0]["n"]
    assert budget.reserve("H1", "after-limit", "source.read_context").seq == count + 1  # writes run unhindered
    for timeout in (0, -1, 1.5, True, "30", 86_400_001):
        with pytest.raises(LedgerError) as refused:
            case.query("SELECT 1", timeout_ms=timeout)
        assert refused.value.code == INVALID_ARGUMENT and "timeout_ms" in refused.value.message


@pytest.mark.parametrize("statement", [
    "select 1; select 2", "attach ':memory:' as other", "pragma locking_mode = EXCLUSIVE", "pragma query_only = 1",
    "create table mine (x)", "drop view balances", "pragma user_version = 5", "delete from events",
    "insert into events (seq) values (99)", "begin", "commit", "savepoint s", "vacuum", "selec 1"])
@pytest.mark.sampled(every=4)
def test_case_query_reads_only_and_refuses_everything_else_as_ledger_sql_does(case, budget, statement):
    """Case.query runs on the case's own connection: a statement that would do anything but read is
    INVALID_ARGUMENT, writes nothing and leaves the case as usable as before."""
    before = case.query("SELECT COUNT(*) AS n FROM events")
    with pytest.raises(LedgerError) as caught:
        case.query(statement)
    assert caught.value.code == INVALID_ARGUMENT and caught.value.message.startswith("query refused: ")
    assert caught.value.details == {"query": "refused"}  # the statement's own fault, told to programs
    assert case.query("SELECT COUNT(*) AS n FROM events") == before
    assert case.query("SELECT name FROM pragma_table_info('events') LIMIT 1") == [{"name": "seq"}]
    assert budget.reserve("H1", "after", "source.read_context").seq == before[0]["n"] + 1  # still writes
    with Case.open(case.path) as other:  # and nobody else is locked out
        assert other.status()["package_generation"] == before[0]["n"] + 1


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
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


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
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


# --- every view, every tool, on a case with rows in every view ----------------------------------
SCOPE_STEPS = [
    {"op": "establish", "scope": "case", "issuer": "controller", "at": "2026-01-05T10:46:10.250001Z",
     "limits": {"units": 500, "actions": 40, "duration_ms": 7200000, "cost_usd_millicents": 9000}},
    {"op": "establish", "scope": "revision:1", "limits": {"actions": 30, "duration_ms": 3600000},
     "issuer": "controller", "warning_ratio": 0.5, "at": "2026-01-05T10:46:20Z"},
    {"op": "establish", "scope": "hypothesis:1/H1", "limits": {"units": 100}, "issuer": "controller",
     "on_exhausted": "task_failed", "at": "2026-01-05T10:46:30Z"},
    {"op": "reserve", "hypothesis": "H1", "action_id": "q-0015", "action": "research.lookup",
     "at": "2026-01-05T10:46:40Z"},
    {"op": "record_result", "hypothesis": "H1", "action_id": "q-0015", "evidence": {"finding": "x"},
     "cost_usd_millicents": 250, "at": "2026-01-05T10:46:50Z"},
    {"op": "settle", "hypothesis": "H1", "action_id": "q-0015", "semantic_score": 40, "reason": "some",
     "at": "2026-01-05T10:46:55.000002Z"},
    # units granted for a requested test, its feedback confirmed and stored as evidence, fed to the
    # budget and settled
    {"op": "grant", "hypothesis": "H1", "units": 40, "issuer": "controller", "reason": "room for a test",
     "grant_id": "g-1", "at": "2026-01-05T10:46:55.5Z"},
    {"op": "request_test", "hypothesis": "H1", "action_id": "t-1", "kind": "human", "operation_id": "test-1",
     "at": "2026-01-05T10:46:56Z"},
    {"op": "transition", "to": "BLOCKED", "at": "2026-01-05T10:46:57Z"},
    {"op": "submit_feedback", "operation_id": "test-1", "reply": {"status": "passed", "details": {"log": "ok"}},
     "at": "2026-01-05T10:46:58Z"},
    {"op": "confirm_feedback", "feedback_id": "F000001", "at": "2026-01-05T10:46:59Z"},
    {"op": "store_feedback", "operation_id": "test-1", "feedback_id": "F000001", "at": "2026-01-05T10:46:59.5Z"},
    {"op": "record_evidence", "hypothesis": "H1", "action_id": "t-1", "record_id": "E000004",
     "at": "2026-01-05T10:46:59.75Z"},
    {"op": "settle", "hypothesis": "H1", "action_id": "t-1", "semantic_score": 90, "reason": "the test passed",
     "at": "2026-01-05T10:46:59.875Z"},
]


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    """The demo's investigation plus scopes with limits in all four dimensions, money reported with a
    result, a requested test whose confirmed feedback is stored as evidence, and settled actions after
    them: every public view has rows (evidence included)."""
    import json

    from ledger import BudgetConfig, apply_journal
    from ledger.ground.resources import resource_dir

    target = tmp_path_factory.mktemp("full") / "case"
    example = resource_dir("examples") / "demo"
    lines = (example / "journal.jsonl").read_text(encoding="utf-8").splitlines()
    lines[-1:-1] = [json.dumps(step) for step in SCOPE_STEPS]  # before the move to EVALUATING
    shutil.copytree(example / "sources", target / "sources", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(example / "data", target / "data")
    with Case.create(target, "BUG-20", at="2026-01-05T09:59:00Z") as case:
        policy = BudgetConfig.load(resource_dir("config") / "budget.example.toml")
        refused = [r.error.code for r in apply_journal(case, lines, budget=case.budget(policy), keep_going=True)
                   if not r.ok]
    assert refused == ["INSUFFICIENT_BUDGET"]
    assert verify_case(target).events == 73
    return target


def documented_types() -> dict[str, dict[str, str]]:
    """``{view: {column: "integer" | "text"}}`` from the column tables of docs/sql.md."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "sql.md").read_text(encoding="utf-8")
    found: dict[str, dict[str, str]] = {}
    view = None
    for line in text.splitlines():
        heading = re.match(r"^### `(\w+)`", line)
        if heading:
            view = heading.group(1)
            found[view] = {}
        cell = re.match(r"^\| `(\w+)` \| (integer|text) \|", line)
        if view and cell:
            found[view][cell.group(1)] = cell.group(2)
    found["balances_recomputed"] = dict(found["balances"])  # "the same columns"
    return found


def test_docs_give_a_type_for_every_column_of_every_view(full):
    conn = sqlite3.connect(f"file:{full / 'ledger.sqlite'}?mode=ro", uri=True)
    types = documented_types()
    for view in public_views(full):
        columns = [d[0] for d in conn.execute(f"SELECT * FROM {view} LIMIT 0").description]
        assert list(types[view]) == columns, view
    conn.close()


def test_every_view_has_rows_in_the_case_the_type_tests_read(full):
    conn = sqlite3.connect(f"file:{full / 'ledger.sqlite'}?mode=ro", uri=True)
    counts = {view: conn.execute(f"SELECT COUNT(*) FROM {view}").fetchone()[0] for view in public_views(full)}
    conn.close()
    assert counts == {"actions": 15, "balances": 4, "balances_recomputed": 4, "case_status": 1, "evidence": 4,
                      "scope_usage": 7}


def test_every_view_column_has_its_documented_type_in_sqlite(full):
    conn = sqlite3.connect(f"file:{full / 'ledger.sqlite'}?mode=ro", uri=True)
    for view, columns in documented_types().items():
        cursor = conn.execute(f"SELECT * FROM {view}")
        names = [d[0] for d in cursor.description]
        for row in cursor.fetchall():
            for name, value in zip(names, row):
                kind = conn.execute("SELECT typeof(?)", (value,)).fetchone()[0]
                assert kind in (columns[name], "null"), (view, name, kind)
    conn.close()


def test_every_view_column_has_its_documented_type_in_duckdb(full):
    duck = _duckdb_with_sqlite()
    duck.execute(f"ATTACH '{full / 'ledger.sqlite'}' AS l (TYPE sqlite, READ_ONLY)")
    for view, columns in documented_types().items():
        described = {row[0]: row[1] for row in duck.execute(f"DESCRIBE l.{view}").fetchall()}
        assert described == {name: ("BIGINT" if kind == "integer" else "VARCHAR") for name, kind in columns.items()}, view
    # numbers that are numbers: sums work and order is numeric
    assert duck.execute("SELECT SUM(consumed) FROM l.scope_usage WHERE dimension = 'actions'").fetchone()[0] == 30
    remaining = [r[0] for r in duck.execute("SELECT remaining FROM l.scope_usage ORDER BY remaining").fetchall()]
    assert remaining == sorted(remaining) and all(type(value) is int for value in remaining)


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_every_view_reads_the_same_rows_in_duckdb_as_in_sqlite(full):
    duck = _duckdb_with_sqlite()
    duck.execute(f"ATTACH '{full / 'ledger.sqlite'}' AS l (TYPE sqlite, READ_ONLY)")
    conn = sqlite3.connect(f"file:{full / 'ledger.sqlite'}?mode=ro", uri=True)
    for view in public_views(full):
        assert sorted(duck.execute(f"SELECT * FROM l.{view}").fetchall(), key=repr) == sorted(
            conn.execute(f"SELECT * FROM {view}").fetchall(), key=repr), view
    conn.close()


def test_every_view_column_has_its_documented_type_in_pandas(full):
    pandas = pytest.importorskip("pandas")
    conn = sqlite3.connect(f"file:{full / 'ledger.sqlite'}?mode=ro", uri=True)
    for view, columns in documented_types().items():
        frame = pandas.read_sql_query(f"SELECT * FROM {view}", conn, dtype_backend="numpy_nullable")
        for name, kind in columns.items():
            if frame[name].notna().any():  # a column of nothing but NULL has no type to read
                assert str(frame[name].dtype) == ("Int64" if kind == "integer" else "string"), (view, name)
    conn.close()


def test_every_view_column_has_its_documented_type_in_sqlite_utils(full):
    sqlite_utils = pytest.importorskip("sqlite_utils")
    db = sqlite_utils.Database(full / "ledger.sqlite")
    for view, columns in documented_types().items():
        for row in db.query(f"SELECT * FROM {view}"):
            for name, value in row.items():
                assert value is None or type(value) is (int if columns[name] == "integer" else str), (view, name)
    db.close()


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_scope_usage_duration_is_whole_milliseconds_rounded_down_across_leap_days_and_years(tmp_path):
    """The view's integer date arithmetic agrees with the rules (and with DuckDB) on awkward instants."""
    from ledger.rules.scopes import elapsed_ms

    origin = "2023-12-31T23:59:59.999999Z"
    later = ["2024-01-01T00:00:00.000000Z", "2024-01-01T00:00:00.000998Z", "2024-01-01T00:00:00.001000Z",
             "2024-02-28T23:59:59.999999Z", "2024-02-29T12:00:00.500000Z", "2024-03-01T00:00:00.000001Z",
             "2025-03-01T00:00:01.000000Z", "2026-03-01T00:00:00.123456Z"]
    case = Case.create(tmp_path / "c", case_id="BUG-1", at=origin)
    case.scopes().establish("case", {"duration_ms": 2**53 - 1}, "controller", at=origin)
    duck = None
    try:
        duck = _duckdb_with_sqlite()
    except pytest.skip.Exception:
        pass
    for index, at in enumerate(later):
        case.scopes().request_increase("case", "duration_ms", 1, "agent", f"step {index}", at=at)
        expected = elapsed_ms(origin, at)
        assert case.query("SELECT consumed FROM scope_usage")[0]["consumed"] == expected, at
        if duck is not None:
            duck.execute(f"ATTACH '{tmp_path / 'c' / 'ledger.sqlite'}' AS l (TYPE sqlite, READ_ONLY)")
            assert duck.execute("SELECT consumed FROM l.scope_usage").fetchone()[0] == expected, at
            duck.execute("DETACH l")
    case.close()
    assert verify_case(tmp_path / "c").events == 2 + len(later)


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_ledger_with_the_old_scope_usage_verifies_and_opening_it_installs_the_typed_view(full, tmp_path):
    copy = tmp_path / "old"
    shutil.copytree(full, copy)
    downgrade_ledger(copy, 6)
    assert "strftime" in sqlite3.connect(copy / "ledger.sqlite").execute(
        "SELECT sql FROM sqlite_master WHERE name = 'scope_usage'").fetchone()[0]
    assert verify_case(copy).events == 73
    with Case.open(copy) as opened:
        usage = opened.query("SELECT * FROM scope_usage")
    with Case.open(full) as opened:
        assert usage == opened.query("SELECT * FROM scope_usage")
    assert "strftime" not in sqlite3.connect(copy / "ledger.sqlite").execute(
        "SELECT sql FROM sqlite_master WHERE name = 'scope_usage'").fetchone()[0]
    assert verify_case(copy).events == 73


# --- the documented queries run as printed in every tool the docs name ---------------------------
def documented_queries() -> list[str]:
    """Every statement of the ```sql blocks of README.md and docs/sql.md (comment lines dropped),
    and the whole queries docs/sql.md gives inline in backticks."""
    from ledger.storage.sqlfiles import split_statements

    root = Path(__file__).resolve().parents[1]
    found = []
    for name in ("README.md", "docs/sql.md"):
        for block in re.findall(r"```sql\n(.*?)```", (root / name).read_text(encoding="utf-8"), re.S):
            for statement in split_statements(block):
                lines = [line for line in statement.splitlines() if not line.lstrip().startswith("--")]
                found.append("\n".join(lines).rstrip(";"))
    inline = re.findall(r"`(SELECT [^`]+)`", (root / "docs" / "sql.md").read_text(encoding="utf-8").replace("\n", " "))
    return found + [query for query in inline if "…" not in query]


def test_the_docs_hold_the_queries_this_test_runs():
    queries = documented_queries()
    assert len(queries) >= 8
    assert any("GROUP BY b.revision" in q for q in queries)
    assert any("EXCEPT" in q for q in queries)


@pytest.mark.parametrize("query", documented_queries())
@pytest.mark.sampled(every=4)
def test_every_documented_query_runs_as_printed_in_every_tool_the_docs_name(full, query):
    conn = sqlite3.connect(f"file:{full / 'ledger.sqlite'}?mode=ro", uri=True)
    rows = conn.execute(query).fetchall()
    conn.close()
    columns, through_ledger = read_only_query(full, query)
    assert [tuple(r) for r in through_ledger] == rows
    sqlite_utils = pytest.importorskip("sqlite_utils")
    db = sqlite_utils.Database(full / "ledger.sqlite")
    assert [tuple(r.values()) for r in db.query(query)] == rows
    db.close()
    pandas = pytest.importorskip("pandas")
    with sqlite3.connect(f"file:{full / 'ledger.sqlite'}?mode=ro", uri=True) as again:
        assert len(pandas.read_sql_query(query, again)) == len(rows)
    again.close()
    if shutil.which("sqlite3"):
        import subprocess
        shell = subprocess.run(["sqlite3", "-readonly", str(full / "ledger.sqlite"), query + ";"],
                               capture_output=True, text=True, timeout=60)
        assert shell.returncode == 0 and shell.stderr == "", shell.stderr
        assert len(shell.stdout.splitlines()) >= len(rows)
    duck = _duckdb_with_sqlite()
    duck.execute(f"ATTACH '{full / 'ledger.sqlite'}' AS l (TYPE sqlite, READ_ONLY)")
    duck.execute("USE l")
    got = duck.execute(query).fetchall()
    if "pragma_table_info" in query:  # each engine describes a table in its own words
        at = 1 if query.startswith("SELECT *") else 0  # the column names agree; their types are each engine's own
        assert [row[at] for row in got] == [row[at] for row in rows] and rows
        return
    assert sorted(got, key=repr) == sorted(rows, key=repr), query  # (rows that tie may come in another order)


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_the_documented_way_to_read_a_ledger_from_duckdb_offline_runs_as_printed(full):
    _duckdb_with_sqlite()  # skips where the extension package is missing
    import subprocess
    import sys

    text = (Path(__file__).resolve().parents[1] / "docs" / "sql.md").read_text(encoding="utf-8")
    (snippet,) = re.findall(r"```python\n(.*?)```", text, re.S)
    assert "case/ledger.sqlite" in snippet and full.name == "case"
    shown = subprocess.run([sys.executable, "-c", snippet], cwd=full.parent, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "remaining" in shown.stdout and "int64" in shown.stdout and "BUG-20" in shown.stdout


def test_ledger_sql_help_names_every_public_view(full):
    from click.testing import CliRunner

    from ledger_cli.main import main as cli_main

    shown = " ".join(CliRunner().invoke(cli_main, ["sql", "--help"]).output.split())
    listed = shown.split("Public views: ", 1)[1].split(".", 1)[0]
    assert sorted(listed.split(", ")) == public_views(full)


def test_the_docs_query_for_repeated_evidence_lists_each_repeating_action_once(case):
    """docs/sql.md: every recorded result, plain or the evidence store's (run_tool), has a row in
    results; the documented query lists each action whose evidence repeats earlier evidence once."""
    from ledger import BudgetConfig

    page = (Path(__file__).resolve().parents[1] / "docs" / "sql.md").read_text(encoding="utf-8")
    query = page.split("either kind, each once:\n\n```sql\n", 1)[1].split("\n```", 1)[0]
    budget = case.budget(BudgetConfig.example())
    budget.initialize()
    read = {"path": "sources/app.py", "start_line": 1, "end_line": 2}
    for action in ("t1", "t2"):  # the second reads the same lines: a duplicate record
        budget.run_tool("H1", action, "source.read_context", read)
        budget.settle("H1", action, 50, "relevant")
    for action in ("p1", "p2"):
        budget.reserve("H2", action, "source.read_context")
        budget.record_result("H2", action, {"finding": "same"})
        budget.settle("H2", action, 50, "relevant")
    assert read_only_query(case.path, "SELECT COUNT(*) FROM evidence WHERE duplicate_of IS NOT NULL")[1] == [(1,)]
    _, rows = read_only_query(case.path, query)
    assert sorted((h, a) for _, h, a, _ in rows) == [("H1", "t2"), ("H2", "p2")]


def test_a_query_naming_no_such_table_lists_the_ledgers_views(case):
    with pytest.raises(LedgerError) as caught:
        read_only_query(case.path, "SELECT * FROM balance")
    assert caught.value.code == INVALID_ARGUMENT
    assert caught.value.message.startswith("query refused: no such table: balance; the ledger's views are balances, "
                                           "balances_recomputed, actions, evidence, case_status, scope_usage")


@pytest.mark.parametrize("expression", ["zeroblob(900000000)", "hex(zeroblob(40000000))",
                                        "replace(hex(zeroblob(20000000)), '0', 'ab')"])
@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_query_may_not_build_a_value_past_the_value_length_limit(case, expression):
    """The time limit stops a statement only between its steps; one function call building a value of
    gigabytes is one step (seconds, and its memory), so a read may build no value over 64 MiB."""
    sql = f"SELECT length({expression}) AS n"
    for run in (lambda: read_only_query(case.path, sql), lambda: case.query(sql)):
        with pytest.raises(LedgerError) as caught:
            run()
        assert caught.value.code == INVALID_ARGUMENT and "longer than 64 MiB" in caught.value.message
    with pytest.raises(LedgerError) as caught:
        case.query("SELECT length(?) AS n", ["x" * (64 * 1024 * 1024 + 1)])
    assert caught.value.code == INVALID_ARGUMENT and "or be given as a parameter" in caught.value.message
    assert case.query("SELECT length(zeroblob(1000)) AS n") == [{"n": 1000}]
    assert case.storage.conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH) == 1_000_000_000  # the writer's is back


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_stored_value_longer_than_the_value_length_limit_stays_readable(tmp_path):
    path = tmp_path / "big"
    Case.create(path, "BIG-1").close()
    raw = sqlite3.connect(path / "ledger.sqlite")
    raw.execute("CREATE TABLE extra (b BLOB)")
    raw.execute("INSERT INTO extra VALUES (zeroblob(65 * 1024 * 1024 + 1))")
    raw.commit()
    raw.close()
    sql = "SELECT hex(substr(b, -2)) AS tail, length(b) AS n FROM extra"  # substr reads the whole value
    assert read_only_query(path, sql) == (["tail", "n"], [("0000", 65 * 1024 * 1024 + 1)])
    with Case.open(path) as opened:
        assert opened.query(sql) == [{"tail": "0000", "n": 65 * 1024 * 1024 + 1}]


def test_a_query_naming_what_an_older_ledger_lacks_says_it_predates_it_and_what_upgrades_it(tmp_path):
    """README question 8 (case_status.outcome) on a ledger an older case-ledger wrote and no writer
    upgraded: 'no such column: outcome' alone read as a mistake in the query."""
    case = start_case(make_package(tmp_path / "old"))
    case.close()
    downgrade_ledger(case.path, 6)
    with pytest.raises(LedgerError) as caught:
        read_only_query(case.path, "SELECT outcome FROM case_status")
    assert (caught.value.code, caught.value.message) == ("INVALID_ARGUMENT", (
        "query refused: no such column: outcome (this ledger was written by an older case-ledger, schema version 6, "
        f"and no writer has upgraded it to {schema_version()} yet: its views lack what newer ones have; a command "
        "that writes, such as 'ledger export', upgrades it)"))
    assert read_only_query(case.path, "SELECT state FROM case_status")[1] == [("INVESTIGATING_HYPOTHESES",)]
    with Case.open(case.path):  # a writer's open upgrades it
        pass
    assert read_only_query(case.path, "SELECT outcome FROM case_status")[1] == [(None,)]
    with pytest.raises(LedgerError) as current:
        read_only_query(case.path, "SELECT missing_column FROM case_status")
    assert current.value.message == "query refused: no such column: missing_column"


def _case_with_an_account_ended_at_initialize(path: Path) -> Case:
    """Two accounts of 5 units, below the cheapest action (10 by default): initialize itself ends both."""
    case = Case.create(path, case_id="INIT-1")
    case.open_revision([{"statement": "too poor to act"}, {"statement": "rich"}], 5)
    case.transition("INVESTIGATING_HYPOTHESES")
    case.budget().initialize()
    return case


def test_an_account_initialize_ends_has_its_terminations_row_and_both_balances_views_agree(tmp_path):
    case = _case_with_an_account_ended_at_initialize(tmp_path / "c")
    seq = case.events()[-1]["seq"]
    assert case.query("SELECT * FROM terminations ORDER BY hypothesis_id") == [
        {"revision": 1, "hypothesis_id": h, "seq": seq, "status": "budget_exhausted",
         "terminal_reason": "remaining_below_floor"} for h in ("H1", "H2")]
    assert [(r["status"], r["terminal_reason"]) for r in case.balances()] == \
        [("budget_exhausted", "remaining_below_floor")] * 2
    assert case.query("SELECT * FROM balances EXCEPT SELECT * FROM balances_recomputed") == []
    assert case.query("SELECT * FROM balances_recomputed EXCEPT SELECT * FROM balances") == []
    case.close()
    assert verify_case(tmp_path / "c").events == seq


def test_a_ledger_an_older_version_wrote_without_those_rows_verifies_and_a_writer_adds_them(tmp_path):
    case = _case_with_an_account_ended_at_initialize(tmp_path / "c")
    rows = case.query("SELECT * FROM terminations ORDER BY hypothesis_id")
    case.close()
    downgrade_ledger(tmp_path / "c", 9)
    conn = sqlite3.connect(tmp_path / "c" / "ledger.sqlite")  # as schema 9's writer left it: no row
    conn.execute("DROP TRIGGER terminations_no_delete")
    conn.execute("DELETE FROM terminations")
    conn.execute(shipped_schema()["terminations_no_delete"])
    conn.commit()
    conn.close()
    assert verify_case(tmp_path / "c").events == 4  # compared with a replay at its own version
    with Case.open(tmp_path / "c") as opened:  # a writer upgrades it
        assert opened.query("SELECT * FROM terminations ORDER BY hypothesis_id") == rows
        assert opened.query("SELECT * FROM balances EXCEPT SELECT * FROM balances_recomputed") == []
        assert opened.query("SELECT MAX(version) FROM schema_migrations") == [{"MAX(version)": schema_version()}]
    assert verify_case(tmp_path / "c").events == 4
    conn = sqlite3.connect(tmp_path / "c" / "ledger.sqlite")
    try:  # the guard set aside while the rows were added is back: rows of the newest event only
        with pytest.raises(sqlite3.IntegrityError, match="terminations rows must belong to the newest event"):
            conn.execute("INSERT INTO terminations VALUES (1, 'H3', 1, 'rejected', 'x')")
    finally:
        conn.close()


def test_a_ledger_passed_off_as_version_9_fails_verify_by_the_terminations_rows_it_holds(tmp_path):
    """A ledger made to look like version 9 (010 makes no object of its own, so its rows stay): verify
    then expects no terminations row from initialize, and names the one it holds."""
    _case_with_an_account_ended_at_initialize(tmp_path / "c").close()
    downgrade_ledger(tmp_path / "c", 9)
    with pytest.raises(LedgerError) as caught:
        verify_case(tmp_path / "c")
    assert caught.value.code == "INTEGRITY_ERROR"
    assert "helper table terminations holds a row the replay does not derive" in caught.value.message


def test_a_sum_past_sqlites_largest_integer_says_the_query_ran_and_what_sums_without_overflow(case):
    big = "SELECT 9223372036854775807 AS n UNION ALL SELECT 1"
    with pytest.raises(LedgerError) as caught:
        case.query(f"SELECT SUM(n) FROM ({big})")
    assert caught.value.code == INVALID_ARGUMENT
    assert caught.value.message == ("query failed: integer overflow: a value it computed (a SUM, say) passed "
                                    "2**63-1, the largest integer SQLite holds; TOTAL() sums as a floating-point "
                                    "number, or CAST the values AS REAL first")
    assert caught.value.details == {"query": "failed"}
    assert case.query(f"SELECT TOTAL(n) AS t FROM ({big})") == [{"t": 9.223372036854776e18}]


def test_case_query_keeps_every_column_of_a_name_given_twice_as_ledger_sql_heads_them(case, budget):
    """`SELECT r.novelty_score, a.novelty_score …`: a dict keyed by column name would keep only the
    last; the later ones are keyed name_2, name_3, the headers `ledger sql` prints."""
    assert case.query("SELECT 1 AS x, 2 AS x, 3 AS x_2, 4 AS x") == [{"x": 1, "x_2": 2, "x_2_2": 3, "x_3": 4}]
    budget.reserve("H1", "a1", "source.read_context")
    rows = case.query("SELECT a.action_id, b.action_id FROM actions a JOIN actions b USING (hypothesis_id)")
    assert rows == [{"action_id": "a1", "action_id_2": "a1"}]
    assert cli("sql", case.path, "SELECT 1 AS x, 2 AS x, 3 AS x_2, 4 AS x", "--json")[:2] == (
        0, '[{"x":1,"x_2":2,"x_2_2":3,"x_3":4}]\n')


#: Evidence whose atoms a result stores (or not): duplicates, text SQLite and Python must read alike, and
#: lists or places that give none; the last repeats the first, a content stored before, which gives none.
ATOMS_EVIDENCE = [{"atoms": ["b", "a", "a"]}, {"atoms": ["x\u0000y", "\u00e9", "\"q\\", "\U0001f600", "a\nb"]},
                  {"atoms": ["a", 1]}, {"atoms": {"k": "v"}}, {"atoms": "abc"}, {"atoms": []}, {"atoms": [None]},
                  {"atoms": [["a"]]}, {"inner": {"atoms": ["deep"]}}, ["atoms", "x"], "atoms", {"atoms": ["z"]},
                  {"atoms": ["b", "a", "a"]}, {"atoms": ["\ue000\u0000", "\u0000\ue000", "\ue000", "\u0000"]},
                  {"atoms": ["".join(map(chr, range(0xE000, 0xF900))) + "\u0000"]}]


def test_a_ledger_made_before_result_atoms_gets_its_results_atoms_from_the_writer_that_upgrades_it(tmp_path):
    """Evidence is the caller's JSON, so a ledger older than result_atoms may hold results carrying atoms
    lists: verify reads it as it is (its replay stores no atoms where it has no table for them), and the
    writer that upgrades it adds the rows a record_result adds now, so verify still agrees after."""
    case = Case.create(tmp_path / "c", case_id="ATOMS-1")
    case.open_revision([{"statement": "h"}], 100_000)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget()
    budget.initialize()
    for number, evidence in enumerate(ATOMS_EVIDENCE):
        budget.reserve("H1", f"a{number}", "source.read_context")
        budget.record_result("H1", f"a{number}", evidence)
        budget.settle("H1", f"a{number}", 50, "read")
    rows = case.query("SELECT atom_id, seq FROM result_atoms ORDER BY seq, atom_id")
    assert [row["atom_id"] for row in rows][:8] == ["a", "b", "\"q\\", "a\nb", "x\u0000y", "\u00e9", "\U0001f600", "z"]
    assert [row["atom_id"] for row in rows][8:12] == ["\u0000", "\u0000\ue000", "\ue000", "\ue000\u0000"]
    assert len(rows) == 13  # and the one holding every marker character of the first range
    head = case.events()[-1]["seq"]
    case.close()
    downgrade_ledger(tmp_path / "c", 7)
    assert verify_case(tmp_path / "c").events == head
    with Case.open(tmp_path / "c") as opened:  # a writer upgrades it
        assert opened.query("SELECT atom_id, seq FROM result_atoms ORDER BY seq, atom_id") == rows
    assert verify_case(tmp_path / "c").events == head
    conn = sqlite3.connect(tmp_path / "c" / "ledger.sqlite")
    try:  # the guards came after the rows: rows of the newest event only
        with pytest.raises(sqlite3.IntegrityError, match="result_atoms rows must belong to the newest event"):
            conn.execute("INSERT INTO result_atoms VALUES ('new', 1)")
    finally:
        conn.close()


def test_a_ledger_an_early_build_of_version_4_made_verifies_with_the_view_text_that_build_wrote(tmp_path):
    """004_scopes.sql's scope_usage was rewritten in place (to plan in DuckDB); a version-4 ledger made
    before holds the earlier text. Verify takes the texts sql/history.sql lists for that version as
    shipped (the view's rows are the same): the ledger verifies, and its fleet export too. Any other
    text is still an altered view."""
    from ledger.storage.sqlfiles import former_objects

    case = Case.create(tmp_path / "c", case_id="V4-1")
    case.open_revision([{"statement": "h"}], 1_000)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget()
    budget.initialize()
    case.scopes().establish("case", {"units": 900, "actions": 5, "duration_ms": 10**9,
                                     "cost_usd_millicents": 10**6}, "controller")
    budget.reserve("H1", "a1", "source.read_context")
    rows = case.query("SELECT * FROM scope_usage ORDER BY dimension")
    assert len(rows) == 4
    case.close()
    downgrade_ledger(tmp_path / "c", 4)
    [(version, kind, name, former)] = sorted(former_objects())
    assert (version, kind, name) == (4, "view", "scope_usage") and former != shipped_schema(4)["scope_usage"]
    for text, verifies in ((former, True), (former.replace("AS on_exhausted", "AS  on_exhausted"), False)):
        conn = sqlite3.connect(tmp_path / "c" / "ledger.sqlite")
        conn.execute("DROP VIEW scope_usage")
        conn.execute(text)
        conn.commit()
        if verifies:  # the same rows, each value of the same storage class, as the view ships now
            assert conn.execute("SELECT * FROM scope_usage ORDER BY dimension").fetchall() == \
                [tuple(row.values()) for row in rows]
        conn.close()
        if verifies:
            head = read_only_query(tmp_path / "c", "SELECT MAX(seq) FROM events")[1][0][0]
            assert verify_case(tmp_path / "c").events == head
        else:
            with pytest.raises(LedgerError, match="the ledger's view scope_usage is altered"):
                verify_case(tmp_path / "c")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # sqlite3 reports it as well
def test_an_interrupt_inside_the_result_atoms_back_fill_is_raised_as_itself_and_leaves_the_older_ledger(
        tmp_path, monkeypatch):
    """A Ctrl-C that reached the function the back-fill calls (a list holding a NUL) was swallowed by
    sqlite3 and raised as INTEGRITY_ERROR "user-defined function raised exception"; it is raised as
    itself, the upgrade rolled back, and the next writer upgrades the ledger whole."""
    import types

    from ledger.storage import sqlfiles

    case = Case.create(tmp_path / "c", case_id="ATOMS-2")
    case.open_revision([{"statement": "h"}], 100_000)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget()
    budget.initialize()
    budget.reserve("H1", "a1", "source.read_context")
    budget.record_result("H1", "a1", {"atoms": ["x\u0000y", "z"]})
    rows = case.query("SELECT atom_id, seq FROM result_atoms ORDER BY atom_id")
    case.close()
    downgrade_ledger(tmp_path / "c", 7)

    def interrupted(text):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(sqlfiles, "json", types.SimpleNamespace(loads=interrupted, dumps=json.dumps))
        with pytest.raises(KeyboardInterrupt):
            Case.open(tmp_path / "c")
    assert read_only_query(tmp_path / "c", "SELECT MAX(version) FROM schema_migrations")[1] == [(7,)]
    assert verify_case(tmp_path / "c").events == 6
    with Case.open(tmp_path / "c") as opened:
        assert opened.query("SELECT atom_id, seq FROM result_atoms ORDER BY atom_id") == rows
    assert [row["atom_id"] for row in rows] == ["x\u0000y", "z"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # sqlite3 reports it as well
def test_an_exception_inside_a_migration_function_is_raised_only_on_the_thread_whose_statement_called_it():
    """The exceptions the back-fill's function raised were kept in one list per process: a statement
    failing on one thread while another thread's back-fill was interrupted raised that other interrupt."""
    import threading

    from ledger.storage.sqlfiles import atoms_marked
    from ledger.storage.sqlite_file import run_migration_statement

    class Unreadable(str):
        def startswith(self, *args):
            raise RuntimeError("the other thread's interrupt")

    raised_elsewhere = []

    def other_thread():
        try:
            atoms_marked(Unreadable('["x"]'))
        except RuntimeError as exc:
            raised_elsewhere.append(exc)

    def fails_after_the_other_thread():
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        raise ValueError("this statement's own failure")

    conn = sqlite3.connect(":memory:")
    conn.create_function("fails_after_the_other_thread", 0, fails_after_the_other_thread)
    with pytest.raises(LedgerError, match="user-defined function raised exception"):
        run_migration_statement(conn, "SELECT fails_after_the_other_thread()")
    assert [str(exc) for exc in raised_elsewhere] == ["the other thread's interrupt"]
    conn.close()


@pytest.mark.parametrize("query", ["SELECT printf('%s', statement) FROM hypotheses",
                                   "SELECT format('%s', statement) FROM hypotheses",
                                   "SELECT statement FROM hypotheses", "SELECT upper(statement) FROM hypotheses"])
def test_stored_text_that_is_not_utf8_is_damage_named_by_its_row_however_the_query_reads_it(demo, query, tmp_path):
    """Through this program's printf or format (a Python function sqlite3 cannot give such text to) it
    was "query refused: user-defined function raised exception", the query's fault."""
    case = tmp_path / "t"
    shutil.copytree(demo, case)
    conn = sqlite3.connect(case / "ledger.sqlite")
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'hypotheses'"
                            ).fetchall()
    for name, _ in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("UPDATE hypotheses SET statement = CAST(x'73656cff6c' AS TEXT) WHERE hypothesis_id = 'H1'")
    for _, sql in triggers:
        conn.execute(sql)
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as caught:
        read_only_query(case, query)
    assert caught.value.code == "INTEGRITY_ERROR"
    assert caught.value.message.endswith("hypotheses.statement holds bytes that are not UTF-8 where text belongs "
                                         "(invalid start byte at byte 3): the file is damaged")
    assert caught.value.details["table"] == "hypotheses"


def test_this_programs_printf_given_text_that_is_not_utf8_says_so(demo):
    with pytest.raises(LedgerError) as caught:
        read_only_query(demo, "SELECT format('%s', CAST(x'ff' AS TEXT)) AS f")
    assert (caught.value.code, caught.value.message) == (
        INVALID_ARGUMENT, "query refused: user-defined function raised exception: this program's printf() or "
        "format() failed, as it does given a text that is not UTF-8 (hex(…) or CAST(… AS BLOB) gives its bytes)")


def test_the_search_for_stored_text_that_is_not_utf8_runs_past_the_querys_time_limit(demo):
    """A time limit passing while the ledger's tables were searched (the query's own stop, on the same
    connection) called an intact ledger damaged."""
    from ledger.storage.readonly import _query_error

    conn = sqlite3.connect(demo / "ledger.sqlite")
    conn.set_progress_handler(lambda: 1, 1)  # every statement stopped at once, as at a deadline passed
    failure = sqlite3.OperationalError("Could not decode to UTF-8 column 'bad' with text '\ufffd'")
    answer = _query_error(failure, conn)
    conn.close()
    assert (answer.code, answer.message.split(":")[0]) == (INVALID_ARGUMENT, "query failed")
