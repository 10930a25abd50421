"""A folder of session files, indexed for the viewer: sessions, traces, spans, records.

Every file gets a :class:`~loopscribe.viewer.SessionTimeline`, cached by
``(inode, size, mtime)``: an unchanged file is never read again, a file that
grew is read from where the last look stopped. Resolving a trace ID is then
a walk over the runs in memory; reading one record is one ``os.pread`` of
exactly its bytes.

Bodies are never sent whole by default: :func:`clip` cuts long strings and
long containers to a budget and says where it cut, and the raw record line
is available separately (:meth:`Catalog.raw`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .._errors import FormatError, LoopscribeError
from ..workspace import SessionSummary, Workspace
from ._timeline import Bar, RunTimeline, SessionTimeline, iso

__all__ = [
    "BODY_BUDGET_CHARS",
    "STRING_LIMIT_CHARS",
    "Catalog",
    "Clipped",
    "NotFoundError",
    "clip",
    "parse_id",
]

STRING_LIMIT_CHARS = 16_384
"""A string longer than this is cut in record previews."""
BODY_BUDGET_CHARS = 131_072
"""Characters of string content one record preview may carry in all."""
_ITEM_BUDGET = 2_000
"""Values (array items, object members) one record preview may carry."""
_FLOOR_CHARS = 200
_MEMBER_FLOOR = 8
"""What a string still shows once the budget is spent."""
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


# -- clipping bodies ----------------------------------------------------------------


@dataclass(slots=True)
class Clipped:
    """A record body cut to a budget, and where it was cut.

    Attributes:
        value: The body, with long strings shortened and long containers elided.
        cuts: One entry per cut: ``path`` (keys and indexes from the record's
            root), ``kind`` (``string``, ``items`` or ``keys``), ``total``
            (characters or entries in the full value) and ``shown``.
    """

    value: Any
    cuts: list[dict[str, Any]] = field(default_factory=list)


def clip(
    value: Any,
    *,
    string_limit: int = STRING_LIMIT_CHARS,
    budget: int = BODY_BUDGET_CHARS,
    item_budget: int = _ITEM_BUDGET,
) -> Clipped:
    """Cut a parsed JSON value to a size a browser shows at once.

    A string keeps at most ``string_limit`` characters, and once ``budget``
    characters were kept in all, later strings keep only a short head.
    Arrays and objects keep items until ``item_budget`` values were kept.

    Args:
        value: Parsed JSON.
        string_limit: Longest string kept whole.
        budget: Total string characters kept.
        item_budget: Total values kept.

    Returns:
        The clipped value and the list of cuts (empty when nothing was cut).
    """
    out = Clipped(None)
    left = [budget, item_budget]

    def walk(v: Any, path: list[str | int]) -> Any:
        if isinstance(v, str):
            keep = min(len(v), string_limit, max(left[0], _FLOOR_CHARS))
            left[0] -= keep
            if keep < len(v):
                out.cuts.append({"path": path, "kind": "string", "total": len(v), "shown": keep})
                return v[:keep]
            return v
        if isinstance(v, list):
            items: list[Any] = []
            for i, item in enumerate(v):
                if left[1] <= 0:
                    out.cuts.append(
                        {"path": path, "kind": "items", "total": len(v), "shown": len(items)}
                    )
                    break
                left[1] -= 1
                items.append(walk(item, [*path, i]))
            return items
        if isinstance(v, dict):
            members: dict[str, Any] = {}
            for key, item in v.items():
                # An object keeps its first few members past the budget: they are
                # usually the labels (type, is_error) that make the cut readable.
                if left[1] <= 0 and len(members) >= _MEMBER_FLOOR:
                    out.cuts.append(
                        {"path": path, "kind": "keys", "total": len(v), "shown": len(members)}
                    )
                    break
                left[1] -= 1
                members[key] = walk(item, [*path, key])
            return members
        return v

    out.value = walk(value, [])
    return out


# -- the catalog ------------------------------------------------------------------------


class Catalog:
    """The session files below a folder, indexed on demand and kept fresh.

    Thread-safe: the web server calls it from a thread pool.

    Args:
        root: A folder of session files (searched recursively), or one file.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()
        if not self.root.exists():
            # Checked first: Workspace would create a missing folder, and a viewer writes nothing.
            raise NotFoundError(f"{self.root}: no such folder or session file")
        self.workspace = Workspace(self.root if self.root.is_dir() else self.root.parent)
        self._workspaces: dict[Path, Workspace] = {self.workspace.root: self.workspace}
        self._lock: threading.RLock = threading.RLock()
        self._timelines: dict[Path, SessionTimeline] = {}
        self._errors: dict[Path, str] = {}
        self._indexing: list[Path] = []
        self._held = threading.local()
        self.files_read = 0
        """How many times a file was read (again): unchanged files are not."""

    # -- indexing ------------------------------------------------------------------

    def files(self) -> list[Path]:
        """The session files: ``*.jsonl`` below the folder, without OTLP span files."""
        if self.root.is_file():
            return [self.root]
        if not self.root.is_dir():
            raise NotFoundError(f"{self.root}: no such folder")
        found = []
        for path in self.root.rglob("*.jsonl"):
            if path.name.endswith(".otlp.jsonl") or any(
                part.endswith(".artifacts") for part in path.relative_to(self.root).parts[:-1]
            ):
                continue
            if path.is_file():
                found.append(path)
        return sorted(found)

    def refresh(
        self, on_file: Callable[[Path], None] | None = None, *, wait: float | None = None
    ) -> list[SessionTimeline]:
        """Bring every file's index up to date; returns the readable ones.

        A file that cannot be read as a session is left out, and its error
        is kept for :attr:`skipped`. Each file is indexed under its own
        lock, so requests about different sessions never wait for each other.

        Args:
            on_file: Called with each file once it was looked at (for a
                progress bar over a first, long indexing).
            wait: Seconds to wait for a file another request is indexing
                (``None``: as long as it takes). A file not ready in time is
                listed as it was last seen, or left out (and named in
                :attr:`indexing`) if it was never read yet.
        """
        paths = self.files()
        with self._lock:
            for gone in set(self._timelines) - set(paths):
                del self._timelines[gone]
                self._errors.pop(gone, None)
            pending = []
            for path in paths:
                timeline = self._timelines.get(path)
                if timeline is None:
                    timeline = self._timelines[path] = SessionTimeline(path)
                pending.append(timeline)
        ready = []
        busy = []
        for timeline in pending:
            path = timeline.path
            got = timeline.lock.acquire(timeout=-1 if wait is None else wait)
            if not got:
                if timeline.session_id:
                    ready.append(timeline)  # as last seen; another request is reading more
                else:
                    busy.append(path)
                continue
            try:
                if timeline.refresh():
                    self.files_read += 1
                    for run in timeline.iter_runs():
                        run.warm()  # the first page of a long run is then quick
            except (FormatError, OSError) as exc:
                with self._lock:
                    self._errors[path] = str(exc)
                continue
            finally:
                timeline.lock.release()
                if on_file is not None:
                    on_file(path)
            with self._lock:
                self._errors.pop(path, None)
            ready.append(timeline)
        with self._lock:
            self._indexing = busy
        return ready

    @property
    def lock(self) -> threading.RLock:
        """Held while the catalog's list of files changes (each file has its own lock)."""
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

    @property
    def skipped(self) -> dict[Path, str]:
        """Files left out by the last refresh, with the reason."""
        with self._lock:
            return dict(self._errors)

    @property
    def indexing(self) -> list[Path]:
        """Files another request was still reading for the first time at the last refresh."""
        with self._lock:
            return list(self._indexing)

    def sessions(
        self, *, wait: float | None = None
    ) -> list[tuple[SessionTimeline, SessionSummary]]:
        """Every session with its summary, most recently updated first.

        Args:
            wait: See :meth:`refresh`; the web viewer's list does not wait
                long for a huge file another request is indexing.
        """
        out = []
        for timeline in self.refresh(wait=wait):
            try:
                summary = self.summary(timeline)
            except (FormatError, OSError) as exc:
                with self._lock:
                    self._errors[timeline.path] = str(exc)
                continue
            out.append((timeline, summary))
        out.sort(key=lambda pair: (pair[1].updated, pair[1].id), reverse=True)
        return out

    def session(self, session_id: str) -> SessionTimeline:
        """The timeline of one session, fresh, held for the current request.

        A session seen before is brought up to date alone; only an unknown ID
        makes the whole folder be looked at again.

        Raises:
            NotFoundError: No file in the folder holds that session.
        """
        with self._lock:
            known = [t for t in self._timelines.values() if t.session_id == session_id]
        matches = []
        for timeline in known:
            if timeline.path.exists():
                with timeline.lock:
                    try:
                        timeline.refresh()
                    except (FormatError, OSError):
                        continue
                if timeline.session_id == session_id:
                    matches.append(timeline)
        if not matches:
            matches = [t for t in self.refresh() if t.session_id == session_id]
        if not matches:
            raise NotFoundError(
                f"no session {session_id!r} in {self.root} "
                f"({self._searched()}); the session list is at /"
            )
        # A copied file holds the same session: show the one written last.
        return self.hold(max(matches, key=lambda t: (t.updated or t.created, t.records)))

    def search_text(self, query: str, timelines: list[SessionTimeline]) -> set[Path]:
        """The files among ``timelines`` whose records contain ``query`` (ASCII case ignored).

        The text is looked for as it is stored (JSON-escaped), in 1 MiB
        blocks, so a search costs one pass over the bytes and no parsing.
        """
        needle = orjson.dumps(query)[1:-1].lower()
        if not needle:
            return {t.path for t in timelines}
        found = set()
        for timeline in timelines:
            try:
                with open(timeline.path, "rb") as stream:
                    tail = b""
                    while block := stream.read(_RAW_CHUNK_BYTES):
                        window = tail + block.lower()
                        if needle in window:
                            found.add(timeline.path)
                            break
                        tail = window[-(len(needle) - 1) :] if len(needle) > 1 else b""
            except OSError:
                continue
        return found

    def summary(self, timeline: SessionTimeline) -> SessionSummary:
        """The workspace summary (status, title, tokens, ...) of a session.

        A file in a subfolder is summarised by a workspace of its own folder
        (a workspace keys its files by name), so nested sessions are listed too.
        """
        folder = timeline.path.parent
        with self._lock:
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
        its own spans.

        Raises:
            NotFoundError: No run in the folder has that trace ID.
        """
        found: list[tuple[SessionTimeline, RunTimeline]] = []
        for timeline in self.refresh():
            with timeline.lock:
                found.extend((timeline, r) for r in timeline.iter_runs() if r.trace_id == trace)
        if not found:
            raise NotFoundError(
                f"no run in {self.root} belongs to trace {trace:032x} ({self._searched()}). "
                "Is its session file in this folder? (A run begun inside a host span "
                "carries the host's trace ID, which is stored in its run_start record.)"
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
        with self._lock:
            count = len(self._timelines)
            bad = len(self._errors)
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
        fd = os.open(timeline.path, os.O_RDONLY | os.O_CLOEXEC)
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
        fd = os.open(timeline.path, os.O_RDONLY | os.O_CLOEXEC)
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


def record_view(
    obj: dict[str, Any], offset: int, size: int, string_limit: int | None, budget: int
) -> dict[str, Any]:
    """A parsed record line as the viewer shows it, its ``data`` clipped."""
    data = obj.get("data") or {}
    if string_limit is None:
        clipped = Clipped(data)
    else:
        clipped = clip(data, string_limit=string_limit, budget=budget)
    return {
        "session_id": obj.get("session_id"),
        "seq": obj.get("seq"),
        "type": obj.get("type"),
        "ts": obj.get("ts"),
        "run_id": obj.get("run_id"),
        "execution": obj.get("execution"),
        "data": clipped.value,
        "offset": offset,
        "size": size,
        "cuts": [{**cut, "path": ["data", *cut["path"]]} for cut in clipped.cuts],
    }


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


def summary_json(summary: SessionSummary, timeline: SessionTimeline) -> dict[str, Any]:
    """What the session list and the session page show of a session."""
    return {
        "id": summary.id,
        "file": str(timeline.path),
        "title": summary.title,
        "status": summary.status,
        "model": summary.model,
        "agent_name": summary.agent_name,
        "created": iso(summary.created),
        "updated": iso(summary.updated),
        "messages": summary.message_count,
        "input_tokens": summary.input_tokens,
        "output_tokens": summary.output_tokens,
        "runs": len(timeline.runs),
        "records": timeline.records,
        "bytes": timeline.end_offset,
        "source": summary.source or "loopscribe",
        # Run time, by the source's clock (an imported session was recorded long after).
        "duration_us": None,
        **timeline.facts(),
    }


def run_summary_json(run: RunTimeline) -> dict[str, Any]:
    """A run as the session page lists it (no bars)."""
    return {
        "run_id": run.run_id,
        "trace_id": f"{run.trace_id:032x}",
        "span_id": f"{run.span_id:016x}",
        "agent": run.agent,
        "start": iso(run.start),
        "end": iso(run.end),
        "duration_us": run.duration_us(),
        "state": run.state,
        "error_type": run.error_type,
        "seq_first": run.seq_first,
        "seq_last": run.seq_last,
        "counts": run.counts(),
    }
