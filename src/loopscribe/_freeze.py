"""Request freezing: detach what the host may mutate, drop secrets, pin JSON config.

A ``model_request`` describes the executor boundary after middleware: the
messages, the tool declarations and the resolved per-call config. Before it
is published it is *frozen*:

* message and tool containers are copied into tuples, so later host
  mutation of its lists does not change what observers see;
* credentials are removed from the config, at any depth: keys and dataclass
  fields named like one (``api_key``, ``auth``, ``key``, ``authorization``,
  ``passphrase``, ``*_secret``, ``*_token``, ``Ocp-Apim-Subscription-Key``,
  ``x-functions-key``, ...), headers given as ``(name, value)`` pairs or as
  ``{"name": ..., "value": ...}`` mappings with such a name, and the user
  info and secret-named query parameters of URLs (``base_url``);
* JSON-valued config fields (dicts and lists, such as ``tool_choice`` or
  ``response_format``) are serialized once, now, and kept as raw JSON;
* a value that cannot be encoded becomes ``{"snapshot_error": ...}``, a
  diagnostic that names the type and never keeps the value itself.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

from ._codec import DEFAULT_CODEC, Codec
from ._codec import snapshot_error as _snapshot_error
from ._errors import EncodeError

_SECRET_NAMES = frozenset(
    {
        "apikey",
        "xapikey",
        "auth",
        "key",
        "passphrase",
        "authorization",
        "proxyauthorization",
        "credential",
        "credentials",
        "password",
        "passwd",
        "pwd",
        "secret",
        "cookie",
        "setcookie",
        "privatekey",
        "bearer",
        "signature",
        "sig",
    }
)
_SECRET_SUFFIXES = (
    "apikey",  # x-api-key, api-key (Azure), x-goog-api-key, xi-api-key, openai_api_key
    "secret",
    "password",
    "passphrase",
    "token",  # x-auth-token, x-amz-security-token, hf_token
    "secretkey",
    "accesskey",
    "privatekey",
    "subscriptionkey",  # Ocp-Apim-Subscription-Key (Azure API Management)
    "functionskey",  # x-functions-key (Azure Functions)
    "authkey",
    "masterkey",
    "accountkey",
    "signingkey",
    "sessionkey",
    "credentials",
)
_SEPARATORS = re.compile(r"[-_.\s]")
_PAIR_NAMES = ("name", "key", "header")
"""Keys under which ``{"name": ..., "value": ...}`` header mappings give the header's name."""


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Whether a config key names a credential (compared without case and separators).

    Cached: the same few config keys come back on every model call.
    """
    norm = _SEPARATORS.sub("", key).lower()
    return norm in _SECRET_NAMES or norm.endswith(_SECRET_SUFFIXES)


def scrub_url(text: str) -> str:
    """``text`` without the user info and secret-named query parameters of a URL in it.

    ``https://user:pw@host/v1?api-key=K&x=1`` becomes ``https://host/v1?x=1``.
    Text that is not a URL is returned as it is.
    """
    if "://" not in text or not ("@" in text or "?" in text or "#" in text):
        return text
    try:
        parts = urlsplit(text)
        netloc = parts.netloc
    except ValueError:
        return text
    if not parts.scheme or not netloc:
        return text
    if "@" in netloc:
        netloc = netloc.rpartition("@")[2]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, v) for k, v in pairs if not is_secret_key(k)])
    fragment = parts.fragment
    if fragment and "=" in fragment:
        # OAuth implicit flow puts access_token in the fragment.
        pairs = parse_qsl(fragment, keep_blank_values=True)
        fragment = urlencode([(k, v) for k, v in pairs if not is_secret_key(k)])
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def _is_secret_pair(value: Any) -> bool:
    """A header as ``(name, value)`` or ``{"name": name, "value": ...}`` with a secret name."""
    if isinstance(value, list | tuple):
        return len(value) == 2 and isinstance(value[0], str) and is_secret_key(value[0])
    if isinstance(value, Mapping) and "value" in value:
        for field in _PAIR_NAMES:
            name = value.get(field)
            if isinstance(name, str) and is_secret_key(name):
                return True
    return False


def strip_secrets(value: Any, _depth: int = 0) -> Any:
    """A copy of ``value`` with every credential removed, at any depth.

    Removed: mapping keys and dataclass fields with credential names, headers
    given as pairs or as ``{"name": ..., "value": ...}`` mappings with such a
    name, and the user info and secret-named query parameters of URLs.
    Dataclass instances become plain dicts of their remaining fields.
    """
    if _depth > 200:
        return value  # the codec diagnoses what is nested this deep
    if isinstance(value, str):
        return scrub_url(value)
    if isinstance(value, Mapping):
        return {
            k: strip_secrets(v, _depth + 1)
            for k, v in value.items()
            if not (isinstance(k, str) and is_secret_key(k)) and not _is_secret_pair(v)
        }
    if isinstance(value, list | tuple):
        return [strip_secrets(v, _depth + 1) for v in value if not _is_secret_pair(v)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: strip_secrets(getattr(value, f.name), _depth + 1)
            for f in dataclasses.fields(value)
            if not is_secret_key(f.name)
        }
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
        if isinstance(value, str):
            frozen[key] = scrub_url(value)
            continue
        if isinstance(value, bool | int | float | orjson.Fragment):
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
