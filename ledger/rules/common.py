"""What every rule shares: vocabulary, outcomes, the view protocol, id and reason checks,
operation identity, replay or conflict (docs/concepts.md).

A rule is a pure function ``rule(view, request, context)``: it reads the current
state through a :class:`LedgerView`, never writes, and returns :class:`Reused`
(an identical replay), a :class:`Draft` (one event to append) or an
:class:`Outcome` (several events, optionally followed by a refusal that is raised
after they are committed). It raises :class:`~ledger.ground.errors.LedgerError` in the
order of docs/concepts.md when the operation is refused and nothing may be written.
Integers only: no float touches a unit, score or ratio.
"""

from __future__ import annotations

import contextvars
import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from typing import AbstractSet, Any, Callable, Iterable, Mapping, Protocol

from ..ground import errors as E
from ..ground.canonical import SAFE_INTEGER_MAX, canonical_sha256
from ..ground.config import BudgetConfig
from ..ground.errors import LedgerError, describe_value, limit_reached, shortened

# --- vocabulary -------------------------------------------------------------
CREATED = "CREATED"
GENERATING = "GENERATING_HYPOTHESES"
INVESTIGATING = "INVESTIGATING_HYPOTHESES"
BLOCKED = "BLOCKED"
EVALUATING = "EVALUATING"
CLOSED = "CLOSED"
CASE_STATES = (CREATED, GENERATING, INVESTIGATING, BLOCKED, EVALUATING, CLOSED)
#: Moves made with ``transition``; GENERATING_HYPOTHESES is reached only by ``open_revision``.
TRANSITIONS = frozenset({
    (GENERATING, INVESTIGATING),
    (INVESTIGATING, BLOCKED),
    (BLOCKED, INVESTIGATING),
    (INVESTIGATING, EVALUATING),
    (EVALUATING, CLOSED),
})
OPEN_REVISION_FROM = frozenset({CREATED, EVALUATING, CLOSED})
MUTABLE_STATES = frozenset({GENERATING, INVESTIGATING})

STATUS_NEW = "new"
STATUS_INVESTIGATING = "investigating"
STATUS_EXHAUSTED = "budget_exhausted"
STATUS_ABANDONED = "abandoned_low_information_gain"
STATUS_REJECTED = "rejected"
TERMINAL_STATUSES = frozenset({STATUS_EXHAUSTED, STATUS_ABANDONED, STATUS_REJECTED})
REASON_BELOW_FLOOR = "remaining_below_floor"
REASON_LOW_INFORMATION = "low_information_streak"

ACTION_RESERVED = "reserved"
ACTION_AWAITING = "awaiting_assessment"
ACTION_SETTLED = "settled"
ACTION_FAILED = "failed"
CLOSED_ACTION_STATUSES = frozenset({ACTION_SETTLED, ACTION_FAILED})

HYPOTHESIS_ID_RE = re.compile(r"^H[1-9][0-9]*$")
ACTION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
ACTION_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
CASE_ID_RE = ACTION_ID_RE
#: Canonical encodings of the empty evidence payloads of docs/concepts.md.
EMPTY_EVIDENCE = frozenset({b"null", b"{}", b"[]", b'""'})

STATEMENT_CHARS_MAX = 4000
REASON_CHARS_MAX = 4000
ACTION_NAME_CHARS_MAX = 128
SOURCE_REFS_MAX = 256
SOURCE_REF_CHARS_MAX = 1024
SCORE_MAX = 100


# --- results of applying a rule ----------------------------------------------
@dataclass(frozen=True)
class Reused:
    """An identical replay: nothing is written; ``seq`` is the original event's."""

    seq: int


