"""Reading a store: its sessions, and a shipped session's segments as one file.

:class:`ShippedSession` is a byte-range source: ``pread(size, offset)`` maps
a range of the session file onto range requests of the segments it covers,
so reading the end of a session (``messages(last=N)``) fetches about what the
page needs. :meth:`ShippedSession.open` gives a buffered, seekable binary
stream over it, which every file reader of loopscribe accepts.
"""

from __future__ import annotations

import bisect
import errno
import io
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .._errors import StoreError
from ._layout import (
    ARTIFACTS,
    SESSIONS,
    SIDE_LOG,
    Manifest,
    Segment,
    chain_segments,
    is_session_id,
    manifest_path,
    session_dir,
)
from ._url import filesystem, is_local, list_folder, split_fragment

__all__ = ["ShippedSession", "Store", "open_session"]

_STREAM_BUFFER_BYTES = 4 << 20


class Store:
    """A store of shipped sessions at an fsspec URL (read side).

    Args:
        url: The store's URL, as given to ``loopscribe ship --to``.

    Raises:
        StoreError: fsspec or the URL's backend is missing.
    """

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = filesystem(self.url)
        self._manifests: dict[str, tuple[Any, Manifest]] = {}  # by id: (version, manifest)
        self._lock = threading.Lock()
        self.requests = 0
        """Requests made (listings and object reads), for benchmarks and tests."""

    def session_url(self, session_id: str) -> str:
        """The shipped location of a session (what span references name)."""
        return f"{self.url}/{SESSIONS}/{session_id}"

    def manifests(self) -> list[Manifest]:
        """Every session's manifest: one listing, then a read of each new or changed one.

        Manifests are cached by the listing's version tag (ETag, or size and
        modification time), so a warm call reads only what changed.
        """
        folder = f"{self.root}/{SESSIONS}"
        try:
            wanted = self._listing(folder)
        except FileNotFoundError:
            return []
        self.requests += 1
        with self._lock:
            stale = [
                (sid, path)
                for sid, (path, version) in wanted.items()
                if self._manifests.get(sid, (None,))[0] != version
            ]
        if stale:
            raw = self.fs.cat([path for _sid, path in stale], on_error="return")
            self.requests += len(stale)
            with self._lock:
                for sid, path in stale:
                    data = raw.get(path)
                    if isinstance(data, bytes):
                        self._manifests[sid] = (wanted[sid][1], Manifest.from_bytes(data, path))
        with self._lock:
            for gone in self._manifests.keys() - wanted.keys():
                del self._manifests[gone]
            return [m for _v, m in self._manifests.values()]

    def _listing(self, folder: str) -> dict[str, tuple[str, Any]]:
        """Manifest objects by session ID: ``(path, version tag)``."""
        wanted: dict[str, tuple[str, Any]] = {}
        if is_local(self.fs):
            # A folder: one scandir, not fsspec's stat and path work per entry.
            with os.scandir(folder) as entries:
                for entry in entries:
                    sid = entry.name.removesuffix(".json")
                    if sid != entry.name and is_session_id(sid) and entry.is_file():
                        st = entry.stat()
                        wanted[sid] = (f"{folder}/{entry.name}", (st.st_size, st.st_mtime_ns))
            return wanted
        for entry in self.fs.ls(folder, detail=True, refresh=True):
            name = str(entry["name"]).rsplit("/", 1)[-1]
            sid = name.removesuffix(".json")
            if entry.get("type") == "file" and sid != name and is_session_id(sid):
                version = (
                    entry.get("ETag") or entry.get("etag"),
                    entry.get("size"),
                    entry.get("mtime") or entry.get("LastModified"),
                )
                wanted[sid] = (str(entry["name"]), version)
        return wanted

    def manifest(self, session_id: str) -> Manifest:
        """One session's manifest (always read anew).

        Raises:
            FileNotFoundError: No such session in the store.
        """
        where = manifest_path(self.root, session_id)
        try:
            raw = self.fs.cat_file(where)
        except FileNotFoundError:
            raise FileNotFoundError(
                errno.ENOENT, f"no session {session_id} in {self.url} (looked for {where})"
            ) from None
        self.requests += 1
        return Manifest.from_bytes(raw, where)

    def session(self, session_id: str) -> ShippedSession:
        """A shipped session, as of its manifest now."""
        return ShippedSession(self, self.manifest(session_id))

    def artifacts(self, session_id: str) -> list[tuple[str, str, int]]:
        """``(name, url, size)`` of a session's shipped artifacts, by name."""
        folder = f"{session_dir(self.root, session_id)}/{ARTIFACTS}"
        try:
            found = self.fs.find(folder, detail=True)
        except FileNotFoundError:
            return []
        self.requests += 1
        out = []
        for path, info in sorted(found.items()):
            name = str(path)[len(folder) + 1 :]
            url = f"{self.session_url(session_id)}/{ARTIFACTS}/{name}"
            out.append((name, url, int(info.get("size") or 0)))
        return out

    def read_object(self, url: str) -> bytes:
        """The content of an object of this store given by its URL."""
        _fs, path = filesystem(url)
        self.requests += 1
        data: bytes = self.fs.cat_file(path)
        return data


