"""Real trace backends on loopback, started and stopped by the tests.

The Phoenix tests run only when ``LOOPSCRIBE_PHOENIX`` names a ``phoenix``
executable: ``make e2e`` installs Phoenix into its own virtualenv (so its
dependency pins never touch the project's) and sets the variable. The Jaeger
and Collector tests (``test_jaeger*.py``) run when ``LOOPSCRIBE_JAEGER`` and
``LOOPSCRIBE_OTELCOL`` are set: ``make e2e`` builds both programs from their
Go modules first (see ``_stack.py``). Without the variables these files are
not collected, so ``make test`` stays offline and fast. With them, a missing
or broken program is an error, never a skip: a green ``make e2e`` always
means the spans went through a real backend.

Phoenix is bound to 127.0.0.1 on free ports, keeps its SQLite database in a
temporary folder, and has telemetry, external resources and its agent
assistant switched off, so it makes no request of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import _stack

PHOENIX_ENV = "LOOPSCRIBE_PHOENIX"
"""Path of the ``phoenix`` executable; unset means: do not collect these tests."""

STARTUP_TIMEOUT_S = 300.0  # a fresh database migrates first: minutes on a loaded machine
"""Phoenix imports for about 20 s and migrates a fresh database: be generous."""

STOP_TIMEOUT_S = 15.0
REQUEST_TIMEOUT_S = 10.0

collect_ignore_glob: list[str] = [] if os.environ.get(PHOENIX_ENV) else ["test_phoenix*.py"]
if not (os.environ.get(_stack.JAEGER_ENV) or os.environ.get(_stack.OTELCOL_ENV)):
    collect_ignore_glob.append("test_jaeger*.py")

# Settings from the caller's environment that would change what Phoenix does
# (another database, exporting its own traces, auth) are dropped.
_DROPPED_PREFIXES = ("PHOENIX_", "OTEL_")


@dataclass(frozen=True, slots=True)
class Phoenix:
    """A running Phoenix server.

    Attributes:
        base_url: ``http://127.0.0.1:PORT``; OTLP/HTTP is at ``/v1/traces``.
        grpc_port: The OTLP/gRPC port.
        log: The server's combined stdout and stderr.
    """

    base_url: str
    grpc_port: int
    log: Path

    @property
    def traces_endpoint(self) -> str:
        """The OTLP/HTTP traces URL, as ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` takes it."""
        return f"{self.base_url}/v1/traces"

    def get_json(self, path: str, query: list[tuple[str, str]] | None = None) -> Any:
        """GET ``path`` (below ``base_url``) and decode the JSON answer.

        Raises:
            urllib.error.HTTPError: The server answered with an error status.
        """
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as response:
            return json.load(response)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server log, for failure messages."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])


def _free_ports(count: int) -> list[int]:
    """Distinct free TCP ports on 127.0.0.1 (the OS picks them; all held until chosen)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def _executable() -> Path:
    raw = os.environ[PHOENIX_ENV]
    path = Path(raw).expanduser().absolute()
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"{PHOENIX_ENV}={raw!r}: no executable there; run `make e2e`, which installs "
            "Arize Phoenix into .venv-phoenix (scripts/e2e-setup.sh), or point the "
            "variable at a `phoenix` executable",
            pytrace=False,
        )
    return path


def _environment(workdir: Path, http_port: int, grpc_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)}
    env.update(
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_PORT=str(http_port),
        PHOENIX_GRPC_PORT=str(grpc_port),
        PHOENIX_WORKING_DIR=str(workdir),
        PHOENIX_SQL_DATABASE_URL=f"sqlite:///{workdir / 'phoenix.db'}",
        # No tracking pixels, web fonts or sandbox downloads: nothing leaves loopback.
        PHOENIX_TELEMETRY_ENABLED="false",
        PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
        # The built-in assistant can run shell commands server-side; not in a test.
        PHOENIX_DISABLE_AGENT_ASSISTANT="true",
        PHOENIX_AGENTS_DISABLE_BASH="true",
    )
    return env


def _wait_healthy(phoenix: Phoenix, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            pytest.fail(
                f"phoenix serve exited with status {code} before it was healthy; "
                f"log {phoenix.log}:\n{phoenix.log_tail()}",
                pytrace=False,
            )
        try:
            with urllib.request.urlopen(f"{phoenix.base_url}/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.25)
    pytest.fail(
        f"phoenix serve was not healthy within {STARTUP_TIMEOUT_S:.0f} s; "
        f"log {phoenix.log}:\n{phoenix.log_tail()}",
        pytrace=False,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, then SIGKILL it if it does not exit in time."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT_S)


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    """A fresh Phoenix server on 127.0.0.1, stopped (or killed) after the tests."""
    executable = _executable()
    workdir = tmp_path_factory.mktemp("phoenix")
    http_port, grpc_port = _free_ports(2)
    server = Phoenix(f"http://127.0.0.1:{http_port}", grpc_port, workdir / "phoenix.log")
    with server.log.open("wb") as log:
        process = subprocess.Popen(
            [str(executable), "serve"],
            cwd=workdir,
            env=_environment(workdir, http_port, grpc_port),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own process group, so teardown reaches any helper it spawns.
            start_new_session=True,
        )
    try:
        _wait_healthy(server, process)
        yield server
    finally:
        _stop(process)


@pytest.fixture(scope="session")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_stack.Jaeger]:
    """Jaeger v2 running collector-config/jaeger-config.yaml, stopped after the tests."""
    server = _stack.start_jaeger(tmp_path_factory.mktemp("jaeger"))
    try:
        yield server
    finally:
        server.program.stop()
