"""A fleet of cases as Hive-partitioned Parquet (`ledger fleet export`) and DuckDB SQL over it
(`ledger fleet sql`): layout, explicit types, rows equal to each case's views (read back with
DuckDB and with pandas through pyarrow), incremental skip, verify failures reported, atomic
replacement under a concurrent reader, the documented fleet questions (docs/fleet.md)."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ledger import (Case, LedgerError, apply_journal, export_fleet, fleet_query, read_only_query, remove_from_fleet,
                    run_demo, verify_case)
from ledger.ground.errors import INVALID_ARGUMENT
from ledger.package_tools.fleet import TABLES, column_type, find_cases, partition_name
from ledger_cli.main import main
from conftest import deny_reading, deny_searching, downgrade_ledger, make_package, start_case

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("benchmark_fleet", REPO / "benchmarks" / "fleet.py")
bench_fleet = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_fleet)

#: Cases of the benchmark's mix: two hypotheses (0, 3), a case scope whose limit fires (1, 29),
#: closed (0, 2, 20), a hypothesis abandoned for low information (20), a budget run out (29).
NUMBERS = (0, 1, 2, 3, 20, 29)
COLON_CASE = "TEAM:7"  # a case id whose partition folder escapes the colon


def _colon_case(path: Path) -> None:
    lines = (REPO / "tests/data/trajectories/django__django-11206.jsonl").read_text().splitlines()[:12]
    lines.append(json.dumps({"op": "record_outcome", "outcome": "resolved", "source": "fleet test"}))
    case = Case.create(path, COLON_CASE)
    try:
        assert all(r.ok for r in apply_journal(case, lines))
    finally:
        case.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """``(folder of cases, export folder, case ids)``, exported once."""
    root = tmp_path_factory.mktemp("fleet")
    cases = root / "cases"
    ids = [bench_fleet.make_case(cases / "batch" / f"case-{n}", n) for n in NUMBERS]
    _colon_case(cases / "colon")
    run_demo(cases / "demo", echo=lambda text: None)  # evidence records, a scope, a closed case
    ids += [COLON_CASE, "BUG-20"]
    report = export_fleet([cases], root / "out")
    assert (report.cases, report.exported, report.unchanged, report.failed) == (len(ids), len(ids), 0, [])
    return cases, root / "out", ids


def _case_paths(cases: Path) -> dict[str, Path]:
    found = {}
    for ledger in cases.rglob("ledger.sqlite"):
        found[read_only_query(ledger.parent, "SELECT case_id FROM case_status")[1][0][0]] = ledger.parent
    return found


def _view_rows(case: Path, table: str) -> tuple[list[str], list[tuple]]:
    if table == "events":
        return read_only_query(case, "SELECT seq, type, revision, stream, created_at, body ->> '$.actor' AS actor, "
                                     "sha256, parent_sha256, body FROM events")
    return read_only_query(case, f"SELECT * FROM {table}")


def _normal(value):
    return None if value == "" else value


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_export_has_one_partition_per_table_and_case(fleet):
    cases, out, ids = fleet
    for table in TABLES:
        found = sorted(p.relative_to(out).as_posix() for p in (out / table).rglob("*") if p.is_file())
        assert found == sorted(f"{table}/{partition_name(i)}/data.parquet" for i in ids)
    assert (out / "actions" / "case_id=TEAM%3A7" / "data.parquet").is_file()
    assert fleet_query(out, "SELECT case_id, COUNT(*) FROM evidence GROUP BY case_id")[1] == [("BUG-20", 3)]
    assert json.loads((out / "_fleet" / "format.json").read_text())["format"] == "fleet-export-v1"
    record = json.loads((out / "_fleet" / "cases" / "case_id=FLEET-00001.json").read_text())
    head = read_only_query(_case_paths(cases)["FLEET-00001"], "SELECT package_generation, head_sha256 FROM case_status")
    assert (record["head_seq"], record["head_sha256"]) == head[1][0]


@pytest.mark.slow  # over 2.0 s in the default run: the slow lane (.ci/run) runs it
def test_columns_have_explicit_parquet_types(fleet):
    _, out, _ = fleet
    expected = {"BIGINT": "int64", "TIMESTAMPTZ": "timestamp[us, tz=UTC]", "VARCHAR": "string"}
    for table in TABLES:
        schema = pq.read_schema(out / table / partition_name("FLEET-00000") / "data.parquet")
        assert schema.names, table
        for name in schema.names:
            assert str(schema.field(name).type) == expected[column_type(name)], (table, name)
    actions = pq.read_schema(out / "actions" / partition_name("FLEET-00002") / "data.parquet")
    assert [str(actions.field(n).type) for n in ("cost_units", "reserved_at", "closed_at", "action")] == [
        "int64", "timestamp[us, tz=UTC]", "timestamp[us, tz=UTC]", "string"]
    events = pq.read_schema(out / "events" / partition_name("FLEET-00002") / "data.parquet")
    assert "case_id" not in pq.read_schema(out / "case_status" / partition_name("FLEET-00002") / "data.parquet").names
    assert events.names == ["seq", "type", "revision", "stream", "created_at", "actor", "sha256", "parent_sha256",
                            "body"]


def test_a_column_the_map_does_not_know_is_typed_by_its_name():
    assert column_type("outcome_at") == "TIMESTAMPTZ"
    assert column_type("refund_units") == column_type("tests_count") == column_type("wait_ms") == "BIGINT"
    assert column_type("outcome") == column_type("resolution_note") == "VARCHAR"
    assert column_type("declared") == column_type("seq") == "BIGINT"


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_duckdb_rows_equal_each_case_views(fleet):
    cases, out, _ = fleet
    for case_id, path in _case_paths(cases).items():
        for table in TABLES:
            names, rows = _view_rows(path, table)
            columns = "*" if "case_id" in names else "* EXCLUDE (case_id)"  # case_status has it first
            got_names, got = fleet_query(out, f"SELECT {columns} FROM {table} WHERE case_id = '{case_id}'")
            assert got_names == names, table
            assert sorted(got, key=repr) == sorted((tuple(_normal(v) for v in r) for r in rows), key=repr), table


def test_the_times_read_with_duckdb_s_own_python_api_are_utc_datetimes_equal_to_the_views(fleet):
    """What a user's own `duckdb` query returns for the time columns: timezone-aware datetimes (DuckDB
    needs pytz for them, which the fleet extra installs), the same instants as the views'."""
    import datetime

    import duckdb

    cases, out, _ = fleet
    path = _case_paths(cases)["BUG-20"]
    got = duckdb.connect().execute(
        f"SELECT action_id, reserved_at, closed_at FROM read_parquet('{out}/actions/*/data.parquet', "
        "hive_partitioning = true) WHERE case_id = 'BUG-20' ORDER BY action_id").fetchall()
    _, rows = read_only_query(path, "SELECT action_id, reserved_at, closed_at FROM actions ORDER BY action_id")

    def instant(text):
        return None if text is None else datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))

    assert got and all(row[1].tzinfo is not None for row in got)  # in the session's zone: the same instants
    assert got == [(action, instant(reserved), instant(closed)) for action, reserved, closed in rows]


