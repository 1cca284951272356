"""``manifest.json``: the export's commit point and pointer file (docs/files.md).

It names the case, its state and revision, the head ``{seq, sha256}`` of the
chain at export time and the newest budget event. It is never the source of
truth: verify checks it byte for byte against what an export of the ledger at
that head writes, so a truncated or rolled-back ledger is caught.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Mapping

from ..storage.sqlfiles import statement
from ..ground.canonical import canonical_bytes, parse_json
from ..ground.errors import LedgerError
from ..ground.errors import integrity_error as _bad
from ..model.package import LEDGER_FILE, MANIFEST_FILE, event_path
from ..ground.paths import fs_path, read_bytes
from ..ground.schemas import error_path, schema_message, validator

MANIFEST_FORMAT = "case-manifest-v1"
#: The most ``manifest.json`` bytes read: every field of an export's manifest is bounded (a case id of
#: at most 128 characters, hashes, numbers, two paths the ledger names), so it stays under 1 KiB.
MANIFEST_MAX_BYTES = 64 * 1024


def export_statement(conn: sqlite3.Connection, name: str, schema: str = "main") -> str:
    """Named statement ``name`` that reads export paths; a ledger older than the evidence store
    (no ``evidence_files`` table, so no evidence events) gets its ``_before_evidence`` form."""
    if conn.execute(statement("has_evidence_files", schema)).fetchone():
        return statement(name, schema)
    return statement(f"{name}_before_evidence", schema)


def manifest_for(conn: sqlite3.Connection, head_seq: int, schema: str = "main") -> dict[str, Any] | None:
    """The manifest an export at ``head_seq`` writes, from the ledger's events in ``schema`` (never from
    the helper rows a hand edit can change without touching the events)."""
    head = conn.execute(statement("manifest_head", schema), {"seq": head_seq}).fetchone()
    if head is None:
        return None
    created = conn.execute(statement("manifest_identity", schema)).fetchall()
    lifecycle = conn.execute(statement("manifest_lifecycle", schema), {"seq": head_seq}).fetchone()
    if len(created) != 1 or lifecycle is None:  # the first event makes both: only an edit removes them
        raise _bad(None, "the ledger does not hold exactly one case.created event "
                   "(its first event was changed); run 'ledger verify'")
    case_id, package_id = _fields(created[0][0], {"case_id": str, "package_id": str})
    state, revision = _fields(lifecycle[0], {"state": str, "revision": int})
    budget = conn.execute(statement("manifest_budget_artifact", schema), {"seq": head_seq}).fetchone()
    index = conn.execute(export_statement(conn, "manifest_evidence_artifact", schema), {"seq": head_seq}).fetchone()
    return {
        "format": MANIFEST_FORMAT, "case_id": case_id, "package_id": package_id, "state": state,
        "analysis_revision": revision, "package_generation": head_seq,
        "head": {"seq": head_seq, "sha256": head[0]},
        "artifacts": {"budget_ledger": {"path": event_path(*budget[:3]), "sha256": budget[3]} if budget else None,
                      "evidence_index": {"path": event_path(*index[:3]), "sha256": index[3]} if index else None},
    }


def _fields(body: Any, wanted: Mapping[str, type]) -> list[Any]:
    """The values of ``wanted`` in an event's stored ``body``, each of its type (``INTEGRITY_ERROR``
    when the body is not JSON or lacks one: only an edit of the ledger does that)."""
    try:
        parsed = parse_json(body) if isinstance(body, str) else None
    except LedgerError:
        parsed = None
    values = [parsed.get(key) if isinstance(parsed, dict) else None for key in wanted]
    if any(type(value) is not kind for value, kind in zip(values, wanted.values())):
        raise _bad(None, f"an event the manifest names the case by does not hold {', '.join(wanted)} as the "
                   "ledger writes them (the ledger was edited); run 'ledger verify'")
    return values


def check_manifest_identity(manifest: Mapping[str, Any], conn: sqlite3.Connection, schema: str = "main") -> None:
    """A manifest of another package than the ledger's (its case or package id) is named so, whatever
    its head, before anything else of the export is compared."""
    created = conn.execute(statement("manifest_identity", schema)).fetchall()
    if len(created) == 1:
        ledger_ids = _fields(created[0][0], {"case_id": str, "package_id": str})
        if ledger_ids != [manifest["case_id"], manifest["package_id"]]:
            raise _bad(None, f"manifest.json is another package's: it names case {manifest['case_id']} package "
                       f"{manifest['package_id']}, the ledger case {ledger_ids[0]} package {ledger_ids[1]} "
                       f"(a manifest copied from another case's export, or another case's {LEDGER_FILE} put in "
                       "place)", fields=["case_id", "package_id"])


def check_manifest(manifest: Mapping[str, Any], conn: sqlite3.Connection, ledger_head: int,
                    schema: str = "main") -> None:
    """The manifest must be exactly what an export of this ledger at its head would write."""
    head_seq = manifest["head"]["seq"]
    check_manifest_identity(manifest, conn, schema)
    expected = manifest_for(conn, head_seq, schema)
    if expected is None:
        raise _bad(ledger_head + 1, f"the ledger ends at seq {ledger_head} but its export reached seq {head_seq} "
                   "(truncated or rolled-back ledger, or one copied without its ledger.sqlite-wal)", manifest_head_seq=head_seq)
    if expected["head"] != manifest["head"]:
        raise _bad(head_seq, "the event at the exported head differs from the manifest's sha256")
    wrong = sorted(key for key in set(expected) | set(manifest) if expected.get(key) != manifest.get(key))
    if wrong:
        raise _bad(None, f"manifest.json disagrees with the ledger at seq {head_seq} in: {', '.join(wrong)}",
                   fields=wrong)


def read_manifest(root: Path) -> dict[str, Any] | None:
    """``manifest.json`` of the package folder ``root`` parsed and schema-checked, or None when
    absent (``INVALID_ARGUMENT`` when ``root`` is not a path)."""
    path = fs_path(root, "package folder") / MANIFEST_FILE
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file():
        raise _bad(None, "manifest.json is not a regular file")
    data = read_bytes(path, MANIFEST_FILE, MANIFEST_MAX_BYTES + 1)
    if len(data) > MANIFEST_MAX_BYTES:  # read no further: an export writes well under 1 KiB
        raise _bad(None, f"manifest.json is over {MANIFEST_MAX_BYTES} bytes, far more than an export writes "
                   "(under 1 KiB): it was replaced or edited after export")
    try:
        manifest = parse_json(data)
    except LedgerError as exc:
        raise _bad(None, f"manifest.json is not valid JSON: {exc.message}") from None
    errors = list(validator(MANIFEST_FORMAT).iter_errors(manifest))
    if errors:
        raise _bad(None, f"manifest.json does not match {MANIFEST_FORMAT}: {error_path(errors[0])}: "
                   f"{schema_message(errors[0])}")
    # JSON Schema's "integer" accepts 10.0: integers must really be ints
    for value in (manifest["head"]["seq"], manifest["analysis_revision"], manifest["package_generation"]):
        if type(value) is not int:
            raise _bad(None, f"manifest.json holds {value!r} where an integer belongs")
    if canonical_bytes(manifest) != data:  # export writes canonical bytes (docs/concepts.md); anything else was edited
        raise _bad(None, "manifest.json is not in canonical form (RFC 8785): it was rewritten after export")
    return manifest
