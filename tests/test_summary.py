"""Bounded one-line summaries: short, one line, printable and never an error, whatever the value."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

import loopscribe
from loopscribe import AssistantMessage, TextContent, ToolCall, UserMessage, summarize
from loopscribe._preview import preview
from loopscribe.summary import SUMMARY_CHARS

UNSAFE = {"Cc", "Cf", "Cs", "Zl", "Zp"}


class Unprintable:
    """An object whose ``str()`` and ``repr()`` raise."""

    def __str__(self) -> str:
        raise RuntimeError("no text for you")

    __repr__ = __str__


class HostileMapping(Mapping[str, Any]):
    """A Mapping whose every lookup raises."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("lookup refused")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("iteration refused")

    def __len__(self) -> int:
        return 1


class Counted(list[Any]):
    """A list that counts how many of its items were looked at."""

    looked_at = 0

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            Counted.looked_at += 1
            yield item


@dataclass
class HostNote:
    """A host's own dataclass, not registered with any codec."""

    text: str
    secret_number: int


def self_referencing_dict() -> dict[str, Any]:
    """``d["self"] is d``."""
    d: dict[str, Any] = {"name": "loop"}
    d["self"] = d
    return d


def self_referencing_list() -> list[Any]:
    """``x[1] is x``."""
    x: list[Any] = ["start"]
    x.append(x)
    return x


def nested(depth: int) -> list[Any]:
    """A list nested ``depth`` levels deep (far past the recursion limit)."""
    root: list[Any] = []
    inner = root
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    inner.append("bottom")
    return root


HOSTILE: dict[str, Any] = {
    "huge string": "x" * 5_000_000,
    "huge whitespace then text": " " * 2_000_000 + "late",
    "control characters": "a\x00b\x1b[31mred\x07\x7f\x85c\r\nnext\u2028line\u2029para",
    "bidi and zero width": "safe\u202eevil\u200bjoin\u2066iso\ufeffbom",
    "lone surrogate": "before\ud800after",
    "huge int": 10**5000,
    "big int": 2**200,
    "non-str keys": {1: "one", (1, 2): "pair", None: "none", 2.5: "float", False: "no"},
    "bytes": b"\x00\xffbinary\n" * 100_000,
    "bytearray": bytearray(b"\x1b[2J clear screen"),
    "memoryview": memoryview(b"view"),
    "2-d memoryview": memoryview(bytes(16)).cast("B", (4, 4)),
    "cyclic dict": self_referencing_dict(),
    "cyclic list": self_referencing_list(),
    "deep nesting": nested(100_000),
    "deep dicts": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": "x" * 1000}}}}}}}},
    "a set": {"alpha", "beta"},
    "unprintable object": Unprintable(),
    "hostile mapping": HostileMapping(),
    "dict holding a hostile mapping": {"args": HostileMapping()},
    "nan and inf": {"nan": float("nan"), "inf": float("inf")},
    "a generator": (i for i in range(10)),
    "a type": int,
    "a host dataclass": HostNote("note text", 7),
    "wide list": list(range(1_000_000)),
    "many keys": {f"k{i}": i for i in range(100_000)},
    "newline keys": {"a\nb": "c\rd"},
}


@pytest.mark.parametrize("limit", [1, 2, 20, SUMMARY_CHARS])
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_value_gives_one_short_printable_line(name: str, limit: int) -> None:
    """Every hostile value: a str of at most ``limit`` characters, one line, nothing unsafe."""
    text = summarize(HOSTILE[name], limit)
    assert isinstance(text, str)
    assert len(text) <= limit
    assert not any(unicodedata.category(c) in UNSAFE for c in text)
    assert not any(c.isspace() and c != " " for c in text)
    assert "  " not in text
    orjson.dumps(text)  # valid UTF-8: a web page or a JSON line can carry it


def test_escapes_show_what_was_there() -> None:
    """Control, bidi and surrogate characters become visible escapes; whitespace one space."""
    assert summarize("a\x1b[31mb\tc\n\nd\u202ee\ud800f") == "a\\x1b[31mb c d\\u202ee\\ud800f"


