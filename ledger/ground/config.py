"""Budget policy and analysis configuration (docs/concepts.md and docs/architecture.md and docs/errors.md).

Both are read from TOML with :mod:`tomllib`, validated against a JSON Schema
(``budget-policy-v1``, ``analysis-config-v1``) and then in code, because
JSON Schema's ``integer`` accepts ``2500.0`` and a TOML ``true`` must never pass
for ``1``. Every refusal is ``CONFIG_INVALID`` and names the key.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

from .arguments import plain_data
from .canonical import canonical_sha256
from .descriptors import open_to_read
from .errors import CONFIG_INVALID, INVALID_ARGUMENT, LedgerError, describe_value, refuses_unfit_calls_of, shortened
from .errors import pass_on_interruption
from .resources import resource_dir
from .paths import fs_path
from .schemas import PATH_PART_CHARS_MAX, validate


T = TypeVar("T")

#: docs/concepts.md defaults. ``action_costs`` is empty in code; the example file fills it.
DEFAULT_POLICY: dict[str, Any] = {
    "default_action_cost": 10,
    "action_costs": {},
    "test_costs": {"human": 30, "automated": 15},
    "max_reward_bps": 8000,
    "new_evidence_score": 100,
    "low_information_threshold": 20,
    "max_low_information_steps": 3,
    "tier_shallow_below_pct": 50,
    "tier_deferred_below_pct": 20,
    "max_scarcity_bps": 40000,
}

#: ``novelty_mode`` values (docs/concepts.md). The default, ``"evidence"``, is not written into the
#: frozen policy, so a policy that does not choose ``"atoms"`` hashes exactly as before the key existed.
NOVELTY_MODES = ("evidence", "atoms")
NOVELTY_DEFAULT = "evidence"

DEFAULT_ANALYSIS: dict[str, Any] = {
    "units_per_hypothesis": 100,
    "max_hypotheses": 8,
}

DEFAULT_STORAGE: dict[str, Any] = {"synchronous": "FULL", "busy_timeout_ms": 5000}

#: Operational limits of docs/errors.md (not policy; never frozen in events).
DEFAULT_LIMITS: dict[str, int] = {
    "event_bytes_max": 2 * 1024 * 1024,
    "evidence_payload_bytes_max": 1024 * 1024,
    "budget_events_max": 10_000,
    #: case events a caller can repeat without bound (recorded refusals, scope and feedback events)
    "case_events_max": 10_000,
    "evidence_artifact_bytes_max": 4 * 1024 * 1024,
    "evidence_records_max": 10_000,
    "evidence_content_bytes_max": 64 * 1024 * 1024,
    #: How far an explicit event time (``at``) may be ahead of the machine's clock (5 minutes).
    "at_future_tolerance_ms": 300_000,
}


#: The longest config file read (1 MiB): the largest a policy may be (256 action prices) is a few KiB.
CONFIG_BYTES_MAX = 1024 * 1024


def read_toml(path: str | Path) -> dict[str, Any]:
    """The TOML table of the file at ``path``; every problem is ``CONFIG_INVALID`` naming the file (and the
    line, where the parser gives one), as is a file of more than :data:`CONFIG_BYTES_MAX` bytes. A UTF-8
    byte-order mark at the start is accepted."""
    try:
        path = fs_path(path, "config file")  # a str, bytes or path-like name, as a Path
    except LedgerError as exc:
        raise LedgerError(CONFIG_INVALID, exc.message, key="(file)") from None
    try:
        if path.exists() and not path.is_file():  # a fifo would block, a folder cannot be read
            raise LedgerError(CONFIG_INVALID, f"{path}: not a regular file", key="(file)")
        with open_to_read(path) as handle:
            data = handle.read(CONFIG_BYTES_MAX + 1)
        if len(data) > CONFIG_BYTES_MAX:  # told by its size, never read whole (a config is a few KiB)
            raise LedgerError(CONFIG_INVALID, f"{path}: larger than {CONFIG_BYTES_MAX} bytes: no config this program "
                              "reads is so long (a wrong file?)", key="(file)")
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise LedgerError(CONFIG_INVALID, f"{path}: no such file", key="(file)") from None
    except (OSError, UnicodeDecodeError) as exc:
        pass_on_interruption(exc)
        raise LedgerError(CONFIG_INVALID, f"{path}: cannot read: {exc}", key="(file)") from None
    return _parse_toml(text.removeprefix("\ufeff"), path)


def load_toml_config(path: str | Path, build: Callable[[dict[str, Any]], T]) -> T:
    """``build`` of the TOML table at ``path``; a ``CONFIG_INVALID`` it raises names the file too."""
    data = read_toml(path)
    try:
        return build(data)
    except LedgerError as exc:
        if exc.code != CONFIG_INVALID:
            raise
        raise LedgerError(CONFIG_INVALID, f"{os.fsdecode(path)}: {exc.message}", **exc.details) from None


#: A run of digits (``_`` separators allowed) longer than Python converts to an int by default.
_LONG_NUMBER = re.compile(r"[0-9][0-9_]{4300,}")


#: TOML's strings (multi-line ones first) and comments, whose digits are no number.
_NOT_VALUES = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:\\.|[^"\\\n])*"|\'[^\'\n]*\'|#[^\n]*')


def _long_number_line(text: str) -> int | None:
    """The line of the first run of more than 4300 digits that is a value, outside TOML's strings and
    comments (else the first run anywhere; None: none)."""
    values = _NOT_VALUES.sub(lambda found: re.sub(r"[^\n]", " ", found.group()), text)  # lines kept
    run = _LONG_NUMBER.search(values) or _LONG_NUMBER.search(text)
    return text.count("\n", 0, run.start()) + 1 if run else None


def _parse_toml(text: str, path: str | Path) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LedgerError(CONFIG_INVALID, f"{path}: not valid TOML: {exc}", key="(file)") from None
    except RecursionError:
        raise LedgerError(CONFIG_INVALID, f"{path}: not a config this program reads: arrays or tables nested "
                          "too deeply", key="(file)") from None
    except ValueError:  # an integer of more than 4300 digits (Python's conversion limit)
        line = _long_number_line(text)
        where = f" (line {line})" if line else ""
        raise LedgerError(CONFIG_INVALID, f"{path}{where}: not a config this program reads: a number of more "
                          "than 4300 digits", key="(file)") from None


#: The largest integer a config value may be (what JSON numbers carry exactly; the schemas' maximum).
CONFIG_INT_MAX = 2 ** 53 - 1


def _check_types(data: Mapping[str, Any], where: str, known: Mapping[str, Any] | None, *,
                 strings: frozenset[str] = frozenset()) -> None:
    """Refuse a key ``known`` does not hold (None: any key; a table's entry in ``known`` is its own
    ``known``, :data:`ANY_KEYS` for any key), first, so that a misspelt key is called unknown whatever
    its value; then floats and booleans anywhere an integer belongs (schema cannot tell 25.0 from 25),
    and integers past ±(2**53-1) (a number of thousands of digits cannot even be printed)."""
    for key, value in data.items():
        if not isinstance(key, str):  # a mapping built in Python (TOML keys are text)
            raise LedgerError(CONFIG_INVALID, f"{where.rstrip('.') or '(top level)'}: keys must be strings, got "
                              f"{describe_value(key)}", key=where.rstrip(".") or "(top level)")
        name = f"{where}{key}"
        if known is not None and key not in known:
            raise unknown_key(where, key, known)
        inner = known.get(key) if known is not None else None
        if isinstance(value, Mapping) and not where and (known is None or inner is not None):
            # a table where one belongs (a table inside one is no config's); a leaf's is no integer
            _check_types(value, f"{name}.", None if inner is ANY_KEYS else inner, strings=strings)
        elif name in strings:
            continue
        elif type(value) is not int:
            raise LedgerError(
                CONFIG_INVALID,
                f"{name}: must be an integer, got {describe_value(value)}",
                key=name,
            )
        elif not -CONFIG_INT_MAX <= value <= CONFIG_INT_MAX:  # before anything prints or hashes it
            raise LedgerError(CONFIG_INVALID, f"{name}: an integer of about {int(value.bit_length() * 0.30103) + 1} "
                              f"digits is outside ±{CONFIG_INT_MAX}", key=name)


def unknown_key(where: str, key: str, known: Iterable[str] | Mapping[str, Any]) -> LedgerError:
    """``CONFIG_INVALID`` for ``key`` of the table ``where`` (``""`` or ``"limits."``), shown as a
    refusal's location shows a key (:func:`toml_key`; its start and end when long), naming the known
    key it is closest to, when one is close (a misspelling, most often). ``known``: the keys there (a
    mapping as :func:`_check_types` takes, whose tables a quoted ``"table.key"`` is told apart from)."""
    name = where + shortened(toml_key(key), PATH_PART_CHARS_MAX)
    table, _, inner = key.partition(".")
    if inner and isinstance(known, Mapping) and known.get(table) is not None:  # "limits.x" quoted: one key
        return LedgerError(CONFIG_INVALID, f"{name}: unknown key (a key of the table {table} is written under "
                           f"[{table}], or as {table}.{toml_key(inner)})", key=name)
    close = difflib.get_close_matches(key, sorted(known), n=1) if len(key) <= PATH_PART_CHARS_MAX else []
    return LedgerError(CONFIG_INVALID, f"{name}: unknown key" + (f" (did you mean {close[0]}?)" if close else ""),
                       key=name)


def toml_key(key: str) -> str:
    """``key`` as TOML writes it: bare when it may be (letters, digits, ``_`` and ``-``), else in double
    quotes, where a quote, a backslash and characters that do not print are escaped (a zero-width
    space shows as ``\\u200b``; letters of any alphabet show as themselves)."""
    if re.fullmatch(r"[A-Za-z0-9_-]+", key):
        return key
    text = json.dumps(key, ensure_ascii=False)[1:-1]
    return '"' + "".join(c if c.isprintable() else (f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
                         for c in text) + '"'


#: In a mapping of known keys: the entry of a table whose keys are names of the caller's own
#: (``action_costs``: any name, checked by the schema). A leaf key's entry is None.
ANY_KEYS: Mapping[str, Any] = {}

#: The keys a budget policy holds; a table's entry is its own keys.
POLICY_KEYS: dict[str, Any] = {**dict.fromkeys(DEFAULT_POLICY), "novelty_mode": None, "action_costs": ANY_KEYS,
                               "test_costs": dict.fromkeys(DEFAULT_POLICY["test_costs"])}
#: The keys an analysis config holds.
ANALYSIS_KEYS: dict[str, Any] = {**dict.fromkeys(DEFAULT_ANALYSIS), "storage": dict.fromkeys(DEFAULT_STORAGE),
                                 "limits": dict.fromkeys(DEFAULT_LIMITS)}


#: Canonical sha256 of the policies the tests validate against ``budget-policy-v1`` (the
#: defaults and the bundled example, ``tests/test_config.py``): the same bytes are the same policy,
#: so a process that only uses them never loads the JSON Schema machinery.
CHECKED_POLICY_SHA256 = frozenset({
    "cfd69d0c7e9063c5c30d26434d7ed2d37e4a93431cfbff98dab37c7de53c49e9",  # BudgetConfig()
    "51193c60449cc185d8c5481811581b6a145c3da4fd8c94f1d28d2071e5a5b1ae",  # config/budget.example.toml
})
#: Policies validated in this process (their canonical sha256): each is checked once.
_VALIDATED_POLICIES: set[str] = set()


def _validated_policy_sha256(merged: Mapping[str, Any]) -> str:
    """The policy's canonical sha256, once ``budget-policy-v1`` has passed it (checked once per
    policy and process; ``CONFIG_INVALID`` naming the key otherwise)."""
    try:
        sha: str | None = canonical_sha256(merged)
    except LedgerError:  # no canonical form: the schema names the key
        sha = None
    if sha is None or (sha not in CHECKED_POLICY_SHA256 and sha not in _VALIDATED_POLICIES):
        validate("budget-policy-v1", merged, CONFIG_INVALID, "budget config")
        sha = sha or canonical_sha256(merged)
        _VALIDATED_POLICIES.add(sha)
    return sha


class ReadOnlyDict(dict):  # type: ignore[type-arg]
    """A ``dict`` that refuses every change (``TypeError``): what a checked configuration holds, so
    that what it records is what was checked. It reads, compares, copies, pickles and writes as JSON
    as a ``dict`` does; :func:`plain` (or the config's ``to_dict()``) gives an editable copy."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # filled once, as it is made
        if getattr(self, "_filled", False):
            self._refuse()
        super().__init__(*args, **kwargs)
        self._filled = True

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a checked configuration is read-only: edit a copy (its to_dict()) and build a new one")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:  # pickled and copied whole, not filled in item by item
        return (type(self), (dict(self),))


def read_only(value: Any, levels: int = 2) -> Any:
    """``value`` with the mappings of its first ``levels`` levels (a config and its tables) made
    :class:`ReadOnlyDict` copies: a checked configuration cannot be edited afterwards (an edit raises
    ``TypeError``), so what it records is what was checked."""
    if isinstance(value, Mapping) and levels > 0:
        return ReadOnlyDict({key: read_only(item, levels - 1) for key, item in value.items()})
    return value


def plain(value: Any, levels: int = 2) -> Any:
    """``value`` with the mappings of its first ``levels`` levels plain ``dict``s again (copies, a
    ``dict`` subclass read by the data it holds, its keys and leaves plain values: :func:`plain_data`): for
    JSON and for editing. Deeper ones (no config has them: they are refused) are left as they are,
    so a mapping nested thousands deep is refused, not a ``RecursionError``."""
    if isinstance(value, Mapping) and levels > 0:  # a dict subclass by what it holds, not its own items()
        items = list(dict.items(value)) if isinstance(value, dict) else list(value.items())
        return {plain_data(key): plain(item, levels - 1) for key, item in items}
    return value if isinstance(value, Mapping) else plain_data(value)


@refuses_unfit_calls_of(init=True)
@dataclass(frozen=True)
class BudgetConfig:
    """The effective budget policy: every key of docs/concepts.md, resolved.

    Build with ``BudgetConfig()`` (defaults), :meth:`load` (a TOML file) or
    :meth:`from_mapping`. Unknown keys, floats, booleans and out-of-range values
    raise ``CONFIG_INVALID`` naming the key.
    """

    policy: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_POLICY))

    def __post_init__(self) -> None:
        if not isinstance(self.policy, Mapping):
            raise LedgerError(CONFIG_INVALID, "budget config must be a table", key="(top level)")
        if "units_per_hypothesis" in self.policy:  # a simulation policy's key, given where a budget's is read
            raise LedgerError(CONFIG_INVALID, "units_per_hypothesis: a simulation policy's setting, not a budget "
                              "config's: give 'ledger apply --units-per-hypothesis N' (apply_journal's units_per_hypothesis= "
                              "in Python), or the analysis config's units_per_hypothesis", key="units_per_hypothesis")
        merged = {**DEFAULT_POLICY, **plain(self.policy)}  # plain: another config's read-only policy too
        for table in ("action_costs", "test_costs"):
            if not isinstance(merged[table], Mapping):
                raise LedgerError(CONFIG_INVALID, f"{table}: must be a table", key=table)
            for key in merged[table]:
                if not isinstance(key, str):
                    raise LedgerError(CONFIG_INVALID, f"{table}: keys must be strings, got {describe_value(key)}", key=table)
        merged["action_costs"] = dict(merged["action_costs"])
        merged["test_costs"] = {**DEFAULT_POLICY["test_costs"], **dict(merged["test_costs"])}
        mode = merged.pop("novelty_mode", NOVELTY_DEFAULT)
        if not isinstance(mode, str) or mode not in NOVELTY_MODES:
            raise LedgerError(CONFIG_INVALID, f"novelty_mode: must be one of {', '.join(NOVELTY_MODES)}, "
                              f"got {describe_value(mode)}", key="novelty_mode")
        if mode != NOVELTY_DEFAULT:
            merged["novelty_mode"] = mode
        _check_types(merged, "", POLICY_KEYS, strings=frozenset({"novelty_mode"}))
        policy_sha256 = _validated_policy_sha256(merged)
        if merged["tier_shallow_below_pct"] < merged["tier_deferred_below_pct"]:
            raise LedgerError(
                CONFIG_INVALID,
                "tier_shallow_below_pct: must be >= tier_deferred_below_pct",
                key="tier_shallow_below_pct",
            )
        object.__setattr__(self, "policy", read_only(merged))  # its hash is of what was checked: no edit after
        object.__setattr__(self, "_policy_sha256", policy_sha256)

    def to_dict(self) -> dict[str, Any]:
        """The policy as plain, editable dicts (a copy; ``policy`` itself is read-only): every key, resolved."""
        return plain(self.policy)

    @classmethod
    def load(cls, path: str | Path) -> "BudgetConfig":
        """Read and validate a budget TOML file (raises ``CONFIG_INVALID`` naming the file)."""
        return load_toml_config(path, cls.from_mapping)

    @classmethod
    def example(cls) -> "BudgetConfig":
        """The example policy shipped with the package (``config/budget.example.toml``), from any folder."""
        return cls.load(resource_dir("config") / "budget.example.toml")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "BudgetConfig":
        """Validate a mapping of docs/concepts.md keys; missing keys take their defaults."""
        if not isinstance(data, Mapping):
            raise LedgerError(CONFIG_INVALID, "budget config must be a table", key="(top level)")
        return cls(policy=plain(data, 1))

    @property
    def policy_sha256(self) -> str:
        """sha256 of the canonical policy: what budget events carry as ``policy_sha256``."""
        return self._policy_sha256  # type: ignore[attr-defined]

    def cost_units(self, action: str) -> int:
        """Cost of ``action``: its ``action_costs`` entry, else ``default_action_cost`` (docs/concepts.md).
        ``INVALID_ARGUMENT`` when ``action`` is no str."""
        if not isinstance(action, str):
            raise LedgerError(INVALID_ARGUMENT, f"an action name must be a str, got {describe_value(action)}")
        return self.policy["action_costs"].get(action, self.policy["default_action_cost"])

    def price_units(self, action: str) -> int:
        """What asking for ``action`` costs, for every path that quotes or charges a requested action
        (docs/scopes.md): ``test.human``/``test.automated`` (``request_test``, the soft gate) cost their
        ``test_costs`` entry; any other action its :meth:`cost_units`."""
        self.cost_units(action)  # INVALID_ARGUMENT for an action that is no str
        kind = action.removeprefix("test.")
        if action.startswith("test.") and kind in self.policy["test_costs"]:
            return self.policy["test_costs"][kind]
        return self.cost_units(action)

    def price_notes(self, action: str) -> list[str]:
        """What may surprise in ``action``'s quoted price (``check``, ``price_signal``), for people: a test's
        name quoted at its ``test_costs`` entry while a reservation under that name debits its
        ``action_costs`` entry or ``default_action_cost`` (docs/concepts.md, "Choices where the rules
        leave room"); an action priced at ``default_action_cost`` while ``action_costs`` names others and
        not it (a misspelt name, most often). [] when nothing."""
        quoted, reserved = self.price_units(action), self.cost_units(action)
        if quoted != reserved:
            return [f"{action} is quoted at test_costs, {quoted} units, the price of a test asked for with "
                    f"request_test; a reservation under this name debits {reserved} units (its action_costs "
                    f"entry or default_action_cost): give an action your agent runs itself a name of its own"]
        named = sorted(self.policy["action_costs"])
        if not named or action in named:
            return []
        shown = ", ".join(named[:5]) + (f" and {len(named) - 5} more" if len(named) > 5 else "")
        return [f"{action} is not among the action_costs of the policy this revision froze ({shown}): it is priced "
                f"at default_action_cost, {self.policy['default_action_cost']} units"]

    @property
    def affordability_floor_units(self) -> int:
        """Cheapest cost in the policy: min of ``default_action_cost`` and ``action_costs`` (docs/concepts.md)."""
        return min([self.policy["default_action_cost"], *self.policy["action_costs"].values()])

    def __getitem__(self, key: str) -> Any:
        return self.policy[key]

    @property
    def novelty_mode(self) -> str:
        """``"evidence"`` (novelty of the whole evidence, the default) or ``"atoms"`` (docs/concepts.md)."""
        return self.policy.get("novelty_mode", NOVELTY_DEFAULT)


