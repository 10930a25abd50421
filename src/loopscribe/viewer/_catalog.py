"""A folder of session files, indexed for the viewer: sessions, traces, spans, records.

The session list and the lookups by session and trace ID come from a small
index built in the background (:mod:`~loopscribe.viewer._index`). A session
a request opens gets a :class:`~loopscribe.viewer.SessionTimeline`, kept
while it is among those used last and cached by ``(inode, size, mtime)``:
an unchanged file is not read again, a file that grew is read from where
the last look stopped. Reading one record is one ``os.pread`` of exactly
its bytes.

Bodies are never sent whole by default: a record comes clipped
(:func:`~loopscribe.viewer._clip.record_view`), and the raw record line is
available separately (:meth:`Catalog.raw`).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import orjson

from .._errors import FormatError, LoopscribeError
from .._runnames import run_names
from .._safeopen import open_session_fd
from .._timeline import Bar, RunTimeline, SessionTimeline, iso
from ..workspace import SessionSummary, Workspace
from ._clip import BODY_BUDGET_CHARS, STRING_LIMIT_CHARS, record_view
from ._index import PAGE_SIZE, Busy, Entry, Filters, IndexingError, SessionIndex, entry_of

__all__ = [
    "Catalog",
    "IndexingError",
    "NotFoundError",
    "parse_id",
    "run_summary_json",
]

_T = TypeVar("_T")

_RAW_CHUNK_BYTES = 1 << 20


class NotFoundError(LoopscribeError, LookupError):
    """An ID names nothing in the folder; the message says what was searched."""


def parse_id(value: str, bits: int, what: str) -> int:
    """Parse a hex trace (128-bit) or span (64-bit) ID.

    Raises:
        NotFoundError: Not hex, wrong length, or zero; the message says what was expected.
    """
    digits = bits // 4
    text = value.lower()
    if len(text) != digits or any(c not in "0123456789abcdef" for c in text):
        raise NotFoundError(f"{what} {value!r} is not an ID: expected {digits} hex digits")
    number = int(text, 16)
    if number == 0:
        raise NotFoundError(f"{what} {value!r} is all zeros, which OpenTelemetry never uses")
    return number


# -- the catalog ------------------------------------------------------------------------

TIMELINES_KEPT = 16
"""Session timelines kept in memory: those opened last, and those being written."""
_WORKSPACE_SUMMARIES = 2_000
"""Summaries the workspaces cache before they are dropped and begun anew, so memory
stays flat however many files the folder holds."""
_BUSY_WAIT_SECONDS = 60.0
"""How long indexing waits, at the end of a pass, for a request that reads a file."""
LOOKUP_WAIT_SECONDS = 10.0
"""How long a lookup (a session ID, a trace ID) waits for indexing before it says how far
indexing got (a 503)."""
LIST_WAIT_SECONDS = 10.0
"""How long the session list waits for a pass over a small folder (see ``QUICK_FILES``)."""


class Catalog:
    """The session files below a folder: a paged list, and timelines on demand.

    The list comes from a :class:`~loopscribe.viewer._index.SessionIndex`
    that reads the folder in the background (:meth:`start`), newest files
    first; pages, sessions and trace IDs can be asked for at once, and a
    lookup that needs a file not read yet waits for it or raises
    :class:`IndexingError` saying how far indexing got. A session's
    timeline is built when a request needs it and kept while it is among
    the :data:`TIMELINES_KEPT` used last.

    Thread-safe: the web server calls it from a thread pool.

    Args:
        root: A folder of session files (searched recursively), or one file.
        on_file: Called on the indexing thread after each file was read.
        lookup_wait: Seconds a lookup waits for indexing (see :data:`LOOKUP_WAIT_SECONDS`).
        list_wait: Seconds the list waits for a pass over a small folder
            (see :data:`LIST_WAIT_SECONDS`).
        ready: Set once the folder holds what there is to serve (a store's copy,
            after its first sync); until then a lookup that finds nothing waits
            for it, and the list says the folder is still being filled.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        on_file: Callable[[Path], object] | None = None,
        lookup_wait: float = LOOKUP_WAIT_SECONDS,
        list_wait: float = LIST_WAIT_SECONDS,
        ready: threading.Event | None = None,
    ) -> None:
        self.root = Path(root).absolute()
        if not self.root.exists():
            # Checked first: Workspace would create a missing folder, and a viewer writes nothing.
            raise NotFoundError(f"{self.root}: no such folder or session file")
        self.lookup_wait = lookup_wait
        self.list_wait = list_wait
        self.ready = ready
        self._lock = threading.RLock()
        self._timelines: OrderedDict[str, SessionTimeline] = OrderedDict()
        self._workspaces: dict[Path, Workspace] = {}
        self._summaries = 0
        self._held = threading.local()
        self.index = SessionIndex(self.root, self._entry, on_file)

    # -- indexing ------------------------------------------------------------------

    def start(self) -> None:
        """Begin indexing the folder in the background (any request would begin it too)."""
        self.index.request()

    def close(self) -> None:
        """Stop indexing (after the file being read)."""
        self.index.close()

    def refresh(self, timeout: float | None = None) -> bool:
        """Index what changed since the last pass, and wait for it.

        Args:
            timeout: Seconds to wait (``None``: as long as it takes).

        Returns:
            Whether the pass finished in time.
        """
        return self.index.wait(self.index.request(), timeout)

    @property
    def files_read(self) -> int:
        """How many times a file was read for the index: unchanged files are not."""
        return self.index.files_read

    @property
    def skipped(self) -> dict[Path, str]:
        """Files that could not be read as sessions, with the reason."""
        return {Path(p): e for p, e in self.index.skipped()[0].items()}

    @property
    def indexing(self) -> dict[str, Any] | None:
        """How far indexing got, or ``None`` once every file was read.

        ``done`` and ``total`` count files; ``walking`` is true while the
        folder is still being searched for them, and ``filling`` while it is
        still being filled (a store's first sync).
        """
        progress = self.index.progress()
        if self.ready is not None and not self.ready.is_set():
            return {"done": 0, "total": 0, "walking": False, **(progress or {}), "filling": True}
        return None if progress is None else {**progress, "filling": False}

    def _filled(self, what: Callable[[], str]) -> None:
        """Wait (a while) for the folder to be filled; :class:`IndexingError` if it is not."""
        if self.ready is not None and not self.ready.wait(self.lookup_wait):
            raise IndexingError(
                f"{what()} yet: the sessions are still being fetched into {self.root}; "
                "try again in a moment"
            )

    def page(
        self,
        filters: Filters,
        *,
        cursor: tuple[int, str, str] | None = None,
        limit: int = PAGE_SIZE,
    ) -> dict[str, Any]:
        """A page of the session list, newest first (see :meth:`SessionIndex.page`).

        A fresh pass over the folder is asked for first, and waited for when
        the folder is small; a large folder is listed as indexed so far.
        """
        self.index.wait(self.index.request(), self.list_wait, quick=True)
        return self.index.page(filters, cursor=cursor, limit=limit)

    def _entry(self, path: str, stamp: int, patient: bool) -> Entry:
        """Read one file for the index (the index's reader, see ``Reader``).

        A timeline kept for a request is taken up where it stopped; while a
        request holds it, :class:`Busy` asks the index to come back later,
        and then the wait is bounded: past it, the file is read afresh.
        """
        timeline = self._cached(path)
        if timeline is not None:
            if timeline.lock.acquire(timeout=_BUSY_WAIT_SECONDS if patient else 0):
                try:
                    timeline.refresh()
                    return entry_of(path, stamp, self.summary(timeline), timeline, self.root)
                finally:
                    timeline.lock.release()
            if not patient:
                raise Busy(path)
        timeline = SessionTimeline(path)
        timeline.refresh()
        entry = entry_of(path, stamp, self.summary(timeline), timeline, self.root)
        if entry.status == "running":
            self._keep(timeline)  # the next passes follow it from where this one stopped
        return entry

    def _cached(self, path: str) -> SessionTimeline | None:
        with self._lock:
            timeline = self._timelines.get(path)
            if timeline is not None:
                self._timelines.move_to_end(path)
            return timeline

    def _keep(self, timeline: SessionTimeline) -> SessionTimeline:
        with self._lock:
            key = str(timeline.path)
            timeline = self._timelines.setdefault(key, timeline)
            self._timelines.move_to_end(key)
            while len(self._timelines) > TIMELINES_KEPT:
                self._timelines.popitem(last=False)
            return timeline

    def _timeline(self, path: str) -> SessionTimeline:
        """The kept timeline of a file, or a new one (kept from now on)."""
        return self._cached(path) or self._keep(SessionTimeline(path))

    def _refreshed(self, paths: Iterable[str]) -> Iterator[SessionTimeline]:
        """The timeline of each file brought up to date, yielded with its lock held;
        a file that cannot be read is left out."""
        for path in paths:
            timeline = self._timeline(path)
            with timeline.lock:
                try:
                    timeline.refresh()
                except (FormatError, OSError):
                    continue
                yield timeline

    @property
    def lock(self) -> threading.RLock:
        """Held while the catalog's kept timelines change (each timeline has its own lock)."""
        return self._lock

    @contextmanager
    def reading(self) -> Iterator[None]:
        """A request's scope: the timelines it took with :meth:`hold` are let go at its end."""
        held: list[SessionTimeline] = []
        self._held.stack = held
        try:
            yield
        finally:
            self._held.stack = None
            for timeline in reversed(held):
                timeline.lock.release()

    def hold(self, timeline: SessionTimeline) -> SessionTimeline:
        """Keep ``timeline`` from growing until the current :meth:`reading` scope ends."""
        held: list[SessionTimeline] | None = getattr(self._held, "stack", None)
        if held is not None and timeline not in held:
            timeline.lock.acquire()
            held.append(timeline)
        return timeline

    # -- lookups ----------------------------------------------------------------------

    def _find(self, look: Callable[[], list[_T]], missing: Callable[[], str]) -> list[_T]:
        """What ``look`` finds; if nothing, again after a fresh pass over the folder.

        Raises:
            NotFoundError: Still nothing, and every file was read.
            IndexingError: Still nothing, and indexing has files left to read.
        """
        found = look()
        if found:
            return found
        self._filled(missing)
        # A file written since the last pass, or one not read yet: look again after a pass.
        finished = self.index.wait(self.index.request(), self.lookup_wait)
        found = look()
        if found:
            return found
        if not (finished and self.index.complete):
            raise IndexingError(
                f"{missing()} yet: {self.index.progress_text()}; try again in a moment"
            )
        raise NotFoundError(missing())

    def session(self, session_id: str) -> SessionTimeline:
        """The timeline of one session, fresh, held for the current request.

        The session is found by its ID in the index, which knows the ID of a
        file loopscribe wrote as soon as the folder was walked, before the
        file is read: only that file is read then.

        Raises:
            NotFoundError: No file in the folder holds that session.
            IndexingError: Not found, and indexing has files left to read.
        """

        def look() -> list[SessionTimeline]:
            found = self._refreshed(self.index.paths_of(session_id))
            return [timeline for timeline in found if timeline.session_id == session_id]

        matches = self._find(
            look,
            lambda: (
                f"no session {session_id!r} in {self.root} ({self._searched()}); "
                "the session list is at /"
            ),
        )
        # A copied file holds the same session: show the one written last.
        return self.hold(max(matches, key=lambda t: (t.updated or t.created, t.records)))

    def summary(self, timeline: SessionTimeline) -> SessionSummary:
        """The workspace summary (status, title, tokens, ...) of a session.

        A file in a subfolder is summarised by a workspace of its own folder
        (a workspace keys its files by name), so nested sessions are listed too.
        """
        folder = timeline.path.parent
        if not folder.is_dir():
            # Workspace would create it; a viewer creates nothing.
            raise FileNotFoundError(f"{folder}: no such folder (it was removed)")
        with self._lock:
            self._summaries += 1
            if self._summaries > _WORKSPACE_SUMMARIES:
                self._workspaces.clear()
                self._summaries = 0
            workspace = self._workspaces.get(folder)
            if workspace is None:
                workspace = self._workspaces[folder] = Workspace(folder)
        return workspace.summary_of_path(timeline.path)

    def run(self, session_id: str, run_id: str) -> tuple[SessionTimeline, RunTimeline]:
        """A session's run.

        Raises:
            NotFoundError: No such session, or no such run in it.
        """
        timeline = self.session(session_id)
        run = timeline.runs.get(run_id)
        if run is None:
            known = ", ".join(timeline.runs) or "none"
            raise NotFoundError(
                f"session {session_id} has no run {run_id!r} (its runs: {known}); "
                f"see /session/{session_id}"
            )
        return timeline, run

    def trace(self, trace: int) -> list[tuple[SessionTimeline, RunTimeline]]:
        """Every run whose spans belong to ``trace``, oldest first.

        Several runs share a trace when their host began them inside one of
        its own spans, so the answer waits until every file was read once.

        Raises:
            NotFoundError: No run in the folder has that trace ID.
            IndexingError: Indexing has files left to read.
        """
        self._filled(lambda: f"trace {trace:032x} cannot be looked up in {self.root}")
        if not self.index.wait_complete(self.lookup_wait):
            raise IndexingError(
                f"trace {trace:032x} cannot be looked up in {self.root} yet: "
                f"{self.index.progress_text()}; try again in a moment"
            )

        def look() -> list[tuple[SessionTimeline, RunTimeline]]:
            return [
                (timeline, run)
                for timeline in self._refreshed(self.index.paths_of_trace(trace))
                for run in timeline.iter_runs()
                if run.trace_id == trace
            ]

        found = self._find(
            look,
            lambda: (
                f"no run in {self.root} belongs to trace {trace:032x} ({self._searched()}). "
                "Is its session file in this folder? (A run begun inside a host span "
                "carries the host's trace ID, which is stored in its run_start record.)"
            ),
        )
        found.sort(key=lambda pair: pair[1].start)
        return found

    def span(self, trace: int, span: int) -> tuple[SessionTimeline, RunTimeline, Bar | None]:
        """The run, and the execution attempt, behind a span.

        Returns:
            ``(session, run, bar)``; ``bar`` is ``None`` for the run's own span.

        Raises:
            NotFoundError: The trace is unknown, or the span is not one of its
                loopscribe spans (for example the host's span around a run).
        """
        runs = self.trace(trace)
        for timeline in dict.fromkeys(t for t, _ in runs):
            with timeline.lock:
                found = timeline.find_span(trace, span)
            if found is not None:
                return timeline, found[0], found[1]
        hosts = {run.host_span_id for _, run in runs}
        hint = (
            " It is the host's span that the run was begun inside; loopscribe did not record it."
            if span in hosts
            else " Execution spans are named by (session, run, execution, attempt);"
            " the span may belong to a run not yet written to the file."
        )
        listed = ", ".join(f"/session/{t.session_id}/run/{r.run_id}" for t, r in runs)
        raise NotFoundError(
            f"trace {trace:032x} has no span {span:016x} in {self.root}.{hint} "
            f"The trace's runs: {listed}"
        )

    def _searched(self) -> str:
        count, bad = self.index.counts()
        return f"{count} session file{'s' if count != 1 else ''} searched" + (
            f", {bad} unreadable" if bad else ""
        )

    # -- records -------------------------------------------------------------------

    def _locate(self, timeline: SessionTimeline, seq: int) -> tuple[int, int]:
        where = timeline.locate(seq)
        if where is None:
            raise NotFoundError(
                f"session {timeline.session_id} has no record {seq} "
                f"(it has {timeline.records}, seq 0 to {timeline.records - 1})"
            )
        return where

    def raw_line(self, timeline: SessionTimeline, seq: int) -> bytes:
        """The exact bytes of one record's line, read with one ``os.pread``."""
        offset, size = self._locate(timeline, seq)
        fd = open_session_fd(timeline.path)
        try:
            raw = os.pread(fd, size, offset)
        finally:
            os.close(fd)
        _check_line(timeline, seq, offset, raw[:200], len(raw) == size and raw.endswith(b"\n"))
        return raw

    def raw(self, timeline: SessionTimeline, seq: int) -> tuple[int, Iterator[bytes]]:
        """One record's line as chunks, for streaming a large body.

        Returns:
            The line's size in bytes and an iterator over it. The first
            chunk is checked before this returns, so a file changed behind
            the index raises here rather than mid-stream.
        """
        offset, size = self._locate(timeline, seq)
        fd = open_session_fd(timeline.path)
        try:
            head = os.pread(fd, min(size, _RAW_CHUNK_BYTES), offset)
            _check_line(timeline, seq, offset, head[:200], len(head) == min(size, _RAW_CHUNK_BYTES))
        except BaseException:
            os.close(fd)
            raise

        def chunks() -> Iterator[bytes]:
            try:
                yield head
                done = len(head)
                while done < size:
                    chunk = os.pread(fd, min(size - done, _RAW_CHUNK_BYTES), offset + done)
                    if not chunk:
                        return  # cannot happen in an append-only file; never loop forever
                    yield chunk
                    done += len(chunk)
            finally:
                os.close(fd)

        return size, chunks()

    def record(
        self,
        timeline: SessionTimeline,
        seq: int,
        *,
        string_limit: int | None = STRING_LIMIT_CHARS,
        budget: int = BODY_BUDGET_CHARS,
    ) -> dict[str, Any]:
        """One record as JSON, its body clipped (``string_limit=None``: whole).

        The result has the record's fields (``seq``, ``type``, ``ts``,
        ``run_id``, ``execution``, ``data``), plus ``offset``, ``size``
        (bytes in the file) and ``cuts`` (see :class:`Clipped`).
        """
        raw = self.raw_line(timeline, seq)
        offset, size = self._locate(timeline, seq)
        return record_view(orjson.loads(raw), offset, size, string_limit, budget)


