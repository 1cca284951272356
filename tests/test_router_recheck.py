"""Tests of router recheck."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ledger import Case, LedgerError, export_case, import_tree, verify_case
from ledger.ground.errors import INTEGRITY_ERROR, INVALID_JSON, REPLY_MISMATCH, ROUTER_REFUSED
from ledger.ground.canonical import canonical_sha256
from ledger.router import files as router_files
from ledger.router.reference import Router
from ledger.router.check import recheck, self_consistent
from ledger.rules import evidence as rules
from test_evidence import APP, case, read  # noqa: F401


def forge(case: Case, iteration: str, action: dict, result: dict) -> None:
    """What a forger with write access gets into the ledger: a batch whose stored result the
    reference router never produced (the store's own recomputation is bypassed)."""
    case.budget().reserve(action["hypothesis_id"], action["action_id"], action["tool"])
    with case.session.read() as view:
        generation = view.head()[0]
    reply = {"package_generation": generation, "input_identity": case.input_identity(), "results": [result]}
    shaped = rules.shape_store(iteration, {"actions": [action]}, reply)
    case.session.run("store_tool_results", shaped,
                     inputs={"recomputed": [result], "input_identity": case.input_identity()})


def line(path: str, number: int, text: str) -> dict:
    return {"kind": "source_line", "path": path, "line": number,
            "sha256": hashlib.sha256(text.encode()).hexdigest(), "text": text}


def passwd_result(op: str) -> dict:
    return {"operation_id": op, "tool": "source.read_context", "status": "ok",
            "items": [line("/etc/passwd", 1, "root:x:0:0:root:/root:/bin/bash")],
            "coverage": {"path": "/etc/passwd", "start_line": 1, "end_line": 1, "file_lines": 1},
            "truncated": False, "sources": [["/etc/passwd", "0" * 64]]}


class Forging(Router):
    """A custom router that answers what it likes."""

    def result(self, action):
        return passwd_result(action["operation_id"])


def changed_line_result(op: str) -> dict:
    return {"operation_id": op, "tool": "source.read_context", "status": "ok",
            "items": [line(APP, 2, "    return a + b")],
            "coverage": {"path": APP, "start_line": 2, "end_line": 2, "file_lines": 4},
            "truncated": False, "sources": [[APP, "0" * 64]]}


# --- findings 4, 5, 8: database.lookup ---------------------------------------------------------------
def lookup(**args) -> dict:
    return {"operation_id": "op-x", "hypothesis_id": "H1", "action_id": "q", "tool": "database.lookup", "args": args}


# --- finding 1: a stored result the reference router refuses or does not return -------------------
def test_store_checks_a_custom_routers_reply_with_the_reference_router(case):
    action = read("op-1", "H1", "q1", 1, 1, "/etc/passwd")
    case.budget().reserve("H1", "q1", "source.read_context")
    store = case.evidence(Forging(case.path, generation=lambda: case.query("SELECT MAX(seq) AS s FROM events")[0]["s"],
                                  identity=case.input_identity))
    reply = store.query("i1", {"actions": [action]}).reply
    assert reply["results"][0]["items"][0]["path"] == "/etc/passwd"
    with pytest.raises(LedgerError) as caught:
        store.store_tool_results("i1", {"actions": [action]}, reply)
    assert caught.value.code == ROUTER_REFUSED
    # a plausible action, a forged line: the reference recomputation differs
    good = read("op-2", "H1", "q1", 2, 2)
    forged = case.evidence().query("i2", {"actions": [good]}).reply
    forged["results"][0]["items"][0] = line(APP, 2, "    return a + b")
    with pytest.raises(LedgerError) as caught:
        store.store_tool_results("i2", {"actions": [good]}, forged)
    assert caught.value.code == REPLY_MISMATCH
    assert case.query("SELECT COUNT(*) AS n FROM evidence_records")[0]["n"] == 0


def test_verify_and_import_refuse_a_stored_action_the_reference_router_refuses(case, tmp_path):
    forge(case, "i1", read("op-1", "H1", "q1", 1, 1, "/etc/passwd"), passwd_result("op-1"))
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and "refuses" in caught.value.message
    export_case(case)
    with pytest.raises(LedgerError) as caught:
        import_tree(case.path, tmp_path / "copy")
    assert caught.value.code == INTEGRITY_ERROR and "refuses" in caught.value.message


def test_verify_recomputes_whenever_the_inputs_are_unchanged_whatever_sources_says(case, tmp_path):
    forge(case, "i1", read("op-1", "H1", "q1", 2, 2), changed_line_result("op-1"))
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR
    export_case(case)
    with pytest.raises(LedgerError) as caught:
        import_tree(case.path, tmp_path / "copy")
    assert caught.value.code == INTEGRITY_ERROR


def test_with_changed_inputs_a_stored_result_must_be_self_consistent(case):
    result = changed_line_result("op-1")
    result["items"][0]["sha256"] = hashlib.sha256(b"    return a - b").hexdigest()  # not its text's hash
    forge(case, "i1", read("op-1", "H1", "q1", 2, 2), result)
    (case.path / "sources" / "other.py").write_text("x = 1\n")  # the inputs change
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR and "not that of its text" in caught.value.message


def test_with_changed_inputs_a_file_still_unchanged_must_recompute(case):
    result = changed_line_result("op-1")
    result["sources"] = [[APP, hashlib.sha256((case.path / APP).read_bytes()).hexdigest()]]
    forge(case, "i1", read("op-1", "H1", "q1", 2, 2), result)
    (case.path / "sources" / "other.py").write_text("x = 1\n")
    with pytest.raises(LedgerError) as caught:
        verify_case(case.path)
    assert caught.value.code == INTEGRITY_ERROR


def test_a_genuine_result_over_since_changed_inputs_still_verifies(case):
    store = case.evidence()
    case.budget().reserve("H1", "q1", "source.read_context")
    store.query("i1", {"actions": [read("op-1", "H1", "q1", 1, 2)]}, True)
    (case.path / APP).write_text("def add(a, b):\n    return a + b\n")  # fixed since
    (case.path / "sources" / "other.py").write_text("x = 1\n")
    assert verify_case(case.path).events > 0


def test_lookup_refuses_integers_outside_sqlite_range_without_a_traceback(case):
    for value in (2 ** 70, -(2 ** 63) - 1):  # as a JSON number: no exact JSON form, refused before the router
        with pytest.raises(LedgerError) as caught:
            case.evidence().query("x", {"actions": [lookup(database="data/app.sqlite", table="users",
                                                             where={"id": value})]})
        assert caught.value.code == INVALID_JSON and "outside ±(2**53-1)" in caught.value.message
        with pytest.raises(LedgerError) as caught:  # as the router's marked integer: past SQLite's range
            case.evidence().query("x", {"actions": [lookup(database="data/app.sqlite", table="users",
                                                             where={"id": {"integer": str(value)}})]})
        assert caught.value.code == ROUTER_REFUSED and '{"integer": "<digits>"}' in caught.value.message
    found = case.evidence().query("x", {"actions": [lookup(database="data/app.sqlite", table="users",
                                                             where={"id": {"integer": str(2 ** 63 - 1)}})]})
    assert found.reply["results"][0]["items"] == []  # the largest, given as JSON can carry it exactly


def test_lookup_pointers_use_the_real_row_id_when_a_column_is_named_rowid(case):
    conn = sqlite3.connect(case.path / "data" / "x.sqlite")
    conn.execute('CREATE TABLE t (c TEXT, rowid TEXT)')
    conn.executemany("INSERT INTO t VALUES (?, ?)", [("a", "7"), ("b", "7"), ("c", None)])
    conn.execute('CREATE TABLE u (rowid TEXT, _rowid_ TEXT, OID TEXT)')
    conn.execute("INSERT INTO u VALUES ('1', '2', '3')")
    conn.commit()
    conn.close()
    reply = case.evidence().query("x", {"actions": [lookup(database="data/x.sqlite", table="t")]}).reply
    assert [i["pointer"] for i in reply["results"][0]["items"]] == ["/t/1", "/t/2", "/t/3"]
    assert [i["values"]["rowid"] for i in reply["results"][0]["items"]] == ["7", "7", None]
    with pytest.raises(LedgerError) as caught:
        case.evidence().query("x", {"actions": [lookup(database="data/x.sqlite", table="u")]})
    assert caught.value.code == ROUTER_REFUSED and "row ids cannot be read" in caught.value.message


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_rows_a_collation_matched_verify_and_import_as_stored(case, tmp_path):
    """A result does not record a column's collation, so the re-check accepts text equal under any of
    SQLite's built-in ones: NOCASE (ASCII letters' case) and RTRIM (trailing spaces) as well as
    BINARY. A row no collation matches is still refused."""
    conn = sqlite3.connect(case.path / "data" / "c.sqlite")
    conn.execute("CREATE TABLE u (name TEXT COLLATE NOCASE, tag TEXT COLLATE RTRIM, plain TEXT)")
    conn.execute("INSERT INTO u VALUES ('ABC', 'x  ', 'ABC')")
    conn.commit()
    conn.close()
    wheres = [{"name": "abc"}, {"tag": "x"}, {"plain": "abc"}, {"name": "ABC", "tag": "x "}]
    budget, found = case.budget(), []
    for n, where in enumerate(wheres):
        run = budget.run_tool("H1", f"q{n}", "database.lookup", {"database": "data/c.sqlite", "table": "u",
                                                                  "where": where})
        budget.settle("H1", f"q{n}", semantic_score=50, reason="read")
        found.append(run.result)
    assert [len(result["items"]) for result in found] == [1, 1, 0, 1]
    assert verify_case(case.path).unchecked_inputs == []  # raises on a refused result
    export_case(case.path)
    import_tree(case.path, tmp_path / "copy")
    assert (tmp_path / "copy" / "ledger.sqlite").exists()
    wrong = {**found[0], "items": [{**found[0]["items"][0], "values": {"name": "ABD", "tag": "x  ", "plain": "ABC"}}]}
    wrong["items"][0]["sha256"] = canonical_sha256(wrong["items"][0]["values"])
    with pytest.raises(LedgerError) as caught:
        self_consistent({**lookup(database="data/c.sqlite", table="u", where=wheres[0]),
                         "operation_id": found[0]["operation_id"]}, wrong)
    assert caught.value.code == INTEGRITY_ERROR and "does not satisfy where name" in caught.value.message


def _computing(monkeypatch, name: str, function) -> None:
    """The router's SQLite from now on computes the SQL function ``name`` (2 arguments) with
    ``function``: another SQLite version, which rounds otherwise or has a function this one lacks."""
    from ledger.router import reference
    real = reference._open_bytes

    def opened(database, data):
        conn = real(database, data)
        conn.create_function(name, 2, function, deterministic=True)
        return conn
    monkeypatch.setattr(reference, "_open_bytes", opened)


@pytest.mark.parametrize("recorded_by", ["a SQLite that rounds otherwise", "a SQLite with a function this one lacks"])
def test_values_sqlite_computes_as_it_reads_and_this_sqlite_computes_otherwise_are_a_note_not_a_forgery(
        case, tmp_path, monkeypatch, recorded_by):
    """A VIRTUAL generated column is computed by the SQLite that reads the file: a lookup recorded on
    another SQLite may hold other values (or a function this one lacks) although the file is unchanged.
    Verify and import note the database (failing only --strict) instead of calling the result forged;
    a STORED generated column, read from the file, is still recomputed and compared."""
    function = "round" if "rounds" in recorded_by else "scaled"
    conn = sqlite3.connect(case.path / "data" / "p.sqlite")
    conn.create_function("scaled", 2, lambda x, n: x * n, deterministic=True)
    conn.execute(f"CREATE TABLE p (item TEXT, price REAL, shown REAL AS ({function}(price, 2)) VIRTUAL, "
                 "kept REAL AS (price * 2) STORED)")
    conn.execute("INSERT INTO p (item, price) VALUES ('widget', 2.675)")
    conn.commit()
    conn.close()
    if function == "scaled":
        _computing(monkeypatch, "scaled", lambda x, n: x * n)  # the recording SQLite has it
    budget, runs = case.budget(), []
    for n, args in enumerate([{"where": {"item": "widget"}}, {"columns": ["item", "kept"]}]):
        runs.append(budget.run_tool("H1", f"q{n}", "database.lookup", {"database": "data/p.sqlite", "table": "p",
                                                                        **args}))
        budget.settle("H1", f"q{n}", semantic_score=50, reason="read")
    shown = [{"real": "2.67"}, {"real": "2.68"}] if function == "round" else [{"real": "5.35"}]  # by version
    assert runs[0].result["items"][0]["values"]["shown"] in shown
    export_case(case.path)
    monkeypatch.undo()
    if function == "round":
        _computing(monkeypatch, "round", lambda x, n: -1.0)  # the verifying SQLite rounds otherwise
    note = [{"path": "data/p.sqlite", "why": "computed otherwise by this SQLite"}]
    report = verify_case(case.path)
    assert report.unchecked_inputs == note
    assert report.strict_failure().code == "STALE_GENERATION"
    assert "data/p.sqlite (computed otherwise by this SQLite)" in report.strict_failure().message
    assert import_tree(case.path, tmp_path / "copy").unchecked_inputs == note


def test_a_stored_value_of_a_column_read_from_the_file_is_still_compared_beside_a_computed_one(case):
    """Only a lookup that projects or matches a VIRTUAL generated column may differ on another SQLite: a
    forged value of a column the file holds, in a table that also has one, is still a forgery."""
    conn = sqlite3.connect(case.path / "data" / "p.sqlite")
    conn.execute("CREATE TABLE p (item TEXT, price REAL, shown REAL AS (round(price, 2)) VIRTUAL)")
    conn.execute("INSERT INTO p (item, price) VALUES ('widget', 2.675)")
    conn.commit()
    conn.close()
    action = lookup(database="data/p.sqlite", table="p", columns=["item", "price"])
    genuine = Router(case.path).result(action)
    forged = {**genuine, "items": [{**genuine["items"][0], "values": {"item": "widget", "price": {"real": "1.5"}}}]}
    forged["items"][0]["sha256"] = canonical_sha256(forged["items"][0]["values"])
    notes = []
    with pytest.raises(LedgerError) as caught:
        recheck(Router(case.path), action, forged, True, lambda path, why: notes.append(why))
    assert caught.value.code == INTEGRITY_ERROR and "differs from what the unchanged file" in caught.value.message
    assert notes == []
    assert recheck(Router(case.path), action, genuine, True) == genuine


def test_lookup_refuses_a_without_rowid_table_which_has_no_row_id_to_point_at(case):
    conn = sqlite3.connect(case.path / "data" / "x.sqlite")
    conn.execute("CREATE TABLE w (k TEXT PRIMARY KEY, v) WITHOUT ROWID")
    conn.execute("INSERT INTO w VALUES ('k', 1)")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError) as caught:
        case.evidence().query("x", {"actions": [lookup(database="data/x.sqlite", table="w")]})
    assert caught.value.code == ROUTER_REFUSED and "cannot be read by rowid" in caught.value.message


