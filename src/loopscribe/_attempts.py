"""One fold of a run's execution attempts, shared by the span bridge, the timeline and stats.

Every reader of a run's records asks the same questions of each record that
belongs to an execution, and answers them here once:

* which **attempt** it belongs to: ``(execution id, attempt number)``; the
  attempt starts at its first record;
* the attempt's **parent**: the latest attempt of ``parent_id`` seen when
  it started (an execution that names itself, or none, hangs from the run;
  one whose parent has not appeared yet is resolved again when it ends);
* whether the record **ends** it: the attempt's terminal record
  (:data:`TERMINAL_TYPES`); records after it (``retry_scheduled``, a late
  ``message_end``) are **late**: they belong to the attempt, not to its time;
* its **outcome**: :func:`error_type` of the terminal record (``error`` when
  it has one, else ``ok``), ``incomplete`` for an attempt still open at
  ``run_close``;
* the run's own **agent** and outcome, from the top-level agent's records.

:class:`~loopscribe.otel.SpanBridge` turns the attempts into spans, the
timeline (``_timeline``) into bars, and ``_stats`` the bars into numbers. The
fold keeps no body and no attempt once it ended, only the keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, Protocol, TypeVar

from . import events as ev
from ._fields import field, plain, text
from ._model import Execution, Record

__all__ = [
    "ENDED",
    "LATE",
    "OPEN",
    "OTHER_ERROR",
    "TERMINAL_TYPES",
    "AttemptFold",
    "Key",
    "error_type",
]

TERMINAL_TYPES: Final = frozenset(
    {
        ev.MODEL_EXEC_END,
        ev.TOOL_EXEC_END,
        ev.TURN_END,
        ev.AGENT_END,
        ev.CONTEXT_TRANSFORM_END,
        ev.GUARDRAIL_END,
    }
)
"""Record types that end their execution attempt (its span, its bar)."""

OTHER_ERROR: Final = "_OTHER"
"""``error.type`` when a failure carries no usable type (the conventions' fallback)."""

Key = tuple[str, int]
"""An attempt's coordinates in its run: ``(execution id, attempt number)``."""

_AGENT_TYPES: Final = frozenset({ev.AGENT_START, ev.AGENT_END})

_TYPE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}(?:\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,7}")
"""A class name (``TimeoutError``, ``openai.RateLimitError``) or a provider's error type
(``invalid_request_error``); anything else is free text and stays in the file."""
_MAX_TYPE_CHARS = 128
_CLASS_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt", "Timeout", "Cancelled", "Failure")


def _type_name(value: Any) -> str | None:
    """``value`` when it reads as a type name, else ``None``."""
    if isinstance(value, str) and len(value) <= _MAX_TYPE_CHARS and _TYPE_NAME.fullmatch(value):
        return value
    return None


def _http_status(value: Any) -> str | None:
    """An HTTP error status (400-599) as the conventions write it: ``"503"``."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
        return str(value)
    return None


def error_type(data: Mapping[str, Any]) -> str | None:
    """The failure's type, never its message; ``None`` when nothing failed.

    A bounded, low-cardinality value: a class or error-type name, an HTTP
    status, or ``_OTHER``. A host that hands a message as the error (a string,
    or a mapping whose ``type`` is free text) gets ``_OTHER``; the text stays
    in the file.
    """
    error = plain(data.get("error"))
    if error is not None and error is not False:
        if isinstance(error, str):
            # A bare string is a type only when it looks like an exception class.
            name = _type_name(error)
            return name if name and name.endswith(_CLASS_SUFFIXES) else OTHER_ERROR
        named = _type_name(field(error, "type"))
        if named is not None:
            return named
        for key in ("status_code", "status", "code"):
            status = _http_status(field(error, key))
            if status is not None:
                return status
        return OTHER_ERROR
    if data.get("is_error") is True:
        return OTHER_ERROR
    return None


class Attempt(Protocol):
    """What the fold keeps up to date on the consumer's attempt object (a span's, a bar)."""

    seq_last: int
    """The last record of the attempt's time range: its terminal record once it ended."""
    error_type: str | None
    """How it ended: :func:`error_type` of its terminal record."""


