"""The pydantic-ai adapter, driven by real pydantic-ai agents and a scripted ``FunctionModel``.

A two-run conversation: in the first run the model calls two tools in
parallel (one answers, one raises ``ModelRetry``), the next model call fails
once and is attempted again by a capability raising ``RetryModelRequest``,
then the model retries the tool and answers. The second run continues the
conversation through ``message_history`` and a tool reports ``ToolFailed``.
Everything runs offline: real providers are refused by
``override_allow_model_requests(False)``. Runs go through ``asyncio.run``,
never ``run_sync``, which leaves its event loop open for the next caller.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRetry,
    RetryModelRequest,
    RunContext,
    ToolFailed,
)
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext, override_allow_model_requests
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.run import AgentRunResult
from pydantic_ai.usage import RequestUsage

import loopscribe
from loopscribe import (
    AssistantMessage,
    Execution,
    Record,
    Session,
    SystemMessage,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from loopscribe.adapters.pydantic_ai import LoopscribeCapability, from_pydantic_ai, to_pydantic_ai
from loopscribe.live import Bus, Transient
from loopscribe.otel import SpanBridge, replay
from loopscribe.testing import captured_spans, span_tree

PROMPT_CANARY = "canary-prompt-5e1d"
ARGS_CANARY = "canary-args-a7c2"
OUTPUT_CANARY = "canary-output-33f0"
RETRY_CANARY = "canary-retry-9b4e"
SECRET = "sk-canary-secret-1111"
CANARIES = (PROMPT_CANARY, ARGS_CANARY, OUTPUT_CANARY, RETRY_CANARY, SECRET)

Step = Sequence[ModelResponsePart] | Exception


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    """Refuse every real provider: only the in-process test models may answer."""
    with override_allow_model_requests(False):
        yield


# -- the scripted host ---------------------------------------------------------------------


class Script:
    """A ``FunctionModel`` function replaying scripted responses, or raising scripted errors."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = list(steps)
        self.calls = 0

    def _next(self) -> Sequence[ModelResponsePart]:
        step = self.steps[self.calls]
        self.calls += 1
        if isinstance(step, Exception):
            raise step
        return step

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=list(self._next()))


@dataclass
class RetryOnce(AbstractCapability[Any]):
    """Attempt a failed model request once more, as a back-off capability would."""

    async def on_model_request_error(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, error: Exception
    ) -> ModelResponse:
        if isinstance(error, ModelHTTPError) and request_context.attempt == 1:
            raise RetryModelRequest()
        raise error


def weather_agent(script: Script) -> Agent[None, str]:
    """The agent under test, with its tools; credentials in its settings must never be written."""
    agent = Agent(
        FunctionModel(script, model_name="scripted-1"),
        name="weather-bot",
        instructions="Answer briefly.",
        model_settings={"temperature": 0.2, "extra_headers": {"Authorization": f"Bearer {SECRET}"}},
        capabilities=[RetryOnce()],
    )

    @agent.tool_plain
    def get_weather(city: str) -> dict[str, str]:
        """Current weather of a city."""
        return {"city": city, "summary": f"sunny {OUTPUT_CANARY}"}

    @agent.tool_plain
    def lookup(key: int) -> str:
        """Look a key up; only key 2 exists."""
        if key != 2:
            raise ModelRetry(f"unknown key, use 2 {RETRY_CANARY}")
        return f"found {OUTPUT_CANARY}"

    @agent.tool_plain
    def forecast(day: str) -> str:
        """Tomorrow's forecast, never available."""
        raise ToolFailed(f"no forecast for {day} {RETRY_CANARY}")

    @agent.tool_plain
    def explode() -> str:
        """A tool with a bug."""
        raise RuntimeError(f"tool bug {RETRY_CANARY}")

    return agent


CONVERSATION: list[Step] = [
    # Run 1, step 1: two tool calls at once.
    [
        ToolCallPart("get_weather", {"city": f"Lisbon {ARGS_CANARY}"}, tool_call_id="call_1"),
        ToolCallPart("lookup", {"key": 1}, tool_call_id="call_2"),
    ],
    # Step 2: the first attempt fails, RetryOnce attempts it again.
    ModelHTTPError(503, "scripted-1", body="overloaded"),
    [ToolCallPart("lookup", {"key": 2}, tool_call_id="call_3")],
    # Step 3: the answer.
    [TextPart(f"It is sunny. {OUTPUT_CANARY}")],
    # Run 2, step 1: a tool that fails for the model to see.
    [ToolCallPart("forecast", {"day": "tomorrow"}, tool_call_id="call_4")],
    [TextPart("No forecast is available.")],
]


