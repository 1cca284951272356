"""The reference router: lines, spans, globbing, database lookups, and every refusal (ROUTER_REFUSED)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from ledger import LedgerError, Router
from ledger.ground.errors import ROUTER_REFUSED


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "sources" / "pkg").mkdir(parents=True)
    (tmp_path / "sources" / "app.py").write_bytes(b"one\r\ntwo\nthree")
    (tmp_path / "sources" / "pkg" / "mod.py").write_bytes(b"x = 'two'\n")
    (tmp_path / "data").mkdir()
    conn = sqlite3.connect(tmp_path / "data" / "db.sqlite")
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, role TEXT)")
    conn.executemany("INSERT INTO users (name, role) VALUES (?, ?)", [("ann", "admin"), ("bob", "dev"), ("cy", "dev")])
    conn.commit()
    conn.close()
    return tmp_path


def _refused(call) -> LedgerError:
    with pytest.raises(LedgerError) as refused:
        call()
    assert refused.value.code == ROUTER_REFUSED
    return refused.value


def test_find_text_refuses_a_glob_past_the_path_length_saying_so_and_reads_brackets_as_a_glob_does(root):
    """A glob under sources/ of more than 1,024 characters was refused as one not under sources/."""
    long = "sources/" + "a" * 1020
    assert _refused(lambda: Router(root).find_text({"text": "two", "path_glob": long})).message == (
        "path_glob holds 1028 characters, more than the 1024 a path may")
    (root / "sources" / "[a].py").write_bytes(b"two\n")
    (root / "sources" / "a.py").write_bytes(b"two\n")
    files = lambda glob: Router(root).find_text({"text": "two", "path_glob": glob})["coverage"]["files"]  # noqa: E731
    assert (files("sources/[[]a].py"), files("sources/[a].py"), files("sources/?.py")) == (
        ["sources/[a].py"], ["sources/a.py"], ["sources/a.py"])


def test_a_line_is_the_text_between_newlines_with_one_trailing_cr_removed_and_hashed_without_terminator(root):
    found = Router(root).read_context({"path": "sources/app.py", "start_line": 1, "end_line": 5})
    assert [i["text"] for i in found["items"]] == ["one", "two", "three"]
    assert found["items"][0]["sha256"] == hashlib.sha256(b"one").hexdigest()
    # lines past the end are absent and the coverage says how many the file has
    assert found["coverage"] == {"path": "sources/app.py", "start_line": 1, "end_line": 5, "file_lines": 3}
    assert found["sources"] == [["sources/app.py", hashlib.sha256(b"one\r\ntwo\nthree").hexdigest()]]


def test_read_context_of_given_files_reads_their_bytes_and_refuses_what_is_no_file_content(root):
    """``files`` stands for the package's files: the same lines and hashes from the bytes given; a
    mapping without the path is ROUTER_REFUSED, no mapping or a value that is no bytes INVALID_ARGUMENT."""
    span = {"path": "sources/app.py", "start_line": 1, "end_line": 5}
    router = Router(root)
    assert router.read_context(span, files={"sources/app.py": b"one\r\ntwo\nthree"}) == router.read_context(span)
    assert _refused(lambda: router.read_context(span, files={})).message == "'sources/app.py' is not among the files given"
    for files, named in ((1, "files must be a mapping"), ({"sources/app.py": "one"}, "files['sources/app.py'] must be")):
        with pytest.raises(LedgerError) as refused:
            router.read_context(span, files=files)
        assert refused.value.code == "INVALID_ARGUMENT" and refused.value.message.startswith(named)


def test_a_span_ending_before_it_starts_is_refused_naming_both_lines(root):
    """It said "end_line must be an integer of at least 5, got the integer 1"; an empty span (one line:
    start = end) is fine, and an end_line of another type is refused as before."""
    router = Router(root)
    refused = _refused(lambda: router.read_context({"path": "sources/app.py", "start_line": 5, "end_line": 1}))
    assert refused.message.startswith("end_line 1 is before start_line 5 ")
    assert [i["text"] for i in router.read_context({"path": "sources/app.py", "start_line": 2, "end_line": 2})["items"]
            ] == ["two"]
    assert "end_line must be an integer of at least 1" in _refused(lambda: router.read_context(
        {"path": "sources/app.py", "start_line": 5, "end_line": "1"})).message
    for start, end, named in ((1, -10**5000, "end_line"), (10**5000, 1, "start_line"), (1, 10**5000, "end_line")):
        refused = _refused(lambda: router.read_context({"path": "sources/app.py", "start_line": start, "end_line": end}))
        assert refused.message == (f"{named} must be an integer of at least 1 and at most 9007199254740991, got an "
                                   "integer of thousands of digits")  # a number too long to print was a ValueError


def test_arguments_missing_or_unexpected_are_named_with_what_the_tool_takes(root):
    router = Router(root)
    missing = _refused(lambda: router.read_context({"path": "sources/app.py"}))
    assert missing.message.endswith("source.read_context: missing argument(s) 'end_line', 'start_line' (it takes "
                                    "end_line, path, start_line)")
    both = _refused(lambda: router.read_context({"path": "sources/app.py", "start_line": 1, "lines": 2}))
    assert both.message.endswith("missing argument(s) 'end_line'; unexpected argument(s) 'lines' (it takes end_line, "
                                 "path, start_line)")


def test_a_path_outside_its_folder_is_refused_and_a_bare_name_is_shown_where_it_belongs(root):
    bare = _refused(lambda: Router(root).lookup({"database": "db.sqlite", "table": "users"}))
    assert bare.message == ("'db.sqlite' is outside data/ (paths start at the package folder: did you mean "
                            "'data/db.sqlite'?)")
    other = _refused(lambda: Router(root).read_context({"path": "data/db.sqlite", "start_line": 1, "end_line": 1}))
    assert other.message == "'data/db.sqlite' is outside sources/"  # another folder: no guess
    folder = _refused(lambda: Router(root).read_context({"path": "sources", "start_line": 1, "end_line": 1}))
    assert folder.message == "'sources' is the folder sources/ itself: name a file in it ('sources/…')"
    database = _refused(lambda: Router(root).lookup({"database": "data", "table": "users"}))
    assert database.message == "'data' is the folder data/ itself: name a file in it ('data/…')"


def test_a_path_past_the_longest_a_tool_call_may_name_is_refused_as_too_long_not_as_empty(root):
    for path, says in (("sources/" + "a" * 1016, "' cannot be read: File name too long"),  # 1,024: looked up
                       ("sources/" + "a" * 1017, "path holds 1025 characters, more than the 1024 a path may: ")):
        refused = _refused(lambda: Router(root).read_context({"path": path, "start_line": 1, "end_line": 1}))
        assert refused.code == ROUTER_REFUSED and (says in refused.message or refused.message.startswith(says)), \
            refused.message
    empty = _refused(lambda: Router(root).read_context({"path": "", "start_line": 1, "end_line": 1}))
    assert empty.message == "path must be a non-empty string, got ''"


@pytest.mark.parametrize("path", ["sources/\ud800.py", "sources/\udcff.py", "data/\ud800.sqlite"])
def test_a_path_that_is_no_utf8_text_is_refused_by_every_tool(root, path):
    """A lone surrogate has no UTF-8 form (and no place in a canonical reply): opening such a
    path raised UnicodeEncodeError."""
    router = Router(root)
    calls = [lambda: router.read_context({"path": path, "start_line": 1, "end_line": 1}),
             lambda: router.lookup({"database": path, "table": "users"})]
    refusal = _refused(calls[0] if path.startswith("sources/") else calls[1])
    assert refusal.message == f"{path!r} is not a normalized relative path of UTF-8 text"


def test_find_text_scans_the_glob_in_order_and_marks_truncation(root):
    found = Router(root).find_text({"text": "two"})
    assert [(i["path"], i["line"]) for i in found["items"]] == [("sources/app.py", 2), ("sources/pkg/mod.py", 1)]
    assert found["coverage"]["files"] == ["sources/app.py", "sources/pkg/mod.py"] and not found["truncated"]
    cut = Router(root).find_text({"text": "two", "max_results": 1})
    assert len(cut["items"]) == 1 and cut["truncated"] is True
    only = Router(root).find_text({"text": "two", "path_glob": "sources/pkg/*.py"})
    assert [i["path"] for i in only["items"]] == ["sources/pkg/mod.py"]


def test_database_lookup_binds_values_and_points_at_rowids(root):
    found = Router(root).lookup({"database": "data/db.sqlite", "table": "users", "where": {"role": "dev"},
                                 "columns": ["name"]})
    assert [(i["pointer"], i["values"]) for i in found["items"]] == [("/users/2", {"name": "bob"}),
                                                                      ("/users/3", {"name": "cy"})]
    assert [c["name"] for c in found["schema"]["columns"]] == ["id", "name", "role"]
    assert found["schema"]["database_sha256"] == hashlib.sha256((root / "data/db.sqlite").read_bytes()).hexdigest()
    # a value carrying SQL is only ever a bound value: it matches nothing
    assert Router(root).lookup({"database": "data/db.sqlite", "table": "users",
                                "where": {"name": "x' OR '1'='1"}})["items"] == []


def test_router_safety_every_escape_and_oversized_request_is_refused(root, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "secret.py"
    outside.write_text("secret\n")
    os.symlink(outside, root / "sources" / "link.py")
    router = Router(root)
    for path in ("sources/../ledger.sqlite", "/etc/passwd", "sources/link.py", "data/db.sqlite", "notes.txt",
                 "sources/./app.py", "sources/missing.py"):
        _refused(lambda: router.read_context({"path": path, "start_line": 1, "end_line": 1}))
    _refused(lambda: router.read_context({"path": "sources/app.py", "start_line": 1, "end_line": 2001}))
    _refused(lambda: router.read_context({"path": "sources/app.py", "start_line": 0, "end_line": 1}))
    _refused(lambda: router.find_text({"text": "two", "max_results": 1001}))
    _refused(lambda: router.find_text({"text": "two", "path_glob": "*"}))
    # the glob reaches the escaping symlink: it is skipped and listed, never read
    escaping = router.find_text({"text": "secret"})
    assert escaping["items"] == [] and "sources/link.py" not in escaping["coverage"]["files"]
    assert [s["path"] for s in escaping["coverage"]["skipped"]] == ["sources/link.py"]
    assert "outside" in escaping["coverage"]["skipped"][0]["reason"]
    _refused(lambda: router.lookup({"database": "data/db.sqlite", "table": 'users"; DROP TABLE users; --'}))
    _refused(lambda: router.lookup({"database": "data/db.sqlite", "table": "users", "columns": ["name; DROP"]}))
    _refused(lambda: router.lookup({"database": "data/db.sqlite", "table": "users", "where": {"1=1 --": 1}}))
    _refused(lambda: router.lookup({"database": "data/db.sqlite", "table": "users", "limit": 100_000}))
    _refused(lambda: router.lookup({"database": "sources/app.py", "table": "users"}))
    _refused(lambda: router.result({"operation_id": "op", "tool": "shell.run", "args": {}}))
    with sqlite3.connect(root / "data" / "db.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM users").fetchone()[0] == 3


def test_the_database_is_opened_read_only(root, monkeypatch):
    router = Router(root)
    before = (root / "data" / "db.sqlite").read_bytes()
    router.lookup({"database": "data/db.sqlite", "table": "users"})
    assert (root / "data" / "db.sqlite").read_bytes() == before
    assert not (root / "data" / "db.sqlite-wal").exists()


# --- each input is read once, from one descriptor, never through a link ---------------------------
def test_a_symbolic_link_anywhere_in_the_path_is_refused_even_one_staying_inside(root):
    os.symlink("app.py", root / "sources" / "link_in.py")
    os.symlink("pkg", root / "sources" / "dir_in")
    router = Router(root)
    for path, says in (("sources/link_in.py", "is a symbolic link"), ("sources/dir_in/mod.py", "passes through")):
        refused = _refused(lambda: router.read_context({"path": path, "start_line": 1, "end_line": 1}))
        assert says in refused.message and refused.details["path"] == path
    found = router.find_text({"text": "two"})
    assert found["coverage"]["files"] == ["sources/app.py", "sources/pkg/mod.py"]
    # a link to a folder is listed as skipped too, among its folder's files (it was left out, unsaid)
    assert [(s["path"], s["reason"].split(" is ")[1][:16]) for s in found["coverage"]["skipped"]] == [
        ("sources/dir_in", "a symbolic link;"), ("sources/link_in.py", "a symbolic link;")]
    assert [s["path"] for s in router.find_text({"text": "two", "path_glob": "sources/dir*"})["coverage"]["skipped"]
            ] == ["sources/dir_in"]


@pytest.mark.parametrize("glob, listed", [
    ("sources/dir_in/*", True), ("sources/*.py", True), ("sources/d?r_in/mod.py", True), ("sources/[d]ir_in/x", True),
    ("sources/pkg/*", False), ("sources/[!d]ir_in/*", False), ("sources/dir_in", True), ("sources/dir_inx", False),
    ("sources/dir_in/[z-a]", False), ("sources/*[z-a]", False)])
def test_a_search_whose_glob_reaches_below_a_link_to_a_folder_lists_the_link_as_skipped(root, glob, listed):
    """A link to a folder is never walked into: a search whose glob matches it, or could match a path
    below it (``*`` matches ``/`` too), lists it as skipped, so what it did not look at is said."""
    os.symlink("pkg", root / "sources" / "dir_in")
    found = Router(root).find_text({"text": "two", "path_glob": glob})["coverage"]
    assert [s["path"] for s in found.get("skipped", [])] == (["sources/dir_in"] if listed else [])


_GLOB_PARTS = ["a", "b", "/", "?", "*", "[ab]", "[!a]", "[/]", "[", "[b-a]", "[]a]"]


@settings(max_examples=300, deadline=None)
@given(glob=st.lists(st.sampled_from(_GLOB_PARTS), max_size=6).map("".join),
       folder=st.text(alphabet="ab/", min_size=1, max_size=4))
def test_may_match_below_says_whether_some_path_below_the_folder_matches(glob, folder):
    """Against every path below ``folder`` of up to four more characters (what a glob of six parts can
    tell apart): the glob matches one of them exactly when it may match below the folder."""
    import fnmatch
    import itertools

    from ledger.router.files import may_match_below

    below = (folder + "/" + "".join(rest) for n in range(5) for rest in itertools.product("ab/[", repeat=n))
    assert may_match_below(glob, folder) == any(fnmatch.fnmatchcase(path, glob) for path in below)


def test_the_sources_folder_itself_as_a_link_is_never_followed(root, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.py").write_text("two secrets\n")
    os.rename(root / "sources", root / "real_sources")
    os.symlink(outside, root / "sources")
    router = Router(root)
    _refused(lambda: router.read_context({"path": "sources/secret.py", "start_line": 1, "end_line": 1}))
    assert "sources' is a symbolic link" in _refused(lambda: router.find_text({"text": "two"})).message


def test_a_package_without_a_sources_folder_is_router_refused_by_every_tool_that_reads_it(root, tmp_path):
    import shutil

    from ledger import Case

    shutil.rmtree(root / "sources")
    router = Router(root)
    assert _refused(lambda: router.find_text({"text": "two"})).message == \
        "'sources' does not exist: the package has no sources to search"
    assert "does not exist" in _refused(lambda: router.read_context(
        {"path": "sources/app.py", "start_line": 1, "end_line": 1})).message
    with Case.create(tmp_path / "case", "C-1") as case:  # through the budget: refused, nothing reserved
        case.open_revision([{"statement": "a"}], 100)
        case.transition("INVESTIGATING_HYPOTHESES")
        budget = case.budget()
        budget.initialize()
        generation = case.status()["package_generation"]
        refused = _refused(lambda: budget.run_tool("H1", "q1", "source.find_text", {"text": "x"}))
        assert refused.message == "'sources' does not exist: the package has no sources to search"
        assert case.status()["package_generation"] == generation


def test_a_source_with_a_hard_link_elsewhere_is_read_before_the_case_was_ever_exported(root, tmp_path_factory):
    """Only links to the ledger's own files are refused: a source hard-linked from outside the
    package (a `cp -al` backup) is read whether or not analysis/ exists yet."""
    os.link(root / "sources" / "app.py", tmp_path_factory.mktemp("backup") / "app.py")
    assert not (root / "analysis").exists()
    found = Router(root).read_context({"path": "sources/app.py", "start_line": 1, "end_line": 1})
    assert [i["text"] for i in found["items"]] == ["one"]
    assert "skipped" not in Router(root).find_text({"text": "two"})["coverage"]


def test_a_hard_link_to_the_ledgers_own_files_is_never_read(package):
    from conftest import start_case
    case = start_case(package)
    try:
        from ledger import export_case
        export_case(case)
        exported = next((package / "analysis").rglob("*.json"))
        for own, name in ((package / "ledger.sqlite", "db"), (package / "manifest.json", "manifest"),
                          (exported, "event")):
            os.link(own, package / "sources" / name)
        router = Router(package)
        for name in ("db", "manifest", "event"):
            refused = _refused(lambda: router.read_context({"path": f"sources/{name}", "start_line": 1,
                                                            "end_line": 1}))
            assert "hard link to one of the ledger's own files" in refused.message
        skipped = router.find_text({"text": "a"})["coverage"]["skipped"]
        assert sorted(s["path"] for s in skipped) == ["sources/db", "sources/event", "sources/manifest"]
        # the reason is part of the reply a process with the case not open recomputes: the same words
        assert sorted(s["reason"] for s in skipped) == [
            f"'sources/{name}' is a hard link to one of the ledger's own files; the router never reads them"
            for name in ("db", "event", "manifest")]
        # the linked ledger changes with every event; the package's inputs do not
        identity = case.input_identity()
        case.transition("BLOCKED")
        assert case.input_identity() == identity
    finally:
        case.close()


def test_an_error_while_reading_is_router_refused(root, monkeypatch):
    def failing(fd, size):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "read", failing)
    refused = _refused(lambda: Router(root).read_context({"path": "sources/app.py", "start_line": 1, "end_line": 1}))
    assert "Input/output error" in refused.message
    skipped = Router(root).find_text({"text": "two"})["coverage"]["skipped"]
    assert [s["path"] for s in skipped] == ["sources/app.py", "sources/pkg/mod.py"]


SWAPPER = """
import os, sys, time
root, inside, outside, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
link = os.path.join(root, "sources", "d.link")
end = time.monotonic() + seconds
while time.monotonic() < end:
    os.rename(os.path.join(root, "sources", "d"), inside)          # the folder leaves
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(outside, link)
    os.rename(link, os.path.join(root, "sources", "d"))            # a link to outside takes its place
    os.unlink(os.path.join(root, "sources", "d"))
    os.rename(inside, os.path.join(root, "sources", "d"))          # the folder is back
