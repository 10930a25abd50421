"""pydantic-ai scenarios users build: output retries, limits, cancellation, iter, streamed output.

Real pydantic-ai agents answer from scripted ``FunctionModel``s (offline:
``override_allow_model_requests(False)``); each test reads the session back
(``loopscribe.read``, ``loopscribe show``) and checks the spans ``SpanBridge``
hands to the SDK.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, TextPart, ToolCallPart
from pydantic_ai.models import override_allow_model_requests
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.usage import UsageLimits

import loopscribe
from loopscribe import AssistantMessage, Record, Session, ToolCall, ToolResultMessage, UserMessage
from loopscribe.adapters.pydantic_ai import LoopscribeCapability
from loopscribe.otel import SpanBridge
from loopscribe.testing import CapturedSpans, captured_spans

from .test_pydantic_ai import Script, ex, of_type, show_lines, text_of

CANARY = "canary-body-e4d2"


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    """Refuse every real provider: only the in-process test models may answer."""
    with override_allow_model_requests(False):
        yield


class City(BaseModel):
    """Structured output."""

    name: str
    population: int


def record(path: Path, main: Any) -> tuple[list[Record], CapturedSpans, int]:
    """Run ``main(capability)`` in one loopscribe run with a live bridge; records, spans, errors."""
    captured = captured_spans()
    with (
        Session.create(path, observers=[SpanBridge(captured.processor, file_uri=path)]) as s,
        s.begin_run() as run,
    ):
        capability = LoopscribeCapability(run)
        asyncio.run(main(capability))
    return list(loopscribe.read(path)), captured, capability.errors


def attrs(span: ReadableSpan) -> dict[str, Any]:
    """A span's attributes as a plain dict."""
    return dict(span.attributes or {})


def status(spans: Sequence[ReadableSpan], name: str) -> list[tuple[StatusCode, Any]]:
    """The status and ``error.type`` of the spans called ``name``."""
    return [(s.status.status_code, attrs(s).get("error.type")) for s in spans if s.name == name]


def body_free(spans: Sequence[ReadableSpan]) -> bool:
    """No span carries a body: the canary is in the file only."""
    return not any(CANARY in repr(attrs(s)) + repr(s.events) for s in spans)


def committed(records: Sequence[Record]) -> list[Any]:
    """The committed messages, in file order."""
    return [r.data["message"] for r in of_type(records, "message_end")]


def test_output_validation_retries_send_the_feedback_back_to_the_model(tmp_path: Path) -> None:
    """An output validator raising ModelRetry, for tool output and for text output."""
    structured = Agent(
        FunctionModel(
            Script(
                [
                    [ToolCallPart("final_result", {"name": "Lisbon", "population": -1}, "o1")],
                    [ToolCallPart("final_result", {"name": "Lisbon", "population": 545}, "o2")],
                ]
            ),
            model_name="geo-model",
        ),
        name="geo",
        output_type=City,
    )

    @structured.output_validator
    def positive(city: City) -> City:
        if city.population < 0:
            raise ModelRetry(f"population must be positive {CANARY}")
        return city

    text = Agent(
        FunctionModel(Script([[TextPart("maybe")], [TextPart("yes")]]), model_name="yes-model"),
        name="yes",
    )

    @text.output_validator
    def decided(answer: str) -> str:
        if answer != "yes":
            raise ModelRetry(f"answer yes or no {CANARY}")
        return answer

    async def main(capability: LoopscribeCapability) -> None:
        assert (await structured.run("Lisbon?", capabilities=[capability])).output.population == 545
        assert (await text.run("Decide.", capabilities=[capability])).output == "yes"

    path = tmp_path / "retries.jsonl"
    records, captured, errors = record(path, main)
    assert errors == 0
    geo = [r for r in records if r.execution is not None and ex(r).id.startswith("geo_1")]
    yes = [r for r in records if r.execution is not None and ex(r).id.startswith("yes_2")]
    # Two model calls each, the second asked with the validator's feedback.
    for run_records, feedback in ((geo, "population must be positive"), (yes, "answer yes or no")):
        requests = of_type(run_records, "model_request")
        assert [ex(r).id.split("/")[-1] for r in requests] == ["model_1", "model_2"]
        assert feedback in text_of(requests[1].data["messages"][-1])
        assert feedback not in repr(requests[0].data["messages"])
        assert not [r for r in run_records if "error" in r.data]
    # Output tools are part of the response, not tool executions.
    assert not of_type(records, "tool_exec_start")
    assert [type(m).__name__ for m in committed(geo)] == [
        *("UserMessage", "AssistantMessage", "ToolResultMessage"),
        *("AssistantMessage", "ToolResultMessage"),
    ]
    rejected = committed(geo)[2]
    assert isinstance(rejected, ToolResultMessage)
    assert (rejected.tool_call_id, rejected.is_error) == ("o1", True)
    # Text output feedback is what the model reads: a user turn, typed, never a raw dict.
    yes_messages = committed(yes)
    assert [type(m).__name__ for m in yes_messages] == [
        *("UserMessage", "AssistantMessage", "UserMessage", "AssistantMessage")
    ]
    assert "answer yes or no" in text_of(yes_messages[2])
    assert [r.data["output"] for r in of_type(records, "agent_end")] == [
        {"name": "Lisbon", "population": 545},
        "yes",
    ]
    assert len(captured.named("chat geo-model")) == 2
    assert status(captured.spans, "invoke_agent geo") == [(StatusCode.UNSET, None)] * 2
    assert body_free(captured.spans)
    lines = show_lines(path)
    assert "?" not in lines
    assert not [line for line in lines if "retry-feedback" in line]


