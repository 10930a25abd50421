"""The OpenAI Agents SDK adapter, driven by the real ``Runner`` and a scripted ``Model``.

The model is a ``Model`` subclass that returns scripted ``ModelResponse``
objects (tool calls, a handoff, final messages), so the SDK runs its real
loop: tool execution, failure_error_function, handoffs, guardrails. Tracing
is disabled per run (``RunConfig(tracing_disabled=True)``) except in the test
that needs SDK spans, which swaps in a trace provider without exporters.
Nothing reaches the network.
"""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx2  # the openai client's own HTTP library
import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    ModelResponse,
    ModelRetrySettings,
    ModelSettings,
    OpenAIResponsesModel,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    RunContextWrapper,
    Runner,
    RunResult,
    RunState,
    ToolErrorFormatterArgs,
    TResponseInputItem,
    Usage,
    function_tool,
    input_guardrail,
    output_guardrail,
    retry_policies,
)
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseOutputItem, TResponseStreamEvent
from agents.models.interface import Model, ModelTracing
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool import Tool
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    ToolOutputGuardrailData,
    tool_input_guardrail,
    tool_output_guardrail,
)
from agents.tracing import (
    Span,
    Trace,
    TracingProcessor,
    add_trace_processor,
)
from agents.tracing.provider import DefaultTraceProvider
from openai import AsyncOpenAI
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

import loopscribe
from loopscribe import (
    Actor,
    AssistantMessage,
    Record,
    Session,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)
from loopscribe import Usage as LsUsage
from loopscribe.adapters.openai_agents import (
    LoopscribeHooks,
    LoopscribeTraceProcessor,
    from_items,
    provider_of,
    to_items,
)
from loopscribe.adapters.openai_agents import assistant_message as assistant_message_of
from loopscribe.adapters.openai_agents._messages import usage_of
from loopscribe.live import Bus, Transient
from loopscribe.otel import SpanBridge, replay
from loopscribe.testing import captured_spans, span_tree

PROMPT_CANARY = "canary-prompt-7f3a"
ARGS_CANARY = "canary-args-91bc"
OUTPUT_CANARY = "canary-output-c0de"
ERROR_CANARY = "canary-error-e44f"
SECRET = "sk-canary-secret-0000"
CANARIES = (PROMPT_CANARY, ARGS_CANARY, OUTPUT_CANARY, ERROR_CANARY, SECRET)
OFFLINE = RunConfig(tracing_disabled=True)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail loudly if anything (the SDK's trace exporter, a model client) opens a connection."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a test tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


# -- the scripted host -----------------------------------------------------------------


class ScriptedResponses(Model):
    """A ``Model`` that returns scripted output items, or raises a scripted exception."""

    def __init__(self, script: Sequence[Sequence[TResponseOutputItem] | Exception]) -> None:
        self.script = list(script)
        self.requests: list[Any] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        """Pop the next scripted step."""
        self.requests.append(input)
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        usage = Usage(requests=1, input_tokens=40 + len(self.requests), output_tokens=7)
        return ModelResponse(
            output=list(step), usage=usage, response_id=f"resp_{len(self.requests)}"
        )

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Not scripted: the streamed test uses the SDK's own ScriptedModel."""
        raise NotImplementedError


def tool_call(name: str, arguments: Mapping[str, Any], call_id: str) -> ResponseFunctionToolCall:
    """A function-tool call output item."""
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        call_id=call_id,
        type="function_call",
        name=name,
        arguments=json.dumps(arguments),
    )


def reply(text: str) -> ResponseOutputMessage:
    """A final assistant message output item."""
    return ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"{OUTPUT_CANARY}: 21C and sunny in {city}"


@function_tool
def launch_rocket(target: str) -> str:
    """Launch a rocket at a target."""
    raise RuntimeError(f"{ERROR_CANARY}: launch pad offline")


@input_guardrail
def polite_input(
    ctx: RunContextWrapper[Any], agent: Agent[Any], items: str | list[TResponseInputItem]
) -> GuardrailFunctionOutput:
    """Trip on rude input."""
    return GuardrailFunctionOutput(output_info={"rude": False}, tripwire_triggered=False)


@output_guardrail
def short_output(
    ctx: RunContextWrapper[Any], agent: Agent[Any], output: Any
) -> GuardrailFunctionOutput:
    """Trip on long answers."""
    return GuardrailFunctionOutput(
        output_info={"length": len(str(output))}, tripwire_triggered=False
    )


def weather_agents() -> Agent[Any]:
    """A weather agent with two tools, guardrails and a handoff to a helper agent."""
    helper = Agent(
        name="helper",
        instructions="You help with everything else.",
        model=ScriptedResponses([[reply("The helper is here.")]]),
        output_guardrails=[short_output],
    )
    main = ScriptedResponses(
        [
            # Run 1, turn 1: two parallel tool calls, the second one raises.
            [
                tool_call("get_weather", {"city": ARGS_CANARY}, "call_weather"),
                tool_call("launch_rocket", {"target": "moon"}, "call_rocket"),
            ],
            # Run 1, turn 2: the final answer.
            [reply("It is 21C and sunny; the rocket did not launch.")],
            # Run 2, turn 1: hand off.
            [tool_call("transfer_to_helper", {}, "call_handoff")],
        ]
    )
    return Agent(
        name="weather",
        instructions="You report the weather.",
        model=main,
        model_settings=ModelSettings(
            temperature=0.2, extra_headers={"Authorization": f"Bearer {SECRET}"}
        ),
        tools=[get_weather, launch_rocket],
        handoffs=[helper],
        input_guardrails=[polite_input],
        output_guardrails=[short_output],
    )


async def converse(run: loopscribe.Run) -> LoopscribeHooks:
    """Two ``Runner.run`` calls: tools (one failing), then a handoff."""
    hooks = LoopscribeHooks(run)
    agent = weather_agents()
    first = await hooks.run(agent, f"Weather in {PROMPT_CANARY}?", run_config=OFFLINE)
    follow_up: list[TResponseInputItem] = [{"role": "user", "content": "Something else, please."}]
    await hooks.run(agent, first.to_input_list() + follow_up, run_config=OFFLINE)
    return hooks


def record_conversation(path: Path) -> LoopscribeHooks:
    """Record :func:`converse` into a new session file at ``path``."""
    with Session.create(path) as session, session.begin_run() as run:
        return asyncio.run(converse(run))


@pytest.fixture
def recorded(tmp_path: Path) -> list[Record]:
    """The records of the two-run conversation, read back from the file."""
    path = tmp_path / "agent.jsonl"
    hooks = record_conversation(path)
    assert hooks.errors == 0
    return list(loopscribe.read(path))


def text_of(message: Any) -> str:
    """The text blocks of a loopscribe message, or its string content."""
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") for part in content)


def of_type(records: Sequence[Record], kind: str) -> list[Record]:
    """The records of one type, in order."""
    return [r for r in records if r.type == kind]


def span_strings(span: ReadableSpan) -> Iterator[str]:
    """Every string a backend would show for a span: name, attributes, events, status."""
    yield span.name
    for key, value in (span.attributes or {}).items():
        yield key
        yield str(value)
    for event in span.events:
        yield event.name
        yield str(dict(event.attributes or {}))
    yield span.status.description or ""


# -- what is recorded ------------------------------------------------------------------


def test_model_requests_carry_prompt_tools_and_settings_without_secrets(
    recorded: list[Record],
) -> None:
    """Every model call has its request: system prompt, input items, declared tools, settings."""
    requests = of_type(recorded, "model_request")
    assert len(requests) == 4
    first = requests[0].data
    assert first["model"] == "ScriptedResponses"
    assert first["messages"][0] == SystemMessage("You report the weather.")
    assert first["messages"][1] == UserMessage(f"Weather in {PROMPT_CANARY}?")
    tools = {t["name"]: t for t in first["tools"]}
    assert tools["get_weather"]["parameters"]["properties"]["city"]["type"] == "string"
    assert tools["transfer_to_helper"] == {
        "type": "handoff",
        "name": "transfer_to_helper",
        "agent": "helper",
    }
    assert first["config"]["temperature"] == 0.2
    # The second request carries the tool results the SDK sent back to the model.
    outputs = [m for m in requests[1].data["messages"] if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.tool_name) for m in outputs] == [
        ("call_weather", "get_weather"),
        ("call_rocket", "launch_rocket"),
    ]
    assert OUTPUT_CANARY in text_of(outputs[0])
    # Credentials in the model settings never reach the file.
    text = "\n".join(json.dumps(dict(r.data), default=str) for r in recorded)
    assert SECRET not in text


