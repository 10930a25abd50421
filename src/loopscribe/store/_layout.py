"""The object layout of a session store, version 1 (part of the file format).

Object storage cannot append, so a shipped session is a run of immutable
*segments* — consecutive pieces of the session file, cut at line ends — plus
one small *manifest* that is replaced as the session grows::

    <store>/loopscribe-store.json                      {"layout": 1}
    <store>/sessions/<session_id>.json                 the manifest
    <store>/sessions/<session_id>/<first>-<last>.jsonl a segment: records first..last
    <store>/sessions/<session_id>/artifacts/<name>     the session's artifacts

``<first>`` and ``<last>`` are the first and last ``seq`` of the segment,
zero-padded to 12 digits so that name order is seq order. Concatenated in
name order, the segments are byte for byte the session file up to the end
of its last shipped complete line.

The manifest is the commit point: its ``bytes`` and ``records`` say how much
of the session is shipped, and a reader uses exactly the segments that
continue one another from seq 0 up to ``bytes`` (a segment beyond it is the
leftover of an interrupted pass, which the next pass adopts or removes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from .._errors import StoreError

LAYOUT_VERSION = 1
MARKER = "loopscribe-store.json"
SESSIONS = "sessions"
ARTIFACTS = "artifacts"
SIDE_LOG = "side.jsonl"
"""A session's shipped side log (``FILE.meta``), beside its segments."""
SEQ_DIGITS = 12
_SEGMENT = re.compile(r"^(\d{12})-(\d{12})\.jsonl$")
_SESSION_ID = re.compile(r"^[0-9a-f]{32}$")


def is_session_id(text: str) -> bool:
    """Whether ``text`` is a session ID (32 lowercase hex digits)."""
    return _SESSION_ID.match(text) is not None


def session_dir(root: str, session_id: str) -> str:
    """The folder of a session's segments and artifacts (also its shipped location)."""
    return f"{root}/{SESSIONS}/{session_id}"


def manifest_path(root: str, session_id: str) -> str:
    """The object holding a session's manifest."""
    return f"{root}/{SESSIONS}/{session_id}.json"


def segment_name(first_seq: int, last_seq: int) -> str:
    """The object name of the segment holding records ``first_seq`` to ``last_seq``."""
    return f"{first_seq:0{SEQ_DIGITS}d}-{last_seq:0{SEQ_DIGITS}d}.jsonl"


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``(first_seq, last_seq)`` of a segment object name, or ``None`` if it is not one."""
    match = _SEGMENT.match(name.rsplit("/", 1)[-1])
    if match is None:
        return None
    first, last = int(match.group(1)), int(match.group(2))
    return (first, last) if first <= last else None


@dataclass(frozen=True, slots=True)
class Segment:
    """One shipped segment and where its bytes sit in the session file."""

    first_seq: int
    last_seq: int
    offset: int
    size: int

    @property
    def name(self) -> str:
        """The segment's object name."""
        return segment_name(self.first_seq, self.last_seq)

    @property
    def end(self) -> int:
        """The file offset just past the segment."""
        return self.offset + self.size


