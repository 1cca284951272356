"""Import and verify are never weaker than the live API (issue 8, item 4).

A forger can always edit an exported tree and re-link the chain and the manifest
(there is no signature). Whatever such a tree holds, import and verify accept
only values the live API would itself have stored: identifiers, times, text.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from ledger import (AnalysisConfig, BudgetConfig, Case, LedgerError, export_case, import_tree, verify_case)
from ledger.ground.canonical import canonical_bytes, canonical_event_bytes, sha256_hex
from ledger.ground.errors import (INTEGRITY_ERROR, INVALID_ARGUMENT)
from conftest import EXAMPLE_BUDGET, make_package, run_cli, start_case
from ledger.package_tools import importer
from ledger.ground.clock import format_utc
from test_evidence import APP, case, read  # noqa: F401
SETTLE_REASON = "points at the bug"


def build_case(path: Path, *, actor: str = "controller", at: str | None = None) -> Case:
    """A small case through every lifecycle step and one settled action."""
    make_package(path)
    kwargs: dict[str, Any] = {"at": at} if at is not None else {}
    case = Case.create(path, "BUG-4", actor=actor, **kwargs)
    case.open_revision([{"statement": "add() subtracts"}, {"statement": "the test is wrong"}], 40, **kwargs)
    case.transition("INVESTIGATING_HYPOTHESES", **kwargs)
    budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
    budget.initialize(**kwargs)
    budget.reserve("H1", "q1", "source.read_context", **kwargs)
    budget.record_result("H1", "q1", {"finding": "a - b"}, ["sources/app.py"], **kwargs)
    return case


@pytest.fixture(scope="module")
def exported_tree(tmp_path_factory) -> Path:
    """An exported package without its ledger: the input a forger edits."""
    root = tmp_path_factory.mktemp("forge") / "case"
    case = build_case(root)
    case.budget().settle("H1", "q1", 50, SETTLE_REASON)
    export_case(case)
    case.close()
    for name in os.listdir(root):
        if name.startswith("ledger.sqlite"):
            os.unlink(root / name)
    return root


def _raw_bytes(body: dict[str, Any]) -> bytes:
    """Canonical bytes when the body has them; otherwise the closest a forger can write."""
    try:
        return canonical_event_bytes(body)
    except LedgerError:
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
            "utf-8", "surrogatepass")


def forge(tree: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``edit`` to every event body of ``tree``, then re-link the chain and the manifest
    head and budget pointer, exactly as a forger without any key can."""
    events = []
    for directory, _, names in os.walk(tree / "analysis"):
        if os.path.basename(directory) == "events":
            for name in names:
                path = Path(directory, name)
                events.append((json.loads(path.read_bytes())["seq"], path))
    parent = "0" * 64
    shas: dict[str, str] = {}
    for _, path in sorted(events):
        body = json.loads(path.read_bytes())
        edit(body)
        body["parent_sha256"] = parent
        data = _raw_bytes(body)
        path.write_bytes(data)
        parent = sha256_hex(data)
        shas[path.relative_to(tree).as_posix()] = parent
    manifest = json.loads((tree / "manifest.json").read_bytes())
    manifest["head"]["sha256"] = parent
    pointer = manifest["artifacts"]["budget_ledger"]
    pointer["sha256"] = shas[pointer["path"]]
    (tree / "manifest.json").write_bytes(canonical_bytes(manifest))


def import_verdict(source: Path, tmp: Path) -> LedgerError | None:
    """None when import accepts a copy of ``source`` (then the rebuilt case verifies too)."""
    work = tmp / "import"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work)
    try:
        import_tree(work)
    except LedgerError as exc:
        return exc
    verify_case(work)
    return None


