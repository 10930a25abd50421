"""Benchmark: the OpenTelemetry bridge against baselines measured in the same run.

1. Recording cost per event with a ``SpanBridge`` observer against the
   recorder alone, for three processors: ``SimpleSpanProcessor`` with a no-op
   exporter, ``BatchSpanProcessor`` with a discard exporter, and
   ``default_processor`` writing OTLP JSON lines to ``/dev/null``. ``cpu`` is
   the whole process's CPU time until the processor is flushed, so it
   includes what batch processors do on their worker thread.
2. Bridge cost per span against the SDK's own tracer creating the same spans
   (``start_span(name, attributes=...)`` / ``end()``, same names, kinds,
   attributes, times, parents and Resource, ``SimpleSpanProcessor`` with a
   no-op exporter). The bridge is fed pre-built Records, read back from a
   recorded file (as ``replay`` does) or captured live (typed data), so
   recording is not timed: cost per span = feeding time / spans produced.
3. OTLP protobuf bytes per model call against the same call exported the way
   content-capturing instrumentations do it: its messages as span attributes,
   either ``gen_ai.input.messages`` / ``gen_ai.output.messages`` JSON strings
   or the older ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*`` flattening.
4. A collector that is down (a closed port on 127.0.0.1): per-event
   recording latency with the bridge and ``default_processor`` against no
   bridge, and how long ``session.close()`` and ``processor.shutdown()`` take
   against the configured export timeout.
5. OTLP bytes and encode time per span against the previous attribute layout
   (the session ID under a third name, ``loopscribe.session.id``, and
   ``loopscribe.file`` beside the ``*_ref`` URIs on chat spans), rebuilt from
   the same spans and encoded interleaved with them.
6. A live model call end to end, as a host makes it: build the events
   (``model_exec_start``, a ``model_request`` of 20 messages, ~26 KB, frozen
   by ``events.model_request``, and ``model_exec_end``), ``Run.record``
   them into a session file with a ``SpanBridge`` to a ``BatchSpanProcessor``
   whose exporter encodes each batch as the OTLP protobuf request (and sends
   nothing), with ``encode_otlp_protobuf`` as loopscribe's OTLP exporters
   do. Against the same call made the "bodies in attributes" way: an SDK
   tracer span with the same GenAI labels plus ``gen_ai.input.messages`` /
   ``gen_ai.output.messages`` JSON (messages converted and serialized by the
   host, with orjson; and, for reference, with the standard library's
   ``json.dumps``), to the same processor, encoded by the SDK's encoder as
   the SDK's exporters do. For comparison, in the same passes: our call
   with its span encoded by the SDK's encoder, and the recording alone (no
   bridge, no span). They take turns every 20 calls, each chunk timed until
   its processor is flushed; the figures are the best (and the median) of
   each chunk across passes, summed. Process CPU time (which counts the
   processor's worker thread and not time spent descheduled) is the figure
   the target is checked on. Also in the same passes: our call with the
   bridge's GenAI metrics on (token usage, operation duration) recorded into
   an SDK ``MeterProvider`` with exemplars, against our call without them
   (target: at most 5% more); the provider's reader exports once at the end
   of a pass, as a periodic reader would every minute.
7. loopscribe's OTLP encoders against the SDK's on the bridge's spans, in
   requests of 512: ``encode_otlp_protobuf`` against
   ``encode_spans(...).SerializeToString()``, and ``encode_otlp_json`` (the
   embedded default's lines) against the SDK's request through protobuf's
   JSON mapping; both pairs checked byte-identical first.

Files live in a temporary folder; the only network traffic is connection
attempts to a closed loopback port. Every processor, exporter and thread the
benchmark starts is shut down before it returns.

Run: ``.venv/bin/python benchmarks/bridge.py [--turns N] [--reps N] [--profile]
[--only model-call|spans]``
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import cProfile
import gc
import importlib
import json
import logging
import os
import pstats
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanKind
from opentelemetry.util.types import AttributeValue

from benchmarks._workload import build_events, median, percentile, scratch_dir
from loopscribe import (
    AssistantMessage,
    Event,
    Execution,
    Record,
    Session,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    read,
)
from loopscribe import events as ev
from loopscribe.otel import (
    SpanBridge,
    default_processor,
    default_resource,
    encode_otlp_json,
    encode_otlp_protobuf,
)

SPAN_TARGET = 1.0
"""Bridge cost per span at most the SDK tracer's."""
BYTES_TARGET = 0.10
"""OTLP bytes per model call at most 10% of the content-in-attributes export."""
SHUTDOWN_TARGET = 1.2
"""With the collector down, shutdown takes at most this many export timeouts."""
NEVER_WAITED_S = 0.1
"""A record slower than this (a tenth of a typical export timeout) waited on export."""
BATCH_SPANS = 512
"""Spans per OTLP request, as BatchSpanProcessor sends them by default."""

_OTLP_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_SDK_DISABLED",
)
_LIFECYCLE_RECORDS = 3  # session_start, run_start, run_close
_REF_PREFIX = "loopscribe."
_REF_SUFFIX = "_ref"


class NoopExporter(SpanExporter):
    """Accepts every batch and keeps nothing: the cheapest exporter there is."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Discard ``spans``."""
        return SpanExportResult.SUCCESS


