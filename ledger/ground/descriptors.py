"""Closing a file without dropping SQLite's locks on it (docs/reliability.md).

A POSIX record lock belongs to the process and the file, not to the descriptor it was taken
through: closing *any* descriptor of a file drops every lock the process holds on it. SQLite's
own descriptors are safe (it keeps one open until its last connection to the file closes), but a
descriptor the ledger opens itself on a file a connection of this process has open (the header
the cut-short check reads, a hard link to the ledger the router is asked to read) would, once
closed, drop that connection's shared lock on a WAL ledger. Another process closing what it then
takes for the last connection deletes the ``-wal`` and ``-shm``, and this process's later commits
go to the deleted log: lost. So every connection the ledger opens is held here by its file
(:func:`hold_file`), and every descriptor the ledger opens on a file is closed through
:func:`close_descriptor`, which keeps one of a held file open until the last connection to the
file closes.
"""

from __future__ import annotations

import io
import os
import threading
from typing import Callable

#: Reentrant: a connection freed by the garbage collector lets go of its file (a finalizer) wherever
#: the collector runs, possibly inside a block holding the guard in the same thread.
_GUARD = threading.RLock()
#: (device, inode) of each file a connection of this process holds, with how many connections.
_HELD: dict[tuple[int, int], int] = {}
#: Descriptors :func:`close_descriptor` was given for a held file, closed when it is let go.
_PARKED: dict[tuple[int, int], list[int]] = {}


def hold_file(path: str | os.PathLike[str]) -> Callable[[], None]:
    """Note that a connection of this process has the file ``path`` open, before it reads (and so
    locks) anything; returns the call that lets it go (idempotent: once is enough, more is harmless).
    A file that cannot be looked at is not held (the connection then reads nothing either)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return lambda: None
    key = (info.st_dev, info.st_ino)
    with _GUARD:
        _HELD[key] = _HELD.get(key, 0) + 1
    released = threading.Event()

    def release() -> None:
        with _GUARD:
            if released.is_set():
                return
            released.set()
            left = _HELD.get(key, 1) - 1
            if left:
                _HELD[key] = left
                return
            del _HELD[key]
            parked = _PARKED.pop(key, [])
        for fd in parked:
            _close_quietly(fd)

    return release


def close_descriptor(fd: int) -> None:
    """Close ``fd``, or keep it open until no connection of this process holds its file any more
    (:func:`hold_file`), whichever keeps their locks. The check and the close happen under the same
    guard a connection is held under, so no connection is held between them."""
    try:
        info = os.fstat(fd)
    except OSError:
        _close_quietly(fd)
        return
    key = (info.st_dev, info.st_ino)
    with _GUARD:
        if key in _HELD:
            _PARKED.setdefault(key, []).append(fd)
            return
        _close_quietly(fd)


def is_held(info: os.stat_result) -> bool:
    """Whether a connection of this process holds the file ``info`` describes (an ``os.stat`` or
    ``os.fstat`` of it): a caller that only looks at it (the cut-short check) may then leave it
    unopened, so that descriptors kept open do not pile up while the connection stays open."""
    with _GUARD:
        return (info.st_dev, info.st_ino) in _HELD


def read_start(path: str | os.PathLike[str], count: int) -> tuple[int, bytes]:
    """``(size, its first count bytes)`` of the file ``path``, read through the descriptor kept for it
    when there is one (:func:`close_descriptor`), else through one opened and closed (kept when a
    connection holds the file): looking again and again at a held file keeps one descriptor open,
    not one per look. ``OSError`` as ``os.open`` and ``os.pread`` raise it."""
    info = os.stat(path)
    with _GUARD:
        kept = _PARKED.get((info.st_dev, info.st_ino))
        if kept:
            return os.fstat(kept[0]).st_size, os.pread(kept[0], count, 0)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        return os.fstat(fd).st_size, os.pread(fd, count, 0)
    finally:
        close_descriptor(fd)


def held_files() -> int:
    """How many distinct files connections of this process hold (for tests)."""
    with _GUARD:
        return len(_HELD)


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class _RawFile(io.FileIO):
    """A read-only file over a descriptor it does not close itself: its close goes through
    :func:`close_descriptor`."""

    def close(self) -> None:
        if self.closed:
            return
        fd = self.fileno()
        super().close()
        close_descriptor(fd)


def file_over(fd: int) -> io.BufferedReader:
    """A buffered binary file reading ``fd``, closed (``with``, ``close()``) through
    :func:`close_descriptor`; it owns ``fd`` from here on."""
    return io.BufferedReader(_RawFile(fd, "rb", closefd=False))


def open_to_read(path: str | os.PathLike[str]) -> io.BufferedReader:
    """The file ``path`` opened to read in binary, as ``open(path, "rb")`` opens it (the same
    ``OSError``), closed through :func:`close_descriptor`: a file named by the user may be the
    ledger itself, or a hard link to it."""
    return file_over(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
