"""OTLP trace receivers on 127.0.0.1, built from opentelemetry-proto's service definitions.

Test helper: the real OTLP exporters talk to these over real sockets, so the
wire tests exercise exactly what a Collector would receive.
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import zlib
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

_STOP_TIMEOUT_S = 5.0


@dataclass
class Received:
    """What one receiver got: requests, their headers, and a signal for the first one."""

    endpoint: str
    requests: list[Any] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, request: Any, headers: dict[str, str], body: bytes = b"") -> None:
        """Keep one ExportTraceServiceRequest, its (lowercased) headers and its raw body."""
        with self._lock:
            self.requests.append(request)
            self.headers.append({k.lower(): v for k, v in headers.items()})
            self.bodies.append(body)
        self.arrived.set()

    def snapshot(self) -> tuple[list[bytes], list[dict[str, str]]]:
        """The raw bodies (HTTP only, decompressed) and headers received so far."""
        with self._lock:
            return list(self.bodies), list(self.headers)

    def spans(self) -> list[Any]:
        """Every received protobuf Span, in arrival order."""
        with self._lock:
            return [
                span
                for request in self.requests
                for resource_spans in request.resource_spans
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            ]


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, received: Received) -> None:
        self._received = received

    def Export(self, request: Any, context: Any) -> Any:
        self._received.add(request, dict(context.invocation_metadata()))
        return trace_service_pb2.ExportTraceServiceResponse()


@contextlib.contextmanager
def grpc_receiver() -> Iterator[Received]:
    """A gRPC TraceService on a free port; ``endpoint`` is ``http://127.0.0.1:<port>``."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    port = server.add_insecure_port("127.0.0.1:0")
    received = Received(f"http://127.0.0.1:{port}")
    service_module: Any = trace_service_pb2_grpc  # generated code without annotations
    service_module.add_TraceServiceServicer_to_server(_TraceService(received), server)
    server.start()
    try:
        yield received
    finally:
        server.stop(grace=None).wait(_STOP_TIMEOUT_S)


@contextlib.contextmanager
def http_receiver(port: int = 0, into: Received | None = None) -> Iterator[Received]:
    """An OTLP/HTTP protobuf receiver on ``port`` (0: a free one); ``endpoint`` is its base URL.

    It answers ``POST /v1/traces`` with an ``ExportTraceServiceResponse`` and
    anything else with 404. Requests are kept in ``into`` when given, so a
    receiver restarted on the same port keeps adding to the same record.
    """
    received: Received

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            received.add(request, dict(self.headers.items()), body)
            payload = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    received = (
        into if into is not None else Received(f"http://127.0.0.1:{server.server_address[1]}")
    )
    thread = threading.Thread(target=server.serve_forever, name="otlp-http-receiver", daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(_STOP_TIMEOUT_S)


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (it was free a moment ago)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


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
