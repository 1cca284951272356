"""One case's verify over two processes (``verify_case(jobs=2)``, docs/performance.md).

The second process's replay of the later events is used only when it passed and started from the
state the first process reached; otherwise the first process replays those events itself. So a
verify with two processes passes, fails and names the same seq and message as with one.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from ledger import LedgerError, verify_case
from ledger.ground.canonical import sha256_hex
from ledger.ground.errors import INTEGRITY_ERROR, INVALID_ARGUMENT
from ledger.package_tools import verify as verify_module, verify_range

from conftest import start_case


@pytest.fixture
def split_used(monkeypatch) -> list[int]:
    """Split any ledger of 2+ events; the list records the events each merged second process checked."""
    monkeypatch.setattr(verify_range, "SPLIT_MIN_EVENTS", 2)
    used: list[int] = []
    merge = verify_module.merge

    def counting(replayer, outcome):
        used.append(outcome["count"])
        merge(replayer, outcome)
    monkeypatch.setattr(verify_module, "merge", counting)
    return used


@pytest.fixture
def ledger_case(package: Path, example_policy) -> Path:
    case = start_case(package)
    budget = case.budget(example_policy)
    budget.initialize()
    for n in range(8):
        h, a = f"H{n % 2 + 1}", f"a{n}"
        budget.reserve(h, a, "source.read_context")
        budget.record_result(h, a, {"finding": f"x{n}"}, ["sources/app.py"] if n % 3 == 0 else [])
        budget.settle(h, a, 40 + n, "ok")
    case.close()
    return package


def _outcome(path: Path, jobs: int) -> tuple:
    try:
        report = verify_case(path, jobs=jobs).to_dict()
    except LedgerError as exc:
        return exc.code, exc.message, exc.details.get("seq")
    return "ok", report


@pytest.mark.slow  # over 0.5 s in the default run: the slow lane (.ci/run) runs it
def test_two_processes_report_what_one_reports(ledger_case, split_used):
    one = _outcome(ledger_case, 1)
    assert not split_used
    two = _outcome(ledger_case, 2)
    assert one == two and one[0] == "ok"
    assert split_used and 0 < split_used[0] < one[1]["events"]


@pytest.mark.parametrize("rehash", [False, True])
@pytest.mark.parametrize("seq", [6, 20, 28])  # early (first process), late (second), the last event
@pytest.mark.sampled(every=4)
def test_an_edited_event_fails_alike_in_either_half(ledger_case, split_used, seq, rehash):
    conn = sqlite3.connect(ledger_case / "ledger.sqlite")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    body, sha = conn.execute("SELECT body, sha256 FROM events WHERE seq = ?", (seq,)).fetchone()
    forged = body.replace('"remaining_units":', '"remaining_units":1', 1)
    assert forged != body
    conn.execute("UPDATE events SET body = ?, sha256 = ? WHERE seq = ?",
                 (forged, sha256_hex(forged.encode()) if rehash else sha, seq))
    conn.commit()
    conn.close()
    one = _outcome(ledger_case, 1)
    assert one[0] == INTEGRITY_ERROR and one[2] == seq
    assert _outcome(ledger_case, 2) == one


@pytest.mark.parametrize("table, seq", [("events", 18), ("reservations", 23), ("closings", 7)])
def test_a_deleted_row_fails_alike_in_either_half(ledger_case, split_used, table, seq):
    conn = sqlite3.connect(ledger_case / "ledger.sqlite")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    assert conn.execute(f"DELETE FROM {table} WHERE seq = ?", (seq,)).rowcount == 1
    conn.commit()
    conn.close()
    one = _outcome(ledger_case, 1)
    assert one[0] == INTEGRITY_ERROR
    assert _outcome(ledger_case, 2) == one


def test_jobs_must_be_a_positive_integer(ledger_case):
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(LedgerError) as caught:
            verify_case(ledger_case, jobs=bad)
        assert caught.value.code == INVALID_ARGUMENT


@pytest.mark.parametrize("seq", [7, 25])  # a settle event of each half
@pytest.mark.parametrize("change", [
    "UPDATE closings SET information_score = information_score + 1 WHERE seq = :seq",
    "INSERT INTO closings SELECT revision, hypothesis_id, 'x' || action_id, seq, outcome, semantic_score, "
    "information_score, reward_units FROM closings WHERE seq = :seq",
    "UPDATE events SET created_at = created_at || ' ' WHERE seq = :seq",
])
@pytest.mark.sampled(every=4)
def test_an_edited_or_added_row_fails_alike_in_either_half(ledger_case, split_used, seq, change):
    conn = sqlite3.connect(ledger_case / "ledger.sqlite")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    assert conn.execute(change, {"seq": seq}).rowcount == 1
    conn.commit()
    conn.close()
    one = _outcome(ledger_case, 1)
    assert one[0] == INTEGRITY_ERROR and one[2] == seq
    assert _outcome(ledger_case, 2) == one


def test_no_second_process_to_start_means_one_process(ledger_case, split_used, monkeypatch):
    def refused(*args, **kwargs):
        raise OSError(11, "Resource temporarily unavailable")
    monkeypatch.setattr(verify_range.SecondHalf, "__init__", refused)
    assert _outcome(ledger_case, 2) == _outcome(ledger_case, 1)
    assert not split_used


def test_a_second_process_that_dies_means_one_process(ledger_case, split_used, monkeypatch):
    monkeypatch.setattr(verify_range.SecondHalf, "receive", lambda self: self.close())
    assert _outcome(ledger_case, 2) == _outcome(ledger_case, 1)
    assert not split_used


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_events_appended_after_the_split_was_planned_are_replayed_by_the_first_process(ledger_case, split_used,
                                                                                     monkeypatch, example_policy):
    from ledger import Case

    plan = verify_range.plan_split

    def plan_then_append(scratch, folder, jobs):
        planned = plan(scratch, folder, jobs)  # the second process takes the events up to this head
        with Case.open(ledger_case) as case:
            budget = case.budget(example_policy)
            budget.reserve("H1", "late", "source.read_context")
        return planned
    monkeypatch.setattr(verify_module, "plan_split", plan_then_append)
    report = verify_case(ledger_case, jobs=2)
    assert report.events == report.head_seq == 29
    assert not split_used  # its events end before the head the first process reads: not used


@pytest.mark.parametrize("seq", [-(2**63), -5, 0])
def test_an_event_before_the_first_fails_alike(ledger_case, split_used, seq):
    conn = sqlite3.connect(ledger_case / "ledger.sqlite")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("INSERT INTO events SELECT ?, type, revision, stream, stream_seq, created_at, sha256, parent_sha256, "
                 "NULL, request_sha256, body FROM events WHERE seq = 1", (seq,))
    conn.commit()
    conn.close()
    one = _outcome(ledger_case, 1)
    assert one[0] == INTEGRITY_ERROR and one[2] == 1 and str(seq) in one[1]
    assert _outcome(ledger_case, 2) == one


@pytest.mark.parametrize("after", [36, 37, 38])  # an evidence batch: seq 36 starts it, 37-39 follow
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_split_inside_an_operation_of_several_events_moves_past_it(tmp_path, split_used, monkeypatch, after):
    from ledger import run_demo

    path, _, _ = run_demo(tmp_path / "demo", echo=lambda line: None)
    plan = verify_range.plan_split

    def split_at(scratch, folder, jobs):
        planned = plan(scratch, folder, jobs)
        return None if planned is None else (after, *planned[1:])
    monkeypatch.setattr(verify_module, "plan_split", split_at)
    types = [row[0] for row in sqlite3.connect(path / "ledger.sqlite").execute(
        "SELECT type FROM events WHERE seq BETWEEN 36 AND 40 ORDER BY seq")]
    assert types == ["evidence.requested", "evidence.result", "evidence.recorded", "evidence.indexed",
                     "budget.evidence_recorded"]
    one = _outcome(path, 1)
    assert one[0] == "ok"
    assert _outcome(path, 2) == one
    assert split_used == [one[1]["events"] - 39]  # the second process replayed from seq 40, the next operation


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_one_case_given_jobs_uses_them_itself(ledger_case, split_used):
    """``verify_many`` (``ledger verify CASE --jobs N``) of one case splits it as ``verify_case(jobs=N)``
    does; of several cases each is verified by one process."""
    from ledger import verify_many

    report = verify_many([ledger_case], jobs=2)
    assert report.passed == 1 and len(split_used) == 1 and split_used[0] > 0
    verify_many([ledger_case], jobs=1)
    assert len(split_used) == 1  # one job: no second process


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_second_process_ends_when_the_first_is_killed(ledger_case, tmp_path):
    """A verify killed outright (SIGKILL) leaves no second process replaying for nobody."""
    import subprocess
    import sys
    import time

    marker = tmp_path / "second.pid"
    script = tmp_path / "first.py"
    script.write_text(  # the top level runs in the second process too (spawn imports this script)
        "import os, time\n"
        "from ledger.package_tools import verify_range\n"
        "verify_range.SPLIT_MIN_EVENTS = 2\n"
        "def stalled(job):\n"
        f"    open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(60)\n"
        "verify_range._replay_second_half = stalled\n"
        "if __name__ == '__main__':\n"
        "    from ledger import verify_case\n"
        f"    verify_case({str(ledger_case)!r}, jobs=2)\n", encoding="utf-8")
    first = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        second = int(marker.read_text())
    finally:
        first.kill()
        first.wait()
    deadline = time.monotonic() + 10
    while _alive(second) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(second), f"the second process {second} outlived the verify that started it"


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_ctrl_c_at_the_terminal_ends_verify_without_a_traceback_from_its_second_process(ledger_case, tmp_path):
    """The terminal sends Ctrl-C to both processes: the second printed a KeyboardInterrupt traceback
    of its own before the first said "interrupted"."""
    import os
    import signal
    import subprocess
    import sys
    import time

    marker = tmp_path / "second.pid"
    script = tmp_path / "first.py"
    script.write_text(  # the top level runs in the second process too (spawn imports this script)
        "import os, time\n"
        "from ledger.package_tools import verify_range\n"
        "verify_range.SPLIT_MIN_EVENTS = 2\n"
        "def stalled(job):\n"
        f"    open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(60)\n"
        "verify_range._replay_second_half = stalled\n"
        "if __name__ == '__main__':\n"
        "    from ledger import verify_case\n"
        "    try:\n"
        f"        verify_case({str(ledger_case)!r}, jobs=2)\n"
        "    except KeyboardInterrupt:\n"
        "        print('interrupted', flush=True)\n", encoding="utf-8")
    first = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        second = int(marker.read_text())
        os.killpg(first.pid, signal.SIGINT)  # as the terminal does: the whole group
        out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert out == "interrupted\n" and "Traceback" not in err, err
    deadline = time.monotonic() + 10
    while _alive(second) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(second)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_scratch_folder_a_killed_verify_left_is_removed_by_the_next_verify(ledger_case, tmp_path, monkeypatch):
    """SIGKILL leaves verify's scratch folder behind; the next verify removes it once that process is
    gone, and leaves alone a live process's folder, one another machine (or container) made, a link
    and a folder named otherwise."""
    import subprocess
    import sys
    import tempfile
    import time

    from ledger.package_tools.atomic_files import process_tag

    temp = tmp_path / "tmp"
    temp.mkdir()
    marker = tmp_path / "second.pid"
    script = tmp_path / "first.py"
    script.write_text(
        "import os, time\n"
        "from ledger.package_tools import verify_range\n"
        "verify_range.SPLIT_MIN_EVENTS = 2\n"
        "def stalled(job):\n"
        f"    open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(60)\n"
        "verify_range._replay_second_half = stalled\n"
        "if __name__ == '__main__':\n"
        "    from ledger import verify_case\n"
        f"    verify_case({str(ledger_case)!r}, jobs=2)\n", encoding="utf-8")
    first = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "TMPDIR": str(temp)})
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.read_text()
    finally:
        first.kill()
        first.wait()
    left = [p.name for p in temp.iterdir()]
    assert len(left) == 1 and left[0].startswith("ledger-verify-") and left[0].endswith(f".{first.pid}")
    machine = process_tag().split(".")[1]
    kept = [f"ledger-verify-live{process_tag()}", f"ledger-verify-other.{'0' * 12}.{first.pid}",
            "ledger-verify-untagged"]
    for name in kept:
        (temp / name).mkdir()
    kept.append(f"ledger-verify-link.{machine}.{first.pid}")
    (temp / kept[-1]).symlink_to(temp / kept[0])
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    verify_case(ledger_case)  # passes (it raises otherwise)
    assert sorted(p.name for p in temp.iterdir()) == sorted(kept)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_event_written_as_verify_starts_is_never_counted_ahead_of_the_clock(ledger_case, split_used, monkeypatch,
                                                                              example_policy, jobs):
    """Verify's clock is read once its snapshot of the ledger is taken: an event a writer appends
    meanwhile is either outside the snapshot or older than that clock, never "dated ahead"."""
    from ledger import Case

    check = verify_module._sqlite_check

    def append_then_check(conn, kind):
        from ledger.storage.connection import CheckpointWarning

        with pytest.warns(CheckpointWarning, match="reading an older snapshot"):  # verify's, taken already
            with Case.open(ledger_case) as case:
                case.budget(example_policy).reserve("H1", "late", "source.read_context")
        check(conn, kind)
    monkeypatch.setattr(verify_module, "_sqlite_check", append_then_check)
    report = verify_case(ledger_case, jobs=jobs)
    assert (report.events, report.future_events, report.future_max_lead_ms) == (28, 0, 0)
    assert len(split_used) == (1 if jobs == 2 else 0)


def _unguarded_change(path: Path, table: str, declared: str, stored_as: str, change: str, seq: int) -> None:
    """Run ``change`` on ``table`` with its column declaration ``declared`` read as ``stored_as`` for
    the moment (writable_schema) and its triggers dropped, then put back the shipped SQL and
    triggers exactly: the schema compares equal to the shipped one afterwards."""
    conn = sqlite3.connect(path / "ledger.sqlite", isolation_level=None)
    shipped = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    assert declared in shipped
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (shipped.replace(declared, stored_as), table))
    conn.close()
    conn = sqlite3.connect(path / "ledger.sqlite", isolation_level=None)
    assert conn.execute(change, {"seq": seq}).rowcount == 1
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (shipped, table))
    conn.close()
    conn = sqlite3.connect(path / "ledger.sqlite", isolation_level=None)
    for _, sql in triggers:
        conn.execute(sql)
    conn.close()


@pytest.mark.parametrize("table, column, seq", [("reservations", "cost_units", 5), ("reservations", "cost_units", 23),
                                                ("reservations", "seq", 8), ("closings", "seq", 25),
                                                ("events", "revision", 6), ("events", "stream_seq", 26)])
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_an_integer_stored_as_an_equal_real_fails_alike_in_either_half(ledger_case, split_used, table, column, seq):
    """10.0 = 10 in SQL: rows are compared with their storage classes too (a view would show 10.0)."""
    _unguarded_change(ledger_case, table, f"{column} INTEGER NOT NULL", f"{column} BLOB NOT NULL",
                      f"UPDATE {table} SET {column} = CAST({column} AS REAL) WHERE seq = :seq", seq)
    conn = sqlite3.connect(ledger_case / "ledger.sqlite")
    assert conn.execute(f"SELECT typeof({column}) FROM {table} WHERE seq = ?", (seq,)).fetchone() == ("real",)
    assert conn.execute("PRAGMA quick_check").fetchone() == ("ok",)
    conn.close()
    one = _outcome(ledger_case, 1)
    assert one[0] == INTEGRITY_ERROR and one[2] == seq
    assert _outcome(ledger_case, 2) == one


@pytest.mark.parametrize("seq", [5, 23])  # a reserve event of each half
def test_a_row_stored_twice_behind_a_rebuilt_unique_index_fails_alike_in_either_half(ledger_case, split_used, seq):
    """An exact copy of a row fails as well as a changed one: SQLite's integrity_check finds the key's
    index holding it twice (quick_check does not), and behind it the replay counts every table's rows."""
    _store_twice(ledger_case / "ledger.sqlite", "reservations", seq)
    conn = sqlite3.connect(ledger_case / "ledger.sqlite")
    assert conn.execute("SELECT COUNT(*) FROM reservations WHERE seq = ?", (seq,)).fetchone() == (2,)
    assert conn.execute("PRAGMA quick_check").fetchone() == ("ok",)
    conn.close()
    one = _outcome(ledger_case, 1)
    assert one[0] == INTEGRITY_ERROR and one[1] == ("SQLite's integrity_check of ledger.sqlite reports the file "
                                                    "damaged: non-unique entry in index sqlite_autoindex_reservations_1 "
                                                    "(a copy made by cp while a writer was at work can be torn so: copy "
                                                    "a live case's ledger with sqlite3's .backup)")
    assert _outcome(ledger_case, 2) == one


