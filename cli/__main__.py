"""``python -m ledger_cli``: the same as the ``ledger`` command."""

from .entry import run

run()
