"""The input identity of a case package: one sha256 over every file that is no part of the ledger
(docs/concepts.md), so that a result can be re-checked against the inputs it was read from."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Container

from ..ground.canonical import canonical_sha256
from ..ground.descriptors import close_descriptor
from ..ground.paths import walk
from .package import ANALYSIS_DIR, LEDGER_FILE, MANIFEST_FILE, is_export_temp, walk_package
from ..ground.errors import pass_on_interruption


#: What a file that is neither regular, a folder nor a link (a FIFO, a socket, a device) contributes to the
#: input identity: a fixed marker. The router never reads it, but a search lists it (as skipped).
SPECIAL_FILE_DIGEST = hashlib.sha256(b"special:not-a-regular-file").hexdigest()
#: What a regular file this user cannot read (no permission, an I/O error) contributes to the input
#: identity: a fixed marker. The router cannot read it either, so no result depends on its bytes.
UNREADABLE_FILE_DIGEST = hashlib.sha256(b"unreadable:input-file").hexdigest()


def _regular_file_digest(full: Path) -> str | None:
    """sha256 of the file ``full`` names, read from one descriptor opened without following a link
    or waiting on a FIFO; a link that took its place since it was listed gives the digest of its
    target text, a file that cannot be read :data:`UNREADABLE_FILE_DIGEST`, and anything else that
    is no longer a regular file None."""
    try:
        handle = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as oserr:
        pass_on_interruption(oserr)
        try:
            if os.path.islink(full):
                return hashlib.sha256(b"symlink:" + os.fsencode(os.readlink(full))).hexdigest()
        except OSError as oserr:
            pass_on_interruption(oserr)
            return None  # removed again while we looked
        return UNREADABLE_FILE_DIGEST
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None
        digest = hashlib.sha256()
        while block := os.read(handle, 1 << 20):
            digest.update(block)
        return digest.hexdigest()
    except OSError as oserr:
        pass_on_interruption(oserr)
        return UNREADABLE_FILE_DIGEST
    finally:
        close_descriptor(handle)  # a hard link to the ledger: its locks kept


def own_file_ids(package: Path) -> set[tuple[int, int]]:
    """(device, inode) of ``ledger.sqlite*``, ``manifest.json`` and the files under ``analysis/``:
    hard links to them are not inputs (the router refuses them the same way)."""
    ids = set()
    for entry in os.scandir(package):
        if entry.name.startswith(LEDGER_FILE) or entry.name == MANIFEST_FILE:
            for follow in (False, True):
                try:
                    info = entry.stat(follow_symlinks=follow)
                except OSError as oserr:
                    pass_on_interruption(oserr)
                    continue
                ids.add((info.st_dev, info.st_ino))
    for directory, _dirs, filenames in walk(package / ANALYSIS_DIR):
        for name in filenames:
            try:
                info = os.lstat(os.path.join(directory, name))
            except OSError as oserr:
                pass_on_interruption(oserr)
                continue
            ids.add((info.st_dev, info.st_ino))
    return ids


#: What a hard link to one of the ledger's own files contributes to the input identity: a fixed
#: marker, never the bytes (they change with every event and are not an input).
OWN_FILE_LINK_DIGEST = hashlib.sha256(b"hardlink:ledger-own-file").hexdigest()


ANALYSIS_PREFIX = ANALYSIS_DIR + "/"


class _Under:
    """The paths of ``paths`` that start with ``prefix``; any other is not asked of ``paths`` (which
    may read the ledger on first use: a walk of a package's inputs never makes it)."""

    __slots__ = ("prefix", "paths")

    def __init__(self, prefix: str, paths: Container[str]) -> None:
        self.prefix, self.paths = prefix, paths

    def __contains__(self, relative: object) -> bool:
        return isinstance(relative, str) and relative.startswith(self.prefix) and relative in self.paths


def input_identity(root: Path, exported: Container[str]) -> str:
    """sha256 over the sorted ``[relative path, sha256]`` of the package's inputs (docs/concepts.md).

    ``exported`` are the paths under ``analysis/`` that the ledger exported (they are not inputs).

    Excludes ``ledger.sqlite*``, ``manifest.json`` and the files under
    ``analysis/`` that the ledger exports (plus an interrupted export's temp
    files). A symlink contributes the sha256 of its target text, never bytes
    from outside the package; a hard link to one of the ledger's own files
    contributes a fixed marker (:data:`OWN_FILE_LINK_DIGEST`), never their bytes, and a file
    this user cannot read another (:data:`UNREADABLE_FILE_DIGEST`): the identity never fails.
    A FIFO, socket or device contributes :data:`SPECIAL_FILE_DIGEST`: a search lists every name a glob
    matches, so a special file made or removed since changes the identity too.
    """
    entries = []
    own: set[tuple[int, int]] | None = None
    for relative, info in walk_package(root, skip=_Under(ANALYSIS_PREFIX, exported)):  # not examined at all
        if "/" not in relative and (relative.startswith(LEDGER_FILE) or relative == MANIFEST_FILE):
            continue
        if is_export_temp(relative):  # under analysis/, or the manifest's at the top
            continue
        if info is not None and stat.S_ISDIR(info.st_mode):
            continue
        full = root / relative
        if info is None:  # an entry this user may not examine: the router cannot read it either
            digest = UNREADABLE_FILE_DIGEST
        elif stat.S_ISLNK(info.st_mode):  # a link (to a file or a folder) is an entry of its own, not followed
            try:
                digest = hashlib.sha256(b"symlink:" + os.fsencode(os.readlink(full))).hexdigest()
            except OSError as oserr:
                pass_on_interruption(oserr)
                continue  # removed or replaced while we walked
        elif stat.S_ISREG(info.st_mode) and info.st_nlink > 1 and (info.st_dev, info.st_ino) in (
                own := own_file_ids(root) if own is None else own):
            digest = OWN_FILE_LINK_DIGEST
        elif stat.S_ISREG(info.st_mode):
            digest = _regular_file_digest(full)
            if digest is None:  # no longer a regular file (swapped for a FIFO, removed) while walked
                continue
        elif stat.S_ISDIR(info.st_mode):
            continue
        else:  # a FIFO, socket or device: a search lists it (as skipped), so it is an entry as well
            digest = SPECIAL_FILE_DIGEST
        entries.append([relative, digest])
    entries.sort()
    return canonical_sha256(entries)
