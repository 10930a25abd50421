"""Fixtures of the viewer tests: a recorded agent session, and headless Chromium.

Chromium and its driver are Debian packages (``chromium``, ``chromium-driver``).
When they are missing, the first browser test installs them with apt-get,
once per test session, and fails (never skips) if that does not work: a
browser test that silently does not run proves nothing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from loopscribe import (
    AssistantMessage,
    Execution,
    Session,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from loopscribe import events as ev
from loopscribe.otel import run_span_id, span_id, trace_id

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
TOOL_OUTPUT = "TOOL-OUTPUT: 3 results for 'opentelemetry genai conventions'"


class Clock:
    """Scripted source timestamps, so a timeline reads like a real session."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def tick(self, millis: float) -> datetime:
        self.now += timedelta(milliseconds=millis)
        return self.now


@dataclass(frozen=True)
class Demo:
    """A recorded session and the IDs a trace backend would hold for it."""

    path: Path
    session_id: str
    run_id: str

    @property
    def trace_hex(self) -> str:
        return f"{trace_id(self.session_id, self.run_id):032x}"

    @property
    def run_span_hex(self) -> str:
        return f"{run_span_id(self.session_id, self.run_id):016x}"

    def span_hex(self, execution_id: str, attempt: int = 1) -> str:
        return f"{span_id(self.session_id, self.run_id, execution_id, attempt):016x}"


def model_call(
    run: Any,
    clock: Clock,
    ex: Execution,
    history: list[Any],
    reply: AssistantMessage | None,
    millis: float,
    error: str | None = None,
) -> None:
    """Record one model call: start, request, end (a reply or an error)."""
    run.record(ev.model_exec_start(ex, "gpt-demo", provider="openai", timestamp=clock.tick(3)))
    run.record(
        ev.model_request(
            ex,
            history,
            tools=[{"name": "search"}, {"name": "fetch_page"}, {"name": "run_python"}],
            config={"temperature": 0.1},
            model="gpt-demo",
            timestamp=clock.tick(1),
        )
    )
    if reply is None:
        run.record(ev.model_exec_end(ex, error=error, timestamp=clock.tick(millis)))
        return
    run.record(
        ev.model_exec_end(ex, message=reply, usage=reply.usage, timestamp=clock.tick(millis))
    )
    run.record(ev.message_end(ex, reply, timestamp=clock.tick(1)))


def tool_call(
    run: Any,
    clock: Clock,
    ex: Execution,
    tool: str,
    args: dict[str, Any],
    output: str,
    millis: float,
    *,
    is_error: bool = False,
) -> None:
    """Record one tool call from request to result."""
    run.record(ev.tool_exec_start(ex, tool, args, timestamp=clock.tick(2)))
    run.record(ev.tool_invoke_start(ex, tool, args, timestamp=clock.tick(1)))
    result = ToolResultMessage(ex.id, tool, (TextContent(output),), is_error=is_error)
    run.record(
        ev.tool_exec_end(
            ex,
            tool,
            result,
            is_error=is_error,
            error={"type": "ToolError", "message": output} if is_error else None,
            timestamp=clock.tick(millis),
        )
    )


