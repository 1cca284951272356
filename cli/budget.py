"""``ledger budget …``: budget operations on hypothesis accounts."""

from __future__ import annotations

import json
from typing import Any, Callable

import click

from ledger import BudgetResult, GateReading, LedgerError
from ledger.ground.canonical import parse_json

from ._common import UsageGroup, AT, CASE, JSON, Integer, RegularFile, Settings, pass_settings, read_bounded
from ._output import emit_result, warn

@click.group(cls=UsageGroup)
def budget() -> None:
    """Budget operations on hypothesis accounts: initialize, reserve, record, settle, fail, reject."""


def _budget_summary(result: BudgetResult, *, read: bool = False) -> list[str]:
    if read:
        lines = [f"revision {result.revision} as of its newest budget event, seq {result.seq} "
                 f"(exports to {result.event_ref}); its budget events and the balances view checked "
                 "('ledger verify' checks everything)"]
    else:
        lines = [f"seq {result.seq}{' (reused: nothing written)' if result.reused else ''} (exports to {result.event_ref})"]
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
                read: bool = False) -> BudgetResult:
    with settings.open(case) as opened:
        manager = opened.budget(settings.budget_config())
        result = call(manager)
        changed = manager.policy_changed()
    emit_result(result.to_dict(), as_json, _budget_summary(result, read=read))
    _warn_if_policy_changed(changed, result.revision)
    return result


def _warn_if_policy_changed(changed: bool, revision: int) -> None:
    """A read (or a repeated initialize) with a --config other than the frozen policy succeeds on
    the frozen one: say so, as every change under that --config will be refused."""
    if changed:
        warn(f"warning: --config is not the policy frozen for revision {revision}: this used the frozen one, and "
             "changes under this --config are refused (BUDGET_POLICY_CHANGED)")


@budget.command("initialize")
@CASE
@AT
@JSON
@pass_settings
def budget_initialize(settings: Settings, case: str, at: str | None, as_json: bool) -> None:
    """Open one account per hypothesis and freeze the policy.

    The policy is --config, else the previous revision's, else the built-in defaults (every
    action costs 10 units; the example policy is config/budget.example.toml in the repository).
    """
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
@click.option("--evidence-file", type=RegularFile(), help="Read the evidence JSON from a file ('-' for stdin).")
@click.option("--source-ref", "source_refs", multiple=True, metavar="PATH", help="A package file the evidence cites; repeatable.")
@click.option("--cost-usd-millicents", type=Integer(), help="External money the tool reported (1/1000 US cent).")
@AT
@JSON
@pass_settings
def budget_record(settings: Settings, case: str, hypothesis: str, action_id: str, evidence_text: str | None,
                  evidence_file: Any, source_refs: tuple[str, ...], cost_usd_millicents: int | None,
                  at: str | None, as_json: bool) -> None:
    """Store the evidence an action returned (novelty is computed now, refund at settle).

    Evidence that is not valid JSON is INVALID_JSON naming the option (and the file):
    '--evidence-file (ev.json): not valid JSON: ...'.
    """
    if (evidence_text is None) == (evidence_file is None):
        raise click.UsageError("give exactly one of --evidence and --evidence-file")
    evidence = _evidence_json(evidence_text, evidence_file, settings)
    _run_budget(settings, case, as_json,
                lambda b: b.record_result(hypothesis, action_id, evidence, list(source_refs),
                                          cost_usd_millicents=cost_usd_millicents, at=at))


def _evidence_json(text: str | None, handle: Any, settings: Settings) -> Any:
    """--evidence or --evidence-file as JSON; ``INVALID_JSON`` names the option (and the file).
    The file is read up to ``evidence_payload_bytes_max`` plus ``event_bytes_max`` (room for the
    whitespace the canonical payload drops): ``LIMIT_REACHED`` past that, an endless pipe never read whole."""
    name = getattr(handle, "name", None)
    where = "--evidence" if text is not None else \
        f"--evidence-file ({'standard input' if name in (None, '<stdin>', 0) else name})"
    if text is None:
        limits = settings.analysis().limits
        text = read_bounded(handle, limits["evidence_payload_bytes_max"] + limits["event_bytes_max"],
                            "evidence_payload_bytes_max", where, "evidence_payload_bytes_max + event_bytes_max")
    try:
        return parse_json(text)
    except LedgerError as exc:
        raise LedgerError(exc.code, f"{where}: {exc.message}", **exc.details) from None


@budget.command("record-evidence")
@CASE
@click.argument("hypothesis")
@click.argument("action_id")
@click.argument("record_id")
@AT
@JSON
@pass_settings
def budget_record_evidence(settings: Settings, case: str, hypothesis: str, action_id: str, record_id: str,
                           at: str | None, as_json: bool) -> None:
    """Feed evidence record RECORD_ID (E000001…) to a reserved action (its novelty caps the refund)."""
    _run_budget(settings, case, as_json, lambda b: b.record_evidence(hypothesis, action_id, record_id, at=at))


