"""The case package and its lifecycle (SPEC section 2).

A case package is a directory holding ``ledger.sqlite`` (the source of truth),
the case's read-only inputs (``sources/``, ``data/``, anything else) and, after
``export``, ``manifest.json`` and ``analysis/``. :class:`Case` creates and opens
packages, moves the case through its states, resolves source references and
computes the input identity.
"""

from __future__ import annotations

import hashlib
import os
import stat
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable, Iterable

from . import errors as E
from . import rules
from .canonical import canonical_sha256, check_int
from .clock import parse_at, utc_now
from .config import AnalysisConfig, BudgetConfig
from .errors import LedgerError
from .paths import fs_path, os_error
from .storage import (LEDGER_FILE, Appended, SqlView, Storage, check_ledger_path, content_path, event_path,
                      statement)

if TYPE_CHECKING:
    from .budget import BudgetManager

MANIFEST_FILE = "manifest.json"
ANALYSIS_DIR = "analysis"
DEFAULT_ACTOR = "controller"
#: Temporary files of an interrupted export are the ledger's own too.
EXPORT_TEMP_PREFIX = ".ledger-tmp-"


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
    for ref in rules.check_source_ref_list(list(refs) if isinstance(refs, (list, tuple)) else refs):
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


@dataclass(frozen=True)
class LifecycleResult:
    """Result of ``open_revision`` and ``transition``.

    ``case_state`` is the case state after the call, ``seq`` the event's (the original
    one when ``reused``), ``event_ref`` its export path, ``hypotheses`` the
    revision's batch (``open_revision`` only).
    """

    package_path: str
    revision: int
    case_state: str
    seq: int
    event_ref: str
    reused: bool
    hypotheses: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.hypotheses is None:
            del out["hypotheses"]
        return out