@dataclass(frozen=True)
class Draft:
    """The derived content of one event about to be appended.

    ``fields`` are the body's keys except the chain fields (``seq``,
    ``parent_sha256``, ``created_at``, ``actor``, ``request``) that the session
    adds; ``operation_key`` is the operation's identity (None for an event that
    is not the identity of an operation, such as the later events of an
    :class:`Outcome`); ``contents`` maps sha256 → canonical bytes of new content
    rows; ``terminated`` names the accounts this event makes terminal.
    """

    type: str
    stream: str  # "case" or "budget": the export folder and numbering of the event
    revision: int
    operation_key: str | None
    request: dict[str, Any]
    fields: dict[str, Any]
    contents: dict[str, bytes] = field(default_factory=dict)
    terminated: tuple[str, ...] = ()
    #: bytes this event may hold beyond ``event_bytes_max``: the evidence content or attachments it
    #: carries, each already bounded by ``evidence_artifact_bytes_max``
    size_allowance: int = 0
    #: The same event in the older format a ledger may have stored it in (``evidence-index-v1``
    #: before ``evidence-index-v2``, docs/evidence.md): accepted on replay only where that format
    #: was still being written; new events are always written as ``fields``.
    legacy_fields: dict[str, Any] | None = None


@dataclass(frozen=True)
class Outcome:
    """Several events of one operation, appended in order in one transaction.

    With ``refusal`` set, the events are committed and then ``refusal`` is raised:
    "record these, then refuse" (a ``limit.exceeded`` event is written although
    the reservation that met the limit is refused). Verify replays every event.
    """

    events: tuple[Draft, ...]
    refusal: LedgerError | None = None


#: Case events never refused for room: the case's creation, its outcomes, ``limit.approaching``
#: (at most one per establishment and dimension) and every transition but the one into BLOCKED
#: (so a case can always move on, leave BLOCKED, be evaluated and be closed). Opening a revision
#: and blocking the case count: repeated at will, they could grow the history without bound.
CASE_EVENTS_ALWAYS_WRITTEN = frozenset({"case.created", "case.outcome_recorded", "limit.approaching"})


def _counts_against_case_room(draft: Draft) -> bool:
    if draft.stream != "case" or draft.type in CASE_EVENTS_ALWAYS_WRITTEN:
        return False
    return draft.type != "case.transitioned" or draft.fields.get("state") == BLOCKED


def check_case_room(view: "LedgerView", drafts: tuple[Draft, ...], limits: Mapping[str, int] | None,
                    refusal: LedgerError | None = None) -> None:
    """``LIMIT_REACHED`` (writing nothing) when ``drafts`` would take the case stream past
    ``case_events_max`` with events a caller can repeat without bound: a refusal recorded as
    ``limit.exceeded`` (one per new action id), ``scope.established``,
    ``scope.increase_requested``, feedback drafts and confirmations, ``revision.opened`` and a
    transition into BLOCKED (docs/scopes.md, "Limits on the history"). A refusal that ends accounts (``budget.limit_terminated``, room for which
    ``budget_events_max`` keeps) is always recorded: it happens once per account. ``refusal`` is
    the refusal those events would have recorded, named in the message. No check on replay
    (``limits`` None)."""
    if limits is None or "case_events_max" not in limits:
        return
    ends_accounts = any(d.type == "budget.limit_terminated" for d in drafts)
    counted = sum(1 for d in drafts if _counts_against_case_room(d)
                  and not (ends_accounts and d.type == "limit.exceeded"))
    if not counted:
        return
    total = view.next_stream_seq("case", 0) - 1
    limit = limits["case_events_max"]
    if total + counted > limit:
        what = f"; the refusal it would record was not recorded: {refusal.code}: {refusal.message}" \
            if refusal is not None else ""
        raise limit_reached("case_events_max", f"the ledger holds {total} case events of its limit of {limit}; "
                            f"this operation needs {counted}{what}", case_events=total)


@dataclass(frozen=True)
class Context:
    """What a rule knows besides the view and the request.

    ``at`` is the resolved event time (after the clamp: never before the
    previous event's); ``config`` the caller's budget policy (None: the frozen
    one); ``limits`` the operational limits (None on replay: the history was
    accepted under the limits of its day); ``inputs`` the operation's bytes that
    are not part of its request (evidence payload, resolved sources).
    """

    at: str
    config: BudgetConfig | None = None
    limits: Mapping[str, int] | None = None
    inputs: Mapping[str, Any] = field(default_factory=dict)


