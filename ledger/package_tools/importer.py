"""``ledger import``: rebuild ``ledger.sqlite`` from an exported tree (docs/files.md).

The tree is read as untrusted input: only regular files inside it are accepted,
every event is replayed in memory from its request and compared byte for byte
(the same :class:`~ledger.package_tools.replay.Replayer` verify uses), and the new ledger is
built beside its target and renamed into place only when all of it passed,
then exported and verified.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import stat
import time
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator, Mapping

from ..ground import errors as E
from ..ground.canonical import sha256_hex
from .atomic_files import discard, fsync_dir, fsync_files, fsync_folders, remove_abandoned_builds
from ..ground.arguments import check_callback
from ..services.case import Case
from ..ground.config import AnalysisConfig
from ..ground.errors import LedgerError, pass_on_interruption
from ..ground.errors import integrity_error as _bad, refuses_unfit_calls
from .export import export_case
from .manifest import check_manifest, check_manifest_identity, read_manifest
from ..model.package import (ANALYSIS_DIR, EVENT_FILE_RE, EVIDENCE_EVENT_FILE_RE, LEDGER_FILE, LEDGER_SIDE_FILES,
                             analysis_not_a_folder, check_export_tree, content_path, event_path, folder_in_place,
                             is_ledger_own, printable_name, refuse_build_folder_name, refuse_output_in_package,
                             refuse_own_links, walk_package)
from ..model.input_identity import input_identity, own_file_ids
from ..ground.paths import (EXPORT_FILE_BYTES_MAX, file_kind, fs_path, make_folders, open_regular, os_error,
                            read_bytes_at_most, remove_tree)
from .replay import PackageSource, Replayer
from ..storage.connection import Storage
from ..storage.sqlite_file import LOCK_SUFFIX, EventRow, HelperRow
from ..storage.writer_lock import WriterLock
from ..model.memory_view import MemoryView
from .verify import VerifyReport, refuse_temp_inside, verify_case

Progress = Callable[[int], None]


def _walk_regular(root: Path) -> Iterator[tuple[str, Path]]:
    """Every file below ``root`` as (posix relative path, path); links, specials, hard links to the
    package's own files and names outside the package's file-name rule refused (``INVALID_ARGUMENT``
    naming them)."""
    own = own_file_ids(root)
    for relative, info in walk_package(root, complete=True):
        if stat.S_ISLNK(info.st_mode):
            raise LedgerError(E.INVALID_ARGUMENT, f"import accepts no links: {printable_name(relative)}",
                              path=printable_name(relative))
        if stat.S_ISDIR(info.st_mode):
            continue
        if relative == ANALYSIS_DIR:  # a file where the export's folder belongs: no export to import
            raise analysis_not_a_folder()
        if "/" in relative and PurePosixPath(relative).name in (LEDGER_FILE, *LEDGER_SIDE_FILES):
            raise LedgerError(E.INVALID_ARGUMENT, f"import accepts no case inside the package: "
                              f"{printable_name(relative)} is another ledger's file, which would put a case inside "
                              "the new one, where 'ledger verify --all' and 'ledger fleet export' never look; move "
                              "its folder out of the package, then run this again", path=printable_name(relative))
        if not stat.S_ISREG(info.st_mode):
            raise LedgerError(E.INVALID_ARGUMENT, f"import accepts only regular files: {printable_name(relative)} is "
                              f"{file_kind(info.st_mode)}; move it out of the folder, then run this again",
                              path=printable_name(relative))
        if (info.st_dev, info.st_ino) in own and not is_ledger_own(PurePosixPath(relative)):
            # no input: the router never reads it and the input identity counts a marker, where a copy
            # would put the old file's bytes among the new package's inputs
            raise LedgerError(E.INVALID_ARGUMENT, f"import accepts no hard link to the package's own files: "
                              f"{printable_name(relative)} is one (of ledger.sqlite, manifest.json or a file under "
                              "analysis/); remove it, then run this again", path=printable_name(relative))
        yield relative, root / relative


def _check_target(src: Path, dest: Path) -> bool:
    """True when importing in place (``dest`` is ``src``, whose ledger was lost)."""
    if not src.is_dir():
        raise LedgerError(E.INVALID_ARGUMENT, f"{src} is not a folder")
    if dest != src and dest.is_symlink():
        raise LedgerError(E.INVALID_ARGUMENT, f"{dest} is a symbolic link; import into a real folder (the new "
                          "package would be written through the link)", path=str(dest))
    real_src, real_dest = Path(os.path.realpath(src)), Path(os.path.realpath(dest))  # no error on a link loop
    in_place = real_dest == real_src
    if in_place:
        if (src / LEDGER_FILE).exists():
            raise LedgerError(E.CASE_EXISTS, f"{src} already has a {LEDGER_FILE}; import into a new folder "
                              "('ledger import DIR --to NEW_CASE', to= in Python), or, if an import of this "
                              "folder placed it (one interrupted after placing it too), check it with 'ledger "
                              "verify'")
    elif dest.exists() and not dest.is_dir():
        raise LedgerError(E.CASE_EXISTS, f"{dest} exists and is not a folder; import into a new folder")
    elif dest.exists() and any(dest.iterdir()):
        raise LedgerError(E.CASE_EXISTS, f"{dest} exists and is not empty")
    elif real_dest == _current_folder():  # it is made elsewhere and renamed onto the path
        raise LedgerError(E.INVALID_ARGUMENT, f"{dest} is the current folder, which import cannot replace with the "
                          "new package; run it from the parent folder (--to NAME)", path=str(dest))
    elif real_dest.is_relative_to(real_src):
        raise LedgerError(E.INVALID_ARGUMENT, f"{dest} is inside {src}: the new case would become one of "
                          "the source package's inputs; import to a folder outside it")
    else:
        refuse_output_in_package(dest, "the new case (--to, to= in Python)", itself=False)
        refuse_build_folder_name(dest, "the new case (--to, to= in Python)")
    return in_place


def _current_folder() -> Path | None:
    """The current folder's real path; None when it was removed (paths given whole need none)."""
    try:
        return Path(os.path.realpath(os.getcwd()))
    except FileNotFoundError:
        return None


