"""Standalone model calls through the ModelExecutor."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopscribe import (
    AssistantMessage,
    Codec,
    EncodeError,
    Event,
    Execution,
    LLMRequest,
    ModelExecution,
    ModelExecutor,
    ModelResult,
    Recorder,
    Session,
    StreamEnd,
    TextContent,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    Usage,
    UserMessage,
    read,
)
from loopscribe.otel import replay
from loopscribe.testing import captured_spans

EX = Execution("classify", "model", attempt=1)
REQUEST = LLMRequest(
    [UserMessage("hello")], [{"name": "t"}], {"temperature": 0.1, "api_key": "sk-CANARY"}
)


class Scripted:
    """A model that streams a fixed list of chunks, then optionally fails."""

    def __init__(self, name: str, chunks: list[Any], fail: Exception | None = None) -> None:
        self.name = name
        self.chunks = chunks
        self.fail = fail
        self.requests: list[LLMRequest] = []

    def stream(self, request: LLMRequest) -> Iterator[Any]:
        self.requests.append(request)
        yield from self.chunks
        if self.fail is not None:
            raise self.fail


OK_CHUNKS: list[Any] = [
    ThinkingDelta("hmm"),
    "Hel",
    TextDelta("lo"),
    ToolCall("c1", "t", {"a": 1}),
    StreamEnd("tool_use", Usage(10, 3)),
]


def types(events: list[Event]) -> list[str]:
    """The event types, in order."""
    return [e.type for e in events]


def test_call_publishes_start_request_stream_and_end() -> None:
    """A successful call publishes its facts in order and returns the accumulated message."""
    events: list[Event] = []
    model = Scripted("m-1", OK_CHUNKS)
    model.provider = "acme"  # type: ignore[attr-defined]
    result = ModelExecutor(on_event=events.append).call(model, ModelExecution(EX, REQUEST))
    assert events[0].data == {"model": "m-1", "provider": "acme"}
    assert types(events) == [
        "model_exec_start",
        "model_request",
        *["model_stream"] * len(OK_CHUNKS),
        "model_exec_end",
    ]
    assert result.ok
    assert result.model == "m-1"
    assert result.message is not None
    assert result.message.text == "Hello"
    assert result.message.tool_calls == (ToolCall("c1", "t", {"a": 1}),)
    assert result.message.usage == Usage(10, 3)
    end = events[-1].data
    assert end["message"] == result.message
    assert end["usage"] == Usage(10, 3)
    assert end["stop_reason"] == "tool_use"
    assert "api_key" not in events[1].data["config"]
    assert "message_end" not in types(events)
    assert "agent_end" not in types(events)


def test_middleware_rewrites_the_request_that_is_published_and_sent() -> None:
    """model_request is the final request after middleware, and the model receives it."""
    events: list[Event] = []

    def add_system(request: LLMRequest) -> LLMRequest:
        return LLMRequest(
            [UserMessage("system says"), *request.messages], request.tools, request.config
        )

    model = Scripted("m-1", ["ok"])
    ModelExecutor([add_system], on_event=events.append).call(model, ModelExecution(EX, REQUEST))
    published = next(e for e in events if e.type == "model_request")
    assert list(published.data["messages"]) == [UserMessage("system says"), UserMessage("hello")]
    assert model.requests[0].messages[0] == UserMessage("system says")


def test_middleware_short_circuit_omits_request_and_attempts() -> None:
    """A middleware that answers itself publishes start and end only; no model is called."""
    events: list[Event] = []
    cached = AssistantMessage((TextContent("cached"),))

    def cache(request: LLMRequest) -> ModelResult:
        return ModelResult(cached, model="cache")

    model = Scripted("m-1", ["never"])
    result = ModelExecutor([cache], on_event=events.append, router=lambda m, r: [m]).call(
        model, ModelExecution(EX, REQUEST)
    )
    assert types(events) == ["model_exec_start", "model_exec_end"]
    assert result.short_circuit
    assert result.message == cached
    assert model.requests == []


def test_router_attempts_are_published_and_fall_through_on_error() -> None:
    """Each routed attempt is a model_route; a failing model hands over to the next one."""
    events: list[Event] = []
    first = Scripted("small", ["par"], fail=ConnectionError("CANARY-down"))
    second = Scripted("large", ["answer"])
    result = ModelExecutor(on_event=events.append, router=lambda m, r: [first, second]).call(
        first, ModelExecution(EX, REQUEST)
    )
    routes = [(e.data["model"], "error" in e.data) for e in events if e.type == "model_route"]
    assert routes == [("small", False), ("small", True), ("large", False)]
    assert result.ok
    assert result.model == "large"
    assert result.message is not None
    assert result.message.text == "answer"
    assert types(events).count("model_exec_end") == 1


def test_failed_stream_returns_partial_content_with_the_error_and_no_retry() -> None:
    """A stream that fails returns its partial content and error; the call is not retried."""
    events: list[Event] = []
    boom = TimeoutError("stream cut")
    model = Scripted("m-1", ["partial te"], fail=boom)
    result = ModelExecutor(on_event=events.append).call(model, ModelExecution(EX, REQUEST))
    assert result.error is boom
    assert result.message is not None
    assert result.message.text == "partial te"
    assert len(model.requests) == 1
    end = events[-1].data
    assert end["partial_message"] == result.message
    assert end["error"] == {"type": "TimeoutError", "message": "stream cut"}
    assert "message" not in end
    with pytest.raises(TimeoutError):
        result.raise_error()


def test_a_plain_callable_is_a_model() -> None:
    """Any callable returning an iterator of chunks can be called."""

    def echo(request: LLMRequest) -> Iterator[str]:
        yield "echo"

    result = ModelExecutor().call(echo, ModelExecution(EX, REQUEST))
    assert result.model == "echo"
    assert result.message is not None
    assert result.message.text == "echo"


def test_acall_consumes_async_streams() -> None:
    """acall drives an async iterator and publishes the same facts."""
    events: list[Event] = []

    async def model(request: LLMRequest) -> AsyncIterator[Any]:
        for chunk in OK_CHUNKS:
            await asyncio.sleep(0)
            yield chunk

    result = asyncio.run(
        ModelExecutor(on_event=events.append).acall(model, ModelExecution(EX, REQUEST))
    )
    assert result.message is not None
    assert result.message.text == "Hello"
    assert types(events)[0:2] == ["model_exec_start", "model_request"]
    assert types(events)[-1] == "model_exec_end"


def test_call_refuses_an_async_model_with_a_hint() -> None:
    """Calling an async model synchronously is an error result that says to use acall."""

    async def model(request: LLMRequest) -> AsyncIterator[str]:
        yield "x"

    result = ModelExecutor().call(model, ModelExecution(EX, REQUEST))
    assert isinstance(result.error, TypeError)
    assert "acall" in str(result.error)


def test_recorded_standalone_calls_make_chat_spans(session_path: Path) -> None:
    """Recorded calls keep their bodies in the file and become chat spans without them."""
    with Session.create(session_path) as s, s.begin_run() as run:
        executor = ModelExecutor(on_event=Recorder(run))
        executor.call(Scripted("m-1", OK_CHUNKS), ModelExecution(EX, REQUEST))
        second = Execution("summarize", "model")
        executor.call(
            Scripted("m-2", ["x"], fail=RuntimeError("no")), ModelExecution(second, REQUEST)
        )
    recorded = [r.type for r in read(session_path)]
    assert "model_stream" not in recorded
    assert recorded.count("model_exec_end") == 2
    raw = session_path.read_bytes()
    assert b"hello" in raw
    assert b"sk-CANARY" not in raw
    captured = captured_spans()
    replay(session_path, captured.processor)
    chats = sorted(
        (s.name, s.status.status_code.name) for s in captured.spans if s.name.startswith("chat")
    )
    assert chats == [("chat m-1", "UNSET"), ("chat m-2", "ERROR")]


def test_concurrent_calls_record_each_call_in_order(session_path: Path) -> None:
    """Eight threads sharing one Recorder lose nothing; each call's events stay ordered."""
    with Session.create(session_path) as s, s.begin_run() as run:
        executor = ModelExecutor(on_event=Recorder(run))

        def work(worker: int) -> None:
            for i in range(20):
                ex = Execution(f"w{worker}-{i}", "model")
                executor.call(Scripted("m", ["a", "b"]), ModelExecution(ex, REQUEST))

        threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    records = list(read(session_path))
    assert [r.seq for r in records] == list(range(len(records)))
    per_call: dict[str, list[str]] = {}
    for r in records:
        if r.execution is not None:
            per_call.setdefault(r.execution.id, []).append(r.type)
    assert len(per_call) == 160
    assert all(
        v == ["model_exec_start", "model_request", "model_exec_end"] for v in per_call.values()
    )


