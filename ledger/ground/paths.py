"""Caller-supplied file-system paths, checked before any file is touched.

A ``str`` path that holds a lone surrogate other than those ``os.fsdecode``
produces for undecodable bytes (``"\\ud800"``) has no file-system name at all;
the standard library raises ``UnicodeEncodeError`` deep inside ``open`` or
``stat``. :func:`fs_path` turns that into ``INVALID_ARGUMENT`` up front.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import functools
import os
import stat
import sys
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from .descriptors import close_descriptor, file_over, refuse_held
from .errors import INVALID_ARGUMENT, STORAGE_ERROR, LedgerError, quoted, pass_on_interruption

#: ``OSError`` numbers that mean the file system refused (or the process reached its open-file limit), not that
#: the path was wrong.
STORAGE_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EIO,
                            errno.EFBIG, errno.EBUSY, errno.EMFILE, errno.ENFILE})


def file_kind(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) is, for messages: ``a folder``, ``a pipe (FIFO)``,
    ``a socket``, ``a device``, ``a symbolic link`` or ``a regular file``."""
    for test, kind in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return kind
    return "a device"


def fs_path(path: str | bytes | os.PathLike[str], what: str = "path") -> Path:
    """``path`` as a :class:`Path`; ``INVALID_ARGUMENT`` when it cannot name a file.

    Accepts ``str``, ``bytes`` (decoded as the file system does) and path-like
    objects. Refuses other types, the empty string (which would silently mean the
    current folder), NUL characters and lone surrogates. ``what`` names the
    argument in the message (``"case path"``, ``"config file"``).
    """
    try:
        text = os.fsdecode(path)
    except TypeError:
        raise LedgerError(INVALID_ARGUMENT, f"{what} must be a str, bytes or path-like object, "
                          f"got {type(path).__name__}") from None
    if not isinstance(text, str):  # a PathLike whose __fspath__ returned bytes was decoded; anything else is odd
        raise LedgerError(INVALID_ARGUMENT, f"{what} must name a file, got {type(path).__name__}")
    if text == "":
        raise LedgerError(INVALID_ARGUMENT, f"{what} is empty (give a path; '.' is the current folder)")
    if "\x00" in text:
        raise LedgerError(INVALID_ARGUMENT, f"{what} {ascii(text)} contains a NUL character")
    try:
        os.fsencode(text)
    except UnicodeError as exc:
        raise LedgerError(INVALID_ARGUMENT, f"{what} {ascii(text)} cannot name a file: {exc}") from None
    try:
        os.lstat(text)
    except OSError as exc:  # only a name the system cannot take is refused here: a missing file is the caller's
        pass_on_interruption(exc)
        if exc.errno == errno.ENAMETOOLONG:
            size, longest = len(os.fsencode(text)), max(len(os.fsencode(part)) for part in text.split(os.sep))
            why = (f"the path, of {size} bytes, is longer than this system takes" if longest <= 255 else
                   "the name, or a folder's name in it, is longer than this file system takes")
            raise LedgerError(INVALID_ARGUMENT, f"{what} {quoted(text, 100)} cannot name a file: {why}") from None
    return Path(text)


@functools.cache
def file_names_are_utf8() -> bool:
    """Whether this Python gives and takes file names as UTF-8 (a UTF-8 locale, or UTF-8 mode)."""
    return codecs.lookup(sys.getfilesystemencoding()).name == "utf-8"


