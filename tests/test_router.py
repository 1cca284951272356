"""The reference router: lines, spans, globbing, database lookups, and every refusal (ROUTER_REFUSED)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest

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


def test_a_line_is_the_text_between_newlines_with_one_trailing_cr_removed_and_hashed_without_terminator(root):
    found = Router(root).read_context({"path": "sources/app.py", "start_line": 1, "end_line": 5})
    assert [i["text"] for i in found["items"]] == ["one", "two", "three"]
    assert found["items"][0]["sha256"] == hashlib.sha256(b"one").hexdigest()
    # lines past the end are absent and the coverage says how many the file has
    assert found["coverage"] == {"path": "sources/app.py", "start_line": 1, "end_line": 5, "file_lines": 3}
    assert found["sources"] == [["sources/app.py", hashlib.sha256(b"one\r\ntwo\nthree").hexdigest()]]


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
