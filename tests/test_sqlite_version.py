"""The supported SQLite range (docs/sql.md): 3.38.0 or newer. An older library is refused with
SQLITE_UNSUPPORTED naming the version found, before any file is opened or made; never reported
as INTEGRITY_ERROR."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import Case, LedgerError, export_case, import_tree, read_only_query, verify_case
from ledger.storage.sqlfiles import SQLITE_MIN_VERSION, check_sqlite_version
from ledger.ground.errors import SQLITE_UNSUPPORTED
from ledger_cli.main import main as cli_main


@pytest.fixture
def made(tmp_path: Path) -> Path:
    with Case.create(tmp_path / "made", "BUG-1", at="2026-01-01T00:00:00Z") as case:
        case.open_revision([{"statement": "one"}], 10, at="2026-01-01T00:00:00Z")
        export_case(case)
    return tmp_path / "made"


@pytest.fixture
def sqlite_3_36(monkeypatch):
    """This process's sqlite3 module reports SQLite 3.36.0 (the version check reads only this)."""
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 36, 0))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.36.0")


def test_the_supported_range_starts_at_3_38_and_this_sqlite_is_in_it():
    assert SQLITE_MIN_VERSION == (3, 38, 0)
    assert sqlite3.sqlite_version_info >= SQLITE_MIN_VERSION
    check_sqlite_version((3, 38, 0), "3.38.0")
    check_sqlite_version((3, 51, 2), "3.51.2")


@pytest.mark.parametrize("found", [(3, 37, 2), (3, 36, 0), (3, 7, 17)])
def test_sqlite_older_than_3_38_is_refused_naming_the_version_found_and_what_to_do(found):
    text = ".".join(map(str, found))
    with pytest.raises(LedgerError) as refused:
        check_sqlite_version(found, text)
    assert refused.value.code == SQLITE_UNSUPPORTED
    assert f"SQLite {text}" in refused.value.message and "3.38.0 or newer" in refused.value.message
    assert refused.value.details == {"found": text, "required": "3.38.0"}


def test_an_old_sqlite_is_refused_before_init_makes_any_folder_or_file(tmp_path, sqlite_3_36):
    with pytest.raises(LedgerError) as refused:
        Case.create(tmp_path / "new", "BUG-1")
    assert refused.value.code == SQLITE_UNSUPPORTED
    assert not (tmp_path / "new").exists()


def test_an_old_sqlite_is_refused_on_open_verify_sql_and_import_and_the_ledger_is_untouched(made, tmp_path,
                                                                                           monkeypatch):
    before = (made / "ledger.sqlite").read_bytes()
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 37, 2))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.37.2")
    calls = [lambda: Case.open(made), lambda: verify_case(made), lambda: read_only_query(made, "SELECT 1"),
             lambda: import_tree(made, tmp_path / "copy")]
    for call in calls:
        with pytest.raises(LedgerError) as refused:
            call()
        assert refused.value.code == SQLITE_UNSUPPORTED and "3.37.2" in refused.value.message
    assert (made / "ledger.sqlite").read_bytes() == before
    assert not (tmp_path / "copy").exists()


@pytest.mark.parametrize("args", [["init", "{new}", "--case-id", "BUG-2"], ["balances", "{made}"], ["verify", "{made}"],
                                  ["sql", "{made}", "SELECT 1"], ["import", "{made}", "--to", "{new}"]])
def test_the_command_line_reports_an_old_sqlite_as_sqlite_unsupported_exit_1(made, tmp_path, sqlite_3_36, args):
    filled = [a.format(made=made, new=tmp_path / "new") for a in args]
    result = CliRunner().invoke(cli_main, filled)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: SQLITE_UNSUPPORTED: this Python uses SQLite 3.36.0")
    assert "INTEGRITY_ERROR" not in result.output + result.stderr
    assert not (tmp_path / "new").exists()


def test_a_real_old_sqlite_library_is_refused(made, tmp_path):
    """With a real SQLite older than 3.38 (a libsqlite3.so.0 built from that version's amalgamation, its
    folder in LEDGER_TEST_OLD_SQLITE_LIB), the commands that failed with INTEGRITY_ERROR report the version."""
    folder = os.environ.get("LEDGER_TEST_OLD_SQLITE_LIB")
    if not folder:
        pytest.skip("set LEDGER_TEST_OLD_SQLITE_LIB to a folder holding an old libsqlite3.so.0")
    env = {**os.environ, "LD_LIBRARY_PATH": folder}
    version = subprocess.run([sys.executable, "-c", "import sqlite3; print(sqlite3.sqlite_version)"], env=env,
                             capture_output=True, text=True, timeout=60).stdout.strip()
    assert tuple(map(int, version.split("."))) < SQLITE_MIN_VERSION
    for args in (["init", str(tmp_path / "new"), "--case-id", "BUG-2"], ["balances", str(made)],
                 ["verify", str(made)], ["import", str(made), "--to", str(tmp_path / "new")]):
        run = subprocess.run([sys.executable, "-m", "ledger_cli", *args], env=env, capture_output=True, text=True,
                             timeout=120)
        assert (run.returncode, run.stderr.split(":")[:2]) == (1, ["error", " SQLITE_UNSUPPORTED"]), run.stderr
        assert f"SQLite {version}" in run.stderr
    assert not (tmp_path / "new").exists()
