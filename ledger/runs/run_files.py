"""Finding and reading run files: the trajectories a folder gives, ``.gz`` decompressed, none past
:data:`RUN_FILE_BYTES_MAX` (docs/runs.md).
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import zlib
from pathlib import Path
from typing import IO, Any, Iterable, Mapping

from ..ground import errors as E
from ..ground.arguments import check_iterable
from ..ground.descriptors import open_to_read
from ..ground.errors import LedgerError, pass_on_interruption
from ..ground.paths import EXPORT_FILE_BYTES_MAX, STORAGE_ERRNOS, folder_inputs, fs_path, input_below, os_error

_EXTENSIONS = (".gz", ".json", ".jsonl", ".traj")
#: The names a folder's trajectories have: each of these, maybe gzipped.
_TRAJECTORY_NAMES = (".json", ".jsonl", ".traj", ".json.gz", ".jsonl.gz", ".traj.gz")

#: The most bytes a run file (a trajectory, or one line of a steps file) may hold, decompressed:
#: the largest observation any analysis config lets a journal store fits; a larger one (a gzip
#: file that expands a thousandfold) is refused, told without reading or decompressing it whole.
RUN_FILE_BYTES_MAX = EXPORT_FILE_BYTES_MAX


def open_run_file(path: Path) -> IO[bytes]:
    """The run file ``path`` to read, decompressed when it is ``.gz``, closed through
    :func:`~ledger.ground.descriptors.close_descriptor` (a hard link to a ledger open here keeps its locks)."""
    raw = open_to_read(path)
    return _GzipOfItsOwn(raw) if path.name.lower().endswith(".gz") else raw


class _GzipOfItsOwn(gzip.GzipFile):
    """A gzip reader that closes the file it reads (a ``GzipFile`` given a file object leaves it open)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        try:
            super().__init__(fileobj=raw, mode="rb")
        except BaseException:
            raw.close()
            raise

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def _too_large(path: Path, line: int | None = None) -> ValueError:
    """A run file, or ``line`` of a steps file, past :data:`RUN_FILE_BYTES_MAX`."""
    packed = " once decompressed" if path.name.lower().endswith(".gz") else ""
    if line is not None:
        return ValueError(f"line {line} holds more than {RUN_FILE_BYTES_MAX} bytes{packed}, more than one step "
                          "may: leave out what no journal keeps")
    return ValueError(f"holds more than {RUN_FILE_BYTES_MAX} bytes{packed}, more than a run file may: split it, "
                      "or leave out what no journal keeps")


def read_whole(path: Path) -> bytearray:
    """The bytes of the run file ``path`` (decompressed when it is ``.gz``); ``ValueError`` past
    :data:`RUN_FILE_BYTES_MAX`, read no further than that."""
    with open_run_file(path) as handle:
        buffer = bytearray()
        while len(buffer) <= RUN_FILE_BYTES_MAX and (chunk := handle.read(1 << 20)):
            buffer += chunk
    if len(buffer) > RUN_FILE_BYTES_MAX:
        raise _too_large(path)
    return buffer  # decoded as it is: no copy of a file that may be large


#: How much of a steps file's line is read at a time.
_LINE_CHUNK_BYTES = 1 << 20


def run_file_lines(handle: IO[bytes], path: Path) -> Iterable[bytes | bytearray]:
    """The lines of a steps file; ``ValueError`` for one past :data:`RUN_FILE_BYTES_MAX`, read no
    further than that. A long line is gathered a chunk at a time into one buffer: ``readline`` with
    the bound as its limit holds the pieces it read beside the line it joins them into, twice the
    bound in memory for a line that is then refused."""
    number = 0
    while piece := handle.readline(_LINE_CHUNK_BYTES):
        number += 1
        line = piece
        if not piece.endswith(b"\n") and len(piece) == _LINE_CHUNK_BYTES:  # more of the line to come
            line = bytearray(piece)
            while len(line) <= RUN_FILE_BYTES_MAX and (piece := handle.readline(_LINE_CHUNK_BYTES)):
                line += piece
                if piece.endswith(b"\n"):
                    break
        if len(line) > RUN_FILE_BYTES_MAX:
            raise _too_large(path, number)
        yield line


def name_stem(path: Path) -> str:
    name = path.name
    while name.lower().endswith(_EXTENSIONS):
        name = name[:name.rindex(".")]
    return name


def format_of(path: Path, requested: str, data: Any = None) -> str:
    if requested != "auto":
        return requested
    name = path.name.lower()
    if name.removesuffix(".gz").endswith(".jsonl"):
        return "steps"
    if isinstance(data, Mapping) and isinstance(data.get("trajectory"), list):
        return "swe-agent"
    return "mini-swe-agent"


#: How a journal begins (a run import's output, which ``--recursive`` would not read as a run): an operation.
_JOURNAL_START = re.compile(rb'(?:\xef\xbb\xbf)?\s*\{\s*"op"\s*:')


