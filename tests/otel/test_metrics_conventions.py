"""The GenAI conventions as they stand: cache writes, compaction, provider, sub-agents."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from loopscribe import AssistantMessage, Event, Execution, Run, Session, TextContent, Usage
from loopscribe import events as ev
from loopscribe.importers.claude_code import import_transcript
from loopscribe.otel import SpanBridge, replay
from loopscribe.testing import captured_spans

DATA = Path(__file__).parent.parent / "data" / "transcripts" / "claude-code"
T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def call(run: Run, name: str, at: float, *, provider: str | None = "anthropic") -> None:
    """One model call with cache writes."""
    ex = Execution(name, "model")
    ts = T0 + timedelta(seconds=at)
    run.record(ev.model_exec_start(ex, "claude-test", provider=provider, timestamp=ts))
    usage = Usage(100, 10, cache_read_tokens=20, cache_write_tokens=30)
    message = AssistantMessage((TextContent("ok"),), usage=usage)
    run.record(ev.model_exec_end(ex, message=message, usage=usage, timestamp=ts))


def live(path: Path, body: Callable[[Session, Run], None]) -> list[ReadableSpan]:
    """The chat spans a live bridge emits for ``body(session, run)``."""
    captured = captured_spans()
    bridge = SpanBridge(captured.processor, file_uri=path, metrics=False)
    with Session.create(path, observers=[bridge]) as session, session.begin_run() as run:
        body(session, run)
    return [s for s in captured.spans if s.name.startswith("chat")]


def test_cache_writes_under_both_names_by_default(tmp_path: Path) -> None:
    """Dashboards on the new and the former name both see cache writes."""
    (span,) = live(tmp_path / "s.jsonl", lambda session, run: call(run, "m1", 0))
    attrs = span.attributes or {}
    assert attrs["gen_ai.usage.cache_write.input_tokens"] == 30
    assert attrs["gen_ai.usage.cache_creation.input_tokens"] == 30


def test_latest_keeps_only_the_new_cache_write_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the switch at ``latest`` the renamed attribute alone is written."""
    monkeypatch.setenv("LOOPSCRIBE_GENAI_SEMCONV", "latest")
    (span,) = live(tmp_path / "s.jsonl", lambda session, run: call(run, "m1", 0))
    attrs = span.attributes or {}
    assert attrs["gen_ai.usage.cache_write.input_tokens"] == 30
    assert "gen_ai.usage.cache_creation.input_tokens" not in attrs


def test_the_first_call_after_a_compaction_says_so(tmp_path: Path) -> None:
    """Only the first model call after a compaction says so, live and replayed alike."""
    path = tmp_path / "s.jsonl"

    def body(session: Session, run: Run) -> None:
        call(run, "m1", 0)
        # What Workspace.compact writes through the writer's handle.
        session.annotate(ev.COMPACTION, {"summary": "so far", "messages_before": 4})
        call(run, "m2", 1)
        call(run, "m3", 2)

    spans = live(path, body)
    flags = [(s.attributes or {}).get("gen_ai.conversation.compacted") for s in spans]
    assert flags == [None, True, None]
    captured = captured_spans()
    replay(path, captured.processor)
    replayed = [s for s in captured.spans if s.name.startswith("chat")]
    assert [(s.attributes or {}).get("gen_ai.conversation.compacted") for s in replayed] == flags


def test_every_inference_span_names_a_provider(tmp_path: Path) -> None:
    """A chat model whose framework names no provider gets the conventions' _OTHER."""
    (span,) = live(tmp_path / "s.jsonl", lambda session, run: call(run, "m1", 0, provider=None))
    assert (span.attributes or {})["gen_ai.provider.name"] == "_OTHER"


def test_a_sub_agent_has_its_own_conversation_and_the_session(tmp_path: Path) -> None:
    """A nested agent the host gives a conversation ID: its spans carry it, session.id stays."""
    path = tmp_path / "s.jsonl"
    outer = Execution("agent_1", "agent")
    inner = Execution("agent_2", "agent", parent_id="agent_1")
    model = Execution("m1", "model", parent_id="agent_2")
    captured = captured_spans()
    bridge = SpanBridge(captured.processor, file_uri=path, metrics=False)
    with Session.create(path, observers=[bridge]) as session, session.begin_run() as run:
        run.record(ev.agent_start(outer, "lead"))
        start = ev.agent_start(inner, "researcher")
        run.record(Event(start.type, inner, {**start.data, "conversation_id": "conv-sub-7"}))
        run.record(ev.model_exec_start(model, "claude-test", provider="anthropic"))
        run.record(ev.model_exec_end(model, message=AssistantMessage((TextContent("x"),))))
        run.record(ev.agent_end(inner, "researcher"))
        run.record(ev.agent_end(outer, "lead"))
    by_name = {s.name: s.attributes or {} for s in captured.spans}
    assert by_name["invoke_agent researcher"]["gen_ai.conversation.id"] == "conv-sub-7"
    assert by_name["chat claude-test"]["gen_ai.conversation.id"] == "conv-sub-7"
    assert by_name["invoke_agent lead"]["gen_ai.conversation.id"] == session.id
    assert {a["session.id"] for a in by_name.values()} == {session.id}


def test_an_imported_subagent_keeps_its_transcript_id(tmp_path: Path) -> None:
    """Claude Code subagents: their spans carry the subagent's own id, the session stays one."""
    report = import_transcript(DATA / "subagent.jsonl", tmp_path / "out", finished=True)
    captured = captured_spans()
    replay(report.destination, captured.processor)
    attrs = [s.attributes or {} for s in captured.spans]
    assert {a["session.id"] for a in attrs} == {report.session_id}
    conversations = {a["gen_ai.conversation.id"] for a in attrs}
    sub_agents = [
        a
        for a in attrs
        if a.get("gen_ai.operation.name") == "invoke_agent"
        and a.get("loopscribe.execution.parent_id")
    ]
    assert sub_agents
    assert all(a["gen_ai.conversation.id"] != report.session_id for a in sub_agents)
    assert len(conversations) > 1
