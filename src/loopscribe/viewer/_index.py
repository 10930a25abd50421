"""The session list of a folder of any size: indexed in the background, paged newest first.

``loopscribe serve`` answers as soon as it listens, whatever the folder
holds. A pass walks the folder (``os.scandir``, one ``stat`` a file), peeks
at the first bytes of each new file for its session ID, then reads the new
and changed files, the most recently modified first, while requests page
through what is indexed so far and say how far the pass got. A pass runs
on a thread of its own that ends when no request asks for another.

What is kept per session is small — the row the list shows (as JSON
bytes), its sort key, the text the search looks at, and its runs' trace
IDs — so memory grows by about a kilobyte a session. Timelines are built on
demand by :class:`~loopscribe.viewer.Catalog`, which reads each file for
the index through the ``read`` function it gives :class:`SessionIndex`.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import collections
import logging
import os
import re
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .._errors import LoopscribeError
from .._timeline import SessionTimeline, epoch_us, iso
from ..workspace import SessionSummary
from ._usage import DayUsage, daily_usage, usage_json

__all__ = [
    "MAX_PAGE_SIZE",
    "PAGE_SIZE",
    "Entry",
    "IndexingError",
    "SessionIndex",
    "entry_of",
    "summary_json",
]

logger = logging.getLogger("loopscribe")

PAGE_SIZE = 100
"""Sessions a page of the list holds unless ``limit`` says otherwise."""
MAX_PAGE_SIZE = 500
"""The most sessions one page may hold."""
QUICK_FILES = 1_000
"""A list request waits for a fresh pass of a folder of at most this many files; past it,
the request answers with what is indexed and the pass goes on behind it."""
SEARCH_BUDGET_BYTES = 64 << 20
"""Bytes of records one search request reads at most; the page then says where to go on."""
_TEXT_CHARS = 300
"""A title, model, agent or source name longer than this is cut in the list's row."""
_TOOLS_LISTED = 100
_FILTER_VALUES = 50
"""Sources and statuses offered as filters: the most frequent ones."""
SKIPPED_LISTED = 100
"""Unreadable files a page names at most (it counts them all)."""
_PEEK_BYTES = 64
_ID_HEAD = re.compile(rb'\{"session_id":"([0-9a-f]{32})"')
_BLOCK_BYTES = 1 << 20


class IndexingError(LoopscribeError, LookupError):
    """A lookup needs files that indexing has not read yet; the message says how far it got."""


# -- the row of a session -------------------------------------------------------------


def _text(value: str | None, limit: int = _TEXT_CHARS) -> str | None:
    return value if value is None or len(value) <= limit else value[: limit - 1] + "…"


def shown_path(path: str | os.PathLike[str]) -> str:
    """A file name (or a message naming one) as a page shows it: what is not UTF-8 escaped.

    A name read from the file system keeps bytes that are not UTF-8 as lone
    surrogates, which no JSON encoder takes; they become ``\\xNN`` here.
    """
    text = os.fspath(path)
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def summary_json(summary: SessionSummary, timeline: SessionTimeline) -> dict[str, Any]:
    """What the session list and the session page show of a session.

    Names are cut to a few hundred characters, so a row's size does not
    depend on what a file's metadata holds.
    """
    facts = timeline.facts()
    return {
        "id": summary.id,
        "file": shown_path(timeline.path),
        "title": _text(summary.title),
        "status": summary.status,
        # Whether a writer is adding to it now: the page follows it while it is.
        "live": summary.status == "running",
        "model": _text(summary.model),
        "agent_name": _text(summary.agent_name),
        "created": iso(summary.created),
        "updated": iso(summary.updated),
        "messages": summary.message_count,
        "input_tokens": summary.input_tokens,
        "output_tokens": summary.output_tokens,
        "cost_usd": summary.cost.to_json(),
        "cost_text": summary.cost.text(),
        "runs": len(timeline.runs),
        "records": timeline.records,
        "bytes": timeline.end_offset,
        "source": _text(summary.source) or "loopscribe",
        # Run time, by the source's clock (an imported session was recorded long after).
        "duration_us": None,
        **facts,
        "tools": [_text(t, 100) for t in facts.get("tools", [])[:_TOOLS_LISTED]],
        "models": [_text(m, 100) for m in facts.get("models", [])],
    }


