"""Ship session files to a store, incrementally, crash-safe and idempotent.

One pass, for each session file that grew since the last pass:

1. take the file's ship cursor (``FILE.ship-cursor``, beside it) with an
   exclusive ``flock``, so two shippers never ship one file at once;
2. on the first visit in this process, read the store's manifest (the
   commit point) and the session folder: a segment beyond the manifest is the
   leftover of an interrupted pass; it is *adopted* when it holds exactly the
   local bytes of its records, removed otherwise;
3. read the complete lines added since the manifest's ``bytes`` (an
   unfinished final line waits for the next pass), validate them, and put
   them as new immutable segments of at most ``segment_bytes``;
4. after each segment, replace the manifest (one atomic PUT), then the
   cursor (write, fsync, rename).

A pass killed at any point leaves either the old manifest (the segment put
before it is adopted next time, so nothing is uploaded twice) or the new one
(the cursor is behind it, and the manifest read at the next first visit
wins). Bytes uploaded per pass are the bytes added, plus one manifest per
segment. Artifacts (``<session_id>.artifacts/``) are copied when new or
changed (by size and mtime).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from .. import events as ev
from .._codec import DEFAULT_CODEC
from .._errors import FormatError, LoopscribeError, StoreError
from .._format import Scanner
from ..otel._ids import parse_traceparent, trace_id
from ..workspace import (
    SessionSummary,
    Status,
    _Fold,
    _is_locked,
    _locked_inodes,
    _Locks,
    _read_side,
    _side_path,
    _with_side,
)
from ._layout import (
    ARTIFACTS,
    LAYOUT_VERSION,
    MARKER,
    SIDE_LOG,
    Manifest,
    Segment,
    manifest_path,
    parse_segment_name,
    segment_name,
    session_dir,
)
from ._url import atomic_put, filesystem, list_folder, put_segment

__all__ = ["ShipResult", "Shipper", "cursor_path", "summary_from_json", "summary_to_json"]

logger = logging.getLogger("loopscribe")

SEGMENT_BYTES = 64 << 20
"""Largest segment a pass writes (a single longer line makes a longer segment)."""
_READ_BYTES = 1 << 20


def cursor_path(session_path: Path) -> Path:
    """Where the ship cursor of a session file lives: beside it."""
    return session_path.with_name(session_path.name + ".ship-cursor")


def summary_to_json(summary: SessionSummary) -> dict[str, Any]:
    """A SessionSummary as the manifest's ``summary`` object."""
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
                "summary": value.summary,
                "keep_last": value.keep_last,
            }
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    return out


def summary_from_json(obj: dict[str, Any], path: Path | str) -> SessionSummary:
    """The SessionSummary of a manifest's ``summary`` object (its file: ``path``)."""
    from ..workspace import Compaction

    fields: dict[str, Any] = {}
    for name in SessionSummary.__dataclass_fields__:
        if name in obj:
            fields[name] = obj[name]
    for name in ("created", "updated"):
        fields[name] = datetime.fromisoformat(str(obj.get(name) or "1970-01-01T00:00:00+00:00"))
    fields["skills"] = tuple(fields.get("skills") or ())
    fields["todos"] = tuple(fields.get("todos") or ())
    comp = obj.get("compaction")
    fields["compaction"] = (
        None
        if not comp
        else Compaction(
            datetime.fromisoformat(comp["at"]),
            int(comp["seq"]),
            int(comp["before"]),
            None if comp.get("summary") is None else str(comp["summary"]),
            int(comp.get("keep_last") or 0),
        )
    )
    fields["path"] = path
    return SessionSummary(**fields)


@dataclass(frozen=True, slots=True)
class ShipResult:
    """What one or more passes did.

    Attributes:
        sessions: Session files looked at.
        shipped: Sessions that got new records (or artifacts) in the store.
        segments: Segments put.
        records: Records shipped.
        bytes_uploaded: Bytes put to the store: segments, manifests, artifacts.
        adopted: Segments of an interrupted pass found complete and kept.
        errors: One line per file that could not be shipped (the others were).
    """

    sessions: int = 0
    shipped: int = 0
    segments: int = 0
    records: int = 0
    bytes_uploaded: int = 0
    adopted: int = 0
    errors: tuple[str, ...] = ()

    def __add__(self, other: ShipResult) -> ShipResult:
        return ShipResult(
            self.sessions + other.sessions,
            self.shipped + other.shipped,
            self.segments + other.segments,
            self.records + other.records,
            self.bytes_uploaded + other.bytes_uploaded,
            self.adopted + other.adopted,
            self.errors + other.errors,
        )

    def to_json(self) -> dict[str, Any]:
        """The result as JSON (``loopscribe ship --json``)."""
        return {
            "sessions": self.sessions,
            "shipped": self.shipped,
            "segments": self.segments,
            "records": self.records,
            "bytes_uploaded": self.bytes_uploaded,
            "adopted": self.adopted,
            "errors": list(self.errors),
        }


