"""The LangChain adapter, driven by the real langchain-core runtime and a scripted chat model.

The agent is a hand-written tool-calling loop in a ``RunnableLambda`` (what
LangGraph's prebuilt agent does, without the dependency): a scripted chat
model with bound tools, ``with_retry`` around it, tools called with the
model's tool calls. Everything runs offline.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.agents import AgentAction, AgentFinish
from langchain_core.callbacks import CallbackManagerForChainRun
from langchain_core.callbacks.manager import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.llms import create_base_retry_decorator
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool
from opentelemetry.sdk.trace import ReadableSpan

import loopscribe
from loopscribe import (
    AssistantMessage,
    Execution,
    Record,
    Session,
    TextContent,
    Usage,
    UserMessage,
)
from loopscribe.adapters.langchain import (
    LoopscribeCallbackHandler,
    from_langchain,
    lower_message,
    to_langchain,
)
from loopscribe.otel import SpanBridge, replay
from loopscribe.testing import captured_spans, span_tree

PROMPT_CANARY = "canary-prompt-7f3a"
ARGS_CANARY = "canary-args-91bc"
OUTPUT_CANARY = "canary-output-c0de"
SECRET = "sk-canary-secret-0000"
CANARIES = (PROMPT_CANARY, ARGS_CANARY, OUTPUT_CANARY, SECRET)
ROOT_RUN_ID = uuid.UUID("01900000-0000-7000-8000-000000000001")
SECOND_RUN_ID = uuid.UUID("01900000-0000-7000-8000-000000000002")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep LangSmith tracing off, whatever the environment says: no network in tests."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.delenv(name, raising=False)


# -- the scripted host -----------------------------------------------------------------


class RateLimitError(Exception):
    """What a provider raises when it throttles; retried by the agent."""


class ScriptedChatModel(BaseChatModel):
    """A chat model that replays a script: the next AIMessage, or raises the next exception."""

    model_name: str = "scripted-1"
    script: list[Any]
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def _identifying_params(self) -> Mapping[str, Any]:
        # A credential in the invocation parameters, as real providers have.
        return {"model_name": self.model_name, "temperature": 0.1, "api_key": SECRET}

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        item = self.script[self.calls]
        self.calls += 1
        if isinstance(item, BaseException):
            raise item
        return ChatResult(generations=[ChatGeneration(message=item)])

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"21C and sunny in {city} ({OUTPUT_CANARY})"


def get_alerts(region: str) -> str:
    """Weather alerts for a region."""
    raise ToolException(f"alert feed down for {region}")


def get_forecast(city: str, day: str) -> str:
    """The forecast for a city and day."""
    raise ValueError(f"forecast service unavailable for {city} {day}")


TOOLS: dict[str, BaseTool] = {
    "get_weather": StructuredTool.from_function(get_weather),
    # A handled ToolException becomes a ToolMessage with status="error".
    "get_alerts": StructuredTool.from_function(get_alerts, handle_tool_error=True),
    # Any other exception propagates; the loop turns it into a ToolMessage itself.
    "get_forecast": StructuredTool.from_function(get_forecast),
}


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    """A tool call as a model returns it."""
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def usage(inp: int, out: int) -> dict[str, Any]:
    """LangChain usage metadata."""
    return {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out}


def script() -> list[Any]:
    """Two user turns: two parallel tool calls, a handled tool error, a rate limit, a crash."""
    return [
        AIMessage(
            "",
            tool_calls=[
                call("get_weather", "call_1", city=f"Lisbon {ARGS_CANARY}"),
                call("get_weather", "call_2", city="Porto"),
            ],
            usage_metadata=usage(40, 12),
            response_metadata={"finish_reason": "tool_calls", "model_name": "scripted-1-0611"},
        ),
        AIMessage("", tool_calls=[call("get_alerts", "call_3", region="Lisbon")]),
        AIMessage(
            "Sunny and 21C in Lisbon and Porto.",
            usage_metadata=usage(90, 9),
            response_metadata={"finish_reason": "stop"},
        ),
        RateLimitError("429 slow down"),
        AIMessage("", tool_calls=[call("get_forecast", "call_4", city="Lisbon", day="tomorrow")]),
        AIMessage("No forecast today, sorry.", response_metadata={"finish_reason": "stop"}),
    ]


def build_agent(model: BaseChatModel) -> Runnable[list[BaseMessage], list[BaseMessage]]:
    """The tool-calling loop: model, tools, model, ... until the model stops calling tools."""
    llm = model.bind_tools(list(TOOLS.values())).with_retry(
        retry_if_exception_type=(RateLimitError,),
        stop_after_attempt=2,
        wait_exponential_jitter=False,
    )

    def weather_agent(
        history: list[BaseMessage], config: RunnableConfig, run_manager: CallbackManagerForChainRun
    ) -> list[BaseMessage]:
        history = list(history)
        while True:
            reply = llm.invoke(history, config)
            history.append(reply)
            if not isinstance(reply, AIMessage) or not reply.tool_calls:
                run_manager.on_agent_finish(AgentFinish({"output": reply.content}, ""))
                return history
            for tool_call in reply.tool_calls:
                run_manager.on_agent_action(
                    AgentAction(tool_call["name"], tool_call["args"], "calling a tool")
                )
                try:
                    history.append(TOOLS[tool_call["name"]].invoke(tool_call, config))
                except ValueError as exc:
                    history.append(
                        ToolMessage(
                            f"error: {exc}",
                            tool_call_id=tool_call["id"] or "",
                            name=tool_call["name"],
                            status="error",
                        )
                    )

    # RunnableLambda passes run_manager to functions that take it; its overloads omit that form.
    return RunnableLambda(weather_agent, name="weather_agent")  # type: ignore[arg-type]


def converse(handler: LoopscribeCallbackHandler) -> list[BaseMessage]:
    """Two user turns through the agent, both recorded by ``handler``."""
    agent = build_agent(ScriptedChatModel(script=script()))
    history: list[BaseMessage] = [
        SystemMessage("You are a weather bot."),
        HumanMessage(f"Weather in Lisbon and Porto? {PROMPT_CANARY}"),
    ]
    history = agent.invoke(history, {"callbacks": [handler], "run_id": ROOT_RUN_ID})
    history.append(HumanMessage("And tomorrow?"))
    return agent.invoke(history, {"callbacks": [handler], "run_id": SECOND_RUN_ID})


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, list[Record], LoopscribeCallbackHandler]:
    """The conversation recorded into a real session file, and the records read back."""
    path = tmp_path / "langchain.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        final = converse(handler)
    assert final[-1].content == "No forecast today, sorry."
    assert handler.errors == 0
    return path, list(loopscribe.read(path)), handler


def text_of(message: Any) -> str:
    """The text blocks of a loopscribe message, or its string content."""
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") for part in content)


def of_type(records: Sequence[Record], kind: str) -> list[Record]:
    """The records of one type, in file order."""
    return [r for r in records if r.type == kind]


def execution(record: Record) -> Execution:
    """The record's execution, which these records always have."""
    assert record.execution is not None
    return record.execution


