"""The intake's bookkeeping: which session, run and execution a host span is recorded as.

One :class:`Book` per sessions folder and process, shared by every span
processor, log record processor and completion hook writing there (a
session file has one writer):

* **session** — one per conversation: a span's ``session.id`` or
  ``gen_ai.conversation.id``, or its trace's (a local root span names it for
  the trace when it starts); a 32-hex-digit ID is the session ID itself,
  any other is hashed into one, so every process that sees the
  conversation appends to the same file. Spans of no conversation share
  one session per process. A file another process is writing gets a
  session of this process's own (its ``session_start`` names the
  conversation). At most :data:`MAX_OPEN` files stay open; the least
  recently used is closed and opened again when needed;
* **run** — one per trace, opened by its first recorded span with the
  trace's ``traceparent`` (so its trace ID is the host's) and closed when
  the trace's local root span ends. A session has one open run: spans of
  another trace close it, and the trace continues in a new run when its
  spans come back;
* **execution** — one per span, ``otel:<span id>``, nested under its parent
  span's execution (the parent's ID even before the parent ends, as its
  records come later); the same span delivered again with other content is
  its next attempt, delivered again as it was, nothing new.

Records are written without an fsync each (runs close with ``sync=False``):
:meth:`Book.flush` syncs the open files, :meth:`Book.close` closes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from .._errors import FormatError, LoopscribeError, SessionExistsError, SessionLockedError
from .._format import is_session_id
from .._hostkit import LOGGER, OpenExecutions
from .._model import Event, Execution
from .._redact import LineRedactor
from .._session import Run, Session
from ..otel import HOST_SPAN, host_execution_id, to_file_uri
from ._records import LS_RUN_ID, Plan, references

logger = logging.getLogger(LOGGER)

MAX_OPEN: Final = 64
"""Session files a Book keeps open at once."""
MAX_TRACES: Final = 10_000
"""Traces a Book remembers the conversation of."""
MAX_SEEN: Final = 10_000
"""Recorded spans a Book remembers, to tell a span delivered again from a new attempt."""
MAX_PENDING: Final = 10_000
"""Recorded spans a Book waits for the end of (a hook's, a log record's); the oldest is let go."""
_PROCESS: Final = ""
"""The key of the session of spans that name no conversation."""


def session_id_for(conversation_id: str) -> str:
    """The session ID of a conversation: itself if it is one, else a hash of it."""
    if is_session_id(conversation_id):
        return conversation_id
    digest = hashlib.sha256(f"loopscribe/intake\0{conversation_id}".encode()).hexdigest()
    return digest[:32]


@dataclass(frozen=True, slots=True)
class SpanRef:
    """What the bookkeeping needs of a span: its IDs, its parent, when it started."""

    trace_id: int
    span_id: int
    parent_span_id: int | None
    """The parent's span ID when the parent is in this trace and process."""
    remote_parent_id: int | None
    """The parent's span ID when it is in another process (the run's traceparent names it)."""
    trace_flags: int
    start: datetime


@dataclass(frozen=True, slots=True)
class Written:
    """Where an execution's records went, and the attributes that name them."""

    session_id: str
    run_id: str
    execution: Execution
    seqs: tuple[int, ...]
    refs: dict[str, str | int]
    duplicate: bool = False


@dataclass(slots=True)
class _Open:
    session: Session
    file_uri: str
    run: Run | None = None
    trace: int | None = None


@dataclass(slots=True)
class Pending:
    """A span whose content is recorded and whose ``host_span`` record waits for its end."""

    key: str
    ref: SpanRef
    execution: Execution
    refs: dict[str, str | int]
    """The attributes that name its records: stamped on the span, or to be added."""


_BOOKS: dict[Path, Book] = {}
_BOOKS_LOCK = threading.Lock()
_LIVE: weakref.WeakSet[Book] = weakref.WeakSet()


def book_for(directory: str | os.PathLike[str], *, redact: LineRedactor | None = None) -> Book:
    """The Book of a sessions folder in this process (created, with its folder, on first use).

    ``redact`` applies from the first Book of the folder on; a later one
    that passes another is told so in the log.
    """
    path = Path(directory).absolute()
    with _BOOKS_LOCK:
        book = _BOOKS.get(path)
        if book is None:
            book = _BOOKS[path] = Book(path, redact=redact)
        elif redact is not None and redact is not book.redact:
            logger.warning(
                "loopscribe intake: %s already records with another redactor; "
                "pass the same Redactor to every processor and hook of a folder",
                path,
            )
    return book


