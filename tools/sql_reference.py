"""Rewrite the ``## Views`` section of docs/sql.md from ``sql/descriptions.toml``:
``python tools/sql_reference.py`` (tests/test_browse.py fails while the two differ).

The same descriptions are what ``ledger serve`` shows in Datasette, so the page and the
browser cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path

from ledger.browse.metadata import sql_reference

PAGE = Path(__file__).resolve().parent.parent / "docs" / "sql.md"


def render(page: str) -> str:
    """``page`` with its ``## Views`` section (up to the next ``## ``) replaced."""
    before, rest = page.split("## Views\n", 1)
    after = rest.split("\n## ", 1)[1]
    return f"{before}{sql_reference()}\n## {after}"


if __name__ == "__main__":
    PAGE.write_text(render(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
