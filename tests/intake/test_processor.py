"""OffloadingProcessor's bookkeeping and its handling of bad input, on hand-made spans.

Spans come from a real SDK ``TracerProvider``; their attributes are set the
way instrumentations set them. Bad input is data: whatever arrives, the span
goes on without the bodies the processor could remove, and nothing raises.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from loopscribe import Record, Redactor, read
from loopscribe.intake import OffloadingProcessor
from loopscribe.intake._book import session_id_for

from ._support import replayed, session_files

MESSAGES = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "CANARY-IN hi"}]}])
REPLY = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "CANARY-OUT yo"}]}])


class Pipe:
    """A provider whose spans go through an OffloadingProcessor into memory."""

    def __init__(self, directory: Path, **provider: Any) -> None:
        self.directory = directory
        self.exporter = InMemorySpanExporter()
        self.processor = OffloadingProcessor(SimpleSpanProcessor(self.exporter), directory)
        self.provider = TracerProvider(**provider)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("test")

    def chat(self, **attributes: Any) -> None:
        """One chat span with these attributes (a user message and a reply by default)."""
        base = {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": MESSAGES,
            "gen_ai.output.messages": REPLY,
        }
        with self.tracer.start_as_current_span("chat m", attributes={**base, **attributes}):
            pass

    @property
    def spans(self) -> list[ReadableSpan]:
        """What went on."""
        return list(self.exporter.get_finished_spans())

    def records(self) -> list[Record]:
        """Every record in the folder's sessions."""
        return [r for p in session_files(self.directory) for r in read(p, decode=False)]


@pytest.fixture
def pipe(tmp_path: Path) -> Iterator[Pipe]:
    """A pipeline into a fresh sessions folder, shut down after the test."""
    p = Pipe(tmp_path / "sessions")
    yield p
    p.provider.shutdown()


def _has_canary(span: ReadableSpan) -> bool:
    return "CANARY" in json.dumps(dict(span.attributes or {}), default=str)


def test_a_span_without_a_body_passes_through_untouched(pipe: Pipe) -> None:
    """No body: the very same span object goes on, and no file is written."""
    seen: list[ReadableSpan] = []

    class Keep(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            seen.append(span)

    processor = OffloadingProcessor(Keep(), pipe.directory)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with provider.get_tracer("t").start_as_current_span(
        "GET /", attributes={"http.method": "GET", "gen_ai.request.model": "m"}
    ):
        pass
    assert len(seen) == 1
    assert seen[0].attributes == {"http.method": "GET", "gen_ai.request.model": "m"}
    assert not pipe.directory.exists()
    assert processor.recorded == 0


def test_malformed_json_goes_on_removed_and_is_kept_in_the_file(
    pipe: Pipe, caplog: pytest.LogCaptureFixture
) -> None:
    """Bad JSON in a content attribute: counted, logged, kept in the file, not on the span."""
    pipe.chat(**{"gen_ai.input.messages": '[{"role": "user", "parts": [CANARY-IN'})
    (span,) = pipe.spans
    assert not _has_canary(span)
    assert pipe.processor.problems == 1
    assert "not valid JSON" in caplog.text
    request = next(r for r in pipe.records() if r.type == "model_request")
    assert request.data["otel"]["gen_ai.input.messages"].startswith('[{"role"')
    assert request.data["problems"]


def test_attributes_cut_by_the_sdk_limits_are_bodies_too(tmp_path: Path) -> None:
    """The SDK's attribute length limit truncates JSON: still recorded as text, still removed."""
    cut = MESSAGES.index("CANARY-IN") + len("CANARY-IN")
    pipe = Pipe(tmp_path, span_limits=SpanLimits(max_span_attribute_length=cut))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(logging.getLogger("opentelemetry.attributes"), "disabled", True)
        pipe.chat()
    (span,) = pipe.spans
    assert not _has_canary(span)
    assert pipe.processor.problems == 1
    stored = b"".join(p.read_bytes() for p in session_files(tmp_path))
    assert b"CANARY-IN" in stored


def test_non_string_values_and_unknown_roles_are_data(pipe: Pipe) -> None:
    """A number where messages belong and a role nobody knows: kept, counted, the span goes on."""
    critic = json.dumps([{"role": "critic", "parts": [{"type": "text", "content": "CANARY-X"}]}])
    pipe.chat(**{"gen_ai.input.messages": critic, "gen_ai.output.messages": 7})
    (span,) = pipe.spans
    assert not _has_canary(span)
    assert "gen_ai.output.messages" not in (span.attributes or {})
    records = pipe.records()
    request = next(r for r in records if r.type == "model_request")
    assert request.data["otel"]["roles"] == [{"message": 0, "role": "critic"}]
    reply = next(r for r in records if r.type == "model_exec_end")
    assert reply.data["otel"]["gen_ai.output.messages"] == 7


def test_a_span_ended_twice_is_recorded_once_and_goes_on_twice(pipe: Pipe) -> None:
    """The same span delivered again gets the same references; other content is attempt 2."""
    pipe.chat()
    original = pipe.exporter.get_finished_spans()[0]
    before = len(pipe.records())
    # The SDK ends a span once; a host (or a second provider) can still deliver it again.
    twice = ReadableSpan(
        name=original.name,
        context=original.context,
        parent=original.parent,
        resource=original.resource,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": MESSAGES,
            "gen_ai.output.messages": REPLY,
        },
        start_time=original.start_time,
        end_time=original.end_time,
        instrumentation_scope=original.instrumentation_scope,
    )
    pipe.processor.on_end(twice)
    first, second = pipe.spans
    assert dict(first.attributes or {}) == dict(second.attributes or {})
    assert len(pipe.records()) == before
    other = ReadableSpan(
        name=original.name,
        context=original.context,
        parent=original.parent,
        attributes={"gen_ai.input.messages": MESSAGES, "gen_ai.output.messages": "[]"},
        start_time=original.start_time,
        end_time=(original.end_time or 0) + 1,
    )
    pipe.processor.on_end(other)
    attempts = {r.execution.attempt for r in pipe.records() if r.execution is not None}
    assert attempts == {1, 2}
    assert (pipe.spans[-1].attributes or {})["loopscribe.attempt"] == 2


