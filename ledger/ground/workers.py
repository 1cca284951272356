"""How worker processes start and share work (simulate, verify/export of several cases, the fleet export)."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import warnings
from multiprocessing.context import BaseContext
from typing import Any, Callable, Iterator, Sequence

from .errors import INVALID_ARGUMENT, LedgerError

#: How long the calling process works alone before it starts worker processes: a worker's start
#: (a fresh interpreter importing the package) costs about this much, so work that ends sooner
#: never pays for one (docs/performance.md, "Work shared with the calling process").
START_WORKERS_AFTER_S = 0.05
#: About how much work (by the calling process's own mean time per task) a worker is handed at
#: once: a result's way back and the next hand-out pass through the pool's own threads, which wait
#: for the interpreter while the calling process is busy, so one-by-one short tasks starve a worker.
CHUNK_S = 0.05


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (a container or
    ``taskset`` limits it), else every core the machine has."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def job_count(jobs: int | None) -> int:
    """``jobs`` checked (an integer >= 1, else ``INVALID_ARGUMENT``); None: :func:`usable_cores`."""
    if jobs is None:
        return usable_cores()
    if type(jobs) is not int or jobs < 1:
        raise LedgerError(INVALID_ARGUMENT, f"jobs must be an integer >= 1, got {jobs!r}")
    return jobs


def worker_context() -> BaseContext:
    """``spawn``: a fresh interpreter per worker. Never ``fork``: forking a process that runs
    threads of its own (a database client, a web server) can leave a child waiting on a lock no
    thread of it will release (docs/architecture.md)."""
    return multiprocessing.get_context("spawn")


def shared_map(work: Callable[[Any], Any], tasks: Sequence[Any], jobs: int) -> Iterator[Any]:
    """``work(task)`` of every task, yielded in the order of ``tasks`` as each is ready, over at most
    ``jobs`` processes of which the calling one is the first.

    The calling process takes tasks from the front at once. :data:`START_WORKERS_AFTER_S` later,
    if tasks are still waiting, worker processes start (:func:`worker_context`), no more than
    ``jobs - 1`` and no more than the tasks waiting. A started worker is handed two chunks of
    tasks from the back and another each time it finishes one; a chunk is about
    :data:`CHUNK_S` of work by the calling process's mean time per task, and shrinks as the
    tasks run out, so no task waits behind a worker that is still starting and the calling
    process waits at the end for little more than the chunks the workers hold. A worker that dies
    (killed, out of memory) gives its tasks back to the calling process, which runs them itself
    with every task after them. ``work`` and the tasks must pickle. A task's exception (in any
    process) is raised when its turn to be yielded comes, after the tasks before it; the warnings
    a worker's task gives are given again here when its result is yielded, so the caller's
    warning filters and handlers see them (docs/performance.md).
    """
    if jobs <= 1 or len(tasks) <= 1:
        for task in tasks:
            yield work(task)
        return
    shared = _SharedWork(work, tasks, jobs)
    try:
        while shared.turn < len(tasks):
            shared.step()
            yield from shared.ready()
    finally:
        shared.close()


#: One task's outcome: (ok, result or exception, the warnings it gave as (message, category, file, line)).
Outcome = tuple[bool, Any, list[tuple[str, type, str, int]]]


def _run_chunk(work: Callable[[Any], Any], chunk: list[Any]) -> list[Outcome]:
    """In a worker: each task's outcome, with the warnings it gave, for :func:`shared_map`."""
    outcomes: list[Outcome] = []
    for task in chunk:
        with warnings.catch_warnings(record=True) as caught:
            try:
                result: tuple[bool, Any] = (True, work(task))
            except Exception as exc:
                result = (False, exc)
        outcomes.append((*result, [(str(w.message), w.category, w.filename, w.lineno) for w in caught]))
    return outcomes