def default_analysis_data() -> dict[str, Any]:
    """The analysis config every key of which is at its default, as :class:`AnalysisConfig` validates it."""
    return {"units_per_hypothesis": DEFAULT_ANALYSIS["units_per_hypothesis"],
            "max_hypotheses": DEFAULT_ANALYSIS["max_hypotheses"],
            "storage": dict(DEFAULT_STORAGE), "limits": dict(DEFAULT_LIMITS)}


@refuses_unfit_calls_of(init=True)
@dataclass(frozen=True)
class AnalysisConfig:
    """Analysis settings (docs/concepts.md), storage settings (docs/architecture.md) and operational limits (docs/errors.md).

    ``units_per_hypothesis`` and ``max_hypotheses`` are integers ≥ 1;
    ``storage`` holds ``synchronous`` (``FULL``/``NORMAL``) and
    ``busy_timeout_ms``; ``limits`` the byte and count limits of docs/errors.md.
    """

    units_per_hypothesis: int = DEFAULT_ANALYSIS["units_per_hypothesis"]
    max_hypotheses: int = DEFAULT_ANALYSIS["max_hypotheses"]
    storage: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_STORAGE))
    limits: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMITS))

    def __post_init__(self) -> None:
        for table in ("storage", "limits"):
            if not isinstance(getattr(self, table), Mapping):
                raise LedgerError(CONFIG_INVALID, f"{table}: must be a table", key=table)
        data = {
            "units_per_hypothesis": self.units_per_hypothesis,
            "max_hypotheses": self.max_hypotheses,
            "storage": {**DEFAULT_STORAGE, **plain(self.storage, 1)},
            "limits": {**DEFAULT_LIMITS, **plain(self.limits, 1)},
        }
        _check_types(data, "", ANALYSIS_KEYS, strings=frozenset({"storage.synchronous"}))
        if data != default_analysis_data():  # the built-in defaults are checked once, by the tests
            validate("analysis-config-v1", data, CONFIG_INVALID, "analysis config")
        object.__setattr__(self, "storage", read_only(data["storage"]))  # what was checked: no edit after
        object.__setattr__(self, "limits", read_only(data["limits"]))

    def to_dict(self) -> dict[str, Any]:
        """Every setting as plain, editable dicts (a copy; ``storage`` and ``limits`` are read-only), as
        :meth:`from_mapping` takes them."""
        return {"units_per_hypothesis": self.units_per_hypothesis, "max_hypotheses": self.max_hypotheses,
                "storage": plain(self.storage), "limits": plain(self.limits)}

    @classmethod
    def load(cls, path: str | Path) -> "AnalysisConfig":
        """Read and validate an analysis TOML file (raises ``CONFIG_INVALID`` naming the file)."""
        return load_toml_config(path, cls.from_mapping)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "AnalysisConfig":
        """Validate a mapping; missing keys take their defaults."""
        if not isinstance(data, Mapping):
            raise LedgerError(CONFIG_INVALID, "analysis config must be a table", key="(top level)")
        data = plain(data, 1)
        for key in data:
            if key not in ANALYSIS_KEYS:
                raise unknown_key("", str(key), ANALYSIS_KEYS)
        for key in ("storage", "limits"):
            if key in data and not isinstance(data[key], Mapping):
                raise LedgerError(CONFIG_INVALID, f"{key}: must be a table", key=key)
        return cls(**dict(data))
