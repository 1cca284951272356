"""The case package on disk: its layout, the ledger's own files, source references,
input identity and where each event exports to (SPEC 2, 9).

```
<case>/ledger.sqlite      the source of truth (plus -wal, -shm, -lock)
<case>/manifest.json      exported pointer file
<case>/analysis/…         exported canonical JSON
<case>/sources/, data/, … the case's read-only inputs
```
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Iterable

from . import errors as E
from .canonical import canonical_sha256
from .errors import LedgerError
from .rules.common import check_source_ref_list
from .storage import LEDGER_FILE

MANIFEST_FILE = "manifest.json"
ANALYSIS_DIR = "analysis"
#: Temporary files of an interrupted export are the ledger's own too.
EXPORT_TEMP_PREFIX = ".ledger-tmp-"


def event_path(stream: str, revision: int, stream_seq: int) -> str:
    """Where an event exports to, relative to the package root: budget events per revision,
    every other event under ``analysis/case/events/``. An evidence event's stream is its own
    export path (``analysis/evidence/<revision>/<op>/…``, see :func:`evidence_path`)."""
    if stream.startswith(EVIDENCE_DIR):
        return stream
    if stream == "budget":
        return f"analysis/budgets/{revision:04d}/events/{stream_seq:08d}.json"
    return f"analysis/case/events/{stream_seq:08d}.json"


EVIDENCE_DIR = "analysis/evidence/"


def stored_stream(stream: str) -> str:
    """The ``events.stream`` column of an event of ``stream``: evidence events (whose stream is their
    export path, kept in ``evidence_files``) are stored in the ``case`` stream with ``stream_seq`` 0."""
    return "case" if stream.startswith(EVIDENCE_DIR) else stream


def evidence_path(revision: int, operation_id: str, name: str) -> str:
    """Export path of an evidence artifact: ``analysis/evidence/<revision>/<op>/<name>`` where ``<op>``
    is the first 32 hex digits of sha256(operation_id)."""
    folder = hashlib.sha256(operation_id.encode("utf-8")).hexdigest()[:32]
    return f"{EVIDENCE_DIR}{revision:04d}/{folder}/{name}"


def content_path(sha256: str) -> str:
    """Where a content row exports to."""
    return f"analysis/evidence/content/{sha256}.json"


def is_ledger_own(relative: PurePosixPath) -> bool:
    """True for ``ledger.sqlite*``, ``manifest.json`` and anything under ``analysis/`` (SPEC 2)."""
    parts = relative.parts
    if not parts:
        return False
    if len(parts) == 1 and (parts[0].startswith(LEDGER_FILE) or parts[0] == MANIFEST_FILE):
        return True
    return parts[0] == ANALYSIS_DIR


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve_source_refs(package: Path, refs: Iterable[str]) -> list[dict[str, str]]:
    """``[{"path", "sha256"}]`` for source references (SPEC 6.1).

    Each ref must be a normalized relative path to an existing regular file
    inside the package, not one of the ledger's own files; a symlink is
    followed only if its real path stays inside. ``SOURCE_REF_INVALID`` otherwise.
    """
    root = os.path.realpath(package)
    resolved = []
    for ref in check_source_ref_list(list(refs) if isinstance(refs, (list, tuple)) else refs):
        pure = PurePosixPath(ref)
        if (pure.is_absolute() or "\\" in ref or "\x00" in ref or str(pure) != ref
                or any(part in ("..", ".") for part in ref.split("/"))):
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} is not a normalized relative path inside the package")
        if is_ledger_own(pure):
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} is one of the ledger's own files")
        real = os.path.realpath(os.path.join(root, ref))
        if not real.startswith(root + os.sep):
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} leads outside the package")
        if is_ledger_own(PurePosixPath(os.path.relpath(real, root))):
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} leads to one of the ledger's own files")
        try:
            info = os.stat(real)
        except OSError:
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} does not exist") from None
        if not stat.S_ISREG(info.st_mode):
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} is not a regular file")
        if info.st_nlink > 1 and (info.st_dev, info.st_ino) in _own_file_ids(package):
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} is a hard link to one of the ledger's own files")
        try:
            digest = sha256_file(Path(real))
        except OSError as exc:
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} cannot be read: {exc.strerror}") from None
        resolved.append({"path": ref, "sha256": digest})
    return resolved

def _own_file_ids(package: Path) -> set[tuple[int, int]]:
    """(device, inode) of ``ledger.sqlite*`` and ``manifest.json``: hard links to them are not sources."""
    ids = set()
    for entry in os.scandir(package):
        if entry.name.startswith(LEDGER_FILE) or entry.name == MANIFEST_FILE:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            ids.add((info.st_dev, info.st_ino))
    return ids


def input_identity(root: Path, exported: set[str]) -> str:
    """sha256 over the sorted ``[relative path, sha256]`` of the package's inputs (SPEC 2).

    ``exported`` are the paths under ``analysis/`` that the ledger exported (they are not inputs).

    Excludes ``ledger.sqlite*``, ``manifest.json`` and the files under
    ``analysis/`` that the ledger exports (plus an interrupted export's temp
    files). A symlink contributes the sha256 of its target text, never bytes
    from outside the package.
    """
    entries = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            full = Path(directory, name)
            relative = full.relative_to(root).as_posix()
            pure = PurePosixPath(relative)
            if len(pure.parts) == 1 and (name.startswith(LEDGER_FILE) or name == MANIFEST_FILE):
                continue
            if pure.parts[0] == ANALYSIS_DIR and (relative in exported or name.startswith(EXPORT_TEMP_PREFIX)):
                continue
            if full.is_symlink():
                digest = hashlib.sha256(b"symlink:" + os.fsencode(os.readlink(full))).hexdigest()
            elif full.is_file():
                digest = sha256_file(full)
            else:
                continue
            entries.append([relative, digest])
        # symlinked directories are entries of their own, not followed
        for name in list(dirnames):
            full = Path(directory, name)
            if full.is_symlink():
                relative = full.relative_to(root).as_posix()
                entries.append([relative, hashlib.sha256(b"symlink:" + os.fsencode(os.readlink(full))).hexdigest()])
    entries.sort()
    return canonical_sha256(entries)
