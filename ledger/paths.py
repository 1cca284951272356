"""Caller-supplied file-system paths, checked before any file is touched.

A ``str`` path that holds a lone surrogate other than those ``os.fsdecode``
produces for undecodable bytes (``"\\ud800"``) has no file-system name at all;
the standard library raises ``UnicodeEncodeError`` deep inside ``open`` or
``stat``. :func:`fs_path` turns that into ``INVALID_ARGUMENT`` up front.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import INVALID_ARGUMENT, LedgerError


def fs_path(path: str | os.PathLike[str], what: str = "path") -> Path:
    """``path`` as a :class:`Path`; ``INVALID_ARGUMENT`` when it cannot name a file.

    ``what`` names the argument in the message (``"case path"``, ``"config file"``).
    """
    try:
        os.fsencode(path)
    except (UnicodeError, TypeError) as exc:
        raise LedgerError(INVALID_ARGUMENT, f"{what} {ascii(os.fspath(path) if isinstance(path, os.PathLike) else path)} "
                          f"cannot name a file: {exc}") from None
    return Path(path)
