"""case-ledger: the accountant and evidence locker of an automated bug investigator.

Public API (docs/concepts.md and docs/files.md)::

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

from .services.budget import BudgetManager, BudgetResult, GateReading
from .ground.canonical import parse_json
from .services.case import Case, LifecycleResult, read_only_query, read_only_rows
from .ground.config import AnalysisConfig, BudgetConfig
from .package_tools.demo import run_demo
from .ground.errors import ALL_CODES, CLI_ONLY_CODES, INVALID_ARGUMENT, OUTPUT_ERROR, LedgerError
from .services.evidence import EvidenceResult, EvidenceStore, FeedbackResult
from .package_tools.export import ExportReport, export_case, export_count
from .package_tools.importer import import_tree
from .package_tools.journal import JournalSummary, LineResult, apply_journal, clamp_warning, open_for_journal
from .package_tools.journal import first_at as journal_first_at
from .package_tools.journal import read_lines
from .package_tools.manifest import read_manifest
from .services.memory import MemoryCase
from .model.operations import OPERATIONS, Operation
from .model.package import LEDGER_FILE
from .router.reference import Router
from .ground.paths import os_error
from .simulation.simulator import (Policy, RunResult, SimulationReport, example_policy, load_policy, parse_vary,
                       read_outcomes, simulate, vary)
from .simulation.plot import check_output_file, check_plot, plot_tradeoff, tradeoff_points
from .services.scopes import ScopeManager, ScopeResult
from .storage.connection import CheckpointWarning

from .package_tools.verify import VerifyReport, verify_case
from .model.views import MemoryView

__all__ = [
    "ALL_CODES", "CLI_ONLY_CODES", "INVALID_ARGUMENT", "LEDGER_FILE", "OPERATIONS", "OUTPUT_ERROR", "AnalysisConfig", "BudgetConfig",
    "BudgetManager", "BudgetResult", "Case", "GateReading", "ScopeManager", "ScopeResult", "EvidenceResult", "EvidenceStore", "FeedbackResult", "Router", "ExportReport", "LedgerError", "LifecycleResult", "LineResult",
    "MemoryCase", "MemoryView", "Operation", "Policy", "RunResult", "SimulationReport", "VerifyReport", "apply_journal", "export_case", "export_count", "import_tree",
    "open_for_journal", "os_error", "parse_json", "read_manifest", "read_only_query", "run_demo", "verify_case",
    "example_policy", "load_policy", "parse_vary", "plot_tradeoff", "check_plot", "check_output_file", "read_outcomes", "simulate", "tradeoff_points", "vary",
    "JournalSummary", "clamp_warning", "journal_first_at", "read_only_rows",
    "CheckpointWarning", "read_lines",
]
__version__ = "0.1.0"
