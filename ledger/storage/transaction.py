"""A write, a batch and a read of :class:`~ledger.storage.connection.Storage`: its ``BEGIN IMMEDIATE …
COMMIT`` (a ``SAVEPOINT`` inside a batch), the batch's one transaction around several writes, and a
read's snapshot (``BEGIN … ROLLBACK``).

All are classes rather than generator context managers: they run once per operation, and an
interrupt (``KeyboardInterrupt``, a caller's timeout raised by its signal handler) that lands as one is
entered, after the transaction began and before the ``with`` block holds it, ends the transaction
here, never leaving it (and the writer lock) held until the generator is collected. One that lands as
one is left, before any of its end ran, leaves it to the next read or write of the process, which
ends it once the frame whose ``with`` held it no longer runs that block (:func:`abandoned`;
docs/reliability.md).
"""

from __future__ import annotations

import sys
from typing import Any

from ..ground.errors import INVALID_ARGUMENT, STORAGE_ERROR, LedgerError
from .sqlite_file import NOTHING_WRITTEN, SQLITE_ERRORS, sqlite_error

#: A :class:`~ledger.storage.connection.Storage` (not imported: the connection imports this module).
Storage = Any


def abandoned(holder: Any, holder_at: int, *, read: bool = False) -> bool:
    """Whether the transaction the ``with`` of frame ``holder`` entered at instruction ``holder_at`` is
    abandoned (its end cut short): that frame is no longer running (called from here), or is entering
    that very ``with`` again (a loop that caught the interrupt), which it cannot while the block runs.
    A generator's frame holding a ``read`` is never taken for gone: one suspended inside its block (rows
    read as they are consumed) still holds it, and its own end (or the case's close) ends it."""
    if holder is None or (read and holder.f_code.co_flags & _GENERATOR_FLAGS):
        return False
    frame = sys._getframe(2)
    while frame is not None and frame is not holder:
        frame = frame.f_back
    return frame is None or frame.f_lasti == holder_at


#: ``inspect.CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR`` (not imported: ``inspect`` is slow to load).
_GENERATOR_FLAGS = 0x20 | 0x80 | 0x200


def busy_reason(storage: Storage) -> str:
    """Why a write of ``storage`` cannot start now: an iterator of its rows neither read to its end nor
    closed (a generator's frame holds the read), or another operation running."""
    reader = storage._reader if storage._in_read else None
    if reader is not None and reader.f_code.co_flags & _GENERATOR_FLAGS:
        return ("a write was started while an iterator of this case's rows (iter_events) was neither read to its "
                "end nor closed: it holds a read snapshot until then; read it to its end or close it "
                "(iterator.close()), then write")
    return ("an operation was started while another one of the same case was running (a nested call, or a "
            "callback that writes; or an interrupt cut the end of one short in a block that is still running: "
            "close the case and open it again); run it after")


def holds_snapshot(storage: Storage) -> bool:
    """Whether a read of ``storage`` now would share a snapshot already held (a write's, a batch's,
    another read's) rather than begin its own."""
    return bool(storage._in_read or storage._in_write)


def in_batch(storage: Storage) -> bool:
    """Whether a write of ``storage`` now would be a savepoint of an open :class:`Batch`, which an
    exception leaving the batch rolls back with everything else written inside it."""
    return bool(storage._in_batch)


class Batch:
    """:meth:`Storage.batch`: one transaction for every :meth:`Storage.write` inside (each a savepoint)."""

    __slots__ = ("write",)

    def __init__(self, storage: Storage) -> None:
        self.write = Write(storage, depth=2)  # held by the `with` that enters the batch

    def __enter__(self) -> None:
        if self.write.storage._in_batch:  # one whose end an interrupt cut short, entered again, is ended first
            self.write.storage.recover_abandoned_write()
        if self.write.storage._in_batch:  # its writes would end the open batch's savepoints and flag
            raise LedgerError(INVALID_ARGUMENT, "a batch is already open on this case: the operations inside "
                              "it share its transaction already; open batches one after the other")
        try:
            self.write.__enter__()
            self.write.storage._in_batch = True
        except BaseException as exc:  # once begun, the transaction is ended here: nobody else would
            if self.write.entered:
                self.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool:
        storage = self.write.storage
        storage._in_batch = False
        if _closed_inside(storage) and not storage.forked:  # closed inside: the close rolled it back
            storage._in_write, storage._holder = False, None
            if kind is None:
                raise LedgerError(INVALID_ARGUMENT, _CLOSED_IN_BATCH)
            return False
        if kind is None and not storage.forked and not storage.conn.in_transaction:  # rolled back by SQLite
            self.write.__exit__(BatchRolledBack, None, None)  # ends the write: nothing is left to commit
            raise BatchRolledBack(STORAGE_ERROR, _LOST_BATCH)
        return self.write.__exit__(kind, value, traceback)


