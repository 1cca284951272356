"""Hardening from public bug reports (issue 8): a success that did not persist (threads), a writer
lock leaked by an interrupt, writers stalled by a reader, a far-future time, memory growing with
the journal, usage exits on old click versions, and JSON lines cut by line readers."""

from __future__ import annotations

import builtins

import json
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import ledger._lock as lock_module
import ledger.storage as storage_module
from ledger import BudgetConfig, Case, CheckpointWarning, LedgerError, export_case, verify_case
from ledger._lock import WriterLock
from ledger.clock import format_utc
from ledger.config import AnalysisConfig
from ledger.errors import CONFIG_INVALID, INVALID_ARGUMENT

from conftest import EXAMPLE_BUDGET, REPO, make_package, run_cli, start_case


def generation(case: Case) -> int:
    return case.status()["package_generation"]


def lock_is_free(case: Case) -> bool:
    """True when nobody (this process included) holds the case's writer lock."""
    probe = WriterLock(case.storage._lock.path)
    try:
        return probe.try_acquire()
    finally:
        probe.release()


@pytest.fixture
def budget_case(package):
    case = start_case(package)
    budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
    budget.initialize()
    yield case, budget
    case.close()


# --- 1. a Case belongs to the thread that opened it --------------------------------------------
def in_thread(call):
    """Run ``call`` in a new thread; return what it returned or raised."""
    box = {}

    def run():
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            box["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(30)
    return box


def test_issue_example_thread_b_cannot_report_a_reserve_that_thread_a_batch_rolls_back(budget_case):
    case, budget = budget_case
    before = generation(case)
    inside, b_done = threading.Event(), threading.Event()
    reported: dict = {}

    def thread_b():
        inside.wait(10)
        try:
            reported["result"] = budget.reserve("H2", "b1", "source.find_text")
        except LedgerError as exc:
            reported["error"] = exc
        b_done.set()

    worker = threading.Thread(target=thread_b)
    worker.start()
    with pytest.raises(RuntimeError, match="thread A fails"):
        with case.batch():
            budget.reserve("H1", "a1", "source.read_context")
            inside.set()
            b_done.wait(10)
            raise RuntimeError("thread A fails")
    worker.join(10)
    assert "result" not in reported  # nothing was reported as done
    assert reported["error"].code == INVALID_ARGUMENT and "another thread" in reported["error"].message
    assert generation(case) == before  # A's batch rolled back and B wrote nothing
    assert [a["action_id"] for a in case.actions()] == []
    assert budget.reserve("H2", "b1", "source.find_text").seq == before + 1  # the owner goes on


def test_plain_sharing_without_a_batch_is_a_ledger_error_not_a_runtime_error(budget_case):
    case, budget = budget_case
    got = in_thread(lambda: budget.reserve("H1", "x1", "source.read_context"))
    assert isinstance(got["error"], LedgerError) and got["error"].code == INVALID_ARGUMENT


PUBLIC_CALLS = {
    "status": lambda c, b: c.status(),
    "query": lambda c, b: c.query("SELECT 1"),
    "balances": lambda c, b: c.balances(),
    "actions": lambda c, b: c.actions(),
    "events": lambda c, b: c.events(),
    "event_ref": lambda c, b: c.event_ref(1),
    "exported_paths": lambda c, b: c.exported_paths(),
    "input_identity": lambda c, b: c.input_identity(),
    "resolve_source_refs": lambda c, b: c.resolve_source_refs(["sources/app.py"]),
    "open_revision": lambda c, b: c.open_revision([{"statement": "x"}]),
    "transition": lambda c, b: c.transition("EVALUATING"),
    "batch": lambda c, b: c.batch().__enter__(),
    "close": lambda c, b: c.close(),
    "export_case": lambda c, b: export_case(c),
    "initialize": lambda c, b: b.initialize(),
    "reserve": lambda c, b: b.reserve("H1", "t1", "source.read_context"),
    "record_result": lambda c, b: b.record_result("H1", "t1", {"x": 1}),
    "settle": lambda c, b: b.settle("H1", "t1", 50, "r"),
    "fail": lambda c, b: b.fail("H1", "t1", "r"),
    "reject": lambda c, b: b.reject("H2", "r"),
    "snapshot": lambda c, b: b.snapshot(),
    "grant": lambda c, b: b.grant("H1", 5, "controller", "more", "g1"),
    "check": lambda c, b: b.check("H1", "source.read_context"),
    "price_signal": lambda c, b: b.price_signal("H1", "source.read_context"),
    "remaining": lambda c, b: b.remaining("H1"),
    "advice": lambda c, b: b.advice("H1"),
    "policy_changed": lambda c, b: c.budget(BudgetConfig.from_mapping({})).policy_changed(),
    "record_evidence": lambda c, b: b.record_evidence("H1", "t1", "E000001"),
    "request_test": lambda c, b: b.request_test("H1", "t1", "human", "test-1"),
    "evidence_query": lambda c, b: c.evidence().query("i1", {"actions": [{
        "operation_id": "op-1", "hypothesis_id": "H1", "action_id": "t1", "tool": "source.read_context",
        "args": {"path": "sources/app.py", "start_line": 1, "end_line": 1}}]}),
    "iter_query": lambda c, b: list(c.iter_query("SELECT 1")),
    "iter_events": lambda c, b: list(c.iter_events()),
}


@pytest.mark.parametrize("name", sorted(PUBLIC_CALLS))
def test_every_public_entry_point_refuses_a_thread_other_than_the_opener(budget_case, name):
    case, budget = budget_case
    before = generation(case)
    got = in_thread(lambda: PUBLIC_CALLS[name](case, budget))
    assert "value" not in got
    assert isinstance(got["error"], LedgerError) and got["error"].code == INVALID_ARGUMENT, got
    assert generation(case) == before and not case.storage.conn.in_transaction
    assert budget.reserve("H1", "own", "source.read_context").seq == before + 1  # still usable


def test_every_public_method_of_case_and_budget_manager_is_covered_by_the_thread_test():
    from ledger import BudgetManager

    public = {n for cls in (Case, BudgetManager) for n in vars(cls) if not n.startswith("_")
              and callable(getattr(cls, n)) and not isinstance(vars(cls)[n], classmethod)}
    public -= {"budget", "evidence", "to_dict"}  # budget() and evidence() only build a service; they read and write nothing
    assert public - set(PUBLIC_CALLS) == set()


def test_a_write_started_inside_a_read_is_refused_instead_of_ending_the_read(budget_case):
    case, budget = budget_case
    seen = []

    def progress(_n):
        if not seen:
            try:
                budget.reserve("H1", "n1", "source.read_context")
            except LedgerError as exc:
                seen.append(exc.code)

    export_case(case, progress=progress)
    assert seen == [INVALID_ARGUMENT]
    verify_case(case.path)


# --- 2. an interrupt at any point of lock, transaction and rollback ----------------------------
class Interrupts:
    """A connection wrapper raising ``KeyboardInterrupt`` before or after chosen statements."""

    def __init__(self, conn, plan):
        self._conn = conn
        self.plan = dict(plan)  # (statement prefix, "before"|"after") -> times to raise

    def _hit(self, sql, when):
        for (prefix, moment), count in self.plan.items():
            if moment == when and count and sql.lstrip().upper().startswith(prefix):
                self.plan[(prefix, moment)] = count - 1
                raise KeyboardInterrupt(f"{when} {prefix}")

    def execute(self, sql, *args):
        self._hit(sql, "before")
        cursor = self._conn.execute(sql, *args)
        self._hit(sql, "after")
        return cursor

    def __getattr__(self, name):
        return getattr(self._conn, name)


POINTS = [
    {("BEGIN IMMEDIATE", "before"): 1},
    {("BEGIN IMMEDIATE", "after"): 1},
    {("INSERT", "after"): 1},
    {("COMMIT", "before"): 1},
    {("INSERT", "after"): 1, ("ROLLBACK", "before"): 1},  # a second interrupt during the rollback
    {("INSERT", "after"): 1, ("ROLLBACK", "after"): 1},
]


@pytest.mark.parametrize("plan", POINTS, ids=lambda p: "+".join(f"{w}-{s}" for s, w in p))
def test_an_interrupt_at_any_point_of_a_write_leaves_no_lock_and_a_usable_connection(budget_case, plan):
    case, budget = budget_case
    before = generation(case)
    real = case.storage.conn
    case.storage.conn = Interrupts(real, plan)
    with pytest.raises(KeyboardInterrupt):
        budget.reserve("H1", "k1", "source.read_context")
    case.storage.conn = real
    assert lock_is_free(case)
    assert not real.in_transaction
    assert generation(case) == before  # nothing half-written
    result = budget.reserve("H1", "k1", "source.read_context")
    assert (result.seq, result.reused) == (before + 1, False)
    verify_case(case.path)


def test_an_interrupt_after_the_commit_keeps_the_durable_write_and_the_lock_free(budget_case):
    case, budget = budget_case
    before = generation(case)
    real = case.storage.conn
    case.storage.conn = Interrupts(real, {("COMMIT", "after"): 1})
    with pytest.raises(KeyboardInterrupt):
        budget.reserve("H1", "k1", "source.read_context")
    case.storage.conn = real
    assert lock_is_free(case) and not real.in_transaction
    assert budget.reserve("H1", "k1", "source.read_context").reused  # it was committed


@pytest.mark.parametrize("plan", [
    {("SAVEPOINT", "after"): 1},
    {("INSERT", "after"): 1, ("ROLLBACK TO", "before"): 1},
    {("INSERT", "after"): 1, ("RELEASE", "before"): 1},
], ids=["after-savepoint", "interrupted-rollback-to", "interrupted-release"])
def test_an_interrupt_swallowed_inside_a_batch_never_commits_half_an_operation(budget_case, plan):
    case, budget = budget_case
    before = generation(case)
    real = case.storage.conn
    with case.batch():
        case.storage.conn = Interrupts(real, plan)
        try:
            budget.reserve("H1", "k1", "source.read_context")
        except KeyboardInterrupt:
            pass  # a caller that swallows the interrupt and goes on
        case.storage.conn = real
        budget.reserve("H2", "k2", "source.read_context")
    assert lock_is_free(case) and not real.in_transaction
    assert [a["action_id"] for a in case.actions()] == ["k2"]
    assert generation(case) == before + 1
    verify_case(case.path)


def hold_lock_elsewhere(path: Path, seconds: float) -> WriterLock:
    """Another holder of the writer lock, released by a timer after ``seconds``."""
    other = WriterLock(path)
    assert other.try_acquire()
    threading.Timer(seconds, other.release).start()
    return other


def test_issue_example_an_interrupt_right_after_the_hand_over_leaks_no_lock(budget_case, monkeypatch):
    case, budget = budget_case

    class InterruptedCondition(threading.Condition):
        def wait_for(self, predicate, timeout=None):
            result = super().wait_for(predicate, timeout)
            if result:
                raise KeyboardInterrupt("right after the hand-over")
            return result

    monkeypatch.setattr(lock_module.threading, "Condition", InterruptedCondition)
    hold_lock_elsewhere(case.storage._lock.path, 0.2)
    with pytest.raises(KeyboardInterrupt):
        budget.reserve("H1", "k1", "source.read_context")
    monkeypatch.undo()
    assert lock_is_free(case)
    assert budget.reserve("H1", "k1", "source.read_context").reused is False


@pytest.mark.parametrize("point", ["open", "flock", "after-flock"])
def test_an_interrupt_inside_the_uncontended_acquire_leaks_no_lock(budget_case, monkeypatch, point):
    case, budget = budget_case
    real_flock = lock_module.fcntl.flock

    def flock(fd, op):
        if point == "flock":
            raise KeyboardInterrupt
        real_flock(fd, op)
        if point == "after-flock" and op & lock_module.fcntl.LOCK_EX:
            raise KeyboardInterrupt

    def opened(*args, **kwargs):
        handle = builtins.open(*args, **kwargs)
        if point == "open":
            raise KeyboardInterrupt  # the handle is dropped: closing it must release everything
        return handle

    monkeypatch.setattr(lock_module.fcntl, "flock", flock)
    monkeypatch.setattr(lock_module, "open", opened, raising=False)
    with pytest.raises(KeyboardInterrupt):
        budget.reserve("H1", "k1", "source.read_context")
    monkeypatch.undo()
    assert lock_is_free(case)
    assert budget.reserve("H1", "k1", "source.read_context").reused is False


def test_a_wait_abandoned_by_an_interrupt_releases_what_the_helper_wins_later(tmp_path, monkeypatch):
    path = tmp_path / "lock"
    hold_lock_elsewhere(path, 0.3)
    mine = WriterLock(path)

    class Interrupted(threading.Condition):
        def wait_for(self, predicate, timeout=None):
            raise KeyboardInterrupt("before the hand-over")

    monkeypatch.setattr(lock_module.threading, "Condition", Interrupted)
    with pytest.raises(KeyboardInterrupt):
        mine.acquire(5000)
    monkeypatch.undo()
    mine.release()
    time.sleep(0.6)  # the other holder let go; the abandoned helper won and must have let go too
    assert WriterLock(path).try_acquire()


# --- 3. a reader never stalls writers; close() says what it could not checkpoint ----------------
def test_issue_example_writers_beside_an_open_reader_run_no_blocking_checkpoint(package, monkeypatch):
    case = start_case(package, units=10**6)
    budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
    budget.initialize()
    monkeypatch.setattr(storage_module, "WAL_RESTART_BYTES", 0)  # as if the WAL were past 8 MiB
    reader = sqlite3.connect(case.storage.path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM balances").fetchone()
    statements: list[str] = []
    case.storage.conn.set_trace_callback(statements.append)
    started = time.monotonic()
    for n in range(20):
        budget.reserve("H1", f"w{n}", "source.read_context")
        budget.record_result("H1", f"w{n}", {"n": n})
        budget.settle("H1", f"w{n}", 100, "new")
    elapsed = time.monotonic() - started
    case.storage.conn.set_trace_callback(None)
    checkpoints = [s for s in statements if "wal_checkpoint" in s]
    assert checkpoints and all("PASSIVE" in s for s in checkpoints)  # never RESTART or TRUNCATE
    assert not any("busy_timeout" in s for s in statements)
    assert elapsed < len(checkpoints) * 0.2  # the old code paid 200 ms per commit here
    reader.execute("ROLLBACK")
    reader.close()
    assert case.close() is None  # the reader has left: closing empties the log


def test_close_reports_a_checkpoint_a_reader_prevented_and_a_later_close_finishes_it(package):
    case = start_case(package)
    reader = sqlite3.connect(case.storage.path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM balances").fetchall()
    case.transition("EVALUATING")  # a write after the reader's snapshot
    started = time.monotonic()
    with pytest.warns(CheckpointWarning, match="another connection is reading"):
        report = case.close()
    assert time.monotonic() - started < 1.0  # did not wait the busy timeout
    assert "was not emptied" in report
    assert Path(str(case.storage.path) + "-wal").stat().st_size > 0
    reader.execute("ROLLBACK")
    reader.close()
    again = Case.open(package)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        assert again.close() is None
    wal = Path(str(again.storage.path) + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0


def test_the_cli_prints_the_incomplete_checkpoint_as_a_warning(package):
    start_case(package).close()
    reader = sqlite3.connect(package / "ledger.sqlite", isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM balances").fetchall()
    try:
        done = run_cli("state", str(package), "EVALUATING")
    finally:
        reader.execute("ROLLBACK")
        reader.close()
    assert done.returncode == 0, done.stderr
    assert b"warning: the write-ahead log" in done.stderr and b"Traceback" not in done.stderr


# --- 7. a far-future time is refused ----------------------------------------------------------
def soon(seconds: float) -> str:
    return format_utc(datetime.now(timezone.utc) + timedelta(seconds=seconds))


def test_issue_example_a_far_future_at_is_refused_and_later_times_stay_right(budget_case):
    case, budget = budget_case
    before = generation(case)
    with pytest.raises(LedgerError) as caught:
        budget.reserve("H1", "a1", "source.read_context", at="2062-01-05T10:00:00Z")
    assert caught.value.code == INVALID_ARGUMENT and "at_future_tolerance_ms" in caught.value.message
    assert generation(case) == before
    result = budget.reserve("H1", "a1", "source.read_context", at="2026-01-05T10:00:00Z")
    stamped = case.events()[-1]["created_at"]
    assert result.seq == before + 1 and stamped < "2030"


@pytest.mark.parametrize("call", [
    lambda c, b, at: b.initialize(at=at),
    lambda c, b, at: b.reject("H2", "no", at=at),
    lambda c, b, at: c.transition("EVALUATING", at=at),
    lambda c, b, at: c.open_revision([{"statement": "s"}], at=at),
])
def test_every_api_path_that_takes_at_refuses_a_far_future_one(budget_case, call):
    case, budget = budget_case
    before = generation(case)
    with pytest.raises(LedgerError) as caught:
        call(case, budget, soon(3600))
    assert caught.value.code == INVALID_ARGUMENT and generation(case) == before


def test_create_with_a_far_future_at_makes_no_folder(tmp_path):
    with pytest.raises(LedgerError) as caught:
        Case.create(tmp_path / "new", "C1", at="2062-01-05T10:00:00Z")
    assert caught.value.code == INVALID_ARGUMENT
    assert not (tmp_path / "new").exists()


def test_the_tolerance_is_configurable_and_past_times_always_pass(package):
    strict = AnalysisConfig.from_mapping({"limits": {"at_future_tolerance_ms": 0}})
    case = Case.create(package, "C1", analysis_config=strict, at="1999-01-01T00:00:00Z")
    try:
        with pytest.raises(LedgerError):
            case.open_revision([{"statement": "s"}], at=soon(5))
        case.open_revision([{"statement": "s"}], at="2000-01-01T00:00:00Z")
        assert case.events()[-1]["created_at"] == "2000-01-01T00:00:00.000000Z"
    finally:
        case.close()
    default = start_case(package.parent / "other")
    try:
        default.transition("EVALUATING", at=soon(60))  # within the default five minutes
    finally:
        default.close()


def test_the_tolerance_must_be_a_non_negative_integer(tmp_path):
    for bad in ("-1", "1.5", "true"):
        path = tmp_path / f"a{bad}.toml"
        path.write_text(f"[limits]\nat_future_tolerance_ms = {bad}\n", encoding="utf-8")
        with pytest.raises(LedgerError) as caught:
            AnalysisConfig.load(path)
        assert caught.value.code == CONFIG_INVALID


def test_cli_at_and_journal_at_refuse_a_far_future_time(package, tmp_path):
    start_case(package).close()
    done = run_cli("state", str(package), "EVALUATING", "--at", "2062-01-05T10:00:00Z")
    assert done.returncode == 1 and done.stderr.startswith(b"error: INVALID_ARGUMENT: 'at' 2062-01-05")
    journal = tmp_path / "j.jsonl"
    journal.write_text(json.dumps({"op": "transition", "to": "EVALUATING", "at": "2062-01-05T10:00:00Z"})
                       + "\n" + json.dumps({"op": "transition", "to": "EVALUATING"}) + "\n", encoding="utf-8")
    done = run_cli("apply", str(package), str(journal), "--keep-going")
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    assert [x["ok"] for x in lines] == [False, True]
    assert lines[0]["error"]["code"] == INVALID_ARGUMENT
    with Case.open(package) as case:
        assert case.events()[-1]["created_at"] < "2030"


# --- 8. apply streams the journal ------------------------------------------------------------
PEAK_RSS = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def peak_rss_kib(*args: str) -> int:
    """Peak resident set (KiB) of ``ledger ARGS`` run in its own process."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, sys.executable, "-m", "ledger_cli", *args],
                          capture_output=True, check=True, timeout=300)
    return int(done.stdout)


def write_journal(path: Path, first: str, filler: bytes, total_bytes: int) -> Path:
    with open(path, "wb") as out:
        out.write(first.encode("utf-8") + b"\n")
        chunk = filler * (1024 * 1024 // len(filler))
        for _ in range(total_bytes // len(chunk)):
            out.write(chunk)
    return path


@pytest.mark.slow
def test_issue_example_peak_memory_of_apply_does_not_grow_with_the_journal(tmp_path):
    make_package(tmp_path / "c")
    start_case(tmp_path / "c").close()
    failing = '{"op": "reserve", "hypothesis": "H9", "action_id": "x", "action": "source.find_text"}'
    line = b'{"op": "snapshot", "at": "2020-01-01T00:00:00Z"}\n'
    small = write_journal(tmp_path / "small.jsonl", failing, line, 0)
    large = write_journal(tmp_path / "large.jsonl", failing, line, 120 * 1024 * 1024)
    spaces = write_journal(tmp_path / "spaces.jsonl", '{"op": "initialize"}', b" " * 1023 + b"\n", 120 * 1024 * 1024)
    long_line = write_journal(tmp_path / "long.jsonl", failing, b"x" * 1024, 120 * 1024 * 1024)
    try:
        base = peak_rss_kib("apply", str(tmp_path / "c"), str(small))
        for journal in (large, spaces, long_line):  # first line fails; succeeds; one huge second line
            peak = peak_rss_kib("apply", str(tmp_path / "c"), str(journal))
            assert peak <= 1.5 * base, (journal.name, peak, base)
    finally:
        for journal in (large, spaces, long_line):  # pytest keeps recent tmp folders: free the disk
            journal.unlink()


def test_read_lines_streams_and_counts_an_over_long_line_once(monkeypatch):
    import io

    import ledger.journal as journal_module

    monkeypatch.setattr(journal_module, "LINE_BYTES_MAX", 8)
    data = b'{"a":1}\n' + b"y" * 30 + b"\nlast"
    consumed: list[int] = []
    lines = list(journal_module.read_lines(io.BytesIO(data), on_bytes=consumed.append))
    assert lines == [b'{"a":1}', b"y" * 9, b"last"]
    assert sum(consumed) == len(data)


def test_a_long_first_line_fails_alone_and_stops_the_run(package, tmp_path):
    start_case(package).close()
    journal = tmp_path / "j.jsonl"
    journal.write_bytes(b"x" * (5 * 1024 * 1024) + b"\n" + b'{"op": "initialize"}\n')
    done = run_cli("apply", str(package), str(journal))
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    assert [(x["line"], x["ok"]) for x in lines] == [(1, False)]
    assert lines[0]["error"]["code"] == "LIMIT_REACHED"
    done = run_cli("apply", str(package), str(journal), "--keep-going")
    assert [(x["line"], x["ok"]) for x in map(json.loads, done.stdout.splitlines())] == [(1, False), (2, True)]


# --- 10. usage exits on every allowed click version ---------------------------------------------
@pytest.mark.parametrize("args", [[], ["budget"], ["revision"]])
def test_a_bare_group_is_a_usage_error_with_its_help(args):
    done = run_cli(*args)
    assert done.returncode == 2
    assert b"Usage:" in done.stderr and b"Traceback" not in done.stderr


def test_the_lowest_deps_script_exists_and_is_executable():
    script = REPO / ".ci" / "lowest-deps"
    assert script.stat().st_mode & 0o111
    text = script.read_text(encoding="utf-8")
    assert "--resolution lowest-direct" in text and 'not slow and not torture' in text


# --- 11. JSON lines survive line readers -------------------------------------------------------
BREAKS = "a\u2028b\u2029c\x85d\x0be\x0cf\x1cg\x1dh\x1ei\rj\nk"


def test_issue_example_apply_result_lines_split_into_one_line_each(package, tmp_path):
    Case.create(package, "C1").close()
    journal = tmp_path / "j.jsonl"
    rows = [{"op": "open_revision", "hypotheses": [{"statement": BREAKS}, {"statement": "x\u2029"}]},
            {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"},
            {"op": "reserve", "hypothesis": "H1", "action_id": "bad\u2028id", "action": "source.find_text"}]
    journal.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    done = run_cli("apply", str(package), str(journal), "--keep-going")
    text = done.stdout.decode("utf-8")
    lines = text.splitlines()
    assert len(lines) == 3
    parsed = [json.loads(line) for line in lines]
    assert [h["statement"] for h in parsed[0]["result"]["hypotheses"]] == [BREAKS, "x\u2029"]
    assert parsed[2]["error"]["code"] == "INVALID_ID"
    for raw in ("\u2028", "\u2029", "\x85"):
        assert raw not in text


def test_every_json_output_escapes_line_breaks(package):
    start_case(package).close()
    done = run_cli("sql", str(package), "SELECT char(8232) AS a, char(8233) AS b, char(133) AS c", "--json")
    text = done.stdout.decode("utf-8")
    assert len(text.splitlines()) == 1
    assert json.loads(text) == [{"a": "\u2028", "b": "\u2029", "c": "\x85"}]
    done = run_cli("events", str(package), "--json", "--body")
    assert len(done.stdout.decode("utf-8").splitlines()) == 1


def test_dumps_keeps_values_and_one_line_for_any_text():
    from hypothesis import given, strategies as st

    from ledger_cli._output import dumps

    @given(st.lists(st.text(), max_size=5))
    def check(values):
        text = dumps(values)
        assert len(text.splitlines()) == 1 and json.loads(text) == values

    check()
