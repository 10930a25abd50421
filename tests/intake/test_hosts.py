"""Real instrumentations over real SDKs, their spans taken in: bodies in the file, none on the wire.

Each host runs its own instrumentation unchanged over a provider faked at
the transport (see ``_support``), with tool calls and streaming where the
host has them, and :func:`~._support.check` holds it to every promise.
"""

from __future__ import annotations

import asyncio
import json
import tomllib
import warnings
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from loopscribe import read
from loopscribe.intake import LoopscribeCompletionHook, OffloadingLogProcessor

from ..otlp_receiver import Received, http_receiver
from ._support import (
    ARGS,
    EMBEDDED,
    PROMPT,
    REPLY,
    RESULT,
    STREAMED,
    SYSTEM,
    TOOL_DOC,
    FakeOpenAI,
    check,
    conversation,
    host,
    session_files,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def receiver() -> Iterator[Received]:
    """An OTLP/HTTP receiver on 127.0.0.1 standing in for the host's trace backend."""
    with http_receiver() as received:
        yield received


def test_openinference_openai_chat_stream_tools_and_embeddings(
    tmp_path: Path,
    receiver: Received,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OpenInference's OpenAI instrumentation: chat, tool calls, streams and embeddings recorded."""
    from openinference.instrumentation.openai import OpenAIInstrumentor

    h = host(tmp_path, receiver)
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=h.provider)
    try:
        client = FakeOpenAI().client()
        conversation(client, stream=True)
        client.embeddings.create(model="text-embedding-3-small", input=EMBEDDED)
    finally:
        instrumentor.uninstrument()
    spans = check(
        h,
        capsys,
        monkeypatch,
        bodies=[SYSTEM, PROMPT, ARGS, RESULT, STREAMED, EMBEDDED, TOOL_DOC],
        recorded=4,
    )
    chat = spans[0].attributes or {}
    assert chat["openinference.span.kind"] == "LLM"
    assert {"gen_ai.input.messages_ref", "gen_ai.output.messages_ref"} <= set(chat)
    assert "llm.input_messages.0.message.content" not in chat


def _openllmetry() -> Any:
    """OpenLLMetry's OpenAI instrumentor (its import warns of a pydantic deprecation of its own)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import opentelemetry.instrumentation.openai.v1  # noqa: F401  (imported by instrument())
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    return OpenAIInstrumentor


def test_openllmetry_openai_chat_stream_and_tools(
    tmp_path: Path,
    receiver: Received,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OpenLLMetry's OpenAI instrumentation (content on): every body recorded, none sent."""
    OpenAIInstrumentor = _openllmetry()
    monkeypatch.setenv("TRACELOOP_TRACE_CONTENT", "true")
    h = host(tmp_path, receiver)
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=h.provider)
    try:
        conversation(FakeOpenAI().client(), stream=True)
    finally:
        instrumentor.uninstrument()
    check(
        h,
        capsys,
        monkeypatch,
        bodies=[SYSTEM, PROMPT, ARGS, RESULT, STREAMED, TOOL_DOC],
        recorded=3,
    )