@dataclass
class Conversation:
    """What one recorded two-run conversation left behind."""

    path: Path
    records: list[Record]
    first: AgentRunResult[str]
    second: AgentRunResult[str]
    live: tuple[ReadableSpan, ...]
    errors: int


def record_conversation(path: Path) -> Conversation:
    """Record the scripted conversation, one loopscribe run per agent run, with a live bridge."""
    agent = weather_agent(Script(CONVERSATION))
    captured = captured_spans()
    bridge = SpanBridge(captured.processor, file_uri=path)
    with Session.create(path, observers=[bridge]) as session:
        with session.begin_run() as run:
            recorder = LoopscribeCapability(run)
            first = asyncio.run(
                agent.run(f"Weather in Lisbon? {PROMPT_CANARY}", capabilities=[recorder])
            )
        with session.begin_run() as run:
            second_recorder = LoopscribeCapability(run)
            second = asyncio.run(
                agent.run(
                    "And tomorrow?",
                    message_history=first.all_messages(),
                    capabilities=[second_recorder],
                )
            )
    return Conversation(
        path,
        list(loopscribe.read(path)),
        first,
        second,
        captured.spans,
        recorder.errors + second_recorder.errors,
    )


@pytest.fixture(scope="module")
def conversation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Conversation]:
    """The scripted conversation, recorded once into a fresh session file; tests only read it."""
    with override_allow_model_requests(False):
        yield record_conversation(tmp_path_factory.mktemp("pydantic_ai") / "session.jsonl")


# -- helpers -----------------------------------------------------------------------------------


def runs(records: Sequence[Record]) -> list[list[Record]]:
    """The records of each run, in order."""
    out: dict[str, list[Record]] = {}
    for record in records:
        if record.run_id is not None:
            out.setdefault(record.run_id, []).append(record)
    return list(out.values())


def of_type(records: Sequence[Record], kind: str) -> list[Record]:
    """The records of one type."""
    return [r for r in records if r.type == kind]


def ex(record: Record) -> Execution:
    """The record's execution, which the test expects to be there."""
    assert record.execution is not None, record
    return record.execution


ROLES = {
    "user-prompt": "user",
    "system-prompt": "system",
    "tool-return": "tool",
    "retry-prompt": "tool",
}


def text_of(message: Any) -> str:
    """The text of a loopscribe message: its string content or its text blocks."""
    if isinstance(message.content, str):
        return message.content
    return "".join(getattr(part, "text", "") for part in message.content)


def span_strings(span: ReadableSpan) -> list[str]:
    """Everything a span says as text: name, attributes, events, status, links."""
    out = [span.name, str(span.status.description)]
    out += [f"{k}={v!r}" for k, v in (span.attributes or {}).items()]
    for event in span.events:
        out.append(event.name)
        out += [f"{k}={v!r}" for k, v in (event.attributes or {}).items()]
    for link in span.links:
        out += [f"{k}={v!r}" for k, v in (link.attributes or {}).items()]
    return out


# -- tests -----------------------------------------------------------------------------------


