"""``ledger``: the command line of case-ledger.

Every command parses its arguments, calls the public library API (``ledger``)
and renders the result; one module per command group. :class:`LedgerGroup`
(in ``_common``) is the single place that turns a ``LedgerError`` into
``error: CODE: message`` on stderr with exit status 1 (click exits 2 for usage
errors).
"""

from __future__ import annotations


import importlib

import click

from ._common import DEMO_TAKES_NO_CONFIG, LedgerGroup, Settings
from ._output import escape_unencodable_output, thread_failures_on_one_line

#: Each command and where it is defined (module of this package, attribute). A command's module is
#: imported when the command is called (or help lists it), so ``ledger apply`` loads only what
#: applying a journal uses and starts faster than if every command were loaded first.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("case", "init"), "revision": ("case", "revision"), "state": ("case", "state"),
    "budget": ("budget", "budget"), "scope": ("scope", "scope"), "evidence": ("evidence", "evidence"),
    "balances": ("inspect", "balances"), "actions": ("inspect", "actions"), "events": ("inspect", "events"),
    "sql": ("inspect", "sql"),
    "export": ("package", "export"), "import": ("package", "import_command"), "verify": ("package", "verify"),
    "apply": ("journal", "apply"), "simulate": ("simulate", "simulate_command"), "demo": ("journal", "demo"),
    "serve": ("serve", "serve"), "runs": ("runs", "runs"), "outcome": ("runs", "outcome"),
    "fleet": ("fleet", "fleet"),
}


class _Main(LedgerGroup):
    """The ``ledger`` group: its commands (:data:`COMMANDS`) are loaded when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS.keys() | self.commands.keys())

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name not in COMMANDS and name not in self.commands and not name.startswith("-"):
            for known in COMMANDS:  # a mistyped name: click suggests the close ones among the loaded commands
                self.get_command(ctx, known)
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, name = COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(f".{module}", __package__), name), cmd_name)
        return self.commands.get(cmd_name)


@click.group(cls=_Main)
# readable=False: a file this user may not read is the loader's CONFIG_INVALID (exit 1), as a missing one
@click.option("--config", type=click.Path(readable=False), metavar="FILE",
              help="Budget policy TOML (default: the policy frozen in the case).")
@click.option("--analysis-config", type=click.Path(readable=False), metavar="FILE",
              help="Analysis TOML: units, max hypotheses, storage, limits.")
@click.option("--actor", default="controller", show_default=True, help="Asserted identity recorded in every event.")
@click.version_option(package_name="case-ledger")
@click.pass_context
def main(ctx: click.Context, config: str | None, analysis_config: str | None, actor: str) -> None:
    """case-ledger: budget accounting and evidence locker for an automated bug investigator.

    Each case is a folder with one ledger.sqlite: an append-only, hash-chained
    history you can query with plain SQL, export as canonical JSON and verify.
    """
    # paths are shown as the bytes they are, even when not UTF-8 (os.fsdecode's surrogates), and what
    # the output's encoding cannot carry is escaped: printing never fails a command that ran
    escape_unencodable_output()
    thread_failures_on_one_line()
    if ctx.meta.get("ledger.help_requested"):  # `ledger --config bad.toml verify --help`: help, nothing loaded
        config = analysis_config = None
    if ctx.invoked_subcommand == "demo" and (config is not None or analysis_config is not None):
        raise click.UsageError(DEMO_TAKES_NO_CONFIG)  # whatever the files hold: the usage is refused first
    ctx.obj = Settings(config, analysis_config, actor)


if __name__ == "__main__":  # pragma: no cover
    main()
