"""``LoopscribeSessionStore``: the Claude Agent SDK's ``SessionStore``, as loopscribe sessions."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import re
import stat
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar, cast

import orjson
from claude_agent_sdk import fold_session_summary
from claude_agent_sdk.types import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)
from opentelemetry.sdk.trace import SpanProcessor

from ... import events as ev
from ..._codec import snapshot_error
from ..._errors import FormatError, LoopscribeError, SessionLockedError, WriteError
from ..._files import owing_syncs
from ..._home import sessions_home
from ..._locks import fcntl
from ..._reader import read
from ..._redact import LineRedactor
from ..._safeopen import open_session_file
from ..._session import Observer
from ...importers._batch import SyncBatch
from ...importers._common import (
    MAX_LINE_DEPTH,
    Cursor,
    Destination,
    ImportReport,
    ImportStateError,
    has_reserved_key,
    import_redactor,
    parse_ts,
    too_deep,
)
from ...importers.claude_code import NAME
from ...otel import SpanBridge
from . import _values
from ._live import LiveClaudeCode
from ._names import check_key, file_name, hashed_name, legacy_name

__all__ = ["SUMMARY_SUFFIX", "LoopscribeSessionStore", "SessionReplacedError"]

logger = logging.getLogger("loopscribe.adapters.claude_agent_sdk")

SUMMARY_SUFFIX = ".sdk-summary.json"
"""Beside each session file: its key and the SDK's folded summary (derived, rebuildable)."""
SOURCE = "claude-agent-sdk"
"""``session_start`` ``source`` of the sessions the store writes."""
NAMING = 2
"""``claude_agent_sdk.naming`` of a session file named by ``_names`` (older files have none)."""

_T = TypeVar("_T")
_HEAD_BYTES = 1 << 20
"""Enough of a session file to hold its ``session_start`` line."""
_MAX_SUMMARY_BYTES = 16 << 20
"""A summary file larger than this is not one the store wrote: it is skipped."""
_WRAPPING = 254 - MAX_LINE_DEPTH
"""orjson writes 254 levels: an entry in this many lists encodes iff it nests at most
``MAX_LINE_DEPTH`` levels."""


class SessionReplacedError(LoopscribeError, RuntimeError):
    """Another process deleted or rewrote a session file while this one opened it."""


class _Serial:
    """Runs one session's work on a shared pool, one job at a time, in submission order."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._queue: deque[tuple[Callable[[], Any], Future[Any]]] = deque()
        self._lock = threading.Lock()
        self._running = False

    def submit(self, job: Callable[[], _T]) -> Future[_T]:
        future: Future[_T] = Future()
        with self._lock:
            self._queue.append((job, future))
            if not self._running:
                self._running = True
                self._pool.submit(self._drain)
        return future

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                job, future = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as exc:
                future.set_exception(exc)


async def _wait(future: Future[_T]) -> _T:
    """Await a job without blocking the event loop; cancelling the wait never cancels the job.

    An ``append`` the SDK gave up on (its timeout) still lands, in order, and
    a retry of the same batch is then recognised by its ``uuid``\\ s.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # another event loop (trio through anyio)
        import anyio

        return await anyio.to_thread.run_sync(future.result)
    return await asyncio.shield(asyncio.wrap_future(future, loop=loop))


