"""``ledger evidence …``: run the reference router and store verified tool results."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from typing import Any

import click

from ledger import AnalysisConfig, BudgetResult, EvidenceResult, FeedbackResult, LedgerError
from ledger.ground.canonical import parse_json
from ledger.ground.descriptors import open_to_read
from ledger.ground.errors import limit_reached

from ._common import AT, CASE, JSON, LinkAwarePath, RegularFile, Settings, UsageGroup, pass_settings, read_bounded
from ._output import echo, dumps, emit_result


@click.group(cls=UsageGroup)
def evidence() -> None:
    """Evidence store: router queries, verified tool results, tests and their feedback."""


ATTACHMENTS_MAX = 64


def _read_json(handle: Any, settings: Settings | None, argument: str) -> Any:
    """The ``argument`` (REQUEST or REPLY) file, read up to ``evidence_content_bytes_max`` plus
    ``event_bytes_max``; ``INVALID_JSON`` names the argument and the file."""
    limits = (settings.analysis() if settings else AnalysisConfig()).limits
    limit = limits["evidence_content_bytes_max"] + limits["event_bytes_max"]
    name = getattr(handle, "name", None)
    name = "standard input" if name in (None, "<stdin>", 0) else name
    data = read_bounded(handle, limit, "evidence_content_bytes_max", f"{argument} {name}",
                        "evidence_content_bytes_max + event_bytes_max")
    try:
        return parse_json(data)
    except LedgerError as exc:
        raise LedgerError(exc.code, f"{argument} ({name}): {exc.message}", **exc.details) from None


def _summary(result: EvidenceResult) -> list[str]:
    if not result.records:
        return ["nothing stored"]
    reused = " (reused: nothing written)" if result.reused else ""
    lines = [f"batch stored from seq {result.seq}{reused}; its index exports to {result.index_ref}"]
    for r in result.records:
        duplicate = f", duplicate of {r['duplicate_of']}" if r["duplicate_of"] else ""
        lines.append(f"{r['record_id']} {r['hypothesis_id']}/{r['action_id']} ({r['operation_id']}): "
                     f"novelty {r['novelty_score']}{duplicate}")
    return lines


@evidence.command("store")
@CASE
@click.argument("request", type=RegularFile())
@click.argument("reply", type=RegularFile())
@click.option("--iteration", "iteration_id", required=True, help="The batch's case-wide iteration id.")
@AT
@JSON
@pass_settings
def evidence_store(settings: Settings, case: str, request: Any, reply: Any, iteration_id: str,
                   at: str | None, as_json: bool) -> None:
    """Verify REPLY (JSON file, '-' for stdin) against a recomputation of REQUEST and publish it.

    Standard input can be read once: '-' for both REQUEST and REPLY is a usage error (exit 2). A
    file that is not valid JSON is INVALID_JSON naming the argument and the file (REPLY
    (reply.json): ...).
    """
    if request is reply:  # click hands out one standard input for both '-'
        raise click.UsageError("REQUEST and REPLY cannot both be '-': standard input can be read only once; "
                               "give at least one of them as a file")
    request_value, reply_value = _read_json(request, settings, "REQUEST"), _read_json(reply, settings, "REPLY")
    with settings.open(case) as opened:
        result = opened.evidence().store_tool_results(iteration_id, request_value, reply_value, at=at)
    emit_result(result.to_dict(), as_json, _summary(result))


@evidence.command("query")
@CASE
@click.argument("request", type=RegularFile())
@click.option("--iteration", "iteration_id", default="query", show_default=True,
              help="The batch's case-wide iteration id: with --store, give each stored batch its own "
                   "(the default serves one).")
@click.option("--store", is_flag=True, help="Also store the reply as verified evidence.")
@AT
@JSON
@pass_settings
def evidence_query(settings: Settings, case: str, request: Any, iteration_id: str, store: bool,
                   at: str | None, as_json: bool) -> None:
    """Run the reference router on REQUEST (JSON file, '-' for stdin) and print its reply."""
    request_value = _read_json(request, settings, "REQUEST")
    with settings.open(case) as opened:
        result = opened.evidence().query(iteration_id, request_value, store, at=at)
    if as_json or not store:
        echo(dumps(result.to_dict() if store else result.reply))
    else:
        emit_result(result.to_dict(), False, _summary(result))


@evidence.command("request-test")
@CASE
@click.argument("hypothesis")
@click.argument("action_id")
@click.argument("kind", type=click.Choice(["human", "automated"]))
@click.argument("operation_id")
@AT
@JSON
@pass_settings
def evidence_request_test(settings: Settings, case: str, hypothesis: str, action_id: str, kind: str,
                          operation_id: str, at: str | None, as_json: bool) -> None:
    """Reserve an external test (test.human or test.automated, priced by test_costs) bound to OPERATION_ID."""
    with settings.open(case) as opened:
        result: BudgetResult = opened.budget(settings.budget_config()).request_test(
            hypothesis, action_id, kind, operation_id, at=at)
    a = result.action or {}
    emit_result(result.to_dict(), as_json, [f"seq {result.seq}{' (reused: nothing written)' if result.reused else ''}"
                                            f" (exports to {result.event_ref})",
                                            f"test {hypothesis}/{action_id} {a.get('action')}: {a.get('status')}, "
                                            f"cost {a.get('cost_units')}, operation {operation_id}"])


@evidence.group("feedback", cls=UsageGroup)
def feedback() -> None:
    """Replies to requested tests: submit a draft, confirm it, store it as evidence."""


def _feedback_summary(result: FeedbackResult) -> list[str]:
    return [f"seq {result.seq}{' (reused: nothing written)' if result.reused else ''} (exports to {result.event_ref})",
            f"{result.feedback_id} for {result.operation_id}: {'confirmed' if result.confirmed else 'draft'}; "
            f"case {result.state}"]


def _attachments(paths: tuple[Path, ...], limit: int) -> dict[str, Any]:
    """``{name: text or {"base64": …}}`` of the attached files, after the cheap checks on all of
    them: at most 64, each a regular file of at most ``limit`` bytes (``INVALID_ARGUMENT``,
    ``LIMIT_REACHED`` naming ``evidence_artifact_bytes_max``)."""
    if len(paths) > ATTACHMENTS_MAX:
        raise LedgerError("INVALID_ARGUMENT", f"at most {ATTACHMENTS_MAX} attachments, got {len(paths)}")
    by_name: dict[str, list[Path]] = {}
    for path in paths:
        by_name.setdefault(path.name, []).append(path)
    for name, same in by_name.items():
        if len(same) > 1:  # an attachment is kept under its file name: one would silently replace the other
            raise LedgerError("INVALID_ARGUMENT", f"attachments {', '.join(map(str, same))} share the name {name}; "
                              "give each a distinct file name (copy or rename one)", attachment=name)
    for path in paths:
        try:
            info = os.stat(path)
        except OSError as exc:
            raise LedgerError("INVALID_ARGUMENT", f"cannot read attachment {path}: {exc.strerror}") from None
        if not stat.S_ISREG(info.st_mode):
            raise LedgerError("INVALID_ARGUMENT", f"attachment {path} is not a regular file")
        if info.st_size > limit:
            raise limit_reached("evidence_artifact_bytes_max", f"attachment {path} is larger than "
                                f"evidence_artifact_bytes_max = {limit} bytes")
    return {path.name: _attachment(path, limit) for path in paths}


def _attachment(path: Path, limit: int) -> Any:
    try:
        with open_to_read(path) as handle:  # the ledger itself, attached, keeps its locks
            data = read_bounded(handle, limit, "evidence_artifact_bytes_max", f"attachment {path}")
    except OSError as exc:
        raise LedgerError("INVALID_ARGUMENT", f"cannot read attachment {path}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


@feedback.command("submit")
@CASE
@click.argument("operation_id")
@click.argument("reply", type=RegularFile())
@click.option("--attach", "attach", multiple=True, type=LinkAwarePath(exists=True, dir_okay=False, path_type=Path),
              help="A file to attach under its name (UTF-8 text as is, other bytes as base64); repeatable; "
                   "two files with the same name are refused.")
@AT
@JSON
@pass_settings
def feedback_submit(settings: Settings, case: str, operation_id: str, reply: Any, attach: tuple[Path, ...],
                    at: str | None, as_json: bool) -> None:
    """Store a draft REPLY (JSON file, '-' for stdin: {"status": "passed"|"failed"|"unable_to_test",
    "details": ...}) to the test of OPERATION_ID; a draft is not evidence."""
    reply_value = _read_json(reply, settings, "REPLY")
    attachments = _attachments(attach, settings.analysis().limits["evidence_artifact_bytes_max"])
    with settings.open(case) as opened:
        result = opened.evidence().submit_feedback(operation_id, reply_value, attachments, at=at)
    emit_result(result.to_dict(), as_json, _feedback_summary(result))


@feedback.command("confirm")
@CASE
@click.argument("feedback_id")
@AT
@JSON
@pass_settings
def feedback_confirm(settings: Settings, case: str, feedback_id: str, at: str | None, as_json: bool) -> None:
    """Confirm draft FEEDBACK_ID; a BLOCKED case resumes INVESTIGATING_HYPOTHESES."""
    with settings.open(case) as opened:
        result = opened.evidence().confirm_feedback(feedback_id, at=at)
    emit_result(result.to_dict(), as_json, _feedback_summary(result))


@feedback.command("store")
@CASE
@click.argument("operation_id")
@click.argument("feedback_id", required=False)
@AT
@JSON
@pass_settings
def feedback_store(settings: Settings, case: str, operation_id: str, feedback_id: str | None, at: str | None,
                   as_json: bool) -> None:
    """Publish confirmed FEEDBACK_ID (default: the test's confirmed draft) as an evidence record bound to
    the test of OPERATION_ID.

    'ledger budget record-evidence' then feeds the record to the test's action, which can then be
    settled.
    """
    with settings.open(case) as opened:
        result = opened.evidence().store_feedback(operation_id, feedback_id, at=at)
    emit_result(result.to_dict(), as_json, _summary(result))