def check_name_encoding(name: str, what: str = "the package file name") -> None:
    """``STORAGE_ERROR`` when ``name``, a name in a case package, is not ASCII while this Python gives
    and takes file names in another encoding than UTF-8 (a Latin-1 locale, or ``PYTHONUTF8=0`` under
    ``LC_ALL=C``): the package's names are UTF-8, so such a name would be looked up, listed and
    compared by other bytes than the file's, and a file that is there taken for a missing one
    (docs/concepts.md, "File names")."""
    if name.isascii() or file_names_are_utf8():
        return
    encoding = sys.getfilesystemencoding()
    try:  # a name as listed holds the file's bytes in this encoding: shown as the UTF-8 they are
        name = os.fsencode(name).decode("utf-8")
    except UnicodeDecodeError:  # bytes that are no UTF-8 either: shown as \xNN where Python could not decode them
        name = os.fsencode(name).decode("utf-8", "backslashreplace") if not name.isprintable() else name
    except UnicodeEncodeError:
        pass  # a name from the ledger: UTF-8 text already
    raise LedgerError(STORAGE_ERROR, f"{what} {quoted(name, 200)} is not ASCII, and this Python "
                      f"reads and writes file names as {encoding}, not as UTF-8, in which case-ledger names them: run "
                      "Python in UTF-8 mode (PYTHONUTF8=1 in the environment, as in 'PYTHONUTF8=1 ledger verify CASE', or "
                      "python -X utf8) or under a UTF-8 locale",
                      file_name_encoding=encoding)


def require_utf8(path: Path, refusal: str) -> None:
    """``INVALID_ARGUMENT`` ``"<path>: <refusal>"`` when ``path`` is not UTF-8 text (a name of bytes
    that are not UTF-8, held as surrogate escapes), for what takes paths as text (DuckDB,
    Datasette); the path is shown with such bytes as ``\\xNN``."""
    text = str(path)
    check_name_encoding(text, "the path")  # given as UTF-8 text, the path would name other bytes
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text).decode("utf-8", "backslashreplace")
        raise LedgerError(INVALID_ARGUMENT, f"{shown}: {refusal}") from None


