"""``ledger``: the command line of case-ledger (SPEC section 10).

Every command parses its arguments, calls one library function and renders the
result. :class:`LedgerGroup` is the single place that turns a ``LedgerError``
into ``error: CODE: message`` on stderr with exit status 1 (click exits 2 for
usage errors).
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any, Callable

import click

from ledger import AnalysisConfig, BudgetConfig, Case, LedgerError
from ledger.budget import BudgetResult
from ledger.errors import OUTPUT_ERROR
from ledger.paths import os_error
from ledger.canonical import parse_json
from ledger.demo import run_demo
from ledger.export import export_case, export_count, import_tree, read_manifest, verify_case
from ledger.journal import apply_journal, open_for_journal
from ledger.storage import LEDGER_FILE, Storage

from ._output import OutputError, dumps, echo, emit_result, emit_rows, unique_names

BALANCE_COLUMNS = ("revision", "hypothesis_id", "initial_units", "granted_units", "spent_units",
                   "rewarded_units", "remaining_units", "status", "terminal_reason", "pending_action_id",
                   "low_information_streak", "settled_actions", "failed_actions")
EVENT_COLUMNS = ("seq", "type", "revision", "created_at", "sha256", "parent_sha256")


def _silence_stdout() -> None:
    """Point a broken standard output at /dev/null so the interpreter's last flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (a test runner's buffer)
        pass


#: ``OSError`` numbers that, with no file name attached, come from writing standard output.
OUTPUT_ERRNOS = frozenset({errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EBADF})


def _output_failed(cause: OSError) -> None:
    """Report a standard output that refused the result (quietly for a reader that went away)."""
    _silence_stdout()
    if cause.errno != errno.EPIPE:
        click.echo(f"error: {OUTPUT_ERROR}: cannot print the result ({cause.strerror or cause}); anything the "
                   "command wrote to the ledger is committed: read it back with 'ledger events' or 'ledger state'",
                   err=True)


