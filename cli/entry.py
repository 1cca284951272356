"""The ``ledger`` command's entry point: loads the command line, and a Ctrl-C or SIGTERM while it is
still loading ends as one later does (the message, status 130 or 143), never as a traceback or
without a word, from this module's first line on (before it, Python itself is starting)."""

import importlib
import signal
import sys

#: What an interrupted command prints (every command, before or after it loaded).
INTERRUPTED = "error: interrupted; nothing half-written remains, run the command again"


def run() -> None:
    """The ``ledger`` command (:func:`ledger_cli.main.main`)."""
    try:
        importlib.import_module("ledger.ground.interrupts").ends_process()  # SIGTERM too, from here on
        main = importlib.import_module(".main", __package__).main
    except KeyboardInterrupt:
        for number in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C while it exits changes nothing
            signal.signal(number, signal.SIG_IGN)
        sys.stderr.write(INTERRUPTED + "\n")
        exit_status = getattr(sys.modules.get("ledger.ground.interrupts"), "exit_status", None)
        sys.exit(exit_status() if exit_status is not None else 130)
    main(prog_name="ledger")
