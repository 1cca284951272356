"""The evidence store: verified batches, records, content, atoms and novelty v2, the budget link,
limits, export/import/verify and the journal and command-line forms."""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import click
import pytest

from ledger import AnalysisConfig, BudgetConfig, Case, LedgerError, export_case, import_tree, verify_case
from ledger.storage.sqlfiles import shipped_schema
from ledger.ground.errors import (INTEGRITY_ERROR, INVALID_ARGUMENT, LIMIT_REACHED, NO_RESERVATION,
    OPERATION_CONFLICT, REPLY_MISMATCH, ROUTER_REFUSED, STALE_GENERATION)
from ledger.package_tools.journal import apply_journal
from ledger.router.reference import Router, split_lines


from ledger import BudgetManager, EvidenceStore, ScopeManager
from ledger.model.operations import OPERATIONS
from ledger_cli.main import main as cli_main
from conftest import EXAMPLE_BUDGET, REPO, start_case
APP = "sources/app.py"


@pytest.fixture
def case(package: Path):
    (package / "sources" / "app.py").write_text("def add(a, b):\n    return a - b\n\nprint(add(1, 2))\n")
    (package / "data").mkdir()
    conn = sqlite3.connect(package / "data" / "app.sqlite")
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, role TEXT)")
    conn.executemany("INSERT INTO users (name, role) VALUES (?, ?)", [("ann", "admin"), ("bob", "dev")])
    conn.commit()
    conn.close()
    opened = start_case(package, hypotheses=2)
    opened.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    yield opened
    opened.close()


def read(op: str, h: str, action_id: str, start: int, end: int, path: str = APP) -> dict:
    return {"operation_id": op, "hypothesis_id": h, "action_id": action_id, "tool": "source.read_context",
            "args": {"path": path, "start_line": start, "end_line": end}}


def store(case: Case, iteration: str, *actions: dict, close: bool = True):
    """Reserve each action, store the router's reply, and (with ``close``) fail the actions again so
    their hypotheses may reserve the next one."""
    for a in actions:
        case.budget().reserve(a["hypothesis_id"], a["action_id"], a["tool"])
    result = case.evidence().query(iteration, {"actions": list(actions)}, True)
    if close:
        for a in actions:
            case.budget().fail(a["hypothesis_id"], a["action_id"], "stored; assessed elsewhere")
    return result


def ledger_bytes(case: Case) -> bytes:
    rows = case.query("SELECT seq, body FROM events ORDER BY seq")
    rows += case.query("SELECT * FROM contents") + case.query("SELECT * FROM evidence_records")
    rows += case.query("SELECT * FROM evidence_atoms") + case.query("SELECT * FROM evidence_indexes")
    return json.dumps(rows, sort_keys=True).encode()


# --- novelty v2 -----------------------------------------------------------------------------
def test_novelty_one_new_line_in_a_two_line_excerpt_is_50_and_both_seen_is_0(case):
    first = store(case, "i1", read("op-1", "H1", "q1", 1, 1))
    assert first.records[0]["novelty_score"] == 100
    second = store(case, "i2", read("op-2", "H2", "q2", 1, 2))
    assert second.records[0]["novelty_score"] == 50
    # other ids, another hypothesis, a regrouped span: the same atoms are not new evidence
    third = store(case, "i3", read("op-3", "H1", "q3", 2, 2), read("op-4", "H2", "q4", 1, 1))
    assert [r["novelty_score"] for r in third.records] == [0, 0]
    rows = case.query("SELECT record_id, novelty_score, duplicate_of FROM evidence ORDER BY record_id")
    assert [(r["record_id"], r["novelty_score"]) for r in rows] == [
        ("E000001", 100), ("E000002", 50), ("E000003", 0), ("E000004", 0)]


def test_identical_content_gets_a_new_record_marked_duplicate_of_the_first(case):
    store(case, "i1", read("op-1", "H1", "q1", 1, 2))
    again = store(case, "i2", read("op-2", "H2", "q2", 1, 2))
    assert again.records[0]["duplicate_of"] == "E000001" and again.records[0]["novelty_score"] == 0
    assert case.query("SELECT COUNT(*) AS n FROM contents")[0]["n"] == 1
    # the same rows through another span are new content made of old atoms (coverage differs)
    other = store(case, "i3", read("op-3", "H1", "q3", 1, 3))
    assert other.records[0]["duplicate_of"] is None and other.records[0]["novelty_score"] == 33


def test_an_empty_finding_scores_0_and_an_empty_partial_result_keeps_its_coverage(case):
    found = store(case, "i1", {"operation_id": "op-1", "hypothesis_id": "H1", "action_id": "q1",
                               "tool": "source.find_text", "args": {"text": "no such text anywhere"}})
    assert found.records[0]["novelty_score"] == 0
    past_end = store(case, "i2", read("op-2", "H2", "q2", 50, 60))
    assert past_end.records[0]["novelty_score"] == 0
    sha = past_end.records[0]["content_sha256"]
    content = json.loads(case.query("SELECT body FROM contents WHERE sha256 = ?", (sha,))[0]["body"])
    assert content["items"] == [] and content["coverage"]["file_lines"] == 4
    assert content["coverage"]["start_line"] == 50


def test_a_database_row_is_one_atom_and_another_projection_is_a_new_one(case):
    lookup = {"operation_id": "op-1", "hypothesis_id": "H1", "action_id": "q1", "tool": "database.lookup",
              "args": {"database": "data/app.sqlite", "table": "users", "where": {"role": "dev"}}}
    assert store(case, "i1", lookup).records[0]["novelty_score"] == 100
    by_name = dict(lookup, operation_id="op-2", hypothesis_id="H2", action_id="q2",
                   args={"database": "data/app.sqlite", "table": "users", "where": {"name": "bob"}})
    assert store(case, "i2", by_name).records[0]["novelty_score"] == 0  # same row, same columns, other filter
    narrow = dict(lookup, operation_id="op-3", action_id="q3",
                  args={"database": "data/app.sqlite", "table": "users", "columns": ["name"]})
    assert store(case, "i3", narrow).records[0]["novelty_score"] == 100


