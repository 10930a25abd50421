"""A store as a workspace's source: what ``Workspace("s3://bucket/prefix")`` reads (read-only).

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
from typing import NoReturn

from .. import events as ev
from .._backread import ByteSource
from .._codec import DEFAULT_CODEC, Codec
from .._errors import StoreError
from .._fold import SessionSummary
from .._format import is_session_id
from .._sidelog import SideFact, parse_side
from .._workspace_source import Artifact, SessionNotFoundError, check_session_id
from ._manifest import Manifest, summary_from_json
from ._read import ShippedSession, Store, parse_session_url

__all__ = ["StoreSessions"]


class StoreSessions:
    """Sessions shipped to a store (a :class:`~loopscribe._workspace_source.SessionSource`).

    Args:
        root: The store's URL.
        codec: Decodes the shipped side logs' facts.
    """

    def __init__(self, root: str | os.PathLike[str], codec: Codec | None = None) -> None:
        self.store = Store(str(root))
        self.url = self.store.url
        self.root = Path(self.store.root)
        self.codec = codec or DEFAULT_CODEC
        self.files_read = 0
        self.unreadable: tuple[tuple[Path, OSError], ...] = ()
        self._views: dict[str, ShippedSession] = {}
        self._summaries: dict[str, tuple[Manifest, SessionSummary]] = {}
        self._views_lock = threading.Lock()

    # -- paths ---------------------------------------------------------------

    def path(self, session_id: str) -> Path:
        """The shipped location of ``session_id`` (a URL)."""
        check_session_id(session_id)
        return self.store.session_url(session_id)  # type: ignore[return-value]

    def existing(self, session_id: str) -> Path:
        """The URL of a shipped session, its manifest read anew."""
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

    # -- summaries -----------------------------------------------------------

    def summaries(self) -> builtins.list[SessionSummary]:
        """Every shipped session's summary; a manifest unchanged since last time parsed once.

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
            out.append(summary)
        self._summaries = fresh
        return out

    def summary(self, session_id: str) -> SessionSummary:
        """The summary of one shipped session (its manifest, read anew)."""
        url = self.existing(session_id)
        with self._views_lock:
            manifest = self._views[str(url)].manifest
        return summary_from_json(manifest.summary, str(url))

    def summary_of_path(self, path: Path | str) -> SessionSummary:
        """The summary of a shipped session given by its URL."""
        _store, sid, _seq = parse_session_url(str(path))
        return self.summary(sid)

    # -- reading ---------------------------------------------------------------

    def open(self, path: Path | str) -> ByteSource:
        """The shipped session at URL ``path`` (its manifest read if not yet)."""
        url = str(path)
        with self._views_lock:
            view = self._views.get(url)
        if view is None:
            _store, sid, _seq = parse_session_url(url)
            self.existing(sid)
            with self._views_lock:
                view = self._views[url]
        return view

    def known_totals(self, path: Path | str, side: SideFact | None) -> tuple[int, int]:
        """Visible and committed messages, as the manifest's summary counts them."""
        with self._views_lock:
            summary = self._views[str(path)].manifest.summary
        count = int(summary.get("message_count") or 0)
        compaction = summary.get("compaction")
        visible = count if not compaction else max(0, count - int(compaction["before"]) + 1)
        return visible, self.summary_of_path(path).messages_total

    def side_compaction(self, path: Path | str) -> SideFact | None:
        """The latest compaction in the session's shipped side log, if any."""
        view = self.open(path)
        assert isinstance(view, ShippedSession)
        facts = parse_side(view.side_log(), path, self.codec)  # type: ignore[arg-type]
        compactions = [f for f in facts if f.kind == ev.COMPACTION]
        return compactions[-1] if compactions else None

    def view(self, session_id: str) -> ShippedSession:
        """The shipped session read by the last page (bytes fetched, requests)."""
        with self._views_lock:
            return self._views[str(self.path(session_id))]

    # -- artifacts -----------------------------------------------------------

    def artifacts(self, session_id: str) -> builtins.list[Artifact]:
        """The shipped artifacts, by name; ``path`` is each one's URL."""
        if not is_session_id(session_id):
            self.existing(session_id)
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

    def require_writable(self, what: str) -> NoReturn:
        """A store is read-only: every change raises."""
        raise StoreError(
            f"{self.url}: a store is read-only ({what}); change the session where it is "
            "recorded, and 'loopscribe ship' brings the change here"
        )