class _Session:
    """One ``(project_key, session_id)``: its file, writer, mapping and what it received.

    Every method runs on the session's serial worker, never on the event loop.
    """

    def __init__(self, store: LoopscribeSessionStore, project_key: str, session_id: str) -> None:
        self.store = store
        self.project_key = project_key
        self.session_id = session_id
        self.path = store.directory / file_name(project_key, session_id)
        """The session file; found again (:meth:`locate`) each time it is opened."""
        self.serial = _Serial(store._pool)
        self.dest: Destination | None = None
        self.mapping: LiveClaudeCode | None = None
        self.report = ImportReport(SOURCE, Path(self.main_file), self.path)
        self.seen: dict[str | None, set[str]] = {}
        self.lines: dict[str | None, int] = {}
        self.summary: SessionSummaryEntry | None = None
        self.in_batch = False
        """Replaying: the stored entries since the last one that ended a batch."""
        self.appends = 0
        """Appends so far: a give-up timer fires only if none came after it was set."""
        self.timer: threading.Timer | None = None
        self.listed: dict[str, Any] | None = None
        """What ``list_sessions`` shows of this session, newer than its sidecar while dirty."""
        self.flush_timer: threading.Timer | None = None

    @property
    def main_file(self) -> str:
        """Where Claude Code keeps this transcript, under ``~/.claude/projects``."""
        return f"{self.project_key}/{self.session_id}.jsonl"

    @property
    def key(self) -> SessionKey:
        return {"project_key": self.project_key, "session_id": self.session_id}

    @property
    def summary_path(self) -> Path:
        return self.path.with_name(self.path.name + SUMMARY_SUFFIX)

    def locate(self) -> Path:
        """The session file (while it is open for writing, the one held)."""
        if self.dest is None:
            self.path = _locate(self.store.directory, self.project_key, self.session_id)
        return self.path

    # -- opening -------------------------------------------------------------------

    def open(self, first: Any = None) -> tuple[Destination, LiveClaudeCode]:
        """Take the writer lock on the session file, creating it or continuing it.

        ``first`` is the first main-transcript entry of a new file, for its
        metadata. If anything fails, nothing of the attempt is kept: the next
        call starts again from the file, so an append never goes on from a
        state another process has made stale.
        """
        if self.dest is not None and self.mapping is not None:
            return self.dest, self.mapping
        try:
            self._open(first)
        except BaseException:
            self._discard()
            raise
        assert self.dest is not None
        assert self.mapping is not None
        return self.dest, self.mapping

    def _open(self, first: Any) -> None:
        path = self.locate()
        observers: list[Observer] = list(self.store._observers)
        if self.store._span_processor is not None:
            observers.append(SpanBridge(self.store._span_processor, file_uri=path))
        self.report = ImportReport(SOURCE, Path(self.main_file), path)
        # Under the folder's lock, "missing" stays true until the file is created and
        # locked: another store process never finds it created but not yet locked.
        with _creating(self.store.directory):
            if not os.path.lexists(path):
                dest = self._destination(None, observers)
                if isinstance(first, dict):
                    assert self.mapping is not None
                    _fill_meta(self.mapping.meta, first)
                dest.ensure_open()
                return
        self._reopen(observers)

    def _destination(self, cursor: Cursor | None, observers: list[Observer]) -> Destination:
        dest = Destination(
            self.path,
            cursor,
            self._metadata,
            self.report,
            observers=observers,
            live=True,
            redact=self.store._redact,
        )
        self.dest = dest
        self.mapping = LiveClaudeCode(self.report, dest, self.main_file)
        self.seen = {}
        self.lines = {}
        self.summary = None
        self.in_batch = False
        return dest

    def _discard(self) -> None:
        """Forget a failed open: release what it took, keep no state built from it."""
        dest, self.dest, self.mapping = self.dest, None, None
        self.seen = {}
        self.lines = {}
        self.summary = None
        self.in_batch = False
        if dest is not None:
            dest.abort()

    def _reopen(self, observers: list[Observer]) -> None:
        """Continue a session written before: feed its entries again, matching its records.

        The writer lock is taken first and the file read after it, so the
        entries replayed are all there are. The mapping's state (open response,
        calls waiting for results, the open run) is rebuilt by replaying the
        stored entries, in the order they were written, against the records
        already there; nothing is written until the replay has passed the end
        of the file (a batch cut by a crash is completed then).
        """
        session_id = _session_id(self.path)
        cursor = Cursor(importer=NAME, source=self.main_file, session_id=session_id, dest_seq=1)
        dest = self._destination(cursor, observers)
        self._lock(dest)
        stored = list(_stored(self.path))
        try:
            for data in stored:
                self._replay(data)
            if dest.unmatched:
                raise ImportStateError(
                    f"{self.path}: {dest.unmatched} records after the stored entries' records"
                )
        except ImportStateError:
            # The records were written by another version of the mapping: go on
            # from the end of the file with a fresh mapping state.
            logger.warning(
                "%s: the stored entries do not map to the records there (another loopscribe "
                "version?); recording continues after them in a new run",
                self.path,
                exc_info=True,
            )
            count = dest.session.next_seq if dest.session is not None else 0
            dest.abort()
            cursor.dest_seq = count
            dest = self._destination(cursor, observers)
            self._lock(dest)
            if dest.unmatched:
                # Between the two locks, another process appended: what was counted is stale.
                raise SessionReplacedError(
                    f"{self.path}: another process appended while this one reopened it; "
                    "append again"
                ) from None
            for data in _stored(self.path):
                self._remember(data)
        if self.summary is None:
            self.summary = self._read_summary()

    def _lock(self, dest: Destination) -> None:
        """Open the file under the writer lock (records after the cursor are matched, not written).

        Raises:
            SessionLockedError: Another process holds the file.
            SessionReplacedError: The file is not the one the cursor was made from.
        """
        try:
            dest.ensure_open()
        except ImportStateError as exc:
            raise SessionReplacedError(
                f"{self.path}: replaced by another process while this one opened it ({exc}); "
                "append again"
            ) from exc

    def _replay(self, data: Mapping[str, Any]) -> None:
        dest, mapping = self.dest, self.mapping
        assert dest is not None
        assert mapping is not None
        subpath = _subpath_of(data)
        if _is_entry(data) and not self.in_batch:
            # As append does: the batch begins before its first entry is written.
            self.in_batch = True
            self._guard(mapping.begin_batch, subpath)
        dest.annotate(ev.SOURCE_ENTRY, data, None)
        if data.get("deleted"):
            self._remember(data)
            return
        if data.get("resume"):
            self._guard(mapping.give_up)
            return
        line = self._remember(data)
        entry, mapped, invalid = _decoded(data)
        if subpath is None:
            self._fold([entry])
        self._map(mapping, subpath, mapped, line, invalid)
        if data.get("last"):
            self.in_batch = False
            self._end_batch(mapping)

    def _remember(self, data: Mapping[str, Any]) -> int:
        """Count a stored entry (or a deletion) of its subpath; return its line number."""
        subpath = _subpath_of(data)
        if data.get("deleted"):
            self.seen.pop(subpath, None)
            self.lines.pop(subpath, None)
            return 0
        if not _is_entry(data):
            return 0
        entry, _, _ = _decoded(data)
        uuid = entry.get("uuid") if type(entry) is dict else None
        if isinstance(uuid, str):
            self.seen.setdefault(subpath, set()).add(uuid)
        line = self.lines[subpath] = self.lines.get(subpath, 0) + 1
        return line

    def _metadata(self) -> dict[str, Any]:
        meta = self.mapping.meta if self.mapping is not None else {}
        return {
            "source": SOURCE,
            "claude_agent_sdk": {
                **meta,
                "project_key": self.project_key,
                "session_id": self.session_id,
                "naming": NAMING,
            },
        }

    # -- the store's operations ------------------------------------------------------

    def append(self, subpath: str | None, entries: list[Any]) -> None:
        dest, mapping = self.open(entries[0] if subpath is None else None)
        seen = self.seen.setdefault(subpath, set())
        fresh: list[Any] = []
        batch: set[str] = set()
        for entry in entries:
            uuid = entry.get("uuid") if type(entry) is dict else None
            if isinstance(uuid, str):
                if uuid in seen or uuid in batch:
                    self.store.duplicates += 1
                    continue
                batch.add(uuid)
            fresh.append(entry)
        if not fresh:
            return
        self._guard(mapping.begin_batch, subpath)
        folded: list[Any] = []
        for index, entry in enumerate(fresh):
            data, mapped, invalid = _verbatim(subpath, entry)
            if index == len(fresh) - 1:
                data["last"] = True
            # The verbatim entry first: a crash after it leaves a record the next
            # open completes from it; write errors propagate (the store's contract).
            dest.annotate(ev.SOURCE_ENTRY, data, _timestamp(entry))
            uuid = _get(entry, "uuid")
            if isinstance(uuid, str):
                seen.add(uuid)
            line = self.lines[subpath] = self.lines.get(subpath, 0) + 1
            if subpath is None:
                folded.append(entry)
            self._map(mapping, subpath, mapped, line, invalid)
        self._end_batch(mapping)
        if folded:
            self._fold(folded)
        self._save_summary()
        self.appends += 1
        if mapping.pending:
            self._arm(self.appends)

    def _arm(self, appends: int) -> None:
        """Give up waiting for subagents' lines if no append comes within ``settle_seconds``."""
        if self.timer is not None:
            self.timer.cancel()
        self.timer = threading.Timer(
            self.store.settle_seconds, lambda: self.serial.submit(lambda: self._settle(appends))
        )
        self.timer.daemon = True
        self.timer.start()

    def _settle(self, appends: int) -> None:
        if appends == self.appends:
            try:
                self.give_up()
            except Exception:
                logger.exception("%s: recording what waited for subagents failed", self.path)

    def give_up(self) -> None:
        """Map the main entries that wait for subagents now, and record that it was done.

        The ``resume`` record makes a replay of the file give up at the same
        point, so a reopened store rebuilds exactly this state.
        """
        if self.dest is None or self.mapping is None or not self.mapping.pending:
            return
        self.dest.annotate(ev.SOURCE_ENTRY, {"subpath": None, "resume": True}, None)
        self._guard(self.mapping.give_up)

    def delete_subpath(self, subpath: str) -> None:
        if not os.path.lexists(self.locate()):
            return
        dest, _ = self.open()
        if subpath not in self.lines:
            return
        data = {"subpath": _values.lower(subpath), "deleted": True}
        dest.annotate(ev.SOURCE_ENTRY, data, None)
        self._remember(data)
        self._save_summary()

    def load(self, subpath: str | None) -> list[SessionStoreEntry] | None:
        path = self.locate()
        if not os.path.lexists(path):
            return None
        found: list[Any] = []
        try:
            for data in _stored(path):
                if _subpath_of(data) != subpath:
                    continue
                if data.get("deleted"):
                    found = []
                elif _is_entry(data):
                    found.append(_decoded(data)[0])
        except FileNotFoundError:
            return None  # deleted by another process meanwhile
        return cast(list[SessionStoreEntry], found) if found else None

    def subkeys(self) -> list[str]:
        path = self.locate()
        if not os.path.lexists(path):
            return []
        live: dict[str, bool] = {}
        for data in _stored(path):
            subpath = _subpath_of(data)
            if isinstance(subpath, str):
                live[subpath] = not data.get("deleted")
        return sorted(k for k, v in live.items() if v)

    def close(self, batch: SyncBatch | None = None) -> None:
        """Map what waits, write the summary, then fsync and release the file, whatever failed.

        With ``batch`` the fsyncs are owed to it instead (the store's
        :meth:`LoopscribeSessionStore.close` pays them together): the file's
        lock stays held, through a duplicate descriptor, until it is paid.
        """
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        try:
            self.give_up()
            self.flush_summary()
        finally:
            dest, self.dest, self.mapping = self.dest, None, None
            if dest is not None and dest.opened:
                # A run still open stays open (no run_close): the SDK may resume the session.
                with owing_syncs(batch) if batch is not None else contextlib.nullcontext():
                    dest.close()

    def delete(self) -> None:
        try:
            self.close()
        finally:
            self.summary = None
            self.listed = None
            if self.flush_timer is not None:
                self.flush_timer.cancel()
                self.flush_timer = None
            self.seen = {}
            self.lines = {}
            _remove(self.locate(), self.summary_path)

    # -- helpers -----------------------------------------------------------------------

    def _map(
        self,
        mapping: LiveClaudeCode,
        subpath: str | None,
        obj: Any,
        line: int,
        invalid: str | None,
    ) -> None:
        if subpath is None:
            self._guard(mapping.feed_main, obj, line, invalid)
        else:
            self._guard(mapping.feed_agent, subpath, obj, line, invalid)

    def _end_batch(self, mapping: LiveClaudeCode) -> None:
        self._guard(mapping.end_batch)

    def _guard(self, step: Callable[..., None], *args: Any) -> None:
        """Run a mapping step; a failure is logged and counted, never raised into the SDK.

        The verbatim entry is stored already, so ``load`` and a later import of
        the file keep it; the write errors of the file itself still propagate.
        """
        dest = self.dest
        try:
            step(*args)
        except Exception:
            session = dest.session if dest is not None else None
            if session is not None and session.error is not None:
                raise
            self.store.mapping_errors += 1
            logger.exception("%s: mapping a Claude Code entry failed; entry kept", self.path)

    def _fold(self, entries: list[Any]) -> None:
        """Fold main-transcript entries into the SDK's summary; one it cannot take is left out.

        The summary is derived data: an entry the SDK's fold fails on (not an
        object, a date out of range) is logged, not raised.
        """
        objects = cast(list[SessionStoreEntry], [e for e in entries if isinstance(e, dict)])
        try:
            self.summary = fold_session_summary(self.summary, self.key, objects)
        except Exception:
            for entry in objects:  # the fold copies its input: a failed one changed nothing
                try:
                    self.summary = fold_session_summary(self.summary, self.key, [entry])
                except Exception:
                    logger.warning(
                        "%s: an entry left out of the session's summary", self.path, exc_info=True
                    )

    def _read_summary(self) -> SessionSummaryEntry | None:
        obj = _read_listing(self.summary_path)
        return None if obj is None else cast(SessionSummaryEntry, obj["summary"])

    def _save_summary(self) -> None:
        """Stamp the summary with the file's mtime; the sidecar follows within a second.

        ``list_sessions`` and ``list_session_summaries`` of this store read
        :attr:`listed`; the sidecar, replaced atomically (a rename costs
        milliseconds on some filesystems, so not once per append), serves other
        processes, for which a summary older than the file only means the SDK
        loads that session instead.
        """
        mtime_ms = os.stat(self.path).st_mtime_ns // 1_000_000
        if self.summary is not None:
            self.summary = {**self.summary, "mtime": mtime_ms}
        self.listed = {
            "project_key": self.project_key,
            "session_id": self.session_id,
            "mtime": mtime_ms,
            "summary": self.summary,
        }
        if self.flush_timer is None:
            self.flush_timer = threading.Timer(
                self.store.summary_seconds, lambda: self.serial.submit(self.flush_summary)
            )
            self.flush_timer.daemon = True
            self.flush_timer.start()

    def flush_summary(self) -> None:
        """Write the sidecar now (on the session's worker), while the file is held."""
        timer, self.flush_timer = self.flush_timer, None
        if timer is not None:
            timer.cancel()
        listed = self.listed
        if listed is None or self.dest is None:
            return  # a timer that fired after close, which wrote it
        _replace_private(self.summary_path, self.store._summary_bytes(listed))


