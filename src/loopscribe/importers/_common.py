"""What every transcript importer shares: source lines, the destination session, the cursor.

An importer is a state machine fed one source line at a time. It emits
operations (begin a run, record an event, close a run, append a session-level
fact) to a :class:`Destination`, which turns each into exactly one record of
the destination session file. Between imports the state machine's pairing
state (the open model response, tool calls still waiting for results, ...)
is kept in the cursor beside the destination, so the next import continues
as if the transcript had been read in one go:

* the source is read from the byte offset after the last complete line that
  was imported; an unfinished final line is left for the next import;
* a run still open at the end of an import stays open in the file (no
  ``run_close``) and the next import appends to it, so a turn split over two
  imports is one run, one trace, with the same spans as a single import;
* the cursor is replaced atomically after the destination is fsynced. If an
  import dies between the two, the next import finds more records in the
  destination than the cursor knows, replays the same source lines without
  writing until it has matched them one by one, and continues from there:
  records are never written twice.

Cursor file ``<destination>.import-cursor`` (JSON)::

    {"version": 1, "importer": "claude-code", "source": "/abs/x.jsonl",
     "head": "<sha256 of the source's first line>", "offset": 1234, "line": 17,
     "session_id": "<destination session>", "dest_seq": 42, "dest_size": 9876,
     "run_id": "<open run>" | null, "finished": false, "last_ts": "...",
     "state": {...importer-specific pairing state...}}
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import orjson

from .. import events as ev
from .._errors import LoopscribeError
from .._files import make_private_dir
from .._locks import fcntl
from .._model import Event, Execution, Record
from .._reader import read
from .._redact import LineRedactor, Redactor
from .._session import Observer, Run, Session
from ..workspace import IMPORT_SETTLE_SECONDS
from ._batch import save_or_owe

logger = logging.getLogger("loopscribe.importers")

CURSOR_SUFFIX = ".import-cursor"
CURSOR_VERSION = 1
SOURCE_EVENT = "source_event"
"""Record type of a source line the importer keeps as it is (an unknown type)."""
DEFAULT_SETTLE_SECONDS = IMPORT_SETTLE_SECONDS
"""A transcript unchanged for this long is taken as finished (see ``finished=``)."""
_LOOK_AHEAD_BYTES = 16 << 20
"""How far :meth:`Importer.first_ts` reads for a first timestamp before giving up."""

_BUFFER_BYTES = 1 << 16
LEFTOVER_SUFFIX = ".leftover"
"""What a destination without a cursor is renamed to before importing again."""
_HEAD_BYTES = 1 << 20
"""Enough of a session file to hold its ``session_start`` line."""

_PROGRESS_STEP = 1 << 20

Write = Callable[[str, Execution | None, Mapping[str, Any], datetime | None], None]
"""Writes one record into the open run: kind, execution, data, source time."""


class ImportStateError(LoopscribeError, ValueError):
    """The source, the destination and the cursor beside it do not agree.

    The message names the files and what to do, usually: delete the
    destination and its cursor and import the transcript again.
    """


def import_redactor(redact: LineRedactor | bool | None) -> LineRedactor | None:
    """What an import's ``redact=`` means: ``True`` is :meth:`Redactor.default`.

    Imports scrub by default: transcripts are full of pasted keys, and an
    import is offline, so the token patterns' cost does not matter there.
    ``False`` or ``None`` turns redaction off; a callable is used as it is.
    """
    if redact is True:
        return Redactor.default()
    if redact is False or redact is None:
        return None
    return redact


def cursor_path(destination: Path) -> Path:
    """Where the import cursor of a destination session file lives: beside it."""
    return destination.with_name(destination.name + CURSOR_SUFFIX)


def parse_ts(value: Any) -> datetime | None:
    """A source timestamp (ISO 8601, ``Z`` allowed) as an aware datetime; ``None`` if absent."""
    if type(value) is not str:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        return None
    return dt if dt.tzinfo is not None else None


def format_ts(value: datetime | None) -> str | None:
    """The inverse of :func:`parse_ts`, for the cursor."""
    return None if value is None else value.isoformat()


def head_digest(path: Path) -> str | None:
    """SHA-256 of the first complete line of ``path``, which identifies a transcript."""
    with open(path, "rb") as stream:
        first = stream.readline()
    if not first.endswith(b"\n"):
        return None
    return hashlib.sha256(first).hexdigest()


MAX_LINE_DEPTH = 240
"""Deeper source lines are kept whole as text: a record nests them a few levels more,
and the codec records nothing below 253 levels."""


def too_deep(raw: bytes, obj: Any) -> bool:
    """Whether a parsed line nests deeper than :data:`MAX_LINE_DEPTH` (cheap for most lines)."""
    if raw.count(b"{") + raw.count(b"[") < MAX_LINE_DEPTH:
        return False
    level = [(obj, 1)]
    while level:
        value, depth = level.pop()
        if depth > MAX_LINE_DEPTH:
            return True
        if isinstance(value, dict):
            level.extend((v, depth + 1) for v in value.values() if isinstance(v, dict | list))
        elif isinstance(value, list):
            level.extend((v, depth + 1) for v in value if isinstance(v, dict | list))
    return False


def _digest_prefix(path: Path, size: int) -> Any:
    """A running SHA-256 of the first ``size`` bytes of ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as stream:
        left = size
        while left > 0:
            chunk = stream.read(min(left, _BUFFER_BYTES))
            if not chunk:
                break
            digest.update(chunk)
            left -= len(chunk)
    return digest


