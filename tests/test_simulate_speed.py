"""The simulator's shortcuts (issue 13, speed): no hash chain, requests hashed on demand, no result
objects. Each shortcut must leave every outcome exactly as `apply --keep-going` gives it."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings, strategies as st

from ledger import AnalysisConfig, Case, MemoryCase, apply_journal, example_policy
from ledger.ground.canonical import SAFE_INTEGER_MAX, canonical_event_bytes
from ledger.package_tools.journal import call_operation
import marshal

import pytest

from ledger import LedgerError
from ledger.services.memory import MARSHAL_BOUND, MemorySession, check_event_size
from ledger.simulation.replay import parse_journal, replay_run
from ledger.simulation.simulator import Policy, policy_from_mapping, simulate, vary

DATA = Path(__file__).parent / "data" / "trajectories"
SOME = sorted(DATA.glob("*.jsonl"))[::20]  # 5 real journals


def _apply_codes(tmp_path: Path, journal: Path, policy: Policy, analysis: AnalysisConfig | None = None):
    case = Case.create(tmp_path / f"{journal.stem}-{abs(hash((policy.name, str(analysis))))}", "C1",
                       analysis_config=analysis)
    try:
        results = list(apply_journal(case, journal.read_bytes().split(b"\n"), budget=case.budget(policy.config),
                                     keep_going=True, batch_size=200))
        return [(r.line, None if r.ok else r.error.code) for r in results], case.balances()
    finally:
        case.close()


def _write(tmp_path: Path, name: str, lines: list[dict]) -> Path:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


# --- event sizes without canonical bytes ----------------------------------------------------
def _bound(body) -> int:
    return MARSHAL_BOUND * len(marshal.dumps(body, 2))


def test_the_marshal_bound_holds_on_every_event_of_real_journals(monkeypatch):
    """The limit check of an unchained session bounds each event's canonical length by six times its
    marshal length instead of encoding it; on every event of real journals, under three
    policies, the bound holds (and is not absurdly loose: under 8x here)."""
    seen: list[tuple[dict, bytes]] = []
    store = MemorySession._store

    def recording(self, view, sealed):
        seen.append((sealed.body, sealed.data))
        return store(self, view, sealed)

    monkeypatch.setattr(MemorySession, "_store", recording)
    policies = [example_policy(), *vary(example_policy(), [("max_low_information_steps", [1])]),
                *vary(example_policy(), [("units_per_hypothesis", [150])])]
    for journal in SOME:
        lines = parse_journal(journal)
        for policy in policies:
            case = MemoryCase.create("C1")  # chained: every event keeps its canonical bytes
            budget = case.budget(policy.config)
            for _, line in lines:
                try:
                    call_operation(case, budget, line)
                except LedgerError:  # refusals are expected; only the events matter here
                    pass
    assert len(seen) > 800
    for body, data in seen:
        assert len(data) <= _bound(body) < 8 * len(data), body["type"]


_keys = st.text(max_size=8)
_values = st.recursive(
    st.none() | st.booleans() | st.integers(-SAFE_INTEGER_MAX, SAFE_INTEGER_MAX) | st.text(max_size=20)
    | st.text(alphabet=st.characters(max_codepoint=31) | st.sampled_from('"\\'), max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4), max_leaves=20)


@settings(max_examples=120, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=6))
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_canonical_length_of_any_event_like_body_is_at_most_six_times_its_marshal_length(body):
    """Property: for any body of strings (any Unicode, control characters and quotes included),
    safe integers, booleans, null, lists and objects, RFC 8785 bytes <= 6 x marshal (version 2)."""
    canonical = canonical_event_bytes(body)  # hypothesis draws no lone surrogate (no journal line holds one)
    assert len(canonical) <= _bound(body)
    check_event_size(body, len(canonical))  # exactly at the limit: accepted
    with pytest.raises(LedgerError) as refused:
        check_event_size(body, len(canonical) - 1)
    assert refused.value.code == "LIMIT_REACHED" and f"event of {len(canonical)} bytes" in refused.value.message


def test_a_body_over_the_bound_is_measured_on_its_canonical_bytes():
    body = {"b": "x" * 600, "a": "é"}
    check_event_size(body, 617)
    with pytest.raises(LedgerError) as refused:
        check_event_size(body, 616)
    assert refused.value.message.startswith("event of 617 bytes exceeds event_bytes_max = 616")


def test_an_event_over_event_bytes_max_is_refused_in_simulation_as_in_apply(tmp_path):
    """docs/errors.md event_bytes_max holds in the simulator too: with a 2048-byte limit, a revision of
    eight long statements is refused (LIMIT_REACHED), so is each settle whose reason makes its
    event too big, and the figures follow exactly as in a real case."""
    analysis = AnalysisConfig(limits={"event_bytes_max": 2048})
    lines = [{"op": "open_revision", "hypotheses": [{"statement": "s" * 200}] * 8, "units_per_hypothesis": 100},
             {"op": "open_revision", "hypotheses": [{"statement": "short"}], "units_per_hypothesis": 100},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}]
    for n, reason in enumerate(["r", "r" * 700, "r" * 1200, "r" * 20], start=1):
        lines += [{"op": "reserve", "hypothesis": "H1", "action_id": f"a{n}", "action": "source.read_context"},
                  {"op": "record_result", "hypothesis": "H1", "action_id": f"a{n}", "evidence": {"n": n}},
                  {"op": "settle", "hypothesis": "H1", "action_id": f"a{n}", "semantic_score": 40, "reason": reason}]
    journal = _write(tmp_path, "big", lines)
    policy = policy_from_mapping("plain", {})
    applied, balances = _apply_codes(tmp_path, journal, policy, analysis)
    traced = replay_run("big", parse_journal(journal), policy, analysis=analysis, trace=True)
    assert traced.lines == applied
    # the 1200-character reason is refused; its action stays pending, so the last step cannot start
    assert [code for _, code in applied] == ["LIMIT_REACHED", *[None] * 11, "LIMIT_REACHED", "ACTION_PENDING",
                                             "UNKNOWN_ACTION", "UNKNOWN_ACTION"]
    assert traced.units_spent == sum(b["spent_units"] for b in balances)
    assert traced.units_rewarded == sum(b["rewarded_units"] for b in balances)


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_five_more_real_journals_simulate_exactly_like_apply_under_two_policies(tmp_path):
    """Every line's outcome, both with the early stop and without it, and the final balances."""
    policies = [example_policy(), *vary(example_policy(), [("max_low_information_steps", [1])])]
    for journal in SOME:
        lines = parse_journal(journal)
        for policy in policies:
            applied, balances = _apply_codes(tmp_path, journal, policy)
            traced = replay_run(journal.stem, lines, policy, trace=True)
            assert traced.lines == applied, (journal.stem, policy.name)
            fast = replay_run(journal.stem, lines, policy)
            refused = sum(1 for (_, code), (_, line) in zip(applied, lines) if code and line["op"] == "reserve")
            assert fast.steps_refused == traced.steps_refused == refused
            assert fast.units_spent == sum(b["spent_units"] for b in balances)
            assert fast.units_rewarded == sum(b["rewarded_units"] for b in balances)
            assert fast.abandoned == ({b["status"] for b in balances} == {"abandoned_low_information_gain"})


