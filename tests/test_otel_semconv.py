"""The GenAI semantic conventions on loopscribe spans, and what Langfuse ingestion reads."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from loopscribe import (
    AssistantMessage,
    Execution,
    Run,
    Session,
    SystemMessage,
    TextContent,
    ToolCall,
    Usage,
    UserMessage,
    events,
)
from loopscribe._fields import provider_name, request_params
from loopscribe.otel import SpanBridge, replay, to_file_uri
from loopscribe.testing import captured_spans

TOOLS = [
    {
        "type": "function",
        "function": {"name": "grep", "description": "Search files", "parameters": {}},
    }
]


def scenario(run: Run) -> None:
    """An agent delegating to a sub-agent, a graph node, a streamed call with everything known."""
    agent = Execution("agent_1", "agent")
    run.record(events.agent_start(agent, "planner"))
    node = Execution("node_1", "chain", parent_id="agent_1")
    run.record(events.agent_start(node, "retrieve_docs"))
    run.record(events.agent_end(node, "retrieve_docs"))
    model = Execution("model_1", "model", parent_id="agent_1")
    run.record(
        events.model_exec_start(
            model,
            "gpt-4.1",
            provider="OpenAIChatModel",
            stream=True,
            server_address="api.openai.com",
            server_port=443,
        )
    )
    run.record(
        events.model_request(
            model,
            [SystemMessage("be brief"), UserMessage("find TODOs")],
            TOOLS,
            {"temperature": 0.2, "max_tokens": 256, "top_p": 0.9, "stop": ["END"], "seed": 7},
        )
    )
    answer = AssistantMessage(
        content=(TextContent("calling grep"), ToolCall("call_1", "grep", {"q": "TODO"})),
        model="gpt-4.1-2026-04-14",
        provider="openai",
        usage=Usage(
            input_tokens=120,
            output_tokens=30,
            cache_read_tokens=100,
            cache_write_tokens=5,
            reasoning_tokens=12,
        ),
        stop_reason="tool_calls",
        response_id="chatcmpl-42",
    )
    run.record(events.model_exec_end(model, message=answer))
    tool = Execution("call_1", "tool", parent_id="agent_1")
    run.record(
        events.tool_exec_start(
            tool, "grep", {"q": "TODO"}, tool_type="function", description="Search files"
        )
    )
    run.record(events.tool_exec_end(tool, "grep", result="3 hits"))
    helper = Execution("agent_2", "agent", parent_id="call_1")
    run.record(events.agent_start(helper, "summarizer"))
    inner = Execution("model_2", "model", parent_id="agent_2")
    run.record(events.model_exec_start(inner, "claude-haiku", provider="anthropic"))
    run.record(events.model_exec_end(inner, model="claude-haiku"))
    run.record(events.agent_end(helper, "summarizer"))
    guard = Execution("guard_1", "guardrail", parent_id="agent_1")
    run.record(events.agent_start(guard, "pii_check"))
    run.record(events.agent_end(guard, "pii_check"))
    run.record(events.agent_end(agent, "planner"))


@pytest.fixture
def spans(session_path: Path) -> dict[str, ReadableSpan]:
    captured = captured_spans()
    with (
        Session.create(session_path, observers=[SpanBridge(captured.processor)]) as session,
        session.begin_run(parent=None) as run,
    ):
        scenario(run)
    replayed = captured_spans()
    replay(session_path, replayed.processor)
    assert [s.to_json() for s in replayed.spans] == [s.to_json() for s in captured.spans]
    out = {}
    for span in captured.spans:
        attrs = span.attributes or {}
        out[str(attrs.get("loopscribe.execution.id", "run"))] = span
    return out


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_chat_span_carries_every_known_convention(
    spans: dict[str, ReadableSpan], session_path: Path
) -> None:
    """Model, provider, response, usage, parameters, stream, server and the references."""
    chat = spans["model_1"]
    assert chat.name == "chat gpt-4.1"
    attrs = attrs_of(chat)
    uri = to_file_uri(session_path)
    expected = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4.1",
        "gen_ai.response.model": "gpt-4.1-2026-04-14",
        "gen_ai.response.id": "chatcmpl-42",
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.request.stream": True,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 256,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.stop_sequences": ("END",),
        "gen_ai.request.seed": 7,
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "gen_ai.usage.cache_read.input_tokens": 100,
        "gen_ai.usage.cache_creation.input_tokens": 5,
        "gen_ai.usage.reasoning.output_tokens": 12,
        "server.address": "api.openai.com",
        "server.port": 443,
    }
    assert {k: attrs.get(k) for k in expected} == expected
    request_ref = attrs["gen_ai.input.messages_ref"]
    assert request_ref.startswith(uri + "#seq=")
    assert attrs["gen_ai.system_instructions_ref"] == request_ref
    assert attrs["gen_ai.tool.definitions_ref"] == request_ref
    assert attrs["gen_ai.output.messages_ref"].startswith(uri + "#seq=")
    assert "openinference.span.kind" not in attrs  # a GenAI operation types itself


def test_agents_nested_and_as_tools_are_invoke_agent(spans: dict[str, ReadableSpan]) -> None:
    """Every agent execution is invoke_agent {name} with its first call's provider and model."""
    planner, helper = attrs_of(spans["agent_1"]), attrs_of(spans["agent_2"])
    assert spans["agent_1"].name == "invoke_agent planner"
    assert spans["agent_2"].name == "invoke_agent summarizer"
    assert planner["gen_ai.operation.name"] == helper["gen_ai.operation.name"] == "invoke_agent"
    assert (planner["gen_ai.agent.name"], planner["gen_ai.provider.name"]) == ("planner", "openai")
    assert (helper["gen_ai.agent.name"], helper["gen_ai.provider.name"]) == (
        "summarizer",
        "anthropic",
    )
    assert planner["gen_ai.request.model"] == "gpt-4.1"
    tool_span = spans["call_1"]
    assert spans["agent_2"].parent is not None
    assert tool_span.context is not None
    assert spans["agent_2"].parent.span_id == tool_span.context.span_id  # agent used as a tool
    run = attrs_of(spans["run"])
    assert (run["gen_ai.operation.name"], run["gen_ai.provider.name"]) == ("invoke_agent", "openai")