def _budget_revisions(files: dict[str, Path]) -> list[int]:
    """Revisions that have a budget event folder in the tree."""
    return sorted({int(PurePosixPath(r).parts[2]) for r in files if EVENT_FILE_RE.fullmatch(r)
                   and r.startswith("analysis/budgets/")})


def _file_bytes(files: dict[str, Path], relative: str, holding: str = "event") -> bytes:
    """The bytes of the exported file ``relative`` (an event's or a ``holding="content"`` file);
    ``INTEGRITY_ERROR`` when it holds more than any event or content may
    (:data:`EXPORT_FILE_BYTES_MAX`), told without reading it whole."""
    data = read_bytes_at_most(files[relative], relative, EXPORT_FILE_BYTES_MAX)
    if data is None:
        raise _bad(None, f"{relative} holds more than {EXPORT_FILE_BYTES_MAX} bytes, more than any {holding} may: "
                   "it is no file of an export", file=relative)
    return data


def _claimed(files: dict[str, Path], relative: str) -> dict[str, Any] | None:
    """The event ``relative`` holds, if it parses as one (a JSON object with an integer seq)."""
    try:
        body = json.loads(_file_bytes(files, relative))
    except (ValueError, RecursionError):
        return None
    return body if type(body) is dict and type(body.get("seq")) is int else None


def _evidence_files(files: dict[str, Path]) -> dict[int, list[str]]:
    """seq → the evidence event files (``analysis/evidence/<revision>/<op>/…``) claiming it. Their
    address follows from their operation, not from a counter: the replay checks each one's path."""
    claims: dict[int, list[str]] = {}
    for relative in sorted(files):
        if EVIDENCE_EVENT_FILE_RE.fullmatch(relative):
            body = _claimed(files, relative)
            if body is not None and str(body.get("format", "")).startswith("evidence-"):
                claims.setdefault(body["seq"], []).append(relative)
    return claims


