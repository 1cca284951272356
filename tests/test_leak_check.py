"""The autouse leak check of conftest.py fails the test that leaves something behind (issue 14)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
import pytest

pytest_plugins = ["pytester"]

LEAKS = '''
import os, signal, subprocess, sys, threading, time
import ledger.storage.connection

def test_child_process():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

def test_thread():
    stop = threading.Event()
    threading.Thread(target=stop.wait, daemon=True).start()

def test_signal_handler():
    signal.signal(signal.SIGUSR1, lambda *_: None)

def test_environment():
    os.environ["LEDGER_LEAK_CHECK_PROBE"] = "1"

def test_open_file(tmp_path):
    test_open_file.kept = open(tmp_path / "f", "w")

def test_patched_library_function():
    ledger.storage.connection.file_uri = lambda path, mode: "x"

def test_clean(tmp_path):
    done = subprocess.run([sys.executable, "-c", "pass"])
    worker = threading.Thread(target=time.sleep, args=(0.1,))
    worker.start()
    worker.join()
    with open(tmp_path / "f", "w") as handle:
        handle.write("x")
    assert done.returncode == 0

def test_clean_once_a_thread_ending_after_the_test_frees_its_file(tmp_path):
    held = open(tmp_path / "g", "w")  # closed when the timer, and so its function, is freed
    threading.Timer(0.2, lambda kept=held: None).start()

def test_after_the_leaks_everything_was_restored():
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert ledger.storage.connection.file_uri("/x", "ro") == "file:/x?mode=ro"
    assert "LEDGER_LEAK_CHECK_PROBE" not in os.environ
'''


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_the_leak_check_fails_each_leaking_test_and_passes_the_clean_ones(pytester, monkeypatch):
    shutil.copy(Path(__file__).with_name("conftest.py"), pytester.path / "conftest.py")
    pytester.makepyfile(test_leaks=LEAKS)
    monkeypatch.setenv("LEDGER_LEAK_GRACE_S", "0.5")  # the leaks below never end by themselves
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    output = result.stdout.str()
    errored = set(re.findall(r"^ERROR test_leaks.py::(\w+)", output, re.MULTILINE))
    assert errored == {"test_child_process", "test_thread", "test_signal_handler", "test_environment",
                       "test_open_file", "test_patched_library_function"}, output
    result.assert_outcomes(passed=9, errors=6)
    assert "child process" in output and "thread 'Thread-" in output and "SIGUSR1" in output
    assert "LEDGER_LEAK_CHECK_PROBE" in output and "left open" in output and "file_uri is still patched" in output
