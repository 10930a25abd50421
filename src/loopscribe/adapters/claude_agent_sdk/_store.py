"""``LoopscribeSessionStore``: the Claude Agent SDK's ``SessionStore``, as loopscribe sessions."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

from claude_agent_sdk.types import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)
from opentelemetry.sdk.trace import SpanProcessor

from ..._errors import WriteError
from ..._home import sessions_home
from ..._hostkit import Guard
from ..._redact import LineRedactor
from ..._session import Observer
from ...importers._batch import SyncBatch
from ...importers._destination import import_redactor
from ...importers._report import ImportReport
from . import _values
from ._folder import (
    SUMMARY_SUFFIX,
    _listing,
    _locate,
    _private_dirs,
    _read_listing,
)
from ._names import check_key
from ._serial import _wait
from ._session_file import SessionReplacedError, _Session

__all__ = ["SUMMARY_SUFFIX", "LoopscribeSessionStore", "SessionReplacedError"]


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
        self.guard = Guard("Claude Agent SDK store")
        """Mapping failures: counted, the first logged at ERROR, later ones at DEBUG."""

    @property
    def mapping_errors(self) -> int:
        """Entries the mapping failed on (logged; the verbatim entry is kept)."""
        return self.guard.errors

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
