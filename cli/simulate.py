"""``ledger simulate``: replay recorded journals under budget policies, in memory."""

from __future__ import annotations

from typing import Any, Sequence

import click

from ledger import (FrontierReport, LedgerError, Policy, SimulationReport, example_policy, frontier, load_policy,
                    plot_frontier, plot_tradeoff, simulate, vary)
from ledger.simulation.emit import emit_policy
from ledger.simulation.folds import DEFAULT_FOLDS, by_task
from ledger.simulation.constraint import parse_max_stopped
from ledger.simulation.output_files import check_distinct_outputs, check_output_file, write_output_file
from ledger.simulation.plot import check_plot
from ledger.simulation.simulator import parse_vary, policy_file
from ledger.ground.workers import JOBS_MAX

from ._common import OnceCommand, IntegerRange, LinkAwarePath, Settings, input_path, pass_settings, table_options
from ._output import OutputError, dumps, echo, emit_rows, first_names, one_line, warn
from .frontier import emit_frontier

FIGURE_COLUMNS = ("runs", "steps", "steps_taken", "steps_refused", "units_spent", "units_rewarded",
                  "runs_abandoned", "runs_exhausted", "units_per_run")


def _base_policies(settings: Settings, specs: Sequence[str]) -> list[Policy]:
    if specs:
        try:
            loaded = [load_policy(spec) for spec in specs]
        except LedgerError as exc:
            if "policy_name" not in exc.details:
                raise
            raise click.BadParameter(exc.message, param_hint="--policy") from None  # like two policies named alike
        names = [policy.name for policy in loaded]
        for name in names:
            if names.count(name) > 1:
                raise click.BadParameter(f"two policies are named {name!r}; name them apart with NAME=FILE.toml",
                                         param_hint="--policy")
        return loaded
    config = settings.budget_config()
    return [Policy("config", config)] if config is not None else [example_policy()]


def _grid(base: Policy, specs: Sequence[str]) -> list[Policy]:
    """The --vary grid; any refusal is a usage error naming the key or value (its message starts
    with ``--vary``, so click's form is not put around it)."""
    try:
        return vary(base, [parse_vary(spec) for spec in specs])
    except LedgerError as exc:
        raise click.UsageError(exc.message) from None


def _check_names(policies: Sequence[Policy]) -> None:
    """Two policies named alike (a --policy NAME= and a --vary KEY=VALUE) are a usage error."""
    names = [policy.name for policy in policies]
    for name in names:
        if names.count(name) > 1:
            raise click.BadParameter(f"two policies are named {name!r}; name the --policy apart with "
                                     "NAME=FILE.toml", param_hint="--vary")


def _rows(report: SimulationReport) -> list[dict[str, Any]]:
    rows = []
    for policy in report.policies:
        rows.append({"policy": policy["name"], "outcome": "(all)", **{k: policy[k] for k in FIGURE_COLUMNS}})
        for outcome, figures in policy["by_outcome"].items():
            rows.append({"policy": policy["name"], "outcome": outcome, **figures})
    return rows


def _emit_tables(report: SimulationReport) -> None:
    for number, policy in enumerate(report.policies):
        if number:
            echo("")
        echo(one_line(f"policy {policy['name']}  (policy_sha256 {policy['policy_sha256'][:16]}…)"))
        rows = [row for row in _rows(report) if row["policy"] == policy["name"]]
        emit_rows(rows, ("outcome", *FIGURE_COLUMNS), "table")


def _write_per_run(report: SimulationReport, path: str) -> None:
    # a journal path that is not UTF-8 (a surrogate escape) becomes the JSON escape \udcXX, read back the same
    text = "".join(dumps(run.to_dict()) + "\n" for run in report.runs)
    write_output_file(path, text.encode("utf-8", "backslashreplace"), "--per-run")


