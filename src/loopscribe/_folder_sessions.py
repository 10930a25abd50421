"""A local folder of session files as a workspace's source: folded, cached, annotated.

Everything is *derived* from records, *appended* as records, or *read*
from the writer lock (see :mod:`loopscribe.workspace`): summaries are
folded from the records, cached per file and advanced from the last byte
offset as a file grows; ``update``, ``set_todos`` and ``compact`` append to
the file when this process writes it or nobody does, else to the session's
side log; the status comes from the writer and run locks.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from . import events as ev
from ._backread import BLOCK_BYTES, ByteSource, FileSource
from ._codec import Codec
from ._errors import FormatError, LoopscribeError, SessionLockedError
from ._files import make_private_dir, replace_file
from ._fold import IMPORT_SETTLE_SECONDS, SessionFold, SessionSummary, Status
from ._format import Scanner
from ._gc import collector_paused
from ._safeopen import open_session_file
from ._session import Observer, Session, open_handle
from ._sidelog import (
    SIDE_SUFFIX,
    Locks,
    SideFact,
    append_side,
    is_locked,
    locked_inodes,
    read_side,
    side_path,
    with_side,
)
from ._workspace_source import Artifact, SessionNotFoundError, check_session_id

__all__ = ["FOLDER_TRUST_NS", "IMPORT_SETTLE_SECONDS", "FolderSessions", "NotASessionError"]


class NotASessionError(FormatError):
    """A workspace file's first line is not a loopscribe session header."""


_HEADER_PROBE = b'"type":"session_start"'


def _check_header(path: Path, fd: int | None = None) -> None:
    """Raise :class:`NotASessionError` unless the first line is a ``session_start``."""
    own = fd is None
    if fd is None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        head = os.pread(fd, BLOCK_BYTES, 0)
    finally:
        if own:
            os.close(fd)
    newline = head.find(b"\n")
    first = head if newline < 0 else head[:newline]
    ok = False
    if newline >= 0 and _HEADER_PROBE in first:
        try:
            obj = orjson.loads(first)
            ok = isinstance(obj, dict) and obj.get("type") == ev.SESSION_START
        except orjson.JSONDecodeError:
            ok = False
    if not ok:
        what = "is empty" if not head else "does not start with a session_start record"
        raise NotASessionError(
            f"{path}:1: byte 0: {what}; it is not a loopscribe session file. "
            "Move it out of the workspace folder (or repair it from a backup)",
            path=path,
            line=1,
            offset=0,
        )


@dataclass(slots=True)
class _Cached:
    """A file's fold and where it stopped: enough to skip or extend the file."""

    path: Path
    fold: SessionFold
    scanner: Scanner
    offset: int
    lines: int
    size: int
    mtime_ns: int
    inode: int
    summary: SessionSummary | None = None
    side_key: tuple[int, int] | None = None
    side: list[SideFact] = field(default_factory=list)
    steady: SessionSummary | None = None
    """The summary while the file stays as it is: set when its status cannot change
    without the file changing (no run open, or one left by a writer that is gone;
    no side log), else ``None``."""

    def fresh(self, st: os.stat_result) -> bool:
        """Whether the file is exactly as it was when last folded."""
        return (
            self.inode == st.st_ino and self.size == st.st_size and self.mtime_ns == st.st_mtime_ns
        )


FOLDER_TRUST_NS = 2_000_000_000
"""How much older than a listing the folder's mtime and ctime must be for it to be reused.

A file system stamps changes with a coarse clock (a few ms; 1-2 s on some),
so a change right after a listing could leave the folder's mtime as it was.
Only times this far in the past prove that a later change would show."""


@dataclass(frozen=True, slots=True)
class _Names:
    """The session files and side logs of a folder, as one listing found them."""

    key: tuple[int, int, int, int]  # the folder's device, inode, mtime and ctime (ns)
    sessions: list[str]
    sides: frozenset[str]  # session file names that have a side log
    reusable: bool


