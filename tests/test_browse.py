"""Browsing a case (docs/browse.md): `ledger serve` puts the cases in Datasette, read-only, with the
descriptions of sql/descriptions.toml (the source docs/sql.md's view tables are generated from),
the usual questions as canned queries and each hypothesis' remaining units as a picture. The pages
are read through Datasette's own test client; tests/test_browser.py loads them in Chromium."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import hashlib
import io
import shutil
import json
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

import pytest

from ledger import BudgetConfig, Case, LedgerError, read_only_query, run_demo
from ledger.browse.metadata import (RAW_HISTORY, browse_metadata, canned_queries, column_description, descriptions, remaining_units_svg,
                           served_cases, view_columns)
from ledger.browse.server import case_datasette, serve_metadata
from ledger.storage.sqlfiles import schema_version

from conftest import EXAMPLE_BUDGET, REPO, make_package, read_only_mount, run_cli, start_case

pytest.importorskip("datasette")
sys.path.insert(0, str(REPO / "tools"))
import sql_reference  # noqa: E402  (tools/ is not a package)

sys.path.remove(str(REPO / "tools"))
T0 = "2026-01-01T00:00:00Z"
README = (REPO / "README.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    path, _, _ = run_demo(tmp_path_factory.mktemp("browse") / "demo", echo=lambda text: None)
    return path


@pytest.fixture(scope="module")
def scoped(tmp_path_factory) -> Path:
    """A case with scopes: a reservation refused at the case's units limit (limit.exceeded), a
    warning, and a hypothesis rejected with a reason."""
    path = make_package(tmp_path_factory.mktemp("browse") / "scoped")
    case = Case.create(path, case_id="SCOPED-1", at=T0)
    case.open_revision([{"statement": "first"}, {"statement": "second"}], 40, at=T0)
    case.transition("INVESTIGATING_HYPOTHESES", at=T0)
    budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
    budget.initialize(at=T0)
    case.scopes().establish("case", {"units": 15, "actions": 10}, "controller", warning_ratio="0.5", at=T0)
    budget.reserve("H1", "q1", "source.read_context", at=T0)
    budget.record_result("H1", "q1", {"finding": "line 2 subtracts"}, source_refs=["sources/app.py"], at=T0)
    budget.settle("H1", "q1", semantic_score=100, reason="shows the bug", at=T0)
    budget.grant("H1", 5, "controller", reason="worth more", grant_id="g1", at=T0)
    budget.reserve("H2", "q2", "source.find_text", at=T0)
    with pytest.raises(LedgerError) as refused:
        budget.reserve("H1", "q3", "source.find_text", at=T0)
    assert refused.value.code == "LIMIT_EXCEEDED"
    budget.fail("H2", "q2", reason="tool timed out", at=T0)
    budget.reject("H2", reason="the display is fine", at=T0)
    case.close()
    return path


@pytest.fixture
def site(demo, scoped):
    """The Datasette of `ledger serve` on both cases, queries in the test's thread; closed after."""
    datasette = case_datasette([demo, scoped], sql_threads=0)
    yield datasette
    for database in datasette.databases.values():
        database.close()


def get(datasette, path: str):
    return asyncio.run(datasette.client.get(path))


