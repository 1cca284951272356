"""``ledger apply`` (JSON-Lines journals) and ``ledger demo``."""

from __future__ import annotations

import functools
import itertools
import os
import shlex
import shutil
import stat
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import click

import ledger
from ledger import BudgetConfig, Case, JournalSummary, LedgerError, LineResult, apply_journal
from ledger.ground import interrupts
from ledger.ground.canonical import SAFE_INTEGER_MAX
from ledger.package_tools.journal import (LINE_BYTES_MAX, clamp_warning, first_at as journal_first_at,
                                          open_for_journal, read_lines, recorded_run_hint,
                                          refuse_case_files_as_journal)

from ._common import (OnceCommand, _NoBar, BALANCE_COLUMNS, CASE, DEMO_TAKES_NO_CONFIG, IntegerRange, LinkAwareFile,
                      Settings, pass_settings, progress_bar)
from ._output import LinePrinted, OutputError, dumps, echo, echo_line, emit_rows, one_line, warn

@click.command(cls=OnceCommand)
@CASE
@click.argument("journal", type=LinkAwareFile("rb"))
@click.option("--create", "create_case_id", metavar="CASE_ID",
              help="Create the case first (re-running opens it); a file whose first line is no journal line, "
              "or that has none, creates nothing.")
@click.option("--at", metavar="RFC3339", help="With --create: time of the case-created event "
              "(default: the journal's first \"at\", else now).")
@click.option("--keep-going", is_flag=True, help="Continue after a failed line (exit status is still 1).")
@click.option("--batch-size", type=IntegerRange(1, 10_000), default=100, show_default=True,
              help="Lines per transaction (group commit); a result line prints once its batch committed.")
@click.option("--quiet", "-q", is_flag=True, help="Print no result lines: on stderr, only the first failed line and the summary.")
@click.option("--results", type=click.Choice(["all", "changed"]), default="all", show_default=True,
              help="'changed': each result line's state holds only the account the line touched.")
@click.option("--units-per-hypothesis", type=IntegerRange(1, SAFE_INTEGER_MAX), metavar="N",
              help="Give each hypothesis N units, replacing the allocation of every open_revision line "
              "(as a simulation policy that sets units_per_hypothesis does).")
@pass_settings
def apply(settings: Settings, case: str, journal: Any, create_case_id: str | None, at: str | None,
          keep_going: bool, batch_size: int, quiet: bool, results: str, units_per_hypothesis: int | None) -> None:
    """Apply a JSON-Lines JOURNAL ('-' for stdin), printing one JSON result line per line.

    Each line succeeds or fails alone; up to --batch-size lines share one durable
    transaction. Re-running a journal after a crash returns the applied lines
    as reused, up to a transition line the case has since moved past (resume
    such a journal after its last applied line). A line whose "at" is earlier than the previous event is recorded
    at the previous event's time; apply warns about each such line on stderr.
    A summary line (lines ok, failed, reused, raised times, elapsed; with
    --keep-going, the first failed line and its error code) ends the run on
    stderr.
    """
    if at is not None and create_case_id is None:
        raise click.UsageError("--at sets the time of the case that --create makes; give --create too")
    refuse_case_files_as_journal(journal, case)
    counted = _BytesRead()
    reader = read_lines(journal, on_bytes=counted)  # one reader: a peek never splits a line
    head, ended = _peek(reader, to_first_at=at is None) if create_case_id is not None else ([], False)
    opened = open_for_journal(case, create_case_id=create_case_id, at=at if at is not None else journal_first_at(head),
                              first_lines=head if create_case_id is not None else None,
                              journal_name=_journal_name(journal), journal_ended=ended,
                              analysis_config=settings.analysis(), actor=settings.actor)
    summary = JournalSummary()
    try:
        manager = opened.budget(settings.budget_config())
        size = _file_size(journal)
        # the bar counts bytes read and goes to stderr (stdout carries the result lines)
        with progress_bar(size or 0, "applying") if size else _NoBar() as bar:
            lines = itertools.chain(head, reader)
            counted.hand_to(bar.update)
            uncounted = _Uncounted()
            outcomes = apply_journal(opened, lines, budget=manager, keep_going=keep_going, batch_size=batch_size,
                                     on_commit=uncounted.add, units_per_hypothesis=units_per_hypothesis)
            noted = functools.partial(_note_if_initialized, manager=manager, quiet=quiet)
            try:
                _print_outcomes(outcomes, summary, uncounted, noted, journal, keep_going, quiet, results)
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the committed lines not yet printed still count
                summary.interrupted = True
                _count_unprinted(outcomes, uncounted, summary, noted)
                raise
            except LedgerError:  # no line's own (the disk full, say): the summary says where it stopped
                summary.ended_by_error = True
                raise
            bar.update(size or 0)  # a stop leaves lines unread: the bar still ends full (click clamps it)
    finally:
        try:
            opened.close()  # its last checkpoint may take a moment: a second Ctrl-C there
        finally:
            click.echo(summary.text(), err=True)  # still leaves the count of what committed
    if summary.failed:
        sys.exit(1)