def _next_event(files: dict[str, Path], view: MemoryView, revisions: list[int], seq: int,
                evidence: Mapping[int, list[str]]) -> str | None:
    """The file of event ``seq``, found by address, not by scanning: the next file of the case
    stream or of a revision's budget stream whose event claims ``seq`` and whose format belongs
    to that stream, else the one evidence file claiming ``seq``. A copy elsewhere is never taken
    for it (``check_export_tree`` names it)."""
    for stream, relative in _next_stream_files(view, revisions):
        body = _claimed(files, relative) if relative in files else None
        if (body is not None and body["seq"] == seq
                and (body.get("format") == "budget-event-v1") == (stream == "budget")):
            return relative
    claims = evidence.get(seq, [])
    return claims[0] if len(claims) == 1 else None


def _next_stream_files(view: MemoryView, revisions: list[int]) -> list[tuple[str, str]]:
    """(stream, file) of the next event of the case stream and of each revision's budget stream."""
    return [("case", event_path("case", 0, view.next_stream_seq("case", 0)))] + [
        ("budget", event_path("budget", r, view.next_stream_seq("budget", r))) for r in revisions]


def _no_event(files: dict[str, Path], view: MemoryView, revisions: list[int], seq: int, head_seq: int) -> LedgerError:
    """``INTEGRITY_ERROR`` for an event 1..head no file holds, naming the files where the next event of a
    stream belongs when they are there but do not hold it (unreadable, cut short, another event)."""
    there = [relative for _, relative in _next_stream_files(view, revisions) if relative in files
             and ((body := _claimed(files, relative)) is None or body["seq"] <= seq)]  # a later event is in its place
    held = f"; {', '.join(there)} {'is' if len(there) == 1 else 'are'} there but hold{'s' if len(there) == 1 else ''} " \
           "no event that continues the history (not an event's JSON, cut short, or another event)" if there else ""
    root = next((path.parents[len(PurePosixPath(r).parts) - 1] for r, path in files.items()), None)
    folders = [relative for _, relative in _next_stream_files(view, revisions)
               if root is not None and relative not in files and folder_in_place(root / relative)]
    if folders:  # a folder where the next event's file belongs: the tree lists files only
        held += f"; {', '.join(folders)} {'is a folder' if len(folders) == 1 else 'are folders'}, not a file (move it aside)"
        there += folders
    elsewhere = [r for r in sorted(files) if EVENT_FILE_RE.fullmatch(r) and (_claimed(files, r) or {}).get("seq") == seq]
    if len(elsewhere) == 1:  # the error's path only: every event file read once more
        held += f"; {elsewhere[0]} claims to hold it but lies where it does not belong"
    elif elsewhere:  # copies: which one is where it belongs cannot be told while another claims it too
        held += f"; {', '.join(elsewhere)} each claim to hold it, and one event is one file: remove the copies"
    return _bad(seq, f"the export has no event {seq} (its manifest names head seq {head_seq}){held}",
                **({"file": (there + elsewhere)[0]} if there or elsewhere else {}))


def _copy_inputs(files: dict[str, Path], build_dir: Path) -> None:
    """Copy the package's inputs into ``build_dir``, each file and folder durable (fsynced) before the
    new package is renamed into place: a crash after the import reported never leaves an input empty."""
    build_dir.mkdir(parents=True)
    copied: list[tuple[int, Path]] = []
    for relative, full in files.items():
        if is_ledger_own(PurePosixPath(relative)):
            continue
        target = build_dir / relative
        make_folders(target.parent)
        copied.append((_copy_input(full, target), target))
    fsync_files(target for _, target in copied)  # after every copy: the first fsync commits for all
    for mode, target in copied:
        os.chmod(target, mode)  # an executable or read-only input stays so (once synced)
    fsync_folders(build_dir, {build_dir, *(target.parent for _, target in copied)})


def _copy_input(source: Path, target: Path) -> int:
    """Copy the input ``source`` into the new file ``target`` (mode 0600 whatever the umask: it is
    opened again to be synced); ``source``'s mode is returned. Read only as the regular file the walk
    found (:func:`~ledger.ground.paths.open_regular`: never a link or pipe put in its place since);
    an ``OSError`` of the copy names both files."""
    with open_regular(source) as file:
        info = os.fstat(file.fileno())
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            offset = 0
            while sent := os.sendfile(fd, file.fileno(), offset, 1 << 24):
                offset += sent
        except OSError as exc:
            pass_on_interruption(exc)
            raise OSError(exc.errno, exc.strerror, str(source), None, str(target)) from None
        finally:
            os.close(fd)
    return stat.S_IMODE(info.st_mode)