def _report_mismatches(report: SimulationReport) -> None:
    if report.outcomes_without_journal:
        click.echo(one_line(f"note: {len(report.outcomes_without_journal)} run(s) in --outcomes have no journal: "
                            f"{first_names(report.outcomes_without_journal)}"), err=True)
    counts = {run.run for run in report.runs if run.error is None}  # under some policy
    failed = {run.run for run in report.runs} - counts
    counted = [run for run in report.runs_without_outcome if run not in failed]
    if counted:
        click.echo(one_line(f"note: {len(counted)} journal(s) have no outcome (counted as "
                            f"'(no outcome)'): {first_names(counted)}"), err=True)
    prefixed = report.prefixed_outcome()
    if prefixed:
        click.echo(one_line(f"note: journal {prefixed[0]!r} looks like run {prefixed[1]!r} of --outcomes imported with "
                            f"the --run-prefix {prefixed[0][:-len(prefixed[1])]!r}: the outcomes name runs as their "
                            "journals do, prefix included (or give them to 'ledger runs import --outcomes')"), err=True)
    if len(counted) < len(report.runs_without_outcome):
        erred = [run for run in report.runs_without_outcome if run in failed]
        click.echo(one_line(f"note: {len(erred)} journal(s) with an error have no outcome either (a run with an "
                            f"error counts nowhere): {first_names(erred)}"), err=True)


#: Run ids a note names before it only counts the rest (a subset of runs simulated with the
#: whole outcomes file would otherwise print every other run id).


