"""A small evaluator of budget policies over a compact per-step table of a run (docs/simulate.md).

A policy search replays each run once through the full rules (under ``no-stop``), and,
when the run has the plain shape of a recorded agent run, keeps it as a :class:`StepTable`:
one revision opened and initialized, then only ``reserve``, ``record_result``, ``settle``,
``fail`` and ``record_outcome`` lines, each action reserved once and closed in order,
no scope, grant, reject, evidence-store line or source reference. On such a run the only
refusals a policy can decide are ``ACCOUNT_TERMINAL`` (an account abandoned or
exhausted) and ``INSUFFICIENT_BUDGET``, and the later lines of a refused action follow
from it; :func:`evaluate` runs exactly the arithmetic of the rules (cost, novelty over
evidence or atoms, information, reward, streak, status) on the table. A property test
holds it equal to :func:`ledger.simulation.replay.replay_run` on every bundled run under
many generated policies, and a search confirms its frontier and choice through the full
replay. A run of any other shape is replayed in full under every policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ..ground.canonical import canonical_bytes
from ..ground.errors import LedgerError
from ..rules.common import EMPTY_EVIDENCE
from ..rules.novelty import atom_novelty, evidence_atom_ids
from .replay import UNITS_KEY, Item, RunResult

RESERVE, RESULT, SETTLE, FAIL = range(4)
_HEADER_OPS = frozenset({"open_revision", "transition"})
_STEP_KEYS = {"reserve": {"op", "hypothesis", "action_id", "action", "at"},
              "record_result": {"op", "hypothesis", "action_id", "evidence", "at", "cost_usd_millicents"},
              "settle": {"op", "hypothesis", "action_id", "semantic_score", "reason", "at"},
              "fail": {"op", "hypothesis", "action_id", "reason", "at"}}


@dataclass
class StepTable:
    """One run as the evaluator needs it: its hypotheses, the journal's allocation (None: the
    analysis config's), its recorded outcome, and one tuple per budget line in order:
    ``(RESERVE, h, action_id, action)``, ``(RESULT, h, action_id, payload, atoms)``,
    ``(SETTLE, h, action_id, semantic_score)`` or ``(FAIL, h, action_id)``."""

    run: str
    hypotheses: list[str]
    units: int | None
    outcome: str | None
    steps: list[tuple[Any, ...]]


class _Unsupported(Exception):
    """The run has a line the evaluator does not model: it is replayed in full."""


def _step(line: dict[str, Any], reserved: set[tuple[str, str]], closed: dict[tuple[str, str], int]) -> tuple[Any, ...]:
    op = line["op"]
    if op not in _STEP_KEYS or not set(line) <= _STEP_KEYS[op]:
        raise _Unsupported(op)
    key = (line["hypothesis"], line["action_id"])
    if op == "reserve":
        if key in reserved:
            raise _Unsupported("reserved twice")
        reserved.add(key)
        return (RESERVE, *key, line["action"])
    stage = closed.get(key, 0)
    if key not in reserved or stage == 2 or (op == "record_result" and stage != 0):
        raise _Unsupported("out of order")
    if op == "record_result":
        closed[key] = 1
        payload = canonical_bytes(line["evidence"], "evidence")
        return (RESULT, *key, payload, evidence_atom_ids(payload))
    if op == "settle" and stage != 1:
        raise _Unsupported("settle without a result")
    closed[key] = 2
    return (SETTLE, *key, line["semantic_score"]) if op == "settle" else (FAIL, *key)


def step_table(run: str, lines: Iterable[Item]) -> StepTable | None:
    """The :class:`StepTable` of a run's parsed journal ``lines``, or None when the run has a
    shape the evaluator does not model (it is then replayed in full). Call it only for a run
    that the full replay took without an error or refusal."""
    header: list[str] = []
    hypotheses: list[str] = []
    units = outcome = None
    steps: list[tuple[Any, ...]] = []
    reserved: set[tuple[str, str]] = set()
    closed: dict[tuple[str, str], int] = {}
    try:
        for _, line in lines:
            if isinstance(line, LedgerError):
                return None
            op = line["op"]
            if op == "record_outcome":
                label = line.get("outcome")
                outcome = label if isinstance(label, str) and label.strip() else outcome
            elif op in _HEADER_OPS and "initialize" not in header and (op != "open_revision" or not hypotheses):
                header.append(op)
                if op == "open_revision":
                    hypotheses = [f"H{i}" for i in range(1, len(line["hypotheses"]) + 1)]
                    units = line.get(UNITS_KEY)
            elif op == "initialize" and hypotheses and "initialize" not in header:
                header.append(op)
            elif "initialize" in header:
                steps.append(_step(line, reserved, closed))
            else:
                return None
    except (_Unsupported, KeyError, TypeError, LedgerError):
        return None
    return StepTable(run, hypotheses, units, outcome, steps) if "initialize" in header else None


def evaluate(table: StepTable, policy: Any, default_units: int) -> RunResult:
    """The :class:`RunResult` of ``policy`` (a simulation ``Policy``) on ``table``: the figures
    the full replay gives (``default_units``: the analysis config's ``units_per_hypothesis``)."""
    config = policy.config.policy
    costs, default_cost = config["action_costs"], config["default_action_cost"]
    floor = min([default_cost, *costs.values()])
    bps, new_score = config["max_reward_bps"], config["new_evidence_score"]
    threshold, streak_max = config["low_information_threshold"], config["max_low_information_steps"]
    atoms_mode = config.get("novelty_mode") == "atoms"
    units = policy.units_per_hypothesis or table.units or default_units
    # per account: [remaining, spent, rewarded, streak, status]; status 0 open, 1 exhausted, 2 abandoned
    accounts = {h: [units, 0, 0, 0, 1 if units < floor else 0] for h in table.hypotheses}
    seen: set[bytes] = set()
    atoms_seen: set[str] = set()
    cost_of: dict[tuple[str, str], int] = {}
    novelty_of: dict[tuple[str, str], int] = {}
    refused: set[tuple[str, str]] = set()
    result = RunResult(table.run, policy.name, outcome=table.outcome)
    for step in table.steps:
        kind, key = step[0], (step[1], step[2])
        account = accounts[step[1]]
        if kind == RESERVE:
            result.steps += 1
            cost = costs.get(step[3], default_cost)
            if account[4] or cost > account[0]:
                refused.add(key)
                result.steps_refused += 1
                if account[4] and result.stopped_at_step is None and all(a[4] for a in accounts.values()):
                    result.stopped_at_step = result.steps
                continue
            account[0] -= cost
            account[1] += cost
            cost_of[key] = cost
        elif key in refused:
            continue
        elif kind == RESULT:
            payload, atoms = step[3], step[4]
            score = 0 if payload in EMPTY_EVIDENCE or payload in seen else new_score
            if atoms_mode and atoms is not None:
                score = atom_novelty(len(atoms), len(atoms) - sum(a in atoms_seen for a in atoms), new_score)
            if payload not in seen:
                seen.add(payload)
                atoms_seen.update(atoms or ())
            novelty_of[key] = score
        else:
            information = min(novelty_of[key], step[3]) if kind == SETTLE else None
            if information is not None:
                cost = cost_of[key]
                reward = min(cost * bps * information // 1_000_000, cost - 1)
                account[0] += reward
                account[2] += reward
            account[3] = 0 if information is not None and information > threshold else account[3] + 1
            if not account[4]:
                account[4] = 1 if account[0] < floor else 2 if account[3] >= streak_max else 0
    result.steps_taken = result.steps - result.steps_refused
    result.units_spent = sum(a[1] for a in accounts.values())
    result.units_rewarded = sum(a[2] for a in accounts.values())
    statuses = {a[4] for a in accounts.values()}
    result.abandoned, result.exhausted = statuses == {2}, statuses == {1}
    return result
