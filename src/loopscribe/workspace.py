"""A workspace: a folder of session files, listed, paged and annotated.

Everything a session store needs is *derived* from records, *appended* as
records, or *read* from the writer lock — never a header rewritten in place,
and no registry of running sessions that a crash could leave stale:

* summaries (title, model, message count, token usage, parent, todos,
  compaction, created/updated) are folded from the records, cached per file
  and advanced from the last byte offset as a file grows;
* ``update``, ``set_todos`` and ``compact`` append ``session_update``,
  ``todos`` and ``compaction`` records — to the session file when this
  process writes it or nobody does, else (another process is recording) to
  the session's *side log*, a small JSONL file of the same facts with its
  own lock, folded into the summary and the loaded conversation;
* status: ``running`` while a run is open and its writer holds the file's
  lock; ``interrupted`` when a run is open but its writer is gone (a crash);
  ``failed`` when the last run ended with an error; else ``idle`` (also a
  session kept open between turns);
* ``messages(last=N)`` reads backwards from the end of the file, so its cost
  grows with the page, not with the file; its totals come from the running
  message count the writer keeps in ``message_end`` lines (a top-level
  ``"messages"``, and ``"compaction"``: the offset of the latest compaction
  record), so a fresh Workspace needs no pass over the file either.

A file whose first line is not a session header makes every method raise
:class:`NotASessionError` naming it; a file still being created (empty) is
left out of :meth:`Workspace.list`.

Files: ``<root>/<session_id>.jsonl``, its side log ``<session_id>.jsonl.meta``,
artifacts in ``<root>/<session_id>.artifacts/``.
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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from . import events as ev
from ._backread import (
    BLOCK_BYTES,
    ByteSource,
    FileSource,
    count_visible,
    line_at,
    reverse_lines,
)
from ._codec import DEFAULT_CODEC, Codec
from ._errors import FormatError, LoopscribeError, SessionLockedError
from ._files import make_private_dir, replace_file
from ._fold import Compaction, SessionFold, SessionSummary, Status, positive_int, stored_count
from ._format import Scanner
from ._gc import collector_paused
from ._messages import SystemMessage
from ._reader import to_record
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
from ._source import is_url

__all__ = [
    "IMPORT_SETTLE_SECONDS",
    "Artifact",
    "Compaction",
    "MessagePage",
    "NotASessionError",
    "SessionNotFoundError",
    "SessionSummary",
    "Status",
    "Workspace",
    "session_status",
]

IMPORT_SETTLE_SECONDS = 1800.0
"""An imported transcript whose last timestamp is older than this has finished its turn."""

METADATA_FIELDS = frozenset(
    {
        "title",
        "model",
        "provider",
        "mode",
        "role",
        "agent_name",
        "color",
        "skills",
        "parent_id",
        "source",
        "result",
        "state",
    }
)
"""Session metadata a workspace stores (``state`` is the host's own label, e.g. 'done')."""

_TYPE_WINDOW = 120  # the record's "type" key comes within this many bytes of a line's start
_TYPE_KEY = b'"type":"'


def _record_type(raw: bytes) -> bytes:
    """A line's record type, read without parsing it (the first "type" key is the record's)."""
    start = raw.find(_TYPE_KEY, 0, _TYPE_WINDOW) + len(_TYPE_KEY)
    if start < len(_TYPE_KEY):
        return b""
    return raw[start : raw.find(b'"', start)]


class SessionNotFoundError(LoopscribeError, FileNotFoundError):
    """No session with that ID in the workspace."""


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


@dataclass(frozen=True, slots=True)
class MessagePage:
    """A window of a session's visible conversation.

    Attributes:
        messages: Oldest first. After a compaction the conversation starts
            with the summary (a ``SystemMessage``).
        has_more: Older visible messages exist before this window.
        total: Visible messages in all (summary included), as
            ``Workspace.get(id).message_count`` counts them.
        messages_total: Messages ever committed, compacted away or not, as
            ``Workspace.get(id).messages_total`` counts them.
    """

    messages: list[Any]
    has_more: bool
    total: int
    messages_total: int = 0


@dataclass(frozen=True, slots=True)
class Artifact:
    """A file produced during a session (``path``: a URL for a shipped session's artifact)."""

    name: str
    path: Path | str
    size: int
    created: datetime


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


_FOLDER_TRUST_NS = 2_000_000_000
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


def _list_names(folder: Path | int, key: tuple[int, int, int, int]) -> _Names:
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
    settled = max(key[2], key[3]) < started - _FOLDER_TRUST_NS
    return _Names(key, sessions, frozenset(sides), settled)


def _imported_and_recent(fold: SessionFold) -> bool:
    """An imported transcript's open turn, its own last record recent: still being written."""
    if not isinstance(fold.meta.get("import"), Mapping) or fold.updated is None:
        return False
    age = datetime.now(UTC) - fold.updated
    return age.total_seconds() < IMPORT_SETTLE_SECONDS


def session_status(path: str | os.PathLike[str]) -> Status:
    """``running``, ``interrupted``, ``failed`` or ``idle`` for one session file."""
    return Workspace(Path(path).parent).summary_of_path(Path(path)).status


class Workspace:
    """A folder of session files.

    A store URL (``s3://bucket/prefix``, any fsspec URL that ``loopscribe
    ship`` wrote to) gives a read-only workspace over the shipped sessions
    (see :mod:`loopscribe.store`): list, get, messages and artifacts read the
    store; changing a session raises.

    Args:
        root: The folder (created if missing), or a store URL.
        codec: Decodes messages for :meth:`messages`.
    """

    unreadable: tuple[tuple[Path, OSError], ...] = ()
    """The session files the last :meth:`list` could not read, each with its error
    (``PermissionError``, an I/O error; the error names the file, or its side log):
    they are left out of that listing."""

    def __new__(cls, root: str | os.PathLike[str], *, codec: Codec | None = None) -> Workspace:
        if cls is Workspace and is_url(root):
            from .store._workspace import StoreWorkspace

            return super().__new__(StoreWorkspace)
        return super().__new__(cls)

    def __init__(self, root: str | os.PathLike[str], *, codec: Codec | None = None) -> None:
        self.root = make_private_dir(Path(root).absolute())
        self.codec = codec or DEFAULT_CODEC
        self._cache: dict[str, _Cached] = {}  # by file name
        self._listed: tuple[tuple[int, ...], builtins.list[SessionSummary]] = ((), [])
        self._names: _Names | None = None
        self._lock = threading.Lock()
        self.files_read = 0
        """How many times a file was (re)read for a summary: 0 on a warm, unchanged listing."""

    # -- paths ---------------------------------------------------------------

    def path(self, session_id: str) -> Path:
        """The file of ``session_id``."""
        if not (len(session_id) == 32 and all(c in "0123456789abcdef" for c in session_id)):
            raise SessionNotFoundError(
                errno.ENOENT, f"{session_id!r} is not a session ID (32 lowercase hex digits)"
            )
        return self.root / f"{session_id}.jsonl"

    def artifact_dir(self, session_id: str) -> Path:
        """Where a session's artifacts live (not created until something is put there)."""
        return self.root / f"{session_id}.artifacts"

    def _existing(self, session_id: str) -> Path:
        path = self.path(session_id)
        if not path.is_file():
            raise SessionNotFoundError(
                errno.ENOENT, f"no session {session_id} in {self.root} (looked for {path.name})"
            )
        return path

    def session_files(self) -> list[Path]:
        """Every session file in the workspace."""
        return sorted(
            p
            for p in self.root.glob("*.jsonl")
            if not p.name.endswith(".otlp.jsonl") and p.is_file()
        )

    # -- creating and listing ------------------------------------------------

    def create(
        self,
        *,
        observers: Iterable[Observer] = (),
        chain: bool = False,
        codec: Codec | None = None,
        **metadata: Any,
    ) -> Session:
        """Create a session in the workspace and return its open writer.

        Args:
            observers: As for ``Session.create``.
            chain: Hash-chain the file (see ``loopscribe.verify``).
            codec: As for ``Session.create``.
            **metadata: Any of ``title``, ``model``, ``provider``, ``mode``,
                ``role``, ``agent_name``, ``color``, ``skills``, ``parent_id``,
                ``source``.

        Raises:
            ValueError: An unknown metadata field.
        """
        _check_fields(metadata)
        session_id = secrets.token_hex(16)
        return Session.create(
            self.path(session_id),
            codec or self.codec,
            observers,
            metadata={k: v for k, v in metadata.items() if v is not None},
            chain=chain,
            session_id=session_id,
        )

    def list(
        self, include_children: bool = False, *, include_channels: bool = False
    ) -> list[SessionSummary]:
        """Summaries of the workspace's sessions, most recently updated first.

        Files are read only when new or changed since the last call (one
        ``stat`` each tells); a file that grew is read from where the last
        call stopped. The folder itself is scanned again only when its
        mtime shows that files were created, removed or renamed in it. An
        empty file (a session being created) is left out.

        Args:
            include_children: Also list sessions with a ``parent_id``.
            include_channels: Also list sessions whose ``source`` is
                ``"channel"`` (created by a messaging channel, not a person
                at the UI).

        A file this process cannot read (its permissions, an I/O error) is
        left out too, and named with its error in :attr:`unreadable`.

        Raises:
            NotASessionError: A ``.jsonl`` file in the folder is not a session.
            CorruptRecordError: A session file is damaged.
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
                if (include_children or summary.parent_id is None) and (
                    include_channels or summary.source != "channel"
                ):
                    keep(summary)
            self.unreadable = tuple(unreadable)
            cache = self._cache
            # Every file summarized is in the cache; anything more there is gone.
            if len(cache) > len(names.sessions) - len(skipped):
                for gone in cache.keys() - set(names.sessions).difference(skipped):
                    del cache[gone]
            # Summaries are rebuilt only when something changed: the same
            # objects in the same scan order give the same sorted list.
            identity = tuple(map(id, summaries))
            if identity == self._listed[0]:
                return list(self._listed[1])
        with collector_paused():  # a key tuple per summary
            summaries_sorted = sorted(summaries, key=lambda s: (s.updated, s.id), reverse=True)
        with self._lock:
            self._listed = (identity, summaries_sorted)
        return list(summaries_sorted)

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
                names = self._names = _list_names(self.root if fd is None else fd, key)
            yield names, fd
        finally:
            if fd is not None:
                os.close(fd)

    def get(self, session_id: str) -> SessionSummary:
        """The summary of one session.

        Raises:
            SessionNotFoundError: No such session.
            CorruptRecordError: Its file is damaged.
        """
        path = self._existing(session_id)
        return self._summary(path.name, path.stat(), locked_inodes())

    def status(self, session_id: str) -> Status:
        """``running``, ``interrupted``, ``failed`` or ``idle``: see :data:`Status`."""
        return self.get(session_id).status

    def summary_of_path(self, path: Path) -> SessionSummary:
        """The summary of a session file given by path (in this workspace's folder)."""
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

    # -- messages ------------------------------------------------------------

    def messages(self, session_id: str, last: int = 50, skip: int = 0) -> MessagePage:
        """A page of the committed conversation, read backwards from the end.

        After a compaction, the visible conversation is the summary (a
        ``SystemMessage``) followed by the messages committed after it.

        Args:
            session_id: The session.
            last: Page size.
            skip: Messages to skip from the newest end (for older pages).

        Returns:
            The page, oldest first, and whether older messages exist.
        """
        return self.messages_of_path(self._existing(session_id), last, skip)

    def messages_of_path(self, path: Path, last: int = 50, skip: int = 0) -> MessagePage:
        """:meth:`messages` for a session file given by path."""
        if last < 0 or skip < 0:
            raise ValueError(f"last and skip must be >= 0, got last={last}, skip={skip}")
        want = skip + last
        side = self._side_compaction(path)
        after: list[Any] = []  # message records after the compaction point, newest first
        kept: list[Any] = []  # the ones before it kept verbatim, newest first
        newest: Mapping[str, Any] | None = None  # the newest message_end line, parsed
        summary: Any = None
        keep = -1  # -1: no compaction point met yet
        before: int | None = None  # messages committed before the compaction point met
        reached_start = False
        source = self._open_source(path)
        try:
            if isinstance(source, FileSource):
                _check_header(path, source.fd)  # a store's sessions were checked when shipped
            for offset, raw in reverse_lines(source, source.complete_end()):
                if keep < 0 and side is not None and offset < side.offset:
                    # The side log's compaction is newer than every record from here back.
                    summary = side.data.get("summary")
                    keep = positive_int(side.data.get("keep_last"))
                    before = stored_count(side.data.get("messages_before"))
                    if keep == 0:
                        reached_start = True
                        break
                kind = _record_type(raw)
                if kind == b"message_end":
                    if keep < 0 and len(after) > want:
                        break  # one beyond the page proves older messages exist
                    record, line = self._decode_line(path, offset, raw)
                    if newest is None:
                        newest = line
                    if keep < 0:
                        after.append(record)
                    else:
                        if not kept and before is None:
                            # The last message before the compaction counts those before it.
                            before = stored_count(line.get("messages"))
                        kept.append(record)
                        if len(kept) >= keep:
                            reached_start = True
                            break
                elif kind == b"compaction" and keep < 0:
                    record, line = self._decode_line(path, offset, raw)
                    data = record.data
                    summary, keep = data.get("summary"), positive_int(data.get("keep_last"))
                    before = stored_count(line.get("messages"))
                    if keep == 0:
                        reached_start = True
                        break
                elif kind == b"session_start":
                    reached_start = True
                    if keep > 0:
                        before = len(kept)  # fewer than keep_last messages came before it
                    break
            totals: tuple[int, int] | None
            if not reached_start:
                totals = self._totals_from_end(source, path, side, newest)
            elif keep < 0:
                totals = (len(after), len(after))
            else:
                if before is None and after:
                    # The newest message's count, less those after the compaction.
                    newest_count = stored_count(newest.get("messages")) if newest else None
                    if newest_count is not None and newest_count >= len(after):
                        before = newest_count - len(after)
                visible = 1 + len(kept) + len(after)
                totals = None if before is None else (visible, before + len(after))
            local = isinstance(source, FileSource)
        finally:
            source.close()
        visible_messages = [r.data.get("message") for r in after]
        visible_messages.extend(r.data.get("message") for r in kept)
        if summary is not None:
            visible_messages.append(
                summary if not isinstance(summary, str) else SystemMessage(summary)
            )
        has_more_beyond = not reached_start and len(after) > want
        chronological = list(reversed(visible_messages))
        window_end = len(chronological) - skip
        window = chronological[max(0, window_end - last) : max(0, window_end)]
        has_more = has_more_beyond or window_end - last > 0
        if totals is None:
            # A file written before lines carried counts: count it, still without parsing.
            if local:
                totals = self._totals(path, side)
            else:
                totals = (
                    self._visible_total(path, side),
                    self.summary_of_path(path).messages_total,
                )
        if reached_start:
            totals = (len(chronological), totals[1])
        return MessagePage(window, has_more, totals[0], totals[1])

    def _totals_from_end(
        self,
        source: ByteSource,
        path: Path,
        side: SideFact | None,
        newest: Mapping[str, Any] | None,
    ) -> tuple[int, int] | None:
        """Visible and committed messages from the newest ``message_end`` line's counts.

        Its ``"messages"`` is the file's committed count and its
        ``"compaction"`` the offset of the latest compaction record before
        it; every record read backwards so far came after the side log's
        compaction, if any. ``None`` when a count is missing (an older
        file) or does not check out: then the file is counted instead.
        """
        committed = None if newest is None else stored_count(newest.get("messages"))
        if committed is None or newest is None:
            return None
        at = newest.get("compaction")
        file_cut = at if type(at) is int and at > 0 else None
        keep = 0
        if file_cut is not None and (side is None or file_cut >= side.offset):
            # The file's own compaction is the latest: one line, read at its offset
            # (with the byte before it, which must end the line before).
            raw = line_at(source, file_cut)
            if raw is None or _record_type(raw) != b"compaction":
                return None
            _record, line = self._decode_line(path, file_cut, raw)
            if line.get("type") != ev.COMPACTION:
                return None
            before = stored_count(line.get("messages"))
            data = line.get("data")
            keep = positive_int(data.get("keep_last")) if isinstance(data, dict) else 0
        elif side is not None:
            before = stored_count(side.data.get("messages_before"))
            keep = positive_int(side.data.get("keep_last"))
        else:
            return committed, committed
        if before is None or before > committed:
            return None
        return 1 + min(keep, before) + committed - before, committed

    def _open_source(self, path: Path) -> ByteSource:
        """The bytes of a session file, read by range."""
        return FileSource(path)

    def _totals(self, path: Path, side: SideFact | None) -> tuple[int, int]:
        """Visible and committed messages of a file whose lines carry no counts."""
        with self._lock:
            cached = self._cache.get(path.name)
            if cached is not None and cached.fresh(path.stat()):
                fold = cached.fold
                if not cached.side:
                    return fold.summary(path, "idle").message_count, fold.messages
        return count_visible(path, side, self.codec)

    def _visible_total(self, path: Path, side: SideFact | None) -> int:
        """The visible message count: the cached summary's, or counted without parsing."""
        return self._totals(path, side)[0]

    def _side_compaction(self, path: Path) -> SideFact | None:
        """The latest compaction in the session's side log, if any."""
        facts = [f for f in read_side(side_path(path), self.codec) if f.kind == ev.COMPACTION]
        return facts[-1] if facts else None

    def _decode_line(self, path: Path, offset: int, raw: bytes) -> tuple[Any, dict[str, Any]]:
        """A line's Record and the parsed line (whose top-level counts a Record leaves out)."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise Scanner(path).corrupt(0, offset, f"not valid JSON ({exc})") from None
        if type(obj) is not dict:
            raise Scanner(path).corrupt(0, offset, "a record must be a JSON object")
        return to_record(Scanner(path), 0, offset, raw, obj, self.codec), obj

    # -- appended facts ----------------------------------------------------------

    def update(self, session_id: str, **fields: Any) -> SessionSummary:
        """Change metadata (title, model, ...) by appending a ``session_update`` record.

        While another process records the session, the change goes to the
        session's side log instead (see the module docstring).

        Raises:
            ValueError: An unknown field.
        """
        _check_fields(fields)
        self._annotate(session_id, ev.SESSION_UPDATE, {"fields": fields})
        return self.get(session_id)

    def set_todos(self, session_id: str, todos: Sequence[Mapping[str, Any]]) -> SessionSummary:
        """Replace the session's todo list by appending a ``todos`` record."""
        self._annotate(session_id, ev.TODOS, {"todos": [dict(t) for t in todos]})
        return self.get(session_id)

    def compact(self, session_id: str, summary: Any, *, keep_last: int = 0) -> SessionSummary:
        """Record a compaction: from now on :meth:`messages` starts with ``summary``.

        Args:
            session_id: The session.
            summary: Text (shown as a ``SystemMessage``) or a message.
            keep_last: Keep this many of the latest messages verbatim after
                the summary.
        """
        if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 0:
            raise ValueError(f"keep_last must be an int >= 0, got {keep_last!r}")
        data: dict[str, Any] = {"summary": summary}
        if keep_last:
            data["keep_last"] = keep_last
        self._annotate(session_id, ev.COMPACTION, data)
        return self.get(session_id)

    def _annotate(self, session_id: str, kind: str, data: Mapping[str, Any]) -> None:
        """Append a session-level fact: to the file if we may write it, else to the side log."""
        path = self._existing(session_id)
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
            self._annotate_side(path, kind, data)
            return
        with writer:
            writer.annotate(kind, data)

    def _annotate_side(self, path: Path, kind: str, data: Mapping[str, Any]) -> None:
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

    # -- removal and artifacts -------------------------------------------------------

    def delete(self, session_id: str) -> None:
        """Remove a session, its artifacts and export files.

        Raises:
            SessionLockedError: The session is running.
        """
        path = self._existing(session_id)
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
        """Keep a file the session produced in its artifact folder, privately.

        The folder is created 0700 and the file 0600; the file is written
        beside its name and renamed into place, so a reader never sees half
        of it, and an artifact of the same name is replaced.

        Args:
            session_id: The session.
            name: A file name: no folder in it, not hidden (no leading ``.``),
                at most 255 bytes.
            data: The file's content.

        Raises:
            ValueError: ``name`` is not such a file name.
            SessionNotFoundError: No such session.
        """
        _check_artifact_name(name)
        _check_header(self._existing(session_id))
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
        _check_header(self._existing(session_id))
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


def _check_fields(fields: Mapping[str, Any]) -> None:
    unknown = set(fields) - METADATA_FIELDS
    if unknown:
        raise ValueError(
            f"unknown session field(s) {sorted(unknown)}; known: {sorted(METADATA_FIELDS)}"
        )
