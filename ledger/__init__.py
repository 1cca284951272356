"""case-ledger: the accountant and evidence locker of an automated bug investigator.

Public API (docs/concepts.md and docs/files.md)::

    from ledger import Case, BudgetConfig
    case = Case.create("cases/BUG-20", case_id="BUG-20")
    case.open_revision(hypotheses=[{"statement": "cache key ignores locale"}])
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget(BudgetConfig.example())
    budget.initialize()
    budget.reserve("H1", "q1", "source.read_context")

The names below are the supported API (docs/api.md); the folders beneath are the layers
of docs/architecture.md.
"""

from .ground.config import AnalysisConfig, BudgetConfig
from .ground.errors import ALL_CODES, LedgerError
from .model.operations import OPERATIONS, Operation
from .package_tools.demo import run_demo
from .package_tools.export import ExportReport, export_case
from .package_tools.fleet import FleetReport, export_fleet, fleet_query
from .package_tools.importer import import_tree
from .package_tools.many import ManyReport, case_folders, export_many, verify_many
from .package_tools.journal import JournalSummary, LineResult, apply_journal
from .package_tools.verify import VerifyReport, verify_case
from .router.reference import Router
from .services.actions import Action, CaseBudget, ToolRun
from .services.budget import BudgetManager, BudgetResult, GateReading
from .services.case import Case, LifecycleResult, read_only_query
from .services.evidence import EvidenceResult, EvidenceStore, FeedbackResult
from .services.memory import MemoryCase
from .runs.trajectories import ImportSummary, import_runs
from .services.scopes import ScopeManager, ScopeResult
from .simulation.plot import plot_tradeoff, tradeoff_points
from .simulation.frontier import FrontierReport, frontier
from .simulation.frontier_plot import plot_frontier
from .simulation.simulator import (Policy, RunResult, SimulationReport, example_policy, load_policy, read_outcomes,
                                   simulate, vary)
from .storage.connection import CheckpointWarning

#: The supported API; docs/api.md describes each name (a test keeps the two equal).
__all__ = [
    # the case and its managers
    "Case", "LifecycleResult", "MemoryCase",
    "BudgetManager", "CaseBudget", "BudgetResult", "GateReading", "ToolRun", "Action",
    "ScopeManager", "ScopeResult",
    "EvidenceStore", "EvidenceResult", "FeedbackResult", "Router",
    # configuration and errors
    "BudgetConfig", "AnalysisConfig", "LedgerError", "ALL_CODES", "CheckpointWarning",
    # whole packages
    "export_case", "ExportReport", "verify_case", "VerifyReport", "import_tree", "read_only_query", "run_demo",
    # many cases
    "export_fleet", "FleetReport", "fleet_query",
    "verify_many", "export_many", "ManyReport", "case_folders",
    # journals
    "apply_journal", "JournalSummary", "LineResult", "OPERATIONS", "Operation",
    # simulation
    "simulate", "vary", "Policy", "RunResult", "SimulationReport", "load_policy", "example_policy", "read_outcomes",
    "plot_tradeoff", "tradeoff_points", "frontier", "FrontierReport", "plot_frontier",
    # your own agent runs
    "import_runs", "ImportSummary",
]
__version__ = "0.1.0"
