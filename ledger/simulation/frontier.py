"""The frontier of a policy search: units spent against good runs stopped (docs/simulate.md).

Every policy of a grid, plus two baselines, is replayed through the full rules
(:func:`ledger.simulation.simulator.simulate`), so every figure here is the one
``ledger apply`` would give. From the per-run results this module derives, per
policy and outcome, ``runs_stopped`` (runs with at least one refused step) and
``units_saved`` (units spent under ``no-stop`` minus units spent), the
policies not dominated in (units spent, good runs stopped), a choice under a
constraint on the share of a label's runs stopped, that choice made again on
``K`` folds and scored on the runs each left out, and bootstrap intervals.
"""

from __future__ import annotations

import copy
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..ground import errors as E
from ..ground.config import AnalysisConfig
from ..ground.errors import LedgerError, refuses_unfit_calls, refuses_unfit_calls_of, repr_shown
from ..services.memory import DEFAULT_ACTOR
from ..ground.arguments import path_list
from .evaluator import StepTable, evaluate, step_table
from .replay import UNITS_KEY, RunResult, journal_lines
from .constraint import Constraint, parse_max_stopped
from .folds import by_task, check_prefixes_start, default_folds, fold_parts, resample, task_prefixes
from .simulator import (CACHE_BYTES_MAX, NO_OUTCOME, Policy, SimulationReport, journal_files, load_policy,
                        journal_errors, merge_outcomes, policy_from_mapping, policy_list, read_outcomes, simulate,
                        summarize)

NO_STOP = "no-stop"
CAP_P75 = "cap-p75"
BASELINES = (NO_STOP, CAP_P75)
#: The streak limit and allocation of ``no-stop``: out of reach of any run the ledger accepts.
OUT_OF_REACH = 2 ** 40


def no_stop_policy(base: Policy) -> Policy:
    """``base`` with the streak limit and the allocation out of reach: it never abandons or exhausts."""
    settings = {**base.settings(), "max_low_information_steps": OUT_OF_REACH, UNITS_KEY: OUT_OF_REACH}
    return policy_from_mapping(NO_STOP, settings)


def percentile_75(values: Sequence[int]) -> int:
    """The 75th percentile of ``values`` by nearest rank (the smallest value with at least 75 % of
    the values at or below it), at least 1."""
    ordered = sorted(values)
    if not ordered:
        return 1
    rank = -(-3 * len(ordered) // 4)  # ceil(0.75 n)
    return max(1, ordered[rank - 1])


def cap_p75_policy(base: Policy, spends: Sequence[int], name: str = CAP_P75) -> Policy:
    """``base`` with ``units_per_hypothesis`` set to the 75th percentile of ``spends``."""
    return policy_from_mapping(name, {**base.settings(), UNITS_KEY: percentile_75(spends)})


@refuses_unfit_calls_of
@dataclass
class FrontierReport:
    """What :func:`frontier` returns: ``policies`` (each as ``simulate`` reports it, plus
    ``runs_stopped`` and ``units_saved``, overall and per outcome), ``frontier`` (names, fewest
    units first), ``choice`` (see docs/simulate.md), the ``simulation`` it was computed from and
    the policies themselves (``chosen`` is the chosen :class:`Policy`, or None)."""

    policies: list[dict[str, Any]]
    frontier: list[str]
    choice: dict[str, Any]
    simulation: SimulationReport
    evaluated: list[Policy] = field(default_factory=list)
    chosen: Policy | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"policies", "frontier", "choice"}``: what ``ledger simulate --frontier --json`` prints."""
        return {"policies": self.policies, "frontier": self.frontier, "choice": self.choice}


class _Table:
    """Per policy and run: units spent and whether the run was stopped, with each run's outcome."""

    def __init__(self, runs: Iterable[RunResult], names: Sequence[str], fold_caps: Mapping[tuple[str, ...], str]
                 | None = None) -> None:
        self.names = list(names)  # the candidates; a fold's own cap-p75 is a column, not a candidate
        self.fold_caps = dict(fold_caps or {})
        columns = [*names, *self.fold_caps.values()]
        self.units: dict[str, dict[str, int]] = {name: {} for name in columns}
        self.stopped: dict[str, dict[str, bool]] = {name: {} for name in columns}
        self.outcome: dict[str, str] = {}
        for run in runs:
            if run.error is None:
                self.units[run.policy][run.run] = run.units_spent
                self.stopped[run.policy][run.run] = run.steps_refused > 0
                self.outcome[run.run] = run.outcome or NO_OUTCOME
        self.run_ids = sorted(self.outcome)

    def for_fold(self, part: Sequence[str]) -> "_Table":
        """This table as the fold that holds out ``part`` sees it: ``cap-p75`` with the cap computed
        from the other folds' runs alone (:func:`fold_cap_policies`). When there is no such cap for
        this fold, or it gave no figures for some run (a journal refused under it for a reason the
        policy did not decide), the fold has no ``cap-p75`` to choose: the cap computed over every
        run has seen the runs the fold is scored on."""
        if not self.fold_caps:
            return self
        view = copy.copy(self)
        own = self.fold_caps.get(tuple(part))
        if own is None or any(run not in self.units[own] for run in self.run_ids):
            view.names = [name for name in self.names if name != CAP_P75]
        else:
            view.units = {**self.units, CAP_P75: self.units[own]}
            view.stopped = {**self.stopped, CAP_P75: self.stopped[own]}
        return view

    def totals(self, name: str, ids: Sequence[str], label: str) -> tuple[int, int, int]:
        """``(units spent, runs of label stopped, runs of label)`` of policy ``name`` over ``ids``."""
        units, stopped = self.units[name], self.stopped[name]
        good = [run for run in ids if self.outcome[run] == label]
        return sum(units[run] for run in ids), sum(stopped[run] for run in good), len(good)


