"""The codec: how typed values (messages, artifacts, snapshots) become JSON and back.

A typed value is stored as a JSON object whose first key is ``"$ls"``, naming
its registered type: ``{"$ls": "assistant", "content": [...], ...}``. Plain
JSON values (dicts, lists, strings, numbers, booleans, ``None``) are stored as
they are. Any other object must be registered; an unregistered one raises
:class:`~loopscribe.UnknownTypeError` instead of being lowered to a dict that
would no longer read back as the application's type.

The key ``"$ls"`` is reserved inside recorded data.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import orjson

from ._errors import DecodeError, EncodeError, UnknownTypeError
from ._messages import (
    AssistantMessage,
    FileContent,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)

TAG = "$ls"
TAG_BYTES = b'"$ls"'
TAG_KEY_BYTES = b'"$ls":'

# Dataclasses go to ``default`` so an unregistered one is refused instead of lowered.
DUMPS_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS
_LINE_OPTIONS = DUMPS_OPTIONS | orjson.OPT_APPEND_NEWLINE

T = TypeVar("T")
Encoder = Callable[[Any], Mapping[str, Any]]
TaggedEncoder = Callable[[Any], dict[str, Any]]
Decoder = Callable[[dict[str, Any]], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    cls: type[Any]
    encode: TaggedEncoder
    decode: Decoder


def _tagged_dataclass_encoder(name: str, cls: type[Any]) -> TaggedEncoder:
    """A generated ``encode(obj) -> {"$ls": name, field: value, ...}``.

    Generated like ``dataclasses`` generates ``__init__``: a dict display is
    several times faster than a loop of ``getattr`` calls, and this runs once
    per typed value on the recording path.
    """
    fields = ", ".join(f"{f.name!r}: o.{f.name}" for f in dataclasses.fields(cls))
    namespace: dict[str, Any] = {}
    exec(f"def encode(o):\n    return {{{TAG!r}: {name!r}, {fields}}}", namespace)
    encoder: TaggedEncoder = namespace["encode"]
    return encoder


def _tagged_custom_encoder(name: str, encode: Encoder) -> TaggedEncoder:
    def tagged(obj: Any) -> dict[str, Any]:
        out: dict[str, Any] = {TAG: name}
        out.update(encode(obj))
        return out

    return tagged


def _dataclass_decoder(cls: type[Any]) -> Decoder:
    """A generated ``decode(fields) -> cls`` for the read path.

    For the common case (every required field present, no unknown key) it
    fills the instance's fields directly, skipping a frozen dataclass's
    ``__init__``, which sets each field through ``object.__setattr__``. Any
    other input goes through ``cls(**fields)``, so errors read as usual.
    JSON has no tuples: fields annotated as tuples get theirs back.
    """
    fields = dataclasses.fields(cls)
    names = frozenset(f.name for f in fields)
    required = frozenset(
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    tuples = tuple(f.name for f in fields if "tuple" in str(f.type).lower())
    slotted = "__slots__" in cls.__dict__ and "__post_init__" not in cls.__dict__
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls, "MISSING": dataclasses.MISSING}
    lines = ["def fast(d):", "    o = new(cls)"]
    for i, f in enumerate(fields):
        namespace[f"set_{i}"] = getattr(cls, f.name).__set__ if slotted else None
        if f.name in required:
            value = f"d[{f.name!r}]"
        elif f.default is not dataclasses.MISSING:
            namespace[f"default_{i}"] = f.default
            value = f"d.get({f.name!r}, default_{i})"
        else:
            namespace[f"factory_{i}"] = f.default_factory
            value = f"(d[{f.name!r}] if {f.name!r} in d else factory_{i}())"
        lines.append(f"    set_{i}(o, {value})")
    lines.append("    return o")
    if slotted:
        exec("\n".join(lines), namespace)
    fast: Decoder | None = namespace.get("fast")

    def decode(fields: dict[str, Any]) -> Any:
        for name in tuples:
            value = fields.get(name)
            if type(value) is list:
                fields[name] = tuple(value)
        if fast is not None and required <= fields.keys() <= names:
            return fast(fields)
        return cls(**fields)

    return decode


def _tag_keys_are(line: bytes, tags: int) -> bool:
    """Whether ``line`` holds exactly ``tags`` keys ``"$ls"``.

    Inside a JSON string the quotes would be escaped, so every ``"$ls":`` is
    a key; one more than the typed values written is a plain dict using the
    reserved key, which would read back as something else. ``bytes.count``
    reads the line at under 2 GB/s (3 us for 5 KiB); a line without typed
    values, like a large tool result, usually has no ``$`` at all, which
    memchr finds out several times faster.
    """
    if tags == 0:
        return line.find(b"$") < 0 or TAG_KEY_BYTES not in line
    return line.count(TAG_KEY_BYTES) == tags


class Codec:
    """A registry of typed values that can be recorded and read back.

    Every Codec knows loopscribe's built-in messages (``UserMessage``,
    ``AssistantMessage``, ...). Register your own message, artifact and
    snapshot types before recording them, and read files with a codec that
    has the same registrations.

    Example::

        codec = Codec()
        codec.register(MyArtifact)                       # a dataclass
        codec.register(Note, "note", encode=Note.dump, decode=Note.load)
        Session.create(path, codec=codec)
    """

    def __init__(self) -> None:
        self._by_name: dict[str, _Entry] = {}
        self._by_type: dict[type[Any], _Entry] = {}
        self._encoders: dict[type[Any], TaggedEncoder] = {}
        """``_by_type`` reduced to the encoders: one lookup less per typed value."""
        self._lock = threading.Lock()
        # Per thread: orjson's default hook and how many typed values it encoded.
        self._hooks = threading.local()
        for name, cls in (
            ("text", TextContent),
            ("image", ImageContent),
            ("file", FileContent),
            ("thinking", ThinkingContent),
            ("tool_call", ToolCall),
            ("usage", Usage),
            ("system", SystemMessage),
            ("user", UserMessage),
            ("assistant", AssistantMessage),
            ("tool_result", ToolResultMessage),
        ):
            self.register(cls, name)

    def register(
        self,
        cls: type[T],
        name: str | None = None,
        *,
        encode: Callable[[T], Mapping[str, Any]] | None = None,
        decode: Callable[[dict[str, Any]], T] | None = None,
    ) -> None:
        """Make ``cls`` recordable under ``name`` (default: the class name).

        Dataclasses need no ``encode``/``decode``: their fields are stored and
        passed back to the constructor. Other classes must give both.

        Raises:
            ValueError: ``name`` or ``cls`` is registered already, or a
                non-dataclass was given without ``encode`` and ``decode``.
        """
        name = cls.__name__ if name is None else name
        if (encode is None or decode is None) and not dataclasses.is_dataclass(cls):
            raise ValueError(
                f"cannot register {cls.__qualname__}: it is not a dataclass, "
                "so give both encode= and decode="
            )
        enc = (
            _tagged_custom_encoder(name, encode)
            if encode is not None
            else _tagged_dataclass_encoder(name, cls)
        )
        dec: Decoder = decode if decode is not None else _dataclass_decoder(cls)
        with self._lock:
            if name in self._by_name:
                raise ValueError(f"codec type name {name!r} is registered already")
            if cls in self._by_type:
                raise ValueError(f"{cls.__qualname__} is registered already")
            entry = _Entry(name, cls, enc, dec)
            self._by_name[name] = entry
            self._by_type[cls] = entry
            self._encoders[cls] = enc

    def names(self) -> frozenset[str]:
        """The registered type names."""
        return frozenset(self._by_name)

    def default(self, obj: Any) -> dict[str, Any]:
        """orjson's ``default`` hook: encode one typed value, or refuse it."""
        entry = self._by_type.get(type(obj))
        if entry is None:
            kind = type(obj)
            raise UnknownTypeError(
                f"cannot record a {kind.__module__}.{kind.__qualname__}: it is not "
                f"registered with the codec; call codec.register({kind.__qualname__}) "
                "or pass plain JSON values"
            )
        return entry.encode(obj)

    def dumps(self, value: Any, *, newline: bool = False) -> bytes:
        """Encode ``value`` as compact JSON.

        Raises:
            UnknownTypeError: A value is of an unregistered type.
            EncodeError: Anything else that JSON cannot hold.
        """
        options = _LINE_OPTIONS if newline else DUMPS_OPTIONS
        try:
            default, count = self._hooks.hook
        except AttributeError:
            default, count = self._hooks.hook = self._counting_hook()
        start = count[0]
        try:
            line = orjson.dumps(value, default=default, option=options)
        except orjson.JSONEncodeError as exc:
            cause = exc.__cause__
            if isinstance(cause, UnknownTypeError):
                raise UnknownTypeError(str(cause)) from None
            raise EncodeError(f"cannot encode as JSON: {exc}") from None
        finally:
            # Restored, so an encoder that calls dumps itself leaves the outer count alone.
            tags = count[0] - start
            count[0] = start
        if not _tag_keys_are(line, tags):
            raise EncodeError(
                f"a plain dict uses the reserved key {TAG!r}; rename that key "
                "(it marks typed values in session files)"
            )
        return line

    def _counting_hook(self) -> tuple[Callable[[Any], Any], list[int]]:
        """A ``default`` hook for one thread that counts the typed values it encodes."""
        count = [0]
        encoders = self._encoders

        def default(obj: Any) -> dict[str, Any]:
            count[0] += 1
            encode = encoders.get(type(obj))
            return self.default(obj) if encode is None else encode(obj)

        return default, count

    def decode(self, value: Any, tags: int | None = None) -> Any:
        """Turn tagged objects inside a parsed JSON value back into typed values.

        The value is updated in place (tags are removed from it) and returned.

        Args:
            value: Freshly parsed JSON.
            tags: How many typed values it holds, when known (the count of
                ``"$ls":`` in its text): the walk stops once all are decoded,
                so large plain subtrees after them (tool schemas) are skipped.

        Raises:
            DecodeError: A tag names an unregistered type, or its fields do not fit.
        """
        budget = [-1 if tags is None else tags]
        try:
            return self._decode(value, budget)
        except RecursionError:
            # orjson parses ~1024 levels; the walk recurses once per level.
            raise DecodeError(
                "stored value is nested too deeply to decode; read it with decode=False"
            ) from None

    def _decode(self, value: Any, budget: list[int]) -> Any:
        kind = type(value)
        if kind is dict:
            for key, item in value.items():
                if budget[0] == 0:
                    break
                if type(item) is dict or type(item) is list:
                    value[key] = self._decode(item, budget)
            name = value.get(TAG)
            if name is None:
                return value
            entry = self._by_name.get(name) if isinstance(name, str) else None
            if entry is None:
                raise DecodeError(
                    f"stored value has type {name!r}, which this codec does not know; "
                    "read with a Codec that registers it (or decode=False for raw JSON)"
                )
            del value[TAG]  # the dict is the freshly parsed one: reuse it
            budget[0] -= 1
            try:
                return entry.decode(value)
            except Exception as exc:
                raise DecodeError(
                    f"stored {name!r} value does not fit {entry.cls.__qualname__}: {exc}"
                ) from exc
        if kind is list:
            for i, item in enumerate(value):
                if budget[0] == 0:
                    break
                if type(item) is dict or type(item) is list:
                    value[i] = self._decode(item, budget)
        return value

    def loads(self, data: bytes | str) -> Any:
        """Parse JSON and decode the typed values in it."""
        return self.decode(orjson.loads(data))


DEFAULT_CODEC = Codec()
