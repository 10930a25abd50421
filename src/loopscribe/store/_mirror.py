"""A local copy of a store, kept current: what ``loopscribe serve URL`` serves.

The viewer indexes every record of every session (trace IDs, span bars), so
it reads each session whole anyway; keeping a copy means it reads each byte
from the store once. Each sync reads the changed manifests and fetches only
the segments past the copy's end, appending them to ``<cache>/<id>.jsonl``;
artifacts go to ``<cache>/<id>.artifacts/``. The copy is a cache: delete it
any time.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

from .._errors import LoopscribeError
from ._layout import chain_segments, session_dir
from ._read import Store
from ._url import list_folder

__all__ = ["Mirror", "default_cache"]

logger = logging.getLogger("loopscribe")


def default_cache(url: str) -> Path:
    """Where a store's copy is kept by default: under ``$XDG_CACHE_HOME/loopscribe``."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    return base / "loopscribe" / "stores" / digest


class Mirror:
    """Keeps ``cache`` a copy of the sessions shipped to ``url``.

    Args:
        url: The store.
        cache: The local folder (created); by default :func:`default_cache`.
    """

    def __init__(self, url: str, cache: str | os.PathLike[str] | None = None) -> None:
        self.store = Store(url)
        self.cache = Path(cache) if cache is not None else default_cache(self.store.url)
        self.cache.mkdir(parents=True, exist_ok=True)
        self.bytes_fetched = 0
        self._artifacts: dict[str, dict[str, dict[str, int]]] = {}

    def sync(self) -> int:
        """Bring the copy up to date; returns the sessions that changed."""
        changed = 0
        for manifest in self.store.manifests():
            sid = manifest.session_id
            path = self.cache / f"{sid}.jsonl"
            have = path.stat().st_size if path.exists() else 0
            if have > manifest.size:
                path.unlink()  # the store was reset: start this session over
                have = 0
            if have < manifest.size:
                self._append(path, manifest.session_id, have, manifest.size)
                changed += 1
            if manifest.artifacts and self._artifacts.get(sid) != manifest.artifacts:
                self._fetch_artifacts(sid)
                self._artifacts[sid] = dict(manifest.artifacts)
        return changed

    def _append(self, path: Path, session_id: str, have: int, shipped: int) -> None:
        fs = self.store.fs
        folder = session_dir(self.store.root, session_id)
        segments = chain_segments(list_folder(fs, folder), shipped)
        with open(path, "ab") as f:
            for seg in segments:
                if seg.end <= have:
                    continue
                start = max(0, have - seg.offset)  # a copy cut mid-segment resumes inside it
                data = fs.cat_file(f"{folder}/{seg.name}", start=start)
                f.write(data)
                self.bytes_fetched += len(data)
                have = seg.end

    def _fetch_artifacts(self, session_id: str) -> None:
        target = self.cache / f"{session_id}.artifacts"
        for name, url, _size in self.store.artifacts(session_id):
            dest = target / name
            if not dest.resolve().is_relative_to(target.resolve()):
                continue  # a name that climbs out of the folder: never written
            dest.parent.mkdir(parents=True, exist_ok=True)
            data = self.store.read_object(url)
            tmp = dest.with_name(dest.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, dest)
            self.bytes_fetched += len(data)

    def keep_syncing(self, interval_s: float, stop: threading.Event) -> threading.Thread:
        """Sync every ``interval_s`` seconds on a daemon thread until ``stop`` is set."""

        def loop() -> None:
            while not stop.wait(interval_s):
                try:
                    self.sync()
                except (LoopscribeError, OSError) as exc:
                    logger.warning("syncing %s failed (will retry): %s", self.store.url, exc)

        thread = threading.Thread(target=loop, name="loopscribe-store-sync", daemon=True)
        thread.start()
        return thread
