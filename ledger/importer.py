"""``ledger import``: rebuild ``ledger.sqlite`` from an exported tree (SPEC 9).

The tree is read as untrusted input: only regular files inside it are accepted,
every event is replayed in memory from its request and compared byte for byte
(the same :class:`~ledger.replay.Replayer` verify uses), and the new ledger is
built beside its target and renamed into place only when all of it passed,
then exported and verified.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator

from . import errors as E
from ._files import fsync_dir
from .case import Case
from .config import AnalysisConfig
from .errors import LedgerError
from .errors import integrity_error as _bad
from .export import export_case
from .manifest import check_manifest, read_manifest
from .package import ANALYSIS_DIR, EXPORT_TEMP_PREFIX, LEDGER_FILE, content_path, event_path, is_ledger_own
from .paths import fs_path
from .replay import PackageSource, Replayer
from .storage import Storage
from .verify import VerifyReport, verify_case

Progress = Callable[[int], None]


def _walk_regular(root: Path) -> Iterator[tuple[str, Path]]:
    """Every file below ``root`` as (posix relative path, path); links and specials refused."""
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(directory, name)
            info = os.lstat(full)
            relative = full.relative_to(root).as_posix()
            if stat.S_ISLNK(info.st_mode):
                raise LedgerError(E.INVALID_ARGUMENT, f"import accepts no links: {relative}")
            if name in dirnames:
                continue
            if not stat.S_ISREG(info.st_mode):
                raise LedgerError(E.INVALID_ARGUMENT, f"import accepts only regular files: {relative}")
            yield relative, full


def _check_target(src: Path, dest: Path) -> bool:
    """True when importing in place (``dest`` is ``src``, whose ledger was lost)."""
    if not src.is_dir():
        raise LedgerError(E.INVALID_ARGUMENT, f"{src} is not a folder")
    in_place = dest.resolve() == src.resolve()
    if in_place:
        if (src / LEDGER_FILE).exists():
            raise LedgerError(E.CASE_EXISTS, f"{src} already has a {LEDGER_FILE}; import into a new folder")
    elif dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise LedgerError(E.CASE_EXISTS, f"{dest} exists and is not empty")
    elif dest.resolve().is_relative_to(src.resolve()):
        raise LedgerError(E.INVALID_ARGUMENT, f"{dest} is inside {src}: the new case would become one of "
                          "the source package's inputs; import to a folder outside it")
    return in_place


def _event_files(files: dict[str, Path], head_seq: int) -> dict[int, str]:
    """seq → relative path of every exported event file; every seq up to the manifest's head must be there."""
    events: dict[int, str] = {}
    for relative in files:
        pure = PurePosixPath(relative)
        if pure.parts[0] != ANALYSIS_DIR or pure.name.startswith(EXPORT_TEMP_PREFIX):
            continue
        if (len(pure.parts) == 4 and pure.parts[1:3] == ("case", "events")) or (
                len(pure.parts) == 5 and pure.parts[1] == "budgets" and pure.parts[3] == "events") or (
                len(pure.parts) == 5 and pure.parts[1] == "evidence" and pure.parts[2] != "content"):
            try:
                seq = json.loads(files[relative].read_bytes()).get("seq")
            except (ValueError, AttributeError, RecursionError):
                raise _bad(None, f"{relative} is not an event") from None
            if type(seq) is not int or seq in events:
                raise _bad(seq if type(seq) is int else None, f"{relative} repeats or lacks an event seq")
            events[seq] = relative
    # the manifest is the export's commit point: events after its head are ignored
    missing = next((i for i in range(1, head_seq + 1) if i not in events), None)
    if missing is not None:
        raise _bad(missing, f"the export has no event {missing} (its manifest names head seq {head_seq})")
    return events


def _copy_inputs(files: dict[str, Path], build_dir: Path) -> None:
    build_dir.mkdir(parents=True)
    for relative, full in files.items():
        if is_ledger_own(PurePosixPath(relative)):
            continue
        target = build_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(full, target)
        shutil.copymode(full, target)  # an executable or read-only input stays so


