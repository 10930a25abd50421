"""``encode_otlp_protobuf`` writes the SDK's OTLP request, byte for byte.

A receiver must not be able to tell loopscribe's encoding from the
OpenTelemetry SDK's: every test here compares
``encode_otlp_protobuf(spans)`` with ``encode_spans(spans).SerializeToString()``
for the same spans, made by a real ``TracerProvider`` (with span limits, so
dropped counts appear) or built as ``ReadableSpan`` with values no provider
would keep, for several Resources and instrumentation scopes interleaved in one
batch, for the bridge's replayed spans of real transcripts, and from many
threads at once.
"""

from __future__ import annotations

import base64
import enum
import importlib
import itertools
import logging
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.span import TraceState
from opentelemetry.trace.status import Status, StatusCode

from loopscribe.importers import claude_code, codex
from loopscribe.otel import encode_otlp_json, encode_otlp_protobuf

from .importers._support import DATA
from .importers._support import spans as replayed_spans

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

pytestmark = pytest.mark.usefixtures("quiet_encoders")


class Colour(str, enum.Enum):  # noqa: UP042 - a StrEnum's str() is its value; this one's is not
    """A str subclass whose ``str()`` is not its value."""

    RED = "red"


class Level(enum.IntEnum):
    """An int subclass."""

    HIGH = 3


class CountingIds(IdGenerator):
    """Span and trace IDs from a counter: a provider's random IDs would upset hypothesis."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def generate_span_id(self) -> int:
        return next(self._next)

    def generate_trace_id(self) -> int:
        return next(self._next)


def sdk_bytes(spans: list[ReadableSpan]) -> bytes:
    """What the SDK's OTLP exporters send for ``spans``."""
    return bytes(encode_spans(spans).SerializeToString())


def assert_sdk_bytes(spans: list[ReadableSpan]) -> bytes:
    """``encode_otlp_protobuf(spans)`` is the SDK's bytes; on a difference, show both decoded."""
    ours, theirs = encode_otlp_protobuf(spans), sdk_bytes(spans)
    if ours != theirs:
        try:
            decoded = str(ExportTraceServiceRequest.FromString(ours))
        except Exception as exc:
            decoded = f"undecodable: {exc!r}"
        pytest.fail(
            f"encode_otlp_protobuf differs from the SDK:\nours:\n{decoded}\n"
            f"SDK's:\n{ExportTraceServiceRequest.FromString(theirs)}\n"
            f"ours:  {ours.hex()}\nSDK's: {theirs.hex()}"
        )
    return ours


# --- strategies ------------------------------------------------------------------------------

texts = st.text(max_size=10) | st.sampled_from(
    ["", "é", "日本語のテキスト", "🙂 emoji", "\x00nul", "a" * 200]
)
ints = st.integers(_INT64_MIN, _INT64_MAX) | st.sampled_from(
    [_INT64_MIN, _INT64_MAX, -1, 0, 127, 128]
)
floats = st.floats() | st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324])
scalars = texts | st.booleans() | ints | floats | st.binary(max_size=12)
lone_surrogates = st.sampled_from(["\ud800", "a\udfffb", "\udc00 tail"])
too_big = st.integers(min_value=1 << 63) | st.integers(max_value=_INT64_MIN - 1)
uncarriable = lone_surrogates | too_big
"""Values the protocol cannot carry: the attribute holding one is logged and left out."""
subclassed = st.sampled_from([Colour.RED, Level.HIGH])
nested_keys = st.text(max_size=6) | lone_surrogates


