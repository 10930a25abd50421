"""SpanBridge and replay: span tree, references, no bodies, live equals replay."""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import SpanContext, StatusCode, TraceFlags

from loopscribe import (
    AssistantMessage,
    CallRef,
    Event,
    Execution,
    Record,
    Run,
    Session,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    otel,
    read,
)
from loopscribe import events as ev
from loopscribe.otel import (
    SpanBridge,
    default_resource,
    encode_otlp_json,
    replay,
    run_span_id,
    span_context,
    span_id,
    to_file_uri,
    trace_id,
)
from loopscribe.testing import (
    CapturedSpans,
    captured_spans,
    span_tree,
    traced_session,
)

HOST_TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
HOST_SPAN = 0x00F067AA0BA902B7

EXPECTED_TREE = """\
invoke_agent coder
  invoke_agent coder
    turn
      context
      chat gpt-test
      chat gpt-test
      execute_tool grep
      execute_tool read
  chat small-model"""


def execution_id(attrs: Mapping[str, Any]) -> str:
    """A span's execution ID."""
    return str(attrs["loopscribe.execution.id"])


def span_file(attrs: Mapping[str, Any]) -> str:
    """The session file a span names: ``loopscribe.file``, or its message references' file."""
    if "loopscribe.file" in attrs:
        return str(attrs["loopscribe.file"])
    return str(attrs["gen_ai.input.messages_ref"]).partition("#")[0]