def record_demo(path: Path, *, big_output: str | None = None, title: str = "research demo") -> Demo:
    """Record a three-turn research agent: tools, a rate-limited retry, a failing tool."""
    clock = Clock()
    agent = Execution("agent", "agent")
    question = UserMessage("Which OpenTelemetry conventions describe GenAI spans?")
    history: list[Any] = [question]
    with (
        Session.create(path, metadata={"title": title}) as session,
        session.begin_run() as run,
    ):
        run.record(ev.agent_start(agent, "research-bot", timestamp=clock.tick(0)))
        run.record(ev.message_end(None, question, timestamp=clock.tick(1)))

        turn = Execution("turn_1", "turn", parent_id="agent")
        run.record(ev.turn_start(turn, 1, timestamp=clock.tick(1)))
        calls = (
            ToolCall("call_search", "search", {"query": "opentelemetry genai conventions"}),
            ToolCall("call_fetch", "fetch_page", {"url": "https://example.org/genai"}),
        )
        ask = AssistantMessage(calls, model="gpt-demo", usage=Usage(812, 64))
        model_call(run, clock, Execution("model_1", "model", parent_id="turn_1"), history, ask, 640)
        history.append(ask)
        tool_call(
            run,
            clock,
            Execution("call_search", "tool", parent_id="turn_1"),
            "search",
            dict(calls[0].arguments),
            TOOL_OUTPUT,
            180,
        )
        tool_call(
            run,
            clock,
            Execution("call_fetch", "tool", parent_id="turn_1"),
            "fetch_page",
            dict(calls[1].arguments),
            big_output or "<html>Semantic conventions for generative AI systems ...</html>",
            420,
        )
        run.record(ev.turn_end(turn, 1, stop_reason="tool_use", timestamp=clock.tick(1)))

        turn = Execution("turn_2", "turn", parent_id="agent")
        run.record(ev.turn_start(turn, 2, timestamp=clock.tick(1)))
        first = Execution("model_2", "model", attempt=1, parent_id="turn_2")
        model_call(run, clock, first, history, None, 230, error="RateLimitError")
        run.record(
            ev.retry_scheduled(
                first, next_attempt=2, delay_ms=300, error="RateLimitError", timestamp=clock.tick(1)
            )
        )
        clock.tick(300)
        code = ToolCall("call_py", "run_python", {"code": "print(len(spans))"})
        retry = AssistantMessage((code,), model="gpt-demo", usage=Usage(1460, 38))
        second = Execution("model_2", "model", attempt=2, parent_id="turn_2")
        model_call(run, clock, second, history, retry, 710)
        history.append(retry)
        tool_call(
            run,
            clock,
            Execution("call_py", "tool", parent_id="turn_2"),
            "run_python",
            dict(code.arguments),
            "NameError: name 'spans' is not defined",
            95,
            is_error=True,
        )
        run.record(ev.turn_end(turn, 2, stop_reason="tool_use", timestamp=clock.tick(1)))

        turn = Execution("turn_3", "turn", parent_id="agent")
        run.record(ev.turn_start(turn, 3, timestamp=clock.tick(1)))
        answer = AssistantMessage(
            (TextContent("The GenAI semantic conventions: gen_ai.* attributes on spans."),),
            model="gpt-demo",
            usage=Usage(1702, 121),
            stop_reason="end_turn",
        )
        model_call(
            run, clock, Execution("model_3", "model", parent_id="turn_3"), history, answer, 930
        )
        run.record(ev.turn_end(turn, 3, stop_reason="end_turn", timestamp=clock.tick(1)))
        run.record(
            ev.agent_end(
                agent, "research-bot", stop_reason="end_turn", turns=3, timestamp=clock.tick(2)
            )
        )
        run_id = run.id
    return Demo(path, session.id, run_id)


@pytest.fixture
def demo(tmp_path: Path) -> Demo:
    """A folder holding one recorded research session."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    return record_demo(folder / "research.jsonl")


# -- a real server and a real browser ---------------------------------------------------


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    """A `loopscribe serve` subprocess."""

    process: subprocess.Popen[str]
    url: str


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start ``loopscribe serve DIR`` as a subprocess on a free loopback port; always stopped."""
    started: list[subprocess.Popen[str]] = []

    def start(folder: Path, timeout: float = 20.0) -> Server:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "loopscribe.viewer", "serve", str(folder), "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"loopscribe serve exited: {process.communicate()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return Server(process, url)
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"loopscribe serve did not start listening within {timeout} s")

    yield start
    for process in started:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung server
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()
        if process.stderr:
            process.stderr.close()


@pytest.fixture
def serve_app() -> Iterator[Any]:
    """Serve an ASGI application with uvicorn on a thread, on a free loopback port; always
    stopped. Unlike ``serve``, the test holds the application (and its catalog)."""
    import threading

    import uvicorn

    started: list[tuple[Any, threading.Thread]] = []

    def start(app: Any, timeout: float = 20.0) -> str:
        port = free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
        thread.start()
        started.append((server, thread))
        deadline = time.monotonic() + timeout
        while not server.started:
            assert thread.is_alive(), "uvicorn stopped"
            assert time.monotonic() < deadline, f"uvicorn did not start within {timeout} s"
            time.sleep(0.05)
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in started:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="session")
def chromium() -> tuple[Path, Path]:
    """Paths of Chromium and chromedriver, installed from Debian once if missing."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        if shutil.which("apt-get") is None or os.geteuid() != 0:
            pytest.fail(
                "the browser tests need Chromium: apt-get install chromium chromium-driver "
                "(as root; they install it themselves when run as root on Debian)"
            )
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        commands = (
            ["apt-get", "update", "-q"],
            [
                "apt-get",
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                "chromium",
                "chromium-driver",
            ],
        )
        for command in commands:
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                pytest.fail(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr}")
        if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
            pytest.fail(
                "apt-get installed chromium but /usr/bin/chromium or chromedriver is missing"
            )
    return CHROMIUM, CHROMEDRIVER


@pytest.fixture(scope="module")
def chromium_driver(
    chromium: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """One headless Chromium per test module (starting one costs seconds); always quit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium[0])
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.add_argument("--window-size=1440,1000")
    driver = webdriver.Chrome(service=Service(str(chromium[1])), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium_driver: Any) -> Any:
    """The module's Chromium, on a blank page at the usual size, its console log emptied."""
    chromium_driver.set_window_size(1440, 1000)
    chromium_driver.get("about:blank")
    chromium_driver.get_log("browser")
    return chromium_driver


# A 1x1 PNG, as ImageContent carries it (base64).
PIXEL_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg"
    "=="
)
THINKING = "The user wants the release notes; the changelog tool has them."
SUBAGENT_OUTPUT = "SUBAGENT-OUTPUT: 14 commits since v1.2"