class LedgerGroup(click.Group):
    """Maps ``LedgerError`` to ``error: CODE: message`` and exit status 1, in one place."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        if sys.stdout is None:  # started with `>&-`: results would vanish, so nothing is run
            click.echo(f"error: {OUTPUT_ERROR}: standard output is closed; nothing was run", err=True)
            sys.exit(1)
        help_requested = "--help" in args
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
            ctx.meta["ledger.help_requested"] = help_requested
            return ctx
        except UnicodeError as exc:  # a global option path with no file-system name
            click.echo(f"error: INVALID_ARGUMENT: an argument cannot name a file: {exc}", err=True)
            sys.exit(1)
        except OSError as exc:  # --help or --version into a full or closed stdout
            _output_failed(exc)
            sys.exit(1)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LedgerError as exc:
            click.echo(f"error: {exc.code}: {exc.message}", err=True)
            ctx.exit(1)
        except OutputError as exc:
            _output_failed(exc.cause)
            ctx.exit(1)
        except OSError as exc:
            if exc.filename is None and exc.errno in OUTPUT_ERRNOS:  # click writing help or a prompt
                _output_failed(exc)
            else:  # a path the file system refuses (too long, under a file, no permission, read-only)
                refusal = os_error(exc, "the file system refused")
                click.echo(f"error: {refusal.code}: {refusal.message}", err=True)
            ctx.exit(1)
        except UnicodeError as exc:  # a path argument with no file-system name (a lone surrogate)
            click.echo(f"error: INVALID_ARGUMENT: an argument cannot name a file: {exc}", err=True)
            ctx.exit(1)
        except RuntimeError:
            if sys.stdin is not None:
                raise
            # click cannot open '-' when the process was started with stdin closed (`<&-`)
            click.echo("error: INVALID_ARGUMENT: '-' reads standard input, but standard input is closed", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("error: interrupted; nothing half-written remains, run the command again", err=True)
            ctx.exit(130)


class Settings:
    """Global options, loaded once per command: a named config file must be readable and
    valid for every command, reads included (``CONFIG_INVALID`` otherwise)."""

    def __init__(self, config: str | None, analysis_config: str | None, actor: str) -> None:
        self.actor = actor
        self.configs_given = config is not None or analysis_config is not None
        self._budget = BudgetConfig.load(config) if config is not None else None
        self._analysis = AnalysisConfig.load(analysis_config) if analysis_config is not None else AnalysisConfig()

    def budget_config(self) -> BudgetConfig | None:
        return self._budget

    def analysis(self) -> AnalysisConfig:
        return self._analysis

    def open(self, path: str) -> Case:
        return Case.open(path, analysis_config=self.analysis(), actor=self.actor)


pass_settings = click.make_pass_decorator(Settings)
CASE = click.argument("case", type=click.Path(file_okay=False, path_type=str))
AT = click.option("--at", metavar="RFC3339", help="Event time (UTC, e.g. 2026-01-05T10:00:00Z); default now.")
JSON = click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")


def table_format(as_json: bool, as_csv: bool) -> str:
    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv")
    return "json" if as_json else "csv" if as_csv else "table"


def table_options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option("--csv", "as_csv", is_flag=True, help="Print CSV with a header row.")(func)
    return click.option("--json", "as_json", is_flag=True, help="Print a JSON array of rows.")(func)


def progress_bar(total: int, label: str, *, stream: Any = None) -> Any:
    """A click progress bar when the output (``stream``, default stdout) is a terminal; else a no-op."""
    stream = stream or sys.stdout
    if stream.isatty():
        return click.progressbar(length=total, label=label, file=stream)
    return _NoBar()


class _NoBar:
    def __enter__(self) -> "_NoBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def update(self, n: int) -> None:
        return None


@click.group(cls=LedgerGroup)
@click.option("--config", type=click.Path(dir_okay=False), help="Budget policy TOML (default: the policy frozen in the case).")
@click.option("--analysis-config", type=click.Path(dir_okay=False), help="Analysis TOML: units, max hypotheses, storage, limits.")
@click.option("--actor", default="controller", show_default=True, help="Asserted identity recorded in every event.")
@click.version_option(package_name="case-ledger")
@click.pass_context
def main(ctx: click.Context, config: str | None, analysis_config: str | None, actor: str) -> None:
    """case-ledger: budget accounting and evidence locker for an automated bug investigator.

    Each case is a folder with one ledger.sqlite: an append-only, hash-chained
    history you can query with plain SQL, export as canonical JSON and verify.
    """
    for stream in (sys.stdout, sys.stderr):
        # paths are shown as the bytes they are, even when not UTF-8 (os.fsdecode's surrogates)
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    if ctx.meta.get("ledger.help_requested"):  # `ledger --config bad.toml verify --help`: help, nothing loaded
        config = analysis_config = None
    ctx.obj = Settings(config, analysis_config, actor)


# --- case lifecycle ------------------------------------------------------------------
@main.command()
@CASE
@click.option("--case-id", required=True, help="Case identity, e.g. BUG-20.")
@AT
@JSON
@pass_settings
def init(settings: Settings, case: str, case_id: str, at: str | None, as_json: bool) -> None:
    """Create a case package at CASE (the folder may already hold its inputs)."""
    with Case.create(case, case_id, analysis_config=settings.analysis(), actor=settings.actor, at=at) as opened:
        status = opened.status()
    emit_result(status, as_json, [f"created case {status['case_id']} at {case} (package {status['package_id']})"])


@main.group()
def revision() -> None:
    """Open analysis revisions (rounds of hypotheses)."""


@revision.command("open")
@CASE
@click.option("--hypothesis", "statements", multiple=True, required=True, metavar="STATEMENT",
              help="A hypothesis statement; repeat for each (ids H1, H2, … follow this order).")
@click.option("--units", type=int, help="Units per hypothesis (default: the analysis config's).")
@AT
@JSON
@pass_settings
def revision_open(settings: Settings, case: str, statements: tuple[str, ...], units: int | None,
                  at: str | None, as_json: bool) -> None:
    """Open revision 1, or reopen an evaluated/closed case as the next revision."""
    with settings.open(case) as opened:
        result = opened.open_revision([{"statement": s} for s in statements], units, at=at)
    lines = [f"revision {result.revision}: {result.case_state} (seq {result.seq}{', reused' if result.reused else ''})"]
    lines += [f"  {h['hypothesis_id']}: {h['statement']} ({h['allocation_units']} units)" for h in result.hypotheses or []]
    emit_result(result.to_dict(), as_json, lines)


@main.command()
@CASE
@click.argument("to", required=False, metavar="[NEW_STATE]")
@AT
@JSON
@pass_settings
def state(settings: Settings, case: str, to: str | None, at: str | None, as_json: bool) -> None:
    """Show the case status, or move the case to NEW_STATE.

    States: CREATED, GENERATING_HYPOTHESES, INVESTIGATING_HYPOTHESES, BLOCKED,
    EVALUATING, CLOSED (GENERATING_HYPOTHESES is reached with 'revision open').
    """
    with settings.open(case) as opened:
        if to is not None:
            result = opened.transition(to, at=at)
            emit_result(result.to_dict(), as_json,
                        [f"{result.case_state} (seq {result.seq}{', reused' if result.reused else ''})"])
            return
        if at is not None:
            raise click.UsageError("--at sets the time of a transition; give NEW_STATE or leave --at out")
        status = opened.status()
    emit_result(status, as_json, [f"{k}: {v}" for k, v in status.items()])


# --- budget -----------------------------------------------------------------------------
@main.group()
def budget() -> None:
    """Budget operations on hypothesis accounts (SPEC 6)."""


def _budget_summary(result: BudgetResult, *, read: bool = False) -> list[str]:
    if read:
        lines = [f"revision {result.revision} as of seq {result.seq} ({result.event_ref}); history checked"]
    else:
        lines = [f"seq {result.seq}{' (reused: nothing written)' if result.reused else ''} -> {result.event_ref}"]
    if result.action:
        a = result.action
        lines.append(f"action {a['hypothesis_id']}/{a['action_id']} {a['action']}: {a['status']}, cost {a['cost_units']}"
                     + (f", novelty {a['novelty_score']}" if a["novelty_score"] is not None else "")
                     + (f", refund {a['reward_units']}" if a["reward_units"] is not None else ""))
    for account in result.state.values():
        lines.append(f"{account['hypothesis_id']}: {account['status']}, {account['remaining_units']} units remaining"
                     + (f", pending {account['pending_action_id']}" if account["pending_action_id"] else ""))
    return lines


def _run_budget(settings: Settings, case: str, as_json: bool, call: Callable[[Any], BudgetResult], *,
                read: bool = False) -> None:
    with settings.open(case) as opened:
        result = call(opened.budget(settings.budget_config()))
    emit_result(result.to_dict(), as_json, _budget_summary(result, read=read))


@budget.command("initialize")
@CASE
@AT
@JSON
@pass_settings
def budget_initialize(settings: Settings, case: str, at: str | None, as_json: bool) -> None:
    """Open one account per hypothesis and freeze the policy (--config, else the previous one)."""
    _run_budget(settings, case, as_json, lambda b: b.initialize(at=at))


@budget.command("reserve")
@CASE
@click.argument("hypothesis")
@click.argument("action_id")
@click.argument("action")
@AT
@JSON
@pass_settings
def budget_reserve(settings: Settings, case: str, hypothesis: str, action_id: str, action: str,
                   at: str | None, as_json: bool) -> None:
    """Debit ACTION's cost from HYPOTHESIS before the tool runs."""
    _run_budget(settings, case, as_json, lambda b: b.reserve(hypothesis, action_id, action, at=at))


