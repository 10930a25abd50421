"""The in-process bus: one session's live stream, with replay, for every subscriber.

A :class:`Bus` is an observer of Sessions: it gets every written Record
and every transient event (token deltas, tool progress), buffers them per
session, and hands them to subscribers, replaying what they missed first.
:func:`global_bus` is the one every part of a process can share: a Session
created with ``bus=True`` joins it. ``loopscribe.live`` is its public face;
it lives beside the writer so that a Session can join it by itself.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime

from . import events as ev
from ._model import Event, Record, Transient

__all__ = ["TERMINAL_TYPES", "Bus", "Subscription", "global_bus", "is_terminal"]

TERMINAL_TYPES = frozenset({ev.AGENT_END, ev.RUN_CLOSE})
"""Record types that can end a live stream: see :func:`is_terminal`."""
_HANDOFF = "handoff"


def is_terminal(record: Record) -> bool:
    """Whether ``record`` ends its session's live stream.

    The run's own end (``run_close``) does, and so does the ``agent_end`` of
    a top-level agent (one with no ``parent_id``) unless it handed off
    (``stop_reason="handoff"``: the agent it handed to goes on). A nested
    agent's ``agent_end`` — a sub-agent run as a tool — does not: its
    parent is still at work.
    """
    kind = record.type
    if kind == ev.RUN_CLOSE:
        return True
    if kind != ev.AGENT_END:
        return False
    execution = record.execution
    return (execution is None or execution.parent_id is None) and record.data.get(
        "stop_reason"
    ) != _HANDOFF


# Session-level facts, the file's own records and checkpoints neither start nor end a stream.
_NEUTRAL = ev.SESSION_FACTS | {ev.SESSION_START, ev.SESSION_CLOSE, ev.CHAIN_START, ev.CHECKPOINT}


_DONE = object()
Live = Record | Transient
"""What a subscription delivers: written Records and, unless asked not to, Transients."""


class Subscription:
    """What a :class:`Bus` delivers for one session: replay first, then live.

    Iterate it (``for``, or ``async for``) until :meth:`close`. Items are
    Records and, unless subscribed with ``records_only=True``, Transients
    (token deltas, tool progress). A subscriber that falls behind by more
    than its queue holds loses items — counted in :attr:`dropped` (records)
    and :attr:`dropped_transient` — rather than slowing the writer down.
    """

    def __init__(
        self, bus: Bus, session_id: str, replay: list[Live], maxsize: int, records_only: bool
    ) -> None:
        self._bus = bus
        self.session_id = session_id
        self.records_only = records_only
        self._replay = collections.deque(replay)
        self._queue: queue.Queue[object] = queue.Queue(maxsize)
        self._async_wake: Callable[[], object] | None = None
        self.dropped = 0
        """Records not delivered because the queue was full."""
        self.dropped_transient = 0
        """Transient events not delivered because the queue was full."""
        self._closed = False

    def _offer(self, item: Live) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            if type(item) is Record:
                self.dropped += 1
            else:
                self.dropped_transient += 1
            return
        wake = self._async_wake
        if wake is not None:
            with contextlib.suppress(RuntimeError):  # its event loop closed
                wake()

    def close(self) -> None:
        """Stop delivery; a waiting iteration ends."""
        if not self._closed:
            self._closed = True
            self._bus._unsubscribe(self)
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(_DONE)
            wake = self._async_wake
            if wake is not None:
                with contextlib.suppress(RuntimeError):
                    wake()

    def get(self, timeout: float | None = None) -> Live | None:
        """The next item, or ``None`` after ``timeout`` seconds or once closed."""
        if self._replay:
            return self._replay.popleft()
        if self._closed and self._queue.empty():
            return None
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        return item if isinstance(item, Record | Transient) else None

    def __iter__(self) -> Iterator[Live]:
        while (item := self.get()) is not None:
            yield item

    async def __aiter__(self) -> AsyncIterator[Live]:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        self._async_wake = lambda: loop.call_soon_threadsafe(wake.set)
        try:
            while True:
                item = self.get(timeout=0)
                if item is not None:
                    yield item
                    continue
                if self._closed:
                    return
                wake.clear()
                if self._queue.empty() and not self._closed:  # re-checked: no lost wake-up
                    await wake.wait()
        finally:
            self._async_wake = None

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Bus:
    """An in-process publish/subscribe of one session's live stream, with replay.

    Attach it to a Session as an observer (``observers=[bus]``): it receives
    every written Record, and — through its ``on_transient`` method — every
    transient event the run is handed (``message_update``, ``model_stream``,
    ``tool_exec_update``), which the Session never writes. Or call
    :meth:`publish` yourself.

    Replay is exact for Records: they are buffered per session until
    :meth:`clear`, and a late subscriber gets every buffered Record at or
    after ``from_offset`` (e.g. where its read of the file stopped), then
    each new one, exactly once and in order. Transients are best-effort: the
    last ``transient_buffer_size`` are kept and replayed in their place
    among the Records (a reconnecting UI redraws the message in progress),
    older ones are gone, and a full subscriber queue drops them like
    Records. Publishing never blocks.

    A stream is in progress (:meth:`has_pending`) from a run's first record
    until the record that ends it (:func:`is_terminal`: ``run_close``, or a
    top-level agent's ``agent_end``); a nested agent's end, a checkpoint or
    a session-level fact (title, todos) changes nothing. The last terminal
    record is remembered (:meth:`terminal`) until the next stream begins.

    Args:
        buffer_size: Records kept per session for replay (oldest dropped first).
        queue_size: Items a subscriber may fall behind before drops start.
        transient_buffer_size: Transients kept per session for replay.
        max_sessions: Sessions kept at most (``None``: no limit). Past it,
            the least recently active session whose stream has ended and
            that nobody subscribes to is forgotten, as by :meth:`clear`;
            a late subscriber then reads it from the file. Sessions still
            streaming or subscribed to are never forgotten.
    """

    def __init__(
        self,
        *,
        buffer_size: int = 10_000,
        queue_size: int = 1_000,
        transient_buffer_size: int = 1_000,
        max_sessions: int | None = None,
    ) -> None:
        if max_sessions is not None and max_sessions < 1:
            raise ValueError(f"Bus(max_sessions=...) must be None or >= 1, got {max_sessions}")
        self.buffer_size = buffer_size
        self.queue_size = queue_size
        self.transient_buffer_size = transient_buffer_size
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self._buffers: dict[str, collections.deque[Record]] = {}
        self._transients: dict[str, collections.deque[Transient]] = {}
        self._terminals: dict[str, Record] = {}
        self._streaming: set[str] = set()
        self._subscribers: dict[str, list[Subscription]] = {}
        # Sessions by last activity, oldest first (kept only with max_sessions).
        self._recent: dict[str, None] = {}

    def __call__(self, record: Record) -> None:
        """Observer entry point for written Records: same as :meth:`publish`."""
        self.publish(record)

    def on_transient(self, item: Transient) -> None:
        """Observer entry point for transient events: same as :meth:`publish`."""
        self.publish(item)

    def publish(self, item: Record | Transient | Event, *, session_id: str | None = None) -> None:
        """Buffer ``item`` and offer it to every subscriber of its session.

        Args:
            item: A written Record, a Transient, or a plain ``Event``. A plain
                Event was not written, so it is delivered as a Transient of
                ``session_id`` (placed after the last Record published).
            session_id: The session of a plain Event; ignored otherwise.

        Raises:
            TypeError: ``item`` is none of these, or a plain Event without
                ``session_id``.
        """
        if type(item) is Record:
            self._publish_record(item)
        elif type(item) is Transient:
            self._publish_transient(item)
        elif isinstance(item, Event):
            if not isinstance(session_id, str) or not session_id:
                raise TypeError(
                    f"Bus.publish got a plain Event ({item.type!r}) without session_id: "
                    "an Event has no session of its own. Pass session_id=..., or record "
                    "it through Run.record so the Session delivers it"
                )
            self._publish_transient(self._as_transient(item, session_id))
        elif isinstance(item, Record | Transient):  # subclasses
            self.publish(item)
        else:
            raise TypeError(
                f"Bus.publish takes a Record, a Transient or an Event, got {type(item).__name__}"
            )

    def _as_transient(self, event: Event, session_id: str) -> Transient:
        ts = event.timestamp or datetime.now(UTC)
        if ts.tzinfo is not UTC:
            ts = ts.astimezone(UTC)
        with self._lock:
            buffer = self._buffers.get(session_id)
            offset = buffer[-1].end_offset if buffer else 0
        return Transient(session_id, None, event.type, ts, event.execution, event.data, offset)

    def _publish_record(self, record: Record) -> None:
        sid = record.session_id
        with self._lock:
            if self.max_sessions is not None:
                self._touch(sid)
            buffer = self._buffers.get(sid)
            if buffer is None:
                buffer = self._buffers[sid] = collections.deque(maxlen=self.buffer_size)
            buffer.append(record)
            if is_terminal(record):
                self._terminals[sid] = record
                self._streaming.discard(sid)
            elif record.type not in _NEUTRAL:
                self._streaming.add(sid)
            subscribers = tuple(self._subscribers.get(sid, ()))
        for subscriber in subscribers:
            subscriber._offer(record)

    def _publish_transient(self, item: Transient) -> None:
        sid = item.session_id
        with self._lock:
            if self.max_sessions is not None:
                self._touch(sid)
            kept = self._transients.get(sid)
            if kept is None:
                kept = self._transients[sid] = collections.deque(maxlen=self.transient_buffer_size)
            kept.append(item)
            subscribers = tuple(self._subscribers.get(sid, ()))
        for subscriber in subscribers:
            if not subscriber.records_only:
                subscriber._offer(item)

    def subscribe(
        self, session_id: str, from_offset: int = 0, *, records_only: bool = False
    ) -> Subscription:
        """Buffered items at or after ``from_offset``, then every new one.

        Args:
            session_id: The session.
            from_offset: Skip what starts before this byte offset (what the
                subscriber already read from the file).
            records_only: Deliver written Records only, no Transients.
        """
        with self._lock:
            # Under the lock: no item can be published between the replay
            # snapshot and the registration, so none is missed or repeated.
            replay: list[Live] = [
                r for r in self._buffers.get(session_id, ()) if r.offset >= from_offset
            ]
            if not records_only:
                transients = [
                    t for t in self._transients.get(session_id, ()) if t.offset >= from_offset
                ]
                if transients:
                    # A transient published at offset X came before the record written at X.
                    replay = sorted(
                        [*transients, *replay],
                        key=lambda item: (item.offset, type(item) is Record),
                    )
            subscription = Subscription(self, session_id, replay, self.queue_size, records_only)
            self._subscribers.setdefault(session_id, []).append(subscription)
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            sid = subscription.session_id
            subs = self._subscribers.get(sid, [])
            if subscription in subs:
                subs.remove(subscription)
            if not subs:
                self._subscribers.pop(sid, None)

    def terminal(self, session_id: str) -> Record | None:
        """The record that ended the session's last stream, or ``None``.

        ``None`` also while a stream is in progress, and after :meth:`clear`.
        """
        with self._lock:
            if session_id in self._streaming:
                return None
            return self._terminals.get(session_id)

    def has_pending(self, session_id: str) -> bool:
        """Whether a stream is in progress: a run's records arrived after its last end."""
        with self._lock:
            return session_id in self._streaming

    def clear(self, session_id: str) -> None:
        """Forget the session's buffered items and terminal state (before a new turn)."""
        with self._lock:
            self._forget(session_id)

    def _forget(self, session_id: str) -> None:
        """:meth:`clear` with the lock held."""
        self._buffers.pop(session_id, None)
        self._transients.pop(session_id, None)
        self._terminals.pop(session_id, None)
        self._streaming.discard(session_id)
        self._recent.pop(session_id, None)

    def _touch(self, session_id: str) -> None:
        """Mark the session active now; forget ended ones past ``max_sessions`` (lock held)."""
        recent = self._recent
        if recent.pop(session_id, 0) is None:
            recent[session_id] = None
            return
        recent[session_id] = None
        excess = len(recent) - (self.max_sessions or len(recent))
        if excess <= 0:
            return
        idle = [
            sid
            for sid in recent
            if sid != session_id and sid not in self._streaming and sid not in self._subscribers
        ]
        for sid in idle[:excess]:
            self._forget(sid)


_GLOBAL = Bus(max_sessions=256)


def global_bus() -> Bus:
    """The process-wide Bus: ``Session.create(path, bus=True)`` joins it.

    Any part of the process (a web handler, a UI, an exporter) can subscribe
    to any session recorded into it, without being handed the Bus. It keeps
    the buffers of at most 256 sessions, forgetting the least recently active
    ones whose stream has ended and that nobody subscribes to first.
    """
    return _GLOBAL
