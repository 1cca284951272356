"""The ``ledger`` command's entry point: loads the command line, and a Ctrl-C while it is still
loading ends as one later does (the message, status 130), never as a traceback."""

import importlib
import signal
import sys

#: What an interrupted command prints (every command, before or after it loaded).
INTERRUPTED = "error: interrupted; nothing half-written remains, run the command again"


def run() -> None:
    """The ``ledger`` command (:func:`ledger_cli.main.main`)."""
    try:
        main = importlib.import_module(".main", __package__).main
    except KeyboardInterrupt:
        for number in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C while it exits changes nothing
            signal.signal(number, signal.SIG_IGN)
        sys.stderr.write(INTERRUPTED + "\n")
        sys.exit(130)
    importlib.import_module("ledger.ground.interrupts").ends_process()
    main(prog_name="ledger")
