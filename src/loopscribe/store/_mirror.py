"""A local copy of a store, kept current: what ``loopscribe serve URL`` serves.

The viewer indexes every record of every session (trace IDs, span bars), so
it reads each session whole anyway; keeping a copy means it reads each byte
from the store once. Each sync reads the changed manifests and fetches only
the segments past the copy's end, appending them to ``<cache>/<id>.jsonl``;
artifacts go to ``<cache>/<id>.artifacts/``. The copy is a cache: delete it
any time.

The store is untrusted: a copy's file name comes only from a checked
session ID, nothing is written outside the cache folder, no symbolic link
is followed, and the mirror changes or removes only files it created
itself (it records each one's device, inode and change time, which no other
writer can reproduce, in ``<cache>/.loopscribe-mirror.json``).
A damaged object or an unreachable backend never stops a sync: that session
is skipped, the others go on, and :attr:`Mirror.problems` says what happened
in one line each.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .._errors import LoopscribeError, StoreError
from .._logsafe import scrub
from ._backend import Entry
from ._layout import (
    MAX_ARTIFACT_DEPTH,
    Segment,
    check_artifact_name,
    check_session_id,
    is_stale_temp,
    segment_key,
    temp_name,
)
from ._manifest import Manifest
from ._read import ShippedSession, Store

__all__ = ["Mirror", "default_cache"]

logger = logging.getLogger("loopscribe")

STATE = ".loopscribe-mirror.json"
"""The mirror's record of the files it made, in the cache folder."""
_CHUNK_BYTES = 8 << 20
"""Largest piece of a segment or artifact held in memory at once."""
_BATCH_BYTES = 32 << 20
"""Bytes of small segments fetched together (concurrently, on S3)."""
_BATCH_SESSIONS = 256
_WORKERS = 8
"""Sessions copied at once."""
_MAX_PROBLEMS = 100
"""Problem lines kept per sync (an unreachable backend fails every session alike)."""


def default_cache(url: str) -> Path:
    """Where a store's copy is kept by default: under ``$XDG_CACHE_HOME/loopscribe``.

    The folder is named after the store's URL without credentials.
    """
    from .._logsafe import display_url

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    shown = display_url(url.rstrip("/"))
    digest = hashlib.sha256(f"loopscribe-mirror/2\0{shown}".encode()).hexdigest()[:16]
    return base / "loopscribe" / "stores" / digest


_Id = tuple[int, int, int]
"""A file the mirror made: device, inode, and change time (ns) after its last write."""
_NONE: _Id = (0, 0, 0)


def _id_of(value: Any) -> _Id:
    dev, ino, ctime = value
    return (int(dev), int(ino), int(ctime))


def _identity(st: os.stat_result) -> _Id:
    # An inode number is reused at once after a delete; with the change time,
    # which only the kernel sets, another file cannot pass for the mirror's.
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


@dataclass(slots=True)
class _Copy:
    """What the mirror made for one session: its file's identity, and what it holds."""

    version: str
    size: int
    inode: _Id
    artifacts: dict[str, dict[str, int]] = field(default_factory=dict)
    artifact_dir: _Id | None = None

    def to_json(self) -> list[Any]:
        return [
            self.version,
            self.size,
            list(self.inode),
            self.artifacts,
            None if self.artifact_dir is None else list(self.artifact_dir),
        ]

    @classmethod
    def from_json(cls, value: Any) -> _Copy:
        version, size, inode, artifacts, adir = value
        if not (isinstance(version, str) and type(size) is int and isinstance(artifacts, dict)):
            raise TypeError("not a copy's record")
        return cls(
            version,
            size,
            _id_of(inode),
            {
                str(k): {"size": int(v["size"]), "mtime_ns": int(v["mtime_ns"])}
                for k, v in artifacts.items()
            },
            None if adir is None else _id_of(adir),
        )


class _Skip(Exception):
    """One session cannot be synced now; the message is its problem line."""


