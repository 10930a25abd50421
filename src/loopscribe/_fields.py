"""Reading labels from record data, whatever shape it has.

Live observers see typed objects (``AssistantMessage``, ``Usage``) and
``orjson.Fragment`` config; a replay sees the same fields as raw JSON; hosts
record plain dicts in OpenAI, Anthropic or Gemini shapes. These helpers read
a field by name from any of them, so the bridge and the workspace summaries
agree on what a record says.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from . import events as ev
from ._messages import BUILTIN_TYPES, Usage

_SCALARS = (str, bytes, int, float, bool, list, tuple)
_MESSAGE_TYPES = frozenset(BUILTIN_TYPES)
"""loopscribe's own message types: fields read as attributes, no ABC check."""
_Fragment = orjson.Fragment


def plain(value: Any) -> Any:
    """The value itself, or the parsed JSON of an ``orjson.Fragment``."""
    if type(value) is _Fragment:  # a final type: no subclass to look for
        # Pre-encoded JSON: what replay will see once it is parsed from the file.
        try:
            return orjson.loads(orjson.dumps(value))
        except orjson.JSONDecodeError:
            return None
    return value


def field(obj: Any, name: str) -> Any:
    """A field of a dataclass/object or a key of a mapping; ``None`` when absent."""
    kind = type(obj)
    if kind is dict:  # the common cases first: no ABC check
        return plain(obj.get(name))
    if kind in _MESSAGE_TYPES:
        return plain(getattr(obj, name, None))
    if obj is None or isinstance(obj, _SCALARS):
        return None
    if isinstance(obj, Mapping):
        value = obj.get(name)
    else:
        try:
            value = getattr(obj, name, None)
        except Exception:
            return None
    return plain(value)


def text(value: Any) -> str | None:
    """A non-empty string, else ``None``."""
    return value if isinstance(value, str) and value else None


def count(value: Any) -> int | None:
    """A non-negative int (not a bool), else ``None``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


@dataclass(slots=True)
class TokenUsage:
    """Token counts of one model call; ``None`` where the provider gave none."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read: int | None = None
    cache_creation: int | None = None
    reasoning: int | None = None


def token_usage(usage: Any) -> TokenUsage | None:
    """Token counts from loopscribe's Usage, OpenAI, Anthropic or Gemini shapes."""
    if usage is None:
        return None
    if type(usage) is Usage:
        # loopscribe's own: its fields are the names read first below.
        counts = (
            count(usage.input_tokens),
            count(usage.output_tokens),
            count(usage.cache_read_tokens),
            count(usage.cache_write_tokens),
            count(usage.reasoning_tokens),
        )
        return None if counts == (None,) * 5 else TokenUsage(*counts)
    inp = count(field(usage, "input_tokens"))
    if inp is None:
        inp = count(field(usage, "prompt_tokens"))
    if inp is None:
        inp = count(field(usage, "prompt_token_count"))
    out = count(field(usage, "output_tokens"))
    if out is None:
        out = count(field(usage, "completion_tokens"))
    if out is None:
        out = count(field(usage, "candidates_token_count"))
    cache_read = count(field(usage, "cache_read_tokens"))
    cache_creation = count(field(usage, "cache_write_tokens"))
    anthropic_read = count(field(usage, "cache_read_input_tokens"))
    anthropic_creation = count(field(usage, "cache_creation_input_tokens"))
    if anthropic_read is not None or anthropic_creation is not None:
        # Anthropic counts cached prompt tokens apart from input_tokens; the
        # conventions' input_tokens includes them.
        cache_read, cache_creation = anthropic_read, anthropic_creation
        if inp is not None:
            inp += (anthropic_read or 0) + (anthropic_creation or 0)
    if cache_read is None:
        details = field(usage, "prompt_tokens_details") or field(usage, "input_tokens_details")
        cache_read = count(field(details, "cached_tokens"))
    reasoning = count(field(usage, "reasoning_tokens"))
    if reasoning is None:
        details = field(usage, "completion_tokens_details") or field(usage, "output_tokens_details")
        reasoning = count(field(details, "reasoning_tokens"))
    if reasoning is None:
        reasoning = count(field(usage, "thoughts_token_count"))
    if (inp, out, cache_read, cache_creation, reasoning) == (None,) * 5:
        return None
    return TokenUsage(inp, out, cache_read, cache_creation, reasoning)