def test_records_requests_responses_and_tool_results_with_bodies(
    conversation: Conversation,
) -> None:
    """Model requests, responses with usage, tool arguments and results are in the file."""
    first, second = runs(conversation.records)
    assert conversation.errors == 0
    assert conversation.second.output == "No forecast is available."

    request = of_type(first, "model_request")[0].data
    assert request["model"] == "scripted-1"
    assert request["messages"][0] == SystemMessage("Answer briefly.")
    assert PROMPT_CANARY in text_of(request["messages"][1])
    assert {t["name"] for t in request["tools"]} == {"get_weather", "lookup", "forecast", "explode"}
    assert request["config"]["temperature"] == 0.2
    assert request["config"]["request_parameters"]["output_mode"] == "text"
    assert SECRET not in conversation.path.read_text()

    end = of_type(first, "model_exec_end")[0].data
    assert end["message"].tool_calls[0].id == "call_1"
    assert end["message"].model == "scripted-1"
    assert end["usage"].input_tokens > 0
    assert end["usage"].output_tokens > 0
    assert end["usage"] == end["message"].usage
    assert end["model"] == "scripted-1"

    starts = {ex(r).id: r.data for r in of_type(first, "tool_exec_start")}
    assert starts["call_1"]["args"] == {"city": f"Lisbon {ARGS_CANARY}"}
    invokes = {ex(r).id: r.data for r in of_type(first, "tool_invoke_start")}
    assert invokes["call_3"] == {"tool": "lookup", "args": {"key": 2}}
    results = {ex(r).id: r.data for r in of_type(first, "tool_exec_end")}
    assert results["call_1"]["result"] == {
        "city": f"Lisbon {ARGS_CANARY}",
        "summary": f"sunny {OUTPUT_CANARY}",
    }
    assert results["call_3"]["result"] == f"found {OUTPUT_CANARY}"

    # The second run's request carries the whole conversation.
    second_request = of_type(second, "model_request")[0].data
    assert PROMPT_CANARY in text_of(second_request["messages"][1])
    assert second_request["messages"][-1] == UserMessage("And tomorrow?")


def test_committed_messages_are_written_once_each(conversation: Conversation) -> None:
    """Every message pydantic-ai committed is a ``message_end``; history is not written again."""
    for run, result in zip(
        runs(conversation.records), (conversation.first, conversation.second), strict=True
    ):
        committed = [r.data["message"] for r in of_type(run, "message_end")]
        # One message per request part, one per response.
        roles = [
            role
            for m in result.new_messages()
            for role in (
                [ROLES[p.part_kind] for p in m.parts] if m.kind == "request" else ["assistant"]
            )
        ]
        assert [m.role for m in committed] == roles
    first, second = runs(conversation.records)
    first_messages = [r.data["message"] for r in of_type(first, "message_end")]
    assert PROMPT_CANARY in text_of(first_messages[0])
    assert text_of(first_messages[-1]) == f"It is sunny. {OUTPUT_CANARY}"
    # The tool results travel in the request of the following step.
    returns = first_messages[2:4]
    assert [(m.tool_call_id, m.is_error) for m in returns] == [("call_1", False), ("call_2", True)]
    assert of_type(second, "message_end")[0].data["message"] == UserMessage("And tomorrow?")


def test_executions_nest_as_pydantic_ai_ran_them(conversation: Conversation) -> None:
    """Agent, turn, model and tool executions carry the parents and attempts of the run."""
    first, second = runs(conversation.records)
    nesting = {
        (ex(r).id, ex(r).kind, ex(r).attempt, ex(r).parent_id)
        for r in first
        if r.execution is not None
    }
    assert nesting == {
        ("weather-bot_1", "agent", 1, None),
        ("weather-bot_1/turn_1", "turn", 1, "weather-bot_1"),
        ("weather-bot_1/model_1", "model", 1, "weather-bot_1/turn_1"),
        ("call_1", "tool", 1, "weather-bot_1/turn_1"),
        ("call_2", "tool", 1, "weather-bot_1/turn_1"),
        ("weather-bot_1/turn_2", "turn", 1, "weather-bot_1"),
        ("weather-bot_1/model_2", "model", 1, "weather-bot_1/turn_2"),
        ("weather-bot_1/model_2", "model", 2, "weather-bot_1/turn_2"),
        ("call_3", "tool", 1, "weather-bot_1/turn_2"),
        ("weather-bot_1/turn_3", "turn", 1, "weather-bot_1"),
        ("weather-bot_1/model_3", "model", 1, "weather-bot_1/turn_3"),
    }
    # The failed attempt ends with the provider's error, then is retried as attempt 2.
    model_2 = [
        r
        for r in first
        if r.execution is not None
        and r.execution.id == "weather-bot_1/model_2"
        and r.type != "message_end"
    ]
    assert [(r.type, ex(r).attempt) for r in model_2] == [
        ("model_exec_start", 1),
        ("model_request", 1),
        ("model_exec_end", 1),
        ("retry_scheduled", 1),
        ("model_exec_start", 2),
        ("model_request", 2),
        ("model_exec_end", 2),
    ]
    assert model_2[2].data["error"]["type"] == "ModelHTTPError"
    assert model_2[3].data == {"next_attempt": 2, "error": model_2[2].data["error"]}

    # ModelRetry: the call ends as a retry; the model's next call is a new execution.
    ends = {ex(r).id: r.data for r in of_type(first, "tool_exec_end")}
    assert ends["call_2"]["is_error"] is True
    assert ends["call_2"]["error"]["type"] == "ModelRetry"
    assert ends["call_2"]["disposition"] == "retry"
    assert ends["call_2"]["details"]["retry"] == {
        "cause": "model_retry",
        "attempt": 1,
        "max_retries": 1,
    }
    assert of_type(first, "tool_exec_start")[2].data["retry"] == 1
    assert of_type(first, "agent_start")[0].data["run_id"] == conversation.first.run_id

    failed = of_type(second, "tool_exec_end")[0].data
    assert (failed["error"]["type"], failed["disposition"]) == ("ToolFailed", "failed")
    assert of_type(second, "agent_end")[0].data == {
        "agent": "weather-bot",
        "turns": 2,
        "output": "No forecast is available.",
    }


