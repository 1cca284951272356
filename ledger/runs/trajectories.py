"""Import coding-agent runs as journals of derived facts (docs/runs.md).

``import_runs`` reads trajectories one file at a time (``.gz`` too) and writes
one journal per run, ``DIR/RUN_ID.jsonl``, ready for ``ledger apply`` and
``ledger simulate``. A step becomes ``reserve`` → ``record_result`` → ``settle``
on hypothesis ``H1`` with action ids ``s0001``, ``s0002``, …; its evidence holds
only facts derived from the observation (hashes, sizes, atom ids, exit code,
target), never a command, thought or output text. The same input gives the
same bytes. A file that cannot be read is reported with the reason and the
other files are still imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..ground import errors as E
from ..ground.errors import LedgerError, describe_value, quoted, refuses_unfit_calls, refuses_unfit_calls_of, repr_shown
from ..ground.errors import pass_on_interruption
from ..ground.canonical import BOM_TEXT, canonical_bytes
from ..ground.config import AnalysisConfig
from ..ground.paths import STORAGE_ERRNOS, fs_path, make_folders, refuse_link_to_nothing
from ..ground.arguments import check_callback, check_instance, check_text_mapping
from ..model.outcomes import check_outcomes, read_outcomes
from ..model.package import refuse_output_in_package
from ..package_tools.atomic_files import create_tagged_temp, discard, remove_abandoned_temp_files
from ..package_tools.journal import LINE_BYTES_MAX
from . import run_files
from .actions import DEFAULT_ACTION_MAP, ActionMap, classify
from .formats import (ALREADY_A_JOURNAL, FormatError, Step, is_no_run, mini_swe_agent_steps, no_repeated_keys,
                      steps_line, swe_agent_steps, too_many_digits)

FORMATS = ("auto", "mini-swe-agent", "swe-agent", "steps")
#: The allocation of the imported run's one hypothesis: large enough that no policy-free replay runs dry.
UNITS_PER_RUN = 100000
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
#: A lone surrogate (text decoded with ``surrogateescape``): no UTF-8, so no canonical JSON, form.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@refuses_unfit_calls_of
@dataclass
class ImportSummary:
    """What :func:`import_runs` did: ``runs`` and ``steps`` written, ``skipped`` (reason → turns not
    imported), ``errors`` (``{"file", "code", "reason"}`` of every file or run not imported: ``code`` is
    ``STORAGE_ERROR`` when the file system refused, else ``INVALID_ARGUMENT``), ``journals``
    (the paths written, in order), ``runs_without_outcome`` (with outcomes given, the runs they do
    not name: their journals record none), ``outcomes_without_run`` (the run ids of the outcomes no run
    imported has, in their order), ``runs_without_steps`` (the runs written with no step: every turn
    skipped, so their journals hold no action), ``over_default_limits`` (a limit of the analysis config →
    the runs written whose journal passes it: its default value, or the value of the ``analysis``
    config given to :func:`import_runs`; ``apply`` refuses them, and ``simulate`` under a policy that
    lets them reach it, unless the config they run under raises it), ``runs_unmarked`` (runs read as
    mini-swe-agent showing none of its marks: check they are agent runs), ``not_runs`` (files holding
    an agent's predictions or an evaluation's report, no run: nothing written for them) and
    ``subfolders_not_read`` (folders given without ``recursive`` whose subfolders hold trajectories)."""

    runs: int = 0
    steps: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    errors: list[dict[str, str]] = field(default_factory=list)
    journals: list[str] = field(default_factory=list)
    runs_without_outcome: list[str] = field(default_factory=list)
    outcomes_without_run: list[str] = field(default_factory=list)
    runs_without_steps: list[str] = field(default_factory=list)
    over_default_limits: dict[str, list[str]] = field(default_factory=dict)
    runs_unmarked: list[str] = field(default_factory=list)  # no trajectory_format, no wrapped observation
    not_runs: list[str] = field(default_factory=list)
    subfolders_not_read: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "steps": self.steps, "skipped": dict(sorted(self.skipped.items())),
                "errors": list(self.errors), "journals": list(self.journals),
                "runs_without_outcome": list(self.runs_without_outcome),
                "outcomes_without_run": list(self.outcomes_without_run),
                "runs_without_steps": list(self.runs_without_steps), "runs_unmarked": list(self.runs_unmarked),
                "not_runs": list(self.not_runs),
                "subfolders_not_read": list(self.subfolders_not_read),
                "over_default_limits": {k: list(v) for k, v in sorted(self.over_default_limits.items())}}


def normalized(text: str) -> str:
    """The observation with trailing whitespace stripped from every line (lines split on ``\\n``)."""
    return "\n".join(line.rstrip() for line in text.split("\n"))


def atom_ids(text: str) -> list[str]:
    """The sorted distinct atom ids of ``text``: an atom is a line left non-empty after ``rstrip()``,
    its id the first 16 hex digits of the sha256 of the line's UTF-8."""
    seen = {line.rstrip() for line in text.split("\n")}
    seen.discard("")
    return sorted({hashlib.sha256(a.encode("utf-8", "surrogatepass")).hexdigest()[:16] for a in seen})


