"""``ledger apply`` (JSON-Lines journals) and ``ledger demo``."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import click

from ledger import Case, apply_journal, open_for_journal, read_lines, run_demo

from ._common import BALANCE_COLUMNS, CASE, Settings, _NoBar, pass_settings, progress_bar
from ._output import OutputError, dumps, echo, emit_rows

@click.command()
@CASE
@click.argument("journal", type=click.File("rb"))
@click.option("--create", "create_case_id", metavar="CASE_ID", help="Create the case first (re-running opens it).")
@click.option("--keep-going", is_flag=True, help="Continue after a failed line (exit status is still 1).")
@click.option("--batch-size", type=click.IntRange(1, 10_000), default=100, show_default=True,
              help="Lines per transaction (group commit); a result line prints once its batch committed.")
@pass_settings
def apply(settings: Settings, case: str, journal: Any, create_case_id: str | None, keep_going: bool,
          batch_size: int) -> None:
    """Apply a JSON-Lines JOURNAL ('-' for stdin), printing one JSON result line per line.

    Each line succeeds or fails alone; up to --batch-size lines share one durable
    transaction. Re-running a journal after a crash returns the applied lines
    as reused.
    """
    opened = open_for_journal(case, create_case_id=create_case_id, analysis_config=settings.analysis(),
                              actor=settings.actor)
    failed = False
    try:
        manager = opened.budget(settings.budget_config())
        size = _file_size(journal)
        # stdout carries the result lines, so the bar (of bytes read) goes to stderr, and only
        # when stdout is piped and the journal's size is known
        show = size is not None and not sys.stdout.isatty()
        with progress_bar(size, "applying", stream=sys.stderr) if show else _NoBar() as bar:
            # read line by line: memory does not grow with the journal
            lines = read_lines(journal, on_bytes=bar.update)
            for outcome in apply_journal(opened, lines, budget=manager, keep_going=keep_going,
                                         batch_size=batch_size):
                echo(dumps(outcome.to_dict()))
                failed = failed or not outcome.ok
    finally:
        opened.close()
    if failed:
        sys.exit(1)


def _file_size(stream: Any) -> int | None:
    """Size of a journal that is a regular file (None for a pipe or a terminal)."""
    try:
        info = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


@click.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@pass_settings
def demo(settings: Settings, directory: Path | None) -> None:
    """Run a full investigation on the bundled example (BUG-20) in DIRECTORY.

    Default: ./ledger-demo (or -2, -3, … if taken). Shows a refund, duplicate
    evidence scoring zero, a failed action, a refused reservation, exhaustion,
    low-information abandonment and a rejection, then exports and verifies.
    """
    if settings.configs_given:
        raise click.UsageError("demo always runs the bundled example policy; leave out --config and --analysis-config")
    printer = _TolerantPrinter()
    # finishes even if nobody reads the output
    path, report, verified = run_demo(directory, echo=printer, actor=settings.actor)
    with Case.open(path) as opened:
        rows = opened.balances()
    printer.check()
    echo("")
    emit_rows(rows, BALANCE_COLUMNS, "table")
    echo("")
    echo(f"exported {report.files_written} files to {path}/analysis and {path}/manifest.json")
    echo(f"verified: {verified.events} events, head seq {verified.head_seq} sha256 {verified.head_sha256}")
    echo(f"\nThe case is at {path}. Try:\n  ledger balances {path}\n  ledger actions {path}\n"
         f"  ledger sql {path} \"SELECT * FROM case_status\"\n  ledger verify {path}")


class _TolerantPrinter:
    """Prints lines until standard output fails, then keeps quiet; :meth:`check` re-raises the failure."""

    def __init__(self) -> None:
        self.error: OutputError | None = None

    def __call__(self, text: str) -> None:
        if self.error is None:
            try:
                echo(text)
            except OutputError as exc:
                self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise self.error