class LedgerView(Protocol):
    """What the rules may read; :mod:`ledger.model.views` implements it over SQL and in memory."""

    def case(self) -> dict[str, Any] | None: ...  # case_id, package_id, state, state_seq, revision
    def revision(self, revision: int) -> dict[str, Any] | None: ...
    def policy_config(self, revision: int) -> BudgetConfig: ...  # the frozen policy
    def previous_policy(self, revision: int) -> tuple[dict[str, Any], str] | None: ...
    def budget_head(self, revision: int) -> dict[str, Any] | None: ...  # newest budget event's state
    def accounts(self, revision: int) -> dict[str, dict[str, Any]]: ...
    def operation(self, key: str) -> tuple[int, str] | None: ...
    def action(self, revision: int, hypothesis_id: str, action_id: str) -> dict[str, Any] | None: ...
    def content_seen(self, sha256: str) -> bool: ...
    def content_bytes_total(self) -> int: ...
    def budget_events_total(self) -> int: ...
    def head(self) -> tuple[int, str, str]: ...  # seq, sha256, created_at of the newest event
    def next_stream_seq(self, stream: str, revision: int) -> int: ...
    # scoped limits (docs/scopes.md)
    def scope(self, name: str) -> dict[str, Any] | None: ...  # newest establishment: seq, scope, issuer, limits, …
    def warned(self, name: str, establishment_seq: int) -> frozenset[str]: ...  # dimensions already warned
    def duration_scopes(self) -> AbstractSet[str]: ...  # scopes whose newest establishment limits duration_ms
    def money_consumed(self, revision: int | None, hypothesis_id: str | None) -> int: ...
    def revision_issuer(self, revision: int) -> str | None: ...  # the actor that initialized its budget
    def lowest_pct_since_grant(self, revision: int, hypothesis_id: str) -> int | None: ...
    # the evidence store (docs/evidence.md)
    def evidence_operation(self, operation_id: str) -> str | None: ...  # a record id of that operation
    def evidence_binding(self, revision: int, hypothesis_id: str, action_id: str) -> tuple[str, str] | None: ...
    def first_record_with_content(self, sha256: str) -> str | None: ...
    def atom_seen(self, atom_sha256: str) -> bool: ...
    def result_atoms_seen(self, atom_ids: list[str]) -> int: ...  # how many of these distinct ids a result returned before
    def evidence_record(self, record_id: str) -> dict[str, Any] | None: ...
    def evidence_records_total(self) -> int: ...
    def evidence_index_head(self) -> dict[str, Any] | None: ...  # index_sha256, next_record_number, record_count,
    #                                                               format, records (the v1 list, or None)
    def indexed_record_sha(self, record_id: str) -> str | None: ...  # the record hash its index lists
    def reservation_seq(self, revision: int, hypothesis_id: str, action_id: str) -> int | None: ...
    # asynchronous tests and feedback (docs/evidence.md)
    def test_request(self, operation_id: str) -> dict[str, Any] | None: ...  # seq, revision, hypothesis_id, action_id, kind
    def test_of_action(self, revision: int, hypothesis_id: str, action_id: str) -> str | None: ...  # its operation id
    def limit_refusal(self, identity: Mapping[str, Any]) -> int | None: ...  # seq of that limit.exceeded, docs/scopes.md
    def feedback(self, feedback_id: str) -> dict[str, Any] | None: ...  # the draft, its reply, seq, confirmed
    def feedback_total(self) -> int: ...
    def attachment(self, sha256: str) -> bytes | None: ...  # the stored content row of a feedback attachment


def check_hypothesis_id(value: Any) -> str:
    if not isinstance(value, str) or not HYPOTHESIS_ID_RE.fullmatch(value):
        raise LedgerError(E.INVALID_ID, f"hypothesis id must match H1, H2, …, got {describe_value(value)}")
    return value


