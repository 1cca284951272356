"""Rules of the evidence store: storing a verified batch of tool results (docs/evidence.md).

:func:`store_tool_results` is pure: it reads the state through a
:class:`~ledger.rules.common.LedgerView` and gets the router's recomputation of
the batch in ``context.inputs`` (``recomputed``: the list of results;
``input_identity``: the package's input identity now, or None on replay). An
accepted batch becomes one :class:`~ledger.rules.common.Outcome`, appended in
one transaction: per operation a ``evidence.requested`` event (its
``request.json``), an ``evidence.result`` event (``result.json``) and an
``evidence.recorded`` event (``E000001.json``, carrying the new content), then
one ``evidence.indexed`` event (``index.json`` in the first operation's folder).

Novelty v2: each located item is an *atom* identified by what was found and
where (:func:`atom_sha256`); ``novelty = floor(100 * unseen / returned)``, 0
when nothing was returned.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any, Mapping, Sequence

from ..ground.arguments import plain_arguments
from ..ground import errors as E
from ..ground.canonical import ZERO_SHA256, canonical_bytes, canonical_sha256, check_json_value, sha256_hex
from ..ground.errors import LedgerError, limit_reached
from ..ground.schemas import validate
from .common import (MUTABLE_STATES, Context, Draft, LedgerView, Outcome, Reused, case_state_error, check_action_id,
                     check_action_name, check_hypothesis_id, not_initialized, replay_or_conflict, require_case,
                     unknown_hypothesis_error)

OP = "store_tool_results"
#: Index formats: v1 listed every record so far in every index; v2 lists the records it adds.
INDEX_V1, INDEX_V2 = "evidence-index-v1", "evidence-index-v2"
RECORD_PREFIX = "E"


def record_id(number: int) -> str:
    """``E000001`` for 1 (six digits, more once past 999999)."""
    return f"{RECORD_PREFIX}{number:06d}"


def store_key(iteration_id: str) -> str:
    """Identity of a batch: its case-wide ``iteration_id``."""
    return f"0:{OP}:{iteration_id}"


@plain_arguments
def shape_store(iteration_id: Any, request: Any, reply: Any) -> dict[str, Any]:
    """The stored request of ``store_tool_results``; ``INVALID_ID``/``INVALID_ARGUMENT`` on a bad shape.

    ``request`` must match ``evidence-request-v1`` and ``reply`` ``evidence-reply-v1``;
    operation ids and (hypothesis, action) pairs are distinct inside the batch.
    """
    check_action_id(iteration_id, "iteration_id")
    # INVALID_JSON first, before the schema (nesting past the JSON depth, an integer past 2**53 - 1 in
    # a tool's args): a call run_tool refuses here reserves nothing
    check_json_value(request, "request")
    canonical_bytes(request, "request")
    _check_ids(request)  # a malformed id is INVALID_ID, as everywhere, not the schema's INVALID_ARGUMENT
    validate("evidence-request-v1", request, E.INVALID_ARGUMENT, "request")
    check_json_value(reply, "reply")  # nesting past the JSON depth: INVALID_JSON, before the schema recurses into it
    validate("evidence-reply-v1", reply, E.INVALID_ARGUMENT, "reply")
    operations, actions = set(), set()
    for action in request["actions"]:
        pair = (action["hypothesis_id"], action["action_id"])
        if action["operation_id"] in operations or pair in actions:
            raise LedgerError(E.INVALID_ARGUMENT, f"operation {action['operation_id']} or action "
                              f"{pair[0]}/{pair[1]} appears twice in the batch")
        operations.add(action["operation_id"])
        actions.add(pair)
    canonical_bytes(reply)  # INVALID_JSON for what has no canonical form
    return {"op": OP, "iteration_id": iteration_id, "request": request, "reply": reply}


#: The ids of a request's action and how each is checked (``INVALID_ID`` for a malformed one).
_ACTION_IDS = (("hypothesis_id", check_hypothesis_id), ("action_id", check_action_id),
               ("operation_id", lambda value: check_action_id(value, "operation_id")), ("tool", check_action_name))


def _check_ids(request: Any) -> None:
    """``INVALID_ID`` for the first malformed id an action of ``request`` holds; what is missing or
    not an action at all is left to the request's schema (``INVALID_ARGUMENT``)."""
    actions = request.get("actions") if isinstance(request, dict) else None
    for action in actions if isinstance(actions, list) else ():
        for key, check in _ACTION_IDS if isinstance(action, dict) else ():
            if key in action:
                check(action[key])