class LoopscribeSessionStore:
    """A Claude Agent SDK ``SessionStore`` that records each session as a loopscribe session.

    Pass it as ``ClaudeAgentOptions(session_store=...)``. Each
    ``(project_key, session_id)`` is one session file in ``directory`` (a
    workspace: ``loopscribe ls``, ``show`` and ``serve`` read it), with the
    records an import of the same Claude Code transcript writes, mapped as
    the entries arrive: runs per turn, model calls with usage counted once,
    tool calls paired with their results across batches, subagents nested
    under the tool call that started them, compaction. Observers (a
    ``live.Bus``) and the span bridge (``span_processor``) see the records
    while the agent works.

    Every entry is also kept verbatim in the same file, as a session-level
    ``source_entry`` record, so :meth:`load` returns what was appended (what
    JSON cannot hold is tagged; see ``_values`` for the few values that come
    back otherwise); ``uuid`` is the idempotency key (a retried batch is not
    recorded twice). An ``append`` either returns with its entries written
    to the file, or raises: a session another process holds raises
    ``SessionLockedError``, and the next ``append`` reads the file again. All
    file work runs on worker threads, one job at a time per session, in call
    order; the event loop never waits on a write or fsync.

    Args:
        directory: The folder of session files (created if missing, with its
            missing parents, readable by the owner only; the files in it are
            too). Default: ``claude-agent-sdk`` in the sessions home
            (:func:`loopscribe.sessions_home`), where ``loopscribe ls`` looks.
        observers: Called with every record of every session, on the worker
            thread that writes it (``loopscribe.live.Bus`` is thread-safe).
        span_processor: Receives the spans of every session through a
            ``SpanBridge`` per session file (normally
            ``loopscribe.otel.default_processor``).
        settle_seconds: How long the main transcript's entries after a
            subagent's tool result wait for that subagent's lines (the SDK
            sends them in the batches right after); then, or at the next
            batch of the main transcript, or at :meth:`close`, they are
            mapped without them.
        summary_seconds: How soon the summary beside a session file follows
            its appends (for other processes listing the folder).
        max_workers: Worker threads shared by all sessions.
        redact: Scrubs each record line before it is written, as
            ``Session.create(redact=...)`` does, and the summary file beside
            each session; ``load`` then returns the entries as scrubbed. As
            for imports, ``True`` (the default) is ``Redactor.default()``
            (the common token shapes and the values of credential-named
            environment variables), ``False`` or ``None`` turns it off, and a
            callable (a ``loopscribe.Redactor``) is used as it is.

    Call :meth:`close` (or use ``with`` / ``async with``) when done: it
    fsyncs and releases each session file, leaving a turn in progress open
    for a later process to continue.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        observers: Iterable[Observer] = (),
        span_processor: SpanProcessor | None = None,
        settle_seconds: float = 2.0,
        summary_seconds: float = 1.0,
        max_workers: int = 4,
        redact: LineRedactor | bool | None = True,
    ) -> None:
        if directory is None:
            directory = sessions_home() / "claude-agent-sdk"
        self.directory = Path(directory).expanduser().absolute()
        _private_dirs(self.directory)
        self._redact = import_redactor(redact)
        self._observers = tuple(observers)
        self._span_processor = span_processor
        self.settle_seconds = settle_seconds
        self.summary_seconds = summary_seconds
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="loopscribe-store")
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.duplicates = 0
        """Entries not recorded again because their ``uuid`` was (retried batches)."""
        self.mapping_errors = 0
        """Entries the mapping failed on (logged; the verbatim entry is kept)."""

    # -- the SessionStore protocol -------------------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Record a batch of transcript entries (see the class docs).

        Any value in an entry is recorded; only the file's own failures raise.

        Raises:
            SessionLockedError: Another process is writing this session; the
                SDK retries, and a later append continues from the file.
            LoopscribeError: The session file cannot be written (disk full,
                damaged file); the SDK retries and then reports it.
            OSError: Likewise.
            SessionKeyError: ``key`` is not a ``SessionKey`` of strings.
        """
        if not entries:
            return
        session, subpath = self._session(key)
        batch = list(entries)
        await _wait(session.serial.submit(lambda: session.append(subpath, batch)))

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The entries appended under ``key``, deep-equal and in order; ``None`` if none."""
        session, subpath = self._session(key)
        return await _wait(session.serial.submit(lambda: session.load(subpath)))

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The sessions of ``project_key`` with a main transcript, and their mtimes (epoch ms)."""
        found = await _wait(self._pool.submit(self._sidecars, project_key))
        return [{"session_id": s["session_id"], "mtime": s["mtime"]} for s in found]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The SDK's folded summaries of ``project_key``'s sessions, kept beside each file."""
        found = await _wait(self._pool.submit(self._sidecars, project_key))
        return [cast(SessionSummaryEntry, s["summary"]) for s in found]

    async def delete(self, key: SessionKey) -> None:
        """Delete a session file (with all its subagents), or forget one ``subpath``.

        A subagent's entries are forgotten by an appended record (the file
        stays append-only): ``load`` and ``list_subkeys`` no longer return
        them, while the records mapped from them stay in the timeline.

        Raises:
            SessionLockedError: Another process is writing the session: it
                is not deleted under it.
        """
        session, subpath = self._session(key)
        if subpath is None:
            # The _Session stays: an append after this creates the file anew through it.
            await _wait(session.serial.submit(session.delete))
        else:
            await _wait(session.serial.submit(lambda: session.delete_subpath(subpath)))

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths (subagent transcripts) with entries under a session."""
        session, _ = self._session(cast(SessionKey, key))
        return await _wait(session.serial.submit(session.subkeys))

    # -- loopscribe's own ---------------------------------------------------------------

    def path(self, project_key: str, session_id: str) -> Path:
        """The session file of ``(project_key, session_id)`` (where it is, or will be, created)."""
        with self._lock:
            session = self._sessions.get((project_key, session_id))
        if session is not None and session.dest is not None:
            return session.path
        return _locate(self.directory, project_key, session_id)

    def report(self, project_key: str, session_id: str) -> ImportReport | None:
        """What the mapping did for a session opened by this store (counts, usage)."""
        with self._lock:
            session = self._sessions.get((project_key, session_id))
        return None if session is None or session.dest is None else session.report

    def close(self) -> None:
        """Fsync and release every session file; later calls reopen them. Idempotent.

        Each session writes its last records first; then every file is
        fsynced once (closing a file that holds a run left open used to
        fsync it twice), all together, and released only after its fsync.
        """
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        batch = SyncBatch()
        errors: list[BaseException] = []
        try:
            for future in [s.serial.submit(partial(s.close, batch)) for s in sessions]:
                try:
                    future.result()
                except Exception as exc:
                    errors.append(exc)
        finally:
            for path, failure in batch.pay().items():
                errors.append(WriteError(failure.errno, f"{path}: fsync failed: {failure}"))
        if errors:
            raise errors[0]

    async def aclose(self) -> None:
        """:meth:`close` on a worker thread."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<LoopscribeSessionStore {str(self.directory)!r}>"

    # -- internals ----------------------------------------------------------------------

    def _session(self, key: SessionKey) -> tuple[_Session, str | None]:
        project_key, session_id, subpath = check_key(key)
        with self._lock:
            session = self._sessions.get((project_key, session_id))
            if session is None:
                session = self._sessions[(project_key, session_id)] = _Session(
                    self, project_key, session_id
                )
        return session, subpath

    def _summary_bytes(self, listed: Mapping[str, Any]) -> bytes:
        """A summary file's content: any value kept (see ``_values``), then scrubbed."""
        raw = _values.dumps(listed).encode() + b"\n"
        return raw if self._redact is None else self._redact(raw)

    def _sidecars(self, project_key: str) -> list[dict[str, Any]]:
        """The listing of a project: this store's own sessions from memory, others' sidecars.

        The sessions in memory are listed as their summary file will hold
        them (scrubbed by ``redact``), so every process lists the same.
        """
        with self._lock:
            mine = {
                s.path.name + SUMMARY_SUFFIX: s.listed
                for s in self._sessions.values()
                if s.listed is not None
            }
        found: list[dict[str, Any]] = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if not entry.name.endswith(SUMMARY_SUFFIX) or entry.name in mine:
                    continue
                obj = _read_listing(Path(entry.path))
                if obj is not None:
                    found.append(obj)
        for listed in mine.values():
            obj = listed if self._redact is None else _listing(self._summary_bytes(listed))
            if obj is not None:
                found.append(obj)
        return [obj for obj in found if obj["project_key"] == project_key]