class Clock:
    """Source timestamps 1 ms apart, so span times are known exactly."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


class Canaries:
    """Unique strings planted in bodies; none may ever reach a span."""

    def __init__(self) -> None:
        self.planted: dict[str, str] = {}

    def __call__(self, where: str) -> str:
        return self.planted.setdefault(where, f"CANARY-{where}-{uuid.uuid4().hex}")


def record_scenario(run: Run, body: Callable[[str], str]) -> None:
    """An agent turn with a context step, a retried model call, two tools, then a standalone call.

    ``body(where)`` gives the text put in each body, so a test can plant canaries.
    """
    at = Clock()
    agent = Execution("agent_1", "agent")
    turn = Execution("turn_1", "turn", parent_id="agent_1")
    ctx = Execution("ctx_1", "context", parent_id="turn_1")
    first = Execution("model_1", "model", attempt=1, parent_id="turn_1")
    second = Execution("model_1", "model", attempt=2, parent_id="turn_1")
    grep = Execution("call_1", "tool", parent_id="turn_1")
    read_tool = Execution("call_2", "tool", parent_id="turn_1")
    classify = Execution("classify", "model")
    messages = [SystemMessage(body("system-prompt")), UserMessage(body("user-message"))]
    tools = [{"name": "grep", "description": body("tool-declaration")}]
    config = {
        "temperature": 0.2,
        "user": body("config-string"),
        "response_format": {"schema": body("config-json")},
        "api_key": body("api-key"),
    }

    run.record(ev.agent_start(agent, "coder", timestamp=at()))
    run.record(ev.turn_start(turn, 1, timestamp=at()))
    run.record(ev.context_transform_start(ctx, messages=3, timestamp=at()))
    run.record(ev.context_transform_end(ctx, messages=2, summary=body("summary"), timestamp=at()))

    run.record(ev.model_exec_start(first, "gpt-test", provider="openai", timestamp=at()))
    run.record(ev.model_request(first, messages, tools, config, timestamp=at()))
    run.record(ev.message_update(first, AssistantMessage((TextContent(body("delta")),))))
    run.record(
        ev.model_exec_end(
            first,
            partial_message=AssistantMessage((TextContent(body("partial")),)),
            error=TimeoutError(body("error-message")),
            timestamp=at(),
        )
    )
    run.record(ev.retry_scheduled(first, next_attempt=2, error=TimeoutError(body("retry-error"))))

    answer = AssistantMessage(
        (
            ThinkingContent(body("thinking")),
            TextContent(body("assistant-text")),
            ToolCall("call_1", "grep", {"pattern": body("tool-args")}),
            ToolCall("call_2", "read", {"path": body("tool-args-2")}),
        ),
        model="gpt-test-2026",
        provider="openai",
        usage=Usage(120, 30, cache_read_tokens=100),
        stop_reason="tool_use",
    )
    run.record(ev.model_exec_start(second, "gpt-test", provider="openai", timestamp=at()))
    run.record(ev.model_request(second, messages, tools, config, timestamp=at()))
    run.record(ev.model_exec_end(second, message=answer, usage=answer.usage, timestamp=at()))
    run.record(ev.message_end(None, answer, timestamp=at()))

    run.record(ev.tool_exec_start(grep, "grep", {"pattern": body("tool-args")}, timestamp=at()))
    run.record(ev.tool_invoke_start(grep, "grep", {"pattern": body("invoke-args")}, timestamp=at()))
    run.record(ev.tool_exec_update(grep, body("progress")))
    run.record(
        ev.tool_exec_end(
            grep,
            "grep",
            body("tool-result"),
            content=[TextContent(body("tool-content"))],
            details={"matches": body("tool-details")},
            timestamp=at(),
        )
    )
    run.record(ev.tool_exec_start(read_tool, "read", {"path": body("tool-args-2")}, timestamp=at()))
    run.record(
        ev.tool_exec_end(
            read_tool,
            "read",
            body("tool-result-2"),
            error=FileNotFoundError(body("tool-error")),
            timestamp=at(),
        )
    )
    result = ToolResultMessage("call_2", "read", (TextContent(body("tool-result-message")),), True)
    run.record(ev.message_end(None, result, timestamp=at()))
    run.record(ev.turn_end(turn, 1, stop_reason="tool_use", tool_calls=2, timestamp=at()))
    run.save_checkpoint({"messages": [body("checkpoint-snapshot")]})
    run.record(ev.agent_end(agent, "coder", stop_reason="end_turn", turns=1, timestamp=at()))

    run.record(ev.model_exec_start(classify, "small-model", provider="anthropic", timestamp=at()))
    run.record(ev.model_request(classify, [UserMessage(body("classify-input"))], timestamp=at()))
    run.record(
        ev.model_exec_end(
            classify,
            message={
                "role": "assistant",
                "content": [{"type": "text", "text": body("classify-output")}],
                "model": "small-model-v1",
                "stop_reason": "end_turn",
                "usage": {
                    "input_tokens": 10,
                    "output_tokens": 2,
                    "cache_read_input_tokens": 5,
                    "cache_creation_input_tokens": 1,
                },
            },
            timestamp=at(),
        )
    )


def plain(where: str) -> str:
    """An ordinary body text."""
    return f"text for {where}"


def record_file(
    path: Path,
    scenario: Callable[[Run], None],
    *,
    parent: Any = None,
    metadata: Mapping[str, Any] | None = None,
) -> tuple[Session, list[ReadableSpan]]:
    """Record ``scenario`` in one run of a new file with a live bridge; return the live spans."""
    captured = captured_spans()
    with (
        Session.create(
            path, observers=[SpanBridge(captured.processor, file_uri=path)], metadata=metadata
        ) as session,
        session.begin_run(parent=parent) as run,
    ):
        scenario(run)
    return session, list(captured.spans)


def replayed(path: Path) -> list[ReadableSpan]:
    """The spans replay emits for ``path``."""
    captured = captured_spans()
    replay(path, captured.processor)
    return list(captured.spans)


def as_json(spans: list[ReadableSpan]) -> list[str]:
    """Every field of every span (context, parent, times, attributes, status, resource...)."""
    return [span.to_json() for span in spans]


def by_seq(path: Path) -> dict[int, Record]:
    """The file's records by seq."""
    return {record.seq: record for record in read(path)}