def test_responses_tool_results_and_committed_items_have_bodies(recorded: list[Record]) -> None:
    """Model outputs, usage, tool results (the failure flagged) and committed items are written."""
    ends = of_type(recorded, "model_exec_end")
    assert [e.data["stop_reason"] for e in ends] == ["tool_calls", "stop", "tool_calls", "stop"]
    assert ends[0].data["usage"].input_tokens == 41
    assert ends[0].data["response_id"] == "resp_1"
    first = ends[0].data["message"]
    assert (first.response_id, first.provider, first.usage) == ("resp_1", "openai", LsUsage(41, 7))
    assert [c.id for c in first.tool_calls] == ["call_weather", "call_rocket"]

    starts = {r.execution.id: r.data for r in of_type(recorded, "tool_exec_start") if r.execution}
    assert starts["call_weather"] == {
        "tool": "get_weather",
        "args": {"city": ARGS_CANARY},
        "tool_type": "function",
        "description": "Current weather for a city.",
    }
    results = {r.execution.id: r.data for r in of_type(recorded, "tool_exec_end") if r.execution}
    assert results["call_weather"]["is_error"] is False
    assert OUTPUT_CANARY in results["call_weather"]["result"]
    failed = results["call_rocket"]
    assert failed["is_error"] is True
    assert failed["error"]["type"] == "RuntimeError"
    assert ERROR_CANARY in failed["error"]["message"]

    committed = [r.data["message"] for r in of_type(recorded, "message_end")]
    assert UserMessage(f"Weather in {PROMPT_CANARY}?") in committed
    assert UserMessage("Something else, please.") in committed
    texts = [m.text for m in committed if isinstance(m, AssistantMessage) and m.text]
    assert texts == ["It is 21C and sunny; the rocket did not launch.", "The helper is here."]
    tool_outputs = [m.tool_call_id for m in committed if isinstance(m, ToolResultMessage)]
    assert tool_outputs == ["call_weather", "call_rocket", "call_handoff"]
    # The user input of run 1 is committed once, not again as history in run 2.
    users = [m for m in committed if isinstance(m, UserMessage)]
    assert len(users) == 2
    # Each model response is committed once, as the assistant message it returned.
    assistants = [m for m in committed if isinstance(m, AssistantMessage)]
    assert len(assistants) == len(ends)


def test_executions_nest_as_the_sdk_ran_them(recorded: list[Record]) -> None:
    """Agents contain turns and guardrails, turns one model call and that turn's tool calls."""
    parents: dict[str, tuple[str, str | None]] = {}
    for r in recorded:
        if r.execution is not None:
            parents[r.execution.id] = (r.execution.kind, r.execution.parent_id)
            assert r.execution.attempt == 1
    assert parents == {
        "agent_1": ("agent", None),
        "turn_1": ("turn", "agent_1"),
        "model_1": ("model", "turn_1"),
        "call_weather": ("tool", "turn_1"),
        "call_rocket": ("tool", "turn_1"),
        "turn_2": ("turn", "agent_1"),
        "model_2": ("model", "turn_2"),
        "agent_2": ("agent", None),
        "turn_3": ("turn", "agent_2"),
        "model_3": ("model", "turn_3"),
        "call_handoff": ("tool", "turn_3"),
        "agent_3": ("agent", None),
        "turn_4": ("turn", "agent_3"),
        "model_4": ("model", "turn_4"),
        "guardrail_1": ("guardrail", "agent_1"),
        "guardrail_2": ("guardrail", "agent_1"),
        "guardrail_3": ("guardrail", "agent_2"),
        "guardrail_4": ("guardrail", "agent_3"),
    }
    turns = [(r.execution.id, r.data) for r in of_type(recorded, "turn_end") if r.execution]
    assert turns == [
        ("turn_1", {"turn": 1, "stop_reason": "tool_calls", "tool_calls": 2}),
        ("turn_2", {"turn": 2, "stop_reason": "final_output", "tool_calls": 0}),
        ("turn_3", {"turn": 1, "stop_reason": "handoff", "tool_calls": 1}),
        ("turn_4", {"turn": 2, "stop_reason": "final_output", "tool_calls": 0}),
    ]
    agents = [(r.data["agent"], r.data["stop_reason"]) for r in of_type(recorded, "agent_end")]
    assert agents == [
        ("weather", "final_output"),
        ("weather", "handoff"),
        ("helper", "final_output"),
    ]


def test_handoffs_are_events_and_guardrails_executions(recorded: list[Record]) -> None:
    """A handoff names both agents and its tool call; each guardrail is an execution."""
    (handoff,) = of_type(recorded, "handoff")
    assert handoff.execution is not None
    assert handoff.execution.id == "agent_2"
    assert handoff.data == {
        "from_agent": "weather",
        "to_agent": "helper",
        "tool": "transfer_to_helper",
        "tool_call_id": "call_handoff",
    }
    starts = {r.execution.id: r for r in of_type(recorded, "guardrail_start") if r.execution}
    guardrails = [
        (
            r.execution.kind,
            r.execution.parent_id,
            starts[r.execution.id].data["kind"],
            r.data["guardrail"],
        )
        for r in of_type(recorded, "guardrail_end")
        if r.execution
    ]
    assert guardrails == [
        ("guardrail", "agent_1", "input", "polite_input"),
        ("guardrail", "agent_1", "output", "short_output"),
        ("guardrail", "agent_2", "input", "polite_input"),
        ("guardrail", "agent_3", "output", "short_output"),
    ]
    assert all(r.data["triggered"] is False for r in of_type(recorded, "guardrail_end"))
    assert of_type(recorded, "guardrail_end")[0].data["output_info"] == {"rude": False}


def test_execution_ids_are_deterministic(tmp_path: Path) -> None:
    """The same script recorded twice gives the same execution ids, in the same order."""
    ids = []
    for name in ("a.jsonl", "b.jsonl"):
        record_conversation(tmp_path / name)
        ids.append([r.execution for r in loopscribe.read(tmp_path / name) if r.execution])
    assert ids[0] == ids[1]


def test_a_reused_call_id_is_the_next_attempt_of_its_execution(tmp_path: Path) -> None:
    """A model that reuses a call id across runs gets one tool execution attempt per call."""

    def agent() -> Agent[Any]:
        model = ScriptedResponses(
            [[tool_call("get_weather", {"city": "Oslo"}, "call_1")], [reply("ok")]]
        )
        return Agent(name="weather", model=model, tools=[get_weather])

    path = tmp_path / "agent.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        asyncio.run(LoopscribeHooks(run).run(agent(), "first", run_config=OFFLINE))
        asyncio.run(LoopscribeHooks(run).run(agent(), "second", run_config=OFFLINE))
    tools = [
        r.execution for r in loopscribe.read(path) if r.type == "tool_exec_end" and r.execution
    ]
    assert [(t.id, t.attempt, t.parent_id) for t in tools] == [
        ("call_1", 1, "turn_1"),
        ("call_1", 2, "turn_3"),
    ]


# -- OpenTelemetry -----------------------------------------------------------------------


def test_replayed_spans_nest_and_carry_no_bodies(tmp_path: Path) -> None:
    """One span per model call and per tool call, under its turn and agent, with no body."""
    path = tmp_path / "agent.jsonl"
    record_conversation(path)
    captured = captured_spans()
    replay(path, captured.processor)
    assert span_tree(captured.spans) == "\n".join(
        [
            "invoke_agent weather",
            "  invoke_agent weather",
            "    turn",
            "      chat ScriptedResponses",
            "      execute_tool get_weather",
            "      execute_tool launch_rocket",
            "    turn",
            "      chat ScriptedResponses",
            "    polite_input",
            "    short_output",
            "  invoke_agent weather",
            "    turn",
            "      chat ScriptedResponses",
            "      execute_tool transfer_to_helper",
            "    polite_input",
            "  invoke_agent helper",
            "    turn",
            "      chat ScriptedResponses",
            "    short_output",
        ]
    )
    by_id = {s.context.span_id: s for s in captured.spans if s.context is not None}
    for span in captured.spans:
        attrs = span.attributes or {}
        if span.name.startswith(("chat", "execute_tool")):
            assert span.parent is not None
            parent_id = attrs["loopscribe.execution.parent_id"]
            assert isinstance(parent_id, str)
            parent = by_id[span.parent.span_id]
            assert parent.name == "turn"
            assert (parent.attributes or {})["loopscribe.execution.id"] == parent_id
        for text in span_strings(span):
            for canary in CANARIES:
                assert canary not in text, (span.name, text)
    (rocket,) = captured.named("execute_tool launch_rocket")
    assert rocket.status.status_code is StatusCode.ERROR
    assert (rocket.attributes or {})["error.type"] == "RuntimeError"
    assert (rocket.attributes or {})["gen_ai.tool.call.id"] == "call_rocket"
    chat = captured.named("chat ScriptedResponses")[0]
    assert (chat.attributes or {})["gen_ai.usage.input_tokens"] == 41
    assert (chat.attributes or {})["gen_ai.response.finish_reasons"] == ("tool_calls",)
    run_span = captured.named("invoke_agent weather")[0]
    assert run_span.status.status_code is StatusCode.UNSET