@dataclass(slots=True)
class Manifest:
    """What is shipped of one session: the commit point of every pass.

    Attributes:
        session_id: The session.
        size: File bytes shipped (always at a line end); "bytes" in the object.
        records: Records shipped (the next seq to ship).
        last_segment: The newest segment, so a pass can check the store's tail.
        summary: The session's list fields as of the shipped records
            (``SessionSummary`` as JSON, ``status`` as the shipper saw it).
        runs: ``run_id`` to trace ID (32 hex digits), for ``find --trace-id``.
        artifacts: Shipped artifacts by name: ``{"size": ..., "mtime_ns": ...}``.
        side_log: The shipped side log's ``{"size": ..., "mtime_ns": ...}`` (its
            complete lines, as the object ``SIDE_LOG``), or ``None`` when none was.
        origin: Host and file the session was shipped from.
        shipped_at: When this manifest was written (ISO 8601, UTC).
    """

    session_id: str
    size: int = 0
    records: int = 0
    last_segment: Segment | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, dict[str, int]] = field(default_factory=dict)
    side_log: dict[str, int] | None = None
    origin: dict[str, str] = field(default_factory=dict)
    shipped_at: str = ""

    def to_bytes(self) -> bytes:
        """The manifest object's content."""
        seg = self.last_segment
        return orjson.dumps(
            {
                "layout": LAYOUT_VERSION,
                "session_id": self.session_id,
                "bytes": self.size,
                "records": self.records,
                "last_segment": None
                if seg is None
                else {
                    "first_seq": seg.first_seq,
                    "last_seq": seg.last_seq,
                    "offset": seg.offset,
                    "size": seg.size,
                },
                "summary": self.summary,
                "runs": self.runs,
                "artifacts": self.artifacts,
                "side_log": self.side_log,
                "origin": self.origin,
                "shipped_at": self.shipped_at,
            }
        )

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> Manifest:
        """Parse a manifest object.

        Raises:
            StoreError: Not a manifest of a layout this version reads; names ``where``.
        """
        try:
            obj = orjson.loads(raw)
            if not isinstance(obj, dict):
                raise TypeError("not a JSON object")
            if obj.get("layout") != LAYOUT_VERSION:
                raise StoreError(
                    f"{where}: store layout {obj.get('layout')!r} is not supported (this "
                    f"loopscribe reads layout {LAYOUT_VERSION}); upgrade loopscribe"
                )
            seg = obj.get("last_segment")
            return cls(
                session_id=str(obj["session_id"]),
                size=int(obj["bytes"]),
                records=int(obj["records"]),
                last_segment=None
                if seg is None
                else Segment(
                    int(seg["first_seq"]),
                    int(seg["last_seq"]),
                    int(seg["offset"]),
                    int(seg["size"]),
                ),
                summary=dict(obj.get("summary") or {}),
                runs={str(k): str(v) for k, v in (obj.get("runs") or {}).items()},
                artifacts={
                    str(k): {"size": int(v["size"]), "mtime_ns": int(v["mtime_ns"])}
                    for k, v in (obj.get("artifacts") or {}).items()
                },
                side_log=None
                if obj.get("side_log") is None
                else {
                    "size": int(obj["side_log"]["size"]),
                    "mtime_ns": int(obj["side_log"]["mtime_ns"]),
                },
                origin={str(k): str(v) for k, v in (obj.get("origin") or {}).items()},
                shipped_at=str(obj.get("shipped_at") or ""),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise StoreError(
                f"{where}: not a loopscribe session manifest ({exc}); the store was changed "
                "outside loopscribe or damaged"
            ) from None


def chain_segments(names_sizes: list[tuple[str, int]], shipped_bytes: int) -> list[Segment]:
    """The segments that make up the first ``shipped_bytes`` of a session, in order.

    Args:
        names_sizes: Object names (or paths) and sizes of a session folder's
            objects, in any order; other objects are ignored.
        shipped_bytes: The manifest's ``bytes``.

    Raises:
        StoreError: The segments do not reach ``shipped_bytes`` (one is missing).
    """
    by_first: dict[int, tuple[int, int]] = {}
    for name, size in names_sizes:
        seqs = parse_segment_name(name)
        if seqs is None:
            continue
        first, last = seqs
        # Two candidates for one first seq (a leftover of an interrupted pass
        # beside a committed one): the committed one is found by its size below.
        by_first.setdefault(first, (last, size))
        if by_first[first] != (last, size):
            by_first[first] = max(by_first[first], (last, size))
    out: list[Segment] = []
    offset, seq = 0, 0
    while offset < shipped_bytes:
        found = by_first.get(seq)
        if found is None:
            raise StoreError(
                f"the segment starting at seq {seq} (byte {offset}) is missing from the store; "
                "the store was changed outside loopscribe: ship the session again into an "
                "empty location"
            )
        last, size = found
        out.append(Segment(seq, last, offset, size))
        offset, seq = offset + size, last + 1
    if offset != shipped_bytes:
        raise StoreError(
            f"the segments hold {offset} bytes where the manifest says {shipped_bytes}; "
            "the store was changed outside loopscribe"
        )
    return out
