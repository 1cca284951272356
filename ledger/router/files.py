"""A package's files, read below its folder one name at a time without following a link.

What the router reads (docs/evidence.md) and what a cited source is hashed from: every path is
walked from an open descriptor of the package folder with ``O_NOFOLLOW`` at each step, a FIFO is
opened without waiting for a writer, and only a regular file is read, from the one descriptor it
was opened as. Every refusal is ``ROUTER_REFUSED`` with ``unreadable`` in its details.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import os
import stat
from pathlib import Path
from typing import Any, Callable

from ..ground import errors as E
from ..ground.descriptors import close_descriptor, is_held
from ..ground.errors import LedgerError, pass_on_interruption
from ..ground.paths import fwalk
from ..storage.sqlite_file import ANALYSIS_DIR, LEDGER_FILE, MANIFEST_FILE

#: The largest file the router reads, in bytes.
FILE_BYTES_MAX = 16 * 1024 * 1024
_NOFOLLOW, _CLOEXEC, _NOCTTY = (getattr(os, name, 0) for name in ("O_NOFOLLOW", "O_CLOEXEC", "O_NOCTTY"))


def unreadable(relative: str, why: str, errno_: int | None = None, *, missing: bool = False) -> LedgerError:
    """``ROUTER_REFUSED`` for a file that cannot be read; ``errno`` in the details when the system
    refused the read itself (no permission, an I/O error), as opposed to a link or a missing file;
    ``missing`` when there is no such file."""
    return LedgerError(E.ROUTER_REFUSED, f"{relative!r} {why}", path=relative, unreadable=True, errno=errno_,
                       **({"missing": True} if missing else {}))


def open_folder(root: Path, relative: str) -> int:
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    except OSError as exc:
        pass_on_interruption(exc)
        raise unreadable(relative, f"cannot be read: the package folder cannot be opened ({exc.strerror})",
                          exc.errno) from None


def _open_step(name: str, dir_fd: int, relative: str, folder: bool) -> int:
    flags = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | (os.O_DIRECTORY if folder else os.O_NONBLOCK | _NOCTTY)
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        pass_on_interruption(exc)
        if exc.errno == errno.ENOENT:
            raise unreadable(relative, "does not exist", missing=True) from None
        if exc.errno in (errno.ELOOP, errno.EMLINK) or (folder and exc.errno == errno.ENOTDIR and is_link(name, dir_fd)):
            where = f"passes through a symbolic link ({name})" if folder else "is a symbolic link"
            raise unreadable(relative, f"{where}; the router follows no link, so it never reads outside "
                              "sources/ or data/ of the package") from None
        if exc.errno == errno.ENOTDIR:
            raise unreadable(relative, "does not exist (a part of it is not a folder)", missing=True) from None
        raise unreadable(relative, f"cannot be read: {exc.strerror}", exc.errno) from None


def is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False


def _open_below(root_fd: int, relative: str) -> int:
    """Walk ``relative`` down from ``root_fd`` one name at a time, refusing a link at every step, and
    return an open descriptor of what it names (a FIFO is opened without waiting for a writer)."""
    parts = relative.split("/")
    fd = root_fd
    try:
        for part in parts[:-1]:
            step = _open_step(part, fd, relative, True)
            if fd != root_fd:
                os.close(fd)
            fd = step
        _refuse_held(parts[-1], fd, relative)
        return _open_step(parts[-1], fd, relative, False)
    finally:
        if fd != root_fd:
            os.close(fd)


#: Why a hard link to a ledger's file is skipped: part of a reply's ``coverage``, which is recomputed and
#: compared, so the same whether that ledger is open in the process computing it or not.
OWN_FILE = "is a hard link to one of the ledger's own files; the router never reads them"


def _refuse_held(name: str, dir_fd: int, relative: str) -> None:
    """``ROUTER_REFUSED`` for a file a connection of this process holds (a hard link to a ledger, this
    case's or another's, while it is open), before it is opened: a descriptor of it could be closed
    only once the connection is (:mod:`ledger.ground.descriptors`), so each read would keep one open."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return  # opening it says why
    if stat.S_ISREG(info.st_mode) and is_held(info):
        raise unreadable(relative, OWN_FILE)  # the words a process with no ledger open gives (read_below)


def hash_below(root: str | os.PathLike[str], relative: str,
               feed: Callable[[bytes], None] | None = None) -> tuple[os.stat_result, str]:
    """``(fstat, sha256)`` of the regular file ``relative`` below the folder ``root``, hashed from the
    one descriptor it was opened as (no link followed at any step, any size; each block read is also
    given to ``feed``). ``ROUTER_REFUSED`` with ``unreadable`` in its details when it cannot be (a
    link, not a regular file, a read error)."""
    root_fd = open_folder(Path(root), relative)
    try:
        handle = _open_below(root_fd, relative)
    finally:
        os.close(root_fd)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise unreadable(relative, "is not a regular file")
        digest = hashlib.sha256()
        while block := os.read(handle, 1 << 20):
            digest.update(block)
            if feed is not None:
                feed(block)
        return info, digest.hexdigest()
    except OSError as exc:
        pass_on_interruption(exc)
        raise unreadable(relative, f"cannot be read: {exc.strerror}", exc.errno) from None
    finally:
        close_descriptor(handle)  # a hard link to the ledger: its locks kept