def _rebuild(building: Path, build_dir: Path, files: dict[str, Path], manifest: dict[str, Any],
             progress: Progress | None, in_place: bool, dest: Path) -> int:
    """Replay every event up to the manifest's head into a new ledger at ``building``, in one
    transaction; then check that the tree holds nothing but that history's files. In place, event
    files an interrupted export left past the head are refused (``INVALID_ARGUMENT``): the ledger
    rebuilt beside them would end before them, which verify rightly takes for a rolled-back one.
    Returns how many such events a new folder's ledger leaves out."""

    def content_of(sha: str) -> bytes | None:
        relative = content_path(sha)
        if relative not in files:
            return None
        return _file_bytes(files, relative, "content")

    head_seq = manifest["head"]["seq"]
    accounted: set[str] = set()
    try:
        storage = Storage.create(building, AnalysisConfig().storage)
    except LedgerError as exc:
        raise _as_not_written(exc, dest, build_dir) from None

    def sink(row: EventRow, helpers: list[HelperRow], contents: Mapping[str, bytes]) -> None:
        accounted.update(content_path(sha) for sha in contents)
        if row.seq <= head_seq:
            _check_content_files(files, contents, row.seq)
            try:
                storage.append(row, helpers, contents)
            except LedgerError as exc:  # the disk full, say: the new ledger's fault, not the event file's
                raise _as_not_written(exc, dest, build_dir) from None

    stage = "begin"  # a STORAGE_ERROR as the new ledger's transaction begins or commits is the target's
    try:
        with storage.write():
            stage = "replay"
            try:
                storage.apply_migrations()
            except LedgerError as exc:
                raise _as_not_written(exc, dest, build_dir) from None
            # the export tree is not an input: in place (build_dir is the source) it lies beside the inputs
            exported = {r for r in files if PurePosixPath(r).parts[0] == ANALYSIS_DIR}
            replayer = Replayer(PackageSource(build_dir, content_of, lambda: input_identity(build_dir, exported)), sink)
            # another package's manifest naming a head this export lacks is named so, not as a missing event
            past_head, last, stop = _replay_tree(replayer, files, head_seq, accounted, progress,
                                                 lambda: check_manifest_identity(manifest, storage.conn))
            past_head += _unreplayed_past_head(files, accounted, head_seq + len(past_head) + 1, last, stop)
            check_manifest(manifest, storage.conn, head_seq)
            check_export_tree(files, accounted, None)  # no ledger says which revisions an interrupted export wrote
            if in_place and past_head:
                raise LedgerError(E.INVALID_ARGUMENT, f"{past_head[0]} and {len(past_head) - 1} other event file(s) "
                                  f"lie past the manifest's head seq {head_seq} (an export interrupted before its "
                                  "manifest): a ledger rebuilt here would end before them. Import into a new folder "
                                  "with --to (to= in Python), which leaves them out; nothing was written",
                                  path=past_head[0])
            stage = "commit"
    except BaseException as exc:
        storage.close()
        if isinstance(exc, LedgerError) and stage != "replay":
            raise _as_not_written(exc, dest, build_dir) from None
        raise
    unfolded = storage.close()  # None: the log folded into the file, which is then whole
    if unfolded is not None:  # the disk full as it was folded in: the file alone is cut short
        why = unfolded.partition(" was not emptied: ")[2].partition("; every committed operation")[0]
        raise _not_written(LedgerError(E.STORAGE_ERROR, f"its new ledger could not be completed: {why or unfolded}"),
                           dest, build_dir)
    return len(past_head)


