"""Live records: follow a file from any byte offset, or subscribe to an in-process bus.

``follow(path, offset)`` yields each complete record once its ``\\n`` is on
disk; an unfinished line is held back until it completes. Every yielded
Record carries its ``offset`` and ``end_offset``; passing either back as
``offset`` resumes there. It works with ``for`` and ``async for``::

    for record in follow("agent.jsonl", stop=done):
        print(record.seq, record.type)

    async for record in follow("agent.jsonl", offset=saved):
        ...

Many followers of one file in one process share one reader: a follower
first reads the history it asked for on its own, then joins the file's
shared reader, a thread that wakes when the file changes (inotify on Linux,
polling every ``poll_interval`` elsewhere), reads and decodes each new line
once and hands the same Record to every follower. Records are shared between
followers: treat them as read-only.

The :class:`Bus` delivers what a Session writes (Records, exactly, with
replay from a byte offset) and what it does not (``Transient`` token deltas
and tool progress, best-effort: see :class:`Bus`). :func:`global_bus` is the
process-wide one; a Session joins it with ``bus=True``::

    with Session.create("agent.jsonl", bus=True) as session:
        ...                                   # elsewhere in the process:
    for item in global_bus().subscribe(session_id):
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import queue
import select
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path

import orjson

from ._bus import TERMINAL_TYPES, Bus, Subscription, global_bus, is_terminal
from ._codec import DEFAULT_CODEC, Codec
from ._errors import CorruptRecordError, FormatError
from ._format import Scanner
from ._model import Record, Transient
from ._reader import to_record
from ._safeopen import open_session_file

__all__ = [
    "TERMINAL_TYPES",
    "Bus",
    "Subscription",
    "Transient",
    "follow",
    "global_bus",
    "is_terminal",
    "watch_mode",
]

_CHUNK_BYTES = 1 << 20
_STOP_CHECK_SECONDS = 0.1


def _line_number(fd: int, offset: int) -> int:
    """The 1-based line that starts at ``offset`` (counted only on error paths)."""
    lines, pos = 1, 0
    while pos < offset:
        chunk = os.pread(fd, min(_CHUNK_BYTES, offset - pos), pos)
        if not chunk:
            break
        lines += chunk.count(b"\n")
        pos += len(chunk)
    return lines


def _resume_scanner(path: Path, fd: int, offset: int) -> Scanner:
    """A Scanner for lines from ``offset`` on: the session from line 1, any first seq."""
    if offset == 0:
        return Scanner(path)
    first = os.pread(fd, 1 << 16, 0)
    newline = first.find(b"\n")
    if newline < 0 or newline >= offset:
        raise FormatError(f"{path}: offset {offset} is past the file's first line")
    session_id = orjson.loads(first[:newline]).get("session_id")
    return Scanner(path, resume=(session_id, -1))


def _check_same_file(path: Path, st: os.stat_result, offset: int) -> None:
    """Notice, once everything written was read, that ``path`` no longer names this file."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        raise FormatError(
            f"{path}: the file was deleted while it was followed "
            f"(every record up to byte {offset} was read)",
            path=path,
        ) from None
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        raise FormatError(
            f"{path}: the file was replaced (another file renamed over it) while it was "
            "followed; every record of the old one was read: follow the path again to read "
            "the new file from its start",
            path=path,
        )


