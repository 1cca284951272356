"""A query's ``--timeout`` (``ledger sql``, ``ledger fleet sql``) kept even when one call of a
function in it runs past the limit.

SQLite and DuckDB stop a query between the steps of its work; one call of a function (SQLite's
``printf('%.*c', 2000000000, 'x')``, DuckDB's ``levenshtein`` of two long texts) is one step and runs
to its end, however long. While the command waits on the query, a watcher ends the process once the
time limit and :data:`GRACE_S` have passed, printing the refusal the query's own stop would have
printed. A query only reads, so nothing is half-written (docs/cli.md).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Iterable, Iterator

from ledger import LedgerError
from ledger.ground import errors as E

#: How long past its time limit a query may go on before the command ends: the database stops a query
#: at its next step, which comes well within this unless one function call holds it.
GRACE_S = 2.0


class QueryDeadline:
    """``with QueryDeadline(timeout_s) as deadline:`` around opening the query, and its rows read
    through :meth:`rows`: the time spent printing them does not count."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        #: When the command began waiting on the query (None: it is printing a row).
        self.waiting_since: float | None = time.monotonic()
        self._done = threading.Event()

    def __enter__(self) -> "QueryDeadline":
        threading.Thread(target=self._watch, name="query-deadline", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

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
        while not self._done.wait(0.1):
            since = self.waiting_since
            if since is not None and time.monotonic() > max(self.deadline, since) + GRACE_S:
                self._end()

    def _end(self) -> None:
        refusal = LedgerError(E.INVALID_ARGUMENT, (
            f"query stopped at its time limit, {self.timeout_s:g} s (--timeout SECONDS): one call of a function "
            f"in it ran on past the limit, so the command ended; nothing was written"))
        try:
            sys.stdout.flush()  # the rows printed so far
        except Exception:
            pass
        try:
            sys.stderr.write(f"error: {refusal}\n")
            sys.stderr.flush()
        finally:
            os._exit(1)