def _from_pandas(value):
    """A pandas cell as the SQLite view has it: times as RFC 3339 text, numbers as int (pandas
    reads an integer column with nulls as float64), missing as None."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if isinstance(value, pd.Timestamp):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, str):
        return value
    return int(value)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_pandas_reads_the_same_rows_as_each_case_views(fleet):
    cases, out, _ = fleet
    for table in TABLES:
        frame = pd.read_parquet(out / table, engine="pyarrow")
        assert str(frame["case_id"].dtype) == "category" and set(frame["case_id"]) <= set(_case_paths(cases))
        text = "str" if int(pd.__version__.split(".")[0]) >= 3 else "object"  # the types table of docs/fleet.md
        assert {str(frame[c].dtype) for c in ("hypothesis_id", "status", "type") if c in frame} <= {text}
        for case_id, path in _case_paths(cases).items():
            names, rows = _view_rows(path, table)
            part = frame[frame["case_id"] == case_id][names]
            got = [tuple(_from_pandas(v) for v in record) for record in part.itertuples(index=False)]
            assert sorted(got, key=repr) == sorted((tuple(_normal(v) for v in r) for r in rows), key=repr), \
                (table, case_id)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_an_unchanged_head_is_skipped_and_a_changed_case_replaced(fleet, tmp_path):
    cases, _, ids = fleet
    copy = tmp_path / "cases"
    shutil.copytree(cases, copy)
    out = tmp_path / "out"
    assert export_fleet([copy], out).exported == len(ids)
    files = {p: p.stat().st_ino for p in out.rglob("data.parquet")}
    again = export_fleet([copy], out)
    assert (again.exported, again.unchanged, again.failed) == (0, len(ids), [])
    assert {p: p.stat().st_ino for p in out.rglob("data.parquet")} == files
    # the summary says an unchanged case was not read again (so not verified again either)
    done = CliRunner().invoke(main, ["fleet", "export", str(copy), "--to", str(out)])
    assert done.exit_code == 0 and done.stdout.splitlines()[-1] == (
        f"fleet export {out}: {len(ids)} cases, 0 exported, {len(ids)} unchanged (head as exported: not read "
        "again), 0 failed")
    path = _case_paths(copy)["FLEET-00003"]
    with Case.open(path) as case:
        case.transition("BLOCKED")
    third = export_fleet([copy], out)
    assert (third.exported, third.unchanged) == (1, len(ids) - 1)
    changed = {p for p, inode in files.items() if p.stat().st_ino != inode}
    assert changed == {out / t / "case_id=FLEET-00003" / "data.parquet" for t in TABLES}
    assert fleet_query(out, "SELECT state FROM case_status WHERE case_id = 'FLEET-00003'")[1] == [("BLOCKED",)]


def _tamper(path: Path) -> None:
    conn = sqlite3.connect(path / "ledger.sqlite")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("UPDATE events SET body = replace(body, '\"replayed step\"', '\"edited step\"') WHERE seq = 6")
    conn.commit()
    conn.close()


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_package_failing_verify_is_reported_and_not_exported(fleet, tmp_path):
    cases, _, ids = fleet
    copy = tmp_path / "cases"
    shutil.copytree(cases, copy)
    bad = _case_paths(copy)["FLEET-00020"]
    _tamper(bad)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["fleet", "export", str(copy), "--to", str(out), "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert (report["cases"], report["exported"]) == (len(ids), len(ids) - 1)
    [failed] = report["failed"]
    assert (failed["case_id"], failed["status"], failed["error"]["code"]) == ("FLEET-00020", "failed", "INTEGRITY_ERROR")
    assert f"error: INTEGRITY_ERROR: {bad}: " in result.stderr
    assert not list(out.glob("*/case_id=FLEET-00020")) and not (out / "_fleet/cases/case_id=FLEET-00020.json").exists()
    assert len(fleet_query(out, "SELECT * FROM case_status")[1]) == len(ids) - 1


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_package_that_lost_its_ledger_is_reported_not_left_out(fleet, tmp_path):
    cases, _, ids = fleet
    copy = tmp_path / "cases"
    shutil.copytree(cases, copy)
    lost = _case_paths(copy)["FLEET-00020"]
    (lost / "ledger.sqlite").unlink()
    (lost / "manifest.json").write_text("{}")  # the marks of an exported package stay
    (lost / "analysis").mkdir(exist_ok=True)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["fleet", "export", str(copy), "--to", str(out), "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert (report["cases"], report["exported"]) == (len(ids), len(ids) - 1)
    [failed] = report["failed"]
    assert (failed["path"], failed["error"]["code"]) == (str(lost), "LEDGER_MISSING")
    assert "ledger import" in failed["error"]["message"]


def test_a_link_to_a_case_folder_is_found_and_a_link_to_another_folder_is_not_walked(fleet, tmp_path):
    """A folder of links to cases kept elsewhere: each linked case is exported (links were passed by);
    a link to a folder that is no case is not walked, so a link to an ancestor cannot loop."""
    from ledger.package_tools.fleet import find_cases

    cases, _, _ = fleet
    root = tmp_path / "links"
    (root / "deeper").mkdir(parents=True)
    (root / "deeper" / "demo").symlink_to(cases / "demo", target_is_directory=True)
    (root / "loop").symlink_to(tmp_path, target_is_directory=True)
    (root / "batch").symlink_to(cases / "batch", target_is_directory=True)  # holds cases, is no case
    assert find_cases([root]) == [root / "deeper" / "demo"]
    # one case reached twice: once, by its own folder's path rather than the link's
    assert find_cases([root, cases / "demo"]) == [cases / "demo"]
    (cases / "a-link").symlink_to("demo")  # in the case's own folder, sorting before it
    try:
        found = find_cases([cases])
        assert cases / "demo" in found and cases / "a-link" not in found
    finally:
        (cases / "a-link").unlink()


def test_a_case_folder_whose_name_is_not_utf8_is_exported_and_its_record_read_back(tmp_path):
    """A folder name of bytes that are not UTF-8 (legal on POSIX) is a case like any other: its
    record keeps the path, the next export finds the case unchanged, the other cases are exported."""
    cases = tmp_path / "cases"
    odd = cases / os.fsdecode(b"a\xff")
    Case.create(make_package(odd), "ODD-1").close()
    Case.create(make_package(cases / "zz"), "ZZ-1").close()
    out = tmp_path / "out"
    first = export_fleet([cases], out)
    assert (first.exported, first.failed) == (2, [])
    record = json.loads((out / "_fleet/cases/case_id=ODD-1.json").read_bytes())
    assert record["path"] == str(odd)
    assert export_fleet([cases], out).unchanged == 2


def test_an_export_folder_whose_path_is_not_utf8_is_refused_before_anything_is_written(tmp_path):
    Case.create(make_package(tmp_path / "cases" / "c"), "C-1").close()
    out = tmp_path / os.fsdecode(b"out-\xff")
    for call in (lambda: export_fleet([tmp_path / "cases"], out), lambda: fleet_query(out, "SELECT 1")):
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == INVALID_ARGUMENT and "out-\\xff" in caught.value.message
        assert "must be UTF-8 text" in caught.value.message
    assert not out.exists()


def test_a_ledger_that_holds_no_case_fails_that_case_and_the_others_are_exported(tmp_path):
    cases = tmp_path / "cases"
    Case.create(make_package(cases / "good"), "GOOD-1").close()
    empty = make_package(cases / "empty")
    Case.create(empty, "EMPTY-1").close()  # the schema, then every row of its case gone
    conn = sqlite3.connect(empty / "ledger.sqlite")
    conn.executescript("".join(f"DROP TRIGGER {name};" for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'trigger'")) + "DELETE FROM case_identity;")
    conn.close()
    zero = make_package(cases / "zero")
    (zero / "ledger.sqlite").write_bytes(b"")  # an empty file: no schema at all
    result = CliRunner().invoke(main, ["fleet", "export", str(cases), "--to", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    report = json.loads(result.stdout)
    assert report["exported"] == 1
    assert [(f["path"], f["error"]["code"]) for f in report["failed"]] == [
        (str(empty), "INTEGRITY_ERROR"), (str(zero), "LEDGER_MISSING")]  # rows deleted: altered, as state says
    assert "case_status view is missing or altered (it gives no row)" in report["failed"][0]["error"]["message"]
    assert "holds no case" in report["failed"][1]["error"]["message"]


def test_the_walk_notes_what_it_passes_by_that_may_look_like_a_case(fleet, tmp_path):
    """Nothing left out without a word: a build folder, a link that leads nowhere or loops, a folder
    holding an export alone and a second path to a case found already are each a note (on stderr
    from the command)."""
    cases, _, _ = fleet
    root = tmp_path / "cases"
    (root / "x").mkdir(parents=True)
    shutil.copytree(_case_paths(cases)["FLEET-00001"], root / "x" / "a")
    (root / "b-link").symlink_to(root / "x" / "a")
    (root / "c-dead").symlink_to(root / "nowhere")
    (root / "x" / "d-loop").symlink_to(root / "x" / "d-loop")
    shutil.copytree(root / "x" / "a", root / ".a.importing-1-2")
    (root / "x" / "e-export" / "analysis" / "case" / "events").mkdir(parents=True)  # an export, its case gone
    left_out: list = []
    assert find_cases([root], left_out) == [root / "x" / "a"]
    assert left_out == [
        (root / ".a.importing-1-2", "named like an import's or a demo's build folder (a run's scratch, which a "
         "killed run leaves and the next import or demo there removes)"),
        (root / "c-dead", "a link that leads nowhere or loops"), (root / "x" / "d-loop", "a link that leads nowhere or loops"),
        (root / "x" / "e-export", "holds an export's analysis/ but no ledger.sqlite, none of its side files and no "
         "manifest.json: not a case package"),
        (root / "b-link", f"the same case folder as {root / 'x' / 'a'}, which is taken once")]
    result = CliRunner().invoke(main, ["fleet", "export", str(root), "--to", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [f"note: {path}: left out: {why}" for path, why in left_out]
    assert result.stdout.startswith(f"fleet export {tmp_path / 'out'}: 1 cases, 1 exported")


@pytest.mark.parametrize("version", [2, 6])
def test_a_ledger_an_older_version_wrote_is_exported_with_this_versions_columns(tmp_path, version):
    """A case no writer of this version has opened (its views as an older schema made them, or none:
    scope_usage came in 4, outcome in 8) was INTEGRITY_ERROR ("no such table: orig.scope_usage"),
    or had its case_status written without outcome, so that every fleet query over it failed. The
    tables are the replay's, which verify found equal to the ledger's: every column, NULL where the
    history has nothing."""
    case = start_case(tmp_path / "cases" / "old", case_id="OLD-1")
    case.close()
    downgrade_ledger(case.path, version)
    report = export_fleet([tmp_path / "cases"], tmp_path / "out")
    assert (report.exported, report.failed) == (1, []), report.failed
    assert read_only_query(case.path, "SELECT MAX(version) FROM schema_migrations")[1] == [(version,)]  # untouched
    status = pq.read_table(tmp_path / "out" / "case_status" / "case_id=OLD-1" / "data.parquet").to_pylist()
    assert [(row["state"], row["outcome"]) for row in status] == [("INVESTIGATING_HYPOTHESES", None)]
    assert pq.read_table(tmp_path / "out" / "scope_usage" / "case_id=OLD-1" / "data.parquet").num_rows == 0
    rows = fleet_query(tmp_path / "out", "SELECT case_id, outcome FROM case_status")[1]
    assert rows == [("OLD-1", None)]


@pytest.mark.parametrize("view, why", [
    (None, "SQLite refused: "), ("SELECT 1 AS case_id", "SQLite refused: "),
    ("SELECT case_id, package_id, 1 AS package_generation, 'x' AS head_sha256 FROM case_identity WHERE 0",
     "it gives no row"),
    ("SELECT x'ff' AS case_id, x'00' AS package_id, 1 AS package_generation, 'a' AS head_sha256, 'NEW' AS state",
     "its head holds values of types the ledger never writes"),
    ("SELECT 'A' || char(0) || 'B' AS case_id, 'p' AS package_id, 1 AS package_generation, 'a' AS head_sha256",
     "its case_id 'A\\x00B' is no case id"),
    ("SELECT 'x/../../PWN' AS case_id, 'p' AS package_id, 1 AS package_generation, 'a' AS head_sha256",
     "its case_id 'x/../../PWN' is no case id")])
def test_a_case_whose_case_status_view_cannot_give_its_head_fails_as_altered(tmp_path, view, why):
    """It failed with SQLite's own words ("SQLite refused: no such column: package_id"), a view of no
    row as a case not yet made ("run init again"), one of blobs with a TypeError traceback."""
    start_case(tmp_path / "cases" / "c", case_id="C-1").close()
    with sqlite3.connect(tmp_path / "cases" / "c" / "ledger.sqlite") as conn:
        conn.execute("DROP VIEW case_status")
        if view is not None:
            conn.execute(f"CREATE VIEW case_status AS {view}")
    conn.close()
    [failed] = export_fleet([tmp_path / "cases"], tmp_path / "out").failed
    assert failed["error"]["code"] == "INTEGRITY_ERROR"
    assert failed["error"]["message"].startswith(f"the ledger's case_status view is missing or altered ({why}")
    assert failed["error"]["message"].endswith(f"'ledger verify {tmp_path / 'cases' / 'c'}' says what else differs")


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_case_exported_by_another_schema_version_is_exported_again(tmp_path):
    """Its tables may lack the columns this version writes (a record of an earlier export names no
    schema version): exported again, not taken as unchanged, so every partition has the same columns."""
    start_case(tmp_path / "cases" / "c", case_id="C-1").close()
    assert export_fleet([tmp_path / "cases"], tmp_path / "out").exported == 1
    assert export_fleet([tmp_path / "cases"], tmp_path / "out").unchanged == 1
    record_path = tmp_path / "out" / "_fleet" / "cases" / "case_id=C-1.json"
    record = json.loads(record_path.read_text())
    assert record["schema_version"] == read_only_query(tmp_path / "cases" / "c", "SELECT MAX(version) FROM schema_migrations")[1][0][0]
    for older in ({k: v for k, v in record.items() if k != "schema_version"}, {**record, "schema_version": 7}):
        record_path.write_text(json.dumps(older))
        again = export_fleet([tmp_path / "cases"], tmp_path / "out")
        assert (again.exported, again.unchanged) == (1, 0)
        assert json.loads(record_path.read_text()) == record


def test_a_query_of_an_export_holding_no_case_says_so(tmp_path):
    lost = tmp_path / "cases" / "lost"
    lost.mkdir(parents=True)
    (lost / "ledger.sqlite-lock").write_text("")  # a package that lost its ledger: found, and it fails
    out = tmp_path / "out"
    assert CliRunner().invoke(main, ["fleet", "export", str(tmp_path / "cases"), "--to", str(out)]).exit_code == 1
    result = CliRunner().invoke(main, ["fleet", "sql", str(out), "SELECT count(*) FROM events"])
    assert result.exit_code == 1 and result.stderr.startswith("error: INVALID_ARGUMENT: ")
    assert "this export holds no case, so none is there: every case given to 'ledger fleet export' failed, none" \
        in result.stderr and "events, actions" in result.stderr


def test_a_query_of_an_export_whose_every_case_was_removed_says_so(fleet, tmp_path):
    _, out, ids = fleet
    target = tmp_path / "out"
    shutil.copytree(out, target)
    remove_from_fleet(target, ids)
    with pytest.raises(LedgerError) as caught:
        fleet_query(target, "SELECT count(*) FROM case_status")
    assert caught.value.message.endswith("'ledger fleet remove' took each out, or the export stopped before it "
                                         "finished one)")


def _stopping_export(monkeypatch, after: int) -> None:
    """Make the next export in this process stop with Ctrl-C once ``after`` cases are exported."""
    from ledger.package_tools import fleet as fleet_module
    real, done = fleet_module._export_worker, []

    def worker(args):
        if len(done) == after:
            raise KeyboardInterrupt
        done.append(args)
        return real(args)
    monkeypatch.setattr(fleet_module, "_export_worker", worker)


def test_a_fleet_query_says_an_export_stopped_before_the_end_until_one_finishes(fleet, tmp_path, monkeypatch):
    cases, _, ids = fleet
    out = tmp_path / "out"
    _stopping_export(monkeypatch, after=2)
    with pytest.raises(KeyboardInterrupt):
        export_fleet([cases], out)
    monkeypatch.undo()
    notes: list[str] = []
    names, rows = fleet_query(out, "SELECT count(*) FROM case_status", note=notes.append)
    assert rows == [(2,)]
    assert notes == [f"an export into {out} stopped before the end (killed, interrupted or refused) and none has "
                     "finished since: a case not yet reached is missing, or as the export before left it; run "
                     "'ledger fleet export' again"]
    result = CliRunner().invoke(main, ["fleet", "sql", str(out), "SELECT count(*) AS n FROM case_status", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout) == [{"n": 2}]
    assert result.stderr == f"note: {notes[0]}\n"
    report = export_fleet([cases], out)
    assert (report.exported, report.unchanged) == (len(ids) - 2, 2)
    notes.clear()
    assert fleet_query(out, "SELECT count(*) FROM case_status", note=notes.append)[1] == [(len(ids),)]
    assert notes == [] and os.listdir(out / "_fleet" / "exports") == []


def test_an_export_stopped_before_it_exported_a_case_is_named_by_the_query_that_finds_no_table(fleet, tmp_path,
                                                                                              monkeypatch):
    cases, _, _ = fleet
    out = tmp_path / "out"
    _stopping_export(monkeypatch, after=0)
    with pytest.raises(KeyboardInterrupt):
        export_fleet([cases], out)
    result = CliRunner().invoke(main, ["fleet", "sql", str(out), "SELECT count(*) FROM events"])
    assert result.exit_code == 1
    note, error = result.stderr.splitlines()
    assert note.startswith(f"note: an export into {out} stopped before the end")
    assert error.endswith("or the export stopped before it finished one)")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_fleet_query_says_an_export_is_under_way_and_then_that_it_was_killed(fleet, tmp_path):
    cases, _, _ = fleet
    out, started = tmp_path / "out", tmp_path / "started"
    script = tmp_path / "export.py"
    script.write_text(
        "import pathlib, time\n"
        "from ledger.package_tools import fleet\n"
        "real = fleet._export_worker\n"
        "def stalled(args):\n"
        "    entry = real(args)\n"
        f"    pathlib.Path({str(started)!r}).touch()\n"
        "    time.sleep(120)\n"
        "fleet._export_worker = stalled\n"
        f"fleet.export_fleet([{str(cases)!r}], {str(out)!r})\n", encoding="utf-8")
    process = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists()
        notes: list[str] = []
        fleet_query(out, "SELECT 1", note=notes.append)
        assert notes == [f"an export into {out} is under way: a case not yet reached is missing, or as the export "
                         "before left it"]
    finally:
        process.kill()
        process.wait()
    notes.clear()
    fleet_query(out, "SELECT 1", note=notes.append)
    assert len(notes) == 1 and notes[0].startswith(f"an export into {out} stopped before the end")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_jobs_processes_export_the_same_rows(fleet, tmp_path):
    cases, out, ids = fleet
    report = export_fleet([cases], tmp_path / "out", jobs=2)
    assert (report.exported, report.failed) == (len(ids), [])
    for table in TABLES:
        query = f"SELECT * FROM {table} ORDER BY ALL"
        assert fleet_query(tmp_path / "out", query) == fleet_query(out, query), table


def test_a_case_id_exported_from_another_package_is_refused(fleet, tmp_path):
    cases, out, _ = fleet
    target = tmp_path / "out"
    shutil.copytree(out, target)
    other = tmp_path / "other"
    Case.create(other, "FLEET-00002").close()
    report = export_fleet([other], target)
    [failed] = report.failed
    assert failed["error"]["code"] == "INVALID_ARGUMENT" and "another package" in failed["error"]["message"]
    assert fleet_query(target, "SELECT state FROM case_status WHERE case_id = 'FLEET-00002'")[1] == [("CLOSED",)]


def test_a_case_folder_whose_ledger_was_replaced_by_another_packages_says_so(tmp_path):
    """The folder a case was exported from now holds another package's ledger of the same case id: the
    refusal says this folder's ledger was replaced, not only that another package holds the id."""
    folder, out = tmp_path / "cases" / "c", tmp_path / "out"
    with Case.create(folder, "SWAP-1") as case:
        old = case.status()["package_id"]
    assert export_fleet([folder], out).failed == []
    shutil.rmtree(folder)
    with Case.create(folder, "SWAP-1") as case:
        new = case.status()["package_id"]
    [failed] = export_fleet([folder], out).failed
    assert failed["error"]["message"].startswith(
        f"case id SWAP-1 is already exported from another package ({os.path.abspath(folder)}, package_id {old}; "
        f"this folder's ledger.sqlite is package_id {new} now: replaced since that export); a case id names one "
        "package")


def test_a_case_taken_out_of_the_fleet_leaves_no_row_and_its_id_may_name_another_package(fleet, tmp_path):
    """A case gone from its folders stayed in fleet sql for good, and a package of the same id could
    never be exported into the fleet: remove takes its record and partitions out, under the locks."""
    _, out, ids = fleet
    target = tmp_path / "out"
    shutil.copytree(out, target)
    other = tmp_path / "other"
    Case.create(other, "FLEET-00002").close()
    [failed] = export_fleet([other], target).failed
    assert failed["error"]["message"].endswith("take that one out ('ledger fleet remove OUT FLEET-00002'), then "
                                               "export again")
    assert remove_from_fleet(target, ["FLEET-00002", COLON_CASE]) == ["FLEET-00002", COLON_CASE]
    assert sorted(row[0] for row in fleet_query(target, "SELECT case_id FROM case_status")[1]) == sorted(
        set(ids) - {"FLEET-00002", COLON_CASE})
    for table in TABLES:
        assert not (target / table / partition_name(COLON_CASE)).exists()
    assert not (target / "_fleet" / "cases" / f"{partition_name(COLON_CASE)}.json").exists()
    report = export_fleet([other], target)
    assert (report.exported, report.failed) == (1, [])
    assert fleet_query(target, "SELECT state FROM case_status WHERE case_id = 'FLEET-00002'")[1] == [("CREATED",)]


#: A case id of 128 characters no fleet export can hold: its partition name writes each colon as %3A.
LONG_COLONS = "a" + ":" * 64 + "b" * 63