def test_parallel_calls_with_hostile_results_and_a_failing_one(tmp_path: Path) -> None:
    """Three calls in one response: odd values, a huge result, a ModelRetry; each recorded once."""
    agent = Agent(
        FunctionModel(
            Script(
                [
                    [
                        ToolCallPart("odd", {"key": "$ls"}, "p1"),
                        ToolCallPart("huge", {}, "p2"),
                        ToolCallPart("strict", {"n": 1}, "p3"),
                    ],
                    [TextPart("Done.")],
                ]
            ),
            model_name="para",
        ),
        name="para",
    )
    huge = "y" * 1_000_000 + CANARY

    @agent.tool_plain
    def odd(key: str) -> dict[str, Any]:
        """Values without a plain JSON form."""
        return {key: 1, "big": 2**70, "nested": {"\u2028": [None, 1.5]}, "text": "a\x00b"}

    @agent.tool_plain(name="huge")
    def huge_result() -> str:
        """A very long result."""
        return huge

    @agent.tool_plain
    def strict(n: int) -> str:
        """Refuses everything."""
        raise ModelRetry(f"try n=2 {CANARY}")

    async def main(capability: LoopscribeCapability) -> None:
        assert (await agent.run("Go.", capabilities=[capability])).output == "Done."

    records, captured, errors = record(tmp_path / "parallel.jsonl", main)
    assert errors == 0
    starts = [ex(r).id for r in of_type(records, "tool_exec_start")]
    assert sorted(starts) == ["p1", "p2", "p3"]
    ends = {ex(r).id: r.data for r in of_type(records, "tool_exec_end")}
    assert sorted(ends) == ["p1", "p2", "p3"]
    assert ends["p1"]["result"]["$ls"] == 1
    assert ends["p1"]["result"]["nested"] == {"\u2028": [None, 1.5]}
    assert ends["p1"]["result"]["text"] == "a\x00b"
    assert ends["p2"]["result"] == huge
    assert (ends["p3"]["disposition"], ends["p3"]["error"]["type"]) == ("retry", "ModelRetry")
    parents = {ex(r).parent_id for r in of_type(records, "tool_exec_start")}
    assert parents == {"para_1/turn_1"}
    results = [m for m in committed(records) if isinstance(m, ToolResultMessage)]
    assert sorted((m.tool_call_id, m.is_error) for m in results) == [
        ("p1", False),
        ("p2", False),
        ("p3", True),
    ]
    assert status(captured.spans, "execute_tool strict") == [(StatusCode.ERROR, "ModelRetry")]
    assert status(captured.spans, "execute_tool huge") == [(StatusCode.UNSET, None)]
    assert body_free(captured.spans)


def test_usage_limits_end_the_run_before_the_request_over_the_limit(tmp_path: Path) -> None:
    """UsageLimits(request_limit=2): two model calls, then the run fails with the limit."""
    agent = Agent(
        FunctionModel(
            Script([[ToolCallPart("again", {}, f"u{n}")] for n in range(5)]), model_name="loop"
        ),
        name="looper",
    )

    @agent.tool_plain
    def again() -> str:
        """Ask for more."""
        return "more"

    async def main(capability: LoopscribeCapability) -> None:
        with pytest.raises(UsageLimitExceeded):
            await agent.run(
                "Loop.", capabilities=[capability], usage_limits=UsageLimits(request_limit=2)
            )

    records, captured, errors = record(tmp_path / "limits.jsonl", main)
    assert errors == 0
    assert len(of_type(records, "model_exec_start")) == 2
    assert [ex(r).id for r in of_type(records, "tool_exec_end")] == ["u0", "u1"]
    (end,) = of_type(records, "agent_end")
    assert end.data["error"]["type"] == "UsageLimitExceeded"
    assert [r.type for r in records][-2:] == ["agent_end", "run_close"]
    assert status(captured.spans, "invoke_agent looper")[0] == (
        StatusCode.ERROR,
        "UsageLimitExceeded",
    )


