"""Hostile values never stop a recording, in the core and through every adapter.

Each value here is something an agent can meet in tool output, a web page or
a provider body. The core records it (escaped, or as a ``snapshot_error``
for that value alone) and goes on; each adapter hands it to the same core
path, so the same values are fed through LangChain, pydantic-ai and the
OpenAI Agents SDK with their own test models.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

import loopscribe
from loopscribe import Event, Execution, Record, Session, ToolResultMessage, UserMessage
from loopscribe import events as ev

EX = Execution("t", "tool")


@dataclasses.dataclass
class Unregistered:
    """An object of a class the codec does not know, as tool output."""

    secret_field: str


class Color(enum.Enum):
    """An enum a host may put in tool output."""

    RED = "red"


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"d": value}
    return value


def _cut_emoji() -> str:
    """What ``json.loads`` gives for an emoji cut in half: a lone surrogate."""
    return str(json.loads('"cut \\ud83d"'))


def _self_holding() -> list[Any]:
    """A circular value: nests without end."""
    value: list[Any] = ["level"]
    value.append(value)
    return value


RESERVED: list[Any] = [
    {"$ls": "assistant", "content": "not typed"},
    {"$ls": "no-such-type"},
    {"$ls": {"$ls": "user"}, "$$ls": ["$ls"], "$$$ls": None},
    {"outer": [{"inner": {"$ls": "tool_call", "id": "x"}}]},
    {"$ls": "$dict", "$$ls": "text"},
    {"$ls": 7, "x": {"$ls": [1, {"$ls": "usage"}]}},
]
"""Plain dicts using the reserved key: each must read back equal."""

UNENCODABLE: list[tuple[str, Any, str]] = [
    ("int beyond 64 bits", 2**64, "builtins.int"),
    ("negative int beyond 64 bits", -(2**63) - 1, "builtins.int"),
    ("nesting past orjson's limit", _deep(400), "builtins.dict"),
    ("bytes", b"\x00\xffCANARY", "builtins.bytes"),
    ("a set", {"CANARY"}, "builtins.set"),
    ("a lone surrogate", _cut_emoji(), "builtins.str"),
    ("an unregistered object", Unregistered("CANARY"), "Unregistered"),
    ("a non-string key", {1: "CANARY"}, "builtins.dict"),
    ("a lone surrogate in a key", {_cut_emoji(): "CANARY"}, "builtins.dict"),
    ("a list that holds itself", _self_holding(), "builtins.list"),
]


def _snapshot_errors(value: Any) -> list[str]:
    """Every ``snapshot_error`` text inside ``value``."""
    found: list[str] = []
    if isinstance(value, dict):
        if set(value) == {"snapshot_error"}:
            found.append(value["snapshot_error"])
        for item in value.values():
            found += _snapshot_errors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            found += _snapshot_errors(item)
    return found


# -- the core --------------------------------------------------------------------------


@pytest.mark.parametrize("value", RESERVED)
def test_a_dict_using_the_reserved_key_reads_back_equal(tmp_path: Path, value: Any) -> None:
    """At any depth and with any tag, a plain '$ls' dict is data: it reads back as given."""
    path = tmp_path / "s.jsonl"
    data = {"result": value, "nested": [{"deep": value}], "message": ToolResultMessage("c", "t")}
    with Session.create(path) as session, session.begin_run() as run:
        run.record(Event("tool_exec_end", EX, data))
        run.record(Event("tool_exec_end", EX, {"result": "after"}))
    records = [r for r in loopscribe.read(path) if r.type == "tool_exec_end"]
    assert records[0].data == data
    assert isinstance(records[0].data["message"], ToolResultMessage)
    assert records[1].data == {"result": "after"}
    assert b'"$ls":"$dict"' in path.read_bytes()


@pytest.mark.parametrize(
    ("case", "value", "type_name"), UNENCODABLE, ids=[c[0] for c in UNENCODABLE]
)
def test_a_hostile_value_where_a_message_belongs_is_data_unless_it_is_a_host_class(
    tmp_path: Path, case: str, value: Any, type_name: str
) -> None:
    """As a message, in a dict message or as a block: diagnosed; an unregistered class raises."""
    path = tmp_path / "s.jsonl"
    session = Session.create(path)
    run = session.begin_run()
    run.record(ev.message_end(EX, {"role": "tool", "content": value}))
    run.record(ev.model_request(EX, [{"role": "user", "content": [value]}]))
    if isinstance(value, Unregistered):
        with pytest.raises(loopscribe.UnknownTypeError, match="Unregistered"):
            run.record(ev.message_end(EX, value))
        with pytest.raises(loopscribe.UnknownTypeError):
            session.close()
    else:
        run.record(ev.message_end(EX, value))
        run.record(ev.message_end(EX, ToolResultMessage("c", "t", (value,))))
        assert session.error is None
        session.close()
    assert b"CANARY" not in path.read_bytes()
    ends = [r.data["message"] for r in loopscribe.read(path) if r.type == "message_end"]
    assert len(_snapshot_errors(ends[0])) == 1, case
    assert all(type_name in error for error in _snapshot_errors(ends))


@pytest.mark.parametrize(
    ("case", "value", "type_name"), UNENCODABLE, ids=[c[0] for c in UNENCODABLE]
)
def test_an_unencodable_value_is_diagnosed_alone(
    tmp_path: Path, case: str, value: Any, type_name: str
) -> None:
    """The value becomes a snapshot_error naming its type; neighbours and next record stay."""
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        run.record(Event("tool_exec_end", EX, {"result": value, "ok": "kept", "n": 1}))
        run.record(ev.message_end(EX, UserMessage("next")))
        assert session.error is None
    assert b"CANARY" not in path.read_bytes()
    records = list(loopscribe.read(path))
    (end,) = [r for r in records if r.type == "tool_exec_end"]
    assert end.data["ok"] == "kept"
    assert end.data["n"] == 1
    errors = _snapshot_errors(end.data["result"])
    assert len(errors) == 1, case
    assert type_name in errors[0]
    assert [r.data["message"] for r in records if r.type == "message_end"] == [UserMessage("next")]
    assert records[-1].type == "run_close"


def test_typed_plain_values_read_back_as_documented(tmp_path: Path) -> None:
    """datetime, UUID and Enum read back as ISO string, canonical string and the member's value."""
    path = tmp_path / "s.jsonl"
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    ident = uuid.UUID(int=42)
    with Session.create(path) as session, session.begin_run() as run:
        run.record(Event("note", None, {"at": moment, "id": ident, "color": Color.RED}))
    (note,) = [r.data for r in loopscribe.read(path) if r.type == "note"]
    assert note == {"at": "2026-01-02T03:04:05+00:00", "id": str(ident), "color": "red"}


