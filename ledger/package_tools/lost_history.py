"""Exported event files past the ledger's head (docs/files.md): when they continue its history, the
ledger lost them, truncated or rolled back since they were exported (or copied without its
``-wal``), which ``verify`` and ``export`` refuse with a manifest or without one. Files past the head
that continue nothing are no evidence of it (``check_export_tree`` names them as no part of the export).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from ..ground.canonical import sha256_hex
from ..ground.errors import pass_on_interruption
from ..ground.paths import EXPORT_FILE_BYTES_MAX, bytes_at_most
from ..model.package import EVENT_FILE_RE, event_path, well_placed
from ..storage.sqlfiles import statement
from .manifest import export_statement


def _past_head(root: Path, files: list[str], head_seq: int,
               ids: tuple[Any, Any] | None) -> dict[str, tuple[int, Any]]:
    """``{file: (seq, parent_sha256)}`` of the event files among ``files`` (none the ledger exports)
    that hold an event past ``head_seq``, in the order of ``files``. A file that is no event of ours
    (none at all, or one naming another case or package than ``ids``, the ledger's) is left out: it is
    no evidence of truncation (``check_export_tree`` names it)."""
    past = {}
    for relative in files:
        if EVENT_FILE_RE.fullmatch(relative):
            try:
                body = json.loads(bytes_at_most(root / relative, EXPORT_FILE_BYTES_MAX) or b"")
            except (ValueError, RecursionError, OSError) as oserr:
                pass_on_interruption(oserr)
                continue  # over the size of any event too: never read whole
            if not isinstance(body, dict):
                continue
            seq, ours = body.get("seq"), ids is None or (body.get("case_id"), body.get("package_id")) == ids
            if type(seq) is int and seq > head_seq and ours:
                past[relative] = (seq, body.get("parent_sha256"))
    return past


def _ledger_ids(conn: sqlite3.Connection) -> tuple[Any, Any] | None:
    """``(case_id, package_id)`` of the ledger's creation event, or None when it has not one that says."""
    created = conn.execute(statement("manifest_identity", "main")).fetchall()
    try:
        body = json.loads(created[0][0]) if len(created) == 1 else None
    except (ValueError, TypeError, RecursionError):
        return None
    return (body.get("case_id"), body.get("package_id")) if isinstance(body, dict) else None


def lost_continuation(root: Path, unaccounted: list[str], conn: sqlite3.Connection, head_seq: int) -> str | None:
    """Words naming the first exported event file past the ledger's head, among ``unaccounted`` (files
    no event or content of the ledger exports to), when those files read as the ledger's lost
    continuation (:func:`_continues`): a truncated or rolled-back ledger, which verify and export
    refuse, with a manifest or without one. None otherwise."""
    past = _past_head(root, unaccounted, head_seq, _ledger_ids(conn))
    if not past or not _continues(root, past, conn, head_seq):
        return None
    relative, seq = next((relative, seq) for relative, (seq, _) in past.items())
    return (f"{relative} holds event {seq} but the ledger ends at seq {head_seq} (truncated or rolled-back ledger, "
            "or one copied without its ledger.sqlite-wal)")


def _continues(root: Path, past: dict[str, tuple[int, Any]], conn: sqlite3.Connection, head_seq: int) -> bool:
    """Whether event files past the ledger's head read as its lost continuation: the first of them
    (the lowest seq) names as its parent the ledger's last event, or the event exported where that
    event belongs (a ledger rolled back, then continued otherwise: the export holds the longer
    history's event there), or is missing (a gap from the head: the files that would show otherwise
    are gone too). A file claiming the next seq with another parent continues no history of this
    case: it was added or copied in, and ``check_export_tree`` names it as no part of the export."""
    first = min(seq for seq, _ in past.values())
    if first != head_seq + 1:
        return True
    head = conn.execute(statement("head")).fetchone()
    if head is None or head[0] != head_seq:
        return True
    parents = {parent for seq, parent in past.values() if seq == first}
    if head[1] in parents:
        return True
    address = conn.execute(export_statement(conn, "head_address")).fetchone()
    exported = root / event_path(*address) if address is not None and well_placed(*address) else None
    try:
        held = bytes_at_most(exported, EXPORT_FILE_BYTES_MAX) if exported is not None else None
        return held is not None and sha256_hex(held) in parents
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False
