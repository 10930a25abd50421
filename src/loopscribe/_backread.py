"""Reading a session file from its end: byte-range sources, lines backwards, visible counts.

What makes ``messages(last=N)`` and ``tail_offset`` cost the page, not the
file: a local file or a store's shipped session as a :class:`ByteSource`,
read backwards by blocks, each line found once.
"""

from __future__ import annotations

import bisect
import itertools
import mmap
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from ._codec import Codec
from ._files import complete_end
from ._fold import positive_int
from ._safeopen import open_session_fd
from ._sidelog import SideFact

BLOCK_BYTES = 1 << 16


class FileSource:
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


class ByteSource(Protocol):
    """Where a session's bytes are read by range: ``pread``, ``complete_end``, ``close``."""

    def pread(self, size: int, offset: int) -> bytes: ...
    def complete_end(self) -> int: ...
    def close(self) -> None: ...


def line_at(source: ByteSource, offset: int) -> bytes | None:
    """The complete line starting at ``offset`` (> 0); ``None`` if no line starts there."""
    head = source.pread(BLOCK_BYTES, offset - 1)
    if head[:1] != b"\n":
        return None  # the byte before a line's start ends the line before
    parts = [head[1:]]
    pos = offset - 1 + len(head)
    while b"\n" not in parts[-1]:
        more = source.pread(BLOCK_BYTES, pos)
        if not more:
            return None
        parts.append(more)
        pos += len(more)
    line = b"".join(parts)
    return line[: line.index(b"\n") + 1]


def reverse_lines(source: ByteSource, end: int) -> Iterator[tuple[int, bytes]]:
    """Complete lines before byte ``end`` (a line boundary), last first, with offsets.

    Each block is read and split once, and a line longer than a block is
    joined once from its blocks, so the cost is linear in the bytes read
    even for one line of hundreds of megabytes.
    """
    pos = end
    # The line that ends where the blocks read so far begin, its last part first.
    carry: list[bytes] = []
    while pos > 0:
        size = min(BLOCK_BYTES, pos)
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


def count_visible(path: Path, side: SideFact | None, codec: Codec) -> tuple[int, int]:
    """Visible and committed messages, counted from the record types at line starts.

    For files whose lines carry no counts (written before they did): a
    fresh Workspace uses it for ``MessagePage.total``, because a byte search
    of the mapped file (no JSON parsing) costs a fraction of folding every
    record into a summary.
    """
    compaction: tuple[int, int] | None = None  # (offset, messages before it)
    source = FileSource(path)
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
            keep = positive_int(side.data.get("keep_last"))
            stored = side.data.get("messages_before")
            before = stored if isinstance(stored, int) else messages
        elif compaction is not None:
            offset, before = compaction
            line = os.pread(fd, BLOCK_BYTES, offset)
            newline = line.find(b"\n")
            if newline >= 0:
                record = codec.loads(line[: newline + 1]).get("data") or {}
                keep = positive_int(record.get("keep_last"))
        else:
            return messages, messages
    finally:
        os.close(fd)
    return 1 + min(keep, before) + messages - before, messages


def tail_offset(path: str | os.PathLike[str], lines: int) -> int:
    """The byte offset where the last ``lines`` complete records start (read backwards)."""
    source = FileSource(path)
    try:
        end = source.complete_end()
        starts = [offset for offset, _raw in itertools.islice(reverse_lines(source, end), lines)]
        return starts[-1] if starts else end
    finally:
        source.close()