"""


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_folder_swapped_for_a_link_to_outside_while_read_never_yields_outside_bytes(root, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    (outside / "f.txt").write_text("OUTSIDE\n" * 3)
    (root / "sources" / "d").mkdir()
    (root / "sources" / "d" / "f.txt").write_text("inside\n" * 3)
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(root), str(root / "parked"), str(outside), "1.5"])
    router, answers, refusals = Router(root), 0, 0
    try:
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            try:
                found = router.read_context({"path": "sources/d/f.txt", "start_line": 1, "end_line": 3})
            except LedgerError as exc:
                assert exc.code == ROUTER_REFUSED
                refusals += 1
                continue
            assert [i["text"] for i in found["items"]] == ["inside"] * 3
            answers += 1
    finally:
        swapper.wait(timeout=60)
    assert answers > 0 and refusals > 0


DB_SWAPPER = """
import os, sys, time
target, one, two, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
end = time.monotonic() + seconds
while time.monotonic() < end:
    for source in (one, two):
        with open(source, "rb") as handle:
            data = handle.read()
        with open(target + ".tmp", "wb") as handle:
            handle.write(data)
        os.replace(target + ".tmp", target)
"""


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_database_replaced_while_looked_up_is_hashed_and_queried_from_the_same_bytes(root, tmp_path_factory):
    versions = {}
    spare = tmp_path_factory.mktemp("versions")
    for name in ("v1", "v2"):
        conn = sqlite3.connect(spare / f"{name}.sqlite")
        conn.execute("CREATE TABLE t (v TEXT)")
        conn.executemany("INSERT INTO t VALUES (?)", [(name,)] * 5)
        conn.commit()
        conn.close()
        versions[hashlib.sha256((spare / f"{name}.sqlite").read_bytes()).hexdigest()] = name
    target = root / "data" / "swapped.sqlite"
    swapper = subprocess.Popen([sys.executable, "-c", DB_SWAPPER, str(target), str(spare / "v1.sqlite"),
                                str(spare / "v2.sqlite"), "1.5"])
    router, seen = Router(root), set()
    try:
        time.sleep(0.2)
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            try:
                found = router.lookup({"database": "data/swapped.sqlite", "table": "t"})
            except LedgerError as exc:
                assert exc.code == ROUTER_REFUSED
                continue
            name = versions[found["schema"]["database_sha256"]]
            assert {i["values"]["v"] for i in found["items"]} == {name}
            seen.add(name)
    finally:
        swapper.wait(timeout=60)
    assert seen == {"v1", "v2"}


# --- a case's own data: 64-bit integers, every user table, generated columns -------------------------
def test_integers_beyond_2_53_are_carried_as_marked_decimal_strings(root):
    conn = sqlite3.connect(root / "data" / "big.sqlite")
    conn.execute("CREATE TABLE events (snowflake INTEGER, at_ns INTEGER, small INTEGER)")
    conn.execute("INSERT INTO events VALUES (?, ?, ?)", (1541815603606036480, -(2 ** 63), 2 ** 53 - 1))
    conn.commit()
    conn.close()
    router = Router(root)
    found = router.lookup({"database": "data/big.sqlite", "table": "events"})
    assert found["items"][0]["values"] == {"snowflake": {"integer": "1541815603606036480"},
                                           "at_ns": {"integer": str(-(2 ** 63))}, "small": 2 ** 53 - 1}
    # the same form selects a row by such a value
    by_id = router.lookup({"database": "data/big.sqlite", "table": "events",
                           "where": {"snowflake": {"integer": "1541815603606036480"}}})
    assert len(by_id["items"]) == 1 and by_id["coverage"]["where"] == {"snowflake": {"integer": "1541815603606036480"}}
    for bad in ({"integer": "12x"}, {"integer": 5}, {"integer": "1", "x": 1}, {"integer": str(2 ** 64)}):
        _refused(lambda: router.lookup({"database": "data/big.sqlite", "table": "events", "where": {"small": bad}}))
    for digits, got in (("0009", "'0009'"), ("+5", "'+5'"), (5, "the integer 5")):  # the form is named, not "an object"
        refusal = _refused(lambda: router.lookup({"database": "data/big.sqlite", "table": "events",
                                                  "where": {"small": {"integer": digits}}}))
        assert refusal.message == ("where value 'small': {\"integer\": …} takes a string of decimal digits, an "
                                   "optional minus sign first and no leading zero (as \"-12\" or "
                                   f"\"9007199254740993\"); got {got}")
    # a plain integer past ±(2^53-1) has no exact JSON form: refused when asked, not when the reply is stored
    for plain in (2 ** 53, -(2 ** 53), 1541815603606036480):
        refusal = _refused(lambda: router.lookup({"database": "data/big.sqlite", "table": "events",
                                                  "where": {"snowflake": plain}}))
        assert "within ±(2^53-1), or within SQLite's 64-bit range as {\"integer\": \"<digits>\"}" in refusal.message
    at_least = router.lookup({"database": "data/big.sqlite", "table": "events",
                              "where": {"at_ns": {"integer": str(-(2 ** 63))}}})
    assert len(at_least["items"]) == 1



def test_text_that_is_not_utf8_in_a_database_reads_as_u_fffd_as_a_source_line_does(root):
    """SQLite keeps whatever bytes a TEXT value was given: one such row made the whole lookup fail
    with Python's decoder message. Its invalid bytes read as U+FFFD, as a source line's do, the
    same from the given bytes a verification reads."""
    path = root / "data" / "mixed.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes (body) VALUES ('ok'), (CAST(x'41ff42' AS TEXT)), (CAST(x'c3' AS TEXT))")
    conn.commit()
    conn.close()
    router = Router(root)
    args = {"database": "data/mixed.sqlite", "table": "notes"}
    found = router.lookup(args)
    assert [item["values"] for item in found["items"]] == [{"id": 1, "body": "ok"}, {"id": 2, "body": "A\ufffdB"},
                                                           {"id": 3, "body": "\ufffd"}]
    assert router.lookup(args, {"data/mixed.sqlite": path.read_bytes()})["items"] == found["items"]
    assert [i["pointer"] for i in router.lookup({**args, "where": {"id": 2}})["items"]] == ["/notes/2"]

def test_every_user_table_is_reachable_but_sqlite_internals(root):
    conn = sqlite3.connect(root / "data" / "names.sqlite")
    for table in ("sqlitedata", "SQLite3Cache", "sqliteX_y"):
        conn.execute(f'CREATE TABLE "{table}" (a)')
        conn.execute(f'INSERT INTO "{table}" VALUES (?)', (table,))
    conn.execute("CREATE TABLE seq (id INTEGER PRIMARY KEY AUTOINCREMENT, a)")  # makes sqlite_sequence
    conn.commit()
    conn.close()
    router = Router(root)
    for table in ("sqlitedata", "SQLite3Cache", "sqliteX_y"):
        assert router.lookup({"database": "data/names.sqlite", "table": table})["items"][0]["values"] == {"a": table}
    refused = _refused(lambda: router.lookup({"database": "data/names.sqlite", "table": "sqlite_sequence"}))
    assert "SQLite3Cache" in refused.message and "sqlite_sequence" not in refused.message.split("it has")[1]


@pytest.mark.parametrize("data, why", [(b"", "the database has no table 't'; it has []"),
                                       (b"S", "cannot be read as SQLite"),
                                       (b"SQLite format 3\x00" + b"\x00" * 84, "cannot be read as SQLite")])
def test_an_empty_or_truncated_database_file_is_router_refused(root, data, why):
    """An empty file is an empty database, as SQLite opens one (a table in it is asked for in vain); a
    file cut short is no database. Both are refusals, never a Python error."""
    (root / "data" / "t.db").write_bytes(data)
    refused = _refused(lambda: Router(root).lookup({"database": "data/t.db", "table": "t"}))
    assert why in refused.message


def test_a_long_table_name_is_named_cut_short_with_a_mark(root):
    (root / "data" / "t.db").write_bytes(b"")
    refused = _refused(lambda: Router(root).lookup({"database": "data/t.db", "table": "t" * 100}))
    assert f"the database has no table {'t' * 80!r}…; it has []" in refused.message


def test_generated_columns_are_reachable(root):
    conn = sqlite3.connect(root / "data" / "gen.sqlite")
    conn.execute("CREATE TABLE p (price INTEGER, qty INTEGER, total INTEGER AS (price * qty) STORED, "
                 "label TEXT GENERATED ALWAYS AS ('x' || qty) VIRTUAL)")
    conn.execute("INSERT INTO p (price, qty) VALUES (3, 4)")
    conn.commit()
    conn.close()
    found = Router(root).lookup({"database": "data/gen.sqlite", "table": "p", "where": {"total": 12}})
    assert found["items"][0]["values"] == {"price": 3, "qty": 4, "total": 12, "label": "x4"}
    assert [c["name"] for c in found["schema"]["columns"]] == ["price", "qty", "total", "label"]


def test_side_files_of_an_input_database(root):
    router = Router(root)
    db = root / "data" / "db.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()  # a WAL-mode file with nothing beside it is read as it is
    assert len(router.lookup({"database": "data/db.sqlite", "table": "users"})["items"]) == 3
    for suffix in ("-wal", "-journal", "-shm"):
        (root / "data" / f"db.sqlite{suffix}").write_bytes(b"")  # empty: no rows live there
    assert len(router.lookup({"database": "data/db.sqlite", "table": "users"})["items"]) == 3
    (root / "data" / "db.sqlite-wal").write_bytes(b"\0" * 32)
    refused = _refused(lambda: router.lookup({"database": "data/db.sqlite", "table": "users"}))
    assert "non-empty -wal" in refused.message


def test_a_refused_argument_is_shown_as_json_never_as_python(root):
    router = Router(root)
    for value, shown in ((True, "got true"), (None, "got null"), ({"a": 1}, "got an object")):
        message = _refused(lambda: router.read_context({"path": "sources/app.py", "start_line": value,
                                                        "end_line": 2})).message
        assert message.endswith(f"start_line must be an integer of at least 1 and at most 9007199254740991, {shown}"), message


@pytest.mark.parametrize("action, shown", [(1, "the integer 1"), (None, "null"), ("read", "'read'"),
                                           ([{"tool": "source.read_context"}], "an array")])
def test_an_action_that_is_no_object_is_router_refused_by_reply_and_result(root, action, shown):
    """Router.reply and Router.result are public: an action that is no object is a refusal naming it,
    never a Python error (an AttributeError before)."""
    router = Router(root)
    for call in (lambda: router.reply({"actions": [action]}), lambda: router.result(action)):
        assert _refused(call).message == f"an action must be an object, got {shown}"


@pytest.mark.parametrize("tool", [[], {}, ["source.read_context"], 5, None])
def test_a_tool_that_is_no_string_is_router_refused_naming_it(root, tool):
    """A list or object as the tool raised TypeError (unhashable) from Router.result and Router.reply."""
    router = Router(root)
    action = {"operation_id": "o", "tool": tool, "args": {}}
    for call in (lambda: router.result(action), lambda: router.reply({"actions": [action]})):
        assert _refused(call).message.startswith("unknown tool ")
