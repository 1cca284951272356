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

from .budget import BudgetManager, BudgetResult, GateReading
from .canonical import parse_json
from .case import Case, LifecycleResult, read_only_query, read_only_rows
from .config import AnalysisConfig, BudgetConfig
from .demo import run_demo
from .errors import ALL_CODES, CLI_ONLY_CODES, INVALID_ARGUMENT, OUTPUT_ERROR, LedgerError
from .evidence import EvidenceResult, EvidenceStore, FeedbackResult
from .export import ExportReport, export_case, export_count
from .fleet import FleetReport, export_fleet, fleet_query, fleet_rows
from .fleet import find_cases as fleet_cases
from .importer import import_tree
from .journal import JournalSummary, LineResult, apply_journal, clamp_warning, open_for_journal
from .journal import first_at as journal_first_at
from .journal import read_lines
from .manifest import read_manifest
from .memory import MemoryCase
from .operations import OPERATIONS, Operation
from .package import LEDGER_FILE
from .router import Router
from .paths import os_error
from .simulation import (Policy, RunResult, SimulationReport, example_policy, load_policy, parse_vary,
                       read_outcomes, simulate, vary)
from .simulate_plot import check_output_file, check_plot, plot_tradeoff, tradeoff_points
from .scopes import ScopeManager, ScopeResult
from .storage import CheckpointWarning

from .verify import VerifyReport, verify_case
from .views import MemoryView

__all__ = [
    "ALL_CODES", "CLI_ONLY_CODES", "INVALID_ARGUMENT", "LEDGER_FILE", "OPERATIONS", "OUTPUT_ERROR", "AnalysisConfig", "BudgetConfig",
    "BudgetManager", "BudgetResult", "Case", "GateReading", "ScopeManager", "ScopeResult", "EvidenceResult", "EvidenceStore", "FeedbackResult", "Router", "ExportReport", "LedgerError", "LifecycleResult", "LineResult",
    "MemoryCase", "MemoryView", "Operation", "Policy", "RunResult", "SimulationReport", "VerifyReport", "apply_journal", "export_case", "export_count", "import_tree",
    "open_for_journal", "os_error", "parse_json", "read_manifest", "read_only_query", "run_demo", "verify_case",
    "example_policy", "load_policy", "parse_vary", "plot_tradeoff", "check_plot", "check_output_file", "read_outcomes", "simulate", "tradeoff_points", "vary",
    "JournalSummary", "clamp_warning", "journal_first_at", "read_only_rows",
    "CheckpointWarning", "read_lines",
    "FleetReport", "export_fleet", "fleet_cases", "fleet_query", "fleet_rows",
]
__version__ = "0.1.0"
