"""Request freezing: detach what the host may mutate, drop secrets, pin JSON config.

A ``model_request`` describes the executor boundary after middleware: the
messages, the tool declarations and the resolved per-call config. Before it
is published it is *frozen*:

* message and tool containers are copied into tuples, so later host
  mutation of its lists does not change what observers see;
* credentials (``api_key``, ``authorization``, ``*_secret``, ``*_token``, ...)
  are removed from the config, at any depth;
* JSON-valued config fields (dicts and lists, such as ``tool_choice`` or
  ``response_format``) are serialized once, now, and kept as raw JSON;
* a value that cannot be encoded becomes ``{"snapshot_error": ...}``, a
  diagnostic that names the type and never keeps the value itself.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from ._codec import DEFAULT_CODEC, Codec
from ._codec import snapshot_error as _snapshot_error
from ._errors import EncodeError

_SECRET_NAMES = frozenset(
    {
        "apikey",
        "xapikey",
        "authorization",
        "proxyauthorization",
        "credential",
        "credentials",
        "password",
        "passwd",
        "secret",
        "cookie",
        "setcookie",
        "privatekey",
        "bearer",
    }
)
_SECRET_SUFFIXES = ("apikey", "secret", "password", "token", "secretkey", "accesskey")
_SEPARATORS = re.compile(r"[-_.\s]")


def is_secret_key(key: str) -> bool:
    """Whether a config key names a credential (compared without case and separators)."""
    norm = _SEPARATORS.sub("", key).lower()
    return norm in _SECRET_NAMES or norm.endswith(_SECRET_SUFFIXES)


def strip_secrets(value: Any) -> Any:
    """A copy of ``value`` with every credential-named mapping key removed, at any depth."""
    if isinstance(value, Mapping):
        return {
            k: strip_secrets(v)
            for k, v in value.items()
            if not (isinstance(k, str) and is_secret_key(k))
        }
    if isinstance(value, list | tuple):
        return [strip_secrets(v) for v in value]
    return value


def snapshot_error(value: Any, exc: BaseException) -> dict[str, str]:
    """The diagnostic that replaces a value which cannot be recorded.

    It names the value's type and the failure's type, never the value itself.
    """
    return _snapshot_error(value, type(exc).__name__)


def _config_items(config: Any) -> Iterable[tuple[str, Any]]:
    if config is None:
        return ()
    if isinstance(config, Mapping):
        return config.items()
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return ((f.name, getattr(config, f.name)) for f in dataclasses.fields(config))
    raise TypeError(
        f"request config must be a mapping or a dataclass instance, got {type(config).__name__}"
    )


class FrozenConfig(dict[str, Any]):
    """A config that went through :func:`freeze_config`: freezing it again is a no-op."""

    __slots__ = ()


def freeze_config(config: Any, codec: Codec = DEFAULT_CODEC) -> dict[str, Any]:
    """Freeze a per-call config: secrets removed, JSON values pinned, bad values diagnosed.

    Args:
        config: A mapping or a dataclass instance (``None`` gives ``{}``).
        codec: Used for values of registered types inside JSON-valued fields.

    Returns:
        A new dict; JSON-valued fields are ``orjson.Fragment`` (raw JSON).
    """
    if type(config) is FrozenConfig:
        return config
    frozen = FrozenConfig()
    for key, value in _config_items(config):
        if is_secret_key(key) or value is None:
            continue
        if isinstance(value, str | bool | int | float | orjson.Fragment):
            frozen[key] = value
            continue
        try:
            frozen[key] = orjson.Fragment(codec.dumps(strip_secrets(value), strict=True))
        except (EncodeError, TypeError, ValueError) as exc:
            frozen[key] = snapshot_error(value, exc)
    return frozen


def freeze_request(
    messages: Iterable[Any],
    tools: Iterable[Any] = (),
    config: Any = None,
    codec: Codec = DEFAULT_CODEC,
) -> dict[str, Any]:
    """The ``model_request`` payload: detached messages and tools, frozen config."""
    return {
        "messages": tuple(messages),
        "tools": tuple(tools),
        "config": freeze_config(config, codec),
    }
