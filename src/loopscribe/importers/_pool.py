"""Import many transcripts at once: spread over worker processes, fsyncs paid per pass.

Each transcript is imported by exactly one process, as
``import_transcript`` would import it alone, so the sessions written are
the same whatever the number of processes. The transcripts are dealt into
passes (the largest first, so the processes finish together); a pass imports
its transcripts owing their fsyncs and pays them at its end
(:class:`~._batch.SyncBatch`), so a cursor is saved only after the records it
counts are on disk, and a pass killed anywhere resumes exactly.

``jobs=1`` runs every pass in this process (no pool); a stop (Ctrl-C)
reaches the workers through a shared event and each saves what it did.
"""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from .._errors import LoopscribeError
from ._batch import SyncBatch, owing_syncs
from ._defaults import default_jobs
from ._report import ImportReport

__all__ = ["Outcome", "default_jobs", "import_many"]

PASS_TRANSCRIPTS = 64
"""At most this many transcripts per pass: the descriptors (and locks) held until it is paid."""
_ALONE_TRANSCRIPTS = 8
"""Transcripts per pass in this process (``jobs=1``)."""
_PASSES_PER_JOB = 4
"""Passes per process, so a process that drew large transcripts does not finish last alone."""
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
PARALLEL_MIN_BYTES = 8 << 20
"""Less than this to import in all is imported in this process: starting workers costs more."""


class _Stop(Protocol):
    def is_set(self) -> bool: ...


@dataclass(slots=True)
class Outcome:
    """What became of one transcript: its report, or why it could not be imported."""

    path: Path
    report: ImportReport | None = None
    error: str | None = None
    no_room: bool = False
    """The destination's file system is full: every transcript after this one would fail."""


def _modules() -> dict[str, ModuleType]:
    from . import claude_code, codex

    return {"claude-code": claude_code, "codex": codex}


def _import_pass(
    agent: str,
    paths: Sequence[Path],
    out_dir: Path,
    options: dict[str, Any],
    stop: _Stop | None,
    on_progress: Callable[[Path, int], None] | None = None,
) -> list[Outcome]:
    """Import ``paths`` one after the other owing their fsyncs, then pay them."""
    outcomes, batch = _unpaid_pass(agent, paths, out_dir, options, stop, on_progress)
    return _settle(outcomes, batch)


def _unpaid_pass(
    agent: str,
    paths: Sequence[Path],
    out_dir: Path,
    options: dict[str, Any],
    stop: _Stop | None,
    on_progress: Callable[[Path, int], None] | None = None,
) -> tuple[list[Outcome], SyncBatch]:
    """Import ``paths`` owing their fsyncs; the caller pays the batch (:func:`_settle`)."""
    module = _modules()[agent]
    batch = SyncBatch()
    outcomes: list[Outcome] = []
    try:
        with owing_syncs(batch):
            for path in paths:
                if stop is not None and stop.is_set():
                    break
                extra: dict[str, Any] = {}
                if on_progress is not None:
                    extra["on_progress"] = lambda n, path=path: on_progress(path, n)
                try:
                    report = module.import_transcript(path, out_dir, stop=stop, **options, **extra)
                except (LoopscribeError, OSError) as exc:
                    no_room = isinstance(exc, OSError) and exc.errno in _NO_ROOM
                    outcomes.append(Outcome(path, error=str(exc), no_room=no_room))
                    if no_room:
                        break
                    continue
                outcomes.append(Outcome(path, report))
    except BaseException:
        batch.pay()  # what the transcripts before this one imported is kept
        raise
    return outcomes, batch


def _settle(outcomes: list[Outcome], batch: SyncBatch) -> list[Outcome]:
    """Pay a pass's fsyncs and cursors; a session that failed to sync becomes an error."""
    failed = batch.pay()
    for outcome in outcomes:
        report = outcome.report
        if report is not None and report.destination in failed:
            failure = failed[report.destination]
            outcome.report = None
            outcome.error = (
                f"{report.destination}: fsync failed ({failure.strerror or failure}); its "
                "cursor was not moved, so the next import writes nothing twice: run it again"
            )
            outcome.no_room = failure.errno in _NO_ROOM
    return outcomes


class _Polled:
    """A cross-process event asked every 256th time: asking takes semaphore calls, and an
    import asks once per line."""

    __slots__ = ("_asked", "_event", "_set")

    def __init__(self, event: _Stop) -> None:
        self._event = event
        self._asked = 0
        self._set = False

    def is_set(self) -> bool:
        self._asked += 1
        if not self._set and self._asked & 255 == 1:
            self._set = self._event.is_set()
        return self._set


_WORKER: dict[str, _Stop] = {}
"""The worker process's stop event (set by the pool's initializer)."""


