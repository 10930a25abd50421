"""What is recorded and what is not, and how requests are frozen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from loopscribe import (
    Actor,
    AssistantMessage,
    CorruptRecordError,
    Event,
    Execution,
    Session,
    TextContent,
    UserMessage,
    read,
    summarize,
)
from loopscribe import events as ev
from loopscribe.live import follow

MODEL = Execution("m1", "model", parent_id="turn_1")
TOOL = Execution("call_1", "tool", parent_id="turn_1")


def types_in(path: Path) -> list[str]:
    """The record types of a file, lifecycle records excluded."""
    skip = {"session_start", "run_start", "run_close"}
    return [r.type for r in read(path) if r.type not in skip]


def record_all(path: Path, events: list[Event]) -> None:
    """Record events into a new session file."""
    with Session.create(path) as s, s.begin_run() as run:
        for event in events:
            run.record(event)


def test_transient_events_are_not_written(session_path: Path) -> None:
    """Token deltas, partial snapshots, model_stream and tool progress never reach the file."""
    partial = AssistantMessage((TextContent("CANARY-PARTIAL"),))
    with Session.create(session_path) as s, s.begin_run() as run:
        assert run.record(ev.message_update(MODEL, partial, delta="CANARY-DELTA")) is None
        assert run.record(ev.model_stream(MODEL, {"delta": "CANARY-STREAM"})) is None
        assert run.record(ev.tool_exec_update(TOOL, {"progress": "CANARY-PROGRESS"})) is None
        assert run.record(ev.model_response(MODEL, partial)) is None
    assert b"CANARY" not in session_path.read_bytes()
    assert types_in(session_path) == []


def test_the_recorded_table(session_path: Path) -> None:
    """Every fact of the recorder table is written, with its content."""
    final = AssistantMessage((TextContent("answer"),), model="m-1")
    events = [
        ev.agent_start(Execution("agent", "agent"), "helper"),
        ev.turn_start(Execution("turn_1", "turn", parent_id="agent"), 1),
        ev.model_exec_start(MODEL, "m-1", provider="acme"),
        ev.model_request(
            MODEL, [UserMessage("question")], [{"name": "read_file"}], {"temperature": 0.5}
        ),
        ev.model_exec_end(MODEL, message=final, usage={"input_tokens": 3, "output_tokens": 4}),
        ev.message_end(MODEL, final),
        ev.tool_exec_start(TOOL, "read_file", {"path": "a"}),
        ev.tool_invoke_start(TOOL, "read_file", {"path": "/abs/a"}),
        ev.tool_exec_end(TOOL, "read_file", "contents", details={"bytes": 8}, disposition="ok"),
        ev.context_transform_start(Execution("ctx", "context"), messages=10),
        ev.context_transform_end(Execution("ctx", "context"), messages=4, summary="short"),
        ev.retry_scheduled(MODEL, next_attempt=2, delay_ms=100, error="RateLimit"),
        ev.turn_end(Execution("turn_1", "turn", parent_id="agent"), 1, stop_reason="end"),
        ev.agent_end(Execution("agent", "agent"), "helper", stop_reason="end"),
    ]
    record_all(session_path, events)
    recs = {r.type: r for r in read(session_path)}
    assert types_in(session_path) == [e.type for e in events]
    req = recs["model_request"].data
    assert req["messages"] == [UserMessage("question")]
    assert req["tools"] == [{"name": "read_file"}]
    assert req["config"] == {"temperature": 0.5}
    assert recs["model_exec_end"].data["message"] == final
    assert recs["message_end"].data["message"] == final
    assert recs["tool_invoke_start"].data["args"] == {"path": "/abs/a"}
    end = recs["tool_exec_end"].data
    assert (end["result"], end["details"], end["is_error"], end["disposition"]) == (
        "contents",
        {"bytes": 8},
        False,
        "ok",
    )
    assert recs["retry_scheduled"].data["error"] == {"type": "RateLimit", "message": ""}


def test_length_recovery_decision_is_written_without_the_message(session_path: Path) -> None:
    """A model_response with a length-recovery decision keeps the decision, not the message."""
    msg = AssistantMessage((TextContent("CANARY-DUP"),))
    decision = {"action": "continue", "max_tokens": 8192}
    with Session.create(session_path) as s, s.begin_run() as run:
        rec = run.record(ev.model_response(MODEL, msg, length_recovery=decision))
    assert rec is not None
    assert b"CANARY-DUP" not in session_path.read_bytes()
    (back,) = [r for r in read(session_path) if r.type == "model_response"]
    assert back.data == {"length_recovery": decision}


def test_failed_partial_content_is_recorded_once(session_path: Path) -> None:
    """A failed stream's partial content appears exactly once, at model_exec_end."""
    partial = AssistantMessage((TextContent("CANARY-ONCE"),))
    record_all(
        session_path,
        [
            ev.message_start(MODEL, AssistantMessage()),
            ev.message_update(MODEL, partial, delta="CANARY-ONCE"),
            ev.model_exec_end(MODEL, partial_message=partial, error=TimeoutError("stream cut")),
        ],
    )
    assert session_path.read_bytes().count(b"CANARY-ONCE") == 1
    (end,) = [r for r in read(session_path) if r.type == "model_exec_end"]
    assert end.data["partial_message"] == partial
    assert end.data["error"] == {"type": "TimeoutError", "message": "stream cut"}
    assert "message_end" not in types_in(session_path)


