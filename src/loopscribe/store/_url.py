"""Store URLs: which strings name a store, how one is shown, and the backend behind it.

fsspec (and the backend of the URL's scheme: s3fs, gcsfs, adlfs) is imported
here, when a store is first used, never by ``import loopscribe``.

A store URL may carry credentials (``ftp://user:PW@host/...``, a query
token). loopscribe shows and stores only its display form
(:func:`~loopscribe._logsafe.display_url`: no user info, no secret query
values). Within one process, a display URL of a store opened with
credentials keeps working (``read(summary.path)``), without the
credentials ever being written anywhere.
"""

from __future__ import annotations

import threading
from typing import Any

from .._errors import StoreError
from .._logsafe import display_url, hide, url_secrets
from .._source import is_url
from ._backend import Backend, backend, failure

__all__ = ["display_url", "filesystem", "is_url", "open_backend", "split_fragment"]

_BACKENDS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs"}
_BACKENDS.update(abfs="adlfs", abfss="adlfs")
_REAL: dict[str, str] = {}
"""Display URL to the URL it was made from, for stores opened in this process."""
_REAL_LOCK = threading.Lock()


def split_fragment(url: str) -> tuple[str, str]:
    """``(url, fragment)``: a reference ``...#seq=12`` names a record of a session."""
    base, _, fragment = url.partition("#")
    return base, fragment


def _real(url: str) -> str:
    """The URL a display URL (or one below it) was made from, if a store opened it here."""
    with _REAL_LOCK:
        if not _REAL:
            return url
        for shown in sorted(_REAL, key=len, reverse=True):
            if url == shown or url.startswith(shown + "/"):
                return _REAL[shown] + url[len(shown) :]
    return url


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and the path inside it (no trailing slash).

    Options for the backend come from the usual places (``AWS_*`` variables,
    ``~/.aws``, ``FSSPEC_S3_*`` settings, ...); loopscribe never takes or
    stores a credential itself.

    Raises:
        StoreError: fsspec or the scheme's backend is not installed (with the
            command that installs it), or the backend cannot be set up (an
            FTP server that does not answer); one line, no credentials.
    """
    shown = display_url(url)
    url = _real(url)
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise StoreError(
            f"{shown}: reading or shipping to a store URL needs fsspec: "
            "pip install 'loopscribe[store]'"
        ) from None
    scheme = url.split("://", 1)[0].lower()
    try:
        fs, path = url_to_fs(url)
    except ImportError as exc:
        package = _BACKENDS.get(scheme, f"the fsspec backend for {scheme}://")
        raise StoreError(
            f"{shown}: {scheme}:// needs {package} ({exc}): pip install {package}"
        ) from None
    except ValueError as exc:
        reason = hide(str(exc), url_secrets(url))
        raise StoreError(
            f"{shown}: not a store URL fsspec knows ({reason}); check its form (in a password, "
            "write '/', '@' and ':' as %2F, %40 and %3A)"
        ) from None
    except Exception as exc:  # a backend that connects at once (ftp://) and cannot
        raise failure(exc, "open the store", shown, url_secrets(url)) from None
    return fs, str(path).rstrip("/") or "/"


def open_backend(url: str) -> tuple[Backend, str]:
    """The backend of a store URL, and the URL as it may be shown (no credentials).

    Raises:
        StoreError: As :func:`filesystem`.
    """
    url = url.rstrip("/")
    shown = display_url(url)
    fs, root = filesystem(url)
    real = _real(url)
    if shown != real:
        with _REAL_LOCK:
            _REAL[shown] = real
    return backend(fs, root, shown, url_secrets(real)), shown
