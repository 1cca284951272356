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
import gzip
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, IO, Iterable, Iterator, Mapping

from ..ground import errors as E
from ..ground.errors import LedgerError
from ..ground.canonical import SAFE_INTEGER_MAX, canonical_bytes
from ..ground.config import DEFAULT_LIMITS
from ..ground.paths import STORAGE_ERRNOS, folder_inputs, fs_path
from ..ground.arguments import check_text_mapping
from ..model.outcomes import check_outcomes, read_outcomes
from ..model.package import refuse_output_in_package
from ..package_tools.journal import LINE_BYTES_MAX
from .actions import DEFAULT_ACTION_MAP, ActionMap, classify

FORMATS = ("auto", "mini-swe-agent", "swe-agent", "steps")
#: The allocation of the imported run's one hypothesis: large enough that no policy-free replay runs dry.
UNITS_PER_RUN = 100000
_FENCE = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.S)
_RETURNCODE = re.compile(r"\A\s*<returncode>(-?[0-9]+)</returncode>")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_EXTENSIONS = (".gz", ".json", ".jsonl", ".traj")


@dataclass(frozen=True)
class Step:
    """One step of a run: the command, the observation as the agent saw it, and its exit code if known."""

    command: str
    observation: str
    exit_code: int | None = None


@dataclass
class ImportSummary:
    """What :func:`import_runs` did: ``runs`` and ``steps`` written, ``skipped`` (reason → turns not
    imported), ``errors`` (``{"file", "code", "reason"}`` of every file or run not imported: ``code`` is
    ``STORAGE_ERROR`` when the file system refused, else ``INVALID_ARGUMENT``), ``journals``
    (the paths written, in order), ``runs_without_outcome`` (with outcomes given, the runs they do
    not name: their journals record none), ``outcomes_without_run`` (the run ids of the outcomes no run
    imported has, in their order), ``over_default_limits`` (a limit of the analysis config →
    the runs written whose journal passes its default value: ``simulate`` and ``apply`` refuse them
    unless the config raises it)."""

    runs: int = 0
    steps: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    errors: list[dict[str, str]] = field(default_factory=list)
    journals: list[str] = field(default_factory=list)
    runs_without_outcome: list[str] = field(default_factory=list)
    outcomes_without_run: list[str] = field(default_factory=list)
    over_default_limits: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "steps": self.steps, "skipped": dict(sorted(self.skipped.items())),
                "errors": list(self.errors), "journals": list(self.journals),
                "runs_without_outcome": list(self.runs_without_outcome),
                "outcomes_without_run": list(self.outcomes_without_run),
                "over_default_limits": {k: list(v) for k, v in sorted(self.over_default_limits.items())}}


class _FormatError(Exception):
    """A turn that is not a step (counted in the summary under its reason, then skipped)."""


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
                                "observation_bytes": len(data), "atoms": atom_ids(step.observation)}
    if step.exit_code is not None:
        evidence["exit_code"] = step.exit_code
    if target is not None:
        evidence["target"] = target
    return action, evidence


