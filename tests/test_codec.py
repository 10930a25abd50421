"""Typed values: built-in messages, registrations, and refusals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from loopscribe import (
    AssistantMessage,
    Codec,
    DecodeError,
    EncodeError,
    Event,
    Execution,
    Session,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UnknownTypeError,
    Usage,
    UserMessage,
    read,
)
from loopscribe import events as ev

EX = Execution("m", "model")


@dataclass(frozen=True)
class Artifact:
    """An application artifact."""

    name: str
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class Unregistered:
    """A message type nobody registered."""

    text: str


class Note:
    """A non-dataclass type with its own encoding."""

    def __init__(self, body: str) -> None:
        self.body = body

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Note) and other.body == self.body

    __hash__ = None  # type: ignore[assignment]


def test_builtin_messages_round_trip(session_path: Path) -> None:
    """Built-in messages read back as the same typed values."""
    msgs = [
        UserMessage("hello"),
        AssistantMessage(
            (ThinkingContent("hmm", "sig"), TextContent("hi"), ToolCall("c1", "f", {"a": 1})),
            model="m",
            usage=Usage(1, 2, 3, 4),
            stop_reason="tool_use",
        ),
        ToolResultMessage("c1", "f", (TextContent("out"),), is_error=True, details={"x": [1]}),
    ]
    with Session.create(session_path) as s, s.begin_run() as run:
        for m in msgs:
            run.record(ev.message_end(EX, m))
    back = [r.data["message"] for r in read(session_path) if r.type == "message_end"]
    assert back == msgs


def test_registered_custom_types_round_trip_with_the_same_registry(session_path: Path) -> None:
    """Custom message and artifact types are recorded and read back with their registry."""
    codec = Codec()
    codec.register(Artifact)
    codec.register(
        Note, "note", encode=lambda n: {"body": n.body}, decode=lambda d: Note(d["body"])
    )
    value = {"artifact": Artifact("a.txt", (1, 2)), "notes": [Note("x")]}
    with Session.create(session_path, codec=codec) as s, s.begin_run() as run:
        run.record(Event("tool_exec_end", Execution("c", "tool"), {"result": value}))
        run.save_checkpoint(Artifact("snap", ()))
        assert s.load_checkpoint() == Artifact("snap", ())
    (rec,) = [r for r in read(session_path, codec=codec) if r.type == "tool_exec_end"]
    assert rec.data["result"] == value
    with pytest.raises(DecodeError, match=r"session\.jsonl:3: byte \d+: .*does not know"):
        # The default codec lacks the registrations: decoding the data says so.
        [r.data.get("result") for r in read(session_path)]
    raw = [r for r in read(session_path, decode=False) if r.type == "tool_exec_end"]
    assert raw[0].data["result"]["artifact"] == {
        "$ls": "Artifact",
        "name": "a.txt",
        "sizes": [1, 2],
    }


def test_unknown_typed_message_is_diagnosed_and_recording_goes_on(session_path: Path) -> None:
    """An unregistered dataclass becomes a snapshot_error naming its type, never its value."""
    s = Session.create(session_path)
    run = s.begin_run()
    run.record(ev.message_end(EX, Unregistered("CANARY")))
    run.record(ev.message_end(EX, UserMessage("next")))
    s.close()
    assert b"CANARY" not in session_path.read_bytes()
    messages = [r.data["message"] for r in read(session_path) if r.type == "message_end"]
    assert "Unregistered" in messages[0]["snapshot_error"]
    assert "codec" in messages[0]["snapshot_error"]
    assert messages[1] == UserMessage("next")


def test_strict_dumps_still_refuses_an_unregistered_type() -> None:
    """``strict=True`` raises the old, explicit error for callers that want it."""
    with pytest.raises(UnknownTypeError, match=r"Unregistered.*codec\.register"):
        Codec().dumps({"m": Unregistered("x")}, strict=True)
    with pytest.raises(EncodeError):
        Codec().dumps({"n": 2**70}, strict=True)


def test_register_refuses_duplicates_and_non_dataclasses_without_hooks() -> None:
    """Registration errors say what is wrong."""
    codec = Codec()
    with pytest.raises(ValueError, match="registered already"):
        codec.register(UserMessage, "other")
    with pytest.raises(ValueError, match="registered already"):
        codec.register(Artifact, "user")
    with pytest.raises(ValueError, match="encode= and decode="):
        codec.register(Note)
    with pytest.raises(ValueError, match="reserved"):
        codec.register(Artifact, "$dict")


def test_an_encoder_may_encode_with_the_codec_itself() -> None:
    """A custom encoder that calls codec.dumps does not upset the outer count of typed values."""
    codec = Codec()

    def encode(note: Note) -> dict[str, str]:
        # The inner call encodes a typed value of its own and keeps the text.
        return {"body": note.body, "echo": codec.dumps(TextContent(note.body)).decode()}

    codec.register(Note, "note", encode=encode, decode=lambda d: Note(d["body"]))
    line = codec.dumps({"notes": [Note("a"), UserMessage("b"), Note("c")]})
    back = codec.loads(line)
    assert back["notes"] == [Note("a"), UserMessage("b"), Note("c")]
    plain = {"notes": [Note("a")], "plain": {"$ls": "note", "body": "x"}}
    assert codec.loads(codec.dumps(plain)) == plain