def _refuse_unknown_hypotheses(revision: int, head: Mapping[str, Any], actions: Sequence[Mapping[str, Any]]) -> None:
    for action in actions:
        if action["hypothesis_id"] not in head["accounts"]:
            raise unknown_hypothesis_error(revision, action["hypothesis_id"])


def content_of(result: Mapping[str, Any]) -> dict[str, Any]:
    """``evidence-content-v1``: the normalized payload of one result (no ids, no generation)."""
    return {"tool": result["tool"], "status": result["status"], "items": result["items"],
            "coverage": result["coverage"], "truncated": result["truncated"], "schema": result.get("schema")}


def atom_sha256(item: Mapping[str, Any]) -> str:
    """Identity of a located item: a source line is (kind, path, line, line sha256); a database
    row is (kind, database, table, pointer, the selected columns and their values)."""
    if item.get("kind") == "source_line":
        key = ["source_line", item["path"], item["line"], item["sha256"]]
    elif item.get("kind") == "db_row":
        key = ["db_row", item["database"], item["table"], item["pointer"], item["values"]]
    else:
        key = [item.get("kind"), item]
    return canonical_sha256(key)


def novelty(unseen: int, returned: int) -> int:
    """``floor(100 * unseen / returned)``; 0 when nothing was returned."""
    return 0 if returned == 0 else (100 * unseen) // returned


def _refuse_reservations(view: LedgerView, revision: int, actions: Sequence[Mapping[str, Any]]) -> None:
    head = view.budget_head(revision)
    if head is None:
        raise not_initialized(revision)
    _refuse_unknown_hypotheses(revision, head, actions)  # every action's first: docs/errors.md, the first code in its list
    for action in actions:
        h, action_id, op_id = action["hypothesis_id"], action["action_id"], action["operation_id"]
        why = _not_reserved_for(view, revision, action)
        if why is not None:
            raise LedgerError(E.NO_RESERVATION, f"operation {op_id} cannot take the result of action {h}/{action_id} "
                              f"of tool {action['tool']}: {why}", operation_id=op_id, hypothesis_id=h,
                              action_id=action_id)


def _not_reserved_for(view: LedgerView, revision: int, action: Mapping[str, Any]) -> str | None:
    """Why the batch's ``action`` cannot take its result (None: it can): not reserved, no longer
    reserved, reserved for another tool, bound to another operation's batch, a requested test's."""
    h, action_id, op_id = action["hypothesis_id"], action["action_id"], action["operation_id"]
    found = view.action(revision, h, action_id)
    if found is None:
        return "no such action was reserved"
    if found["status"] != "reserved":
        return f"its status is {found['status']}, not reserved"
    if view.test_of_action(revision, h, action_id) is not None:
        return "it is a requested test's action, whose result is the test's feedback"
    if found["action"] != action["tool"]:
        return f"it was reserved for the tool {found['action']}"
    bound = view.evidence_binding(revision, h, action_id)
    if bound is not None and bound[1] != op_id:
        return f"the batch of operation {bound[1]} holds it already (its result is that batch's)"
    return None


def check_content_limits(view: LedgerView, contents: Mapping[str, bytes], records: int,
                         limits: Mapping[str, int] | None, only_artifacts: bool = False) -> None:
    """``LIMIT_REACHED`` naming the setting when a new content row exceeds
    ``evidence_artifact_bytes_max``, the case would hold more than ``evidence_records_max``
    records with ``records`` more, or distinct content would pass ``evidence_content_bytes_max``
    (docs/errors.md). ``limits`` None (replay): the history was accepted under the limits of its day."""
    if limits is None:
        return
    for data in contents.values():
        if len(data) > limits["evidence_artifact_bytes_max"]:
            raise limit_reached("evidence_artifact_bytes_max", f"an evidence artifact of {len(data)} bytes exceeds "
                                f"evidence_artifact_bytes_max = {limits['evidence_artifact_bytes_max']}")
    if only_artifacts:
        return
    total = view.evidence_records_total() + records
    if total > limits["evidence_records_max"]:
        raise limit_reached("evidence_records_max", f"the case would hold {total} evidence records; "
                            f"evidence_records_max = {limits['evidence_records_max']}")
    stored = view.content_bytes_total() + sum(len(d) for d in contents.values())
    if stored > limits["evidence_content_bytes_max"]:
        raise limit_reached("evidence_content_bytes_max", f"distinct evidence content would reach {stored} bytes; "
                            f"evidence_content_bytes_max = {limits['evidence_content_bytes_max']}")


