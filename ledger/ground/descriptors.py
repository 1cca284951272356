"""Closing a file without dropping SQLite's locks on it (docs/reliability.md).

A POSIX record lock belongs to the process and the file, not to the descriptor it was taken
through: closing *any* descriptor of a file drops every lock the process holds on it. SQLite's
own descriptors are safe (it keeps one open until its last connection to the file closes), but a
descriptor the ledger opens itself on a file a connection of this process has open (the header
the cut-short check reads, a hard link to the ledger the router is asked to read) would, once
closed, drop that connection's shared lock on a WAL ledger (or its lock on the ``-shm``). Another
process closing what it then takes for the last connection deletes the ``-wal`` and ``-shm``, and
this process's later commits go to the deleted log: lost. So every connection the ledger opens is
held here by its file (:func:`hold_file`); a file a connection holds (the ledger or its ``-shm``)
is refused before it is opened where it is only to be read (:func:`refuse_held`), read through a
descriptor kept for it where it must be looked at (:func:`read_start`), and every descriptor the
ledger opens on a file is closed through :func:`close_descriptor`, which keeps one of a held file
open until the last connection to the file closes.

A forked child inherits SQLite's record of the parent's locks but not the locks: a connection it
opens to a file the parent held takes no lock at all (SQLite believes the process has one), and
the parent's close then deletes the log under it. :func:`refuse_inherited` refuses that.
"""

from __future__ import annotations

import errno
import io
import os
import threading
from typing import Callable

from .errors import INVALID_ARGUMENT, LedgerError, pass_on_interruption

#: A file, as ``(st_dev, st_ino)``.
Key = tuple[int, int]
#: Reentrant: a connection freed by the garbage collector lets go of its file (a finalizer) wherever
#: the collector runs, possibly inside a block holding the guard in the same thread.
_GUARD = threading.RLock()
#: (device, inode) of each file a connection of this process holds, with how many connections.
_HELD: dict[Key, int] = {}
#: The path each held file was held by (its ``-shm`` is found beside it).
_PATHS: dict[Key, str] = {}
#: Descriptors :func:`close_descriptor` was given for a held file (or its ``-shm``), by the held
#: file's key, each with the key of the file it is a descriptor of; closed when it is let go.
_PARKED: dict[Key, list[tuple[int, Key]]] = {}
#: The ``-shm`` of each held file, once it was seen (:func:`_holder`).
_SHM: dict[Key, Key] = {}
#: Files connections of a process this one was forked from held at the fork.
_INHERITED: set[Key] = set()


def _key(info: os.stat_result) -> Key:
    return info.st_dev, info.st_ino


def hold_file(path: str | os.PathLike[str]) -> Callable[[], None]:
    """Note that a connection of this process has the file ``path`` open, before it reads (and so
    locks) anything; returns the call that lets it go (idempotent: once is enough, more is harmless).
    A file that cannot be looked at is not held (the connection then reads nothing either)."""
    try:
        key = _key(os.stat(path))
    except (OSError, ValueError) as oserr:
        pass_on_interruption(oserr)
        return lambda: None
    with _GUARD:
        _HELD[key] = _HELD.get(key, 0) + 1
        _PATHS.setdefault(key, os.fsdecode(path))
    released = []

    def release() -> None:
        with _GUARD:  # the kept descriptors are closed under the guard: no connection is held meanwhile
            if released:
                return
            released.append(True)
            left = _HELD.get(key, 1) - 1
            if left:
                _HELD[key] = left
                return
            _HELD.pop(key, None)
            _PATHS.pop(key, None)
            _SHM.pop(key, None)
            for fd, _ in _PARKED.pop(key, []):
                _close_quietly(fd)

    return release


def _holder(key: Key) -> Key | None:
    """The held file ``key`` is, or whose ``-shm`` it is (None: neither). Under the guard. A held
    ledger's ``-shm`` is looked for until found, then remembered: it stays the same file while a
    connection holds the ledger (SQLite removes it only with the last one)."""
    if key in _HELD:
        return key
    for held, path in _PATHS.items():
        if held not in _SHM:
            try:
                _SHM[held] = _key(os.stat(path + "-shm"))
            except OSError as oserr:
                pass_on_interruption(oserr)
                continue
        if _SHM[held] == key:
            return held
    return None


