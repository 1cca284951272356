"""A cited source: a source ref checked, resolved inside the package and hashed (docs/concepts.md).

A result's ``source_refs`` name input files of the package; each is resolved to its real path
inside the package (never one of the ledger's own files) and hashed from the one descriptor it is
opened as, so that verify can tell later whether the file is still the one the result cited.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath
from typing import Iterable

from ..ground import errors as E
from ..ground.errors import LedgerError, pass_on_interruption
from ..ground.paths import STORAGE_ERRNOS
from ..router.files import hash_below
from ..rules.common import check_source_ref_list
from .input_identity import own_file_ids
from .package import check_package_name, is_ledger_own


def resolve_source_refs(package: Path, refs: Iterable[str]) -> list[dict[str, str]]:
    """``[{"path", "sha256"}]`` for source references (docs/concepts.md).

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
        try:
            check_package_name(ref)
        except LedgerError as exc:
            if exc.code == E.STORAGE_ERROR:  # this Python cannot name the file: no fault of the ref's
                raise
            raise LedgerError(E.SOURCE_REF_INVALID, f"source ref {exc.message}", **exc.details) from None
        if is_ledger_own(pure):
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} is one of the ledger's own files")
        try:
            real = os.path.realpath(os.path.join(root, ref))
        except OSError as exc:  # a link on the way removed while it was followed
            pass_on_interruption(exc)
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} cannot be resolved: {exc.strerror}") from None
        if not real.startswith(root + os.sep):
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} leads outside the package")
        real_relative = os.path.relpath(real, root)
        if is_ledger_own(PurePosixPath(real_relative)):
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} leads to one of the ledger's own files")
        try:
            check_package_name(real_relative)
        except LedgerError as exc:
            if exc.code == E.STORAGE_ERROR:
                raise
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} leads to a file whose {exc.message}",
                              **exc.details) from None
        info, digest = _hash_resolved(root, real_relative, ref)
        if info.st_nlink > 1 and (info.st_dev, info.st_ino) in own_file_ids(package):
            raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} is a hard link to one of the ledger's own files")
        resolved.append({"path": ref, "sha256": digest})
    return resolved


def _hash_resolved(root: str, real_relative: str, ref: str) -> tuple[os.stat_result, str]:
    """Open the file a source ref resolved to once, walking its link-free real path from the package
    folder without following any link, and hash that descriptor: a folder or file swapped for a link
    (or a FIFO) after the path was resolved is refused, never read outside the package or waited on."""
    try:
        return hash_below(root, real_relative)
    except LedgerError as exc:
        named = f"{exc.details.get('path')!r} "  # the router's message names the path first: said here as ref
        why = exc.message[len(named):] if exc.message.startswith(named) else exc.message
        if exc.details.get("errno") in STORAGE_ERRNOS:  # this user may not read it: not a bad reference
            raise LedgerError(E.STORAGE_ERROR, f"source ref {ref!r} {why}", path=ref) from None
        if "symbolic link" in why:  # the real path held no link when resolved: one took a place since
            why = "changed while it was read (a symbolic link took the place of a part of its path)"
        raise LedgerError(E.SOURCE_REF_INVALID, f"{ref!r} {why}") from None

def line_ending_digests(package: Path, ref: str) -> tuple[str, str] | None:
    """``(sha256 with CRLF made LF, sha256 with every line ending CRLF)`` of the cited source ``ref``,
    read as :func:`resolve_source_refs` reads it (its real path inside the package, opened without
    following a link, streamed at any size); ``None`` when it cannot be read. Only for a message."""
    root = os.path.realpath(package)
    try:
        real = os.path.realpath(os.path.join(root, ref))
    except (OSError, ValueError) as oserr:
        pass_on_interruption(oserr)
        return None
    if not real.startswith(root + os.sep):
        return None
    as_lf, as_crlf, held = hashlib.sha256(), hashlib.sha256(), b""

    def feed(block: bytes) -> None:
        nonlocal held
        data = held + block
        held = b"\r" if data.endswith(b"\r") else b""  # its \n may begin the next block
        lf = data[:len(data) - len(held)].replace(b"\r\n", b"\n")
        as_lf.update(lf)
        as_crlf.update(lf.replace(b"\n", b"\r\n"))
    try:
        hash_below(root, os.path.relpath(real, root), feed)
    except LedgerError:
        return None
    as_lf.update(held)  # a last \r ends no line
    as_crlf.update(held)
    return as_lf.hexdigest(), as_crlf.hexdigest()