def ns(ts: datetime) -> int:
    """A record timestamp in Unix nanoseconds."""
    return (ts - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


@pytest.fixture
def scenario_file(session_path: Path) -> tuple[Path, Session, list[ReadableSpan]]:
    """The standard scenario recorded with plain bodies."""
    session, spans = record_file(session_path, lambda run: record_scenario(run, plain))
    return session_path, session, spans


def test_span_tree_shape(scenario_file: tuple[Path, Session, list[ReadableSpan]]) -> None:
    """Runs, turns, retries, tools and a standalone call nest by parent_id under the run span."""
    _, _, spans = scenario_file
    assert span_tree(spans) == EXPECTED_TREE
    assert len(spans) == 9
    assert spans[-1].name == "invoke_agent coder"  # the run span ends last


def test_ids_follow_the_derivation(scenario_file: tuple[Path, Session, list[ReadableSpan]]) -> None:
    """Every span's trace and span ID is the derivation of its coordinates."""
    _, session, spans = scenario_file
    for span in spans:
        attrs = span.attributes or {}
        run_id = str(attrs["loopscribe.run.id"])
        assert span.context is not None
        assert span.context.trace_id == trace_id(session.id, run_id)
        assert span.context.trace_flags.sampled
        if "loopscribe.attempt" not in attrs:
            assert span.context.span_id == run_span_id(session.id, run_id)
            assert span.parent is None
            continue
        ex_id, attempt = execution_id(attrs), attrs["loopscribe.attempt"]
        assert isinstance(attempt, int)
        assert span.context.span_id == span_id(session.id, run_id, ex_id, attempt)
        ctx = span_context(CallRef(session.id, run_id, ex_id, attempt))
        assert (ctx.trace_id, ctx.span_id) == (span.context.trace_id, span.context.span_id)


def test_retries_are_sibling_spans(scenario_file: tuple[Path, Session, list[ReadableSpan]]) -> None:
    """A failed attempt and its successful retry are siblings with distinct span IDs."""
    _, _, spans = scenario_file
    first, second = [s for s in spans if s.name == "chat gpt-test"]
    assert first.parent == second.parent
    assert first.context is not None
    assert second.context is not None
    assert first.context.span_id != second.context.span_id
    assert (first.attributes or {})["loopscribe.attempt"] == 1
    assert (second.attributes or {})["loopscribe.attempt"] == 2
    assert first.status.status_code is StatusCode.ERROR
    assert (first.attributes or {})["error.type"] == "TimeoutError"
    assert first.status.description is None
    assert second.status.status_code is StatusCode.UNSET
    assert "error.type" not in (second.attributes or {})


def test_model_span_attributes(scenario_file: tuple[Path, Session, list[ReadableSpan]]) -> None:
    """A chat span carries GenAI labels and refs to its request and response records."""
    path, _, spans = scenario_file
    records = by_seq(path)
    second = next(s for s in spans if (s.attributes or {}).get("loopscribe.attempt") == 2)
    attrs = dict(second.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "gpt-test"
    assert attrs["gen_ai.response.model"] == "gpt-test-2026"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.usage.input_tokens"] == 120
    assert attrs["gen_ai.usage.output_tokens"] == 30
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 100
    assert attrs["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert attrs["loopscribe.execution.kind"] == "model"
    uri = to_file_uri(path)
    # The references name the file; it is not written a third time.
    assert "loopscribe.file" not in attrs
    request_ref, response_ref = (
        str(attrs["gen_ai.input.messages_ref"]),
        str(attrs["gen_ai.output.messages_ref"]),
    )
    assert request_ref.startswith(uri + "#seq=")
    assert records[int(request_ref.rpartition("=")[2])].type == "model_request"
    assert records[int(response_ref.rpartition("=")[2])].type == "model_exec_end"


def test_tool_and_standalone_spans(scenario_file: tuple[Path, Session, list[ReadableSpan]]) -> None:
    """Tools carry name and call ID, a failed tool is ERROR, a standalone call hangs off the run."""
    _, _, spans = scenario_file
    grep = next(s for s in spans if s.name == "execute_tool grep")
    failed = next(s for s in spans if s.name == "execute_tool read")
    standalone = next(s for s in spans if s.name == "chat small-model")
    run_span = spans[-1]
    assert (grep.attributes or {})["gen_ai.tool.name"] == "grep"
    assert (grep.attributes or {})["gen_ai.tool.call.id"] == "call_1"
    assert (grep.attributes or {})["gen_ai.operation.name"] == "execute_tool"
    assert grep.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "FileNotFoundError"
    assert run_span.context is not None
    assert standalone.parent is not None
    assert standalone.parent.span_id == run_span.context.span_id
    attrs = standalone.attributes or {}
    assert attrs["gen_ai.provider.name"] == "anthropic"
    assert attrs["gen_ai.response.model"] == "small-model-v1"
    # Anthropic counts cached prompt tokens apart; the conventions include them.
    assert attrs["gen_ai.usage.input_tokens"] == 16
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 5
    assert attrs["gen_ai.usage.cache_creation.input_tokens"] == 1
    assert attrs["gen_ai.response.finish_reasons"] == ("end_turn",)


def test_every_span_names_the_session(
    scenario_file: tuple[Path, Session, list[ReadableSpan]],
) -> None:
    """gen_ai.conversation.id, session.id and the loopscribe references are on every span."""
    path, session, spans = scenario_file
    for span in spans:
        attrs = span.attributes or {}
        assert attrs["gen_ai.conversation.id"] == session.id
        assert attrs["session.id"] == session.id
        # Each reference once: no third name for the session, the file named once.
        assert "loopscribe.session.id" not in attrs
        assert span_file(attrs) == to_file_uri(path)
        refs = sum(key.endswith("_ref") for key in attrs)
        assert sum(str(v).count(to_file_uri(path)) for v in attrs.values()) == max(1, refs)
        assert isinstance(attrs["loopscribe.seq.first"], int)
        assert isinstance(attrs["loopscribe.seq.last"], int)
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name == "loopscribe"
    run_span = spans[-1]
    assert (run_span.attributes or {})["gen_ai.agent.name"] == "coder"
    assert (run_span.attributes or {})["gen_ai.operation.name"] == "invoke_agent"


def test_spans_are_timed_by_record_timestamps(
    scenario_file: tuple[Path, Session, list[ReadableSpan]],
) -> None:
    """A span starts at its first record's ts and ends at its last record's ts."""
    path, _, spans = scenario_file
    records = by_seq(path)
    for span in spans:
        attrs = span.attributes or {}
        first, last = attrs["loopscribe.seq.first"], attrs["loopscribe.seq.last"]
        assert isinstance(first, int)
        assert isinstance(last, int)
        assert span.start_time == ns(records[first].ts)
        assert span.end_time == ns(records[last].ts)
        assert records[last].type in {
            "model_exec_end",
            "tool_exec_end",
            "turn_end",
            "agent_end",
            "context_transform_end",
            "run_close",
        }


def test_live_equals_replay(scenario_file: tuple[Path, Session, list[ReadableSpan]]) -> None:
    """Replaying the file emits the live spans, field for field and in the same order."""
    path, _, live = scenario_file
    assert as_json(replayed(path)) == as_json(live)


def test_no_body_reaches_a_span(session_path: Path) -> None:
    """No canary planted in any body appears in any span field, live, replayed or encoded."""
    canary = Canaries()
    _, live = record_file(
        session_path,
        lambda run: record_scenario(run, canary),
        metadata={"note": canary("session-metadata")},
    )
    text = session_path.read_text()
    # Every body was recorded, except the credential and the transient updates ...
    unrecorded = {where for where, value in canary.planted.items() if value not in text}
    assert unrecorded == {"api-key", "delta", "progress"}
    assert len(canary.planted) > 20
    # ... and none left the file.
    exported = "\n".join(as_json(live)) + encode_otlp_json(live).decode()
    exported += "\n".join(as_json(replayed(session_path)))
    leaked = [where for where, value in canary.planted.items() if value in exported]
    assert leaked == []
    assert "gpt-test-2026" in exported  # the search did look at real span content
    assert span_tree(live) == EXPECTED_TREE


@pytest.mark.parametrize("flags", [TraceFlags.SAMPLED, TraceFlags.DEFAULT])
def test_run_joins_a_host_traceparent(session_path: Path, flags: int) -> None:
    """begin_run(parent=traceparent) joins the host trace, live and on replay, even unsampled."""
    traceparent = f"00-{HOST_TRACE:032x}-{HOST_SPAN:016x}-{flags:02x}"
    _, live = record_file(session_path, lambda run: record_scenario(run, plain), parent=traceparent)
    assert span_tree(live) == EXPECTED_TREE  # the file is complete, so its spans are too
    run_span = live[-1]
    assert run_span.parent == SpanContext(
        HOST_TRACE, HOST_SPAN, is_remote=True, trace_flags=TraceFlags(flags)
    )
    assert {s.context.trace_id for s in live if s.context} == {HOST_TRACE}
    assert as_json(replayed(session_path)) == as_json(live)


def test_run_joins_a_host_otel_context(session_path: Path) -> None:
    """begin_run(parent=Context) nests the run under a real SDK span, live and on replay."""
    captured = captured_spans()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(captured.processor)
    tracer = provider.get_tracer("host")
    bridge = SpanBridge(captured.processor, file_uri=session_path)
    with (
        Session.create(session_path, observers=[bridge]) as session,
        tracer.start_as_current_span("host request") as host,
        session.begin_run(parent=otel_context.get_current()) as run,
    ):
        record_scenario(run, plain)
    provider.shutdown()
    host_ctx = host.get_span_context()
    assert span_tree(captured.spans) == "host request\n" + "\n".join(
        "  " + line for line in EXPECTED_TREE.splitlines()
    )
    ours = [s for s in captured.spans if s.name != "host request"]
    assert {s.context.trace_id for s in ours if s.context} == {host_ctx.trace_id}
    assert ours[-1].parent is not None
    assert ours[-1].parent.span_id == host_ctx.span_id
    assert as_json(replayed(session_path)) == as_json(ours)


def test_open_executions_end_at_run_close(session_path: Path) -> None:
    """Attempts still open at run_close end there, innermost first, before the run span."""

    def scenario(run: Run) -> None:
        # The scripted clock starts once the run has (its run_start is stamped now), and
        # the run closes on it: no span may start after the run_close it ends at.
        at = Clock()
        turn = Execution("turn_1", "turn")
        run.record(ev.turn_start(turn, 1, timestamp=at()))
        tool = Execution("t", "tool", parent_id="turn_1")
        run.record(ev.tool_exec_start(tool, "sleep", {}, timestamp=at()))
        run.close(timestamp=at())

    _, live = record_file(session_path, scenario)
    assert [s.name for s in live] == ["execute_tool sleep", "turn", "invoke_agent"]
    close = next(r for r in read(session_path) if r.type == "run_close")
    for span in live:
        assert span.end_time == ns(close.ts)
        assert span.status.status_code is StatusCode.UNSET
    assert (live[0].attributes or {})["loopscribe.incomplete"] is True
    assert {(s.attributes or {})["loopscribe.seq.last"] for s in live} == {close.seq}
    assert "loopscribe.incomplete" not in (live[2].attributes or {})
    assert as_json(replayed(session_path)) == as_json(live)


def test_children_attach_to_the_latest_parent_attempt(session_path: Path) -> None:
    """A child names its parent's latest attempt; a late record for an ended attempt is ignored."""
    at = Clock()

    def scenario(run: Run) -> None:
        for attempt in (1, 2):
            turn = Execution("turn_1", "turn", attempt=attempt)
            run.record(ev.turn_start(turn, 1, timestamp=at()))
            tool = Execution(f"t{attempt}", "tool", parent_id="turn_1")
            run.record(ev.tool_exec_start(tool, "x", timestamp=at()))
            run.record(ev.tool_exec_end(tool, "x", timestamp=at()))
            run.record(ev.turn_end(turn, 1, timestamp=at()))
        run.record(ev.retry_scheduled(Execution("turn_1", "turn"), next_attempt=2))

    session, live = record_file(session_path, scenario)
    run_id = str((live[-1].attributes or {})["loopscribe.run.id"])
    turns = [s for s in live if s.name == "turn"]
    assert [s.parent.span_id for s in turns if s.parent] == [run_span_id(session.id, run_id)] * 2
    tools = [s for s in live if s.name == "execute_tool x"]
    assert [s.parent.span_id for s in tools if s.parent] == [
        span_id(session.id, run_id, "turn_1", 1),
        span_id(session.id, run_id, "turn_1", 2),
    ]
    assert len(live) == 5


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        pytest.param(
            {"message": AssistantMessage(model="m-1", usage=Usage(7, 3), stop_reason="stop")},
            {"gen_ai.usage.input_tokens": 7, "gen_ai.usage.output_tokens": 3},
            id="usage-inside-typed-message",
        ),
        pytest.param(
            {
                "message": {
                    "model": "gpt-4o-2024",
                    "choices": [{"finish_reason": "length", "message": {"content": "x"}}],
                    "usage": {
                        "prompt_tokens": 50,
                        "completion_tokens": 7,
                        "prompt_tokens_details": {"cached_tokens": 20},
                    },
                }
            },
            {
                "gen_ai.response.model": "gpt-4o-2024",
                "gen_ai.response.finish_reasons": ("length",),
                "gen_ai.usage.input_tokens": 50,
                "gen_ai.usage.output_tokens": 7,
                "gen_ai.usage.cache_read.input_tokens": 20,
            },
            id="openai-chat-completion",
        ),
        pytest.param(
            {"usage": {"input_tokens": 9, "output_tokens": 4}, "stop_reason": "max_tokens"},
            {
                "gen_ai.usage.input_tokens": 9,
                "gen_ai.usage.output_tokens": 4,
                "gen_ai.response.finish_reasons": ("max_tokens",),
            },
            id="plain-usage-dict",
        ),
        pytest.param(
            {"message": orjson.Fragment(b'{"model":"frag-1","usage":{"input_tokens":2}}')},
            {"gen_ai.response.model": "frag-1", "gen_ai.usage.input_tokens": 2},
            id="pre-encoded-fragment",
        ),
        pytest.param(
            # A bare string error may be a message, so only the fallback type is exported.
            {"usage": "not usage", "message": 42, "error": "RateLimit: secret body"},
            {"error.type": "_OTHER", "gen_ai.usage.input_tokens": None},
            id="odd-shapes",
        ),
    ],
)
def test_usage_shapes_live_and_replayed(
    session_path: Path, end: dict[str, Any], expected: dict[str, Any]
) -> None:
    """Model labels are read alike from typed objects, host dicts and raw JSON."""

    def scenario(run: Run) -> None:
        ex = Execution("m", "model")
        run.record(ev.model_exec_start(ex, "m"))
        run.record(Event("model_exec_end", ex, end))

    _, live = record_file(session_path, scenario)
    attrs = dict(live[0].attributes or {})
    assert {k: attrs.get(k) for k in expected} == expected
    assert as_json(replayed(session_path)) == as_json(live)


def test_interrupted_run_live_equals_replay(session_path: Path, tmp_path: Path) -> None:
    """A file cut mid-run replays to the spans the live bridge had emitted, also after reopening."""
    crashed = tmp_path / "crashed.jsonl"
    captured = captured_spans()
    at = Clock()
    with Session.create(session_path, observers=[SpanBridge(captured.processor)]) as session:
        run = session.begin_run()
        run.record(ev.agent_start(Execution("a", "agent"), "coder", timestamp=at()))
        tool = Execution("t1", "tool", parent_id="a")
        run.record(ev.tool_exec_start(tool, "grep", timestamp=at()))
        run.record(ev.tool_exec_end(tool, "grep", timestamp=at()))
        run.record(ev.model_exec_start(Execution("m", "model", parent_id="a"), "x"))
        # The process "dies" here: the file so far, plus a torn final line.
        shutil.copyfile(session_path, crashed)
        with crashed.open("ab") as torn:
            torn.write(b'{"session_id":"')
        live_before_crash = list(captured.spans)
    assert [s.name for s in live_before_crash] == ["execute_tool grep"]

    def replay_crashed() -> list[ReadableSpan]:
        out = captured_spans()
        replay(crashed, out.processor, file_uri=session_path)
        return list(out.spans)

    assert as_json(replay_crashed()) == as_json(_with_file(live_before_crash, session_path))

    # Reopen: a new run with a fresh ID; the old one stays incomplete.
    after = captured_spans()
    with (
        Session.open(crashed, observers=[SpanBridge(after.processor, file_uri=session_path)]) as s,
        s.begin_run() as run,
    ):
        run.record(ev.tool_exec_start(Execution("t2", "tool"), "ls", timestamp=at()))
        run.record(ev.tool_exec_end(Execution("t2", "tool"), "ls", timestamp=at()))
    expected = _with_file(live_before_crash, session_path) + list(after.spans)
    assert as_json(replay_crashed()) == as_json(expected)


def _with_file(spans: list[ReadableSpan], path: Path) -> list[ReadableSpan]:
    """The spans a bridge with ``file_uri=path`` would have made (the crashed bridge had none)."""
    out = captured_spans()
    uri = to_file_uri(path)
    for span in spans:
        attrs = dict(span.attributes or {})
        attrs["loopscribe.file"] = uri
        out.processor.on_end(
            ReadableSpan(
                name=span.name,
                context=span.context,
                parent=span.parent,
                resource=span.resource,
                attributes=attrs,
                kind=span.kind,
                status=span.status,
                start_time=span.start_time,
                end_time=span.end_time,
                instrumentation_scope=span.instrumentation_scope,
            )
        )
    return list(out.spans)


class ExplodingProcessor(SpanProcessor):
    """A processor that refuses every span, as a broken exporter pipeline might."""

    def on_end(self, span: ReadableSpan) -> None:
        """Refuse the span."""
        raise RuntimeError("processor is broken")


def test_bridge_never_raises_into_the_recorder(
    session_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A failing processor or an odd record is logged and counted; recording goes on."""
    bridge = SpanBridge(ExplodingProcessor(), file_uri=session_path)
    with (
        caplog.at_level(logging.ERROR, logger="loopscribe.otel"),
        Session.create(session_path, observers=[bridge]) as session,
        session.begin_run() as run,
    ):
        record_scenario(run, plain)
        no_data: Any = None
        turn = Execution("x", "turn")
        bridge(Record(session.id, 99, "turn_end", datetime.now(UTC), "r", turn, no_data, 0, 0))
    assert session.observer_errors == 0
    assert bridge.dropped_spans == 9
    assert bridge.spans_emitted == 0
    assert bridge.failed_records == 1
    assert "processor is broken" in caplog.text
    assert len(list(read(session_path))) > 20


def test_attribute_limits_are_applied(session_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's span limits, which ReadableSpan bypasses, are applied by the bridge."""
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "6")
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "5")

    def scenario(run: Run) -> None:
        ex = Execution("m", "model")
        run.record(ev.model_exec_start(ex, "a-very-long-model-name"))
        run.record(ev.model_exec_end(ex, model="another-long-name"))

    _, live = record_file(session_path, scenario)
    chat = live[0]
    assert len(chat.attributes or {}) == 5
    assert chat.dropped_attributes > 0
    assert all(len(v) <= 6 for v in (chat.attributes or {}).values() if isinstance(v, str))


