"""``ledger export``, ``import``, ``verify``: the case as canonical JSON files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ledger import (LedgerError, ManyReport, VerifyReport, case_folders, export_case, export_many,
                    import_tree, verify_case, verify_many)
from ledger.package_tools.export import ExportReport, export_count
from ledger.package_tools.manifest import read_manifest
from ledger.package_tools.many import left_out, named_again
from ledger.package_tools.anchors import parse_anchor
from ledger.ground.errors import quoted
from ledger.ground.workers import JOBS_MAX

from ._common import (OnceCommand, JSON, CaseFolder, IntegerRange, Settings, pass_settings, progress_bar,
                      read_only_rows, table_format)
from ._output import dumps, echo, emit_result, emit_rows, one_line, warn

CASES = click.argument("cases", metavar="CASE...", nargs=-1, required=True, type=CaseFolder())
ALL = click.option("--all", "all_in", is_flag=True,
                   help="Each CASE is a folder of cases: take every case folder directly inside it, or linked "
                        "there (one that lost its ledger.sqlite but keeps its export or side files is taken, and "
                        "fails, as does a folder this user may not read). A folder named like an import's or a "
                        "demo's build folder, a link that leads nowhere or loops, a folder holding an export's "
                        "analysis/ but nothing else of a case (no ledger.sqlite, side file or manifest.json) and a "
                        "second link to a case taken already are left out, each with a note, and counted in the "
                        "summary (--json lists them under left_out).")


def _jobs(help_text: str) -> Any:
    """The ``--jobs N`` option (1 to ``JOBS_MAX``; default: the cores this process may use)."""
    return click.option("--jobs", type=IntegerRange(1, JOBS_MAX), default=None, metavar="N", help=help_text)


JOBS = _jobs("Processes for several cases, this one included (default: the cores this process may use).")
VERIFY_JOBS = _jobs("Processes, this one included (default: the cores this process may use): cases side by side, "
                    "or one case's later events replayed by a second one.")


def _single(cases: tuple[str, ...], all_in: bool, jobs: int | None) -> str | None:
    """The one case of a plain single-case call (one CASE, no --all, no --jobs), else None."""
    return cases[0] if len(cases) == 1 and not all_in and jobs is None else None


def _case_line(outcome: dict[str, Any], done: str) -> str:
    """One case's line: ``ok CASE: …`` or ``FAILED CASE: CODE: message``."""
    if outcome["ok"]:
        return one_line(f"ok {outcome['case']}: {done.format(**outcome['report'])}")
    error = outcome["error"]
    return one_line(f"FAILED {outcome['case']}: {error['code']}: {error['message']}")


def _verify_notes(outcome: dict[str, Any]) -> list[str]:
    """What a verified case's report notes (a stale export, foreign objects…), as one case's verify prints it."""
    fields = {key: value for key, value in (outcome.get("report") or {}).items() if key != "ok"}
    return VerifyReport(**fields).notes() if fields else []


def _export_notes(outcome: dict[str, Any]) -> list[str]:
    """What an exported case's report notes (a stray file in analysis/), as one case's export prints it."""
    fields = outcome.get("report") or {}
    return ExportReport(**fields).notes() if fields else []


def _events_to_verify(case: str) -> int:
    """The progress bar's length: the newest event's seq, read without writing (verify writes nothing:
    no writer's open, which would migrate the schema or fold the log), or 0 when it cannot be read
    (verify then says why)."""
    try:
        with read_only_rows(case, "SELECT COALESCE(MAX(seq), 0) FROM events") as (_, rows):
            newest = next(rows, (0,))[0]
    except LedgerError:
        return 0
    return newest if type(newest) is int else 0


def _many(run: Any, cases: tuple[str, ...], all_in: bool, jobs: int | None, as_json: bool, verb: str,
          done: str, notes: Any = None, **options: Any) -> None:
    """Run ``run`` (``verify_many`` or ``export_many``) over the cases, print one line per case as it
    is ready and a summary (or one JSON object with --json); exit 1 when any case failed. ``notes``:
    a case's outcome → lines printed on stderr as ``note: CASE: …`` after its line."""
    try:
        folders = case_folders(cases) if all_in else list(cases)
    except LedgerError:  # a folder holding no case: what it holds that was left out is said first
        for path, why in left_out(cases) if all_in else ():
            warn(f"note: {path}: left out: {why}")
        raise
    passed_by = left_out(cases, folders) if all_in else named_again(cases)
    for path, why in passed_by:
        warn(f"note: {path}: left out: {why}")

    def print_case(outcome: dict[str, Any]) -> None:
        echo(_case_line(outcome, done))
        for line in notes(outcome) if notes is not None else ():
            warn(f"note: {outcome['case']}: {line}")
    report: ManyReport = run(folders, jobs=jobs, each=None if as_json else print_case, **options)
    if as_json:
        echo(dumps({**report.to_dict(), "left_out": [{"path": str(path), "why": why} for path, why in passed_by]}))
    else:  # what was left out is counted where the outcome is read, not only in the notes on stderr
        also = f"; {len(passed_by)} left out (see the notes)" if passed_by else ""
        echo(f"{verb} {len(report.cases)} case(s): {report.passed} ok, {report.failed} failed{also}")
    if report.failed:
        sys.exit(1)