# --- forged replies -----------------------------------------------------------------------
def _forgeries(reply: dict) -> dict[str, dict]:
    out = {}

    def forge(name, change):
        forged = copy.deepcopy(reply)
        change(forged)
        out[name] = forged

    forge("text of a line", lambda r: r["results"][0]["items"][0].update(text="def add(a, b):  # fine"))
    forge("line number", lambda r: r["results"][0]["items"][1].update(line=7))
    forge("row value", lambda r: r["results"][1]["items"][0]["values"].update(name="eve"))
    forge("dropped item", lambda r: r["results"][0]["items"].pop())
    forge("extra item", lambda r: r["results"][0]["items"].append(dict(r["results"][0]["items"][0], line=3)))
    forge("changed count", lambda r: r["results"][0]["coverage"].update(file_lines=99))
    forge("changed path", lambda r: [i.update(path="sources/notes.txt") for i in r["results"][0]["items"]])
    forge("changed truncation", lambda r: r["results"][1].update(truncated=True))
    forge("dropped result", lambda r: r["results"].pop())
    forge("future generation", lambda r: r.update(package_generation=r["package_generation"] + 1))
    forge("generation before the reservation", lambda r: r.update(package_generation=1))
    return out


def test_forged_replies_of_each_kind_are_rejected_and_the_store_is_byte_for_byte_unchanged(case):
    actions = [read("op-1", "H1", "q1", 1, 2),
               {"operation_id": "op-2", "hypothesis_id": "H2", "action_id": "q2", "tool": "database.lookup",
                "args": {"database": "data/app.sqlite", "table": "users", "where": {"name": "bob"}}}]
    for a in actions:
        case.budget().reserve(a["hypothesis_id"], a["action_id"], a["tool"])
    request = {"actions": actions}
    evidence = case.evidence()
    reply = evidence.query("i1", request).reply
    before = ledger_bytes(case)
    for name, forged in _forgeries(reply).items():
        with pytest.raises(LedgerError) as refused:
            evidence.store_tool_results("i1", request, forged)
        assert refused.value.code == REPLY_MISMATCH, name
        assert ledger_bytes(case) == before, name
    stale = dict(reply, input_identity="0" * 64)
    with pytest.raises(LedgerError) as refused:
        evidence.store_tool_results("i1", request, stale)
    assert refused.value.code == STALE_GENERATION
    assert ledger_bytes(case) == before
    # the honest reply is accepted and takes E000001: a rejection consumed no record id
    assert [r["record_id"] for r in evidence.store_tool_results("i1", request, reply).records] == ["E000001",
                                                                                                   "E000002"]


def test_a_changed_input_file_makes_an_old_reply_stale(case):
    case.budget().reserve("H1", "q1", "source.read_context")
    request = {"actions": [read("op-1", "H1", "q1", 1, 1)]}
    reply = case.evidence().query("i1", request).reply
    (case.path / "sources" / "extra.txt").write_text("new input\n")
    with pytest.raises(LedgerError) as refused:
        case.evidence().store_tool_results("i1", request, reply)
    assert refused.value.code == STALE_GENERATION
    # ledger events that touch no input never make a reply stale
    case.budget().reserve("H2", "q2", "source.read_context")
    fresh = case.evidence().query("i1", request).reply
    case.evidence().store_tool_results("i1", request, fresh)


def test_no_reservation_conflicts_and_identical_replays(case):
    request = {"actions": [read("op-1", "H1", "q1", 1, 1)]}
    with pytest.raises(LedgerError) as refused:
        case.evidence().query("i1", request, True)
    assert (refused.value.code, refused.value.message) == (
        NO_RESERVATION, "operation op-1 cannot take the result of action H1/q1 of tool source.read_context: no such "
        "action was reserved")
    case.budget().reserve("H1", "q1", "source.find_text")  # another tool than the request names
    with pytest.raises(LedgerError) as refused:
        case.evidence().query("i1", request, True)
    assert (refused.value.code, refused.value.message.split(": ", 1)[1]) == (
        NO_RESERVATION, "it was reserved for the tool source.find_text")
    case.budget().fail("H1", "q1", "wrong tool")
    stored = store(case, "i2", read("op-2", "H1", "q2", 1, 1), close=False)
    again = case.evidence().store_tool_results("i2", {"actions": [read("op-2", "H1", "q2", 1, 1)]},
                                               _stored_reply(case, "i2"))
    assert again.reused and again.records == stored.records and again.seq == stored.seq
    with pytest.raises(LedgerError) as refused:  # the same operation id in another batch
        store(case, "i3", read("op-2", "H2", "q3", 2, 2))
    assert refused.value.code == OPERATION_CONFLICT
    with pytest.raises(LedgerError) as refused:  # a reservation that already has its record
        case.evidence().query("i4", {"actions": [read("op-4", "H1", "q2", 2, 2)]}, True)
    assert (refused.value.code, refused.value.message.split(": ", 1)[1]) == (  # it said only "names no still-reserved"
        NO_RESERVATION, "the batch of operation op-2 holds it already (its result is that batch's)")
    case.budget().record_evidence("H1", "q2", "E000001")
    with pytest.raises(LedgerError) as refused:  # nor once the record was fed to the budget
        case.evidence().query("i5", {"actions": [read("op-5", "H1", "q2", 2, 2)]}, True)
    assert (refused.value.code, refused.value.message.split(": ", 1)[1]) == (
        NO_RESERVATION, "its status is awaiting_assessment, not reserved")


def test_an_evidence_batch_naming_a_requested_tests_action_says_that_is_why(case):
    """A test's action is reserved under its test tool, so the refusal named that tool, inviting a
    batch with it, which no router answers: the test's result is its feedback."""
    case.budget().request_test("H1", "t1", "human", "test-1")
    with pytest.raises(LedgerError) as refused:
        case.evidence().query("i1", {"actions": [read("op-1", "H1", "t1", 1, 1)]}, True)
    assert (refused.value.code, refused.value.message.split(": ", 1)[1]) == (
        NO_RESERVATION, "it is a requested test's action, whose result is the test's feedback")


