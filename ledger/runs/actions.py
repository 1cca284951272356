"""What a coding agent's shell command does: its action name and target (docs/runs.md).

``ledger runs import`` names each step's action after the programs its command
runs. The command is split into words (shell quoting respected) and into
simple commands at ``|``, ``&&``, ``||``, ``;`` and line ends. When every
program is one of a rule's ``programs`` or a neutral filter (``head``, ``sort``,
``wc``, …), nothing is written (no ``>`` redirection, no here-document, no
``sed -i``), the action is the first rule, in order, one of the programs
matches. Anything else (and ``find`` with ``-delete`` or ``-exec``) is the ``default`` action. The mapping is data: a TOML
file (``--actions FILE``) replaces it.

The target is the one file or folder the command reads or searches: the path
arguments of its reading and searching programs (for ``grep`` and ``sed`` the
first plain argument is the pattern or script, not a path; ``.`` is no target).
When the command names exactly one distinct path, that is the target. A word after ``--`` is a path
even when it starts with ``-``; a word holding a variable (``$FILE``) or a glob (``*.py``, ``test_?``,
``[ab]``) names no known path; a word that
runs a command of its own (`` `ls` ``, ``$(ls)``) makes the step the ``default`` action, as a subshell does,
and so does a command that writes a file or runs another program (:func:`_writes`, ``xargs PROGRAM``).
``cd DIR`` is no program of the rules: it makes the relative paths after it name paths under ``DIR``
(``cd /testbed && cat f.py`` reads ``/testbed/f.py``), :func:`~.shell_paths.in_folders`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..ground.config import load_toml_config, unknown_key
from ..ground.errors import CONFIG_INVALID, LedgerError
from .shell_paths import UNKNOWN_PATH, in_folders, named_in
from .shell_words import split_words

#: The mapping used without ``--actions`` (the bundled journals' three actions).
DEFAULT_ACTIONS: dict[str, Any] = {
    "default": "test.automated",
    "rules": [
        {"action": "source.find_text",
         "programs": ["grep", "egrep", "fgrep", "rg", "ag", "ack", "find", "ls", "tree", "locate",
                      "find_file", "search_dir", "search_file"]},
        {"action": "source.read_context",
         "programs": ["cat", "nl", "sed", "head", "tail", "less", "more", "bat", "open", "goto",
                      "scroll_up", "scroll_down", "str_replace_editor view"]},
    ],
    "neutral": ["head", "tail", "sort", "uniq", "wc", "cut", "tr", "column", "xargs", "awk", "true", "echo", "printf",
                "pwd", "which"],
}

_ACTION_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
_SEPARATORS = frozenset({"|", "||", "&&", ";", "&", "\n", "|&"})
#: Options whose value is the next word, per program (``-n 20``, ``-A 3``, ``-name x``).
_VALUE_OPTIONS = {
    "grep": set("ABCmef"), "egrep": set("ABCmef"), "fgrep": set("ABCmef"), "rg": set("ABCmefgtT"),
    "head": set("nc"), "tail": set("nc"), "nl": set("bdfhilnpsvw"), "sed": set("efl"),
    "ls": set("ITw"), "tree": set("LIP"), "ag": set("ABCGgm"),
}
#: Long options whose value may be the next word (``--include '*.py'``), of the programs that take them.
_GREP_LONG_VALUES = frozenset({"--include", "--exclude", "--exclude-dir", "--exclude-from", "--max-count",
                               "--after-context", "--before-context", "--context", "--label"})
_LONG_VALUE_OPTIONS = {
    "grep": _GREP_LONG_VALUES, "egrep": _GREP_LONG_VALUES, "fgrep": _GREP_LONG_VALUES,
    "rg": frozenset({"--glob", "--iglob", "--type", "--type-not", "--type-add", "--max-count", "--context",
                     "--after-context", "--before-context", "--max-depth", "--max-filesize", "--pre", "--pre-glob",
                     "--encoding", "--replace", "--sort", "--sortr", "--threads", "--max-columns", "--engine",
                     "--color", "--colors", "--path-separator"}),
    "ag": frozenset({"--ignore", "--ignore-dir", "--depth", "--file-search-regex", "--context", "--after",
                     "--before", "--max-count"}),
}
#: Programs whose first plain argument is a pattern or script, not a path (unless given by ``-e``/``-f``).
_PATTERN_FIRST = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "ack", "sed", "search_dir", "find_file",
                            "search_file"})
#: SWE-agent's tools: run by their bare names only (``/usr/bin/open`` is the system's, not SWE-agent's).
_SWE_AGENT_TOOLS = frozenset({"open", "goto", "scroll_up", "scroll_down", "find_file", "search_dir", "search_file",
                              "str_replace_editor"})
#: Programs whose arguments are line numbers or nothing, never paths.
_NO_PATHS = frozenset({"goto", "scroll_up", "scroll_down"})
#: Long options of those programs giving the pattern or script (``--regexp=PATTERN``, ``--expression SCRIPT``).
_PATTERN_OPTIONS = frozenset({"--regexp", "--expression", "--file"})
#: Programs whose first plain argument is their one path, the rest line numbers (SWE-agent's ``open
#: FILE LINE``, ``str_replace_editor view FILE --view_range 1 40``).
_PATH_FIRST = frozenset({"open", "str_replace_editor view"})


@dataclass(frozen=True)
class ActionMap:
    """The command → action mapping: ``rules`` (action, programs) in order, ``neutral`` filters, ``default``."""

    rules: tuple[tuple[str, frozenset[str]], ...]
    neutral: frozenset[str]
    default: str

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "ActionMap":
        """Refuses (``CONFIG_INVALID`` naming the key) anything but ``default``, ``rules`` and ``neutral``."""
        unknown = sorted(set(data) - {"default", "rules", "neutral"})
        if unknown:
            raise unknown_key("", unknown[0], {"default", "rules", "neutral"})
        default = data.get("default", DEFAULT_ACTIONS["default"])
        _check_action(default, "default")
        rules = []
        given = data.get("rules", DEFAULT_ACTIONS["rules"])
        if not isinstance(given, list):
            raise LedgerError(CONFIG_INVALID, "rules: must be a list of rules ([[rules]] tables with action "
                              f"and programs), got {type(given).__name__}", key="rules")
        for number, rule in enumerate(given, start=1):
            key = f"rules[{number}]"
            extra = sorted(set(rule) - {"action", "programs"}) if isinstance(rule, Mapping) else []
            if extra:
                raise unknown_key(f"{key}.", extra[0], {"action", "programs"})
            if not isinstance(rule, Mapping) or set(rule) != {"action", "programs"}:
                raise LedgerError(CONFIG_INVALID, f"{key}: needs exactly the keys action and programs", key=key)
            _check_action(rule["action"], f"{key}.action")
            programs = _names(rule["programs"], f"{key}.programs")
            if not programs:
                raise LedgerError(CONFIG_INVALID, f"{key}.programs: empty, so the rule would never match a "
                                  "command; name its programs, or remove the rule", key=f"{key}.programs")
            _refuse_earlier_rules(rule["programs"], rules, key)
            rules.append((rule["action"], programs))
        return cls(tuple(rules), _names(data.get("neutral", DEFAULT_ACTIONS["neutral"]), "neutral"), default)

    @classmethod
    def load(cls, path: str | Path) -> "ActionMap":
        """Read and validate an actions TOML file (raises ``CONFIG_INVALID`` naming the file)."""
        return load_toml_config(path, cls.from_mapping)


def _check_action(value: Any, key: str) -> None:
    if not isinstance(value, str) or len(value) > 128 or not _ACTION_RE.fullmatch(value):
        raise LedgerError(CONFIG_INVALID, f"{key}: an action name looks like 'source.read_context', got {value!r}",
                          key=key)


#: What the shell splits words at (its IFS): a name's other characters, a no-break space among
#: them, stay in its word.
_SHELL_BLANKS = " \t\n"


def _names(value: Any, key: str) -> frozenset[str]:
    """The program names of a list: each given once, a program's name or a program and its subcommand
    with one space between them (``str_replace_editor view``), nothing else (``" ls"``, ``"git  log"``
    or ``"a b c"`` is never what a command runs, as the shell splits it); else ``CONFIG_INVALID``
    naming the key."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise LedgerError(CONFIG_INVALID, f"{key}: must be a list of program names", key=key)
    for number, name in enumerate(value, start=1):
        if name != name.strip(_SHELL_BLANKS):
            raise LedgerError(CONFIG_INVALID, f"{key}[{number}]: {name!r} has blanks at its ends, so it would "
                              "never match a command's program; remove them", key=key)
        words = name.split(" ")
        if any(not word or set(_SHELL_BLANKS) & set(word) for word in words) or len(words) > 2:
            raise LedgerError(CONFIG_INVALID, f"{key}[{number}]: {name!r} is neither a program's name nor a program "
                              "and its subcommand with one space between them (str_replace_editor view), so it "
                              "would never match a command's program", key=key)
        if name in value[:number - 1]:
            raise LedgerError(CONFIG_INVALID, f"{key}[{number}]: {name!r} is given twice in the list", key=key)
    return frozenset(value)


