"""Shared fixtures: fresh case packages with inputs, the example policy, the CLI runner."""

from __future__ import annotations

import gc
import re
import os
import sqlite3
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import settings

from ledger import BudgetConfig, Case, LedgerError
from ledger.storage.sqlfiles import shipped_schema

# Property and fuzz tests draw the same examples on every run by default, so CI
# cannot fail on a draw it has never seen; LEDGER_HYPOTHESIS_PROFILE=explore
# draws fresh random examples (run it locally to hunt for new failures).
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("LEDGER_HYPOTHESIS_PROFILE", "ci"))

def pytest_configure(config):
    """Ctrl-C as at a terminal for the processes the tests start: a script's background job (``pytest
    … &``) starts with SIGINT ignored, which every child would inherit, and the tests that press
    Ctrl-C in a real ``ledger`` process would see it ignored (a caught signal is reset at ``exec``)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if config.option.basetemp is None and (folder := temporary_folder(os.environ)) is not None:
        tempfile.tempdir = os.environ["TMPDIR"] = str(folder)


#: The least free space ``/dev/shm`` must have to hold the tests' temporary folders.
SHM_FREE_BYTES_MIN = 4 << 30


def temporary_folder(environ, shm: Path = Path("/dev/shm")) -> Path | None:
    """Where the tests' temporary folders go when no ``--basetemp`` is given: ``LEDGER_TEST_TMPDIR``
    when set, else ``/dev/shm`` (Linux keeps it in memory) when it is a folder this user may write,
    with programs allowed to run from it and 4 GiB free; else None (the system's: ``TMPDIR``, ``/tmp``).

    The suite commits thousands of small ledgers at ``synchronous = FULL``: on a disk their fsyncs
    are about a fifth of its time, in memory they cost nothing. Processes the tests start inherit
    the folder (``TMPDIR``). ``.ci/run`` gives the slow and torture tests a folder on its disk."""
    if environ.get("LEDGER_TEST_TMPDIR"):
        return Path(environ["LEDGER_TEST_TMPDIR"])
    try:
        stat = os.statvfs(shm)
    except OSError:
        return None
    if not shm.is_dir() or not os.access(shm, os.W_OK | os.X_OK) or stat.f_flag & (os.ST_NOEXEC | os.ST_RDONLY):
        return None
    return shm if stat.f_bavail * stat.f_frsize >= SHM_FREE_BYTES_MIN else None


def pytest_sessionstart(session):
    """Compile the package's sources once when this Python writes no bytecode cache
    (``PYTHONDONTWRITEBYTECODE``): the many ``ledger`` processes the tests start would each
    compile every module again (about 0.2 s of CPU apiece), where an installed wheel has
    them compiled. Only the ``ledger`` and ``ledger_cli`` packages; nothing else is touched."""
    if not sys.dont_write_bytecode:
        return
    import compileall

    import ledger_cli

    for package in (Path(sys.modules["ledger"].__file__).parent, Path(ledger_cli.__file__).parent):
        if os.access(package, os.W_OK):
            compileall.compile_dir(package, quiet=2, workers=1)


#: Where tests/test_hostile.py leaves its one-line count of fuzz examples.
FUZZ_SUMMARY = pytest.StashKey[str]()
#: Whether this run selected any ``torture`` test (``-m torture``, ``-m "slow or torture"``, …).
TORTURE_RUN = pytest.StashKey[bool]()
#: How many times the fast example counts the ``torture`` variants draw: 4 by default (what CI
#: runs, beside the other parts), ``LEDGER_TORTURE_SCALE=10`` for a long hunt.
TORTURE_SCALE = int(os.environ.get("LEDGER_TORTURE_SCALE", "4"))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` the cases of a ``@pytest.mark.sampled(every=N)`` test the default run leaves
    to the slow lane (before ``-m`` deselects by mark): see :func:`default_sample`. Cases marked
    ``slow`` or ``torture`` already stay where they are and are not counted."""
    cases: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        if (item.get_closest_marker("sampled") and getattr(item, "callspec", None) is not None
                and not item.get_closest_marker("slow") and not item.get_closest_marker("torture")):
            cases.setdefault((item.path, item.originalname), []).append(item)
    for group in cases.values():
        marker = group[0].get_closest_marker("sampled")
        kept = default_sample([_parameter_rows(item) for item in group],
                              marker.kwargs.get("every", marker.args[0] if marker.args else 4))
        for index, item in enumerate(group):
            if index not in kept:
                item.add_marker(pytest.mark.slow)


def _parameter_rows(item: pytest.Item) -> tuple[tuple[int, ...], ...]:
    """Which row of each of its ``@pytest.mark.parametrize`` lists a case runs: per list, the
    identities of the values it takes (the same objects in every case that takes that row)."""
    params = item.callspec.params
    rows = []
    for mark in item.iter_markers("parametrize"):
        names = mark.args[0] if not isinstance(mark.args[0], str) else mark.args[0].split(",")
        rows.append(tuple(id(params.get(name.strip())) for name in names))
    return tuple(rows)


def default_sample(cases: list[tuple[object, ...]], every: int) -> set[int]:
    """Which of a parametrized test's cases (each given by the row it takes of each parameter
    list, in collection order) the default run keeps: every ``every``-th (the first included)
    and, when the test has several parameter lists, also the first case taking each row of
    each list, so that every value runs at least once. The slow lane runs every case."""
    kept = set(range(0, len(cases), every))
    if cases and len(cases[0]) > 1:
        seen: set[tuple[int, object]] = set()
        for index, case in enumerate(cases):
            if any(row not in seen for row in enumerate(case)):
                kept.add(index)
                seen.update(enumerate(case))
    return kept


def pytest_collection_finish(session):
    """Remember whether the selection (after ``-m``) holds a ``torture`` test.

    The long variants ask :func:`torture_run` instead of looking for the word "torture" in the
    ``-m`` expression, which is also in ``not torture`` (the default deselection).
    """
    session.config.stash[TORTURE_RUN] = any(item.get_closest_marker("torture") for item in session.items)


def torture_run(config) -> bool:
    """True when the run selected the ``torture`` tests (they are deselected by default)."""
    return config.stash.get(TORTURE_RUN, False)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The fuzz example counts, after the results instead of inside the progress line."""
    if FUZZ_SUMMARY in config.stash:
        terminalreporter.write_line(config.stash[FUZZ_SUMMARY])

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_BUDGET = REPO / "config" / "budget.example.toml"
TRAJECTORIES = Path(__file__).resolve().parent / "data" / "trajectories"


def make_package(root: Path) -> Path:
    """A package folder with two small source files and nothing of the ledger's."""
    (root / "sources").mkdir(parents=True)
    (root / "sources" / "app.py").write_text("def add(a, b):\n    return a - b\n", encoding="utf-8")
    (root / "sources" / "notes.txt").write_text("cache key ignores locale\n", encoding="utf-8")
    return root


@pytest.fixture
def package(tmp_path: Path) -> Path:
    return make_package(tmp_path / "case")


@pytest.fixture
def example_policy() -> BudgetConfig:
    return BudgetConfig.load(EXAMPLE_BUDGET)


def start_case(path: Path, *, hypotheses: int = 2, units: int = 100, case_id: str = "BUG-1",
               investigate: bool = True) -> Case:
    """A case with an open revision of ``hypotheses`` hypotheses, moved to INVESTIGATING."""
    case = Case.create(path, case_id=case_id)
    case.open_revision([{"statement": f"hypothesis {i}"} for i in range(1, hypotheses + 1)], units)
    if investigate:
        case.transition("INVESTIGATING_HYPOTHESES")
    return case


@pytest.fixture
def case(package: Path):
    opened = start_case(package)
    yield opened
    opened.close()


@pytest.fixture
def budget(case: Case, example_policy: BudgetConfig):
    manager = case.budget(example_policy)
    manager.initialize()
    return manager


def run_cli(*args: str, cwd: Path | None = None, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m ledger_cli`` (the installed ``ledger`` command) in a real process."""
    return subprocess.run(
        [sys.executable, "-m", "ledger_cli", *args], cwd=cwd, input=stdin, capture_output=True,
        env={**os.environ, **(env or {})}, timeout=300,
    )


def deny_reading(monkeypatch, path: Path) -> None:
    """``path`` (a file or a folder) can no longer be read or listed by this process: mode 000, and
    when running as root, which reads anyway, every open or listing of it refused as the system
    refuses one without permission (``os.open``, also through a folder descriptor; ``open``;
    ``os.scandir``)."""
    import builtins
    import errno
    import io

    path.chmod(0)
    if os.geteuid() != 0:
        return
    target = os.path.abspath(path)
    real_open, real_io_open, real_scandir = os.open, io.open, os.scandir

    def is_target(file, dir_fd=None) -> bool:
        if isinstance(file, int):
            return False
        name = os.fsdecode(file)
        if dir_fd is not None and not os.path.isabs(name):
            name = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)
        return os.path.abspath(name) == target

    def refused(file):
        return PermissionError(errno.EACCES, "Permission denied", os.fsdecode(file))

    def os_open(file, flags, mode=0o777, *, dir_fd=None):
        if is_target(file, dir_fd):
            raise refused(file)
        return real_open(file, flags, mode, dir_fd=dir_fd)

    def io_open(file, *args, **kwargs):
        if is_target(file):
            raise refused(file)
        return real_io_open(file, *args, **kwargs)

    def scandir(where="."):
        if is_target(where):
            raise refused(where)
        return real_scandir(where)
    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", io_open)
    monkeypatch.setattr(builtins, "open", io_open)
    monkeypatch.setattr(os, "scandir", scandir)


def read_only_mount(folder):
    """A read-only bind mount of ``folder`` (root only); skips where mounting is not allowed."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    mount = folder.with_name(folder.name + "-ro")
    mount.mkdir()
    for command in (["mount", "--bind", str(folder), str(mount)], ["mount", "-o", "remount,bind,ro", str(mount)]):
        if subprocess.run(command, capture_output=True).returncode != 0:
            subprocess.run(["umount", str(mount)], capture_output=True)
            pytest.skip("cannot make a read-only mount here")
    def undo() -> None:  # a file still open on it (a failed test) makes umount fail: detach it lazily then
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=True)
    return mount, undo


def small_mount(folder: Path, size_bytes: int):
    """``folder`` (made) with a file system of ``size_bytes`` mounted on it (tmpfs, root only): a disk
    that fills up; skips where mounting is not allowed. Returns the function that unmounts it."""
    if os.geteuid() != 0:
        pytest.skip("a small mount needs root")
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small file system here")

    def undo() -> None:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], check=True)
    return undo


