"""Policy simulation: replay recorded journals under budget policies, in memory (docs/simulate.md).

Each journal is replayed from an empty :class:`~ledger.services.memory.MemoryCase` under
each policy by :func:`ledger.simulation.replay.replay_run`, through the code path
of ``ledger apply --keep-going``, so every figure equals what ``apply`` would
produce in a real case under that policy; a refusal the policy did not decide
makes the run an error instead of a figure. Nothing is written to disk. A short
journal is parsed once and replayed under every policy; a long one is streamed
again for each, so memory does not grow with a journal's length.

A simulation policy is a budget policy (every key of the budget TOML) plus one
optional key, ``units_per_hypothesis``: when set, it replaces the allocation of
every ``open_revision`` line of the journals (and the analysis config's
default), so a grid can vary the allocation too. ``policy_sha256`` is the
budget policy's hash, the one a real ledger records in its budget events.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..ground import errors as E
from ..ground.resources import resource_dir
from ..ground.config import DEFAULT_POLICY, AnalysisConfig, BudgetConfig, read_toml, load_toml_config
from ..ground.canonical import SAFE_INTEGER_MAX
from ..ground.arguments import check_instance, check_iterable, check_text_mapping, is_decimal, path_list
from ..ground.errors import (LedgerError, describe_value, pass_on_interruption, refuses_unfit_calls,
                             refuses_unfit_calls_of, repr_shown, shortened)
from ..services.memory import DEFAULT_ACTOR
from ..ground.paths import folder_inputs, fs_path
from ..ground.workers import job_count, shared_map
from ..rules.common import check_action_id, label_problem
from ..model.outcomes import check_outcomes, read_outcomes  # noqa: F401 (read_outcomes: the public API's)
from .replay import UNITS_KEY, RunResult, journal_lines, replay_run, run_error

#: The figures of a policy (and of each outcome), in output order.
FIGURES = ("runs", "steps", "steps_taken", "steps_refused", "units_spent", "units_rewarded",
           "runs_abandoned", "runs_exhausted", "units_per_run")
#: Policy keys ``--vary`` takes words for, not integers.
WORD_KEYS = ("novelty_mode",)
NO_OUTCOME = "(no outcome)"
#: Journals up to this size are parsed once for every policy; longer ones are streamed per policy.
CACHE_BYTES_MAX = 1024 * 1024


@refuses_unfit_calls_of(init=True)
@dataclass(frozen=True)
class Policy:
    """A named simulation policy: a budget ``config`` and an optional ``units_per_hypothesis``
    that replaces the journals' allocation (None: the journal's or the analysis config's)."""

    name: str
    config: BudgetConfig
    units_per_hypothesis: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise LedgerError(E.INVALID_ARGUMENT, f"a policy's name must be a non-empty str, got {repr_shown(self.name, 80)}")
        problem = label_problem(self.name)
        if problem:  # it names the policy's rows and columns in every report: it must read as itself
            raise LedgerError(E.INVALID_ARGUMENT, f"the policy name {self.name!r} {problem}", policy_name=self.name)
        check_instance(self.config, BudgetConfig, "a policy's config", "a BudgetConfig")
        if self.units_per_hypothesis is not None and (type(self.units_per_hypothesis) is not int
                                                      or not 1 <= self.units_per_hypothesis <= SAFE_INTEGER_MAX):
            raise LedgerError(E.INVALID_ARGUMENT, "a policy's units_per_hypothesis must be an integer from 1 or None, "
                              f"got {repr_shown(self.units_per_hypothesis, 80)}")

    @property
    def policy_sha256(self) -> str:
        return self.config.policy_sha256

    def settings(self) -> dict[str, Any]:
        """The policy as a mapping (budget keys, plus ``units_per_hypothesis`` when set)."""
        out = self.config.to_dict()
        if self.units_per_hypothesis is not None:
            out[UNITS_KEY] = self.units_per_hypothesis
        return out


def policy_from_mapping(name: str, data: Mapping[str, Any]) -> Policy:
    """A :class:`Policy` from budget keys plus an optional ``units_per_hypothesis`` (an integer
    ≥ 1). Raises ``CONFIG_INVALID`` naming the key."""
    if not isinstance(data, Mapping):
        raise LedgerError(E.CONFIG_INVALID, "a policy must be a table", key="(top level)")
    budget = dict(data)
    units = budget.pop(UNITS_KEY, None)
    if units is not None and (type(units) is not int or not 1 <= units <= SAFE_INTEGER_MAX):
        raise LedgerError(E.CONFIG_INVALID, f"{UNITS_KEY}: must be an integer from 1 to {SAFE_INTEGER_MAX} "
                          f"(the ledger's largest allocation), got {describe_value(units)}", key=UNITS_KEY)
    return Policy(name, BudgetConfig.from_mapping(budget), units)


