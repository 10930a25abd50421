"""Secret canaries: planted credentials never reach the file, the wire, the logs or the CLI.

Each secret gets a unique canary. The ones in request config (``api_key``,
an ``Authorization`` header, ``client_secret``, ``aws_secret_access_key``)
must be dropped by request freezing on its own; the ones in tool arguments
and exception messages by the documented hook, ``Redactor``, also where a
tool hands them on URL-encoded, form-encoded or JSON-escaped as ``\\/``. The OTLP
header canary is meant to reach the collector's HTTP headers, and nowhere
else. Every canary is searched raw, base64-encoded (at each alignment, both
alphabets) and URL-encoded in: the session folder's files, the raw OTLP/HTTP
request bodies as received on 127.0.0.1, every log record, and CLI output.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from loopscribe import AssistantMessage, Execution, Redactor, Session, UserMessage
from loopscribe import events as ev
from loopscribe.cli import main
from loopscribe.otel import SpanBridge, default_processor, trace_id

from ..otlp_receiver import http_receiver


def canary(name: str) -> str:
    """A unique secret; '+', '/' and '=' make its URL-encoded forms differ from the raw one."""
    return f"cnry+{name}/{uuid.uuid4().hex}=="


def forms(secret: str) -> dict[str, bytes]:
    """The raw, URL-encoded and base64 forms of ``secret`` to search for."""
    raw = secret.encode()
    found = {
        "raw": raw,
        "url": quote(secret, safe="").encode(),
        "url_plus": quote_plus(secret).encode(),
        "json_escaped": secret.replace("/", "\\/").encode(),
    }
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw)
        # Only the 4-character groups that hold canary bytes alone, whatever precedes it.
        first = 4 * ((shift + 2) // 3)
        last = 4 * ((shift + len(raw)) // 3)
        stable = encoded[first:last]
        found[f"base64_{shift}"] = stable
        found[f"base64url_{shift}"] = stable.replace(b"+", b"-").replace(b"/", b"_")
    return found


def hits(secrets: dict[str, str], places: dict[str, bytes]) -> list[str]:
    """Every (secret, form, place) where a form of a secret occurs."""
    return [
        f"{name} ({form}) in {where}"
        for name, secret in secrets.items()
        for form, needle in forms(secret).items()
        for where, haystack in places.items()
        if needle in haystack
    ]


@pytest.fixture(autouse=True)
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTLP or batch-processor variable from the outer environment leaks into a test."""
    for name in list(os.environ):
        if name.startswith(("OTEL_EXPORTER_OTLP_", "OTEL_BSP_")):
            monkeypatch.delenv(name)


def test_forms_find_a_canary_in_each_encoding() -> None:
    """The search itself works: each encoding of a canary, embedded in text, is found."""
    secret = canary("self_test")
    for shift in range(3):
        padded = b"x" * shift + secret.encode() + b"tail"
        assert hits({"s": secret}, {"b64": b"pre" + base64.b64encode(padded)})
        assert hits({"s": secret}, {"b64url": base64.urlsafe_b64encode(padded)})
    assert hits({"s": secret}, {"url": f"?k={quote(secret, safe='')}&x".encode()})
    assert hits({"s": secret}, {"raw": f"a {secret} b".encode()})
    assert not hits({"s": secret}, {"other": canary("other").encode()})