def _unreplayed_past_head(files: dict[str, Path], accounted: set[str], seq: int, last: str,
                          stop: LedgerError | None) -> list[str]:
    """The event files an export killed before its manifest left past the head that the replay
    could not take, and the content files they name. Export writes every new event file, then
    the new content files, then the manifest, so the first event past the head the replay could
    not take (``seq``) may lack its evidence content (``stop``, the replay's refusal of it, says
    which; only then is anything taken here). From it on, the files taken are those continuing the hash chain
    from ``last`` (the file of the last event replayed): one file per seq, each naming the
    ``sha256`` of the one before as its ``parent_sha256``. Their content files are taken when
    their bytes hash to their names. All are added to ``accounted`` (none is imported); the event
    files are returned. Any other file is left for ``check_export_tree`` to name."""
    missing = (stop.details.get("missing_content") if stop is not None else None)
    if not isinstance(missing, str) or content_path(missing) in files:
        return []
    claims: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    for relative in sorted(files):
        if relative not in accounted and EVENT_FILE_RE.fullmatch(relative):
            body = _claimed(files, relative)
            if body is not None and body["seq"] >= seq:
                claims.setdefault(body["seq"], []).append((relative, body))
    taken: list[str] = []
    parent = sha256_hex(_file_bytes(files, last))
    while len(claims.get(seq, [])) == 1 and claims[seq][0][1].get("parent_sha256") == parent:
        relative = claims[seq][0][0]
        data = _file_bytes(files, relative)
        taken.append(relative)
        parent, seq = sha256_hex(data), seq + 1
        for sha in set(_SHA256.findall(data.decode("utf-8", "replace"))):
            named = content_path(sha)
            if named in files and named not in accounted:
                held = read_bytes_at_most(files[named], named, EXPORT_FILE_BYTES_MAX)  # None: over-size, no content
                if held is not None and sha256_hex(held) == sha:
                    accounted.add(named)
    accounted.update(taken)
    return taken


#: A sha256 in an event's bytes: the content files an unreplayed event names.
_SHA256 = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


def _check_content_files(files: dict[str, Path], contents: Mapping[str, bytes], seq: int) -> None:
    """``INTEGRITY_ERROR`` naming the file when an exported content file of event ``seq`` is missing
    or holds other bytes than the replay derives (edited, deleted or swapped)."""
    for sha, data in contents.items():
        relative = content_path(sha)
        if relative not in files:
            raise _bad(seq, f"exported content {relative} is missing", file=relative)
        if read_bytes_at_most(files[relative], relative, len(data)) != data:
            raise _bad(seq, f"exported content {relative} differs from the replay (edited or swapped)",
                       file=relative)


def _replay_tree(replayer: Replayer, files: dict[str, Path], head_seq: int, accounted: set[str],
                 progress: Progress | None,
                 before_missing: Callable[[], None]) -> tuple[list[str], str, LedgerError | None]:
    """Events 1..head must all be there and replay (``before_missing`` is called before one missing is
    refused); events an interrupted export wrote past the head are replayed too (so they count as part
    of the export) but not imported. Returns their files, the file of the last event replayed, and the refusal of the
    event past the head the replay stopped at (None: no file continued the history there)."""
    past_head: list[str] = []
    last = ""
    revisions = _budget_revisions(files)
    evidence = _evidence_files(files)
    seq = 1
    while True:
        relative = _next_event(files, replayer.view, revisions, seq, evidence)
        if relative is None:
            if seq <= head_seq:
                before_missing()
                raise _no_event(files, replayer.view, revisions, seq, head_seq)
            return past_head, last, None
        try:
            body, stream_seq = replayer.apply(seq, _file_bytes(files, relative))
        except _NotWritten:
            raise
        except LedgerError as exc:
            if seq <= head_seq:  # name the file as well as the seq
                raise LedgerError(exc.code, f"{relative}: {exc.message}", **{**exc.details, "file": relative}) from None
            return past_head, last, exc  # not replayable: _unreplayed_past_head or check_export_tree judge
        if event_path(replayer.last_stream, body["revision"], stream_seq) != relative:
            raise _bad(seq, f"{relative} is not where event {seq} belongs")
        accounted.add(relative)
        last = relative
        if seq > head_seq:
            past_head.append(relative)
        if seq == head_seq:
            replayer.finish()
        if progress and seq <= head_seq:
            progress(1)
        seq += 1


def _building_prefix(dest: Path) -> str:
    """The hidden sibling folders a new package is built in: ``.<name>.importing-<pid>-<ns>``, with
    at most the first 40 characters of the name (a long one would make a name too long to create)."""
    return f".{dest.name[:40]}.importing-"