def test_live_bridge_emits_the_replayed_spans(tmp_path: Path) -> None:
    """A SpanBridge observing the session emits exactly the spans a replay of the file does."""
    path = tmp_path / "agent.jsonl"
    live = captured_spans()
    with (
        Session.create(path, observers=[SpanBridge(live.processor, file_uri=path)]) as session,
        session.begin_run() as run,
    ):
        asyncio.run(converse(run))
    replayed = captured_spans()
    replay(path, replayed.processor)

    def shape(spans: Sequence[ReadableSpan]) -> list[tuple[Any, ...]]:
        return [
            (s.name, s.context, s.parent, dict(s.attributes or {}), s.start_time, s.end_time)
            for s in spans
        ]

    assert shape(live.spans) == shape(replayed.spans)
    assert len(live.spans) == 19  # 15 calls, turns and agents; 4 guardrails


# -- failures ------------------------------------------------------------------------------


def test_input_guardrail_tripwire_is_recorded_and_fails_the_run(tmp_path: Path) -> None:
    """A tripped input guardrail is an execution; the open agent ends with the tripwire error."""

    @input_guardrail(run_in_parallel=False)
    def no_rockets(
        ctx: RunContextWrapper[Any], agent: Agent[Any], items: str | list[TResponseInputItem]
    ) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info={"topic": "rockets"}, tripwire_triggered=True)

    agent = Agent(name="weather", model=ScriptedResponses([]), input_guardrails=[no_rockets])
    path = tmp_path / "agent.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run)
        with pytest.raises(InputGuardrailTripwireTriggered):
            asyncio.run(hooks.run(agent, "launch a rocket", run_config=OFFLINE))
    assert hooks.errors == 0
    records = list(loopscribe.read(path))
    (start,) = of_type(records, "guardrail_start")
    (guardrail,) = of_type(records, "guardrail_end")
    assert start.data == {"guardrail": "no_rockets", "kind": "input"}
    assert guardrail.data == {
        "guardrail": "no_rockets",
        "triggered": True,
        "output_info": {"topic": "rockets"},
    }
    assert guardrail.execution is not None
    assert (guardrail.execution.kind, guardrail.execution.parent_id) == ("guardrail", "agent_1")
    (end,) = of_type(records, "agent_end")
    assert end.data["stop_reason"] == "guardrail_tripwire"
    assert end.data["error"]["type"] == "InputGuardrailTripwireTriggered"
    captured = captured_spans()
    replay(path, captured.processor)
    run_span = captured.named("invoke_agent weather")[0]
    assert run_span.status.status_code is StatusCode.ERROR
    (check,) = captured.named("no_rockets")  # a tripped tripwire is a result, not a failure
    assert (check.attributes or {})["openinference.span.kind"] == "GUARDRAIL"
    assert check.status.status_code is not StatusCode.ERROR
    assert (run_span.attributes or {})["error.type"] == "InputGuardrailTripwireTriggered"
    assert not any((s.attributes or {}).get("loopscribe.incomplete") for s in captured.spans)


def test_output_guardrail_tripwire_after_the_agent_ended_fails_the_run(tmp_path: Path) -> None:
    """A tripwire after on_agent_end gets an agent execution of its own that ends in error."""

    @output_guardrail
    def no_weather(
        ctx: RunContextWrapper[Any], agent: Agent[Any], output: Any
    ) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=True)

    agent = Agent(
        name="weather", model=ScriptedResponses([[reply("Sunny.")]]), output_guardrails=[no_weather]
    )
    path = tmp_path / "agent.jsonl"
    with (
        Session.create(path) as session,
        session.begin_run() as run,
        pytest.raises(OutputGuardrailTripwireTriggered),
    ):
        asyncio.run(LoopscribeHooks(run).run(agent, "weather?", run_config=OFFLINE))
    records = list(loopscribe.read(path))
    ends = [
        (r.execution.id, r.data["stop_reason"])
        for r in of_type(records, "agent_end")
        if r.execution
    ]
    assert ends == [("agent_1", "final_output"), ("agent_2", "guardrail_tripwire")]
    (guardrail,) = of_type(records, "guardrail_end")
    assert guardrail.execution is not None
    assert (guardrail.execution.parent_id, guardrail.data["triggered"]) == ("agent_2", True)
    captured = captured_spans()
    replay(path, captured.processor)
    run_span = captured.named("invoke_agent weather")[-1]  # the run span ends last
    assert "loopscribe.execution.id" not in (run_span.attributes or {})
    assert (run_span.attributes or {})["error.type"] == "OutputGuardrailTripwireTriggered"


def test_a_failed_model_call_ends_every_open_execution(tmp_path: Path) -> None:
    """When the model raises, its call, turn and agent end with that error, innermost first."""
    model = ScriptedResponses([ConnectionError("provider unreachable")])
    agent = Agent(name="weather", model=model)
    path = tmp_path / "agent.jsonl"
    with (
        Session.create(path) as session,
        session.begin_run() as run,
        pytest.raises(ConnectionError),
    ):
        asyncio.run(LoopscribeHooks(run).run(agent, "hello", run_config=OFFLINE))
    records = list(loopscribe.read(path))
    ends = [
        (r.type, r.data.get("error", {}).get("type")) for r in records if r.type.endswith("_end")
    ]
    assert ends == [
        ("message_end", None),
        ("model_exec_end", "ConnectionError"),
        ("turn_end", "ConnectionError"),
        ("agent_end", "ConnectionError"),
    ]
    captured = captured_spans()
    replay(path, captured.processor)
    (chat,) = captured.named("chat ScriptedResponses")
    assert (chat.attributes or {})["error.type"] == "ConnectionError"
    assert captured.named("invoke_agent weather")[0].status.status_code is StatusCode.ERROR


def test_a_bug_inside_a_hook_never_breaks_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception raised by the adapter's own code is contained in the hook that raised it."""

    def broken(value: Any, *args: Any) -> Any:
        raise TypeError("adapter bug")

    monkeypatch.setattr("loopscribe.adapters.openai_agents._hooks._jsonable", broken)
    with Session.create(tmp_path / "agent.jsonl") as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run)
        result = asyncio.run(hooks.run(weather_agents(), "hello", run_config=OFFLINE))
    assert result.final_output == "It is 21C and sunny; the rocket did not launch."
    assert hooks.errors > 0
    assert session.error is None


# -- installing without the helper --------------------------------------------------------


def test_plain_hooks_flag_a_tool_failure_without_the_run_config(tmp_path: Path) -> None:
    """Passed to Runner.run alone, the hooks still flag the SDK's default failure output."""
    model = ScriptedResponses(
        [[tool_call("launch_rocket", {"target": ARGS_CANARY}, "call_1")], [reply("no launch")]]
    )
    agent = Agent(name="rockets", model=model, tools=[launch_rocket])
    path = tmp_path / "agent.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run)
        asyncio.run(Runner.run(agent, "launch", hooks=hooks, run_config=OFFLINE))
    (end,) = of_type(list(loopscribe.read(path)), "tool_exec_end")
    assert end.data["is_error"] is True
    assert "type" not in end.data["error"]
    assert hooks.errors == 0


def test_run_config_overrides_are_seen_and_the_hosts_formatter_kept(tmp_path: Path) -> None:
    """hooks.run_config() learns the run's model and settings, and chains the host's formatter."""

    class NamedModel(ScriptedResponses):
        model = "scripted-4o"

    async def formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
        return f"{args.tool_name} failed; try later"

    model = NamedModel(
        [[tool_call("launch_rocket", {"target": "moon"}, "call_1")], [reply("no launch")]]
    )
    agent = Agent(
        name="rockets",
        model=ScriptedResponses([]),
        model_settings=ModelSettings(temperature=0.5),
        tools=[launch_rocket],
    )
    base = RunConfig(
        model=model,
        model_settings=ModelSettings(max_tokens=99),
        tool_error_formatter=formatter,
        tracing_disabled=True,
    )
    path = tmp_path / "agent.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        asyncio.run(LoopscribeHooks(run).run(agent, "launch", run_config=base))
    records = list(loopscribe.read(path))
    request = of_type(records, "model_request")[0].data
    assert request["model"] == "scripted-4o"
    assert (request["config"]["temperature"], request["config"]["max_tokens"]) == (0.5, 99)
    (end,) = of_type(records, "tool_exec_end")
    assert end.data["result"] == "launch_rocket failed; try later"
    assert end.data["error"]["type"] == "RuntimeError"