@dataclass(slots=True)
class _State:
    """What this process knows of one shipped session: manifest, fold and validator."""

    manifest: Manifest
    fold: _Fold
    scanner: Scanner
    lines: int


@dataclass(slots=True)
class _Tally:
    shipped: bool = False
    segments: int = 0
    records: int = 0
    bytes_uploaded: int = 0
    adopted: int = 0
    errors: list[str] = field(default_factory=list)


class Shipper:
    """Copies the session files of a folder to a store URL, pass by pass.

    Args:
        source: A folder of session files (searched recursively), or one file.
        to: The store: any fsspec URL (``s3://bucket/prefix``, ``gs://...``,
            ``az://...``, ``file:///mnt/share/sessions``).
        workers: Sessions shipped in parallel (object stores reward concurrency).
        segment_bytes: Largest segment to put.
        on_file: Called with each file after it was shipped (progress).

    Raises:
        StoreError: fsspec or the URL's backend is missing.
    """

    def __init__(
        self,
        source: str | os.PathLike[str],
        to: str,
        *,
        workers: int = 8,
        segment_bytes: int = SEGMENT_BYTES,
        on_file: Callable[[Path], None] | None = None,
    ) -> None:
        if segment_bytes < 1:
            raise ValueError(f"segment_bytes must be >= 1, got {segment_bytes}")
        self.source = Path(source)
        self.url = to.rstrip("/")
        self.fs, self.root = filesystem(self.url)
        self.workers = max(1, workers)
        self.segment_bytes = segment_bytes
        self.on_file = on_file
        self._states: dict[Path, _State] = {}
        self._states_lock = threading.Lock()
        self._marked = False
        self._host = socket.gethostname()

    # -- passes -------------------------------------------------------------------

    def files(self) -> list[Path]:
        """The session files to ship: the source file, or every ``*.jsonl`` below the folder."""
        if self.source.is_file():
            return [self.source]
        if not self.source.is_dir():
            raise FileNotFoundError(errno.ENOENT, f"{self.source}: no such file or folder")
        return sorted(
            p
            for p in self.source.rglob("*.jsonl")
            if not p.name.endswith(".otlp.jsonl")
            and not any(
                part.endswith(".artifacts") for part in p.relative_to(self.source).parts[:-1]
            )
            and p.is_file()
        )

    def ship_once(self) -> ShipResult:
        """One pass over every session file; errors of one file do not stop the others."""
        self._mark_store()
        files = self.files()
        locked = _locked_inodes()
        with ThreadPoolExecutor(self.workers, thread_name_prefix="loopscribe-ship") as pool:
            tallies = list(pool.map(lambda p: self._ship_file(p, locked), files))
        out = ShipResult(sessions=len(files))
        for t in tallies:
            out += ShipResult(
                0,
                int(t.shipped),
                t.segments,
                t.records,
                t.bytes_uploaded,
                t.adopted,
                tuple(t.errors),
            )
        return out

    def run(
        self,
        *,
        follow: bool = False,
        interval_s: float = 5.0,
        stop: threading.Event | None = None,
        on_pass: Callable[[ShipResult], None] | None = None,
    ) -> ShipResult:
        """Ship once, or with ``follow`` pass after pass until ``stop`` is set.

        Returns:
            The sum of every pass.

        Raises:
            StoreError: The first pass cannot write to the store (later passes
                of ``follow`` report it in the result and try again).
        """
        stop = stop or threading.Event()
        total = ShipResult()
        first = True
        while True:
            try:
                result = self.ship_once()
            except (LoopscribeError, OSError) as exc:
                if first or not follow:
                    raise  # a wrong URL or missing rights: say so at once
                # The store went away for a while: report, and try again next pass.
                result = ShipResult(errors=(f"{self.url}: {exc}",))
            first = False
            total += result
            if on_pass is not None:
                on_pass(result)
            if not follow or stop.wait(interval_s):
                return total

    # -- one file -----------------------------------------------------------------

    def _mark_store(self) -> None:
        """Write the store's marker once, so readers know the layout version."""
        if self._marked:
            return
        marker = f"{self.root}/{MARKER}"
        try:
            if not self.fs.exists(marker):
                atomic_put(self.fs, marker, orjson.dumps({"layout": LAYOUT_VERSION}))
        except OSError as exc:
            raise StoreError(f"{self.url}: cannot write to the store ({exc})") from exc
        self._marked = True

    def _ship_file(self, path: Path, locked: _Locks | None) -> _Tally:
        tally = _Tally()
        try:
            with _cursor_lock(path) as cursor_fd:
                if cursor_fd is None:
                    return tally  # another shipper has this file right now
                self._ship_locked(path, cursor_fd, locked, tally)
        except Exception as exc:  # a backend's own errors too (network, auth)
            with self._states_lock:
                self._states.pop(path, None)  # start over from the store next time
            tally.errors.append(f"{path}: {exc}")
            logger.warning("shipping %s failed: %s", path, exc)
        if self.on_file is not None:
            self.on_file(path)
        return tally

    def _ship_locked(
        self, path: Path, cursor_fd: int, locked: _Locks | None, tally: _Tally
    ) -> None:
        st = os.stat(path)
        running = _is_locked(path, st, locked)
        artifacts = _local_artifacts(path)
        side = _side_signature(path)
        cursors = _read_cursor(cursor_fd)
        mine = cursors.get(self.url)
        signature = _signature(artifacts)
        if (
            mine is not None
            and mine.get("bytes") == st.st_size
            and mine.get("running") == running
            and mine.get("artifacts") == signature
            and mine.get("side_log") == side
            and path not in self._states
        ):
            return  # nothing new since the last pass: no request at all
        state = self._state(path, tally)
        if state is None:
            return  # not one complete line yet
        manifest = state.manifest
        if manifest.size > st.st_size:
            raise StoreError(
                f"{path}: the file has {st.st_size} bytes but {manifest.size} were shipped "
                f"to {self.url}; the file was replaced or cut outside loopscribe"
            )
        dirty = False
        with open(path, "rb") as stream:
            for chunk in _chunks(stream, manifest.size, st.st_size, self.segment_bytes):
                self._ship_chunk(path, state, chunk, running, tally)
        folder = session_dir(self.root, manifest.session_id)
        for name, (size, mtime_ns, full) in artifacts.items():
            if manifest.artifacts.get(name) == {"size": size, "mtime_ns": mtime_ns}:
                continue
            data = full.read_bytes()
            put_segment(self.fs, f"{folder}/{ARTIFACTS}/{name}", data)
            manifest.artifacts[name] = {"size": size, "mtime_ns": mtime_ns}
            tally.bytes_uploaded += len(data)
            dirty = True
        if side is not None and manifest.side_log != side:
            # Facts a UI wrote while the writer held the file: small, put whole.
            data = _side_path(path).read_bytes()
            data = data[: data.rfind(b"\n") + 1]
            put_segment(self.fs, f"{folder}/{SIDE_LOG}", data)
            manifest.side_log = side
            tally.bytes_uploaded += len(data)
            dirty = True
        # Each segment committed its manifest; commit again only for what came after.
        if dirty or manifest.summary.get("status") != _status(state, running):
            self._commit(path, state, running, tally)
        mark = {
            "session_id": manifest.session_id,
            "bytes": manifest.size,
            "records": manifest.records,
            "running": running,
            "artifacts": signature,
            "side_log": side,
        }
        if mine != mark:
            cursors[self.url] = mark
            _write_cursor(cursor_fd, cursors)
        if manifest.size == st.st_size and not running:
            # Closed and shipped: forget the fold; the cursor skips the file from now on.
            with self._states_lock:
                self._states.pop(path, None)

    def _state(self, path: Path, tally: _Tally) -> _State | None:
        """This process's state of a session, built from the store on the first visit."""
        with self._states_lock:
            state = self._states.get(path)
        if state is not None:
            return state
        session_id = _session_id_of(path)
        if not session_id:
            return None
        where = manifest_path(self.root, session_id)
        try:
            manifest = Manifest.from_bytes(self.fs.cat_file(where), where)
        except FileNotFoundError:
            manifest = Manifest(session_id)
        if manifest.session_id != session_id:
            raise StoreError(f"{where}: holds session {manifest.session_id}, not {session_id}")
        shipped = manifest.size
        state = _State(Manifest(session_id), _Fold(), Scanner(path), 0)
        # Fold what is already shipped (a local read), then check the store's tail.
        with open(path, "rb") as stream:
            offset = 0
            for chunk in _chunks(stream, 0, shipped, self.segment_bytes):
                self._fold(state, chunk, offset)
                offset += len(chunk)
        if state.scanner.end_offset != shipped or state.scanner.next_seq != manifest.records:
            raise StoreError(
                f"{path}: {where} says {manifest.records} records in {shipped} bytes were "
                f"shipped, but the file has {state.scanner.next_seq} records in its first "
                f"{state.scanner.end_offset} bytes; the file was replaced or the store was "
                "changed outside loopscribe"
            )
        manifest.runs.update(state.manifest.runs)
        state.manifest = manifest
        self._adopt_or_remove(path, state, tally)
        with self._states_lock:
            self._states[path] = state
        return state

    def _adopt_or_remove(self, path: Path, state: _State, tally: _Tally) -> None:
        """Deal with segments an interrupted pass put after the manifest's end."""
        manifest = state.manifest
        folder = session_dir(self.root, manifest.session_id)
        leftovers: list[tuple[int, int, int, str]] = []
        for name, size in list_folder(self.fs, folder):
            seqs = parse_segment_name(name)
            if seqs is not None and seqs[0] >= manifest.records:
                leftovers.append((seqs[0], seqs[1], size, name))
        leftovers.sort()
        for first, last, size, name in leftovers:
            if first == manifest.records and self._matches(path, state, last, size):
                with open(path, "rb") as stream:
                    stream.seek(manifest.size)
                    chunk = stream.read(size)
                offset = manifest.size
                self._fold(state, chunk, offset)
                manifest.last_segment = Segment(first, last, offset, size)
                manifest.size, manifest.records = offset + size, last + 1
                tally.adopted += 1
                tally.records += last - first + 1
                self._commit(path, state, manifest.summary.get("status") == "running", tally)
                continue
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(name)

    def _matches(self, path: Path, state: _State, last: int, size: int) -> bool:
        """Whether the local file holds exactly ``size`` bytes of records up to ``last``."""
        start = state.manifest.size
        with open(path, "rb") as stream:
            stream.seek(start)
            chunk = stream.read(size)
        if len(chunk) != size or not chunk.endswith(b"\n"):
            return False
        tail = chunk[chunk.rfind(b"\n", 0, len(chunk) - 1) + 1 :]
        try:
            return bool(orjson.loads(tail).get("seq") == last)
        except (orjson.JSONDecodeError, AttributeError):
            return False

    def _fold(self, state: _State, chunk: bytes, offset: int) -> int:
        """Validate the lines of ``chunk`` and fold them into the session's summary.

        Returns:
            The number of records.
        """
        fold, scanner = state.fold, state.scanner
        count = 0
        for number, _off, _raw, obj in scanner.lines(
            io.BytesIO(chunk), offset=offset, first_line=state.lines + 1
        ):
            data = obj.get("data")
            data = data if isinstance(data, dict) else {}
            kind = obj["type"]
            fold.feed(kind, obj["seq"], scanner.ts, data, obj["session_id"])
            if kind == ev.RUN_START and obj.get("run_id"):
                parent = parse_traceparent(data.get("traceparent"))
                run_id = str(obj["run_id"])
                trace = parent.trace_id if parent else trace_id(obj["session_id"], run_id)
                state.manifest.runs[run_id] = f"{trace:032x}"
            state.lines = number
            count += 1
        if not state.manifest.session_id and scanner.session_id:
            state.manifest.session_id = scanner.session_id
        return count

    def _ship_chunk(
        self, path: Path, state: _State, chunk: bytes, running: bool, tally: _Tally
    ) -> bool:
        """Validate, put and commit one segment's worth of complete lines."""
        manifest = state.manifest
        offset, first = manifest.size, manifest.records
        error: FormatError | None = None
        try:
            self._fold(state, chunk, offset)
        except FormatError as exc:
            # Ship the valid lines before the damage, then report it.
            error = exc
            chunk = chunk[: state.scanner.end_offset - offset]
        count = state.scanner.next_seq - first
        if count:
            last = first + count - 1
            put_segment(
                self.fs,
                f"{session_dir(self.root, manifest.session_id)}/{segment_name(first, last)}",
                chunk,
            )
            manifest.last_segment = Segment(first, last, offset, len(chunk))
            manifest.size, manifest.records = offset + len(chunk), last + 1
            tally.segments += 1
            tally.records += count
            tally.bytes_uploaded += len(chunk)
            self._commit(path, state, running, tally)
        if error is not None:
            raise error
        return count > 0

    def _commit(self, path: Path, state: _State, running: bool, tally: _Tally) -> None:
        """Replace the manifest: from now on readers see the new segments."""
        manifest = state.manifest
        fold = _with_side(state.fold, _read_side(_side_path(path), DEFAULT_CODEC))
        summary = fold.summary(path, _status(state, running))
        manifest.summary = summary_to_json(summary)
        manifest.origin = {"host": self._host, "file": str(path.absolute())}
        manifest.shipped_at = datetime.now(UTC).isoformat()
        data = manifest.to_bytes()
        atomic_put(self.fs, manifest_path(self.root, manifest.session_id), data)
        tally.bytes_uploaded += len(data)
        tally.shipped = True