EXPECTED_TREE = """\
invoke_agent weather-bot
  invoke_agent weather-bot
    turn
      chat scripted-1
      execute_tool get_weather
      execute_tool lookup
    turn
      chat scripted-1
      chat scripted-1
      execute_tool lookup
    turn
      chat scripted-1
invoke_agent weather-bot
  invoke_agent weather-bot
    turn
      chat scripted-1
      execute_tool forecast
    turn
      chat scripted-1"""


def test_replayed_spans_nest_and_carry_no_bodies(conversation: Conversation) -> None:
    """One span per model attempt and tool call, nested like the run, with no body in any span."""
    captured = captured_spans()
    replay(conversation.path, captured.processor)
    spans = captured.spans
    assert span_tree(spans) == EXPECTED_TREE

    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    for span in spans:
        attrs = span.attributes or {}
        if attrs.get("gen_ai.operation.name") in ("chat", "execute_tool"):
            assert span.parent is not None
            parent = by_id[span.parent.span_id]
            assert parent.name == "turn"
            assert (parent.attributes or {})["loopscribe.execution.id"] == attrs[
                "loopscribe.execution.parent_id"
            ]
        for text in span_strings(span):
            for canary in CANARIES:
                assert canary not in text, (span.name, text)

    tools = {
        str((s.attributes or {})["gen_ai.tool.call.id"]): s
        for s in captured.named("execute_tool lookup")
    }
    assert tools["call_2"].status.status_code is StatusCode.ERROR
    assert (tools["call_2"].attributes or {})["error.type"] == "ModelRetry"
    assert tools["call_3"].status.status_code is StatusCode.UNSET
    chats = captured.named("chat scripted-1")
    assert [(s.attributes or {})["loopscribe.attempt"] for s in chats].count(2) == 1
    usage = [
        (s.attributes or {}).get("gen_ai.usage.input_tokens")
        for s in chats
        if s.status.status_code is StatusCode.UNSET
    ]
    assert len(usage) == 5
    assert all(isinstance(tokens, int) and tokens > 0 for tokens in usage)
    failed = [s for s in chats if s.status.status_code is StatusCode.ERROR]
    assert [(s.attributes or {})["error.type"] for s in failed] == ["ModelHTTPError"]


def test_live_bridge_emits_the_replayed_spans(conversation: Conversation) -> None:
    """The live bridge produced exactly the spans a replay of the file produces."""
    captured = captured_spans()
    replay(conversation.path, captured.processor)

    def key(span: ReadableSpan) -> tuple[Any, ...]:
        assert span.context is not None
        parent = span.parent.span_id if span.parent is not None else None
        return (span.context.span_id, parent, span.name, dict(span.attributes or {}))

    assert sorted(map(key, conversation.live), key=str) == sorted(map(key, captured.spans), key=str)


