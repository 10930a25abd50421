"""The sessions home: the one folder loopscribe reads and writes when told no other.

``LOOPSCRIBE_DIR`` when set, else ``$XDG_DATA_HOME/loopscribe``, else
``~/.local/share/loopscribe``. The command line (``ls``, ``show``, ``find``,
``serve``, ``stats``, ...), the importers (into ``import/<agent>`` below it)
and the span intake's completion hook all use it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["HOME_ENV", "sessions_home"]

HOME_ENV: Final = "LOOPSCRIBE_DIR"
"""Environment variable naming the sessions home."""


def sessions_home() -> Path:
    """The sessions home (see the module): ``LOOPSCRIBE_DIR`` or the XDG data folder."""
    explicit = os.environ.get(HOME_ENV)
    if explicit:
        return Path(explicit).expanduser()
    data = os.environ.get("XDG_DATA_HOME")
    root = Path(data).expanduser() if data and Path(data).is_absolute() else None
    return (root or Path.home() / ".local" / "share") / "loopscribe"
