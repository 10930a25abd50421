"""The toolkit of the ways in: the bookkeeping every host path repeats, written once.

A way in (a framework adapter, an importer, the intake, an instrumentor, the
Claude Agent SDK store) maps foreign shapes — callbacks, hooks, trace spans,
transcript lines — to events. Everything after that mapping is the same for
all of them and lives here, so each keeps only its own mapping:

* :class:`Guard` — the never-raise policy. A recording failure is counted,
  the first one is logged with its traceback at ERROR on the ``loopscribe``
  logger, every later one at DEBUG; nothing is raised into the host.
* :func:`run_ids` — the execution ids of one loopscribe ``Run``, shared by
  every host object recording into it: a counter per kind (``agent_1``,
  ``turn_2``) and the attempts of host call ids. A call id seen again in the
  same run is the **next attempt** of the same execution (``attempt+1``),
  never a new id and never a duplicate.
* :class:`OpenExecutions` — the executions a host has opened and not closed
  yet, by the host's own id (a LangChain ``run_id``, a trace span id, a tool
  call id), with their parents; what is left open when the host run fails or
  is cancelled comes back innermost first from :meth:`OpenExecutions.drain`.
* :func:`terminal` and :func:`close_left_open` — the record that ends an
  execution of a given kind, and the loop that ends, innermost first, what
  a host left open when its run failed, was cancelled or stopped recording
  (with the error, or :data:`NOT_ENDED`).
* :class:`Committed` — commit each message once: ``first(key)`` is true the
  first time a key is seen.

The module sits in the record layer: it imports the format and the writer
only, so every way in (above it) may use it, and nothing here knows a
framework.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

from . import events as ev
from ._model import Event, Execution
from ._session import Run

__all__ = [
    "LOGGER",
    "NOT_ENDED",
    "Committed",
    "Guard",
    "OpenExecutions",
    "RunIds",
    "close_left_open",
    "run_ids",
    "terminal",
]

LOGGER = "loopscribe"
"""The one logger every way in reports its recording failures on."""

logger = logging.getLogger(LOGGER)

K = TypeVar("K")
V = TypeVar("V")


class Guard:
    """The never-raise policy of one host object: count every failure, log the first.

    The first failure is logged at ERROR with its traceback, naming the host
    and what failed; later ones at DEBUG (with their tracebacks too), so a
    broken file does not flood the host's log while every failure stays
    counted in :attr:`errors`. Thread-safe.

    Args:
        host: What records (``"LangChain handler"``, ``"OpenAI Agents hooks"``),
            named in the log line.
    """

    __slots__ = ("_lock", "errors", "host")

    def __init__(self, host: str) -> None:
        self.host = host
        self.errors = 0
        self._lock = threading.Lock()

    def failed(self, what: str) -> None:
        """Count and log the exception being handled (call it in an ``except`` block)."""
        with self._lock:
            self.errors += 1
            first = self.errors == 1
        if first:
            logger.exception(
                "loopscribe %s: recording failed in %s; later failures are logged at DEBUG "
                "and counted",
                self.host,
                what,
            )
        else:
            logger.debug("loopscribe %s: recording failed in %s", self.host, what, exc_info=True)

    @contextlib.contextmanager
    def contained(self, what: str) -> Iterator[None]:
        """Run the block; an ``Exception`` it raises is counted and logged, never raised."""
        try:
            yield
        except Exception:
            self.failed(what)

    def record(self, run: Run, event: Event) -> bool:
        """Record ``event`` into ``run``; ``False`` (counted and logged) if that failed."""
        try:
            run.record(event)
        except Exception:
            self.failed(f"a {event.type} record")
            return False
        return True

    def call(self, what: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)``, or ``None`` (counted and logged) if it raised."""
        try:
            return function(*args, **kwargs)
        except Exception:
            self.failed(what)
            return None


class RunIds:
    """Execution ids of one ``Run``: counters per kind and the attempts of host call ids.

    Shared by every host object recording into the run (get it with
    :func:`run_ids`), so two handlers of one run never hand out the same id.
    Thread-safe.
    """

    __slots__ = ("_attempts", "_lock", "_numbers")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._numbers: dict[str, int] = {}
        self._attempts: dict[str, int] = {}

    def number(self, kind: str) -> int:
        """The next number of ``kind`` in this run: 1, 2, ..."""
        with self._lock:
            n = self._numbers.get(kind, 0) + 1
            self._numbers[kind] = n
            return n

    def attempt(self, call_id: str) -> int:
        """The attempt of host call id ``call_id``: 1 the first time, then 2, 3, ...

        A host call id seen again in the same run (a retried tool call, a
        scripted model reusing ids) is the next attempt of the same execution.
        """
        with self._lock:
            n = self._attempts.get(call_id, 0) + 1
            self._attempts[call_id] = n
            return n

    def note(self, execution: Execution) -> None:
        """Remember an attempt made elsewhere (a retry): the next :meth:`attempt` follows it."""
        with self._lock:
            if execution.attempt > self._attempts.get(execution.id, 0):
                self._attempts[execution.id] = execution.attempt

    def call(self, call_id: str, kind: str, parent_id: str | None) -> Execution:
        """The execution of host call ``call_id``: its id, the next attempt of it."""
        return Execution(call_id, kind, self.attempt(call_id), parent_id)


