"""The ledger's rules as pure functions: lifecycle and budget accounting (docs/concepts.md).

Each operation has two halves: a ``shape_*`` function that checks the call itself
(ids, scores, reasons, JSON) and returns the canonical *request* that is hashed
for idempotency and stored in the event; and a rule ``(view, request, context)``
that reads the current state through a view and returns what to append
(:mod:`ledger.rules.common`). The same functions serve the live write path and
the replay of verify, import and simulation.
"""

from .budget import investigable, ready_for_evaluation, reward_units
from .common import (CASE_STATES, TERMINAL_STATUSES, Context, Draft, LedgerView, Outcome, Reused, check_action_id,
                     check_case_id, sorted_accounts)

__all__ = ["CASE_STATES", "TERMINAL_STATUSES", "Context", "Draft", "LedgerView", "Outcome", "Reused",
           "check_action_id", "check_case_id", "investigable", "ready_for_evaluation", "reward_units",
           "sorted_accounts"]
