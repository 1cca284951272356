"""The constraint a policy choice meets: at most a share of one outcome's runs stopped
(``--max-stopped LABEL=PCT``, docs/simulate.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..ground import errors as E
from ..ground.errors import LedgerError, repr_shown


@dataclass(frozen=True)
class Constraint:
    """At most ``pct`` % of the runs whose outcome is ``label`` stopped (``--max-stopped LABEL=PCT``)."""

    label: str
    pct: Fraction

    def allows(self, stopped: int, runs: int) -> bool:
        return stopped * 100 <= self.pct * runs

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "max_stopped_pct": float(self.pct)}


#: The share of ``--max-stopped``: ASCII digits with an optional decimal point (``Fraction`` would
#: also take ``1_0``, ``1e1`` and other scripts' digits, which ``--vary`` refuses too).
PERCENT = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
#: The most digits of that share (and its point): Python reads no number of more digits.
SHARE_DIGITS_MAX = 4300


def parse_max_stopped(spec: str) -> Constraint:
    """``LABEL=PCT`` (``resolved=2%``, ``resolved=2.5``) → a :class:`Constraint`; ``INVALID_ARGUMENT``
    unless the label is not blank and the share a number from 0 to 100 in ASCII digits, with an
    optional decimal point and ``%``."""
    if not isinstance(spec, str):
        raise LedgerError(E.INVALID_ARGUMENT, f"--max-stopped must be LABEL=PCT, got {spec!r}")
    label, eq, pct = spec.rpartition("=")
    text = pct.strip().removesuffix("%").strip()
    plain = eq and label.strip() and PERCENT.fullmatch(text) and len(text) <= SHARE_DIGITS_MAX
    share = Fraction(text) if plain else None  # (Python reads no number of more digits)
    if share is None or not 0 <= share <= 100:
        raise LedgerError(E.INVALID_ARGUMENT, f"--max-stopped {repr_shown(spec, 80)}: expected LABEL=PCT with PCT "
                          "from 0 to 100 (ASCII digits, an optional decimal point, at most 4300 digits), e.g. "
                          "resolved=2%")
    return Constraint(label, share)
