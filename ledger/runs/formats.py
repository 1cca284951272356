"""The trajectory formats ``ledger runs import`` reads (docs/runs.md, "Formats"): what a step is in
a mini-swe-agent trajectory (text, tool-call and Responses API modes), a SWE-agent ``.traj`` and a
line of the ``steps`` format. A turn that is not a step is a :class:`FormatError`, counted by its
reason; a document that is not the format raises ``ValueError`` with the reason."""

from __future__ import annotations

import collections
import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from ..ground.canonical import BOM_INSIDE, BOM_TEXT, SAFE_INTEGER_MAX
from ..ground.errors import first_few, quoted

_FENCE = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.S)
#: The most digits of a mini-swe-agent observation's exit code: a longer run is past any exact JSON
#: integer (and Python would refuse to read one of thousands of digits), so it gives none; the
#: observation is in its wrapper all the same (:data:`_WRAPPER_START`).
_RETURNCODE_DIGITS_MAX = 20


@dataclass(frozen=True)
class Step:
    """One step of a run: the command, the observation as the agent saw it, its exit code if known,
    and the tool's output inside the format's wrapper where the format wraps it (:func:`wrapped_output`)."""

    command: str
    observation: str
    exit_code: int | None = None
    output: str | None = None


#: mini-swe-agent's wrapper of an observation: what went wrong running it, if anything (a timeout),
#: its exit code, then the output whole, or for a long one a warning, its head, how much was elided
#: and its tail. Its exit code is ``code``.
_WRAPPER_START = re.compile(r"\A\s*(?:<exception>(?P<exception>.*?)</exception>\s*)?<returncode>(?P<code>-?[0-9]+)"
                            r"</returncode>\s*", re.S)
_ELIDED = re.compile(r"</output_head>\s*<elided_chars>\s*[0-9]+ characters elided\s*</elided_chars>\s*<output_tail>\n?")


def wrapped_output(text: str) -> str | None:
    """The output a mini-swe-agent observation wraps, else None: ``<returncode>N</returncode>`` then
    ``<output>…</output>``, or ``<warning>…</warning>`` then ``<output_head>…</output_head>``,
    ``<elided_chars>…</elided_chars>`` and ``<output_tail>…</output_tail>`` (head and tail), after
    an ``<exception>…</exception>`` when running it went wrong; or the same as a JSON object (the
    ``mini`` command's: ``returncode``, ``output`` or ``output_head`` and ``output_tail``,
    ``exception_info``). Its lines are what the tool printed (and the exception's), so novelty over
    atoms counts them, not the wrapper's own lines, which every step repeats (docs/runs.md)."""
    start = _WRAPPER_START.match(text)
    if start is None:
        return _json_output(text)
    exception = f"{start['exception'].strip()}\n" if start["exception"] else ""
    body = text[start.end():].rstrip()  # the wrapped part, from the tag after the return code
    if body.startswith("<output>") and body.endswith("</output>"):
        return exception + body.removeprefix("<output>").removesuffix("</output>").removeprefix("\n")
    warned = body.find("</warning>") if body.startswith("<warning>") else -1
    head = body.find("<output_head>", warned) if warned >= 0 else -1
    elided = _ELIDED.search(body, head) if head >= 0 else None
    if elided is None or not body.endswith("</output_tail>"):
        return None
    tail = body[elided.end():].removesuffix("</output_tail>")
    return exception + body[head + len("<output_head>"):elided.start()].removeprefix("\n") + "\n" + tail