@budget.command("settle")
@CASE
@click.argument("hypothesis")
@click.argument("action_id")
@click.option("--score", "--semantic-score", "semantic_score", type=Integer(), required=True,
              help="Semantic score, an integer 0-100 (semantic_score in journals and Python).")
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


@budget.command("grant")
@CASE
@click.argument("hypothesis")
@click.argument("units", type=Integer())
@click.option("--reason", required=True, help="Why the units are granted (non-blank).")
@click.option("--grant-id", required=True, help="Names this grant; repeating it with the same inputs writes nothing.")
@AT
@JSON
@pass_settings
def budget_grant(settings: Settings, case: str, hypothesis: str, units: int, reason: str, grant_id: str,
                 at: str | None, as_json: bool) -> None:
    """Add UNITS to HYPOTHESIS's account, as --actor (only the actor that initialized the budget may).

    An account that ended (exhausted, abandoned, rejected) gets the units but
    stays ended: it takes no more actions (said in a note on stderr).
    """
    result = _run_budget(settings, case, as_json,
                         lambda b: b.grant(hypothesis, units, settings.actor, reason, grant_id, at=at))
    account = result.state.get(hypothesis) or {}
    if account.get("terminal_reason") is not None and not result.reused:
        warn(f"note: {hypothesis} is {account['status']} ({account['terminal_reason']}): the units are added, but an "
             "account that ended takes no more actions (its status stays)")


def _run_read(settings: Settings, case: str, as_json: bool, call: Callable[[Any], GateReading],
              refused: str = "") -> None:
    """Print a reading; its ``refusal`` (check: not allowed; advice: not investigable) as a last line
    ``<refused>: CODE: message`` for people, and on stderr as a note with --json (whose object keeps
    the reading's keys only); the reading's notes on the action's price before it."""
    with settings.open(case) as opened:
        manager = opened.budget(settings.budget_config())
        reading = call(manager)
        changed, revision = manager.policy_changed(), opened.status()["analysis_revision"]
    for note in reading.notes:
        warn(f"note: {note}")
    why = [f"{refused}: {reading.refusal}"] if refused and reading.refusal is not None else []
    emit_result(reading.to_dict(), as_json,
                [f"{key}: {_plain(value)}" for key, value in reading.to_dict().items()] + why)
    if as_json and why:
        warn(f"note: {why[0]}")
    _warn_if_policy_changed(changed, revision)


def _plain(value: Any) -> str:
    """A reading's value as people read it: text as it is, anything else as JSON (true, null, {...})."""
    return value if isinstance(value, str) else json.dumps(value)


@budget.command("check")
@CASE
@click.argument("hypothesis")
@click.argument("action")
@AT
@JSON
@pass_settings
def budget_check(settings: Settings, case: str, hypothesis: str, action: str, at: str | None, as_json: bool) -> None:
    """Would ACTION fit now? allowed, cost, remaining, pct_remaining, tier, scarcity_bps (writes nothing).

    When it would not, a last line (on stderr with --json) says why: the refusal reserving it would
    meet now, e.g. LIMIT_EXCEEDED naming the limit's scope, dimension and figures. The exit status
    is 0 either way (the answer is the allowed line; a script reads it, e.g. from --json); 1 only
    when the question cannot be answered (an unknown hypothesis, no case).
    """
    _run_read(settings, case, as_json, lambda b: b.check(hypothesis, action, at=at), "not allowed")


@budget.command("advice")
@CASE
@click.argument("hypothesis")
@AT
@JSON
@pass_settings
def budget_advice(settings: Settings, case: str, hypothesis: str, at: str | None, as_json: bool) -> None:
    """What an agent needs before its next action on HYPOTHESIS: status, investigable, remaining units,
    actions and time by the tightest limit, tier, scarcity_bps (writes nothing).

    When the account is not investigable, a last line (on stderr with --json) says why: what
    reserving the policy's cheapest action would meet now (a pending action, a used-up limit, ...).
    """
    _run_read(settings, case, as_json, lambda b: b.advice(hypothesis, at=at), "not investigable")


@budget.command("price")
@CASE
@click.argument("hypothesis")
@click.argument("action")
@JSON
@pass_settings
def budget_price(settings: Settings, case: str, hypothesis: str, action: str, as_json: bool) -> None:
    """The advisory price signal of ACTION: cost, resource_cost, scarcity_bps (writes nothing)."""
    _run_read(settings, case, as_json, lambda b: b.price_signal(hypothesis, action))


@budget.command("remaining")
@CASE
@click.argument("hypothesis")
@JSON
@pass_settings
def budget_remaining(settings: Settings, case: str, hypothesis: str, as_json: bool) -> None:
    """HYPOTHESIS's budget, spent, remaining and pct_remaining (writes nothing).

    budget is initial plus granted units; spent is net of refunds (the balances view's spent_units
    minus rewarded_units), so spent + remaining = budget."""
    _run_read(settings, case, as_json, lambda b: b.remaining(hypothesis))
