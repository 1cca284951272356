"""The case package and its lifecycle (docs/concepts.md).

A case package is a directory holding ``ledger.sqlite`` (the source of truth),
the case's read-only inputs (``sources/``, ``data/``, anything else) and, after
``export``, ``manifest.json`` and ``analysis/``. :class:`Case` creates and opens
packages, moves the case through its states, resolves source references and
computes the input identity.
"""

from __future__ import annotations

import errno
import os
import sys
import uuid
import weakref
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..ground.arguments import NotCopied, caller_stacklevel, plain_public_arguments
from ..ground import errors as E
from ..storage.sqlfiles import VIEW_COLUMNS, migration_record_problem, statement, with_view_columns
from ..ground.canonical import check_int
from ..ground.clock import checked_clock, first_then, parse_at, utc_now
from ..ground.config import AnalysisConfig, BudgetConfig
from ..ground.arguments import check_flag, check_instance, check_sql_params
from ..ground.errors import LedgerError, refuses_unfit_calls, pass_on_interruption
from .actions import CaseBudget
from .facade import CaseFacade, LifecycleResult  # noqa: F401
from .evidence import EvidenceStore
from ..model.package import (ANALYSIS_DIR, LEDGER_FILE, MANIFEST_FILE, analysis_not_a_folder, content_path, event_path,
    is_case_package, refuse_build_folder_name, refuse_output_in_package, refuse_own_links)
from ..model.input_identity import input_identity
from ..model.source_refs import resolve_source_refs
from ..ground.paths import (current_folder_gone, fs_path, make_folders, os_error, refuse_link_to_nothing,
                            where_link_leads)
from ..ground.interrupts import context_manager
from ..router.reference import Router
from ..rules import lifecycle
from ..rules.common import check_action_id, check_case_id
from ..storage.readonly import one_statement, readonly_rows, reading_only, refuse_names_bound_by_position
from .session import Session, check_future_at
from ..storage.connection import CheckpointWarning, Storage
from ..storage.transaction import holds_snapshot
from ..storage.sqlite_file import NOTHING_WRITTEN, check_ledger_path, no_case_in, no_case_yet, translate_sqlite_errors
from ..storage.side_files import check_side_files, orphaned_logs
from ..model.views import SqlView

DEFAULT_ACTOR = "controller"



def _logs_without_ledger(root: Path) -> list[str]:
    """The names of ``ledger.sqlite``'s logs (``-wal``, ``-journal``: committed writes not yet in the
    ledger file) in ``root`` when ``ledger.sqlite`` itself is not there, or is empty and they hold a
    ledger's writes (:func:`~ledger.storage.side_files.orphaned_logs`)."""
    if os.path.lexists(root / LEDGER_FILE):
        return orphaned_logs(root / LEDGER_FILE)
    return [name for name in (LEDGER_FILE + "-wal", LEDGER_FILE + "-journal") if os.path.lexists(root / name)]


def _refuse_lost_ledgers_logs(root: Path) -> None:
    """``CASE_EXISTS`` when ``root`` holds the logs of a ledger that is not there (:func:`_logs_without_ledger`),
    which SQLite would delete as a new ledger's."""
    logs = _logs_without_ledger(root)
    if logs:
        ledger = f"an empty {LEDGER_FILE}" if os.path.lexists(root / LEDGER_FILE) else f"no {LEDGER_FILE}"
        raise LedgerError(E.CASE_EXISTS, f"{root} holds {' and '.join(logs)} but {ledger}: the log of a "
                          "case whose ledger was lost or moved, which a new ledger here would delete; put the "
                          f"case's {LEDGER_FILE} back (or 'ledger import' its export), or move the log aside first")


def _analysis(config: Any) -> AnalysisConfig:
    """``config``, or the default analysis config for None; ``INVALID_ARGUMENT`` for anything else (a
    mapping is given as ``AnalysisConfig.from_mapping(it)``, a file as ``AnalysisConfig.load(path)``)."""
    if config is None:
        return AnalysisConfig()
    return check_instance(config, AnalysisConfig, "analysis_config",
                          "an AnalysisConfig (AnalysisConfig.load(path) or AnalysisConfig.from_mapping(dict)) or None")


