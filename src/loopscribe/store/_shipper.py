"""Ship session files to a store, incrementally, crash-safe, idempotent and race-free.

One pass, for each session file that grew since the last pass:

1. take the file's ship cursor (``FILE.ship-cursor``, beside it) with an
   exclusive ``flock``, so two shippers of one machine never ship one file at
   once;
2. on the first visit in this process (and whenever the cursor shows that
   another shipper went further), read the store's manifest (the commit
   point) with its version, and list the session folder: the chain the
   manifest commits is found, a segment beyond it is the leftover of an
   interrupted pass (*adopted* when it holds exactly the local bytes of its
   records, removed otherwise), any other segment is a fork left by a pass
   that lost a race (removed); a chain that does not reach the manifest's
   end is *repaired* from the local file;
3. read the complete lines added since the manifest's ``bytes`` (an
   unfinished final line waits for the next pass), validate them, and put
   them as new immutable segments of at most ``segment_bytes``, each only
   if no object has its name yet;
4. once every object of the pass is in the store (its segments, adopted
   leftovers, artifacts, side log), replace the manifest once, *only if it
   is still the version this shipper read* (``If-Match`` on S3, a locked
   check-and-rename in a folder), then the cursor.

Two shippers (two processes, two machines) extending one session race at
step 4: one replace wins, the other finds the manifest changed, reads it
again and continues from the winner's end. So the chain never forks, and a
pass killed at any point leaves either the old manifest (the segments put
before it are adopted next time, in order, so nothing is uploaded twice) or
the new one. One commit per session per pass, not one per segment: the
manifest is never written before an object it names, and the segments a
killed pass put are the leftovers step 2 adopts.
Artifacts (``<session_id>.artifacts/``) are copied when new or changed (by
size and mtime); a symbolic link among them is refused, never followed.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from .. import events as ev
from .._codec import DEFAULT_CODEC
from .._errors import FormatError, LoopscribeError, StoreError
from .._fold import SessionFold, Status
from .._format import Scanner
from .._logsafe import scrub
from .._sidelog import Locks, is_locked, locked_inodes, read_side, side_path, with_side
from .._workspace_source import SessionNotFoundError
from ..otel._ids import parse_traceparent, trace_id
from ._backend import Conflict, TooLarge
from ._layout import (
    LAYOUT_VERSION,
    MARKER,
    MAX_MANIFEST_BYTES,
    SEGMENT_BYTES,
    SESSIONS,
    Chain,
    Segment,
    artifact_key,
    artifacts_key,
    manifest_key,
    parse_segment_name,
    resolve_chain,
    segment_key,
    session_key,
    side_log_key,
)
from ._manifest import (
    Manifest,
    ManifestError,
    summary_from_json,
    summary_to_json,
    too_large,
)
from ._read import Store
from ._ship_cursor import _cursor_lock, _read_cursor, _write_cursor, cursor_path
from ._ship_files import (
    _chunks,
    _local_artifacts,
    _read_artifact,
    _refusal,
    _session_id_of,
    _side_signature,
    _signature,
)
from ._ship_result import ShipResult

__all__ = ["ShipResult", "Shipper", "cursor_path", "summary_from_json", "summary_to_json"]

logger = logging.getLogger("loopscribe")

_ATTEMPTS = 8
"""Times a pass reads the manifest again after another shipper committed first."""


@dataclass(slots=True)
class _State:
    """What this process knows of one shipped session: manifest, its version, fold, validator."""

    manifest: Manifest
    version: str | None
    fold: SessionFold
    scanner: Scanner
    lines: int
    uncommitted: bool = False
    """Leftover segments adopted that no manifest names yet (the pass's commit will)."""


@dataclass(slots=True)
class _Tally:
    shipped: bool = False
    segments: int = 0
    records: int = 0
    bytes_uploaded: int = 0
    adopted: int = 0
    repaired: int = 0
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

    Attributes:
        url: The store's URL as shown and stored: without credentials.

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
        self.store = Store(to)
        self.backend = self.store.backend
        self.url = self.store.url
        self.fs, self.root = self.store.fs, self.store.root
        self.workers = max(1, workers)
        self.segment_bytes = segment_bytes
        self.on_file = on_file
        self._states: dict[Path, _State] = {}
        self._states_lock = threading.Lock()
        self._marked = False
        self._host = socket.gethostname()
        self._reported: set[str] = set()

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
        locked = locked_inodes()
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
                t.repaired,
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
                result = ShipResult(errors=(_one_line(exc, self.url),))
            first = False
            total += result
            if on_pass is not None:
                on_pass(result)
            if not follow or stop.wait(interval_s):
                return total

    # -- the store ---------------------------------------------------------------

    def _mark_store(self) -> None:
        """Write the store's marker once, so readers know the layout version.

        Also removes the temporary files killed passes of this host left at
        the top of a folder store (each session's own are removed on its
        first visit).
        """
        if self._marked:
            return
        marker = orjson.dumps({"layout": LAYOUT_VERSION})
        self.backend.put_new(MARKER, marker, doing="write to the store")
        self.backend.clean_temps("")
        self.backend.clean_temps(SESSIONS)
        self._marked = True

    # -- one file -----------------------------------------------------------------

    def _ship_file(self, path: Path, locked: Locks | None) -> _Tally:
        tally = _Tally()
        try:
            with _cursor_lock(path) as cursor_fd:
                if cursor_fd is None:
                    return tally  # another shipper of this machine has this file right now
                self._ship_locked(path, cursor_fd, locked, tally)
        except Exception as exc:  # a backend's own errors too (network, auth)
            self._forget(path)  # start over from the store next time
            line = _one_line(exc, self.url)
            tally.errors.append(line if line.startswith(str(path)) else f"{path}: {line}")
            logger.warning("shipping %s failed: %s", path, line)
        if self.on_file is not None:
            self.on_file(path)
        return tally

    def _forget(self, path: Path) -> None:
        with self._states_lock:
            self._states.pop(path, None)

    def _report(self, tally: _Tally, line: str) -> None:
        """Report a problem that repeats every pass (a refused artifact) once per process."""
        if line not in self._reported:
            self._reported.add(line)
            tally.errors.append(line)

    def _ship_locked(self, path: Path, cursor_fd: int, locked: Locks | None, tally: _Tally) -> None:
        st = os.stat(path)
        running = is_locked(path, st, locked)
        artifacts, refused = _local_artifacts(path)
        for line in refused:
            self._report(tally, line)
        side = _side_signature(path)
        cursors = _read_cursor(cursor_fd)
        mine = cursors.get(self.url)
        signature = _signature(artifacts)
        with self._states_lock:
            known = self._states.get(path)
        if (
            mine is not None
            and mine.get("bytes") == st.st_size
            and mine.get("running") == running
            and mine.get("artifacts") == signature
            and mine.get("side_log") == side
            and known is None
        ):
            return  # nothing new since the last pass: no request at all
        if known is not None and mine is not None and _ahead(mine, known.manifest):
            self._forget(path)  # another shipper went further: read the store again
        for _attempt in range(_ATTEMPTS):
            try:
                state = self._state(path, st, tally)  # adopting a leftover commits too
                if state is None:
                    return  # not one complete line yet
                self._ship_new(path, state, st, running, artifacts, side, tally)
                break
            except Conflict:
                # Another shipper committed first: continue from its end.
                self._forget(path)
        else:
            raise StoreError(
                f"{self.store.session_url(_session_id_of(path))}: other shippers kept "
                f"committing first ({_ATTEMPTS} tries); the next pass tries again"
            )
        manifest = state.manifest
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
            self._forget(path)

    def _ship_new(
        self,
        path: Path,
        state: _State,
        st: os.stat_result,
        running: bool,
        artifacts: dict[str, tuple[int, int]],
        side: dict[str, int] | None,
        tally: _Tally,
    ) -> None:
        """Put what the store lacks; :class:`Conflict` if another shipper commits first."""
        manifest = state.manifest
        self._check_not_cut(path, st, manifest)
        dirty = state.uncommitted
        error: FormatError | None = None
        with open(path, "rb") as stream:
            for chunk in _chunks(stream, manifest.size, st.st_size, self.segment_bytes):
                put, error = self._ship_chunk(path, state, chunk, tally)
                dirty |= put
                if error is not None:
                    break
        if error is not None:
            # Commit the valid lines before the damage, then report it.
            if dirty:
                self._commit(path, state, running, tally)
            raise error
        sid = manifest.session_id
        folder = path.with_name(path.name.removesuffix(".jsonl") + ".artifacts")
        for name, (size, mtime_ns) in artifacts.items():
            if manifest.artifacts.get(name) == {"size": size, "mtime_ns": mtime_ns}:
                continue
            try:
                data = _read_artifact(folder, name)
            except OSError as exc:
                self._report(tally, _refusal(folder, name, exc))
                continue
            self.backend.put(artifact_key(sid, name), data)
            manifest.artifacts[name] = {"size": size, "mtime_ns": mtime_ns}
            tally.bytes_uploaded += len(data)
            dirty = True
        if side is not None and manifest.side_log != side:
            # Facts a UI wrote while the writer held the file: small, put whole.
            data = side_path(path).read_bytes()
            data = data[: data.rfind(b"\n") + 1]
            self.backend.put(side_log_key(sid), data)
            manifest.side_log = side
            tally.bytes_uploaded += len(data)
            dirty = True
        # One commit for the pass, once every object it names is in the store.
        if dirty or manifest.summary.get("status") != _status(state, running):
            self._commit(path, state, running, tally)

    # -- the store's view of one session -----------------------------------------

    def _state(self, path: Path, st: os.stat_result, tally: _Tally) -> _State | None:
        """This process's state of a session, built from the store when not known."""
        with self._states_lock:
            state = self._states.get(path)
        if state is not None:
            return state
        session_id = _session_id_of(path)
        if not session_id:
            return None
        manifest, version = self._read_manifest(path, session_id, tally)
        where = self.store.session_url(session_id)
        self._check_not_cut(path, st, manifest)
        self.backend.clean_temps(session_key(session_id))
        for folder in sorted({artifacts_key(session_id)} | _artifact_dirs(session_id, manifest)):
            self.backend.clean_temps(folder)
        entries = self.backend.listdir(session_key(session_id))
        chain = resolve_chain(
            ((e.name, e.size) for e in entries),
            manifest.records,
            manifest.size,
            manifest.last_segment,
            where,
        )
        wanted = {s.first_seq for s in chain.segments} | {s.last_seq + 1 for s in chain.segments}
        state, offsets = self._fold_local(path, session_id, manifest.size, wanted)
        if state.scanner.end_offset != manifest.size or state.scanner.next_seq != manifest.records:
            raise StoreError(
                f"{path}: {self.store.where(manifest_key(session_id))} says {manifest.records} "
                f"records in {manifest.size} bytes were shipped, but the file has "
                f"{state.scanner.next_seq} records in its first {state.scanner.end_offset} "
                "bytes; the file was replaced or the store was changed outside loopscribe"
            )
        good = _agreeing(chain.segments, offsets)
        if chain.complete and len(good) == len(chain.segments):
            manifest.runs.update(state.manifest.runs)
            state.manifest, state.version = manifest, version
            self._tidy(path, state, chain, _sizes(entries), tally)
        else:
            state = self._repair(path, manifest, version, good, chain, tally)
        with self._states_lock:
            self._states[path] = state
        return state

    def _read_manifest(
        self, path: Path, session_id: str, tally: _Tally
    ) -> tuple[Manifest, str | None]:
        """The store's manifest of a session and its version; a new one if there is none.

        A damaged manifest (not JSON, a field of the wrong type, another
        session's) is replaced from the local file, the source of truth:
        the segments it committed are adopted again as far as they hold the
        file's bytes.
        """
        key = manifest_key(session_id)
        try:
            raw, version = self.backend.read_limited(key, MAX_MANIFEST_BYTES)
        except FileNotFoundError:
            return Manifest(session_id), None
        except TooLarge as exc:
            raise too_large(self.store.where(key), exc.size) from None
        try:
            return Manifest.from_bytes(raw, self.store.where(key), session_id), version
        except ManifestError as exc:
            logger.warning("%s; rebuilding it from %s", exc, path)
            tally.repaired += 1
            return Manifest(session_id), version

    def _check_not_cut(self, path: Path, st: os.stat_result, manifest: Manifest) -> None:
        if manifest.size > st.st_size:
            raise StoreError(
                f"{path}: the file has {st.st_size} bytes but {manifest.size} were shipped "
                f"to {self.url}; the file was replaced or cut outside loopscribe"
            )

    def _fold_local(
        self, path: Path, session_id: str, end: int, wanted: set[int]
    ) -> tuple[_State, dict[int, int]]:
        """Fold the first ``end`` bytes of the file; the offsets of the ``wanted`` seqs."""
        state = _State(Manifest(session_id), None, SessionFold(), Scanner(path), 0)
        offsets: dict[int, int] = {}
        with open(path, "rb") as stream:
            offset = 0
            for chunk in _chunks(stream, 0, end, self.segment_bytes):
                self._fold(state, chunk, offset, wanted, offsets)
                offset += len(chunk)
        if state.scanner.next_seq in wanted:
            offsets[state.scanner.next_seq] = state.scanner.end_offset
        return state, offsets

    def _tidy(
        self, path: Path, state: _State, chain: Chain, sizes: dict[str, int], tally: _Tally
    ) -> None:
        """Remove forks, and adopt or remove segments an interrupted pass put past the end."""
        manifest = state.manifest
        sid = manifest.session_id
        leftovers: list[tuple[int, int, int]] = []
        for name in chain.extra:
            seqs = parse_segment_name(name)
            assert seqs is not None
            if seqs[0] < manifest.records:
                # A fork: a pass that lost the race to commit put it. No commit
                # can use it any more (a commit extends the manifest's end).
                self.backend.delete(segment_key(sid, *seqs))
            else:
                leftovers.append((seqs[0], seqs[1], sizes.get(name, 0)))
        # In seq order, so that adopting one makes the next one adoptable. One
        # further on stays: it is no commit's yet, and a pass that reaches its
        # place puts its own segment (or finds the same bytes there).
        leftovers.sort(key=lambda item: (item[0], -item[1]))
        for first, last, size in leftovers:
            if first != manifest.records:
                continue
            if not self._matches(path, state, last, size):
                # Not the local file's bytes: no shipper of this file commits it.
                self.backend.delete(segment_key(sid, first, last))
                continue
            with open(path, "rb") as stream:
                stream.seek(manifest.size)
                chunk = stream.read(size)
            offset = manifest.size
            self._fold(state, chunk, offset)
            manifest.last_segment = Segment(first, last, offset, size)
            manifest.size, manifest.records = offset + size, last + 1
            tally.adopted += 1
            tally.records += last - first + 1
            state.uncommitted = True  # committed by the pass, with what it ships after them

    def _repair(
        self,
        path: Path,
        manifest: Manifest,
        version: str | None,
        good: list[Segment],
        chain: Chain,
        tally: _Tally,
    ) -> _State:
        """Rebuild a broken chain: keep its valid start, remove the rest, ship on from there.

        The manifest commits more than the store's segments hold (one is
        missing, or they fork in a way no chain reaches its end): the store
        was damaged, by shippers of earlier versions taking turns or by
        hand. The local file is the source of truth.
        """
        sid = manifest.session_id
        end = good[-1].end if good else 0
        state, _offsets = self._fold_local(path, sid, end, set())
        keep = {s.name for s in good}
        for name in (*chain.extra, *(s.name for s in chain.segments)):
            if name not in keep:
                seqs = parse_segment_name(name)
                assert seqs is not None
                self.backend.delete(segment_key(sid, *seqs))
        fixed = Manifest(
            sid,
            size=end,
            records=good[-1].last_seq + 1 if good else 0,
            last_segment=good[-1] if good else None,
            artifacts=manifest.artifacts,
            side_log=manifest.side_log,
        )
        fixed.runs.update(state.manifest.runs)
        state.manifest, state.version = fixed, version
        logger.warning(
            "%s: the chain of segments was broken after byte %d of %d; rebuilding it from %s",
            self.store.session_url(sid),
            end,
            manifest.size,
            path,
        )
        tally.repaired += 1
        return state

    def _matches(self, path: Path, state: _State, last: int, size: int) -> bool:
        """Whether the file holds exactly ``size`` bytes of records up to ``last`` at the end."""
        with open(path, "rb") as stream:
            stream.seek(state.manifest.size)
            chunk = stream.read(size)
        if len(chunk) != size or not chunk.endswith(b"\n"):
            return False
        tail = chunk[chunk.rfind(b"\n", 0, len(chunk) - 1) + 1 :]
        try:
            return bool(orjson.loads(tail).get("seq") == last)
        except (orjson.JSONDecodeError, AttributeError):
            return False

    def _fold(
        self,
        state: _State,
        chunk: bytes,
        offset: int,
        wanted: set[int] | None = None,
        offsets: dict[int, int] | None = None,
    ) -> int:
        """Validate the lines of ``chunk`` and fold them into the session's summary.

        Returns:
            The number of records.
        """
        fold, scanner = state.fold, state.scanner
        count = 0
        for number, off, _raw, obj in scanner.lines(
            io.BytesIO(chunk), offset=offset, first_line=state.lines + 1
        ):
            data = obj.get("data")
            data = data if isinstance(data, dict) else {}
            kind = obj["type"]
            seq = obj["seq"]
            if wanted is not None and offsets is not None and seq in wanted:
                offsets[seq] = off
            fold.feed(kind, seq, scanner.ts, data, obj["session_id"])
            if kind == ev.RUN_START and obj.get("run_id"):
                parent = parse_traceparent(data.get("traceparent"))
                run_id = str(obj["run_id"])
                trace = parent.trace_id if parent else trace_id(obj["session_id"], run_id)
                state.manifest.runs[run_id] = f"{trace:032x}"
            state.lines = number
            count += 1
        return count

    def _ship_chunk(
        self, path: Path, state: _State, chunk: bytes, tally: _Tally
    ) -> tuple[bool, FormatError | None]:
        """Validate and put one segment's worth of complete lines (the pass commits it).

        Returns:
            Whether a segment was put, and the damage that stopped the
            validation (the valid lines before it are put).
        """
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
            self._put_segment(path, manifest.session_id, first, last, chunk)
            manifest.last_segment = Segment(first, last, offset, len(chunk))
            manifest.size, manifest.records = offset + len(chunk), last + 1
            tally.segments += 1
            tally.records += count
            tally.bytes_uploaded += len(chunk)
        return count > 0, error

    def _put_segment(self, path: Path, sid: str, first: int, last: int, chunk: bytes) -> None:
        """Put a segment if no object has its name; one that has must hold the same bytes."""
        key = segment_key(sid, first, last)
        for _attempt in range(2):
            if self.backend.put_new(key, chunk):
                return
            try:
                there = self.backend.read(key)
            except FileNotFoundError:
                continue  # removed in between: put it again
            if there == chunk:
                return  # another shipper of this file (or a killed pass) put the same bytes
            if first < self._committed(sid):
                raise Conflict(key)  # this shipper is behind: another one committed it
            # Past the committed end and not the file's bytes: no commit uses it.
            self.backend.delete(key)
        raise StoreError(
            f"{self.store.where(key)}: holds other bytes for records {first} to {last} than "
            f"{path}; another copy of the session is shipped to this store (ship from one "
            "copy only) or the store was changed outside loopscribe"
        )

    def _committed(self, sid: str) -> int:
        """Records the store's manifest of ``sid`` commits now (read anew)."""
        try:
            return self.store.manifest(sid).records
        except SessionNotFoundError:
            return 0

    def _commit(self, path: Path, state: _State, running: bool, tally: _Tally) -> None:
        """Replace the manifest if no other shipper did since: from now on readers see it.

        Raises:
            Conflict: Another shipper committed first.
        """
        manifest = state.manifest
        fold = with_side(state.fold, read_side(side_path(path), DEFAULT_CODEC))
        summary = fold.summary(path, _status(state, running))
        manifest.summary = summary_to_json(summary)
        manifest.origin = {"host": self._host, "file": scrub(str(path.absolute()))}
        manifest.shipped_at = datetime.now(UTC).isoformat()
        data = manifest.to_bytes()
        state.version = self.backend.replace_if(
            manifest_key(manifest.session_id), data, state.version
        )
        state.uncommitted = False
        tally.bytes_uploaded += len(data)
        tally.shipped = True


def _sizes(entries: Any) -> dict[str, int]:
    """Object name to size, from a listing."""
    return {e.name: e.size for e in entries}


def _ahead(mark: dict[str, Any], manifest: Manifest) -> bool:
    """Whether a cursor mark (written by any shipper of this file) is past ``manifest``."""
    records = mark.get("records")
    return isinstance(records, int) and records > manifest.records


def _agreeing(segments: list[Segment], offsets: dict[int, int]) -> list[Segment]:
    """The start of ``segments`` that lies where the local file has those records."""
    out = []
    for seg in segments:
        if offsets.get(seg.first_seq) != seg.offset or offsets.get(seg.last_seq + 1) != seg.end:
            break
        out.append(seg)
    return out


def _artifact_dirs(session_id: str, manifest: Manifest) -> set[str]:
    """The store folders of a session's shipped artifacts (where their temporary files are)."""
    return {
        artifact_key(session_id, name).rsplit("/", 1)[0]
        for name in manifest.artifacts
        if "/" in name
    }


def _one_line(exc: BaseException, url: str) -> str:
    """An exception as one line without credentials (backend errors name their type)."""
    if isinstance(exc, (LoopscribeError, OSError)):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(scrub(text).split()) or type(exc).__name__


def _status(state: _State, running: bool) -> Status:
    """A shipped session's status as the shipper sees it (``running``: a writer holds it)."""
    if running:
        return "running"
    if state.fold.run_open:
        return "interrupted"
    return "failed" if state.fold.last_run_failed else "idle"
