"""The caller's own interruption is never taken for an error of the system (docs/investigator.md,
"One call per router action"): a ``TimeoutError`` or ``InterruptedError`` with no errno, as a signal
handler raises to time a tool out, goes on as itself through every handler of ``OSError``."""

from __future__ import annotations

import ast
import errno
import gzip
import os
from pathlib import Path

import pytest

from ledger.ground.errors import pass_on_interruption
from ledger.ground.paths import os_error, walk

LEDGER = Path(__file__).resolve().parent.parent / "ledger"

#: Handlers of ``OSError`` that need not pass an interruption on: a thread no signal reaches, and the
#: example investigator, which shows the public API only.
EXEMPT = {("storage/writer_lock.py", "waiter"), ("examples/investigator.py", None)}


@pytest.mark.parametrize("exc", [TimeoutError("tool timed out"), InterruptedError(), TimeoutError()])
def test_an_interruption_with_no_errno_is_raised_again(exc):
    with pytest.raises(type(exc)) as raised:
        pass_on_interruption(exc)
    assert raised.value is exc


@pytest.mark.parametrize("exc", [TimeoutError(errno.ETIMEDOUT, "Connection timed out"), OSError("plain"),
                                 InterruptedError(errno.EINTR, "Interrupted system call"),
                                 gzip.BadGzipFile("not gzip"), FileNotFoundError(errno.ENOENT, "gone")])
def test_the_systems_errors_and_others_of_no_errno_are_left_to_the_handler(exc):
    assert pass_on_interruption(exc) is None
    assert os_error(exc, "cannot read x").code in ("INVALID_ARGUMENT", "STORAGE_ERROR")


def test_the_conversion_of_a_system_error_to_a_refusal_raises_an_interruption_again():
    interruption = TimeoutError("tool timed out")
    with pytest.raises(TimeoutError) as raised:
        os_error(interruption, "cannot read x")
    assert raised.value is interruption


def _handles_os_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(kind, ast.Name) and kind.id == "OSError" for kind in kinds)


#: The calls that pass an interruption on: the check itself, and the conversion of the system's error
#: to a refusal (:func:`ledger.ground.paths.os_error`), which makes it first.
PASSING_ON = {"pass_on_interruption", "os_error"}


def _calls_pass_on(handler: ast.ExceptHandler) -> bool:
    def name(func: ast.expr) -> str | None:
        return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return any(isinstance(node, ast.Call) and name(node.func) in PASSING_ON
               for statement in handler.body for node in ast.walk(statement))


def _handlers(node: ast.AST, owner: str | None = None):
    """``(handler, the innermost function holding it)`` for every ``except`` below ``node``."""
    for child in ast.iter_child_nodes(node):
        inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else owner
        if isinstance(child, ast.ExceptHandler):
            yield child, owner
        yield from _handlers(child, inner)


def test_every_handler_of_os_error_in_the_library_passes_an_interruption_on():
    """Found by reading the source: a handler added later without the call fails here, naming it."""
    missing, handlers = [], 0
    for path in sorted(LEDGER.rglob("*.py")):
        relative = path.relative_to(LEDGER).as_posix()
        for handler, owner in _handlers(ast.parse(path.read_text(encoding="utf-8"))):
            if not _handles_os_error(handler):
                continue
            handlers += 1
            if (relative, owner) not in EXEMPT and (relative, None) not in EXEMPT and not _calls_pass_on(handler):
                missing.append(f"{relative}:{handler.lineno} ({owner})")
    assert handlers > 100 and missing == []


#: Handlers of every exception that neither raise it again nor pass an interruption on, and why: each
#: keeps what it caught to raise it later, runs where no caller's signal lands, or meets a second
#: failure while the caller's own exception is already on its way out.
KEPT = {("ground/interrupts.py", "restore_all"): "raises the first after every clean-up step",
        ("ground/workers.py", "_run_chunk"): "a worker process: sends it to the caller",
        ("ground/workers.py", "step"): "raised in its turn, as a worker's would be",
        ("package_tools/verify_range.py", "_second_half"): "a helper process: the first replays its events",
        ("services/actions.py", "reserve_or_close"): "a read after the caller's exception, which goes on",
        ("services/actions.py", "close_failed"): "a fail after the caller's exception, which goes on"}


def _raises_again(handler: ast.ExceptHandler) -> bool:
    return any(isinstance(statement, ast.Raise) and (statement.exc is None or (
        isinstance(statement.exc, ast.Name) and statement.exc.id == handler.name)) for statement in handler.body)


def test_every_handler_of_any_exception_in_the_library_raises_it_again_or_passes_an_interruption_on():
    """``except Exception`` catches a caller's ``TimeoutError`` too: one that took it for a failure of
    its own small step (a ``__repr__`` that raises, a signature Python cannot read) went on as if
    nothing had happened, and the caller's timeout was lost. Found by reading the source."""
    missing, handlers = [], 0
    for path in sorted(LEDGER.rglob("*.py")):
        relative = path.relative_to(LEDGER).as_posix()
        for handler, owner in _handlers(ast.parse(path.read_text(encoding="utf-8"))):
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            if handler.type is not None and not any(
                    isinstance(kind, ast.Name) and kind.id in ("Exception", "BaseException") for kind in kinds):
                continue
            handlers += 1
            if (relative, owner) not in KEPT and not _raises_again(handler) and not _calls_pass_on(handler):
                missing.append(f"{relative}:{handler.lineno} ({owner})")
    assert handlers > 40 and missing == []


