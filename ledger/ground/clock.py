"""Event time: RFC 3339 UTC timestamps with microseconds (docs/journals.md ``"at"``).

Timestamps are stored as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` so that string order is
time order; the ledger clamps a clock that steps back to the previous event's time.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Callable

from .errors import INVALID_ARGUMENT, LedgerError, describe_value, quoted

_RFC3339 = re.compile(
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)


def format_utc(moment: datetime) -> str:
    """``moment`` (timezone-aware) as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    utc = moment.astimezone(timezone.utc)
    # not strftime("%Y"): it does not pad years below 1000, and string order must be time order
    return (f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:"
            f"{utc.second:02d}.{utc.microsecond:06d}Z")


def utc_now() -> str:
    """The current time in the ledger's timestamp form."""
    return format_utc(datetime.now(timezone.utc))


def parse_at(text: object) -> str:
    """Normalize an RFC 3339 UTC timestamp (``Z``, ``+00:00`` or ``-00:00``) to the stored form.

    Raises ``INVALID_ARGUMENT`` for anything else: other offsets, a missing
    offset, impossible dates, or a value that is not a string.
    """
    if not isinstance(text, str):
        raise LedgerError(INVALID_ARGUMENT, f"'at' must be an RFC 3339 UTC timestamp string, got {describe_value(text)}")
    match = _RFC3339.fullmatch(text)
    if not match:
        raise LedgerError(INVALID_ARGUMENT, f"'at' is not an RFC 3339 timestamp: {quoted(text, 64)}" + (
            "; join the date and the time with T (2026-01-05T10:00:00Z)" if _joined_by_space(text) else ""))
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    if offset not in ("Z", "z", "+00:00", "-00:00"):
        raise LedgerError(INVALID_ARGUMENT, f"'at' must be in UTC (Z), got offset {offset}")
    if (hour, minute, second) == ("23", "59", "60"):
        raise LedgerError(INVALID_ARGUMENT, f"'at' is a leap second ({quoted(text, 64)}), which the ledger cannot "
                          "store (its times are counted in whole days of 86,400 seconds); give :59 or the next second")
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                          micros, tzinfo=timezone.utc)
    except ValueError as exc:
        raise LedgerError(INVALID_ARGUMENT, f"'at' is not a valid time: {exc}") from None
    return format_utc(moment)


def _joined_by_space(text: str) -> bool:
    """Whether ``text`` is a time ``parse_at`` takes but for a space where the ``T`` goes."""
    if len(text) < 11 or text[10] != " ":
        return False
    try:
        parse_at(text[:10] + "T" + text[11:])
    except LedgerError:
        return False
    return True


def microseconds_between(earlier: str, later: str) -> int:
    """Whole microseconds from ``earlier`` to ``later`` (both in the stored form; exact integers)."""
    def micros(text: str) -> int:
        delta = _stored(text) - datetime(1970, 1, 1, tzinfo=timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return micros(later) - micros(earlier)


#: The stored form exactly (``format_utc``'s output); :func:`_stored` reads nothing else.
_STORED = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")


def _stored(text: str) -> datetime:
    """A stored-form time as an aware datetime (``ValueError`` for any other text). Called once
    or twice per replayed event, so it avoids ``strptime``, which costs ten times as much."""
    if not _STORED.fullmatch(text):
        raise ValueError(f"time data {text!r} is not in the stored form YYYY-MM-DDTHH:MM:SS.ffffffZ")
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=timezone.utc)


def describe_micros(micros: int) -> str:
    """A duration for people: ``3600 s``, ``0.25 s``, ``2 d 1 h`` style (exact, no float)."""
    seconds, rest = divmod(micros, 1_000_000)
    if seconds >= 86_400:
        days, left = divmod(seconds, 86_400)
        return f"{days} d {left // 3600} h"
    fraction = f".{rest:06d}".rstrip("0") if rest else ""
    return f"{seconds}{fraction.rstrip('.')} s"


def ms_ahead(moment: str, now: str) -> int:
    """Whole milliseconds by which stored time ``moment`` is later than stored time ``now``
    (negative when earlier); both in the form :func:`format_utc` gives."""
    delta = _stored(moment) - _stored(now)
    return (delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds) // 1000


def checked_clock(clock: object) -> Callable[[], str]:
    """``clock`` (a callable returning an RFC 3339 UTC time, as ``Case.create``/``Case.open`` take it)
    made to return the stored form (``…T10:00:00.000000Z``), as ``at`` is: a time it returns in any
    other form is ``INVALID_ARGUMENT`` when it is read, before anything is written (never stored as
    given, which verify would refuse). ``INVALID_ARGUMENT`` now when ``clock`` is not callable."""
    if clock is utc_now:
        return utc_now
    if not callable(clock):
        raise LedgerError(INVALID_ARGUMENT, f"clock must be a callable returning an RFC 3339 UTC time, got "
                          f"{describe_value(clock)}")

    def now() -> str:
        given = clock()
        try:
            return parse_at(given)
        except LedgerError as exc:
            raise LedgerError(INVALID_ARGUMENT, f"the case's clock returned {describe_value(given)}, not an RFC 3339 "
                              f"UTC time ({exc.message})") from None
    return now


def first_then(first: str, clock: Callable[[], str]) -> Callable[[], str]:
    """A clock that returns ``first`` (a time already read from ``clock``) once, then reads ``clock``."""
    pending = [first]

    def now() -> str:
        return pending.pop() if pending else clock()
    return now
