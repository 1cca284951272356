"""The operation registry: every operation of the ledger declared once.

An :class:`Operation` names its journal form (the ``op`` and argument keys of a
journal line and the Python keyword each maps to), the rule that decides it,
how a stored request is re-shaped for replay (verify, import, simulation), and
the command that runs it from the command line. The journal, the replayer, the
Python API (through :class:`ledger.services.session.Session`), the CLI and the demo all
read this table, so an operation cannot be half added: ``tests/test_seams.py``
checks that each one has a journal form, a replay path, a CLI command and a
README row.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from ..ground import errors as E
from ..ground.canonical import parse_json, sha256_hex
from ..ground.config import BudgetConfig
from ..ground.errors import LedgerError, given
from ..rules import budget as budget_rules
from ..rules import budget_requests
from ..rules import evidence as evidence_rules
from ..rules import feedback as feedback_rules
from ..rules import lifecycle
from ..rules import scopes as scope_rules
from ..router.reference import Router
from ..router.check import Inputs, recheck, same_digests
from ..rules.common import Context, Draft, LedgerView, Outcome, Reused

Rule = Callable[[LedgerView, Mapping[str, Any], Context], "Draft | Reused | Outcome"]


class ReplaySource(Protocol):
    """What a replay needs besides the events: stored content and the package's files."""

    def content_of(self, sha256: str) -> bytes | None: ...
    def resolve_sources(self, refs: list[str]) -> list[dict[str, str]]: ...

    @property
    def root(self) -> Any: ...  # the package folder (the router recomputes evidence there)

    # optional: ``input_identity() -> str | None``, the package's input identity now (None: unknown), and
    # ``confirm_identity(identity) -> bool``, whether it is still ``identity`` when computed afresh
    # optional: ``recorded_digests``, a dict the replay keeps the sha256 each result recorded in


#: ``replay(stored request, stored body, source)`` → (normalized request, inputs, config) for the rule.
Replay = Callable[[Mapping[str, Any], Mapping[str, Any], ReplaySource],
                  tuple[dict[str, Any], dict[str, Any], "BudgetConfig | None"]]


@dataclass(frozen=True)
class Argument:
    """One journal key and the Python keyword argument it becomes."""

    key: str
    param: str
    required: bool = True
    #: The key takes a JSON boolean (``true``/``false``); anything else is ``INVALID_ARGUMENT``.
    flag: bool = False


@dataclass(frozen=True)
class Operation:
    """One operation: ``name`` is the journal ``op`` and the Python method of ``service``
    (``"case"`` for :class:`~ledger.services.case.Case`, ``"budget"`` for
    :class:`~ledger.services.budget.BudgetManager`, ``"scope"`` for :class:`~ledger.services.scopes.ScopeManager`,
    ``"evidence"`` for :class:`~ledger.services.evidence.EvidenceStore`); ``cli`` the command that runs it;
    ``rule`` None for a read that writes nothing; ``journal`` False only for the
    genesis operation, which ``ledger init`` and ``apply --create`` perform."""

    name: str
    service: str
    arguments: tuple[Argument, ...]
    cli: str
    rule: Rule | None = None
    replay: Replay | None = None
    journal: bool = True
    accepts_at: bool = True

    @functools.cached_property
    def required_keys(self) -> frozenset[str]:
        return frozenset(a.key for a in self.arguments if a.required)

    @functools.cached_property
    def flag_keys(self) -> frozenset[str]:
        return frozenset(a.key for a in self.arguments if a.flag)

    @functools.cached_property
    def optional_keys(self) -> frozenset[str]:
        return frozenset(a.key for a in self.arguments if not a.required)


def _get(request: Mapping[str, Any], *keys: str) -> list[Any]:
    return [request.get(key) for key in keys]


def _int_or(value: Any, default: int) -> int:
    return value if type(value) is int else default


# --- replay: a stored request back into the rule's inputs --------------------------------
def _replay_create(request, body, source):
    return lifecycle.shape_create(*_get(request, "case_id", "package_id")), {}, None


def _replay_open_revision(request, body, source):
    shaped = lifecycle.shape_open_revision(
        request.get("hypotheses"), request.get("units_per_hypothesis"),
        default_units=1, max_hypotheses=_int_or(request.get("max_hypotheses"), 1))
    return shaped, {}, None


def _replay_transition(request, body, source):
    return lifecycle.shape_transition(request.get("to")), {}, None


def _replay_record_outcome(request, body, source):
    return lifecycle.shape_record_outcome(*_get(request, "outcome", "source")), {}, None


def _replay_initialize(request, body, source):
    return budget_requests.shape_initialize(), {}, BudgetConfig.from_mapping(body.get("policy") or {})


def _replay_reserve(request, body, source):
    return budget_requests.shape_reserve(*_get(request, "hypothesis_id", "action_id", "action")), {}, None