class _LineReader:
    """Turns the bytes appended to a file into Records; holds an unfinished tail back."""

    def __init__(self, path: Path, fd: int, offset: int, codec: Codec | None) -> None:
        self.path = path
        self.fd = fd
        self.offset = offset  # just after the last complete line consumed
        self.pending = bytearray()
        self.codec = codec
        self.scanner = _resume_scanner(path, fd, offset)

    def read(self, *, drain: bool = False) -> list[Record]:
        """Read what is new (one chunk, or everything with ``drain``); return its records.

        Raises:
            CorruptRecordError: A complete line is damaged or out of sequence.
            FormatError: The file shrank below the position being read.
        """
        out: list[Record] = []
        while True:
            chunk = os.pread(self.fd, _CHUNK_BYTES, self.offset + len(self.pending))
            if not chunk:
                st = os.fstat(self.fd)
                if st.st_size < self.offset + len(self.pending):
                    raise FormatError(
                        f"{self.path}: the file shrank below byte "
                        f"{self.offset + len(self.pending)} while it was followed; "
                        "it was replaced or truncated outside loopscribe"
                    )
                _check_same_file(self.path, st, self.offset)
                return out
            self._parse(chunk, out)
            if not drain or len(chunk) < _CHUNK_BYTES:
                return out

    def _parse(self, chunk: bytes, out: list[Record]) -> None:
        pending = self.pending
        pending += chunk
        start = 0
        scanner, codec = self.scanner, self.codec
        while (end := pending.find(b"\n", start)) >= 0:
            raw = bytes(pending[start : end + 1])
            try:
                obj = scanner.check(0, self.offset, raw)
                out.append(to_record(scanner, 0, self.offset, raw, obj, codec, scanner.ts))
            except CorruptRecordError as exc:
                # Line numbers are only counted on this error path, never while following.
                line = _line_number(self.fd, self.offset)
                raise CorruptRecordError(
                    str(exc).replace(":0: byte", f":{line}: byte", 1),
                    path=self.path,
                    line=line,
                    offset=self.offset,
                ) from exc.__cause__
            self.offset += len(raw)
            start = end + 1
        del pending[:start]


# -- waking on change ------------------------------------------------------------

_IN_MODIFY = 0x00000002
_IN_ATTRIB = 0x00000004
_IN_CLOSE_WRITE = 0x00000008
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_WATCH_MASK = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_DELETE_SELF | _IN_MOVE_SELF


def _load_inotify() -> tuple[Callable[[int], int], Callable[[int, bytes, int], int]] | None:
    if not sys.platform.startswith("linux") or os.environ.get("LOOPSCRIBE_FOLLOW_POLL"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        init1, add_watch = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError):
        return None
    init1.argtypes, init1.restype = [ctypes.c_int], ctypes.c_int
    add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    add_watch.restype = ctypes.c_int
    return init1, add_watch


_INOTIFY = _load_inotify()


def watch_mode() -> str:
    """How shared readers learn that a file changed: ``"inotify"`` or ``"poll"``.

    ``"poll"`` where inotify is missing (not Linux) or when the environment
    variable ``LOOPSCRIBE_FOLLOW_POLL`` is set when loopscribe is imported.
    """
    return "inotify" if _INOTIFY is not None else "poll"


class _Waker:
    """Blocks until a file may have changed: inotify where it works, else a timer."""

    # Even with inotify, look at the file at least this often (a missed event
    # on a network file system must not stall a follower forever).
    _SAFETY_SECONDS = 1.0

    def __init__(self, path: Path, poll_interval: float) -> None:
        self.poll_interval = poll_interval
        self.fd = -1
        if _INOTIFY is not None:
            init1, add_watch = _INOTIFY
            fd = init1(_IN_NONBLOCK | _IN_CLOEXEC)
            if fd >= 0 and add_watch(fd, os.fsencode(path), _WATCH_MASK) >= 0:
                self.fd = fd
                self.poller = select.poll()
                self.poller.register(fd, select.POLLIN)
            elif fd >= 0:
                os.close(fd)

    def wait(self, cancelled: threading.Event) -> None:
        if self.fd < 0:
            cancelled.wait(self.poll_interval)
            return
        if self.poller.poll(self._SAFETY_SECONDS * 1000):
            # One read takes every queued event (they are 16 bytes each; 64 KiB
            # holds thousands). Not reading until EAGAIN saves a system call per
            # wake-up, and each one is a GIL hand-off that, with many follower
            # threads, can wait behind all of them; an event left over only
            # means one more (empty) poll.
            with contextlib.suppress(BlockingIOError):
                os.read(self.fd, 65536)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# -- the shared reader -------------------------------------------------------------


def _set_all(events: list[asyncio.Event]) -> None:
    for event in events:
        event.set()


class _Channel:
    """One follower's inbox on a shared reader."""

    __slots__ = ("async_wake", "items", "position")

    def __init__(self, position: int) -> None:
        self.items: queue.SimpleQueue[Record | BaseException] = queue.SimpleQueue()
        self.position = position  # records before this offset were read by the follower
        # An async follower's event loop and the Event its task waits on.
        self.async_wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None


_Key = tuple[int, int, int, bool]
_readers: dict[_Key, _SharedReader] = {}
_readers_lock = threading.Lock()