# --- the formats ---------------------------------------------------------------------------
def _text(content: Any) -> str:
    """A message's content as text (a list of parts: their ``text`` joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def _returncode(message: Mapping[str, Any], text: str) -> int | None:
    """The exit code a mini-swe-agent observation carries, or None: none given, or one no journal
    can hold (past ±(2**53 - 1), the largest exact JSON integer; the observation keeps it)."""
    extra = message.get("extra")
    if isinstance(extra, Mapping) and type(extra.get("returncode")) is int:
        code = extra["returncode"]
    else:
        found = _RETURNCODE.match(text)
        code = int(found.group(1)) if found else None
    return code if code is None or abs(code) <= SAFE_INTEGER_MAX else None


def _hashable(value: Any) -> Any:
    """A tool call id as a dict key: its JSON text, so ids are equal only when they are the same JSON
    (``1``, ``true``, ``1.0`` and ``"1"`` are four ids; a list or object is one too). None stays None."""
    return None if value is None else json.dumps(value, sort_keys=True)


def _tool_steps(messages: list[Any], index: int) -> Iterator[Step | _FormatError]:
    """The steps of an assistant message in tool-call mode: each bash call answered by a ``tool`` message.
    A call whose id another call of the message shares, or that several messages answer, is a format
    error: which answer is whose cannot be told."""
    answers: dict[Any, list[Any]] = {}
    for later in messages[index + 1:]:
        if not isinstance(later, Mapping) or later.get("role") == "assistant":
            break
        if later.get("tool_call_id") is not None:
            answers.setdefault(_hashable(later["tool_call_id"]), []).append(later)
    calls = messages[index]["tool_calls"]
    ids = [_hashable(call.get("id")) if isinstance(call, Mapping) else None for call in calls]
    for call, call_id in zip(calls, ids):
        function = call.get("function") if isinstance(call, Mapping) else None
        try:
            arguments = json.loads(function["arguments"]) if isinstance(function["arguments"], str) \
                else function["arguments"]
            command = arguments["command"]
            assert function.get("name") == "bash" and isinstance(command, str)
        except (TypeError, KeyError, ValueError, AssertionError):
            yield _FormatError("tool call that is not a bash command")
            continue
        found = answers.get(call_id, [])
        if call_id is not None and (ids.count(call_id) > 1 or len(found) > 1):
            yield _FormatError("tool call sharing its id")
            continue
        if not found:
            yield _FormatError("tool call without a result")
            continue
        answer = found[0]
        text = _text(answer.get("content"))
        yield Step(command, text, _returncode(answer, text))


def mini_swe_agent_steps(data: Any) -> Iterator[Step | _FormatError]:
    """Steps of a mini-swe-agent trajectory (a ``{"messages": [...]}`` object or a bare message list)."""
    messages = data.get("messages") if isinstance(data, Mapping) else data
    if not isinstance(messages, list):
        raise ValueError("no messages list: not a mini-swe-agent trajectory")
    if not any(isinstance(message, Mapping) and "role" in message for message in messages):
        raise ValueError("no message with a role: an empty or foreign list, not a mini-swe-agent trajectory")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        if message.get("tool_calls"):
            yield from _tool_steps(messages, index)
            continue
        blocks = _FENCE.findall(_text(message.get("content")))
        following = messages[index + 1] if index + 1 < len(messages) else None
        if len(blocks) != 1:
            yield _FormatError("no bash block" if not blocks else "several bash blocks")
        elif not isinstance(following, Mapping) or following.get("role") == "assistant":
            yield _FormatError("no observation")
        else:
            text = _text(following.get("content"))
            yield Step(blocks[0], text, _returncode(following, text))


def swe_agent_steps(data: Any) -> Iterator[Step | _FormatError]:
    """Steps of a SWE-agent ``.traj``: each ``trajectory[]`` entry with its ``action`` and ``observation``."""
    entries = data.get("trajectory") if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        raise ValueError("no trajectory list: not a SWE-agent .traj (--format auto tells the formats apart)")
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("action"), str) \
                or not isinstance(entry.get("observation"), str):
            yield _FormatError("entry without action and observation")
        else:
            yield Step(entry["action"], entry["observation"])


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object of a steps line; a key given twice (which of its values would count?) is refused."""
    item = dict(pairs)
    if len(item) != len(pairs):
        keys = [key for key, _ in pairs]
        raise ValueError(f"the key {next(k for k in keys if keys.count(k) > 1)!r} is given twice")
    return item


