"""Bare loops the ledger's figures are divided by: the same work without the ledger.

* :func:`fsync_ms` — the machine's fsync: median time to write 4 KiB and fsync it;
* :func:`raw_batch_inserts_per_s` — raw SQLite inserts of event-size rows, 100 rows per
  durable transaction (WAL, ``synchronous=FULL``), the bound for a batched journal apply;
* :func:`scan_events_per_s` — fetch every event body of a ledger, ``json.loads`` it and
  sha256 it: the least any verification must do;
* :func:`raw_files_per_s` — write the same bytes to the same file layout atomically (temp
  file, fsync, rename; each folder fsynced once at the end), the least any export must do.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import statistics
import time
from pathlib import Path


def fsync_ms(directory: Path, samples: int = 50) -> float:
    """Median milliseconds of ``write(4 KiB) + fsync`` on a file in ``directory``."""
    path = directory / "fsync-probe"
    timings = []
    with open(path, "wb") as handle:
        for _ in range(samples):
            handle.write(b"x" * 4096)
            handle.flush()
            began = time.perf_counter()
            os.fsync(handle.fileno())
            timings.append(time.perf_counter() - began)
    path.unlink()
    return statistics.median(timings) * 1000


def raw_batch_inserts_per_s(directory: Path, size: int, rows: int, per_transaction: int = 100) -> float:
    """Rows per second inserting ``rows`` rows of ``size`` bytes, ``per_transaction`` to a durable commit."""
    conn = sqlite3.connect(directory / "raw-batch.sqlite", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, sha256 TEXT, body TEXT)")
    body = "x" * int(size)
    start = time.perf_counter()
    for _ in range(rows // per_transaction):
        conn.execute("BEGIN IMMEDIATE")
        for _ in range(per_transaction):
            conn.execute("INSERT INTO events (sha256, body) VALUES (?, ?)", ("0" * 64, body))
        conn.execute("COMMIT")
    rate = (rows // per_transaction) * per_transaction / (time.perf_counter() - start)
    conn.close()
    return rate


def scan_events_per_s(ledger: Path) -> float:
    """Events per second fetching, parsing and hashing every event body of the ledger file ``ledger``."""
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    start = time.perf_counter()
    count = 0
    for (body,) in conn.execute("SELECT body FROM events ORDER BY seq"):
        data = body.encode("utf-8")
        json.loads(data)
        hashlib.sha256(data).hexdigest()
        count += 1
    rate = count / (time.perf_counter() - start)
    conn.close()
    return rate


def raw_files_per_s(tree: Path, target: Path) -> float:
    """Files per second writing every file under ``tree`` again under ``target`` (same relative
    paths, same bytes) atomically; the bytes are read into memory before the clock starts."""
    files = []
    for folder, _, names in os.walk(tree):
        for name in names:
            path = Path(folder, name)
            files.append((target / path.relative_to(tree), path.read_bytes()))
    start = time.perf_counter()
    folders = set()
    for path, data in files:
        if path.parent not in folders:
            path.parent.mkdir(parents=True, exist_ok=True)
            folders.update(p for p in (path.parent, *path.parent.parents) if target in (p, *p.parents))
        temp = path.with_name("." + path.name + ".tmp")
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        fd = os.open(folder, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return len(files) / (time.perf_counter() - start)