@dataclass(frozen=True, slots=True)
class Entry:
    """One session file in the index: what the list needs of it, and no more.

    An entry whose ``row`` is ``None`` was found but not read yet (its
    ``session_id`` then comes from the file's first bytes, if they tell), or
    could not be read (``failed``).
    """

    path: str
    stamp: int
    """A hash of the file's inode, size and modification time when it was read."""
    session_id: str
    row: bytes | None = None
    failed: bool = False
    updated_us: int = 0
    status: str = ""
    source: str = ""
    errors: int = 0
    hay: str = ""
    """What the search box looks at: title, ID, model, source, agent, tools and the file's
    name below the folder, lower-case."""
    traces: tuple[int, ...] = ()
    usage: tuple[DayUsage, ...] = ()
    """Tokens and cost per day and model, for the usage chart."""

    @property
    def key(self) -> tuple[int, str, str]:
        """The list's order: most recently updated first, then by ID and file."""
        return (self.updated_us, self.session_id, self.path)


def _key(entry: Entry) -> tuple[int, str, str]:
    return (entry.updated_us, entry.session_id, entry.path)


def stamp_of(st: os.stat_result) -> int:
    """A file's identity and version in one int: a hash of its inode, size and mtime."""
    return hash((st.st_ino, st.st_size, st.st_mtime_ns))


def entry_of(
    path: str, stamp: int, summary: SessionSummary, timeline: SessionTimeline, root: Path
) -> Entry:
    """The index entry of a session file (``stamp``: see :func:`stamp_of`) read as
    ``timeline`` and ``summary``."""
    row = summary_json(summary, timeline)
    try:
        below = os.path.relpath(path, root)
    except ValueError:
        below = path
    words = [row["title"], row["id"], row["model"], row["source"], row["agent_name"]]
    words += [shown_path(below), *row["tools"], *row["models"]]
    return Entry(
        path=path,
        stamp=stamp,
        session_id=timeline.session_id,
        # A copy: orjson returns its buffer as it grew (kilobytes), and the row is kept.
        row=memoryview(orjson.dumps(row)).tobytes(),
        updated_us=epoch_us(summary.updated),
        status=sys.intern(summary.status),
        source=sys.intern(row["source"]),
        errors=row.get("errors") or 0,
        hay="\n".join(w for w in words if w).lower(),
        traces=tuple(dict.fromkeys(run.trace_id for run in timeline.iter_runs())),
        usage=daily_usage(timeline),
    )


# -- cursors ------------------------------------------------------------------------------


def encode_cursor(key: tuple[int, str, str]) -> str:
    """A page's position as a URL-safe token: the sort key of the last session shown."""
    raw = f"{key[0]}\0{key[1]}\0".encode("utf-8", "surrogatepass") + os.fsencode(key[2])
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(token: str) -> tuple[int, str, str]:
    """The sort key a cursor holds.

    Raises:
        ValueError: Not a cursor this viewer gives.
    """
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        updated, sid, path = raw.split(b"\0", 2)
        text = updated.decode("ascii")
        if not text.lstrip("-").isdigit():
            raise ValueError(text)
        return int(text), sid.decode("utf-8", "surrogatepass"), os.fsdecode(path)
    except (ValueError, binascii.Error) as exc:
        raise ValueError(f"cursor {token[:80]!r} is not one this viewer gives") from exc


def mentions(path: str, needle: bytes) -> tuple[bool, int]:
    """Whether the file holds ``needle`` (lower-case JSON text), and the bytes read to tell.

    The text is looked for as it is stored (JSON-escaped), ASCII case ignored,
    in 1 MiB blocks: one pass over the bytes and no parsing.
    """
    read = 0
    try:
        with open(path, "rb") as stream:
            tail = b""
            while block := stream.read(_BLOCK_BYTES):
                read += len(block)
                window = tail + block.lower()
                if needle in window:
                    return True, read
                tail = window[-(len(needle) - 1) :] if len(needle) > 1 else b""
    except OSError:
        pass
    return False, read


# -- the index ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Filters:
    """What a page of the list is narrowed to.

    Attributes:
        q: Matches the title, ID, model, source, agent, tools or file name,
            else the text of the records (case ignored).
        text: Matches the text of the records only.
        source: One source (``loopscribe``, ``claude-code``, ...).
        status: One status (``running``, ``idle``, ...).
        errors: Only sessions with a failed call.
    """

    q: str | None = None
    text: str | None = None
    source: str | None = None
    status: str | None = None
    errors: bool = False

    def cheap(self, entry: Entry) -> bool:
        """The filters that need nothing but the entry."""
        return (
            (self.source is None or entry.source == self.source)
            and (self.status is None or entry.status == self.status)
            and (not self.errors or entry.errors > 0)
        )