class _SharedReader:
    """One thread per followed file (and codec): reads and decodes each line once."""

    def __init__(
        self, key: _Key, path: Path, fd: int, offset: int, codec: Codec | None, poll: float
    ):
        self.key = key
        self.path = path
        self.fd = os.dup(fd)  # the file the first follower opened, whatever the path names now
        try:
            self.lines = _LineReader(path, self.fd, offset, codec)
        except BaseException:
            os.close(self.fd)
            raise
        self.lock = threading.Lock()
        self.channels: list[_Channel] = []
        self.closed = False
        self.cancelled = threading.Event()
        self.waker = _Waker(path, poll)
        self.thread = threading.Thread(
            target=self._run, name=f"loopscribe-follow {path.name}", daemon=True
        )

    @property
    def tip(self) -> int:
        return self.lines.offset

    def poll(self) -> None:
        """Read what is new and hand it to every follower (also called by followers)."""
        with self.lock:
            if self.closed:
                return
            error: BaseException | None = None
            try:
                records = self.lines.read(drain=True)
            except (CorruptRecordError, FormatError, OSError) as exc:
                records, error = [], exc
            wakes: dict[asyncio.AbstractEventLoop, list[asyncio.Event]] = {}
            for channel in self.channels:
                put, position = channel.items.put, channel.position
                delivered = False
                for record in records:
                    if record.offset >= position:
                        put(record)
                        delivered = True
                if error is not None:
                    put(error)
                    delivered = True
                if delivered and channel.async_wake is not None:
                    loop, event = channel.async_wake
                    wakes.setdefault(loop, []).append(event)
            # One call per event loop, however many of its tasks follow the file.
            for loop, events in wakes.items():
                with contextlib.suppress(RuntimeError):  # that event loop closed
                    loop.call_soon_threadsafe(_set_all, events)
            if error is not None:
                # Every follower got the error; a new follower starts a new reader.
                self.channels.clear()
                self._retire()

    def _retire(self) -> None:
        """Forget this reader (called with ``self.lock`` held)."""
        self.closed = True
        self.cancelled.set()
        with contextlib.suppress(KeyError):
            if _readers.get(self.key) is self:
                del _readers[self.key]

    def leave(self, channel: _Channel) -> None:
        with _readers_lock, self.lock:
            with contextlib.suppress(ValueError):
                self.channels.remove(channel)
            if not self.channels and not self.closed:
                self._retire()

    def _run(self) -> None:
        try:
            while not self.cancelled.is_set():
                self.waker.wait(self.cancelled)
                if self.cancelled.is_set():
                    break
                self.poll()
        finally:
            self.waker.close()
            os.close(self.fd)


def _join(
    path: Path, fd: int, position: int, codec: Codec | None, poll: float
) -> tuple[_SharedReader, _Channel] | None:
    """Join the shared reader of the file open as ``fd`` at ``position``.

    ``None`` if the reader is already past it. The file is the one the follower
    opened, not whatever ``path`` names now: a file renamed over ``path`` in
    between must be noticed as a replacement, not followed from a stranger's offset.
    """
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino, id(codec), codec is None)
    with _readers_lock:
        reader = _readers.get(key)
        if reader is None or reader.closed:
            reader = _SharedReader(key, path, fd, position, codec, poll)
            _readers[key] = reader
            reader.thread.start()
        with reader.lock:
            if reader.closed or reader.tip > position:
                # Past the follower: it reads up to the reader on its own first. Closed:
                # its first read failed (the file was replaced or cut) before anyone
                # joined, so nobody was told; the follower's own read will say why.
                return None
            channel = _Channel(position)
            reader.channels.append(channel)
    return reader, channel