def _folder_key(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def _list_names(folder: Path | int, key: tuple[int, int, int, int], trust_ns: int) -> _Names:
    """Scan a folder (a path or an open descriptor) for session files and side logs."""
    started = time.time_ns()
    sessions: list[str] = []
    sides: set[str] = set()
    with os.scandir(folder) as scan:
        for entry in scan:
            name = entry.name
            if name.endswith(".jsonl"):
                if not name.endswith(".otlp.jsonl"):
                    sessions.append(name)
            elif name.endswith(SIDE_SUFFIX):
                sides.add(name[: -len(SIDE_SUFFIX)])
    settled = max(key[2], key[3]) < started - trust_ns
    return _Names(key, sessions, frozenset(sides), settled)


def _imported_and_recent(fold: SessionFold) -> bool:
    """An imported transcript's open turn, its own last record recent: still being written."""
    if not isinstance(fold.meta.get("import"), Mapping) or fold.updated is None:
        return False
    age = datetime.now(UTC) - fold.updated
    return age.total_seconds() < IMPORT_SETTLE_SECONDS


class FolderSessions:
    """The sessions of one folder (a :class:`~loopscribe._workspace_source.SessionSource`).

    Args:
        root: The folder (created if missing, 0700).
        codec: Decodes the side log's facts.
        trust_ns: How old the folder's times must be for a listing to be reused.
        opener: Opens a session file for range reads.
    """

    def __init__(
        self,
        root: Path,
        codec: Codec,
        *,
        trust_ns: int = FOLDER_TRUST_NS,
        opener: Callable[[Path], ByteSource] = FileSource,
    ) -> None:
        self.root = make_private_dir(root.absolute())
        self.codec = codec
        self._trust_ns = trust_ns
        self._opener = opener
        self._cache: dict[str, _Cached] = {}  # by file name
        self._names: _Names | None = None
        self._lock = threading.Lock()
        self.files_read = 0
        self.unreadable: tuple[tuple[Path, OSError], ...] = ()

    # -- paths ---------------------------------------------------------------

    def path(self, session_id: str) -> Path:
        """The file of ``session_id``."""
        return self.root / f"{check_session_id(session_id)}.jsonl"

    def artifact_dir(self, session_id: str) -> Path:
        """Where a session's artifacts live (not created until something is put there)."""
        return self.root / f"{session_id}.artifacts"

    def existing(self, session_id: str) -> Path:
        """The file of ``session_id``, which must exist."""
        path = self.path(session_id)
        if not path.is_file():
            raise SessionNotFoundError(
                errno.ENOENT, f"no session {session_id} in {self.root} (looked for {path.name})"
            )
        return path

    def session_files(self) -> list[Path]:
        """Every session file in the folder."""
        return sorted(
            p
            for p in self.root.glob("*.jsonl")
            if not p.name.endswith(".otlp.jsonl") and p.is_file()
        )

    # -- summaries -----------------------------------------------------------

    def summaries(self) -> builtins.list[SessionSummary]:
        """Every session's summary; files read only when new or changed since the last call.

        A file this process cannot read is left out, and named with its
        error in :attr:`unreadable`.
        """
        summaries: list[SessionSummary] = []
        skipped: list[str] = []  # listed names with no session file (any more), or unreadable
        unreadable: list[tuple[Path, OSError]] = []
        keep, skip, is_reg = summaries.append, skipped.append, stat.S_ISREG
        summarize = self._summary_locked
        locks: builtins.list[Locks | None] = []
        # A cold scan builds a summary and a fold per file, which all live on:
        # collections during it would walk all those built before (superlinear).
        with self._lock, collector_paused(), self._folder() as (names, fd):
            sides = names.sides
            cached_of = self._cache.get
            stat_of, root = os.stat, self.root
            for name in names.sessions:
                try:
                    st = stat_of(root / name) if fd is None else stat_of(name, dir_fd=fd)
                except FileNotFoundError:
                    skip(name)  # deleted meanwhile
                    continue
                # The warm path: an unchanged file whose status cannot have changed
                # costs its stat and these comparisons, nothing more.
                cached = cached_of(name)
                summary = None
                if (
                    cached is not None
                    and st.st_mtime_ns == cached.mtime_ns
                    and st.st_size == cached.size
                    and st.st_ino == cached.inode
                    and name not in sides
                ):
                    summary = cached.steady
                if summary is None:
                    if not is_reg(st.st_mode) or st.st_size == 0:
                        skip(name)
                        continue
                    if not locks:
                        # Read once, and only when a status has to be worked out.
                        locks.append(locked_inodes())
                    try:
                        summary = summarize(name, st, locks[0], name in sides)
                    except FileNotFoundError:
                        skip(name)  # deleted meanwhile
                        continue
                    except OSError as exc:
                        if isinstance(exc, LoopscribeError):
                            raise
                        # One file this process may not read must not hide the others.
                        skip(name)
                        unreadable.append((root / name, exc))
                        continue
                keep(summary)
            self.unreadable = tuple(unreadable)
            cache = self._cache
            # Every file summarized is in the cache; anything more there is gone.
            if len(cache) > len(names.sessions) - len(skipped):
                for gone in cache.keys() - set(names.sessions).difference(skipped):
                    del cache[gone]
        return summaries

    @contextlib.contextmanager
    def _folder(self) -> Iterator[tuple[_Names, int | None]]:
        """The folder's session files, and the folder opened (``None`` where unsupported).

        Where the platform allows, the folder is opened once and each file is
        looked up by name in it, so a folder renamed meanwhile is not mixed
        with the one that takes its place. The
        folder is scanned only if it changed since the last scan (its mtime
        moves whenever a file is created, removed or renamed in it), or when
        that scan was too recent for its mtime to prove anything.
        """
        fd = None
        if os.stat in os.supports_dir_fd and os.scandir in os.supports_fd:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            key = _folder_key(os.stat(self.root) if fd is None else os.fstat(fd))
            names = self._names
            if names is None or not names.reusable or names.key != key:
                folder = self.root if fd is None else fd
                names = self._names = _list_names(folder, key, self._trust_ns)
            yield names, fd
        finally:
            if fd is not None:
                os.close(fd)

    def summary(self, session_id: str) -> SessionSummary:
        """The summary of one session."""
        path = self.existing(session_id)
        return self._summary(path.name, path.stat(), locked_inodes())

    def summary_of_path(self, path: Path) -> SessionSummary:
        """The summary of a session file given by path (in this folder)."""
        return self._summary(path.name, (self.root / path.name).stat(), locked_inodes())

    def _summary(self, name: str, st: os.stat_result, locked: Locks | None) -> SessionSummary:
        side = (self.root / name).with_name(name + SIDE_SUFFIX).exists()
        with self._lock:
            return self._summary_locked(name, st, locked, side)

    def _summary_locked(
        self,
        name: str,
        st: os.stat_result,
        locked: Locks | None,
        side: bool = False,
    ) -> SessionSummary:
        """:meth:`_summary` with the lock held: the file read only if new or changed."""
        known = self._cache.get(name)
        read_now = known is None or not known.fresh(st)
        cached = self._advance(self.root / name, st, known) if read_now or known is None else known
        if side or cached.side_key is not None:
            self._advance_side(cached, side)
        fold = cached.fold
        status: Status
        if fold.run_open:
            handle = open_handle(cached.path)
            if handle is not None:
                # This process writes the file: it knows whether the open run is its own
                # or one a crashed writer left before this handle reopened the file.
                status = "running" if handle.run is not None else "interrupted"
            elif not is_locked(cached.path, st, locked):
                status = "running" if _imported_and_recent(fold) else "interrupted"
            elif locked is not None and (st.st_dev, st.st_ino) not in locked.runs:
                # Its writer is alive but has no run open: it reopened the file
                # after a crash, and the open run in the file is the dead writer's.
                status = "interrupted"
            else:
                status = "running"
        else:
            status = "failed" if fold.last_run_failed else "idle"
        if cached.summary is None or cached.summary.status != status:
            fold = with_side(fold, cached.side)
            cached.summary = fold.summary(cached.path, status)
        # A file's status can change while the file does not only from running to
        # interrupted (its writer dies or detaches the run): a run is begun or
        # resumed by writing a record, with the run lock already taken. So an
        # interrupted status holds until the file changes, once it was worked out
        # from locks seen after the records were read (not in the call that read them).
        settled = not fold.run_open or (status == "interrupted" and not read_now)
        steady = settled and not side and cached.side_key is None
        cached.steady = cached.summary if steady else None
        return cached.summary

    def _advance_side(self, cached: _Cached, exists: bool) -> None:
        """Re-read the side log if it changed since it was last folded."""
        side_file = side_path(cached.path)
        key: tuple[int, int] | None = None
        if exists:
            try:
                st = side_file.stat()
                key = (st.st_size, st.st_mtime_ns)
            except FileNotFoundError:
                key = None
        if key == cached.side_key:
            return
        cached.side_key = key
        cached.side = read_side(side_file, self.codec) if key is not None else []
        cached.summary = None

    def _advance(self, path: Path, st: os.stat_result, cached: _Cached | None) -> _Cached:
        """Extend a cached fold over the bytes a file grew by, or fold it anew."""
        grew = cached is not None and cached.inode == st.st_ino and st.st_size > cached.offset
        if cached is None or not grew:
            _check_header(path)
            cached = _Cached(path, SessionFold(), Scanner(path), 0, 0, 0, 0, st.st_ino)
        cached.summary = None
        self.files_read += 1
        fold, scanner = cached.fold, cached.scanner
        with open_session_file(path, BLOCK_BYTES) as stream:
            stream.seek(cached.offset)
            for number, _offset, _raw, obj in scanner.lines(
                stream, offset=cached.offset, first_line=cached.lines + 1
            ):
                data = obj.get("data")
                kind = obj["type"]
                top = True
                if kind == ev.AGENT_END:
                    execution = obj.get("execution")
                    top = not (isinstance(execution, dict) and execution.get("parent_id"))
                fold.feed(
                    kind,
                    obj["seq"],
                    scanner.ts,
                    data if isinstance(data, dict) else {},
                    obj["session_id"],
                    top,
                )
                cached.lines = number
            cached.offset = scanner.end_offset
        if not fold.id:
            raise FormatError(f"{path}: not a session file (no session_start)", path=path)
        cached.size, cached.mtime_ns, cached.inode = st.st_size, st.st_mtime_ns, st.st_ino
        self._cache[path.name] = cached
        return cached

    # -- reading ---------------------------------------------------------------

    def open(self, path: Path) -> ByteSource:
        """The bytes of a session file, read by range, once its header is checked."""
        source = self._opener(path)
        try:
            fd = getattr(source, "fd", None)
            _check_header(path, fd if isinstance(fd, int) else None)
        except BaseException:
            source.close()
            raise
        return source

    def known_totals(self, path: Path, side: SideFact | None) -> tuple[int, int] | None:
        """Visible and committed messages from the cached fold, if the file is unchanged."""
        with self._lock:
            cached = self._cache.get(path.name)
            if cached is not None and cached.fresh(path.stat()):
                fold = cached.fold
                if not cached.side:
                    return fold.summary(path, "idle").message_count, fold.messages
        return None

    def side_compaction(self, path: Path) -> SideFact | None:
        """The latest compaction in the session's side log, if any."""
        facts = [f for f in read_side(side_path(path), self.codec) if f.kind == ev.COMPACTION]
        return facts[-1] if facts else None

    # -- changing ------------------------------------------------------------------

    def require_writable(self, what: str) -> None:
        """A folder's sessions can be changed."""

    def create(
        self, codec: Codec, observers: Iterable[Observer], metadata: dict[str, Any], chain: bool
    ) -> Session:
        """Create a session file under a new ID and return its open writer."""
        session_id = secrets.token_hex(16)
        return Session.create(
            self.path(session_id),
            codec,
            observers,
            metadata=metadata,
            chain=chain,
            session_id=session_id,
        )

    def annotate(self, session_id: str, kind: str, data: Mapping[str, Any]) -> None:
        """Append a session-level fact: to the file if we may write it, else to the side log."""
        path = self.existing(session_id)
        _check_header(path)
        session = open_handle(path)
        if session is not None:
            # This process is the writer: append through its handle.
            session.annotate(kind, data)
            return
        try:
            writer = Session.open(path, self.codec)
        except SessionLockedError:
            # Another process records this session: its file is its writer's
            # alone, so the fact goes to the side log, folded in by readers.
            self.annotate_side(path, kind, data)
            return
        with writer:
            writer.annotate(kind, data)

    def annotate_side(self, path: Path, kind: str, data: Mapping[str, Any]) -> None:
        with self._lock:
            st = path.stat()
            cached = self._cache.get(path.name)
            if cached is None or not cached.fresh(st):
                cached = self._advance(path, st, cached)
            # Where the fact applies: after every record folded so far.
            offset, messages = cached.offset, cached.fold.messages
        if kind == ev.COMPACTION:
            data = {**data, "messages_before": messages}
        append_side(side_path(path), self.codec, kind, data, offset)

    def delete(self, session_id: str) -> None:
        """Remove a session, its artifacts and export files.

        Raises:
            SessionLockedError: The session is running.
        """
        path = self.existing(session_id)
        _check_header(path)
        if is_locked(path, path.stat(), locked_inodes()):
            raise SessionLockedError(
                errno.EBUSY,
                f"session {session_id} is open for writing, i.e. running or between "
                f"turns (a writer holds {path.name}); close it before deleting",
            )
        for extra in (
            path.with_name(path.name + ".otlp.jsonl"),
            path.with_name(path.name + ".export-cursor"),
            path.with_name(path.name + ".ship-cursor"),
            side_path(path),
        ):
            extra.unlink(missing_ok=True)
        shutil.rmtree(self.artifact_dir(session_id), ignore_errors=True)
        path.unlink()
        with self._lock:
            self._cache.pop(path.name, None)

    def add_artifact(self, session_id: str, name: str, data: bytes) -> Artifact:
        """:meth:`Workspace.add_artifact <loopscribe.Workspace.add_artifact>` in a folder."""
        _check_artifact_name(name)
        _check_header(self.existing(session_id))
        folder = self.artifact_dir(session_id)
        if folder.is_symlink():
            raise FileExistsError(
                errno.EEXIST,
                f"{folder}: is a symbolic link, not the session's artifact folder; "
                "remove it, then add the artifact again",
            )
        target = make_private_dir(folder) / name
        replace_file(target, data)
        st = target.stat()
        return Artifact(name, target, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC))

    def artifacts(self, session_id: str) -> builtins.list[Artifact]:
        """Files in the session's artifact folder, by name; empty if there is none."""
        _check_header(self.existing(session_id))
        folder = self.artifact_dir(session_id)
        out: list[Artifact] = []
        with contextlib.suppress(FileNotFoundError):
            for entry in sorted(folder.rglob("*")):
                if entry.is_file():
                    st = entry.stat()
                    created = datetime.fromtimestamp(st.st_mtime, UTC)
                    out.append(Artifact(str(entry.relative_to(folder)), entry, st.st_size, created))
        return out


def _check_artifact_name(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is a plain, visible file name (the one door for it)."""
    try:
        encoded = os.fsencode(name)
    except (TypeError, UnicodeEncodeError):
        encoded = b""
    if not encoded or len(encoded) > 255 or name.startswith(".") or any(c in name for c in "/\\\0"):
        raise ValueError(
            f"{name!r} is not an artifact name: give a file name of at most 255 bytes, "
            "without '/', '\\', NUL or a leading '.'"
        )
