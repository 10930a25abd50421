"""Benchmark: the intake's OffloadingProcessor against exporting the spans as they are.

A host runs an instrumentation that puts bodies in its spans and exports
them with ``BatchSpanProcessor(exporter)``. The same finished spans (made
once by the SDK's tracer, not timed) are fed, in the same run, to:

* **plain** — ``BatchSpanProcessor(exporter)``: the user's setup today, the
  spans exported with their bodies;
* **offload** — ``OffloadingProcessor(BatchSpanProcessor(exporter),
  folder)``: each span's bodies recorded into a session file (messages
  converted to loopscribe's types, a ``host_span`` record per span, runs
  opened and closed per trace), and the stripped span exported.

Two workloads:

1. **GenAI spans** — traces of an agent span and 10 chat spans, each chat
   span carrying a 20-message history (~26 KB) as ``gen_ai.input.messages``,
   its reply as ``gen_ai.output.messages``, system instructions and tool
   definitions, as the official instrumentations capture them (target:
   offload ≤ 0.5x plain);
2. **spans without GenAI content** — HTTP-server-like spans with eight
   attributes (target: ≤ 1.05x plain).

Two exporters, the same on both sides: ``encode`` encodes each batch as the
OTLP protobuf request, as the SDK's exporters do, and sends nothing;
``otlp-http`` is the SDK's ``OTLPSpanExporter`` posting to a receiver on
127.0.0.1 that runs in a process of its own. The figure is the host
process's CPU time until the processor is flushed (it counts the batch
worker). Each chunk starts with a fresh processor that has created its
session file already (a host does that once). The two setups take turns
chunk by chunk; each figure is the best chunk across passes, per span.

Run: ``.venv/bin/python benchmarks/intake.py [--traces N] [--reps N]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from benchmarks.bridge import messages_attributes, model_calls
from loopscribe.intake import OffloadingProcessor

CALLS_PER_TRACE = 10


class EncodeExporter(SpanExporter):
    """Encodes each batch as the OTLP protobuf request, as the SDK's exporters do; sends nothing."""

    def __init__(self) -> None:
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Encode the batch."""
        self.bytes += len(encode_spans(spans).SerializeToString())
        return SpanExportResult.SUCCESS


def genai_spans(traces: int) -> list[ReadableSpan]:
    """Finished spans: per trace, an agent span and 10 chat spans carrying their bodies."""
    calls, tools, _ = model_calls(CALLS_PER_TRACE)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("opentelemetry.instrumentation.bench", "1.0")
    system = orjson.dumps([{"type": "text", "content": "You are a careful coding agent."}])
    definitions = orjson.dumps(
        [{"type": "function", **{k: v for k, v in t.items() if k != "type"}} for t in tools]
    ).decode()
    for _ in range(traces):
        with tracer.start_as_current_span(
            "invoke_agent coder",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "coder"},
        ):
            for call in calls:
                attributes: dict[str, Any] = {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": "gpt-4o-mini",
                    "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
                    "gen_ai.response.id": "chatcmpl-123",
                    "gen_ai.request.temperature": 0.2,
                    "gen_ai.usage.input_tokens": 6120,
                    "gen_ai.usage.output_tokens": 240,
                    "gen_ai.response.finish_reasons": (call.finish_reason,),
                    "server.address": "api.openai.com",
                    "gen_ai.system_instructions": system.decode(),
                    "gen_ai.tool.definitions": definitions,
                    **messages_attributes(call.messages, call.reply, call.finish_reason),
                }
                tracer.start_span(
                    "chat gpt-4o-mini", kind=SpanKind.CLIENT, attributes=attributes
                ).end()
    provider.shutdown()
    return list(exporter.get_finished_spans())


def plain_spans(count: int) -> list[ReadableSpan]:
    """Finished HTTP-server-like spans without GenAI content."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("opentelemetry.instrumentation.asgi", "0.50b0")
    for i in range(count):
        tracer.start_span(
            "GET /items/{id}",
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": "GET",
                "http.route": "/items/{id}",
                "url.path": f"/items/{i}",
                "url.scheme": "https",
                "server.address": "api.example.com",
                "server.port": 443,
                "http.response.status_code": 200,
                "user_agent.original": "curl/8.5.0",
            },
        ).end()
    provider.shutdown()
    return list(exporter.get_finished_spans())


_RECEIVER = """
import sys, threading
sys.path.insert(0, sys.argv[1])
from tests.otlp_receiver import http_receiver
with http_receiver() as received:
    print(received.endpoint, flush=True)
    sys.stdin.read()
"""


