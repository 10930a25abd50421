"""Recording every LangChain run of a context without passing callbacks: install() / uninstall().

LangChain lets a library add a handler to every run through a configure hook
(a context variable it reads when a run configures its callbacks: the way
LangSmith tracing is switched on). :func:`install` registers loopscribe's hook
once and sets it to a :class:`LoopscribeCallbackHandler` for a loopscribe run;
:func:`uninstall` clears it and closes that handler, ending what its runs
still hold open. LangChain has no call that removes a registered hook: the
hook stays registered, empty, and adds nothing to a run.

The context variable follows ``contextvars`` rules: runs started in the
context ``install`` ran in (and the tasks and threads LangChain starts from
it) are recorded; a run the host gives the same handler in ``callbacks=``
is recorded once.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar

from langchain_core.tracers.context import register_configure_hook

from ..._session import Run
from ._handler import LoopscribeCallbackHandler

__all__ = ["install", "installed", "uninstall"]

_HANDLER: ContextVar[LoopscribeCallbackHandler | None] = ContextVar(
    "loopscribe_langchain_handler", default=None
)
_LOCK = threading.Lock()
_REGISTERED: list[bool] = []


def install(run: Run) -> LoopscribeCallbackHandler:
    """Record every LangChain run started from this context into ``run``; returns the handler.

    Installing again for the same run returns the same handler; installing
    for another run first uninstalls the previous one.
    """
    with _LOCK:
        if not _REGISTERED:
            register_configure_hook(_HANDLER, True)
            _REGISTERED.append(True)
    current = _HANDLER.get()
    if current is not None and current.run is run:
        return current
    uninstall()
    handler = LoopscribeCallbackHandler(run)
    _HANDLER.set(handler)
    return handler


def installed() -> LoopscribeCallbackHandler | None:
    """The handler :func:`install` set in this context, if any."""
    return _HANDLER.get()


def uninstall() -> None:
    """Stop adding the handler to new runs and close it; safe to call again, never raises.

    What its runs still hold open ends with the toolkit's ``NotEnded`` error
    (``stop_reason`` ``cancelled``); later callbacks of those runs record
    nothing.
    """
    handler = _HANDLER.get()
    _HANDLER.set(None)
    if handler is not None:
        handler.close()