def test_removing_an_id_the_fleet_does_not_hold_removes_nothing(fleet, tmp_path):
    """An id no fleet export can hold is one it does not hold (it was said to be one that "cannot be
    exported", which a removal does not do)."""
    _, out, ids = fleet
    target = tmp_path / "out"
    shutil.copytree(out, target)
    before = sorted(path.relative_to(target) for path in target.rglob("*"))
    for given, said in ((["BUG-20", "NOPE-1"], "holds no case NOPE-1; nothing was removed"),
                        (["BUG-20", ""], "each case id must be a non-empty str"), ("BUG-20", "case_ids must be"),
                        (["BUG-20", "A:1/../.."], ""),  # no case id: it named the export's own folder
                        (["BUG-20", LONG_COLONS], f"holds no case {LONG_COLONS}; nothing was removed ('ledger fleet "
                         "sql OUT \"SELECT case_id FROM case_status\"' lists those it holds); no fleet export can "
                         f"hold {LONG_COLONS}: its partition folder name would pass 212 characters")):
        with pytest.raises(LedgerError) as caught:
            remove_from_fleet(target, given)
        assert caught.value.code == (INVALID_ARGUMENT if said else "INVALID_ID"), caught.value.message
        assert said in caught.value.message, caught.value.message
    assert sorted(path.relative_to(target) for path in target.rglob("*")) == before
    with pytest.raises(LedgerError) as caught:
        remove_from_fleet(tmp_path / "none", ["BUG-20"])
    assert caught.value.code in ("INVALID_ARGUMENT", "LEDGER_MISSING")
    done = CliRunner().invoke(main, ["fleet", "remove", str(target), "BUG-20", "--json"])
    assert done.exit_code == 0 and json.loads(done.output) == {"out": str(target), "removed": ["BUG-20"]}


def test_the_fleet_records_where_a_case_was_exported_from_as_an_absolute_path(tmp_path, monkeypatch):
    """A relative path in the record read as another folder once the next export ran elsewhere,
    and the refusal of another package with the same case id named it so."""
    Case.create(tmp_path / "here" / "c", "REL-1").close()
    monkeypatch.chdir(tmp_path / "here")
    export_fleet(["c"], tmp_path / "out")
    record = json.loads((tmp_path / "out" / "_fleet" / "cases" / "case_id=REL-1.json").read_text())
    assert record["path"] == str(tmp_path / "here" / "c")
    monkeypatch.chdir(tmp_path)
    Case.create(tmp_path / "c", "REL-1").close()
    [failed] = export_fleet(["c"], tmp_path / "out").failed
    assert f"already exported from another package ({tmp_path / 'here' / 'c'}," in failed["error"]["message"]


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_one_case_id_in_two_folders_fails_in_both_whatever_the_order_or_jobs(fleet, tmp_path, jobs):
    """Two copies of one package whose histories went apart (or two packages of one id): which the
    fleet should hold is not for the order of the folders to decide, so neither is exported."""
    cases, _, ids = fleet
    first = _case_paths(cases)[COLON_CASE]  # a case still investigating
    copy = tmp_path / "copy"
    shutil.copytree(first, copy)
    with Case.open(copy) as case:
        case.budget().grant("H1", 5, "controller", "more", "g-copy")  # the copy's history goes on
    out = tmp_path / "out"
    for order in ([copy, cases], [cases, copy]):
        report = export_fleet([*order, first], out, jobs=jobs)  # the first folder named twice counts once
        assert report.cases == len(ids) + 1
        failed = {Path(e["path"]).resolve(): e["error"] for e in report.failed}
        assert set(failed) == {first.resolve(), copy.resolve()}
        assert failed[copy.resolve()] == {"code": "INVALID_ARGUMENT", "message": (
            f"case id {COLON_CASE} is also in {first}; a case id names one package in a fleet, so none of them is "
            "exported: give one folder per case id")}
        assert not list(out.glob(f"*/{partition_name(COLON_CASE)}"))
    assert len(fleet_query(out, "SELECT * FROM case_status")[1]) == len(ids) - 1


def test_case_ids_that_differ_only_in_letter_case_are_not_both_exported(tmp_path):
    """Their partition folders and records would be one where file names ignore case (macOS, Windows): two
    new ones are both refused; a new one beside a case the fleet holds already is refused, that case kept."""
    for folder, case_id in (("a", "Case-1"), ("b", "case-1"), ("c", "CASE-2")):
        start_case(tmp_path / "cases" / folder, case_id=case_id).close()
    report = export_fleet([tmp_path / "cases" / "a", tmp_path / "cases" / "b", tmp_path / "cases" / "c"],
                          tmp_path / "out")
    assert (report.exported, sorted(e["case_id"] for e in report.failed)) == (1, ["Case-1", "case-1"])
    assert {e["case_id"]: e["error"] for e in report.failed}["case-1"] == {"code": "INVALID_ARGUMENT", "message": (
        "case id case-1 differs from case id Case-1 (of this export or in the fleet already) only in letter case: "
        "their files would be one where file names ignore case (macOS, Windows), so it is not exported; a fleet "
        "holds case ids that differ otherwise")}
    assert export_fleet([tmp_path / "cases" / "a"], tmp_path / "out").exported == 1
    report = export_fleet([tmp_path / "cases"], tmp_path / "out")
    assert (report.unchanged, [e["case_id"] for e in report.failed]) == (2, ["case-1"])
    assert sorted(p.name for p in (tmp_path / "out" / "events").iterdir()) == ["case_id=CASE-2", "case_id=Case-1"]


def test_many_folders_of_one_case_id_each_name_three_others_and_count_the_rest(tmp_path):
    """30 copies of one case printed 30 lines naming the 29 others each."""
    start_case(tmp_path / "cases" / "c00", case_id="SAME-1").close()
    for n in range(1, 6):
        shutil.copytree(tmp_path / "cases" / "c00", tmp_path / "cases" / f"c{n:02d}")
    report = export_fleet([tmp_path / "cases"], tmp_path / "out")
    assert len(report.failed) == 6
    first = next(e for e in report.failed if Path(e["path"]).name == "c00")
    named = ", ".join(str(tmp_path / "cases" / f"c{n:02d}") for n in (1, 2, 3))
    assert first["error"]["message"] == (f"case id SAME-1 is also in {named} and 2 more; a case id names one package "
                                         "in a fleet, so none of them is exported: give one folder per case id")


def test_an_export_folder_that_is_not_a_fleet_export_is_refused(fleet, tmp_path):
    cases, _, _ = fleet
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(LedgerError) as caught:
        export_fleet([cases], tmp_path / "mine")
    assert caught.value.code == "INVALID_ARGUMENT" and "not a fleet export" in caught.value.message
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    with pytest.raises(LedgerError) as missing:
        export_fleet([tmp_path / "nothing-here"], tmp_path / "new")
    assert missing.value.code == "LEDGER_MISSING" and not (tmp_path / "new").exists()


def test_fleet_sql_prints_the_formats_of_the_other_commands(fleet):
    _, out, ids = fleet
    query = "SELECT case_id, package_generation, state FROM case_status ORDER BY case_id"
    as_json = CliRunner().invoke(main, ["fleet", "sql", str(out), query, "--json"])
    assert as_json.exit_code == 0, as_json.output
    rows = json.loads(as_json.stdout)
    assert [r["case_id"] for r in rows] == sorted(ids) and all(isinstance(r["package_generation"], int) for r in rows)
    as_csv = CliRunner().invoke(main, ["fleet", "sql", str(out), query, "--csv"])
    assert as_csv.stdout.splitlines()[0] == "case_id,package_generation,state"
    assert len(as_csv.stdout.splitlines()) == len(ids) + 1
    table = CliRunner().invoke(main, ["fleet", "sql", str(out), "SELECT min(created_at) AS first FROM events"])
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", table.stdout)


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_fleet_sql_only_reads_the_export(fleet, tmp_path):
    _, out, _ = fleet
    for query, why in [(f"COPY events TO '{tmp_path}/x.csv'", "only one SELECT"),
                       ("SELECT 1; SELECT 2", "only one SELECT"),
                       ("SELECT * FROM read_csv('/etc/passwd')", "query refused"),
                       ("SELECT * FROM nothing", "query refused")]:
        result = CliRunner().invoke(main, ["fleet", "sql", str(out), query])
        assert result.exit_code == 1 and result.stderr.startswith("error: INVALID_ARGUMENT: ") and why in result.stderr
    unknown = CliRunner().invoke(main, ["fleet", "sql", str(out), "SELECT * FROM nothing"])
    assert unknown.stderr.endswith("does not exist! (the fleet's tables: events, actions, balances, evidence, "
                                   "scope_usage, case_status)\n")  # not DuckDB's guess at one of its own tables
    binder = CliRunner().invoke(main, ["fleet", "sql", str(out), "SELECT stream_seqq FROM events"])
    assert binder.stderr.count("\n") == 1 and "\\n" not in binder.stderr  # one line, no escaped line breaks
    assert 'Candidate bindings: "stream"' in binder.stderr
    unparsed = CliRunner().invoke(main, ["fleet", "sql", str(out), "selec 1"])  # refused before it runs: the same
    assert unparsed.stderr == ('error: INVALID_ARGUMENT: query refused: Parser Error: syntax error at or near "selec" '
                               "LINE 1: selec 1\n")
    (tmp_path / "notes.txt").write_text("mine")
    elsewhere = CliRunner().invoke(main, ["fleet", "sql", str(tmp_path), "SELECT 1"])
    assert elsewhere.stderr == (f"error: INVALID_ARGUMENT: {tmp_path} is not a fleet export (no _fleet/format.json); "
                                "run 'ledger fleet export' into an empty folder first\n")
    assert not (tmp_path / "x.csv").exists()
    stopped = CliRunner().invoke(main, ["fleet", "sql", str(out), "SELECT count(*) FROM range(10000000000000)",
                                        "--timeout", "0.2"])
    assert stopped.exit_code == 1 and "query stopped after 200 ms" in stopped.stderr


@pytest.mark.parametrize("query", ["SELECT \udcff", "SELECT '\udcff'", "SELECT 1 -- \ud800"])
def test_a_fleet_query_holding_text_that_is_not_unicode_is_refused_as_ledger_sql_refuses_it(fleet, query):
    """A query from a command line byte that is not UTF-8 (a lone surrogate): DuckDB's TypeError
    reached the terminal as a traceback."""
    from ledger import fleet_query

    _, out, _ = fleet
    result = CliRunner().invoke(main, ["fleet", "sql", str(out), query])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    position = next(i for i, c in enumerate(query) if "\ud800" <= c <= "\udfff")
    assert result.stderr.startswith("error: INVALID_ARGUMENT: query refused: it holds text that is not valid Unicode "
                                    f"(surrogates not allowed at position {position})")
    with pytest.raises(LedgerError) as refused:
        fleet_query(out, query)
    assert refused.value.code == "INVALID_ARGUMENT" and refused.value.details == {"query": "refused"}
    for statement in ("SELECT nothing FROM actions", "DELETE FROM actions"):
        with pytest.raises(LedgerError) as refused:
            fleet_query(out, statement)
        assert refused.value.details == {"query": "refused"}, statement