def deny_searching(monkeypatch, folder: Path) -> None:
    """``folder`` can be listed but not searched (mode 0644: its names are known, what they name is
    not): when running as root, which searches anyway, ``os.lstat`` and ``os.stat`` of anything in it
    are refused as the system refuses them."""
    import errno

    folder.chmod(0o644)
    if os.geteuid() != 0:
        return
    inside = os.path.join(os.path.abspath(folder), "")
    real_lstat, real_stat = os.lstat, os.stat

    def refusing(real):
        def call(file, *args, **kwargs):
            if not isinstance(file, int) and os.path.abspath(os.fsdecode(file)).startswith(inside):
                raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(file))
            return real(file, *args, **kwargs)
        return call
    monkeypatch.setattr(os, "lstat", refusing(real_lstat))
    monkeypatch.setattr(os, "stat", refusing(real_stat))


def logical_dump(path: Path) -> list:
    """Every row of every table of a ledger file, for before/after comparisons."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        return [(t, conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()) for t in tables]
    finally:
        conn.close()


# --- nothing a test starts or changes may outlive it -------------------------------------
#: Modules whose functions and classes a test may patch (monkeypatch undoes it; nothing else may).
_PATCHABLE_MODULES = ("os", "os.path", "tempfile", "shutil", "subprocess", "sqlite3", "signal", "fcntl", "time",
                      "threading", "socket", "multiprocessing", "click")
#: How long a thread or process a test started may take to finish after the test returned.
LEAK_GRACE_S = float(os.environ.get("LEDGER_LEAK_GRACE_S", "5"))


def _child_pids() -> set[int]:
    """Every direct child of this process (running or a zombie not yet waited for)."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            pids.update(int(pid) for pid in (task / "children").read_text().split())
        except OSError:  # the thread ended meanwhile, or no /proc children file
            continue
    import multiprocessing.resource_tracker as tracker

    # the spawn context's resource tracker is started once and shared by the whole session
    helper = getattr(tracker._resource_tracker, "_pid", None)
    return pids - {helper}


