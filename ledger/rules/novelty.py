"""Novelty of a plain result (``record_result``): whole evidence, or its atoms (docs/concepts.md).

``novelty_mode = "evidence"`` (the default): new, non-empty evidence scores ``new_evidence_score``,
empty or already seen evidence 0. ``novelty_mode = "atoms"``: evidence carrying an ``atoms`` list of
strings scores the share of its distinct atoms not returned before anywhere in the case, capped
by ``new_evidence_score``; evidence without one keeps the whole-evidence rule.
"""

from __future__ import annotations

import json
from typing import Any

from ..ground.config import BudgetConfig
from .common import EMPTY_EVIDENCE


def result_novelty(view: Any, evidence: bytes, seen: bool, policy: BudgetConfig) -> int:
    """The novelty score (0–100) of ``evidence`` (canonical bytes; ``seen``: stored before) under
    ``policy``; ``view.result_atoms_seen(atoms)`` counts the atoms recorded before."""
    novelty = 0 if (evidence in EMPTY_EVIDENCE or seen) else policy["new_evidence_score"]
    atoms = evidence_atom_ids(evidence) if policy.novelty_mode == "atoms" else None
    if atoms is not None:
        novelty = atom_novelty(len(atoms), len(atoms) - view.result_atoms_seen(atoms), policy["new_evidence_score"])
    return novelty


def evidence_atom_ids(payload: bytes) -> list[str] | None:
    """The sorted distinct atom ids of an evidence payload whose ``atoms`` is a list of strings, else None
    (docs/concepts.md, novelty over atoms)."""
    if b'"atoms"' not in payload:
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    atoms = data.get("atoms") if isinstance(data, dict) else None
    if not isinstance(atoms, list) or not all(isinstance(a, str) for a in atoms):
        return None
    return sorted(set(atoms))


def atom_novelty(returned: int, unseen: int, new_evidence_score: int) -> int:
    """``min(new_evidence_score, floor(100 × unseen / returned))``; 0 when no atom is returned."""
    return min(new_evidence_score, 100 * unseen // returned) if returned else 0
