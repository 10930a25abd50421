"""POSIX file locks (``fcntl``), where the platform has them.

Writing a session needs them: one writer per file, appends under a lock.
Reading does not, so ``import loopscribe`` and every reading command work
where ``fcntl`` is missing (Windows); there, anything that would write a
session raises :class:`~loopscribe.UnsupportedPlatformError` with one line
saying so, before it touches a file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

from ._errors import UnsupportedPlatformError

__all__ = ["HAVE_LOCKS", "fcntl", "require_locks"]

try:
    import fcntl as _fcntl
except ImportError:  # Windows: reading works, writing says it cannot
    _fcntl = None  # type: ignore[assignment]

HAVE_LOCKS = _fcntl is not None
"""Whether this platform has the POSIX file locks loopscribe writes under."""


def _refuse(path: object = None) -> NoReturn:
    where = f"{path}: " if path is not None else ""
    raise UnsupportedPlatformError(
        f"{where}writing loopscribe sessions needs POSIX file locks (fcntl), which "
        f"{sys.platform} lacks; record and import on Linux or macOS, and read the files "
        "anywhere"
    )


def require_locks(path: str | Path | None = None) -> None:
    """Raise :class:`UnsupportedPlatformError` where there are no file locks."""
    if not HAVE_LOCKS:
        _refuse(path)


class _NoLocks:
    """Stands in for ``fcntl`` where it is missing: the constants, and calls that refuse."""

    LOCK_SH, LOCK_EX, LOCK_NB, LOCK_UN = 1, 2, 4, 8
    F_WRLCK, F_UNLCK = 1, 2

    def flock(self, fd: int, operation: int) -> NoReturn:
        _refuse()

    def fcntl(self, fd: int, cmd: int, arg: Any = 0) -> NoReturn:
        _refuse()


fcntl: Any = _fcntl if _fcntl is not None else _NoLocks()
"""``fcntl`` itself, or the stand-in whose calls raise :class:`UnsupportedPlatformError`."""
