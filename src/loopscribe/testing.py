"""Helpers for testing a host that records with loopscribe.

Record into a throwaway session and look at the spans it produced, through
the OpenTelemetry SDK's own in-memory exporter::

    from loopscribe import Execution, events
    from loopscribe.testing import span_tree, traced_session

    def test_my_host_records_a_tool_call() -> None:
        with traced_session() as (session, captured):
            with session.begin_run() as run:
                my_host.run(run)
        assert span_tree(captured.spans) == "invoke_agent\\n  execute_tool grep"
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ._codec import Codec
from ._errors import LoopscribeError
from ._session import Observer, Session
from .otel import SpanBridge

__all__ = ["CapturedSpans", "captured_spans", "span_tree", "temp_session", "traced_session"]


class CapturedSpans(NamedTuple):
    """A span processor that keeps every span it is given, in memory.

    Attributes:
        processor: Pass it to :class:`~loopscribe.otel.SpanBridge` or a TracerProvider.
        exporter: The SDK's ``InMemorySpanExporter`` behind it.
    """

    processor: SimpleSpanProcessor
    exporter: InMemorySpanExporter

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        """The finished spans, in the order they ended."""
        return tuple(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        """The finished spans called ``name``."""
        return [span for span in self.spans if span.name == name]

    def clear(self) -> None:
        """Forget the spans captured so far."""
        self.exporter.clear()


def captured_spans() -> CapturedSpans:
    """A fresh ``SimpleSpanProcessor(InMemorySpanExporter())`` pair."""
    exporter = InMemorySpanExporter()
    return CapturedSpans(SimpleSpanProcessor(exporter), exporter)


def _sort_key(span: ReadableSpan) -> tuple[int, int, str]:
    seq = (span.attributes or {}).get("loopscribe.seq.first")
    return (span.start_time or 0, seq if isinstance(seq, int) else -1, span.name)


def span_tree(spans: Sequence[ReadableSpan]) -> str:
    """The spans' names as an indented tree, two spaces per level.

    Children are ordered by start time, then by first record, then by name;
    a span whose parent is not among ``spans`` is a root.

    Args:
        spans: Finished spans, for example ``captured.spans``.

    Returns:
        One line per span.
    """
    ids = {span.context.span_id for span in spans if span.context is not None}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent if parent in ids else None, []).append(span)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, ()), key=_sort_key):
            lines.append("  " * depth + span.name)
            if span.context is not None:
                walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)


@contextlib.contextmanager
def temp_session(
    *,
    observers: Iterable[Observer] = (),
    codec: Codec | None = None,
    metadata: Mapping[str, Any] | None = None,
    directory: str | os.PathLike[str] | None = None,
    name: str = "session.jsonl",
) -> Iterator[Session]:
    """A new Session in a temporary folder, closed (and removed) on exit.

    Args:
        observers: As for ``Session.create``.
        codec: As for ``Session.create``.
        metadata: As for ``Session.create``.
        directory: Create the file here and keep it, instead of in a
            temporary folder that is removed on exit.
        name: The file's name.

    Yields:
        The open Session; read its file with ``loopscribe.read(session.path)``.
    """
    with contextlib.ExitStack() as stack:
        folder = (
            Path(directory)
            if directory is not None
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="loopscribe-")))
        )
        session = Session.create(folder / name, codec, observers, metadata=metadata)
        try:
            yield session
        except BaseException:
            # The test's own failure is the one to report.
            with contextlib.suppress(LoopscribeError):
                session.close()
            raise
        session.close()


@contextlib.contextmanager
def traced_session(
    *,
    codec: Codec | None = None,
    metadata: Mapping[str, Any] | None = None,
    directory: str | os.PathLike[str] | None = None,
) -> Iterator[tuple[Session, CapturedSpans]]:
    """A :func:`temp_session` observed by a :class:`~loopscribe.otel.SpanBridge`.

    Args:
        codec: As for ``Session.create``.
        metadata: As for ``Session.create``.
        directory: As for :func:`temp_session`.

    Yields:
        The open Session and the spans its bridge has ended so far.
    """
    captured = captured_spans()
    with temp_session(codec=codec, metadata=metadata, directory=directory) as session:
        session.add_observer(SpanBridge(captured.processor, file_uri=session.path))
        yield session, captured
