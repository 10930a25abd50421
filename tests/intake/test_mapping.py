"""The conventions' mappings on their own: attributes and events in, loopscribe messages out.

The attribute shapes are the ones the real instrumentations emit (see
``test_hosts``), written out here so each rule is pinned by one test.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from loopscribe import (
    AssistantMessage,
    Execution,
    FileContent,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from loopscribe import events as ev
from loopscribe.intake._found import ABSENT, Found, unflatten
from loopscribe.intake._otel_genai import from_hook, read_log
from loopscribe.intake._records import (
    INPUT_MESSAGES_REF,
    OUTPUT_MESSAGES_REF,
    SYSTEM_INSTRUCTIONS_REF,
    TOOL_DEFINITIONS_REF,
    carries_content,
    collect,
    kind_of,
    labels,
    plan,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def event(name: str, **attributes: Any) -> Any:
    """A span event as the SDK holds one."""
    return SimpleNamespace(name=name, attributes=attributes)


# -- OpenTelemetry GenAI -------------------------------------------------------------------


def test_genai_messages_parts_become_loopscribe_messages() -> None:
    """Text, reasoning, tool calls, tool responses and media parts map to their types."""
    inputs = [
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "look"},
                {
                    "type": "uri",
                    "uri": "https://x/cat.png",
                    "mime_type": "image/png",
                    "modality": "image",
                },
                {"type": "blob", "content": "aGk=", "mime_type": "image/png", "modality": "image"},
                {"type": "file", "file_id": "file-1", "mime_type": None, "modality": "document"},
            ],
        },
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "think"},
                {"type": "tool_call", "id": "c1", "name": "f", "arguments": '{"a": 1}'},
            ],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "ok"}]},
    ]
    outputs = [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "done"}],
            "finish_reason": "stop",
        }
    ]
    found = collect(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps(outputs),
        },
        (),
    )
    assert found.inputs == [
        SystemMessage("be brief"),
        UserMessage(
            (
                TextContent("look"),
                FileContent(uri="https://x/cat.png", mime_type="image/png", modality="image"),
                ImageContent("aGk=", "image/png"),
                FileContent(file_id="file-1", modality="document"),
            )
        ),
        AssistantMessage((ThinkingContent("think"), ToolCall("c1", "f", {"a": 1}))),
        ToolResultMessage("c1", "", (TextContent("ok"),)),
    ]
    assert found.outputs == [AssistantMessage((TextContent("done"),), stop_reason="stop")]
    assert found.kind == "model"
    assert found.keys == {"gen_ai.input.messages", "gen_ai.output.messages"}
    assert not found.problems


def test_parts_and_roles_without_a_type_are_kept_with_their_place() -> None:
    """An unknown part, an unknown role and a participant's name are kept, and named."""
    inputs = [
        {"role": "critic", "parts": [{"type": "text", "content": "hm"}], "name": "bob"},
        {
            "role": "user",
            "parts": [{"type": "server_tool_call", "name": "web", "server_tool_call": {}}],
        },
    ]
    found = collect({"gen_ai.input.messages": json.dumps(inputs)}, ())
    assert found.inputs == [UserMessage("hm"), UserMessage(())]
    assert found.kept_in["roles"] == [{"message": 0, "role": "critic"}]
    assert found.kept_in["names"] == [{"message": 0, "name": "bob"}]
    assert found.kept_in["parts"] == [
        {
            "message": 1,
            "part": 0,
            "value": {"type": "server_tool_call", "name": "web", "server_tool_call": {}},
        }
    ]
    assert any("unknown role 'critic'" in p for p in found.problems)


def test_malformed_truncated_and_mistyped_bodies_are_kept_as_they_came() -> None:
    """JSON cut by a length limit, and a number where messages belong: kept, removed, named."""
    cut = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "x" * 50}]}])[:30]
    found = collect(
        {
            "gen_ai.input.messages": cut,
            "gen_ai.output.messages": 42,
            "gen_ai.tool.definitions": "{",
        },
        (),
    )
    assert found.keys == {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.definitions",
    }
    assert found.kept_in["gen_ai.input.messages"] == cut
    assert found.kept_out["gen_ai.output.messages"] == 42
    assert found.kept_in["gen_ai.tool.definitions"] == "{"
    assert len(found.problems) == 3