@refuses_unfit_calls
def load_policy(spec: str | os.PathLike[str]) -> Policy:
    """``[NAME=]FILE.toml`` → a :class:`Policy` named ``NAME`` (default: the file's stem).
    Raises ``CONFIG_INVALID`` for an unreadable or invalid file, ``INVALID_ARGUMENT`` for a name that
    would read as another (docs/simulate.md) or one left empty (``=FILE.toml``)."""
    name, path = _policy_spec(spec)
    if name == "":  # "=FILE.toml": a name left empty (an unset variable?) is no default
        raise LedgerError(E.INVALID_ARGUMENT, f"the policy name before '=' in {str(spec)!r} is empty; give one "
                          "(NAME=FILE.toml) or the file alone", policy_name="")
    return load_toml_config(path, lambda data: policy_from_mapping(name or Path(path).stem, data))


def policy_file(spec: str | os.PathLike[str]) -> str:
    """The file a ``[NAME=]FILE.toml`` policy spec reads (the command's outputs may not replace it)."""
    return _policy_spec(spec)[1]


def _policy_spec(spec: str | os.PathLike[str]) -> tuple[str | None, str]:
    try:
        text = os.fspath(fs_path(spec, "policy")) if not isinstance(spec, str) else spec
        fs_path(text, "policy")
    except LedgerError as exc:  # an empty or unusable path: a configuration's refusal, as for --config
        if not isinstance(spec, (str, os.PathLike)):
            raise  # not a path at all: the caller's mistake, INVALID_ARGUMENT
        raise LedgerError(E.CONFIG_INVALID, exc.message, **exc.details) from None
    if "=" in text and not Path(text).exists():
        name, _, path = text.partition("=")
        return name, path
    return None, text


@refuses_unfit_calls
def example_policy() -> Policy:
    """The bundled example policy (``config/budget.example.toml``) as a simulation :class:`Policy`
    named ``example``; for a case's budget use ``BudgetConfig.example()``."""
    return policy_from_mapping("example", read_toml(resource_dir("config") / "budget.example.toml"))


def varied_keys() -> list[str]:
    """Keys ``--vary`` accepts: the integer budget keys, ``action_costs.NAME``,
    ``test_costs.NAME``, ``units_per_hypothesis`` and ``novelty_mode`` (words)."""
    return sorted([k for k, v in DEFAULT_POLICY.items() if type(v) is int] + [UNITS_KEY, *WORD_KEYS])


def _with_value(settings: dict[str, Any], key: str, value: int | str) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in settings.items()}
    table, dot, entry = key.partition(".")
    if dot and table in ("action_costs", "test_costs") and entry:
        out[table][entry] = value
    elif not dot and key in varied_keys():
        out[key] = value
    else:
        raise LedgerError(E.INVALID_ARGUMENT, f"--vary: unknown key {key!r}; use one of {', '.join(varied_keys())}, "
                          "action_costs.NAME or test_costs.NAME", key=key)
    return out


def parse_vary(spec: str) -> tuple[str, list[int | str]]:
    """``KEY=V1,V2,…`` → ``(key, [values])``; ``INVALID_ARGUMENT`` unless every value is an integer
    (words for :data:`WORD_KEYS`), given once (``4,4`` or ``4,04`` would name two policies alike)."""
    check_instance(spec, str, "the --vary spec", "a str like KEY=V1,V2")
    key, eq, values = spec.partition("=")
    if not eq or not key or not values:
        raise LedgerError(E.INVALID_ARGUMENT, f"--vary {spec!r}: expected KEY=V1,V2,…", key=key)
    if key in WORD_KEYS:  # e.g. novelty_mode=evidence,atoms: the policy checks each word
        words = [value.strip() for value in values.split(",")]
        if len(set(words)) != len(words):
            raise LedgerError(E.INVALID_ARGUMENT, f"--vary {key}: a value is given twice; give each value once",
                              key=key)
        return key, words
    out: list[int | str] = []
    seen: set[int] = set()
    for value in values.split(","):
        try:
            if not is_decimal(value):
                raise ValueError(value)
            number = int(value.strip(), 10)
        except ValueError:
            shown = repr(value) if len(value) <= 60 else f"{value[:40]!r}… ({len(value)} characters)"
            raise LedgerError(E.INVALID_ARGUMENT, f"--vary {key}: {shown} is not an integer (ASCII digits, an "
                              "optional leading -, at most 4300 digits)", key=key) from None
        if number in seen:
            raise LedgerError(E.INVALID_ARGUMENT, f"--vary {key}: the value {shortened(str(number), 60)} is given "
                              "twice; give each value once", key=key)
        seen.add(number)
        out.append(number)
    return key, out


