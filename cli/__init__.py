"""The ``ledger`` command line (installed as ``ledger_cli``): a thin click layer over :mod:`ledger`."""