def _status(state: _State, running: bool) -> Status:
    """A shipped session's status as the shipper sees it (``running``: a writer holds it)."""
    if running:
        return "running"
    if state.fold.run_open:
        return "interrupted"
    return "failed" if state.fold.last_run_failed else "idle"


def _side_signature(path: Path) -> dict[str, int] | None:
    """Size and mtime of a session's side log, or ``None`` when it has none."""
    try:
        st = _side_path(path).stat()
    except FileNotFoundError:
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _session_id_of(path: Path) -> str:
    """The session ID from a file's first line (validated)."""
    with open(path, "rb") as stream:
        first = stream.readline()
    if not first.endswith(b"\n"):
        return ""  # not one complete line yet: nothing to ship
    scanner = Scanner(path)
    scanner.check(1, 0, first)
    return scanner.session_id or ""


def _chunks(stream: io.BufferedReader | Any, start: int, end: int, limit: int) -> Iterator[bytes]:
    """Runs of complete lines between ``start`` and ``end``, each up to ``limit`` bytes.

    A line longer than ``limit`` makes a longer run; bytes after the last
    ``\\n`` before ``end`` (an unfinished line) are left for later.
    """
    stream.seek(start)
    pos = start
    carry = b""
    while pos < end:
        want = min(max(limit - len(carry), _READ_BYTES), end - pos)
        block = stream.read(want)
        if not block:
            break
        pos += len(block)
        buf = carry + block
        if len(buf) < limit and pos < end:
            carry = buf
            continue
        cut = buf.rfind(b"\n", 0, limit) + 1 or buf.find(b"\n") + 1
        if cut == 0:
            carry = buf  # one line longer than the limit: keep reading
            continue
        yield buf[:cut]
        carry = buf[cut:]
    while carry:
        cut = carry.rfind(b"\n", 0, limit) + 1 or carry.find(b"\n") + 1
        if cut == 0:
            return
        yield carry[:cut]
        carry = carry[cut:]