class _Uncounted:
    """What an interrupted or failed printing has not counted yet: ``committed``, the results of
    committed batches not yet counted; ``printing``, a counted line's result is being printed."""

    def __init__(self) -> None:
        self.committed, self.printing = 0, False

    def add(self, lines: int) -> None:
        self.committed += lines


def _print_outcomes(outcomes: Iterator[LineResult], summary: JournalSummary, uncounted: _Uncounted,
                    noted: Callable[[LineResult], None], journal: Any, keep_going: bool, quiet: bool,
                    results: str) -> None:
    """Count and print each line's result as it comes (each given to ``noted`` first)."""
    for outcome in outcomes:
        uncounted.committed -= 1  # beside the count: an interrupt between them would count a line twice or never
        summary.add(outcome)
        uncounted.printing = True
        noted(outcome)
        if not outcome.ok and not keep_going:
            summary.stopped_at = outcome.line
        try:
            _report_line(outcome, summary, quiet, results, uncounted)
            hint = recorded_run_hint(_journal_name(journal)) if outcome.line == 1 and not outcome.ok else ""
            if hint:
                warn(f"hint:{hint[1:]}")
        except LinePrinted as interrupt:  # an interrupt while the result line was written: whole, or cut short
            uncounted.printing = not interrupt.whole
            summary.cut_short = None if interrupt.whole else outcome.line
            raise
        except OutputError as failed:
            summary.cut_short = outcome.line if failed.cut_short else None
            _count_unprinted(outcomes, uncounted, summary, noted)
            raise
        uncounted.printing = False


def _journal_name(stream: Any) -> str:
    """The journal file's name ("" for a stream without one: standard input under a test runner)."""
    name = getattr(stream, "name", "")
    return name if isinstance(name, str) else ""


def _report_line(outcome: LineResult, summary: JournalSummary, quiet: bool, results: str,
                 uncounted: _Uncounted) -> None:
    """Print one line's result (or, with --quiet, the first failure on stderr): once it is written
    whole, an interrupt no longer counts it as not printed."""
    if not quiet:
        echo_line(dumps(outcome.to_dict(changed_only=results == "changed")))
        uncounted.printing = False
        if outcome.clamped and summary.clamped <= CLAMP_WARNINGS_MAX:
            warn(clamp_warning(outcome))
    elif not outcome.ok and summary.failed == 1:
        click.echo(f"line {outcome.line}: error: {outcome.error.code}: {one_line(outcome.error.message)}", err=True)


def _note_if_initialized(outcome: LineResult, manager: Any, quiet: bool) -> None:
    """The note of a line whose ``initialize`` froze a policy no --config named (none with --quiet: the
    summary only, as for the clamp warnings), printed or not."""
    if outcome.op == "initialize" and outcome.ok and not outcome.reused and manager.config is None and not quiet:
        _note_policy(outcome, manager)


def _count_unprinted(outcomes: Iterator[LineResult], uncounted: _Uncounted, summary: JournalSummary,
                     noted: Callable[[LineResult], None] | None = None) -> None:
    """Standard output failed, or an interrupt came: count the line being printed, if one was, and
    the committed results of its batch not yet counted (read without starting another batch, each
    given to ``noted``), then stop applying. An interrupt inside a batch being applied ends it there:
    nothing of it commits."""
    summary.unprinted += uncounted.printing
    try:
        for outcome in itertools.islice(outcomes, max(0, uncounted.committed)):
            summary.add(outcome)
            summary.unprinted += 1
            if noted is not None:
                noted(outcome)
    except KeyboardInterrupt:  # a second one while counting: the count stays as far as it got
        pass
    outcomes.close()


#: Said when a journal's ``initialize`` froze the built-in policy (no --config): a journal replayed to
#: check a simulation runs under that policy only when its file is given.
DEFAULT_POLICY_NOTE = ("note: line {line}: initialize froze the built-in default policy (no action prices: every "
                       "action costs default_action_cost, 10 units); to apply the policy your budget file or a "
                       "simulation names, give that file with --config FILE")
KEPT_POLICY_NOTE = ("note: line {line}: initialize kept the policy an earlier revision froze (policy_sha256 {sha}…), "
                    "not the built-in defaults; to apply another, give its budget file with --config FILE")


