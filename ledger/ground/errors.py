"""The one error type of case-ledger and its stable codes (docs/concepts.md and docs/errors.md).

Every refusal the library makes is a :class:`LedgerError` whose ``code`` is one
of the constants below. The constants are listed in the order validation
checks them (docs/errors.md, "Order of checks"); codes that are not part of that
order (configuration, storage, integrity) follow. ``TRANSIENT_CODES`` names the
refusals that may succeed when simply retried.
"""

from __future__ import annotations

import functools
import inspect
import reprlib
import threading
from collections import OrderedDict
import unicodedata
from typing import Any, Callable

# --- shape of the call (checked first) -------------------------------------
INVALID_ARGUMENT = "INVALID_ARGUMENT"
INVALID_ID = "INVALID_ID"
INVALID_SCORE = "INVALID_SCORE"
REASON_REQUIRED = "REASON_REQUIRED"
INVALID_JSON = "INVALID_JSON"
SOURCE_REF_INVALID = "SOURCE_REF_INVALID"
ROUTER_REFUSED = "ROUTER_REFUSED"
INVALID_CAPABILITY = "INVALID_CAPABILITY"
UNKNOWN_OPERATION = "UNKNOWN_OPERATION"
# --- identity ---------------------------------------------------------------
OPERATION_CONFLICT = "OPERATION_CONFLICT"
# --- case and budget state, in precedence order ----------------------------
CASE_STATE = "CASE_STATE"
INVALID_TRANSITION = "INVALID_TRANSITION"
NOT_INITIALIZED = "NOT_INITIALIZED"
UNKNOWN_HYPOTHESIS = "UNKNOWN_HYPOTHESIS"
BUDGET_POLICY_CHANGED = "BUDGET_POLICY_CHANGED"
ACCOUNT_TERMINAL = "ACCOUNT_TERMINAL"
UNKNOWN_ACTION = "UNKNOWN_ACTION"
ACTION_CLOSED = "ACTION_CLOSED"
NO_RESERVATION = "NO_RESERVATION"
FEEDBACK_NOT_CONFIRMED = "FEEDBACK_NOT_CONFIRMED"
AUTHORITY_DENIED = "AUTHORITY_DENIED"
ACTION_PENDING = "ACTION_PENDING"
RESULT_MISSING = "RESULT_MISSING"
LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
INSUFFICIENT_BUDGET = "INSUFFICIENT_BUDGET"
STALE_GENERATION = "STALE_GENERATION"
REPLY_MISMATCH = "REPLY_MISMATCH"
# --- package, storage, configuration, integrity ----------------------------
CASE_EXISTS = "CASE_EXISTS"
LEDGER_MISSING = "LEDGER_MISSING"
LEDGER_BUSY = "LEDGER_BUSY"
SCHEMA_VERSION = "SCHEMA_VERSION"
#: The SQLite library Python uses is older than a ledger needs (docs/sql.md); an environment
#: problem, never a sign of tampering.
SQLITE_UNSUPPORTED = "SQLITE_UNSUPPORTED"
LIMIT_REACHED = "LIMIT_REACHED"
CONFIG_INVALID = "CONFIG_INVALID"
INTEGRITY_ERROR = "INTEGRITY_ERROR"
#: Not a code of the ledger's rules: the file system refused the ledger file (read-only location,
#: permission, I/O error, full disk). Kept apart from INTEGRITY_ERROR, which means
#: the history itself is wrong.
STORAGE_ERROR = "STORAGE_ERROR"

#: Every code, in the order above. docs/errors.md documents each one.
ALL_CODES: tuple[str, ...] = (
    INVALID_ARGUMENT, INVALID_ID, INVALID_SCORE, REASON_REQUIRED, INVALID_JSON,
    SOURCE_REF_INVALID, ROUTER_REFUSED, INVALID_CAPABILITY, UNKNOWN_OPERATION,
    OPERATION_CONFLICT, CASE_STATE, INVALID_TRANSITION, NOT_INITIALIZED,
    UNKNOWN_HYPOTHESIS, BUDGET_POLICY_CHANGED, ACCOUNT_TERMINAL, UNKNOWN_ACTION,
    ACTION_CLOSED, NO_RESERVATION, FEEDBACK_NOT_CONFIRMED, AUTHORITY_DENIED,
    ACTION_PENDING, RESULT_MISSING, LIMIT_EXCEEDED, INSUFFICIENT_BUDGET,
    STALE_GENERATION, REPLY_MISMATCH, CASE_EXISTS, LEDGER_MISSING, LEDGER_BUSY,
    SCHEMA_VERSION, SQLITE_UNSUPPORTED, LIMIT_REACHED, CONFIG_INVALID, INTEGRITY_ERROR, STORAGE_ERROR,
)