@dataclass(slots=True)
class _Fetched:
    bytes: int = 0
    requests: int = 0


class ShippedSession:
    """A shipped session's segments, read as one file of ``size`` bytes.

    Attributes:
        manifest: The manifest this view was made from (later segments are not seen).
        url: The session's shipped location.
        fetched_bytes: Bytes fetched from the store so far (range requests).
        requests: Range requests made so far.
    """

    def __init__(self, store: Store, manifest: Manifest) -> None:
        self.store = store
        self.manifest = manifest
        self.url = store.session_url(manifest.session_id)
        self._folder = session_dir(store.root, manifest.session_id)
        self._segments: list[Segment] | None = None
        self._fetched = _Fetched()

    @property
    def size(self) -> int:
        """Bytes of the session file shipped (always at a line end)."""
        return self.manifest.size

    @property
    def fetched_bytes(self) -> int:
        """Bytes fetched from the store by this view."""
        return self._fetched.bytes

    @property
    def requests(self) -> int:
        """Requests made by this view (one listing plus the range requests)."""
        return self._fetched.requests

    def segments(self) -> list[Segment]:
        """The segments, in order (one listing of the session folder, then cached)."""
        if self._segments is None:
            manifest = self.manifest
            last = manifest.last_segment
            if last is not None and last.offset == 0:
                self._segments = [last]  # one segment: no listing needed
            elif manifest.size == 0:
                self._segments = []
            else:
                pairs = list_folder(self.store.fs, self._folder)
                self._fetched.requests += 1
                try:
                    self._segments = chain_segments(pairs, manifest.size)
                except StoreError as exc:
                    raise StoreError(f"{self.url}: {exc}") from None
        return self._segments

    def pread(self, size: int, offset: int) -> bytes:
        """``size`` bytes at ``offset`` (fewer at the end): one range request per segment."""
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        segments = self.segments()
        starts = [s.offset for s in segments]
        i = bisect.bisect_right(starts, offset) - 1
        parts: list[bytes] = []
        pos = offset
        while pos < end:
            seg = segments[i]
            stop = min(end, seg.end)
            data = self.store.fs.cat_file(
                f"{self._folder}/{seg.name}", start=pos - seg.offset, end=stop - seg.offset
            )
            if len(data) != stop - pos:
                raise StoreError(
                    f"{self.url}: segment {seg.name} is shorter than the manifest says; the "
                    "store was changed outside loopscribe"
                )
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
        try:
            data: bytes = self.store.fs.cat_file(f"{self._folder}/{SIDE_LOG}")
        except FileNotFoundError:
            raise StoreError(
                f"{self.url}: its manifest names a side log the store does not hold; the "
                "store was changed outside loopscribe"
            ) from None
        self._fetched.bytes += len(data)
        self._fetched.requests += 1
        return data

    def complete_end(self) -> int:
        """Where the last complete line ends: the shipped size (only complete lines ship)."""
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
            f"{url}: not a shipped session's URL (expected <store>/{SESSIONS}/<session_id>, "
            "as span references and 'loopscribe ls URL --json' name them)"
        )
    seq: int | None = None
    if fragment.startswith("seq="):
        try:
            seq = int(fragment[4:])
        except ValueError:
            raise StoreError(f"{url}: '#{fragment}' is not '#seq=N'") from None
    return store, sid, seq


def open_session(url: str) -> io.BufferedReader:
    """A binary stream over a shipped session given by its URL (``<store>/sessions/<id>``)."""
    store_url, sid, _seq = parse_session_url(url)
    return Store(store_url).session(sid).open()


def iter_session_urls(store_url: str) -> Iterator[str]:
    """The URL of every session in a store."""
    store = Store(store_url)
    for manifest in store.manifests():
        yield store.session_url(manifest.session_id)