def _refuse_earlier_rules(programs: list[str], rules: list[tuple[str, frozenset[str]]], key: str) -> None:
    """``CONFIG_INVALID`` for a program an earlier rule names already: the first rule naming a
    command's program gives its action, so this one would never apply to it."""
    for number, name in enumerate(programs, start=1):
        for earlier, (action, members) in enumerate(rules, start=1):
            if name in members:
                raise LedgerError(CONFIG_INVALID, f"{key}.programs[{number}]: {name!r} is a program of "
                                  f"rules[{earlier}] ({action}) already, which comes first, so this rule would never "
                                  "apply to it",
                                  key=f"{key}.programs")


DEFAULT_ACTION_MAP = ActionMap.from_mapping(DEFAULT_ACTIONS)


def _simple_commands(words: list[str]) -> list[tuple[list[str], str]]:
    """The simple commands of ``words``, each with the operator that ends it (``""`` for the last)."""
    out: list[tuple[list[str], str]] = [([], "")]
    for word in words:
        if word in _SEPARATORS:
            out[-1] = (out[-1][0], word)
            out.append(([], ""))
        else:
            out[-1][0].append(word)
    return [(command, end) for command, end in out if command]


def _paths(program: str, args: list[str]) -> list[str]:
    """The path arguments of one reading or searching command."""
    values = _VALUE_OPTIONS.get(program, set())
    plain: list[str] = []
    pattern_given = False
    skip = False
    for number, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "--":  # the end of the options: every word after it is a plain argument
            plain += args[number + 1:]
            break
        if program == "find" and arg.startswith("-"):
            break  # find PATH… then its expression
        if arg.startswith("-") and len(arg) > 1 and not arg.startswith("--"):
            taking = next((letter for letter in arg[1:] if letter in values), arg[1])  # the rest is its value
            if taking in ("e", "f") and program in _PATTERN_FIRST:  # -e PATTERN, -ne SCRIPT, -eSCRIPT
                pattern_given = True
            skip = arg[-1] in values
            continue
        if arg.startswith("--"):
            name = arg.partition("=")[0]
            if name in _PATTERN_OPTIONS and program in _PATTERN_FIRST:  # --expression=SCRIPT, --regexp PATTERN
                pattern_given, skip = True, "=" not in arg
            elif name in _LONG_VALUE_OPTIONS.get(program, ()):  # --include '*.py': its value, no path
                skip = "=" not in arg
            continue
        plain.append(arg)
    if program in _PATTERN_FIRST and not pattern_given:
        plain = plain[1:]
    if program in _NO_PATHS:
        return []
    if program in _PATH_FIRST:  # its one path, wherever it stands among the line numbers
        plain = [arg for arg in plain if not arg.isdigit()][:1]
    # $NAME: not known here; a glob (*, ?, [) names the files it matches, which the command's text does not show
    return [(p.rstrip("/") or "/") if p else p for p in plain if not UNKNOWN_PATH.search(p)]