def _stored_reply(case: Case, iteration: str) -> dict:
    key = f"0:store_tool_results:{iteration}"
    body = json.loads(case.query("SELECT body FROM events WHERE operation_key = ?", (key,))[0]["body"])
    return body["request"]["reply"]


def test_router_refusals_leave_the_reservation_untouched(case, tmp_path):
    case.budget().reserve("H1", "q1", "source.read_context")
    before = ledger_bytes(case)
    outside = tmp_path / "outside.py"
    outside.write_text("secret\n")
    os.symlink(outside, case.path / "sources" / "escape.py")
    for path in ("sources/../manifest.json", "/etc/passwd", "sources/escape.py"):
        with pytest.raises(LedgerError) as refused:
            case.evidence().query("i1", {"actions": [read("op-1", "H1", "q1", 1, 1, path)]}, True)
        assert refused.value.code == ROUTER_REFUSED
    with pytest.raises(LedgerError) as refused:
        case.evidence().query("i1", {"actions": [read("op-1", "H1", "q1", 1, 5000)]}, True)
    assert refused.value.code == ROUTER_REFUSED
    assert ledger_bytes(case) == before
    assert case.actions()[0]["status"] == "reserved"


# --- real input ---------------------------------------------------------------------------
def test_real_input_click_sources_found_read_and_deduplicated(case):
    target = case.path / "sources" / "click"
    shutil.copytree(Path(click.__file__).parent, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.typed"))
    files = sorted(p for p in target.rglob("*.py"))
    expected = [(p.relative_to(case.path).as_posix(), n)
                for p in files for n, line in enumerate(split_lines(p.read_bytes()), 1) if b"def echo(" in line]
    assert expected  # click defines echo
    find = {"operation_id": "op-1", "hypothesis_id": "H1", "action_id": "q1", "tool": "source.find_text",
            "args": {"text": "def echo(", "path_glob": "sources/click/*.py"}}
    found = store(case, "i1", find)
    body = json.loads(case.query("SELECT body FROM contents WHERE sha256 = ?",
                                 (found.records[0]["content_sha256"],))[0]["body"])
    assert [(i["path"], i["line"]) for i in body["items"]] == expected
    assert len(body["coverage"]["files"]) == len(files)
    path, line = expected[0]
    raw = split_lines((case.path / path).read_bytes())
    context = store(case, "i2", read("op-2", "H2", "q2", line, line + 1, path))
    # the definition line was seen by find_text: one of two lines is new
    assert context.records[0]["novelty_score"] == 50
    assert body["items"][0]["sha256"] == hashlib.sha256(raw[line - 1]).hexdigest()
    again = store(case, "i3", read("op-3", "H1", "q3", line, line + 1, path))
    assert again.records[0]["duplicate_of"] == context.records[0]["record_id"]
    assert again.records[0]["novelty_score"] == 0
    assert case.query("SELECT COUNT(*) AS n FROM evidence")[0]["n"] == 3
    export_case(case)
    assert verify_case(case.path).events == case.status()["package_generation"]


# --- the budget link ------------------------------------------------------------------------
def test_record_evidence_caps_novelty_and_publishing_alone_moves_no_money(case):
    budget = case.budget()
    store(case, "i1", read("op-1", "H1", "q1", 1, 2), close=False)
    remaining = {b["hypothesis_id"]: b["remaining_units"] for b in case.balances()}
    case.budget().reserve("H2", "q2", "source.read_context")
    remaining["H2"] = case.balances()[1]["remaining_units"]
    case.evidence().query("i2", {"actions": [read("op-2", "H2", "q2", 1, 2)]}, True)
    assert case.balances()[1]["remaining_units"] == remaining["H2"]  # the reserve debited, publishing did not
    with pytest.raises(LedgerError) as refused:
        budget.record_evidence("H2", "q2", "E000001")
    assert refused.value.code == NO_RESERVATION
    with pytest.raises(LedgerError) as refused:
        budget.record_evidence("H2", "q2", "E000099")
    assert refused.value.code == INVALID_ARGUMENT
    recorded = budget.record_evidence("H2", "q2", "E000002")
    assert recorded.action["novelty_score"] == 0 and recorded.action["status"] == "awaiting_assessment"
    settled = budget.settle("H2", "q2", 100, "confirms the subtraction bug")
    assert settled.action["reward_units"] == 0  # no novel atoms: no reward even with semantic 100
    budget.record_evidence("H1", "q1", "E000001")
    assert budget.settle("H1", "q1", 100, "new").action["reward_units"] == 4  # cost 5, 8000 bps, info 100
    assert budget.record_evidence("H1", "q1", "E000001").reused


def test_an_action_with_its_result_refuses_a_second_result_as_a_caller_mistake(case):
    """An action that already has its result refuses another one with NO_RESERVATION from the rule,
    in either order and through either path; nothing is written and the history still verifies."""
    budget = case.budget()
    store(case, "i1", read("op-1", "H1", "q1", 1, 2), close=False)
    budget.record_evidence("H1", "q1", "E000001")
    before = ledger_bytes(case)
    for call in (lambda: budget.record_result("H1", "q1", {"finding": "x"}),
                 lambda: budget.record_result("H1", "q1", {"finding": "x"}, source_refs=[APP], cost_usd_millicents=3)):
        with pytest.raises(LedgerError) as refused:
            call()
        assert refused.value.code == NO_RESERVATION and "already has its result" in refused.value.message
    assert ledger_bytes(case) == before
    from click.testing import CliRunner
    cli = CliRunner().invoke(cli_main, ["budget", "record", str(case.path), "H1", "q1", "--evidence", '{"a": 1}'])
    assert cli.exit_code == 1 and "error: NO_RESERVATION: H1/q1 already has its result" in cli.output
    assert verify_case(case.path).events == case.status()["package_generation"]
    assert budget.record_evidence("H1", "q1", "E000001").reused  # the identical call still replays


def test_an_action_a_stored_batch_is_bound_to_takes_its_result_only_through_record_evidence(case):
    """A plain record_result on a reservation a stored batch is bound to would replace the verified,
    atom-scored result with any payload (novelty v1): NO_RESERVATION naming the batch, nothing written;
    record_evidence of the bound record still feeds it."""
    budget = case.budget()
    store(case, "i1", read("op-1", "H1", "q1", 1, 2), close=False)
    budget.record_evidence("H1", "q1", "E000001")
    budget.settle("H1", "q1", 100, "read it")
    store(case, "i2", read("op-2", "H1", "q2", 1, 2), close=False)  # the same lines: no novel atom
    before = ledger_bytes(case)
    with pytest.raises(LedgerError) as refused:
        budget.record_result("H1", "q2", {"finding": "fresh-looking payload"})
    assert refused.value.code == NO_RESERVATION
    assert "bound to the stored batch of operation op-2" in refused.value.message
    assert refused.value.details["operation_id"] == "op-2"
    assert ledger_bytes(case) == before
    assert budget.record_evidence("H1", "q2", "E000002").action["novelty_score"] == 0
    assert budget.settle("H1", "q2", 100, "nothing new").action["reward_units"] == 0
    assert verify_case(case.path).events == case.status()["package_generation"]


_KILLED = """
import os, signal, sys
from ledger import Case
case = Case.open(sys.argv[1])
case.evidence().query("i1", {"actions": [{"operation_id": "op-1", "hypothesis_id": "H1", "action_id": "q1",
    "tool": "source.read_context", "args": {"path": "sources/app.py", "start_line": 1, "end_line": 2}}]}, True)
os.kill(os.getpid(), signal.SIGKILL)
case.budget().record_evidence("H1", "q1", "E000001")
"""


def test_a_process_killed_between_publication_and_record_evidence_leaves_the_reservation_pending(case):
    case.budget().reserve("H1", "q1", "source.read_context")
    case.close()
    done = subprocess.run([sys.executable, "-c", _KILLED, str(case.path)], cwd=REPO, capture_output=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    reopened = Case.open(case.path)
    try:
        assert reopened.query("SELECT record_id FROM evidence")[0]["record_id"] == "E000001"
        action = reopened.actions()[0]
        assert action["status"] == "reserved"
        assert reopened.balances()[0]["pending_action_id"] == "q1"
        with pytest.raises(LedgerError):  # not free to spend again
            reopened.budget().reserve("H1", "q9", "source.read_context")
        assert reopened.budget().record_evidence("H1", "q1", "E000001").action["novelty_score"] == 100
    finally:
        reopened.close()


# --- limits ---------------------------------------------------------------------------------
@pytest.mark.parametrize("limit, value", [("evidence_records_max", 1), ("evidence_artifact_bytes_max", 200),
                                          ("evidence_content_bytes_max", 300)])
def test_limits_refuse_with_limit_reached_naming_the_setting_and_write_nothing(package, limit, value):
    config = AnalysisConfig.from_mapping({"limits": {limit: value}}) if hasattr(AnalysisConfig, "from_mapping") \
        else AnalysisConfig(limits={**AnalysisConfig().limits, limit: value})
    start_case(package).close()
    with Case.open(package, analysis_config=config) as opened:
        opened.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
        if limit == "evidence_records_max":
            store(opened, "i0", read("op-0", "H2", "q0", 1, 1))
        opened.budget().reserve("H1", "q1", "source.read_context")
        before = ledger_bytes(opened)
        with pytest.raises(LedgerError) as refused:
            opened.evidence().query("i1", {"actions": [read("op-1", "H1", "q1", 1, 2)]}, True)
        assert refused.value.code == LIMIT_REACHED and refused.value.details["limit"] == limit
        assert f"{limit} = {value}" in refused.value.message
        assert refused.value.message.endswith(f"(to allow more, raise [limits] {limit} in the analysis config: "
                                              "--analysis-config FILE; in Python, analysis_config= of Case.open)")
        assert ledger_bytes(opened) == before


# --- export, import, verify -----------------------------------------------------------------
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


@pytest.fixture
def published(case):
    store(case, "i1", read("op-1", "H1", "q1", 1, 2), close=False)
    store(case, "i2", read("op-2", "H2", "q2", 1, 2))
    case.budget().record_evidence("H1", "q1", "E000001")
    export_case(case)
    return case.path


def test_export_import_export_is_byte_identical_with_evidence(published, tmp_path):
    manifest = json.loads((published / "manifest.json").read_bytes())
    index = manifest["artifacts"]["evidence_index"]
    assert index["path"].startswith("analysis/evidence/0001/") and index["path"].endswith("/index.json")
    folder = hashlib.sha256(b"op-2").hexdigest()[:32]
    assert (published / f"analysis/evidence/0001/{folder}/E000002.json").is_file()
    assert index["path"] == f"analysis/evidence/0001/{folder}/index.json"
    report = import_tree(published, tmp_path / "copy")
    assert report.head_seq == manifest["head"]["seq"]

    def files(root):
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
                if p.is_file() and not p.name.startswith("ledger.sqlite")}
    assert files(published) == files(tmp_path / "copy")


@pytest.mark.parametrize("tamper", [
    "UPDATE contents SET body = replace(body, 'return a - b', 'return a + b')",
    "DELETE FROM evidence_records WHERE record_id = 'E000002'",
    "UPDATE evidence_records SET duplicate_of = NULL WHERE record_id = 'E000002'",
    "UPDATE evidence_records SET novelty_score = 100 WHERE record_id = 'E000002'",
    "DELETE FROM evidence_atoms",
])
@pytest.mark.sampled(every=4)
def test_tampered_evidence_is_caught_by_verify(published, tamper):
    conn = _unguarded(published)
    conn.execute(tamper)
    _restore(conn)
    with pytest.raises(LedgerError) as caught:
        verify_case(published)
    assert caught.value.code == INTEGRITY_ERROR


def test_verify_recomputes_stored_batches_where_the_inputs_are_present(published):
    assert verify_case(published).events > 0
    (published / "sources" / "app.py").write_text("changed\n")  # inputs changed since: nothing to recompute
    assert verify_case(published).events > 0


def test_input_identity_ignores_stored_and_exported_evidence(case):
    identity = case.input_identity()
    store(case, "i1", read("op-1", "H1", "q1", 1, 2))
    export_case(case)
    assert case.input_identity() == identity
    (case.path / "data" / "more.txt").write_text("x")
    assert case.input_identity() != identity


# --- journal and command line ---------------------------------------------------------------
def test_journal_query_and_store_and_record_evidence(case):
    action = read("op-1", "H1", "q1", 1, 2)
    lines = [json.dumps({"op": "reserve", "hypothesis": "H1", "action_id": "q1", "action": "source.read_context"}),
             json.dumps({"op": "query", "iteration_id": "i1", "request": {"actions": [action]}, "store": False}),
             json.dumps({"op": "query", "iteration_id": "i1", "request": {"actions": [action]}, "store": True}),
             json.dumps({"op": "record_evidence", "hypothesis": "H1", "action_id": "q1", "record_id": "E000001"})]
    results = [r.to_dict() for r in apply_journal(case, lines)]
    assert all(r["ok"] for r in results), results
    assert results[1]["result"]["reply"]["results"][0]["items"][0]["text"] == "def add(a, b):"
    assert results[1]["result"]["records"] == []
    assert results[2]["result"]["records"][0]["record_id"] == "E000001"
    stored = json.dumps({"op": "store_tool_results", "iteration_id": "i1", "request": {"actions": [action]},
                         "reply": results[2]["result"]["reply"]})
    again = [r.to_dict() for r in apply_journal(case, [stored])]
    assert again[0]["ok"] and again[0]["reused"] is True


@pytest.mark.parametrize("value", ["false", "true", 0, 1, "", [], {}, "False"])
def test_journal_flags_are_json_booleans(case, value):
    """A key that takes a boolean (``store`` of ``query``) accepts only true or false; anything else
    is INVALID_ARGUMENT naming the key and nothing is stored (also through the Python API)."""
    action = read("op-1", "H1", "q1", 1, 2)
    case.budget().reserve("H1", "q1", "source.read_context")
    before = ledger_bytes(case)
    line = json.dumps({"op": "query", "iteration_id": "i1", "request": {"actions": [action]}, "store": value})
    result = [r.to_dict() for r in apply_journal(case, [line])][0]
    assert result["ok"] is False and result["error"]["code"] == INVALID_ARGUMENT
    assert "store must be a JSON boolean" in result["error"]["message"]
    with pytest.raises(LedgerError) as api:
        case.evidence().query("i1", {"actions": [action]}, value)
    assert api.value.code == INVALID_ARGUMENT and "store" in api.value.message
    assert ledger_bytes(case) == before
    with pytest.raises(LedgerError) as events:
        case.events(with_body=value)
    assert events.value.code == INVALID_ARGUMENT and "with_body" in events.value.message


def test_every_journal_flag_is_declared_as_one():
    """Each journal key the Python API takes as a bool is declared a flag, so the journal checks its type."""
    services = {"case": Case, "budget": BudgetManager, "evidence": EvidenceStore, "scope": ScopeManager}
    for op in OPERATIONS.values():
        method = inspect.signature(getattr(services[op.service], op.name))
        for argument in op.arguments:
            annotation = str(method.parameters[argument.param].annotation)
            assert (annotation == "bool") == argument.flag, (op.name, argument.key, annotation)


def test_cli_evidence_query_and_store(case, tmp_path):
    from click.testing import CliRunner

    case.budget().reserve("H1", "q1", "source.read_context")
    path = str(case.path)
    case.close()
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"actions": [read("op-1", "H1", "q1", 1, 1)]}))
    runner = CliRunner()
    queried = runner.invoke(cli_main, ["evidence", "query", path, str(request)])
    assert queried.exit_code == 0, queried.output
    reply = tmp_path / "reply.json"
    reply.write_text(queried.output)
    assert json.loads(queried.output)["results"][0]["items"][0]["line"] == 1
    stored = runner.invoke(cli_main, ["evidence", "store", path, str(request), str(reply), "--iteration", "i1",
                                      "--json"])
    assert stored.exit_code == 0, stored.output
    assert json.loads(stored.output)["records"][0]["record_id"] == "E000001"
    again = runner.invoke(cli_main, ["evidence", "store", path, str(request), str(reply), "--iteration", "i1"])
    index = Case.open(path).query("SELECT MAX(seq) AS seq FROM events WHERE type = 'evidence.indexed'")[0]["seq"]
    first = json.loads(stored.output)["seq"]
    assert first < index  # the batch's first event, not its index's: the summary says so
    ref = Case.open(path).query("SELECT path FROM evidence_files WHERE seq = ?", [first])[0]["path"]
    assert json.loads(stored.output)["event_ref"] == ref  # every write's --json names its event (docs/cli.md)
    assert again.output.splitlines()[0] == (f"batch stored from seq {first} (reused: nothing written); its index "
                                            f"exports to {json.loads(stored.output)['index_ref']}")
    bad = runner.invoke(cli_main, ["evidence", "store", path, str(request), str(reply), "--iteration", "i2"])
    assert bad.exit_code == 1 and "error: OPERATION_CONFLICT" in bad.output
    recorded = runner.invoke(cli_main, ["budget", "record-evidence", path, "H1", "q1", "E000001", "--json"])
    assert recorded.exit_code == 0 and json.loads(recorded.output)["action"]["novelty_score"] == 100


