"""Anchors (docs/files.md, "Anchors"): a history rewritten whole, every hash recomputed, passes verify
on its own; an event kept elsewhere earlier (seq and sha256) catches it."""

from __future__ import annotations

import enum
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import Case, LedgerError, export_case, import_tree, read_only_query, verify_case
from ledger.ground.canonical import canonical_bytes
from ledger_cli.main import main

from conftest import make_package, start_case


def _forge(source: Path, target: Path, reason: str) -> None:
    """The exported tree of ``source`` with its settle's reason replaced and every event's hash and
    parent recomputed (the manifest too), imported as the case ``target``: a consistent rewrite."""
    tree = target.with_name(target.name + "-tree")
    shutil.copytree(source, tree, ignore=shutil.ignore_patterns("ledger.sqlite*"))
    _, rows = read_only_query(source, "SELECT seq, stream, revision, stream_seq, sha256, type FROM events ORDER BY seq")
    renamed, parent = {}, "0" * 64
    for seq, stream, revision, stream_seq, sha, kind in rows:
        where = (f"analysis/budgets/{revision:04d}/events/{stream_seq:08d}.json" if stream == "budget"
                 else f"analysis/case/events/{stream_seq:08d}.json")
        body = json.loads((tree / where).read_bytes())
        if kind == "budget.settled":
            body["request"]["reason"] = reason
        body["parent_sha256"] = parent
        data = canonical_bytes(body)
        parent = renamed[sha] = hashlib.sha256(data).hexdigest()
        (tree / where).write_bytes(data)
    manifest = (tree / "manifest.json").read_text()
    for old, new in renamed.items():
        manifest = manifest.replace(old, new)
    (tree / "manifest.json").write_bytes(canonical_bytes(json.loads(manifest)))
    import_tree(tree, to=target)


@pytest.fixture
def original(tmp_path) -> Path:
    path = make_package(tmp_path / "case")
    with start_case(path) as case:
        budget = case.budget()
        budget.initialize()
        budget.reserve("H1", "a1", "source.read_context")
        budget.record_result("H1", "a1", {"finding": "line 2 subtracts"})
        budget.settle("H1", "a1", 80, "shows the bug")
        budget.reserve("H1", "a2", "source.read_context")
        export_case(case)
    return path


def _head(path: Path) -> tuple[int, str]:
    report = verify_case(path)
    return report.head_seq, report.head_sha256


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_rewrite_with_every_hash_recomputed_passes_alone_and_fails_against_an_earlier_head(original, tmp_path):
    seq, sha = _head(original)
    forged = tmp_path / "forged"
    _forge(original, forged, "shows nothing")
    assert read_only_query(forged, "SELECT COUNT(*) FROM events WHERE body LIKE '%shows nothing%'")[1] == [(1,)]
    assert _head(forged)[0] == seq and _head(forged)[1] != sha  # consistent with itself: passes
    with pytest.raises(LedgerError) as caught:
        verify_case(forged, anchors={seq: sha})
    assert caught.value.code == "INTEGRITY_ERROR" and caught.value.details["anchored_seq"] == seq
    assert caught.value.message.startswith(f"seq {seq}: event {seq} has sha256 {_head(forged)[1]}, not the "
                                           f"anchored {sha}: the history up to it was rewritten")
    assert caught.value.message.endswith("unless the anchor itself was taken of another case or copied wrong (check "
                                         "its seq and hash)")
    assert verify_case(original, anchors={seq: sha}).head_seq == seq


def test_an_anchor_before_the_rewritten_event_still_holds_and_one_past_the_head_fails(original, tmp_path):
    _, rows = read_only_query(original, "SELECT seq, sha256, type FROM events ORDER BY seq")
    settled = next(seq for seq, _, kind in rows if kind == "budget.settled")
    before = {seq: sha for seq, sha, _ in rows if seq < settled}
    forged = tmp_path / "forged"
    _forge(original, forged, "shows nothing")
    assert verify_case(forged, anchors=before).head_seq == len(rows)  # the events before it are the same
    with pytest.raises(LedgerError) as caught:
        verify_case(original, anchors={len(rows) + 1: "a" * 64})
    assert caught.value.code == "INTEGRITY_ERROR"
    assert f"the ledger ends at seq {len(rows)}, before the anchored event {len(rows) + 1}" in caught.value.message
    # an anchor past the head may be another case's: the message does not state one cause alone
    assert caught.value.message.endswith("unless the anchor was taken of another case or copied wrong (check its seq)")


@pytest.mark.parametrize("anchors", [{0: "a" * 64}, {True: "a" * 64}, {"1": "a" * 64}, {1: "A" * 64}, {1: "a" * 63},
                                     {1: None}, [(1, "a" * 64)], "1:" + "a" * 64])
def test_a_malformed_anchor_is_invalid_argument_before_anything_is_read(tmp_path, anchors):
    with pytest.raises(LedgerError) as caught:
        verify_case(tmp_path / "no-case-here", anchors=anchors)
    assert caught.value.code == "INVALID_ARGUMENT" and "anchor" in caught.value.message


class Seq(enum.IntEnum):
    FIVE = 5