@contextlib.contextmanager
def environ(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for ``None``, remove) environment variables; restore them afterwards."""
    saved = {name: os.environ.get(name) for name in values}

    def apply(items: Mapping[str, str | None]) -> None:
        for name, value in items.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    apply(values)
    try:
        yield
    finally:
        apply(saved)


def us(ns: float) -> str:
    """Nanoseconds as microseconds, for a table."""
    return f"{ns / 1000:.1f}"


def signed_us(ns: float) -> str:
    """A difference in nanoseconds as signed microseconds."""
    return f"{ns / 1000:+.1f}"


# -- 1 and 4: recording passes -------------------------------------------------

ProcessorFactory = Callable[[Path], SpanProcessor]


@dataclass(slots=True)
class Pass:
    """What one recording pass measured."""

    total_ns: int
    cpu_ns: int
    latencies_ns: list[int]
    close_ns: int = 0
    shutdown_ns: int = 0
    spans: int = 0
    not_exported: int | None = None


def record_pass(
    path: Path,
    events: list[Event],
    make_processor: ProcessorFactory | None,
    *,
    per_event: bool,
    flush: bool,
) -> Pass:
    """Record ``events`` into a new file, with a bridge if ``make_processor`` is given.

    Timed: the ``record`` calls (in total, or one by one with ``per_event``),
    the process CPU until the processor is flushed (if ``flush``),
    ``session.close()`` and ``processor.shutdown()``. Not timed: opening.
    """
    processor = None if make_processor is None else make_processor(path)
    bridge = None if processor is None else SpanBridge(processor, file_uri=path)
    session = Session.create(path, observers=() if bridge is None else (bridge,))
    run = session.begin_run()
    record = run.record
    clock = time.perf_counter_ns
    latencies: list[int] = []
    gc.collect()
    cpu_start = time.process_time_ns()
    if per_event:
        append = latencies.append
        for event in events:
            start = clock()
            record(event)
            append(clock() - start)
        total = sum(latencies)
    else:
        start = clock()
        for event in events:
            record(event)
        total = clock() - start
    if flush and processor is not None:
        processor.force_flush()
    cpu = time.process_time_ns() - cpu_start
    start = clock()
    session.close()
    close_ns = clock() - start
    result = Pass(total, cpu, latencies, close_ns)
    if session.next_seq != len(events) + _LIFECYCLE_RECORDS:
        expected = len(events) + _LIFECYCLE_RECORDS
        raise RuntimeError(f"{path}: {session.next_seq} records written, expected {expected}")
    if processor is not None and bridge is not None:
        start = clock()
        processor.shutdown()
        result.shutdown_ns = clock() - start
        if bridge.failed_records or bridge.dropped_spans:
            raise RuntimeError(
                f"bridge failed on {bridge.failed_records} records, {bridge.dropped_spans} spans"
            )
        result.spans = bridge.spans_emitted
        # default_processor's BatchSpanProcessor counts what never left the process.
        dropped: Any = getattr(processor, "dropped_spans", None)
        result.not_exported = dropped if isinstance(dropped, int) else None
    path.unlink()
    return result


def bench_recording(folder: Path, events: list[Event], reps: int) -> None:
    """Section 1: recording cost per event with and without the bridge (no target)."""
    setups: list[tuple[str, ProcessorFactory | None]] = [
        ("recorder alone", None),
        (
            "bridge + SimpleSpanProcessor(no-op exporter)",
            lambda _: SimpleSpanProcessor(NoopExporter()),
        ),
        (
            "bridge + BatchSpanProcessor(discard exporter)",
            lambda _: BatchSpanProcessor(NoopExporter()),
        ),
        (
            "bridge + default_processor (OTLP JSON > /dev/null)",
            lambda path: default_processor(path, export_path=os.devnull),
        ),
    ]
    path = folder / "record.jsonl"
    n = len(events)
    for _, make in setups:  # warm-up: imports, caches, allocator, file-system paths
        record_pass(path, events, make, per_event=False, flush=True)
    wall: list[list[float]] = [[] for _ in setups]
    cpu: list[list[float]] = [[] for _ in setups]
    spans = 0
    for _ in range(reps):
        # Interleaved, so drift in the machine's speed hits every setup alike.
        for index, (_, make) in enumerate(setups):
            measured = record_pass(path, events, make, per_event=False, flush=True)
            wall[index].append(measured.total_ns / n)
            cpu[index].append(measured.cpu_ns / n)
            spans = max(spans, measured.spans)
    base_wall, base_cpu = median(wall[0]), median(cpu[0])
    print(
        f"1. recording cost per event: median of {reps} interleaved passes "
        "(cpu: whole process until the processor is flushed)"
    )
    for index, (label, _) in enumerate(setups):
        w, c = median(wall[index]), median(cpu[index])
        line = f"  {label:<52} {us(w):>6} us/event, cpu {us(c):>6} us"
        if index:
            line += (
                f"  -> {w / base_wall:.2f}x ({signed_us(w - base_wall)} us/event, "
                f"{signed_us((w - base_wall) * n / spans)} us/span; cpu {c / base_cpu:.2f}x)"
            )
        print(line)
    bridge_wall = median(wall[1])
    print(
        f"bridge per event: {us(bridge_wall)} us vs recorder alone {us(base_wall)} us -> "
        f"{bridge_wall / base_wall:.2f}x ({signed_us(bridge_wall - base_wall)} us/event; no target)"
    )


# -- 2: per span against the SDK tracer ------------------------------------------


@dataclass(frozen=True, slots=True)
class SpanArgs:
    """What ``Tracer.start_span`` needs to make the same span the bridge made."""

    name: str
    context: Context
    kind: SpanKind
    attributes: dict[str, AttributeValue]
    start_ns: int
    end_ns: int


def sdk_args(spans: Sequence[ReadableSpan]) -> list[SpanArgs]:
    """The tracer's arguments for ``spans``; the parent contexts are built here, untimed."""
    out = []
    for span in spans:
        parent = span.parent
        context = (
            Context() if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))
        )
        out.append(
            SpanArgs(
                span.name,
                context,
                span.kind,
                dict(span.attributes or {}),
                span.start_time or 0,
                span.end_time or 0,
            )
        )
    return out


def sdk_pass(tracer: trace.Tracer, args: list[SpanArgs]) -> int:
    """Create and end every span with the SDK tracer; total ns."""
    start_span = tracer.start_span
    clock = time.perf_counter_ns
    gc.collect()
    start = clock()
    for a in args:
        span = start_span(
            a.name, context=a.context, kind=a.kind, attributes=a.attributes, start_time=a.start_ns
        )
        span.end(end_time=a.end_ns)
    return clock() - start


def bridge_pass(
    records: list[Record], resource: Resource, file_uri: Path, expected_spans: int
) -> int:
    """Feed ``records`` through a fresh bridge with a no-op exporter; total ns."""
    bridge = SpanBridge(SimpleSpanProcessor(NoopExporter()), resource=resource, file_uri=file_uri)
    clock = time.perf_counter_ns
    gc.collect()
    start = clock()
    for record in records:
        bridge(record)
    elapsed = clock() - start
    if bridge.spans_emitted != expected_spans or bridge.failed_records:
        raise RuntimeError(
            f"bridge made {bridge.spans_emitted} spans, expected {expected_spans}; "
            f"{bridge.failed_records} records failed"
        )
    return elapsed


@dataclass(slots=True)
class Reference:
    """One recorded file and what the bridge made of it."""

    path: Path
    live: list[Record] = field(default_factory=list)
    replayed: list[Record] = field(default_factory=list)
    decoded: list[Record] = field(default_factory=list)
    spans: list[ReadableSpan] = field(default_factory=list)
    resource: Resource = field(default_factory=default_resource)


