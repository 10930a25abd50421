"""Sessions exported to a real Arize Phoenix and read back through its REST API.

Two sessions take the two ways out of the process:

* ``live``: a :class:`~loopscribe.otel.SpanBridge` observes the Session and
  hands spans to :func:`~loopscribe.otel.default_processor`, configured only
  by the standard ``OTEL_*`` variables, which sends OTLP/HTTP (protobuf) to
  Phoenix while the session is recorded;
* ``shipped``: a session recorded without a bridge, sent afterwards by the
  ``loopscribe export`` command over OTLP/gRPC.

Each lands in its own Phoenix project (the ``openinference.project.name``
resource attribute, set through ``OTEL_RESOURCE_ATTRIBUTES``). What Phoenix
stored is compared with loopscribe's ID derivation computed independently
from the file, with the spans loopscribe produced in memory, and with the
records ``loopscribe find`` resolves each span to. Canary strings planted in
every kind of body must appear in the file and never in Phoenix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SynchronousMultiSpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopscribe import (
    AssistantMessage,
    Execution,
    Run,
    Session,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    events,
    read,
)
from loopscribe.otel import (
    TERMINAL_TYPES,
    SpanBridge,
    default_processor,
    replay,
    run_span_id,
    span_id,
    to_file_uri,
    trace_id,
)

from .conftest import Phoenix

LIVE_PROJECT = "loopscribe-e2e-live"
SHIPPED_PROJECT = "loopscribe-e2e-shipped"

PAGE_SIZE = 4
"""Small on purpose, so reading a project always goes through Phoenix's cursor paging."""

MAX_PAGES = 1000

PHOENIX_DERIVED = (
    "llm.",
    "tool.",
    "input.",
    "output.",
    "embedding.",
    "retrieval.",
    "openinference.",
)
"""Namespaces of the OpenInference attributes Phoenix derives from ``gen_ai.*`` on ingest."""

INGEST_TIMEOUT_S = 60.0
"""Phoenix inserts spans in batches, in the background of the request that carried them."""

CLI_TIMEOUT_S = 60.0

# One distinct string per kind of body. Each is recorded in the session file
# (checked) and must not reach the trace backend in any form.
CANARIES = {
    "system prompt": "CANARY-SYSTEM-7f3a",
    "user prompt": "CANARY-PROMPT-19be",
    "tool declaration": "CANARY-TOOLDECL-5c01",
    "request config": "CANARY-CONFIG-8d2e",
    "assistant reply": "CANARY-REPLY-a6f4",
    "tool call arguments": "CANARY-ARGS-3e77",
    "tool output": "CANARY-OUTPUT-c9d8",
    "failed tool output": "CANARY-PARTIAL-0b5d",
    "tool error message": "CANARY-ERROR-e41c",
    "partial model output": "CANARY-STREAM-6a90",
    "model error message": "CANARY-MODELERR-2f6b",
    "checkpoint snapshot": "CANARY-SNAPSHOT-d15e",
    "session metadata": "CANARY-METADATA-47aa",
}


def _ex(call_id: str, kind: str, attempt: int = 1, parent: str | None = None) -> Execution:
    return Execution(call_id, kind, attempt, parent)


def record_scenario(session: Session) -> None:
    """Two runs: an agent turn with a model call and a retried tool, then a failed model call."""
    c = CANARIES
    with session.begin_run() as run:
        agent = _ex("agent-1", "agent")
        turn = _ex("turn-1", "turn", parent="agent-1")
        model = _ex("call-model-1", "model", parent="turn-1")
        reply = AssistantMessage(
            content=(
                TextContent(c["assistant reply"]),
                ToolCall("toolu-1", "search", {"query": c["tool call arguments"]}),
            ),
            model="e2e-model-1",
            provider="e2e-provider",
            usage=Usage(input_tokens=120, output_tokens=30),
            stop_reason="tool_use",
        )
        run.record(events.agent_start(agent, "e2e-agent"))
        run.record(events.turn_start(turn, 1))
        run.record(events.model_exec_start(model, "e2e-model-1", provider="e2e-provider"))
        run.record(
            events.model_request(
                model,
                [SystemMessage(c["system prompt"]), UserMessage(c["user prompt"])],
                [{"name": "search", "description": c["tool declaration"]}],
                {"temperature": 0.25, "system_hint": c["request config"]},
                model="e2e-model-1",
            )
        )
        run.record(events.model_exec_end(model, message=reply, usage=reply.usage))
        run.record(events.message_end(model, reply))
        _record_tool(run)
        run.record(events.turn_end(turn, 1, stop_reason="end_turn", tool_calls=1))
        run.record(events.agent_end(agent, "e2e-agent", stop_reason="end_turn", turns=1))
        run.save_checkpoint({"notes": c["checkpoint snapshot"]})
    with session.begin_run() as run:
        failing = _ex("call-model-2", "model")
        run.record(events.model_exec_start(failing, "e2e-model-2"))
        run.record(
            events.model_exec_end(
                failing,
                partial_message=AssistantMessage(content=(TextContent(c["partial model output"]),)),
                error=ConnectionResetError(c["model error message"]),
            )
        )