def test_message_start_is_written_without_its_partial_snapshot(session_path: Path) -> None:
    """message_start marks when a message began but never stores the snapshot."""
    record_all(session_path, [ev.message_start(MODEL, AssistantMessage((TextContent("CANARY"),)))])
    assert b"CANARY" not in session_path.read_bytes()
    assert types_in(session_path) == ["message_start"]


def test_api_key_and_credentials_are_removed_also_from_the_host_event(session_path: Path) -> None:
    """Credentials never reach the file, nor the in-memory request event the host keeps."""
    config = {
        "api_key": "sk-CANARY-1",
        "temperature": 0.2,
        "extra_headers": {"Authorization": "Bearer CANARY-2", "X-Trace": "ok"},
        "client_secret": "CANARY-3",
        "aws_session_token": "CANARY-4",
        "max_tokens": 100,
    }
    event = ev.model_request(MODEL, [UserMessage("hi")], config=config)
    assert "CANARY" not in repr(event)
    with Session.create(session_path) as s, s.begin_run() as run:
        run.record(event)
        # A hand-built request is frozen on the way in too.
        run.record(Event("model_request", MODEL, {"messages": [], "config": config}))
    raw = session_path.read_bytes()
    assert b"CANARY" not in raw
    configs = [r.data["config"] for r in read(session_path) if r.type == "model_request"]
    expected = {"temperature": 0.2, "extra_headers": {"X-Trace": "ok"}, "max_tokens": 100}
    assert configs == [expected, expected]


def test_json_valued_config_is_frozen_when_the_event_is_built(session_path: Path) -> None:
    """Mutating the host's config after publishing does not change the recorded request."""
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    config: dict[str, Any] = {"response_format": {"json_schema": {"schema": schema}}}
    messages: list[Any] = [UserMessage("q")]
    event = ev.model_request(MODEL, messages, config=config)
    schema["properties"]["b"] = {"type": "CHANGED"}
    messages.append(UserMessage("CHANGED"))
    assert isinstance(event.data["config"]["response_format"], orjson.Fragment)
    record_all(session_path, [event])
    assert b"CHANGED" not in session_path.read_bytes()
    (req,) = [r for r in read(session_path) if r.type == "model_request"]
    assert req.data["config"]["response_format"]["json_schema"]["schema"]["properties"] == {
        "a": {"type": "string"}
    }


class Unencodable:
    """A value JSON cannot hold."""

    def __repr__(self) -> str:
        return "CANARY-INPUT"


def test_unencodable_config_becomes_snapshot_error_without_the_input(session_path: Path) -> None:
    """An unencodable config value becomes a diagnostic that keeps nothing of it."""
    secret_holder = {"nested": Unencodable(), "text": "CANARY-TEXT"}
    event = ev.model_request(MODEL, [], config={"tool_choice": secret_holder, "seed": 7})
    record_all(session_path, [event])
    raw = session_path.read_bytes()
    assert b"CANARY" not in raw
    (req,) = [r for r in read(session_path) if r.type == "model_request"]
    diag = req.data["config"]["tool_choice"]
    assert set(diag) == {"snapshot_error"}
    assert "dict" in diag["snapshot_error"]
    assert req.data["config"]["seed"] == 7


