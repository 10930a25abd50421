"""The writer: a Session owns one file; a Run scopes one loop invocation.

Durability rules, and why:

* Each record is one ``os.write`` of one complete line on an ``O_APPEND``
  descriptor, with no application buffer, so a crash loses at most the line
  being written and never interleaves two records. (A *buffered* Session,
  for bulk loads that can be done again, such as the transcript importers,
  writes blocks of lines instead: see ``Session.create(buffered=True)``.)
* No fsync per event: that would cost milliseconds per record. ``Run.close``,
  ``Session.close`` and ``save_checkpoint`` fsync; a new file also fsyncs
  its directory so the file itself survives a power loss.
* A short write is completed or cut back to the last line boundary, and the
  handle fails: a partial line is never followed by another record.
* Write, sync and encoding errors are sticky (see ``loopscribe._errors``).
  Data never causes one: a value the codec cannot hold is recorded as a
  ``snapshot_error`` diagnostic and recording goes on. An encoding error
  is the host's set-up mistake (an unregistered class where a message
  belongs, a custom codec's refusal), raised before anything is written.
  A failed fsync is never retried, because a retry can report success for
  data the kernel has already dropped.
* One writer per file: an exclusive, non-blocking ``flock`` on the open
  file description. It fails at once for a second handle in this or
  another process and dies with the process, so SIGKILL leaves no stale lock.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import hashlib
import logging
import os
import re
import secrets
import struct
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar, Token
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import orjson
from opentelemetry import trace
from opentelemetry.context import Context

from . import events as ev
from ._bus import Bus, global_bus
from ._codec import DEFAULT_CODEC, DUMPS_OPTIONS, TAG_KEY_BYTES, Codec
from ._errors import (
    EncodeError,
    ForkedWriterError,
    FormatError,
    LoopscribeError,
    RunStateError,
    SessionClosedError,
    SessionExistsError,
    SessionLockedError,
    WriteError,
)
from ._fields import typed_positions
from ._files import sync_debt
from ._format import FORMAT_VERSION, Scanner, format_ts, is_session_id
from ._freeze import FrozenConfig, freeze_config
from ._locks import fcntl, require_locks
from ._model import Actor, CallRef, Event, Execution, Record, Transient, new_record
from ._redact import LineRedactor

logger = logging.getLogger("loopscribe")

Observer = Callable[[Record], object]
"""A callable that receives every Record after it is written.

Observers run on the recording thread, in record order, while the Session's
lock is held: keep them fast. One that raises is logged and counted, never
propagated into the agent loop. An observer that also has an
``on_transient(item)`` method receives the transient events (token deltas,
tool progress) as :class:`Transient` values, in the same order; they are
never written to the file. An observer with a ``bind_session(session)``
method (a SpanBridge) is called with the Session when it is attached, so it
learns the session's ID and file.
"""


class _Join(enum.Enum):
    ACTIVE_SPAN = "active span"


ACTIVE_SPAN: Final = _Join.ACTIVE_SPAN
"""``begin_run``'s default parent: the active OpenTelemetry span, if there is one."""

_SCAN_BUFFER_BYTES = 1 << 16
_BLOCK_BYTES = 1 << 20
_BULK_OPTIONS = DUMPS_OPTIONS | orjson.OPT_APPEND_NEWLINE
# Records that carry the file's committed-message count: a top-level "messages" key
# (and, on message_end after a compaction, "compaction": that record's offset).
_COUNTED: Final = frozenset({ev.MESSAGE_END, ev.COMPACTION})

# Bumped in every forked child: a handle created before the fork is the
# parent's. Cheaper than an os.getpid() system call on every record.
_forks = [0]
os.register_at_fork(after_in_child=lambda: _forks.__setitem__(0, _forks[0] + 1))
CHAIN_ALGORITHM = "sha256"

# The Session handles open in this process, by path: lets the workspace append
# through this process's own handle instead of failing on its lock.
_CURRENT_RUN: ContextVar[Run | None] = ContextVar("loopscribe_current_run", default=None)
"""The run a ``with run:`` block made current (see :func:`current_run`)."""


def current_run() -> Run | None:
    """The run made current by the innermost ``with session.begin_run() as run:`` block.

    The ``with`` block sets a context variable, so code called inside it sees
    the run, and so do asyncio tasks created inside it and threads started
    with ``contextvars.copy_context().run``. SDK instrumentation
    (``loopscribe.instrument``) records the calls it sees into this run.
    A run that is closed (or whose Session is) is not current.
    """
    run = _CURRENT_RUN.get()
    if run is None or run._closed or run._session._closed:
        return None
    return run


_OPEN_HANDLES: weakref.WeakValueDictionary[Path, Session] = weakref.WeakValueDictionary()


def _transient_sinks(observers: Iterable[Observer]) -> tuple[Callable[[Transient], object], ...]:
    """The ``on_transient`` methods of the observers that have one (the live Bus)."""
    sinks = (getattr(o, "on_transient", None) for o in observers)
    return tuple(sink for sink in sinks if callable(sink))


def open_handle(path: str | os.PathLike[str]) -> Session | None:
    """The open Session this process holds on ``path``, if any."""
    if not _OPEN_HANDLES:
        return None  # the common case in a reader: no path to build
    session = _OPEN_HANDLES.get(Path(path).absolute())
    return None if session is None or session.closed else session


