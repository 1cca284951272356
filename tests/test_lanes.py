"""The default run and the slow lane: a ``@pytest.mark.sampled`` test runs a sample of its cases
by default (every Nth, each value of each parameter at least once) and every case with ``-m slow``;
the tests' temporary folders are in memory where the machine has room."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

import conftest
from conftest import default_sample, temporary_folder

pytest_plugins = ["pytester"]

SAMPLED = '''
import pytest

@pytest.mark.parametrize("n", range(10))
@pytest.mark.sampled(every=4)
def test_one_parameter(n):
    pass

@pytest.mark.parametrize("table", ["a", "b", "c", "d", "e"])
@pytest.mark.parametrize("verb", ["insert", "replace"])
@pytest.mark.sampled(every=4)
def test_two_parameters(table, verb):
    pass

@pytest.mark.parametrize("n", [0, 1, pytest.param(2, marks=pytest.mark.slow), 3, 4, 5])
@pytest.mark.sampled(every=2)
def test_a_case_already_slow(n):
    pass

@pytest.mark.parametrize("n", range(10))
def test_not_sampled(n):
    pass
'''


def test_the_default_run_takes_every_nth_case_of_one_parameter_list():
    cases = [(n,) for n in range(10)]
    assert default_sample(cases, 4) == {0, 4, 8}
    assert default_sample(cases, 3) == {0, 3, 6, 9}
    assert default_sample([(("kind", n),) for n in range(5)], 2) == {0, 2, 4}  # one list of several names


def test_with_several_parameter_lists_every_row_of_each_runs_at_least_once():
    cases = [(table, verb) for table in range(5) for verb in range(2)]
    kept = default_sample(cases, 4)
    assert {cases[i][0] for i in kept} == set(range(5))
    assert {cases[i][1] for i in kept} == {0, 1}
    assert kept == {0, 1, 2, 4, 6, 8}


def test_the_default_run_deselects_the_rest_and_the_slow_lane_runs_every_case(pytester):
    shutil.copy(Path(__file__).with_name("conftest.py"), pytester.path / "conftest.py")
    pytester.makepyfile(test_sampled=SAMPLED)
    pytester.makeini("[pytest]\nmarkers =\n    slow: s\n    torture: t\n    sampled: s\n")
    default = pytester.runpytest("-p", "no:cacheprovider", "-m", "not slow", "--collect-only", "-q")
    chosen = [line for line in default.outlines if "::" in line]
    assert [c.split("::")[1] for c in chosen if "test_one_parameter" in c] == [
        "test_one_parameter[0]", "test_one_parameter[4]", "test_one_parameter[8]"]
    # verb varies slowest: every 4th of the 10, then the first of each table and of "replace"
    assert [c.split("::")[1] for c in chosen if "test_two_parameters" in c] == [
        f"test_two_parameters[{case}]" for case in
        ("insert-a", "insert-b", "insert-c", "insert-d", "insert-e", "replace-a", "replace-d")]
    # the case marked slow by hand is neither counted nor kept: 0, 1, 3, 4, 5 sampled every 2nd
    assert [c.split("::")[1] for c in chosen if "already_slow" in c] == [
        "test_a_case_already_slow[0]", "test_a_case_already_slow[3]", "test_a_case_already_slow[5]"]
    assert len([c for c in chosen if "test_not_sampled" in c]) == 10
    every = pytester.runpytest("-p", "no:cacheprovider", "-m", "slow or not slow", "--collect-only", "-q")
    assert len([line for line in every.outlines if "::" in line]) == 10 + 10 + 6 + 10


def test_temporary_folders_go_where_ledger_test_tmpdir_says_else_to_dev_shm_with_room(tmp_path, monkeypatch):
    assert temporary_folder({"LEDGER_TEST_TMPDIR": str(tmp_path)}) == tmp_path
    assert temporary_folder({}, tmp_path / "missing") is None
    (tmp_path / "file").write_text("")
    assert temporary_folder({}, tmp_path / "file") is None
    monkeypatch.setattr(conftest, "SHM_FREE_BYTES_MIN", 1)
    assert temporary_folder({}, tmp_path) == tmp_path
    monkeypatch.setattr(conftest, "SHM_FREE_BYTES_MIN", 1 << 60)  # more than any machine has free
    assert temporary_folder({}, tmp_path) is None


def test_the_default_run_keeps_its_temporary_folders_in_memory_where_there_is_room(tmp_path):
    folder = temporary_folder(os.environ)
    if folder is None:
        pytest.skip("no /dev/shm with room here: the tests use the system's temporary folder")
    if os.environ.get("TMPDIR") != str(folder):
        pytest.skip("--basetemp was given: the tests' folders are where it says")
    assert tmp_path.resolve().is_relative_to(folder.resolve())
    assert tempfile.gettempdir() == str(folder)
