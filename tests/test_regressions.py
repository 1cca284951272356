"""Regression tests for defects found by trying to break the ledger (one test per finding)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ledger import AnalysisConfig, BudgetConfig, Case, LedgerError
from ledger.ground.canonical import canonical_bytes
from ledger.ground.errors import (CONFIG_INVALID, INTEGRITY_ERROR, INVALID_ARGUMENT, INVALID_JSON, LIMIT_REACHED,
                           SOURCE_REF_INVALID, STORAGE_ERROR)
from ledger import export_case, import_tree, verify_case
from ledger.package_tools.journal import apply_journal

from conftest import make_package, run_cli, start_case


def test_years_before_1000_keep_four_digits_and_survive_export_and_import(package, tmp_path):
    with Case.create(package, "OLD-1", at="0999-01-01T00:00:00Z") as case:
        case.open_revision([{"statement": "s"}], at="0999-06-01T00:00:00Z")
        assert case.query("SELECT created_at FROM events ORDER BY seq")[-1]["created_at"] == "0999-06-01T00:00:00.000000Z"
        export_case(case)
    assert import_tree(package, tmp_path / "copy").head_seq == 2


def test_a_nul_in_a_reason_is_refused_so_views_never_truncate_it(budget):
    with pytest.raises(LedgerError) as caught:
        budget.reject("H1", "x\x00y")
    assert caught.value.code == INVALID_ARGUMENT
    assert budget.reject("H1", "x y").state["H1"]["terminal_reason"] == "x y"
    assert budget.snapshot().state["H1"]["status"] == "rejected"


@pytest.mark.parametrize("text", ["action_costs = 5\n", "action_costs = [1, 2]\n", 'action_costs = "ab"\n',
                                  "test_costs = 5\n", "[[action_costs]]\nx = 1\n"])
def test_a_cost_table_that_is_not_a_table_is_config_invalid(tmp_path, text):
    path = tmp_path / "b.toml"
    path.write_text(text)
    with pytest.raises(LedgerError) as caught:
        BudgetConfig.load(path)
    assert caught.value.code == CONFIG_INVALID


def test_concurrent_exports_of_one_package_all_succeed(budget, case):
    for n in range(40):
        budget.reserve("H1", f"a{n}", "source.read_context")
        budget.record_result("H1", f"a{n}", {"n": n})
        budget.settle("H1", f"a{n}", 100, "new")
    errors = []

    def export():
        try:
            with Case.open(case.path) as own:
                export_case(own)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=export) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert verify_case(case.path).exported_files_checked == 124 + 40


def test_a_hard_link_to_the_ledger_is_not_a_source(budget, case):
    os.link(case.path / "ledger.sqlite", case.path / "sources" / "hard")
    budget.reserve("H1", "a1", "source.read_context")
    with pytest.raises(LedgerError) as caught:
        budget.record_result("H1", "a1", {"x": 1}, ["sources/hard"])
    assert caught.value.code == SOURCE_REF_INVALID


def test_evidence_nested_past_the_limit_is_invalid_json(budget):
    budget.reserve("H1", "a1", "source.read_context")
    deep = 0
    for _ in range(65):
        deep = [deep]
    with pytest.raises(LedgerError) as caught:
        budget.record_result("H1", "a1", deep)
    assert caught.value.code == INVALID_JSON
    for _ in range(2):
        deep = deep[0]
    assert budget.record_result("H1", "a1", deep).action["novelty_score"] == 100


@pytest.mark.parametrize("extra", [["--at", "bogus"], ["--actor", "bad actor"]])
def test_a_refused_init_creates_nothing(tmp_path, extra):
    target = tmp_path / "new"
    args = (["--actor", "bad actor"] if extra[0] == "--actor" else []) + ["init", str(target), "--case-id", "A"] + (
        extra if extra[0] == "--at" else [])
    done = run_cli(*args)
    assert done.returncode == 1 and not target.exists()


@pytest.mark.parametrize("line", [
    {"op": "transition", "to": "BLOCKED", "at": None},
    {"op": "open_revision", "hypotheses": [{"statement": "s"}], "units_per_hypothesis": None},
    {"op": "record_result", "hypothesis": "H1", "action_id": "a", "evidence": 1, "source_refs": None},
    {"op": "initialize", "at": "２０２６-01-01T00:00:00Z"},
    5,
])
def test_null_optional_keys_and_unicode_digits_are_invalid_arguments(case, line):
    text = line if isinstance(line, int) else json.dumps(line, ensure_ascii=False)
    [result] = list(apply_journal(case, [text]))
    assert not result.ok and result.error.code == INVALID_ARGUMENT


def test_distinct_evidence_content_is_limited(package):
    case = Case.create(package, "C-1", analysis_config=AnalysisConfig(limits={"evidence_content_bytes_max": 30}))
    try:
        case.open_revision([{"statement": "s"}])
        budget = case.budget()
        budget.initialize()
        budget.reserve("H1", "a1", "source.read_context")
        budget.record_result("H1", "a1", {"k": "0123456789"})  # 20 bytes
        budget.fail("H1", "a1", "x")
        budget.reserve("H1", "a2", "source.read_context")
        with pytest.raises(LedgerError) as caught:
            budget.record_result("H1", "a2", {"k": "abcdefghij"})
        assert caught.value.code == LIMIT_REACHED
        assert budget.record_result("H1", "a2", {"k": "0123456789"}).action["novelty_score"] == 0  # seen: no new bytes
    finally:
        case.close()


def test_opening_a_file_without_a_ledger_leaves_it_untouched(tmp_path):
    (tmp_path / "ledger.sqlite").write_bytes(b"")
    done = run_cli("state", str(tmp_path))
    assert done.returncode == 1 and b"LEDGER_MISSING" in done.stderr
    assert (tmp_path / "ledger.sqlite").read_bytes() == b""
    assert not (tmp_path / "ledger.sqlite-wal").exists()


def test_in_place_import_never_replays_a_stale_wal_onto_the_rebuilt_ledger(budget, case, tmp_path):
    budget.reserve("H1", "a1", "source.read_context")
    export_case(case)
    case.close()
    other = start_case(make_package(tmp_path / "other"), case_id="OTHER")
    other_budget = other.budget()
    other_budget.initialize()
    other_budget.reserve("H1", "z", "source.read_context")
    # copy the other case's files while its WAL still holds everything
    for name in os.listdir(other.path):
        if name.startswith("ledger.sqlite-wal") or name.startswith("ledger.sqlite-shm"):
            shutil.copyfile(other.path / name, case.path / name)
    other.storage.conn.close()
    (case.path / "ledger.sqlite").unlink()
    import_tree(case.path)
    with Case.open(case.path) as restored:
        assert restored.status()["case_id"] == "BUG-1"
    assert any(name.startswith("ledger.sqlite-wal.orphaned-") for name in os.listdir(case.path))


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


def test_a_case_folder_with_a_non_utf8_name_works(tmp_path):
    folder = os.fsdecode(bytes(tmp_path) + b"/case-\xff")
    with Case.create(folder, "BYTES-1") as case:
        case.open_revision([{"statement": "s"}])
        export_case(case)
    assert verify_case(folder).head_seq == 2


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


LONE_SURROGATE = "\ud800"  # no file-system name: os.fsencode refuses it


@pytest.mark.parametrize("call", [
    lambda: Case.create(LONE_SURROGATE, "X-1"),
    lambda: Case.open(LONE_SURROGATE),
    lambda: verify_case(LONE_SURROGATE),
    lambda: import_tree(LONE_SURROGATE),
], ids=["create", "open", "verify", "import"])
def test_a_path_with_a_lone_surrogate_is_an_invalid_argument(call):
    with pytest.raises(LedgerError) as caught:
        call()
    assert caught.value.code == INVALID_ARGUMENT
    assert "cannot name a file" in caught.value.message


def test_a_config_path_with_a_lone_surrogate_is_config_invalid():
    with pytest.raises(LedgerError) as caught:
        BudgetConfig.load(LONE_SURROGATE)
    assert caught.value.code == CONFIG_INVALID


@pytest.mark.parametrize("args", [
    ["budget", "record", "{case}", "H1", "H1", "--evidence", "{{}}", "--evidence-file", LONE_SURROGATE],
    ["--config", LONE_SURROGATE, "state", "{case}"],
    ["--analysis-config", LONE_SURROGATE, "state", "{case}"],
    ["apply", "{case}", LONE_SURROGATE],
    ["verify", LONE_SURROGATE],
], ids=["evidence-file", "config", "analysis-config", "journal", "verify"])
def test_cli_path_arguments_with_a_lone_surrogate_are_error_lines_not_tracebacks(case, args):
    """Found by the CLI fuzzer in CI: click opened '\\ud800' and UnicodeEncodeError escaped."""
    from click.testing import CliRunner

    from ledger_cli.main import main

    before = case.storage.conn.execute("SELECT count(*) FROM events").fetchone()[0]
    result = CliRunner().invoke(main, [a.format(case=case.path) for a in args])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert "error: INVALID_ARGUMENT: " in result.output or "error: CONFIG_INVALID: " in result.output
    assert case.storage.conn.execute("SELECT count(*) FROM events").fetchone()[0] == before


# --- found by the second break-it round ------------------------------------------------------
def test_a_ledger_path_sqlite_cannot_open_is_refused_before_any_folder_is_made(tmp_path):
    deep = tmp_path / ("d" * 200) / ("e" * 200) / ("f" * 120)
    deep.mkdir(parents=True)
    with pytest.raises(LedgerError) as caught:
        Case.create(deep / "case", "LONG-1")
    assert caught.value.code == INVALID_ARGUMENT and "SQLite opens at most" in caught.value.message
    assert not (deep / "case").exists()
    result = run_cli("init", str(deep / "case2"), "--case-id", "LONG-2")
    assert result.returncode == 1 and b"error: INVALID_ARGUMENT: " in result.stderr
    assert b"Traceback" not in result.stderr


def test_a_case_moved_under_a_too_long_path_is_an_invalid_argument_not_tampering(case, tmp_path):
    case.close()
    deep = tmp_path / ("d" * 200) / ("e" * 200) / ("f" * 120)
    shutil.copytree(case.path, deep / "moved")
    for args in (["state", str(deep / "moved")], ["verify", str(deep / "moved")]):
        result = run_cli(*args)
        assert result.returncode == 1 and b"error: INVALID_ARGUMENT: " in result.stderr, result.stderr


def test_sql_keeps_every_column_when_names_repeat(case):
    case.close()
    result = run_cli("sql", str(case.path), "SELECT e1.seq, e2.seq FROM events e1 JOIN events e2 "
                     "ON e2.seq = e1.seq + 1 ORDER BY e1.seq", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert rows[0] == {"seq": 1, "seq_2": 2} and all(r["seq_2"] == r["seq"] + 1 for r in rows)
    csv_out = run_cli("sql", str(case.path), "SELECT 1 AS a, 2 AS a", "--csv")
    assert csv_out.stdout.decode().splitlines() == ["a,a_2", "1,2"]


def test_verify_refuses_a_foreign_trigger_on_a_ledger_table(case):
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    conn.execute("CREATE TRIGGER zz AFTER INSERT ON events WHEN NEW.type = 'budget.rejected' "
                 "BEGIN SELECT RAISE(ABORT, 'busy, try later'); END")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and "is not the ledger's own" in caught.value.message


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


def test_verify_accepts_sqlites_own_statistics_tables(case):
    case.close()
    conn = sqlite3.connect(case.path / "ledger.sqlite")
    conn.execute("ANALYZE")
    conn.commit()
    conn.close()
    assert verify_case(case.path).head_seq > 0


def test_reading_from_a_closed_standard_input_is_an_error_line(case):
    case.close()
    for args in (["apply", str(case.path), "-"], ["budget", "record", str(case.path), "H1", "q1", "--evidence-file", "-"]):
        result = subprocess.run([sys.executable, "-m", "ledger_cli", *args], stdin=subprocess.DEVNULL,
                                capture_output=True, close_fds=True, preexec_fn=lambda: os.close(0))
        assert result.returncode == 1, result.stderr
        assert b"error: INVALID_ARGUMENT: '-' reads standard input, but standard input is closed" in result.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_result_that_cannot_be_printed_is_an_output_error_and_the_operation_stays_committed(budget, case):
    case.close()
    with open("/dev/full", "wb") as full:
        result = subprocess.run([sys.executable, "-m", "ledger_cli", "budget", "reserve", str(case.path), "H1", "q9",
                                 "source.read_context"], stdout=full, stderr=subprocess.PIPE)
    assert result.returncode == 1
    assert result.stderr.decode().startswith("error: OUTPUT_ERROR: cannot print the result (No space left on device)")
    again = run_cli("budget", "reserve", str(case.path), "H1", "q9", "source.read_context", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["reused"] is True


def test_a_closed_case_says_so(case):
    case.close()
    with pytest.raises(LedgerError) as caught:
        case.status()
    assert caught.value.code == INVALID_ARGUMENT and "closed" in caught.value.message


def _read_only_mount(folder):
    """A read-only bind mount of ``folder`` (root only); skips where mounting is not allowed."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    mount = folder.with_name(folder.name + "-ro")
    mount.mkdir()
    for command in (["mount", "--bind", str(folder), str(mount)], ["mount", "-o", "remount,bind,ro", str(mount)]):
        if subprocess.run(command, capture_output=True).returncode != 0:
            subprocess.run(["umount", str(mount)], capture_output=True)
            pytest.skip("cannot make a read-only mount here")
    return mount, lambda: subprocess.run(["umount", str(mount)], check=True)


