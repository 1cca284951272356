"""``ledger demo``: a complete investigation on the bundled example (BUG-20).

Copies the example package (``examples/demo/sources``) into a new case folder,
applies ``examples/demo/journal.jsonl`` under ``config/budget.example.toml`` with
``keep_going`` (one line is refused on purpose: ``INSUFFICIENT_BUDGET``), then
exports and verifies the case. Every rule of docs/concepts.md shows up once: refund,
duplicate evidence scoring zero, a failed action, a refused reservation,
exhaustion, low-information abandonment and a rejection. Then H1 reads real
lines and a database row through the reference router (``query`` with
``store``), including a rediscovered excerpt that earns half novelty, and feeds
each record to its reservation (``record_evidence``) before settling it.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from ..ground import errors as E, interrupts
from .atomic_files import process_umask, remove_abandoned_builds
from ..ground.resources import resource_dir
from ..ground.arguments import check_callback, check_instance
from ..ground.canonical import parse_json
from ..services.case import Case
from ..model.package import refuse_build_folder_name
from ..ground.config import BudgetConfig
from ..ground.errors import LedgerError, refuses_unfit_calls, pass_on_interruption
from .export import ExportReport, export_case
from .verify import VerifyReport, refuse_temp_inside, verify_case
from .journal import LineResult, apply_journal
from ..ground.paths import fs_path, os_error, remove_tree, walk

DEMO_CASE_ID = "BUG-20"
#: Refusals that come from the machine, not from the journal: the demo stops with them.
ENVIRONMENT_CODES = frozenset({E.STORAGE_ERROR, E.LEDGER_BUSY})
#: The one refusal the demo journal contains, by line number.
EXPECTED_REFUSALS = {"INSUFFICIENT_BUDGET"}


def default_demo_dir(base: Path | None = None) -> Path:
    """``./ledger-demo``, or ``./ledger-demo-2``, ``-3``… when it is taken."""
    base = base or Path.cwd()
    candidate = base / "ledger-demo"
    number = 2
    while candidate.exists():
        candidate = base / f"ledger-demo-{number}"
        number += 1
    return candidate


def describe(line: dict[str, Any], outcome: LineResult) -> str:
    """One human sentence for a journal line's outcome."""
    op = line["op"]
    subject = " ".join(str(line[k]) for k in ("hypothesis", "action_id", "action", "to", "iteration_id") if k in line)
    if op == "query":
        subject += " " + " ".join(f"{a['hypothesis_id']} {a['action_id']} {a['tool']}" for a in line["request"]["actions"])
    head = f"{outcome.line:>3}  {op:<15} {subject:<42}"
    if not outcome.ok:
        return f"{head} refused {outcome.error.code}: {outcome.error.message}"
    result = outcome.result or {}
    action = result.get("action") or {}
    account = (result.get("state") or {}).get(line.get("hypothesis", ""), {})
    if op == "reserve":
        note = f"debit {action['cost_units']}, {account['remaining_units']} left"
    elif op == "record_result":
        note = f"novelty {action['novelty_score']}" + (" (duplicate or empty: earns nothing)" if action["novelty_score"] == 0 else " (new evidence)")
    elif op == "settle":
        note = f"information {action['information_score']}, refund {action['reward_units']}, {account['remaining_units']} left"
    elif op == "fail":
        note = f"no refund, low-information streak {account['low_information_streak']}"
    elif op == "reject":
        note = "rejected"
    elif op == "query":
        note = ", ".join(f"{r['record_id']} novelty {r['novelty_score']}" for r in result.get("records", [])) or "ok"
    elif op == "record_evidence":
        note = f"record {line['record_id']} fed to the action: novelty {action['novelty_score']}"
    elif op in ("open_revision", "transition"):
        note = f"case is {result['case_state']}"
    else:
        note = "ok"
    if account.get("status") in ("budget_exhausted", "abandoned_low_information_gain") and op in ("settle", "fail"):
        note += f" -> {line['hypothesis']} {account['status']} ({account['terminal_reason']})"
    return f"{head} {note}"


@refuses_unfit_calls
def run_demo(target: Path | None = None, echo: Callable[[str], None] = print,
             actor: str = "controller") -> tuple[Path, ExportReport, VerifyReport]:
    """Build, run, export and verify the demo case at ``target`` (default :func:`default_demo_dir`).

    The case is built in a hidden sibling folder and renamed to ``target`` once
    it is complete, so an interrupted demo leaves no half-made case behind and
    can simply be run again (hidden folders of demos that were killed are
    removed); one interrupted once the case is in place says so through ``echo``. Raises ``CASE_EXISTS`` if ``target`` exists and is not empty (with
    no ``target`` given, the next free ``./ledger-demo-N`` is taken instead),
    ``INVALID_ARGUMENT`` for a symlink, a file or a mount point, ``STORAGE_ERROR``
    when the file system refuses; ``RuntimeError`` if the journal's outcomes
    differ from the expected ones (a defect).
    """
    echo = (lambda line: None) if check_callback(echo, "echo", 1) is None else echo  # None: print nothing
    check_instance(actor, str, "actor", "a str")
    example = resource_dir("examples") / "demo"
    automatic = target is None
    target = fs_path(target, "demo folder") if target is not None else default_demo_dir()
    _check_target(target)
    refuse_temp_inside(target, "the demo")  # before anything is written: the demo ends with a verify
    _remove_abandoned_builds(target)
    building = target.parent / f"{BUILDING_PREFIX}{target.name[:NAME_KEPT]}.{os.getpid()}"
    remove_tree(building)
    placed: list[Path] = []  # the case, once in place: complete, and a demo run again is refused
    try:
        report = _build_in_place(example, building, target, automatic, echo, actor, placed)
        verified = verify_case(placed[0])
    except KeyboardInterrupt as interrupt:
        if placed:
            echo(f"interrupted: the demo case is complete at {placed[0]}; 'ledger verify {placed[0]}' checks it")
            interrupt.demo_case = placed[0]  # type: ignore[attr-defined]  # for the command's own last line
        raise
    return placed[0], report, verified


