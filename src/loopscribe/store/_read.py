"""Reading a store: its sessions, and a shipped session's segments as one file.

:class:`ShippedSession` is a byte-range source: ``pread(size, offset)`` maps
a range of the session file onto range requests of the segments it covers,
so reading the end of a session (``messages(last=N)``) fetches about what the
page needs. :meth:`ShippedSession.open` gives a buffered, seekable binary
stream over it, which every file reader of loopscribe accepts.

Every object is untrusted: a damaged manifest is one line in
:attr:`Store.problems` and the other sessions are still listed.
"""

from __future__ import annotations

import errno
import io
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import StoreError
from .._format import is_session_id
from .._workspace_source import SessionNotFoundError
from ._backend import Entry, TooLarge
from ._layout import (
    ARTIFACTS,
    MARKER,
    MAX_MANIFEST_BYTES,
    MAX_SIDE_LOG_BYTES,
    SESSIONS,
    Chain,
    Segment,
    artifact_key,
    check_session_id,
    is_temp_name,
    manifest_key,
    resolve_chain,
    segment_key,
    session_key,
    shown,
    side_log_key,
)
from ._manifest import Manifest, too_large
from ._url import display_url, open_backend, split_fragment

__all__ = ["ShippedSession", "Store", "open_session"]

logger = logging.getLogger("loopscribe")

_STREAM_BUFFER_BYTES = 4 << 20
_BATCH_BYTES = 64 << 20
"""Manifest bytes read at once (a listing of many large manifests is read in batches)."""
_BATCH_OBJECTS = 256