def missing_ledger(root: Path) -> LedgerError:
    """The ``LEDGER_MISSING`` error for a package ``root`` without ``ledger.sqlite``, saying what
    can be done: restore it from the export, or nothing to restore from, or create a case. A
    ``ledger.sqlite`` that is there but no file (a folder, a link to nothing) is ``STORAGE_ERROR``:
    it must be moved aside first."""
    ledger = root / LEDGER_FILE
    try:
        os.scandir(root).close()
    except PermissionError:  # it may hold a ledger this user cannot see
        return LedgerError(E.STORAGE_ERROR, f"{root}: this user may not read the folder (permission denied), so "
                           "whether it holds a case is not known", path=str(root))
    except OSError as oserr:
        pass_on_interruption(oserr)
    if ledger.is_file():  # made since the caller looked: an init running
        return no_case_yet(ledger)
    if os.path.lexists(ledger):
        kind = "a folder" if ledger.is_dir() else "a link to nothing" if not ledger.exists() else "not a regular file"
        restore = (f"; then 'ledger import {root}' restores it in place from the package's export"
                   if (root / MANIFEST_FILE).exists() else "")
        return LedgerError(E.STORAGE_ERROR, f"{ledger} is {kind}, not a ledger file: move it aside{restore}")
    if (root / MANIFEST_FILE).exists():
        return LedgerError(
            E.LEDGER_MISSING,
            f"{ledger} is missing but the package has an export; restore it with "
            f"'ledger import {root}' (in place) instead of starting a new ledger, or check the export without "
            f"writing into this folder (an export you received) with 'ledger import {root} --to NEW_FOLDER'",
        )
    if os.path.lexists(root / ANALYSIS_DIR) and not (root / ANALYSIS_DIR).is_dir():
        return LedgerError(E.LEDGER_MISSING, f"{ledger} is missing, and {root / ANALYSIS_DIR} is no folder (where an "
                           "export's folder belongs): move it aside to start a new case with 'ledger init'")
    if (root / ANALYSIS_DIR).exists():
        return LedgerError(
            E.LEDGER_MISSING,
            f"{ledger} and manifest.json are missing but {root / ANALYSIS_DIR} exists: the export cannot be "
            "trusted without its manifest, so there is nothing to restore from here (move analysis/ aside to "
            "start a new case with 'ledger init')",
        )
    logs = _logs_without_ledger(root)
    if logs:
        return LedgerError(E.LEDGER_MISSING, f"{ledger} is missing but {' and '.join(logs)} beside it "
                           f"{'is' if len(logs) == 1 else 'are'} there: the log of a ledger that was lost or moved; "
                           "put it back (a new case here would delete that log)")
    if os.path.islink(root) and not os.path.exists(root):
        return LedgerError(E.LEDGER_MISSING, f"no case at {root} (a symbolic link {where_link_leads(root)}); "
                           "check the path")
    above = next((at for at in Path(root).parents if os.path.islink(at) and not os.path.exists(at)), None)
    if above is not None and not os.path.lexists(root):  # 'ledger init' there would be refused for it
        return LedgerError(E.LEDGER_MISSING, f"no case at {root} ({above}, a folder above it, is a symbolic link "
                           f"{where_link_leads(above)}); check the path")
    if not os.path.lexists(root):
        why = _unreachable(root)
        advice = ("check the path, or create a case there with 'ledger init'" if why == "no such folder"
                  else "check the path")
        return LedgerError(E.LEDGER_MISSING, f"no case at {root} ({why}); {advice}")
    inside = _cases_inside(root)
    if inside:
        more = ", …" if len(inside) > 2 else ""
        return LedgerError(E.LEDGER_MISSING, f"no case at {root} (no {LEDGER_FILE}), but it holds case folders "
                           f"({', '.join(inside[:2])}{more}): name one of them, or several ('ledger serve {root}/*'; "
                           "'ledger verify' and 'ledger export' take the folder with --all)")
    return LedgerError(E.LEDGER_MISSING, f"no case at {root} (no {LEDGER_FILE}); check the path, or create a case there "
                       "with 'ledger init'")


def _unreachable(root: Path) -> str:
    """Why ``root`` is not there: no such folder, or a path the system cannot follow (a link loop, a
    file where a folder should be), or a relative path whose current folder was removed."""
    if not root.is_absolute() and current_folder_gone():
        return ("the path is relative to the current folder, which no longer exists (removed or moved while in "
                "use): cd to one that does")
    try:
        os.lstat(root)
    except OSError as exc:
        pass_on_interruption(exc)
        if exc.errno == errno.ELOOP:
            return "a link loop on the way: too many levels of symbolic links"
        if exc.errno == errno.ENOTDIR:
            return "a file stands where the path needs a folder"
    return "no such folder"


