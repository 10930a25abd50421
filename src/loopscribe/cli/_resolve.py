"""What a command's SESSION or REF argument names, whatever form a user copied.

One resolver for every command: a session file, a folder, a session ID or a
unique ID prefix (also of the agent's own ID for an imported transcript), a
store URL, or a reference to one record or span:

* ``file:///path/s.jsonl#seq=N`` or ``path/s.jsonl#seq=N`` (a span's
  ``*_ref`` attribute);
* a viewer link, ``http://127.0.0.1:8765/session/ID[/record/N]`` or
  ``.../trace/TRACE_ID[/span/SPAN_ID]``;
* ``TRACE_ID/SPAN_ID`` (32 and 16 hex digits), or ``TRACE_ID`` alone where a
  trace is meant.

IDs and spans are looked up below the sessions home (``--dir``,
``LOOPSCRIBE_DIR``, else ``$XDG_DATA_HOME/loopscribe``).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from .._source import file_url_path, is_url

__all__ = ["Reference", "parse_reference"]

_HEX = re.compile(r"[0-9a-fA-F]+")
_SPAN_PAIR = re.compile(r"^(?:0x)?([0-9a-fA-F]{32})[/:]([0-9a-fA-F]{16})$")
_STORE_SESSION = re.compile(r"/sessions/[0-9a-f]{32}/?$")
_SEQ = re.compile(r"(?:^|&)seq=(\d+)(?:&|$)")
_VIEWER = re.compile(
    r"^/(?:api/)?(?:session/(?P<session>[^/]+)(?:/(?:record/(?P<seq>\d+)(?:/raw)?|run/[^/]+|"
    r"conversation|span/(?P<sspan>[0-9a-fA-F]{16})))?|trace/(?P<trace>[0-9a-fA-F]{32})"
    r"(?:/span/(?P<span>[0-9a-fA-F]{16}))?)/?$"
)


@dataclass(frozen=True, slots=True)
class Reference:
    """What an argument names: exactly one of a path, a session ID (prefix), a store URL, a span."""

    text: str
    path: Path | None = None
    """A local file or folder (it may not exist: the caller says so)."""
    session: str | None = None
    """A session ID or unique ID prefix, looked up in the sessions home."""
    url: str | None = None
    """A store URL (``s3://``, ``file://`` of a store, ...)."""
    seq: int | None = None
    """The record the reference points at, if it names one."""
    trace_id: int | None = None
    span_id: int | None = None

    @property
    def is_span(self) -> bool:
        """A trace (and span) to look up in the sessions, not a file or session."""
        return self.trace_id is not None and self.path is None and self.session is None


def _is_hex(text: str) -> bool:
    return _HEX.fullmatch(text) is not None


def looks_like_id(text: str) -> bool:
    """Could ``text`` be a session ID or the start of one (hex digits)?"""
    return len(text) <= 32 and _is_hex(text)


def parse_reference(text: str) -> Reference:
    """Tell what ``text`` names (see the module); nothing is read here.

    A plain path or ID comes back as ``path`` (when such a file or folder
    exists) or ``session`` (when it could be an ID); anything else as a path
    the caller reports missing.
    """
    base, hash_, fragment = text.partition("#")
    seq_match = _SEQ.search(fragment) if hash_ else None
    seq = int(seq_match[1]) if seq_match else None
    parts = urllib.parse.urlsplit(text)
    scheme = parts.scheme.lower() if is_url(text) else ""
    if scheme in ("http", "https"):
        return _viewer_link(text, parts)
    if scheme == "file":
        local = file_url_path(urllib.parse.urlsplit(base).path)
        if local.suffix == ".jsonl" or local.is_file():
            return Reference(text, path=local, seq=seq)
        if seq is not None and _STORE_SESSION.search(local.as_posix()) is None:
            return Reference(text, path=local, seq=seq)
        return Reference(text, url=text)  # a store on a file system: file:///mnt/store
    if scheme:
        return Reference(text, url=text)
    if seq is not None:
        return Reference(text, path=Path(base), seq=seq)
    pair = _SPAN_PAIR.match(text)
    if pair is not None and not Path(text).exists():
        return Reference(text, trace_id=int(pair[1], 16), span_id=int(pair[2], 16))
    path = Path(text)
    if path.exists() or not looks_like_id(text):
        return Reference(text, path=path)
    return Reference(text, session=text.lower())


def _viewer_link(text: str, parts: urllib.parse.SplitResult) -> Reference:
    match = _VIEWER.match(parts.path)
    if match is None:
        raise ValueError(
            f"{text}: not a loopscribe viewer link (…/session/ID, …/session/ID/record/N or "
            "…/trace/TRACE_ID/span/SPAN_ID)"
        )
    if match["trace"]:
        span = match["span"]
        return Reference(
            text, trace_id=int(match["trace"], 16), span_id=int(span, 16) if span else None
        )
    session = urllib.parse.unquote(match["session"]).lower()
    if not _is_hex(session):
        raise ValueError(f"{text}: {session!r} is not a session ID")
    seq = int(match["seq"]) if match["seq"] else None
    span_id = int(match["sspan"], 16) if match["sspan"] else None
    return Reference(text, session=session, seq=seq, span_id=span_id)