class Store:
    """A store of shipped sessions at an fsspec URL (read side).

    Attributes:
        url: The store's URL as shown: without credentials.
        problems: One line per object the last :meth:`manifests` could not
            use (a damaged or oversized manifest, a name that is not a
            session's), the others listed all the same.

    Args:
        url: The store's URL, as given to ``loopscribe ship --to``.

    Raises:
        StoreError: fsspec or the URL's backend is missing.
    """

    def __init__(self, url: str) -> None:
        self.backend, self.url = open_backend(url)
        self.fs, self.root = self.backend.fs, self.backend.root
        self._manifests: dict[str, tuple[str, Manifest]] = {}  # by id: (version, manifest)
        self._failed: dict[str, tuple[str, str]] = {}  # by id: (version, problem)
        self._lock = threading.Lock()
        self.problems: tuple[str, ...] = ()
        self.requests = 0
        """Requests made (listings and object reads), for benchmarks and tests."""

    def session_url(self, session_id: str) -> str:
        """The shipped location of a session (what span references name)."""
        return f"{self.url}/{session_key(session_id)}"

    def where(self, key: str) -> str:
        """The URL of an object of this store, as errors name it."""
        return f"{self.url}/{key}"

    # -- listing ------------------------------------------------------------------

    def listing(self) -> tuple[dict[str, Entry], list[str]]:
        """The manifest objects by session ID (one listing), and the names that are not.

        Raises:
            StoreError: The store cannot be listed (unreachable, access denied),
                or there is no store at its URL.
        """
        entries = self.backend.list_manifests(SESSIONS)
        self.requests += 1
        if not entries and not self.backend.exists(MARKER):
            # Nothing there at all: a wrong bucket or prefix, or a path the server hides.
            raise StoreError(
                f"{self.url}: no loopscribe store here (no sessions, no {MARKER}); check the "
                "bucket (or folder) and prefix in the URL"
            )
        wanted: dict[str, Entry] = {}
        problems = []
        for entry in entries:
            stem = entry.name.removesuffix(".json")
            if stem == entry.name or is_temp_name(entry.name):
                continue  # not a manifest's name: lock and temporary files, other tools' files
            if is_session_id(stem):
                wanted[stem] = entry
            else:
                problems.append(
                    f"{self.url}/{SESSIONS}/{shown(entry.name)}: not a session manifest (its "
                    "name is not <32 lowercase hex digits>.json); ignored"
                )
        return wanted, problems

    def read_manifests(
        self, entries: Sequence[tuple[str, Entry]]
    ) -> Iterator[tuple[str, Entry, Manifest | StoreError]]:
        """Read and check manifests, a bounded batch at a time.

        An object the listing says is over
        :data:`~loopscribe.store._layout.MAX_MANIFEST_BYTES` is refused
        without a read; no read takes more than that bound either.

        Yields:
            ``(session_id, entry, manifest or the error naming the object)``.
        """
        batch: list[tuple[str, Entry]] = []
        size = 0
        for sid, entry in entries:
            where = self.where(manifest_key(sid))
            if entry.size > MAX_MANIFEST_BYTES:
                yield sid, entry, too_large(where, entry.size)
                continue
            if batch and (size + entry.size > _BATCH_BYTES or len(batch) >= _BATCH_OBJECTS):
                yield from self._read_batch(batch)
                batch, size = [], 0
            batch.append((sid, entry))
            size += entry.size
        if batch:
            yield from self._read_batch(batch)

    def _read_batch(
        self, batch: list[tuple[str, Entry]]
    ) -> Iterator[tuple[str, Entry, Manifest | StoreError]]:
        raw = self.backend.read_many([manifest_key(sid) for sid, _e in batch], MAX_MANIFEST_BYTES)
        self.requests += len(batch)
        for (sid, entry), data in zip(batch, raw, strict=True):
            where = self.where(manifest_key(sid))
            if isinstance(data, bytes):
                try:
                    yield sid, entry, Manifest.from_bytes(data, where, sid)
                except StoreError as exc:
                    yield sid, entry, exc
            elif isinstance(data, TooLarge):
                yield sid, entry, too_large(where, data.size)
            elif isinstance(data, FileNotFoundError):
                continue  # removed since the listing
            else:
                yield sid, entry, StoreError(str(data))

    def manifests(self) -> list[Manifest]:
        """Every healthy session's manifest: one listing, then a read of each new or changed one.

        Manifests are cached by the listing's version tag (ETag, or size and
        modification time), so a warm call reads only what changed. A
        damaged object is left out and named in :attr:`problems`.

        Raises:
            StoreError: The store cannot be listed (unreachable, access denied).
        """
        wanted, problems = self.listing()
        with self._lock:
            stale = [
                (sid, entry)
                for sid, entry in wanted.items()
                if self._manifests.get(sid, ("",))[0] != entry.version
                and self._failed.get(sid, ("",))[0] != entry.version
            ]
        for sid, entry, result in self.read_manifests(stale):
            with self._lock:
                if isinstance(result, Manifest):
                    self._manifests[sid] = (entry.version, result)
                    self._failed.pop(sid, None)
                else:
                    self._manifests.pop(sid, None)
                    self._failed[sid] = (entry.version, str(result))
        with self._lock:
            for gone in self._manifests.keys() - wanted.keys():
                del self._manifests[gone]
            for gone in self._failed.keys() - wanted.keys():
                del self._failed[gone]
            problems.extend(problem for _v, problem in self._failed.values())
            self.problems = tuple(problems)
            return [m for _v, m in self._manifests.values()]

    # -- one session ----------------------------------------------------------------

    def manifest(self, session_id: str) -> Manifest:
        """One session's manifest (always read anew).

        Raises:
            SessionNotFoundError: No such session in the store (a
                ``FileNotFoundError`` and a ``LoopscribeError``).
            StoreError: The manifest is damaged, or the store cannot be read.
        """
        return self.manifest_versioned(session_id)[0]

    def manifest_versioned(self, session_id: str) -> tuple[Manifest, str | None]:
        """One session's manifest and its object's version (for a conditional replace)."""
        if not is_session_id(session_id):
            raise SessionNotFoundError(
                errno.ENOENT, f"{shown(session_id)} is not a session ID (32 lowercase hex digits)"
            )
        key = manifest_key(session_id)
        try:
            raw, version = self.backend.read_limited(key, MAX_MANIFEST_BYTES)
        except FileNotFoundError:
            raise SessionNotFoundError(
                errno.ENOENT,
                f"no session {session_id} in {self.url} (looked for {self.where(key)})",
            ) from None
        except TooLarge as exc:
            raise too_large(self.where(key), exc.size) from None
        self.requests += 1
        return Manifest.from_bytes(raw, self.where(key), session_id), version

    def session(self, session_id: str) -> ShippedSession:
        """A shipped session, as of its manifest now."""
        return ShippedSession(self, self.manifest(session_id))

    def artifacts(
        self, session_id: str, manifest: Manifest | None = None
    ) -> list[tuple[str, str, int]]:
        """``(name, url, size)`` of a session's shipped artifacts, by name (from its manifest)."""
        manifest = manifest or self.manifest(session_id)
        base = f"{self.session_url(session_id)}/{ARTIFACTS}"
        return [
            (name, f"{base}/{name}", info["size"])
            for name, info in sorted(manifest.artifacts.items())
        ]

    def read_artifact(
        self, session_id: str, name: str, start: int = 0, end: int | None = None
    ) -> bytes:
        """Bytes of one of a session's artifacts (``name`` is checked first)."""
        self.requests += 1
        return self.backend.read(artifact_key(session_id, name), start, end)