def reference(folder: Path, events: list[Event]) -> Reference:
    """Record ``events`` once, capturing the live Records and the bridge's spans."""
    ref = Reference(folder / "reference.jsonl")
    captured = InMemorySpanExporter()
    processor = SimpleSpanProcessor(captured)
    bridge = SpanBridge(processor, resource=ref.resource, file_uri=ref.path)
    with (
        Session.create(ref.path, observers=(ref.live.append, bridge)) as session,
        session.begin_run() as run,
    ):
        for event in events:
            run.record(event)
    processor.shutdown()
    ref.spans = list(captured.get_finished_spans())
    ref.replayed = list(read(ref.path, decode=False))
    ref.decoded = list(read(ref.path))
    if len(ref.live) != len(ref.replayed) or not ref.spans:
        raise RuntimeError("reference recording is incomplete")
    return ref


def bench_spans(ref: Reference, reps: int, *, profile: bool) -> bool:
    """Section 2: bridge cost per span against the SDK tracer's; whether the target was met."""
    n_spans = len(ref.spans)
    args = sdk_args(ref.spans)
    provider = TracerProvider(resource=ref.resource, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(NoopExporter()))
    tracer = provider.get_tracer("loopscribe.benchmarks")
    passes: dict[str, Callable[[], int]] = {
        "sdk": lambda: sdk_pass(tracer, args),
        "replay": lambda: bridge_pass(ref.replayed, ref.resource, ref.path, n_spans),
        "live": lambda: bridge_pass(ref.live, ref.resource, ref.path, n_spans),
    }
    results: dict[str, list[float]] = {name: [] for name in passes}
    for run in passes.values():  # warm-up
        run()
    for _ in range(reps):
        for name, run in passes.items():
            results[name].append(run() / n_spans)
    provider.shutdown()
    sdk = median(results["sdk"])
    print(
        f"2. cost per span: {n_spans} spans from {len(ref.replayed)} records "
        f"({len(ref.replayed) / n_spans:.1f} records/span), median of {reps} interleaved passes; "
        f"best: replay {us(min(results['replay']))}, live {us(min(results['live']))}, "
        f"SDK {us(min(results['sdk']))} us"
    )
    failed = False
    for name, label in (("replay", "records read back"), ("live", "live records")):
        cost = median(results[name])
        ratio = cost / sdk
        verdict = "PASS" if ratio <= SPAN_TARGET else "FAIL"
        failed = failed or verdict == "FAIL"
        print(
            f"bridge per span ({label}): {us(cost)} us vs SDK tracer {us(sdk)} us -> "
            f"{ratio:.2f}x (target <= {SPAN_TARGET}x) {verdict}"
        )
    if profile or failed:
        profile_bridge(ref)
    return not failed


def profile_bridge(ref: Reference) -> None:
    """cProfile the bridge over the read-back records and print where the time goes."""
    profiler = cProfile.Profile()
    bridges = [
        SpanBridge(SimpleSpanProcessor(NoopExporter()), resource=ref.resource, file_uri=ref.path)
        for _ in range(5)
    ]
    profiler.enable()
    for bridge in bridges:
        for record in ref.replayed:
            bridge(record)
    profiler.disable()
    print("  profile of the bridge over the read-back records (5 passes), by own time:")
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.strip_dirs().sort_stats("tottime").print_stats(16)


# -- 3: bytes per model call -----------------------------------------------------