def test_a_folder_that_cannot_be_made_loses_no_span_and_keeps_no_body(tmp_path: Path) -> None:
    """The sessions folder is under a file: counted, logged, the span goes on without bodies."""
    (tmp_path / "file").write_text("")
    pipe = Pipe(tmp_path / "file" / "sessions")
    pipe.chat()
    (span,) = pipe.spans
    assert not _has_canary(span)
    assert "loopscribe.session.id" not in (span.attributes or {})
    assert pipe.processor.failed == 1


def test_a_session_file_that_stops_taking_writes(
    pipe: Pipe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk mid-session: the span goes on stripped; the next span opens the file again."""
    pipe.chat()
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    pipe.chat()
    monkeypatch.setattr(os, "write", real_write)
    pipe.chat()
    first, failed, third = pipe.spans
    assert not any(_has_canary(s) for s in (first, failed, third))
    assert "loopscribe.seq.first" not in (failed.attributes or {})
    assert "loopscribe.seq.first" in (third.attributes or {})
    assert pipe.processor.failed == 1
    assert sum(r.type == "host_span" for r in pipe.records()) == 2


def test_a_failing_downstream_never_raises_into_the_host(tmp_path: Path) -> None:
    """The downstream processor raising is counted and logged, not raised."""

    class Broken(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            raise RuntimeError("exporter down")

    processor = OffloadingProcessor(Broken(), tmp_path)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with provider.get_tracer("t").start_as_current_span(
        "chat", attributes={"gen_ai.input.messages": MESSAGES}
    ):
        pass
    assert processor.downstream_errors == 1
    assert processor.recorded == 1


def test_conversations_get_their_own_session_files(pipe: Pipe) -> None:
    """session.id / gen_ai.conversation.id pick the session; a 32-hex ID is the session ID."""
    uuid_hex = "0123456789abcdef0123456789abcdef"
    pipe.chat(**{"session.id": "conv-a"})
    pipe.chat(**{"gen_ai.conversation.id": uuid_hex})
    pipe.chat()
    names = {p.stem for p in session_files(pipe.directory)}
    assert {session_id_for("conv-a"), uuid_hex} < names
    assert len(names) == 3


def test_a_trace_is_a_run_closed_by_its_local_root(pipe: Pipe) -> None:
    """Spans of one trace share a run, nested by parent; the root's end closes it."""
    with pipe.tracer.start_as_current_span("agent", attributes={"input.value": "CANARY-IN go"}):
        pipe.chat()
        pipe.chat()
    records = pipe.records()
    runs = {r.run_id for r in records if r.run_id is not None}
    assert len(runs) == 1
    assert records[-1].type == "run_close"
    root = pipe.spans[-1]
    assert root.context is not None
    parents = {r.execution.parent_id for r in records if r.type == "model_request" and r.execution}
    assert parents == {f"otel:{root.context.span_id:016x}"}
    run_start = next(r for r in records if r.type == "run_start")
    assert run_start.data["traceparent"].split("-")[1] == f"{root.context.trace_id:032x}"


def test_interleaved_traces_take_turns_in_a_session(pipe: Pipe) -> None:
    """Two traces at once in one session: each span in a run of its own trace."""
    first = pipe.tracer.start_span("a", attributes={"input.value": "CANARY-IN a"})
    second = pipe.tracer.start_span("b", attributes={"input.value": "CANARY-IN b"})
    first.end()
    second.end()
    records = pipe.records()
    starts = [r for r in records if r.type == "run_start"]
    assert len(starts) == 2
    assert {r.data["traceparent"].split("-")[1] for r in starts} == {
        f"{s.context.trace_id:032x}" for s in pipe.spans if s.context
    }
    assert sum(r.type == "run_close" for r in records) == 2


def test_a_local_root_names_the_conversation_of_its_trace(pipe: Pipe) -> None:
    """A root that starts with session.id puts its children's spans in that session."""
    with pipe.tracer.start_as_current_span("turn", attributes={"session.id": "conv-b"}):
        pipe.chat()
    (path,) = session_files(pipe.directory)
    assert path.stem == session_id_for("conv-b")


def test_failed_spans_record_the_error(pipe: Pipe) -> None:
    """An ERROR span: the reply so far and the error's type and message in the file."""
    with pipe.tracer.start_as_current_span(
        "chat",
        attributes={"gen_ai.input.messages": MESSAGES, "gen_ai.output.messages": REPLY},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        span.set_attribute("error.type", "TimeoutError")
        span.set_status(Status(StatusCode.ERROR, "timed out"))
    reply = next(r for r in pipe.records() if r.type == "model_exec_end")
    assert reply.data["error"] == {"type": "TimeoutError", "message": "timed out"}
    assert reply.data["partial_message"]["content"][0]["text"] == "CANARY-OUT yo"
    assert pipe.spans[0].status.status_code is StatusCode.ERROR


def test_secrets_are_redacted_in_the_file(tmp_path: Path) -> None:
    """A Redactor given to the processor scrubs the records, as for any session."""
    secret = "sk-abcdefghijklmnopqrstuvwxyz"
    processor = OffloadingProcessor(
        SimpleSpanProcessor(InMemorySpanExporter()), tmp_path / "r", redact=Redactor([secret])
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    body = json.dumps([{"role": "user", "parts": [{"type": "text", "content": f"key {secret}"}]}])
    with provider.get_tracer("t").start_as_current_span(
        "chat", attributes={"gen_ai.input.messages": body}
    ):
        pass
    stored = b"".join(p.read_bytes() for p in session_files(tmp_path / "r"))
    assert secret.encode() not in stored
    assert b"[REDACTED]" in stored


def test_a_conversation_another_process_writes_gets_a_session_of_this_process(
    pipe: Pipe,
) -> None:
    """The conversation's file is locked by another live writer: this process records apart."""
    pipe.directory.mkdir(parents=True)
    path = pipe.directory / f"{session_id_for('conv-c')}.jsonl"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from loopscribe import Session; "
            f"s = Session.create({str(path)!r}, session_id={session_id_for('conv-c')!r}); "
            "print('ready', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        pipe.chat(**{"session.id": "conv-c"})
    finally:
        holder.communicate("")
    own = [p for p in session_files(pipe.directory) if p != path]
    assert len(own) == 1
    start = next(iter(read(own[0], decode=False)))
    assert start.data["metadata"]["conversation_id"] == "conv-c"
    assert (pipe.spans[0].attributes or {})["loopscribe.session.id"] == own[0].stem


def test_replay_gives_back_what_went_on(pipe: Pipe) -> None:
    """Replaying the session files gives exactly the spans that went on, IDs and all."""
    with pipe.tracer.start_as_current_span("agent", attributes={"input.value": "CANARY-IN go"}):
        pipe.chat(**{"custom.label": ("a", "b"), "nan.ok": float("nan")})
    went_on = {s.context.span_id: s for s in pipe.spans if s.context}
    again = {s.context.span_id: s for s in replayed(pipe.directory) if s.context}
    assert went_on.keys() == again.keys()
    for span_id, span in went_on.items():
        back = again[span_id]
        assert (back.name, back.context, back.parent, back.kind) == (
            span.name,
            span.context,
            span.parent,
            span.kind,
        )
        assert json.dumps(dict(back.attributes or {}), default=repr) == json.dumps(
            dict(span.attributes or {}), default=repr
        )
