"""``python -m benchmarks [--quick] [--json]``: case-ledger against the physical limit and peers.

Every figure is measured in one run, on the same disk, at the same durability
(WAL, ``synchronous=FULL``, one fsync per commit), and printed with its ratios:

The first five below (the durable stores) take turns in seven rounds of 300 operations (three of 30 with
``--quick``), the median rate of each; ``durable_op_vs_raw``, ``vs_eventsourcing`` and
``vs_file_per_event`` divide the ledger's rate by the raw commit's, the peer's and the file store's:

* ``raw_tx_per_s`` — raw SQLite: ``BEGIN IMMEDIATE``; insert one row the size of a ledger event; ``COMMIT``;
* ``ledger_ops_per_s`` — ``reserve``/``record_result``/``settle`` through the Python API, each durable;
* ``file_per_event_ops_per_s`` — a JSON file per event: temp file, fsync, rename, fsync dir,
  then the manifest pointer rewritten the same way;
* ``eventsourcing_ops_per_s`` — the ``eventsourcing`` library's SQLite persistence, one event per operation;
* ``sql_floor_ops_per_s`` — the ledger's own statements for the same operations (recorded from the API,
  with their parameters) run again, one durable transaction each, on a copy of that ledger: its SQL
  without its Python (``benchmarks/sql_floor.py``). ``sql_floor_vs_raw`` and ``sql_floor_vs_eventsourcing``
  (shown, no target) bound ``durable_op_vs_raw`` and ``vs_eventsourcing`` from above for this storage
  layout; ``ledger_vs_sql_floor`` is the share of that floor the API reaches;
* ``apply_ops_per_s`` — ``ledger apply`` (a real process) on a journal of 10,000 operations with group commit
  (a new case in each of three rounds taken in turns with ``raw_batch_inserts_per_s``; the median);
* ``cli_check_ms`` — one ``ledger budget check`` as a fresh process, start-up included (median of nine;
  shown with no target);
* ``latency_ratio_100k_vs_1k`` — median durable operation latency on a ledger of 100,000 events over
  that on one of 1,000, the two measured in turns (six rounds), so drift in the machine's speed hits both;
* ``gate_latency_ratio_100k_vs_1k`` / ``snapshot_latency_ratio_100k_vs_1k`` — the same for the reads an
  agent makes before each action, on the same two ledgers in the same rounds: the soft gate (the worse
  of ``check`` and ``advice``) and ``snapshot`` (after the process's first, with one cycle appended
  before each read);
* ``verify_events_per_s`` / ``verify_peak_rss_mib`` — ``ledger verify`` (a real process) at 100,000 events
  (three rounds taken in turns with the bare scan of ``verify_vs_scan``; the median time, the largest RSS);
* ``balances_query_ms`` — ``SELECT * FROM balances`` at 100,000 events (median);
* ``export_files_per_s`` — ``ledger export`` of that case into an empty package folder (two exports
  taken in turns with two of ``export_vs_raw_files``'s bare loop, in the order export, loop, loop,
  export, so that a steady drift in the disk's speed hits both alike; the mean of each);
* ``simulate_vs_apply`` — how many times faster ``ledger simulate`` (one process, default ``--jobs``)
  replays the 100 real journals (``tests/data/trajectories``) than ``ledger apply --keep-going``
  applies them (one process per journal), both under the example policy: journal lines per second
  on both sides, start-up included on both; the two take turns (simulate, apply, simulate, apply,
  simulate): the median of the three simulates, the mean of the two applies (each every journal).
  ``simulate_steps_vs_apply_lines`` divides the simulator's *steps* (reserve lines, as its ``steps``
  figure counts them) per second by apply's lines per second instead; it is shown, with no target:
  it mixes two units, so it also moves with the journals' share of reserve lines (about a third);
* ``frontier_vs_simulate`` — policy × run pairs per CPU second of ``ledger simulate --frontier`` over
  those of plain ``ledger simulate``, the same grid (1,000 policies; ``--quick``: 100) on the same real
  journals (100; ``--quick``: 10), one process each with ``--jobs 1``, run once
  (``benchmarks/frontier_speed.py``);
* ``fsync_ms`` — the machine's fsync (median, 4 KiB write then fsync);
* ``cpu_per_op_vs_raw`` — process CPU seconds per API operation over CPU seconds per raw commit,
  from the same interleaved rounds;
* ``apply_vs_raw_batch`` — ``apply_ops_per_s`` over raw inserts per second of event-size rows in
  100-row durable transactions, the two taken in turns over three rounds (the median of each);
* ``verify_vs_scan`` — ``verify_events_per_s`` over a bare scan of the same ledger (fetch every
  event body, ``json.loads``, sha256);
* ``export_vs_raw_files`` — ``export_files_per_s`` over a bare loop writing the same bytes to the
  same layout atomically (temp file, fsync, rename, each folder fsynced once);
* ``multi_verify_speedup`` — cases verified per second by ``ledger verify --all`` with ``--jobs 2`` over
  the same with ``--jobs 1``, 200 small cases (real processes; the median of three runs each, one with
  ``--quick``);
* ``apply_rss_ratio`` — peak RSS of ``ledger apply`` on a 200,000-line journal over a 1,000-line one
  (``--quick``: 10,000 lines; ``apply_rss_lines`` says which);
* ``fleet_export_cases_per_s`` — ``ledger fleet export --jobs <cpus>`` (a real process) over 10,000 small
  real cases built from the bundled journals (``--quick``: 200); ``fleet_sql_ms`` — a cross-case aggregate
  (spend per action type per day) with ``fleet_query`` (median of five); ``fleet_export_rss_ratio`` — the
  peak RSS of that export (its largest process) over exporting one case (see ``benchmarks/fleet.py``).

``apply_vs_ledger_ops`` (``apply_ops_per_s`` over ``ledger_ops_per_s``) and
``frontier_vs_simulate_wall`` (the frontier's ratio in wall time) are shown with no target.

``python -m benchmarks --table RUN_A.json RUN_B.json`` prints the README's table from saved
``--json`` runs, each ratio beside its target, then the figures behind them.

``--quick`` shrinks most sizes (10x fewer events and operations, 10 journals, 100 policies, 200
fleet cases; the 200 cases of ``multi_verify_speedup`` stay, run once) so the run ends in about two
minutes; its figures are for smoke-checking, not for the README, and the table's labels still
name the full run's sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ledger import AnalysisConfig, BudgetConfig, Case

from . import baselines, frontier_speed
from .fleet import bench_fleet
from .report import print_table
from .sql_floor import SqlFloorStore

HYPOTHESES = 4
UNITS = 10**15
UNLIMITED = {"limits": {"budget_events_max": 10**12}}


def _policy() -> BudgetConfig:
    return BudgetConfig.from_mapping({"action_costs": {"source.read_context": 5, "source.find_text": 10}})


def _new_case(path: Path, synchronous: str = "FULL") -> Case:
    config = AnalysisConfig(storage={"synchronous": synchronous}, **UNLIMITED)
    case = Case.create(path, "BENCH-1", analysis_config=config)
    case.open_revision([{"statement": f"hypothesis {i}"} for i in range(1, HYPOTHESES + 1)], UNITS)
    case.transition("INVESTIGATING_HYPOTHESES")
    case.budget(_policy()).initialize()
    return case


def _cycle(budget, n: int) -> None:
    """One reserve/record_result/settle cycle (three operations) on hypothesis n % HYPOTHESES."""
    h, a = f"H{n % HYPOTHESES + 1}", f"a{n:08d}"
    budget.reserve(h, a, "source.read_context")
    budget.record_result(h, a, {"finding": f"observation {n}", "lines": [n, n + 3]})
    budget.settle(h, a, 60, "relevant")


def _event_size(case: Case) -> int:
    return case.query("SELECT AVG(LENGTH(body)) AS n FROM events WHERE stream = 'budget'")[0]["n"]


class RawStore:
    """Raw SQLite at the ledger's durability: one row the size of an event per transaction."""

    def __init__(self, directory: Path, size: int) -> None:
        self.conn = sqlite3.connect(directory / "raw.sqlite", isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, sha256 TEXT, body TEXT)")
        self.body = "x" * int(size)
        self.cpu, self.ops = 0.0, 0

    def run(self, n: int) -> float:
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute("INSERT INTO events (sha256, body) VALUES (?, ?)", ("0" * 64, self.body))
            self.conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
        self.cpu, self.ops = self.cpu + time.process_time() - cpu, self.ops + n
        return n / elapsed