def digest(path: Path) -> dict[str, str]:
    """sha256 of the ledger file and of its WAL (when there is one)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.glob("ledger.sqlite*"))
            if p.name in ("ledger.sqlite", "ledger.sqlite-wal")}



def test_a_served_connection_closed_in_the_middle_of_a_read_leaves_no_log(demo, tmp_path):
    """Stopping the server mid-query (Ctrl-C) closes its connections while a cursor may be unfinished:
    that cursor kept the closed connection open in SQLite, so the log was not folded away."""
    from ledger.browse.connections import case_connection
    from ledger.storage.sqlite_file import release_log

    folder = tmp_path / "case"
    shutil.copytree(demo, folder)
    conn = case_connection(str(folder / "ledger.sqlite"))
    for read in (conn.execute, conn.cursor().execute):  # what Datasette calls, both
        rows = read("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n LIMIT 100000) "
                    "SELECT x FROM n, events")
        assert rows.fetchone() == (1,)
    conn.close()
    release_log(folder / "ledger.sqlite")
    assert rows is not None and sorted(p.name for p in folder.iterdir() if p.name.endswith(("-wal", "-shm"))) == []

# --- one source of descriptions --------------------------------------------------------------
def test_every_view_column_has_a_description_and_integer_columns_have_a_unit(demo):
    _, views = read_only_query(demo, "SELECT name FROM sqlite_master WHERE type = 'view' ORDER BY name")
    assert sorted(descriptions()["views"]) == [name for (name,) in views]
    for (view,) in views:
        names, rows = read_only_query(demo, f"SELECT name, type FROM pragma_table_info('{view}')")
        described = view_columns(view)
        assert list(described) == [row[0] for row in rows], view
        for name, column in described.items():
            assert column["meaning"].strip() and column["type"] in ("integer", "text"), (view, name)
            if column["type"] == "integer":
                assert column["unit"].strip(), f"{view}.{name} has no unit"
        assert descriptions()["views"][view]["description"].strip()


def test_every_append_only_table_is_described_as_raw_history(demo):
    _, tables = read_only_query(demo, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    assert sorted(descriptions()["tables"]) == [name for (name,) in tables]
    _, events = read_only_query(demo, "SELECT name FROM pragma_table_info('events')")
    assert list(descriptions()["tables_columns"]["events"]) == [name for (name,) in events]


def test_docs_sql_md_view_tables_are_the_ones_generated_from_the_descriptions():
    page = (REPO / "docs" / "sql.md").read_text(encoding="utf-8")
    assert sql_reference.render(page) == page, "run: python tools/sql_reference.py"
    assert "| `remaining_units` | integer | units | initial + granted − spent + rewarded |" in page
    assert "| `warning_bps` | integer | basis points |" in page


def test_a_column_description_is_its_meaning_in_plain_text_then_its_unit():
    assert column_description({"meaning": "the newest event's `seq`", "unit": "event seq"}) == \
        "the newest event's seq [event seq]"
    assert column_description({"meaning": "`H1`, `H2`, …", "unit": ""}) == "H1, H2, …"


# --- canned queries ----------------------------------------------------------------------------
def _readme_questions() -> list[str]:
    block = README.split("Questions people ask first", 1)[1].split("```sql", 1)[1].split("```", 1)[0]
    return [" ".join(q.split()).rstrip(";") for q in re.split(r"^-- \d\. .*$", block, flags=re.MULTILINE)
            if q.strip()][:5]


def test_the_readmes_five_questions_are_the_first_five_canned_queries_verbatim():
    queries = list(canned_queries().values())
    assert [" ".join(q["sql"].split()) for q in queries[:5]] == _readme_questions()
    assert list(canned_queries())[5:] == ["refusals_and_reasons", "evidence_by_novelty", "scope_usage_near_limit",
                                          "remaining_units_history"]


def test_every_canned_query_is_a_read_that_runs_on_the_demo_and_the_scoped_case(demo, scoped):
    for path in (demo, scoped):
        for name, query in canned_queries().items():
            sql = query["sql"].replace(":hypothesis_id", "''")
            read_only_query(path, sql)  # a write, ATTACH or pragma would be refused here


def test_refusals_and_reasons_lists_limit_refusals_and_ended_accounts_with_their_reason(scoped, demo):
    sql = canned_queries()["refusals_and_reasons"]["sql"]
    _, rows = read_only_query(scoped, sql.replace(":hypothesis_id", "''"))
    assert [(r[2], r[4], r[5]) for r in rows] == [("limit.exceeded", "H1", "q3"), ("budget.rejected", "H2", None)]
    assert rows[0][6] == "reserving would take units of scope case to 21, over its limit of 15 (on_exhausted: block_action)"
    assert rows[1][6] == "rejected: the display is fine"
    _, only_h2 = read_only_query(scoped, sql.replace(":hypothesis_id", "'H2'"))
    assert [r[4] for r in only_h2] == ["H2"]
    _, ended = read_only_query(demo, sql.replace(":hypothesis_id", "''"))
    assert {(r[4], r[6].split(":")[0]) for r in ended} == {
        ("H2", "abandoned_low_information_gain"), ("H3", "budget_exhausted"), ("H4", "rejected")}


def test_the_questions_about_hypotheses_and_actions_name_the_revision_each_row_belongs_to(tmp_path):
    """A case of two revisions has an H1 in each: the rows of questions 2, 4 and 5 said H1 twice."""
    case = Case.create(tmp_path / "two", "TWO-1", at=T0)
    case.open_revision([{"statement": "first idea"}], 10, at=T0)
    case.transition("INVESTIGATING_HYPOTHESES", at=T0)
    case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize(at=T0)
    case.transition("EVALUATING", at=T0)
    case.open_revision([{"statement": "second idea"}], 10, at=T0)
    case.transition("INVESTIGATING_HYPOTHESES", at=T0)
    case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize(at=T0)
    case.close()
    queries = canned_queries()
    names, rows = read_only_query(tmp_path / "two", queries["refunds_per_hypothesis"]["sql"])
    assert names[:3] == ["revision", "hypothesis_id", "statement"]
    assert sorted(row[:3] for row in rows) == [(1, "H1", "first idea"), (2, "H1", "second idea")]
    for name in ("abandoned_hypotheses", "pending_actions"):
        assert read_only_query(tmp_path / "two", queries[name]["sql"])[0][:2] == ["revision", "hypothesis_id"]


def test_scope_usage_near_limit_shows_limits_past_their_warning_threshold(scoped):
    _, rows = read_only_query(scoped, canned_queries()["scope_usage_near_limit"]["sql"])
    assert [(r[2], r[3], r[4], r[5], r[7]) for r in rows] == [("units", 15, 11, 4, 7333)]


def _history(path: Path, hypothesis: str = "") -> list[dict]:
    sql = canned_queries()["remaining_units_history"]["sql"].replace(":hypothesis_id", f"'{hypothesis}'")
    names, rows = read_only_query(path, sql)
    return [dict(zip(names, row)) for row in rows]


def test_remaining_units_history_ends_at_each_hypothesis_balance(demo, scoped):
    for path, expected in ((demo, {"H1": 21, "H2": 10, "H3": 4, "H4": 37}), (scoped, {"H1": 44, "H2": 30})):
        newest = {row["hypothesis_id"]: row["remaining_units"] for row in _history(path)}
        _, balances = read_only_query(path, "SELECT hypothesis_id, remaining_units FROM balances")
        assert newest == dict(balances) == expected
    history = _history(demo)
    assert [r["remaining_units"] for r in history if r["hypothesis_id"] == "H3"] == [40, 20, 32, 12, 13, 3, 4]
    assert all(r["type"].startswith("budget.") for r in history)
    assert [(r["type"], r["remaining_units"]) for r in _history(scoped, "H1")] == [
        ("budget.initialized", 40), ("budget.reserved", 35), ("budget.settled", 39), ("budget.granted", 44)]


def test_remaining_units_history_agrees_with_the_account_states_every_budget_event_carries(demo, scoped):
    """Each point of the history (from the helper rows) is the remaining units the budget event at that
    seq recorded for the account (the state `balances` reads from the newest one)."""
    carried = ("SELECT e.seq, CAST(a.value ->> '$.hypothesis_id' AS TEXT), CAST(a.value ->> '$.initial_units' AS INTEGER)"
               " + CAST(a.value ->> '$.granted_units' AS INTEGER) - CAST(a.value ->> '$.spent_units' AS INTEGER)"
               " + CAST(a.value ->> '$.rewarded_units' AS INTEGER) FROM events AS e"
               " JOIN json_each(e.body, '$.accounts') AS a ON TRUE WHERE e.stream = 'budget'")
    for path in (demo, scoped):
        _, rows = read_only_query(path, carried)
        state = {(seq, h): units for seq, h, units in rows}
        for point in _history(path):
            assert state[(point["seq"], point["hypothesis_id"])] == point["remaining_units"], point


# --- the picture -------------------------------------------------------------------------------
def test_the_picture_draws_a_step_line_per_hypothesis_ending_at_the_newest_event():
    rows = [{"seq": 3, "revision": 1, "hypothesis_id": "H1", "remaining_units": 40},
            {"seq": 3, "revision": 1, "hypothesis_id": "H2", "remaining_units": 40},
            {"seq": 5, "revision": 1, "hypothesis_id": "H1", "remaining_units": 35},
            {"seq": 9, "revision": 1, "hypothesis_id": "H2", "remaining_units": 0}]
    svg = remaining_units_svg(rows)
    lines = re.findall(r'<polyline class="hypothesis" data-label="(\w+)"[^>]*points="([^"]+)"', svg)
    assert [label for label, _ in lines] == ["H1", "H2"]
    points = {label: [tuple(map(float, p.split(","))) for p in pts.split()] for label, pts in lines}
    assert len(points["H1"]) == 4 and points["H1"][-1][0] == points["H2"][-1][0]  # both run to seq 9
    assert points["H2"][-1][1] == 276.0  # 0 units sits on the axis
    assert ">H1: 35<" in svg and ">H2: 0<" in svg and "remaining units" in svg


def test_the_picture_labels_lines_with_the_revision_when_there_are_several():
    rows = [{"seq": 1, "revision": 1, "hypothesis_id": "H1", "remaining_units": 5},
            {"seq": 2, "revision": 2, "hypothesis_id": "H1", "remaining_units": 7}]
    assert re.findall(r'data-label="([^"]+)"', remaining_units_svg(rows)) == ["1/H1", "2/H1"]
    assert "no budget events yet" in remaining_units_svg([])


# --- the site, through Datasette's test client -------------------------------------------------
@pytest.mark.slow  # over 0.9 s in the default run: the slow lane (.ci/run) runs it
def test_each_case_page_has_its_title_the_views_first_and_the_picture(site):
    page = get(site, "/BUG-20")
    assert page.status_code == 200
    text = page.text
    assert "BUG-20 (EVALUATING)" in text
    assert text.index('href="/BUG-20/balances"') < text.index('href="/BUG-20/events"')
    assert '<img src="/BUG-20/remaining_units_history.svg?hypothesis_id="' in text
    assert "raw history" in text
    assert "SCOPED-1 (INVESTIGATING_HYPOTHESES)" in get(site, "/SCOPED-1").text
    index = get(site, "/").text
    assert "BUG-20" in index and "SCOPED-1" in index and "_memory" not in index


def test_a_view_page_shows_every_column_description_with_its_unit(site):
    page = get(site, "/BUG-20/balances").text
    for name, column in view_columns("balances").items():
        assert f"{column_description(column)}".replace("'", "&#39;") in page, name
    assert "units the account started with [units]" in page
    usage = get(site, "/SCOPED-1/scope_usage").text
    assert "the warning threshold in basis points (8000 = 80 %) [basis points]" in usage


def test_a_raw_table_page_says_it_is_append_only_history(site):
    assert RAW_HISTORY.strip() in get(site, "/BUG-20/events").text


def test_canned_queries_answer_with_named_parameters_as_json(site):
    rows = get(site, "/BUG-20/evidence_by_novelty.json?hypothesis_id=H1&_shape=array").json()
    assert [(r["record_id"], r["novelty_score"]) for r in rows] == [("E000001", 100), ("E000003", 100), ("E000002", 50)]
    pending = get(site, "/BUG-20/pending_actions.json?_shape=array").json()
    assert pending == []
    refusals = get(site, "/SCOPED-1/refusals_and_reasons.json?hypothesis_id=&_shape=array").json()
    assert [r["type"] for r in refusals] == ["limit.exceeded", "budget.rejected"]
    page = get(site, "/BUG-20/abandoned_hypotheses").text
    assert "Hypotheses stopped (exhausted, abandoned, rejected) and why" in page and "low_information_streak" in page


def test_the_picture_is_served_as_svg_with_a_line_per_hypothesis(site):
    picture = get(site, "/BUG-20/remaining_units_history.svg?hypothesis_id=")
    assert picture.status_code == 200 and picture.headers["content-type"].startswith("image/svg+xml")
    assert re.findall(r'data-label="(\w+)"', picture.text) == ["H1", "H2", "H3", "H4"]
    assert ">H3: 4<" in picture.text
    one = get(site, "/BUG-20/remaining_units_history.svg?hypothesis_id=H2").text
    assert re.findall(r'data-label="(\w+)"', one) == ["H2"]
    query_page = get(site, "/BUG-20/remaining_units_history").text
    assert '<img src="/BUG-20/remaining_units_history.svg?hypothesis_id="' in query_page
    assert get(site, "/BUG-20/pending_actions.svg").status_code >= 400  # only the history is drawn


def test_no_http_request_can_write_the_ledger_and_its_bytes_stay_the_same(site, demo):
    assert get(site, "/BUG-20/events.json?_size=1").status_code == 200  # a reader's (empty) WAL is there before
    before = digest(demo)
    attempts = [
        ("get", "/BUG-20?sql=" + "INSERT INTO lifecycle (seq, revision, state) VALUES (999, 1, 'CLOSED')"),
        ("get", "/BUG-20?sql=" + "DELETE FROM events"),
        ("get", "/BUG-20?sql=" + "PRAGMA query_only = OFF"),
        ("get", "/BUG-20?sql=" + "ATTACH DATABASE '/tmp/x.db' AS x"),
        ("post", "/BUG-20/events/-/insert"),
        ("post", "/BUG-20/-/create"),
        ("post", "/BUG-20/events/-/drop"),
        ("post", "/BUG-20/pending_actions"),
    ]
    for method, path in attempts:
        extra = {"json": {"row": {"seq": 1}}} if method == "post" else {"follow_redirects": True}  # 1.0: /db/-/query
        response = asyncio.run(getattr(site.client, method)(path, **extra))
        assert response.status_code >= 300 or "Statement must be a SELECT" in response.text \
            or "not allowed" in response.text, (path, response.status_code)
    # even a statement that reached a connection Datasette opened is refused by SQLite itself
    database = site.get_database("BUG-20")
    with pytest.raises(Exception, match="readonly|read-only|attempt to write"):
        asyncio.run(database.execute_write("DELETE FROM events"))
    assert asyncio.run(database.execute("SELECT COUNT(*) FROM events")).rows[0][0] == 56
    assert digest(demo) == before


def test_a_served_query_cannot_build_a_value_past_the_length_limit(site):
    """zeroblob(100 MB) took 3 GB of the server's memory and 15 s, starving every other request."""
    response = get(site, "/BUG-20.json?sql=select+length(zeroblob(100000000))+as+n")
    assert response.status_code == 400 and "string or blob too big" in response.text
    assert get(site, "/BUG-20.json?sql=select+length(zeroblob(1000000))+as+n").json()["rows"] == [[1000000]]