class _Collect(TracingProcessor):
    """Keeps the SDK's finished spans in memory; exports nothing."""

    def __init__(self) -> None:
        self.spans: list[Span[Any]] = []

    def on_trace_start(self, trace: Trace) -> None:
        """Ignore traces."""

    def on_trace_end(self, trace: Trace) -> None:
        """Ignore traces."""

    def on_span_start(self, span: Span[Any]) -> None:
        """Ignore started spans."""

    def on_span_end(self, span: Span[Any]) -> None:
        """Keep the finished span."""
        self.spans.append(span)

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self) -> None:
        """Nothing buffered."""


@pytest.fixture
def local_tracing(agents_tracing: DefaultTraceProvider) -> _Collect:
    """SDK tracing on, with a provider whose only processor keeps spans in memory."""
    collect = _Collect()
    agents_tracing.register_processor(collect)
    return collect


def test_a_custom_failure_function_is_flagged_from_the_sdk_span(
    tmp_path: Path, local_tracing: _Collect
) -> None:
    """With SDK tracing on, a failure a custom failure_error_function hid is read from its span."""

    def apologise(ctx: RunContextWrapper[Any], error: Exception) -> str:
        return "Sorry, the rocket stays home."

    def launch(target: str) -> str:
        """Launch a rocket at a target."""
        raise RuntimeError(f"{ERROR_CANARY}: launch pad offline")

    rocket = function_tool(launch, name_override="launch_rocket", failure_error_function=apologise)
    model = ScriptedResponses(
        [[tool_call("launch_rocket", {"target": "moon"}, "call_1")], [reply("no launch")]]
    )
    agent = Agent(name="rockets", model=model, tools=[rocket])
    path = tmp_path / "agent.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        asyncio.run(Runner.run(agent, "launch", hooks=LoopscribeHooks(run)))
    (end,) = of_type(list(loopscribe.read(path)), "tool_exec_end")
    assert end.data["result"] == "Sorry, the rocket stays home."
    assert end.data["is_error"] is True
    assert end.data["error"]["message"].startswith("Error running tool")
    assert any(s.error for s in local_tracing.spans)


def test_streamed_runs_are_recorded_with_the_sdk_scripted_model(tmp_path: Path) -> None:
    """Runner.run_streamed calls the same hooks; record_result adds the guardrails."""
    model = ScriptedModel(
        [
            [function_call("get_weather", {"city": "Lima"}, call_id="call_lima")],
            [assistant_message("Sunny in Lima.")],
        ]
    )
    agent = Agent(name="weather", model=model, tools=[get_weather], input_guardrails=[polite_input])
    path = tmp_path / "agent.jsonl"

    async def stream(hooks: LoopscribeHooks) -> None:
        result = Runner.run_streamed(
            agent, "Lima?", hooks=hooks, run_config=hooks.run_config(OFFLINE)
        )
        async for _event in result.stream_events():
            pass
        hooks.record_result(result)

    with Session.create(path) as session, session.begin_run() as run:
        asyncio.run(stream(LoopscribeHooks(run)))
    types = [r.type for r in loopscribe.read(path) if r.execution is not None]
    assert types.count("model_exec_end") == 2
    assert types.count("tool_exec_end") == 1
    assert types.count("guardrail_end") == 1
    assert types[-3:] == ["agent_end", "guardrail_start", "guardrail_end"]


def test_importing_loopscribe_does_not_import_the_sdk() -> None:
    """``import loopscribe`` (and its OTel bridge) leaves the Agents SDK unimported."""
    code = "import sys, loopscribe, loopscribe.otel; sys.exit('agents' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# -- agents as tools, parallel calls, sync, streaming, messages -------------------------------


def executions(records: Sequence[Record]) -> dict[str, Any]:
    """Each execution id with its kind and parent (the last record's view)."""
    return {
        r.execution.id: (r.execution.kind, r.execution.parent_id)
        for r in records
        if r.execution is not None
    }


def assert_each_call_once(records: Sequence[Record]) -> None:
    """Every model and tool execution starts once and ends once."""
    for start, end in (
        ("model_exec_start", "model_exec_end"),
        ("tool_exec_start", "tool_exec_end"),
    ):
        started = [(r.run_id, r.execution) for r in of_type(records, start)]
        ended = [(r.run_id, r.execution) for r in of_type(records, end)]
        assert len(started) == len(set(started)) == len(ended) == len(set(ended))
        assert set(started) == set(ended)


def show_lines(path: Path) -> list[str]:
    """What ``loopscribe show`` prints for the file, line by line."""
    done = subprocess.run(
        [sys.executable, "-m", "loopscribe", "show", str(path), "--last", "100"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def researcher() -> Agent[Any]:
    """An agent that looks something up, then answers; used as a tool."""
    model = ScriptedModel(
        [
            [function_call("get_weather", {"city": "Faro"}, call_id="r_weather")],
            [assistant_message("Faro: sunny.")],
        ]
    )
    return Agent(name="researcher", model=model, tools=[get_weather])


def test_an_agent_used_as_a_tool_is_recorded_in_full_under_its_call(tmp_path: Path) -> None:
    """agent.as_tool(): the sub-run's model and tool calls nest under the calling tool."""
    inner = researcher()
    outer_model = ScriptedModel(
        [
            [
                function_call("research", {"input": "Faro?"}, call_id="o_research"),
                function_call("get_weather", {"city": "Lisbon"}, call_id="o_weather"),
            ],
            [assistant_message("Both sunny.")],
        ]
    )
    outer = Agent(
        name="planner",
        model=outer_model,
        tools=[
            inner.as_tool(tool_name="research", tool_description="Research a city."),
            get_weather,
        ],
    )
    path = tmp_path / "as_tool.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run)
        result = asyncio.run(hooks.run(outer, "Weather in Faro and Lisbon?", run_config=OFFLINE))
    assert result.final_output == "Both sunny."
    assert hooks.errors == 0
    records = list(loopscribe.read(path))
    assert_each_call_once(records)
    tree = executions(records)
    assert tree["o_research"] == ("tool", "turn_1")
    assert tree["o_weather"] == ("tool", "turn_1")  # the parallel call of the same turn
    (sub,) = [r for r in of_type(records, "agent_start") if r.data["agent"] == "researcher"]
    assert sub.execution is not None
    assert sub.execution.kind == "agent"
    assert sub.execution.parent_id == "o_research"
    sub_models = [
        r.execution
        for r in of_type(records, "model_exec_start")
        if r.execution is not None and tree[r.execution.parent_id or ""][1] == sub.execution.id
    ]
    assert len(sub_models) == 2  # the sub-run's own two model calls
    assert tree["r_weather"][0] == "tool"
    assert tree[tree["r_weather"][1]] == ("turn", sub.execution.id)
    assert len(of_type(records, "model_exec_start")) == 4
    committed = [r.data["message"] for r in of_type(records, "message_end")]
    assert [m.text for m in committed if isinstance(m, AssistantMessage) and m.text] == [
        "Faro: sunny.",
        "Both sunny.",
    ]
    assert "?" not in show_lines(path)


def test_run_sync_and_streamed_runs_say_whether_the_call_streamed(tmp_path: Path) -> None:
    """Runner.run_sync with hooks, then hooks.run_streamed: each call once, stream recorded."""
    path = tmp_path / "modes.jsonl"
    with Session.create(path) as session:
        with session.begin_run() as run:
            agent = researcher()
            hooks = LoopscribeHooks(run)
            Runner.run_sync(agent, "Faro?", hooks=hooks, run_config=hooks.run_config(OFFLINE))
            # run_sync leaves the thread's default loop open on purpose; the test closes it.
            asyncio.get_event_loop_policy().get_event_loop().close()
            asyncio.set_event_loop(None)
        with session.begin_run() as run:
            agent = researcher()
            hooks = LoopscribeHooks(run)

            async def stream() -> None:
                result = hooks.run_streamed(agent, "Faro?", run_config=OFFLINE)
                async for _event in result.stream_events():
                    pass
                hooks.record_result(result)

            asyncio.run(stream())
    records = list(loopscribe.read(path))
    runs = [r.run_id for r in of_type(records, "model_exec_start")]
    assert len(runs) == 4
    assert_each_call_once(records)
    streamed = [r.data.get("stream") for r in of_type(records, "model_exec_start")]
    assert streamed == [None, None, True, True]  # plain hooks cannot tell; run_streamed can
    assert {r.data["provider"] for r in of_type(records, "model_exec_start")} == {"openai"}
    assert "?" not in show_lines(path)


def test_show_renders_every_message_of_a_handoff_conversation(tmp_path: Path) -> None:
    """The weather conversation (tools, a failure, a handoff) prints without a ``?``."""
    path = tmp_path / "agent.jsonl"
    record_conversation(path)
    lines = show_lines(path)
    assert "?" not in lines
    assert "tool" in lines
    assert any(line.startswith("[tool call get_weather") for line in lines)


@pytest.mark.parametrize(
    ("model", "provider"),
    [
        ("gpt-4.1", "openai"),
        ("litellm/anthropic/claude-sonnet-4", "anthropic"),
        ("bedrock/amazon.nova-pro", "aws.bedrock"),
        ("openai/gpt-4o", "openai"),
        (ScriptedModel([]), "openai"),
    ],
)
def test_the_provider_is_openai_unless_the_model_says_otherwise(model: Any, provider: str) -> None:
    """Model names with a provider prefix name it; everything else talks to OpenAI."""
    assert provider_of(model) == provider


ROUND_TRIP_ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Lisbon?"},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "And this?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0K"},
            {"type": "input_image", "file_id": "file-1"},
            {"type": "input_file", "file_url": "https://example.com/a.pdf", "filename": "a.pdf"},
        ],
    },
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Check both."}]},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "On it."}],
    },
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "get_weather",
        "arguments": '{"city":"Lisbon"}',
    },
    {
        "type": "function_call",
        "call_id": "c2",
        "name": "get_weather",
        "arguments": '{"city":"Porto"}',
    },
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    {"type": "function_call_output", "call_id": "c2", "output": "rain"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
    {"role": "developer", "content": "Be brief."},
]