def test_a_helper_table_holding_a_row_twice_is_named_by_the_replays_row_count(tmp_path):
    """Behind SQLite's check, the replay counts rows too: the same set of rows, one of them stored
    twice, is named with its seq (a comparison of row sets alone cannot see it)."""
    from ledger.package_tools.verify_rows import _repeated_row

    conn = sqlite3.connect(":memory:")
    conn.execute("ATTACH DATABASE ? AS orig", (str(tmp_path / "orig.sqlite"),))
    for schema in ("main", "orig"):
        conn.execute(f"CREATE TABLE {schema}.reservations (seq INTEGER, hypothesis_id TEXT)")
        conn.executemany(f"INSERT INTO {schema}.reservations VALUES (?, ?)", [(5, "H1"), (8, "H2")])
    assert _repeated_row(conn, "reservations") is None
    conn.execute("INSERT INTO orig.reservations VALUES (8, 'H2')")
    assert _repeated_row(conn, "reservations") == (
        8, "helper table reservations holds 3 rows where the replay has 2 (a row of seq 8 stored twice)")


@pytest.mark.parametrize("spelled", ['"EVENTS"', "Events", '"Reservations"', "BALANCES"])
@pytest.mark.sampled(every=4)
def test_a_trigger_on_a_ledger_table_or_view_is_refused_however_its_name_is_spelled(ledger_case, spelled):
    """SQLite matches names without regard to ASCII case and keeps a trigger's table name as typed."""
    timing = "INSTEAD OF INSERT" if spelled == "BALANCES" else "BEFORE INSERT"
    conn = sqlite3.connect(ledger_case / "ledger.sqlite")
    conn.execute(f"CREATE TRIGGER hide_it {timing} ON {spelled} BEGIN SELECT RAISE(IGNORE); END")
    conn.commit()
    assert conn.execute("SELECT tbl_name FROM sqlite_master WHERE name = 'hide_it'").fetchone()[0] == spelled.strip('"')
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(ledger_case)
    assert caught.value.code == INTEGRITY_ERROR and caught.value.message.startswith(
        "schema object hide_it is not the ledger's own: a trigger on the ledger's " + spelled.strip('"').lower())
    from ledger.storage.sqlfiles import foreign_write_blockers
    with sqlite3.connect(ledger_case / "ledger.sqlite") as conn:
        assert foreign_write_blockers(conn) == [f"trigger hide_it on {spelled.strip(chr(34))}"]


