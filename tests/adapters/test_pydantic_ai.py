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
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models import ModelRequestContext, override_allow_model_requests
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.run import AgentRunResult

import loopscribe
from loopscribe import Execution, Record, Session
from loopscribe.adapters.pydantic_ai import LoopscribeCapability
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


def texts(message: Any) -> list[str]:
    """Every text-like field of a lowered pydantic-ai message."""
    return [str(part.get("content")) for part in message["parts"]]


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
    assert PROMPT_CANARY in texts(request["messages"][0])[0]
    assert request["messages"][0]["instructions"] == "Answer briefly."
    assert {t["name"] for t in request["tools"]} == {"get_weather", "lookup", "forecast", "explode"}
    assert request["config"]["temperature"] == 0.2
    assert request["config"]["request_parameters"]["output_mode"] == "text"
    assert SECRET not in conversation.path.read_text()

    end = of_type(first, "model_exec_end")[0].data
    assert end["message"]["parts"][0]["tool_call_id"] == "call_1"
    assert end["usage"]["input_tokens"] > 0
    assert end["usage"]["output_tokens"] > 0
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
    assert PROMPT_CANARY in texts(second_request["messages"][0])[0]
    assert texts(second_request["messages"][-1]) == ["And tomorrow?"]


def test_committed_messages_are_written_once_each(conversation: Conversation) -> None:
    """Every message pydantic-ai committed is a ``message_end``; history is not written again."""
    for run, result in zip(
        runs(conversation.records), (conversation.first, conversation.second), strict=True
    ):
        committed = [r.data["message"] for r in of_type(run, "message_end")]
        new = result.new_messages()
        assert len(committed) == len(new)
        assert [m["kind"] for m in committed] == [m.kind for m in new]
    first, second = runs(conversation.records)
    first_messages = [r.data["message"] for r in of_type(first, "message_end")]
    assert PROMPT_CANARY in texts(first_messages[0])[0]
    assert texts(first_messages[-1]) == [f"It is sunny. {OUTPUT_CANARY}"]
    # The tool results travel in the request of the following step.
    returns = first_messages[2]["parts"]
    assert [(p["tool_call_id"], p["outcome"]) for p in returns] == [
        ("call_1", "success"),
        ("call_2", "retried"),
    ]
    assert texts(of_type(second, "message_end")[0].data["message"]) == ["And tomorrow?"]


def test_executions_nest_as_pydantic_ai_ran_them(conversation: Conversation) -> None:
    """Agent, turn, model and tool executions carry the parents and attempts of the run."""
    first, second = runs(conversation.records)
    nesting = {
        (ex(r).id, ex(r).kind, ex(r).attempt, ex(r).parent_id)
        for r in first
        if r.execution is not None
    }
    assert nesting == {
        ("agent_1", "agent", 1, None),
        ("agent_1/turn_1", "turn", 1, "agent_1"),
        ("agent_1/model_1", "model", 1, "agent_1/turn_1"),
        ("call_1", "tool", 1, "agent_1/turn_1"),
        ("call_2", "tool", 1, "agent_1/turn_1"),
        ("agent_1/turn_2", "turn", 1, "agent_1"),
        ("agent_1/model_2", "model", 1, "agent_1/turn_2"),
        ("agent_1/model_2", "model", 2, "agent_1/turn_2"),
        ("call_3", "tool", 1, "agent_1/turn_2"),
        ("agent_1/turn_3", "turn", 1, "agent_1"),
        ("agent_1/model_3", "model", 1, "agent_1/turn_3"),
    }
    # The failed attempt ends with the provider's error, then is retried as attempt 2.
    model_2 = [
        r
        for r in first
        if r.execution is not None
        and r.execution.id == "agent_1/model_2"
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


def test_a_failing_recorder_never_breaks_the_agent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Recording into a closed run fails inside every hook, and the agent runs on unharmed."""
    path = tmp_path / "session.jsonl"
    agent = weather_agent(Script(CONVERSATION))
    with Session.create(path) as session:
        run = session.begin_run()
        run.close()
        recorder = LoopscribeCapability(run)
        with caplog.at_level("ERROR", logger="loopscribe"):
            result = asyncio.run(agent.run("Weather?", capabilities=[recorder]))
    assert result.output == f"It is sunny. {OUTPUT_CANARY}"
    assert recorder.errors > 0
    assert "recording failed" in caplog.text
    assert [r.type for r in loopscribe.read(path)] == ["session_start", "run_start", "run_close"]


def test_a_streamed_run_records_the_same_calls(tmp_path: Path) -> None:
    """Under ``run_stream_events`` the streamed responses are recorded once they are complete."""

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

    with Session.create(path) as session, session.begin_run() as run:
        events = asyncio.run(main(run))
    assert events
    records = list(loopscribe.read(path))
    ends = of_type(records, "model_exec_end")
    assert [texts(r.data["message"]) for r in ends][1] == ["Cloudy in Porto."]
    assert all(r.data["usage"]["output_tokens"] > 0 for r in ends)
    assert of_type(records, "tool_exec_end")[0].data["result"]["city"] == "Porto"
    assert [ex(r).id for r in of_type(records, "model_exec_end")] == [
        "agent_1/model_1",
        "agent_1/model_2",
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
    assert agents == {"agent_1": None, "agent_2": "call_d"}

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
    assert texts(end["partial_message"]) == [f"Half an answer {OUTPUT_CANARY}"]
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
            "agent_1/turn_1",
            {
                "tool": "delete",
                "details": {"reason": "approval"},
                "is_error": False,
                "disposition": "deferred",
            },
        ),
        (2, "agent_2", {"tool": "delete", "result": "deleted", "is_error": False}),
    ]
    # The resumed run copies the earlier response; it is not committed a second time.
    committed = [r for r in of_type(records, "message_end") if ex(r).id.startswith("agent_2")]
    assert [r.data["message"]["kind"] for r in committed] == ["request", "response"]
