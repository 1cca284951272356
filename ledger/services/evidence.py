"""The evidence store of a case (docs/evidence.md): the Python API.

::

    store = case.evidence()                       # EvidenceStore(case, Router over the package)
    reply = store.query("iter-1", request).reply  # run the reference router only
    result = store.store_tool_results("iter-1", request, reply)
    budget.record_evidence("H1", "q1", result.records[0]["record_id"])

``store_tool_results`` validates the request and reply against their schemas,
recomputes the whole batch with the router against the current package, and
publishes request, result, record and a new index per batch in one
transaction. Publishing never moves money: the reserved action stays pending
until ``record_evidence`` (and ``settle``) on the budget.
"""

from __future__ import annotations

import dataclasses

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from ..ground.arguments import NotCopied, plain_public_arguments
from ..ground.canonical import canonical_bytes, canonical_sha256
from ..ground.arguments import check_flag
from ..ground.errors import LedgerError, describe_value, refuses_unfit_calls_of
from ..router.reference import Router
from ..rules import evidence as rules, feedback as feedback_rules
from ..ground.clock import parse_at
from ..ground import errors as E
from ..rules.common import check_action_id, require_case
from .session import Ran, Session, seal


class CaseLike(Protocol):
    """What the store needs of a :class:`~ledger.services.case.Case`."""

    path: Any
    session: Session

    def input_identity(self) -> str: ...


@refuses_unfit_calls_of
@dataclass(frozen=True)
class EvidenceResult:
    """What an evidence operation returns.

    ``records``: one ``{record_id, operation_id, hypothesis_id, action_id,
    content_sha256, duplicate_of, novelty_score, event_ref}`` per stored result
    (empty for a query that was not stored); ``index_ref``: the export path of
    the batch's index; ``reply``: the router's reply (``query`` only);
    ``seq``: the batch's first event (also when ``reused``), or for a query that
    was not stored the generation it read (with ``reused`` True: nothing written);
    ``event_ref``: the export path of the batch's first event (None for a query not stored).
    """

    package_path: str
    seq: int | None
    reused: bool
    records: list[dict[str, Any]] = field(default_factory=list)
    index_ref: str | None = None
    reply: dict[str, Any] | None = None
    event_ref: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"package_path": self.package_path, "seq": self.seq, "event_ref": self.event_ref,
                               "reused": self.reused, "records": [dict(r) for r in self.records],
                               "index_ref": self.index_ref}
        if self.reply is not None:
            out["reply"] = self.reply
        return out


@refuses_unfit_calls_of
@dataclass(frozen=True)
class FeedbackResult:
    """What ``submit_feedback`` and ``confirm_feedback`` return: the draft ``feedback_id`` and its
    test's ``operation_id``, whether it is ``confirmed``, the case ``state`` after the operation,
    ``seq`` and ``event_ref`` of its (first) event, ``reused`` for an identical repeat."""

    package_path: str
    seq: int
    reused: bool
    feedback_id: str
    operation_id: str
    confirmed: bool
    state: str
    event_ref: str

    def to_dict(self) -> dict[str, Any]:
        return {"package_path": self.package_path, "seq": self.seq, "reused": self.reused,
                "feedback_id": self.feedback_id, "operation_id": self.operation_id, "confirmed": self.confirmed,
                "state": self.state, "event_ref": self.event_ref}