def operation_use(view: LedgerView, operation_id: str) -> str | None:
    """What already uses ``operation_id`` in the case (``record E000001`` or ``a requested test``), or
    None: an operation id names one stored result or one requested test. ``INVALID_ID`` for an id of
    another form (none uses it)."""
    check_action_id(operation_id, "operation_id")
    stored = view.evidence_operation(operation_id)
    if stored is not None:
        return f"record {stored}"
    return "a requested test" if view.test_request(operation_id) is not None else None


def _check_reply(view: LedgerView, revision: int, request: Mapping[str, Any], context: Context) -> None:
    """``STALE_GENERATION`` then ``REPLY_MISMATCH`` (docs/evidence.md)."""
    reply = request["reply"]
    identity = context.inputs.get("input_identity")
    if identity is not None and reply["input_identity"] != identity:
        raise LedgerError(E.STALE_GENERATION, "the package inputs changed since the reply was computed "
                          f"(input identity {reply['input_identity'][:12]}…, now {identity[:12]}…); query again")
    generation = reply["package_generation"]
    if generation > view.head()[0]:
        raise LedgerError(E.REPLY_MISMATCH, f"package_generation {generation} is newer than the ledger's head "
                          f"{view.head()[0]}")
    for action in request["request"]["actions"]:
        reserved = view.reservation_seq(revision, action["hypothesis_id"], action["action_id"])
        if reserved is not None and generation < reserved:
            raise LedgerError(E.REPLY_MISMATCH, f"package_generation {generation} is older than the reservation "
                              f"of {action['hypothesis_id']}/{action['action_id']} (seq {reserved})")
    recomputed = list(context.inputs["recomputed"])
    results, actions = reply["results"], request["request"]["actions"]
    if len(results) != len(actions):  # one result per action, in request order (evidence-reply-v1)
        raise LedgerError(E.REPLY_MISMATCH, f"the reply has {len(results)} result(s) for {len(actions)} action(s); "
                          "it needs one per action, in request order", results=len(results), actions=len(actions))
    if len(results) != len(recomputed):
        raise LedgerError(E.REPLY_MISMATCH, f"the reply has {len(results)} result(s); the batch yields {len(recomputed)}")
    for position, (given, expected) in enumerate(zip(results, recomputed)):
        if canonical_bytes(given) != canonical_bytes(expected):
            keys = sorted(k for k in set(given) | set(expected) if given.get(k) != expected.get(k))
            raise LedgerError(E.REPLY_MISMATCH, f"result {position} ({expected.get('operation_id')}) differs from "
                              f"its recomputation in: {', '.join(keys)}", position=position, fields=keys)


def store_tool_results(view: LedgerView, request: Mapping[str, Any], context: Context) -> Outcome | Reused:
    """Publish a verified batch (docs/evidence.md).

    Errors, in order: ``OPERATION_CONFLICT`` (another batch under this
    ``iteration_id``, or an ``operation_id`` stored before), ``CASE_STATE``,
    ``NOT_INITIALIZED``, ``UNKNOWN_HYPOTHESIS``, ``NO_RESERVATION``,
    ``LIMIT_REACHED``, ``STALE_GENERATION``, ``REPLY_MISMATCH``.
    """
    case = require_case(view)
    reused = replay_or_conflict(view, store_key(request["iteration_id"]), request, lambda: (  # one batch per id
        f"iteration {request['iteration_id']} holds another batch; give this one a new iteration id"))
    if reused is not None:
        return reused
    actions = request["request"]["actions"]
    for action in actions:
        used = operation_use(view, action["operation_id"])
        if used is not None:
            raise LedgerError(E.OPERATION_CONFLICT, f"operation {action['operation_id']} was used before "
                              f"({used}); give each operation its own id", operation_id=action["operation_id"])
    if case["state"] not in MUTABLE_STATES:
        raise case_state_error("storing evidence", "GENERATING_HYPOTHESES or INVESTIGATING_HYPOTHESES", case["state"])
    revision = case["revision"]
    _refuse_reservations(view, revision, actions)
    drafts = batch_events(view, case, request, context.limits)
    _check_reply(view, revision, request, context)
    return Outcome(drafts)


