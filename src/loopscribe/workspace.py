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

import bisect
import builtins
import contextlib
import errno
import itertools
import mmap
import os
import re
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol

import orjson

from . import events as ev
from ._codec import DEFAULT_CODEC, Codec
from ._cost import ZERO, Cost, call_cost
from ._errors import FormatError, LoopscribeError, SessionLockedError
from ._fields import field as get_field
from ._fields import plain, text, token_usage
from ._files import append_whole, complete_end, make_private_dir, open_append, replace_file
from ._format import Scanner, format_ts, parse_ts
from ._gc import collector_paused
from ._locks import HAVE_LOCKS, fcntl
from ._messages import SystemMessage
from ._reader import to_record
from ._safeopen import open_session_fd, open_session_file
from ._session import Observer, Session, open_handle
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

Status = Literal["running", "interrupted", "failed", "idle"]
"""The one vocabulary of a session's state, in the CLI, ``--json``, the viewer and the docs.

``running``: a run (an agent's turn) is open and its writer is alive; for an
imported transcript, its turn is open and its own last record is less than
:data:`IMPORT_SETTLE_SECONDS` old. ``interrupted``: a run is open but nothing
writes it any more (the process died, or the transcript stopped mid-turn).
``failed``: the last run ended with an error (``agent_end`` with an error or
``stop_reason`` "error", or, without ``agent_end``, a failed last
``model_exec_end``). ``idle``: otherwise (the last turn is over)."""

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


class NotASessionError(FormatError):
    """A workspace file's first line is not a loopscribe session header."""


_SIDE_SUFFIX = ".meta"
_HEADER_PROBE = b'"type":"session_start"'


