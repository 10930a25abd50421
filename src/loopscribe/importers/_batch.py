"""fsyncs paid once per pass of many imports, in the order that keeps a crash safe.

Importing one transcript on its own costs four fsyncs (the new session file,
its folder, the close, the cursor). A pass over many transcripts owes them
instead (:func:`loopscribe._files.owing_syncs`) and pays them together at
the end (:meth:`SyncBatch.pay`), in this order:

1. every session file written in the pass is fsynced (each once);
2. every folder that gained a session file is fsynced;
3. only then is each cursor replaced (written beside its name, fsynced,
   renamed), and the folders of the cursors fsynced.

So a cursor is never durable before the bytes it points past: a pass killed
anywhere leaves, for each transcript, either the old cursor (the next import
matches the records already written against the transcript and writes none
twice) or the new one with everything it counts on disk. A session file
whose fsync fails gets no new cursor, and the failure is reported for it.

Until the batch is paid, the writer lock of each session written stays
held (a duplicate of its descriptor), so no other import can take the file
between its last write and its cursor.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .._files import owing_syncs, replace_file, sync_debt

__all__ = ["SyncBatch", "owing_syncs", "save_or_owe"]


class SyncBatch:
    """The fsyncs and cursors of one pass, paid by :meth:`pay` (a :class:`SyncDebt`)."""

    def __init__(self) -> None:
        self._files: dict[Path, list[int]] = {}
        self._dirs: set[Path] = set()
        self._cursors: dict[Path, tuple[bytes, Path | None]] = {}
        self.paid = 0
        """fsyncs paid so far (for the benchmarks)."""

    def owe_file(self, fd: int, path: Path) -> None:
        """Keep a duplicate of ``fd`` (and with it the writer lock) until :meth:`pay`."""
        held = self._files.setdefault(path, [])
        st = os.fstat(fd)
        for other in held:
            ost = os.fstat(other)
            if (ost.st_dev, ost.st_ino) == (st.st_dev, st.st_ino):
                return  # the same file again: one fsync covers every write
        held.append(os.dup(fd))

    def owe_dir(self, path: Path) -> None:
        """Folder ``path`` gained a file."""
        self._dirs.add(path)

    def save_cursor(self, path: Path, data: bytes, session: Path | None) -> None:
        """Replace cursor ``path`` with ``data`` once ``session`` (if any) is durable."""
        self._cursors[path] = (data, session)

    @property
    def owed(self) -> int:
        """Session files and cursors not paid for yet."""
        return sum(len(fds) for fds in self._files.values()) + len(self._cursors)

    def pay(self) -> dict[Path, OSError]:
        """fsync what was written, then save the cursors; returns the sessions that failed.

        A session whose fsync (or its folder's) failed keeps its old cursor:
        the next import matches what is in the file again. Every descriptor
        is closed, whatever fails.
        """
        failed: dict[Path, OSError] = {}
        try:
            for path, fds in self._files.items():
                for fd in fds:
                    try:
                        os.fsync(fd)
                        self.paid += 1
                    except OSError as exc:
                        failed.setdefault(path, exc)
            for folder in sorted(self._dirs):
                try:
                    _fsync_dir(folder)
                    self.paid += 1
                except OSError as exc:
                    for path in self._files:
                        if path.parent == folder:
                            failed.setdefault(path, exc)
            folders: set[Path] = set()
            for cursor, (data, session) in self._cursors.items():
                if session is not None and session in failed:
                    continue
                try:
                    replace_file(cursor, data)
                    self.paid += 1
                except OSError as exc:
                    failed.setdefault(session or cursor, exc)
                    continue
                folders.add(cursor.parent)
            for folder in sorted(folders):
                # The renames reach the disk too; without this a power loss may
                # bring back an older cursor, which is safe (its records are matched).
                with contextlib.suppress(OSError):
                    _fsync_dir(folder)
                    self.paid += 1
        finally:
            for fds in self._files.values():
                for fd in fds:
                    os.close(fd)
            self._files.clear()
            self._dirs.clear()
            self._cursors.clear()
        return failed


def save_or_owe(path: Path, data: bytes, session: Path | None) -> None:
    """Replace cursor ``path`` now, or when the pass's :class:`SyncBatch` is paid."""
    debt = sync_debt()
    if isinstance(debt, SyncBatch):
        debt.save_cursor(path, data, session)
    else:
        replace_file(path, data)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
