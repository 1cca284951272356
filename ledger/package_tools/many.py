"""Verify or export many cases at once, over several processes (docs/cli.md, docs/performance.md).

Each case is verified (or exported) on its own by :func:`verify_case` (or
:func:`export_case`), exactly as one case would be; cases share nothing, so
running them in separate processes changes no result. A case that fails is
reported with its error code and message and does not stop the others.
"""

from __future__ import annotations


import functools
import os
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..ground import errors as E, interrupts
from ..ground.arguments import check_callback, check_flag, check_instance, path_list
from ..ground.config import AnalysisConfig
from ..ground.errors import LedgerError, refuses_unfit_calls, refuses_unfit_calls_of, pass_on_interruption
from ..ground.paths import fs_path, os_error, refuse_link_to_nothing
from ..ground.workers import job_count, shared_map
from ..model.package import (BUILD_FOLDER_LEFT_OUT, DEAD_LINK_LEFT_OUT, EXPORT_ALONE_LEFT_OUT, LEDGER_FILE,
                             dead_link, export_alone, is_build_folder, is_case_package, once_each, second_paths)
from ..services.case import Case
from .export import export_case
from .verify import verify_case

#: One case's outcome, as each worker sends it back (plain data, so it crosses processes).
Outcome = dict[str, Any]


@refuses_unfit_calls_of
@dataclass
class ManyReport:
    """The outcome of each case, in the order given, and how many passed and failed.

    Each item of ``cases`` is ``{"case", "ok": True, "report": {…}}`` (the single-case report's
    ``to_dict()``) or ``{"case", "ok": False, "error": {"code", "message"}}``.
    """

    cases: list[Outcome] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(1 for outcome in self.cases if outcome["ok"])

    @property
    def failed(self) -> int:
        return len(self.cases) - self.passed

    def to_dict(self) -> dict[str, Any]:
        return {"cases": self.cases, "passed": self.passed, "failed": self.failed, "ok": self.failed == 0}