def test_tool_span_has_type_and_description(spans: dict[str, ReadableSpan]) -> None:
    tool = attrs_of(spans["call_1"])
    assert spans["call_1"].name == "execute_tool grep"
    assert tool["gen_ai.operation.name"] == "execute_tool"
    assert (tool["gen_ai.tool.type"], tool["gen_ai.tool.description"]) == (
        "function",
        "Search files",
    )
    assert tool["gen_ai.tool.call.id"] == "call_1"


def test_other_spans_are_named_by_node_and_typed_for_backends(
    spans: dict[str, ReadableSpan],
) -> None:
    """A graph node or chain: its name, CHAIN; a guardrail: GUARDRAIL; no GenAI operation."""
    node, guard = attrs_of(spans["node_1"]), attrs_of(spans["guard_1"])
    assert spans["node_1"].name == "retrieve_docs"
    assert node["openinference.span.kind"] == "CHAIN"
    assert spans["guard_1"].name == "pii_check"
    assert guard["openinference.span.kind"] == "GUARDRAIL"
    for attrs in (node, guard):
        assert "gen_ai.operation.name" not in attrs
        assert "gen_ai.agent.name" not in attrs


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("openai", "openai"),
        ("OpenAIChatModel", "openai"),
        ("openai.responses", "openai"),
        ("ChatOpenAI", "openai"),
        ("AzureChatOpenAI", "azure.ai.openai"),
        ("anthropic", "anthropic"),
        ("claude_code", "anthropic"),
        ("bedrock", "aws.bedrock"),
        ("google-gla", "gcp.gemini"),
        ("google-vertex", "gcp.vertex_ai"),
        ("MistralModel", "mistral_ai"),
        ("xai", "x_ai"),
        ("MyLabModel", "my_lab"),
        ("", None),
        (None, None),
    ],
)
def test_provider_names_are_the_well_known_values(given: Any, expected: str | None) -> None:
    assert provider_name(given) == expected


def test_request_params_read_every_providers_spelling() -> None:
    gemini = request_params({"max_output_tokens": 10, "candidate_count": 2, "stop_sequences": "x"})
    assert gemini is not None
    assert (gemini.max_tokens, gemini.choice_count, gemini.stop_sequences) == (10, 2, ("x",))
    assert request_params({"temperature": True, "top_p": float("nan")}) is None
    assert request_params(None) is None


