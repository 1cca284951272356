"""``ledger scope …``: scoped limits (establish, request-increase); the global --actor is the caller."""

from __future__ import annotations

import click

from ledger import ScopeResult
from ledger.ground.errors import repr_shown

from ._common import UsageGroup, AT, CASE, JSON, Integer, Settings, decimal, pass_settings
from ._output import emit_result


def _limits(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, int] | None:
    """``DIMENSION=N`` pairs into a dict (usage error for anything else; the library checks names and ranges)."""
    if not values:
        return None
    limits: dict[str, int] = {}
    for value in values:
        name, sep, number = value.partition("=")
        if not sep or not name.strip() or not number.strip() or not decimal(number):
            raise click.BadParameter(f"{repr_shown(value, 60)} is not DIMENSION=INTEGER (e.g. units=100; ASCII digits, "
                                     "an optional leading -, spaces around them aside)")
        amount = Integer().convert(number, param, ctx)  # a usage error past the digits Python reads, as elsewhere
        if name.strip() in limits:
            raise click.BadParameter(f"{name.strip()!r} is given twice; give each dimension once")
        limits[name.strip()] = amount
    return limits


@click.group(cls=UsageGroup)
def scope() -> None:
    """Limits on the whole case, a revision or one hypothesis (units, actions, duration_ms,
    cost_usd_millicents). Scopes are named case, revision:N and hypothesis:N/Hk."""


def _summary(result: ScopeResult) -> list[str]:
    lines = [f"seq {result.seq}{' (reused: nothing written)' if result.reused else ''} (exports to {result.event_ref})"
             + (f" (+ {', '.join(result.events[1:])})" if len(result.events) > 1 else "")]
    for row in result.usage:
        warn = "never warns" if row["warning_bps"] == 10_000 else f"warn at {row['warning_bps'] / 100:g}%"
        lines.append(f"{result.scope} {row['dimension']}: {row['consumed']} of {row['declared']} used, "
                     f"{row['remaining']} remaining ({warn}, then {row['on_exhausted']})")
    return lines


@scope.command("establish")
@CASE
@click.argument("scope_name", metavar="SCOPE")
@click.option("--limit", "limits", multiple=True, callback=_limits, required=True, metavar="DIM=N",
              help="A limit, e.g. units=100 or actions=20; repeatable.")
@click.option("--delegate", metavar="NAME", help="The bounded agent the limits are for.")
@click.option("--delegate-limit", "delegate_limits", multiple=True, callback=_limits, metavar="DIM=N",
              help="The delegate's own proposal; the stricter of both applies. Repeatable.")
@click.option("--warning-ratio", default="0.8", show_default=True,
              help="Warn once when this share of a limit is used (0-1, at most 4 decimals; 1 never warns).")
@click.option("--on-exhausted", default="block_action", show_default=True,
              help="block_action, task_failed or scope_cancelled.")
@click.option("--causation-seq", type=Integer(), help="To change limits: the seq of the previous establishment.")
@AT
@JSON
@pass_settings
def scope_establish(settings: Settings, case: str, scope_name: str, limits: dict[str, int],
                    delegate: str | None, delegate_limits: dict[str, int] | None, warning_ratio: str,
                    on_exhausted: str, causation_seq: int | None, at: str | None, as_json: bool) -> None:
    """Set SCOPE's limits as --actor (the issuer), or change them (same issuer, --causation-seq)."""
    with settings.open(case) as opened:
        result = opened.scopes().establish(scope_name, limits, settings.actor, delegate_limits, warning_ratio,
                                           on_exhausted, causation_seq, delegate=delegate, at=at)
    emit_result(result.to_dict(), as_json, _summary(result))


@scope.command("request-increase")
@CASE
@click.argument("scope_name", metavar="SCOPE")
@click.argument("dimension")
@click.argument("amount", type=Integer())
@click.option("--reason", required=True, help="Why more is needed (non-blank).")
@AT
@JSON
@pass_settings
def scope_request_increase(settings: Settings, case: str, scope_name: str, dimension: str, amount: int,
                           reason: str, at: str | None, as_json: bool) -> None:
    """Ask the issuer for AMOUNT more of DIMENSION in SCOPE, as --actor (records a request; changes nothing)."""
    with settings.open(case) as opened:
        result = opened.scopes().request_increase(scope_name, dimension, amount, settings.actor, reason, at=at)
    emit_result(result.to_dict(), as_json, _summary(result))