def _record_tool(run: Run) -> None:
    c = CANARIES
    args = {"query": c["tool call arguments"]}
    first = _ex("toolu-1", "tool", 1, "turn-1")
    run.record(events.tool_exec_start(first, "search", args))
    run.record(events.tool_invoke_start(first, "search", args))
    run.record(
        events.tool_exec_end(
            first, "search", c["failed tool output"], error=TimeoutError(c["tool error message"])
        )
    )
    run.record(events.retry_scheduled(first, next_attempt=2, delay_ms=5.0))
    second = _ex("toolu-1", "tool", 2, "turn-1")
    run.record(events.tool_exec_start(second, "search", args))
    run.record(events.tool_invoke_start(second, "search", args))
    run.record(events.tool_exec_end(second, "search", {"hits": [c["tool output"]]}))
    result = ToolResultMessage("toolu-1", "search", (TextContent(c["tool output"]),))
    run.record(events.message_end(None, result))


# -- what the file says the spans must be ----------------------------------------


@dataclass(frozen=True, slots=True)
class ExpectedSpan:
    """One span as derived from the session file alone, with the records behind it."""

    trace_id: str
    span_id: str
    parent_id: str | None
    run_id: str
    execution: tuple[str, int] | None
    seq_first: int
    seq_last: int
    records: frozenset[int]


@dataclass(slots=True)
class _Open:
    first: int
    parent: str | None
    last: int | None = None
    records: set[int] = field(default_factory=set)


def expected_spans(path: Path) -> dict[str, ExpectedSpan]:
    """The spans of a complete session file by span ID, from the documented derivation."""
    out: dict[str, ExpectedSpan] = {}
    session_id = ""
    runs: dict[str, _Open] = {}
    attempts: dict[tuple[str, str, int], _Open] = {}
    latest: dict[tuple[str, str], int] = {}
    for record in read(path, decode=False):
        session_id = record.session_id
        if record.run_id is None:
            continue
        run_key = record.run_id
        ex = record.execution
        if ex is None:
            run = runs.setdefault(run_key, _Open(first=record.seq, parent=None))
            run.records.add(record.seq)
            if record.type == "run_close":
                run.last = record.seq
            continue
        key = (run_key, ex.id, ex.attempt)
        attempt = attempts.get(key)
        if attempt is None:
            if ex.parent_id is None:
                parent = run_span_id(session_id, run_key)
            else:
                parent_attempt = latest[(run_key, ex.parent_id)]
                parent = span_id(session_id, run_key, ex.parent_id, parent_attempt)
            attempt = attempts[key] = _Open(first=record.seq, parent=f"{parent:016x}")
            latest[(run_key, ex.id)] = ex.attempt
        attempt.records.add(record.seq)
        if attempt.last is None and record.type in TERMINAL_TYPES:
            attempt.last = record.seq
    for run_key, run in runs.items():
        assert run.last is not None, f"run {run_key} has no run_close"
        sid = f"{run_span_id(session_id, run_key):016x}"
        out[sid] = ExpectedSpan(
            f"{trace_id(session_id, run_key):032x}",
            sid,
            None,
            run_key,
            None,
            run.first,
            run.last,
            frozenset(run.records),
        )
    for (run_key, ex_id, number), attempt in attempts.items():
        assert attempt.last is not None, f"{ex_id} attempt {number} never ended"
        sid = f"{span_id(session_id, run_key, ex_id, number):016x}"
        out[sid] = ExpectedSpan(
            f"{trace_id(session_id, run_key):032x}",
            sid,
            attempt.parent,
            run_key,
            (ex_id, number),
            attempt.first,
            attempt.last,
            frozenset(attempt.records),
        )
    return out