def test_a_case_on_a_read_only_location_can_be_read_and_verified_but_not_written(budget, case):
    budget.reserve("H1", "q1", "source.read_context")
    export_case(case)
    case.close()
    folder, undo = _read_only_mount(case.path)
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


@pytest.mark.parametrize("path", [b"", "", "a\x00b", 3, None], ids=["empty-bytes", "empty", "nul", "int", "none"])
def test_case_paths_of_the_wrong_kind_are_invalid_arguments(tmp_path, path):
    for call in (lambda: Case.create(path, "X-1"), lambda: Case.open(path), lambda: verify_case(path)):
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == INVALID_ARGUMENT


def test_bytes_paths_work_like_str_paths(tmp_path):
    folder = os.fsencode(tmp_path / "bytes-case")
    with Case.create(folder, "BYTES-2") as case:
        case.open_revision([{"statement": "s"}])
    assert verify_case(folder).head_seq == 2 and Case.open(folder).status()["case_id"] == "BYTES-2"


@pytest.mark.parametrize("config", [True, "budget.toml", {"default_action_cost": 10}], ids=["bool", "str", "dict"])
def test_a_budget_config_of_the_wrong_type_is_refused_at_once(case, config):
    with pytest.raises(LedgerError) as caught:
        case.budget(config)
    assert caught.value.code == INVALID_ARGUMENT


