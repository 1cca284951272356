"""``python -m ledger_cli``: the same as the ``ledger`` command."""

from .main import main

main(prog_name="ledger")
