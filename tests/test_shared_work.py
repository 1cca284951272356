"""docs/performance.md, "Work shared with the calling process": simulate and verify/export of several
cases hand tasks to worker processes while the calling process works through them too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from concurrent import futures
from pathlib import Path

import pytest

from ledger.ground import workers
from ledger import LedgerError
from ledger.ground.errors import INVALID_ARGUMENT
from ledger.ground.workers import shared_map
from conftest import TRAJECTORIES


# --- work (module level: spawned interpreters import it by name) --------------------------------

def square_waiting_for_a_worker(task: tuple[int, int, str]) -> tuple[int, int]:
    """``(n * n, pid)``. In the calling process (``parent``) the first task waits until a worker has
    run one, so the test knows both kinds of process took part; a worker marks ``flag`` instead."""
    n, parent, flag = task
    if os.getpid() == parent:
        deadline = time.monotonic() + 60
        while n == 0 and not Path(flag).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    else:
        Path(flag).touch()
    return n * n, os.getpid()


def _wait_for_a_worker(n: int, parent: int, flag: str) -> None:
    if n == 0 and os.getpid() == parent:  # the caller's first task: until a worker has run one
        deadline = time.monotonic() + 60
        while not Path(flag).exists() and time.monotonic() < deadline:
            time.sleep(0.01)


def dies_in_a_worker(task: tuple[int, int, str]) -> tuple[int, int]:
    """``(n, pid)`` in the calling process; a worker marks ``flag`` and dies on the spot."""
    n, parent, flag = task
    _wait_for_a_worker(n, parent, flag)
    if os.getpid() != parent:
        Path(flag).touch()
        os._exit(3)
    return n, os.getpid()


def warns_in_a_worker(task: tuple[int, int, str]) -> int:
    n, parent, flag = task
    _wait_for_a_worker(n, parent, flag)
    if os.getpid() != parent:
        Path(flag).touch()
        warnings.warn(f"task {n} ran in a worker", UserWarning)
    return n


def unpicklable_in_a_worker(task: tuple[int, int, str]) -> tuple[int, int, object]:
    """``(n, pid, a lock)``: a lock cannot travel back from a worker, so the caller runs it again."""
    n, parent, flag = task
    _wait_for_a_worker(n, parent, flag)
    if os.getpid() != parent:
        Path(flag).touch()
    return n, os.getpid(), threading.Lock()


def exits_in_a_worker(task: tuple[int, int, str]) -> int:
    n, parent, flag = task
    _wait_for_a_worker(n, parent, flag)
    if os.getpid() != parent:
        Path(flag).touch()
        if n == 5:
            raise SystemExit(f"task {n} exits")
    return n


def writes_its_pid_then_sleeps(task: tuple[int, str]) -> int:
    n, folder = task
    (Path(folder) / f"{n}-{os.getpid()}").touch()
    time.sleep(60)
    return n


def marks_slowly_in_a_worker(task: tuple[int, int, str]) -> int:
    """In a worker: a mark per task, then a fifth of a second. In the calling process: task 1 waits
    until a worker has begun one, then fails (the caller stops)."""
    n, parent, folder = task
    if os.getpid() != parent:
        (Path(folder) / str(n)).touch()
        time.sleep(0.2)
    elif n == 1:
        deadline = time.monotonic() + 60
        while not any(Path(folder).iterdir()) and time.monotonic() < deadline:
            time.sleep(0.01)
        raise ValueError("the caller stops")
    return n


def stops(n: int) -> int:
    raise StopIteration


def fails_at_seven(n: int) -> int:
    if n == 7:
        raise ValueError("seven")
    return n


# --- the rules ---------------------------------------------------------------------------------

@pytest.mark.parametrize("jobs", [2, 3])
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_results_come_in_task_order_whichever_process_ran_them(jobs, tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "START_WORKERS_AFTER_S", 0.0)
    flag = str(tmp_path / "a-worker-ran")
    tasks = [(n, os.getpid(), flag) for n in range(30)]
    out = list(shared_map(square_waiting_for_a_worker, tasks, jobs))
    assert [square for square, _ in out] == [n * n for n in range(30)]
    pids = {pid for _, pid in out}
    assert os.getpid() in pids and len(pids) >= 2  # the calling process and at least one worker
    assert out[0][1] == os.getpid() and out[-1][1] != os.getpid()  # this process from the front, workers from the back


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_task_exception_is_raised_in_its_turn_after_the_results_before_it(jobs, monkeypatch):
    monkeypatch.setattr(workers, "START_WORKERS_AFTER_S", 0.0)
    seen = []
    with pytest.raises(ValueError, match="seven"):
        for value in shared_map(fails_at_seven, list(range(20)), jobs):
            seen.append(value)
    assert seen == list(range(7))


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_workers_start_while_the_caller_is_still_on_its_first_task(tmp_path):
    """Two tasks: the caller's first does not end until a worker has run the other, so the workers
    must start on time, not once the caller is free again (and one task waiting is enough)."""
    flag = str(tmp_path / "a-worker-ran")
    out = list(shared_map(square_waiting_for_a_worker, [(n, os.getpid(), flag) for n in range(2)], 2))
    assert [square for square, _ in out] == [0, 1]
    assert out[0][1] == os.getpid() and out[1][1] != os.getpid()


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_no_more_workers_start_than_tasks_are_waiting(tmp_path, monkeypatch):
    started = []
    real = futures.ProcessPoolExecutor

    class Counting(real):
        def __init__(self, max_workers=None, **options):
            started.append(max_workers)
            super().__init__(max_workers=max_workers, **options)

    monkeypatch.setattr(futures, "ProcessPoolExecutor", Counting)
    flag = str(tmp_path / "a-worker-ran")
    out = list(shared_map(square_waiting_for_a_worker, [(n, os.getpid(), flag) for n in range(3)], 64))
    assert [square for square, _ in out] == [0, 1, 4]
    assert len(started) == 1 and 1 <= started[0] <= 2  # 63 asked for; at most the 2 tasks not the caller's


def _sleeps_then_squares(n: int) -> int:
    time.sleep(0.005)
    return n * n


@pytest.mark.parametrize("start_after_s", [0.0, 0.02])  # started by the dispatcher thread, or by the caller
def test_workers_that_cannot_start_for_lack_of_descriptors_leave_every_task_to_the_caller_without_a_traceback(
        monkeypatch, start_after_s):
    """Starting the workers opens pipes: with the process's open-file limit reached that raised
    EMFILE in the dispatcher thread (a traceback on stderr, the command still exiting 0) or in the
    caller. The caller now runs every task itself, and nothing escapes a thread."""
    monkeypatch.setattr(workers, "START_WORKERS_AFTER_S", start_after_s)
    tried, escaped = [], []

    class OutOfDescriptors:
        def __init__(self, *args, **kwargs):
            tried.append(kwargs.get("max_workers"))
            raise OSError(24, "Too many open files")

    monkeypatch.setattr(futures, "ProcessPoolExecutor", OutOfDescriptors)
    monkeypatch.setattr(threading, "excepthook", escaped.append)
    assert list(shared_map(_sleeps_then_squares, list(range(40)), 2)) == [n * n for n in range(40)]
    assert tried and escaped == []


@pytest.mark.slow  # over 0.5 s in the default run: the slow lane (.ci/run) runs it
def test_the_tasks_of_a_worker_that_died_are_run_by_the_caller(tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "START_WORKERS_AFTER_S", 0.0)
    flag = str(tmp_path / "a-worker-ran")
    out = list(shared_map(dies_in_a_worker, [(n, os.getpid(), flag) for n in range(12)], 3))
    assert out == [(n, os.getpid()) for n in range(12)]  # every task, in order, all by the caller in the end
    assert Path(flag).exists()  # a worker did take one and died with it


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_warning_a_task_gives_in_a_worker_is_given_again_in_the_caller(tmp_path):
    flag = str(tmp_path / "a-worker-ran")
    with pytest.warns(UserWarning, match=r"task 1 ran in a worker"):
        assert list(shared_map(warns_in_a_worker, [(n, os.getpid(), flag) for n in range(2)], 2)) == [0, 1]


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_result_that_cannot_come_back_from_a_worker_is_made_again_by_the_caller(tmp_path):
    flag = str(tmp_path / "a-worker-ran")
    out = list(shared_map(unpicklable_in_a_worker, [(n, os.getpid(), flag) for n in range(4)], 2))
    assert [n for n, _, _ in out] == [0, 1, 2, 3] and Path(flag).exists()
    assert {pid for _, pid, _ in out} == {os.getpid()}


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_systemexit_in_a_worker_task_is_raised_in_that_tasks_turn(tmp_path):
    flag = str(tmp_path / "a-worker-ran")
    seen = []
    with pytest.raises(SystemExit, match="task 5 exits"):
        for n in shared_map(exits_in_a_worker, [(n, os.getpid(), flag) for n in range(6)], 2):
            seen.append(n)
    assert seen == [0, 1, 2, 3, 4]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_workers_end_when_the_process_that_started_them_is_killed(tmp_path):
    script = tmp_path / "caller.py"
    script.write_text(
        "import sys\n"
        f"sys.path[:0] = [{str(Path(__file__).parent)!r}]\n"
        "from test_shared_work import writes_its_pid_then_sleeps\n"
        "from ledger.ground import workers\n"
        "workers.START_WORKERS_AFTER_S = 0.0\n"
        "if __name__ == '__main__':\n"
        f"    list(workers.shared_map(writes_its_pid_then_sleeps, [(n, {str(tmp_path)!r}) for n in range(6)], 3))\n",
        encoding="utf-8")
    caller = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pids = {int(p.name.split("-")[1]) for p in tmp_path.iterdir() if "-" in p.name} - {caller.pid}
            if len(pids) >= 2:
                break
            time.sleep(0.05)
        assert len(pids) >= 2, "the workers did not start"
    finally:
        caller.kill()
        caller.wait()
    deadline = time.monotonic() + 10
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(_alive, pids)), f"workers {sorted(pids)} outlived the process that started them"


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_ctrl_c_stops_shared_work_with_no_traceback_and_no_process_left(tmp_path):
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it, while workers run."""
    journals = sorted((Path(__file__).parent / "data" / "trajectories").glob("*.jsonl"))
    command = [sys.executable, "-m", "ledger_cli", "simulate", *map(str, journals), "--json", "--jobs", "2",
               "--vary", "max_low_information_steps=1,2,3,4,5,6,7,8"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    time.sleep(1.0)  # past start-up, the workers started
    children = [int(pid) for pid in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()]
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    err = err.decode()
    assert process.returncode in (130, 0) and "Traceback" not in err and "Fatal Python error" not in err, err
    if process.returncode == 130:
        assert err.strip().endswith("run the command again")
    deadline = time.monotonic() + 10
    while any(map(_alive, children)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(_alive, children))


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_task_raising_stopiteration_fails_the_same_way_with_one_job_or_several(jobs):
    with pytest.raises(RuntimeError, match="StopIteration"):
        list(shared_map(stops, [1, 2, 3], jobs))


def test_work_that_ends_before_the_start_delay_starts_no_worker(monkeypatch):
    def no_workers():
        raise AssertionError("a worker process was started for work this short")

    monkeypatch.setattr(workers, "worker_context", no_workers)
    assert list(shared_map(abs, list(range(-200, 200)), 4)) == [abs(n) for n in range(-200, 200)]


def test_one_job_or_one_task_runs_in_this_process_alone(monkeypatch):
    monkeypatch.setattr(workers, "START_WORKERS_AFTER_S", 0.0)
    monkeypatch.setattr(workers, "worker_context", lambda: pytest.fail("no worker may start"))
    assert list(shared_map(abs, [-3, -2, -1], 1)) == [3, 2, 1]
    assert list(shared_map(abs, [-3], 8)) == [3]


def test_the_default_jobs_are_the_cores_this_process_may_use_not_every_core_of_the_machine(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 5}, raising=False)  # taskset -c 2,5
    assert workers.usable_cores() == 2 and workers.job_count(None) == 2 and workers.job_count(3) == 3
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # a system without affinity
    assert workers.job_count(None) == 64
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(LedgerError) as caught:
            workers.job_count(bad)
        assert caught.value.code == INVALID_ARGUMENT


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_program_read_from_standard_input_runs_its_work_alone_with_one_warning_and_no_traceback(tmp_path):
    """A worker starts by importing the calling program again; ``python -`` has no file to import."""
    script = ("import glob, sys\n"
              "from ledger import simulate\n"
              "files = sorted(glob.glob(sys.argv[1] + '/*.jsonl'))\n"
              "for jobs in (2, None):  # None: the cores this process may use\n"
              "    report = simulate(files, jobs=jobs)\n"
              "print(len(report.runs))\n")
    done = subprocess.run([sys.executable, "-", str(TRAJECTORIES)], input=script, capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert (done.returncode, done.stdout) == (0, "100\n")
    assert "Traceback" not in done.stderr and done.stderr.count("RuntimeWarning") == 1
    assert "'<stdin>' is no file to import it from" in done.stderr
    assert done.stderr.startswith("<stdin>:5: RuntimeWarning: ")  # the program's own call, not a line of the ledger


def test_a_dispatcher_thread_that_cannot_start_leaves_every_task_to_the_caller(monkeypatch):
    """No thread left to the process (a memory limit): starting the dispatcher raised RuntimeError out of
    shared_map, and closing then joined a thread that never started."""
    real_start = threading.Thread.start

    def start(self):
        if self.name == "shared-work":
            raise RuntimeError("can't start new thread")
        real_start(self)
    monkeypatch.setattr(threading.Thread, "start", start)
    assert list(shared_map(_sleeps_then_squares, list(range(10)), 2)) == [n * n for n in range(10)]


@pytest.mark.slow  # starts a real worker process: the slow lane (.ci/run) runs it
def test_a_pool_that_cannot_shut_down_has_its_workers_ended_not_waited_for(tmp_path, monkeypatch):
    """A pool whose own thread never started (no thread left) raised "cannot join thread before it is
    started" at shutdown, and its worker waited for work for ever, and the command with it (SIGTERM
    and Ctrl-C deferred meanwhile). Its workers are killed now."""
    monkeypatch.setattr(workers, "START_WORKERS_AFTER_S", 0.0)
    pools = []
    real = futures.ProcessPoolExecutor

    class Unclosable(real):
        def shutdown(self, wait=True, *, cancel_futures=False):
            pools.append(dict(self._processes or {}))  # the workers as the failed shutdown leaves them
            raise RuntimeError("cannot join thread before it is started")

    monkeypatch.setattr(futures, "ProcessPoolExecutor", Unclosable)
    flag = str(tmp_path / "a-worker-ran")
    out = list(shared_map(square_waiting_for_a_worker, [(n, os.getpid(), flag) for n in range(6)], 2))
    assert [square for square, _ in out] == [n * n for n in range(6)]
    assert pools and pools[0] and all(not process.is_alive() for process in pools[0].values())


@pytest.mark.slow  # starts real worker processes: the slow lane (.ci/run) runs it
@pytest.mark.parametrize("fails_at", ["the first hand-out", "a chunk's hand-out"])
def test_a_pool_whose_own_thread_dies_gives_its_chunks_back_and_its_workers_are_ended(monkeypatch, fails_at):
    """With no thread or memory left to start its queue's feeder, the pool's own thread died at its
    first put: its workers never got the stop message and the command hung at exit joining them (or,
    with a chunk handed out, waited for that chunk's results for ever). The caller runs the chunks
    itself and the workers are killed."""
    from concurrent.futures import process as pool_module
    from multiprocessing import queues

    monkeypatch.setattr(workers, "START_WORKERS_AFTER_S", 0.0)
    monkeypatch.setattr(workers, "POOL_CHECK_S", 0.05)
    real_put, processes, escaped = queues.Queue.put, [], []

    def put(self, item, *args, **kwargs):
        if isinstance(threading.current_thread(), pool_module._ExecutorManagerThread) and (
                fails_at == "the first hand-out" or getattr(item, "fn", None) is workers._run_chunk):
            raise RuntimeError("can't start new thread")
        return real_put(self, item, *args, **kwargs)

    real_shutdown = futures.ProcessPoolExecutor.shutdown

    def shutdown(self, *args, **kwargs):
        processes.extend((self._processes or {}).values())
        return real_shutdown(self, *args, **kwargs)

    monkeypatch.setattr(queues.Queue, "put", put)
    monkeypatch.setattr(futures.ProcessPoolExecutor, "shutdown", shutdown)
    monkeypatch.setattr(threading, "excepthook", escaped.append)
    out: list = []
    done = threading.Thread(target=lambda: out.extend(shared_map(_sleeps_then_squares, list(range(60)), 2)),
                            daemon=True)
    done.start()
    done.join(60)
    assert not done.is_alive(), "shared_map waited for a chunk the pool's dead thread held"
    assert out == [n * n for n in range(60)]
    assert processes and not any(process.is_alive() for process in processes)
    # Python 3.11 lets the thread die with its error; from 3.12 on the pool ends itself as broken
    assert [str(args.exc_value) for args in escaped] in ([], ["can't start new thread"])


def test_a_worker_that_cannot_start_its_threads_ends_without_a_traceback(monkeypatch):
    """With no thread left to it, a worker's start (the threads that watch the process that started it)
    raised RuntimeError, and the pool printed "Exception in initializer:" with a traceback."""
    real_start, ended = threading.Thread.start, []

    def start(self):
        if self.name == "watch-parent":
            raise RuntimeError("can't start new thread")
        real_start(self)
    monkeypatch.setattr(threading.Thread, "start", start)
    monkeypatch.setattr(os, "_exit", lambda status: ended.append(status))
    monkeypatch.setattr(workers, "_parent", [None])  # what watch_parent sets, put back after the test
    workers.watch_parent(os.getpid())
    assert ended == [1]


@pytest.mark.slow  # starts a real worker process: the slow lane (.ci/run) runs it
def test_a_stopping_caller_has_its_workers_run_no_more_of_their_chunks(tmp_path, monkeypatch):
    """The caller waited for every chunk a worker held: several long cases each (an export of several
    cases interrupted with --jobs 2 went on for 30-40 s, exporting them all). A worker now ends its
    chunk after the task it is on."""
    monkeypatch.setattr(workers, "CHUNK_S", 1000.0)  # chunks as large as the tasks left allow
    folder = tmp_path / "marks"
    folder.mkdir()
    tasks = [(n, os.getpid(), str(folder)) for n in range(60)]
    with pytest.raises(ValueError, match="the caller stops"):
        list(shared_map(marks_slowly_in_a_worker, tasks, 2))
    assert 1 <= len(list(folder.iterdir())) <= 3  # the task it was on (and one more handed to it meanwhile)