@pytest.mark.parametrize("since", [2**64, -1, "x", 1.0, True])
def test_events_since_must_be_a_safe_non_negative_integer(case, since):
    with pytest.raises(LedgerError) as caught:
        case.events(since)
    assert caught.value.code == INVALID_ARGUMENT


def test_state_with_at_but_no_new_state_is_a_usage_error_and_an_empty_config_is_refused(case):
    case.close()
    assert run_cli("state", str(case.path), "--at", "garbage").returncode == 2
    result = run_cli("--config", "", "budget", "snapshot", str(case.path))
    assert result.returncode == 1 and b"error: CONFIG_INVALID: " in result.stderr
    empty = run_cli("init", "", "--case-id", "X1")
    assert empty.returncode == 1 and b"error: INVALID_ARGUMENT: case path is empty" in empty.stderr


def test_a_reformatted_manifest_is_refused_by_verify_and_import(budget, case, tmp_path):
    export_case(case)
    case.close()
    manifest = case.path / "manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_bytes()), indent=1), encoding="utf-8")
    for call in (lambda: verify_case(case.path), lambda: import_tree(case.path, tmp_path / "copy")):
        with pytest.raises(LedgerError) as caught:
            call()
        assert caught.value.code == INTEGRITY_ERROR and "canonical form" in caught.value.message