def _parts(content: Any) -> list[dict[str, Any]]:
    """GenAI-convention message parts of a message's content."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextContent):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, ThinkingContent):
            parts.append({"type": "reasoning", "content": block.thinking})
        elif isinstance(block, ToolCall):
            parts.append(
                {
                    "type": "tool_call",
                    "id": block.id,
                    "name": block.name,
                    "arguments": block.arguments,
                }
            )
        else:
            raise TypeError(f"no GenAI part for {type(block).__name__}")
    return parts


def genai_message(message: Any) -> dict[str, Any]:
    """A recorded message in the ``gen_ai.input.messages`` shape."""
    if isinstance(message, ToolResultMessage):
        text = "".join(part["content"] for part in _parts(message.content))
        response = {"type": "tool_call_response", "id": message.tool_call_id, "response": text}
        return {"role": "tool", "parts": [response]}
    if isinstance(message, UserMessage | AssistantMessage | SystemMessage):
        return {"role": message.role, "parts": _parts(message.content)}
    if isinstance(message, Mapping) and message.get("role") == "tool":
        response = {
            "type": "tool_call_response",
            "id": message["tool_call_id"],
            "response": message["content"],
        }
        return {"role": "tool", "parts": [response]}
    if isinstance(message, Mapping):
        return {"role": message["role"], "parts": _parts(message["content"])}
    raise TypeError(f"no GenAI message for {type(message).__name__}")


def messages_attributes(
    history: Sequence[Any], reply: Any, finish_reason: str
) -> dict[str, AttributeValue]:
    """Content as current instrumentations capture it: two JSON strings."""
    output = {**genai_message(reply), "finish_reason": finish_reason}
    return {
        "gen_ai.input.messages": orjson.dumps([genai_message(m) for m in history]).decode(),
        "gen_ai.output.messages": orjson.dumps([output]).decode(),
    }


def _flatten(prefix: str, message: dict[str, Any], out: dict[str, AttributeValue]) -> None:
    out[f"{prefix}.role"] = message["role"]
    texts = [p["content"] for p in message["parts"] if p["type"] in ("text", "reasoning")]
    if texts:
        out[f"{prefix}.content"] = "".join(texts)
    calls = [p for p in message["parts"] if p["type"] == "tool_call"]
    for index, call in enumerate(calls):
        out[f"{prefix}.tool_calls.{index}.id"] = call["id"]
        out[f"{prefix}.tool_calls.{index}.name"] = call["name"]
        out[f"{prefix}.tool_calls.{index}.arguments"] = orjson.dumps(call["arguments"]).decode()
    for part in message["parts"]:
        if part["type"] == "tool_call_response":
            out[f"{prefix}.tool_call_id"] = part["id"]
            out[f"{prefix}.content"] = part["response"]


def flattened_attributes(
    history: Sequence[Any], reply: Any, finish_reason: str
) -> dict[str, AttributeValue]:
    """Content the older way: ``gen_ai.prompt.N.*`` and ``gen_ai.completion.0.*``."""
    out: dict[str, AttributeValue] = {}
    for index, message in enumerate(history):
        _flatten(f"gen_ai.prompt.{index}", genai_message(message), out)
    _flatten("gen_ai.completion.0", genai_message(reply), out)
    out["gen_ai.completion.0.finish_reason"] = finish_reason
    return out


ContentAttributes = Callable[[Sequence[Any], Any, str], dict[str, AttributeValue]]


def with_content(span: ReadableSpan, content: dict[str, AttributeValue]) -> ReadableSpan:
    """The same span as a content-capturing instrumentation would export it.

    It keeps the GenAI labels (model, provider, usage, finish reasons,
    conversation) and drops loopscribe's references (``loopscribe.*``,
    ``*_ref``, ``session.id``), which such an instrumentation does not have,
    so the baseline is as small as it can be.
    """
    attributes = {
        key: value
        for key, value in (span.attributes or {}).items()
        if not key.startswith(_REF_PREFIX) and not key.endswith(_REF_SUFFIX) and key != "session.id"
    }
    attributes.update(content)
    return with_attributes(span, attributes)


def otlp_bytes(spans: Sequence[ReadableSpan]) -> int:
    """Bytes of the OTLP protobuf requests for ``spans``, sent in batches as BSP does."""
    total = 0
    for start in range(0, len(spans), BATCH_SPANS):
        total += len(encode_spans(spans[start : start + BATCH_SPANS]).SerializeToString())
    return total


def bench_bytes(ref: Reference) -> bool:
    """Section 3: OTLP bytes per model call, references against content; target met?"""
    requests: dict[str, Any] = {}
    replies: dict[str, tuple[Any, str]] = {}
    for record in ref.decoded:
        if record.execution is None or record.execution.kind != "model":
            continue
        if record.type == ev.MODEL_REQUEST:
            requests[record.execution.id] = record.data["messages"]
        elif record.type == ev.MODEL_EXEC_END:
            reason = record.data.get("stop_reason") or "stop"
            replies[record.execution.id] = (record.data["message"], str(reason))
    chats = [s for s in ref.spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    calls = len(chats)
    if calls != len(requests) or calls != len(replies):
        raise RuntimeError(f"{calls} chat spans for {len(requests)} model requests")
    ours = otlp_bytes(chats) / calls
    history = median([float(len(messages)) for messages in requests.values()])
    print(
        f"3. OTLP protobuf bytes per model call: {calls} calls, median history "
        f"{history:.0f} messages, requests of up to {BATCH_SPANS} spans"
    )
    baselines: list[tuple[str, ContentAttributes]] = [
        ("gen_ai.input/output.messages", messages_attributes),
        ("gen_ai.prompt.N flattening", flattened_attributes),
    ]
    passed = True
    for label, make in baselines:
        content_spans = []
        for span in chats:
            execution_id = str((span.attributes or {})["loopscribe.execution.id"])
            reply, reason = replies[execution_id]
            content_spans.append(with_content(span, make(requests[execution_id], reply, reason)))
        theirs = otlp_bytes(content_spans) / calls
        ratio = ours / theirs
        verdict = "PASS" if ratio <= BYTES_TARGET else "FAIL"
        passed = passed and verdict == "PASS"
        print(
            f"bytes per model call: bridge {ours:,.0f} B vs content in {label} {theirs:,.0f} B "
            f"-> {ratio:.1%} (target <= {BYTES_TARGET:.0%}) {verdict}"
        )
    all_bytes = otlp_bytes(ref.spans)
    records = len(ref.replayed)
    file_bytes = ref.path.stat().st_size
    print(
        f"  all {len(ref.spans)} bridge spans: {all_bytes / records:,.0f} B per record "
        f"({all_bytes / file_bytes:.2%} of the session file's {file_bytes / records:,.0f} B "
        "per record)"
    )
    return passed


# -- 5: span size: each reference once ------------------------------------------------


def previous_layout(span: ReadableSpan) -> ReadableSpan:
    """The same span with the references the bridge used to repeat.

    Until each reference was written once, every span also carried the
    session ID as ``loopscribe.session.id`` (a third name beside
    ``gen_ai.conversation.id`` and ``session.id``) and every span, chat spans
    included, carried ``loopscribe.file`` beside the ``*_ref`` URIs that
    already name the file.
    """
    attributes = dict(span.attributes or {})
    attributes["loopscribe.session.id"] = attributes["session.id"]
    ref = attributes.get("gen_ai.input.messages_ref") or attributes.get(
        "gen_ai.output.messages_ref"
    )
    if "loopscribe.file" not in attributes and isinstance(ref, str):
        attributes["loopscribe.file"] = ref.partition("#")[0]
    return with_attributes(span, attributes)


def with_attributes(span: ReadableSpan, attributes: dict[str, AttributeValue]) -> ReadableSpan:
    """A copy of ``span`` with other attributes."""
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def sdk_encoding(spans: Sequence[ReadableSpan]) -> bytes:
    """The OTLP protobuf request the SDK's exporters send."""
    return bytes(encode_spans(spans).SerializeToString())


def encode_ns(
    spans: Sequence[ReadableSpan],
    encode: Callable[[Sequence[ReadableSpan]], bytes] = sdk_encoding,
) -> float:
    """Nanoseconds to encode ``spans``, 512 a request, by the SDK's encoder unless ``encode``."""
    start = time.perf_counter_ns()
    for first in range(0, len(spans), BATCH_SPANS):
        encode(spans[first : first + BATCH_SPANS])
    return float(time.perf_counter_ns() - start)


def sdk_json_line(spans: Sequence[ReadableSpan]) -> bytes:
    """The OTLP JSON line the SDK's objects give: its request through protobuf's JSON mapping."""
    json_format: Any = importlib.import_module("google.protobuf.json_format")
    request = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in request.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                for item in (span, *span.get("links", ())):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in item:
                            item[key] = base64.b64decode(item[key]).hex()
    return orjson.dumps(request, option=orjson.OPT_APPEND_NEWLINE)


def bench_encoders(ref: Reference, reps: int) -> None:
    """Section 7: loopscribe's OTLP encoders against the SDK's, on the bridge's spans."""
    spans = ref.spans
    if encode_otlp_protobuf(spans) != sdk_encoding(spans):
        raise RuntimeError("encode_otlp_protobuf differs from the SDK's bytes")
    if encode_otlp_json(spans) != sdk_json_line(spans):
        raise RuntimeError("encode_otlp_json differs from the SDK's request as JSON")
    times: dict[str, list[float]] = {"sdk": [], "ours": [], "sdk-json": [], "json": []}
    encoders: dict[str, Callable[[Sequence[ReadableSpan]], bytes]] = {
        "sdk": sdk_encoding,
        "ours": encode_otlp_protobuf,
        "sdk-json": sdk_json_line,
        "json": encode_otlp_json,
    }
    for _ in range(reps):  # interleaved
        for name, encode in encoders.items():
            times[name].append(encode_ns(spans, encode) / len(spans))
    per = {name: median(values) for name, values in times.items()}
    print(f"7. OTLP encoding of the bridge's spans ({len(spans)} spans, median of {reps})")
    print(
        f"encode_otlp_protobuf: {us(per['ours'])} vs the SDK's encoder {us(per['sdk'])} us/span "
        f"-> {per['ours'] / per['sdk']:.2f}x (the same bytes)"
    )
    print(
        f"encode_otlp_json (the embedded default): {us(per['json'])} vs the SDK's request "
        f"through protobuf's JSON mapping {us(per['sdk-json'])} us/span -> "
        f"{per['json'] / per['sdk-json']:.2f}x (the same line)"
    )


