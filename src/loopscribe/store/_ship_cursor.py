"""The ship cursor beside each session file: which store has which bytes, locked while shipping."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from .._locks import fcntl
from .._logsafe import display_url

__all__ = ["_cursor_lock", "_read_cursor", "_write_cursor", "cursor_path"]


def cursor_path(session_path: Path) -> Path:
    """Where the ship cursor of a session file lives: beside it."""
    return session_path.with_name(session_path.name + ".ship-cursor")


# -- the ship cursor --------------------------------------------------------------------


@contextlib.contextmanager
def _cursor_lock(path: Path) -> Iterator[int | None]:
    """The cursor file (private), locked exclusively; ``None`` if another shipper holds it."""
    fd = os.open(cursor_path(path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)  # a cursor of an earlier version was 0644
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield fd
    finally:
        os.close(fd)


def _read_cursor(fd: int) -> dict[str, dict[str, Any]]:
    size = os.fstat(fd).st_size
    raw = os.pread(fd, size, 0) if size else b""
    if not raw:
        return {}
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}  # damaged: the manifest in the store is the truth anyway
    return obj if isinstance(obj, dict) else {}


def _write_cursor(fd: int, cursors: dict[str, dict[str, Any]]) -> None:
    """Rewrite the locked cursor file in place, keyed by store URLs without credentials.

    In place, not by rename: the lock is held on this inode. A torn write
    (a crash between truncate and write) leaves an unreadable cursor, which
    counts as no cursor: the manifest, the real commit point, is read instead.
    Keys an earlier version wrote with a URL's credentials are dropped.
    """
    clean = {url: mark for url, mark in cursors.items() if display_url(url) == url}
    os.ftruncate(fd, 0)
    os.pwrite(fd, orjson.dumps(clean), 0)
