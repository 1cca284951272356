"""The requests of the budget operations (docs/concepts.md), checked and shaped before a rule runs:
each ``shape_*`` returns the request a ledger event records (``INVALID_ID``, ``INVALID_SCORE``,
``INVALID_ARGUMENT``, ``INVALID_JSON`` and ``LIMIT_REACHED`` for what it refuses), and is what both the
API and a replay of a stored request build the request with."""

from __future__ import annotations

import re
from typing import Any

from ..ground.arguments import plain_arguments
from ..ground import errors as E
from ..ground.canonical import canonical_bytes, check_int, check_json_value, sha256_hex
from ..ground.errors import LedgerError, describe_value, limit_reached
from .common import SCORE_MAX, check_action_id, check_action_name, check_hypothesis_id, check_reason, check_source_ref_list

#: An evidence record id: ``E`` and at least six digits.
RECORD_ID_RE = re.compile(r"^E[0-9]{6,}$")


@plain_arguments
def shape_initialize() -> dict[str, Any]:
    return {"op": "initialize"}


@plain_arguments
def shape_reserve(hypothesis_id: Any, action_id: Any, action: Any) -> dict[str, Any]:
    return {"op": "reserve", "hypothesis_id": check_hypothesis_id(hypothesis_id),
            "action_id": check_action_id(action_id), "action": check_action_name(action)}


@plain_arguments
def shape_record_result(hypothesis_id: Any, action_id: Any, evidence: Any, source_refs: Any,
                        *, evidence_bytes_max: int | None,
                        cost_usd_millicents: Any = None) -> tuple[dict[str, Any], bytes]:
    """Request of ``record_result`` and the evidence's canonical bytes.

    Only the syntax of ``source_refs`` is checked here; the package checks that
    each names a regular file inside it (``SOURCE_REF_INVALID``). ``cost_usd_millicents``
    (money the tool reported, an integer ≥ 0) is part of the request only when given.
    """
    check_hypothesis_id(hypothesis_id)
    check_action_id(action_id)
    payload = canonical_bytes(evidence, "evidence")
    check_json_value(evidence, "evidence")
    if evidence_bytes_max is not None and len(payload) > evidence_bytes_max:
        raise limit_reached("evidence_payload_bytes_max",
                            f"evidence payload is {len(payload)} bytes; the limit is {evidence_bytes_max}")
    refs = check_source_ref_list(source_refs)
    request = {"op": "record_result", "hypothesis_id": hypothesis_id, "action_id": action_id,
               "evidence_sha256": sha256_hex(payload), "source_refs": refs}
    if cost_usd_millicents is not None:
        request["cost_usd_millicents"] = check_int(cost_usd_millicents, "cost_usd_millicents", minimum=0)
    return request, payload


@plain_arguments
def shape_record_evidence(hypothesis_id: Any, action_id: Any, record_id: Any) -> dict[str, Any]:
    """Request of ``record_evidence`` (``INVALID_ID`` for a malformed id)."""
    check_hypothesis_id(hypothesis_id)
    check_action_id(action_id)
    if not isinstance(record_id, str) or not RECORD_ID_RE.fullmatch(record_id):
        raise LedgerError(E.INVALID_ID, f"record id must look like E000001, got {describe_value(record_id)}")
    return {"op": "record_evidence", "hypothesis_id": hypothesis_id, "action_id": action_id, "record_id": record_id}


@plain_arguments
def shape_settle(hypothesis_id: Any, action_id: Any, semantic_score: Any, reason: Any) -> dict[str, Any]:
    check_hypothesis_id(hypothesis_id)
    check_action_id(action_id)
    check_int(semantic_score, "semantic_score", minimum=0, maximum=SCORE_MAX, code=E.INVALID_SCORE)
    return {"op": "settle", "hypothesis_id": hypothesis_id, "action_id": action_id,
            "semantic_score": semantic_score, "reason": check_reason(reason)}


@plain_arguments
def shape_fail(hypothesis_id: Any, action_id: Any, reason: Any) -> dict[str, Any]:
    check_hypothesis_id(hypothesis_id)
    check_action_id(action_id)
    return {"op": "fail", "hypothesis_id": hypothesis_id, "action_id": action_id,
            "reason": check_reason(reason)}


@plain_arguments
def shape_grant(hypothesis_id: Any, units: Any, issuer: Any, reason: Any, grant_id: Any) -> dict[str, Any]:
    """Request of ``grant``: ``units`` an integer ≥ 1, ``issuer`` and ``grant_id`` ids, a non-blank reason."""
    return {"op": "grant", "hypothesis_id": check_hypothesis_id(hypothesis_id),
            "units": check_int(units, "units", minimum=1), "issuer": check_action_id(issuer, "issuer"),
            "reason": check_reason(reason), "grant_id": check_action_id(grant_id, "grant_id")}


@plain_arguments
def shape_reject(hypothesis_id: Any, reason: Any) -> dict[str, Any]:
    return {"op": "reject", "hypothesis_id": check_hypothesis_id(hypothesis_id),
            "reason": check_reason(reason)}
