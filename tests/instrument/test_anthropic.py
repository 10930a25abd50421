"""Anthropic through loopscribe.instrument: Messages on a fake transport, streams and retries."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import orjson
import pytest

from loopscribe import Session, TextContent, ThinkingContent, ToolCall, instrument

from .conftest import Server, of, sse

MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "thinking", "thinking": "Need the weather.", "signature": "sig=="},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Lyon"}},
        {"type": "mystery_block", "payload": [1, 2]},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 10,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 20,
        "output_tokens": 30,
        "service_tier": "standard",
    },
}


@pytest.fixture(autouse=True)
def patched() -> Iterator[instrument.Instrumentation]:
    handle = instrument.anthropic()
    yield handle
    handle.uninstrument()


def client(server: Server, **kwargs: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="sk-ant-secret-0000",
        base_url="http://127.0.0.1:9",
        http_client=httpx2.Client(transport=httpx2.MockTransport(server)),
        **kwargs,
    )


def ask(c: anthropic.Anthropic, **kwargs: Any) -> Any:
    return c.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "Weather in Lyon?"}],
        tools=[{"name": "weather", "input_schema": {"type": "object"}}],
        thinking={"type": "enabled", "budget_tokens": 512},
        **kwargs,
    )


def test_a_message_with_thinking_tool_use_and_cache_tokens(
    server: Server, session: Session
) -> None:
    """A 529 retried, then the message: signed thinking, tool use, cache reads and writes."""
    server.reply(
        529,
        json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        headers={"retry-after-ms": "1"},
    )
    server.reply(200, json=MESSAGE)
    with session.begin_run():
        result = ask(client(server))
    assert result.stop_reason == "tool_use"
    requests = of(session, "model_request")
    assert len(requests) == 2
    sent = orjson.loads(server.bodies[1])
    assert requests[1].data["messages"] == sent["messages"]
    assert requests[1].data["tools"] == sent["tools"]
    assert requests[1].data["config"]["system"] == sent["system"]
    ends = of(session, "model_exec_end")
    assert ends[0].data["error"]["type"] == "529"
    assert ends[0].data["error"]["message"] == "Overloaded"
    assert [r.data["next_attempt"] for r in of(session, "retry_scheduled")] == [2]
    end = ends[1].data
    assert end["message"].content == (
        ThinkingContent("Need the weather.", "sig=="),
        TextContent("Checking."),
        ToolCall("toolu_1", "weather", {"city": "Lyon"}),
    )
    use = end["usage"]
    assert (use.input_tokens, use.cache_read_tokens, use.cache_write_tokens) == (130, 100, 20)
    assert end["response"]["blocks"] == [
        {"index": 3, "block": {"type": "mystery_block", "payload": [1, 2]}}
    ]
    assert end["response"]["service_tier"] == "standard"
    assert b"sk-ant-secret" not in session.path.read_bytes()


def stream_events() -> bytes:
    start = {k: v for k, v in MESSAGE.items() if k != "content"}
    start = {**start, "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**start, "content": []}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Hm"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "s1"},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Sun"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "ny"}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"city": '},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '"Nice"}'},
        },
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 42},
        },
        {"type": "message_stop"},
    ]
    return sse(*events, named=True)


def test_the_stream_helper_assembles_thinking_text_and_tool_input(
    server: Server, session: Session
) -> None:
    """messages.stream(): the final message is the one the SDK assembled, field for field."""
    server.stream(stream_events())
    with (
        session.begin_run(),
        client(server).messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=64,
            messages=[{"role": "user", "content": "Nice?"}],
        ) as stream,
    ):
        final = stream.get_final_message()
    end = of(session, "model_exec_end")[0].data
    assert end["message"].content == (
        ThinkingContent("Hm", "s1"),
        TextContent("Sunny"),
        ToolCall("toolu_2", "weather", {"city": "Nice"}),
    )
    assert getattr(final.content[2], "input", None) == {"city": "Nice"}
    assert end["usage"].output_tokens == 42
    assert end["stop_reason"] == "tool_use"


def test_a_stream_the_caller_leaves_ends_with_its_partial_message(
    server: Server, session: Session
) -> None:
    """Leaving the stream after the first text: StreamClosed, the partial thinking and text kept."""
    server.stream(stream_events())
    with session.begin_run():
        with client(server).messages.stream(
            model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "?"}]
        ) as stream:
            for text in stream.text_stream:
                assert text == "Sun"
                break
        end = of(session, "model_exec_end")[0].data
    assert end["error"]["type"] == "StreamClosed"
    assert end["partial_message"].content[:2] == (ThinkingContent("Hm", "s1"), TextContent("Sun"))


def test_async_messages_and_an_error_in_the_stream(server: Server, session: Session) -> None:
    """AsyncAnthropic: a message, then a stream whose server sends an error event mid-way."""
    server.reply(200, json=MESSAGE)
    body = stream_events()
    cut = body.index(b"event: content_block_start", body.index(b"Sun"))
    error = sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    server.stream(body[:cut] + error.replace(b"data:", b"event: error\ndata:"), asynchronous=True)
    c = anthropic.AsyncAnthropic(
        api_key="sk-ant-secret-0000",
        base_url="http://127.0.0.1:9",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(server.handle_async)),
    )

    async def main() -> None:
        message = await c.messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "a"}]
        )
        assert message.id == "msg_1"
        stream = await c.messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "b"}], stream=True
        )
        with pytest.raises(anthropic.APIStatusError):
            async for _ in stream:
                pass

    with session.begin_run():
        asyncio.run(main())
    first, second = (e.data for e in of(session, "model_exec_end"))
    assert first["response_id"] == "msg_1"
    assert second["error"]["type"] == "overloaded_error"
    assert second["partial_message"].text == "Sunny"


def test_spans_reach_a_real_otlp_receiver_nested_and_without_bodies(
    server: Server, tmp_path: Path
) -> None:
    """Over OTLP/HTTP to 127.0.0.1: host span → run → chat span, no prompt or reply on the wire."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from loopscribe.otel import SpanBridge

    from ..otlp_receiver import http_receiver

    server.reply(200, json=MESSAGE)
    with http_receiver() as received:
        exporter = OTLPSpanExporter(endpoint=f"{received.endpoint}/v1/traces")
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        bridge = SpanBridge(tracer_provider=provider)
        with (
            provider.get_tracer("host").start_as_current_span("POST /chat") as host,
            Session.create(tmp_path / "s.jsonl", observers=[bridge]) as session,
            session.begin_run(),
        ):
            ask(client(server))
        provider.shutdown()
        spans = {s.name: s for s in received.spans()}
        bodies, _ = received.snapshot()
    chat = spans["chat claude-sonnet-4-5"]
    run = next(s for name, s in spans.items() if name.startswith("invoke_agent"))
    host_ctx = host.get_span_context()
    assert chat.parent_span_id == run.span_id
    assert int.from_bytes(run.parent_span_id, "big") == host_ctx.span_id
    assert int.from_bytes(chat.trace_id, "big") == host_ctx.trace_id
    wire = b"".join(bodies)
    assert b"Weather in Lyon" not in wire
    assert b"Need the weather" not in wire
    assert b"Checking." not in wire
