"""case-ledger: the accountant and evidence locker of an automated bug investigator.

Public API (SPEC sections 2–6, 9)::

    from ledger import Case, BudgetConfig
    case = Case.create("cases/BUG-20", case_id="BUG-20")
    case.open_revision(hypotheses=[{"statement": "cache key ignores locale"}])
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget(BudgetConfig.load("config/budget.example.toml"))
    budget.initialize()
    budget.reserve("H1", "q1", "source.read_context")

Everything the ``ledger`` command uses is importable from here; the modules
below are organised in layers (see the README's architecture section).
"""

from .budget import BudgetManager, BudgetResult
from .canonical import parse_json
from .case import Case, LifecycleResult, read_only_query
from .config import AnalysisConfig, BudgetConfig
from .demo import run_demo
from .evidence import EvidenceResult, EvidenceStore
from .errors import ALL_CODES, CLI_ONLY_CODES, OUTPUT_ERROR, LedgerError
from .export import ExportReport, export_case, export_count
from .importer import import_tree
from .journal import LineResult, apply_journal, open_for_journal
from .manifest import read_manifest
from .operations import OPERATIONS, Operation
from .package import LEDGER_FILE
from .router import Router
from .paths import os_error

from .verify import VerifyReport, verify_case
from .views import MemoryView

__all__ = [
    "ALL_CODES", "CLI_ONLY_CODES", "LEDGER_FILE", "OPERATIONS", "OUTPUT_ERROR", "AnalysisConfig", "BudgetConfig",
    "BudgetManager", "BudgetResult", "Case", "EvidenceResult", "EvidenceStore", "Router", "ExportReport", "LedgerError", "LifecycleResult", "LineResult",
    "MemoryView", "Operation", "VerifyReport", "apply_journal", "export_case", "export_count", "import_tree",
    "open_for_journal", "os_error", "parse_json", "read_manifest", "read_only_query", "run_demo", "verify_case",
]
__version__ = "0.1.0"