def test_recorder_never_raises_into_the_caller(session_path: Path) -> None:
    """A closed run makes recording fail; the call still returns its result."""
    s = Session.create(session_path)
    run = s.begin_run()
    rec = Recorder(run)
    run.close()
    result = ModelExecutor(on_event=rec).call(Scripted("m", ["fine"]), ModelExecution(EX, REQUEST))
    assert result.ok
    assert rec.failures == 4  # start, request, one stream chunk, end
    s.close()


def test_a_router_that_chooses_no_model_is_an_error_result() -> None:
    """An empty routing decision fails the call instead of returning an empty success."""
    events: list[Event] = []
    result = ModelExecutor(on_event=events.append, router=lambda m, r: []).call(
        Scripted("m", ["x"]), ModelExecution(EX, REQUEST)
    )
    assert isinstance(result.error, LookupError)
    assert events[-1].data["error"]["type"] == "LookupError"


def test_a_router_that_falls_through_keeps_each_failed_attempt_in_the_file(
    session_path: Path,
) -> None:
    """Every failed routed attempt leaves its error type and partial content in the file."""
    first = Scripted("small", ["half an ans"], fail=ConnectionError("small is down"))
    second = Scripted("medium", [], fail=TimeoutError("medium timed out"))
    third = Scripted("large", ["answer"])
    with Session.create(session_path) as session, session.begin_run() as run:
        executor = ModelExecutor(on_event=Recorder(run), router=lambda m, r: [first, second, third])
        result = executor.call(first, ModelExecution(EX, REQUEST))
    assert result.ok
    failed = [r.data for r in read(session_path) if r.type == "model_route" and "error" in r.data]
    assert [f["model"] for f in failed] == ["small", "medium"]
    assert [f["error"]["type"] for f in failed] == ["ConnectionError", "TimeoutError"]
    assert failed[0]["partial_message"].text == "half an ans"
    assert "partial_message" not in failed[1]  # nothing arrived before it failed
    ends = [r for r in read(session_path) if r.type == "model_exec_end"]
    assert len(ends) == 1
    assert ends[0].data["message"].text == "answer"


