"""What a workspace reads its sessions from: the interface a folder and a store implement.

:class:`loopscribe.Workspace` holds the logic written once — listing
(filtered, most recently updated first), summaries and status by ID, the
conversation paged backwards from the end, metadata changes checked — over
a :class:`SessionSource`:

* ``_folder_sessions.FolderSessions``: a local folder; files folded and
  cached per file, side logs, writer locks for the status;
* ``store._workspace.StoreSessions``: a store URL (read-only); manifests
  and range reads of the shipped segments.

The values both hand out (:class:`Artifact`, :class:`MessagePage`) and the
error for an unknown ID live here too, below both.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from ._backread import ByteSource
from ._errors import LoopscribeError
from ._fold import SessionSummary
from ._sidelog import SideFact

__all__ = ["Artifact", "MessagePage", "SessionNotFoundError", "SessionSource", "check_session_id"]


class SessionNotFoundError(LoopscribeError, FileNotFoundError):
    """No session with that ID in the workspace."""


def check_session_id(session_id: str) -> str:
    """``session_id`` if it is one (32 lowercase hex digits), else :class:`SessionNotFoundError`."""
    if not (len(session_id) == 32 and all(c in "0123456789abcdef" for c in session_id)):
        raise SessionNotFoundError(
            errno.ENOENT, f"{session_id!r} is not a session ID (32 lowercase hex digits)"
        )
    return session_id


@dataclass(frozen=True, slots=True)
class MessagePage:
    """A window of a session's visible conversation.

    Attributes:
        messages: Oldest first. After a compaction the conversation starts
            with the summary (a ``SystemMessage``).
        has_more: Older visible messages exist before this window.
        total: Visible messages in all (summary included), as
            ``Workspace.get(id).message_count`` counts them.
        messages_total: Messages ever committed, compacted away or not, as
            ``Workspace.get(id).messages_total`` counts them.
    """

    messages: list[Any]
    has_more: bool
    total: int
    messages_total: int = 0


@dataclass(frozen=True, slots=True)
class Artifact:
    """A file produced during a session (``path``: a URL for a shipped session's artifact)."""

    name: str
    path: Path | str
    size: int
    created: datetime


class SessionSource(Protocol):
    """Where a workspace's sessions are: a folder or a store. Paths may be URLs (a store)."""

    root: Path
    files_read: int
    """How many times a session was (re)read for a summary."""
    unreadable: tuple[tuple[Path, OSError], ...]
    """The sessions the last :meth:`summaries` could not read, each with its error."""

    def path(self, session_id: str) -> Path:
        """Where ``session_id`` is (or would be); :class:`SessionNotFoundError` for a bad ID."""

    def existing(self, session_id: str) -> Path:
        """:meth:`path`, or :class:`SessionNotFoundError` when there is no such session."""

    def session_files(self) -> list[Path]:
        """Every session's path, sorted."""

    def summaries(self) -> list[SessionSummary]:
        """Every session's summary, unfiltered, unordered; the same objects while unchanged."""

    def summary(self, session_id: str) -> SessionSummary:
        """One session's summary, current."""

    def summary_of_path(self, path: Path) -> SessionSummary:
        """:meth:`summary` of a session given by its path."""

    def open(self, path: Path) -> ByteSource:
        """The session's bytes, read by range (a local file's header checked)."""

    def known_totals(self, path: Path, side: SideFact | None) -> tuple[int, int] | None:
        """Visible and committed message counts known without reading, or ``None``."""

    def side_compaction(self, path: Path) -> SideFact | None:
        """The latest compaction in the session's side log, if any."""

    def artifacts(self, session_id: str) -> list[Artifact]:
        """The session's artifacts, by name."""

    def require_writable(self, what: str) -> None:
        """Raise unless sessions can be changed here (``what``: the operation)."""