def _cases_inside(root: Path, looked_at_max: int = 1000) -> list[str]:
    """Names of up to three folders directly inside ``root`` that ``ledger verify --all`` would take
    (:func:`~ledger.model.package.is_case_package`; the first ``looked_at_max`` entries only: this
    only words an error)."""
    found: list[str] = []
    try:
        with os.scandir(root) as entries:
            for number, entry in enumerate(entries):
                if number >= looked_at_max or len(found) == 3:
                    break
                if entry.is_dir(follow_symlinks=False) and is_case_package(Path(entry.path)):
                    found.append(entry.name)
    except OSError as oserr:
        pass_on_interruption(oserr)
        return []
    return sorted(found)

def _exported_here(root: Path) -> LedgerError:
    """``CASE_EXISTS`` for creating a case where an export is (``manifest.json`` or ``analysis/``),
    saying what else is there and the way on: its ledger, a ledger file holding no case, or none."""
    manifest = (root / MANIFEST_FILE).exists()
    if not manifest and not (root / ANALYSIS_DIR).is_dir():
        return analysis_not_a_folder()  # a file where an export's folder belongs: no export's
    export = "an exported case" if manifest else f"an {ANALYSIS_DIR}/ tree (an export's, without its {MANIFEST_FILE})"
    if not os.path.lexists(root / LEDGER_FILE):
        return LedgerError(E.CASE_EXISTS, f"{root} already holds {export}" + (
            f" without its {LEDGER_FILE}: 'ledger import' rebuilds the ledger from it" if manifest else
            ": move it aside to create a case here"))
    try:
        read_only_query(root, "SELECT 1 FROM case_identity LIMIT 1")
    except LedgerError:  # no case in it (an init cut short), no ledger at all, or a file in its place
        return LedgerError(E.CASE_EXISTS, f"{root} already holds {export} and a {LEDGER_FILE} that holds no case: "
                           + ("move that file aside, then 'ledger import' rebuilds the ledger from the export"
                              if manifest else "move both aside to create a case here"))
    return LedgerError(E.CASE_EXISTS, f"{root} already holds a case ledger (and its export)")


def _no_case_created(exc: BaseException, root: Path) -> LedgerError | None:
    """What creating the case at ``root`` raises for ``exc``, a file system's refusal ("nothing was
    written"): that no case was created, for the ledger file made empty may stay (removing it would race
    another ``init`` waiting on its lock to create the case in it). None for anything else: raised as it is."""
    if not (isinstance(exc, LedgerError) and exc.code == E.STORAGE_ERROR and exc.message.endswith(NOTHING_WRITTEN)):
        return None
    return LedgerError(E.STORAGE_ERROR, exc.message.removesuffix(NOTHING_WRITTEN) + f"; no case was created (a "
                       f"{LEDGER_FILE} left in {root}, empty, holds none): creating it again once the cause is gone "
                       "makes it", **exc.details)