def _note_policy(outcome: LineResult, manager: Any) -> None:
    """Say which policy an ``initialize`` without ``--config`` froze: the built-in defaults, or the
    policy of an earlier revision, which it keeps."""
    frozen = manager.frozen_policy(outcome.result["revision"])
    if frozen is None or frozen.policy_sha256 == BudgetConfig().policy_sha256:
        warn(DEFAULT_POLICY_NOTE.format(line=outcome.line))
    else:
        warn(KEPT_POLICY_NOTE.format(line=outcome.line, sha=frozen.policy_sha256[:12]))
#: Clamp warnings printed one by one; the summary counts the rest.
CLAMP_WARNINGS_MAX = 20
#: Lines read ahead to find the journal's first "at" for --create (memory stays bounded).
PEEK_LINES_MAX = 1000


class _BytesRead:
    """Counts the journal's bytes read until the progress bar exists, then hands them and every later
    count to it."""

    def __init__(self) -> None:
        self.total = 0
        self.sink: Callable[[int], None] | None = None

    def __call__(self, count: int) -> None:
        if self.sink is None:
            self.total += count
        else:
            self.sink(count)

    def hand_to(self, sink: Callable[[int], None]) -> None:
        sink(self.total)
        self.sink = sink


def _peek(reader: Iterator[bytes], to_first_at: bool) -> tuple[list[bytes], bool]:
    """Read lines from ``reader`` up to the first non-blank one or, ``to_first_at``, up to the first
    that carries an "at" (at most ``PEEK_LINES_MAX`` lines): the lines read, and whether the reader
    ended (they are the whole journal). They are applied first, then the rest of the same reader is
    streamed."""
    head: list[bytes] = []
    for line in reader:
        head.append(line)
        if len(head) >= PEEK_LINES_MAX or len(line) > LINE_BYTES_MAX:
            return head, False  # an over-long line fails where it is: its endless rest (/dev/zero) is never read
        if journal_first_at([line]) is not None or (not to_first_at and line.strip()):
            return head, False
    return head, True


def _file_size(stream: Any) -> int | None:
    """Size of a journal that is a regular file (None for a pipe or a terminal)."""
    try:
        info = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


@click.command(cls=OnceCommand)
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@pass_settings
def demo(settings: Settings, directory: Path | None) -> None:
    """Run a full investigation on the bundled example (BUG-20) in DIRECTORY.

    Default: ./ledger-demo (or -2, -3, … if taken). Shows a refund, duplicate
    evidence scoring zero, a failed action, a refused reservation, exhaustion,
    low-information abandonment and a rejection, then exports and verifies.
    """
    if settings.configs_given:
        raise click.UsageError(DEMO_TAKES_NO_CONFIG)
    printer = _TolerantPrinter()
    # finishes even if nobody reads the output
    # ledger.run_demo loads the demo (and verify) when called: the other commands start without them
    try:
        path, report, verified = ledger.run_demo(directory, echo=printer, actor=settings.actor)
    except KeyboardInterrupt as interrupt:
        placed = getattr(interrupt, "demo_case", None)
        if placed is None:
            raise  # nothing half-written remains: the usual line
        shown = shlex.quote(one_line(placed))
        warn(f"error: interrupted once the demo case was complete at {shown}; '{invoked_as()} verify {shown}' "
             "checks it (running the demo again there is refused: the folder is taken)")
        sys.exit(interrupts.exit_status())
    with Case.open(path) as opened:
        rows = opened.balances()
    printer.check()
    echo("")
    emit_rows(rows, BALANCE_COLUMNS, "table")
    echo("")
    shown = one_line(path)
    echo(f"exported {report.files_written} files to {shown}/analysis and {shown}/manifest.json")
    echo(f"verified: {verified.events} events, head seq {verified.head_seq} sha256 {verified.head_sha256}")
    prog = invoked_as()
    shown = shlex.quote(shown)
    echo(f"\nThe case is at {shown}. Try:\n  {prog} balances {shown}\n  {prog} actions {shown}\n"
         f"  {prog} sql {shown} \"SELECT * FROM case_status\"\n  {prog} verify {shown}")


def invoked_as() -> str:
    """How to run this ``ledger`` again from the same shell: ``ledger`` when that name on PATH is
    this program, else the path it was started by (``.venv/bin/ledger`` with no activated venv),
    or ``python -m ledger_cli``."""
    started = sys.argv[0] if sys.argv and sys.argv[0] else "ledger"
    if started.endswith(("__main__.py", "-c")):
        return f"{shlex.quote(sys.executable)} -m ledger_cli"
    found = shutil.which("ledger")
    if found and os.path.exists(started) and os.path.samefile(found, started):
        return "ledger"
    return shlex.quote(started) if os.sep in started else "ledger"


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