def bench_span_size(ref: Reference, reps: int) -> None:
    """Section 5: OTLP bytes and encode time per span, now against the previous layout."""
    now = ref.spans
    before = [previous_layout(span) for span in now]
    count = len(now)
    chats = [
        i for i, s in enumerate(now) if (s.attributes or {}).get("gen_ai.operation.name") == "chat"
    ]
    ours_ns: list[float] = []
    theirs_ns: list[float] = []
    for _ in range(reps):  # interleaved, so load on the machine hits both alike
        theirs_ns.append(encode_ns(before))
        ours_ns.append(encode_ns(now))
    bytes_now, bytes_before = otlp_bytes(now) / count, otlp_bytes(before) / count
    chat_now = otlp_bytes([now[i] for i in chats]) / len(chats)
    chat_before = otlp_bytes([before[i] for i in chats]) / len(chats)
    attrs_now = median([float(len(s.attributes or {})) for s in now])
    print(f"5. span size, each reference once, vs the previous layout ({count} spans, {reps} reps)")
    print(
        f"bytes per span: {bytes_now:,.0f} B vs {bytes_before:,.0f} B -> "
        f"{bytes_now / bytes_before:.1%}; chat spans {chat_now:,.0f} B vs {chat_before:,.0f} B "
        f"-> {chat_now / chat_before:.1%}; median {attrs_now:.0f} attributes per span"
    )
    per_now, per_before = median(ours_ns) / count, median(theirs_ns) / count
    print(
        f"encode time per span (median of {reps}): {us(per_now)} vs {us(per_before)} "
        f"-> {per_now / per_before:.1%}"
    )


# -- 6: a live model call, end to end ----------------------------------------------------

MODEL_CALL_TARGET = 0.5
"""A recorded and bridged model call at most half the cost of bodies in span attributes."""
METRICS_TARGET = 1.05
"""The GenAI metrics add at most 5% to a live model call."""
MODEL_CALL_MESSAGES = 20
MODEL_CALL_CHUNK = 20
"""Calls per timed chunk; the processor is flushed at the end of each."""
_CALL_MODEL = "model-x"
_CALL_PROVIDER = "provider-y"


class EncodingExporter(SpanExporter):
    """Encodes every batch as the OTLP protobuf request an exporter sends, and sends nothing."""

    def __init__(self, encode: Callable[[Sequence[ReadableSpan]], bytes] = sdk_encoding) -> None:
        self.spans = 0
        self.bytes = 0
        self._encode = encode

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Encode ``spans`` into one request's bytes, count them, drop them."""
        self.bytes += len(self._encode(spans))
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


@dataclass(frozen=True, slots=True)
class ModelCall:
    """What a host holds for one model call: its own message list, the reply."""

    messages: list[Any]
    reply: AssistantMessage
    finish_reason: str


def model_calls(count: int) -> tuple[list[ModelCall], list[Any], dict[str, Any]]:
    """``count`` model calls with 20-message histories; the tool declarations and config."""
    calls: list[ModelCall] = []
    tools: list[Any] = []
    config: dict[str, Any] = {}
    turns = count + MODEL_CALL_MESSAGES
    request: Mapping[str, Any] | None = None
    for event in build_events(turns):
        if event.type == ev.MODEL_REQUEST:
            request = event.data
        elif event.type == ev.MODEL_EXEC_END and request is not None:
            messages = list(request["messages"])
            if len(messages) == MODEL_CALL_MESSAGES:
                tools = list(request["tools"])
                # The host's config, credentials included: freezing removes them.
                config = {**request["config"], "api_key": "sk-not-a-real-key"}
                reply = event.data["message"]
                calls.append(ModelCall(messages, reply, str(event.data["stop_reason"])))
            request = None
    if len(calls) < count:
        raise RuntimeError(f"the workload has {len(calls)} calls of 20 messages, not {count}")
    return calls[:count], tools, config


CallTiming = tuple[int, int]
"""Wall-clock and process CPU ns of one chunk of model calls, until the processor flushed."""


class EncodingMetricExporter(MetricExporter):
    """Encodes each export as the OTLP protobuf request exporters send; keeps the last."""

    def __init__(self) -> None:
        super().__init__()
        self.last: Any = None

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
        from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
        from opentelemetry.sdk.metrics.export import MetricExportResult

        encode_metrics(metrics_data).SerializeToString()
        self.last = metrics_data
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


def recorded_calls(
    path: Path,
    chunks: list[list[ModelCall]],
    tools: list[Any],
    config: dict[str, Any],
    encode: Callable[[Sequence[ReadableSpan]], bytes] | None = encode_otlp_protobuf,
    *,
    metrics: str | None = None,
) -> Iterator[CallTiming]:
    """Each call's events built, recorded and bridged to a batch processor, chunk by chunk.

    Spans are encoded as loopscribe's OTLP exporters encode them, unless ``encode``
    says otherwise; with ``encode=None`` there is no bridge, only the recording.
    Yields each chunk's timing, up to the processor's flush; cleans up when exhausted.
    """
    exporter = EncodingExporter(sdk_encoding if encode is None else encode)
    processor: SpanProcessor = BatchSpanProcessor(exporter)
    provider: Any = None
    embedded: Any = None
    if metrics == "host":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[reader])
    elif metrics == "embedded":
        from loopscribe.otel import EmbeddedMetrics

        metric_exporter = EncodingMetricExporter()
        embedded = EmbeddedMetrics(path, exporter=metric_exporter)
    bridge = SpanBridge(processor, metrics=provider or embedded or False)
    session = Session.create(path, observers=() if encode is None else (bridge,))
    run = session.begin_run()
    record = run.record
    exec_start, request, exec_end = ev.model_exec_start, ev.model_request, ev.model_exec_end
    clock, cpu_clock = time.perf_counter_ns, time.process_time_ns
    number = 0
    for chunk in chunks:
        start, cpu_start = clock(), cpu_clock()
        for call in chunk:
            execution = Execution(f"model_{number}", "model")
            number += 1
            record(exec_start(execution, _CALL_MODEL, provider=_CALL_PROVIDER))
            record(request(execution, call.messages, tools, config, model=_CALL_MODEL))
            reply = call.reply
            record(
                exec_end(
                    execution,
                    message=reply,
                    usage=reply.usage,
                    model=_CALL_MODEL,
                    stop_reason=call.finish_reason,
                )
            )
        processor.force_flush()
        if embedded is not None and chunk is chunks[-1]:
            # The aggregator adds spans up in batches; what it still holds is added
            # (as the next read would) inside the timed work.
            len(embedded.aggregator)
        yield clock() - start, cpu_clock() - cpu_start
    session.close()
    processor.shutdown()
    if provider is not None or embedded is not None:
        # What a periodic reader does every minute, once: collect (and check) the points.
        if provider is not None:
            data = reader.get_metrics_data()
            provider.shutdown()
        else:
            embedded.shutdown()
            data = metric_exporter.last
        counted = sum(
            getattr(p, "count", 0)
            for rm in (data.resource_metrics if data else ())
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "gen_ai.client.operation.duration"
            for p in m.data.data_points
        )
        if counted != number:
            raise RuntimeError(f"metrics counted {counted} of {number} calls")
    if encode is not None and (bridge.failed_records or exporter.spans != number + 1):
        raise RuntimeError(f"bridge made {exporter.spans} spans for {number} calls")
    path.unlink()


