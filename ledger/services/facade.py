"""What every case facade shares: the lifecycle operations and the budget manager.

:class:`CaseFacade` holds ``open_revision``, ``transition``, ``batch``,
``event_ref`` and ``budget`` over a session; :class:`~ledger.services.case.Case` uses it
on SQLite and :class:`~ledger.services.memory.MemoryCase` in memory, so both shape
requests and results the same way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from .budget import BudgetManager
from ..ground.arguments import plain_public_arguments
from ..ground.errors import refuses_unfit_calls_of
from ..ground.config import AnalysisConfig, BudgetConfig
from ..rules import lifecycle
from .scopes import ScopeManager
from .session import Ran


@refuses_unfit_calls_of
@dataclass(frozen=True)
class LifecycleResult:
    """Result of ``open_revision``, ``transition`` and ``record_outcome``.

    ``case_state`` is the case state after the call, ``seq`` the event's (the original
    one when ``reused``), ``event_ref`` its export path, ``hypotheses`` the
    revision's batch (``open_revision`` only).
    """

    package_path: str
    revision: int
    case_state: str
    seq: int
    event_ref: str
    reused: bool
    hypotheses: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.hypotheses is None:
            del out["hypotheses"]
        return out


@plain_public_arguments
class CaseFacade:
    """Lifecycle operations of a case over ``self.session`` (a :class:`~ledger.services.session.Session`
    or a memory session); ``self.path`` is the package folder, ``self.analysis`` the analysis config."""

    path: Path | None
    session: Any
    analysis: AnalysisConfig

    def batch(self):
        """Group commit: operations inside share one durable transaction (one fsync).

        Each operation still succeeds or fails alone (a savepoint each) and returns
        the same result as outside a batch, but nothing is durable until the
        ``with`` block ends normally. An exception that leaves the block (a
        ``LedgerError`` not caught inside it, ``KeyboardInterrupt``) rolls back the
        whole batch, results already returned included; catch refusals per
        operation to keep the rest. A batch inside a batch is refused
        (``INVALID_ARGUMENT``). Use for journals and bulk loads; keep batches
        short, as other writers wait meanwhile::

            with case.batch():
                for hypothesis, action_id in work:
                    try:
                        budget.reserve(hypothesis, action_id, "source.read_context")
                    except LedgerError as refused:
                        print(refused.code)  # this one rolled back alone
        """
        return self.session.batch()

    def event_ref(self, seq: int) -> str:
        """Export path of event ``seq`` (docs/files.md)."""
        return self.session.event_ref(seq)

    def _lifecycle_result(self, ran: Ran, with_hypotheses: bool = False) -> LifecycleResult:
        with self.session.read() as view:
            case = view.case()
            ref = ran.appended[0].event_ref if ran.appended else self.event_ref(ran.seq)
            hypotheses = None
            if with_hypotheses:
                info = view.revision(case["revision"])
                hypotheses = info["hypotheses"] if info else []
        return LifecycleResult(str(self.path), case["revision"], case["state"], ran.seq, ref,
                               ran.reused, hypotheses)

    def open_revision(self, hypotheses: Iterable[dict[str, Any]], units_per_hypothesis: int | None = None,
                      *, at: str | None = None) -> LifecycleResult:
        """Open revision 1 (from ``CREATED``) or reopen as the next revision (from
        ``EVALUATING``/``CLOSED``); hypothesis ids ``H1``… are assigned in order.

        ``hypotheses`` is a list of ``{"statement": str}``; each gets
        ``units_per_hypothesis`` (default: the analysis config's). Errors:
        ``INVALID_ARGUMENT``, ``INVALID_TRANSITION``.
        """
        request = lifecycle.shape_open_revision(
            list(hypotheses) if isinstance(hypotheses, (list, tuple)) else hypotheses,
            units_per_hypothesis, default_units=self.analysis.units_per_hypothesis,
            max_hypotheses=self.analysis.max_hypotheses,
        )
        return self._lifecycle_result(self.session.run("open_revision", request, at=at), with_hypotheses=True)

    def transition(self, to: str, *, at: str | None = None) -> LifecycleResult:
        """Move the case to state ``to`` (docs/concepts.md). Errors: ``INVALID_ARGUMENT``,
        ``INVALID_TRANSITION``, ``ACTION_PENDING`` (into ``EVALUATING``)."""
        request = lifecycle.shape_transition(to)
        return self._lifecycle_result(self.session.run("transition", request, at=at))

    def record_outcome(self, outcome: str, source: str, *, at: str | None = None) -> LifecycleResult:
        """Record how the current revision's work ended (docs/runs.md): ``outcome`` a short label
        of your choosing (``"resolved"``), ``source`` where the verdict came from. Once per
        revision, in any state after ``open_revision``; the same again is reused. Errors:
        ``INVALID_ARGUMENT`` (also for ``(all)`` and ``(no outcome)``, the names simulate's reports
        use), ``INVALID_TRANSITION`` (no revision yet), ``OPERATION_CONFLICT``
        (a different outcome is already recorded)."""
        request = lifecycle.shape_record_outcome(outcome, source)
        lifecycle.check_new_outcome(outcome)
        return self._lifecycle_result(self.session.run("record_outcome", request, at=at))

    def budget(self, config: BudgetConfig | None = None) -> BudgetManager:
        """The budget manager of this case; ``config=None`` uses the frozen policy."""
        return BudgetManager(self.session, self.path, config)

    def scopes(self) -> ScopeManager:
        """Scoped limits of this case: ``establish``, ``request_increase``, ``usage``."""
        return ScopeManager(self.session, self.path)

