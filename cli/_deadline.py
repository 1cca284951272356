"""A query's ``--timeout`` (``ledger sql``, ``ledger fleet sql``) kept, and Ctrl-C answered, even
while one call of a function in it holds the query.

SQLite and DuckDB stop a query between the steps of its work; one call of a function (SQLite's
``printf('%.*c', 2000000000, 'x')``, DuckDB's ``levenshtein`` of two long texts) is one step and runs
to its end, however long, and Python runs no signal handler meanwhile. While the command waits on
the query, a watcher ends the process once the time limit and :data:`GRACE_S` have passed, printing
the refusal the query's own stop would have printed; and once a Ctrl-C (or SIGTERM) has gone
unanswered for :data:`SIGNAL_GRACE_S`, with the message and status of any interrupted command. A
query only reads, so nothing is half-written (docs/concepts.md).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from typing import Iterable, Iterator

from ledger import LedgerError
from ledger.ground import errors as E, interrupts

from .entry import INTERRUPTED

#: How long past its time limit a query may go on before the command ends: the database stops a query
#: at its next step, which comes well within this unless one function call holds it.
GRACE_S = 2.0
#: How long a Ctrl-C (or SIGTERM) may go unanswered while the command waits on the query.
SIGNAL_GRACE_S = 0.5


class QueryDeadline:
    """``with QueryDeadline(timeout_s) as deadline:`` around opening the query, and its rows read
    through :meth:`rows`: the time spent printing them does not count. With ``started=False`` the
    time starts at :meth:`restart` (once a lock the query waits for is held)."""

    def __init__(self, timeout_s: float, *, started: bool = True) -> None:
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        #: When the command began waiting on the query (None: it is printing a row, or ``started`` was
        #: False and :meth:`restart` has not been called: the query has not begun).
        self.waiting_since: float | None = time.monotonic() if started else None
        self._done = threading.Event()
        self._wakeup: tuple[int, int] | None = None
        self._previous_wakeup = -1

    def __enter__(self) -> "QueryDeadline":
        if threading.current_thread() is threading.main_thread():
            read, write = os.pipe()
            os.set_blocking(write, False)
            self._wakeup = (read, write)
            self._previous_wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, name="query-deadline", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._wakeup is not None:
            signal.set_wakeup_fd(self._previous_wakeup)
            os.close(self._wakeup[1])  # the watcher closes the read end as it stops

    def restart(self) -> None:
        """Count the time limit from now."""
        self.deadline = time.monotonic() + self.timeout_s
        self.waiting_since = time.monotonic()

    def rows(self, rows: Iterable[tuple]) -> Iterator[tuple]:
        """``rows``, marking the time spent waiting on each."""
        source = iter(rows)
        while True:
            self.waiting_since = time.monotonic()
            try:
                row = next(source)
            except StopIteration:
                return
            finally:
                self.waiting_since = None
            yield row

    def _watch(self) -> None:
        signalled: tuple[int, float] | None = None
        try:
            while not self._done.is_set():
                got = self._signal_within(0.1)
                if got is not None and signalled is None:
                    signalled = (got, time.monotonic())
                since, now = self.waiting_since, time.monotonic()
                if since is None:
                    signalled = None  # the command is its own again: it answers the signal itself
                elif signalled is not None and now > max(signalled[1], since) + SIGNAL_GRACE_S:
                    self._end(INTERRUPTED, 128 + signalled[0])
                elif now > max(self.deadline, since) + GRACE_S:
                    refusal = LedgerError(E.INVALID_ARGUMENT, (
                        f"query stopped at its time limit, {self.timeout_s:g} s (--timeout SECONDS): one call of a "
                        f"function in it ran on past the limit, so the command ended; nothing was written"))
                    self._end(f"error: {refusal}", 1)
        finally:
            if self._wakeup is not None:
                os.close(self._wakeup[0])

    def _signal_within(self, seconds: float) -> int | None:
        """The number of a signal that interrupts a command (a SIGINT, say) that arrived within ``seconds``,
        else None."""
        if self._wakeup is None:
            self._done.wait(seconds)
            return None
        ready, _, _ = select.select([self._wakeup[0]], [], [], seconds)
        if not ready:
            return None
        try:
            numbers = os.read(self._wakeup[0], 64)
        except OSError:
            return None
        return next((number for number in numbers if number in interrupts.INTERRUPTING), None)

    @staticmethod
    def _end(line: str, status: int) -> None:
        try:
            sys.stdout.flush()  # the rows printed so far
        except Exception:
            pass
        try:
            sys.stderr.write(f"{line}\n")
            sys.stderr.flush()
        finally:
            os._exit(status)