def _move_into_place(build_dir: Path, dest: Path) -> None:
    """Rename the finished package onto ``dest`` (absent, or the empty folder checked before);
    ``CASE_EXISTS`` when another import (or anyone) filled ``dest`` meanwhile."""
    try:
        try:
            dest.rmdir()  # an empty folder the user made for the import
        except FileNotFoundError:
            pass
        os.rename(build_dir, dest)
    except OSError as exc:
        pass_on_interruption(exc)
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
            raise LedgerError(E.CASE_EXISTS, f"{dest} was taken while the import ran (another import?); "
                              "nothing of this import was kept") from None
        raise
    fsync_dir(dest.parent)


@refuses_unfit_calls
def import_tree(source: str | os.PathLike[str], to: str | os.PathLike[str] | None = None,
                progress: Progress | None = None) -> VerifyReport:
    """Rebuild a case package from an exported tree (docs/files.md) and verify it.

    ``source`` is a package folder with ``manifest.json`` and ``analysis/``; ``to``
    a new (absent or empty) folder, or ``source`` itself when its ``ledger.sqlite``
    was lost. Inputs (``sources/``, ``data/``, other files) are copied. Only
    regular files inside the tree are accepted (``INVALID_ARGUMENT`` for links,
    devices, ``..``); every event is re-applied and compared byte for byte
    (``INTEGRITY_ERROR`` naming the seq). Writes nothing if anything fails; a file or
    folder the system refuses to read or write is ``STORAGE_ERROR``, never a raw ``OSError``.
    The new case ends at the manifest's head: event files past it are left out, and counted in
    the report's ``events_left_out`` (in place they are refused, ``INVALID_ARGUMENT``).
    ``CASE_EXISTS`` when ``to`` (or, in place, ``source``) already holds a case or other files.
    """
    try:
        return _import_tree(source, to, progress)
    except OSError as exc:
        raise os_error(exc, "import: the file system refused") from None


def _import_tree(source: str | os.PathLike[str], to: str | os.PathLike[str] | None,
                 progress: Progress | None) -> VerifyReport:
    src = fs_path(source, "import source")
    dest = fs_path(to, "import target") if to is not None else src
    check_callback(progress, "progress", 1)
    in_place = _check_target(src, dest)
    refuse_temp_inside(dest, "import")  # before anything is written: the import ends with a verify
    # in place, the case's writer lock is held until the ledger is placed: another import of the same
    # folder would delete this one's scratch files and set aside the log of the ledger it placed
    lock = WriterLock(src / (LEDGER_FILE + LOCK_SUFFIX)) if in_place else None
    had_locks = {name for name in _LOCK_FILES if os.path.lexists(src / name)} if in_place else set()
    try:
        if lock is not None:
            if not lock.try_acquire():
                raise LedgerError(E.LEDGER_BUSY, f"{src}: another import (or a writer) holds the case; retry once "
                                  "it ended", path=str(src))
            _check_target(src, dest)  # again under the lock: nobody placed a ledger meanwhile
        built, left_out = _build(src, dest, in_place, progress)
    except BaseException:
        if lock is not None and lock.locked and LEDGER_FILE + LOCK_SUFFIX not in had_locks:
            discard(lock.path)  # a refused import leaves the folder as it was: removed while held, so no writer has it
        raise
    finally:
        if lock is not None:
            lock.close()
    # a new package is exported and verified where it was built, then renamed into place: an import
    # killed at any point leaves no half-made case (in place, the export is the source's own files)
    try:
        try:
            with Case.open(built) as case:
                export_case(case)
            report = verify_case(built)
            with Case.open(built):
                pass  # the last connection to close checkpoints and removes the -wal and -shm files
        except LedgerError as exc:
            if exc.code == E.INTEGRITY_ERROR and in_place:  # what verify refuses is not kept
                _discard(dest, had_locks)
            if exc.code == E.STORAGE_ERROR and not in_place:  # its export is the import's own: named as such
                raise _not_written(exc, dest, built) from None
            raise
        except KeyboardInterrupt:  # nor what was not verified yet: run again, the import starts afresh
            if in_place:
                _discard(dest, had_locks)
            raise
        if not in_place:
            _move_into_place(built, dest)
    except BaseException:
        if not in_place:
            remove_tree(built)
        raise
    return dataclasses.replace(report, package_path=str(dest), events_left_out=left_out)