def test_import_into_a_folder_inside_the_source_is_refused(budget, case):
    export_case(case)
    case.close()
    with pytest.raises(LedgerError) as caught:
        import_tree(case.path, case.path / "sources" / "deep")
    assert caught.value.code == INVALID_ARGUMENT and not (case.path / "sources" / "deep").exists()


def test_without_ledger_and_manifest_the_message_does_not_suggest_an_import_that_would_fail(budget, case):
    export_case(case)
    case.close()
    (case.path / "ledger.sqlite").unlink()
    (case.path / "manifest.json").unlink()
    with pytest.raises(LedgerError) as caught:
        Case.open(case.path)
    assert caught.value.code == "LEDGER_MISSING" and "ledger import" not in caught.value.message
    assert "move analysis/ aside" in caught.value.message


# --- found by the new-user walkthrough ---------------------------------------------------------
def test_a_demo_whose_reader_goes_away_still_completes_and_a_taken_folder_is_refused(tmp_path):
    target = tmp_path / "demo"
    reader = subprocess.Popen([sys.executable, "-m", "ledger_cli", "demo", str(target)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader.stdout.readline()
    reader.stdout.close()  # like `ledger demo | head -1`
    reader.wait(timeout=300)
    assert b"Traceback" not in reader.stderr.read()
    assert verify_case(target).head_seq == 56
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".demo.building")]
    again = run_cli("demo", str(target))
    assert again.returncode == 1 and b"error: CASE_EXISTS: " in again.stderr