def execution_kind(record: Record) -> str | None:
    """The kind of the record's execution, if it has one."""
    return None if record.execution is None else record.execution.kind


def normalized(tree: str) -> str:
    """A span tree with LangChain run IDs replaced by ``*``."""
    return _UUID.sub("*", tree)


def span_text(span: ReadableSpan) -> str:
    """Everything a span carries that a backend would show, as one string."""
    parts = [span.name, repr(dict(span.attributes or {}))]
    parts += [e.name + repr(dict(e.attributes or {})) for e in span.events]
    parts.append(repr(span.status.description))
    return "\n".join(parts)


# -- the tests ---------------------------------------------------------------------------


def test_records_requests_responses_and_tool_results_with_bodies(
    recorded: tuple[Path, list[Record], LoopscribeCallbackHandler],
) -> None:
    """Every model request, response and tool result is in the file, with its body."""
    path, records, _ = recorded
    text = path.read_text()
    assert PROMPT_CANARY in text
    assert ARGS_CANARY in text
    assert OUTPUT_CANARY in text
    assert SECRET not in text

    requests = of_type(records, "model_request")
    assert len(requests) == 6  # five model calls, one of them retried
    first = requests[0].data
    assert [m.role for m in first["messages"]] == ["system", "user"]
    assert PROMPT_CANARY in first["messages"][1].content
    assert [t["function"]["name"] for t in first["tools"]] == list(TOOLS)
    assert first["model"] == "scripted-1"
    assert first["config"]["temperature"] == 0.1
    assert "api_key" not in first["config"]
    last = requests[-1].data["messages"]
    assert [m.role for m in last] == [
        *("system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant"),
        *("user", "assistant", "tool"),
    ]

    ends = of_type(records, "model_exec_end")
    assert ends[0].data["usage"] == Usage(40, 12)
    assert ends[0].data["model"] == "scripted-1-0611"
    assert ends[0].data["stop_reason"] == "tool_calls"
    assert [c.id for c in ends[0].data["message"].tool_calls] == ["call_1", "call_2"]
    assert ends[3].data["error"] == {"type": "RateLimitError", "message": "429 slow down"}
    assert ends[-1].data["message"].text == "No forecast today, sorry."

    starts = {execution(r).id: r.data for r in of_type(records, "tool_exec_start")}
    assert starts["call_1"] == {
        "tool": "get_weather",
        "args": {"city": f"Lisbon {ARGS_CANARY}"},
        "tool_type": "function",
        "description": starts["call_1"]["description"],
        "lc_run_id": starts["call_1"]["lc_run_id"],  # LangChain's run_id, for LangSmith
    }
    assert uuid.UUID(starts["call_1"]["lc_run_id"])
    tool_ends = {execution(r).id: r.data for r in of_type(records, "tool_exec_end")}
    assert OUTPUT_CANARY in tool_ends["call_1"]["result"].content[0].text
    assert tool_ends["call_1"]["is_error"] is False
    assert tool_ends["call_3"]["is_error"] is True  # handled ToolException
    assert tool_ends["call_3"]["result"].is_error
    assert tool_ends["call_4"]["error"]["type"] == "ValueError"  # raised into the loop


