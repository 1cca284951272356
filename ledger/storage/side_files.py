"""The files beside a ledger (its ``-wal``, ``-shm`` and ``-journal``) and the size its own header
records: what is looked at before SQLite opens the file, which would make, fold or delete them
(docs/files.md)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from ..ground import errors as E
from ..ground.descriptors import is_held, read_start
from ..ground.errors import LedgerError, pass_on_interruption
from ..ground.paths import file_kind


#: The files SQLite keeps beside a database, by suffix, and what each holds.
SIDE_FILE_ROLES = {"-wal": "write-ahead log", "-shm": "shared-memory index (of its write-ahead log)",
                   "-journal": "rollback journal"}


def check_side_files(path: Path | str, what: str = "the ledger") -> None:
    """``STORAGE_ERROR`` naming the file when a ``-wal``, ``-shm`` or ``-journal`` beside the database
    ``path`` (:func:`log_path`) is there but no regular file (a folder, a pipe, a socket, a device;
    a link is followed): SQLite would refuse it with a message naming no file, or, opening a pipe,
    wait forever for a writer (where no Ctrl-C reaches it); or that is the very file of a database a
    connection of this process holds (a hard link to it). ``what`` names the database."""
    for suffix, role in SIDE_FILE_ROLES.items():
        side = log_path(path, suffix)
        try:
            info = os.stat(side)
        except OSError as oserr:
            pass_on_interruption(oserr)
            continue  # none there (or none this user may look at: SQLite says what it refuses)
        if not stat.S_ISREG(info.st_mode):
            raise LedgerError(E.STORAGE_ERROR, f"cannot open {path}: {os.path.basename(side)} beside it is "
                              f"{file_kind(info.st_mode)}, "
                              f"not a file, where SQLite keeps {what}'s {role}; move it aside, then run this again",
                              path=side)
        if is_held(info, shm=False):  # SQLite would open and close it as a log, dropping that connection's locks
            raise LedgerError(E.STORAGE_ERROR, f"cannot open {path}: {os.path.basename(side)} beside it is the file "
                              "of a ledger open in this process (a hard link to it), not a log of its own; move "
                              "it aside, then run this again", path=side)


#: The first bytes of a rollback journal (SQLite's file format, section "The rollback journal").
_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def hot_journal(path: Path) -> str | None:
    """What the rollback journal beside a non-empty ``ledger.sqlite`` holds when SQLite takes it for
    *hot* (there, not empty, its first byte not zero), which a reader cannot open the file past
    (``SQLITE_READONLY_ROLLBACK``) and the next writer deals with: ``"transaction"`` with SQLite's
    header at its start (a writer stopped mid-way; the next writer rolls it back), ``"unknown"``
    without one (damaged or not SQLite's; the next writer deletes it, restoring nothing),
    ``"unreadable"`` for a folder, pipe or other non-regular file, or a file this user may not read
    there (SQLite cannot read the ledger past it either); None when there is no hot journal. An
    immutable read would ignore it and see a half-written file."""
    try:
        if os.stat(path).st_size == 0:
            return None
    except OSError as oserr:
        pass_on_interruption(oserr)
        return None
    journal = log_path(path, "-journal")
    try:
        info = os.stat(journal)
        if not stat.S_ISREG(info.st_mode):  # a folder; a pipe would block the read (SQLite's too)
            return "unreadable"
        if info.st_size == 0:
            return None
        first = read_start(journal, 8)[1]  # a hard link to a ledger open here keeps its locks
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as oserr:
        pass_on_interruption(oserr)
        return "unreadable"
    if not first or first[0] == 0:
        return None
    return "transaction" if first == _JOURNAL_MAGIC else "unknown"


def _journal_header(path: Path) -> bytes:
    """The first 20 bytes of ``path``'s rollback journal (b"" when there is none or it cannot be read):
    its magic, then the page count, a nonce and the ledger's size in pages before the transaction."""
    try:
        return read_start(log_path(path, "-journal"), 20)[1]
    except OSError as oserr:
        pass_on_interruption(oserr)
        return b""


def orphaned_logs(path: Path) -> list[str]:
    """Names of the logs beside an empty (zero-byte) ledger file ``path`` that hold a ledger's writes,
    which SQLite deletes when it opens the empty file (docs/files.md):

    * a ``-wal`` of any length: SQLite writes the ledger file's first page before its log exists,
      so no ``init`` leaves an empty ledger file with a log beside it;
    * a ``-journal`` that records a ledger of one page or more before its transaction (an
      interrupted ``init`` leaves one that records none, which may go).

    Empty when ``path`` is missing or not empty, or the logs cannot be read."""
    try:
        if os.stat(path).st_size != 0:
            return []
    except OSError as oserr:
        pass_on_interruption(oserr)
        return []
    found = []
    try:
        if os.stat(log_path(path, "-wal")).st_size > 0:
            found.append(f"{os.path.basename(path)}-wal")
    except OSError as oserr:
        pass_on_interruption(oserr)
    header = _journal_header(path)
    if header[:8] == _JOURNAL_MAGIC and int.from_bytes(header[16:20], "big") > 0:
        found.append(f"{os.path.basename(path)}-journal")
    return found


#: The first 16 bytes of every SQLite database file.
DATABASE_MAGIC = b"SQLite format 3\x00"
#: Looks at a ledger shorter than its header says before it is called cut short, and the pause between them:
#: a checkpoint writes page 1 before the pages past the old end, so a file may be short for an instant.
_CUT_SHORT_LOOKS, _CUT_SHORT_PAUSE_S = 3, 0.05


def _shortfall(path: Path) -> tuple[int, int, int] | None:
    """``(size, pages, page_size)`` when ``path`` is a database file shorter than the size its header
    records, with nothing beside it that SQLite would read first (:func:`_log_holds_writes`);
    None otherwise, and whenever the header's size is not one SQLite trusts (its change counter and
    version-valid-for number differ) or the file cannot be read (SQLite then says why)."""
    if _log_holds_writes(path):
        return None
    try:
        size, header = read_start(path, 100)  # its locks kept when a connection of this process has it open
    except OSError as oserr:
        pass_on_interruption(oserr)
        return None
    if not header.startswith(DATABASE_MAGIC[:len(header)]) or not header:
        return None  # not SQLite's (SQLite says so), or empty (no case yet)
    if len(header) < 100:
        return size, 0, 100  # the header itself is cut short
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if header[24:28] != header[92:96] or not pages or page_size < 512 or page_size & (page_size - 1):
        return None
    return (size, pages, page_size) if size < pages * page_size and not _log_holds_writes(path) else None


#: The first four bytes of a write-ahead log SQLite wrote (its magic, in either byte order of its checksums).
_WAL_MAGICS = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")


def _log_holds_writes(path: Path) -> bool:
    """Whether SQLite reads something beside the ledger ``path`` before the file itself: a ``-wal``
    with SQLite's header and a frame after it, or a hot rollback journal (:func:`hot_journal`). An
    empty or foreign ``-wal`` holds none (SQLite starts it over), nor does an empty ``-journal``."""
    if hot_journal(path) is not None:
        return True
    try:
        size, magic = read_start(log_path(path, "-wal"), 4)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False
    return magic in _WAL_MAGICS and size > 32


def check_not_cut_short(path: Path) -> None:
    """``INTEGRITY_ERROR`` (and nothing opened, so no ``-wal`` or ``-shm`` made beside it) when the ledger
    file ``path`` is shorter than its own header records, in three looks 50 ms apart: a copy that
    stopped mid-way, a file truncated. Never for a ledger whose log or journal holds writes (SQLite
    reads those first) nor for one a checkpoint is writing (short for an instant, not three looks)."""
    short = None
    for look in range(_CUT_SHORT_LOOKS):
        if look:
            time.sleep(_CUT_SHORT_PAUSE_S)
        now = _shortfall(path)
        if now is None or (short is not None and now != short):
            return
        short = now
    size, pages, page_size = short
    needed = pages * page_size or page_size
    said = (f"its own header says it holds {pages} page{'s' if pages != 1 else ''} of {page_size} bytes "
            f"({needed} bytes)" if pages else f"every SQLite database starts with a {needed}-byte header")
    raise LedgerError(E.INTEGRITY_ERROR, f"{path} is {size} byte{'s' if size != 1 else ''}, but {said}: the file "
                      "was cut short (a copy "
                      "that stopped mid-way, a truncated file); nothing was read. Put the whole file back, or "
                      "'ledger import' the case's export to a new folder", path=str(path), size_bytes=size,
                      expected_bytes=needed)


def log_path(path: Path | str, suffix: str) -> str:
    """Where SQLite keeps the ``suffix`` file (``-wal``, ``-shm``, ``-journal``) of the database
    ``path``: beside the file a link at ``path`` leads to, not beside the link."""
    return f"{os.path.realpath(path)}{suffix}"


def writable_side_files(path: Path) -> None:
    """Give the owner's write permission back to the ``-wal`` and ``-shm`` of a ledger this user may
    write, where this user owns them and it lacks: a read of the ledger while it was read-only
    (``chmod a-w``) made them read-only, SQLite copying the ledger's modes, and a ``-shm`` left so
    refused every write once the ledger was writable again (docs/files.md)."""
    if not os.access(path, os.W_OK):
        return
    for suffix in ("-wal", "-shm"):
        side = log_path(path, suffix)
        try:
            info = os.stat(side)
            if info.st_uid == os.geteuid() and not info.st_mode & stat.S_IWUSR:
                os.chmod(side, stat.S_IMODE(info.st_mode) | stat.S_IWUSR)
        except OSError as oserr:  # none there, or not this user's to change: SQLite says what it refuses
            pass_on_interruption(oserr)


def log_files_exist(path: Path) -> bool:
    """Whether ``-wal`` or ``-shm`` lies where SQLite keeps them for ``path`` (:func:`log_path`; a
    reader that finds none made them)."""
    return any(os.path.exists(log_path(path, suffix)) for suffix in ("-wal", "-shm"))


def wal_bytes(path: Path) -> int:
    """Size of the ledger's ``-wal`` file (0 when there is none)."""
    try:
        return os.stat(log_path(path, "-wal")).st_size
    except OSError as oserr:
        pass_on_interruption(oserr)
        return 0


def wal_is_empty(path: Path) -> bool:
    try:
        return os.stat(log_path(path, "-wal")).st_size == 0
    except FileNotFoundError:
        return True
