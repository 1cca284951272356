"""Property tests of the evidence store (docs/evidence.md): novelty v2 against a reference model,
regrouped or renamed requests bring no new atoms, a rejected batch writes nothing and consumes no
record id, record ids never reset across revisions."""

from __future__ import annotations

import copy
import hashlib
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import BudgetConfig, Case, LedgerError
from ledger.ground.errors import REPLY_MISMATCH

LINES = ["def add(a, b):", "    return a + b", "", "def add(a, b):", "    return a - b", "# end"]
PATH = "sources/app.py"
HYPOTHESES = 3
#: Cheap actions and no low-information stop, so a long random run never runs out of accounts.
POLICY = BudgetConfig.from_mapping({"default_action_cost": 1, "action_costs": {}, "max_low_information_steps": 1000})
#: A few examples in the default run (each makes a case on disk); ``-m slow`` runs many more.
FEW = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MANY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

spans = st.tuples(st.integers(1, len(LINES) + 2), st.integers(0, 3)).map(lambda s: (s[0], s[0] + s[1]))
batches = st.lists(st.lists(spans, min_size=1, max_size=HYPOTHESES), min_size=1, max_size=5)


class Run:
    """A fresh case in a temporary package, numbering operations, actions and iterations."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="evidence-prop-"))
        (self.root / "sources").mkdir()
        (self.root / "sources" / "app.py").write_text("\n".join(LINES) + "\n", encoding="utf-8")
        self.case = Case.create(self.root, case_id="PROP-1")
        self.counter = 0
        self.revisions = 0
        self.open_revision()

    def open_revision(self) -> None:
        self.revisions += 1  # other statements: the same ones again would replay the open revision
        self.case.open_revision([{"statement": f"r{self.revisions} h{i}"} for i in range(HYPOTHESES)], 10_000)
        self.case.transition("INVESTIGATING_HYPOTHESES")
        self.case.budget(POLICY).initialize()

    def actions(self, batch: list[tuple[int, int]]) -> list[dict]:
        made = []
        for position, (start, end) in enumerate(batch):
            self.counter += 1
            made.append({"operation_id": f"op-{self.counter}", "hypothesis_id": f"H{position + 1}",
                         "action_id": f"q{self.counter}", "tool": "source.read_context",
                         "args": {"path": PATH, "start_line": start, "end_line": end}})
        return made

    def reserve(self, actions: list[dict]) -> None:
        for a in actions:
            self.case.budget().reserve(a["hypothesis_id"], a["action_id"], a["tool"])

    def release(self, actions: list[dict]) -> None:
        for a in actions:
            self.case.budget().fail(a["hypothesis_id"], a["action_id"], "assessed elsewhere")

    def store(self, batch: list[tuple[int, int]]) -> list[dict]:
        actions = self.actions(batch)
        self.reserve(actions)
        self.counter += 1
        result = self.case.evidence().query(f"i-{self.counter}", {"actions": actions}, True)
        self.release(actions)
        return result.records

    def atoms(self) -> int:
        return self.case.query("SELECT COUNT(*) AS n FROM evidence_atoms")[0]["n"]

    def close(self) -> None:
        self.case.close()
        shutil.rmtree(self.root, ignore_errors=True)


def model_atom(line: int) -> tuple[str, int, str]:
    """The reference model's atom of a source line: (path, line number, sha256 of its text)."""
    return (PATH, line, hashlib.sha256(LINES[line - 1].encode()).hexdigest())


def model_lines(start: int, end: int) -> list[int]:
    return [n for n in range(start, end + 1) if n <= len(LINES)]


def _novelty_is_floor_100_unseen_over_returned_against_a_reference_model(batch_list):
    run = Run()
    seen: set[tuple[str, int, str]] = set()
    try:
        for batch in batch_list:
            records = run.store(batch)
            assert [r["record_id"] for r in records] == sorted(r["record_id"] for r in records)
            for (start, end), record in zip(batch, records):
                atoms = [model_atom(n) for n in model_lines(start, end)]
                unseen = sum(1 for a in atoms if a not in seen)
                seen.update(atoms)
                expected = 0 if not atoms else 100 * unseen // len(atoms)
                assert record["novelty_score"] == expected, (batch, start, end)
        assert run.atoms() == len(seen)
    finally:
        run.close()