def test_lookup_writes_nothing_under_data_and_refuses_a_database_with_a_wal_file(case):
    path = case.path / "data" / "wal.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (a)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    assert (case.path / "data" / "wal.sqlite-wal").exists()
    with pytest.raises(LedgerError) as caught:
        case.evidence().query("x", {"actions": [lookup(database="data/wal.sqlite", table="t")]})
    assert caught.value.code == ROUTER_REFUSED and "-wal" in caught.value.message
    conn.close()  # the last connection checkpoints and removes -wal and -shm
    before = sorted(p.name for p in (case.path / "data").iterdir())
    identity = case.input_identity()
    reply = case.evidence().query("x", {"actions": [lookup(database="data/wal.sqlite", table="t")]}).reply
    assert [i["values"] for i in reply["results"][0]["items"]] == [{"a": 1}]
    assert sorted(p.name for p in (case.path / "data").iterdir()) == before == ["app.sqlite", "wal.sqlite"]
    assert case.input_identity() == identity


def test_lookup_rows_that_pass_the_byte_limit_are_refused_as_they_are_read(case, monkeypatch):
    """A small database whose generated column makes each row large (printf of n characters): the
    lookup counts the bytes of the rows as it reads them and refuses once they pass the limit,
    instead of reading every row into memory (an 8 KiB file took gigabytes)."""
    from ledger.router import reference

    path = case.path / "data" / "big.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (n INTEGER, big TEXT GENERATED ALWAYS AS (printf('%.*c', n, 'x')) VIRTUAL)")
    conn.executemany("INSERT INTO t (n) VALUES (?)", [(600,)] * 50)
    conn.commit()
    conn.close()
    monkeypatch.setattr(reference, "LOOKUP_BYTES_MAX", 3000)
    with pytest.raises(LedgerError) as caught:
        case.evidence().query("x", {"actions": [lookup(database="data/big.sqlite", table="t")]})
    assert caught.value.code == ROUTER_REFUSED and caught.value.message.endswith(
        "the rows of 't' read so far hold more than 3000 bytes, more than any evidence may (a generated column "
        "that makes large values?); ask for fewer rows (limit) or columns")
    reply = case.evidence().query("x", {"actions": [lookup(database="data/big.sqlite", table="t", limit=4)]}).reply
    assert [len(item["values"]["big"]) for item in reply["results"][0]["items"]] == [600] * 4


