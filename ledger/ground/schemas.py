"""JSON Schemas (Draft 2020-12) shipped in ``schemas/`` and validation against them.

``jsonschema`` checks structure; because its ``integer`` type accepts ``25.0``,
callers that need a true ``int`` also use :func:`ledger.ground.canonical.check_int`.
"""

from __future__ import annotations

import importlib
import json
import re
from functools import cache
from typing import TYPE_CHECKING, Any, Iterator

from . import interrupts
from .resources import resource_dir
from .errors import LedgerError, describe_value, shortened

if TYPE_CHECKING:  # jsonschema is imported on first use: it costs about 80 ms at start-up
    from jsonschema import Draft202012Validator, ValidationError
    from referencing import Registry


def shipped_schemas() -> list[dict[str, Any]]:
    """Every JSON Schema in ``schemas/``, parsed, in file-name order."""
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(resource_dir("schemas").glob("*.json"))]


@cache
def _load_jsonschema() -> None:
    """Import ``jsonschema`` and ``referencing`` whole, a Ctrl-C (or SIGTERM) arriving meanwhile held
    until they are: an import cut in two leaves a module without its submodules in this process (a
    later validation then fails with ``AttributeError``, not as the interrupted call did)."""
    with interrupts.deferred():
        for name in ("jsonschema", "jsonschema.validators", "referencing.exceptions", "referencing.jsonschema"):
            importlib.import_module(name)


@cache
def _registry() -> Registry:
    """Every shipped schema, addressable by its ``$id`` so schemas can ``$ref`` each other.

    The shipped schemas are checked against the Draft 2020-12 metaschema by the test suite
    (:func:`shipped_schemas`), not at every start: that check alone took about 0.25 s per process."""
    _load_jsonschema()
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    resources = []
    for schema in shipped_schemas():
        resources.append((schema["$id"], Resource.from_contents(schema, default_specification=DRAFT202012)))
    return Registry().with_resources(resources)


@cache
def _end_anchored(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled with ECMA-262's meaning of ``$``: the end of the string only.

    Python's ``$`` also matches before a trailing newline, so ``^[a-z]+$`` would
    accept ``"abc\\n"`` where every ECMA-262 engine (the regex dialect JSON Schema
    specifies) refuses it. Each unescaped ``$`` outside a character class becomes ``\\Z``.
    """
    out, escaped, in_class = [], False, False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "$" and not in_class:
            out.append("\\Z")
            continue
        out.append(char)
    return re.compile("".join(out))


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    from jsonschema import ValidationError

    if validator.is_type(instance, "string") and not _end_anchored(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@cache
def strict_validator_class() -> type[Draft202012Validator]:
    """Draft 2020-12 whose ``pattern`` (and so ``propertyNames``' patterns) anchors ``$`` at the very end."""
    _load_jsonschema()
    from jsonschema import Draft202012Validator
    from jsonschema.validators import extend

    return extend(Draft202012Validator, {"pattern": _pattern})


@cache
def validator(name: str) -> Draft202012Validator:
    """The compiled validator of ``schemas/<name>.json`` (for example ``budget-policy-v1``).

    ``pattern`` follows ECMA-262: ``$`` matches only at the end of the string, so a
    value with a trailing newline never passes an anchored pattern.
    """
    schema = json.loads((resource_dir("schemas") / f"{name}.json").read_text(encoding="utf-8"))
    return strict_validator_class()(schema, registry=_registry())


def error_path(error: Any) -> str:
    """Dotted location of a jsonschema error, naming the offending key; a key longer than
    :data:`PATH_PART_CHARS_MAX` characters shows its start and end (:func:`shortened`)."""
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "additionalProperties":
        extra = sorted(str(key) for key in set(error.instance) - set(error.schema.get("properties", {})))
        parts.append(extra[0] if extra else "?")
    elif error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        parts.append(str(missing[0]) if missing else "?")
    return ".".join(shortened(part, PATH_PART_CHARS_MAX) for part in parts) or "(top level)"


#: The most characters of one key an error's location shows.
PATH_PART_CHARS_MAX = 80


#: jsonschema's messages quote the value they judge: at most this many characters of one are shown.
SCHEMA_MESSAGE_CHARS_MAX = 400


def schema_message(error: Any) -> str:
    """The message of a jsonschema error, at most :data:`SCHEMA_MESSAGE_CHARS_MAX` characters: a
    huge value it quotes keeps its start and the reason that ends the message. A wrong type or a
    value outside an enum names the value as JSON (``null``, ``true``), not as Python (``None``)."""
    message = error.message
    if error.validator == "type":
        expected = error.validator_value
        types = " or ".join(map(repr, expected)) if isinstance(expected, list) else repr(expected)
        message = f"{describe_value(error.instance)} is not of type {types}"
    elif error.validator == "enum":
        message = f"{describe_value(error.instance)} is not one of {json.dumps(error.validator_value)}"
    elif error.validator == "maxProperties" and isinstance(error.instance, dict):
        message = f"{len(error.instance)} entries, more than the {error.validator_value} allowed"
    elif (error.instance is None or isinstance(error.instance, (bool, dict, list))) \
            and message.startswith(repr(error.instance)):
        message = describe_value(error.instance) + message[len(repr(error.instance)):]  # not Python's repr
    return shortened(message, SCHEMA_MESSAGE_CHARS_MAX)


def validate(name: str, instance: Any, code: str, what: str) -> None:
    """Raise ``LedgerError(code)`` naming the first bad key if ``instance`` fails schema ``name``."""
    errors = sorted(validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = error_path(first)
        raise LedgerError(code, f"{what}: {where}: {schema_message(first)}", key=where, schema=name)