def evidence_of(step: Step, mapping: ActionMap = DEFAULT_ACTION_MAP) -> tuple[str, dict[str, Any]]:
    """``(action name, evidence)`` of ``step``: derived facts only (docs/runs.md)."""
    data = normalized(step.observation).encode("utf-8", "surrogatepass")
    action, target = classify(step.command, mapping)
    evidence: dict[str, Any] = {"observation_sha256": hashlib.sha256(data).hexdigest(),
                                "observation_bytes": len(data),
                                "atoms": atom_ids(step.observation if step.output is None else step.output)}
    if step.exit_code is not None:
        evidence["exit_code"] = step.exit_code
    if target is not None:  # a path decoded with surrogateescape keeps a U+FFFD for each byte not UTF-8
        evidence["target"] = _LONE_SURROGATE.sub("\ufffd", target)
    return action, evidence


# --- writing journals ----------------------------------------------------------------------
def _line(item: Mapping[str, Any]) -> bytes:
    return json.dumps(item).encode("ascii") + b"\n"


class _Journal:
    """One run's journal, written to a temp file in ``DIR`` and renamed into place when complete.

    Its file may be closed between steps (:meth:`suspend`) and is opened again, to append, by the
    next step, so that a file of many interleaved runs holds few open at once."""

    def __init__(self, out: Path, run: str) -> None:
        self.run, self.final, self.steps = run, out / f"{run}.jsonl", 0
        self.evidence_bytes_max = 0  # the largest evidence payload of a step, canonical bytes
        self.temp: Path | None = None
        self.handle: Any = None
        fd = -1
        try:  # an interrupt before the caller holds this journal (even inside the create) removes its file
            # named for this process, so that an import killed meanwhile has it removed by the next one
            fd = create_tagged_temp(out, f".{run}.", _TEMP_SUFFIX, self._named)
            self.handle = os.fdopen(fd, "wb")
            for item in ({"op": "open_revision", "hypotheses": [{"statement": f"agent run {run}"}],
                          "units_per_hypothesis": UNITS_PER_RUN},
                         {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}):
                self.handle.write(_line(item))
        except BaseException:
            if self.handle is None and fd >= 0:
                os.close(fd)
            self.abandon()
            raise

    def _named(self, temp: Path | None) -> None:
        self.temp = temp

    def _write(self, *items: Mapping[str, Any]) -> None:
        """Append journal lines, opening the file again if it was suspended."""
        if self.handle is None:
            self.handle = open(self.temp, "ab")
        for item in items:
            self.handle.write(_line(item))

    def step(self, step: Step, mapping: ActionMap, score: int) -> None:
        self.steps += 1
        action_id = f"s{self.steps:04d}"
        action, evidence = evidence_of(step, mapping)
        base = {"op": "reserve", "hypothesis": "H1", "action_id": action_id}
        result = _line({**base, "op": "record_result", "evidence": evidence})
        if len(result) - 1 > LINE_BYTES_MAX:  # as apply reads it: without its newline
            raise ValueError(f"run {self.run}: step {self.steps}'s observation has {len(evidence['atoms'])} distinct "
                             f"lines, which make a journal line of {len(result) - 1} bytes, over the {LINE_BYTES_MAX} "
                             "a journal line may hold: no journal could replay it")
        self.evidence_bytes_max = max(self.evidence_bytes_max, len(canonical_bytes(evidence)))
        self._write({**base, "action": action})
        self.handle.write(result)
        self._write({**base, "op": "settle", "semantic_score": score, "reason": "replayed step"})

    def over_limits(self, limits: Mapping[str, int]) -> list[str]:
        """The analysis config's ``limits`` this journal passes."""
        over = []
        if self.evidence_bytes_max > limits["evidence_payload_bytes_max"]:
            over.append("evidence_payload_bytes_max")
        if BUDGET_EVENTS_PER_STEP * self.steps + 1 > limits["budget_events_max"]:  # 1: the initialize
            over.append("budget_events_max")
        return over

    def suspend(self) -> None:
        """Close the file until the next step."""
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def check_final(self) -> None:
        """``ValueError`` when the journal's name in the output folder is taken by something no journal
        can replace (a folder), said before any journal of its input is renamed into place."""
        if self.final.is_dir() and not self.final.is_symlink():
            raise ValueError(f"{self.final.name} in the output folder is a folder, not a journal: move it aside")

    def finish(self, outcome: tuple[str, str] | None) -> None:
        self.check_final()
        if outcome is not None:
            self._write({"op": "record_outcome", "outcome": outcome[0], "source": outcome[1]})
        self.suspend()
        os.chmod(self.temp, 0o644)
        refuse_output_in_package(os.path.realpath(self.final), "output folder")  # a link swapped in meanwhile
        os.replace(self.temp, self.final)

    def abandon(self) -> None:
        with contextlib.suppress(OSError):
            self.suspend()
        if self.temp is not None:
            discard(self.temp)  # not there (never made, renamed into place) or not removable: no error


