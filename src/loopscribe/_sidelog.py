"""The side log and the writer lock: facts written beside a session another process records.

``update``, ``set_todos`` and ``compact`` go to ``<file>.meta`` while another
process holds the session's writer lock; :func:`with_side` folds them into
the summary. :func:`locked_inodes` and :func:`is_locked` tell which session
files a live writer holds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from ._codec import Codec
from ._errors import FormatError
from ._files import append_whole, open_append
from ._fold import SessionFold
from ._format import format_ts, parse_ts
from ._locks import HAVE_LOCKS, fcntl
from ._session import open_handle

SIDE_SUFFIX = ".meta"


@dataclass(frozen=True, slots=True)
class SideFact:
    """One line of a side log: a session-level fact written while another process records."""

    kind: str
    ts: datetime
    data: Mapping[str, Any]
    offset: int  # the session file's complete end when it was written


def side_path(path: Path) -> Path:
    return path.with_name(path.name + SIDE_SUFFIX)


def read_side(path: Path, codec: Codec) -> list[SideFact]:
    """The complete lines of a side log (an unfinished last line is left out)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    return parse_side(raw, path, codec)


def parse_side(raw: bytes, path: Path, codec: Codec) -> list[SideFact]:
    """The facts in a side log's bytes (``path`` names it in errors)."""
    out: list[SideFact] = []
    end = raw.rfind(b"\n") + 1
    for number, line in enumerate(raw[:end].splitlines(), 1):
        try:
            obj = codec.loads(line)
            out.append(SideFact(obj["type"], parse_ts(obj["ts"]), obj["data"], int(obj["offset"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise FormatError(
                f"{path}:{number}: not a side-log line ({exc}); the file was changed "
                "outside loopscribe. Remove the damaged line",
                path=path,
                line=number,
            ) from None
    return out


def with_side(fold: SessionFold, side: list[SideFact]) -> SessionFold:
    """``fold`` with a side log's facts folded in (a copy; ``fold`` itself when none)."""
    if not side:
        return fold
    fold = replace(fold, meta=dict(fold.meta), meta_at=dict(fold.meta_at))
    for fact in side:
        fold.fact(fact.kind, -1, fact.ts, fact.data)
    fold.updated = max(fold.updated or fold.created or side[-1].ts, side[-1].ts)
    return fold


def append_side(path: Path, codec: Codec, kind: str, data: Mapping[str, Any], offset: int) -> None:
    """Append one fact to a side log, whole or not at all (see ``loopscribe._files``).

    Writers in many processes take the side log's ``flock`` in turn; an
    unfinished line a failed write left is removed before the fact is added.
    """
    ts = format_ts(None)[1]
    line = codec.dumps({"type": kind, "ts": ts, "offset": offset, "data": data}, newline=True)
    fd = open_append(path)
    try:
        append_whole(fd, line, path, sync=True)
    finally:
        os.close(fd)


class Locks(NamedTuple):
    """(device, inode) of the files with a writer, and of those with a run open by it."""

    writers: set[tuple[int, int]]
    runs: set[tuple[int, int]]


def locked_inodes() -> Locks | None:
    """Every flock-ed file and every run lock, from /proc/locks; ``None`` if unavailable.

    A writer holds an exclusive ``flock`` on its file, and while a run is
    open an OFD lock on its first byte (see ``loopscribe._session``).
    Reading /proc/locks has no side effect. Probing by taking the lock
    would, for an instant, make a writer's ``Session.open`` fail.
    """
    try:
        with open("/proc/locks", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    locks = Locks(set(), set())
    for line in raw.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:2147158 0 EOF"; waiters read "1: -> FLOCK".
        if len(parts) < 6:
            continue
        kind = parts[1]
        if kind == b"FLOCK":
            into = locks.writers
        elif kind == b"OFDLCK":
            into = locks.runs
        else:
            continue
        try:
            major, minor, inode = parts[5].split(b":")
            into.add((os.makedev(int(major, 16), int(minor, 16)), int(inode)))
        except ValueError:
            continue
    return locks


def is_locked(path: Path, st: os.stat_result, locked: Locks | None) -> bool:
    if locked is not None:
        # /proc/locks lists this process's own writers too.
        return (st.st_dev, st.st_ino) in locked.writers
    if open_handle(path) is not None:
        return True
    if not HAVE_LOCKS:
        return False  # no file locks to probe (Windows): nothing here writes it
    # No /proc/locks (not Linux): probe with a shared lock, released at once.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
