"""What every command shares: the error mapping, global settings, options and progress bars.

:class:`LedgerGroup` is the single place that turns a ``LedgerError`` into
``error: CODE: message`` on stderr with the error's exit status (1; click exits
2 for usage errors).
"""

from __future__ import annotations

import errno
import functools
import math
import os
import stat
import sys
import warnings
from typing import Any, Callable, Iterator

import click

from ledger import AnalysisConfig, BudgetConfig, Case, CheckpointWarning, LedgerError
from ledger.ground import interrupts
from ledger.ground.interrupts import context_manager
from ledger.ground.arguments import is_decimal
from ledger.ground.errors import OUTPUT_ERROR, limit_reached, machine_refusal, repr_shown
from ledger.ground.paths import STORAGE_ERRNOS, os_error
from ledger.package_tools.journal import raised_at_warning
from ledger.services.case import LEDGER_FILE, read_only_rows as ledger_read_only_rows

from .entry import INTERRUPTED
from ._output import FORMATS, OutputError, escape_unencodable_output, one_line, warn

BALANCE_COLUMNS = ("revision", "hypothesis_id", "initial_units", "granted_units", "spent_units",
                   "rewarded_units", "remaining_units", "status", "terminal_reason", "pending_action_id",
                   "low_information_streak", "settled_actions", "failed_actions", "statement")


def _silence_stdout() -> None:
    """Point a broken standard output at /dev/null so the interpreter's last flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (a test runner's buffer)
        pass


#: ``OSError`` numbers that, with no file name attached, come from writing standard output.
OUTPUT_ERRNOS = frozenset({errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EBADF})


def _output_failed(cause: OSError, done: str | None = None) -> None:
    """Report a standard output that refused the result (quietly for a reader that went away);
    ``done`` says what the command had done (default: what a command writing a ledger did)."""
    _silence_stdout()
    if cause.errno != errno.EPIPE:
        done = done or ("what the command wrote stays: a change to a ledger is committed (read it back with "
                        "'ledger events' or 'ledger state'), journals and files it wrote are in place; a read writes "
                        "nothing, so run it again")
        click.echo(f"error: {OUTPUT_ERROR}: cannot print the result ({cause.strerror or cause}); {done}", err=True)


def _locale_hint(message: str) -> str:
    """Why an argument holds a lone surrogate: bytes that are not UTF-8 (named), or, when the locale is
    not UTF-8 (``LC_ALL=C`` with ``PYTHONUTF8=0``), any non-ASCII byte: Python keeps each byte it cannot
    decode as a lone surrogate."""
    escaped = _escaped_bytes()
    if ("lone surrogate" not in message and "not valid Unicode" not in message) or not escaped:
        return ""
    encoding = sys.getfilesystemencoding().lower().replace("-", "").replace("_", "")
    if encoding == "utf8":
        shown = ", ".join(f"0x{byte:02x}" for byte in escaped[:4]) + (", …" if len(escaped) > 4 else "")
        return (f" (a command-line argument holds a byte that is not UTF-8: {shown})" if len(escaped) == 1 else
                f" (command-line arguments hold bytes that are not UTF-8: {shown})")
    return (f" (this locale's encoding is {sys.getfilesystemencoding()}, not UTF-8, so a non-ASCII "
            "argument cannot be read: use a UTF-8 locale such as LC_ALL=C.UTF-8, or PYTHONUTF8=1)")


def _escaped_bytes() -> list[int]:
    """The bytes, each once in the order met, that command-line arguments hold and the locale could not
    decode (each kept as a lone surrogate U+DC80-U+DCFF); a lone surrogate read from a file is not the
    arguments' doing. Which argument the refusal is about is not known here, so all are named."""
    found = [ord(char) - 0xDC00 for arg in sys.argv[1:] for char in arg if "\udc80" <= char <= "\udcff"]
    return list(dict.fromkeys(found))


