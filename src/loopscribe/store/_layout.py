"""The object layout of a session store, version 1 (part of the file format).

Object storage cannot append, so a shipped session is a run of immutable
*segments* — consecutive pieces of the session file, cut at line ends — plus
one small *manifest* that is replaced as the session grows::

    <store>/loopscribe-store.json                      {"layout": 1}
    <store>/sessions/<session_id>.json                 the manifest
    <store>/sessions/<session_id>/<first>-<last>.jsonl a segment: records first..last
    <store>/sessions/<session_id>/artifacts/<name>     the session's artifacts
    <store>/sessions/<session_id>/side.jsonl           the session's side log

``<first>`` and ``<last>`` are the first and last ``seq`` of the segment,
zero-padded to 12 digits so that name order is seq order. Concatenated in
chain order, the segments are byte for byte the session file up to the end
of its last shipped complete line.

The manifest is the commit point: its ``bytes``, ``records`` and
``last_segment`` say how much of the session is shipped, and a reader uses
the segments that continue one another from seq 0 up to ``bytes``
(:func:`resolve_chain`); any other segment is the leftover of an
interrupted or losing pass, which the next pass adopts or removes.

A store is untrusted input. This module is the one door through which a
name read from a store (or written to one) becomes an object key: each kind
of name has one validating function, and the key builders call them.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
import unicodedata
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from .._errors import StoreError
from .._format import is_session_id

LAYOUT_VERSION = 1
SEGMENT_BYTES = 64 << 20
"""Largest segment a pass writes (a single longer line makes a longer segment)."""
MARKER = "loopscribe-store.json"
SESSIONS = "sessions"
ARTIFACTS = "artifacts"
SIDE_LOG = "side.jsonl"
"""A session's shipped side log (``FILE.meta``), beside its segments."""
SEQ_DIGITS = 12

MAX_MANIFEST_BYTES = 16 << 20
"""A larger manifest object is refused before it is read."""
MAX_SEGMENTS = 100_000
"""Objects a session folder may hold; a larger listing is refused."""
MAX_ARTIFACTS = 10_000
"""Artifacts one session may ship."""
MAX_ARTIFACT_NAME_BYTES = 1024
"""Longest artifact name (UTF-8 bytes, ``/`` included)."""
MAX_ARTIFACT_PART_BYTES = 200
"""Longest part of an artifact name between two ``/``."""
MAX_ARTIFACT_DEPTH = 16
"""Most parts (folders plus the file) of an artifact name."""
MAX_SIDE_LOG_BYTES = 64 << 20
"""Largest side log object read back."""
MAX_INT = (1 << 63) - 1

_SEGMENT = re.compile(r"(\d{12})-(\d{12})\.jsonl")
_TEMP = re.compile(r"\.loopscribe-tmp-([0-9a-f]{8})-(\d{1,10})-(.+)")
_LEGACY_TEMP = re.compile(r"(.+)\.tmp-(\d{1,10})")
_SHOWN_CHARS = 80


def shown(value: object) -> str:
    """A value from a store as an error message may quote it: repr, clipped."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else f"{text[: _SHOWN_CHARS - 5]}...{text[-2:]}"


def _damaged(where: str, what: str) -> StoreError:
    return StoreError(
        f"{where}: {what}; the store was changed outside loopscribe or damaged "
        "(ship the session again, or remove the object)"
    )


# -- names read from a store: one check each -----------------------------------------


def check_session_id(text: object, where: str) -> str:
    """``text`` if it is a session ID.

    Raises:
        StoreError: It is not (a trailing newline, ``..``, a path, ...); names ``where``.
    """
    if not is_session_id(text):
        raise _damaged(where, f"{shown(text)} is not a session ID (32 lowercase hex digits)")
    assert isinstance(text, str)
    return text


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``(first_seq, last_seq)`` of a segment object name (or path), or ``None`` if not one."""
    match = _SEGMENT.fullmatch(name.rsplit("/", 1)[-1])
    if match is None:
        return None
    first, last = int(match.group(1)), int(match.group(2))
    return (first, last) if first <= last else None


