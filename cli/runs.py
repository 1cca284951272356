"""``ledger runs import`` and ``ledger outcome record``: your own agent runs (docs/runs.md)."""

from __future__ import annotations

import shlex
import sys
from typing import Any

import click

from ledger import LedgerError, import_runs
from ledger.runs.trajectories import FORMATS as RUN_FORMATS, check_run_prefix

from ._common import AT, CASE, JSON, IntegerRange, Settings, UsageGroup, input_path, pass_settings, progress_bar
from ._output import dumps, echo, emit_result, first_names, one_line, warn


@click.group(cls=UsageGroup)
def runs() -> None:
    """Turn coding-agent trajectories into journals for 'apply' and 'simulate'."""


class _Progress:
    """A progress bar on standard error while it is a terminal, made when the file count is known."""

    def __init__(self) -> None:
        self.bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = progress_bar(total, "importing runs").__enter__()
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


def _run_prefix(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """A prefix that cannot start a run id is a usage error (exit 2), as a bad option value is."""
    try:
        return check_run_prefix(value)
    except LedgerError as exc:
        raise click.BadParameter(exc.message) from None


@runs.command("import")
@click.argument("paths", nargs=-1, required=True, type=input_path(), metavar="TRAJ_OR_FOLDER...")
@click.option("--out", required=True, metavar="DIR", help="Folder the journals are written to (DIR/RUN_ID.jsonl).")
@click.option("--format", "fmt", type=click.Choice(RUN_FORMATS), default="auto", show_default=True,
              help="Trajectory format; auto tells them apart by name and content.")
@click.option("--outcomes", type=input_path(dir_okay=False), metavar="CSV",
              help="CSV 'instance_id,outcome': a run named there gets record_outcome.")
@click.option("--semantic-score", type=IntegerRange(0, 100), default=50, show_default=True,
              help="The semantic score every settle carries.")
@click.option("--actions", metavar="FILE", help="TOML mapping of programs to action names (default: built in).")
@click.option("--recursive", "-r", is_flag=True,
              help="Read a folder's subfolders too, at any depth (an agent writes each run into one).")
@click.option("--run-prefix", default="", metavar="TEXT", callback=_run_prefix,
              help="Put TEXT before every run id, so that runs of the same tasks by other agents or models can "
                   "share DIR (e.g. gpt5.); --outcomes names the runs without it.")
@JSON
@pass_settings
def import_command(settings: Settings, paths: tuple[str, ...], out: str, fmt: str, outcomes: str | None,
                   semantic_score: int, actions: str | None, recursive: bool, run_prefix: str, as_json: bool) -> None:
    """Write one journal of derived facts per run found in TRAJ_OR_FOLDER (.gz too).

    Exits 1 when a file could not be imported (named with the reason); the other runs are written.
    """
    progress = _Progress()
    try:
        summary = import_runs(paths, out, fmt=fmt, outcomes=outcomes, semantic_score=semantic_score,
                              actions=actions, progress=progress, analysis=settings.analysis(), recursive=recursive,
                              run_prefix=run_prefix)
    finally:
        progress.close()
    result = summary.to_dict()
    if as_json:
        echo(dumps(result))
    else:
        skipped = ", ".join(f"{n} {why}" for why, n in result["skipped"].items()) or "none"
        failed = f" ({len(summary.errors)} file(s) failed: named below)" if summary.errors else ""
        runs, steps = (f"{n} {word}{'' if n == 1 else 's'}" for n, word in ((summary.runs, "run"), (summary.steps, "step")))
        echo(one_line(f"imported {runs}{failed}, {steps} into {out}; turns skipped: {skipped}"))
    if summary.runs_without_outcome:  # an outcomes file whose run ids do not match, say
        missing = summary.runs_without_outcome
        warn(f"note: {len(missing)} run(s) have no outcome in --outcomes (their journals record none): "
             f"{first_names(missing)}")
    if summary.outcomes_without_run:  # a run that failed to import, or an outcomes file of more runs
        extra = summary.outcomes_without_run
        warn(f"note: {len(extra)} run(s) in --outcomes were not imported: "
             f"{first_names(extra)}")
    if summary.runs_without_steps:  # every turn skipped: say so, or simulate's run counts hide it
        empty = summary.runs_without_steps
        warn(f"note: {len(empty)} run(s) have no step (no model turn at all, or every turn skipped, as the summary "
             "line counts): their "
             f"journals hold no action, and simulate counts them as runs that spent nothing: {first_names(empty)}")
    if summary.runs_unmarked:  # a chat transcript reads as a mini-swe-agent run with a step or two
        unmarked = summary.runs_unmarked
        warn(f"note: {len(unmarked)} run(s) read as mini-swe-agent show none of its marks (no trajectory_format, "
             "no observation in its <returncode> wrapper or with an exit code): check they are agent runs: "
             f"{first_names(unmarked)}")
    if summary.not_runs:  # preds.json, report.json beside the runs of an agent's output folder
        warn(f"note: {len(summary.not_runs)} file(s) hold an agent's predictions or an evaluation's report, no run: "
             f"left out: {first_names(summary.not_runs)}")
    for folder in summary.subfolders_not_read:  # an agent's output folder: one subfolder per run
        warn(f"note: the subfolders of {folder} hold trajectories, not read: give --recursive to read them")
    if run_prefix and summary.runs:  # beside other agents' runs of the same tasks: folds should keep tasks whole
        warn(f"note: give simulate --frontier --task-prefix {shlex.quote(run_prefix)} (and each other agent's "
             "prefix), so that its held-out folds keep each task's runs together")
    given = settings.analysis_file
    for limit, runs in summary.over_default_limits.items():
        warn(f"note: {len(runs)} run(s) pass the analysis config's {'default ' if given is None else ''}{limit} "
             f"({settings.analysis().limits[limit]}): apply refuses them, and so does simulate under any policy "
             f"that lets them reach it (the run then counts under no policy), unless the analysis config "
             f"({'--analysis-config FILE' if given is None else given}) raises [limits] {limit}: {first_names(runs)}")
    for error in summary.errors:  # a file name or a reason may hold a terminal escape: shown escaped
        warn(f"error: {error['code']}: {error['file']}: {error['reason']}")
    if summary.errors:
        sys.exit(1)


@click.group(cls=UsageGroup)
def outcome() -> None:
    """Record how a revision's work ended."""


@outcome.command("record")
@CASE
@click.argument("label", metavar="OUTCOME")
@click.option("--source", required=True, help="Where the verdict came from (e.g. 'swe-bench evaluation').")
@AT
@JSON
@pass_settings
def outcome_record(settings: Settings, case: str, label: str, source: str, at: str | None, as_json: bool) -> None:
    """Record OUTCOME (e.g. resolved) for the current revision; once per revision."""
    with settings.open(case) as opened:
        result = opened.record_outcome(label, source, at=at)
    emit_result(result.to_dict(), as_json,
                [f"revision {result.revision}: outcome {label} (seq {result.seq}{', reused' if result.reused else ''})"])
