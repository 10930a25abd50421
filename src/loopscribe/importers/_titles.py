"""A session's title from the first thing its user asked (or the agent's own summary)."""

from __future__ import annotations

import re
from typing import Any

TITLE_CHARS = 72
"""A title longer than this is cut (at a word) and ends with an ellipsis."""


_AGENTS_MD = "# AGENTS.md instructions for "
"""How Codex 0.5x+ hands the project's AGENTS.md to the model, as a user message."""
_COMMAND_NAME = re.compile(r"<command-name>\s*([^<]+?)\s*</command-name>")
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)


def title_text(value: Any) -> str | None:
    """A one-line title from a message's text, or ``None`` when it has none worth showing.

    Text in brackets first (an agent's wrapped context or command output, such
    as ``<environment_context>``, ``[Request interrupted by user]`` or Codex's
    ``# AGENTS.md instructions for …``) is not what the user asked, so it
    gives no title; a Claude Code slash command
    (``<command-name>/init</command-name>`` and its ``<command-args>``) is
    titled by its name and arguments.
    """
    if isinstance(value, list):
        value = next(
            (
                b.get("text")
                for b in value
                if isinstance(b, dict) and isinstance(b.get("text"), str)
            ),
            None,
        )
    if not isinstance(value, str):
        return None
    command = _COMMAND_NAME.search(value)
    if command is not None:  # a Claude Code slash command: its name and arguments
        args = _COMMAND_ARGS.search(value)
        value = command.group(1) + (" " + args.group(1) if args is not None else "")
    marker = "## My request for Codex:"  # the IDE extension puts its context first
    if marker in value:
        value = value.split(marker, 1)[1]
    text = " ".join(value.split())
    if not text or text.startswith(("<", "[", "Caveat:", _AGENTS_MD)):
        return None
    if len(text) <= TITLE_CHARS:
        return text
    cut = text[:TITLE_CHARS].rsplit(" ", 1)[0] or text[:TITLE_CHARS]
    return cut.rstrip(" ,.;:") + "…"