_RUN_IDS: weakref.WeakKeyDictionary[Run, RunIds] = weakref.WeakKeyDictionary()
_RUN_IDS_LOCK = threading.Lock()


def run_ids(run: Run) -> RunIds:
    """The :class:`RunIds` of ``run``, the same object for every caller while the run lives."""
    with _RUN_IDS_LOCK:
        ids = _RUN_IDS.get(run)
        if ids is None:
            ids = _RUN_IDS[run] = RunIds()
        return ids


class OpenExecutions(Generic[K, V]):
    """What a host has opened and not closed yet, by the host's own id, in opening order.

    ``V`` is whatever the host keeps per open execution (the ``Execution``
    itself, or a record holding it with the host's own fields). Not
    thread-safe: the host calls it under its own lock.
    """

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[K, V] = {}

    def open(self, key: K, value: V) -> V:
        """Remember ``value`` as open under ``key`` (replacing what was there)."""
        self._open.pop(key, None)
        self._open[key] = value
        return value

    def get(self, key: K | None) -> V | None:
        """The open value under ``key``, or ``None`` (also for ``key=None``)."""
        return None if key is None else self._open.get(key)

    def close(self, key: K) -> V | None:
        """Forget ``key`` and return its value, or ``None`` if it was not open."""
        return self._open.pop(key, None)

    def __getitem__(self, key: K) -> V:
        return self._open[key]

    def __contains__(self, key: object) -> bool:
        return key in self._open

    def __len__(self) -> int:
        return len(self._open)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._open))

    def values(self) -> list[V]:
        """The open values, in opening order."""
        return list(self._open.values())

    def trim(self, limit: int) -> list[tuple[K, V]]:
        """Forget the oldest open entries beyond ``limit``; return them, oldest first.

        For a host whose ends may never come (a span that is never ended):
        what it keeps open stays bounded.
        """
        let_go: list[tuple[K, V]] = []
        while len(self._open) > max(limit, 0):
            key = next(iter(self._open))
            let_go.append((key, self._open.pop(key)))
        return let_go

    def drain(self) -> list[tuple[K, V]]:
        """Forget everything still open; return it innermost (last opened) first."""
        left = list(self._open.items())
        self._open.clear()
        left.reverse()
        return left


class Committed(Generic[K]):
    """The messages a conversation has committed, by a key the host chooses."""

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: set[K] = set()

    def first(self, key: K) -> bool:
        """``True`` the first time ``key`` is offered (commit it now), ``False`` after."""
        if key in self._keys:
            return False
        self._keys.add(key)
        return True

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def clear(self) -> None:
        """Forget every key."""
        self._keys.clear()


def terminal(
    execution: Execution,
    name: str,
    *,
    error: BaseException | Mapping[str, Any] | str | None = None,
    stop_reason: str | None = None,
    turn: int = 0,
    timestamp: datetime | None = None,
) -> Event:
    """The record that ends ``execution``, by its kind.

    ``model`` ends with ``model_exec_end``, ``tool`` with ``tool_exec_end``
    (``is_error`` when it failed; ``stop_reason`` is its disposition),
    ``turn`` with ``turn_end`` (number ``turn``), ``guardrail`` with
    ``guardrail_end`` (whether it tripped unknown), and every other kind
    (agents, chains, graph nodes) with ``agent_end``. ``name`` is the
    agent's, tool's or guardrail's name; a turn's name may be its number.
    """
    kind = execution.kind
    if kind == "turn" and not turn and name.isdigit():
        turn = int(name)
    if kind == "model":
        return ev.model_exec_end(
            execution, error=error, stop_reason=stop_reason, timestamp=timestamp
        )
    if kind == "tool":
        return ev.tool_exec_end(
            execution,
            name,
            is_error=error is not None,
            error=error,
            disposition=stop_reason,
            timestamp=timestamp,
        )
    if kind == "turn":
        return ev.turn_end(
            execution, turn, stop_reason=stop_reason, error=error, timestamp=timestamp
        )
    if kind == "guardrail":
        return ev.guardrail_end(execution, name, error=error, timestamp=timestamp)
    return ev.agent_end(execution, name, stop_reason=stop_reason, error=error, timestamp=timestamp)


NOT_ENDED: dict[str, str] = {
    "type": "NotEnded",
    "message": "the host stopped recording before this execution ended",
}
"""The error an execution ends with when the host never reported its end."""


def close_left_open(
    guard: Guard,
    run: Run,
    left: Iterable[tuple[Execution, str]],
    *,
    error: BaseException | Mapping[str, Any] | str | None = None,
    stop_reason: str = "cancelled",
) -> int:
    """End every execution a host left open, in the order given (innermost first).

    Each ends with its kind's :func:`terminal` record carrying ``error`` —
    the failure or cancellation that stopped the host's run, or
    :data:`NOT_ENDED` when the host only stopped recording — and
    ``stop_reason``. ``left`` holds ``(execution, name)`` pairs, as
    :meth:`OpenExecutions.drain` gives them once mapped. Never raises;
    returns how many were closed.
    """
    closed = 0
    for execution, name in left:
        end = terminal(execution, name, error=error or NOT_ENDED, stop_reason=stop_reason)
        closed += guard.record(run, end)
    return closed