def read_below(root_fd: int, relative: str, own: dict[str, Any]) -> bytes:
    """Walk ``relative`` down from ``root_fd`` and read the file it names (see :meth:`Router.read_file`)."""
    handle = _open_below(root_fd, relative)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise unreadable(relative, "is not a regular file")
        if info.st_size > FILE_BYTES_MAX:
            raise unreadable(relative, f"is larger than {FILE_BYTES_MAX} bytes")
        if info.st_nlink > 1 and (info.st_dev, info.st_ino) in _own_ids(own, root_fd):
            raise unreadable(relative, OWN_FILE)
        return _read_capped(handle, relative)
    except OSError as exc:
        pass_on_interruption(exc)
        raise unreadable(relative, f"cannot be read: {exc.strerror}", exc.errno) from None
    finally:
        close_descriptor(handle)  # a hard link to the ledger: its locks kept


def _read_capped(handle: int, relative: str) -> bytes:
    chunks, size = [], 0
    while block := os.read(handle, 1 << 20):
        size += len(block)
        if size > FILE_BYTES_MAX:
            raise unreadable(relative, f"is larger than {FILE_BYTES_MAX} bytes")
        chunks.append(block)
    return b"".join(chunks)


def _own_ids(own: dict[str, Any], root_fd: int) -> set[tuple[int, int]]:
    if "ids" not in own:
        own["ids"] = _own_file_ids(root_fd)
    return own["ids"]


def _own_file_ids(root_fd: int) -> set[tuple[int, int]]:
    """(device, inode) of the ledger's own files: ``ledger.sqlite*`` (and what a linked
    ``ledger.sqlite`` leads to), ``manifest.json`` and every file under ``analysis/``."""
    ids: set[tuple[int, int]] = set()
    exported = False  # never exported: no analysis/ to walk (fwalk would raise)
    with os.scandir(root_fd) as entries:
        for entry in entries:
            exported = exported or entry.name == ANALYSIS_DIR
            if entry.name.startswith(LEDGER_FILE) or entry.name == MANIFEST_FILE:
                for follow in (False, True):
                    try:
                        info = entry.stat(follow_symlinks=follow)
                    except OSError as oserr:
                        pass_on_interruption(oserr)
                        continue
                    ids.add((info.st_dev, info.st_ino))
    for _directory, _dirs, filenames, dir_fd in fwalk(ANALYSIS_DIR, root_fd) if exported else ():
        for name in filenames:
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError as oserr:
                pass_on_interruption(oserr)
                continue
            ids.add((info.st_dev, info.st_ino))
    return ids


def _glob_tokens(glob: str) -> list[str]:
    """``glob`` cut into what matches one character (a character, ``?``, a ``[...]`` class, cut as
    :mod:`fnmatch` cuts it: ``!`` and a ``]`` first inside are the class's own; an unclosed ``[`` is
    a character) and ``*``."""
    tokens, at = [], 0
    while at < len(glob):
        end = at + 1
        if glob[at] == "[":
            end = at + 1 + (glob[at + 1:at + 2] == "!")
            end += glob[end:end + 1] == "]"
            end = glob.find("]", end)
            end = at + 1 if end < 0 else end + 1
        tokens.append(glob[at:end])
        at = end
    return tokens


def may_match_below(glob: str, folder: str) -> bool:
    """Whether ``glob`` (:func:`fnmatch.fnmatchcase`, whose ``*`` also matches ``/``) could match a path
    below ``folder``: some ``folder/…`` it matches. Read as the glob is matched, one character at a
    time, keeping every place in the glob the text so far can have reached; a place still reached
    once ``folder/`` is read leads on to a match unless a class after it matches no character at all
    (``[z-a]``, which :mod:`fnmatch` makes a pattern that never matches)."""
    tokens = _glob_tokens(glob)
    last_empty = max((n for n, token in enumerate(tokens)
                      if token.startswith("[") and len(token) > 1 and "(?!)" in fnmatch.translate(token)), default=-1)

    def closed(places: set[int]) -> set[int]:  # a * matches nothing, too
        for place in sorted(places):
            while place < len(tokens) and tokens[place] == "*":
                place += 1
                places.add(place)
        return places

    places = closed({0})
    for char in folder + "/":
        places = closed({place if tokens[place] == "*" else place + 1 for place in places
                         if place < len(tokens) and (tokens[place] == "*" or fnmatch.fnmatchcase(char, tokens[place]))})
        if not places:
            return False
    return max(places) > last_empty