class Mirror:
    """Keeps ``cache`` a copy of the sessions shipped to ``url``.

    Args:
        url: The store.
        cache: The local folder (created, private); by default
            :func:`default_cache`. An existing folder must be empty or a
            copy this class made.

    Attributes:
        url: The store's URL as shown (no credentials).
        problems: One line per problem of the latest sync (a damaged
            object, a session that could not be fetched, an unreachable
            backend); the other sessions were synced.

    Raises:
        StoreError: fsspec or the URL's backend is missing, or ``cache`` holds
            files this class did not make.
    """

    def __init__(self, url: str, cache: str | os.PathLike[str] | None = None) -> None:
        self.store = Store(url)
        self.url = self.store.url
        self.cache = Path(cache) if cache is not None else default_cache(self.url)
        self.bytes_fetched = 0
        self.problems: tuple[str, ...] = ()
        self._failed: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        _private_folder(self.cache)
        self._copies = self._load()

    # -- the record of what this mirror made -------------------------------------

    def _load(self) -> dict[str, _Copy]:
        path = self.cache / STATE
        for leftover in self.cache.iterdir():
            if is_stale_temp(leftover.name):  # a killed serve's unfinished record
                leftover.unlink(missing_ok=True)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            if any(self.cache.iterdir()):
                raise StoreError(
                    f"{self.cache}: holds files loopscribe did not put there; give an empty or "
                    "new folder for the copy of a store"
                ) from None
            self._save({})
            return {}
        try:
            obj = orjson.loads(raw)
            return {
                check_session_id(k, str(path)): _Copy.from_json(v)
                for k, v in obj["sessions"].items()
            }
        except (
            orjson.JSONDecodeError,
            LoopscribeError,
            KeyError,
            TypeError,
            ValueError,
            IndexError,
        ):
            raise StoreError(
                f"{path}: damaged; the copy cannot tell its own files from others: delete the "
                f"folder {self.cache} (a cache) and start again"
            ) from None

    def _save(self, copies: dict[str, _Copy]) -> None:
        data = orjson.dumps(
            {"store": self.url, "sessions": {sid: c.to_json() for sid, c in copies.items()}}
        )
        tmp = self.cache / temp_name(STATE, os.getpid())
        fd = os.open(tmp, _NEW_FILE, 0o600)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.cache / STATE)

    # -- syncing ---------------------------------------------------------------------

    def sync(self) -> int:
        """Bring the copy up to date; returns the sessions that changed.

        Never raises for the store's sake: an unreachable backend or a
        damaged object is a line in :attr:`problems`, and the sessions that
        can be synced are.
        """
        with self._lock:
            return self._sync()

    def _sync(self) -> int:
        try:
            wanted, problems = self.store.listing()
        except StoreError as exc:
            self.problems = (str(exc),)
            return 0
        stale = []
        for sid, entry in wanted.items():
            copy = self._copies.get(sid)
            failed = self._failed.get(sid)
            if failed is not None and failed[0] == entry.version:
                problems.append(failed[1])  # damaged as before: not read again
            elif copy is None or copy.version != entry.version:
                stale.append((sid, entry))
        for gone in self._failed.keys() - wanted.keys():
            del self._failed[gone]
        changed = 0
        dirty = False
        pending: list[tuple[Manifest, Entry]] = []
        for sid, entry, result in self.store.read_manifests(stale):
            if isinstance(result, StoreError):
                self._fail(sid, entry, str(result), problems, sticky=True)
                continue
            pending.append((result, entry))
            if len(pending) >= _BATCH_SESSIONS:
                changed += self._sync_batch(pending, problems)
                dirty, pending = True, []
        if pending:
            changed += self._sync_batch(pending, problems)
            dirty = True
        if dirty:
            try:
                self._save(self._copies)
            except OSError as exc:
                problems.append(f"{self.cache / STATE}: cannot be written ({exc})")
        if len(problems) > _MAX_PROBLEMS:
            more = len(problems) - _MAX_PROBLEMS
            problems = [*problems[:_MAX_PROBLEMS], f"... and {more} more problems in {self.url}"]
        self.problems = tuple(problems)
        return changed

    def _fail(
        self, sid: str, entry: Entry, problem: str, problems: list[str], *, sticky: bool = False
    ) -> None:
        """Report a session's problem; a ``sticky`` one (a damaged manifest) until it changes."""
        line = " ".join(scrub(problem).split())
        if sticky:
            self._failed[sid] = (entry.version, line)
        problems.append(line)

    def _sync_batch(self, batch: list[tuple[Manifest, Entry]], problems: list[str]) -> int:
        """Sync a batch of sessions: small new segments fetched together, the rest alone."""
        plans: list[tuple[Manifest, Entry, Path, int, list[Segment]]] = []
        for manifest, entry in batch:
            try:
                path, have = self._prepare(manifest)
                segments, problem = self._needed(manifest, have)
            except (_Skip, StoreError, OSError) as exc:
                self._fail(manifest.session_id, entry, str(exc), problems)
                continue
            if problem:
                problems.append(problem)
            plans.append((manifest, entry, path, have, segments))
        fetched = self._fetch_small(plans)

        def one(plan: tuple[Manifest, Entry, Path, int, list[Segment]]) -> bool:
            manifest, entry, path, have, segments = plan
            sid = manifest.session_id
            try:
                grew = self._append(manifest, path, have, segments, fetched)
                if manifest.artifacts != self._copies[sid].artifacts:
                    self._fetch_artifacts(manifest)
                    grew = True
            except (_Skip, StoreError, OSError) as exc:
                self._fail(sid, entry, str(exc), problems)
                return False
            except Exception as exc:  # never let one session stop the sync
                logger.exception("syncing %s failed", self.store.session_url(sid))
                line = f"{self.store.session_url(sid)}: {type(exc).__name__}: {exc}"
                self._fail(sid, entry, line, problems)
                return False
            self._copies[sid].version = entry.version
            self._failed.pop(sid, None)
            return grew

        # Sessions are independent files: creating many is I/O the threads overlap.
        with ThreadPoolExecutor(_WORKERS, thread_name_prefix="loopscribe-mirror") as pool:
            return sum(pool.map(one, plans))

    def _prepare(self, manifest: Manifest) -> tuple[Path, int]:
        """The copy's path and how much of the session it holds (a reset store: none)."""
        sid = check_session_id(manifest.session_id, self.url)
        path = self.cache / f"{sid}.jsonl"
        copy = self._copies.get(sid)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if copy is not None:
                copy.size, copy.inode = 0, _NONE  # deleted by hand: fetch it again
            return path, 0
        if copy is None or not _same(st, copy.inode):
            raise _Skip(
                f"{path}: exists and was not made by this copy of {self.url}; left alone "
                "(remove it to fetch the session)"
            )
        if st.st_size > manifest.size:
            # The store was reset (shipped anew): start this session over.
            os.unlink(path)
            copy.size, copy.inode = 0, _NONE
            return path, 0
        return path, st.st_size

    def _needed(self, manifest: Manifest, have: int) -> tuple[list[Segment], str]:
        """The segments holding the bytes past ``have`` (one listing unless it is the last).

        Returns:
            The segments, and why they end before the manifest's end (a
            broken chain in the store: the valid start is copied) or ``""``.
        """
        if have >= manifest.size:
            return [], ""
        last = manifest.last_segment
        if last is not None and last.offset <= have:
            return [last], ""  # what was shipped since is the newest segment: no listing
        view = ShippedSession(self.store, manifest)
        return [s for s in view.segments() if s.end > have], view.problem

    def _fetch_small(
        self, plans: list[tuple[Manifest, Entry, Path, int, list[Segment]]]
    ) -> dict[tuple[str, int], bytes | BaseException]:
        """Fetch the single small segment of many sessions together."""
        wanted = []
        for manifest, _entry, _path, have, segments in plans:
            if len(segments) == 1 and segments[0].size <= _CHUNK_BYTES:
                seg = segments[0]
                wanted.append((manifest.session_id, seg, max(0, have - seg.offset)))
        out: dict[tuple[str, int], bytes | BaseException] = {}
        batch: list[tuple[str, Segment, int]] = []
        size = 0

        def flush() -> None:
            try:
                got = self.store.backend.read_ranges(
                    [segment_key(sid, s.first_seq, s.last_seq) for sid, s, _st in batch],
                    [start for _sid, _s, start in batch],
                    [s.size for _sid, s, _st in batch],
                )
            except StoreError as exc:  # the backend went away: each session says so
                got = [exc] * len(batch)
            for (sid, seg, _start), data in zip(batch, got, strict=True):
                out[(sid, seg.first_seq)] = data

        for item in wanted:
            if batch and size + item[1].size > _BATCH_BYTES:
                flush()
                batch, size = [], 0
            batch.append(item)
            size += item[1].size
        if batch:
            flush()
        return out

    def _append(
        self,
        manifest: Manifest,
        path: Path,
        have: int,
        segments: list[Segment],
        fetched: dict[tuple[str, int], bytes | BaseException],
    ) -> bool:
        """Append the bytes past ``have`` to the copy; whether any were."""
        sid = manifest.session_id
        copy = self._copies.get(sid)
        fd: int | None = None
        try:
            for seg in segments:
                start = max(0, have - seg.offset)
                got = fetched.pop((sid, seg.first_seq), None)
                pieces = [got] if got is not None else None
                for piece in pieces or self._pieces(sid, seg, start):
                    data = _checked(piece, self.store.session_url(sid), seg)
                    if fd is None:
                        fd, copy = self._open_copy(path, sid, have, data, copy)
                    _write_all(fd, data)
                    self._fetched(len(data))
                    have += len(data)
                if have != seg.end:
                    raise _Skip(
                        f"{self.store.session_url(sid)}: segment {seg.name} is shorter than the "
                        "manifest says; the store was changed outside loopscribe"
                    )
        finally:
            if fd is not None:
                if copy is not None:
                    copy.inode = _identity(os.fstat(fd))
                os.close(fd)
            if copy is not None:
                copy.size = have
                self._copies[sid] = copy
        if copy is None:
            self._copies[sid] = _Copy("", 0, _NONE)
        return bool(segments)

    def _pieces(self, sid: str, seg: Segment, start: int) -> Any:
        """A segment's bytes from ``start``, in pieces of at most ``_CHUNK_BYTES``."""
        key = segment_key(sid, seg.first_seq, seg.last_seq)
        pos = start
        while pos < seg.size:
            end = min(seg.size, pos + _CHUNK_BYTES)
            try:
                data = self.store.backend.read(key, pos, end)
            except FileNotFoundError:
                data = b""
            yield data
            if len(data) != end - pos:
                return
            pos = end

    def _open_copy(
        self, path: Path, sid: str, have: int, data: bytes, copy: _Copy | None
    ) -> tuple[int, _Copy]:
        """The copy's descriptor for appending: a new file (checked first), or the mirror's own."""
        if have == 0:
            head = f'{{"session_id":"{sid}","seq":0,'.encode()
            if not data or not (data.startswith(head) or head.startswith(data)):
                raise _Skip(
                    f"{self.store.session_url(sid)}: its first segment does not start with the "
                    "session's first record; the store was changed outside loopscribe"
                )
            fd = os.open(path, _NEW_FILE | os.O_APPEND, 0o600)
            old = copy or _Copy("", 0, _NONE)
            return fd, _Copy(
                old.version, 0, _identity(os.fstat(fd)), old.artifacts, old.artifact_dir
            )
        assert copy is not None
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        if not _same(os.fstat(fd), copy.inode):
            os.close(fd)
            raise _Skip(f"{path}: replaced outside loopscribe; left alone")
        return fd, copy

    # -- artifacts --------------------------------------------------------------------

    def _fetch_artifacts(self, manifest: Manifest) -> None:
        """Fetch the new or changed artifacts into ``<cache>/<id>.artifacts/``."""
        sid = manifest.session_id
        copy = self._copies.setdefault(sid, _Copy("", 0, _NONE))
        root = self._artifact_root(sid, copy)
        try:
            for name, info in sorted(manifest.artifacts.items()):
                if copy.artifacts.get(name) == info:
                    continue
                check_artifact_name(name, self.store.session_url(sid))
                *dirs, base = name.split("/")
                fd = _descend(root, dirs)
                try:
                    self._fetch_artifact(sid, name, info["size"], fd, base)
                finally:
                    if fd != root:
                        os.close(fd)
                copy.artifacts[name] = dict(info)
        finally:
            copy.artifact_dir = _identity(os.fstat(root))
            os.close(root)

    def _artifact_root(self, sid: str, copy: _Copy) -> int:
        name = f"{sid}.artifacts"
        cache = os.open(self.cache, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if copy.artifact_dir is None:
                with contextlib.suppress(FileNotFoundError):
                    os.lstat(name, dir_fd=cache)
                    raise _Skip(
                        f"{self.cache / name}: exists and was not made by this copy; left alone"
                    )
                os.mkdir(name, 0o700, dir_fd=cache)
            fd = os.open(name, _DIR_FLAGS, dir_fd=cache)
            if copy.artifact_dir is not None and not _same(os.fstat(fd), copy.artifact_dir):
                os.close(fd)
                raise _Skip(f"{self.cache / name}: replaced outside loopscribe; left alone")
            return fd
        finally:
            os.close(cache)

    def _fetch_artifact(self, sid: str, name: str, size: int, dfd: int, base: str) -> None:
        with os.scandir(dfd) as entries:
            stale = [e.name for e in entries if e.is_file(follow_symlinks=False)]
        for old in stale:
            if is_stale_temp(old):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(old, dir_fd=dfd)
        tmp = temp_name(base, os.getpid())
        fd = os.open(tmp, _NEW_FILE, 0o600, dir_fd=dfd)
        try:
            pos = 0
            while pos < size:
                end = min(size, pos + _CHUNK_BYTES)
                data = self.store.read_artifact(sid, name, pos, end)
                if len(data) != end - pos:
                    raise _Skip(
                        f"{self.store.session_url(sid)}/artifacts/{name}: shorter than its "
                        "manifest says; the store was changed outside loopscribe"
                    )
                _write_all(fd, data)
                self._fetched(len(data))
                pos = end
            os.fsync(fd)
            os.close(fd)
            fd = -1
            os.replace(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
            raise

    def _fetched(self, size: int) -> None:
        with self._count_lock:
            self.bytes_fetched += size

    # -- in the background ------------------------------------------------------------

    def keep_syncing(self, interval_s: float, stop: threading.Event) -> threading.Thread:
        """Sync every ``interval_s`` seconds on a daemon thread until ``stop`` is set.

        The thread never dies of a sync: whatever goes wrong is one line in
        :attr:`problems`, and the next sync tries again.
        """

        def loop() -> None:
            while not stop.wait(interval_s):
                try:
                    self.sync()
                except Exception as exc:  # a bug, not the store: keep the viewer fed
                    line = " ".join(scrub(f"{type(exc).__name__}: {exc}").split())
                    self.problems = (f"{self.url}: sync failed ({line}); retrying",)
                    logger.warning("syncing %s failed (will retry): %s", self.url, line)

        thread = threading.Thread(target=loop, name="loopscribe-store-sync", daemon=True)
        thread.start()
        return thread


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _descend(root: int, parts: list[str]) -> int:
    """A descriptor of folder ``parts`` below ``root`` (made 0700; no link followed)."""
    if len(parts) >= MAX_ARTIFACT_DEPTH:
        raise _Skip(f"artifact folder {'/'.join(parts)!r} is too deep")
    fd = root
    for part in parts:
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, 0o700, dir_fd=fd)
        child = os.open(part, _DIR_FLAGS, dir_fd=fd)
        if fd != root:
            os.close(fd)
        fd = child
    return fd


def _checked(data: bytes | BaseException, where: str, seg: Segment) -> bytes:
    if isinstance(data, FileNotFoundError):
        raise _Skip(
            f"{where}: segment {seg.name} is missing; the store was changed outside loopscribe"
        )
    if isinstance(data, BaseException):
        raise data
    return data


def _same(st: os.stat_result, made: _Id) -> bool:
    """Whether ``st`` is of the regular file (or folder) the mirror made, as it left it."""
    kind_ok = stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)
    return kind_ok and _identity(st) == made


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _private_folder(folder: Path) -> None:
    """Make ``folder`` and any missing parent, each 0700 (an existing one is left as is)."""
    missing = []
    head = folder
    while not head.exists():
        missing.append(head)
        if head.parent == head:
            break
        head = head.parent
    for part in reversed(missing):
        with contextlib.suppress(FileExistsError):
            part.mkdir(0o700)
    if missing:
        os.chmod(folder, 0o700)
