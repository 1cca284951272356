"""The layout guards itself: import contracts, no cycles, modules and functions of a readable size."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MODULE_LINES_MAX = 600
FUNCTION_LINES_MAX = 70


def _sources() -> list[Path]:
    return [p for folder in ("ledger", "cli") for p in sorted((REPO / folder).rglob("*.py"))]


def test_the_import_contracts_of_pyproject_hold():
    """Layers top to bottom, storage importing no domain module, the CLI using only the public API
    (import-linter, configured in pyproject.toml; an import cycle breaks the layers contract)."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert lint is not None, "import-linter is part of the test extras"
    done = subprocess.run([lint], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "8 kept, 0 broken" in done.stdout


def test_every_module_of_a_folder_with_an_inner_layers_contract_is_placed_in_it():
    """A module left out of its folder's layers contract is checked by none (four of package_tools'
    and four of simulation's were): each one is named in a layer."""
    import tomllib

    contracts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    for contract in contracts:
        if contract["type"] != "layers" or contract["containers"] == ["ledger"]:
            continue
        [container] = contract["containers"]
        placed = {name.strip() for layer in contract["layers"] for name in layer.replace(":", "|").split("|")}
        folder = REPO / container.replace(".", "/")
        modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        assert modules - placed == set(), (contract["name"], sorted(modules - placed))
        assert placed - modules == set(), (contract["name"], sorted(placed - modules))


def test_no_module_is_longer_than_600_lines():
    long = {str(p.relative_to(REPO)): n for p in _sources()
            if (n := p.read_text(encoding="utf-8").count("\n") + 1) > MODULE_LINES_MAX}
    assert long == {}


def test_no_function_is_longer_than_70_lines():
    long = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > FUNCTION_LINES_MAX:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_no_function_level_import_of_the_library_hides_a_cycle():
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("ledger")):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
                elif isinstance(node, ast.Import) and any(a.name.startswith("ledger") for a in node.names):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


def test_storage_source_names_no_event_type():
    """Storage stores opaque bytes: no event type name appears in its code."""
    modules = sorted((REPO / "ledger" / "storage").glob("*.py"))
    assert len(modules) >= 5
    text = "\n".join(path.read_text(encoding="utf-8") for path in modules)
    for word in ("budget.", "case.created", "revision.opened", "case.transitioned", "budget-event", "case-event"):
        assert word not in text, word


STRUCTURE_CHECK = REPO.parent / "shared" / "tools" / "structure_check.py"


@pytest.mark.skipif(not STRUCTURE_CHECK.is_file(), reason="the shared structure check is not beside this checkout")
def test_the_shared_structure_check_finds_nothing():
    done = subprocess.run([sys.executable, str(STRUCTURE_CHECK)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip().splitlines()[-1].startswith("structure: 0 findings"), done.stdout


def test_a_command_loads_only_the_layers_it_uses_and_the_public_names_resolve_on_first_use():
    """``ledger`` resolves its public names on first use and the CLI imports a command's module when
    it runs (docs/architecture.md): reading a budget starts without verify, the demo, the simulator,
    the browse server or the fleet tools, and every public name still resolves."""
    probe = ("import sys, ledger, ledger_cli.main\n"
             "from ledger import Case, BudgetConfig\n"
             "import ledger_cli.budget, ledger_cli.journal\n"
             "heavy = ('ledger.package_tools.verify', 'ledger.package_tools.demo', 'ledger.simulation',\n"
             "         'ledger.browse', 'ledger.package_tools.fleet', 'ledger_cli.simulate', 'ledger_cli.serve')\n"
             "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
             "print(all(getattr(ledger, name) is not None for name in ledger.__all__))\n"
             "print(sorted(n for n in dir(ledger) if not n.startswith('__') and n not in ledger.__all__"
             " and not isinstance(getattr(ledger, n), type(sys))))\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "True", "[]"]
