"""The store's folder: which file is a key's, creating and removing files, the summary files."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ..._errors import FormatError, SessionLockedError
from ..._locks import fcntl
from ..._safeopen import open_session_file
from . import _values
from ._names import file_name, hashed_name, legacy_name

__all__ = [
    "NAMING",
    "SUMMARY_SUFFIX",
    "_creating",
    "_holds",
    "_listing",
    "_locate",
    "_private_dirs",
    "_read_listing",
    "_remove",
    "_replace_private",
]

SUMMARY_SUFFIX = ".sdk-summary.json"
"""Beside each session file: its key and the SDK's folded summary (derived, rebuildable)."""
NAMING = 2
"""``claude_agent_sdk.naming`` of a session file named by ``_names`` (older files have none)."""

_HEAD_BYTES = 1 << 20
"""Enough of a session file to hold its ``session_start`` line."""
_MAX_SUMMARY_BYTES = 16 << 20
"""A summary file larger than this is not one the store wrote: it is skipped."""


def _locate(directory: Path, project_key: str, session_id: str) -> Path:
    """The file of a key: its own name, or the name an older store gave it (see ``_names``).

    A file at the key's plain name that an older store wrote for another key
    (its hashed names were plain names of other keys) is left alone: the key
    then lives at its hashed name, which no other key and no older store
    ever uses.
    """
    path = directory / file_name(project_key, session_id)
    hashed = directory / hashed_name(project_key, session_id)
    if hashed != path and os.path.lexists(hashed):
        return hashed
    owned = _holds(path, project_key)
    if owned:
        return path
    if owned is False:
        return hashed
    older = legacy_name(project_key, session_id)
    if older is not None and older != path.name and _holds(directory / older, project_key):
        return directory / older
    return path


def _holds(path: Path, project_key: str) -> bool | None:
    """Whether ``path`` is this key's file (``None``: there is no file).

    A file the store names itself says so (``naming``); an older store's
    file is the key's when it names the key's project (its ``session_id``
    may be the first entry's ``sessionId``), since older plain names were
    distinct and an older hashed name is the plain name only of a key whose
    project is that hash.
    """
    try:
        with open_session_file(path, buffering=0) as stream:
            first = stream.readline(_HEAD_BYTES)
    except FileNotFoundError:
        return None
    except FormatError:
        return False
    if not first.endswith(b"\n"):
        return True  # being created, under the folder's lock, by a store naming it so
    try:
        meta = orjson.loads(first)["data"]["metadata"]["claude_agent_sdk"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return False
    if not isinstance(meta, dict):
        return False
    return meta.get("naming") == NAMING or meta.get("project_key") == project_key


@contextlib.contextmanager
def _creating(directory: Path) -> Iterator[None]:
    """Hold the folder's lock: store processes create session files one at a time.

    Without it, a second process could find a file another has just created
    but not yet locked, and take it for one a failed import left behind.
    """
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove(path: Path, summary: Path) -> None:
    """Delete a session file and its summary, under its writer lock (never one in use)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SessionLockedError(
                    errno.EWOULDBLOCK,
                    f"{path}: another process is writing this session; it is not deleted. "
                    "Delete it again once that process has closed its store",
                ) from None
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with contextlib.suppress(FileNotFoundError):
            summary.unlink()
    finally:
        if fd is not None:
            os.close(fd)


def _private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents as 0700 (existing ones are left as they are)."""
    missing: list[Path] = []
    while not directory.is_dir():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            if not folder.is_dir():  # a file in the way: say so, as mkdir -p does
                raise


def _replace_private(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically by a new 0600 file holding ``data``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _read_listing(path: Path) -> dict[str, Any] | None:
    """A summary file's listing, or ``None`` for anything that is not a summary file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_SUMMARY_BYTES:
            return None
        raw = os.pread(fd, _MAX_SUMMARY_BYTES + 1, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _listing(raw)


def _listing(raw: bytes) -> dict[str, Any] | None:
    """Check a summary file's content: a key of strings, an mtime and the SDK's summary."""
    try:
        obj = _values.loads(raw)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    summary = obj.get("summary")
    if (
        isinstance(obj.get("project_key"), str)
        and isinstance(obj.get("session_id"), str)
        and type(obj.get("mtime")) is int
        and isinstance(summary, dict)
        and isinstance(summary.get("session_id"), str)
        and type(summary.get("mtime")) is int
        and isinstance(summary.get("data"), dict)
    ):
        return obj
    return None