@plain_public_arguments
class EvidenceStore(NotCopied):
    """Evidence operations on one case; ``router`` (used by :meth:`query` only) defaults to the
    reference :class:`Router` over the case package (its replies carry the case's generation and
    input identity). Storing always recomputes with the reference router, whatever ``router`` is:
    a custom router can propose replies but cannot make the store accept what the reference
    router would not return."""

    def __init__(self, case: CaseLike, router: Router | None = None) -> None:
        if not isinstance(getattr(case, "session", None), Session):
            raise LedgerError(E.INVALID_ARGUMENT, f"EvidenceStore needs an open Case (Case.open or Case.create), "
                              f"not {type(case).__name__}")
        if router is not None and (isinstance(router, type) or not callable(getattr(router, "reply", None))):
            raise LedgerError(E.INVALID_ARGUMENT, "router must be an object with a reply(request) method, such as "
                              f"a Router instance; got {type(router).__name__}"
                              + (f" {router.__name__} (a class)" if isinstance(router, type) else ""))
        self.case = case
        self._session: Session = case.session
        self.reference = Router(case.path, generation=self._generation, identity=case.input_identity)
        self.router = router or self.reference

    def _generation(self) -> int:
        with self._session.read() as view:
            return view.head()[0]

    def query(self, iteration_id: str, request: Mapping[str, Any], store: bool = False, *,
              at: str | None = None) -> EvidenceResult:
        """Run the router on ``request`` and return its reply; with ``store`` also store it exactly as
        :meth:`store_tool_results` does. ``INVALID_ARGUMENT``/``INVALID_ID`` for a malformed request,
        ``ROUTER_REFUSED`` for a refused tool call. ``at`` is checked even when nothing is stored."""
        check_flag(store, "store")  # "false" or 0 would read as true or false by accident
        if at is not None:
            parse_at(at)  # a malformed time is refused whether or not this call stores anything
        rules.shape_store(iteration_id, request, _EMPTY_REPLY)
        reply = self.router.reply(request)
        if self.router is not self.reference:
            _check_custom_reply(iteration_id, request, reply, store)
        if not store:  # a read: nothing written, answered at the generation the router read
            return EvidenceResult(str(self.case.path), reply["package_generation"], True, reply=reply)
        stored_reply = self._stored_reply(iteration_id, request)
        if (stored_reply is not None and stored_reply["input_identity"] == reply["input_identity"]
                and canonical_bytes(stored_reply["results"]) == canonical_bytes(reply["results"])):
            reply = stored_reply  # an identical retry: the batch as stored, at the generation it read
        stored = self.store_tool_results(iteration_id, request, reply, at=at)
        return dataclasses.replace(stored, reply=reply)

    def store_tool_results(self, iteration_id: str, request: Mapping[str, Any], reply: Mapping[str, Any], *,
                           at: str | None = None) -> EvidenceResult:
        """Verify and publish a batch (docs/evidence.md): ``request`` as ``evidence-request-v1``, ``reply`` as
        ``evidence-reply-v1``.

        Errors, in order: ``INVALID_ID``, ``INVALID_ARGUMENT``, ``INVALID_JSON``, ``ROUTER_REFUSED``
        (shape); ``OPERATION_CONFLICT``; ``CASE_STATE``; ``NOT_INITIALIZED``; ``UNKNOWN_HYPOTHESIS``;
        ``NO_RESERVATION``; ``LIMIT_REACHED``; ``STALE_GENERATION``; ``REPLY_MISMATCH``. A refused
        batch writes nothing and consumes no record id.
        """
        shaped = rules.shape_store(iteration_id, request, reply)
        key = rules.store_key(iteration_id)
        with self._session.read() as view:
            found = view.operation(key)
        if found is not None and found[1] == canonical_sha256(shaped):
            inputs: dict[str, Any] = {"recomputed": [], "input_identity": None}  # an identical replay
        else:
            if found is not None:
                self._refuse_requeried(iteration_id, request, reply, key, found[0])
            inputs = {"recomputed": [self.reference.result(a) for a in request["actions"]],
                      "input_identity": self.case.input_identity()}
        ran = self._session.run("store_tool_results", shaped, at=at, inputs=inputs)
        return self._result(ran, iteration_id)

    def stored_batch(self, iteration_id: str, request: Mapping[str, Any]) -> EvidenceResult | None:
        """The batch already stored under ``iteration_id`` for this very ``request`` (``reused``, with
        its reply as stored), or None when there is none. The router is not run: what was stored
        stays the answer even after the package's inputs changed (docs/investigator.md)."""
        rules.shape_store(iteration_id, request, _EMPTY_REPLY)
        reply = self._stored_reply(iteration_id, request)
        if reply is None:
            return None
        stored = self.store_tool_results(iteration_id, request, reply)  # an identical replay: writes nothing
        return dataclasses.replace(stored, reply=reply)

    def operation_use(self, operation_id: str) -> str | None:
        """What already uses ``operation_id`` (``record E000001``, ``a requested test``), or None. Writes nothing."""
        with self._session.read() as view:
            return rules.operation_use(view, operation_id)

    def check_limits(self, iteration_id: str, request: Mapping[str, Any], reply: Mapping[str, Any]) -> None:
        """``LIMIT_REACHED`` (naming the setting) when storing ``reply`` for ``request`` now would pass
        ``evidence_artifact_bytes_max``, ``evidence_records_max``, ``evidence_content_bytes_max`` or
        ``event_bytes_max``: what a loop asks between its read and its reservation, so that a result
        the case cannot take costs nothing (``run_tool`` does). Writes nothing; the shape errors of
        :meth:`store_tool_results`. A batch stored meanwhile may still change the answer
        (docs/evidence.md)."""
        shaped = rules.shape_store(iteration_id, request, reply)
        with self._session.read() as view:
            head = view.head()
            drafts = rules.batch_events(view, require_case(view), shaped, self._session.limits)
            seal(drafts, head, head[2], self._session.actor, self._session.limits)

    def iteration_taken(self, iteration_id: str) -> bool:
        """Whether a batch is stored under ``iteration_id`` (for any request). Writes nothing;
        ``INVALID_ID`` for an id no batch can have."""
        check_action_id(iteration_id, "iteration_id")
        with self._session.read() as view:
            return view.operation(rules.store_key(iteration_id)) is not None

    def _refuse_requeried(self, iteration_id: str, request: Mapping[str, Any], reply: Mapping[str, Any],
                          key: str, seq: int) -> None:
        """``OPERATION_CONFLICT`` saying how to get the stored batch back when ``reply`` is the stored one
        read again (same request, inputs and results; only ``package_generation`` moved on, later, as
        every event moves it), or when it answers this very request over inputs changed since. Anything
        else (another request under the iteration id) is left to the rule's own conflict."""
        stored = self._stored_reply(iteration_id, request)
        if stored is None:
            return
        if stored["input_identity"] != reply.get("input_identity"):  # read over inputs changed since
            raise LedgerError(E.OPERATION_CONFLICT, (
                f"operation {key} was already applied at seq {seq}: iteration {iteration_id} stored this very "
                f"request, read at package_generation {stored['package_generation']} over inputs that have changed "
                "since (this reply reads them as they are now); the batch as stored is what stored_batch(...) "
                "answers with (it runs no router); to store what the inputs give now, reserve new actions and send "
                "them under new operation ids and a new iteration id"), seq=seq, operation=key,
                package_generation=stored["package_generation"])
        if (canonical_bytes(stored["results"]) != canonical_bytes(reply["results"])
                or not reply["package_generation"] > stored["package_generation"]):
            return
        raise LedgerError(E.OPERATION_CONFLICT, (
            f"operation {key} was already applied at seq {seq}: iteration {iteration_id} stored this request "
            f"with these results, read at package_generation {stored['package_generation']}, and this reply was "
            f"read again at {reply['package_generation']} (the ledger moved on; the inputs did not); to get the "
            f"stored batch back, send its reply: query(..., store=True) or stored_batch(...) answer with it "
            f"('ledger evidence query --store' on the command line)"), seq=seq, operation=key,
            package_generation=stored["package_generation"])

    def _stored_reply(self, iteration_id: str, request: Mapping[str, Any]) -> dict[str, Any] | None:
        """The reply stored under ``iteration_id`` when that batch had this very ``request``, else None."""
        with self._session.read() as view:
            found = view.operation(rules.store_key(iteration_id))
            if found is None:
                return None
            rows = self._session.storage.all("evidence_events_of_batch", seq=found[0])
        bodies = [body if isinstance(body, dict) else json.loads(body) for _ref, body in rows]
        results = [b for b in bodies if b.get("type") == "evidence.result"]
        if not results:
            return None
        reply = {"package_generation": results[0]["package_generation"],
                 "input_identity": results[0]["input_identity"], "results": [b["result"] for b in results]}
        try:
            shaped = rules.shape_store(iteration_id, request, reply)
        except LedgerError:
            return None
        return reply if canonical_sha256(shaped) == found[1] else None

    # -- asynchronous tests and feedback (docs/evidence.md) --------------------------------------
    def submit_feedback(self, operation_id: str, reply: Mapping[str, Any],
                        attachments: Mapping[str, Any] | None = None, *, at: str | None = None) -> FeedbackResult:
        """Store a draft reply to the test requested under ``operation_id`` (``budget.request_test``).

        ``reply`` is ``{"status": "passed" | "failed" | "unable_to_test", "details": any JSON}``;
        ``attachments`` maps a file name to its text or to ``{"base64": …}``; each is kept as a
        content row with the sha256 of its bytes. A draft is not evidence; submitting works while
        the case is ``BLOCKED``. The identical reply and attachments again return the same draft
        (``reused``). Errors: ``INVALID_ID``, ``INVALID_ARGUMENT``, ``INVALID_JSON``, ``CASE_STATE``,
        ``NO_RESERVATION`` (no such test), ``LIMIT_REACHED``.
        """
        request = feedback_rules.shape_submit_feedback(operation_id, reply, attachments)
        return self._feedback_result(self._session.run("submit_feedback", request, at=at))

    def confirm_feedback(self, feedback_id: str, *, at: str | None = None) -> FeedbackResult:
        """Confirm draft ``feedback_id`` (``F000001``…); a ``BLOCKED`` case moves back to
        ``INVESTIGATING_HYPOTHESES``. Errors: ``INVALID_ID``, ``CASE_STATE``, ``INVALID_ARGUMENT``
        (unknown draft), ``NO_RESERVATION`` (the draft's test is no longer pending: docs/evidence.md)."""
        request = feedback_rules.shape_confirm_feedback(feedback_id)
        return self._feedback_result(self._session.run("confirm_feedback", request, at=at), feedback_id)

    def store_feedback(self, operation_id: str, feedback_id: str | None = None, *,
                       at: str | None = None) -> EvidenceResult:
        """Publish confirmed draft ``feedback_id`` as an evidence record bound to the test of
        ``operation_id`` (its hypothesis, action and still-pending reservation), with a new index;
        feed it to the budget with ``record_evidence``. Reply and attachment hashes are checked.
        Without ``feedback_id``, the operation's confirmed draft (the newest, if several) is
        published; ``NO_RESERVATION`` when the operation has no test, ``INVALID_ARGUMENT`` when
        no draft was submitted for it.
        Errors: ``INVALID_ID``, ``OPERATION_CONFLICT``, ``CASE_STATE``, ``INVALID_ARGUMENT`` (unknown
        draft), ``NO_RESERVATION``, ``FEEDBACK_NOT_CONFIRMED``, ``INTEGRITY_ERROR``, ``LIMIT_REACHED``.
        """
        if feedback_id is None:
            feedback_id = self._draft_of_operation(operation_id)
        request = feedback_rules.shape_store_feedback(operation_id, feedback_id)
        return self._result(self._session.run("store_feedback", request, at=at), operation_id)

    def _draft_of_operation(self, operation_id: str) -> str:
        check_action_id(operation_id, "operation_id")
        with self._session.read() as view:
            row = self._session.storage.one("feedback_draft_of_operation", operation_id=operation_id)
            if row is None:  # refused as store_feedback refuses, in its order: the case's state first
                feedback_rules.require_storing_state(view)
            if row is None and view.test_request(operation_id) is None:
                raise LedgerError(E.NO_RESERVATION, f"no test was requested under operation {operation_id}",
                                  operation_id=operation_id)
        if row is None:
            raise LedgerError(E.INVALID_ARGUMENT, f"no feedback was submitted for operation {operation_id}; "
                              "submit_feedback first", operation_id=operation_id)
        return row[0]

    def _feedback_result(self, ran: Ran, feedback_id: str | None = None) -> FeedbackResult:
        with self._session.read() as view:
            seq = ran.appended[0].seq if ran.appended else ran.seq
            if feedback_id is None:  # submit: the draft of that event
                body = ran.appended[0].body if ran.appended else None
                feedback_id = body["feedback"]["feedback_id"] if body else _draft_of(view, seq)
            found = view.feedback(feedback_id)
            state = view.case()["state"]
        return FeedbackResult(str(self.case.path), seq, ran.reused, feedback_id, found["operation_id"],
                              found["confirmed"], state, self._session.event_ref(seq))

    def _result(self, ran: Ran, iteration_id: str) -> EvidenceResult:
        if ran.reused:
            with self._session.read():
                rows = self._session.storage.all("evidence_events_of_batch", seq=ran.seq)
            bodies = [(ref, body) for ref, body in rows]
        else:
            bodies = [(a.event_ref, a.body) for a in ran.appended]
        records, index_ref = [], None
        for ref, body in bodies:
            body = body if isinstance(body, dict) else json.loads(body)
            if body["type"] == "evidence.recorded":
                r = body["record"]
                records.append({k: r[k] for k in ("record_id", "operation_id", "hypothesis_id", "action_id",
                                                   "content_sha256", "duplicate_of", "novelty_score")}
                               | {"event_ref": ref})
            elif body["type"] == "evidence.indexed":
                index_ref = ref
        seq = ran.appended[0].seq if ran.appended else ran.seq  # the batch's first event, as when reused
        return EvidenceResult(str(self.case.path), seq, ran.reused, records, index_ref,
                              event_ref=bodies[0][0] if bodies else None)