def test_structured_attribute_values_are_read_like_json_text() -> None:
    """Log records hold messages as structured values (tuples of mappings), not JSON text."""
    found = Found()
    read_log(
        "gen_ai.client.inference.operation.details",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": (
                {"role": "user", "parts": ({"type": "text", "content": "hi"},)},
            ),
            "gen_ai.system_instructions": ({"type": "text", "content": "sys"},),
        },
        None,
        found,
    )
    assert found.inputs == [UserMessage("hi")]
    assert found.system == [TextContent("sys")]


def test_tool_returns_in_a_user_message_become_tool_results() -> None:
    """pydantic-ai sends tool returns as a user message with ``tool_call_response`` parts."""
    message = {
        "role": "user",
        "parts": [
            {"type": "tool_call_response", "id": "c1", "name": "f", "result": {"t": 21}},
            {"type": "text", "content": "and then?"},
        ],
    }
    found = collect({"gen_ai.input.messages": json.dumps([message])}, ())
    assert found.inputs == [
        ToolResultMessage("c1", "f", (), details={"t": 21}),
        UserMessage((TextContent("and then?"),)),
    ]


def test_tool_spans_and_pydantic_ai_attributes() -> None:
    """A tool's arguments and result, and pydantic-ai's own bodies, are found and kept."""
    found = collect(
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.call.arguments": '{"city": "Paris"}',
            "gen_ai.tool.call.result": "sunny",
            "model_request_parameters": '{"instruction_parts": ["be nice"]}',
            "logfire.msg": "running tool",
        },
        (),
    )
    assert (found.kind, found.input, found.output) == ("tool", {"city": "Paris"}, "sunny")
    assert found.kept_in["model_request_parameters"] == {"instruction_parts": ["be nice"]}
    assert "logfire.msg" not in found.keys


def test_older_message_events_on_a_span() -> None:
    """``gen_ai.*.message`` and ``gen_ai.choice`` span events are messages, and removed."""
    events = [
        event("gen_ai.system.message", content="sys"),
        event("gen_ai.user.message", **{"gen_ai.event.content": json.dumps({"content": "hi"})}),
        event("unrelated"),
        event(
            "gen_ai.choice", index=0, finish_reason="stop", message=json.dumps({"content": "yo"})
        ),
    ]
    found = collect({}, events)
    assert found.events == {0, 1, 3}
    assert found.inputs == [SystemMessage("sys"), UserMessage("hi")]
    assert carries_content({}, events)


def test_per_message_log_events_carry_the_message_in_the_body() -> None:
    """A per-message log record's body is its content (key ``""``)."""
    found = Found()
    read_log(
        "gen_ai.choice",
        {"gen_ai.provider.name": "openai"},
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {"content": None},
            "tool_calls": [
                {"id": "c1", "function": {"name": "f", "arguments": "{}"}, "type": "function"}
            ],
        },
        found,
    )
    assert found.keys == {""}
    assert found.outputs == [AssistantMessage((ToolCall("c1", "f", {}),), stop_reason="tool_calls")]


def test_completion_hook_dataclasses_map_like_the_attributes() -> None:
    """util-genai's message dataclasses give the same messages as the JSON they serialize to."""
    from opentelemetry.util.genai.types import (
        Blob,
        FunctionToolDefinition,
        InputMessage,
        OutputMessage,
        Text,
    )

    found = from_hook(
        [InputMessage("user", [Text("hi"), Blob("image/png", "image", b"\x89PNG")])],
        [OutputMessage("assistant", [Text("yo")], finish_reason="stop")],
        [Text("sys")],
        [FunctionToolDefinition("f", "does f", {"type": "object"})],
    )
    assert found.inputs == [UserMessage((TextContent("hi"), ImageContent("iVBORw==", "image/png")))]
    assert found.outputs == [AssistantMessage((TextContent("yo"),), stop_reason="stop")]
    assert found.system == [TextContent("sys")]
    assert found.tools == [
        {"type": "function", "name": "f", "description": "does f", "parameters": {"type": "object"}}
    ]


# -- OpenInference ---------------------------------------------------------------------------


