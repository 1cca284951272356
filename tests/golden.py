"""Exports made with fixed ids and times, compared against the bytes the code made before a change.

``python tests/golden.py`` (re)writes ``tests/data/golden_exports.json`` with the
sha256 of every exported file of the demo and of several real journals, built
with a fixed package id and a fixed clock; ``tests/test_golden.py`` rebuilds
them and asserts the same bytes. So a refactoring cannot change what a case
exports for the same inputs without the test saying which file changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from unittest import mock

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "data" / "golden_exports.json"
TRAJECTORIES = HERE / "data" / "trajectories"
#: Real journals of several shapes: small, large, with refused lines.
JOURNALS = ("django__django-11299", "sympy__sympy-13091", "sphinx-doc__sphinx-9229",
            "psf__requests-1921", "matplotlib__matplotlib-25775")
FIXED_PACKAGE_ID = uuid.UUID("12345678-1234-4234-8234-123456789abc")


def tree_digest(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of ``manifest.json`` and every file under ``analysis/``."""
    out = {"manifest.json": hashlib.sha256((root / "manifest.json").read_bytes()).hexdigest()}
    for directory, _, names in os.walk(root / "analysis"):
        for name in names:
            path = Path(directory, name)
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return dict(sorted(out.items()))


@contextmanager
def fixed_ids() -> Iterator[None]:
    with mock.patch("uuid.uuid4", lambda: FIXED_PACKAGE_ID):
        yield


def counter_clock(start_s: int = 1_767_225_600):  # 2026-01-01T00:00:00Z
    import datetime as dt

    state = {"n": 0}

    def clock() -> str:
        state["n"] += 1
        moment = dt.datetime.fromtimestamp(start_s + state["n"], dt.timezone.utc)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    return clock


def demo_digest(work: Path) -> dict[str, str]:
    from ledger.package_tools.demo import run_demo

    with fixed_ids():
        path, _, _ = run_demo(work / "demo", echo=lambda _text: None)
    return tree_digest(path)


def journal_digest(name: str, work: Path) -> dict[str, str]:
    from ledger import BudgetConfig, Case
    from ledger import export_case
    from ledger.package_tools.journal import apply_journal

    target = work / name
    policy = BudgetConfig.load(HERE.parent / "config" / "budget.example.toml")
    with fixed_ids():
        case = Case.create(target, name.replace("__", "-")[:100], clock=counter_clock())
    try:
        lines = (TRAJECTORIES / f"{name}.jsonl").read_bytes().split(b"\n")
        results = hashlib.sha256()
        for outcome in apply_journal(case, lines, budget=case.budget(policy), keep_going=True, batch_size=50):
            line = outcome.to_dict()
            if line.get("result"):
                line["result"].pop("package_path", None)
            results.update(json.dumps(line, sort_keys=True).encode("utf-8") + b"\n")
        export_case(case)
    finally:
        case.close()
    return {**tree_digest(target), "(result lines)": results.hexdigest()}


def build_all() -> dict[str, dict[str, str]]:
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        out = {"demo": demo_digest(work)}
        for name in JOURNALS:
            out[name] = journal_digest(name, work)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    GOLDEN.write_text(json.dumps(build_all(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")
