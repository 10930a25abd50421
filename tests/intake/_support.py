"""What the intake tests share: a fake OpenAI over httpx, a host pipeline, and the checks.

The provider is faked at the transport (``httpx.MockTransport`` answering
the OpenAI API with canned JSON and SSE streams, tool calls included), so
the real ``openai`` client and the real instrumentations run unchanged.
Every body the fake sends or receives holds a canary string; the checks
look for each one in the session files and for none in what the host's
processor received or what reached an OTLP receiver on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopscribe.cli import main
from loopscribe.intake import OffloadingProcessor
from loopscribe.otel import replay, span_record_data

from ..otlp_receiver import Received, http_receiver

SYSTEM = "CANARY-SYS be brief"
PROMPT = "CANARY-IN what is the weather in Paris?"
ARGS = "CANARY-ARG Paris"
RESULT = "CANARY-RESULT sunny"
REPLY = "CANARY-OUT it is sunny"
STREAMED = "CANARY-STREAM sunny, streamed"
EMBEDDED = "CANARY-EMB a text to embed"
TOOL_DOC = "CANARY-TOOL the weather in a city"
CANARY = b"CANARY-"
REF_PREFIXES = ("gen_ai.", "loopscribe.")
RAW_BODIES = frozenset({"input.value", "output.value", "gen_ai.tool.definitions"})
"""Bodies even where no canary shows: OpenInference's raw request and response (vectors),
tool definitions (a framework's own docstrings)."""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": TOOL_DOC,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


# -- the provider, faked at the transport ----------------------------------------------------


def _completion(model: str, message: dict[str, Any], finish: str, call: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{call}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def _chunks(model: str, tool: bool, call: int) -> list[dict[str, Any]]:
    base = {
        "id": f"chatcmpl-{call}",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if tool:
        arguments = json.dumps({"city": ARGS})
        call_delta = {"id": f"call_s{call}", "type": "function"}
        out.append(
            chunk({"tool_calls": [{"index": 0, **call_delta, "function": {"name": "get_weather"}}]})
        )
        for piece in (arguments[:10], arguments[10:]):
            out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
        out.append(chunk({}, "tool_calls"))
    else:
        out.extend(chunk({"content": piece}) for piece in (STREAMED[:9], STREAMED[9:]))
        out.append(chunk({}, "stop"))
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    out.append({**base, "choices": [], "usage": usage})
    return out


@dataclass
class FakeOpenAI:
    """Answers OpenAI API calls: a tool call when the last message is the user's, else text."""

    requests: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        self.requests.append(body)
        call = len(self.requests)
        model = body.get("model", "gpt-4o-mini")
        if request.url.path.endswith("/embeddings"):
            return httpx.Response(
                200,
                json={
                    "object": "list",
                    "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5]}],
                    "model": model,
                    "usage": {"prompt_tokens": 3, "total_tokens": 3},
                },
            )
        messages = body.get("messages") or [{}]
        tool = bool(body.get("tools")) and messages[-1].get("role") == "user"
        if body.get("stream"):
            lines = "".join(f"data: {json.dumps(c)}\n\n" for c in _chunks(model, tool, call))
            return httpx.Response(
                200,
                content=(lines + "data: [DONE]\n\n").encode(),
                headers={"content-type": "text/event-stream"},
            )
        if tool:
            function = {"name": "get_weather", "arguments": json.dumps({"city": ARGS})}
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{call}", "type": "function", "function": function}],
            }
            return httpx.Response(200, json=_completion(model, message, "tool_calls", call))
        reply = {"role": "assistant", "content": REPLY}
        return httpx.Response(200, json=_completion(model, reply, "stop", call))

    def client(self) -> Any:
        """A real OpenAI client whose requests this fake answers."""
        http: Any = httpx.Client(transport=httpx.MockTransport(self))
        return openai.OpenAI(api_key="sk-test", base_url="http://fake.test/v1", http_client=http)

    def async_client(self) -> Any:
        """The async client, answered the same way."""
        http: Any = httpx.AsyncClient(transport=httpx.MockTransport(self))
        return openai.AsyncOpenAI(
            api_key="sk-test", base_url="http://fake.test/v1", http_client=http
        )


def conversation(client: Any, *, stream: bool) -> None:
    """A tool-calling exchange: the model asks for the tool, gets its result, answers."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": PROMPT},
    ]
    first = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=messages,
        tools=TOOLS,
        temperature=0.2,
    )
    call = first.choices[0].message.tool_calls[0]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": RESULT})
    if stream:
        chunks = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
        )
        for _ in chunks:
            pass
        streamed_tools = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=messages[:2],
            tools=TOOLS,
            stream=True,
        )
        for _ in streamed_tools:
            pass
    else:
        client.chat.completions.create(model="gpt-4o-mini", messages=messages)


# -- the host's pipeline ---------------------------------------------------------------------


class Tee(SpanExporter):
    """Exports to several exporters: what the host's processor received, kept and sent."""

    def __init__(self, *exporters: SpanExporter) -> None:
        self.exporters = exporters

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Export to each; failure if any failed."""
        results = [e.export(spans) for e in self.exporters]
        ok = all(r is SpanExportResult.SUCCESS for r in results)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        """Shut each down."""
        for exporter in self.exporters:
            exporter.shutdown()


@dataclass
class Host:
    """A host's provider: its spans as made (``original``) and as they went on (``downstream``)."""

    directory: Path
    provider: TracerProvider
    original: InMemorySpanExporter
    downstream: InMemorySpanExporter
    processor: OffloadingProcessor | None
    received: Received


def host(directory: Path, received: Received, *, offload: bool = True, **provider: Any) -> Host:
    """A TracerProvider whose spans go through an OffloadingProcessor to memory and OTLP.

    A processor ahead of it keeps the spans as the instrumentation made them.
    """
    tracer_provider = TracerProvider(**provider)
    original = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(original))
    downstream = InMemorySpanExporter()
    wire = OTLPSpanExporter(endpoint=f"{received.endpoint}/v1/traces")
    export: SpanProcessor = SimpleSpanProcessor(Tee(downstream, wire))
    processor = OffloadingProcessor(export, directory) if offload else None
    tracer_provider.add_span_processor(processor or export)
    return Host(directory, tracer_provider, original, downstream, processor, received)


# -- the checks --------------------------------------------------------------------------------


def session_files(directory: Path) -> list[Path]:
    """The session files in a folder."""
    return sorted(p for p in directory.glob("*.jsonl") if not p.name.endswith(".otlp.jsonl"))


def _bytes(spans: Sequence[ReadableSpan]) -> bytes:
    return b"\n".join(orjson.dumps(span_record_data(s)) for s in spans)


def replayed(directory: Path) -> list[ReadableSpan]:
    """Every span a replay of the folder's sessions emits."""
    spans: list[ReadableSpan] = []

    class Keep(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            spans.append(span)

    for path in session_files(directory):
        replay(path, Keep())
    return spans


def by_id(spans: Sequence[ReadableSpan]) -> dict[int, ReadableSpan]:
    """Spans by span ID."""
    return {s.context.span_id: s for s in spans if s.context is not None}


def find(capsys: pytest.CaptureFixture[str], directory: Path, span: ReadableSpan) -> list[Any]:
    """``loopscribe find DIR --trace-id T --span-id S --json``: the records of a span."""
    assert span.context is not None
    capsys.readouterr()
    code = main(
        [
            "--json",
            "find",
            str(directory),
            "--trace-id",
            f"{span.context.trace_id:032x}",
            "--span-id",
            f"{span.context.span_id:016x}",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    return [orjson.loads(line) for line in out.splitlines() if line.strip()]


def check(
    h: Host,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    *,
    bodies: Sequence[str],
    recorded: int,
) -> list[ReadableSpan]:
    """Everything the intake promises a host, checked; returns the spans that went on.

    * every body is in a session file, and none in what went on or over the wire;
    * each span that went on has its instrumentation's IDs, times, status and every
      attribute that held no body; what is added are references only;
    * ``loopscribe find`` by a span's IDs returns its records;
    * replaying the session files gives exactly the recorded spans that went on, and
      ``loopscribe export`` sends them, byte for byte, to an OTLP receiver.
    """
    h.provider.force_flush()
    stored = b"".join(p.read_bytes() for p in session_files(h.directory))
    for body in bodies:
        assert body.encode() in stored, body
    went_on = list(h.downstream.get_finished_spans())
    assert CANARY not in _bytes(went_on)
    wire, _ = h.received.snapshot()
    assert wire, "nothing reached the OTLP receiver"
    assert not any(CANARY in body for body in wire)
    originals = by_id(h.original.get_finished_spans())
    assert set(by_id(went_on)) == set(originals)
    references = []
    for span in went_on:
        assert span.context is not None
        before = originals[span.context.span_id]
        assert (span.name, span.context, span.parent, span.kind) == (
            before.name,
            before.context,
            before.parent,
            before.kind,
        )
        assert (span.start_time, span.end_time, span.status.status_code) == (
            before.start_time,
            before.end_time,
            before.status.status_code,
        )
        assert (span.resource, span.instrumentation_scope, span.links) == (
            before.resource,
            before.instrumentation_scope,
            before.links,
        )
        attributes = dict(span.attributes or {})
        carried = {
            _group(k) for k, v in (before.attributes or {}).items() if CANARY in orjson.dumps(v)
        }
        for key, value in (before.attributes or {}).items():
            if CANARY not in orjson.dumps(value) and _group(key) not in carried | RAW_BODIES:
                assert attributes.get(key) == value, key
        assert all(
            k.startswith(REF_PREFIXES) for k in attributes.keys() - dict(before.attributes or {})
        )
        if "loopscribe.session.id" in attributes:
            references.append(span)
    assert len(references) == recorded
    for span in references:
        records = find(capsys, h.directory, span)
        assert records, span.name
        refs = dict(span.attributes or {})
        assert {r["seq"] for r in records} >= {
            refs["loopscribe.seq.first"],
            refs["loopscribe.seq.last"],
        }
    again = replayed(h.directory)
    assert sorted(map(_span_json, again)) == sorted(map(_span_json, references))
    _exported(h.directory, references, monkeypatch)
    return went_on


def _group(key: str) -> str:
    """An indexed attribute's message or item (``llm.input_messages.0``); else the key itself.

    The parts of a message that held a body (its role, a tool call's ID) go with it.
    """
    parts = key.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return key


def _span_json(span: ReadableSpan) -> bytes:
    return orjson.dumps(span_record_data(span), option=orjson.OPT_SORT_KEYS)


def _exported(
    directory: Path, spans: Sequence[ReadableSpan], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``loopscribe export`` sends each session's spans: the same protobuf as went on."""
    with http_receiver() as received:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", received.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        for path in session_files(directory):
            assert main(["export", str(path)]) == 0
        sent = sorted(s.SerializeToString() for s in received.spans())
    expected = sorted(
        s.SerializeToString()
        for rs in encode_spans(list(spans)).resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    )
    assert sent == expected