def test_openinference_flattened_messages_tools_and_raw_values() -> None:
    """OpenInference's indexed messages (contents, tool calls), tool schemas and input.value."""
    found = collect(
        {
            "openinference.span.kind": "LLM",
            "input.value": '{"model": "m"}',
            "input.mime_type": "application/json",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.contents.0.message_content.type": "text",
            "llm.input_messages.0.message.contents.0.message_content.text": "see",
            "llm.input_messages.0.message.contents.1.message_content.type": "image",
            "llm.input_messages.0.message.contents.1.message_content.image.image.url": (
                "data:image/png;base64,aGk="
            ),
            "llm.input_messages.1.message.role": "tool",
            "llm.input_messages.1.message.tool_call_id": "c1",
            "llm.input_messages.1.message.content": "42",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c2",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "f",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"x": 1}',
            "llm.tools.0.tool.json_schema": '{"type": "function", "function": {"name": "f"}}',
            "llm.model_name": "m",
        },
        (),
    )
    assert found.kind == "model"
    assert found.inputs == [
        UserMessage((TextContent("see"), ImageContent("aGk=", "image/png"))),
        ToolResultMessage("c1", "", (TextContent("42"),)),
    ]
    assert found.outputs == [AssistantMessage((ToolCall("c2", "f", {"x": 1}),))]
    assert found.tools == [{"type": "function", "name": "f"}]
    assert found.input == {"model": "m"}
    assert "input.mime_type" not in found.keys
    assert "llm.model_name" not in found.keys


def test_openinference_retrieval_embeddings_and_templates() -> None:
    """Documents are a retrieval's output; texts and vectors an embedding's; templates kept."""
    retrieval = collect(
        {
            "openinference.span.kind": "RETRIEVER",
            "input.value": "query?",
            "retrieval.documents.0.document.id": "d1",
            "retrieval.documents.0.document.content": "text",
            "retrieval.documents.0.document.score": 0.5,
            "retrieval.documents.0.document.metadata": '{"src": "a"}',
        },
        (),
    )
    assert (retrieval.kind, retrieval.input) == ("retrieval", "query?")
    assert retrieval.output == [
        {"id": "d1", "content": "text", "score": 0.5, "metadata": {"src": "a"}}
    ]
    embedding = collect(
        {
            "openinference.span.kind": "EMBEDDING",
            "input.value": '{"input": "t"}',
            "embedding.embeddings.0.embedding.text": "t",
            "embedding.embeddings.0.embedding.vector": (0.5, 1.0),
            "llm.prompt_template.variables": '{"city": "Paris"}',
        },
        (),
    )
    assert (embedding.input, embedding.output) == (["t"], [[0.5, 1.0]])
    assert embedding.kept_in == {
        "input.value": {"input": "t"},
        "llm.prompt_template.variables": {"city": "Paris"},
    }


# -- OpenLLMetry -----------------------------------------------------------------------------