def _with_subcommand(words: list[str], known: set[str]) -> list[str]:
    """A simple command whose program and first argument a rule names together (``str_replace_editor
    view``, whose ``str_replace`` edits) as one program word, then the other arguments."""
    compound = f"{words[0]} {words[1]}" if len(words) > 1 else ""
    return [compound, *words[2:]] if compound in known else words


#: Characters a shell operator is made of (``shlex`` splits them from the words).
_OPERATOR = frozenset("|&;<>()")
#: Options of ``xargs`` whose value is the next word.
_XARGS_VALUES = frozenset({"-I", "-n", "-d", "-P", "-L", "-s", "-a", "-E"})
#: ``find`` actions that delete, run a program or write a file.
_FIND_WRITES = frozenset({"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls"})


def _redirects_or_runs(words: list[str]) -> bool:
    """Whether the words redirect to or from a file (``>``, ``>>``, ``&>``, ``<``: a descriptor's
    copy, ``2>&1``, is none), open a subshell or run a command inside a word (`` `ls` ``, ``$(ls)``)."""
    for index, word in enumerate(words):
        if "`" in word or "$(" in word or (set(word) <= _OPERATOR and ("(" in word or ")" in word)):
            return True  # a subshell, also with its bracket joined to an operator (";(", ")|")
        if "{" in word and _brace_option(word):
            return True
        if set(word) <= _OPERATOR and ("<" in word or ">" in word):
            following = words[index + 1] if index + 1 < len(words) else ""
            if word in (">&", "<&") and (following.isdigit() or following == "-"):
                continue
            if word in _NULL_REDIRECTIONS and following == "/dev/null":
                continue  # writes nothing, reads nothing
            return True
    return False