def _build_in_place(example: Path, building: Path, target: Path, automatic: bool, echo: Callable[[str], None],
                    actor: str, placed: list[Path]) -> ExportReport:
    """Build the demo in ``building``, then rename it to ``target`` (or, with no folder given, the next
    free one), appended to ``placed``; the build folder goes either way."""
    try:
        try:
            report = _build(example, building, echo, shown_as=target, actor=actor)
        except LedgerError as exc:  # name the folder the user gave, not the hidden one built first
            raise LedgerError(exc.code, exc.message.replace(str(building), str(target)), **exc.details) from None
        while True:
            try:
                if target.is_dir() and not target.is_symlink() and not any(target.iterdir()):
                    target.rmdir()  # an empty folder the user made for the demo
                with interrupts.deferred():  # a Ctrl-C between the two would say nothing of the case in place
                    os.rename(building, target)
                    placed.append(target)
                return report
            except OSError as exc:
                pass_on_interruption(exc)
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise os_error(exc, f"cannot move the demo into {target}") from None
                if not automatic:  # another demo took the folder meanwhile
                    raise LedgerError(E.CASE_EXISTS, f"{target} was taken while the demo ran") from None
                target = default_demo_dir(target.parent)
    finally:
        remove_tree(building)


def _copy_as_new(source: Path, target: Path) -> None:
    """Copy the example's ``source`` folder to ``target`` as files made here are made: with the modes
    this process's umask gives (the installed example's own modes, 0o755 and 0o644, would make the
    case's inputs readable by all under ``umask 077``)."""
    shutil.copytree(source, target, dirs_exist_ok=True, copy_function=shutil.copyfile,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    folder_mode = 0o777 & ~process_umask()  # what mkdir gives
    for folder, _, _ in walk(target):
        os.chmod(folder, folder_mode)


BUILDING_PREFIX = ".ledger-demo-building-"
#: Characters of the target's name kept in the build folder's name: a name the file system
#: takes must not become one it refuses once the prefix and the pid are added (255 bytes).
NAME_KEPT = 40


def _check_target(target: Path) -> None:
    refuse_build_folder_name(target, "demo folder")
    if target.is_symlink():
        raise LedgerError(E.INVALID_ARGUMENT, f"{target} is a symbolic link; give the demo a real folder")
    if target.exists():
        if not target.is_dir():
            raise LedgerError(E.INVALID_ARGUMENT, f"{target} is not a folder")
        if os.path.ismount(target):
            raise LedgerError(E.INVALID_ARGUMENT, f"{target} is a mount point; give the demo a folder inside it")
        if any(target.iterdir()):
            raise LedgerError(E.CASE_EXISTS, f"{target} exists and is not empty; give the demo a new folder")
        if os.path.realpath(target) == _current_folder():  # it is built beside and renamed onto it
            raise LedgerError(E.INVALID_ARGUMENT, f"{target} is the current folder, which the demo cannot replace "
                              "with the case it builds; run it from the parent folder (ledger demo NAME)")


def _current_folder() -> str | None:
    """The current folder's real path; None when it was removed (a demo into another folder still runs)."""
    try:
        return os.path.realpath(os.getcwd())
    except OSError as oserr:
        pass_on_interruption(oserr)
        return None


def _remove_abandoned_builds(target: Path) -> None:
    """Hidden build folders (``.ledger-demo-building-NAME.PID``) next to ``target`` whose process
    is gone (a killed demo, into any NAME) are removed; those of running demos are kept."""
    remove_abandoned_builds(target.parent, BUILDING_PREFIX)


def _build(example: Path, target: Path, echo: Callable[[str], None], shown_as: Path, actor: str) -> ExportReport:
    case = Case.create(target, DEMO_CASE_ID, at="2026-01-05T09:59:00Z", actor=actor)
    try:
        for inputs in ("sources", "data"):  # the files the router reads, the database it queries
            _copy_as_new(example / inputs, target / inputs)
        policy_file = resource_dir("config") / "budget.example.toml"
        policy = BudgetConfig.load(policy_file)
        echo(f"case {DEMO_CASE_ID} at {shown_as}")
        echo(f"policy: the example policy shipped with case-ledger ({policy_file}, for --config; "
             f"costs {dict(policy['action_costs'])}, max_reward_bps {policy['max_reward_bps']})\n")
        lines = (example / "journal.jsonl").read_text(encoding="utf-8").splitlines()
        refusals = set()
        for outcome in apply_journal(case, lines, budget=case.budget(policy), keep_going=True):
            if not outcome.ok and outcome.error.code in ENVIRONMENT_CODES:
                raise outcome.error  # a full disk or a busy ledger, not the demo's rules
            echo(describe(parse_json(lines[outcome.line - 1]), outcome))
            if not outcome.ok:
                refusals.add(outcome.error.code)
        if refusals != EXPECTED_REFUSALS:
            raise RuntimeError(f"demo journal refused {sorted(refusals)}, expected {sorted(EXPECTED_REFUSALS)}")
        report = export_case(case)
    finally:
        case.close()
    return report