@pytest.mark.parametrize("forged", ["a trigger named like a view", "a unique index named like a trigger"])
def test_an_object_named_like_one_of_the_ledgers_own_of_another_type_is_refused(ledger_case, forged):
    """SQLite keeps triggers' names apart from tables', views' and indexes': a trigger named
    ``balances`` (the view dropped and made again after it) or a UNIQUE index named like the
    shipped trigger ``events_no_update`` passed verify --strict, listed nowhere, and could refuse
    every later write of one kind."""
    conn = sqlite3.connect(ledger_case / "ledger.sqlite", isolation_level=None)
    if forged == "a trigger named like a view":
        view = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'view' AND name = 'balances'").fetchone()[0]
        conn.executescript("CREATE TRIGGER balances BEFORE INSERT ON events WHEN NEW.type = 'budget.rejected' "
                           f"BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END; DROP VIEW balances; {view};")
        name, kind = "balances", "trigger"
    else:
        trigger = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'events_no_update'"
                               ).fetchone()[0]
        conn.executescript("CREATE UNIQUE INDEX events_no_update ON events (type) WHERE type = 'budget.rejected'; "
                           f"DROP TRIGGER events_no_update; {trigger};")
        name, kind = "events_no_update", "index"
    kinds = sorted(row[0] for row in conn.execute("SELECT type FROM sqlite_master WHERE name = ?", (name,)))
    conn.close()
    assert kinds == sorted([kind, "view" if kind == "trigger" else "trigger"])
    for strict in (False, True):
        with pytest.raises(LedgerError) as caught:
            verify_case(ledger_case, strict=strict)
        assert caught.value.code == INTEGRITY_ERROR and caught.value.message.startswith(
            f"schema object {name} is not the ledger's own: "), caught.value.message
    from ledger.storage.sqlfiles import foreign_write_blockers
    with sqlite3.connect(ledger_case / "ledger.sqlite") as conn:
        assert foreign_write_blockers(conn) == [f"{kind} {name} on events"]