class _Vanished(Exception):
    """A segment of the chain is gone or short."""


@dataclass(slots=True)
class _Fetched:
    bytes: int = 0
    requests: int = 0


class ShippedSession:
    """A shipped session's segments, read as one file of ``size`` bytes.

    Attributes:
        manifest: The manifest this view was made from (later segments are not seen).
        url: The session's shipped location.
        problem: Why fewer bytes than the manifest says can be read (the
            store holds a broken chain), or ``""``.
    """

    def __init__(self, store: Store, manifest: Manifest) -> None:
        self.store = store
        self.manifest = manifest
        self.session_id = check_session_id(manifest.session_id, "session")
        self.url = store.session_url(self.session_id)
        self.problem = ""
        self._chain: Chain | None = None
        self._fetched = _Fetched()

    @property
    def size(self) -> int:
        """Bytes of the session file readable (always at a line end)."""
        return self.chain().size

    @property
    def fetched_bytes(self) -> int:
        """Bytes fetched from the store by this view."""
        return self._fetched.bytes

    @property
    def requests(self) -> int:
        """Requests made by this view (one listing plus the range requests)."""
        return self._fetched.requests

    def chain(self) -> Chain:
        """The chain of segments (one listing of the session folder, then cached)."""
        if self._chain is None:
            manifest = self.manifest
            last = manifest.last_segment
            if manifest.size == 0:
                self._chain = Chain([], True)
            elif last is not None and last.offset == 0:
                self._chain = Chain([last], True)  # one segment: no listing needed
            else:
                entries = self.store.backend.listdir(session_key(self.session_id))
                self._fetched.requests += 1
                self._chain = resolve_chain(
                    ((e.name, e.size) for e in entries),
                    manifest.records,
                    manifest.size,
                    last,
                    self.url,
                )
                if not self._chain.complete:
                    self.problem = (
                        f"{self.url}: the store holds {self._chain.size} of the {manifest.size} "
                        f"bytes its manifest commits (a segment after seq "
                        f"{self._chain.records - 1} is missing); reading those: run "
                        "'loopscribe ship' where the session was recorded to repair it"
                    )
                    logger.warning("%s", self.problem)
        return self._chain

    def segments(self) -> list[Segment]:
        """The segments, in order."""
        return self.chain().segments

    def pread(self, size: int, offset: int) -> bytes:
        """``size`` bytes at ``offset`` (fewer at the end): one range request per segment."""
        try:
            return self._pread(size, offset)
        except _Vanished:
            if self._chain is None or len(self._chain.segments) <= 1:
                raise self._missing() from None
            # A shipper removed a leftover this view had chosen: list the folder again.
            self._chain = None
            try:
                return self._pread(size, offset)
            except _Vanished:
                raise self._missing() from None

    def _missing(self) -> StoreError:
        return StoreError(
            f"{self.url}: a segment is missing or shorter than the manifest says; the store "
            "was changed outside loopscribe (run 'loopscribe ship' where the session was "
            "recorded to repair it)"
        )

    def _pread(self, size: int, offset: int) -> bytes:
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        segments = self.segments()
        i = next(n for n, s in enumerate(segments) if s.end > offset)
        parts: list[bytes] = []
        pos = offset
        while pos < end:
            seg = segments[i]
            stop = min(end, seg.end)
            key = segment_key(self.session_id, seg.first_seq, seg.last_seq)
            try:
                data = self.store.backend.read(key, pos - seg.offset, stop - seg.offset)
            except FileNotFoundError:
                raise _Vanished from None
            if len(data) != stop - pos:
                raise _Vanished
            self._fetched.bytes += len(data)
            self._fetched.requests += 1
            parts.append(data)
            pos = stop
            i += 1
        return b"".join(parts)

    def side_log(self) -> bytes:
        """The shipped side log's complete lines (``b""`` when none was shipped)."""
        if self.manifest.side_log is None:
            return b""
        key = side_log_key(self.session_id)
        try:
            data, _version = self.store.backend.read_limited(key, MAX_SIDE_LOG_BYTES)
        except FileNotFoundError:
            raise StoreError(
                f"{self.url}: its manifest names a side log the store does not hold; the "
                "store was changed outside loopscribe"
            ) from None
        except TooLarge as exc:
            raise StoreError(
                f"{self.store.where(key)}: {exc.size} bytes, more than a side log may hold "
                f"({MAX_SIDE_LOG_BYTES}); not read"
            ) from None
        self._fetched.bytes += len(data)
        self._fetched.requests += 1
        return data

    def complete_end(self) -> int:
        """Where the last complete line ends: the readable size (only complete lines ship)."""
        return self.size

    def close(self) -> None:
        """Nothing to release (part of the byte-source interface)."""

    def open(self, buffer_bytes: int = _STREAM_BUFFER_BYTES) -> io.BufferedReader:
        """A seekable binary stream over the whole session, named by its URL."""
        raw = _SegmentStream(self)
        return io.BufferedReader(raw, buffer_size=buffer_bytes)


