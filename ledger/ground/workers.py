"""How worker processes start and share work (simulate, verify/export of several cases, the fleet export)."""

from __future__ import annotations

import heapq
import multiprocessing
import os
import signal
import sys
import threading
import time
import warnings
from multiprocessing import resource_tracker
from multiprocessing.context import BaseContext
from typing import Any, Callable, Iterator, Sequence

from . import interrupts
from .arguments import caller_stacklevel
from .errors import INVALID_ARGUMENT, LedgerError, repr_shown, pass_on_interruption
from .interrupts import context_manager

#: How long the calling process works alone before it starts worker processes: a worker's start
#: (a fresh interpreter importing the package) costs about this much, so work that ends sooner
#: never starts one (docs/performance.md, "Work shared with the calling process").
START_WORKERS_AFTER_S = 0.05
#: About how much work (by the calling process's own mean time per task) a worker is handed at
#: once: a result's way back and the next hand-out pass through the pool's own threads, which wait
#: for the interpreter while the calling process is busy, so one-by-one short tasks starve a worker.
CHUNK_S = 0.05
#: How often the calling process, waiting for a worker's result, looks whether the pool's own thread
#: still runs: one that died (no thread or memory left to start its queue's feeder) leaves the
#: chunks it held unanswered for ever.
POOL_CHECK_S = 0.5


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (a container or
    ``taskset`` limits it), else every core the machine has."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


#: Most processes a ``jobs`` argument may ask for (the command line's ``--jobs`` has the same bound).
JOBS_MAX = 256


def job_count(jobs: int | None) -> int:
    """``jobs`` checked (an integer from 1 to :data:`JOBS_MAX`, else ``INVALID_ARGUMENT``); None:
    :func:`usable_cores`. More jobs than cores start that many processes when the tasks are there."""
    if jobs is not None and (type(jobs) is not int or not 1 <= jobs <= JOBS_MAX):
        raise LedgerError(INVALID_ARGUMENT, f"jobs must be an integer from 1 to {JOBS_MAX}, got {repr_shown(jobs, 80)}")
    count = usable_cores() if jobs is None else jobs
    return 1 if count > 1 and not _main_importable() else count


#: The program files a warning was given for: once per process and program (:func:`_main_importable`).
_warned: set[str] = set()


def _main_importable() -> bool:
    """Whether a worker (:func:`worker_context`) can import the calling program again, as it does
    first: by its module name (``python -m``), or from its file. A program read from standard input
    (``python -``: its ``__file__`` is ``'<stdin>'``) or whose file is gone cannot, and every worker
    would die with a traceback on the terminal: the work then runs in the calling process alone,
    with a warning (docs/performance.md, "Work shared with the calling process")."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) is not None:
        return True
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):
        return True  # python -c, the interactive interpreter: workers import no program
    original = multiprocessing.process.ORIGINAL_DIR
    if os.path.isfile(path if os.path.isabs(path) or original is None else os.path.join(original, path)):
        return True
    if path not in _warned:
        _warned.add(path)
        warnings.warn(f"case-ledger: this work runs in this process alone: a worker process starts by "
                      f"importing the program again, and {path!r} is no file to import it from (a program "
                      "read from standard input, or removed); run it from a file to use more processes",
                      RuntimeWarning, stacklevel=caller_stacklevel())
    return False


def worker_context() -> BaseContext:
    """``spawn``: a fresh interpreter per worker. Never ``fork``: forking a process that runs
    threads of its own (a database client, a web server) can leave a child waiting on a lock no
    thread of it will release (docs/architecture.md). multiprocessing's resource tracker is started
    first (:func:`_start_resource_tracker`)."""
    _start_resource_tracker()
    return multiprocessing.get_context("spawn")


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (the first lock, event or worker of a ``spawn`` context
    starts it otherwise) with SIGHUP blocked: it ignores SIGINT and SIGTERM itself, and so started it
    keeps SIGHUP blocked, outliving a terminal's hangup to the whole process group (killed, it was
    started again with a warning and a traceback of its own). Once per process; a process left
    without one, where none can start, finds out as its first worker starts."""
    if not hasattr(signal, "pthread_sigmask"):
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set(interrupts.INTERRUPTING) - {signal.SIGINT, signal.SIGTERM})
    try:
        resource_tracker.ensure_running()
    except OSError as oserr:  # no process left to this user: starting a worker will say so
        pass_on_interruption(oserr)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


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
    (killed, out of memory), or whose results do not pickle, gives its tasks back to the calling
    process, which runs them itself with every task after them; a worker whose caller died ends.
    Workers start with SIGINT, SIGTERM and SIGHUP blocked: a Ctrl-C (or either) to the process group
    interrupts the caller alone, which stops handing out tasks and waits (deferring a second one)
    for the chunks the workers hold. ``work`` and the tasks must pickle. A task's exception (in any
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
    except BaseException:  # Ctrl-C, SIGTERM, an error, or the results no longer wanted (GeneratorExit)
        shared.stop_workers()
        raise
    finally:
        shared.close()