def test_a_dropped_index_of_the_ledger_is_named_as_an_index(ledger_case):
    with sqlite3.connect(ledger_case / "ledger.sqlite") as conn:
        conn.execute("DROP INDEX events_by_stream")
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(ledger_case)
    assert caught.value.message == ("schema index events_by_stream is missing or altered (the ledger's rows or "
                                    "reads depend on it)")


def _store_twice(ledger: Path, table: str, seq: int) -> None:
    """Copy ``table``'s row of ``seq`` behind its primary key: the key's index is dropped from the
    schema, the copy inserted, and a plain index put back under the key index's name, so the
    schema reads as shipped and SQLite's quick_check passes."""
    conn = sqlite3.connect(ledger, isolation_level=None)
    shipped = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    key = ",\n    PRIMARY KEY (revision, hypothesis_id, action_id)"
    auto = conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = ? AND type = 'index' AND sql IS NULL",
                        (table,)).fetchone()[0]
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (shipped.replace(key, ""), table))
    conn.execute("DELETE FROM sqlite_master WHERE name = ?", (auto,))
    conn.close()
    conn = sqlite3.connect(ledger, isolation_level=None)
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?",
                            (table,)).fetchall()
    for name, _ in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute(f"INSERT INTO {table} SELECT * FROM {table} WHERE seq = ?", (seq,))
    conn.execute(f"CREATE INDEX copy_key ON {table} (revision, hypothesis_id, action_id)")
    for _, sql in triggers:
        conn.execute(sql)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET name = ?, sql = NULL WHERE name = 'copy_key'", (auto,))
    conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (shipped, table))
    conn.close()


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_ctrl_c_at_the_terminal_while_the_second_process_starts_prints_no_traceback_of_it(ledger_case, tmp_path):
    """The second process ignored Ctrl-C only once it had started: one sent to the whole group while
    it was still importing printed its KeyboardInterrupt traceback (or a fatal error in site)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    marker = tmp_path / "starting.pid"
    script = tmp_path / "first.py"
    script.write_text(  # spawn imports this script in the second process as __mp_main__, before its work
        "import os, time\n"
        "from ledger.package_tools import verify_range\n"
        "verify_range.SPLIT_MIN_EVENTS = 2\n"
        "if __name__ == '__mp_main__':\n"
        f"    open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(3)  # still starting when the Ctrl-C comes\n"
        "if __name__ == '__main__':\n"
        "    from ledger import verify_case\n"
        "    try:\n"
        f"        verify_case({str(ledger_case)!r}, jobs=2)\n"
        "        time.sleep(60)\n"
        "    except KeyboardInterrupt:\n"
        "        print('interrupted', flush=True)\n", encoding="utf-8")
    first = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.killpg(first.pid, signal.SIGINT)  # as the terminal does: the whole group
        out, err = first.communicate(timeout=60)
        time.sleep(4)  # the second process, done starting, would print a traceback now
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert out == "interrupted\n" and "Traceback" not in err and "Fatal" not in err, repr(err)


@pytest.mark.parametrize("table, column, seq", [("events", "body", 6), ("events", "body", 23), ("events", "type", 20),
                                                ("reservations", "action", 23), ("hypotheses", "statement", 2),
                                                ("contents", "body", None), ("schema_migrations", "applied_at", None)])
def test_text_that_is_not_utf8_is_named_by_its_own_row_alike_in_either_half(ledger_case, split_used, table, column,
                                                                            seq):
    """The events are read 512 at a time: text SQLite's module could not read was blamed on the first
    event of its batch (seq 1 here, a different one with two processes), or on no row at all."""
    conn = sqlite3.connect(ledger_case / "ledger.sqlite", isolation_level=None)
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    key = "seq" if table != "schema_migrations" else "rowid"
    if seq is None and table == "contents":
        seq = conn.execute("SELECT max(seq) FROM contents").fetchone()[0]
    where = seq if seq is not None else 1
    one_row = " AND hypothesis_id = 'H2'" if table == "hypotheses" else ""  # two hypotheses are opened at once
    assert conn.execute(f"UPDATE {table} SET {column} = CAST(CAST({column} AS BLOB) || x'ff' AS TEXT) "
                        f"WHERE {key} = ?{one_row}", (where,)).rowcount == 1
    for _, sql in triggers:
        conn.execute(sql)
    conn.close()
    one = _outcome(ledger_case, 1)
    assert one[0] == INTEGRITY_ERROR and one[2] == seq
    assert f"{table}.{column} holds bytes that are not UTF-8 where text belongs" in one[1]
    assert _outcome(ledger_case, 2) == one
