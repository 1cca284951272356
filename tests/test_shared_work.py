"""docs/performance.md, "Work shared with the calling process": simulate and verify/export of several
cases hand tasks to worker processes while the calling process works through them too."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ledger.ground import workers
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