def _stopped_and_saved(row: dict[str, Any], runs: Sequence[RunResult], baseline: Mapping[str, int]) -> None:
    groups: dict[str, dict[str, Any]] = {"(all)": row, **row["by_outcome"]}
    for figures in groups.values():
        figures["runs_stopped"] = 0
        figures["units_saved"] = 0
    for run in runs:
        for key in ("(all)", run.outcome or NO_OUTCOME):
            if key in groups:
                groups[key]["runs_stopped"] += run.steps_refused > 0
                groups[key]["units_saved"] += baseline[run.run] - run.units_spent


def name_order(name: str) -> tuple[list[Any], str]:
    """Sort key of a policy name for ties: its runs of ASCII digits compared as numbers, so that
    ``max_low_information_steps=6`` comes before ``max_low_information_steps=10``; then the text."""
    parts: list[Any] = _DIGITS.split(name)
    parts[1::2] = [int(part) for part in parts[1::2]]
    return parts, name


_DIGITS = re.compile("([0-9]+)")


def pareto_front(points: Sequence[tuple[str, int, int]]) -> list[str]:
    """Names of the ``(name, units, stopped)`` points no other point dominates (no more units,
    no more stopped, fewer of one), fewest units first (then fewer stopped, then the name in
    :func:`name_order`)."""
    front: list[str] = []
    best: tuple[int, int] | None = None  # (units, stopped) of the last point kept
    least = None
    for name, units, stopped in sorted(points, key=lambda p: (p[1], p[2], name_order(p[0]))):
        if least is None or stopped < least or best == (units, stopped):
            front.append(name)
            best, least = (units, stopped), stopped
    return front


def choose(table: _Table, ids: Sequence[str], constraint: Constraint) -> str | None:
    """The policy spending fewest units over ``ids`` among those stopping at most the constraint's
    share of the label's runs (ties: fewer stopped, then the name in :func:`name_order`); None when
    none does, when ``ids`` hold no run of the label (the constraint cannot be judged: every policy,
    stopping every run, would meet it), or the best saves nothing against ``no-stop``."""
    if table.totals(NO_STOP, ids, constraint.label)[2] == 0:
        return None
    candidates = []
    for name in table.names:
        units, stopped, runs = table.totals(name, ids, constraint.label)
        if constraint.allows(stopped, runs):
            candidates.append((units, stopped, name_order(name)))
    if not candidates:
        return None
    units, _, (_, name) = min(candidates)
    baseline, _, _ = table.totals(NO_STOP, ids, constraint.label)
    return name if units < baseline else None