def test_committed_messages_are_written_once_each(
    recorded: tuple[Path, list[Record], LoopscribeCallbackHandler],
) -> None:
    """User input, assistant replies and tool results each get one message_end."""
    _, records, _ = recorded
    committed = [
        (r.data["message"].role, None if r.execution is None else r.execution.kind)
        for r in of_type(records, "message_end")
    ]
    assert committed == [
        ("system", None),
        ("user", None),
        ("assistant", "model"),
        ("tool", "tool"),
        ("tool", "tool"),
        ("assistant", "model"),
        ("tool", "tool"),
        ("assistant", "model"),
        ("user", None),  # the second turn's question, first seen in a request
        ("assistant", "model"),
        ("tool", None),  # made by the loop after the tool raised
        ("assistant", "model"),
    ]
    messages = [to_langchain(r.data["message"]) for r in of_type(records, "message_end")]
    assert isinstance(messages[1], HumanMessage)
    assert PROMPT_CANARY in str(messages[1].content)
    assert isinstance(messages[3], ToolMessage)
    assert messages[3].tool_call_id == "call_1"


def test_a_repeated_user_message_is_committed_again(tmp_path: Path) -> None:
    """Saying "ok" twice gives two user message_end records, not one."""
    model = ScriptedChatModel(script=[AIMessage("Sure?"), AIMessage("Done.")])
    path = tmp_path / "ok.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        config: RunnableConfig = {"callbacks": [LoopscribeCallbackHandler(run)]}
        history: list[BaseMessage] = [HumanMessage("ok")]
        history.append(model.invoke(history, config))
        history.append(HumanMessage("ok"))
        model.invoke(history, config)
    committed = [
        (r.data["message"].role, text_of(r.data["message"]))
        for r in of_type(list(loopscribe.read(path)), "message_end")
    ]
    assert committed == [
        ("user", "ok"),
        ("assistant", "Sure?"),
        ("user", "ok"),
        ("assistant", "Done."),
    ]


