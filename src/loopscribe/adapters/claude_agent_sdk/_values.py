"""Any entry as JSON text that loads back equal: what JSON cannot hold, tagged.

Most entries the SDK mirrors are plain JSON objects, which the store keeps as
they are inside a record. The rest are kept as the text :func:`dumps` writes,
which :func:`loads` reads back equal, so ``load`` returns what was appended:

* a string with a lone surrogate (UTF-8 cannot hold one, so neither can the
  session file): ``{"$sdk": "str", "parts": ["text", 55296, "more text"]}``,
  each surrogate as its code point and the text around it as it is (so a
  ``redact=`` pattern still finds a secret in it);
* an integer beyond 64 bits: ``{"$sdk": "int", "hex": "-0x1f..."}``;
* ``inf``, ``-inf`` and ``nan``: ``{"$sdk": "float", "value": "inf"}``;
* a dict whose keys are not all strings JSON can hold (``int``, ``float``,
  ``bool`` or ``None`` keys, a key with a lone surrogate), or that uses the
  key ``"$sdk"`` itself: ``{"$sdk": "dict", "k0": <key>, "v0": <value>, ...}``
  in its order, each key and value tagged as needed.

What does not come back as it went in, as with the session codec:

* a tuple comes back as a list (a JSON array); ``datetime``, ``date``,
  ``time``, ``UUID`` and an ``Enum`` member come back as the JSON value
  orjson writes for them (an ISO 8601 string, the UUID's string, the
  member's value);
* a value with no JSON form (``bytes``, a set, an object of another class),
  a dict with a key of another type, a container nested deeper than
  :data:`MAX_DEPTH` levels and one that contains itself are each replaced,
  for that value alone, by the codec's ``{"snapshot_error": ...}``
  diagnostic, which names the type and never keeps the value.

The text nests at most :data:`MAX_DEPTH` + 1 levels, which Python's ``json``
writes and reads on any thread with the default recursion limit.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

from ..._codec import snapshot_error

__all__ = ["MAX_DEPTH", "dumps", "has_non_finite", "loads", "lower", "restore"]

TAG = "$sdk"
MAX_DEPTH = 400
"""Containers nested deeper are kept as ``snapshot_error`` diagnostics."""
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
"""The integers orjson, and so the session codec, writes exactly."""
_KEY_TYPES = (str, int, float)
_SURROGATE = re.compile("([\ud800-\udfff])")


def _utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def lower(value: Any) -> Any:
    """``value`` as plain JSON values (valid strings, 64-bit integers, finite floats), tagged.

    The result is what :func:`dumps` writes; :func:`restore` is its inverse.
    """
    return _lower(value, 0, set())


def _lower(value: Any, depth: int, inside: set[int]) -> Any:
    """``inside``: the ids of the containers around ``value``, to find one that holds itself.

    One frame per level of nesting (no comprehensions), so :data:`MAX_DEPTH`
    levels stay well within the default recursion limit.
    """
    kind = type(value)
    if kind is str:
        if _utf8(value):
            return value
        parts: list[str | int] = []
        for index, part in enumerate(_SURROGATE.split(value)):
            if index % 2:
                parts.append(ord(part))
            elif part:
                parts.append(part)
        return {TAG: "str", "parts": parts}
    if value is None or kind is bool:
        return value
    if kind is int:
        return value if _INT_MIN <= value <= _INT_MAX else {TAG: "int", "hex": hex(value)}
    if kind is float:
        return value if math.isfinite(value) else {TAG: "float", "value": repr(value)}
    if isinstance(value, dict | list | tuple):
        if depth >= MAX_DEPTH:
            return snapshot_error(value, f"nested deeper than {MAX_DEPTH} levels")
        if id(value) in inside:
            return snapshot_error(value, "contains itself")
        inside.add(id(value))
        depth += 1
        try:
            if not isinstance(value, dict):
                items: list[Any] = []
                for item in value:
                    items.append(_lower(item, depth, inside))
                return items
            if TAG not in value and all(type(k) is str and _utf8(k) for k in value):
                plain: dict[str, Any] = {}
                for key, item in value.items():
                    plain[key] = _lower(item, depth, inside)
                return plain
            flat: dict[str, Any] = {TAG: "dict"}
            for index, (key, item) in enumerate(value.items()):
                if key is not None and not isinstance(key, _KEY_TYPES):
                    return snapshot_error(value, f"a key of type {type(key).__name__}")
                flat[f"k{index}"] = _lower(key, depth, inside)
                flat[f"v{index}"] = _lower(item, depth, inside)
            return flat
        finally:
            inside.discard(id(value))
    # Subclasses (IntEnum, a str Enum, ...): their plain value, as orjson writes it.
    if isinstance(value, str):
        return _lower(str.__str__(value), depth, inside)
    if isinstance(value, int):
        return _lower(int.__int__(value), depth, inside)
    if isinstance(value, float):
        return _lower(float.__float__(value), depth, inside)
    try:
        # datetime, UUID, an Enum member: the JSON value orjson (and so the codec) writes.
        return orjson.loads(orjson.dumps(value, option=orjson.OPT_PASSTHROUGH_DATACLASS))
    except TypeError:
        return snapshot_error(value, "no JSON form")


def restore(value: Any) -> Any:
    """The inverse of :func:`lower`; plain JSON without tags comes back as it is.

    Raises:
        ValueError: A tag that :func:`lower` does not write (a damaged text).
    """
    try:
        return _restore(value)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"a damaged {TAG!r} tag ({type(exc).__name__}: {exc})") from None


def _restore(value: Any) -> Any:
    kind = type(value)
    if kind is list:
        items: list[Any] = []
        for item in value:
            items.append(_restore(item))
        return items
    if kind is not dict:
        return value
    tag = value.get(TAG)
    if tag is None:
        plain: dict[str, Any] = {}
        for key, item in value.items():
            plain[key] = _restore(item)
        return plain
    if tag == "str":
        text: list[str] = []
        for part in value["parts"]:
            if type(part) is str:
                text.append(part)
            elif type(part) is int and 0xD800 <= part <= 0xDFFF:
                text.append(chr(part))
            else:
                raise ValueError(f"a string part {part!r:.40} that is no text or surrogate")
        return "".join(text)
    if tag == "int":
        return int(value["hex"], 16)
    if tag == "float":
        number = float(value["value"])
        if math.isfinite(number):
            raise ValueError(f"a finite float {number!r} in a non-finite float tag")
        return number
    if tag == "dict":
        restored: dict[Any, Any] = {}
        for index in range((len(value) - 1) // 2):
            restored[_restore(value[f"k{index}"])] = _restore(value[f"v{index}"])
        return restored
    raise ValueError(f"unknown {TAG!r} tag {tag!r}")


def dumps(value: Any) -> str:
    """``value`` as JSON text that :func:`loads` reads back equal (see the module docs)."""
    try:
        return json.dumps(lower(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        # Only when the caller's own stack is already deep.
        return json.dumps(snapshot_error(value, "nested too deeply for this thread"))


def loads(text: str | bytes) -> Any:
    """Read what :func:`dumps` wrote (or any JSON text).

    Raises:
        ValueError: Not JSON, or a damaged tag.
    """
    try:
        parsed = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None
    return restore(parsed)


def has_non_finite(value: Any) -> bool:
    """Whether ``value`` holds ``inf``, ``-inf`` or ``nan`` (which orjson writes as ``null``).

    For a value orjson could encode, so one that does not contain itself.
    Only containers are pushed: the walk skips the strings that make most
    of an entry.
    """
    stack = [value]
    push, pop = stack.append, stack.pop
    while stack:
        item = pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list | tuple):
            if isinstance(item, float) and not math.isfinite(item):
                return True
            continue
        for child in item:
            kind = type(child)
            if kind is str or kind is int or child is None or kind is bool:
                continue
            if kind is float:
                if child - child != 0.0:  # inf - inf and nan - nan are nan
                    return True
                continue
            push(child)
    return False
