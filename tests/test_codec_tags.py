"""The check that a written line holds exactly one ``"$ls"`` key per typed value.

It takes a shortcut when the line has no other ``$``; lines with other
``$`` bytes (shell text, JSON-schema keys) or a plain dict that uses the
reserved key must still come back as they went in.
"""

from __future__ import annotations

from typing import Any

import pytest

from loopscribe import AssistantMessage, TextContent, ToolCall, UserMessage
from loopscribe._codec import DEFAULT_CODEC


def tool_schema() -> dict[str, Any]:
    """A tool declaration whose JSON schema uses ``$`` keys, as many do."""
    return {
        "name": "run",
        "parameters": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$defs": {"path": {"type": "string"}},
            "properties": {"cwd": {"$ref": "#/$defs/path"}},
        },
    }


@pytest.mark.parametrize("dollars", [0, 1, 40, 500])
@pytest.mark.parametrize("reserved", [False, True])
def test_typed_values_among_dollar_signs_and_reserved_keys_read_back(
    dollars: int, reserved: bool
) -> None:
    """Typed messages, ``$`` in text and keys, and plain ``"$ls"`` dicts all round-trip."""
    shell = " ".join("$HOME" for _ in range(dollars))
    value: dict[str, Any] = {
        "messages": [
            UserMessage(f"run {shell}"),
            AssistantMessage((TextContent(shell or "ok"), ToolCall("c1", "run", {"cmd": shell}))),
        ],
        "tools": [tool_schema()] if dollars else [],
    }
    if reserved:
        value["plain"] = {"$ls": "user", "content": "not a message", "$$ls": shell}
    line = DEFAULT_CODEC.dumps(value, newline=True)
    assert DEFAULT_CODEC.loads(line) == value
    assert isinstance(DEFAULT_CODEC.loads(line)["messages"][0], UserMessage)
    if reserved:
        assert isinstance(DEFAULT_CODEC.loads(line)["plain"], dict)
