"""The one place where ``sqlite3`` errors become ``LedgerError`` (docs/errors.md): busy, the file
system refusing the file, and everything else, which is the history's integrity."""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from typing import Iterator

from . import errors as E
from .errors import LedgerError

#: SQLITE_PERM, SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN (primary result codes).
_STORAGE_CODES = frozenset({3, 8, 10, 13, 14})


@contextmanager
def translate_sqlite_errors() -> Iterator[None]:
    """The one place where ``sqlite3`` errors become ``LedgerError``.

    busy/locked → ``LEDGER_BUSY`` (retryable); the file system refusing the
    file (cannot open, read-only, I/O error, disk full, permission) →
    ``STORAGE_ERROR``; constraint and trigger aborts, corruption and every other
    database error → ``INTEGRITY_ERROR``.
    """
    try:
        yield
    except sqlite3.OperationalError as exc:
        text = str(exc)
        if "locked" in text or "busy" in text:
            raise LedgerError(E.LEDGER_BUSY, f"the case is busy: {text}; retry") from None
        primary = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        if primary in _STORAGE_CODES:
            raise LedgerError(E.STORAGE_ERROR, f"the file system refused the ledger: {text} "
                              "(read-only location, missing permission, full disk or a closed case?); "
                              "nothing was written") from None
        raise LedgerError(E.INTEGRITY_ERROR, f"SQLite refused: {text}") from None
    except sqlite3.ProgrammingError as exc:
        if "closed database" in str(exc):
            raise LedgerError(E.INVALID_ARGUMENT, "this case was closed; open it again to use it") from None
        if "binding" in str(exc).lower() or "parameters" in str(exc):  # Case.query's caller gave wrong params
            raise LedgerError(E.INVALID_ARGUMENT, f"query parameters do not fit the statement: {exc}") from None
        raise
    except sqlite3.DatabaseError as exc:  # IntegrityError (triggers), corrupt files, …
        raise LedgerError(E.INTEGRITY_ERROR, f"SQLite refused: {exc}") from None