def test_fleet_sql_runs_the_reads_duckdb_runs_as_a_select(fleet):
    """DESCRIBE, SUMMARIZE, SHOW and a reading PRAGMA are SELECTs to DuckDB: they run, as documented."""
    _, out, _ = fleet
    for query in ("DESCRIBE actions", "SHOW TABLES", "PRAGMA table_info('actions')", "SUMMARIZE case_status"):
        result = CliRunner().invoke(main, ["fleet", "sql", str(out), query, "--json"])
        assert result.exit_code == 0 and json.loads(result.stdout), (query, result.output)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_fleet_query_held_past_its_time_limit_by_one_function_call_ends_the_command_with_the_refusal(fleet):
    """DuckDB stops a query between vectors: levenshtein of two texts of 60,000 characters is one call
    and ran its 16 s past a --timeout of 0.3."""
    from conftest import run_cli

    _, out, _ = fleet
    done = run_cli("fleet", "sql", str(out), "SELECT levenshtein(repeat('a', 60000), repeat('b', 60000))",
                   "--timeout", "0.3")
    assert (done.returncode, done.stderr.decode()) == (1, (
        "error: INVALID_ARGUMENT: query stopped at its time limit, 0.3 s (--timeout SECONDS): one call of a "
        "function in it ran on past the limit, so the command ended; nothing was written\n"))


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_fleet_query_waiting_for_the_exports_lock_is_not_timed_until_it_holds_it(fleet):
    """The wait for a fleet export's lock counted toward --timeout: the command ended as if one
    function call had held the query past it."""
    import fcntl
    import threading

    from conftest import run_cli

    _, out, _ = fleet
    with open(out / "_fleet" / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        timer = threading.Timer(3.5, lambda: fcntl.flock(lock, fcntl.LOCK_UN))
        timer.start()
        done = run_cli("fleet", "sql", str(out), "SELECT 1 AS one", "--timeout", "0.5", "--csv")
        timer.join()
    assert (done.returncode, done.stdout, done.stderr) == (0, b"one\n1\n", b"")  # it waited for the lock, then ran


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_ctrl_c_while_one_function_call_holds_a_fleet_query_ends_it_as_an_interrupt(fleet):
    from test_cli import interrupted_after

    _, out, _ = fleet
    # one call of about 100 s: it held the command past Ctrl-C, and past interrupted_after's 60 s
    done = interrupted_after(3.0, "fleet", "sql", str(out), "SELECT levenshtein(repeat('a', 150000), repeat('b', 150000))",
                             "--timeout", "600")
    assert (done.returncode, done.stderr) == (130, "error: interrupted; nothing half-written remains, run the "
                                              "command again\n")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_fleet_query_stopped_by_ctrl_c_is_an_interrupt_not_its_time_limit(fleet):
    from test_cli import interrupted_after

    _, out, _ = fleet
    endless = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
    done = interrupted_after(2.5, "fleet", "sql", str(out), endless, "--timeout", "60")
    assert (done.returncode, done.stderr) == (130, "error: interrupted; nothing half-written remains, run the "
                                              "command again\n")


def test_fleet_commands_without_duckdb_say_which_extra_to_install(fleet, monkeypatch):
    _, out, _ = fleet
    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(LedgerError) as caught:
        fleet_query(out, "SELECT 1")
    assert caught.value.code == "INVALID_ARGUMENT" and "pip install '.[fleet]'" in caught.value.message


def _questions() -> list[tuple[str, str]]:
    text = (REPO / "docs" / "fleet.md").read_text(encoding="utf-8")
    section = text.split("## Fleet questions", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^### (.+?)\n.*?```sh\nledger fleet sql fleet-export \"(.*?)\"\n```", section,
                      flags=re.MULTILINE | re.DOTALL)


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_the_documented_fleet_questions_run_as_is(fleet):
    cases, out, _ = fleet
    questions = dict(_questions())
    assert len(questions) == 5
    answers = {}
    for title, query in questions.items():
        result = CliRunner().invoke(main, ["fleet", "sql", str(out), query, "--json"])
        assert result.exit_code == 0, (title, result.output)
        answers[title] = json.loads(result.stdout)
        assert answers[title], title
    spend = answers["Spend per action type per day"]
    total = sum(read_only_query(p, "SELECT COALESCE(SUM(cost_units), 0) FROM actions")[1][0][0]
                for p in _case_paths(cases).values())
    assert sum(row["spent_units"] for row in spend) == total
    resolved = [i for i, p in _case_paths(cases).items()
                if read_only_query(p, "SELECT outcome FROM case_status")[1][0][0] == "resolved"]
    assert resolved == [COLON_CASE]
    assert [r["case_id"] for r in answers["Cost per resolved case"]] == resolved
    limits = answers["Limits that fired, by scope and dimension"]
    assert {(r["scope_type"], r["dimension"]) for r in limits} == {("case", "actions")}


READER = textwrap.dedent("""
    import sys
    import duckdb
    from ledger import fleet_query
    out, case_id, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    file = f"{out}/events/case_id={case_id}/data.parquet"
    seen = set()
    for _ in range(rounds):
        _, [(events, generation, top)] = fleet_query(out, f"SELECT (SELECT count(*) FROM events WHERE case_id = "
            f"'{case_id}'), (SELECT max(package_generation) FROM case_status WHERE case_id = '{case_id}'), "
            f"(SELECT max(seq) FROM events WHERE case_id = '{case_id}')")
        assert events == generation == top, (events, generation, top)
        count, last = duckdb.sql(f"SELECT count(*), max(seq) FROM read_parquet('{file}')").fetchone()
        assert count == last, (count, last)
        seen.add(events)
    print(len(seen))
""")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_case_is_replaced_atomically_under_a_concurrent_reader(fleet, tmp_path):
    """A real reader process queries across tables while a case is appended to and exported again:
    every answer is one whole head of the case (events, case_status and seq agree)."""
    cases, _, _ = fleet
    path = tmp_path / "case"
    shutil.copytree(_case_paths(cases)["FLEET-00001"], path)
    out = tmp_path / "out"
    export_fleet([path], out)
    reader = subprocess.Popen([sys.executable, "-c", READER, str(out), "FLEET-00001", "150"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rounds = 0
    with Case.open(path) as case:
        while reader.poll() is None and rounds < 60:
            rounds += 1
            case.transition("BLOCKED" if rounds % 2 else "INVESTIGATING_HYPOTHESES")
            assert export_fleet([path], out).exported == 1
    out_text, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    assert int(out_text) >= 2, "the reader saw only one head: no export ran while it read"


def test_a_value_its_column_type_cannot_hold_fails_that_case_only(fleet, tmp_path, monkeypatch):
    """A view column typed by its name that holds something else (a newer view, say) is reported
    for the case with INVALID_ARGUMENT, never a traceback, and nothing of that case is written."""
    import ledger.package_tools.fleet as fleet_module

    cases, _, _ = fleet
    typed = fleet_module.column_type
    monkeypatch.setattr(fleet_module, "column_type", lambda name: "BIGINT" if name == "action" else typed(name))
    report = export_fleet([_case_paths(cases)["FLEET-00001"]], tmp_path / "out")
    [failed] = report.failed
    assert failed["error"]["code"] == "INVALID_ARGUMENT" and "table actions" in failed["error"]["message"]
    assert not list((tmp_path / "out").glob("*/case_id=FLEET-00001"))
    assert not list((tmp_path / "out" / "_fleet" / "tmp").iterdir())


def test_a_full_disk_under_the_export_names_the_file_it_could_not_write(fleet, tmp_path, monkeypatch):
    """The rows are written while verify holds its snapshot: a refusal there was reported as
    "verify: the file system refused", naming neither the export nor the file."""
    import errno
    import io

    import ledger.package_tools.fleet as fleet_module

    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def opening(path, *args, **kwargs):  # the rows' JSON-Lines file beside the Parquet one
        return Full() if str(path).endswith(".jsonl") else open(path, *args, **kwargs)
    monkeypatch.setattr(fleet_module, "open", opening, raising=False)
    cases, _, _ = fleet
    report = export_fleet([_case_paths(cases)["FLEET-00001"]], tmp_path / "out")
    [failed] = report.failed
    assert failed["error"]["code"] == "STORAGE_ERROR"
    assert re.fullmatch(rf"cannot write {re.escape(str(tmp_path / 'out'))}/_fleet/tmp/\S+/events\.jsonl: "
                        "No space left on device", failed["error"]["message"]), failed["error"]["message"]
    assert not list((tmp_path / "out").glob("*/case_id=FLEET-00001"))


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_export_keeps_no_statement_per_case(fleet, tmp_path):
    """Memory is bounded by one case: the statement cache holds the fixed statements only, so
    exporting the fleet again (to a new folder, every case written) adds nothing to it. (It once
    kept each case's COPY statement with its paths: 16 MiB more per 1,000 cases.)"""
    from ledger.storage.sqlfiles import _statement

    cases, _, ids = fleet
    export_fleet([cases], tmp_path / "warm")
    size = _statement.cache_info().currsize
    assert export_fleet([cases], tmp_path / "out").exported == len(ids)
    assert _statement.cache_info().currsize == size


@pytest.mark.parametrize("jobs", [0, 257, 2.0, True, "2"])
def test_jobs_is_checked_like_every_other_jobs_argument(fleet, tmp_path, jobs):
    cases, _, _ = fleet
    with pytest.raises(LedgerError) as caught:
        export_fleet([cases], tmp_path / "out", jobs=jobs)
    assert caught.value.code == INVALID_ARGUMENT and "1 to 256" in caught.value.message
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_jobs_none_uses_the_cores_this_process_may_use(fleet, tmp_path, monkeypatch):
    from ledger.ground import workers

    cases, out, ids = fleet
    asked = []
    monkeypatch.setattr(workers, "usable_cores", lambda: asked.append(1) or 1)
    report = export_fleet([cases], tmp_path / "out", jobs=None)
    assert asked == [1] and (report.exported, report.failed) == (len(ids), [])
    for table in TABLES:
        query = f"SELECT * FROM {table} ORDER BY ALL"
        assert fleet_query(tmp_path / "out", query) == fleet_query(out, query), table


@pytest.mark.parametrize("case_id", ["NULL", *(pytest.param(i, marks=pytest.mark.slow)  # an export each: slow lane
                                               for i in ("null", "nULl", "00012", "1e5", "true"))])
def test_a_case_id_is_text_in_every_table_whatever_it_looks_like(tmp_path, case_id):
    """DuckDB's own Hive reading took the folder ``case_id=NULL`` for SQL NULL (and types ids that
    look like numbers): the case id is read back from the folder name, as text."""
    lines = (REPO / "tests/data/trajectories/django__django-11206.jsonl").read_text().splitlines()[:12]
    with Case.create(tmp_path / "c", case_id) as case:
        assert all(r.ok for r in apply_journal(case, lines))
    export_fleet([tmp_path / "c"], tmp_path / "out")
    for table in ("events", "case_status", "balances"):
        names, rows = fleet_query(tmp_path / "out", f"SELECT DISTINCT case_id, typeof(case_id) FROM {table}")
        assert rows == [(case_id, "VARCHAR")], table
    assert fleet_query(tmp_path / "out", f"SELECT count(*) FROM case_status WHERE case_id = '{case_id}'")[1] == [(1,)]


def test_fleet_sql_reads_nothing_outside_the_export_not_even_duckdbs_temp_folder(fleet, tmp_path, monkeypatch):
    _, out, _ = fleet
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "secret.txt").write_text("SECRET")
    for query in ("SELECT * FROM read_text('.tmp/secret.txt')", "SELECT * FROM glob('.tmp/*')"):
        with pytest.raises(LedgerError) as caught:
            fleet_query(out, query)
        assert caught.value.code == INVALID_ARGUMENT and "Permission Error" in caught.value.message


def test_a_damaged_or_stray_file_in_an_export_is_said_plainly(fleet, tmp_path):
    _, out, ids = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "actions" / "junk").mkdir()
    (copy / "actions" / "junk" / "data.parquet").write_bytes(b"not a case's folder: not read")
    assert fleet_query(copy, "SELECT count(DISTINCT case_id) FROM actions")[1][0][0] <= len(ids)
    partitions = [p for p in sorted((copy / "actions").iterdir()) if p.name.startswith("case_id=")]
    _garbage_of_its_size(partitions[-1] / "data.parquet")  # a file DuckDB reads only when queried
    with pytest.raises(LedgerError) as caught:
        fleet_query(copy, "SELECT count(*) FROM actions")
    assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message.startswith(
        f"{copy / 'actions'}: a file of the export cannot be read (")
    _garbage_of_its_size(partitions[0] / "data.parquet")  # the file DuckDB reads to make the view
    for query in ("SELECT count(*) FROM actions", "SELECT count(*) FROM ACTIONS",
                  "SELECT a.case_id FROM events AS e JOIN actions AS a USING (case_id)"):
        with pytest.raises(LedgerError) as caught:
            fleet_query(copy, query)
        assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message.startswith(
            f"{copy / 'actions'}: a file of the export cannot be read (")
    assert fleet_query(copy, "SELECT count(DISTINCT case_id) FROM events")[1] == [(len(ids),)]  # the others read
    (copy / "_fleet" / "format.json").write_text("[]")
    with pytest.raises(LedgerError) as caught:
        fleet_query(copy, "SELECT 1")
    assert caught.value.message == f"{copy} holds a fleet export in format [], not fleet-export-v1"


def test_a_file_the_query_names_that_the_export_never_made_is_the_querys_error_not_damage(fleet, tmp_path):
    """A path inside the export that no recorded case's table file is (missing, not Parquet, a stray
    file) is the query's own mistake, INVALID_ARGUMENT: exporting again could not mend it. A recorded
    case's file that does not read stays INTEGRITY_ERROR, however the query reaches it."""
    _, out, _ = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "actions" / "junk").mkdir()
    (copy / "actions" / "junk" / "data.parquet").write_bytes(b"not a case's folder: not read")
    partition = next(p for p in sorted((copy / "events").iterdir()) if p.name.startswith("case_id="))
    for path in (copy / "nope.parquet", copy / "_fleet" / "**", copy / "actions" / "junk" / "data.parquet",
                 copy / "actions" / "case_id=NO-SUCH-CASE" / "data.parquet"):
        with pytest.raises(LedgerError) as caught:
            fleet_query(copy, f"SELECT * FROM read_parquet('{path}')")
        assert caught.value.code == "INVALID_ARGUMENT" and caught.value.message.startswith("query refused: "), path
        assert "export the fleet again" not in caught.value.message
    _garbage_of_its_size(partition / "data.parquet")
    with pytest.raises(LedgerError) as caught:
        fleet_query(copy, f"SELECT * FROM read_parquet('{partition / 'data.parquet'}')")
    assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message.startswith(
        f"{copy / 'events'}: a file of the export cannot be read (")


def _garbage_of_its_size(path: Path) -> None:
    """Garbage in place of ``path``, of its size (a file of another size is refused before DuckDB reads it)."""
    path.write_bytes(b"garbage".ljust(path.stat().st_size, b"\0"))


def test_a_file_replaced_by_another_cases_or_tables_is_integrity_error_and_exported_anew(fleet, tmp_path):
    """Another case's file, another table's (the first of the table: its columns would have been the view's)
    or an older export's, copied over a case's file, was read as that case's rows without a word; exporting
    again found the head recorded and left it. The query refuses it by its size, the export writes it anew."""
    cases, out, ids = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    first, other = sorted(p.name for p in (copy / "events").iterdir() if p.name.startswith("case_id="))[:2]
    count = f"SELECT count(*) FROM events WHERE case_id = '{first.removeprefix('case_id=')}'"
    want = fleet_query(out, count)[1]
    shutil.copy(copy / "events" / other / "data.parquet", copy / "events" / first / "data.parquet")
    shutil.copy(copy / "actions" / first / "data.parquet", copy / "balances" / first / "data.parquet")
    for query, table in (("SELECT count(*) FROM events", "events"), ("SELECT * FROM balances", "balances")):
        with pytest.raises(LedgerError) as caught:
            fleet_query(copy, query)
        assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message.startswith(
            f"{copy / table}: {copy / table / first / 'data.parquet'} is not the file the export wrote ("), query
        assert caught.value.message.endswith("replaced or changed since; export the fleet again: it writes that "
                                             "case's files anew")
    assert fleet_query(copy, "SELECT count(DISTINCT case_id) FROM actions")[1] == [(len(ids),)]  # the others read
    again = export_fleet([cases], copy)
    assert (again.exported, again.unchanged, again.failed) == (1, len(ids) - 1, [])
    assert fleet_query(copy, count)[1] == want
    assert filecmp_same(out, copy)


def test_a_file_the_query_cannot_read_is_repaired_by_exporting_again_into_the_same_folder(fleet, tmp_path):
    """A file DuckDB cannot read (bytes of its footer changed, its size kept) was named with the advice to
    export into a new folder; exporting again into the same one writes that case's files anew."""
    cases, out, ids = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    first = sorted(p for p in (copy / "actions").iterdir() if p.name.startswith("case_id="))[0] / "data.parquet"
    data = bytearray(first.read_bytes())
    data[-12:-8] = b"\xff\xff\xff\x7f"  # the footer's length, just before the closing magic bytes
    first.write_bytes(bytes(data))
    with pytest.raises(LedgerError) as caught:
        fleet_query(copy, "SELECT count(*) FROM actions")
    assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message.startswith(
        f"{copy / 'actions'}: a file of the export cannot be read (")
    assert caught.value.message.endswith("; export the fleet again: it writes anew each case whose files changed since")
    again = export_fleet([cases], copy)
    assert (again.exported, again.unchanged, again.failed) == (1, len(ids) - 1, [])
    assert fleet_query(copy, "SELECT count(*) FROM actions") == fleet_query(out, "SELECT count(*) FROM actions")
    assert filecmp_same(out, copy)


def filecmp_same(a: Path, b: Path) -> bool:
    """Whether the two exports hold the same table files, byte for byte."""
    files = sorted(p.relative_to(a) for p in a.rglob("data.parquet"))
    return files == sorted(p.relative_to(b) for p in b.rglob("data.parquet")) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files)