def check_action_id(value: Any, what: str = "action_id") -> str:
    if not isinstance(value, str) or not ACTION_ID_RE.fullmatch(value):
        raise LedgerError(
            E.INVALID_ID,
            f"{what} must match ^[A-Za-z0-9][A-Za-z0-9._:-]{{0,127}}$, got {describe_value(value)}",
        )
    return value


def check_action_name(value: Any) -> str:
    if (not isinstance(value, str) or len(value) > ACTION_NAME_CHARS_MAX
            or not ACTION_NAME_RE.fullmatch(value)):
        raise LedgerError(
            E.INVALID_ID,
            f"action name must look like 'source.read_context', got {describe_value(value)}",
        )
    return value


def check_case_id(value: Any) -> str:
    """A case id follows the action-id pattern (``INVALID_ID`` otherwise)."""
    return check_action_id(value, "case_id")


#: Unicode categories that show nothing: spaces (Zs), controls (Cc) and format characters (Cf,
#: e.g. the zero-width space U+200B); a text made only of these (or whitespace) is blank.
_INVISIBLE_CATEGORIES = frozenset({"Zs", "Cc", "Cf"})

#: Characters of other categories that show nothing: Unicode's default-ignorable code points that are
#: not format characters (the Hangul fillers U+115F, U+1160, U+3164, U+FFA0, the combining grapheme
#: joiner U+034F, the variation selectors, the Khmer inherent vowels U+17B4-U+17B5, the Mongolian
#: free variation selectors, the reserved U+2065, U+FFF0-U+FFF8 and U+E0000-U+E0FFF) and the blank
#: Braille pattern U+2800, which prints as an empty cell. Earlier builds took all of these but the
#: Hangul fillers and U+034F in labels, and all of them in reasons and statements: a stored request
#: is replayed (:func:`replaying_stored_requests`) without them, so the ledgers those builds wrote verify.
_SHOWS_NOTHING = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2065\u2800\u3164\ufe00-\ufe0f"
                            "\uffa0\ufff0-\ufff8\U000e0000-\U000e0fff]")
#: The part of :data:`_SHOWS_NOTHING` every version refused in labels (letters that print as nothing).
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u034f")
#: True while a request stored in a ledger is replayed (verify, import): texts are held to the rule of the
#: versions that may have written it, not to the newer refusals of :data:`_SHOWS_NOTHING`.
_REPLAYING: contextvars.ContextVar[bool] = contextvars.ContextVar("ledger_replaying_stored_requests", default=False)


def replaying_stored_requests() -> contextvars.Token[bool]:
    """Hold text checks to what every version accepted, until :func:`replayed` with the token returned."""
    return _REPLAYING.set(True)


def replayed(token: contextvars.Token[bool]) -> None:
    """End what :func:`replaying_stored_requests` began."""
    _REPLAYING.reset(token)


def _shows_nothing(ch: str, *, always: frozenset[str] = frozenset()) -> bool:
    """Whether ``ch`` is one of :data:`_SHOWS_NOTHING` refused now (those in ``always`` also on replay)."""
    return ch in always or (_SHOWS_NOTHING.match(ch) is not None and not _REPLAYING.get())


#: The ASCII characters that show nothing: the controls U+0000–U+001F and U+007F, and the space.
_ASCII_BLANK = re.compile(r"[\x00-\x20\x7f]*")


def is_blank(text: str) -> bool:
    """True when ``text`` shows nothing: only whitespace, spaces, controls, format characters or other
    characters that show nothing (the Hangul filler U+3164, a variation selector, …: ``_SHOWS_NOTHING``)."""
    if text.isascii():  # the common case, without a Unicode lookup per character
        return _ASCII_BLANK.fullmatch(text) is not None
    return all(ch.isspace() or unicodedata.category(ch) in _INVISIBLE_CATEGORIES or _shows_nothing(ch) for ch in text)

#: Categories that show nothing or break the line: controls, format characters, separators, spaces (but U+0020).
_UNSEEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Zs"})