def _evidence_file(root: Path, name: str) -> Path:
    return next(p for p in sorted((root / "analysis" / "evidence").glob(f"0001/*/{name}")))


@pytest.mark.parametrize("mutation", ["stray copy", "moved", "deleted", "renamed record"])
def test_import_refuses_a_stray_moved_or_missing_evidence_file(published, tmp_path, mutation):
    record = _evidence_file(published, "E000001.json")
    other = hashlib.sha256(b"op-9").hexdigest()[:32]
    elsewhere = published / "analysis" / "evidence" / "0001" / other / record.name
    elsewhere.parent.mkdir()
    if mutation == "stray copy":
        shutil.copyfile(record, elsewhere)
    elif mutation == "moved":
        record.rename(elsewhere)
    elif mutation == "deleted":
        record.unlink()
    else:
        record.rename(record.with_name("E000009.json"))
    with pytest.raises(LedgerError) as refused:
        import_tree(published, tmp_path / "copy")
    assert refused.value.code == INTEGRITY_ERROR
    assert not (tmp_path / "copy").exists()


# --- finding 3: an identical query --store retry is reused ------------------------------------------
def test_an_identical_query_store_retry_is_reused_with_the_stored_records(case):
    case.budget().reserve("H1", "q1", "source.read_context")
    request = {"actions": [read("op-1", "H1", "q1", 1, 2)]}
    first = case.evidence().query("i1", request, True)
    case.budget().reserve("H2", "q2", "source.read_context")  # the head moves on
    again = case.evidence().query("i1", request, True)
    assert (first.reused, again.reused) == (False, True)
    assert again.records == first.records and again.seq == first.seq
    assert again.reply["package_generation"] == first.reply["package_generation"]
    assert case.query("SELECT COUNT(*) AS n FROM evidence_records")[0]["n"] == 1