def _open_fds() -> dict[int, str]:
    """Open file descriptors, but not those of multiprocessing's session-wide helpers: the pipe
    to the resource tracker and the shared-memory arenas it keeps for reuse (``/dev/shm/pym-*``)."""
    import multiprocessing.resource_tracker as tracker

    fds = {}
    for entry in Path("/proc/self/fd").iterdir():
        try:
            fds[int(entry.name)] = os.readlink(entry)
        except OSError:  # the fd of the listing itself, closed by now
            continue
    fds.pop(getattr(tracker._resource_tracker, "_fd", None), None)
    return {fd: target for fd, target in fds.items()
            if not target.startswith("/dev/shm/pym-") and not _matplotlib_font(target)}


#: Font files matplotlib opens once and keeps open in its font cache (``font_manager.get_font``),
#: for the life of the process by design: the first test that draws text opens them.
_FONT_SUFFIXES = (".ttf", ".otf", ".ttc", ".afm", ".pfb")


def _matplotlib_font(target: str) -> bool:
    return target.lower().endswith(_FONT_SUFFIXES) and "matplotlib.font_manager" in sys.modules


#: Hooks pytest itself swaps around each test (older pytest versions from inside the test's own
#: setup and teardown): not a test's leftover.
_PYTEST_OWN = frozenset({("threading", "excepthook")})