#: The process that started this worker (:func:`watch_parent`), or None in a process no pool started.
_parent: list[int | None] = [None]
#: In a worker: the event the process that started it sets when it stops (:func:`stop_requested`).
_stopping: list[Any] = [None]


def stop_requested() -> bool:
    """In a worker: whether the process that started it is stopping (Ctrl-C, SIGTERM, an error), so a
    wait of a task's (another export's lock, up to an hour) may end at once; False elsewhere. The
    worker itself gets no signal: it keeps SIGINT, SIGTERM and SIGHUP blocked."""
    event = _stopping[0]
    return event is not None and event.is_set()


def watch_parent(parent: int, stopping: Any = None) -> None:
    """In a worker, first: end it if the process that started it ends (killed, say) and it is
    left waiting for tasks that never come; and take a SIGTERM as :func:`_sigterm_from` says.
    ``stopping``: the event :func:`stop_requested` reads."""
    _parent[0], _stopping[0] = parent, stopping

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.1)
        os._exit(1)

    try:
        threading.Thread(target=watch, name="watch-parent", daemon=True).start()
        _sigterm_from(parent)
    except (RuntimeError, MemoryError):  # no thread or memory left to this worker: it ends, with no traceback,
        os._exit(1)  # and the process that started it runs its tasks itself (a worker that died)


#: Whether workers start with SIGTERM blocked (:func:`interrupts_blocked`): only where a worker can
#: tell who sent one (:func:`_sigterm_from`), so that the process that started it can still stop it.
BLOCK_SIGTERM = hasattr(signal, "sigwaitinfo") and hasattr(signal, "pthread_sigmask")


def _sigterm_from(parent: int) -> None:
    """In a worker started with SIGTERM blocked: a SIGTERM ``parent`` sends (a pool stopping the
    workers of a broken one, verify stopping its second process) ends the worker, as SIGTERM does; one
    sent by anyone else (``timeout`` or a service manager signalling the whole process group, which
    ``parent`` gets too) is left to ``parent``, which stops the workers once their chunks are done."""
    if not BLOCK_SIGTERM or signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, ()):
        return

    def wait() -> None:
        while signal.sigwaitinfo({signal.SIGTERM}).si_pid != parent:
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.kill(os.getpid(), signal.SIGTERM)  # this thread alone takes it: the worker ends as SIGTERM ends it

    threading.Thread(target=wait, name="sigterm-from-parent", daemon=True).start()


def shutdown_pool(pool: Any) -> None:
    """Stop ``pool`` (a ``ProcessPoolExecutor``): tasks not started are cancelled, running ones
    finish, its workers end. A Ctrl-C or SIGTERM meanwhile takes effect once they have: a second
    signal that broke off the wait left the workers waiting for a stop message forever, and the
    process waiting for them."""
    with interrupts.deferred():
        pool.shutdown(wait=True, cancel_futures=True)


