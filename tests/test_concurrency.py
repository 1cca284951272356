"""Concurrency, the writer queue and interrupted writes, with real processes (docs/architecture.md and docs/concepts.md).

Every multi-process test starts its workers with the ``spawn`` start method (a fresh
interpreter that imports this module), synchronizes them on a ``Barrier`` or an
``Event`` and collects what each one saw through a ``Queue``; nothing is mocked.
The expected numbers are computed here from the rules of docs/concepts.md, independently of
``ledger.rules``.
"""

from __future__ import annotations

import fcntl
import hashlib
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
import threading
from pathlib import Path

import pytest

from conftest import EXAMPLE_BUDGET, logical_dump, make_package, run_cli, start_case
from ledger import (AnalysisConfig, BudgetConfig, Case, CheckpointWarning, LedgerError, verify_case, export_case, import_tree)
from ledger.ground.errors import (INVALID_ARGUMENT)
LEDGER = "ledger.sqlite"
SPAWN = multiprocessing.get_context("spawn")
#: Upper bound for anything a child process does, so a hang fails instead of blocking CI.
CHILD_TIMEOUT_S = 60

# The example policy (config/budget.example.toml), restated so expectations do not
# come from the library under test.
EXAMPLE_COSTS = {"source.read_context": 5, "source.find_text": 10, "database.lookup": 10, "research.lookup": 20}
MAX_REWARD_BPS = 8000
NEW_EVIDENCE_SCORE = 100


