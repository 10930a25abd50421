"""Streaming reader: Records from a session file in constant memory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ._codec import DEFAULT_CODEC, TAG_BYTES, TAG_KEY_BYTES, Codec
from ._errors import DecodeError
from ._format import Scanner, parse_ts
from ._model import Execution, Record

_BUFFER_BYTES = 1 << 16

Source = str | os.PathLike[str] | IO[bytes]


def to_record(
    scanner: Scanner,
    number: int,
    offset: int,
    raw: bytes,
    obj: dict[str, Any],
    codec: Codec | None,
) -> Record:
    """Build the Record of a validated line; ``codec=None`` leaves typed values raw."""
    try:
        ex = obj.get("execution")
        data = obj.get("data")
        if data is None:
            data = {}
        elif type(data) is not dict:
            raise TypeError("'data' must be an object")
        if codec is not None and TAG_BYTES in raw:
            data = codec.decode(data, raw.count(TAG_KEY_BYTES))
        return Record(
            obj["session_id"],
            obj["seq"],
            obj["type"],
            parse_ts(obj["ts"]),
            obj.get("run_id"),
            None if ex is None else Execution.from_json(ex),
            data,
            offset,
            len(raw),
        )
    except DecodeError as exc:
        raise scanner.corrupt(number, offset, str(exc)) from exc
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise scanner.corrupt(number, offset, f"not a valid record ({exc!r})") from exc


def _records(stream: IO[bytes], scanner: Scanner, codec: Codec | None) -> Iterator[Record]:
    for number, offset, raw, obj in scanner.lines(stream):
        yield to_record(scanner, number, offset, raw, obj, codec)


def read(source: Source, *, codec: Codec | None = None, decode: bool = True) -> Iterator[Record]:
    """Stream the Records of a session file, validating as it goes.

    Memory stays constant: one line is held at a time. An unfinished final
    line (no ``\\n``, as a crash leaves it) is ignored, even if it is valid JSON.

    Args:
        source: A path, or a binary file object positioned at the file's start.
        codec: Decodes typed values (messages, artifacts, snapshots); the
            default knows the built-in messages.
        decode: ``False`` leaves typed values as their raw JSON objects.

    Yields:
        Each complete record, in file order.

    Raises:
        CorruptRecordError: A complete line is damaged; names path, line and offset.
        UnsupportedVersionError: The file's format version is not supported.
    """
    active = (codec or DEFAULT_CODEC) if decode else None
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        with open(path, "rb", buffering=_BUFFER_BYTES) as stream:
            yield from _records(stream, Scanner(path), active)
    else:
        name = getattr(source, "name", None)
        yield from _records(source, Scanner(name if isinstance(name, str) else None), active)


def load_checkpoint(source: Source, *, codec: Codec | None = None) -> Any:
    """The snapshot of the latest explicit checkpoint in a file, or ``None``.

    Reads the file without taking the writer lock, so it works while another
    process records into it.
    """
    snapshot: Any = None
    for record in read(source, decode=False):
        if record.type == "checkpoint":
            snapshot = record.data.get("snapshot")
    return (codec or DEFAULT_CODEC).decode(snapshot)