#: How a journal's temp file name ends (after its process tag).
_TEMP_SUFFIX = ".tmp"

#: Budget events a step writes: its reserve, record_result and settle.
BUDGET_EVENTS_PER_STEP = 3

#: At most this many runs of one ``steps`` file have their journal open at once (the others are
#: closed and opened again to append when their next line comes).
OPEN_JOURNALS_MAX = 32


def _same_file(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False


@dataclass
class _Importer:
    out: Path
    fmt: str
    mapping: ActionMap
    score: int
    outcomes: Mapping[str, str] | None
    source: str
    limits: Mapping[str, int]
    prefix: str = ""  # put before every run id (``run_prefix``)
    summary: ImportSummary = field(default_factory=ImportSummary)
    #: run id (prefixed) in lower case → the run id and the input that brought it (a journal is named by its
    #: run id, and ids that differ only in letter case name one file where names ignore case: macOS, Windows)
    seen: dict[str, tuple[str, Path]] = field(default_factory=dict)
    #: the journals ``out`` held before this import, by name in lower case → name (another import's runs)
    held: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            names = os.listdir(self.out)
        except OSError as oserr:  # an import that cannot list it cannot write it either: said when it tries
            pass_on_interruption(oserr)
            names = []
        self.held = {name.lower(): name for name in names if name.lower().endswith(".jsonl")}

    def _begin(self, given: str, path: Path, line: int | None = None) -> _Journal:
        """The journal of the run ``given`` (its id in the input) from ``path`` (at ``line`` of a steps file)."""
        where = f"line {line}: " if line is not None else ""
        run = self.prefix + given
        if not _RUN_ID.fullmatch(given):
            raise ValueError(f"{where}run id {quoted(given, 80)} ({len(given)} character"
                             f"{'' if len(given) == 1 else 's'}) is not a "
                             "plain file name: 1 to 128 letters, digits, '.', '_', '-', the first a letter or digit")
        if not _RUN_ID.fullmatch(run):
            raise ValueError(f"{where}run id {quoted(given, 80)} with the prefix {self.prefix!r} has {len(run)} "
                             "characters, more than the 128 a run id may have")
        if run.lower() in self.seen:
            earlier, source = self.seen[run.lower()]
            if earlier != run:
                raise ValueError(f"{where}run id {run!r} differs from the run id {earlier!r} imported from {source} "
                                 "only in letter case: their journals would be one file where file names ignore case "
                                 "(macOS, Windows); give the runs ids that differ otherwise")
            if _same_file(path, source):
                raise ValueError(f"given already (twice, or also in a folder given): its run {run!r} is imported "
                                 f"once, from {source}")
            raise ValueError(f"{where}run id {run!r} was already imported from {source}" + (
                "" if self.prefix else "; runs of the same tasks by other agents or models: import each set with a "
                "--run-prefix of its own (run_prefix= in Python)"))
        other = self.held.get(f"{run}.jsonl".lower())
        if other is not None and other != f"{run}.jsonl":
            raise ValueError(f"{where}run id {run!r} differs from the journal {other} that {self.out} holds only in "
                             "letter case: the two would be one file where file names ignore case (macOS, Windows); "
                             "import into another folder, or give the runs ids that differ otherwise")
        journal = _Journal(self.out, run)
        self.seen[run.lower()] = (run, path)
        return journal

    def _end(self, journal: _Journal, skipped: Mapping[str, int] | None = None) -> None:
        """Count the run written, with ``skipped`` (reason → its turns left out): turns of a run not
        written are counted nowhere."""
        label = (self.outcomes or {}).get(journal.run.removeprefix(self.prefix))  # the input's own run id
        journal.finish(None if label is None else (label, self.source))
        if label is None and self.outcomes is not None:
            self.summary.runs_without_outcome.append(journal.run)
        self.summary.runs += 1
        self.summary.steps += journal.steps
        for reason, turns in (skipped or {}).items():
            self.summary.skipped[reason] = self.summary.skipped.get(reason, 0) + turns
        if journal.steps == 0:
            self.summary.runs_without_steps.append(journal.run)
        for limit in journal.over_limits(self.limits):
            self.summary.over_default_limits.setdefault(limit, []).append(journal.run)
        self.summary.journals.append(str(journal.final))

    def _feed(self, journal: _Journal, items: Iterable[Step | FormatError]) -> dict[str, int]:
        """Step ``journal`` through ``items``; the turns left out, by reason."""
        skipped: dict[str, int] = {}
        for item in items:
            if isinstance(item, Step) and not item.command.strip():
                item = FormatError("empty command")  # nothing was run: no action to account for
            if isinstance(item, FormatError):
                skipped[str(item)] = skipped.get(str(item), 0) + 1
            else:
                journal.step(item, self.mapping, self.score)
        return skipped

    def trajectory(self, path: Path) -> None:
        whole = run_files.read_whole(path)
        if not whole.removeprefix(BOM_TEXT.encode()).strip():
            if is_no_run(None, path.name):  # a preds.json with no prediction yet
                self.summary.not_runs.append(str(path))
                return
            raise ValueError("no run: the file is empty" if not whole else
                             "no run: the file holds no JSON value (only white space or a byte-order mark)")
        try:
            # one run at a time: a trajectory file is one JSON document, UTF-8 (maybe with a
            # byte-order mark), never UTF-16 or UTF-32 guessed from its bytes
            data = json.loads(whole.decode("utf-8-sig"), object_pairs_hook=no_repeated_keys)
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8 (byte {exc.start + 1}: {exc.reason})") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}{_several_values_hint(exc)}") from None
        except ValueError as exc:
            raise ValueError(too_many_digits(exc) or str(exc)) from None
        del whole
        if is_no_run(data, path.name):
            self.summary.not_runs.append(str(path))
            return
        if isinstance(data, Mapping) and "op" in data and not {"messages", "trajectory"} & data.keys():
            raise ValueError(f"holds one journal line (it has \"op\"): {ALREADY_A_JOURNAL}")
        fmt = run_files.format_of(path, self.fmt, data)
        steps = (swe_agent_steps if fmt == "swe-agent" else mini_swe_agent_steps)(data)
        given = data.get("instance_id") if isinstance(data, Mapping) else None
        if given is not None and not isinstance(given, str):
            raise ValueError(f"instance_id must be a string (the run id), got {describe_value(given)}")
        run = given if given is not None else run_files.name_stem(path)
        journal = None
        marked = [fmt != "mini-swe-agent" or (isinstance(data, Mapping) and "trajectory_format" in data)]

        def noting(items: Iterable[Step | FormatError]) -> Iterator[Step | FormatError]:
            for item in items:
                marked[0] = marked[0] or (isinstance(item, Step) and ((item.output, item.exit_code) != (None, None)
                                                                   or "<returncode>" in item.observation))
                yield item
        try:
            journal = self._begin(run, path)
            self._end(journal, self._feed(journal, noting(steps)))
            if not marked[0] and journal.steps:
                self.summary.runs_unmarked.append(run)
        except BaseException:
            if journal is not None:
                journal.abandon()
                self.seen.pop(journal.run.lower(), None)  # not imported: another input may still bring it
            raise

    def generic(self, path: Path) -> None:
        """A ``steps`` file: all of its lines with the same ``run``, in file order, form that run,
        wherever they are (parallel agents appending to one log interleave them). The file is one
        unit: its runs are written only once every line has been read, so a bad line imports none
        of them and leaves nothing behind."""
        journals: dict[str, _Journal] = {}
        open_runs: dict[str, None] = {}  # runs whose journal is open, least recently stepped first
        number = 0
        try:
            with run_files.open_run_file(path) as handle:
                for number, line in enumerate(run_files.run_file_lines(handle, path), start=1):
                    if not line.strip():
                        continue
                    if not journals and _no_run_line(line, path):
                        self.summary.not_runs.append(str(path))
                        return
                    run, step = steps_line(line, number, self.fmt == "auto")
                    journal = journals.get(run)
                    if journal is None:
                        journal = journals[run] = self._begin(run, path, number)
                    journal.step(step, self.mapping, self.score)
                    open_runs.pop(run, None)
                    open_runs[run] = None
                    if len(open_runs) > OPEN_JOURNALS_MAX:
                        oldest = next(iter(open_runs))
                        del open_runs[oldest]
                        journals[oldest].suspend()
            if not journals and is_no_run(None, path.name):
                self.summary.not_runs.append(str(path))  # no prediction yet
                return
            if not journals:
                raise ValueError("no step line: the file is empty" if number == 0 else
                                 f"no step line: the file's {number} line{'s' if number > 1 else ''} "
                                 f"{'are' if number > 1 else 'is'} blank")
            for journal in journals.values():
                journal.check_final()  # every run of the file can be placed, or none is
            for run in list(journals):
                self._end(journals[run])
                del journals[run]
        except BaseException:
            for journal in journals.values():
                journal.abandon()
                self.seen.pop(journal.run.lower(), None)  # not imported: another input may still bring it
            raise

    def file(self, path: Path) -> None:
        """Import the runs of one file; a file that cannot be read goes into the summary's errors."""
        try:
            if run_files.format_of(path, self.fmt) == "steps":
                self.generic(path)
            else:
                self.trajectory(path)
        except run_files.FILE_FAILURES as exc:
            pass_on_interruption(exc)
            self.summary.errors.append(run_files.failure(exc, path, self.out, self.fmt))


