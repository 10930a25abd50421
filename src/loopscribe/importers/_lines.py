"""A transcript's lines: read complete lines from an offset, tell a line's type unparsed,
its timestamps, its depth, and the digests that identify a transcript."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

_BUFFER_BYTES = 1 << 16


def parse_ts(value: Any) -> datetime | None:
    """A source timestamp (ISO 8601, ``Z`` allowed) as an aware datetime; ``None`` if absent."""
    if type(value) is not str:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        return None
    return dt if dt.tzinfo is not None else None


def format_ts(value: datetime | None) -> str | None:
    """The inverse of :func:`parse_ts`, for the cursor."""
    return None if value is None else value.isoformat()


def head_digest(path: Path) -> str | None:
    """SHA-256 of the first complete line of ``path``, which identifies a transcript."""
    with open(path, "rb") as stream:
        first = stream.readline()
    if not first.endswith(b"\n"):
        return None
    return hashlib.sha256(first).hexdigest()


MAX_LINE_DEPTH = 240
"""Deeper source lines are kept whole as text: a record nests them a few levels more,
and the codec records nothing below 253 levels."""


def too_deep(raw: bytes, obj: Any) -> bool:
    """Whether a parsed line nests deeper than :data:`MAX_LINE_DEPTH` (cheap for most lines)."""
    if raw.count(b"{") + raw.count(b"[") < MAX_LINE_DEPTH:
        return False
    level = [(obj, 1)]
    while level:
        value, depth = level.pop()
        if depth > MAX_LINE_DEPTH:
            return True
        if isinstance(value, dict):
            level.extend((v, depth + 1) for v in value.values() if isinstance(v, dict | list))
        elif isinstance(value, list):
            level.extend((v, depth + 1) for v in value if isinstance(v, dict | list))
    return False


def _digest_prefix(path: Path, size: int) -> Any:
    """A running SHA-256 of the first ``size`` bytes of ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as stream:
        left = size
        while left > 0:
            chunk = stream.read(min(left, _BUFFER_BYTES))
            if not chunk:
                break
            digest.update(chunk)
            left -= len(chunk)
    return digest


def read_lines(path: Path, offset: int, line: int) -> Iterator[tuple[int, int, bytes]]:
    """Yield ``(line_number, end_offset, raw)`` for each complete line after ``offset``.

    Reading stops before a final line without ``\\n``: the agent is still
    writing it, and the next import reads it whole.
    """
    with open(path, "rb", buffering=_BUFFER_BYTES) as stream:
        if offset:
            stream.seek(offset)
        for raw in stream:
            if raw[-1:] != b"\n":
                return
            offset += len(raw)
            line += 1
            yield line, offset, raw


def nested_type(raw: bytes, marker: bytes) -> bytes | None:
    """The ``type`` of the first nested object of a line, if it directly follows ``marker``.

    ``marker`` is the raw JSON text before that object, e.g.
    ``b'"type":"progress","data":'``. The answer is certain, not a guess:
    when the first ``{`` after the line's opening one is the object right
    after ``marker``, nothing before it is nested, so ``marker`` is at the top
    level of the line (inside a JSON string its quotes would be escaped).
    Returns ``None`` when that does not hold; the caller then parses the line.
    """
    at = raw.find(marker)
    if at < 0:
        return None
    brace = at + len(marker)
    if raw.find(b"{", 1) != brace or not raw.startswith(b'{"type":"', brace):
        return None
    name_start = brace + 9
    name_end = raw.find(b'"', name_start)
    return raw[name_start:name_end] if name_end > name_start else None


_TAG_KEY = b'"$ls"'


def has_reserved_key(raw: bytes) -> bool:
    """Whether a source line may use the codec's reserved key ``$ls``.

    Most lines hold no ``$`` at all, which memchr finds several times faster
    than a search for the whole key.
    """
    return raw.find(b"$") >= 0 and _TAG_KEY in raw
