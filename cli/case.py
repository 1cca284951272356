"""``ledger init``, ``ledger revision open``, ``ledger state``: the case lifecycle."""

from __future__ import annotations

import json

import click

from ledger import Case

from ._common import OnceCommand, UsageGroup, AT, CASE, JSON, Integer, Settings, pass_settings
from ._output import emit_result, not_stored_by_the_ledger

@click.command(cls=OnceCommand)
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


@click.group(cls=UsageGroup)
def revision() -> None:
    """Open analysis revisions (rounds of hypotheses)."""


@revision.command("open")
@CASE
@click.option("--hypothesis", "statements", multiple=True, required=True, metavar="STATEMENT",
              help="A hypothesis statement; repeat for each (ids H1, H2, … follow this order).")
@click.option("--units", "--units-per-hypothesis", "units", type=Integer(),
              help="Units per hypothesis (default: the analysis config's).")
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


@click.command(cls=OnceCommand)
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
    # text as it is, anything else as JSON (null, not Python's None), as the budget readings print
    emit_result(status, as_json, [f"{k}: {v if isinstance(v, str) else json.dumps(v, default=not_stored_by_the_ledger)}"
                                  for k, v in status.items()])
