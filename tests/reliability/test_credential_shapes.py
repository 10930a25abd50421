"""Credential shapes beyond ``api_key``: none reaches the file, a span or a log line.

Request freezing removes the shapes real SDKs use (provider header names,
headers as pairs or ``{"name", "value"}`` mappings, dataclass fields, URL
user info and query tokens); the Redactor finds a known secret in its
escaped, URL-encoded and base64 forms, and every common token shape in each
encoding, wherever a live recording puts it (tool arguments and output,
errors, prompts, session metadata); the OpenTelemetry exporter's own log
lines, as printed by ``loopscribe export`` in a real subprocess, never show
endpoint credentials; and ``error.type`` on a span is a type, never a message.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

import loopscribe
from loopscribe import Event, Execution, Record, Redactor, Session, UserMessage
from loopscribe import events as ev
from loopscribe.otel import replay
from loopscribe.testing import captured_spans

from ..otlp_receiver import closed_port
from ..secret_forms import KNOWN_SECRETS, SHAPE_ENCODINGS, SHAPES, encodings, leaks

MODEL = Execution("m1", "model")
TOOL = Execution("t1", "tool")


def canary(name: str) -> str:
    """A unique secret."""
    return f"cnry-{name}-{uuid.uuid4().hex}"


@dataclasses.dataclass
class ClientOptions:
    """A provider client's options, as a host may pass them in config."""

    model: str
    api_key: str
    passphrase: str
    organization: str = "org-1"


def test_request_freezing_removes_every_common_credential_shape(tmp_path: Path) -> None:
    """Header names, pair lists, name/value mappings, dataclass fields and URL credentials."""
    secrets = {name: canary(name) for name in "abcdefghijklmn"}
    s = secrets
    config = {
        "temperature": 0.1,
        "auth": s["a"],
        "key": s["b"],
        "passphrase": s["c"],
        "extra_headers": {
            "Ocp-Apim-Subscription-Key": s["d"],
            "x-goog-api-key": s["e"],
            "x-functions-key": s["f"],
            "anthropic-version": "2023-06-01",
        },
        "headers": [("Authorization", f"Bearer {s['g']}"), ("Accept", "application/json")],
        "header_list": [{"name": "api-key", "value": s["h"]}, {"name": "X-Trace", "value": "1"}],
        "client": ClientOptions("gpt", s["i"], s["j"]),
        "base_url": f"https://user:{s['k']}@api.example.com/v1?api-key={s['l']}&api-version=2",
        "proxies": {"https": f"http://proxy:{s['m']}@10.0.0.1:3128"},
        "endpoint": f"https://example.com/openai?sig={s['n']}&x=1",
    }
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        run.record(ev.model_request(MODEL, [], config=config))
    raw = path.read_bytes()
    assert [name for name, secret in secrets.items() if secret.encode() in raw] == []
    (request,) = [r for r in loopscribe.read(path) if r.type == "model_request"]
    kept = request.data["config"]
    assert kept["temperature"] == 0.1
    assert kept["extra_headers"] == {"anthropic-version": "2023-06-01"}
    assert kept["headers"] == [["Accept", "application/json"]]
    assert kept["header_list"] == [{"name": "X-Trace", "value": "1"}]
    assert kept["client"] == {"model": "gpt", "organization": "org-1"}
    assert kept["base_url"] == "https://api.example.com/v1?api-version=2"
    assert kept["endpoint"] == "https://example.com/openai?x=1"


def test_a_dataclass_config_loses_its_secret_fields(tmp_path: Path) -> None:
    """A config given as a dataclass keeps its other fields."""
    secret = canary("dc")
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        run.record(ev.model_request(MODEL, [], config=ClientOptions("m", secret, secret)))
    assert secret.encode() not in path.read_bytes()


@pytest.mark.parametrize(
    "secret",
    [
        'quo"te-8f4c2a6e0b9d47f1a3c5e7b9d1f3a5c7',
        "back\\slash-2d4f6b8a0c1e43579b2d4f6a8c0e2b4d",
        "nön-ascii-7e9a1c3b5d7f49e1a3c5e7b9d1f3a5c7",
    ],
)
def test_redactor_catches_escaped_and_base64_forms(tmp_path: Path, secret: str) -> None:
    """A known secret with quotes, backslashes or non-ASCII, raw, escaped twice or in Basic auth."""
    path = tmp_path / "s.jsonl"
    basic = base64.b64encode(f"user:{secret}".encode()).decode()
    basic_shifted = base64.b64encode(f"us:{secret}".encode()).decode()
    values = {
        "raw": secret,
        "json_text": json.dumps({"password": secret}),
        "ascii_json_text": json.dumps({"password": secret}, ensure_ascii=True),
        "basic": f"Authorization: Basic {basic}",
        "basic_shifted": f"Basic {basic_shifted}",
        "urlsafe": base64.urlsafe_b64encode(f"u:{secret}".encode()).decode(),
    }
    with Session.create(path, redact=Redactor([secret])) as session, session.begin_run() as run:
        run.record(Event("tool_exec_end", TOOL, {"result": values}))
    raw = path.read_bytes()
    text = raw.decode()
    assert secret not in text
    for form in (basic, basic_shifted, json.dumps(secret)[1:-1]):
        assert form not in text
    (end,) = [r for r in loopscribe.read(path) if r.type == "tool_exec_end"]
    assert "[REDACTED]" in end.data["result"]["basic"]
    assert secret not in repr(end.data)


