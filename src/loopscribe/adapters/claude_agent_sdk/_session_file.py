"""One key's session file: opened or continued by replaying its entries, appended, closed."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from claude_agent_sdk import fold_session_summary
from claude_agent_sdk.types import (
    SessionKey,
    SessionStoreEntry,
    SessionSummaryEntry,
)

from ... import events as ev
from ..._errors import LoopscribeError
from ..._files import owing_syncs
from ..._session import Observer
from ...importers._batch import SyncBatch
from ...importers._cursor import Cursor, ImportStateError
from ...importers._destination import Destination
from ...importers._report import ImportReport
from ...importers.claude_code import NAME
from ...otel import SpanBridge
from . import _values
from ._entries import (
    _decoded,
    _fill_meta,
    _get,
    _is_entry,
    _session_id,
    _stored,
    _subpath_of,
    _timestamp,
    _verbatim,
)
from ._folder import (
    NAMING,
    SUMMARY_SUFFIX,
    _creating,
    _locate,
    _read_listing,
    _remove,
    _replace_private,
)
from ._live import LiveClaudeCode
from ._names import file_name
from ._serial import _Serial

if TYPE_CHECKING:
    from ._store import LoopscribeSessionStore

__all__ = ["SOURCE", "SessionReplacedError", "_Session"]

logger = logging.getLogger("loopscribe.adapters.claude_agent_sdk")

SOURCE = "claude-agent-sdk"
"""``session_start`` ``source`` of the sessions the store writes."""


class SessionReplacedError(LoopscribeError, RuntimeError):
    """Another process deleted or rewrote a session file while this one opened it."""


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
                self.store.guard.failed(f"{self.path}: recording what waited for subagents")

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
            self.store.guard.failed(f"{self.path}: mapping a Claude Code entry (entry kept)")

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