# --- finding 10: find_text skips unreadable files with a coverage note -----------------------------------
def test_find_text_skips_oversized_broken_and_special_files_and_lists_them(case, monkeypatch):
    monkeypatch.setattr(router_files, "FILE_BYTES_MAX", 1000)  # the 16 MiB cap, scaled down
    sources = case.path / "sources"
    (sources / "huge.bin").write_bytes(b"add\n" * 300)
    (sources / "gone").symlink_to("nowhere")
    (sources / "out").symlink_to("/etc/hostname")
    action = {"operation_id": "op-1", "hypothesis_id": "H1", "action_id": "q1", "tool": "source.find_text",
              "args": {"text": "add"}}
    case.budget().reserve("H1", "q1", "source.find_text")
    stored = case.evidence().query("i1", {"actions": [action]}, True)
    result = stored.reply["results"][0]
    assert [(i["path"], i["line"]) for i in result["items"]] == [(APP, 1), (APP, 4)]
    assert result["coverage"]["files"] == [APP, "sources/notes.txt"]
    skipped = {s["path"]: s["reason"] for s in result["coverage"]["skipped"]}
    assert sorted(skipped) == ["sources/gone", "sources/huge.bin", "sources/out"]
    assert "larger than" in skipped["sources/huge.bin"] and "symbolic link" in skipped["sources/gone"]
    assert "outside" in skipped["sources/out"]
    assert verify_case(case.path).events > 0
    plain = case.evidence().query("x", {"actions": [{**action, "args": {"text": "add", "path_glob": APP}}]})
    assert "skipped" not in plain.reply["results"][0]["coverage"]


