"""Replay in memory: re-derive every stored event from its request alone (docs/files.md).

:class:`Replayer` checks one stored event at a time against the chain (seq,
parent hash, time order, schema), finds its operation in the registry, runs the
operation's rule on a :class:`~ledger.model.memory_view.MemoryView` and requires the
recomputed event's canonical bytes to equal the stored ones: that one
comparison proves the bytes canonical and every derived field right. It never
touches SQLite; each accepted event, with the helper rows and content rows it
establishes, goes to a ``sink`` (verify loads them into a scratch database and
compares in bulk; import writes them into the new ledger).

An operation that appended several events is recomputed once, at its first
event; its later events must then follow, equal to the recomputed ones.
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any, Callable, Mapping

from ..ground import errors as E
from ..ground.canonical import canonical_bytes, canonical_event_bytes, sha256_hex
from ..ground.errors import LedgerError, integrity_error as _bad, quoted, shown
from ..model.operations import OPERATIONS
from ..model.package import stored_stream
from ..model.source_refs import line_ending_digests, resolve_source_refs
from ..model.projection import helper_rows, floor_rows, money_rows
from ..ground.clock import ms_ahead, parse_at, utc_now
from ..rules.common import Context, Draft, Outcome, Reused, check_action_id, replayed, replaying_stored_requests
from ..ground.schemas import schema_message, validator
from ..storage.sqlite_file import EventRow, HelperRow
from ..model.memory_view import MemoryView

EVENT_FORMATS = ("case-event-v1", "budget-event-v1", "scope-event-v1", "evidence-event-v1", "evidence-record-v1",
                 "evidence-index-v1", "evidence-index-v2", "feedback-event-v1")
#: ``sink(event row, helper rows, content rows)`` receives every accepted event.
Sink = Callable[[EventRow, list[HelperRow], Mapping[str, bytes]], None]


class PackageSource:
    """Stored content (``content_of(sha256)``) and the package folder where source refs resolve."""

    def __init__(self, root: Path, content_of: Callable[[str], bytes | None],
                 identity: Callable[[], str] | None = None) -> None:
        self.root = root
        self.content_of = content_of
        self._identity = identity
        self._identity_now: str | None = None
        #: ``{(input identity, path): (sha256, operation id)}`` every stored result recorded: inputs
        #: with one identity are one set of files, so every result of them records the same sha256.
        self.recorded_digests: dict[tuple[str, str], tuple[str, Any]] = {}
        #: ``{path: why}`` of the inputs stored tool results read that changed since (``"changed"``)
        #: or cannot be read now (``"unreadable"``): those results were checked against their requests only.
        self.unchecked: dict[str, str] = {}

    def note_unchecked(self, path: str, why: str) -> None:
        """Note an input a stored result read that cannot be compared with the result now."""
        self.unchecked.setdefault(path, why)

    def input_identity(self) -> str | None:
        """The package's input identity (computed once, on first use), or None when unknown."""
        if self._identity is None:
            return None
        if self._identity_now is None:
            self._identity_now = self._identity()
        return self._identity_now

    def confirm_identity(self, replied: str) -> bool:
        """Whether the package's input identity, computed afresh, is still ``replied`` (a reply's): asked
        before a difference from an unchanged input is called a forgery, since a file edited while the
        replay runs changes the identity too. The fresh identity replaces the one kept."""
        if self._identity is None:
            return False
        self._identity_now = self._identity()
        return self._identity_now == replied

    def resolve_sources(self, refs: list[str]) -> list[dict[str, str]]:
        try:
            return resolve_source_refs(self.root, refs) if refs else []
        except LedgerError as exc:
            if exc.code == E.STORAGE_ERROR:  # a file this user may not read is not a changed one
                raise
            raise LedgerError(E.INTEGRITY_ERROR, f"source reference no longer resolves: {exc.message}") from None