def _several_values_hint(exc: json.JSONDecodeError) -> str:
    """What a trajectory file that is several JSON values, one per line, is told: a journal (its first
    value has "op") is sent to apply; anything else, a message log or steps in a file not named
    *.jsonl, to the steps format."""
    if exc.msg != "Extra data":
        return ""
    try:
        first = json.loads(exc.doc[:exc.pos])
    except (ValueError, RecursionError):
        first = None
    if isinstance(first, Mapping) and "op" in first:
        return f" (its first line has \"op\": {ALREADY_A_JOURNAL})"
    return (" (several JSON values, one per line? a file of steps is read in the steps format: name it *.jsonl, "
            "or give --format steps)")


def _no_run_line(line: bytes, path: Path) -> bool:
    """Whether the first line of a steps file is no run: a prediction (SWE-agent's ``all_preds.jsonl``)."""
    try:
        return is_no_run(json.loads(line), path.name)
    except (ValueError, RecursionError):
        return False  # not JSON: the steps format's own reading says what is wrong


def _remove_if_empty(made: list[Path]) -> None:
    """Remove the folders ``made`` (the deepest first) while they are empty; best effort: a folder that
    cannot be listed or removed (one this user may not enter) stays."""
    try:
        if made and not any(made[0].iterdir()):
            for folder in made:
                folder.rmdir()
    except OSError as oserr:
        pass_on_interruption(oserr)


