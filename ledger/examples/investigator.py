"""An investigator loop over the bundled demo's sources (BUG-20: a restock adds the stock twice).

Run it from anywhere: ``python -m ledger.examples.investigator [FOLDER]`` (default: a new temporary folder).
Router actions go through ``run_tool``, the demo's tests through ``budget.action``; ``assess`` stands in for a
model's judgment. The loop stops when every hypothesis is settled one way or another
(``ready_for_evaluation``), or when ``check`` says that no open hypothesis may reserve its next action now (a
scoped limit is used up, or its units are: the reading's attribute ``refusal`` says which).

H1 is the real bug, yet its account ends ``abandoned_low_information_gain``: its last planned step runs the
tests H2 has just run (the same output again, a duplicate anywhere in the case, is worth no information), past
its plan the agent repeats that step, learns nothing new, and the ledger stops paying for that. How an account
ended says how its spending stopped, not whether its hypothesis holds: the ledger has no "confirmed" status;
evaluation decides from the evidence it stored (H2, whose test passes, is rejected).
"""

import os
import shutil
import subprocess
import sys
import tempfile
from importlib.resources import files
from pathlib import Path

from ledger import BudgetConfig, Case, CaseBudget, LedgerError

HYPOTHESES = ["restock() adds the quantity twice", "sell() charges the wrong price"]
READ = "source.read_context"
#: Running the tests here, priced like any action ("test.human"/"test.automated" name the tests
#: request_test asks others to run, which check prices at test_costs).
RUN_TESTS = "tests.run"
PLAN = {"H1": [("source.find_text", {"text": "+= quantity"}),
               (READ, {"path": "sources/inventory.py", "start_line": 18, "end_line": 23}), "tests"],
        "H2": [(READ, {"path": "sources/inventory.py", "start_line": 25, "end_line": 29}), "tests"]}
TESTS = "import test_inventory as t\nfor n in ['test_restock', 'test_sell_uses_decimal_prices']:\n" \
        "    try: getattr(t, n)(); print(n, 'passed')\n    except AssertionError: print(n, 'failed')"


def assess(hypothesis: str, text: str) -> int:
    """A stand-in for the model: how much ``text`` tells about ``hypothesis``, 0-100."""
    if hypothesis == "H1":
        return 90 if "+= quantity" in text or "test_restock failed" in text else 10
    return 60 if "test_sell_uses_decimal_prices passed" in text else 10


def investigate(folder: Path) -> Case:
    package = folder / "BUG-20"
    if package.exists():
        raise FileExistsError(f"{package} already exists: name another folder")
    shutil.copytree(Path(str(files("ledger.examples"))) / "demo" / "sources", package / "sources",
                    ignore=shutil.ignore_patterns("__pycache__"))
    case = Case.create(package, case_id="BUG-20")
    case.open_revision([{"statement": s} for s in HYPOTHESES], units_per_hypothesis=40)
    case.transition("INVESTIGATING_HYPOTHESES")
    budget = case.budget(BudgetConfig.example())
    budget.initialize()
    work(budget, package)
    return case


def work(budget: CaseBudget, package: Path) -> None:
    """Act on the open hypotheses in turn until they are all settled, or none may act now."""
    step = 0
    while not (state := budget.snapshot()).ready_for_evaluation:
        acted = False
        for h in state.investigable:  # not terminal, nothing pending
            advice = budget.advice(h)  # what the agent's prompt would show
            call = PLAN[h][min(step, len(PLAN[h]) - 1)]  # past its plan, this agent repeats itself
            if not budget.check(h, RUN_TESTS if call == "tests" else call[0])["allowed"]:
                continue  # reserve would refuse it now (its .refusal says why): next hypothesis
            acted = True
            action_id = f"{h}-{step}"
            if call == "tests":
                with budget.action(h, action_id, RUN_TESTS) as act:
                    text = subprocess.run([sys.executable, "-B", "-c", TESTS], cwd=package / "sources",
                                          capture_output=True, text=True, timeout=60).stdout
                    act.record({"output": text})
            else:
                run = budget.run_tool(h, action_id, *call)
                text = "\n".join(item["text"] for item in run.result["items"])
            score = assess(h, text)
            settled = budget.settle(h, action_id, score, "stand-in assessment")
            print(f"{action_id}: {advice['remaining_units']} units left before, score {score}, information "
                  f"{settled.action['information_score']}, now {settled.state[h]['status']}")
            if h == "H2" and "sell_uses_decimal_prices passed" in text:
                budget.reject(h, "its test passes: sell() charges the right price")
        if not acted:  # nothing left may reserve: ask the issuer for more (request_increase), or evaluate
            return
        step += 1


if __name__ == "__main__":
    try:  # output closed or full, a folder refused, Ctrl-C: a line on stderr, never a traceback
        if sys.argv[1:2] and sys.argv[1].startswith("-"):  # --help and the like name no folder
            print(__doc__, flush=True)
            sys.exit(0)
        done = investigate(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
        with done:
            for row in done.balances():
                print(row["hypothesis_id"], row["status"], row["terminal_reason"], row["remaining_units"])
            print("case folder:", done.path, flush=True)
    except BrokenPipeError:  # `| head` closed our output: stop quietly, status 1 (Python's recipe for SIGPIPE)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except (OSError, LedgerError) as err:  # a folder that holds BUG-20 already, is read-only; a full disk …
        sys.exit(f"error: {err}")
    except KeyboardInterrupt:  # what was committed stays: the ledger verifies
        print("interrupted", file=sys.stderr)
        sys.exit(130)
