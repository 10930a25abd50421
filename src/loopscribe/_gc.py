"""Pausing the cyclic garbage collector while a scan builds many small objects.

A cold ``Workspace.list()`` over 100,000 sessions builds millions of small
objects (summaries, folds, their dicts) that all live on. Each of them
counts toward the collector's thresholds, and every generation-2 collection
it triggers walks every object already built, so the scan grows faster than
its input (x14 per 10x). None of these objects forms a cycle that the scan
itself would leave behind, so the collector is paused for the scan and runs
normally after it: the scan becomes linear.

Pauses nest and may overlap between threads: the collector is enabled again
when the last pause ends, and only if it was enabled when the first began.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator


class _Pauses:
    """Pauses in progress, and whether the collector was enabled when the first began."""

    lock = threading.Lock()
    depth = 0
    was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Within the block, no cyclic garbage collection runs (reference counting still frees)."""
    with _Pauses.lock:
        if _Pauses.depth == 0:
            _Pauses.was_enabled = gc.isenabled()
            gc.disable()
        _Pauses.depth += 1
    try:
        yield
    finally:
        with _Pauses.lock:
            _Pauses.depth -= 1
            if _Pauses.depth == 0 and _Pauses.was_enabled:
                gc.enable()