@functools.lru_cache(maxsize=1)  # a step's exit code and output read the same observation: parsed once
def _json_observation(text: str) -> dict[str, Any] | None:
    """The ``mini`` command's JSON observation (an object with an integer ``returncode``), else None
    (read, never changed, by its callers)."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        wrapped = json.loads(text, parse_int=_exit_code_int, object_pairs_hook=no_repeated_keys)
    except (ValueError, RecursionError):  # a key given twice too: which one a reader keeps, JSON does not settle
        return None
    code = wrapped.get("returncode") if isinstance(wrapped, dict) else None
    return wrapped if type(code) is int or code is _LONG else None


#: A JSON observation's integer of more than 20 digits (:func:`_exit_code_int`).
_LONG = object()


def _exit_code_int(digits: str) -> int | object:
    """A JSON observation's integer, one of more than 20 digits as :data:`_LONG`: as an exit code it
    is none a journal can hold, and Python refuses to read one of thousands of digits (the
    observation is the mini command's all the same, its output unwrapped)."""
    return int(digits) if len(digits.lstrip("-")) <= _RETURNCODE_DIGITS_MAX else _LONG


def _json_returncode(text: str) -> int | None:
    wrapped = _json_observation(text)
    return None if wrapped is None or wrapped["returncode"] is _LONG else wrapped["returncode"]


def _json_output(text: str) -> str | None:
    """The output of the ``mini`` command's JSON observation (:func:`wrapped_output`), else None."""
    wrapped = _json_observation(text)
    if wrapped is None:
        return None
    exception = wrapped.get("exception_info")
    exception = f"{exception.strip()}\n" if isinstance(exception, str) and exception.strip() else ""
    if isinstance(wrapped.get("output"), str):
        return exception + wrapped["output"]
    head, tail = wrapped.get("output_head"), wrapped.get("output_tail")
    return exception + head + "\n" + tail if isinstance(head, str) and isinstance(tail, str) else None


class FormatError(Exception):
    """A turn that is not a step (counted in the summary under its reason, then skipped)."""


def _text(content: Any) -> str:
    """A message's content as text (a list of parts: their ``text`` joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def _observation(content: Any) -> str | FormatError:
    """The text of a tool's answer (its content, or a ``function_call_output``'s output); a number,
    an object or nothing is no observation this import can score: a format error, never an empty text."""
    return _text(content) if isinstance(content, (str, list)) else FormatError("observation that is not text")


def _returncode(message: Mapping[str, Any], text: str) -> int | None:
    """The exit code a mini-swe-agent observation carries, or None: none given, or one no journal
    can hold (past ±(2**53 - 1), the largest exact JSON integer; the observation keeps it)."""
    extra = message.get("extra")
    if isinstance(extra, Mapping) and type(extra.get("returncode")) is int:
        code = extra["returncode"]
    elif found := _WRAPPER_START.match(text):
        digits = found["code"].lstrip("-")
        code = int(found["code"]) if len(digits) <= _RETURNCODE_DIGITS_MAX else None
    else:
        code = _json_returncode(text)
    return code if code is None or abs(code) <= SAFE_INTEGER_MAX else None


def _hashable(value: Any) -> Any:
    """A tool call id as a dict key: its JSON text, so ids are equal only when they are the same JSON
    (``1``, ``true``, ``1.0`` and ``"1"`` are four ids; a list or object is one too). None stays None."""
    return None if value is None else json.dumps(value, sort_keys=True)


def _is_model_turn(message: Any) -> bool:
    """An assistant message (chat format) or a Responses API response object."""
    return isinstance(message, Mapping) and (message.get("role") == "assistant" or message.get("object") == "response")


def _calls(message: Mapping[str, Any]) -> list[tuple[Any, Any, Any]] | None:
    """``(id, name, arguments)`` of each tool call of a model turn: a chat message's ``tool_calls``, or
    a response's ``function_call`` output items; None when the turn has no tool call (a text reply)."""
    if message.get("object") == "response":
        output = message.get("output")
        items = [item for item in output if isinstance(item, Mapping) and item.get("type") == "function_call"] \
            if isinstance(output, list) else []
        return [(item.get("call_id", item.get("id")), item.get("name"), item.get("arguments")) for item in items] or None
    calls = message.get("tool_calls")
    if not calls:
        return None
    if not isinstance(calls, list):
        return [(None, None, None)]  # one turn that holds no call list: one call that is no bash command
    return [_chat_call(call) for call in calls]


def _chat_call(call: Any) -> tuple[Any, Any, Any]:
    """``(id, name, arguments)`` of a chat message's tool call; None for what it does not hold."""
    if not isinstance(call, Mapping):
        return None, None, None
    function = call.get("function")
    if not isinstance(function, Mapping):
        return call.get("id"), None, None
    return call.get("id"), function.get("name"), function.get("arguments")


