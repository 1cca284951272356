"""Shared fixtures: fresh case packages with inputs, the example policy, the CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from ledger import BudgetConfig, Case

# Property and fuzz tests draw the same examples on every run by default, so CI
# cannot fail on a draw it has never seen; LEDGER_HYPOTHESIS_PROFILE=explore
# draws fresh random examples (run it locally to hunt for new failures).
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("LEDGER_HYPOTHESIS_PROFILE", "ci"))

#: Where tests/test_hostile.py leaves its one-line count of fuzz examples.
FUZZ_SUMMARY = pytest.StashKey[str]()
#: Whether this run selected any ``torture`` test (``-m torture``, ``-m "slow or torture"``, …).
TORTURE_RUN = pytest.StashKey[bool]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Remember whether the selection (after ``-m``) holds a ``torture`` test.

    The long variants ask :func:`torture_run` instead of looking for the word "torture" in the
    ``-m`` expression, which is also in ``not torture`` (the default deselection).
    """
    config.stash[TORTURE_RUN] = any(item.get_closest_marker("torture") for item in items)


def torture_run(config) -> bool:
    """True when the run selected the ``torture`` tests (they are deselected by default)."""
    return config.stash.get(TORTURE_RUN, False)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The fuzz example counts, after the results instead of inside the progress line."""
    if FUZZ_SUMMARY in config.stash:
        terminalreporter.write_line(config.stash[FUZZ_SUMMARY])

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_BUDGET = REPO / "config" / "budget.example.toml"
TRAJECTORIES = Path(__file__).resolve().parent / "data" / "trajectories"


def make_package(root: Path) -> Path:
    """A package folder with two small source files and nothing of the ledger's."""
    (root / "sources").mkdir(parents=True)
    (root / "sources" / "app.py").write_text("def add(a, b):\n    return a - b\n", encoding="utf-8")
    (root / "sources" / "notes.txt").write_text("cache key ignores locale\n", encoding="utf-8")
    return root


@pytest.fixture
def package(tmp_path: Path) -> Path:
    return make_package(tmp_path / "case")


@pytest.fixture
def example_policy() -> BudgetConfig:
    return BudgetConfig.load(EXAMPLE_BUDGET)


def start_case(path: Path, *, hypotheses: int = 2, units: int = 100, case_id: str = "BUG-1",
               investigate: bool = True) -> Case:
    """A case with an open revision of ``hypotheses`` hypotheses, moved to INVESTIGATING."""
    case = Case.create(path, case_id=case_id)
    case.open_revision([{"statement": f"hypothesis {i}"} for i in range(1, hypotheses + 1)], units)
    if investigate:
        case.transition("INVESTIGATING_HYPOTHESES")
    return case


@pytest.fixture
def case(package: Path):
    opened = start_case(package)
    yield opened
    opened.close()


@pytest.fixture
def budget(case: Case, example_policy: BudgetConfig):
    manager = case.budget(example_policy)
    manager.initialize()
    return manager


def run_cli(*args: str, cwd: Path | None = None, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m ledger_cli`` (the installed ``ledger`` command) in a real process."""
    return subprocess.run(
        [sys.executable, "-m", "ledger_cli", *args], cwd=cwd, input=stdin, capture_output=True,
        env={**os.environ, **(env or {})}, timeout=300,
    )


def logical_dump(path: Path) -> list:
    """Every row of every table of a ledger file, for before/after comparisons."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        return [(t, conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()) for t in tables]
    finally:
        conn.close()

