"""Rewrite the ``## Views`` section and the list of tables of docs/sql.md from ``sql/descriptions.toml``:
``python tools/sql_reference.py`` (tests/test_browse.py fails while the two differ).

The same descriptions are what ``ledger serve`` shows in Datasette, so the page and the
browser cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path

from ledger.browse.metadata import sql_reference, tables_reference

PAGE = Path(__file__).resolve().parent.parent / "docs" / "sql.md"


#: The generated list of tables sits between these two lines of the ``## Tables`` section.
TABLES_BEGIN, TABLES_END = "<!-- generated from sql/descriptions.toml: the tables -->\n", "<!-- end of the tables -->\n"


def render(page: str) -> str:
    """``page`` with its ``## Views`` section (up to the next ``## ``) and its list of tables replaced."""
    before, rest = page.split("## Views\n", 1)
    after = rest.split("\n## ", 1)[1]
    page = f"{before}{sql_reference()}\n## {after}"
    head, rest = page.split(TABLES_BEGIN, 1)
    return f"{head}{TABLES_BEGIN}{tables_reference()}{TABLES_END}{rest.split(TABLES_END, 1)[1]}"


if __name__ == "__main__":
    PAGE.write_text(render(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
