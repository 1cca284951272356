"""Type checks for the public API's arguments: a wrong type is ``INVALID_ARGUMENT`` naming the argument,
never an ``AttributeError`` or ``TypeError`` from deep inside (nor a string iterated as characters)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import INVALID_ARGUMENT, LedgerError


#: An integer written as text, as the command line and ``--vary`` take it: ASCII digits with an
#: optional leading minus (``int()`` would also take ``1_000``, ``+5`` and other scripts' digits).
DECIMAL = re.compile(r"-?[0-9]+")


def is_decimal(text: str) -> bool:
    """True when ``text`` (surrounding spaces aside) is :data:`DECIMAL`."""
    return DECIMAL.fullmatch(text.strip()) is not None


def _kind(value: Any) -> str:
    return "None" if value is None else type(value).__name__


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


def check_callback(value: Any, name: str) -> Any:
    """``value`` if it is None or callable (``INVALID_ARGUMENT`` otherwise)."""
    if value is not None and not callable(value):
        raise LedgerError(INVALID_ARGUMENT, f"{name} must be a function or None, got {_kind(value)}")
    return value


def check_iterable(value: Any, name: str, expected: str) -> Iterable[Any]:
    """``value`` if it is an iterable that is not a ``str``, ``bytes`` or mapping (a string would be
    read as its characters)."""
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise LedgerError(INVALID_ARGUMENT, f"{name} must be {expected}, got {_kind(value)}")
    return value


def path_list(value: Any, name: str) -> list[str | os.PathLike[str]]:
    """One path (``str`` or path-like) as a one-item list, or a list of paths as is."""
    if isinstance(value, (str, os.PathLike)):
        return [value]
    items = list(check_iterable(value, name, "a path or a list of paths"))
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise LedgerError(INVALID_ARGUMENT, f"{name} must hold paths (str or path-like), got {_kind(item)}")
    return items


def check_text_mapping(value: Any, name: str) -> Mapping[str, str]:
    """``value`` if it is a mapping of ``str`` to ``str``."""
    check_instance(value, Mapping, name, "a mapping or a path")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise LedgerError(INVALID_ARGUMENT, f"{name} must map run ids (str) to outcomes (str), "
                              f"got {key!r}: {_kind(item)}")
    return value