#: Redirections that, to or from ``/dev/null``, neither write nor read a file (``2>/dev/null``).
_NULL_REDIRECTIONS = frozenset({">", ">>", ">|", "&>", "&>>", "<"})


def _brace_option(word: str) -> bool:
    """Whether the shell's brace expansion of ``word`` may give an option (``--{in-place,posix}``,
    ``{-i,-n}``): a brace list or sequence in the option's name, or one whose items start with ``-``
    (``--include=*.{py,txt}`` gives no new option)."""
    for group in re.finditer(r"\{([^{}]*)\}", word):
        items = group[1].split(",") if "," in group[1] else group[1].split("..")
        named = word.startswith("-") and ("=" not in word or group.start() < word.index("="))
        if len(items) > 1 and (named or any(item.startswith("-") for item in items)):
            return True
    return False


def _without_descriptor_copies(words: list[str]) -> list[str]:
    """The words without a descriptor's copy or close (``2>&1``, ``>&2``, ``2>&-``) and without a
    redirection to or from ``/dev/null`` (``2>/dev/null``, ``&>/dev/null``), which name no file."""
    out: list[str] = []
    skip = False
    for index, word in enumerate(words):
        if skip:
            skip = False
            continue
        if word in (">&", "<&") or (word in _NULL_REDIRECTIONS and words[index + 1:index + 2] == ["/dev/null"]):
            skip = True  # its descriptor's number, if it had one, is not among the words (shell_words)
            continue
        out.append(word)
    return out


def _run_by_xargs(words: list[str]) -> list[str]:
    """For ``xargs [options] PROGRAM ARGS``, the program it runs and its arguments (a new list: its
    paths come from the pipe); any other simple command as it is."""
    while _program_name(words[0]) == "xargs":  # /usr/bin/xargs too, and an xargs that xargs runs
        index = 1
        while index < len(words) and words[index].startswith("-"):
            index += 2 if words[index] in _XARGS_VALUES else 1
        if index >= len(words):
            return words
        words = words[index:]
    return words