def test_a_write_failure_is_still_sticky(tmp_path: Path) -> None:
    """What really is the file's fault keeps failing every later call."""
    path = tmp_path / "s.jsonl"
    session = Session.create(path)
    run = session.begin_run()
    session.close()
    with pytest.raises(loopscribe.SessionClosedError):
        run.record(Event("note", None, {"x": 2**70}))


def test_many_hostile_records_in_a_row_all_land(tmp_path: Path) -> None:
    """A thousand hostile values in a row: every record is written, none is lost."""
    path = tmp_path / "s.jsonl"
    values = [*RESERVED, *(v for _, v, _ in UNENCODABLE)]
    with Session.create(path) as session, session.begin_run() as run:
        for i in range(1000):
            run.record(Event("note", None, {"i": i, "v": values[i % len(values)]}))
    notes = [r.data for r in loopscribe.read(path) if r.type == "note"]
    assert [n["i"] for n in notes] == list(range(1000))


# -- through each adapter --------------------------------------------------------------


def _assert_recorded_through(records: list[Record]) -> None:
    """The run closed and every '$ls' dict is in the file as given (an adapter may
    lower the other values its own way, e.g. a set to a list, before the core sees them)."""
    assert records[-1].type == "run_close"
    text = repr([r.data for r in records])
    for value in RESERVED:
        assert repr(value) in text or json.dumps(value) in text or str(value) in text