def orjson_text(value: Any) -> str:
    """JSON text by orjson: the cheapest way there is to put bodies in attributes."""
    return orjson.dumps(value).decode()


def json_text(value: Any) -> str:
    """JSON text as OpenTelemetry's GenAI instrumentation utility makes it.

    ``opentelemetry-util-genai``'s ``gen_ai_json_dumps``: the standard
    library's encoder, compact separators, bytes as base64.
    """
    return json.dumps(value, separators=(",", ":"), default=_base64_bytes)


def _base64_bytes(value: Any) -> str:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def content_calls(
    chunks: list[list[ModelCall]],
    config: dict[str, Any],
    conversation: str,
    dumps: Callable[[Any], str] = orjson_text,
) -> Iterator[CallTiming]:
    """Each call as an SDK span with its messages as JSON attributes, chunk by chunk."""
    exporter = EncodingExporter()
    processor: SpanProcessor = BatchSpanProcessor(exporter)
    provider = TracerProvider(resource=default_resource(), shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("genai.instrumentation")
    start_span = tracer.start_span
    clock, cpu_clock = time.perf_counter_ns, time.process_time_ns
    for chunk in chunks:
        start, cpu_start = clock(), cpu_clock()
        for call in chunk:
            span = start_span(
                f"chat {_CALL_MODEL}",
                kind=SpanKind.CLIENT,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": _CALL_PROVIDER,
                    "gen_ai.request.model": _CALL_MODEL,
                    "gen_ai.conversation.id": conversation,
                    "gen_ai.request.temperature": config["temperature"],
                    "gen_ai.request.max_tokens": config["max_tokens"],
                    "gen_ai.input.messages": dumps(
                        [genai_message(message) for message in call.messages]
                    ),
                },
            )
            reply = call.reply
            usage = reply.usage
            output = {**genai_message(reply), "finish_reason": call.finish_reason}
            span.set_attributes(
                {
                    "gen_ai.response.model": _CALL_MODEL,
                    "gen_ai.usage.input_tokens": usage.input_tokens if usage else 0,
                    "gen_ai.usage.output_tokens": usage.output_tokens if usage else 0,
                    "gen_ai.response.finish_reasons": (call.finish_reason,),
                    "gen_ai.output.messages": dumps([output]),
                }
            )
            span.end()
        processor.force_flush()
        yield clock() - start, cpu_clock() - cpu_start
    provider.shutdown()
    if exporter.spans != sum(len(chunk) for chunk in chunks):
        raise RuntimeError(f"{exporter.spans} spans exported")


def _best_and_median(passes: list[list[int]], count: int) -> tuple[float, float]:
    """Per call: the best and the median of each chunk across passes, summed over chunks."""
    per_chunk = list(zip(*passes, strict=True))
    best = sum(min(times) for times in per_chunk) / count
    middle = sum(median([float(t) for t in times]) for times in per_chunk) / count
    return best, middle


def metrics_alone(
    folder: Path, calls: list[ModelCall], tools: list[Any], config: dict[str, Any], reps: int = 15
) -> float:
    """CPU per call of the embedded metrics on the bridge's spans of ``calls`` (best of reps)."""
    from loopscribe.otel import MetricsAggregator

    path = folder / "alone.jsonl"
    captured = InMemorySpanExporter()
    processor = SimpleSpanProcessor(captured)
    bridge = SpanBridge(processor, metrics=False)
    with Session.create(path, observers=[bridge]) as session, session.begin_run() as run:
        for number, call in enumerate(calls):
            execution = Execution(f"m{number}", "model")
            run.record(ev.model_exec_start(execution, _CALL_MODEL, provider=_CALL_PROVIDER))
            run.record(ev.model_request(execution, call.messages, tools, config))
            reply = call.reply
            run.record(ev.model_exec_end(execution, message=reply, usage=reply.usage))
    spans = captured.get_finished_spans()
    path.unlink()
    best = float("inf")
    for _ in range(reps):
        aggregator = MetricsAggregator()
        start = time.process_time_ns()
        for span in spans:
            aggregator.record(span)
        best = min(best, time.process_time_ns() - start)
    return best / len(calls)


def _taking_turns(
    make: Callable[[], dict[str, Iterator[CallTiming]]], chunks: int, passes: int
) -> tuple[dict[str, list[list[int]]], dict[str, list[list[int]]]]:
    """Wall and CPU time of each pass's chunks, ``passes`` times after a warm-up.

    ``make`` gives one pass of each kind; they run chunk by chunk in turn, the
    order turning each pass, so a slow spell of the (shared) machine hits all
    alike. Each pass runs its clean-up (and its own checks) when it is done.
    """
    walls: dict[str, list[list[int]]] = {}
    cpus: dict[str, list[list[int]]] = {}
    for rep in range(passes + 1):  # the first pass warms up
        steps = make()
        names = list(steps)
        took: dict[str, list[CallTiming]] = {name: [] for name in names}
        gc.collect()
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for _ in range(chunks):
            for name in order:
                took[name].append(next(steps[name]))
        for step in steps.values():
            next(step, None)
        if rep:
            for name in names:
                walls.setdefault(name, []).append([wall for wall, _ in took[name]])
                cpus.setdefault(name, []).append([cpu for _, cpu in took[name]])
    return walls, cpus


