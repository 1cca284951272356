"""``frontier_vs_simulate``: policy × run pairs per second of ``ledger simulate --frontier`` over those of
plain ``ledger simulate``, on the same grid and the same real journals (docs/simulate.md, "How fast").

``python -m benchmarks.frontier_speed [--quick]`` prints the figures as JSON. Both sides are one
fresh ``ledger`` process each, ``--jobs 1``, start-up included, run once; the pairs per second are
per CPU second of that process (user + system), so other work on a shared machine does not tilt
the ratio (the wall-time ratio is ``frontier_vs_simulate_wall``). ``--frontier``
evaluates the grid plus its two baselines (``no-stop`` replayed in full, the other policies by the
step-table evaluator, the choice and one policy per frontier point replayed in full again); plain
``simulate`` replays every policy of the grid in full.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAJECTORIES = Path(__file__).resolve().parent.parent / "tests" / "data" / "trajectories"
#: The full grid: 1,000 policies (streak limit × units per hypothesis × threshold × refund ceiling).
GRID = ["max_low_information_steps=1,2,3,4,5,6,7,8,9,10",
        "units_per_hypothesis=150,200,250,300,400,500,700,1000,2000,100000",
        "low_information_threshold=0,50", "max_reward_bps=4000,6000,8000,9000,9999"]
#: The --quick grid: 100 policies.
QUICK_GRID = GRID[:2]


def _timed(*args: str) -> tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of ``python -m ledger_cli ARGS`` in a fresh process."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "ledger_cli", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"ledger {' '.join(args[:3])} … failed")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def bench_frontier_vs_simulate(directory: Path, journals: int, grid: list[str]) -> dict[str, float]:
    """The ratio and its parts on the first ``journals`` real journals under ``grid`` (``--vary`` specs)."""
    folder = directory / "frontier-journals"
    folder.mkdir()
    for path in sorted(TRAJECTORIES.glob("*.jsonl"))[:journals]:
        shutil.copy(path, folder / path.name)
    common = ["simulate", str(folder), "--outcomes", str(TRAJECTORIES / "outcomes.csv"), "--jobs", "1", "--json",
              *[arg for spec in grid for arg in ("--vary", spec)]]
    policies = 1
    for spec in grid:
        policies *= len(spec.split("=", 1)[1].split(","))
    frontier_s, frontier_cpu = _timed(*common, "--frontier", "--max-stopped", "resolved=5%")
    simulate_s, simulate_cpu = _timed(*common)
    frontier_rate = (policies + 2) * journals / frontier_cpu
    simulate_rate = policies * journals / simulate_cpu
    shutil.rmtree(folder, ignore_errors=True)
    return {"frontier_vs_simulate": frontier_rate / simulate_rate, "frontier_policies": policies,
            "frontier_runs": journals, "frontier_s": frontier_s, "frontier_plain_simulate_s": simulate_s,
            "frontier_cpu_s": frontier_cpu, "frontier_plain_simulate_cpu_s": simulate_cpu,
            "frontier_pairs_per_s": frontier_rate, "frontier_plain_pairs_per_s": simulate_rate,
            "frontier_vs_simulate_wall": ((policies + 2) / frontier_s) / (policies / simulate_s)}


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    work = Path(tempfile.mkdtemp(prefix="ledger-frontier-"))
    try:
        print(json.dumps(bench_frontier_vs_simulate(work, 10 if quick else 100, QUICK_GRID if quick else GRID)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