def test_a_tool_exception_fails_the_run_and_is_recorded(tmp_path: Path) -> None:
    """A tool bug propagates out of pydantic-ai as before; the file and spans show the failure."""
    path = tmp_path / "session.jsonl"
    agent = weather_agent(Script([[ToolCallPart("explode", {}, tool_call_id="call_x")]]))
    with Session.create(path) as session, session.begin_run() as run:
        recorder = LoopscribeCapability(run)
        with pytest.raises(RuntimeError, match="tool bug"):
            asyncio.run(agent.run("Break it.", capabilities=[recorder]))
    assert recorder.errors == 0
    records = list(loopscribe.read(path))
    end = of_type(records, "tool_exec_end")[0].data
    assert (end["error"]["type"], end["disposition"]) == ("RuntimeError", "raised")
    assert of_type(records, "agent_end")[0].data["error"]["type"] == "RuntimeError"
    assert [r.type for r in records][-3:] == ["turn_end", "agent_end", "run_close"]

    captured = captured_spans()
    replay(path, captured.processor)
    errors = {s.name: (s.attributes or {}).get("error.type") for s in captured.spans}
    assert errors["execute_tool explode"] == "RuntimeError"
    assert errors["invoke_agent weather-bot"] == "RuntimeError"


def test_invalid_arguments_end_the_call_before_it_runs(tmp_path: Path) -> None:
    """Arguments the tool's schema refuses end the call as a retry, never invoking the tool."""
    path = tmp_path / "session.jsonl"
    agent = weather_agent(
        Script(
            [
                [ToolCallPart("lookup", {"key": "not a number"}, tool_call_id="call_bad")],
                [TextPart("Sorry.")],
            ]
        )
    )
    with Session.create(path) as session, session.begin_run() as run:
        asyncio.run(agent.run("Look it up.", capabilities=[LoopscribeCapability(run)]))
    records = list(loopscribe.read(path))
    assert [
        r.type for r in records if r.execution is not None and r.execution.id == "call_bad"
    ] == [
        "tool_exec_start",
        "tool_exec_end",
    ]
    end = of_type(records, "tool_exec_end")[0].data
    assert (end["error"]["type"], end["disposition"]) == ("ValidationError", "retry")
    assert end["details"]["retry"]["cause"] == "validation_error"