def _check_line(timeline: SessionTimeline, seq: int, offset: int, head: bytes, whole: bool) -> None:
    # The format puts session_id and seq first, so a prefix check proves the
    # index still matches the file without parsing a large line.
    expected = f'{{"session_id":"{timeline.session_id}","seq":{seq},'.encode()
    if not whole or not head.startswith(expected):
        raise FormatError(
            f"{timeline.path}: byte {offset}: record {seq} is not where the index saw it; "
            "the file was replaced or changed outside loopscribe (reload the page)",
            path=timeline.path,
        )


def run_summary_json(run: RunTimeline) -> dict[str, Any]:
    """A run as the session page lists it (no bars); kept until the run changes.

    The answer is shared between requests: callers copy it, never change it.
    """
    stamp = run.stamp()
    if run.summary is not None and run.summary[0] == stamp:
        return run.summary[1]
    summary = {
        "run_id": run.run_id,
        "trace_id": f"{run.trace_id:032x}",
        "span_id": f"{run.span_id:016x}",
        "agent": run.agent,
        **run_names(run),
        "start": iso(run.start),
        "end": iso(run.end),
        "duration_us": run.duration_us(),
        "state": run.state,
        "error_type": run.error_type,
        "seq_first": run.seq_first,
        "seq_last": run.seq_last,
        "counts": run.counts(),
        "cost_usd": run.cost().to_json(),
        "cost_text": run.cost().text(),
    }
    run.summary = (stamp, summary)
    return summary