def test_openllmetry_message_events_through_the_log_record_twin(
    tmp_path: Path,
    receiver: Received,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OpenLLMetry's per-message log events: recorded by the twin, the span given the references."""
    OpenAIInstrumentor = _openllmetry()
    monkeypatch.setenv("TRACELOOP_TRACE_CONTENT", "true")
    h = host(tmp_path, receiver)
    logs = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    logger_provider = LoggerProvider()
    twin = OffloadingLogProcessor(SimpleLogRecordProcessor(logs), tmp_path)
    logger_provider.add_log_record_processor(twin)
    instrumentor = OpenAIInstrumentor(use_attributes=False)
    instrumentor.instrument(tracer_provider=h.provider, logger_provider=logger_provider)
    try:
        conversation(FakeOpenAI().client(), stream=False)
    finally:
        instrumentor.uninstrument()
    assert twin.recorded == 2
    for record in logs.get_finished_logs():
        assert "CANARY-" not in json.dumps(record.log_record.body, default=str)
        assert "CANARY-" not in json.dumps(dict(record.log_record.attributes or {}), default=str)
    spans = check(h, capsys, monkeypatch, bodies=[SYSTEM, PROMPT, ARGS, RESULT, REPLY], recorded=2)
    assert all("gen_ai.output.messages_ref" in (s.attributes or {}) for s in spans)


def _langgraph_agent(fake: FakeOpenAI) -> Any:
    """A LangGraph agent (model node, tool node) whose chat model calls the real OpenAI client."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
    from langchain_core.messages.tool import ToolCall
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    client = fake.client()

    class OpenAIChat(BaseChatModel):
        tools: list[Any] = []  # noqa: RUF012  (a pydantic field, copied per instance)

        @property
        def _llm_type(self) -> str:
            return "openai-chat"

        def bind_tools(self, tools: Any, **_: Any) -> Any:
            return self.model_copy(update={"tools": [convert_to_openai_tool(t) for t in tools]})

        def _generate(self, messages: list[BaseMessage], *_: Any, **__: Any) -> ChatResult:
            kwargs: dict[str, Any] = {
                "model": "gpt-4o-mini",
                "messages": convert_to_openai_messages(messages),
            }
            if self.tools:
                kwargs["tools"] = self.tools
            response = client.chat.completions.create(**kwargs)
            message = response.choices[0].message
            calls = [
                ToolCall(name=c.function.name, args=json.loads(c.function.arguments), id=c.id)
                for c in message.tool_calls or ()
            ]
            reply = AIMessage(content=message.content or "", tool_calls=calls)
            return ChatResult(generations=[ChatGeneration(message=reply)])

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"{RESULT} in {city}"

    model = OpenAIChat().bind_tools([get_weather])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke([("system", SYSTEM), *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([get_weather]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    graph.add_edge("agent", END)
    return graph.compile()


def test_openinference_langchain_agent_with_tools(
    tmp_path: Path,
    receiver: Received,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OpenInference's LangChain instrumentation of a LangGraph agent: a session per session.id."""
    from openinference.instrumentation import using_session
    from openinference.instrumentation.langchain import LangChainInstrumentor

    h = host(tmp_path, receiver)
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=h.provider)
    try:
        graph = _langgraph_agent(FakeOpenAI())
        with using_session("conversation-42"):
            graph.invoke({"messages": [("user", PROMPT)]})
    finally:
        instrumentor.uninstrument()
    spans = check(
        h,
        capsys,
        monkeypatch,
        bodies=[SYSTEM, PROMPT, ARGS, RESULT, REPLY],
        recorded=len(h.original.get_finished_spans()),
    )
    files = session_files(tmp_path)
    assert len(files) == 1
    records = list(read(files[0], decode=False))
    assert records[0].data["metadata"]["conversation_id"] == "conversation-42"
    kinds = {r.execution.kind for r in records if r.execution is not None}
    assert {"model", "tool", "agent", "other"} <= kinds
    tool_span = next(
        s for s in spans if (s.attributes or {}).get("openinference.span.kind") == "TOOL"
    )
    tool_record = next(
        r for r in records if r.type == "tool_exec_start" and r.execution is not None
    )
    assert tool_record.execution.id == f"otel:{tool_span.context.span_id:016x}"  # type: ignore[union-attr]
    parent = tool_span.parent
    assert parent is not None
    assert tool_record.execution.parent_id == f"otel:{parent.span_id:016x}"  # type: ignore[union-attr]


def test_pydantic_ai_native_instrumentation_run_and_stream(
    tmp_path: Path,
    receiver: Received,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pydantic-ai's own instrumentation: agent, chat and tool spans, streamed or not."""
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    h = host(tmp_path, receiver)
    client = FakeOpenAI().async_client()
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, instructions=SYSTEM)
    agent.instrument = InstrumentationSettings(tracer_provider=h.provider)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"{RESULT} in {city}"

    async def runs() -> None:
        await agent.run(PROMPT)
        async with agent.run_stream(PROMPT) as run:
            async for _ in run.stream_text():
                pass
        await client.close()

    asyncio.run(runs())
    spans = check(
        h,
        capsys,
        monkeypatch,
        bodies=[SYSTEM, PROMPT, ARGS, RESULT, REPLY, STREAMED],
        recorded=len(h.original.get_finished_spans()),
    )
    conversations = {(s.attributes or {}).get("gen_ai.conversation.id") for s in spans}
    assert len(session_files(tmp_path)) == len(conversations) == 2
    for span in spans:
        assert "model_request_parameters" not in (span.attributes or {})


