"""What a person calls a run: its agent, its models, the first words of its prompt.

A run's ID is a random hex string; the viewer names a run by what it was
asked (the first user message it committed, or the prompt its first model
call was sent) and the models that answered, so a session's runs and a
report's tabs read as a list of tasks rather than of IDs. Only a few
records are read, once per run until it grows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import events as ev
from ._preview import preview, snippet

if TYPE_CHECKING:
    from ._timeline import RunTimeline

__all__ = ["PROMPT_CHARS", "run_names"]

PROMPT_CHARS = 80
"""The first words of a prompt a run is named by."""
_COMMITS_READ = 20
"""Committed messages read at most, from the run's first, to find its first user message."""
_MODELS_LISTED = 4
_INJECTED = ("<", "[", "Caveat:", "# AGENTS.md")
"""How text an agent wrapped around the user's request begins (``<environment_context>``,
``[Request interrupted by user]``, ...): not what a person asked."""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _first_prompt(run: RunTimeline) -> str | None:
    reader = run.reader
    if reader is None:
        return None
    wrapped: str | None = None
    for seq in run.committed[:_COMMITS_READ]:
        record = reader(seq)
        message = _mapping(_mapping(None if record is None else record.get("data")).get("message"))
        if (message.get("role") or message.get("$ls")) in ("user", "human"):
            text = snippet(message.get("content"), PROMPT_CHARS)
            if text and not text.startswith(_INJECTED):
                return text
            wrapped = wrapped or text or None
    if wrapped is not None:
        return wrapped  # only context an agent wrapped in tags: better than the ID
    # A host that commits nothing: the prompt its first model call was sent.
    for bar in run.bars.values():
        if bar.execution.kind == "model" and bar.input_seq is not None:
            record = reader(bar.input_seq)
            if record is not None and record.get("type") == ev.MODEL_REQUEST:
                prompt = preview(ev.MODEL_REQUEST, _mapping(record.get("data")))
                if prompt:
                    return prompt[:PROMPT_CHARS]
            break
    return None


def run_names(run: RunTimeline) -> dict[str, Any]:
    """``prompt`` (the first words of what the run was asked) and ``models`` (that answered).

    Cached on the run until it grows.
    """
    stamp = (len(run.bars), run.seq_last)
    cached = run.names
    if cached is not None and cached[0] == stamp:
        return cached[1]
    models: dict[str, None] = {}
    for bar in run.bars.values():
        model = bar.response_model or bar.model
        if model and len(models) < _MODELS_LISTED:
            models[model] = None
    names = {"prompt": _first_prompt(run), "models": list(models)}
    run.names = (stamp, names)
    return names