def test_a_file_changed_in_place_or_a_record_naming_no_files_has_its_case_exported_anew(fleet, tmp_path):
    """Bytes changed in a file of the same size are the next export's to find (every file's sha256 against
    its record); a record of an export made before records named their files (no ``files``) is no fault:
    queries read it as before, and the next export writes that case anew, the record naming its files."""
    cases, out, ids = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    _garbage_of_its_size(copy / "actions" / "case_id=BUG-20" / "data.parquet")
    record = copy / "_fleet" / "cases" / "case_id=FLEET-00003.json"
    old = json.loads(record.read_text())
    record.write_text(json.dumps({k: v for k, v in old.items() if k != "files"}))
    assert fleet_query(copy, "SELECT count(*) FROM events WHERE case_id = 'FLEET-00003'")[1][0][0] > 0
    again = export_fleet([cases], copy)
    assert (again.exported, again.unchanged, again.failed) == (2, len(ids) - 2, [])
    assert json.loads(record.read_text()) == old
    assert filecmp_same(out, copy)
    assert export_fleet([cases], copy).unchanged == len(ids)


def _damage_footer(path: Path, how: str) -> None:
    """Damage the Parquet footer of ``path`` in place (its length and magic number kept)."""
    data = bytearray(path.read_bytes())
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    if how == "zeroed":
        data[start:start + 20] = bytes(20)
    else:  # its last bytes made a type the reader does not know
        data[-18:-8] = bytes([0x0F] * 10)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["zeroed", "unknown type"])
def test_a_damaged_footer_of_any_case_but_the_first_is_integrity_error_naming_its_table(fleet, tmp_path, how):
    """Only the first file of a table is read when its view is made: a later case's damaged footer
    failed the query with DuckDB's plain error naming no file ("TProtocolException: Invalid data"),
    which was "query refused" (INVALID_ARGUMENT), as if the query were at fault."""
    _, out, ids = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for table in ("actions", "events"):
        partitions = [p for p in sorted((copy / table).iterdir()) if p.name.startswith("case_id=")]
        _damage_footer(partitions[-1] / "data.parquet", how)
    for query, table in (("SELECT count(*) FROM actions", "actions"), ("SELECT * FROM events", "events"),
                         ("SELECT e.seq FROM balances b JOIN actions a USING (case_id) JOIN events e USING (case_id)",
                          "events")):  # both read and damaged: the first of the fleet's tables
        with pytest.raises(LedgerError) as caught:
            fleet_query(copy, query)
        assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message.startswith(
            f"{copy / table}: a file of the export cannot be read ("), (query, caught.value)
    assert fleet_query(copy, "SELECT count(DISTINCT case_id) FROM balances")[1] == [(len(ids),)]  # others read
    with pytest.raises(LedgerError) as caught:
        fleet_query(copy, "SELECT error('boom')")  # a query's own error is still its own
    assert (caught.value.code, caught.value.details) == (INVALID_ARGUMENT, {"query": "refused"})


def test_a_damaged_data_page_behind_an_intact_footer_is_integrity_error_naming_its_table(fleet, tmp_path):
    """DuckDB's plain error for it ("Out of buffer") named no file, and every footer read: the query
    was refused as if at fault. Every value of the tables the query names is read then."""
    _, out, ids = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    _page_damaged(copy)
    with pytest.raises(LedgerError) as caught:
        fleet_query(copy, "SELECT * FROM events")
    assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message.startswith(
        f"{copy / 'events'}: a file of the export cannot be read ("), caught.value
    assert fleet_query(copy, "SELECT count(DISTINCT case_id) FROM actions")[1] == [(len(ids),)]


def _page_damaged(copy: Path, case_id: str = "BUG-20") -> Path:
    """``events``' file of ``case_id`` with its first data page's header (right after the magic number)
    zeroed, its footer and size intact."""
    target = copy / "events" / f"case_id={case_id}" / "data.parquet"
    data = bytearray(target.read_bytes())
    data[4:24] = bytes(20)
    target.write_bytes(bytes(data))
    return target


@pytest.mark.parametrize("damage", ["page", "garbage"])
@pytest.mark.parametrize("spelled", ["dot", "class-glob", "star-glob", "relative", "linked", "concatenated", "query"])
def test_a_damaged_file_of_a_recorded_case_is_integrity_error_however_the_query_reaches_it(
        fleet, tmp_path, monkeypatch, spelled, damage):
    """DuckDB quotes a path as the query spelled it (``OUT/./events``, relative, through a link to OUT),
    a glob names no table as a word, a path built by ``||`` holds no slash in a literal, and ``query()``
    hides the view's name: the damaged file was taken for the query's own mistake (INVALID_ARGUMENT) or,
    its page damaged behind an intact footer, left unread. Each quoted path is resolved before it is
    compared, a recorded file it names is read again to confirm the damage, and an error naming no file
    has every table's values read."""
    _, out, _ = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    if damage == "page":
        _page_damaged(copy)
    else:
        _garbage_of_its_size(copy / "events" / "case_id=BUG-20" / "data.parquet")
    (tmp_path / "link").symlink_to(copy)
    monkeypatch.chdir(tmp_path)
    source = {"dot": f"read_parquet('{copy}/./events/*/data.parquet')",
              "class-glob": f"read_parquet('{copy}/events/[c]ase_id=BUG-20/data.parquet')",
              "star-glob": f"read_parquet('{copy}/events/*/data.parquet')",
              "relative": "read_parquet('copy/events/case_id=BUG-20/data.parquet')",
              "linked": f"read_parquet('{tmp_path / 'link'}/events/case_id=BUG-20/data.parquet')",
              "concatenated": f"read_parquet('{copy}' || chr(47) || 'events' || chr(47) || chr(42) || chr(47) || "
                              "'data.parquet')",
              "query": "query('SELECT * FROM ev' || 'ents')"}[spelled]
    with pytest.raises(LedgerError) as caught:
        fleet_query(copy, f"SELECT * FROM {source}")
    assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message.startswith(
        f"{copy / 'events'}: a file of the export cannot be read ("), caught.value


def test_the_export_is_read_one_table_folder_at_a_time_and_a_sound_file_read_wrongly_is_the_querys_error(
        fleet, tmp_path):
    """A glob across the tables' folders, or a file of the export's own records, is not readable (a query
    reads the tables); a recorded Parquet file read with ``read_csv`` failed as "cannot be read" and was
    taken for damage: it reads as Parquet, so the error is the query's."""
    _, out, ids = fleet
    for query in (f"SELECT count(*) FROM read_parquet('{out}/*/case_id=BUG-20/data.parquet', union_by_name = true)",
                  f"SELECT count(*) FROM read_json('{out}/_fleet/format.json')",
                  f"SELECT count(*) FROM read_csv('{out}/events/case_id=BUG-20/data.parquet')"):
        with pytest.raises(LedgerError) as caught:
            fleet_query(out, query)
        assert caught.value.code == "INVALID_ARGUMENT" and caught.value.message.startswith("query refused: "), query
    assert fleet_query(out, f"SELECT count(*) FROM read_text('{out}/_fleet/cases/*.json')")[1] == [(len(ids),)]


def test_a_table_missing_a_recorded_cases_file_is_refused_however_it_is_read_and_the_others_still_answer(
        fleet, tmp_path):
    """A recorded case's file deleted: the view's query was refused, but a glob over the table's folder
    read the other files and answered with fewer rows, exit 0. The damaged table's folder is not readable
    at all now, so every read of it is refused naming the damage; a query of intact tables that merely
    mentions the damaged table's name runs."""
    _, out, ids = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    target = copy / "events" / "case_id=BUG-20" / "data.parquet"
    target.unlink()
    for query in (f"SELECT count(*) FROM read_parquet('{copy}/events/*/data.parquet')",
                  f"SELECT count(*) FROM read_parquet('{copy}' || chr(47) || 'events' || chr(47) || chr(42) || "
                  "chr(47) || 'data.parquet')",
                  "SELECT count(*) FROM events", "SELECT count(*) FROM query('SELECT * FROM ev' || 'ents')"):
        with pytest.raises(LedgerError) as caught:
            fleet_query(copy, query)
        assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message.startswith(
            f"{copy / 'events'}: {target} is missing"), (query, caught.value)
    assert fleet_query(copy, "SELECT count(DISTINCT case_id) FROM actions WHERE action_id <> 'events/*'")[1] == [
        (len(ids),)]


def test_a_damaged_column_name_of_a_later_cases_file_is_integrity_error_not_the_querys_fault(fleet, tmp_path):
    """The file reads as sound Parquet of another schema ("schema mismatch in glob"): read again alone it
    passed, so the refusal was the query's (INVALID_ARGUMENT). Its columns are compared with another
    recorded case's file of the table."""
    _, out, _ = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    target = sorted((copy / "case_status").glob("case_id=*/data.parquet"))[-1]
    data = bytearray(target.read_bytes())
    at = data.index(b"outcome")  # the column's name in the footer's schema
    data[at + 2] = ord("x")
    target.write_bytes(bytes(data))
    for query in ("SELECT * FROM case_status", f"SELECT * FROM read_parquet('{copy}/case_status/*/data.parquet')"):
        with pytest.raises(LedgerError) as caught:
            fleet_query(copy, query)
        assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message.startswith(
            f"{copy / 'case_status'}: a file of the export cannot be read ("), (query, caught.value)


@pytest.mark.slow  # a fuzz over hundreds of damaged copies: the slow lane (.ci/run) runs it
def test_one_damaged_byte_in_a_files_footer_is_never_the_querys_error_nor_an_exception_of_another_kind(
        fleet, tmp_path):
    """Each byte of the footer region of a later case's events file set to 0xff in turn: the query
    answers (a changed value may read as another, which no query can tell) or is INTEGRITY_ERROR; never
    INVALID_ARGUMENT, never a UnicodeDecodeError (DuckDB hands over text that is not UTF-8 unchecked)."""
    _, out, _ = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    target = sorted((copy / "events").glob("case_id=*/data.parquet"))[-1]
    sound = target.read_bytes()
    outcomes: dict[str, int] = {}
    try:
        for at in range(max(4, len(sound) - 3000), len(sound) - 8, 3):
            target.write_bytes(sound[:at] + b"\xff" + sound[at + 1:])
            try:
                fleet_query(copy, "SELECT * FROM events")
                outcome = "answered"
            except LedgerError as refused:
                outcome = refused.code if refused.code != "INVALID_ARGUMENT" else f"{at}: {refused.message}"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    finally:
        target.write_bytes(sound)
    assert set(outcomes) <= {"answered", "INTEGRITY_ERROR"}, outcomes
    assert outcomes.get("INTEGRITY_ERROR", 0) > 0


def test_the_look_for_a_damaged_footer_never_takes_the_querys_time_limit_for_damage(fleet, tmp_path):
    """The look ran on the query's connection under its timer: the timer's interrupt landing on the
    metadata read of an intact table was "INTEGRITY_ERROR naming that table". Past the time limit
    the look ends and the query's own refusal stands; Ctrl-C there is an interrupt."""
    import threading

    import duckdb

    from ledger.package_tools.fleet_query import _damaged_table

    _, out, _ = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    _damage_footer(next(p for p in sorted((copy / "events").iterdir()) if p.name.startswith("case_id=")) /
                   "data.parquet", "zeroed")

    class Interrupted:
        def execute(self, sql):
            raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")

    timed_out, running = threading.Event(), threading.Event()
    timed_out.set()
    con = duckdb.connect()
    assert _damaged_table(con, copy, "SELECT * FROM events", timed_out) is None  # past the limit: no look
    found = _damaged_table(con, copy, "SELECT * FROM events", running)
    assert found.code == "INTEGRITY_ERROR" and found.message.startswith(f"{copy / 'events'}: ")
    assert _damaged_table(Interrupted(), copy, "SELECT 1", timed_out) is None
    assert isinstance(_damaged_table(Interrupted(), copy, "SELECT 1", running), KeyboardInterrupt)


def test_a_missing_or_unreadable_file_of_a_recorded_case_is_integrity_error_in_any_spelling(fleet, tmp_path):
    """A table whose file of a recorded case is gone (a folder in its place, deleted) would read as
    fewer rows: it is INTEGRITY_ERROR naming the table, for a query naming the table in any case."""
    _, out, ids = fleet
    for damage in ("deleted", "folder"):
        copy = tmp_path / damage
        shutil.copytree(out, copy)
        target = next(p for p in sorted((copy / "events").iterdir()) if p.name.startswith("case_id=")) / "data.parquet"
        target.unlink()
        if damage == "folder":
            target.mkdir()
        for query in ("SELECT count(*) FROM events", "SELECT count(*) FROM Events", "select * from EVENTS"):
            with pytest.raises(LedgerError) as caught:
                fleet_query(copy, query)
            assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message.startswith(
                f"{copy / 'events'}: {target} is missing"), (damage, query, caught.value)
        assert fleet_query(copy, "SELECT count(DISTINCT case_id) FROM actions")[1] == [(len(ids),)]


@pytest.mark.parametrize("linked", ["table", "partition", "file"])
def test_a_folder_or_file_of_an_export_replaced_by_a_link_is_integrity_error_naming_it(fleet, tmp_path, linked):
    """DuckDB reads nothing outside the export, so a query of that table said "query refused:
    Permission Error"; the export itself refuses such a link, and a query now names it."""
    _, out, ids = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    partition = next(p for p in sorted((copy / "scope_usage").iterdir()) if p.name.startswith("case_id="))
    replaced = {"table": copy / "scope_usage", "partition": partition, "file": partition / "data.parquet"}[linked]
    shutil.move(replaced, tmp_path / "elsewhere")
    replaced.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(LedgerError) as caught:
        fleet_query(copy, "SELECT count(*) FROM scope_usage")
    assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message.startswith(
        f"{copy / 'scope_usage'}: {replaced} is a symbolic link, which a fleet export never makes")
    assert fleet_query(copy, "SELECT count(DISTINCT case_id) FROM events")[1] == [(len(ids),)]


@pytest.mark.parametrize("linked", ["_fleet", "_fleet/tmp"])
def test_a_query_refuses_an_export_whose_meta_or_temporary_folder_is_a_link(fleet, tmp_path, linked):
    """DuckDB reads its temporary folder (the export's _fleet/tmp) wherever a link there leads: a query
    read a file of the folder the link named, outside the export. Refused, naming the link."""
    _, out, _ = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(copy / linked, elsewhere)
    secret = elsewhere / "tmp" if linked == "_fleet" else elsewhere  # what copy/_fleet/tmp leads to
    secret.mkdir(exist_ok=True)
    (secret / "secret.txt").write_text("not the export's")
    (copy / linked).symlink_to(elsewhere)
    for query in ("SELECT count(*) FROM events", f"SELECT content FROM read_text('{copy}/_fleet/tmp/secret.txt')"):
        with pytest.raises(LedgerError) as caught:
            fleet_query(copy, query)
        assert (caught.value.code, caught.value.message) == ("INTEGRITY_ERROR", (
            f"{copy / linked} is a symbolic link, which a fleet export never makes (a query reads only the export's "
            "own files); export the fleet again into a new folder"))
    result = CliRunner().invoke(main, ["fleet", "sql", str(copy), "SELECT 1"])
    assert (result.exit_code, result.stdout) == (1, ""), result.output