@click.command(cls=OnceCommand)
@CASES
@JSON
@ALL
@JOBS
@pass_settings
def export(settings: Settings, cases: tuple[str, ...], as_json: bool, all_in: bool, jobs: int | None) -> None:
    """Write analysis/ and manifest.json as canonical JSON (incremental, idempotent).

    Several CASEs (or, with --all, the case folders inside each CASE) are
    exported over --jobs processes: one line per case (ok or FAILED
    with its error) and a summary; exit 1 when any case failed. A case
    named again by another path (a link) is taken once, with a note.
    """
    case = _single(cases, all_in, jobs)
    if case is None:
        _many(export_many, cases, all_in, jobs, as_json, "exported",
              "{files_written} files written, {files_unchanged} unchanged; head seq {manifest[head][seq]} sha256 "
              "{manifest[head][sha256]}", _export_notes,
              analysis_config=settings.analysis(), waiting=_export_wait_note)
        return
    with settings.open(case) as opened:
        with progress_bar(export_count(opened), "exporting") as bar:
            def waiting() -> None:
                if hasattr(bar, "render_progress"):  # a bar drawn on the terminal holds the line
                    click.echo("", err=True)
                warn(f"note: another export of {case} is running; waiting for it to end (up to an hour)")
            report = export_case(opened, progress=bar.update, waiting=waiting)
    emit_result(report.to_dict(), as_json,
                [f"exported {case}: {report.files_written} files written, {report.files_unchanged} unchanged; "
                 f"head seq {report.manifest['head']['seq']} sha256 {report.manifest['head']['sha256']}",
                 *report.notes()])


def _export_wait_note(case: str) -> None:
    """The note of a case among several whose export waits for another export of it: said by the
    process exporting it (a worker shares this command's stderr), as the wait begins."""
    warn(f"note: another export of {case} is running; its line waits for it to end (up to an hour)")


@click.command("import", cls=OnceCommand)
@click.argument("source", metavar="DIR", type=CaseFolder(
    give="the exported package's folder (the one holding manifest.json and analysis/; unpack an archive first)",
    exists=True))
@click.option("--to", "target", type=CaseFolder(),
              help="New case folder (default: DIR itself, when its ledger.sqlite was lost).")
@JSON
def import_command(source: str, target: str | None, as_json: bool) -> None:
    """Rebuild a case's ledger.sqlite from the exported package DIR and verify it."""
    try:  # only the progress bar's length: import_tree itself refuses what is wrong with the package
        manifest = read_manifest(Path(source))
    except LedgerError:
        manifest = None
    with progress_bar(manifest["head"]["seq"] if manifest else 0, "importing") as bar:
        report = import_tree(source, target, progress=bar.update)
    emit_result(report.to_dict(), as_json,
                [f"imported {report.events} events into {report.package_path}; verified, head seq {report.head_seq} "
                 f"sha256 {report.head_sha256}",
                 *report.notes()])  # what verify notes: inputs it could not check again, times ahead


FOREIGN_COLUMNS = ("type", "name", "table")


def _verify_summary(report: VerifyReport, failed_strict: bool, anchors: dict[int, str]) -> list[str]:
    """One case's verify lines: the counts and head, each anchor that held, then the report's notes."""
    return [f"{'FAILED --strict' if failed_strict else 'ok'}: {report.events} events, {report.contents} contents, "
            f"head seq {report.head_seq} sha256 {report.head_sha256}",
            *(f"anchor held: event {seq} sha256 {sha}" for seq, sha in sorted(anchors.items())), *report.notes()]


def _verify_result(report: VerifyReport, failure: LedgerError | None, anchors: dict[int, str]) -> dict:
    """One case's verify report as --json prints it: each anchor given held (else verify failed), as the
    text says; a --strict failure as ok false with its {code, message} (it has no details)."""
    result = report.to_dict()
    if anchors:
        result["anchors_held"] = [{"seq": seq, "sha256": sha} for seq, sha in sorted(anchors.items())]
    if failure is not None:
        result.update(ok=False, error=failure.to_dict())
    return result