def _replay_record_result(request, body, source):
    sha = request.get("evidence_sha256")
    payload = source.content_of(sha) if isinstance(sha, str) else None
    if payload is None:
        raise LedgerError(E.INTEGRITY_ERROR, f"evidence content {sha} is missing", missing_content=sha)
    if sha256_hex(payload) != sha:
        raise LedgerError(E.INTEGRITY_ERROR, f"evidence content {sha} does not match its hash (swapped or edited)")
    shaped, canonical = budget_requests.shape_record_result(
        request.get("hypothesis_id"), request.get("action_id"), parse_json(payload),
        request.get("source_refs"), evidence_bytes_max=None, cost_usd_millicents=request.get("cost_usd_millicents"))
    if canonical != payload:
        raise LedgerError(E.INTEGRITY_ERROR, f"evidence content {sha} is not canonical JSON")
    return shaped, {"evidence": payload, "sources": source.resolve_sources(shaped["source_refs"])}, None


def _replay_settle(request, body, source):
    return budget_requests.shape_settle(*_get(request, "hypothesis_id", "action_id", "semantic_score", "reason")), {}, None


def _replay_fail(request, body, source):
    return budget_requests.shape_fail(*_get(request, "hypothesis_id", "action_id", "reason")), {}, None


def _replay_reject(request, body, source):
    return budget_requests.shape_reject(*_get(request, "hypothesis_id", "reason")), {}, None


def _replay_grant(request, body, source):
    return budget_requests.shape_grant(*_get(request, "hypothesis_id", "units", "issuer", "reason", "grant_id")), {}, None


def _replay_establish(request, body, source):
    return scope_rules.shape_establish(*_get(request, "scope", "limits", "issuer", "delegate", "delegate_limits",
                                             "warning_bps", "on_exhausted", "causation_seq")), {}, None


def _replay_request_increase(request, body, source):
    return scope_rules.shape_request_increase(*_get(request, "scope", "dimension", "amount", "requester",
                                                    "reason")), {}, None


def _replay_record_evidence(request, body, source):
    shaped = budget_requests.shape_record_evidence(*_get(request, "hypothesis_id", "action_id", "record_id"))
    return shaped, {}, None


def _replay_store_tool_results(request, body, source):
    """The stored batch, recomputed by the reference router wherever it can be (see
    :mod:`ledger.router.check`): always when the package's inputs are those the reply was
    computed from, else for every file still unchanged."""
    shaped = evidence_rules.shape_store(*_get(request, "iteration_id", "request", "reply"))
    router = Router(source.root)
    results = shaped["reply"]["results"]
    actions = shaped["request"]["actions"]
    identity = getattr(source, "input_identity", None)
    replied = shaped["reply"]["input_identity"]
    confirm = getattr(source, "confirm_identity", None)
    same = Inputs(identity is not None and identity() == replied,
                  (lambda: confirm(replied)) if confirm is not None else None)
    note = getattr(source, "note_unchecked", None)
    recorded = getattr(source, "recorded_digests", None)
    if recorded is not None:
        same_digests(recorded, shaped["reply"]["input_identity"], actions, results)
    recomputed = [recheck(router, a, r, same, note) for a, r in zip(actions, results)]
    return shaped, {"recomputed": recomputed, "input_identity": None}, None  # the rule refuses a count that differs


def _replay_request_test(request, body, source):
    shaped = feedback_rules.shape_request_test(*_get(request, "hypothesis_id", "action_id", "kind", "operation_id"))
    return shaped, {}, None


def _replay_submit_feedback(request, body, source):
    return feedback_rules.shape_submit_feedback(*_get(request, "operation_id", "reply", "attachments")), {}, None


def _replay_confirm_feedback(request, body, source):
    return feedback_rules.shape_confirm_feedback(request.get("feedback_id")), {}, None


def _replay_store_feedback(request, body, source):
    return feedback_rules.shape_store_feedback(*_get(request, "operation_id", "feedback_id")), {}, None