@contextmanager
def receiver() -> Iterator[str]:
    """An OTLP/HTTP receiver on 127.0.0.1 in a process of its own; yields its endpoint.

    Its own process, so that the host's process CPU time counts the host only.
    """
    root = str(Path(__file__).resolve().parent.parent)
    child = subprocess.Popen(
        [sys.executable, "-c", _RECEIVER, root],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        yield f"{child.stdout.readline().strip()}/v1/traces"
    finally:
        child.communicate("", timeout=10)


def timed(
    make: Callable[[], SpanProcessor], spans: Sequence[ReadableSpan], warm: ReadableSpan
) -> tuple[float, float]:
    """Process CPU and wall seconds to hand ``spans`` to a fresh processor and flush it.

    The processor first gets ``warm`` (not timed): a host's session file is
    created, with its fsyncs, once per process, not once per chunk.
    """
    processor = make()
    # The export path is flushed, not the session file: force_flush would fsync it,
    # which a host does at shutdown, not every few hundred spans.
    exporting = getattr(processor, "downstream", processor)
    processor.on_end(warm)
    exporting.force_flush()
    cpu, wall = time.process_time(), time.perf_counter()
    for span in spans:
        processor.on_end(span)
    exporting.force_flush()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    processor.shutdown()
    return cpu, wall


def compare(
    label: str,
    spans: Sequence[ReadableSpan],
    exporter: Callable[[], SpanExporter],
    folder: Path,
    reps: int,
    chunk: int,
    *,
    use_wall: bool,
) -> float:
    """Best per-span cost of each setup, taking turns chunk by chunk; prints the ratio."""
    best: dict[str, float] = {"plain": float("inf"), "offload": float("inf")}
    runs = 0

    def plain() -> SpanProcessor:
        return BatchSpanProcessor(exporter(), max_export_batch_size=512)

    def offload() -> SpanProcessor:
        nonlocal runs
        runs += 1  # a fresh folder each time: the same spans again would be duplicates
        return OffloadingProcessor(
            BatchSpanProcessor(exporter(), max_export_batch_size=512), folder / f"{label}-{runs}"
        )

    warm, spans = spans[-1], spans[:-1]
    chunks = [spans[i : i + chunk] for i in range(0, len(spans), chunk)]
    totals = {"plain": [0.0] * len(chunks), "offload": [0.0] * len(chunks)}
    for _ in range(reps):
        for index, part in enumerate(chunks):
            for name, make in (("plain", plain), ("offload", offload)):
                cpu, wall = timed(make, part, warm)
                figure = wall if use_wall else cpu
                totals[name][index] = min(totals[name][index] or float("inf"), figure)
    for name in best:
        best[name] = sum(totals[name]) / len(spans)
    ratio = best["offload"] / best["plain"]
    print(
        f"{label:<34} plain {best['plain'] * 1e6:9.1f} us/span   "
        f"offload {best['offload'] * 1e6:9.1f} us/span   ratio {ratio:5.2f}x"
    )
    return ratio


def main() -> int:
    """Run both workloads with both exporters; exit 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces", type=int, default=20, help="agent traces (11 spans each)")
    parser.add_argument("--plain", type=int, default=2000, help="spans without GenAI content")
    parser.add_argument("--reps", type=int, default=5, help="passes (best chunk counts)")
    args = parser.parse_args()
    genai = genai_spans(args.traces)
    http = plain_spans(args.plain)
    size = sum(len(orjson.dumps(dict(s.attributes or {}))) for s in genai) // len(genai)
    print(f"{len(genai)} GenAI spans (~{size // 1024} KB of attributes each), {len(http)} others")
    ok = True
    with tempfile.TemporaryDirectory() as tmp, receiver() as endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        folder = Path(tmp)
        for name, make, wall in (
            ("encode", EncodeExporter, False),
            ("otlp-http", lambda: OTLPSpanExporter(endpoint=endpoint), False),
        ):
            print(f"-- exporter: {name} ({'wall' if wall else 'process CPU'} time)")
            ratio = compare(
                f"GenAI spans [{name}]", genai, make, folder, args.reps, 110, use_wall=wall
            )
            ok &= ratio <= 0.5
            ratio = compare(
                f"no GenAI content [{name}]", http, make, folder, args.reps, 500, use_wall=wall
            )
            ok &= ratio <= 1.05
    print("targets: GenAI <= 0.5x, no GenAI content <= 1.05x:", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