def test_executions_nest_as_langchain_nested_its_runs(
    recorded: tuple[Path, list[Record], LoopscribeCallbackHandler],
) -> None:
    """Agents are the root runs, models sit in with_retry chains, tools under the agent."""
    _, records, _ = recorded
    agents = [execution(r) for r in of_type(records, "agent_start") if execution(r).kind == "agent"]
    assert [a.id for a in agents] == ["weather_agent_1", "weather_agent_2"]
    assert all(a.parent_id is None for a in agents)
    assert of_type(records, "agent_start")[0].data["agent"] == "weather_agent"

    chains = {execution(r).id: execution(r) for r in records if execution_kind(r) == "chain"}
    models = [execution(r) for r in of_type(records, "model_exec_start")]
    assert len(models) == 6
    for model in models:
        assert chains[model.parent_id or ""].parent_id in {a.id for a in agents}
    tools = {execution(r).id: execution(r) for r in of_type(records, "tool_exec_start")}
    assert {k: v.parent_id for k, v in tools.items()} == {
        "call_1": "weather_agent_1",
        "call_2": "weather_agent_1",
        "call_3": "weather_agent_1",
        "call_4": "weather_agent_2",
    }
    assert all(t.kind == "tool" and t.attempt == 1 for t in tools.values())

    # The rate-limited call and its retry are one execution, attempts 1 and 2.
    assert models[3].id == models[4].id
    assert (models[3].attempt, models[4].attempt) == (1, 2)
    assert models[3].parent_id == models[4].parent_id
    (retry,) = of_type(records, "retry_scheduled")
    assert retry.execution == models[3]
    assert retry.data == {
        "next_attempt": 2,
        "error": {"type": "RateLimitError", "message": "429 slow down"},
    }

    actions = of_type(records, "agent_action")
    assert [a.data["tool"] for a in actions] == [
        *("get_weather", "get_weather", "get_alerts", "get_forecast")
    ]
    assert {execution(a).id for a in actions} == {"weather_agent_1", "weather_agent_2"}
    finishes = of_type(records, "agent_finish")
    assert finishes[-1].data["return_values"] == {"output": "No forecast today, sorry."}


EXPECTED_TREE = """\
invoke_agent weather_agent
  invoke_agent weather_agent
    ScriptedChatModel
      chat scripted-1
    execute_tool get_weather
    execute_tool get_weather
    ScriptedChatModel
      chat scripted-1
    execute_tool get_alerts
    ScriptedChatModel
      chat scripted-1
  invoke_agent weather_agent
    ScriptedChatModel
      chat scripted-1
      chat scripted-1
    execute_tool get_forecast
    ScriptedChatModel
      chat scripted-1"""


def test_replayed_spans_nest_and_carry_no_bodies(
    recorded: tuple[Path, list[Record], LoopscribeCallbackHandler],
) -> None:
    """Replay gives one span per model attempt and tool call, right parents, no canaries."""
    path, _, _ = recorded
    captured = captured_spans()
    replay(path, captured.processor)
    spans = captured.spans
    assert normalized(span_tree(spans)) == EXPECTED_TREE
    assert len(captured.named("chat scripted-1")) == 6
    assert len([s for s in spans if s.name.startswith("execute_tool")]) == 4

    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    for span in spans:
        attrs = span.attributes or {}
        if span.name.startswith("execute_tool"):
            parent = by_id[span.parent.span_id] if span.parent else None
            assert parent is not None
            assert parent.name == "invoke_agent weather_agent"
            assert (parent.attributes or {})["loopscribe.execution.kind"] == "agent"
        for canary in CANARIES:
            assert canary not in span_text(span), (canary, span.name)
        assert attrs.get("loopscribe.incomplete") is None, span.name
    first_chat = captured.named("chat scripted-1")[0].attributes or {}
    assert first_chat["gen_ai.usage.input_tokens"] == 40
    assert first_chat["gen_ai.response.model"] == "scripted-1-0611"
    # LangChain derives ls_provider from the class name: that is no provider name, so the
    # span says the conventions' "other" (every inference span names a provider).
    assert first_chat["gen_ai.provider.name"] == "_OTHER"
    tool_calls = {
        str((s.attributes or {})["gen_ai.tool.call.id"]): s
        for s in spans
        if s.name.startswith("execute_tool")
    }
    assert sorted(tool_calls) == ["call_1", "call_2", "call_3", "call_4"]
    assert tool_calls["call_4"].status.is_ok is False
    assert (tool_calls["call_4"].attributes or {})["error.type"] == "ValueError"
    assert (tool_calls["call_3"].attributes or {})["error.type"] == "_OTHER"