def _flush_stdout() -> None:
    """Flush standard output; an ``OSError`` there is :class:`OutputError` (a reader that went away
    after a command's last write would otherwise go unnoticed, the interpreter ignoring it at exit)."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        raise OutputError(exc) from exc


def _report_warnings(caught: list[warnings.WarningMessage]) -> None:
    """``warning: …`` on stderr for what closing a case could not finish; other warnings as usual."""
    for item in caught:
        if issubclass(item.category, CheckpointWarning):
            warn(f"warning: {item.message}")
        else:
            warnings.showwarning(item.message, item.category, item.filename, item.lineno)


def _show_usage_error(exc: click.UsageError) -> None:
    """Print a usage error as click does, with what it quotes of the arguments (a file name that
    does not exist, an unknown option) on one line and escaped as every message is: a terminal
    escape in a name never reaches the terminal raw. A stderr that refuses it (full, closed) still
    leaves the command's status 2, the status of a usage error (it was 1, from the failed write)."""
    exc.message = one_line(exc.message)
    try:
        exc.show()
    except OSError:
        pass


def refuse_repeated_options(command: click.Command, ctx: click.Context, args: list[str]) -> None:
    """A usage error when an option that takes one value is given more than once: click would keep
    the last and drop the others unsaid (``--evidence A --evidence B`` storing B alone). Options that
    take several (``multiple``) and flags are left to click."""
    if ctx.resilient_parsing or not set(ctx.help_option_names).isdisjoint(args):  # --help prints the help, as ever
        return
    _, _, order = command.make_parser(ctx).parse_args(args=list(args))  # a copy: the parser consumes it
    seen: set[click.Parameter] = set()
    for param in order:
        if isinstance(param, click.Option) and not (param.multiple or param.count or param.is_flag):
            if param in seen:
                given = " or ".join(param.opts + param.secondary_opts)
                raise click.UsageError(f"{given} is given more than once; give it once (a second value would "
                                       "replace the first)", ctx=ctx)
            seen.add(param)