#: The most policies one :func:`vary` grid may make (each is kept in memory and simulated; 10,000
#: policies over the 100 bundled runs take about a minute with ``--frontier``).
GRID_POLICIES_MAX = 10_000


@refuses_unfit_calls
def vary(base: Policy, grid: Sequence[tuple[str, Sequence[int | str]]]) -> list[Policy]:
    """Every combination of the ``(key, values)`` of ``grid`` applied to ``base`` (the first key
    varies slowest), each named ``key=value`` (joined by spaces for several keys).

    Raises ``INVALID_ARGUMENT`` for an unknown key or a key given twice, a grid of more than
    :data:`GRID_POLICIES_MAX` policies, and
    ``CONFIG_INVALID`` (naming the key and value) for a value the policy refuses.
    """
    check_instance(base, Policy, "base", "a Policy")
    grid = list(itertools.islice(check_iterable(grid, "grid", "a list of (key, values) pairs"), GRID_POLICIES_MAX + 1))
    if not grid:
        raise LedgerError(E.INVALID_ARGUMENT, "grid holds no (key, values) pair; give at least one")
    for number, pair in enumerate(grid):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not isinstance(pair[0], str):
            raise LedgerError(E.INVALID_ARGUMENT, f"grid must be a list of (key, values) pairs, got {repr_shown(pair, 80)}")
        grid[number] = (pair[0], _grid_values(pair[0], pair[1]))
    keys = [key for key, _ in grid]
    for key, values in grid:
        if keys.count(key) > 1:
            raise LedgerError(E.INVALID_ARGUMENT, f"--vary {key} is given twice; give each key once, with all "
                              f"its values (KEY=V1,V2,…)", key=key)
        shown = [str(value) for value in values]  # as the policies' names show them (:func:`_grid_values`)
        if not shown:
            raise LedgerError(E.INVALID_ARGUMENT, f"--vary {key}: no value given; give at least one", key=key)
        if len(set(shown)) != len(shown):
            value = next(value for n, value in enumerate(shown) if value in shown[:n])
            raise LedgerError(E.INVALID_ARGUMENT, f"--vary {key}: the value {shortened(value, 60)} is given twice; "
                              "give each value once", key=key)
    count = math.prod(len(values) for _, values in grid)
    if count > GRID_POLICIES_MAX:
        sizes = " × ".join(str(len(values)) for _, values in grid)
        raise LedgerError(E.INVALID_ARGUMENT, f"--vary makes {sizes} = {count} policies, more than the "
                          f"{GRID_POLICIES_MAX} one grid may have; vary fewer values", policies=count)
    policies = []
    for combination in itertools.product(*[[(key, v) for v in values] for key, values in grid]):
        settings = base.settings()
        for key, value in combination:
            settings = _with_value(settings, key, value)
        name = " ".join(f"{key}={value}" for key, value in combination)
        try:
            policies.append(policy_from_mapping(name, settings))
        except LedgerError as exc:
            raise LedgerError(exc.code, f"--vary {shortened(name, 120)}: {exc.message}", **exc.details) from None
    return policies


def _grid_values(key: str, given: Any) -> list[int | str]:
    """The values ``given`` for ``key`` in :func:`vary`'s grid, read once (a generator) and no further than
    one past :data:`GRID_POLICIES_MAX` (an endless iterator is refused, not held); ``INVALID_ARGUMENT`` for a
    value that is neither an integer nor a word, or an integer too long to name a policy with."""
    values = list(itertools.islice(check_iterable(given, f"the values of {key}", "a list of values (integers, "
                                                  "or mode names for novelty_mode)"), GRID_POLICIES_MAX + 1))
    if len(values) > GRID_POLICIES_MAX:
        raise LedgerError(E.INVALID_ARGUMENT, f"--vary {key}: more than {GRID_POLICIES_MAX} values, more policies "
                          "than one grid may have; vary fewer values", key=key)
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, str)):  # each value is shown in a name
            raise LedgerError(E.INVALID_ARGUMENT, f"--vary {key}: a value must be an integer, got "
                              f"{repr_shown(value, 80)}", key=key)
        try:
            str(value)  # each value is shown in a policy's name
        except ValueError:  # past the digits Python converts (4,300 by default)
            raise LedgerError(E.INVALID_ARGUMENT, f"--vary {key}: an integer of thousands of digits, more than any "
                              "setting takes", key=key) from None
    return values