def record_session(path: Path, secrets: dict[str, str]) -> tuple[str, str]:
    """Record a session with every canary planted; return (session_id, run_id)."""
    now = datetime.now(UTC)

    def at(step: int) -> datetime:
        return now + timedelta(milliseconds=step)

    config = {
        "temperature": 0.2,
        "api_key": secrets["api_key"],
        "extra_headers": {
            "Authorization": f"Bearer {secrets['authorization']}",
            "X-Trace": "keep-me",
        },
        "client_secret": secrets["client_secret"],
        "aws_secret_access_key": secrets["aws_secret_access_key"],
        "provider": {
            "client_secret": secrets["client_secret"],
            "aws_secret_access_key": secrets["aws_secret_access_key"],
            "region": "eu-west-1",
        },
    }
    redact = Redactor([secrets["tool_argument"], secrets["exception"]])
    processor = default_processor(path)
    bridge = SpanBridge(processor, file_uri=path)
    turn = Execution("turn_1", "turn")
    model = Execution("model_1", "model", parent_id="turn_1")
    retry = Execution("model_1", "model", attempt=2, parent_id="turn_1")
    tool = Execution("call_1", "tool", parent_id="turn_1")
    failure = RuntimeError(f"provider said no: {secrets['exception']}")
    try:
        with (
            Session.create(path, observers=[bridge], redact=redact) as session,
            session.begin_run() as run,
        ):
            run.record(ev.turn_start(turn, 1, timestamp=at(1)))
            run.record(ev.model_exec_start(model, "gpt-test", provider="openai", timestamp=at(2)))
            request = ev.model_request(
                model, [UserMessage("look it up")], config=config, model="gpt-test", timestamp=at(3)
            )
            run.record(request)
            run.record(ev.model_exec_end(model, error=failure, timestamp=at(4)))
            run.record(ev.model_exec_start(retry, "gpt-test", provider="openai", timestamp=at(5)))
            run.record(
                ev.model_request(retry, [UserMessage("again")], config=config, timestamp=at(6))
            )
            message = AssistantMessage(model="gpt-test", stop_reason="tool_use")
            run.record(ev.model_exec_end(retry, message=message, timestamp=at(7)))
            planted = secrets["tool_argument"]
            args = {
                "query": planted,
                "token_hint": "none",
                # As a tool that builds URLs or prints JSON would hand it on.
                "url": f"https://search.example.com/q?k={quote(planted, safe='')}&n=1",
                "form": f"k={quote_plus(planted)}&n=1",
                "json": json.dumps({"k": planted}).replace("/", "\\/"),
            }
            run.record(ev.tool_exec_start(tool, "search", args, timestamp=at(8)))
            run.record(ev.tool_invoke_start(tool, "search", args, timestamp=at(9)))
            run.record(
                ev.tool_exec_end(
                    tool,
                    "search",
                    f"searched for {secrets['tool_argument']}",
                    is_error=True,
                    error=ValueError(
                        f"bad query {secrets['exception']}: GET https://api.example.com/"
                        f"v1?q={quote(secrets['exception'], safe='')} returned 400"
                    ),
                    timestamp=at(10),
                )
            )
            run.record(ev.turn_end(turn, 1, error=failure, stop_reason="error", timestamp=at(11)))
    finally:
        processor.shutdown()
    return session.id, run.id


def test_no_canary_reaches_file_wire_logs_or_cli(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Canaries in config, headers, tool args, exceptions and OTLP headers leak nowhere."""
    secrets = {
        name: canary(name)
        for name in (
            "api_key",
            "authorization",
            "client_secret",
            "aws_secret_access_key",
            "tool_argument",
            "exception",
        )
    }
    # Header values travel through W3C-baggage parsing: keep this one URL-safe.
    otlp_secret = f"cnry-otlp-{uuid.uuid4().hex}"
    folder = tmp_path / "sessions"
    folder.mkdir()
    path = folder / "agent.jsonl"
    caplog.set_level(logging.DEBUG, logger="loopscribe")
    caplog.set_level(logging.DEBUG, logger="opentelemetry")
    with http_receiver() as received:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", received.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer {otlp_secret}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
        session_id, run_id = record_session(path, secrets)
        live_spans = len(received.spans())
        trace = f"{trace_id(session_id, run_id):032x}"
        statuses = [
            main(["show", str(path)]),
            main(["--json", "show", str(path)]),
            main(["find", str(folder), "--trace-id", trace]),
            main(["--json", "find", str(folder), "--trace-id", trace]),
            main(["tail", str(path), "-n", "100"]),
            main(["--json", "tail", str(path), "-n", "100"]),
            main(["-v", "export", str(path)]),
        ]
        # A second exporter run sends nothing new; a fresh cursor sends it all again.
        for cursor in folder.glob("*.export-cursor*"):
            cursor.unlink()
        statuses.append(main(["-v", "--json", "export", str(path)]))
        bodies, headers = received.snapshot()
    cli = capsys.readouterr()

    assert statuses == [0] * len(statuses), cli.err
    assert live_spans == 5  # run, turn, two model attempts, tool
    assert len(received.spans()) > live_spans  # the CLI export reached the wire too
    assert all(h.get("authorization") == f"Bearer {otlp_secret}" for h in headers)
    assert b"[REDACTED]" in path.read_bytes()  # the hook did run
    assert b"keep-me" in path.read_bytes()  # and freezing kept the harmless header
    logs = "\n".join(
        [caplog.text]
        + [r.getMessage() for r in caplog.records]
        + [repr(r.args) for r in caplog.records]
    )
    logging.getLogger("loopscribe.otel").debug("capture probe")
    assert "capture probe" in caplog.text  # DEBUG capture was live for loopscribe's loggers
    places = {
        f"file {p.relative_to(tmp_path)}": p.read_bytes()
        for p in tmp_path.rglob("*")
        if p.is_file()
    }
    places.update({f"OTLP body {i}": body for i, body in enumerate(bodies)})
    places.update({"logs": logs.encode(), "stdout": cli.out.encode(), "stderr": cli.err.encode()})
    leaks = hits({**secrets, "otlp_header": otlp_secret}, places)
    assert not leaks, "\n".join(leaks)
    assert secrets["tool_argument"] not in cli.out  # plain check, readable on failure