#: Printed by the ``ledger`` command only, never raised: the command ran, but standard
#: output refused its result (full disk, closed stream).
OUTPUT_ERROR = "OUTPUT_ERROR"
CLI_ONLY_CODES: tuple[str, ...] = (OUTPUT_ERROR,)

#: Refusals caused by timing rather than by the request: retrying may succeed.
TRANSIENT_CODES = frozenset({LEDGER_BUSY})


#: A refusal's message is for people: one quoting a huge value (a 40 MB manifest that is a list)
#: keeps its start and its end, which says what is wrong, and drops the middle.
MESSAGE_CHARS_MAX = 2_000


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, 80, 80


def shown(value: Any, limit: int) -> str:
    """``value`` as text for a message, at most ``limit`` characters: a string's start, anything else's
    ``repr`` cut short at three levels of nesting, so a value nested thousands deep or whose ``repr``
    raises still gets its refusal rather than a ``RecursionError``. Text cut short ends in ``…``, so
    a quoted start is never taken for the whole value."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = _SHOWN.repr(value)
        except Exception as exc:  # a __repr__ that raises
            pass_on_interruption(exc)
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:max(limit - 1, 0)] + "…"


def quoted(text: str, limit: int) -> str:
    """``text`` quoted as Python shows a string, of at most its first ``limit`` characters; a text cut
    short is followed by ``…`` (outside the quotes), so a quoted start is never taken for the whole."""
    return repr(text[:limit]) + ("…" if len(text) > limit else "")


def repr_shown(value: Any, limit: int) -> str:
    """``value`` as ``repr`` shows it, for a refusal quoting what a Python caller gave: a string quoted
    (:func:`quoted`), anything else as :func:`shown` gives it, nesting cut at three levels, so a list
    nested thousands deep is named rather than a ``RecursionError``."""
    return quoted(value, limit) if isinstance(value, str) else shown(value, limit)


def given(value: Any, limit: int) -> str:
    """What a caller gave, for a refusal: a string quoted (its start, at most ``limit`` characters),
    anything else as a JSON reader sees it (:func:`describe_value`: ``true``, ``null``, ``an object``),
    so a journal's ``true`` is never shown as Python's ``'True'``."""
    return repr(shown(value, limit)) if isinstance(value, str) else describe_value(value)


def printable(text: str) -> str:
    """``text`` with control characters, line separators and lone surrogates escaped as Python writes
    them (``\\n``, ``\\x1b``, ``\\ud800``): a refusal quoting what a caller gave stays one line and
    prints on any UTF-8 stream (``print(err)`` never raises ``UnicodeEncodeError``)."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(ch.encode("unicode_escape").decode("ascii") if unicodedata.category(ch) in _ESCAPED else ch
                   for ch in text)


_ESCAPED = frozenset({"Cc", "Zl", "Zp", "Cs"})


