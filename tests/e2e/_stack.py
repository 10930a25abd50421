"""Jaeger v2 and the OpenTelemetry Collector as real processes on loopback.

``make e2e`` builds both from their Go modules (scripts/build-otel-programs.sh)
and names the binaries in ``LOOPSCRIBE_JAEGER`` and ``LOOPSCRIBE_OTELCOL``.
Each program runs the configuration file shipped in ``collector-config/``,
unchanged: the only settings a test gives are the environment variables the
file reads. Those files use fixed ports (4317, 4318, 16686, ...), so every
program gets a loopback address of its own (``127.x.y.z``, all of which
reach this host on Linux) through its ``*_LISTEN_HOST`` variable, and two
test runs on one machine never meet.

Every wait polls for an event (a log line, an HTTP answer, spans in Jaeger)
up to a generous deadline; nothing sleeps for a fixed time.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "collector-config"

JAEGER_ENV = "LOOPSCRIBE_JAEGER"
OTELCOL_ENV = "LOOPSCRIBE_OTELCOL"

STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
ARRIVAL_TIMEOUT_S = 90.0
"""The collector polls files every second and batches for up to 200 ms: be generous."""
REQUEST_TIMEOUT_S = 10.0

COLLECTOR_READY = "Everything is ready"
"""The line the Collector logs once every component started."""

JAEGER_PORTS = (4317, 4318, 13133, 16685, 16686, 8888)
COLLECTOR_PORTS = (4317, 4318, 8888)

T = TypeVar("T")


def executable(variable: str) -> Path:
    """The program named by ``variable``; fails (never skips) when it is not there."""
    raw = os.environ.get(variable, "")
    path = Path(raw).expanduser().absolute()
    if not raw or not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"{variable}={raw!r}: no executable there; run `make e2e`, which builds Jaeger and "
            "the Collector from their Go modules (scripts/build-otel-programs.sh) and sets it",
            pytrace=False,
        )
    return path


def loopback_host(ports: tuple[int, ...]) -> str:
    """A random ``127.x.y.z`` address on which every one of ``ports`` is free."""
    rng = random.SystemRandom()
    for _ in range(200):
        host = f"127.{rng.randrange(1, 255)}.{rng.randrange(0, 256)}.{rng.randrange(2, 255)}"
        with contextlib.ExitStack() as stack:
            try:
                for port in ports:
                    sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                    sock.bind((host, port))
            except OSError:
                continue
            return host
    raise AssertionError(f"no loopback address with the ports {ports} free")


def _environment(extra: Mapping[str, str]) -> dict[str, str]:
    # The caller's OTEL_* settings and the variables the configs read must not leak in.
    reads = {"JAEGER_OTLP_ENDPOINT", "TEMPO_OTLP_ENDPOINT", "LOOPSCRIBE_OTLP_FILES"}
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "OTELCOL_", "JAEGER_")) and k not in reads
    }
    env.update(extra)
    return env


def wait_for(
    what: str, probe: Callable[[], T | None], *, timeout_s: float, detail: Callable[[], str]
) -> T:
    """Poll ``probe`` until it returns something other than None; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s\n{detail()}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


class Program:
    """A process started by a test, in its own process group, with its log in a file."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                argv,
                cwd=log.parent,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.process.poll() is None

    def log_text(self) -> str:
        """The whole log so far."""
        try:
            return self.log.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the log, for failure messages."""
        return f"{self.name} log {self.log}:\n" + "\n".join(self.log_text().splitlines()[-lines:])

    def check_alive(self) -> None:
        """Fail with the log when the process has exited."""
        code = self.process.poll()
        if code is not None:
            raise AssertionError(f"{self.name} exited with status {code}\n{self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` to the process group, wait; SIGKILL it if it does not exit in time."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=STOP_TIMEOUT_S)
        return self.process.returncode


def http_get(url: str) -> tuple[int, bytes]:
    """GET ``url``: the status and body (error statuses too)."""
    try:
        with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


