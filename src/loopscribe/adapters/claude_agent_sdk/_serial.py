"""One job at a time per session on a shared pool, and awaiting a job from any event loop."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["_Serial", "_wait"]

_T = TypeVar("_T")


class _Serial:
    """Runs one session's work on a shared pool, one job at a time, in submission order."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._queue: deque[tuple[Callable[[], Any], Future[Any]]] = deque()
        self._lock = threading.Lock()
        self._running = False

    def submit(self, job: Callable[[], _T]) -> Future[_T]:
        future: Future[_T] = Future()
        with self._lock:
            self._queue.append((job, future))
            if not self._running:
                self._running = True
                self._pool.submit(self._drain)
        return future

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                job, future = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as exc:
                future.set_exception(exc)


async def _wait(future: Future[_T]) -> _T:
    """Await a job without blocking the event loop; cancelling the wait never cancels the job.

    An ``append`` the SDK gave up on (its timeout) still lands, in order, and
    a retry of the same batch is then recognised by its ``uuid``\\ s.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # another event loop (trio through anyio)
        import anyio

        return await anyio.to_thread.run_sync(future.result)
    return await asyncio.shield(asyncio.wrap_future(future, loop=loop))