def check_artifact_name(name: object, where: str) -> str:
    """``name`` if it is a safe artifact name: a relative path that stays in its folder.

    Refused: anything but a string, an empty or absolute name, ``.`` or
    ``..`` parts, empty parts (``a//b``), a backslash, NUL, control and
    format characters (newlines, bidi overrides), lone surrogates, a name
    over :data:`MAX_ARTIFACT_NAME_BYTES` bytes, a part over
    :data:`MAX_ARTIFACT_PART_BYTES`, more than :data:`MAX_ARTIFACT_DEPTH`
    parts, and the names loopscribe gives its own temporary files.

    Raises:
        StoreError: Not a safe name; names ``where``.
    """
    reason = _artifact_name_problem(name)
    if reason:
        raise StoreError(f"{where}: artifact name {shown(name)} {reason}")
    assert isinstance(name, str)
    return name


def _artifact_name_problem(name: object) -> str:
    if not isinstance(name, str):
        return "is not a string"
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        return "is not valid Unicode"
    if not name or size > MAX_ARTIFACT_NAME_BYTES:
        return f"must have 1 to {MAX_ARTIFACT_NAME_BYTES} bytes"
    parts = name.split("/")
    if len(parts) > MAX_ARTIFACT_DEPTH:
        return f"is more than {MAX_ARTIFACT_DEPTH} folders deep"
    for part in parts:
        if part in ("", ".", ".."):
            return "must be a relative path without empty, '.' or '..' parts"
        if len(part.encode()) > MAX_ARTIFACT_PART_BYTES:
            return f"has a part longer than {MAX_ARTIFACT_PART_BYTES} bytes"
        if "\\" in part or any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in part):
            return "holds a backslash or a control or format character"
        if is_temp_name(part):
            return "is the name of a loopscribe temporary file"
    return ""


# -- object keys, relative to the store's root ---------------------------------------


def manifest_key(session_id: str) -> str:
    """The object holding a session's manifest."""
    return f"{SESSIONS}/{check_session_id(session_id, 'session ID')}.json"


def session_key(session_id: str) -> str:
    """The folder of a session's segments, artifacts and side log."""
    return f"{SESSIONS}/{check_session_id(session_id, 'session ID')}"


def segment_key(session_id: str, first_seq: int, last_seq: int) -> str:
    """The object of the segment holding records ``first_seq`` to ``last_seq``."""
    return f"{session_key(session_id)}/{segment_name(first_seq, last_seq)}"


def artifact_key(session_id: str, name: str) -> str:
    """The object of one of a session's artifacts (``name`` checked)."""
    return f"{artifacts_key(session_id)}/{check_artifact_name(name, 'artifact')}"


def artifacts_key(session_id: str) -> str:
    """The folder of a session's artifacts."""
    return f"{session_key(session_id)}/{ARTIFACTS}"


def side_log_key(session_id: str) -> str:
    """The object of a session's shipped side log."""
    return f"{session_key(session_id)}/{SIDE_LOG}"


def segment_name(first_seq: int, last_seq: int) -> str:
    """The object name of the segment holding records ``first_seq`` to ``last_seq``."""
    if not 0 <= first_seq <= last_seq < 10**SEQ_DIGITS:
        raise ValueError(f"not a segment's seq range: {first_seq}..{last_seq}")
    return f"{first_seq:0{SEQ_DIGITS}d}-{last_seq:0{SEQ_DIGITS}d}.jsonl"


# -- temporary objects of a folder store -----------------------------------------------

_HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def temp_name(name: str, pid: int) -> str:
    """The temporary name a folder write of ``name`` uses before its rename (or link).

    It carries this host's tag and the writing process's ID, so a later pass
    can tell a temporary file left by a killed process of this host from
    one another host's shipper is writing right now.
    """
    return f".loopscribe-tmp-{_HOST_TAG}-{pid}-{secrets.token_hex(4)}-{name}"


def is_temp_name(name: str) -> bool:
    """Whether ``name`` has the shape of a loopscribe temporary file's name."""
    return _TEMP.fullmatch(name) is not None


def temp_owner(name: str) -> int | None:
    """The process ID that wrote temporary file ``name`` on *this* host, or ``None``.

    ``None`` for any name loopscribe did not give a temporary file here (a
    file of another host, an artifact, anything else). Names of earlier
    versions (``<object>.tmp-<pid>``, manifests, segments, the side log and
    the marker only) count as this host's.
    """
    match = _TEMP.fullmatch(name)
    if match is not None:
        return int(match.group(2)) if match.group(1) == _HOST_TAG else None
    legacy = _LEGACY_TEMP.fullmatch(name)
    if legacy is None:
        return None
    target = legacy.group(1)
    stem = target.removesuffix(".json")
    ours = (
        target in (MARKER, SIDE_LOG)
        or parse_segment_name(target) is not None
        or (stem != target and is_session_id(stem))
    )
    return int(legacy.group(2)) if ours else None


