"""One open case's unit of work: an operation is one ``BEGIN IMMEDIATE`` transaction.

:meth:`Session.run` resolves the event time (never before the previous event's:
a clock that steps back is clamped), evaluates the operation's rule on a
:class:`~ledger.model.views.SqlView`, appends every event the rule returns onto the
hash chain with its helper rows, and commits; for an :class:`Outcome` with a
refusal it commits the events first and then raises the refusal ("record
these, then refuse"). A refused operation writes nothing.

A session belongs to the thread that opened it: a call from another thread is
refused with ``INVALID_ARGUMENT`` before anything is read or written, so a
write can never be reported that a different thread's batch later rolls back.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..ground import errors as E
from ..storage.sqlfiles import statement
from ..ground.canonical import canonical_bytes, canonical_event_bytes, sha256_hex
from ..ground.clock import ms_ahead, parse_at, utc_now
from ..ground.config import DEFAULT_LIMITS, BudgetConfig
from ..ground.errors import LedgerError, limit_reached
from ..model.operations import operation
from ..model.package import event_path, stored_stream
from ..model.projection import helper_rows, floor_rows, money_rows
from ..rules.common import Context, Draft, Outcome, Reused, check_case_room
from ..storage.connection import Storage
from ..storage.transaction import Batch, in_batch
from ..storage.sqlite_file import EventRow
from ..model.views import SqlView, WriterCache


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
    that answers the call (the operation's own event, the first it appended; the original one's when
    reused; ``limit.approaching`` may follow it) and the view it read."""

    appended: tuple[Appended, ...]
    seq: int
    view: Any  # the LedgerView the rule read (SqlView or MemoryView)

    @property
    def reused(self) -> bool:
        return not self.appended


def check_future_at(moment: str, now: str, limits: Mapping[str, int]) -> str:
    """``moment`` if it is at most ``limits["at_future_tolerance_ms"]`` ahead of ``now``.

    Event time never goes back, so one far-future time would stamp every later
    event with it: such a time is refused with ``INVALID_ARGUMENT`` before anything
    is written. Times in the past (a recorded run's) are always accepted.
    """
    tolerance = limits.get("at_future_tolerance_ms", DEFAULT_LIMITS["at_future_tolerance_ms"])
    ahead = ms_ahead(moment, now)
    if ahead > tolerance:
        raise LedgerError(
            E.INVALID_ARGUMENT,
            f"'at' {moment} is {ahead} ms ahead of this machine's clock ({now}); at most "
            f"at_future_tolerance_ms = {tolerance} ms ahead is accepted, because event time never goes "
            "back and every later event would be stamped with it",
            at=moment, now=now, at_future_tolerance_ms=tolerance,
        )
    return moment


@dataclass(frozen=True)
class Sealed:
    """A draft turned into its final event: the body, its canonical bytes and their sha256."""

    draft: Draft
    body: dict[str, Any]
    data: bytes
    sha256: str


def seal(drafts: tuple[Draft, ...], head: tuple[int, str, str], at: str, actor: str,
         limits: Mapping[str, int]) -> list[Sealed]:
    """Chain ``drafts`` after ``head`` (seq, sha256, time): add ``seq``, ``parent_sha256``,
    ``created_at`` = ``at``, ``actor`` and ``request``; compute the RFC 8785 bytes and sha256.

    Every draft is sealed before any is stored, so an operation whose later event
    is too big (``LIMIT_REACHED``, ``event_bytes_max``) stores none of them.
    """
    sealed = []
    seq, parent = head[0], head[1]
    limit = limits["event_bytes_max"]
    for draft in drafts:
        seq += 1
        body = dict(draft.fields)
        body.update(seq=seq, parent_sha256=parent, created_at=at, actor=actor, request=draft.request)
        data = canonical_event_bytes(body)
        if len(data) > limit + draft.size_allowance:
            raise limit_reached("event_bytes_max", f"event of {len(data)} bytes exceeds event_bytes_max = {limit}"
                                + (f" plus the {draft.size_allowance} bytes of evidence it carries"
                                   if draft.size_allowance else ""))
        parent = sha256_hex(data)
        sealed.append(Sealed(draft, body, data, parent))
    return sealed


