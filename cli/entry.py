"""The ``ledger`` command's entry point: loads the command line, and a Ctrl-C, SIGTERM or SIGHUP while
it is still loading ends as one later does (the message, status 130, 143 or 129), never as a traceback or
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
        interrupts = sys.modules.get("ledger.ground.interrupts")
        for number in getattr(interrupts, "INTERRUPTING", (signal.SIGINT, signal.SIGTERM)):
            signal.signal(number, signal.SIG_IGN)  # a second Ctrl-C while it exits changes nothing
        sys.stderr.write(INTERRUPTED + "\n")
        exit_status = getattr(interrupts, "exit_status", None)
        sys.exit(exit_status() if exit_status is not None else 130)
    main(prog_name="ledger")