def _run_start_ref(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What ``run_resume`` repeats of a ``run_start`` line: its seq, ts and traceparent."""
    ref: dict[str, Any] = {"seq": obj.get("seq"), "ts": obj.get("ts")}
    data = obj.get("data")
    traceparent = data.get("traceparent") if isinstance(data, Mapping) else None
    if isinstance(traceparent, str):
        ref["traceparent"] = traceparent
    return ref


def _chained_from_start(start: Mapping[str, Any] | None) -> bool:
    """Whether the file was created hash-chained (its ``session_start`` says so)."""
    return start is not None and start.get("data", {}).get("chain") == CHAIN_ALGORITHM


def _joined(observers: Iterable[Observer], bus: Bus | bool) -> Iterable[Observer]:
    """``observers``, and the bus a Session was asked to join (``True``: the process's)."""
    if bus is False:
        return observers
    if bus is True:
        return (*observers, global_bus())
    if not isinstance(bus, Bus):
        raise TypeError(
            f"bus= takes True (the process-wide loopscribe.live.global_bus()) or a "
            f"loopscribe.live.Bus, got {type(bus).__name__}"
        )
    return (*observers, bus)


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


def _unbuffered(
    observers: Iterable[Observer], buffered: bool, path: str | os.PathLike[str]
) -> tuple[Observer, ...]:
    """``observers``, refused for a buffered Session: they are promised records in the file."""
    observers = tuple(observers)
    if buffered and observers:
        raise ValueError(
            f"{path}: a buffered Session cannot have observers (or join a bus); open it "
            "without buffered=True to observe its records"
        )
    return observers


def _traceparent(parent: str | Context) -> str:
    """Normalize a run's parent to a W3C traceparent string."""
    if isinstance(parent, str):
        match = _TRACEPARENT.fullmatch(parent)
        if match is None or not int(match[1], 16) or not int(match[2], 16):
            raise ValueError(
                f"parent {parent!r} is not a W3C traceparent "
                "('00-<32 hex trace id>-<16 hex span id>-<2 hex flags>', ids not all zero)"
            )
        return parent
    ctx = trace.get_current_span(parent).get_span_context()
    if not ctx.is_valid:
        raise ValueError("parent Context holds no valid span; pass a Context with a recording span")
    return _format_traceparent(ctx)


def _format_traceparent(ctx: trace.SpanContext) -> str:
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _bind(observer: Observer, session: Session) -> None:
    """Tell an observer that has ``bind_session`` (a SpanBridge) which Session it observes."""
    bind = getattr(observer, "bind_session", None)
    if not callable(bind):
        return
    try:
        bind(session)
    except Exception:
        logger.exception("loopscribe observer %r could not bind to %s", observer, session.path)


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


class Session:
    """The single writer of one session file.

    Create a new file with :meth:`create` or append to an existing one with
    :meth:`open`; then record through runs::

        with Session.create("agent.jsonl") as session, session.begin_run() as run:
            run.record(Event("tool_exec_start", execution=ex, data={...}))

    Writes through one handle are serialized by a lock, so threads may share
    a Session; a second handle on the same file raises
    :class:`SessionLockedError`.
    """

    def __init__(
        self,
        fd: int,
        path: Path,
        session_id: str,
        codec: Codec,
        observers: Iterable[Observer],
        *,
        next_seq: int,
        size: int,
        checkpoint: tuple[int, int] | None = None,
        unsynced: int = 0,
        chain_head: str | None = None,
        redact: LineRedactor | None = None,
        open_run: str | None = None,
        open_run_start: Mapping[str, Any] | None = None,
        messages: int = 0,
        compaction_at: int | None = None,
        buffered: bool = False,
    ) -> None:
        """Use :meth:`create` or :meth:`open`; this constructor is internal."""
        self._fd = fd
        self._path = path
        self._id = session_id
        self._codec = codec
        self._observers: tuple[Observer, ...] = tuple(observers)
        for observer in self._observers:
            _bind(observer, self)
        self._transient_sinks = _transient_sinks(self._observers)
        self._next_seq = next_seq
        self._size = size
        self._checkpoint = checkpoint
        # The file's last run when it has no run_close: the one resume_run() may continue.
        self._open_run_id = open_run
        # Where that run began ({"seq", "ts", "traceparent"?}): repeated in run_resume, so a
        # live bridge in the resuming process puts the run where replay puts it.
        self._open_run_start = open_run_start
        # message_end records in the file, and the offset of its latest compaction record:
        # carried in those lines so readers find counts at the file's end (see _append).
        self._messages = messages
        self._compaction_at = compaction_at
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._forks = _forks[0]
        self._run: Run | None = None
        self._error: LoopscribeError | None = None
        self._closed = False
        # The SHA-256 of the last line when the file is hash-chained, else None.
        self._chain_head = chain_head
        self._redact = redact
        # Lines not yet written, when buffered (see create()); None: write each at once.
        self._pending: bytearray | None = bytearray() if buffered else None
        self._pending_at = 0
        self.observer_errors = 0
        """How many times an observer raised (each was logged)."""
        self.unsynced_at_open = unsynced
        """Complete records found after the file's last sync point when it was opened.

        Checkpoints and closes record ``"synced": {"seq", "offset"}``: after their
        fsync, the file is durable through that record. Records after the last
        one were never fsynced: a crash leaves them, and a power loss could have
        cut the file at any line after that point, which is what this counts.
        """
        # Close the descriptor (and so drop the lock) if the handle is lost unclosed.
        self._finalizer = weakref.finalize(self, os.close, fd)
        _OPEN_HANDLES[path] = self

    # -- construction --------------------------------------------------

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        codec: Codec | None = None,
        observers: Iterable[Observer] = (),
        *,
        metadata: Mapping[str, Any] | None = None,
        chain: bool = False,
        session_id: str | None = None,
        redact: LineRedactor | None = None,
        bus: Bus | bool = False,
        buffered: bool = False,
    ) -> Session:
        """Create a new session file with a fresh random ``session_id``.

        Args:
            path: The file to create; its folder must exist.
            codec: Registry of typed values; the default knows built-in messages.
            observers: Callables that receive every written Record.
            metadata: JSON-compatible facts stored in ``session_start``.
            chain: Add to every record the SHA-256 of the line before it
                (``"prev"``) and seal the file on close, so that
                :func:`loopscribe.verify` detects any change, removal,
                reordering or truncation of complete records.
            session_id: Use this ID (32 lowercase hex digits) instead of a
                random one, for hosts that name files after their sessions.
            redact: Scrubs each encoded line before it is written, for
                application secrets (see :class:`loopscribe.Redactor`).
            bus: ``True`` joins the process-wide live bus
                (``loopscribe.live.global_bus()``), so any part of the process
                can subscribe to this session; a ``Bus`` joins that one.
            buffered: Write records in blocks of about 1 MiB instead of one
                ``write`` each, for bulk loads that can be done again after a
                crash (the transcript importers); see :attr:`buffered` for
                what a crash keeps. A buffered Session takes no observers.

        Raises:
            SessionExistsError: ``path`` exists already.
            SessionLockedError: Another handle locked the new file first.
            ValueError: ``session_id`` is not 32 lowercase hex digits, or
                ``buffered`` with observers or a bus.
            TypeError: ``bus`` is neither a bool nor a ``Bus``.
            OSError: The folder is missing or not writable.
        """
        observers = _unbuffered(_joined(observers, bus), buffered, path)
        if session_id is None:
            session_id = secrets.token_hex(16)
        elif not is_session_id(session_id):
            raise ValueError(f"session_id must be 32 lowercase hex digits, got {session_id!r}")
        path = Path(path).absolute()
        require_locks(path)
        try:
            fd = os.open(
                path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600
            )
        except FileExistsError:
            raise SessionExistsError(
                errno.EEXIST,
                f"{path}: a file exists already; use Session.open() to append to it, "
                "or choose a new path",
            ) from None
        try:
            _lock(fd, path)
        except BaseException:
            os.close(fd)
            raise
        session = cls(
            fd,
            path,
            session_id,
            codec or DEFAULT_CODEC,
            observers,
            next_seq=0,
            size=0,
            chain_head="" if chain else None,
            redact=redact,
            buffered=buffered,
        )
        start: dict[str, Any] = {"format_version": FORMAT_VERSION}
        if chain:
            start["chain"] = CHAIN_ALGORITHM
        if metadata:
            start["metadata"] = dict(metadata)
        try:
            session._append(ev.SESSION_START, None, None, start, None)
            session._sync()
            _fsync_dir(path)
        except BaseException:
            _remove_unborn(fd, path)
            session._release()
            raise
        return session

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        codec: Codec | None = None,
        observers: Iterable[Observer] = (),
        *,
        redact: LineRedactor | None = None,
        chain: bool = False,
        bus: Bus | bool = False,
        buffered: bool = False,
    ) -> Session:
        """Open an existing session file for appending.

        Takes the writer lock, validates every complete line, and removes an
        unfinished final line (the only damage a crash can cause) before
        anything is appended. An interrupted run stays incomplete; the next
        ``begin_run`` gets a fresh ``run_id``. A hash-chained file goes on
        being chained.

        Args:
            path: The session file.
            codec: As for :meth:`create`.
            observers: As for :meth:`create`.
            redact: As for :meth:`create`.
            chain: Start hash-chaining a file that is not chained yet: a
                ``chain_start`` record (holding the SHA-256 of the line
                before it) is appended now, and every record after it is
                chained and the file sealed on close, as with
                ``create(chain=True)``. :func:`loopscribe.verify` then
                checks every record from there on and says where the chain
                begins; the records before it are not protected.
            bus: As for :meth:`create`.
            buffered: As for :meth:`create`.

        Raises:
            FileNotFoundError: ``path`` does not exist.
            SessionLockedError: Another handle is writing the file.
            CorruptRecordError: A complete line is damaged (names line and offset).
            UnsupportedVersionError: The file's format version is not supported.
            FormatError: The file holds no complete ``session_start`` record.
            TypeError: ``bus`` is neither a bool nor a ``Bus``.
            ValueError: ``buffered`` with observers or a bus.
        """
        observers = _unbuffered(_joined(observers, bus), buffered, path)
        path = Path(path).absolute()
        require_locks(path)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        try:
            _lock(fd, path)
            scanner = Scanner(path)
            checkpoint: tuple[int, int] | None = None
            open_run: str | None = None
            open_run_start: dict[str, Any] | None = None
            messages = 0
            compaction_at: int | None = None
            chained_later = False
            last = b""
            synced_seq = 0  # session_start is synced by create()
            with open(path, "rb", buffering=_SCAN_BUFFER_BYTES) as stream:
                for _number, offset, raw, obj in scanner.lines(stream):
                    last = raw
                    kind = obj["type"]
                    if b'"synced":' in raw and isinstance(
                        (obj.get("data") or {}).get("synced"), dict
                    ):
                        synced_seq = obj["seq"]
                    if kind == ev.MESSAGE_END:
                        messages += 1
                    elif kind == ev.CHECKPOINT:
                        checkpoint = (offset, len(raw))
                    elif kind == ev.COMPACTION:
                        compaction_at = offset
                    elif kind == ev.RUN_START:
                        open_run = obj.get("run_id")
                        open_run_start = _run_start_ref(obj)
                    elif kind == ev.RUN_CLOSE and obj.get("run_id") == open_run:
                        open_run = None
                    elif kind == ev.CHAIN_START:
                        chained_later = True
            if scanner.session_id is None:
                raise FormatError(
                    f"{path}: no complete session_start record; the file is empty or was "
                    "not written by loopscribe. Remove it and use Session.create()",
                    path=path,
                    line=1,
                    offset=0,
                )
            unsynced = scanner.next_seq - 1 - synced_seq
            if unsynced > 0:
                # A crash leaves this; so does a power loss that cut the file
                # exactly at a line boundary after the last sync.
                logger.info(
                    "%s: %d records after the last sync point (seq %d) were never "
                    "fsynced; a crash or power loss may have cut records after them",
                    path,
                    unsynced,
                    synced_seq,
                )
            if scanner.tail:
                # Remove exactly the unfinished final line, and make that durable
                # before any new record lands after it.
                os.ftruncate(fd, scanner.end_offset)
                os.fsync(fd)
                logger.warning(
                    "%s: removed an unfinished final line of %d bytes at byte %d",
                    path,
                    scanner.tail,
                    scanner.end_offset,
                )
        except BaseException:
            os.close(fd)
            raise
        chained = chained_later or _chained_from_start(scanner.start)
        session = cls(
            fd,
            path,
            scanner.session_id,
            codec or DEFAULT_CODEC,
            observers,
            next_seq=scanner.next_seq,
            size=scanner.end_offset,
            checkpoint=checkpoint,
            unsynced=unsynced,
            chain_head=hashlib.sha256(last).hexdigest() if chained or chain else None,
            redact=redact,
            open_run=open_run,
            open_run_start=open_run_start,
            messages=messages,
            compaction_at=compaction_at,
            buffered=buffered,
        )
        if chain and not chained:
            try:
                # Its "prev" ties the chain to the last line before it.
                session._append(ev.CHAIN_START, None, None, {"chain": CHAIN_ALGORITHM}, None)
            except BaseException:
                session._release()
                raise
        return session

    # -- properties ----------------------------------------------------

    @property
    def id(self) -> str:
        """The session's random, persistent ID (32 lowercase hex digits)."""
        return self._id

    @property
    def path(self) -> Path:
        """The session file, as an absolute path."""
        return self._path

    @property
    def codec(self) -> Codec:
        """The codec used to encode typed values."""
        return self._codec

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def error(self) -> LoopscribeError | None:
        """The sticky recording error, if recording has failed."""
        return self._error

    @property
    def run(self) -> Run | None:
        """The open run, if any."""
        return self._run

    @property
    def next_seq(self) -> int:
        """The seq the next record will get."""
        return self._next_seq

    @property
    def size(self) -> int:
        """Bytes written to the file so far: the offset of the next record."""
        return self._size

    @property
    def buffered(self) -> bool:
        """Whether records are written in blocks (``create(buffered=True)``).

        What a crash keeps of a buffered Session: records wait in memory in a
        block of about 1 MiB, which goes to the file (one ``write``) when it
        is full, on :meth:`flush`, and before every fsync (``Run.close``,
        ``Run.detach``, ``save_checkpoint``, :meth:`close`). A process killed
        at any moment (SIGKILL included) leaves the file holding every record
        of every block written before, in order, and none of the block still
        in memory; at most the block being written is cut inside a line, and
        that unfinished line is dropped by every reader and removed by
        :meth:`open`. A power loss keeps what was fsynced, as for any
        Session. So a buffered Session is for loads that can be done again
        from where the file ends (the transcript importers keep a cursor,
        saved only after the fsync that covers its records).
        """
        return self._pending is not None

    def flush(self) -> None:
        """Write the records waiting in the block now (no fsync); nothing to do unbuffered.

        Raises:
            LoopscribeError: The sticky recording error, if recording failed.
            SessionClosedError: The Session is closed.
        """
        with self._lock:
            self._check_usable()
            self._flush()

    def add_observer(self, observer: Observer) -> None:
        """Deliver every later Record to ``observer`` as well.

        Raises:
            ValueError: The Session is buffered (see :attr:`buffered`).
        """
        _unbuffered((observer,), self._pending is not None, self._path)
        _bind(observer, self)
        with self._lock:
            self._observers = (*self._observers, observer)
            self._transient_sinks = _transient_sinks(self._observers)

    def remove_observer(self, observer: Observer) -> None:
        """Stop delivering Records to ``observer``."""
        with self._lock:
            self._observers = tuple(o for o in self._observers if o is not observer)
            self._transient_sinks = _transient_sinks(self._observers)

    # -- runs and checkpoints ------------------------------------------

    def begin_run(
        self,
        *,
        parent: str | Context | _Join | None = ACTIVE_SPAN,
        actor: Actor | None = None,
        timestamp: datetime | None = None,
    ) -> Run:
        """Start a run with a fresh random ``run_id`` and write ``run_start``.

        Args:
            parent: The host span this run belongs to: an OpenTelemetry
                ``Context`` holding a span, or a W3C ``traceparent`` string.
                By default, the span active in the current OpenTelemetry
                context, when there is a valid one, so a run started inside a
                host span lands in the host's trace (a run given a
                ``timestamp`` happened in the past, so it joins no span by
                default); ``None`` starts a trace of the run's own. It is
                stored in ``run_start``, so live export and replay both put
                the run in the host's trace.
            actor: Who the run is attributed to (stored in ``run_start``).
            timestamp: When the run began at the source (an importer's
                transcript line); ``None`` means now.

        Raises:
            RunStateError: A run is already open on this Session.
            ValueError: ``parent`` is not a valid traceparent or span context.
        """
        start: dict[str, Any] = {}
        if parent is ACTIVE_SPAN and timestamp is None:
            active = trace.get_current_span().get_span_context()
            if active.is_valid:
                start["traceparent"] = _format_traceparent(active)
        elif parent is not None and not isinstance(parent, _Join):
            start["traceparent"] = _traceparent(parent)
        if actor is not None:
            start["actor"] = actor.to_json()
        with self._lock:
            self._check_usable()
            if self._run is not None:
                raise RunStateError(
                    f"{self._path}: run {self._run.id} is still open; close it before "
                    "beginning another (one open run per Session)"
                )
            run = Run(self, secrets.token_hex(8))
            started = self._append(ev.RUN_START, run.id, None, start, timestamp)
            self._run = run
            self._open_run_id = run.id
            self._open_run_start = _run_start_ref(
                {"seq": started.seq, "ts": format_ts(started.ts)[1], "data": start}
            )
            return run

    def resume_run(self, run_id: str, *, gap: bool = True) -> Run:
        """Continue the file's last run, left open by :meth:`Run.detach` (or a crash).

        The gap stays visible: a ``run_resume`` record (``data.after_seq``:
        the last record before it) is written first, and the run's span
        lists the seq of every resume in ``loopscribe.run.resumed_at_seq``.
        Whatever happened between the earlier writer stopping and this
        resume was not recorded; readers must not assume the run is whole.
        A live agent after a crash should begin a new run instead, as the
        recorder's rules ask.

        Args:
            run_id: The run to continue: the file's last run, still open.
            gap: ``False`` continues without a ``run_resume`` record, as if
                the run had never stopped. Only for a writer whose source
                holds every event of the run, so nothing was missed in
                between: a transcript import done in two parts writes
                exactly what one import writes.

        Raises:
            RunStateError: A run is open on this Session, or ``run_id`` is not
                the file's last run or that run is closed.
        """
        with self._lock:
            self._check_usable()
            if self._run is not None:
                raise RunStateError(
                    f"{self._path}: run {self._run.id} is still open; close or detach it first"
                )
            if run_id != self._open_run_id:
                raise RunStateError(
                    f"{self._path}: run {run_id} is not the file's last open run "
                    f"({self._open_run_id or 'every run is closed'}); begin a new run instead"
                )
            run = Run(self, run_id)
            if gap:
                data: dict[str, Any] = {"after_seq": self._next_seq - 1}
                if self._open_run_start is not None:
                    data["run_start"] = self._open_run_start
                self._append(ev.RUN_RESUME, run_id, None, data, None)
            self._run = run
            return run

    def load_checkpoint(self) -> Any:
        """The snapshot of the latest explicit checkpoint, decoded, or ``None``.

        Later records never advance it: only ``save_checkpoint`` does.
        """
        with self._lock:
            self._check_open()
            if self._checkpoint is None:
                return None
            offset, size = self._checkpoint
            self._flush()
            raw = os.pread(self._fd, size, offset)
        return self._codec.loads(raw)["data"]["snapshot"]

    # -- closing ---------------------------------------------------------

    def close(self) -> None:
        """Close the open run (writing ``run_close``), fsync, and release the lock.

        Closing twice is harmless.

        Raises:
            LoopscribeError: The sticky recording error, if recording failed;
                the file is closed and unlocked all the same.
        """
        with self._lock:
            if self._closed:
                return
            try:
                if self._run is not None and os.getpid() == self._pid:
                    self._run.close()
                if self._error is None and os.getpid() == self._pid:
                    if self._chain_head is not None:
                        # The seal: a chained file that ends without one was
                        # truncated, is still being written, or was interrupted.
                        self._append(
                            ev.SESSION_CLOSE, None, None, {"synced": self._sync_mark()}, None
                        )
                    self._sync()
            finally:
                self._release()
            if self._error is not None:
                raise self._error

    def annotate(
        self, kind: str, data: Mapping[str, Any], *, timestamp: datetime | None = None
    ) -> Record:
        """Append a session-level record (no run): metadata, todos, compaction.

        ``loopscribe.Workspace`` uses it; ``kind`` must be one of
        ``events.SESSION_FACTS``. ``timestamp`` is when it happened at the
        source (``None``: now).
        """
        if kind not in ev.SESSION_FACTS:
            raise ValueError(
                f"{kind!r} is not a session-level record type; use one of "
                f"{sorted(ev.SESSION_FACTS)}, or record host events through a run"
            )
        return self._append(kind, None, None, data, timestamp)

    def _release(self) -> None:
        self._closed = True
        self._run = None
        self._finalizer()
        if _OPEN_HANDLES.get(self._path) is self:
            del _OPEN_HANDLES[self._path]

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Session {self._id} {state} path={str(self._path)!r}>"

    # -- the write path --------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"{self._path}: the Session is closed")

    def _check_usable(self) -> None:
        self._check_open()
        if self._error is not None:
            raise self._error
        if _forks[0] != self._forks:
            raise ForkedWriterError(
                f"{self._path}: this Session handle belongs to process {self._pid}; "
                "a forked child must not append through it (open its own session file)"
            )

    def _sync_mark(self) -> dict[str, int]:
        """The seq and offset of the record about to be written and then fsynced."""
        return {"seq": self._next_seq, "offset": self._size}

    def _fail(self, error: LoopscribeError) -> LoopscribeError:
        self._error = error
        return error

    def _refused(self, exc: EncodeError, seq: int, kind: str) -> LoopscribeError:
        """The codec refused a record: nothing was written, and the error is sticky."""
        return self._fail(type(exc)(f"{self._path}: seq {seq} ({kind}): {exc}"))

    def _append(
        self,
        kind: str,
        run_id: str | None,
        execution: Execution | None,
        data: Mapping[str, Any],
        timestamp: Any,
        actor: Actor | None = None,
    ) -> Record:
        with self._lock:
            if self._closed or self._error is not None or _forks[0] != self._forks:
                self._check_usable()  # raises the reason
            ts, ts_text = format_ts(timestamp)
            seq = self._next_seq
            obj = self._envelope(seq, kind, run_id, ts_text, execution, data, actor)
            try:
                # Data is not an error: the codec escapes and diagnoses what it
                # cannot hold. What it refuses (an unregistered class where a
                # message belongs, a custom codec's refusal) is sticky.
                line = self._codec.dumps(obj, newline=True, typed=typed_positions)
            except EncodeError as exc:
                raise self._refused(exc, seq, kind) from None
            if self._redact is not None:
                scrubbed = self._redact(line)
                if scrubbed != line:
                    # Observers must not see what the file does not hold.
                    line = scrubbed
                    data = self._codec.loads(line)["data"]
            offset = self._size
            pending = self._pending
            if pending is None:
                self._write(line, offset)
            else:
                self._buffer(pending, line, offset)
            self._advance(seq, kind, line, offset)
            record = new_record(
                self._id,
                seq,
                kind,
                ts,
                run_id,
                execution,
                data,
                offset,
                len(line),
                actor,
                self._chain_head,  # the hash of this line, once _advance has run
            )
            if kind == ev.CHECKPOINT:
                self._checkpoint = (offset, len(line))
            for observer in self._observers:
                try:
                    observer(record)
                except Exception:
                    self.observer_errors += 1
                    logger.exception("loopscribe observer %r failed on seq %d", observer, seq)
            return record

    def _envelope(
        self,
        seq: int,
        kind: str,
        run_id: str | None,
        ts_text: str,
        execution: Execution | None,
        data: Mapping[str, Any],
        actor: Actor | None = None,
    ) -> dict[str, Any]:
        """The line's object, keys in the format's order (called with the lock held)."""
        obj: dict[str, Any] = {"session_id": self._id, "seq": seq, "type": kind}
        if run_id is not None:
            obj["run_id"] = run_id
        obj["ts"] = ts_text
        if execution is not None:
            obj["execution"] = execution.to_json()
        if actor is not None:
            obj["actor"] = actor.to_json()
        obj["data"] = data
        if kind in _COUNTED:
            # The committed-message count through this record, and where the
            # latest compaction is: a reader gets both from the file's end.
            obj["messages"] = self._messages + (kind == ev.MESSAGE_END)
            if kind == ev.MESSAGE_END and self._compaction_at is not None:
                obj["compaction"] = self._compaction_at
        if self._chain_head is not None and seq > 0:
            obj["prev"] = self._chain_head
        return obj

    def _advance(self, seq: int, kind: str, line: bytes, offset: int) -> None:
        """Account for ``line``, written at ``offset`` (called with the lock held)."""
        self._next_seq = seq + 1
        self._size = offset + len(line)
        if kind in _COUNTED:
            if kind == ev.MESSAGE_END:
                self._messages += 1
            else:
                self._compaction_at = offset
        if self._chain_head is not None:
            self._chain_head = hashlib.sha256(line).hexdigest()

    def _publish_transient(
        self,
        kind: str,
        run_id: str | None,
        execution: Execution | None,
        data: Mapping[str, Any],
        timestamp: datetime | None,
    ) -> None:
        """Hand a transient event (never written) to the observers that take them."""
        ts = format_ts(timestamp)[0]
        with self._lock:
            item = Transient(self._id, run_id, kind, ts, execution, data, self._size)
            for sink in self._transient_sinks:
                try:
                    sink(item)
                except Exception:
                    self.observer_errors += 1
                    logger.exception("loopscribe observer %r failed on a %s", sink, kind)

    def _flush(self) -> None:
        """Write the buffered lines (one block) now."""
        pending = self._pending
        if pending:
            self._pending = bytearray()
            self._write(bytes(pending), self._pending_at)

    def _buffer(self, pending: bytearray, line: bytes, offset: int) -> None:
        """Add a line to the block, writing the block once it is full."""
        if not pending:
            self._pending_at = offset
        pending += line
        if len(pending) >= _BLOCK_BYTES:
            self._flush()

    def _write(self, line: bytes, offset: int) -> None:
        """Write whole lines starting at ``offset``, or fail leaving the file cut at ``offset``."""
        written = 0
        try:
            written = os.write(self._fd, line)
            if written == len(line):
                return
            while written < len(line):
                # A short write (signal, full disk): finish the line or fail below.
                more = os.write(self._fd, line[written:])
                if more == 0:
                    raise OSError(errno.ENOSPC, "write made no progress")
                written += more
        except OSError as exc:
            detail = f"{self._path}: writing {len(line)} bytes at byte {offset} failed: {exc}"
            if written:
                # Cut the partial line so the file ends on a line boundary again.
                try:
                    os.ftruncate(self._fd, offset)
                except OSError as cut:
                    detail += f"; cutting the partial line also failed ({cut})"
            raise self._fail(WriteError(exc.errno, detail)) from exc

    def _sync(self) -> None:
        self._flush()
        debt = sync_debt()
        try:
            if debt is not None:
                debt.owe_file(self._fd, self._path)  # paid before any cursor is saved
                return
            os.fsync(self._fd)
        except OSError as exc:
            raise self._fail(WriteError(exc.errno, f"{self._path}: fsync failed: {exc}")) from exc