def test_attached_bridge_learns_the_file(session_path: Path) -> None:
    """Attached without file_uri, the bridge names the session's file: live equals replay."""
    captured: CapturedSpans = captured_spans()
    bridge = SpanBridge(captured.processor)
    with Session.create(session_path) as session:
        session.add_observer(bridge)  # attached late, still told the file
        with session.begin_run() as run:
            record_scenario(run, plain)
    assert bridge.file == to_file_uri(session_path)
    for span in captured.spans:
        assert span_file(span.attributes or {}) == to_file_uri(session_path)
    assert as_json(replayed(session_path)) == as_json(list(captured.spans))


def test_unattached_bridge_without_file_uri_no_file_references(session_path: Path) -> None:
    """Fed records by hand and never told the file, the bridge leaves file references out."""
    with Session.create(session_path) as session, session.begin_run() as run:
        record_scenario(run, plain)
    captured: CapturedSpans = captured_spans()
    bridge = SpanBridge(captured.processor)
    for record in read(session_path, decode=False):
        bridge(record)
    for span in captured.spans:
        keys = set(span.attributes or {})
        assert not keys & {
            "loopscribe.file",
            "gen_ai.input.messages_ref",
            "gen_ai.output.messages_ref",
        }
    assert span_tree(captured.spans) == EXPECTED_TREE