def read_lines(path: Path, offset: int, line: int) -> Iterator[tuple[int, int, bytes]]:
    """Yield ``(line_number, end_offset, raw)`` for each complete line after ``offset``.

    Reading stops before a final line without ``\\n``: the agent is still
    writing it, and the next import reads it whole.
    """
    with open(path, "rb", buffering=_BUFFER_BYTES) as stream:
        if offset:
            stream.seek(offset)
        for raw in stream:
            if raw[-1:] != b"\n":
                return
            offset += len(raw)
            line += 1
            yield line, offset, raw


def nested_type(raw: bytes, marker: bytes) -> bytes | None:
    """The ``type`` of the first nested object of a line, if it directly follows ``marker``.

    ``marker`` is the raw JSON text before that object, e.g.
    ``b'"type":"progress","data":'``. The answer is certain, not a guess:
    when the first ``{`` after the line's opening one is the object right
    after ``marker``, nothing before it is nested, so ``marker`` is at the top
    level of the line (inside a JSON string its quotes would be escaped).
    Returns ``None`` when that does not hold; the caller then parses the line.
    """
    at = raw.find(marker)
    if at < 0:
        return None
    brace = at + len(marker)
    if raw.find(b"{", 1) != brace or not raw.startswith(b'{"type":"', brace):
        return None
    name_start = brace + 9
    name_end = raw.find(b'"', name_start)
    return raw[name_start:name_end] if name_end > name_start else None


_TAG_KEY = b'"$ls"'


def has_reserved_key(raw: bytes) -> bool:
    """Whether a source line may use the codec's reserved key ``$ls``.

    Most lines hold no ``$`` at all, which memchr finds several times faster
    than a search for the whole key.
    """
    return raw.find(b"$") >= 0 and _TAG_KEY in raw


