"""Type checks for the public API's arguments: a wrong type is ``INVALID_ARGUMENT`` naming the argument,
never an ``AttributeError`` or ``TypeError`` from deep inside (nor a string iterated as characters)."""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Callable

from .errors import INVALID_ARGUMENT, INVALID_JSON, LedgerError, call_fitted, pass_on_interruption


#: An integer written as text, as the command line and ``--vary`` take it: ASCII digits with an
#: optional leading minus (``int()`` would also take ``1_000``, ``+5`` and other scripts' digits).
DECIMAL = re.compile(r"-?[0-9]+")


def is_decimal(text: str) -> bool:
    """True when ``text`` (surrounding spaces aside) is :data:`DECIMAL`."""
    return DECIMAL.fullmatch(text.strip()) is not None


def _kind(value: Any) -> str:
    """The type of ``value`` as a message names it: with its module when not a built-in one
    (``numpy.int64``, not a bare ``int64`` that reads like an int)."""
    kind = type(value)
    if value is None:
        return "None"
    return kind.__name__ if kind.__module__ in ("builtins", None) else f"{kind.__module__}.{kind.__qualname__}"


#: What a query parameter may be: the values SQLite stores (a bool binds as 0 or 1).
SQL_VALUE_TYPES = (type(None), bool, int, float, str, bytes, bytearray, memoryview)


def check_sql_params(params: Any) -> tuple[Any, ...] | dict[str, Any]:
    """``params`` as a tuple (a list or tuple binds ``?``) or a dict (str keys bind ``:name``),
    each value None, a bool, int, float (not NaN, which SQLite binds as NULL), str or bytes; else
    ``INVALID_ARGUMENT`` naming the first other one. ``sqlite3`` would bind any object with a buffer as a
    blob: a ``numpy.int64(3)`` compared as 8 bytes, and matched nothing, without a word."""
    if isinstance(params, dict):
        for key in params:
            check_instance(key, str, "a params key", "a str")
        pairs: Any = params.items()
    elif isinstance(params, (list, tuple)):
        pairs = enumerate(params)
    else:
        raise LedgerError(INVALID_ARGUMENT, f"params must be a list or tuple (for ?) or a dict (for :name), "
                          f"got {_kind(params)}")
    for key, value in pairs:
        check_instance(value, SQL_VALUE_TYPES, f"params[{key!r}]", "None, a bool, int, float, str or bytes")
        if isinstance(value, float) and value != value:
            raise LedgerError(INVALID_ARGUMENT, f"params[{key!r}] is NaN, which SQLite has no value for (it would "
                              "bind as NULL); give None if NULL is meant")
    return params if isinstance(params, dict) else tuple(params)


def check_instance(value: Any, types: type | tuple[type, ...], name: str, expected: str) -> Any:
    """``value`` if it is one of ``types`` (never a ``bool`` where a number is expected), else
    ``INVALID_ARGUMENT``: "``name`` must be ``expected``, got <type>"."""
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in (types if isinstance(types, tuple)
                                                                                  else (types,))):
        raise LedgerError(INVALID_ARGUMENT, f"{name} must be {expected}, got {_kind(value)}")
    return value


def check_flag(value: Any, name: str) -> bool:
    """``value`` if it is ``True`` or ``False`` (``INVALID_ARGUMENT`` otherwise)."""
    return check_instance(value, bool, name, "True or False")


def check_callback(value: Any, name: str, arguments: int) -> Any:
    """``value`` if it is None, or callable with ``arguments`` positional arguments (``INVALID_ARGUMENT``
    otherwise, before anything is done: a function of another shape failed at its first call, with
    Python's own ``TypeError``, after work was written). A callable whose signature Python cannot tell
    (some built-ins) is taken."""
    if value is None:
        return value
    if not callable(value):
        raise LedgerError(INVALID_ARGUMENT, f"{name} must be a function or None, got {_kind(value)}")
    try:  # a decorated function: its wrapper's own shape, and the one it claims (functools.wraps)
        signatures = [inspect.signature(value, follow_wrapped=False), inspect.signature(value)]
    except Exception as exc:  # noqa: BLE001 - no signature Python can read (a built-in, an odd proxy): taken
        pass_on_interruption(exc)
        return value
    for signature in signatures:
        try:
            signature.bind(*[None] * arguments)
            return value
        except TypeError:
            continue
    raise LedgerError(INVALID_ARGUMENT, f"{name} must be a function of {arguments} positional argument"
                      f"{'' if arguments == 1 else 's'}, got {_kind(value)} of another shape")


def check_iterable(value: Any, name: str, expected: str) -> Iterable[Any]:
    """``value`` if it is an iterable that is not a ``str``, ``bytes`` or mapping (a string would be
    read as its characters)."""
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise LedgerError(INVALID_ARGUMENT, f"{name} must be {expected}, got {_kind(value)}")
    return value


def path_list(value: Any, name: str) -> list[str | bytes | os.PathLike[str]]:
    """One path (``str``, ``bytes`` or path-like, as a single path is taken everywhere) as a one-item
    list, or a list of paths as is."""
    if isinstance(value, (str, bytes, os.PathLike)):
        return [value]
    items = list(check_iterable(value, name, "a path or a list of paths"))
    for item in items:
        if not isinstance(item, (str, bytes, os.PathLike)):
            raise LedgerError(INVALID_ARGUMENT, f"{name} must hold paths (str, bytes or path-like), got {_kind(item)}")
    return items