def bench_model_call(folder: Path, count: int, reps: int, *, profile: bool) -> bool:
    """Section 6: a live model call recorded and bridged vs bodies in attributes; target met?"""
    calls, tools, config = model_calls(count)
    chunks = [calls[i : i + MODEL_CALL_CHUNK] for i in range(0, len(calls), MODEL_CALL_CHUNK)]
    path = folder / "calls.jsonl"
    conversation = "0" * 31 + "1"
    walls, cpus = _taking_turns(
        lambda: {
            "recorded": recorded_calls(path, chunks, tools, config),
            "content": content_calls(chunks, config, conversation),
            "content-json": content_calls(chunks, config, conversation, json_text),
            "recorded-sdk": recorded_calls(
                path.with_name("sdk.jsonl"), chunks, tools, config, sdk_encoding
            ),
            "record-only": recorded_calls(
                path.with_name("only.jsonl"), chunks, tools, config, None
            ),
        },
        len(chunks),
        reps,
    )
    with Session.create(path) as session, session.begin_run() as run:
        for number, call in enumerate(calls):
            run.record(ev.model_request(Execution(f"m{number}", "model"), call.messages, tools))
    sizes = [len(line) for line in path.read_bytes().splitlines() if b'"model_request"' in line]
    path.unlink()
    cpu_ours, cpu_ours_mid = _best_and_median(cpus["recorded"], count)
    cpu_theirs, cpu_theirs_mid = _best_and_median(cpus["content"], count)
    wall_ours, _ = _best_and_median(walls["recorded"], count)
    wall_theirs, _ = _best_and_median(walls["content"], count)
    ratio = cpu_ours / cpu_theirs
    verdict = "PASS" if ratio <= MODEL_CALL_TARGET else "FAIL"
    print(
        f"6. a live model call end to end: {count} calls of {MODEL_CALL_MESSAGES} messages "
        f"(request lines {min(sizes) / 1024:.1f}-{max(sizes) / 1024:.1f} KiB, median "
        f"{median([float(n) for n in sizes]) / 1024:.1f} KiB); best and median of {reps} "
        f"passes per chunk of {MODEL_CALL_CHUNK} calls, taking turns"
    )
    print(
        f"model call (build events, record, bridge, batch + OTLP encode): cpu {us(cpu_ours)} us "
        f"vs bodies in attributes {us(cpu_theirs)} us -> {ratio:.2f}x "
        f"(target <= {MODEL_CALL_TARGET}x) {verdict}; median {cpu_ours_mid / cpu_theirs_mid:.2f}x; "
        f"wall {us(wall_ours)} vs {us(wall_theirs)} us -> {wall_ours / wall_theirs:.2f}x"
    )
    cpu_json, _ = _best_and_median(cpus["content-json"], count)
    json_ratio = cpu_ours / cpu_json
    print(
        f"  the same vs bodies serialized as OpenTelemetry's GenAI utility does "
        f"(json.dumps, as gen_ai_json_dumps): {us(cpu_json)} us -> {json_ratio:.2f}x "
        f"(target <= {MODEL_CALL_TARGET}x) "
        f"{'PASS' if json_ratio <= MODEL_CALL_TARGET else 'FAIL'}; "
        "the verdict above, against orjson (the cheapest way to put bodies in attributes), "
        "is the stricter one and the one that counts"
    )
    cpu_sdk, _ = _best_and_median(cpus["recorded-sdk"], count)
    print(
        f"  the same with our spans encoded by the SDK's encoder instead of loopscribe's: "
        f"{us(cpu_sdk)} us -> {cpu_sdk / cpu_theirs:.2f}x"
    )
    cpu_only, _ = _best_and_median(cpus["record-only"], count)
    print(
        f"  of which building and recording the events alone, with no bridge and no span: "
        f"{us(cpu_only)} us -> {cpu_only / cpu_theirs:.2f}x; the bridge, its span and the "
        f"encoding add {us(cpu_ours - cpu_only)} us -> {(cpu_ours - cpu_only) / cpu_theirs:.2f}x"
    )
    metrics_verdict = bench_metrics(path, chunks, tools, config, count, reps)
    aggregate_ns = metrics_alone(folder, calls, tools, config)
    print(
        f"  the embedded metrics alone, fed the {count} calls' finished spans: "
        f"{us(aggregate_ns)} us per call -> {1 + aggregate_ns / cpu_ours:.3f}x of the call"
    )
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in recorded_calls(path, chunks, tools, config):
            pass
        profiler.disable()
        print("  profile of one recorded pass (this thread only), by own time:")
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.strip_dirs().sort_stats("tottime").print_stats(25)
    return verdict == "PASS" and metrics_verdict


def bench_metrics(
    path: Path,
    chunks: list[list[ModelCall]],
    tools: list[Any],
    config: dict[str, Any],
    count: int,
    reps: int,
) -> bool:
    """The GenAI metrics on vs off, in an interleave of their own; target met?

    Only the passes compared take turns here, with a second pass without
    metrics as a control: the other passes of section 6 (bodies in attributes
    of 30 KiB, the SDK's encoder) evict the processor's caches between chunks
    unevenly, which moved this ratio by more than the 5% it is held to. The
    control's ratio to the first (``A/A``) is the noise of the measurement.
    """
    names = ("off", "embedded", "host", "off-again")
    passes = max(reps, 11)
    _, cpus = _taking_turns(
        lambda: {
            name: recorded_calls(
                path.with_name(f"metrics-{name}.jsonl"),
                chunks,
                tools,
                config,
                metrics=None if name.startswith("off") else name,
            )
            for name in names
        },
        len(chunks),
        passes,
    )
    off, off_mid = _best_and_median(cpus["off"], count)
    on, on_mid = _best_and_median(cpus["embedded"], count)
    again, _ = _best_and_median(cpus["off-again"], count)
    host, host_mid = _best_and_median(cpus["host"], count)
    ratio = on / off
    verdict = "PASS" if ratio <= METRICS_TARGET else "FAIL"
    print(
        f"  with the GenAI metrics on, embedded default (token usage, duration; exemplars; "
        f"OTLP-encoded at the end), {passes} passes of these alone: {us(on)} us vs {us(off)} us "
        f"without -> {ratio:.3f}x (target <= {METRICS_TARGET}x) {verdict}; median "
        f"{on_mid / off_mid:.3f}x; A/A (a second pass without, the noise): {again / off:.3f}x"
    )
    print(
        f"  with the metrics through a host's SDK MeterProvider instead (its instruments clean "
        f"and hash each measurement's attributes): {us(host)} us -> {host / off:.3f}x; median "
        f"{host_mid / off_mid:.3f}x"
    )
    return verdict == "PASS"