def test_a_served_printf_repeating_past_the_length_limit_answers_null_at_once(site, monkeypatch):
    """printf('%.*c', 2000000000, 'x') held a query thread for 11 s (one step no time limit stops):
    the served connections' printf and format say NULL, as SQLite's do after the repeat."""
    from ledger.storage import bounded_printf

    looked_at = []
    real = bounded_printf._repeats_past
    monkeypatch.setattr(bounded_printf, "_repeats_past", lambda form, args, limit, probe: looked_at.append(form) or
                        real(form, args, limit, probe))
    response = get(site, "/BUG-20.json?sql=select+printf('%25.*c',+2000000000,+'x')+is+null+as+n,"
                         "+format('%25.*c',+3,+'y')+as+y")
    assert response.json()["rows"] == [[1, "yyy"]] and looked_at == ["%.*c", "%.*c"]


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_served_stored_value_longer_than_the_length_limit_stays_readable(tmp_path):
    path = make_package(tmp_path / "big")
    Case.create(path, case_id="BIG-1", at=T0).close()
    raw = sqlite3.connect(path / "ledger.sqlite")
    raw.execute("CREATE TABLE extra (b BLOB)")
    raw.execute("INSERT INTO extra VALUES (zeroblob(65 * 1024 * 1024 + 1))")
    raw.commit()
    raw.close()
    datasette = case_datasette([path], sql_threads=0)
    try:
        response = get(datasette, "/BIG-1.json?sql=select+hex(substr(b,+-2))+as+tail+from+extra")  # reads it all
        assert response.status_code == 200 and response.json()["rows"] == [["0000"]], response.text
    finally:
        for database in datasette.databases.values():
            database.close()


def test_a_served_query_cannot_ask_for_an_address_inside_the_server(site, capfd):
    """fts3_tokenizer('simple') answered with a pointer into the server process. A refused query is
    answered to its visitor only, never printed on the server's terminal as well."""
    for sql in ("select+fts3_tokenizer('simple')", "select+FTS3_TOKENIZER('porter')+as+p", "select+nope"):
        response = get(site, f"/BUG-20.json?sql={sql}")
        assert response.status_code == 400 and ("not authorized" in response.text or "no such column" in response.text)
    assert capfd.readouterr().err == ""
    assert get(site, "/BUG-20.json?sql=select+count(*)+as+n+from+events").json()["rows"] == [[56]]


@pytest.mark.parametrize("query", ["_where=1=1;select+1", "_sort=nonexistent", "_sort_desc=nonexistent",
                                   "_sort=seq&_sort_desc=seq", "_through={bad", "_timelimit=abc"])
def test_a_malformed_table_query_is_a_refusal_to_its_visitor_never_a_traceback(site, capfd, query):
    """Two statements in _where reached SQLite's "one statement at a time" (a 500, and a Python
    traceback on the server's terminal); an unknown _sort column was a 500; a _through that is no
    JSON or a _timelimit that is no number a 500 with a traceback."""
    for page in (f"/BUG-20/events.json?{query}", f"/BUG-20/events?{query}"):
        response = get(site, page)
        assert response.status_code == 400, (page, response.status_code, response.text[:200])
    assert "Traceback" not in capfd.readouterr().err
    [row] = get(site, "/BUG-20/events.json?_where=seq=1").json()["rows"]
    assert (row["seq"] if isinstance(row, dict) else row[0]) == 1  # Datasette 1.0 gives rows as objects


@pytest.mark.parametrize("page", ["/BUG-20/events.json?_json_infinity=abc", "/BUG-20/events.csv?_timelimit=-1",
                                  "/BUG-20.csv?sql=select+1&_timelimit=-1", "/BUG-20/events?seq__gt=99999999999999999999",
                                  "/BUG-20/balances?_next=99999999999999999999999"])
def test_a_value_of_the_request_the_server_cannot_use_is_a_400_and_nothing_on_its_terminal(site, capfd, page):
    """Each was a 500 with a traceback (a CSV's query past a _timelimit printed the whole SQL)."""
    answer = get(site, page)
    assert answer.status_code == 400, (answer.status_code, answer.text[:200])
    assert capfd.readouterr().err == ""
    if page.endswith("_json_infinity=abc"):  # its error says nothing of itself: its kind is named
        assert answer.json()["error"] == "a value of the request cannot be used: ValueAsBooleanError"


@pytest.mark.parametrize("through, ours", [("0", True), ("[1]", True), ("{}", True), ("[" * 5000, True),
                                           ('{"table":"results","column":"action_id"}', True),
                                           ('{"table":1,"column":"x","value":1}', False),
                                           ('{"table":"results","column":"action_id","value":[1]}', False)])
def test_a_through_filter_is_a_json_object_naming_a_table_a_column_and_a_value(site, capfd, through, ours):
    """Datasette read a _through of other JSON without checking it: a KeyError or TypeError,
    answered as an error of the server (500) with a warning on its terminal. (Where Datasette
    refuses the value itself, as a table it cannot find, its own 400 stands.)"""
    answer = get(site, f"/BUG-20/balances.json?_through={quote(through)}")
    assert answer.status_code == 400, (answer.status_code, answer.text[:200])
    error = answer.json()["error"]
    assert error.startswith("_through must be a JSON object naming a table, a column and a value") == ours, error
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("query, ours", [("", True), ("?sql=", True), ("?_size=5", True), ("?sql=%20%20", False)])
def test_a_case_s_csv_needs_the_sql_to_run(site, capfd, query, ours):
    """/CASE.csv with no SQL was Datasette's KeyError: a 500 and a warning on the server's terminal
    (blank SQL Datasette refuses itself, as invalid)."""
    import datasette

    answer = get(site, f"/BUG-20.csv{query}")
    if datasette.__version__.startswith("0."):
        assert answer.status_code == 400, (answer.status_code, answer.text[:200])
        assert ("a case&#39;s CSV is the answer to a query: give the SQL to run" in answer.text) == ours
    else:  # Datasette 1.0 has no page there: its own 404
        assert answer.status_code == 404, (answer.status_code, answer.text[:200])
    assert capfd.readouterr().err == ""
    if datasette.__version__.startswith("0."):
        assert get(site, "/BUG-20.csv?sql=select+1+as+n").text.splitlines() == ["n", "1"]


def test_a_fault_of_the_server_is_a_500_page_and_one_line_on_its_terminal_never_a_traceback(site, capfd,
                                                                                            monkeypatch):
    from ledger.browse import server

    def broken(*args, **kwargs):
        raise RuntimeError("the picture broke\nhere")
    monkeypatch.setattr(server, "remaining_units_svg", broken)
    answer = get(site, "/BUG-20/remaining_units_history.svg?hypothesis_id=")
    assert answer.status_code == 500 and "the picture broke" in answer.text
    assert capfd.readouterr().err == ("warning: /BUG-20/remaining_units_history.svg: RuntimeError: the picture "
                                      "broke\\nhere\n")


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_served_query_cannot_return_more_than_its_bytes_in_all(site):
    """Each value under the limit, eight of 50 MB took 12 GB of the server's memory (a 2.4 GB reply)."""
    response = get(site, "/BUG-20.json?sql=select+zeroblob(50000000)+as+b+from+events+limit+8")
    assert response.status_code == 400
    assert "the query's rows pass 256 MiB of text and blobs (as JSON writes them" in response.text
    assert len(get(site, "/BUG-20.json?sql=select+zeroblob(5000000)+as+b+from+events+limit+3").content) > 15_000_000
    assert len(get(site, "/BUG-20/events.json?_size=max").json()["rows"]) == 56


@pytest.mark.parametrize("value, rows, refused", [
    ("zeroblob(9000000)", 5, True),  # 45 MB of zero bytes: 270 MB of \u0000 (took 7.6 GB at 250 MB)
    ("printf('%.*c', 9000000, char(233))", 5, True),  # é, written \u00e9: six bytes each
    ("printf('%.*c', 9000000, char(127))", 5, True),  # DEL, written \u007f
    ("printf('%.*c', 9000000, 'x')", 5, False)])  # plain text: its size
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_served_query_s_bytes_are_counted_as_json_writes_them(site, value, rows, refused):
    response = get(site, f"/BUG-20.json?sql=select+{value}+as+v+from+events+limit+{rows}")
    assert (response.status_code == 400) is refused, response.status_code
    if refused:
        assert "pass 256 MiB of text and blobs (as JSON writes them" in response.text


