"""Where a reader's bytes come from: a local session file, or a stream a URL names.

The reader and verifier take a local path, an open binary stream, or a URL.
What turns a URL into a stream is not known down here: the layer that owns
it registers an opener with :func:`set_url_opener` (the package's root wires
in :mod:`loopscribe.store`, imported only when a URL is first read, so the
core never imports fsspec and never imports upward).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import IO

from ._errors import LoopscribeError
from ._safeopen import open_session_file

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")

UrlOpener = Callable[[str], IO[bytes]]
"""Opens a session given by URL as one binary stream."""

_url_opener: UrlOpener | None = None


def file_url_path(url_path: str) -> Path:
    """The local path of a ``file:`` URL's path part (``urllib.request.url2pathname``).

    Without importing ``urllib.request``, which brings the HTTP client, ssl and
    email with it (10 MiB) into every command that reads a reference.
    """
    if os.name == "nt":  # drive letters and UNC names
        from nturl2path import url2pathname

        return Path(url2pathname(url_path))
    return Path(urllib.parse.unquote(url_path))


def is_url(source: object) -> bool:
    """Whether ``source`` is a URL (``scheme://...``) rather than a local path."""
    return isinstance(source, str) and _URL.match(source) is not None


def set_url_opener(opener: UrlOpener | None) -> UrlOpener | None:
    """Make ``opener`` the way URLs are read; returns the one it replaces."""
    global _url_opener
    previous, _url_opener = _url_opener, opener
    return previous


def open_binary(source: str | os.PathLike[str], buffering: int = -1) -> IO[bytes]:
    """A binary stream over a session file, or over a session given by URL."""
    if is_url(source):
        if _url_opener is None:
            raise LoopscribeError(
                f"{source}: no reader for URLs is set up; import loopscribe (the package) "
                "or read a local file"
            )
        return _url_opener(str(source))
    return open_session_file(source, buffering)
