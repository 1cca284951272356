"""case-ledger: the accountant and evidence locker of an automated bug investigator.

Public API (SPEC sections 2–6, 9)::

    from ledger import Case, BudgetConfig
    case = Case.create("cases/BUG-20", case_id="BUG-20")
    case.open_revision(hypotheses=[{"statement": "cache key ignores locale"}])
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget(BudgetConfig.load("config/budget.example.toml"))
    budget.initialize()
    budget.reserve("H1", "q1", "source.read_context")
"""

from .budget import BudgetManager, BudgetResult
from .case import Case, LifecycleResult
from .config import AnalysisConfig, BudgetConfig
from .errors import ALL_CODES, LedgerError

__all__ = [
    "ALL_CODES",
    "AnalysisConfig",
    "BudgetConfig",
    "BudgetManager",
    "BudgetResult",
    "Case",
    "LedgerError",
    "LifecycleResult",
]
__version__ = "0.1.0"