def journal_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Journals named by ``paths``: a file as is, a folder as every ``*.jsonl`` in it (any letter
    case), sorted by name.

    ``INVALID_ARGUMENT`` for a path that does not exist, an entry of a folder so named that is no
    regular file (:func:`~ledger.ground.paths.folder_inputs`), two journals with the same run id
    (file stem), or no journal at all.
    """
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]  # one path, not its characters
    found: list[Path] = []
    for entry in check_iterable(paths, "paths", "a list of journal files or folders"):
        path = fs_path(entry, "journal")
        if path.is_dir():
            found.extend(folder_inputs(path, (".jsonl",), "journal"))
        elif path.is_file():
            found.append(path)
        elif path.exists():  # a pipe, a socket, a device: not a journal file
            raise LedgerError(E.INVALID_ARGUMENT, f"{path}: not a regular file or folder (a pipe or a device); "
                              "save the journal to a file first")
        else:
            raise LedgerError(E.INVALID_ARGUMENT, f"{path}: no such journal file or folder")
    stems: dict[str, Path] = {}
    for path in found:
        if path.stem in stems and not _same_file(stems[path.stem], path):
            raise LedgerError(E.INVALID_ARGUMENT, f"run id {path.stem!r} names two journals: {stems[path.stem]} and {path}")
        stems.setdefault(path.stem, path)  # a file given twice, or also in a folder given, is read once
    if not found:
        raise LedgerError(E.INVALID_ARGUMENT, "no journal (*.jsonl) to simulate; agent runs as they were recorded "
                          "(*.traj, *.json, *.gz) become journals with 'ledger runs import RUNS --out DIR'")
    return list(stems.values())


def _same_file(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False


def simulate_journal(path: Path, policies: Sequence[Policy], *, analysis: AnalysisConfig | None = None,
                     package: Path | None = None, actor: str = DEFAULT_ACTOR) -> list[RunResult]:
    """One journal under every policy. A journal up to :data:`CACHE_BYTES_MAX` is parsed once for
    all of them; a longer one is streamed again for each, so memory does not grow with it. When a
    run has an ``error`` (docs/simulate.md), every policy's result for this journal carries it, so
    that every policy's figures count the same runs."""
    try:
        cached = list(journal_lines(path)) if path.stat().st_size <= CACHE_BYTES_MAX else None
    except (OSError, LedgerError) as oserr:  # unreadable: replaying it reports why, naming the file
        pass_on_interruption(oserr)
        cached = None
    results: list[RunResult] = []
    for policy in policies:
        try:
            results.append(replay_run(path.stem, cached if cached is not None else journal_lines(path), policy,
                                      analysis=analysis, package=package, actor=actor, source=str(path)))
        except LedgerError as exc:  # the file could not be read
            results.append(RunResult(path.stem, policy.name, error=run_error(str(path), None, exc)))
        error, outcome = results[-1].error, results[-1].outcome
        if error is not None:
            error = under_policy(error, policy.name) if len(results) > 1 else error  # the ones before went through
            return [RunResult(path.stem, p.name, outcome=outcome, error=error) for p in policies]
    return results


def _simulate_task(task: tuple[Path, Sequence[Policy], AnalysisConfig | None, Path | None, str]) -> list[RunResult]:
    path, policies, analysis, package, actor = task
    return simulate_journal(path, policies, analysis=analysis, package=package, actor=actor)