class Busy(LoopscribeError):
    """Raised by a reader that is not ``patient`` when a request is reading the file."""


Reader = Callable[[str, int, bool], Entry]
"""Reads a session file into its entry: ``(path, stamp, patient)``.

The catalog's reader raises :class:`Busy` when a request holds the file's
timeline and ``patient`` is false, and anything else on a file that is no
session."""


class SessionIndex:
    """The session files below a folder, indexed by a background thread and paged.

    Thread-safe. A pass starts when a request asks for one (:meth:`request`)
    and none is running; it walks the folder, removes what is gone, and
    reads what is new or changed. A session whose status is ``running`` is
    read again by every pass, since its status may change while its file
    does not.

    Args:
        root: A folder (searched recursively) or one file.
        read: Reads one file into its :class:`Entry`.
        on_file: Called on the indexing thread after each file was read (a
            progress hook).
    """

    def __init__(
        self, root: Path, read: Reader, on_file: Callable[[Path], object] | None = None
    ) -> None:
        self.root = root
        self._read = read
        self._on_file = on_file
        self._cond = threading.Condition(threading.Lock())
        self._entries: dict[str, Entry] = {}
        self._by_id: dict[str, tuple[str, ...]] = {}
        self._by_trace: dict[int, tuple[str, ...]] = {}
        self._errors: dict[str, str] = {}
        self._ordered: list[Entry] | None = None
        self._pending = 0  # entries found, not read yet
        self._requested = self._started = self._finished = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        self._walked = 0  # files the current pass found so far
        self._walked_once = False
        self.files_read = 0
        """How many times a file was read for the index: unchanged files are not."""

    # -- passes ------------------------------------------------------------------------

    def request(self) -> int:
        """Ask for a pass that starts after this call; returns its number for :meth:`wait`."""
        with self._cond:
            ticket = self._started + 1
            self._requested = max(self._requested, ticket)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._work, name="loopscribe-viewer-index", daemon=True
                )
                self._thread.start()
            return ticket

    def wait(self, ticket: int, timeout: float | None, *, quick: bool = False) -> bool:
        """Wait until pass ``ticket`` finished; returns whether it did.

        Args:
            ticket: From :meth:`request`.
            timeout: Seconds (``None``: as long as it takes).
            quick: Stop waiting as soon as the pass has found more than
                :data:`QUICK_FILES` files: a large folder is listed as
                indexed so far.
        """

        def done() -> bool:
            return (
                self._finished >= ticket
                or self._closed
                or (quick and (self._walked > QUICK_FILES or len(self._entries) > QUICK_FILES))
            )

        with self._cond:
            self._cond.wait_for(done, timeout)
            return self._finished >= ticket

    def wait_complete(self, timeout: float | None) -> bool:
        """Wait until every file found was read once; returns whether it was."""
        if not self._started:
            self.request()
        with self._cond:
            self._cond.wait_for(lambda: self.complete or self._closed, timeout)
            return self.complete

    @property
    def complete(self) -> bool:
        """The folder was walked, and every file found was read (or failed)."""
        return self._walked_once and self._pending == 0

    def close(self) -> None:
        """Stop indexing after the file being read (a later :meth:`request` does nothing)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                if self._closed or self._requested <= self._started:
                    self._thread = None
                    self._cond.notify_all()
                    return
                self._started += 1
                number = self._started
            try:
                self._pass()
            except Exception:  # a pass that fails is retried by the next request, never fatal
                logger.exception("indexing %s failed", shown_path(self.root))
            finally:
                with self._cond:
                    self._finished = number
                    self._cond.notify_all()

    def _pass(self) -> None:
        with self._cond:
            self._walked = 0
        found = self._walk()
        known = self._entries
        peeked = {path: _peek(path) for path in found if path not in known}
        with self._cond:
            for gone in [p for p in self._entries if p not in found]:
                self._put(gone, None)
            for gone in [p for p in self._errors if p not in found]:
                del self._errors[gone]
            todo = []
            for path, (stamp, mtime_ns) in found.items():
                old = self._entries.get(path)
                if old is None:
                    self._put(path, Entry(path, stamp, peeked.get(path) or ""))
                elif (
                    old.stamp == stamp
                    and old.status != "running"
                    and not (old.row is None and not old.failed)
                ):
                    continue
                todo.append((mtime_ns, path, stamp))
            self._walked_once = True
            self._cond.notify_all()
        # The newest first: the first page of the list is right long before the last file.
        todo.sort(reverse=True)
        later = []
        for item in todo:
            if self._read_one(*item[1:], patient=False) is Busy:
                later.append(item)
        # A file a request was reading (perhaps a large one, for the first time): now that
        # the rest is done, wait for that read and take it over rather than read it twice.
        for item in later:
            self._read_one(*item[1:], patient=True)

    def _read_one(self, path: str, stamp: int, *, patient: bool) -> type[Busy] | None:
        if self._closed:
            return None
        error = None
        try:
            entry = self._read(path, stamp, patient)
        except Busy:
            return Busy
        except Exception as exc:  # one file, whatever is wrong with it, never stops the rest
            if not isinstance(exc, LoopscribeError | OSError):
                logger.debug("reading %s for the index failed", path, exc_info=True)
            entry, error = Entry(path, stamp, "", failed=True), str(exc) or repr(exc)
        with self._cond:
            self.files_read += 1
            if path in self._entries:  # not removed meanwhile
                self._put(path, entry)
                if error is None:
                    self._errors.pop(path, None)
                else:
                    self._errors[path] = error
            self._cond.notify_all()
        if self._on_file is not None:
            self._on_file(Path(path))
        return None

    def _walk(self) -> dict[str, tuple[int, int]]:
        """Every session file below the root: ``*.jsonl``, not span files, not in ``*.artifacts``.

        Folders are not followed through symlinks; a file symlink is followed
        only when it leads to a file inside the folder.

        Returns:
            By path: the file's :func:`stamp_of` and modification time (ns),
            not the whole ``stat`` (which takes about 700 bytes a file).
        """
        root = self.root
        if not root.is_dir():
            try:
                st = root.stat()
                return {str(root): (stamp_of(st), st.st_mtime_ns)}
            except OSError:
                return {}
        inside = root.resolve()
        found: dict[str, tuple[int, int]] = {}
        stack = [str(root)]
        while stack:
            folder = stack.pop()
            try:
                scan = os.scandir(folder)
            except OSError:
                continue
            with scan:
                for item in scan:
                    name = item.name
                    try:
                        if item.is_dir(follow_symlinks=False):
                            if not name.endswith(".artifacts"):
                                stack.append(item.path)
                            continue
                        if not name.endswith(".jsonl") or name.endswith(".otlp.jsonl"):
                            continue
                        st = item.stat()
                        if not stat.S_ISREG(st.st_mode):
                            continue
                        if item.is_symlink() and not Path(item.path).resolve().is_relative_to(
                            inside
                        ):
                            continue  # a symlink that leads out of the served folder
                    except OSError:
                        continue
                    found[item.path] = (stamp_of(st), st.st_mtime_ns)
                    self._walked += 1
                    if self._walked % QUICK_FILES == 0:
                        with self._cond:
                            self._cond.notify_all()  # a quick wait stops here
        return found

    def _put(self, path: str, entry: Entry | None) -> None:
        """Replace a path's entry (``None``: remove it), keeping the lookups in step."""
        old = self._entries.pop(path, None)
        if old is not None:
            self._pending -= old.row is None and not old.failed
            _unlink(self._by_id, old.session_id, path)
            for trace in old.traces:
                _unlink(self._by_trace, trace, path)
        if entry is not None:
            self._entries[path] = entry
            self._pending += entry.row is None and not entry.failed
            if entry.session_id:
                self._by_id[entry.session_id] = (*self._by_id.get(entry.session_id, ()), path)
            for trace in entry.traces:
                self._by_trace[trace] = (*self._by_trace.get(trace, ()), path)
        if old is not None or entry is not None:
            self._ordered = None

    # -- lookups -------------------------------------------------------------------------

    def paths_of(self, session_id: str) -> tuple[str, ...]:
        """The files that hold (or, not read yet, start with) ``session_id``."""
        with self._cond:
            return self._by_id.get(session_id, ())

    def paths_of_trace(self, trace: int) -> tuple[str, ...]:
        """The files with a run of ``trace``, as last indexed."""
        with self._cond:
            return self._by_trace.get(trace, ())

    def progress(self) -> dict[str, Any] | None:
        """How far the files found were read: ``None`` once every one was.

        Returns:
            ``done`` and ``total`` (files read, files found), and ``walking``
            while the first walk of the folder is still finding files (the
            total then grows). A changed file being read again is listed as
            it was last read, so it is not counted here.
        """
        with self._cond:
            if self.complete:
                return None
            if not self._walked_once:
                total = max(self._walked, len(self._entries))
                return {"done": 0, "total": total, "walking": True}
            total = len(self._entries)
            return {"done": total - self._pending, "total": total, "walking": False}

    def progress_text(self) -> str:
        """How far indexing got, in words."""
        now = self.progress()
        if now is None:
            count = self.counts()[0]
            return f"{count:,} session file{'s' if count != 1 else ''} indexed"
        if now["walking"]:
            return f"still looking for session files ({now['total']:,} found so far)"
        return f"still indexing: {now['done']:,} of {now['total']:,} session files read"

    def counts(self) -> tuple[int, int]:
        """Files indexed and files that could not be read."""
        with self._cond:
            return len(self._entries), len(self._errors)

    def skipped(self, limit: int | None = None) -> tuple[dict[str, str], int]:
        """Files that could not be read as sessions (the first ``limit``), and how many."""
        with self._cond:
            items = sorted(self._errors.items())
        return dict(items[:limit] if limit is not None else items), len(items)

    # -- pages ---------------------------------------------------------------------------

    def usage(self) -> dict[str, Any]:
        """Tokens and cost per day and model over every indexed session (the usage chart)."""
        with self._cond:
            entries = list(self._entries.values())
        return usage_json(row for entry in entries for row in entry.usage)

    def _ordered_entries(self) -> list[Entry]:
        with self._cond:
            if self._ordered is None:
                # A new list each time: a page walks its snapshot without the lock.
                self._ordered = sorted((e for e in self._entries.values() if e.row), key=_key)
            return self._ordered

    def page(
        self,
        filters: Filters,
        *,
        cursor: tuple[int, str, str] | None = None,
        limit: int = PAGE_SIZE,
        budget_bytes: int = SEARCH_BUDGET_BYTES,
    ) -> dict[str, Any]:
        """One page of the indexed sessions, newest first, after ``cursor``.

        Returns:
            ``sessions`` (rows as :class:`orjson.Fragment`), ``next`` (the
            cursor of the next page, or ``None``), ``matched`` (sessions that
            pass the filters; ``None`` when a search of the records would be
            needed to count them), ``count`` (sessions indexed),
            ``searched`` (sessions whose records this page read) and
            ``partial`` (the search stopped at its byte budget: ``next``
            goes on from there), ``sources`` and ``statuses`` (the values
            the filters offer).
        """
        ordered = self._ordered_entries()
        start = len(ordered) if cursor is None else bisect.bisect_left(ordered, cursor, key=_key)
        q = filters.q.lower() if filters.q else None
        needle = filters.text or filters.q
        raw = orjson.dumps(needle)[1:-1].lower() if needle else b""
        rows: list[Entry] = []
        searched = 0
        partial = False
        last: tuple[int, str, str] | None = None
        for index in range(start - 1, -1, -1):
            entry = ordered[index]
            if not filters.cheap(entry):
                last = entry.key
                continue
            hit = True
            if filters.text or (q and q not in entry.hay):
                if budget_bytes <= 0 and searched:
                    partial = True
                    break
                if raw:
                    hit, read = mentions(entry.path, raw)
                    budget_bytes -= read
                    searched += 1
            last = entry.key
            if hit:
                rows.append(entry)
                if len(rows) > limit:
                    break
        more = len(rows) > limit
        rows = rows[:limit]
        after = rows[-1].key if more else (last if partial else None)
        sources: collections.Counter[str] = collections.Counter()
        statuses: collections.Counter[str] = collections.Counter()
        matched = 0
        for entry in ordered:
            sources[entry.source] += 1
            statuses[entry.status] += 1
            matched += filters.cheap(entry)
        return {
            "sessions": [orjson.Fragment(entry.row) for entry in rows if entry.row],
            "next": None if after is None else encode_cursor(after),
            "matched": None if (filters.q or filters.text) else matched,
            "count": len(ordered),
            "searched": searched,
            "partial": partial,
            "sources": sorted(s for s, _ in sources.most_common(_FILTER_VALUES)),
            "statuses": sorted(statuses),
        }


def _unlink(index: dict[Any, tuple[str, ...]], key: Any, path: str) -> None:
    paths = tuple(p for p in index.get(key, ()) if p != path)
    if paths:
        index[key] = paths
    else:
        index.pop(key, None)


def _peek(path: str) -> str | None:
    """The session ID a loopscribe file starts with, from its first bytes (a hint until read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            head = os.pread(fd, _PEEK_BYTES, 0)
        finally:
            os.close(fd)
    except OSError:
        return None
    match = _ID_HEAD.match(head)
    return match[1].decode() if match else None
