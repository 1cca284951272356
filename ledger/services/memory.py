"""A case held entirely in memory: the same operations and rules, no SQLite, no files.

:class:`MemorySession` has the interface of :class:`~ledger.services.session.Session`
(``run``, ``read``, ``batch``, ``event_ref``, ``budget_snapshot``, ``limits``,
``check_thread``): it evaluates the same rules on a
:class:`~ledger.model.memory_view.MemoryView`, seals every event as the SQLite session
does (same canonical bytes, sha256 chain and ``event_bytes_max`` check; see
``chain=False`` below) and advances the view with it. :class:`MemoryCase` is the case facade
over it (``open_revision``, ``transition``, ``budget``), so
:class:`~ledger.services.budget.BudgetManager` and :func:`ledger.package_tools.journal.run_operation`
work on it unchanged. Policy simulation replays journals through it.

Memory grows with the run: the view keeps the state a rule may ask about, and
the session keeps each event's export address (three integers) for ``event_ref``.

``chain=False`` (what the simulator uses) skips what only a reader of the hash
chain needs: events are not encoded to RFC 8785 bytes nor hashed (``sha256``
and ``parent_sha256`` are all zeros, so every event keeps its size; the size
is bounded without encoding, see :func:`check_event_size`) and an operation's
request is hashed only when a later operation with the same key asks for it.
The rules, the event bodies and the ``event_bytes_max`` check are the same, so
every outcome is too (``tests/test_simulate_speed.py`` compares them with a
real case).
"""

from __future__ import annotations

import marshal
import uuid
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

from ..ground import errors as E
from ..ground.canonical import ZERO_SHA256, canonical_event_bytes, canonical_sha256
from ..ground.arguments import plain_public_arguments
from ..ground.clock import utc_now
from ..ground.config import AnalysisConfig
from ..ground.errors import LedgerError, limit_reached
from ..ground.interrupts import context_manager
from .facade import CaseFacade
from ..model.package import event_path
from ..rules import lifecycle
from ..rules.common import Draft, check_action_id, check_case_id
from .session import Sealed, SessionBase
from ..model.memory_view import MemoryView

DEFAULT_ACTOR = "controller"
#: Every value's RFC 8785 form is at most this many times as long as its ``marshal`` (version 2) form.
MARSHAL_BOUND = 6


def check_event_size(body: dict[str, Any], limit: int) -> None:
    """``LIMIT_REACHED`` (``event_bytes_max``) if the canonical (RFC 8785) form of event ``body``
    is longer than ``limit`` bytes, measured without encoding it when it is surely shorter.

    The bound: ``marshal`` version 2 (which never shares repeated objects) writes a
    string as 5 bytes plus its UTF-8, where canonical JSON needs at most 6 bytes a
    byte (``\\u0000``) plus 2 quotes; an integer as at least 5 bytes, where JSON
    needs at most 17 characters for the integers events hold (within ±(2**53 − 1));
    null, true and false as 1 byte (JSON: 4 or 5); a list as 5 bytes plus its items
    (JSON: 2 plus a comma per item) and an object as 2 bytes plus its keys and values
    (JSON: 2 plus a colon and a comma per entry). By induction every value's JSON
    is at most ``6 × marshal − 1`` bytes. A body whose bound exceeds ``limit`` is
    measured on its canonical bytes, which also refuses a value with no canonical
    form (``INVALID_JSON``), exactly as sealing does.
    """
    try:
        if MARSHAL_BOUND * len(marshal.dumps(body, 2)) <= limit:
            return
    except ValueError:  # a type marshal cannot write: measure it the slow way
        pass
    size = len(canonical_event_bytes(body))
    if size > limit:
        raise limit_reached("event_bytes_max", f"event of {size} bytes exceeds event_bytes_max = {limit}")