def _check_header(path: Path, fd: int | None = None) -> None:
    """Raise :class:`NotASessionError` unless the first line is a ``session_start``."""
    own = fd is None
    if fd is None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        head = os.pread(fd, _BLOCK_BYTES, 0)
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
class Compaction:
    """The latest compaction: the conversation before it is replaced by a summary.

    Attributes:
        at: When it was recorded.
        seq: Its record's seq (``-1`` when it came from the side log).
        messages_before: Messages committed before it.
        summary: The summary's text (a message's text when it is a message).
        keep_last: Messages before it kept verbatim after the summary.
    """

    at: datetime
    seq: int
    messages_before: int
    summary: str | None = None
    keep_last: int = 0


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
    """Messages a reader sees now: after a compaction, the summary, the kept ones and later."""
    messages_total: int = 0
    """Messages ever committed, compacted away or not."""
    input_tokens: int = 0
    output_tokens: int = 0
    runs: int = 0
    records: int = 0
    todos: tuple[Mapping[str, Any], ...] = ()
    compaction: Compaction | None = None
    cost: Cost = ZERO
    """What the model calls cost, priced from their usage when folded (``docs/cost.md``)."""


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
class _Fold:
    """The running summary of one file, advanced record by record."""

    id: str = ""
    created: datetime | None = None
    updated: datetime | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    seen_model: str | None = None
    seen_provider: str | None = None
    cost: Cost = ZERO
    messages: int = 0
    visible_from: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    runs: int = 0
    run_open: bool = False
    records: int = 0
    todos: tuple[Mapping[str, Any], ...] = ()
    todos_at: datetime | None = None
    meta_at: dict[str, datetime] = field(default_factory=dict)
    compaction: Compaction | None = None
    first_user_text: str | None = None
    run_error: bool = False
    run_agent_end: bool = False
    last_run_failed: bool = False

    def feed(
        self,
        kind: str,
        seq: int,
        ts: datetime,
        data: Mapping[str, Any],
        sid: str,
        top: bool = True,
    ) -> None:
        self.records += 1
        self.updated = ts
        if kind == ev.SESSION_START:
            self.id, self.created = sid, ts
            self.meta.update(data.get("metadata") or {})
        elif kind in _FACTS:
            self.fact(kind, seq, ts, data)
        elif kind == ev.MESSAGE_END:
            self.messages += 1
            if self.first_user_text is None:
                self.first_user_text = _user_text(plain(data.get("message")))
        elif kind in (ev.MODEL_EXEC_START, ev.MODEL_REQUEST):
            self.seen_model = text(plain(data.get("model"))) or self.seen_model
            self.seen_provider = text(plain(data.get("provider"))) or self.seen_provider
        elif kind == ev.MODEL_EXEC_END:
            message = plain(data.get("message"))
            usage = token_usage(plain(data.get("usage")))
            if usage is None:
                usage = token_usage(get_field(message, "usage"))
            if usage is not None:
                self.input_tokens += usage.input_tokens or 0
                self.output_tokens += usage.output_tokens or 0
                model = text(get_field(message, "model")) or self.seen_model
                self.cost += call_cost(model, self.seen_provider, usage, ts)
            if not self.run_agent_end:
                # A standalone call: its outcome is the run's, unless an agent_end says.
                self.run_error = data.get("error") is not None
        elif kind == ev.AGENT_END and top:
            # The top-level agent decides the run's outcome; nested agents end inside it.
            self.run_agent_end = True
            self.run_error = data.get("error") is not None or data.get("stop_reason") == "error"
        elif kind == ev.RUN_START:
            self.runs += 1
            self.run_open = True
            self.run_error = self.run_agent_end = False
        elif kind == ev.RUN_CLOSE:
            self.run_open = False
            self.last_run_failed = self.run_error

    def fact(self, kind: str, seq: int, ts: datetime, data: Mapping[str, Any]) -> None:
        """A session-level fact, from the file or the side log; the newer one wins."""
        if kind == ev.SESSION_UPDATE:
            for name, value in (data.get("fields") or {}).items():
                at = self.meta_at.get(name)
                if at is None or at <= ts:
                    self.meta[name] = value
                    self.meta_at[name] = ts
        elif kind == ev.TODOS:
            if self.todos_at is None or self.todos_at <= ts:
                self.todos = tuple(data.get("todos") or ())
                self.todos_at = ts
        elif kind == ev.COMPACTION and (self.compaction is None or self.compaction.at <= ts):
            summary = plain(data.get("summary"))
            before = data.get("messages_before")
            self.compaction = Compaction(
                ts,
                seq,
                before if isinstance(before, int) else self.messages,
                summary if isinstance(summary, str) else _message_text(summary),
                _keep(data.get("keep_last")),
            )

    def summary(self, path: Path, status: Status) -> SessionSummary:
        meta = self.meta
        created = self.created or datetime.fromtimestamp(0, UTC)
        skills = meta.get("skills") or ()
        visible = self.messages
        if self.compaction is not None:
            c = self.compaction
            visible = 1 + min(c.keep_last, c.messages_before) + self.messages - c.messages_before
        return SessionSummary(
            id=self.id,
            path=path,
            created=created,
            updated=self.updated or created,
            status=status,
            title=_opt_str(meta.get("title")) or _title_from(self.first_user_text),
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
            message_count=visible,
            messages_total=self.messages,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            runs=self.runs,
            records=self.records,
            todos=self.todos,
            compaction=self.compaction,
            cost=self.cost,
        )


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


_FACTS = frozenset({ev.SESSION_UPDATE, ev.TODOS, ev.COMPACTION})
_TITLE_CHARS = 80