#: Folders whose programs are the system's own: ``/usr/bin/cat`` is ``cat``, ``/tmp/x/cat`` is not.
_SYSTEM_BIN = frozenset({"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin"})


def _program_name(word: str) -> str:
    """The program a command's first word runs: its name, also when given by its path in one of the
    system's folders; any other path as it is (a program of that name elsewhere may do anything)."""
    folder, _, name = word.rpartition("/")
    return name if word.startswith("/") and folder in _SYSTEM_BIN and name not in _SWE_AGENT_TOOLS else word


def _long(arg: str, name: str) -> bool:
    """Whether ``arg`` gives the long option ``name``, whole or cut short as getopt takes it
    (``--expr`` for ``--expression``), with or without ``=VALUE``."""
    stem = arg.split("=", 1)[0]
    return len(stem) > 2 and stem.startswith("--") and name.startswith(stem)


def _short_letters(args: list[str], values: str) -> list[str]:
    """The one-letter options of ``args`` as getopt reads them: each ``-abc`` word's letters up to
    one in ``values``, which takes the rest of the word, or the next word, as its value."""
    letters, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            for at, letter in enumerate(arg[1:], start=2):
                letters.append(letter)
                if letter in values:
                    skip = at == len(arg)
                    break
    return letters


def _writes(program: str, args: list[str]) -> bool:
    """Whether a command that reads or filters writes a file or runs a program after all: ``sed -i``
    (alone or among other one-letter options, ``--in-place``), ``find`` with an action that does,
    ``awk`` beyond reading (:func:`_awk_writes_or_runs`), ``sort -o`` or ``--compress-program``,
    ``uniq IN OUT``, ``tree -o FILE`` or ``-R``, ``less`` keeping a log (``-o``, ``-O``, ``--log-file``),
    a pager or helper program (``rg --pre``, ``--hostname-bin``, ``ag``/``ack``/``bat --pager``),
    ``bat`` writing its cache or configuration. Long options count cut short, one-letter ones in a
    cluster, as getopt reads them (docs/runs.md)."""
    if program == "sed":  # a script file (-f FILE) is not read: it may write
        return any(_long(a, "--in-place") or _long(a, "--file") or (a.startswith("-") and not a.startswith("--")
                                                                     and "i" in a[1:]) for a in args) or (
            "f" in _short_letters(args, "efl") or _sed_script_writes_or_runs(_sed_script(args)))
    if program == "find":
        return any(a in _FIND_WRITES for a in args)
    if program == "awk":
        return _awk_writes_or_runs(args)
    if program == "sort":
        return "o" in _short_letters(args, "ktSTo") or any(_long(a, "--output") or _long(a, "--compress-program")
                                                              for a in args)
    if program == "uniq":  # uniq IN OUT (after --, a word starting with - is a file too)
        ended = args.index("--") if "--" in args else len(args)
        return len([a for a in args[:ended] if not a.startswith("-") or a == "-"] + args[ended + 1:]) > 1
    if program == "tree":  # -o FILE, and -R with -H writes a page per folder; tree takes a cluster's values
        return any(a.startswith("-") and not a.startswith("--") and ("o" in a or "R" in a)  # from the next words
                   for a in args[:args.index("--") if "--" in args else len(args)])
    if program == "less":  # a log file; a lesskey file, which may set LESSOPEN to a command
        return bool({"o", "O", "k"} & set(_short_letters(args, "bhjkoOpPtTxyz#"))) or any(
            _long(a, name) for a in args for name in ("--log-file", "--LOG-FILE", "--lesskey-file", "--lesskey-src",
                                                      "--lesskey-content"))
    if program in _PAGER_OPTIONS:
        return any(_long(a, option) for a in args for option in _PAGER_OPTIONS[program]) or (
            program == "bat" and args[:1] == ["cache"])
    return False


#: Long options that run a program of the user's choosing (a pager, a preprocessor) or write a file.
_PAGER_OPTIONS = {"rg": ("--pre", "--hostname-bin"), "ag": ("--pager",), "ack": ("--pager",),
                  "bat": ("--pager", "--generate-config-file")}
