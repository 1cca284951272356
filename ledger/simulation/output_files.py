"""The files ``ledger simulate`` writes where its user says (``--per-run``, ``--emit``, ``--plot``):
checked before any work, then each written whole or not at all (docs/simulate.md)."""

from __future__ import annotations

import io
import os
import stat
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..ground import errors as E
from ..ground.errors import LedgerError, pass_on_interruption
from ..ground.paths import folder_inputs, fs_path
from ..model.package import refuse_output_in_package
from ..package_tools.atomic_files import fsync_dir, write_atomic


def check_output_file(path: str | os.PathLike[str], option: str) -> Path:
    """Refuse, before any work, an output file that cannot be written: its folder missing or not
    writable, or the path a folder or a read-only file (``INVALID_ARGUMENT`` naming ``option``)."""
    target = fs_path(path, option)
    refuse_output_in_package(target, option)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise LedgerError(E.INVALID_ARGUMENT, f"{option} {target}: is a folder; give a file name")
    if not folder.is_dir():
        raise LedgerError(E.INVALID_ARGUMENT, f"{option} {target}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
        raise LedgerError(E.INVALID_ARGUMENT, f"{option} {target}: cannot write there "
                          f"({'the file system is read-only' if read_only else 'permission denied'})")
    return target


def check_distinct_outputs(outputs: Mapping[str, str | os.PathLike[str] | None],
                           inputs: Iterable[str | os.PathLike[str] | None]) -> None:
    """Refuse, before any work, two of ``outputs`` (option → path) naming one file, or an output naming
    one of ``inputs`` (files, or folders: their ``*.jsonl``), which writing it would replace, or a
    ``*.jsonl`` output in an input folder, which simulating that folder again would read as a journal
    (``INVALID_ARGUMENT`` naming both). Outputs that are no regular file (``/dev/stdout``) may be shared."""
    read, folders = set(), set()
    for entry in inputs:
        if entry is None:
            continue
        path = fs_path(entry, "input")
        if path.is_dir():
            folders.add(os.path.realpath(path))
        for file in folder_inputs(path, (".jsonl",), "journal") if path.is_dir() else [path]:
            read.add(os.path.realpath(file))
    seen: dict[str, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        given = fs_path(path, option)
        if given.exists() and not stat.S_ISREG(given.stat().st_mode):
            continue
        target = os.path.realpath(given)
        if target in read:
            raise LedgerError(E.INVALID_ARGUMENT, f"{option} {path}: is an input of this command; writing it would "
                              "replace it; give another file")
        if os.path.dirname(target) in folders and target.lower().endswith(".jsonl"):
            raise LedgerError(E.INVALID_ARGUMENT, f"{option} {path}: is in a folder of journals this command reads; "
                              "simulating that folder again would read it as a journal; write it elsewhere")
        if target in seen:
            raise LedgerError(E.INVALID_ARGUMENT, f"{option} {path}: is also the file of {seen[target]}; give each "
                              "output its own file")
        seen[target] = option


def write_output_file(path: str | os.PathLike[str], data: bytes, option: str) -> Path:
    """Write ``data`` to ``path`` (a link: to the file it names), whole: a temporary file beside it,
    flushed to disk, then renamed over it (keeping an existing file's mode) and the folder flushed,
    so a full disk, a signal or a crash leaves the file as it was, never empty or cut short. The
    folder must exist. A path that names no regular file but a device or a pipe (``/dev/stdout``)
    is written as it is, and the file this process's standard output or error is redirected to is
    written through that stream, after what was printed. ``STORAGE_ERROR`` naming ``option`` when it cannot be written; ``INVALID_ARGUMENT``
    when the file it names now lies in a case package (a link swapped in since the check)."""
    target = Path(path)
    try:
        status = os.stat(target)  # through links, /dev/stdout's too
    except FileNotFoundError:
        status = None
    except OSError as exc:
        pass_on_interruption(exc)
        raise _refused(option, target, exc) from None
    stream = _own_stream(status)
    if stream is not None:  # /dev/stdout redirected to a file: after what was printed, never over it
        try:
            stream.flush()
            stream.buffer.write(data)
            stream.flush()
        except OSError as exc:
            pass_on_interruption(exc)
            raise _refused(option, target, exc) from None
        return target
    if status is not None and not stat.S_ISREG(status.st_mode):
        try:
            with open(target, "wb") as handle:
                handle.write(data)
        except OSError as exc:
            pass_on_interruption(exc)
            raise _refused(option, target, exc) from None
        return target
    real = Path(os.path.realpath(target))
    refuse_output_in_package(real, option)  # again, as written: a link swapped in since the first check
    try:
        write_atomic(real, data, None if status is None else stat.S_IMODE(status.st_mode), folder_exists=True)
        fsync_dir(real.parent)
    except OSError as exc:
        pass_on_interruption(exc)
        raise _refused(option, target, exc, " (the file was left as it was)") from None
    return target


def _own_stream(status: os.stat_result | None) -> Any:
    """``sys.stdout`` or ``sys.stderr`` when ``status`` is the regular file this process's standard
    output or error is (``--per-run /dev/stdout`` with the output redirected to a file, or that
    file's own name): it is written through the stream, as a file replaced whole would lose what
    the command printed before. None otherwise (a terminal or a pipe is written as it is)."""
    if status is None or not stat.S_ISREG(status.st_mode):
        return None
    for stream in (sys.stdout, sys.stderr):
        try:
            own = os.fstat(stream.fileno())
        except (AttributeError, ValueError, OSError, io.UnsupportedOperation) as oserr:
            pass_on_interruption(oserr)
            continue
        if (own.st_dev, own.st_ino) == (status.st_dev, status.st_ino) and hasattr(stream, "buffer"):
            return stream
    return None


def _refused(option: str, target: Path, exc: OSError, outcome: str = "") -> LedgerError:
    return LedgerError(E.STORAGE_ERROR, f"{option} {target}: cannot write: {exc.strerror or exc}{outcome}")