def batch_events(view: LedgerView, case: Mapping[str, Any], request: Mapping[str, Any],
                 limits: Mapping[str, int] | None) -> tuple[Draft, ...]:
    """The events publishing the batch of ``request`` (the stored request of ``store_tool_results``),
    each result's content allowed beyond ``event_bytes_max``, once its contents pass the
    ``LIMIT_REACHED`` checks of :func:`check_content_limits` (none with ``limits`` None, on replay)."""
    batch = BatchBuilder(view, case, request)
    drafts = batch.build()
    carried = [canonical_bytes(content_of(r)) for r in request["reply"]["results"]]
    check_content_limits(view, {**batch.new_contents, **{str(n): c for n, c in enumerate(carried)}}, 0,
                         limits, only_artifacts=True)
    check_content_limits(view, batch.new_contents, len(request["request"]["actions"]), limits)
    return tuple(with_allowance(drafts, sum(map(len, carried))))


def with_allowance(drafts: Sequence[Draft], allowance: int) -> list[Draft]:
    """``drafts`` allowed ``allowance`` bytes beyond ``event_bytes_max``: the evidence they carry
    (each artifact already within ``evidence_artifact_bytes_max``); the envelope around it stays
    bounded by ``event_bytes_max``."""
    return [replace(d, size_allowance=allowance) for d in drafts]