class LedgerStore:
    """reserve/record_result/settle through the Python API, each its own durable operation."""

    def __init__(self, directory: Path, synchronous: str = "FULL") -> None:
        self.case = _new_case(directory / f"ledger-{synchronous}", synchronous)
        self.budget = self.case.budget()
        self.next = 0
        self.cpu, self.ops = 0.0, 0

    def run(self, operations: int) -> float:
        cycles = max(1, operations // 3)
        start, cpu = time.perf_counter(), time.process_time()
        for n in range(self.next, self.next + cycles):
            _cycle(self.budget, n)
        elapsed = time.perf_counter() - start
        self.next += cycles
        self.cpu, self.ops = self.cpu + time.process_time() - cpu, self.ops + 3 * cycles
        return 3 * cycles / elapsed


class FilePerEventStore:
    """A JSON file per event: temp file, fsync, rename, fsync dir; then the manifest pointer the same way."""

    def __init__(self, directory: Path, size: int) -> None:
        self.root = directory / "files"
        (self.root / "events").mkdir(parents=True)
        self.body = b"x" * int(size)
        self.next = 0

    def _atomic(self, path: Path, data: bytes) -> None:
        temp = path.with_name("." + path.name + ".tmp")
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
        fd = os.open(path.parent, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)

    def run(self, n: int) -> float:
        start = time.perf_counter()
        for i in range(self.next, self.next + n):
            self._atomic(self.root / "events" / f"{i:08d}.json", self.body)
            self._atomic(self.root / "manifest.json", json.dumps({"head": i, "path": f"events/{i:08d}.json"}).encode())
        self.next += n
        return n / (time.perf_counter() - start)


class EventsourcingStore:
    """The eventsourcing library's SQLite persistence: one aggregate event saved per operation."""

    def __init__(self, directory: Path) -> None:
        from eventsourcing.application import Application
        from eventsourcing.domain import Aggregate, event

        class Account(Aggregate):
            def __init__(self, units: int) -> None:
                self.remaining = units

            @event("Debited")
            def debit(self, action_id: str, cost: int) -> None:
                self.remaining -= cost

        os.environ.update(PERSISTENCE_MODULE="eventsourcing.sqlite",
                          SQLITE_DBNAME=str(directory / "eventsourcing.sqlite"), SQLITE_LOCK_TIMEOUT="5")
        self.app = Application()
        self.account = Account(UNITS)
        self.app.save(self.account)
        self.next = 0

    def run(self, n: int) -> float:
        start = time.perf_counter()
        for i in range(self.next, self.next + n):
            self.account.debit(action_id=f"a{i}", cost=5)
            self.app.save(self.account)  # one transaction, one event
        self.next += n
        return n / (time.perf_counter() - start)


def interleaved(stores: dict[str, object], operations: int, rounds: int) -> dict[str, float]:
    """Median rate of each store over ``rounds`` rounds taken in turn, so drift in the
    disk's speed (other load, write-back) hits every store alike."""
    rates: dict[str, list[float]] = {name: [] for name in stores}
    for _ in range(rounds):
        for name, store in stores.items():
            rates[name].append(store.run(operations))
    return {name: statistics.median(values) for name, values in rates.items()}


def write_journal(path: Path, operations: int) -> None:
    lines = [
        {"op": "open_revision", "hypotheses": [{"statement": f"hypothesis {i}"} for i in range(1, HYPOTHESES + 1)],
         "units_per_hypothesis": UNITS},
        {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"},
        {"op": "initialize"},
    ]
    with open(path, "w") as out:
        written, n = 0, 0
        while written < operations:
            h, a = f"H{n % HYPOTHESES + 1}", f"a{n:08d}"
            lines += [{"op": "reserve", "hypothesis": h, "action_id": a, "action": "source.read_context"},
                      {"op": "record_result", "hypothesis": h, "action_id": a,
                       "evidence": {"finding": f"observation {n}", "lines": [n, n + 3]}},
                      {"op": "settle", "hypothesis": h, "action_id": a, "semantic_score": 60, "reason": "relevant"}]
            for line in lines[:operations - written]:
                out.write(json.dumps(line) + "\n")
            written += min(len(lines), operations - written)
            lines, n = [], n + 1


def run_cli(*args: str, ok: tuple[int, ...] = (0,)) -> tuple[float, int]:
    """Wall time and peak RSS (MiB) of ``python -m ledger_cli ARGS`` in a fresh process."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "ledger_cli", *args],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in ok:
        raise RuntimeError(f"ledger {' '.join(args)} failed: {process.stderr.read().decode()[-500:]}")
    return elapsed, usage.ru_maxrss // 1024


def bench_apply(directory: Path, operations: int, name: str = "applied") -> tuple[float, int]:
    """``(operations/s, peak RSS MiB)`` of ``ledger apply`` (a fresh process) on a new journal."""
    journal = directory / f"{name}.jsonl"
    write_journal(journal, operations)
    config = directory / "analysis.toml"
    config.write_text("[limits]\nbudget_events_max = 1000000000000\n")
    elapsed, rss = run_cli("--analysis-config", str(config), "apply", str(directory / name), str(journal),
                           "--create", "BENCH-2")
    journal.unlink()
    return operations / elapsed, rss


def bench_apply_vs_batch(directory: Path, event_bytes: float, operations: int, rounds: int) -> dict[str, float]:
    """``apply_ops_per_s`` (:func:`bench_apply`, a new case each round) and ``raw_batch_inserts_per_s``
    (twice the operations, :func:`baselines.raw_batch_inserts_per_s`) taken in turns over ``rounds``
    rounds, so drift in the machine's speed hits both; the median of each. The first round's case is
    the one ``bench_cli_call`` reads."""
    applied, raw = [], []
    for number in range(rounds):
        folder = directory / f"raw-batch-{number}"
        folder.mkdir()
        raw.append(baselines.raw_batch_inserts_per_s(folder, event_bytes, 2 * operations))
        applied.append(bench_apply(directory, operations, "applied" if number == 0 else f"applied-{number}")[0])
    return {"apply_ops_per_s": statistics.median(applied), "raw_batch_inserts_per_s": statistics.median(raw)}


def bench_cli_call(directory: Path, samples: int = 9) -> dict[str, float]:
    """Wall time of one ``ledger budget check`` (a fresh process, start-up included; the median of
    ``samples``) on the case :func:`bench_apply` left: what an agent calling the command line
    before each action pays per call."""
    timings = [run_cli("budget", "check", str(directory / "applied"), "H1", "source.read_context")[0]
               for _ in range(samples)]
    return {"cli_check_ms": statistics.median(timings) * 1000}


def bench_apply_rss(directory: Path, small: int, large: int) -> dict[str, object]:
    """Peak RSS of applying a ``large``-line journal over a ``small``-line one (real processes)."""
    _, small_rss = bench_apply(directory, small, "rss-small")
    _, large_rss = bench_apply(directory, large, "rss-large")
    shutil.rmtree(directory / "rss-large", ignore_errors=True)
    return {"apply_rss_lines": [small, large], "apply_rss_small_mib": small_rss, "apply_rss_large_mib": large_rss,
            "apply_rss_ratio": large_rss / small_rss}


TRAJECTORIES = Path(__file__).resolve().parent.parent / "tests" / "data" / "trajectories"
EXAMPLE_POLICY = Path(__file__).resolve().parent.parent / "config" / "budget.example.toml"


def bench_simulate_vs_apply(directory: Path, journals: int, repeats: int = 3) -> dict[str, float]:
    """``ledger simulate`` against ``ledger apply --keep-going`` on the first ``journals`` real journals,
    both under the example policy (``--config``).

    Both sides answer for the same lines under the same rules, so the ratio is one of wall
    times: apply's (one process per journal, one after another, summed; into new cases each time)
    over simulate's (one process for all, its default ``--jobs``). They take turns, simulate,
    apply, simulate, apply, simulate, so that drift in the machine's speed hits both: the mean of
    the two applies over the median of the three simulates. ``simulate`` does not evaluate the
    lines of a run after it stopped (every account terminal: ``apply`` refuses each of them), and
    uses every core.
    """
    folder = directory / "trajectories"
    folder.mkdir()
    policy = ["--config", str(EXAMPLE_POLICY)]  # both sides under the same policy: simulate's default one
    for path in sorted(TRAJECTORIES.glob("*.jsonl"))[:journals]:
        shutil.copy(path, folder / path.name)
    lines = steps = 0
    for path in sorted(folder.glob("*.jsonl")):
        parsed = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        lines += len(parsed)
        steps += sum(1 for line in parsed if line.get("op") == "reserve")

    def apply_all() -> float:
        shutil.rmtree(directory / "applied", ignore_errors=True)
        total = 0.0
        for path in sorted(folder.glob("*.jsonl")):
            total += run_cli(*policy, "apply", str(directory / "applied" / path.stem), str(path), "--create", "SIM",
                             "--keep-going", ok=(0, 1))[0]  # a run stopped by its policy exits 1
        return total

    simulates, applies = [], []
    for _ in range(repeats - 1):
        simulates.append(run_cli(*policy, "simulate", str(folder), "--json")[0])
        applies.append(apply_all())
    simulates.append(run_cli(*policy, "simulate", str(folder), "--json")[0])
    applied, simulated = statistics.mean(applies), statistics.median(simulates)
    return {"simulate_vs_apply": applied / simulated, "simulate_vs_apply_unit": "journal lines",
            "simulate_policy": EXAMPLE_POLICY.name,
            "simulate_s": simulated, "apply_s": applied, "simulate_lines": lines, "simulate_steps": steps,
            "simulate_lines_per_s": lines / simulated, "apply_journal_ops_per_s": lines / applied,
            "simulate_steps_per_s": steps / simulated,
            "simulate_steps_vs_apply_lines": (steps / simulated) / (lines / applied)}


def fill(case: Case, cycles_from: int, cycles_to: int, batch: int = 500) -> None:
    budget = case.budget()
    n = cycles_from
    while n < cycles_to:
        with case.batch():
            for n in range(n, min(n + batch, cycles_to)):
                _cycle(budget, n)
        n += 1


def settle_disk(case: Case) -> None:
    """Checkpoint and flush what a bulk fill left in the WAL and the page cache, so that the
    latency measured next is the operation's own and not the disk's write-back of the fill."""
    case.storage.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    os.sync()


def latency_samples_ms(case: Case, start: int, samples: int) -> list[float]:
    """Milliseconds of each durable operation of ``samples`` reserve/record_result/settle cycles."""
    budget = case.budget()
    timings = []
    for n in range(start, start + samples):
        h, a = f"H{n % HYPOTHESES + 1}", f"a{n:08d}"
        for call in (lambda: budget.reserve(h, a, "source.read_context"),
                     lambda: budget.record_result(h, a, {"finding": f"observation {n}", "lines": [n, n + 3]}),
                     lambda: budget.settle(h, a, 60, "relevant")):
            began = time.perf_counter()
            call()
            timings.append((time.perf_counter() - began) * 1000)
    return timings


def read_samples_ms(case: Case, start: int, samples: int) -> dict[str, list[float]]:
    """Milliseconds of the reads an agent makes before each action (``check``, ``advice``, ``snapshot``),
    each timed after one reserve/record_result/settle cycle is appended (not timed), as in an
    agent's loop."""
    budget = case.budget()
    timings: dict[str, list[float]] = {"check": [], "advice": [], "snapshot": []}
    for n in range(start, start + samples):
        _cycle(budget, n)
        h = f"H{n % HYPOTHESES + 1}"
        for name, call in (("check", lambda: budget.check(h, "source.read_context")),
                           ("advice", lambda: budget.advice(h)), ("snapshot", budget.snapshot)):
            began = time.perf_counter()
            call()
            timings[name].append((time.perf_counter() - began) * 1000)
    return timings


#: Rounds the small and the large ledger take turns in (:func:`alternating_samples`).
GROWTH_ROUNDS = 6


def alternating_samples(cases: dict[str, Case], samples: int) -> dict[str, dict[str, list[float]]]:
    """Every sample of :func:`latency_samples_ms` and :func:`read_samples_ms` for each of ``cases``,
    taken in :data:`GROWTH_ROUNDS` rounds in which the cases take turns, so that drift in the
    machine's speed (other load, write-back) hits them alike. Each case's first ``snapshot`` (the
    process's check of its whole history) comes before the rounds and is not timed."""
    out: dict[str, dict[str, list[float]]] = {name: {"latency": [], "check": [], "advice": [], "snapshot": []}
                                              for name in cases}
    for case in cases.values():
        settle_disk(case)
        case.budget().snapshot()
    per_round = max(1, samples // GROWTH_ROUNDS)
    for number in range(GROWTH_ROUNDS):
        for index, (name, case) in enumerate(cases.items()):
            base = (index + 1) * 10**7 + number * per_round
            out[name]["latency"] += latency_samples_ms(case, base, per_round)
            for read, values in read_samples_ms(case, base + 5 * 10**6, per_round).items():
                out[name][read] += values
    return out


def read_figures(small: dict[str, float], large: dict[str, float]) -> dict[str, float]:
    """The reads' figures and ratios: the gate is the worse of ``check`` and ``advice``."""
    out = {f"{name}_ms_{size}": value for size, reads in (("small", small), ("large", large))
           for name, value in reads.items()}
    out["gate_latency_ratio_100k_vs_1k"] = max(large["check"] / small["check"], large["advice"] / small["advice"])
    out["snapshot_latency_ratio_100k_vs_1k"] = large["snapshot"] / small["snapshot"]
    return out


#: Rounds ``ledger verify`` and the bare scan of the large ledger take turns in (:func:`verify_and_scan`).
VERIFY_ROUNDS = 3


def verify_and_scan(case: Path, rounds: int) -> tuple[float, int, float]:
    """``(verify seconds, its peak RSS MiB, scan events/s)``: ``ledger verify`` of ``case`` (a real process)
    and the bare scan of its ledger (:func:`baselines.scan_events_per_s`) taken in turns over ``rounds``
    rounds, the median of each (the largest RSS), so drift in the machine's speed hits both."""
    verify, peaks, scans = [], [], []
    for _ in range(rounds):
        scans.append(baselines.scan_events_per_s(case / "ledger.sqlite"))
        seconds, peak = run_cli("verify", str(case))
        verify.append(seconds)
        peaks.append(peak)
    return statistics.median(verify), max(peaks), statistics.median(scans)


def export_and_raw_files(case: Path, target: Path) -> tuple[float, int, float]:
    """``(export seconds, files, raw files/s)``: ``ledger export`` of ``case`` into an empty package folder
    (a real process) and the bare loop (:func:`baselines.raw_files_per_s`, writing the same files under
    ``target``) in the order export, loop, loop, export; the mean of each."""
    exports, raws = [], []

    def export() -> None:
        shutil.rmtree(case / "analysis", ignore_errors=True)
        (case / "manifest.json").unlink(missing_ok=True)
        exports.append(run_cli("export", str(case))[0])

    def raw() -> None:
        shutil.rmtree(target, ignore_errors=True)
        raws.append(baselines.raw_files_per_s(case / "analysis", target))

    for step in (export, raw, raw, export):
        step()
    files = sum(len(names) for _, _, names in os.walk(case / "analysis")) + 1
    return statistics.mean(exports), files, statistics.mean(raws)


def bench_growth(directory: Path, small: int, large: int, samples: int) -> dict[str, float]:
    """Latency and reads on a ledger of ``small`` and one of ``large`` events, measured in turns; then
    verify/balances/export of the large one."""
    small_case = _new_case(directory / "small")
    fill(small_case, 0, small // 3)
    case = _new_case(directory / "big")
    fill(case, 0, large // 3)
    taken = alternating_samples({"small": small_case, "large": case}, samples)
    small_case.close()
    medians = {name: {key: statistics.median(values) for key, values in figures.items()}
               for name, figures in taken.items()}
    small_ms, large_ms = medians["small"].pop("latency"), medians["large"].pop("latency")
    events = case.status()["package_generation"]
    timings = []
    for _ in range(20):
        began = time.perf_counter()
        case.query("SELECT * FROM balances")
        timings.append(time.perf_counter() - began)
    case.close()
    verify_s, verify_rss, scan = verify_and_scan(directory / "big", VERIFY_ROUNDS)
    export_s, files, raw_files = export_and_raw_files(directory / "big", directory / "raw-files")
    return {
        "scan_events_per_s": scan,
        "verify_vs_scan": events / verify_s / scan,
        "raw_files_per_s": raw_files,
        "export_vs_raw_files": files / export_s / raw_files,
        "events": events,
        "latency_ms_small": small_ms,
        "latency_ms_large": large_ms,
        "latency_ratio_100k_vs_1k": large_ms / small_ms,
        "verify_events_per_s": events / verify_s,
        "verify_peak_rss_mib": verify_rss,
        "balances_query_ms": statistics.median(timings) * 1000,
        "export_files_per_s": files / export_s,
        **read_figures(medians["small"], medians["large"]),
    }


def bench_multi_verify(directory: Path, cases: int, repeats: int) -> dict[str, float]:
    """Cases verified per second by ``ledger verify --all`` (a real process) with ``--jobs 2`` over the
    same with ``--jobs 1``, on ``cases`` small cases (10 reserve/record_result/settle cycles each); the
    median of ``repeats`` runs of each, taken alternately."""
    folder = directory / "many"
    for number in range(cases):
        case = _new_case(folder / f"case-{number:03d}", synchronous="NORMAL")
        fill(case, 0, 10)
        case.close()
    timings: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(repeats):
        for jobs in (1, 2):
            timings[jobs].append(run_cli("verify", "--all", str(folder), "--jobs", str(jobs))[0])
    shutil.rmtree(folder, ignore_errors=True)
    one, two = (cases / statistics.median(timings[jobs]) for jobs in (1, 2))
    return {"multi_verify_cases": cases, "multi_verify_cases_per_s_jobs1": one,
            "multi_verify_cases_per_s_jobs2": two, "multi_verify_speedup": two / one}


def machine() -> dict[str, str]:
    return {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
            "system": f"{platform.system()} {platform.machine()}", "cpus": str(os.cpu_count())}


def bench_durable(work: Path, rounds: int, operations: int, results: dict[str, object]) -> None:
    """The four (five with eventsourcing) durable stores in interleaved rounds, with CPU per operation."""
    probe = LedgerStore(work / "probe")
    probe.run(30)
    size = _event_size(probe.case)
    probe.case.close()
    results["event_bytes"] = size
    stores: dict[str, object] = {
        "raw_tx_per_s": RawStore(work, size),
        "ledger_ops_per_s": LedgerStore(work),
        "ledger_ops_per_s_synchronous_normal": LedgerStore(work, "NORMAL"),
        "file_per_event_ops_per_s": FilePerEventStore(work, size),
        "sql_floor_ops_per_s": SqlFloorStore(work, rounds * operations, _new_case, _cycle),
    }
    try:
        stores["eventsourcing_ops_per_s"] = EventsourcingStore(work)
    except ImportError:
        results["eventsourcing_ops_per_s"] = None
        print("eventsourcing is not installed: its figures are None (pip install '.[bench]')", file=sys.stderr)
    results.update(interleaved(stores, operations, rounds))
    raw, ledger = stores["raw_tx_per_s"], stores["ledger_ops_per_s"]
    results["raw_cpu_ms_per_op"] = 1000 * raw.cpu / raw.ops
    results["ledger_cpu_ms_per_op"] = 1000 * ledger.cpu / ledger.ops
    floor = stores["sql_floor_ops_per_s"]
    results["sql_floor_cpu_ms_per_op"] = 1000 * floor.cpu / floor.ops
    floor.conn.close()
    for store in stores.values():
        if isinstance(store, LedgerStore):
            store.case.close()


def ratios(results: dict[str, object]) -> None:
    results["durable_op_vs_raw"] = results["ledger_ops_per_s"] / results["raw_tx_per_s"]
    results["vs_file_per_event"] = results["ledger_ops_per_s"] / results["file_per_event_ops_per_s"]
    results["vs_eventsourcing"] = (results["ledger_ops_per_s"] / results["eventsourcing_ops_per_s"]
                                   if results["eventsourcing_ops_per_s"] else None)
    results["cpu_per_op_vs_raw"] = results["ledger_cpu_ms_per_op"] / results["raw_cpu_ms_per_op"]
    results["sql_floor_vs_raw"] = results["sql_floor_ops_per_s"] / results["raw_tx_per_s"]
    results["sql_floor_vs_eventsourcing"] = (results["sql_floor_ops_per_s"] / results["eventsourcing_ops_per_s"]
                                             if results["eventsourcing_ops_per_s"] else None)
    results["ledger_vs_sql_floor"] = results["ledger_ops_per_s"] / results["sql_floor_ops_per_s"]
    results["apply_vs_ledger_ops"] = results["apply_ops_per_s"] / results["ledger_ops_per_s"]
    results["apply_vs_raw_batch"] = results["apply_ops_per_s"] / results["raw_batch_inserts_per_s"]


def compile_sources() -> None:
    """Compile the modules a ``ledger`` process imports as an installed wheel has them: the
    package's own and those of its dependencies (pip compiles what it installs). Without this, a
    machine whose Python writes no bytecode cache (``PYTHONDONTWRITEBYTECODE``), or an environment
    whose caches were cleared, would time every process compiling them again (about 0.13 s of
    start-up apiece: click and jsonschema are most of it)."""
    import compileall
    import sysconfig

    import jsonschema  # noqa: F401 - imported by every command that reads a config
    import ledger
    import ledger_cli
    import ledger_cli.main  # noqa: F401 - every command's modules

    folders = {Path(ledger.__file__).parent, Path(ledger_cli.__file__).parent}
    installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    for module in list(sys.modules.values()):
        path = Path(getattr(module, "__file__", None) or "/").resolve()
        for root in installed:
            if root in path.parents:  # the top-level package (or module) it belongs to
                top = root / path.relative_to(root).parts[0]
                folders.add(top)
    for folder in sorted(folders):
        if not os.access(folder if folder.is_dir() else folder.parent, os.W_OK):
            continue
        if folder.is_dir():
            compileall.compile_dir(folder, quiet=2, workers=1)
        elif folder.suffix == ".py":
            compileall.compile_file(folder, quiet=2)


def _bench_single_case(work: Path, quick: bool, results: dict[str, object]) -> None:
    scale = 10 if quick else 1
    results["fsync_ms"] = baselines.fsync_ms(work)
    bench_durable(work, 3 if quick else 7, 300 // scale, results)
    results.update(bench_apply_vs_batch(work, results["event_bytes"], 10_000 // scale, 3))
    results.update(bench_cli_call(work))
    results.update(bench_apply_rss(work, 1_000, 10_000 if quick else 200_000))
    results.update(bench_simulate_vs_apply(work, 10 if quick else 100))
    results.update(bench_multi_verify(work, 200, 1 if quick else 3))
    results.update(frontier_speed.bench_frontier_vs_simulate(work, 10 if quick else 100,
                                                             frontier_speed.QUICK_GRID if quick else frontier_speed.GRID))
    results.update(bench_growth(work, 1_000, 100_000 // scale, 60 // (3 if quick else 1)))


def _fleet(directory: Path, cases: int) -> dict[str, object]:
    try:
        import duckdb  # noqa: F401 (the fleet commands need it)
    except ImportError:
        print("duckdb is not installed: the fleet figures are None (pip install '.[fleet]')", file=sys.stderr)
        return {"fleet_export_cases_per_s": None, "fleet_sql_ms": None, "fleet_export_rss_ratio": None}
    return bench_fleet(directory, cases, run_cli)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke check of a few minutes, not comparable with a full run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--dir", type=Path, help="where to put the benchmark files (default: a temp folder)")
    parser.add_argument("--only", choices=["fleet"], help="run only this part (its figures alone)")
    parser.add_argument("--table", type=Path, nargs="+", metavar="RUN.json",
                        help="print the README table from saved --json runs (a column each, named by its file), then the figures behind it, and exit")
    args = parser.parse_args(argv)
    if args.table:
        return print_table(args.table)
    if args.dir is not None and not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: no such folder")
    compile_sources()
    work = Path(tempfile.mkdtemp(prefix="ledger-bench-", dir=args.dir))
    results: dict[str, object] = {"quick": args.quick, "machine": machine()}
    try:
        if args.only is None:
            _bench_single_case(work, args.quick, results)
        results.update(_fleet(work / "fleet", 200 if args.quick else 10_000))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.only is None:
        ratios(results)
    return _print(results, args.json)


def _print(results: dict[str, object], as_json: bool) -> int:
    if as_json:
        print(json.dumps(results))
    else:
        for key, value in results.items():
            print(f"{key:40} {value:,.3f}" if isinstance(value, float) else f"{key:40} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