@budget.command("record")
@CASE
@click.argument("hypothesis")
@click.argument("action_id")
@click.option("--evidence", "evidence_text", metavar="JSON", help="The evidence as JSON text.")
@click.option("--evidence-file", type=click.File("rb"), help="Read the evidence JSON from a file ('-' for stdin).")
@click.option("--source-ref", "source_refs", multiple=True, metavar="PATH", help="A package file the evidence cites; repeatable.")
@AT
@JSON
@pass_settings
def budget_record(settings: Settings, case: str, hypothesis: str, action_id: str, evidence_text: str | None,
                  evidence_file: Any, source_refs: tuple[str, ...], at: str | None, as_json: bool) -> None:
    """Store the evidence an action returned (novelty is computed now, refund at settle)."""
    if (evidence_text is None) == (evidence_file is None):
        raise click.UsageError("give exactly one of --evidence and --evidence-file")
    evidence = parse_json(evidence_text if evidence_text is not None else evidence_file.read())
    _run_budget(settings, case, as_json,
                lambda b: b.record_result(hypothesis, action_id, evidence, list(source_refs), at=at))


@budget.command("settle")
@CASE
@click.argument("hypothesis")
@click.argument("action_id")
@click.option("--score", "semantic_score", type=int, required=True, help="Semantic score, an integer 0-100.")
@click.option("--reason", required=True, help="Why the score (non-blank).")
@AT
@JSON
@pass_settings
def budget_settle(settings: Settings, case: str, hypothesis: str, action_id: str, semantic_score: int,
                  reason: str, at: str | None, as_json: bool) -> None:
    """Close an assessed action and refund for new information."""
    _run_budget(settings, case, as_json, lambda b: b.settle(hypothesis, action_id, semantic_score, reason, at=at))