def test_a_run_cancelled_mid_tool_ends_the_running_call_cancelled(tmp_path: Path) -> None:
    """asyncio cancellation while one of two parallel tools runs: it ends cancelled, not skipped."""
    agent = Agent(
        FunctionModel(
            Script([[ToolCallPart("slow", {}, "s1"), ToolCallPart("fast", {}, "s2")]]),
            model_name="m",
        ),
        name="canceller",
    )
    started = asyncio.Event()

    @agent.tool_plain
    async def slow() -> str:
        """Takes far too long."""
        started.set()
        await asyncio.sleep(30)
        return "never"

    @agent.tool_plain
    async def fast() -> str:
        """Answers at once."""
        return "quick"

    async def main(capability: LoopscribeCapability) -> None:
        task = asyncio.create_task(agent.run("Go.", capabilities=[capability]))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    records, captured, errors = record(tmp_path / "cancel.jsonl", main)
    assert errors == 0
    ends = {ex(r).id: r.data for r in of_type(records, "tool_exec_end")}
    assert ends["s2"]["result"] == "quick"
    assert ends["s1"]["disposition"] == "cancelled"
    assert ends["s1"]["error"]["type"] == "CancelledError"
    assert [r.type for r in records if r.execution is not None and ex(r).id == "s1"] == [
        *("tool_exec_start", "tool_invoke_start", "tool_exec_end")
    ]
    (end,) = of_type(records, "agent_end")
    assert end.data["error"]["type"] == "CancelledError"
    assert status(captured.spans, "execute_tool slow") == [(StatusCode.ERROR, "CancelledError")]
    assert status(captured.spans, "execute_tool fast") == [(StatusCode.UNSET, None)]


def weather_agent(name: str) -> Agent[None, str]:
    """A tool call, then an answer."""
    agent = Agent(
        FunctionModel(
            Script(
                [
                    [ToolCallPart("get_weather", {"city": "Lisbon"}, "w1")],
                    [TextPart(f"Sunny. {CANARY}")],
                ]
            ),
            model_name="weather-model",
        ),
        name=name,
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    return agent


def test_iter_node_by_node_records_what_run_records(tmp_path: Path) -> None:
    """agent.iter() driven with run.next(node): the same calls and messages as agent.run()."""
    nodes: list[str] = []

    async def by_node(capability: LoopscribeCapability) -> None:
        agent = weather_agent("weather")
        async with agent.iter("Weather?", capabilities=[capability]) as agent_run:
            node = agent_run.next_node
            while not Agent.is_end_node(node):
                nodes.append(type(node).__name__)
                node = await agent_run.next(node)
        assert agent_run.result is not None

    async def at_once(capability: LoopscribeCapability) -> None:
        await weather_agent("weather").run("Weather?", capabilities=[capability])

    iterated, spans, errors = record(tmp_path / "iter.jsonl", by_node)
    ran, _, _ = record(tmp_path / "run.jsonl", at_once)
    assert errors == 0
    assert nodes.count("CallToolsNode") == 2

    def shape(records: Sequence[Record]) -> list[tuple[str, str | None, str]]:
        return [
            (r.type, ex(r).id if r.execution else None, ex(r).kind if r.execution else "")
            for r in records
            if r.run_id
        ]

    assert shape(iterated) == shape(ran)
    assert [type(m).__name__ for m in committed(iterated)] == [
        *("UserMessage", "AssistantMessage", "ToolResultMessage", "AssistantMessage")
    ]
    assert committed(iterated)[0] == UserMessage("Weather?")
    assert len(spans.named("chat weather-model")) == 2
    assert body_free(spans.spans)


def test_run_stream_with_structured_output_records_each_response_once(tmp_path: Path) -> None:
    """run_stream + output_type: a tool call, then streamed output; whole responses written."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        if len(messages) == 1:
            yield {0: DeltaToolCall("lookup", '{"city": "Lisbon"}', tool_call_id="l1")}
        else:
            yield {0: DeltaToolCall("final_result", '{"name": "Lis', tool_call_id="f1")}
            yield {0: DeltaToolCall(json_args='bon", "population": 545}')}

    agent = Agent(
        FunctionModel(stream_function=stream, model_name="streamer"), name="geo", output_type=City
    )

    @agent.tool_plain
    def lookup(city: str) -> str:
        """Population of a city."""
        return f"545 {CANARY}"

    outputs: list[City] = []

    async def main(capability: LoopscribeCapability) -> None:
        async with agent.run_stream("Lisbon?", capabilities=[capability]) as result:
            async for output in result.stream_output(debounce_by=None):
                outputs.append(output)

    records, captured, errors = record(tmp_path / "stream.jsonl", main)
    assert errors == 0
    assert outputs[-1] == City(name="Lisbon", population=545)
    assert not of_type(records, "message_update")
    assert {r.data["stream"] for r in of_type(records, "model_exec_start")} == {True}
    replies = [r.data["message"] for r in of_type(records, "model_exec_end")]
    assert [[c for c in m.content if isinstance(c, ToolCall)] for m in replies] == [
        [ToolCall("l1", "lookup", {"city": "Lisbon"})],
        [ToolCall("f1", "final_result", {"name": "Lisbon", "population": 545})],
    ]
    assert [ex(r).id for r in of_type(records, "tool_exec_end")] == ["l1"]
    assistant = [m for m in committed(records) if isinstance(m, AssistantMessage)]
    assert assistant == replies
    (end,) = of_type(records, "agent_end")
    assert end.data["output"] == {"name": "Lisbon", "population": 545}
    assert len(captured.named("chat streamer")) == 2
    assert body_free(captured.spans)