def _check_stored_fields(seq: int, created_at: str, actor: str) -> None:
    """The two body fields a replay cannot recompute must be values the live API would have
    stored: ``actor`` passes the API's id check, ``created_at`` is a real UTC time already in
    the stored form (``parse_at`` leaves it unchanged). ``INTEGRITY_ERROR`` naming ``seq``."""
    try:
        check_action_id(actor, "actor")
    except LedgerError as exc:
        raise _bad(seq, f"the event's actor is not one the ledger accepts: {exc.message}", field="actor") from None
    try:
        stored_form = parse_at(created_at)
    except LedgerError as exc:
        raise _bad(seq, f"the event's created_at is not a real time: {exc.message}", field="created_at") from None
    if stored_form != created_at:
        raise _bad(seq, f"the event's created_at {quoted(created_at, 40)} is not in the stored form {stored_form}",
                   field="created_at")


def _check_header(seq: int, body: Mapping[str, Any], previous_at: str) -> None:
    """``INTEGRITY_ERROR`` unless event ``seq`` has a ``created_at`` and ``actor`` in their stored
    forms, no earlier than ``previous_at``, and a ``request`` object."""
    created_at, actor = body.get("created_at"), body.get("actor")
    if type(created_at) is not str or type(actor) is not str or type(body.get("request")) is not dict:
        raise _bad(seq, "event lacks a created_at, actor or request")
    _check_stored_fields(seq, created_at, actor)
    if created_at < previous_at:
        raise _bad(seq, "created_at goes back in time")