# -- 4: collector down ------------------------------------------------------------


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (a connection is refused)."""
    for _ in range(10):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(("127.0.0.1", port))
            except ConnectionRefusedError:
                return port
    raise RuntimeError("found no closed port on 127.0.0.1")


def bench_collector_down(folder: Path, events: list[Event], reps: int, timeout_s: float) -> bool:
    """Section 4: recording latency and shutdown time with the collector down; targets met?"""
    port = closed_port()
    endpoint = f"http://127.0.0.1:{port}"
    protocols = ("http/protobuf", "grpc")
    path = folder / "down.jsonl"

    def make(protocol: str) -> ProcessorFactory:
        def factory(session_path: Path) -> SpanProcessor:
            variables = {
                "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
                "OTEL_EXPORTER_OTLP_TIMEOUT": f"{timeout_s:g}",
            }
            with environ(variables):
                return default_processor(session_path)

        return factory

    setups: list[tuple[str, ProcessorFactory | None]] = [("no bridge", None)]
    setups += [(protocol, make(protocol)) for protocol in protocols]
    results: list[list[Pass]] = [[] for _ in setups]
    # The exporters log every failed export; the counts are reported below instead.
    logging.disable(logging.ERROR)
    try:
        for rep in range(reps + 1):  # the first round warms up imports and connections
            for index, (_, factory) in enumerate(setups):
                measured = record_pass(path, events, factory, per_event=True, flush=False)
                if rep:
                    results[index].append(measured)
    finally:
        logging.disable(logging.NOTSET)
    print(
        f"4. collector down: OTLP to {endpoint} (closed), OTEL_EXPORTER_OTLP_TIMEOUT="
        f"{timeout_s:g} s, {reps} passes of {len(events)} events each (latencies pooled)"
    )
    base = sorted(lat for p in results[0] for lat in p.latencies_ns)
    base_p50, base_p99 = percentile(base, 0.5), percentile(base, 0.99)
    base_close = median([float(p.close_ns) for p in results[0]])
    print(
        f"  no bridge: p50 {us(base_p50)} us, p99 {us(base_p99)} us, max {us(base[-1])} us, "
        f"session.close() {base_close / 1e6:.1f} ms"
    )
    passed = True
    for index in range(1, len(setups)):
        protocol, passes = setups[index][0], results[index]
        lat = sorted(latency for p in passes for latency in p.latencies_ns)
        p50, p99, worst = percentile(lat, 0.5), percentile(lat, 0.99), lat[-1]
        waited = "PASS" if worst < NEVER_WAITED_S * 1e9 else "FAIL"
        passed = passed and waited == "PASS"
        print(
            f"collector down ({protocol}): recording p50 {us(p50)} us vs no bridge "
            f"{us(base_p50)} us ({signed_us(p50 - base_p50)} us), p99 {us(p99)} vs "
            f"{us(base_p99)} us ({signed_us(p99 - base_p99)} us); max {us(worst)} us "
            f"(never waits on export: < {NEVER_WAITED_S * 1000:.0f} ms) {waited}"
        )
        close = median([float(p.close_ns) for p in passes])
        shutdowns = [float(p.shutdown_ns) for p in passes]
        shutdown = median(shutdowns)
        ratio = max(shutdowns) / (timeout_s * 1e9)
        verdict = "PASS" if ratio <= SHUTDOWN_TARGET else "FAIL"
        passed = passed and verdict == "PASS"
        spans = passes[0].spans
        lost = [p.not_exported for p in passes]
        print(
            f"collector down ({protocol}): session.close() {close / 1e6:.1f} ms "
            f"(no bridge {base_close / 1e6:.1f} ms), processor.shutdown() median "
            f"{shutdown / 1e9:.2f} s, max {max(shutdowns) / 1e9:.2f} s vs export timeout "
            f"{timeout_s:g} s -> {ratio:.2f}x (target <= {SHUTDOWN_TARGET}x) {verdict}; "
            f"spans not exported {lost} of {spans} per pass"
        )
    return passed


def main() -> int:
    """Run the six comparisons; return 0 if every target is met."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="agent turns per pass")
    parser.add_argument("--reps", type=int, default=7, help="timed passes of each kind")
    parser.add_argument("--down-reps", type=int, default=3, help="passes with the collector down")
    parser.add_argument(
        "--timeout", type=float, default=1.0, help="export timeout (s) with the collector down"
    )
    parser.add_argument("--calls", type=int, default=200, help="model calls per pass (6.)")
    parser.add_argument("--profile", action="store_true", help="cProfile the bridge")
    parser.add_argument(
        "--only",
        choices=("model-call", "spans"),
        help="run one section: 6. a live model call, or 2. per span against the SDK tracer",
    )
    args = parser.parse_args()

    started = time.perf_counter()
    if args.only == "model-call":
        with environ(dict.fromkeys(_OTLP_VARIABLES)), scratch_dir() as folder:
            met = bench_model_call(folder, args.calls, args.reps, profile=args.profile)
        return 0 if met else 1
    events = build_events(args.turns)
    if args.only == "spans":
        with environ(dict.fromkeys(_OTLP_VARIABLES)), scratch_dir() as folder:
            ref = reference(folder, events)
            met = bench_spans(ref, max(15, 2 * args.reps), profile=args.profile)
        return 0 if met else 1
    # Sections 1-3 must not reach any collector the environment names.
    with environ(dict.fromkeys(_OTLP_VARIABLES)), scratch_dir() as folder:
        ref = reference(folder, events)
        size = ref.path.stat().st_size
        print(
            f"workload: {args.turns} turns, {len(events)} events, {len(ref.spans)} spans, "
            f"{size / 2**20:.1f} MiB ({size / len(events) / 1024:.1f} KiB/event)"
        )
        bench_recording(folder, events, args.reps)
        passed = [
            bench_spans(ref, max(15, 2 * args.reps), profile=args.profile),
            bench_bytes(ref),
            bench_collector_down(folder, events, args.down_reps, args.timeout),
        ]
        bench_span_size(ref, max(15, 2 * args.reps))
        bench_encoders(ref, max(15, 2 * args.reps))
        passed.append(bench_model_call(folder, args.calls, args.reps, profile=args.profile))
    print(
        f"finished in {time.perf_counter() - started:.0f} s: "
        f"{'every target met' if all(passed) else 'a target was missed'}"
    )
    return 0 if all(passed) else 1


if __name__ == "__main__":
    sys.exit(main())