def _refuse_inputs_in(target: Path, files: Iterable[Path]) -> None:
    """``INVALID_ARGUMENT`` when an input lies in the output folder itself: a journal written there
    (``RUN.jsonl``) could replace an input not read yet, and a later import of the folder would
    read the journals as inputs. Checked before anything is written."""
    if not target.is_dir():
        return
    for path in files:
        try:  # the file as named, and the file a link names
            inside = any(os.path.samefile(parent, target)
                         for parent in (path.parent, Path(os.path.realpath(path)).parent))
        except OSError as oserr:
            pass_on_interruption(oserr)
            continue
        if inside:
            raise LedgerError(E.INVALID_ARGUMENT, f"{path} is an input of this import and lies in the output folder "
                              f"{target}, where the journals are written (RUN.jsonl, replacing a file of that "
                              "name): give the journals another folder", path=str(path))


def _check_writable(folder: Path) -> None:
    """``STORAGE_ERROR`` naming ``folder`` when no journal can be written there (read-only, another
    user's): said once, before any input is read, rather than once for each input."""
    probe: list[Path | None] = [None]

    def named(path: Path | None) -> None:
        probe[0] = path
    try:
        os.close(create_tagged_temp(folder, ".ledger-probe.", _TEMP_SUFFIX, named))
    except OSError as exc:
        pass_on_interruption(exc)
        code = E.STORAGE_ERROR if exc.errno in STORAGE_ERRNOS else E.INVALID_ARGUMENT
        raise LedgerError(code, f"cannot write journals in the output folder {folder}: {exc.strerror or exc}") from None
    finally:
        if probe[0] is not None:
            discard(probe[0])  # never made, on a read-only folder: its removal fails too, and is no error