def test_a_journal_query_store_line_applies_twice(case):
    case.budget().reserve("H1", "q1", "source.read_context")
    line_ = json.dumps({"op": "query", "iteration_id": "i1", "request": {"actions": [read("op-1", "H1", "q1", 1, 1)]},
                        "store": True})
    first = [r.to_dict() for r in apply_journal(case, [line_])]
    second = [r.to_dict() for r in apply_journal(case, [line_])]
    assert [r["ok"] for r in first + second] == [True, True]
    assert second[0]["result"]["reused"] is True
    assert second[0]["result"]["records"] == first[0]["result"]["records"]


def test_a_query_store_retry_over_changed_inputs_is_not_reused(case):
    case.budget().reserve("H1", "q1", "source.read_context")
    request = {"actions": [read("op-1", "H1", "q1", 1, 2)]}
    case.evidence().query("i1", request, True)
    (case.path / APP).write_text("def add(a, b):\n    return a + b\n")
    with pytest.raises(LedgerError) as caught:
        case.evidence().query("i1", request, True)
    assert caught.value.code == "OPERATION_CONFLICT"
    assert "iteration i1 stored this very request, read at package_generation 5 over inputs that have changed " \
        "since (this reply reads them as they are now); the batch as stored is what stored_batch(...) answers " \
        "with" in caught.value.message  # it said "holds another batch; give this one a new iteration id"
    assert case.evidence().stored_batch("i1", request).reused is True