# --- requests hashed on demand ------------------------------------------------------------
def test_repeated_and_conflicting_lines_replay_or_conflict_as_in_apply(tmp_path):
    """An identical repeated line is reused and a line reusing an operation's identity with other
    inputs is OPERATION_CONFLICT, exactly as apply says, although the simulator hashes a request
    only when such a line asks for it."""
    lines = [{"op": "open_revision", "hypotheses": [{"statement": "a"}, {"statement": "b"}]},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}, {"op": "initialize"},
             {"op": "reserve", "hypothesis": "H1", "action_id": "a1", "action": "source.read_context"},
             {"op": "reserve", "hypothesis": "H1", "action_id": "a1", "action": "source.read_context"},
             {"op": "reserve", "hypothesis": "H1", "action_id": "a1", "action": "source.find_text"},
             {"op": "record_result", "hypothesis": "H1", "action_id": "a1", "evidence": {"o": 1}},
             {"op": "record_result", "hypothesis": "H1", "action_id": "a1", "evidence": {"o": 2}},
             {"op": "record_result", "hypothesis": "H1", "action_id": "a1", "evidence": {"o": 1}},
             {"op": "settle", "hypothesis": "H1", "action_id": "a1", "semantic_score": 90, "reason": "r"},
             {"op": "settle", "hypothesis": "H1", "action_id": "a1", "semantic_score": 10, "reason": "r"},
             {"op": "reserve", "hypothesis": "H2", "action_id": "a1", "action": "source.read_context"},
             {"op": "fail", "hypothesis": "H2", "action_id": "a1", "reason": "x"},
             {"op": "fail", "hypothesis": "H2", "action_id": "a1", "reason": "x"}]
    journal = _write(tmp_path, "repeats", lines)
    policy = example_policy()
    applied, balances = _apply_codes(tmp_path, journal, policy)
    assert [code for _, code in applied] == [None, None, None, None, None, None, "OPERATION_CONFLICT", None,
                                             "OPERATION_CONFLICT", None, None, "OPERATION_CONFLICT", None, None,
                                             None]
    traced = replay_run("repeats", parse_journal(journal), policy, trace=True)
    assert traced.lines == applied
    assert traced.units_spent == sum(b["spent_units"] for b in balances) == 10  # two 5-unit reads
    # a conflict is the journal's doing, not the policy's: the run is an error at the first one
    fast = replay_run("repeats", parse_journal(journal), policy)
    assert (fast.error["code"], fast.error["line"]) == (traced.error["code"], traced.error["line"]) == (
        "OPERATION_CONFLICT", 7)
    assert (traced.steps, traced.steps_refused) == (4, 0)


def test_the_example_figures_on_real_journals_are_unchanged_by_the_shortcuts():
    """The figures of the journals sampled here, as the simulator gave them before it skipped the
    hash chain (measured then: same rules, every event sealed)."""
    row = simulate(SOME, None).policies[0]
    assert {k: row[k] for k in ("runs", "steps", "steps_refused", "units_spent", "units_rewarded",
                                "runs_abandoned")} == EXPECTED_SOME


EXPECTED_SOME = {"runs": 5, "steps": 122, "steps_refused": 7, "units_spent": 1050, "units_rewarded": 326,
                 "runs_abandoned": 1}
