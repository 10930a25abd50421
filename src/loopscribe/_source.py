"""Where a reader's bytes come from: a local session file, or a shipped one in a store.

A store URL (``s3://bucket/prefix/sessions/<id>``, any fsspec URL) reads the
shipped segments as one file through :mod:`loopscribe.store`, imported only
when a URL is given: the core never imports fsspec.
"""

from __future__ import annotations

import os
import re
from typing import IO

from ._safeopen import open_session_file

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_url(source: object) -> bool:
    """Whether ``source`` is a URL (``scheme://...``) rather than a local path."""
    return isinstance(source, str) and _URL.match(source) is not None


def open_binary(source: str | os.PathLike[str], buffering: int = -1) -> IO[bytes]:
    """A binary stream over a session file, or over a shipped session given by URL."""
    if is_url(source):
        from .store._read import open_session

        return open_session(str(source))
    return open_session_file(source, buffering)
