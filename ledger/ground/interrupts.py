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
import functools
import os
import signal
import threading
from types import FrameType
from typing import Any, Callable, Iterable, Iterator

_received = threading.Event()
#: The signal that last interrupted the command (one of :data:`INTERRUPTING`).
_last_signal = [int(signal.SIGINT)]
#: The signals that interrupt a ``ledger`` command: Ctrl-C (SIGINT), SIGTERM, and SIGHUP (a terminal
#: closed, an ssh session dropped) where the system has it.
HANGUP = getattr(signal, "SIGHUP", None)
INTERRUPTING = (signal.SIGINT, signal.SIGTERM) + ((HANGUP,) if HANGUP is not None else ())


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    _last_signal[0] = signum
    _received.set()
    raise KeyboardInterrupt


def context_manager(function: Callable[..., Iterator[Any]]) -> Callable[..., contextlib.AbstractContextManager[Any]]:
    """:func:`contextlib.contextmanager`, except that an exception landing as the block is entered,
    after the generator yielded and before the ``with`` holds it (a Ctrl-C, a caller's timeout raised
    by its signal handler), ends the generator there, as if the block had raised it: left, what it set
    up (a snapshot, a signal handler, a lock) stayed in place until the generator was collected, which
    an exception keeping its frames alive puts off. The library's context managers are made with it."""
    made = contextlib.contextmanager(function)

    @functools.wraps(function)
    def manager(*args: Any, **kwargs: Any) -> _Entered:
        return _Entered(made(*args, **kwargs))
    return manager


class _Entered(contextlib.AbstractContextManager):  # type: ignore[type-arg]
    __slots__ = ("inner",)

    def __init__(self, inner: contextlib.AbstractContextManager[Any]) -> None:
        self.inner = inner

    def __enter__(self) -> Any:
        try:
            return self.inner.__enter__()
        except BaseException as exc:  # noqa: BLE001 - raised on; a generator that raised it is over already
            self.inner.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool | None:
        return self.inner.__exit__(kind, value, traceback)


def ending() -> None:
    """The ``ledger`` process ends because it was interrupted: a SIGINT or SIGTERM from now on is
    ignored (a second Ctrl-C while it exits raised ``KeyboardInterrupt`` in the interpreter's shutdown,
    a traceback, or ended it by the signal itself), and :func:`recorded` leaves them so. Only in the
    process the ``ledger`` command started (:func:`ends_process`), in its main thread: a caller running
    the command line in its own process keeps its handlers."""
    if not _ending[0] or threading.current_thread() is not threading.main_thread():
        return
    _ending[1] = True
    for number in INTERRUPTING:
        signal.signal(number, signal.SIG_IGN)


def ends_process() -> None:
    """Called first by the ``ledger`` command's entry point: the process ends with the command. From
    now on a SIGINT or SIGTERM (where each still has Python's handler or the default action)
    interrupts it as within :func:`recorded`, while the command line loads too (a SIGTERM then
    ended the process at once, without a word); once the command is over they are ignored (the
    process is about to exit with the command's own status: one arriving then ended it by the
    signal, without a word, or not at all)."""
    _ending[0] = True
    if threading.current_thread() is threading.main_thread():
        for number, before in _DEFAULT_HANDLERS:
            if signal.getsignal(number) == before:
                signal.signal(number, _on_interrupt)


#: ``[this process ends with the command, signals are ignored now]``.
_ending = [False, False]
#: Each signal taken, with the handler it has unless a caller set another: Python's own, the default action.
_DEFAULT_HANDLERS = ((signal.SIGINT, signal.default_int_handler),
                     *((number, signal.SIG_DFL) for number in INTERRUPTING if number != signal.SIGINT))


def exit_status() -> int:
    """The exit status of a command the last signal interrupted: 128 + its number (130 for Ctrl-C,
    143 for SIGTERM, 129 for SIGHUP, as a shell reports a process that signal ended)."""
    return 128 + _last_signal[0]


def restore_all(steps: Iterable[Callable[[], Any]]) -> None:
    """Run every one of ``steps`` (each quick, and harmless to run twice), each again if an exception
    lands in it (a Ctrl-C, a caller's timeout raised by its signal handler), then raise the first
    such exception: a clean-up cut short would leave a connection or a signal handler changed for
    the rest of the process."""
    first: BaseException | None = None
    for step in steps:
        for _ in range(100):  # a signal every few microseconds for ever would otherwise never let it end
            try:
                step()
                break
            except BaseException as exc:  # noqa: BLE001 - raised once every step is done
                first = first or exc
    if first is not None:
        raise first


@context_manager
def recorded() -> Iterator[None]:
    """Within the block, record every SIGINT (and still raise ``KeyboardInterrupt``), when Python's
    own handler is in place in the main thread (another handler a caller installed is left alone);
    Python's handler is put back after it. SIGTERM (what ``timeout``, a CI runner or a service
    manager sends) and SIGHUP (a terminal closed; ``nohup`` ignores it), when each has its default
    action, are taken the same way: the command ends as after Ctrl-C, its workers stopped and nothing
    half-written, not killed where it stood."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # each signal still at Python's own handler or the default action (a background job of a
    # script starts with SIGINT ignored: SIGTERM is still taken), or taken by ends_process already
    taken = {number: before for number, before in _DEFAULT_HANDLERS
             if signal.getsignal(number) in (before, _on_interrupt)}
    _received.clear()
    _last_signal[0] = int(signal.SIGINT)
    try:
        for number in taken:
            signal.signal(number, _on_interrupt)
        yield
    finally:
        after = {number: signal.SIG_IGN if _ending[0] else before for number, before in taken.items()}
        restore_all([lambda number=number, handler=handler: signal.signal(number, handler)  # the command is over
                     for number, handler in (after.items() if not _ending[1] else ())])
        _received.clear()


@context_manager
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


@context_manager
def deferred() -> Iterator[list[Any]]:
    """In the main thread: a SIGINT (or SIGTERM) arriving inside is handled (as it would have been)
    at the end, so that what the block does (a commit and its count, a wait for workers) is never cut
    in two. Yields the list of ``(signal, frame)`` caught so far (empty until one comes; in another
    thread, always), for a block that ends early once one came."""
    caught: list[Any] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    # a handler not set from Python (None) is left alone
    numbers = [number for number in INTERRUPTING if signal.getsignal(number) is not None]
    handlers: dict[int, Any] = {}
    try:  # each handler is put back whatever lands while they are set (a caller's timeout): left, it
        for number in numbers:  # took every later Ctrl-C or SIGTERM of the process into a list nobody reads
            handlers[number] = signal.getsignal(number)
            signal.signal(number, lambda got, frame: caught.append((got, frame)))
        yield caught
    finally:
        restore_all([lambda number=number, handler=handler: signal.signal(number, handler)
                     for number, handler in handlers.items()])
        if caught:
            number, frame = caught[0]
            if callable(handlers[number]):
                handlers[number](number, frame)
            elif handlers[number] == signal.SIG_DFL:
                os.kill(os.getpid(), number)


def pending() -> bool:
    """Whether a SIGINT (or SIGTERM) arrived within :func:`recorded`."""
    return _received.is_set()