def test_traced_session_helper_and_span_tree() -> None:
    """loopscribe.testing wires a bridge to a temporary session; span_tree roots orphans."""
    with traced_session() as (session, captured):
        path = session.path
        with session.begin_run() as run:
            record_scenario(run, plain)
        assert path.exists()
        assert span_tree(captured.spans) == EXPECTED_TREE
        assert len(captured.named("chat gpt-test")) == 2
        orphans = [s for s in captured.spans if s.name.startswith(("chat", "execute_tool"))]
        assert span_tree(orphans).splitlines()[0] == "chat gpt-test"
        assert span_file(captured.spans[0].attributes or {}) == to_file_uri(path)
        captured.clear()
        assert captured.spans == ()
    assert not path.exists()


def test_default_resource_is_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default Resource has no random instance ID and honours OTEL_SERVICE_NAME."""
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    assert default_resource().attributes["service.name"] == "loopscribe"
    assert "service.instance.id" not in default_resource().attributes
    monkeypatch.setenv("OTEL_SERVICE_NAME", "my-agent")
    assert default_resource() == default_resource()
    assert default_resource().attributes["service.name"] == "my-agent"


def test_public_names() -> None:
    """loopscribe.otel's __all__ is exactly its public names."""
    public = {name for name in dir(otel) if not name.startswith("_")}
    assert set(otel.__all__) == public
    for name in otel.__all__:
        assert getattr(otel, name).__doc__


def test_span_attributes_need_no_sdk_cleaning(tmp_path: Path) -> None:
    """Without limits the bridge skips BoundedAttributes; its values must already be clean."""
    from opentelemetry.attributes import BoundedAttributes

    from loopscribe import AgentLoop, Session, StreamEnd, ToolCall, Usage
    from loopscribe.otel import replay
    from loopscribe.testing import captured_spans

    class Model:
        name = "m-1"

        def __init__(self) -> None:
            self.steps: list[list[object]] = [
                [ToolCall("c1", "t", {"a": 1}), StreamEnd("tool_use", Usage(3, 4))],
                ["done"],
            ]

        def stream(self, request: object) -> list[object]:
            return self.steps.pop(0)

    path = tmp_path / "s.jsonl"
    with Session.create(path) as s, s.begin_run() as run:
        for event in AgentLoop(Model(), {"t": lambda a: a}).run("hi"):
            run.record(event)
    captured = captured_spans()
    replay(path, captured.processor)
    assert captured.spans
    for span in captured.spans:
        attrs = dict(span.attributes or {})
        assert dict(BoundedAttributes(None, attrs, immutable=True)) == attrs
