"""The fast paths added for speed answer exactly as the slow ones they stand in for.

* ``verify_range.store_derived`` (verify's bulk load of the replay) stores the same rows as
  ``Storage.append`` one event at a time;
* stored-form times are read without ``strptime`` and give the same differences;
* the package file-name rule's printable-ASCII shortcut refuses and accepts the same names.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from ledger.ground import errors as E
from ledger.ground.clock import format_utc, microseconds_between, ms_ahead
from ledger.package_tools.demo import run_demo
from ledger.ground.errors import LedgerError
from ledger.model.package import _is_control, check_package_name
from ledger.package_tools.replay import PackageSource, Replayer
from ledger.storage.connection import Storage
from ledger.package_tools.verify import HELPER_TABLES, verify_case
from ledger.package_tools.verify_range import store_derived
from ledger.model.views import WriterCache

TABLES = ("events", "contents") + HELPER_TABLES


def _replay_into(path: Path, scratch: Path, many: bool) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(path / "ledger.sqlite")
    bodies = conn.execute("SELECT seq, body FROM events ORDER BY seq").fetchall()
    contents = {sha: body.encode() for sha, body in conn.execute("SELECT sha256, body FROM contents")}
    conn.close()
    storage = Storage.scratch(scratch, path / "ledger.sqlite")
    items: list = []
    replayer = Replayer(PackageSource(path, contents.get), (lambda *item: items.append(item)) if many else storage.append)
    for seq, body in bodies:
        replayer.apply(seq, body.encode("utf-8"))
        if many and len(items) == 7:  # several flushes, as verify makes them
            store_derived(storage, items)
            items.clear()
    store_derived(storage, items)
    rows = {table: storage.conn.execute(f"SELECT * FROM main.{table} ORDER BY 1, 2").fetchall() for table in TABLES}
    storage.conn.close()
    return rows


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_store_derived_stores_exactly_the_rows_append_stores_one_event_at_a_time(tmp_path):
    path, _, _ = run_demo(tmp_path / "demo", echo=lambda _text: None)
    one = _replay_into(path, tmp_path / "one.sqlite", many=False)
    many = _replay_into(path, tmp_path / "many.sqlite", many=True)
    assert len(one["events"]) > 20 and one["contents"] and one["closings"]  # the demo exercises them
    assert many == one


def test_store_derived_of_nothing_writes_nothing(tmp_path):
    path, _, _ = run_demo(tmp_path / "demo", echo=lambda _text: None)
    storage = Storage.scratch(tmp_path / "s.sqlite", path / "ledger.sqlite")
    store_derived(storage, [])
    assert storage.conn.execute("SELECT COUNT(*) FROM main.events").fetchone()[0] == 0
    storage.conn.close()


def _strptime_micros(text: str) -> int:
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


moments = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999),
                       timezones=st.just(timezone.utc))


@given(moments, moments)
def test_stored_times_differ_exactly_as_strptime_reads_them(first, second):
    a, b = format_utc(first), format_utc(second)
    expected = _strptime_micros(b) - _strptime_micros(a)
    assert microseconds_between(a, b) == expected
    assert ms_ahead(b, a) == expected // 1000


@pytest.mark.parametrize("text", ["2026-01-01T00:00:00Z", "2026-01-01T00:00:00.000000+00:00",
                                  "2026-13-01T00:00:00.000000Z", "2026-01-01 00:00:00.000000Z", ""])
def test_a_time_not_in_the_stored_form_is_refused_like_strptime_refuses_it(text):
    with pytest.raises(ValueError):
        ms_ahead(text, "2026-01-01T00:00:00.000000Z")


def _refused(name: str) -> bool:
    try:
        check_package_name(name)
    except LedgerError as exc:
        assert exc.code == E.INVALID_ARGUMENT
        return True
    return False


@given(st.text(alphabet=st.characters(max_codepoint=0x3000)))
def test_the_file_name_rule_refuses_exactly_control_characters_and_non_utf8(name):
    try:
        name.encode("utf-8")
        bad = any(_is_control(ch) for ch in name)
    except UnicodeEncodeError:
        bad = True
    assert _refused(name) == bad


@pytest.mark.parametrize("name", ["analysis/a\x00b", "a\x1fb", "a\x7fb", "a\u0085b", "a\u2028b", "a\udc80b"])
def test_the_file_name_rule_still_refuses_control_characters_and_undecodable_names(name):
    assert _refused(name)


def test_printable_ascii_names_pass_the_file_name_rule():
    assert not _refused("analysis/budgets/0001/events/00000001.json")
    assert not _refused("sources/a b~!.txt")


@pytest.mark.parametrize("column, value", [("type", "'budget.failed'"), ("stream_seq", "stream_seq + 100"),
                                           ("created_at", "'2000-01-01T00:00:00.000000Z'"),
                                           ("operation_key", "'1:other'"), ("request_sha256", "NULL"),
                                           ("revision", "revision + 1")])
@pytest.mark.sampled(every=4)
def test_verify_names_the_event_whose_column_disagrees_with_its_body(tmp_path, column, value):
    # the events comparison looks rows up by seq instead of sorting both tables: it must still
    # find every column that differs from what the body says
    path, _, _ = run_demo(tmp_path / "demo", echo=lambda _text: None)
    conn = sqlite3.connect(path / "ledger.sqlite")
    seq = conn.execute("SELECT MAX(seq) FROM events WHERE type = 'budget.settled' AND request_sha256 IS NOT NULL"
                       ).fetchone()[0]
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute(f"UPDATE events SET {column} = {value} WHERE seq = ?", (seq,))
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as caught:
        verify_case(path)
    assert caught.value.code == E.INTEGRITY_ERROR
    assert caught.value.details["seq"] == seq
    stored = {"type": "'budget.failed'", "created_at": "'2000-01-01T00:00:00.000000Z'", "operation_key": "'1:other'",
              "request_sha256": "None", "revision": "2"}.get(column, "")
    assert f"the events column(s) {column} (stored {stored}" in caught.value.message, caught.value.message
    assert caught.value.message.endswith("disagree with the event's body")


# --- the writer's cache: kept only while the chain head is the one this writer left -------------

def _investigating_case(path: Path):
    from ledger import BudgetConfig, Case

    case = Case.create(path, "BUG-1")
    case.open_revision([{"statement": "one"}, {"statement": "two"}], 100)
    case.transition("INVESTIGATING_HYPOTHESES")
    case.budget(BudgetConfig.from_mapping({"action_costs": {"source.read_context": 5}})).initialize()
    return case


def test_the_writer_cache_sees_another_writers_state_change(tmp_path):
    from ledger import Case

    first = _investigating_case(tmp_path / "c")
    budget = first.budget()
    budget.reserve("H1", "a1", "source.read_context")  # caches the case state (INVESTIGATING)
    assert first.session.cache.answers  # something is kept between operations
    with Case.open(tmp_path / "c") as other:  # another writer moves the case on
        other.transition("BLOCKED")
    with pytest.raises(LedgerError) as caught:
        budget.reserve("H1", "a2", "source.read_context")
    assert caught.value.code == E.CASE_STATE
    first.close()


def test_the_writer_cache_sees_its_own_state_change_and_survives_budget_events(tmp_path):
    case = _investigating_case(tmp_path / "c")
    budget = case.budget()
    budget.reserve("H1", "a1", "source.read_context")
    kept = {k: v for k, v in case.session.cache.answers.items() if k[0] in WriterCache.CACHED}
    assert kept
    budget.record_result("H1", "a1", {"finding": "x"})  # a budget event feeds none of the kept facts
    assert kept.items() <= case.session.cache.answers.items()
    assert_cache_matches_the_ledger(case)  # and the budget head and counts it keeps moved with it
    case.transition("BLOCKED")  # a lifecycle event clears them
    with pytest.raises(LedgerError) as caught:
        budget.reserve("H1", "a2", "source.read_context")
    assert caught.value.code == E.CASE_STATE
    case.close()


def assert_cache_matches_the_ledger(case, kept: bool = True) -> None:
    """Every answer the writer keeps equals what a fresh read of the ledger gives (``kept``: and it
    keeps the budget head and counts; a refused operation drops every answer)."""
    from ledger.model.views import SqlView

    answers = case.session.cache.answers
    if kept:
        assert {"latest_budget_body", "stream_count_budget"} <= {k[0] for k in answers}
    with case.session.read() as fresh:
        assert isinstance(fresh, SqlView) and fresh.cache is None
        for (name, params), answer in answers.items():
            args = dict(params)
            if name == "latest_budget_body":
                assert answer == fresh.budget_head(args["revision"]), name
            elif name == "budget_events_total":
                assert answer == fresh.budget_events_total(), name
            elif name == "stream_count_budget":
                assert answer + 1 == fresh.next_stream_seq("budget", args["revision"]), name
            elif name == "stream_count_case":
                assert answer + 1 == fresh.next_stream_seq("case", 0), name
            elif name == "account_floors":  # each account's floor, advanced by every budget event we append
                assert answer == fresh.account_floors(args["revision"]), name
            elif name == "scope_limits_of":
                assert answer == case.storage.all(name, **args), name
            elif name == "duration_scopes":  # the scopes a duration warning may come due in
                assert answer == fresh.duration_scopes(), name
            else:
                assert answer == case.storage.one(name, **args), name


def test_the_writer_cache_keeps_the_budget_head_and_counts_equal_to_the_ledger(tmp_path):
    case = _investigating_case(tmp_path / "c")
    budget = case.budget()
    for n in range(1, 8):
        h = f"H{n % 2 + 1}"
        budget.reserve(h, f"a{n}", "source.read_context")
        assert_cache_matches_the_ledger(case)
        budget.record_result(h, f"a{n}", {"finding": f"x{n % 3}"})
        if n % 4 == 0:
            budget.fail(h, f"a{n}", "tool error")
        else:
            budget.settle(h, f"a{n}", 50, "relevant")
        assert_cache_matches_the_ledger(case)
    with pytest.raises(LedgerError):  # a refusal rolls back and the kept answers stay true
        budget.settle("H1", "a1", 50, "relevant")
    assert_cache_matches_the_ledger(case, kept=False)
    with case.batch():  # inside a group commit too
        budget.reserve("H1", "b1", "source.read_context")
        with pytest.raises(LedgerError):
            budget.reserve("H1", "b2", "source.read_context")  # H1 already has a pending action
        assert_cache_matches_the_ledger(case, kept=False)
        budget.record_result("H1", "b1", {"finding": "y"})
        assert_cache_matches_the_ledger(case)
    assert_cache_matches_the_ledger(case)
    case.close()


def test_the_writer_cache_forgets_a_rolled_back_batch(tmp_path):
    case = _investigating_case(tmp_path / "c")
    budget = case.budget()
    with pytest.raises(RuntimeError):
        with case.batch():
            case.transition("BLOCKED")
            raise RuntimeError("the batch is rolled back")
    assert case.status()["state"] == "INVESTIGATING_HYPOTHESES"
    assert budget.reserve("H1", "a1", "source.read_context").seq  # not refused by the rolled-back state
    case.close()


def test_the_wal_size_is_looked_at_on_the_first_and_every_16th_commit(tmp_path, monkeypatch):
    import ledger.storage.connection as storage_module

    case = _investigating_case(tmp_path / "c")
    budget = case.budget()
    monkeypatch.setattr(storage_module, "WAL_RESTART_BYTES", 0)  # every look finds it past the limit
    case.storage._commits = 0
    statements: list[str] = []
    case.storage.conn.set_trace_callback(statements.append)
    for n in range(11):  # 33 durable commits: the WAL is looked at after the 1st, 17th and 33rd
        h = f"H{n % 2 + 1}"
        budget.reserve(h, f"a{n}", "source.read_context")
        budget.record_result(h, f"a{n}", {"finding": n})
        budget.settle(h, f"a{n}", 60, "relevant")
    case.storage.conn.set_trace_callback(None)
    assert len([s for s in statements if s.startswith("COMMIT")]) == 33
    assert len([s for s in statements if "wal_checkpoint(PASSIVE)" in s]) == 3
    case.close()
