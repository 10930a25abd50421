"""Google GenAI through loopscribe.instrument: generate_content, its stream, function calls."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx2
import orjson
import pytest
from google import genai
from google.genai import types

from loopscribe import Session, TextContent, ThinkingContent, ToolCall, instrument

from .conftest import Server, of, sse

RESPONSE = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [
                    {"text": "Plan it.", "thought": True, "thoughtSignature": "c2ln"},
                    {"text": "Calling."},
                    {"functionCall": {"name": "weather", "args": {"city": "Bern"}}},
                    {"executableCode": {"language": "PYTHON", "code": "1+1"}},
                ],
            },
            "finishReason": "STOP",
        }
    ],
    "usageMetadata": {
        "promptTokenCount": 40,
        "candidatesTokenCount": 10,
        "cachedContentTokenCount": 16,
        "thoughtsTokenCount": 6,
        "totalTokenCount": 56,
    },
    "modelVersion": "gemini-2.5-flash-001",
    "responseId": "r-1",
}


@pytest.fixture(autouse=True)
def patched() -> Iterator[instrument.Instrumentation]:
    handle = instrument.google_genai()
    yield handle
    handle.uninstrument()


def client(server: Server) -> genai.Client:
    options = types.HttpOptions(
        base_url="http://127.0.0.1:9/",
        httpx_client=httpx2.Client(transport=httpx2.MockTransport(server)),
        httpx_async_client=httpx2.AsyncClient(transport=httpx2.MockTransport(server.handle_async)),
        retry_options=types.HttpRetryOptions(attempts=3, initial_delay=0.001, max_delay=0.002),
    )
    return genai.Client(api_key="AIza-secret-key", http_options=options)


CONFIG: Any = types.GenerateContentConfig(
    system_instruction="Be brief.",
    tools=[types.Tool(function_declarations=[types.FunctionDeclaration(name="weather")])],
)


def test_generate_content_with_a_retry_thoughts_and_a_function_call(
    server: Server, session: Session
) -> None:
    """A 503 retried by the SDK, then thoughts, text and a function call; unknown parts kept."""
    server.reply(503, json={"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}})
    server.reply(200, json=RESPONSE)
    with session.begin_run():
        result = client(server).models.generate_content(
            model="gemini-2.5-flash", contents="Weather in Bern?", config=CONFIG
        )
    assert result.function_calls is not None
    starts = of(session, "model_exec_start")
    assert [(r.data["model"], r.data["provider"]) for r in starts] == [
        ("gemini-2.5-flash", "gcp.gemini")
    ] * 2
    request = of(session, "model_request")[1].data
    sent = orjson.loads(server.bodies[1])
    assert request["messages"] == sent["contents"]
    assert request["tools"] == sent["tools"]
    assert request["config"]["systemInstruction"] == sent["systemInstruction"]
    ends = of(session, "model_exec_end")
    assert ends[0].data["error"]["type"] == "503"
    assert len(of(session, "retry_scheduled")) == 1
    end = ends[1].data
    assert end["message"].content == (
        ThinkingContent("Plan it.", "c2ln"),
        TextContent("Calling."),
        ToolCall("", "weather", {"city": "Bern"}),
    )
    assert end["response"]["parts"][0]["index"] == 3
    use = end["usage"]
    assert (use.input_tokens, use.output_tokens, use.cache_read_tokens) == (40, 16, 16)
    assert use.reasoning_tokens == 6
    assert b"AIza-secret-key" not in session.path.read_bytes()


def chunks() -> bytes:
    parts = [
        [{"text": "Sun", "thought": False}],
        [{"text": "ny"}],
        [{"functionCall": {"name": "weather", "args": {"city": "Bern"}}}],
    ]
    events: list[dict[str, Any]] = [
        {"candidates": [{"content": {"role": "model", "parts": p}}], "modelVersion": "g-1"}
        for p in parts
    ]
    events[-1]["candidates"][0]["finishReason"] = "STOP"
    events[-1]["usageMetadata"] = {"promptTokenCount": 5, "candidatesTokenCount": 3}
    return sse(*events)


def test_a_stream_async_and_sync(server: Server, session: Session) -> None:
    """generate_content_stream, sync and async: the assembled text and call, complete."""
    server.stream(chunks())
    server.stream(chunks(), asynchronous=True)
    c = client(server)

    async def astream() -> str:
        text = ""
        async for chunk in await c.aio.models.generate_content_stream(
            model="gemini-2.5-flash", contents="Weather?"
        ):
            text += chunk.text or ""
        return text

    with session.begin_run():
        text = "".join(
            chunk.text or ""
            for chunk in c.models.generate_content_stream(model="gemini-2.5-flash", contents="W?")
        )
        assert asyncio.run(astream()) == text == "Sunny"
    for end in of(session, "model_exec_end"):
        assert "error" not in end.data
        assert end.data["message"].content == (
            TextContent("Sunny"),
            ToolCall("", "weather", {"city": "Bern"}),
        )
        assert end.data["usage"].input_tokens == 5


def test_a_stream_cut_short_is_incomplete(server: Server, session: Session) -> None:
    """Cut mid-event: the SDK's own error for the caller; IncompleteStream and the partial text."""
    body = chunks()
    server.stream(body[: body.index(b"functionCall")])
    stream = client(server).models.generate_content_stream(model="g", contents="W?")
    with session.begin_run(), pytest.raises(genai.errors.UnknownApiResponseError):
        list(stream)
    end = of(session, "model_exec_end")[0].data
    assert end["error"]["type"] == "IncompleteStream"
    assert end["partial_message"].text == "Sunny"