def _regrouped_or_renamed_requests_bring_no_new_atoms(first, data):
    run = Run()
    try:
        run.store(first)
        covered = sorted({n for start, end in first for n in model_lines(start, end)})
        if not covered:
            return
        atoms = run.atoms()
        # the same lines again: other ids, other hypotheses, spans cut differently (one line each, or
        # the whole run again), in another order
        regrouped = data.draw(st.lists(st.sampled_from(covered), min_size=1, max_size=HYPOTHESES))
        records = run.store([(n, n) for n in regrouped])
        assert [r["novelty_score"] for r in records] == [0] * len(records)
        again = run.store(list(reversed(first)))
        assert [r["novelty_score"] for r in again] == [0] * len(again)
        assert run.atoms() == atoms
    finally:
        run.close()


def _forge(reply: dict, how: str) -> dict:
    forged = copy.deepcopy(reply)
    result = forged["results"][0]
    if how == "text" and result["items"]:
        result["items"][0]["text"] += " "
    elif how == "line" and result["items"]:
        result["items"][0]["line"] += 1
    elif how == "drop" and result["items"]:
        result["items"].pop()
    elif how == "extra":
        result["items"].append(dict(result["items"][0]) if result["items"] else {"kind": "source_line"})
    elif how == "generation":
        forged["package_generation"] += 1
    else:
        result["truncated"] = not result["truncated"]
    return forged


def _ledger_files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("ledger.sqlite*")) if not p.name.endswith("-lock")}


def _a_rejected_batch_leaves_the_file_unchanged_and_consumes_no_record_id(before, span, how):
    run = Run()
    try:
        stored = len(run.store(before)) if before else 0
        actions = run.actions([span])
        run.reserve(actions)
        reply = run.case.evidence().query("probe", {"actions": actions}).reply
        forged = _forge(reply, how)
        files = _ledger_files(run.root)
        with pytest.raises(LedgerError) as refused:
            run.case.evidence().store_tool_results("forged", {"actions": actions}, forged)
        assert refused.value.code in (REPLY_MISMATCH, "INVALID_ARGUMENT")
        assert _ledger_files(run.root) == files
        accepted = run.case.evidence().store_tool_results("honest", {"actions": actions}, reply)
        assert accepted.records[0]["record_id"] == f"E{stored + 1:06d}"
    finally:
        run.close()


def _record_ids_never_reset_across_revisions_and_old_atoms_stay_seen(revisions):
    run = Run()
    ids: list[str] = []
    seen_lines: set[int] = set()
    try:
        for number, revision in enumerate(revisions):
            if number:
                run.case.transition("EVALUATING")
                run.open_revision()
            for batch in revision:
                for (start, end), record in zip(batch, run.store(batch)):
                    lines = model_lines(start, end)
                    if lines and set(lines) <= seen_lines:
                        assert record["novelty_score"] == 0  # seen in any earlier revision too
                    seen_lines.update(lines)
                    ids.append(record["record_id"])
        assert ids == [f"E{i:06d}" for i in range(1, len(ids) + 1)]
        assert [r["record_id"] for r in run.case.query("SELECT record_id FROM evidence ORDER BY record_id")] == ids
    finally:
        run.close()



# --- the properties, a few examples by default and many with -m slow ------------------------------
FORGERIES = st.sampled_from(["text", "line", "drop", "extra", "generation", "truncated"])
REVISIONS = st.lists(st.lists(st.lists(spans, min_size=1, max_size=HYPOTHESES), min_size=1, max_size=3),
                     min_size=1, max_size=3)
ONE_BATCH = st.lists(spans, min_size=1, max_size=HYPOTHESES)
PROPERTIES = {
    "novelty_is_floor_100_unseen_over_returned_against_a_reference_model":
        (_novelty_is_floor_100_unseen_over_returned_against_a_reference_model, (batches,)),
    "regrouped_or_renamed_requests_bring_no_new_atoms":
        (_regrouped_or_renamed_requests_bring_no_new_atoms, (ONE_BATCH, st.data())),
    "a_rejected_batch_leaves_the_file_unchanged_and_consumes_no_record_id":
        (_a_rejected_batch_leaves_the_file_unchanged_and_consumes_no_record_id,
         (st.lists(spans, max_size=3), spans, FORGERIES)),
    "record_ids_never_reset_across_revisions_and_old_atoms_stay_seen":
        (_record_ids_never_reset_across_revisions_and_old_atoms_stay_seen, (REVISIONS,)),
}
for _name, (_body, _strategies) in PROPERTIES.items():
    globals()[f"test_{_name}"] = FEW(given(*_strategies)(_body))
    globals()[f"test_{_name}_many_examples"] = pytest.mark.slow(MANY(given(*_strategies)(_body)))