def nearest(table: _Table, ids: Sequence[str], constraint: Constraint) -> str | None:
    """Of the policies spending fewer units than ``no-stop`` over ``ids``, the one stopping the
    fewest of the constraint label's runs (ties: fewer units, then :func:`name_order`): what a
    ``--max-stopped`` no policy meets would have to allow. None when no policy saves units."""
    baseline, _, _ = table.totals(NO_STOP, ids, constraint.label)
    saving = []
    for name in table.names:
        units, stopped, _ = table.totals(name, ids, constraint.label)
        if units < baseline:
            saving.append((stopped, units, name_order(name)))
    return min(saving)[2][1] if saving else None


def _shares(table: _Table, name: str, ids: Sequence[str], good: str) -> tuple[float | None, float | None]:
    """``(units saved %, good runs stopped %)`` of policy ``name`` over ``ids``; the first is None
    when ``ids`` spent nothing under ``no-stop``, the second when they hold no good run (no share
    to give, rather than a 0 % that would lower a mean)."""
    units, _, _ = table.totals(name, ids, good)
    baseline, _, _ = table.totals(NO_STOP, ids, good)
    return (100 * (baseline - units) / baseline if baseline else None, _stopped_pct(table, name, ids, good))


def stopped_pct_shown(stopped: int, runs: int) -> float:
    """The share ``stopped`` of ``runs`` as shown (%, two decimals), rounded up: never below the true
    share, so a ``--max-stopped`` of the share shown admits the policy (0.0 for no run)."""
    return -(-10000 * stopped // runs) / 100 if runs else 0.0


def _stopped_pct(table: _Table, name: str, ids: Sequence[str], label: str) -> float | None:
    """% of the ``label`` runs among ``ids`` that policy ``name`` stopped; None when there is none."""
    _, stopped, runs = table.totals(name, ids, label)
    return 100 * stopped / runs if runs else None


def _spread(values: Sequence[float | None]) -> dict[str, float | None]:
    """Mean, min and max of the values that are not None (all None when none is)."""
    known = [value for value in values if value is not None]
    if not known:
        return {"mean": None, "min": None, "max": None}
    return {"mean": round(sum(known) / len(known), 2), "min": round(min(known), 2), "max": round(max(known), 2)}


def fold_cap_policies(base: Policy, spends: Mapping[str, int], folds: int | None, seed: int,
                      prefixes: Sequence[str] = ()) -> dict[tuple[str, ...], Policy]:
    """For each held-out fold (``folds`` as :func:`frontier` takes it; none when it is 0 or not
    a count the tasks allow), ``cap-p75`` with its cap computed from the ``no-stop`` spending
    (``spends``: run id → units) of the other folds' runs only, keyed by the fold's run ids: the
    baseline a fold chooses from must not have seen the runs it is scored on."""
    ids = sorted(spends)
    folds = default_folds(folds, ids, prefixes)
    if type(folds) is not int or not 2 <= folds <= len(by_task(ids, prefixes)):
        return {}
    parts = fold_parts(ids, folds, seed, prefixes)
    caps = {}
    for k, part in enumerate(parts):
        held = set(part)
        caps[tuple(part)] = cap_p75_policy(base, [spends[run] for run in ids if run not in held],
                                           f"{CAP_P75} (fold {k + 1})")
    return caps


def held_out(table: _Table, constraint: Constraint, good: str, folds: int, seed: int,
             prefixes: Sequence[str] = ()) -> dict[str, Any]:
    """The choice made on all folds but one and scored on that one, for each of ``folds`` folds
    (tasks shuffled with ``seed``, :func:`~ledger.simulation.folds.fold_parts`); a fold whose
    training runs allow no choice scores as ``no-stop``.
    A fold with no good run (or no run of the constraint's label) gives no share of them stopped
    and is left out of that spread; ``folds_without_good_runs`` (``folds_without_constraint_runs``)
    counts them. So is a fold whose
    runs spent nothing under ``no-stop`` from the units saved (``folds_without_units_spent``)."""
    parts = fold_parts(table.run_ids, folds, seed, prefixes)
    saved, stopped, limited, chosen = [], [], [], []
    for k, part in enumerate(parts):
        train = [run for j, other in enumerate(parts) if j != k for run in other]
        table_k = table.for_fold(part)
        name = choose(table_k, train, constraint)
        chosen.append(name)
        scored = name if name is not None else NO_STOP  # no choice: the fold runs as no-stop
        pair = _shares(table_k, scored, part, good)
        saved.append(pair[0])
        stopped.append(pair[1])
        limited.append(_stopped_pct(table_k, scored, part, constraint.label))
    return {"folds": folds, "seed": seed, "tasks": len(by_task(table.run_ids, prefixes)), "chosen": chosen,
            "units_saved_pct": _spread(saved),
            "good_stopped_pct": _spread(stopped), "folds_without_good_runs": stopped.count(None),
            "constraint_stopped_pct": _spread(limited), "folds_without_constraint_runs": limited.count(None),
            "folds_without_units_spent": saved.count(None)}


def bootstrap(table: _Table, name: str, good: str, samples: int, seed: int,
              prefixes: Sequence[str] = ()) -> dict[str, Any]:
    """95 % intervals (2.5th and 97.5th percentiles of ``samples`` resamplings of the tasks, each with
    all its runs (:func:`~ledger.simulation.folds.resample`), with replacement, seeded) of the units
    saved % and good runs stopped % of policy ``name``; a
    resample with no good run gives no share of them and is left out of that interval
    (``samples_without_good_runs`` counts them); one whose runs spent nothing under ``no-stop``
    is left out of the units saved (``samples_without_units_spent``)."""
    rng = random.Random(seed)
    groups = by_task(table.run_ids, prefixes)
    saved, stopped = [], []
    for _ in range(samples):
        sample = resample(rng, groups)
        pair = _shares(table, name, sample, good)
        saved.append(pair[0])
        stopped.append(pair[1])

    def interval(values: list[float | None]) -> list[float] | None:
        known = sorted(value for value in values if value is not None)
        if not known:
            return None
        low = len(known) // 40  # 2.5 % of the values dropped at each end (docs/simulate.md, "Bootstrap")
        high = len(known) - 1 - low
        return [round(known[low], 2), round(known[high], 2)]

    return {"samples": samples, "seed": seed, "tasks": len(groups), "units_saved_pct": interval(saved),
            "good_stopped_pct": interval(stopped), "samples_without_good_runs": stopped.count(None),
            "samples_without_units_spent": saved.count(None)}


def _check_labels(outcomes: set[str], good: str, constraint: Constraint | None,
                  errors: Sequence[dict[str, Any]] = ()) -> None:
    """``INVALID_ARGUMENT`` for a ``--max-stopped`` or ``--good`` label no simulated run has (in that
    order: ``--good`` has a default the user may not have given); when
    journals were left out for an error (``errors``), the message says so and gives the first, and
    ``details["not_simulated"]`` lists them all (``{"code", "message"}`` each)."""
    for option, label in (("--max-stopped", constraint.label if constraint else None), ("--good", good)):
        if label is not None and label not in outcomes:
            known = ", ".join(sorted(outcomes)) or "none: give --outcomes or record_outcome lines"
            default = "; --good is 'resolved' unless given" if option == "--good" and label == "resolved" else ""
            left = (f"; {len(errors)} journal(s) were not simulated for an error, and their outcomes are not "
                    f"counted (the first: {errors[0]['code']}: {errors[0]['message']})" if errors else "")
            raise LedgerError(E.INVALID_ARGUMENT, f"{option}: no run has the outcome {label!r} "
                              f"(outcomes: {known}){default}{left}",
                              not_simulated=[{"code": e["code"], "message": e["message"]} for e in errors])


def _choice(table: _Table, rows: Mapping[str, dict[str, Any]], constraint: Constraint | None, good: str,
            folds: int, seed: int, samples: int, prefixes: Sequence[str]) -> dict[str, Any]:
    if constraint is None:
        return {"policy": None, "constraint": None, "reason": "no --max-stopped constraint given"}
    name = choose(table, table.run_ids, constraint)
    out: dict[str, Any] = {"policy": name, "constraint": constraint.to_dict()}
    if name is None:
        out["reason"] = (f"no policy stops at most {float(constraint.pct):g} % of the {constraint.label} runs "
                         "and saves units against no-stop")
        near = nearest(table, table.run_ids, constraint)
        out["nearest"] = None
        if near is not None:
            _, stopped, runs = table.totals(near, table.run_ids, constraint.label)
            pct = stopped_pct_shown(stopped, runs)
            out["nearest"] = {"policy": near, "constraint_stopped_pct": pct, "constraint_stopped": stopped,
                              "constraint_runs": runs}
            out["reason"] += (f"; of those that save units, {near} stops the fewest: {stopped} of {runs} "
                              f"({pct:g} %, rounded up)")
        return out
    in_sample = _shares(table, name, table.run_ids, good)  # every label is one some run has
    out.update(figures=rows[name], in_sample={
        "units_saved_pct": round(in_sample[0] or 0.0, 2),  # a chosen policy saves units: never None
        "good_stopped_pct": stopped_pct_shown(*table.totals(name, table.run_ids, good)[1:]),
        "constraint_stopped_pct": stopped_pct_shown(*table.totals(name, table.run_ids, constraint.label)[1:])})
    out["held_out"] = held_out(table, constraint, good, folds, seed, prefixes) if folds else None
    if samples:
        out["bootstrap"] = bootstrap(table, name, good, samples, seed, prefixes)
    return out


def _check_options(folds: int, samples: int, runs: Sequence[str], prefixes: Sequence[str]) -> None:
    tasks = len(by_task(runs, prefixes))
    if type(folds) is not int or folds != 0 and not 2 <= folds <= tasks:
        unit, runs_of = ("task", f"of {len(runs)} runs") if prefixes else ("run", "")
        if tasks >= 2:
            allowed = f" or from 2 to the number of {unit}s ({tasks}{', ' + runs_of if runs_of else ''})"
        else:
            allowed = f": a single {unit}{' (' + runs_of + ')' if runs_of else ''} leaves nothing to hold out"
        raise LedgerError(E.INVALID_ARGUMENT, f"--folds must be 0 (none){allowed}, got {repr_shown(folds, 80)}")
    if type(samples) is not int or not 0 <= samples <= 1_000_000:
        raise LedgerError(E.INVALID_ARGUMENT, f"--bootstrap must be from 0 to 1000000, got {repr_shown(samples, 80)}")


def _check_before_search(first: SimulationReport, good: str, constraint: Constraint | None, folds: int | None,
                         samples: int, prefixes: Sequence[str]) -> None:
    """What the other policies' replays cannot mend, checked on ``no-stop``'s before they run: a label no
    run has, or more folds than tasks (a run failing under another policy only leaves out more)."""
    table = _Table(first.runs, [NO_STOP])
    errors = [run.error for run in first.runs if run.error is not None]
    _check_labels(set(table.outcome.values()) - {NO_OUTCOME}, good, constraint, errors)
    _check_options(default_folds(folds, table.run_ids, prefixes), samples, table.run_ids, prefixes)


#: The figures of a run the evaluator must give exactly as the full replay does.
RUN_FIGURES = ("steps", "steps_taken", "steps_refused", "units_spent", "units_rewarded", "abandoned", "exhausted",
               "stopped_at_step", "outcome")


@dataclass
class _Search:
    """The inputs of a search, shared by its steps."""

    files: list[Path]
    outcomes: Mapping[str, str] | None
    options: dict[str, Any]
    default_units: int


def _plain(run: RunResult) -> bool:
    return run.error is None and run.steps_refused == 0 and not run.abandoned and not run.exhausted


def _tables(search: _Search, first: SimulationReport) -> dict[str, StepTable]:
    """The step table of every run ``no-stop`` took whole whose shape the evaluator models."""
    plain = {run.run for run in first.runs if _plain(run)}
    tables = {}
    for path in search.files:
        if path.stem in plain and path.stat().st_size <= CACHE_BYTES_MAX:
            table = step_table(path.stem, journal_lines(path))
            if table is not None:
                tables[path.stem] = table
    return tables


def _evaluated(search: _Search, tables: Mapping[str, StepTable], policies: Sequence[Policy]) -> list[RunResult]:
    """Every policy on every run: by the evaluator on the runs with a table, in full on the others."""
    runs = [evaluate(table, policy, search.default_units) for table in tables.values() for policy in policies]
    merge_outcomes(runs, search.outcomes)
    others = [path for path in search.files if path.stem not in tables]
    if others:
        runs += simulate(others, policies, search.outcomes, **search.options).runs
    return runs


def _confirmed(search: _Search, tables: Mapping[str, StepTable], names: set[str], policies: Sequence[Policy],
               runs: list[RunResult]) -> bool:
    """Whether the full replay of the policies ``names`` gives exactly the evaluator's runs."""
    chosen = [p for p in policies if p.name in names]
    files = [path for path in search.files if path.stem in tables]
    if not chosen or not files:
        return True
    full = {(r.run, r.policy): r for r in simulate(files, chosen, search.outcomes, **search.options).runs}
    for run in runs:
        other = full.get((run.run, run.policy))
        if other is not None and any(getattr(run, k) != getattr(other, k) for k in RUN_FIGURES):
            return False
    return True


def _to_confirm(rows: Mapping[str, dict[str, Any]], front: Sequence[str], choice: Mapping[str, Any],
                good: str, fold_caps: Mapping[tuple[str, ...], Policy]) -> set[str]:
    """The policies replayed again in full: the choice, the choice of each held-out fold (a fold's
    ``cap-p75`` is its own), and one policy per point of the frontier (the first of those with the
    same units and good runs stopped, fewest units first; ``no-stop`` was replayed in full already)."""
    names = {choice["policy"], *(choice.get("held_out") or {}).get("chosen", [])}
    if CAP_P75 in (choice.get("held_out") or {}).get("chosen", []):
        names.update(policy.name for policy in fold_caps.values())
    points = set()
    for name in front:
        point = (rows[name]["units_spent"], rows[name]["by_outcome"].get(good, {}).get("runs_stopped"))
        if point not in points:
            points.add(point)
            names.add(name)
    return names - {NO_STOP, None}


def _derive(policies: Sequence[Policy], runs: list[RunResult], outcomes: Mapping[str, str] | None, good: str,
            constraint: Constraint | None, folds: int | None, seed: int, samples: int, prefixes: Sequence[str],
            fold_caps: Mapping[tuple[str, ...], Policy]) -> tuple[dict[str, dict[str, Any]], list[str], dict[str, Any]]:
    """The rows, frontier and choice of ``runs`` (runs with an error are left out)."""
    shown = {p.name for p in policies}  # not a fold's own cap-p75 (its errors leave no run out)
    failed: dict[str, dict[str, Any]] = {}  # run id → its first error
    for run in runs:
        if run.error is not None and run.policy in shown:
            failed.setdefault(run.run, run.error)
    runs = [run for run in runs if run.run not in failed and run.error is None]
    rows = {row["name"]: row for row in summarize(policies, [r for r in runs if r.policy in shown], outcomes)}
    baseline = {run.run: run.units_spent for run in runs if run.policy == NO_STOP}
    per_policy: dict[str, list[RunResult]] = {}
    for run in runs:
        per_policy.setdefault(run.policy, []).append(run)
    for name, row in rows.items():
        _stopped_and_saved(row, per_policy.get(name, []), baseline)
    table = _Table(runs, [p.name for p in policies], {part: p.name for part, p in fold_caps.items()})
    _check_labels(set(table.outcome.values()) - {NO_OUTCOME}, good, constraint, [failed[r] for r in sorted(failed)])
    folds = default_folds(folds, table.run_ids, prefixes)
    _check_options(folds, samples, table.run_ids, prefixes)
    points = [(name, *table.totals(name, table.run_ids, good)[:2]) for name in table.names]
    return rows, pareto_front(points), _choice(table, rows, constraint, good, folds, seed, samples, prefixes)


#: The budget keys that price actions: units spent under two different tables do not compare.
PRICE_KEYS = ("default_action_cost", "action_costs", "test_costs")


def _check_one_price_table(policies: Sequence[Policy]) -> None:
    """``INVALID_ARGUMENT`` naming the first policy that prices actions unlike the first one: a policy
    charging 1 unit where the first charges 10 would "save" units by its prices alone, stopping
    nothing more, and be chosen for it. Prices compare as charged: an action listed at the default
    cost is priced like one left out."""
    named = {action for policy in policies for action in policy.config.policy["action_costs"]}

    def charged(policy: Policy, key: str) -> Any:
        table = policy.config.policy
        if key == "action_costs":
            return {action: table[key].get(action, table["default_action_cost"]) for action in named}
        return table[key]
    for policy in policies[1:]:
        for key in PRICE_KEYS:
            if charged(policy, key) != charged(policies[0], key):
                raise LedgerError(E.INVALID_ARGUMENT, (
                    f"policy {policy.name!r} prices actions unlike the first policy {policies[0].name!r} ({key} "
                    "differs): the frontier compares units spent, which compare only under one price table; give "
                    "every policy the first one's default_action_cost, action_costs and test_costs (a policy file "
                    "leaving them out has the built-in prices), or compare prices with simulate without --frontier"),
                    policy=policy.name, key=key)


def _checked(policies: Sequence[Policy], good: str, constraint: Constraint | str | None, folds: int | None,
             seed: int, samples: int, given_prefixes: Sequence[str]
             ) -> tuple[list[Policy], Constraint | None, tuple[str, ...]]:
    """:func:`frontier`'s arguments checked: the policies loaded, the constraint parsed, the task
    prefixes as a tuple (:func:`~ledger.simulation.folds.task_prefixes`)."""
    given = policy_list(policies)
    if not given:
        raise LedgerError(E.INVALID_ARGUMENT, "frontier needs at least one policy (the first is the base)")
    policies = [p if isinstance(p, Policy) else load_policy(p) for p in given]
    prefixes = task_prefixes(given_prefixes)
    if not isinstance(good, str) or not good:
        raise LedgerError(E.INVALID_ARGUMENT, f"good must be an outcome label (a non-empty str), got {repr_shown(good, 80)}")
    if constraint is not None and not isinstance(constraint, (str, Constraint)):
        raise LedgerError(E.INVALID_ARGUMENT, "constraint must be None, a LABEL=PCT string (\"resolved=2%\") or a "
                          f"Constraint, got {type(constraint).__name__}")
    names = [p.name for p in policies]
    for name in names:
        if name in BASELINES or name.startswith(f"{CAP_P75} (fold ") or names.count(name) > 1:
            raise LedgerError(E.INVALID_ARGUMENT, f"the policy name {name!r} is a baseline's or given twice; "
                              "name it apart")
    _check_one_price_table(policies)
    constraint = parse_max_stopped(constraint) if isinstance(constraint, str) else constraint
    if type(seed) is not int or seed < 0:  # Python's random takes -7 as 7: a sign would change nothing
        raise LedgerError(E.INVALID_ARGUMENT, f"--seed must be an integer of 0 or more, got {repr_shown(seed, 80)}")
    if constraint is None and (folds or (type(samples) is int and samples) or prefixes):  # they score a choice
        raise LedgerError(E.INVALID_ARGUMENT, "folds, bootstrap samples and task prefixes score the choice a "
                          "constraint makes: give the constraint (--max-stopped), or leave them out")
    return policies, constraint, prefixes


@refuses_unfit_calls
def frontier(journals: Iterable[str | os.PathLike[str]], policies: Sequence[Policy],
             outcomes: Mapping[str, str] | str | os.PathLike[str] | None = None, *, good: str = "resolved",
             constraint: Constraint | str | None = None, folds: int | None = None, seed: int = 0,
             samples: int = 0, task_prefixes: Sequence[str] = (), jobs: int | None = 1,
             analysis: AnalysisConfig | None = None, package: str | os.PathLike[str] | None = None,
             actor: str = DEFAULT_ACTOR) -> FrontierReport:
    """Evaluate ``policies`` (the first is the base of the baselines) and the baselines ``no-stop``
    and ``cap-p75`` on ``journals``; the frontier, and the choice under ``constraint``
    (``LABEL=PCT`` or a :class:`Constraint`) with ``folds`` held-out folds (None:
    :data:`~ledger.simulation.folds.DEFAULT_FOLDS`, or one per task when there are fewer, none for
    one) and ``samples``
    bootstrap resamplings, all seeded by ``seed`` (docs/simulate.md). ``task_prefixes`` (the run
    prefixes runs of one task were imported with) keep each task's runs in one fold and resample
    tasks, not runs (:mod:`ledger.simulation.folds`). Other arguments as
    :func:`~ledger.simulation.simulator.simulate` (``policies`` as there: :class:`Policy` objects or
    ``[NAME=]FILE.toml`` paths, but at least one). ``INVALID_ARGUMENT`` for a policy named like a
    baseline, one pricing actions unlike the first (:data:`PRICE_KEYS`), a label no run has, a task
    prefix no run id starts with, or bad options.

    ``no-stop`` is replayed in full; the other policies by :mod:`ledger.simulation.evaluator` on
    the runs it models (in full on the others), and the chosen policies and one policy per point of
    the frontier are replayed in full again and compared (:func:`_to_confirm`): should any figure
    differ, every policy is replayed in full.
    """
    policies, constraint, prefixes = _checked(policies, good, constraint, folds, seed, samples, task_prefixes)
    table = read_outcomes(outcomes) if isinstance(outcomes, (str, bytes, os.PathLike)) else outcomes
    analysis = analysis or AnalysisConfig()
    options = dict(jobs=jobs, analysis=analysis, package=package, actor=actor)
    # listed once (an iterator would be empty the second time), and every replay reads these files
    files = journal_files(path_list(journals, "journals"))
    check_prefixes_start(prefixes, [path.stem for path in files])
    _check_options(0 if folds is None else folds, samples, [path.stem for path in files], prefixes)
    first = simulate(files, [no_stop_policy(policies[0])], table, **options)
    _check_before_search(first, good, constraint, folds, samples, prefixes)
    search = _Search(files, table, options, analysis.units_per_hypothesis)
    spends = {run.run: run.units_spent for run in first.runs if run.error is None}
    chosen = [no_stop_policy(policies[0]), cap_p75_policy(policies[0], list(spends.values())), *policies]
    tables = _tables(search, first)
    runs = first.runs + _evaluated(search, tables, chosen[1:])
    # each fold's own cap-p75, over the runs the folds are dealt from (those no shown policy failed)
    kept = spends.keys() - {run.run for run in runs if run.error is not None}
    fold_caps = fold_cap_policies(policies[0], {run: spends[run] for run in kept}, folds, seed, prefixes)
    replayed = [*chosen[1:], *fold_caps.values()]
    runs += _evaluated(search, tables, list(fold_caps.values())) if fold_caps else []
    merged = merge_outcomes(runs, table)
    rows, front, choice = _derive(chosen, runs, merged, good, constraint, folds, seed, samples, prefixes, fold_caps)
    if not _confirmed(search, tables, _to_confirm(rows, front, choice, good, fold_caps), replayed, runs):
        runs = first.runs + simulate(search.files, replayed, table, **options).runs
        merged = merge_outcomes(runs, table)
        rows, front, choice = _derive(chosen, runs, merged, good, constraint, folds, seed, samples, prefixes, fold_caps)
    for policy in chosen:  # the allocation each sets (cap-p75: the cap it computed; None: the journals')
        rows[policy.name]["units_per_hypothesis"] = policy.units_per_hypothesis
    hidden = {policy.name for policy in fold_caps.values()}
    shown = [run for run in runs if run.policy not in hidden]
    simulation = SimulationReport(list(rows.values()), shown, journal_errors(shown), first.outcomes_without_journal,
                                  first.runs_without_outcome)
    by_name = {p.name: p for p in chosen}
    return FrontierReport(list(rows.values()), front, choice, simulation, chosen, by_name.get(choice["policy"] or ""))
