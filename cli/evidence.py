"""``ledger evidence …``: run the reference router and store verified tool results."""

from __future__ import annotations

from typing import Any

import click

from ledger import EvidenceResult, parse_json

from ._common import AT, CASE, JSON, Settings, pass_settings
from ._output import echo, dumps, emit_result


@click.group()
def evidence() -> None:
    """Evidence store: router queries and verified tool results."""


def _read_json(handle: Any) -> Any:
    return parse_json(handle.read())


def _summary(result: EvidenceResult) -> list[str]:
    if not result.records:
        return ["nothing stored"]
    lines = [f"seq {result.seq}{' (reused: nothing written)' if result.reused else ''} -> {result.index_ref}"]
    for r in result.records:
        duplicate = f", duplicate of {r['duplicate_of']}" if r["duplicate_of"] else ""
        lines.append(f"{r['record_id']} {r['hypothesis_id']}/{r['action_id']} ({r['operation_id']}): "
                     f"novelty {r['novelty_score']}{duplicate}")
    return lines


@evidence.command("store")
@CASE
@click.argument("request", type=click.File("rb"))
@click.argument("reply", type=click.File("rb"))
@click.option("--iteration", "iteration_id", required=True, help="The batch's case-wide iteration id.")
@AT
@JSON
@pass_settings
def evidence_store(settings: Settings, case: str, request: Any, reply: Any, iteration_id: str,
                   at: str | None, as_json: bool) -> None:
    """Verify REPLY (JSON file, '-' for stdin) against a recomputation of REQUEST and publish it."""
    request_value, reply_value = _read_json(request), _read_json(reply)
    with settings.open(case) as opened:
        result = opened.evidence().store_tool_results(iteration_id, request_value, reply_value, at=at)
    emit_result(result.to_dict(), as_json, _summary(result))


@evidence.command("query")
@CASE
@click.argument("request", type=click.File("rb"))
@click.option("--iteration", "iteration_id", default="query", show_default=True,
              help="The batch's case-wide iteration id (needed with --store).")
@click.option("--store", is_flag=True, help="Also store the reply as verified evidence.")
@AT
@JSON
@pass_settings
def evidence_query(settings: Settings, case: str, request: Any, iteration_id: str, store: bool,
                   at: str | None, as_json: bool) -> None:
    """Run the reference router on REQUEST (JSON file, '-' for stdin) and print its reply."""
    request_value = _read_json(request)
    with settings.open(case) as opened:
        result = opened.evidence().query(iteration_id, request_value, store, at=at)
    if as_json or not store:
        echo(dumps(result.to_dict() if store else result.reply))
    else:
        emit_result(result.to_dict(), False, _summary(result))