# --- finding 6: the artifact limit is the one that applies to the evidence an event carries -----------
@pytest.mark.slow  # over 0.5 s in the default run: the slow lane (.ci/run) runs it
def test_a_3_000_000_byte_line_under_the_artifact_limit_is_stored(case):
    (case.path / "sources" / "big.txt").write_bytes(b"x" * 3_000_000 + b"\n")
    case.budget().reserve("H1", "q1", "source.read_context")
    stored = case.evidence().query("i1", {"actions": [read("op-1", "H1", "q1", 1, 1, "sources/big.txt")]}, True)
    assert stored.records[0]["novelty_score"] == 100
    assert verify_case(case.path).events > 0


def test_an_artifact_over_its_limit_names_evidence_artifact_bytes_max(case):
    (case.path / "sources" / "big.txt").write_bytes(b"x" * 5_000_000 + b"\n")
    case.budget().reserve("H1", "q1", "source.read_context")
    with pytest.raises(LedgerError) as caught:
        case.evidence().query("i1", {"actions": [read("op-1", "H1", "q1", 1, 1, "sources/big.txt")]}, True)
    assert caught.value.code == "LIMIT_REACHED" and caught.value.details["limit"] == "evidence_artifact_bytes_max"


def test_a_3_000_000_byte_attachment_is_accepted_as_a_draft(case):
    case.budget().request_test("H1", "t1", "human", "test-1")
    draft = case.evidence().submit_feedback("test-1", {"status": "passed", "details": "ok"},
                                            {"log.txt": "y" * 3_000_000})
    assert draft.feedback_id == "F000001"


def test_standard_input_for_both_request_and_reply_is_a_usage_error_and_nothing_is_read(case, tmp_path):
    from click.testing import CliRunner

    path = str(case.path)
    before = case.status()["package_generation"]
    case.close()
    done = CliRunner().invoke(cli_main, ["evidence", "store", path, "-", "-", "--iteration", "i1"], input="{}")
    assert done.exit_code == 2 and "REQUEST and REPLY cannot both be '-'" in done.stderr
    with Case.open(path) as opened:
        assert opened.status()["package_generation"] == before


@pytest.mark.parametrize("bad_one", ["REQUEST", "REPLY"])
def test_a_json_error_names_the_argument_and_the_file_that_held_it(case, tmp_path, bad_one):
    from click.testing import CliRunner

    path = str(case.path)
    case.close()
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"actions": [read("op-1", "H1", "q1", 1, 1)]}))
    bad.write_text('{"actions": [], "x": 1e999}')
    files = [str(bad), str(good)] if bad_one == "REQUEST" else [str(good), str(bad)]
    done = CliRunner().invoke(cli_main, ["evidence", "store", path, *files, "--iteration", "i1"])
    assert done.exit_code == 1
    assert done.stderr.startswith(f"error: INVALID_JSON: {bad_one} ({bad}): number 1e999 at $.x is too large")
    queried = CliRunner().invoke(cli_main, ["evidence", "query", path, "-"], input="{nope")
    assert queried.exit_code == 1 and queried.stderr.startswith("error: INVALID_JSON: REQUEST (standard input): not valid JSON")


def test_a_request_file_past_its_bound_names_both_settings_the_bound_sums(case, tmp_path):
    """A REQUEST file may be as large as evidence_content_bytes_max plus event_bytes_max (room for the
    request around its content); past that it is refused with that sum, named as a sum."""
    from click.testing import CliRunner

    path = str(case.path)
    case.close()
    config = tmp_path / "analysis.toml"
    config.write_text("[limits]\nevidence_content_bytes_max = 3000\nevidence_payload_bytes_max = 3000\n"
                      "event_bytes_max = 1024\n")
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"actions": [], "pad": "x" * 4100}))
    before = (case.path / "ledger.sqlite").read_bytes()
    done = CliRunner().invoke(cli_main, ["--analysis-config", str(config), "evidence", "query", path, str(request)])
    assert done.exit_code == 1
    assert done.stderr == (f"error: LIMIT_REACHED: REQUEST {request} is larger than evidence_content_bytes_max + "
                           "event_bytes_max = 4024 bytes (to allow more, raise [limits] evidence_content_bytes_max "
                           "in the analysis config: --analysis-config FILE; "
                           "in Python, analysis_config= of Case.open)\n")
    assert (case.path / "ledger.sqlite").read_bytes() == before