@dataclass(slots=True)
class ResponseLabels:
    """What a ``model_exec_end`` record says about the response, never its body."""

    message: Any
    model: str | None
    provider: str | None
    usage: TokenUsage | None
    response_id: str | None = None


def response_labels(data: Mapping[str, Any]) -> ResponseLabels:
    """The response's model, provider and usage, from the record or its (partial) message."""
    message = plain(data.get("message"))
    if message is None:
        message = plain(data.get("partial_message"))
    usage = token_usage(plain(data.get("usage")))
    return ResponseLabels(
        message,
        text(plain(data.get("model"))) or text(field(message, "model")),
        text(plain(data.get("provider"))) or text(field(message, "provider")),
        usage if usage is not None else token_usage(field(message, "usage")),
        text(plain(data.get("response_id"))) or text(field(message, "response_id")),
    )


# The conventions' well-known ``gen_ai.provider.name`` values, and the names
# frameworks and SDKs use for them. Checked in order: more specific first.
_PROVIDER_ALIASES: tuple[tuple[str, str], ...] = (
    ("azure.ai.inference", "azure.ai.inference"),
    ("azure_ai_inference", "azure.ai.inference"),
    ("azure", "azure.ai.openai"),
    ("bedrock", "aws.bedrock"),
    ("vertex", "gcp.vertex_ai"),
    ("gemini", "gcp.gemini"),
    ("google-gla", "gcp.gemini"),
    ("google_genai", "gcp.gemini"),
    ("google-genai", "gcp.gemini"),
    ("gcp.gen_ai", "gcp.gen_ai"),
    ("google", "gcp.gen_ai"),
    ("openai", "openai"),
    ("anthropic", "anthropic"),
    ("claude", "anthropic"),
    ("mistral", "mistral_ai"),
    ("cohere", "cohere"),
    ("deepseek", "deepseek"),
    ("groq", "groq"),
    ("perplexity", "perplexity"),
    ("xai", "x_ai"),
    ("x_ai", "x_ai"),
    ("grok", "x_ai"),
    ("watsonx", "ibm.watsonx.ai"),
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_NAME = re.compile(r"[^a-z0-9._]+")


def provider_name(value: Any) -> str | None:
    """``gen_ai.provider.name`` for a recorded provider: a well-known value when one fits.

    ``"openai"``, ``"OpenAIChatModel"``, ``"openai.responses"`` and
    ``"ChatOpenAI"`` all become ``openai``; ``"google-vertex"`` becomes
    ``gcp.vertex_ai``; ``"bedrock"`` becomes ``aws.bedrock``. A name the
    conventions do not list is kept as a lowercase snake_case identifier
    (``"MyLabModel"`` becomes ``my_lab``), never a class name.
    """
    raw = text(value)
    return None if raw is None else _provider_name(raw)


@functools.lru_cache(maxsize=256)
def _provider_name(raw: str) -> str | None:
    """:func:`provider_name` of a non-empty string, cached: few names recur on every call."""
    lowered = raw.lower()
    for alias, name in _PROVIDER_ALIASES:
        if alias in lowered:
            return name
    snake = _CAMEL.sub("_", raw.strip()).lower()
    for affix in ("chat_", "_chat_model", "_model", "_chat", "_llm", "_provider", "_client"):
        if snake.startswith(affix) and affix.endswith("_"):
            snake = snake[len(affix) :]
        elif snake.endswith(affix) and affix.startswith("_"):
            snake = snake[: -len(affix)]
    snake = _NOT_NAME.sub("_", snake).strip("_.")
    return snake or None


def number(value: Any) -> float | None:
    """A finite int or float (not a bool) as a float, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def integer(value: Any) -> int | None:
    """An int (not a bool), or a float with an integral value, else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def strings(value: Any) -> tuple[str, ...]:
    """A string or a list of strings as a tuple of the non-empty strings."""
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list | tuple):
        return tuple(item for item in value if isinstance(item, str) and item)
    return ()


@dataclass(slots=True)
class RequestParams:
    """The sampling parameters of a model request: small labels, never a body."""

    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    top_k: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    stop_sequences: tuple[str, ...] = ()
    seed: int | None = None
    choice_count: int | None = None