def test_live_bridge_emits_the_replayed_spans(tmp_path: Path) -> None:
    """A live SpanBridge on the session emits exactly what replay emits later."""
    path = tmp_path / "live.jsonl"
    live = captured_spans()
    bridge = SpanBridge(live.processor, file_uri=path)
    with Session.create(path, observers=[bridge]) as session, session.begin_run() as run:
        converse(LoopscribeCallbackHandler(run))
    later = captured_spans()
    replay(path, later.processor)

    def key(span: ReadableSpan) -> tuple[Any, ...]:
        assert span.context is not None
        parent = span.parent.span_id if span.parent else None
        return (span.name, span.context.span_id, parent, span.start_time, span.end_time)

    assert sorted(map(key, live.spans)) == sorted(map(key, later.spans))
    assert normalized(span_tree(live.spans)) == EXPECTED_TREE


class Opaque:
    """An object no codec knows."""


@pytest.mark.parametrize("value", [Opaque(), {"$ls": "assistant", "text": "not typed"}])
def test_values_without_json_form_become_diagnostics(tmp_path: Path, value: object) -> None:
    """Tool output with no JSON form is diagnosed, one using the codec's key kept; never sticky."""

    def unrecordable() -> object:
        """Return something the session cannot hold as it is."""
        return value

    tool = StructuredTool.from_function(unrecordable)
    message = AIMessage("hi", additional_kwargs={"$ls": "user"})
    path = tmp_path / "unrecordable.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        tool.invoke({}, {"callbacks": [handler]})
        ScriptedChatModel(script=[message]).invoke("hi", {"callbacks": [handler]})
        assert session.error is None
    assert handler.errors == 0
    records = list(loopscribe.read(path))
    (end,) = of_type(records, "tool_exec_end")
    if isinstance(value, dict):
        assert end.data["result"] == value
    else:
        assert "snapshot_error" in end.data["result"]
    (reply,) = of_type(records, "model_exec_end")
    assert reply.data["message"]["content"] == "hi"
    assert reply.data["message"]["additional_kwargs"] == {"$ls": "user"}


def test_async_agent_with_parallel_tools(tmp_path: Path) -> None:
    """ainvoke with tools run concurrently records the same nesting, each call start before end."""
    model = ScriptedChatModel(script=script()[:3])
    llm = model.bind_tools(list(TOOLS.values()))

    async def weather_agent(
        history: list[BaseMessage],
        config: RunnableConfig,
    ) -> list[BaseMessage]:
        history = list(history)
        while True:
            reply = await llm.ainvoke(history, config)
            history.append(reply)
            if not reply.tool_calls:
                return history
            results = await asyncio.gather(
                *(TOOLS[c["name"]].ainvoke(c, config) for c in reply.tool_calls)
            )
            history.extend(results)

    agent = RunnableLambda(weather_agent, name="weather_agent")
    path = tmp_path / "async.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        asyncio.run(agent.ainvoke([HumanMessage("Weather?")], {"callbacks": [handler]}))
    assert handler.errors == 0
    records = list(loopscribe.read(path))
    tools = {execution(r).id: execution(r) for r in of_type(records, "tool_exec_start")}
    assert sorted(tools) == ["call_1", "call_2", "call_3"]
    (agent_ex,) = [execution(r) for r in of_type(records, "agent_start")]
    assert {t.parent_id for t in tools.values()} == {agent_ex.id}
    opened: set[tuple[str, int]] = set()
    for record in records:
        if record.type in ("tool_exec_start", "model_exec_start"):
            opened.add((execution(record).id, execution(record).attempt))
        if record.type in ("tool_exec_end", "model_exec_end"):
            opened.remove((execution(record).id, execution(record).attempt))
    assert not opened
    captured = captured_spans()
    replay(path, captured.processor)
    assert normalized(span_tree(captured.spans)) == (
        "invoke_agent weather_agent\n  invoke_agent weather_agent\n    chat scripted-1\n"
        "    execute_tool get_weather\n    execute_tool get_weather\n"
        "    chat scripted-1\n    execute_tool get_alerts\n    chat scripted-1"
    )