@pytest.mark.parametrize("at", ["garbage", "2026-13-01T00:00:00Z", "2026-01-01T00:00:00+02:00"])
def test_every_at_is_checked_even_when_nothing_is_stored(case, tmp_path, at):
    from click.testing import CliRunner

    case.budget().reserve("H1", "q1", "source.read_context")
    request = {"actions": [read("op-1", "H1", "q1", 1, 1)]}
    with pytest.raises(LedgerError) as refused:
        case.evidence().query("query", request, False, at=at)
    assert refused.value.code == "INVALID_ARGUMENT" and "'at'" in refused.value.message
    path = str(case.path)
    case.close()
    file = tmp_path / "request.json"
    file.write_text(json.dumps(request))
    done = CliRunner().invoke(cli_main, ["evidence", "query", path, str(file), "--at", at])
    assert done.exit_code == 1 and done.stderr.startswith("error: INVALID_ARGUMENT: 'at'")


def test_a_second_batch_under_one_iteration_id_is_refused_saying_to_give_a_new_one(case):
    """The CLI's `evidence query --store` uses the iteration id `query` unless told: a second batch
    there conflicts, and the message says what to do; the batch under a new id is stored."""
    store(case, "query", read("op-1", "H1", "q1", 1, 1))
    generation = case.status()["package_generation"]
    with pytest.raises(LedgerError) as refused:
        store(case, "query", read("op-2", "H1", "q2", 2, 2), close=False)
    assert (refused.value.code, refused.value.message.split("with different inputs; ", 1)[1]) == (
        OPERATION_CONFLICT, "iteration query holds another batch; give this one a new iteration id")
    assert case.status()["package_generation"] == generation + 1  # only q2's reservation
    assert case.evidence().query("query-2", {"actions": [read("op-2", "H1", "q2", 2, 2)]}, True).records[0][
        "record_id"] == "E000002"


def test_a_stored_batch_read_again_at_a_later_generation_is_a_conflict_that_says_how_to_get_it_back(case):
    """Re-running query-then-store by hand (a resumed loop): the reply read again names a later
    package_generation, so it is not the stored reply (OPERATION_CONFLICT, nothing written); the
    message says the results are the same and how to get the stored batch, and that way answers."""
    request = {"actions": [read("op-1", "H1", "q1", 1, 2)]}
    case.budget().reserve("H1", "q1", "source.read_context")
    store_ = case.evidence()
    first = store_.store_tool_results("it-1", request, store_.query("it-1", request).reply)
    assert case.budget().reserve("H1", "q1", "source.read_context").reused
    again = store_.query("it-1", request).reply
    head = case.status()["package_generation"]
    with pytest.raises(LedgerError) as refused:
        store_.store_tool_results("it-1", request, again)
    message = refused.value.message
    assert refused.value.code == OPERATION_CONFLICT and f"read again at {again['package_generation']}" in message
    assert "query(..., store=True)" in message and "new iteration id" not in message
    assert refused.value.details["package_generation"] < again["package_generation"]
    assert case.status()["package_generation"] == head  # nothing written
    back = store_.query("it-1", request, True)
    assert (back.reused, back.records[0]["record_id"]) == (True, first.records[0]["record_id"])
    assert store_.stored_batch("it-1", request).reused
    # other results, or a generation not after the stored one, still get the rule's own advice
    changed = {**again, "results": [{**again["results"][0], "truncated": True}]}
    older = {**again, "package_generation": refused.value.details["package_generation"] - 1}
    for other_reply in (changed, older):
        with pytest.raises(LedgerError) as other:
            store_.store_tool_results("it-1", request, other_reply)
        assert other.value.message.endswith("holds another batch; give this one a new iteration id")


@pytest.mark.parametrize("key, value", [("operation_id", "o 1"), ("hypothesis_id", "h1"), ("action_id", "a/1"),
                                        ("tool", "Source.read"), ("action_id", 7)])
def test_a_malformed_id_in_an_evidence_request_is_invalid_id_for_query_and_store(case, key, value):
    action = dict(read("op-1", "H1", "q1", 1, 2), **{key: value})
    for call in (lambda: case.evidence().query("i1", {"actions": [action]}),
                 lambda: case.evidence().query("i1", {"actions": [action]}, True)):
        with pytest.raises(LedgerError) as refused:
            call()
        assert refused.value.code == "INVALID_ID", refused.value
    with pytest.raises(LedgerError) as refused:
        case.evidence().query("i1", {"actions": [{"operation_id": "op-1"}]})  # a missing key: the schema's
    assert refused.value.code == INVALID_ARGUMENT


def test_a_batch_naming_an_unknown_hypothesis_is_refused_so_whatever_the_order_of_its_actions(case):
    unreserved, unknown = read("op-1", "H1", "q1", 1, 2), read("op-2", "H9", "q2", 1, 2)
    reply = case.evidence().query("i0", {"actions": [read("op-0", "H1", "q0", 1, 2)]})
    for actions in ([unreserved, unknown], [unknown, unreserved]):
        with pytest.raises(LedgerError) as refused:
            case.evidence().store_tool_results("i1", {"actions": actions}, dict(reply.reply, results=[]))
        assert refused.value.code == "UNKNOWN_HYPOTHESIS", refused.value