def test_a_streamed_run_records_the_same_calls(tmp_path: Path) -> None:
    """Under ``run_stream_events`` responses are recorded once complete, deltas published live."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        if len(messages) == 1:
            yield {
                0: DeltaToolCall(
                    name="get_weather", json_args='{"city": "Porto"}', tool_call_id="call_s"
                )
            }
        else:
            yield "Cloudy "
            yield "in Porto."

    path = tmp_path / "session.jsonl"
    agent = weather_agent(Script([]))

    async def main(run: loopscribe.Run) -> list[Any]:
        model = FunctionModel(stream_function=stream, model_name="streamer")
        async with agent.run_stream_events(
            "Porto?", model=model, capabilities=[LoopscribeCapability(run)]
        ) as events:
            return [event async for event in events]

    bus = Bus()
    with Session.create(path, observers=[bus]) as session, session.begin_run() as run:
        subscription = bus.subscribe(session.id)
        events = asyncio.run(main(run))
    subscription.close()
    assert events
    records = list(loopscribe.read(path))
    assert not of_type(records, "message_update")
    ends = of_type(records, "model_exec_end")
    assert [text_of(r.data["message"]) for r in ends][1] == "Cloudy in Porto."
    # The deltas went to live subscribers, each on the model execution that streamed it.
    deltas = [item for item in subscription if isinstance(item, Transient)]
    assert {d.type for d in deltas} == {"message_update"}
    first = [d.data["delta"] for d in deltas if d.execution == ex(ends[0])]
    second = [d.data["delta"] for d in deltas if d.execution == ex(ends[1])]
    assert first == [
        {"type": "tool_call", "id": "call_s", "name": "get_weather", "args": '{"city": "Porto"}'}
    ]
    assert second == ["Cloudy ", "in Porto."]
    assert all(r.data["usage"].output_tokens > 0 for r in ends)
    assert {r.data["stream"] for r in of_type(records, "model_exec_start")} == {True}
    assert of_type(records, "tool_exec_end")[0].data["result"]["city"] == "Porto"
    assert [ex(r).id for r in of_type(records, "model_exec_end")] == [
        "weather-bot_1/model_1",
        "weather-bot_1/model_2",
    ]


def test_a_delegate_agent_nests_under_the_tool_call(tmp_path: Path) -> None:
    """An agent run started inside a tool is its own agent execution, under that tool call."""
    path = tmp_path / "session.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        recorder = LoopscribeCapability(run)
        helper = Agent(TestModel(custom_output_text="42"), name="helper")
        boss = Agent(
            FunctionModel(
                Script(
                    [[ToolCallPart("ask_helper", {}, tool_call_id="call_d")], [TextPart("done")]]
                ),
                model_name="boss-model",
            ),
            name="boss",
        )

        @boss.tool_plain
        async def ask_helper() -> str:
            """Delegate to the helper agent."""
            return (await helper.run("What is it?", capabilities=[recorder])).output

        assert asyncio.run(boss.run("Go.", capabilities=[recorder])).output == "done"
    agents = {ex(r).id: ex(r).parent_id for r in loopscribe.read(path) if r.type == "agent_start"}
    assert agents == {"boss_1": None, "helper_2": "call_d"}

    captured = captured_spans()
    replay(path, captured.processor)
    assert span_tree(captured.spans) == (
        "invoke_agent boss\n"
        "  invoke_agent boss\n"
        "    turn\n"
        "      chat boss-model\n"
        "      execute_tool ask_helper\n"
        "        invoke_agent helper\n"
        "          turn\n"
        "            chat test\n"
        "    turn\n"
        "      chat boss-model"
    )


def test_checkpoints_follow_each_top_level_run_and_resume_the_history(tmp_path: Path) -> None:
    """checkpoints=True: a checkpoint per finished top-level run, none for the delegate inside."""
    path = tmp_path / "session.jsonl"
    helper = Agent(TestModel(custom_output_text="42"), name="helper")
    boss = Agent(
        FunctionModel(
            Script(
                [
                    [ToolCallPart("ask_helper", {}, tool_call_id="call_d")],
                    [TextPart("done")],
                    [TextPart("still done")],
                ]
            ),
            model_name="boss-model",
        ),
        name="boss",
    )
    with Session.create(path) as session, session.begin_run() as run:
        recorder = LoopscribeCapability(run, checkpoints=True)

        @boss.tool_plain
        async def ask_helper() -> str:
            """Delegate to the helper agent."""
            return (await helper.run("What is it?", capabilities=[recorder])).output

        first = asyncio.run(boss.run("Go.", capabilities=[recorder]))
        # A host resumes from the checkpoint: the history it counts, then a new prompt.
        saved = session.load_checkpoint()
        history = first.all_messages()[: saved["messages"]]
        second = asyncio.run(boss.run("Again.", message_history=history, capabilities=[recorder]))
    assert recorder.errors == 0
    records = list(loopscribe.read(path))
    snapshots = [r.data["snapshot"] for r in of_type(records, "checkpoint")]
    assert snapshots == [
        {
            "framework": "pydantic-ai",
            "agent": "boss",
            "execution": "boss_1",
            "messages": len(first.all_messages()),
            "new_messages": len(first.new_messages()),
            "run_id": first.run_id,
            "conversation_id": first.conversation_id,
        },
        {
            "framework": "pydantic-ai",
            "agent": "boss",
            "execution": "boss_3",
            "messages": len(second.all_messages()),
            "new_messages": 2,
            "run_id": second.run_id,
            "conversation_id": second.conversation_id,
        },
    ]
    # Every message a checkpoint counts was committed before it.
    (first_checkpoint, _) = of_type(records, "checkpoint")
    first_run_messages = [
        r for r in of_type(records, "message_end") if r.seq < first_checkpoint.seq
    ]
    assert first_run_messages
    assert max(r.seq for r in of_type(records, "agent_end")[:2]) < first_checkpoint.seq


def test_a_failed_stream_keeps_its_partial_content(tmp_path: Path) -> None:
    """A stream that breaks mid-answer ends its attempt with the error and the text received."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        yield f"Half an answer {OUTPUT_CANARY}"
        raise ModelHTTPError(502, "streamer", body="connection reset")

    path = tmp_path / "session.jsonl"
    agent = weather_agent(Script([]))

    async def main(run: loopscribe.Run) -> None:
        model = FunctionModel(stream_function=stream, model_name="streamer")
        async with agent.run_stream_events(
            "Tell me.", model=model, capabilities=[LoopscribeCapability(run)]
        ) as events:
            async for _ in events:
                pass

    with (
        Session.create(path) as session,
        session.begin_run() as run,
        pytest.raises(ModelHTTPError),
    ):
        asyncio.run(main(run))
    records = list(loopscribe.read(path))
    end = of_type(records, "model_exec_end")[0].data
    assert end["error"]["type"] == "ModelHTTPError"
    assert text_of(end["partial_message"]) == f"Half an answer {OUTPUT_CANARY}"
    assert "message" not in end
    assert of_type(records, "agent_end")[0].data["error"]["type"] == "ModelHTTPError"