_FIRST_CHUNK: Final = frozenset({ev.MESSAGE_UPDATE, ev.MODEL_STREAM})


class Run:
    """One loop invocation inside a Session. Get one from ``Session.begin_run()``.

    ``run_close`` (written by :meth:`close`) means the recording scope closed,
    not that the loop succeeded: success is in ``agent_end`` or ``model_exec_end``.
    """

    def __init__(self, session: Session, run_id: str) -> None:
        """Internal: use :meth:`Session.begin_run`."""
        self._session = session
        self._id = run_id
        self._closed = False
        # The event recorded last and its result: the same object again is not written twice.
        self._last: tuple[Event, Record | None] | None = None
        self._first_chunk: dict[tuple[str, int], str] = {}
        """When each streamed model attempt's first chunk arrived, for its ``model_exec_end``."""
        # Tokens of the ``with`` blocks that made this run current, innermost last.
        self._tokens: list[Token[Run | None]] = []
        _run_lock(session._fd, held=True)

    @property
    def id(self) -> str:
        """The run's random ID (16 lowercase hex digits), fresh for every run."""
        return self._id

    @property
    def session(self) -> Session:
        """The Session this run records into."""
        return self._session

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def ref(self, execution: Execution) -> CallRef:
        """The CallRef of ``execution`` in this run, for an external timeline."""
        return CallRef(self._session.id, self._id, execution.id, execution.attempt)

    def record(self, event: Event) -> Record | None:
        """Write ``event`` if the recording policy keeps it (see ``loopscribe.events``).

        The same Event object recorded again right after itself is one fact
        delivered twice (a host recording both an AgentLoop's stream and its
        executor's observer): when it has a source timestamp, nothing more is
        written and the first call's result is returned.

        Returns:
            The written Record, or ``None`` for a transient event that is not
            written. In a hash-chained session, ``Record.chain_hash`` is the
            SHA-256 of the written line (what the next record's ``prev``
            holds): keep it elsewhere to prove later what was written.

        Raises:
            ValueError: ``event.type`` is a lifecycle type the Session writes itself.
            UnknownTypeError: A message (or artifact) position holds an object
                of a class not registered with the codec (sticky; nothing of the
                record is written). Data elsewhere never raises: the built-in
                codec diagnoses what JSON cannot hold.
            EncodeError: A custom codec refused the data (sticky).
            WriteError: The write failed (sticky).
            SessionClosedError: The run or its Session is closed.
        """
        last = self._last
        if last is not None and last[0] is event:
            return last[1]
        record = self._record(event.type, event.execution, event.data, event.timestamp, event.actor)
        self._last = (event, record) if event.timestamp is not None else None
        return record

    def _record(
        self,
        kind: str,
        execution: Execution | None,
        data: Mapping[str, Any],
        timestamp: datetime | None,
        actor: Actor | None = None,
    ) -> Record | None:
        """:meth:`record` for callers that hold the event's parts (the importers)."""
        special = kind in ev.POLICY_TYPES
        if special and kind in ev.RESERVED:
            raise ValueError(
                f"{kind!r} is written by loopscribe itself; use begin_run(), "
                "save_checkpoint() or close() instead"
            )
        if self._closed or self._session._closed:
            self._check_open()  # raises the reason
        written = ev.written_data(kind, data) if special else data
        if written is None:
            if execution is not None and kind in _FIRST_CHUNK:
                # Chunks are not written, but when the first one came is: the
                # attempt's model_exec_end carries it (time to first chunk).
                key = (execution.id, execution.attempt)
                if key not in self._first_chunk:
                    self._first_chunk[key] = format_ts(timestamp)[1]
            # Transient: still a failure point if recording already failed.
            if self._session.error is not None:
                raise self._session.error
            if self._session._transient_sinks:
                self._session._publish_transient(kind, self._id, execution, data, timestamp)
            return None
        if kind == ev.MODEL_EXEC_END and execution is not None and self._first_chunk:
            first = self._first_chunk.pop((execution.id, execution.attempt), None)
            if first is not None and "first_chunk_ts" not in written:
                written = {**written, "first_chunk_ts": first}
        if kind == ev.MODEL_REQUEST and type(written.get("config")) is not FrozenConfig:
            # Requests built with events.model_request are frozen already; freeze
            # hand-built ones too, so no credential reaches the file either way.
            config = freeze_config(written.get("config"), self._session.codec)
            written = {**written, "config": config}
        return self._session._append(kind, self._id, execution, written, timestamp, actor)

    def save_checkpoint(self, snapshot: Any, *, timestamp: datetime | None = None) -> Record:
        """Append a codec-encoded snapshot and fsync it together with every prior record.

        ``Session.load_checkpoint`` returns the latest one. ``timestamp`` is when
        it was taken at the source; ``None`` means now.
        """
        self._check_open()
        with self._session._lock:
            record = self._session._append(
                ev.CHECKPOINT,
                self._id,
                None,
                {"snapshot": snapshot, "synced": self._session._sync_mark()},
                timestamp,
            )
            self._session._sync()
            return record

    def close(self, *, timestamp: datetime | None = None, sync: bool = True) -> None:
        """Write ``run_close`` and fsync. Closing twice is harmless.

        Args:
            timestamp: When the run ended at the source; ``None`` means now.
            sync: ``False`` leaves the fsync to a later sync point (the next
                run close, checkpoint or ``Session.close``): for writers that
                can redo their work after a crash, such as the importers,
                which close one run per imported turn.

        Raises:
            LoopscribeError: The sticky recording error, if recording failed.
        """
        session = self._session
        with session._lock:
            if self._closed:
                return
            self._closed = True
            session._run = None
            session._open_run_id = None
            session._check_open()
            data = {"synced": session._sync_mark()} if sync else {}
            session._append(ev.RUN_CLOSE, self._id, None, data, timestamp)
            # Released once run_close is written: a reader never sees the run
            # open without its lock while its writer is alive.
            _run_lock(session._fd, held=False)
            if sync:
                session._sync()

    def detach(self) -> None:
        """Stop recording into this run without closing it: no ``run_close``.

        The records so far are fsynced; the run stays open in the file, as
        after a crash, until :meth:`Session.resume_run` continues it (in this
        or a later process, writing ``run_resume``). ``Session.close`` then
        leaves it open too.
        """
        session = self._session
        with session._lock:
            if self._closed:
                return
            self._closed = True
            session._run = None
            session._check_open()
            _run_lock(session._fd, held=False)
            session._sync()

    def bulk(self) -> BulkWriter:
        """A writer of records into this run that builds no Records (buffered Sessions only).

        Raises:
            ValueError: The Session does not buffer its writes.
        """
        return BulkWriter(self)

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"run {self._id} is closed; begin a new run to record")
        self._session._check_open()

    def __enter__(self) -> Self:
        self._tokens.append(_CURRENT_RUN.set(self))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._tokens:
            token = self._tokens.pop()
            try:
                _CURRENT_RUN.reset(token)
            except ValueError:
                # Exited in another context than it was entered in (a generator
                # resumed elsewhere): that context no longer sees this run.
                if _CURRENT_RUN.get() is self:
                    _CURRENT_RUN.set(None)
        if exc is not None and self._session.error is not None:
            # The recording failure is already propagating; do not raise it twice.
            with contextlib.suppress(LoopscribeError):
                self.close()
            return
        self.close()

    def __repr__(self) -> str:
        return f"<Run {self._id} of session {self._session.id}{' closed' if self._closed else ''}>"


