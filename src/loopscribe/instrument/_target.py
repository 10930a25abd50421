"""Where an instrumented call is recorded: the current run, else the process's own session.

A host that makes a run current (``with session.begin_run() as run:``) gets
every call made inside it, in that run. Calls made outside any run go to
one session per process, created at the first such call under a folder
named once with :func:`configure` (default: the sessions home,
:func:`loopscribe.sessions_home`), in one run per process that is closed when the
process exits. A process forked from one that opened it starts its own.
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import threading
from pathlib import Path
from typing import Final

from .._home import HOME_ENV, sessions_home
from .._hostkit import LOGGER
from .._session import Run, Session, current_run
from ._body import GUARD

logger = logging.getLogger(LOGGER)

DIR_ENV: Final = HOME_ENV
"""Environment variable: the folder of the per-process session (the sessions home)."""
DEFAULT_DIR: Final = "loopscribe-sessions"
"""Kept for one release: the per-process session's folder is now the sessions home."""


class _State:
    """The per-process session and where it goes (one instance, module-wide)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.directory: Path | None = None
        self.default: Session | None = None
        self.failed = False


_state = _State()


def configure(directory: str | os.PathLike[str] | None = None) -> None:
    """Name the folder of the per-process session, for calls made outside any run.

    Call it once, before the first call; a session already opened for this
    process is closed, and the next call outside a run opens one in the new
    folder. ``None`` goes back to the default, the sessions home
    (``LOOPSCRIBE_DIR``, else the XDG data folder).
    """
    with _state.lock:
        _state.directory = None if directory is None else Path(directory)
        _state.failed = False
        _close_default()


def default_session() -> Session | None:
    """The per-process session, if a call outside any run opened it."""
    return _state.default


def _close_default() -> None:
    session, _state.default = _state.default, None
    if session is not None:
        with GUARD.contained("closing the per-process session"):
            session.close()


def target_run() -> Run | None:
    """The run a call made now is recorded into, or ``None`` when there is nowhere to record."""
    run = current_run()
    if run is not None:
        return run
    return _default_run()


def _default_run() -> Run | None:
    session = _state.default
    if session is not None and not session.closed:
        return session.run
    with _state.lock:
        if _state.default is not None and not _state.default.closed:
            return _state.default.run
        if _state.failed:
            return None
        folder = _state.directory or sessions_home()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            session_id = secrets.token_hex(16)
            session = Session.create(
                folder / f"{session_id}.jsonl", session_id=session_id, bus=True
            )
            session.begin_run(parent=None)
        except Exception as exc:
            _state.failed = True
            logger.warning(
                "loopscribe: cannot open the per-process session in %s (%s); calls made "
                "outside a run are not recorded: set %s or call loopscribe.instrument.configure()",
                folder,
                exc,
                DIR_ENV,
            )
            return None
        _state.default = session
        # Registered after the Session's own finalizer (whose exit hook closes its
        # descriptor): exit hooks run last-registered first, so run_close is written.
        atexit.unregister(_close_default)
        atexit.register(_close_default)
        return session.run


def _forked() -> None:
    # The parent's handle is not ours: a call outside a run opens this process's own.
    _state.default, _state.failed = None, False


os.register_at_fork(after_in_child=_forked)