def test_a_named_config_must_be_readable_even_for_reads(case):
    case.close()
    result = run_cli("--config", str(case.path / "missing.toml"), "state", str(case.path))
    assert result.returncode == 1 and b"error: CONFIG_INVALID: " in result.stderr


def test_snapshot_output_says_it_is_a_read(budget, case):
    case.close()
    result = run_cli("budget", "snapshot", str(case.path))
    first = result.stdout.decode().splitlines()[0]
    assert result.returncode == 0 and "history checked" in first and "reused" not in first


@pytest.mark.parametrize("text", ["1e-400", "-2e-324", "0.0001e-330"])
def test_a_number_that_underflows_to_zero_is_invalid_json_not_silently_zero(text):
    from ledger.ground.canonical import parse_json

    with pytest.raises(LedgerError) as caught:
        parse_json(text)
    assert caught.value.code == INVALID_JSON


@pytest.mark.parametrize("text, value", [("0.0", 0.0), ("0e5", 0.0), ("-0.0", 0.0), ("5e-324", 5e-324)])
def test_zeros_and_the_smallest_double_still_parse(text, value):
    from ledger.ground.canonical import parse_json

    assert parse_json(text) == value


def test_writers_through_a_symlinked_ledger_share_the_writer_queue(case, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "ledger.sqlite").symlink_to(case.path / "ledger.sqlite")
    with Case.open(other) as through_link:
        expected = Path(os.path.realpath(case.path / "ledger.sqlite")).with_name("ledger.sqlite-lock")
        assert through_link.storage._lock.path == case.storage._lock.path == expected


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
            assert b"may not write that folder" in done.stderr
    finally:
        folder.chmod(0o755)
        shutil.rmtree(shared)


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