def test_error_type_is_a_type_never_a_message(tmp_path: Path) -> None:
    """Strings and mappings handed as errors give a bounded type; the text stays in the file."""
    secret = canary("err")
    path = tmp_path / "s.jsonl"
    errors: list[Any] = [
        f"connection to db failed: password={secret}",
        {"type": f"weird {secret}", "message": secret},
        {"message": secret, "status_code": 503},
        {"type": "invalid_request_error", "message": secret},
        ValueError(secret),
        {"type": "x" * 500},
    ]
    with Session.create(path) as session, session.begin_run() as run:
        for i, error in enumerate(errors):
            tool = Execution(f"t{i}", "tool")
            run.record(ev.tool_exec_start(tool, "lookup", {}))
            run.record(ev.tool_exec_end(tool, "lookup", None, error=error))
    assert secret.encode() in path.read_bytes()  # the text stays in the file
    captured = captured_spans()
    replay(path, captured.processor)
    tools = sorted(
        (s for s in captured.spans if s.name.startswith("execute_tool")),
        key=lambda s: str((s.attributes or {}).get("loopscribe.execution.id")),
    )
    types = [(s.attributes or {}).get("error.type") for s in tools]
    assert types == ["_OTHER", "_OTHER", "503", "invalid_request_error", "ValueError", "_OTHER"]
    for span in captured.spans:
        assert secret not in repr(span.attributes)
        assert span.status.description is None
        assert all(secret not in repr(e.attributes) for e in span.events)
        if span in tools:
            assert span.status.status_code is StatusCode.ERROR


def test_export_logs_never_print_endpoint_credentials(tmp_path: Path) -> None:
    """``loopscribe export`` to an unreachable endpoint with credentials: stderr names none."""
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        run.record(ev.tool_exec_start(TOOL, "lookup", {}))
        run.record(ev.tool_exec_end(TOOL, "lookup", "ok"))
    user, password, token, header = (canary(n) for n in ("user", "pw", "tok", "hdr"))
    port = closed_port()
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{user}:{password}@127.0.0.1:{port}?token={token}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{header}",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1000",
    }
    done = subprocess.run(
        [sys.executable, "-m", "loopscribe", "-v", "export", str(path)],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0 or b"failed" in output.lower()
    for secret in (user, password, token, header):
        assert secret.encode() not in output, output.decode(errors="replace")


def _record_everywhere(path: Path, redact: Redactor, texts: list[str]) -> list[Record]:
    """Record each text as a prompt, tool arguments and output, an error and metadata."""
    seen: list[Record] = []
    with (
        Session.create(
            path, redact=redact, observers=[seen.append], metadata={"notes": texts}
        ) as s,
        s.begin_run() as run,
    ):
        for i, text in enumerate(texts):
            tool = Execution(f"t{i}", "tool")
            run.record(ev.model_request(MODEL, [UserMessage(f"use {text}")], model="m"))
            run.record(ev.tool_exec_start(tool, "bash", {"command": text, "env": {"K": text}}))
            failure = RuntimeError(f"failed: {text}")
            run.record(ev.tool_exec_end(tool, "bash", f"$ run\n{text}\n", error=failure))
    return seen


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_live_recording_removes_each_token_shape_in_each_encoding(
    tmp_path: Path, name: str
) -> None:
    """A token shape, raw, escaped, URL- or form-encoded, leaves no form in the file."""
    text, parts = SHAPES[name]
    path = tmp_path / "s.jsonl"
    written = [encodings(text)[form] for form in SHAPE_ENCODINGS]
    seen = _record_everywhere(path, Redactor.default(environ={}), written)
    raw = path.read_bytes()
    observed = "\n".join(repr(r.data) for r in seen).encode()
    secrets = {f"{name}[{i}]": part for i, part in enumerate(parts)}
    assert leaks(secrets, {"the file": raw}) == []
    assert [p for p in parts if p.encode() in observed] == []
    assert raw.count(b"[REDACTED]") >= 5 * len(written)
    assert len(list(loopscribe.read(path))) == len(seen)


@pytest.mark.parametrize("name", sorted(KNOWN_SECRETS))
def test_live_recording_removes_a_known_secret_in_each_encoding(tmp_path: Path, name: str) -> None:
    """A known secret with ``/``, ``+``, quotes or non-ASCII, in each encoding, leaves no form."""
    secret = KNOWN_SECRETS[name]
    path = tmp_path / "s.jsonl"
    seen = _record_everywhere(path, Redactor([secret]), list(encodings(secret).values()))
    raw = path.read_bytes()
    assert leaks({name: secret}, {"the file": raw}) == []
    assert secret not in "\n".join(repr(r.data) for r in seen)
    assert len(list(loopscribe.read(path))) == len(seen)
