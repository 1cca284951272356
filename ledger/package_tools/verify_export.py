"""Verify's look at the export beside the ledger (docs/files.md, "verify"): every exported event and
content file that exists must hold the ledger's bytes, ``manifest.json`` must be what an export at its
head writes, and an exported event past the ledger's head that continues its history means the ledger
was truncated or rolled back. The first difference is ``INTEGRITY_ERROR`` naming its ``seq`` and
what it is: another package's file or manifest, another history forked at that event, or an edit.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from ..ground.canonical import stored_bytes
from ..ground.errors import integrity_error as _bad, pass_on_interruption
from ..ground.paths import bytes_at_most
from ..model.package import check_export_tree, content_path, event_path, missing_words, well_placed
from ..storage.sqlfiles import statement
from .atomic_files import same_bytes
from .lost_history import lost_continuation
from .manifest import check_manifest, check_manifest_identity, export_statement


def check_export(root: Path, conn: sqlite3.Connection, head_seq: int, manifest: dict[str, Any] | None,
                  files: list[str]) -> tuple[int, int | None]:
    """Exported files that exist (``files``, listed before ``conn``'s read began) must hold the ledger's bytes; the
    ``manifest`` must be what an export at its head writes; an exported event the ledger no longer has means
    truncation. Returns (files checked, the manifest's head seq or None without a manifest)."""
    checked = 0
    if manifest is None and not files:
        return 0, None  # never exported: no file to compare, none can be missing (the loops below find nothing)
    # the files first, by seq: a history that forked (or another case's ledger) is named at the first
    # event that differs, not at the manifest's head or as a truncation
    if manifest is not None:  # another package's manifest (or ledger) is named so before any file is compared
        check_manifest_identity(manifest, conn)
    limit = manifest["head"]["seq"] if manifest else 0
    present = set(files)  # every regular file under analysis/ (a link there was refused above)
    top = os.fspath(root)
    for seq, stream, revision, stream_seq, body in conn.execute(export_statement(conn, "events_for_export")):
        if not well_placed(stream, revision, stream_seq):
            continue
        relative = event_path(stream, revision, stream_seq)
        if relative in present and _still_there(top, relative, stored_bytes(body), seq, f"exported file {relative}"):
            checked += 1
        elif seq <= limit:
            raise _bad(seq, f"exported file {relative} {missing_words(os.path.join(top, relative))}")
    for sha, seq, body in conn.execute(statement("contents_for_export")):
        relative = content_path(sha)
        if relative in present and _still_there(top, relative, stored_bytes(body), seq, f"exported content {relative}"):
            checked += 1
        elif seq <= limit:
            raise _bad(seq, f"exported content {relative} {missing_words(os.path.join(top, relative))}")
    if manifest is not None:
        check_manifest(manifest, conn, head_seq)
    # a row whose columns are edited out of their types has no path: the row comparison names it
    known = {event_path(*row) for row in conn.execute(export_statement(conn, "event_addresses")) if well_placed(*row)}
    lost = lost_continuation(root, [relative for relative in files if relative not in known], conn, head_seq)
    if lost:
        raise _bad(head_seq + 1, lost)
    check_export_tree(files, known | {content_path(sha) for (sha,) in conn.execute(statement("content_shas"))},
                      conn.execute(statement("last_revision")).fetchone()[0])
    return checked, manifest["head"]["seq"] if manifest else None


def _still_there(top: str, relative: str, data: bytes, seq: int, what: str) -> bool:
    """Whether the exported file ``relative`` (listed before the ledger's snapshot was read) is still
    there holding ``data``: True when it is; False when it is gone since (an interrupted export
    removed what it had written), so it counts as absent; ``INTEGRITY_ERROR`` at ``seq`` naming
    ``what`` when it holds other bytes (``STORAGE_ERROR`` when it cannot be read)."""
    path = os.path.join(top, relative)
    if same_bytes(path, data, refused=f"the exported file {relative}"):
        return True
    if not os.path.lexists(path):
        return False
    try:
        theirs, ours = _event(bytes_at_most(Path(path), len(data) * 4 + 65_536)), _event(data)
    except OSError as oserr:
        pass_on_interruption(oserr)
        theirs, ours = {}, {}
    ids = [(event.get("case_id"), event.get("package_id")) for event in (theirs, ours)]
    if None not in ids[0] and None not in ids[1] and ids[0] != ids[1]:
        raise _bad(seq, f"{what} is another package's: it names case {ids[0][0]} package {ids[0][1]}, the ledger case "
                   f"{ids[1][0]} package {ids[1][1]} (another case's export copied in, or another case's "
                   "ledger.sqlite put in place)")
    if _forks(theirs, ours, seq):
        raise _bad(seq, f"{what} differs from the ledger: it holds another event {seq} after the same event "
                   f"{seq - 1} (edited, or another history exported from there: a ledger put back from an older copy "
                   "and continued otherwise?); if it is another history, 'ledger import' the export into a new folder "
                   "to keep it (import refuses an edited one, naming what differs) before 'ledger export' writes the "
                   "ledger's event over it")
    raise _bad(seq, f"{what} differs from the ledger: other bytes, edited or reformatted ('ledger export' writes "
               "it again from the ledger: keep the differing file first if it is evidence)")


def _event(data: bytes | None) -> dict[str, Any]:
    """The event ``data`` holds; {} when it is none (no JSON object, or too large to be one)."""
    try:
        event = json.loads(data) if data is not None else None
    except (ValueError, RecursionError):
        return {}
    return event if isinstance(event, dict) else {}


def _forks(theirs: dict[str, Any], ours: dict[str, Any], seq: int) -> bool:
    """Whether an exported event ``theirs``, which differs from the ledger's event ``seq`` (``ours``), is
    another event ``seq`` with the same parent: the same history up to ``seq - 1``, another after
    (the same event in other bytes, reformatted, is no other history)."""
    parent = theirs.get("parent_sha256")
    return bool(ours) and theirs != ours and theirs.get("seq") == seq and parent is not None \
        and parent == ours.get("parent_sha256")