A = Argument
#: Every operation, in the order the README lists them.
OPERATIONS: dict[str, Operation] = {op.name: op for op in (
    Operation("create", "case", (A("case_id", "case_id"),), "init", lifecycle.create, _replay_create,
              journal=False),
    Operation("open_revision", "case", (A("hypotheses", "hypotheses"),
                                        A("units_per_hypothesis", "units_per_hypothesis", False)),
              "revision open", lifecycle.open_revision, _replay_open_revision),
    Operation("transition", "case", (A("to", "to"),), "state", lifecycle.transition, _replay_transition),
    Operation("initialize", "budget", (), "budget initialize", budget_rules.initialize, _replay_initialize),
    Operation("reserve", "budget", (A("hypothesis", "hypothesis_id"), A("action_id", "action_id"),
                                    A("action", "action")),
              "budget reserve", budget_rules.reserve, _replay_reserve),
    Operation("record_result", "budget", (A("hypothesis", "hypothesis_id"), A("action_id", "action_id"),
                                          A("evidence", "evidence"), A("source_refs", "source_refs", False),
                                          A("cost_usd_millicents", "cost_usd_millicents", False)),
              "budget record", budget_rules.record_result, _replay_record_result),
    Operation("settle", "budget", (A("hypothesis", "hypothesis_id"), A("action_id", "action_id"),
                                   A("semantic_score", "semantic_score"), A("reason", "reason")),
              "budget settle", budget_rules.settle, _replay_settle),
    Operation("fail", "budget", (A("hypothesis", "hypothesis_id"), A("action_id", "action_id"),
                                 A("reason", "reason")),
              "budget fail", budget_rules.fail, _replay_fail),
    Operation("reject", "budget", (A("hypothesis", "hypothesis_id"), A("reason", "reason")),
              "budget reject", budget_rules.reject, _replay_reject),
    Operation("snapshot", "budget", (), "budget snapshot", accepts_at=False),
    Operation("establish", "scope", (A("scope", "scope"), A("limits", "limits"), A("issuer", "issuer"),
                                     A("delegate", "delegate", False), A("delegate_limits", "delegate_limits", False),
                                     A("warning_ratio", "warning_ratio", False),
                                     A("on_exhausted", "on_exhausted", False),
                                     A("causation_seq", "causation_seq", False)),
              "scope establish", scope_rules.establish, _replay_establish),
    Operation("request_increase", "scope", (A("scope", "scope"), A("dimension", "dimension"), A("amount", "amount"),
                                            A("requester", "requester"), A("reason", "reason")),
              "scope request-increase", scope_rules.request_increase, _replay_request_increase),
    Operation("grant", "budget", (A("hypothesis", "hypothesis_id"), A("units", "units"), A("issuer", "issuer"),
                                  A("reason", "reason"), A("grant_id", "grant_id")),
              "budget grant", budget_rules.grant, _replay_grant),
    Operation("check", "budget", (A("hypothesis", "hypothesis_id"), A("action", "action")), "budget check"),
    Operation("price_signal", "budget", (A("hypothesis", "hypothesis_id"), A("action", "action")), "budget price"),
    Operation("remaining", "budget", (A("hypothesis", "hypothesis_id"),), "budget remaining", accepts_at=False),
    Operation("record_evidence", "budget", (A("hypothesis", "hypothesis_id"), A("action_id", "action_id"),
                                            A("record_id", "record_id")),
              "budget record-evidence", budget_rules.record_evidence, _replay_record_evidence),
    Operation("store_tool_results", "evidence", (A("iteration_id", "iteration_id"), A("request", "request"),
                                                 A("reply", "reply")),
              "evidence store", evidence_rules.store_tool_results, _replay_store_tool_results),
    Operation("query", "evidence", (A("iteration_id", "iteration_id"), A("request", "request"),
                                    A("store", "store", False, flag=True)),
              "evidence query"),
    Operation("request_test", "budget", (A("hypothesis", "hypothesis_id"), A("action_id", "action_id"),
                                         A("kind", "kind"), A("operation_id", "operation_id")),
              "evidence request-test", feedback_rules.request_test, _replay_request_test),
    Operation("submit_feedback", "evidence", (A("operation_id", "operation_id"), A("reply", "reply"),
                                              A("attachments", "attachments", False)),
              "evidence feedback submit", feedback_rules.submit_feedback, _replay_submit_feedback),
    Operation("confirm_feedback", "evidence", (A("feedback_id", "feedback_id"),),
              "evidence feedback confirm", feedback_rules.confirm_feedback, _replay_confirm_feedback),
    Operation("store_feedback", "evidence", (A("operation_id", "operation_id"), A("feedback_id", "feedback_id")),
              "evidence feedback store", feedback_rules.store_feedback, _replay_store_feedback),
    Operation("record_outcome", "case", (A("outcome", "outcome"), A("source", "source")), "outcome record",
              lifecycle.record_outcome, _replay_record_outcome),
)}
# Every rule is followed by the duration warnings its operation's time makes due (docs/scopes.md).
OPERATIONS = {name: dataclasses.replace(op, rule=scope_rules.with_duration_warnings(op.rule)) if op.rule else op
              for name, op in OPERATIONS.items()}


def operation(name: str, *, journal: bool = False) -> Operation:
    """The registered operation ``name`` (with ``journal``: one a journal line may name);
    ``UNKNOWN_OPERATION`` otherwise."""
    found = OPERATIONS.get(name) if isinstance(name, str) else None
    if found is None or (journal and not found.journal):
        known = ", ".join(n for n, op in OPERATIONS.items() if op.journal)
        raise LedgerError(E.UNKNOWN_OPERATION, f"unknown operation {given(name, 60)}; known: {known}")
    return found


def register(op: Operation) -> Operation:
    """Add ``op`` to the registry (extensions and tests); refuses a name already taken."""
    if op.name in OPERATIONS:
        raise ValueError(f"operation {op.name} is already registered")
    OPERATIONS[op.name] = op
    return op


def unregister(name: str) -> None:
    """Remove an operation added with :func:`register`."""
    OPERATIONS.pop(name, None)
