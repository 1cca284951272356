"""The evidence index (docs/evidence.md): ``evidence-index-v2`` lists the records each publication
adds, the parent index's hash, the next record number and the running count, so an index stays small
however many came before; ledgers whose indexes are ``evidence-index-v1`` (every record so far in every
index) still import, verify and export byte-identically, and go on with v2 indexes bound to their
last v1 index.

``tests/data/evidence-index-v1`` is a case exported by the code before v2 (``Case.create(…,
"BUG-INDEX-V1")`` with the package id of ``tests/golden.py``, the journal
``tests/data/evidence-index-v1.jsonl`` under ``config/budget.example.toml``; the script that made it
is ``tests/data/evidence-index-v1.build.txt``): five single-record publications (one of them a stored
feedback) and one of two records, each with a cumulative v1 index.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from ledger import BudgetConfig, Case, LedgerError, export_case, import_tree, verify_case
from ledger.ground.errors import INTEGRITY_ERROR

from conftest import EXAMPLE_BUDGET, REPO, start_case

V1_TREE = REPO / "tests" / "data" / "evidence-index-v1"
MORE = "sources/more.txt"


def exported_files(root: Path) -> dict[str, bytes]:
    """``manifest.json`` and everything under ``analysis/``."""
    files = {"manifest.json": (root / "manifest.json").read_bytes()}
    for directory, _, names in os.walk(root / "analysis"):
        for name in names:
            path = Path(directory, name)
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def index_bodies(case: Case) -> list[dict]:
    return [json.loads(r["body"]) for r in case.query("SELECT body FROM events WHERE type = 'evidence.indexed' "
                                                        "ORDER BY seq")]


def read(op: str, h: str, action_id: str, line: int, path: str = "sources/app.py") -> dict:
    return {"operation_id": op, "hypothesis_id": h, "action_id": action_id, "tool": "source.read_context",
            "args": {"path": path, "start_line": line, "end_line": line}}


def publish(case: Case, iteration: str, *actions: dict) -> None:
    budget = case.budget()
    for a in actions:
        budget.reserve(a["hypothesis_id"], a["action_id"], a["tool"])
    stored = case.evidence().query(iteration, {"actions": list(actions)}, True)
    for a, record in zip(actions, stored.records):  # fed to the budget through the index that added it
        budget.record_evidence(a["hypothesis_id"], a["action_id"], record["record_id"])
        budget.settle(a["hypothesis_id"], a["action_id"], 100, "read")


@pytest.fixture
def v1_case(tmp_path: Path) -> Path:
    """The v1 case imported into a fresh ledger."""
    import_tree(V1_TREE, tmp_path / "v1")
    return tmp_path / "v1"


@pytest.mark.slow  # over 0.6 s in the default run: the slow lane (.ci/run) runs it
def test_a_ledger_of_v1_indexes_imports_verifies_and_exports_byte_identically(v1_case, tmp_path):
    assert verify_case(v1_case).events == 48
    with Case.open(v1_case) as case:
        formats = [b["format"] for b in index_bodies(case)]
        export_case(case)
    assert formats == ["evidence-index-v1"] * 6
    assert exported_files(v1_case) == exported_files(V1_TREE)
    import_tree(v1_case, tmp_path / "again")
    assert exported_files(tmp_path / "again") == exported_files(V1_TREE)


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_v1_ledger_goes_on_with_v2_indexes_bound_to_its_last_v1_index(v1_case, tmp_path):
    (v1_case / "sources" / "more.txt").write_text("".join(f"more {i}\n" for i in range(1, 11)), encoding="utf-8")
    with Case.open(v1_case) as case:
        last_v1 = index_bodies(case)[-1]
        budget = case.budget()
        for h, action_id, record in (("H1", "q8", "E000006"), ("H2", "q9", "E000007")):  # found in a v1 index
            assert budget.record_evidence(h, action_id, record).action["novelty_score"] >= 0
            budget.settle(h, action_id, 50, "read")
        publish(case, "after-1", read("op-a1", "H1", "a1", 1, MORE))
        publish(case, "after-2", read("op-a2", "H2", "a2", 2, MORE), read("op-a3", "H1", "a3", 3, MORE))
        new = index_bodies(case)[-2:]
        assert [b["format"] for b in new] == ["evidence-index-v2"] * 2
        assert new[0]["index"]["parent_index_sha256"] == last_v1["index_sha256"]
        assert new[1]["index"]["parent_index_sha256"] == new[0]["index_sha256"]
        assert [[r["record_id"] for r in b["index"]["records"]] for b in new] == [["E000008"], ["E000009", "E000010"]]
        assert [b["index"]["record_count"] for b in new] == [8, 10]
        assert [b["index"]["next_record_number"] for b in new] == [9, 11]
        assert case.query("SELECT COUNT(*) AS n FROM evidence")[0]["n"] == 10
        export_case(case)
    verify_case(v1_case)
    import_tree(v1_case, tmp_path / "copy")
    assert exported_files(tmp_path / "copy") == exported_files(v1_case)
    with Case.open(tmp_path / "copy") as copy:
        copy.budget().reserve("H1", "b1", "source.read_context")
        copy.evidence().query("after-3", {"actions": [read("op-b1", "H1", "b1", 4, MORE)]}, True)
        assert copy.budget().record_evidence("H1", "b1", "E000011").action["status"] == "awaiting_assessment"
    verify_case(tmp_path / "copy")


def test_a_v2_index_lists_only_the_records_it_adds(package):
    case = start_case(package)
    case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    publish(case, "i1", read("op-1", "H1", "q1", 1))
    publish(case, "i2", read("op-2", "H1", "q2", 2), read("op-3", "H2", "q3", 1, "sources/notes.txt"))
    first, second = index_bodies(case)
    assert first["format"] == second["format"] == "evidence-index-v2"
    assert first["index"]["parent_index_sha256"] == "0" * 64
    assert [r["record_id"] for r in second["index"]["records"]] == ["E000002", "E000003"]
    assert (second["index"]["record_count"], second["index"]["next_record_number"]) == (3, 4)
    record = json.loads(case.query("SELECT body FROM evidence_records WHERE record_id = 'E000002'")[0]["body"])
    entry = second["index"]["records"][0]
    assert entry["sha256"] == hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":"),
                                                         ensure_ascii=False).encode()).hexdigest()
    case.close()
    verify_case(package)


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_an_index_stays_the_same_size_however_many_publications_came_before(package):
    case = start_case(package, units=10_000)
    case.budget(BudgetConfig.from_mapping({"max_low_information_steps": 1000})).initialize()
    lines = "".join(f"line {i}\n" for i in range(1, 121))
    (package / "sources" / "many.txt").write_text(lines, encoding="utf-8")
    for i in range(1, 121):
        publish(case, f"i{i}", read(f"op-{i}", "H1", f"q{i}", i, "sources/many.txt"))
    sizes = [r["n"] for r in case.query("SELECT LENGTH(body) AS n FROM events WHERE type = 'evidence.indexed' "
                                         "ORDER BY seq")]
    assert max(sizes) - min(sizes[9:]) <= 8  # only the digits of growing numbers differ
    assert index_bodies(case)[-1]["index"]["record_count"] == 120
    case.close()
    verify_case(package)


def test_a_forged_v2_index_is_caught_on_import(package, tmp_path):
    """An index that claims another count, drops or adds a record, re-hashed and re-linked into the
    manifest, is refused: every index is recomputed from the publications."""
    case = start_case(package)
    case.budget(BudgetConfig.load(EXAMPLE_BUDGET)).initialize()
    publish(case, "i1", read("op-1", "H1", "q1", 1))
    case.budget().reserve("H1", "q2", "source.read_context")
    case.evidence().query("i2", {"actions": [read("op-2", "H1", "q2", 2)]}, True)  # the index is the head
    export_case(case)
    case.close()
    manifest = json.loads((package / "manifest.json").read_text())
    index_path = package / manifest["artifacts"]["evidence_index"]["path"]
    original = index_path.read_bytes()
    for forge in (lambda i: i.update(record_count=5), lambda i: i.update(records=[]),
                  lambda i: i["records"].append(dict(i["records"][0], record_id="E000009"))):
        body = json.loads(original)
        forge(body["index"])
        body["index_sha256"] = hashlib.sha256(json.dumps(body["index"], sort_keys=True, separators=(",", ":"))
                                              .encode()).hexdigest()
        data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        tree = tmp_path / f"forged-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(package, tree, ignore=shutil.ignore_patterns("ledger.sqlite*"))
        (tree / index_path.relative_to(package)).write_bytes(data)
        forged_manifest = dict(manifest, head=dict(manifest["head"], sha256=hashlib.sha256(data).hexdigest()))
        forged_manifest["artifacts"] = dict(manifest["artifacts"], evidence_index=dict(
            manifest["artifacts"]["evidence_index"], sha256=hashlib.sha256(data).hexdigest()))
        (tree / "manifest.json").write_text(json.dumps(forged_manifest, sort_keys=True, separators=(",", ":")))
        with pytest.raises(LedgerError) as refused:
            import_tree(tree, tmp_path / f"{tree.name}-imported")
        assert refused.value.code == INTEGRITY_ERROR
        assert "differs from its recomputation" in refused.value.message, refused.value.message