#: awk's options that only read: a field separator, a variable, program text (each takes a value: the
#: rest of the word, or the next word).
_AWK_READING = frozenset({"-F", "-v", "--field-separator", "--assign", "-e", "--source"})


def _awk_writes_or_runs(args: list[str]) -> bool:
    """Whether an ``awk`` command may write a file or run a program: an option other than a field
    separator, a variable or program text (``-i inplace``, ``-d``, ``-o``, ``-f FILE`` whose program
    is not read, …), or a program text that calls ``system``, prints into a file or a pipe, reads a
    command (``getline``), includes or loads more (``@include``, ``@load``) or calls a function by
    its name in a variable (``@f()``, which may be ``system``)."""
    index, texts = 0, []
    while index < len(args):
        arg = args[index]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            texts += args[index + (arg == "--"):index + 1 + (arg == "--")]
            break
        name = arg[:2] if not arg.startswith("--") else arg.split("=", 1)[0]
        if name not in _AWK_READING:
            return True
        value = arg[2:] if not arg.startswith("--") else arg.partition("=")[2]
        if not value and "=" not in arg:
            value, index = (args[index + 1] if index + 1 < len(args) else ""), index + 1
        if name in ("-e", "--source"):
            texts.append(value)
        index += 1
    return any(any(mark in text for mark in ("system", ">", "|", "getline", "@")) for text in texts)  # @f(): any


def _sed_script(args: list[str]) -> str:
    """The script of a ``sed`` command's arguments, as sed puts it together: its ``-e SCRIPT`` parts
    (``-eSCRIPT``, ``-ne SCRIPT``, ``--expression=SCRIPT``) joined by line ends, else its first plain
    argument; none when a script file gives it (``-f FILE``, ``--file=FILE``, which is not read)."""
    scripts, plain, index, from_file = [], [], 0, False
    while index < len(args):
        word, following = args[index], args[index + 1] if index + 1 < len(args) else ""
        if word == "--":
            plain += args[index + 1:]
            break
        if _long(word, "--expression") or _long(word, "--file") or _long(word, "--line-length"):
            if _long(word, "--expression"):
                scripts.append(word.partition("=")[2] if "=" in word else following)
            from_file = from_file or _long(word, "--file")
            index += "=" not in word
        elif word.startswith("-") and not word.startswith("--") and len(word) > 1:
            letters = word[1:]
            at = min((letters.index(ch) for ch in "efl" if ch in letters), default=None)
            if at is not None:  # the rest of the cluster is the value, else the next word
                value = letters[at + 1:] or following
                index += not letters[at + 1:]
                if letters[at] == "e":
                    scripts.append(value)
                elif letters[at] == "f":
                    from_file = True
        elif not word.startswith("-") or word == "-":
            plain.append(word)
        index += 1
    if scripts or from_file:
        return "\n".join(scripts)
    return plain[0] if plain else ""


#: sed commands whose argument runs to the end of the line: text to add (a line ending in a
#: backslash goes on to the next), a file to read, a comment.
_SED_TO_LINE_END = frozenset("aicrR#")
#: sed commands naming a label, which ends at the end of the line or at a ``;``.
_SED_LABELS = frozenset("btT:")


def _sed_delimited(script: str, start: int, delimiter: str, regex: bool = True) -> int:
    """The index just past the ``delimiter`` that ends the part of ``script`` from ``start``: a
    backslash escapes the character after it, and in a regular expression (``regex``; not in a
    replacement or a ``y`` part, where ``[`` is text) a bracket expression (``[/]``) holds it as text."""
    index = start
    while index < len(script) and script[index] != delimiter:
        if script[index] == "\\":
            index += 2
        elif script[index] == "[" and regex:
            index = _sed_bracket_end(script, index)
        else:
            index += 1
    return index + 1