class Interrupted:
    """A model that streams some chunks, then raises a BaseException (not an Exception)."""

    name = "m-int"

    def __init__(self, chunks: list[Any], exc: BaseException) -> None:
        self.chunks, self.exc = chunks, exc

    def stream(self, request: LLMRequest) -> Iterator[Any]:
        yield from self.chunks
        raise self.exc


def test_keyboard_interrupt_mid_stream_is_recorded_then_reraised(session_path: Path) -> None:
    """A KeyboardInterrupt mid-stream still ends the call on record, with the partial content."""
    model = Interrupted(["so far"], KeyboardInterrupt())
    with (
        Session.create(session_path) as session,
        session.begin_run() as run,
        pytest.raises(KeyboardInterrupt),
    ):
        ModelExecutor(on_event=Recorder(run)).call(model, ModelExecution(EX, REQUEST))
    end = [r for r in read(session_path) if r.type == "model_exec_end"]
    assert len(end) == 1
    assert end[0].data["error"]["type"] == "KeyboardInterrupt"
    assert end[0].data["partial_message"].text == "so far"


def test_asyncio_cancellation_mid_stream_is_recorded_then_reraised(session_path: Path) -> None:
    """Cancelling the task that awaits acall() records model_exec_end, then propagates."""

    class Slow:
        name = "slow"

        def __init__(self, gate: asyncio.Event) -> None:
            self.gate = gate

        async def stream(self, request: LLMRequest) -> AsyncIterator[Any]:
            yield "first words"
            self.gate.set()
            await asyncio.sleep(60)
            yield "never"

    async def main(run: Any) -> None:
        gate = asyncio.Event()
        call = ModelExecutor(on_event=Recorder(run)).acall(Slow(gate), ModelExecution(EX, REQUEST))
        task = asyncio.create_task(call)
        await gate.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with Session.create(session_path) as session, session.begin_run() as run:
        asyncio.run(main(run))
    end = [r for r in read(session_path) if r.type == "model_exec_end"]
    assert len(end) == 1
    assert end[0].data["error"]["type"] == "CancelledError"
    assert end[0].data["partial_message"].text == "first words"


def test_provider_state_from_stream_end_is_recorded_and_returned(session_path: Path) -> None:
    """StreamEnd's provider state and response id reach model_exec_end and the result."""
    state = {"conversation": "conv_7", "cache": [1, 2]}
    model = Scripted(
        "m-state", ["hi", StreamEnd("stop", provider_state=state, response_id="resp_9")]
    )
    with Session.create(session_path) as session, session.begin_run() as run:
        result = ModelExecutor(on_event=Recorder(run)).call(model, ModelExecution(EX, REQUEST))
    assert result.provider_state == state
    end = next(r for r in read(session_path) if r.type == "model_exec_end")
    assert end.data["provider_state"] == state
    assert end.data["response_id"] == "resp_9"


def test_an_encoding_failure_through_a_recorder_stays_visible(session_path: Path) -> None:
    """A codec's refusal is counted by the Recorder, kept as session.error and raised by close."""

    class RefusingCodec(Codec):
        """Refuses model_request records."""

        def dumps(self, value: Any, **options: Any) -> bytes:
            if isinstance(value, dict) and value.get("type") == "model_request":
                raise EncodeError("this codec refuses requests")
            return super().dumps(value, **options)

    session = Session.create(session_path, RefusingCodec())
    run = session.begin_run()
    recorder = Recorder(run)
    result = ModelExecutor(on_event=recorder).call(
        Scripted("m", ["ok"]), ModelExecution(EX, REQUEST)
    )
    assert result.ok  # the call itself is not the recorder's to fail
    assert recorder.failures == 3  # the request, then its chunk and its end (sticky)
    assert isinstance(session.error, EncodeError)
    assert "refuses requests" in str(session.error)
    with pytest.raises(EncodeError, match="refuses requests"):
        session.close()
    kinds = [r.type for r in read(session_path)]
    assert kinds == ["session_start", "run_start", "model_exec_start"]  # the gap is where it was