def test_items_convert_to_loopscribe_messages_and_back() -> None:
    """Input items become typed messages (one assistant message per run of items) and back."""
    messages = from_items(ROUND_TRIP_ITEMS)
    assert [type(m).__name__ for m in messages] == [
        "UserMessage",
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "ToolResultMessage",
        "dict",  # a hosted call: the SDK's item, kept
        "dict",  # a developer message keeps its role
    ]
    assistant = messages[2]
    assert isinstance(assistant, AssistantMessage)
    assert [type(c).__name__ for c in assistant.content] == [
        *("ThinkingContent", "TextContent", "ToolCall", "ToolCall")
    ]
    result = messages[3]
    assert isinstance(result, ToolResultMessage)
    assert (result.tool_call_id, result.tool_name) == ("c1", "get_weather")
    back = to_items(messages)
    assert [{k: v for k, v in i.items() if k != "type" or "role" not in i} for i in back] == [
        {k: v for k, v in i.items() if k != "type" or "role" not in i} for i in ROUND_TRIP_ITEMS
    ]


def test_model_output_with_usage_details_becomes_one_assistant_message() -> None:
    """Cached and reasoning tokens, the response id and the finish reason are kept."""
    usage = Usage(
        requests=1,
        input_tokens=100,
        output_tokens=20,
        total_tokens=120,
        input_tokens_details=InputTokensDetails(cached_tokens=60, cache_write_tokens=5),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=12),
    )
    output = [
        function_call("get_weather", {"city": "Lima"}, call_id="c9").model_dump(),
    ]
    message = assistant_message_of(
        output, usage=usage_of(usage), response_id="resp_9", stop_reason="tool_calls"
    )
    assert isinstance(message, AssistantMessage)
    assert message.usage == LsUsage(
        100, 20, cache_read_tokens=60, cache_write_tokens=5, reasoning_tokens=12
    )
    assert (message.response_id, message.stop_reason) == ("resp_9", "tool_calls")
    assert message.tool_calls[0].arguments == {"city": "Lima"}


# -- the TracingProcessor path ----------------------------------------------------------------


def responses_api(script: list[dict[str, Any]]) -> Any:
    """An ``AsyncOpenAI`` client whose Responses API answers from ``script`` (no socket)."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json=script.pop(0))

    transport = httpx2.MockTransport(answer)
    return AsyncOpenAI(
        api_key="sk-test",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.AsyncClient(transport=transport),
    )


def api_response(response_id: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    """A Responses API response body, as OpenAI sends it."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": 0,
        "model": "gpt-4.1-2025-04-14",
        "instructions": "Answer briefly.",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "status": "completed",
        "usage": {
            "input_tokens": 50,
            "output_tokens": 9,
            "total_tokens": 59,
            "input_tokens_details": {"cached_tokens": 32},
            "output_tokens_details": {"reasoning_tokens": 4},
        },
    }


def api_call(name: str, arguments: Mapping[str, Any], call_id: str) -> dict[str, Any]:
    """A function call output item."""
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def api_text(text: str) -> dict[str, Any]:
    """An assistant message output item."""
    return {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def test_the_trace_processor_records_from_the_sdks_own_spans(
    tmp_path: Path, local_tracing: _Collect
) -> None:
    """add_trace_processor: OpenAI Responses models, a tool, an agent used as a tool, nested."""
    inner = Agent(
        name="researcher",
        model=OpenAIResponsesModel(
            "gpt-4.1",
            responses_api(
                [
                    api_response("resp_r1", [api_call("get_weather", {"city": "Faro"}, "r1")]),
                    api_response("resp_r2", [api_text("Faro: sunny.")]),
                ]
            ),
        ),
        tools=[get_weather],
    )
    outer = Agent(
        name="planner",
        instructions="Answer briefly.",
        model=OpenAIResponsesModel(
            "gpt-4.1",
            responses_api(
                [
                    api_response("resp_1", [api_call("research", {"input": "Faro?"}, "o1")]),
                    api_response("resp_2", [api_text("Sunny in Faro.")]),
                ]
            ),
        ),
        tools=[inner.as_tool(tool_name="research", tool_description="Research a city.")],
    )
    path = tmp_path / "traced.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        processor = LoopscribeTraceProcessor(run)
        add_trace_processor(processor)
        result = asyncio.run(Runner.run(outer, "Weather in Faro?"))
        processor.close()
    assert result.final_output == "Sunny in Faro."
    assert processor.errors == 0
    records = list(loopscribe.read(path))
    assert_each_call_once(records)
    tree = executions(records)
    agents = {r.data["agent"]: r.execution for r in of_type(records, "agent_start")}
    assert agents["planner"] is not None
    assert agents["researcher"] is not None
    assert agents["planner"].parent_id is None
    assert agents["researcher"].parent_id == "o1"  # nested under the tool call that ran it
    assert tree["o1"][0] == "tool"
    assert tree["r1"][0] == "tool"
    assert tree[tree["r1"][1]] == ("turn", agents["researcher"].id)
    starts = of_type(records, "model_exec_start")
    assert [r.data["model"] for r in starts] == ["gpt-4.1-2025-04-14"] * 4
    assert {r.data["provider"] for r in starts} == {"openai"}
    ends = of_type(records, "model_exec_end")
    assert [r.data["response_id"] for r in ends] == ["resp_1", "resp_r1", "resp_r2", "resp_2"]
    assert ends[0].data["usage"] == LsUsage(50, 9, cache_read_tokens=32, reasoning_tokens=4)
    request = of_type(records, "model_request")[0].data
    assert request["messages"] == [
        SystemMessage("Answer briefly."),
        UserMessage("Weather in Faro?"),
    ]
    committed = [r.data["message"] for r in of_type(records, "message_end")]
    results = [m.tool_call_id for m in committed if isinstance(m, ToolResultMessage)]
    assert sorted(results) == ["o1", "r1"]
    assert sum(isinstance(m, AssistantMessage) for m in committed) == 4
    assert "?" not in show_lines(path)


class ModelOverloadedError(RuntimeError):
    """A transient provider failure the retry policy retries."""


def retrying(model: ScriptedModel) -> ModelSettings:
    """Model settings whose runner-managed retry policy retries every failure once, at once."""
    return ModelSettings(
        retry=ModelRetrySettings(
            max_retries=1, backoff={"initial_delay": 0.0}, policy=lambda context: True
        )
    )


def test_the_trace_processor_records_guardrails_and_each_retried_attempt(
    tmp_path: Path, local_tracing: _Collect
) -> None:
    """Guardrail spans become executions under their agent; each model attempt is recorded."""

    @input_guardrail(run_in_parallel=False)
    def topic_check(
        ctx: RunContextWrapper[Any], agent: Agent[Any], items: str | list[TResponseInputItem]
    ) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info={"topic": "weather"}, tripwire_triggered=False)

    model = ScriptedModel(
        [
            [function_call("get_weather", {"city": "Porto"}, call_id="call_porto")],
            ModelStep.raise_error(ModelOverloadedError("overloaded, try again")),
            [assistant_message("Sunny in Porto.")],
        ],
        emit_traces=True,
    )
    agent = Agent(
        name="weather",
        model=model,
        model_settings=retrying(model),
        tools=[get_weather],
        input_guardrails=[topic_check],
        output_guardrails=[short_output],
    )
    path = tmp_path / "traced.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        processor = LoopscribeTraceProcessor(run)
        add_trace_processor(processor)
        result = asyncio.run(Runner.run(agent, "Weather in Porto?"))
        processor.close()
    assert result.final_output == "Sunny in Porto."
    assert processor.errors == 0
    records = list(loopscribe.read(path))
    (agent_start,) = of_type(records, "agent_start")
    assert agent_start.execution is not None
    ends = of_type(records, "guardrail_end")
    assert [(r.data["guardrail"], r.data["triggered"]) for r in ends] == [
        ("topic_check", False),
        ("short_output", False),
    ]
    for end in ends:
        assert end.execution is not None
        assert (end.execution.kind, end.execution.parent_id) == (
            "guardrail",
            agent_start.execution.id,
        )
    attempts = [
        (r.execution.id, r.execution.attempt, "error" in r.data)
        for r in of_type(records, "model_exec_end")
        if r.execution
    ]
    assert attempts == [("model_1", 1, False), ("model_2", 1, True), ("model_2", 2, False)]
    (retry,) = of_type(records, "retry_scheduled")
    assert retry.execution is not None
    assert (retry.execution.id, retry.execution.attempt) == ("model_2", 1)
    assert retry.data["next_attempt"] == 2
    assert retry.data["error"]["type"] == "ModelOverloadedError"
    assert "overloaded, try again" in retry.data["error"]["message"]
    captured = captured_spans()
    replay(path, captured.processor)
    chats = [s for s in captured.spans if s.name.startswith("chat")]
    assert [(s.attributes or {})["loopscribe.attempt"] for s in chats] == [1, 1, 2]
    assert chats[1].status.status_code is StatusCode.ERROR
    assert (chats[1].attributes or {})["error.type"] == "ModelOverloadedError"
    guardrail_spans = [s for s in captured.spans if s.name in ("topic_check", "short_output")]
    assert len(guardrail_spans) == 2
    for span in guardrail_spans:
        assert (span.attributes or {})["openinference.span.kind"] == "GUARDRAIL"
        assert span.parent is not None
        assert (span.attributes or {})["loopscribe.execution.parent_id"] == (
            agent_start.execution.id
        )


