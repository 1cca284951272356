"""The writer queue: a blocking ``flock`` on a sidecar file, waited for in the kernel with a deadline.

SQLite's busy handler sleeps and re-polls, so one process writing flat-out can
starve another past its timeout; waiting in ``flock`` instead queues writers
fairly. The same lock also serializes exports of one package.

The lock is held through a Python file object, owned by the :class:`WriterLock`
(``held``) from the moment ``flock`` succeeds: :meth:`WriterLock.release` drops
whatever is held or being handed over, so an exception at any point of an
acquisition (``KeyboardInterrupt`` included) leaves no lock behind once the
caller's ``finally`` ran; a file object nobody references any more is closed
(and so unlocked) by the interpreter as a last resort.

Between its operations a writer keeps the lock file open, unlocked (``LOCK_UN``), so that an
uncontended acquire is one ``flock`` and one ``lstat`` instead of an open and a close per
operation. A lock counts as held only once the path is seen to name the locked file (same device
and inode, not a link) *after* the ``flock``: a file replaced or removed before that is dropped
(unlocked) and the path opened again (so a link put in its place is refused as before), and no
replacement can slip between the check and the lock. Every failure inside an acquire closes the kept file, which releases whatever it held.
A forked child never uses (nor unlocks) a kept file it inherited: the open file, and so its
lock, is the parent's; the child closes its copy and opens the path anew.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading
import time
import weakref
from pathlib import Path
from typing import Any, BinaryIO, Callable

from ..ground import errors as E
from ..ground.descriptors import close_descriptor, refuse_held
from ..ground.errors import LedgerError, pass_on_interruption
from ..ground.paths import file_kind


#: Forks this process has come from: a kept lock file opened under another count is a parent's.
_forks = 0


def _forked() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_forked)


def fork_count() -> int:
    """Forks this process has come from: an object that noted another count was made by an ancestor."""
    return _forks


#: The lock files held in this process, by (device, inode): the holder (weakly: a holder dropped
#: unreleased lets its file go when collected), its thread (weakly too: a later thread may get a dead
#: one's ident) and the fork count then. A thread that waits for a lock it holds itself (through another
#: Case of the same ledger) would wait in vain: :meth:`WriterLock.acquire` refuses that at once.
_HOLDERS: dict[tuple[int, int], tuple[weakref.ref[WriterLock], weakref.ref[threading.Thread], int]] = {}

#: Locks taken of files the path no longer named before a non-blocking try gives up and waits.
_RETRIES = 8
#: How often a wait given a ``stop`` looks at it (:meth:`WriterLock.acquire`).
STOP_CHECK_S = 0.2


def _names(path: Path, identity: tuple[int, int] | None) -> bool:
    """True when ``path`` itself (not a link) is the file of ``identity`` (device, inode)."""
    try:
        info = os.lstat(path)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False  # gone or unreadable: open the path again, which says why it cannot
    return (info.st_dev, info.st_ino) == identity


class WriterLock:
    """Exclusive ``flock`` on ``ledger.sqlite-lock``, waited for in the kernel with a deadline.

    An uncontended acquire is one non-blocking ``flock``. Under contention a helper
    thread blocks in ``flock`` (the kernel wakes waiters as soon as the lock is
    released, instead of SQLite's sleep-and-poll) while the caller waits at most
    ``timeout_ms``; a lock the helper wins after its caller gave up is released
    at once. Use as ``try: lock.acquire(t) … finally: lock.release()``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        #: The locked file while this object holds the lock, else None.
        self.held: BinaryIO | None = None
        self._guard = threading.Lock()  # the hand-over from the helper thread (:meth:`_guarded`)
        self._guard_fork = _forks
        self._pending: dict[str, Any] | None = None
        #: The lock file kept open (unlocked) between acquisitions, and its (device, inode).
        self._kept: BinaryIO | None = None
        self._kept_id: tuple[int, int] | None = None
        self._kept_fork = _forks
        #: The (device, inode) of the file held, noted in :data:`_HOLDERS` while it is.
        self._held_id: tuple[int, int] | None = None

    def _note_held(self, identity: tuple[int, int] | None) -> None:
        """Note in :data:`_HOLDERS` that this thread holds the lock file ``identity``."""
        self._held_id = identity
        if identity is not None:
            _HOLDERS[identity] = (weakref.ref(self), weakref.ref(threading.current_thread()), _forks)

    def _refuse_waiting_on_itself(self) -> None:
        """``INVALID_ARGUMENT`` when the lock this object waits for is held by this very thread (another
        object of the same ledger: a ``batch()`` of another Case): the wait could only time out."""
        entry = _HOLDERS.get(self._kept_id) if self._kept_id is not None else None
        holder = entry[0]() if entry is not None else None
        if holder is not None and holder.held is not None and entry[1]() is threading.current_thread() \
                and entry[2] == _forks:  # the thread itself, not a later one given a dead one's ident
            raise LedgerError(E.INVALID_ARGUMENT, "this thread already holds this case's writer lock through "
                              "another Case open on the same ledger (inside its batch(), say), so waiting for it "
                              "would never end: write through that Case, or end its batch first",
                              path=str(self.path))

    def _open(self) -> BinaryIO:
        """The lock file, never through a symbolic link (``INVALID_ARGUMENT`` naming it) nor anything but
        a regular file (``STORAGE_ERROR`` naming what is there: a folder, a pipe, a socket, a device)."""
        # open()'s opener hands the descriptor straight to the file object: an interrupt
        # can never fall between the two and leave a descriptor nobody closes
        try:
            refuse_held(self.path)  # a hard link to a ledger open here: closing it would drop that ledger's locks
            handle = open(self.path, "r+b", buffering=0, opener=lambda path, _flags: os.open(
                path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644))
        except OSError as oserr:
            pass_on_interruption(oserr)
            self._refuse_kind()
            raise
        try:
            mode = os.fstat(handle.fileno()).st_mode
        except BaseException:
            handle.close()
            raise
        if not stat.S_ISREG(mode):
            handle.close()
            self._refuse_kind(mode)
        return handle

    def check_path(self) -> None:
        """Refuse what opening the lock file would refuse, without making anything: a link, anything but
        a regular file, a file that cannot be opened for writing (``OSError``). A case is created only
        where its lock file can be one, so a refused creation leaves nothing behind."""
        if self._refuse_kind() is None:
            return  # none there (or none this user may look at): a new one is made beside the new ledger
        refuse_held(self.path)
        handle = os.open(self.path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        close_descriptor(handle)

    def _refuse_kind(self, mode: int | None = None) -> int | None:
        """The mode of the lock path (``lstat``'s unless given; None when there is nothing to look at),
        once seen to be a regular file: a link is ``INVALID_ARGUMENT``, anything else ``STORAGE_ERROR``."""
        if mode is None:
            try:
                mode = os.lstat(self.path).st_mode
            except OSError as oserr:
                pass_on_interruption(oserr)
                return None
        if stat.S_ISLNK(mode):
            raise LedgerError(E.INVALID_ARGUMENT, f"{self.path} is a symbolic link where the case package keeps "
                              "its lock file; the ledger never writes through a link (remove it)",
                              path=str(self.path)) from None
        if not stat.S_ISREG(mode):
            raise LedgerError(E.STORAGE_ERROR, f"{self.path} is {file_kind(mode)}, not a file, where the case "
                              "package keeps its lock file; move it aside, then run this again",
                              path=str(self.path)) from None
        return mode

    @property
    def locked(self) -> bool:
        """True while this object holds the lock."""
        return self.held is not None

    def acquire(self, timeout_ms: int, stop: Callable[[], bool] | None = None) -> None:
        """Take the lock (``held``), or raise ``LEDGER_BUSY`` after ``timeout_ms``; a path that cannot
        be opened raises what opening it raised (``OSError``; a link: ``INVALID_ARGUMENT``). ``stop``,
        if given, is looked at every :data:`STOP_CHECK_S` while waiting: once it answers True the wait
        ends with ``LEDGER_BUSY`` whose details hold ``stopped`` (a worker process whose caller is
        stopping, which no signal reaches).

        Anything left held by an interrupted earlier call is released first.
        """
        if not self.try_acquire():
            self._refuse_waiting_on_itself()
            self._wait(timeout_ms, stop)

    def try_acquire(self) -> bool:
        """Take the lock only if it is free right now; True when taken (then ``release()`` it)."""
        self.release()
        for _ in range(_RETRIES):
            handle = self._reopened()
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # the file stays kept (unlocked) for the next try
            except BaseException:
                self.held = None
                self.close()
                raise
            self.held = handle
            if _names(self.path, self._kept_id):
                self._note_held(self._kept_id)
                return True
            self.close()  # locked a file the path no longer names: drop it, lock what it names
        return False  # the path keeps being replaced: wait in the kernel like any contended writer

    def _reopened(self) -> BinaryIO:
        """The kept lock file, else the path opened (and kept) anew; whether the path still names
        it is checked once it is locked (:func:`_names`), so no replacement can fall in between."""
        kept = self._kept
        if kept is not None and self._kept_fork == _forks:
            return kept
        if kept is not None:
            self.close()  # inherited across a fork: closing this copy leaves the parent's lock alone
        handle = self._open()
        try:
            info = os.fstat(handle.fileno())
        except BaseException:
            handle.close()
            raise
        self._kept, self._kept_id, self._kept_fork = handle, (info.st_dev, info.st_ino), _forks
        return handle

    def close(self) -> None:
        """Release the lock and close the kept lock file (the owner is closing)."""
        self.release()
        kept, self._kept, self._kept_id = self._kept, None, None
        if kept is not None:
            kept.close()

    def _guarded(self) -> threading.Lock:
        """The hand-over guard; in a forked child a new one, as a thread of the parent may have held
        it at the fork (no thread is left in the child to let it go)."""
        if self._guard_fork != _forks:
            self._guard, self._guard_fork = threading.Lock(), _forks
        return self._guard

    def _wait(self, timeout_ms: int, stop: Callable[[], bool] | None = None) -> None:
        guard = self._guarded()
        cond = threading.Condition()
        box: dict[str, Any] = {"file": None, "abandoned": False, "error": None}
        self._pending = box

        def waiter() -> None:
            try:
                while True:  # until the file locked is the one the path names
                    handle = self._open()
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
                    info = os.fstat(handle.fileno())
                    if box["abandoned"] or _names(self.path, (info.st_dev, info.st_ino)):
                        box["id"] = (info.st_dev, info.st_ino)
                        break
                    handle.close()
            except (OSError, LedgerError) as exc:  # a link put in its place meanwhile is refused, not waited on
                box["error"] = exc  # this thread gets no signal: the caller's interruption is not raised here
            else:
                with guard:
                    if not box["abandoned"]:
                        box["file"], handle = handle, None
                if handle is not None:
                    handle.close()  # the caller gave up (or was interrupted): release at once
            with cond:
                cond.notify()

        threading.Thread(target=waiter, name="ledger-writer-lock", daemon=True).start()
        deadline, stopped = time.monotonic() + timeout_ms / 1000, False

        def ended() -> bool:
            return box["file"] is not None or box["error"] is not None
        with cond:
            if stop is None:
                cond.wait_for(ended, timeout_ms / 1000)
            while stop is not None and not cond.wait_for(ended, min(max(deadline - time.monotonic(), 0), STOP_CHECK_S)):
                if time.monotonic() >= deadline or stop():
                    stopped = time.monotonic() < deadline
                    break
        with guard:  # the hand-over: from here on release() finds the lock in ``held``
            self.held, box["file"] = box["file"], None
            box["abandoned"] = True
            self._pending = None
        if self.held is not None:
            self._note_held(box.get("id"))
            return
        if box["error"] is not None:  # the path could not be opened: the caller's refusal, as uncontended
            raise box["error"]
        if stopped:
            raise LedgerError(E.LEDGER_BUSY, "stopped waiting for another writer: the work is being stopped",
                              stopped=True)
        raise LedgerError(
            E.LEDGER_BUSY, f"another writer held the case for more than {timeout_ms} ms; retry",
            busy_timeout_ms=timeout_ms,
        )

    def release(self) -> None:
        """Release the lock if held, and abandon a wait in progress (its helper releases what it
        wins). Safe to call at any time, any number of times."""
        with self._guarded():
            pending, self._pending = self._pending, None
            handed = None
            if pending is not None:
                pending["abandoned"] = True
                handed, pending["file"] = pending["file"], None
            held = self.held  # still ``held`` until let go: an interrupt before that leaves it to the next release
            if held is not None and self._held_id is not None:
                _HOLDERS.pop(self._held_id, None)
                self._held_id = None
        for handle in (held, handed):
            if handle is None:
                continue
            if handle is self._kept and self._kept_fork == _forks:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)  # kept open for the next acquire
                    continue
                except BaseException:
                    self._kept = self._kept_id = None
                    handle.close()  # closing the last descriptor of the open file drops the flock
                    raise
            handle.close()  # closing the last descriptor of the open file drops the flock
        if held is not None and self.held is held:
            self.held = None