def test_duckdbs_temporary_folder_is_a_private_one_removed_after_the_query_never_a_folder_of_the_export(
        fleet, tmp_path, monkeypatch):
    """DuckDB's temporary folder was the export's _fleet/tmp, looked at once before the query: swapped
    for a link to /etc in between, a query read /etc's files. It is a new private folder now, which the
    query can read (its own spill files only) and which is gone once the query ends."""
    import tempfile

    import ledger.package_tools.fleet_query as fleet_query_module

    _, out, _ = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shutil.rmtree(copy / "_fleet" / "tmp")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret.txt").write_text("not the export's")
    (copy / "_fleet" / "tmp").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setattr(fleet_query_module, "_refuse_linked_meta", lambda out: None)  # swapped after the look
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "system-tmp"))
    (tmp_path / "system-tmp").mkdir()
    with pytest.raises(LedgerError) as caught:
        fleet_query(copy, f"SELECT content FROM read_text('{copy}/_fleet/tmp/secret.txt')")
    assert caught.value.code == INVALID_ARGUMENT and "Permission Error" in caught.value.message, caught.value
    seen: list[list[str]] = []
    connect = fleet_query_module._fleet_connection

    def connecting(out: Path, spill: Path):
        seen.append([p.name[:len("ledger-fleet-sql-")] for p in (tmp_path / "system-tmp").iterdir()])
        assert spill.parent == tmp_path / "system-tmp" and oct(spill.stat().st_mode & 0o777) == "0o700"
        return connect(out, spill)
    monkeypatch.setattr(fleet_query_module, "_fleet_connection", connecting)
    assert fleet_query(copy, "SELECT count(*) FROM events")[1][0][0] > 0
    assert seen == [["ledger-fleet-sql-"]] and list((tmp_path / "system-tmp").iterdir()) == []


def test_lists_structs_and_maps_come_back_with_their_values_converted(fleet):
    _, out, _ = fleet
    query = ("SELECT list(DISTINCT CAST(reserved_at AS DATE)) AS d, [1.5::DECIMAL(4, 2)] AS n, "
             "{'b': 'ab'::BLOB, 't': TIMESTAMPTZ '2026-12-03 10:00:00+00', 'i': INTERVAL 3 DAY} AS s, "
             "[uuid()] IS NOT NULL AS u, [NULL::UUID, '4f1c2b8e-0000-4000-8000-000000000000'::UUID] AS ids, "
             "MAP {'k': 1} AS m FROM actions WHERE case_id = 'FLEET-00001'")
    names, [row] = fleet_query(out, query)
    values = dict(zip(names, row))
    assert values["d"] and all(re.fullmatch(r"\d{4}-\d\d-\d\d", day) for day in values["d"])
    assert values["n"] == ["1.50"] and values["u"] is True and values["m"] == {"k": 1}
    assert values["ids"] == [None, "4f1c2b8e-0000-4000-8000-000000000000"]
    assert values["s"] == {"b": b"ab", "t": "2026-12-03T10:00:00.000000Z", "i": "3 days"}
    for fmt, expected in (("--json", '"s":{"b":{"$base64":"YWI="},"t":"2026-12-03T10:00:00.000000Z"'),
                          ("--csv", '"{""b"":{""$base64"":""YWI=""}'), ("--table", '{"b":{"$base64":"YWI="}')):
        result = CliRunner().invoke(main, ["fleet", "sql", str(out), query, fmt])
        assert result.exit_code == 0 and expected in result.stdout, (fmt, result.output)