@plain_public_arguments
class Case(NotCopied, CaseFacade):
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
        self.actor = check_action_id(actor, "actor")
        self.clock = clock
        self.session = Session(storage, actor=self.actor, clock=clock, limits=analysis.limits)
        self._readers: weakref.WeakSet[Any] = weakref.WeakSet()  # rows still being read (:meth:`_iter_rows`)
        #: ``(seq, sha256, paths)``: the exported paths of the history up to that event (:meth:`_exported_now`).
        self._exported: tuple[int, str, set[str]] | None = None

    # -- opening -----------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike[str], case_id: str, *,
               analysis_config: AnalysisConfig | None = None, actor: str = DEFAULT_ACTOR,
               clock: Callable[[], str] = utc_now, at: str | None = None) -> "Case":
        """Create a case package at ``path`` (the folder may exist and hold inputs).

        Raises ``CASE_EXISTS`` when it already holds a manifest, a ledger with a case
        or an ``analysis/`` tree; ``INVALID_ID`` for a malformed ``case_id``.
        """
        check_case_id(case_id)
        check_action_id(actor, "actor")
        analysis = _analysis(analysis_config)
        clock = checked_clock(clock)
        # a clock that gives no time is refused before any folder or file is made, and so is a far-future
        # time; the time read to check the clock is the first event's (the clock is read as often as ever)
        if at is not None:
            moment = check_future_at(parse_at(at), clock(), analysis.limits)
        else:
            moment, clock = None, first_then(clock(), clock)
        root = fs_path(path, "case path")
        try:
            return cls._create(root, case_id, analysis, actor, clock, moment)
        except OSError as exc:
            raise os_error(exc, f"cannot create a case at {root}") from None

    @classmethod
    def _create(cls, root: Path, case_id: str, analysis: AnalysisConfig, actor: str,
                clock: Callable[[], str], moment: str | None) -> "Case":
        check_new_case_path(root)
        if (root / MANIFEST_FILE).exists() or (root / ANALYSIS_DIR).exists():
            raise _exported_here(root)
        if root.exists() and not root.is_dir():
            raise LedgerError(E.INVALID_ARGUMENT, f"{root} is not a directory")
        check_side_files(root / LEDGER_FILE)  # a log that is a folder or a pipe is named as such, not as a lost case's
        check_ledger_path(root / LEDGER_FILE)  # before any folder is made
        made = [folder for folder in (root, *root.parents) if not os.path.lexists(folder)]  # deepest first
        try:
            make_folders(root)
            # the lost ledger's logs are looked for under the writer lock: another init's are no lost ledger's
            storage = Storage.create(root / LEDGER_FILE, analysis.storage, lambda: _refuse_lost_ledgers_logs(root))
        except BaseException as exc:  # no ledger could be made (an unwritable folder): nor are the folders left
            for folder in made:
                try:
                    folder.rmdir()
                except FileNotFoundError:
                    continue  # not made: the mkdir failed below it
                except OSError as oserr:
                    pass_on_interruption(oserr)
                    break
            refusal = _no_case_created(exc, root)
            if refusal is not None:
                raise refusal from None
            raise
        case = cls(root, storage, analysis, actor=actor, clock=clock)
        try:
            request = lifecycle.shape_create(case_id, str(uuid.uuid4()))
            case.session.run("create", request, at=moment, prepare=cls._prepare_new_ledger(storage, root))
        except BaseException as exc:
            storage.discard()
            refusal = _no_case_created(exc, root)
            if refusal is not None:
                raise refusal from None
            raise
        return case

    @staticmethod
    def _prepare_new_ledger(storage: Storage, root: Path) -> Callable[[SqlView], None]:
        def prepare(view: SqlView) -> None:
            storage.check_schema_version()
            storage.apply_migrations()
            if view.case() is not None:
                raise LedgerError(E.CASE_EXISTS, f"{root} already holds a case ledger")
        return prepare

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, analysis_config: AnalysisConfig | None = None,
             actor: str = DEFAULT_ACTOR, clock: Callable[[], str] = utc_now) -> "Case":
        """Open an existing package.

        Raises ``LEDGER_MISSING`` when ``ledger.sqlite`` is absent (``import`` restores
        it from an export) or holds no case, ``SCHEMA_VERSION`` for a newer schema.
        """
        analysis = _analysis(analysis_config)
        root = fs_path(path, "case path")
        try:
            return cls._open(root, analysis, actor, checked_clock(clock))
        except OSError as exc:
            raise os_error(exc, f"cannot open a case at {root}", E.LEDGER_MISSING) from None

    @classmethod
    def _open(cls, root: Path, analysis: AnalysisConfig, actor: str, clock: Callable[[], str]) -> "Case":
        refuse_own_links(root)
        ledger = root / LEDGER_FILE
        if not ledger.is_file():
            raise missing_ledger(root)
        storage = Storage.open(ledger, analysis.storage)
        case = cls(root, storage, analysis, actor=actor, clock=clock)
        try:
            with storage.read():
                with translate_sqlite_errors():
                    problem = migration_record_problem(storage.conn)
                if problem or storage.current_schema_version() == 0 or SqlView(storage).case() is None:
                    raise no_case_in(storage.conn, ledger)  # an edited ledger, another program's, or none yet
        except BaseException:
            storage.discard()
            raise
        return case

    def close(self) -> str | None:
        """Checkpoint the WAL (``wal_checkpoint(TRUNCATE)``) and close the connection.

        Never waits on another connection. Returns None when the write-ahead log was
        emptied, else why not (a reader elsewhere holds an old snapshot), which is
        also issued as a :class:`CheckpointWarning`; the case is closed either way.
        ``INVALID_ARGUMENT`` from a thread other than the one that opened the case.
        """
        self.session.check_thread()
        for reader in list(self._readers):  # one stopped part-way (a closed pipe) ends its read first
            reader.close()
        incomplete = self.storage.close()
        if incomplete is not None:
            warnings.warn(incomplete, CheckpointWarning, stacklevel=caller_stacklevel())
        return incomplete

    @property
    def last_clamp(self) -> tuple[str, str] | None:
        """``(requested at, recorded at)``, RFC 3339 UTC texts, when this case's last write was given an
        ``at`` earlier than the previous event's time and so recorded at that time (docs/concepts.md,
        Times); None otherwise (no ``at`` given, none raised, a replay that wrote nothing)."""
        return self.session.last_clamp

    def __enter__(self) -> "Case":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def budget(self, config: BudgetConfig | None = None) -> CaseBudget:
        """The budget manager of this case (``config=None`` uses the frozen policy), with
        :meth:`~ledger.services.actions.CaseBudget.run_tool` and :meth:`~ledger.services.actions.CaseBudget.action`."""
        return CaseBudget(self.session, self.path, config, self.evidence)

    def evidence(self, router: Router | None = None) -> EvidenceStore:
        """The evidence store of this case; ``router`` defaults to the reference router over the package."""
        return EvidenceStore(self, router)

    # -- reads ---------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The ``case_status`` view's row (``case_id``, ``package_id``, ``state``, ``analysis_revision``,
        ``package_generation``, ``head_sha256``, ``outcome``, ``outcome_source``). ``INTEGRITY_ERROR``
        when the view gives no such row: the ledger was changed (``ledger verify`` says where)."""
        rows = self._rows(statement("case_status_row"))
        columns = VIEW_COLUMNS["case_status"]
        if len(rows) != 1 or not columns.issubset(rows[0]):
            raise LedgerError(E.INTEGRITY_ERROR, f"the ledger's case_status view gives {len(rows)} row(s)" + (
                "" if len(rows) != 1 else f" without its columns {', '.join(sorted(columns - set(rows[0])))}")
                + ", not the case's one: the ledger was changed; run 'ledger verify'")
        return rows[0]

    def _iter_rows(self, sql: str, params: Iterable[Any] | dict[str, Any] = ()) -> Iterator[dict[str, Any]]:
        """Rows of one of the ledger's own named reads as dicts, read from the cursor as they are
        consumed (one read transaction, ended when the iterator is exhausted or closed, or when the
        case closes: a reader stopped part-way, by a closed pipe say, must not keep its statement
        open while the log is emptied): for outputs too big to hold."""
        reader = self._rows_read(sql, params)
        self._readers.add(reader)
        return reader

    def _rows_read(self, sql: str, params: Iterable[Any] | dict[str, Any]) -> Iterator[dict[str, Any]]:
        if holds_snapshot(self.storage):  # inside a batch or another iterator's read,
            yield from self._rows(sql, params)  # whose end would leave it reading on with no snapshot of its own
            return
        try:
            with self.session.read(), translate_sqlite_errors():
                cursor = self.storage.conn.execute(sql, params)
                try:
                    names = [d[0] for d in cursor.description or ()]
                    while chunk := cursor.fetchmany(512):
                        for row in chunk:
                            yield dict(zip(names, row))
                finally:
                    cursor.close()  # as in _dicts
        finally:  # an interrupt as the read was left, before its end ran: this frame lives on with the
            self.storage.end_read_of(sys._getframe())  # exception, so the next read would not end it

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *,
              timeout_ms: int | None = None) -> list[dict[str, Any]]:
        """Rows of one read-only statement as dicts keyed by column name (a name given twice keys its
        later columns ``name_2``, ``name_3``: no value is lost), in one short read transaction
        (docs/sql.md); ``params`` bind its ``?`` (a sequence) or ``:name`` (a dict; a named parameter
        given a sequence is ``INVALID_ARGUMENT``).

        ``INVALID_ARGUMENT`` when ``params`` is not a list, tuple or dict of str keys, or holds a
        value but None, a bool, int, float, str or bytes (a ``numpy.int64`` too: convert it with
        ``int()``); when ``sql`` is not a str, is several statements, fails, or would do
        anything but read (write, change the schema, ATTACH, control the transaction, or run a
        pragma but the schema-reading ones): the same statements ``ledger sql`` refuses; and for a
        statement still running after ``timeout_ms`` (an integer of milliseconds, 1 to 86 400 000;
        None, the default: no limit)."""
        if not isinstance(sql, str):
            raise LedgerError(E.INVALID_ARGUMENT, f"sql must be a str, got {type(sql).__name__}")
        if timeout_ms is not None:
            check_int(timeout_ms, "timeout_ms", minimum=1, maximum=MAX_TIMEOUT_MS)
        params = check_sql_params(params)
        refuse_names_bound_by_position(sql, params)
        statement = one_statement(sql)
        with self.session.read(), reading_only(self.storage.conn, timeout_ms):
            return self._dicts(statement, params)

    def _rows(self, sql: str, params: Iterable[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        """Rows of one of the ledger's own named reads, as dicts (no guard: the statement is ours)."""
        with self.session.read(), translate_sqlite_errors():
            return self._dicts(sql, params)

    def _dicts(self, sql: str, params: Iterable[Any] | dict[str, Any]) -> list[dict[str, Any]]:
        cursor = self.storage.conn.execute(sql, params)
        try:
            names = unique_names([d[0] for d in cursor.description or ()])  # SELECT e1.seq, e2.seq: seq, seq_2
            return [dict(zip(names, row)) for row in cursor.fetchall()]
        finally:  # its statement ended at once, also when an interrupt cuts the reading short: one left
            cursor.close()  # running (its frame living on with the exception) made SQLite refuse every later query's functions

    def balances(self) -> list[dict[str, Any]]:
        """Rows of the ``balances`` view, by revision and hypothesis number (``INTEGRITY_ERROR`` for a view
        altered in the file that lacks its columns, as :meth:`status`)."""
        return with_view_columns("balances", self._rows(statement("balances_in_order")))

    def actions(self) -> list[dict[str, Any]]:
        """Rows of the ``actions`` view in the order the actions were reserved (``INTEGRITY_ERROR`` for a
        view altered in the file that lacks its columns, as :meth:`status`)."""
        return with_view_columns("actions", self._rows(statement("actions_in_reservation_order")))

    def events(self, since_seq: int = 0, *, with_body: bool = False) -> list[dict[str, Any]]:
        """The hash chain after ``since_seq``: ``seq``, ``type``, ``revision``, ``created_at``,
        ``sha256``, ``parent_sha256`` (and ``body``, the canonical JSON text), by seq."""
        return list(self.iter_events(since_seq, with_body=with_body))

    def iter_events(self, since_seq: int = 0, *, with_body: bool = False) -> Iterator[dict[str, Any]]:
        """:meth:`events` read from the cursor as consumed (``INVALID_ARGUMENT`` for a bad ``since_seq``
        is raised at the call, before iterating)."""
        check_int(since_seq, "since_seq", minimum=0)
        check_flag(with_body, "with_body")
        return self._iter_rows(statement("events_since", body=", body" if with_body else ""), {"since": since_seq})

    # -- package files -----------------------------------------------------------------
    def resolve_source_refs(self, refs: Iterable[str]) -> list[dict[str, str]]:
        """``[{"path", "sha256"}]`` for source references: :func:`resolve_source_refs` on this package."""
        self.session.check_thread()
        return resolve_source_refs(self.path, refs)

    def exported_paths(self) -> set[str]:
        """Every path under ``analysis/`` that an export of this ledger writes (a new set)."""
        return set(self._exported_now())

    def _exported_now(self) -> set[str]:
        """:meth:`exported_paths`, kept between calls: the history only grows, so what was read stays
        and only the events (and contents) after the newest seq read are added, while the event at that
        seq still holds the sha256 it had (else, a ledger replaced meanwhile, everything is read again).
        An investigator's case exported mid-run reads a few rows per call, not its whole history."""
        conn = self.storage.conn
        with self.session.read():
            kept = self._exported
            head = conn.execute(statement("newest_event")).fetchone()
            if kept is None or head is None or head[0] < kept[0] or conn.execute(
                    statement("manifest_head"), {"seq": kept[0]}).fetchone() != (kept[1],):
                kept = (0, "", set())
            after, _, paths = kept
            if head is not None and head[0] > after:
                paths.update(event_path(*row) for row in conn.execute(statement("event_addresses_after"), {"after": after}))
                paths.update(content_path(sha) for (sha,) in conn.execute(statement("content_shas_after"), {"after": after}))
                kept = (head[0], head[1], paths)
        self._exported = kept
        return kept[2]

    def input_identity(self) -> str:
        """sha256 over the sorted ``[relative path, sha256]`` of the package's inputs (docs/concepts.md).

        Excludes ``ledger.sqlite*``, ``manifest.json`` and the files under
        ``analysis/`` that the ledger exports (plus an interrupted export's temp
        files). A symlink contributes the sha256 of its target text, never bytes
        from outside the package.
        """
        self.session.check_thread()  # a case never exported reads nothing of the ledger here
        return input_identity(self.path, _OnFirstUse(self._exported_now))