class SessionBase:
    """What a session on SQLite (:class:`Session`) and one in memory
    (:class:`ledger.services.memory.MemorySession`) share: the thread check, the resolved
    (clamped) time, the rule, sealing the events and raising an outcome's refusal.

    A subclass gives :meth:`_write` (a transaction yielding the view the rule
    reads) and :meth:`_store` (append one sealed event; return its ``stream_seq``).
    """

    def __init__(self, *, actor: str, clock: Callable[[], str] = utc_now, limits: Mapping[str, int]) -> None:
        self.actor = actor
        self.clock = clock
        self.limits = dict(limits)
        self._owner = threading.get_ident()
        #: ``(requested at, recorded time)`` when the last :meth:`run` raised an explicit ``at``
        #: to the previous event's time (an ``at`` earlier than the head); None otherwise.
        self.last_clamp: tuple[str, str] | None = None

    def check_thread(self) -> None:
        """``INVALID_ARGUMENT`` unless called from the thread that opened the case."""
        if threading.get_ident() != self._owner:
            raise LedgerError(E.INVALID_ARGUMENT, "this case was opened by another thread; a Case (and its "
                              "budget manager) belongs to the thread that opened it: open the case again "
                              "in each thread (writers queue fairly on the ledger file)")

    def in_batch(self) -> bool:
        """Whether a write now belongs to a batch its rollback undoes (never, in memory)."""
        return False

    def _write(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _store(self, view: Any, sealed: Sealed) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _seal(self, drafts: tuple[Draft, ...], head: tuple[int, str, str], at: str) -> list[Sealed]:
        """The events of one operation, chained after ``head`` (:func:`seal`); a session whose
        chain nobody reads may seal more cheaply, with the same bodies and limit checks."""
        return seal(drafts, head, at, self.actor, self.limits)

    def run(self, name: str, request: Mapping[str, Any], *, at: str | None = None,
            config: BudgetConfig | None = None, inputs: Mapping[str, Any] | None = None,
            prepare: Callable[[Any], None] | None = None) -> Ran:
        """Evaluate operation ``name``'s rule on ``request`` and append its events, in one transaction.

        ``at`` is an RFC 3339 UTC time (``INVALID_ARGUMENT`` otherwise, and for a time more
        than the ``at_future_tolerance_ms`` limit ahead of ``clock``); an ``at`` earlier
        than the previous event's time is raised to it and noted in :attr:`last_clamp`. ``prepare``
        runs first inside the transaction (creating the schema of a new ledger).
        Raises the rule's ``LedgerError``; ``LIMIT_REACHED`` for an event over
        ``event_bytes_max``; ``LEDGER_BUSY`` when the writer lock is not obtained in time.
        """
        self.check_thread()
        rule = operation(name).rule
        moment = check_future_at(parse_at(at), self.clock(), self.limits) if at is not None else None
        refusal: LedgerError | None = None
        self.last_clamp = None
        with self._write() as view:
            if prepare is not None:
                prepare(view)
            head = view.head()
            context = Context(at=max(moment or self.clock(), head[2]), config=config, limits=self.limits,
                              inputs=inputs or {})
            outcome = rule(view, request, context)
            if isinstance(outcome, Reused):
                return Ran((), outcome.seq, view)
            drafts = outcome.events if isinstance(outcome, Outcome) else (outcome,)
            check_case_room(view, drafts, self.limits, outcome.refusal if isinstance(outcome, Outcome) else None)
            appended = []
            for sealed in self._seal(drafts, head, context.at):
                stream_seq = self._store(view, sealed)
                draft = sealed.draft
                appended.append(Appended(sealed.body["seq"], sealed.sha256, context.at,
                                         event_path(draft.stream, draft.revision, stream_seq), sealed.body))
            if isinstance(outcome, Outcome):
                refusal = outcome.refusal
        if moment is not None and context.at != moment and appended:
            self.last_clamp = (moment, context.at)  # only once committed, and recorded: else nothing was raised
        if refusal is not None:
            raise refusal  # after the commit: the events stay, the operation is refused
        return Ran(tuple(appended), appended[0].seq, view)  # the operation's own event, as when reused


class Session(SessionBase):
    """Runs operations on one :class:`~ledger.storage.connection.Storage` for one actor.

    ``clock`` gives the time of events written without an explicit ``at``;
    ``limits`` are the operational limits (``event_bytes_max`` among them).
    """

    def __init__(self, storage: Storage, *, actor: str, clock: Callable[[], str] = utc_now,
                 limits: Mapping[str, int]) -> None:
        super().__init__(actor=actor, clock=clock, limits=limits)
        self.storage = storage
        #: What this writer's operations read of rarely changing facts, kept while the head is ours.
        self.cache = WriterCache()

    def read(self) -> "_Reading":
        """A consistent read snapshot as a view, ended before returning (a context manager)."""
        self.check_thread()
        return _Reading(self.storage.read(depth=2))  # held by the `with` that enters it

    def batch(self) -> Batch:
        """Group commit: every operation inside shares one durable transaction (a context manager)."""
        self.check_thread()
        return self.storage.batch()

    def in_batch(self) -> bool:
        """Whether a write now belongs to an open :meth:`batch` (its rollback undoes it)."""
        return in_batch(self.storage)

    def _write(self) -> "_Writing":
        return _Writing(self)

    def _store(self, view: SqlView, sealed: Sealed) -> int:
        draft, body = sealed.draft, sealed.body
        stream_seq = view.next_stream_seq(draft.stream, draft.revision)
        row = EventRow(
            seq=body["seq"], type=draft.type, revision=draft.revision, stream=stored_stream(draft.stream), stream_seq=stream_seq,
            created_at=body["created_at"], sha256=sealed.sha256, parent_sha256=body["parent_sha256"],
            operation_key=draft.operation_key,
            request_sha256=sha256_hex(canonical_bytes(draft.request)) if draft.operation_key else None,
            body=sealed.data,
        )
        rows = helper_rows(body, draft)
        if draft.stream == "budget":
            rows += floor_rows(body, view.account_floors(draft.revision))  # advances the kept floors
            rows += money_rows(body, view.money_consumed)
        self.storage.append(row, rows, draft.contents)
        view.cache.appended((row.seq, row.sha256, row.created_at), [name for name, _ in rows], body,
                            draft.stream, stream_seq)
        return stream_seq

    def budget_snapshot(self) -> tuple[int, int | None, dict[str, dict[str, Any]], str | None]:
        """``(revision, newest budget seq, accounts, event_ref)`` of the current revision, validated.

        Checks every budget event of the revision: hash of its stored bytes, parent
        link, ``remaining = initial + granted - spent + rewarded >= 0``,
        ``0 <= reward < cost``, and that the ``balances`` view equals the newest
        state. Raises ``INTEGRITY_ERROR`` naming the first bad ``seq``.

        What this process already checked of the revision is not checked again: the
        newest checked event must still hold the bytes and hash it had, the schema must
        be unchanged (changing a checked row needs its append-only guard dropped), and
        only the events appended since are checked (docs/concepts.md).
        """
        storage = self.storage
        with self.read() as view:
            case = view.case()
            revision = case["revision"]
            key = (str(storage.path), case["package_id"], revision)
            cookie = storage.one("schema_cookie")[0]
            checked = _still_checked(storage, CHECKED.get(key), cookie)
            provisional = _still_checked(storage, PROVISIONAL.get(key), cookie, committed=False)
            if provisional is not None and (checked is None or provisional[1] > checked[1]):
                checked = provisional
            last_seq, stream_seq, sha, accounts = checked[1:] if checked else (None, 0, None, {})
            rows = storage.conn.execute(statement("budget_chain_after"), {"revision": revision, "after": stream_seq})
            try:
                for seq, sha, body_text, parent_sha, stream_seq in rows:
                    body = json.loads(body_text)
                    if sha256_hex(body_text.encode("utf-8")) != sha or body.get("parent_sha256") != parent_sha:
                        raise LedgerError(E.INTEGRITY_ERROR,
                                          f"seq {seq}: the budget event does not match its hash chain",
                                          seq=seq)
                    _check_balanced(seq, body)
                    last_seq, accounts = seq, {a["hypothesis_id"]: a for a in body["accounts"]}
            finally:
                rows.close()  # a statement left open would keep the write-ahead log from being emptied
            _check_balances_view(storage, revision, last_seq, accounts)
            if last_seq is not None and storage.writing:  # inside a batch: not committed, maybe never
                PROVISIONAL[key] = (cookie, last_seq, stream_seq, sha, accounts)
            elif last_seq is not None:
                CHECKED[key] = (cookie, last_seq, stream_seq, sha, accounts)
                PROVISIONAL.pop(key, None)
            ref = self.event_ref(last_seq) if last_seq else None
        return revision, last_seq, accounts, ref

    def event_ref(self, seq: int) -> str:
        """Export path of event ``seq``; ``INVALID_ARGUMENT`` if there is none."""
        self.check_thread()
        row = self.storage.one("event_by_seq", seq=seq)
        if row is None:
            raise LedgerError(E.INVALID_ARGUMENT, f"no event with seq {seq}")
        return event_path(row[3], row[2], row[4])


class _Reading:
    """:meth:`Session.read`: the storage's read, yielding a view of it (a class rather than a
    generator: an interrupt as a generator entered left its snapshot open until it was collected)."""

    __slots__ = ("read",)

    def __init__(self, read: Any) -> None:
        self.read = read

    def __enter__(self) -> SqlView:
        try:
            return SqlView(self.read.__enter__())
        except BaseException as exc:  # an interrupt once begun: the read is ended, never left open
            self.read.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool:
        return self.read.__exit__(kind, value, traceback)


class _Writing:
    """:meth:`Session._write`: the storage's write transaction, yielding the view the rule reads; the
    writer's cache is forgotten whenever the transaction ends without committing (a class rather
    than a generator, as it runs once per operation)."""

    __slots__ = ("session", "write")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.write = session.storage.write(depth=2)  # held by the `with` of the operation (Session.run)

    def __enter__(self) -> SqlView:
        session = self.session
        try:
            self.write.__enter__()
            return SqlView(session.storage, session.cache)
        except BaseException as exc:  # KeyboardInterrupt once begun too: the write is ended, never left held
            if self.write.entered:
                self.write.__exit__(type(exc), exc, exc.__traceback__)
            session.cache.forget()
            raise

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool:
        try:
            self.write.__exit__(kind, value, traceback)
        except BaseException:
            self.session.cache.forget()
            raise
        if kind is not None:
            self.session.cache.forget()
        return False


def _check_balanced(seq: int, body: Mapping[str, Any]) -> None:
    """``INTEGRITY_ERROR`` unless every account of budget event ``seq`` balances and its refund is in [0, cost)."""
    for account in body["accounts"]:
        remaining = (account["initial_units"] + account["granted_units"]
                     - account["spent_units"] + account["rewarded_units"])
        if remaining != account["remaining_units"] or remaining < 0:
            raise LedgerError(E.INTEGRITY_ERROR,
                              f"seq {seq}: the budget event's account {account['hypothesis_id']} does not balance",
                              seq=seq)
    action = body.get("action") or {}
    if action.get("reward_units") is not None and not 0 <= action["reward_units"] < action["cost_units"]:
        raise LedgerError(E.INTEGRITY_ERROR, f"seq {seq}: the budget event's refund is outside [0, cost)", seq=seq)


#: What :meth:`Session.budget_snapshot` checked in this process, per (ledger file, package id,
#: revision): ``(schema cookie, newest checked seq, its stream_seq, its sha256, accounts)``.
CHECKED: dict[tuple[str, str, int], tuple[int, int, int, str, dict[str, dict[str, Any]]]] = {}


#: What :meth:`Session.budget_snapshot` checked inside a batch (same shape as :data:`CHECKED`): not
#: committed when it was checked, so it is taken only while its newest event is still stored with the
#: same hash (the batch committed it, or is still open), and left without a word when the batch was
#: rolled back. Snapshots inside batches (``ledger apply``'s group commit) then check only the events
#: appended since, as outside them.
PROVISIONAL: dict[tuple[str, str, int], tuple[int, int, int, str, dict[str, dict[str, Any]]]] = {}


def _still_checked(storage: Storage, checked: Any, cookie: int, *, committed: bool = True) -> Any:
    """``checked`` when the history it covers is unchanged: the same schema, and its newest event
    still stored with the bytes of its hash; None (check everything again) when the schema changed;
    ``INTEGRITY_ERROR`` when that event changed or vanished underneath. A :data:`PROVISIONAL` entry
    (not ``committed``) whose event is not there as it was is None instead: its batch was rolled back,
    or the event is not yet visible to this reader."""
    if checked is None or checked[0] != cookie:
        return None
    seq, sha = checked[1], checked[3]
    row = storage.one("event_hash_and_body", seq=seq)
    if row is None or row[0] != sha or sha256_hex(str(row[1]).encode("utf-8")) != sha:
        if not committed:
            return None
        raise LedgerError(E.INTEGRITY_ERROR, f"seq {seq}: the budget event, checked before, was changed underneath",
                          seq=seq)
    return checked


def _check_balances_view(storage: Storage, revision: int, last_seq: int | None,
                         accounts: Mapping[str, Mapping[str, Any]]) -> None:
    """``INTEGRITY_ERROR`` unless the ``balances`` view shows exactly ``accounts`` for ``revision``."""
    view_rows = storage.conn.execute(statement("balances_of_revision"), {"revision": revision})
    names = [d[0] for d in view_rows.description]
    for row in view_rows.fetchall():
        record = dict(zip(names, row))
        record.pop("revision")
        record.pop("statement", None)  # the hypothesis text is not part of an account
        if accounts.get(record["hypothesis_id"]) != record:
            raise LedgerError(E.INTEGRITY_ERROR, f"seq {last_seq}: the balances view disagrees with this budget event "
                              f"on {record['hypothesis_id']}", seq=last_seq)