def test_a_ledger_recorded_before_the_binding_rule_still_verifies(case, monkeypatch):
    """A ledger whose record_result replaced a bound batch's result (accepted before the rule existed)
    replays as it was accepted in its day: verify and export -> import pass; new calls are refused."""
    from ledger.model.views import SqlView

    budget = case.budget()
    store(case, "i1", read("op-1", "H1", "q1", 1, 2), close=False)
    with monkeypatch.context() as patched:  # the writer as it was: no binding seen
        patched.setattr(SqlView, "evidence_binding", lambda self, *args: None)
        budget.record_result("H1", "q1", {"finding": "x"})
    budget.settle("H1", "q1", 50, "assessed")
    assert verify_case(case.path).events == case.status()["package_generation"]
    export_case(case)
    assert import_tree(case.path, case.path.parent / "copy").events == case.status()["package_generation"]
    store(case, "i2", read("op-2", "H1", "q2", 3, 4), close=False)
    with pytest.raises(LedgerError) as refused:
        budget.record_result("H1", "q2", {"finding": "y"})
    assert refused.value.code == NO_RESERVATION


def test_a_well_formed_hypothesis_id_of_any_length_is_unknown_hypothesis_not_invalid_id(case):
    """``^H[1-9][0-9]*$`` has no length cap: a well-formed id the revision lacks is UNKNOWN_HYPOTHESIS
    from every operation that names one (no int conversion of thousands of digits on the way), and
    the message shortens it."""
    before = case.status()["package_generation"]
    for long_id in ("H123456789012", "H1234567890123", "H" + "9" * 5000):
        budget, scopes = case.budget(), case.scopes()
        calls = {
            "query": lambda: case.evidence().query("i1", {"actions": [read("op-1", long_id, "q1", 1, 2)]}, True),
            "reserve": lambda: budget.reserve(long_id, "q1", "source.read_context"),
            "record_result": lambda: budget.record_result(long_id, "q1", {"a": 1}),
            "record_evidence": lambda: budget.record_evidence(long_id, "q1", "E000001"),
            "settle": lambda: budget.settle(long_id, "q1", 50, "x"),
            "fail": lambda: budget.fail(long_id, "q1", "x"),
            "reject": lambda: budget.reject(long_id, "x"),
            "grant": lambda: budget.grant(long_id, 5, "lead", "x", "g1"),
            "check": lambda: budget.check(long_id, "source.read_context"),
            "advice": lambda: budget.advice(long_id),
            "establish": lambda: scopes.establish(f"hypothesis:1/{long_id}", {"units": 5}, "lead"),
            "request_increase": lambda: scopes.request_increase(f"hypothesis:1/{long_id}", "units", 5, "a", "x"),
        }
        for name, call in calls.items():
            with pytest.raises(LedgerError) as refused:
                call()
            assert refused.value.code == "UNKNOWN_HYPOTHESIS", (name, len(long_id), refused.value)
            assert len(refused.value.message) < 200 and refused.value.details["hypothesis_id"] == long_id
    assert case.status()["package_generation"] == before
    for malformed in ("H0", "H01", "h1", "H1 ", "H1\n", "H-1"):
        with pytest.raises(LedgerError) as refused:
            case.budget().reserve(malformed, "q1", "source.read_context")
        assert refused.value.code == "INVALID_ID", malformed
    with pytest.raises(LedgerError) as refused:
        case.budget().record_evidence("H1", "q1", {"a": 1})
    assert refused.value.code == "INVALID_ID" and "got an object" in refused.value.message


@pytest.mark.parametrize("iteration_id", [5, None, "a b", "", "x" * 200])
def test_every_read_of_the_store_refuses_an_iteration_id_no_batch_can_have(case, iteration_id):
    request = {"actions": [read("op-1", "H1", "q1", 1, 1)]}
    for call in (lambda: case.evidence().iteration_taken(iteration_id),
                 lambda: case.evidence().stored_batch(iteration_id, request),
                 lambda: case.evidence().query(iteration_id, request)):
        with pytest.raises(LedgerError) as refused:
            call()
        assert refused.value.code == "INVALID_ID", (iteration_id, refused.value)
    assert case.evidence().iteration_taken("i1") is False


# --- the store's arguments: an open case and, optionally, a router of one's own -------------
class _NoGeneration:
    def reply(self, request):
        return {"results": []}


@pytest.mark.parametrize("make, message", [
    (lambda c: EvidenceStore(str(c.path)), "EvidenceStore needs an open Case (Case.open or Case.create), not str"),
    (lambda c: c.evidence("router"), "router must be an object with a reply(request) method, such as a Router "
                                     "instance; got str"),
    (lambda c: c.evidence(Router), "router must be an object with a reply(request) method, such as a Router "
                                   "instance; got type Router (a class)")])
def test_a_store_made_with_something_other_than_a_case_or_a_router_is_refused_naming_it(case, make, message):
    with pytest.raises(LedgerError) as refused:
        make(case)
    assert (refused.value.code, refused.value.message) == (INVALID_ARGUMENT, message)


def test_a_custom_routers_malformed_reply_is_refused_by_the_store_for_reads_and_writes(case):
    case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    case.budget().reserve("H1", "q1", "source.read_context")
    request = {"actions": [read("op-1", "H1", "q1", 1, 1)]}
    before = ledger_bytes(case)
    with pytest.raises(LedgerError) as refused:
        case.evidence(_NoGeneration()).query("i1", request)
    assert (refused.value.code, refused.value.message) == (
        INVALID_ARGUMENT, "the router's reply must be an evidence reply ({package_generation, input_identity, "
                          "results}); got an object")
    with pytest.raises(LedgerError) as refused:
        case.evidence(_NoGeneration()).query("i1", request, True)
    assert refused.value.code == INVALID_ARGUMENT
    assert refused.value.message.startswith("the router's reply cannot be stored: reply: package_generation:")
    plain = case.evidence(Router(case.path))  # reads yes, at generation 0 with no input identity
    assert plain.query("i1", request).reply["results"][0]["items"][0]["text"] == "def add(a, b):"
    with pytest.raises(LedgerError) as refused:
        plain.query("i1", request, True)
    assert refused.value.code == INVALID_ARGUMENT and refused.value.message.endswith(
        "a Router built without generation= and identity= answers reads only: give case.evidence() no router "
        "to store")
    assert ledger_bytes(case) == before
    assert case.evidence().query("i1", request, True).records[0]["record_id"] == "E000001"