def _rebuild(building: Path, build_dir: Path, files: dict[str, Path], events: dict[int, str],
             manifest: dict[str, Any], progress: Progress | None) -> None:
    """Replay every event up to the manifest's head into a new ledger at ``building``, in one transaction."""

    def content_of(sha: str) -> bytes | None:
        relative = content_path(sha)
        return files[relative].read_bytes() if relative in files else None

    head_seq = manifest["head"]["seq"]
    storage = Storage.create(building, AnalysisConfig().storage)
    try:
        with storage.write():
            storage.apply_migrations()
            replayer = Replayer(PackageSource(build_dir, content_of), storage.append)
            for seq in range(1, head_seq + 1):
                relative = events[seq]
                body, stream_seq = replayer.apply(seq, files[relative].read_bytes())
                if event_path(replayer.last_stream, body["revision"], stream_seq) != relative:
                    raise _bad(seq, f"{relative} is not where event {seq} belongs")
                if progress:
                    progress(1)
            replayer.finish()
            check_manifest(manifest, storage.conn, head_seq)
    finally:
        storage.close()


def import_tree(source: str | os.PathLike[str], to: str | os.PathLike[str] | None = None,
                progress: Progress | None = None) -> VerifyReport:
    """Rebuild a case package from an exported tree (SPEC 9) and verify it.

    ``source`` is a package folder with ``manifest.json`` and ``analysis/``; ``to``
    a new (absent or empty) folder, or ``source`` itself when its ``ledger.sqlite``
    was lost. Inputs (``sources/``, ``data/``, other files) are copied. Only
    regular files inside the tree are accepted (``INVALID_ARGUMENT`` for links,
    devices, ``..``); every event is re-applied and compared byte for byte
    (``INTEGRITY_ERROR`` naming the seq). Writes nothing if anything fails.
    """
    src = fs_path(source, "import source")
    dest = fs_path(to, "import target") if to is not None else src
    in_place = _check_target(src, dest)
    manifest = read_manifest(src)
    if manifest is None:
        raise LedgerError(E.INVALID_ARGUMENT, f"{src} has no manifest.json: not an exported case")
    files = dict(_walk_regular(src))
    events = _event_files(files, manifest["head"]["seq"])
    # a new package is built in a hidden sibling folder and renamed into place at the end,
    # so an interrupted import leaves the target absent and can simply be run again
    build_dir = src if in_place else dest.parent / f".{dest.name}.importing-{os.getpid()}-{time.time_ns()}"
    building = build_dir / (LEDGER_FILE + "-import")
    scratch_files = [Path(str(building) + suffix) for suffix in ("", "-wal", "-shm", "-lock")]
    try:
        if not in_place:
            _copy_inputs(files, build_dir)
        for leftover in scratch_files:
            leftover.unlink(missing_ok=True)
        _rebuild(building, build_dir, files, events, manifest, progress)
        for suffix in ("-wal", "-shm"):
            # a lost ledger's log must never be replayed onto the rebuilt file: keep it aside
            stale = build_dir / (LEDGER_FILE + suffix)
            if stale.exists():
                os.replace(stale, build_dir / f"{LEDGER_FILE}{suffix}.orphaned-{time.time_ns()}")
        os.replace(building, build_dir / LEDGER_FILE)
        fsync_dir(build_dir)
        if not in_place:
            if dest.exists():
                dest.rmdir()  # checked empty above
            os.rename(build_dir, dest)
            fsync_dir(dest.parent)
    except BaseException:
        for leftover in scratch_files:
            leftover.unlink(missing_ok=True)
        if not in_place:
            shutil.rmtree(build_dir, ignore_errors=True)
        raise
    for leftover in scratch_files:
        leftover.unlink(missing_ok=True)
    with Case.open(dest) as case:
        export_case(case)
    return verify_case(dest)
