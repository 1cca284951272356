"""Scoped limits and authority (docs/scopes.md): the Python API of ``establish`` and ``request_increase``.

:class:`ScopeManager` (``case.scopes()``) checks the shape of each call and runs
the rule of :mod:`ledger.rules.scopes` in one ``BEGIN IMMEDIATE`` transaction,
like every other operation. Enforcement itself happens inside ``reserve``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..ground.arguments import NotCopied, plain_public_arguments
from ..ground.errors import refuses_unfit_calls_of
from ..rules import scopes as rules
from .session import Ran, Session
from ..storage.sqlite_file import translate_sqlite_errors


@refuses_unfit_calls_of
@dataclass(frozen=True)
class ScopeResult:
    """What ``establish`` and ``request_increase`` return.

    ``seq``/``event_ref``: the operation's event (the original one when ``reused``);
    ``events``: the types of the events written (``scope.established`` may be followed by
    ``limit.approaching``); ``usage``: the scope's ``scope_usage`` rows now (``declared``,
    ``consumed``, ``remaining`` per dimension, integers).
    """

    package_path: str
    scope: str
    seq: int
    event_ref: str
    reused: bool
    events: list[str] = field(default_factory=list)
    usage: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"package_path": self.package_path, "scope": self.scope, "seq": self.seq,
                "event_ref": self.event_ref, "reused": self.reused, "events": list(self.events),
                "usage": [dict(row) for row in self.usage]}


@plain_public_arguments
class ScopeManager(NotCopied):
    """Limits on the scopes ``case``, ``revision:<n>`` and ``hypothesis:<n>/<Hk>`` of one case."""

    def __init__(self, session: Session, package_path: Path) -> None:
        self._session = session
        self.package_path = package_path

    def _bound_to_a_ledger(self) -> bool:
        return isinstance(self._session, Session)

    def establish(self, scope: str, limits: Mapping[str, int], issuer: str, delegate_limits: Mapping[str, int] | None = None,
                  warning_ratio: Any = 0.8, on_exhausted: str = "block_action", causation_seq: int | None = None,
                  *, delegate: str | None = None, at: str | None = None) -> ScopeResult:
        """Set a scope's limits, or change them (by the original ``issuer``, with ``causation_seq`` = the
        ``seq`` of the previous establishment).

        ``limits`` maps ``units``, ``actions``, ``duration_ms``, ``cost_usd_millicents`` to integers ≥ 0;
        ``delegate_limits`` is the bounded agent's (``delegate``) proposal: the effective limit is the
        smaller of the two per dimension. ``warning_ratio`` 0–1 with at most four decimals (held as basis
        points; 1 never warns, 0 warns at the first consumption). ``on_exhausted``: ``block_action``,
        ``task_failed`` or ``scope_cancelled``. Errors: ``INVALID_CAPABILITY`` (``ignore`` or any other
        ``on_exhausted``), ``INVALID_ARGUMENT``, ``INVALID_ID``, ``OPERATION_CONFLICT``, ``NOT_INITIALIZED``,
        ``UNKNOWN_HYPOTHESIS``, ``AUTHORITY_DENIED`` (not the revision's or the scope's issuer),
        ``INVALID_ARGUMENT`` (a wrong ``causation_seq``).
        """
        request = rules.shape_establish(scope, limits, issuer, delegate, delegate_limits,
                                        on_exhausted=on_exhausted, causation_seq=causation_seq,
                                        warning_ratio=warning_ratio)
        return self._result(request["scope"], self._session.run("establish", request, at=at))

    def request_increase(self, scope: str, dimension: str, amount: int, requester: str, reason: str,
                         *, at: str | None = None) -> ScopeResult:
        """Record that ``requester`` asks for ``amount`` more of ``dimension`` in ``scope``. It changes
        nothing: only the issuer raises a limit (``establish``) or grants units (``budget.grant``).
        Errors: ``INVALID_ARGUMENT``, ``INVALID_ID``, ``REASON_REQUIRED``, ``NOT_INITIALIZED``,
        ``UNKNOWN_HYPOTHESIS``."""
        request = rules.shape_request_increase(scope, dimension, amount, requester, reason)
        return self._result(request["scope"], self._session.run("request_increase", request, at=at))

    def usage(self, scope: str | None = None) -> list[dict[str, Any]]:
        """Rows of the ``scope_usage`` view (of one scope, or all), in scope and dimension order;
        empty for an in-memory case (a simulation has no SQL views). Computed as ``reserve`` measures
        a scope, from the accounts and the running money totals, so the time does not grow with the
        history as the view's sums over every reservation do; on a sound ledger the two are equal."""
        storage = getattr(self._session, "storage", None)
        if storage is None:
            return []
        parsed = rules.parse_scope(scope) if scope is not None else None
        rows = []
        with self._session.read() as view, translate_sqlite_errors():
            case_id, at = view.case()["case_id"], view.head()[2]
            names = [parsed.name] if parsed else [name for (name,) in storage.all("scope_names")]
            for name in names:
                info = view.scope(name)
                if info is None:
                    continue
                used, where = rules.consumption(view, info, at), rules.parse_scope(name)
                for order, dimension in enumerate(rules.DIMENSIONS):
                    declared = info["limits"].get(dimension)
                    if declared is not None:
                        rows.append((where.scope_type, where.scope_id(case_id), order, {
                            "scope_type": where.scope_type, "scope_id": where.scope_id(case_id),
                            "dimension": dimension, "declared": declared, "consumed": used[dimension],
                            "remaining": max(0, declared - used[dimension]), "warning_bps": info["warning_bps"],
                            "on_exhausted": info["on_exhausted"]}))
        return [row for *_, row in sorted(rows, key=lambda row: row[:3])]

    def _result(self, scope: str, ran: Ran) -> ScopeResult:
        ref = ran.appended[0].event_ref if ran.appended else self._session.event_ref(ran.seq)
        seq = ran.appended[0].seq if ran.appended else ran.seq
        return ScopeResult(str(self.package_path), scope, seq, ref, ran.reused,
                           [a.body["type"] for a in ran.appended], self.usage(scope))
