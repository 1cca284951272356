"""``ledger``: the command line of case-ledger.

Every command parses its arguments, calls the public library API (``ledger``)
and renders the result; one module per command group. :class:`LedgerGroup`
(in ``_common``) is the single place that turns a ``LedgerError`` into
``error: CODE: message`` on stderr with exit status 1 (click exits 2 for usage
errors).
"""

from __future__ import annotations


import click

from . import budget as budget_commands
from . import case as case_commands
from . import evidence as evidence_commands
from . import fleet as fleet_commands
from . import inspect as inspect_commands
from . import journal as journal_commands
from . import package as package_commands
from . import runs as runs_commands
from . import simulate as simulate_commands
from . import scope as scope_commands
from . import serve as serve_commands
from ._common import LedgerGroup, Settings
from ._output import escape_unencodable_output


@click.group(cls=LedgerGroup)
@click.option("--config", type=click.Path(), metavar="FILE", help="Budget policy TOML (default: the policy frozen in the case).")
@click.option("--analysis-config", type=click.Path(), metavar="FILE", help="Analysis TOML: units, max hypotheses, storage, limits.")
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
    if ctx.meta.get("ledger.help_requested"):  # `ledger --config bad.toml verify --help`: help, nothing loaded
        config = analysis_config = None
    ctx.obj = Settings(config, analysis_config, actor)




for command in (case_commands.init, case_commands.revision, case_commands.state, budget_commands.budget,
                scope_commands.scope, evidence_commands.evidence,
                inspect_commands.balances, inspect_commands.actions, inspect_commands.events, inspect_commands.sql,
                package_commands.export, package_commands.import_command, package_commands.verify,
                journal_commands.apply, simulate_commands.simulate_command, journal_commands.demo,
                serve_commands.serve, runs_commands.runs, runs_commands.outcome,
                fleet_commands.fleet):
    main.add_command(command)


if __name__ == "__main__":  # pragma: no cover
    main()
