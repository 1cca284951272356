"""Atomic file writes: temp file in the same folder, fsync, rename, fsync of the folder.

A crash leaves either the old file or the new one, plus at most a
``.ledger-tmp-*`` leftover that the next export removes.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from ..ground.paths import read_bytes
from ..model.package import EXPORT_TEMP_PREFIX


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_file_mode() -> int:
    """``0o666`` less the process umask: the mode ``open()`` gives a new file (``0o644`` under umask 022)."""
    try:
        with open("/proc/self/status", "rb") as status:  # reads the umask without changing it
            for line in status:
                if line.startswith(b"Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder, fsync, rename.

    The caller fsyncs the folder (once per batch of files). A crash leaves either
    the old file or the new one, plus at most a ``.ledger-tmp-*`` leftover. The
    file gets ``mode`` (default :func:`new_file_mode`; pass it when writing many).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=EXPORT_TEMP_PREFIX + path.name + ".", dir=path.parent)
    try:
        try:
            # mkstemp's 0600 would hide the export from other readers
            os.fchmod(fd, new_file_mode() if mode is None else mode)
            handle = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)  # not yet owned by a file object: nothing else would close it
            raise
        with handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def same_bytes(path: Path, data: bytes, *, refused: str | None = None) -> bool:
    """Whether the regular file ``path`` holds exactly ``data`` (False when it is absent or a link).
    A read the system refuses counts as False, or with ``refused`` (what to call the file) is
    ``STORAGE_ERROR``: a checker must not report a file it may not read as one that differs."""
    try:
        if path.is_symlink() or path.stat().st_size != len(data):
            return False
    except OSError:
        return False
    if refused is not None:
        return read_bytes(path, refused) == data
    try:
        return path.read_bytes() == data
    except OSError:
        return False


def remove_empty_parents(directory: Path, root: Path) -> None:
    """Remove folders an interrupted export created, up to (not including) ``root``."""
    while directory != root and root in directory.parents:
        try:
            directory.rmdir()
        except OSError:
            return  # not empty: it held files before
        directory = directory.parent


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (another user's too)."""
    try:
        os.kill(pid, 0)  # PermissionError: alive, but another user's
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except (OverflowError, ValueError):
        return False  # not a process id at all
    return True


def remove_abandoned_builds(parent: Path, prefix: str) -> None:
    """Remove the hidden build folders ``<prefix>…<pid>…`` in ``parent`` whose process is gone
    (killed mid-build): the rest of the name is ``[<anything>.]<pid>[-<digits>]``. Best effort."""
    try:
        leftovers = [p for p in parent.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return
    for leftover in leftovers:
        named = re.fullmatch(r"(?:.*\.)?(\d{1,10})(?:-\d+)?", leftover.name[len(prefix):], re.S)
        if named and not pid_alive(int(named.group(1))) and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