def test_times_dates_and_intervals_print_as_duckdb_holds_them_nothing_lost(fleet):
    """Python's conversion would make an infinite time its largest or smallest one, drop
    nanoseconds, count a month as 30 days and a date before year 1 as text with "(BC)"."""
    _, out, _ = fleet
    query = ("SELECT '-infinity'::TIMESTAMP AS t, 'infinity'::DATE AS d, 'infinity'::TIMESTAMPTZ AS z, "
             "CAST(DATE '0044-03-15' - INTERVAL 2000 YEAR AS DATE) AS bc, INTERVAL 1 MONTH + INTERVAL 3 DAY AS i, "
             "make_date(0, 1, 1) AS y0, make_date(-1, 6, 1) AS y1, make_timestamp(-123, 6, 1, 0, 0, 0)::TIMESTAMPTZ AS yz, "
             "[make_date(-1, 6, 1)] AS yl, "
             "TIMESTAMP_NS '2020-01-01 00:00:00.123456789' AS ns, TIMESTAMP_S '2020-01-01 00:00:01' AS s, "
             "[[DATE '2020-01-01', 'infinity'::DATE, NULL]] AS days, NULL::DATE AS nothing, "
             "['-infinity'::DATE]::DATE[1] AS fixed, "
             "max(closed_at - reserved_at) AS longest, list(reserved_at ORDER BY reserved_at)[1] AS first "
             "FROM actions WHERE case_id = 'FLEET-00001'")
    names, [row] = fleet_query(out, query)
    values = dict(zip(names, row))
    assert {k: v for k, v in values.items() if k not in ("longest", "first")} == {
        "t": "-infinity", "d": "infinity", "z": "infinity", "bc": "-1956-03-15", "i": "1 month 3 days",
        "y0": "0000-01-01", "y1": "-0001-06-01", "yz": "-0123-06-01T00:00:00.000000Z", "yl": ["-0001-06-01"],
        "ns": "2020-01-01T00:00:00.123456789", "s": "2020-01-01T00:00:01.000000",
        "days": [["2020-01-01", "infinity", None]], "nothing": None, "fixed": ["-infinity"]}
    assert re.fullmatch(r"\d\d:\d\d:\d\d(\.\d+)?", values["longest"]), values["longest"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", values["first"]), values["first"]
    listed = fleet_query(out, "SELECT list(reserved_at) AS l FROM actions WHERE case_id = 'FLEET-00001'")[1][0][0]
    assert listed and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", t) for t in listed)
    nested = ("SELECT {'DATE': 1, 'x y': 'infinity'::DATE, 'i': INTERVAL 1 MONTH} AS s, NULL::STRUCT(d DATE) AS ns, "
              "MAP {TIMESTAMP_NS '2020-01-01 00:00:00.123456789': ['-infinity'::DATE]} AS m, NULL::MAP(DATE, INT) AS nm, "
              "[{'a': {'b': '-infinity'::TIMESTAMP}}] AS deep, {'a': NULL::DATE} AS null_field")
    names, [row] = fleet_query(out, nested)
    assert dict(zip(names, row)) == {
        "s": {"DATE": 1, "x y": "infinity", "i": "1 month"}, "ns": None,
        "m": {"2020-01-01T00:00:00.123456789": ["-infinity"]}, "nm": None,
        "deep": [{"a": {"b": "-infinity"}}], "null_field": {"a": None}}
    unions = ("SELECT union_value(a := 'infinity'::DATE)::UNION(a DATE, b INT) AS d, "
              "union_value(b := 3)::UNION(a INTERVAL, b INT) AS n, [union_value(a := INTERVAL 1 MONTH)::UNION(a INTERVAL, "
              "b INT)] AS l, NULL::UNION(a DATE, b INT) AS nothing, union_value(k := 1) AS plain")
    names, [row] = fleet_query(out, unions)
    assert dict(zip(names, row)) == {"d": "infinity", "n": "3", "l": ["1 month"], "nothing": None, "plain": 1}
    odd = ("SELECT MAP {TIMESTAMP '2020-01-01': 1} AS m, {'key': TIMESTAMP '1999-01-01', 'value': 9} AS e0, "
           "row(TIMESTAMP '2020-01-01', 1) AS r, '12:00:00.123456789'::TIME_NS AS t")
    names, [row] = fleet_query(out, odd)  # a column named like the rewrite's own names changes nothing
    assert dict(zip(names, row)) == {"m": {"2020-01-01T00:00:00.000000": 1},
                                     "e0": {"key": "1999-01-01T00:00:00.000000", "value": 9},
                                     "r": ["2020-01-01T00:00:00.000000", 1], "t": "12:00:00.123456789"}


def test_times_in_lists_nested_deeper_than_the_lambda_bound_print_whole_as_duckdb_text(fleet):
    """Each level of lists is a lambda, which doubled DuckDB's time to prepare the query (24 levels:
    37 s, out of the time limit's reach): from the fifth level on, the value is DuckDB's text of it."""
    _, out, _ = fleet
    deep = "TIMESTAMP '2020-01-01'"
    for _ in range(24):
        deep = f"[{deep}]"
    [[value]] = fleet_query(out, f"SELECT {deep} AS s")[1]
    for _ in range(4):
        [value] = value
    assert value == "[" * 20 + "'2020-01-01 00:00:00'" + "]" * 20


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_wide_struct_of_structs_holding_times_prints_whole_as_duckdb_text_past_the_rewrite_bound(fleet):
    """4,096 dates in structs of structs: a rewrite of megabytes ran minutes past any time limit."""
    import duckdb

    from ledger.package_tools.fleet_query import REWRITE_CHARS_MAX, _as_text

    _, out, _ = fleet
    wide = "SELECT DATE '2020-01-01' AS x"
    for _ in range(12):
        wide = f"SELECT {{'a': x, 'b': x}} AS x FROM ({wide})"
    [kind] = duckdb.sql(wide).types
    assert len(_as_text("#1", kind)) < 2 * REWRITE_CHARS_MAX  # bounded by the nesting alone
    [[value]] = fleet_query(out, wide)[1]
    assert value["a"]["a"]["a"]["b"].startswith("{'a': {'a': {'a': {'a': {'a': {'a': {'a': {'a': 2020-01-01, ")


def test_two_columns_of_one_name_are_both_converted(fleet):
    """The rewrite named columns, so two of one name were one (a refusal, or the wrong column)."""
    _, out, _ = fleet
    names, rows = fleet_query(out, "SELECT 1 AS a, DATE 'infinity' AS a, TIMESTAMP '2020-01-01' AS A")
    assert names == ["a", "a", "A"] and rows == [(1, "infinity", "2020-01-01T00:00:00.000000")]


def test_a_fleet_folder_that_is_a_link_to_nothing_is_refused_naming_the_link(fleet, tmp_path):
    cases, _, _ = fleet
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(LedgerError) as caught:
        export_fleet([cases / "demo"], tmp_path / "dangling")
    assert caught.value.code == INVALID_ARGUMENT and caught.value.message == (
        f"{tmp_path / 'dangling'} (the fleet folder, --to) is a link that leads nowhere (to {tmp_path / 'nowhere'}, "
        "which is not there); give a folder, or remove the link")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("name", ["o[2]", "o*", "o{a,b}", "o?"])
def test_an_export_path_with_a_glob_character_is_refused(fleet, tmp_path, name):
    cases, _, _ = fleet
    with pytest.raises(LedgerError) as caught:
        export_fleet([cases], tmp_path / name)
    assert caught.value.code == INVALID_ARGUMENT and "may not hold *, ?, [, ], { or }" in caught.value.message
    assert not (tmp_path / name).exists()


def test_export_leaves_no_log_files_beside_the_cases_it_reads(tmp_path):
    lines = (REPO / "tests/data/trajectories/django__django-11206.jsonl").read_text().splitlines()[:12]
    with Case.create(tmp_path / "c", "LOGS-1") as case:
        assert all(r.ok for r in apply_journal(case, lines))
    before = sorted(p.name for p in (tmp_path / "c").iterdir())
    for _ in range(2):  # exported, then unchanged
        export_fleet([tmp_path / "c"], tmp_path / "out")
        assert sorted(p.name for p in (tmp_path / "c").iterdir()) == before


@pytest.mark.parametrize("call", [3, 40])
def test_ctrl_c_inside_a_sqlite_callback_ends_the_fleet_export_as_an_interrupt(fleet, tmp_path, call):
    """Ctrl-C landing in the read-only authorizer SQLite calls was swallowed by sqlite3 and turned
    into a denial: the case was reported damaged ("not authorized") and the export went on."""
    cases, _, _ = fleet
    script = (
        "import os, signal, sys\n"
        "import ledger.storage.readonly as readonly\n"
        "real, calls = readonly._reads_in_transactions, []\n"
        "def interrupted(*args):\n"
        "    calls.append(1)\n"
        f"    if len(calls) == {call}:\n"
        "        os.kill(os.getpid(), signal.SIGINT)  # its handler runs here, inside the callback\n"
        "    return real(*args)\n"
        "readonly._reads_in_transactions = interrupted\n"
        "from ledger_cli.main import main\n"
        "main(sys.argv[1:], prog_name='ledger')\n")
    done = subprocess.run([sys.executable, "-c", script, "fleet", "export", str(cases), "--to", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (
        130, "error: interrupted; nothing half-written remains, run the command again\n")


def test_only_the_cases_the_export_records_are_queried_and_no_progress_bar_is_drawn(fleet, tmp_path):
    """A partition folder the export did not write (a copy of another's) was read as a case of its
    own; DuckDB's progress bar, drawn on stdout after two seconds, broke --csv and --json rows."""
    _, out, ids = fleet
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    for table in ("case_status", "actions"):
        shutil.copytree(copy / table / "case_id=BUG-20", copy / table / "case_id=FAKE-1")
    assert sorted(row[0] for row in fleet_query(copy, "SELECT case_id FROM case_status")[1]) == sorted(ids)
    assert fleet_query(copy, "SELECT COUNT(*) FROM actions WHERE case_id = 'FAKE-1'")[1] == [(0,)]
    assert fleet_query(copy, "SELECT current_setting('enable_progress_bar')")[1] == [(False,)]


def test_pandas_reads_ids_that_look_like_numbers_as_text_given_the_partitioning_fleet_md_shows(tmp_path):
    import pandas as pd
    import pyarrow
    import pyarrow.dataset

    for case_id in ("00012", "12"):
        Case.create(make_package(tmp_path / "cases" / case_id), case_id).close()
    assert export_fleet([tmp_path / "cases"], tmp_path / "out").exported == 2
    text = pyarrow.dataset.partitioning(pyarrow.schema([("case_id", pyarrow.string())]), flavor="hive")
    frame = pd.read_parquet(tmp_path / "out" / "case_status", partitioning=text)
    assert sorted(frame["case_id"]) == ["00012", "12"]


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_workers_of_a_fleet_export_end_when_it_is_killed(fleet, tmp_path):
    """SIGKILL of `ledger fleet export --jobs 2` left its workers waiting for tasks for ever."""
    import time

    cases, _, _ = fleet
    marker = tmp_path / "workers"
    marker.mkdir()
    script = tmp_path / "export.py"
    script.write_text(  # the top level runs in every worker too (spawn imports this script)
        "import os, time\n"
        "from ledger.package_tools import fleet\n"
        "def stalled(args):\n"
        "    time.sleep(120)\n"
        "fleet._head_worker = stalled\n"
        "if __name__ != '__main__':  # a worker, started\n"
        f"    open(os.path.join({str(marker)!r}, str(os.getpid())), 'w').close()\n"
        "if __name__ == '__main__':\n"
        f"    fleet.export_fleet([{str(cases)!r}], {str(tmp_path / 'out')!r}, jobs=2)\n", encoding="utf-8")
    parent = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 60
        while not os.listdir(marker) and time.monotonic() < deadline:  # the pool starts a worker per task
            time.sleep(0.05)
        time.sleep(1)
        workers = [int(name) for name in os.listdir(marker)]
    finally:
        parent.kill()
        parent.wait()
    assert workers
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers), "a worker outlived the export that started it"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone but for its exit status
        return stat.read().split(") ")[-1][0] != "Z"


def _waiting_for(lock: Path, timeout_s: float = 60.0) -> None:
    """Return once someone waits for ``lock`` (a blocked flock in /proc/locks, marked ``->``)."""
    inode = f":{lock.stat().st_ino} "
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any("->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines()):
            return
        time.sleep(0.01)
    raise AssertionError(f"nobody waited for {lock}")


def _edit_event_body(ledger: Path, seq: int, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in event ``seq``'s body past the append-only triggers, then put
    the triggers back as they were."""
    conn = sqlite3.connect(ledger, isolation_level=None)
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'events'").fetchall()
    conn.execute("BEGIN IMMEDIATE")
    for name, _ in triggers:
        conn.execute(f'DROP TRIGGER "{name}"')
    conn.execute("UPDATE events SET body = replace(body, ?, ?) WHERE seq = ?", (old, new, seq))
    for _, sql in triggers:
        conn.execute(sql)
    conn.execute("COMMIT")
    conn.close()


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="tells a waiting export by /proc/locks (Linux)")
@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_the_rows_exported_are_the_rows_verified_in_one_snapshot(tmp_path):
    """An edit present when the export first read the case, and undone before verify read it, was
    written to Parquet as verified (and kept by every later export, the head being unchanged)."""
    _colon_case(tmp_path / "colon")
    run_demo(tmp_path / "demo", echo=lambda text: None)
    out = tmp_path / "out"
    export_fleet([tmp_path / "demo"], out)  # out is a fleet export: the colon case's lock file can be held
    ledger = tmp_path / "colon" / "ledger.sqlite"
    _edit_event_body(ledger, 7, '"replayed step"', '"edited step"')
    lock = out / "_fleet" / "cases" / f"{partition_name(COLON_CASE)}.lock"
    reports = []
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        exporting = threading.Thread(target=lambda: reports.append(export_fleet([tmp_path / "colon"], out)))
        exporting.start()
        try:
            _waiting_for(lock)  # it has read the case's head (edited) and waits to verify and write
            _edit_event_body(ledger, 7, '"edited step"', '"replayed step"')
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
            exporting.join()
    assert (reports[0].exported, reports[0].failed) == (1, [])
    exported = fleet_query(out, f"SELECT seq, body, sha256 FROM events WHERE case_id = '{COLON_CASE}' ORDER BY seq")[1]
    assert exported == read_only_query(tmp_path / "colon", "SELECT seq, body, sha256 FROM events ORDER BY seq")[1]
    assert "replayed step" in exported[6][1]
    assert all(hashlib.sha256(body.encode()).hexdigest() == sha256 for _, body, sha256 in exported)


def _team_cases(root: Path) -> Path:
    """``root/cases`` holding ``visible`` and ``team-b/hidden``, two new cases."""
    for folder, case_id in (("visible", "VIS"), ("team-b/hidden", "HIDDEN")):
        Case.create(root / "cases" / folder, case_id).close()
    return root / "cases"


def test_a_folder_this_user_may_not_list_fails_as_a_case_and_is_never_left_out(tmp_path, monkeypatch):
    """A folder the walk cannot list may hold cases: it fails (STORAGE_ERROR, exit 1) while the
    cases that can be read are exported; it was left out without a word, exit 0."""
    cases = _team_cases(tmp_path)
    deny_reading(monkeypatch, cases / "team-b")
    try:
        report = export_fleet([cases], tmp_path / "out")
    finally:
        (cases / "team-b").chmod(0o755)
    assert (report.cases, report.exported) == (2, 1)
    [failed] = report.failed
    assert (failed["path"], failed["case_id"], failed["error"]["code"]) == (str(cases / "team-b"), None, "STORAGE_ERROR")
    assert fleet_query(tmp_path / "out", "SELECT case_id FROM case_status")[1] == [("VIS",)]


def test_a_folder_removed_while_the_walk_runs_is_no_case(tmp_path, monkeypatch):
    """A tool's scratch folder made and removed while the fleet's folders were walked was taken for a
    case that could not be read: the whole export failed (LEDGER_MISSING naming it), no case exported."""
    cases = _team_cases(tmp_path)
    (cases / "scratch").mkdir()
    gone, real_scandir = str(cases / "scratch"), os.scandir

    def scandir(path=".", *args):
        if os.fspath(path) == gone:
            raise FileNotFoundError(2, "No such file or directory", gone)
        return real_scandir(path, *args)
    monkeypatch.setattr(os, "scandir", scandir)
    assert find_cases([cases]) == [cases / "team-b" / "hidden", cases / "visible"]


def test_a_case_folder_this_user_may_list_but_not_search_fails_alone(tmp_path, monkeypatch):
    """Its ledger.sqlite is named but cannot be looked at: that case fails and the others are
    exported (the whole export ended with STORAGE_ERROR)."""
    cases = _team_cases(tmp_path)
    deny_searching(monkeypatch, cases / "team-b" / "hidden")
    try:
        found = find_cases([cases])
        report = export_fleet(found, tmp_path / "out")  # the command passes the cases it found
    finally:
        (cases / "team-b" / "hidden").chmod(0o755)
    assert found == [cases / "team-b" / "hidden", cases / "visible"]
    assert (report.cases, report.exported) == (2, 1)
    [failed] = report.failed
    assert (failed["path"], failed["error"]["code"]) == (str(cases / "team-b" / "hidden"), "STORAGE_ERROR")


def test_a_folder_this_user_may_list_but_not_search_fails_as_a_case_and_the_others_are_exported(tmp_path, monkeypatch):
    """What the folder holds is named but cannot be looked at: the case inside fails alone
    (STORAGE_ERROR) and the others are exported (the whole export ended with STORAGE_ERROR)."""
    cases = _team_cases(tmp_path)
    deny_searching(monkeypatch, cases / "team-b")
    try:
        found = find_cases([cases])
        report = export_fleet(found, tmp_path / "out")
    finally:
        (cases / "team-b").chmod(0o755)
    assert found == [cases / "team-b" / "hidden", cases / "visible"]
    assert (report.cases, report.exported) == (2, 1)
    [failed] = report.failed
    assert (failed["path"], failed["error"]["code"]) == (str(cases / "team-b" / "hidden"), "STORAGE_ERROR")
    assert fleet_query(tmp_path / "out", "SELECT case_id FROM case_status")[1] == [("VIS",)]


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_publish_cut_short_leaves_the_case_out_of_fleet_sql_until_an_export_publishes_it_whole(tmp_path, monkeypatch):
    """A rename of the case's files that fails after others were done (a table folder made
    read-only) left the case's events at the new head and its case_status at the old one, both
    read by fleet sql; now the case is left out until the next export puts every table in place."""
    case = start_case(tmp_path / "c", case_id="PUB-1")
    Case.create(tmp_path / "other", "OTHER-1").close()
    out = tmp_path / "out"
    export_fleet([tmp_path / "c", tmp_path / "other"], out)
    case.transition("EVALUATING")
    case.close()
    real_replace = os.replace

    def refusing(src, dst, **kwargs):
        if "case_status" in os.fspath(dst):
            raise PermissionError(13, "Permission denied", os.fspath(dst))
        return real_replace(src, dst, **kwargs)
    monkeypatch.setattr(os, "replace", refusing)
    [failed] = export_fleet([tmp_path / "c"], out).failed
    assert failed["error"]["code"] == "STORAGE_ERROR"
    counts = ("SELECT (SELECT count(*) FROM events WHERE case_id = 'PUB-1'), "
              "(SELECT count(*) FROM case_status WHERE case_id = 'PUB-1'), (SELECT count(*) FROM case_status)")
    assert fleet_query(out, counts)[1] == [(0, 0, 1)]  # neither the new events nor the old status
    assert sorted(p.name for p in (out / "_fleet" / "cases").glob("*.publishing")) == ["case_id=PUB-1.publishing"]
    monkeypatch.setattr(os, "replace", real_replace)
    assert export_fleet([tmp_path / "c"], out).exported == 1
    head = ("SELECT (SELECT sha256 FROM events WHERE case_id = 'PUB-1' ORDER BY seq DESC LIMIT 1), "
            "(SELECT head_sha256 FROM case_status WHERE case_id = 'PUB-1'), "
            "(SELECT state FROM case_status WHERE case_id = 'PUB-1')")
    [(events_head, status_head, state)] = fleet_query(out, head)[1]
    assert (status_head, state) == (events_head, "EVALUATING")
    assert not list((out / "_fleet" / "cases").glob("*.publishing"))
    assert export_fleet([tmp_path / "c"], out).unchanged == 1


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_two_first_exports_into_one_new_folder_both_take_it_as_a_fleet_export(tmp_path, monkeypatch):
    """The second saw the folder the first had just begun (_fleet, not yet marked) and refused it as
    "not a fleet export and not an empty folder"; it now waits for the mark a little while."""
    from ledger.package_tools import fleet_folder

    out = tmp_path / "out"
    (out / "_fleet").mkdir(parents=True)  # as the first export left it a moment before its mark
    marking = threading.Timer(0.3, lambda: (out / "_fleet" / "format.json").write_text(
        json.dumps({"format": "fleet-export-v1", "tables": list(TABLES)}) + "\n"))
    marking.start()
    try:
        assert fleet_folder.check_out(out, create=True) == out
    finally:
        marking.join()
    stray = tmp_path / "stray"
    (stray / "_fleet").mkdir(parents=True)  # never marked, and holding what no export writes: refused
    (stray / "_fleet" / "notes.txt").write_text("mine")
    monkeypatch.setattr(fleet_folder, "MARKING_WAIT_S", 0.2)
    with pytest.raises(LedgerError) as caught:
        fleet_folder.check_out(stray, create=True)
    assert caught.value.message == f"{stray} is not a fleet export (no _fleet/format.json) and not an empty folder, " \
                                   "so nothing is exported into it"
    cut = tmp_path / "cut"  # a first export interrupted before its mark (a kill, Ctrl-C, a caller's timeout)
    (cut / "_fleet" / "cases").mkdir(parents=True)
    (cut / "_fleet" / "tmp").mkdir()
    (cut / "_fleet" / ".ledger-tmp-format.json").write_text("{")
    assert fleet_folder.check_out(cut, create=True) == cut  # finished, not refused (helper 214: 33 of 246)
    assert json.loads((cut / "_fleet" / "format.json").read_text())["format"] == "fleet-export-v1"
    (cut / "_fleet" / "cases" / "x.json").write_text("{}")
    (cut / "_fleet" / "format.json").unlink()  # a record of a case: no longer a start cut short
    with pytest.raises(LedgerError):
        fleet_folder.check_out(cut, create=True)
    (tmp_path / "a-file").write_text("x")  # a file is no folder another export began
    with pytest.raises(LedgerError) as caught:
        fleet_folder.check_out(tmp_path / "a-file", create=True)
    assert caught.value.message.startswith(f"{tmp_path / 'a-file'} is not a fleet export")


@pytest.mark.parametrize("damage", ['["x"]', '"text"', "null", '{"head_seq": "abc"}', "not json", "", "\xff",
                                    '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"])
@pytest.mark.sampled(every=4)
def test_a_damaged_record_of_a_case_is_refused_until_the_case_is_taken_out(tmp_path, damage):
    """A case's record in OUT/_fleet/cases that is not the object the export writes (other JSON, a
    field of another type, not UTF-8) anchors nothing: the case was exported again without a word,
    taking a ledger rolled back to an older copy (or another package of its id). It fails the case
    (INTEGRITY_ERROR naming the record and the way out), nothing written, until 'fleet remove'."""
    Case.create(tmp_path / "c", "REC-1").close()
    out = tmp_path / "out"
    export_fleet([tmp_path / "c"], out)
    record = out / "_fleet" / "cases" / "case_id=REC-1.json"
    written = json.loads(record.read_text())
    record.write_bytes(damage.encode("latin-1"))
    before = _files(out)
    done = CliRunner().invoke(main, ["fleet", "export", str(tmp_path / "c"), "--to", str(out), "--json"])
    assert done.exit_code == 1, done.output
    failed = json.loads(done.stdout)["failed"][0]
    assert failed["error"]["code"] == "INTEGRITY_ERROR"
    assert failed["error"]["message"].startswith(f"the fleet's record of case REC-1, {record}, is damaged (")
    assert failed["error"]["message"].endswith(f"take the case out ('ledger fleet remove {out} REC-1'), then "
                                               "export it again")
    assert _files(out) == before and record.read_bytes() == damage.encode("latin-1")
    with pytest.raises(LedgerError) as caught:  # its files are not checked against it: no table is read
        fleet_query(out, "SELECT count(*) FROM balances")
    assert caught.value.code == "INTEGRITY_ERROR" and caught.value.message == failed["error"]["message"]
    remove_from_fleet(out, ["REC-1"])
    assert export_fleet([tmp_path / "c"], out).exported == 1 and json.loads(record.read_text()) == written


@pytest.mark.parametrize("moved_on", [False, True], ids=["same-head", "case-moved-on"])
def test_a_record_whose_head_seq_is_not_its_hashs_event_is_named_damaged_not_the_cases_history(tmp_path, moved_on):
    """A record edited to name its head's hash at another seq was taken as unchanged while the case was,
    and once the case moved on the export blamed the case: "the history up to it was rewritten since
    that anchor was taken", of a case verify passes. The record is named damaged, nothing written."""
    with start_case(tmp_path / "cases" / "c", case_id="SEQ-1", hypotheses=1) as case:
        budget = case.budget()
        budget.initialize()
        budget.reserve("H1", "a1", "source.read_context")
    out = tmp_path / "out"
    export_fleet([tmp_path / "cases" / "c"], out)
    record = out / "_fleet" / "cases" / "case_id=SEQ-1.json"
    written = json.loads(record.read_text())
    record.write_text(json.dumps({**written, "head_seq": written["head_seq"] - 1}))
    if moved_on:
        with Case.open(tmp_path / "cases" / "c") as case:
            case.budget().record_result("H1", "a1", {"x": 1})
    before = _files(out)
    report = export_fleet([tmp_path / "cases" / "c"], out)
    [failed] = report.failed
    assert (report.exported, report.unchanged, failed["error"]["code"]) == (0, 0, "INTEGRITY_ERROR")
    assert failed["error"]["message"].startswith(
        f"the fleet's record of case SEQ-1, {record}, is damaged (its head_seq {written['head_seq'] - 1} is not the "
        f"seq of its head_sha256, event {written['head_seq']} of the case): ")
    assert _files(out) == before
    assert verify_case(tmp_path / "cases" / "c").head_seq == written["head_seq"] + moved_on


def test_a_record_that_is_a_pipe_or_a_link_is_damaged_never_waited_on(tmp_path):
    """A pipe in a record's place made the export and every query wait for a writer for ever."""
    Case.create(tmp_path / "c", "REC-1").close()
    out = tmp_path / "out"
    export_fleet([tmp_path / "c"], out)
    record = out / "_fleet" / "cases" / "case_id=REC-1.json"
    for damage in ("pipe", "link"):
        kept = record.read_bytes()
        record.unlink()
        if damage == "pipe":
            os.mkfifo(record)
        else:
            (tmp_path / "elsewhere.json").write_bytes(kept)
            record.symlink_to(tmp_path / "elsewhere.json")
        why = "not a regular file" if damage == "pipe" else "a symbolic link"
        for args in (("fleet", "sql", str(out), "SELECT 1 FROM events"),
                     ("fleet", "export", str(tmp_path / "c"), "--to", str(out))):  # real processes: a wait is bounded
            done = subprocess.run([sys.executable, "-m", "ledger_cli", *args], capture_output=True, timeout=60)
            assert done.returncode == 1, done.stderr
            said = done.stdout + done.stderr
            assert f"the fleet's record of case REC-1, {record}, is damaged ({why})".encode() in said
        record.unlink()
        record.write_bytes(kept)


def test_a_case_set_aside_mid_publish_keeps_its_id_against_one_differing_only_in_letter_case(tmp_path):
    """A publish cut short leaves the case's record aside (.publishing): its id is still the fleet's, so a
    case whose id differs only in letter case is refused, and the case set aside is published again."""
    Case.create(tmp_path / "a", "Case-A").close()
    Case.create(tmp_path / "b", "case-a").close()
    out = tmp_path / "out"
    export_fleet([tmp_path / "a"], out)
    record = out / "_fleet" / "cases" / "case_id=Case-A.json"
    os.replace(record, record.with_suffix(".publishing"))
    report = export_fleet([tmp_path / "b"], out)
    assert [e["case_id"] for e in report.failed] == ["case-a"] and report.exported == 0
    assert export_fleet([tmp_path / "a"], out).exported == 1 and record.exists()


def test_a_record_naming_a_size_that_is_no_integer_leaves_the_size_unchecked_and_the_case_rewritten(fleet, tmp_path):
    cases, out, ids = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    record = copy / "_fleet" / "cases" / "case_id=BUG-20.json"
    data = json.loads(record.read_text())
    data["files"]["events"]["bytes"] = str(data["files"]["events"]["bytes"])
    record.write_text(json.dumps(data))
    assert fleet_query(copy, "SELECT count(*) FROM events WHERE case_id = 'BUG-20'")[1][0][0] > 0
    assert export_fleet([cases], copy).exported == 1
    assert filecmp_same(out, copy)


def test_a_case_rolled_back_with_its_record_damaged_is_still_refused(tmp_path):
    """The record is what a rolled-back ledger is checked against: damaged, it is no longer passed by."""
    start_case(tmp_path / "c", case_id="ROLL-1").close()
    shutil.copytree(tmp_path / "c", tmp_path / "older")
    with Case.open(tmp_path / "c") as case:
        case.transition("BLOCKED")
    out = tmp_path / "out"
    assert export_fleet([tmp_path / "c"], out).exported == 1
    shutil.rmtree(tmp_path / "c")
    shutil.copytree(tmp_path / "older", tmp_path / "c")  # rolled back to the copy before the transition
    (out / "_fleet" / "cases" / "case_id=ROLL-1.json").write_text("")
    report = export_fleet([tmp_path / "c"], out)
    assert (report.exported, [case["error"]["code"] for case in report.failed]) == (0, ["INTEGRITY_ERROR"])


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("signals", [1, 2])
def test_sigterm_ends_a_fleet_export_as_ctrl_c_does_and_its_workers_write_nothing_after(tmp_path, signals):
    """SIGTERM (timeout, a CI runner) to the command alone: it ends as after Ctrl-C (the message,
    status 143), its workers stop with it, and nothing in OUT changes after it returned (its workers
    went on exporting cases into OUT after it was gone). A script's background job has SIGINT
    ignored: SIGTERM is taken all the same. A second SIGTERM while the workers stop broke off the
    wait for them, and the command hung for good."""
    for n in range(40):
        bench_fleet.make_case(tmp_path / "cases" / f"case-{n:02d}", n)
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "ledger_cli", "fleet", "export", str(tmp_path / "cases"),
                                "--to", str(out), "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 60
    while not list(out.glob("events/case_id=*")) and time.monotonic() < deadline:  # under way
        time.sleep(0.02)
    children = [int(pid) for pid in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()]
    process.send_signal(signal.SIGTERM)
    if signals == 2:
        time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (143, "error: interrupted; nothing half-written remains, run the command again\n")
    left = _files(out)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)
    time.sleep(1.0)
    assert _files(out) == left
    again = export_fleet([tmp_path / "cases"], out)
    assert (again.exported + again.unchanged, again.failed) == (40, [])
    assert not list((out / "_fleet" / "tmp").iterdir())


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_hangup_of_the_whole_process_group_ends_a_fleet_export_as_ctrl_c_does(tmp_path):
    """A terminal closed (or an ssh session dropped) sends SIGHUP to every process of the group: the
    command ended where it stood, without a word, and each worker with it, leaving temporary files.
    It ends as after Ctrl-C (the message, status 129); its workers stop with it and write nothing after."""
    for n in range(40):
        bench_fleet.make_case(tmp_path / "cases" / f"case-{n:02d}", n)
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "ledger_cli", "fleet", "export", str(tmp_path / "cases"),
                                "--to", str(out), "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not list(out.glob("events/case_id=*")) and time.monotonic() < deadline:  # under way
        time.sleep(0.02)
    children = [int(pid) for pid in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()]
    os.killpg(process.pid, signal.SIGHUP)
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (129, "error: interrupted; nothing half-written remains, run the command "
                                              "again\n")
    left = _files(out)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)
    time.sleep(1.0)
    assert _files(out) == left
    assert not list((out / "_fleet" / "tmp").iterdir())
    again = export_fleet([tmp_path / "cases"], out)
    assert (again.exported + again.unchanged, again.failed) == (40, [])


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_ctrl_c_at_the_terminal_while_the_workers_start_prints_no_traceback_of_theirs(tmp_path):
    """A Ctrl-C the terminal sends to the whole group while the workers were still starting printed
    a KeyboardInterrupt traceback from each ("Process SpawnProcess-3: …")."""
    for n in range(4):
        bench_fleet.make_case(tmp_path / "cases" / f"case-{n:02d}", n)
    marker, script = tmp_path / "starting.pid", tmp_path / "first.py"
    script.write_text(  # spawn imports this script in each worker as __mp_main__, before its work
        "import os, sys, time\n"
        "if __name__ == '__mp_main__':\n"
        f"    open({str(marker)!r}, 'a').write(str(os.getpid()) + '\\n')\n"
        "    time.sleep(3)  # still starting when the Ctrl-C comes\n"
        "if __name__ == '__main__':\n"
        "    from ledger import export_fleet\n"
        "    try:\n"
        f"        export_fleet([{str(tmp_path / 'cases')!r}], {str(tmp_path / 'out')!r}, jobs=2)\n"
        "    except KeyboardInterrupt:\n"
        "        print('interrupted', flush=True)\n", encoding="utf-8")
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGINT)  # as the terminal does: the whole group
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert out == "interrupted\n" and "Traceback" not in err, err


