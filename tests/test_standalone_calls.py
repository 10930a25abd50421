"""The standalone-calls example: provider clients over a fake transport, recorded and traced."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NamedTuple

import httpx2
import openai
import pytest

from loopscribe import (
    AssistantMessage,
    Execution,
    LLMRequest,
    ModelExecution,
    ModelExecutor,
    Recorder,
    Session,
    StreamEnd,
    SystemMessage,
    TextContent,
    TextDelta,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    read,
)
from loopscribe.otel import replay
from loopscribe.testing import captured_spans

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import standalone_calls as demo

KEY = "sk-CANARY-per-call"
GPT = "gpt-4o-mini"
CLAUDE = "claude-sonnet-4-5"
CONFIG = {"temperature": 0.2, "api_key": KEY}
CALL = ToolCall("call_w1", "get_weather", {"city": "Lisbon"})
HISTORY: list[Any] = [
    SystemMessage("Answer in one sentence."),
    UserMessage("What's the weather in Lisbon?"),
    AssistantMessage((CALL,)),
    ToolResultMessage("call_w1", "get_weather", (TextContent("21°C, sunny"),)),
]
OPENAI_HISTORY = [
    {"role": "system", "content": "Answer in one sentence."},
    {"role": "user", "content": "What's the weather in Lisbon?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_w1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_w1", "content": "21°C, sunny"},
]
ANTHROPIC_HISTORY = [
    {"role": "user", "content": "What's the weather in Lisbon?"},
    {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": "call_w1",
                "name": "get_weather",
                "input": {"city": "Lisbon"},
            }
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call_w1",
                "content": [{"type": "text", "text": "21°C, sunny"}],
            }
        ],
    },
]
WEATHER_SCHEMA = demo.GET_WEATHER["parameters"]


class Clients:
    """Builds provider clients on fake servers and closes their HTTP clients afterwards."""

    def __init__(self, stack: ExitStack) -> None:
        self.stack = stack

    def _http(self, server: demo.FakeServer) -> httpx2.Client:
        return self.stack.enter_context(httpx2.Client(transport=server.transport()))

    def openai(self, server: demo.FakeServer) -> demo.OpenAIChatModel:
        """The real OpenAI client, without retries, answered by ``server``."""
        client = openai.OpenAI(
            api_key="sk-test-not-real",
            base_url="http://fake.invalid/v1",
            http_client=self._http(server),
            max_retries=0,
        )
        return demo.OpenAIChatModel(client, GPT)

    def anthropic(self, server: demo.FakeServer) -> demo.AnthropicMessagesModel:
        """The fake Anthropic client, answered by ``server``."""
        client = demo.FakeAnthropic(
            api_key="sk-ant-test-not-real",
            base_url="http://fake.invalid",
            http_client=self._http(server),
        )
        return demo.AnthropicMessagesModel(client, CLAUDE)


@pytest.fixture
def clients() -> Iterator[Clients]:
    """Client factories whose HTTP clients are closed after the test."""
    with ExitStack() as stack:
        yield Clients(stack)


def sent_json(server: demo.FakeServer) -> dict[str, Any]:
    """The JSON body of the only request ``server`` received."""
    (request,) = server.requests
    body: dict[str, Any] = json.loads(request.content)
    return body


def test_openai_client_stream_becomes_a_complete_tool_call_usage_and_stop_reason(
    clients: Clients,
) -> None:
    """Tool-call fragments accumulate by index into one ToolCall, followed by usage and stop."""
    server = demo.FakeServer(demo.sse_response(demo.openai_sse(demo.OPENAI_TOOL_CALL)))
    chunks = list(clients.openai(server).stream(LLMRequest([UserMessage("weather?")])))
    assert chunks == [CALL, StreamEnd("tool_calls", Usage(42, 17), "gpt-4o-mini-2024-07-18")]


def test_openai_request_has_lowered_messages_and_the_key_only_in_a_header(
    clients: Clients,
) -> None:
    """Built-in messages are lowered, dicts pass, the stream is asked for, the key is a header."""
    server = demo.FakeServer(demo.sse_response(demo.openai_sse(demo.OPENAI_ANSWER)))
    extra = {"role": "user", "content": "And tomorrow?"}
    request = LLMRequest([*HISTORY, extra], [demo.GET_WEATHER], CONFIG)
    chunks = list(clients.openai(server).stream(request))
    assert chunks[:2] == [TextDelta("It is 21°C"), TextDelta(" and sunny.")]
    assert chunks[2] == StreamEnd("stop", Usage(71, 9), "gpt-4o-mini-2024-07-18")
    (sent,) = server.requests
    assert sent.url == "http://fake.invalid/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert KEY.encode() not in sent.content
    body = sent_json(server)
    assert body["messages"] == [*OPENAI_HISTORY, extra]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.2
    assert body["model"] == GPT
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": WEATHER_SCHEMA,
                "description": "Current weather for a city.",
            },
        }
    ]


def test_anthropic_client_stream_becomes_text_a_tool_call_and_usage(clients: Clients) -> None:
    """Text and input_json deltas become chunks; cached prompt tokens count as input."""
    start = demo.ANTHROPIC_TOOL_USE[0]
    cached = {**start["message"]["usage"], "input_tokens": 80, "cache_read_input_tokens": 300}
    events = [{**start, "message": {**start["message"], "usage": cached}}]
    server = demo.FakeServer(
        demo.sse_response(demo.anthropic_sse([*events, *demo.ANTHROPIC_TOOL_USE[1:]]))
    )
    chunks = list(clients.anthropic(server).stream(LLMRequest([UserMessage("weather?")])))
    assert chunks == [
        TextDelta("Let me check."),
        ToolCall("toolu_w1", "get_weather", {"city": "Lisbon"}),
        StreamEnd("tool_use", Usage(380, 55, cache_read_tokens=300), "claude-sonnet-4-5-20250929"),
    ]


def test_anthropic_request_lifts_the_system_prompt_and_sends_the_key_only_as_a_header(
    clients: Clients,
) -> None:
    """The system prompt is a parameter, tool results are a user turn, the key is x-api-key."""
    server = demo.FakeServer(demo.sse_response(demo.anthropic_sse(demo.ANTHROPIC_ANSWER)))
    list(clients.anthropic(server).stream(LLMRequest(HISTORY, [demo.GET_WEATHER], CONFIG)))
    (sent,) = server.requests
    assert sent.url == "http://fake.invalid/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert KEY.encode() not in sent.content
    body = sent_json(server)
    assert body["system"] == "Answer in one sentence."
    assert body["messages"] == ANTHROPIC_HISTORY
    assert body["stream"] is True
    assert body["max_tokens"] == 1024
    assert body["temperature"] == 0.2
    assert body["tools"] == [
        {
            "name": "get_weather",
            "input_schema": WEATHER_SCHEMA,
            "description": "Current weather for a city.",
        }
    ]


def test_recorded_calls_make_records_with_usage_and_chat_spans(
    clients: Clients, session_path: Path
) -> None:
    """Both calls record start, request and end with usage; replay makes their chat spans."""
    openai_server = demo.FakeServer(demo.sse_response(demo.openai_sse(demo.OPENAI_TOOL_CALL)))
    anthropic_server = demo.FakeServer(demo.sse_response(demo.anthropic_sse(demo.ANTHROPIC_ANSWER)))
    ask, answer = demo.record_calls(
        session_path, clients.openai(openai_server), clients.anthropic(anthropic_server)
    )
    assert ask.ok
    assert answer.ok
    assert ask.message is not None
    assert ask.message.tool_calls == (CALL,)
    assert answer.message is not None
    assert answer.message.text == "It is 21°C and sunny in Lisbon."
    # The tool call from OpenAI went to Claude as tool_use and tool_result.
    assert sent_json(anthropic_server)["messages"][1:] == ANTHROPIC_HISTORY[1:]

    records = [(r.execution.id, r) for r in read(session_path) if r.execution is not None]
    assert [(call, r.type) for call, r in records] == [
        (call, kind)
        for call in ("lookup", "answer")
        for kind in ("model_exec_start", "model_request", "model_exec_end")
    ]
    ends = {call: r.data for call, r in records if r.type == "model_exec_end"}
    assert ends["lookup"]["usage"] == Usage(42, 17)
    assert ends["answer"]["usage"] == Usage(96, 14)
    assert ends["lookup"]["stop_reason"] == "tool_calls"
    assert ends["answer"]["message"] == answer.message
    assert openai_server.requests[0].headers["authorization"] == f"Bearer {demo.DEMO_API_KEY}"
    assert demo.DEMO_API_KEY.encode() not in session_path.read_bytes()

    captured = captured_spans()
    replay(session_path, captured.processor)
    chats = {s.name: dict(s.attributes or {}) for s in captured.spans if s.name.startswith("chat")}
    assert set(chats) == {f"chat {GPT}", f"chat {CLAUDE}"}
    assert chats[f"chat {GPT}"]["gen_ai.usage.input_tokens"] == 42
    assert chats[f"chat {GPT}"]["gen_ai.response.model"] == "gpt-4o-mini-2024-07-18"
    assert chats[f"chat {GPT}"]["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert chats[f"chat {CLAUDE}"]["gen_ai.usage.input_tokens"] == 96
    assert chats[f"chat {CLAUDE}"]["gen_ai.usage.output_tokens"] == 14


def _openai_cut() -> Iterator[bytes]:
    yield demo.openai_sse(demo.OPENAI_ANSWER[:2]).removesuffix(b"data: [DONE]\n\n")
    raise httpx2.ReadError("connection reset by peer")


OVERLOADED = (
    b"event: error\n"
    b'data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
)


class Failure(NamedTuple):
    """How a call fails: the provider, the fake server's answer, what the caller gets."""

    provider: str
    respond: Callable[[], httpx2.Response]
    error_type: str
    partial_text: str | None


