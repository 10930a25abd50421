"""The handle an ``instrument`` function returns, and the one way it patches an SDK."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from .._hostkit import LOGGER

logger = logging.getLogger(LOGGER)


class Instrumentation:
    """What an ``instrument`` function patched; :meth:`uninstrument` restores it.

    Also a context manager: the patch lasts for the ``with`` block.
    """

    def __init__(self, name: str, undo: Callable[[], None]) -> None:
        self.name = name
        self._undo: Callable[[], None] | None = undo
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """Whether the patch is still in place."""
        return self._undo is not None

    def uninstrument(self) -> None:
        """Put back what was patched (harmless twice)."""
        with self._lock:
            undo, self._undo = self._undo, None
        if undo is not None:
            undo()

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstrument()

    def __repr__(self) -> str:
        return f"<Instrumentation {self.name} {'active' if self.active else 'removed'}>"


def patch(owner: Any, name: str, make: Callable[[Any], Any]) -> Callable[[], None]:
    """Replace ``owner.name`` with ``make(original)``; return what puts it back."""
    original = owner.__dict__[name] if name in getattr(owner, "__dict__", {}) else None
    current = getattr(owner, name)
    setattr(owner, name, make(current))

    def undo() -> None:
        if original is None:
            try:
                delattr(owner, name)
            except AttributeError:
                logger.debug("%r.%s was already restored", owner, name)
        else:
            setattr(owner, name, original)

    return undo