def check_text_mapping(value: Any, name: str) -> Mapping[str, str]:
    """``value`` if it is a mapping of ``str`` to ``str``."""
    check_instance(value, Mapping, name, "a mapping or a path")
    for key, item in value.items():
        if not isinstance(key, str):
            raise LedgerError(INVALID_ARGUMENT, f"{name} must map run ids (str) to outcomes (str): a key is "
                              f"{_kind(key)}")
        if not isinstance(item, str):
            raise LedgerError(INVALID_ARGUMENT, f"{name} must map run ids (str) to outcomes (str): the outcome of "
                              f"{key!r} is {_kind(item)}")
    return value


def plain_data(value: Any, depth: int = 0) -> Any:
    """A private copy of ``value`` with every ``str``, ``int``, ``float``, ``dict``, ``list`` and
    ``tuple`` of a subclass replaced, at any depth, by the plain value it holds (``bool`` and ``None``
    stay; other types are left for the checks to refuse). A subclass may answer ``len``, ``in``, ``<``
    or ``items()`` other than by its data, which is what is stored: the checks must read the same
    values the ledger writes and its replay reads back. Every container is copied, each taken whole
    at one instant (a dict's items and a list's members are read in one step no other thread can cut
    in two): a caller's thread changing the value while a call runs never reaches what is checked
    and stored (docs/concepts.md). Past :data:`PLAIN_DEPTH_MAX` levels nothing is copied (the depth
    check refuses such a value)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or kind is float or value is None:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if depth > PLAIN_DEPTH_MAX:
        return value
    if kind is dict:
        copied = dict.copy(value)  # one step: no other thread runs inside it
        if all(type(key) is str and type(item) in _SCALARS for key, item in copied.items()):
            return copied  # the usual case: nothing more to build
        return _once_each_key([(plain_data(key, depth + 1), plain_data(item, depth + 1))
                               for key, item in copied.items()])
    if kind is list:
        copied = list.copy(value)
        if all(type(item) in _SCALARS for item in copied):
            return copied
        return [plain_data(item, depth + 1) for item in copied]
    if isinstance(value, dict):
        return _once_each_key([(plain_data(key, depth + 1), plain_data(item, depth + 1))
                               for key, item in list(dict.items(value))])
    if isinstance(value, (list, tuple)):
        base = list if isinstance(value, list) else tuple
        return base(plain_data(item, depth + 1) for item in list(base.__iter__(value)))
    return value


def _once_each_key(items: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """The dict of ``items``; ``INVALID_JSON`` when two keys are one once plain (two keys of a ``str``
    subclass equal as text): which of their values would be stored cannot be told."""
    built = dict(items)
    if len(built) != len(items):
        seen: set[Any] = set()
        twice = next(key for key, _ in items if key in seen or seen.add(key))
        raise LedgerError(INVALID_JSON, f"an object gives the key {twice!r} twice (keys of a str subclass, equal as "
                          "text): which of its values would be stored cannot be told")
    return built


#: The plain types of a leaf: :func:`plain_data` returns a container holding only these as it is.
_SCALARS = frozenset({str, int, float, bool, type(None)})

#: How deep :func:`plain_data` looks: past the deepest JSON any check accepts (64 levels).
PLAIN_DEPTH_MAX = 66


def caller_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn``, called by the function that warns, that names the
    first caller outside case-ledger (the user's line, past :func:`plain_arguments`' wrappers and
    the ledger's own calls), not a line of the ledger."""
    package = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def plain_arguments(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (a rule's ``shape_*`` function, which checks a call's arguments and builds the
    request that is stored, or a public method of a service) called with every argument made
    :func:`plain_data` first: the checks then read the values stored, which verify's replay reads
    back, never a subclass's own answers about them. A call that does not fit its signature is
    ``INVALID_ARGUMENT`` (:func:`~ledger.ground.errors.call_fitted`)."""
    @functools.wraps(function)
    def plain(*args: Any, **kwargs: Any) -> Any:
        return call_fitted(function, tuple(plain_data(arg) for arg in args),
                           {key: plain_data(arg) for key, arg in kwargs.items()})
    plain.plain_arguments = plain.refuses_unfit_calls = True  # type: ignore[attr-defined]
    return plain


def plain_public_arguments(cls: type) -> type:
    """``cls`` with every public method (and class method) taking its arguments as :func:`plain_data`:
    the class decorator of the services a caller calls (docs/concepts.md, "Rules, exactly"), so no
    check, read or lookup on the way to the rules meets a subclass's own ``==``, ``hash``, ``len`` or
    ``repr``, which may lie or raise."""
    for name, member in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, classmethod):
            setattr(cls, name, classmethod(plain_arguments(member.__func__)))
        elif inspect.isfunction(member) and not getattr(member, "plain_arguments", False):
            setattr(cls, name, plain_arguments(member))
    return cls


class NotCopied:
    """For the API's objects bound to an open ledger (its connection and writer lock): pickling or
    copying one (``pickle``, ``copy.copy``, ``copy.deepcopy``, a process pool's arguments) is
    ``INVALID_ARGUMENT`` saying what to pass instead, not Python's ``TypeError`` about a connection
    (nor a shallow copy sharing the connection, which ``copy.copy`` made)."""

    def _bound_to_a_ledger(self) -> bool:
        return True

    def __reduce_ex__(self, protocol: Any) -> Any:
        if not self._bound_to_a_ledger():  # over a MemoryCase: copied as any object
            return super().__reduce_ex__(protocol)
        name = type(self).__name__
        article = "an" if name[:1] in "AEIOU" else "a"  # an Action, an EvidenceStore
        raise LedgerError(INVALID_ARGUMENT, f"{article} {name} is bound to an open ledger (its connection and writer "
                          "lock) and cannot be pickled or copied: give another process or thread the case's path and "
                          "open it there with Case.open (one Case per thread)")