A = TypeVar("A", bound=Attempt)

OPEN: Final = 0
""":meth:`AttemptFold.feed`: the record started or continued an open attempt."""
ENDED: Final = 1
"""The record is the attempt's terminal record."""
LATE: Final = 2
"""The record came after its attempt's terminal record (or after ``run_close``)."""


class AttemptFold(Generic[A]):
    """The execution attempts of one run, as its records arrive in order.

    Args:
        start: Makes the consumer's object for a new attempt from its first
            record, its execution and its parent (see :meth:`parent`).

    Attributes:
        open: The attempts started and not ended yet, in start order.
        latest: The latest attempt number seen of each execution.
        agent: The top-level agent's name (the run's), once a record gave it.
        error_type: The top-level agent's failure, from its ``agent_end``.
    """

    __slots__ = ("_ended", "_start", "agent", "error_type", "latest", "open")

    def __init__(self, start: Callable[[Record, Execution, Key | None], A]) -> None:
        self._start = start
        self.open: dict[Key, A] = {}
        self.latest: dict[str, int] = {}
        self._ended: set[Key] = set()
        self.agent: str | None = None
        self.error_type: str | None = None

    def parent(self, execution: Execution) -> Key | None:
        """The parent attempt as things stand: ``None`` for the run itself.

        That is the latest attempt seen of ``parent_id``; the run when the
        execution names no parent or itself, or when no attempt of the
        parent has been seen (yet: see :meth:`seen_parent`).
        """
        parent_id = execution.parent_id
        if parent_id is None:
            return None
        number = self.latest.get(parent_id)
        if number is None or (parent_id == execution.id and number == execution.attempt):
            return None
        return parent_id, number

    def seen_parent(self, execution: Execution) -> bool:
        """Whether the parent is known: the execution has none, or one of its attempts was seen."""
        parent_id = execution.parent_id
        return parent_id is None or parent_id in self.latest

    def feed(self, record: Record, execution: Execution) -> tuple[A | None, int]:
        """Fold one record of ``execution``: its attempt and :data:`OPEN`, :data:`ENDED` or
        :data:`LATE` (with ``None`` as the attempt, whose object the consumer holds).

        A new attempt is made by ``start`` (and becomes the latest of its
        execution); the attempt's ``seq_last`` moves to this record, and its
        terminal record sets ``error_type`` and closes it.
        """
        kind = record.type
        if kind in _AGENT_TYPES and execution.parent_id is None:
            # The top-level agent names the run and decides its outcome.
            self.agent = self.agent or text(plain(record.data.get("agent")))
            if kind == ev.AGENT_END:
                self.error_type = error_type(record.data)
        key = (execution.id, execution.attempt)
        attempt = self.open.get(key)
        if attempt is None:
            if key in self._ended:
                return None, LATE
            # The parent as it is now, before this attempt becomes the latest.
            attempt = self._start(record, execution, self.parent(execution))
            self.latest[execution.id] = execution.attempt
            self.open[key] = attempt
        attempt.seq_last = record.seq
        if kind not in TERMINAL_TYPES:
            return attempt, OPEN
        attempt.error_type = error_type(record.data)
        del self.open[key]
        self._ended.add(key)
        return attempt, ENDED

    def close(self, seq: int) -> list[A]:
        """End the run at record ``seq`` (its ``run_close``): the attempts still open, in
        start order, each with ``seq_last`` at ``seq``; later records of any are late."""
        still_open = list(self.open.values())
        for key, attempt in self.open.items():
            attempt.seq_last = seq
            self._ended.add(key)
        self.open.clear()
        return still_open