def _bash_command(name: Any, arguments: Any) -> str | None:
    """The command of a ``bash`` tool call (its arguments a JSON object, or its text), else None."""
    if name != "bash":
        return None
    if isinstance(arguments, str):
        try:  # a key given twice is refused, as in the file itself: which command would count?
            arguments = json.loads(arguments, object_pairs_hook=no_repeated_keys)
        except (ValueError, RecursionError):  # not JSON, or nested past what Python reads
            return None
    command = arguments.get("command") if isinstance(arguments, Mapping) else None
    return command if isinstance(command, str) else None


def _tool_steps(messages: list[Any], index: int, calls: list[tuple[Any, Any, Any]]) -> Iterator[Step | FormatError]:
    """The steps of a model turn in tool-call mode: each bash call answered by a later message with its
    id (a ``tool`` message's ``tool_call_id``, a ``function_call_output``'s ``call_id``) before the next
    model turn; a turn's only bash call left unanswered by the ``exit`` message that ends the run (its
    submission) has that message as its observation, as in text mode. A call whose id another call of
    the turn shares, or that several messages answer, is a format error: which answer is whose cannot
    be told."""
    answers: dict[Any, list[Any]] = {}
    ending = None
    for position in range(index + 1, len(messages)):  # no copy of the rest: a run of many turns stays linear
        later = messages[position]
        if not isinstance(later, Mapping) or _is_model_turn(later):
            break
        answer_id = later.get("call_id") if later.get("type") == "function_call_output" else later.get("tool_call_id")
        if answer_id is not None:
            answers.setdefault(_hashable(answer_id), []).append(later)
        elif later.get("role") == "exit" and ending is None:
            ending = later
    ids = [_hashable(call_id) for call_id, _, _ in calls]
    shared = collections.Counter(ids)
    commands = [_bash_command(name, arguments) for _, name, arguments in calls]
    for call_id, command in zip(ids, commands):
        if command is None:
            yield FormatError("tool call that is not a bash command")
            continue
        found = answers.get(call_id, []) if call_id is not None else []
        if call_id is not None and (shared[call_id] > 1 or len(found) > 1):
            yield FormatError("tool call sharing its id")
            continue
        if not found and ending is not None and len(calls) == 1:
            found = [ending]
        if not found:
            yield FormatError("tool call without a result")
            continue
        answer = found[0]
        text = _observation(answer.get("output") if answer.get("type") == "function_call_output" else answer.get("content"))
        yield text if isinstance(text, FormatError) else \
            Step(command, text, _returncode(answer, text), wrapped_output(text))


#: The way in for a run of an agent whose own files this import does not read.
OTHER_AGENTS = ("; another agent's run (OpenHands, Aider, your own) comes in through the steps format: one JSON "
                "line per step with run, command and output (docs/runs.md)")


def _history_only(data: Any) -> str:
    """What to say of a file without the list of steps the import reads: for a SWE-agent file with only
    its history (a demonstration, a run cut short), that the trajectory list is what is read."""
    if isinstance(data, Mapping) and isinstance(data.get("history"), list):
        return ("; it holds a SWE-agent history but no trajectory list (a demonstration, or a run that did not "
                "finish): the import reads the trajectory list a finished run writes")
    return OTHER_AGENTS