def parent_gone() -> bool:
    """In a worker :func:`watch_parent` watches: whether the process that started it has ended (a
    worker then publishes nothing more: nobody is left to report it to)."""
    return _parent[0] is not None and os.getppid() != _parent[0]


@context_manager
def interrupts_blocked() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP blocked in this thread (and so in the processes it starts, which keep the
    mask from their first instruction on) where the system can: a Ctrl-C a terminal sends to the
    whole process group, or the SIGTERM ``timeout``, a CI runner or a service manager sends to it,
    then interrupts the caller alone, which stops the workers once their chunks are done (never a
    worker still importing, with a traceback of its own, or one killed mid-write, leaving its
    temporary files)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    # multiprocessing's resource tracker, started with the first worker, unblocks SIGINT in the
    # starting thread once it is up (it blocks it around its own start): started first, it leaves
    # the mask alone
    _start_resource_tracker()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set(interrupts.INTERRUPTING) if BLOCK_SIGTERM
                                    else {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


#: One task's outcome: (ok, result or exception, the warnings it gave as (message, category, file, line)).
Outcome = tuple[bool, Any, list[tuple[str, type, str, int]]]


def _run_chunk(work: Callable[[Any], Any], chunk: list[Any]) -> list[Outcome]:
    """In a worker: each task's outcome, with the warnings it gave, for :func:`shared_map`."""
    outcomes: list[Outcome] = []
    for task in chunk:
        if stop_requested():
            break  # the process that handed out the chunk is stopping: it reads no more results
        with warnings.catch_warnings(record=True) as caught:
            try:
                result: tuple[bool, Any] = (True, work(task))
            except BaseException as exc:  # SystemExit too: in its own turn, not at the chunk's start
                result = (False, exc)
        outcomes.append((*result, [(str(w.message), w.category, w.filename, w.lineno) for w in caught]))
    return outcomes


def _end_workers(processes: Sequence[Any]) -> None:
    """Kill the worker ``processes`` still running once their pool is shut down: a pool whose own
    thread never started, or died (no thread or memory left for its queue's feeder), never sends them
    the stop message, and they would wait for work for ever, and this process's exit with them."""
    for process in processes:
        try:
            if process.is_alive():
                process.kill()
                process.join(5)
        except (OSError, ValueError, AssertionError) as oserr:  # gone already, or never started
            pass_on_interruption(oserr)


def _close_pipes(pipes: Sequence[Any]) -> None:
    """Close the call queue and the wake-up pipe of a pool whose own thread died (closed already by
    that thread where Python ends a broken pool itself, as from 3.12 on: closing again is harmless)."""
    for pipe in pipes:
        if pipe is None:
            continue
        try:
            pipe.close()
            if hasattr(pipe, "join_thread"):
                pipe.join_thread()
        except (OSError, ValueError, AssertionError) as oserr:  # closed already
            pass_on_interruption(oserr)


def _workers_of(pool: Any) -> list[Any]:
    """The worker processes of a ``ProcessPoolExecutor`` (its shutdown forgets them)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _pool_thread_died(pool: Any) -> bool:
    """Whether the pool's own thread, which hands its workers their tasks and brings back the
    results (every result callback runs in it), has ended while the pool was in use."""
    thread = getattr(pool, "_executor_manager_thread", None)
    return thread is not None and not thread.is_alive()


class _SharedWork:
    """The state of one :func:`shared_map`. Three threads share it under ``self.done`` (a condition
    whose lock is re-entrant): the caller's, which runs tasks and yields results; the dispatcher
    (:meth:`_dispatch`), which starts the workers when the caller has not and hands them chunks;
    and the pool's own thread, whose callbacks (:meth:`_worker_ready`, :meth:`_finished`) only
    record and notify. Nothing is submitted to the pool from a callback: a pool may run its
    callbacks holding its own lock, which ``submit`` takes too."""

    def __init__(self, work: Callable[[Any], Any], tasks: Sequence[Any], jobs: int) -> None:
        self.work, self.tasks, self.jobs = work, tasks, jobs
        self.done = threading.Condition()
        self.front, self.back = 0, len(tasks)  # tasks[front:back] are not taken yet
        self.returned: list[int] = []  # heap of tasks a worker gave back, for this process to run
        self.results: dict[int, Outcome] = {}
        self.pending: dict[Any, list[int]] = {}  # each chunk handed to a worker and not back yet, by its future
        self.turn, self.closing, self.pool, self.starting, self.lost = 0, False, None, False, False
        self.stopping: Any = None  # the event the workers' stop_requested() reads, set as this one closes
        self.free = 0  # chunks the started workers may be handed now
        self.own_s, self.own_tasks = 0.0, 0  # this process's time on its tasks, for the chunk size
        self.began = time.perf_counter()
        self.dispatcher: threading.Thread | None = threading.Thread(target=self._dispatch, name="shared-work",
                                                                     daemon=True)
        try:
            self.dispatcher.start()
        except (RuntimeError, MemoryError):  # no thread left to this process: it runs every task itself
            self.dispatcher, self.starting = None, True

    def step(self) -> None:
        """Run the next task here (one a dead worker gave back first), or wait for a worker's."""
        if not self.starting and time.perf_counter() - self.began >= START_WORKERS_AFTER_S:
            self._start_workers(keep=1)  # between tasks, from this thread: no wait for the dispatcher
        take = None
        with self.done:
            if self.returned:
                take = heapq.heappop(self.returned)
            elif self.front < self.back:
                take, self.front = self.front, self.front + 1
                self.done.notify_all()  # the dispatcher may be waiting for the last tasks to go
            elif self.turn not in self.results:  # a worker is running the task whose turn it is
                if not self.done.wait(POOL_CHECK_S) and self.pool is not None and _pool_thread_died(self.pool):
                    self._pool_lost()
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
        """No task is handed out any more; the chunks workers are running finish, the workers stop.
        A Ctrl-C meanwhile takes effect once they have (an interrupted wait would leave them
        waiting forever for a stop message, and the process with them)."""
        with self.done:
            self.closing = True
            self.done.notify_all()
        with interrupts.deferred():
            if self.dispatcher is not None:
                self.dispatcher.join()  # a start under way ends first: no half-started pool is left behind
            if self.pool is not None:
                workers, died = _workers_of(self.pool), _pool_thread_died(self.pool)
                # its shutdown forgets them: what its own thread, dead, would have closed at its end
                pipes = [getattr(self.pool, name, None) for name in ("_call_queue", "_executor_manager_thread_wakeup")]
                try:
                    self.pool.shutdown(wait=True, cancel_futures=True)
                except RuntimeError:  # its own thread never started (no memory or thread left): waiting would hang
                    pass
                _end_workers(workers)  # none is left running after a shutdown that went as it should
                if died:
                    _close_pipes(pipes)

    def stop_workers(self) -> None:
        """Tell the workers this process is stopping (:func:`stop_requested`): each ends its chunk after
        the task it is on, and a task's wait (another export's lock) ends at once."""
        if self.stopping is not None:
            self.stopping.set()

    def _pool_lost(self) -> None:
        """The pool's own thread died (``self.done`` held): the chunks it held come back to this
        process, and no more are handed out (every task can run again: a lost chunk never reported)."""
        for indices in self.pending.values():
            for index in indices:
                heapq.heappush(self.returned, index)
        self.pending.clear()
        self.lost = True  # the dispatcher hands out nothing more
        self.done.notify_all()

    def _dispatch(self) -> None:
        """The dispatcher thread: after the delay, start the workers if the caller has not (it may be
        on a long first task), then hand each started worker a chunk whenever it may take one."""
        with self.done:
            self.done.wait_for(lambda: self.closing or self.starting, timeout=START_WORKERS_AFTER_S)
        if not self.starting:
            try:
                import concurrent.futures.process  # noqa: F401 - slow beside a busy caller: before claiming the start
            except (OSError, MemoryError) as oserr:  # no descriptor or memory left to read it: the start below says so
                pass_on_interruption(oserr)
            self._start_workers(keep=0)
        while True:
            with self.done:
                self.done.wait_for(lambda: self.closing or self.pool is None or self.lost or self.front >= self.back
                                   or self.free > 0)
                if self.closing or self.pool is None or self.lost or self.front >= self.back:
                    return
                self.free -= 1
                indices = self._take_chunk()
            try:
                future = self.pool.submit(_run_chunk, self.work, [self.tasks[i] for i in indices])
            except Exception as exc:  # a broken or closed pool: this process takes the tasks back
                self._give_back(indices)
                pass_on_interruption(exc)
                return
            with self.done:
                self.pending[future] = indices
            future.add_done_callback(lambda f, indices=indices: self._finished(indices, f))

    def _take_chunk(self) -> list[int]:
        """The last tasks not taken, about :data:`CHUNK_S` of the caller's work (``self.done`` held)."""
        size = int(CHUNK_S * self.own_tasks / self.own_s) if self.own_s > 0 else 1
        size = max(1, min(size, (self.back - self.front) // (2 * self.jobs)))
        self.back -= size
        return list(range(self.back, self.back + size))

    def _give_back(self, indices: list[int]) -> None:
        with self.done:
            for index in indices:
                heapq.heappush(self.returned, index)
            self.done.notify_all()

    def _start_workers(self, keep: int) -> None:
        """Start the workers the waiting tasks can use (``keep``: tasks this process is about to
        take itself), then a no-op each: done once a worker has started, which may then take work."""
        try:  # outside the lock: a module read while the caller may wait on it
            from concurrent.futures import ProcessPoolExecutor as executor
        except (OSError, MemoryError) as oserr:  # no descriptor or memory left to read it: this process runs every task
            pass_on_interruption(oserr)
            executor = None
        with self.done:
            count = min(self.jobs - 1, self.back - self.front - keep)
            if self.starting or self.closing or count < 1:
                return
            self.starting = True
            try:
                if executor is None:
                    return
                context = worker_context()
                self.stopping = context.Event()
                self.pool = pool = executor(max_workers=count, mp_context=context,
                                            initializer=watch_parent, initargs=(os.getpid(), self.stopping))
            except (OSError, MemoryError, RuntimeError) as oserr:  # no descriptor, memory or thread left for workers
                pass_on_interruption(oserr)
                return
            finally:
                self.done.notify_all()
        with interrupts_blocked():  # the workers inherit it: Ctrl-C stops the caller, which stops them
            for _ in range(count):
                try:
                    ping = pool.submit(int)  # starts a worker
                except Exception as exc:  # a worker died while the others started: this process goes on alone
                    pass_on_interruption(exc)
                    return
                ping.add_done_callback(self._worker_ready)

    def _worker_ready(self, ping: Any) -> None:
        """A worker has started (in the pool's thread): it may take two chunks."""
        with self.done:
            if not ping.cancelled() and ping.exception() is None:
                self.free += 2
                self.done.notify_all()

    def _finished(self, indices: list[int], future: Any) -> None:
        """A chunk came back (in the pool's thread): its outcomes, or its tasks for this process to
        run again when the worker died or a result would not pickle."""
        with self.done:
            if self.pending.pop(future, None) is None or future.cancelled():
                return  # given back already (the pool's thread was taken for dead), or cancelled at the end
            if future.exception() is not None:
                for index in indices:
                    heapq.heappush(self.returned, index)
            else:
                self.results.update(zip(indices, future.result()))
            self.free += 1
            self.done.notify_all()
