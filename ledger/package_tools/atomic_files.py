"""Atomic file writes: temp file in the same folder, fsync, rename, fsync of the folder.

A crash leaves either the old file or the new one, plus at most a
``.ledger-tmp-*`` leftover that the next export removes.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import secrets
import socket
import stat
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from ..ground.descriptors import close_descriptor
from ..ground.errors import STORAGE_ERROR, pass_on_interruption
from ..ground.paths import open_regular, os_error, read_bytes, remove_tree
from ..model.package import EXPORT_TEMP_PREFIX


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def process_umask() -> int:
    """This process's umask, read without changing it where the system tells it (``/proc``)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError) as oserr:
        pass_on_interruption(oserr)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """``0o666`` less the process umask: the mode ``open()`` gives a new file (``0o644`` under umask 022)."""
    return 0o666 & ~process_umask()


def write_atomic(path: Path, data: bytes, mode: int | None = None, *, folder_exists: bool = False) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder, fsync, rename.

    The caller fsyncs the folder (once per batch of files). A crash leaves either
    the old file or the new one, plus at most a ``.ledger-tmp-*`` leftover. The
    file gets ``mode`` (default :func:`new_file_mode`; pass it when writing many).
    ``folder_exists``: the caller knows ``path``'s folder exists, so it is not made again.
    """
    if not folder_exists:
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic_many([(path, data)], new_file_mode() if mode is None else mode)


def write_atomic_many(files: Sequence[tuple[Path, bytes]], mode: int) -> None:
    """:func:`write_atomic` for several files whose folders exist, each given ``mode``.

    Every temp file is written and closed first, then each is opened again to be fsynced and given
    ``mode``, then each is renamed into place: the first fsync commits the file system's journal for
    all of them, so the others return at once (one commit for the batch instead of one per file),
    and one descriptor is open at a time. As with one file, a file is renamed only once its bytes
    are durable, and a crash leaves each file old or new, plus at most one ``.ledger-tmp-*``
    leftover per file of the batch. A failure removes the temp files not yet renamed; the files
    already renamed stay (the caller knows which it created)."""
    temps: list[_Temp] = []
    renamed = 0
    try:
        for path, data in files:
            temp = _Temp(path)
            temps.append(temp)
            temp.create()
            # 0600 until synced (whatever the umask: it is opened again to be synced), so others see
            # the file only whole, then with the mode asked
            os.fchmod(temp.fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(temp.fd, view):]
            temp.close()
        for temp in temps:
            temp.fd = os.open(temp.name, os.O_RDONLY | _CLOEXEC)  # 0600: its owner may read it
            os.fsync(temp.fd)
            os.fchmod(temp.fd, mode)
            temp.close()
        for temp in temps:
            os.replace(temp.name, temp.target)
            renamed += 1
    except BaseException:
        for temp in temps[renamed:]:
            temp.close_quietly()
            if temp.name is not None:
                discard(temp.name)
        raise


class _Temp:
    """The temp file a target is written to: its name (None while it is not ours) and open descriptor."""

    __slots__ = ("target", "name", "fd")

    def __init__(self, target: Path) -> None:
        self.target = target
        self.name: Path | None = None
        self.fd = -1

    def create(self) -> None:
        """Create the temp file (``0600``), named before the create returns: an interrupt right after
        the create still removes it."""
        target = self.target
        while True:
            self.name = target.with_name(f"{EXPORT_TEMP_PREFIX}{target.name}.{os.getpid()}{_TAG}{next(_TEMP_NUMBERS)}")
            try:
                self.fd = os.open(self.name, _CREATE, 0o600)
                return
            except FileExistsError:  # a leftover of an earlier process that had this pid and tag: not ours
                self.name = None

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        os.close(fd)

    def close_quietly(self) -> None:
        """Close the descriptor if it is open, as cleanup after a failure: never raising."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError as oserr:
                pass_on_interruption(oserr)


def fsync_folders(root: Path, touched: Iterable[Path]) -> None:
    """fsync each touched folder (inside ``root``) once, deepest first, and the folders above it up to
    ``root`` (a new folder must survive too: its parent gained an entry), each of those once as well."""
    folders = set(touched)
    for directory in list(folders):
        folders.update(root / parent for parent in directory.relative_to(root).parents)
    for directory in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(directory)


