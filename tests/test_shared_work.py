"""docs/performance.md, "Work shared with the calling process": simulate and verify/export of several
cases hand tasks to worker processes while the calling process works through them too."""

from __future__ import annotations

import os
import time
import warnings
from concurrent import futures
from pathlib import Path

import pytest

from ledger.ground import workers
from ledger import LedgerError
from ledger.ground.errors import INVALID_ARGUMENT
from ledger.ground.workers import shared_map


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


def stops(n: int) -> int:
    raise StopIteration


def fails_at_seven(n: int) -> int:
    if n == 7:
        raise ValueError("seven")
    return n


# --- the rules ---------------------------------------------------------------------------------

@pytest.mark.parametrize("jobs", [2, 3])
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


def test_workers_start_while_the_caller_is_still_on_its_first_task(tmp_path):
    """Two tasks: the caller's first does not end until a worker has run the other, so the workers
    must start on time, not once the caller is free again (and one task waiting is enough)."""
    flag = str(tmp_path / "a-worker-ran")
    out = list(shared_map(square_waiting_for_a_worker, [(n, os.getpid(), flag) for n in range(2)], 2))
    assert [square for square, _ in out] == [0, 1]
    assert out[0][1] == os.getpid() and out[1][1] != os.getpid()


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


def test_the_tasks_of_a_worker_that_died_are_run_by_the_caller(tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "START_WORKERS_AFTER_S", 0.0)
    flag = str(tmp_path / "a-worker-ran")
    out = list(shared_map(dies_in_a_worker, [(n, os.getpid(), flag) for n in range(12)], 3))
    assert out == [(n, os.getpid()) for n in range(12)]  # every task, in order, all by the caller in the end
    assert Path(flag).exists()  # a worker did take one and died with it


def test_a_warning_a_task_gives_in_a_worker_is_given_again_in_the_caller(tmp_path):
    flag = str(tmp_path / "a-worker-ran")
    with pytest.warns(UserWarning, match=r"task 1 ran in a worker"):
        assert list(shared_map(warns_in_a_worker, [(n, os.getpid(), flag) for n in range(2)], 2)) == [0, 1]


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
