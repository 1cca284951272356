"""A case held entirely in memory: the same operations and rules, no SQLite, no files.

:class:`MemorySession` has the interface of :class:`~ledger.session.Session`
(``run``, ``read``, ``batch``, ``event_ref``, ``budget_snapshot``, ``limits``,
``check_thread``): it evaluates the same rules on a
:class:`~ledger.views.MemoryView`, seals every event exactly as the SQLite
session does (same canonical bytes, sha256 chain and ``event_bytes_max``
check) and advances the view with it. :class:`MemoryCase` is the case facade
over it (``open_revision``, ``transition``, ``budget``), so
:class:`~ledger.budget.BudgetManager` and :func:`ledger.journal.run_operation`
work on it unchanged. Policy simulation replays journals through it.

Memory grows with the run: the view keeps the state a rule may ask about, and
the session keeps each event's export address (three integers) for ``event_ref``.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from . import errors as E
from .clock import utc_now
from .config import AnalysisConfig
from .errors import LedgerError
from .facade import CaseFacade
from .package import event_path
from .rules import lifecycle
from .rules.common import check_action_id, check_case_id
from .session import Sealed, SessionBase
from .views import MemoryView

DEFAULT_ACTOR = "controller"


class MemorySession(SessionBase):
    """Runs operations on a :class:`MemoryView` (start: an empty ledger, no case yet).

    A refused operation leaves the view unchanged: the rule reads without writing,
    every event is sealed before any is applied, and applying cannot fail.
    ``batch()`` only groups (there is nothing to make durable).
    """

    def __init__(self, *, actor: str = DEFAULT_ACTOR, clock: Callable[[], str] = utc_now,
                 limits: dict[str, int]) -> None:
        super().__init__(actor=actor, clock=clock, limits=limits)
        self.view = MemoryView()
        self._addresses: list[tuple[str, int, int]] = [("", 0, 0)]  # seq → (stream, revision, stream_seq)
        self._budget_heads: dict[int, int] = {}  # revision → seq of its newest budget event

    @contextmanager
    def read(self) -> Iterator[MemoryView]:
        """The view itself (reads are consistent: nothing else writes to it)."""
        self.check_thread()
        yield self.view

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Accepted for the interface; operations in memory need no group commit."""
        self.check_thread()
        yield

    @contextmanager
    def _write(self) -> Iterator[MemoryView]:
        yield self.view

    def _store(self, view: MemoryView, sealed: Sealed) -> int:
        draft = sealed.draft
        stream_seq = view.apply(sealed.body, sealed.sha256, draft.stream, draft.operation_key, draft.contents)
        self._addresses.append((draft.stream, draft.revision, stream_seq))
        if draft.stream == "budget":
            self._budget_heads[draft.revision] = sealed.body["seq"]
        return stream_seq

    def event_ref(self, seq: int) -> str:
        """Export path event ``seq`` would have; ``INVALID_ARGUMENT`` if there is none."""
        if type(seq) is not int or not 0 < seq < len(self._addresses):
            raise LedgerError(E.INVALID_ARGUMENT, f"no event with seq {seq}")
        return event_path(*self._addresses[seq])

    def budget_snapshot(self) -> tuple[int, int | None, dict[str, dict[str, Any]], str | None]:
        """``(revision, newest budget seq, accounts, event_ref)`` of the current revision.

        Every event here was computed by the rules a moment ago, so there is no
        stored history to re-check.
        """
        with self.read() as view:
            revision = view.case()["revision"]
            last_seq = self._budget_heads.get(revision)
            return revision, last_seq, view.accounts(revision), self.event_ref(last_seq) if last_seq else None


class MemoryCase(CaseFacade):
    """A case that lives in memory only: :meth:`create` it, then run operations as on a
    :class:`~ledger.case.Case` (``open_revision``, ``transition``, ``budget(config)``).

    ``package`` is the folder where ``record_result``'s source references resolve;
    without one, a source reference is refused with ``SOURCE_REF_INVALID``.
    ``analysis_config`` gives the default ``units_per_hypothesis``,
    ``max_hypotheses`` and the operational limits, as for a case on disk.
    """

    def __init__(self, session: MemorySession, analysis: AnalysisConfig, package: Path | None) -> None:
        self.session = session
        self.analysis = analysis
        self.path = package

    @classmethod
    def create(cls, case_id: str, *, analysis_config: AnalysisConfig | None = None, actor: str = DEFAULT_ACTOR,
               clock: Callable[[], str] = utc_now, package: Path | None = None) -> "MemoryCase":
        """A new in-memory case ``case_id`` (``INVALID_ID`` for a malformed id or actor)."""
        check_case_id(case_id)
        analysis = analysis_config or AnalysisConfig()
        session = MemorySession(actor=check_action_id(actor, "actor"), clock=clock, limits=analysis.limits)
        session.run("create", lifecycle.shape_create(case_id, str(uuid.uuid4())))
        return cls(session, analysis, package)

    def evidence(self) -> Any:
        """The evidence store recomputes replies over a package on disk and reads back stored
        batches, so an in-memory case has none: ``INVALID_ARGUMENT`` (a simulated journal's
        evidence lines are refused, and the budget lines that need their records with them)."""
        raise LedgerError(E.INVALID_ARGUMENT, "the evidence store needs a case on disk; an in-memory case "
                          "(simulate) does not run evidence operations")

    @property
    def view(self) -> MemoryView:
        """The in-memory state (the rules' view protocol)."""
        return self.session.view
