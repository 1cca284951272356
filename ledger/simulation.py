"""Policy simulation: replay recorded journals under budget policies, in memory (docs/simulate.md).

Each journal is replayed from an empty :class:`~ledger.memory.MemoryCase` under
each policy through :func:`ledger.journal.call_operation`, the code path of
``ledger apply --keep-going``, so every figure equals what ``apply`` would
produce in a real case under that policy. Nothing is written to disk. A journal
is read and parsed once and replayed under every policy; the in-memory case
keeps no hash chain (``chain=False``), no result object is built per line, and
the clock is read once per run: none of that changes an outcome.

A *step* is a journal ``reserve`` line. A reservation the policy refuses is a
step the run would not have taken. Once every account of the run's revision is
terminal (and no later line could open a new revision), the run stops there:
its remaining steps count as refused without being evaluated, which is exactly
what ``apply`` would report for them (``ACCOUNT_TERMINAL``).

A simulation policy is a budget policy (every key of the budget TOML) plus one
optional key, ``units_per_hypothesis``: when set, it replaces the allocation of
every ``open_revision`` line of the journals (and the analysis config's
default), so a grid can vary the allocation too. ``policy_sha256`` is the
budget policy's hash, the one a real ledger records in its budget events.
"""

from __future__ import annotations

import csv
import itertools
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from . import errors as E
from ._resources import resource_dir
from .config import DEFAULT_POLICY, AnalysisConfig, BudgetConfig, _read_toml
from .arguments import check_instance, check_iterable, check_text_mapping, path_list
from .errors import LedgerError
from .budget import BudgetManager
from .clock import utc_now
from .journal import call_operation, parse_line, without_bom
from .memory import MemoryCase
from .paths import fs_path
from .session import Ran
from .rules.common import STATUS_ABANDONED, STATUS_EXHAUSTED, TERMINAL_STATUSES

#: The figures of a policy (and of each outcome), in output order.
FIGURES = ("runs", "steps", "steps_taken", "steps_refused", "units_spent", "units_rewarded",
           "runs_abandoned", "runs_exhausted")
UNITS_KEY = "units_per_hypothesis"
NO_OUTCOME = "(no outcome)"
_LIFECYCLE_OPS = frozenset({"open_revision", "transition", "initialize"})


@dataclass(frozen=True)
class Policy:
    """A named simulation policy: a budget ``config`` and an optional ``units_per_hypothesis``
    that replaces the journals' allocation (None: the journal's or the analysis config's)."""

    name: str
    config: BudgetConfig
    units_per_hypothesis: int | None = None

    @property
    def policy_sha256(self) -> str:
        return self.config.policy_sha256

    def settings(self) -> dict[str, Any]:
        """The policy as a mapping (budget keys, plus ``units_per_hypothesis`` when set)."""
        out = dict(self.config.policy)
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
    if units is not None and (type(units) is not int or units < 1):
        raise LedgerError(E.CONFIG_INVALID, f"{UNITS_KEY}: must be an integer >= 1, got {units!r}", key=UNITS_KEY)
    return Policy(name, BudgetConfig.from_mapping(budget), units)


def load_policy(spec: str | os.PathLike[str]) -> Policy:
    """``[NAME=]FILE.toml`` → a :class:`Policy` named ``NAME`` (default: the file's stem).
    Raises ``CONFIG_INVALID`` for an unreadable or invalid file."""
    text = os.fspath(fs_path(spec, "policy")) if not isinstance(spec, str) else spec
    fs_path(text, "policy")
    name, _, path = text.partition("=") if "=" in text and not Path(text).exists() else ("", "", text)
    return policy_from_mapping(name or Path(path).stem, _read_toml(path))


def example_policy() -> Policy:
    """The bundled example policy (``config/budget.example.toml``) as a simulation :class:`Policy`
    named ``example``; for a case's budget use ``BudgetConfig.example()``."""
    return policy_from_mapping("example", _read_toml(resource_dir("config") / "budget.example.toml"))


def varied_keys() -> list[str]:
    """Keys ``--vary`` accepts: the integer budget keys, ``action_costs.NAME``,
    ``test_costs.NAME`` and ``units_per_hypothesis``."""
    return sorted([k for k, v in DEFAULT_POLICY.items() if type(v) is int] + [UNITS_KEY])


def _with_value(settings: dict[str, Any], key: str, value: int) -> dict[str, Any]:
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


def parse_vary(spec: str) -> tuple[str, list[int]]:
    """``KEY=V1,V2,…`` → ``(key, [values])``; ``INVALID_ARGUMENT`` unless every value is an integer."""
    check_instance(spec, str, "the --vary spec", "a str like KEY=V1,V2")
    key, eq, values = spec.partition("=")
    if not eq or not key or not values:
        raise LedgerError(E.INVALID_ARGUMENT, f"--vary {spec!r}: expected KEY=V1,V2,…", key=key)
    out = []
    for value in values.split(","):
        try:
            out.append(int(value.strip(), 10))
        except ValueError:
            raise LedgerError(E.INVALID_ARGUMENT, f"--vary {key}: {value!r} is not an integer", key=key) from None
    return key, out