@pytest.mark.parametrize("inside", ["events/case_id=typo", "more", "_fleet/tmp/x"])
def test_a_fleet_export_into_a_folder_inside_another_is_refused(tmp_path, inside):
    """An export under OUTER/events/case_id=typo read as 64 more rows of OUTER's events table, under
    the case id "typo", for pyarrow reading OUTER/events as docs/fleet.md shows."""
    Case.create(tmp_path / "c", "IN-1").close()
    outer = tmp_path / "outer"
    export_fleet([tmp_path / "c"], outer)
    with pytest.raises(LedgerError) as caught:
        export_fleet([tmp_path / "c"], outer / inside)
    assert caught.value.code == INVALID_ARGUMENT
    assert caught.value.message == (f"{outer / inside} is inside the fleet export {outer}: readers of its tables "
                                    "would read this one's files as rows of theirs; export to a folder outside it")
    assert not (outer / inside).exists()
    assert pq.read_table(outer / "events").num_rows == 1


def test_a_case_id_whose_partition_name_no_file_name_can_hold_fails_alone_saying_why(tmp_path):
    """A valid id of 128 characters, 63 of them colons, escapes to a name over what a file name holds:
    that case fails with a reason (it failed at its lock file, "File name too long"), the others
    are exported."""
    long_id = "A" + ":b" * 63 + "c"
    assert len(long_id) == 128
    Case.create(tmp_path / "cases" / "long", long_id).close()
    Case.create(tmp_path / "cases" / "short", "A" + ":b" * 38 + "c" * 51).close()  # 38 colons: the most that fit
    report = export_fleet([tmp_path / "cases"], tmp_path / "out")
    assert report.exported == 1
    [failed] = report.failed
    assert failed["path"] == str(tmp_path / "cases" / "long")
    assert failed["error"] == {"code": "INVALID_ARGUMENT", "message": (
        f"case id {long_id} makes a partition folder name of 262 characters (a colon is written %3A), over the 212 "
        "a fleet export's file names allow: this case cannot be exported to a fleet")}


def test_the_machine_refusing_files_or_memory_is_storage_error_never_a_damaged_export(tmp_path, monkeypatch):
    """At the open-file limit DuckDB cannot open a Parquet file: that was INTEGRITY_ERROR, "export the fleet
    again"; DuckDB out of memory as it loaded was a traceback, and as it wrote a table INVALID_ARGUMENT."""
    import ledger.package_tools.fleet as fleet_module
    from ledger.package_tools.fleet_query import _damaged

    opened = _damaged(Exception(f'IO Error: Cannot open file "{tmp_path}/events/x/data.parquet": Too many open '
                                "files\n\nadvice"), tmp_path / "events")
    assert opened.code == "STORAGE_ERROR" and "the export is not at fault" in opened.message
    assert "\n" not in opened.message
    assert _damaged(Exception("Invalid Input Error: not a Parquet file"), tmp_path).code == "INTEGRITY_ERROR"

    def out_of_memory(name):
        raise RuntimeError("Out of Memory Error: Failed to allocate block of 262144 bytes\n\nPossible solutions: …")
    monkeypatch.setattr(fleet_module.importlib, "import_module", out_of_memory)
    with pytest.raises(LedgerError) as caught:
        fleet_module.duckdb_module()
    assert (caught.value.code, caught.value.message) == (
        "STORAGE_ERROR", "DuckDB, which the fleet commands use, had no memory to load: Out of Memory Error: Failed "
        "to allocate block of 262144 bytes")


def test_each_export_has_a_mark_of_its_own_within_one_process_too(tmp_path):
    from ledger.package_tools.fleet_folder import check_out, export_marked, unfinished_exports
    out = check_out(tmp_path / "out", create=True)
    marks, seen = out / "_fleet" / "exports", []

    def nested() -> None:  # one mark per export: a second one of this process waited for the first's lock
        with export_marked(out):
            with export_marked(out):
                seen.append((len(os.listdir(marks)), unfinished_exports(out)))
            seen.append((len(os.listdir(marks)), unfinished_exports(out)))
    thread = threading.Thread(target=nested, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    assert seen == [(2, f"2 exports into {out} are under way: a case not yet reached is missing, or as the export "
                        "before left it"),
                    (1, f"an export into {out} is under way: a case not yet reached is missing, or as the export "
                        "before left it")]
    assert os.listdir(marks) == [] and unfinished_exports(out) is None


def test_a_look_at_a_stopped_exports_mark_meanwhile_neither_keeps_it_nor_reads_as_an_export(tmp_path):
    """A finishing export tested a stopped mark with an exclusive lock: a query looking at it at that
    moment kept it (the next query said 'stopped' though an export had finished), and a query looking
    while the export tested it read that as an export under way."""
    from ledger.package_tools.fleet_folder import check_out, export_marked, unfinished_exports
    out = check_out(tmp_path / "out", create=True)
    marks = out / "_fleet" / "exports"
    marks.mkdir()
    stopped = marks / "export-0.000000000000.1"
    stopped.write_text("")
    with open(stopped, "rb") as looking:
        fcntl.flock(looking.fileno(), fcntl.LOCK_SH)  # another process's look, as the export finishes
        assert unfinished_exports(out).startswith(f"an export into {out} stopped before the end")
        with export_marked(out):
            pass
    assert os.listdir(marks) == [] and unfinished_exports(out) is None


@pytest.mark.parametrize("put", ["link", "file"])
def test_a_link_or_a_file_in_place_of_the_marks_folder_is_neither_read_nor_written(tmp_path, put):
    from ledger.package_tools.fleet_folder import check_out, export_marked, unfinished_exports
    out = check_out(tmp_path / "out", create=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "export-0.000000000000.1").write_text("")
    marks = out / "_fleet" / "exports"
    marks.symlink_to(elsewhere) if put == "link" else marks.write_text("")
    assert unfinished_exports(out) is None
    with pytest.raises(LedgerError) as caught:
        with export_marked(out):
            pass
    assert caught.value.code == "INVALID_ARGUMENT" and str(marks) in caught.value.message
    assert os.listdir(elsewhere) == ["export-0.000000000000.1"]


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_worker_killed_during_a_fleet_export_ends_it_with_a_refusal_not_a_traceback(fleet, tmp_path):
    cases, _, _ = fleet
    out = tmp_path / "out"
    script = tmp_path / "export.py"
    script.write_text(  # the top level runs in every worker too (spawn imports this script)
        "import os, signal\n"
        "from ledger import LedgerError\n"
        "from ledger.package_tools import fleet\n"
        "def killed(args):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "fleet._export_worker = killed\n"
        "if __name__ == '__main__':\n"
        "    try:\n"
        f"        fleet.export_fleet([{str(cases)!r}], {str(out)!r}, jobs=2)\n"
        "    except LedgerError as exc:\n"
        "        print(exc.code, exc.message)\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == ("STORAGE_ERROR a worker process of the export ended before its cases were done (killed, or "
                           "out of memory); the cases exported so far stay, and the next export of these folders does "
                           "the rest\n")
    notes: list[str] = []
    fleet_query(out, "SELECT 1", note=notes.append)
    assert len(notes) == 1 and notes[0].startswith(f"an export into {out} stopped before the end")
