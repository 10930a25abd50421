"""Observers of a Session: the callables that receive its Records, and the bus."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .._bus import Bus, global_bus
from .._model import Record, Transient

if TYPE_CHECKING:
    from ._writer import Session


logger = logging.getLogger("loopscribe")

Observer = Callable[[Record], object]
"""A callable that receives every Record after it is written.

Observers run on the recording thread, in record order, while the Session's
lock is held: keep them fast. One that raises is logged and counted, never
propagated into the agent loop. An observer that also has an
``on_transient(item)`` method receives the transient events (token deltas,
tool progress) as :class:`Transient` values, in the same order; they are
never written to the file. An observer with a ``bind_session(session)``
method (a SpanBridge) is called with the Session when it is attached, so it
learns the session's ID and file.
"""


def _transient_sinks(observers: Iterable[Observer]) -> tuple[Callable[[Transient], object], ...]:
    """The ``on_transient`` methods of the observers that have one (the live Bus)."""
    sinks = (getattr(o, "on_transient", None) for o in observers)
    return tuple(sink for sink in sinks if callable(sink))


def _joined(observers: Iterable[Observer], bus: Bus | bool) -> Iterable[Observer]:
    """``observers``, and the bus a Session was asked to join (``True``: the process's)."""
    if bus is False:
        return observers
    if bus is True:
        return (*observers, global_bus())
    if not isinstance(bus, Bus):
        raise TypeError(
            f"bus= takes True (the process-wide loopscribe.live.global_bus()) or a "
            f"loopscribe.live.Bus, got {type(bus).__name__}"
        )
    return (*observers, bus)


def _unbuffered(
    observers: Iterable[Observer], buffered: bool, path: str | os.PathLike[str]
) -> tuple[Observer, ...]:
    """``observers``, refused for a buffered Session: they are promised records in the file."""
    observers = tuple(observers)
    if buffered and observers:
        raise ValueError(
            f"{path}: a buffered Session cannot have observers (or join a bus); open it "
            "without buffered=True to observe its records"
        )
    return observers


def _bind(observer: Observer, session: Session) -> None:
    """Tell an observer that has ``bind_session`` (a SpanBridge) which Session it observes."""
    bind = getattr(observer, "bind_session", None)
    if not callable(bind):
        return
    try:
        bind(session)
    except Exception:
        logger.exception("loopscribe observer %r could not bind to %s", observer, session.path)
