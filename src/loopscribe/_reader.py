"""Streaming reader: Records from a session file in constant memory."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from ._codec import DEFAULT_CODEC, TAG_KEY_BYTES, Codec
from ._errors import DecodeError
from ._format import Scanner, parse_ts
from ._model import Actor, Execution, Record, new_record
from ._safeopen import open_session_file
from ._source import is_url, open_binary

_BUFFER_BYTES = 1 << 16

Source = str | os.PathLike[str] | IO[bytes]


class LazyData(Mapping[str, Any]):
    """A record's data whose typed values are decoded on first access.

    Reading a file parses every line (that is how it is validated), but
    building Python objects for the messages in it costs more than the
    parse, and even finding out whether a line holds any typed value means
    scanning it; consumers that only look at types, sequence numbers or
    plain fields never pay for either. The first access decodes the whole
    mapping once; a type the codec does not know, or a value that does not
    fit its type, raises :class:`~loopscribe.DecodeError` then, naming the
    file and line.
    """

    __slots__ = ("_data", "_source")

    def __init__(
        self,
        data: dict[str, Any],
        codec: Codec,
        raw: bytes,
        path: str | os.PathLike[str] | None,
        line: int,
        offset: int,
    ) -> None:
        self._data = data
        # Everything decoding needs, in one slot; None once decoded.
        self._source: tuple[Codec, bytes, Any, int, int] | None = (codec, raw, path, line, offset)

    def _get(self) -> dict[str, Any]:
        source = self._source
        if source is not None:
            codec, raw, path, line, offset = source
            # Inside a JSON string the quotes would be escaped: each '"$ls":' is a tag.
            tags = raw.count(TAG_KEY_BYTES)
            if tags:
                try:
                    codec.decode(self._data, tags)
                except DecodeError as exc:
                    where = f"{path}:{line}" if line else f"{path}"
                    raise DecodeError(f"{where}: byte {offset}: {exc}") from exc
            self._source = None
        return self._data

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._data)  # decoding never adds or removes keys

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` (decoded), or ``default``."""
        return self._get().get(key, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyData):
            other = other._get()
        return self._get() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._get())

    def to_dict(self) -> dict[str, Any]:
        """The decoded data as a plain dict."""
        return self._get()


def to_record(
    scanner: Scanner,
    number: int,
    offset: int,
    raw: bytes,
    obj: dict[str, Any],
    codec: Codec | None,
    ts: datetime | None = None,
) -> Record:
    """Build the Record of a validated line; ``codec=None`` leaves typed values raw.

    ``ts``: the line's time, when the caller has it parsed already (``Scanner.ts``
    right after ``Scanner.check`` of this line).
    """
    try:
        ex = obj.get("execution")
        data = obj.get("data")
        if data is None:
            data = {}
        elif type(data) is not dict:
            raise TypeError("'data' must be an object")
        if codec is not None and data:
            data = _new_lazy(data, (codec, raw, scanner.path, number, offset))
        return new_record(
            obj["session_id"],
            obj["seq"],
            obj["type"],
            parse_ts(obj["ts"]) if ts is None else ts,
            obj.get("run_id"),
            None if ex is None else Execution.from_json(ex),
            data,
            offset,
            len(raw),
            None if (actor := obj.get("actor")) is None else Actor.from_json(actor),
        )
    except DecodeError as exc:
        raise scanner.corrupt(number, offset, str(exc)) from exc
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise scanner.corrupt(number, offset, f"not a valid record ({exc!r})") from exc


def _lazy_factory() -> Callable[[dict[str, Any], tuple[Any, ...]], LazyData]:
    """A LazyData constructor that sets the two slots directly: one per record read."""
    slots = vars(LazyData)
    set_data, set_source = slots["_data"].__set__, slots["_source"].__set__
    new = object.__new__

    def make(data: dict[str, Any], source: tuple[Any, ...]) -> LazyData:
        lazy = new(LazyData)
        set_data(lazy, data)
        set_source(lazy, source)
        return lazy

    return make


_new_lazy = _lazy_factory()


def _records(stream: IO[bytes], scanner: Scanner, codec: Codec | None) -> Iterator[Record]:
    """:func:`to_record` for every line, inlined: this loop runs once per record read.

    The scanner has checked each line's shape (``data`` an object or absent,
    ``execution`` with string ``id`` and ``kind``) and parsed its time.
    Consecutive records of one call share an equal ``execution`` object; the
    Execution built for the first is reused (an ``attempt`` that is not an
    int, which could compare equal, is always built anew and so refused).
    """
    path = scanner.path
    last: Any = None
    last_execution: Execution | None = None
    for number, offset, raw, obj in scanner.lines(stream):
        ex = obj.get("execution")
        if ex is not None and (ex != last or type(ex.get("attempt", 1)) is not int):
            try:
                last_execution = Execution.from_json(ex)
            except (KeyError, TypeError, ValueError) as exc:
                raise scanner.corrupt(number, offset, f"not a valid record ({exc!r})") from exc
            last = ex
        execution = None if ex is None else last_execution
        data = obj.get("data")
        if data is None:
            data = {}
        elif codec is not None and data:
            data = _new_lazy(data, (codec, raw, path, number, offset))
        yield new_record(
            obj["session_id"],
            obj["seq"],
            obj["type"],
            scanner.ts,
            obj.get("run_id"),
            execution,
            data,
            offset,
            len(raw),
            None if (actor := obj.get("actor")) is None else Actor.from_json(actor),
        )


def read(source: Source, *, codec: Codec | None = None, decode: bool = True) -> Iterator[Record]:
    """Stream the Records of a session file, validating as it goes.

    Memory stays constant: one line is held at a time. An unfinished final
    line (no ``\\n``, as a crash leaves it) is ignored, even if it is valid JSON.

    Args:
        source: A path, a shipped session's URL (``s3://.../sessions/<id>``,
            needs ``loopscribe[store]``), or a binary file object positioned
            at the file's start.
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
    if is_url(source):
        # A shipped session (<store>/sessions/<id>): its segments read as one file.
        with open_binary(source) as stream:  # type: ignore[arg-type]
            yield from _records(stream, Scanner(str(source)), active)
    elif isinstance(source, str | os.PathLike):
        path = Path(source)
        with open_session_file(path, _BUFFER_BYTES) as stream:
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