class follow:  # used like a function, as in ``for r in follow(path)``
    """Follow a session file, yielding Records as they are appended.

    Args:
        path: The session file.
        offset: Where to start: 0, or a ``Record.offset`` / ``end_offset``
            returned earlier.
        codec: Decodes typed values; ``decode=False`` keeps raw JSON.
        poll_interval: Seconds between checks for new data where inotify is
            not available (see :func:`watch_mode`; a shared reader polls at
            the interval of the follower that started it). A shared
            follower checks ``stop`` every ``max(poll_interval, 0.1)`` s.
        idle_timeout: Stop after this many seconds without new data (``None``: never).
        stop: Stop at the end of the available data once this event is set.
        shared: Join the process's shared reader of the file (the default);
            ``False`` polls the file on this follower's own (one reader each).

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
        shared: bool = True,
    ) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self.path = Path(path).absolute()
        self.offset = offset
        self._codec = (codec or DEFAULT_CODEC) if decode else None
        self.poll_interval = poll_interval
        self.idle_timeout = idle_timeout
        self.stop = stop
        self.shared = shared

    def _should_stop(self, idle_since: float) -> bool:
        if self.stop is not None and self.stop.is_set():
            return True
        return self.idle_timeout is not None and time.monotonic() - idle_since >= self.idle_timeout

    def _catch_up(self, lines: _LineReader) -> Iterator[Record]:
        """Read on this follower's own until the end of the file."""
        while records := lines.read():
            for record in records:
                self.offset = record.end_offset
                yield record

    def _join(self, lines: _LineReader) -> Generator[Record, None, tuple[_SharedReader, _Channel]]:
        """Catch up, then join the shared reader; yields the records read on the way."""
        while True:
            yield from self._catch_up(lines)
            joined = _join(self.path, lines.fd, lines.offset, self._codec, self.poll_interval)
            if joined is not None:
                return joined

    def __iter__(self) -> Iterator[Record]:
        with open_session_file(self.path, buffering=0) as stream:
            lines = _LineReader(self.path, stream.fileno(), self.offset, self._codec)
            idle_since = time.monotonic()
            if not self.shared:
                while True:
                    records = lines.read()
                    if records:
                        for record in records:
                            self.offset = record.end_offset
                            yield record
                        idle_since = time.monotonic()
                    elif self._should_stop(idle_since):
                        return
                    else:
                        time.sleep(self.poll_interval)
            for record in self._catch_up(lines):
                yield record
                idle_since = time.monotonic()
            if self._should_stop(idle_since):
                return
            reader, channel = yield from self._join(lines)
        try:
            # Records wake this thread at once; the timeout only bounds how late
            # ``stop`` or ``idle_timeout`` are noticed (100 followers waking every
            # poll interval would crowd out the ones receiving records).
            get, wait = channel.items.get, max(self.poll_interval, _STOP_CHECK_SECONDS)
            if self.idle_timeout is not None:
                wait = min(wait, max(self.idle_timeout, 0.001))
            while True:
                try:
                    item = get(timeout=wait)
                except queue.Empty:
                    if not self._should_stop(idle_since):
                        continue
                    reader.poll()  # what is on disk now, then stop
                    while not channel.items.empty():
                        yield self._take(channel.items.get_nowait())
                    return
                yield self._take(item)
                idle_since = time.monotonic()
        finally:
            reader.leave(channel)

    def _take(self, item: Record | BaseException) -> Record:
        if isinstance(item, BaseException):
            raise item
        self.offset = item.end_offset
        return item

    async def __aiter__(self) -> AsyncIterator[Record]:
        with open_session_file(self.path, buffering=0) as stream:
            lines = _LineReader(self.path, stream.fileno(), self.offset, self._codec)
            idle_since = time.monotonic()
            if not self.shared:
                while True:
                    records = lines.read()
                    if records:
                        for record in records:
                            self.offset = record.end_offset
                            yield record
                        idle_since = time.monotonic()
                    elif self._should_stop(idle_since):
                        return
                    else:
                        await asyncio.sleep(self.poll_interval)
            for record in self._catch_up(lines):
                yield record
                idle_since = time.monotonic()
            if self._should_stop(idle_since):
                return
            joining = self._join(lines)
            while True:
                try:
                    record = next(joining)
                except StopIteration as done:
                    reader, channel = done.value
                    break
                yield record
        wake = asyncio.Event()
        channel.async_wake = (asyncio.get_running_loop(), wake)
        wait = max(self.poll_interval, _STOP_CHECK_SECONDS)
        if self.idle_timeout is not None:
            wait = min(wait, max(self.idle_timeout, 0.001))
        try:
            while True:
                try:
                    item = channel.items.get_nowait()
                except queue.Empty:
                    if self._should_stop(idle_since):
                        reader.poll()
                        while not channel.items.empty():
                            yield self._take(channel.items.get_nowait())
                        return
                    wake.clear()
                    if channel.items.empty():  # re-checked after clear: no lost wake-up
                        # asyncio.timeout, not wait_for: no task per wait.
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(wait):
                                await wake.wait()
                    continue
                yield self._take(item)
                idle_since = time.monotonic()
        finally:
            channel.async_wake = None
            reader.leave(channel)