@dataclass
class Jaeger:
    """Jaeger v2 all-in-one running ``collector-config/jaeger-config.yaml``."""

    host: str
    program: Program

    @property
    def otlp_grpc(self) -> str:
        """``host:port`` of its OTLP/gRPC receiver."""
        return f"{self.host}:4317"

    @property
    def otlp_http(self) -> str:
        """Base URL of its OTLP/HTTP receiver."""
        return f"http://{self.host}:4318"

    @property
    def query_url(self) -> str:
        """Base URL of the query service (the API the UI uses)."""
        return f"http://{self.host}:16686"

    def get_json(self, path: str, query: Mapping[str, str] | None = None) -> Any:
        """GET a query API path and decode it; 404 gives None."""
        url = self.query_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        status, body = http_get(url)
        if status == 404:
            return None
        assert status == 200, f"GET {url}: {status} {body[:300]!r}\n{self.program.log_tail()}"
        return json.loads(body)

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """One trace as ``/api/traces/{id}`` returns it (spans and processes), or None."""
        answer = self.get_json(f"/api/traces/{trace_id}")
        if not answer or not answer.get("data"):
            return None
        data = answer["data"]
        assert len(data) == 1, f"trace {trace_id}: {len(data)} traces in the answer"
        trace: dict[str, Any] = data[0]
        return trace


def start_jaeger(workdir: Path) -> Jaeger:
    """Start Jaeger with the shipped config and wait until its health check answers."""
    binary = executable(JAEGER_ENV)
    host = loopback_host(JAEGER_PORTS)
    workdir.mkdir(parents=True, exist_ok=True)
    env = _environment(
        {
            "JAEGER_LISTEN_HOST": host,
            "JAEGER_UI_CONFIG": str(CONFIG_DIR / "jaeger-ui.json"),
            # Jaeger traces its own queries over OTLP, to localhost:4317 unless told;
            # in its container that is itself, and so it is here. Its last export,
            # at shutdown, finds its receiver stopped already: a second, not ten.
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{host}:4317",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1000",
        }
    )
    program = Program(
        "jaeger",
        [str(binary), f"--config={CONFIG_DIR / 'jaeger-config.yaml'}"],
        env,
        workdir / "jaeger.log",
    )
    jaeger = Jaeger(host, program)

    def healthy() -> bool | None:
        program.check_alive()
        try:
            status, _ = http_get(f"http://{host}:13133/status")
        except OSError:
            return None
        return True if status == 200 else None

    try:
        wait_for("jaeger healthy", healthy, timeout_s=STARTUP_TIMEOUT_S, detail=program.log_tail)
    except BaseException:
        program.stop()
        raise
    return jaeger


@dataclass
class Collector:
    """The Collector running shipped pipeline files, configured by environment only."""

    host: str
    program: Program

    @property
    def otlp_grpc(self) -> str:
        """``host:port`` of its OTLP/gRPC receiver."""
        return f"{self.host}:4317"

    @property
    def otlp_http(self) -> str:
        """Base URL of its OTLP/HTTP receiver."""
        return f"http://{self.host}:4318"

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Stop it (SIGTERM: a clean shutdown that saves the file offsets)."""
        return self.program.stop(sig)


def start_collector(
    workdir: Path,
    *,
    jaeger: Jaeger,
    files: str,
    storage: Path,
    configs: tuple[str, ...] = ("jaeger.yaml",),
    name: str = "collector",
) -> Collector:
    """Start the Collector on ``configs`` (files of collector-config/) and wait until ready.

    Args:
        workdir: Where its log goes.
        jaeger: Where ``JAEGER_OTLP_ENDPOINT`` points.
        files: The glob ``LOOPSCRIBE_OTLP_FILES`` names.
        storage: ``OTELCOL_STORAGE_DIR``, the file offsets.
        configs: The pipeline files, merged in this order.
        name: The log's name (``NAME.log``, appended to across restarts).
    """
    binary = executable(OTELCOL_ENV)
    host = loopback_host(COLLECTOR_PORTS)
    env = _environment(
        {
            "OTELCOL_LISTEN_HOST": host,
            "OTELCOL_STORAGE_DIR": str(storage),
            "JAEGER_OTLP_ENDPOINT": jaeger.otlp_grpc,
            "LOOPSCRIBE_OTLP_FILES": files,
        }
    )
    log = workdir / f"{name}.log"
    start_offset = log.stat().st_size if log.exists() else 0
    argv = [str(binary)] + [f"--config={CONFIG_DIR / c}" for c in configs]
    program = Program(name, argv, env, log)

    def ready() -> bool | None:
        program.check_alive()
        with log.open("rb") as f:
            f.seek(start_offset)
            return True if COLLECTOR_READY.encode() in f.read() else None

    try:
        wait_for(f"{name} ready", ready, timeout_s=STARTUP_TIMEOUT_S, detail=program.log_tail)
    except BaseException:
        program.stop()
        raise
    return Collector(host, program)