def _outcome_label(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--good LABEL``: a usage error when blank (no outcome is)."""
    if not value.strip():
        raise click.BadParameter(f"give an outcome label, such as resolved; got {value!r}")
    return value


def _task_prefixes(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """``--task-prefix TEXT``: a usage error when empty (it would start every run id)."""
    if any(not prefix for prefix in value):
        raise click.BadParameter("give the text the run ids were imported with (--run-prefix), not an empty one")
    return value


def _folds(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """``--folds 1``: a usage error whatever the runs (one fold leaves nothing to choose on)."""
    if value == 1:
        raise click.BadParameter("1 fold leaves no runs to choose on; give 0 (none) or 2 or more")
    return value


@click.command("simulate", cls=OnceCommand)
@click.argument("journals", nargs=-1, required=True, type=input_path(), metavar="JOURNAL_OR_FOLDER...")
@click.option("--policy", "policy_specs", multiple=True, metavar="[NAME=]FILE.toml",
              help="A budget policy to simulate (repeatable; default: --config, else the example policy). "
                   "It may also set units_per_hypothesis, which replaces the journals' allocation.")
@click.option("--vary", "vary_specs", multiple=True, metavar="KEY=V1,V2,...",
              help="Add a grid of policies derived from the first policy (repeatable: every combination).")
@click.option("--outcomes", type=input_path(dir_okay=False), metavar="CSV",
              help="Run outcomes: first column the run id (journal file stem), a column 'outcome'.")
@table_options(json='Print one JSON object, {"policies": [...]}: each policy with its figures per outcome.')
@click.option("--per-run", type=click.Path(dir_okay=False, path_type=str), metavar="FILE",
              help="Write one JSON line per run and policy.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=str), metavar="FILE.svg|FILE.png",
              help="Draw steps saved against resolved runs stopped; with --frontier, units saved against --good "
                   "runs stopped, the frontier, the baselines and the choice marked, the other runs stopped as "
                   "colours (needs matplotlib: pip install '.[plot]' in a clone of the repository).")
@click.option("--frontier", "with_frontier", is_flag=True,
              help="Also evaluate the baselines no-stop and cap-p75, add runs_stopped and units_saved, and print "
                   "the policies no other beats in both units spent and good runs stopped.")
@click.option("--good", default="resolved", show_default=True, metavar="LABEL", callback=_outcome_label,
              help="With --frontier: the outcome of the runs a policy should not stop.")
@click.option("--max-stopped", metavar="LABEL=PCT",
              help="With --frontier: choose the policy spending the fewest units among those stopping at most "
                   "PCT % of the LABEL runs (e.g. resolved=2%).")
@click.option("--emit", type=click.Path(dir_okay=False, path_type=str), metavar="FILE.toml",
              help="With --max-stopped: write the chosen policy as a budget TOML.")
@click.option("--folds", type=IntegerRange(0, None), default=None, callback=_folds,
              show_default=f"{DEFAULT_FOLDS}, or one per run (per task with --task-prefix) when there are fewer",
              help="With --max-stopped: make the choice again on all folds but one and score it on that one "
                   "(0: none).")
@click.option("--task-prefix", "task_prefixes", multiple=True, metavar="TEXT", callback=_task_prefixes,
              help="With --max-stopped: a prefix the runs were imported with (ledger runs import --run-prefix; "
                   "repeatable): runs whose ids are the same without it are one task's, kept in one fold and "
                   "resampled together, so that the held-out figures are those of tasks the choice did not see.")
@click.option("--seed", type=IntegerRange(0, None), default=0, show_default=True, help="With --frontier: the seed of "
              "the folds and the bootstrap (0 or more).")
@click.option("--bootstrap", "samples", type=IntegerRange(0, 1_000_000), default=0, show_default=True,
              metavar="N", help="With --max-stopped: 95 % intervals of the choice's figures from N resamplings.")
@click.option("--jobs", type=IntegerRange(1, JOBS_MAX), default=None, show_default="the cores this process may use",
              help="Processes replaying journals, this one included; each holds one run at a time.")
@click.option("--package", type=LinkAwarePath(file_okay=False, exists=True, path_type=str), metavar="DIR",
              help="Folder where the journals' source_refs resolve (default: none, so they are refused).")
@pass_settings
def simulate_command(settings: Settings, journals: tuple[str, ...], policy_specs: tuple[str, ...],
                     vary_specs: tuple[str, ...], outcomes: str | None, fmt: str,
                     per_run: str | None, plot: str | None, with_frontier: bool, good: str, max_stopped: str | None,
                     emit: str | None, folds: int | None, task_prefixes: tuple[str, ...], seed: int, samples: int,
                     jobs: int | None, package: str | None) -> None:
    """Replay recorded journals under one or more budget policies, in memory.

    A folder means every *.jsonl in it, sorted by name; the run id is the file's
    stem. Each journal is replayed from an empty case with the same rules as
    'ledger apply --keep-going' (created at the journal's first "at", for
    --actor): a reservation the policy refuses is a step the run would not have
    taken. Nothing is written except the --per-run, --plot and --emit files. A journal
    with a malformed line, or a line refused for a reason the policy did not
    decide, is reported (file and line) and the others go on; the exit status
    is then 1. With --frontier, the --json object is {"policies": [...],
    "frontier": [...], "choice": {...}}; a constraint nothing meets is
    reported as no choice (exit status 0).
    """
    policies = _base_policies(settings, policy_specs)
    if vary_specs:
        policies += _grid(policies[0], vary_specs)
        _check_names(policies)
    check_distinct_outputs({"--plot": plot, "--per-run": per_run, "--emit": emit},
                           [*journals, outcomes, *map(policy_file, policy_specs), *settings.config_files])
    if plot is not None:  # refused now rather than after a long run
        check_plot(plot)
    if per_run is not None:
        check_output_file(per_run, "--per-run")
    if with_frontier:
        _frontier(settings, journals, policies, outcomes, fmt, (plot, per_run, emit), good, max_stopped,
                  (folds, task_prefixes, seed, samples), jobs, package)
        return
    _no_frontier_options(good=good != "resolved", max_stopped=max_stopped, emit=emit is not None,
                         folds=folds is not None, task_prefix=bool(task_prefixes), seed=seed != 0,
                         bootstrap=samples != 0)
    report = simulate(journals, policies, outcomes, jobs=jobs, analysis=settings.analysis(), package=package,
                      actor=settings.actor)
    try:
        if fmt == "json":
            echo(dumps(report.to_dict()))
        elif fmt in ("csv", "tsv", "nl"):
            emit_rows(_rows(report), ("policy", "outcome", *FIGURE_COLUMNS), fmt)
        else:
            _emit_tables(report)
    except OutputError as exc:  # simulate writes no ledger: nothing to read back
        exc.done = "simulate wrote nothing (no --per-run or --plot file yet): run it again"
        raise
    if per_run is not None:
        _write_per_run(report, per_run)
    if plot is not None:
        plot_tradeoff(report.policies, plot, base=policies[0].name)
    _report_mismatches(report)
    _refuse_errors(report.errors)


def _refuse_errors(errors: list[dict[str, Any]]) -> None:
    """The journals not simulated, each named: every one after the first on a ``note:`` line of its
    own, then the error the command ends with, naming the first (one message holding them all was
    cut short, leaving some journals unnamed)."""
    if not errors:
        return
    for error in errors[1:]:
        warn(f"note: not simulated: {error['code']}: {error['message']}")
    others = f" (the other {len(errors) - 1} named above)" if len(errors) > 1 else ""
    raise LedgerError(errors[0]["code"], f"{len(errors)} journal(s) not simulated{others}: {errors[0]['message']}")


#: The options that score or write a choice: they need a constraint as well as --frontier.
CHOICE_OPTIONS = ("emit", "folds", "bootstrap", "task_prefix")


def _no_frontier_options(**given: Any) -> None:
    for name, present in given.items():
        if present:
            also = " and --max-stopped LABEL=PCT (the constraint the choice meets)" if name in CHOICE_OPTIONS else ""
            raise click.UsageError(f"--{name.replace('_', '-')} needs --frontier{also}")


def _warn_held_out(choice: dict) -> None:
    """Warn when the choice, made again without each fold and scored on it, stops more of the
    constraint's runs on average than the constraint allows: it may not hold on new runs."""
    held, constraint = choice.get("held_out"), choice.get("constraint")
    if not held or not constraint:
        return
    stopped, limit, label = held["constraint_stopped_pct"], constraint["max_stopped_pct"], constraint["label"]
    if stopped["mean"] is not None and stopped["mean"] > limit:
        warn(f"warning: on the runs each fold left out, the choice stops {stopped['mean']:g} % of the {label} runs "
             f"on average (up to {stopped['max']:g} %), above the {limit:g} % allowed: expect it to stop more on "
             "new runs than on these; check it on runs it did not see (simulate them with --policy FILE --frontier, "
             "and --vary units_per_hypothesis=N when the choice sets it)")


def _warn_ungrouped(report: FrontierReport, prefixes: Sequence[str]) -> None:
    """Say so when --task-prefix grouped no two runs: a prefix of one agent's runs alone leaves every
    run a task of its own, and the output would look as if none had been given."""
    runs = {run.run for run in report.simulation.runs if run.error is None}
    if prefixes and len(runs) > 1 and len(by_task(runs, prefixes)) == len(runs):
        warn("note: --task-prefix grouped no runs: no two run ids are the same without the prefixes given, so every "
             "run is a task of its own (a.X and b.X are one task only when both a. and b. are given)")


def _frontier(settings: Settings, journals: Sequence[str], policies: list[Policy], outcomes: str | None, fmt: str,
              files: tuple[str | None, str | None, str | None], good: str, max_stopped: str | None,
              scoring: tuple[int | None, tuple[str, ...], int, int], jobs: int | None, package: str | None) -> None:
    """--frontier: the search, its output, then the --per-run, --emit and --plot files; ``scoring``
    is ``(--folds, --task-prefix, --seed, --bootstrap)``."""
    plot, per_run, emit = files
    folds, task_prefixes, seed, samples = scoring
    try:
        constraint = parse_max_stopped(max_stopped) if max_stopped is not None else None
    except LedgerError as exc:
        raise click.BadParameter(exc.message, param_hint="--max-stopped") from None
    given = {"emit": emit is not None, "folds": folds is not None, "task_prefix": bool(task_prefixes),
             "bootstrap": samples != 0}
    for name in CHOICE_OPTIONS:
        if given[name] and constraint is None:
            raise click.UsageError(f"--{name.replace('_', '-')} needs --max-stopped (the constraint the choice meets)")
    if emit is not None:
        check_output_file(emit, "--emit")
    try:
        report = frontier(journals, policies, outcomes, good=good, constraint=constraint, folds=folds, seed=seed,
                          samples=samples, task_prefixes=list(task_prefixes), jobs=jobs, analysis=settings.analysis(),
                          package=package,
                          actor=settings.actor)
    except LedgerError as exc:  # a label no run has: the message gives the first journal left out
        for error in exc.details.get("not_simulated", [])[1:]:
            warn(f"note: not simulated: {error['code']}: {error['message']}")
        raise
    try:
        emit_frontier(report, fmt, good)
    except OutputError as exc:
        exc.done = "simulate wrote nothing (no --per-run, --emit or --plot file yet): run it again"
        raise
    _warn_held_out(report.choice)
    _warn_ungrouped(report, task_prefixes)
    if per_run is not None:
        _write_per_run(report.simulation, per_run)
    if emit is not None and report.chosen is not None:
        emit_policy(report, emit)
        units = report.chosen.units_per_hypothesis
        if units is not None:
            warn(f"note: {emit} holds the chosen budget keys; the choice also gives each hypothesis {units} units, "
                 f"which no budget file holds: add --units-per-hypothesis {units} to ledger apply, "
                 f"--vary units_per_hypothesis={units} to ledger simulate --policy, --units {units} to ledger revision "
                 f"open, units_per_hypothesis={units} to open_revision in Python")
    elif emit is not None:
        warn(f"note: no choice, so --emit {emit} was not written")
    if plot is not None:
        plot_frontier(report, plot, good=good)
    _report_mismatches(report.simulation)
    _refuse_errors(report.simulation.errors)
