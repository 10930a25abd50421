"""The real OTLP/HTTP exporter behind SpanBridge, with a collector down, silent or flapping."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopscribe import Execution, Run, Session
from loopscribe import events as ev
from loopscribe.otel import SpanBridge, default_processor, span_id

from ..otlp_receiver import Received, closed_port, http_receiver

EXPORT_TIMEOUT_S = 1.0
CALLS_PER_ROUND = 1000  # two records each
ROUNDS = 3
MAX_P99_RISE_NS = 1_000_000
THREADS_SETTLE_S = 5.0


@pytest.fixture(autouse=True)
def otlp_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only this module's OTLP settings apply: HTTP/protobuf with a 1 s timeout."""
    for name in list(os.environ):
        if name.startswith(("OTEL_EXPORTER_OTLP_", "OTEL_BSP_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", str(int(EXPORT_TIMEOUT_S)))


def record_calls(run: Run, prefix: str, count: int) -> list[int]:
    """Record ``count`` tool calls (start and end); return each record's latency in ns."""
    latencies: list[int] = []
    for i in range(count):
        ex = Execution(f"{prefix}{i}", "tool")
        for event in (
            ev.tool_exec_start(ex, "grep", {"q": i}),
            ev.tool_exec_end(ex, "grep", "no match"),
        ):
            began = time.perf_counter_ns()
            run.record(event)
            latencies.append(time.perf_counter_ns() - began)
    return latencies


def p99(latencies: list[int]) -> float:
    """The 99th percentile."""
    return statistics.quantiles(latencies, n=100)[98]


def settled_thread_count(baseline: int) -> int:
    """Wait until at most ``baseline`` threads are alive (or time is up); return the count."""
    deadline = time.monotonic() + THREADS_SETTLE_S
    while threading.active_count() > baseline and time.monotonic() < deadline:
        time.sleep(0.02)
    return threading.active_count()


def measure(path: Path, endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Record ROUNDS runs through a bridge to ``endpoint``; report p99, close time and counts."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    baseline = threading.active_count()
    processor: Any = default_processor(path)
    bridge = SpanBridge(processor, file_uri=path)
    session = Session.create(path, observers=[bridge])
    p99s = []
    for round_ in range(ROUNDS):
        with session.begin_run() as run:
            p99s.append(p99(record_calls(run, f"r{round_}-", CALLS_PER_ROUND)))
    began = time.monotonic()
    session.close()
    processor.shutdown()
    close_s = time.monotonic() - began
    return {
        "p99_ns": min(p99s),
        "close_s": close_s,
        "baseline": baseline,
        "threads": settled_thread_count(baseline),
        "accepted": processor.accepted_spans,
        "exported": processor.exported_spans,
        "dropped": processor.dropped_spans,
        "bridge_dropped": bridge.dropped_spans,
    }


@contextlib.contextmanager
def black_hole() -> Iterator[str]:
    """A TCP port on 127.0.0.1 that accepts connections and never reads or answers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.05)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)

    thread = threading.Thread(target=serve, name="otlp-black-hole", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


@contextlib.contextmanager
def unreachable(kind: str) -> Iterator[str]:
    """An endpoint where no collector answers: a closed port or a black hole."""
    if kind == "closed-port":
        yield f"http://127.0.0.1:{closed_port()}"
    else:
        with black_hole() as endpoint:
            yield endpoint


@pytest.mark.parametrize("kind", ["closed-port", "black-hole"])
def test_unreachable_collector_costs_the_recorder_nothing(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No answering collector: p99 within 1 ms, bounded close, drops counted, threads flat."""
    with http_receiver() as received:
        up = measure(tmp_path / "up.jsonl", received.endpoint, monkeypatch)
    assert up["dropped"] == 0
    assert up["exported"] == up["accepted"] == ROUNDS * (CALLS_PER_ROUND + 1)
    assert up["threads"] <= up["baseline"]

    caplog.set_level(logging.WARNING, logger="loopscribe.otel")
    with unreachable(kind) as endpoint:
        down = measure(tmp_path / "down.jsonl", endpoint, monkeypatch)
        assert down["threads"] <= down["baseline"], "exporter threads outlived shutdown"
    assert down["p99_ns"] - up["p99_ns"] < MAX_P99_RISE_NS, (down["p99_ns"], up["p99_ns"])
    assert down["close_s"] < EXPORT_TIMEOUT_S + 1.0
    assert down["exported"] == 0
    assert down["bridge_dropped"] == 0  # the processor never raised into the bridge
    assert down["dropped"] == down["accepted"] == ROUNDS * (CALLS_PER_ROUND + 1)
    warnings = [r.getMessage() for r in caplog.records if r.name == "loopscribe.otel"]
    assert any(
        f"{down['dropped']} of {down['accepted']} spans were not exported" in m for m in warnings
    )
    assert not any(endpoint in m for m in warnings)


class RestartableReceiver:
    """An OTLP/HTTP receiver that can be stopped and started again on the same port."""

    def __init__(self) -> None:
        self.port = closed_port()
        self.received = Received(f"http://127.0.0.1:{self.port}")
        self._running: contextlib.ExitStack | None = None

    def start(self) -> None:
        """Listen and answer OTLP export requests."""
        self._running = contextlib.ExitStack()
        self._running.enter_context(http_receiver(self.port, self.received))

    def stop(self) -> None:
        """Stop listening; connection attempts are refused until ``start``."""
        if self._running is not None:
            self._running.close()
        self._running = None


def span_ids(session: Session, run: Run, prefix: str, count: int) -> set[str]:
    """The hex span IDs of the tool calls ``record_calls`` made with ``prefix``."""
    return {f"{span_id(session.id, run.id, f'{prefix}{i}', 1):016x}" for i in range(count)}


def wait_for(ids: set[str], received: Received, processor: Any) -> bool:
    """Flush until every span in ``ids`` arrived, for at most 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        processor.force_flush(int(EXPORT_TIMEOUT_S * 2000))
        if ids <= {s.span_id.hex() for s in received.spans()}:
            return True
        time.sleep(0.05)
    return False


def test_export_resumes_after_the_collector_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Spans recorded while the collector is down count as dropped; later ones arrive."""
    caplog.set_level(logging.WARNING, logger="loopscribe.otel")
    receiver = RestartableReceiver()
    receiver.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.received.endpoint)
        baseline = threading.active_count()
        path = tmp_path / "flap.jsonl"
        processor: Any = default_processor(path, schedule_delay_millis=50)
        session = Session.create(path, observers=[SpanBridge(processor, file_uri=path)])
        run = session.begin_run()
        count = 20
        record_calls(run, "before-", count)
        assert wait_for(span_ids(session, run, "before-", count), receiver.received, processor)

        receiver.stop()
        record_calls(run, "down-", count)
        # force_flush reports that the queue was worked off, not that the export succeeded.
        processor.force_flush(int(EXPORT_TIMEOUT_S * 3000))
        assert processor.dropped_spans == count

        receiver.start()
        record_calls(run, "after-", count)
        assert wait_for(span_ids(session, run, "after-", count), receiver.received, processor)

        began = time.monotonic()
        session.close()
        processor.shutdown()
        assert time.monotonic() - began < EXPORT_TIMEOUT_S + 1.0
        assert processor.dropped_spans == count
        assert processor.exported_spans == 2 * count + 1  # and the run's root span
        arrived = {s.span_id.hex() for s in receiver.received.spans()}
        assert not arrived & span_ids(session, run, "down-", count)
        assert settled_thread_count(baseline) <= baseline
    finally:
        receiver.stop()
    assert any(
        f"{count} of {2 * count + 1 + count} spans were not exported" in r.getMessage()
        for r in caplog.records
        if r.name == "loopscribe.otel"
    )
