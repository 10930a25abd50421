"""Live records: follow a file from any byte offset, or subscribe to an in-process bus.

``follow(path, offset)`` polls the file and yields each complete record once
its ``\\n`` is on disk; an unfinished line is held back until it completes.
Every yielded Record carries its ``offset`` and ``end_offset``; passing either
back as ``offset`` resumes there. It works with ``for`` and ``async for``::

    for record in follow("agent.jsonl", stop=done):
        print(record.seq, record.type)

    async for record in follow("agent.jsonl", offset=saved):
        ...
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO

import orjson

from ._codec import DEFAULT_CODEC, Codec
from ._errors import CorruptRecordError, FormatError
from ._format import Scanner
from ._model import Record
from ._reader import to_record
from ._safeopen import open_session_file

__all__ = ["TERMINAL_TYPES", "Bus", "Subscription", "follow"]

_CHUNK_BYTES = 1 << 20


class follow:  # used like a function, as in ``for r in follow(path)``
    """Follow a session file, yielding Records as they are appended.

    Args:
        path: The session file.
        offset: Where to start: 0, or a ``Record.offset`` / ``end_offset``
            returned earlier.
        codec: Decodes typed values; ``decode=False`` keeps raw JSON.
        poll_interval: Seconds between checks for new data at the end of the file.
        idle_timeout: Stop after this many seconds without new data (``None``: never).
        stop: Stop at the end of the available data once this event is set.

    Raises (while iterating):
        CorruptRecordError: A complete line is damaged or out of sequence.
        FormatError: The file shrank below the position being followed.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        offset: int = 0,
        *,
        codec: Codec | None = None,
        decode: bool = True,
        poll_interval: float = 0.02,
        idle_timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self.path = Path(path)
        self.offset = offset
        self._codec = (codec or DEFAULT_CODEC) if decode else None
        self.poll_interval = poll_interval
        self.idle_timeout = idle_timeout
        self.stop = stop

    def _scanner(self, stream: IO[bytes]) -> Scanner:
        if self.offset == 0:
            return Scanner(self.path)
        # Resuming mid-file: learn the session from line 1, accept the seq found.
        first = stream.readline()
        if not first.endswith(b"\n"):
            raise FormatError(f"{self.path}: offset {self.offset} is past the file's first line")
        session_id = orjson.loads(first).get("session_id")
        stream.seek(self.offset)
        return Scanner(self.path, resume=(session_id, -1))

    def _poll(self, stream: IO[bytes], scanner: Scanner, pending: bytearray) -> list[Record]:
        """Read what is new; return the records completed by it."""
        chunk = stream.read(_CHUNK_BYTES)
        if not chunk:
            st = os.fstat(stream.fileno())
            if st.st_size < self.offset + len(pending):
                raise FormatError(
                    f"{self.path}: the file shrank below byte {self.offset + len(pending)} "
                    "while it was followed; it was replaced or truncated outside loopscribe"
                )
            self._check_same_file(st)
            return []
        pending += chunk
        out: list[Record] = []
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            raw = bytes(pending[start : end + 1])
            try:
                obj = scanner.check(0, self.offset, raw)
                out.append(to_record(scanner, 0, self.offset, raw, obj, self._codec, scanner.ts))
            except CorruptRecordError as exc:
                # Line numbers are only counted on this error path, never while following.
                line = self._line_number(stream, self.offset)
                raise CorruptRecordError(
                    str(exc).replace(":0: byte", f":{line}: byte", 1),
                    path=self.path,
                    line=line,
                    offset=self.offset,
                ) from exc.__cause__
            self.offset += len(raw)
            start = end + 1
        del pending[:start]
        return out

    @staticmethod
    def _line_number(stream: IO[bytes], offset: int) -> int:
        lines, pos = 1, 0
        while pos < offset:
            chunk = os.pread(stream.fileno(), min(_CHUNK_BYTES, offset - pos), pos)
            if not chunk:
                break
            lines += chunk.count(b"\n")
            pos += len(chunk)
        return lines

    def _check_same_file(self, st: os.stat_result) -> None:
        """Notice, once everything written was read, that the path no longer names this file."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            raise FormatError(
                f"{self.path}: the file was deleted while it was followed "
                f"(every record up to byte {self.offset} was read)",
                path=self.path,
            ) from None
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise FormatError(
                f"{self.path}: the file was replaced (another file renamed over it) while it "
                f"was followed; every record of the old one was read: follow the path again "
                "to read the new file from its start",
                path=self.path,
            )

    def _should_stop(self, idle_since: float) -> bool:
        if self.stop is not None and self.stop.is_set():
            return True
        return self.idle_timeout is not None and time.monotonic() - idle_since >= self.idle_timeout

    def __iter__(self) -> Iterator[Record]:
        with open_session_file(self.path, buffering=0) as stream:
            scanner = self._scanner(stream)
            pending = bytearray()
            idle_since = time.monotonic()
            while True:
                records = self._poll(stream, scanner, pending)
                if records:
                    yield from records
                    idle_since = time.monotonic()
                elif self._should_stop(idle_since):
                    return
                else:
                    time.sleep(self.poll_interval)

    async def __aiter__(self) -> AsyncIterator[Record]:
        with open_session_file(self.path, buffering=0) as stream:
            scanner = self._scanner(stream)
            pending = bytearray()
            idle_since = time.monotonic()
            while True:
                records = self._poll(stream, scanner, pending)
                if records:
                    for record in records:
                        yield record
                    idle_since = time.monotonic()
                elif self._should_stop(idle_since):
                    return
                else:
                    await asyncio.sleep(self.poll_interval)


TERMINAL_TYPES = frozenset({"agent_end", "run_close"})
"""Record types that end a live stream; the bus remembers the last one per session."""

_DONE = object()


class Subscription:
    """Records of one session delivered by a :class:`Bus`: replay first, then live.

    Iterate it (``for``, or ``async for``) until :meth:`close`. A subscriber
    that falls behind by more than its queue holds loses records — counted in
    :attr:`dropped` — rather than slowing the writer down.
    """

    def __init__(self, bus: Bus, session_id: str, replay: list[Record], maxsize: int) -> None:
        self._bus = bus
        self.session_id = session_id
        self._replay = replay
        self._queue: queue.Queue[object] = queue.Queue(maxsize)
        self.dropped = 0
        """Records not delivered because the queue was full."""
        self._closed = False

    def _offer(self, record: Record) -> None:
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1

    def close(self) -> None:
        """Stop delivery; a waiting iteration ends."""
        if not self._closed:
            self._closed = True
            self._bus._unsubscribe(self)
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(_DONE)

    def get(self, timeout: float | None = None) -> Record | None:
        """The next record, or ``None`` after ``timeout`` seconds or once closed."""
        if self._replay:
            return self._replay.pop(0)
        if self._closed and self._queue.empty():
            return None
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        return item if isinstance(item, Record) else None

    def __iter__(self) -> Iterator[Record]:
        while (record := self.get()) is not None:
            yield record

    async def __aiter__(self) -> AsyncIterator[Record]:
        while True:
            record = self.get(timeout=0)
            if record is not None:
                yield record
            elif self._closed:
                return
            else:
                await asyncio.sleep(0.005)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Bus:
    """An in-process publish/subscribe of Records, by session, with replay.

    Attach it to a Session as an observer (``observers=[bus]``) or call
    :meth:`publish`. Records are buffered per session until :meth:`clear`, so
    a subscriber that connects late replays them (``from_offset`` skips what
    it already has, e.g. from reading the file); the last terminal record
    (``agent_end``, ``run_close``) is remembered. Publishing never blocks: a
    full subscriber queue drops the record and counts it.

    Args:
        buffer_size: Records kept per session for replay (oldest dropped first).
        queue_size: Records a subscriber may fall behind before drops start.
    """

    def __init__(self, *, buffer_size: int = 10_000, queue_size: int = 1_000) -> None:
        self.buffer_size = buffer_size
        self.queue_size = queue_size
        self._lock = threading.Lock()
        self._buffers: dict[str, collections.deque[Record]] = {}
        self._terminals: dict[str, Record] = {}
        self._subscribers: dict[str, list[Subscription]] = {}

    def __call__(self, record: Record) -> None:
        """Observer entry point: same as :meth:`publish`."""
        self.publish(record)

    def publish(self, record: Record) -> None:
        """Buffer ``record`` and offer it to every subscriber of its session."""
        sid = record.session_id
        with self._lock:
            buffer = self._buffers.get(sid)
            if buffer is None:
                buffer = self._buffers[sid] = collections.deque(maxlen=self.buffer_size)
            buffer.append(record)
            if record.type in TERMINAL_TYPES:
                self._terminals[sid] = record
            subscribers = tuple(self._subscribers.get(sid, ()))
        for subscriber in subscribers:
            subscriber._offer(record)

    def subscribe(self, session_id: str, from_offset: int = 0) -> Subscription:
        """Buffered records at or after ``from_offset``, then every new one, exactly once."""
        with self._lock:
            # Under the lock: no record can be published between the replay
            # snapshot and the registration, so none is missed or repeated.
            replay = [r for r in self._buffers.get(session_id, ()) if r.offset >= from_offset]
            subscription = Subscription(self, session_id, replay, self.queue_size)
            self._subscribers.setdefault(session_id, []).append(subscription)
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            subs = self._subscribers.get(subscription.session_id, [])
            if subscription in subs:
                subs.remove(subscription)

    def terminal(self, session_id: str) -> Record | None:
        """The last terminal record published for the session since :meth:`clear`."""
        with self._lock:
            return self._terminals.get(session_id)

    def has_pending(self, session_id: str) -> bool:
        """Whether the newest buffered record is not terminal: a stream is in progress."""
        with self._lock:
            buffer = self._buffers.get(session_id)
            return buffer is not None and bool(buffer) and buffer[-1].type not in TERMINAL_TYPES

    def clear(self, session_id: str) -> None:
        """Forget the session's buffered records and terminal state (before a new turn)."""
        with self._lock:
            self._buffers.pop(session_id, None)
            self._terminals.pop(session_id, None)