class Book:
    """The open sessions, runs and executions of one sessions folder (see the module)."""

    def __init__(self, directory: Path, *, redact: LineRedactor | None = None) -> None:
        self.directory = directory
        self.redact = redact
        self.lock = threading.RLock()
        self._sessions: OrderedDict[str, _Open] = OrderedDict()
        self._paths: dict[str, Path] = {}
        self._traces: OrderedDict[int, str] = OrderedDict()
        self._open_traces: dict[int, set[str]] = {}
        # span ID -> (attempt, end time, references) of the spans recorded lately.
        self._seen: OrderedDict[int, tuple[int, int | None, dict[str, str | int]]] = OrderedDict()
        self.pending: OpenExecutions[int, Pending] = OpenExecutions()
        """Spans recorded by a hook whose ``host_span`` record waits for the span's end,
        by span ID: executions open until their span ends (at most :data:`MAX_PENDING`)."""
        _LIVE.add(self)

    # -- sessions ----------------------------------------------------------------------

    def bind(self, trace_id: int, conversation_id: str) -> None:
        """Say that a trace belongs to a conversation (its local root names one)."""
        with self.lock:
            self._bind(trace_id, conversation_id)

    def _bind(self, trace_id: int, conversation_id: str) -> None:
        self._traces[trace_id] = conversation_id
        self._traces.move_to_end(trace_id)
        while len(self._traces) > MAX_TRACES:
            self._traces.popitem(last=False)

    def _open(self, key: str) -> _Open:
        entry = self._sessions.get(key)
        if entry is not None:
            self._sessions.move_to_end(key)
            return entry
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        session = self._session(key)
        self._paths[key] = session.path
        entry = self._sessions[key] = _Open(session, to_file_uri(session.path))
        while len(self._sessions) > MAX_OPEN:
            old_key, old = self._sessions.popitem(last=False)
            self._shut(old_key, old)
        return entry

    def _session(self, key: str) -> Session:
        """The session file of ``key``: its own again, the conversation's, or a new one."""
        path = self._paths.get(key)
        if path is None and key != _PROCESS:
            path = self.directory / f"{session_id_for(key)}.jsonl"
        try:
            if path is not None and path.exists():
                return Session.open(path, redact=self.redact)
            if path is not None:
                try:
                    return self._create(key, session_id_for(key))
                except SessionExistsError:
                    return Session.open(path, redact=self.redact)  # another process was first
        except (SessionLockedError, FormatError) as exc:
            # Another process writes it, or it is damaged: this process gets its own.
            logger.info("loopscribe intake: %s: %s; recording into a new session", path, exc)
        return self._create(key, secrets.token_hex(16))

    def _create(self, key: str, session_id: str) -> Session:
        metadata: dict[str, Any] = {"recorded_by": "loopscribe.intake"}
        if key != _PROCESS:
            metadata["conversation_id"] = key
        path = self.directory / f"{session_id}.jsonl"
        return Session.create(path, session_id=session_id, metadata=metadata, redact=self.redact)

    def _shut(self, key: str, entry: _Open) -> None:
        """Close a session file (the least recently used, or one that failed)."""
        if entry.trace is not None:
            self._open_traces.get(entry.trace, set()).discard(key)
        with contextlib.suppress(LoopscribeError, OSError):
            entry.session.close()

    def _key(self, trace_id: int, conversation_id: str | None) -> str:
        if conversation_id:
            if trace_id not in self._traces:
                self._bind(trace_id, conversation_id)
            return conversation_id
        return self._traces.get(trace_id, _PROCESS)

    # -- runs ----------------------------------------------------------------------------

    def _run(self, key: str, entry: _Open, ref: SpanRef) -> Run:
        if entry.run is not None and entry.trace == ref.trace_id and not entry.run.closed:
            return entry.run
        if entry.run is not None:
            self._close_run(key, entry, None)  # one open run per session: this trace is next
        parent = ref.remote_parent_id or ref.parent_span_id or ref.span_id
        traceparent = f"00-{ref.trace_id:032x}-{parent:016x}-{ref.trace_flags & 0xFF:02x}"
        entry.run = entry.session.begin_run(parent=traceparent, timestamp=ref.start)
        entry.trace = ref.trace_id
        self._open_traces.setdefault(ref.trace_id, set()).add(key)
        return entry.run

    def _close_run(self, key: str, entry: _Open, end: datetime | None) -> None:
        run, entry.run = entry.run, None
        if entry.trace is not None:
            keys = self._open_traces.get(entry.trace)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._open_traces[entry.trace]
        entry.trace = None
        if run is not None and not run.closed:
            run.close(timestamp=end, sync=False)

    @property
    def tracing(self) -> bool:
        """Whether any trace has an open run or a conversation (a lock-free look)."""
        return bool(self._open_traces or self._traces)

    def has_open_run(self, trace_id: int) -> bool:
        """Whether a run of this trace is open (a lock-free look, for the fast path)."""
        return trace_id in self._open_traces or trace_id in self._traces

    def end_trace(self, trace_id: int, end: datetime) -> None:
        """The trace's local root span ended: close its runs and forget its conversation."""
        with self.lock:
            self._traces.pop(trace_id, None)
            for key in list(self._open_traces.get(trace_id, ())):
                entry = self._sessions.get(key)
                if entry is not None and entry.trace == trace_id:
                    self._close_guarded(key, entry, end)

    def _close_guarded(self, key: str, entry: _Open, end: datetime) -> None:
        self._guarded(key, entry, lambda e: self._close_run(key, e, end))

    def _guarded(self, key: str, entry: _Open, action: Callable[[_Open], Any]) -> Any:
        """Run ``action``; a session that fails is closed (opened again on its next span)."""
        try:
            return action(entry)
        except (LoopscribeError, OSError):
            if self._sessions.get(key) is entry:
                del self._sessions[key]
            self._shut(key, entry)
            raise

    # -- executions ----------------------------------------------------------------------

    def record(
        self,
        ref: SpanRef,
        conversation_id: str | None,
        kind: str,
        end_ns: int | None,
        make_plan: Callable[[Execution], Plan],
        make_span: Callable[[Mapping[str, str | int]], Mapping[str, Any]] | None,
        end: datetime,
    ) -> Written:
        """Record one span's operation; with ``make_span``, its ``host_span`` record after it.

        ``make_span(refs)`` gives the span as it is handed on (with the
        references); without it the span is left :attr:`pending` until
        :meth:`record_span`.

        Raises:
            LoopscribeError: A session file cannot be written (it is closed
                and opened again for the next span).
            OSError: The folder cannot be created or a file opened.
        """
        with self.lock:
            key = self._key(ref.trace_id, conversation_id)
            entry = self._open(key)
            written: Written = self._guarded(
                key,
                entry,
                lambda e: self._record(key, e, ref, kind, end_ns, make_plan, make_span, end),
            )
            return written

    def _record(
        self,
        key: str,
        entry: _Open,
        ref: SpanRef,
        kind: str,
        end_ns: int | None,
        make_plan: Callable[[Execution], Plan],
        make_span: Callable[[Mapping[str, str | int]], Mapping[str, Any]] | None,
        end: datetime,
    ) -> Written:
        seen = self._seen.get(ref.span_id)
        if seen is not None and end_ns is not None and seen[1] == end_ns:
            # The same span ended (or delivered) again: it is recorded already.
            attempt, _, refs = seen
            execution = Execution(host_execution_id(ref.span_id), kind, attempt)
            run_id = str(refs.get(LS_RUN_ID, ""))
            return Written(entry.session.id, run_id, execution, (), refs, duplicate=True)
        run = self._run(key, entry, ref)
        attempt = 1 if seen is None else seen[0] + 1
        parent = None if ref.parent_span_id is None else host_execution_id(ref.parent_span_id)
        execution = Execution(host_execution_id(ref.span_id), kind, attempt, parent)
        plan = make_plan(execution)
        seqs = []
        for event in (*plan.start, *plan.end):
            written = run.record(event)
            if written is not None:
                seqs.append(written.seq)
        refs = references(
            plan,
            seqs,
            session_id=entry.session.id,
            run_id=run.id,
            attempt=attempt,
            file_uri=entry.file_uri,
        )
        self._seen[ref.span_id] = (attempt, end_ns, refs)
        self._seen.move_to_end(ref.span_id)
        while len(self._seen) > MAX_SEEN:
            self._seen.popitem(last=False)
        if make_span is None:
            self.pending.open(ref.span_id, Pending(key, ref, execution, refs))
            self.pending.trim(MAX_PENDING)
        else:
            run.record(Event(HOST_SPAN, execution, make_span(refs), end))
        return Written(entry.session.id, run.id, execution, tuple(seqs), refs)

    def take_pending(self, span_id: int) -> Pending | None:
        """The span's recorded execution still waiting for its ``host_span`` record, if any."""
        if not self.pending:
            return None  # the common case, without the lock
        with self.lock:
            return self.pending.close(span_id)

    def record_span(self, pending: Pending, data: Mapping[str, Any], end: datetime) -> None:
        """Write the ``host_span`` record of a span recorded before it ended.

        Raises:
            LoopscribeError: The session file cannot be written.
            OSError: It cannot be opened again.
        """
        with self.lock:
            entry = self._open(pending.key)

            def write(e: _Open) -> None:
                run = self._run(pending.key, e, pending.ref)
                run.record(Event(HOST_SPAN, pending.execution, data, end))

            self._guarded(pending.key, entry, write)

    # -- closing ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Sync every open session file, so every record so far survives a power loss."""
        with self.lock:
            paths = [entry.session.path for entry in self._sessions.values()]
        for path in paths:
            # fsync through a descriptor of our own: it syncs the file, whoever wrote it,
            # without closing the run the writer has open.
            with contextlib.suppress(OSError):
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def close(self) -> None:
        """Close every session file (each is opened again if another span comes)."""
        with self.lock:
            while self._sessions:
                key, entry = self._sessions.popitem(last=False)
                with contextlib.suppress(LoopscribeError, OSError):
                    self._close_run(key, entry, None)
                self._shut(key, entry)
            self._open_traces.clear()

    def _after_fork(self) -> None:
        """In a forked child: the parent's files and lock are the parent's."""
        self.lock = threading.RLock()
        self._sessions = OrderedDict()
        self._paths.pop(_PROCESS, None)
        self._open_traces = {}
        self._seen = OrderedDict()
        self.pending = OpenExecutions()


def _reset_after_fork() -> None:
    for book in list(_LIVE):
        book._after_fork()


os.register_at_fork(after_in_child=_reset_after_fork)