def _init_worker(stop: _Stop) -> None:
    _WORKER["stop"] = _Polled(stop)
    # Ctrl-C goes to the whole process group: the parent decides, and tells the
    # workers through ``stop``, so each saves what it imported.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _worker_pass(
    agent: str, paths: list[Path], out_dir: Path, options: dict[str, Any]
) -> list[Outcome]:
    return _import_pass(agent, paths, out_dir, options, _WORKER.get("stop"))


def _passes(paths: Sequence[Path], sizes: Sequence[int], count: int) -> list[list[int]]:
    """Deal the transcripts (by index) into ``count`` passes, largest first."""
    order = sorted(range(len(paths)), key=lambda i: -sizes[i])
    passes: list[list[int]] = [[] for _ in range(count)]
    for n, i in enumerate(order):
        passes[n % count].append(i)
    return [p for p in passes if p]


def import_many(
    agent: str,
    paths: Sequence[Path],
    out_dir: Path,
    *,
    jobs: int | None = None,
    sizes: Sequence[int] | None = None,
    stop: threading.Event | None = None,
    on_progress: Callable[[Path, int], None] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    **options: Any,
) -> list[Outcome]:
    """Import every transcript of ``paths`` into ``out_dir``; outcomes in the order of ``paths``.

    Args:
        agent: ``"claude-code"`` or ``"codex"``.
        paths: The transcripts.
        out_dir: The folder of destination sessions.
        jobs: Processes to use (default: every core); ``1`` imports in this process.
        sizes: The bytes each transcript has to import (to balance the passes);
            less than :data:`PARALLEL_MIN_BYTES` in all is imported in this process.
        stop: Set to stop between lines; each transcript keeps what it imported.
        on_progress: ``(path, bytes read)`` while a transcript is read in this
            process (``jobs=1`` only).
        on_outcome: Called as each transcript's pass is paid.
        options: For ``import_transcript`` (``settle_seconds``, ``redact``, ...).
    """
    if not paths:
        return []
    jobs = max(1, jobs or default_jobs())
    jobs = min(jobs, len(paths))
    if sizes is not None and sum(sizes) < PARALLEL_MIN_BYTES:
        jobs = 1
    sizes = list(sizes) if sizes is not None else [0] * len(paths)
    # Alone: passes small enough that paying one overlaps importing the next.
    count = jobs * _PASSES_PER_JOB if jobs > 1 else -(-len(paths) // _ALONE_TRANSCRIPTS)
    count = max(count, -(-len(paths) // PASS_TRANSCRIPTS))
    passes = _passes(paths, sizes, count)
    outcomes: dict[int, Outcome] = {}

    def done(indices: list[int], results: list[Outcome]) -> None:
        for i, outcome in zip(indices, results, strict=False):
            outcomes[i] = outcome
            if on_outcome is not None:
                on_outcome(outcome)

    if jobs == 1:
        # Each pass is paid on a thread while the next one imports: fsync waits
        # for the disk without the GIL, so the disk and the CPU work at once.
        # Passes are paid in order, each after the one before.
        with ThreadPoolExecutor(1, thread_name_prefix="loopscribe-fsync") as payer:
            paying: tuple[list[int], Future[list[Outcome]]] | None = None
            for indices in passes:
                if stop is not None and stop.is_set():
                    break
                unpaid = _unpaid_pass(
                    agent, [paths[i] for i in indices], out_dir, options, stop, on_progress
                )
                if paying is not None:
                    done(paying[0], paying[1].result())
                paying = indices, payer.submit(_settle, *unpaid)
                if any(o.no_room for o in unpaid[0]):
                    break
            if paying is not None:
                done(paying[0], paying[1].result())
    else:
        with _pool(jobs) as (pool, shared_stop):
            pending: dict[Future[list[Outcome]], list[int]] = {
                pool.submit(_worker_pass, agent, [paths[i] for i in p], out_dir, options): p
                for p in passes
            }
            while pending:
                finished, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                if stop is not None and stop.is_set():
                    shared_stop.set()
                for future in finished:
                    results = future.result()
                    done(pending.pop(future), results)
                    if any(o.no_room for o in results):
                        shared_stop.set()
                        if stop is not None:
                            stop.set()
    return [outcomes[i] for i in sorted(outcomes)]


@contextlib.contextmanager
def _pool(jobs: int) -> Iterator[tuple[ProcessPoolExecutor, Any]]:
    # fork is the quickest start (the importers are loaded already), but only
    # while this process runs no other thread: a forked child would inherit
    # the locks those threads hold (a progress bar's, a logging handler's).
    # Otherwise forkserver, whose server imports the importers once.
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        method = "fork"
    else:
        method = "forkserver" if "forkserver" in methods else "spawn"
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        # The server imports the importers once; each worker is forked with them loaded.
        context.set_forkserver_preload([__name__])
    shared_stop = context.Event()
    pool = ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_init_worker, initargs=(shared_stop,)
    )
    try:
        yield pool, shared_stop
    except BaseException:
        shared_stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