def shortened(text: str, limit: int) -> str:
    """``text`` when it has at most ``limit`` characters, else its start and end with the middle left
    out and counted (``… (N characters left out) …``), ``limit`` characters or fewer in all."""
    if len(text) <= limit:
        return text
    keep = limit - 40
    head, tail = text[:keep * 2 // 3], text[len(text) - keep // 3:]
    return f"{head}{_LEFT_OUT_MARK.format(len(text) - len(head) - len(tail))}{tail}"


#: The whole text of the refusals' messages this thread shortened lately, by what they were shortened
#: to: a refusal quoting one of them (a file's name put before a config's refusal, built as that
#: refusal is caught) is shortened from the whole text, so its one mark counts everything left out
#: (:func:`whole_text`). Per thread, so that other threads' refusals never push one out meanwhile.
_WHOLE = threading.local()
_WHOLE_KEPT = 32


def _kept_whole() -> "OrderedDict[str, str]":
    kept = getattr(_WHOLE, "messages", None)
    if kept is None:
        kept = _WHOLE.messages = OrderedDict()
    return kept


def whole_text(text: str) -> str:
    """``text`` with every message of a refusal this thread shortened lately that it quotes put back
    whole, before it is shortened in its turn; text that merely looks shortened stays as it is."""
    if _LEFT_OUT_MARK.split("{}")[1] not in text:
        return text
    for short, whole in reversed(list(_kept_whole().items())):
        if short in text:
            text = text.replace(short, whole)
    return text


def _remember_whole(short: str, whole: str) -> None:
    kept = _kept_whole()
    kept[short] = whole
    kept.move_to_end(short)
    while len(kept) > _WHOLE_KEPT:
        kept.popitem(last=False)


_LEFT_OUT_MARK = " … ({} characters left out) … "


def first_few(names: list[str], most: int) -> str:
    """``a, b, c`` — the first ``most`` of ``names`` joined by commas, then ``and N more`` when some
    are left out, so a message about thousands of runs or folders stays one readable line."""
    shown_names = ", ".join(names[:most])
    return shown_names if len(names) <= most else f"{shown_names} and {len(names) - most} more"


class LedgerError(Exception):
    """A refusal with a stable ``code`` (one of :data:`ALL_CODES`).

    ``str(err)`` is ``"CODE: message"`` already (print it as it is; ``err.message`` is the
    message alone, so ``f"{err.code}: {err}"`` would show the code twice). ``message`` is for people; ``details`` is a JSON-ready dict for programs
    (for example ``{"seq": 12}`` on an ``INTEGRITY_ERROR``). Nothing was
    written when a ``LedgerError`` is raised, except the ``limit.exceeded``
    event of docs/scopes.md.
    """

    def __init__(self, code: str, message: str, **details: Any) -> None:
        if code not in ALL_CODES:  # a typo here would break the public contract
            raise ValueError(f"unknown error code {code!r}")
        whole = whole_text(printable(message))
        message = shortened(whole, MESSAGE_CHARS_MAX)
        if message is not whole:
            _remember_whole(message, whole)
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details

    #: The exit status of the ``ledger`` command that this refusal ends (usage errors exit 2 in click).
    exit_code = 1

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as ``(code, message, details)``, so a refusal crosses to another process intact
        (a worker pool's result, a pickled reading's ``refusal``)."""
        return _rebuild, (type(self), self.code, self.message, self.details)

    def __eq__(self, other: object) -> bool:
        """Equal refusals have the same type, code, message and details."""
        if not isinstance(other, LedgerError):
            return NotImplemented
        return (type(self), self.code, self.message, self.details) == (type(other), other.code, other.message,
                                                                         other.details)

    def __hash__(self) -> int:
        return hash((type(self), self.code, self.message))

    @property
    def transient(self) -> bool:
        """True when retrying the identical call may succeed (``LEDGER_BUSY``)."""
        return self.code in TRANSIENT_CODES

    def to_dict(self) -> dict[str, Any]:
        """``{"code", "message"}`` plus ``details`` when there are any."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out


def pass_on_interruption(exc: BaseException) -> None:
    """Raise ``exc`` again when it is no error of the system but the caller's own interruption: a
    ``TimeoutError`` or ``InterruptedError`` with no ``errno``, as a signal handler raises to time
    out a tool (``signal.alarm``). Both are ``OSError`` subclasses, so every handler of the system's
    errors calls this first: taken for an unreadable file, the caller's timeout became a refusal
    (``ROUTER_REFUSED``) or a changed input (``STALE_GENERATION``) and was lost
    (docs/investigator.md, "An exception inside the loop")."""
    if isinstance(exc, (TimeoutError, InterruptedError)) and exc.errno is None:
        raise exc


#: The machine's refusals that Python and DuckDB raise with no type or errno of their own, known by
#: a phrase of their message: each phrase and what the machine had none of left.
MACHINE_REFUSALS: tuple[tuple[str, str], ...] = (
    ("failed to map segment", "memory"),  # a compiled library the system had no memory to load
    ("Out of Memory", "memory"),  # DuckDB
    ("can't start new thread", "threads"),  # threading, under a memory or process limit
    ("Too many open files", "descriptors"),  # DuckDB, at the open-file limit
)


def machine_refusal(exc: BaseException) -> str | None:
    """``"memory"``, ``"threads"`` or ``"descriptors"`` when ``exc`` is the machine refusing what the
    command needs (``MACHINE_REFUSALS``), which is no fault of the input (``STORAGE_ERROR``,
    docs/errors.md); None otherwise."""
    message = str(exc)
    return next((kind for phrase, kind in MACHINE_REFUSALS if phrase in message), None)


def integrity_error(seq: int | None, message: str, **details: Any) -> LedgerError:
    """``INTEGRITY_ERROR`` naming the first bad ``seq`` (``seq N: message``; no prefix when None)."""
    where = f"seq {seq}: " if seq is not None else ""
    return LedgerError(INTEGRITY_ERROR, where + message, seq=seq, **details)


def limit_reached(setting: str, message: str, **details: Any) -> LedgerError:
    """``LIMIT_REACHED`` whose message names the setting to change and where it is set:
    ``[limits] <setting>`` of the analysis config (``--analysis-config FILE`` on the command
    line, ``analysis_config=`` of ``Case.create``/``Case.open`` in Python)."""
    return LedgerError(LIMIT_REACHED, f"{message} (to allow more, raise [limits] {setting} in the analysis "
                       "config: --analysis-config FILE; in Python, analysis_config= of Case.open)",
                       limit=setting, **details)


def describe_value(value: Any) -> str:
    """A value as a JSON (or TOML) reader sees it, for messages: ``the string "ten"``,
    ``true``, ``the number 2.5``, ``null``, ``an array``; never a Python type name, but for a tuple,
    which only a Python caller gives and which is no JSON array where one is asked for."""
    # a subclass's own repr, len or comparisons may raise or lie: its plain value is described
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value is True else "false"
    if isinstance(value, int):
        try:
            text = int.__repr__(value)
        except ValueError:  # past the digits Python writes out (4,300 by default)
            return "an integer of thousands of digits"
        digits = len(text.lstrip("-"))  # a long one is named by its length and its first digits
        return f"the integer {text}" if digits <= 40 else f"an integer of {digits} digits ({text[:20]}…)"
    if isinstance(value, float):
        number = float.__float__(value)
        return f"the number {number!r}" if number == number and abs(number) != float("inf") else "a non-finite number"
    if isinstance(value, str):
        plain = str.__str__(value)
        text = plain if len(plain) <= 80 else plain[:80] + "…"
        return 'the string "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "an array"
    if isinstance(value, tuple):  # Python's, not JSON's: where an array is asked for, a list is
        return "a tuple, which is no JSON value (a JSON array is a list)"
    if isinstance(value, dict):
        return "an object"
    return f"a value with no JSON form ({type(value).__name__})"


def _rebuild(kind: type, code: str, message: str, details: dict[str, Any]) -> LedgerError:
    """Unpickle a :class:`LedgerError` (or a subclass) from its code, message and details."""
    error = LedgerError.__new__(kind)
    LedgerError.__init__(error, code, message, **details)
    return error


def unfit_call(exc: TypeError) -> LedgerError | None:
    """``INVALID_ARGUMENT`` for the ``TypeError`` Python raises when a call's arguments do not fit the
    callee's signature (one missing, unknown or given twice), caught in the frame that made the call:
    the callee never started, so nothing was done. None for a ``TypeError`` from inside the callee."""
    frames = exc.__traceback__
    return LedgerError(INVALID_ARGUMENT, str(exc)) if frames is not None and frames.tb_next is None else None


def call_fitted(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``function(*args, **kwargs)``, a call that does not fit its signature refused as :func:`unfit_call`
    says (this frame makes the call, so the callee's frame is the traceback's next when it started)."""
    try:
        return function(*args, **kwargs)
    except TypeError as exc:
        refusal = unfit_call(exc)
        if refusal is None:
            raise
        raise refusal from None


def refuses_unfit_calls(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` refusing a call whose arguments do not fit its signature with ``INVALID_ARGUMENT``
    (:func:`call_fitted`), as every public function and method does (docs/api.md)."""
    @functools.wraps(function)
    def fitted(*args: Any, **kwargs: Any) -> Any:
        return call_fitted(function, args, kwargs)
    fitted.refuses_unfit_calls = True  # type: ignore[attr-defined]
    return fitted


def refuses_unfit_calls_of(cls: type | None = None, *, init: bool = False) -> Any:
    """Class decorator: every public method, class method and static method ``cls`` defines (and its
    ``__init__`` with ``init=True``, for a class its callers build) as :func:`refuses_unfit_calls`."""
    def decorate(klass: type) -> type:
        for name, member in list(vars(klass).items()):
            if name.startswith("_") and not (init and name == "__init__"):
                continue
            if isinstance(member, (classmethod, staticmethod)):
                setattr(klass, name, type(member)(refuses_unfit_calls(member.__func__)))
            elif inspect.isfunction(member) and not getattr(member, "refuses_unfit_calls", False):
                setattr(klass, name, refuses_unfit_calls(member))
        return klass
    return decorate if cls is None else decorate(cls)


refuses_unfit_calls_of(LedgerError)  # defined above it: its own methods refuse so too
