"""Crash torture: SIGKILL ``ledger apply`` and ``ledger export`` at random moments (issue 3).

Run ``python tests/torture.py --trials 1000`` for the long version (the test
suite runs a short one in ``tests/test_reliability.py``). Each apply trial:

1. copies a base package (the same genesis event and package_id for every run),
2. starts ``ledger apply --keep-going`` on a long journal (every operation kind,
   four hypotheses, refusals included) with a random ``--batch-size``, and kills
   it with SIGKILL after a random delay,
3. checks that ``verify`` passes, that the ledger's events are a byte-identical
   prefix of a run that was never killed (every operation wholly present or
   wholly absent), and that every result line printed before the kill is in it,
4. re-runs the same journal to the end: lines already applied come back
   ``reused``, the others apply, with the same outcomes as the unkilled run,
5. exports and compares the tree byte for byte with the unkilled run's export.

Each export trial kills ``ledger export`` at a random moment over an older
export, checks that ``manifest.json`` parses and points only at files holding
the right bytes, re-runs the export and compares the tree with the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ledger import Case
from ledger.ground.canonical import parse_json, sha256_hex
from ledger import export_case, verify_case

GENESIS_AT = "2020-12-31T00:00:00Z"
CASE_ID = "TORTURE-1"


def build_journal(seed: int = 7, cycles: int = 140) -> list[dict]:
    """A deterministic journal with every operation kind; all refusals stay refusals on a re-run."""
    rng = random.Random(seed)
    lines: list[dict] = [
        {"op": "open_revision", "units_per_hypothesis": 400,
         "hypotheses": [{"statement": f"hypothesis {i}"} for i in range(1, 5)]},
        {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"},
        {"op": "initialize"},
    ]
    actions = ["source.read_context", "source.find_text", "database.lookup", "research.lookup", "test.automated"]
    for n in range(cycles):
        h = f"H{rng.randint(1, 4)}"
        a = f"s{n:04d}"
        lines.append({"op": "reserve", "hypothesis": h, "action_id": a, "action": rng.choice(actions)})
        roll = rng.random()
        if roll < 0.12:
            lines.append({"op": "fail", "hypothesis": h, "action_id": a, "reason": "tool timed out"})
            continue
        evidence = ({} if roll < 0.2 else {"finding": f"f{rng.randint(0, 40)}", "line": rng.randint(1, 9)})
        lines.append({"op": "record_result", "hypothesis": h, "action_id": a, "evidence": evidence,
                      **({"source_refs": ["sources/app.py"]} if roll > 0.8 else {})})
        lines.append({"op": "settle", "hypothesis": h, "action_id": a, "semantic_score": rng.randint(0, 100),
                      "reason": "assessed"})
        if n % 17 == 5:
            lines.append({"op": "reserve", "hypothesis": h, "action_id": "bad id", "action": "x"})  # INVALID_ID
        if n % 23 == 11:
            lines.append({"op": "snapshot"})
        if n % 29 == 13:
            lines.append({"op": "settle", "hypothesis": "H1", "action_id": a, "semantic_score": 101, "reason": "r"})
    lines.append({"op": "reject", "hypothesis": "H4", "reason": "ruled out at the end"})
    for number, line in enumerate(lines):
        if line["op"] != "snapshot":
            line["at"] = f"2021-01-01T{number // 3600:02d}:{number // 60 % 60:02d}:{number % 60:02d}Z"
    return lines


def write_journal(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def make_base(path: Path) -> Path:
    """A package with inputs and the genesis event only: every run starts from a copy."""
    (path / "sources").mkdir(parents=True)
    (path / "sources" / "app.py").write_text("def add(a, b):\n    return a - b\n", encoding="utf-8")
    Case.create(path, CASE_ID, at=GENESIS_AT).close()
    return path


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "ledger_cli", *args]


def run_apply(package: Path, journal: Path, batch_size: int) -> list[dict]:
    done = subprocess.run(cli("apply", str(package), str(journal), "--keep-going", "--batch-size", str(batch_size)),
                          capture_output=True, timeout=600)
    if b"Traceback" in done.stderr:
        raise AssertionError(done.stderr.decode())
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


def ledger_events(package: Path) -> list[tuple[int, str]]:
    import sqlite3

    conn = sqlite3.connect(f"file:{package / 'ledger.sqlite'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT seq, body FROM events ORDER BY seq").fetchall()
    finally:
        conn.close()


def tree(root: Path) -> dict[str, bytes]:
    files = {}
    for directory, _, names in os.walk(root / "analysis"):
        for name in names:
            full = Path(directory, name)
            files[full.relative_to(root).as_posix()] = full.read_bytes()
    files["manifest.json"] = (root / "manifest.json").read_bytes()
    return files


def outcome(line: dict, journal: list[dict]) -> tuple:
    """What must be the same in every run: ok, the event's seq, the refusal's code.

    A snapshot writes nothing and reports the state at the moment it runs, so
    only its ok flag is compared.
    """
    if journal[line["line"] - 1]["op"] == "snapshot":
        return (line["line"], line["ok"])
    return (line["line"], line["ok"], line.get("seq"), line["error"]["code"] if not line["ok"] else None)


@dataclass
class Reference:
    """The never-killed run everything is compared against."""

    base: Path
    journal: Path
    journal_lines: list[dict]
    lines: list[dict]
    events: list[tuple[int, str]]
    export: dict[str, bytes]
    old_export_dir: Path

    @classmethod
    def build(cls, work: Path, cycles: int = 140) -> "Reference":
        base = make_base(work / "base")
        lines = build_journal(cycles=cycles)
        journal = work / "journal.jsonl"
        write_journal(journal, lines)
        full = work / "reference"
        shutil.copytree(base, full)
        results = run_apply(full, journal, 100)
        with Case.open(full) as case:
            export_case(case)
        # an older export (the first 60 lines) for export-kill trials to overwrite
        old = work / "old-export"
        shutil.copytree(base, old)
        write_journal(work / "first.jsonl", lines[:60])
        run_apply(old, work / "first.jsonl", 100)
        with Case.open(old) as case:
            export_case(case)
        return cls(base, journal, lines, results, ledger_events(full), tree(full), old)


@dataclass
class Figures:
    apply_trials: int = 0
    killed_mid_run: int = 0
    finished_before_kill: int = 0
    export_trials: int = 0
    export_killed: int = 0
    failures: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        return {"apply_trials": self.apply_trials, "killed_mid_run": self.killed_mid_run,
                "finished_before_kill": self.finished_before_kill, "export_trials": self.export_trials,
                "export_killed_mid_run": self.export_killed, "lost_or_corrupted": len(self.failures)}


def kill_after(command: list[str], delay: float, stdout_path: Path) -> bool:
    """Start ``command``, SIGKILL it after ``delay`` seconds; True if it was still running."""
    with open(stdout_path, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL)
        try:
            process.wait(timeout=delay)
            return False
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
            return True


BATCH_SIZES = (1, 5, 100)


def apply_trial(reference: Reference, work: Path, rng: random.Random, figures: Figures,
                durations: dict[int, float]) -> None:
    package = work / "trial"
    shutil.rmtree(package, ignore_errors=True)
    shutil.copytree(reference.base, package)
    batch = rng.choice(BATCH_SIZES)
    printed_path = work / "printed.jsonl"
    # kill anywhere from process start-up to just before the end of an unkilled run
    began = time.perf_counter()
    killed = kill_after(cli("apply", str(package), str(reference.journal), "--keep-going", "--batch-size", str(batch)),
                        rng.uniform(0.1, durations[batch] * 0.97), printed_path)
    if not killed:  # the probe ran on a busier machine than this run: later delays follow the faster run
        durations[batch] = min(durations[batch], time.perf_counter() - began)
    figures.apply_trials += 1
    figures.killed_mid_run += killed
    figures.finished_before_kill += not killed
    where = f"apply trial {figures.apply_trials} (batch {batch})"
    try:
        verify_case(package)
        events = ledger_events(package)
        if events != reference.events[:len(events)]:
            raise AssertionError("the ledger is not a prefix of the unkilled run's events")
        head = events[-1][0]
        printed = [json.loads(line) for line in printed_path.read_text().splitlines() if line.endswith("}")]
        for line in printed:
            if line["ok"] and line["seq"] > head:
                raise AssertionError(f"line {line['line']} was printed but its event {line['seq']} is not durable")
        rerun = run_apply(package, reference.journal, rng.choice([1, 100]))
        expected = [outcome(r, reference.journal_lines) for r in reference.lines]
        got = [outcome(r, reference.journal_lines) for r in rerun]
        if got != expected:
            first = next(i for i, (a, b) in enumerate(zip(got + [None] * len(expected), expected)) if a != b)
            raise AssertionError(f"the re-run's outcomes differ from the unkilled run's at {got[first:first + 1]} "
                                 f"vs {expected[first:first + 1]} (head was {head})")
        for line in rerun:
            if reference.journal_lines[line["line"] - 1]["op"] == "snapshot":
                continue
            if line["ok"] and line["reused"] != (line["seq"] <= head):
                raise AssertionError(f"line {line['line']}: reused={line['reused']} but seq {line['seq']} vs head {head}")
        with Case.open(package) as case:
            export_case(case)
        if tree(package) != reference.export:
            raise AssertionError("the final export differs from the unkilled run's")
    except Exception as exc:  # noqa: BLE001 - every failure is a finding to report
        figures.failures.append(f"{where}: {type(exc).__name__}: {exc}")


def check_manifest(package: Path) -> None:
    manifest = parse_json((package / "manifest.json").read_bytes())
    head = manifest["head"]
    events = dict(ledger_events(package))
    if sha256_hex(events[head["seq"]].encode()) != head["sha256"]:
        raise AssertionError("manifest head is not an event of the ledger")
    pointer = manifest["artifacts"]["budget_ledger"]
    if pointer is not None:
        data = (package / pointer["path"]).read_bytes()
        if sha256_hex(data) != pointer["sha256"]:
            raise AssertionError(f"manifest points at {pointer['path']} whose bytes differ")


def export_trial(reference: Reference, work: Path, rng: random.Random, figures: Figures, duration: float) -> None:
    package = work / "export-trial"
    shutil.rmtree(package, ignore_errors=True)
    shutil.copytree(reference.old_export_dir, package)
    for suffix in ("", "-wal", "-shm"):
        (package / f"ledger.sqlite{suffix}").unlink(missing_ok=True)
    shutil.copyfile(reference.base.parent / "reference" / "ledger.sqlite", package / "ledger.sqlite")
    killed = kill_after(cli("export", str(package)), rng.uniform(0.1, duration * 0.97), work / "export.out")
    figures.export_trials += 1
    figures.export_killed += killed
    try:
        check_manifest(package)
        done = subprocess.run(cli("export", str(package)), capture_output=True, timeout=600)
        if done.returncode != 0:
            raise AssertionError(done.stderr.decode())
        check_manifest(package)
        if tree(package) != reference.export:
            raise AssertionError("the re-run export differs from the reference export")
    except Exception as exc:  # noqa: BLE001
        figures.failures.append(f"export trial {figures.export_trials}: {type(exc).__name__}: {exc}")


def timed(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, capture_output=True, timeout=600)
    return time.perf_counter() - began


def torture(trials: int, export_trials: int, seed: int = 1, work: Path | None = None, cycles: int = 140) -> Figures:
    """Run the trials and return the figures (``failures`` lists anything lost or corrupted)."""
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="ledger-torture-", dir=work))
    figures = Figures()
    try:
        reference = Reference.build(work, cycles)
        durations = {}
        for batch in BATCH_SIZES:
            probe = work / f"probe-{batch}"
            shutil.copytree(reference.base, probe)
            durations[batch] = timed(cli("apply", str(probe), str(reference.journal), "--keep-going",
                                         "--batch-size", str(batch)))
        export_time = timed(cli("export", str(work / "probe-1")))
        for _ in range(trials):
            apply_trial(reference, work, rng, figures, durations)
        for _ in range(export_trials):
            export_trial(reference, work, rng, figures, export_time)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="apply trials (SIGKILL of ledger apply)")
    parser.add_argument("--export-trials", type=int, help="export trials (default: a fifth of --trials)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    started = time.perf_counter()
    figures = torture(args.trials, args.export_trials if args.export_trials is not None else max(1, args.trials // 5),
                      args.seed)
    print(json.dumps({**figures.summary(), "seconds": round(time.perf_counter() - started, 1)}))
    for failure in figures.failures:
        print("FAILURE:", failure, file=sys.stderr)
    return 1 if figures.failures else 0


if __name__ == "__main__":
    sys.exit(main())