class OnceCommand(click.Command):
    """A command whose single-value options may be given once (:func:`refuse_repeated_options`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        refuse_repeated_options(self, ctx, args)
        return super().parse_args(ctx, args)


class UsageGroup(click.Group):
    """A command group that, called with no arguments, prints its help on stderr and exits 2 (usage)
    on every click version (click 8.1 exits 0 there, 8.2 and later exit 2). Its own options, and
    those of the commands and groups made with its decorators, may be given once each."""

    command_class = OnceCommand
    group_class = type  # a group made with ``@group.group()`` is of this group's class

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            try:
                click.echo(ctx.get_help(), err=True, color=ctx.color)  # where click 8.2+ prints it
            except OSError:  # stderr full or closed: the status still says it was a usage error
                pass
            ctx.exit(2)
        refuse_repeated_options(self, ctx, args)
        return super().parse_args(ctx, args)


#: Said when the machine refused the memory a command needs (a limit such as ``ulimit -v``).
OUT_OF_MEMORY = ("the machine refused the memory this command needs (a memory limit such as 'ulimit -v'?); what it "
                 "committed before stays committed and nothing is half written: run it again with more memory")


class LedgerGroup(UsageGroup):
    """Maps ``LedgerError`` to ``error: CODE: message`` and exit status 1, in one place."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        escape_unencodable_output()
        if sys.stderr is None:  # started with `2>&-`: messages go nowhere, never into the results
            sys.stderr = open(os.devnull, "w", encoding="utf-8")
        if sys.stdout is None:  # started with `>&-`: results would vanish, so nothing is run
            click.echo(f"error: {OUTPUT_ERROR}: standard output is closed; nothing was run", err=True)
            sys.exit(1)
        help_requested = "--help" in args
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
            ctx.meta["ledger.help_requested"] = help_requested
            return ctx
        except UnicodeError as exc:  # a global option path with no file-system name
            click.echo(f"error: INVALID_ARGUMENT: an argument cannot name a file: {exc}", err=True)
            sys.exit(1)
        except click.UsageError as exc:  # a global option or command name mistyped
            _show_usage_error(exc)
            sys.exit(exc.exit_code)
        except OSError as exc:  # --help or --version into a full or closed stdout
            _output_failed(exc, "nothing was run")
            sys.exit(1)
        except KeyboardInterrupt:  # while the arguments are read (click would say "Aborted!")
            interrupts.ending()
            click.echo(INTERRUPTED, err=True)
            sys.exit(interrupts.exit_status())

    def invoke(self, ctx: click.Context) -> Any:
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", CheckpointWarning)
                return self._invoke(ctx)
        finally:  # once the warnings are shown as usual again: shown inside, each would be caught anew
            _report_warnings(caught)

    def _invoke(self, ctx: click.Context) -> Any:
        with interrupts.recorded():
            return self._invoke_recorded(ctx)

    def _invoke_recorded(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            _warn_raised_times(ctx)
            _flush_stdout()  # what is still buffered fails here, as a streamed line would, not at exit
            return result
        except LedgerError as exc:
            if interrupts.pending():  # the refusal of a query Ctrl-C broke off inside a callback
                interrupts.ending()
                click.echo(INTERRUPTED, err=True)
                ctx.exit(interrupts.exit_status())
            _warn_raised_times(ctx)  # a refusal recorded in events (exhaustion, say) was raised too
            click.echo(f"error: {exc.code}: {one_line(exc.message)}{_locale_hint(exc.message)}", err=True)
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:
            if isinstance(exc, click.NoSuchOption) and exc.option_name in {  # `ledger budget reserve … --config F`
                    opt for param in ctx.command.params if not param.is_eager for opt in param.opts}:
                exc.message = (f"{exc.message.rstrip('.')} here: it is a global option, given before the "
                               f"command (ledger {exc.option_name} … COMMAND …).")
            _show_usage_error(exc)
            ctx.exit(exc.exit_code)
        except OutputError as exc:
            _output_failed(exc.cause, exc.done)
            ctx.exit(1)
        except OSError as exc:
            if exc.filename is None and exc.errno in OUTPUT_ERRNOS:  # click writing help or a prompt
                _output_failed(exc, "nothing was run" if ctx.meta.get("ledger.help_requested") else None)
            else:  # a path the file system refuses (too long, under a file, no permission, read-only)
                refusal = os_error(exc, "the file system refused" if exc.errno in STORAGE_ERRNOS
                                   else "the path cannot be used")
                click.echo(f"error: {refusal.code}: {one_line(refusal.message)}", err=True)
            ctx.exit(1)
        except UnicodeError as exc:  # a path argument with no file-system name (a lone surrogate)
            click.echo(f"error: INVALID_ARGUMENT: an argument cannot name a file: {exc}", err=True)
            ctx.exit(1)
        except MemoryError:
            click.echo(f"error: STORAGE_ERROR: {OUT_OF_MEMORY}", err=True)
            ctx.exit(1)
        except ImportError as exc:
            if machine_refusal(exc) != "memory":  # a library's code the system had no memory to load
                raise
            click.echo(f"error: STORAGE_ERROR: {OUT_OF_MEMORY} (a library could not be loaded)", err=True)
            ctx.exit(1)
        except RuntimeError as exc:
            if machine_refusal(exc) == "threads":
                click.echo(f"error: STORAGE_ERROR: {OUT_OF_MEMORY} (no thread could be started)", err=True)
                ctx.exit(1)
            if sys.stdin is not None:
                raise
            # click cannot open '-' when the process was started with stdin closed (`<&-`)
            click.echo("error: INVALID_ARGUMENT: '-' reads standard input, but standard input is closed", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            interrupts.ending()  # a second Ctrl-C while it exits changes nothing
            click.echo(INTERRUPTED, err=True)
            ctx.exit(interrupts.exit_status())


def _warn_raised_times(ctx: click.Context) -> None:
    """Warn of each write the command made at a later time than its ``--at`` (an ``at`` earlier than
    the case's previous event is raised to that event's time), as ``ledger apply`` does per line."""
    settings = ctx.find_object(Settings)
    for case in settings.opened if settings is not None else ():
        if case.last_clamp is not None:
            warn(raised_at_warning(*case.last_clamp))


#: Why ``ledger demo`` refuses ``--config`` and ``--analysis-config`` (a usage error, whatever the files hold).
DEMO_TAKES_NO_CONFIG = "demo always runs the bundled example policy; leave out --config and --analysis-config"


class Settings:
    """Global options, loaded once per command: a named config file must be readable and
    valid for every command, reads included (``CONFIG_INVALID`` otherwise)."""

    def __init__(self, config: str | None, analysis_config: str | None, actor: str) -> None:
        self.actor = actor
        self.configs_given = config is not None or analysis_config is not None
        #: The --analysis-config file given, if any.
        self.analysis_file = analysis_config
        #: The config files the command reads (its outputs may not replace them).
        self.config_files = tuple(path for path in (config, analysis_config) if path is not None)
        self._budget = BudgetConfig.load(config) if config is not None else None
        self._analysis = AnalysisConfig.load(analysis_config) if analysis_config is not None else AnalysisConfig()
        #: The cases :meth:`open` opened (the command's writes are warned of when their ``--at`` was raised).
        self.opened: list[Case] = []

    def budget_config(self) -> BudgetConfig | None:
        return self._budget

    def analysis(self) -> AnalysisConfig:
        return self._analysis

    def open(self, path: str) -> Case:
        case = Case.open(path, analysis_config=self.analysis(), actor=self.actor)
        self.opened.append(case)
        return case


pass_settings = click.make_pass_decorator(Settings)


def link_to_nothing(value: Any) -> str | None:
    """The refusal of an input path that is a symbolic link to nothing (or one of a chain of links
    ending in nothing, or a loop of links), None for any other and for ``-`` (standard input): click
    says such a path does not exist, or cannot be opened, where ``ls`` lists the link."""
    if not isinstance(value, (str, os.PathLike)) or os.fspath(value) in ("-", b"-") or not os.path.islink(value):
        return None
    try:
        os.stat(value)
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{click.format_filename(value)!r} is a loop of symbolic links"
    try:
        target = os.readlink(value)
    except OSError:
        return f"{click.format_filename(value)!r} is a symbolic link to nothing"
    further = ", itself a link to nothing" if os.path.islink(os.path.join(os.path.dirname(value), target)) else \
        ", which does not exist"
    return f"{click.format_filename(value)!r} is a symbolic link to nothing (it points to " \
           f"{click.format_filename(target)!r}{further})"


class LinkAwareFile(click.File):
    """``click.File`` whose refusal of a symbolic link to nothing says so (:func:`link_to_nothing`)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if (dangling := link_to_nothing(value)) is not None:
            self.fail(dangling, param, ctx)
        return super().convert(value, param, ctx)


class RegularFile(LinkAwareFile):
    """``click.File("rb")`` that refuses anything but a regular file or ``-`` (stdin) before opening:
    a FIFO with no writer would block forever, a device could be endless."""

    name = "file"

    def __init__(self) -> None:
        super().__init__("rb")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (str, bytes, os.PathLike)) and os.fsdecode(value) != "-":
            try:
                info = os.stat(value)
            except OSError:
                info = None  # click's own open (or a link to nothing's refusal) reports it
            if info is not None and not stat.S_ISREG(info.st_mode):
                self.fail(f"{click.format_filename(value)!r} is not a regular file (a folder, pipe or device); "
                          "give a file, or '-' for standard input", param, ctx)
        return super().convert(value, param, ctx)


def read_bounded(handle: Any, limit: int, setting: str, what: str, bound: str | None = None) -> bytes:
    """At most ``limit`` bytes of ``handle``; ``LIMIT_REACHED`` naming ``setting`` (the one to raise)
    past that, the bound shown as ``bound`` (default: ``setting``; say so when ``limit`` is a sum of
    settings). Reading stops there: an endless device or pipe is never read whole."""
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise limit_reached(setting, f"{what} is larger than {bound or setting} = {limit} bytes")
    return data


class FiniteFloatRange(click.FloatRange):
    """A ``FloatRange`` that also refuses ``nan`` and ``inf`` (which compare as in range), and digits
    other than ASCII ones (Python reads ``٥`` as 5), as integer options do."""

    name = "float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.isascii():
            self.fail(f"{repr_shown(value, 40)} is not a number (ASCII digits, a decimal point, an exponent)",
                      param, ctx)
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number
def decimal(value: Any) -> bool:
    """True for text :func:`~ledger.ground.arguments.is_decimal` takes, and for a value that is no text."""
    return not isinstance(value, str) or is_decimal(value)


#: The most digits an integer option is read with: Python reads no more (``sys.get_int_max_str_digits``),
#: and a refusal shows no value that long (the ledger's own integers stop at 16 digits).
_DIGITS_MAX = 4300


def _check_integer_text(kind: click.ParamType, value: Any, param: click.Parameter | None,
                        ctx: click.Context | None) -> None:
    """A usage error unless ``value`` is :func:`decimal` text of at most :data:`_DIGITS_MAX` digits; the
    value quoted at most 40 characters long."""
    if not decimal(value):
        kind.fail(f"{repr_shown(value, 40)} is not an integer (ASCII digits, an optional leading -, spaces around "
                  "them aside)", param, ctx)
    if isinstance(value, str) and len(digits := value.strip().lstrip("-")) > _DIGITS_MAX:
        kind.fail(f"{value.strip()[:20]}… is an integer of {len(digits)} digits, past any the ledger holds",
                  param, ctx)


def _long_number_shortened(error: click.BadParameter, value: Any) -> click.BadParameter:
    """``error`` (click's, quoting the number it read) with a number of more than 40 digits shortened."""
    digits = value.strip().lstrip("-") if isinstance(value, str) else ""
    if len(digits) > 40:
        number = str(int(value))
        error.message = error.message.replace(number, f"{number[:20]}… ({len(digits)} digits)")
    return error


class Integer(click.ParamType):
    """``click.INT`` taking only :func:`decimal` text."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        _check_integer_text(self, value, param, ctx)
        return click.INT.convert(value, param, ctx)


class IntegerRange(click.IntRange):
    """``click.IntRange`` taking only :func:`decimal` text."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        _check_integer_text(self, value, param, ctx)
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as error:  # out of the range: the number is quoted
            raise _long_number_shortened(error, value) from None


class LinkAwarePath(click.Path):
    """``click.Path`` whose refusal of a symbolic link to nothing says so (:func:`link_to_nothing`)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if self.exists and (dangling := link_to_nothing(value)) is not None:
            self.fail(dangling, param, ctx)
        return super().convert(value, param, ctx)


class CaseFolder(LinkAwarePath):
    """A folder (``click.Path(file_okay=False)``) whose refusal of a file says what to give instead:
    by default a case folder, not the ``ledger.sqlite`` or ``manifest.json`` inside it; ``give``
    names another kind of folder (a fleet export's)."""

    def __init__(self, give: str = f"the case folder (the one holding {LEDGER_FILE})", **kwargs: Any) -> None:
        super().__init__(file_okay=False, path_type=str, **kwargs)
        self.give = give

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and os.path.isfile(value):
            parent = os.path.dirname(os.path.abspath(value))
            inside = (f"; the case folder holding it is {parent}"
                      if os.path.basename(value) in (LEDGER_FILE, "manifest.json") else "")
            self.fail(f"{value!r} is a file: give {self.give}{inside}", param, ctx)
        return super().convert(value, param, ctx)


def input_path(*, dir_okay: bool = True) -> click.Path:
    """A file (or, with ``dir_okay``, a folder) the command reads — a journal, trajectories, an outcomes
    CSV: one that is missing or unreadable is a usage error (exit 2) before anything runs, as for
    ``apply``'s JOURNAL and every other input file (docs/cli.md). TOML configurations are not given
    this way: the library's loaders refuse them with ``CONFIG_INVALID``."""
    return LinkAwarePath(exists=True, dir_okay=dir_okay, readable=True, path_type=str)


CASE = click.argument("case", type=CaseFolder())
AT = click.option("--at", metavar="RFC3339", help="Event time (UTC, e.g. 2026-01-05T10:00:00Z); default now. "
                  "A time before the case's newest event is recorded as that event's, with a warning.")
JSON = click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")


_FORMAT_HELP = {
    "table": "Print a table for people (the default).",
    "json": "Print one JSON array of rows.",
    "nl": "Print newline-delimited JSON: one object per row.",
    "csv": "Print CSV with a header row (values verbatim: import into a spreadsheet as text).",
    "tsv": "Print tab-separated values with a header row (values verbatim, quoted as in CSV when they hold a "
           "tab, a quote or a line break).",
}


def table_format(**flags: bool) -> str:
    """The one format chosen among ``--table --json --nl --csv --tsv`` (usage error for several)."""
    chosen = [name for name in FORMATS if flags.get(f"as_{name}")]
    if len(chosen) > 1:
        raise click.UsageError("choose one of " + ", ".join(f"--{name}" for name in chosen))
    return chosen[0] if chosen else "table"


def table_options(func: Callable[..., Any] | None = None, **helps: str) -> Any:
    """The output format options of a tabular command; the command receives ``fmt``. Used bare, or
    called with a help text per format that reads otherwise (``json="Print one JSON object…"``)."""
    if func is None:
        return lambda decorated: table_options(decorated, **helps)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        flags = {f"as_{name}": kwargs.pop(f"as_{name}") for name in FORMATS}
        return func(*args, fmt=table_format(**flags), **kwargs)
    for name in reversed(FORMATS):
        wrapper = click.option(f"--{name}", f"as_{name}", is_flag=True,
                               help=helps.get(name, _FORMAT_HELP[name]))(wrapper)
    return wrapper


def progress_bar(total: int, label: str) -> Any:
    """A click progress bar on stderr when it is a terminal that draws one (not ``TERM=dumb``); else
    a no-op. Never on stdout: a result, ``--json`` above all, stays alone there."""
    stream = sys.stderr
    if stream is not None and stream.isatty() and os.environ.get("TERM") != "dumb":
        return click.progressbar(length=total, label=label, file=stream)
    return _NoBar()


class _NoBar:
    def __enter__(self) -> "_NoBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def update(self, n: int) -> None:
        return None


def import_sqlite_utils_alone() -> None:
    """Import sqlite-utils without pandas and numpy: its import also imports them whenever they are
    installed (half a second, four times a command's own start-up, and over 100 MB of memory with
    pyarrow) for a type mapping only its writes use. A command never writes with it, so it is
    imported with those two hidden; they stay importable afterwards."""
    if "sqlite_utils" not in sys.modules:
        hidden = [name for name in ("pandas", "numpy") if name not in sys.modules]
        for name in hidden:
            sys.modules[name] = None  # type: ignore[assignment]  # import of it raises ImportError
        try:
            import sqlite_utils  # noqa: F401
        except ImportError:  # not installed: its user says so
            pass
        finally:
            for name in hidden:
                del sys.modules[name]


@context_manager
def read_only_rows(case: str, sql: str, timeout_ms: int = 30_000) -> Iterator[tuple[list[str], Iterator[tuple]]]:
    """The library's ``read_only_rows`` for a command: every read-only query a command runs
    (``ledger sql``, the length of verify's progress bar) goes through sqlite-utils
    (:func:`import_sqlite_utils_alone`)."""
    import_sqlite_utils_alone()
    with ledger_read_only_rows(case, sql, timeout_ms=timeout_ms) as found:
        yield found