def test_hooks_record_each_attempt_the_sdk_retried(tmp_path: Path) -> None:
    """The agent's retry policy retries a failed call: both attempts, the error between them."""
    model = ScriptedModel(
        [
            ModelStep.raise_error(ModelOverloadedError("overloaded")),
            [assistant_message("Sunny.")],
        ]
    )
    agent = Agent(name="weather", model=model, model_settings=retrying(model))
    path = tmp_path / "agent.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run)
        result = asyncio.run(hooks.run(agent, "weather?", run_config=OFFLINE))
    assert result.final_output == "Sunny."
    assert hooks.errors == 0
    records = list(loopscribe.read(path))
    assert_each_call_once(records)
    attempts = [
        (r.type, r.execution.id, r.execution.attempt)
        for r in records
        if r.execution is not None and r.execution.kind == "model"
    ]
    assert attempts == [
        ("model_exec_start", "model_1", 1),
        ("model_request", "model_1", 1),
        ("model_exec_end", "model_1", 1),
        ("retry_scheduled", "model_1", 1),
        ("model_exec_start", "model_1", 2),
        ("model_request", "model_1", 2),
        ("model_exec_end", "model_1", 2),
        ("message_end", "model_1", 2),
    ]
    first_end, second_end = of_type(records, "model_exec_end")
    assert first_end.data["error"]["type"] == "ModelOverloadedError"
    assert "error" not in second_end.data
    assert second_end.data["failed_attempts"] == 1
    requests = [r.data for r in of_type(records, "model_request")]
    assert requests[0] == requests[1]  # the same request, sent again
    assert "policy" not in requests[0]["config"].get("retry", {})
    (retry,) = of_type(records, "retry_scheduled")
    assert retry.data["next_attempt"] == 2
    assert first_end.ts <= retry.ts <= of_type(records, "model_exec_start")[1].ts
    captured = captured_spans()
    replay(path, captured.processor)
    chats = [s for s in captured.spans if s.name.startswith("chat")]
    assert [(s.attributes or {})["loopscribe.attempt"] for s in chats] == [1, 2]
    assert chats[0].status.status_code is StatusCode.ERROR
    assert (chats[0].attributes or {})["error.type"] == "ModelOverloadedError"
    assert chats[1].status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("policy", [retry_policies.network_error(), retry_policies.never()])
def test_the_watched_policy_keeps_what_the_sdk_reads_from_the_hosts(
    tmp_path: Path, policy: Any
) -> None:
    """The SDK reads which failures a policy retries from the policy object; they stay the same."""
    config = RunConfig(model_settings=ModelSettings(retry=ModelRetrySettings(policy=policy)))
    with Session.create(tmp_path / "agent.jsonl") as session, session.begin_run() as run:
        settings = LoopscribeHooks(run).run_config(config).model_settings
    assert settings is not None
    assert settings.retry is not None
    wrapper = settings.retry.policy
    assert wrapper is not policy
    for attribute in (
        "_openai_agents_retries_safe_transport_errors",
        "_openai_agents_retries_all_transient_errors",
    ):
        assert getattr(wrapper, attribute) == getattr(policy, attribute, False)
    copied = copy.deepcopy(settings).retry  # the SDK copies model settings
    assert copied is not None
    assert copied.policy is wrapper


def test_a_retry_the_policy_refuses_ends_the_run_on_the_last_attempt(tmp_path: Path) -> None:
    """A run-level policy retries once; the second failure is final: two failed attempts."""
    model = ScriptedModel(
        [
            ModelStep.raise_error(ModelOverloadedError("overloaded")),
            ModelStep.raise_error(ModelOverloadedError("still overloaded")),
        ]
    )
    decisions: list[int] = []

    def once(context: Any) -> bool:
        decisions.append(context.attempt)
        return True

    config = RunConfig(
        tracing_disabled=True,
        model_settings=ModelSettings(
            retry=ModelRetrySettings(max_retries=1, backoff={"initial_delay": 0.0}, policy=once)
        ),
    )
    agent = Agent(name="weather", model=model)
    path = tmp_path / "agent.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run)
        with pytest.raises(ModelOverloadedError):
            asyncio.run(hooks.run(agent, "weather?", run_config=config))
    assert decisions == [1]  # the host's policy decided, once
    records = list(loopscribe.read(path))
    assert_each_call_once(records)
    ends = [
        (ex.attempt, r.data["error"]["message"])
        for r in of_type(records, "model_exec_end")
        if (ex := r.execution)
    ]
    assert ends == [(1, "overloaded"), (2, "still overloaded")]
    assert len(of_type(records, "retry_scheduled")) == 1


def test_streamed_deltas_reach_live_subscribers_and_never_the_file(tmp_path: Path) -> None:
    """hooks.stream_events publishes each call's deltas on its model execution, unwritten."""
    model = ScriptedModel(
        [
            [function_call("get_weather", {"city": "Lima"}, call_id="call_lima")],
            [assistant_message("Sunny in Lima.")],
        ]
    )
    agent = Agent(name="weather", model=model, tools=[get_weather])
    path = tmp_path / "agent.jsonl"
    bus = Bus()

    async def stream(hooks: LoopscribeHooks) -> list[str]:
        result = hooks.run_streamed(agent, "Lima?", run_config=OFFLINE)
        return [event.type async for event in hooks.stream_events(result)]

    with Session.create(path, observers=[bus]) as session, session.begin_run() as run:
        subscription = bus.subscribe(session.id)
        hooks = LoopscribeHooks(run)
        seen = asyncio.run(stream(hooks))
    subscription.close()
    assert hooks.errors == 0
    assert "raw_response_event" in seen
    deltas = [item for item in subscription if isinstance(item, Transient)]
    assert {d.type for d in deltas} == {"message_update"}
    by_call: dict[str, list[Any]] = {}
    for d in deltas:
        assert d.execution is not None
        by_call.setdefault(d.execution.id, []).append(d.data["delta"])
    assert by_call["model_1"] == [
        {"type": "tool_call", "item_id": "call_lima", "arguments": '{"city":"Lima"}'}
    ]
    assert "".join(by_call["model_2"]) == "Sunny in Lima."
    records = list(loopscribe.read(path))
    assert not of_type(records, "message_update")
    assert of_type(records, "model_exec_end")[0].data["message"] is not None
    assert of_type(records, "agent_end")  # stream_events recorded the result