def values(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Attribute values: scalars, sequences (incl. empty, None inside) and mappings, nested."""
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner | st.none(), max_size=4)
            | st.lists(inner, max_size=4).map(tuple)
            | st.dictionaries(nested_keys, inner | st.none(), max_size=3)
        ),
        max_leaves=6,
    )


sdk_values = values(scalars | uncarriable | subclassed) | st.none()
"""What a real span keeps (the SDK keeps lone surrogates and big integers, drops empty keys)."""
raw_values = sdk_values | st.builds(object) | st.sampled_from([{1: "int key"}, {"": "empty key"}])
"""What a hand-made ``ReadableSpan`` may hold: anything at all."""
keys = (
    st.text(min_size=1, max_size=8)
    | st.sampled_from(["gen_ai.request.model", "k"])
    | lone_surrogates
)
sdk_attributes = st.dictionaries(keys, sdk_values, max_size=5)
raw_attributes: st.SearchStrategy[Any] = st.dictionaries(keys | st.just(""), raw_values, max_size=5)
small_attributes = st.dictionaries(st.text(min_size=1, max_size=6), scalars, max_size=3)
names = st.text(max_size=12)
trace_ids = st.integers(1, (1 << 128) - 1)
span_ids = st.integers(1, (1 << 64) - 1)
times = st.integers(1, (1 << 64) - 1)
trace_states = st.lists(
    st.sampled_from(
        [("congo", "t61rcWkgMzE"), ("rojo", "00f067aa0ba902b7"), ("vendor@sys", "a:b")]
    ),
    unique_by=lambda kv: kv[0],
    max_size=3,
).map(TraceState)
contexts = st.builds(
    SpanContext,
    trace_id=trace_ids,
    span_id=span_ids,
    is_remote=st.booleans(),
    trace_flags=st.just(TraceFlags(TraceFlags.SAMPLED)),
    trace_state=trace_states,
)
links = st.builds(Link, contexts, st.none() | small_attributes)
statuses = st.builds(Status, st.sampled_from(list(StatusCode)), st.none() | texts)
kinds = st.sampled_from(list(SpanKind))
resources = st.builds(
    Resource,
    st.dictionaries(
        st.text(min_size=1, max_size=6), scalars | st.lists(texts, max_size=3), max_size=3
    ),
    st.none() | st.sampled_from(["", "https://opentelemetry.io/schemas/1.30.0"]),
)
scopes = st.builds(
    InstrumentationScope,
    st.sampled_from(["", "loopscribe", "host.app", "日本"]),
    st.none() | st.sampled_from(["", "1.0.0"]),
    st.none() | st.sampled_from(["", "https://opentelemetry.io/schemas/1.21.0"]),
    st.none() | small_attributes,
)
limits = st.builds(
    SpanLimits,
    max_span_attributes=st.integers(0, 6),
    max_events=st.integers(0, 3),
    max_links=st.integers(0, 3),
    max_event_attributes=st.integers(0, 3),
    max_link_attributes=st.integers(0, 3),
)


@st.composite
def sdk_span(
    draw: st.DrawFn, providers: list[tuple[TracerProvider, InMemorySpanExporter]]
) -> ReadableSpan:
    """One span made by a real tracer of one of ``providers``, ended."""
    provider, exporter = draw(st.sampled_from(providers))
    scope = draw(scopes)
    tracer = provider.get_tracer(scope.name, scope.version, scope.schema_url, scope.attributes)
    parent = draw(st.none() | contexts)
    context = None
    if parent is not None:
        context = trace_api.set_span_in_context(NonRecordingSpan(parent))
    start = draw(times)
    span = tracer.start_span(
        draw(names),
        context=context,
        kind=draw(kinds),
        attributes=draw(sdk_attributes),
        links=draw(st.lists(links, max_size=3)),
        start_time=start,
    )
    for _ in range(draw(st.integers(0, 3))):
        span.add_event(draw(names), draw(st.none() | sdk_attributes), draw(st.none() | times))
    if draw(st.booleans()):
        span.set_status(draw(statuses))
    span.end(end_time=draw(st.none() | times))
    found = exporter.get_finished_spans()
    exporter.clear()
    assert len(found) == 1
    return found[0]


@st.composite
def raw_span(draw: st.DrawFn) -> ReadableSpan:
    """A hand-made ``ReadableSpan``: attributes no provider would keep (objects, empty keys)."""
    events = [
        Event(draw(names), draw(st.none() | raw_attributes), draw(st.none() | times))
        for _ in range(draw(st.integers(0, 2)))
    ]
    return ReadableSpan(
        draw(names),
        context=draw(contexts),
        parent=draw(st.none() | contexts),
        resource=draw(resources),
        attributes=draw(raw_attributes),
        events=events,
        links=draw(st.lists(links, max_size=2)),
        kind=draw(kinds),
        status=draw(statuses),
        start_time=draw(st.none() | times),
        end_time=draw(st.none() | times),
        instrumentation_scope=draw(st.none() | scopes),
    )


@st.composite
def batches(draw: st.DrawFn) -> list[ReadableSpan]:
    """Spans of several Resources and scopes, from real providers and hand-made, interleaved."""
    providers = []
    for resource in draw(st.lists(resources, min_size=1, max_size=3)):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(
            resource=resource,
            span_limits=draw(limits),
            id_generator=CountingIds(),
            shutdown_on_exit=False,
        )
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        providers.append((provider, exporter))
    found = draw(st.lists(sdk_span(providers) | raw_span(), min_size=1, max_size=8))
    return list(draw(st.permutations(found)))


def sdk_json_line(spans: list[ReadableSpan]) -> bytes:
    """The OTLP JSON line as loopscribe wrote it from the SDK's request (hex IDs)."""
    json_format: Any = importlib.import_module("google.protobuf.json_format")
    request = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in request.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                _hex_ids(span)
    return orjson.dumps(request, option=orjson.OPT_APPEND_NEWLINE)


def _hex_ids(span: dict[str, Any]) -> None:
    for key in ("traceId", "spanId", "parentSpanId"):
        if key in span:
            span[key] = base64.b64decode(span[key]).hex()
    for link in span.get("links", ()):
        _hex_ids(link)


# --- tests -----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_any_batch_encodes_to_the_sdks_bytes(spans: list[ReadableSpan]) -> None:
    """Mixed Resources, scopes, values, events, links, statuses and limits: the SDK's bytes.

    And the OTLP JSON line of the embedded default is what protobuf's JSON
    mapping makes of the SDK's request.
    """
    assert_sdk_bytes(spans)
    assert encode_otlp_json(spans) == sdk_json_line(spans)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(keys | st.just(""), raw_values, max_size=6))
