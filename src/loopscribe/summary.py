"""Bounded one-line summaries of any value: what an audit line or a timeline row shows.

:func:`summarize` turns a tool's input, a message, a result or anything else
into one short line of plain text, for places that must say what ran
without copying it: an ``approval`` record's ``summary``, a viewer's row, a
log line. It reads loopscribe's message types (``{"$ls": "assistant", ...}``
or the objects themselves) and the plain shapes hosts and importers record
(OpenAI and Anthropic message dicts, tool-use blocks, function calls): text
gives its text, a tool call ``name(arguments)``, an image or file a
bracketed tag; any other object is shown as compact JSON.

The summary is safe to print anywhere, whatever the value holds:

* at most ``limit`` characters, and one line: every run of whitespace
  (newlines included) becomes one space, and every other control,
  format (bidirectional overrides, zero-width characters) or separator
  character, and a lone surrogate, is written as an escape (``\\x1b``);
* bounded work: at most a fixed number of values are looked at, strings
  and bytes are cut before they are processed, nesting deeper than
  :data:`MAX_DEPTH` and cycles show as ``…``;
* never an exception: an int too long to print, a non-string key, bytes,
  a set, an object whose ``str()`` raises, are each shown as well as they
  can be (an object that cannot be shown at all gives ``<its type>``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import unicodedata
from collections.abc import Iterator, Mapping, Set
from typing import Any

import orjson

from ._codec import DEFAULT_CODEC

__all__ = ["MAX_DEPTH", "SUMMARY_CHARS", "summarize"]

SUMMARY_CHARS = 160
"""The default longest summary."""
MAX_DEPTH = 32
"""Containers nested deeper are summarized as ``…``."""
_WALK_BUDGET = 400
"""Values looked at per summary: a huge value costs no more than a small one."""
_TEXT_KEYS = ("text", "content", "output", "result", "message", "thinking", "parts")
_TOOL_CALL_TAGS = ("tool_call", "tool_use", "function_call")
_IMAGE_TAGS = ("image", "image_url", "input_image")
_FILE_TAGS = ("file", "document", "input_file")
_THINKING_TAGS = ("thinking", "reasoning", "redacted_thinking")
# Characters escaped rather than shown: they move the cursor, hide text or
# reorder it on a terminal or a page (Unicode controls, formats, separators,
# and surrogates, which cannot even be encoded).
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


class _Exhausted(Exception):
    """The summary is full, or its budget is spent: stop walking."""


def summarize(value: Any, limit: int = SUMMARY_CHARS) -> str:
    """A one-line summary of ``value``, at most ``limit`` characters.

    Text blocks and message contents give their text; a tool call gives
    ``name(arguments)``; an image or file gives a bracketed tag; reasoning
    is left out; any other object is shown as compact JSON. A summary that
    had to be cut ends with ``…``.

    Args:
        value: Anything: parsed JSON, loopscribe's message types, bytes,
            sets, a host's own objects.
        limit: The longest summary, in characters (at least 1).

    Returns:
        The summary; empty when ``value`` holds no text (``None``, ``""``,
        an empty list).

    Raises:
        ValueError: ``limit`` is less than 1.
    """
    if not isinstance(limit, int) or limit < 1:
        raise ValueError(f"summarize(limit=...) must be an int of at least 1, got {limit!r}")
    summary = _Summary(limit)
    try:
        summary.walk(value, 0)
    except _Exhausted:
        pass
    except Exception:
        # A hostile object (a Mapping whose get() raises, ...): what came before it stays.
        with contextlib.suppress(_Exhausted):
            summary.put(f"<{_type_name(value)}>")
    line = " ".join(summary.parts)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _type_name(value: Any) -> str:
    return type(value).__qualname__


def _clean(text: str) -> str:
    """One line: whitespace runs become one space; unsafe characters become escapes."""
    text = " ".join(text.split())
    if text.isprintable():
        return text
    out = []
    for char in text:
        if unicodedata.category(char) in _UNSAFE_CATEGORIES:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def _int_text(value: int) -> str:
    try:
        return str(int(value))
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        return f"<int of {int(value).bit_length()} bits>"


def _typed(value: Any) -> Any:
    """A registered typed value (a loopscribe message) as its stored form, else ``value``."""
    try:
        return DEFAULT_CODEC.default(value)
    except Exception:
        pass
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    return value


class _Summary:
    """The parts of one summary, and what is left of its size and its budget."""

    __slots__ = ("active", "budget", "limit", "parts", "size")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0
        self.budget = _WALK_BUDGET
        self.active: set[int] = set()  # the containers being walked: a cycle is shown as "…"

    def room(self) -> int:
        """Characters worth taking from the next string (cut early, before any work on it)."""
        return 2 * (self.limit - self.size) + 2

    def put(self, text: str) -> None:
        text = _clean(text[: self.room()])
        if text:
            self.parts.append(text)
            self.size += len(text) + 1
        if self.size >= self.limit:
            raise _Exhausted

    def spend(self) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise _Exhausted

    def walk(self, value: Any, depth: int) -> None:
        """Put the readable text of ``value``."""
        self.spend()
        if value is None:
            return
        kind = type(value)
        if kind is str:
            self.put(value)
            return
        if kind is dict or kind is list:
            self.walk_container(value, depth)
            return
        if isinstance(value, str):
            self.put(value)
            return
        if isinstance(value, bool | float):
            self.put(str(bool(value) if isinstance(value, bool) else float(value)))
            return
        if isinstance(value, int):
            self.put(_int_text(value))
            return
        if isinstance(value, bytes | bytearray | memoryview):
            self.put(self.bytes_text(value))
            return
        if not isinstance(value, list | tuple | Set | Mapping):
            value = _typed(value)
        if isinstance(value, list | tuple | Set | Mapping):
            self.walk_container(value, depth)
            return
        self.put(self.object_text(value))

    def walk_container(self, value: Any, depth: int) -> None:
        """Put the text of a list, set or mapping (``…`` where it contains itself)."""
        if depth >= MAX_DEPTH or id(value) in self.active:
            self.put("…")
            return
        self.active.add(id(value))
        if isinstance(value, Mapping):
            self.walk_mapping(value, depth)
        else:
            for item in value:
                self.walk(item, depth + 1)
        self.active.discard(id(value))

    def walk_mapping(self, value: Mapping[Any, Any], depth: int) -> None:
        tag = value.get("$ls") or value.get("type")
        if tag in _TOOL_CALL_TAGS:
            args = value.get("arguments", value.get("input"))
            shown = "" if args is None or args == "" else self.compact(args)
            self.put(f"{self.text(value.get('name')) or '?'}({shown})")
            return
        function = value.get("function")
        if isinstance(function, Mapping):
            name, args = self.text(function.get("name")), self.text(function.get("arguments"))
            self.put(f"{name or '?'}({args})")
            return
        if tag in _IMAGE_TAGS:
            self.put("[image]")
            return
        if tag in _FILE_TAGS:
            ref = self.text(value.get("name") or value.get("uri") or value.get("file_id"))
            self.put(f"[file {ref}]" if ref else "[file]")
            return
        if tag in _THINKING_TAGS:
            return  # reasoning is folded away in the views; a summary skips it
        found = False
        for key in _TEXT_KEYS:
            if key in value and not _empty(value[key]):
                found = True
                self.walk(value[key], depth + 1)
        calls = value.get("tool_calls")
        if isinstance(calls, list):
            found = True
            self.walk(calls, depth + 1)
        if not found:
            self.put(self.compact(value))

    def text(self, value: Any) -> str:
        """A name or an argument string as it is; anything else as compact JSON."""
        if value is None:
            return ""
        return value[: self.room()] if isinstance(value, str) else self.compact(value)

    def compact(self, value: Any) -> str:
        """``value`` as compact JSON, cut at the summary's limit."""
        limit = self.limit
        if _small_plain(value, self.room()):
            # The common case (a tool's few arguments): one orjson call, the same text.
            try:
                raw = orjson.dumps(value).decode()
            except TypeError:  # a lone surrogate: the walk below escapes it
                pass
            else:
                return raw if len(raw) <= limit else raw[: limit - 1] + "…"
        out: list[str] = []
        size = 0
        # Its own set of open containers, without ``value`` itself (a mapping with
        # no text is shown whole): the generator may be left unfinished.
        walking, self.active = self.active, self.active - {id(value)}
        try:
            for piece in self.json(value, 0):
                out.append(piece)
                size += len(piece)
                if size > limit:
                    break
        finally:
            self.active = walking
        raw = "".join(out)
        return raw if len(raw) <= limit else raw[: limit - 1] + "…"

    def json(self, value: Any, depth: int) -> Iterator[str]:
        """The pieces of ``value`` as compact JSON, produced only as far as they are read."""
        self.budget -= 1
        if self.budget < 0:
            yield "…"
            return
        if value is None:
            yield "null"
        elif isinstance(value, str):
            yield self.string(value)
        elif isinstance(value, bool):
            yield "true" if value else "false"
        elif isinstance(value, int):
            yield _int_text(value)
        elif isinstance(value, float):
            yield orjson.dumps(float(value)).decode()
        elif isinstance(value, bytes | bytearray | memoryview):
            yield self.string(self.bytes_text(value))
        elif depth >= MAX_DEPTH or id(value) in self.active:
            yield "…"
        elif isinstance(value, list | tuple | Set | Mapping):
            yield from self.json_container(value, depth)
        else:
            yield from self.json_container(_typed(value), depth)

    def json_container(self, value: Any, depth: int) -> Iterator[str]:
        if isinstance(value, Mapping):
            self.active.add(id(value))
            yield "{"
            for index, (key, item) in enumerate(value.items()):
                key_text = key if isinstance(key, str) else "".join(self.json(key, depth + 1))
                yield f"{',' if index else ''}{self.string(key_text)}:"
                yield from self.json(item, depth + 1)
            yield "}"
            self.active.discard(id(value))
        elif isinstance(value, list | tuple | Set):
            self.active.add(id(value))
            yield "["
            for index, item in enumerate(value):
                if index:
                    yield ","
                yield from self.json(item, depth + 1)
            yield "]"
            self.active.discard(id(value))
        else:
            yield self.string(self.object_text(value))

    def string(self, text: str) -> str:
        """A JSON string literal of (the start of) ``text``."""
        text = text[: self.room()]
        try:
            return orjson.dumps(text).decode()
        except TypeError:  # a lone surrogate: the standard library escapes it
            return json.dumps(text)

    def bytes_text(self, value: bytes | bytearray | memoryview) -> str:
        """The start of ``value`` as a bytes literal, and its size when it was cut."""
        try:
            head = bytes(value[: self.room()])
            size = value.nbytes if isinstance(value, memoryview) else len(value)
        except Exception:  # a memoryview of several dimensions, a released one
            return f"<{_type_name(value)}>"
        return repr(head) if size <= len(head) else f"{head!r}… ({size} bytes)"

    def object_text(self, value: Any) -> str:
        """``str(value)`` (cut), or ``<its type>`` when it has none."""
        try:
            text = str(value)
        except Exception:
            return f"<{_type_name(value)}>"
        return text[: self.room()]


_SMALL_VALUES = 48
_INT_RANGE = range(-(2**63), 2**64)


def _small_plain(value: Any, chars: int) -> bool:
    """Whether ``value`` is plain JSON with few values and little text.

    Dicts with string keys, lists, tuples and exact scalar types, at most
    :data:`_SMALL_VALUES` values and ``chars`` characters of text: orjson
    dumps such a value whole faster than the walk, with the same result. A
    cycle never passes (it has no end to count to).
    """
    stack = [value]
    seen = 0
    while stack:
        item = stack.pop()
        seen += 1
        kind = type(item)
        if seen > _SMALL_VALUES:
            return False
        if kind is str:
            chars -= len(item)
            if chars < 0:
                return False
        elif kind is dict:
            if len(item) > _SMALL_VALUES:
                return False
            for key, inner in item.items():
                if type(key) is not str:
                    return False
                chars -= len(key)
                stack.append(inner)
        elif kind is list or kind is tuple:
            if len(item) > _SMALL_VALUES:
                return False
            stack.extend(item)
        elif kind is int:
            if item not in _INT_RANGE:
                return False
        elif not (kind is float or kind is bool or item is None):
            return False
    return True


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | tuple | Mapping) and not value)
