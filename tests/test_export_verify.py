"""docs/files.md: export, import and verify, including tampering with triggers dropped."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from ledger import Case, LedgerError
from ledger.canonical import canonical_bytes, sha256_hex
from ledger.errors import CASE_EXISTS, INTEGRITY_ERROR, INVALID_ARGUMENT, LEDGER_MISSING
from ledger import export_case, import_tree, verify_case

from conftest import logical_dump, make_package, start_case


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
    from ledger._sql import migrations

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


def test_verify_passes_on_an_honest_case_and_names_the_head(exported):
    report = verify_case(exported)
    assert report.events == report.head_seq == 13 and report.contents == 2
    assert report.manifest_checked is True and report.exported_files_checked == 15


def test_export_import_export_is_byte_identical(exported, tmp_path):
    before = tree(exported)
    report = import_tree(exported, tmp_path / "copy")
    assert report.head_seq == 13
    assert tree(tmp_path / "copy") == before

    def history(path):
        return [t for t in logical_dump(path / "ledger.sqlite") if t[0] != "schema_migrations"]

    assert history(tmp_path / "copy") == history(exported)


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


@pytest.mark.parametrize("table, statement, seq", [
    ("reservations", "UPDATE reservations SET cost_units = 1 WHERE action_id = 'a1'", 5),
    ("closings", "UPDATE closings SET reward_units = 2 WHERE action_id = 'a1'", 7),
    ("results", "UPDATE results SET novelty_score = 0 WHERE action_id = 'a2'", 9),
    ("terminations", "DELETE FROM terminations", 13),
    ("accounts", "UPDATE accounts SET initial_units = 1000 WHERE hypothesis_id = 'H2'", 4),
    ("lifecycle", "UPDATE lifecycle SET state = 'CLOSED' WHERE seq = 3", 3),
    ("events", "UPDATE events SET type = 'budget.settled' WHERE seq = 5", 5),
])
def test_an_edited_helper_row_is_caught_at_its_seq(exported, table, statement, seq):
    conn = unguarded(exported)
    conn.execute(statement)
    conn.commit()
    restore_triggers(conn)
    assert_verify_fails_at(exported, seq)


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


def test_verify_does_not_write_into_the_package(exported):
    before = tree(exported)
    dump = logical_dump(exported / "ledger.sqlite")
    verify_case(exported)
    assert tree(exported) == before and logical_dump(exported / "ledger.sqlite") == dump


def test_export_case_takes_a_case_folder_path_like_verify_and_import(tmp_path):
    path = make_package(tmp_path / "case")
    start_case(path).close()
    report = export_case(str(path))
    assert report.files_written > 0 and verify_case(path).export_state == "current"
    assert export_case(path).files_written == 0
    with pytest.raises(LedgerError) as refused:
        export_case(tmp_path / "nothing-here")
    assert refused.value.code == LEDGER_MISSING
