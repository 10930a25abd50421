"""The file under a writer: its locks, the bytes a block holds, a fork, a new file's birth."""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import sys
from pathlib import Path
from typing import Final

import orjson

from .. import events as ev
from .._codec import DUMPS_OPTIONS
from .._errors import (
    SessionLockedError,
)
from .._files import sync_debt
from .._locks import fcntl

_BLOCK_BYTES = 1 << 20
_BULK_OPTIONS = DUMPS_OPTIONS | orjson.OPT_APPEND_NEWLINE
# Records that carry the file's committed-message count: a top-level "messages" key
# (and, on message_end after a compaction, "compaction": that record's offset).
_COUNTED: Final = frozenset({ev.MESSAGE_END, ev.COMPACTION})

# Bumped in every forked child: a handle created before the fork is the
# parent's. Cheaper than an os.getpid() system call on every record.
_forks = [0]
os.register_at_fork(after_in_child=lambda: _forks.__setitem__(0, _forks[0] + 1))


def _lock(fd: int, path: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SessionLockedError(
            errno.EWOULDBLOCK,
            f"{path}: another Session handle, in this or another process, is writing "
            "this file; close it first, or read the file with loopscribe.read()",
        ) from None


# struct flock on 64-bit Linux: l_type, l_whence, l_start, l_len, l_pid (and padding).
_FLOCK_STRUCT = "hhqqi4x"
_OPEN_RUN_LOCKS = (
    sys.platform.startswith("linux") and hasattr(fcntl, "F_OFD_SETLK") and sys.maxsize > 2**32
)


def _run_lock(fd: int, *, held: bool) -> None:
    """Hold an OFD lock on byte 0 while a run is open; it dies with the process.

    Readers (``Workspace``) see it in /proc/locks, so a writer that is alive
    but has no run open — it reopened the file after a crash — is told apart
    from one that is running. Best-effort: where OFD locks are missing, the
    workspace falls back to the writer lock alone.
    """
    if not _OPEN_RUN_LOCKS:
        return
    kind = fcntl.F_WRLCK if held else fcntl.F_UNLCK
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack(_FLOCK_STRUCT, kind, os.SEEK_SET, 0, 1, 0))


def _remove_unborn(fd: int, path: Path) -> None:
    """Remove the file ``create`` just made if nothing could be written to it (a full disk).

    Left behind, the empty file would make the next ``create`` of the same
    path fail. Only this very file goes: the lock is still held, and the
    name must still lead to the descriptor's file.
    """
    with contextlib.suppress(OSError):
        st, named = os.fstat(fd), os.stat(path)
        if st.st_size == 0 and (named.st_dev, named.st_ino) == (st.st_dev, st.st_ino):
            path.unlink()


def _fsync_dir(path: Path) -> None:
    debt = sync_debt()
    if debt is not None:
        debt.owe_dir(path.parent)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
