"""The codec: how typed values (messages, artifacts, snapshots) become JSON and back.

A typed value is stored as a JSON object whose first key is ``"$ls"``, naming
its registered type: ``{"$ls": "assistant", "content": [...], ...}``. Plain
JSON values (dicts, lists, strings, numbers, booleans, ``None``) are stored as
they are.

**Data is not an error.** Values come from outside (tool output, web pages,
provider bodies), so nothing in a value stops a record:

* A plain dict that uses the key ``"$ls"`` itself is *escaped*: it is
  written as ``{"$ls": "$dict", ...}`` with each of its keys made of one or
  more ``$`` followed by ``ls`` given one more ``$`` (``"$ls"`` becomes
  ``"$$ls"``, ``"$$ls"`` becomes ``"$$$ls"``). Reading strips the marker and
  one ``$`` again, so the dict reads back equal and is never taken for a
  typed value. Type names starting with ``$`` are reserved for this.
* A value JSON cannot hold (an int beyond 64 bits, nesting deeper than
  :data:`MAX_DEPTH`, ``bytes``, a ``set``, a ``str`` with a lone surrogate, a
  dict with a non-string key, an object of an unregistered class) is
  replaced, for that value alone, by ``{"snapshot_error": ...}``, a
  diagnostic that names its type and never keeps the value.
* Except in a *typed position* (see :meth:`Codec.check_typed`): there an
  object of an unregistered class is the host's set-up mistake, not data,
  and :meth:`Codec.dumps` raises :class:`UnknownTypeError` instead of
  lowering away the application's type.
* ``datetime``, ``date`` and ``time`` are stored as ISO 8601 strings,
  ``UUID`` as its canonical string, an ``Enum`` member as its value: they read
  back as those plain values, not as the original type. Register a type to
  get it back typed.

The fast path is one ``orjson.dumps``; the walk that escapes and diagnoses
runs only for the rare value that needs it.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
from collections.abc import Callable, Iterable, Mapping
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

ESCAPE = "$dict"
"""The tag of an escaped plain dict that uses the reserved key itself."""
MAX_DEPTH = 253
"""Containers nested deeper are recorded as ``snapshot_error`` (orjson writes 254 levels)."""
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1

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
    # Each typed value wrote one key, so the line holds at least ``tags`` of
    # them, and exactly that many when it has no other "$". Dropping the "$"
    # bytes (memchr and memcpy) counts them ten times faster than bytes.count
    # finds the keys: it checks every byte against the key's last one, ":",
    # which follows every key of the line.
    if len(line) - len(line.replace(b"$", b"")) == tags:
        return True
    return line.count(TAG_KEY_BYTES) == tags


def snapshot_error(value: Any, reason: str) -> dict[str, str]:
    """The diagnostic that replaces a value which cannot be recorded.

    It names the value's type and why it failed, never the value itself.
    """
    kind = type(value)
    return {
        "snapshot_error": (
            f"{reason}: a {kind.__module__}.{kind.__qualname__} value "
            "could not be encoded as JSON and was not recorded"
        )
    }


def _plain(value: Any) -> bool:
    """Whether ``value`` is data rather than an object of some class: a built-in value.

    Subclasses of the JSON types (a ``str`` enum, an ``OrderedDict``) count
    as data: they are stored as the JSON value they are.
    """
    return (
        type(value).__module__ == "builtins"
        or isinstance(value, str | int | float | dict | list | tuple)
        or type(value) is orjson.Fragment
    )


def _unknown(value: Any, where: str) -> UnknownTypeError:
    kind = type(value)
    return UnknownTypeError(
        f"{where} holds a {kind.__module__}.{kind.__qualname__}, which is not registered "
        f"with the codec; call codec.register({kind.__qualname__}) on the Session's codec "
        "before recording it, or record plain JSON values (dicts, lists, strings, numbers)"
    )


def _is_tag_like(key: str) -> bool:
    """Whether ``key`` is ``$ls`` with one or more ``$``: the keys an escape renames."""
    return key.endswith("ls") and key.startswith("$") and key.lstrip("$") == "ls"


def _escape_key(key: str) -> str:
    return "$" + key if _is_tag_like(key) else key


def _unescape_key(key: str) -> str:
    return key[1:] if key.startswith("$$") and _is_tag_like(key) else key


def _encodable_str(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
        if name.startswith("$"):
            raise ValueError(f"codec type name {name!r}: names starting with '$' are reserved")
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

    def dumps(
        self,
        value: Any,
        *,
        newline: bool = False,
        strict: bool = False,
        typed: Callable[[Any], Iterable[tuple[str, Any]]] | None = None,
    ) -> bytes:
        """Encode ``value`` as compact JSON.

        A plain dict using the reserved key is escaped; a value JSON cannot
        hold becomes a ``snapshot_error`` diagnostic for that value alone
        (see the module docstring), unless ``strict``.

        Args:
            value: What to encode.
            newline: End the line with ``\\n``.
            strict: Raise instead of diagnosing a value JSON cannot hold.
            typed: Gives the typed positions of ``value`` as ``(where,
                value)`` pairs; each is checked with :meth:`check_typed`
                before anything is diagnosed. Called only when a value
                needs diagnosing, so it costs nothing on the common path.

        Raises:
            UnknownTypeError: ``strict``, and a value is of an unregistered
                type; or a typed position holds one.
            EncodeError: ``strict``, and anything else JSON cannot hold.
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
            if strict:
                cause = exc.__cause__
                if isinstance(cause, UnknownTypeError):
                    raise UnknownTypeError(str(cause)) from None
                raise EncodeError(f"cannot encode as JSON: {exc}") from None
            if typed is not None:
                # Only an unregistered class fails in a typed position, and only
                # a failed fast path can hold one: check before lowering it away.
                for where, item in typed(value):
                    self.check_typed(item, where)
            return self._dumps_lowered(value, options)
        finally:
            # Restored, so an encoder that calls dumps itself leaves the outer count alone.
            tags = count[0] - start
            count[0] = start
        if not _tag_keys_are(line, tags):
            # A plain dict uses the reserved key: escape it (rare, so walked only now).
            return self._dumps_lowered(value, options)
        return line

    def check_typed(self, value: Any, where: str) -> None:
        """Refuse an object of an unregistered class in a typed position.

        A typed position holds a message (or a list of messages), or an
        artifact: there a value is a registered type, or plain JSON (a dict in
        a provider's shape, a string, a number, a list, ``None``, and other
        built-in values, which are diagnosed as data when JSON cannot hold
        them). The content blocks of a registered message (the items of its
        ``content``) are typed positions too. Anything else is an instance of
        a class the host forgot to register: lowering it would read back as
        something else, so it is an error.

        Args:
            value: The value in the position.
            where: Names the position in the error (``data.message``).

        Raises:
            UnknownTypeError: ``value``, an item of it (a list of messages), or
                a content block of it is of an unregistered class.
        """
        kind = type(value)
        if kind is list or kind is tuple:
            for i, item in enumerate(value):
                self._check_one(item, f"{where}[{i}]")
            return
        self._check_one(value, where)

    def _check_one(self, value: Any, where: str) -> None:
        if type(value) in self._encoders:
            content = getattr(value, "content", None)
            if type(content) is list or type(content) is tuple:
                for i, block in enumerate(content):
                    if not _plain(block) and type(block) not in self._encoders:
                        raise _unknown(block, f"{where}.content[{i}]")
            return
        if not _plain(value):
            raise _unknown(value, where)

    def _dumps_lowered(self, value: Any, options: int) -> bytes:
        """The slow path: walk ``value``, escaping and diagnosing, then encode it."""
        tags = [0]
        lowered = self._lower(value, 0, tags)
        line = orjson.dumps(lowered, option=options)
        if not _tag_keys_are(line, tags[0]):  # pragma: no cover - a walk that missed a case
            raise EncodeError(f"a value could not be escaped for the reserved key {TAG!r}")
        return line

    def _lower(self, value: Any, depth: int, tags: list[int]) -> Any:
        """``value`` as values orjson encodes as they are; typed values expanded.

        ``depth`` counts the containers around ``value``; ``tags`` counts the
        ``"$ls"`` keys written, for the check that nothing was missed.
        """
        kind = type(value)
        if kind is str:
            return value if _encodable_str(value) else snapshot_error(value, "lone surrogate")
        if kind is int:
            if _INT_MIN <= value <= _INT_MAX:
                return value
            return snapshot_error(value, "beyond 64 bits")
        if value is None or kind is bool or kind is float:
            return value
        if kind is orjson.Fragment:
            # Raw JSON written by this codec (frozen config): its tags are counted as they are.
            tags[0] += orjson.dumps(value).count(TAG_KEY_BYTES)
            return value
        encode = self._encoders.get(kind)
        if encode is None and isinstance(value, enum.Enum):
            return self._lower(value.value, depth, tags)
        is_dict = isinstance(value, dict)
        if encode is not None or is_dict or isinstance(value, list | tuple):
            if depth >= MAX_DEPTH and (encode is not None or value):
                return snapshot_error(value, f"nested deeper than {MAX_DEPTH} levels")
            if not (encode is not None or is_dict):
                return [self._lower(item, depth + 1, tags) for item in value]
            if encode is not None:
                try:
                    fields = encode(value)
                except Exception as exc:
                    return snapshot_error(value, f"its encoder raised {type(exc).__name__}")
                escape = False
            else:
                fields = value
                escape = TAG in value
            out: dict[str, Any] = {}
            if encode is not None or escape:
                out[TAG] = fields[TAG] if encode is not None else ESCAPE
                tags[0] += 1
            for raw_key, item in fields.items():
                if not isinstance(raw_key, str):
                    return snapshot_error(value, f"non-string key ({type(raw_key).__name__})")
                key = str(raw_key)
                if not _encodable_str(key):
                    return snapshot_error(value, "lone surrogate in a key")
                if key == TAG and encode is not None:
                    continue
                out[_escape_key(key) if escape else key] = self._lower(item, depth + 1, tags)
            return out
        if isinstance(value, str):
            return self._lower(str(value), depth, tags)
        if isinstance(value, int) and not isinstance(value, bool):
            return self._lower(int(value), depth, tags)
        if isinstance(value, float):
            return float(value)
        try:
            # What orjson encodes natively (datetime, UUID, ...): its JSON form.
            return orjson.Fragment(orjson.dumps(value, option=DUMPS_OPTIONS))
        except orjson.JSONEncodeError:
            plain = isinstance(value, bytes | bytearray | memoryview | set | frozenset | complex)
            reason = "no JSON form" if plain else "not registered with the codec"
            return snapshot_error(value, reason)

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
            if name == ESCAPE:
                # A plain dict that uses the reserved key: unescape, never retype.
                # In place, like typed values: callers may hold the parsed dict.
                budget[0] -= 1
                items = [(_unescape_key(k), v) for k, v in value.items() if k != TAG]
                value.clear()
                value.update(items)
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