@pytest.fixture(scope="module")
def full_contents(tmp_path_factory) -> Path:
    """A case holding its default limit of distinct evidence content: 64 payloads of nearly 1 MiB."""
    path = make_package(tmp_path_factory.mktemp("browse") / "full")
    case = Case.create(path, case_id="FULL-1", at=T0)
    case.open_revision([{"statement": "first"}], 5000, at=T0)
    case.transition("INVESTIGATING_HYPOTHESES", at=T0)
    budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
    budget.initialize(at=T0)
    for i in range(64):
        budget.reserve("H1", f"a{i}", "source.read_context", at=T0)
        budget.record_result("H1", f"a{i}", {"text": f"{i:08d}".ljust(2 ** 20 - 32, "x")}, at=T0)
        budget.settle("H1", f"a{i}", semantic_score=100, reason="new", at=T0)
    case.close()
    return path


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_every_page_and_download_of_a_case_within_its_default_limits_is_served_whole(full_contents):
    """Its contents table (64 MiB of text) was refused by a 64 MiB bound on one query's rows, and its
    streamed CSV download ended in that error after a 200."""
    datasette = case_datasette([full_contents], sql_threads=0)
    try:
        page = get(datasette, "/FULL-1/contents.json?_shape=array&_col=size_bytes&_size=max")
        assert page.status_code == 200 and len(page.json()) == 64
        assert get(datasette, "/FULL-1/contents").status_code == 200
        download = get(datasette, "/FULL-1/contents.csv?_stream=on&_size=max")
        limit = csv.field_size_limit(2 ** 21)
        rows = list(csv.reader(io.StringIO(download.text)))
        csv.field_size_limit(limit)
        assert download.status_code == 200 and rows[0] == ["sha256", "seq", "size_bytes", "cumulative_bytes", "body"]
        assert sorted(json.loads(row[4])["text"][:8] for row in rows[1:]) == [f"{i:08d}" for i in range(64)]
    finally:
        for database in datasette.databases.values():
            database.close()


def test_listing_the_cases_does_not_copy_the_metadata_once_per_table(site, monkeypatch):
    """Datasette 0.65.5 copied the whole metadata (every served case's descriptions) to find each
    listed table's permission rules: the home page took time growing with the square of the cases."""
    import copy

    copies = []
    real = copy.deepcopy
    monkeypatch.setattr(copy, "deepcopy", lambda value, *rest: copies.append(1) or real(value, *rest))
    page = get(site, "/")
    assert page.status_code == 200 and "BUG-20" in page.text and "SCOPED-1" in page.text
    assert copies == []


def test_a_table_rule_a_plugin_adds_still_applies(demo):
    """Rules are worked out once per table, not dropped: a plugin's metadata denying a table is obeyed."""
    import types

    from datasette import hookimpl
    from datasette.plugins import pm

    @hookimpl
    def get_metadata(datasette, key, database, table):
        return {"databases": {"BUG-20": {"tables": {"events": {"allow": False}}}}}

    plugin = types.ModuleType("deny_events")
    plugin.get_metadata = get_metadata
    pm.register(plugin, name="deny-events")
    datasette = case_datasette([demo], sql_threads=0)
    try:
        assert get(datasette, "/BUG-20/events.json").status_code == 403
        assert get(datasette, "/BUG-20/events.json").status_code == 403  # the second answer is the first's
        assert get(datasette, "/BUG-20/balances.json").status_code == 200
    finally:
        pm.unregister(name="deny-events")
        for database in datasette.databases.values():
            database.close()


@pytest.mark.parametrize("name", ["p%41", "c#x", "q?mode=rwc", "r%2523"])
def test_a_case_whose_folder_name_reads_as_a_uri_part_is_served_as_itself(demo, tmp_path, name):
    """Datasette opens file:PATH?mode=ro with the path as it is: 'p%41' opened 'pA' (another case,
    under this one's title), 'c#x' opened 'c' read-write (made it when missing), '?' broke every page."""
    folder = tmp_path / name
    shutil.copytree(demo, folder)
    decoy = make_package(tmp_path / "decoys" / "pA")
    Case.create(decoy, case_id="OTHER-1").close()
    for other in ("pA", "c", "q", "r%23"):
        if not (tmp_path / other).exists():
            shutil.copytree(decoy, tmp_path / other)
    before = sorted(p.name for p in tmp_path.iterdir())
    datasette = case_datasette([folder], sql_threads=0)
    try:
        assert get(datasette, "/BUG-20/case_status.json?_shape=array").json()[0]["case_id"] == "BUG-20"
        files = get(datasette, "/BUG-20.json?sql=select+file+from+pragma_database_list&_shape=array").json()
        assert files == [{"file": str(folder / "ledger.sqlite")}]
    finally:
        for database in datasette.databases.values():
            database.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not any(p.name.endswith(("-wal", "-shm")) for other in ("pA", "c", "q") for p in (tmp_path / other).iterdir())


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_metadata_only_prints_datasettes_metadata_with_the_canned_queries(demo, scoped):
    done = run_cli("serve", str(demo), str(scoped), "--metadata-only")
    assert done.returncode == 0, done.stderr.decode()
    metadata = json.loads(done.stdout)
    assert metadata == json.loads(json.dumps(serve_metadata([demo, scoped])))
    assert list(metadata["databases"]) == ["BUG-20", "SCOPED-1"]
    case = metadata["databases"]["BUG-20"]
    assert case["title"] == "BUG-20 (EVALUATING)"
    assert list(case["queries"]) == list(canned_queries())
    assert case["queries"]["evidence_by_novelty"]["sql"].count(":hypothesis_id") == 2
    assert case["tables"]["balances"]["columns"]["spent_units"] == (
        "units debited by reservations, before refunds (the spent of budget remaining is net of them: "
        "spent_units − rewarded_units) [units]")
    assert case["tables"]["events"]["description"].startswith(RAW_HISTORY)


_NO_DATASETTE = ("import sys\nclass Block:\n    def find_spec(self, name, path=None, target=None):\n"
                 "        if name == 'datasette' or name.startswith('datasette.') or name == 'uvicorn':\n"
                 "            raise ImportError(name)\nsys.meta_path.insert(0, Block())\n"
                 "from ledger_cli.main import main\nmain()\n")