class _OnFirstUse:
    """The exported paths, read from the ledger only when the walk meets a file under ``analysis/``:
    a case never exported (an investigator's loop) computes its identity without reading its
    history, so the time does not grow with it."""

    def __init__(self, load: Callable[[], set[str]]) -> None:
        self._load, self._paths = load, None

    def __contains__(self, relative: object) -> bool:
        if self._paths is None:
            self._paths = self._load()
        return relative in self._paths


#: The longest a read-only query may run: one day, in milliseconds.
MAX_TIMEOUT_MS = 86_400_000


def unique_names(columns: Sequence[str]) -> list[str]:
    """Column names made unique: a repeated ``seq`` becomes ``seq_2``, ``seq_3``, … so no value is lost."""
    seen: set[str] = set()
    names = []
    for name in columns:
        candidate, n = name, 1
        while candidate in seen:
            n += 1
            candidate = f"{name}_{n}"
        seen.add(candidate)
        names.append(candidate)
    return names


def check_new_case_path(path: str | os.PathLike[str]) -> Path:
    """The folder ``path`` as a :class:`Path`, after the refusals :meth:`Case.create` gives a path before
    anything else (``INVALID_ARGUMENT``): a new ledger is never created through a link, inside another
    case package or in a build folder. Writes nothing."""
    root = fs_path(path, "case path")
    refuse_link_to_nothing(root, "case path")  # "File exists", the system's word, named no cause
    refuse_own_links(root, creating=True)  # a new ledger is never created through a link
    refuse_output_in_package(root, "case path", itself=False)  # nor inside another case
    refuse_build_folder_name(root, "case path")
    return root


