"""``LoopscribeSessionStore``: the Claude Agent SDK's ``SessionStore``, as loopscribe sessions."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
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
from ..._reader import read
from ..._session import Observer
from ...importers._common import (
    Cursor,
    Destination,
    ImportReport,
    ImportStateError,
    has_reserved_key,
    parse_ts,
    strip_reserved,
)
from ...importers.claude_code import NAME
from ...otel import SpanBridge
from ._live import LiveClaudeCode

__all__ = ["SUMMARY_SUFFIX", "LoopscribeSessionStore"]

logger = logging.getLogger("loopscribe.adapters.claude_agent_sdk")

SUMMARY_SUFFIX = ".sdk-summary.json"
"""Beside each session file: its key and the SDK's folded summary (derived, rebuildable)."""
SOURCE = "claude-agent-sdk"
"""``session_start`` ``source`` of the sessions the store writes."""

_T = TypeVar("_T")
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
_MAX_NAME = 200


def file_name(project_key: str, session_id: str) -> str:
    """The session file's name: ``<session_id>+<project_key>.jsonl``, readable and safe.

    Characters other than letters, digits, ``-``, ``_`` and ``.`` are
    ``%``-escaped, and so is a leading ``-`` or ``.`` (a name a shell command
    would take for an option, or a hidden file). A name too long for the
    filesystem keeps the start of the session ID and a hash of the key.
    """

    def enc(text: str) -> str:
        return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in text)

    name = f"{enc(session_id)}+{enc(project_key)}"
    if len(name) > _MAX_NAME:
        digest = hashlib.sha256(f"{project_key}\0{session_id}".encode()).hexdigest()[:32]
        name = f"{enc(session_id)[:100]}+{digest}"
    if name[:1] in ("-", "."):
        name = f"%{ord(name[0]):02X}{name[1:]}"
    return name + ".jsonl"


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
        self.summary_path = self.path.with_name(self.path.name + SUMMARY_SUFFIX)
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

    # -- opening -------------------------------------------------------------------

    def open(self) -> tuple[Destination, LiveClaudeCode]:
        if self.dest is not None and self.mapping is not None:
            return self.dest, self.mapping
        observers: list[Observer] = list(self.store._observers)
        if self.store._span_processor is not None:
            observers.append(SpanBridge(self.store._span_processor, file_uri=self.path))
        self.report = ImportReport(SOURCE, Path(self.main_file), self.path)
        if not self.path.exists():
            self._attach(Destination(self.path, None, self._metadata, self.report,
                                     observers=observers, live=True))  # fmt: skip
        else:
            self._reopen(observers)
        assert self.dest is not None
        assert self.mapping is not None
        return self.dest, self.mapping

    def _attach(self, dest: Destination) -> None:
        self.dest = dest
        self.mapping = LiveClaudeCode(self.report, dest, self.main_file)
        self.seen = {}
        self.lines = {}
        self.summary = None

    def _reopen(self, observers: list[Observer]) -> None:
        """Continue a session written before: feed its entries again, matching its records.

        The mapping's state (open response, calls waiting for results, the open
        run) is rebuilt by replaying the stored entries, in the order they were
        written, against the records already there; nothing is written until
        the replay has passed the end of the file (a batch cut by a crash is
        completed then).
        """
        stored = list(_stored(self.path))
        session_id = _session_id(self.path)
        cursor = Cursor(importer=NAME, source=self.main_file, session_id=session_id, dest_seq=1)
        dest = Destination(
            self.path, cursor, self._metadata, self.report, observers=observers, live=True
        )
        self._attach(dest)
        try:
            dest.ensure_open()
            for data in stored:
                self._replay(data)
        except ImportStateError:
            # The records were written by another version of the mapping: go on
            # from the end of the file with a fresh mapping state.
            logger.warning(
                "%s: the stored entries do not map to the records there (another loopscribe "
                "version?); recording continues after them in a new run",
                self.path,
                exc_info=True,
            )
            dest.abort()
            count = _count_records(self.path)
            cursor = Cursor(
                importer=NAME, source=self.main_file, session_id=session_id, dest_seq=count
            )
            dest = Destination(
                self.path, cursor, self._metadata, self.report, observers=observers, live=True
            )
            self._attach(dest)
            dest.ensure_open()
            for data in stored:
                self._remember(data)
        if self.summary is None:
            self.summary = self._read_summary()

    def _replay(self, data: Mapping[str, Any]) -> None:
        dest, mapping = self.dest, self.mapping
        assert dest is not None
        assert mapping is not None
        subpath = data.get("subpath")
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
            self.summary = fold_session_summary(self.summary, self.key, [entry])
        self._map(mapping, subpath, mapped, line, invalid)
        if data.get("last"):
            self.in_batch = False
            self._end_batch(mapping)

    def _remember(self, data: Mapping[str, Any]) -> int:
        """Count a stored entry (or a deletion) of its subpath; return its line number."""
        subpath = data.get("subpath")
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
                "project_key": self.project_key,
                "session_id": self.session_id,
                **meta,
            },
        }

    # -- the store's operations ------------------------------------------------------

    def append(self, subpath: str | None, entries: list[Any]) -> None:
        dest, mapping = self.open()
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
        if not dest.opened and subpath is None and type(fresh[0]) is dict:
            _fill_meta(mapping.meta, fresh[0])
        self._guard(mapping.begin_batch, subpath)
        folded: list[Any] = []
        for index, entry in enumerate(fresh):
            data, mapped, invalid = _verbatim(subpath, entry)
            if index == len(fresh) - 1:
                data["last"] = True
            # The verbatim entry first: a crash after it leaves a record the next
            # open completes from it; write errors propagate (the store's contract).
            dest.annotate(ev.SOURCE_ENTRY, data, parse_ts(_get(entry, "timestamp")))
            uuid = _get(entry, "uuid")
            if isinstance(uuid, str):
                seen.add(uuid)
            line = self.lines[subpath] = self.lines.get(subpath, 0) + 1
            if subpath is None:
                folded.append(entry)
            self._map(mapping, subpath, mapped, line, invalid)
        self._end_batch(mapping)
        if folded:
            self.summary = fold_session_summary(self.summary, self.key, folded)
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
        if not self.path.exists():
            return
        dest, _ = self.open()
        if subpath not in self.lines:
            return
        data = {"subpath": subpath, "deleted": True}
        dest.annotate(ev.SOURCE_ENTRY, data, None)
        self._remember(data)
        self._save_summary()

    def load(self, subpath: str | None) -> list[SessionStoreEntry] | None:
        if not self.path.exists():
            return None
        found: list[Any] = []
        for data in _stored(self.path):
            if data.get("subpath") != subpath:
                continue
            if data.get("deleted"):
                found = []
            elif _is_entry(data):
                found.append(_decoded(data)[0])
        return cast(list[SessionStoreEntry], found) if found else None

    def subkeys(self) -> list[str]:
        if not self.path.exists():
            return []
        live: dict[str, bool] = {}
        for data in _stored(self.path):
            subpath = data.get("subpath")
            if isinstance(subpath, str):
                live[subpath] = not data.get("deleted")
        return sorted(k for k, v in live.items() if v)

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.give_up()
        self.flush_summary()
        dest = self.dest
        self.dest = None
        self.mapping = None
        if dest is not None and dest.opened:
            # A run still open stays open (no run_close): the SDK may resume the session.
            dest.close()

    def delete(self) -> None:
        try:
            self.close()
        finally:
            for path in (self.path, self.summary_path):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            self.summary = None
            self.listed = None
            if self.flush_timer is not None:
                self.flush_timer.cancel()
                self.flush_timer = None
            self.seen = {}
            self.lines = {}

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
            if session is not None and session._error is not None:
                raise
            self.store.mapping_errors += 1
            logger.exception("%s: mapping a Claude Code entry failed; entry kept", self.path)

    def _read_summary(self) -> SessionSummaryEntry | None:
        try:
            obj = orjson.loads(self.summary_path.read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            return None
        summary = obj.get("summary") if isinstance(obj, dict) else None
        return cast(SessionSummaryEntry, summary) if isinstance(summary, dict) else None

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
        """Write the sidecar now (on the session's worker)."""
        timer, self.flush_timer = self.flush_timer, None
        if timer is not None:
            timer.cancel()
        listed = self.listed
        if listed is None or not self.path.exists():
            return
        tmp = self.summary_path.with_name(self.summary_path.name + ".tmp")
        tmp.write_bytes(orjson.dumps(listed))
        os.replace(tmp, self.summary_path)


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
    ``source_entry`` record, so :meth:`load` returns exactly what was
    appended; ``uuid`` is the idempotency key (a retried batch is not recorded
    twice). All file work runs on worker threads, one job at a time per
    session, in call order; the event loop never waits on a write or fsync.

    Args:
        directory: The folder of session files (created if missing).
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

    Call :meth:`close` (or use ``with`` / ``async with``) when done: it
    fsyncs and releases each session file, leaving a turn in progress open
    for a later process to continue.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        observers: Iterable[Observer] = (),
        span_processor: SpanProcessor | None = None,
        settle_seconds: float = 2.0,
        summary_seconds: float = 1.0,
        max_workers: int = 4,
    ) -> None:
        self.directory = Path(directory).expanduser().absolute()
        self.directory.mkdir(parents=True, exist_ok=True)
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

        Raises:
            LoopscribeError: The session file cannot be written (disk full,
                damaged file); the SDK retries and then reports it.
            OSError: Likewise.
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
        """The session file of ``(project_key, session_id)``."""
        return self.directory / file_name(project_key, session_id)

    def report(self, project_key: str, session_id: str) -> ImportReport | None:
        """What the mapping did for a session opened by this store (counts, usage)."""
        with self._lock:
            session = self._sessions.get((project_key, session_id))
        return None if session is None or session.dest is None else session.report

    def close(self) -> None:
        """Fsync and release every session file; later calls reopen them. Idempotent."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        errors: list[BaseException] = []
        for future in [s.serial.submit(s.close) for s in sessions]:
            try:
                future.result()
            except Exception as exc:
                errors.append(exc)
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
        project_key, session_id = key["project_key"], key["session_id"]
        subpath = key.get("subpath") or None
        with self._lock:
            session = self._sessions.get((project_key, session_id))
            if session is None:
                session = self._sessions[(project_key, session_id)] = _Session(
                    self, project_key, session_id
                )
        return session, subpath

    def _sidecars(self, project_key: str) -> list[dict[str, Any]]:
        """The listing of a project: this store's own sessions from memory, others' sidecars."""
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
                try:
                    obj = orjson.loads(Path(entry.path).read_bytes())
                except (FileNotFoundError, orjson.JSONDecodeError):
                    continue
                if isinstance(obj, dict):
                    found.append(obj)
        found += mine.values()
        return [
            obj
            for obj in found
            if obj.get("project_key") == project_key and isinstance(obj.get("summary"), dict)
        ]


# -- stored entries --------------------------------------------------------------------------


def _is_entry(data: Mapping[str, Any]) -> bool:
    return "entry" in data or "entry_json" in data


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


def _verbatim(subpath: str | None, entry: Any) -> tuple[dict[str, Any], Any, str | None]:
    """The ``source_entry`` data of an entry, what the mapping gets, and its text if unencodable.

    An entry is kept as a JSON object when the session codec can write it as
    it is. One that uses the codec's reserved key ``$ls``, or holds what
    orjson cannot encode (an integer beyond 64 bits, a lone surrogate), is
    kept as its JSON text (``entry_json``), which loads back deep-equal.
    """
    try:
        raw = orjson.dumps(entry)
    except TypeError:
        text = json.dumps(entry)
        return {"subpath": subpath, "entry_json": text}, None, text
    if has_reserved_key(raw):
        return {"subpath": subpath, "entry_json": raw.decode()}, strip_reserved(entry), None
    return {"subpath": subpath, "entry": entry}, entry, None


def _decoded(data: Mapping[str, Any]) -> tuple[Any, Any, str | None]:
    """The inverse of :func:`_verbatim`: ``(entry, mapped, invalid)``."""
    if "entry" in data:
        entry = data["entry"]
        return entry, entry, None
    text = data.get("entry_json")
    if not isinstance(text, str):
        return None, None, ""
    entry = json.loads(text)
    try:
        orjson.dumps(entry)
    except TypeError:
        return entry, None, text
    return entry, strip_reserved(entry), None


def _stored(path: Path) -> Iterable[Mapping[str, Any]]:
    for record in read(path, decode=False):
        if record.type == ev.SOURCE_ENTRY:
            yield record.data


def _session_id(path: Path) -> str:
    with open(path, "rb") as stream:
        first = orjson.loads(stream.readline())
    return str(first["session_id"])


def _count_records(path: Path) -> int:
    count = 0
    for _ in read(path, decode=False):
        count += 1
    return count