@refuses_unfit_calls_of
@dataclass
class SimulationReport:
    """What :func:`simulate` returns.

    * ``policies`` — one dict per policy, in the order given: ``name``,
      ``policy_sha256``, the :data:`FIGURES` and ``by_outcome`` (outcome → the
      figures of the runs counted, by their outcomes; empty without outcomes); runs with an
      ``error`` count nowhere, nor do outcomes only runs without a journal have;
    * ``runs`` — every :class:`RunResult` (journal-major, then policy order);
    * ``errors`` — the runs whose journal has a malformed line (one per journal);
    * ``outcomes_without_journal`` / ``runs_without_outcome`` — run ids in the
      outcomes but not among the journals, and the reverse (those runs are
      counted under the outcome ``(no outcome)``).
    """

    policies: list[dict[str, Any]]
    runs: list[RunResult]
    errors: list[dict[str, Any]]
    outcomes_without_journal: list[str]
    runs_without_outcome: list[str]

    def to_dict(self) -> dict[str, Any]:
        """``{"policies": [...]}``: what ``ledger simulate --json`` prints."""
        return {"policies": self.policies}

    def prefixed_outcome(self) -> tuple[str, str] | None:
        """``(journal's run id, outcome's run id)`` of the first journal whose run id is a run id of the
        outcomes, none of whose journals is here, after a prefix ending in ``.``, ``_`` or ``-``
        (``gpt5.x`` and ``x``): journals imported with ``--run-prefix``, the outcomes naming the runs
        without it (docs/simulate.md); ``None`` when there is none."""
        names = set(self.outcomes_without_journal)
        for run in dict.fromkeys(result.run for result in self.runs):
            for start in range(1, len(run)):
                if run[start - 1] in "._-" and run[start:] in names:
                    return run, run[start:]
        return None


def journal_errors(runs: Sequence[RunResult]) -> list[dict[str, Any]]:
    """The error of each journal that has one under any policy (the first, in the order of ``runs``):
    ``{"code", "message", "file", "line"}``, naming the policy when the run went through under
    another (a limit the policy's refunds decide): such a run counts under no policy either."""
    by_run: dict[str, list[RunResult]] = {}
    for run in runs:
        by_run.setdefault(run.run, []).append(run)
    errors = []
    for results in by_run.values():
        failed = [run for run in results if run.error is not None]
        if failed:
            errors.append(under_policy(failed[0].error, failed[0].policy) if len(failed) < len(results)
                          else failed[0].error)
    return errors


def under_policy(error: dict[str, Any], policy: str) -> dict[str, Any]:
    """``error`` whose message names the policy it came under (another went through), once."""
    if error["message"].endswith(UNDER_POLICY_END):
        return error
    return {**error, "message": f"{error['message']} (under the policy {policy}{UNDER_POLICY_END}"}


UNDER_POLICY_END = "; another went through)"


def merge_outcomes(runs: Sequence[RunResult], table: Mapping[str, str] | None) -> dict[str, str] | None:
    """Give each run its outcome: the one its journal records, else the table's. A run whose journal
    and table disagree is ``INVALID_ARGUMENT`` naming both; returns run id → outcome (None: no outcome
    anywhere)."""
    merged = dict(table or {})
    for run in runs:
        listed = merged.get(run.run)
        if run.outcome is not None and listed is not None and listed != run.outcome:
            raise LedgerError(E.INVALID_ARGUMENT, f"run {run.run}: its journal records the outcome {run.outcome!r} "
                              f"but the outcomes file says {listed!r}", run=run.run)
        if run.outcome is not None:
            merged[run.run] = run.outcome
        run.outcome = merged.get(run.run)
    return merged if table is not None or merged else None


def _empty() -> dict[str, int]:
    return dict.fromkeys(FIGURES, 0)


def _add(figures: dict[str, int], run: RunResult) -> None:
    figures["runs"] += 1
    for key in ("steps", "steps_taken", "steps_refused", "units_spent", "units_rewarded"):
        figures[key] += getattr(run, key)
    figures["runs_abandoned"] += run.abandoned
    figures["runs_exhausted"] += run.exhausted