def test_any_attribute_value_encodes_to_the_sdks_bytes(attributes: dict[str, Any]) -> None:
    """Each attribute value alone, as the span, event, link, resource and scope attribute."""
    context = SpanContext(1, 2, is_remote=False)
    span = ReadableSpan(
        "s",
        context=context,
        attributes=attributes,
        events=[Event("e", attributes, 5)],
        links=[Link(context, attributes)],
        resource=Resource(attributes),
        instrumentation_scope=InstrumentationScope("scope", attributes=attributes),
    )
    assert_sdk_bytes([span])
    assert encode_otlp_json([span]) == sdk_json_line([span])


@pytest.mark.parametrize(
    "value",
    [
        "",
        "ünïcødé ✓",
        Colour.RED,
        Level.HIGH,
        True,
        False,
        0,
        -1,
        _INT64_MIN,
        _INT64_MAX,
        0.0,
        -0.0,
        math.inf,
        -math.inf,
        math.nan,
        b"",
        b"\x00\xff",
        (),
        ("a", None, 1),
        [[1, 2], {"k": [True]}],
        {},
        {"nested": {"deeper": b"x"}, "n": None},
    ],
    ids=repr,
)
def test_each_value_kind_encodes_to_the_sdks_bytes(value: Any) -> None:
    """The value kinds named one by one, so a failure names the kind."""
    span = ReadableSpan("s", context=SpanContext(1, 2, False), attributes={"k": value, "z": 1})
    assert_sdk_bytes([span])
    assert encode_otlp_json([span]) == sdk_json_line([span])