FAILURES = [
    pytest.param(
        Failure(
            "openai",
            lambda: httpx2.Response(
                500, json={"error": {"message": "boom", "type": "server_error"}}
            ),
            "InternalServerError",
            None,
        ),
        id="openai-http-500",
    ),
    pytest.param(
        Failure(
            "openai", lambda: demo.sse_response(_openai_cut()), "APIConnectionError", "It is 21°C"
        ),
        id="openai-connection-cut",
    ),
    pytest.param(
        Failure(
            "openai",
            lambda: demo.sse_response(demo.openai_sse(demo.OPENAI_ANSWER[:2])),
            "IncompleteStreamError",
            "It is 21°C",
        ),
        id="openai-no-finish-reason",
    ),
    pytest.param(
        Failure(
            "anthropic",
            lambda: httpx2.Response(
                500, json={"type": "error", "error": {"type": "api_error", "message": "boom"}}
            ),
            "FakeAnthropicError",
            None,
        ),
        id="anthropic-http-500",
    ),
    pytest.param(
        Failure(
            "anthropic",
            lambda: demo.sse_response(demo.anthropic_sse(demo.ANTHROPIC_ANSWER[:4]) + OVERLOADED),
            "FakeAnthropicError",
            "It is",
        ),
        id="anthropic-error-event",
    ),
    pytest.param(
        Failure(
            "anthropic",
            lambda: demo.sse_response(demo.anthropic_sse(demo.ANTHROPIC_ANSWER[:4])),
            "IncompleteStreamError",
            "It is",
        ),
        id="anthropic-no-message-stop",
    ),
]


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failing_transport_gives_an_error_result_and_an_error_record(
    failure: Failure, clients: Clients, session_path: Path
) -> None:
    """A refused or broken stream is an error result, recorded once with its type and no key."""
    server = demo.FakeServer(failure.respond())
    is_openai = failure.provider == "openai"
    model = clients.openai(server) if is_openai else clients.anthropic(server)
    request = LLMRequest(HISTORY, [demo.GET_WEATHER], CONFIG)
    with Session.create(session_path) as session, session.begin_run() as run:
        result = ModelExecutor(on_event=Recorder(run)).call(
            model, ModelExecution(Execution("m", "model"), request)
        )
    assert type(result.error).__name__ == failure.error_type
    assert len(server.requests) == 1
    if failure.partial_text is None:
        assert result.message is None
    else:
        assert result.message is not None
        assert result.message.text == failure.partial_text
    (end,) = [r for r in read(session_path) if r.type == "model_exec_end"]
    assert end.data["error"]["type"] == failure.error_type
    assert "message" not in end.data
    assert KEY.encode() not in session_path.read_bytes()
    captured = captured_spans()
    replay(session_path, captured.processor)
    (span,) = [s for s in captured.spans if s.name.startswith("chat")]
    assert span.status.status_code.name == "ERROR"
    assert (span.attributes or {})["error.type"] == failure.error_type


def test_main_records_both_calls_and_prints_a_summary_per_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo writes a session and its spans under the given folder and summarizes each call."""
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "argv", ["standalone_calls.py", str(tmp_path)])
    demo.main()
    out = capsys.readouterr().out
    (session_file,) = tmp_path.glob("standalone-*Z.jsonl")
    assert f"recorded to {session_file}" in out
    assert "lookup: gpt-4o-mini-2024-07-18: text '', tool calls get_weather(" in out
    assert "answer: claude-sonnet-4-5-20250929: text 'It is 21°C" in out
    assert "sent as a header yes, written to the file no" in out
    assert list(tmp_path.glob("standalone-*.otlp.jsonl"))