class Write:
    """:meth:`Storage.write` (a ``SAVEPOINT`` inside a batch): a class rather than a generator, as it
    runs once per operation. The body's ``sqlite3`` errors leave it translated (:func:`sqlite_error`)."""

    __slots__ = ("storage", "savepoint", "entered", "depth")

    def __init__(self, storage: Storage, depth: int = 1) -> None:
        self.storage = storage
        self.savepoint = False
        self.entered = False  # True once begun: the caller's __exit__ is then the one way out
        self.depth = depth  # frames up from __enter__ to the one whose `with` holds the write

    def __enter__(self) -> Storage:
        storage = self.storage
        storage.check_process()
        storage.recover_abandoned_write()
        storage.recover_abandoned_read()
        if storage._in_batch:
            if _closed_inside(storage):  # closed inside the batch, which its close rolled back
                raise LedgerError(INVALID_ARGUMENT, _CLOSED_IN_BATCH)
            if not storage.conn.in_transaction:  # SQLite rolled the batch back: nothing more joins it
                raise BatchRolledBack(STORAGE_ERROR, _LOST_BATCH)
            storage._open_savepoint()  # one left open by an interrupt is settled by the batch's next step
            self.savepoint = True
        else:
            writing = storage._in_write  # another write's (a nested call, refused): never ended here
            try:
                storage._begin()
                holder = sys._getframe(self.depth)
                storage._holder, storage._holder_at = holder, holder.f_lasti
            except BaseException:  # KeyboardInterrupt as _begin returned: begun, and never to be ended
                if storage._in_write and not writing:
                    storage._end()
                raise
        self.entered = True  # no call after it: an interrupt cannot come between it and the return
        return storage

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool:
        storage = self.storage
        if storage.forked:  # a child leaving a write its parent began: neither commit nor roll back
            storage._abandon()
            if kind is None:  # refused instead of committed; an exception on its way goes on
                storage.check_process()
            return False
        if self.savepoint:
            if kind is None:
                storage._release_savepoint()
                return False
            storage._settle_savepoint()
            if isinstance(value, (LedgerError, *SQLITE_ERRORS)) and not storage.conn.in_transaction:
                raise _batch_rolled_back(value) from None
        else:
            try:
                if kind is None:
                    storage._commit()
                    return False
            finally:
                storage._end()
        if isinstance(value, SQLITE_ERRORS):
            translated = sqlite_error(value)
            if translated is not value:
                raise translated from None
        return False


class BatchRolledBack(LedgerError):
    """``STORAGE_ERROR``: an operation inside a batch failed in a way that made SQLite roll back the
    whole transaction (the disk full, an I/O error), so none of the batch's operations is written,
    those before it included; the batch ends with it, never going on outside a transaction."""


def _closed_inside(storage: Any) -> bool:
    """Whether ``storage`` was closed, or is being closed, while a batch of it is open."""
    return storage._closed or storage._closing


#: Said of a batch whose case was closed inside it, to a later operation of it or to its end.
_CLOSED_IN_BATCH = ("this case was closed inside its batch, which closing rolled back: none of the batch's operations "
                    "was written; end a batch before closing its case, and open the case again to use it")

#: Said of a batch an earlier operation's failure had SQLite roll back, to a later one or to its end.
_LOST_BATCH = ("an earlier operation of this batch failed in a way that made SQLite roll back the whole batch (the "
               "disk full, an I/O error): none of its operations was written; end the batch and start another")


def _batch_rolled_back(error: BaseException) -> LedgerError:
    """:class:`BatchRolledBack` for ``error``, the failure of the operation that ended the batch."""
    translated = sqlite_error(error) if isinstance(error, SQLITE_ERRORS) else error
    why = translated.message.removesuffix(NOTHING_WRITTEN) if isinstance(translated, LedgerError) else str(error)
    return BatchRolledBack(STORAGE_ERROR, f"{why}; SQLite rolled back the whole batch: none of its operations was "
                           "written, the ones before this one included")


class Read:
    """:meth:`Storage.read`: one consistent snapshot (``BEGIN`` … ``ROLLBACK``), or, inside a write or
    another read, that one's. ``depth``: frames up from ``__enter__`` to the one whose ``with`` holds it."""

    __slots__ = ("storage", "depth", "own")

    def __init__(self, storage: Storage, depth: int = 1) -> None:
        self.storage = storage
        self.depth = depth
        self.own = False  # True once this read began the snapshot: its __exit__ ends it

    def __enter__(self) -> Storage:
        storage = self.storage
        storage.check_process()
        storage.recover_abandoned_write()
        storage.recover_abandoned_read()
        if storage._in_write or storage._in_read:  # inside a write or another read: the same snapshot
            return storage
        try:
            storage._in_read = True
            if storage.conn.in_transaction:  # left over from an interrupted rollback
                storage.conn.execute("ROLLBACK")
            storage.conn.execute("BEGIN")
            holder = sys._getframe(self.depth)
            storage._reader, storage._reader_at = holder, holder.f_lasti
        except BaseException as exc:  # an interrupt as the snapshot began too: ended here, never left held
            storage._end_read()
            if isinstance(exc, SQLITE_ERRORS):
                raise sqlite_error(exc) from None
            raise
        self.own = True  # no call after it: an interrupt cannot come between it and the return
        return storage

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool:
        if self.own:
            self.storage._end_read()
        if isinstance(value, SQLITE_ERRORS):
            translated = sqlite_error(value)
            if translated is not value:
                raise translated from None
        return False
