"""The Session: the single writer of one session file (the package docstring has its rules).

Over 800 lines because the Session is one object whose methods share its
lock and its file state (creation, opening with its scan, appending, the
block buffer, syncing and closing); its helpers (locks, observers, trace
parents) and its Runs live in their own modules.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import secrets
import threading
import weakref
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from opentelemetry import trace
from opentelemetry.context import Context

from .. import events as ev
from .._bus import Bus
from .._codec import DEFAULT_CODEC, Codec
from .._errors import (
    EncodeError,
    ForkedWriterError,
    FormatError,
    LoopscribeError,
    RunStateError,
    SessionClosedError,
    SessionExistsError,
    WriteError,
)
from .._fields import typed_positions
from .._files import sync_debt
from .._format import CHAIN_ALGORITHM, FORMAT_VERSION, Scanner, format_ts, is_session_id
from .._locks import require_locks
from .._model import Actor, Execution, Record, Transient, new_record
from .._redact import LineRedactor
from ._file import _BLOCK_BYTES, _COUNTED, _forks, _fsync_dir, _lock, _remove_unborn
from ._observers import Observer, _bind, _joined, _transient_sinks, _unbuffered
from ._parent import ACTIVE_SPAN, _format_traceparent, _Join, _traceparent
from ._run import Run

logger = logging.getLogger("loopscribe")

_SCAN_BUFFER_BYTES = 1 << 16


# The Session handles open in this process, by path: lets the workspace append
# through this process's own handle instead of failing on its lock.
_OPEN_HANDLES: weakref.WeakValueDictionary[Path, Session] = weakref.WeakValueDictionary()


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