def test_a_call_waiting_for_approval_ends_deferred_and_runs_later(tmp_path: Path) -> None:
    """A call that needs approval ends as ``deferred``; the approved call runs in the next run."""
    agent = Agent(TestModel(), name="admin", output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return "deleted"

    path = tmp_path / "session.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        recorder = LoopscribeCapability(run)
        asked = asyncio.run(agent.run("Clean up.", capabilities=[recorder]))
        assert isinstance(asked.output, DeferredToolRequests)
        call_id = asked.output.approvals[0].tool_call_id
        asyncio.run(
            agent.run(
                message_history=asked.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={call_id: True}),
                capabilities=[recorder],
            )
        )
    records = list(loopscribe.read(path))
    ends = [(ex(r).attempt, ex(r).parent_id, r.data) for r in of_type(records, "tool_exec_end")]
    assert ends == [
        (
            1,
            "admin_1/turn_1",
            {
                "tool": "delete",
                "details": {"reason": "approval"},
                "is_error": False,
                "disposition": "deferred",
            },
        ),
        (2, "admin_2", {"tool": "delete", "result": "deleted", "is_error": False}),
    ]
    # The resumed run copies the earlier response; it is not committed a second time.
    committed = [r for r in of_type(records, "message_end") if ex(r).id.startswith("admin_2")]
    assert [r.data["message"].role for r in committed] == ["tool", "assistant"]


# -- messages, ids kept, show, run_sync --------------------------------------------------------