def _draft_of(view: Any, seq: int) -> str:
    """The feedback id of the draft submitted at ``seq`` (drafts are numbered in order)."""
    for number in range(view.feedback_total(), 0, -1):
        found = view.feedback(feedback_rules.feedback_id(number))
        if found is not None and found["seq"] == seq:
            return found["feedback_id"]
    raise AssertionError(f"no draft at seq {seq}")


_EMPTY_REPLY = {"package_generation": 0, "input_identity": "0" * 64, "results": []}


def _check_custom_reply(iteration_id: str, request: Mapping[str, Any], reply: Any, store: bool) -> None:
    """``INVALID_ARGUMENT`` for a custom router's reply that is no evidence reply: for a read, one
    without an integer ``package_generation``; to be stored, one the store's shape check refuses."""
    if not store:
        if not isinstance(reply, Mapping) or type(reply.get("package_generation")) is not int:
            raise LedgerError(E.INVALID_ARGUMENT, "the router's reply must be an evidence reply "
                              "({package_generation, input_identity, results}); got " + describe_value(reply))
        return
    try:
        rules.shape_store(iteration_id, request, reply)
    except LedgerError as refused:
        hint = ("; a Router built without generation= and identity= answers reads only: give "
                "case.evidence() no router to store" if isinstance(reply, Mapping)
                and reply.get("input_identity") == "" else "")
        raise LedgerError(refused.code, f"the router's reply cannot be stored: {refused.message}{hint}",
                          **refused.details) from None