def _hostile_outputs() -> list[Any]:
    return [*RESERVED, *(v for _, v, _ in UNENCODABLE)]


def test_langchain_records_through_hostile_tool_output(tmp_path: Path) -> None:
    """A LangChain tool returning each hostile value: the handler never errs, the run closes."""
    pytest.importorskip("langchain_core")
    from langchain_core.tools import StructuredTool

    from loopscribe.adapters.langchain import LoopscribeCallbackHandler

    path = tmp_path / "lc.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        for i, value in enumerate(_hostile_outputs()):

            def hostile(_value: Any = value) -> Any:
                """Return a hostile value."""
                return _value

            tool = StructuredTool.from_function(hostile, name=f"hostile_{i}")
            tool.invoke({}, {"callbacks": [handler]})
        assert session.error is None
    assert handler.errors == 0
    records = list(loopscribe.read(path))
    ends = [r for r in records if r.type == "tool_exec_end"]
    assert len(ends) == len(_hostile_outputs())
    for end, value in zip(ends, RESERVED, strict=False):
        assert end.data["result"] == value
    _assert_recorded_through(records)


def test_pydantic_ai_records_through_hostile_tool_output(tmp_path: Path) -> None:
    """A pydantic-ai tool returning each hostile value, under a FunctionModel: the run closes."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_core import to_json

    from loopscribe.adapters.pydantic_ai import LoopscribeCapability

    def framework_takes(value: Any) -> bool:
        # pydantic-ai sends tool output back to the model as JSON; a value its own
        # serializer refuses (nesting past its limit) fails the agent run before
        # any recording, so it cannot reach loopscribe.
        try:
            to_json(value, fallback=str)
        except Exception:
            return False
        return True

    outputs = [v for v in _hostile_outputs() if framework_takes(v)]
    assert len(outputs) >= len(RESERVED) + 5
    calls = [0]

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls[0] += 1
        if calls[0] == 1:
            parts = [
                ToolCallPart("hostile", {"i": i}, tool_call_id=f"c{i}") for i in range(len(outputs))
            ]
            return ModelResponse(parts=list(parts))
        return ModelResponse(parts=[TextPart(f"done {_cut_emoji()}")])

    agent = Agent(FunctionModel(script, model_name="scripted"))

    @agent.tool_plain
    def hostile(i: int) -> Any:
        """Return hostile value ``i``."""
        return outputs[i]

    path = tmp_path / "pai.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        recorder = LoopscribeCapability(run)
        asyncio.run(agent.run("go", capabilities=[recorder]))
        assert session.error is None
    assert recorder.errors == 0
    records = list(loopscribe.read(path))
    assert len([r for r in records if r.type == "tool_exec_end"]) == len(outputs)
    assert any(r.type == "model_exec_end" for r in records[-6:])
    _assert_recorded_through(records)


def test_openai_agents_records_through_hostile_tool_output(tmp_path: Path) -> None:
    """An OpenAI Agents tool returning hostile values, under the SDK's ScriptedModel."""
    pytest.importorskip("agents")
    from agents import Agent, RunConfig, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from loopscribe.adapters.openai_agents import LoopscribeHooks

    outputs = _hostile_outputs()

    @function_tool
    def hostile(i: int) -> Any:
        """Return hostile value ``i``."""
        return outputs[i]

    model = ScriptedModel(
        [
            [function_call("hostile", {"i": i}, call_id=f"c{i}") for i in range(len(outputs))],
            [assistant_message(f"done {_cut_emoji()}")],
        ]
    )
    agent: Agent[Any] = Agent(name="hostile", model=model, tools=[hostile])
    path = tmp_path / "oa.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run)
        asyncio.run(hooks.run(agent, "go", run_config=RunConfig(tracing_disabled=True)))
        assert session.error is None
    assert hooks.errors == 0
    records = list(loopscribe.read(path))
    assert len([r for r in records if r.type == "tool_exec_end"]) == len(outputs)
    _assert_recorded_through(records)
