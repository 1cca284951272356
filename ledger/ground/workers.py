"""How worker processes start (simulate, verify/export of several cases, the fleet export)."""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext


def worker_context() -> BaseContext:
    """``spawn``: a fresh interpreter per worker. Never ``fork``: forking a process that runs
    threads of its own (a database client, a web server) can leave a child waiting on a lock no
    thread of it will release (docs/architecture.md)."""
    return multiprocessing.get_context("spawn")
