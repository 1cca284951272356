"""Ledger size after N one-record evidence publications (docs/performance.md, "Evidence index size").

``python -m benchmarks.index_size 1500`` builds a case in a temporary folder, publishes N one-record
batches (reserve, query with store, fail) and prints the size of ``ledger.sqlite`` and of the index
events; the folder is removed afterwards.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from ledger import BudgetConfig, Case


def measure(batches: int) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="index-size-"))
    try:
        package = root / "case"
        (package / "sources").mkdir(parents=True)
        (package / "sources" / "big.txt").write_text("".join(f"line {i}\n" for i in range(batches + 10)))
        case = Case.create(package, case_id="BENCH")
        case.open_revision([{"statement": "h"}], 10**7)
        case.transition("INVESTIGATING_HYPOTHESES")
        budget = case.budget(BudgetConfig.from_mapping({"max_low_information_steps": 10**6}))
        budget.initialize()
        started = time.time()
        for i in range(batches):
            budget.reserve("H1", f"q{i}", "source.read_context")
            action = {"operation_id": f"op{i}", "hypothesis_id": "H1", "action_id": f"q{i}",
                      "tool": "source.read_context",
                      "args": {"path": "sources/big.txt", "start_line": i + 1, "end_line": i + 1}}
            case.evidence().query(f"it{i}", {"actions": [action]}, True)
            budget.fail("H1", f"q{i}", "measured")
        seconds = time.time() - started
        index_bytes = case.query("SELECT SUM(LENGTH(body)) AS n FROM events WHERE type = 'evidence.indexed'")[0]["n"]
        case.close()
        return {"ledger_bytes": (package / "ledger.sqlite").stat().st_size, "index_bytes": index_bytes,
                "seconds": seconds}
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
    found = measure(count)
    print(f"{count} one-record batches: ledger.sqlite {found['ledger_bytes']} bytes "
          f"({found['ledger_bytes'] / 2**20:.1f} MiB), index event bodies {found['index_bytes']} bytes, "
          f"{found['seconds']:.1f} s")