def set_everywhere(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        body[field] = value
    return edit


def set_settle_reason(value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        if body["request"].get("op") == "settle":
            body["request"]["reason"] = value
    return edit


# --- the example ---------------------------------------------------------------------
def test_import_refuses_an_actor_with_a_trailing_newline_that_the_api_refuses(exported_tree, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(exported_tree, tree)
    forge(tree, set_everywhere("actor", "controller\n"))
    with pytest.raises(LedgerError) as live:
        Case.create(tmp_path / "live", "BUG-4", actor="controller\n")
    assert live.value.code == "INVALID_ID"
    error = import_verdict(tree, tmp_path)
    assert error is not None and error.code == INTEGRITY_ERROR
    assert error.details["seq"] == 1 and "actor" in error.message
    assert not (tmp_path / "import" / "ledger.sqlite").exists()


def _edit_seq(seq: int, field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        if body["seq"] == seq:
            body[field] = value
    return edit


@pytest.mark.parametrize("field, value, where", [
    ("actor", 7, "actor: the integer 7 is not of type 'string'"),
    ("accounts", "none", "accounts: the string \"none\" is not of type 'array'"),
    ("actor", None, "actor: null is not of type 'string'")])
def test_a_malformed_event_of_a_kind_seen_before_is_named_by_its_schema(exported_tree, tmp_path, field, value,
                                                                         where):
    """Import holds every event to its schema: a later budget event (its kind validated already at an
    earlier one) that breaks the schema is named by what the schema says, not by the check it trips."""
    tree = tmp_path / "tree"
    shutil.copytree(exported_tree, tree)
    budget_seqs = sorted(json.loads(p.read_bytes())["seq"] for p in (tree / "analysis").rglob("budgets/*/events/*.json"))
    forge(tree, _edit_seq(budget_seqs[-1], field, value))
    error = import_verdict(tree, tmp_path)
    assert error is not None and (error.code, error.details["seq"]) == (INTEGRITY_ERROR, budget_seqs[-1])
    assert error.message.endswith(f"event does not match schema budget-event-v1: {where}")
    assert not (tmp_path / "import" / "ledger.sqlite").exists()


def test_import_validates_each_kind_of_event_up_front_and_the_others_only_when_they_fail(tmp_path, monkeypatch):
    """An event whose bytes equal its recomputation is what the rules write: import validates the
    first event of each format and type against its schema, not every event."""
    from ledger.package_tools import replay
    validated: list[str] = []
    real = replay.validator
    monkeypatch.setattr(replay, "validator", lambda fmt: validated.append(fmt) or real(fmt))
    tree = tmp_path / "tree"
    case = build_case(tree)
    budget = case.budget()
    budget.settle("H1", "q1", 50, SETTLE_REASON)
    for n in range(2, 5):  # the same kinds again
        budget.reserve("H1", f"q{n}", "source.read_context")
        budget.record_result("H1", f"q{n}", {"finding": f"line {n}"}, ["sources/app.py"])
        budget.settle("H1", f"q{n}", 50, SETTLE_REASON)
    export_case(case)
    case.close()
    for name in os.listdir(tree):
        if name.startswith("ledger.sqlite"):
            os.unlink(tree / name)
    assert import_verdict(tree, tmp_path) is None
    kinds = {(json.loads(p.read_bytes())["format"], json.loads(p.read_bytes())["type"])
             for p in (tree / "analysis").rglob("events/*.json")}
    events = len(list((tree / "analysis").rglob("events/*.json")))
    # the import's replay, the verify ending the import, and import_verdict's own verify: each kind once
    assert len(kinds) < events and len(validated) == 3 * len(kinds)


def test_an_unforged_tree_still_imports(exported_tree, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(exported_tree, tree)
    forge(tree, lambda body: None)  # re-linking alone changes no byte
    assert import_verdict(tree, tmp_path) is None


def _forge_ledger(path: Path, field: str, value: str) -> None:
    """Rewrite ``field`` of every event inside ``ledger.sqlite`` with the triggers dropped and
    put back afterwards, re-linking the chain: what a tamperer with SQL access can do."""
    conn = sqlite3.connect(path / "ledger.sqlite")
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in triggers:
        conn.execute(f'DROP TRIGGER "{name}"')
    parent = "0" * 64
    for seq, body in conn.execute("SELECT seq, body FROM events ORDER BY seq").fetchall():
        data = json.loads(body)
        data[field] = value
        data["parent_sha256"] = parent
        raw = _raw_bytes(data)
        sha = sha256_hex(raw)
        conn.execute("UPDATE events SET body = ?, sha256 = ?, parent_sha256 = ?, created_at = ? WHERE seq = ?",
                     (raw.decode("utf-8"), sha, parent, data["created_at"], seq))
        parent = sha
    for _, sql in triggers:
        conn.execute(sql)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("field, value", [
    ("actor", "controller\n"), ("actor", "controller "), ("actor", ""),
    ("created_at", "2026-02-30T10:00:00.000000Z"), ("created_at", "2026-01-05T10:00:00.000000Z\n"),
    ("created_at", "2026-01-05T10:00:00Z"), ("created_at", "2026-01-05T24:00:00.000000Z"),
])
@pytest.mark.sampled(every=4)
def test_verify_refuses_stored_fields_the_api_would_never_store(tmp_path, field, value):
    case = build_case(tmp_path / "case", at="2026-01-05T10:00:00Z")
    case.close()
    _forge_ledger(tmp_path / "case", field, value)
    with pytest.raises(LedgerError) as caught:
        verify_case(tmp_path / "case")
    assert caught.value.code == INTEGRITY_ERROR
    assert caught.value.details["seq"] == 1 and field in caught.value.message


def test_schema_patterns_anchor_at_the_very_end_of_the_string():
    """JSON Schema's regex dialect (ECMA-262): ``$`` never matches before a trailing newline."""
    from ledger.ground.schemas import validator

    messages = [e.message for e in validator("case-event-v1").iter_errors({"actor": "controller\n"})]
    assert any("controller" in m for m in messages)
    assert not [e for e in validator("case-event-v1").iter_errors({"actor": "controller"})
                if e.validator == "pattern"]
    # config keys go through propertyNames patterns: a live-API input, now refused too
    with pytest.raises(LedgerError) as caught:
        BudgetConfig.from_mapping({"costs": {"source.read_context\n": 5}})
    assert caught.value.code == "CONFIG_INVALID"


# --- the property: anything import accepts, the live API would have accepted --------------------
@pytest.fixture(scope="module")
def live_pending(tmp_path_factory) -> Path:
    """A live case whose action q1 awaits its settle (copied for each settle attempt)."""
    root = tmp_path_factory.mktemp("live") / "case"
    build_case(root).close()
    return root


def live_api_accepts(field: str, value: Any, tmp: Path, pending: Path) -> bool:
    """Run the live API with ``value`` in ``field``; True when it stores exactly that value."""
    live = tmp / "live"
    shutil.rmtree(live, ignore_errors=True)
    try:
        if field == "actor":
            Case.create(live, "BUG-4", actor=value).close()
            return True
        if field == "created_at":
            # a writer may configure any tolerance ahead of its clock, so the live API accepts every
            # real time: import judges the bytes, never against the auditor's clock
            with Case.create(live, "BUG-4", at=value, analysis_config=ANY_FUTURE) as case:
                return case.events()[0]["created_at"] == value
        shutil.copytree(pending, live)
        with Case.open(live) as case:
            case.budget().settle("H1", "q1", 50, value)
        return True
    except LedgerError:
        return False


#: The largest tolerance the analysis config accepts: any real time may be an event's time.
ANY_FUTURE = AnalysisConfig.from_mapping({"limits": {"at_future_tolerance_ms": 9007199254740991}})
ID_CHARS = st.sampled_from(list("aZ09._:-") + ["\n", "\r", " ", "\t", "é", "\x00", "/", "\u2028"])
TIME_TEXT = st.one_of(
    st.datetimes(timezones=st.none()).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")),
    st.datetimes(timezones=st.none()).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")),
    st.sampled_from(["2026-02-29T10:00:00.000000Z", "2024-02-29T10:00:00.000000Z", "2026-13-01T00:00:00.000000Z",
                     "2026-01-05T10:00:60.000000Z", "2026-01-05t10:00:00.000000z", "2026-01-05T10:00:00.000000+00:00",
                     "0000-01-01T00:00:00.000000Z", "2026-01-05T10:00:00.000000Z\n", " 2026-01-05T10:00:00.000000Z"]),
    st.text(st.sampled_from(list("0123456789-:.TZ\n")), max_size=30),
)
VALUES = {
    "actor": st.one_of(st.text(ID_CHARS, max_size=12), st.sampled_from(["controller\n", "c" * 128, "c" * 129])),
    "created_at": TIME_TEXT,
    "reason": st.one_of(st.text(max_size=12), st.sampled_from(["ok\n", " ", "\x00", "r" * 4000, "r" * 4001])),
}


def check_import_never_exceeds_the_api(field, exported_tree, live_pending, tmp, examples):
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(value=VALUES[field])
    def check(value):
        assume(value != {"actor": "controller", "reason": SETTLE_REASON}.get(field))
        tree = tmp / "tree"
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(exported_tree, tree)
        forge(tree, set_settle_reason(value) if field == "reason" else set_everywhere(field, value))
        error = import_verdict(tree, tmp)
        accepted_live = live_api_accepts(field, value, tmp, live_pending)
        if error is None:
            assert accepted_live, f"import accepted {value!r}, which the live API refuses"
        else:
            assert error.code == INTEGRITY_ERROR, error
        if not accepted_live:
            assert error is not None and error.code == INTEGRITY_ERROR

    check()


@pytest.mark.parametrize("field", sorted(VALUES))
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_anything_import_accepts_the_live_api_would_have_accepted(exported_tree, live_pending, tmp_path, field):
    """Mutate one field of every event (or the settle request's reason) of a valid export,
    re-link chain and manifest: if import accepts, the live API accepts and stores that value;
    if the live API refuses it, import refuses with INTEGRITY_ERROR."""
    check_import_never_exceeds_the_api(field, exported_tree, live_pending, tmp_path, examples=10)


@pytest.mark.slow
@pytest.mark.parametrize("field", sorted(VALUES))
def test_anything_import_accepts_the_live_api_would_have_accepted_long(exported_tree, live_pending, tmp_path, field):
    check_import_never_exceeds_the_api(field, exported_tree, live_pending, tmp_path, examples=150)


# --- event times ahead of the auditor's clock ----------------------------------------------------
def _ahead(minutes: int) -> str:
    return format_utc(datetime.now(timezone.utc) + timedelta(minutes=minutes))


# --- import: abandoned build folders, concurrent imports ------------------------------------------
def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def exported(budget, case):
    export_case(case)
    case.close()
    return case.path


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_verify_and_import_never_fail_on_a_time_ahead_of_the_local_clock(package, tmp_path):
    """Times: a writer's clock (or tolerance) ahead of the auditor's is a note, not tampering."""
    wide = AnalysisConfig.from_mapping({"limits": {"at_future_tolerance_ms": 3_600_000}})
    with Case.create(package, "C1", analysis_config=wide, at=_ahead(30)) as case:
        export_case(case)
    report = verify_case(package)
    assert report.head_seq == 1 and report.future_events == 1
    assert 25 * 60_000 < report.future_max_lead_ms <= 30 * 60_000
    assert any("1 event(s) are dated ahead of this machine's clock" in line for line in report.notes())
    imported = import_tree(package, tmp_path / "copy")
    assert imported.head_seq == 1
    done = run_cli("verify", str(package), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["future_events"] == 1
    text = run_cli("verify", str(package))
    assert text.returncode == 0 and b"dated ahead of this machine's clock" in text.stdout


def test_an_import_removes_the_build_folders_of_killed_imports_to_the_same_target(exported, tmp_path):
    """Import: hidden .X.importing-<pid>-<n> folders of dead processes are removed, live ones kept."""
    dead = tmp_path / f".copy.importing-{_dead_pid()}-17"
    alive = tmp_path / f".copy.importing-{os.getpid()}-18"
    other = tmp_path / f".copy2.importing-{_dead_pid()}-19"
    for folder in (dead, alive, other):
        (folder / "analysis").mkdir(parents=True)
        (folder / "ledger.sqlite-import").write_bytes(b"half")
    assert import_tree(exported, tmp_path / "copy").head_seq == 4
    assert not dead.exists() and alive.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if ".importing-" in p.name) == [alive.name, other.name]


def test_an_import_leaves_another_users_build_folder_of_a_dead_process_alone(exported, tmp_path):
    """In a shared parent (/tmp) a folder named like a killed import's is not this process's to remove:
    another user may have put it there."""
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    planted = tmp_path / f".copy.importing-{_dead_pid()}-17"
    (planted / "analysis").mkdir(parents=True)
    (planted / "keep").write_text("theirs")
    os.chown(planted, 65534, 65534)
    assert import_tree(exported, tmp_path / "copy").head_seq == 4
    assert (planted / "keep").read_text() == "theirs"


def test_an_import_whose_target_is_taken_meanwhile_is_case_exists_and_leaves_nothing(exported, tmp_path):
    target = tmp_path / "copy"
    real_rebuild = importer._rebuild

    def rebuild_then_lose_the_race(*args, **kwargs):
        real_rebuild(*args, **kwargs)
        target.mkdir()
        (target / "winner.txt").write_text("another import got here first")

    importer._rebuild = rebuild_then_lose_the_race
    try:
        with pytest.raises(LedgerError) as caught:
            import_tree(exported, target)
    finally:
        importer._rebuild = real_rebuild
    assert caught.value.code == "CASE_EXISTS" and "was taken while the import ran" in caught.value.message
    assert sorted(p.name for p in target.iterdir()) == ["winner.txt"]
    assert not [p for p in tmp_path.iterdir() if ".importing-" in p.name]


def test_every_file_and_folder_of_a_new_package_is_fsynced_before_it_is_renamed_into_place(exported, tmp_path,
                                                                                          monkeypatch):
    """Inputs (sources/, other files) are copied, the ledger rebuilt and exported in a hidden folder;
    each file and folder there is durable before the rename, so a crash after the import reported
    never leaves an input empty."""
    (exported / "notes").mkdir()
    (exported / "notes" / "deep").mkdir()
    (exported / "notes" / "deep" / "readme.txt").write_text("kept\n")
    synced: set[tuple[int, int]] = set()
    renamed: list[Path] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        status = os.fstat(fd)
        synced.add((status.st_dev, status.st_ino))
        return real_fsync(fd)

    def rename(source, target):
        renamed.append(Path(target))
        for directory, folders, names in os.walk(source):
            for name in [*folders, *names, "."]:
                if name == "ledger.sqlite" or name.endswith("-lock"):
                    continue  # SQLite syncs its own file (synchronous=FULL); a lock file holds nothing
                status = os.stat(Path(directory, name))
                assert (status.st_dev, status.st_ino) in synced, Path(directory, name).relative_to(source)
        return real_rename(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    target = tmp_path / "copy"
    assert import_tree(exported, target).head_seq == 4
    assert renamed == [target]
    assert (target / "sources" / "app.py").read_bytes() == (exported / "sources" / "app.py").read_bytes()
    assert (target / "notes" / "deep" / "readme.txt").read_text() == "kept\n"


KILL_AT = {  # a step of import after the rebuild, and the call the child is killed (SIGKILL) in
    "exporting the new package": "export_case",
    "verifying it": "verify_case",
}


@pytest.mark.parametrize("step", KILL_AT, ids=list(KILL_AT))
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_an_import_killed_after_its_rebuild_leaves_no_case_and_runs_again(exported, tmp_path, step):
    """The new package is exported and verified where it was built, then renamed into place: a real
    process killed in either step leaves the target absent, and the next import succeeds."""
    target = tmp_path / "copy"
    script = (f"import os, signal\nfrom ledger.package_tools import importer\n"
              f"importer.{KILL_AT[step]} = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
              f"importer.import_tree({str(exported)!r}, {str(target)!r})\n")
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert child.returncode == -9, child.stderr
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir() if ".importing-" in p.name]  # the killed one's build folder
    assert import_tree(exported, target).head_seq == verify_case(exported).head_seq
    assert verify_case(target, strict=True).export_state == "current"
    assert not [p for p in tmp_path.iterdir() if ".importing-" in p.name]


def test_an_in_place_import_refuses_event_files_past_the_manifest_head_and_writes_nothing(exported, tmp_path):
    """A lost ledger whose export was interrupted before its manifest: in place, the rebuilt ledger would
    end before those files (verify's rolled-back ledger), so it is refused naming them; --to works."""
    manifest = (exported / "manifest.json").read_bytes()
    with Case.open(exported) as case:
        case.budget().reserve("H2", "late", "source.find_text")
        export_case(case)
    (exported / "manifest.json").write_bytes(manifest)  # as if killed before the manifest was replaced
    for name in os.listdir(exported):
        if name.startswith("ledger.sqlite") and not name.endswith("lock"):
            os.unlink(exported / name)
    before = {p: p.read_bytes() for p in exported.rglob("*") if p.is_file()}
    with pytest.raises(LedgerError) as refused:
        import_tree(exported)
    assert refused.value.code == INVALID_ARGUMENT and "past the manifest's head seq" in refused.value.message
    assert "--to" in refused.value.message
    assert {p: p.read_bytes() for p in exported.rglob("*") if p.is_file()} == before
    assert import_tree(exported, tmp_path / "copy").head_seq == json.loads(manifest)["head"]["seq"]


def _listing(root: Path) -> dict[str, bytes | None]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None) for p in root.rglob("*")}


REFUSED_IN_PLACE = {
    "no manifest": lambda root: (root / "manifest.json").unlink(),
    "manifest not JSON": lambda root: (root / "manifest.json").write_bytes(b"{"),
    "an event edited": lambda root: (root / "analysis/case/events/00000002.json").write_bytes(b"{}"),
}


@pytest.mark.parametrize("kind", sorted(REFUSED_IN_PLACE))
def test_a_refused_in_place_import_leaves_the_folder_as_it_was_without_a_lock_file(exported, kind):
    """A refused import writes nothing: in place it took the case's writer lock before reading the
    manifest, and left ledger.sqlite-lock behind, which made a folder that is no export count as a
    damaged case. A lock file that was there before stays."""
    for name in os.listdir(exported):
        if name.startswith("ledger.sqlite"):
            os.unlink(exported / name)
    REFUSED_IN_PLACE[kind](exported)
    before = _listing(exported)
    with pytest.raises(LedgerError) as refused:
        import_tree(exported)
    assert refused.value.code in (INVALID_ARGUMENT, INTEGRITY_ERROR)
    assert _listing(exported) == before
    (exported / "ledger.sqlite-lock").write_bytes(b"")
    with pytest.raises(LedgerError):
        import_tree(exported)
    assert _listing(exported) == {**before, "ledger.sqlite-lock": b""}


def test_an_in_place_import_refused_by_its_final_verify_removes_the_lock_files_it_made(exported, monkeypatch):
    for name in os.listdir(exported):
        if name.startswith("ledger.sqlite"):
            os.unlink(exported / name)
    before = _listing(exported)

    def refused(*args, **kwargs):
        raise LedgerError(INTEGRITY_ERROR, "refused by the final verify")
    monkeypatch.setattr(importer, "verify_case", refused)
    with pytest.raises(LedgerError):
        import_tree(exported)
    assert _listing(exported) == before


# a case closed while another thread's connection still reads cannot empty its log: it warns, rightly
@pytest.mark.filterwarnings("ignore::ledger.storage.connection.CheckpointWarning")
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_concurrent_imports_to_one_target_one_wins_the_others_are_case_exists(exported, tmp_path):
    outcomes: list[str] = []

    def run() -> None:
        try:
            import_tree(exported, tmp_path / "copy")
            outcomes.append("ok")
        except LedgerError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["CASE_EXISTS", "CASE_EXISTS", "ok"]
    assert verify_case(tmp_path / "copy").head_seq == 4
    assert not [p for p in tmp_path.iterdir() if ".importing-" in p.name]


# --- finding 2: import checks the exported content files ----------------------------------------------
EVENT_FILE_DAMAGE = {
    "cut short": lambda path, other: path.write_bytes(path.read_bytes()[:50]),
    "emptied": lambda path, other: path.write_bytes(b""),
    "nested too deep to parse": lambda path, other: path.write_bytes(b"[" * 50_000),
    "swapped with the next one": lambda path, other: (lambda a, b: (path.write_bytes(b), other.write_bytes(a)))(
        path.read_bytes(), other.read_bytes()),
}


@pytest.mark.parametrize("damage", EVENT_FILE_DAMAGE, ids=list(EVENT_FILE_DAMAGE))
def test_import_names_an_event_file_that_is_there_but_holds_no_event_in_its_place(tmp_path, damage):
    with start_case(tmp_path / "case") as case:
        budget = case.budget(BudgetConfig.load(EXAMPLE_BUDGET))
        budget.initialize()
        for n in range(3):
            budget.reserve("H1", f"a{n}", "source.read_context")
            budget.fail("H1", f"a{n}", "timeout")
        export_case(case)
    exported = case.path
    events = exported / "analysis" / "budgets" / "0001" / "events"
    first, second = events / "00000002.json", events / "00000003.json"
    EVENT_FILE_DAMAGE[damage](first, second)
    for name in os.listdir(exported):
        if name.startswith("ledger.sqlite"):
            os.unlink(exported / name)
    with pytest.raises(LedgerError) as refused:
        import_tree(exported, tmp_path / "copy")
    assert refused.value.code == INTEGRITY_ERROR
    named = "analysis/budgets/0001/events/0000000" + ("3.json claims to hold it" if "swapped" in damage else
                                                      "2.json is there but holds no event")
    assert named in refused.value.message, refused.value.message
    assert not (tmp_path / "copy").exists()


def test_import_names_the_copies_of_an_evidence_event_file_as_copies(case, tmp_path):
    """A copy of an evidence event file beside it (E000001.json copied to E000099.json): both claim the
    event, so neither is taken; the refusal names both as copies (it said both lay where the event
    does not belong, the genuine one too)."""
    case.budget().reserve("H1", "q1", "source.read_context")
    case.evidence().query("i1", {"actions": [read("op-1", "H1", "q1", 1, 1)]}, True)
    export_case(case)
    (record,) = case.path.glob("analysis/evidence/0001/*/E000001.json")
    shutil.copyfile(record, record.with_name("E000099.json"))
    for name in os.listdir(case.path):
        if name.startswith("ledger.sqlite"):
            os.unlink(case.path / name)
    with pytest.raises(LedgerError) as refused:
        import_tree(case.path, tmp_path / "copy")
    folder = record.parent.relative_to(case.path).as_posix()
    assert refused.value.code == INTEGRITY_ERROR
    assert refused.value.message.endswith(f"; {folder}/E000001.json, {folder}/E000099.json each claim to hold it, "
                                          "and one event is one file: remove the copies")
    assert not (tmp_path / "copy").exists()


@pytest.mark.parametrize("mutation", ["edit", "delete", "swap"])
def test_import_refuses_edited_deleted_or_swapped_content_files(case, tmp_path, mutation):
    for n, (h, span) in enumerate([("H1", (1, 1)), ("H2", (2, 3))], start=1):
        case.budget().reserve(h, f"q{n}", "source.read_context")
        case.evidence().query(f"i{n}", {"actions": [read(f"op-{n}", h, f"q{n}", *span)]}, True)
    export_case(case)
    files = sorted((case.path / "analysis" / "evidence" / "content").iterdir())
    assert len(files) == 2
    first, second = files
    if mutation == "edit":
        first.write_bytes(first.read_bytes().replace(b"def add", b"def sub"))
    elif mutation == "delete":
        first.unlink()
    else:
        a, b = first.read_bytes(), second.read_bytes()
        first.write_bytes(b)
        second.write_bytes(a)
    with pytest.raises(LedgerError) as caught:
        import_tree(case.path, tmp_path / "copy")
    assert caught.value.code == INTEGRITY_ERROR
    assert "analysis/evidence/content/" in caught.value.message
    assert not (tmp_path / "copy" / "ledger.sqlite").exists()


def test_in_place_import_never_replays_a_stale_wal_onto_the_rebuilt_ledger(budget, case, tmp_path):
    budget.reserve("H1", "a1", "source.read_context")
    export_case(case)
    case.close()
    other = start_case(make_package(tmp_path / "other"), case_id="OTHER")
    other_budget = other.budget()
    other_budget.initialize()
    other_budget.reserve("H1", "z", "source.read_context")
    # copy the other case's files while its WAL still holds everything
    for name in os.listdir(other.path):
        if name.startswith("ledger.sqlite-wal") or name.startswith("ledger.sqlite-shm"):
            shutil.copyfile(other.path / name, case.path / name)
    other.storage.conn.close()
    (case.path / "ledger.sqlite").unlink()
    import_tree(case.path)
    with Case.open(case.path) as restored:
        assert restored.status()["case_id"] == "BUG-1"
    assert any(name.startswith("ledger.sqlite-wal.orphaned-") for name in os.listdir(case.path))


def test_import_into_a_folder_inside_the_source_is_refused(budget, case):
    export_case(case)
    case.close()
    with pytest.raises(LedgerError) as caught:
        import_tree(case.path, case.path / "sources" / "deep")
    assert caught.value.code == INVALID_ARGUMENT and not (case.path / "sources" / "deep").exists()


def test_without_ledger_and_manifest_the_message_does_not_suggest_an_import_that_would_fail(budget, case):
    export_case(case)
    case.close()
    (case.path / "ledger.sqlite").unlink()
    (case.path / "manifest.json").unlink()
    with pytest.raises(LedgerError) as caught:
        Case.open(case.path)
    assert caught.value.code == "LEDGER_MISSING" and "ledger import" not in caught.value.message
    assert "move analysis/ aside" in caught.value.message


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_import_prints_the_notes_verify_prints(tmp_path):
    """An import ends with verify: what verify notes (here an input file a stored tool result read,
    now gone, so that result was checked against its request only) is printed by import too."""
    from ledger import run_demo

    run_demo(tmp_path / "demo", echo=lambda line: None)
    package = tmp_path / "package"
    shutil.copytree(tmp_path / "demo", package, ignore=shutil.ignore_patterns("ledger.sqlite*", "data"))
    done = run_cli("import", str(package), "--to", str(tmp_path / "copy"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[0].startswith("imported ") and "verified" in lines[0]
    assert re.search(r"; verified, head seq [0-9]+ sha256 [0-9a-f]{64}$", lines[0]), lines[0]  # what an anchor takes
    assert lines[1].startswith("1 input file(s) differ from what stored tool results read or searched (edited, "
                               "added, removed, unreadable, readable only now, or computed otherwise by this SQLite)")
    assert "data/stock.sqlite (removed)" in lines[1]


def test_an_import_target_that_is_a_file_or_a_full_folder_is_case_exists_saying_which(exported, tmp_path):
    (tmp_path / "a-file").write_text("mine")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "note.txt").write_text("mine")
    for target, says in ((tmp_path / "a-file", "is not a folder"), (Path("/dev/null"), "is not a folder"),
                         (tmp_path / "full", "is not empty")):
        with pytest.raises(LedgerError) as refused:
            import_tree(exported, target)
        assert refused.value.code == "CASE_EXISTS" and says in refused.value.message, refused.value.message
    assert (tmp_path / "a-file").read_text() == "mine" and os.listdir(tmp_path / "full") == ["note.txt"]


def test_a_manifest_refused_by_its_schema_names_the_key(exported, tmp_path):
    manifest = json.loads((exported / "manifest.json").read_bytes())
    manifest["case_id"] = "not an id!"
    (exported / "manifest.json").write_bytes(canonical_bytes(manifest))
    with pytest.raises(LedgerError) as refused:
        verify_case(exported)
    assert refused.value.code == INTEGRITY_ERROR
    assert refused.value.message.startswith("manifest.json does not match case-manifest-v1: case_id: 'not an id!'")


def test_an_import_into_the_current_folder_is_refused_before_any_work(exported, tmp_path, monkeypatch):
    empty = tmp_path / "here"
    empty.mkdir()
    monkeypatch.chdir(empty)
    with pytest.raises(LedgerError) as refused:
        import_tree(exported, ".")
    assert refused.value.code == INVALID_ARGUMENT and "is the current folder" in refused.value.message
    assert os.listdir(empty) == [] and not [p for p in tmp_path.iterdir() if ".importing-" in p.name]


@pytest.mark.parametrize("log", ["ledger.sqlite-wal", "ledger.sqlite-journal"])
def test_an_in_place_import_sets_a_lost_ledgers_log_aside_unchanged(exported, log):
    """A log the lost ledger left is neither replayed onto the rebuilt one nor deleted (SQLite
    would delete a journal it takes for a stale one as it opens the ledger): it is renamed beside it."""
    for name in os.listdir(exported):
        if name.startswith("ledger.sqlite") and not name.endswith("lock"):
            os.unlink(exported / name)
    (exported / log).write_bytes(b"committed writes of the lost ledger")
    assert import_tree(exported).head_seq == verify_case(exported).head_seq
    [kept] = [p for p in exported.iterdir() if p.name.startswith(f"{log}.orphaned-")]
    assert kept.read_bytes() == b"committed writes of the lost ledger"


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_an_input_its_importer_may_read_only_as_another_user_is_copied_with_its_mode(exported):
    """An input owned by root with mode 004 (anyone else may read it): the importer, another user, copies
    it and the copy keeps that mode; the copy is synced before its mode is set."""
    import shutil
    import tempfile

    from test_storage import _as_other_user

    shared = Path(tempfile.mkdtemp(prefix="ledger-shared-"))
    try:
        shared.chmod(0o777)
        source = shared / "case"
        shutil.copytree(exported, source)
        for path in [source, *source.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (source / "data").mkdir(exist_ok=True)
        (source / "data" / "other.txt").write_text("for others\n")
        (source / "data" / "other.txt").chmod(0o004)
        prefix = _as_other_user(shared)
        if not prefix:
            pytest.skip("needs root, to own an input the importer reads only as another user")
        done = subprocess.run([*prefix, sys.executable, "-m", "ledger_cli", "import", str(source), "--to",
                               str(shared / "copy")], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert done.returncode == 0, done.stderr
        assert (shared / "copy" / "data" / "other.txt").stat().st_mode & 0o777 == 0o004
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.parametrize("swapped, into", [("sources/app.py", "link"), ("sources/app.py", "fifo"),
                                           ("analysis/case/events/00000002.json", "link"),
                                           ("analysis/case/events/00000002.json", "fifo"),
                                           ("manifest.json", "link")])
def test_a_file_swapped_for_a_link_or_pipe_after_it_was_checked_is_never_read_through_it(exported, tmp_path,
                                                                                        monkeypatch, swapped, into):
    """The walk checks every file with lstat, and import read them again by name: a file swapped
    meanwhile for a link to a file outside the package had that file's bytes copied into the new
    case, and one swapped for a pipe hung the import for ever."""
    import signal

    secret = tmp_path / "secret.txt"
    secret.write_text("outside the package\n")
    walk = importer._walk_regular

    def walk_then_swap(root):
        yield from walk(root)
        (root / swapped).unlink()
        if into == "link":
            (root / swapped).symlink_to(secret)
        else:
            os.mkfifo(root / swapped)
    monkeypatch.setattr(importer, "_walk_regular", walk_then_swap)
    previous = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the import waits on the pipe"))
    signal.alarm(60)
    try:
        with pytest.raises(LedgerError) as caught:
            import_tree(exported, tmp_path / "new")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert caught.value.code in (INVALID_ARGUMENT, INTEGRITY_ERROR, "STORAGE_ERROR"), caught.value
    assert not (tmp_path / "new").exists()


def test_an_in_place_import_interrupted_before_its_verify_ends_leaves_no_ledger_and_runs_again(exported, monkeypatch):
    """Ctrl-C during the final export or verify left the rebuilt ledger in place: the message said to
    run the command again, which then refused the folder as holding a case (CASE_EXISTS)."""
    for name in os.listdir(exported):
        if name.startswith("ledger.sqlite") and not name.endswith("lock"):
            os.unlink(exported / name)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(importer, "verify_case", interrupted)
    with pytest.raises(KeyboardInterrupt):
        import_tree(exported)
    assert not [name for name in os.listdir(exported) if name.startswith("ledger.sqlite") and not name.endswith("lock")]
    monkeypatch.undo()
    assert import_tree(exported).head_seq == verify_case(exported).head_seq


_FROM_A_REMOVED_FOLDER = """
import os, sys
from ledger import import_tree
os.mkdir(sys.argv[3])
os.chdir(sys.argv[3])
os.rmdir(sys.argv[3])  # the current folder is gone; every path given is whole
print(import_tree(sys.argv[1], sys.argv[2]).head_seq)
"""


def test_an_import_given_whole_paths_runs_from_a_current_folder_that_was_removed(tmp_path):
    """It was refused ("the current folder no longer exists") for its own check that the new case is not
    the current folder, though it named no relative path."""
    case = start_case(make_package(tmp_path / "case"))
    export_case(case)
    case.close()
    # -P: no current folder on the module path, as the installed `ledger` command has none there (a removed
    # one there made Python 3.13 fail to import a compiled module: "attempted to fetch exception")
    done = subprocess.run([sys.executable, "-P", "-c", _FROM_A_REMOVED_FOLDER, str(tmp_path / "case"),
                           str(tmp_path / "copy"), str(tmp_path / "gone")], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == "3" and (tmp_path / "copy" / "ledger.sqlite").is_file()


def test_a_relative_case_path_from_a_removed_current_folder_says_so(tmp_path):
    """`ledger verify d` from a folder removed while in use said only "no such folder"."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = ("import os, sys\nfrom ledger import LedgerError, verify_case\n"
              "os.chdir(sys.argv[1]); os.rmdir(sys.argv[1])\n"
              "try:\n    verify_case('d')\nexcept LedgerError as exc:\n    print(exc.code, exc.message)\n")
    done = subprocess.run([sys.executable, "-P", "-c", script, str(gone)], capture_output=True, timeout=120)
    assert done.stdout.decode() == ("LEDGER_MISSING no case at d (the path is relative to the current folder, which "
                                    "no longer exists (removed or moved while in use): cd to one that does); check "
                                    "the path\n"), done.stderr