def is_stale_temp(name: str) -> bool:
    """Whether ``name`` is a temporary file of a loopscribe process of this host that is gone.

    Such a file is provably a killed writer's: nothing is writing it any more.
    """
    pid = temp_owner(name)
    if pid is None or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, ValueError):
        return False  # another user's process, or not a real ID: leave its file alone
    return False


# -- segments and the chain ----------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class Chain:
    """The segments a reader uses, in order.

    Attributes:
        segments: From seq 0, each continuing the one before.
        complete: They reach the manifest's end. When not, ``segments`` is
            the longest valid chain the store holds (it ends earlier).
        extra: Names of the session folder's segments not in the chain
            (leftovers of interrupted or losing passes).
    """

    segments: list[Segment]
    complete: bool
    extra: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        """File bytes the chain holds."""
        return self.segments[-1].end if self.segments else 0

    @property
    def records(self) -> int:
        """Records the chain holds."""
        return self.segments[-1].last_seq + 1 if self.segments else 0


def resolve_chain(
    objects: Iterable[tuple[str, int]],
    records: int,
    size: int,
    last: Segment | None,
    where: str,
) -> Chain:
    """The chain of segments that makes up the first ``size`` bytes of a session.

    Segments continue one another when each starts at the seq and the byte
    just past the one before. Two candidates for one place (a fork: the
    leftover of a pass that lost the race to commit, or of a store damaged
    by shippers of earlier versions taking turns) are both followed, so the
    chain the manifest commits is found whichever one a plain walk would
    pick; among equally long chains the one with fewer segments wins.

    Args:
        objects: Names (or paths) and sizes of a session folder's objects,
            in any order; objects that are not segments are ignored.
        records: The manifest's ``records``.
        size: The manifest's ``bytes``.
        last: The manifest's ``last_segment``: the chain must end with it.
        where: The session's location, for errors.

    Raises:
        StoreError: The folder holds more than :data:`MAX_SEGMENTS` objects.
    """
    by_first: dict[int, list[tuple[int, int]]] = {}
    seen: set[str] = set()
    count = 0
    for name, length in objects:
        count += 1
        if count > MAX_SEGMENTS:
            raise _damaged(where, f"more than {MAX_SEGMENTS} objects in the session's folder")
        seqs = parse_segment_name(name)
        if seqs is None:
            continue
        seen.add(segment_name(*seqs))
        if length > 0:
            by_first.setdefault(seqs[0], []).append((seqs[1], length))
    for options in by_first.values():
        options.sort(reverse=True)  # the longest first: fewer hops on a tie
    # Breadth first over (seq, offset): the first path to reach a place is the shortest.
    parent: dict[tuple[int, int], tuple[tuple[int, int], Segment] | None] = {(0, 0): None}
    queue = deque([(0, 0)])
    while queue:
        seq, offset = queue.popleft()
        for last_seq, length in by_first.get(seq, ()):
            node = (last_seq + 1, offset + length)
            if node[1] > size or node[0] > records or node in parent:
                continue
            parent[node] = ((seq, offset), Segment(seq, last_seq, offset, length))
            queue.append(node)

    def path_to(node: tuple[int, int]) -> list[Segment]:
        out: list[Segment] = []
        step = parent[node]
        while step is not None:
            node, segment = step
            out.append(segment)
            step = parent[node]
        out.reverse()
        return out

    segments: list[Segment] | None = None
    if last is not None and last.end == size and last.last_seq + 1 == records:
        before = (last.first_seq, last.offset)
        if before in parent and (last.last_seq, last.size) in by_first.get(last.first_seq, ()):
            segments = [*path_to(before), last]
    elif last is None and (records, size) in parent:
        segments = path_to((records, size))
    complete = segments is not None or size == 0
    if segments is None:
        # Not reachable: the longest valid chain the store holds.
        segments = path_to(max(parent, key=lambda node: (node[1], -node[0])))
    return Chain(segments, complete, tuple(sorted(seen - {s.name for s in segments})))
