"""A read-only Workspace over a store: what ``Workspace("s3://bucket/prefix")`` returns.

Listing reads the manifests (one listing, then only new or changed ones);
``messages(last=N)`` reads the end of the shipped segments with range
requests, through the same backwards reader as a local file.
"""

from __future__ import annotations

import builtins
import errno
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from .. import events as ev
from .._backread import ByteSource
from .._codec import DEFAULT_CODEC, Codec
from .._errors import StoreError
from .._fold import SessionSummary, Status
from .._format import is_session_id
from .._sidelog import SideFact, parse_side
from ..workspace import Artifact, SessionNotFoundError, Workspace
from ._manifest import Manifest, summary_from_json
from ._read import ShippedSession, Store, parse_session_url

__all__ = ["StoreWorkspace"]


class StoreWorkspace(Workspace):
    """Sessions shipped to a store, read as a workspace (read-only).

    Args:
        root: The store's URL.
        codec: Decodes messages for :meth:`messages`.
    """

    def __init__(self, root: str | os.PathLike[str], *, codec: Codec | None = None) -> None:
        self.store = Store(str(root))
        self.url = self.store.url
        self.root = Path(self.store.root)
        self.codec = codec or DEFAULT_CODEC
        self._cache = {}
        self._lock = threading.Lock()
        self.files_read = 0
        self._views: dict[str, ShippedSession] = {}
        self._summaries: dict[str, tuple[Manifest, SessionSummary]] = {}
        self._views_lock = threading.Lock()

    # -- paths ---------------------------------------------------------------

    def path(self, session_id: str) -> Path:
        """The shipped location of ``session_id`` (a URL)."""
        super().path(session_id)  # validates the ID
        return self.store.session_url(session_id)  # type: ignore[return-value]

    def _existing(self, session_id: str) -> Path:
        url = self.path(session_id)
        try:
            view = self.store.session(session_id)
        except FileNotFoundError as exc:
            raise SessionNotFoundError(errno.ENOENT, str(exc)) from None
        with self._views_lock:
            self._views[str(url)] = view
        return url

    @property
    def problems(self) -> tuple[str, ...]:
        """One line per object the last listing could not use (the others were listed)."""
        return self.store.problems

    def session_files(self) -> list[Path]:
        """The URL of every shipped session (a damaged manifest is left out)."""
        return sorted(
            self.store.session_url(m.session_id)  # type: ignore[misc]
            for m in self.store.manifests()
        )

    # -- listing -------------------------------------------------------------

    def list(
        self, include_children: bool = False, *, include_channels: bool = False
    ) -> builtins.list[SessionSummary]:
        """Summaries of the shipped sessions, most recently updated first.

        ``status`` is as the shipper last saw it (``running``: a writer held
        the file when it shipped). A damaged manifest is left out and named
        in :attr:`problems`.

        Raises:
            StoreError: The store cannot be listed (unreachable, access denied).
        """
        out = []
        known = self._summaries
        fresh: dict[str, tuple[Manifest, SessionSummary]] = {}
        for manifest in self.store.manifests():
            if not manifest.summary:
                continue
            cached = known.get(manifest.session_id)
            if cached is not None and cached[0] is manifest:
                summary = cached[1]  # the same manifest as last time: parsed once
            else:
                url = self.store.session_url(manifest.session_id)
                summary = summary_from_json(manifest.summary, url)
            fresh[manifest.session_id] = (manifest, summary)
            if (include_children or summary.parent_id is None) and (
                include_channels or summary.source != "channel"
            ):
                out.append(summary)
        self._summaries = fresh
        out.sort(key=lambda s: (s.updated, s.id), reverse=True)
        return out

    def get(self, session_id: str) -> SessionSummary:
        """The summary of one shipped session (its manifest, read anew)."""
        url = self._existing(session_id)
        with self._views_lock:
            manifest = self._views[str(url)].manifest
        return summary_from_json(manifest.summary, str(url))

    def status(self, session_id: str) -> Status:
        """The status the shipper last saw."""
        return self.get(session_id).status

    def summary_of_path(self, path: Path | str) -> SessionSummary:
        """The summary of a shipped session given by its URL."""
        _store, sid, _seq = parse_session_url(str(path))
        return self.get(sid)

    # -- messages ------------------------------------------------------------

    def messages_of_path(self, path: Path | str, last: int = 50, skip: int = 0) -> Any:
        """:meth:`messages` for a shipped session given by its URL."""
        url = str(path)
        with self._views_lock:
            known = url in self._views
        if not known:
            _store, sid, _seq = parse_session_url(url)
            self._existing(sid)
        return super().messages_of_path(url, last, skip)  # type: ignore[arg-type]

    def _side_compaction(self, path: Path) -> SideFact | None:
        """The latest compaction in the session's shipped side log, if any."""
        with self._views_lock:
            view = self._views[str(path)]
        facts = parse_side(view.side_log(), path, self.codec)
        compactions = [f for f in facts if f.kind == ev.COMPACTION]
        return compactions[-1] if compactions else None

    def _open_source(self, path: Path) -> ByteSource:
        with self._views_lock:
            return self._views[str(path)]

    def _visible_total(self, path: Path, side: Any = None) -> int:
        with self._views_lock:
            summary = self._views[str(path)].manifest.summary
        count = int(summary.get("message_count") or 0)
        compaction = summary.get("compaction")
        return count if not compaction else max(0, count - int(compaction["before"]) + 1)

    def view(self, session_id: str) -> ShippedSession:
        """The shipped session read by the last :meth:`messages` (bytes fetched, requests)."""
        with self._views_lock:
            return self._views[str(self.path(session_id))]

    # -- artifacts -----------------------------------------------------------

    def artifacts(self, session_id: str) -> builtins.list[Artifact]:
        """The shipped artifacts, by name; ``path`` is each one's URL."""
        if not is_session_id(session_id):
            self._existing(session_id)
            return []
        try:
            manifest = self.store.manifest(session_id)
        except FileNotFoundError as exc:
            raise SessionNotFoundError(errno.ENOENT, str(exc)) from None
        out = []
        for name, url, size in self.store.artifacts(session_id, manifest):
            mtime_ns = manifest.artifacts.get(name, {}).get("mtime_ns", 0)
            created = datetime.fromtimestamp(mtime_ns / 1e9, UTC)
            out.append(Artifact(name, url, size, created))
        return out

    # -- writing: not here ---------------------------------------------------

    def _read_only(self, what: str) -> NoReturn:
        raise StoreError(
            f"{self.url}: a store is read-only ({what}); change the session where it is "
            "recorded, and 'loopscribe ship' brings the change here"
        )

    def create(self, **kwargs: Any) -> Any:
        """Not possible in a store (read-only)."""
        self._read_only("create")

    def update(self, session_id: str, **fields: Any) -> SessionSummary:
        """Not possible in a store (read-only)."""
        self._read_only("update")

    def set_todos(self, session_id: str, todos: Any) -> SessionSummary:
        """Not possible in a store (read-only)."""
        self._read_only("set_todos")

    def compact(self, session_id: str, summary: Any, *, keep_last: int = 0) -> SessionSummary:
        """Not possible in a store (read-only)."""
        self._read_only("compact")

    def delete(self, session_id: str) -> None:
        """Not possible in a store (read-only)."""
        self._read_only("delete")

    def add_artifact(self, session_id: str, name: str, data: bytes) -> Artifact:
        """Not possible in a store (read-only)."""
        self._read_only("add_artifact")
