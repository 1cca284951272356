"""Verify's replay of a range of events, and one case's replay over two processes (docs/performance.md).

:func:`replay_events` replays the stored events of one seq range into a
:class:`~ledger.package_tools.replay.Replayer` and stores what it derives in the
scratch ledger (:func:`store_derived`). :class:`SecondHalf` runs the later
events of a large ledger in a second process while :func:`verify_case
<ledger.package_tools.verify.verify_case>` replays the earlier ones; its work is used
only when it passed and the state it started from is exactly the state the first
process's replay reached (:meth:`SecondHalf.join`), else the first process replays
those events itself, as with one process. Why that is sound: docs/performance.md,
"One case's verify on two cores".
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import signal
import sqlite3
from pathlib import Path
from typing import Any, Callable, Mapping

from ..ground.canonical import sha256_hex, stored_bytes
from ..ground.errors import LedgerError, integrity_error as _bad, pass_on_interruption
from ..ground.workers import interrupts_blocked, watch_parent, worker_context
from ..model.memory_view import MemoryView
from ..storage.connection import Storage
from ..storage.sqlfiles import column_list, queries, statement
from ..model.input_identity import input_identity
from ..model.package import content_path, event_path, well_placed
from ..storage.sqlite_file import EventRow, HelperRow, file_uri, not_utf8, translate_sqlite_errors
from .manifest import export_statement
from .replay import PackageSource, Replayer

Progress = Callable[[int], None]
#: The second process's scratch ledger, in verify's scratch folder beside ``replay.sqlite``.
SECOND_HALF_FILE = "second-half.sqlite"
#: Fewest events for which one case's verify uses a second process: below it, starting the
#: process and its scratch ledger costs more than the half of the replay it takes over.
SPLIT_MIN_EVENTS = 20_000
#: ``after`` for the events from the first stored one on, and ``last`` for every event up to the
#: newest (seq is SQLite's 64-bit rowid).
ALL_AFTER, ALL_LAST = None, 2**63 - 1
#: The second process's share of the events: its fast-forward over the first share costs about a
#: fifth of a full replay of the same events (docs/performance.md).
SECOND_SHARE = 0.45
#: How many events the second process may move the split on when it falls inside an operation of
#: several events (an evidence batch, a reservation that meets a limit).
SPLIT_MOVES = 64


def store_derived(scratch: Storage, items: list[tuple[EventRow, list[HelperRow], Mapping[str, bytes]]], *,
                  content_bytes_before: int = 0) -> None:
    """What :meth:`Storage.append` stores for each item, in bulk: every events row, then every
    content row, then the helper rows, each named statement run once with ``executemany`` (in
    order within a table). Only for the private scratch ledger, which has no triggers.
    ``content_bytes_before``: the content bytes of the events before the scratch ledger's first
    (the second process's scratch ledger starts in the middle of the history)."""
    if not items:
        return
    total = scratch.one("content_bytes_total")[0] or content_bytes_before
    contents, helpers = [], {}
    for event, rows, blobs in items:
        for sha, data in (blobs or {}).items():
            total += len(data)
            contents.append({"sha256": sha, "seq": event.seq, "size_bytes": len(data),
                             "cumulative_bytes": total, "body": data.decode("utf-8")})
        for name, params in rows:
            helpers.setdefault(name, []).append(params)
    events = [{**event.__dict__, "body": event.body.decode("utf-8")} for event, _, _ in items]
    with translate_sqlite_errors():
        scratch.conn.executemany(queries()["insert_event"], events)
        scratch.conn.executemany(queries()["insert_content"], contents)
        present = {name for name, _sql in scratch.conn.execute(statement("schema_objects", "main"))}
        for name, params in helpers.items():
            if _target_table(name) in present:  # an older ledger's scratch has not every table yet
                scratch.conn.executemany(queries()[name], params)


def _target_table(name: str) -> str:
    """The table the named helper-row statement inserts into (``INSERT INTO table ...``)."""
    return queries()[name].split(None, 3)[2]


def replay_events(scratch: Storage, replayer: Replayer, derived: list[Any], after: int | None, last: int,
                  progress: Progress | None, *, expected: int | None = None, content_bytes_before: int = 0) -> int:
    """Replay the stored events with ``after < seq <= last`` (``after`` None: from the first stored
    event on) in order, the first expected to be ``expected`` (default ``after + 1``, or 1);
    ``derived`` collects what the replayer's sink receives, stored in bulk as it fills. Returns
    the next seq expected. ``INTEGRITY_ERROR`` naming the first missing, edited or unreadable event."""
    if expected is None:
        expected = 1 if after is None else after + 1
    query = statement("events_up_to" if after is None else "events_in_range", "orig")
    try:
        cursor = scratch.conn.execute(query, {"after": after, "last": last})
        while rows := cursor.fetchmany(512):
            store_derived(scratch, derived, content_bytes_before=content_bytes_before)
            derived.clear()
            for seq, sha, body in rows:
                if seq != expected:
                    raise _bad(expected, f"event {expected} is missing (next stored seq is {seq})")
                data = stored_bytes(body)
                if sha != sha256_hex(data):
                    raise _bad(expected, "stored sha256 does not match the event's bytes (edited event)")
                replayer.apply(expected, data, sha)
                if progress:
                    progress(1)
                expected += 1
    except sqlite3.DatabaseError as exc:
        raise _bad(expected, f"cannot read the ledger: {exc}") from None
    except UnicodeDecodeError as exc:
        raise _bad(expected, f"cannot read the ledger: {not_utf8(exc)}") from None
    store_derived(scratch, derived, content_bytes_before=content_bytes_before)
    derived.clear()
    return expected


def plan_split(scratch: Storage, folder: Path, jobs: int) -> tuple[int, int, Path] | None:
    """``(after, last, part)``: the first process replays the events up to seq ``after``, a second one
    (:class:`SecondHalf`) those up to ``last`` into a scratch ledger at ``part``, which is attached
    to ``scratch`` as ``part`` here (SQLite attaches only between transactions: the scratch
    ledger's transaction is ended and begun again, before verify reads anything of the ledger).
    None for one process: ``jobs`` 1, a small ledger, or a verify already running in a worker
    process (``ledger verify --jobs`` of several cases, the fleet export), whose siblings use the cores."""
    if jobs < 2 or multiprocessing.parent_process() is not None:
        return None
    try:
        head = scratch.conn.execute(statement("newest_event", "orig")).fetchone()
    except (sqlite3.Error, UnicodeDecodeError):
        return None  # verify names what is wrong with the file, in one process
    if head is None or type(head[0]) is not int or head[0] < SPLIT_MIN_EVENTS:
        return None
    part = folder / SECOND_HALF_FILE
    with translate_sqlite_errors():
        scratch.conn.execute("COMMIT")
        scratch.conn.execute("ATTACH DATABASE ? AS part", (file_uri(part, "rwc"),))
        scratch.conn.execute("BEGIN")
    return head[0] - int(head[0] * SECOND_SHARE), head[0], part


def input_identity_of(root: Path, conn: sqlite3.Connection) -> str:
    """The package's input identity now, leaving out what the ledger under check exports."""
    exported = {event_path(*row) for row in conn.execute(export_statement(conn, "event_addresses", "orig"))
                if well_placed(*row)}  # a row edited out of its types: the row comparison names it
    exported |= {content_path(sha) for (sha,) in conn.execute(statement("content_shas", "orig"))}
    return input_identity(root, exported)


def content_reader(conn: sqlite3.Connection) -> Callable[[str], bytes | None]:
    """``content_of(sha256)``: the stored content's bytes from the attached ledger, or None."""
    def content_of(sha: str) -> bytes | None:
        row = conn.execute(statement("content_body", "orig"), {"sha256": sha}).fetchone()
        return None if row is None else stored_bytes(row[0])
    return content_of


class SecondHalf:
    """The events ``after < seq <= last`` verified in a second process (started on construction).

    It builds its own scratch ledger at ``part`` (the first process's scratch ledger has it
    attached as ``part``), advances a fresh view over the events up to ``after`` without
    checking them (:func:`_fast_forward`), then replays the rest exactly as one process would.
    """

    def __init__(self, root: Path, ledger: Path, part: Path, after: int, last: int, started_at: str) -> None:
        context = worker_context()
        self._receive, send = context.Pipe(duplex=False)
        job = {"root": str(root), "ledger": str(ledger), "part": str(part), "after": after, "last": last,
               "started_at": started_at, "parent": os.getpid()}
        self._process = context.Process(target=_second_half, args=(job, send), daemon=True)
        with interrupts_blocked():  # a Ctrl-C to the process group stops the first process alone
            self._process.start()
        send.close()
        self.after, self.last = after, last

    @classmethod
    def start(cls, root: Path, ledger: Path, part: Path, after: int, last: int,
              started_at: str) -> "SecondHalf | None":
        """A started second process, or None when none can be started (no process or file left to
        this user): then one process verifies everything."""
        try:
            return cls(root, ledger, part, after, last, started_at)
        except OSError as oserr:
            pass_on_interruption(oserr)
            return None

    def receive(self) -> dict[str, Any] | None:
        """Wait for the second process's outcome (None when it failed or went away)."""
        try:
            outcome = self._receive.recv()
        except (EOFError, OSError) as oserr:
            pass_on_interruption(oserr)
            outcome = None
        finally:
            self.close()
        if not outcome or not outcome["ok"] or not self.after <= outcome["after"] <= self.after + SPLIT_MOVES:
            return None
        return outcome

    def accepts(self, replayer: Replayer, outcome: Mapping[str, Any], head_seq: int | None) -> bool:
        """Whether ``outcome`` can stand for the replay of its events: it started from the state
        ``replayer`` (the first process's, replayed up to the outcome's ``after``) has and ended at
        the first process's head ``head_seq``. If not, the caller replays the events itself: on a
        failure the one-process replay names the first bad event exactly as it always does."""
        if (replayer._following or replayer.count != outcome["after"]
                or head_seq != self.last):  # a writer appended between the two snapshots: not its events
            return False
        source = replayer.source
        if (outcome["previous"] != (replayer.previous_sha, replayer.previous_at)
                or pickle.loads(outcome["view"]) != vars(replayer.view)
                or outcome["identity"] not in (None, source.input_identity())):
            return False
        recorded = getattr(source, "recorded_digests", {})
        # a hash one half records contradicting the other's: the one-process replay names it
        return not any(recorded.get(key, value)[0] != value[0] for key, value in outcome["recorded_digests"].items())

    def close(self) -> None:
        """Stop the second process if it still runs (the first process failed first) and wait for it."""
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self._receive.close()


def merge(replayer: Replayer, outcome: Mapping[str, Any]) -> None:
    """Count the second process's events and notes into ``replayer`` (after :meth:`SecondHalf.join`)."""
    replayer.count += outcome["count"]
    replayer.previous_sha, replayer.previous_at = outcome["end"]
    replayer.future_events += outcome["future_events"]
    replayer.max_lead_ms = max(replayer.max_lead_ms, outcome["max_lead_ms"])
    for path, why in outcome["unchecked"].items():
        replayer.source.note_unchecked(path, why)
    recorded = getattr(replayer.source, "recorded_digests", None)
    if recorded is not None:
        for key, value in outcome["recorded_digests"].items():
            recorded.setdefault(key, value)


def copy_second_half(conn: sqlite3.Connection, tables: list[str], after: int) -> bool:
    """Append the second process's scratch rows (``part``) to the first's, table by table; return
    whether every one of them is of an event after seq ``after`` (a row of an earlier seq would
    make the first half's :func:`range_agrees` stale: the caller then compares whole tables)."""
    with translate_sqlite_errors():
        later = not any(conn.execute(statement("events_before_range") if table == "events" else
                                     statement("rows_before_range", table=table), {"after": after}).fetchone()
                        for table in tables)
        for table in tables:
            conn.execute(statement("copy_rows", table=table))
    return later


def save_views(conn: sqlite3.Connection, views: list[str]) -> set[str]:
    """Compute the ledger's public ``views`` into temporary tables (``save_view``) while the second
    process still replays; return those saved. A view that cannot be computed is left out: its
    comparison afterwards computes it again and names the error."""
    saved = set()
    for view in views:
        try:
            columns = [row[1] for row in conn.execute(statement("table_columns", "orig", table=view))]
            conn.execute(statement("save_view", table=view, columns=", ".join(f'"{c}"' for c in columns)))
            conn.execute(statement("fill_saved_view", table=view))
        except (sqlite3.Error, UnicodeDecodeError):
            continue
        saved.add(view)
    return saved


def range_agrees(conn: sqlite3.Connection, tables: list[str], after: int, later: bool) -> bool:
    """Whether the ledger's rows of ``tables`` (``events`` first) and the scratch ledger's agree on
    the rows of the events after seq ``after`` (``later``) or up to it (not ``later``): the
    events columns as ``events_differ`` compares them, every other table as ``rows_differ``
    does. Both ranges agreeing is both whole tables agreeing; on any difference the caller
    compares whole tables, which names the first differing seq."""
    truth = "TRUE" if later else "NOT TRUE"
    try:
        for table in tables:
            query = (statement("events_differ_in_range", truth=truth) if table == "events" else
                     statement("rows_differ_in_range", table=table, truth=truth,
                               types=column_list(conn, table, types=True)))
            if conn.execute(query, {"after": after}).fetchone():
                return False
    except (sqlite3.Error, UnicodeDecodeError):
        return False  # a table that cannot be compared: the whole-table comparison names the error
    return True


class _FastForward:
    """A view advanced over the stored events in seq order as the replay advances it, but without
    re-running their rules: the first process checks those events, and the state reached here is
    used only if it equals the state its checked replay reached. Contents are read alongside, one
    event's at a time."""

    def __init__(self, conn: sqlite3.Connection, last: int) -> None:
        self.view = MemoryView()
        self.previous = ("0" * 64, "")
        self.seq = 0
        self._events = conn.execute(export_statement(conn, "events_to_fast_forward", "orig"), {"last": last})
        self._contents = conn.cursor().execute(statement("contents_to_fast_forward", "orig"), {"last": last})
        self._content = self._contents.fetchone()

    def to(self, seq: int) -> None:
        """Advance over every stored event up to ``seq``; ``INTEGRITY_ERROR`` if the events end first."""
        while self.seq < seq:
            row = self._events.fetchone()
            if row is None:
                raise _bad(seq, "the ledger ends before the split")
            self.seq, sha, text, stream, operation_key, request_sha = row
            contents = {}
            while self._content is not None and self._content[0] <= self.seq:
                if self._content[0] == self.seq:
                    contents[self._content[1]] = stored_bytes(self._content[2])
                self._content = self._contents.fetchone()
            body = json.loads(stored_bytes(text))
            # the stored hashes, unchecked here: the state reached is compared with the checked replay's
            self.view.apply(body, sha, stream, operation_key, contents,
                            request_sha256=request_sha if type(request_sha) is str else None)
            self.previous = (sha, body["created_at"])


def _second_half(job: Mapping[str, Any], send: Any) -> None:
    """The second process: fast-forward to ``after``, replay ``after < seq <= last`` into the scratch
    ledger ``part``, commit it and send the outcome (``{"ok": False}`` on any failure). It ends as
    soon as the first process has ended (killed, say): nobody would read its work. Ctrl-C is the
    first process's to handle (the terminal sends it to both): this one ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(job["parent"])
    try:
        outcome = _replay_second_half(job)
    except Exception:  # whatever it was, the first process replays these events itself and names it
        outcome = {"ok": False}
    send.send(outcome)
    send.close()


def _replay_second_half(job: Mapping[str, Any]) -> dict[str, Any]:
    """Fast-forward to ``after``, then replay from there; when the first event does not replay (the
    split fell inside an operation of several events, whose later events are recomputed only at
    its first), move the split one event on, up to :data:`SPLIT_MOVES` times. The outcome names the
    split used (``after``): the first process replays the events up to it before comparing."""
    root, after, last = Path(job["root"]), job["after"], job["last"]
    scratch = Storage.scratch(Path(job["part"]), Path(job["ledger"]))
    try:
        with translate_sqlite_errors():
            # its rows may refer to rows of the earlier events, which the first process holds: the
            # references are checked when the first process appends these rows to its own
            for sql in ("COMMIT", "PRAGMA foreign_keys = OFF", "BEGIN"):
                scratch.conn.execute(sql)
            forward = _FastForward(scratch.conn, last)
            forward.to(after)
            for _ in range(SPLIT_MOVES + 1):
                state = pickle.dumps(vars(forward.view), protocol=pickle.HIGHEST_PROTOCOL)
                base = forward.view.content_bytes_total()
                package = PackageSource(root, content_reader(scratch.conn),
                                        lambda: input_identity_of(root, scratch.conn))
                derived: list[Any] = []
                replayer = Replayer(package, lambda *item: derived.append(item), schema_every_event=False,
                                    view=forward.view)
                replayer.previous_sha, replayer.previous_at = forward.previous
                replayer.started_at = job["started_at"]
                try:
                    replay_events(scratch, replayer, derived, after, after + 1, None, content_bytes_before=base)
                    break
                except LedgerError:  # the view is as before: a replay changes it only once an event passed
                    forward.to(after + 1)
                    after = forward.seq
            else:
                raise _bad(after, "no operation starts near the split")
            replay_events(scratch, replayer, derived, after + 1, last, None, content_bytes_before=base)
            replayer.finish()
            scratch.conn.execute("COMMIT")
    finally:
        scratch.conn.close()
    return {"ok": True, "after": after, "view": state, "previous": forward.previous,
            "count": replayer.count, "end": (replayer.previous_sha, replayer.previous_at),
            "future_events": replayer.future_events, "max_lead_ms": replayer.max_lead_ms,
            "unchecked": package.unchecked, "recorded_digests": package.recorded_digests,
            "identity": package._identity_now}
