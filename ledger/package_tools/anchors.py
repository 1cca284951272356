"""Anchors: events of a case's history recorded outside it, which ``verify`` checks (docs/files.md).

A hash chain shows a history that disagrees with itself; one rewritten whole, every hash
recomputed, agrees with itself. An anchor, ``{seq: sha256}`` of an event kept elsewhere when it was
written (a head ``ledger verify`` printed, saved in a ticket or a commit), fixes every event up to
``seq``: a rewrite of any of them changes that event's sha256.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any, Mapping

from ..ground import errors as E
from ..ground.errors import LedgerError, describe_value, integrity_error as _bad, quoted
from ..storage.sqlfiles import statement

_SHA256_RE = re.compile(r"[0-9a-f]{64}")
#: The highest seq a ledger can hold (SQLite's integer).
SEQ_MAX = 2 ** 63 - 1


def check_anchors(anchors: Any) -> dict[int, str]:
    """``anchors`` (``{seq: sha256}`` or None) checked: each ``seq`` an integer >= 1, each sha256 64
    lowercase hex digits (``INVALID_ARGUMENT`` otherwise)."""
    if anchors is None:
        return {}
    if not isinstance(anchors, Mapping):
        raise LedgerError(E.INVALID_ARGUMENT, f"anchors must be a mapping of seq to sha256, got {type(anchors).__name__}")
    for seq, sha in anchors.items():
        if type(seq) is not int or not 1 <= seq <= SEQ_MAX:
            raise LedgerError(E.INVALID_ARGUMENT, f"an anchor's seq must be an integer from 1 to {SEQ_MAX} (2**63-1), "
                              f"got {describe_value(seq)}"
                              + (f" of the type {type(seq).__name__} (give int({seq}))" if isinstance(seq, int)
                                 and not isinstance(seq, bool) and type(seq) is not int else ""))
        if not isinstance(sha, str) or not _SHA256_RE.fullmatch(sha):
            raise LedgerError(E.INVALID_ARGUMENT, f"the anchor of seq {seq} must be a sha256 (64 lowercase hex "
                              f"digits), got {quoted(sha, 80) if isinstance(sha, str) else describe_value(sha)}")
    return dict(anchors)


def parse_anchor(text: str) -> tuple[int, str]:
    """``"SEQ:SHA256"`` (as ``ledger verify`` prints a head; ``--anchor``) → ``(seq, sha256)``: a seq
    from 1 in ASCII digits, 64 lowercase hex digits (``INVALID_ARGUMENT`` otherwise)."""
    seq, _, sha = text.partition(":")
    if not (seq.isascii() and seq.isdigit() and len(seq) <= 18 and int(seq) >= 1 and _SHA256_RE.fullmatch(sha)):
        raise LedgerError(E.INVALID_ARGUMENT, "expected SEQ:SHA256 (a seq from 1, a colon, 64 lowercase hex "
                          "digits, as 'ledger verify' prints a head)")
    return int(seq), sha


def anchor_or_none(seq: Any, sha: Any) -> dict[int, str] | None:
    """``{seq: sha}`` when the two make an anchor (:func:`check_anchors`), else None: for heads a tool
    recorded itself in a file anyone may have edited (a fleet export's record of a case)."""
    try:
        return check_anchors({seq: sha})
    except (LedgerError, TypeError):  # TypeError: a seq that cannot be a key
        return None


def check_anchored_events(conn: sqlite3.Connection, anchors: dict[int, str], head_seq: int) -> None:
    """Each anchored event is in the ledger (attached to ``conn`` as ``orig``, which ends at ``head_seq``)
    with its anchored sha256 (``verify_case(..., anchors=)``)."""
    for seq, sha in sorted(anchors.items()):
        if seq > head_seq:
            raise _bad(None, f"the ledger ends at seq {head_seq}, before the anchored event {seq}: it was truncated "
                       "or rolled back since that anchor was taken, unless the anchor was taken of another case or "
                       "copied wrong (check its seq)", anchored_seq=seq)
        found = conn.execute(statement("manifest_head", "orig"), {"seq": seq}).fetchone()
        if found is None or found[0] != sha:
            raise _bad(seq, f"event {seq} has sha256 {found[0] if found else None}, not the anchored {sha}: the "
                       "history up to it was rewritten since that anchor was taken (its hashes recomputed), unless "
                       "the anchor itself was taken of another case or copied wrong (check its seq and hash)",
                       anchored_seq=seq)