def _local_artifacts(path: Path) -> dict[str, tuple[int, int, Path]]:
    """The artifacts beside a session file: name to (size, mtime_ns, path)."""
    folder = path.with_name(path.name.removesuffix(".jsonl") + ".artifacts")
    out: dict[str, tuple[int, int, Path]] = {}
    if not folder.is_dir():
        return out
    for entry in sorted(folder.rglob("*")):
        if entry.is_file():
            st = entry.stat()
            out[entry.relative_to(folder).as_posix()] = (st.st_size, st.st_mtime_ns, entry)
    return out


def _signature(artifacts: dict[str, tuple[int, int, Path]]) -> list[list[Any]]:
    return [[name, size, mtime] for name, (size, mtime, _p) in sorted(artifacts.items())]


@contextlib.contextmanager
def _cursor_lock(path: Path) -> Iterator[int | None]:
    """The cursor file, locked exclusively; ``None`` if another shipper holds it."""
    fd = os.open(cursor_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield fd
    finally:
        os.close(fd)


def _read_cursor(fd: int) -> dict[str, dict[str, Any]]:
    size = os.fstat(fd).st_size
    raw = os.pread(fd, size, 0) if size else b""
    if not raw:
        return {}
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}  # damaged: the manifest in the store is the truth anyway
    return obj if isinstance(obj, dict) else {}


def _write_cursor(fd: int, cursors: dict[str, dict[str, Any]]) -> None:
    """Rewrite the locked cursor file in place.

    In place, not by rename: the lock is held on this inode. A torn write
    (a crash between truncate and write) leaves an unreadable cursor, which
    counts as no cursor: the manifest, the real commit point, is read instead.
    """
    os.ftruncate(fd, 0)
    os.pwrite(fd, orjson.dumps(cursors), 0)