def unseen_character(text: str) -> str | None:
    """The first character of ``text`` that shows nothing or breaks the line, as ``U+XXXX``: a control
    (Cc: newline, tab…), a format character (Cf: the zero-width space U+200B, a byte order mark…), a
    line or paragraph separator (Zl, Zp: U+2028, U+2029), a space other than U+0020 (Zs: the no-break
    space U+00A0 prints as a plain one) or a letter that prints as nothing (the Hangul filler U+3164);
    None when it has none. A label holding one prints like another label, or splits its line."""
    if text.isascii():
        found = re.search(r"[\x00-\x1f\x7f]", text)
        return f"U+{ord(found.group()):04X}" if found else None
    return next((f"U+{ord(ch):04X}" for ch in text if unicodedata.category(ch) in _UNSEEN_CATEGORIES and ch != " "
                 or _shows_nothing(ch, always=_BLANK_LETTERS)), None)


def label_problem(text: str) -> str | None:
    """Why ``text`` would read as another label (an outcome, a policy name), or None: spaces around it,
    a character that shows nothing, breaks the line or prints as another (:func:`unseen_character`), or
    letters not in their composed form (NFC: ``é`` written as ``e`` and a combining accent prints as the
    composed ``é``, another label)."""
    if text != text.strip():
        return "has spaces around it; write it without them"
    unseen = unseen_character(text)
    if unseen:
        return (f"holds {unseen}, a character that shows nothing, breaks the line or prints as another (a "
                "control, format or space character): write it without it")
    if not text.isascii() and not unicodedata.is_normalized("NFC", text):
        first = next((f" U+{ord(ch):04X}" for ch in text
                      if unicodedata.combining(ch) or unicodedata.normalize("NFC", ch) != ch), "")
        return (f"is not in composed form (NFC): it holds{first or ' characters'} where another character prints the "
                "same (a letter and a combining accent, say, for the one accented letter); write it composed")
    return None


def check_reason(value: Any) -> str:
    """A reason: a non-blank string (:func:`is_blank`; ``REASON_REQUIRED`` otherwise) of at most
    ``REASON_CHARS_MAX`` characters without NUL or lone surrogates (``INVALID_ARGUMENT``)."""
    if value is None or (isinstance(value, str) and is_blank(value)):
        raise LedgerError(E.REASON_REQUIRED, "a non-blank reason is required")
    if not isinstance(value, str):
        raise LedgerError(E.INVALID_ARGUMENT, f"reason must be a string, got {describe_value(value)}")
    if len(value) > REASON_CHARS_MAX:
        raise LedgerError(E.INVALID_ARGUMENT, f"reason longer than {REASON_CHARS_MAX} characters")
    check_text(value, "reason")
    return value


def check_text(value: str, what: str) -> None:
    """Lone surrogates have no UTF-8 (and no canonical JSON) form; NUL would be cut short by
    SQLite's text functions (the views read reasons with ``json_extract``)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise LedgerError(E.INVALID_JSON, f"{what} contains a lone surrogate") from None
    if "\x00" in value:
        raise LedgerError(E.INVALID_ARGUMENT, f"{what} contains a NUL character")


# --- helpers ------------------------------------------------------------------------
def hypothesis_number(hypothesis_id: str) -> int:
    return int(hypothesis_id[1:])


@lru_cache(maxsize=256)
def _ordered(ids: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(ids, key=hypothesis_number))


def hypothesis_order(ids: Iterable[str]) -> tuple[str, ...]:
    """``ids`` in hypothesis order (H2 before H10); a revision's set of IDs is ordered once per process."""
    return _ordered(tuple(ids))