@pytest.mark.parametrize("where", ["a repr", "a signature"])
def test_a_timeout_landing_in_a_small_step_that_tolerates_failure_is_raised(monkeypatch, where):
    from ledger.ground import arguments, errors

    def timed_out(*args, **kwargs):
        raise TimeoutError("tool timed out")

    if where == "a repr":
        monkeypatch.setattr(errors._SHOWN, "repr", timed_out)
        call = lambda: errors.shown(object(), 50)  # noqa: E731
    else:
        monkeypatch.setattr(arguments.inspect, "signature", timed_out)
        call = lambda: arguments.check_callback(print, "progress", 1)  # noqa: E731
    with pytest.raises(TimeoutError, match="tool timed out"):
        call()
    monkeypatch.setattr(errors._SHOWN, "repr", lambda value: (_ for _ in ()).throw(ValueError("bad repr")))
    monkeypatch.setattr(arguments.inspect, "signature", lambda *a, **k: (_ for _ in ()).throw(ValueError("no")))
    assert (errors.shown(object(), 50), arguments.check_callback(print, "progress", 1)) == ("<object>", print)


def test_a_walk_passes_an_interruption_on_and_leaves_out_an_unlistable_folder(tmp_path, monkeypatch):
    (tmp_path / "a" / "b").mkdir(parents=True)
    real = os.scandir

    def interrupted(path="."):
        if os.fsdecode(path).endswith("b"):
            raise TimeoutError("tool timed out")
        return real(path)

    monkeypatch.setattr(os, "scandir", interrupted)
    with pytest.raises(TimeoutError, match="tool timed out"):
        list(walk(tmp_path))
    monkeypatch.setattr(os, "scandir", lambda path=".": real(path) if not os.fsdecode(path).endswith("b") else
                        (_ for _ in ()).throw(PermissionError(errno.EACCES, "Permission denied")))
    assert [Path(folder).name for folder, _, _ in walk(tmp_path)] == [tmp_path.name, "a"]  # the system's: left out


def test_a_clean_up_step_an_interruption_lands_in_is_run_again_and_the_interruption_raised_after():
    from ledger.ground.interrupts import restore_all

    done, tries = [], {"b": 0}

    def b():
        tries["b"] += 1
        if tries["b"] == 1:
            raise TimeoutError("timed out")
        done.append("b")

    with pytest.raises(TimeoutError):
        restore_all([lambda: done.append("a"), b, lambda: done.append("c")])
    assert done == ["a", "b", "c"]


def test_a_timeout_as_a_read_only_query_is_set_up_leaves_the_connection_writable(package, monkeypatch):
    """The authorizer was set before the block that takes it off: a caller's timeout (or a Ctrl-C)
    landing between the two left a writer's connection refusing every later statement ("not
    authorized") until the case was closed (helper 214: after 30-100 timed-out queries)."""
    from conftest import start_case
    from ledger.storage import readonly

    case = start_case(package)
    monkeypatch.setattr(readonly, "_stop_at_deadline", lambda conn, ms: (_ for _ in ()).throw(TimeoutError("x")))
    with pytest.raises(TimeoutError):
        case.query("SELECT count(*) FROM events", timeout_ms=1000)
    monkeypatch.undo()
    assert case.status()["case_id"] == "BUG-1"
    case.transition("BLOCKED")  # a write, on the same connection
    assert case.query("SELECT count(*) AS n FROM events")[0]["n"] == case.status()["package_generation"]
    case.close()


def test_a_timeout_as_signals_are_deferred_puts_every_handler_back(monkeypatch):
    """deferred() set its catchers in one expression before the block that puts them back: a caller's
    timeout landing between the two left Ctrl-C and SIGTERM caught into a list nobody reads for the
    rest of the process (helper 214, apply_journal under a timer)."""
    import signal

    from ledger.ground import interrupts

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    real, calls = signal.signal, []

    def lands_on_the_second(number, handler):
        calls.append(number)
        result = real(number, handler)
        if len(calls) == 2:
            raise TimeoutError("timed out")
        return result

    monkeypatch.setattr(signal, "signal", lands_on_the_second)
    with pytest.raises(TimeoutError):
        with interrupts.deferred():
            pass
    monkeypatch.undo()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_context_manager_an_interruption_lands_in_as_it_is_entered_is_cleaned_up_before_the_exception_goes_on():
    """With contextlib's, an exception landing after the generator yielded and before the ``with`` held
    it left the generator suspended: its clean-up waited for it to be collected, which an exception
    keeping its frames alive put off (a read's snapshot stayed open; signal handlers stayed swapped)."""
    import contextlib

    from ledger.ground.interrupts import context_manager

    done = []

    @context_manager
    def held():
        done.append("set up")
        try:
            yield "value"
        finally:
            done.append("cleaned up")

    with held() as value:
        done.append(value)
    assert done == ["set up", "value", "cleaned up"]
    manager = held()
    inner = manager.inner  # contextlib's, which the library's wraps

    def interrupted():
        type(inner).__enter__(inner)
        raise TimeoutError("tool timed out")  # as a signal handler raises it when next() returns

    inner.__enter__ = interrupted
    done.clear()
    with pytest.raises(TimeoutError) as raised:
        with manager:
            done.append("body")
    assert raised.value.__traceback__ is not None and done == ["set up", "cleaned up"]


def test_every_generator_context_manager_of_the_library_and_the_command_line_is_made_by_context_manager():
    """Found by reading the source: ``contextlib.contextmanager`` used directly fails here, named."""
    found = []
    for path in sorted([*LEDGER.rglob("*.py"), *(LEDGER.parent / "cli").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [ast.unparse(decorator) for decorator in node.decorator_list]
                if any(name in ("contextmanager", "contextlib.contextmanager") for name in names):
                    found.append(f"{path.relative_to(LEDGER.parent)}:{node.lineno} ({node.name})")
    assert found == []
