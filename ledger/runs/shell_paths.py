"""The paths a shell command names (docs/runs.md "Action names"): the folder each of its simple
commands runs in once ``cd`` has moved the shell, and each path tidied as written.

Every command is taken to succeed, as the shell runs them then. Nothing here looks at the file
system: a path is what the command's text shows.
"""

from __future__ import annotations

import posixpath
import re

#: What makes a word name no one known path: a variable, a glob's pattern characters, or a brace list
#: or sequence (``{a,b}.py``, ``f{1..3}``), which the shell makes into several words.
UNKNOWN_PATH = re.compile(r"[$*?\[]|\{[^{}]*(?:,|\.\.)[^{}]*\}")
#: The folder after a ``cd`` whose folder the command's text does not show (``cd $DIR``, ``cd -``,
#: ``cd`` alone, ``cd -P DIR``): a relative path after it names no known path.
_UNKNOWN_FOLDER = "$"


def in_folders(commands: list[tuple[list[str], str]]) -> list[tuple[list[str], str | None]]:
    """The simple commands other than the shell's ``cd``, each with the folder the ``cd`` commands
    before it moved to: ``None`` while there was none (the agent's own folder), else the folder's path
    as the command names it, relative paths joined (``cd src && cd lib`` → ``src/lib``), or
    :data:`_UNKNOWN_FOLDER`. Every command is taken to succeed, as the shell runs them then: a ``cd`` in
    a pipeline or in a list run in the background (``cd a | cat f``, ``cd a && x & cat f``) runs in a
    subshell and moves nothing; what follows ``||`` runs only where the command before it failed, so a
    ``cd`` there moves nothing, and the pipeline right after ``cd a ||`` runs in the folder before it."""
    folder: str | None = None
    out: list[tuple[list[str], str | None]] = []
    before, in_branch, branch = "", False, None  # the pipeline after a failed cd's ||, and its folder
    for index, (words, end) in enumerate(commands):
        if words[0] != "cd":  # /usr/bin/cd is a program of its own: it moves no shell
            out.append((words, branch if in_branch else folder))
        elif before != "||" and before not in _PIPES and end not in _PIPES and not _in_background(commands, index):
            in_branch, branch = end == "||", folder
            args = words[2:] if words[1:2] == ["--"] else words[1:]
            if len(args) != 1 or args[0].startswith("-") or UNKNOWN_PATH.search(args[0]):
                folder = _UNKNOWN_FOLDER
            elif folder != _UNKNOWN_FOLDER or _anchored(args[0]):
                folder = named_in(folder, args[0])
        if end not in _PIPES and not (words[0] == "cd" and end == "||"):
            in_branch = False
        before = end
    return out


def _in_background(commands: list[tuple[list[str], str]], index: int) -> bool:
    """Whether the list the command at ``index`` belongs to (up to the next ``;``, ``&`` or line end)
    is run in the background (ends with ``&``), in a subshell."""
    return next((end for _, end in commands[index:] if end in (";", "&", "\n", "")), "") == "&"


#: The operators that make a pipeline, whose commands run in subshells.
_PIPES = frozenset({"|", "|&"})


def _anchored(path: str) -> bool:
    """Whether ``path`` names the same file whatever the current folder: from the root or a home."""
    return path.startswith(("/", "~"))


def _tidy(path: str) -> str:
    """``path`` tidied as written: ``./``, doubled ``/`` (a leading ``//`` too), a trailing ``/`` and
    ``dir/..`` taken off; a home (``~``, ``~user``) kept as it is, nothing taken off above it."""
    if path.startswith("~"):
        home, _, rest = path.partition("/")
        rest = posixpath.normpath(rest) if rest else "."
        return home if rest == "." else f"{home}/{rest}"
    tidied = posixpath.normpath(path)
    return tidied[1:] if tidied.startswith("//") else tidied


def named_in(folder: str | None, path: str) -> str | None:
    """The path ``path`` names in ``folder`` (:func:`in_folders`), tidied (:func:`_tidy`); ``None`` for the
    agent's own folder itself (``.``), for a relative path in an unknown folder, and for ``-`` (the
    standard input) and an empty word (no file)."""
    if path in ("", "-"):
        return None
    if _anchored(path):
        return _tidy(path)
    if folder == _UNKNOWN_FOLDER:
        return None
    named = _tidy(posixpath.join(folder or "", path))
    return None if named == "." else named  # grep x . and cd . && grep x .: the agent's own folder