def _patchable() -> list[tuple[str, object, dict[str, object]]]:
    """A copy of the namespace of the library's modules and classes and of the standard modules
    tests patch: ``(owner name, owner, its attributes)``; :func:`_watched` says which count."""
    names = [n for n in list(sys.modules) if n in _PATCHABLE_MODULES or n.startswith(("ledger.", "ledger_cli."))
             or n in ("ledger", "ledger_cli")]
    seen: list[tuple[str, object, dict[str, object]]] = []
    for name in names:
        module = sys.modules.get(name)
        if module is None:
            continue
        seen.append((name, module, dict(vars(module))))
        if name.split(".")[0] in ("ledger", "ledger_cli"):
            for attr, value in list(vars(module).items()):
                if isinstance(value, type) and value.__module__ == name:
                    seen.append((f"{name}.{attr}", value, dict(vars(value))))
    return seen


def _watched(owner_name: str, attr: str, value: object, owner: object) -> bool:
    """Whether replacing ``owner.attr`` (``value`` before) is a patch the leak check reports:
    a module's functions, classes and submodules, and every member of the library's classes."""
    if isinstance(owner, type):
        return True
    return (owner_name, attr) not in _PYTEST_OWN and (callable(value) or isinstance(value, type(sys)))


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}  # pytest's own


def _handlers() -> dict[int, object]:
    return {sig: signal.getsignal(sig) for sig in signal.valid_signals() if sig not in (signal.SIGKILL, signal.SIGSTOP)}


def _threads_still_running(before: set[threading.Thread], deadline: float) -> list[str]:
    """The threads started since ``before`` still running at ``deadline``. The others are joined
    and no reference to them is kept once this returns: what a finished thread held (a timer's
    function and its objects) is freed before the open files are counted."""
    found = []
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            found.append(f"thread {thread.name!r} (daemon={thread.daemon}) still running")
    return found


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """Fail a test that leaves a child process, a thread, an open file or lock, a changed signal
    handler, environment variable, working directory or umask, or a patched function behind.

    Whatever is found is also cleaned up (processes killed, state restored), so that one
    leaking test fails alone instead of slowing or breaking the tests after it.
    """
    threads = set(threading.enumerate())
    children = _child_pids()
    fds = _open_fds()
    handlers = _handlers()
    environ = _environ()
    cwd = os.getcwd()
    umask = os.umask(0o022)
    os.umask(umask)
    path = list(sys.path)
    patchable = _patchable()
    yield
    found: list[str] = []
    deadline = time.monotonic() + LEAK_GRACE_S
    found += _threads_still_running(threads, deadline)
    while _child_pids() - children and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in sorted(_child_pids() - children):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                         if line.startswith("State:"))
        except (OSError, StopIteration):
            continue
        found.append(f"child process {pid} ({state.split(None, 1)[1]}): {command.strip()[:200]}")
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (OSError, ChildProcessError):
            pass
    now = _handlers()
    for sig, handler in handlers.items():
        if now[sig] != handler:
            found.append(f"signal handler of {signal.Signals(sig).name} changed to {now[sig]!r}")
            signal.signal(sig, handler)
    if _environ() != environ:
        changed = sorted(set(_environ().items()) ^ set(environ.items()))
        found.append(f"environment changed: {changed}")
        for name in set(_environ()) - set(environ):
            del os.environ[name]
        os.environ.update(environ)
    if os.getcwd() != cwd:
        found.append(f"working directory changed to {os.getcwd()}")
        os.chdir(cwd)
    if os.umask(umask) != umask:
        found.append("umask changed")
    if sys.path != path:
        found.append("sys.path changed")
        sys.path[:] = path
    for owner_name, owner, before in patchable:
        now = vars(owner)
        if before == now:  # the usual case, compared at C speed; else find what was replaced
            continue
        for attr, value in before.items():
            if attr in now and now[attr] is not value and _watched(owner_name, attr, value, owner):
                found.append(f"{owner_name}.{attr} is still patched")
                setattr(owner, attr, value)
    opened = {fd: target for fd, target in _open_fds().items() if fds.get(fd) != target}
    if opened:  # an object nobody refers to any more may still hold them: collect it first
        gc.collect()
        opened = {fd: target for fd, target in _open_fds().items() if fds.get(fd) != target}
    for fd, target in sorted(opened.items()):
        if fds.get(fd) != target:
            found.append(f"file descriptor {fd} left open: {target}")
    if found:
        pytest.fail("the test left things behind:\n  " + "\n  ".join(found), pytrace=False)


