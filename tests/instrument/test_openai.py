"""OpenAI through loopscribe.instrument: the real SDK on a fake transport, every attempt."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import orjson
import pytest
from openai import _base_client

from loopscribe import (
    AssistantMessage,
    Session,
    TextContent,
    ThinkingContent,
    ToolCall,
    instrument,
    read,
)
from loopscribe.live import Bus

from .conftest import Server, of, sse

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-2024-08-06",
    "service_tier": "default",
    "system_fingerprint": "fp_1",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Let me look.",
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 50,
        "completion_tokens": 12,
        "total_tokens": 62,
        "prompt_tokens_details": {"cached_tokens": 32},
        "completion_tokens_details": {"reasoning_tokens": 4},
    },
}
TOOLS: Any = [
    {
        "type": "function",
        "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}},
    }
]
FAST_RETRY = {"retry-after-ms": "1"}


@pytest.fixture(autouse=True)
def patched() -> Iterator[instrument.Instrumentation]:
    handle = instrument.openai()
    yield handle
    handle.uninstrument()


def client(server: Server, **kwargs: Any) -> openai.OpenAI:
    transport = httpx2.MockTransport(server)
    return openai.OpenAI(
        api_key="sk-secret-key-123",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.Client(transport=transport),
        **kwargs,
    )


def aclient(server: Server, **kwargs: Any) -> openai.AsyncOpenAI:
    transport = httpx2.MockTransport(server.handle_async)
    return openai.AsyncOpenAI(
        api_key="sk-secret-key-123",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.AsyncClient(transport=transport),
        **kwargs,
    )


def ask(c: openai.OpenAI, **kwargs: Any) -> Any:
    return c.chat.completions.create(
        model="gpt-4o",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
        ],
        tools=TOOLS,
        temperature=0.2,
        **kwargs,
    )


def test_every_attempt_of_the_retry_loop_is_recorded_with_its_exact_body(
    server: Server, session: Session
) -> None:
    """A 429 and an HTML 500 retried, then 200: three attempts, retry_scheduled between."""
    server.reply(
        429, json={"error": {"message": "Rate limit", "type": "requests"}}, headers=FAST_RETRY
    )
    server.reply(
        500,
        text="<html><body>Bad gateway</body></html>",
        headers={**FAST_RETRY, "content-type": "text/html"},
    )
    server.reply(200, json=CHAT, headers={"x-request-id": "req_9"})
    with session.begin_run():
        result = ask(client(server))
    assert result.choices[0].message.tool_calls[0].function.name == "weather"

    starts = of(session, "model_exec_start")
    executions = [r.execution for r in starts if r.execution is not None]
    assert [e.attempt for e in executions] == [1, 2, 3]
    assert len({e.id for e in executions}) == 1
    assert starts[0].data["provider"] == "openai"
    assert starts[0].data["model"] == "gpt-4o"
    requests = of(session, "model_request")
    for request, body in zip(requests, server.bodies, strict=True):
        sent = orjson.loads(body)
        assert request.data["messages"] == sent["messages"]
        assert request.data["tools"] == sent["tools"]
        config = {
            k: orjson.loads(v) if isinstance(v, bytes) else v
            for k, v in request.data["config"].items()
        }
        assert {
            "model": request.data["model"],
            "messages": request.data["messages"],
            "tools": request.data["tools"],
            **config,
        } == sent
        assert request.data["http"]["body_sha256"] == hashlib.sha256(body).hexdigest()
    ends = of(session, "model_exec_end")
    assert [e.data.get("error", {}).get("type") for e in ends] == ["429", "500", None]
    assert ends[0].data["error"]["body"] == {"error": {"message": "Rate limit", "type": "requests"}}
    assert "Bad gateway" in ends[1].data["error"]["body_text"]
    retries = of(session, "retry_scheduled")
    assert [(r.execution and r.execution.attempt, r.data["next_attempt"]) for r in retries] == [
        (1, 2),
        (2, 3),
    ]
    final = ends[2].data
    message = final["message"]
    assert isinstance(message, AssistantMessage)
    assert message.content == (
        TextContent("Let me look."),
        ToolCall("call_1", "weather", {"city": "Paris"}),
    )
    assert final["usage"].input_tokens == 50
    assert final["usage"].cache_read_tokens == 32
    assert final["usage"].reasoning_tokens == 4
    assert final["stop_reason"] == "tool_calls"
    assert final["response_id"] == "chatcmpl-1"
    assert final["response"] == {"service_tier": "default", "system_fingerprint": "fp_1"}
    assert final["http"] == {"status": 200, "request_id": "req_9"}
    raw = session.path.read_bytes()
    assert b"sk-secret-key-123" not in raw
    assert b"Bearer" not in raw


def test_an_error_the_sdk_does_not_retry_reaches_the_caller_as_without_loopscribe(
    server: Server, session: Session
) -> None:
    """An HTML 500 with retries off: the same exception, the page recorded as text."""
    server.reply(500, text="<html>oops</html>", headers={"content-type": "text/html"})
    with session.begin_run(), pytest.raises(openai.InternalServerError) as caught:
        ask(client(server, max_retries=0))
    assert caught.value.status_code == 500
    (end,) = of(session, "model_exec_end")
    assert end.data["error"]["type"] == "500"
    assert end.data["error"]["body_text"] == "<html>oops</html>"


def chat_chunks() -> bytes:
    base = {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-x",
    }
    deltas: list[dict[str, Any]] = [
        {"role": "assistant", "content": ""},
        {"content": "Hel"},
        {"content": "lo"},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_7",
                    "type": "function",
                    "function": {"name": "weather", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ' "Oslo"}'}}]},
    ]
    events = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    events.append(
        {
            **base,
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14},
        }
    )
    return sse(*events, done=True)


def test_a_stream_is_assembled_and_its_deltas_reach_live_subscribers(
    tmp_path: Path, server: Server
) -> None:
    """stream=True: text deltas on the bus, the assembled message and usage in model_exec_end."""
    bus = Bus()
    server.stream(chat_chunks())
    with Session.create(tmp_path / "s.jsonl", bus=bus) as session, session.begin_run():
        subscription = bus.subscribe(session.id)
        stream = ask(client(server), stream=True, stream_options={"include_usage": True})
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Hello"
    end = of(session, "model_exec_end")[0].data
    assert end["message"].content == (
        TextContent("Hello"),
        ToolCall("call_7", "weather", {"city": "Oslo"}),
    )
    assert end["usage"].output_tokens == 5
    assert end["stop_reason"] == "tool_calls"
    live = []
    while (item := subscription.get(timeout=0)) is not None:
        live.append(item)
    deltas = [i.data["chunk"].text for i in live if getattr(i, "type", None) == "model_stream"]
    assert deltas == ["Hel", "lo"]
    assert b"model_stream" not in session.path.read_bytes()


def after_hello() -> int:
    """A cut in the middle of the event after the one that completes "Hello"."""
    body = chat_chunks()
    return body.index(b"\n\n", body.index(b'"lo"')) + 12


def test_a_stream_cut_by_the_network_ends_with_the_partial_message(
    server: Server, session: Session
) -> None:
    """The transport fails mid-body: the caller sees the error; the record, it and the partial."""
    server.stream(chat_chunks(), cut=after_hello(), fail=True)
    received: list[str] = []

    def consume() -> None:
        for chunk in ask(client(server), stream=True):
            received.append(chunk.choices[0].delta.content or "")

    with (
        session.begin_run(),
        pytest.raises((httpx2.RemoteProtocolError, openai.APIConnectionError)),
    ):
        consume()
    end = of(session, "model_exec_end")[0].data
    assert end["error"]["type"] == "RemoteProtocolError"
    assert end["partial_message"].text == "".join(received) == "Hello"


def test_a_stream_that_ends_early_is_incomplete(server: Server, session: Session) -> None:
    """No ``[DONE]``: the caller gets what came, the record says the stream was incomplete."""
    server.stream(chat_chunks(), cut=after_hello())
    with session.begin_run():
        text = "".join(c.choices[0].delta.content or "" for c in ask(client(server), stream=True))
    end = of(session, "model_exec_end")[0].data
    assert end["error"]["type"] == "IncompleteStream"
    assert end["partial_message"].text == text


def test_a_caller_that_stops_reading_closes_the_execution(server: Server, session: Session) -> None:
    """Closing the stream after the first text ends the call as StreamClosed with what was read."""
    server.stream(chat_chunks())
    with session.begin_run():
        with ask(client(server), stream=True) as stream:
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    break
        assert of(session, "model_exec_end"), "closing the stream ends the execution at once"
    end = of(session, "model_exec_end")[0].data
    assert end["error"]["type"] == "StreamClosed"
    assert end["partial_message"].text.startswith("Hel")


def responses_events() -> bytes:
    resp = {
        "id": "resp_2",
        "object": "response",
        "model": "o4-mini",
        "status": "in_progress",
        "output": [],
    }
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Think"}],
        "encrypted_content": "enc",
    }
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
    }
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_3",
        "name": "weather",
        "arguments": '{"city":"Rome"}',
        "status": "completed",
    }
    final = {
        **resp,
        "status": "completed",
        "output": [reasoning, message, call],
        "previous_response_id": "resp_1",
        "service_tier": "flex",
        "usage": {
            "input_tokens": 20,
            "output_tokens": 30,
            "total_tokens": 50,
            "input_tokens_details": {"cached_tokens": 8},
            "output_tokens_details": {"reasoning_tokens": 10},
        },
    }
    events = [
        {"type": "response.created", "sequence_number": 0, "response": resp},
        {
            "type": "response.output_item.added",
            "sequence_number": 1,
            "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1", "summary": []},
        },
        {
            "type": "response.output_item.added",
            "sequence_number": 1,
            "output_index": 1,
            "item": {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            },
        },
        {
            "type": "response.content_part.added",
            "sequence_number": 1,
            "output_index": 1,
            "item_id": "msg_1",
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "sequence_number": 1,
            "output_index": 0,
            "item_id": "rs_1",
            "summary_index": 0,
            "delta": "Think",
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 2,
            "output_index": 1,
            "item_id": "msg_1",
            "content_index": 0,
            "delta": "Done.",
            "logprobs": [],
        },
        {"type": "response.completed", "sequence_number": 3, "response": final},
    ]
    return sse(*events, named=True)


def test_the_responses_stream_helper_keeps_reasoning_calls_and_the_previous_response(
    server: Server, session: Session
) -> None:
    """responses.stream(): reasoning, text, a function call; previous_response_id kept as state."""
    server.stream(responses_events())
    with (
        session.begin_run(),
        client(server).responses.stream(
            model="o4-mini", input="Weather in Rome?", previous_response_id="resp_1"
        ) as stream,
    ):
        final = stream.get_final_response()
    assert final.id == "resp_2"
    request = of(session, "model_request")[0].data
    assert request["messages"] == [{"role": "user", "content": "Weather in Rome?"}]
    assert request["config"]["previous_response_id"] == "resp_1"
    end = of(session, "model_exec_end")[0].data
    assert end["message"].content == (
        ThinkingContent("Think", "enc"),
        TextContent("Done."),
        ToolCall("call_3", "weather", {"city": "Rome"}),
    )
    assert end["provider_state"] == {"response_id": "resp_2", "previous_response_id": "resp_1"}
    assert end["usage"].cache_read_tokens == 8
    assert end["usage"].reasoning_tokens == 10
    assert end["response"]["service_tier"] == "flex"


def test_async_calls_and_raw_responses_are_recorded(server: Server, session: Session) -> None:
    """AsyncOpenAI with with_raw_response, and an async stream, in one run."""
    server.reply(200, json=CHAT)
    server.stream(chat_chunks(), asynchronous=True)

    async def main() -> str:
        c = aclient(server)
        raw = await c.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": "a"}]
        )
        assert raw.parse().id == "chatcmpl-1"
        text = ""
        async for chunk in await c.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "b"}], stream=True
        ):
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
        return text

    with session.begin_run():
        assert asyncio.run(main()) == "Hello"
    ends = of(session, "model_exec_end")
    assert [e.data["response_id"] for e in ends] == ["chatcmpl-1", "chatcmpl-2"]
    assert "error" not in ends[1].data


def test_a_response_not_as_documented_is_recorded_as_it_came(
    server: Server, session: Session
) -> None:
    """A 200 whose JSON lacks choices and usage: the SDK's object for the caller, the body kept."""
    server.reply(200, json={"id": "x", "object": "chat.completion", "weird": [1]})
    with session.begin_run():
        result = ask(client(server))
    assert result.id == "x"
    end = of(session, "model_exec_end")[0].data
    assert end["response_id"] == "x"
    assert end["response"]["body"]["weird"] == [1]