def record_chat(path: Path, *, title: str = "release notes") -> Demo:
    """A session holding every message shape the conversation view draws.

    loopscribe's own types (text, thinking, tool calls and results, an image,
    a file by reference), an OpenAI-shaped request and reply (``tool_calls``
    with JSON-string arguments), an Anthropic-shaped reply (``thinking`` and
    ``tool_use`` blocks), a subagent with its own tool call, and a tool that
    fails with no error type (exported as ``_OTHER``).
    """
    from loopscribe import FileContent, ImageContent, ThinkingContent

    clock = Clock()
    agent = Execution("agent", "agent")
    with (
        Session.create(path, metadata={"title": title}) as session,
        session.begin_run() as run,
    ):
        run.record(ev.agent_start(agent, "release-bot", timestamp=clock.tick(0)))
        ask = UserMessage(
            (
                TextContent("Write the release notes; the screenshot shows the last ones."),
                ImageContent(PIXEL_PNG, "image/png"),
                FileContent(uri="file:///repo/CHANGELOG.md", mime_type="text/markdown"),
            )
        )
        run.record(ev.message_end(None, ask, timestamp=clock.tick(1)))
        turn = Execution("turn_1", "turn", parent_id="agent")
        run.record(ev.turn_start(turn, 1, timestamp=clock.tick(1)))
        call = ToolCall("call_log", "git_log", {"since": "v1.2"})
        reply = AssistantMessage(
            (ThinkingContent(THINKING, signature="c2lnbmF0dXJl" * 40), call),
            model="gpt-demo",
            usage=Usage(500, 40),
        )
        model_call(run, clock, Execution("model_1", "model", parent_id="turn_1"), [ask], reply, 300)
        tool_call(
            run,
            clock,
            Execution("call_log", "tool", parent_id="turn_1"),
            "git_log",
            {"since": "v1.2"},
            "a1b2c3 fix: retry on 429",
            40,
        )
        # A subagent summarises the commits with a tool of its own.
        sub = Execution("sub_1", "agent", parent_id="turn_1")
        run.record(ev.agent_start(sub, "summariser", timestamp=clock.tick(2)))
        sub_model = Execution("sub_model", "model", parent_id="sub_1")
        sub_call = ToolCall("call_count", "count_commits", {"range": "v1.2..HEAD"})
        sub_reply = AssistantMessage((sub_call,), model="gpt-mini", usage=Usage(120, 12))
        model_call(run, clock, sub_model, [UserMessage("Count the commits")], sub_reply, 90)
        tool_call(
            run,
            clock,
            Execution("call_count", "tool", parent_id="sub_1"),
            "count_commits",
            {"range": "v1.2..HEAD"},
            SUBAGENT_OUTPUT,
            15,
        )
        run.record(ev.agent_end(sub, "summariser", timestamp=clock.tick(2)))
        # A provider-native OpenAI reply, recorded as a plain dict.
        openai = Execution("model_2", "model", parent_id="turn_1")
        run.record(
            ev.model_exec_start(openai, "gpt-4o", provider="openai", timestamp=clock.tick(2))
        )
        openai_reply = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_publish",
                    "type": "function",
                    "function": {"name": "publish", "arguments": '{"channel": "#releases"}'},
                }
            ],
        }
        run.record(ev.model_exec_end(openai, message=openai_reply, timestamp=clock.tick(120)))
        run.record(ev.message_end(openai, openai_reply, timestamp=clock.tick(1)))
        # The tool fails with no error type: is_error and a message only (_OTHER).
        failing = Execution("call_publish", "tool", parent_id="turn_1")
        run.record(
            ev.tool_exec_start(
                failing, "publish", {"channel": "#releases"}, timestamp=clock.tick(1)
            )
        )
        run.record(
            ev.tool_exec_end(
                failing,
                "publish",
                "channel #releases is archived",
                is_error=True,
                timestamp=clock.tick(30),
            )
        )
        run.record(ev.turn_end(turn, 1, stop_reason="tool_use", timestamp=clock.tick(1)))
        # An Anthropic-shaped final answer.
        anthropic = Execution("model_3", "model", parent_id="agent")
        run.record(
            ev.model_exec_start(
                anthropic, "claude-demo", provider="anthropic", timestamp=clock.tick(1)
            )
        )
        final = {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": "Publishing failed; report it.",
                    "signature": "x" * 300,
                },
                {
                    "type": "text",
                    "text": "Release notes drafted; publishing failed (channel archived).",
                },
            ],
        }
        run.record(ev.model_exec_end(anthropic, message=final, timestamp=clock.tick(200)))
        run.record(ev.message_end(anthropic, final, timestamp=clock.tick(1)))
        run.record(ev.agent_end(agent, "release-bot", timestamp=clock.tick(1)))
        run_id = run.id
    return Demo(path, session.id, run_id)