def vary(base: Policy, grid: Sequence[tuple[str, Sequence[int]]]) -> list[Policy]:
    """Every combination of the ``(key, values)`` of ``grid`` applied to ``base`` (the first key
    varies slowest), each named ``key=value`` (joined by spaces for several keys).

    Raises ``INVALID_ARGUMENT`` for an unknown key or a key given twice, and
    ``CONFIG_INVALID`` (naming the key and value) for a value the policy refuses.
    """
    check_instance(base, Policy, "base", "a Policy")
    grid = list(check_iterable(grid, "grid", "a list of (key, values) pairs"))
    for pair in grid:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not isinstance(pair[0], str):
            raise LedgerError(E.INVALID_ARGUMENT, f"grid must be a list of (key, values) pairs, got {pair!r}")
        check_iterable(pair[1], f"the values of {pair[0]}", "a list of integers")
    keys = [key for key, _ in grid]
    for key in keys:
        if keys.count(key) > 1:
            raise LedgerError(E.INVALID_ARGUMENT, f"--vary {key} is given twice; give each key once, with all "
                              f"its values (KEY=V1,V2,…)", key=key)
    policies = []
    for combination in itertools.product(*[[(key, v) for v in values] for key, values in grid]):
        settings = base.settings()
        for key, value in combination:
            settings = _with_value(settings, key, value)
        name = " ".join(f"{key}={value}" for key, value in combination)
        try:
            policies.append(policy_from_mapping(name, settings))
        except LedgerError as exc:
            raise LedgerError(exc.code, f"--vary {name}: {exc.message}", **exc.details) from None
    return policies


def read_outcomes(path: str | os.PathLike[str]) -> dict[str, str]:
    """Run id (first column) → outcome (column ``outcome``) of a CSV file with a header row.

    ``INVALID_ARGUMENT`` for a missing or unreadable file, no ``outcome`` column or a run listed twice.
    """
    path = fs_path(path, "outcomes file")
    if path.exists() and not path.is_file():  # a fifo would block, a folder cannot be read
        raise LedgerError(E.INVALID_ARGUMENT, f"outcomes file {path}: not a regular file")
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LedgerError(E.INVALID_ARGUMENT, f"outcomes file {os.fspath(path)}: cannot read: {exc}") from None
    if not rows or "outcome" not in rows[0]:
        raise LedgerError(E.INVALID_ARGUMENT, f"outcomes file {os.fspath(path)}: needs a header row with an 'outcome' column")
    column = rows[0].index("outcome")
    outcomes: dict[str, str] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) <= column:
            raise LedgerError(E.INVALID_ARGUMENT, f"outcomes file {os.fspath(path)}: line {number} has no outcome")
        if row[0] in outcomes:
            raise LedgerError(E.INVALID_ARGUMENT, f"outcomes file {os.fspath(path)}: run {row[0]!r} is listed twice")
        outcomes[row[0]] = row[column]
    return outcomes


