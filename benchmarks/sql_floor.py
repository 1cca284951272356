"""The ledger's own SQL without its Python: the floor any Python around the same storage stands on.

:class:`SqlFloorStore` records every statement (with its parameters) that ``reserve``/
``record_result``/``settle`` run on a ledger's connection, then runs exactly those statements
again, each operation in its own ``BEGIN IMMEDIATE … COMMIT`` at ``synchronous=FULL``, on a copy
of that ledger taken before they ran: the same schema, triggers, indexes and rows, the same pages
written per commit, but no rules, no canonical encoding, no hashing, no writer lock. Its rate over
the raw commit's (``sql_floor_vs_raw``) bounds ``durable_op_vs_raw`` from above for this storage
layout: no change to the Python alone can take the ledger past it.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any


class _Recorder:
    """Stands in for a ``sqlite3.Connection``: records each ``execute`` (statement, parameters)."""

    def __init__(self, conn: sqlite3.Connection, log: list[tuple[str, Any]]) -> None:
        self._conn, self._log = conn, log

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self._log.append((sql, params))
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:  # pragma: no cover - not on this path
        raise AssertionError("the durable operations run no executemany")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class SqlFloorStore:
    """The statements of ``operations`` ledger operations (reserve/record_result/settle cycles),
    recorded on one ledger and run again, one durable transaction each, on a copy of it."""

    def __init__(self, directory: Path, operations: int, new_case: Any, cycle: Any) -> None:
        source = directory / "sql-floor-source"
        case = new_case(source)
        budget = case.budget()
        warm = 30  # cycles before the copy: the writer's caches filled, as in the ledger's own rounds
        for n in range(warm):
            cycle(budget, n)
        storage = case.storage
        storage.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        target = directory / "sql-floor.sqlite"
        shutil.copyfile(storage.path, target)
        log: list[tuple[str, Any]] = []
        storage.conn = _Recorder(storage.conn, log)
        try:
            for n in range(warm, warm + (operations + 2) // 3):
                cycle(budget, n)
        finally:
            storage.conn = storage.conn._conn
            case.close()
        self.transactions = _transactions(log)
        self.conn = sqlite3.connect(target, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL").fetchall()
        for pragma in ("foreign_keys = ON", "synchronous = FULL"):
            self.conn.execute(f"PRAGMA {pragma}")
        self.next = 0
        self.cpu, self.ops = 0.0, 0
        shutil.rmtree(source, ignore_errors=True)

    def run(self, n: int) -> float:
        """Run the next ``n`` recorded transactions; their rate per second."""
        batch = self.transactions[self.next:self.next + n]
        if len(batch) < n:
            raise RuntimeError(f"only {len(self.transactions)} operations were recorded")
        execute = self.conn.execute
        start, cpu = time.perf_counter(), time.process_time()
        for statements in batch:
            for sql, params in statements:
                execute(sql, params).fetchall()
        elapsed = time.perf_counter() - start
        self.next += n
        self.cpu, self.ops = self.cpu + time.process_time() - cpu, self.ops + n
        return n / elapsed


def _transactions(log: list[tuple[str, Any]]) -> list[list[tuple[str, Any]]]:
    """The recorded statements cut into operations, each from its ``BEGIN IMMEDIATE`` to the next
    one (what runs after a ``COMMIT``, such as the log's checkpoint, belongs to that operation)."""
    transactions: list[list[tuple[str, Any]]] = []
    for sql, params in log:
        if sql == "BEGIN IMMEDIATE":
            transactions.append([])
        if transactions:
            transactions[-1].append((sql, params))
    return transactions