# -- files ---------------------------------------------------------------------------------


def _locate(directory: Path, project_key: str, session_id: str) -> Path:
    """The file of a key: its own name, or the name an older store gave it (see ``_names``).

    A file at the key's plain name that an older store wrote for another key
    (its hashed names were plain names of other keys) is left alone: the key
    then lives at its hashed name, which no other key and no older store
    ever uses.
    """
    path = directory / file_name(project_key, session_id)
    hashed = directory / hashed_name(project_key, session_id)
    if hashed != path and os.path.lexists(hashed):
        return hashed
    owned = _holds(path, project_key)
    if owned:
        return path
    if owned is False:
        return hashed
    older = legacy_name(project_key, session_id)
    if older is not None and older != path.name and _holds(directory / older, project_key):
        return directory / older
    return path


def _holds(path: Path, project_key: str) -> bool | None:
    """Whether ``path`` is this key's file (``None``: there is no file).

    A file the store names itself says so (``naming``); an older store's
    file is the key's when it names the key's project (its ``session_id``
    may be the first entry's ``sessionId``), since older plain names were
    distinct and an older hashed name is the plain name only of a key whose
    project is that hash.
    """
    try:
        with open_session_file(path, buffering=0) as stream:
            first = stream.readline(_HEAD_BYTES)
    except FileNotFoundError:
        return None
    except FormatError:
        return False
    if not first.endswith(b"\n"):
        return True  # being created, under the folder's lock, by a store naming it so
    try:
        meta = orjson.loads(first)["data"]["metadata"]["claude_agent_sdk"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return False
    if not isinstance(meta, dict):
        return False
    return meta.get("naming") == NAMING or meta.get("project_key") == project_key


@contextlib.contextmanager
def _creating(directory: Path) -> Iterator[None]:
    """Hold the folder's lock: store processes create session files one at a time.

    Without it, a second process could find a file another has just created
    but not yet locked, and take it for one a failed import left behind.
    """
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove(path: Path, summary: Path) -> None:
    """Delete a session file and its summary, under its writer lock (never one in use)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SessionLockedError(
                    errno.EWOULDBLOCK,
                    f"{path}: another process is writing this session; it is not deleted. "
                    "Delete it again once that process has closed its store",
                ) from None
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with contextlib.suppress(FileNotFoundError):
            summary.unlink()
    finally:
        if fd is not None:
            os.close(fd)


def _private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents as 0700 (existing ones are left as they are)."""
    missing: list[Path] = []
    while not directory.is_dir():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            if not folder.is_dir():  # a file in the way: say so, as mkdir -p does
                raise


def _replace_private(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically by a new 0600 file holding ``data``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _read_listing(path: Path) -> dict[str, Any] | None:
    """A summary file's listing, or ``None`` for anything that is not a summary file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_SUMMARY_BYTES:
            return None
        raw = os.pread(fd, _MAX_SUMMARY_BYTES + 1, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _listing(raw)


def _listing(raw: bytes) -> dict[str, Any] | None:
    """Check a summary file's content: a key of strings, an mtime and the SDK's summary."""
    try:
        obj = _values.loads(raw)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    summary = obj.get("summary")
    if (
        isinstance(obj.get("project_key"), str)
        and isinstance(obj.get("session_id"), str)
        and type(obj.get("mtime")) is int
        and isinstance(summary, dict)
        and isinstance(summary.get("session_id"), str)
        and type(summary.get("mtime")) is int
        and isinstance(summary.get("data"), dict)
    ):
        return obj
    return None


# -- stored entries --------------------------------------------------------------------------


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
