"""Ctrl-C that reached a callback: remembered, so that it still ends the command.

Python raises ``KeyboardInterrupt`` wherever its code happens to run when SIGINT arrives; when
that is inside a callback SQLite calls (a read-only connection's authorizer, a progress
handler), ``sqlite3`` swallows the exception and turns it into a denial ("not authorized") or an
interrupted statement, which read as a damaged case. Inside :func:`recorded` (the ``ledger``
command runs in it), every SIGINT is also recorded here, and :func:`pending` tells the code that
translates such an error that it is an interrupt.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType
from typing import Iterator

_received = threading.Event()


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    _received.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def recorded() -> Iterator[None]:
    """Within the block, record every SIGINT (and still raise ``KeyboardInterrupt``), when Python's
    own handler is in place in the main thread (another handler a caller installed is left alone);
    Python's handler is put back after it."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    _received.clear()
    signal.signal(signal.SIGINT, _on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _received.clear()


@contextlib.contextmanager
def python_handler() -> Iterator[None]:
    """Within the block, Python's own SIGINT handler again (where :func:`recorded` put its own): an
    ``asyncio`` loop (``ledger serve``) stops on Ctrl-C by cancelling its task only under that one,
    and otherwise meets ``KeyboardInterrupt`` wherever it happens to run, which can leave it hung."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not _on_interrupt:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, _on_interrupt)


def pending() -> bool:
    """Whether a SIGINT arrived within :func:`recorded`."""
    return _received.is_set()