class _NotWritten(LedgerError):
    """``STORAGE_ERROR``: the new package (its ledger, its export) could not be written, never the fault of
    the exported file being replayed when it came."""


def _as_not_written(exc: LedgerError, dest: Path, built: Path) -> LedgerError:
    """``exc`` met writing the new package: :func:`_not_written` when it is ``STORAGE_ERROR``, else itself."""
    return _not_written(exc, dest, built) if exc.code == E.STORAGE_ERROR and not isinstance(exc, _NotWritten) else exc


def _not_written(exc: LedgerError, dest: Path, built: Path) -> LedgerError:
    """``exc`` (``STORAGE_ERROR``) said of the package the import writes at ``dest``, built first in
    ``built`` (a hidden folder beside it, or the case itself in place)."""
    where = f"{dest}" if built == dest else f"{dest} (built first in {built.name} beside it)"
    message = exc.message.removeprefix(f"cannot write the export under {built}: ")
    return _NotWritten(E.STORAGE_ERROR, f"cannot write the imported package {where}: {message}", **exc.details)


def _build(src: Path, dest: Path, in_place: bool, progress: Progress | None) -> tuple[Path, int]:
    """Rebuild the ledger from the tree of ``src``: in place, placed in ``src``; else with the inputs
    in a hidden sibling folder of ``dest``, returned (the caller exports, verifies and renames it),
    with the number of events past the manifest's head the new ledger leaves out."""
    refuse_own_links(src)  # a link in place of manifest.json or analysis/ is refused as verify refuses it
    files = dict(_walk_regular(src))  # and any other link, pipe or device: before anything is read
    manifest = read_manifest(src)
    if manifest is None:
        raise LedgerError(E.INVALID_ARGUMENT, f"{src} has no manifest.json: not an exported case (a case with its "
                          "ledger is exported with 'ledger export CASE'; import rebuilds a ledger from that export)")
    # a new package is built in a hidden sibling folder and renamed into place at the end (by the
    # caller), so an interrupted import leaves the target absent and can simply be run again
    if not in_place:
        remove_abandoned_builds(dest.parent, _building_prefix(dest))
    build_dir = src if in_place else dest.parent / f"{_building_prefix(dest)}{os.getpid()}-{time.time_ns()}"
    building = build_dir / (LEDGER_FILE + "-import")
    scratch_files = [Path(str(building) + suffix) for suffix in ("", "-wal", "-shm", "-lock")]
    try:
        if not in_place:
            _copy_inputs(files, build_dir)
        for leftover in scratch_files:
            leftover.unlink(missing_ok=True)
        left_out = _rebuild(building, build_dir, files, manifest, progress, in_place, dest)
        for suffix in ("-wal", "-shm", "-journal"):
            # a lost ledger's log must never be replayed onto the rebuilt file (nor deleted by SQLite as
            # it opens it): keep it aside as ledger.sqlite-wal.orphaned-N
            stale = build_dir / (LEDGER_FILE + suffix)
            if stale.exists():
                os.replace(stale, build_dir / f"{LEDGER_FILE}{suffix}.orphaned-{time.time_ns()}")
        os.replace(building, build_dir / LEDGER_FILE)
        fsync_dir(build_dir)
    except BaseException:
        for leftover in scratch_files:
            discard(leftover)
        if not in_place:
            remove_tree(build_dir)
        raise
    for leftover in scratch_files:
        discard(leftover)
    return build_dir, left_out


def _discard(dest: Path, had_locks: set[str]) -> None:
    """Remove what an in-place import placed that the final verify refused or an interrupt kept from
    being verified: the rebuilt ledger and its sidecar files, and the lock files it made (each taken
    first, so none is removed under a writer; ``had_locks``: those there before). The export tree
    it came from stays."""
    for suffix in ("", "-wal", "-shm"):
        discard(dest / (LEDGER_FILE + suffix))
    for name in _LOCK_FILES:
        path = dest / name
        if name not in had_locks and os.path.lexists(path):
            lock = WriterLock(path)
            try:
                if lock.try_acquire():
                    discard(path)
            finally:
                lock.close()


#: The lock files of a case (the writers' and the exports'), which an import refused in place removes if it made them.
_LOCK_FILES = (LEDGER_FILE + LOCK_SUFFIX, LEDGER_FILE + "-export-lock")