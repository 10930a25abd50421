"""Where a run belongs: the host span it joins (a W3C ``traceparent``)."""

from __future__ import annotations

import enum
import re
from typing import Final

from opentelemetry import trace
from opentelemetry.context import Context


class _Join(enum.Enum):
    ACTIVE_SPAN = "active span"


ACTIVE_SPAN: Final = _Join.ACTIVE_SPAN
"""``begin_run``'s default parent: the active OpenTelemetry span, if there is one."""


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


def _traceparent(parent: str | Context) -> str:
    """Normalize a run's parent to a W3C traceparent string."""
    if isinstance(parent, str):
        match = _TRACEPARENT.fullmatch(parent)
        if match is None or not int(match[1], 16) or not int(match[2], 16):
            raise ValueError(
                f"parent {parent!r} is not a W3C traceparent "
                "('00-<32 hex trace id>-<16 hex span id>-<2 hex flags>', ids not all zero)"
            )
        return parent
    ctx = trace.get_current_span(parent).get_span_context()
    if not ctx.is_valid:
        raise ValueError("parent Context holds no valid span; pass a Context with a recording span")
    return _format_traceparent(ctx)


def _format_traceparent(ctx: trace.SpanContext) -> str:
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