class Case:
    """An open case package. Use :meth:`create` or :meth:`open`; close with :meth:`close`.

    ``actor`` is the asserted identity recorded in every event (default
    ``controller``); ``clock`` returns the time of events written without an
    explicit ``at``. One ``Case`` per thread.
    """

    def __init__(self, path: Path, storage: Storage, analysis: AnalysisConfig, *,
                 actor: str = DEFAULT_ACTOR, clock: Callable[[], str] = utc_now) -> None:
        self.path = path
        self.storage = storage
        self.analysis = analysis
        self.actor = rules._check_action_id(actor, "actor")
        self.clock = clock

    # -- opening -----------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike[str], case_id: str, *,
               analysis_config: AnalysisConfig | None = None, actor: str = DEFAULT_ACTOR,
               clock: Callable[[], str] = utc_now, at: str | None = None) -> "Case":
        """Create a case package at ``path`` (the folder may exist and hold inputs).

        Raises ``CASE_EXISTS`` when it already holds a manifest, a ledger with a case
        or an ``analysis/`` tree; ``INVALID_ID`` for a malformed ``case_id``.
        """
        rules.check_case_id(case_id)
        rules._check_action_id(actor, "actor")
        moment = parse_at(at) if at is not None else None
        analysis = analysis_config or AnalysisConfig()
        root = fs_path(path, "case path")
        try:
            return cls._create(root, case_id, analysis, actor, clock, moment)
        except OSError as exc:
            raise os_error(exc, f"cannot create a case at {root}") from None

    @classmethod
    def _create(cls, root: Path, case_id: str, analysis: AnalysisConfig, actor: str,
                clock: Callable[[], str], moment: str | None) -> "Case":
        if (root / MANIFEST_FILE).exists() or (root / ANALYSIS_DIR).exists():
            raise LedgerError(E.CASE_EXISTS, f"{root} already holds a case package (manifest or analysis/)")
        if root.exists() and not root.is_dir():
            raise LedgerError(E.INVALID_ARGUMENT, f"{root} is not a directory")
        check_ledger_path(root / LEDGER_FILE)  # before any folder is made
        root.mkdir(parents=True, exist_ok=True)
        storage = Storage.create(root / LEDGER_FILE, analysis.storage, analysis.limits)
        case = cls(root, storage, analysis, actor=actor, clock=clock)
        try:
            request = rules.shape_create(case_id, str(uuid.uuid4()))
            moment = moment or clock()
            with storage.write():
                storage.check_schema_version()
                storage.apply_migrations()
                if SqlView(storage).case() is not None:
                    raise LedgerError(E.CASE_EXISTS, f"{root} already holds a case ledger")
                storage.append(rules.create(SqlView(storage), request), at=moment, actor=case.actor)
        except BaseException:
            storage.conn.close()
            raise
        return case

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, analysis_config: AnalysisConfig | None = None,
             actor: str = DEFAULT_ACTOR, clock: Callable[[], str] = utc_now) -> "Case":
        """Open an existing package.

        Raises ``LEDGER_MISSING`` when ``ledger.sqlite`` is absent (``import`` restores
        it from an export) or holds no case, ``SCHEMA_VERSION`` for a newer schema.
        """
        analysis = analysis_config or AnalysisConfig()
        root = fs_path(path, "case path")
        try:
            return cls._open(root, analysis, actor, clock)
        except OSError as exc:
            raise os_error(exc, f"cannot open a case at {root}", E.LEDGER_MISSING) from None

    @classmethod
    def _open(cls, root: Path, analysis: AnalysisConfig, actor: str, clock: Callable[[], str]) -> "Case":
        ledger = root / LEDGER_FILE
        if not ledger.is_file():
            if (root / MANIFEST_FILE).exists():
                raise LedgerError(
                    E.LEDGER_MISSING,
                    f"{ledger} is missing but the package has an export; restore it with "
                    f"'ledger import {root} --to {root}' instead of starting a new ledger",
                )
            if (root / ANALYSIS_DIR).exists():
                raise LedgerError(
                    E.LEDGER_MISSING,
                    f"{ledger} and manifest.json are missing but {root / ANALYSIS_DIR} exists: the export cannot be "
                    "trusted without its manifest, so there is nothing to restore from here (move analysis/ aside to "
                    "start a new case with 'ledger init')",
                )
            raise LedgerError(E.LEDGER_MISSING, f"no case at {root} (no {LEDGER_FILE}); create one with 'ledger init'")
        storage = Storage.open(ledger, analysis.storage, analysis.limits)
        case = cls(root, storage, analysis, actor=actor, clock=clock)
        try:
            with storage.read():
                if storage.current_schema_version() == 0 or SqlView(storage).case() is None:
                    raise LedgerError(E.LEDGER_MISSING, f"{ledger} holds no case (an interrupted init?); run init again")
        except BaseException:
            storage.conn.close()
            raise
        return case

    def close(self) -> None:
        """Checkpoint the WAL (``wal_checkpoint(TRUNCATE)``) and close the connection."""
        self.storage.close()

    def __enter__(self) -> "Case":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- running operations -------------------------------------------------------
    def run(self, rule: Callable[[SqlView], rules.Draft | rules.Reused], *, at: str | None = None,
            check_limits: bool = True) -> tuple[Appended | None, int, SqlView]:
        """Evaluate ``rule`` and append its event in one ``BEGIN IMMEDIATE`` transaction.

        Returns ``(appended or None when reused, seq, view)``. ``at`` is an RFC 3339
        UTC time (``INVALID_ARGUMENT`` otherwise). Used by the budget manager too.
        """
        moment = parse_at(at) if at is not None else None
        with self.storage.write():
            view = SqlView(self.storage)
            outcome = rule(view)
            if isinstance(outcome, rules.Reused):
                return None, outcome.seq, view
            appended = self.storage.append(outcome, at=moment or self.clock(), actor=self.actor,
                                           check_limits=check_limits)
            return appended, appended.seq, view

    def batch(self):
        """Group commit: operations inside share one durable transaction (one fsync).

        Each operation still succeeds or fails alone (a savepoint each) and returns
        the same result as outside a batch, but nothing is durable until the
        ``with`` block ends normally. An exception that leaves the block (a
        ``LedgerError`` not caught inside it, ``KeyboardInterrupt``) rolls back the
        whole batch, results already returned included; catch refusals per
        operation to keep the rest. Use for journals and bulk loads; keep batches
        short, as other writers wait meanwhile::

            with case.batch():
                for hypothesis, action_id in work:
                    try:
                        budget.reserve(hypothesis, action_id, "source.read_context")
                    except LedgerError as refused:
                        print(refused.code)  # this one rolled back alone
        """
        return self.storage.batch()

    def event_ref(self, seq: int) -> str:
        """Export path of event ``seq`` (SPEC 9)."""
        row = self.storage.one("event_by_seq", seq=seq)
        if row is None:
            raise LedgerError(E.INVALID_ARGUMENT, f"no event with seq {seq}")
        return event_path(row[3], row[2], row[4])

    def _lifecycle_result(self, appended: Appended | None, seq: int, view: SqlView,
                          with_hypotheses: bool = False) -> LifecycleResult:
        with self.storage.read():
            case = view.case()
            ref = appended.event_ref if appended else self.event_ref(seq)
            hypotheses = None
            if with_hypotheses:
                info = view.revision(case["revision"])
                hypotheses = info["hypotheses"] if info else []
        return LifecycleResult(str(self.path), case["revision"], case["state"], seq, ref,
                               appended is None, hypotheses)

    def open_revision(self, hypotheses: Iterable[dict[str, Any]], units_per_hypothesis: int | None = None,
                      *, at: str | None = None) -> LifecycleResult:
        """Open revision 1 (from ``CREATED``) or reopen as the next revision (from
        ``EVALUATING``/``CLOSED``); hypothesis ids ``H1``… are assigned in order.

        ``hypotheses`` is a list of ``{"statement": str}``; each gets
        ``units_per_hypothesis`` (default: the analysis config's). Errors:
        ``INVALID_ARGUMENT``, ``INVALID_TRANSITION``.
        """
        request = rules.shape_open_revision(
            list(hypotheses) if isinstance(hypotheses, (list, tuple)) else hypotheses,
            units_per_hypothesis, default_units=self.analysis.units_per_hypothesis,
            max_hypotheses=self.analysis.max_hypotheses,
        )
        appended, seq, view = self.run(lambda v: rules.open_revision(v, request), at=at)
        return self._lifecycle_result(appended, seq, view, with_hypotheses=True)

    def transition(self, to: str, *, at: str | None = None) -> LifecycleResult:
        """Move the case to state ``to`` (SPEC 2). Errors: ``INVALID_ARGUMENT``,
        ``INVALID_TRANSITION``, ``ACTION_PENDING`` (into ``EVALUATING``)."""
        request = rules.shape_transition(to)
        appended, seq, view = self.run(lambda v: rules.transition(v, request), at=at)
        return self._lifecycle_result(appended, seq, view)

    def budget(self, config: BudgetConfig | None = None) -> "BudgetManager":
        """The budget manager of this case; ``config=None`` uses the frozen policy."""
        from .budget import BudgetManager  # budget builds on case; import here avoids a cycle

        return BudgetManager(self, config)

    # -- reads ---------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The ``case_status`` view's row."""
        return self.query(statement("case_status_row"))[0]

    def query(self, sql: str, params: Iterable[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        """Rows of a read-only query as dicts, in one short read transaction."""
        from .storage import translate_sqlite_errors

        with self.storage.read(), translate_sqlite_errors():
            cursor = self.storage.conn.execute(sql, params)
            names = [d[0] for d in cursor.description or ()]
            return [dict(zip(names, row)) for row in cursor.fetchall()]

    def balances(self) -> list[dict[str, Any]]:
        """Rows of the ``balances`` view, by revision and hypothesis number."""
        return self.query(statement("balances_in_order"))

    def actions(self) -> list[dict[str, Any]]:
        """Rows of the ``actions`` view in the order the actions were reserved."""
        return self.query(statement("actions_in_reservation_order"))

    def events(self, since_seq: int = 0, *, with_body: bool = False) -> list[dict[str, Any]]:
        """The hash chain after ``since_seq``: ``seq``, ``type``, ``revision``, ``created_at``,
        ``sha256``, ``parent_sha256`` (and ``body``, the canonical JSON text), by seq."""
        check_int(since_seq, "since_seq", minimum=0)
        return self.query(statement("events_since", body=", body" if with_body else ""), {"since": since_seq})

    # -- package files -----------------------------------------------------------------
    def resolve_source_refs(self, refs: Iterable[str]) -> list[dict[str, str]]:
        """``[{"path", "sha256"}]`` for source references: :func:`resolve_source_refs` on this package."""
        return resolve_source_refs(self.path, refs)

    def exported_paths(self) -> set[str]:
        """Every path under ``analysis/`` that an export of this ledger writes."""
        with self.storage.read():
            rows = self.storage.conn.execute(statement("event_addresses")).fetchall()
            shas = self.storage.conn.execute(statement("content_shas")).fetchall()
        return {event_path(*row) for row in rows} | {content_path(sha) for (sha,) in shas}

    def input_identity(self) -> str:
        """sha256 over the sorted ``[relative path, sha256]`` of the package's inputs (SPEC 2).

        Excludes ``ledger.sqlite*``, ``manifest.json`` and the files under
        ``analysis/`` that the ledger exports (plus an interrupted export's temp
        files). A symlink contributes the sha256 of its target text, never bytes
        from outside the package.
        """
        exported = self.exported_paths()
        entries = []
        for directory, dirnames, filenames in os.walk(self.path):
            dirnames.sort()
            for name in filenames:
                full = Path(directory, name)
                relative = full.relative_to(self.path).as_posix()
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
                    relative = full.relative_to(self.path).as_posix()
                    entries.append([relative, hashlib.sha256(b"symlink:" + os.fsencode(os.readlink(full))).hexdigest()])
        entries.sort()
        return canonical_sha256(entries)
