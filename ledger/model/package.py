"""The case package on disk: its layout, the ledger's own files, what an exported tree may hold and
where each event exports to (docs/concepts.md and docs/files.md); its input identity is
:mod:`ledger.model.input_identity`'s.

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
import re
import stat
import unicodedata
from pathlib import Path, PurePosixPath
from typing import Container, Iterable, Iterator

from ..ground import errors as E
from ..ground.errors import LedgerError, pass_on_interruption
from ..ground.errors import integrity_error
from ..ground.paths import check_name_encoding, os_error, walk
from ..storage.sqlite_file import ANALYSIS_DIR, LEDGER_FILE, MANIFEST_FILE

#: Temporary files of an interrupted export are the ledger's own too.
EXPORT_TEMP_PREFIX = ".ledger-tmp-"


#: Where the export puts events and content rows (relative to the package root).
#: Evidence events export under their operation's folder: ``analysis/evidence/<revision>/<op>/<name>.json``.
#: Numbers are zero-padded to 4 (revisions) and 8 (counters) digits and grow past them when they
#: must (revision 10000 is ``10000``): each event's path is checked against the one it must have.
EVIDENCE_EVENT_FILE_RE = re.compile(r"analysis/evidence/[0-9]{4,}/[0-9a-f]{32}/[A-Za-z0-9_-]+\.json")
EVENT_FILE_RE = re.compile(r"analysis/case/events/[0-9]{8,}\.json|analysis/budgets/[0-9]{4,}/events/[0-9]{8,}\.json|"
                           + EVIDENCE_EVENT_FILE_RE.pattern)
CONTENT_FILE_RE = re.compile(r"analysis/evidence/content/[0-9a-f]{64}\.json")


# --- file names: one rule for every name in the package -----------------------------------------
def printable_name(name: str | bytes) -> str:
    """A file name as people can read it: undecodable bytes as ``\\xNN``, control characters escaped."""
    text = os.fsdecode(name).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(ch if not _is_control(ch) else ascii(ch)[1:-1] for ch in text)


def _is_control(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Zl", "Zp")


def check_package_name(relative: str) -> None:
    """The package's file-name rule, applied by every command: each name in the package is
    valid UTF-8 and holds no control character (C0, DEL, C1) and no line or paragraph
    separator. ``INVALID_ARGUMENT`` naming the file (printable) otherwise; ``STORAGE_ERROR`` for a name
    that is not ASCII when this Python's file names are not UTF-8 (:func:`check_name_encoding`).

    ``relative`` is the path as ``os.fsdecode`` gives it (undecodable bytes become
    lone surrogates, which is how a name that is not UTF-8 is recognised).
    """
    if relative.isascii() and relative.isprintable():
        return  # the common case, checked at C speed: printable ASCII holds no control character
    check_name_encoding(relative)  # a name read or written by other bytes than its own: STORAGE_ERROR
    try:
        relative.encode("utf-8")
    except UnicodeEncodeError:
        raise LedgerError(E.INVALID_ARGUMENT, f"package file name {printable_name(relative)} is not valid UTF-8; "
                          "rename it (every name in a case package must be UTF-8)",
                          path=printable_name(relative)) from None
    if any(_is_control(ch) for ch in relative):
        raise LedgerError(E.INVALID_ARGUMENT, f"package file name {printable_name(relative)} holds a control "
                          "character or line break; rename it", path=printable_name(relative))


def walk_package(root: Path, under: str = "", *, complete: bool = False,
                 skip: Container[str] = ()) -> Iterator[tuple[str, os.stat_result | None]]:
    """Every entry below ``root`` (or below ``root/under``) as ``(posix relative path, lstat)``,
    folders included, in sorted order; links are reported, never followed. Every name is
    checked by :func:`check_package_name` first. A folder this user may not list is left out
    (as the router leaves it out), and an entry the system refuses to examine (in a folder this
    user may list but not search) comes with ``None`` for its lstat; with ``complete`` (a walk that
    must see every file: the export tree, an import's copy) either is ``STORAGE_ERROR`` naming it.
    A non-folder entry whose relative path is in ``skip`` is passed over unexamined (no lstat)."""
    top = root / under if under else root
    prefix = os.path.join(os.fspath(root), "")
    for directory, dirnames, filenames in walk(top, onerror=_unlisted if complete else None):
        dirnames.sort()
        # the folder's relative path once, not each entry's from its full path (a folder of an
        # exported case holds thousands)
        base = None
        if os.sep == "/" and (directory + "/").startswith(prefix):
            base = directory[len(prefix):]
            base = base + "/" if base else ""
        for name in sorted(dirnames + filenames):
            if base is not None:
                relative = base + name
            else:
                relative = Path(directory, name).relative_to(root).as_posix()
            check_package_name(relative)
            if relative in skip and (name not in dirnames or os.path.islink(os.path.join(directory, name))):
                continue  # a folder the walk lists may be a link to one: passed over like a file
            full = os.path.join(directory, name)
            try:
                info = os.lstat(full)
            except (FileNotFoundError, NotADirectoryError):
                continue  # removed while we walked
            except OSError as exc:
                pass_on_interruption(exc)
                if complete:
                    raise os_error(exc, "cannot examine a file of the package", E.STORAGE_ERROR) from None
                yield relative, None  # the system refuses to say what it is (no search permission)
                continue
            if stat.S_ISLNK(info.st_mode) and name in dirnames:
                dirnames.remove(name)  # the walk does not follow it anyway; keep that explicit
            yield relative, info


def _unlisted(exc: OSError) -> None:
    """The walk's error hook for a walk that must be complete: a folder removed meanwhile is
    simply gone, one the system refuses to list is ``STORAGE_ERROR`` (never a missing file)."""
    if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        raise os_error(exc, "cannot list a folder of the package", E.STORAGE_ERROR) from None


def check_package_names(root: Path) -> None:
    """Apply :func:`check_package_name` to every name in the package (verify and export do,
    so that no command accepts a package another refuses)."""
    for _ in walk_package(root):
        pass


# --- what belongs in an exported tree -----------------------------------------------------------
#: A temp file's name as an export makes it: the prefix, the name of the file it becomes, a dot and a
#: suffix of letters, digits, ``-`` and ``_`` (the process's own tag and number, or ``mkstemp``'s).
_EXPORT_TEMP_RE = re.compile(re.escape(EXPORT_TEMP_PREFIX) + r"(.+)\.[A-Za-z0-9_-]+")


#: Files a file browser makes in a folder it shows, without its user doing anything: macOS Finder's
#: ``.DS_Store`` (and ``._NAME``, its metadata beside a file on a volume that cannot hold it, also made
#: by its ``tar`` and ``cp``), Windows Explorer's ``Thumbs.db``, ``ehthumbs.db`` and ``desktop.ini``.
SYSTEM_CLUTTER = frozenset({".DS_Store", "Thumbs.db", "ehthumbs.db", "desktop.ini"})


def is_system_clutter(relative: str) -> bool:
    """True for a file named as a file browser names the files it makes (:data:`SYSTEM_CLUTTER`,
    ``._NAME``): under ``analysis/`` such a file is left alone by verify and import, as no export
    writes one and it cannot stand for an event or content."""
    name = relative.rpartition("/")[2]
    return name in SYSTEM_CLUTTER or (name.startswith("._") and len(name) > 2)


def export_temp_target(relative: str) -> str | None:
    """The file a temp file an interrupted export may have left was to become (its path relative to
    the package root), or None when ``relative`` is named as no export's temp file. Temp files are
    named as :func:`~ledger.package_tools.atomic_files.write_atomic` names them, beside the file they
    become: an event or content file under ``analysis/``, or the top-level ``manifest.json`` (a
    ``.ledger-tmp-*`` name anywhere else, or of any other file, is no export's)."""
    folder, _, name = relative.rpartition("/")
    match = _EXPORT_TEMP_RE.fullmatch(name)
    if match is None:
        return None
    if not folder:
        return MANIFEST_FILE if match.group(1) == MANIFEST_FILE else None
    target = f"{folder}/{match.group(1)}"
    return target if EVENT_FILE_RE.fullmatch(target) or CONTENT_FILE_RE.fullmatch(target) else None


def is_export_temp(relative: str) -> bool:
    """True for a file named as an interrupted export's temp file (:func:`export_temp_target`)."""
    return export_temp_target(relative) is not None


def analysis_not_a_folder() -> LedgerError:
    """The ``INVALID_ARGUMENT`` for an ``analysis`` that is a file: the export's folder cannot be there."""
    return LedgerError(E.INVALID_ARGUMENT, f"{ANALYSIS_DIR} is not a folder: the export's folder is the one the "
                       f"ledger's files go to; move that {ANALYSIS_DIR} away", path=ANALYSIS_DIR)


def export_tree_files(root: Path) -> list[str]:
    """Every file under ``analysis/`` (posix relative paths, sorted). A link or anything but a
    regular file or folder there (``analysis`` itself no folder too) is ``INVALID_ARGUMENT`` naming
    it: the ledger writes only regular files into its own folder, and never reads through a link."""
    if not os.path.lexists(root / ANALYSIS_DIR):
        return []
    refuse_link(root, ANALYSIS_DIR, "export folder")
    if not os.path.isdir(root / ANALYSIS_DIR):  # no folder to walk: it was taken for an empty export
        raise analysis_not_a_folder()
    files = []
    for relative, info in walk_package(root, ANALYSIS_DIR, complete=True):
        if stat.S_ISLNK(info.st_mode):
            raise _link_error(relative, "export folder")
        if stat.S_ISREG(info.st_mode):
            files.append(relative)
        elif not stat.S_ISDIR(info.st_mode):
            raise LedgerError(E.INVALID_ARGUMENT, f"{printable_name(relative)} is not a regular file: the export "
                              "folder holds only the ledger's files", path=printable_name(relative))
    return files


def folder_in_place(path: str | os.PathLike[str]) -> bool:
    """Whether a folder (not a link to one) stands where the file ``path`` belongs."""
    return os.path.isdir(path) and not os.path.islink(path)


def missing_words(path: str | os.PathLike[str]) -> str:
    """How a message says an exported file is not there: "is missing", or "is a folder, not a file"
    when a folder stands in its place (the tree's check lists files only)."""
    return "is a folder, not a file (move it aside)" if folder_in_place(path) else "is missing"


def check_export_tree(files: Iterable[str], accounted: Container[str], last_revision: int | None) -> None:
    """The one rule for what belongs in an exported tree, used by verify and import alike.

    Every file under ``analysis/`` must be an event or content file of the history being
    checked (``accounted``: the export paths of its events and content rows), a temp file
    an interrupted export may have left (:func:`_temp_allowed`), or a file an operating system's file
    browser makes in the folders it shows (:func:`is_system_clutter`). ``last_revision`` is the
    highest revision the ledger opened (verify), or None when no ledger says (import). The first
    other file (in sorted order) is ``INTEGRITY_ERROR`` naming it: a stray, duplicated or misplaced
    file is never silently ignored.
    """
    for relative in sorted(files):
        if PurePosixPath(relative).parts[0] != ANALYSIS_DIR or relative in accounted or is_system_clutter(relative):
            continue
        target = export_temp_target(relative)
        if target is not None and _temp_allowed(target, last_revision):
            continue
        if target is not None:
            why = (f"named as an export's temp file for {target}, but no export of this case writes there "
                   "(a revision the case does not have, or a folder name no export makes)")
        elif EVENT_FILE_RE.fullmatch(relative):
            why = "no event of the history exports there (a duplicated or misplaced event file?)"
        elif CONTENT_FILE_RE.fullmatch(relative):
            why = "no content row of the history exports there"
        elif PurePosixPath(relative).name.startswith(EXPORT_TEMP_PREFIX):
            why = "named like an export's temp file, but an export makes none of that name there"
        else:
            why = "the export writes no such file; move it out of analysis/"
        raise integrity_error(None, f"{printable_name(relative)} is not part of the export: {why}",
                              path=printable_name(relative))


def _temp_allowed(target: str, last_revision: int | None) -> bool:
    """Whether an interrupted export may have left a temp file of ``target`` (the file it was to
    become): of any case event or content file (the export may have been writing events past the
    last one the tree holds whole), and of a file in a revision's folder (``budgets/NNNN/``,
    ``evidence/NNNN/``, named as an export names it) of a revision the ledger opened. Without a ledger
    (import) that is any revision: the export may have been writing the first events of a revision
    the tree does not show yet, the file that opened it among those not yet written (or its temp file
    removed since)."""
    if not target.startswith(_REVISION_FOLDERS) or CONTENT_FILE_RE.fullmatch(target):
        return True
    folder = PurePosixPath(target).parts[2]
    revision = int(folder)
    return revision >= 1 and folder == f"{revision:04d}" and (last_revision is None or revision <= last_revision)


_REVISION_FOLDERS = (f"{ANALYSIS_DIR}/budgets/", f"{ANALYSIS_DIR}/evidence/")


# --- links where the package layout expects its own folders and files -------------------------
def _link_error(relative: str, what: str) -> LedgerError:
    real = "a real folder" if what == "export folder" else "a real folder or file"
    return LedgerError(E.INVALID_ARGUMENT, f"{printable_name(relative)} is a symbolic link where the case package "
                       f"keeps its {what}; the ledger never writes through a link (replace it with {real})",
                       path=printable_name(relative))


def refuse_link(root: Path, relative: str, what: str) -> Path:
    """``root / relative`` after checking that no part of it below ``root`` is a symbolic
    link (``INVALID_ARGUMENT`` naming the link). Missing parts are fine: they will be made
    as real folders. ``root`` itself may be reached through a link."""
    current = root
    walked: list[str] = []
    for part in PurePosixPath(relative).parts:
        current = current / part
        walked.append(part)
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            break
        except OSError as oserr:
            pass_on_interruption(oserr)
            break  # the caller's own open/stat reports it
        if stat.S_ISLNK(info.st_mode):
            raise _link_error("/".join(walked), what)
    return root / relative


#: The ledger's own files and folders at the package root that may never be links. ``ledger.sqlite``
#: itself may be one once it exists (its sidecar files then live beside the real file).
#: The files SQLite and the ledger keep beside ``ledger.sqlite``.
LEDGER_SIDE_FILES = tuple(LEDGER_FILE + suffix for suffix in ("-wal", "-shm", "-journal", "-lock", "-export-lock"))
OWN_LINKLESS = LEDGER_SIDE_FILES + (MANIFEST_FILE, ANALYSIS_DIR)


#: The hidden folders where ``import --to`` and ``demo`` build a new package before renaming it into
#: place (``.NAME.importing-PID-N``, ``.ledger-demo-building-NAME.PID``): their scratch, never a case
#: of its own, though a killed run leaves one holding a ledger until the next run removes it.
#: The pid of the process building is group ``pid`` (an import's) or ``demo_pid`` (a demo's, when named).
BUILD_FOLDER_RE = re.compile(r"\..*\.importing-(?P<pid>[0-9]+)-[0-9]+|\.ledger-demo-building-.*?(?:\.(?P<demo_pid>[0-9]+))?",
                             re.DOTALL)


def is_build_folder(name: str) -> bool:
    """True when a folder of this ``name`` is an import's or a demo's build folder (:data:`BUILD_FOLDER_RE`)."""
    return BUILD_FOLDER_RE.fullmatch(name) is not None


def refuse_build_folder_name(path: str | os.PathLike[str], what: str) -> None:
    """``INVALID_ARGUMENT`` when a new case's folder ``path`` (``what`` names it) is named like another
    process's build folder (:func:`is_build_folder`): ``verify --all`` and ``fleet export`` would pass
    it by, and a later import or demo would remove it as a killed run's scratch once that pid is gone.
    This process's own build folders (its pid in the name) are allowed: they are what it builds in."""
    build = BUILD_FOLDER_RE.fullmatch(Path(path).name)
    if build and int(build.group("pid") or build.group("demo_pid") or -1) != os.getpid():
        raise LedgerError(E.INVALID_ARGUMENT, f"{what} {path}: a name like this is the ledger's own build folder "
                          "(an import's .NAME.importing-PID-N, a demo's .ledger-demo-building-NAME.PID), which a later "
                          "import or demo removes once that process is gone; choose another name", path=str(path))


def once_each(paths: Iterable[Path]) -> list[Path]:
    """``paths`` with each folder once, at the place it first appears, named by its own path rather
    than by a link to it when it is reached both ways (a folder of cases holding a case and a link
    to it). A link that loops stays as it is: opening it is then refused."""
    found: dict[Path, Path] = {}  # the real folder → the path it goes by (its place: where first found)
    for path in paths:
        real = Path(os.path.realpath(path))
        if real not in found or (os.path.islink(found[real]) and not os.path.islink(path)):
            found[real] = path
    return list(found.values())


#: Why a command over many cases leaves out an entry that may look like a case (each said in a note).
BUILD_FOLDER_LEFT_OUT = ("named like an import's or a demo's build folder (a run's scratch, which a killed run "
                         "leaves and the next import or demo there removes)")
DEAD_LINK_LEFT_OUT = "a link that leads nowhere or loops"
TOO_DEEP_LEFT_OUT = "a folder whose path is longer than the system can name: no case in it could be opened"
EXPORT_ALONE_LEFT_OUT = (f"holds an export's {ANALYSIS_DIR}/ but no {LEDGER_FILE}, none of its side files and no "
                         f"{MANIFEST_FILE}: not a case package")


def export_alone(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds an export's ``analysis/`` (its ``case/events/``) but is no case
    package (:func:`is_case_package`): what the commands over many cases leave out with a note. A
    build folder (:func:`is_build_folder`) is not: it is left out, with its own note, for its name
    (it may hold a whole case: an import builds one there)."""
    return (not is_build_folder(os.path.basename(os.path.normpath(folder)))
            and os.path.isdir(os.path.join(folder, ANALYSIS_DIR, "case", "events"))
            and not is_case_package(Path(folder)))


def dead_link(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a link that leads nowhere or loops."""
    return os.path.islink(path) and not os.path.exists(path)


def second_paths(paths: list[Path]) -> list[tuple[Path, str]]:
    """``(path, why)`` of each path :func:`once_each` drops from ``paths``: a second path to a folder
    listed already, named with the path it is taken under."""
    by_real = {os.path.realpath(path): path for path in once_each(paths)}
    taken: set[str] = set()
    dropped = []
    for path in paths:  # a path given twice (c1 and ./c1/) is dropped the second time, as a link to it is
        real = os.path.realpath(path)
        if path == by_real[real] and real not in taken:
            taken.add(real)
        else:
            dropped.append((path, f"the same case folder as {by_real[real]}, which is taken once"))
    return dropped


def is_case_package(folder: Path) -> bool:
    """True when ``folder`` holds ``ledger.sqlite``, or shows a case package's other marks without
    it: ``ledger.sqlite``'s side files (``-wal``, ``-shm``, ``-journal``, ``-lock``,
    ``-export-lock``) or an export (``manifest.json`` beside ``analysis/``). Finding many cases
    takes such a damaged package too, so that opening it fails (``LEDGER_MISSING``; a
    ``ledger.sqlite`` that is no file, ``STORAGE_ERROR``) instead of the case being left out
    without a word (docs/cli.md). So is a folder this user may not read (it may hold a case: opening
    it fails with ``STORAGE_ERROR``). An import's or a demo's build folder (:func:`is_build_folder`) is none."""
    if is_build_folder(folder.name):
        return False
    if os.path.lexists(folder / LEDGER_FILE):
        return True
    try:
        with os.scandir(folder) as entries:
            names = {entry.name for entry in entries}
    except PermissionError:
        return True
    except OSError as oserr:
        pass_on_interruption(oserr)
        return False
    return (LEDGER_FILE in names or not names.isdisjoint(LEDGER_SIDE_FILES)  # listed, but not searchable
            or (MANIFEST_FILE in names and ANALYSIS_DIR in names))


def ledger_folder_holding(path: str | os.PathLike[str], *, itself: bool = True) -> Path | None:
    """The nearest case package that ``path`` lies in (or, with ``itself``, is), links followed:
    the first folder of its real path and its parents holding ``ledger.sqlite`` or one of its side
    files (a damaged package's marks; a ``manifest.json`` beside ``analysis/`` alone is too common
    a pair elsewhere to refuse a path for). None when no such folder holds it."""
    real = Path(os.path.realpath(path))
    for folder in ([real] if itself else []) + list(real.parents):
        if any(os.path.lexists(folder / name) for name in (LEDGER_FILE,) + LEDGER_SIDE_FILES):
            return folder
    return None


def refuse_output_in_package(path: str | os.PathLike[str], what: str, *, itself: bool = True) -> None:
    """``INVALID_ARGUMENT`` when ``path``, where a command would write (``what`` names it: an option or
    "case path"), is a case package or lies inside one (:func:`ledger_folder_holding`): a file there
    would replace the ledger or its log, stand in the export (so verify fails) or hide a case inside
    another one from ``--all`` (docs/files.md, "What writes in a package"). So is a ``path`` named
    like ``ledger.sqlite`` or one of its side files: the folder holding it would look like a case."""
    holder = ledger_folder_holding(path, itself=itself)
    if holder is not None:
        where = "is" if holder == Path(os.path.realpath(path)) else "is inside"
        raise LedgerError(E.INVALID_ARGUMENT, f"{what} {path}: {where} the case package {holder}, and only that case's "
                          "own commands write in a case package; choose a path outside it", path=str(path))
    if Path(path).name in (LEDGER_FILE,) + LEDGER_SIDE_FILES:  # it would make its folder look like a case
        raise LedgerError(E.INVALID_ARGUMENT, f"{what} {path}: {Path(path).name} is the name of a ledger's own file, "
                          "which makes the folder holding it a case package (a damaged one); choose another name",
                          path=str(path))


def refuse_own_links(root: Path, *, creating: bool = False) -> None:
    """``INVALID_ARGUMENT`` naming the first of the ledger's own files or folders
    (``ledger.sqlite``'s ``-wal``, ``-shm``, ``-journal``, ``-lock``, ``-export-lock``,
    ``manifest.json``, ``analysis/``; with ``creating`` also ``ledger.sqlite``) that is a
    symbolic link: writing, renaming or deleting through it would land outside the package.
    Links inside ``analysis/`` are refused where it is read (:func:`export_tree_files`)."""
    for name in ((LEDGER_FILE,) if creating else ()) + OWN_LINKLESS:
        refuse_link(root, name, "own files" if name != ANALYSIS_DIR else "export folder")


def refuse_stray_logs(root: Path) -> None:
    """``INTEGRITY_ERROR`` when ``ledger.sqlite`` is a link and a ``ledger.sqlite-wal`` or
    ``-journal`` lies beside the link: SQLite reads the log beside the file the link leads to, never
    this one, so the package's ledger reads one way through the link and another once copied by a
    tool that follows links (``cp -L``, ``zip``), which puts the stray log beside the file."""
    ledger = root / LEDGER_FILE
    if not ledger.is_symlink():
        return
    real = os.path.realpath(ledger)
    for suffix in ("-wal", "-journal"):
        stray = root / (LEDGER_FILE + suffix)
        if os.path.lexists(stray) and os.path.realpath(stray) != real + suffix:
            raise integrity_error(None, f"{stray.name} lies beside the link {LEDGER_FILE} (to {real}), where SQLite "
                                  f"never reads it: the ledger's log is {real}{suffix}. A copy that follows links "
                                  "would apply it to the ledger; move it beside the file if it is that ledger's log, "
                                  "else remove it", path=stray.name)


def well_placed(stream: object, revision: object, stream_seq: object) -> bool:
    """Whether an events row's ``stream``, ``revision`` and ``stream_seq`` are text and integers, as
    the ledger writes them (an edited column may hold ``1.0``, which SQL takes for ``1``)."""
    return type(stream) is str and type(revision) is int and type(stream_seq) is int


def event_path(stream: str, revision: int, stream_seq: int) -> str:
    """Where an event exports to, relative to the package root: budget events per revision,
    every other event under ``analysis/case/events/``. An evidence event's stream is its own
    export path (``analysis/evidence/<revision>/<op>/…``, see :func:`evidence_path`).
    ``INTEGRITY_ERROR`` unless :func:`well_placed`."""
    if not well_placed(stream, revision, stream_seq):
        raise LedgerError(E.INTEGRITY_ERROR, f"an events row places its event by stream {stream!r}, revision "
                          f"{revision!r}, stream_seq {stream_seq!r}: text and integers belong there (an edited "
                          "column); run 'ledger verify'")
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
    """True for ``ledger.sqlite*``, ``manifest.json`` and anything under ``analysis/`` (docs/concepts.md)."""
    parts = relative.parts
    if not parts:
        return False
    if len(parts) == 1 and (parts[0].startswith(LEDGER_FILE) or parts[0] == MANIFEST_FILE):
        return True
    return parts[0] == ANALYSIS_DIR