class _SegmentStream(io.RawIOBase):
    """Raw stream over a ShippedSession: each read is a range request."""

    def __init__(self, session: ShippedSession) -> None:
        self._session = session
        self._pos = 0
        self.name = session.url

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._pos = offset
        elif whence == io.SEEK_CUR:
            self._pos += offset
        else:
            self._pos = self._session.size + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        data = self._session.pread(len(view), self._pos)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)


def parse_session_url(url: str) -> tuple[str, str, int | None]:
    """``(store URL, session ID, seq)`` of ``<store>/sessions/<id>[#seq=N]``.

    Raises:
        StoreError: The URL does not name a shipped session.
    """
    base, fragment = split_fragment(url)
    base = base.rstrip("/")
    head, _, sid = base.rpartition("/")
    store, _, sessions = head.rpartition("/")
    if sessions != SESSIONS or not is_session_id(sid):
        raise StoreError(
            f"{shown(display_url(url))}: not a shipped session's URL (expected <store>/{SESSIONS}/"
            "<session_id>, as span references and 'loopscribe ls URL --json' name them)"
        )
    seq: int | None = None
    if fragment.startswith("seq="):
        try:
            seq = int(fragment[4:])
        except ValueError:
            raise StoreError(
                f"{shown(display_url(url))}: '#{shown(fragment)}' is not '#seq=N'"
            ) from None
    return store, sid, seq


def open_session(url: str) -> io.BufferedReader:
    """A binary stream over a shipped session given by its URL (``<store>/sessions/<id>``)."""
    store_url, sid, _seq = parse_session_url(url)
    return Store(store_url).session(sid).open()
