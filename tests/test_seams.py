"""The seams the next features build on: the operation registry, outcomes of several events,
rules that see the resolved event time, and the in-memory view that replays without SQLite."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import click
import pytest

from ledger import OPERATIONS, BudgetConfig, Case, LedgerError, export_case, import_tree, verify_case
from ledger.model.memory_view import MemoryView
from ledger.ground.errors import INTEGRITY_ERROR, INVALID_ARGUMENT, LIMIT_EXCEEDED, UNKNOWN_OPERATION
from ledger.package_tools.journal import apply_journal, parse_line
from ledger.model.operations import Argument, Operation, register, unregister
from ledger.package_tools.replay import PackageSource, Replayer
from ledger.rules.common import BLOCKED, INVESTIGATING, Context, Outcome, Reused, require_case
from ledger.rules.lifecycle import case_fields
from ledger.rules.common import Draft
from ledger_cli.main import main as cli_main

from conftest import EXAMPLE_BUDGET, REPO, TRAJECTORIES, start_case

CONCEPTS = (REPO / "docs" / "concepts.md").read_text(encoding="utf-8")


# --- the registry -----------------------------------------------------------------------
def _cli_command(path: str) -> click.Command | None:
    command: click.Command | None = cli_main
    for word in path.split():
        if not isinstance(command, click.Group):
            return None
        command = command.get_command(click.Context(command), word)
    return command


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_every_registered_operation_has_a_journal_form_a_replay_path_a_cli_command_and_a_readme_row(name):
    op = OPERATIONS[name]
    # journal: a line with the operation's required keys parses to that operation (the genesis
    # operation is performed by `apply --create` and `init`, never by a journal line)
    line = {"op": name, **{a.key: None for a in op.arguments if a.required}}
    if op.journal:
        assert parse_line(__import__("json").dumps(line))["op"] == name
    else:
        with pytest.raises(LedgerError) as refused:
            parse_line(__import__("json").dumps(line))
        assert refused.value.code == UNKNOWN_OPERATION
    # replay: every operation that writes can be re-derived from its stored request
    assert (op.rule is None) == (op.replay is None)
    # a command runs it, and docs/concepts.md lists it in its operations table
    assert _cli_command(op.cli) is not None, op.cli
    assert re.search(rf"^\| `{name}` \|", CONCEPTS, re.MULTILINE), f"docs/concepts.md has no row for {name}"


def test_an_unknown_journal_operation_names_the_known_ones():
    with pytest.raises(LedgerError) as refused:
        parse_line('{"op": "refund_everything"}')
    assert refused.value.code == UNKNOWN_OPERATION
    assert "known: open_revision, transition, initialize, reserve, record_result, settle, fail, reject, " \
           "snapshot" in refused.value.message


# --- outcomes of several events (test-only operations) -----------------------------------
def _transition_draft(view, request, from_state: str, to: str) -> Draft:
    case = require_case(view)
    fields = case_fields(case, "case.transitioned", case["revision"])
    fields.update({"from_state": from_state, "state": to})
    return Draft("case.transitioned", "case", case["revision"], None, dict(request), fields)


def _pause_and_resume(view, request, context: Context) -> Outcome:
    """INVESTIGATING → BLOCKED → INVESTIGATING: two events, one operation."""
    return Outcome((_transition_draft(view, request, INVESTIGATING, BLOCKED),
                    _transition_draft(view, request, BLOCKED, INVESTIGATING)))


def _block_then_refuse(view, request, context: Context) -> Outcome:
    """Record a move to BLOCKED, then refuse the operation: the event stays."""
    return Outcome((_transition_draft(view, request, INVESTIGATING, BLOCKED),),
                   refusal=LedgerError(LIMIT_EXCEEDED, "test: recorded, then refused"))


SEEN_TIMES: list[str] = []


def _record_time(view, request, context: Context) -> Reused:
    SEEN_TIMES.append(context.at)
    return Reused(view.head()[0])


def _replay_plain(request, body, source):
    return {"op": request.get("op")}, {}, None


TEST_OPERATIONS = (
    Operation("pause_and_resume", "case", (), "state", _pause_and_resume, _replay_plain),
    Operation("block_then_refuse", "case", (), "state", _block_then_refuse, _replay_plain),
    Operation("record_time", "case", (), "state", _record_time, _replay_plain),
)


@pytest.fixture
def test_operations():
    for op in TEST_OPERATIONS:
        register(op)
    try:
        yield
    finally:
        for op in TEST_OPERATIONS:
            unregister(op.name)


def _states(case: Case) -> list[tuple[int, str, str]]:
    return [(r["seq"], r["type"], r["created_at"]) for r in case.events()]


def test_one_operation_appends_several_events_in_one_transaction_and_verify_replays_them(
        package, tmp_path, test_operations):
    case = start_case(package)
    try:
        before = case.status()["package_generation"]
        ran = case.session.run("pause_and_resume", {"op": "pause_and_resume"}, at="2026-02-01T10:00:00Z")
        assert [a.seq for a in ran.appended] == [before + 1, before + 2] and ran.seq == before + 1  # its own (first) event
        events = case.events(before)
        assert [e["type"] for e in events] == ["case.transitioned", "case.transitioned"]
        assert len({e["created_at"] for e in events}) == 1  # one operation, one resolved time
        assert case.status()["state"] == INVESTIGATING
        assert [r["state"] for r in case.query("SELECT state FROM lifecycle ORDER BY seq")][-2:] == [BLOCKED, INVESTIGATING]
        export_case(case)
    finally:
        case.close()
    report = verify_case(package)
    assert report.events == before + 2
    imported = import_tree(package, tmp_path / "copy")
    assert imported.head_sha256 == report.head_sha256


def test_an_interrupted_multi_event_operation_leaves_none_of_its_events(package, test_operations):
    case = start_case(package)
    try:
        before = _states(case)
        inserts: list[str] = []

        def hook(label: str) -> None:
            if label == "insert_event":
                inserts.append(label)
                if len(inserts) == 2:
                    raise RuntimeError("killed between the two events")

        case.storage.fault_hook = hook
        with pytest.raises(RuntimeError):
            case.session.run("pause_and_resume", {"op": "pause_and_resume"})
        case.storage.fault_hook = None
        assert _states(case) == before and case.status()["state"] == INVESTIGATING
    finally:
        case.close()


def test_record_then_refuse_commits_the_events_raises_the_refusal_and_verifies(package, test_operations):
    case = start_case(package)
    try:
        before = case.status()["package_generation"]
        with pytest.raises(LedgerError) as refused:
            case.session.run("block_then_refuse", {"op": "block_then_refuse"})
        assert refused.value.code == LIMIT_EXCEEDED
        assert case.status()["state"] == BLOCKED
        assert case.status()["package_generation"] == before + 1
        # inside a batch the recorded event is kept too, and the batch goes on after the refusal
        case.transition(INVESTIGATING)
        with case.batch():
            with pytest.raises(LedgerError):
                case.session.run("block_then_refuse", {"op": "block_then_refuse"})
            case.transition(INVESTIGATING)
        assert [e["type"] for e in case.events(before + 1)] == ["case.transitioned"] * 3
    finally:
        case.close()
    assert verify_case(package).events == before + 4


def test_a_verify_of_a_history_cut_inside_a_multi_event_operation_names_the_missing_event(
        package, test_operations):
    case = start_case(package)
    try:
        case.session.run("pause_and_resume", {"op": "pause_and_resume"})
        head = case.status()["package_generation"]
    finally:
        case.close()
    conn = sqlite3.connect(package / "ledger.sqlite")
    conn.execute("DROP TRIGGER events_no_delete")
    conn.execute("DROP TRIGGER lifecycle_no_delete")
    conn.execute("DELETE FROM events WHERE seq = ?", (head,))
    conn.execute("DELETE FROM lifecycle WHERE seq = ?", (head,))
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(package)
    assert caught.value.code == INTEGRITY_ERROR
    assert caught.value.message.startswith(f"seq {head}: ")


def test_rules_see_the_resolved_event_time_clamped_to_the_previous_event(package, test_operations):
    case = Case.create(package, "BUG-1", at="2026-01-01T00:00:00Z")
    try:
        case.open_revision([{"statement": "h"}], 10, at="2026-02-01T00:00:00Z")
        case.transition(INVESTIGATING, at="2026-03-01T12:00:00Z")
        SEEN_TIMES.clear()
        case.session.run("record_time", {"op": "record_time"}, at="2026-01-01T00:00:00Z")  # steps back
        case.session.run("record_time", {"op": "record_time"}, at="2026-04-01T08:30:00.5Z")
        assert SEEN_TIMES == ["2026-03-01T12:00:00.000000Z", "2026-04-01T08:30:00.500000Z"]
    finally:
        case.close()


def test_a_registered_name_cannot_be_registered_twice():
    with pytest.raises(ValueError):
        register(Operation("reserve", "budget", (Argument("hypothesis", "hypothesis_id"),), "budget reserve"))


# --- the in-memory view -----------------------------------------------------------------
def _journal_case(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    case = Case.create(target, "RUN-1", at="2026-01-01T00:00:00Z")
    try:
        lines = (TRAJECTORIES / f"{name}.jsonl").read_bytes().split(b"\n")
        for _ in apply_journal(case, lines, budget=case.budget(BudgetConfig.load(EXAMPLE_BUDGET)), keep_going=True):
            pass
    finally:
        case.close()
    return target


def _memory_replay(path: Path) -> MemoryView:
    with Case.open(path) as case:
        bodies = case.query("SELECT seq, body FROM events ORDER BY seq")
        contents = {r["sha256"]: r["body"].encode() for r in case.query("SELECT sha256, body FROM contents")}
    replayer = Replayer(PackageSource(path, contents.get))
    for row in bodies:
        replayer.apply(row["seq"], row["body"].encode("utf-8"))
    return replayer.view


@pytest.mark.parametrize("name", ["django__django-11299", "sympy__sympy-13091"])
def test_the_memory_view_answers_every_question_exactly_as_the_sql_view(tmp_path, name):
    path = _journal_case(tmp_path, name)
    memory = _memory_replay(path)
    with Case.open(path) as case, case.session.read() as sql:
        revision = sql.case()["revision"]
        assert memory.case() == sql.case()
        assert memory.head() == sql.head()
        assert memory.revision(revision) == sql.revision(revision)
        assert memory.budget_head(revision) == sql.budget_head(revision)
        assert memory.policy_config(revision).policy == sql.policy_config(revision).policy
        assert memory.previous_policy(revision + 1) == sql.previous_policy(revision + 1)
        assert memory.budget_events_total() == sql.budget_events_total()
        assert memory.content_bytes_total() == sql.content_bytes_total()
        for stream in ("case", "budget"):
            assert memory.next_stream_seq(stream, revision) == sql.next_stream_seq(stream, revision)
        actions = case.query("SELECT revision, hypothesis_id, action_id FROM reservations")
        assert actions
        for row in actions:
            key = (row["revision"], row["hypothesis_id"], row["action_id"])
            assert memory.action(*key) == sql.action(*key), key
        keys = case.query("SELECT operation_key FROM events WHERE operation_key IS NOT NULL")
        assert all(memory.operation(k["operation_key"]) == sql.operation(k["operation_key"]) for k in keys)
        shas = [r["sha256"] for r in case.query("SELECT sha256 FROM contents")]
        assert all(memory.content_seen(sha) for sha in shas) and not memory.content_seen("0" * 64)


def test_replaying_into_memory_touches_no_sqlite(tmp_path, monkeypatch):
    path = _journal_case(tmp_path, "django__django-11299")
    with Case.open(path) as case:
        bodies = case.query("SELECT seq, body FROM events ORDER BY seq")
        contents = {r["sha256"]: r["body"].encode() for r in case.query("SELECT sha256, body FROM contents")}

    def no_sqlite(*args, **kwargs):
        raise AssertionError("the in-memory replay opened SQLite")

    monkeypatch.setattr(sqlite3, "connect", no_sqlite)
    replayer = Replayer(PackageSource(path, contents.get))
    for row in bodies:
        replayer.apply(row["seq"], row["body"].encode("utf-8"))
    assert replayer.count == len(bodies)
    assert replayer.view.head()[0] == len(bodies)


def test_a_case_used_from_another_thread_is_refused_before_anything_is_written(package):
    import threading

    case = start_case(package)
    try:
        budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
        budget.initialize()
        before = case.status()["package_generation"]
        errors: list[LedgerError] = []

        def other_thread() -> None:
            try:
                budget.reserve("H1", "q1", "source.read_context")
            except LedgerError as exc:
                errors.append(exc)

        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        assert [e.code for e in errors] == [INVALID_ARGUMENT]
        assert "another thread" in errors[0].message
        assert case.status()["package_generation"] == before
    finally:
        case.close()