def test_checkpoints_say_where_each_run_left_the_conversation(tmp_path: Path) -> None:
    """checkpoints=True: after each run a checkpoint with the agent and the input-list length."""
    path = tmp_path / "agent.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run, checkpoints=True)
        agent = weather_agents()
        first = asyncio.run(hooks.run(agent, "Weather in Faro?", run_config=OFFLINE))
        history = first.to_input_list()
        follow_up: list[TResponseInputItem] = [{"role": "user", "content": "Something else."}]
        second = asyncio.run(hooks.run(agent, history + follow_up, run_config=OFFLINE))
        assert session.load_checkpoint() == {
            "framework": "openai-agents",
            "agent": "helper",
            "input_items": len(second.to_input_list()),
            "last_response_id": second.last_response_id,
            "input": json.loads(json.dumps(second.to_input_list())),
        }
    assert hooks.errors == 0
    records = list(loopscribe.read(path))
    checkpoints = of_type(records, "checkpoint")
    assert [c.data["snapshot"]["agent"] for c in checkpoints] == ["weather", "helper"]
    assert checkpoints[0].data["snapshot"]["input_items"] == len(history)
    # Each checkpoint follows everything its run committed.
    ends = [r.seq for r in of_type(records, "agent_end")]
    assert checkpoints[0].seq > ends[0]
    assert checkpoints[1].seq > ends[-1]
    assert max(r.seq for r in of_type(records, "message_end")) < checkpoints[1].seq


def test_checkpoints_are_off_by_default(recorded: list[Record]) -> None:
    """Without checkpoints=True nothing is fsynced per run."""
    assert not of_type(recorded, "checkpoint")


def test_the_trace_processor_records_a_streamed_handoff(
    tmp_path: Path, local_tracing: _Collect
) -> None:
    """run_streamed with a handoff, traced: both agents, each call once in its agent's turn."""
    helper = Agent(
        name="helper",
        model=ScriptedModel([[assistant_message("The helper answers.")]], emit_traces=True),
    )
    triage = Agent(
        name="triage",
        model=ScriptedModel(
            [[function_call("transfer_to_helper", {}, call_id="call_h")]], emit_traces=True
        ),
        handoffs=[helper],
    )
    path = tmp_path / "traced.jsonl"

    async def stream() -> Any:
        result = Runner.run_streamed(triage, "Help me.")
        async for _event in result.stream_events():
            pass
        return result.final_output

    with Session.create(path) as session, session.begin_run() as run:
        processor = LoopscribeTraceProcessor(run)
        add_trace_processor(processor)
        final = asyncio.run(stream())
        processor.close()
    assert final == "The helper answers."
    assert processor.errors == 0
    records = list(loopscribe.read(path))
    assert_each_call_once(records)
    agents = [
        (r.data["agent"], ex.parent_id)
        for r in of_type(records, "agent_start")
        if (ex := r.execution)
    ]
    assert agents == [("triage", None), ("helper", None)]
    (handoff,) = of_type(records, "handoff")
    assert handoff.data == {"from_agent": "triage", "to_agent": "helper"}
    # Each model call sits in a turn of the agent that made it. (The SDK's scripted model
    # traces no bodies, so this path has no messages to commit: see the module's limits.)
    tree = executions(records)
    agent_ids = [r.execution.id for r in of_type(records, "agent_start") if r.execution]
    owners = []
    for end in of_type(records, "model_exec_end"):
        assert end.execution is not None
        turn = end.execution.parent_id
        assert turn is not None
        assert tree[turn][0] == "turn"
        owners.append(tree[turn][1])
    assert owners == agent_ids


