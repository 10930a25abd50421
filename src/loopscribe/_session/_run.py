"""A Run scopes one loop invocation inside a Session; the run a ``with`` block made current."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from contextvars import ContextVar, Token
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

from .. import events as ev
from .._errors import (
    LoopscribeError,
    SessionClosedError,
)
from .._format import format_ts
from .._freeze import FrozenConfig, freeze_config
from .._model import Actor, CallRef, Event, Execution, Record
from ._file import _run_lock

if TYPE_CHECKING:
    from ._bulk import BulkWriter
    from ._writer import Session


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
        from ._bulk import BulkWriter

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