class FlakyProviderModel(ScriptedChatModel):
    """A provider that retries inside one model run with tenacity, as community integrations do."""

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        retrying = create_base_retry_decorator(
            [RateLimitError], max_retries=3, run_manager=run_manager
        )
        generate = retrying(super()._generate)
        # Tenacity would wait 4 s before the retry; the test does not.
        generate.retry.sleep = lambda _seconds: None
        result: ChatResult = generate(messages, stop, run_manager, **kwargs)
        return result


def test_on_retry_ends_the_attempt_and_repeats_the_request(tmp_path: Path) -> None:
    """on_retry closes the failed attempt and starts the next one with the same request."""
    model = FlakyProviderModel(script=[RateLimitError("429"), AIMessage("hello")])
    path = tmp_path / "retry.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        assert model.invoke([HumanMessage("hi")], {"callbacks": [handler]}).content == "hello"
    assert handler.errors == 0
    records = [r for r in loopscribe.read(path) if r.execution is not None]
    assert [(r.type, execution(r).attempt) for r in records] == [
        ("model_exec_start", 1),
        ("model_request", 1),
        ("model_exec_end", 1),
        ("retry_scheduled", 1),
        ("model_exec_start", 2),
        ("model_request", 2),
        ("model_exec_end", 2),
        ("message_end", 2),
    ]
    assert records[3].data["delay_ms"] == 4000.0
    assert records[3].data["error"]["type"] == "RateLimitError"
    assert records[5].data["messages"] == records[1].data["messages"]
    captured = captured_spans()
    replay(path, captured.processor)
    assert span_tree(captured.spans) == "invoke_agent\n  chat scripted-1\n  chat scripted-1"


def test_a_rerun_tool_call_is_its_next_attempt(tmp_path: Path) -> None:
    """Running the same tool call again records attempt 2 of the same execution."""
    path = tmp_path / "rerun.jsonl"
    weather = TOOLS["get_weather"]
    with Session.create(path) as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        for _ in range(2):
            weather.invoke(call("get_weather", "call_7", city="Faro"), {"callbacks": [handler]})
        weather.invoke({"city": "Faro"}, {"callbacks": [handler]})
    starts = [execution(r) for r in of_type(list(loopscribe.read(path)), "tool_exec_start")]
    assert [(s.id, s.attempt) for s in starts[:2]] == [("call_7", 1), ("call_7", 2)]
    assert starts[2].attempt == 1
    assert uuid.UUID(starts[2].id)  # no tool call: the LangChain run_id


class BrokenStreamModel(ScriptedChatModel):
    """A streaming model whose connection drops after the first tokens."""

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        yield ChatGenerationChunk(message=AIMessageChunk(content="Partly sun"))
        raise ConnectionError("stream reset")


def test_failures_end_with_error_partial_content_and_error_status(tmp_path: Path) -> None:
    """A broken stream keeps its partial message; a failing chain ends its agent with the error."""

    def failing_step(text: str) -> str:
        raise KeyError(text)

    chain = RunnableLambda(failing_step, name="failing_step")
    legacy = FakeListLLM(responses=["plain completion"])
    path = tmp_path / "failures.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        with pytest.raises(ConnectionError):
            for _chunk in BrokenStreamModel(script=[]).stream("hi", {"callbacks": [handler]}):
                pass
        assert legacy.invoke("complete me", {"callbacks": [handler]}) == "plain completion"
        with pytest.raises(KeyError):
            chain.invoke("boom", {"callbacks": [handler]})
    assert handler.errors == 0
    records = list(loopscribe.read(path))
    broken, completion = of_type(records, "model_exec_end")
    assert broken.data["error"] == {"type": "ConnectionError", "message": "stream reset"}
    assert broken.data["partial_message"].text == "Partly sun"
    assert of_type(records, "model_request")[1].data["messages"] == [UserMessage("complete me")]
    assert completion.data["message"] == AssistantMessage((TextContent("plain completion"),))
    (agent_end,) = of_type(records, "agent_end")
    assert agent_end.data["error"]["type"] == "KeyError"

    captured = captured_spans()
    replay(path, captured.processor)
    assert normalized(span_tree(captured.spans)) == (
        "invoke_agent failing_step\n"
        "  chat scripted-1\n"
        "  chat FakeListLLM\n"
        "  invoke_agent failing_step"
    )
    chat, _, agent, root = captured.spans
    assert not chat.status.is_ok
    assert (chat.attributes or {})["error.type"] == "ConnectionError"
    assert (agent.attributes or {})["error.type"] == "KeyError"
    assert not root.status.is_ok  # the top-level agent failed, so the run did