@pytest.mark.parametrize(
    "value",
    [
        "\ud800",
        ["ok", "bad \udfff"],
        1 << 64,
        -(1 << 63) - 1,
        [1, 1 << 70],
        pytest.param(object(), id="object()"),
        pytest.param({"m": object()}, id="{'m': object()}"),
    ],
    ids=repr,
)
def test_a_value_the_protocol_cannot_carry_is_logged_and_left_out(
    value: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The attribute is left out (the SDK's bytes), its neighbours kept, and the key logged."""
    span = ReadableSpan(
        "s", context=SpanContext(1, 2, False), attributes={"before": 1, "bad": value, "after": 2}
    )
    logging.getLogger("loopscribe.otel").setLevel(logging.ERROR)
    with caplog.at_level(logging.ERROR, logger="loopscribe.otel"):
        ours = encode_otlp_protobuf([span])
    assert ours == sdk_bytes([span])
    (sent,) = ExportTraceServiceRequest.FromString(ours).resource_spans[0].scope_spans[0].spans
    assert [pair.key for pair in sent.attributes] == ["before", "after"]
    assert any("'bad'" in record.getMessage() for record in caplog.records)


def _imported_sessions(agent: str, source: Path, folder: Path) -> list[Path]:
    module = {"claude-code": claude_code, "codex": codex}[agent]
    module.import_transcript(source, folder, finished=True)
    found = sorted(folder.glob("*.jsonl"))
    assert found, f"importing {source.name} wrote no session file"
    return found


SHIPPED = [
    (agent, path)
    for agent in ("claude-code", "codex")
    for path in sorted((DATA / agent).glob("*.jsonl"))
    if path.is_file()
]


@pytest.mark.parametrize(("agent", "source"), SHIPPED, ids=[p.stem[:24] for _, p in SHIPPED])
def test_replayed_spans_of_real_transcripts_encode_to_the_sdks_bytes(
    agent: str, source: Path, tmp_path: Path
) -> None:
    """Import a real transcript, replay its session file: every batch is the SDK's bytes."""
    found = []
    for path in _imported_sessions(agent, source, tmp_path):
        found.extend(replayed_spans(path))
    assert found, f"{source.name} replayed to no spans"
    assert_sdk_bytes(found)
    for start in range(0, len(found), 7):  # the batch processor's batches are slices
        assert_sdk_bytes(found[start : start + 7])


def _in_threads(count: int, work: Callable[[int], None]) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def run(n: int) -> None:
        try:
            barrier.wait()
            work(n)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_many_threads_encoding_different_batches_get_their_own_bytes() -> None:
    """Concurrent encodes share the key, resource and scope caches and still get their bytes."""
    batches_by_thread: list[list[ReadableSpan]] = []
    for n in range(8):
        resource = Resource({"service.name": f"svc-{n}", "n": n})
        scope = InstrumentationScope(f"scope-{n % 3}", str(n))
        batches_by_thread.append(
            [
                ReadableSpan(
                    f"span {n}.{i}",
                    context=SpanContext(n + 1, i + 1, False),
                    resource=resource if i % 2 else Resource({"shared": True}),
                    instrumentation_scope=scope,
                    attributes={f"key.{n}.{i % 50}": i, "shared": "x" * n, f"t{n}": [n, i]},
                    start_time=i,
                    end_time=i + n,
                )
                for i in range(200)
            ]
        )
    expected = [sdk_bytes(batch) for batch in batches_by_thread]
    results: dict[tuple[int, int], bytes] = {}

    def work(n: int) -> None:
        for round_ in range(10):
            results[n, round_] = encode_otlp_protobuf(batches_by_thread[n])

    _in_threads(len(batches_by_thread), work)
    for (n, _), encoded in results.items():
        assert encoded == expected[n]
    assert len(results) == 8 * 10
