"""Following a span's message references to the GenAI conventions' message JSON."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from loopscribe import (
    AssistantMessage,
    Execution,
    Session,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    events,
    read,
)
from loopscribe.importers import claude_code
from loopscribe.otel import (
    MessageReferenceError,
    parse_reference,
    replay,
    resolve_reference,
    to_file_uri,
)
from loopscribe.testing import captured_spans
from loopscribe.viewer import create_app

TRANSCRIPTS = Path(__file__).parent / "data" / "transcripts" / "claude-code"
TOOLS = [{"name": "grep", "description": "Search", "input_schema": {"type": "object"}}]


def record_call(path: Path) -> dict[str, Any]:
    """One chat call with a system prompt, history, tools and a tool-calling answer."""
    captured = captured_spans()
    with Session.create(path) as session, session.begin_run(parent=None) as run:
        ex = Execution("m1", "model")
        run.record(events.model_exec_start(ex, "claude-x", provider="anthropic"))
        history = [
            SystemMessage("be brief"),
            UserMessage("find TODOs"),
            AssistantMessage(content=(ToolCall("c0", "ls", {"dir": "."}),)),
            ToolResultMessage("c0", "ls", (TextContent("a.py"),)),
        ]
        run.record(events.model_request(ex, history, TOOLS))
        answer = AssistantMessage(
            content=(TextContent("grepping"), ToolCall("c1", "grep", {"q": "TODO"})),
            stop_reason="tool_use",
        )
        run.record(events.model_exec_end(ex, message=answer))
    replay(path, captured.processor)
    chat = next(s for s in captured.spans if s.name == "chat claude-x")
    return dict(chat.attributes or {})


def test_references_resolve_to_the_conventions_schema(session_path: Path) -> None:
    attrs = record_call(session_path)
    request = resolve_reference(attrs["gen_ai.input.messages_ref"])
    assert request["type"] == "model_request"
    assert request["gen_ai.input.messages"] == [
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {"role": "user", "parts": [{"type": "text", "content": "find TODOs"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c0", "name": "ls", "arguments": {"dir": "."}}],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c0", "response": "a.py"}]},
    ]
    assert request["gen_ai.system_instructions"] == [{"type": "text", "content": "be brief"}]
    assert request["gen_ai.tool.definitions"] == [
        {
            "type": "function",
            "name": "grep",
            "description": "Search",
            "parameters": {"type": "object"},
        }
    ]
    response = resolve_reference(attrs["gen_ai.output.messages_ref"])
    assert response["gen_ai.output.messages"] == [
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": "grepping"},
                {"type": "tool_call", "id": "c1", "name": "grep", "arguments": {"q": "TODO"}},
            ],
            "finish_reason": "tool_call",
        }
    ]


@pytest.mark.parametrize(
    "ref",
    ["no-fragment.jsonl", "s.jsonl#seq=x", "https://example.com/s.jsonl#seq=1", "file://h/s#seq=1"],
)
def test_bad_references_say_what_is_wrong(ref: str) -> None:
    with pytest.raises(MessageReferenceError):
        parse_reference(ref)


def test_a_reference_to_another_record_type_is_refused(session_path: Path) -> None:
    record_call(session_path)
    with pytest.raises(MessageReferenceError, match="run_start"):
        resolve_reference(f"{to_file_uri(session_path)}#seq=1")
    with pytest.raises(MessageReferenceError, match="no record with seq 999"):
        resolve_reference(session_path, 999)


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real Claude Code session with a compaction, imported."""
    source = TRANSCRIPTS / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    out = tmp_path_factory.mktemp("imported")
    claude_code.import_transcript(source, out, finished=True)
    return out / source.name


def test_an_imported_request_resolves_to_its_context_since_the_compaction(
    imported: Path,
) -> None:
    """Requests hold no messages there; the reference gives the conversation that formed them."""
    found = list(read(imported, decode=False))
    requests = [r for r in found if r.type == "model_request"]
    assert requests
    assert all(not r.data.get("messages") for r in requests)
    compaction = next(r for r in found if r.type == "compaction")
    for request in (requests[0], requests[-1]):
        messages = resolve_reference(imported, request.seq)["gen_ai.input.messages"]
        assert messages, request.seq
        assert all(m["role"] in ("user", "assistant", "tool", "system") for m in messages)
        since = compaction.seq if request.seq > compaction.seq else 0
        committed = [r for r in found if r.type == "message_end" and since < r.seq < request.seq]
        summary = 1 if request.seq > compaction.seq else 0
        assert len(messages) == len(committed) + summary
    after = resolve_reference(imported, requests[-1].seq)["gen_ai.input.messages"]
    assert "continued from a previous conversation" in orjson.dumps(after[0]).decode()


def test_find_genai_json_follows_a_reference_and_a_span(session_path: Path) -> None:
    attrs = record_call(session_path)
    ref = str(attrs["gen_ai.input.messages_ref"])
    cmd = [sys.executable, "-m", "loopscribe", "find"]
    by_ref = subprocess.run(
        [*cmd, ref, "--genai-json"], capture_output=True, text=True, timeout=60, check=True
    )
    (line,) = by_ref.stdout.splitlines()
    assert orjson.loads(line)["gen_ai.input.messages"][1]["role"] == "user"
    spans = captured_spans()
    replay(session_path, spans.processor)
    chat = next(s for s in spans.spans if s.name == "chat claude-x")
    assert chat.context is not None
    by_span = subprocess.run(
        [
            *cmd,
            str(session_path.parent),
            "--trace-id",
            f"{chat.context.trace_id:032x}",
            "--span-id",
            f"{chat.context.span_id:016x}",
            "--genai-json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    kinds = [orjson.loads(line)["type"] for line in by_span.stdout.splitlines()]
    assert kinds == ["model_request", "model_exec_end"]
    bad = subprocess.run(
        [*cmd, str(session_path) + "#seq=nope", "--genai-json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0
    assert "#seq=N" in bad.stderr


def test_viewer_record_api_returns_the_conventions_schema(imported: Path) -> None:
    """``?format=genai`` on a record: the same as following the span's reference."""
    request = next(r for r in read(imported, decode=False) if r.type == "model_request")
    with TestClient(create_app(imported.parent), base_url="http://127.0.0.1") as client:
        got = client.get(
            f"/api/session/{request.session_id}/record/{request.seq}", params={"format": "genai"}
        )
        assert got.status_code == 200
        assert got.json() == resolve_reference(imported, request.seq)
        assert got.json()["gen_ai.input.messages"]
        missing = client.get(f"/api/session/{request.session_id}/record/1?format=genai")
        assert missing.status_code == 404