class BatchBuilder:
    """The events of one accepted publication, numbered from the current index head: a batch of
    tool results (:meth:`build`) or one stored feedback (:meth:`build_single`)."""

    def __init__(self, view: LedgerView, case: Mapping[str, Any], request: Mapping[str, Any]) -> None:
        self.view, self.case, self.request = view, case, request
        self.revision = case["revision"]
        self.new_contents: dict[str, bytes] = {}
        self.first_record: dict[str, str] = {}
        self.atoms_now: set[str] = set()
        head = view.evidence_index_head()
        self.parent = head["index_sha256"] if head else ZERO_SHA256
        self.next_number = head["next_record_number"] if head else 1
        self.count_before = head["record_count"] if head else 0
        self.entries: list[dict[str, Any]] = []  # the records this publication adds
        #: every earlier record while the ledger's indexes are still v1 lists (known on replay), else None
        self.earlier = (head["records"] if head["format"] == INDEX_V1 else None) if head else []

    def _fields(self, fmt: str, kind: str, **extra: Any) -> dict[str, Any]:
        return {"format": fmt, "type": kind, "case_id": self.case["case_id"], "package_id": self.case["package_id"],
                "revision": self.revision, "iteration_id": self.request["iteration_id"], **extra}

    def build(self) -> list[Draft]:
        iteration_id = self.request["iteration_id"]
        request_sha = canonical_sha256(self.request["request"])
        reply = self.request["reply"]
        reply_sha = canonical_sha256(reply)
        drafts: list[Draft] = []
        first_op = self.request["request"]["actions"][0]["operation_id"]
        for position, (action, result) in enumerate(zip(self.request["request"]["actions"], reply["results"])):
            op_id = action["operation_id"]
            part = {"op": OP, "iteration_id": iteration_id, "part": len(drafts)}
            drafts.append(Draft("evidence.requested", self._path(op_id, "request.json"), self.revision,
                                store_key(iteration_id) if not drafts else None,
                                dict(self.request) if not drafts else part,
                                self._fields("evidence-event-v1", "evidence.requested", operation_id=op_id,
                                             position=position, action=action)))
            drafts.append(Draft("evidence.result", self._path(op_id, "result.json"), self.revision, None,
                                {**part, "part": len(drafts)},
                                self._fields("evidence-event-v1", "evidence.result", operation_id=op_id,
                                             position=position, package_generation=reply["package_generation"],
                                             input_identity=reply["input_identity"], result=result)))
            origin = {"kind": "tool_result", "iteration_id": iteration_id, "request_sha256": request_sha,
                      "reply_sha256": reply_sha, "position": position}
            drafts.append(self._record(action, result, origin, {**part, "part": len(drafts)}))
        drafts.append(self._index(first_op, {"op": OP, "iteration_id": iteration_id, "part": len(drafts)}))
        return drafts

    def build_single(self, action: Mapping[str, Any], result: Mapping[str, Any], origin: dict[str, Any],
                     key: str, request: dict[str, Any]) -> list[Draft]:
        """One record (the operation's identity, carrying ``request``) and the new index, both in
        the folder of ``action["operation_id"]``."""
        record = self._record(action, result, origin, request)
        record = Draft(record.type, record.stream, record.revision, key, request, record.fields, record.contents)
        return [record, self._index(action["operation_id"], {**request, "part": 1})]

    def _index(self, operation_id: str, request: dict[str, Any]) -> Draft:
        """``evidence-index-v2``: the records this publication adds, the parent index's hash, the
        next record number and the running count. Where the ledger's indexes are still
        ``evidence-index-v1`` (replaying a ledger written before v2), the cumulative v1 form is
        offered as ``legacy_fields`` (docs/evidence.md)."""
        index = {"iteration_id": self.request["iteration_id"], "parent_index_sha256": self.parent,
                 "next_record_number": self.next_number, "record_count": self.count_before + len(self.entries),
                 "records": self.entries}
        legacy = None
        if self.earlier is not None:
            cumulative = {"iteration_id": self.request["iteration_id"], "parent_index_sha256": self.parent,
                          "next_record_number": self.next_number, "records": [*self.earlier, *self.entries]}
            legacy = self._index_fields(INDEX_V1, cumulative)
        return Draft("evidence.indexed", self._path(operation_id, "index.json"), self.revision, None, request,
                     self._index_fields(INDEX_V2, index), legacy_fields=legacy)

    def _index_fields(self, fmt: str, index: dict[str, Any]) -> dict[str, Any]:
        return {"format": fmt, "type": "evidence.indexed", "revision": self.revision, "index": index,
                "index_sha256": canonical_sha256(index)}

    def _path(self, operation_id: str, name: str) -> str:
        folder = hashlib.sha256(operation_id.encode("utf-8")).hexdigest()[:32]
        return f"analysis/evidence/{self.revision:04d}/{folder}/{name}"

    def _record(self, action: Mapping[str, Any], result: Mapping[str, Any], origin: dict[str, Any],
                part: dict[str, Any]) -> Draft:
        rid = record_id(self.next_number)
        self.next_number += 1
        content = canonical_bytes(content_of(result))
        sha = sha256_hex(content)
        duplicate_of = self.first_record.get(sha) or self.view.first_record_with_content(sha)
        self.first_record.setdefault(sha, rid)
        contents = {}
        if duplicate_of is None and not self.view.content_seen(sha) and sha not in self.new_contents:
            contents[sha] = content
            self.new_contents[sha] = content
        atoms = [atom_sha256(item) for item in result["items"]]
        novel = sorted({a for a in atoms if a not in self.atoms_now and not self.view.atom_seen(a)})
        self.atoms_now.update(atoms)
        unseen = sum(1 for a in atoms if a in novel)
        record = {"record_id": rid, "case_id": self.case["case_id"], "package_id": self.case["package_id"],
                  "revision": self.revision, "hypothesis_id": action["hypothesis_id"],
                  "action_id": action["action_id"], "operation_id": action["operation_id"],
                  "content_sha256": sha, "duplicate_of": duplicate_of, "atoms_returned": len(atoms),
                  "novel_atoms": novel, "novelty_score": novelty(unseen, len(atoms)), "origin": origin}
        path = self._path(action["operation_id"], f"{rid}.json")
        self.entries.append({"record_id": rid, "path": path, "sha256": canonical_sha256(record)})
        return Draft("evidence.recorded", path, self.revision, None, part,
                     {"format": "evidence-record-v1", "type": "evidence.recorded", "revision": self.revision,
                      "record": record}, contents)
