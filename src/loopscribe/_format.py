"""Session file format, version 1: one JSON record per ``\\n``-terminated line.

Keys appear in this order: ``session_id``, ``seq``, ``type``, ``run_id``
(absent on ``session_start``), ``ts``, ``execution`` (only when the record
belongs to one), ``data``. The first record is ``session_start`` with
``data.format_version == 1``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import IO, Any

import orjson

from ._errors import CorruptRecordError, UnsupportedVersionError

_SESSION_ID = re.compile(r"[0-9a-f]{32}")


def is_session_id(text: object) -> bool:
    """Whether ``text`` is a session ID: exactly 32 lowercase hex digits, nothing else.

    The one check of a session ID from outside (a caller, a store, a span, a
    transcript): an ID that passes names a file and an object key safely.
    """
    return isinstance(text, str) and _SESSION_ID.fullmatch(text) is not None


FORMAT_VERSION = 1
SUPPORTED_VERSIONS = frozenset({FORMAT_VERSION})
CHAIN_ALGORITHM = "sha256"
"""The hash of a chained session's records (``chain_start``'s ``chain``)."""


_UTC_Z = orjson.OPT_UTC_Z


def format_ts(dt: datetime | None) -> tuple[datetime, str]:
    """Normalize a source timestamp to UTC; return it and its stored form.

    The stored form always has six digits of microseconds and ends in ``Z``,
    so stored times sort as text. ``None`` means now; a naive datetime is
    taken as local time.
    """
    if dt is None:
        dt = datetime.now(UTC)
    elif dt.tzinfo is not UTC:
        dt = dt.astimezone(UTC)
    if dt.microsecond:
        # orjson writes an aware UTC time with six digits and Z, several times
        # faster than isoformat(); only a whole second would lose its fraction.
        return dt, orjson.dumps(dt, option=_UTC_Z)[1:-1].decode()
    return dt, f"{dt.replace(tzinfo=None).isoformat()}.000000Z"


def parse_ts(value: str) -> datetime:
    """Parse a stored timestamp into an aware UTC datetime.

    Raises:
        ValueError: Not an ISO 8601 time, or outside the range of datetime in UTC.
    """
    dt = datetime.fromisoformat(value)
    if dt.tzinfo is UTC:
        return dt
    try:
        return dt.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value!r} is outside the range of datetime in UTC") from None


def _where(path: str | os.PathLike[str] | None, line: int, offset: int) -> str:
    return f"{os.fspath(path) if path is not None else '<stream>'}:{line}: byte {offset}"


class Scanner:
    """Validate the complete lines of a session file, one at a time.

    Iterate ``lines()`` to get ``(line_number, offset, raw_line, parsed)`` for
    every complete, valid line. Afterwards ``end_offset`` is where the last
    complete line ends and ``tail`` is the length of an unfinished final line
    (one without ``\\n``) that was ignored.

    Raises (from the iteration):
        CorruptRecordError: A complete line is not JSON, not a record, breaks
            the seq order, or belongs to another session.
        UnsupportedVersionError: The file declares an unknown format version.
    """

    __slots__ = ("end_offset", "next_seq", "path", "session_id", "start", "tail", "ts")

    def __init__(
        self, path: str | os.PathLike[str] | None, *, resume: tuple[str, int] | None = None
    ) -> None:
        """Validate a file from its start, or from the middle when ``resume`` is given.

        Args:
            path: Named in error messages.
            resume: ``(session_id, next_seq)`` expected at the first line, for
                a scan that starts after line 1; ``(session_id, -1)`` accepts
                whatever seq the first line has.
        """
        self.path = path
        self.session_id: str | None = None
        self.start: dict[str, Any] | None = None
        self.next_seq = 0
        self.end_offset = 0
        self.tail = 0
        self.ts = datetime.min.replace(tzinfo=UTC)
        """The time of the line checked last, parsed (meaningful once a line was checked)."""
        if resume is not None:
            self.session_id, self.next_seq = resume

    def corrupt(self, line: int, offset: int, what: str) -> CorruptRecordError:
        """An error for the complete line ``line`` at ``offset``."""
        return CorruptRecordError(
            f"{_where(self.path, line, offset)}: {what}; "
            "the file was changed outside loopscribe or damaged",
            path=self.path,
            line=line,
            offset=offset,
        )

    def check(self, number: int, offset: int, raw: bytes) -> dict[str, Any]:
        """Validate one complete line (``raw`` ends with ``\\n``) and return it parsed."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise self.corrupt(number, offset, f"not valid JSON ({exc})") from None
        if type(obj) is not dict:
            raise self.corrupt(number, offset, "a record must be a JSON object")
        seq = obj.get("seq")
        if type(seq) is not int or (seq != self.next_seq and self.next_seq >= 0):
            expected = self.next_seq if self.next_seq >= 0 else "an integer"
            raise self.corrupt(number, offset, f"expected seq {expected}, found {seq!r}")
        if self.session_id is None:
            self._check_start(number, offset, obj)
        elif obj.get("session_id") != self.session_id:
            raise self.corrupt(
                number,
                offset,
                f"record belongs to session {obj.get('session_id')!r}, not {self.session_id!r}",
            )
        ts = obj.get("ts")
        if type(obj.get("type")) is not str or type(ts) is not str:
            raise self.corrupt(number, offset, "a record needs string 'type' and 'ts'")
        # The same shape read() needs, so open never appends after a line read() refuses.
        try:
            self.ts = parse_ts(ts)
        except ValueError as exc:
            raise self.corrupt(number, offset, f"'ts' is not a usable time ({exc})") from None
        data = obj.get("data")
        if data is not None and type(data) is not dict:
            raise self.corrupt(number, offset, "'data' must be an object")
        ex = obj.get("execution")
        if ex is not None and (
            type(ex) is not dict or type(ex.get("id")) is not str or type(ex.get("kind")) is not str
        ):
            raise self.corrupt(number, offset, "'execution' needs string 'id' and 'kind'")
        actor = obj.get("actor")
        if actor is not None and (
            type(actor) is not dict or any(type(v) is not str for v in actor.values())
        ):
            raise self.corrupt(number, offset, "'actor' must be an object of strings")
        self.next_seq = seq + 1
        self.end_offset = offset + len(raw)
        return obj

    def lines(
        self, stream: IO[bytes], *, offset: int = 0, first_line: int = 1
    ) -> Iterator[tuple[int, int, bytes, dict[str, Any]]]:
        """Yield every complete, validated line of ``stream``.

        Args:
            stream: Positioned at ``offset``.
            offset: Byte offset of the stream's position in the file.
            first_line: Line number of the first line read.
        """
        check = self.check
        self.end_offset = offset
        for number, raw in enumerate(stream, first_line):
            if raw[-1:] != b"\n":
                # An unfinished final line: a write interrupted by a crash.
                self.tail = len(raw)
                return
            yield number, offset, raw, check(number, offset, raw)
            offset += len(raw)

    def _check_start(self, number: int, offset: int, obj: dict[str, Any]) -> None:
        if obj.get("type") != "session_start":
            raise self.corrupt(number, offset, "the first record must be 'session_start'")
        sid = obj.get("session_id")
        data = obj.get("data")
        if type(sid) is not str or not sid or type(data) is not dict:
            raise self.corrupt(number, offset, "session_start needs 'session_id' and 'data'")
        version = data.get("format_version")
        if version not in SUPPORTED_VERSIONS or type(version) is not int:
            raise UnsupportedVersionError(
                f"{_where(self.path, number, offset)}: format_version {version!r} is not "
                f"supported (this loopscribe reads {sorted(SUPPORTED_VERSIONS)}); "
                "upgrade loopscribe to read this file",
                path=self.path,
                line=number,
                offset=offset,
            )
        self.session_id = sid
        self.start = obj
