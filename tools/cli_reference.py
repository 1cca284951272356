"""Rewrite docs/cli.md from the commands' own help text: ``python tools/cli_reference.py``.

The page keeps its introduction (everything before the first ``## ``) and then
has one section per command, in the order ``ledger --help`` lists them.
"""

from __future__ import annotations

from pathlib import Path

import click

from ledger_cli.main import main

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def commands(group: click.Command, path: str = "ledger"):
    yield path, group
    if isinstance(group, click.Group):
        for name in group.list_commands(click.Context(group)):
            yield from commands(group.commands[name], f"{path} {name}")


def render() -> str:
    intro = PAGE.read_text(encoding="utf-8").split("\n## ", 1)[0].rstrip() + "\n"
    parts = [intro]
    for path, command in commands(main):
        with click.Context(command, info_name=path, terminal_width=78) as ctx:  # as on an 80-column terminal
            text = command.get_help(ctx)
        parts.append(f"\n## `{path}`\n\n```text\n{text}\n```\n")
    return "".join(parts)


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE}")