def test_tool_guardrails_are_executions_with_their_behavior(tmp_path: Path) -> None:
    """A tool input guardrail that rejects and an output guardrail that allows: both recorded."""

    @tool_input_guardrail
    def no_moon(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.reject_content(
            "Rockets stay home.", output_info={"target": "moon"}
        )

    @tool_output_guardrail
    def checked(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.allow(output_info={"checked": True})

    def launch(target: str) -> str:
        """Launch a rocket at a target."""
        return f"launched at {target}"

    def weather(city: str) -> str:
        """Current weather for a city."""
        return f"sunny in {city}"

    rocket = function_tool(launch, tool_input_guardrails=[no_moon])
    sky = function_tool(weather, tool_output_guardrails=[checked])
    model = ScriptedResponses(
        [
            [
                tool_call("launch", {"target": "moon"}, "call_l"),
                tool_call("weather", {"city": "Faro"}, "call_w"),
            ],
            [reply("No launch; sunny in Faro.")],
        ]
    )
    agent = Agent(name="rockets", model=model, tools=[rocket, sky])
    path = tmp_path / "agent.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run)
        asyncio.run(hooks.run(agent, "Launch, and the weather?", run_config=OFFLINE))
    assert hooks.errors == 0
    records = list(loopscribe.read(path))
    kinds = {
        r.execution.id: r.data["kind"] for r in of_type(records, "guardrail_start") if r.execution
    }
    ends = {
        r.data["guardrail"]: (kinds[r.execution.id], r.execution.parent_id, r.data)
        for r in of_type(records, "guardrail_end")
        if r.execution
    }
    assert set(ends) == {"no_moon", "checked"}
    kind, parent, data = ends["no_moon"]
    assert (kind, parent) == ("tool_input", "agent_1")
    assert data["triggered"] is True
    assert data["behavior"] == "reject_content"
    assert data["output_info"] == {"target": "moon"}
    kind, parent, data = ends["checked"]
    assert (kind, parent) == ("tool_output", "agent_1")
    assert (data["triggered"], data["behavior"]) == (False, "allow")
    # The rejected call never ran, yet it has its execution, with what the model was told,
    # and its result is committed once like any other.
    (launched,) = [
        r for r in of_type(records, "tool_exec_end") if r.execution and r.execution.id == "call_l"
    ]
    assert launched.data["result"] == "Rockets stay home."
    assert launched.data["disposition"] == "not_executed"
    assert launched.execution is not None
    assert launched.execution.parent_id == "turn_1"
    results = [
        r.data["message"].tool_call_id
        for r in of_type(records, "message_end")
        if isinstance(r.data["message"], ToolResultMessage)
    ]
    assert sorted(results) == ["call_l", "call_w"]
    assert_each_call_once(records)
    assert "?" not in show_lines(path)


def test_a_retry_inside_an_agent_used_as_a_tool_is_an_attempt_of_its_own_call(
    tmp_path: Path,
) -> None:
    """The sub-run's agent retries with its own policy; the attempts nest under the tool call."""
    inner_model = ScriptedModel(
        [
            ModelStep.raise_error(ModelOverloadedError("overloaded")),
            [assistant_message("Faro: sunny.")],
        ]
    )
    inner = Agent(name="researcher", model=inner_model, model_settings=retrying(inner_model))
    outer = Agent(
        name="planner",
        model=ScriptedModel(
            [
                [function_call("research", {"input": "Faro?"}, call_id="o_research")],
                [assistant_message("Sunny.")],
            ]
        ),
        tools=[inner.as_tool(tool_name="research", tool_description="Research a city.")],
    )
    path = tmp_path / "as_tool.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run)
        result = asyncio.run(hooks.run(outer, "Weather in Faro?", run_config=OFFLINE))
    assert result.final_output == "Sunny."
    assert hooks.errors == 0
    records = list(loopscribe.read(path))
    assert_each_call_once(records)
    tree = executions(records)
    (sub,) = [
        r.execution for r in of_type(records, "agent_start") if r.data["agent"] == "researcher"
    ]
    assert sub is not None
    assert sub.parent_id == "o_research"
    attempts = [
        (ex.id, ex.attempt, "error" in r.data)
        for r in of_type(records, "model_exec_end")
        if (ex := r.execution) is not None and tree[ex.parent_id or ""][1] == sub.id
    ]
    (model_id, _, _) = attempts[0]
    assert attempts == [(model_id, 1, True), (model_id, 2, False)]
    outer_models = [
        r.execution.attempt
        for r in of_type(records, "model_exec_end")
        if r.execution is not None and r.execution.id != model_id
    ]
    assert outer_models == [1, 1]  # the planner's calls were not retried


def test_stream_events_records_guardrails_as_the_run_reports_them(tmp_path: Path) -> None:
    """A streamed run: each guardrail is recorded once, the input one before the agent ends."""
    model = ScriptedModel(
        [
            [function_call("get_weather", {"city": "Lima"}, call_id="call_lima")],
            [assistant_message("Sunny in Lima.")],
        ]
    )
    agent = Agent(
        name="weather",
        model=model,
        tools=[get_weather],
        input_guardrails=[polite_input],
        output_guardrails=[short_output],
    )
    path = tmp_path / "agent.jsonl"

    async def stream(hooks: LoopscribeHooks) -> None:
        result = hooks.run_streamed(agent, "Lima?", run_config=OFFLINE)
        async for _event in hooks.stream_events(result):
            pass

    with Session.create(path) as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run)
        asyncio.run(stream(hooks))
    assert hooks.errors == 0
    records = list(loopscribe.read(path))
    ends = of_type(records, "guardrail_end")
    assert sorted(r.data["guardrail"] for r in ends) == ["polite_input", "short_output"]
    (agent_end,) = of_type(records, "agent_end")
    (polite,) = [r for r in ends if r.data["guardrail"] == "polite_input"]
    assert polite.seq < agent_end.seq  # recorded while the run went on
    for end in ends:
        assert end.execution is not None
        assert end.execution.parent_id == "agent_1"


# -- resuming from a checkpoint ---------------------------------------------------------


@function_tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file; a human approves each call."""
    return f"{OUTPUT_CANARY}: deleted {path}"


def ops_agent(model: Model) -> Agent[Any]:
    """An agent whose only tool needs approval."""
    return Agent(name="ops", instructions="You run operations.", model=model, tools=[delete_file])


def interrupted_session(path: Path) -> None:
    """A run that asks for two deletions and stops for their approval, with checkpoints on."""
    model = ScriptedModel(
        [
            [
                function_call("delete_file", {"path": "/srv/a"}, call_id="call_a"),
                function_call("delete_file", {"path": "/srv/b"}, call_id="call_b"),
            ]
        ]
    )
    with Session.create(path) as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run, checkpoints=True)
        result = asyncio.run(
            hooks.run(ops_agent(model), "Delete /srv/a and /srv/b.", run_config=OFFLINE)
        )
        assert [item.tool_name for item in result.interruptions] == ["delete_file"] * 2
        assert hooks.errors == 0


def test_an_interrupted_run_resumes_from_its_checkpoint_in_a_fresh_runner(tmp_path: Path) -> None:
    """The checkpoint holds the SDK's RunState; rebuilt from the file, approved, it completes."""
    path = tmp_path / "agent.jsonl"
    interrupted_session(path)
    snapshot = loopscribe.load_checkpoint(path)
    assert snapshot["interrupted"] is True
    assert "input" not in snapshot
    assert snapshot["run_state"]["$schemaVersion"]
    assert snapshot["run_state"]["current_agent"]["name"] == "ops"

    # A fresh agent, model and Runner call: nothing but the file carries the state over.
    model = ScriptedModel([[assistant_message("Deleted /srv/a; /srv/b was refused.")]])
    agent = ops_agent(model)

    async def resume(hooks: LoopscribeHooks) -> RunResult:
        state = await RunState.from_json(agent, snapshot["run_state"])
        first, second = state.get_interruptions()
        state.approve(first)
        state.reject(second, rejection_message="Not /srv/b.")
        return await hooks.run(agent, state, run_config=OFFLINE)

    with Session.open(path) as session, session.begin_run(actor=Actor(user_id="alice")) as run:
        hooks = LoopscribeHooks(run, checkpoints=True)
        result = asyncio.run(resume(hooks))
    assert hooks.errors == 0
    assert result.final_output == "Deleted /srv/a; /srv/b was refused."
    (request,) = model.calls  # the resumed model call saw both calls answered
    outputs = {
        item["call_id"]: item["output"]
        for item in request.input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    assert set(outputs) == {"call_a", "call_b"}

    records = list(loopscribe.read(path))
    runs = [r for r in records if r.type == "run_start"]
    assert len(runs) == 2
    first_part = [r for r in records if r.run_id == runs[0].run_id]
    second_part = [r for r in records if r.run_id == runs[1].run_id]
    # Part one: the request, the calls asked for, an agent ended "interrupted".
    assert [r.data["stop_reason"] for r in of_type(first_part, "agent_end")] == ["interrupted"]
    assert not of_type(first_part, "tool_exec_start")
    # Part two: the decisions, the approved call run, the refused one answered, the reply.
    agent_start = of_type(second_part, "agent_start")[0]
    assert agent_start.data["resumed"] is True
    approvals = {r.execution.id: r for r in of_type(second_part, "approval") if r.execution}
    assert {k: r.data["approved"] for k, r in approvals.items()} == {
        "call_a": True,
        "call_b": False,
    }
    assert approvals["call_a"].data["summary"] == '{"path":"/srv/a"}'
    ends = {r.execution.id: r for r in of_type(second_part, "tool_exec_end") if r.execution}
    assert OUTPUT_CANARY in ends["call_a"].data["result"]
    assert ends["call_b"].data["disposition"] == "not_executed"
    assert ends["call_b"].data["result"] == "Not /srv/b."
    for call in ("call_a", "call_b"):
        assert approvals[call].execution == ends[call].execution
        assert ends[call].execution.parent_id == agent_start.execution.id  # type: ignore[union-attr]
    assert [r.data["stop_reason"] for r in of_type(second_part, "agent_end")] == ["final_output"]
    # The user's request is committed once, by the part that received it.
    users = [
        r
        for r in of_type(records, "message_end")
        if getattr(r.data["message"], "role", None) == "user"
    ]
    assert len(users) == 1
    assert users[0].run_id == runs[0].run_id
    # The finished run's checkpoint holds its input list: the next Runner.run starts from it.
    done = of_type(second_part, "checkpoint")[-1].data["snapshot"]
    assert "run_state" not in done
    assert len(done["input"]) == len(result.to_input_list()) == done["input_items"]


def test_a_finished_runs_checkpoint_continues_the_conversation(tmp_path: Path) -> None:
    """The input list of a finished run's checkpoint, plus a message, is a valid next run."""
    path = tmp_path / "agent.jsonl"
    model = ScriptedModel([[assistant_message("Hello.")], [assistant_message("Still here.")]])
    with Session.create(path) as session, session.begin_run() as run:
        asyncio.run(
            LoopscribeHooks(run, checkpoints=True).run(ops_agent(model), "Hi", run_config=OFFLINE)
        )
    snapshot = loopscribe.load_checkpoint(path)
    follow_up: list[TResponseInputItem] = [{"role": "user", "content": "Are you there?"}]
    result = asyncio.run(
        Runner.run(ops_agent(model), snapshot["input"] + follow_up, run_config=OFFLINE)
    )
    assert result.final_output == "Still here."
    assert [i.get("content") for i in result.to_input_list()[:1]] == ["Hi"]


def test_replay_of_a_resumed_run_nests_its_calls_under_the_resumed_agent(tmp_path: Path) -> None:
    """The approved call of a resumed run is a tool span under its agent, in the run's trace."""
    path = tmp_path / "agent.jsonl"
    interrupted_session(path)
    snapshot = loopscribe.load_checkpoint(path)
    agent = ops_agent(ScriptedModel([[assistant_message("Done.")]]))

    async def resume(hooks: LoopscribeHooks) -> None:
        state = await RunState.from_json(agent, snapshot["run_state"])
        for item in state.get_interruptions():
            state.approve(item)
        await hooks.run(agent, state, run_config=OFFLINE)

    with Session.open(path) as session, session.begin_run() as run:
        asyncio.run(resume(LoopscribeHooks(run)))
    captured = captured_spans()
    replay(path, captured.processor)
    tree = span_tree(captured.spans)
    assert tree.endswith(
        "\n".join(
            [
                "invoke_agent ops",
                "  invoke_agent ops",
                "    execute_tool delete_file",
                "    execute_tool delete_file",
                "    turn",
                "      chat ScriptedModel",
            ]
        )
    ), tree