def summarize(policies: Sequence[Policy], runs: Sequence[RunResult], outcomes: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """The per-policy figures of ``runs`` (see :class:`SimulationReport`)."""
    table = {p.name: {"name": p.name, "policy_sha256": p.policy_sha256, **_empty(), "by_outcome": {}}
             for p in policies}
    if outcomes is not None:  # the outcomes of the runs counted, in order (not those of runs without a journal)
        for row in table.values():
            for outcome in sorted({run.outcome or NO_OUTCOME for run in runs if run.error is None}):
                row["by_outcome"][outcome] = _empty()
    for run in runs:
        if run.error is not None:
            continue
        row = table[run.policy]
        _add(row, run)
        if outcomes is not None:
            _add(row["by_outcome"].setdefault(run.outcome or NO_OUTCOME, _empty()), run)
    for row in table.values():
        for figures in (row, *row["by_outcome"].values()):  # cost per run of that outcome, rounded down
            figures["units_per_run"] = figures["units_spent"] // figures["runs"] if figures["runs"] else 0
    return list(table.values())


def policy_list(policies: Any) -> list[Any] | None:
    """``policies`` of :func:`simulate` as a list (one Policy or path becomes a list of one)."""
    if policies is None or isinstance(policies, (Policy, str, os.PathLike)):
        return None if policies is None else [policies]
    items = list(check_iterable(policies, "policies", "a list of Policy objects or [NAME=]FILE.toml paths"))
    for item in items:
        check_instance(item, (Policy, str, os.PathLike), "each policy", "a Policy or a [NAME=]FILE.toml path")
    return items


@refuses_unfit_calls
def simulate(journals: Iterable[str | os.PathLike[str]], policies: Sequence[Policy | str | os.PathLike[str]] | None = None,
             outcomes: Mapping[str, str] | str | os.PathLike[str] | None = None, *, jobs: int | None = 1,
             analysis: AnalysisConfig | None = None, package: str | os.PathLike[str] | None = None,
             actor: str = DEFAULT_ACTOR) -> SimulationReport:
    """Replay every journal under every policy in memory and report the figures per policy.

    ``journals``: journal files and folders (a folder: every ``*.jsonl`` in it,
    sorted by name), or a single ``str``/path-like naming one of them; the run id is the file's stem. ``policies``: :class:`Policy`
    objects or ``[NAME=]FILE.toml`` strings (default: the example policy; policy
    names must differ). ``outcomes``: run id → outcome, or the path of a CSV
    (first column the run id, a column ``outcome``), for runs whose journal records no
    ``record_outcome`` (a disagreement with the journal is ``INVALID_ARGUMENT``). ``jobs``: processes, this
    one included (1: this one alone; None: the cores this process may use;
    :func:`~ledger.ground.workers.shared_map`); each holds one run at a time. ``analysis``: default
    units, ``max_hypotheses`` and limits (as ``--analysis-config``). ``package``:
    the folder where ``source_refs`` resolve (none: a source reference is refused
    like on a case without that file). ``actor``: the identity the replayed events
    carry (``--actor``; as with ``apply``, it decides who may establish a scope).

    Returns a :class:`SimulationReport`. Raises ``INVALID_ARGUMENT`` for missing
    journals, a bad outcomes file, duplicate policy names or ``jobs`` < 1,
    ``INVALID_ID`` for a malformed actor, and ``CONFIG_INVALID`` for a bad policy
    file. A malformed journal line, or a refusal the policy did not decide, does
    not raise: that journal's results carry the ``error``.
    """
    journals = path_list(journals, "journals")
    policies = policy_list(policies)
    if policies == []:
        raise LedgerError(E.INVALID_ARGUMENT, "policies is empty: give at least one Policy or [NAME=]FILE.toml path "
                          "(None simulates the example policy)")
    check_instance(analysis, (AnalysisConfig, type(None)), "analysis", "an AnalysisConfig or None")
    root = fs_path(package, "package") if package is not None else None
    if outcomes is not None and not isinstance(outcomes, (str, bytes, os.PathLike)):
        check_outcomes(check_text_mapping(outcomes, "outcomes"), "outcomes")
    chosen = [p if isinstance(p, Policy) else load_policy(p) for p in (policies or [example_policy()])]
    names = [p.name for p in chosen]
    if len(set(names)) != len(names):
        raise LedgerError(E.INVALID_ARGUMENT, f"policy names must differ: {', '.join(names)}")
    jobs = job_count(jobs)
    check_action_id(actor, "actor")
    table = read_outcomes(outcomes) if isinstance(outcomes, (str, bytes, os.PathLike)) else outcomes
    files = journal_files(journals)
    analysis = analysis or AnalysisConfig()  # validated once, not once per run
    tasks = [(path, chosen, analysis, root, actor) for path in files]
    results = list(shared_map(_simulate_task, tasks, jobs))  # this process works too (docs/performance.md)
    runs = [run for per_journal in results for run in per_journal]
    table = merge_outcomes(runs, table)
    stems = {path.stem for path in files}
    return SimulationReport(
        policies=summarize(chosen, runs, table),
        runs=runs,
        errors=journal_errors(runs),
        outcomes_without_journal=sorted(set(table) - stems) if table is not None else [],
        runs_without_outcome=sorted(stems - set(table)) if table is not None else [],
    )
