"""Store URLs: which strings name a store, and the fsspec filesystem behind one.

fsspec (and the backend of the URL's scheme: s3fs, gcsfs, adlfs) is imported
here, when a store is first used, never by ``import loopscribe``.
"""

from __future__ import annotations

import os
from typing import Any

from .._errors import StoreError
from .._source import is_url

__all__ = [
    "atomic_put",
    "filesystem",
    "is_local",
    "is_url",
    "list_folder",
    "put_segment",
    "split_fragment",
]

_BACKENDS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs"}
_BACKENDS.update(abfs="adlfs", abfss="adlfs")


def split_fragment(url: str) -> tuple[str, str]:
    """``(url, fragment)``: a reference ``...#seq=12`` names a record of a session."""
    base, _, fragment = url.partition("#")
    return base, fragment


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and the path inside it (no trailing slash).

    Options for the backend come from the usual places (``AWS_*`` variables,
    ``~/.aws``, ``FSSPEC_S3_*`` settings, ...); loopscribe never takes or
    stores a credential itself.

    Raises:
        StoreError: fsspec or the scheme's backend is not installed, with the
            command that installs it.
    """
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise StoreError(
            f"{url}: reading or shipping to a store URL needs fsspec: "
            "pip install 'loopscribe[store]'"
        ) from None
    scheme = url.split("://", 1)[0].lower()
    try:
        fs, path = url_to_fs(url)
    except ImportError as exc:
        package = _BACKENDS.get(scheme, f"the fsspec backend for {scheme}://")
        raise StoreError(
            f"{url}: {scheme}:// needs {package} ({exc}): pip install {package}"
        ) from None
    except ValueError as exc:
        raise StoreError(f"{url}: not a store URL fsspec knows ({exc})") from None
    return fs, str(path).rstrip("/") or "/"


def is_local(fs: Any) -> bool:
    """Whether ``fs`` is fsspec's local filesystem (a folder or a network mount)."""
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


def atomic_put(fs: Any, path: str, data: bytes) -> None:
    """Replace an object in one step: one PUT on object stores, write+rename on a folder.

    A reader sees the old object or the new one, never a part.
    """
    if is_local(fs):
        tmp = f"{path}.tmp-{os.getpid()}"
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    else:
        fs.pipe_file(path, data)


def put_segment(fs: Any, path: str, data: bytes) -> None:
    """Write an immutable object (a segment, an artifact): same as :func:`atomic_put`."""
    atomic_put(fs, path, data)


def list_folder(fs: Any, folder: str) -> list[tuple[str, int]]:
    """``(path, size)`` of the objects directly in ``folder``; empty if there are none.

    One prefix listing. Not ``fs.ls``: on S3 an empty prefix makes ``ls``
    list the parent folder too, which for a store's new session would be
    every session of the store.
    """
    try:
        found = fs.find(folder, detail=True, refresh=True)
    except FileNotFoundError:
        return []
    base = folder.rstrip("/")
    return [
        (str(path), int(info.get("size") or 0))
        for path, info in found.items()
        if str(path).rsplit("/", 1)[0] == base and info.get("type", "file") == "file"
    ]