def journal_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Journals named by ``paths``: a file as is, a folder as every ``*.jsonl`` in it, sorted by name.

    ``INVALID_ARGUMENT`` for a path that does not exist, two journals with the same run id
    (file stem), or no journal at all.
    """
    found: list[Path] = []
    for entry in paths:
        path = Path(entry)
        if path.is_dir():
            found.extend(sorted(p for p in path.glob("*.jsonl") if p.is_file()))
        elif path.is_file():
            found.append(path)
        else:
            raise LedgerError(E.INVALID_ARGUMENT, f"{path}: no such journal file or folder")
    stems: dict[str, Path] = {}
    for path in found:
        if path.stem in stems:
            raise LedgerError(E.INVALID_ARGUMENT, f"run id {path.stem!r} names two journals: {stems[path.stem]} and {path}")
        stems[path.stem] = path
    if not found:
        raise LedgerError(E.INVALID_ARGUMENT, "no journal (*.jsonl) to simulate")
    return found


@dataclass
class RunResult:
    """One journal under one policy. ``stopped_at_step`` is the first step the run did not
    take because every account was terminal (None: it was not cut short); ``error`` is set
    (``{"code", "message", "file", "line"}``) when the journal has a malformed line, and
    then no figure counts."""

    run: str
    policy: str
    outcome: str | None = None
    steps: int = 0
    steps_taken: int = 0
    steps_refused: int = 0
    units_spent: int = 0
    units_rewarded: int = 0
    abandoned: bool = False
    exhausted: bool = False
    stopped_at_step: int | None = None
    error: dict[str, Any] | None = None
    lines: list[tuple[int, str | None]] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """What ``--per-run`` writes for this run (one JSON line)."""
        out = asdict(self)
        del out["lines"]
        return out


def parse_journal(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, parsed line)`` of every non-blank line of the journal at ``path``.

    A line ``apply`` would refuse as malformed raises its ``LedgerError`` with
    ``file`` and ``line`` in the details and both named in the message.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LedgerError(E.INVALID_ARGUMENT, f"{path}: cannot read: {exc.strerror or exc}", file=str(path)) from None
    parsed = []
    for number, text in enumerate(without_bom(data).split(b"\n"), start=1):
        if not text.strip():
            continue
        try:
            parsed.append((number, parse_line(text)))
        except LedgerError as exc:
            raise LedgerError(exc.code, f"{path}:{number}: {exc.message}", file=str(path), line=number) from None
    return parsed


class _FiguresOnly(BudgetManager):
    """The budget manager the simulator runs lines through: the same checks and rules, but no
    result object is built for each line (only the figures at the end are read)."""

    def _result(self, ran: Ran, action: tuple[str, str] | None = None) -> Ran:  # type: ignore[override]
        return ran


def _all_terminal(case: MemoryCase) -> bool:
    view = case.view
    state = view.case()
    accounts = view.accounts(state["revision"]) if state else {}
    return bool(accounts) and all(a["status"] in TERMINAL_STATUSES for a in accounts.values())


def replay_run(run: str, lines: Sequence[tuple[int, dict[str, Any]]], policy: Policy, *,
               analysis: AnalysisConfig | None = None, package: Path | None = None,
               trace: bool = False) -> RunResult:
    """Replay parsed journal ``lines`` from an empty in-memory case under ``policy``.

    With ``trace``, every line is evaluated (no early stop) and ``lines`` of the result
    holds ``(line number, None | error code)`` for each, as ``apply --keep-going`` reports.
    """
    now = utc_now()  # the whole replay happens at one moment: its lines carry their own times, if any
    case = MemoryCase.create("simulation", analysis_config=analysis, package=package, chain=False,
                             clock=lambda: now)
    budget = _FiguresOnly(case.session, package, policy.config)
    result = RunResult(run, policy.name, lines=[] if trace else None)
    last_lifecycle = max((i for i, (_, line) in enumerate(lines) if line["op"] in _LIFECYCLE_OPS), default=-1)
    reserved: set[tuple[Any, Any]] = set()
    for index, (number, line) in enumerate(lines):
        is_step = line["op"] == "reserve"
        result.steps += is_step
        if is_step and result.stopped_at_step is None and index > last_lifecycle and _all_terminal(case):
            result.stopped_at_step = result.steps  # every later line is refused or an identical replay
        identity = (line.get("hypothesis"), line.get("action_id"))
        if result.stopped_at_step is not None and not trace and identity not in reserved:
            result.steps_refused += is_step
            continue
        if is_step:
            reserved.add(identity)
        if line["op"] == "open_revision" and policy.units_per_hypothesis is not None:
            line = {**line, UNITS_KEY: policy.units_per_hypothesis}
        code = None
        try:
            call_operation(case, budget, line)
        except LedgerError as exc:
            code = exc.code
        result.steps_refused += is_step and code is not None
        if trace:
            result.lines.append((number, code))
    result.steps_taken = result.steps - result.steps_refused
    _final_figures(case, result)
    return result


def _final_figures(case: MemoryCase, result: RunResult) -> None:
    view = case.view
    state = view.case()
    last = view.accounts(state["revision"]) if state else {}
    for revision in range(1, (state["revision"] if state else 0) + 1):
        for account in view.accounts(revision).values():
            result.units_spent += account["spent_units"]
            result.units_rewarded += account["rewarded_units"]
    statuses = {a["status"] for a in last.values()}
    result.abandoned = statuses == {STATUS_ABANDONED}
    result.exhausted = statuses == {STATUS_EXHAUSTED}


def simulate_journal(path: Path, policies: Sequence[Policy], *, analysis: AnalysisConfig | None = None,
                     package: Path | None = None) -> list[RunResult]:
    """One journal under every policy (parsed once). A malformed line gives every policy's
    result for this run the same ``error``."""
    try:
        lines = parse_journal(path)
    except LedgerError as exc:
        error = {"code": exc.code, "message": exc.message, "file": str(path), "line": exc.details.get("line")}
        return [RunResult(path.stem, policy.name, error=error) for policy in policies]
    return [replay_run(path.stem, lines, policy, analysis=analysis, package=package) for policy in policies]


def _simulate_task(task: tuple[Path, Sequence[Policy], AnalysisConfig | None, Path | None]) -> list[RunResult]:
    path, policies, analysis, package = task
    return simulate_journal(path, policies, analysis=analysis, package=package)


@dataclass
class SimulationReport:
    """What :func:`simulate` returns.

    * ``policies`` — one dict per policy, in the order given: ``name``,
      ``policy_sha256``, the :data:`FIGURES` and ``by_outcome`` (outcome → the
      figures; empty without outcomes); runs with an ``error`` count nowhere;
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
    if outcomes is not None:
        for row in table.values():
            for outcome in sorted(set(outcomes.values())):
                row["by_outcome"][outcome] = _empty()
    for run in runs:
        if run.error is not None:
            continue
        row = table[run.policy]
        _add(row, run)
        if outcomes is not None:
            _add(row["by_outcome"].setdefault(run.outcome or NO_OUTCOME, _empty()), run)
    return list(table.values())