@pytest.mark.parametrize("anchors, said", [
    ({1: "x" * 500}, f"the anchor of seq 1 must be a sha256 (64 lowercase hex digits), got {'x' * 80!r}…"),
    ({10 ** 5000: "a" * 64}, "an anchor's seq must be an integer from 1 to 9223372036854775807 (2**63-1), got an "
                             "integer of thousands of digits"),
    ({2 ** 63: "a" * 64}, "an anchor's seq must be an integer from 1 to 9223372036854775807 (2**63-1), got the "
                          "integer 9223372036854775808"),
    ({"1": "a" * 64}, "an anchor's seq must be an integer from 1 to 9223372036854775807 (2**63-1), got the string "
                      '"1"'),
    ({1: 5}, "the anchor of seq 1 must be a sha256 (64 lowercase hex digits), got the integer 5"),
    ({Seq.FIVE: "a" * 64}, "an anchor's seq must be an integer from 1 to 9223372036854775807 (2**63-1), got the "
                           "integer 5 of the type Seq (give int(5))")])
def test_a_malformed_anchor_is_named_whole_or_cut_with_a_mark(tmp_path, anchors, said):
    """A 500-character hash was cut at 300 characters of message with no mark, and a seq of 5,000
    digits raised Python's ValueError instead of a refusal."""
    with pytest.raises(LedgerError) as caught:
        verify_case(tmp_path / "no-case-here", anchors=anchors)
    assert (caught.value.code, caught.value.message) == ("INVALID_ARGUMENT", said)


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_the_verify_command_takes_anchors_for_one_case(original, tmp_path):
    seq, sha = _head(original)
    forged = tmp_path / "forged"
    _forge(original, forged, "shows nothing")
    ok = CliRunner().invoke(main, ["verify", str(original), "--anchor", f"{seq}:{sha}", "--anchor", f"1:{_first(original)}"])
    assert ok.exit_code == 0, ok.output
    assert ok.output.splitlines()[1:3] == [f"anchor held: event 1 sha256 {_first(original)}",
                                           f"anchor held: event {seq} sha256 {sha}"]
    as_json = CliRunner().invoke(main, ["verify", str(original), "--anchor", f"{seq}:{sha}", "--json"])
    assert json.loads(as_json.stdout)["anchors_held"] == [{"seq": seq, "sha256": sha}]  # said as the text says it
    plain = CliRunner().invoke(main, ["verify", str(original), "--json"])
    assert "anchors_held" not in json.loads(plain.stdout)
    caught = CliRunner().invoke(main, ["verify", str(forged), "--anchor", f"{seq}:{sha}"])
    assert caught.exit_code == 1 and f"error: INTEGRITY_ERROR: seq {seq}: event {seq} has sha256" in caught.output
    for bad in ("1", f"0:{sha}", f"1:{sha.upper()}", f"x:{sha}", f"1:{sha}0", f"١:{sha}", f"{'9' * 5000}:{sha}"):
        done = CliRunner().invoke(main, ["verify", str(original), "--anchor", bad])
        assert done.exit_code == 2 and "expected SEQ:SHA256" in done.output, bad
    long = CliRunner().invoke(main, ["verify", str(original), "--anchor", f"{'9' * 5000}:{sha}"])
    assert f", got {'9' * 100!r}…" in long.output  # a value cut short ends in …
    escaped = CliRunner().invoke(main, ["verify", str(original), "--anchor", "\x1b[31m\u202e"])
    assert escaped.output.endswith("got '\\x1b[31m\\u202e'\n"), escaped.output  # escaped once, not twice
    twice = CliRunner().invoke(main, ["verify", str(original), "--anchor", f"1:{sha}", "--anchor", f"1:{'b' * 64}"])
    assert twice.exit_code == 2 and "two anchors name seq 1" in twice.output
    several = CliRunner().invoke(main, ["verify", str(original), str(forged), "--anchor", f"{seq}:{sha}"])
    assert several.exit_code == 2 and "--anchor names an event of one case" in several.output


def _first(path: Path) -> str:
    return read_only_query(path, "SELECT sha256 FROM events WHERE seq = 1")[1][0][0]


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_fleet_export_fails_a_case_rewritten_since_the_head_it_recorded(original, tmp_path):
    """The fleet records each case's head as it exports it, and takes that head as the case's anchor
    at the next export: the rewritten case (same case and package id) fails and its partition stays."""
    pytest.importorskip("duckdb")
    from ledger import export_fleet

    out = tmp_path / "fleet"
    assert export_fleet([original], out).exported == 1
    seq, sha = _head(original)
    forged = tmp_path / "forged"
    _forge(original, forged, "shows nothing")
    parquet = {p: p.read_bytes() for p in out.rglob("data.parquet")}
    report = export_fleet([forged], out)
    assert (report.exported, len(report.failed)) == (0, 1)
    error = report.failed[0]["error"]
    assert error["code"] == "INTEGRITY_ERROR"
    assert error["message"].startswith(f"seq {seq}: event {seq} has sha256 {_head(forged)[1]}, not the anchored {sha}")
    assert error["message"].endswith(f"(this fleet last exported the case from {original}: is this a copy of it?)")
    assert {p: p.read_bytes() for p in out.rglob("data.parquet")} == parquet
    with Case.open(original) as case:  # the case itself, grown since, still exports
        case.budget().grant("H1", 1, "controller", "more", "g-1")
    assert export_fleet([original], out).exported == 1