class Replayer:
    """Re-applies stored events in chain order onto an in-memory view.

    The first event of each format and type is validated against its JSON Schema up front; an
    event whose bytes equal its recomputation is what the rules write, which the schemas describe.
    ``schema_every_event`` (import: external input) also holds every other event that fails its
    checks or its recomputation to its schema first, so a malformed event is named by what the
    schema says of it, exactly as if every event were validated up front, at the cost of
    validating only the events that fail; without it (verify of the ledger's own events) such an
    event is named by the check it failed.
    """

    def __init__(self, source: PackageSource, sink: Sink | None = None, *, schema_every_event: bool = True,
                 view: MemoryView | None = None) -> None:
        self.view = view or MemoryView()
        self.source = source
        self.sink = sink
        self.schema_every_event = schema_every_event
        self._schema_checked: set[tuple[str, str]] = set()
        self._following: deque[Draft] = deque()  # later events of a multi-event operation
        self._operation_stamp: tuple[str, str] = ("", "")  # created_at and actor of its first event
        self.previous_sha = "0" * 64
        self.previous_at = ""
        self.count = 0
        self.last_stream = ""  # the stream of the event applied last (an evidence event's export path)
        #: This machine's clock when the replay began. An event time ahead of it is no fault of the
        #: bytes (the writer's clock, or its configured tolerance, may be ahead of ours): counted only.
        self.started_at = utc_now()
        self.future_events = 0
        self.max_lead_ms = 0

    def apply(self, seq: int, data: bytes, sha256: str | None = None) -> tuple[dict[str, Any], int]:
        """Check and re-apply the event expected at ``seq`` whose stored bytes are ``data``
        (``sha256``: their sha256 when the caller has computed it already).

        Returns ``(body, stream_seq)``; raises ``INTEGRITY_ERROR`` naming ``seq``.
        """
        body = self._parse(seq, data)
        try:
            draft = self._recomputed(seq, body, data)
        except Exception:
            if self.schema_every_event:
                self._refuse_by_schema(seq, body)  # what an up-front validation would have named first
            raise
        sha = sha256 or sha256_hex(data)
        return self._applied(seq, data, body, draft, sha)

    def _recomputed(self, seq: int, body: dict[str, Any], data: bytes) -> Draft:
        """The draft event ``seq`` recomputes to; ``INTEGRITY_ERROR`` unless the body rebuilt from it
        has the canonical bytes ``data``."""
        _check_header(seq, body, self.previous_at)
        created_at = body["created_at"]
        if self._following:  # a later event of the operation: written with its first event's time and actor
            draft = self._following.popleft()
            if (created_at, body["actor"]) != self._operation_stamp:
                raise _bad(seq, f"the event carries created_at {created_at} and actor {shown(body['actor'], 80)!r}, "
                           f"not those of its operation's first event ({self._operation_stamp[0]}, "
                           f"{shown(self._operation_stamp[1], 80)!r}), written with it in one transaction",
                           fields=["created_at", "actor"])
        else:
            draft = self._recompute(seq, body)
            self._operation_stamp = (created_at, body["actor"])
        legacy = draft.legacy_fields
        rebuilt = dict(legacy if legacy is not None and body.get("format") == legacy["format"] else draft.fields)
        rebuilt.update(seq=seq, parent_sha256=self.previous_sha, created_at=created_at,
                       actor=body["actor"], request=draft.request)
        try:
            expected = canonical_event_bytes(rebuilt)
        except LedgerError as exc:
            raise _bad(seq, f"the recomputed event has no canonical form: {exc.message}") from None
        if expected != data:
            keys = sorted(k for k in set(rebuilt) | set(body) if rebuilt.get(k) != body.get(k))
            detail = ", ".join(keys) if keys else "its byte form (not canonical JSON)"
            if keys == ["sources"]:
                raise _edited_source(seq, body.get("sources"), rebuilt.get("sources"), self.source.root)
            raise _bad(seq, f"event differs from its recomputation from the request in: {detail}", fields=keys)
        return draft

    def _applied(self, seq: int, data: bytes, body: dict[str, Any], draft: Draft, sha: str) -> tuple[dict[str, Any], int]:
        """Apply checked event ``seq`` to the view (and the sink); ``(body, stream_seq)``."""
        created_at = body["created_at"]
        floors = self.view.account_floors(body["revision"]) if draft.stream == "budget" else None
        money = money_rows(body, self.view.money_consumed) if draft.stream == "budget" else []
        request_sha = sha256_hex(canonical_bytes(draft.request)) if draft.operation_key else None
        stream_seq = self.view.apply(body, sha, draft.stream, draft.operation_key, draft.contents,
                                     request_sha256=request_sha)
        if self.sink is not None:
            row = EventRow(seq=seq, type=draft.type, revision=draft.revision, stream=stored_stream(draft.stream),
                           stream_seq=stream_seq, created_at=created_at, sha256=sha,
                           parent_sha256=self.previous_sha, operation_key=draft.operation_key,
                           request_sha256=request_sha, body=data)
            rows = helper_rows(body, draft) + (floor_rows(body, floors) if floors is not None else []) + money
            self.sink(row, rows, draft.contents)
        self.previous_sha = sha
        self.previous_at = created_at
        if created_at > self.started_at:
            self.future_events += 1
            self.max_lead_ms = max(self.max_lead_ms, ms_ahead(created_at, self.started_at))
        self.last_stream = draft.stream
        self.count += 1
        return body, stream_seq

    def finish(self) -> None:
        """``INTEGRITY_ERROR`` if the history ends inside a multi-event operation."""
        if self._following:
            raise _bad(self.count + 1, f"the history ends before the {len(self._following)} remaining event(s) "
                       "of its last operation")

    def _parse(self, seq: int, data: bytes) -> dict[str, Any]:
        try:
            body = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise _bad(seq, f"stored event is not valid JSON: {exc}") from None
        if type(body) is not dict:
            raise _bad(seq, "stored event is not a JSON object")
        if body.get("seq") != seq:
            raise _bad(seq, f"expected event seq {seq}, found {body.get('seq')!r} (deleted, duplicated or reordered history)")
        if body.get("parent_sha256") != self.previous_sha:
            which = f": event {seq - 1}, or this one, was edited and its sha256 recomputed" if seq > 1 else ""
            raise _bad(seq, "parent_sha256 does not match the previous event (reordered, forked or edited "
                       f"history{which})")
        fmt = body.get("format")
        if fmt not in EVENT_FORMATS:
            raise _bad(seq, f"unknown event format {fmt!r}")
        kind = (fmt, str(body.get("type")))
        if kind not in self._schema_checked:
            self._schema_checked.add(kind)
            self._refuse_by_schema(seq, body)
        return body

    def _refuse_by_schema(self, seq: int, body: dict[str, Any]) -> None:
        """``INTEGRITY_ERROR`` naming the first place where ``body`` breaks its format's JSON Schema."""
        fmt = body["format"]
        errors = sorted(validator(fmt).iter_errors(body), key=lambda e: list(e.absolute_path))
        if errors:
            where = ".".join(str(p) for p in errors[0].absolute_path) or "(top level)"
            raise _bad(seq, f"event does not match schema {fmt}: {where}: {schema_message(errors[0])}")

    def _recompute(self, seq: int, body: Mapping[str, Any]) -> Draft:
        token = replaying_stored_requests()  # held to what the version that wrote it accepted
        try:
            return self._recompute_stored(seq, body)
        finally:
            replayed(token)

    def _recompute_stored(self, seq: int, body: Mapping[str, Any]) -> Draft:
        request = body["request"]
        op = OPERATIONS.get(request.get("op")) if isinstance(request.get("op"), str) else None
        if op is None or op.rule is None or op.replay is None:
            raise _bad(seq, f"unknown operation {request.get('op')!r} in the request")
        try:
            normalized, inputs, config = op.replay(request, body, self.source)
        except LedgerError as exc:
            if exc.code == E.STORAGE_ERROR:  # the system refused a read: nothing is known of the history
                raise LedgerError(exc.code, f"seq {seq}: {exc.message}", **exc.details) from None
            if exc.code == E.INTEGRITY_ERROR:
                raise _bad(seq, exc.message, **{k: v for k, v in exc.details.items() if k != "seq"}) from None
            raise _bad(seq, f"the stored request is refused on replay: {exc.code}: {exc.message}",
                       replay_code=exc.code) from None
        try:
            outcome = op.rule(self.view, normalized, Context(at=body["created_at"], config=config, inputs=inputs))
        except LedgerError as exc:
            raise _bad(seq, f"the stored request is refused on replay: {exc.code}: {exc.message}",
                       replay_code=exc.code) from None
        if isinstance(outcome, Reused):
            raise _bad(seq, f"the request repeats the operation of seq {outcome.seq}")
        if normalized != request:
            raise _bad(seq, "the stored request is not in its normalized form")
        drafts = outcome.events if isinstance(outcome, Outcome) else (outcome,)
        self._following.extend(drafts[1:])
        return drafts[0]