def test_show_renders_the_conversation(server: Server, session: Session) -> None:
    """`loopscribe show` prints the user's messages and the model's reply, each once."""
    server.reply(200, json=CHAT)
    server.reply(200, json=CHAT)
    c = client(server)
    with session.begin_run():
        ask(c)
        ask(c)
    out = subprocess.run(
        [sys.executable, "-m", "loopscribe", "show", str(session.path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    body = out.split("\n", 1)[1]  # below the summary line, whose title is the first prompt
    assert body.count("Weather?") == 1
    assert body.count("Be brief.") == 1
    assert out.count("Let me look.") == 2
    assert "[tool call weather call_1]" in out


def test_calls_outside_a_run_go_to_the_process_session(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No current run: the call lands in one session under LOOPSCRIBE_DIR, in one run."""
    monkeypatch.setenv("LOOPSCRIBE_DIR", str(tmp_path / "sessions"))
    instrument.configure()
    try:
        server.reply(200, json=CHAT)
        server.reply(200, json=CHAT)
        c = client(server)
        ask(c)
        ask(c)
        session = instrument.default_session()
        assert session is not None
        assert session.path.parent == tmp_path / "sessions"
    finally:
        instrument.configure()
    recs = list(read(session.path))
    assert [r.type for r in recs].count("model_exec_end") == 2
    assert len({r.run_id for r in recs if r.run_id}) == 1
    assert recs[-1].type == "run_close"


def test_uninstrument_restores_the_sdk(
    server: Server, session: Session, patched: instrument.Instrumentation
) -> None:
    """After uninstrument() the SDK's own methods are back and calls are not recorded."""
    assert (
        _base_client.SyncAPIClient.request
        is not _base_client.SyncAPIClient.__dict__["request"].__wrapped__
    )
    patched.uninstrument()
    assert not hasattr(_base_client.SyncAPIClient.request, "__wrapped__")
    assert not hasattr(_base_client.AsyncAPIClient.request, "__wrapped__")
    server.reply(200, json=CHAT)
    c = client(server)
    with session.begin_run():
        ask(c)
    assert of(session, "model_exec_start") == []
    assert "send" not in vars(c._client)


def test_one_client_alone(
    server: Server, session: Session, patched: instrument.Instrumentation
) -> None:
    """openai(client) records that client's calls and no other's."""
    patched.uninstrument()
    server.reply(200, json=CHAT)
    server.reply(200, json=CHAT)
    mine, other = client(server), client(server)
    handle = instrument.openai(mine)
    with session.begin_run():
        ask(mine)
        ask(other)
    handle.uninstrument()
    assert len(of(session, "model_exec_end")) == 1
    assert "request" not in vars(mine)


def test_a_failing_recording_never_reaches_the_caller(server: Server, tmp_path: Path) -> None:
    """The session's redactor fails on every model record: the caller still gets its answer."""

    def redact(line: bytes) -> bytes:
        if b'"type":"model_' in line:
            raise RuntimeError("redactor broke")
        return line

    server.reply(200, json=CHAT)
    with Session.create(tmp_path / "s.jsonl", redact=redact) as session, session.begin_run():
        assert ask(client(server)).choices[0].message.content == "Let me look."
    assert [r.type for r in read(session.path)][-1] == "run_close"


def test_the_chat_span_nests_under_the_hosts_active_span(server: Server, tmp_path: Path) -> None:
    """Host span → run span → one chat span per attempt, in the host's trace; no body on a span."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from loopscribe.otel import SpanBridge

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bridge = SpanBridge(SimpleSpanProcessor(exporter))
    server.reply(429, json={"error": {"message": "later"}}, headers=FAST_RETRY)
    server.reply(200, json=CHAT)
    with (
        provider.get_tracer("host").start_as_current_span("handle request") as host,
        Session.create(tmp_path / "s.jsonl", observers=[bridge]) as session,
        session.begin_run(),
    ):
        ask(client(server))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert len(chats) == 2
    run_span = next(s for s in spans.values() if s.name.startswith("invoke_agent"))
    assert run_span.parent is not None
    assert run_span.parent.span_id == host.get_span_context().span_id
    for chat in chats:
        assert chat.context.trace_id == host.get_span_context().trace_id
        assert chat.parent is not None
        assert chat.parent.span_id == run_span.context.span_id
        attributes = dict(chat.attributes or {})
        assert attributes["gen_ai.request.model"] == "gpt-4o"
        assert "Weather?" not in str(attributes)
    assert [(c.attributes or {}).get("error.type") for c in chats] == ["429", None]


def test_streaming_response_and_a_plain_responses_call(server: Server, session: Session) -> None:
    """with_streaming_response reads the JSON as the caller does; responses.create() is one call."""
    server.reply(200, json=CHAT)
    final = {
        "id": "resp_9",
        "object": "response",
        "model": "gpt-4.1",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [
            {
                "type": "message",
                "id": "m",
                "role": "assistant",
                "status": "incomplete",
                "content": [{"type": "refusal", "refusal": "I can't."}],
            },
            {"type": "web_search_call", "id": "ws", "status": "completed"},
        ],
        "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
    }
    server.reply(200, json=final)
    c = client(server)
    with session.begin_run():
        with c.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": "x"}]
        ) as response:
            assert response.parse().id == "chatcmpl-1"
        assert c.responses.create(model="gpt-4.1", input=[{"role": "user", "content": "y"}]).id
    first, second = (e.data for e in of(session, "model_exec_end"))
    assert first["response_id"] == "chatcmpl-1"
    assert second["message"].content == (TextContent("I can't."),)
    assert second["stop_reason"] == "max_output_tokens"
    assert second["response"]["refusal"] == "I can't."
    assert second["response"]["output"] == [
        {"index": 1, "item": {"type": "web_search_call", "id": "ws", "status": "completed"}}
    ]


def test_hostile_bodies_are_recorded_as_data(server: Server, session: Session) -> None:
    """Garbage SSE lines, the reserved ``$ls`` key, an infinite number: recorded, none raised."""
    evil = {
        "id": "chatcmpl-e",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "content": "ok",
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c",
                            "function": {"name": "t", "arguments": '{"$ls": "x", "n": 1e999}'},
                        },
                        {
                            "index": 1,
                            "id": "d",
                            "function": {"name": "u", "arguments": '{"$ls": {"$ls": 1}}'},
                        },
                    ],
                },
                "finish_reason": "stop",
            }
        ],
    }
    body = b"data: {not json\n\n: a comment\n\ndata: \xff\xfe\n\n" + sse(evil, done=True)
    server.stream(body)
    with session.begin_run():
        stream = ask(client(server), stream=True)
        with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's own error on bad JSON
            list(stream)
    end = of(session, "model_exec_end")[0].data
    assert end["error"]["type"] == "StreamClosed"
    assert end["response"]["unread_events"][0] == "{not json"
    server.stream(sse(evil, done=True))
    with session.begin_run():
        assert "".join(c.choices[0].delta.content or "" for c in ask(client(server), stream=True))
    end = of(session, "model_exec_end")[1].data
    call, reserved = end["message"].tool_calls
    assert reserved.arguments == {"$ls": {"$ls": 1}}
    # JSON that orjson cannot hold (1e999 is infinite) is kept as the text that came.
    assert call.arguments == {"": '{"$ls": "x", "n": 1e999}'}


PROCESS_SCRIPT = """
import httpx2, openai, orjson, sys
import loopscribe.instrument as instrument
body = orjson.loads(sys.argv[1])
instrument.configure(sys.argv[2])
instrument.openai()
reply = httpx2.MockTransport(lambda r: httpx2.Response(200, json=body))
client = openai.AzureOpenAI(
    api_key="azure-secret", api_version="2024-10-21", azure_endpoint="http://127.0.0.1:9",
    http_client=httpx2.Client(transport=reply),
)
for _ in range(2):
    client.chat.completions.create(model="deploy-1", messages=[{"role": "user", "content": "hi"}])
"""


def test_the_process_session_is_closed_when_the_process_exits(tmp_path: Path) -> None:
    """Azure calls outside a run, in a process of their own: one file, one run, closed at exit."""
    folder = tmp_path / "sessions"
    subprocess.run(
        [sys.executable, "-c", PROCESS_SCRIPT, orjson.dumps(CHAT).decode(), str(folder)],
        check=True,
        timeout=60,
    )
    (path,) = folder.iterdir()
    recs = list(read(path))
    assert [r.type for r in recs].count("model_exec_end") == 2
    assert {r.run_id for r in recs if r.run_id} == {recs[1].run_id}
    assert recs[-1].type == "run_close"
    request = next(r for r in recs if r.type == "model_request")
    assert request.data["http"]["url"].endswith("/openai/deployments/deploy-1/chat/completions")
    assert b"azure-secret" not in path.read_bytes()


def test_a_cancelled_async_call_ends_its_execution(session: Session) -> None:
    """The task awaiting the response is cancelled: the attempt ends with CancelledError."""
    arrived = asyncio.Event()

    async def never(request: httpx2.Request) -> httpx2.Response:
        arrived.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    c = openai.AsyncOpenAI(
        api_key="sk-x",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(never)),
    )

    async def main() -> None:
        task = asyncio.create_task(
            c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "?"}])
        )
        await arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with session.begin_run():
        asyncio.run(main())
    (end,) = of(session, "model_exec_end")
    assert end.data["error"]["type"] == "CancelledError"


def test_the_chat_stream_helper(server: Server, session: Session) -> None:
    """chat.completions.stream(): the SDK's final completion and the record agree."""
    server.stream(chat_chunks())
    with (
        session.begin_run(),
        client(server).chat.completions.stream(
            model="gpt-4o", messages=[{"role": "user", "content": "?"}], tools=TOOLS
        ) as stream,
    ):
        final = stream.get_final_completion()
    message = of(session, "model_exec_end")[0].data["message"]
    assert message.text == final.choices[0].message.content == "Hello"
    (call,) = final.choices[0].message.tool_calls or []
    assert message.tool_calls == (ToolCall(call.id, "weather", {"city": "Oslo"}),)


def test_each_message_is_committed_once_and_repeated_words_twice(
    server: Server, session: Session
) -> None:
    """A conversation of three requests: every user turn once, "yes" twice; the replies once."""
    for _ in range(3):
        server.reply(200, json=CHAT)
    c = client(server)
    history: list[Any] = [{"role": "user", "content": "yes"}]
    with session.begin_run():
        for turn in range(3):
            reply = c.chat.completions.create(model="gpt-4o", messages=history)
            history += [
                {"role": "assistant", "content": reply.choices[0].message.content},
                {"role": "user", "content": "yes" if turn == 0 else f"turn {turn}"},
            ]
    committed = [r.data["message"] for r in of(session, "message_end")]
    users = [m["content"] for m in committed if isinstance(m, dict)]
    assert users == ["yes", "yes", "turn 1"]
    assert sum(isinstance(m, AssistantMessage) for m in committed) == 3
