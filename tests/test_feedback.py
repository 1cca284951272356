"""Asynchronous tests and feedback (docs/evidence.md): request_test, submit/confirm/store feedback, the
budget link, BLOCKED preserving balances, hash checks, limits, journal, CLI and round trip."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import AnalysisConfig, BudgetConfig, Case, LedgerError, export_case, import_tree, verify_case
from ledger.ground.errors import (CASE_STATE, FEEDBACK_NOT_CONFIRMED, INTEGRITY_ERROR, INVALID_ARGUMENT,
    INVALID_ID, LIMIT_REACHED, NO_RESERVATION, OPERATION_CONFLICT)
from ledger.storage.sqlfiles import shipped_schema
from ledger.package_tools.journal import apply_journal
from ledger_cli.main import main as cli_main
from conftest import EXAMPLE_BUDGET, start_case
PASSED = {"status": "passed", "details": {"log": "2 tests passed"}}
LOG = "collected 2 items\n2 passed\n"
PNG = bytes(range(256))


@pytest.fixture
def case(package: Path):
    opened = start_case(package, hypotheses=2)
    opened.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    yield opened
    opened.close()


def ledger_rows(case: Case) -> list:
    return [case.query(f"SELECT * FROM {table}") for table in (
        "events", "contents", "evidence_records", "reservations", "test_requests", "feedback_drafts",
        "feedback_confirmations")]


def attachments() -> dict:
    return {"pytest.log": LOG, "screen.png": {"base64": base64.b64encode(PNG).decode()}}


def submitted_and_blocked(case: Case):
    budget = case.budget()
    budget.request_test("H1", "t1", "human", "test-1")
    case.transition("BLOCKED")
    return case.evidence().submit_feedback("test-1", PASSED, attachments())


# --- request_test -----------------------------------------------------------------------------
def test_request_test_is_priced_by_test_costs_and_blocked_keeps_every_balance(case):
    policy = BudgetConfig.load(EXAMPLE_BUDGET).policy["test_costs"]
    human = case.budget().request_test("H1", "t1", "human", "test-1")
    automated = case.budget().request_test("H2", "t2", "automated", "test-2")
    assert human.action["action"] == "test.human" and human.action["cost_units"] == policy["human"]
    assert automated.action["cost_units"] == policy["automated"]
    assert human.state["H1"]["pending_action_id"] == "t1"
    balances, actions = case.balances(), case.actions()
    case.transition("BLOCKED")
    assert case.balances() == balances and case.actions() == actions
    assert [a["status"] for a in case.actions()] == ["reserved", "reserved"]
    with pytest.raises(LedgerError) as refused:  # no budget mutation while blocked
        case.budget().reserve("H1", "q9", "source.read_context")
    assert refused.value.code == CASE_STATE


def test_request_test_refusals(case):
    budget = case.budget()
    with pytest.raises(LedgerError) as bad_kind:
        budget.request_test("H1", "t1", "robot", "test-1")
    assert bad_kind.value.code == INVALID_ARGUMENT
    budget.request_test("H1", "t1", "human", "test-1")
    assert budget.request_test("H1", "t1", "human", "test-1").reused is True
    for call in (lambda: budget.request_test("H2", "t2", "human", "test-1"),  # operation id used
                 lambda: budget.reserve("H1", "t1", "source.read_context")):  # action id used by the test
        with pytest.raises(LedgerError) as conflict:
            call()
        assert conflict.value.code == OPERATION_CONFLICT


# --- feedback: drafts, confirmation, storing --------------------------------------------------
def test_drafts_are_not_evidence_and_confirmation_resumes_a_blocked_case(case):
    draft = submitted_and_blocked(case)
    assert draft.feedback_id == "F000001" and draft.confirmed is False and draft.state == "BLOCKED"
    assert case.query("SELECT COUNT(*) AS n FROM evidence") == [{"n": 0}]
    again = case.evidence().submit_feedback("test-1", PASSED, attachments())
    assert again.reused is True and again.feedback_id == "F000001" and again.seq == draft.seq
    other = case.evidence().submit_feedback("test-1", {"status": "failed", "details": "flaky"})
    assert other.feedback_id == "F000002"
    with pytest.raises(LedgerError) as not_confirmed:
        case.evidence().store_feedback("test-1", "F000001")
    assert not_confirmed.value.code == CASE_STATE  # storing evidence waits for the case to resume
    confirmed = case.evidence().confirm_feedback("F000001")
    assert confirmed.confirmed is True and confirmed.state == "INVESTIGATING_HYPOTHESES"
    assert case.status()["state"] == "INVESTIGATING_HYPOTHESES"
    with pytest.raises(LedgerError) as draft_only:
        case.evidence().store_feedback("test-1", "F000002")
    assert draft_only.value.code == FEEDBACK_NOT_CONFIRMED


def test_settling_a_test_before_its_result_names_the_way_its_result_comes(case):
    """A requested test takes its result only through its stored feedback: RESULT_MISSING says so
    (record_result, the way of a plain action, is refused on it), before and after the store."""
    submitted_and_blocked(case)
    case.evidence().confirm_feedback("F000001")
    budget = case.budget()
    for step in ("before the store", "after the store"):
        with pytest.raises(LedgerError) as early:
            budget.settle("H1", "t1", 90, "too early")
        assert (early.value.code, early.value.message) == ("RESULT_MISSING", (
            "H1/t1 has no recorded result to assess; store the confirmed feedback of its test (operation "
            "test-1), then record_evidence of that record first")), step
        case.evidence().store_feedback("test-1", "F000001")
    budget.request_test("H2", "t2", "automated", "test-2")
    with pytest.raises(LedgerError, match="its test \\(operation test-2\\)"):
        budget.settle("H2", "t2", 90, "too early")
    budget.record_evidence("H1", "t1", "E000001")
    assert budget.settle("H1", "t1", 90, "reproduced").action["status"] == "settled"


def test_stored_feedback_is_one_atom_and_feeds_the_budget(case):
    submitted_and_blocked(case)
    case.evidence().confirm_feedback("F000001")
    stored = case.evidence().store_feedback("test-1", "F000001")
    record = stored.records[0]
    assert record["record_id"] == "E000001" and record["novelty_score"] == 100
    assert (record["hypothesis_id"], record["action_id"], record["operation_id"]) == ("H1", "t1", "test-1")
    body = json.loads(case.query("SELECT body FROM evidence_records")[0]["body"])
    assert body["origin"]["kind"] == "feedback" and body["origin"]["feedback_id"] == "F000001"
    assert body["atoms_returned"] == 1
    assert case.evidence().store_feedback("test-1", "F000001").reused is True
    budget = case.budget()
    assert budget.record_evidence("H1", "t1", "E000001").action["novelty_score"] == 100
    cost = case.actions()[0]["cost_units"]
    settled = budget.settle("H1", "t1", 100, "the test reproduced the bug")
    assert settled.action["reward_units"] == min(cost * 8000 * 100 // 1_000_000, cost - 1)


def test_a_requested_test_gets_its_result_only_through_its_confirmed_feedback(case):
    """record_result on a requested test's action, with any payload, is NO_RESERVATION and earns no
    refund; a record of another action is refused too; only the stored confirmed feedback feeds it."""
    budget = case.budget()
    budget.request_test("H1", "t1", "human", "test-1")
    before = ledger_rows(case)
    for payload in ({"status": "passed"}, {}, None, "ok"):
        with pytest.raises(LedgerError) as refused:
            budget.record_result("H1", "t1", payload)
        assert refused.value.code == NO_RESERVATION and "confirmed feedback" in refused.value.message
    assert ledger_rows(case) == before
    budget.reserve("H2", "q2", "source.read_context")
    case.evidence().query("i2", {"actions": [{"operation_id": "op-2", "hypothesis_id": "H2", "action_id": "q2",
                                              "tool": "source.read_context",
                                              "args": {"path": "sources/app.py", "start_line": 1, "end_line": 1}}]},
                          True)
    with pytest.raises(LedgerError) as other_record:
        budget.record_evidence("H1", "t1", "E000001")
    assert other_record.value.code == NO_RESERVATION
    draft = case.evidence().submit_feedback("test-1", PASSED)
    case.evidence().confirm_feedback(draft.feedback_id)
    case.evidence().store_feedback("test-1", draft.feedback_id)
    assert budget.record_evidence("H1", "t1", "E000002").action["status"] == "awaiting_assessment"
    with pytest.raises(LedgerError) as second:
        budget.record_result("H1", "t1", {"status": "passed"})
    assert second.value.code == NO_RESERVATION
    assert verify_case(case.path).events == case.status()["package_generation"]


def test_a_test_action_reserved_directly_still_takes_a_plain_result(case):
    """Only a test requested with request_test is bound to its feedback; an action merely named
    test.automated and reserved with reserve keeps the plain record_result path."""
    budget = case.budget()
    budget.reserve("H1", "s1", "test.automated")
    assert budget.record_result("H1", "s1", {"passed": 3}).action["status"] == "awaiting_assessment"


def test_unable_to_test_scores_0_and_identical_feedback_is_a_duplicate(case):
    budget = case.budget()
    budget.request_test("H1", "t1", "automated", "test-1")
    budget.request_test("H2", "t2", "automated", "test-2")
    unable = case.evidence().submit_feedback("test-1", {"status": "unable_to_test", "details": "no device"})
    same = case.evidence().submit_feedback("test-2", {"status": "unable_to_test", "details": "no device"})
    for draft, op in ((unable, "test-1"), (same, "test-2")):
        case.evidence().confirm_feedback(draft.feedback_id)
    first = case.evidence().store_feedback("test-1", unable.feedback_id).records[0]
    second = case.evidence().store_feedback("test-2", same.feedback_id).records[0]
    assert first["novelty_score"] == 0 and second["novelty_score"] == 0
    assert second["duplicate_of"] == "E000001"


def test_feedback_bound_to_another_operation_or_no_longer_pending_is_no_reservation(case):
    budget = case.budget()
    budget.request_test("H1", "t1", "human", "test-1")
    budget.request_test("H2", "t2", "human", "test-2")
    with pytest.raises(LedgerError) as unknown_test:
        case.evidence().submit_feedback("test-9", PASSED)
    assert unknown_test.value.code == NO_RESERVATION
    draft = case.evidence().submit_feedback("test-1", PASSED)
    case.evidence().confirm_feedback(draft.feedback_id)
    with pytest.raises(LedgerError) as other:
        case.evidence().store_feedback("test-2", draft.feedback_id)
    assert other.value.code == NO_RESERVATION
    budget.fail("H1", "t1", "the tester gave up")
    before = ledger_rows(case)
    with pytest.raises(LedgerError) as closed:
        case.evidence().store_feedback("test-1", draft.feedback_id)
    assert closed.value.code == NO_RESERVATION and ledger_rows(case) == before
    for bad, code in (("F1", INVALID_ID), ("F000009", INVALID_ARGUMENT)):
        with pytest.raises(LedgerError) as refused:
            case.evidence().confirm_feedback(bad)
        assert refused.value.code == code


def _unguarded(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path / "ledger.sqlite")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    return conn


def _restore(conn: sqlite3.Connection) -> None:
    for sql in shipped_schema().values():  # each guard as the newest migration left it (010 makes one again)
        if sql.startswith("CREATE TRIGGER"):
            conn.execute(sql)
    conn.commit()
    conn.close()


def test_tampered_attachment_bytes_are_an_integrity_error_and_nothing_is_stored(case):
    submitted_and_blocked(case)
    case.evidence().confirm_feedback("F000001")
    path = case.path
    case.close()
    sha = hashlib.sha256(json.dumps({"name": "pytest.log", "text": LOG}, separators=(",", ":"),
                                    sort_keys=True).encode()).hexdigest()
    conn = _unguarded(path)
    assert conn.execute("UPDATE contents SET body = replace(body, '2 passed', '9 passed') WHERE sha256 = ?",
                        (sha,)).rowcount == 1
    conn.commit()
    conn.close()
    with Case.open(path) as reopened:
        with pytest.raises(LedgerError) as caught:
            reopened.evidence().store_feedback("test-1", "F000001")
        assert caught.value.code == INTEGRITY_ERROR and caught.value.details["attachment"] == "pytest.log"
        assert reopened.query("SELECT COUNT(*) AS n FROM evidence_records") == [{"n": 0}]


@pytest.mark.parametrize("name, message", [
    ("a" * 129, f"attachment name '{'a' * 39}…' has 129 characters; at most 128 are allowed"),
    (1, "attachment names must be strings; got the integer 1"),
    ("-x", "attachment name '-x' must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")])
def test_an_attachment_name_outside_the_rule_is_refused_saying_what_is_wrong_with_it(case, name, message):
    """A name cut short in a message ends in …, so it is never taken for a name the rule allows."""
    case.budget().request_test("H1", "t1", "human", "test-1")
    before = ledger_rows(case)
    with pytest.raises(LedgerError) as refused:
        case.evidence().submit_feedback("test-1", PASSED, {name: "x"})
    assert (refused.value.code, refused.value.message) == (INVALID_ARGUMENT, message)
    assert ledger_rows(case) == before
    assert case.evidence().submit_feedback("test-1", PASSED, {"a" * 128: "x"}).feedback_id == "F000001"


def test_an_attachment_in_base64_other_than_its_bytes_standard_form_is_refused_and_nothing_written(case):
    """"QR==" decodes to the byte "A" as "QQ==" does (its unused bits are set): accepted, the same bytes
    were stored as another content row. Only the standard form of the bytes is taken."""
    case.budget().request_test("H1", "t1", "human", "test-1")
    before = ledger_rows(case)
    with pytest.raises(LedgerError) as refused:
        case.evidence().submit_feedback("test-1", PASSED, {"a.bin": {"base64": "QR=="}})
    assert refused.value.code == INVALID_ARGUMENT and refused.value.details["attachment"] == "a.bin"
    assert refused.value.message == ("attachment 'a.bin': its base64 is not the standard form of its bytes "
                                     "(unused bits set); give QQ==")
    assert ledger_rows(case) == before
    draft = case.evidence().submit_feedback("test-1", PASSED, {"a.bin": {"base64": "QQ=="}})
    assert draft.feedback_id == "F000001"


def test_an_older_ledgers_attachment_in_another_base64_spelling_still_verifies_and_imports(case, tmp_path,
                                                                                             monkeypatch):
    """An older case-ledger took "QR==" for the byte "A": its history verifies and imports as it was (the
    standard form is asked for only when a draft is submitted, never on replay)."""
    case.budget().request_test("H1", "t1", "human", "test-1")
    case.transition("BLOCKED")
    from ledger.rules import feedback as feedback_rules

    with monkeypatch.context() as older:  # the rule as an older case-ledger ran it
        older.setattr(feedback_rules, "check_standard_base64", lambda attachments: None)
        draft = case.evidence().submit_feedback("test-1", PASSED, {"a.bin": {"base64": "QR=="}})
    case.evidence().confirm_feedback(draft.feedback_id)
    case.evidence().store_feedback("test-1", draft.feedback_id)
    export_case(case)
    assert verify_case(case.path).strict_failure() is None
    import_tree(case.path, tmp_path / "copy")
    with Case.open(tmp_path / "copy") as copy:
        assert copy.query("SELECT COUNT(*) AS n FROM evidence_records") == [{"n": 1}]


def test_attachment_limit_refuses_with_limit_reached_and_writes_nothing(package):
    start_case(package).close()
    config = AnalysisConfig(limits={**AnalysisConfig().limits, "evidence_artifact_bytes_max": 100})
    with Case.open(package, analysis_config=config) as opened:
        opened.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
        opened.budget().request_test("H1", "t1", "human", "test-1")
        before = ledger_rows(opened)
        with pytest.raises(LedgerError) as refused:
            opened.evidence().submit_feedback("test-1", PASSED, {"big.log": "x" * 200})
        assert refused.value.code == LIMIT_REACHED
        assert refused.value.details["limit"] == "evidence_artifact_bytes_max"
        assert ledger_rows(opened) == before


def test_the_content_total_does_not_depend_on_the_order_an_events_content_rows_are_stored_in(case):
    """The running total of distinct content bytes is read from the newest event's rows: rows stored in
    another order (a dump and reload, a VACUUM renumbering them) gave a smaller total, so the content
    limit let more in and the next content row carried a total verify then refused as not derived."""
    submitted_and_blocked(case)
    rows = [(row["seq"], row["size_bytes"], row["cumulative_bytes"])
            for row in case.query("SELECT seq, size_bytes, cumulative_bytes FROM contents ORDER BY rowid")]
    newest = [row for row in rows if row[0] == rows[-1][0]]
    assert len(newest) >= 2 and case.storage.one("content_bytes_total")[0] == sum(row[1] for row in rows)
    _store_in_reverse_order(case.path / "ledger.sqlite", rows[-1][0])
    stored = case.query(f"SELECT cumulative_bytes FROM contents WHERE seq = {rows[-1][0]} ORDER BY rowid")
    assert [row["cumulative_bytes"] for row in stored] == [row[2] for row in reversed(newest)]
    assert case.storage.one("content_bytes_total")[0] == sum(row[1] for row in rows)
    case.evidence().confirm_feedback("F000001")
    case.evidence().store_feedback("test-1", "F000001")
    case.budget().record_evidence("H1", "t1", "E000001")
    assert verify_case(case.path).head_sha256 == case.status()["head_sha256"]


def _store_in_reverse_order(ledger: Path, seq: int) -> None:
    """The content rows of event ``seq`` deleted and inserted again last to first (the table's
    append-only triggers set aside for it): the same rows, in another storage order."""
    conn = sqlite3.connect(ledger, isolation_level=None)
    try:
        triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'contents'"
                                ).fetchall()
        conn.execute("BEGIN IMMEDIATE")
        for name, _ in triggers:
            conn.execute(f'DROP TRIGGER "{name}"')
        rows = conn.execute("SELECT * FROM contents WHERE seq = ? ORDER BY rowid", (seq,)).fetchall()
        conn.execute("DELETE FROM contents WHERE seq = ?", (seq,))
        conn.executemany(f"INSERT INTO contents VALUES ({', '.join('?' * len(rows[0]))})", reversed(rows))
        for _, sql in triggers:
            conn.execute(sql)
        conn.execute("COMMIT")
    finally:
        conn.close()


# --- round trip, journal, command line ----------------------------------------------------------
def test_export_import_export_and_verify_with_feedback(case, tmp_path):
    submitted_and_blocked(case)
    case.evidence().confirm_feedback("F000001")
    case.evidence().store_feedback("test-1", "F000001")
    case.budget().record_evidence("H1", "t1", "E000001")
    export_case(case)
    report = verify_case(case.path)
    copy = import_tree(case.path, tmp_path / "copy")
    assert copy.head_seq == report.head_seq

    def files(root: Path) -> dict:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
                if p.is_file() and not p.name.startswith("ledger.sqlite")}
    assert files(case.path) == files(tmp_path / "copy")
    folder = hashlib.sha256(b"test-1").hexdigest()[:32]
    assert (case.path / f"analysis/evidence/0001/{folder}/E000001.json").is_file()
    assert (case.path / f"analysis/evidence/0001/{folder}/index.json").is_file()
    kinds = [json.loads(p.read_bytes())["type"] for p in sorted((case.path / "analysis/case/events").iterdir())]
    assert kinds[-3:] == ["feedback.submitted", "feedback.confirmed", "case.transitioned"]


def test_journal_forms_of_the_feedback_operations(case):
    lines = [{"op": "request_test", "hypothesis": "H1", "action_id": "t1", "kind": "human", "operation_id": "test-1"},
             {"op": "transition", "to": "BLOCKED"},
             {"op": "submit_feedback", "operation_id": "test-1", "reply": PASSED, "attachments": attachments()},
             {"op": "confirm_feedback", "feedback_id": "F000001"},
             {"op": "store_feedback", "operation_id": "test-1", "feedback_id": "F000001"},
             {"op": "record_evidence", "hypothesis": "H1", "action_id": "t1", "record_id": "E000001"}]
    results = [r.to_dict() for r in apply_journal(case, [json.dumps(line) for line in lines])]
    assert all(r["ok"] for r in results), results
    assert results[2]["result"]["feedback_id"] == "F000001"
    assert results[3]["result"]["state"] == "INVESTIGATING_HYPOTHESES"
    assert results[4]["result"]["records"][0]["record_id"] == "E000001"


def test_cli_feedback_commands(case, tmp_path):
    from click.testing import CliRunner

    path = str(case.path)
    case.close()
    runner = CliRunner()
    requested = runner.invoke(cli_main, ["evidence", "request-test", path, "H1", "t1", "human", "test-1", "--json"])
    assert requested.exit_code == 0, requested.output
    assert json.loads(requested.output)["action"]["action"] == "test.human"
    reply = tmp_path / "reply.json"
    reply.write_text(json.dumps(PASSED))
    log = tmp_path / "pytest.log"
    log.write_text(LOG)
    submitted = runner.invoke(cli_main, ["evidence", "feedback", "submit", path, "test-1", str(reply),
                                         "--attach", str(log), "--json"])
    assert submitted.exit_code == 0, submitted.output
    assert json.loads(submitted.output)["feedback_id"] == "F000001"
    early = runner.invoke(cli_main, ["evidence", "feedback", "store", path, "test-1", "F000001"])
    assert early.exit_code == 1 and "error: FEEDBACK_NOT_CONFIRMED" in early.output
    confirmed = runner.invoke(cli_main, ["evidence", "feedback", "confirm", path, "F000001", "--json"])
    assert confirmed.exit_code == 0 and json.loads(confirmed.output)["confirmed"] is True
    stored = runner.invoke(cli_main, ["evidence", "feedback", "store", path, "test-1", "--json"])  # its draft
    assert stored.exit_code == 0, stored.output
    assert json.loads(stored.output)["records"][0]["novelty_score"] == 100
    again = runner.invoke(cli_main, ["evidence", "feedback", "store", path, "test-1", "F000001", "--json"])
    assert again.exit_code == 0 and json.loads(again.output)["reused"] is True
    first = json.loads(stored.output)  # every write's --json names its event as event_ref (docs/cli.md)
    assert json.loads(again.output)["event_ref"] == first["event_ref"] == _event_ref(path, first["seq"])
    with Case.open(path) as reopened:
        draft = json.loads(reopened.query("SELECT body FROM events WHERE type = 'feedback.submitted'")[0]["body"])
    assert draft["feedback"]["attachments"][0]["sha256"] == hashlib.sha256(LOG.encode()).hexdigest()


def _event_ref(path: str, seq: int) -> str:
    with Case.open(path) as case:
        return case.query("SELECT path FROM evidence_files WHERE seq = ?", [seq])[0]["path"]


def test_two_attachments_with_one_name_are_refused_naming_both(case, tmp_path):
    """``--attach run1/log.txt --attach run2/log.txt``: both would be kept under log.txt, so the command
    refuses naming both files and writes nothing; distinct names keep every file."""
    from click.testing import CliRunner

    case.budget().request_test("H1", "t1", "human", "test-1")
    path = str(case.path)
    case.close()
    reply = tmp_path / "reply.json"
    reply.write_text(json.dumps({"status": "failed", "details": "run 2 failed"}))
    files = []
    for run, text in (("run1", "ok\n"), ("run2", "FAILED test_add\n"), ("run3", "ok\n")):
        (tmp_path / run).mkdir()
        files.append(tmp_path / run / "log.txt")
        files[-1].write_text(text)
    (tmp_path / "run2" / "LOG.txt").write_text("other case\n")
    runner = CliRunner()
    with Case.open(path) as opened:
        before = ledger_rows(opened)
    for given in ([files[0], files[1]], [files[0], files[0]], [files[1], tmp_path / "run2" / "LOG.txt", files[2]]):
        args = [a for f in given for a in ("--attach", str(f))]
        refused = runner.invoke(cli_main, ["evidence", "feedback", "submit", path, "test-1", str(reply), *args])
        assert refused.exit_code == 1, refused.output
        assert "error: INVALID_ARGUMENT" in refused.output and "share the name log.txt" in refused.output
        assert all(str(f) in refused.output for f in given if f.name == "log.txt")
    with Case.open(path) as opened:
        assert ledger_rows(opened) == before
    renamed = tmp_path / "run2" / "log-run2.txt"
    renamed.write_text(files[1].read_text())
    kept = runner.invoke(cli_main, ["evidence", "feedback", "submit", path, "test-1", str(reply), "--attach",
                                    str(files[0]), "--attach", str(renamed), "--attach",
                                    str(tmp_path / "run2" / "LOG.txt"), "--json"])
    assert kept.exit_code == 0, kept.output
    with Case.open(path) as opened:
        draft = json.loads(opened.query("SELECT body FROM events WHERE type = 'feedback.submitted'")[0]["body"])
    assert sorted(a["name"] for a in draft["feedback"]["attachments"]) == ["LOG.txt", "log-run2.txt", "log.txt"]


@pytest.mark.parametrize("tamper", [
    "UPDATE contents SET body = replace(body, '2 passed', '9 passed') WHERE body LIKE '%pytest.log%'",
    "DELETE FROM feedback_confirmations",
    "UPDATE test_requests SET kind = 'automated'",
    "DELETE FROM feedback_drafts WHERE feedback_id = 'F000001'",
])
def test_tampered_feedback_rows_are_caught_by_verify(case, tamper):
    submitted_and_blocked(case)
    case.evidence().confirm_feedback("F000001")
    case.evidence().store_feedback("test-1", "F000001")
    path = case.path
    case.close()
    assert verify_case(path).events > 0
    conn = _unguarded(path)
    assert conn.execute(tamper).rowcount >= 1
    _restore(conn)  # the guards are back: only the edited rows differ from the replay
    with pytest.raises(LedgerError) as caught:
        verify_case(path)
    assert caught.value.code == INTEGRITY_ERROR and "schema object" not in caught.value.message


def test_a_tool_batch_cannot_reuse_a_test_operation_id(case):
    case.budget().request_test("H1", "t1", "human", "test-1")
    case.budget().reserve("H2", "q1", "source.read_context")
    action = {"operation_id": "test-1", "hypothesis_id": "H2", "action_id": "q1", "tool": "source.read_context",
              "args": {"path": "sources/app.py", "start_line": 1, "end_line": 1}}
    before = ledger_rows(case)
    with pytest.raises(LedgerError) as conflict:
        case.evidence().query("i1", {"actions": [action]}, True)
    assert conflict.value.code == OPERATION_CONFLICT and ledger_rows(case) == before


# --- finding 7: feedback for a test whose reservation was failed --------------------------------------
def test_feedback_for_a_failed_test_is_no_reservation_at_submit_and_confirm(case):
    budget = case.budget()
    budget.request_test("H1", "t1", "human", "test-1")
    budget.request_test("H2", "t2", "human", "test-2")
    draft = case.evidence().submit_feedback("test-2", {"status": "passed", "details": "ok"})
    budget.fail("H1", "t1", "the tester gave up")
    budget.fail("H2", "t2", "the tester gave up")
    with pytest.raises(LedgerError) as submitted:
        case.evidence().submit_feedback("test-1", {"status": "passed", "details": "ok"})
    assert submitted.value.code == "NO_RESERVATION" and "no longer pending" in submitted.value.message
    case.transition("BLOCKED")
    with pytest.raises(LedgerError) as confirmed:
        case.evidence().confirm_feedback(draft.feedback_id)
    assert confirmed.value.code == "NO_RESERVATION"
    assert case.query("SELECT COUNT(*) AS n FROM feedback_drafts")[0]["n"] == 1
    assert case.query("SELECT COUNT(*) AS n FROM feedback_confirmations")[0]["n"] == 0
    assert case.status()["state"] == "BLOCKED"


# --- finding 9: bounded reads in the command line ---------------------------------------------------------
def test_cli_feedback_submit_refuses_devices_and_oversized_attachments_without_reading_them(case, tmp_path):
    case.budget().request_test("H1", "t1", "human", "test-1")
    reply = tmp_path / "reply.json"
    reply.write_text('{"status": "passed", "details": "ok"}')
    big = tmp_path / "big.log"
    with open(big, "wb") as handle:
        handle.truncate(5 * 1024 * 1024)  # sparse: over the 4 MiB artifact limit
    runner = CliRunner()
    path = str(case.path)
    device = runner.invoke(cli_main, ["evidence", "feedback", "submit", path, "test-1", str(reply),
                                      "--attach", "/dev/zero"])
    assert device.exit_code == 1 and "error: INVALID_ARGUMENT" in device.output
    assert "not a regular file" in device.output
    oversized = runner.invoke(cli_main, ["evidence", "feedback", "submit", path, "test-1", str(reply),
                                         "--attach", str(big)])
    assert oversized.exit_code == 1 and "error: LIMIT_REACHED" in oversized.output
    assert oversized.output == (f"error: LIMIT_REACHED: attachment {big} is larger than evidence_artifact_bytes_max "
                                f"= {4 * 1024 * 1024} bytes (to allow more, raise [limits] evidence_artifact_bytes_max "
                                "in the analysis config: --analysis-config FILE; "
                                "in Python, analysis_config= of Case.open)\n")
    endless = runner.invoke(cli_main, ["evidence", "feedback", "submit", path, "test-1", "/dev/zero"])
    # a device as the reply is refused as a usage error before anything is read
    assert endless.exit_code == 2 and "is not a regular file" in endless.output
    assert case.query("SELECT COUNT(*) AS n FROM feedback_drafts")[0]["n"] == 0
def test_store_feedback_without_a_feedback_id_publishes_the_operations_confirmed_draft(case):
    budget = case.budget()
    budget.request_test("H1", "t1", "automated", "test-1")
    first = budget.submit_feedback("test-1", {"status": "failed", "details": "flaky"})
    second = budget.submit_feedback("test-1", PASSED)
    budget.confirm_feedback(second.feedback_id)
    stored = budget.store_feedback("test-1")
    assert first.feedback_id != second.feedback_id
    record = case.query("SELECT * FROM evidence_records")[0]
    assert stored.records[0]["record_id"] == record["record_id"] and stored.reused is False
    assert budget.store_feedback("test-1").reused is True
    assert budget.store_feedback("test-1", second.feedback_id).reused is True


def test_store_feedback_without_a_feedback_id_refuses_in_the_documented_order(case):
    """The case's state comes before an unknown test or a missing draft, with a feedback id or without."""
    budget = case.budget()
    budget.request_test("H1", "t1", "human", "test-1")
    case.transition("BLOCKED")
    events = case.status()["package_generation"]
    for call in (lambda: budget.store_feedback("test-9"), lambda: budget.store_feedback("test-1"),
                 lambda: budget.store_feedback("test-9", "F000001")):
        with pytest.raises(LedgerError) as refused:
            call()
        assert refused.value.code == CASE_STATE and refused.value.message == (
            "storing feedback needs GENERATING_HYPOTHESES or INVESTIGATING_HYPOTHESES; the case is BLOCKED")
    assert case.status()["package_generation"] == events