def _edited_source(seq: int, recorded: Any, now: Any, root: Path) -> LedgerError:
    """``INTEGRITY_ERROR`` naming the cited source files whose sha256 differs from the one recorded (and
    saying so when only their line endings changed, as git's ``core.autocrlf`` does on checkout)."""
    def by_path(entries: Any) -> dict[str, Any]:
        return {e.get("path"): e.get("sha256") for e in entries or [] if isinstance(e, dict)}
    before, after = by_path(recorded), by_path(now)
    changed = [path for path in after if before.get(path) != after[path]] or sorted(map(str, before))
    endings = [path for path in changed if path in after and _only_line_endings_differ(root, path, before.get(path))]
    why = (f"only the line endings of {', '.join(endings)} changed (CRLF for LF or the reverse, as git's "
           "core.autocrlf does on checkout): restore the bytes as cited" if endings else "edited since it was cited?")
    return _bad(seq, f"the cited source file(s) {', '.join(map(str, changed))} differ from the sha256 the event "
                f"recorded ({why})", fields=["sources"], paths=changed)


def _only_line_endings_differ(root: Path, path: Any, recorded: Any) -> bool:
    """Whether the file at ``path`` (relative to ``root``), its CRLF line endings made LF or its LF made
    CRLF, has the ``recorded`` sha256. Only a hint for a message: False whenever it cannot be read."""
    if not isinstance(path, str) or not isinstance(recorded, str):
        return False
    return recorded in (line_ending_digests(root, path) or ())