# --- found by the fourth break-it round ------------------------------------------------------
def test_demo_refuses_a_symlink_and_configs_records_the_actor_and_removes_builds_of_killed_demos(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    linked = run_cli("demo", str(tmp_path / "link"))
    assert linked.returncode == 1 and b"error: INVALID_ARGUMENT: " in linked.stderr and linked.stdout == b""
    cheap = tmp_path / "cheap.toml"
    cheap.write_text("default_action_cost = 1\n", encoding="utf-8")
    assert run_cli("--config", str(cheap), "demo", str(tmp_path / "d0")).returncode == 2
    abandoned = tmp_path / ".ledger-demo-building-d1.999999999"  # a pid that cannot exist
    abandoned.mkdir()
    done = run_cli("--actor", "bob", "demo", str(tmp_path / "d1"))
    assert done.returncode == 0, done.stderr
    assert not abandoned.exists()
    with Case.open(tmp_path / "d1") as case:
        actors = {json.loads(row["body"])["actor"] for row in case.events(0, with_body=True)}
    assert actors == {"bob"}


def test_help_into_a_full_stdout_and_a_closed_stdout_are_output_errors(case):
    case.close()
    with open("/dev/full", "wb") as full:
        for args in (["--help"], ["--version"], ["verify", "--help"]):
            done = subprocess.run([sys.executable, "-m", "ledger_cli", *args], stdout=full, stderr=subprocess.PIPE)
            assert done.returncode == 1 and done.stderr.startswith(b"error: OUTPUT_ERROR: "), (args, done.stderr)
    before = case.path.joinpath("ledger.sqlite").read_bytes()
    closed = subprocess.run([sys.executable, "-m", "ledger_cli", "budget", "reserve", str(case.path), "H1", "q1",
                             "source.read_context"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: os.close(1))
    assert closed.returncode == 1 and b"standard output is closed; nothing was run" in closed.stderr
    assert case.path.joinpath("ledger.sqlite").read_bytes() == before


def test_help_is_shown_even_when_a_named_config_is_bad(case):
    done = run_cli("--config", "/no/such.toml", "verify", "--help")
    assert done.returncode == 0 and done.stdout.startswith(b"Usage: ")


@pytest.mark.parametrize("number, code", [(30, STORAGE_ERROR), (13, STORAGE_ERROR), (28, STORAGE_ERROR),
                                          (2, INVALID_ARGUMENT), (20, INVALID_ARGUMENT)])
def test_file_system_refusals_are_storage_errors_and_bad_paths_invalid_arguments(number, code):
    from ledger.ground.paths import os_error

    assert os_error(OSError(number, os.strerror(number), "/x"), "doing it").code == code


def test_journal_line_shape_checks_name_missing_unexpected_and_null_keys():
    """A journal line's shape: missing and unexpected keys are named (sorted); an optional key or
    ``at`` may be left out but not null; a null required key is left to the operation's own check."""
    from ledger.package_tools.journal import parse_line

    def refusal(text: str) -> tuple[str, str]:
        with pytest.raises(LedgerError) as caught:
            parse_line(text)
        return caught.value.code, caught.value.message

    assert refusal('{"op": "settle", "hypothesis": "H1"}') == (
        "INVALID_ARGUMENT", "settle: missing key(s) action_id, reason, semantic_score")
    assert refusal('{"op": "fail", "hypothesis": "H1", "action_id": "a", "reason": "r", "zz": 1, "b": 2}') == (
        "INVALID_ARGUMENT", "fail: unexpected key(s) b, zz")
    assert refusal('{"op": "fail", "hypothesis": "H1", "action_id": "a", "reason": "r", "at": null}') == (
        "INVALID_ARGUMENT", "fail: at may be left out but not null")
    assert refusal('{"op": "record_result", "hypothesis": "H1", "action_id": "a", "evidence": 1, '
                   '"source_refs": null, "at": null}') == (
        "INVALID_ARGUMENT", "record_result: at, source_refs may be left out but not null")
    line = parse_line('{"op": "fail", "hypothesis": null, "action_id": "a", "reason": "r"}')
    assert line["hypothesis"] is None  # the operation refuses it: INVALID_ID