class BulkWriter:
    """Writes records into one run of a buffered Session without building Records.

    Get one from :meth:`Run.bulk`. :meth:`write` writes exactly the line
    ``run.record(Event(kind, execution, data, timestamp))`` writes, through
    the Session's block buffer (see ``Session.create(buffered=True)``), but
    returns nothing: nobody observes a buffered Session, so no
    :class:`Record` is needed. For bulk loads (the transcript importers), where
    building Records is most of the cost of a small record.
    """

    __slots__ = ("_run", "_session", "_ts_at", "_ts_text")

    def __init__(self, run: Run) -> None:
        """Internal: use :meth:`Run.bulk`."""
        session = run._session
        if session._pending is None:
            raise ValueError(
                f"{session._path}: Run.bulk() needs a buffered Session; open it with "
                "Session.create(..., buffered=True) or Session.open(..., buffered=True)"
            )
        self._run = run
        self._session = session
        self._ts_at: datetime | None = None
        self._ts_text = ""

    @property
    def run(self) -> Run:
        """The run this writer records into."""
        return self._run

    def write(
        self,
        kind: str,
        execution: Execution | None,
        data: Mapping[str, Any],
        timestamp: datetime | None = None,
    ) -> None:
        """Write one record, as :meth:`Run.record` would write ``Event(kind, ...)``.

        Records of one source moment usually share one ``datetime`` object:
        its stored form is computed once for all of them.

        Raises:
            As :meth:`Run.record`.
        """
        run = self._run
        if kind in ev.POLICY_TYPES:
            if kind != ev.MODEL_REQUEST:
                run._record(kind, execution, data, timestamp)
                return
            if type(data.get("config")) is not FrozenConfig:
                # What Run.record writes for a request: its config frozen.
                data = {**data, "config": freeze_config(data.get("config"), run._session.codec)}
        if timestamp is None:
            ts_text = format_ts(None)[1]
        elif timestamp is self._ts_at:
            ts_text = self._ts_text
        else:
            ts_text = self._ts_text = format_ts(timestamp)[1]
            self._ts_at = timestamp
        session = self._session
        with session._lock:
            if run._closed or session._closed or session._error is not None:
                run._check_open()
                session._check_usable()  # raises the reason
            if _forks[0] != session._forks:
                session._check_usable()
            seq = session._next_seq
            if kind in _COUNTED or session._chain_head is not None:
                obj = session._envelope(seq, kind, run._id, ts_text, execution, data)
            elif execution is None:
                obj = {
                    "session_id": session._id,
                    "seq": seq,
                    "type": kind,
                    "run_id": run._id,
                    "ts": ts_text,
                    "data": data,
                }
            else:
                obj = {
                    "session_id": session._id,
                    "seq": seq,
                    "type": kind,
                    "run_id": run._id,
                    "ts": ts_text,
                    "execution": execution.to_json(),
                    "data": data,
                }
            line = None
            codec = session._codec
            if type(codec) is Codec:
                # Plain JSON data: the codec's fast path without its type hook.
                # Anything else (a typed value, the key "$ls") goes through it.
                try:
                    line = orjson.dumps(obj, option=_BULK_OPTIONS)
                except orjson.JSONEncodeError:
                    line = None
                else:
                    if line.find(b"$") >= 0 and TAG_KEY_BYTES in line:
                        line = None
            if line is None:
                try:
                    line = codec.dumps(obj, newline=True, typed=typed_positions)
                except EncodeError as exc:
                    raise session._refused(exc, seq, kind) from None
            redact = session._redact
            if redact is not None:
                line = redact(line)
            offset = session._size
            pending = session._pending
            assert pending is not None
            if not pending:
                session._pending_at = offset
            pending += line
            if len(pending) >= _BLOCK_BYTES:
                session._flush()
            if kind in _COUNTED or session._chain_head is not None:
                session._advance(seq, kind, line, offset)
            else:
                session._next_seq = seq + 1
                session._size = offset + len(line)
