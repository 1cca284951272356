"""The writer queue: a blocking ``flock`` on a sidecar file, waited for in the kernel with a deadline.

SQLite's busy handler sleeps and re-polls, so one process writing flat-out can
starve another past its timeout; waiting in ``flock`` instead queues writers
fairly. The same lock also serializes exports of one package.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path
from typing import Any

from . import errors as E
from .errors import LedgerError


class WriterLock:
    """Exclusive ``flock`` on ``ledger.sqlite-lock``, waited for in the kernel with a deadline.

    An uncontended acquire is one non-blocking ``flock``. Under contention a helper
    thread blocks in ``flock`` (the kernel wakes waiters as soon as the lock is
    released, instead of SQLite's sleep-and-poll) while the caller waits at most
    ``timeout_ms``; a thread that wins after its caller gave up releases at once.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def _open(self) -> int:
        """The lock file, never through a symbolic link (``INVALID_ARGUMENT`` naming it)."""
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LedgerError(E.INVALID_ARGUMENT, f"{self.path} is a symbolic link where the case package keeps "
                                  "its lock file; the ledger never writes through a link (remove it)",
                                  path=str(self.path)) from None
            raise

    def acquire(self, timeout_ms: int) -> int:
        """Return a locked file descriptor, or raise ``LEDGER_BUSY`` after ``timeout_ms``."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            os.close(fd)
        except BaseException:
            os.close(fd)
            raise
        return self._wait(timeout_ms)

    def _wait(self, timeout_ms: int) -> int:
        cond = threading.Condition()
        box: dict[str, Any] = {"fd": None, "abandoned": False, "error": None}

        def waiter() -> None:
            try:
                fd = self._open()
                fcntl.flock(fd, fcntl.LOCK_EX)
            except (OSError, LedgerError) as exc:  # a link put in its place meanwhile is refused, not waited on
                with cond:
                    box["error"] = exc
                    cond.notify()
                return
            with cond:
                if box["abandoned"]:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
                    return
                box["fd"] = fd
                cond.notify()

        threading.Thread(target=waiter, name="ledger-writer-lock", daemon=True).start()
        with cond:
            try:
                cond.wait_for(lambda: box["fd"] is not None or box["error"] is not None,
                              timeout_ms / 1000)
            finally:
                if box["fd"] is None:
                    box["abandoned"] = True
            if isinstance(box["error"], LedgerError):
                raise box["error"]
            if box["error"] is not None:
                raise LedgerError(E.LEDGER_BUSY, f"cannot lock {self.path}: {box['error']}")
            if box["fd"] is None:
                raise LedgerError(
                    E.LEDGER_BUSY, f"another writer held the case for more than {timeout_ms} ms; retry",
                    busy_timeout_ms=timeout_ms,
                )
            return box["fd"]

    @staticmethod
    def release(fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


