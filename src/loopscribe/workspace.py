"""A workspace: a folder of session files, listed, paged and annotated.

Everything a session store needs is *derived* from records, *appended* as
records, or *read* from the writer lock — never a header rewritten in place,
and no registry of running sessions that a crash could leave stale:

* summaries (title, model, message count, token usage, parent, todos,
  compaction, created/updated) are folded from the records, cached per file
  and advanced from the last byte offset as a file grows;
* ``update``, ``set_todos`` and ``compact`` append ``session_update``,
  ``todos`` and ``compaction`` records — to the session file when this
  process writes it or nobody does, else (another process is recording) to
  the session's *side log*, a small JSONL file of the same facts with its
  own lock, folded into the summary and the loaded conversation;
* status: ``running`` while a run is open and its writer holds the file's
  lock; ``interrupted`` when a run is open but its writer is gone (a crash);
  ``failed`` when the last run ended with an error; else ``idle`` (also a
  session kept open between turns);
* ``messages(last=N)`` reads backwards from the end of the file, so its cost
  grows with the page, not with the file; its totals come from the running
  message count the writer keeps in ``message_end`` lines (a top-level
  ``"messages"``, and ``"compaction"``: the offset of the latest compaction
  record), so a fresh Workspace needs no pass over the file either.

A file whose first line is not a session header makes every method raise
:class:`NotASessionError` naming it; a file still being created (empty) is
left out of :meth:`Workspace.list`.

Files: ``<root>/<session_id>.jsonl``, its side log ``<session_id>.jsonl.meta``,
artifacts in ``<root>/<session_id>.artifacts/``.

The logic here is written once over a source (``_workspace_source``): a
local folder (``_folder_sessions``) or a store URL (``store._workspace``),
which this module chooses where the root is given.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from . import events as ev
from ._backread import ByteSource, FileSource, count_visible, line_at, reverse_lines
from ._codec import DEFAULT_CODEC, Codec
from ._fold import Compaction, SessionSummary, Status, positive_int, stored_count
from ._folder_sessions import (
    FOLDER_TRUST_NS,
    IMPORT_SETTLE_SECONDS,
    FolderSessions,
    NotASessionError,
)
from ._format import Scanner
from ._gc import collector_paused
from ._messages import SystemMessage
from ._reader import to_record
from ._session import Observer, Session
from ._sidelog import SideFact
from ._source import is_url
from ._workspace_source import Artifact, MessagePage, SessionNotFoundError, SessionSource

if TYPE_CHECKING:
    from .store._read import ShippedSession, Store

__all__ = [
    "IMPORT_SETTLE_SECONDS",
    "Artifact",
    "Compaction",
    "MessagePage",
    "NotASessionError",
    "SessionNotFoundError",
    "SessionSummary",
    "Status",
    "StoreWorkspace",
    "Workspace",
    "session_status",
]

_FOLDER_TRUST_NS = FOLDER_TRUST_NS
"""How much older than a listing the folder's mtime and ctime must be for it to be reused
(given to each folder a Workspace opens)."""

METADATA_FIELDS = frozenset(
    {
        "title",
        "model",
        "provider",
        "mode",
        "role",
        "agent_name",
        "color",
        "skills",
        "parent_id",
        "source",
        "result",
        "state",
    }
)
"""Session metadata a workspace stores (``state`` is the host's own label, e.g. 'done')."""

_TYPE_WINDOW = 120  # the record's "type" key comes within this many bytes of a line's start
_TYPE_KEY = b'"type":"'


def _record_type(raw: bytes) -> bytes:
    """A line's record type, read without parsing it (the first "type" key is the record's)."""
    start = raw.find(_TYPE_KEY, 0, _TYPE_WINDOW) + len(_TYPE_KEY)
    if start < len(_TYPE_KEY):
        return b""
    return raw[start : raw.find(b'"', start)]


def session_status(path: str | os.PathLike[str]) -> Status:
    """``running``, ``interrupted``, ``failed`` or ``idle`` for one session file."""
    return Workspace(Path(path).parent).summary_of_path(Path(path)).status


class Workspace:
    """A folder of session files.

    A store URL (``s3://bucket/prefix``, any fsspec URL that ``loopscribe
    ship`` wrote to) gives a read-only workspace over the shipped sessions
    (a :class:`StoreWorkspace`; see :mod:`loopscribe.store`): list, get,
    messages and artifacts read the store; changing a session raises.

    Args:
        root: The folder (created if missing), or a store URL.
        codec: Decodes messages for :meth:`messages`.
    """

    def __new__(cls, root: str | os.PathLike[str], *, codec: Codec | None = None) -> Workspace:
        if cls is Workspace and is_url(root):
            return super().__new__(StoreWorkspace)
        return super().__new__(cls)

    def __init__(self, root: str | os.PathLike[str], *, codec: Codec | None = None) -> None:
        self.codec = codec or DEFAULT_CODEC
        self._source: SessionSource = FolderSessions(
            Path(root), self.codec, trust_ns=_FOLDER_TRUST_NS, opener=FileSource
        )
        self.root = self._source.root
        self._listed: tuple[tuple[int, ...], builtins.list[SessionSummary]] = ((), [])

    @property
    def files_read(self) -> int:
        """How many times a file was (re)read for a summary: 0 on a warm, unchanged listing."""
        return self._source.files_read

    @property
    def unreadable(self) -> tuple[tuple[Path, OSError], ...]:
        """The session files the last :meth:`list` could not read, each with its error
        (``PermissionError``, an I/O error; the error names the file, or its side log):
        they are left out of that listing."""
        return self._source.unreadable

    # -- paths ---------------------------------------------------------------

    def path(self, session_id: str) -> Path:
        """The file of ``session_id``."""
        return self._source.path(session_id)

    def artifact_dir(self, session_id: str) -> Path:
        """Where a session's artifacts live (not created until something is put there)."""
        return self.root / f"{session_id}.artifacts"

    def _existing(self, session_id: str) -> Path:
        return self._source.existing(session_id)

    def session_files(self) -> list[Path]:
        """Every session file in the workspace."""
        return self._source.session_files()

    # -- creating and listing ------------------------------------------------

    def create(
        self,
        *,
        observers: Iterable[Observer] = (),
        chain: bool = False,
        codec: Codec | None = None,
        **metadata: Any,
    ) -> Session:
        """Create a session in the workspace and return its open writer.

        Args:
            observers: As for ``Session.create``.
            chain: Hash-chain the file (see ``loopscribe.verify``).
            codec: As for ``Session.create``.
            **metadata: Any of ``title``, ``model``, ``provider``, ``mode``,
                ``role``, ``agent_name``, ``color``, ``skills``, ``parent_id``,
                ``source``.

        Raises:
            ValueError: An unknown metadata field.
        """
        self._source.require_writable("create")
        _check_fields(metadata)
        assert isinstance(self._source, FolderSessions)
        fields = {k: v for k, v in metadata.items() if v is not None}
        return self._source.create(codec or self.codec, observers, fields, chain)

    def list(
        self, include_children: bool = False, *, include_channels: bool = False
    ) -> list[SessionSummary]:
        """Summaries of the workspace's sessions, most recently updated first.

        Files are read only when new or changed since the last call (one
        ``stat`` each tells); a file that grew is read from where the last
        call stopped. The folder itself is scanned again only when its
        mtime shows that files were created, removed or renamed in it. An
        empty file (a session being created) is left out.

        Args:
            include_children: Also list sessions with a ``parent_id``.
            include_channels: Also list sessions whose ``source`` is
                ``"channel"`` (created by a messaging channel, not a person
                at the UI).

        A file this process cannot read (its permissions, an I/O error) is
        left out too, and named with its error in :attr:`unreadable`.

        Raises:
            NotASessionError: A ``.jsonl`` file in the folder is not a session.
            CorruptRecordError: A session file is damaged.
        """
        summaries = [
            summary
            for summary in self._source.summaries()
            if (include_children or summary.parent_id is None)
            and (include_channels or summary.source != "channel")
        ]
        # Summaries are rebuilt only when something changed: the same
        # objects in the same scan order give the same sorted list.
        identity = tuple(map(id, summaries))
        listed = self._listed
        if identity == listed[0]:
            return list(listed[1])
        with collector_paused():  # a key tuple per summary
            summaries_sorted = sorted(summaries, key=lambda s: (s.updated, s.id), reverse=True)
        self._listed = (identity, summaries_sorted)
        return list(summaries_sorted)

    def get(self, session_id: str) -> SessionSummary:
        """The summary of one session.

        Raises:
            SessionNotFoundError: No such session.
            CorruptRecordError: Its file is damaged.
        """
        return self._source.summary(session_id)

    def status(self, session_id: str) -> Status:
        """``running``, ``interrupted``, ``failed`` or ``idle``: see :data:`Status`."""
        return self.get(session_id).status

    def summary_of_path(self, path: Path) -> SessionSummary:
        """The summary of a session file given by path (in this workspace's folder)."""
        return self._source.summary_of_path(path)

    # -- messages ------------------------------------------------------------

    def messages(self, session_id: str, last: int = 50, skip: int = 0) -> MessagePage:
        """A page of the committed conversation, read backwards from the end.

        After a compaction, the visible conversation is the summary (a
        ``SystemMessage``) followed by the messages committed after it.

        Args:
            session_id: The session.
            last: Page size.
            skip: Messages to skip from the newest end (for older pages).

        Returns:
            The page, oldest first, and whether older messages exist.
        """
        return self.messages_of_path(self._existing(session_id), last, skip)

    def messages_of_path(self, path: Path, last: int = 50, skip: int = 0) -> MessagePage:
        """:meth:`messages` for a session file given by path."""
        if last < 0 or skip < 0:
            raise ValueError(f"last and skip must be >= 0, got last={last}, skip={skip}")
        want = skip + last
        side = self._side_compaction(path)
        after: list[Any] = []  # message records after the compaction point, newest first
        kept: list[Any] = []  # the ones before it kept verbatim, newest first
        newest: Mapping[str, Any] | None = None  # the newest message_end line, parsed
        summary: Any = None
        keep = -1  # -1: no compaction point met yet
        before: int | None = None  # messages committed before the compaction point met
        reached_start = False
        source = self._open_source(path)
        try:
            for offset, raw in reverse_lines(source, source.complete_end()):
                if keep < 0 and side is not None and offset < side.offset:
                    # The side log's compaction is newer than every record from here back.
                    summary = side.data.get("summary")
                    keep = positive_int(side.data.get("keep_last"))
                    before = stored_count(side.data.get("messages_before"))
                    if keep == 0:
                        reached_start = True
                        break
                kind = _record_type(raw)
                if kind == b"message_end":
                    if keep < 0 and len(after) > want:
                        break  # one beyond the page proves older messages exist
                    record, line = self._decode_line(path, offset, raw)
                    if newest is None:
                        newest = line
                    if keep < 0:
                        after.append(record)
                    else:
                        if not kept and before is None:
                            # The last message before the compaction counts those before it.
                            before = stored_count(line.get("messages"))
                        kept.append(record)
                        if len(kept) >= keep:
                            reached_start = True
                            break
                elif kind == b"compaction" and keep < 0:
                    record, line = self._decode_line(path, offset, raw)
                    data = record.data
                    summary, keep = data.get("summary"), positive_int(data.get("keep_last"))
                    before = stored_count(line.get("messages"))
                    if keep == 0:
                        reached_start = True
                        break
                elif kind == b"session_start":
                    reached_start = True
                    if keep > 0:
                        before = len(kept)  # fewer than keep_last messages came before it
                    break
            totals: tuple[int, int] | None
            if not reached_start:
                totals = self._totals_from_end(source, path, side, newest)
            elif keep < 0:
                totals = (len(after), len(after))
            else:
                if before is None and after:
                    # The newest message's count, less those after the compaction.
                    newest_count = stored_count(newest.get("messages")) if newest else None
                    if newest_count is not None and newest_count >= len(after):
                        before = newest_count - len(after)
                visible = 1 + len(kept) + len(after)
                totals = None if before is None else (visible, before + len(after))
        finally:
            source.close()
        visible_messages = [r.data.get("message") for r in after]
        visible_messages.extend(r.data.get("message") for r in kept)
        if summary is not None:
            visible_messages.append(
                summary if not isinstance(summary, str) else SystemMessage(summary)
            )
        has_more_beyond = not reached_start and len(after) > want
        chronological = list(reversed(visible_messages))
        window_end = len(chronological) - skip
        window = chronological[max(0, window_end - last) : max(0, window_end)]
        has_more = has_more_beyond or window_end - last > 0
        if totals is None:
            # A file written before lines carried counts: count it, still without parsing.
            totals = self._totals(path, side)
        if reached_start:
            totals = (len(chronological), totals[1])
        return MessagePage(window, has_more, totals[0], totals[1])

    def _totals_from_end(
        self,
        source: ByteSource,
        path: Path,
        side: SideFact | None,
        newest: Mapping[str, Any] | None,
    ) -> tuple[int, int] | None:
        """Visible and committed messages from the newest ``message_end`` line's counts.

        Its ``"messages"`` is the file's committed count and its
        ``"compaction"`` the offset of the latest compaction record before
        it; every record read backwards so far came after the side log's
        compaction, if any. ``None`` when a count is missing (an older
        file) or does not check out: then the file is counted instead.
        """
        committed = None if newest is None else stored_count(newest.get("messages"))
        if committed is None or newest is None:
            return None
        at = newest.get("compaction")
        file_cut = at if type(at) is int and at > 0 else None
        keep = 0
        if file_cut is not None and (side is None or file_cut >= side.offset):
            # The file's own compaction is the latest: one line, read at its offset
            # (with the byte before it, which must end the line before).
            raw = line_at(source, file_cut)
            if raw is None or _record_type(raw) != b"compaction":
                return None
            _record, line = self._decode_line(path, file_cut, raw)
            if line.get("type") != ev.COMPACTION:
                return None
            before = stored_count(line.get("messages"))
            data = line.get("data")
            keep = positive_int(data.get("keep_last")) if isinstance(data, dict) else 0
        elif side is not None:
            before = stored_count(side.data.get("messages_before"))
            keep = positive_int(side.data.get("keep_last"))
        else:
            return committed, committed
        if before is None or before > committed:
            return None
        return 1 + min(keep, before) + committed - before, committed

    def _open_source(self, path: Path) -> ByteSource:
        """The bytes of a session, read by range."""
        return self._source.open(path)

    def _totals(self, path: Path, side: SideFact | None) -> tuple[int, int]:
        """Visible and committed messages of a session whose lines carry no counts."""
        known = self._source.known_totals(path, side)
        return known if known is not None else count_visible(path, side, self.codec)

    def _side_compaction(self, path: Path) -> SideFact | None:
        """The latest compaction in the session's side log, if any."""
        return self._source.side_compaction(path)

    def _decode_line(self, path: Path, offset: int, raw: bytes) -> tuple[Any, dict[str, Any]]:
        """A line's Record and the parsed line (whose top-level counts a Record leaves out)."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise Scanner(path).corrupt(0, offset, f"not valid JSON ({exc})") from None
        if type(obj) is not dict:
            raise Scanner(path).corrupt(0, offset, "a record must be a JSON object")
        return to_record(Scanner(path), 0, offset, raw, obj, self.codec), obj

    # -- appended facts ----------------------------------------------------------

    def update(self, session_id: str, **fields: Any) -> SessionSummary:
        """Change metadata (title, model, ...) by appending a ``session_update`` record.

        While another process records the session, the change goes to the
        session's side log instead (see the module docstring).

        Raises:
            ValueError: An unknown field.
        """
        self._source.require_writable("update")
        _check_fields(fields)
        self._annotate(session_id, ev.SESSION_UPDATE, {"fields": fields})
        return self.get(session_id)

    def set_todos(self, session_id: str, todos: Sequence[Mapping[str, Any]]) -> SessionSummary:
        """Replace the session's todo list by appending a ``todos`` record."""
        self._source.require_writable("set_todos")
        self._annotate(session_id, ev.TODOS, {"todos": [dict(t) for t in todos]})
        return self.get(session_id)

    def compact(self, session_id: str, summary: Any, *, keep_last: int = 0) -> SessionSummary:
        """Record a compaction: from now on :meth:`messages` starts with ``summary``.

        Args:
            session_id: The session.
            summary: Text (shown as a ``SystemMessage``) or a message.
            keep_last: Keep this many of the latest messages verbatim after
                the summary.
        """
        self._source.require_writable("compact")
        if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 0:
            raise ValueError(f"keep_last must be an int >= 0, got {keep_last!r}")
        data: dict[str, Any] = {"summary": summary}
        if keep_last:
            data["keep_last"] = keep_last
        self._annotate(session_id, ev.COMPACTION, data)
        return self.get(session_id)

    def _annotate(self, session_id: str, kind: str, data: Mapping[str, Any]) -> None:
        """Append a session-level fact: to the file if we may write it, else to the side log."""
        assert isinstance(self._source, FolderSessions)
        self._source.annotate(session_id, kind, data)

    def _annotate_side(self, path: Path, kind: str, data: Mapping[str, Any]) -> None:
        assert isinstance(self._source, FolderSessions)
        self._source.annotate_side(path, kind, data)

    # -- removal and artifacts -------------------------------------------------------

    def delete(self, session_id: str) -> None:
        """Remove a session, its artifacts and export files.

        Raises:
            SessionLockedError: The session is running.
        """
        self._source.require_writable("delete")
        assert isinstance(self._source, FolderSessions)
        self._source.delete(session_id)

    def add_artifact(self, session_id: str, name: str, data: bytes) -> Artifact:
        """Keep a file the session produced in its artifact folder, privately.

        The folder is created 0700 and the file 0600; the file is written
        beside its name and renamed into place, so a reader never sees half
        of it, and an artifact of the same name is replaced.

        Args:
            session_id: The session.
            name: A file name: no folder in it, not hidden (no leading ``.``),
                at most 255 bytes.
            data: The file's content.

        Raises:
            ValueError: ``name`` is not such a file name.
            SessionNotFoundError: No such session.
        """
        self._source.require_writable("add_artifact")
        assert isinstance(self._source, FolderSessions)
        return self._source.add_artifact(session_id, name, data)

    def artifacts(self, session_id: str) -> builtins.list[Artifact]:
        """The session's artifacts, by name (a shipped one's ``path`` is its URL); empty if none."""
        return self._source.artifacts(session_id)


class StoreWorkspace(Workspace):
    """Sessions shipped to a store, read as a workspace (read-only).

    What ``Workspace("s3://bucket/prefix")`` returns: the same workspace
    over the store's source (``store._workspace.StoreSessions``).

    Args:
        root: The store's URL.
        codec: Decodes messages for :meth:`messages`.
    """

    def __init__(self, root: str | os.PathLike[str], *, codec: Codec | None = None) -> None:
        from .store._workspace import StoreSessions  # needs the store extra: only for a URL

        self.codec = codec or DEFAULT_CODEC
        source = StoreSessions(root, self.codec)
        self._source = source
        self._store_source = source
        self.store: Store = source.store
        self.url = source.url
        self.root = source.root
        self._listed = ((), [])

    @property
    def problems(self) -> tuple[str, ...]:
        """One line per object the last listing could not use (the others were listed)."""
        return self._store_source.problems

    def view(self, session_id: str) -> ShippedSession:
        """The shipped session read by the last :meth:`messages` (bytes fetched, requests)."""
        return self._store_source.view(session_id)


def _check_fields(fields: Mapping[str, Any]) -> None:
    unknown = set(fields) - METADATA_FIELDS
    if unknown:
        raise ValueError(
            f"unknown session field(s) {sorted(unknown)}; known: {sorted(METADATA_FIELDS)}"
        )
