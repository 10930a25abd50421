"""SDK session keys as file names: the one door from a ``SessionKey`` to a path.

A key's file is ``<session_id>+<project_key>.jsonl`` with every character
other than ASCII letters, digits, ``-``, ``_`` and ``.`` ``%``-escaped (its
UTF-8 bytes, lone surrogates included), and a leading ``-`` or ``.`` too (an
option to a shell command, a hidden file). That *plain* name is used when it
is at most 200 characters and holds no capital letter; any other key gets a
*hashed* name: the start of the plain name, ``~``, and 40 hex digits of a
SHA-256 of the whole key.

No two keys share a name, even on a case-insensitive filesystem: plain names
decode back to their key and hold no capital letter outside a ``%`` escape;
hashed names are told apart by their hash, and the plain encoding never
writes ``~``, so no plain name is ever a hashed one.

Stores written before this naming used plain names with capitals, and for a
long key ``<session_id start>+<32 hex digits>``, which is also the plain name
of another key. :func:`legacy_name` gives that older name, so those files are
still found (the store checks whose key they hold, see ``_store``).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from ..._errors import LoopscribeError

__all__ = ["SessionKeyError", "check_key", "file_name", "hashed_name", "legacy_name"]

SUFFIX = ".jsonl"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_CAPITALS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_MAX_NAME = 200
"""Longest plain name (without ``.jsonl``): room for the sidecars' suffixes within 255 bytes."""
_PREFIX = 100
"""How much of the plain name a hashed name keeps, to stay readable."""
HASH_MARK = "~"
"""Separates a hashed name's prefix from its hash; the plain encoding escapes it."""


class SessionKeyError(LoopscribeError, TypeError):
    """A ``SessionKey`` whose ``project_key`` or ``session_id`` is not a string."""


def check_key(key: Any) -> tuple[str, str, str | None]:
    """``(project_key, session_id, subpath)`` of a ``SessionKey``; an empty subpath is ``None``.

    Raises:
        SessionKeyError: A part is missing or not a string.
    """
    try:
        project_key, session_id = key["project_key"], key["session_id"]
        subpath = key.get("subpath") or None
    except (KeyError, TypeError, AttributeError):
        raise SessionKeyError(
            f"not a SessionKey: {key!r:.200}; pass a dict with the strings 'project_key' "
            "and 'session_id' (and optionally 'subpath')"
        ) from None
    for name, value in (("project_key", project_key), ("session_id", session_id)):
        if not isinstance(value, str):
            raise SessionKeyError(
                f"SessionKey {name} must be a string, got {type(value).__name__} "
                f"{value!r:.100}; pass the key the SDK gives"
            )
    if subpath is not None and not isinstance(subpath, str):
        raise SessionKeyError(
            f"SessionKey subpath must be a string or absent, got {type(subpath).__name__} "
            f"{subpath!r:.100}; pass the key the SDK gives"
        )
    return project_key, session_id, subpath


def _escape(text: str) -> str:
    return _UNSAFE.sub(_percent, text)


def _percent(match: re.Match[str]) -> str:
    return "".join(f"%{b:02X}" for b in match.group().encode("utf-8", "surrogatepass"))


def _lead(name: str) -> str:
    """Escape a leading ``-`` or ``.``."""
    return f"%{ord(name[0]):02X}{name[1:]}" if name[:1] in ("-", ".") else name


def _plain(project_key: str, session_id: str) -> str:
    return _lead(f"{_escape(session_id)}+{_escape(project_key)}")


def file_name(project_key: str, session_id: str) -> str:
    """The file name of a key: plain when it can be, else hashed (see the module docs)."""
    name = _plain(project_key, session_id)
    if len(name) <= _MAX_NAME and _CAPITALS.isdisjoint(project_key + session_id):
        return name + SUFFIX
    return hashed_name(project_key, session_id)


def hashed_name(project_key: str, session_id: str) -> str:
    """The hashed name of any key: also where a key goes whose plain name is taken."""
    prefix = _plain(project_key, session_id)[:_PREFIX]
    cut = prefix.rfind("%", len(prefix) - 2)
    if cut >= 0:  # never end inside an escape
        prefix = prefix[:cut]
    whole = b"".join(
        len(part).to_bytes(8, "big") + part
        for part in (p.encode("utf-8", "surrogatepass") for p in (project_key, session_id))
    )
    digest = hashlib.sha256(b"loopscribe/claude-agent-sdk-key\0" + whole).hexdigest()[:40]
    return f"{prefix}{HASH_MARK}{digest}{SUFFIX}"


def legacy_name(project_key: str, session_id: str) -> str | None:
    """The name stores written before this naming gave a key (``None``: they could not)."""

    try:
        whole = f"{project_key}\0{session_id}".encode()
    except UnicodeEncodeError:
        return None  # the previous naming could not name it, so never wrote it
    name = f"{_escape(session_id)}+{_escape(project_key)}"
    if len(name) > _MAX_NAME:
        name = f"{_escape(session_id)[:100]}+{hashlib.sha256(whole).hexdigest()[:32]}"
    return _lead(name) + SUFFIX