@budget.command("fail")
@CASE
@click.argument("hypothesis")
@click.argument("action_id")
@click.option("--reason", required=True, help="What went wrong (non-blank).")
@AT
@JSON
@pass_settings
def budget_fail(settings: Settings, case: str, hypothesis: str, action_id: str, reason: str,
                at: str | None, as_json: bool) -> None:
    """Close a pending action without refund (a low-information step)."""
    _run_budget(settings, case, as_json, lambda b: b.fail(hypothesis, action_id, reason, at=at))


@budget.command("reject")
@CASE
@click.argument("hypothesis")
@click.option("--reason", required=True, help="Why the hypothesis is rejected (non-blank).")
@AT
@JSON
@pass_settings
def budget_reject(settings: Settings, case: str, hypothesis: str, reason: str, at: str | None, as_json: bool) -> None:
    """Mark HYPOTHESIS rejected (terminal, no refund, nothing deleted)."""
    _run_budget(settings, case, as_json, lambda b: b.reject(hypothesis, reason, at=at))


@budget.command("snapshot")
@CASE
@JSON
@pass_settings
def budget_snapshot(settings: Settings, case: str, as_json: bool) -> None:
    """Validate the current revision's budget history and show every account (writes nothing)."""
    _run_budget(settings, case, as_json, lambda b: b.snapshot(), read=True)


# --- inspection -------------------------------------------------------------------------
@main.command()
@CASE
@click.option("--revision", "revision_number", type=int, help="Only this revision.")
@table_options
@pass_settings
def balances(settings: Settings, case: str, revision_number: int | None, as_json: bool, as_csv: bool) -> None:
    """The balances view: one row per revision and hypothesis."""
    fmt = table_format(as_json, as_csv)
    with settings.open(case) as opened:
        rows = [r for r in opened.balances() if revision_number is None or r["revision"] == revision_number]
    emit_rows(rows, BALANCE_COLUMNS, fmt)


@main.command()
@CASE
@table_options
@pass_settings
def actions(settings: Settings, case: str, as_json: bool, as_csv: bool) -> None:
    """The actions view: one row per reserved action, in reservation order."""
    fmt = table_format(as_json, as_csv)
    with settings.open(case) as opened:
        rows = opened.actions()
    emit_rows(rows, None if rows else ("revision", "hypothesis_id", "action_id"), fmt)