def _not_a_journal(entry: os.DirEntry) -> bool:
    """False for a ``*.jsonl`` regular file whose first line is a journal's (``{"op": …``): the
    folders of an earlier import's journals hold no trajectory to point at. Anything unreadable counts."""
    if not entry.name.lower().endswith(".jsonl") or not entry.is_file(follow_symlinks=False):
        return True
    try:
        with open_to_read(entry.path) as file:
            return _JOURNAL_START.match(file.read(256)) is None
    except OSError as oserr:
        pass_on_interruption(oserr)
        return True


def input_files(paths: Iterable[str | os.PathLike[str]], recursive: bool = False,
                unread: list[tuple[Path, Path]] | None = None, skip: Path | None = None,
                unlisted: list[tuple[Path, OSError]] | None = None) -> list[Path]:
    """Files named by ``paths``: a file as is, a folder as every trajectory in it (``*.json``,
    ``*.traj``, ``*.jsonl``, each maybe ``.gz``, in any letter case), sorted by name, and in its
    subfolders when ``recursive`` (``skip``, the output folder, passed over; a subfolder that cannot be
    listed appended to ``unlisted``). Without it, ``(folder, a trajectory below it)`` of each folder
    whose subfolders hold one is appended to ``unread``. ``INVALID_ARGUMENT`` for a path that does not
    exist, an entry so named that is no regular file (:func:`~ledger.ground.paths.folder_inputs`), or
    no trajectory at all (naming one its subfolders hold; ``STORAGE_ERROR`` when one could not be listed)."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]  # one path, not its characters
    found: list[Path] = []
    below: list[tuple[Path, Path]] = []
    for entry in check_iterable(paths, "paths", "a list of trajectory files or folders"):
        path = fs_path(entry, "trajectory")
        if path.is_dir():
            found += folder_inputs(path, _TRAJECTORY_NAMES, "trajectory", recursive, skip, unlisted)
            deeper = None if recursive else input_below(path, _TRAJECTORY_NAMES, skip, accept=_not_a_journal)
            if deeper is not None:
                below.append((path, deeper))
        elif path.is_file():
            found.append(path)
        elif path.exists():  # a pipe would wait for a writer forever, a device never ends
            raise LedgerError(E.INVALID_ARGUMENT, f"{path}: not a regular file or folder (a pipe or a device); "
                              "save the run to a file first")
        else:
            raise LedgerError(E.INVALID_ARGUMENT, f"{path}: no such trajectory file or folder")
    if not found and unlisted:
        folder, exc = unlisted[0]
        raise os_error(exc, f"no trajectory to import, and the folder {folder} cannot be listed")
    if not found:
        hint = f"; {below[0][0]} holds them in subfolders ({below[0][1]}): give --recursive" if below else ""
        raise LedgerError(E.INVALID_ARGUMENT, f"no trajectory to import (*.json, *.traj, *.jsonl, each maybe .gz){hint}")
    if unread is not None:
        unread += below
    return found


#: What importing one run file may fail with, each named by :func:`failure` in the summary's errors.
FILE_FAILURES = (OSError, EOFError, UnicodeDecodeError, ValueError, RecursionError, zlib.error, LedgerError)

#: The errors only a write meets (a full disk, a quota, a file size limit, a read-only file system): a run
#: file's import failing so failed on its journal, never on the file read.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def failure(exc: BaseException, path: Path, out: Path, fmt: str) -> dict[str, str]:
    """The summary's error of the run file ``path`` whose import into ``out`` (read as ``fmt``) failed with
    ``exc`` (one of :data:`FILE_FAILURES`): ``{"file", "code", "reason"}``, the code ``STORAGE_ERROR`` when
    the machine refused a read or write, else ``INVALID_ARGUMENT``."""
    if isinstance(exc, (zlib.error, gzip.BadGzipFile)):
        reason = f"not gzip this import can read: {exc}"
    elif isinstance(exc, EOFError):  # gzip's words for a stream that stops short
        reason = f"gzip cut short: {exc}"
    elif isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS:  # only a write meets these: the journal's
        reason = f"its journal cannot be written in {out}: {exc.strerror}"
    elif isinstance(exc, LedgerError):
        reason = exc.message
    elif isinstance(exc, RecursionError):  # Python's own words name its stack, not the file
        reason = "JSON nested deeper than Python reads (thousands of levels); no trajectory nests so deep"
    elif isinstance(exc, OSError) and exc.strerror:
        other = isinstance(exc.filename, (str, bytes)) and os.fsdecode(exc.filename) != str(path)
        reason = f"{os.fsdecode(exc.filename)}: {exc.strerror}" if other else exc.strerror  # a journal written
    else:
        reason = str(exc) or type(exc).__name__
        if fmt != "auto" and isinstance(exc, ValueError):
            reason += f" (read as --format {fmt}, as asked: without it, the file's name and content choose)"
    code = E.STORAGE_ERROR if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS else E.INVALID_ARGUMENT
    return {"file": str(path), "code": code, "reason": reason}