def _policy_list(policies: Any) -> list[Any] | None:
    """``policies`` of :func:`simulate` as a list (one Policy or path becomes a list of one)."""
    if policies is None or isinstance(policies, (Policy, str, os.PathLike)):
        return None if policies is None else [policies]
    items = list(check_iterable(policies, "policies", "a list of Policy objects or [NAME=]FILE.toml paths"))
    for item in items:
        check_instance(item, (Policy, str, os.PathLike), "each policy", "a Policy or a [NAME=]FILE.toml path")
    return items


def simulate(journals: Iterable[str | os.PathLike[str]], policies: Sequence[Policy | str | os.PathLike[str]] | None = None,
             outcomes: Mapping[str, str] | str | os.PathLike[str] | None = None, *, jobs: int = 1,
             analysis: AnalysisConfig | None = None, package: str | os.PathLike[str] | None = None) -> SimulationReport:
    """Replay every journal under every policy in memory and report the figures per policy.

    ``journals``: journal files and folders (a folder: every ``*.jsonl`` in it,
    sorted by name), or a single ``str``/path-like naming one of them; the run id is the file's stem. ``policies``: :class:`Policy`
    objects or ``[NAME=]FILE.toml`` strings (default: the example policy; policy
    names must differ). ``outcomes``: run id → outcome, or the path of a CSV
    (first column the run id, a column ``outcome``). ``jobs``: worker processes
    (1: in this process); each holds one run at a time. ``analysis``: default
    units, ``max_hypotheses`` and limits (as ``--analysis-config``). ``package``:
    the folder where ``source_refs`` resolve (none: a source reference is refused
    like on a case without that file).

    Returns a :class:`SimulationReport`. Raises ``INVALID_ARGUMENT`` for missing
    journals, a bad outcomes file, duplicate policy names or ``jobs`` < 1, and
    ``CONFIG_INVALID`` for a bad policy file. A malformed journal line does not
    raise: that run's results carry the ``error``.
    """
    journals = path_list(journals, "journals")
    policies = _policy_list(policies)
    check_instance(analysis, (AnalysisConfig, type(None)), "analysis", "an AnalysisConfig or None")
    if package is not None:
        fs_path(package, "package")
    if outcomes is not None and not isinstance(outcomes, (str, os.PathLike)):
        check_text_mapping(outcomes, "outcomes")
    chosen = [p if isinstance(p, Policy) else load_policy(p) for p in (policies or [example_policy()])]
    names = [p.name for p in chosen]
    if len(set(names)) != len(names):
        raise LedgerError(E.INVALID_ARGUMENT, f"policy names must differ: {', '.join(names)}")
    if type(jobs) is not int or jobs < 1:
        raise LedgerError(E.INVALID_ARGUMENT, f"jobs must be an integer >= 1, got {jobs!r}")
    table = read_outcomes(outcomes) if isinstance(outcomes, (str, os.PathLike)) else outcomes
    files = journal_files(journals)
    analysis = analysis or AnalysisConfig()  # validated once, not once per run
    root = Path(package) if package is not None else None
    tasks = [(path, chosen, analysis, root) for path in files]
    if jobs == 1 or len(files) == 1:
        results = [_simulate_task(task) for task in tasks]
    else:
        workers = min(jobs, len(files))
        from concurrent.futures import ProcessPoolExecutor  # on first use: ~25 ms at every CLI start

        with ProcessPoolExecutor(max_workers=workers) as pool:  # a few journals per message, one run at a time
            results = list(pool.map(_simulate_task, tasks, chunksize=max(1, len(files) // (workers * 16))))
    runs = [run for per_journal in results for run in per_journal]
    for run in runs:
        run.outcome = table.get(run.run) if table is not None else None
    stems = {path.stem for path in files}
    return SimulationReport(
        policies=summarize(chosen, runs, table),
        runs=runs,
        errors=[per_journal[0].error for per_journal in results if per_journal and per_journal[0].error],
        outcomes_without_journal=sorted(set(table) - stems) if table is not None else [],
        runs_without_outcome=sorted(stems - set(table)) if table is not None else [],
    )