# -- Phoenix ----------------------------------------------------------------------


def project_spans(phoenix: Phoenix, project: str) -> list[dict[str, Any]]:
    """Every span of a Phoenix project, following ``next_cursor`` page by page."""
    path = f"/v1/projects/{urllib.parse.quote(project, safe='')}/spans"
    spans: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        query = [("limit", str(PAGE_SIZE))]
        if cursor is not None:
            query.append(("cursor", cursor))
        try:
            page = phoenix.get_json(path, query)
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 404 and not spans:
                return []  # the project appears with its first span
            raise
        spans.extend(page["data"])
        cursor = page.get("next_cursor")
        if not cursor:
            return spans
    raise AssertionError(f"{path}: still paging after {MAX_PAGES} pages of {PAGE_SIZE}")


def wait_for_spans(phoenix: Phoenix, project: str, count: int) -> list[dict[str, Any]]:
    """The project's spans once at least ``count`` arrived (fails after a timeout)."""
    deadline = time.monotonic() + INGEST_TIMEOUT_S
    spans: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        spans = project_spans(phoenix, project)
        if len(spans) >= count:
            return spans
        time.sleep(0.25)
    raise AssertionError(
        f"project {project!r} has {len(spans)} of {count} spans after {INGEST_TIMEOUT_S:.0f} s; "
        f"log {phoenix.log}:\n{phoenix.log_tail()}"
    )


def _json_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# -- the two sessions -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Exported:
    """A recorded session, what loopscribe emitted for it, and what Phoenix stored."""

    path: Path
    project: str
    expected: dict[str, ExpectedSpan]
    local: dict[str, ReadableSpan]
    stored: dict[str, dict[str, Any]]