def fsync_files(paths: Iterable[Path]) -> None:
    """fsync each file of ``paths`` (written, not yet synced), in that order: the first commits the
    file system's journal for all of them."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            close_descriptor(fd)  # a file a connection of this process holds keeps its locks


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: Flags of a temp file :func:`write_atomic` creates: a new file only, never one that exists.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC
#: Temp names: ``<prefix><name>.<pid><tag><number>``, unique in this process and, with the tag,
#: across processes that reuse a pid.
_TAG = "-" + secrets.token_hex(3) + "-"
_TEMP_NUMBERS = itertools.count()


def same_bytes(path: "str | os.PathLike[str]", data: bytes, *, refused: str | None = None) -> bool:
    """Whether the regular file ``path`` holds exactly ``data`` (False when it is absent, a link or
    not a regular file). A read the system refuses counts as False, or with ``refused`` (what to
    call the file) is ``STORAGE_ERROR``: a checker must not report a file it may not read as one
    that differs.

    The file is opened once (:func:`~ledger.ground.paths.open_regular`: never through a link,
    without waiting on a pipe) and examined through what was opened; anything that cannot be
    opened so takes the slower way by its name."""
    try:
        file = open_regular(Path(path))
    except OSError as oserr:
        pass_on_interruption(oserr)
        return _same_bytes_by_name(Path(path), data, refused)
    with file:
        try:
            fd = file.fileno()
            if os.fstat(fd).st_size != len(data):
                return False
            held = os.read(fd, len(data) + 1)
            while len(held) < len(data):  # a short read before the end (a signal): read on
                more = os.read(fd, len(data) + 1 - len(held))
                if not more:
                    break
                held += more
            return held == data
        except OSError as exc:
            pass_on_interruption(exc)
            if refused is None:
                return False
            raise os_error(exc, f"cannot read {refused}", STORAGE_ERROR) from None


def _same_bytes_by_name(path: Path, data: bytes, refused: str | None) -> bool:
    try:
        status = os.lstat(path)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False
    if not stat.S_ISREG(status.st_mode) or status.st_size != len(data):
        return False
    if refused is not None:
        return read_bytes(path, refused) == data
    try:
        with open_regular(path) as file:
            return file.read() == data
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False


def discard(path: "str | os.PathLike[str]") -> None:
    """Remove the file ``path`` if it is there, as cleanup after a failure or of a leftover: best
    effort, never raising, so that an error here neither hides the failure being cleaned up after
    nor stops the cleanup of the next file (a folder or a file this user may not remove stays)."""
    try:
        os.unlink(path)
    except OSError as oserr:
        pass_on_interruption(oserr)


def remove_empty_folder(directory: Path) -> None:
    """Remove ``directory``, a folder an interrupted export made, if it is empty (it holds what another
    process wrote into it meanwhile, or what this one could not remove: then it stays)."""
    try:
        directory.rmdir()
    except OSError as oserr:
        pass_on_interruption(oserr)


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
        leftovers = [entry for entry in os.scandir(parent) if entry.name.startswith(prefix)]
    except OSError as oserr:
        pass_on_interruption(oserr)
        return
    for leftover in leftovers:
        named = re.fullmatch(r"(?:.*\.)?(\d{1,10})(?:-\d+)?", leftover.name[len(prefix):], re.S)
        if named and not pid_alive(int(named.group(1))) and _owned(leftover, folders=True):
            remove_tree(leftover.path)  # another user's, in a shared parent (/tmp), is not ours to remove


def create_tagged_temp(folder: Path, prefix: str, suffix: str, named: Callable[[Path | None], None]) -> int:
    """Create a new file ``folder/<prefix><number><process tag><suffix>`` (``0600``) and return its open
    descriptor; ``named(path)`` is told each name before it is created (and ``named(None)`` when the
    name was taken), so a caller interrupted right after the create, before this returns, still
    knows what to remove. The process tag lets
    :func:`remove_abandoned_temp_files` remove it once this process is gone. ``OSError`` when the
    folder refuses it."""
    while True:
        path = folder / f"{prefix}{next(_TEMP_NUMBERS)}{process_tag()}{suffix}"
        named(path)
        try:
            return os.open(path, _CREATE, 0o600)
        except FileExistsError:  # an earlier process's, of this pid: never ours to remove
            named(None)


def process_tag() -> str:
    """``.<machine>.<pid>``: the end of a temporary folder's name that says which process made it, so
    that :func:`remove_abandoned_temp_folders` can tell when that process is gone. ``<machine>``
    (12 hex digits) stands for this host, its boot and its pid namespace: a temp folder shared with
    another machine (a network home) or with a container names their processes apart, and a live
    process of theirs is never taken for a dead one of ours."""
    return f".{_machine()}.{os.getpid()}"


def _machine() -> str:
    parts = [socket.gethostname()]
    for name in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        try:
            parts.append(str(os.stat(name).st_ino) if name.endswith("/pid") else Path(name).read_text().strip())
        except OSError as oserr:
            pass_on_interruption(oserr)
            parts.append("")
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:12]


def remove_abandoned_temp_folders(parent: Path, prefix: str) -> None:
    """Remove this user's folders ``<prefix>…<process tag>`` in ``parent`` (named with :func:`process_tag`)
    made on this machine by a process that is gone: what a killed process could not clean up
    (SIGKILL, the out-of-memory killer). Never a link, another user's folder, another machine's or
    a live process's. Best effort: a folder that cannot be listed or removed is left."""
    for entry in _abandoned(parent, prefix, "", folders=True):
        remove_tree(entry.path)


def remove_abandoned_temp_files(parent: Path, prefix: str, suffix: str) -> None:
    """Remove this user's regular files ``<prefix>…<process tag><suffix>`` in ``parent`` left by a process
    of this machine that is gone, as :func:`remove_abandoned_temp_folders` does folders."""
    for entry in _abandoned(parent, prefix, suffix, folders=False):
        discard(entry.path)


def _abandoned(parent: Path, prefix: str, suffix: str, *, folders: bool) -> Iterator[os.DirEntry[str]]:
    """This user's folders (or regular files) ``<prefix>…<process tag><suffix>`` in ``parent`` whose process
    was on this machine and is gone; never a link."""
    machine = _machine()
    try:
        entries = [entry for entry in os.scandir(parent) if entry.name.startswith(prefix)
                   and entry.name.endswith(suffix) and len(entry.name) > len(prefix) + len(suffix)]
    except OSError as oserr:
        pass_on_interruption(oserr)
        return
    for entry in entries:
        tagged = entry.name[len(prefix):len(entry.name) - len(suffix)]
        named = re.fullmatch(r".*\.([0-9a-f]{12})\.(\d{1,10})", tagged, re.S)
        if named is None or named.group(1) != machine or pid_alive(int(named.group(2))):
            continue
        if _owned(entry, folders=folders):
            yield entry


def _owned(entry: os.DirEntry[str], *, folders: bool) -> bool:
    """Whether ``entry`` is a folder (or a regular file) of this user's, never a link."""
    try:
        kind = entry.is_dir(follow_symlinks=False) if folders else entry.is_file(follow_symlinks=False)
        return kind and entry.stat(follow_symlinks=False).st_uid == os.geteuid()
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False