class _SharedWork:
    """The state of one :func:`shared_map`. Workers start from this thread or from a timer thread,
    and their results arrive in the pool's own thread (:meth:`_finished`); ``self.done`` guards
    what the threads share (its lock is re-entrant)."""

    def __init__(self, work: Callable[[Any], Any], tasks: Sequence[Any], jobs: int) -> None:
        self.work, self.tasks, self.jobs = work, tasks, jobs
        self.done = threading.Condition()
        self.front, self.back = 0, len(tasks)  # tasks[front:back] are not taken yet
        self.returned: list[int] = []  # tasks a dead worker gave back, for this process to run
        self.results: dict[int, Outcome] = {}
        self.turn, self.closing, self.pool, self.starting = 0, False, None, False
        self.own_s, self.own_tasks = 0.0, 0  # this process's time on its tasks, for the chunk size
        self.began = time.perf_counter()
        # for a first task longer than the delay: the workers start while it runs
        self.starter = threading.Timer(START_WORKERS_AFTER_S, self._start_from_timer)
        self.starter.daemon = True
        self.starter.start()

    def step(self) -> None:
        """Run the next task here (one a dead worker gave back first), or wait for a worker's."""
        if not self.starting and time.perf_counter() - self.began >= START_WORKERS_AFTER_S:
            self._start_workers(keep=1)  # between tasks, from this thread: no wait for the timer's
        take = None
        with self.done:
            if self.returned:
                take = self.returned.pop()
            elif self.front < self.back:
                take, self.front = self.front, self.front + 1
            elif self.turn not in self.results:
                self.done.wait()  # a worker is running the task whose turn it is
        if take is not None:
            started = time.perf_counter()
            try:
                outcome: Outcome = (True, self.work(self.tasks[take]), [])
            except Exception as exc:  # raised in its turn, as a worker's would be
                outcome = (False, exc, [])
            with self.done:
                self.results[take] = outcome
                self.own_s, self.own_tasks = self.own_s + time.perf_counter() - started, self.own_tasks + 1

    def ready(self) -> Iterator[Any]:
        """The results whose turn has come, in order (a task's exception is raised in its turn)."""
        while True:
            with self.done:
                if self.turn not in self.results:
                    return
                ok, value, caught = self.results.pop(self.turn)
            for message, category, filename, lineno in caught:  # in this thread, as if raised here
                warnings.warn_explicit(message, category, filename, lineno)
            if not ok:
                raise value
            yield value
            self.turn += 1

    def close(self) -> None:
        with self.done:
            self.closing = True
        self.starter.cancel()
        self.starter.join()  # a start under way ends first: no half-started pool is left behind
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)  # what workers still run finishes first

    def _start_from_timer(self) -> None:
        import concurrent.futures.process  # noqa: F401 - slow beside a busy caller: before claiming the start

        self._start_workers(keep=0)

    def _start_workers(self, keep: int) -> None:
        """Start the workers the waiting tasks can use (``keep``: tasks this process is about to
        take itself), then a no-op each: done once a worker has started, which is then handed work."""
        from concurrent.futures import ProcessPoolExecutor

        with self.done:
            count = min(self.jobs - 1, self.back - self.front - keep)
            if self.starting or self.closing or count < 1:
                return
            self.starting = True
            self.pool = pool = ProcessPoolExecutor(max_workers=count, mp_context=worker_context())
        for _ in range(count):
            try:
                ping = pool.submit(int)
            except Exception:  # a worker died while the others started: this process goes on alone
                return
            ping.add_done_callback(lambda ready: (self._hand_out(ready), self._hand_out(ready)))

    def _hand_out(self, ready: Any = None) -> None:
        """Give a started worker a chunk of the last tasks not taken (called in the pool's threads)."""
        with self.done:
            if self.closing or self.front >= self.back or (
                    ready is not None and (ready.cancelled() or ready.exception() is not None)):
                return
            waiting = self.back - self.front
            size = int(CHUNK_S * self.own_tasks / self.own_s) if self.own_s > 0 else 1
            size = max(1, min(size, waiting // (2 * self.jobs)))
            self.back -= size
            indices = list(range(self.back, self.back + size))
            try:
                future = self.pool.submit(_run_chunk, self.work, [self.tasks[i] for i in indices])
            except Exception:  # a broken or closed pool: this process takes the tasks back
                self.back += size
                return
            future.add_done_callback(lambda f: self._finished(indices, f))

    def _finished(self, indices: list[int], future: Any) -> None:
        from concurrent.futures.process import BrokenProcessPool

        with self.done:
            if future.cancelled():
                return
            error = future.exception()
            if isinstance(error, BrokenProcessPool):  # the worker died, not the tasks: run them here
                self.returned.extend(indices)
            elif error is not None:  # the chunk's results did not come back (one would not pickle)
                self.results.update((index, (False, error, [])) for index in indices)
            else:
                self.results.update(zip(indices, future.result()))
            self.done.notify()
        self._hand_out()