@main.command()
@CASE
@click.option("--since", type=click.IntRange(0, 2**53 - 1), default=0, help="Only events with seq greater than this.")
@click.option("--body", "with_body", is_flag=True, help="Include each event's canonical JSON body.")
@table_options
@pass_settings
def events(settings: Settings, case: str, since: int, with_body: bool, as_json: bool, as_csv: bool) -> None:
    """The hash chain: seq, type, revision, time, sha256 and parent of every event."""
    fmt = table_format(as_json, as_csv)
    columns = EVENT_COLUMNS + (("body",) if with_body else ())
    with settings.open(case) as opened:
        rows = opened.events(since, with_body=with_body)
    emit_rows(rows, columns, fmt)


@main.command()
@CASE
@click.argument("query")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0.001, 86_400), default=30, show_default=True,
              help="Seconds after which the query is stopped.")
@table_options
def sql(case: str, query: str, timeout_s: float, as_json: bool, as_csv: bool) -> None:
    """Run one read-only SQL QUERY on CASE's ledger.sqlite (writes are refused).

    Public views: balances, balances_recomputed, actions, evidence, case_status.
    """
    fmt = table_format(as_json, as_csv)
    path = Path(case) / LEDGER_FILE
    if not path.is_file():
        Case.open(case)  # raises the LEDGER_MISSING explanation
    columns, rows = Storage.readonly_query(path, query, timeout_ms=int(timeout_s * 1000))
    columns = unique_names(columns)  # `SELECT e1.seq, e2.seq …` keeps both values
    emit_rows([dict(zip(columns, row)) for row in rows], columns, fmt)


# --- export / import / verify -------------------------------------------------------------
@main.command()
@CASE
@JSON
@pass_settings
def export(settings: Settings, case: str, as_json: bool) -> None:
    """Write analysis/ and manifest.json as canonical JSON (incremental, idempotent)."""
    with settings.open(case) as opened:
        with progress_bar(export_count(opened), "exporting") as bar:
            report = export_case(opened, progress=bar.update)
    emit_result(report.to_dict(), as_json,
                [f"exported {case}: {report.files_written} files written, {report.files_unchanged} unchanged; "
                 f"head seq {report.manifest['head']['seq']}"])


@main.command("import")
@click.argument("source", metavar="DIR", type=click.Path(file_okay=False, exists=True, path_type=str))
@click.option("--to", "target", type=click.Path(file_okay=False, path_type=str),
              help="New case folder (default: SOURCE itself, when its ledger.sqlite was lost).")
@JSON
def import_command(source: str, target: str | None, as_json: bool) -> None:
    """Rebuild a case's ledger.sqlite from the exported package DIR and verify it."""
    manifest = read_manifest(Path(source))
    with progress_bar(manifest["head"]["seq"] if manifest else 0, "importing") as bar:
        report = import_tree(source, target, progress=bar.update)
    emit_result(report.to_dict(), as_json,
                [f"imported {report.events} events into {report.package_path}; verified, head seq {report.head_seq}"])


@main.command()
@CASE
@JSON
def verify(case: str, as_json: bool) -> None:
    """Recompute everything from the requests and check chain, rows, views and export."""
    with Case.open(case) as opened:
        total = opened.status()["package_generation"]
    with progress_bar(total, "verifying") as bar:
        report = verify_case(case, progress=bar.update)
    emit_result(report.to_dict(), as_json,
                [f"ok: {report.events} events, {report.contents} contents, head seq {report.head_seq} "
                 f"sha256 {report.head_sha256}"])


# --- journals and the demo -------------------------------------------------------------------
@main.command()
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
        lines = journal.read().split(b"\n")
        # stdout carries the result lines, so the bar goes to stderr, and only when stdout is piped
        with progress_bar(len(lines), "applying", stream=sys.stderr) if not sys.stdout.isatty() else _NoBar() as bar:
            for outcome in apply_journal(opened, lines, budget=manager, keep_going=keep_going,
                                         batch_size=batch_size):
                echo(dumps(outcome.to_dict()))
                failed = failed or not outcome.ok
                bar.update(1)
    finally:
        opened.close()
    if failed:
        sys.exit(1)


@main.command()
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


if __name__ == "__main__":  # pragma: no cover
    main()