def _sed_bracket_end(script: str, start: int) -> int:
    """The index past the bracket expression opening at ``start``: a ``]`` first in it (after a
    ``^``) is one of its characters, and so is the one closing a class inside (``[[:alpha:]/]``)."""
    index = start + 1 + (script[start + 1:start + 2] == "^")
    index += script[index:index + 1] == "]"
    while index < len(script):
        if script[index] == "[" and script[index + 1:index + 2] in (":", "=", "."):
            end = script.find(script[index + 1] + "]", index + 2)
            index = end + 2 if end >= 0 else len(script)
        elif script[index] == "]":
            return index + 1
        else:
            index += 1
    return len(script)


def _sed_line_end(script: str, index: int) -> int:
    """The index past the line holding ``index`` and the lines its ending backslashes carry on to."""
    while True:
        newline = script.find("\n", index)
        if newline < 0:
            return len(script)
        if not script[:newline].endswith("\\"):
            return newline + 1
        index = newline + 1


def _sed_script_writes_or_runs(script: str) -> bool:
    """Whether a sed script writes a file or runs a command: a ``w``, ``W`` or ``e`` command (after
    any address), or an ``s`` command with the ``w`` or ``e`` flag (``s/a/b/w out``, ``s/x/date/e``)."""
    index = 0
    while index < len(script):
        char = script[index]
        if char in "wWe":
            return True
        if char == "/":  # an address /re/
            index = _sed_delimited(script, index + 1, "/")
        elif char == "\\" and index + 1 < len(script):  # an address \\cREc
            index = _sed_delimited(script, index + 2, script[index + 1])
        elif char in "sy" and index + 1 < len(script):  # s/RE/TEXT/, y/TEXT/TEXT/
            middle = _sed_delimited(script, index + 2, script[index + 1], regex=char == "s")
            end = _sed_delimited(script, middle, script[index + 1], regex=False)
            flags = re.match(r"[0-9gpiImMe]*w?", script[end:]).group() if char == "s" else ""
            if "e" in flags or "w" in flags:
                return True
            index = end + len(flags)
        elif char in _SED_TO_LINE_END:
            index = _sed_line_end(script, index)
        elif char in _SED_LABELS:
            ends = [at for at in (script.find("\n", index), script.find(";", index)) if at >= 0]
            index = min(ends) + 1 if ends else len(script)
        else:  # an address's digits and signs, a separator, a command of one letter
            index += 1
    return False


def classify(command: str, mapping: ActionMap = DEFAULT_ACTION_MAP) -> tuple[str, str | None]:
    """``(action, target)`` of a shell ``command`` (see the module docstring)."""
    words = split_words(command)
    if not words or _redirects_or_runs(words):
        return mapping.default, None  # writes a file, reads a here-document, opens a subshell or runs one in a word
    known = set().union(*(m for _, m in mapping.rules)) | mapping.neutral
    placed = in_folders(_simple_commands(_without_descriptor_copies(words)))
    simple, folders = [command for command, _ in placed], [folder for _, folder in placed]
    run = [_run_by_xargs(c) for c in simple]
    piped = [ran is not given for ran, given in zip(run, simple)]  # what xargs runs: its paths come from the pipe
    commands = [_with_subcommand(c, known) for c in run]
    programs = [_program_name(c[0]) for c in commands]
    if any(_writes(p, c[1:]) for p, c in zip(programs, commands)):
        return mapping.default, None
    action = None
    for name, members in mapping.rules:
        if any(p in members for p in programs):
            action = name
            break
    if action is None or not all(p in known for p in programs):
        return mapping.default, None
    targets: list[str] = []
    for index, (program, words_, folder) in enumerate(zip(programs, commands, folders)):
        if piped[index] or (program == "xargs" and len(words_) > 1):
            continue  # the paths come from the pipe
        if any(program in m for _, m in mapping.rules) and not (index and program in mapping.neutral):
            for path in _paths(program, words_[1:]):
                named = named_in(folder, path)
                if named is not None and named not in targets:  # cat f.py f.py names one path
                    targets.append(named)
    return action, targets[0] if len(targets) == 1 else None
