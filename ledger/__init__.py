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

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING, Any as _Any

if _TYPE_CHECKING:  # the same names, for type checkers and readers
    from .ground.config import AnalysisConfig, BudgetConfig
    from .ground.errors import ALL_CODES, LedgerError
    from .model.operations import OPERATIONS, Operation
    from .package_tools.demo import run_demo
    from .package_tools.export import ExportReport, export_case
    from .package_tools.fleet import FleetReport, export_fleet, remove_from_fleet
    from .package_tools.fleet_query import fleet_query
    from .package_tools.importer import import_tree
    from .package_tools.many import ManyReport, build_folders, case_folders, export_many, verify_many
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

#: Where each public name lives. A name is imported the first time it is used, so a program (or a
#: ``ledger`` command) loads only the layers it calls: starting up costs what it uses.
_EXPORTS: dict[str, str] = {
    "AnalysisConfig": ".ground.config",
    "BudgetConfig": ".ground.config",
    "ALL_CODES": ".ground.errors",
    "LedgerError": ".ground.errors",
    "OPERATIONS": ".model.operations",
    "Operation": ".model.operations",
    "run_demo": ".package_tools.demo",
    "ExportReport": ".package_tools.export",
    "export_case": ".package_tools.export",
    "FleetReport": ".package_tools.fleet",
    "export_fleet": ".package_tools.fleet",
    "remove_from_fleet": ".package_tools.fleet",
    "fleet_query": ".package_tools.fleet_query",
    "import_tree": ".package_tools.importer",
    "ManyReport": ".package_tools.many",
    "case_folders": ".package_tools.many",
    "build_folders": ".package_tools.many",
    "export_many": ".package_tools.many",
    "verify_many": ".package_tools.many",
    "JournalSummary": ".package_tools.journal",
    "LineResult": ".package_tools.journal",
    "apply_journal": ".package_tools.journal",
    "VerifyReport": ".package_tools.verify",
    "verify_case": ".package_tools.verify",
    "Router": ".router.reference",
    "Action": ".services.actions",
    "CaseBudget": ".services.actions",
    "ToolRun": ".services.actions",
    "BudgetManager": ".services.budget",
    "BudgetResult": ".services.budget",
    "GateReading": ".services.budget",
    "Case": ".services.case",
    "LifecycleResult": ".services.case",
    "read_only_query": ".services.case",
    "EvidenceResult": ".services.evidence",
    "EvidenceStore": ".services.evidence",
    "FeedbackResult": ".services.evidence",
    "MemoryCase": ".services.memory",
    "ImportSummary": ".runs.trajectories",
    "import_runs": ".runs.trajectories",
    "ScopeManager": ".services.scopes",
    "ScopeResult": ".services.scopes",
    "plot_tradeoff": ".simulation.plot",
    "tradeoff_points": ".simulation.plot",
    "FrontierReport": ".simulation.frontier",
    "frontier": ".simulation.frontier",
    "plot_frontier": ".simulation.frontier_plot",
    "Policy": ".simulation.simulator",
    "RunResult": ".simulation.simulator",
    "SimulationReport": ".simulation.simulator",
    "example_policy": ".simulation.simulator",
    "load_policy": ".simulation.simulator",
    "read_outcomes": ".simulation.simulator",
    "simulate": ".simulation.simulator",
    "vary": ".simulation.simulator",
    "CheckpointWarning": ".storage.connection",
}

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
    "export_fleet", "FleetReport", "fleet_query", "remove_from_fleet",
    "verify_many", "export_many", "ManyReport", "case_folders", "build_folders",
    # journals
    "apply_journal", "JournalSummary", "LineResult", "OPERATIONS", "Operation",
    # simulation
    "simulate", "vary", "Policy", "RunResult", "SimulationReport", "load_policy", "example_policy", "read_outcomes",
    "plot_tradeoff", "tradeoff_points", "frontier", "FrontierReport", "plot_frontier",
    # your own agent runs
    "import_runs", "ImportSummary",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> _Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ledger' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # later uses find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({name for name in globals() if not name.startswith("_") or name.startswith("__")} | set(__all__))