def downgrade_ledger(path: Path, version: int) -> None:
    """Make the ledger at ``path`` look like one made by schema ``version``: the later migrations'
    tables, indexes and guards dropped, their views put back as ``version`` made them, and their
    ``schema_migrations`` rows deleted (rows of the dropped tables go with them)."""
    now, then = shipped_schema(), shipped_schema(version)
    later = [name for name in now if name not in then]
    conn = sqlite3.connect(path / "ledger.sqlite")
    for name in later:  # guards first: they name the tables
        if now[name].lstrip().upper().startswith("CREATE TRIGGER"):
            conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    for name in later:
        kind = re.match(r"\s*CREATE\s+(?:UNIQUE\s+)?(TABLE|VIEW|INDEX)", now[name], re.I)
        if kind:
            conn.execute(f"DROP {kind.group(1).upper()} IF EXISTS {name}")
    for name in [n for n in now if n in then and now[n] != then[n]]:
        conn.execute(f"DROP VIEW {name}")
        conn.execute(then[name])
    conn.execute("DROP TRIGGER schema_migrations_no_delete")
    conn.execute("DELETE FROM schema_migrations WHERE version > ?", (version,))
    conn.execute(now["schema_migrations_no_delete"])
    conn.commit()
    conn.close()


class InterruptAt:
    """A profile function raising the caller's ``TimeoutError`` at the ``at``-th moment of the
    library's code (and ``contextlib``'s) where Python runs a signal handler: as a function starts
    or resumes, and as a call into C (a SQLite statement, say) returns."""

    def __init__(self, at: int) -> None:
        self.at, self.seen = at, 0

    #: Left out: the moment a generator context manager's ``__exit__`` starts, before any of it ran, after
    #: which its generator's clean-up waits for the generator to be collected (docs/reliability.md).
    GENERATOR_EXITS = ("contextlib.py", "ground/interrupts.py")

    def __call__(self, frame, event, arg):
        name = frame.f_code.co_filename
        if event == "call" and frame.f_code.co_name == "__exit__" and name.endswith(self.GENERATOR_EXITS):
            return
        if event in ("call", "c_return") and ("/ledger/" in name or name.endswith("contextlib.py")):
            self.seen += 1
            if self.seen == self.at:
                raise TimeoutError("tool timed out")

    def run(self, call):
        """``call()`` under it: the exception it raised (None when it completed)."""
        sys.setprofile(self)
        try:
            call()
        except (TimeoutError, LedgerError) as exc:  # a refusal: one landing in a callback SQLite called
            return exc
        finally:
            sys.setprofile(None)
        return None


def close_lost_descriptors(folder) -> None:
    """Close every descriptor of this process on a file under ``folder`` (whose case is closed): one
    the system opened as an interrupt landed, before the library held it, is lost (a known limit,
    docs/reliability.md: about one in a hundred moments of the timeout sweeps)."""
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder)):
                os.close(fd)
        except OSError:
            pass
