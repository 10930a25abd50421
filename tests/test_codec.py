"""Typed values: built-in messages, registrations, and refusals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


class Plain:
    """A host class that is no dataclass: orjson cannot encode it either."""

    def __init__(self, text: str) -> None:
        self.text = text


TYPED_POSITIONS = [
    ("a committed message", lambda bad: ev.message_end(EX, bad)),
    ("a content block", lambda bad: ev.message_end(EX, AssistantMessage((TextContent("ok"), bad)))),
    ("a user message's block", lambda bad: ev.message_end(EX, UserMessage((bad,)))),
    ("a request message", lambda bad: ev.model_request(EX, [UserMessage("hi"), bad])),
    ("a model result", lambda bad: ev.model_exec_end(EX, message=bad)),
    ("a partial result", lambda bad: ev.model_exec_end(EX, partial_message=bad, error="E")),
    ("a routed attempt's partial", lambda bad: ev.model_route(EX, "m", partial_message=bad)),
    ("a run's artifact", lambda bad: ev.agent_end(EX, "a", artifacts={"plan": bad})),
]


@pytest.mark.parametrize(
    "bad", [Unregistered("CANARY"), Plain("CANARY")], ids=["dataclass", "class"]
)
@pytest.mark.parametrize(("case", "make"), TYPED_POSITIONS, ids=[c for c, _ in TYPED_POSITIONS])
def test_an_unregistered_class_in_a_typed_position_raises_before_anything_is_written(
    session_path: Path, case: str, make: Any, bad: Any
) -> None:
    """A host's own class where a message or artifact belongs is a set-up mistake: loud, sticky."""
    s = Session.create(session_path)
    run = s.begin_run()
    size, seq = s.size, s.next_seq
    with pytest.raises(
        UnknownTypeError, match=rf"{type(bad).__qualname__}.*codec\.register"
    ) as err:
        run.record(make(bad))
    assert (s.size, s.next_seq) == (size, seq)  # not a byte of the record was written
    assert session_path.stat().st_size == size
    assert s.error is err.value
    with pytest.raises(UnknownTypeError):
        run.record(ev.message_end(EX, UserMessage("next")))
    with pytest.raises(UnknownTypeError):
        s.close()
    assert b"CANARY" not in session_path.read_bytes()


def test_an_unregistered_class_in_a_data_position_is_diagnosed(session_path: Path) -> None:
    """Tool output, arguments and details are data: the value becomes a snapshot_error."""
    tool = Execution("t", "tool")
    with Session.create(session_path) as s, s.begin_run() as run:
        run.record(ev.tool_exec_end(tool, "t", Plain("CANARY"), details=Unregistered("CANARY")))
        run.record(ev.tool_exec_start(tool, "t", {"arg": Unregistered("CANARY")}))
        result = ToolResultMessage("t", "t", (TextContent("ok"),), details=Plain("CANARY"))
        run.record(ev.message_end(tool, result))
        run.record(Event("note", None, {"message": Plain("CANARY")}))  # a host's own type
        assert s.error is None
    assert b"CANARY" not in session_path.read_bytes()
    data = [r.data for r in read(session_path) if r.execution is not None or r.type == "note"]
    assert "Plain" in data[0]["result"]["snapshot_error"]
    assert "Unregistered" in data[1]["args"]["arg"]["snapshot_error"]
    assert "Plain" in data[2]["message"].details["snapshot_error"]
    assert "Plain" in data[3]["message"]["snapshot_error"]


def test_plain_values_in_typed_positions_are_data(session_path: Path) -> None:
    """Dict messages, strings and values JSON cannot hold never raise where a message belongs."""
    hostile = {"role": "tool", "content": [b"\xff", {"$ls": "user"}, 2**70]}
    with Session.create(session_path) as s, s.begin_run() as run:
        for message in (hostile, "plain text", [1, {"a": b"x"}], b"raw", {"x"}, 2**70, None):
            run.record(ev.message_end(EX, message))
        run.record(ev.model_request(EX, [hostile, "hi"]))
        block: Any = {"type": "text", "text": b"x"}  # a provider's block, as a dict
        run.record(ev.message_end(EX, AssistantMessage((block,))))
        assert s.error is None
    ends: list[Any] = [r.data.get("message") for r in read(session_path) if r.type == "message_end"]
    assert ends[0]["content"][1] == {"$ls": "user"}
    assert "snapshot_error" in ends[0]["content"][0]
    assert ends[1] == "plain text"
    assert "snapshot_error" in ends[3]
    assert "snapshot_error" in ends[-1].content[0]["text"]


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
