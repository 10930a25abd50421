"""Files loopscribe writes beside a session: private, appended whole, replaced whole.

Everything written here holds session content (facts, spans, cursors,
artifacts), so:

* a file is created 0600 and a folder 0700, whatever the umask;
* an append-only file that several writers share (a side log, the embedded
  OTLP JSON file) is appended under an exclusive ``flock``: a torn last line
  (a crash, a full disk or a file-size limit stopped a write halfway) is cut
  back first, and a line that cannot be written whole is cut back too, so
  the next append never lands after half a line and a reader, which ignores
  a final line without ``\\n``, never meets a damaged complete one;
* a small state file (a cursor) is replaced whole: written beside its name,
  fsynced, renamed.

A bulk job that can be redone (the transcript importers) may owe its fsyncs
instead of paying them one by one: inside :func:`owing_syncs`, a session's
fsyncs and a new file's folder fsync are handed to the :class:`SyncDebt`,
which pays them all at once before any cursor that points past those bytes
is saved (see ``loopscribe.importers._batch``).

The session file follows the same rules in ``loopscribe._session``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Protocol

from ._errors import WriteError
from ._locks import HAVE_LOCKS, fcntl

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700

_BLOCK_BYTES = 1 << 16
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

logger = logging.getLogger("loopscribe")


class SyncDebt(Protocol):
    """Who pays the fsyncs a writer owes, later and all at once (see :func:`owing_syncs`)."""

    def owe_file(self, fd: int, path: Path) -> None:
        """``path``, open on ``fd``, must be fsynced before anything that depends on it.

        The debtor must keep its own descriptor (``os.dup``): the writer may close ``fd``.
        """

    def owe_dir(self, path: Path) -> None:
        """Folder ``path`` gained an entry that must be fsynced."""


_DEBT: ContextVar[SyncDebt | None] = ContextVar("loopscribe_sync_debt", default=None)


def sync_debt() -> SyncDebt | None:
    """The debt fsyncs go to in this context, or ``None``: fsync now."""
    return _DEBT.get()


@contextlib.contextmanager
def owing_syncs(debt: SyncDebt) -> Iterator[SyncDebt]:
    """Within the block (this thread or task only), sessions owe their fsyncs to ``debt``.

    Only for work that can be done again after a crash: until the debt is
    paid nothing written inside is durable, so nothing that claims it is (an
    import cursor) may be saved before.
    """
    token = _DEBT.set(debt)
    try:
        yield debt
    finally:
        _DEBT.reset(token)


def make_private_dir(path: str | os.PathLike[str]) -> Path:
    """Create folder ``path`` and every missing parent 0700; folders that exist stay as they are.

    Returns:
        ``path`` as a Path.

    Raises:
        FileExistsError: ``path`` or a parent exists and is not a folder.
        OSError: A folder cannot be created.
    """
    folder = Path(path)
    try:
        folder.mkdir(mode=PRIVATE_DIR)
    except FileNotFoundError:
        make_private_dir(folder.parent)
        folder.mkdir(mode=PRIVATE_DIR, exist_ok=True)
    except FileExistsError:
        if not folder.is_dir():
            raise
    return folder


def complete_end(fd: int) -> int:
    """The offset just after the last ``\\n`` of the file open on ``fd`` (0 if there is none).

    Reads backwards block by block, so the cost is the length of an
    unfinished final line, not of the file.
    """
    pos = os.fstat(fd).st_size
    while pos > 0:
        start = max(0, pos - _BLOCK_BYTES)
        newline = os.pread(fd, pos - start, start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        pos = start
    return 0


def no_room_hint(exc: OSError) -> str:
    """What to do about a write that failed for want of room, as a clause; "" for other errors."""
    if exc.errno not in _NO_ROOM:
        return ""
    return "; free space on its file system (or raise the quota or file-size limit) and try again"


def open_append(path: str | os.PathLike[str]) -> int:
    """Open an append-only file for :func:`append_whole`, creating it 0600; the caller closes it."""
    # Read access too: cutting a torn line back needs to find the last newline.
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, PRIVATE_FILE)


def append_whole(fd: int, data: bytes, path: str | os.PathLike[str], *, sync: bool = False) -> int:
    """Append complete lines to the file open on ``fd``, whole or not at all.

    Under an exclusive ``flock`` (writers in other processes take it too):
    an unfinished final line is removed, then ``data`` is written, its short
    writes completed; if that fails, the file is cut back to where it ended.

    Args:
        fd: The file, from :func:`open_append` (``O_APPEND``, read access too).
        data: One or more ``\\n``-terminated lines.
        path: Named in errors and log lines.
        sync: fsync before the lock is released.

    Returns:
        The offset ``data`` starts at.

    Raises:
        WriteError: Cutting, writing or syncing failed; the message names the
            file and, for a full disk or a size limit, what to do.
    """
    with _appending(fd):
        return _append_held(fd, data, path, sync=sync)


@contextlib.contextmanager
def _appending(fd: int) -> Iterator[None]:
    """The exclusive append lock: ``flock`` across processes, else (no ``fcntl``:
    Windows) a lock within this process only, where one exporter per file is the rule."""
    if not HAVE_LOCKS:
        with _PROCESS_APPEND_LOCK:
            yield
        return
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


_PROCESS_APPEND_LOCK = threading.Lock()


def _append_held(fd: int, data: bytes, path: str | os.PathLike[str], *, sync: bool) -> int:
    """:func:`append_whole` with the lock held."""
    end = _cut_torn_line(fd, path)
    try:
        _write_all(fd, data)
    except OSError as exc:
        # Half a line would make the next append a damaged complete line.
        with contextlib.suppress(OSError):
            if os.fstat(fd).st_size > end:
                os.ftruncate(fd, end)
        raise WriteError(
            exc.errno,
            f"{path}: appending {len(data)} bytes at byte {end} failed "
            f"({exc.strerror or exc}); nothing of it was kept{no_room_hint(exc)}",
        ) from exc
    if sync:
        try:
            os.fsync(fd)
        except OSError as exc:
            raise WriteError(exc.errno, f"{path}: fsync failed ({exc.strerror or exc})") from exc
    return end


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``, completing short writes (a signal, a disk filling up)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _cut_torn_line(fd: int, path: str | os.PathLike[str]) -> int:
    """Remove an unfinished final line (the lock held); returns the file's new end."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = complete_end(fd)
    try:
        os.ftruncate(fd, end)
    except OSError as exc:
        raise WriteError(
            exc.errno,
            f"{path}: cannot remove its unfinished final line at byte {end} "
            f"({exc.strerror or exc}); nothing was appended",
        ) from exc
    logger.warning(
        "%s: removed an unfinished final line of %d bytes at byte %d", path, size - end, end
    )
    return end


def replace_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically, as a 0600 file (write beside it, fsync, rename).

    Raises:
        OSError: Writing failed; ``path`` is as it was and no temporary file is left.
    """
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    # O_NOFOLLOW: a symlink planted at the temporary name must not redirect the write.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, PRIVATE_FILE)
    try:
        try:
            os.fchmod(fd, PRIVATE_FILE)  # a temporary file an older version left may be 0644
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
