"""What an import does when not told otherwise: where each agent keeps its
transcripts, how long a transcript settles, how many processes import.

Kept apart from the importers so that the command line can show these in its
help without loading them.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._fold import IMPORT_SETTLE_SECONDS

__all__ = ["DEFAULT_SETTLE_SECONDS", "claude_code_dir", "codex_dir", "default_jobs"]

DEFAULT_SETTLE_SECONDS = IMPORT_SETTLE_SECONDS
"""A transcript untouched this long has finished its turn: its open run is closed."""


def claude_code_dir() -> Path:
    """Where Claude Code keeps transcripts: ``~/.claude/projects``.

    ``$CLAUDE_CONFIG_DIR`` replaces ``~/.claude`` when it is set.
    """
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(base) if base else Path.home() / ".claude") / "projects"


def codex_dir() -> Path:
    """Where Codex keeps rollouts: ``$CODEX_HOME/sessions`` or ``~/.codex/sessions``."""
    base = os.environ.get("CODEX_HOME")
    return (Path(base) if base else Path.home() / ".codex") / "sessions"


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