def _anchor_option(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[int, str]:
    """``--anchor SEQ:SHA256`` (given any number of times) as ``{seq: sha256}``; a usage error when one
    is malformed or two name one seq with different hashes."""
    anchors: dict[int, str] = {}
    for value in values:
        try:
            seq, sha = parse_anchor(value)
        except LedgerError as exc:
            raise click.BadParameter(f"{exc.message}, got {quoted(value, 100)}") from None
        if anchors.setdefault(seq, sha) != sha:
            raise click.BadParameter(f"two anchors name seq {seq} with different hashes")
    return anchors


@click.command(cls=OnceCommand)
@CASES
@JSON
@ALL
@VERIFY_JOBS
@click.option("--strict", is_flag=True,
              help="Fail (exit 1) unless the export is complete and current (no manifest.json, a partial export or one behind the "
                   "ledger fail) and every stored tool result was recomputed from its input files "
                   "(STALE_GENERATION naming the files that changed since or cannot be read).")
@click.option("--anchor", "anchors", multiple=True, metavar="SEQ:SHA256", callback=_anchor_option,
              help="An event recorded elsewhere earlier (a head this command printed): fail unless the case "
                   "holds event SEQ with that sha256, so a history rewritten up to it with every hash "
                   "recomputed is caught. One CASE, without --all or --jobs; may be given more than once.")
@click.option("--table", "as_table", is_flag=True,
              help="Print the foreign objects as a table (the summary goes to stderr).")
@click.option("--nl", "as_nl", is_flag=True,
              help="Print the foreign objects as newline-delimited JSON (the summary goes to stderr).")
@click.option("--csv", "as_csv", is_flag=True,
              help="Print the foreign objects as CSV with a header row (the summary goes to stderr).")
@click.option("--tsv", "as_tsv", is_flag=True,
              help="Print the foreign objects as tab-separated values (the summary goes to stderr).")
def verify(cases: tuple[str, ...], as_json: bool, all_in: bool, jobs: int | None, strict: bool,
           anchors: dict[int, str], **formats: bool) -> None:
    """Recompute everything from the requests and check chain, rows, views and export.

    SQLite's own check of the file runs first (integrity_check): damaged
    pages, rows, or an index that disagrees with its table fail with
    INTEGRITY_ERROR naming what SQLite names.

    An export older than the ledger is reported as N events behind, a case
    never exported as not exported, exported files without manifest.json as a
    partial export (each an error only with --strict). Stored tool results
    whose input files changed since (or cannot be read now) are checked
    against their requests only and named in a note (STALE_GENERATION with
    --strict). A case that fails --strict is printed as "FAILED --strict"
    (with --json, "ok" false and its "error"), never as ok. Event times ahead of
    this machine's clock are reported, never an error. Views, indexes, tables and full-text tables you added
    to ledger.sqlite are listed as foreign objects and left alone; a trigger on
    a ledger table or a changed ledger object fails with INTEGRITY_ERROR.
    --json prints the whole report as one object, with "anchors_held" ([{"seq", "sha256"}]) when
    --anchor was given (a case that fails to verify: {"ok": false, "error": {...}}, and the error
    on stderr); --table, --nl, --csv or --tsv
    print the foreign objects one row each (columns type, name, table) on
    stdout and the summary on stderr.

    One CASE of 20,000 events or more is verified by two processes at once
    when this process may use two or more cores, or with --jobs 2 or more (the
    second replays the later events; --jobs 1 keeps it to one); the outcome is
    the same as with one.

    Several CASEs (or, with --all, the case folders inside each CASE) are
    verified over --jobs processes: one line per case (ok or FAILED
    with its error; with --strict a case whose export is not current, or
    whose results could not all be recomputed from their files, fails)
    and a summary, each case's notes on stderr; exit 1 when any case failed.
    A case named again by another path (a link) is taken once, with a note.
    One CASE given with --jobs is reported in that form too, so a script
    passing --jobs gets the same output for one case as for several.
    """
    case = _single(cases, all_in, jobs)
    if case is None:
        if any(formats.values()):
            raise click.UsageError("--table, --nl, --csv and --tsv list one case's foreign objects: give one CASE")
        if anchors:
            raise click.UsageError("--anchor names an event of one case: give one CASE (and no --all or --jobs)")
        _many(verify_many, cases, all_in, jobs, as_json, "verified",
              "{events} events, {contents} contents, head seq {head_seq} sha256 {head_sha256}", _verify_notes,
              strict=strict)
        return
    fmt = table_format(as_json=as_json, **formats) if any(formats.values()) or as_json else None
    try:  # a large case: two cores (jobs=None)
        with progress_bar(_events_to_verify(case), "verifying") as bar:
            report = verify_case(case, progress=bar.update, strict=strict, jobs=None, anchors=anchors)
    except LedgerError as exc:
        if as_json:  # a script reading stdout learns of the failure as of a --strict one
            echo(dumps({"ok": False, "error": exc.to_dict()}))
        raise
    failure = report.strict_failure() if strict else None
    # a case that fails --strict is never printed as ok, in either form
    summary = _verify_summary(report, failure is not None, anchors)
    result = _verify_result(report, failure, anchors)
    if fmt in (None, "json"):
        emit_result(result, as_json, summary)
    else:
        emit_rows(report.foreign_objects, FOREIGN_COLUMNS, fmt)
        for line in summary:
            warn(line)
    if failure is not None:
        warn(f"error: {failure.code}: {failure.message}")
        sys.exit(1)