# -- the official instrumentations, through util-genai's completion hook ---------------------


def _entry_point() -> EntryPoint:
    """The completion hook entry point as pyproject.toml declares it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    group = "opentelemetry_genai_completion_hook"
    value = project["entry-points"][group]["loopscribe"]
    return EntryPoint(name="loopscribe", value=value, group=group)


@pytest.fixture
def hook_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The environment a user sets for the hook, with loopscribe's entry point findable.

    Entry points are read from installed metadata, which a source checkout
    may not have yet: util-genai's own loader is given the declared one.
    """
    from opentelemetry.util.genai import completion_hook

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK", "loopscribe")
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.setenv("LOOPSCRIBE_DIR", str(tmp_path))
    monkeypatch.setattr(completion_hook, "entry_points", lambda group: [_entry_point()])
    return tmp_path


def test_the_hook_loads_by_name_through_util_genai(hook_env: Path) -> None:
    """util-genai's loader finds the ``loopscribe`` hook and it is a CompletionHook."""
    from opentelemetry.util.genai.completion_hook import CompletionHook, load_completion_hook

    hook = load_completion_hook()
    assert isinstance(hook, CompletionHook)
    assert isinstance(hook._wrapped, LoopscribeCompletionHook)  # type: ignore[attr-defined]
    assert hook._wrapped.book.directory == hook_env  # type: ignore[attr-defined]


def test_util_genai_handler_with_the_hook(
    hook_env: Path,
    receiver: Received,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An instrumentation built on util-genai's handler: content to the hook, none on the span."""
    from opentelemetry.util.genai.completion_hook import load_completion_hook
    from opentelemetry.util.genai.handler import TelemetryHandler
    from opentelemetry.util.genai.types import (
        FunctionToolDefinition,
        InputMessage,
        OutputMessage,
        Text,
        ToolCallRequest,
    )

    h = host(hook_env, receiver, offload=False)
    handler = TelemetryHandler(tracer_provider=h.provider, completion_hook=load_completion_hook())
    assert handler.should_capture_content()
    with handler.inference("openai", request_model="gpt-4o-mini") as invocation:
        call: Any = invocation  # its type differs between util-genai releases
        call.input_messages = [InputMessage("user", [Text(PROMPT)])]
        call.system_instruction = [Text(SYSTEM)]
        call.tool_definitions = [FunctionToolDefinition("get_weather", "The weather.", {})]
        call.output_messages = [
            OutputMessage(
                "assistant",
                [ToolCallRequest({"city": ARGS}, "get_weather", "c1")],
                finish_reason="tool_calls",
            )
        ]
    spans = check(h, capsys, monkeypatch, bodies=[SYSTEM, PROMPT, ARGS], recorded=1)
    refs = spans[0].attributes or {}
    assert {
        "gen_ai.input.messages_ref",
        "gen_ai.output.messages_ref",
        "gen_ai.system_instructions_ref",
        "gen_ai.tool.definitions_ref",
    } <= set(refs)


def _official_openai() -> Any:
    """opentelemetry-instrumentation-openai-v2, as published (with the util-genai it needs)."""
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    return OpenAIInstrumentor()  # type: ignore[no-untyped-call]


def test_official_openai_instrumentation_with_the_hook(
    hook_env: Path,
    receiver: Received,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The official OpenAI instrumentation, hook on and capture off: chat, tools and streams."""
    h = host(hook_env, receiver, offload=False)
    instrumentor = _official_openai()
    instrumentor.instrument(tracer_provider=h.provider)
    try:
        conversation(FakeOpenAI().client(), stream=True)
    finally:
        instrumentor.uninstrument()
    spans = check(
        h, capsys, monkeypatch, bodies=[SYSTEM, PROMPT, ARGS, RESULT, STREAMED], recorded=3
    )
    for span in spans:
        assert "gen_ai.input.messages" not in (span.attributes or {})
        assert "gen_ai.input.messages_ref" in (span.attributes or {})