def test_only_policy_types_have_their_data_changed() -> None:
    """The run writes any type outside POLICY_TYPES as given: written_data agrees for every type."""
    names = [v for k, v in vars(ev).items() if k.isupper() and isinstance(v, str)]
    data = {"message": 1, "partial_message": 2, "state": 3, "snapshot": 4, "length_recovery": 5}
    for kind in names:
        if kind not in ev.POLICY_TYPES:
            assert ev.written_data(kind, data) is data, kind
    assert {ev.TURN_START, ev.MESSAGE_START, ev.MODEL_STREAM, ev.MODEL_REQUEST} <= ev.POLICY_TYPES


# -- the audit trail: who did it, and approvals -------------------------------------------


def test_an_event_names_its_own_actor_and_the_record_keeps_it(session_path: Path) -> None:
    """Event(actor=...) is written per record and read back (read and follow), beside the run's."""
    user, agent = Actor(user_id="u-7", tenant_id="acme"), Actor(label="researcher")
    with Session.create(session_path) as s, s.begin_run(actor=Actor(label="host")) as run:
        written = run.record(Event("tool_exec_start", TOOL, {"tool": "rm"}, actor=agent))
        plain = run.record(Event("tool_exec_end", TOOL, {"tool": "rm"}))
    assert written is not None
    assert written.actor == agent
    assert plain is not None
    assert plain.actor is None
    records = {r.seq: r for r in read(session_path)}
    assert records[written.seq].actor == agent
    assert records[plain.seq].actor is None
    assert records[1].data["actor"] == {"label": "host"}  # the run's actor, as before
    followed = list(follow(session_path, idle_timeout=0.1))
    assert [r.actor for r in followed] == [r.actor for r in records.values()]
    line = session_path.read_bytes().splitlines()[written.seq]
    assert orjson.loads(line)["actor"] == {"label": "researcher"}
    assert user.to_json() == {"user_id": "u-7", "tenant_id": "acme"}


@pytest.mark.parametrize("actor", [["u1"], "u1", {"user_id": 7}, {"label": None}])
def test_a_damaged_actor_is_reported_by_read_and_open(session_path: Path, actor: Any) -> None:
    """An actor that is not an object of strings is a corrupt line to read() and Session.open."""
    with Session.create(session_path) as s, s.begin_run() as run:
        run.record(Event("turn_start", TOOL, {}, actor=Actor("u1")))
    lines = session_path.read_bytes().splitlines(keepends=True)
    obj = orjson.loads(lines[2])
    obj["actor"] = actor
    lines[2] = orjson.dumps(obj) + b"\n"
    session_path.write_bytes(b"".join(lines))
    with pytest.raises(CorruptRecordError, match="'actor'"):
        list(read(session_path))
    with pytest.raises(CorruptRecordError, match="'actor'"):
        Session.open(session_path)


def test_an_approval_names_the_call_the_decision_and_who_made_it(session_path: Path) -> None:
    """events.approval: tool, decision, a bounded one-line summary of the arguments, the actor."""
    args = {"path": "/srv/data\n" + "x" * 10_000}
    alice = Actor(user_id="alice")
    with Session.create(session_path) as s, s.begin_run() as run:
        run.record(ev.approval(TOOL, "rm", approved=True, args=args, reason="ok'd", actor=alice))
        run.record(ev.approval(TOOL, "rm", approved=False, always=True))
    approved, rejected = [r for r in read(session_path) if r.type == ev.APPROVAL]
    assert approved.execution == TOOL
    assert approved.actor == alice
    assert approved.data == {
        "tool": "rm",
        "approved": True,
        "summary": summarize(args),
        "reason": "ok'd",
    }
    assert len(approved.data["summary"]) <= 160
    assert "\n" not in approved.data["summary"]
    assert rejected.data == {"tool": "rm", "approved": False, "always": True}
    assert rejected.actor is None
    assert ev.APPROVAL not in ev.POLICY_TYPES  # hosts record it like any fact


def test_chain_start_is_written_by_the_session_only(session_path: Path) -> None:
    """chain_start is a lifecycle record: a host cannot forge where a chain begins."""
    with (
        Session.create(session_path) as s,
        s.begin_run() as run,
        pytest.raises(ValueError, match="written by loopscribe"),
    ):
        run.record(Event(ev.CHAIN_START, None, {"chain": "sha256"}))