def _generic_step(line: bytes, number: int) -> tuple[str, Step]:
    try:
        item = json.loads(line, object_pairs_hook=_no_repeated_keys)
    except UnicodeDecodeError as exc:
        raise ValueError(f"line {number}: not UTF-8 (byte {exc.start + 1}: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"line {number}: not JSON ({exc.msg})") from None
    except ValueError as exc:  # a key given twice (_no_repeated_keys)
        raise ValueError(f"line {number}: {exc}") from None
    if not isinstance(item, Mapping) or not isinstance(item.get("run"), str) \
            or not isinstance(item.get("command"), str) or not isinstance(item.get("output"), str):
        hint = (" (this line has \"op\": the file is already a ledger journal; give it to 'ledger apply' "
                "or 'ledger simulate')" if isinstance(item, Mapping) and "op" in item else "")
        raise ValueError(f"line {number}: needs the string keys run, command and output{hint}")
    code = item.get("exit_code")
    if code is not None and (type(code) is not int or abs(code) > SAFE_INTEGER_MAX):
        raise ValueError(f"line {number}: exit_code must be an integer within ±(2**53-1)")
    return item["run"], Step(item["command"], item["output"], code)


# --- reading files --------------------------------------------------------------------------
def _open(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def _stem(path: Path) -> str:
    name = path.name
    while name.lower().endswith(_EXTENSIONS):
        name = name[:name.rindex(".")]
    return name


def _format_of(path: Path, requested: str, data: Any = None) -> str:
    if requested != "auto":
        return requested
    if _stem(path) != path.name and ".jsonl" in path.name.lower():
        return "steps"
    if isinstance(data, Mapping) and isinstance(data.get("trajectory"), list) and "messages" not in data:
        return "swe-agent"
    return "mini-swe-agent"


def input_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files named by ``paths``: a file as is, a folder as every trajectory in it (``*.json``,
    ``*.traj``, ``*.jsonl``, each maybe ``.gz``, in any letter case), sorted by name.
    ``INVALID_ARGUMENT`` for a path that does not exist, an entry so named that is no regular file
    (:func:`~ledger.ground.paths.folder_inputs`), or no trajectory at all."""
    found: list[Path] = []
    for entry in paths:
        path = fs_path(entry, "trajectory")
        if path.is_dir():
            found += folder_inputs(path, _EXTENSIONS, "trajectory")
        elif path.exists():
            found.append(path)
        else:
            raise LedgerError(E.INVALID_ARGUMENT, f"{path}: no such trajectory file or folder")
    if not found:
        raise LedgerError(E.INVALID_ARGUMENT, "no trajectory to import (*.json, *.traj, *.jsonl, each maybe .gz)")
    return found


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
        fd, self.temp = tempfile.mkstemp(prefix=f".{run}.", suffix=".tmp", dir=out)
        self.handle: Any = os.fdopen(fd, "wb")
        for item in ({"op": "open_revision", "hypotheses": [{"statement": f"agent run {run}"}],
                      "units_per_hypothesis": UNITS_PER_RUN},
                     {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}):
            self.handle.write(_line(item))

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

    def over_default_limits(self) -> list[str]:
        """The analysis config's limits whose default values this journal passes."""
        over = []
        if self.evidence_bytes_max > DEFAULT_LIMITS["evidence_payload_bytes_max"]:
            over.append("evidence_payload_bytes_max")
        if BUDGET_EVENTS_PER_STEP * self.steps + 1 > DEFAULT_LIMITS["budget_events_max"]:  # 1: the initialize
            over.append("budget_events_max")
        return over

    def suspend(self) -> None:
        """Close the file until the next step."""
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def finish(self, outcome: tuple[str, str] | None) -> None:
        if outcome is not None:
            self._write({"op": "record_outcome", "outcome": outcome[0], "source": outcome[1]})
        self.suspend()
        os.chmod(self.temp, 0o644)
        refuse_output_in_package(os.path.realpath(self.final), "output folder")  # a link swapped in meanwhile
        os.replace(self.temp, self.final)

    def abandon(self) -> None:
        with contextlib.suppress(OSError):
            self.suspend()
        with contextlib.suppress(FileNotFoundError):  # already renamed into place
            os.unlink(self.temp)


#: Budget events a step writes: its reserve, record_result and settle.
BUDGET_EVENTS_PER_STEP = 3

#: At most this many runs of one ``steps`` file have their journal open at once (the others are
#: closed and opened again to append when their next line comes).
OPEN_JOURNALS_MAX = 32


@dataclass
class _Importer:
    out: Path
    fmt: str
    mapping: ActionMap
    score: int
    outcomes: Mapping[str, str] | None
    source: str
    summary: ImportSummary = field(default_factory=ImportSummary)
    seen: set[str] = field(default_factory=set)

    def _begin(self, run: str) -> _Journal:
        if not _RUN_ID.fullmatch(run):
            raise ValueError(f"run id {run[:80]!r}{'…' if len(run) > 80 else ''} ({len(run)} characters) is not a "
                             "plain file name: 1 to 128 letters, digits, '.', '_', '-', the first a letter or digit")
        if run in self.seen:
            raise ValueError(f"run id {run!r} was already imported from another input")
        self.seen.add(run)
        return _Journal(self.out, run)

    def _end(self, journal: _Journal) -> None:
        label = (self.outcomes or {}).get(journal.run)
        journal.finish(None if label is None else (label, self.source))
        if label is None and self.outcomes is not None:
            self.summary.runs_without_outcome.append(journal.run)
        self.summary.runs += 1
        self.summary.steps += journal.steps
        for limit in journal.over_default_limits():
            self.summary.over_default_limits.setdefault(limit, []).append(journal.run)
        self.summary.journals.append(str(journal.final))

    def _feed(self, journal: _Journal, items: Iterable[Step | _FormatError]) -> None:
        for item in items:
            if isinstance(item, _FormatError):
                reason = str(item)
                self.summary.skipped[reason] = self.summary.skipped.get(reason, 0) + 1
            else:
                journal.step(item, self.mapping, self.score)

    def trajectory(self, path: Path) -> None:
        with _open(path) as handle:
            try:
                data = json.load(handle)  # one run at a time: a trajectory file is one JSON document
            except json.JSONDecodeError as exc:
                raise ValueError(f"not JSON: {exc}") from None
        fmt = _format_of(path, self.fmt, data)
        steps = (swe_agent_steps if fmt == "swe-agent" else mini_swe_agent_steps)(data)
        given = data.get("instance_id") if isinstance(data, Mapping) else None
        if given is not None and not isinstance(given, str):
            raise ValueError(f"instance_id must be a string (the run id), got {type(given).__name__}")
        run = given if given is not None else _stem(path)
        journal = self._begin(run)
        try:
            self._feed(journal, steps)
            self._end(journal)
        except BaseException:
            journal.abandon()
            self.seen.discard(run)  # not imported: another input may still bring it
            raise

    def generic(self, path: Path) -> None:
        """A ``steps`` file: all of its lines with the same ``run``, in file order, form that run,
        wherever they are (parallel agents appending to one log interleave them). The file is one
        unit: its runs are written only once every line has been read, so a bad line imports none
        of them and leaves nothing behind."""
        journals: dict[str, _Journal] = {}
        open_runs: dict[str, None] = {}  # runs whose journal is open, least recently stepped first
        try:
            with _open(path) as handle:
                for number, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    run, step = _generic_step(line, number)
                    journal = journals.get(run)
                    if journal is None:
                        journal = journals[run] = self._begin(run)
                    journal.step(step, self.mapping, self.score)
                    open_runs.pop(run, None)
                    open_runs[run] = None
                    if len(open_runs) > OPEN_JOURNALS_MAX:
                        oldest = next(iter(open_runs))
                        del open_runs[oldest]
                        journals[oldest].suspend()
            if not journals:
                raise ValueError("no step line: the file is empty")
            for run in list(journals):
                self._end(journals.pop(run))
        except BaseException:
            for journal in journals.values():
                journal.abandon()
                self.seen.discard(journal.run)  # not imported: another input may still bring it
            raise

    def file(self, path: Path) -> None:
        try:
            if _format_of(path, self.fmt) == "steps":
                self.generic(path)
            else:
                self.trajectory(path)
        except (OSError, EOFError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
            code = E.STORAGE_ERROR if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS else E.INVALID_ARGUMENT
            self.summary.errors.append({"file": str(path), "code": code, "reason": reason})


def import_runs(paths: Iterable[str | os.PathLike[str]], out: str | os.PathLike[str], *, fmt: str = "auto",
                outcomes: Mapping[str, str] | str | os.PathLike[str] | None = None, semantic_score: int = 50,
                actions: ActionMap | str | os.PathLike[str] | None = None,
                progress: Callable[[int, int], None] | None = None) -> ImportSummary:
    """Write one journal per run of the trajectories ``paths`` (files or folders) into ``out``.

    ``fmt``: one of :data:`FORMATS`; ``outcomes``: run id → outcome label (or the path of the CSV
    ``ledger simulate --outcomes`` takes), appended to the run's journal as ``record_outcome``;
    ``semantic_score``: what every ``settle`` carries; ``actions``: the command → action mapping
    (an :class:`ActionMap` or a TOML file); ``progress(done, total)`` is called after each file.

    Returns an :class:`ImportSummary`; a file that cannot be read is in its ``errors`` and the
    others are imported. Raises ``INVALID_ARGUMENT`` for a bad argument, ``CONFIG_INVALID`` for a
    bad actions file; writes only ``out/RUN_ID.jsonl`` files (and their temp files) in ``out``.
    """
    if fmt not in FORMATS:
        raise LedgerError(E.INVALID_ARGUMENT, f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
    if type(semantic_score) is not int or not 0 <= semantic_score <= 100:
        raise LedgerError(E.INVALID_ARGUMENT, f"semantic_score must be an integer 0-100, got {semantic_score!r}")
    mapping = actions if isinstance(actions, ActionMap) else \
        DEFAULT_ACTION_MAP if actions is None else ActionMap.load(actions)
    source = "outcomes table"
    if isinstance(outcomes, (str, os.PathLike)):
        source = f"outcomes file {Path(outcomes).name}"  # the record_outcome lines' source
        outcomes = read_outcomes(outcomes)
    elif outcomes is not None:
        check_outcomes(check_text_mapping(outcomes, "outcomes"), source)
    files = input_files(paths)
    target = fs_path(out, "output folder")
    refuse_output_in_package(target, "output folder")
    if target.exists() and not target.is_dir():
        raise LedgerError(E.INVALID_ARGUMENT, f"{target}: exists and is not a folder")
    made = [target, *target.parents]  # the folders this import makes, the deepest first
    made = made[:next(n for n, folder in enumerate(made) if folder.exists())]
    target.mkdir(parents=True, exist_ok=True)
    importer = _Importer(target, fmt, mapping, semantic_score, outcomes, source)
    try:
        for done, path in enumerate(files, start=1):
            importer.file(path)
            if progress is not None:
                progress(done, len(files))
    finally:
        if made and not any(target.iterdir()):  # every file failed: no folder it made is left behind, empty
            for folder in made:
                folder.rmdir()
    if outcomes is not None:
        importer.summary.outcomes_without_run = [run for run in outcomes if run not in importer.seen]
    return importer.summary
