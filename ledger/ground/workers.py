"""How worker processes start and share work (simulate, verify/export of several cases, the fleet export)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from multiprocessing.context import BaseContext
from typing import Any, Callable, Iterator, Sequence

#: How long the calling process works alone before it starts worker processes: a worker's start
#: (a fresh interpreter importing the package) costs about this much, so work that ends sooner
#: never pays for one (docs/performance.md, "Work shared with the calling process").
START_WORKERS_AFTER_S = 0.05


def worker_context() -> BaseContext:
    """``spawn``: a fresh interpreter per worker. Never ``fork``: forking a process that runs
    threads of its own (a database client, a web server) can leave a child waiting on a lock no
    thread of it will release (docs/architecture.md)."""
    return multiprocessing.get_context("spawn")


def shared_map(work: Callable[[Any], Any], tasks: Sequence[Any], jobs: int) -> Iterator[Any]:
    """``work(task)`` of every task, yielded in the order of ``tasks`` as each is ready, over ``jobs``
    processes of which the calling one is the first.

    The calling process takes tasks from the front. Once it has worked for
    :data:`START_WORKERS_AFTER_S` and at least two tasks remain, ``jobs - 1`` worker processes
    start (:func:`worker_context`); once one has started it is handed two tasks from the back,
    and another each time it finishes one (the second hides the time a result takes to come back
    while this process is busy), so no task waits behind a worker that is still starting and the
    calling process never waits at the end for more than two tasks per worker. ``work`` and the
    tasks must pickle. A task's exception (in any process) is raised when its turn to be yielded
    comes, after the tasks before it.
    """
    if jobs <= 1 or len(tasks) <= 1:
        yield from map(work, tasks)
        return
    shared = _SharedWork(work, tasks, jobs)
    try:
        while shared.turn < len(tasks):
            shared.step()
            yield from shared.ready()
    finally:
        shared.close()


class _SharedWork:
    """The state of one :func:`shared_map`. Worker results arrive in the pool's own thread
    (:meth:`_finished`); ``self.done`` guards what both threads touch (its lock is re-entrant)."""

    def __init__(self, work: Callable[[Any], Any], tasks: Sequence[Any], jobs: int) -> None:
        self.work, self.tasks, self.jobs = work, tasks, jobs
        self.done = threading.Condition()
        self.front, self.back = 0, len(tasks)  # tasks[front:back] are not taken yet
        self.results: dict[int, tuple[bool, Any]] = {}
        self.turn, self.closing, self.pool = 0, False, None
        self.began = time.perf_counter()

    def step(self) -> None:
        """Start the workers when it is time, then run the front task here, or wait for a worker's."""
        take = None
        with self.done:
            if (self.pool is None and self.back - self.front >= 2
                    and time.perf_counter() - self.began >= START_WORKERS_AFTER_S):
                self._start_workers()
            if self.front < self.back:
                take, self.front = self.front, self.front + 1
            elif self.turn not in self.results:
                self.done.wait()  # a worker is running the task whose turn it is
        if take is not None:
            try:
                outcome = (True, self.work(self.tasks[take]))
            except Exception as exc:  # raised in its turn, as a worker's would be
                outcome = (False, exc)
            with self.done:
                self.results[take] = outcome

    def ready(self) -> Iterator[Any]:
        """The results whose turn has come, in order (a task's exception is raised in its turn)."""
        while True:
            with self.done:
                if self.turn not in self.results:
                    return
                ok, value = self.results.pop(self.turn)
            if not ok:
                raise value
            yield value
            self.turn += 1

    def close(self) -> None:
        with self.done:
            self.closing = True
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)  # what workers still run finishes first

    def _start_workers(self) -> None:
        from concurrent.futures import ProcessPoolExecutor  # ~25 ms to import

        self.pool = ProcessPoolExecutor(max_workers=self.jobs - 1, mp_context=worker_context())
        for _ in range(self.jobs - 1):  # a no-op each: done once a worker has started; then two tasks
            self.pool.submit(int).add_done_callback(lambda ready: (self._hand_out(ready), self._hand_out(ready)))

    def _hand_out(self, ready: Any = None) -> None:
        """Give a started worker the last task not taken (called in the pool's own thread)."""
        with self.done:
            if self.closing or self.front >= self.back or (
                    ready is not None and (ready.cancelled() or ready.exception() is not None)):
                return
            self.back -= 1
            index = self.back
            try:
                future = self.pool.submit(self.work, self.tasks[index])
            except Exception:  # a broken or closed pool: this process takes the task back
                self.back += 1
                return
            future.add_done_callback(lambda f: self._finished(index, f))

    def _finished(self, index: int, future: Any) -> None:
        with self.done:
            if future.cancelled():
                return
            error = future.exception()
            self.results[index] = (True, future.result()) if error is None else (False, error)
            self.done.notify()
        self._hand_out()