class _UnchainedView(MemoryView):
    """A :class:`MemoryView` that hashes an operation's request only when it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self._requests: dict[str, tuple[int, Any]] = {}

    def _remember_operation(self, key: str, seq: int, request: Any) -> None:
        self._operations.pop(key, None)
        self._requests[key] = (seq, request)

    def operation(self, key: str) -> tuple[int, str] | None:
        found = self._operations.get(key)
        if found is None and key in self._requests:
            seq, request = self._requests.pop(key)
            found = self._operations[key] = (seq, canonical_sha256(request))
        return found


class MemorySession(SessionBase):
    """Runs operations on a :class:`MemoryView` (start: an empty ledger, no case yet).

    A refused operation leaves the view unchanged: the rule reads without writing,
    every event is sealed before any is applied, and applying cannot fail.
    ``batch()`` only groups (there is nothing to make durable). ``chain=False``:
    no canonical bytes and no hash chain (the module docstring says what stays equal).
    """

    def __init__(self, *, actor: str = DEFAULT_ACTOR, clock: Callable[[], str] = utc_now,
                 limits: dict[str, int], chain: bool = True) -> None:
        super().__init__(actor=actor, clock=clock, limits=limits)
        self.chain = chain
        self.view = MemoryView() if chain else _UnchainedView()
        self._addresses: list[tuple[str, int, int]] = [("", 0, 0)]  # seq → (stream, revision, stream_seq)
        self._budget_heads: dict[int, int] = {}  # revision → seq of its newest budget event

    @context_manager
    def read(self) -> Iterator[MemoryView]:
        """The view itself (reads are consistent: nothing else writes to it)."""
        self.check_thread()
        yield self.view

    @context_manager
    def batch(self) -> Iterator[None]:
        """Accepted for the interface; operations in memory need no group commit."""
        self.check_thread()
        yield

    def _write(self) -> ContextManager[MemoryView]:
        return nullcontext(self.view)  # a third of a generator-based context manager's cost, per operation

    def _seal(self, drafts: tuple[Draft, ...], head: tuple[int, str, str], at: str) -> list[Sealed]:
        if self.chain:
            return super()._seal(drafts, head, at)
        sealed = []
        seq, limit = head[0], self.limits["event_bytes_max"]
        for draft in drafts:
            seq += 1
            body = dict(draft.fields)
            body.update(seq=seq, parent_sha256=ZERO_SHA256, created_at=at, actor=self.actor, request=draft.request)
            check_event_size(body, limit + draft.size_allowance)
            sealed.append(Sealed(draft, body, b"", ZERO_SHA256))
        return sealed

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


@plain_public_arguments
class MemoryCase(CaseFacade):
    """A case that lives in memory only: :meth:`create` it, then run operations as on a
    :class:`~ledger.services.case.Case` (``open_revision``, ``transition``, ``budget(config)``).

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
               clock: Callable[[], str] = utc_now, package: Path | None = None, chain: bool = True,
               at: str | None = None) -> "MemoryCase":
        """A new in-memory case ``case_id`` (``INVALID_ID`` for a malformed id or actor); ``chain=False``
        seals no hash chain (see :class:`MemorySession`). ``at`` is the time of the case-created
        event (default: ``clock``), checked as :meth:`Case.create <ledger.services.case.Case.create>` checks it."""
        check_case_id(case_id)
        analysis = analysis_config or AnalysisConfig()
        session = MemorySession(actor=check_action_id(actor, "actor"), clock=clock, limits=analysis.limits,
                                chain=chain)
        session.run("create", lifecycle.shape_create(case_id, str(uuid.uuid4())), at=at)
        return cls(session, analysis, package)

    def batch(self) -> Any:
        """Accepted for the interface of :class:`~ledger.services.case.Case`, and nothing more: in
        memory every operation is applied as it returns, so a batch groups nothing, an exception
        leaving it rolls nothing back, and a batch inside it is accepted too (a ``Case``'s batch
        is one transaction, rolled back whole by an exception leaving it; docs/journals.md)."""
        return self.session.batch()

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
