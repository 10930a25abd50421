"""With the official or OpenInference OpenAI instrumentation active too: one span per call."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopscribe import Session, instrument
from loopscribe.otel import SpanBridge, host_execution_id

from .conftest import Server, of
from .test_openai import CHAT, ask, client


def official() -> Any:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    return OpenAIInstrumentor()  # type: ignore[no-untyped-call]


def openinference() -> Any:
    from openinference.instrumentation.openai import OpenAIInstrumentor

    return OpenAIInstrumentor()


@pytest.fixture(autouse=True)
def patched() -> Iterator[None]:
    with instrument.openai():
        yield


@pytest.mark.parametrize("make", [official, openinference], ids=["official", "openinference"])
def test_one_span_per_call_and_the_records_name_it(
    make: Callable[[], Any], server: Server, tmp_path: Path
) -> None:
    """The other instrumentation's span is the call's: no loopscribe chat span beside it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    other = make()
    # OpenInference wraps OpenAI.request, whose inherited value is loopscribe's wrapper;
    # its uninstrument sets that value on OpenAI itself. Put the classes back as they were.
    before = {cls: dict(vars(cls)) for cls in (openai.OpenAI, openai.AsyncOpenAI)}
    other.instrument(tracer_provider=provider)
    try:
        server.reply(200, json=CHAT)
        bridge = SpanBridge(SimpleSpanProcessor(exporter))
        with (
            Session.create(tmp_path / "s.jsonl", observers=[bridge]) as session,
            session.begin_run(),
        ):
            ask(client(server))
    finally:
        other.uninstrument()
        for cls, attributes in before.items():
            for key in set(vars(cls)) - set(attributes):
                delattr(cls, key)
    spans = exporter.get_finished_spans()
    model_spans = [
        s
        for s in spans
        if (s.attributes or {}).get("gen_ai.operation.name") == "chat"
        or (s.attributes or {}).get("openinference.span.kind") == "LLM"
    ]
    assert len(model_spans) == 1
    (start,) = of(session, "model_exec_start")
    assert start.execution is not None
    ctx = model_spans[0].context
    assert ctx is not None
    assert start.execution.id == host_execution_id(ctx.span_id)
    assert of(session, "model_exec_end")[0].data["response_id"] == "chatcmpl-1"


def test_two_calls_in_one_foreign_model_span_stay_two_executions(
    server: Server, session: Session
) -> None:
    """A host's own span marked as a chat around two calls: the first takes it, the second not."""
    provider = TracerProvider()
    server.reply(200, json=CHAT)
    server.reply(200, json=CHAT)
    with (
        provider.get_tracer("host").start_as_current_span(
            "chat", attributes={"gen_ai.operation.name": "chat"}
        ),
        session.begin_run(),
    ):
        c = client(server)
        ask(c)
        ask(c)
    starts = [r.execution for r in of(session, "model_exec_start") if r.execution]
    assert len({(e.id, e.attempt) for e in starts}) == 2
    assert starts[0].id.startswith("otel:")
    assert not starts[1].id.startswith("otel:")
