"""Trace and span IDs as pure functions of recording coordinates (a public contract).

With ``H(parts...) = sha256("\\0".join(["loopscribe/v1", *parts]).encode())``:

* trace ID: the first 16 bytes of ``H("trace", session_id, run_id)``;
* run span ID: the first 8 bytes of ``H("span", session_id, run_id, "", "0")``;
* execution span ID: the first 8 bytes of
  ``H("span", session_id, run_id, execution_id, str(attempt))``.

Bytes are read big-endian and an all-zero value becomes 1, because
OpenTelemetry treats zero as "no ID". The run span can never collide with
an execution span by construction: an execution ID is never empty.

One exception keeps a span from having two identities: an execution
recorded from a span that another instrumentation already created (the
intake, ``loopscribe.intake``) has the ID ``otel:<16 hex digits>``
(:func:`host_execution_id`), and its span ID is that span's own ID, for
every attempt. Its run's ``run_start`` holds the host trace's
``traceparent``, so the trace ID is the host's as well.

Changing any of this breaks every reference ever stored (``CallRef``s in
external timelines, span IDs already in trace backends), so the prefix
carries a version and the derivation is pinned by test vectors.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

from .._model import CallRef, Record

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

# The OpenTelemetry API is imported by the two functions that make a SpanContext:
# what only derives IDs (the viewer, ``stats``, the CLI) does not load it.

_PREFIX = "loopscribe/v1"
_HOST_PREFIX = "otel:"
_HOST_ID = re.compile(r"otel:([0-9a-f]{16})")
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join((_PREFIX, *parts)).encode()).digest()


def _nonzero(raw: bytes) -> int:
    return int.from_bytes(raw, "big") or 1


def trace_id(session_id: str, run_id: str) -> int:
    """The derived 128-bit trace ID of a run.

    A run started with ``begin_run(parent=...)`` uses the host's trace ID
    instead (see :class:`~loopscribe.otel.SpanBridge`); this function only
    knows the coordinates, so it always gives the derived one.

    Args:
        session_id: The session's ID.
        run_id: The run's ID.

    Returns:
        A non-zero integer below ``2**128``.
    """
    return _nonzero(_digest("trace", session_id, run_id)[:16])


def run_span_id(session_id: str, run_id: str) -> int:
    """The 64-bit span ID of a run's root span (``invoke_agent``).

    Args:
        session_id: The session's ID.
        run_id: The run's ID.

    Returns:
        A non-zero integer below ``2**64``.
    """
    return _nonzero(_digest("span", session_id, run_id, "", "0")[:8])


def span_id(session_id: str, run_id: str, execution_id: str, attempt: int) -> int:
    """The 64-bit span ID of one execution attempt.

    Args:
        session_id: The session's ID.
        run_id: The run's ID.
        execution_id: The host's run-local call ID (``Execution.id``).
        attempt: The 1-based attempt (``Execution.attempt``).

    Returns:
        A non-zero integer below ``2**64``.

    An execution recorded from a host's span (``otel:<hex>``, see
    :func:`host_execution_id`) keeps that span's ID instead.

    Raises:
        UnicodeEncodeError: An ID holds a lone surrogate, which has no UTF-8
            form (and so can never be recorded in a session file either).
    """
    host = host_span_id(execution_id)
    if host is not None:
        return host
    return _nonzero(_digest("span", session_id, run_id, execution_id, str(attempt))[:8])


def host_execution_id(span_id: int) -> str:
    """The execution ID of an operation recorded from a span the host already created.

    Such an execution keeps the host's span ID (:func:`span_id` returns it),
    so ``loopscribe find --span-id``, the viewer's deep links and replay name
    the span the host's trace backend already holds.

    Args:
        span_id: The host span's 64-bit ID.

    Returns:
        ``otel:`` and the span ID as 16 lowercase hex digits.

    Raises:
        ValueError: ``span_id`` is zero or does not fit in 64 bits.
    """
    if not 0 < span_id < 1 << 64:
        raise ValueError(f"span_id must be a non-zero 64-bit integer, got {span_id!r}")
    return f"{_HOST_PREFIX}{span_id:016x}"


def host_span_id(execution_id: str) -> int | None:
    """The host span ID an execution ID names (see :func:`host_execution_id`), else ``None``."""
    if not execution_id.startswith(_HOST_PREFIX):
        return None  # every other execution: no regex on the record path
    match = _HOST_ID.fullmatch(execution_id)
    if match is None:
        return None
    return int(match[1], 16) or None


def span_context(ref: CallRef, *, trace_id: int | None = None) -> SpanContext:
    """The OpenTelemetry SpanContext of the span recorded for ``ref``.

    Use it to link a host span to a recorded call, or to parent host work
    under it (``trace.set_span_in_context(NonRecordingSpan(ctx))``).

    A CallRef does not say whether its run was started inside a host span,
    so the trace ID is the derived one unless ``trace_id`` is given: for a
    run begun with ``begin_run(parent=...)``, pass the host's trace ID (the
    one in the ``traceparent`` stored in that run's ``run_start``).

    Args:
        ref: The call's coordinates, from ``run.ref(execution)`` or ``record.ref()``.
        trace_id: Overrides the derived trace ID.

    Returns:
        A remote, sampled SpanContext.

    Raises:
        ValueError: ``trace_id`` is zero or does not fit in 128 bits.
    """
    tid = _derived_trace_id(ref.session_id, ref.run_id) if trace_id is None else trace_id
    if not 0 < tid < 1 << 128:
        raise ValueError(f"trace_id must be a non-zero 128-bit integer, got {tid!r}")
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(
        trace_id=tid,
        span_id=span_id(ref.session_id, ref.run_id, ref.execution_id, ref.attempt),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


# ``span_context`` has a keyword named ``trace_id``; keep the function reachable.
_derived_trace_id = trace_id


def parse_traceparent(value: object) -> SpanContext | None:
    """The host span named by a stored W3C ``traceparent``, or ``None`` if it is not one."""
    if not isinstance(value, str):
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    tid, sid = int(match[1], 16), int(match[2], 16)
    if not tid or not sid:
        return None
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(tid, sid, is_remote=True, trace_flags=TraceFlags(int(match[3], 16)))


def record_span(record: Record, run_trace: int) -> tuple[int, int] | None:
    """The (trace ID, span ID) a record belongs to, or ``None`` for session_start."""
    if record.run_id is None:
        return None
    if record.execution is None:
        return run_trace, run_span_id(record.session_id, record.run_id)
    ex = record.execution
    return run_trace, span_id(record.session_id, record.run_id, ex.id, ex.attempt)


def run_trace_id(record: Record) -> int:
    """The trace ID of the run a ``run_start`` record opens (the host's, if it had one)."""
    assert record.run_id is not None
    parent = parse_traceparent(record.data.get("traceparent"))
    return parent.trace_id if parent is not None else trace_id(record.session_id, record.run_id)
