"""A session's manifest: the commit point of every pass, parsed into a checked structure.

A manifest read from a store is untrusted: :meth:`Manifest.from_bytes`
checks every field's type and range, that its ``session_id`` is the one its
object is named after, and that its numbers agree with one another, or
raises one :class:`~loopscribe.StoreError` naming the object and the field.
Nothing else in loopscribe reads a manifest's JSON.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, get_args

import orjson

from .._cost import Cost
from .._errors import StoreError
from .._fold import Compaction, SessionSummary, Status
from ._layout import (
    LAYOUT_VERSION,
    MAX_ARTIFACTS,
    MAX_INT,
    MAX_MANIFEST_BYTES,
    Segment,
    check_artifact_name,
    check_session_id,
    shown,
)

__all__ = ["Manifest", "ManifestError", "summary_from_json", "summary_to_json", "too_large"]

MAX_TEXT_CHARS = 65_536
"""A summary string (a title, a compaction's summary) is cut to this many characters."""
_MAX_KEY_CHARS = 4096
_MAX_DOLLAR_CHARS = 64
_TRACE_HEX = frozenset("0123456789abcdef")
_STATUSES: frozenset[str] = frozenset(get_args(Status))
_TEXT_FIELDS = (
    "title",
    "model",
    "provider",
    "mode",
    "role",
    "agent_name",
    "color",
    "parent_id",
    "source",
    "result",
    "state",
)
_COUNT_FIELDS = (
    "message_count",
    "messages_total",
    "input_tokens",
    "output_tokens",
    "runs",
    "records",
)
_EPOCH = "1970-01-01T00:00:00+00:00"


class ManifestError(StoreError):
    """A manifest object is damaged: not JSON, a field wrong, or another session's."""


class _Bad(Exception):
    """One field of a manifest is wrong (turned into a StoreError naming the object)."""


def _count(value: Any, name: str, minimum: int = 0) -> int:
    # bool is an int in Python, but `true` is not a count.
    if type(value) is not int or not minimum <= value <= MAX_INT:
        raise _Bad(f"{name!r} must be an integer >= {minimum}, got {shown(value)}")
    return value


def _text(value: Any, name: str, limit: int = MAX_TEXT_CHARS) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise _Bad(f"{name!r} must be a string of at most {limit} characters, got {shown(value)}")
    return value


def _object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{name!r} must be an object, got {shown(value)}")
    return value


def _maybe_object(value: Any, name: str) -> dict[str, Any]:
    """An object that may be absent (``null``): never a falsy value of another type."""
    return {} if value is None else _object(value, name)


def _maybe_list(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Bad(f"{name!r} must be a list, got {shown(value)}")
    return value


def _when(value: Any, name: str) -> datetime:
    text = _text(value, name, 64)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _Bad(f"{name!r} must be an ISO 8601 date, got {shown(value)}") from None
    if moment.tzinfo is None:
        raise _Bad(f"{name!r} must be a date with its UTC offset, got {shown(value)}")
    return moment


def _size_mtime(value: Any, name: str) -> dict[str, int]:
    obj = _object(value, name)
    return {
        "size": _count(obj.get("size"), f"{name}.size"),
        "mtime_ns": _count(obj.get("mtime_ns"), f"{name}.mtime_ns"),
    }


def summary_to_json(summary: SessionSummary) -> dict[str, Any]:
    """A SessionSummary as the manifest's ``summary`` object (long strings cut)."""
    out: dict[str, Any] = {}
    for name in SessionSummary.__dataclass_fields__:
        value = getattr(summary, name)
        if name == "path":
            continue
        if isinstance(value, datetime):
            value = value.isoformat()
        elif name == "compaction" and value is not None:
            value = {
                "at": value.at.isoformat(),
                "seq": value.seq,
                "before": value.messages_before,
                "summary": None if value.summary is None else value.summary[:MAX_TEXT_CHARS],
                "keep_last": value.keep_last,
            }
        elif isinstance(value, str):
            value = value[:MAX_TEXT_CHARS]
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Cost):
            # Exact dollars as text (JSON numbers would round them), with the call counts.
            value = {"usd": str(value.usd), "priced": value.priced, "unknown": value.unknown}
        out[name] = value
    return out


def summary_from_json(
    obj: Mapping[str, Any], path: Path | str, where: str = "manifest"
) -> SessionSummary:
    """The SessionSummary of a manifest's ``summary`` object (its file: ``path``).

    Raises:
        StoreError: A field has the wrong type or value; names ``where`` and the field.
    """
    try:
        return _summary(obj, path)
    except _Bad as exc:
        raise ManifestError(
            f"{where}: summary {exc}; the store was changed outside loopscribe or damaged "
            "(ship the session again, or remove the object)"
        ) from None


def _summary(obj: Mapping[str, Any], path: Path | str) -> SessionSummary:
    fields: dict[str, Any] = {"path": path}
    fields["id"] = _session_id_field(obj.get("id"), "summary.id")
    status = obj.get("status")
    if status not in _STATUSES:
        raise _Bad(f"'status' must be one of {sorted(_STATUSES)}, got {shown(status)}")
    fields["status"] = status
    for name in ("created", "updated"):
        value = obj.get(name)
        fields[name] = _when(_EPOCH if value is None else value, name)
    for name in _TEXT_FIELDS:
        value = obj.get(name)
        fields[name] = None if value is None else _text(value, name)
    for name in _COUNT_FIELDS:
        fields[name] = _count(obj.get(name, 0), name)
    skills = _maybe_list(obj.get("skills"), "skills")
    fields["skills"] = tuple(_text(s, "skills[]") for s in skills)
    todos = _maybe_list(obj.get("todos"), "todos")
    if not all(isinstance(t, dict) for t in todos):
        raise _Bad(f"'todos' must be a list of objects, got {shown(todos)}")
    fields["todos"] = tuple(todos)
    cost = obj.get("cost")
    if cost is not None:
        cost = _object(cost, "cost")
        fields["cost"] = Cost(
            _dollars(cost.get("usd"), "cost.usd"),
            _count(cost.get("priced", 0), "cost.priced"),
            _count(cost.get("unknown", 0), "cost.unknown"),
        )
    comp = obj.get("compaction")
    if comp is not None:
        comp = _object(comp, "compaction")
        summary = comp.get("summary")
        fields["compaction"] = Compaction(
            _when(comp.get("at"), "compaction.at"),
            _count(comp.get("seq"), "compaction.seq", minimum=-1),
            _count(comp.get("before"), "compaction.before"),
            None if summary is None else _text(summary, "compaction.summary"),
            _count(comp.get("keep_last", 0), "compaction.keep_last"),
        )
    if "cost" not in obj and (fields.get("input_tokens") or fields.get("output_tokens")):
        # Shipped before costs were kept: usage totals alone cannot be priced, and a
        # cost is never shown as 0 (docs/cost.md).
        fields["cost"] = Cost(unknown=1)
    return SessionSummary(**fields)


def _dollars(value: Any, name: str) -> Decimal:
    """A manifest field that must be a non-negative, finite amount written as text."""
    if isinstance(value, str) and len(value) <= _MAX_DOLLAR_CHARS:
        with contextlib.suppress(InvalidOperation):
            amount = Decimal(value)
            if amount.is_finite() and amount >= 0:
                return amount
    raise _Bad(f"{name!r} must be an amount of dollars as text, got {shown(value)}")


def _session_id_field(value: Any, name: str) -> str:
    """A manifest field that must be a session ID."""
    try:
        return check_session_id(value, name)
    except StoreError:
        raise _Bad(f"{name!r} must be a session ID, got {shown(value)}") from None


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
        """The manifest object's content.

        Raises:
            StoreError: It would be larger than readers accept
                (:data:`~loopscribe.store._layout.MAX_MANIFEST_BYTES`).
        """
        seg = self.last_segment
        data = orjson.dumps(
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
        if len(data) > MAX_MANIFEST_BYTES:
            raise StoreError(
                f"session {self.session_id}: its manifest would take {len(data)} bytes, more "
                f"than the {MAX_MANIFEST_BYTES} a reader accepts (too many runs or artifacts)"
            )
        return data

    @classmethod
    def from_bytes(cls, raw: bytes, where: str, session_id: str | None = None) -> Manifest:
        """Parse and check a manifest object.

        Args:
            raw: The object's content.
            where: The object's location, for errors.
            session_id: The session its object is named after: the manifest
                must be that session's.

        Raises:
            StoreError: Not a manifest of a layout this version reads, or a
                field is wrong; one line naming ``where`` and the field.
        """
        if len(raw) > MAX_MANIFEST_BYTES:
            raise too_large(where, len(raw))
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _not_a_manifest(where, f"not JSON ({exc})") from None
        try:
            return cls._parse(obj, where, session_id)
        except _Bad as exc:
            raise _not_a_manifest(where, str(exc)) from None

    @classmethod
    def _parse(cls, obj: Any, where: str, expected: str | None) -> Manifest:
        obj = _object(obj, "manifest")
        layout = obj.get("layout")
        if layout != LAYOUT_VERSION or type(layout) is not int:
            if type(layout) is int and layout > LAYOUT_VERSION:
                raise StoreError(
                    f"{where}: store layout {layout} is not supported (this loopscribe reads "
                    f"layout {LAYOUT_VERSION}); upgrade loopscribe"
                )
            raise _Bad(f"'layout' must be {LAYOUT_VERSION}, got {shown(layout)}")
        sid = _session_id_field(obj.get("session_id"), "session_id")
        if expected is not None and sid != expected:
            raise _Bad(f"'session_id' is {sid}, but the object is named after {expected}")
        size = _count(obj.get("bytes"), "bytes")
        records = _count(obj.get("records"), "records")
        if records > size or (records == 0) != (size == 0):
            raise _Bad(f"{records} records cannot take {size} bytes")
        last = None
        seg = obj.get("last_segment")
        if seg is not None:
            seg = _object(seg, "last_segment")
            last = Segment(
                _count(seg.get("first_seq"), "last_segment.first_seq"),
                _count(seg.get("last_seq"), "last_segment.last_seq"),
                _count(seg.get("offset"), "last_segment.offset"),
                _count(seg.get("size"), "last_segment.size", minimum=1),
            )
            if last.first_seq > last.last_seq or last.end != size or last.last_seq + 1 != records:
                raise _Bad(f"'last_segment' {shown(seg)} does not end at the manifest's end")
        elif size:
            raise _Bad("'last_segment' is missing though records were shipped")
        summary = _maybe_object(obj.get("summary"), "summary")
        if summary:
            try:
                _summary(summary, "")
            except _Bad as exc:
                raise _Bad(f"summary {exc}") from None
            if summary.get("id") != sid:
                raise _Bad(f"'summary.id' {shown(summary.get('id'))} is not {sid}")
        runs = _maybe_object(obj.get("runs"), "runs")
        for run_id, trace in runs.items():
            _text(run_id, "runs (a run ID)", _MAX_KEY_CHARS)
            if not isinstance(trace, str) or len(trace) != 32 or not set(trace) <= _TRACE_HEX:
                raise _Bad(f"'runs' must map run IDs to 32 hex digits, got {shown(trace)}")
        artifacts = _maybe_object(obj.get("artifacts"), "artifacts")
        if len(artifacts) > MAX_ARTIFACTS:
            raise _Bad(f"'artifacts' names {len(artifacts)}, more than {MAX_ARTIFACTS}")
        checked = {}
        for name, info in artifacts.items():
            try:
                check_artifact_name(name, "artifacts")
            except StoreError as exc:
                raise _Bad(str(exc)) from None
            checked[name] = _size_mtime(info, f"artifacts[{shown(name)}]")
        side = obj.get("side_log")
        origin = _maybe_object(obj.get("origin"), "origin")
        for key, value in origin.items():
            _text(value, f"origin.{key}", _MAX_KEY_CHARS)
        shipped_at = obj.get("shipped_at")
        if shipped_at is None or shipped_at == "":
            shipped_at = ""
        else:
            _when(shipped_at, "shipped_at")
        return cls(
            session_id=sid,
            size=size,
            records=records,
            last_segment=last,
            summary=summary,
            runs=runs,
            artifacts=checked,
            side_log=None if side is None else _size_mtime(side, "side_log"),
            origin=origin,
            shipped_at=shipped_at,
        )


def _not_a_manifest(where: str, what: str) -> StoreError:
    return ManifestError(
        f"{where}: not a loopscribe session manifest: {what}; the store was changed outside "
        "loopscribe or damaged (ship the session again, or remove the object)"
    )


def too_large(where: str, size: int) -> StoreError:
    """The error for a manifest object over the size bound (refused before it is read)."""
    return StoreError(
        f"{where}: {size} bytes, more than a manifest may hold ({MAX_MANIFEST_BYTES}); not "
        "read: the store was changed outside loopscribe or damaged (remove the object)"
    )
