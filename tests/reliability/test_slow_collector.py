"""A collector that trickles bytes, and Ctrl-C / SIGTERM during export.

The collector here is a real socket on 127.0.0.1 that accepts an OTLP/HTTP
request and answers one byte every 200 ms, forever: each socket read
succeeds, so no socket timeout ever fires. ``loopscribe export`` runs as a
real subprocess against it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from loopscribe import Execution, Session
from loopscribe import events as ev

from ..otlp_receiver import http_receiver


class Trickler:
    """Accepts connections, reads the request head, then sends a byte every 200 ms."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.accepted = threading.Event()
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)
                self.accepted.set()
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                while not self.closed.is_set():
                    conn.sendall(b"X")
                    time.sleep(0.2)
            except OSError:
                return

    def close(self) -> None:
        self.closed.set()
        self.sock.close()
        self.thread.join(5)


@pytest.fixture
def trickler() -> Iterator[Trickler]:
    """A trickling collector, always stopped."""
    server = Trickler()
    try:
        yield server
    finally:
        server.close()


def _session(path: Path, tools: int = 50) -> Path:
    with Session.create(path) as session, session.begin_run() as run:
        for i in range(tools):
            tool = Execution(f"t{i}", "tool")
            run.record(ev.tool_exec_start(tool, "lookup", {"i": i}))
            run.record(ev.tool_exec_end(tool, "lookup", "ok"))
    return path


def _export(args: list[str], endpoint: str, timeout_s: float) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TIMEOUT": str(timeout_s),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "loopscribe", "export", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


EXIT_GUARD_S = 30.0
"""How long a test waits for ``loopscribe export`` to exit before calling it hung.

It only tells "exited" from "hung": what makes the process exit is proven by
the scenario (a collector that never finishes answering, an export timeout of
600 s, ``--follow`` that never ends by itself), not by how fast it exits.
"""


def _finish(process: subprocess.Popen[str]) -> tuple[bool, str]:
    """Wait for the process for at most EXIT_GUARD_S; whether it exited, and its stderr."""
    exited = True
    with process:  # closes the pipes, also when the wait times out
        try:
            _, err = process.communicate(timeout=EXIT_GUARD_S)
        except subprocess.TimeoutExpired:
            exited = False
            process.kill()
            _, err = process.communicate()
    return exited, err


def test_export_is_bounded_by_its_timeout_against_a_trickling_collector(
    tmp_path: Path, trickler: Trickler
) -> None:
    """With a 2 s export timeout, the export gives up by itself and says so.

    The trickler answers a byte every 200 ms for as long as the test runs, so no
    socket timeout fires: only the configured export deadline can end the export.
    """
    path = _session(tmp_path / "s.jsonl")
    process = _export([str(path)], f"http://127.0.0.1:{trickler.port}", 2)
    assert trickler.accepted.wait(30), "the export never reached the collector"
    exited, err = _finish(process)
    assert exited, "the export hung on a collector that never finishes its answer"
    assert not trickler.closed.is_set()  # the collector was still trickling
    assert process.returncode == 1, err
    assert "Traceback" not in err
    assert "took longer than 2.0 s" in err  # the configured timeout ended it


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_export_promptly_and_keeps_the_cursor(
    tmp_path: Path, trickler: Trickler, signum: int
) -> None:
    """Ctrl-C or SIGTERM while a batch hangs: the export stops, no traceback, cursor readable.

    The export timeout is 600 s and the collector never finishes answering: only
    the signal can end this export before the guard.
    """
    path = _session(tmp_path / "s.jsonl")
    process = _export([str(path)], f"http://127.0.0.1:{trickler.port}", 600)
    assert trickler.accepted.wait(30), "the export never reached the collector"
    time.sleep(0.3)  # the scenario: the batch has been hanging for a while
    process.send_signal(signum)
    exited, err = _finish(process)
    assert exited, "the signal did not stop an export waiting on its collector"
    assert "Traceback" not in err
    assert "KeyboardInterrupt" not in err
    assert process.returncode != 0
    cursor = path.with_name(path.name + ".export-cursor")
    if cursor.exists():
        assert orjson.loads(cursor.read_bytes())["seq"] >= 0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_export_follow_and_saves_the_cursor(tmp_path: Path, signum: int) -> None:
    """``export --follow`` to a working collector: a signal ends it, cursor at the end.

    ``--follow`` never ends by itself, so its exit is the signal's doing.
    """
    path = _session(tmp_path / "s.jsonl", tools=5)
    cursor = path.with_name(path.name + ".export-cursor")

    def cursor_at_end() -> bool:
        try:
            return bool(orjson.loads(cursor.read_bytes())["offset"] == path.stat().st_size)
        except (OSError, orjson.JSONDecodeError):
            return False

    with http_receiver() as received:
        process = _export(["--follow", str(path)], received.endpoint, 10)
        deadline = time.monotonic() + 30
        while not cursor_at_end() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert received.spans(), "nothing was exported"
        assert cursor_at_end(), "the export never caught up with the file"
        process.send_signal(signum)
        exited, err = _finish(process)
    assert exited, "the signal did not stop export --follow"
    assert "Traceback" not in err
    assert cursor_at_end()