def test_lowered_messages_round_trip() -> None:
    """lower_message keeps role, type and non-empty fields; to_langchain rebuilds the message."""
    message = AIMessage(
        "hi", tool_calls=[call("get_weather", "call_9", city="Faro")], usage_metadata=usage(1, 2)
    )
    lowered = lower_message(message)
    assert list(lowered)[:2] == ["role", "content"]
    assert lowered["role"] == "assistant"
    assert "additional_kwargs" not in lowered
    assert to_langchain(lowered) == message


ROUND_TRIP: list[BaseMessage] = [
    SystemMessage("You are terse."),
    HumanMessage("Weather in Lisbon?"),
    HumanMessage(
        [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "base64": "iVBORw0K", "mime_type": "image/png"},
            {"type": "image", "url": "https://example.com/cloud.png", "mime_type": "image/png"},
            {"type": "file", "file_id": "file-123", "mime_type": "application/pdf"},
        ]
    ),
    AIMessage(
        [
            {"type": "thinking", "thinking": "Lisbon is coastal.", "signature": "sig=="},
            {"type": "text", "text": "Checking."},
        ],
        tool_calls=[call("get_weather", "call_1", city="Lisbon")],
        response_metadata={"model_name": "m-1", "finish_reason": "tool_calls", "id": "resp_1"},
        usage_metadata={
            "input_tokens": 10,
            "output_tokens": 4,
            "total_tokens": 14,
            "input_token_details": {"cache_read": 6, "cache_creation": 2},
            "output_token_details": {"reasoning": 3},
        },
    ),
    ToolMessage("sunny", tool_call_id="call_1", name="get_weather", artifact={"raw": 1}),
    ToolMessage("boom", tool_call_id="call_2", name="get_alerts", status="error"),
]


@pytest.mark.parametrize("message", ROUND_TRIP, ids=lambda m: m.type)
def test_messages_convert_to_loopscribe_types_and_back(message: BaseMessage) -> None:
    """from_langchain gives a loopscribe type; to_langchain rebuilds an equal message."""
    converted = from_langchain(message)
    assert not isinstance(converted, Mapping), converted
    back = to_langchain(converted)
    assert type(back) is type(message)
    assert back.content == message.content
    if isinstance(message, AIMessage):
        assert isinstance(back, AIMessage)
        assert back.tool_calls == message.tool_calls
        assert back.usage_metadata == message.usage_metadata
        assert back.response_metadata == message.response_metadata
    if isinstance(message, ToolMessage):
        assert isinstance(back, ToolMessage)
        assert (back.tool_call_id, back.name, back.status, back.artifact) == (
            message.tool_call_id,
            message.name,
            message.status,
            message.artifact,
        )


def test_usage_and_response_fields_land_on_the_assistant_message() -> None:
    """Cached, cache-creation and reasoning tokens, response model, id and finish reason."""
    converted = from_langchain(ROUND_TRIP[3])
    assert isinstance(converted, AssistantMessage)
    assert converted.usage == Usage(
        10, 4, cache_read_tokens=6, cache_write_tokens=2, reasoning_tokens=3
    )
    assert (converted.model, converted.stop_reason, converted.response_id) == (
        "m-1",
        "tool_calls",
        "resp_1",
    )
    assert [type(c).__name__ for c in converted.content] == [
        "ThinkingContent",
        "TextContent",
        "ToolCall",
    ]


def test_what_loopscribe_has_no_type_for_stays_the_original() -> None:
    """Citations and provider fields keep the framework's own message, rebuildable."""
    cited = AIMessage([{"type": "text", "text": "hi", "annotations": [{"url": "u"}]}])
    provider = AIMessage("hi", additional_kwargs={"audio": {"id": "a1"}})
    for message in (cited, provider):
        converted = from_langchain(message)
        assert isinstance(converted, Mapping)
        assert to_langchain(converted) == message