def _check_options(fmt: Any, semantic_score: Any, recursive: Any, run_prefix: Any) -> None:
    """``INVALID_ARGUMENT`` for an option of :func:`import_runs` out of its range."""
    if fmt not in FORMATS:
        raise LedgerError(E.INVALID_ARGUMENT, f"unknown format {repr_shown(fmt, 80)}; formats: {', '.join(FORMATS)}")
    if type(semantic_score) is not int or not 0 <= semantic_score <= 100:
        raise LedgerError(E.INVALID_ARGUMENT, f"semantic_score must be an integer 0-100, got {repr_shown(semantic_score, 80)}")
    if type(recursive) is not bool:
        raise LedgerError(E.INVALID_ARGUMENT, f"recursive must be True or False, got {repr_shown(recursive, 80)}")
    check_run_prefix(run_prefix)


def check_run_prefix(run_prefix: Any) -> str:
    """``run_prefix`` if it can start a run id (empty, or letters, digits, ``.``, ``_``, ``-``, the first a
    letter or digit, at most 127 characters), else ``INVALID_ARGUMENT`` saying why."""
    if not isinstance(run_prefix, str) or (run_prefix and not _RUN_ID.fullmatch(run_prefix[:127])):
        raise LedgerError(E.INVALID_ARGUMENT, f"the run prefix {repr_shown(run_prefix, 80)} must start a plain file "
                          "name: letters, digits, '.', '_', '-', the first a letter or digit (or be empty)")
    if len(run_prefix) > 127:
        raise LedgerError(E.INVALID_ARGUMENT, f"the run prefix has {len(run_prefix)} characters: a run id has at most "
                          "128, so the prefix at most 127 (one left for the run's own id)")
    return run_prefix


def _refuse_no_runs_alone(summary: ImportSummary, files: list[Path], unread: list[tuple[Path, Path]]) -> None:
    """``INVALID_ARGUMENT`` when every file read held no run (:func:`~.formats.is_no_run`): none to import (naming a folder
    whose subfolders hold trajectories, when one was given without ``recursive``)."""
    if len(summary.not_runs) == len(files):
        hint = f"; {unread[0][0]} holds trajectories in subfolders ({unread[0][1]}): give --recursive" if unread else ""
        raise LedgerError(E.INVALID_ARGUMENT, f"no run to import: {summary.not_runs[0]} holds an agent's "
                          f"predictions or an evaluation's report, not a run{hint}")