def test_store_feedback_without_a_feedback_id_names_what_is_missing(case):
    budget = case.budget()
    with pytest.raises(LedgerError) as no_test:
        budget.store_feedback("test-9")
    budget.request_test("H1", "t1", "automated", "test-1")
    with pytest.raises(LedgerError) as no_draft:
        budget.store_feedback("test-1")
    budget.submit_feedback("test-1", PASSED)
    with pytest.raises(LedgerError) as unconfirmed:
        budget.store_feedback("test-1")
    assert (no_test.value.code, no_draft.value.code, unconfirmed.value.code) == (
        NO_RESERVATION, INVALID_ARGUMENT, FEEDBACK_NOT_CONFIRMED)
    assert "submit_feedback first" in no_draft.value.message


def test_once_a_tests_feedback_is_stored_no_other_draft_is_submitted_or_confirmed(case, tmp_path):
    """A draft submitted or confirmed after the test's feedback was stored could never be stored, and a
    store_feedback without a draft id (the newest confirmed) then conflicted instead of answering
    reused: both are OPERATION_CONFLICT, writing nothing, and the stored feedback is reused as before.
    The identical draft submitted again is still reused (a retry)."""
    budget, store = case.budget(), case.evidence()
    budget.request_test("H2", "t2", "automated", "test-2")
    first = store.submit_feedback("test-2", {"status": "failed"})
    other = store.submit_feedback("test-2", PASSED)  # submitted before: confirmed after the store below
    store.confirm_feedback(first.feedback_id)
    stored = store.store_feedback("test-2", first.feedback_id)
    before = ledger_rows(case)
    for call in (lambda: store.submit_feedback("test-2", {"status": "passed"}),
                 lambda: store.confirm_feedback(other.feedback_id)):
        with pytest.raises(LedgerError) as refused:
            call()
        assert refused.value.code == "OPERATION_CONFLICT"
        assert refused.value.message == (f"the test of operation test-2 has its feedback stored already (record "
                                         f"{stored.records[0]['record_id']}); record_evidence feeds it to the budget")
    assert ledger_rows(case) == before
    assert store.submit_feedback("test-2", {"status": "failed"}).reused is True
    assert store.store_feedback("test-2").reused is True
    case.close()
    assert verify_case(case.path).events == len(before[0])


def test_a_case_an_older_build_let_take_a_draft_after_its_stored_feedback_still_verifies(case, monkeypatch):
    """The replay keeps the history an older case-ledger accepted: a draft submitted and confirmed after
    the test's feedback was stored (which it took) verifies, though such a draft is refused now."""
    from ledger.rules import feedback as feedback_rules

    budget, store = case.budget(), case.evidence()
    budget.request_test("H2", "t2", "automated", "test-2")
    first = store.submit_feedback("test-2", {"status": "failed"})
    store.confirm_feedback(first.feedback_id)
    store.store_feedback("test-2", first.feedback_id)
    with monkeypatch.context() as older:
        older.setattr(feedback_rules, "_unanswered", lambda *args: None)
        late = store.submit_feedback("test-2", PASSED)
        store.confirm_feedback(late.feedback_id)
    assert store.store_feedback("test-2").reused is True  # the draft stored, not the newest confirmed one
    head = case.events()[-1]["seq"]
    case.close()
    assert verify_case(case.path).events == head