_PARAM_FIELDS: dict[str, str] = {
    "temperature": "temperature",
    "max_tokens": "max_tokens",
    "max_output_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "max_new_tokens": "max_tokens",
    "top_p": "top_p",
    "top_k": "top_k",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "stop_sequences": "stop_sequences",
    "stop": "stop_sequences",
    "seed": "seed",
    "n": "choice_count",
    "candidate_count": "choice_count",
    "choice_count": "choice_count",
}
"""Every config key :func:`request_params` reads, and the parameter it gives; where
several name one parameter, the first given (in this order) wins."""
_PARAM_RANK = {name: rank for rank, name in enumerate(_PARAM_FIELDS)}
_NO_RANK = len(_PARAM_RANK)
_PARAM_KINDS: dict[str, Any] = {
    "temperature": number,
    "max_tokens": integer,
    "top_p": number,
    "top_k": number,
    "frequency_penalty": number,
    "presence_penalty": number,
    "stop_sequences": strings,
    "seed": integer,
    "choice_count": integer,
}
"""How each parameter's value is read."""


def request_params(config: Any) -> RequestParams | None:
    """The parameters of a request's ``config`` (a mapping, a Fragment or an object).

    OpenAI, Anthropic and Gemini spellings are read alike: ``max_tokens``,
    ``max_output_tokens``, ``max_completion_tokens``; ``stop``,
    ``stop_sequences``; ``n``, ``candidate_count``. ``None`` when the config
    names none of them.
    """
    config = plain(config)
    if config is None or isinstance(config, _SCALARS):
        return None
    found: dict[str, Any] = {}
    if isinstance(config, dict | Mapping):
        # Only the keys the config has (most configs name two or three of them);
        # where several spell one parameter, the first in _PARAM_FIELDS wins.
        ranks: dict[str, int] = {}
        for name in config:
            rank = _PARAM_RANK.get(name) if type(name) is str else None
            if rank is None:
                continue
            value = plain(config[name])
            param = _PARAM_FIELDS[name]
            if value is not None and rank < ranks.get(param, _NO_RANK):
                ranks[param] = rank
                found[param] = value
    else:
        for name, param in _PARAM_FIELDS.items():
            if param not in found:
                value = field(config, name)
                if value is not None:
                    found[param] = value
    params = RequestParams()
    empty = True
    for param, raw in found.items():
        value = _PARAM_KINDS[param](raw)
        if value is not None and value != ():
            empty = False
        setattr(params, param, value)
    return None if empty else params


NAME_FIELDS: tuple[str, ...] = ("name", "node", "agent", "guardrail")
"""Record fields that name a non-GenAI execution (a graph node, a chain, a guardrail)."""


def node_name(data: Mapping[str, Any]) -> str | None:
    """The name a record gives its execution (a node's, a chain's), if any."""
    for key in NAME_FIELDS:
        name = text(plain(data.get(key)))
        if name is not None:
            return name
    return None


def span_name(
    kind: str, *, model: str | None, tool: str | None, agent: str | None, node: str | None
) -> str:
    """An execution's span name: low-cardinality, never an ID.

    ``chat {model}``, ``execute_tool {tool}``, ``invoke_agent {agent}``; any
    other kind is named by its node's name, else by the kind (``turn``).
    """
    if kind == "model":
        return f"chat {model}" if model else "chat"
    if kind == "tool":
        return f"execute_tool {tool}" if tool else "execute_tool"
    if kind == "agent":
        return f"invoke_agent {agent}" if agent else "invoke_agent"
    return node or kind


TYPED_FIELDS: Mapping[str, tuple[str, ...]] = {
    ev.MESSAGE_START: ("message",),
    ev.MESSAGE_END: ("message",),
    ev.MODEL_REQUEST: ("messages",),
    ev.MODEL_ROUTE: ("partial_message",),
    ev.MODEL_RESPONSE: ("message",),
    ev.MODEL_EXEC_END: ("message", "partial_message"),
    ev.CONTEXT_TRANSFORM_END: ("artifacts",),
    ev.AGENT_END: ("artifacts",),
}
"""The data fields of each record type that hold messages (or a list of them) or,
for ``artifacts``, artifacts by name: the typed positions of the vocabulary."""


def typed_positions(record: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """The typed positions of a record's line object, as ``(where, value)`` pairs.

    Every other field of a record is data: tool arguments and output,
    details, provider state, config, a host type's own fields. See
    ``Codec.check_typed`` for what a typed position may hold.
    """
    names = TYPED_FIELDS.get(record["type"])
    data = record.get("data")
    if names is None or not isinstance(data, Mapping):
        return
    for name in names:
        value = data.get(name)
        if value is None:
            continue
        if name == "artifacts" and isinstance(value, Mapping):
            for key, item in value.items():
                yield f"data.artifacts[{key!r}]", item
        else:
            yield f"data.{name}", value
