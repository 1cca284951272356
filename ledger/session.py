"""One open case's unit of work: an operation is one ``BEGIN IMMEDIATE`` transaction.

:meth:`Session.run` resolves the event time (never before the previous event's:
a clock that steps back is clamped), evaluates the operation's rule on a
:class:`~ledger.views.SqlView`, appends every event the rule returns onto the
hash chain with its helper rows, and commits; for an :class:`Outcome` with a
refusal it commits the events first and then raises the refusal ("record
these, then refuse"). A refused operation writes nothing.

A session belongs to the thread that opened it: a call from another thread is
refused with ``INVALID_ARGUMENT`` before anything is read or written, so a
write can never be reported that a different thread's batch later rolls back.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from . import errors as E
from .canonical import canonical_bytes, canonical_event_bytes, sha256_hex
from .clock import parse_at, utc_now
from .config import BudgetConfig
from .errors import LedgerError
from .operations import operation
from .package import event_path, stored_stream
from .projection import helper_rows
from .rules.common import Context, Draft, Outcome, Reused
from .storage import EventRow, Storage
from .views import SqlView


@dataclass(frozen=True)
class Appended:
    """An event just written: its ``seq``, hash, time, export path and decoded body."""

    seq: int
    sha256: str
    created_at: str
    event_ref: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Ran:
    """What :meth:`Session.run` did: the events it appended (none when ``reused``), the ``seq``
    that answers the call (the original event's when reused) and the view it read."""

    appended: tuple[Appended, ...]
    seq: int
    view: SqlView

    @property
    def reused(self) -> bool:
        return not self.appended

    @property
    def last(self) -> Appended | None:
        return self.appended[-1] if self.appended else None


class Session:
    """Runs operations on one :class:`~ledger.storage.Storage` for one actor.

    ``clock`` gives the time of events written without an explicit ``at``;
    ``limits`` are the operational limits (``event_bytes_max`` among them).
    """

    def __init__(self, storage: Storage, *, actor: str, clock: Callable[[], str] = utc_now,
                 limits: Mapping[str, int]) -> None:
        self.storage = storage
        self.actor = actor
        self.clock = clock
        self.limits = dict(limits)
        self._owner = threading.get_ident()

    def check_thread(self) -> None:
        """``INVALID_ARGUMENT`` unless called from the thread that opened the case."""
        if threading.get_ident() != self._owner:
            raise LedgerError(E.INVALID_ARGUMENT, "this case was opened by another thread; a Case (and its "
                              "budget manager) belongs to the thread that opened it: open the case again "
                              "in each thread (writers queue fairly on the ledger file)")

    @contextmanager
    def read(self) -> Iterator[SqlView]:
        """A consistent read snapshot as a view, ended before returning."""
        self.check_thread()
        with self.storage.read():
            yield SqlView(self.storage)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group commit: every operation inside shares one durable transaction."""
        self.check_thread()
        with self.storage.batch():
            yield

    def run(self, name: str, request: Mapping[str, Any], *, at: str | None = None,
            config: BudgetConfig | None = None, inputs: Mapping[str, Any] | None = None,
            prepare: Callable[[SqlView], None] | None = None) -> Ran:
        """Evaluate operation ``name``'s rule on ``request`` and append its events, in one transaction.

        ``at`` is an RFC 3339 UTC time (``INVALID_ARGUMENT`` otherwise); ``prepare``
        runs first inside the transaction (creating the schema of a new ledger).
        Raises the rule's ``LedgerError``; ``LIMIT_REACHED`` for an event over
        ``event_bytes_max``; ``LEDGER_BUSY`` when the writer lock is not obtained in time.
        """
        self.check_thread()
        rule = operation(name).rule
        moment = parse_at(at) if at is not None else None
        refusal: LedgerError | None = None
        with self.storage.write():
            view = SqlView(self.storage)
            if prepare is not None:
                prepare(view)
            head = view.head()
            context = Context(at=max(moment or self.clock(), head[2]), config=config, limits=self.limits,
                              inputs=inputs or {})
            outcome = rule(view, request, context)
            if isinstance(outcome, Reused):
                return Ran((), outcome.seq, view)
            drafts = outcome.events if isinstance(outcome, Outcome) else (outcome,)
            appended = []
            for draft in drafts:
                appended.append(self._append(view, draft, head, context.at))
                head = (appended[-1].seq, appended[-1].sha256, context.at)
            if isinstance(outcome, Outcome):
                refusal = outcome.refusal
        if refusal is not None:
            raise refusal  # after the commit: the events stay, the operation is refused
        return Ran(tuple(appended), appended[-1].seq, view)

    def _append(self, view: SqlView, draft: Draft, head: tuple[int, str, str], at: str) -> Appended:
        body = dict(draft.fields)
        body.update(seq=head[0] + 1, parent_sha256=head[1], created_at=at, actor=self.actor, request=draft.request)
        data = canonical_event_bytes(body)
        limit = self.limits["event_bytes_max"]
        if len(data) > limit:
            raise LedgerError(
                E.LIMIT_REACHED, f"event of {len(data)} bytes exceeds event_bytes_max = {limit}",
                limit="event_bytes_max",
            )
        stream_seq = view.next_stream_seq(draft.stream, draft.revision)
        sha = sha256_hex(data)
        row = EventRow(
            seq=body["seq"], type=draft.type, revision=draft.revision, stream=stored_stream(draft.stream), stream_seq=stream_seq,
            created_at=at, sha256=sha, parent_sha256=head[1], operation_key=draft.operation_key,
            request_sha256=sha256_hex(canonical_bytes(draft.request)) if draft.operation_key else None,
            body=data,
        )
        self.storage.append(row, helper_rows(body, draft), draft.contents)
        return Appended(body["seq"], sha, at, event_path(draft.stream, draft.revision, stream_seq), body)

    def event_ref(self, seq: int) -> str:
        """Export path of event ``seq``; ``INVALID_ARGUMENT`` if there is none."""
        row = self.storage.one("event_by_seq", seq=seq)
        if row is None:
            raise LedgerError(E.INVALID_ARGUMENT, f"no event with seq {seq}")
        return event_path(row[3], row[2], row[4])
