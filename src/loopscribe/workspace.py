"""A workspace: a folder of session files, listed, paged and annotated.

Everything a session store needs is *derived* from records, *appended* as
records, or *read* from the writer lock — never a header rewritten in place,
and no registry of running sessions that a crash could leave stale:

* summaries (title, model, message count, token usage, parent, todos,
  compaction, created/updated) are folded from the records, cached per file
  and advanced from the last byte offset as a file grows;
* ``update``, ``set_todos`` and ``compact`` append ``session_update``,
  ``todos`` and ``compaction`` records;
* ``running`` means a writer holds the file's lock; ``interrupted`` means the
  last run has no ``run_close`` and nobody holds the lock; else ``idle``;
* ``messages(last=N)`` reads backwards from the end of the file, so its cost
  grows with the page, not with the file.

Files: ``<root>/<session_id>.jsonl``, artifacts in ``<root>/<session_id>.artifacts/``.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import itertools
import os
import secrets
import shutil
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson

from . import events as ev
from ._codec import DEFAULT_CODEC, Codec
from ._errors import FormatError, LoopscribeError, SessionLockedError
from ._fields import field as get_field
from ._fields import plain, text, token_usage
from ._format import Scanner
from ._messages import SystemMessage
from ._reader import to_record
from ._session import Observer, Session, open_handle
from ._source import is_url

__all__ = [
    "Artifact",
    "Compaction",
    "MessagePage",
    "SessionNotFoundError",
    "SessionSummary",
    "Status",
    "Workspace",
    "session_status",
]

Status = Literal["running", "interrupted", "idle"]

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

_BLOCK_BYTES = 1 << 16
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


@dataclass(frozen=True, slots=True)
class Compaction:
    """The latest compaction: the conversation before it is replaced by a summary."""

    at: datetime
    seq: int
    messages_before: int


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """What a session list shows, folded from a session file's records.

    ``path`` is the session's URL (``<store>/sessions/<id>``) when it was read
    from a store.
    """

    id: str
    path: Path | str
    created: datetime
    updated: datetime
    status: Status
    title: str | None = None
    model: str | None = None
    provider: str | None = None
    mode: str | None = None
    role: str | None = None
    agent_name: str | None = None
    color: str | None = None
    skills: tuple[str, ...] = ()
    parent_id: str | None = None
    source: str | None = None
    result: str | None = None
    state: str | None = None
    message_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    runs: int = 0
    records: int = 0
    todos: tuple[Mapping[str, Any], ...] = ()
    compaction: Compaction | None = None


@dataclass(frozen=True, slots=True)
class MessagePage:
    """A window of a session's visible conversation.

    Attributes:
        messages: Oldest first. After a compaction the conversation starts
            with the summary (a ``SystemMessage``).
        has_more: Older visible messages exist before this window.
        total: Visible messages in all (summary included) when known without
            reading the whole file: the page reached the conversation's start,
            or the workspace's summary of the file is current. Otherwise
            ``None``; ``Workspace.get(id).message_count`` counts them.
    """

    messages: list[Any]
    has_more: bool
    total: int | None


@dataclass(frozen=True, slots=True)
class Artifact:
    """A file produced during a session (``path``: a URL for a shipped session's artifact)."""

    name: str
    path: Path | str
    size: int
    created: datetime


@dataclass(slots=True)
class _Fold:
    """The running summary of one file, advanced record by record."""

    id: str = ""
    created: datetime | None = None
    updated: datetime | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    seen_model: str | None = None
    messages: int = 0
    visible_from: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    runs: int = 0
    run_open: bool = False
    records: int = 0
    todos: tuple[Mapping[str, Any], ...] = ()
    compaction: Compaction | None = None

    def feed(self, kind: str, seq: int, ts: datetime, data: Mapping[str, Any], sid: str) -> None:
        self.records += 1
        self.updated = ts
        if kind == ev.SESSION_START:
            self.id, self.created = sid, ts
            self.meta.update(data.get("metadata") or {})
        elif kind == ev.SESSION_UPDATE:
            self.meta.update(data.get("fields") or {})
        elif kind == ev.TODOS:
            self.todos = tuple(data.get("todos") or ())
        elif kind == ev.COMPACTION:
            self.compaction = Compaction(ts, seq, self.messages)
        elif kind == ev.MESSAGE_END:
            self.messages += 1
        elif kind in (ev.MODEL_EXEC_START, ev.MODEL_REQUEST):
            self.seen_model = text(plain(data.get("model"))) or self.seen_model
        elif kind == ev.MODEL_EXEC_END:
            usage = token_usage(plain(data.get("usage")))
            if usage is None:
                usage = token_usage(get_field(plain(data.get("message")), "usage"))
            if usage is not None:
                self.input_tokens += usage.input_tokens or 0
                self.output_tokens += usage.output_tokens or 0
        elif kind == ev.RUN_START:
            self.runs += 1
            self.run_open = True
        elif kind == ev.RUN_CLOSE:
            self.run_open = False

    def summary(self, path: Path, status: Status) -> SessionSummary:
        meta = self.meta
        created = self.created or datetime.fromtimestamp(0, UTC)
        skills = meta.get("skills") or ()
        return SessionSummary(
            id=self.id,
            path=path,
            created=created,
            updated=self.updated or created,
            status=status,
            title=_opt_str(meta.get("title")),
            model=_opt_str(meta.get("model")) or self.seen_model,
            provider=_opt_str(meta.get("provider")),
            mode=_opt_str(meta.get("mode")),
            role=_opt_str(meta.get("role")),
            agent_name=_opt_str(meta.get("agent_name")),
            color=_opt_str(meta.get("color")),
            skills=tuple(str(s) for s in skills) if isinstance(skills, list | tuple) else (),
            parent_id=_opt_str(meta.get("parent_id")),
            source=_opt_str(meta.get("source")),
            result=_opt_str(meta.get("result")),
            state=_opt_str(meta.get("state")),
            message_count=self.messages,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            runs=self.runs,
            records=self.records,
            todos=self.todos,
            compaction=self.compaction,
        )


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(slots=True)
class _Cached:
    """A file's fold and where it stopped: enough to skip or extend the file."""

    path: Path
    fold: _Fold
    scanner: Scanner
    offset: int
    lines: int
    size: int
    mtime_ns: int
    inode: int
    summary: SessionSummary | None = None

    def fresh(self, st: os.stat_result) -> bool:
        """Whether the file is exactly as it was when last folded."""
        return (
            self.inode == st.st_ino and self.size == st.st_size and self.mtime_ns == st.st_mtime_ns
        )


def _locked_inodes() -> set[tuple[int, int]] | None:
    """(device, inode) of every flock-ed file, from /proc/locks; ``None`` if unavailable.

    Reading /proc/locks has no side effect. Probing by taking the lock
    would, for an instant, make a writer's ``Session.open`` fail.
    """
    try:
        with open("/proc/locks", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    out: set[tuple[int, int]] = set()
    for line in raw.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:2147158 0 EOF"; waiters read "1: -> FLOCK".
        if len(parts) < 6 or parts[1] != b"FLOCK":
            continue
        try:
            major, minor, inode = parts[5].split(b":")
            out.add((os.makedev(int(major, 16), int(minor, 16)), int(inode)))
        except ValueError:
            continue
    return out


def _is_locked(path: Path, st: os.stat_result, locked: set[tuple[int, int]] | None) -> bool:
    if locked is not None:
        # /proc/locks lists this process's own writers too.
        return (st.st_dev, st.st_ino) in locked
    if open_handle(path) is not None:
        return True
    # No /proc/locks (not Linux): probe with a shared lock, released at once.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def session_status(path: str | os.PathLike[str]) -> Status:
    """``running``, ``interrupted`` or ``idle`` for one session file (reads it whole)."""
    return Workspace(Path(path).parent).summary_of_path(Path(path)).status


class _FileSource:
    """A local session file as a byte-range source (a store's shipped session is another)."""

    __slots__ = ("fd",)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def complete_end(self) -> int:
        """The offset just after the last ``\\n``: an unfinished final line is left out."""
        pos = os.fstat(self.fd).st_size
        while pos > 0:
            size = min(_BLOCK_BYTES, pos)
            block = os.pread(self.fd, size, pos - size)
            newline = block.rfind(b"\n")
            if newline >= 0:
                return pos - size + newline + 1
            pos -= size
        return 0

    def close(self) -> None:
        os.close(self.fd)


class _ByteSource(Protocol):
    """Where a session's bytes are read by range: ``pread``, ``complete_end``, ``close``."""

    def pread(self, size: int, offset: int) -> bytes: ...
    def complete_end(self) -> int: ...
    def close(self) -> None: ...


def _reverse_lines(source: _ByteSource, end: int) -> Iterator[tuple[int, bytes]]:
    """Complete lines before byte ``end`` (a line boundary), last first, with offsets."""
    pos = end
    carry = b""
    while pos > 0:
        size = min(_BLOCK_BYTES, pos)
        pos -= size
        block = source.pread(size, pos) + carry
        pieces = block.split(b"\n")
        # pieces[-1] is empty (block ends at a line boundary); pieces[0] may
        # continue in the block before, unless this block starts the file.
        first = 0 if pos == 0 else 1
        # The first piece is the end of a line that starts in the block before:
        # carry it (with its newline) so that block also ends on a line boundary.
        carry = b"" if pos == 0 else pieces[0] + b"\n"
        cursor = pos + len(block)
        for piece in reversed(pieces[first:-1]):
            cursor -= len(piece) + 1
            yield cursor, piece + b"\n"


def tail_offset(path: str | os.PathLike[str], lines: int) -> int:
    """The byte offset where the last ``lines`` complete records start (read backwards)."""
    source = _FileSource(path)
    try:
        end = source.complete_end()
        starts = [offset for offset, _raw in itertools.islice(_reverse_lines(source, end), lines)]
        return starts[-1] if starts else end
    finally:
        source.close()


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

    def __new__(cls, root: str | os.PathLike[str], *, codec: Codec | None = None) -> Workspace:
        if cls is Workspace and is_url(root):
            from .store._workspace import StoreWorkspace

            return super().__new__(StoreWorkspace)
        return super().__new__(cls)

    def __init__(self, root: str | os.PathLike[str], *, codec: Codec | None = None) -> None:
        self.root = Path(root).absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        self.codec = codec or DEFAULT_CODEC
        self._cache: dict[str, _Cached] = {}  # by file name
        self._listed: tuple[tuple[int, ...], builtins.list[SessionSummary]] = ((), [])
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

    def list(self, include_children: bool = False) -> list[SessionSummary]:
        """Summaries of the workspace's sessions, most recently updated first.

        Files are read only when new or changed since the last call (one
        ``stat`` each tells); a file that grew is read from where the last
        call stopped. Files that are not session files are skipped.

        Args:
            include_children: Also list sessions with a ``parent_id``.
        """
        locked = _locked_inodes()
        summaries: list[SessionSummary] = []
        seen: set[str] = set()
        see, keep, is_reg = seen.add, summaries.append, stat.S_ISREG
        summarize = self._summary_locked
        with self._lock, os.scandir(self.root) as entries:
            for entry in entries:
                name = entry.name
                if not name.endswith(".jsonl") or name.endswith(".otlp.jsonl"):
                    continue
                try:
                    st = entry.stat()
                    if not is_reg(st.st_mode):
                        continue
                    see(name)
                    summary = summarize(name, st, locked)
                except (FormatError, OSError):
                    continue
                if include_children or summary.parent_id is None:
                    keep(summary)
            for gone in self._cache.keys() - seen:
                del self._cache[gone]
            # Summaries are rebuilt only when something changed: the same
            # objects in the same scan order give the same sorted list.
            identity = tuple(map(id, summaries))
            if identity == self._listed[0]:
                return list(self._listed[1])
        summaries_sorted = sorted(summaries, key=lambda s: (s.updated, s.id), reverse=True)
        with self._lock:
            self._listed = (identity, summaries_sorted)
        return list(summaries_sorted)

    def get(self, session_id: str) -> SessionSummary:
        """The summary of one session.

        Raises:
            SessionNotFoundError: No such session.
            CorruptRecordError: Its file is damaged.
        """
        path = self._existing(session_id)
        return self._summary(path.name, path.stat(), _locked_inodes())

    def status(self, session_id: str) -> Status:
        """``running`` (a writer holds the lock), ``interrupted`` or ``idle``."""
        return self.get(session_id).status

    def summary_of_path(self, path: Path) -> SessionSummary:
        """The summary of a session file given by path (in this workspace's folder)."""
        return self._summary(path.name, (self.root / path.name).stat(), _locked_inodes())

    def _summary(
        self, name: str, st: os.stat_result, locked: set[tuple[int, int]] | None
    ) -> SessionSummary:
        with self._lock:
            return self._summary_locked(name, st, locked)

    def _summary_locked(
        self, name: str, st: os.stat_result, locked: set[tuple[int, int]] | None
    ) -> SessionSummary:
        """:meth:`_summary` with the lock held: the file read only if new or changed."""
        cached = self._cache.get(name)
        if cached is None or not cached.fresh(st):
            cached = self._advance(self.root / name, st, cached)
        running = _is_locked(cached.path, st, locked)
        status: Status = "running" if running else "interrupted" if cached.fold.run_open else "idle"
        if cached.summary is None or cached.summary.status != status:
            cached.summary = cached.fold.summary(cached.path, status)
        return cached.summary

    def _advance(self, path: Path, st: os.stat_result, cached: _Cached | None) -> _Cached:
        """Extend a cached fold over the bytes a file grew by, or fold it anew."""
        grew = cached is not None and cached.inode == st.st_ino and st.st_size > cached.offset
        if cached is None or not grew:
            cached = _Cached(path, _Fold(), Scanner(path), 0, 0, 0, 0, st.st_ino)
        cached.summary = None
        self.files_read += 1
        fold, scanner = cached.fold, cached.scanner
        with open(path, "rb", buffering=_BLOCK_BYTES) as stream:
            stream.seek(cached.offset)
            for number, _offset, _raw, obj in scanner.lines(
                stream, offset=cached.offset, first_line=cached.lines + 1
            ):
                data = obj.get("data")
                fold.feed(
                    obj["type"],
                    obj["seq"],
                    scanner.ts,
                    data if isinstance(data, dict) else {},
                    obj["session_id"],
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
        newest_first: list[Any] = []
        summary: Any = None
        reached_start = False
        source = self._open_source(path)
        try:
            for offset, raw in _reverse_lines(source, source.complete_end()):
                kind = _record_type(raw)
                if kind == b"message_end":
                    if len(newest_first) > want:
                        break  # one beyond the page proves older messages exist
                    newest_first.append(self._decode(path, offset, raw))
                elif kind == b"compaction":
                    summary = self._decode(path, offset, raw).data.get("summary")
                    reached_start = True
                    break
                elif kind == b"session_start":
                    reached_start = True
                    break
        finally:
            source.close()
        visible = [r.data.get("message") for r in newest_first]
        if summary is not None:
            visible.append(summary if not isinstance(summary, str) else SystemMessage(summary))
        has_more_beyond = not reached_start and len(newest_first) > want
        chronological = list(reversed(visible))
        window_end = len(chronological) - skip
        window = chronological[max(0, window_end - last) : max(0, window_end)]
        has_more = has_more_beyond or window_end - last > 0
        total = len(chronological) if reached_start else self._visible_total(path)
        return MessagePage(window, has_more, total)

    def _open_source(self, path: Path) -> _ByteSource:
        """The bytes of a session file, read by range."""
        return _FileSource(path)

    def _visible_total(self, path: Path) -> int | None:
        """The visible message count, if known without reading the file."""
        with self._lock:
            cached = self._cache.get(path.name)
            if cached is None or not cached.fresh(path.stat()):
                return None  # counting would read the whole file: see get()
            fold = cached.fold
        if fold.compaction is None:
            return fold.messages
        return fold.messages - fold.compaction.messages_before + 1

    def _decode(self, path: Path, offset: int, raw: bytes) -> Any:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise Scanner(path).corrupt(0, offset, f"not valid JSON ({exc})") from None
        return to_record(Scanner(path), 0, offset, raw, obj, self.codec)

    # -- appended facts ----------------------------------------------------------

    def update(self, session_id: str, **fields: Any) -> SessionSummary:
        """Change metadata (title, model, ...) by appending a ``session_update`` record.

        Raises:
            SessionLockedError: Another process is writing the session.
            ValueError: An unknown field.
        """
        _check_fields(fields)
        self._annotate(session_id, ev.SESSION_UPDATE, {"fields": fields})
        return self.get(session_id)

    def set_todos(self, session_id: str, todos: Sequence[Mapping[str, Any]]) -> SessionSummary:
        """Replace the session's todo list by appending a ``todos`` record."""
        self._annotate(session_id, ev.TODOS, {"todos": [dict(t) for t in todos]})
        return self.get(session_id)

    def compact(self, session_id: str, summary: Any) -> SessionSummary:
        """Record a compaction: from now on :meth:`messages` starts with ``summary``.

        Args:
            session_id: The session.
            summary: Text (shown as a ``SystemMessage``) or a message.
        """
        self._annotate(session_id, ev.COMPACTION, {"summary": summary})
        return self.get(session_id)

    def _annotate(self, session_id: str, kind: str, data: Mapping[str, Any]) -> None:
        path = self._existing(session_id)
        session = open_handle(path)
        if session is not None:
            # This process is the writer: append through its handle.
            session.annotate(kind, data)
            return
        try:
            writer = Session.open(path, self.codec)
        except SessionLockedError:
            raise SessionLockedError(
                errno.EWOULDBLOCK,
                f"session {session_id} is being written by another process; change it "
                "from that process (or after it closes the session)",
            ) from None
        with writer:
            writer.annotate(kind, data)

    # -- removal and artifacts -------------------------------------------------------

    def delete(self, session_id: str) -> None:
        """Remove a session, its artifacts and export files.

        Raises:
            SessionLockedError: The session is running.
        """
        path = self._existing(session_id)
        if self.status(session_id) == "running":
            raise SessionLockedError(
                errno.EBUSY,
                f"session {session_id} is running (a writer holds {path.name}); "
                "close it before deleting",
            )
        for extra in (
            path.with_name(path.name + ".otlp.jsonl"),
            path.with_name(path.name + ".export-cursor"),
            path.with_name(path.name + ".ship-cursor"),
        ):
            extra.unlink(missing_ok=True)
        shutil.rmtree(self.artifact_dir(session_id), ignore_errors=True)
        path.unlink()
        with self._lock:
            self._cache.pop(path.name, None)

    def artifacts(self, session_id: str) -> builtins.list[Artifact]:
        """Files in the session's artifact folder, by name; empty if there is none."""
        self._existing(session_id)
        folder = self.artifact_dir(session_id)
        out: list[Artifact] = []
        with contextlib.suppress(FileNotFoundError):
            for entry in sorted(folder.rglob("*")):
                if entry.is_file():
                    st = entry.stat()
                    created = datetime.fromtimestamp(st.st_mtime, UTC)
                    out.append(Artifact(str(entry.relative_to(folder)), entry, st.st_size, created))
        return out


def _check_fields(fields: Mapping[str, Any]) -> None:
    unknown = set(fields) - METADATA_FIELDS
    if unknown:
        raise ValueError(
            f"unknown session field(s) {sorted(unknown)}; known: {sorted(METADATA_FIELDS)}"
        )
