"""Live following: Records as they are written, from any byte offset.

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
import os
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

__all__ = ["follow"]

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
            if os.fstat(stream.fileno()).st_size < self.offset + len(pending):
                raise FormatError(
                    f"{self.path}: the file shrank below byte {self.offset + len(pending)} "
                    "while it was followed; it was replaced or truncated outside loopscribe"
                )
            return []
        pending += chunk
        out: list[Record] = []
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            raw = bytes(pending[start : end + 1])
            try:
                obj = scanner.check(0, self.offset, raw)
                out.append(to_record(scanner, 0, self.offset, raw, obj, self._codec))
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

    def _should_stop(self, idle_since: float) -> bool:
        if self.stop is not None and self.stop.is_set():
            return True
        return self.idle_timeout is not None and time.monotonic() - idle_since >= self.idle_timeout

    def __iter__(self) -> Iterator[Record]:
        with open(self.path, "rb", buffering=0) as stream:
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
        with open(self.path, "rb", buffering=0) as stream:
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