def _by_id(spans: Sequence[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {f"{span.context.span_id:016x}": span for span in spans if span.context}


def _stored_by_id(spans: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by_id = {span["context"]["span_id"]: span for span in spans}
    assert len(by_id) == len(spans), "Phoenix returned a span ID twice"
    return by_id


@pytest.fixture(scope="module")
def sessions_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder ``loopscribe find`` searches: both session files live here."""
    return tmp_path_factory.mktemp("sessions")


@pytest.fixture(scope="module")
def live(phoenix: Phoenix, sessions_dir: Path) -> Exported:
    """A session whose spans went to Phoenix over OTLP/HTTP while it was recorded."""
    path = sessions_dir / "live.jsonl"
    captured = InMemorySpanExporter()
    with pytest.MonkeyPatch.context() as env:
        for name in [k for k in os.environ if k.startswith("OTEL_")]:
            env.delenv(name)
        env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.base_url)
        env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        env.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={LIVE_PROJECT}")
        exporting = default_processor(path)
        # The SDK's own fan-out; its __init__ is not annotated.
        processor = SynchronousMultiSpanProcessor()  # type: ignore[no-untyped-call]
        processor.add_span_processor(SimpleSpanProcessor(captured))
        processor.add_span_processor(exporting)
        bridge = SpanBridge(processor, file_uri=path)
        metadata = {"title": CANARIES["session metadata"]}
        try:
            with Session.create(path, observers=[bridge], metadata=metadata) as session:
                record_scenario(session)
        finally:
            processor.shutdown()
    assert bridge.failed_records == 0
    assert bridge.dropped_spans == 0
    expected = expected_spans(path)
    stored = wait_for_spans(phoenix, LIVE_PROJECT, len(expected))
    return Exported(
        path, LIVE_PROJECT, expected, _by_id(captured.get_finished_spans()), _stored_by_id(stored)
    )


def loopscribe_cli(*args: str, env: Mapping[str, str] | None = None) -> str:
    """Run the project's ``loopscribe`` command; its stdout, or a failure with its stderr."""
    executable = Path(sys.executable).with_name("loopscribe")
    result = subprocess.run(
        [str(executable), *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        env=None if env is None else dict(env),
        check=False,
    )
    assert result.returncode == 0, (
        f"loopscribe {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    )
    return result.stdout


def _export_env(phoenix: Phoenix) -> dict[str, str]:
    """The environment of ``loopscribe export``: only standard OTEL_* settings, gRPC to Phoenix."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{phoenix.grpc_port}",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_INSECURE="true",
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={SHIPPED_PROJECT}",
    )
    return env


@pytest.fixture(scope="module")
def shipped(phoenix: Phoenix, sessions_dir: Path) -> Exported:
    """A session recorded without a bridge and sent later by ``loopscribe export`` over gRPC."""
    path = sessions_dir / "shipped.jsonl"
    with Session.create(path, metadata={"title": CANARIES["session metadata"]}) as session:
        record_scenario(session)
    env = _export_env(phoenix)
    loopscribe_cli("--json", "export", str(path), env=env)
    # What the exporter should have sent: a replay of the file, in memory.
    captured = InMemorySpanExporter()
    replay(path, SimpleSpanProcessor(captured))
    expected = expected_spans(path)
    stored = wait_for_spans(phoenix, SHIPPED_PROJECT, len(expected))
    return Exported(
        path,
        SHIPPED_PROJECT,
        expected,
        _by_id(captured.get_finished_spans()),
        _stored_by_id(stored),
    )


@pytest.fixture(params=["live", "shipped"])
def exported(request: pytest.FixtureRequest) -> Exported:
    """Each of the two sessions in turn."""
    result: Exported = request.getfixturevalue(request.param)
    return result


# -- the tests --------------------------------------------------------------------


def test_phoenix_stores_exactly_the_derived_ids_and_parents(exported: Exported) -> None:
    """Trace IDs, span IDs and parent links in Phoenix equal loopscribe's derivation."""
    assert set(exported.stored) == set(exported.expected)
    for sid, want in exported.expected.items():
        got = exported.stored[sid]
        assert got["context"]["trace_id"] == want.trace_id, sid
        assert got["parent_id"] == want.parent_id, sid
    # Two runs, two traces.
    assert len({span.trace_id for span in exported.expected.values()}) == 2


def test_phoenix_stores_what_loopscribe_emitted(exported: Exported) -> None:
    """Names, statuses and every attribute round-trip unchanged through Phoenix."""
    assert set(exported.local) == set(exported.stored)
    for sid, span in exported.local.items():
        got = exported.stored[sid]
        assert got["name"] == span.name
        assert got["status_code"] == span.status.status_code.name
        want = {k: _json_value(v) for k, v in (span.attributes or {}).items()}
        # Phoenix keeps openinference.span.kind as the span's kind, not as an attribute.
        kind = want.pop("openinference.span.kind", None)
        if kind is not None:
            assert got["span_kind"] == kind, sid
        assert {k: got["attributes"].get(k) for k in want} == want, sid
        # Phoenix adds OpenInference attributes it derives from the GenAI ones
        # (llm.model_name, llm.token_count.*, output.value = {"model": ...}).
        added = set(got["attributes"]) - set(want)
        assert all(k.startswith(PHOENIX_DERIVED) for k in added), (sid, added)
        assert got["events"] == []


def test_reference_attributes_name_the_records(exported: Exported) -> None:
    """``session.id`` and the ``loopscribe.*`` references point at the right records."""
    session_id = next(read(exported.path, decode=False)).session_id
    uri = to_file_uri(exported.path)
    for sid, want in exported.expected.items():
        attrs = exported.stored[sid]["attributes"]
        assert attrs["session.id"] == session_id
        assert attrs["gen_ai.conversation.id"] == session_id
        assert "loopscribe.session.id" not in attrs  # each reference once
        assert attrs["loopscribe.run.id"] == want.run_id
        assert attrs["loopscribe.seq.first"] == want.seq_first
        assert attrs["loopscribe.seq.last"] == want.seq_last
        # The file, once: on a chat span, as the base of its message references.
        refs = [v for k, v in attrs.items() if k.endswith("_ref")]
        named = attrs.get("loopscribe.file") or refs[0].partition("#")[0]
        assert named == uri
        assert all(ref.startswith(uri + "#seq=") for ref in refs)
        if want.execution is None:
            assert "loopscribe.execution.id" not in attrs
        else:
            assert attrs["loopscribe.execution.id"] == want.execution[0]
            assert attrs["loopscribe.attempt"] == want.execution[1]


def test_failures_are_errors_with_a_type_and_no_message(exported: Exported) -> None:
    """The failed tool attempt and model call are ERROR spans carrying only ``error.type``."""
    failed = {
        span["attributes"]["loopscribe.execution.id"]: span
        for span in exported.stored.values()
        if span["status_code"] == "ERROR"
    }
    assert set(failed) == {"toolu-1", "call-model-2"}
    assert failed["toolu-1"]["attributes"]["loopscribe.attempt"] == 1
    assert failed["toolu-1"]["attributes"]["error.type"] == "TimeoutError"
    assert failed["call-model-2"]["attributes"]["error.type"] == "ConnectionResetError"
    assert all(span["status_message"] == "" for span in failed.values())


def _phoenix_documents(phoenix: Phoenix, project: str) -> Iterator[tuple[str, Any]]:
    yield "spans", project_spans(phoenix, project)
    quoted = urllib.parse.quote(project, safe="")
    yield (
        "otlpv1 spans",
        phoenix.get_json(f"/v1/projects/{quoted}/spans/otlpv1", [("limit", "1000")]),
    )
    yield "projects", phoenix.get_json("/v1/projects")


def test_no_body_reaches_phoenix(phoenix: Phoenix, exported: Exported) -> None:
    """Every canary is in the session file, and none is anywhere in Phoenix's answers."""
    recorded = exported.path.read_text()
    missing = [kind for kind, canary in CANARIES.items() if canary not in recorded]
    assert not missing, f"the scenario did not record: {missing}"
    for what, document in _phoenix_documents(phoenix, exported.project):
        text = json.dumps(document)
        leaked = [kind for kind, canary in CANARIES.items() if canary in text]
        assert not leaked, f"Phoenix {what} of {exported.project} contain: {leaked}"


def test_find_resolves_every_stored_span_to_its_records(
    exported: Exported, sessions_dir: Path
) -> None:
    """``loopscribe find DIR --trace-id --span-id`` prints exactly the records behind each span."""
    for sid, span in exported.stored.items():
        want = exported.expected[sid]
        out = loopscribe_cli(
            "--json",
            "find",
            str(sessions_dir),
            "--trace-id",
            span["context"]["trace_id"],
            "--span-id",
            sid,
        )
        found = [json.loads(line) for line in out.splitlines() if line.strip()]
        assert {Path(r["file"]).name for r in found} == {exported.path.name}, sid
        assert {r["seq"] for r in found} == want.records, sid
        attrs = span["attributes"]
        assert {attrs["loopscribe.seq.first"], attrs["loopscribe.seq.last"]} <= want.records
        for r in found:
            assert r["run_id"] == attrs["loopscribe.run.id"]
            ex = r.get("execution")
            coordinates = None if ex is None else (ex["id"], ex.get("attempt", 1))
            assert coordinates == want.execution, (sid, r["seq"])


def test_find_gives_back_the_bodies_the_span_left_out(
    exported: Exported, sessions_dir: Path
) -> None:
    """The failed tool attempt's span leads to its arguments and error message in the file."""
    (span,) = [
        s
        for s in exported.stored.values()
        if s["attributes"].get("loopscribe.execution.id") == "toolu-1"
        and s["attributes"]["loopscribe.attempt"] == 1
    ]
    out = loopscribe_cli(
        "--json",
        "find",
        str(sessions_dir),
        "--trace-id",
        span["context"]["trace_id"],
        "--span-id",
        span["context"]["span_id"],
    )
    assert CANARIES["tool call arguments"] in out
    assert CANARIES["tool error message"] in out
    assert CANARIES["user prompt"] not in out


def test_export_again_sends_nothing_twice(phoenix: Phoenix, shipped: Exported) -> None:
    """A second ``loopscribe export`` resumes from its cursor and sends no span again."""
    env = _export_env(phoenix)
    out = loopscribe_cli("--json", "export", str(shipped.path), env=env)
    (result,) = [json.loads(line) for line in out.splitlines() if line.strip()]
    # Phoenix itself ignores a span ID it has already stored, so the count of
    # spans there cannot show a resend; the exporter's own account does.
    assert (result["sent"], result["failed"]) == (0, 0)
    assert result["skipped"] == len(shipped.expected)
    assert len(project_spans(phoenix, SHIPPED_PROJECT)) == len(shipped.expected)