def device_and_inode(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``path``: what every path of one file shares (a link, a hard link, a bind
    mount); None when it cannot be looked at (moved, removed)."""
    try:
        info = os.stat(path)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return None
    return info.st_dev, info.st_ino


#: Most links followed before a chain of them is called a loop (Linux's own bound, ELOOP).
LINKS_FOLLOWED_MAX = 40


def where_link_leads(link: str | os.PathLike[str]) -> str:
    """Where the symbolic link ``link``, which leads nowhere, goes wrong, in words: ``to X, which is not
    there`` (X as the link holds it, then, unless it is that absolute path already, the path the system
    follows it to: from the real folder the link is in), ``to X, a link to Y, which is not there`` along
    a chain, or ``to X, …: a loop of links`` (also one among the folders on the way)."""
    steps: list[str] = []
    at = os.fsdecode(os.fspath(link))
    seen = {os.path.realpath(os.path.dirname(at) or ".") + "/" + os.path.basename(at)}
    for _ in range(LINKS_FOLLOWED_MAX):
        try:
            target = os.fsdecode(os.readlink(at))
        except OSError as oserr:
            pass_on_interruption(oserr)
            return f"to {', a link to '.join(steps) or '?'}, which cannot be read"
        # as the system follows it: from the real folder the link is in, its folders followed too
        joined = os.path.join(os.path.dirname(at), target)
        folder = os.path.dirname(joined) or "."
        if (way := _why_not_there(folder)).startswith(": a loop"):  # its folder cannot be reached: as written
            steps.append(target if os.path.isabs(target) else f"{target} ({os.path.abspath(joined)})")
            return f"to {', a link to '.join(steps)}{way}"
        place = os.path.join(os.path.realpath(folder), os.path.basename(joined))
        steps.append(target if os.path.isabs(target) and place == target else f"{target} ({place})")
        if place in seen:
            return f"to {', a link to '.join(steps)}: a loop of links"
        if not os.path.islink(place):
            return f"to {', a link to '.join(steps)}{_why_not_there(place)}"
        seen.add(place)
        at = place
    return f"to {', a link to '.join(steps[:3])}, …: a chain of more than {LINKS_FOLLOWED_MAX} links"


def _why_not_there(place: str) -> str:
    """How the end of a chain of links fails (:func:`where_link_leads`): not there, or a loop of links
    among the folders on its way."""
    try:
        os.stat(place)
    except OSError as oserr:
        pass_on_interruption(oserr)
        if oserr.errno == errno.ELOOP:
            return ": a loop of links among the folders on its way"
        return ", which is not there"
    return ", which is there now"


def refuse_link_to_nothing(path: Path, what: str) -> None:
    """``INVALID_ARGUMENT`` when ``path`` (``what`` names it), or the nearest of its folders that is
    not there, is a symbolic link that leads nowhere: a folder cannot be made there (the system's
    answer, "File exists", names no cause)."""
    for at in (path, *path.parents):
        if os.path.exists(at):
            return
        if os.path.islink(at):
            named = f"{path} ({what})" if at == path else f"{at}, a folder above {path} ({what}),"
            raise LedgerError(INVALID_ARGUMENT, f"{named} is a link that leads nowhere ({where_link_leads(at)}); give "
                              "a folder, or remove the link", path=str(at))


def read_bytes(path: Path, what: str, limit: int | None = None) -> bytes:
    """The bytes of the file ``path`` (``what`` names it in a message), or with ``limit`` its first
    ``limit`` bytes at most (a caller that bounds a file reads ``bound + 1`` and compares);
    ``STORAGE_ERROR`` when the file system refuses the read (no permission, I/O error): a file
    this user may not read is not a file that differs, and never makes a history look edited. A
    package's file: read only as the regular file it was looked at as (:func:`open_regular`)."""
    try:
        with open_regular(path) as file:
            return file.read(limit) if limit is not None else file.read()
    except OSError as exc:
        raise os_error(exc, f"cannot read {what}", STORAGE_ERROR) from None


#: The most bytes an exported event or content file holds: an event is at most ``event_bytes_max``
#: and a content at most ``evidence_artifact_bytes_max``, and no analysis config sets either past
#: 1 GiB (schemas/analysis-config-v1.json). A file of an export holding more is none of its files.
EXPORT_FILE_BYTES_MAX = 1024 ** 3


def open_regular(path: Path) -> BinaryIO:
    """The regular file ``path`` of a package, opened to read: never through a symbolic link
    (``ELOOP``), never waiting on a pipe, and refused (``EINVAL``) unless what was opened is a
    regular file. A package's files are checked before they are read; this keeps one swapped for a
    link (to a file outside the package) or a pipe in between from being read or blocking."""
    refuse_held(path)  # a hard link to a ledger open in this process: a descriptor of it would be kept
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:  # looked at before it is wrapped: open() of a folder's descriptor raises, leaving it open
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "no regular file now (it changed since it was looked at)", str(path))
        return file_over(fd)  # closed through close_descriptor: a ledger's locks are kept
    except BaseException:
        close_descriptor(fd)
        raise


def bytes_at_most(path: Path, most: int) -> bytes | None:
    """The bytes of the regular file ``path`` (:func:`open_regular`), or None when it holds more
    than ``most``: its size is looked at before anything is read, and at most ``most + 1`` bytes are
    read (a file growing meanwhile), so a huge or sparse file is never read whole. ``OSError`` as
    ``open`` raises it."""
    with open_regular(path) as file:
        size = os.fstat(file.fileno()).st_size
        if size > most:
            return None
        data = file.read(size + 1)  # read(n) sets n bytes aside first: the size, not the bound
        while size < len(data) <= most and (more := file.read(min(1 << 20, most + 1 - len(data)))):
            data += more  # it grew since
    return None if len(data) > most else data


def read_bytes_at_most(path: Path, what: str, most: int) -> bytes | None:
    """:func:`bytes_at_most`, the file system's refusal as :func:`read_bytes` reports it (``STORAGE_ERROR``)."""
    try:
        return bytes_at_most(path, most)
    except OSError as exc:
        raise os_error(exc, f"cannot read {what}", STORAGE_ERROR) from None