def strip_reserved(value: Any) -> Any:
    """Rename the codec's reserved key ``$ls`` wherever a value uses it.

    The importers no longer need this (the codec escapes the key and it reads
    back equal); it is kept for callers that want the renamed form.
    """
    if isinstance(value, dict):
        return {
            ("$ls (renamed by the importer)" if k == "$ls" else k): strip_reserved(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [strip_reserved(v) for v in value]
    return value


# -- the report -------------------------------------------------------------------


@dataclass(slots=True)
class ImportReport:
    """What one import of one transcript did.

    Token counts follow the OpenTelemetry GenAI conventions: ``input_tokens``
    includes cached prompt tokens (read and written), which are also given
    apart. Usage repeated across the lines of one response is counted once.
    """

    importer: str
    source: Path
    destination: Path
    session_id: str | None = None
    lines: int = 0
    """Source lines read (main transcript and subagent files)."""
    bytes: int = 0
    """Source bytes read."""
    records: int = 0
    """Records written to the destination."""
    model_calls: int = 0
    messages: int = 0
    tool_calls: int = 0
    tool_results: int = 0
    unpaired_calls: int = 0
    """Tool calls that will never get a result (their turn ended without one)."""
    unpaired_results: int = 0
    """Tool results whose call was not seen."""
    pending_calls: int = 0
    """Tool calls still waiting for a result when this import stopped."""
    subagents: int = 0
    compactions: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    invalid_lines: int = 0
    """Complete source lines that were not JSON objects (kept as source events)."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Source lines not recorded on purpose, by type (see docs/importers.md)."""
    unknown: Counter[str] = field(default_factory=Counter)
    """Source lines of types the importer does not know, kept as ``source_event`` records."""
    finished: bool = False
    """The transcript was taken as finished: its last run is closed."""
    stopped: bool = False
    """The import was asked to stop early; the next import continues."""
    error: str | None = None
    """The first source line that could not be imported (file and line), if any; the
    line is kept as an ``invalid_line`` source event and the import goes on."""
    bad_lines: int = 0
    """Source lines that could not be imported (see :attr:`error`)."""

    @property
    def up_to_date(self) -> bool:
        """Nothing new was found in the transcript."""
        return self.records == 0 and self.lines == 0

    def add_usage(self, usage: Mapping[str, Any] | None, *, anthropic: bool) -> None:
        """Count one response's usage."""
        if not usage:
            return
        inp = _int(usage.get("input_tokens"))
        out = _int(usage.get("output_tokens"))
        if anthropic:
            read_ = _int(usage.get("cache_read_input_tokens"))
            created = _int(usage.get("cache_creation_input_tokens"))
            inp += read_ + created
        else:
            read_ = _int(usage.get("cached_input_tokens"))
            created = 0
        self.input_tokens += inp
        self.output_tokens += out
        self.cache_read_tokens += read_
        self.cache_creation_tokens += created

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object."""
        return {
            "importer": self.importer,
            "source": str(self.source),
            "destination": str(self.destination),
            "session_id": self.session_id,
            "lines": self.lines,
            "bytes": self.bytes,
            "records": self.records,
            "model_calls": self.model_calls,
            "messages": self.messages,
            "tool_calls": self.tool_calls,
            "tool_results": self.tool_results,
            "unpaired_calls": self.unpaired_calls,
            "unpaired_results": self.unpaired_results,
            "pending_calls": self.pending_calls,
            "subagents": self.subagents,
            "compactions": self.compactions,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_creation_tokens": self.cache_creation_tokens,
            "invalid_lines": self.invalid_lines,
            "skipped": dict(sorted(self.skipped.items())),
            "unknown": dict(sorted(self.unknown.items())),
            "finished": self.finished,
            "stopped": self.stopped,
            "error": self.error,
            "bad_lines": self.bad_lines,
        }


def _int(value: Any) -> int:
    return value if type(value) is int and value > 0 else 0


# -- the cursor -------------------------------------------------------------------


@dataclass(slots=True)
class Cursor:
    """How far one transcript was imported, and the pairing state at that point."""

    importer: str
    source: str
    head: str | None = None
    offset: int = 0
    line: int = 0
    session_id: str | None = None
    dest_seq: int = 0
    dest_size: int = 0
    run_id: str | None = None
    finished: bool = False
    last_ts: str | None = None
    record_ts: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    prefix: str | None = None
    """SHA-256 of the transcript's first ``offset`` bytes: a rewrite shows there."""

    @classmethod
    def load(cls, path: Path) -> Cursor | None:
        """Read a cursor file; ``None`` when there is none."""
        try:
            obj = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except orjson.JSONDecodeError as exc:
            raise ImportStateError(
                f"{path}: the import cursor is damaged ({exc}); delete it and the session "
                f"file beside it ({path.name.removesuffix(CURSOR_SUFFIX)}) to import the "
                "transcript again"
            ) from None
        if not isinstance(obj, dict) or obj.get("version") != CURSOR_VERSION:
            raise ImportStateError(
                f"{path}: not an import cursor of version {CURSOR_VERSION}; delete it and the "
                "session file beside it to import the transcript again"
            )
        try:
            return cls._from_json(obj)
        except (TypeError, ValueError) as exc:
            raise ImportStateError(
                f"{path}: the import cursor has the wrong shape ({exc}); delete it and the "
                f"session file beside it ({path.name.removesuffix(CURSOR_SUFFIX)}) to import "
                "the transcript again"
            ) from None

    @classmethod
    def _from_json(cls, obj: dict[str, Any]) -> Cursor:
        def text(name: str) -> str | None:
            value = obj.get(name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string, got {type(value).__name__}")
            return value

        def number(name: str) -> int:
            value = obj.get(name, 0)
            if type(value) is not int or value < 0:
                raise TypeError(f"{name} must be an integer >= 0, got {value!r:.40}")
            return value

        state = obj.get("state") or {}
        if not isinstance(state, dict):
            raise TypeError(f"state must be an object, got {type(state).__name__}")
        return cls(
            importer=str(text("importer")),
            source=str(text("source")),
            head=text("head"),
            offset=number("offset"),
            line=number("line"),
            session_id=text("session_id"),
            dest_seq=number("dest_seq"),
            dest_size=number("dest_size"),
            run_id=text("run_id"),
            finished=obj.get("finished") is True,
            last_ts=text("last_ts"),
            record_ts=text("record_ts"),
            state=state,
            prefix=text("prefix"),
        )

    def to_json(self) -> dict[str, Any]:
        """The cursor as it is stored."""
        return {
            "version": CURSOR_VERSION,
            "importer": self.importer,
            "source": self.source,
            "head": self.head,
            "offset": self.offset,
            "line": self.line,
            "session_id": self.session_id,
            "dest_seq": self.dest_seq,
            "dest_size": self.dest_size,
            "run_id": self.run_id,
            "finished": self.finished,
            "last_ts": self.last_ts,
            "record_ts": self.record_ts,
            "state": self.state,
            "prefix": self.prefix,
        }

    def save(self, path: Path, session: Path | None = None) -> None:
        """Replace the cursor file atomically (write, fsync, rename), mode 0600.

        Inside a pass of many imports (:class:`~._batch.SyncBatch`) the cursor
        is saved when the pass is paid, after ``session`` (the file it points
        into) is fsynced.
        """
        save_or_owe(path, orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2), session)


# -- the destination --------------------------------------------------------------


class Destination:
    """The destination session file, opened on the first operation.

    Every operation writes exactly one record. After an interrupted import
    (records written, cursor not saved) the first operations are checked
    against the records already there instead of being written again.

    Run lifecycle records carry source timestamps
    (``Session.begin_run(timestamp=)``, ``Run.close(timestamp=)``,
    ``Session.annotate(timestamp=)``), and a run left open by one import is
    continued by the next (``Run.detach()``, ``Session.resume_run(gap=False)``).

    An import writes in blocks (a buffered Session, ``Session.create(buffered=True)``),
    since it can be done again from its cursor. A
    ``live`` writer (the Claude Agent SDK session store) writes each record at
    once, its ``observers`` see the records as they are written, and when it
    reopens a file it matches the records there as the normal way to continue
    (no warning of an interrupted import).
    """

    def __init__(
        self,
        path: Path,
        cursor: Cursor | None,
        metadata: Callable[[], Mapping[str, Any]],
        report: ImportReport,
        *,
        observers: Iterable[Observer] = (),
        live: bool = False,
        redact: LineRedactor | None = None,
    ) -> None:
        self.path = path
        self._cursor = cursor
        self._redact = redact
        self._observers = tuple(observers)
        self._live = live
        self._metadata = metadata
        self._report = report
        self._session: Session | None = None
        self._run_id: str | None = None if cursor is None else cursor.run_id
        self._run: Run | None = None
        self._replay: Iterator[Record] | None = None
        self._skip = 0
        self.write: Write | None = None
        """Writes a record into the open run while records are written (not matched after
        a crash): the fast path. An import's is :meth:`BulkWriter.write`, which builds no
        Record; a live writer's records each through :meth:`Run.record`."""

    def scrubbed(self, value: Any) -> Any:
        """``value`` (JSON) as the session's redaction leaves it in a record.

        For what is derived from the transcript but not written as it is: a
        title cut from a prompt (cut first, a secret would be cut in half and
        no longer found), the pairing state kept in the cursor.
        """
        if self._redact is None:
            return value
        record = {"type": "scrub", "data": value}
        try:
            line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError:  # a lone surrogate, an integer past 64 bits
            try:
                line = json.dumps(record).encode() + b"\n"
            except (TypeError, ValueError):
                return value  # not JSON: the codec keeps none of it either
        scrubbed = self._redact(line)
        return value if scrubbed == line else json.loads(scrubbed)["data"]

    @property
    def opened(self) -> bool:
        """Whether any operation reached the destination."""
        return self._session is not None

    @property
    def run_open(self) -> bool:
        """Whether records currently go into an open run."""
        return self._run_id is not None

    @property
    def run_id(self) -> str | None:
        """The open run, if any."""
        return self._run_id

    def ensure_open(self) -> Session:
        """Open (or create) the destination session now."""
        if self._session is not None:
            return self._session
        cursor = self._cursor
        if cursor is None:
            if self.path.exists():
                self._remove_leftover()
            session = Session.create(
                self.path,
                metadata=self._metadata(),
                observers=self._observers,
                redact=self._redact,
                buffered=not self._live,
            )
        else:
            if not self.path.exists():
                raise ImportStateError(
                    f"{self.path}: missing, but its import cursor exists; delete "
                    f"{cursor_path(self.path)} to import the transcript again"
                )
            session = Session.open(
                self.path,
                observers=self._observers,
                redact=self._redact,
                buffered=not self._live,
            )
            if session.id != cursor.session_id or session.next_seq < cursor.dest_seq:
                session.close()
                raise ImportStateError(
                    f"{self.path}: does not match its import cursor (session "
                    f"{session.id}, {session.next_seq} records; the cursor expects session "
                    f"{cursor.session_id} with at least {cursor.dest_seq}); delete the file "
                    "and its cursor to import the transcript again"
                )
            if session.next_seq > cursor.dest_seq:
                # An earlier import wrote these records but died before saving the cursor.
                self._skip = session.next_seq - cursor.dest_seq
                self._replay = (
                    r for r in read(self.path, decode=False) if r.seq >= cursor.dest_seq
                )
                if not self._live:
                    logger.warning(
                        "%s: %d records after the cursor (an interrupted import); matching "
                        "them against the transcript instead of writing them again",
                        self.path,
                        self._skip,
                    )
        self._session = session
        self._update_writing()
        return session

    def _remove_leftover(self) -> None:
        """Remove what a failed first import of this transcript left, or refuse.

        A first import that died (crash, SIGKILL, full disk, bad data) before
        saving its cursor leaves a session without one. When no writer holds
        it and its ``session_start`` names this transcript, it is that
        leftover: it is moved aside (``*.jsonl.leftover``, which no reader
        lists) and the import starts again. A file another
        process is writing is never touched, and never to be deleted.
        """
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ImportStateError(
                    f"{self.path}: another import is writing this session right now (it holds "
                    "the writer lock); let it finish, then run the import again"
                ) from None
            head = os.pread(fd, _HEAD_BYTES, 0)
        finally:
            os.close(fd)
        first, newline, _ = head.partition(b"\n")
        ours = not newline  # not even a complete first line: a first import cut short
        if newline:
            try:
                start = orjson.loads(first)
                meta = start["data"]["metadata"]
                ours = meta["import"]["file"] == self._metadata()["import"]["file"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                ours = False
        if not ours:
            raise ImportStateError(
                f"{self.path}: exists, but has no import cursor beside it "
                f"({cursor_path(self.path).name}) and was not started by an import of this "
                "transcript; move it out of the import folder, then import again"
            )
        aside = self.path.with_name(self.path.name + LEFTOVER_SUFFIX)
        logger.warning(
            "%s: has no cursor (a first import that did not finish, or a lost cursor); "
            "moved to %s, importing the transcript again",
            self.path,
            aside.name,
        )
        os.replace(self.path, aside)

    def _replayed(self, kind: str, execution: Execution | None) -> Record | None:
        """The existing record an operation corresponds to, while recovering."""
        if not self._skip:
            return None
        assert self._replay is not None
        record = next(self._replay, None)
        same_execution = execution is None or (
            record is not None
            and record.execution is not None
            and record.execution.id == execution.id
        )
        if record is None or record.type != kind or not same_execution:
            found = "nothing" if record is None else f"seq {record.seq} ({record.type})"
            raise ImportStateError(
                f"{self.path}: the records left by an interrupted import do not match the "
                f"transcript (expected {kind}, found {found}); delete the file and its cursor "
                "to import the transcript again"
            )
        self._skip -= 1
        return record

    @property
    def unmatched(self) -> int:
        """Records of an interrupted import not matched yet (the cursor must not move)."""
        return self._skip

    def _update_writing(self) -> None:
        """Once nothing is left to match, continue the open run for real."""
        if self._skip or self._session is None:
            self.write = None
            return
        if self._run_id is not None and self._run is None:
            # The transcript holds every event: continuing is no gap (no run_resume).
            self._run = self._session.resume_run(self._run_id, gap=False)
        run = self._run
        if run is None:
            self.write = None
        elif self._live:
            self.write = _recorder(run)
        else:
            self.write = run.bulk().write

    def record(self, event: Event) -> None:
        """Record a host event in the open run."""
        self.ensure_open()
        if self._run_id is None:
            raise AssertionError("importer bug: a record outside a run")
        if self._replayed(event.type, event.execution) is not None:
            self._update_writing()
            return
        assert self._run is not None
        self._run.record(event)
        self._report.records += 1

    def begin_run(self, timestamp: datetime | None) -> None:
        """Start a run whose ``run_start`` carries the source timestamp."""
        session = self.ensure_open()
        if self._run_id is not None:
            raise AssertionError("importer bug: a run is already open")
        existing = self._replayed(ev.RUN_START, None)
        if existing is not None:
            assert existing.run_id is not None
            self._run_id = existing.run_id
        else:
            self._run = session.begin_run(timestamp=timestamp)
            self._run_id = self._run.id
            self._report.records += 1
        self._update_writing()

    def close_run(self, timestamp: datetime | None) -> None:
        """Write ``run_close`` with the source timestamp."""
        self.ensure_open()
        if self._run_id is None:
            raise AssertionError("importer bug: no run to close")
        if self._replayed(ev.RUN_CLOSE, None) is None:
            assert self._run is not None
            # The transcript can be imported again: one fsync before the cursor
            # is saved covers every turn of this import.
            self._run.close(timestamp=timestamp, sync=False)
            self._report.records += 1
        self._run = None
        self._run_id = None
        self._update_writing()

    def annotate(self, kind: str, data: Mapping[str, Any], timestamp: datetime | None) -> None:
        """Append a session-level fact (``compaction``) with the source timestamp."""
        session = self.ensure_open()
        if self._replayed(kind, None) is None:
            session.annotate(kind, data, timestamp=timestamp)
            self._report.records += 1
        self._update_writing()

    def close(self) -> tuple[int, int]:
        """Leave an open run open, fsync and close; returns ``(next_seq, size)``."""
        session = self._session
        if session is None:
            raise AssertionError("importer bug: closing an unopened destination")
        if self._skip:
            logger.warning(
                "%s: %d records of an interrupted import are not matched yet; the cursor "
                "stays where it was, and the next import matches them again",
                self.path,
                self._skip,
            )
        if self._run is not None:
            self._run.detach()
        session.close()
        return session.next_seq, session.size

    def abort(self) -> None:
        """Close without saving anything more (after an error)."""
        session = self._session
        if session is not None and not session.closed:
            try:
                session.close()
            except LoopscribeError as exc:
                if exc is not session.error:  # the sticky error is the one being raised
                    logger.exception("%s: closing after a failed import", self.path)

    @property
    def session(self) -> Session | None:
        """The open Session, once opened."""
        return self._session


def _recorder(run: Run) -> Write:
    """A live writer's :data:`Write`: each record through :meth:`Run.record`, observed."""

    def write(
        kind: str, execution: Execution | None, data: Mapping[str, Any], timestamp: datetime | None
    ) -> None:
        run.record(Event(kind, execution, data, timestamp))

    return write


# -- the engine -------------------------------------------------------------------


Source = dict[str, Any]
"""A record's reference to its source line: ``{"file": ..., "line": ...}``."""


class Mapper:
    """A source format's mapping: a state machine fed one parsed line at a time.

    It emits operations to :attr:`dest` and counts what it did in
    :attr:`report`. :class:`Importer` drives it from a transcript file and a
    cursor; a live host (``loopscribe.adapters.claude_agent_sdk``) drives the
    same mapping with the lines it receives, so both write the same records.
    """

    name: ClassVar[str] = ""
    anthropic_usage: ClassVar[bool] = False

    def __init__(self, report: ImportReport) -> None:
        self.report = report
        self.last_ts: datetime | None = None
        """The latest source timestamp read: for lines that have none."""
        self.record_ts: datetime | None = None
        """The latest timestamp recorded: where a run without a closing line closes."""
        self.meta: dict[str, Any] = {}
        self.dest: Destination
        self._prefix = hashlib.sha256()
        """SHA-256 of the transcript up to where it was read."""
        self.title_from: str | None = None
        """What the session's title was taken from: ``summary``, ``user`` or nothing yet."""
        self._looked_ahead = False

    # -- for subclasses ------------------------------------------------------------

    def handle(self, obj: Any, line: int, raw: bytes, source: Source) -> None:
        """Map one parsed source line (``obj`` may be any JSON value)."""
        raise NotImplementedError

    def finish(self) -> None:
        """The transcript is finished: end what is open and close the last run."""
        raise NotImplementedError

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore the pairing state saved by :meth:`dump_state`."""
        raise NotImplementedError

    def dump_state(self) -> dict[str, Any]:
        """The pairing state to keep in the cursor (JSON values only)."""
        raise NotImplementedError

    def pending_calls(self) -> int:
        """Tool calls still waiting for a result."""
        raise NotImplementedError

    # -- helpers for subclasses ----------------------------------------------------

    def emit(
        self,
        kind: str,
        execution: Execution | None,
        data: dict[str, Any],
        timestamp: datetime | None,
    ) -> None:
        """Record an event, opening a run first when none is open."""
        write = self.dest.write
        if write is not None:
            write(kind, execution, data, timestamp)
            self.report.records += 1
        else:
            if not self.dest.run_open:
                self.begin_run(timestamp)
            self.dest.record(Event(kind, execution, data, timestamp))
        if (
            timestamp is not None
            and timestamp is not self.record_ts
            and (self.record_ts is None or timestamp > self.record_ts)
        ):
            self.record_ts = timestamp

    def begin_run(self, timestamp: datetime | None) -> None:
        """Start a run (a turn of the agent) at ``timestamp``."""
        self.dest.begin_run(timestamp)
        if timestamp is not None and (self.record_ts is None or timestamp > self.record_ts):
            self.record_ts = timestamp

    def source_event(
        self,
        kind: str,
        obj: Any,
        source: Source,
        timestamp: datetime | None,
        execution: Execution | None = None,
    ) -> None:
        """Keep a source line the importer does not map, and count its type."""
        self.report.unknown[kind] += 1
        self.emit(
            SOURCE_EVENT,
            execution,
            {"agent": self.name, "type": kind, "line": obj, "source": source},
            timestamp,
        )

    def offer_title(
        self, text: Any, source: Source, timestamp: datetime | None, *, summary: bool
    ) -> None:
        """Title the session: the agent's own summary wins over the first user message.

        The title goes into a ``session_update`` record, as ``Workspace.update`` writes it.
        """
        if self.title_from is not None and not summary:
            return
        title = title_text(self.dest.scrubbed(text))
        if title is None:
            return
        self.dest.annotate(
            ev.SESSION_UPDATE, {"fields": {"title": title}, "source": source}, timestamp
        )
        self.title_from = "summary" if summary else "user"

    def _state(self) -> dict[str, Any]:
        state = self.dump_state()
        if self.title_from is not None:
            state["title_from"] = self.title_from
        return state

    def line_ts(self, value: Any) -> datetime | None:
        """The timestamp of a line: its own, else the last one seen (never wall-clock time).

        Lines before the first one with a timestamp (a Claude Code ``summary``
        line heads a resumed session) take that first one's, when the source
        has it (:meth:`first_ts`).
        """
        ts = parse_ts(value)
        if ts is not None:
            self.last_ts = ts
            return ts
        if self.last_ts is None and not self._looked_ahead:
            self._looked_ahead = True
            self.last_ts = self.first_ts()
        return self.last_ts

    def first_ts(self) -> datetime | None:
        """The first timestamp the source holds, if it can tell (a file can; a stream cannot)."""
        return None


class Importer(Mapper):
    """Reads one transcript from its cursor and feeds the lines to :meth:`handle`.

    Subclasses implement the mapping; this class owns reading, the cursor,
    the destination, the decision that a transcript is finished, and stopping.
    """

    def __init__(
        self,
        source: Path,
        destination: Path,
        *,
        finished: bool | None = None,
        settle_seconds: float = DEFAULT_SETTLE_SECONDS,
        stop: threading.Event | None = None,
        on_progress: Callable[[int], None] | None = None,
        redact: LineRedactor | bool | None = True,
    ) -> None:
        self.source = source.absolute()
        self.file = str(self.source)
        self.destination = destination.absolute()
        self.cursor_path = cursor_path(self.destination)
        self._finished = finished
        self._settle_seconds = settle_seconds
        self._stop = stop
        self._on_progress = on_progress
        self._redact = import_redactor(redact)
        super().__init__(ImportReport(self.name, self.source, self.destination))

    def metadata(self) -> dict[str, Any]:
        """``session_start`` metadata of a new destination."""
        return {"source": self.name, "import": {"file": self.file, **self.meta}}

    def first_ts(self) -> datetime | None:
        """The ``timestamp`` of the transcript's first line that has one (its complete lines)."""
        read = 0
        for _number, _end, raw in read_lines(self.source, 0, 0):
            read += len(raw)
            if b'"timestamp"' in raw:
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                ts = parse_ts(obj.get("timestamp")) if isinstance(obj, dict) else None
                if ts is not None:
                    return ts
            if read > _LOOK_AHEAD_BYTES:
                break
        return None

    # -- the run -------------------------------------------------------------------

    def run(self) -> ImportReport:
        """Import what is new in the transcript.

        Raises:
            ImportStateError: The source, destination and cursor disagree.
            OSError: A file cannot be read or written.
        """
        cursor = Cursor.load(self.cursor_path)
        size = self.source.stat().st_size
        head = head_digest(self.source) if size else None
        if cursor is not None:
            if size >= cursor.offset:
                self._prefix = _digest_prefix(self.source, cursor.offset)
            self._check_source(cursor, size, head)
            self.load_state(cursor.state)
            title_from = cursor.state.get("title_from")
            self.title_from = title_from if isinstance(title_from, str) else None
            self.last_ts = parse_ts(cursor.last_ts)
            self.record_ts = parse_ts(cursor.record_ts)
            self.report.session_id = cursor.session_id
            self.report.finished = cursor.finished
        offset = 0 if cursor is None else cursor.offset
        line = 0 if cursor is None else cursor.line
        self.dest = Destination(
            self.destination, cursor, self.metadata, self.report, redact=self._redact
        )
        try:
            offset, line, new_lines = self._read(offset, line)
            finished = self._decide_finished(size)
            reopened = cursor is not None and not cursor.finished
            if finished and not self.report.stopped and (new_lines or reopened):
                self.finish()
                self.report.finished = True
            elif new_lines:
                self.report.finished = False
            if not self.dest.opened and cursor is None and new_lines:
                # Every line mapped to nothing: still create the session, so the
                # cursor remembers the transcript.
                self.dest.ensure_open()
            if not self.dest.opened:
                self._save_if_moved(cursor, offset, line, head)
                return self._done()
            dest_seq, dest_size = self.dest.close()
        except BaseException:
            self.dest.abort()
            raise
        session = self.dest.session
        assert session is not None
        self.report.session_id = session.id
        if self.dest.unmatched:
            # The transcript does not (yet) explain every record there; keep the
            # old cursor so the next import starts matching from the same place.
            return self._done()
        new = Cursor(
            importer=self.name,
            source=self.file,
            head=head if head is not None else (cursor.head if cursor else None),
            offset=offset,
            line=line,
            session_id=session.id,
            dest_seq=dest_seq,
            dest_size=dest_size,
            run_id=self.dest.run_id,
            finished=self.report.finished,
            last_ts=format_ts(self.last_ts),
            record_ts=format_ts(self.record_ts),
            state=self._saved_state(),
            prefix=self._prefix.hexdigest(),
        )
        new.save(self.cursor_path, self.destination)
        return self._done()

    def _done(self) -> ImportReport:
        self.report.pending_calls = self.pending_calls()
        return self.report

    def _save_if_moved(
        self, cursor: Cursor | None, offset: int, line: int, head: str | None
    ) -> None:
        """Nothing was written: advance the cursor only if skipped lines moved it."""
        if cursor is None or (cursor.offset == offset and cursor.finished == self.report.finished):
            return
        cursor.offset, cursor.line = offset, line
        cursor.finished = self.report.finished
        cursor.last_ts = format_ts(self.last_ts)
        cursor.record_ts = format_ts(self.record_ts)
        cursor.head = head or cursor.head
        cursor.state = self._saved_state()
        cursor.prefix = self._prefix.hexdigest()
        cursor.save(self.cursor_path)

    def _saved_state(self) -> dict[str, Any]:
        """The pairing state for the cursor, scrubbed as the session's records are.

        It can hold what the transcript said (Codex's turn context, a
        subagent's name); the cursor is a file beside the session, so no
        secret may reach it either.
        """
        state = self.dest.scrubbed(self._state())
        return state if isinstance(state, dict) else {}

    def _check_source(self, cursor: Cursor, size: int, head: str | None) -> None:
        fix = f"delete {self.destination} and {self.cursor_path} to import the transcript again"
        if cursor.importer != self.name:
            raise ImportStateError(
                f"{self.cursor_path}: written by the {cursor.importer} importer, not {self.name}; "
                f"import into another --out folder, or {fix}"
            )
        if size < cursor.offset:
            raise ImportStateError(
                f"{self.source}: is {size} bytes, shorter than the {cursor.offset} bytes "
                f"imported before (line {cursor.line}); the transcript was rewritten: {fix}"
            )
        if cursor.head is not None and head != cursor.head:
            raise ImportStateError(
                f"{self.source}:1: the first line differs from the transcript imported into "
                f"{self.destination}; it was replaced: {fix}"
            )
        if cursor.prefix is not None and self._prefix.hexdigest() != cursor.prefix:
            raise ImportStateError(
                f"{self.source}:{cursor.line}: the first {cursor.offset} bytes (lines 1 to "
                f"{cursor.line}) differ from those imported into {self.destination}; the "
                f"transcript was rewritten: {fix}"
            )

    def _decide_finished(self, size: int) -> bool:
        """Is the transcript's last turn over? By its own clock, not the file's mtime.

        The last timestamp the transcript holds older than the settle time
        closes the turn: a copy or a clone refreshes the mtime, never the
        content. A file left untouched for that long is finished too.
        """
        if self._finished is not None:
            return self._finished
        if size == 0:
            return False
        now = time.time()
        if now - self.source.stat().st_mtime >= self._settle_seconds:
            return True
        last = self.last_ts
        return last is not None and now - last.timestamp() >= self._settle_seconds

    def _read(self, offset: int, line: int) -> tuple[int, int, bool]:
        """Feed every new complete line to :meth:`handle`; returns the new position."""
        report = self.report
        file = self.file
        loads = orjson.loads
        skip = self.skip_line
        skipped = report.skipped
        progress = self._on_progress
        stop = self._stop
        start = offset
        next_progress = offset + _PROGRESS_STEP
        count = 0
        prefix = self._prefix.update
        for number, end, raw in read_lines(self.source, offset, line):
            if stop is not None and stop.is_set():
                report.stopped = True
                break
            count += 1
            offset, line = end, number
            prefix(raw)
            label = skip(raw)
            if label is not None:
                skipped[label] += 1
                continue
            try:
                obj = loads(raw)
            except orjson.JSONDecodeError as exc:
                self.invalid_line(number, raw, exc)
            else:
                # A "$ls" key needs nothing here: the codec escapes it, and it reads back equal.
                try:
                    if too_deep(raw, obj):
                        raise ValueError(f"nested deeper than {MAX_LINE_DEPTH} levels")
                    self.handle(obj, number, raw, {"file": file, "line": number})
                except (LoopscribeError, OSError):
                    raise  # the destination's failures, not the line's
                except Exception as exc:
                    self.bad_line(self.source, number, raw, exc)
            if progress is not None and end >= next_progress:
                progress(end - start)
                next_progress = end + _PROGRESS_STEP
        report.lines += count
        report.bytes += offset - start
        if progress is not None and count:
            progress(offset - start)
        return offset, line, count > 0

    def skip_line(self, raw: bytes) -> str | None:
        """A label for a line that is skipped without parsing it, or ``None`` to parse it.

        Only for line types that are never recorded and whose type can be
        told from the raw bytes with certainty (see :func:`top_level_type`).
        """
        return None

    def bad_line(self, path: Path, number: int, raw: bytes, exc: Exception) -> None:
        """A JSON line the mapping could not take (a ``type`` that is a list, ...).

        It is kept as an ``invalid_line`` source event, the first one is the
        report's :attr:`~ImportReport.error` (the import exits non-zero), and
        the import goes on with the next line.
        """
        self.report.bad_lines += 1
        detail = f"{type(exc).__name__}: {exc}"[:200]
        if self.report.error is None:
            self.report.error = (
                f"{path}:{number}: this line could not be imported ({detail}); it is kept as "
                "an invalid_line source event. The transcript is damaged or of an unknown "
                f"{self.name} version"
            )
        logger.warning("%s:%d: line not imported (%s)", path, number, detail)
        self.source_event(
            "invalid_line",
            raw.decode("utf-8", "replace").rstrip("\n"),
            {"file": str(path), "line": number},
            self.last_ts,
        )

    def invalid_line(self, number: int, raw: bytes, exc: Exception) -> None:
        """Keep a complete line that is not JSON as a source event, and warn."""
        logger.warning(
            "%s:%d: not valid JSON (%s); kept as a source_event record. The transcript "
            "was damaged or is not a %s transcript",
            self.source,
            number,
            exc,
            self.name,
        )
        self.report.invalid_lines += 1
        self.source_event(
            "invalid_line",
            raw.decode("utf-8", "replace").rstrip("\n"),
            {"file": self.file, "line": number},
            self.last_ts,
        )


TITLE_CHARS = 72
"""A title longer than this is cut (at a word) and ends with an ellipsis."""


_AGENTS_MD = "# AGENTS.md instructions for "
"""How Codex 0.5x+ hands the project's AGENTS.md to the model, as a user message."""
_COMMAND_NAME = re.compile(r"<command-name>\s*([^<]+?)\s*</command-name>")
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)


def title_text(value: Any) -> str | None:
    """A one-line title from a message's text, or ``None`` when it has none worth showing.

    Text in brackets first (an agent's wrapped context or command output, such
    as ``<environment_context>``, ``[Request interrupted by user]`` or Codex's
    ``# AGENTS.md instructions for …``) is not what the user asked, so it
    gives no title; a Claude Code slash command
    (``<command-name>/init</command-name>`` and its ``<command-args>``) is
    titled by its name and arguments.
    """
    if isinstance(value, list):
        value = next(
            (
                b.get("text")
                for b in value
                if isinstance(b, dict) and isinstance(b.get("text"), str)
            ),
            None,
        )
    if not isinstance(value, str):
        return None
    command = _COMMAND_NAME.search(value)
    if command is not None:  # a Claude Code slash command: its name and arguments
        args = _COMMAND_ARGS.search(value)
        value = command.group(1) + (" " + args.group(1) if args is not None else "")
    marker = "## My request for Codex:"  # the IDE extension puts its context first
    if marker in value:
        value = value.split(marker, 1)[1]
    text = " ".join(value.split())
    if not text or text.startswith(("<", "[", "Caveat:", _AGENTS_MD)):
        return None
    if len(text) <= TITLE_CHARS:
        return text
    cut = text[:TITLE_CHARS].rsplit(" ", 1)[0] or text[:TITLE_CHARS]
    return cut.rstrip(" ,.;:") + "…"


def result_of(
    importer: type[Importer],
    source: Path,
    out_dir: Path,
    name: str,
    **options: Any,
) -> ImportReport:
    """Import ``source`` into ``out_dir/<name>.jsonl`` with ``importer``."""
    make_private_dir(out_dir)
    return importer(source, out_dir / f"{name}.jsonl", **options).run()