_IMPORTS_OF_SERVE = ("import importlib, sys\nimport ledger_cli.serve as serve\n"
                     "def started(paths, **options):\n    importlib.import_module('datasette.app')\n"
                     "    names = ('pandas', 'pyarrow', 'sqlite_utils')\n"
                     "    print(sorted(name for name in names if name in sys.modules))\n"
                     "serve.serve_cases = started\nfrom ledger_cli.main import main\nmain()\n")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_serve_imports_sqlite_utils_without_pandas_and_pyarrow(demo):
    """Datasette imports sqlite-utils, which imports pandas (and with it pyarrow) whenever installed:
    135 MB at start against 64, and a third of a second."""
    pytest.importorskip("pandas")  # installed with the test extras: the case this is about
    done = subprocess.run([sys.executable, "-c", _IMPORTS_OF_SERVE, "serve", str(demo)], capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "['sqlite_utils']\n"), done.stderr


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_without_the_web_extra_serve_names_what_to_install_and_metadata_only_still_works(demo):
    done = subprocess.run([sys.executable, "-c", _NO_DATASETTE, "serve", str(demo)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr == "error: INVALID_ARGUMENT: ledger serve needs Datasette: pip install '.[web]' (in a clone of the repository)\n"
    meta = subprocess.run([sys.executable, "-c", _NO_DATASETTE, "serve", str(demo), "--metadata-only"],
                          capture_output=True, text=True, timeout=120)
    assert meta.returncode == 0 and "BUG-20" in json.loads(meta.stdout)["databases"], meta.stderr


def test_a_ledger_reached_from_two_folders_by_a_hard_link_is_served_once(demo, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    os.link(demo / "ledger.sqlite", other / "ledger.sqlite")  # the same file, not a copy: one case
    left_out: list = []
    assert [case.name for case in served_cases([demo, other], left_out)] == ["BUG-20"]
    assert [(path, error.code) for path, error in left_out] == [(str(other), "INVALID_ARGUMENT")]
    assert f"the same case as {demo} is given twice" in left_out[0][1].message
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(demo / "ledger.sqlite", copy / "ledger.sqlite")  # a copy is a case of its own
    assert [case.name for case in served_cases([demo, copy])] == ["BUG-20", "BUG-20-2"]


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_serve_refuses_no_case_a_busy_port_and_a_bad_host_and_serves_a_case_given_twice_once(demo, tmp_path):
    (tmp_path / "empty").mkdir()
    missing = run_cli("serve", str(tmp_path / "empty"), "--metadata-only")
    assert missing.returncode == 1 and missing.stderr.decode().startswith("error: LEDGER_MISSING: ")
    twice = run_cli("serve", str(demo), str(demo), "--metadata-only")  # served once, with a word (it refused all)
    assert twice.returncode == 1 and list(json.loads(twice.stdout)["databases"]) == ["BUG-20"]  # 1: one left out
    assert twice.stderr.decode() == (f"warning: {demo} is left out: INVALID_ARGUMENT: {demo}: the same "
                                     f"case as {demo} is given twice (served once, as that)\n")
    with pytest.raises(LedgerError, match="the same case as"):
        served_cases([demo, demo])
    left_out: list = []
    assert [case.name for case in served_cases([demo, demo], left_out)] == ["BUG-20"] and len(left_out) == 1
    none = run_cli("serve")
    assert none.returncode == 2
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = run_cli("serve", str(demo), "--port", str(taken.getsockname()[1]))
    assert busy.returncode == 1 and busy.stderr.decode().startswith("error: INVALID_ARGUMENT: cannot listen on 127.0.0.1:")
    bad_host = run_cli("serve", str(demo), "--host", "256.0.0.1", "--port", "0")
    assert bad_host.returncode == 1
    assert bad_host.stderr.decode().startswith("error: INVALID_ARGUMENT: cannot listen on 256.0.0.1:0: ")
    no_name = run_cli("serve", str(demo), "--host", b"\xff", "--port", "0")  # bytes no host name holds
    assert no_name.returncode == 1 and b"Traceback" not in no_name.stderr, no_name.stderr
    assert no_name.stderr.startswith(b"error: INVALID_ARGUMENT: cannot listen on ")
    for empty in ("", " "):  # an unset variable must not mean every address
        no_host = run_cli("serve", str(demo), "--host", empty, "--port", "0")
        assert no_host.returncode == 1
        assert no_host.stderr.decode().startswith("error: INVALID_ARGUMENT: the address to listen on is empty")
    with pytest.raises(LedgerError) as refused:
        served_cases([])
    assert refused.value.code == "INVALID_ARGUMENT"


def _unreadable_cases(demo: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A folder holding no case, and a copy of ``demo`` whose ledger was cut short."""
    (tmp_path / "empty").mkdir()
    cut = tmp_path / "cut"
    shutil.copytree(demo, cut)
    with open(cut / "ledger.sqlite", "r+b") as handle:
        handle.truncate(4096)
    return tmp_path / "empty", cut


def test_a_case_that_cannot_be_read_is_left_out_with_its_error_and_the_others_are_served(demo, tmp_path):
    """One damaged or missing case among several: the others are served, each one left out is listed
    with its error (serving refused them all); with none left, the first one's error is raised."""
    empty, cut = _unreadable_cases(demo, tmp_path)
    left_out: list = []
    assert [case.name for case in served_cases([empty, demo, cut], left_out)] == ["BUG-20"]
    assert [(path, refused.code) for path, refused in left_out] == [(str(empty), "LEDGER_MISSING"),
                                                                     (str(cut), "INTEGRITY_ERROR")]
    assert "was cut short" in left_out[1][1].message
    assert list(serve_metadata([empty, demo, cut], [])["databases"]) == ["BUG-20"]
    datasette = case_datasette([cut, demo], sql_threads=0, left_out=[])
    try:
        assert get(datasette, "/BUG-20/events.json?_shape=array&_size=1").status_code == 200
        assert [name for name in datasette.databases if not name.startswith("_")] == ["BUG-20"]
    finally:
        for database in datasette.databases.values():
            database.close()
    with pytest.raises(LedgerError) as refused:  # without a list, any case that cannot be read is refused
        served_cases([demo, cut])
    assert refused.value.code == "INTEGRITY_ERROR"
    none_left: list = []
    with pytest.raises(LedgerError) as refused:
        served_cases([empty, cut], none_left)
    assert refused.value.code == "LEDGER_MISSING" and [path for path, _ in none_left] == [str(empty), str(cut)]


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_serve_names_each_case_it_leaves_out_and_metadata_only_then_exits_1(demo, tmp_path):
    empty, cut = _unreadable_cases(demo, tmp_path)
    missing = f"warning: {empty} is left out{{}}: LEDGER_MISSING: no case at {empty} (no ledger.sqlite)"
    short = f"warning: {cut} is left out{{}}: INTEGRITY_ERROR: {cut / 'ledger.sqlite'} is 4096 bytes, but its own header"
    meta = run_cli("serve", str(empty), str(demo), str(cut), "--metadata-only")
    assert meta.returncode == 1 and list(json.loads(meta.stdout)["databases"]) == ["BUG-20"]
    lines = meta.stderr.decode().splitlines()
    assert len(lines) == 2 and lines[0].startswith(missing.format("")) and lines[1].startswith(short.format(""))
    none = run_cli("serve", str(empty), str(cut), "--metadata-only")
    assert none.returncode == 1 and none.stdout == b""
    lines = none.stderr.decode().splitlines()
    assert len(lines) == 2 and lines[0].startswith(short.format("")), lines
    assert lines[1].startswith(f"error: LEDGER_MISSING: no case at {empty} (no ledger.sqlite)")
    err = _served_then_stopped(str(empty), str(demo), str(cut))
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(missing.format(", not served"))
    assert lines[1].startswith(short.format(", not served")), lines


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_case_whose_path_is_not_utf8_is_refused_before_serving(tmp_path):
    """Datasette keeps each database's path as text: a path of bytes that are not UTF-8 would make
    every page of every case fail, so it is refused, naming the path readably, and nothing is served."""
    odd = make_package(tmp_path / os.fsdecode(b"case-\xff"))
    Case.create(odd, case_id="ODD-1", at=T0).close()
    with pytest.raises(LedgerError) as refused:
        served_cases([odd])
    assert refused.value.code == "INVALID_ARGUMENT" and "case-\\xff" in refused.value.message
    assert "not UTF-8" in refused.value.message
    result = run_cli("serve", os.fsencode(odd), "--port", "0")
    assert result.returncode == 1 and b"Traceback" not in result.stderr
    assert result.stderr.startswith(b"error: INVALID_ARGUMENT: ")


def test_two_cases_with_the_same_case_id_get_distinct_database_names(demo, tmp_path):
    other, _, _ = run_demo(tmp_path / "again", echo=lambda text: None)
    assert [case.name for case in served_cases([demo, other])] == ["BUG-20", "BUG-20-2"]
    # the titles and pages name each one's folder: a copy is told apart from its original
    metadata = browse_metadata(served_cases([demo, other]))["databases"]
    assert [metadata[name]["title"] for name in ("BUG-20", "BUG-20-2")] == [
        f"BUG-20 (EVALUATING, {demo.resolve()})", f"BUG-20 (EVALUATING, {other.resolve()})"]
    assert f"from the folder <code>{other.resolve()}</code>" in metadata["BUG-20-2"]["description_html"]
    assert browse_metadata(served_cases([demo]))["databases"]["BUG-20"]["title"] == "BUG-20 (EVALUATING)"


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_database_name_is_never_another_cases_own_nor_one_datasette_answers_first(demo, tmp_path):
    """A copy of BUG-20 given first was named BUG-20-2, and the case BUG-20-2 became BUG-20-2-2;
    the valid case id favicon.ico was served as favicon-ico, whose every page was Datasette's icon."""
    copy, _, _ = run_demo(tmp_path / "copy", echo=lambda text: None)
    Case.create(tmp_path / "second", "BUG-20-2").close()
    Case.create(tmp_path / "icon", "favicon.ico").close()
    Case.create(tmp_path / "icons", "faviconXicons").close()
    names = [case.name for case in served_cases([demo, copy, tmp_path / "second", tmp_path / "icon", tmp_path / "icons"])]
    assert names == ["BUG-20", "BUG-20-3", "BUG-20-2", "case-favicon-ico", "case-faviconXicons"]


@pytest.mark.parametrize("path, said", [
    ("/BUG-20.blob?sql=select+1+as+b&_blob_column=b", "b holds a number, not a binary value"),
    ("/BUG-20.blob?sql=select+1.5+as+b&_blob_column=b", "b holds a number, not a binary value"),
    ("/BUG-20.blob?sql=select+'t'+as+b&_blob_column=b", "b holds text, not a binary value"),
    ("/BUG-20/events/1.blob?_blob_column=seq", "seq holds a number, not a binary value"),
    ("/BUG-20.blob?sql=select+1+as+b+where+0&_blob_column=b", "the query returned no row"),
    ("/BUG-20.blob?sql=select+1+as+b&_blob_column=b&_blob_hash=00", "Link has expired")])
def test_a_blob_download_of_a_value_that_is_no_blob_is_a_bad_request_never_a_page_cut_short(site, path, said, capfd):
    """Datasette began a number's download, then failed: the visitor got 200 and a page cut short, the
    server's terminal a traceback of about 49 lines."""
    page = get(site, path)
    assert page.status_code == 400 and said in page.text, (page.status_code, page.text[:300])
    assert capfd.readouterr().err == ""
    blob = get(site, "/BUG-20.blob?sql=select+x'00ff'+as+b&_blob_column=b")
    assert (blob.status_code, blob.content) == (200, b"\x00\xff")


@pytest.mark.parametrize("sql, status, said", [
    ("select+1+as+one;+select+2", 400, "query refused: it holds more than one statement; a query is one statement: "
                                       "run each on its own"),
    ("select+1+as+one;;", 200, None), ("select+1+as+one;+;", 200, None), ("select+1+as+one;;+--+note", 200, None)])
def test_a_served_query_of_several_statements_is_named_so_and_one_ended_by_semicolons_runs(site, sql, status, said):
    """A served case answered sqlite3's own "You can only execute one statement at a time.", and refused
    ``select 1;;`` as several statements."""
    page = get(site, f"/BUG-20.json?sql={sql}")
    assert (page.status_code, page.json()["error"]) == (status, said)
    if status == 200:
        assert page.json()["rows"] == [[1]]


def _with_case_id(folder: Path, case_id: str) -> Path:
    """``folder``'s case with the id ``case_id`` written over its own (a file altered by hand: no case can
    be created with an id starting with ``_`` or ``-``)."""
    with sqlite3.connect(folder / "ledger.sqlite") as conn:
        conn.execute("DROP TRIGGER case_identity_no_update")
        conn.execute("UPDATE case_identity SET case_id = ?", (case_id,))
    conn.close()
    return folder


@pytest.mark.parametrize("case_id", ["_internal", "_memory", "-"])
def test_a_case_named_as_a_database_or_route_datasette_keeps_is_served_under_another_name(demo, tmp_path, case_id):
    """An altered case whose id was _internal replaced Datasette's own database, and every page of every
    case answered 500 ("attempt to write a readonly database"); one whose id was _memory was renamed by
    Datasette, out of reach of the read-only guards kept by its name (fts3_tokenizer answered)."""
    shutil.copytree(demo, tmp_path / "altered")
    altered = _with_case_id(tmp_path / "altered", case_id)
    Case.create(tmp_path / "fine", "FINE-1").close()
    cases = served_cases([altered, tmp_path / "fine"])
    assert [case.name for case in cases] == [f"case-{case_id}", "FINE-1"]
    datasette = case_datasette([altered, tmp_path / "fine"], sql_threads=0)
    try:
        assert get(datasette, "/FINE-1.json?sql=select+1").status_code == 200
        assert get(datasette, f"/case-{case_id}/events.json").status_code == 200
        refused = get(datasette, f"/case-{case_id}.json?sql=select+hex(fts3_tokenizer('simple'))")
        assert refused.status_code == 400, refused.text
        assert get(datasette, "/").status_code == 200
    finally:
        for database in datasette.databases.values():
            database.close()


def test_a_case_whose_id_is_url_safe_is_named_by_it_whatever_the_order_of_the_cases(tmp_path):
    """X.Y is served as X-Y when no case is X-Y; beside the case X-Y it gave way only when given
    after it, so the name of each depended on the order of the arguments."""
    Case.create(tmp_path / "dot", "X.Y").close()
    Case.create(tmp_path / "dash", "X-Y").close()
    for order in ([tmp_path / "dot", tmp_path / "dash"], [tmp_path / "dash", tmp_path / "dot"]):
        assert {case.case_id: case.name for case in served_cases(order)} == {"X-Y": "X-Y", "X.Y": "X-Y-2"}
    assert [case.name for case in served_cases([tmp_path / "dot"])] == ["X-Y"]


@pytest.mark.parametrize("view, shown", [
    ("SELECT 42 AS case_id, 7 AS state", ("42", "7")),
    ("SELECT NULL AS case_id, NULL AS state", ("", "")),
    ("SELECT 'A' AS case_id, 'S' AS state WHERE 0", ("", "")),
    ("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT 'A' AS case_id, 'S' AS state FROM r",
     ("A", "S")),
    ("SELECT 1 AS case_id WHERE 0", ("", "")), (None, ("", "")),
    ("SELECT SUM(x) AS case_id, 'S' AS state FROM (SELECT 9223372036854775807 AS x UNION ALL SELECT 1)", ("", "")),
])
@pytest.mark.sampled(every=4)
def test_a_case_status_view_altered_in_the_file_is_served_as_it_reads(tmp_path, view, shown):
    """A number or NULL in it stopped serve with a TypeError, no row warned of schema version 0,
    and a view of endless rows was read whole (4 GB) before its first row was used; a view without
    the columns, or none, or one whose sum passes SQLite's integers, stopped serve naming no case
    ("query refused: no such column: state")."""
    Case.create(tmp_path / "c", "ALT-1").close()
    Case.create(tmp_path / "fine", "FINE-1").close()
    with sqlite3.connect(tmp_path / "c" / "ledger.sqlite") as conn:
        conn.execute("DROP VIEW case_status")
        if view is not None:
            conn.execute(f"CREATE VIEW case_status AS {view}")
    conn.close()
    case, fine = served_cases([tmp_path / "c", tmp_path / "fine"])
    assert (case.case_id, case.state, case.schema_version) == (*shown, schema_version())
    assert (fine.name, fine.case_id) == ("FINE-1", "FINE-1")


def _served_then_stopped(*args: str) -> str:
    """Run ``ledger serve ARGS --port 0`` until it serves BUG-20, stop it with Ctrl-C (it says
    ``stopped``, exit status 0); what it wrote on standard error."""
    server = subprocess.Popen([sys.executable, "-m", "ledger_cli", "serve", *args, "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with _killed_at_the_end(server):
        assert server.stdout.readline().startswith("serving BUG-20 read-only at ")
        time.sleep(0.3)
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=30)
    assert server.returncode == 0 and out.strip() == "stopped"
    return err


@contextlib.contextmanager
def _killed_at_the_end(server: subprocess.Popen) -> Iterator[None]:
    """Kill ``server`` when the block is left with it still running (an assertion failed)."""
    try:
        yield
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()


def _start(case: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    # started as from a terminal, SIGHUP not ignored even when the tests run under nohup (a server
    # started so keeps ignoring it, by design: test_a_server_started_with_sighup_ignored_keeps_ignoring_it)
    server = subprocess.Popen([sys.executable, "-m", "ledger_cli", "serve", str(case), "--port", "0", *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **(env or {})},
                              preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    line = server.stdout.readline()
    match = re.search(r"at (http://127\.0\.0\.1:\d+/)", line)
    assert match, line + server.stderr.read()
    return server, match.group(1)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_case_written_by_other_processes_while_served_is_served_as_it_is_now(tmp_path):
    """Each of the server's threads opens its own connection; opening one looked at the ledger's
    header through a descriptor of its own, and closing that dropped the locks of the connections
    already open: a writer's close then deleted the log the server was reading, whose pages then
    showed an older count of events or 'database disk image is malformed'."""
    from conftest import start_case

    path = make_package(tmp_path / "case")
    start_case(path).close()
    server, url = _start(path)
    with _killed_at_the_end(server):
        for state in ("BLOCKED", "INVESTIGATING_HYPOTHESES") * 2:
            for _ in range(6):  # every thread of the server opens its connection
                with urllib.request.urlopen(url + "BUG-1/events.json?_shape=array&_size=1", timeout=30):
                    pass
            assert run_cli("state", str(path), state).returncode == 0
            events = read_only_query(path, "SELECT count(*) FROM events")[1][0][0]
            for _ in range(6):
                with urllib.request.urlopen(url + "BUG-1.json?sql=select+count(*)+from+events&_shape=arrayfirst",
                                            timeout=30) as answer:
                    assert json.loads(answer.read()) == [events], state
                with urllib.request.urlopen(url + "BUG-1/case_status.json?_shape=array", timeout=30) as answer:
                    assert json.loads(answer.read())[0]["state"] == state
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=30)
    assert server.returncode == 0 and err == "", err


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_case_written_over_in_place_then_put_back_whole_is_read_again_on_every_page(demo, tmp_path):
    """Bytes written over the ledger in place (not through SQLite, so no log changed) left the pages SQLite
    had read of them in the server's connections: put back byte for byte, the file stayed "malformed" on
    the pages that had read them, for good (503 minutes later), while ledger verify passed."""
    path = tmp_path / "case"
    shutil.copytree(demo, path)
    ledger = path / "ledger.sqlite"
    whole = ledger.read_bytes()
    pages = ("BUG-20/events.json?_size=max", "BUG-20/balances.json", "BUG-20/actions.json",
             "BUG-20.json?sql=select+count(*)+from+results")

    def statuses(url: str) -> list[int]:
        answers = []
        for page in pages:
            try:
                with urllib.request.urlopen(url + page, timeout=30) as answer:
                    answers.append(answer.status)
            except urllib.error.HTTPError as refused:
                answers.append(refused.code)
        return answers

    server, url = _start(path)
    with _killed_at_the_end(server):
        assert statuses(url) == [200] * len(pages)
        with open(ledger, "r+b") as handle:  # the same file cut short, then written over: no rename, no log
            handle.truncate(len(whole) // 5)
        assert statuses(url) == [503] * len(pages)
        for seed in range(8):  # which pages a connection keeps of the bytes written over it is chance
            with open(ledger, "r+b") as handle:
                handle.write(random.Random(seed).randbytes(len(whole)))
            statuses(url)  # each reads what it reads: a page SQLite still holds in memory may be served
            with open(ledger, "r+b") as handle:
                handle.write(whole)
            for _ in range(2):
                assert statuses(url) == [200] * len(pages), seed
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
    assert server.returncode == 0


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_served_case_answers_over_http_and_ctrl_c_or_sigterm_stops_it_cleanly(demo, stop):
    before = digest(demo)
    server, url = _start(demo)
    try:
        with urllib.request.urlopen(url + "BUG-20/case_status.json?_shape=array", timeout=30) as answer:
            assert json.loads(answer.read())[0]["state"] == "EVALUATING"
        started = time.monotonic()
        server.send_signal(stop)
        out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, err
    assert time.monotonic() - started < 10
    assert out.strip().endswith("stopped") and "Traceback" not in err
    assert digest(demo) == before


@pytest.mark.slow  # a real server: the slow lane (.ci/run) runs it
def test_a_facet_on_no_column_leaves_nothing_on_the_servers_terminal_when_it_stops(demo):
    """The page is a 400; Datasette's facet coroutines it left unawaited made Python print three
    RuntimeWarnings, each with a line of asyncio's source, when the server stopped."""
    server, url = _start(demo)
    try:
        for page in ("BUG-20/events.json?_facet=nosuch", "BUG-20/events?_facet=nosuch"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url + page, timeout=30)
            assert refused.value.code == 400
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert (server.returncode, out.strip().splitlines()[-1], err) == (0, "stopped", "")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_server_started_with_sighup_ignored_keeps_ignoring_it(demo):
    """Under nohup (SIGHUP ignored) the server must outlive the terminal, as it did before SIGHUP stopped it."""
    server = subprocess.Popen([sys.executable, "-m", "ledger_cli", "serve", str(demo), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        assert server.stdout.readline().startswith("serving BUG-20 read-only at ")
        server.send_signal(signal.SIGHUP)
        time.sleep(1.5)
        assert server.poll() is None
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0 and out.strip() == "stopped", err


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("host, warned", [("0.0.0.0", True), ("127.0.0.1", False), ("::1", False),
                                         ("::ffff:127.0.0.1", False), ("::ffff:0.0.0.0", True)])
def test_listening_beyond_this_machine_warns_that_there_is_no_login(demo, host, warned):
    err = _served_then_stopped(str(demo), "--host", host)
    assert err == (f"warning: listening on {host}, not only on this machine: anyone who can reach it may read every "
                   "served case and run SQL on it (there is no login)\n" if warned else "")


@pytest.mark.parametrize("stops", [(signal.SIGTERM,), (signal.SIGINT,), (signal.SIGINT, signal.SIGINT)])
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_stop_ends_a_download_under_way_within_its_grace_and_quietly(demo, stops):
    """A client reading slowly kept the server running after SIGTERM for as long as it read; a second
    Ctrl-C then ended it with two tracebacks on the terminal."""
    from ledger.browse.server import GRACE_S

    server, url = _start(demo)
    port = int(url.rsplit(":", 1)[1].strip("/"))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
            client.sendall(b"GET /BUG-20.csv?sql=select+hex(zeroblob(10000000))+as+h HTTP/1.1\r\nHost: x\r\n\r\n")
            assert client.recv(1000).startswith(b"HTTP/1.1 200")  # the reply has begun; the rest is not read
            started = time.monotonic()
            for stop in stops:
                server.send_signal(stop)
                time.sleep(0.5)
            out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0 and out.strip().endswith("stopped"), err
    assert time.monotonic() - started < GRACE_S + 5
    assert "Traceback" not in err and "ERROR" not in err, err


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_open_hands_the_address_to_the_web_browser_once_it_listens(demo):
    server, url = _start(demo, "--open", env={"BROWSER": "echo opened %s"})
    try:
        assert server.stdout.readline().strip() == f"opened {url}"
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert answer.status == 200
    finally:
        os.kill(server.pid, signal.SIGINT)
        out, err = server.communicate(timeout=30)
    assert server.returncode == 0 and out.strip() == "stopped", err


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_browser_that_runs_in_the_terminal_reads_the_page_while_it_runs(demo, tmp_path):
    """Such a browser (w3m, lynx) runs in the foreground: it was started before the server answered
    and the server waited for it to end, so it read nothing and the server said no browser opened."""
    browser = tmp_path / "browser"
    browser.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys, urllib.request; "
                       "print(\"read\", urllib.request.urlopen(sys.argv[1], timeout=20).status, flush=True)' \"$1\"\n")
    browser.chmod(0o755)
    server, url = _start(demo, "--open", env={"BROWSER": f"{browser} %s"})
    try:
        assert server.stdout.readline().strip() == "read 200"
    finally:
        os.kill(server.pid, signal.SIGINT)
        out, err = server.communicate(timeout=30)
    assert server.returncode == 0 and out.strip() == "stopped", (out, err)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_open_without_a_web_browser_says_so_and_serves_on(demo):
    """A machine without a browser (a server, no display; here one that fails to start): the
    address is still served and a line says to open it by hand."""
    server, url = _start(demo, "--open", env={"BROWSER": "false"})
    try:
        said = server.stdout.readline().strip()
        assert said == "no web browser could be opened here: open the address above yourself"
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert answer.status == 200
    finally:
        os.kill(server.pid, signal.SIGINT)
        out, err = server.communicate(timeout=30)
    assert server.returncode == 0 and out.strip() == "stopped", err


def test_a_case_without_budget_events_is_served_and_its_picture_says_so(tmp_path):
    path = make_package(tmp_path / "fresh")
    Case.create(path, case_id="FRESH-1", at=T0).close()
    datasette = case_datasette([path], sql_threads=0)
    try:
        page = get(datasette, "/FRESH-1").text
        assert "FRESH-1 (CREATED)" in page and "when this server started" in page
        assert 'href="/FRESH-1/case_status"' in page
        picture = get(datasette, "/FRESH-1/remaining_units_history.svg?hypothesis_id=")
        assert picture.status_code == 200 and "no budget events yet" in picture.text
        assert get(datasette, "/FRESH-1/balances.json?_shape=array").json() == []
    finally:
        for database in datasette.databases.values():
            database.close()


def test_a_served_case_answers_only_get_and_head_every_other_method_is_405_without_a_traceback(site, demo):
    """Nothing a served case offers writes: POST, PUT, PATCH and DELETE anywhere (a table page, a
    query, Datasette's own pages) are 405 with a line saying why, before Datasette sees them (its
    POST to a table page was an error 500 with a traceback on the server's terminal)."""
    import httpx

    from ledger.browse.server import read_only_methods

    async def ask(method: str, path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=read_only_methods(site.app()))
        async with httpx.AsyncClient(transport=transport, base_url="http://case") as client:
            return await client.request(method, path, data={"sql": "DELETE FROM events"})

    before = digest(demo)["ledger.sqlite"]
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        for path in ("/BUG-20/events", "/BUG-20", "/BUG-20/-/query", "/-/permissions", "/BUG-20/events/1"):
            answer = asyncio.run(ask(method, path))
            assert answer.status_code == 405 and answer.headers["allow"] == "GET, HEAD", (method, path)
            assert answer.text == "this server is read-only: it answers GET and HEAD requests only\n"
    for method in ("GET", "HEAD"):
        answer = asyncio.run(ask(method, "/BUG-20/case_status.json?_shape=array"))
        assert answer.status_code == 200
    assert json.loads(asyncio.run(ask("GET", "/BUG-20/case_status.json?_shape=array")).text)[0]["case_id"] == "BUG-20"
    assert digest(demo)["ledger.sqlite"] == before


def test_serve_runs_under_pythons_own_ctrl_c_handler_which_asyncio_replaces_with_a_cancel():
    """The ledger command records Ctrl-C with a handler of its own; asyncio takes over SIGINT (to
    cancel its task) only from Python's, and under another met KeyboardInterrupt anywhere in its
    loop: serve hung on a stop now and then. serve runs with Python's handler, put back after."""
    import signal as signals

    from ledger.ground import interrupts

    with interrupts.recorded():
        ours = signals.getsignal(signals.SIGINT)
        assert ours is not signals.default_int_handler
        with interrupts.python_handler():
            assert signals.getsignal(signals.SIGINT) is signals.default_int_handler
        assert signals.getsignal(signals.SIGINT) is ours
    assert signals.getsignal(signals.SIGINT) is signals.default_int_handler


def test_a_case_moved_away_while_served_is_a_page_saying_so_never_a_traceback(tmp_path, capfd):
    """A ledger moved, removed or made unreadable after the server started: each page needing it is a
    503 naming the file and what to do (it was a 500, with a traceback on the server's terminal)."""
    path, _, _ = run_demo(tmp_path / "demo", echo=lambda text: None)
    datasette = case_datasette([path], sql_threads=0)
    try:
        path.rename(tmp_path / "moved")  # before the first page: no connection is open yet
        capfd.readouterr()
        for page in ("/.json", "/BUG-20.json", "/BUG-20/events.json?_shape=array"):
            answer = get(datasette, page)
            assert answer.status_code == 503, (page, answer.text)
            assert re.fullmatch(re.escape(f"{path / 'ledger.sqlite'} cannot be opened now (") + "(No such file or "
                                "directory|unable to open database file)" + re.escape("): moved, removed or made "
                                "unreadable since the server started; put it back, or start ledger serve again"),
                                answer.json()["error"]), (page, answer.text)
        assert "Traceback" not in capfd.readouterr().err
    finally:
        for database in datasette.databases.values():
            database.close()


@pytest.mark.parametrize("size", [0, 50, 4096, -4096])
def test_a_case_cut_short_or_damaged_while_served_is_a_503_naming_the_file_and_read_again_once_put_back(
        tmp_path, capfd, size):
    """A ledger truncated (or overwritten) after the server started: each page reading it is a 503 naming
    the file, with the sizes when it was cut short (it was a 500 "database disk image is malformed");
    the whole file put back, the same server reads it again."""
    path, _, _ = run_demo(tmp_path / "demo", echo=lambda text: None)
    ledger = path / "ledger.sqlite"
    whole = ledger.read_bytes()
    datasette = case_datasette([path], sql_threads=0)
    try:
        assert get(datasette, "/BUG-20/events.json?_shape=array&_size=1").status_code == 200
        with open(ledger, "r+b") as handle:
            handle.truncate(size % len(whole))
        capfd.readouterr()
        for page in ("/BUG-20/events.json?_shape=array&_size=max", "/BUG-20/results.json",
                     "/BUG-20.json?sql=select+count(*)+from+events"):
            answer = get(datasette, page)
            assert answer.status_code == 503, (page, answer.text)
            error = answer.json()["error"]
            if size == 0:  # no header left to say how long it was: damaged
                assert error.startswith(f"{ledger} cannot be read now (database disk image is malformed): the file "
                                        f"is damaged (changed by something other than case-ledger?); 'ledger verify "
                                        f"{path}' says how."), error
            else:
                said = ("every SQLite database starts with a 100-byte header" if size == 50 else
                        f"its own header says it holds {len(whole) // 4096} pages of 4096 bytes ({len(whole)} bytes)")
                assert error.startswith(f"{ledger} is {size % len(whole)} bytes, but {said}: the file was cut "
                                        "short"), error
            assert error.endswith(". The server reads it again once a whole copy is put back"), error
        assert capfd.readouterr().err == ""  # a page to its visitor, no warning or traceback on the terminal
        ledger.write_bytes(whole)
        again = get(datasette, "/BUG-20.json?sql=select+count(*)+from+events&_shape=array")
        assert again.status_code == 200, again.text
        assert again.json() == [{"count(*)": read_only_query(path, "SELECT count(*) FROM events")[1][0][0]}]
    finally:
        for database in datasette.databases.values():
            database.close()


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_serving_a_ledger_an_older_version_wrote_warns_that_newer_questions_fail_and_what_upgrades_it(tmp_path):
    """Its views lack what newer versions added, so some canned questions answered 400 without a
    word on the terminal; serving cannot upgrade it (it is read-only)."""
    from conftest import downgrade_ledger

    path, _, _ = run_demo(tmp_path / "demo", echo=lambda text: None)
    downgrade_ledger(path, 6)
    assert [(case.name, case.schema_version) for case in served_cases([path])] == [("BUG-20", 6)]
    err = _served_then_stopped(str(path))
    assert err == (f"warning: {path / 'ledger.sqlite'} was written by an older case-ledger (schema version 6; this one "
                   f"reads {schema_version()}) and not upgraded since: questions naming what newer versions added "
                   f"fail on it; a command that writes, such as 'ledger export {path}', upgrades it\n")
    assert read_only_query(path, "SELECT MAX(version) FROM schema_migrations")[1] == [(6,)]


def test_a_case_on_a_read_only_file_system_is_served_as_ledger_sql_reads_it(demo, tmp_path, capsys):
    """Its -shm file cannot be made there: serve started, then answered every page with 500 and a
    traceback on the terminal; it reads the file as an immutable snapshot, as `ledger sql` does."""
    copy = tmp_path / "case"
    shutil.copytree(demo, copy)
    for side in ("-wal", "-shm"):
        (copy / f"ledger.sqlite{side}").unlink(missing_ok=True)
    folder, undo = read_only_mount(copy)
    datasette = None
    try:
        datasette = case_datasette([folder], sql_threads=0)
        page = get(datasette, "/BUG-20/events.json?_shape=array&_size=max")
        assert page.status_code == 200
        assert len(page.json()) == read_only_query(demo, "SELECT count(*) FROM events")[1][0][0]
        with Case.open(copy) as case:  # written through the writable path, as another mount would
            case.transition("CLOSED")
        changed = get(datasette, "/BUG-20.json?sql=select+count(*)+from+events&_shape=array")
        # it answered the old count, then "malformed"; then 500 with a line on the terminal per request
        assert changed.status_code == 503 and "Case unavailable" in changed.text, changed.text
        assert "changed since the server opened it, as a snapshot of a read-only file system" in changed.text
        assert "warning" not in capsys.readouterr().err
    finally:
        for database in (datasette.databases.values() if datasette is not None else ()):
            database.close()
        undo()


def test_a_ledger_replaced_while_served_is_unavailable_not_shown_as_the_file_it_replaced(demo, tmp_path, capsys):
    """Another file renamed into the ledger's place was never read by a connection opened before (it
    showed the replaced file's rows for as long as the server ran); one opened after read the new file
    under the old case's name. Every page of that case answers 503 now; the other cases' pages stay."""
    copy, beside = tmp_path / "case", tmp_path / "beside"
    shutil.copytree(demo, copy)
    start_case(beside, case_id="OTHER").close()
    datasette = case_datasette([copy, beside], sql_threads=0)
    count = "/BUG-20.json?sql=select+count(*)+n+from+events&_shape=array"
    try:
        assert get(datasette, count).json() == [{"n": 56}]
        shutil.copy(beside / "ledger.sqlite", copy / "ledger.sqlite.new")
        os.replace(copy / "ledger.sqlite.new", copy / "ledger.sqlite")
        for page in (count, "/BUG-20/events.json", "/BUG-20"):
            answer = get(datasette, page)
            assert answer.status_code == 503 and "was replaced since the server opened it" in answer.text, page
        for page in ("/OTHER/events.json", "/OTHER", "/-/databases.json"):
            assert get(datasette, page).status_code == 200, page
        assert "warning" not in capsys.readouterr().err
    finally:
        for database in datasette.databases.values():
            database.close()


@pytest.mark.parametrize("change", ["replaced", "removed", "header overwritten"])
def test_a_case_unavailable_before_any_page_was_read_leaves_the_other_cases_pages_served(demo, tmp_path, change):
    """Datasette looks at every case's schema before it answers any page: a case replaced, removed or
    damaged before the server's first page made every page of every case answer its 503 (once a page
    had been read, only its own). Its own pages answer 503; the other cases' are served."""
    copy, beside = tmp_path / "case", tmp_path / "beside"
    shutil.copytree(demo, copy)
    start_case(beside, case_id="OTHER").close()
    datasette = case_datasette([copy, beside], sql_threads=0)
    try:
        if change == "replaced":
            shutil.copy(beside / "ledger.sqlite", copy / "ledger.sqlite.new")
            os.replace(copy / "ledger.sqlite.new", copy / "ledger.sqlite")
        elif change == "removed":
            (copy / "ledger.sqlite").unlink()
        else:
            with open(copy / "ledger.sqlite", "r+b") as handle:
                handle.write(b"This is not SQLite!!" + bytes(80))
        for page in ("/OTHER/events.json", "/OTHER", "/OTHER.json?sql=select+count(*)+from+events"):
            assert get(datasette, page).status_code == 200, page
        answer = get(datasette, "/BUG-20/events.json")
        assert answer.status_code == 503 and str(copy / "ledger.sqlite") in answer.json()["error"]
    finally:
        for database in datasette.databases.values():
            database.close()


def test_a_connection_opened_after_the_ledger_was_replaced_reads_nothing(demo, tmp_path):
    """A query thread's first connection, opened after the replacement, read the new file as the case."""
    from ledger.browse.connections import CaseChanged, case_connection, device_and_inode

    copy = tmp_path / "case"
    shutil.copytree(demo, copy)
    ledger = str(copy / "ledger.sqlite")
    served = device_and_inode(ledger)  # as the server looked at it when it started
    case_connection(ledger, served).close()
    start_case(tmp_path / "other", case_id="OTHER").close()
    shutil.copy(tmp_path / "other" / "ledger.sqlite", copy / "ledger.sqlite.new")
    os.replace(copy / "ledger.sqlite.new", copy / "ledger.sqlite")
    with pytest.raises(CaseChanged, match="was replaced since the server opened it"):
        case_connection(ledger, served)



def test_a_request_with_more_query_parameters_than_a_page_uses_is_400_before_datasette_reads_them(site):
    """Datasette 0.65 parses the whole query string again for every parameter it reads, in the thread
    serving every page: 10,000 parameters held every page of every case for minutes. More than
    QUERY_PARAMETERS_MAX is refused at once; up to it, the page answers as before."""
    import httpx

    from ledger.browse.server import QUERY_PARAMETERS_MAX, read_only_methods

    async def ask(path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=read_only_methods(site.app()))
        async with httpx.AsyncClient(transport=transport, base_url="http://case") as client:
            return await client.get(path)

    def params(count: int) -> str:
        return "&".join(["_shape=array", *(f"_x{i}=1" for i in range(count - 1))])

    assert QUERY_PARAMETERS_MAX == 200
    answer = asyncio.run(ask(f"/BUG-20/case_status.json?{params(QUERY_PARAMETERS_MAX)}"))
    assert answer.status_code == 200 and json.loads(answer.text)[0]["case_id"] == "BUG-20"
    for path in ("/BUG-20/events.json", "/BUG-20.json", "/"):
        answer = asyncio.run(ask(f"{path}?{params(QUERY_PARAMETERS_MAX + 1)}"))
        assert (answer.status_code, answer.text) == (400, "a request may give at most 200 query parameters\n")
    # empty pieces are no parameters (Datasette reads none of them)
    assert asyncio.run(ask("/BUG-20/case_status.json?_shape=array" + "&" * 300)).status_code == 200


def test_a_case_whose_pages_were_overwritten_while_served_is_named_damaged_on_every_page(tmp_path, capfd):
    """Pages of the ledger overwritten in the middle (the file as long as before): a page that must open
    it is a 503 saying the file is damaged and that verify says how, not that it was moved, removed or
    made unreadable (what a page opening it said); put back whole, it is read again."""
    path, _, _ = run_demo(tmp_path / "demo", echo=lambda text: None)
    ledger = path / "ledger.sqlite"
    whole = ledger.read_bytes()
    datasette = case_datasette([path], sql_threads=0)
    try:
        assert get(datasette, "/BUG-20/events.json?_shape=array&_size=1").status_code == 200
        junk = random.Random(0).randbytes(30 * 4096)
        ledger.write_bytes(whole[:20 * 4096] + junk + whole[50 * 4096:])
        capfd.readouterr()
        said = (f"{ledger} cannot be read now (database disk image is malformed): the file is damaged (changed by "
                f"something other than case-ledger?); 'ledger verify {path}' says how. The server reads it again "
                "once a whole copy is put back")
        answer = get(datasette, "/BUG-20.json")  # its tables listed: the schema read, damaged pages and all
        assert answer.status_code == 503 and answer.json()["error"] == said, answer.text
        with pytest.raises(Exception) as opening:  # a page's new connection: the file looked at first
            datasette.databases["BUG-20"].connect()
        assert (opening.value.status, opening.value.message) == (503, said)
        assert capfd.readouterr().err == ""
        ledger.write_bytes(whole)
        assert get(datasette, "/BUG-20.json?sql=select+count(*)+from+events").status_code == 200
    finally:
        for database in datasette.databases.values():
            database.close()