@refuses_unfit_calls
def case_folders(folders: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The case folders directly inside each of ``folders``, sorted by name within each (a link to
    a case folder counts: it is listed by its own name): those holding ``ledger.sqlite``, and damaged packages that lost it (:func:`is_case_package`),
    which then fail (``LEDGER_MISSING``, ``STORAGE_ERROR``) instead of being left out. ``INVALID_ARGUMENT`` for a
    folder that holds none."""
    found: list[Path] = []
    for root in _roots(folders):
        try:
            names = sorted(entry.name for entry in os.scandir(root)
                           if _is_folder(entry) and is_case_package(Path(entry.path)))  # a link to a case too
        except OSError as exc:
            refuse_link_to_nothing(root, "a folder of cases")
            raise os_error(exc, f"cannot list the cases in {root}") from None
        if not names:
            itself = " (it is a case itself: leave out --all)" if is_case_package(root) else ""
            raise LedgerError(E.INVALID_ARGUMENT, f"{root} holds no case folder (a folder with {LEDGER_FILE}){itself}")
        found.extend(root / name for name in names)
    return found


@refuses_unfit_calls
def build_folders(folders: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The folders directly inside each of ``folders`` that :func:`case_folders` leaves out because
    they are named like an import's or a demo's build folder (``.NAME.importing-PID-N``,
    ``.ledger-demo-building-NAME.PID``: a run's scratch, which a killed run leaves and the next
    import or demo there removes; docs/files.md), sorted by name within each. A folder that cannot be
    listed has none (:func:`case_folders` reports it)."""
    found: list[Path] = []
    for root in _roots(folders):
        try:
            found.extend(root / name for name in sorted(entry.name for entry in os.scandir(root)
                                                        if is_build_folder(entry.name) and _is_folder(entry)))
        except OSError as oserr:
            pass_on_interruption(oserr)
            continue
    return found


def left_out(folders: Iterable[str | os.PathLike[str]], listed: list[Path] | None = None) -> list[tuple[Path, str]]:
    """``(path, why)`` of each entry directly inside ``folders`` that :func:`case_folders` and the
    commands over many cases leave out although it may look like a case: a build folder
    (:func:`build_folders`), a link that leads nowhere or loops, and a second path (a link) to a
    case folder listed already, which is verified or exported once, under its first path. What
    ``--all`` prints as notes, so that nothing is left out without a word. ``listed``: what
    :func:`case_folders` gave for ``folders`` already (not listed again)."""
    found = [(path, BUILD_FOLDER_LEFT_OUT) for path in build_folders(folders)]
    for root in _roots(folders):
        try:
            entries = sorted(os.scandir(root), key=lambda entry: entry.name)
        except OSError as oserr:  # case_folders reports it
            pass_on_interruption(oserr)
            continue
        found.extend((Path(entry.path), DEAD_LINK_LEFT_OUT) for entry in entries if dead_link(entry.path))
        found.extend((Path(entry.path), EXPORT_ALONE_LEFT_OUT) for entry in entries if export_alone(entry.path))
    try:
        return found + second_paths(case_folders(folders) if listed is None else listed)
    except LedgerError:
        return found


def named_again(cases: Iterable[str | os.PathLike[str]]) -> list[tuple[Path, str]]:
    """``(path, why)`` of each of ``cases`` (as given on a command line) that names a case listed
    already by another path (``c1`` and ``./link-to-c1``): taken once, under its first path, said in
    a note as ``--all`` says it."""
    return second_paths([fs_path(path, "case path") for path in path_list(cases, "cases")])


def _roots(folders: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The folders of cases ``folders`` names, each once (``big`` and ``./big/`` are one folder, read
    once: its cases and what it leaves out are listed once)."""
    return once_each(fs_path(folder, "folder of cases") for folder in path_list(folders, "folders"))


def _is_folder(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a folder, through a link: a link that loops or leads nowhere is not one."""
    try:
        return entry.is_dir()
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False


def _unique(paths: Any) -> list[Path]:
    """``paths`` with each case once (:func:`~ledger.model.package.once_each`)."""
    return once_each(fs_path(path, "case path") for path in path_list(paths, "cases"))


def _failed(case: Path, exc: LedgerError) -> Outcome:
    if interrupts.pending():  # a refusal Ctrl-C caused inside a callback: the command ends, not the case
        raise KeyboardInterrupt from None
    return {"case": str(case), "ok": False, "error": {"code": exc.code, "message": exc.message}}


def _verify_one(task: tuple[Path, bool, int]) -> Outcome:
    case, strict, jobs = task
    try:
        report = verify_case(case, strict=strict, jobs=jobs)
    except LedgerError as exc:
        return _failed(case, exc)
    except OSError as exc:
        pass_on_interruption(exc)
        return _failed(case, os_error(exc, f"cannot read {case}"))
    failure = report.strict_failure() if strict else None
    if failure is not None:
        return {"case": str(case), "ok": False, "report": {**report.to_dict(), "ok": False},  # not ok under --strict
                "error": {"code": failure.code, "message": failure.message}}
    return {"case": str(case), "ok": True, "report": report.to_dict()}


def _export_one(task: tuple[Path, AnalysisConfig | None, Callable[[str], None] | None]) -> Outcome:
    case, analysis, waiting = task
    try:
        with Case.open(case, analysis_config=analysis) as opened:
            report = export_case(opened, waiting=None if waiting is None else functools.partial(waiting, str(case)))
    except LedgerError as exc:
        return _failed(case, exc)
    except OSError as exc:
        pass_on_interruption(exc)
        return _failed(case, os_error(exc, f"cannot write the export under {case}"))
    return {"case": str(case), "ok": True, "report": report.to_dict()}


@refuses_unfit_calls
def verify_many(cases: Iterable[str | os.PathLike[str]], *, jobs: int | None = None, strict: bool = False,
                each: Callable[[Outcome], None] | None = None) -> ManyReport:
    """Verify every case of ``cases`` (each as :func:`verify_case` does) over ``jobs`` processes, this one
    included (default: the cores this process may use; :func:`~ledger.ground.workers.shared_map`); ``each`` is called with each case's outcome, in order, as it is ready. One case alone
    gets every job itself (:func:`verify_case` with ``jobs``: a large case is replayed by two processes
    at once). With ``strict``, a case whose export is not current fails too. A path given twice is verified once.
    A failing case is in the report, never raised; ``INVALID_ARGUMENT`` for ``jobs`` outside 1–256 or an
    ``each`` that is not a function."""
    check_flag(strict, "strict")
    check_callback(each, "each", 1)
    workers = job_count(jobs)
    report = ManyReport()
    unique = _unique(cases)
    # one case alone may use every job itself (a large one is replayed by two processes at once);
    # several cases use the jobs one case each
    per_case = workers if len(unique) == 1 else 1
    for outcome in shared_map(_verify_one, [(case, strict, per_case) for case in unique], workers):
        report.cases.append(outcome)
        if each is not None:
            each(outcome)
    return report


@refuses_unfit_calls
def export_many(cases: Iterable[str | os.PathLike[str]], *, jobs: int | None = None,
                analysis_config: AnalysisConfig | None = None,
                each: Callable[[Outcome], None] | None = None,
                waiting: Callable[[str], None] | None = None) -> ManyReport:
    """Export every case of ``cases`` (each as :func:`export_case` does) over ``jobs`` processes, this one
    included (default: the cores this process may use; :func:`~ledger.ground.workers.shared_map`); ``each`` as in
    :func:`verify_many`. A path given twice is exported once. ``waiting(case)``, if given, is called with a
    case's path when its export begins to wait for another export of it, in the process exporting it (the
    command line's note on stderr), so with more than one job it must be a function a worker process can
    import (defined at the top level of a module). Errors as :func:`verify_many`; ``INVALID_ARGUMENT`` for a
    ``waiting`` that is neither None nor such a function."""
    check_callback(each, "each", 1)
    check_callback(waiting, "waiting", 1)
    if analysis_config is not None:
        check_instance(analysis_config, AnalysisConfig, "analysis_config", "an AnalysisConfig or None")
    workers = job_count(jobs)
    _check_importable(waiting, workers)
    report = ManyReport()
    tasks = [(case, analysis_config, waiting) for case in _unique(cases)]
    for outcome in shared_map(_export_one, tasks, workers):
        report.cases.append(outcome)
        if each is not None:
            each(outcome)
    return report


def _check_importable(function: Callable[..., Any] | None, workers: int) -> None:
    """``INVALID_ARGUMENT`` unless ``function`` can reach a worker process (pickled by its name) when
    there are ``workers`` > 1."""
    if function is None or workers <= 1:
        return
    try:
        pickle.dumps(function)
    except Exception as exc:  # pickle raises what the object's own reduction raises
        pass_on_interruption(exc)
        raise LedgerError(E.INVALID_ARGUMENT, f"waiting must be a function a worker process can import (defined at "
                          f"the top level of a module) when more than one job runs: {exc}") from None
    inner = getattr(function, "func", getattr(function, "__func__", function))  # a partial's, a method's
    main = sys.modules.get("__main__")
    program = getattr(main, "__file__", None)
    if getattr(inner, "__module__", None) == "__main__" and (program is None or not os.path.isfile(program)):
        # pickled by its name, which a worker looks up in a program it cannot import (python -c, stdin, a notebook)
        raise LedgerError(E.INVALID_ARGUMENT, "waiting must be a function a worker process can import when more than "
                          "one job runs: one defined by a program given as text (python -c, standard input, a "
                          "notebook or the interactive interpreter) is not; define it in a module, or use jobs=1")