# -- Langfuse -----------------------------------------------------------------------
#
# Langfuse's OTel ingestion (packages/shared/src/server/otel in langfuse/langfuse)
# types an observation by the first of these that applies, in priority order:
# ``langfuse.observation.type``; ``openinference.span.kind`` (LLM -> GENERATION,
# AGENT, TOOL, CHAIN, GUARDRAIL, RETRIEVER, EMBEDDING, EVALUATOR);
# ``gen_ai.operation.name`` (chat/generate_content/text_completion -> GENERATION,
# invoke_agent/create_agent -> AGENT, execute_tool -> TOOL, embeddings ->
# EMBEDDING); ``gen_ai.tool.name`` or ``gen_ai.tool.call.id`` -> TOOL; a model
# attribute -> GENERATION; otherwise SPAN. The model is ``gen_ai.request.model``
# or ``gen_ai.response.model``; usage keys come from ``gen_ai.usage.*`` with
# ``input`` net of the cache buckets; the session from ``session.id``.

_OPENINFERENCE = {
    "LLM": "GENERATION",
    "AGENT": "AGENT",
    "TOOL": "TOOL",
    "CHAIN": "CHAIN",
    "GUARDRAIL": "GUARDRAIL",
    "RETRIEVER": "RETRIEVER",
    "EMBEDDING": "EMBEDDING",
    "EVALUATOR": "EVALUATOR",
}
_GENAI = {
    "chat": "GENERATION",
    "text_completion": "GENERATION",
    "generate_content": "GENERATION",
    "embeddings": "EMBEDDING",
    "invoke_agent": "AGENT",
    "create_agent": "AGENT",
    "execute_tool": "TOOL",
}


def langfuse_observation(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """What Langfuse's documented OTel mapping makes of a span's attributes."""
    kind = "SPAN"
    if attrs.get("openinference.span.kind") in _OPENINFERENCE:
        kind = _OPENINFERENCE[attrs["openinference.span.kind"]]
    elif attrs.get("gen_ai.operation.name") in _GENAI:
        kind = _GENAI[attrs["gen_ai.operation.name"]]
    elif attrs.get("gen_ai.tool.name") or attrs.get("gen_ai.tool.call.id"):
        kind = "TOOL"
    elif attrs.get("gen_ai.request.model") or attrs.get("gen_ai.response.model"):
        kind = "GENERATION"
    usage: dict[str, int] = {}
    if "gen_ai.usage.input_tokens" in attrs:
        cached = attrs.get("gen_ai.usage.cache_read.input_tokens", 0)
        created = attrs.get("gen_ai.usage.cache_creation.input_tokens", 0)
        usage["input"] = attrs["gen_ai.usage.input_tokens"] - cached - created
        if cached:
            usage["input_cached_tokens"] = cached
        if created:
            usage["input_cache_creation"] = created
    if "gen_ai.usage.output_tokens" in attrs:
        usage["output"] = attrs["gen_ai.usage.output_tokens"]
    return {
        "type": kind,
        "model": attrs.get("gen_ai.request.model") or attrs.get("gen_ai.response.model"),
        "usage": usage,
        "sessionId": attrs.get("langfuse.session.id") or attrs.get("session.id"),
        "modelParameters": {
            k.removeprefix("gen_ai.request."): v
            for k, v in attrs.items()
            if k.startswith("gen_ai.request.") and k != "gen_ai.request.model"
        },
    }


def test_langfuse_types_every_span_and_reads_model_usage_and_session(
    spans: dict[str, ReadableSpan], session_path: Path
) -> None:
    """GENERATION / AGENT / TOOL / CHAIN / GUARDRAIL, never the untyped SPAN; one session."""
    seen = {key: langfuse_observation(attrs_of(span)) for key, span in spans.items()}
    types = {key: obs["type"] for key, obs in seen.items()}
    assert types == {
        "run": "AGENT",
        "agent_1": "AGENT",
        "agent_2": "AGENT",
        "node_1": "CHAIN",
        "model_1": "GENERATION",
        "model_2": "GENERATION",
        "call_1": "TOOL",
        "guard_1": "GUARDRAIL",
    }
    chat = seen["model_1"]
    assert chat["model"] == "gpt-4.1"
    assert chat["usage"] == {
        "input": 15,
        "input_cached_tokens": 100,
        "input_cache_creation": 5,
        "output": 30,
    }
    assert chat["modelParameters"]["temperature"] == 0.2
    assert chat["modelParameters"]["max_tokens"] == 256
    assert len({obs["sessionId"] for obs in seen.values()}) == 1
    assert None not in {obs["sessionId"] for obs in seen.values()}