def _keep(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _count(value: Any) -> int | None:
    """A stored message count, or ``None`` if it is missing or not a count."""
    return value if type(value) is int and value >= 0 else None


def _message_text(message: Any) -> str | None:
    """The text parts of a message (stored form or object), joined; ``None`` if none."""
    if message is None:
        return None
    content = get_field(message, "content")
    if isinstance(content, str):
        return content or None
    if isinstance(content, list | tuple):
        parts = [get_field(part, "text") for part in content]
        joined = "".join(p for p in parts if isinstance(p, str))
        return joined or None
    return None


def _user_text(message: Any) -> str | None:
    if get_field(message, "role") != "user":
        return None
    return _message_text(message)


def _title_from(first_user_text: str | None) -> str | None:
    """A title derived from the first user message: its first line, shortened."""
    if not first_user_text:
        return None
    line = " ".join(first_user_text.split())
    if len(line) <= _TITLE_CHARS:
        return line or None
    return line[: _TITLE_CHARS - 1].rstrip() + "…"


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
    side_key: tuple[int, int] | None = None
    side: list[_SideFact] = field(default_factory=list)
    steady: SessionSummary | None = None
    """The summary while the file stays as it is: set when its status cannot change
    without the file changing (no run open, or one left by a writer that is gone;
    no side log), else ``None``."""

    def fresh(self, st: os.stat_result) -> bool:
        """Whether the file is exactly as it was when last folded."""
        return (
            self.inode == st.st_ino and self.size == st.st_size and self.mtime_ns == st.st_mtime_ns
        )


@dataclass(frozen=True, slots=True)
class _SideFact:
    """One line of a side log: a session-level fact written while another process records."""

    kind: str
    ts: datetime
    data: Mapping[str, Any]
    offset: int  # the session file's complete end when it was written


def _side_path(path: Path) -> Path:
    return path.with_name(path.name + _SIDE_SUFFIX)


def _read_side(path: Path, codec: Codec) -> list[_SideFact]:
    """The complete lines of a side log (an unfinished last line is left out)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    return _parse_side(raw, path, codec)


def _parse_side(raw: bytes, path: Path, codec: Codec) -> list[_SideFact]:
    """The facts in a side log's bytes (``path`` names it in errors)."""
    out: list[_SideFact] = []
    end = raw.rfind(b"\n") + 1
    for number, line in enumerate(raw[:end].splitlines(), 1):
        try:
            obj = codec.loads(line)
            out.append(_SideFact(obj["type"], parse_ts(obj["ts"]), obj["data"], int(obj["offset"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise FormatError(
                f"{path}:{number}: not a side-log line ({exc}); the file was changed "
                "outside loopscribe. Remove the damaged line",
                path=path,
                line=number,
            ) from None
    return out


def _with_side(fold: _Fold, side: list[_SideFact]) -> _Fold:
    """``fold`` with a side log's facts folded in (a copy; ``fold`` itself when none)."""
    if not side:
        return fold
    fold = replace(fold, meta=dict(fold.meta), meta_at=dict(fold.meta_at))
    for fact in side:
        fold.fact(fact.kind, -1, fact.ts, fact.data)
    fold.updated = max(fold.updated or fold.created or side[-1].ts, side[-1].ts)
    return fold


def _append_side(path: Path, codec: Codec, kind: str, data: Mapping[str, Any], offset: int) -> None:
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


class _Locks(NamedTuple):
    """(device, inode) of the files with a writer, and of those with a run open by it."""

    writers: set[tuple[int, int]]
    runs: set[tuple[int, int]]


def _locked_inodes() -> _Locks | None:
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
    locks = _Locks(set(), set())
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


def _is_locked(path: Path, st: os.stat_result, locked: _Locks | None) -> bool:
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
            elif name.endswith(_SIDE_SUFFIX):
                sides.add(name[: -len(_SIDE_SUFFIX)])
    settled = max(key[2], key[3]) < started - _FOLDER_TRUST_NS
    return _Names(key, sessions, frozenset(sides), settled)


def _imported_and_recent(fold: _Fold) -> bool:
    """An imported transcript's open turn, its own last record recent: still being written."""
    if not isinstance(fold.meta.get("import"), Mapping) or fold.updated is None:
        return False
    age = datetime.now(UTC) - fold.updated
    return age.total_seconds() < IMPORT_SETTLE_SECONDS


def session_status(path: str | os.PathLike[str]) -> Status:
    """``running``, ``interrupted``, ``failed`` or ``idle`` for one session file."""
    return Workspace(Path(path).parent).summary_of_path(Path(path)).status


class _FileSource:
    """A local session file as a byte-range source (a store's shipped session is another)."""

    __slots__ = ("fd",)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.fd = open_session_fd(path)

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def complete_end(self) -> int:
        """The offset just after the last ``\\n``: an unfinished final line is left out."""
        return complete_end(self.fd)

    def close(self) -> None:
        os.close(self.fd)


class _ByteSource(Protocol):
    """Where a session's bytes are read by range: ``pread``, ``complete_end``, ``close``."""

    def pread(self, size: int, offset: int) -> bytes: ...
    def complete_end(self) -> int: ...
    def close(self) -> None: ...


def _line_at(source: _ByteSource, offset: int) -> bytes | None:
    """The complete line starting at ``offset`` (> 0); ``None`` if no line starts there."""
    head = source.pread(_BLOCK_BYTES, offset - 1)
    if head[:1] != b"\n":
        return None  # the byte before a line's start ends the line before
    parts = [head[1:]]
    pos = offset - 1 + len(head)
    while b"\n" not in parts[-1]:
        more = source.pread(_BLOCK_BYTES, pos)
        if not more:
            return None
        parts.append(more)
        pos += len(more)
    line = b"".join(parts)
    return line[: line.index(b"\n") + 1]


def _reverse_lines(source: _ByteSource, end: int) -> Iterator[tuple[int, bytes]]:
    """Complete lines before byte ``end`` (a line boundary), last first, with offsets.

    Each block is read and split once, and a line longer than a block is
    joined once from its blocks, so the cost is linear in the bytes read
    even for one line of hundreds of megabytes.
    """
    pos = end
    # The line that ends where the blocks read so far begin, its last part first.
    carry: list[bytes] = []
    while pos > 0:
        size = min(_BLOCK_BYTES, pos)
        pos -= size
        block = source.pread(size, pos)
        if b"\n" not in block:
            carry.append(block)  # the middle of a long line
            continue
        pieces = block.split(b"\n")
        # The last piece begins the line whose rest was read before (none at ``end``).
        cursor = pos + len(block) - len(pieces[-1])
        if carry:
            carry.append(pieces[-1])
            carry.reverse()
            yield cursor, b"".join(carry)
        for piece in reversed(pieces[1:-1]):
            cursor -= len(piece) + 1
            yield cursor, piece + b"\n"
        # The first piece ends a line that starts in a block before (or starts the file).
        carry = [pieces[0] + b"\n"]
    if carry:
        carry.reverse()
        yield 0, b"".join(carry)


# A record line's start: nothing inside a JSON line can hold a raw newline.
_LINE_HEAD = re.compile(rb'\n\{"session_id":"[0-9a-f]{32}","seq":\d+,')
_HEAD_MAX = 80  # a line's start to its "type" key: 15 + 32 + 8 + up to 20 digits + 1
_MESSAGE_END = b'"type":"message_end",'
_COMPACTION = b'"type":"compaction",'


def _record_starts(data: mmap.mmap, pattern: bytes, end: int) -> list[int]:
    """Offsets of the lines before ``end`` whose record type is ``pattern``'s.

    ``find`` jumps between candidates; each is kept only if it sits right
    after a line's ``session_id`` and ``seq``, so a nested value that looks
    like a record type is never counted.
    """
    out: list[int] = []
    find, rfind, head = data.find, data.rfind, _LINE_HEAD.fullmatch
    i = find(pattern, 0, end)
    while i >= 0:
        j = rfind(b"\n", max(0, i - _HEAD_MAX), i)
        if j >= 0 and head(data[j:i]) is not None:
            out.append(j + 1)
        i = find(pattern, i + 1, end)
    return out


def _count_visible(path: Path, side: _SideFact | None, codec: Codec) -> tuple[int, int]:
    """Visible and committed messages, counted from the record types at line starts.

    For files whose lines carry no counts (written before they did): a
    fresh Workspace uses it for ``MessagePage.total``, because a byte search
    of the mapped file (no JSON parsing) costs a fraction of folding every
    record into a summary.
    """
    compaction: tuple[int, int] | None = None  # (offset, messages before it)
    source = _FileSource(path)
    fd = source.fd
    try:
        end = source.complete_end()
        if end == 0:
            return 0, 0
        with mmap.mmap(fd, end, access=mmap.ACCESS_READ) as data:
            ends = _record_starts(data, _MESSAGE_END, end)
            cuts = _record_starts(data, _COMPACTION, end)
            messages = len(ends)
            if cuts:
                last = cuts[-1]
                compaction = (last, bisect.bisect_left(ends, last))
        keep, before = 0, messages
        if side is not None and (compaction is None or compaction[0] < side.offset):
            keep = _keep(side.data.get("keep_last"))
            stored = side.data.get("messages_before")
            before = stored if isinstance(stored, int) else messages
        elif compaction is not None:
            offset, before = compaction
            line = os.pread(fd, _BLOCK_BYTES, offset)
            newline = line.find(b"\n")
            if newline >= 0:
                record = codec.loads(line[: newline + 1]).get("data") or {}
                keep = _keep(record.get("keep_last"))
        else:
            return messages, messages
    finally:
        os.close(fd)
    return 1 + min(keep, before) + messages - before, messages


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
        locks: builtins.list[_Locks | None] = []
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
                        locks.append(_locked_inodes())
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
        return self._summary(path.name, path.stat(), _locked_inodes())

    def status(self, session_id: str) -> Status:
        """``running``, ``interrupted``, ``failed`` or ``idle``: see :data:`Status`."""
        return self.get(session_id).status

    def summary_of_path(self, path: Path) -> SessionSummary:
        """The summary of a session file given by path (in this workspace's folder)."""
        return self._summary(path.name, (self.root / path.name).stat(), _locked_inodes())

    def _summary(self, name: str, st: os.stat_result, locked: _Locks | None) -> SessionSummary:
        side = (self.root / name).with_name(name + _SIDE_SUFFIX).exists()
        with self._lock:
            return self._summary_locked(name, st, locked, side)

    def _summary_locked(
        self,
        name: str,
        st: os.stat_result,
        locked: _Locks | None,
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
            elif not _is_locked(cached.path, st, locked):
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
            fold = _with_side(fold, cached.side)
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
        side_path = _side_path(cached.path)
        key: tuple[int, int] | None = None
        if exists:
            try:
                st = side_path.stat()
                key = (st.st_size, st.st_mtime_ns)
            except FileNotFoundError:
                key = None
        if key == cached.side_key:
            return
        cached.side_key = key
        cached.side = _read_side(side_path, self.codec) if key is not None else []
        cached.summary = None

    def _advance(self, path: Path, st: os.stat_result, cached: _Cached | None) -> _Cached:
        """Extend a cached fold over the bytes a file grew by, or fold it anew."""
        grew = cached is not None and cached.inode == st.st_ino and st.st_size > cached.offset
        if cached is None or not grew:
            _check_header(path)
            cached = _Cached(path, _Fold(), Scanner(path), 0, 0, 0, 0, st.st_ino)
        cached.summary = None
        self.files_read += 1
        fold, scanner = cached.fold, cached.scanner
        with open_session_file(path, _BLOCK_BYTES) as stream:
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
            if isinstance(source, _FileSource):
                _check_header(path, source.fd)  # a store's sessions were checked when shipped
            for offset, raw in _reverse_lines(source, source.complete_end()):
                if keep < 0 and side is not None and offset < side.offset:
                    # The side log's compaction is newer than every record from here back.
                    summary, keep = side.data.get("summary"), _keep(side.data.get("keep_last"))
                    before = _count(side.data.get("messages_before"))
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
                            before = _count(line.get("messages"))
                        kept.append(record)
                        if len(kept) >= keep:
                            reached_start = True
                            break
                elif kind == b"compaction" and keep < 0:
                    record, line = self._decode_line(path, offset, raw)
                    data = record.data
                    summary, keep = data.get("summary"), _keep(data.get("keep_last"))
                    before = _count(line.get("messages"))
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
                    newest_count = _count(newest.get("messages")) if newest else None
                    if newest_count is not None and newest_count >= len(after):
                        before = newest_count - len(after)
                visible = 1 + len(kept) + len(after)
                totals = None if before is None else (visible, before + len(after))
            local = isinstance(source, _FileSource)
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
        source: _ByteSource,
        path: Path,
        side: _SideFact | None,
        newest: Mapping[str, Any] | None,
    ) -> tuple[int, int] | None:
        """Visible and committed messages from the newest ``message_end`` line's counts.

        Its ``"messages"`` is the file's committed count and its
        ``"compaction"`` the offset of the latest compaction record before
        it; every record read backwards so far came after the side log's
        compaction, if any. ``None`` when a count is missing (an older
        file) or does not check out: then the file is counted instead.
        """
        committed = None if newest is None else _count(newest.get("messages"))
        if committed is None or newest is None:
            return None
        at = newest.get("compaction")
        file_cut = at if type(at) is int and at > 0 else None
        keep = 0
        if file_cut is not None and (side is None or file_cut >= side.offset):
            # The file's own compaction is the latest: one line, read at its offset
            # (with the byte before it, which must end the line before).
            raw = _line_at(source, file_cut)
            if raw is None or _record_type(raw) != b"compaction":
                return None
            _record, line = self._decode_line(path, file_cut, raw)
            if line.get("type") != ev.COMPACTION:
                return None
            before = _count(line.get("messages"))
            data = line.get("data")
            keep = _keep(data.get("keep_last")) if isinstance(data, dict) else 0
        elif side is not None:
            before = _count(side.data.get("messages_before"))
            keep = _keep(side.data.get("keep_last"))
        else:
            return committed, committed
        if before is None or before > committed:
            return None
        return 1 + min(keep, before) + committed - before, committed

    def _open_source(self, path: Path) -> _ByteSource:
        """The bytes of a session file, read by range."""
        return _FileSource(path)

    def _totals(self, path: Path, side: _SideFact | None) -> tuple[int, int]:
        """Visible and committed messages of a file whose lines carry no counts."""
        with self._lock:
            cached = self._cache.get(path.name)
            if cached is not None and cached.fresh(path.stat()):
                fold = cached.fold
                if not cached.side:
                    return fold.summary(path, "idle").message_count, fold.messages
        return _count_visible(path, side, self.codec)

    def _visible_total(self, path: Path, side: _SideFact | None) -> int:
        """The visible message count: the cached summary's, or counted without parsing."""
        return self._totals(path, side)[0]

    def _side_compaction(self, path: Path) -> _SideFact | None:
        """The latest compaction in the session's side log, if any."""
        facts = [f for f in _read_side(_side_path(path), self.codec) if f.kind == ev.COMPACTION]
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
        _append_side(_side_path(path), self.codec, kind, data, offset)

    # -- removal and artifacts -------------------------------------------------------

    def delete(self, session_id: str) -> None:
        """Remove a session, its artifacts and export files.

        Raises:
            SessionLockedError: The session is running.
        """
        path = self._existing(session_id)
        _check_header(path)
        if _is_locked(path, path.stat(), _locked_inodes()):
            raise SessionLockedError(
                errno.EBUSY,
                f"session {session_id} is open for writing, i.e. running or between "
                f"turns (a writer holds {path.name}); close it before deleting",
            )
        for extra in (
            path.with_name(path.name + ".otlp.jsonl"),
            path.with_name(path.name + ".export-cursor"),
            path.with_name(path.name + ".ship-cursor"),
            _side_path(path),
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