def test_openllmetry_indexed_prompts_and_completions() -> None:
    """``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*`` as its instrumentations set them."""
    found = collect(
        {
            "llm.request.type": "chat",
            "gen_ai.prompt.name": "greeting",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": json.dumps([{"type": "text", "text": "hi"}]),
            "gen_ai.prompt.1.role": "assistant",
            "gen_ai.prompt.1.tool_calls.0.id": "c1",
            "gen_ai.prompt.1.tool_calls.0.name": "f",
            "gen_ai.prompt.1.tool_calls.0.arguments": "{}",
            "gen_ai.prompt.2.role": "tool",
            "gen_ai.prompt.2.tool_call_id": "c1",
            "gen_ai.prompt.2.content": "ok",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "done",
            "gen_ai.completion.0.finish_reason": "stop",
            "llm.request.functions.0.name": "f",
            "llm.request.functions.0.parameters": '{"type": "object"}',
        },
        (),
    )
    assert found.kind == "model"
    assert found.inputs == [
        UserMessage("hi"),
        AssistantMessage((ToolCall("c1", "f", {}),)),
        ToolResultMessage("c1", "", (TextContent("ok"),)),
    ]
    assert found.outputs == [AssistantMessage((TextContent("done"),), stop_reason="stop")]
    assert found.tools == [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    assert "gen_ai.prompt.name" not in found.keys


def test_openllmetry_workflow_input_and_output() -> None:
    """``traceloop.entity.input`` / ``output`` are a task's input and output."""
    found = collect(
        {
            "traceloop.span.kind": "task",
            "traceloop.entity.name": "summarize",
            "traceloop.entity.input": '{"args": ["text"], "kwargs": {}}',
            "traceloop.entity.output": '"short"',
        },
        (),
    )
    assert (found.kind, found.name) == ("other", "summarize")
    assert (found.input, found.output) == ({"args": ["text"], "kwargs": {}}, "short")


# -- the records ------------------------------------------------------------------------------


def test_a_model_call_plan_and_its_references() -> None:
    """A model call: request then reply, the reply labelled, each reference on its record."""
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.response.model": "m-1",
        "gen_ai.provider.name": "openai",
        "gen_ai.usage.input_tokens": 3,
        "gen_ai.usage.output_tokens": 2,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "sys"}]),
        "gen_ai.tool.definitions": json.dumps([{"type": "function", "name": "f"}]),
        "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
        ),
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "yo"}]}]
        ),
    }
    found = collect(attributes, ())
    execution = Execution("otel:0000000000000001", kind_of(found))
    p = plan(found, labels(attributes), execution, "chat m", NOW, NOW)
    (request,), (reply,) = p.start, p.end
    assert (request.type, reply.type) == (ev.MODEL_REQUEST, ev.MODEL_EXEC_END)
    assert request.data["system"] == [TextContent("sys")]
    assert request.data["config"] == {"temperature": 0.5}
    message = reply.data["message"]
    assert (message.model, message.provider, message.usage.input_tokens) == ("m-1", "openai", 3)
    assert p.refs == {
        INPUT_MESSAGES_REF: 0,
        SYSTEM_INSTRUCTIONS_REF: 0,
        TOOL_DEFINITIONS_REF: 0,
        OUTPUT_MESSAGES_REF: 1,
    }


def test_a_failed_call_keeps_its_partial_reply_and_error() -> None:
    """An ERROR span: the reply so far as ``partial_message``, the error's type and message."""
    attributes = {
        "gen_ai.operation.name": "chat",
        "error.type": "RateLimitError",
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "par"}]}]
        ),
    }
    found = collect(attributes, ())
    lab = labels(attributes, error=True, description="slow down")
    p = plan(found, lab, Execution("otel:0000000000000002", "model"), "chat", NOW, NOW)
    reply = p.end[0].data
    assert "message" not in reply
    assert reply["partial_message"].text == "par"
    assert reply["error"] == {"type": "RateLimitError", "message": "slow down"}


def test_tool_agent_and_chain_plans() -> None:
    """Tools record their arguments and result; agents and chains their input and output."""
    tool = collect(
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.arguments": "{}"}, ()
    )
    lab = labels({"gen_ai.tool.name": "f", "gen_ai.tool.call.id": "c1"})
    p = plan(tool, lab, Execution("otel:0000000000000003", "tool"), "execute_tool f", NOW, NOW)
    assert [e.type for e in (*p.start, *p.end)] == [ev.TOOL_EXEC_START, ev.TOOL_EXEC_END]
    assert p.start[0].data == {"tool": "f", "args": {}, "tool_call_id": "c1"}
    assert p.end[0].data["result"] is None
    chain = collect({"openinference.span.kind": "CHAIN", "output.value": "out"}, ())
    assert chain.input is ABSENT
    p = plan(chain, labels({}), Execution("otel:0000000000000004", "other"), "node", NOW, NOW)
    assert [e.type for e in (*p.start, *p.end)] == [ev.AGENT_START, ev.AGENT_END]
    assert p.end[0].data == {"agent": "node", "output": "out"}


def test_unflatten_builds_lists_from_digit_segments() -> None:
    """Dotted keys become dicts and lists; a key both a value and a prefix keeps both."""
    assert unflatten([("0.a.1", "y"), ("0.a.0", "x"), ("1", "z"), ("0.b", 1), ("0.b.c", 2)]) == [
        {"a": ["x", "y"], "b": {"": 1, "c": 2}},
        "z",
    ]


def test_spans_without_a_body_are_not_read() -> None:
    """The cheap test: labels and references alone carry no body."""
    assert not carries_content(
        {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "session.id": "s"}, ()
    )
    assert carries_content({"llm.input_messages.0.message.role": "user"}, ())