def test_values_json_cannot_hold_are_still_shown() -> None:
    """Huge ints, non-string keys, bytes and sets are shown, not refused."""
    assert summarize(10**5000) == "<int of 16610 bits>"
    assert summarize(2**70) == "1180591620717411303424"
    assert summarize({1: "a", (1, 2): "b", None: 3}) == '{"1":"a","[1,2]":"b","null":3}'
    assert summarize(b"\x00ab") == "b'\\x00ab'"
    assert summarize(b"z" * 1000, 40).startswith("b'zzz")
    assert summarize({"k": {"only"}}) == '{"k":["only"]}'
    assert summarize({"a": "x\ud800", "b": 2**64}) == '{"a":"x\\ud800","b":18446744073709551616}'
    assert summarize({"a": 1, "b": [1.5, None, True]}) == '{"a":1,"b":[1.5,null,true]}'
    assert summarize(Unprintable()) == "<Unprintable>"
    assert summarize(HostileMapping()) == "<HostileMapping>"


def test_cycles_and_depth_end_in_an_ellipsis() -> None:
    """A value that contains itself, or nests past MAX_DEPTH, shows "…" where it repeats."""
    assert summarize(self_referencing_dict()) == '{"name":"loop","self":…}'
    assert summarize(self_referencing_list()) == "start …"
    assert summarize(nested(10_000), 500).endswith("…")
    shared = {"text": "same"}
    assert summarize([shared, shared]) == "same same"  # shared, not cyclic


def test_work_is_bounded_by_a_budget_not_by_the_size_of_the_value() -> None:
    """A 100,000-item list is looked at a few hundred items deep, whatever the limit."""
    Counted.looked_at = 0
    summarize(Counted([{"text": ""} for _ in range(100_000)]), 10_000)
    assert 0 < Counted.looked_at <= 500


def test_messages_and_tool_calls_read_as_text() -> None:
    """Message objects, their stored form and provider shapes give text and name(arguments)."""
    message = AssistantMessage((TextContent("It is sunny."), ToolCall("c1", "get", {"q": 1})))
    assert summarize(message) == 'It is sunny. get({"q":1})'
    assert summarize(UserMessage("Weather\nin Lisbon?")) == "Weather in Lisbon?"
    assert summarize({"$ls": "tool_call", "name": "rm", "arguments": {"path": "/"}}) == (
        'rm({"path":"/"})'
    )
    assert summarize({"type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}) == (
        'f({"a":1})'
    )
    assert summarize([{"type": "text", "text": "look"}, {"type": "image"}]) == "look [image]"
    assert summarize({"type": "thinking", "thinking": "hidden"}) == ""
    assert summarize(HostNote("note text", 7)) == "note text"
    assert summarize({"city": "Lisbon", "days": 3}) == '{"city":"Lisbon","days":3}'


def test_a_cut_summary_ends_with_an_ellipsis() -> None:
    """A summary longer than the limit keeps limit - 1 characters and "…"."""
    text = summarize("word " * 100, 12)
    assert text == "word word w…"
    assert summarize("short", 12) == "short"
    assert summarize(None) == ""


@pytest.mark.parametrize("limit", [0, -1, 1.5])
def test_a_limit_below_one_is_a_clear_error(limit: Any) -> None:
    """A limit that leaves no room is the caller's mistake, said in one line."""
    with pytest.raises(ValueError, match="limit"):
        summarize("x", limit)


def test_the_viewer_previews_tool_inputs_with_the_public_summary() -> None:
    """A timeline row's preview of a tool call is loopscribe.summarize of its arguments."""
    args = {"cmd": "rm -rf /\n\x1b[2J", "n": 10**5000, 1: b"\x00"}
    shown = preview("tool_exec_start", {"tool": "shell", "args": args})
    assert shown == summarize(args) == loopscribe.summarize(args)
    assert "\x1b" not in (shown or "")
    assert "\n" not in (shown or "")