# --- invariant: the re-check accepts every genuine result, whatever the file holds ------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300), start=st.integers(1, 6), span=st.integers(0, 5), needle=st.sampled_from(["a", "\r", "é"]))
def test_recheck_accepts_every_genuine_result_and_recomputes_it(tmp_path, data, start, span, needle):
    root = tmp_path / "pkg"
    (root / "sources").mkdir(parents=True, exist_ok=True)
    (root / "sources" / "f.txt").write_bytes(data)
    router = Router(root)
    for action in ({"operation_id": "o", "tool": "source.read_context",
                    "args": {"path": "sources/f.txt", "start_line": start, "end_line": start + span}},
                   {"operation_id": "o", "tool": "source.find_text", "args": {"text": needle}}):
        result = router.result(action)
        self_consistent(action, result)  # no INTEGRITY_ERROR for a genuine result
        assert recheck(router, action, result, True) == result
        assert recheck(router, action, result, False) == result


@pytest.mark.parametrize("depth", [65, 1000, 100_000])
def test_a_reply_nested_past_the_json_depth_is_invalid_json_as_a_request_is(case, depth):
    """The reply was schema-checked before its depth: a RecursionError from the schema checker."""
    request = {"actions": [read("op-1", "H1", "q1", 1, 2)]}
    reply = case.evidence().query("i1", request, False).reply
    nested: list = []
    for _ in range(depth):
        nested = [nested]
    deep_reply = {**reply, "results": nested}
    case.budget().reserve("H1", "q1", "source.read_context")
    before = case.storage.conn.execute("SELECT count(*) FROM events").fetchone()[0]
    for call in (case.evidence().check_limits, case.evidence().store_tool_results):
        with pytest.raises(LedgerError) as caught:
            call("i1", request, deep_reply)
        assert caught.value.code == INVALID_JSON and "nested deeper than 64 levels" in caught.value.message
    assert case.storage.conn.execute("SELECT count(*) FROM events").fetchone()[0] == before