def expected_reward(cost: int, novelty: int, semantic: int) -> int:
    """docs/concepts.md: ``min(cost * max_reward_bps * information // 1_000_000, cost - 1)``."""
    information = min(novelty, semantic)
    return min(cost * MAX_REWARD_BPS * information // 1_000_000, cost - 1)


def ledger_rows(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows of one query on a read-only connection of its own."""
    conn = sqlite3.connect(f"file:{path / LEDGER}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def balances(path: Path) -> dict[str, dict]:
    conn = sqlite3.connect(f"file:{path / LEDGER}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return {row["hypothesis_id"]: dict(row) for row in conn.execute("SELECT * FROM balances WHERE revision = 1")}
    finally:
        conn.close()


def assert_single_unforked_chain(path: Path) -> int:
    """seq 1..N contiguous, each parent is the previous hash, each hash is the stored body's."""
    rows = ledger_rows(path, "SELECT seq, sha256, parent_sha256, body FROM events ORDER BY seq")
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    previous = "0" * 64
    for seq, sha, parent, body in rows:
        assert parent == previous, f"event {seq} does not link to event {seq - 1}"
        assert hashlib.sha256(body.encode("utf-8")).hexdigest() == sha, f"event {seq} does not match its hash"
        previous = sha
    return len(rows)


def before_head(dump: list) -> int:
    """The newest ``seq`` in a :func:`logical_dump`."""
    return max(row[0] for table, rows in dump if table == "events" for row in rows)


# --- process plumbing ---------------------------------------------------------------
def run_workers(target, args_per_worker: list[tuple]) -> list:
    """Start one spawned process per ``args`` tuple, all released together by a barrier.

    Each worker is called as ``target(*args, barrier, queue)`` and must put exactly one
    message on ``queue``. Returns the messages (in completion order).
    """
    sync = SPAWN.Barrier(len(args_per_worker))
    queue = SPAWN.Queue()
    processes = [SPAWN.Process(target=target, args=(*args, sync, queue), daemon=True) for args in args_per_worker]
    for process in processes:
        process.start()
    messages = []
    try:
        for _ in processes:
            messages.append(queue.get(timeout=CHILD_TIMEOUT_S))
    finally:
        for process in processes:
            process.join(timeout=CHILD_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()
    assert [p.exitcode for p in processes] == [0] * len(processes)
    return messages


def _failure(exc: BaseException) -> dict:
    return {"kind": "crash", "error": repr(exc), "traceback": traceback.format_exc()}


# --- workers (module level: spawned interpreters import them by name) ---------------
def _worker_reserve_same_actions(path: str, rounds: int, barrier, queue) -> None:
    """Open the case, then in each round reserve the round's action right after the barrier."""
    try:
        outcomes = []
        case = Case.open(path)
        try:
            budget = case.budget()
            for r in range(rounds):
                barrier.wait(timeout=CHILD_TIMEOUT_S)
                result = budget.reserve(f"H{r + 1}", f"q-{r:04d}", "source.read_context")
                outcomes.append({"reused": result.reused, "seq": result.seq, "action": result.action,
                                 "spent": result.state[f"H{r + 1}"]["spent_units"]})
        finally:
            case.close()
        queue.put({"kind": "ok", "pid": os.getpid(), "outcomes": outcomes})
    except BaseException as exc:  # report everything, the parent asserts
        queue.put(_failure(exc))


def documented_start():
    """The ``start(path)`` function of docs/investigator.md ("Starting or resuming a case"), as printed."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "investigator.md").read_text(encoding="utf-8")
    code = text.split("## Starting or resuming a case", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, "docs/investigator.md", "exec"), namespace)
    return namespace["start"]


def _worker_start_fresh_cases(folders: list[str], barrier, queue) -> None:
    """Start (or resume) each fresh case with the documented function right after the barrier."""
    try:
        start, outcomes = documented_start(), []
        for folder in folders:
            barrier.wait(timeout=CHILD_TIMEOUT_S)
            try:
                case, budget = start(folder)
                outcomes.append(("ok", budget.remaining("H1").values["remaining"]))
                case.close()
            except LedgerError as exc:
                outcomes.append((exc.code, exc.message))
        queue.put({"kind": "ok", "outcomes": outcomes})
    except BaseException as exc:  # report everything, the parent asserts
        queue.put(_failure(exc))


def cycle_plan(hypothesis: str, cycles: int) -> list[dict]:
    """The reserve/record/settle cycles one worker runs on ``hypothesis`` (deterministic)."""
    number = int(hypothesis[1:])
    actions = list(EXAMPLE_COSTS)
    plan = []
    for i in range(cycles):
        plan.append({
            "action_id": f"{hypothesis}-a{i:03d}",
            "action": actions[(i + number) % len(actions)],
            # distinct payload per cycle and hypothesis: novelty is always new_evidence_score
            "evidence": {"hypothesis": hypothesis, "cycle": i, "finding": f"observation {number}.{i}"},
            # > low_information_threshold (20), so no account is abandoned on the way
            "semantic": 21 + (7 * i + 13 * number) % 80,
        })
    return plan


def _worker_cycles(path: str, hypothesis: str, cycles: int, barrier, queue) -> None:
    """Run ``cycles`` reserve → record_result → settle on one hypothesis, reporting every error.

    A refused step is retried (at most 3 times) so that one LEDGER_BUSY does not
    cascade into ACTION_PENDING/UNKNOWN_ACTION noise; every refusal is still reported.
    """
    errors: list[dict] = []
    slowest = 0.0
    try:
        case = Case.open(path)
        try:
            budget = case.budget()
            barrier.wait(timeout=CHILD_TIMEOUT_S)
            for step in cycle_plan(hypothesis, cycles):
                calls = [
                    ("reserve", lambda s=step: budget.reserve(hypothesis, s["action_id"], s["action"])),
                    ("record_result", lambda s=step: budget.record_result(
                        hypothesis, s["action_id"], s["evidence"], source_refs=["sources/app.py"])),
                    ("settle", lambda s=step: budget.settle(hypothesis, s["action_id"], s["semantic"], "assessed")),
                ]
                for name, call in calls:
                    for _attempt in range(3):
                        started = time.monotonic()
                        try:
                            call()
                            slowest = max(slowest, time.monotonic() - started)
                            break
                        except LedgerError as exc:
                            errors.append({"op": name, "action_id": step["action_id"], "code": exc.code,
                                           "message": exc.message,
                                           "waited_s": round(time.monotonic() - started, 3)})
        finally:
            case.close()
        queue.put({"kind": "ok", "hypothesis": hypothesis, "errors": errors, "slowest_s": slowest})
    except BaseException as exc:
        queue.put({**_failure(exc), "hypothesis": hypothesis, "errors": errors})


def _worker_hold_writer_lock(path: str, how: str, held, release, queue) -> None:
    """Hold the case's writer lock (in one of three ways) until ``release`` is set."""
    try:
        root = Path(path)
        if how == "storage.write":
            case = Case.open(root)
            try:
                with case.storage.write():
                    held.set()
                    release.wait(CHILD_TIMEOUT_S)
            finally:
                case.close()
        elif how == "flock on the sidecar":
            fd = os.open(root / (LEDGER + "-lock"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                held.set()
                release.wait(CHILD_TIMEOUT_S)
            finally:
                os.close(fd)
        elif how == "plain SQLite BEGIN IMMEDIATE":
            conn = sqlite3.connect(root / LEDGER, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                held.set()
                release.wait(CHILD_TIMEOUT_S)
                conn.execute("ROLLBACK")
            finally:
                conn.close()
        else:
            raise ValueError(how)
        queue.put({"kind": "ok"})
    except BaseException as exc:
        queue.put(_failure(exc))


def _worker_long_reader(path: str, ready, release, queue) -> None:
    """Keep one read transaction open with a half-consumed cursor, reading until released."""
    try:
        conn = sqlite3.connect(f"file:{Path(path) / LEDGER}?mode=ro", uri=True, isolation_level=None)
        try:
            conn.execute("BEGIN")
            cursor = conn.execute("SELECT seq FROM events ORDER BY seq")
            first = [cursor.fetchone()[0] for _ in range(2)]
            snapshot_count = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
            ready.set()
            reads, counts = 0, set()
            while True:  # at least once after ready, however late this process runs again (a loaded machine)
                counts.add(conn.execute("SELECT COUNT(*) FROM events").fetchone()[0])
                conn.execute("SELECT * FROM balances").fetchall()
                reads += 1
                if release.is_set():
                    break
                time.sleep(0.005)
            rest = [row[0] for row in cursor.fetchall()]
            conn.execute("COMMIT")
            after = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        finally:
            conn.close()
        queue.put({"kind": "ok", "first": first, "rest": rest, "snapshot_count": snapshot_count,
                   "counts": sorted(counts), "reads": reads, "after": after})
    except BaseException as exc:
        queue.put(_failure(exc))


def _worker_write_flat_out(path: str, hypothesis: str, ready, release, queue) -> None:
    """Append reserve/record/settle cycles on ``hypothesis`` back to back until released (at most 20 s)."""
    try:
        done, errors, slowest = 0, [], 0.0
        case = Case.open(path)
        try:
            budget = case.budget()
            ready.set()
            deadline = time.monotonic() + 20
            i = 0
            while not release.is_set() and time.monotonic() < deadline:
                action_id = f"hog-{i:05d}"
                try:
                    for call in (lambda: budget.reserve(hypothesis, action_id, "source.find_text"),
                                 lambda: budget.record_result(hypothesis, action_id, {"hog": hypothesis, "i": i}),
                                 lambda: budget.settle(hypothesis, action_id, 100, "assessed")):
                        started = time.monotonic()
                        call()
                        slowest = max(slowest, time.monotonic() - started)
                        done += 1
                except LedgerError as exc:
                    errors.append(exc.code)
                    break
                i += 1
        finally:
            case.close()
        queue.put({"kind": "ok", "done": done, "errors": errors, "slowest_s": slowest})
    except BaseException as exc:
        queue.put(_failure(exc))


def _start_single(target, *args):
    """Start one spawned worker with two events (``ready``/``held`` and ``release``) and a queue."""
    ready, release, queue = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    process = SPAWN.Process(target=target, args=(*args, ready, release, queue), daemon=True)
    process.start()
    return process, ready, release, queue


def _finish_single(process, release, queue) -> dict:
    release.set()
    message = queue.get(timeout=CHILD_TIMEOUT_S)
    process.join(timeout=CHILD_TIMEOUT_S)
    assert process.exitcode == 0
    return message


# --- 1. concurrent identical calls ------------------------------------------------------
@pytest.mark.slow
def test_four_processes_sending_the_same_reservation_at_once_produce_exactly_one_debit(tmp_path):
    path = make_package(tmp_path / "case")
    rounds = 5
    case = start_case(path, hypotheses=rounds, units=100)
    case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    case.close()
    before = ledger_rows(path, "SELECT MAX(seq) FROM events")[0][0]

    messages = run_workers(_worker_reserve_same_actions, [(str(path), rounds)] * 4)

    assert [m for m in messages if m["kind"] != "ok"] == []
    for r in range(rounds):
        outcomes = [m["outcomes"][r] for m in messages]
        assert sorted(o["reused"] for o in outcomes) == [False, True, True, True], f"round {r}"
        assert len({o["seq"] for o in outcomes}) == 1, f"round {r}: {outcomes}"
        assert all(o["action"] == outcomes[0]["action"] for o in outcomes)
        assert all(o["spent"] == 5 for o in outcomes)
    # exactly one event and one reservation per round, one debit per hypothesis
    assert ledger_rows(path, "SELECT type, COUNT(*) FROM events WHERE seq > ? GROUP BY type", (before,)) == [
        ("budget.reserved", rounds)]
    assert ledger_rows(path, "SELECT COUNT(*) FROM reservations") == [(rounds,)]
    for r in range(rounds):
        row = balances(path)[f"H{r + 1}"]
        assert (row["spent_units"], row["remaining_units"], row["pending_action_id"]) == (5, 95, f"q-{r:04d}")
    assert_single_unforked_chain(path)
    verify_case(path)


@pytest.mark.slow  # processes racing over 40 fresh folders: the slow lane (.ci/run) runs it
def test_processes_starting_one_fresh_case_at_once_with_the_documented_function_all_get_it(tmp_path):
    """Creating one case is serialized by its writer lock from the first look at the folder to the
    first commit: the others wait (no LEDGER_BUSY before busy_timeout_ms), then see the whole case
    (CASE_EXISTS, then open), never another init's logs or half-made file (STORAGE_ERROR, a lost
    ledger's CASE_EXISTS, LEDGER_MISSING after CASE_EXISTS)."""
    folders = [str(tmp_path / f"case-{n:02d}") for n in range(40)]
    messages = run_workers(_worker_start_fresh_cases, [(folders,)] * 6)
    assert [m for m in messages if m["kind"] != "ok"] == []
    assert [o for m in messages for o in m["outcomes"] if o != ("ok", 300)] == []
    for folder in folders:
        assert ledger_rows(Path(folder), "SELECT type, COUNT(*) FROM events WHERE type IN ('case.created', "
                           "'revision.opened', 'budget.initialized') GROUP BY type ORDER BY type") == [
            ("budget.initialized", 1), ("case.created", 1), ("revision.opened", 1)]
        assert_single_unforked_chain(Path(folder))
    verify_case(folders[0])


# --- 2. many writers, no LEDGER_BUSY, exact balances -----------------------------------
@pytest.mark.slow
def test_eight_processes_running_reserve_record_settle_cycles_keep_exact_balances_and_one_chain(tmp_path):
    path = make_package(tmp_path / "case")
    workers, cycles, units = 8, 25, 10_000
    case = start_case(path, hypotheses=workers, units=units)
    case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    case.close()
    events_before = ledger_rows(path, "SELECT COUNT(*) FROM events")[0][0]

    started = time.monotonic()
    messages = run_workers(_worker_cycles, [(str(path), f"H{k}", cycles) for k in range(1, workers + 1)])
    elapsed = time.monotonic() - started

    crashes = [m for m in messages if m["kind"] != "ok"]
    assert crashes == []
    errors = [{"hypothesis": m["hypothesis"], **e} for m in messages for e in m["errors"]]
    # default busy timeout (5000 ms): the fair writer queue must never refuse anyone
    assert errors == [], f"{len(errors)} refusals in {elapsed:.1f} s, e.g. {errors[:3]}"

    table = balances(path)
    for k in range(1, workers + 1):
        h = f"H{k}"
        plan = cycle_plan(h, cycles)
        spent = sum(EXAMPLE_COSTS[s["action"]] for s in plan)
        rewarded = sum(expected_reward(EXAMPLE_COSTS[s["action"]], NEW_EVIDENCE_SCORE, s["semantic"]) for s in plan)
        assert table[h] == {
            "revision": 1, "hypothesis_id": h, "initial_units": units, "granted_units": 0,
            "spent_units": spent, "rewarded_units": rewarded, "remaining_units": units - spent + rewarded,
            "status": "investigating", "terminal_reason": None, "pending_action_id": None,
            "low_information_streak": 0, "settled_actions": cycles, "failed_actions": 0,
            "statement": f"hypothesis {k}",
        }
        actions = ledger_rows(path, "SELECT action_id, action, cost_units, status, novelty_score, semantic_score, "
                                    "reward_units FROM actions WHERE hypothesis_id = ? ORDER BY action_id", (h,))
        assert actions == [
            (s["action_id"], s["action"], EXAMPLE_COSTS[s["action"]], "settled", NEW_EVIDENCE_SCORE, s["semantic"],
             expected_reward(EXAMPLE_COSTS[s["action"]], NEW_EVIDENCE_SCORE, s["semantic"])) for s in plan
        ]

    total = assert_single_unforked_chain(path)
    assert total == events_before + workers * cycles * 3
    assert ledger_rows(path, "SELECT type, COUNT(*) FROM events WHERE seq > ? GROUP BY type ORDER BY type",
                       (events_before,)) == [("budget.reserved", workers * cycles),
                                             ("budget.result_recorded", workers * cycles),
                                             ("budget.settled", workers * cycles)]
    assert ledger_rows(path, "SELECT COUNT(*) FROM contents") == [(workers * cycles,)]
    verify_case(path)


@pytest.mark.slow
def test_a_writer_is_not_starved_by_other_processes_writing_flat_out(tmp_path):
    path = make_package(tmp_path / "case")
    hogs = 3
    case = start_case(path, hypotheses=hogs + 1, units=1_000_000)
    case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    case.close()
    hog_processes = [_start_single(_worker_write_flat_out, str(path), f"H{k}") for k in range(2, hogs + 2)]
    try:
        for _process, ready, _release, _queue in hog_processes:
            assert ready.wait(CHILD_TIMEOUT_S)
        time.sleep(0.2)  # let the hogs get going
        victim = Case.open(path, analysis_config=AnalysisConfig(storage={"busy_timeout_ms": 1000}))
        try:
            budget = victim.budget()
            refusals, waits = [], []
            for step in cycle_plan("H1", 10):
                for call in (lambda: budget.reserve("H1", step["action_id"], step["action"]),
                             lambda: budget.record_result("H1", step["action_id"], step["evidence"]),
                             lambda: budget.settle("H1", step["action_id"], step["semantic"], "assessed")):
                    for _attempt in range(20):
                        started = time.monotonic()
                        try:
                            call()
                            waits.append(time.monotonic() - started)
                            break
                        except LedgerError as exc:
                            refusals.append((exc.code, round(time.monotonic() - started, 3)))
        finally:
            victim.close()
        for _process, _ready, release, _queue in hog_processes:
            release.set()
        reports = [_finish_single(process, release, queue) for process, _ready, release, queue in hog_processes]
    finally:
        for process, _ready, release, _queue in hog_processes:
            release.set()
            process.join(timeout=CHILD_TIMEOUT_S)
    assert [r["kind"] for r in reports] == ["ok"] * hogs, reports
    assert refusals == [], f"starved {len(refusals)} times with busy_timeout_ms = 1000: {refusals[:5]}"
    assert [r["errors"] for r in reports] == [[]] * hogs, reports
    # a fair queue serves every writer within a few transactions of the others
    slowest = {"H1": max(waits), **{f"H{k}": r["slowest_s"] for k, r in enumerate(reports, start=2)}}
    assert max(slowest.values()) < 0.5, f"slowest single write per process (s): {slowest}; ops: {[r['done'] for r in reports]}"
    assert min(r["done"] for r in reports) >= 9
    assert balances(path)["H1"]["settled_actions"] == 10
    assert_single_unforked_chain(path)


# --- 3. LEDGER_BUSY ------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["storage.write", "flock on the sidecar", "plain SQLite BEGIN IMMEDIATE"])
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_writer_refused_after_its_busy_timeout_gets_a_transient_ledger_busy_and_writes_nothing(tmp_path, how):
    path = make_package(tmp_path / "case")
    case = start_case(path)
    case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    case.close()
    process, held, release, queue = _start_single(_worker_hold_writer_lock, str(path), how)
    try:
        assert held.wait(CHILD_TIMEOUT_S), "the holder never took the lock"
        before = logical_dump(path / LEDGER)
        impatient = Case.open(path, analysis_config=AnalysisConfig(storage={"busy_timeout_ms": 50}))
        try:
            budget = impatient.budget()
            started = time.monotonic()
            with pytest.raises(LedgerError) as refused:
                budget.reserve("H1", "q-0001", "source.find_text")
            waited = time.monotonic() - started
            assert refused.value.code == "LEDGER_BUSY"
            assert refused.value.transient is True
            assert 0.04 <= waited < 1.5, f"refused after {waited:.3f} s with busy_timeout_ms = 50"
            assert logical_dump(path / LEDGER) == before
            assert not impatient.storage.conn.in_transaction
            # still busy: a second refusal is just as clean
            with pytest.raises(LedgerError) as again:
                budget.reserve("H1", "q-0001", "source.find_text")
            assert again.value.code == "LEDGER_BUSY"
            assert logical_dump(path / LEDGER) == before

            assert _finish_single(process, release, queue) == {"kind": "ok"}
            retried = budget.reserve("H1", "q-0001", "source.find_text")
            assert retried.reused is False
            assert retried.seq == before_head(before) + 1
            assert retried.state["H1"]["spent_units"] == 10
        finally:
            impatient.close()
    finally:
        release.set()
        process.join(timeout=CHILD_TIMEOUT_S)
    verify_case(path)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_cli_reports_ledger_busy_with_exit_status_1_and_succeeds_when_rerun(tmp_path):
    path = make_package(tmp_path / "case")
    case = start_case(path)
    case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    case.close()
    analysis = tmp_path / "analysis.toml"
    analysis.write_text("[storage]\nbusy_timeout_ms = 50\n", encoding="utf-8")
    command = ("--analysis-config", str(analysis), "budget", "reserve", str(path), "H1", "q-0001", "database.lookup")
    process, held, release, queue = _start_single(_worker_hold_writer_lock, str(path), "flock on the sidecar")
    try:
        assert held.wait(CHILD_TIMEOUT_S)
        before = logical_dump(path / LEDGER)
        refused = run_cli(*command)
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.decode().startswith("error: LEDGER_BUSY: ")
        assert logical_dump(path / LEDGER) == before
        assert _finish_single(process, release, queue) == {"kind": "ok"}
    finally:
        release.set()
        process.join(timeout=CHILD_TIMEOUT_S)
    rerun = run_cli(*command)
    assert rerun.returncode == 0, rerun.stderr
    assert balances(path)["H1"]["spent_units"] == 10


# --- 4. interrupted operations -------------------------------------------------------
def _prepare(path: Path) -> tuple[Case, dict]:
    """A case one step before each operation under test; returns it and the calls."""
    case = start_case(path, hypotheses=3, units=12)
    budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
    budget.initialize()
    budget.reserve("H2", "q-0002", "source.find_text")
    budget.reserve("H3", "q-0003", "database.lookup")
    budget.record_result("H3", "q-0003", {"finding": "stale read"}, source_refs=["sources/app.py"])
    calls = {
        "reserve": lambda: budget.reserve("H1", "q-0001", "source.read_context"),
        # new evidence with two sources: contents, results and two result_sources rows
        "record_result": lambda: budget.record_result(
            "H2", "q-0002", {"finding": "add() subtracts"}, source_refs=["sources/app.py", "sources/notes.txt"]),
        # 12 - 10 + 0 = 2 < floor 5: also writes the termination row (budget_exhausted)
        "settle": lambda: budget.settle("H3", "q-0003", 0, "not relevant"),
    }
    return case, calls


def _labels_of(operation: str) -> list[str]:
    """The fault-hook labels ``operation`` passes through, recorded on a scratch case."""
    with tempfile.TemporaryDirectory(prefix="ledger-labels-") as scratch:
        case, calls = _prepare(make_package(Path(scratch) / "case"))
        try:
            seen: list[str] = []
            case.storage.fault_hook = seen.append
            calls[operation]()
            return seen
        finally:
            case.close()


INTERRUPTIONS = [
    pytest.param(operation, index, label, id=f"{operation}-{index}-{label}")
    for operation in ("reserve", "record_result", "settle")
    for index, label in enumerate(_labels_of(operation))
]


def test_the_interruption_points_cover_every_row_each_operation_writes():
    """The parametrization above really reaches every table an operation writes, then COMMIT."""
    expected = {
        "reserve": ["insert_event", "insert_reservation", "insert_account_floor"],  # its debit lowers the floor
        "record_result": ["insert_event", "insert_content", "insert_result", "insert_result_source",
                          "insert_result_source"],
        "settle": ["insert_event", "insert_closing", "insert_termination"],
    }
    for operation, writes in expected.items():
        labels = [label for op, _index, label in (p.values for p in INTERRUPTIONS) if op == operation]
        assert labels[-1] == "COMMIT"
        assert sorted(labels[:-1]) == sorted(writes), operation


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, RuntimeError])
@pytest.mark.parametrize(("operation", "index", "label"), INTERRUPTIONS)
@pytest.mark.sampled(every=4)
def test_an_operation_interrupted_between_its_writes_leaves_nothing_and_the_connection_works(
        tmp_path, operation, index, label, exc_type):
    path = make_package(tmp_path / "case")
    case, calls = _prepare(path)
    try:
        before = logical_dump(path / LEDGER)
        seen: list[str] = []

        def hook(current: str) -> None:
            seen.append(current)
            if len(seen) == index + 1:
                raise exc_type(f"interrupted at {current}")

        case.storage.fault_hook = hook
        with pytest.raises(exc_type):
            calls[operation]()
        assert seen[-1] == label, seen
        assert logical_dump(path / LEDGER) == before
        assert not case.storage.conn.in_transaction

        case.storage.fault_hook = None
        result = calls[operation]()
        assert result.reused is False
        assert result.seq == before_head(before) + 1
        assert calls[operation]().reused is True
    finally:
        case.close()
    # neither the flock (per open file, so a second one conflicts even in this process)
    # nor SQLite's write lock was left behind: an impatient second writer gets both at once
    second = Case.open(path, analysis_config=AnalysisConfig(storage={"busy_timeout_ms": 50}))
    try:
        with second.storage.write():
            pass
    finally:
        second.close()
    verify_case(path)


# --- 5. readers and the WAL ----------------------------------------------------------
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_long_lived_reader_does_not_block_writers_and_closing_truncates_the_wal(tmp_path):
    path = make_package(tmp_path / "case")
    case = start_case(path, hypotheses=2, units=10_000)
    case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    case.close()
    wal = path / (LEDGER + "-wal")

    writer = Case.open(path, analysis_config=AnalysisConfig(storage={"busy_timeout_ms": 1000}))
    budget = writer.budget()
    process, ready, release, queue = _start_single(_worker_long_reader, str(path))
    try:
        assert ready.wait(CHILD_TIMEOUT_S)
        slowest = 0.0
        for i, step in enumerate(cycle_plan("H1", 10)):
            for call in (lambda: budget.reserve("H1", step["action_id"], step["action"]),
                         lambda: budget.record_result("H1", step["action_id"], step["evidence"]),
                         lambda: budget.settle("H1", step["action_id"], step["semantic"], "assessed")):
                started = time.monotonic()
                assert call().reused is False
                slowest = max(slowest, time.monotonic() - started)
        assert slowest < 0.9, f"a write took {slowest:.3f} s while a reader was reading"
        assert wal.stat().st_size > 0
        reader = _finish_single(process, release, queue)
    finally:
        release.set()
        process.join(timeout=CHILD_TIMEOUT_S)

    assert reader["kind"] == "ok", reader
    assert reader["reads"] > 0
    # the reader's snapshot never moved while the writer appended 30 events
    assert reader["counts"] == [reader["snapshot_count"]]
    assert reader["first"] + reader["rest"] == list(range(1, reader["snapshot_count"] + 1))
    assert reader["after"] == reader["snapshot_count"] + 30

    # an idle connection stays open, so SQLite will not delete the WAL on the last close:
    # what empties it is Case.close()'s wal_checkpoint(TRUNCATE)
    observer = sqlite3.connect(path / LEDGER)
    try:
        assert observer.execute("SELECT COUNT(*) FROM events").fetchone() == (reader["after"],)
        writer.close()
        assert not wal.exists() or wal.stat().st_size == 0
        assert observer.execute("SELECT COUNT(*) FROM events").fetchone() == (reader["after"],)
    finally:
        observer.close()
    assert not wal.exists() or wal.stat().st_size == 0
    verify_case(path)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_closing_while_another_process_holds_a_read_snapshot_succeeds_within_the_busy_timeout(tmp_path):
    path = make_package(tmp_path / "case")
    case = start_case(path, hypotheses=2, units=10_000)
    case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    case.close()
    wal = path / (LEDGER + "-wal")
    process, ready, release, queue = _start_single(_worker_long_reader, str(path))
    try:
        assert ready.wait(CHILD_TIMEOUT_S)
        writer = Case.open(path, analysis_config=AnalysisConfig(storage={"busy_timeout_ms": 200}))
        head = writer.budget().reserve("H1", "q-0001", "source.read_context").seq
        started = time.monotonic()
        with pytest.warns(CheckpointWarning, match="another connection is reading an older snapshot") as warned:
            writer.close()  # the checkpoint cannot truncate past the reader: close must still succeed
        closing = time.monotonic() - started
        assert [w.filename for w in warned] == [__file__]  # the caller's close(), not a line of the ledger
        assert closing < 0.2 + 1.0, f"close took {closing:.3f} s with busy_timeout_ms = 200"
        assert wal.stat().st_size > 0
        reader = _finish_single(process, release, queue)
    finally:
        release.set()
        process.join(timeout=CHILD_TIMEOUT_S)
    assert reader["kind"] == "ok", reader
    assert reader["counts"] == [head - 1] and reader["after"] == head
    # with the reader gone, the next close empties the WAL
    Case.open(path).close()
    assert not wal.exists() or wal.stat().st_size == 0
    assert ledger_rows(path, "SELECT MAX(seq) FROM events") == [(head,)]
    verify_case(path)


def generation(case: Case) -> int:
    return case.status()["package_generation"]


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
    "pending_actions": lambda c, b: b.pending_actions(),
    "policy_changed": lambda c, b: c.budget(BudgetConfig.from_mapping({})).policy_changed(),
    "frozen_policy": lambda c, b: b.frozen_policy(),
    "record_evidence": lambda c, b: b.record_evidence("H1", "t1", "E000001"),
    "request_test": lambda c, b: b.request_test("H1", "t1", "human", "test-1"),
    "evidence_query": lambda c, b: c.evidence().query("i1", {"actions": [{
        "operation_id": "op-1", "hypothesis_id": "H1", "action_id": "t1", "tool": "source.read_context",
        "args": {"path": "sources/app.py", "start_line": 1, "end_line": 1}}]}),
    "iter_events": lambda c, b: list(c.iter_events()),
    "evidence_check_limits": lambda c, b: c.evidence().check_limits("i1", {"actions": [{
        "operation_id": "op-1", "hypothesis_id": "H1", "action_id": "t1", "tool": "source.read_context",
        "args": {"path": "sources/app.py", "start_line": 1, "end_line": 1}}]},
        {"package_generation": 1, "input_identity": "0" * 64, "results": []}),
}


def test_thread_b_cannot_report_a_reserve_that_thread_a_batch_rolls_back(budget_case):
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


@pytest.mark.parametrize("name", sorted(PUBLIC_CALLS))
@pytest.mark.sampled(every=4)
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


def test_an_object_bound_to_an_open_ledger_cannot_be_pickled_or_copied_one_over_a_memory_case_can(budget_case):
    """A copy would share the connection and the writer lock (copy.copy made one), a pickle cannot hold
    them (Python's TypeError about a connection): refused as INVALID_ARGUMENT saying to pass the
    case's path; the same services over a MemoryCase hold no file, and copy as any object."""
    import copy
    import pickle

    from ledger import MemoryCase

    case, budget = budget_case
    before = generation(case)
    with pytest.raises(RuntimeError):
        with budget.action("H1", "c1", "source.read_context") as action:
            for bound in (case, budget, case.scopes(), case.evidence(), action):
                for copied in (pickle.dumps, copy.copy, copy.deepcopy):
                    with pytest.raises(LedgerError) as refused:
                        copied(bound)
                    assert refused.value.code == INVALID_ARGUMENT
                    named = {"Case": "a Case", "CaseBudget": "a CaseBudget", "ScopeManager": "a ScopeManager",
                             "EvidenceStore": "an EvidenceStore", "Action": "an Action"}[type(bound).__name__]
                    assert refused.value.message.startswith(f"{named} is bound to an open ledger "
                                                            "(its connection and writer lock) and cannot be pickled")
                    assert "open it there with Case.open" in refused.value.message
            raise RuntimeError("leave the block")
    assert generation(case) == before + 2  # the reserve and the fail, nothing else
    memory = MemoryCase.create("M-1")
    memory_budget = memory.budget(BudgetConfig.load(EXAMPLE_BUDGET))
    for service in (memory, memory_budget, memory.scopes()):
        assert type(pickle.loads(pickle.dumps(service))) is type(service)
        assert type(copy.deepcopy(service)) is type(service)


@pytest.mark.parametrize("when", ["before", "after"])
def test_evidence_another_thread_changes_during_the_call_is_stored_as_it_was_when_called(budget_case, monkeypatch,
                                                                                        when):
    """The call works on its own copy of the evidence, taken at once: a change another thread makes
    while it runs (here as the evidence is encoded) reaches neither its checks nor what is stored.
    A value the checks would refuse, put in and taken out again around the encoding, was stored and
    failed verify for good; one put in after it was refused as if the caller had given it."""
    import ledger.rules.budget_requests as requests_module

    case, budget = budget_case
    rows = [{"v": n} for n in range(50)]
    evidence = {"rows": rows}
    real = requests_module.canonical_bytes

    def encoded_while_another_thread_writes(value, name):
        rows[7]["v"] = 2 ** 60  # outside what JSON holds exactly: the checks refuse it
        evidence["extra"] = "added"
        try:
            return real(value, name)
        finally:
            if when == "before":
                rows[7]["v"] = 7
                del evidence["extra"]

    monkeypatch.setattr(requests_module, "canonical_bytes", encoded_while_another_thread_writes)
    budget.reserve("H1", "t1", "source.read_context")
    assert budget.record_result("H1", "t1", evidence).reused is False
    monkeypatch.undo()
    as_called = {"rows": [{"v": n} for n in range(50)]}
    assert budget.record_result("H1", "t1", as_called).reused is True  # the same evidence: what was stored
    verify_case(case.path)


def test_a_dict_or_list_another_thread_resizes_during_a_call_is_copied_whole_never_a_runtime_error():
    """The copy each call takes of its arguments reads a dict or list in one step: a thread adding and
    removing keys meanwhile never makes it fail (``dictionary changed size during iteration``)."""
    import sys

    from ledger.ground.arguments import plain_data

    shared = {f"k{n}": n for n in range(2000)}
    stop = threading.Event()

    def resize():
        n = 0
        while not stop.is_set():
            n += 1
            shared[f"x{n % 50}"] = n
            shared.pop(f"x{(n + 25) % 50}", None)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    worker = threading.Thread(target=resize)
    worker.start()
    try:
        copies = [plain_data({"evidence": shared}) for _ in range(300)]
    finally:
        stop.set()
        worker.join()
        sys.setswitchinterval(interval)
    assert all(len(copy["evidence"]) >= 2000 and copy["evidence"] is not shared for copy in copies)


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


# a case closed while another thread's connection still reads cannot empty its log: it warns, rightly
@pytest.mark.filterwarnings("ignore::ledger.storage.connection.CheckpointWarning")
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
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


# --- a Case belongs to the process that opened it ----------------------------------------------
def forked(child) -> int:
    """Run ``child()`` in a forked process (no unwinding past it); its exit code: 0 when it returned
    True, 1 when False, 2 when it raised."""
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            code = 0 if child() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def refused_as_invalid(call) -> bool:
    try:
        call()
    except LedgerError as exc:
        return exc.code == INVALID_ARGUMENT and "fork" in exc.message
    return False


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_forked_child_cannot_overwrite_a_write_its_parent_committed_by_leaving_an_inherited_batch(budget_case):
    """SQLite connections do not survive a fork: a child that inherits a case inside a batch and
    leaves the batch (as a plain fork does, running the parent's code on) must not commit its copy
    of the transaction, which overwrote what the parent committed meanwhile."""
    case, budget = budget_case
    pid, code = -1, 3  # the child's exit code: 0 when refused all along, leaving the batch included
    try:
        with case.batch():
            budget.reserve("H1", "parent", "source.read_context")
            pid = os.fork()
            if pid == 0:
                time.sleep(0.5)  # the parent has committed by now
                code = 0 if refused_as_invalid(lambda: budget.reserve("H2", "child", "source.read_context")) else 1
            else:
                budget.reserve("H2", "parent2", "source.read_context")
        # leaving the batch (the parent's code, run on by the child) must not commit in the child
    except LedgerError as exc:
        if pid != 0:
            raise
        os._exit(code if exc.code == INVALID_ARGUMENT else 4)
    except BaseException:
        if pid == 0:
            os._exit(2)
        raise
    if pid == 0:
        os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    reopened = Case.open(case.path)
    try:
        assert [a["action_id"] for a in reopened.actions()] == ["parent", "parent2"]
    finally:
        reopened.close()
    assert_single_unforked_chain(case.path)
    verify_case(case.path)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_is_refused_every_use_of_an_inherited_case_and_may_close_it(budget_case):
    case, budget = budget_case
    budget.reserve("H1", "k1", "source.read_context")  # the lock file is kept open, the cache warm
    head = ledger_rows(case.path, "SELECT MAX(seq) FROM events")[0][0]
    calls = [lambda: case.status(), lambda: budget.record_result("H1", "k1", {"x": 1}),
             lambda: case.batch().__enter__(), lambda: export_case(case), lambda: list(case.iter_events())]
    assert forked(lambda: all(refused_as_invalid(call) for call in calls) and case.close() is None) == 0
    from ledger import read_only_query

    # opened again in the child: SQLite there counts the parent's locks as its own and would take none,
    # and the parent's close deleted the log under the child's commits (lost): refused, saying to spawn
    opened_here = forked(lambda: refused_as_invalid(lambda: Case.open(case.path))
                         and refused_as_invalid(lambda: read_only_query(case.path, "SELECT 1")))
    assert opened_here == 0
    assert budget.record_result("H1", "k1", {"x": 1}).seq == head + 1  # the parent's case still works
    assert case.transition("BLOCKED").seq == head + 2
    assert_single_unforked_chain(case.path)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_its_parent_has_the_case_open_may_not_open_it_one_forked_before_may(package):
    """The refusal names 'spawn'; a child forked before the parent opened the case opens and writes it,
    and the parent, closing after, keeps the child's commit (the log is not deleted under it)."""
    from ledger import read_only_query

    start_case(package).close()
    case = Case.open(package)
    case.actions()
    message = {}

    def refused() -> bool:
        try:
            Case.open(package)
        except LedgerError as exc:
            message["text"] = exc.message
            return exc.code == INVALID_ARGUMENT and "start this process with 'spawn'" in exc.message
        return False

    assert forked(refused) == 0
    case.close()
    before = read_only_query(package, "SELECT count(*) FROM events")[1][0][0]
    assert forked(lambda: Case.open(package).transition("BLOCKED").case_state == "BLOCKED") == 0  # nothing open
    assert read_only_query(package, "SELECT count(*) FROM events")[1][0][0] == before + 1


# --- the writer lock is the file the path names --------------------------------------------
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_lock_file_replaced_between_a_writers_check_and_its_flock_still_excludes_the_next_writer(
        budget_case, monkeypatch):
    """A writer keeps its lock file open between operations. If the path is given a new file while
    nobody holds the lock, and another process locks the new one just before this writer's
    ``flock`` lands on the old one, this writer must not count the old file's lock as the writer
    lock: it waits for the other process (here past its timeout: LEDGER_BUSY, nothing written)."""
    import ledger.storage.writer_lock as lock_module

    case, budget = budget_case
    budget.reserve("H1", "k1", "source.read_context")  # the lock file is now kept open
    lock_path = case.storage._lock.path
    case.storage.settings["busy_timeout_ms"] = 400
    before = generation(case)
    real_flock = lock_module.fcntl.flock
    other = {}

    def flock(fd, operation):
        if operation & fcntl.LOCK_EX and not other:  # the first try, right before it lands
            replacement = lock_path.with_name("replacement")
            replacement.write_bytes(b"")
            os.replace(replacement, lock_path)
            other["process"] = _start_single(_worker_hold_writer_lock, str(case.path), "flock on the sidecar")
            assert other["process"][1].wait(CHILD_TIMEOUT_S)  # the other process holds the new file
        real_flock(fd, operation)

    monkeypatch.setattr(lock_module.fcntl, "flock", flock)
    try:
        with pytest.raises(LedgerError) as refused:
            budget.record_result("H1", "k1", {"x": 1})
        assert refused.value.code == "LEDGER_BUSY"
        assert generation(case) == before
    finally:
        monkeypatch.undo()
        if other:
            process, _ready, release, queue = other["process"]
            assert _finish_single(process, release, queue)["kind"] == "ok"
    assert budget.record_result("H1", "k1", {"x": 1}).reused is False
    assert_single_unforked_chain(case.path)


def _worker_import_in_place_paused(path: str, started, release, queue) -> None:
    """Import ``path`` in place, pausing at the first progress call until ``release`` is set."""
    def progress(_done: int) -> None:
        if not started.is_set():
            started.set()
            release.wait(CHILD_TIMEOUT_S)

    try:
        report = import_tree(path, progress=progress)
        queue.put({"kind": "ok", "events": report.events})
    except LedgerError as exc:
        queue.put({"kind": "refused", "code": exc.code, "message": exc.message})
    except BaseException as exc:
        queue.put(_failure(exc))


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_an_in_place_import_holds_the_writer_lock_so_no_other_import_undoes_a_committed_write(budget_case):
    """Two imports restoring one lost ledger at once, the second placing its ledger while the first
    one, paused in its rebuild, still runs: a write committed on the second's ledger must survive the
    first one ending (it used to set the -wal aside and replace ledger.sqlite, losing the write)."""
    case, budget = budget_case
    budget.reserve("H1", "k1", "source.read_context")
    export_case(case)
    path = case.path
    case.close()
    for name in os.listdir(path):
        if name.startswith(LEDGER + "-") or name == LEDGER:
            os.unlink(path / name)
    process, started, release, queue = _start_single(_worker_import_in_place_paused, str(path))
    committed = None
    try:
        assert started.wait(CHILD_TIMEOUT_S)  # the first import is rebuilding
        try:
            import_tree(path)  # the second one
        except LedgerError as exc:
            assert exc.code == "LEDGER_BUSY"  # refused while the first one runs: fine
        else:
            writer = Case.open(path)  # a write committed on the placed ledger, its writer still open
            committed = writer.budget().record_result("H1", "k1", {"x": 1})
            assert committed.reused is False
    finally:
        first = _finish_single(process, release, queue)
    assert first["kind"] in ("ok", "refused"), first
    if committed is not None:  # another connection sees it while its writer is still open
        assert ledger_rows(path, "SELECT COUNT(*) FROM events WHERE seq = ?", (committed.seq,)) == [(1,)], first
        writer.close()
    with Case.open(path) as reopened:
        again = reopened.budget().record_result("H1", "k1", {"x": 1})
        if committed is not None:  # what was reported committed is still there
            assert again.reused is True and again.seq == committed.seq, first
    assert_single_unforked_chain(path)
    verify_case(path)


FORK_EXIT_SCRIPT = """
import os, sys
from ledger import BudgetConfig, Case
case = Case.create(sys.argv[1], "BUG-1")
case.open_revision([{"statement": "a"}, {"statement": "b"}], 100_000)
case.transition("INVESTIGATING_HYPOTHESES")
budget = case.budget(BudgetConfig.load(sys.argv[2]))
budget.initialize()
with case.batch():
    for i in range(200):  # more than the page cache holds: the open transaction spills into the log
        budget.reserve("H1", f"p{i}", "source.read_context")
        budget.record_result("H1", f"p{i}", {"i": i, "pad": "x" * 4000})
        budget.settle("H1", f"p{i}", 50, "assessed")
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # the child just ends: the exception leaves the batch, the interpreter exits
    os.waitpid(pid, 0)
    for i in range(200, 260):
        budget.reserve("H1", f"p{i}", "source.read_context")
        budget.record_result("H1", f"p{i}", {"i": i})
        budget.settle("H1", f"p{i}", 50, "assessed")
case.close()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_forked_child_that_just_exits_during_its_parents_batch_leaves_the_ledger_intact(package):
    """The child's exit (the batch left by SystemExit, then the interpreter's cleanup) must neither
    roll back nor close the inherited connection: either rolls the parent's open transaction back
    through the shared WAL index, and the parent then commits a malformed database."""
    path = package
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", FORK_EXIT_SCRIPT, str(path), str(EXAMPLE_BUDGET)],
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ledger_rows(path, "PRAGMA integrity_check") == [("ok",)]
    assert ledger_rows(path, "SELECT COUNT(*) FROM reservations") == [(260,)]
    assert_single_unforked_chain(path)
    verify_case(path)


# --- a second look at the ledger in the same process keeps the first connection's locks -------
#: SQLite's shared-lock bytes on a database file (its unix VFS: PENDING_BYTE + 2, 510 bytes). A
#: connection to a WAL ledger holds a read lock there for as long as it is open.
SHARED_FIRST, SHARED_SIZE = 0x40000002, 510
_PROBE = ("import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDWR)\n"
          f"try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, {SHARED_SIZE}, {SHARED_FIRST})\n"
          "except OSError:\n    sys.exit(3)\n")


def another_process_sees_a_reader(ledger: Path) -> bool:
    """Whether another process is refused an exclusive lock on the ledger's shared-lock bytes: what
    a process closing its connection tries, to learn whether it is the last one (and, if so, to fold
    and delete the -wal and -shm); and on the -shm's byte every connection keeps a read lock on (its
    "dead man switch": whoever gets it alone starts the shared index over)."""
    import subprocess
    import sys

    shm = Path(f"{ledger}-shm")
    probes = [(ledger, SHARED_SIZE, SHARED_FIRST)] + ([(shm, 1, SHM_DMS)] if shm.exists() else [])
    probe = _PROBE.replace(f"{SHARED_SIZE}, {SHARED_FIRST}", "{size}, {first}")
    return all(subprocess.run([sys.executable, "-c", probe.format(size=size, first=first), str(path)],
                              timeout=60).returncode == 3 for path, size, first in probes)


#: The -shm byte each connection holds a read lock on (SQLite's unix VFS: UNIX_SHM_DMS).
SHM_DMS = 128


def _read_only_query(case: Case) -> None:
    from ledger import read_only_query
    read_only_query(case.path, "SELECT count(*) FROM events")


def _router_reads_a_hard_link_to_the_ledger(case: Case) -> None:
    from ledger import Router
    os.link(case.path / "ledger.sqlite", case.path / "sources" / "db")
    with pytest.raises(LedgerError, match="hard link to one of the ledger's own files"):
        Router(case.path).read_context({"path": "sources/db", "start_line": 1, "end_line": 1})
    Router(case.path).find_text({"text": "a"})


def _refused(call) -> None:
    with pytest.raises(LedgerError):
        call()


def _the_ledger_named_as_a_config_or_outcomes_file(case: Case) -> None:
    from ledger import read_outcomes
    _refused(lambda: BudgetConfig.load(case.path / "ledger.sqlite"))
    _refused(lambda: read_outcomes(case.path / "ledger.sqlite"))


def _runs_import_of_the_ledger(case: Case) -> None:
    """The ledger named as a run file (an agent's trajectory, gzipped or not): read, found no run."""
    from ledger import import_runs
    for name in ("run.traj.json", "run.traj.json.gz"):
        os.link(case.path / "ledger.sqlite", case.path.parent / name)
        import_runs([case.path.parent / name], case.path.parent / f"journals-{name}")


def _another_cases_log_hard_linked_to_the_ledger(case: Case) -> None:
    """Another case whose -wal and -journal are hard links to this (open) ledger, read."""
    from ledger import read_only_query
    other = case.path.parent / "other"
    start_case(other, case_id="OTHER-1").close()
    for suffix in ("-wal", "-journal"):
        os.link(case.path / "ledger.sqlite", other / f"ledger.sqlite{suffix}")
        refused_as = "is the file of a ledger open in this process|not start as a journal"
        with pytest.raises(LedgerError, match=refused_as) as refused:
            read_only_query(other, "SELECT 1")  # SQLite would open and close it as a log, dropping the locks
        assert refused.value.code == "STORAGE_ERROR"
        os.unlink(other / f"ledger.sqlite{suffix}")


def _fleet_files_hard_linked_to_the_ledger(case: Case) -> None:
    """A fleet export's format marker, then a case's record, that are hard links to this ledger."""
    from ledger import export_fleet
    out = case.path.parent / "fleet"
    (out / "_fleet" / "cases").mkdir(parents=True)
    os.link(case.path / "ledger.sqlite", out / "_fleet" / "format.json")
    _refused(lambda: export_fleet([case.path], out))
    os.unlink(out / "_fleet" / "format.json")
    (out / "_fleet" / "format.json").write_text('{"format": "fleet-export-v1"}')
    os.link(case.path / "ledger.sqlite", out / "_fleet" / "cases" / "case_id=BUG-1.json")
    assert export_fleet([case.path], out).failed


def _the_ledger_or_its_shm_read_as_a_file_again_and_again(case: Case) -> None:
    """A config, an outcomes file, a journal to simulate, a source reference: the ledger or its -shm
    (named, or a hard link among the sources) refused before it is opened, 30 times without one more
    descriptor kept each time."""
    from ledger import read_outcomes, simulate
    shm = case.path / "ledger.sqlite-shm"
    os.link(shm, case.path / "sources" / "index")
    before = _descriptors_of(case.path / "ledger.sqlite") + _descriptors_of(shm)
    for _ in range(30):
        for file in (case.path / "ledger.sqlite", shm):
            with pytest.raises(LedgerError, match="the file of a ledger open in this process"):
                BudgetConfig.load(file)
            with pytest.raises(LedgerError, match="the file of a ledger open in this process"):
                read_outcomes(file)
            assert simulate([file]).errors
        with pytest.raises(LedgerError):
            case.resolve_source_refs(["sources/index"])
    assert _descriptors_of(case.path / "ledger.sqlite") + _descriptors_of(shm) == before


def _a_fleet_table_hard_linked_to_the_ledger(case: Case) -> None:
    """A fleet export whose table file is a hard link to this ledger: refused before DuckDB opens it."""
    from ledger import export_fleet, fleet_query
    other = case.path.parent / "other"
    start_case(other, case_id="OTHER-1").close()
    out = case.path.parent / "fleet"
    export_fleet([other], out)
    table = out / "events" / "case_id=OTHER-1" / "data.parquet"
    table.unlink()
    os.link(case.path / "ledger.sqlite", table)
    with pytest.raises(LedgerError, match="is the file of a ledger open in this process") as refused:
        fleet_query(out, "SELECT count(*) FROM events")
    assert refused.value.code == "INTEGRITY_ERROR"


def _lock_files_hard_linked_to_the_ledger(case: Case) -> None:
    """Another case's writer lock file, then a fleet export's lock, that are hard links to this ledger."""
    from ledger import export_fleet, fleet_query
    other = case.path.parent / "other"
    start_case(other, case_id="OTHER-1").close()
    out = case.path.parent / "fleet"
    export_fleet([other], out)
    (other / "ledger.sqlite-lock").unlink(missing_ok=True)
    os.link(case.path / "ledger.sqlite", other / "ledger.sqlite-lock")
    with pytest.raises(LedgerError, match="the file of a ledger open in this process"):
        with Case.open(other) as opened:
            opened.transition("BLOCKED")
    (out / "_fleet" / "lock").unlink(missing_ok=True)
    os.link(case.path / "ledger.sqlite", out / "_fleet" / "lock")
    with pytest.raises(LedgerError, match="the file of a ledger open in this process"):
        fleet_query(out, "SELECT count(*) FROM events")


SECOND_LOOKS = {
    "read_only_query": _read_only_query,
    "lock files hard-linked to the ledger": _lock_files_hard_linked_to_the_ledger,
    "the ledger or its -shm read as a file": _the_ledger_or_its_shm_read_as_a_file_again_and_again,
    "a fleet table hard-linked to the ledger": _a_fleet_table_hard_linked_to_the_ledger,
    "runs import of the ledger as a trajectory": _runs_import_of_the_ledger,
    "another case's log hard-linked to the ledger": _another_cases_log_hard_linked_to_the_ledger,
    "fleet files hard-linked to the ledger": _fleet_files_hard_linked_to_the_ledger,
    "the ledger named as a config or outcomes file": _the_ledger_named_as_a_config_or_outcomes_file,
    "verify_case": lambda case: verify_case(case.path),
    "Case.open in another thread": lambda case: in_thread(lambda: Case.open(case.path).close()),
    "the router reading a hard link to the ledger": _router_reads_a_hard_link_to_the_ledger,
}


@pytest.mark.parametrize("second_look", sorted(SECOND_LOOKS))
def test_another_look_at_the_ledger_from_the_same_process_keeps_an_open_cases_lock(package, second_look):
    """A POSIX lock belongs to the process: a descriptor of the ledger file the ledger closed itself
    (the cut-short check reading the header, the router a hard link) dropped the shared lock of the
    case already open, and another process then took itself for the last reader and deleted the log."""
    from ledger.ground.descriptors import held_files

    start_case(package).close()
    ledger = package / "ledger.sqlite"
    # what this process held before (an earlier test's interrupt sweep may have lost a hold: a known limit)
    held_before = held_files()
    case = Case.open(package)
    try:
        case.actions()  # a read: the shared lock taken, the -wal empty (so the cut-short check reads the file)
        assert another_process_sees_a_reader(ledger)
        SECOND_LOOKS[second_look](case)
        assert another_process_sees_a_reader(ledger)
    finally:
        case.close()
    assert not another_process_sees_a_reader(ledger) and held_files() == held_before  # all let go once closed


_KEEPS_WRITING = """
import os, sys
from ledger import Case, read_only_query
case = Case.open(sys.argv[1])
case.actions()
read_only_query(sys.argv[1], "SELECT count(*) FROM events")
print("ready", flush=True)
sys.stdin.readline()  # meanwhile another process opened and closed the case
case.transition("BLOCKED")
os._exit(0)  # killed before it closes: what it committed must be in the ledger all the same
"""


def test_a_commit_after_another_process_closed_the_case_survives_a_crash(package):
    """With its lock dropped, the other process's close deleted the log this one then committed
    to: the transition was lost when it stopped without closing (and another writer's commits
    would have gone to a new log)."""
    import subprocess
    import sys

    start_case(package).close()
    writer = subprocess.Popen([sys.executable, "-c", _KEEPS_WRITING, str(package)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "ready\n"
        subprocess.run([sys.executable, "-c", "import sys; from ledger import Case; c = Case.open(sys.argv[1]); "
                        "c.actions(); c.close()", str(package)], check=True, timeout=60)
        assert (package / "ledger.sqlite-wal").exists()  # still the writer's
        writer.communicate("go\n", timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.communicate()
    assert writer.returncode == 0
    with Case.open(package) as case:
        assert case.status()["state"] == "BLOCKED"
    assert verify_case(package).events == 4  # created, revision opened, investigating, blocked


def test_a_descriptor_of_a_held_file_stays_open_until_the_last_connection_lets_go(tmp_path):
    from ledger.ground.descriptors import close_descriptor, file_over, hold_file

    held, other = tmp_path / "held", tmp_path / "other"
    held.write_bytes(b"ledger")
    other.write_bytes(b"input")
    first, second = hold_file(held), hold_file(held)
    fd = os.open(held, os.O_RDONLY)
    with file_over(os.open(held, os.O_RDONLY)) as read:
        assert read.read() == b"ledger"
        kept = read.fileno()
    close_descriptor(fd)
    assert os.fstat(fd).st_ino == os.fstat(kept).st_ino == held.stat().st_ino  # both kept open
    first()
    first()  # letting go twice counts once
    assert os.fstat(fd).st_ino == held.stat().st_ino
    second()
    for closed in (fd, kept):
        with pytest.raises(OSError):
            os.fstat(closed)
    unheld = os.open(other, os.O_RDONLY)
    close_descriptor(unheld)  # a file no connection holds: closed at once
    with pytest.raises(OSError):
        os.fstat(unheld)


def test_kept_descriptors_are_closed_under_the_guard_a_connection_is_held_under(tmp_path, monkeypatch):
    """Closed after the guard was let go, one could drop the lock of a connection another thread
    opened on the file meanwhile (its hold taken, then its first read locking it)."""
    from ledger.ground import descriptors

    held = tmp_path / "held"
    held.write_bytes(b"ledger")
    release = descriptors.hold_file(held)
    descriptors.close_descriptor(os.open(held, os.O_RDONLY))
    guarded = []
    real_close = descriptors._close_quietly
    monkeypatch.setattr(descriptors, "_close_quietly",
                        lambda fd: (guarded.append(descriptors._GUARD._is_owned()), real_close(fd)))
    release()
    assert guarded == [True]


def _descriptors_of(path: Path) -> int:
    """How many descriptors of this process name the file ``path``."""
    fds = Path("/proc/self/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd) == str(path)
        except OSError:  # closed while listed (the listing's own descriptor)
            pass
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_looking_again_and_again_at_an_open_ledger_keeps_no_descriptor_per_look(package):
    """A descriptor of a held file is kept until its connections close: a look that opened one each
    time (the cut-short check of every read_only_query, the router asked for a hard link) would pile
    them up for as long as the case stays open. The header is read through the one kept; the router
    refuses a held file before opening it."""
    from ledger import Router, read_only_query

    start_case(package).close()
    ledger = package / "ledger.sqlite"
    os.link(ledger, package / "sources" / "db")
    case = Case.open(package)
    try:
        case.actions()  # the -wal empty: every new connection's cut-short check reads the header
        read_only_query(package, "SELECT 1")
        router = Router(package)
        with pytest.raises(LedgerError, match="hard link to one of the ledger's own files"):
            router.read_context({"path": "sources/db", "start_line": 1, "end_line": 1})
        after_one_look = _descriptors_of(ledger) + _descriptors_of(package / "sources" / "db")
        for _ in range(30):
            read_only_query(package, "SELECT 1")
            with pytest.raises(LedgerError, match="hard link to one of the ledger's own files"):
                router.read_context({"path": "sources/db", "start_line": 1, "end_line": 1})
        assert _descriptors_of(ledger) + _descriptors_of(package / "sources" / "db") == after_one_look
        assert another_process_sees_a_reader(ledger)
    finally:
        case.close()
    assert _descriptors_of(ledger) + _descriptors_of(package / "sources" / "db") == 0


def test_a_thread_holding_a_batch_is_refused_at_once_when_it_writes_through_another_case_of_the_ledger(budget_case):
    """A second Case of the same ledger, written in the thread whose first Case holds a batch (and so
    the writer lock), waited busy_timeout_ms and then said LEDGER_BUSY "retry", which could never
    succeed until the batch ended. Another thread's Case still waits its turn, and gets it."""
    case, budget = budget_case
    other = Case.open(case.path)
    try:
        with case.batch():
            budget.reserve("H1", "b1", "source.read_context")
            started = time.monotonic()
            with pytest.raises(LedgerError) as caught:
                other.budget().reserve("H2", "b2", "source.read_context")
            assert time.monotonic() - started < 1
            assert (caught.value.code, caught.value.message) == (INVALID_ARGUMENT, (
                "this thread already holds this case's writer lock through another Case open on the same ledger "
                "(inside its batch(), say), so waiting for it would never end: write through that Case, or end "
                "its batch first"))
            done: list[object] = []

            def in_another_thread() -> None:
                with Case.open(case.path) as mine:
                    done.append(mine.budget().reserve("H2", "b3", "source.read_context").seq)
            waiter = threading.Thread(target=in_another_thread)
            waiter.start()
            time.sleep(0.3)
            assert done == [] and waiter.is_alive()  # waiting for the batch, not refused
        waiter.join(10)
        assert done == [generation(case)]
        assert other.budget().fail("H2", "b3", "timed out").reused is False  # once the batch ended
    finally:
        other.close()


def test_a_case_dropped_inside_its_batch_leaves_no_claim_on_the_thread_and_a_later_write_waits_its_turn(budget_case):
    """A Case dropped (collected) inside its batch lets its lock file go; the thread's next write through
    another Case was refused at once as waiting on itself, though another process held the lock."""
    import gc

    case, _ = budget_case
    dropped = Case.open(case.path)
    batch = dropped.batch()
    batch.__enter__()
    dropped.budget().reserve("H1", "d1", "source.read_context")
    del dropped, batch
    gc.collect()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom ledger import Case\nwith Case.open(sys.argv[1]) as c:\n    with c.batch():\n"
        "        c.transition('BLOCKED')\n        print('held', flush=True)\n        time.sleep(1)\n"), str(case.path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        started = time.monotonic()
        assert case.transition("INVESTIGATING_HYPOTHESES").case_state == "INVESTIGATING_HYPOTHESES"
        assert time.monotonic() - started > 0.3  # it waited for the other process's batch
    finally:
        holder.wait(10)


def test_a_later_thread_given_a_dead_holders_ident_waits_for_the_lock_and_is_not_refused_as_itself(tmp_path):
    """The record of who holds a lock file named its thread by ident, which a later thread may get once
    the holder's thread ended (here it is reused at once): that later thread was refused as waiting for
    itself, though it would have got the lock once the holder let it go."""
    from ledger.storage.writer_lock import WriterLock

    path = tmp_path / "lock"
    holder, waiter = WriterLock(path), WriterLock(path)
    taker = threading.Thread(target=holder.acquire, args=(1000,))
    taker.start()
    taker.join()
    assert holder.locked
    outcome: list[object] = []

    def wait() -> None:
        try:
            waiter.acquire(3000)
            outcome.append("taken")
        except LedgerError as exc:
            outcome.append(exc.code)
    later = threading.Thread(target=wait)
    later.start()  # first: the ident the holder's thread had is free for it
    threading.Timer(0.3, holder.release).start()
    later.join(10)
    assert outcome == ["taken"]
    waiter.close()
    holder.close()
