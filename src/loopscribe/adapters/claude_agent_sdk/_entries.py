"""Entries as the store keeps them (``source_entry`` records) and as the mapping gets them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import orjson

from ... import events as ev
from ..._codec import snapshot_error
from ..._errors import FormatError
from ..._reader import read
from ..._safeopen import open_session_file
from ...importers._lines import MAX_LINE_DEPTH, has_reserved_key, parse_ts, too_deep
from . import _values
from ._folder import _HEAD_BYTES

__all__ = [
    "_decoded",
    "_fill_meta",
    "_get",
    "_is_entry",
    "_session_id",
    "_stored",
    "_subpath_of",
    "_timestamp",
    "_verbatim",
]

_WRAPPING = 254 - MAX_LINE_DEPTH
"""orjson writes 254 levels: an entry in this many lists encodes iff it nests at most
``MAX_LINE_DEPTH`` levels."""


def _is_entry(data: Mapping[str, Any]) -> bool:
    return "entry" in data or "entry_tagged" in data or "entry_json" in data


def _get(entry: Any, name: str) -> Any:
    return entry.get(name) if type(entry) is dict else None


def _fill_meta(meta: dict[str, Any], obj: Mapping[str, Any]) -> None:
    if "sessionId" in obj:
        meta.update(
            session_id=obj.get("sessionId"),
            cwd=obj.get("cwd"),
            version=obj.get("version"),
            git_branch=obj.get("gitBranch"),
        )


def _timestamp(entry: Any) -> datetime | None:
    """An entry's time, if it has one a record can hold (years 1 to 9999 in UTC)."""
    ts = parse_ts(_get(entry, "timestamp"))
    if ts is None or 1 < ts.year < 9999:
        return ts
    try:
        ts.astimezone(UTC)
    except OverflowError:
        return None
    return ts


def _verbatim(subpath: str | None, entry: Any) -> tuple[dict[str, Any], Any, str | None]:
    """The ``source_entry`` data of an entry, what the mapping gets, and its text if unreadable.

    An entry is kept as a JSON object when the session codec writes it as it
    is and it reads back equal. Any other (the codec's reserved key ``$ls``,
    ``inf`` or ``nan``, an integer beyond 64 bits, a lone surrogate, a
    non-string key, deep nesting, a value with no JSON form) is kept as the
    text ``_values.dumps`` writes (``entry_tagged``), which loads back equal
    (see ``_values`` for the exceptions).

    The mapping gets what an import of the same Claude Code line gets, so
    the records are the importer's: the entry itself when orjson writes it
    as it is (the reserved key included: the codec escapes it in both), else
    what :func:`_as_imported` finds (``as_line``, so a replay maps it again
    the same way).
    """
    where = _values.lower(subpath)
    wrapped = entry
    for _ in range(_WRAPPING):
        wrapped = [wrapped]
    try:
        # Fails for what orjson cannot write, and for nesting deeper than MAX_LINE_DEPTH
        # (the importer's bound): one encoding checks both.
        raw: bytes | None = orjson.dumps(wrapped, option=orjson.OPT_PASSTHROUGH_DATACLASS)
    except TypeError:
        raw = None
    exact = raw is not None and not (b"null" in raw and _values.has_non_finite(entry))
    if exact and not has_reserved_key(cast(bytes, raw)):
        return {"subpath": where, "entry": entry}, entry, None
    data: dict[str, Any] = {"subpath": where, "entry_tagged": _values.dumps(entry)}
    if exact:
        return data, entry, None
    data["as_line"] = True
    mapped, invalid = _as_imported(entry)
    return data, mapped, invalid


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _as_imported(entry: Any) -> tuple[Any, str | None]:
    """What an import maps for the transcript line of ``entry``: ``(obj, None)`` or ``(None, text)``

    The SDK reads a transcript line with Python's ``json``; an import reads
    the same line with orjson, which takes an integer past 64 bits as a
    float and refuses ``NaN``, ``Infinity`` and a lone surrogate (the line is
    then an ``invalid_line``, kept as its text), and keeps a line nested
    deeper than ``MAX_LINE_DEPTH`` as its text too. The line is written again
    as Claude Code writes it (compact, UTF-8, a lone surrogate escaped), and
    read as an import reads it. An entry no JSON line can hold (a key that is
    not a string, a value with no JSON form) is mapped as the text
    ``_values.dumps`` writes, as an unreadable line.
    """
    try:
        # Refuses a value that contains itself, before the walk below could loop on it.
        text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"), allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return None, _values.dumps(entry)
    if not _string_keys(entry):
        return None, _values.dumps(entry)
    text = _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    line = text.encode()
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None, text
    return (None, text) if too_deep(line, obj) else (obj, None)


def _string_keys(value: Any) -> bool:
    """Whether every key in ``value`` (which does not contain itself) is a string."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if not all(type(k) is str for k in item):
                return False
            stack.extend(v for v in item.values() if isinstance(v, dict | list | tuple))
        elif isinstance(item, list | tuple):
            stack.extend(v for v in item if isinstance(v, dict | list | tuple))
    return True


def _decoded(data: Mapping[str, Any]) -> tuple[Any, Any, str | None]:
    """The inverse of :func:`_verbatim`: ``(entry, mapped, invalid)``.

    Also reads what older stores wrote: the ``entry_json`` text (JSON as
    ``json.dumps`` writes it), and ``entry_tagged`` entries mapped as they
    were then (``unmapped``: as their text; unmarked: as themselves), so a
    replay matches the records they left.
    """
    if "entry" in data:
        entry = data["entry"]
        return entry, entry, None
    text = data.get("entry_tagged")
    if isinstance(text, str):
        try:
            entry = _values.loads(text)
        except ValueError as exc:
            # Only a damaged file (or a redact pattern that cut the text) gets here.
            return snapshot_error(text, f"unreadable ({exc})"), None, text
        if data.get("as_line"):
            mapped, invalid = _as_imported(entry)
            return entry, mapped, invalid
        return (entry, None, text) if data.get("unmapped") else (entry, entry, None)
    text = data.get("entry_json")
    if not isinstance(text, str):
        return None, None, ""
    try:
        entry = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return snapshot_error(text, f"unreadable ({type(exc).__name__})"), None, text
    try:
        orjson.dumps(entry)
    except TypeError:
        return entry, None, text
    # The reserved key stays as it is: the codec escapes it, as for an import.
    return entry, entry, None


_NO_SUBPATH = object()
"""The subpath of a record whose ``subpath`` is damaged: equal to no key's."""


def _subpath_of(data: Mapping[str, Any]) -> Any:
    """A stored entry's ``subpath`` (``None``: the main transcript)."""
    where = data.get("subpath")
    if where is None or type(where) is str:
        return where
    try:
        subpath = _values.restore(where)
    except ValueError:
        return _NO_SUBPATH
    return subpath if isinstance(subpath, str) else _NO_SUBPATH


def _stored(path: Path) -> Iterable[Mapping[str, Any]]:
    for record in read(path, decode=False):
        if record.type == ev.SOURCE_ENTRY:
            yield record.data


def _session_id(path: Path) -> str:
    """The session ID in a session file's first line.

    Raises:
        FormatError: The file does not start with a session's first record.
    """
    with open_session_file(path, buffering=0) as stream:
        first = stream.readline(_HEAD_BYTES)
    try:
        found = orjson.loads(first)["session_id"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        found = None
    if not isinstance(found, str):
        raise FormatError(
            f"{path}: not a session file (its first line is no session record); it is where "
            "the store keeps this key's session: move it out of the folder",
            path=path,
            line=1,
            offset=0,
        )
    return found