def show_lines(path: Path) -> list[str]:
    """What ``loopscribe show`` prints for the file, line by line."""
    done = subprocess.run(
        [sys.executable, "-m", "loopscribe", "show", str(path), "--last", "100"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def test_show_renders_every_message_of_the_conversation(conversation: Conversation) -> None:
    """Tool returns, retries, responses: ``loopscribe show`` prints no ``?`` line."""
    lines = show_lines(conversation.path)
    assert "?" not in lines
    assert lines.count("tool") >= 3
    assert "And tomorrow?" in lines


def test_provider_ids_and_conversation_id_are_kept(tmp_path: Path) -> None:
    """run_sync: conversation_id, provider name, response id and model name reach the file."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(
            parts=[TextPart("Sunny.")],
            model_name="gpt-test-2026",
            provider_name="google-gla",
            provider_response_id="resp_42",
            finish_reason="stop",
            usage=RequestUsage(
                input_tokens=30,
                output_tokens=8,
                cache_read_tokens=20,
                cache_write_tokens=4,
                details={"reasoning_tokens": 3},
            ),
        )

    # FunctionModel names the response after itself, as a provider names its model.
    agent = Agent(FunctionModel(answer, model_name="gpt-test-2026"), name="forecaster")
    path = tmp_path / "ids.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        recorder = LoopscribeCapability(run)
        result = agent.run_sync(
            "Weather?", capabilities=[recorder], model_settings={"stop_sequences": ["END"]}
        )
        # run_sync leaves the event loop it made open for later calls; the test closes it.
        asyncio.get_event_loop_policy().get_event_loop().close()
        asyncio.set_event_loop(None)
    assert recorder.errors == 0
    records = list(loopscribe.read(path))
    (start,) = of_type(records, "agent_start")
    assert ex(start).id == "forecaster_1"
    assert start.data["conversation_id"] == result.conversation_id
    (request,) = of_type(records, "model_request")
    assert request.data["config"]["stop"] == ["END"]
    (model_start,) = of_type(records, "model_exec_start")
    assert model_start.data["stream"] is False
    (end,) = of_type(records, "model_exec_end")
    assert end.data["response_id"] == "resp_42"
    assert end.data["model"] == "gpt-test-2026"
    message = end.data["message"]
    assert isinstance(message, AssistantMessage)
    assert (message.model, message.provider, message.response_id, message.stop_reason) == (
        "gpt-test-2026",
        "gcp.gemini",
        "resp_42",
        "stop",
    )
    assert message.usage == Usage(
        30, 8, cache_read_tokens=20, cache_write_tokens=4, reasoning_tokens=3
    )
    assert end.data["provider_state"]["provider_name"] == "google-gla"
    committed = [r.data["message"] for r in of_type(records, "message_end")]
    assert committed == [UserMessage("Weather?"), message]


HISTORY: list[ModelMessage] = [
    ModelRequest(
        parts=[
            SystemPromptPart("Be brief."),
            UserPromptPart(
                [
                    "Is this Lisbon?",
                    ImageUrl("https://example.com/tram.jpg"),
                    BinaryContent(b"\x89PNG", media_type="image/png"),
                ]
            ),
        ]
    ),
    ModelResponse(
        parts=[
            ThinkingPart("Trams are yellow.", signature="sig"),
            TextPart("Checking."),
            ToolCallPart("get_weather", {"city": "Lisbon"}, tool_call_id="c1"),
            ToolCallPart("get_weather", {"city": "Porto"}, tool_call_id="c2"),
        ],
        model_name="m-1",
        provider_name="openai",
        provider_response_id="resp_1",
        finish_reason="tool_call",
        usage=RequestUsage(input_tokens=10, output_tokens=4),
    ),
    ModelRequest(
        parts=[
            ToolReturnPart("get_weather", {"sky": "clear"}, tool_call_id="c1"),
            ToolReturnPart("get_weather", "rain", tool_call_id="c2"),
        ]
    ),
    ModelResponse(parts=[TextPart("Lisbon is clear, Porto wet.")], model_name="m-1"),
]


def test_messages_convert_to_loopscribe_types_and_back() -> None:
    """Each request part and response becomes a loopscribe message; to_pydantic_ai rebuilds them."""
    messages = [m for message in HISTORY for m in from_pydantic_ai(message)]
    assert [type(m).__name__ for m in messages] == [
        "SystemMessage",
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "ToolResultMessage",
        "AssistantMessage",
    ]
    result = messages[3]
    assert isinstance(result, ToolResultMessage)
    assert (result.tool_call_id, result.tool_name, result.details) == (
        "c1",
        "get_weather",
        {"sky": "clear"},
    )
    back = to_pydantic_ai(messages)
    assert len(back) == len(HISTORY)
    for rebuilt, original in zip(back, HISTORY, strict=True):
        assert type(rebuilt) is type(original)
        assert [type(p) for p in rebuilt.parts] == [type(p) for p in original.parts]
        for new, old in zip(rebuilt.parts, original.parts, strict=True):
            for name in ("content", "tool_name", "tool_call_id", "args", "signature"):
                assert getattr(new, name, None) == getattr(old, name, None), name
        if isinstance(original, ModelResponse):
            assert isinstance(rebuilt, ModelResponse)
            assert (rebuilt.model_name, rebuilt.provider_response_id, rebuilt.finish_reason) == (
                original.model_name,
                original.provider_response_id,
                original.finish_reason,
            )
            assert rebuilt.usage == original.usage


def test_what_loopscribe_has_no_type_for_keeps_pydantic_ais_form() -> None:
    """A response with citations stays pydantic-ai's JSON, which rebuilds the response."""
    cited = ModelResponse(parts=[TextPart("Sunny.", provider_details={"citations": ["u"]})])
    (kept,) = from_pydantic_ai(cited)
    assert isinstance(kept, dict)
    assert kept["role"] == "assistant"
    (rebuilt,) = to_pydantic_ai([kept])
    assert isinstance(rebuilt, ModelResponse)
    assert rebuilt.parts == cited.parts