def os_error(exc: OSError, what: str, default_code: str = INVALID_ARGUMENT) -> LedgerError:
    """The ``LedgerError`` for an ``OSError`` met while doing ``what``: ``STORAGE_ERROR`` when the
    file system refused (read-only, permission, full, I/O), else ``default_code``; the caller's own
    interruption raised again (:func:`~ledger.ground.errors.pass_on_interruption`), never converted."""
    pass_on_interruption(exc)
    code = STORAGE_ERROR if exc.errno in STORAGE_ERRNOS else default_code
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.filename and getattr(exc, "filename2", None):  # a rename or a copy: the target may be in the way
        where = f" (from {exc.filename} to {exc.filename2})"
    if exc.errno == errno.ENOENT and current_folder_gone():  # a relative path, or none, resolves against it
        where += "; the current folder no longer exists (removed or moved while in use): cd to one that does"
    return LedgerError(code, f"{what}: {exc.strerror or exc}{where}")


def current_folder_gone() -> bool:
    """Whether the current folder was removed (or moved away) while in use: a relative path then names nothing."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False
    return False


def folder_inputs(folder: Path, suffixes: tuple[str, ...], what: str, recursive: bool = False,
                  skip: Path | None = None, unlisted: list[tuple[Path, OSError]] | None = None) -> list[Path]:
    """The files of ``folder`` whose names end in one of ``suffixes``, in any letter case
    (``RUN.JSONL`` too), sorted by name: what ``ledger simulate`` and ``ledger runs import`` take from
    a folder. Its subfolders only when ``recursive``, at any depth, each subfolder's files where its
    name sorts (a link to a folder is not followed; ``skip``, the command's output folder, is passed
    over; a subfolder that cannot be listed is appended to ``unlisted`` with its error and passed over,
    or, without ``unlisted``, refused). An entry so named that is no regular file (a link to nothing, a
    pipe, a folder when not ``recursive``) is ``INVALID_ARGUMENT`` naming it (``what``: the kind of
    input), never left out without a word; a link to a regular file is taken. ``STORAGE_ERROR`` when
    ``folder`` itself cannot be listed."""
    found = []
    passed_over = _identity(skip)
    try:
        waiting = [iter(_sorted_listing(folder))]  # a stack of listings, not recursion: a tree may be thousands deep
    except OSError as exc:
        raise os_error(exc, f"cannot list the folder {folder}") from None
    while waiting:
        entry = next(waiting[-1], None)
        if entry is None:
            waiting.pop()
            continue
        if recursive and entry.is_dir(follow_symlinks=False):
            if passed_over is None or _identity(Path(entry.path)) != passed_over:
                try:
                    waiting.append(iter(_sorted_listing(entry.path)))
                except OSError as exc:
                    pass_on_interruption(exc)
                    if unlisted is None:
                        raise os_error(exc, f"cannot list the folder {entry.path}") from None
                    unlisted.append((Path(entry.path), exc))
            continue
        if not entry.name.lower().endswith(suffixes):
            continue
        try:
            regular = entry.is_file()  # through a link
        except OSError as oserr:
            pass_on_interruption(oserr)
            regular = False
        if not regular:
            raise LedgerError(INVALID_ARGUMENT, f"{entry.path}: named like a {what} but not a regular file (a link "
                              "to nothing, a pipe or a folder); move it out of the folder or give the files one by one")
        found.append(Path(entry.path))
    return found


def _identity(path: Path | None) -> tuple[int, int] | None:
    """``(device, inode)`` of ``path``, or ``None`` when there is none (no path, or nothing there)."""
    try:
        info = os.stat(path) if path is not None else None
    except (OSError, ValueError) as oserr:
        pass_on_interruption(oserr)
        return None
    return None if info is None else (info.st_dev, info.st_ino)


def _sorted_listing(folder: str | os.PathLike[str]) -> list[os.DirEntry[str]]:
    """The entries of ``folder`` sorted by name (``OSError`` as listing it gives)."""
    with os.scandir(folder) as listing:
        return sorted(listing, key=lambda entry: entry.name)


def input_below(folder: Path, suffixes: tuple[str, ...], skip: Path | None = None, depth: int = 3,
                accept: Callable[[os.DirEntry], bool] | None = None) -> Path | None:
    """A file named like an input (:func:`folder_inputs`) in a subfolder of ``folder``, up to ``depth``
    folders down, the shallowest first (links to folders not followed, nor ``skip``, the command's
    output folder; a folder that cannot be listed passed over; a file ``accept`` says is no input, such
    as a command's own output, passed over too), or ``None``: what reading ``folder`` without its
    subfolders leaves out (an agent writes each run into a folder of its own)."""
    passed_over = _identity(skip)
    waiting = [(folder, 0)]
    while waiting:
        current, level = waiting.pop(0)
        try:
            entries = _sorted_listing(current)
        except OSError as oserr:
            pass_on_interruption(oserr)
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if level < depth and (passed_over is None or _identity(Path(entry.path)) != passed_over):
                    waiting.append((Path(entry.path), level + 1))
            elif level and entry.name.lower().endswith(suffixes) and (accept is None or accept(entry)):
                return Path(entry.path)
    return None


# --- walking a tree without recursion --------------------------------------------------------------
# Python 3.11's os.walk, os.fwalk and shutil.rmtree call themselves once per folder level, so a tree
# about 1,000 folders deep (a path of some 2,000 characters, well within the system's limit) raised
# RecursionError. Every walk of a tree a user can reach goes through these instead.
def walk(top: str | os.PathLike[str], onerror: Callable[[OSError], None] | None = None) -> Iterator[
        tuple[str, list[str], list[str]]]:
    """``os.walk(top, onerror=onerror)`` (top down, links to folders listed among the folders but not
    entered), without recursion: each ``(folder, dirnames, filenames)`` is yielded before its folders
    are entered, in the order ``dirnames`` holds once the caller has sorted or pruned it."""
    waiting = [os.fspath(top)]
    while waiting:
        folder = waiting.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as exc:
            pass_on_interruption(exc)
            if onerror is not None:
                onerror(exc)
            continue
        dirnames, filenames = _sorted_out(entries)
        yield folder, dirnames, filenames
        for name in reversed(dirnames):
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                waiting.append(path)


def _sorted_out(entries: list[os.DirEntry[str]]) -> tuple[list[str], list[str]]:
    """The names of ``entries`` as ``(folders, others)``, a link to a folder among the folders, as
    ``os.walk`` and ``os.fwalk`` sort them; an entry that cannot be examined is among the others."""
    dirnames, filenames = [], []
    for entry in entries:
        try:
            is_folder = entry.is_dir()
        except OSError as oserr:
            pass_on_interruption(oserr)
            is_folder = False
        (dirnames if is_folder else filenames).append(entry.name)
    return dirnames, filenames


#: How a folder is opened to be walked or emptied: never through a link.
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK


def _open_listed(name: str, parent_fd: int) -> int | None:
    """A descriptor of the folder ``name`` in ``parent_fd``, opened through no link and checked to be
    the folder that was there when looked at (``None`` when it is no folder, cannot be opened, or was
    replaced in between, by a link say): never one outside the tree."""
    try:
        found = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if not stat.S_ISDIR(found.st_mode):
            return None
        fd = os.open(name, _FOLDER_FLAGS, dir_fd=parent_fd)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return None
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):
        os.close(fd)
        return None
    return fd


def fwalk(top: str, dir_fd: int) -> Iterator[tuple[str, list[str], list[str], int]]:
    """``os.fwalk(top, dir_fd=dir_fd)`` (top down, links not followed: a link to a folder is listed among
    the folders, never entered), without recursion: each ``(folder, dirnames, filenames, folder_fd)``
    is yielded before its folders are entered, in the order ``dirnames`` holds once the caller has
    sorted or pruned it. As with ``os.fwalk``, each folder is opened through its parent's descriptor
    (so no path grows past what the system can name) and one descriptor is held per level below
    ``top``; ``folder_fd`` is valid until the next item. ``top`` that is a link or no folder gives
    nothing; its other errors are raised. A subfolder that cannot be opened or listed (no descriptor
    left, a tree about as deep as the open-file limit), or that is no longer the folder listed, is
    passed over, as ``os.fwalk`` passes over what it cannot list."""
    try:
        fd: int | None = os.open(top, _FOLDER_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        pass_on_interruption(exc)
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return
        raise
    relative = top
    held: list[tuple[str, int, Iterator[str]]] = []  # (folder, its descriptor, its folders still to enter)
    try:
        while True:
            if fd is not None:
                try:
                    with os.scandir(fd) as listing:
                        entries = list(listing)
                except OSError as oserr:
                    os.close(fd)
                    pass_on_interruption(oserr)
                    if not held:
                        raise  # top itself cannot be listed
                else:
                    dirnames, filenames = _sorted_out(entries)
                    held.append((relative, fd, iter(dirnames)))
                    yield relative, dirnames, filenames, fd
                    held[-1] = (relative, fd, iter(list(dirnames)))  # as the caller left them
            if not held:
                return
            parent, parent_fd, waiting = held[-1]
            name = next(waiting, None)
            if name is None:
                os.close(parent_fd)
                held.pop()
                fd = None
                continue
            fd, relative = _open_listed(name, parent_fd), os.path.join(parent, name)
    finally:
        for _, open_fd, _ in held:
            os.close(open_fd)


def remove_tree(top: str | os.PathLike[str]) -> None:
    """``shutil.rmtree(top, ignore_errors=True)`` without recursion, and as safe: every folder is
    emptied through a descriptor opened through no link and checked to be the folder listed, so a
    folder swapped for a link meanwhile is never followed out of the tree (``top`` itself a link:
    nothing removed). Best effort: what cannot be removed (one descriptor is held per level: a tree
    about as deep as the open-file limit) is left."""
    parent, name = os.path.split(os.path.abspath(top))
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return
    held: list[tuple[str, int, Iterator[os.DirEntry[str]]]] = []  # (folder, its descriptor, entries to remove)
    try:
        top_fd = _open_listed(name, parent_fd)
        if top_fd is None:
            return
        held.append((name, top_fd, iter(_listed(top_fd))))
        while held:
            folder, fd, entries = held[-1]
            entry = next(entries, None)
            if entry is None:
                os.close(fd)
                held.pop()
                with contextlib.suppress(OSError):
                    os.rmdir(folder, dir_fd=held[-1][1] if held else parent_fd)
                continue
            if entry.is_dir(follow_symlinks=False):
                child = _open_listed(entry.name, fd)
                if child is not None:
                    held.append((entry.name, child, iter(_listed(child))))
                continue
            with contextlib.suppress(OSError):
                os.unlink(entry.name, dir_fd=fd)
    finally:
        for _, open_fd, _ in held:
            os.close(open_fd)
        os.close(parent_fd)


def _listed(fd: int) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(fd) as listing:
            return list(listing)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return []


def make_folders(path: str | os.PathLike[str]) -> None:
    """``Path(path).mkdir(parents=True, exist_ok=True)`` without recursion (``pathlib`` and
    ``os.makedirs`` call themselves once per folder they make): the missing folders are made from the
    top down; ``OSError`` as ``mkdir`` gives it (``FileExistsError`` where a file is in the way)."""
    missing = []
    folder = Path(path)
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    if (not missing and not folder.is_dir()) or (os.path.islink(folder) and not folder.exists()):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(folder))  # a file or a link to nothing
    for folder in reversed(missing):  # under a file: NotADirectoryError, as mkdir gives it
        try:
            os.mkdir(folder)
        except FileExistsError:
            if not folder.is_dir():  # made meanwhile, by another process: a folder is fine
                raise