def mini_swe_agent_steps(data: Any) -> Iterator[Step | FormatError]:
    """Steps of a mini-swe-agent trajectory (a ``{"messages": [...]}`` object or a bare message list):
    text mode, tool-call mode and Responses API mode (docs/runs.md)."""
    messages = data.get("messages") if isinstance(data, Mapping) else data
    if isinstance(data, Mapping) and isinstance(data.get("attempts"), list) and messages is None:
        raise ValueError("a SWE-agent retry run's attempts without the trajectory of the attempt it chose (the "
                         "top-level trajectory list it writes once the run ends): import a finished run")
    if not isinstance(messages, list):
        swe_agent = isinstance(data, Mapping) and isinstance(data.get("trajectory"), list)
        raise ValueError("no messages list: not a mini-swe-agent trajectory" + (
            " (its trajectory list is a SWE-agent .traj's)" if swe_agent else
            " (nor a SWE-agent .traj: no trajectory list)" + _history_only(data) if isinstance(data, Mapping) else
            OTHER_AGENTS))
    marked_empty = not messages and isinstance(data, Mapping) and "trajectory_format" in data
    if not marked_empty and not any(isinstance(message, Mapping) and "role" in message for message in messages):
        raise ValueError("no message with a role: an empty or foreign list, not a mini-swe-agent trajectory"
                         + OTHER_AGENTS)
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            yield FormatError("entry that is not an object")  # counted as a SWE-agent entry's is
            continue
        if not _is_model_turn(message):
            continue
        calls = _calls(message)
        if calls is not None:
            yield from _tool_steps(messages, index, calls)
            continue
        if message.get("object") == "response":
            yield FormatError("no bash block")  # a response without a tool call
            continue
        blocks = _bash_blocks(_text(message.get("content")))
        following = messages[index + 1] if index + 1 < len(messages) else None
        if len(blocks) != 1:
            yield FormatError("no bash block" if not blocks else "several bash blocks")
        elif not isinstance(following, Mapping) or _is_model_turn(following):
            yield FormatError("no observation")
        else:
            text = _observation(following.get("content"))
            yield text if isinstance(text, FormatError) else \
                Step(blocks[0], text, _returncode(following, text), wrapped_output(text))


def _bash_blocks(text: str) -> list[str]:
    """The bash blocks of a model reply, as mini-swe-agent finds them (:data:`_FENCE`), in time linear in
    the text: every block ends at a closing fence, so the search stops at the last one (an opening
    with none after it would be scanned to the end of the text, once per such opening)."""
    last = text.rfind("\n```")
    return _FENCE.findall(text, 0, last + 4) if last >= 0 else []


def swe_agent_steps(data: Any) -> Iterator[Step | FormatError]:
    """Steps of a SWE-agent ``.traj``: each ``trajectory[]`` entry with its ``action`` and ``observation``."""
    entries = data.get("trajectory") if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        messages = data.get("messages") if isinstance(data, Mapping) else data
        mini = isinstance(messages, list) and any(isinstance(message, Mapping) and "role" in message
                                                  for message in messages)
        raise ValueError("no trajectory list: not a SWE-agent .traj" + (
            " (its messages list is a mini-swe-agent trajectory's)" if mini else _history_only(data)))
    first = next((entry for entry in entries if isinstance(entry, Mapping)), None)
    if entries and not any(isinstance(entry, Mapping) and "action" in entry for entry in entries):
        # SWE-agent writes an action into every entry: a list of entries none of which has one is another agent's
        held = ("none is an object" if first is None else "the first object is empty" if not first
                else f"the first holds {first_few([quoted(key, 40) for key in first], 6)}")
        raise ValueError(f"no trajectory entry with an action ({held}): another agent's trajectory list, not a "
                         "SWE-agent .traj" + OTHER_AGENTS)
    for entry in entries:
        if not isinstance(entry, Mapping):
            yield FormatError("entry that is not an object")
        elif not isinstance(entry.get("action"), str):
            yield FormatError("entry without an action" if entry.get("action") is None else "action that is not text")
        elif entry.get("observation") is None:
            yield FormatError("entry without an observation")
        elif not isinstance(entry["observation"], str):
            yield FormatError("observation that is not text")
        else:
            yield Step(entry["action"], entry["observation"])