def close_descriptor(fd: int) -> None:
    """Close ``fd``, or keep it open until no connection of this process holds its file (or the
    database whose ``-shm`` it is) any more, whichever keeps their locks. The check and the close
    happen under the same guard a connection is held under, so no connection is held between them."""
    try:
        key = _key(os.fstat(fd))
    except OSError as oserr:
        _close_quietly(fd)
        pass_on_interruption(oserr)
        return
    with _GUARD:
        holder = _holder(key)
        if holder is not None:
            _PARKED.setdefault(holder, []).append((fd, key))
            return
        _close_quietly(fd)


def is_held(info: os.stat_result, *, shm: bool = True) -> bool:
    """Whether a connection of this process holds the file ``info`` describes (an ``os.stat`` or
    ``os.fstat`` of it), or (unless ``shm`` is False) it is the ``-shm`` of one that is held."""
    with _GUARD:
        return _holder(_key(info)) is not None if shm else _key(info) in _HELD


def refuse_held(path: str | os.PathLike[str]) -> None:
    """``OSError`` (``EBUSY``) when ``path`` is a file a connection of this process holds, or its
    ``-shm`` (a hard link to it, or its own name given where a file to read was asked for): it is
    read by no one but SQLite, and a descriptor of it could be closed only once its connections
    are, so each read would keep one more open. Nothing when it cannot be looked at (opening it
    says why)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError) as oserr:
        pass_on_interruption(oserr)
        return
    if is_held(info):
        raise OSError(errno.EBUSY, "it is the file of a ledger open in this process (or a hard link to it), "
                      "which only SQLite reads", os.fsdecode(path))


def read_start(path: str | os.PathLike[str], count: int) -> tuple[int, bytes]:
    """``(size, its first count bytes)`` of the file ``path``, read through the descriptor kept for it
    when there is one (:func:`close_descriptor`), else through one opened and closed (kept when a
    connection holds the file): looking again and again at a held file keeps one descriptor open,
    not one per look. ``OSError`` as ``os.open`` and ``os.pread`` raise it."""
    key = _key(os.stat(path))
    with _GUARD:
        holder = _holder(key)
        kept = [fd for fd, of in _PARKED.get(holder, ()) if of == key] if holder is not None else []
        if kept:
            return os.fstat(kept[0]).st_size, os.pread(kept[0], count, 0)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        return os.fstat(fd).st_size, os.pread(fd, count, 0)
    finally:
        close_descriptor(fd)


def refuse_inherited(path: str | os.PathLike[str]) -> None:
    """``INVALID_ARGUMENT`` when this process was forked from one whose connection held the file
    ``path`` then (:func:`hold_file`): SQLite here still counts the parent's locks as its own, so a
    connection opened now would take none, and the parent's close would delete the log under it."""
    if not _INHERITED:
        return
    try:
        key = _key(os.stat(path))
    except (OSError, ValueError) as oserr:
        pass_on_interruption(oserr)
        return
    if key in _INHERITED:
        raise LedgerError(INVALID_ARGUMENT, f"{os.fsdecode(path)}: this process was forked from one that had this "
                          "ledger open, and SQLite, which keeps its locks per process, cannot lock it from here (the "
                          "record of the parent's locks came along, the locks did not): start this process with "
                          "'spawn' (multiprocessing.get_context(\"spawn\"), or a new interpreter), or fork before "
                          "the case is opened", path=os.fsdecode(path))


def held_files() -> int:
    """How many distinct files connections of this process hold (for tests)."""
    with _GUARD:
        return len(_HELD)


def _after_fork_in_child() -> None:
    """The files the parent held are the child's to refuse (:func:`refuse_inherited`); it holds none
    itself, and the parent's kept descriptors are left to the child's exit."""
    global _GUARD
    _GUARD = threading.RLock()  # the parent's may have been taken by a thread that does not exist here
    _INHERITED.update(_HELD)
    _HELD.clear()
    _PATHS.clear()
    _SHM.clear()
    _PARKED.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError as oserr:
        pass_on_interruption(oserr)


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
    ``OSError``), closed through :func:`close_descriptor`; ``OSError`` (``EBUSY``) for a file a
    connection of this process holds (:func:`refuse_held`): a file named by the user may be the
    ledger itself, or a hard link to it."""
    refuse_held(path)
    return file_over(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
