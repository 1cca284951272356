"""``ledger serve``: browse cases in Datasette, read-only."""

from __future__ import annotations

import json

import click

from ledger.browse.metadata import left_out_warnings
from ledger.browse.server import serve_cases, serve_metadata
from ledger.ground import interrupts
from ledger.ground.errors import LedgerError

from ._common import OnceCommand, CaseFolder, IntegerRange, import_sqlite_utils_alone
from ._output import warn


@click.command(cls=OnceCommand)
@click.argument("cases", nargs=-1, required=True, type=CaseFolder(), metavar="CASE...")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (another than this machine's own lets anyone who can reach it read the "
                   "cases: there is no login).")
@click.option("--port", type=IntegerRange(0, 65535), default=8001, show_default=True,
              help="Port to listen on (0: a free one, printed at start).")
@click.option("--open", "open_browser", is_flag=True, help="Open the address in a web browser once it listens.")
@click.option("--metadata-only", is_flag=True,
              help="Print the Datasette metadata (descriptions, titles, canned queries) as JSON and exit.")
def serve(cases: tuple[str, ...], host: str, port: int, open_browser: bool, metadata_only: bool) -> None:
    """Browse cases in Datasette, read-only (needs: pip install '.[web]' in a clone of the repository).

    Each case is one database, titled with its case id and state; every view
    and column is described (with its unit), the append-only tables are marked
    as the raw history, and the usual questions are canned queries, among them
    each hypothesis' remaining units across the history, drawn as a picture.
    Nothing can write the ledger through it. Ctrl-C stops it. A case that
    cannot be read is left out with a warning and the others are served.
    --metadata-only prints the JSON `datasette --metadata` takes (canned queries
    included) and needs no Datasette; it exits 1 when a case was left out.
    """
    if metadata_only:
        left_out: list[tuple[str, LedgerError]] = []
        try:
            metadata = serve_metadata(list(cases), left_out)
        finally:  # every case left out is named, the first one's error raised when none is left
            for line in left_out_warnings(left_out, len(cases)):
                warn(line)
        click.echo(json.dumps(metadata, indent=2, ensure_ascii=False))
        if left_out:
            click.get_current_context().exit(1)
        return
    import_sqlite_utils_alone()  # Datasette imports it: not pandas, numpy and pyarrow with it
    with interrupts.python_handler():  # asyncio's own Ctrl-C handling, which it takes only over Python's
        serve_cases(list(cases), host=host, port=port, open_browser=open_browser, echo=click.echo, warn=warn)