def no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object of a steps line or a trajectory (``object_pairs_hook``); a key given twice (which
    of its values would count?) is refused, as journals refuse it."""
    item = dict(pairs)
    if len(item) != len(pairs):
        keys = [key for key, _ in pairs]
        twice = next(k for k in keys if keys.count(k) > 1)
        shown = first_few([quoted(k, 40) for k in dict.fromkeys(keys)], 6)
        raise ValueError(f"the key {quoted(twice, 80)} is given twice in one object (its keys: {shown})")
    return item


def too_many_digits(exc: ValueError) -> str | None:
    """The reason to give when ``exc`` is Python refusing to read an integer of thousands of digits."""
    return "not JSON this import reads: a number of more than 4,300 digits" \
        if "int_max_str_digits" in str(exc) else None


#: The names the agents give their predictions files, which hold none while no run has finished.
PREDICTIONS_FILES = ("preds.json", "all_preds.jsonl")

#: The keys of a run's steps (mini-swe-agent's ``messages``, SWE-agent's ``trajectory``, a steps line's
#: ``command``): an object holding one is a run, never predictions or a report (:func:`is_no_run`).
_STEP_KEYS = frozenset({"messages", "trajectory", "command"})


def is_no_run(value: Any, name: str = "") -> bool:
    """Whether ``value``, read from the file ``name`` (``None``: a file with no line), is a file an
    agent's output folder holds beside its runs, not a run: its predictions (SWE-bench's prediction
    objects, a ``model_patch`` and no step — no ``messages``, ``trajectory`` or ``command`` — alone, in a
    list, or keyed by instance id, as mini-swe-agent's and SWE-agent's ``preds.json`` and SWE-agent's
    ``all_preds.jsonl`` lines hold them; none yet, ``{}``, ``[]`` or no line, in a file of those names),
    or an evaluation's report (SWE-bench's ``report.json``, each instance's ``resolved`` with its
    ``tests_status`` or patch flags, keyed by instance id; a run's summary with ``resolved_ids`` and no
    step). An object holding steps is a run, whatever other keys it has."""
    if value in (None, {}, []):
        return name.lower().removesuffix(".gz") in PREDICTIONS_FILES
    def prediction(item: Any) -> bool:
        return isinstance(item, Mapping) and "model_patch" in item and not _STEP_KEYS & item.keys()

    def report(item: Any) -> bool:
        return isinstance(item, Mapping) and "resolved" in item and bool(
            {"tests_status", "patch_is_None", "patch_exists", "patch_successfully_applied"} & item.keys())

    if isinstance(value, list):
        return bool(value) and all(prediction(item) for item in value)
    if not isinstance(value, Mapping):
        return False
    if prediction(value) or (isinstance(value.get("resolved_ids"), list) and not _STEP_KEYS & value.keys()):
        return True
    return bool(value) and (all(prediction(item) for item in value.values())
                            or all(report(item) for item in value.values()))


#: What a file whose lines are journal lines ("op") is told.
ALREADY_A_JOURNAL = ("the file is already a ledger journal; give it to 'ledger apply' or 'ledger simulate', "
                     "decompressed first if it is gzipped")


def steps_line(line: bytes, number: int, chosen_by_name: bool = True) -> tuple[str, Step]:
    """The run id and step of one line of a steps file; ``chosen_by_name``: the file is read in this
    format because its name ends in .jsonl (not because ``--format steps`` asked), which a refusal says."""
    try:
        # UTF-8, the first line maybe with a byte-order mark; never UTF-16 guessed from the bytes
        item = json.loads(line.decode("utf-8-sig" if number == 1 else "utf-8"), object_pairs_hook=no_repeated_keys)
    except UnicodeDecodeError as exc:
        raise ValueError(f"line {number}: not UTF-8 (byte {exc.start + 1}: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        if line.startswith(BOM_TEXT.encode()):
            raise ValueError(f"line {number}: {BOM_INSIDE}") from None
        raise ValueError(f"line {number}: not JSON ({exc.msg})") from None
    except ValueError as exc:  # a key given twice (no_repeated_keys), or a number too long to read
        raise ValueError(f"line {number}: {too_many_digits(exc) or exc}") from None
    if not isinstance(item, Mapping) or not isinstance(item.get("run"), str) \
            or not isinstance(item.get("command"), str) or not isinstance(item.get("output"), str):
        hint = (f" (this line has \"op\": {ALREADY_A_JOURNAL})" if isinstance(item, Mapping) and "op" in item else
                (" (a *.jsonl file is read in the steps format: " if chosen_by_name else " (the steps format: ")
                + "one step per line; an agent's other JSON Lines files, such as predictions, are no trajectory)")
        raise ValueError(f"line {number}: needs the string keys run, command and output{hint}")
    if not item["command"].strip():
        raise ValueError(f"line {number}: the command is empty: a step is a command that was run")
    code = item.get("exit_code")
    if code is not None and (type(code) is not int or abs(code) > SAFE_INTEGER_MAX):
        raise ValueError(f"line {number}: exit_code must be an integer within ±(2**53-1)")
    return item["run"], Step(item["command"], item["output"], code)
