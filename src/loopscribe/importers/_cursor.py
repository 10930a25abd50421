"""The import cursor: how far a transcript was imported, kept beside its destination.

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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .._errors import LoopscribeError
from ._batch import save_or_owe

CURSOR_SUFFIX = ".import-cursor"
CURSOR_VERSION = 1


class ImportStateError(LoopscribeError, ValueError):
    """The source, the destination and the cursor beside it do not agree.

    The message names the files and what to do, usually: delete the
    destination and its cursor and import the transcript again.
    """


def cursor_path(destination: Path) -> Path:
    """Where the import cursor of a destination session file lives: beside it."""
    return destination.with_name(destination.name + CURSOR_SUFFIX)


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