@refuses_unfit_calls
def import_runs(paths: Iterable[str | os.PathLike[str]], out: str | os.PathLike[str], *, fmt: str = "auto",
                outcomes: Mapping[str, str] | str | os.PathLike[str] | None = None, semantic_score: int = 50,
                actions: ActionMap | str | os.PathLike[str] | None = None,
                progress: Callable[[int, int], None] | None = None,
                analysis: AnalysisConfig | None = None, recursive: bool = False,
                run_prefix: str = "") -> ImportSummary:
    """Write one journal per run of the trajectories ``paths`` (files or folders) into ``out``.

    ``fmt``: one of :data:`FORMATS`; ``outcomes``: run id → outcome label (or the path of the CSV
    ``ledger simulate --outcomes`` takes), appended to the run's journal as ``record_outcome``;
    ``semantic_score``: what every ``settle`` carries; ``actions``: the command → action mapping
    (an :class:`ActionMap` or a TOML file); ``progress(done, total)`` is called after each file;
    ``analysis``: the analysis config the journals will run under, whose limits the summary's
    ``over_default_limits`` compares with (default: the default config); ``recursive``: a folder's
    subfolders are read too, at any depth (without it, the summary's ``subfolders_not_read`` names each
    folder given whose subfolders hold trajectories). A file holding an agent's predictions
    (``preds.json``) or an evaluation's report (``report.json``) is no run: named in ``not_runs``,
    nothing written for it.
    ``run_prefix`` is put before every run id (the journal's name too; ``outcomes`` name the runs
    without it), so runs of the same tasks by other agents can share ``out``.

    Returns an :class:`ImportSummary`; a file that cannot be read is in its ``errors`` and the
    others are imported. Raises ``INVALID_ARGUMENT`` for a bad argument, ``CONFIG_INVALID`` for a
    bad actions file; writes only ``out/RUN_ID.jsonl`` files (and their temp files) in ``out``.
    """
    check_callback(progress, "progress", 2)  # before any file is read or written
    _check_options(fmt, semantic_score, recursive, run_prefix)
    limits = check_instance(AnalysisConfig() if analysis is None else analysis, AnalysisConfig, "analysis",
                            "an AnalysisConfig or None").limits
    mapping = actions if isinstance(actions, ActionMap) else \
        DEFAULT_ACTION_MAP if actions is None else ActionMap.load(actions)
    source = "outcomes table"
    if isinstance(outcomes, (str, bytes, os.PathLike)):
        # the record_outcome lines' source: a name byte that is not UTF-8 becomes U+FFFD, as in a target,
        # so the line has a canonical JSON form (a lone surrogate has none)
        source = f"outcomes file {_LONE_SURROGATE.sub(chr(0xFFFD), Path(os.fsdecode(outcomes)).name)}"
        outcomes = read_outcomes(outcomes)
    elif outcomes is not None:
        check_outcomes(check_text_mapping(outcomes, "outcomes"), source)
    unread: list[tuple[Path, Path]] = []
    unlisted: list[tuple[Path, OSError]] = []
    target = fs_path(out, "output folder")
    files = run_files.input_files(paths, recursive, unread, target, unlisted)
    refuse_output_in_package(target, "output folder")
    refuse_link_to_nothing(target, "the output folder, --out")
    if target.exists() and not target.is_dir():
        raise LedgerError(E.INVALID_ARGUMENT, f"{target}: exists and is not a folder")
    _refuse_inputs_in(target, files)
    made = [target, *target.parents]  # the folders this import makes, the deepest first
    made = made[:next(n for n, folder in enumerate(made) if folder.exists())]
    make_folders(target)
    importer = _Importer(target, fmt, mapping, semantic_score, outcomes, source, limits, run_prefix)
    importer.summary.subfolders_not_read = [str(folder) for folder, _ in unread]
    importer.summary.errors += [{"file": str(folder), "code": E.STORAGE_ERROR if exc.errno in STORAGE_ERRNOS else
                                 E.INVALID_ARGUMENT, "reason": f"cannot list this folder: {exc.strerror or exc}"}
                                for folder, exc in unlisted]
    try:
        _check_writable(target)
        remove_abandoned_temp_files(target, ".", _TEMP_SUFFIX)  # what an import killed meanwhile left
        for done, path in enumerate(files, start=1):
            importer.file(path)
            if progress is not None:
                progress(done, len(files))
    finally:
        _remove_if_empty(made)  # every file failed: no folder it made is left behind, empty
    _refuse_no_runs_alone(importer.summary, files, unread)
    if outcomes is not None:
        imported = {run for run, _ in importer.seen.values()}
        importer.summary.outcomes_without_run = [run for run in outcomes if run_prefix + run not in imported]
    return importer.summary