def sorted_accounts(accounts: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Accounts in hypothesis order (H2 before H10)."""
    return [dict(accounts[h]) for h in hypothesis_order(accounts)]


def operation_key(revision: int, op: str, hypothesis_id: str | None = None,
                  action_id: str | None = None) -> str:
    """Identity of an operation (docs/concepts.md): ``revision:op[:hypothesis[:action_id]]``."""
    parts = [str(revision), op]
    if hypothesis_id is not None:
        parts.append(hypothesis_id)
    if action_id is not None:
        parts.append(action_id)
    return ":".join(parts)


#: What to do instead of an operation that conflicts, by its operation name (the key's second part).
_CONFLICT_ADVICE = {
    "grant": "a new grant needs a new grant_id",
    "record_outcome": "a revision's outcome is recorded once",
    "store_feedback": "a requested test's feedback is stored once, from one draft",
    "record_result": "an action's result is recorded once; a new action needs a new action id",
    "settle": "an action is closed once (settled or failed); a new action needs a new action id",
    "fail": "an action is closed once (settled or failed); a new action needs a new action id",
    "record_evidence": "an action's evidence record is linked once; a new action needs a new action id",
}
#: Budget operations whose identity ends in the action id.
_ACTION_OPERATIONS = frozenset({"reserve", "record_result", "settle", "fail", "record_evidence", "request_test"})


def replay_or_conflict(view: LedgerView, key: str, request: Mapping[str, Any],
                       advice: Callable[[], str] | None = None, *, conflict: bool = True) -> Reused | None:
    """:class:`Reused` when the operation ``key`` was applied with this very ``request``, None when it
    never was; ``OPERATION_CONFLICT`` when it was applied with other inputs, saying what to do
    instead: ``advice()``, else the advice for the key's operation (docs/concepts.md, "Using the
    Python API"); with ``conflict=False`` None then too (the operation's own checks answer it)."""
    found = view.operation(key)
    if found is None:
        return None
    seq, request_sha256 = found
    if request_sha256 != canonical_sha256(request):
        if not conflict:
            return None
        op = key.split(":")[1]
        then = advice() if advice is not None else _CONFLICT_ADVICE.get(op, (
            "a new action needs a new action id" if op in _ACTION_OPERATIONS else
            "sent again unchanged it returns its first result; a different request needs an id of its own"))
        raise LedgerError(
            E.OPERATION_CONFLICT, f"operation {key} was already applied at seq {seq} with different inputs; {then}",
            seq=seq, operation=key,
        )
    return Reused(seq)


def require_case(view: LedgerView) -> dict[str, Any]:
    case = view.case()
    if case is None:
        raise LedgerError(E.INTEGRITY_ERROR, "the ledger has no case.created event")
    return case


def not_initialized(revision: int) -> LedgerError:
    """``NOT_INITIALIZED`` for a budget call on ``revision``, which has no budget yet; revision 0 means
    no revision is open yet, which ``initialize`` cannot mend before one is opened."""
    return LedgerError(E.NOT_INITIALIZED, f"revision {revision} has no budget yet; run initialize first"
                       if revision else "no revision is open yet; open one, then run initialize")


# --- the refusals a new reservation meets (reserve, and the soft gate that foresees them) -----------
def unknown_hypothesis_error(revision: int, hypothesis_id: str) -> LedgerError:
    """``UNKNOWN_HYPOTHESIS``: a well-formed id (of any length) that ``revision`` does not have."""
    return LedgerError(E.UNKNOWN_HYPOTHESIS, f"revision {revision} has no hypothesis {shortened(hypothesis_id, 80)}",
                       hypothesis_id=hypothesis_id)


def case_state_error(what: str, states: str, state: str) -> LedgerError:
    """``CASE_STATE``: ``what`` needs one of ``states`` and the case is in ``state``; a case no revision
    was opened in yet (``CREATED``) is told to open one."""
    first = "; open a revision first ('ledger revision open', open_revision in Python)" if state == "CREATED" else ""
    return LedgerError(E.CASE_STATE, f"{what} needs {states}; the case is {state}{first}", state=state)


def account_terminal_error(hypothesis_id: str, account: Mapping[str, Any]) -> LedgerError:
    return LedgerError(E.ACCOUNT_TERMINAL, f"{hypothesis_id} is {account['status']} ({account['terminal_reason']})",
                       hypothesis_id=hypothesis_id, status=account["status"])


def action_pending_error(hypothesis_id: str, account: Mapping[str, Any]) -> LedgerError:
    pending = account["pending_action_id"]
    return LedgerError(E.ACTION_PENDING, f"{hypothesis_id} has pending action {pending}; settle or fail it first",
                       hypothesis_id=hypothesis_id, pending_action_id=pending)


#: Events a reserved action may still need to close: ``record_result`` and ``settle``.
CLOSING_EVENTS_PER_ACTION = 2


def check_budget_room(view: LedgerView, limits: Mapping[str, int] | None,
                       accounts: Mapping[str, Mapping[str, Any]] | None = None, *,
                       opens_action: bool = False, events: int = 1, refusal: LedgerError | None = None) -> None:
    """``LIMIT_REACHED`` unless ``budget_events_max`` leaves room for this event and for closing
    every pending action (docs/errors.md: "so nothing is stranded"); ``refusal``: the refusal the
    events would have recorded, named in the message (as :func:`check_case_room` names it).

    Each pending action, and the one a reserve opens, keeps room for
    :data:`CLOSING_EVENTS_PER_ACTION` events, so ``record_result``, ``settle``
    and ``fail`` are never refused for room and a debit is never stranded.
    """
    if limits is None:
        return
    limit = limits["budget_events_max"]
    already = sum(1 for account in (accounts or {}).values() if account["pending_action_id"] is not None)
    pending = already + (1 if opens_action else 0)
    total = view.budget_events_total()
    if total + events + CLOSING_EVENTS_PER_ACTION * pending > limit:
        closing = [f"{already} pending action(s)"] if already else []
        if opens_action:
            closing.append("the action it opens")
        kept = f" and {CLOSING_EVENTS_PER_ACTION * pending} kept to close {' and '.join(closing)}" if pending else ""
        what = f"; the refusal it would record was not recorded: {refusal.code}: {refusal.message}" \
            if refusal is not None else ""
        raise limit_reached("budget_events_max", f"the ledger holds {total} budget events of its limit "
                            f"of {limit}; this operation needs {events}{kept}{what}", budget_events=total)


def spent_limit_error(hypothesis_id: str, account: Mapping[str, Any], cost: int) -> LedgerError | None:
    """``LIMIT_REACHED`` when reserving ``cost`` more would take the account's ``spent_units`` past
    2**53 − 1 (every number in an event stays an exact JSON integer, docs/concepts.md), else None."""
    if account["spent_units"] + cost <= SAFE_INTEGER_MAX:
        return None
    return LedgerError(
        E.LIMIT_REACHED, f"{hypothesis_id} has spent {account['spent_units']} units; {cost} more would pass 2**53-1, "
        "the largest exact JSON integer (a fixed limit, no setting changes it)", hypothesis_id=hypothesis_id,
        limit="spent_units")


def insufficient_budget_error(action: str, cost: int, hypothesis_id: str, remaining: int) -> LedgerError:
    return LedgerError(E.INSUFFICIENT_BUDGET, f"{action} costs {cost} units; {hypothesis_id} has {remaining} remaining",
                       hypothesis_id=hypothesis_id, cost_units=cost, remaining_units=remaining)


def check_source_ref_list(source_refs: Any) -> list[str]:
    """A list of distinct relative path strings (``SOURCE_REF_INVALID`` otherwise)."""
    if source_refs is None:
        return []
    if not isinstance(source_refs, (list, tuple)):
        raise LedgerError(E.SOURCE_REF_INVALID, "source_refs must be a list of relative paths")
    if len(source_refs) > SOURCE_REFS_MAX:
        raise LedgerError(E.SOURCE_REF_INVALID, f"more than {SOURCE_REFS_MAX} source refs")
    seen: set[str] = set()
    for ref in source_refs:
        if not isinstance(ref, str) or not ref or len(ref) > SOURCE_REF_CHARS_MAX:
            raise LedgerError(E.SOURCE_REF_INVALID, f"source ref must be a non-empty path string, got {describe_value(ref)}")
        if ref in seen:
            raise LedgerError(E.SOURCE_REF_INVALID, f"source ref {ref!r} listed twice")
        if "\x00" in ref:
            raise LedgerError(E.SOURCE_REF_INVALID, "a source ref contains a NUL character")
        check_text(ref, "source ref")
        seen.add(ref)
    return list(source_refs)