@context_manager
def read_only_rows(path: str | os.PathLike[str], sql: str, *,
                   timeout_ms: int = 30_000) -> Iterator[tuple[list[str], Iterator[tuple]]]:
    """:func:`read_only_query` with the rows read from the cursor as consumed:
    ``with read_only_rows(path, sql) as (names, rows): …`` (same refusals)."""
    check_int(timeout_ms, "timeout_ms", minimum=1, maximum=MAX_TIMEOUT_MS)
    if not isinstance(sql, str):
        raise LedgerError(E.INVALID_ARGUMENT, f"sql must be a str, got {type(sql).__name__}")
    root = fs_path(path, "case path")
    ledger = root / LEDGER_FILE
    try:
        found = ledger.is_file()
    except OSError as oserr:  # a name too long, say: Case.open says what it says of that path
        pass_on_interruption(oserr)
        found = False
    if not found:
        Case.open(root)  # raises the LEDGER_MISSING explanation
    refuse_own_links(root)  # a reader maps -shm and may create -wal: never through a link
    with readonly_rows(ledger, sql, timeout_ms=timeout_ms) as found:
        yield found


@refuses_unfit_calls
def read_only_query(path: str | os.PathLike[str], sql: str, *, timeout_ms: int = 30_000) -> tuple[list[str], list[tuple]]:
    """Run one read-only SQL statement on the ledger of the case at ``path``: ``(column names, rows)``.

    The connection cannot write (``mode=ro``, ``query_only``, an authorizer that
    denies ATTACH and pragmas). Raises ``LEDGER_MISSING`` when there is no case,
    ``INVALID_ARGUMENT`` for anything but a single row-returning read or a
    query still running after ``timeout_ms`` (an integer of milliseconds,
    1 to 86 400 000; anything else is ``INVALID_ARGUMENT``).
    """
    with read_only_rows(path, sql, timeout_ms=timeout_ms) as (names, rows):
        return names, list(rows)
