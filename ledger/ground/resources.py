"""Where the package's data lives: ``sql/``, ``schemas/`` and the demo case.

In a built wheel ``sql/``, ``schemas/`` and ``config/`` sit in ``ledger/_data/``;
in a source checkout they are the repository's top-level folders. The demo
example is ``ledger/examples`` in both.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # ledger/


@cache
def resource_dir(name: str) -> Path:
    """Absolute path of the data folder ``name`` (``sql``, ``schemas``, ``config``, ``examples``)."""
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"case-ledger data folder {name!r} is missing from the installation")
